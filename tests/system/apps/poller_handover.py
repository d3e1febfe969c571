"""The poller's hand-over (src/preload/sockwait.c), client and server of one check.

    poller_handover.py server ADDR PORT ROUNDS      (kernel, host b)
    poller_handover.py client ADDR PORT ROUNDS block|poll   (under slipstream run, host a)

Per round the client opens two connections, A then B, and blocks on each in its own thread (A
first, so A's thread is the process's poller, B's sleeps on its socket's futex). The server
answers A, waits GAP seconds and answers B. A's thread, once answered, stays away from the stack
(it sleeps), so B's wakeup depends on A having handed the poller's place on. The server prints
the CLOCK_MONOTONIC time it sent B's answer (namespaces share that clock); the client prints the
time B's answer arrived; the difference is the wakeup delay. JSON lines."""
import json
import select
import socket
import sys
import threading
import time

# Shorter than the 100 ms sleep cap, after which B would look by itself and become the poller:
# without a hand-over most rounds then see B woken late by up to the cap.
GAP = 0.02


def server(addr, port, rounds):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(8)
    print(json.dumps({"listening": port}), flush=True)
    for r in range(rounds):
        a, _ = ls.accept()
        b, _ = ls.accept()
        a.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        b.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        a.recv(16)                  # "ready": the client's threads are (about to be) blocked
        b.recv(16)
        time.sleep(0.2)
        a.sendall(b"A")
        time.sleep(GAP)
        t = time.monotonic()
        b.sendall(b"B")
        print(json.dumps({"round": r, "sent_b": t}), flush=True)
        a.recv(16)
        b.recv(16)
        a.close()
        b.close()


def wait_one(s, mode):
    if mode == "poll":
        s.setblocking(False)
        p = select.poll()
        p.register(s.fileno(), select.POLLIN)
        while True:
            p.poll(10000)
            try:
                return s.recv(16)
            except BlockingIOError:
                continue
    return s.recv(16)


def client(addr, port, rounds, mode):
    for r in range(rounds):
        a = socket.create_connection((addr, port))
        b = socket.create_connection((addr, port))
        got = {}

        def run_a():
            a.sendall(b"ready")
            got["a"] = wait_one(a, mode)
            time.sleep(GAP + 0.2)   # away from the stack while B waits

        def run_b():
            time.sleep(0.1)         # A blocks first: A is the poller
            b.sendall(b"ready")
            got["b"] = wait_one(b, mode)
            got["t_b"] = time.monotonic()

        ta, tb = threading.Thread(target=run_a), threading.Thread(target=run_b)
        ta.start()
        tb.start()
        ta.join()
        tb.join()
        print(json.dumps({"round": r, "a": got["a"].decode(), "b": got["b"].decode(), "recv_b": got["t_b"]}),
              flush=True)
        a.sendall(b"bye")
        b.sendall(b"bye")
        a.close()
        b.close()


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
