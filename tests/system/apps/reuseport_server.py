"""A small SO_REUSEPORT server for tests/system/test_reuseport.py: two listeners on one port,
each answering "<listener index> <pid>\\n" to every connection and closing it, and keeping the
number of connections it served in <out>.<index> (rewritten after every connection).

Modes:
  one          one process opens both listeners and serves them with one selector
  fork-after   one process opens both, then forks: the parent keeps listener 0, the child
               listener 1, and each closes the other's fd (what nginx does with `reuseport`)
  fork-before  the process forks first, then each process opens its own listener
  fork-poll    one process opens both, then forks two workers and only waits for them, keeping
               both listeners open, as nginx's master does; each worker drops to its own gid
               (setgid, as nginx's workers drop privileges), keeps both fds as nginx's do, and
               serves its own listener with poll() (worker 0) or select() (worker 1)
  close-one    as "one", and SIGUSR1 closes listener 0 (then writes <out>.closed): listener 1
               must go on getting every connection, still through the stack
  udp          one process, two UDP sockets with SO_REUSEPORT on the port, each datagram
               answered with the same line from the socket that received it
  threads      one process, two threads, each opening its own listener and serving it: thread 0
               with a selector (epoll), thread 1 with blocking accept() (a stack per thread:
               the second thread's listener and connections move to a stack of its own)
  single       one listener, numbered --index (two programs started so share the port)
  single-udp   the same with one UDP socket

Prints "ready" once every listener listens (the fork modes: once per process). Runs until SIGTERM."""
import argparse
import os
import select
import selectors
import signal
import socket
import sys


def listener(addr, port, udp=False):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM if udp else socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((addr, port))
    if not udp:
        s.listen(128)
    s.setblocking(False)
    return s


def save(out, idx, n):
    tmp = f"{out}.{idx}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{n}\n")
    os.replace(tmp, f"{out}.{idx}")


def answer(c, idx):
    """Reads the request on accepted connection c, answers "<idx> <pid>" and closes it; False
    (said on stderr) when that failed."""
    with c:
        c.setblocking(True)
        c.settimeout(10)
        try:
            c.recv(64)
            c.sendall(f"{idx} {os.getpid()}\n".encode())
        except OSError as e:
            print("connection error:", e, file=sys.stderr, flush=True)
            return False
    return True


CLOSE_REQUESTED = []


def serve(socks, out):
    """socks: {index: listening socket}. Serves until SIGTERM."""
    signal.signal(signal.SIGUSR1, lambda *_: CLOSE_REQUESTED.append(1))
    sel = selectors.DefaultSelector()
    counts = {}
    for idx, s in socks.items():
        sel.register(s, selectors.EVENT_READ, idx)
        counts[idx] = 0
        save(out, idx, 0)
    print("ready", os.getpid(), sorted(socks), flush=True)
    while True:
        if CLOSE_REQUESTED and 0 in socks:
            sel.unregister(socks[0])
            socks.pop(0).close()
            with open(f"{out}.closed", "w") as f:
                f.write("closed\n")
        for key, _ in sel.select(timeout=0.2):
            idx = key.data
            if key.fileobj.type == socket.SOCK_DGRAM:
                try:
                    _data, peer = key.fileobj.recvfrom(64)
                except BlockingIOError:
                    continue
                key.fileobj.sendto(f"{idx} {os.getpid()}\n".encode(), peer)
                counts[idx] += 1
                save(out, idx, counts[idx])
                continue
            try:
                c, _peer = key.fileobj.accept()
            except BlockingIOError:
                continue
            if not answer(c, idx):
                continue
            counts[idx] += 1
            save(out, idx, counts[idx])


def serve_polled(idx, lsock, out, use_select):
    """fork-poll's worker: poll() or select() on its listener, then accept. Each worker has a
    listener of its own (SO_REUSEPORT), so a wake-up with nothing to accept, or an error or hang-up
    reported on the listener, is wrong: it ends the worker with a traceback."""
    poller = select.poll()
    poller.register(lsock, select.POLLIN)
    n = 0
    save(out, idx, 0)
    print("ready", os.getpid(), [idx], flush=True)
    while True:
        if use_select:
            r, _, x = select.select([lsock], [], [lsock], 0.2)
            ready, bad = bool(r), bool(x)
        else:
            evs = [e for _, e in poller.poll(200)]
            ready = any(e & select.POLLIN for e in evs)
            bad = [hex(e) for e in evs if e & (select.POLLHUP | select.POLLERR | select.POLLNVAL)]
        if bad:
            raise RuntimeError(f"worker {idx}: the listener reported {bad}")
        if not ready:
            continue
        try:
            c, _peer = lsock.accept()
        except BlockingIOError:
            raise RuntimeError(f"worker {idx}: the listener was readable, accept() said EAGAIN")
        with c:
            c.setblocking(True)
            c.settimeout(10)
            c.recv(64)
            c.sendall(f"{idx} {os.getpid()}\n".encode())
        n += 1
        save(out, idx, n)


def serve_thread(idx, addr, port, out, started):
    """threads mode: this thread's own listener; idx 0 waits with a selector, idx 1 in accept()."""
    lsock = listener(addr, port)
    started.set()
    n = 0
    save(out, idx, 0)
    print("ready", os.getpid(), [idx], flush=True)
    sel = None
    if idx == 0:
        sel = selectors.DefaultSelector()
        sel.register(lsock, selectors.EVENT_READ, idx)
    else:
        lsock.setblocking(True)
    while True:
        if sel is not None and not sel.select(timeout=0.2):
            continue
        try:
            c, _peer = lsock.accept()
        except BlockingIOError:
            continue
        if not answer(c, idx):
            continue
        n += 1
        save(out, idx, n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", choices=("one", "close-one", "fork-after", "fork-before", "fork-poll", "udp", "single",
                                       "single-udp", "threads"),
                    default="one")
    ap.add_argument("--index", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    if a.mode in ("one", "close-one"):
        serve({0: listener(a.addr, a.port), 1: listener(a.addr, a.port)}, a.out)
    elif a.mode in ("single", "single-udp"):
        serve({a.index: listener(a.addr, a.port, a.mode == "single-udp")}, a.out)
    elif a.mode == "udp":
        serve({0: listener(a.addr, a.port, True), 1: listener(a.addr, a.port, True)}, a.out)
    elif a.mode == "fork-after":
        l0, l1 = listener(a.addr, a.port), listener(a.addr, a.port)
        pid = os.fork()
        if pid == 0:
            l0.close()
            serve({1: l1}, a.out)
        else:
            l1.close()
            serve({0: l0}, a.out)
    elif a.mode == "threads":
        import threading
        ts = []
        for idx in (0, 1):
            started = threading.Event()
            ts.append(threading.Thread(target=serve_thread, args=(idx, a.addr, a.port, a.out, started), daemon=True))
            ts[-1].start()
            started.wait()      # thread 1 listens after thread 0 (either order would do)
        while True:
            signal.pause()
    elif a.mode == "fork-poll":
        ls = [listener(a.addr, a.port), listener(a.addr, a.port)]
        for idx in (0, 1):
            if os.fork() == 0:
                os.setgid(os.getgid())
                serve_polled(idx, ls[idx], a.out, use_select=idx == 1)
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
        while True:
            try:
                os.wait()
            except ChildProcessError:
                return
    else:
        pid = os.fork()
        serve({1 if pid == 0 else 0: listener(a.addr, a.port)}, a.out)


if __name__ == "__main__":
    main()
