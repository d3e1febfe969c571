"""Deferred TX kicks (stack.c tx_done): a thread handling events from epoll_wait may leave its
TCP frames on the TX ring for its next poll. An application that sends and then computes for a
long time without calling into the stack must still get its data out within a few milliseconds
(the progress thread kicks what was left), not when it next waits."""
import os
import socket
import subprocess
import sys
import time

import pytest

PY = sys.executable
B_ADDR = "198.18.0.2"
PORT = 7610
ROUNDS = 8
COMPUTE_S = 1.0      # the server's busy loop after each reply
# Tells a reply kicked by the progress thread (the stack's bound is 3 ms) from one left until the
# server's next wait (COMPUTE_S); the rest is scheduling on a busy VM: 0.1 s was exceeded there
# (112 ms with the machine loaded), so a wide margin on both sides, not a speed check.
BOUND_S = 0.4

# Replies to each request, then computes (no syscall: time.monotonic is a vDSO call) before it
# goes back to epoll_wait: without the progress thread's kick the reply would wait COMPUTE_S.
SERVER = r"""
import select, socket, sys, time
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[1], int(sys.argv[2]))); ls.listen(8); ls.setblocking(False)
ep = select.epoll(); ep.register(ls.fileno(), select.EPOLLIN)
print("ready", flush=True)
conns = {}
while True:
    for fd, ev in ep.poll():
        if fd == ls.fileno():
            c, _ = ls.accept(); c.setblocking(False)
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conns[c.fileno()] = c; ep.register(c.fileno(), select.EPOLLIN)
            continue
        c = conns[fd]
        try:
            d = c.recv(4096)
        except BlockingIOError:
            continue
        if not d:
            ep.unregister(fd); c.close(); del conns[fd]; continue
        c.send(b"pong:" + d)
        t = time.monotonic()
        while time.monotonic() - t < %f:
            pass
""" % COMPUTE_S


def test_reply_leaves_while_the_application_computes(testbed, build_dir):
    exe = build_dir / "slipstream"
    if not exe.exists():
        pytest.skip(f"not built: {exe}")
    a, b = testbed.host("a"), testbed.host("b")
    srv = b.popen([str(exe), "run", "--iface", "veth0", "--strict", "--", PY, "-c", SERVER, B_ADDR, str(PORT)],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = srv.stdout.readline()
        assert line.strip() == "ready", f"server did not start: {line!r} {srv.stderr.read() if srv.poll() is not None else ''}"
        client = r"""
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for i in range(int(sys.argv[3])):
    t = time.monotonic()
    s.sendall(b"ping%d" % i)
    d = s.recv(4096)
    print("%.6f %r" % (time.monotonic() - t, d), flush=True)
    time.sleep(@PAUSE@)   # let the server finish computing before the next request
""".replace("@PAUSE@", str(COMPUTE_S + 0.1))
        r = a.run([PY, "-c", client, B_ADDR, str(PORT), str(ROUNDS)], timeout=60)
        assert r.returncode == 0, r.stderr
        rows = [ln.split(" ", 1) for ln in r.stdout.strip().splitlines()]
        assert len(rows) == ROUNDS, r.stdout
        lat = [float(x[0]) for x in rows]
        for i, (_, reply) in enumerate(rows):
            assert f"pong:ping{i}" in reply, reply
        print(f"reply latency while the server computes {COMPUTE_S}s after each send: "
              f"{', '.join(f'{x * 1000:.1f}' for x in lat)} ms")
        assert max(lat) < BOUND_S, f"a reply waited {max(lat) * 1000:.0f} ms (bound {BOUND_S * 1000:.0f} ms)"
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=10)
        except subprocess.TimeoutExpired:
            srv.kill()


# An event-loop server that answers and closes without reading the rest of the request: Linux
# sends the reply at write time and the RST (unread data) after it. Here the reply waited in the
# cork list for the next kick and the close's RST went alone: the client saw a reset, no reply.
CLOSER = r"""
import select, socket, sys
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[1], int(sys.argv[2]))); ls.listen(64)
print("ready", flush=True)
ep = select.epoll()
for i in range(int(sys.argv[3])):
    c, _ = ls.accept()
    print(f"{i} accepted", file=sys.stderr, flush=True)
    ep.register(c.fileno(), select.EPOLLIN)
    while not ep.poll(1.0):
        print(f"{i} nothing to read after 1 s", file=sys.stderr, flush=True)
    ep.unregister(c.fileno())
    c.sendall(b"done\n")
    c.close()
    print(f"{i} answered and closed", file=sys.stderr, flush=True)
"""


