"""fd passing between two unrelated programs (SCM_RIGHTS), as pre-forked servers and socket
activation do. Run both under `slipstream run`:

    fd_pass.py worker UNIXPATH N [--late] [--own]
                                     receives N connections over the UNIX socket, answers each
                                      "worker <line>" and closes it; with --late it takes the last
                                      fd only after the acceptor process has exited (the fd was
                                      in flight in the UNIX socket alone meanwhile); with --own
                                      it opens an accelerated UDP socket first (a stack of its
                                      own before any fd arrives)
    fd_pass.py acceptor UNIXPATH PORT N [--sendmmsg]
                                      accepts N TCP connections, hands each to the worker and
                                      closes its own fd at once (before the worker got it); with
                                      --sendmmsg every other one goes with libc's sendmmsg()
Each prints "ready" when it can be used and "done N" at the end."""
import ctypes
import os
import select
import socket
import struct
import sys
import time


def send_fd_mmsg(u, fd):
    """One message b"c" carrying fd, through libc's sendmmsg (the preloaded one)."""
    class iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    class msghdr(ctypes.Structure):
        _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32), ("iov", ctypes.POINTER(iovec)),
                    ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                    ("flags", ctypes.c_int)]

    class mmsghdr(ctypes.Structure):
        _fields_ = [("hdr", msghdr), ("len", ctypes.c_uint)]

    data = ctypes.create_string_buffer(b"c", 1)
    iov = iovec(ctypes.cast(data, ctypes.c_void_p), 1)
    # struct cmsghdr { size_t len; int level; int type; } + one int, padded to 8 bytes
    cmsg = ctypes.create_string_buffer(24)
    ctypes.memmove(cmsg, (ctypes.c_size_t * 1)(20), 8)
    ctypes.memmove(ctypes.addressof(cmsg) + 8, (ctypes.c_int * 3)(socket.SOL_SOCKET, socket.SCM_RIGHTS, fd), 12)
    m = mmsghdr(msghdr(None, 0, ctypes.pointer(iov), 1, ctypes.cast(cmsg, ctypes.c_void_p), 24, 0), 0)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.sendmmsg(u.fileno(), ctypes.byref(m), 1, 0) != 1:
        raise OSError(ctypes.get_errno(), "sendmmsg")

def alive(pid):
    """pid has not exited yet (a zombie has: its exit handlers ran)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


role, path = sys.argv[1], sys.argv[2]
if role == "worker":
    n = int(sys.argv[3])
    if "--own" in sys.argv:
        own = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        own.bind(("0.0.0.0", 0))
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ls.bind(path)
    ls.listen(1)
    print("ready", flush=True)
    u, _ = ls.accept()
    peer = struct.unpack("3i", u.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
    for i in range(n):
        if "--late" in sys.argv and i == n - 1:
            select.select([u], [], [], 30)      # the last message is there ...
            deadline = time.monotonic() + 30
            while alive(peer) and time.monotonic() < deadline:
                time.sleep(0.02)                # ... and its sender gone before we take it
            assert not alive(peer), "the acceptor did not exit"
        msg, fds, _, _ = socket.recv_fds(u, 16, 1)
        assert msg == b"c" and len(fds) == 1, (msg, fds)
        c = socket.socket(fileno=fds[0])
        line = b""
        while not line.endswith(b"\n"):
            d = c.recv(100)
            if not d:
                break
            line += d
        c.sendall(b"worker " + line)
        c.close()
    print("done", n, flush=True)
else:
    port, n = int(sys.argv[3]), int(sys.argv[4])
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.connect(path)
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", port))
    ls.listen(16)
    print("ready", flush=True)
    for i in range(n):
        c, _ = ls.accept()
        if "--sendmmsg" in sys.argv and i % 2:
            send_fd_mmsg(u, c.fileno())
        else:
            socket.send_fds(u, [b"c"], [c.fileno()])
        c.close()
    print("done", n, flush=True)
