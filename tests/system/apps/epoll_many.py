"""For test_apps.py: one epoll set over many idle accepted connections (argv: port, count, "lt"
or "et"). The peer then writes a timestamp (CLOCK_MONOTONIC, shared by the namespaces) on one
random connection at a time; each must be reported by epoll_wait, promptly, and nothing else.
Then SO_RCVLOWAT: 10 bytes under a low-water mark of 100 are not readable; lowering the mark to
1 makes them readable at the next epoll_wait. Prints one JSON line."""
import json
import select
import socket
import sys
import time

from listening import listen

port, count, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
l = listen(port, 1024)
conns = {}
while len(conns) < count:
    c, _ = l.accept()
    conns[c.fileno()] = c
ctl = conns[min(conns)]                 # the first: the peer's control connection
ep = select.epoll()
flags = select.EPOLLIN | (select.EPOLLET if mode == "et" else 0)
for fd in conns:
    ep.register(fd, flags)
ctl.sendall(b"ready\n")
res = {"delays_ms": [], "wrong": [], "missing": 0}
want = 40
got = 0
deadline = time.monotonic() + 30
buf = {}
while got < want and time.monotonic() < deadline:
    for fd, ev in ep.poll(1.0):
        now = time.monotonic()
        data = conns[fd].recv(100)
        buf[fd] = buf.get(fd, b"") + data
        while b"\n" in buf[fd]:
            line, buf[fd] = buf[fd].split(b"\n", 1)
            if line.startswith(b"t="):
                res["delays_ms"].append(round((now - float(line[2:])) * 1000, 2))
                got += 1
            else:
                res["wrong"].append(line.decode(errors="replace"))
res["missing"] = want - got
# SO_RCVLOWAT: the peer sends 10 bytes on the control connection
ctl.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 100)
ctl.sendall(b"lowat\n")
time.sleep(0.2)                         # the 10 bytes are here by now
res["under_lowat"] = [fd for fd, _ in ep.poll(0.1)]
t0 = time.monotonic()
ctl.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
ready = [fd for fd, _ in ep.poll(1.0)]
res["lowered_ms"] = round((time.monotonic() - t0) * 1000, 2)
res["lowered_ready"] = ready == [ctl.fileno()]
ctl.sendall(b"done\n")
print(json.dumps(res), flush=True)
