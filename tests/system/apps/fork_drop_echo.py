"""An echo server that forks a worker which drops root for nobody, as nginx and memcached do:
both processes accept on the listener they share and echo. Prints "ready" once the worker has
dropped its privileges.

    fork_drop_echo.py ADDR PORT"""
import os
import select
import socket
import sys

addr, port = sys.argv[1], int(sys.argv[2])
lsn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
lsn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lsn.bind((addr, port))
lsn.listen(64)
lsn.setblocking(False)   # both processes wake for one connection; one gets it
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
    os.write(w, b"x")
else:
    os.read(r, 1)
    print("ready", pid, flush=True)
conns = []
while True:
    rd, _, _ = select.select([lsn] + conns, [], [], 1.0)
    for s in rd:
        if s is lsn:
            try:
                c, _ = lsn.accept()
                conns.append(c)
            except BlockingIOError:
                pass
            continue
        try:
            data = s.recv(65536)
        except OSError:
            data = b""
        if data:
            s.sendall(data)
        else:
            conns.remove(s)
            s.close()
