"""fd passing between two unrelated programs (SCM_RIGHTS), as pre-forked servers and socket
activation do. Run both under `slipstream run`:

    fd_pass.py worker UNIXPATH N     receives N connections over the UNIX socket, answers each
                                      "worker <line>" and closes it
    fd_pass.py acceptor UNIXPATH PORT N
                                      accepts N TCP connections, hands each to the worker and
                                      closes its own fd at once (before the worker got it)
Each prints "ready" when it can be used and "done N" at the end."""
import os
import socket
import sys

role, path = sys.argv[1], sys.argv[2]
if role == "worker":
    n = int(sys.argv[3])
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ls.bind(path)
    ls.listen(1)
    print("ready", flush=True)
    u, _ = ls.accept()
    for i in range(n):
        msg, fds, _, _ = socket.recv_fds(u, 16, 1)
        assert msg == b"c" and len(fds) == 1, (msg, fds)
        c = socket.socket(fileno=fds[0])
        line = b""
        while not line.endswith(b"\n"):
            d = c.recv(100)
            if not d:
                break
            line += d
        c.sendall(b"worker " + line)
        c.close()
    print("done", n, flush=True)
else:
    port, n = int(sys.argv[3]), int(sys.argv[4])
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.connect(path)
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", port))
    ls.listen(16)
    print("ready", flush=True)
    for i in range(n):
        c, _ = ls.accept()
        socket.send_fds(u, [b"c"], [c.fileno()])
        c.close()
    print("done", n, flush=True)
