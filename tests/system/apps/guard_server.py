"""For test_guardian.py: a server to be killed with SIGKILL in the middle of its transfers. Run
under `slipstream run`.

    guard_server.py PORT NCONNS NBUSY [fork]

Accepts NCONNS connections; the first NBUSY get an endless stream of bytes, the others are held
idle. With "fork", once every connection is accepted the server forks: the child holds every
connection too (it sleeps), the parent sends. Prints "ready PID [CHILD_PID]" once it sends."""
import os
import selectors
import socket
import sys
import time

port, nconns, nbusy = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
fork = len(sys.argv) > 4 and sys.argv[4] == "fork"
ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("0.0.0.0", port))
ls.listen(64)
print("listening", flush=True)
conns = []
while len(conns) < nconns:
    c, _ = ls.accept()
    conns.append(c)
child = 0
if fork:
    child = os.fork()
    if child == 0:
        while True:
            time.sleep(1)
busy = conns[:nbusy]
for c in busy:
    c.setblocking(False)
sel = selectors.DefaultSelector()
for c in busy:
    sel.register(c, selectors.EVENT_WRITE)
chunk = b"x" * 65536
said = False
while True:
    for key, _ in sel.select(timeout=1.0):
        try:
            key.fileobj.send(chunk)
        except BlockingIOError:
            pass
    if not said:
        print("ready", os.getpid(), child, flush=True)
        said = True
