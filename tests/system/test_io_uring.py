"""Programs that would do socket work through io_uring (issue 12): the layer cannot see it, so
under `slipstream run` io_uring_setup answers ENOSYS with one warning line and such programs fall
back to the calls it serves. uvloop (libuv >= 1.45 batches epoll_ctl through io_uring) echoes
over 32 connections, accelerated, where it echoed nothing before."""
import os
import subprocess

import pytest

from test_apps import APPS, B_ADDR, PY, Proof, read, slip, start, stop, wait_listening  # noqa: F401
from test_share import echo_round

PROBE = r"""
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
params = (ctypes.c_char * 120)()
r = libc.syscall(425, 8, params)          # io_uring_setup (x86-64)
print(r, errno.errorcode.get(ctypes.get_errno()) if r < 0 else "ok", flush=True)
"""


def test_io_uring_setup_is_refused_with_one_warning(testbed, slip):  # noqa: F811
    b = testbed.host("b")
    r = b.run(slip([PY, "-c", PROBE]), timeout=30)
    warn = [l for l in r.stderr.splitlines() if "io_uring" in l]
    print(f"under slipstream run: {r.stdout.strip()}; {warn}")
    assert r.stdout.strip() == "-1 ENOSYS", r.stdout + r.stderr
    assert len(warn) == 1, r.stderr
    k = b.run(slip([PY, "-c", PROBE]), timeout=30, env={**os.environ, "SLIP_IO_URING": "1"})
    print(f"with SLIP_IO_URING=1: {k.stdout.strip()}")
    assert not k.stdout.startswith("-1 ENOSYS"), k.stdout + k.stderr


def test_uvloop_echo_server(testbed, slip, tmp_path):  # noqa: F811
    if subprocess.run([PY, "-c", "import uvloop"], capture_output=True).returncode != 0:
        pytest.skip(f"uvloop is not installed for {PY}")
    a, b = testbed.host("a"), testbed.host("b")
    log = str(tmp_path / "uv.log")
    srv = start(b, slip([PY, os.path.join(APPS, "uvloop_echo.py"), "0.0.0.0", "7411"]), log)
    wait_listening(b, 7411, proc=srv, log=log)
    proof = Proof(b).start(peer=a)
    res = echo_round(a, 7411, conns=32, msgs=20)
    proof.check()
    stop(srv)
    print(f"uvloop echo: {res}")
    assert "not accelerated" not in read(log), read(log)
