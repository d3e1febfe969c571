"""Every way a dynamically linked program reads or writes a socket through libc (issue 11):
glibc's stdio reads and writes through its internal __read/__write, which LD_PRELOAD cannot
reach, and fortified programs (-D_FORTIFY_SOURCE=2, as Debian builds most packages) call
__read_chk, __recv_chk, __poll_chk, ... instead of read, recv, poll. A C server in host b under
`slipstream run` talks to a kernel client in host a through each of them; the exchange must be
byte for byte what the kernel gives, and must have gone through the stack (the kernel of host b
saw next to none of its segments). Before the fix a stream on an accelerated socket talked to
the unconnected kernel twin: the client waited for an answer that never came, which the client's
timeout turns into a failure here."""
import json
import os
import subprocess
import sys

import pytest

from test_apps import Proof, assert_accelerated_log, read, slip, stop, workdir  # noqa: F401

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.join(HERE, "apps", "stdio_client.py")
PY = sys.executable
B_ADDR = "198.18.0.2"
SILENCE_S = 6       # a hang shows as this much silence on one connection

LINES = ["hello\n", "world 123\n", "a longer line, with, commas and spaces\n"]


def prog(build_dir, name):
    p = build_dir / "tests" / "prog" / name
    if not p.exists():
        pytest.skip(f"not built: {p}")
    return str(p)


def exchange(testbed, slip, workdir, server, port, plan):
    """Runs server (argv without PORT MODE...) under slipstream in b and the client in a;
    returns (what the client got, the server's stdout+stderr)."""
    a, b = testbed.host("a"), testbed.host("b")
    log = os.path.join(workdir, "server.log")
    with open(log, "w") as f:
        s = b.popen(slip([server, str(port), *[m for m, _, _ in plan]]), stdout=subprocess.PIPE,
                    stderr=f, text=True)
    line = s.stdout.readline()
    assert line == "listening\n", (line, read(log))
    proof = Proof(b).start(peer=a)
    r = a.run([PY, CLIENT, B_ADDR, str(port), str(SILENCE_S), json.dumps(plan)],
              timeout=SILENCE_S * len(plan) + 30)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    try:
        out, _ = s.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        stop(s)
        out = "(server still running: killed)"
    print("client got:", json.dumps(got, indent=1))
    print("server:", s.returncode, out, read(log)[-1500:])
    return got, out + read(log), proof


def answers(mode, lines, prefix=""):
    return prefix + "".join(f"{mode} {len(l)} {l}" for l in lines) + "bye\n"


def test_stdio_on_accelerated_sockets(testbed, slip, workdir, build_dir):
    """fdopen r+ with fflush, fileno() for poll, fclose closing the fd once; a reading stream
    and a line-buffered writing one on a dup; unbuffered a+; end of file (feof, not ferror)
    answered with dprintf; the socket made stdin/stdout with dup2 (what stdout had buffered goes
    to the socket, as with the kernel), and inherited as stdin/stdout by an exec'd image; freopen over a stream with an answer still buffered;
    exit() with answers never flushed."""
    server = prog(build_dir, "stdio_server")
    quit_ = LINES + ["quit\n"]
    plan = [["fdopen", quit_, "lockstep"], ["split", quit_, "pipeline"], ["unbuf", quit_, "pipeline"],
            ["eof", LINES, "halfclose"], ["stdout", quit_, "pipeline"], ["exec", quit_, "pipeline"], ["freopen", quit_, "lockstep"],
            ["exit", quit_, "pipeline"]]
    got, log, proof = exchange(testbed, slip, workdir, server, 7300, plan)
    want = {m: answers(m, LINES) for m, _, _ in plan}
    want["eof"] = f"eof 1 0 {sum(len(l) for l in LINES)}\n"
    want["stdout"] = answers("stdout", LINES, prefix="carried ")
    for m, _, _ in plan:
        assert got.get(m) == want[m], f"{m}: got {got.get(m)!r}, want {want[m]!r}\n{log[-1500:]}"
    assert "done" in log and "still open" not in log, log[-1500:]
    assert_accelerated_log(log)
    proof.check()


def test_fortified_and_other_names(testbed, slip, workdir, build_dir):
    """A server built with -D_FORTIFY_SOURCE=2 -O2: __read_chk, __recv_chk, __recvfrom_chk,
    __poll_chk, __ppoll_chk, select with FD_SET (__fdelt_chk), __dprintf_chk; and preadv2/pwritev2
    at offset -1 and syscall(SYS_read/SYS_write), each on an accelerated connection."""
    server = prog(build_dir, "fortify_server")
    imports = subprocess.run(["nm", "-D", "--undefined-only", server], stdout=subprocess.PIPE,
                             text=True, check=True).stdout
    for sym in ("__read_chk", "__recv_chk", "__recvfrom_chk", "__poll_chk", "__ppoll_chk",
                "__fdelt_chk", "__dprintf_chk", "preadv64v2", "pwritev64v2", "syscall"):
        assert sym in imports, f"fortify_server does not call {sym}: the test would not cover it"
    modes = ["read", "recv", "recvfrom", "poll", "ppoll", "select", "dprintf", "syscall", "preadv2"]
    plan = [[m, [f"ping {m}\n"], "pipeline"] for m in modes]
    got, log, proof = exchange(testbed, slip, workdir, server, 7301, plan)
    for m in modes:
        want = f"{m} {len('ping ' + m) + 1} ping {m}\n"
        assert got.get(m) == want, f"{m}: got {got.get(m)!r}, want {want!r}\n{log[-1500:]}"
    assert "done" in log, log[-1500:]
    assert_accelerated_log(log)
    proof.check()


def test_static_image_inheriting_a_socket_warns_and_does_not_hang(testbed, slip, workdir, build_dir):
    """What the layer cannot see: an accelerated server execs a statically linked program with
    the connection as its stdout. One warning line says so; the program's write fails at once
    (the kernel twin of an accepted connection is not connected) instead of hanging, and the
    server, still accelerated, answers on the same connection afterwards."""
    server = prog(build_dir, "stdio_server")
    static = prog(build_dir, "static_write")
    plan = [[f"static={static}", [], "pipeline"]]
    got, log, proof = exchange(testbed, slip, workdir, server, 7302, plan)
    assert got.get(plan[0][0]) == "after static 0\n", (got, log[-1500:])
    assert f"{static} is statically linked" in log, log[-1500:]
    assert "static_write: write returned -1" in log, log[-1500:]
    proof.check()
