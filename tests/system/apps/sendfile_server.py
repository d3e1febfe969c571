"""sendfile() on one accepted connection, the ways a program may call it: from a descriptor
opened write-only (the kernel answers EBADF), then the rest of a file from its file offset
(offset None: the kernel reads from and moves the descriptor's offset), in calls of at most
CHUNK bytes. Prints JSON: the write-only call's errno name, bytes sent, the offset after.

    sendfile_server.py PORT PATH START CHUNK"""
import errno
import json
import os
import socket
import sys

port, path, start, chunk = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", port))
l.listen(1)
print("listening", flush=True)
c, _ = l.accept()
out = {}
wfd = os.open(path, os.O_WRONLY)
try:
    out["wronly"] = os.sendfile(c.fileno(), wfd, 0, 100)
except OSError as e:
    out["wronly"] = errno.errorcode[e.errno]
os.close(wfd)
fd = os.open(path, os.O_RDONLY)
os.lseek(fd, start, os.SEEK_SET)
sent = 0
while True:
    n = os.sendfile(c.fileno(), fd, None, chunk)
    if n == 0:
        break
    sent += n
out["sent"] = sent
out["offset"] = os.lseek(fd, 0, os.SEEK_CUR)
c.shutdown(socket.SHUT_WR)
c.recv(1)
print(json.dumps(out), flush=True)
