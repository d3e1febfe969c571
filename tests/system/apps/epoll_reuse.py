"""Reproduction for test_apps.py: a closed accelerated socket must leave every epoll set, as the
kernel's does, so the next socket that gets the same fd number can be added. Accepts two
connections one after the other, each registered in one epoll set and then closed."""
import select
import socket
import sys

l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", int(sys.argv[1])))
l.listen(8)
ep = select.epoll()
print("listening", flush=True)
for i in range(2):
    c, _ = l.accept()
    try:
        ep.register(c.fileno(), select.EPOLLIN)
        print("conn", i, "fd", c.fileno(), "registered", flush=True)
    except OSError as e:
        print("conn", i, "fd", c.fileno(), "register failed:", e, flush=True)
        sys.exit(1)
    c.close()
