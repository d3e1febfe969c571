"""Seeded random socket-API sequences for tests/system/test_api_fuzz.py: "nothing the application
does through the socket API may crash the stack or corrupt another socket". A few guard TCP
connections to a kernel echo service (posix_peer.py, port 7001) carry a continuous pseudo-random
stream that is read back and compared byte for byte, while thousands of random calls (good, odd
and wrong) hit a pool of other fds. Outcomes of the random calls are ignored; what must hold is:
no crash, no hang (a watchdog exits 3 if one call takes more than --hang seconds; calls that may
block are bounded by SO_RCVTIMEO/SO_SNDTIMEO set just before them), byte-exact guard streams, and
guards that still work and close cleanly at the end.

    python3 api_fuzz.py --peer 198.18.0.1 --seed 7 --seconds 20 [--max-ops N] [--trace FILE]

Prints one JSON line: {"result": "ok"|..., "seed", "ops", "per_kind", "errno", "guard_bytes", ...}.
Exit 0 when every property held; 3 hang, 4 guard corrupted, 5 guard broken, 6 child failed.
--trace FILE writes each call (op index, kind, arguments) before it is made, so a crash names its
call; --max-ops N stops after op N, which with the same seed replays the same sequence.
Calls go through libc as the preload sees them: the socket module, os, and ctypes on the global
symbol scope (CDLL(None)), never libc.so.6 directly.
"""
import argparse
import ctypes
import errno
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import threading
import time
import zlib

ECHO, DISCARD, RESET, CLOSEAFTER, CLOSED, UDPECHO, HOLD = 7001, 7002, 7003, 7004, 7005, 7006, 7007
SIOCOUTQ, FIONREAD, FIONBIO = 0x5411, 0x541B, 0x5421
CLOSE_RANGE_UNSHARE, CLOSE_RANGE_CLOEXEC = 2, 4
EPOLL_CTL_ADD, EPOLL_CTL_DEL, EPOLL_CTL_MOD = 1, 2, 3
EPOLLIN, EPOLLOUT, EPOLLRDHUP, EPOLLPRI, EPOLLERR, EPOLLHUP = 0x1, 0x4, 0x2000, 0x2, 0x8, 0x10
EPOLLEXCLUSIVE, EPOLLWAKEUP, EPOLLONESHOT, EPOLLET = 1 << 28, 1 << 29, 1 << 30, 1 << 31
MSG_PEEK, MSG_TRUNC, MSG_DONTWAIT, MSG_WAITALL, MSG_NOSIGNAL, MSG_MORE = 2, 0x20, 0x40, 0x100, 0x4000, 0x8000
MSG_WAITFORONE, MSG_OOB, MSG_ERRQUEUE = 0x10000, 1, 0x2000
MAXBUF = 256 * 1024
# Options that take pointers, join multicast groups (traffic to addresses outside 198.18/15) or
# need privileges an application would not have (TCP repair mode): never set at random.
SKIP_OPTS = {(socket.SOL_SOCKET, 26), (socket.SOL_SOCKET, 50), (socket.SOL_SOCKET, 51),
             (socket.SOL_SOCKET, 52), (socket.SOL_SOCKET, 25),   # filters, BPF, BINDTODEVICE
             (socket.SOL_SOCKET, 46), (socket.SOL_SOCKET, 69), (socket.SOL_SOCKET, 70)}   # busy polling
SKIP_OPTS |= {(socket.IPPROTO_IP, 4)}      # IP_OPTIONS: a source route could name any address
SKIP_OPTS |= {(socket.IPPROTO_TCP, o) for o in (19, 20, 21, 22)}
SKIP_OPTS |= {(socket.IPPROTO_IP, o) for o in range(32, 49)}     # multicast

libc = ctypes.CDLL(None, use_errno=True)
vp, ci, cu, sz, ss = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, ctypes.c_ssize_t
for name, res, args in (
        ("socket", ci, [ci, ci, ci]), ("bind", ci, [ci, vp, cu]), ("listen", ci, [ci, ci]),
        ("accept", ci, [ci, vp, vp]), ("accept4", ci, [ci, vp, vp, ci]), ("connect", ci, [ci, vp, cu]),
        ("shutdown", ci, [ci, ci]), ("close", ci, [ci]), ("getsockname", ci, [ci, vp, vp]),
        ("getpeername", ci, [ci, vp, vp]), ("getsockopt", ci, [ci, ci, ci, vp, vp]),
        ("setsockopt", ci, [ci, ci, ci, vp, cu]), ("send", ss, [ci, vp, sz, ci]),
        ("sendto", ss, [ci, vp, sz, ci, vp, cu]), ("sendmsg", ss, [ci, vp, ci]),
        ("recv", ss, [ci, vp, sz, ci]), ("recvfrom", ss, [ci, vp, sz, ci, vp, vp]),
        ("recvmsg", ss, [ci, vp, ci]), ("read", ss, [ci, vp, sz]), ("write", ss, [ci, vp, sz]),
        ("readv", ss, [ci, vp, ci]), ("writev", ss, [ci, vp, ci]), ("dup", ci, [ci]),
        ("dup2", ci, [ci, ci]), ("dup3", ci, [ci, ci, ci]), ("fcntl", ci, [ci, ci, ctypes.c_long]),
        ("ioctl", ci, [ci, ctypes.c_ulong, vp]), ("poll", ci, [vp, ctypes.c_ulong, ci]),
        ("ppoll", ci, [vp, ctypes.c_ulong, vp, vp]), ("select", ci, [ci, vp, vp, vp, vp]),
        ("pselect", ci, [ci, vp, vp, vp, vp, vp]), ("epoll_create", ci, [ci]),
        ("epoll_create1", ci, [ci]), ("epoll_ctl", ci, [ci, ci, ci, vp]),
        ("epoll_wait", ci, [ci, vp, ci, ci]), ("epoll_pwait", ci, [ci, vp, ci, ci, vp]),
        ("epoll_pwait2", ci, [ci, vp, ci, vp, vp]), ("sendmmsg", ci, [ci, vp, cu, ci]),
        ("recvmmsg", ci, [ci, vp, cu, ci, vp]), ("close_range", ci, [cu, cu, ci])):
    f = getattr(libc, name)
    f.restype, f.argtypes = res, args


class Iovec(ctypes.Structure):
    _fields_ = [("base", vp), ("len", sz)]


class Msghdr(ctypes.Structure):
    _fields_ = [("name", vp), ("namelen", cu), ("iov", vp), ("iovlen", sz), ("control", vp),
                ("controllen", sz), ("flags", ci)]


class Mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", Msghdr), ("len", cu)]


class EpollEvent(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("events", ctypes.c_uint32), ("data", ctypes.c_uint64)]


