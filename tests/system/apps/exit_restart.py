"""For test_procs.py: a server that exits with data its peer has not taken yet. Listens (with
SO_REUSEADDR, as servers do) on argv[1], accepts one connection, fills the connection's send
buffer towards a peer that does not read, prints "exiting" and exits: the data left behind keeps
the stack delivering for a while after exit (SLIP_EXIT_LINGER_MS), as the kernel keeps an
orphaned connection. Its port must be free for the next server meanwhile."""
import os
import sys

from listening import listen

l = listen(int(sys.argv[1]))
c, _ = l.accept()
c.setblocking(False)
sent = 0
try:
    while True:
        sent += c.send(b"x" * 65536)
except BlockingIOError:
    pass
# fds a C program would still have open when its exit handlers run (Python closes its socket
# objects before that): raw duplicates nobody closes
os.dup(l.fileno())
os.dup(c.fileno())
print("exiting", sent, flush=True)
sys.exit(0)
