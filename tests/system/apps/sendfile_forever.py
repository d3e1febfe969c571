"""Sends a file opened with O_DIRECT to one accepted connection with sendfile(), over and over,
until killed: under `slipstream run --block` nearly all of its time is spent with frames of the
stack lent to it, the disk reading into them (test_block_sendfile kills it there).

    sendfile_forever.py PORT PATH"""
import os
import socket
import sys

port, path = int(sys.argv[1]), sys.argv[2]
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", port))
l.listen(1)
print("listening", flush=True)
c, _ = l.accept()
fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
size = os.fstat(fd).st_size
off = 0
while True:
    n = os.sendfile(c.fileno(), fd, off, size - off)
    off = off + n if off + n < size else 0
