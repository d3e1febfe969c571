"""Kernel-side peer of the spawn tests (host a).
  spawn_client.py read ADDR PORT                 connect, read until EOF; prints JSON {data, eof}
  spawn_client.py proxy ADDR PORT SINKPORT BYTES connect to the proxy at ADDR:PORT and send BYTES
                                                 random bytes while accepting the proxy's own
                                                 connection on SINKPORT and reading it to EOF;
                                                 prints JSON {sent, got, sha_sent, sha_got}"""
import hashlib
import json
import os
import socket
import sys
import threading
import time


def connect(addr, port, timeout=20):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection((addr, port), timeout=timeout)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def read_all(s):
    chunks = []
    while True:
        b = s.recv(1 << 16)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def main():
    mode, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "read":
        s = connect(addr, port)
        s.settimeout(30)
        try:
            data, eof = read_all(s), True
        except socket.timeout:
            data, eof = b"", False
        print(json.dumps({"data": data.decode(errors="replace"), "eof": eof}))
        return
    sink_port, nbytes = int(sys.argv[4]), int(sys.argv[5])
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", sink_port))
    ls.listen(1)
    ls.settimeout(60)
    res = {"sent": 0, "got": 0}
    h_sent, h_got = hashlib.sha256(), hashlib.sha256()

    def sink():
        c, _ = ls.accept()
        c.settimeout(60)
        while True:
            b = c.recv(1 << 16)
            if not b:
                break
            h_got.update(b)
            res["got"] += len(b)
        c.close()

    t = threading.Thread(target=sink)
    t.start()
    s = connect(addr, port)
    left = nbytes
    while left:
        b = os.urandom(min(left, 1 << 16))
        s.sendall(b)
        h_sent.update(b)
        left -= len(b)
        res["sent"] += len(b)
    s.shutdown(socket.SHUT_WR)
    t.join(90)
    s.close()
    res["sha_sent"], res["sha_got"] = h_sent.hexdigest(), h_got.hexdigest()
    print(json.dumps(res))


main()
