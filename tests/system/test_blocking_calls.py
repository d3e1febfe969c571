"""Blocking calls on accelerated sockets return what Linux returns (issue 12): a blocking
send/write/sendmsg of 4 MiB, far more than the send buffer, returns 4 MiB (the call sleeps until
everything is queued) and the peer receives every byte; a NULL buffer is EFAULT, not a crash."""
import json
import os
import subprocess
import sys
import time

from test_apps import APPS, B_ADDR, PY, assert_accelerated_log, slip  # noqa: F401

SIZE = 4 << 20

READER = r"""
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
time.sleep(0.5)                      # let the sender fill every buffer first
got = {}
while True:
    d = s.recv(1 << 16)
    if not d:
        break
    for b in set(d):
        got[chr(b)] = got.get(chr(b), 0) + d.count(b)
s.close()
print(sorted(got.items()))
"""


def test_blocking_send_of_4_mib_returns_4_mib(testbed, slip):  # noqa: F811
    a, b = testbed.host("a"), testbed.host("b")
    srv = b.popen(slip([PY, os.path.join(APPS, "blocking_send.py"), "7401", str(SIZE)]),
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert srv.stdout.readline().strip() == "listening", srv.stderr.read() if srv.poll() is not None else ""
    r = a.run([PY, "-c", READER, B_ADDR, "7401"], timeout=120)
    out, err = srv.communicate(timeout=60)
    print(f"returned: {out.strip()}; peer counted: {r.stdout.strip()}")
    assert r.returncode == 0, r.stderr
    assert json.loads(out.strip().splitlines()[-1]) == {"send": SIZE, "write": SIZE, "sendmsg": SIZE}, out + err
    assert r.stdout.strip() == str([("A", SIZE), ("B", SIZE), ("C", SIZE)])
    assert_accelerated_log(err)


NULL_SEND = r"""
import ctypes, errno, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
l = socket.socket(); l.bind(('0.0.0.0', 7402)); l.listen(1)
print('listening', flush=True)
c, _ = l.accept()
r = libc.send(c.fileno(), None, 100, 0)
e = ctypes.get_errno()
w = libc.write(c.fileno(), None, 100)
e2 = ctypes.get_errno()
c.sendall(b'alive')
c.close()
print(r, errno.errorcode.get(e), w, errno.errorcode.get(e2), flush=True)
"""


def test_send_from_null_buffer_is_efault(testbed, slip):  # noqa: F811
    a, b = testbed.host("a"), testbed.host("b")
    srv = b.popen(slip([PY, "-c", NULL_SEND]), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert srv.stdout.readline().strip() == "listening"
    r = a.run([PY, "-c", f"import socket; s = socket.create_connection(('{B_ADDR}', 7402), timeout=10); "
                          "print(s.recv(10).decode())"], timeout=30)
    out, err = srv.communicate(timeout=30)
    print(f"send(NULL, 100), write(NULL, 100) returned: {out.strip()}")
    assert srv.returncode == 0, err[-2000:]
    assert out.strip() == "-1 EFAULT -1 EFAULT", out + err
    assert r.stdout.strip() == "alive"
    assert_accelerated_log(err)


NULL_RECV = r"""
import ctypes, errno, socket, sys, time
libc = ctypes.CDLL(None, use_errno=True)
l = socket.socket(); l.bind(('0.0.0.0', 7403)); l.listen(1)
print('listening', flush=True)
c, _ = l.accept()
time.sleep(0.3)                      # the peer's 5 bytes are there
r = libc.read(c.fileno(), None, 100)
e = ctypes.get_errno()
r2 = libc.recv(c.fileno(), None, 100, 0)
e2 = ctypes.get_errno()
data = c.recv(100)                   # nothing was lost
c.close()
print(r, errno.errorcode.get(e), r2, errno.errorcode.get(e2), data.decode(), flush=True)
"""


def test_recv_into_null_buffer_is_efault(testbed, slip):  # noqa: F811
    """packetdrill syscall_bad_arg/syscall-invalid-buf-ptr: read/recv into NULL are EFAULT (the
    kernel's copy would fault) and the data stays queued; the copy into NULL crashed the program."""
    a, b = testbed.host("a"), testbed.host("b")
    srv = b.popen(slip([PY, "-c", NULL_RECV]), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert srv.stdout.readline().strip() == "listening"
    r = a.run([PY, "-c", f"import socket, time; s = socket.create_connection(('{B_ADDR}', 7403), timeout=10); "
                          "s.sendall(b'hello'); time.sleep(2)"], timeout=30)
    out, err = srv.communicate(timeout=30)
    print(f"read(NULL, 100), recv(NULL, 100), then recv: {out.strip()} (rc {srv.returncode})")
    assert srv.returncode == 0, f"the program died (rc {srv.returncode}): {err[-2000:]}"
    assert out.strip() == "-1 EFAULT -1 EFAULT hello", out + err
    assert r.returncode == 0
    assert_accelerated_log(err)


def test_masked_waits_return_eintr_for_a_pending_signal(testbed, slip, build_dir):  # noqa: F811
    """ppoll, epoll_pwait and pselect whose mask opens a signal that is already pending return
    EINTR at once, after the handler ran, as on Linux. OpenSSH's session loop blocks SIGCHLD and
    waits for its command's end this way: the layer used to forget the handler had run (it ran
    while the layer installed the mask) and slept on, so an ssh command hung now and then."""
    b = testbed.host("b")
    prog = str(build_dir / "tests" / "prog" / "masked_wait")
    for i, mode in enumerate(("ppoll", "epoll_pwait", "pselect")):
        r = b.run(slip([prog, mode, str(7410 + i)]), timeout=30)
        assert r.returncode == 0, r.stderr
        got = dict(kv.split("=") for kv in r.stdout.split())
        print(mode, got)
        assert got["rc"] == "-1" and got["errno"] == "4" and got["handler"] == "1", (mode, got, r.stderr)
        assert int(got["ms"]) < 1500, (mode, got)      # not the 3 s timeout
        assert "not accelerated" not in r.stderr and "warning" not in r.stderr, r.stderr