class Pollfd(ctypes.Structure):
    _fields_ = [("fd", ci), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


class Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


def addr(b):
    return ctypes.addressof(b)


def sin(ip, port, family=socket.AF_INET):
    return struct.pack("<H", family) + struct.pack("!H", port) + socket.inet_aton(ip) + bytes(8)


def sin6(ip6, port):
    return struct.pack("<H", socket.AF_INET6) + struct.pack("!HI", port, 0) + socket.inet_pton(
        socket.AF_INET6, ip6) + struct.pack("I", 0)


class Fail(Exception):
    def __init__(self, code, result, **info):
        super().__init__(result)
        self.code, self.result, self.info = code, result, info


class Guard:
    """One checksummed stream through the kernel echo service: what was sent and not yet read
    back is kept and every echoed byte compared with it."""

    def __init__(self, idx, peer, seed, v6=False):
        self.idx = idx
        self.rng = random.Random(seed * 7919 + idx)
        if v6:      # a dual-stack AF_INET6 socket to the IPv4 peer
            self.s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            self.s.settimeout(10)
            self.s.connect(("::ffff:" + peer, ECHO))
        else:
            self.s = socket.create_connection((peer, ECHO), timeout=10)
        self.s.setblocking(False)
        self.fd = self.s.fileno()
        self.carry = b""           # generated, not yet accepted by send
        self.pending = bytearray()  # sent, not yet echoed
        self.sent = self.verified = 0
        self.crc = 0

    def step(self, limit=256 * 1024):
        if not self.carry and len(self.pending) < limit:
            self.carry = self.rng.randbytes(self.rng.randint(1, 65536))
        if self.carry:
            try:
                k = self.s.send(self.carry)
            except BlockingIOError:
                k = 0
            except OSError as e:
                raise Fail(5, "guard_broken", guard=self.idx, call="send", errno=ename(e.errno),
                           verified=self.verified)
            self.pending += self.carry[:k]
            self.carry = self.carry[k:]
            self.sent += k
        self.drain()

    def drain(self):
        while True:
            try:
                d = self.s.recv(MAXBUF)
            except BlockingIOError:
                return
            except OSError as e:
                raise Fail(5, "guard_broken", guard=self.idx, call="recv", errno=ename(e.errno),
                           verified=self.verified)
            if not d:
                raise Fail(5, "guard_broken", guard=self.idx, call="recv", errno="EOF",
                           verified=self.verified)
            if len(d) > len(self.pending) or self.pending[:len(d)] != d:
                n = min(len(d), len(self.pending))
                off = next((i for i in range(n) if d[i] != self.pending[i]), n)
                raise Fail(4, "guard_corrupt", guard=self.idx, stream_offset=self.verified + off,
                           got=d[off:off + 16].hex(), want=bytes(self.pending[off:off + 16]).hex(),
                           extra=len(d) - len(self.pending))
            del self.pending[:len(d)]
            self.verified += len(d)
            self.crc = zlib.crc32(d, self.crc)

    def finish(self, timeout=20.0):
        """Everything sent comes back, the socket is still what it was, it closes cleanly."""
        end = time.monotonic() + timeout
        while (self.carry or self.pending) and time.monotonic() < end:
            select.select([self.s], [self.s] if self.carry else [], [], 0.2)
            if self.carry:
                try:
                    k = self.s.send(self.carry)
                    self.pending += self.carry[:k]
                    self.carry = self.carry[k:]
                    self.sent += k
                except BlockingIOError:
                    pass
            self.drain()
        if self.carry or self.pending:
            raise Fail(5, "guard_broken", guard=self.idx, call="finish",
                       errno=f"{len(self.pending)} bytes never echoed", verified=self.verified)
        if self.s.getpeername()[1] != ECHO:
            raise Fail(5, "guard_broken", guard=self.idx, call="getpeername", errno=str(self.s.getpeername()))
        self.s.setblocking(True)
        self.s.settimeout(10)
        self.s.shutdown(socket.SHUT_WR)
        if self.s.recv(10) != b"":
            raise Fail(4, "guard_corrupt", guard=self.idx, stream_offset=self.verified, got="data after the end")
        self.s.close()


def ename(e):
    return errno.errorcode.get(e, str(e))


class Fuzzer:
    def __init__(self, a):
        self.a = a
        self.peer = a.peer
        self.local = a.local
        self.seed = a.seed
        self.v6 = a.v6
        self.rng = random.Random(a.seed)
        self.sendbuf = ctypes.create_string_buffer(random.Random(a.seed).randbytes(MAXBUF), MAXBUF)
        self.recvbuf = ctypes.create_string_buffer(MAXBUF)
        self.pool = {}            # fd -> what made it (kind label)
        self.guards = []
        self.guard_fds = set()
        self.per_kind = {}
        self.errnos = {}
        self.ok_kind = {}
        self.op = 0
        self.op_start = None
        self.op_desc = ""
        self.child = False
        self.forks = 0
        self.avoid = set(a.avoid.split(",")) if a.avoid else set()
        self.trace_fd = os.open(a.trace, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if a.trace else -1
        self.ops = [(w, getattr(self, "op_" + n)) for n, w in (
            ("socket", 10), ("bind", 6), ("listen", 4), ("connect", 8), ("accept", 5), ("send", 8),
            ("sendto", 4), ("sendmsg", 4), ("sendmmsg", 3), ("recv", 7), ("recvfrom", 4), ("recvmsg", 4),
            ("recvmmsg", 3), ("rw", 5), ("rwv", 4), ("shutdown", 4), ("close", 6), ("double_close", 1),
            ("dup", 4), ("fcntl", 5), ("ioctl", 5), ("setsockopt", 10), ("getsockopt", 6), ("names", 4),
            ("epoll_create", 2), ("epoll_ctl", 6), ("epoll_wait", 4), ("poll", 4), ("select", 3),
            ("fork", 1), ("close_range", 1), ("fresh", 6), ("pair", 2))]
        self.weights = [w for w, _ in self.ops]

    # ------------------------------------------------------------------ bookkeeping

    def trace(self, desc):
        self.op_desc = desc
        if self.trace_fd >= 0:
            os.write(self.trace_fd, f"{'child ' if self.child else ''}{self.op} {desc}\n".encode())

    def call(self, kind, desc, fn, *args):
        """Makes one libc call; counts it and its errno. The watchdog times it."""
        self.trace(f"{kind} {desc}")
        self.per_kind[kind] = self.per_kind.get(kind, 0) + 1
        ctypes.set_errno(0)
        self.op_start = time.monotonic()
        r = fn(*args)
        self.op_start = None
        if r >= 0:
            self.ok_kind[kind] = self.ok_kind.get(kind, 0) + 1
        else:
            e = ename(ctypes.get_errno())
            self.errnos[e] = self.errnos.get(e, 0) + 1
        return r

    def add(self, fd, kind):
        if fd >= 0:
            if fd in self.guard_fds:
                raise Fail(5, "guard_broken", call=f"{kind} returned the fd of a live guard", errno=str(fd))
            self.pool[fd] = kind

    def target(self, rare_bad=True):
        """An fd to operate on: a pool fd, or now and then one that is not open (never a guard,
        never a number the library might be using)."""
        if not self.pool or (rare_bad and self.rng.random() < 0.05):
            return self.rng.choice([-1, 1023, 4095, 99999])
        return self.rng.choice(sorted(self.pool))

    def any_fd(self):
        """For calls that only look (poll, select, epoll_ctl, getsockopt): guards too."""
        r = self.rng.random()
        if r < 0.15 and self.guards:
            return self.rng.choice(self.guards).fd
        return self.target()

    def bound(self, fd):
        """Call before anything that may block: bounds it the way an application would."""
        ms = self.rng.choice([20, 50, 100, 200])
        tv = struct.pack("ll", 0, ms * 1000)
        b = ctypes.create_string_buffer(tv, len(tv))
        for opt in (socket.SO_RCVTIMEO, socket.SO_SNDTIMEO):
            self.call("timeo", f"fd={fd} opt={opt} {ms}ms", libc.setsockopt, fd, socket.SOL_SOCKET, opt, b, len(tv))

    def size(self):
        r = self.rng.random()
        if r < 0.1:
            return 0
        if r < 0.5:
            return self.rng.randint(1, 1500)
        if r < 0.85:
            return self.rng.randint(1, 65536)
        return self.rng.randint(65536, 200 * 1024)

    def flags(self, choices):
        f = 0
        for c in choices:
            if self.rng.random() < 0.3:
                f |= c
        return f

    def sockaddr(self, fd=None):
        """(bytes, length) of a destination/bind address, mostly sane, sometimes wrong."""
        rng = self.rng
        r = rng.random()
        port = rng.choice([ECHO, ECHO, DISCARD, RESET, CLOSEAFTER, CLOSED, UDPECHO, HOLD])
        if r < 0.55:
            sa = sin(self.peer, port)
        elif r < 0.65 and fd is not None:
            sa = self.own_name(fd) or sin(self.local, 20001)          # to itself
        elif r < 0.72:
            sa = sin(self.local, rng.choice([20001, 20002, 20003, 0]))   # a pool listener, maybe
        elif r < 0.76 and "unreachable" not in self.avoid:
            sa = sin("198.18.0.3", port)                                 # nobody there
        elif r < 0.80:
            sa = sin6("::ffff:" + self.peer, port)
        elif r < 0.84:
            sa = struct.pack("<H", socket.AF_UNSPEC) + bytes(14)           # disconnect
        elif r < 0.88:
            sa = struct.pack("<H", socket.AF_UNIX) + b"/nonexistent\0"
        elif r < 0.92:
            sa = sin("0.0.0.0", port)
        else:
            sa = sin(self.peer, port, family=rng.choice([0, 99, socket.AF_INET6]))
        n = len(sa)
        if rng.random() < 0.08:
            n = rng.choice([0, 1, 2, 4, 8, 15, 17, 28, 128, 129, 1 << 16])
        # The buffer always covers the length: a wrong length, never a bad pointer.
        sa, n = self.to_v6(fd, sa, n)
        b = ctypes.create_string_buffer(sa + bytes(max(n, 128)), len(sa) + max(n, 128))
        return b, n, sa

    def family(self, fd):
        """The socket's domain, asked outside the counted calls (SO_DOMAIN); None if not one."""
        v = ctypes.c_int(0)
        n = ctypes.c_uint(4)
        if fd is None or libc.getsockopt(fd, socket.SOL_SOCKET, 39, ctypes.byref(v), ctypes.byref(n)) < 0:
            return None
        return v.value

    def to_v6(self, fd, sa, n):
        """--v6: an AF_INET address for an AF_INET6 socket becomes, most of the time, the v4-mapped
        sockaddr_in6 a dual-stack program would pass."""
        if (self.v6 and len(sa) == 16 and struct.unpack("<H", sa[:2])[0] == socket.AF_INET and
                self.rng.random() < 0.85 and self.family(fd) == socket.AF_INET6):
            ip = socket.inet_ntoa(sa[4:8])
            sa = sin6("::ffff:" + ip, struct.unpack("!H", sa[2:4])[0])
            if n == 16:
                n = len(sa)
        return sa, n

    def own_name(self, fd):
        b = ctypes.create_string_buffer(128)
        n = ctypes.c_uint(128)
        if libc.getsockname(fd, b, ctypes.byref(n)) == 0 and n.value in (16, 28):
            return b.raw[:n.value]
        return None

    # ------------------------------------------------------------------ operations

    def op_socket(self):
        rng = self.rng
        dom = rng.choice([socket.AF_INET] * 10 + [socket.AF_INET6, socket.AF_UNIX, 12345, -1])
        if self.v6 and dom == socket.AF_INET and rng.random() < self.v6:
            dom = socket.AF_INET6
        typ = rng.choice([socket.SOCK_STREAM] * 5 + [socket.SOCK_DGRAM] * 4 + [socket.SOCK_SEQPACKET, 99, 0])
        typ |= self.flags([socket.SOCK_NONBLOCK, socket.SOCK_CLOEXEC])
        proto = rng.choice([0] * 6 + [socket.IPPROTO_TCP, socket.IPPROTO_UDP, 99, -1])
        fd = self.call("socket", f"{dom} {typ:#x} {proto}", libc.socket, dom, typ, proto)
        self.add(fd, "socket")

    def op_bind(self):
        fd = self.target()
        rng = self.rng
        r = rng.random()
        if r < 0.3:
            sa = sin(rng.choice([self.local, "0.0.0.0"]), 0)
        elif r < 0.6:
            sa = sin(rng.choice([self.local, "0.0.0.0"]), rng.choice([20001, 20002, 20003, 20004]))
        elif r < 0.7:
            sa = sin("127.0.0.1", rng.choice([0, 20001]))
        elif r < 0.8:
            sa = sin(rng.choice(["198.18.0.99", self.peer]), 0)         # not local
        elif r < 0.9:
            sa = sin6(rng.choice(["::", "::ffff:" + self.local]), rng.choice([0, 20002]))
        else:
            sa = sin(self.local, 20005, family=rng.choice([socket.AF_INET6, socket.AF_UNIX, 77]))
        n = len(sa) if rng.random() < 0.85 else rng.choice([0, 2, 4, 8, 15, 17, 64])
        sa, n = self.to_v6(fd, sa, n)
        b = ctypes.create_string_buffer(sa + bytes(64), len(sa) + 64)
        self.call("bind", f"fd={fd} {sa.hex()} len={n}", libc.bind, fd, b, n)

    def op_listen(self):
        fd = self.target()
        bl = self.rng.choice([-1, 0, 1, 5, 128, 65535, 2 ** 31 - 1])
        self.call("listen", f"fd={fd} {bl}", libc.listen, fd, bl)

    def op_connect(self):
        fd = self.target()
        b, n, sa = self.sockaddr(fd)
        self.bound(fd)
        self.call("connect", f"fd={fd} {sa.hex()} len={n}", libc.connect, fd, b, n)
        if self.rng.random() < 0.3:     # non-blocking connect, then again (EALREADY/EISCONN)
            self.call("connect", f"fd={fd} again", libc.connect, fd, b, n)

    def op_accept(self):
        fd = self.target()
        rng = self.rng
        b = ctypes.create_string_buffer(128)
        ln = ctypes.c_uint(rng.choice([0, 1, 4, 16, 16, 128]))
        pa = rng.choice([(b, ctypes.byref(ln)), (None, None), (b, ctypes.byref(ln))])
        self.bound(fd)
        if rng.random() < 0.5:
            nfd = self.call("accept", f"fd={fd} len={ln.value}", libc.accept, fd, *pa)
        else:
            fl = rng.choice([0, socket.SOCK_NONBLOCK, socket.SOCK_CLOEXEC, 0x7fff, socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC])
            nfd = self.call("accept4", f"fd={fd} len={ln.value} fl={fl:#x}", libc.accept4, fd, *pa, fl)
        self.add(nfd, "accept")

    def op_send(self):
        fd = self.target()
        n = self.size()
        fl = self.flags([MSG_DONTWAIT, MSG_MORE]) | (MSG_NOSIGNAL if self.rng.random() < 0.7 else 0)
        buf = None if n == 0 and self.rng.random() < 0.5 else self.sendbuf
        self.bound(fd)
        self.call("send", f"fd={fd} n={n} fl={fl:#x} null={buf is None}", libc.send, fd, buf, n, fl)

    def op_sendto(self):
        fd = self.target()
        n = self.size()
        fl = self.flags([MSG_DONTWAIT, MSG_MORE, MSG_NOSIGNAL, MSG_OOB])
        if self.rng.random() < 0.3:
            b, ln, sa = None, 0, b""
        else:
            b, ln, sa = self.sockaddr(fd)
        self.bound(fd)
        self.call("sendto", f"fd={fd} n={n} fl={fl:#x} to={sa.hex()} len={ln}", libc.sendto, fd,
                  self.sendbuf, n, fl, b, ln)

    def iovs(self, buf, total):
        """An iovec array over buf: 0..5 pieces, some empty, some NULL with length 0; sometimes a
        count that is wrong (negative, over IOV_MAX)."""
        rng = self.rng
        k = rng.choice([0, 1, 1, 2, 3, 5])
        arr = (Iovec * max(k, 1))()
        off = 0
        for i in range(k):
            ln = rng.randint(0, max(total // max(k, 1), 0))
            if off + ln > MAXBUF:
                ln = 0
            if rng.random() < 0.1:
                arr[i].base, arr[i].len = None, 0
            else:
                arr[i].base, arr[i].len = addr(buf) + off, ln
            off += ln
        cnt = k
        if rng.random() < 0.05 and "iovcnt" not in self.avoid:
            # Over IOV_MAX, or negative: the array covers 1025 entries (all empty), so only
            # the count is wrong.
            cnt = rng.choice([-1, 1025])
            if cnt == 1025:
                arr = (Iovec * 1025)()
        return arr, cnt

    def msghdr(self, buf, total, name_out=False):
        rng = self.rng
        m = Msghdr()
        keep = []
        arr, cnt = self.iovs(buf, total)
        keep.append(arr)
        m.iov, m.iovlen = addr(arr), cnt if cnt >= 0 else (1 << 64) - 1
        r = rng.random()
        if name_out:
            nb = ctypes.create_string_buffer(128)
            keep.append(nb)
            if r < 0.7:
                m.name, m.namelen = addr(nb), rng.choice([0, 1, 4, 16, 128])
        elif r < 0.4:
            b, ln, _ = self.sockaddr()
            keep.append(b)
            m.name, m.namelen = addr(b), ln
        if rng.random() < 0.2:
            cb = ctypes.create_string_buffer(rng.randbytes(64) if not name_out else bytes(64), 64)
            keep.append(cb)
            m.control, m.controllen = addr(cb), rng.choice([0, 4, 16, 24, 64])
        m.flags = rng.choice([0, 0, -1])
        return m, keep

    def op_sendmsg(self):
        fd = self.target()
        m, keep = self.msghdr(self.sendbuf, self.size())
        fl = self.flags([MSG_DONTWAIT, MSG_MORE, MSG_NOSIGNAL])
        self.bound(fd)
        self.call("sendmsg", f"fd={fd} iovlen={m.iovlen} namelen={m.namelen} ctl={m.controllen} fl={fl:#x}",
                  libc.sendmsg, fd, ctypes.byref(m), fl)

    def op_sendmmsg(self):
        fd = self.target()
        k = self.rng.choice([0, 1, 2, 4, 8])
        arr = (Mmsghdr * max(k, 1))()
        keep = []
        for i in range(k):
            m, kp = self.msghdr(self.sendbuf, self.rng.randint(0, 9000))
            arr[i].hdr = m
            keep.append(kp)
        vlen = k if self.rng.random() < 0.9 else self.rng.choice([0, 1 << 20])
        vlen = min(vlen, k)      # longer than the array would be a bad pointer, not a bad length
        fl = self.flags([MSG_DONTWAIT, MSG_NOSIGNAL])
        self.bound(fd)
        self.call("sendmmsg", f"fd={fd} vlen={vlen} fl={fl:#x}", libc.sendmmsg, fd, arr, vlen, fl)

    def rflags(self):
        return self.flags([MSG_PEEK, MSG_WAITALL, MSG_TRUNC, MSG_DONTWAIT]) | (
            MSG_OOB if self.rng.random() < 0.03 else 0) | (MSG_ERRQUEUE if self.rng.random() < 0.03 else 0)

    def rsize(self):
        return self.rng.choice([0, 1, 7, 100, 1500, 65536, MAXBUF, self.rng.randint(0, MAXBUF)])

    def op_recv(self):
        fd = self.target()
        n, fl = self.rsize(), self.rflags()
        self.bound(fd)
        self.call("recv", f"fd={fd} n={n} fl={fl:#x}", libc.recv, fd, self.recvbuf, n, fl)

    def op_recvfrom(self):
        fd = self.target()
        n, fl = self.rsize(), self.rflags()
        b = ctypes.create_string_buffer(128)
        ln = ctypes.c_uint(self.rng.choice([0, 1, 4, 8, 16, 128]))
        pa = (b, ctypes.byref(ln)) if self.rng.random() < 0.8 else (None, None)
        self.bound(fd)
        self.call("recvfrom", f"fd={fd} n={n} fl={fl:#x} alen={ln.value}", libc.recvfrom, fd, self.recvbuf,
                  n, fl, *pa)

    def op_recvmsg(self):
        fd = self.target()
        m, keep = self.msghdr(self.recvbuf, self.rsize(), name_out=True)
        fl = self.rflags()
        self.bound(fd)
        self.call("recvmsg", f"fd={fd} iovlen={m.iovlen} namelen={m.namelen} ctl={m.controllen} fl={fl:#x}",
                  libc.recvmsg, fd, ctypes.byref(m), fl)

    def op_recvmmsg(self):
        fd = self.target()
        k = self.rng.choice([0, 1, 2, 4])
        arr = (Mmsghdr * max(k, 1))()
        keep = []
        for i in range(k):
            m, kp = self.msghdr(self.recvbuf, self.rng.randint(0, 9000), name_out=True)
            arr[i].hdr = m
            keep.append(kp)
        fl = self.flags([MSG_DONTWAIT, MSG_WAITFORONE, MSG_PEEK, MSG_TRUNC])
        ts = Timespec(0, self.rng.choice([0, 1000000, 50000000]))
        pts = ctypes.byref(ts) if self.rng.random() < 0.3 else None
        self.bound(fd)
        self.call("recvmmsg", f"fd={fd} vlen={k} fl={fl:#x} ts={pts is not None}", libc.recvmmsg, fd, arr, k,
                  fl, pts)

    def op_rw(self):
        fd = self.target()
        self.bound(fd)
        if self.rng.random() < 0.5:
            n = self.size()
            self.call("write", f"fd={fd} n={n}", libc.write, fd, self.sendbuf, n)
        else:
            n = self.rsize()
            self.call("read", f"fd={fd} n={n}", libc.read, fd, self.recvbuf, n)

    def op_rwv(self):
        fd = self.target()
        self.bound(fd)
        if self.rng.random() < 0.5:
            arr, cnt = self.iovs(self.sendbuf, self.size())
            self.call("writev", f"fd={fd} cnt={cnt}", libc.writev, fd, arr, cnt)
        else:
            arr, cnt = self.iovs(self.recvbuf, self.rsize())
            self.call("readv", f"fd={fd} cnt={cnt}", libc.readv, fd, arr, cnt)

    def op_shutdown(self):
        fd = self.target()
        how = self.rng.choice([0, 1, 2, 2, 3, -1])
        self.call("shutdown", f"fd={fd} how={how}", libc.shutdown, fd, how)

    def op_close(self):
        fd = self.target()
        if self.rng.random() < 0.3:    # SO_LINGER first, bounded: close blocks at most 1 s
            lg = struct.pack("ii", 1, self.rng.choice([0, 0, 1]))
            b = ctypes.create_string_buffer(lg, 8)
            self.call("setsockopt", f"fd={fd} SO_LINGER {lg.hex()}", libc.setsockopt, fd, socket.SOL_SOCKET,
                      socket.SO_LINGER, b, 8)
        self.call("close", f"fd={fd}", libc.close, fd)
        self.pool.pop(fd, None)

    def op_double_close(self):
        fd = self.target(rare_bad=False)
        self.call("close", f"fd={fd}", libc.close, fd)
        self.pool.pop(fd, None)
        self.call("close", f"fd={fd} again", libc.close, fd)

    def free_high(self):
        for n in range(600, 640):
            if n not in self.pool and libc.fcntl(n, 1, 0) < 0:   # F_GETFD: not open
                return n
        return -1

    def op_dup(self):
        fd = self.target()
        r = self.rng.random()
        if r < 0.3:
            nfd = self.call("dup", f"fd={fd}", libc.dup, fd)
            self.add(nfd, "dup")
            return
        to = self.target(rare_bad=False) if self.pool and self.rng.random() < 0.6 else self.free_high()
        if r < 0.6:
            nfd = self.call("dup2", f"fd={fd} to={to}", libc.dup2, fd, to)
        else:
            fl = self.rng.choice([0, os.O_CLOEXEC, 0x4000])
            nfd = self.call("dup3", f"fd={fd} to={to} fl={fl:#x}", libc.dup3, fd, to, fl)
        if nfd >= 0:
            self.add(nfd, "dup")

    def op_fcntl(self):
        fd = self.target()
        rng = self.rng
        cmd = rng.choice(["getfl", "setfl", "getfd", "setfd", "dupfd", "bad"])
        if cmd == "getfl":
            self.call("fcntl", f"fd={fd} F_GETFL", libc.fcntl, fd, 3, 0)
        elif cmd == "setfl":
            v = rng.choice([0, os.O_NONBLOCK, os.O_NONBLOCK | os.O_APPEND, -1])
            self.call("fcntl", f"fd={fd} F_SETFL {v:#x}", libc.fcntl, fd, 4, v)
        elif cmd == "getfd":
            self.call("fcntl", f"fd={fd} F_GETFD", libc.fcntl, fd, 1, 0)
        elif cmd == "setfd":
            v = rng.choice([0, 1])
            self.call("fcntl", f"fd={fd} F_SETFD {v}", libc.fcntl, fd, 2, v)
        elif cmd == "dupfd":
            c = rng.choice([0, 1030])     # F_DUPFD, F_DUPFD_CLOEXEC
            nfd = self.call("fcntl", f"fd={fd} F_DUPFD {c} 700", libc.fcntl, fd, c, 700)
            self.add(nfd, "dup")
        else:
            self.call("fcntl", f"fd={fd} cmd=9999", libc.fcntl, fd, 9999, 0)

    def op_ioctl(self):
        fd = self.any_fd() if self.rng.random() < 0.5 else self.target()
        req = self.rng.choice([FIONREAD, SIOCOUTQ, FIONBIO, 0x12345678, 0x8915])
        if req == FIONBIO and fd in self.guard_fds:
            req = FIONREAD          # guards stay non-blocking
        v = ctypes.c_int(self.rng.choice([0, 1]))
        buf = ctypes.create_string_buffer(64) if req == 0x8915 else None
        self.call("ioctl", f"fd={fd} req={req:#x} v={v.value}", libc.ioctl, fd, req,
                  buf if buf is not None else ctypes.byref(v))

    SOCK_OPTS = [socket.SO_REUSEADDR, socket.SO_REUSEPORT, socket.SO_KEEPALIVE, socket.SO_RCVBUF,
                 socket.SO_SNDBUF, socket.SO_LINGER, socket.SO_RCVLOWAT, socket.SO_SNDLOWAT,
                 socket.SO_BROADCAST, socket.SO_OOBINLINE, socket.SO_ERROR, socket.SO_TYPE,
                 socket.SO_RCVTIMEO, socket.SO_SNDTIMEO, socket.SO_PRIORITY, 39, 42, 56]  # DOMAIN, PEEK_OFF, NAPI_ID
    TCP_OPTS = [socket.TCP_NODELAY, socket.TCP_CORK, socket.TCP_MAXSEG, socket.TCP_KEEPIDLE,
                socket.TCP_KEEPINTVL, socket.TCP_KEEPCNT, socket.TCP_INFO, socket.TCP_QUICKACK,
                socket.TCP_DEFER_ACCEPT, socket.TCP_USER_TIMEOUT, socket.TCP_CONGESTION, 23, 25, 30]
    IP_OPTS = [socket.IP_TOS, socket.IP_TTL, 10, 11, 8, 15]   # MTU_DISCOVER, RECVERR, PKTINFO, FREEBIND

    def opt(self):
        rng = self.rng
        r = rng.random()
        if r < 0.35:
            lv, op = socket.SOL_SOCKET, rng.choice(self.SOCK_OPTS)
        elif r < 0.7:
            lv, op = socket.IPPROTO_TCP, rng.choice(self.TCP_OPTS)
        elif r < 0.8:
            lv, op = socket.IPPROTO_IP, rng.choice(self.IP_OPTS)
        elif r < 0.85:
            lv, op = socket.IPPROTO_UDP, rng.choice([1, 100, 101, 102, 103])  # CORK, ENCAP, NO_CHECK6, SEGMENT, GRO
        elif r < 0.95:
            lv, op = rng.choice([socket.SOL_SOCKET, socket.IPPROTO_TCP, socket.IPPROTO_IP]), rng.randint(0, 80)
        else:
            lv, op = rng.choice([(999, rng.randint(0, 80)), (-1, 1), (socket.IPPROTO_IPV6, 26),
                                 (socket.IPPROTO_IPV6, 67)])
        return lv, op

    def op_setsockopt(self):
        fd = self.target()
        rng = self.rng
        lv, op = self.opt()
        if (lv, op) in SKIP_OPTS:
            op = socket.SO_KEEPALIVE if lv == socket.SOL_SOCKET else 1
        n = rng.choice([4, 4, 4, 0, 1, 2, 8, 16, 64, 200])
        val = rng.choice([0, 1, 1, 2, 88, 536, 1460, 65535, 1 << 20, -1])
        if (lv, op) == (socket.SOL_SOCKET, socket.SO_LINGER):
            raw = struct.pack("ii", rng.choice([0, 1]), rng.choice([0, 1]))
            n = rng.choice([8, 8, 4, 16])
        elif (lv, op) in ((socket.SOL_SOCKET, socket.SO_RCVBUF), (socket.SOL_SOCKET, socket.SO_SNDBUF)):
            raw = struct.pack("i", rng.choice([0, 1, 256, 2048, 1 << 22]))
        elif (lv, op) == (socket.IPPROTO_TCP, socket.TCP_CONGESTION):
            raw = rng.choice([b"bogus\0", b"cubic\0", b"reno\0", b"x" * 40, b"\0"])
            n = rng.choice([len(raw), len(raw), 1, 16, 0])
        elif (lv, op) in ((socket.SOL_SOCKET, socket.SO_RCVTIMEO), (socket.SOL_SOCKET, socket.SO_SNDTIMEO)):
            raw = struct.pack("ll", 0, rng.choice([0, 1000, 100000]))
            n = rng.choice([16, 16, 8, 4])
        elif rng.random() < 0.2:
            raw = rng.randbytes(n)
        else:
            raw = struct.pack("i", val)
        b = ctypes.create_string_buffer(raw + bytes(256), len(raw) + 256)
        self.call("setsockopt", f"fd={fd} lv={lv} op={op} len={n} {raw[:16].hex()}", libc.setsockopt, fd, lv, op,
                  b, n)

    def op_getsockopt(self):
        fd = self.any_fd()
        lv, op = self.opt()
        b = ctypes.create_string_buffer(512)
        ln = ctypes.c_uint(self.rng.choice([0, 1, 2, 4, 8, 16, 104, 256, 512]))
        self.call("getsockopt", f"fd={fd} lv={lv} op={op} len={ln.value}", libc.getsockopt, fd, lv, op, b,
                  ctypes.byref(ln))

    def op_names(self):
        fd = self.any_fd()
        b = ctypes.create_string_buffer(128)
        ln = ctypes.c_uint(self.rng.choice([0, 1, 2, 4, 8, 15, 16, 28, 128]))
        if self.rng.random() < 0.5:
            self.call("getsockname", f"fd={fd} len={ln.value}", libc.getsockname, fd, b, ctypes.byref(ln))
        else:
            self.call("getpeername", f"fd={fd} len={ln.value}", libc.getpeername, fd, b, ctypes.byref(ln))

    def op_epoll_create(self):
        if self.rng.random() < 0.7:
            fl = self.rng.choice([0, os.O_CLOEXEC, 1])
            fd = self.call("epoll_create1", f"fl={fl:#x}", libc.epoll_create1, fl)
        else:
            n = self.rng.choice([1, 0, -1])
            fd = self.call("epoll_create", f"n={n}", libc.epoll_create, n)
        self.add(fd, "epoll")

    def epfd(self):
        eps = [f for f, k in self.pool.items() if k == "epoll"]
        if eps and self.rng.random() < 0.85:
            return self.rng.choice(sorted(eps))
        return self.target()

    def op_epoll_ctl(self):
        ep = self.epfd()
        fd = self.any_fd()
        op = self.rng.choice([EPOLL_CTL_ADD, EPOLL_CTL_ADD, EPOLL_CTL_MOD, EPOLL_CTL_DEL, 99])
        ev = EpollEvent(self.flags([EPOLLIN, EPOLLOUT, EPOLLRDHUP, EPOLLPRI, EPOLLET, EPOLLONESHOT]) | (
            EPOLLEXCLUSIVE if self.rng.random() < 0.1 else 0) | (EPOLLWAKEUP if self.rng.random() < 0.05 else 0),
            fd)
        pev = ctypes.byref(ev) if self.rng.random() < 0.95 or op != EPOLL_CTL_DEL else None
        self.call("epoll_ctl", f"ep={ep} op={op} fd={fd} ev={ev.events:#x}", libc.epoll_ctl, ep, op, fd, pev)

    def op_epoll_wait(self):
        ep = self.epfd()
        evs = (EpollEvent * 64)()
        mx = self.rng.choice([-1, 0, 1, 8, 64])
        r = self.rng.random()
        if r < 0.6:
            self.call("epoll_wait", f"ep={ep} max={mx}", libc.epoll_wait, ep, evs, mx, 0)
        elif r < 0.8:
            self.call("epoll_pwait", f"ep={ep} max={mx}", libc.epoll_pwait, ep, evs, mx, 0, None)
        else:
            ts = Timespec(0, 0)
            self.call("epoll_pwait2", f"ep={ep} max={mx}", libc.epoll_pwait2, ep, evs, mx, ctypes.byref(ts), None)

    def fdset_members(self):
        k = self.rng.randint(0, 8)
        return [self.any_fd() for _ in range(k)]

    def op_poll(self):
        fds = self.fdset_members()
        arr = (Pollfd * max(len(fds), 1))()
        for i, fd in enumerate(fds):
            arr[i].fd = fd
            arr[i].events = self.flags([select.POLLIN, select.POLLOUT, select.POLLPRI, select.POLLRDHUP])
        if self.rng.random() < 0.7:
            self.call("poll", f"fds={fds}", libc.poll, arr, len(fds), 0)
        else:
            ts = Timespec(0, 0)
            self.call("ppoll", f"fds={fds}", libc.ppoll, arr, len(fds), ctypes.byref(ts), None)

    def op_select(self):
        sets = [ctypes.create_string_buffer(128) for _ in range(3)]
        fds = [f for f in self.fdset_members() if 0 <= f < 1024]
        for fd in fds:
            s = sets[self.rng.randint(0, 2)]
            s[fd // 8] = bytes([s.raw[fd // 8] | (1 << (fd % 8))])
        n = max(fds, default=-1) + 1
        if self.rng.random() < 0.7:
            tv = ctypes.create_string_buffer(16)
            self.call("select", f"n={n} fds={fds}", libc.select, n, *sets, tv)
        else:
            ts = Timespec(0, 0)
            self.call("pselect", f"n={n} fds={fds}", libc.pselect, n, *sets, ctypes.byref(ts), None)

    def op_fork(self):
        if self.child:
            return
        seed = self.rng.randrange(1 << 30)
        nops = self.rng.randint(1, 6)
        self.trace(f"fork seed={seed} nops={nops}")
        self.per_kind["fork"] = self.per_kind.get("fork", 0) + 1
        self.forks += 1
        self.op_start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                signal.alarm(5)
                self.child = True
                self.rng = random.Random(seed)
                for _ in range(nops):
                    self.one()
            except BaseException:   # noqa: BLE001 - the child must never return into the parent's loop
                code = 7
            os._exit(code)
        self.op_start = None
        end = time.monotonic() + 10
        while True:
            r, st = os.waitpid(pid, os.WNOHANG)
            if r:
                break
            if time.monotonic() > end:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise Fail(6, "child_hang", child_seed=seed)
            time.sleep(0.005)
        if os.WIFSIGNALED(st):
            raise Fail(6, "child_crash", child_seed=seed, signal=os.WTERMSIG(st))
        if os.WEXITSTATUS(st):
            raise Fail(6, "child_failed", child_seed=seed, status=os.WEXITSTATUS(st))

    def op_fresh(self):
        """A live connection (or connected UDP socket) to one of the peer's services: most of
        the random calls are more interesting on a socket that has a peer."""
        udp = self.rng.random() < 0.25
        typ = (socket.SOCK_DGRAM if udp else socket.SOCK_STREAM) | (
            socket.SOCK_NONBLOCK if self.rng.random() < 0.4 else 0)
        v6 = self.v6 and self.rng.random() < self.v6
        fd = self.call("socket", f"fresh {typ:#x}{' v6' if v6 else ''}", libc.socket,
                       socket.AF_INET6 if v6 else socket.AF_INET, typ, 0)
        if fd < 0:
            return
        self.add(fd, "fresh")
        port = UDPECHO if udp else self.rng.choice([ECHO, ECHO, ECHO, DISCARD, HOLD, CLOSEAFTER, RESET])
        sa = sin6("::ffff:" + self.peer, port) if v6 else sin(self.peer, port)
        b = ctypes.create_string_buffer(sa, len(sa))
        self.bound(fd)
        self.call("connect", f"fd={fd} fresh {self.peer}:{port}", libc.connect, fd, b, len(sa))

    def op_pair(self):
        """A listener on the local address, a pool socket connected to it, and the accepted one."""
        v6 = self.v6 and self.rng.random() < self.v6
        fam = socket.AF_INET6 if v6 else socket.AF_INET
        ls = self.call("socket", "pair listener", libc.socket, fam, socket.SOCK_STREAM, 0)
        if ls < 0:
            return
        self.add(ls, "listener")
        sa = sin6(self.rng.choice(["::", "::ffff:" + self.local]), 0) if v6 else sin(self.local, 0)
        b = ctypes.create_string_buffer(sa, len(sa))
        self.call("bind", f"fd={ls} pair", libc.bind, ls, b, len(sa))
        self.call("listen", f"fd={ls} pair", libc.listen, ls, 8)
        name = self.own_name(ls)
        if not name:
            return
        c = self.call("socket", "pair client", libc.socket, fam, socket.SOCK_STREAM | socket.SOCK_NONBLOCK, 0)
        if c < 0:
            return
        self.add(c, "client")
        if v6 and name[8:24] == bytes(16):      # bound to [::]: connect to the mapped local address
            name = sin6("::ffff:" + self.local, struct.unpack("!H", name[2:4])[0])
        nb = ctypes.create_string_buffer(name, len(name))
        self.call("connect", f"fd={c} pair {name.hex()}", libc.connect, c, nb, len(name))
        self.bound(ls)
        nfd = self.call("accept4", f"fd={ls} pair", libc.accept4, ls, None, None, self.rng.choice([0, socket.SOCK_NONBLOCK]))
        self.add(nfd, "accept")

    def op_close_range(self):
        fds = sorted(self.pool)
        if not fds:
            return
        i = self.rng.randrange(len(fds))
        j = i
        while j + 1 < len(fds) and fds[j + 1] == fds[j] + 1 and self.rng.random() < 0.7:
            j += 1
        lo, hi = fds[i], fds[j]
        fl = self.rng.choice([0, 0, CLOSE_RANGE_CLOEXEC, CLOSE_RANGE_UNSHARE])
        if lo > hi:
            return
        self.call("close_range", f"{lo} {hi} fl={fl}", libc.close_range, lo, hi, fl)
        if fl != CLOSE_RANGE_CLOEXEC:
            for fd in range(lo, hi + 1):
                self.pool.pop(fd, None)

    # ------------------------------------------------------------------ driver

    def one(self):
        if len(self.pool) > 48:
            self.op_close()
        else:
            fn = self.rng.choices(self.ops, weights=self.weights)[0][1]
            fn()
        self.op += 1

    def watchdog(self):
        while True:
            time.sleep(0.2)
            st = self.op_start
            if st is not None and time.monotonic() - st > self.a.hang:
                msg = json.dumps({"result": "hang", "seed": self.seed, "op": self.op, "call": self.op_desc,
                                  "seconds": round(time.monotonic() - st, 1)})
                os.write(1, (msg + "\n").encode())
                os.write(2, (f"api_fuzz: HANG {msg}\n").encode())
                os._exit(3)

    def run(self):
        t0 = time.monotonic()
        for i in range(self.a.guards):
            g = Guard(i, self.peer, self.seed, v6=self.v6 > 0 and i % 2 == 1)
            self.guards.append(g)
            self.guard_fds.add(g.fd)
        threading.Thread(target=self.watchdog, daemon=True).start()
        gi = 0
        end = t0 + self.a.seconds
        try:
            while time.monotonic() < end and (self.a.max_ops is None or self.op < self.a.max_ops):
                self.one()
                if self.op % 2 == 0:
                    self.op_start = time.monotonic()
                    self.op_desc = f"guard step {gi}"
                    self.guards[gi].step()
                    self.op_start = None
                    gi = (gi + 1) % len(self.guards)
            self.op_desc = "guard finish"
            self.op_start = time.monotonic()
            for g in self.guards:
                g.finish()
            self.op_start = None
            # The pool is closed last: the guards had to survive whatever state it was in.
            for fd in sorted(self.pool):
                self.bound(fd)
                libc.close(fd)
            result, code, info = "ok", 0, {}
        except Fail as f:
            self.op_start = None
            result, code, info = f.result, f.code, f.info
            info["call"] = self.op_desc
        summary = {"result": result, "seed": self.seed, "ops": self.op, "seconds": round(time.monotonic() - t0, 1),
                   "guard_bytes": sum(g.verified for g in self.guards), "guards": len(self.guards),
                   "forks": self.forks, "per_kind": dict(sorted(self.per_kind.items())),
                   "ok_per_kind": dict(sorted(self.ok_kind.items())),
                   "errno": dict(sorted(self.errnos.items(), key=lambda kv: -kv[1])), **info}
        if code:
            summary["failed_op"] = self.op
        print(json.dumps(summary), flush=True)
        return code


# ---------------------------------------------------------------------- minimal reproductions
# Each is the shortest call sequence found for one failure of the fuzzer; it prints
# {"repro": NAME, "result": "survived", ...} when the process lives through it.

AVOIDABLE = {"iovcnt": "msg_iovlen/iovcnt negative or over IOV_MAX",
             "unreachable": "connect/sendto to 198.18.0.3 (no such host)"}
REPROS = {}


def repro(fn):
    REPROS[fn.__name__[6:]] = fn
    return fn


def iov_array(n):
    arr = (Iovec * 1)()
    buf = ctypes.create_string_buffer(64)
    arr[0].base, arr[0].len = addr(buf), 64
    return arr, buf


@repro
def repro_udp_sendmsg_iovlen(a):
    """sendmsg on a UDP socket with msg_iovlen = SIZE_MAX: Linux says EMSGSIZE (> UIO_MAXIOV)."""
    fd = libc.socket(socket.AF_INET, socket.SOCK_DGRAM, 0)
    arr, buf = iov_array(1)
    dst = ctypes.create_string_buffer(sin(a.peer, UDPECHO), 16)
    m = Msghdr(addressof_or_none(dst), 16, addr(arr), (1 << 64) - 1, None, 0, 0)
    r = libc.sendmsg(fd, ctypes.byref(m), 0)
    return {"sendmsg": r, "errno": ename(ctypes.get_errno()) if r < 0 else 0}


@repro
def repro_udp_recvmsg_iovlen(a):
    """recvmsg on a bound UDP socket with msg_iovlen = SIZE_MAX: Linux says EMSGSIZE."""
    fd = libc.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK, 0)
    libc.bind(fd, ctypes.create_string_buffer(sin(a.local, 0), 16), 16)
    arr, buf = iov_array(1)
    m = Msghdr(None, 0, addr(arr), (1 << 64) - 1, None, 0, 0)
    r = libc.recvmsg(fd, ctypes.byref(m), 0)
    return {"recvmsg": r, "errno": ename(ctypes.get_errno()) if r < 0 else 0}


@repro
def repro_tcp_recvmsg_iovlen(a):
    """recvmsg on a connected TCP socket with data queued and msg_iovlen = SIZE_MAX: Linux says
    EMSGSIZE."""
    s = socket.create_connection((a.peer, ECHO), timeout=5)
    s.sendall(b"x" * 100)
    time.sleep(0.3)
    arr = (Iovec * 2)()
    buf = ctypes.create_string_buffer(64)
    arr[0].base, arr[0].len = addr(buf), 64
    arr[1].base, arr[1].len = addr(buf), 64
    m = Msghdr(None, 0, addr(arr), (1 << 64) - 1, None, 0, 0)
    r = libc.recvmsg(s.fileno(), ctypes.byref(m), MSG_DONTWAIT)
    return {"recvmsg": r, "errno": ename(ctypes.get_errno()) if r < 0 else 0}


@repro
def repro_tcp_writev_1025(a):
    """writev with iovcnt = 1025 (> IOV_MAX) on a connected TCP socket: Linux says EINVAL."""
    s = socket.create_connection((a.peer, ECHO), timeout=5)
    arr = (Iovec * 1025)()
    r = libc.writev(s.fileno(), arr, 1025)
    return {"writev": r, "errno": ename(ctypes.get_errno()) if r < 0 else 0}


def timed(limit, what):
    """Runs what(); a watchdog ends the process (exit 3) when it takes longer than limit s."""
    done = threading.Event()

    def dog():
        if not done.wait(limit):
            os.write(1, (json.dumps({"result": "hang", "seconds": limit}) + "\n").encode())
            os._exit(3)
    threading.Thread(target=dog, daemon=True).start()
    t0 = time.monotonic()
    r = what()
    done.set()
    return r, round(time.monotonic() - t0, 2)


@repro
def repro_connect_sndtimeo(a):
    """A blocking connect to an address nobody answers, with SO_SNDTIMEO 100 ms: Linux returns
    EINPROGRESS after 100 ms (inet_stream_connect waits sock_sndtimeo); the handshake goes on."""
    fd = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
    tv = ctypes.create_string_buffer(struct.pack("ll", 0, 100000), 16)
    libc.setsockopt(fd, socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv, 16)
    dst = ctypes.create_string_buffer(sin("198.18.0.3", ECHO), 16)
    r, took = timed(4.0, lambda: libc.connect(fd, dst, 16))
    return {"connect": r, "errno": ename(ctypes.get_errno()) if r < 0 else 0, "under_1s": took < 1.0}


def udp_err_case(a, flags, connect_port, send_port):
    fd = libc.socket(socket.AF_INET, socket.SOCK_DGRAM, 0)
    tv = ctypes.create_string_buffer(struct.pack("ll", 0, 100000), 16)
    libc.setsockopt(fd, socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv, 16)
    dst = ctypes.create_string_buffer(sin(a.peer, connect_port), 16)
    libc.connect(fd, dst, 16)
    to = ctypes.create_string_buffer(sin(a.peer, send_port), 16)
    libc.sendto(fd, b"x", 1, 0, to, 16)
    time.sleep(0.3)
    buf = ctypes.create_string_buffer(64)
    r, took = timed(4.0, lambda: libc.recv(fd, buf, 64, flags))
    return {"recv": r, "errno": ename(ctypes.get_errno()) if r < 0 else 0, "under_1s": took < 1.0}


@repro
def repro_udp_refused_recv(a):
    """A connected UDP socket whose datagram met a closed port (ICMP port unreachable): Linux's
    next recv returns ECONNREFUSED (the pending error, once)."""
    return udp_err_case(a, 0, CLOSED, CLOSED)


@repro
def repro_udp_refused_peek(a):
    """The same with MSG_PEEK."""
    return udp_err_case(a, MSG_PEEK, CLOSED, CLOSED)


@repro
def repro_udp_recvmmsg_peek_idle(a):
    """recvmmsg(MSG_PEEK) on an idle connected UDP socket with SO_RCVTIMEO 100 ms: Linux gives
    EAGAIN after 100 ms."""
    fd = libc.socket(socket.AF_INET, socket.SOCK_DGRAM, 0)
    tv = ctypes.create_string_buffer(struct.pack("ll", 0, 100000), 16)
    libc.setsockopt(fd, socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv, 16)
    dst = ctypes.create_string_buffer(sin(a.peer, UDPECHO), 16)
    libc.connect(fd, dst, 16)
    out = {}
    for iovn in (1, 0):
        for name in (False, True):
            arr = (Iovec * 1)()
            buf = ctypes.create_string_buffer(64)
            nb = ctypes.create_string_buffer(128)
            arr[0].base, arr[0].len = addr(buf), 64
            mm = (Mmsghdr * 1)()
            mm[0].hdr = Msghdr(addr(nb) if name else None, 16 if name else 0, addr(arr), iovn, None, 0, 0)
            r, took = timed(4.0, lambda: libc.recvmmsg(fd, mm, 1, MSG_PEEK, None))
            out[f"iov{iovn}_name{int(name)}"] = [r, ename(ctypes.get_errno()) if r < 0 else 0, took < 1.0]
    return out


def addressof_or_none(b):
    return addr(b) if b is not None else None


def run_repro(a):
    fn = REPROS[a.repro]
    ctypes.set_errno(0)
    out = fn(a)
    print(json.dumps({"repro": a.repro, "result": "survived", **out}), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", default="198.18.0.1")
    ap.add_argument("--local", default="198.18.0.2")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--max-ops", type=int, default=None)
    ap.add_argument("--guards", type=int, default=3)
    ap.add_argument("--v6", type=float, default=0.0, help="share of sockets made AF_INET6 (dual-stack, "
                    "v4-mapped addresses); with it every other guard is one too")
    ap.add_argument("--hang", type=float, default=5.0, help="seconds one call may take")
    ap.add_argument("--trace", default=None)
    ap.add_argument("--avoid", default="", help="known-bug features to leave out (comma list): "
                    + ", ".join(AVOIDABLE))
    ap.add_argument("--repro", default=None, help="run one minimal reproduction: " + ", ".join(REPROS))
    a = ap.parse_args()
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    if a.repro:
        sys.exit(run_repro(a))
    sys.exit(Fuzzer(a).run())


if __name__ == "__main__":
    main()
