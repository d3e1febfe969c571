"""A listener made before exec and closed after it: stage 1 listens and execs itself keeping the
fd; stage 2 serves one echo on it, closes it and says so, then waits for a line on stdin.
The test then checks that the port is free in the kernel (the port-reservation socket that
stage 1 made went with the close, in the new image).

    exec_listener.py PORT                   (stage 1)"""
import os
import socket
import sys

if len(sys.argv) == 2:
    port = int(sys.argv[1])
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("0.0.0.0", port))
    l.listen(8)
    os.set_inheritable(l.fileno(), True)
    os.execv(sys.executable, [sys.executable, __file__, str(port), str(l.fileno())])

port, fd = int(sys.argv[1]), int(sys.argv[2])
l = socket.socket(fileno=fd)
print("listening", flush=True)
c, _ = l.accept()
c.sendall(c.recv(100))
c.close()
l.close()
print("closed", flush=True)
sys.stdin.readline()
