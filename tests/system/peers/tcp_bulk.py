"""Kernel-side bulk TCP peer: sends or receives a deterministic pseudo-random stream and checks it.

    tcp_bulk.py send HOST PORT BYTES [--seed S] [--cc ALG]  connect, send, wait for the peer's close
    tcp_bulk.py recv PORT BYTES [--seed S] [--rcvbuf N]  listen, accept one, read to EOF, verify
    tcp_bulk.py serve-send PORT BYTES [--seed S]         listen, accept one, send
    tcp_bulk.py connect-recv HOST PORT BYTES [--seed S] [--rcvbuf N]   connect, read to EOF, verify
    tcp_bulk.py gen BYTES [--seed S]                     write the stream to stdout (for pipes)
    tcp_bulk.py check BYTES [--seed S]                   read stdin to EOF, verify like recv
Receivers also take --pause-ms MS [--pause-every BYTES (1M)]: a slow reader, which is what
closes the window of a small --rcvbuf (a fast reader keeps it open); a pause longer than the
sender's RTO also makes the sender probe the zero window (persist timer).

BYTES takes an optional K/M/G suffix (binary: 1G = 2**30). The stream is 4 MiB chunks; chunk i is
the seed's 4 MiB random block rotated left by (i * 2654435761) mod 4 MiB, so chunks differ and a
receiver regenerates any offset without state (the sender sends slices of the block, no copies).

gen and check put the stream through a pipe, for programs that move bytes between a pipe and a
connection (tests/prog/tcp_tool): gen's JSON line goes to stderr (its stdout is the data) and
holds the sha256 of what it wrote; check prints the same JSON as recv.

Each run prints one JSON line on stdout:
    {"role": ..., "bytes": N, "sha256": hex, "ok": bool, "first_diff": null|offset, "seconds": s,
     "mbytes_per_s": r}
The receiver's ok means: exactly BYTES arrived and every byte matched. The sender's ok means: every
byte was written and the peer then closed cleanly (so "seconds" covers delivery, not buffering).
A receiver's "seconds" run from its first byte to EOF. Both sides make their stream and buffers
before they connect or accept, so neither keeps its peer waiting once the connection is up.
A listener says "listening PORT" on stderr once it accepts connections; connecting sides retry
refused connections for --connect-timeout seconds. Stall guard: when no byte moves for --stall
seconds (30), the run prints {"ok": false, "stalled_at": offset, ...} and exits 2 (offset: bytes
the peer acknowledged for a sender, bytes read for a receiver). Other failures
(reset, short stream, mismatch) exit 1.
"""

import argparse
import hashlib
import json
import os
import queue
import random
import socket
import sys
import threading
import time

CHUNK = 4 << 20
ROT_STEP = 2654435761


class Stream:
    """The expected byte stream for a seed: expected(i) is chunk i as a zero-copy memoryview."""

    def __init__(self, seed):
        block = random.Random(seed).randbytes(CHUNK)
        self._double = memoryview(block + block)

    def chunk(self, i):
        r = (i * ROT_STEP) % CHUNK
        return self._double[r:r + CHUNK]


class Hasher:
    """sha256 on a helper thread: hashlib drops the GIL on large updates, so hashing overlaps the
    socket calls instead of halving the throughput. done(buf) is called with each buffer after it
    was hashed (the receiver recycles its buffers that way)."""

    def __init__(self, done=None):
        self.h = hashlib.sha256()
        self._q = queue.Queue(maxsize=4)
        self._done = done
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while True:
            item = self._q.get()
            if item is None:
                return
            buf, n = item
            self.h.update(buf[:n] if n != len(buf) else buf)
            if self._done:
                self._done(buf)

    def put(self, buf, n):
        self._q.put((buf, n))

    def hexdigest(self):
        self._q.put(None)
        self._t.join()
        return self.h.hexdigest()


