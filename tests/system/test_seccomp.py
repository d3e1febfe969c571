"""Programs that install a seccomp filter keep working under `slipstream run` and are never killed
by the library's own calls (issue 12; sshd's sandbox is test_sshd.py). apps/seccomp_client.c
connects to a kernel echo server in host a, then installs a filter that kills the process on
sendto, recvfrom, sendmsg, recvmsg, bpf and futex_waitv (the calls the library made there) and
lowers RLIMIT_NOFILE to its fds, and echoes 1 MiB through its connection:
- prctl: the filter on the calling thread only (as sshd); tsync: on every thread (TSYNC);
  both must stay accelerated (kernel counters of host b).
- exec: the filter inherited across exec; the new image opens its socket under it: one warning
  line, the socket stays on the kernel (opening a stack needs bpf), nothing killed.
Each mode also runs on the kernel (no slipstream) to show the client itself is right."""
import os
import subprocess
import sys

import pytest

from test_apps import A_ADDR, APPS, Proof, need, slip, workdir  # noqa: F401

PORT = 9011
ECHO = r'''
import socket, sys, threading
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[1], int(sys.argv[2]))); ls.listen(8)
print("listening", flush=True)
def serve(c):
    while True:
        b = c.recv(1 << 16)
        if not b:
            break
        c.sendall(b)
    c.close()
while True:
    c, _ = ls.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
'''


@pytest.fixture
def client(workdir):
    need("gcc")
    exe = os.path.join(workdir, "seccomp_client")
    subprocess.run(["gcc", "-O1", "-o", exe, os.path.join(APPS, "seccomp_client.c")], check=True, timeout=60)
    return exe


@pytest.mark.parametrize("mode", ["prctl", "tsync", "exec"])
def test_seccomp_filtered_client_echoes(testbed, slip, workdir, client, mode):
    a, b = testbed.host("a"), testbed.host("b")
    srv = os.path.join(workdir, "echo.py")
    with open(srv, "w") as f:
        f.write(ECHO)
    e = a.popen([sys.executable, srv, A_ADDR, str(PORT)], stdout=subprocess.PIPE, text=True)
    assert e.stdout.readline().strip() == "listening"
    argv = [client, A_ADDR, str(PORT), mode]
    r = b.run(argv, timeout=60)
    print(f"{mode}, kernel: rc {r.returncode} {r.stdout.strip()} {r.stderr.strip()}")
    assert r.returncode == 0 and r.stdout.strip() == f"ok {1 << 20}", r
    proof = Proof(b).start(peer=a)
    r = b.run(slip(argv), timeout=60)
    proof.note_xdp()
    print(f"{mode}, slipstream: rc {r.returncode} {r.stdout.strip()} {r.stderr.strip()}")
    assert r.returncode == 0, f"killed or failed: rc {r.returncode} ({r.stderr.strip()})"
    assert r.stdout.strip() == f"ok {1 << 20}"
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    if mode == "exec":
        assert len(lines) == 1 and "seccomp" in lines[0] and "not accelerated" in lines[0], lines
    else:
        assert not lines, lines
        proof.check()


def test_seccomp_exec_with_inherited_accelerated_socket(testbed, slip, workdir, client):
    """An image that inherits both a filter and an accelerated socket does not attach the stack
    (attaching needs calls the filter may forbid): one warning line, not killed."""
    a, b = testbed.host("a"), testbed.host("b")
    srv = os.path.join(workdir, "echo.py")
    with open(srv, "w") as f:
        f.write(ECHO)
    e = a.popen([sys.executable, srv, A_ADDR, str(PORT)], stdout=subprocess.PIPE, text=True)
    assert e.stdout.readline().strip() == "listening"
    r = b.run(slip([client, A_ADDR, str(PORT), "exec-fd"]), timeout=60)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    print(f"exec-fd, slipstream: rc {r.returncode} {r.stdout.strip()} {lines}")
    assert r.returncode == 0 and r.stdout.startswith("inherited fd: write"), (r.returncode, r.stdout, r.stderr)
    assert len(lines) == 1 and "seccomp" in lines[0] and "not accelerated" in lines[0], lines
