"""Process death under `slipstream run` (issue 4): the stack is shared by every process of the
application, and the kernel closes a dead process's fds. A fork child that exits (or is killed)
without closing the connections it inherited must not keep them open: the peer has to see the
connection end when the last living holder closes it."""
import os
import socket
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
APPS = os.path.join(HERE, "apps")
B_ADDR = "198.18.0.2"
CLIENT = r"""
import socket, sys, time
addr, port, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for n in range(rounds):
    s = socket.create_connection((addr, port), timeout=10)
    s.settimeout(8)
    t0 = time.monotonic()
    data = b""
    try:
        while True:
            d = s.recv(4096)
            if not d:
                break
            data += d
    except socket.timeout:
        print(f"round {n}: no EOF after 8 s, got {data!r}", flush=True)
        sys.exit(1)
    dt = time.monotonic() - t0
    if data != f"parent {n}\n".encode():
        print(f"round {n}: got {data!r}", flush=True)
        sys.exit(1)
    print(f"round {n}: EOF after {dt:.3f} s", flush=True)
    s.close()
"""


@pytest.fixture
def slip(build_dir):
    exe = build_dir / "slipstream"
    if not exe.exists():
        pytest.skip(f"not built: {exe}")
    return lambda cmd: [str(exe), "run", "--iface", "veth0", "--", *cmd]


@pytest.mark.parametrize("mode,rounds", [("exit", 5), ("kill", 3)])
def test_connection_ends_when_fork_child_dies_holding_it(testbed, slip, mode, rounds):
    a, b = testbed.host("a"), testbed.host("b")
    srv = b.popen(slip([sys.executable, os.path.join(APPS, "fork_hold.py"), "7100", mode, str(rounds)]),
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = srv.stdout.readline()
    assert line.startswith("listening"), (line, srv.stderr.read() if srv.poll() is not None else "")
    cl = a.run([sys.executable, "-c", CLIENT, B_ADDR, "7100", str(rounds)], timeout=120)
    print(cl.stdout)
    out, err = srv.communicate(timeout=30)
    assert "not accelerated" not in err, err
    assert cl.returncode == 0, (cl.stdout, cl.stderr, err)
    assert f"done {rounds}" in out, (out, err)


@pytest.mark.parametrize("second", ["kernel", "slipstream"])
def test_port_free_while_exited_server_still_delivers(testbed, slip, second):
    """A server that exits leaving unsent data: the kernel closes its listener at once (the
    orphaned connection goes on delivering), so a restarted server can listen on the same port
    right away and get the new connections. The stack keeps delivering after exit too; its
    listener, kernel socket and steering must not outlive the exit."""
    a, b = testbed.host("a"), testbed.host("b")
    first = b.popen(["env", "SLIP_EXIT_LINGER_MS=5000",
                     *slip([sys.executable, os.path.join(APPS, "exit_restart.py"), "7300"])],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert first.stdout.readline().strip() == "listening"
    # a peer that never reads
    hold = a.popen([sys.executable, "-c",
                    "import socket, time\n"
                    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)\n"
                    f"s.connect(('{B_ADDR}', 7300)); print('connected', flush=True); time.sleep(8)\n"],
                   stdout=subprocess.PIPE, text=True)
    assert hold.stdout.readline().strip() == "connected"
    line = first.stdout.readline()
    assert line.startswith("exiting"), (line, first.stderr.read())
    t0 = time.monotonic()
    server2 = [sys.executable, "-c",
               "import socket\n"
               "l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
               "l.bind(('0.0.0.0', 7300)); l.listen(8); print('listening', flush=True)\n"
               "c, _ = l.accept(); c.sendall(b'second'); c.close()\n"]
    s2 = b.popen(slip(server2) if second == "slipstream" else server2,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = s2.stdout.readline().strip()
    listened = time.monotonic() - t0
    still_running = first.poll() is None
    assert line == "listening", (line, s2.stderr.read())
    cl = a.run([sys.executable, "-c",
                f"import socket; s = socket.create_connection(('{B_ADDR}', 7300), timeout=5)\n"
                "d = b''\nwhile len(d) < 6:\n    x = s.recv(100)\n    assert x, d\n    d += x\nprint(d.decode())\n"],
               timeout=30)
    print(f"second server ({second}) listening {listened:.3f} s after the first said exiting; "
          f"first still delivering then: {still_running}; client: {cl.stdout.strip()} {cl.stderr.strip()}")
    assert cl.returncode == 0 and cl.stdout.strip() == "second", cl.stderr
    _, err2 = s2.communicate(timeout=30)
    if second == "slipstream":
        assert "not accelerated" not in err2, err2     # it joined the stack still delivering
        # The first server lingers 5 s delivering: a second that had to wait for that would
        # listen after 5 s; starting a program under a loaded machine took 1.3 s once (1.0 was
        # the bound), so 3 s tells the two apart with room.
        assert listened < 3.0, listened
    hold.kill()
    first.communicate(timeout=30)


FORK_BELLS = r"""
import os, select, socket, sys


def eventfds():
    ids = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            with open(f"/proc/self/fdinfo/{fd}") as f:
                for line in f:
                    if line.startswith("eventfd-id:"):
                        ids.add(int(line.split()[1]))
        except OSError:
            pass
    return ids


l = socket.socket()
l.bind((sys.argv[1], 7130))
l.listen(4)
ep = select.epoll()
ep.register(l.fileno(), select.EPOLLIN)
ep.poll(0.05)                       # the stack's wake fds join the set
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(w, (" ".join(map(str, sorted(eventfds()))) + "\n").encode())
    # the inherited set still wakes for a connection (the peer connects once told 'ready')
    ev = ep.poll(20)
    c, _ = l.accept()
    c.sendall(b"child\n")
    c.close()
    os._exit(0 if ev else 1)
child = {int(x) for x in os.read(r, 4096).split()}
mine = eventfds()
print("parent", sorted(mine), "child", sorted(child), flush=True)
print("ready", flush=True)
_, st = os.waitpid(pid, 0)
print("shared", sorted(mine & child), "child_rc", os.waitstatus_to_exitcode(st), flush=True)
"""


def test_fork_child_has_bells_of_its_own(testbed, slip):
    """A fork child gets its own doorbell and accept bell (eventfds), and an epoll set it
    inherited still wakes it. Shared, each process's rings woke the other's sleepers, and a
    blocking call's drain in one took a ring the other's poll() had not seen yet (it slept to
    its timeout)."""
    a, b = testbed.host("a"), testbed.host("b")
    p = b.popen(slip([sys.executable, "-c", FORK_BELLS, B_ADDR]), stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True)
    first = p.stdout.readline()
    assert first.startswith("parent"), (first, p.stderr.read() if p.poll() is not None else "")
    assert p.stdout.readline().strip() == "ready"
    r = a.run([sys.executable, "-c", f"import socket; s = socket.create_connection(('{B_ADDR}', 7130), timeout=10); "
               "s.settimeout(10); print(s.recv(100).decode().strip())"], timeout=30)
    out, err = p.communicate(timeout=30)
    print(first, out)
    assert "not accelerated" not in err, err
    assert r.returncode == 0 and r.stdout.strip() == "child", (r.stdout, r.stderr, err)
    assert "shared [] child_rc 0" in out, (first, out, err)
