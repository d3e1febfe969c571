"""One blocking call per method writes SIZE bytes to an accepted connection (send, os.write,
sendmsg with two pieces) and prints JSON of what each returned: Linux returns the full length
from a blocking send (it sleeps until everything is queued), so a program that does not loop
loses nothing.

    blocking_send.py PORT SIZE"""
import json
import os
import socket
import sys

port, size = int(sys.argv[1]), int(sys.argv[2])
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", port))
l.listen(1)
print("listening", flush=True)
c, _ = l.accept()
out = {}
for k, method in enumerate(("send", "write", "sendmsg")):
    data = bytes([65 + k]) * size
    if method == "send":
        out[method] = c.send(data)
    elif method == "write":
        out[method] = os.write(c.fileno(), data)
    else:
        out[method] = c.sendmsg([data[: size // 2], data[size // 2:]])
c.shutdown(socket.SHUT_WR)
c.recv(1)
print(json.dumps(out), flush=True)