class Watchdog:
    """The stall guard. The sockets block (a Python socket timeout would add a poll() to every
    call and cost a quarter of the throughput), so a thread watches progress instead: the
    receiver's byte count, or for the sender the bytes the peer acknowledged (TCP_INFO), which
    moves even inside one large blocking send. No progress for `stall` seconds: print the
    report and exit 2 from here."""

    def __init__(self, sock, stall, out, sending):
        self.pos = 0            # bytes handed over by the main thread (GIL makes this safe)
        self._sock = sock
        self._stall = stall
        self._out = out
        self._sending = sending
        self._t0 = time.monotonic()
        # Before any data: what is acked now is the SYN, counted on the active side only.
        self._base = (self.acked() or 0) if sending else 0
        threading.Thread(target=self._run, daemon=True).start()

    def acked(self):
        try:
            info = self._sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
        except OSError:
            return None
        # struct tcp_info: 8 one-byte fields, 24 __u32, pacing_rate, max_pacing_rate, then
        # tcpi_bytes_acked at offset 120 (Linux >= 4.1).
        if len(info) < 128:
            return None
        return int.from_bytes(info[120:128], sys.byteorder)

    def progress(self):
        if self._sending:
            acked = self.acked()
            if acked is not None:
                return max(0, acked - self._base)
        return self.pos

    def _run(self):
        last, since = -1, time.monotonic()
        while True:
            time.sleep(min(1.0, self._stall / 4))
            now, pos = time.monotonic(), self.progress()
            if pos != last:
                last, since = pos, now
            elif now - since >= self._stall:
                self._out.update(bytes=pos, ok=False, stalled_at=pos, sha256=None,
                                 seconds=round(now - self._t0, 3))
                print(json.dumps(self._out), flush=True)
                os._exit(2)


def parse_bytes(s):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    s = s.strip().lower()
    try:
        if s and s[-1] in mult:
            v = int(float(s[:-1]) * mult[s[-1]])
        else:
            v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad byte count {s!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"bad byte count {s!r}")
    return v


def report(obj, code):
    print(json.dumps(obj), flush=True)
    sys.exit(code)


def listen_accept(port, bind, rcvbuf):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if rcvbuf:
        # Before listen(): the accepted socket inherits it and the window scale is chosen from it.
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    ls.bind((bind, port))
    ls.listen(1)
    print(f"listening {port}", file=sys.stderr, flush=True)
    # The accept itself is not guarded by --stall: the peer may start late; the caller's own
    # timeout covers a peer that never comes.
    c, _ = ls.accept()
    ls.close()
    return c


def connect(host, port, rcvbuf, connect_timeout, cc=None):
    deadline = time.monotonic() + connect_timeout
    while True:
        s = socket.socket()
        if cc:  # root may pick any loaded algorithm, also one outside tcp_allowed_congestion_control
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(max(1.0, connect_timeout))
        try:
            s.connect((host, port))
            s.settimeout(None)
            return s
        except OSError as e:  # refused, unreachable, timed out: the listener may not be up yet
            s.close()
            if time.monotonic() >= deadline:
                report({"ok": False, "error": f"connect {host}:{port}: {e}"}, 1)
            time.sleep(0.05)


def do_send(open_sock, nbytes, seed, role, stall):
    """Writes the stream, half-closes, and waits for the peer's close. The stream is made before
    open_sock() connects (or accepts): making it takes tens of milliseconds, which are not part
    of the transfer."""
    stream = Stream(seed)
    hasher = Hasher()
    out = {"role": role}
    sock = open_sock()
    dog = Watchdog(sock, stall, out, sending=True)
    sent = 0
    t0 = time.monotonic()
    try:
        i = 0
        while sent < nbytes:
            n = min(CHUNK, nbytes - sent)
            view = stream.chunk(i)[:n]
            hasher.put(view, n)
            sock.sendall(view)
            sent += n
            dog.pos = sent
            i += 1
        sock.shutdown(socket.SHUT_WR)
        # The receiver closes after reading everything: EOF here means it was all delivered.
        while sock.recv(65536):
            pass
    except OSError as e:
        out.update(bytes=sent, ok=False, error=str(e), seconds=round(time.monotonic() - t0, 3),
                   sha256=hasher.hexdigest())
        report(out, 1)
    secs = time.monotonic() - t0
    sock.close()
    out.update(bytes=sent, sha256=hasher.hexdigest(), ok=True, first_diff=None,
               seconds=round(secs, 3), mbytes_per_s=round(sent / 1e6 / max(secs, 1e-9), 1))
    report(out, 0)


