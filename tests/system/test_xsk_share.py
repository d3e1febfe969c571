"""Several stacks on one interface queue, at the AF_XDP level (the foundation of a stack per
application, docs/ARCHITECTURE.md "Many stacks on one interface"): tests/prog/xsk_share binds two
AF_XDP sockets to veth0 queue 0 of host b on one UMEM (the second with XDP_SHARED_UMEM), and the
steering program sends each owned UDP port to its own stack's socket. Each socket must get
exactly its own flow, none of the other's; after one socket goes away (a stack died), its flow
goes to the kernel (counted no_xsk), never to the surviving stack.
"""

import os
import select
import signal
import subprocess
import time

import pytest

from testbed import Topology

PREFIX = "slk"
PORT_A, PORT_B = 9500, 9501

UDP_SEND = r"""
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[3])):
    s.sendto(b"slipstream-%d" % i, (sys.argv[1], int(sys.argv[2])))
    if i % 50 == 49:
        time.sleep(0.01)
"""


@pytest.fixture
def xsk_share(build_dir):
    p = build_dir / "tests" / "prog" / "xsk_share"
    if not (p.is_file() and os.access(p, os.X_OK)):
        pytest.fail(f"not built: {p} is missing")
    return p


def wait_line(p, want, timeout=15):
    ready, _, _ = select.select([p.stdout], [], [], timeout)
    line = p.stdout.readline() if ready else ""
    if line.strip() != want:
        p.kill()
        out, err = p.communicate(timeout=10)
        pytest.fail(f"xsk_share: expected {want!r}, got {line!r}; stdout={out!r} stderr={err!r}")


def send(a, dst, port, n):
    r = a.run(["python3", "-c", UDP_SEND, dst, str(port), str(n)], timeout=30)
    assert r.returncode == 0, r.stderr


def test_two_stacks_one_queue(make_testbed, xsk_share):
    tb = make_testbed(Topology(), prefix=PREFIX)
    a, b = tb.host("a"), tb.host("b")
    # Neighbours first, so no datagram waits for ARP (the kernel drops all but the last queued).
    a.run(["ping", "-n", "-c", "1", "-W", "2", b.addr], timeout=10)
    p = b.popen([str(xsk_share), b.ifname, str(PORT_A), str(PORT_B), "8"], stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True)
    wait_line(p, "ready")
    n = 300
    send(a, b.addr, PORT_A, n)
    send(a, b.addr, PORT_B, n)
    time.sleep(0.5)
    p.send_signal(signal.SIGUSR1)
    wait_line(p, "gone")
    send(a, b.addr, PORT_B, n)
    send(a, b.addr, PORT_A, n)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    got = dict(kv.split("=") for kv in out.split("\n")[-2].split())
    got = {k: int(v) for k, v in got.items()}
    # veth in copy mode loses nothing here; a datagram short of the count would show a fill
    # ring that ran dry (reported) rather than misdelivery, so the counts must be exact.
    assert got["fill_empty"] == 0, got
    assert got["stack0_a"] == 2 * n, got       # port A before and after stack 1 went
    assert got["stack1_b"] == n, got           # port B while stack 1 lived
    assert got["stack0_b"] == 0, got           # never the other stack's flow ...
    assert got["stack1_a"] == 0, got
    assert got["other"] == 0, got
    assert got["no_xsk"] >= n, got             # ... and after it died, port B went to the kernel