def test_reply_then_close_with_a_request_unread(testbed, build_dir):
    exe = build_dir / "slipstream"
    if not exe.exists():
        pytest.skip(f"not built: {exe}")
    a, b = testbed.host("a"), testbed.host("b")
    n = 100
    srv = b.popen([str(exe), "run", "--iface", "veth0", "--strict", "--", PY, "-c", CLOSER, B_ADDR, str(PORT + 1),
                   str(n)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "ready", srv.stderr.read() if srv.poll() is not None else ""
        client = r"""
import socket, sys
bad = 0
for i in range(int(sys.argv[3])):
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
    s.sendall(b"0123456789")
    try:
        bad += s.makefile("rb").readline() != b"done\n"
    except ConnectionResetError:
        bad += 1
    except socket.timeout:
        sys.exit(f"connection {i} (local port {s.getsockname()[1]}): neither the reply nor a reset in 10 s")
    s.close()
print(bad)
"""
        r = a.run([PY, "-c", client, B_ADDR, str(PORT + 1), str(n)], timeout=120)
        if r.returncode != 0:
            # What the server had reached, and its stack's counters, for a failure seen once in
            # a few full runs and never alone (a lost wake-up or a lost reply and reset).
            st = "\n".join(l for l in b.run([str(exe), "stat", "--iface", "veth0"], timeout=30).stdout.splitlines()
                            if not l.endswith(" 0"))
            srv.kill()
            _, err = srv.communicate(timeout=10)
            tail = "\n".join(err.strip().splitlines()[-4:])
            pytest.fail(f"{r.stderr.strip()}\nserver's last lines:\n{tail}\nslipstream stat:\n{st}")
        print(f"replies lost to the reset: {r.stdout.strip()} of {n}")
        assert r.stdout.strip() == "0", f"{r.stdout.strip()} of {n} replies lost to the reset"
        srv.wait(timeout=30)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait(timeout=10)


# The same server, but the process ends the moment its last connection is closed (libc exit(),
# no interpreter teardown): the reply and the RST of that close were left on the TX ring for the
# progress thread's kick, and the exit stops that thread first. The stack dies with its last
# process, so the exit itself has to kick them, as the kernel delivers what a process wrote
# before it ended.
def test_reply_close_and_exit_at_once(testbed, build_dir):
    exe = build_dir / "slipstream"
    if not exe.exists():
        pytest.skip(f"not built: {exe}")
    a, b = testbed.host("a"), testbed.host("b")
    n = 30      # earlier connections keep the thread deferring (the stack's TX_DEFER_HOT)
    exiter = CLOSER.replace("import select, socket, sys", "import ctypes, select, socket, sys\nlibc = ctypes.CDLL(None)")
    exiter = exiter.replace('c.close()', 'c.close()\n    i == int(sys.argv[3]) - 1 and libc.exit(0)')
    assert exiter.count("libc") == 2
    client = r"""
import socket, sys
for i in range(int(sys.argv[3])):
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
    s.sendall(b"0123456789")
    try:
        got = s.makefile("rb").readline()
    except ConnectionResetError:
        got = b"reset"
    except socket.timeout:
        sys.exit(f"connection {i} of {sys.argv[3]}: neither the reply nor a reset in 5 s")
    s.close()
print("ok")
"""
    for rnd in range(5):
        srv = b.popen([str(exe), "run", "--iface", "veth0", "--strict", "--", PY, "-c", exiter, B_ADDR,
                       str(PORT + 2), str(n)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert srv.stdout.readline().strip() == "ready", srv.stderr.read() if srv.poll() is not None else ""
            r = a.run([PY, "-c", client, B_ADDR, str(PORT + 2), str(n)], timeout=120)
            assert r.returncode == 0, f"round {rnd}: {r.stderr.strip()}"
            assert srv.wait(timeout=30) == 0
        finally:
            if srv.poll() is None:
                srv.kill()
                srv.wait(timeout=10)
