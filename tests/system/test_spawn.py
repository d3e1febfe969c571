"""Processes that glibc creates behind the program's back, and splice(), under `slipstream run`:
a server in host b hands its accepted (accelerated) connection to a child started with
posix_spawn, posix_spawnp, system() or vfork+exec; the child writes on it and closes its copy,
the parent writes and closes: the kernel client in host a must read both, in order, then EOF
(which only comes if the child's reference was counted and given back). The child's write can
only arrive through the stack: the kernel fd behind an accepted accelerated socket is not
connected. daemon() keeps the listener accelerated; splice() proxies between two accelerated
sockets through a pipe, also a 4 KiB one that fills at every call."""
import json
import os
import subprocess
import sys
import time

import pytest

from test_apps import Proof, assert_accelerated_log, read, slip, stop, wait_listening, workdir  # noqa: F401

HERE = os.path.dirname(os.path.abspath(__file__))
APPS = os.path.join(HERE, "apps")
PY = sys.executable
A_ADDR, B_ADDR = "198.18.0.1", "198.18.0.2"
SERVER = os.path.join(APPS, "spawn_server.py")
CHILD = os.path.join(APPS, "spawn_child.py")
CLIENT = os.path.join(APPS, "spawn_client.py")


@pytest.fixture(scope="module")
def tool(build_dir):
    p = build_dir / "tests" / "prog" / "spawn_tool"
    if not p.exists():
        pytest.skip(f"not built: {p}")
    return str(p)


def client_read(a, port):
    r = a.run([PY, CLIENT, "read", B_ADDR, str(port)], timeout=90)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def start_logged(host, argv, log):
    """Starts argv in host, stdout piped (the "listening" line), stderr to log."""
    with open(log, "w") as f:
        return host.popen(argv, stdout=subprocess.PIPE, stderr=f, text=True)


def expect_listening(p, log):
    line = p.stdout.readline()
    assert line.startswith("listening"), (line, read(log))


@pytest.mark.parametrize("mode", ["posix_spawn", "posix_spawnp", "system", "popen"])
def test_spawned_child_writes_to_inherited_socket(testbed, slip, workdir, mode):
    """Python's os.posix_spawn/os.posix_spawnp/os.system call glibc's posix_spawn, posix_spawnp
    and system()."""
    a, b = testbed.host("a"), testbed.host("b")
    log = os.path.join(workdir, "server.log")
    s = start_logged(b, slip([PY, SERVER, mode, B_ADDR, "7100", CHILD]), log)
    expect_listening(s, log)
    proof = Proof(b).start(peer=a)
    got = client_read(a, 7100)
    out, _ = s.communicate(timeout=30)
    print(f"{mode}: client read {got!r}; server: {out.strip()}; log: {read(log)[-500:]}")
    assert got == {"data": "child\nparent\n", "eof": True}, read(log)
    assert s.returncode == 0 and json.loads(out.strip().splitlines()[-1])["child_exit"] == 0, read(log)
    assert_accelerated_log(read(log))
    proof.check()


def test_vfork_exec_child_writes_to_inherited_socket(testbed, slip, tool, workdir):
    """A C program that calls vfork() then execv() (vfork is fork under slipstream)."""
    a, b = testbed.host("a"), testbed.host("b")
    log = os.path.join(workdir, "vfork.log")
    s = start_logged(b, slip([tool, "vfork", B_ADDR, "7101", PY, CHILD, "FD", "child"]), log)
    expect_listening(s, log)
    proof = Proof(b).start(peer=a)
    got = client_read(a, 7101)
    out, _ = s.communicate(timeout=30)
    print(f"vfork: client read {got!r}; tool: {out.strip()}")
    assert got == {"data": "child\nparent\n", "eof": True}, read(log)
    assert s.returncode == 0, (out, read(log))
    assert_accelerated_log(read(log))
    proof.check()


