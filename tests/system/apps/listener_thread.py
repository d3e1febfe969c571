"""A server shaped like memcached: a listener thread whose epoll set holds only the listening
socket, handing accepted connections to a worker thread (through a queue and a pipe) whose epoll
set holds the connections; the worker echoes. Under `slipstream run` the listener thread must not
wake for the worker's traffic (src/preload/wait.c, accept bell), and must still accept promptly
when the worker has no connection left (and so no longer watches the stack).

    listener_thread.py ADDR PORT NCONNS

Serves NCONNS connections (each until EOF), then prints one JSON line: {"listener_sleeps": the
listener thread's voluntary context switches (each sleep in the kernel, also those inside the
stack's epoll_wait that never return to Python), "listener_wakes": epoll returns in it,
"accepted": n, "echoed": bytes} and exits."""
import json
import os
import queue
import select
import socket
import sys
import threading


def main():
    addr, port, nconns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(64)
    ls.setblocking(False)
    handoff = queue.Queue()
    rd, wr = os.pipe()
    stats = {"listener_sleeps": 0, "listener_wakes": 0, "accepted": 0, "echoed": 0}

    def worker():
        ep = select.epoll()
        ep.register(rd, select.EPOLLIN)
        conns, done = {}, 0
        while done < nconns:
            for fd, _ in ep.poll(5.0):
                if fd == rd:
                    os.read(rd, 64)
                    while not handoff.empty():
                        c = handoff.get()
                        c.setblocking(False)
                        conns[c.fileno()] = c
                        ep.register(c.fileno(), select.EPOLLIN)
                    continue
                c = conns[fd]
                try:
                    d = c.recv(65536)
                except BlockingIOError:
                    continue
                if not d:
                    ep.unregister(fd)
                    c.close()
                    del conns[fd]
                    done += 1
                    continue
                c.sendall(d)
                stats["echoed"] += len(d)

    w = threading.Thread(target=worker)
    w.start()
    ep = select.epoll()
    ep.register(ls.fileno(), select.EPOLLIN)
    print(json.dumps({"listening": port}), flush=True)
    while stats["accepted"] < nconns:
        ev = ep.poll(5.0)
        stats["listener_wakes"] += 1
        for _ in ev:
            while True:
                try:
                    c, _ = ls.accept()
                except BlockingIOError:
                    break
                c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                handoff.put(c)
                stats["accepted"] += 1
                os.write(wr, b"x")
    with open(f"/proc/self/task/{threading.get_native_id()}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                stats["listener_sleeps"] = int(line.split()[1])
    w.join()
    print(json.dumps(stats), flush=True)


if __name__ == "__main__":
    main()