def first_difference(got, want):
    """Offset of the first differing byte, by bisection over memcmp'd halves."""
    lo, hi = 0, min(len(got), len(want))
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if bytearray(got[lo:mid]) != want[lo:mid]:
            hi = mid
        else:
            lo = mid
    return lo


def do_recv(open_sock, nbytes, seed, role, stall, pause_ms=0, pause_every=0):
    """Fills 4 MiB buffers, compares each with the regenerated chunk, hashes it on the helper
    thread, and keeps reading past a mismatch so the byte count is still right. With pause_ms,
    stops reading for that long after every pause_every bytes: a slow reader is what fills a
    small receive buffer and makes the window close. The stream and buffers are made before
    open_sock() accepts (or connects), so that reading starts with the connection: made after
    it, they kept the reader away for 40-60 ms while the sender filled the window. The time
    reported runs from the first byte to EOF."""
    stream = Stream(seed)
    free = queue.Queue()
    for _ in range(6):
        free.put(bytearray(CHUNK))
    hasher = Hasher(done=free.put)
    got = 0
    first_diff = None
    next_pause = pause_every if pause_ms and pause_every else None
    out = {"role": role}
    sock = open_sock()
    dog = Watchdog(sock, stall, out, sending=False)
    t0 = None
    try:
        i = 0
        eof = False
        while not eof:
            buf = free.get()
            mv = memoryview(buf)
            fill = 0
            while fill < CHUNK:
                n = sock.recv_into(mv[fill:])
                if n == 0:
                    eof = True
                    break
                if t0 is None:
                    t0 = time.monotonic()
                fill += n
                dog.pos = got + fill
                if next_pause is not None and got + fill >= next_pause:
                    time.sleep(pause_ms / 1000)
                    next_pause += pause_every
            if fill:
                if first_diff is None:
                    # Bytes past the expected total have nothing to match: a longer stream is
                    # reported at offset nbytes.
                    want_n = max(0, min(fill, nbytes - got))
                    want = stream.chunk(i)[:want_n]
                    # bytearray == buffer is one memcmp; memoryview == memoryview compares
                    # item by item, 40 times slower.
                    have = buf if want_n == CHUNK else bytearray(mv[:want_n])
                    if have != want:
                        first_diff = got + first_difference(mv[:want_n], want)
                    elif fill > want_n:
                        first_diff = nbytes
                hasher.put(buf, fill)
                got += fill
                i += 1
            else:
                free.put(buf)
    except OSError as e:
        out.update(bytes=got, ok=False, error=str(e), first_diff=first_diff,
                   seconds=round(time.monotonic() - (t0 or time.monotonic()), 3),
                   sha256=hasher.hexdigest())
        report(out, 1)
    secs = time.monotonic() - t0 if t0 is not None else 0.0
    sock.close()
    if first_diff is None and got < nbytes:
        first_diff = got  # the stream ended early: the first missing byte
    ok = first_diff is None and got == nbytes
    out.update(bytes=got, sha256=hasher.hexdigest(), ok=ok, first_diff=first_diff,
               seconds=round(secs, 3), mbytes_per_s=round(got / 1e6 / max(secs, 1e-9), 1))
    report(out, 0 if ok else 1)


