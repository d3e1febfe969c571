"""Kernel-side peer for posix_semantics.py (tests/system/test_posix.py): a handful of TCP and UDP
services on fixed ports, run on the plain kernel in host a, so that the scenario program sees the
same peer behaviour whether it runs on the kernel or under slipstream.

    python3 posix_peer.py [--bind 198.18.0.1]     prints "ready" once every port listens

TCP 7001 echo (until EOF, then close)     7002 discard        7003 accept, then RST (SO_LINGER 0)
    7004 send 1000 bytes, then close       7005 closed (nothing listens)
    7007 accept and never read (a full receive window for send-buffer tests)
    7008 commands, one line each:
         chunks N K MS     K chunks of N bytes, MS ms apart, then wait for EOF
         delay MS N        sleep MS ms, send N bytes, then wait for EOF
         shutwr N          send N bytes, shutdown(SHUT_WR), read until EOF
         connectback PORT  connect to the client's address at PORT, send "hi", answer "ok" or
                           "err NAME" on the command connection, read until EOF there, close
UDP 7006 echo; a datagram starting with b"other:" is first answered from port 7010, then from 7006.
Data bytes follow pattern(): byte i is i % 251.
"""
import argparse
import errno
import socket
import struct
import sys
import threading
import time

ECHO, DISCARD, RESET, CLOSEAFTER, CLOSED, UDPECHO, HOLD, CMD, UDPOTHER = (
    7001, 7002, 7003, 7004, 7005, 7006, 7007, 7008, 7010)


def pattern(n, start=0):
    return bytes((start + i) % 251 for i in range(n))


def drain(c):
    try:
        while c.recv(65536):
            pass
    except OSError:
        pass


def serve(port, handler, addr, fam=socket.AF_INET):
    ls = socket.socket(fam)
    if fam == socket.AF_INET6:
        ls.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(128)

    def loop():
        while True:
            c, peer = ls.accept()
            threading.Thread(target=run_one, args=(handler, c, peer), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()


def run_one(handler, c, peer):
    try:
        handler(c, peer)
    except OSError:
        pass
    finally:
        try:
            c.close()
        except OSError:
            pass


def h_echo(c, peer):
    while True:
        d = c.recv(65536)
        if not d:
            return
        c.sendall(d)


def h_discard(c, peer):
    drain(c)


def h_reset(c, peer):
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def h_closeafter(c, peer):
    c.sendall(pattern(1000))


def h_hold(c, peer):
    # Never read while the client is there; the client closes when it is done. Poll for its FIN
    # (POLLRDHUP shows with unread data still queued), then let close() reset what is left.
    import select
    p = select.poll()
    p.register(c, select.POLLRDHUP)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if p.poll(200):
            return


def h_cmd(c, peer):
    f = c.makefile("rb")
    line = f.readline().decode().split()
    if not line:
        return
    op, args = line[0], [int(x) for x in line[1:]]
    if op == "chunks":
        n, k, ms = args
        for i in range(k):
            if i:
                time.sleep(ms / 1000)
            c.sendall(pattern(n, i * n))
        drain(c)
    elif op == "delay":
        ms, n = args
        time.sleep(ms / 1000)
        c.sendall(pattern(n))
        drain(c)
    elif op == "shutwr":
        c.sendall(pattern(args[0]))
        c.shutdown(socket.SHUT_WR)
        drain(c)
    elif op == "connectback":
        b = socket.socket(socket.AF_INET6 if ":" in peer[0] else socket.AF_INET)
        try:
            b.settimeout(5)
            b.connect((peer[0], args[0]))
            b.sendall(b"hi")
            c.sendall(b"ok\n")
        except OSError as e:
            c.sendall(f"err {errno.errorcode.get(e.errno, e.errno)}\n".encode())
            b.close()
            return
        b.settimeout(30)
        drain(b)
        b.close()
        drain(c)


def udp(addr, fam=socket.AF_INET):
    u = socket.socket(fam, socket.SOCK_DGRAM)
    u.bind((addr, UDPECHO))
    o = socket.socket(fam, socket.SOCK_DGRAM)
    o.bind((addr, UDPOTHER))

    def loop():
        while True:
            d, src = u.recvfrom(65536)
            if d.startswith(b"other:"):
                o.sendto(d, src)
            u.sendto(d, src)
    threading.Thread(target=loop, daemon=True).start()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bind", default="0.0.0.0")
    ap.add_argument("--bind6", help="also every service on this IPv6 address")
    a = ap.parse_args()
    for port, h in ((ECHO, h_echo), (DISCARD, h_discard), (RESET, h_reset), (CLOSEAFTER, h_closeafter),
                    (HOLD, h_hold), (CMD, h_cmd)):
        serve(port, h, a.bind)
    udp(a.bind)
    if a.bind6:
        for port, h in ((ECHO, h_echo), (DISCARD, h_discard), (RESET, h_reset), (CLOSEAFTER, h_closeafter),
                        (HOLD, h_hold), (CMD, h_cmd)):
            serve(port, h, a.bind6, socket.AF_INET6)
        udp(a.bind6, socket.AF_INET6)
    print("ready", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