def test_daemon_keeps_sockets_and_counts_them_once(testbed, slip, tool, workdir):
    """A connection accepted before daemon(1, 1) and one accepted after it, from the same
    accelerated listener: the daemon (another pid; the launcher returns 0) writes on each and
    closes it, and the client must see EOF: the parent's references pass to the daemon, they are
    not counted twice (a count left behind by the parent would keep the connection open). Then
    the listener is closed and nothing accepts any more."""
    a, b = testbed.host("a"), testbed.host("b")
    log = os.path.join(workdir, "daemon.log")
    pidfile = os.path.join(workdir, "daemon.pid")
    dpid = None
    try:
        with open(log, "w") as f:
            launcher = b.popen(slip([tool, "daemon", B_ADDR, "7102", pidfile]), stdout=f, stderr=f)
        wait_listening(b, 7102, proc=launcher, log=log)
        proof = Proof(b).start(peer=a)
        got1 = client_read(a, 7102)
        assert launcher.wait(timeout=30) == 0, read(log)
        dpid, before = (int(x) for x in read(pidfile).split())
        assert dpid != before, "daemon() did not fork"
        got2 = client_read(a, 7102)
        print(f"daemon: client read {got1!r} then {got2!r}; log: {read(log)[-500:]}")
        assert got1 == {"data": f"daemon {dpid}\n", "eof": True}, read(log)
        assert got2 == {"data": f"daemon {dpid} again\n", "eof": True}, read(log)
        proof.check()       # before the refused connection below, which the kernel answers
        deadline = time.monotonic() + 10
        while not os.path.exists(pidfile + ".closed") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.path.exists(pidfile + ".closed"), read(log)
        # The daemon is still alive (it sleeps) but has closed its listener.
        r = a.run([PY, "-c", f"import socket\ntry:\n socket.create_connection(('{B_ADDR}', 7102), timeout=5)\n"
                             f" print('connected')\nexcept OSError as e:\n print(type(e).__name__)"], timeout=30)
        print("connect after close:", r.stdout.strip())
        assert r.stdout.strip() == "ConnectionRefusedError", r.stdout + r.stderr
        assert_accelerated_log(read(log))
    finally:
        if dpid:
            try:
                os.kill(dpid, 9)
            except ProcessLookupError:
                pass


@pytest.mark.parametrize("mode,pipesz,nbytes", [
    ("block", 0, 20_000_000),
    ("block", 4096, 4_000_000),
    ("nonblock", 4096, 4_000_000),
])
def test_splice_proxy(testbed, slip, tool, workdir, mode, pipesz, nbytes):
    """splice() socket -> pipe -> socket between two accelerated sockets in host b; the kernel
    client in host a sends through it to its own sink and compares sha256. With a 4 KiB pipe every
    socket -> pipe splice finds the pipe full before its 1 MiB request is done."""
    a, b = testbed.host("a"), testbed.host("b")
    log = os.path.join(workdir, "proxy.log")
    s = start_logged(b, slip([tool, "splice", B_ADDR, "7103", A_ADDR, "7104", str(pipesz), mode]), log)
    expect_listening(s, log)
    proof = Proof(b).start(peer=a)
    r = a.run([PY, CLIENT, "proxy", B_ADDR, "7103", "7104", str(nbytes)], timeout=180)
    out, _ = s.communicate(timeout=30)
    print(f"splice {mode} pipe {pipesz}: client {r.stdout.strip()} {r.stderr[-300:]}; proxy: {out.strip()}")
    assert r.returncode == 0, r.stderr + read(log)
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["sent"] == nbytes and res["got"] == nbytes, (res, read(log))
    assert res["sha_sent"] == res["sha_got"], "bytes changed on the way through the proxy"
    assert s.returncode == 0, read(log)
    stats = dict(zip(out.split()[::2], (int(x) for x in out.split()[1::2])))
    assert stats["moved"] == nbytes, stats
    if pipesz:
        assert stats["pipe"] == pipesz and stats["full_in"] > 0, stats
    assert_accelerated_log(read(log))
    proof.check()
