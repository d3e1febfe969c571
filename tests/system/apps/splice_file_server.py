"""Sends a file to one accepted connection by splice() through a pipe (file -> pipe, then pipe ->
socket), as a relay or a server that splices would, then reports what the pipe -> socket calls
returned, as JSON. MODE "block": blocking socket and calls; "nonblock": a non-blocking socket and
SPLICE_F_NONBLOCK on the pipe -> socket call, waiting with select() on EAGAIN.

    splice_file_server.py PORT PATH MODE"""
import json
import os
import select
import socket
import sys

port, path, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", port))
l.listen(1)
print("listening", flush=True)
c, _ = l.accept()
if mode == "nonblock":
    c.setblocking(False)
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
r, w = os.pipe()
off = 0
calls = eagain = 0
while off < size:
    n = os.splice(fd, w, min(1 << 20, size - off), offset_src=off)
    assert n > 0, n
    off += n
    while n:
        try:
            flags = os.SPLICE_F_NONBLOCK if mode == "nonblock" else 0
            k = os.splice(r, c.fileno(), n, flags=flags)
        except BlockingIOError:
            eagain += 1
            select.select([], [c], [], 5)
            continue
        assert k > 0, k
        calls += 1
        n -= k
c.setblocking(True)
c.shutdown(socket.SHUT_WR)
c.recv(1)
print(json.dumps({"sent": off, "calls": calls, "eagain": eagain}), flush=True)
