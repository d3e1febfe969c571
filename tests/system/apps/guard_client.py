"""For test_guardian.py: kernel-side peers of guard_server.py, timing how each connection ends.

    guard_client.py ADDR PORT NCONNS NBUSY LIMIT

Opens NCONNS connections and reads all of them. Prints "receiving" once each of the first NBUSY
has received 1 MB. Then reads a line "killed T" on stdin (T: time.monotonic() when the test
killed the server, the same clock here) and goes on reading; a connection ends with EOF or RST
(ECONNRESET). Prints one line "end I KIND SECONDS" per connection (KIND eof, rst or none: still
open LIMIT seconds after T; SECONDS after T) and "done"."""
import selectors
import socket
import sys
import time

addr, port, nconns, nbusy, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
conns = []
for i in range(nconns):
    s = socket.create_connection((addr, port), timeout=10)
    s.setblocking(False)
    conns.append(s)
print("connected", flush=True)
sel = selectors.DefaultSelector()
for i, s in enumerate(conns):
    sel.register(s, selectors.EVENT_READ, i)
sel.register(sys.stdin, selectors.EVENT_READ, -1)
got = [0] * nconns
ended = {}
killed = None
said = False
buf = bytearray(1 << 16)
while len(ended) < nconns:
    now = time.monotonic()
    if killed is not None and now > killed + limit:
        break
    for key, _ in sel.select(timeout=0.2):
        i = key.data
        if i < 0:
            line = sys.stdin.readline()
            if line.startswith("killed"):
                killed = float(line.split()[1])
            sel.unregister(sys.stdin)
            continue
        try:
            n = conns[i].recv_into(buf)
            kind = None if n else "eof"
        except ConnectionResetError:
            kind = "rst"
        except BlockingIOError:
            continue
        if kind is None:
            got[i] += n
            continue
        ended[i] = (kind, time.monotonic())
        sel.unregister(conns[i])
        if killed is None:
            print(f"early end {i} {kind}", flush=True)
    if not said and all(g >= 1 << 20 for g in got[:nbusy]):
        print("receiving", flush=True)
        said = True
for i in range(nconns):
    kind, t = ended.get(i, ("none", None))
    print(f"end {i} {kind} {t - killed if (t is not None and killed is not None) else -1:.3f} got {got[i]}", flush=True)
print("done", flush=True)
