"""Reproduction for test_apps.py: an epoll set that held an accelerated socket and now holds
none must still block in epoll_wait. Accepts one connection, registers it, polls once, unregisters
it, lets the peer send more, then counts how often poll(0.5 s) returns in 2 s (kernel: 4 times)."""
import select
import sys
import time

from listening import listen

l = listen(int(sys.argv[1]))
c, _ = l.accept()
ep = select.epoll()
ep.register(c.fileno(), select.EPOLLIN)
ep.poll(1.0)            # the first byte arrives; the set now also watches the stack's wake fds
c.recv(100)
ep.unregister(c.fileno())
c.send(b"go")           # the peer answers with more data nobody reads through this set
t0, n = time.monotonic(), 0
while time.monotonic() - t0 < 2.0:
    ep.poll(0.5)
    n += 1
print("returns", n, flush=True)
c.close()
