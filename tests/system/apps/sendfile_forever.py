"""Sends a file to one accepted connection with sendfile(), over and over, until killed: under
`slipstream run --block` nearly all of its time is spent with frames of the stack lent to it
(the file read into them) or queueing them and building segments from them (test_block_sendfile
kills it there). The file is opened with O_DIRECT (the disk reads into the frames), or with
"cached" as it is (the page cache copied into them).

    sendfile_forever.py PORT PATH [cached]"""
import os
import socket
import sys

port, path = int(sys.argv[1]), sys.argv[2]
cached = sys.argv[3:] == ["cached"]
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", port))
l.listen(1)
print("listening", flush=True)
c, _ = l.accept()
fd = os.open(path, os.O_RDONLY | (0 if cached else os.O_DIRECT))
size = os.fstat(fd).st_size
off = 0
while True:
    n = os.sendfile(c.fileno(), fd, off, size - off)
    off = off + n if off + n < size else 0
