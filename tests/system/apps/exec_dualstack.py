"""A dual-stack listener carried across exec (test_dualstack.py): stage 1 listens on [::]:PORT
with an AF_INET6 socket and execs itself keeping the fd; stage 2 accepts one IPv4 client on it,
writes its peer and local names (v4-mapped on Linux) on one line, then 2 MB, and closes.

    exec_dualstack.py PORT                  (stage 1)"""
import os
import socket
import sys

if len(sys.argv) == 2:
    port = int(sys.argv[1])
    l = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("::", port))
    l.listen(8)
    os.set_inheritable(l.fileno(), True)
    os.execv(sys.executable, [sys.executable, __file__, str(port), str(l.fileno())])

port, fd = int(sys.argv[1]), int(sys.argv[2])
l = socket.socket(fileno=fd)
print("listening", l.family.name, l.getsockname()[0], flush=True)
c, peer = l.accept()
c.sendall(f"{peer[0]} {c.getsockname()[0]} {c.family.name}\n".encode() + bytes(2_000_000))
c.close()
l.close()
print("served", peer[0], flush=True)