class _PipeIn:
    """stdin with the two socket methods do_recv uses, so check shares recv's verification."""

    def __init__(self, fd):
        self._f = os.fdopen(fd, "rb", buffering=0, closefd=False)

    def recv_into(self, mv):
        return self._f.readinto(mv) or 0

    def getsockopt(self, *a):
        raise OSError("not a socket")

    def close(self):
        pass


def do_gen(nbytes, seed):
    """Writes the stream to stdout; the JSON report (with the sha256 of what was written) goes to
    stderr. A reader that goes away early is a failure (exit 1)."""
    stream = Stream(seed)
    hasher = Hasher()
    out = {"role": "gen"}
    sent = 0
    t0 = time.monotonic()
    try:
        i = 0
        while sent < nbytes:
            n = min(CHUNK, nbytes - sent)
            view = stream.chunk(i)[:n]
            hasher.put(view, n)
            off = 0
            while off < n:
                off += os.write(1, view[off:])
            sent += n
            i += 1
    except OSError as e:
        out.update(bytes=sent, ok=False, error=str(e), seconds=round(time.monotonic() - t0, 3),
                   sha256=hasher.hexdigest())
        print(json.dumps(out), file=sys.stderr, flush=True)
        sys.exit(1)
    secs = time.monotonic() - t0
    out.update(bytes=sent, sha256=hasher.hexdigest(), ok=True, first_diff=None,
               seconds=round(secs, 3), mbytes_per_s=round(sent / 1e6 / max(secs, 1e-9), 1))
    print(json.dumps(out), file=sys.stderr, flush=True)
    sys.exit(0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)

    def common(p, receiving):
        p.add_argument("--seed", type=int, default=1)
        p.add_argument("--stall", type=float, default=30.0,
                       help="seconds without progress before giving up (default 30)")
        if receiving:
            p.add_argument("--rcvbuf", type=int, default=0, help="SO_RCVBUF of the receiving socket")
            p.add_argument("--pause-ms", type=float, default=0,
                           help="stop reading this long after every --pause-every bytes")
            p.add_argument("--pause-every", type=parse_bytes, default=1 << 20)

    for name, has_host, receiving in (("send", True, False), ("recv", False, True),
                                      ("serve-send", False, False),
                                      ("connect-recv", True, True)):
        p = sub.add_parser(name)
        if has_host:
            p.add_argument("host")
            p.add_argument("--connect-timeout", type=float, default=10.0)
            p.add_argument("--cc", help="congestion control of the connecting socket (TCP_CONGESTION)")
        else:
            p.add_argument("--bind", default="0.0.0.0")
        p.add_argument("port", type=int)
        p.add_argument("nbytes", type=parse_bytes, metavar="BYTES")
        common(p, receiving)
    for name in ("gen", "check"):
        p = sub.add_parser(name)
        p.add_argument("nbytes", type=parse_bytes, metavar="BYTES")
        p.add_argument("--seed", type=int, default=1)
        if name == "check":
            p.add_argument("--stall", type=float, default=30.0,
                           help="seconds without a byte before giving up (default 30)")
    a = ap.parse_args(argv)
    if a.mode == "gen":
        # Python would raise on SIGPIPE's EPIPE anyway; keep it an OSError we report.
        do_gen(a.nbytes, a.seed)
    if a.mode == "check":
        do_recv(lambda: _PipeIn(0), a.nbytes, a.seed, "check", a.stall)
    rcvbuf = getattr(a, "rcvbuf", 0)

    if a.mode in ("send", "connect-recv"):
        def open_sock():
            return connect(a.host, a.port, rcvbuf, a.connect_timeout, a.cc)
    else:
        def open_sock():
            return listen_accept(a.port, a.bind, rcvbuf)
    if a.mode in ("send", "serve-send"):
        do_send(open_sock, a.nbytes, a.seed, a.mode, a.stall)
    else:
        do_recv(open_sock, a.nbytes, a.seed, a.mode, a.stall, a.pause_ms, a.pause_every)


if __name__ == "__main__":
    main()
