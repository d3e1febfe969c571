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
