"""Two unrelated programs accelerated on the same interface at once (issue 4): the second
`slipstream run` joins the stack the first opened (src/stack/share.c) instead of falling back to
the kernel, the stack survives the exit of the program that opened it, and a third program joins
through a survivor. Each server is a Python asyncio echo server driven by a kernel client."""
import json
import os
import subprocess
import sys
import time

import pytest

from test_apps import APPS, B_ADDR, PY, Proof, assert_accelerated_log, read, start, stop, wait_listening


@pytest.fixture
def slip(build_dir):
    exe = build_dir / "slipstream"
    if not exe.exists():
        pytest.skip(f"not built: {exe}")
    f = lambda cmd, *opts: [str(exe), "run", "--iface", "veth0", *opts, "--", *cmd]
    f.exe = exe
    return f


def echo_round(a, port, conns=20, msgs=20):
    r = a.run([PY, os.path.join(APPS, "echo_client.py"), B_ADDR, str(port), str(conns), str(msgs), "4096", "3"],
              timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["bad"] == 0 and res["msgs"] == conns * msgs, res
    return res


def test_programs_share_one_stack_and_it_outlives_the_first(testbed, slip, tmp_path):
    a, b = testbed.host("a"), testbed.host("b")
    logs = [str(tmp_path / f"s{i}.log") for i in range(3)]
    s1 = start(b, slip([PY, os.path.join(APPS, "asyncio_echo.py"), "0.0.0.0", "7201"]), logs[0])
    wait_listening(b, 7201, proc=s1, log=logs[0])
    s2 = start(b, slip([PY, os.path.join(APPS, "asyncio_echo.py"), "0.0.0.0", "7202"]), logs[1])
    wait_listening(b, 7202, proc=s2, log=logs[1])
    proof = Proof(b).start(peer=a)
    time.sleep(0.3)
    proof.note_xdp()
    echo_round(a, 7201)
    echo_round(a, 7202)
    proof.check()
    for lg in logs[:2]:
        assert_accelerated_log(read(lg))

    # `slipstream stat` joins the running stack and prints it: both programs and both listeners.
    st = b.run([str(slip.exe), "stat", "--iface", "veth0", "--conns"], timeout=30)
    assert st.returncode == 0, st.stderr
    counters = dict(l.split()[:2] for l in st.stdout.splitlines() if not l.startswith("tcpconn"))
    listeners = [l for l in st.stdout.splitlines() if l.startswith("tcpconn") and " LISTEN " in l]
    print(f"slipstream stat: procs.live {counters.get('procs.live')}, tcp.conns {counters.get('tcp.conns')}, "
          f"listeners {listeners}")
    assert counters.get("procs.live") == "2", st.stdout
    # ... and lists the two processes, each holding its listener (at least).
    procs = [l.split() for l in st.stdout.splitlines() if l.startswith("proc ")]
    assert len(procs) == 2 and all(p[2].startswith("python") for p in procs), st.stdout
    assert all(int(p[4].split("=")[1]) >= 1 for p in procs), st.stdout
    assert any(l.startswith("stack veth0 uid=0 procs=2") for l in st.stdout.splitlines()), st.stdout
    assert any(":7201 " in l for l in listeners) and any(":7202 " in l for l in listeners), st.stdout
    assert int(counters["tcp.segs_in"]) > 0, st.stdout

    # The program that opened the stack goes away; the other keeps serving on it, accelerated.
    assert stop(s1) is not None
    proof = Proof(b).start(peer=a)
    time.sleep(0.3)
    proof.note_xdp()
    echo_round(a, 7202)
    proof.check()

    # A newcomer joins through the survivor (which took over the rendezvous name).
    time.sleep(1.0)
    s3 = start(b, slip([PY, os.path.join(APPS, "asyncio_echo.py"), "0.0.0.0", "7203"]), logs[2])
    wait_listening(b, 7203, proc=s3, log=logs[2])
    proof = Proof(b).start(peer=a)
    time.sleep(0.3)
    proof.note_xdp()
    echo_round(a, 7203)
    echo_round(a, 7202)
    proof.check()
    assert_accelerated_log(read(logs[2]))
    stop(s2)
    stop(s3)


def test_sharing_off_falls_back_with_one_warning(testbed, slip, tmp_path):
    """SLIP_SHARE=0: the second program cannot take the interface and says so once."""
    a, b = testbed.host("a"), testbed.host("b")
    l1, l2 = str(tmp_path / "s1.log"), str(tmp_path / "s2.log")
    s1 = start(b, slip([PY, os.path.join(APPS, "asyncio_echo.py"), "0.0.0.0", "7211"]), l1)
    wait_listening(b, 7211, proc=s1, log=l1)
    s2 = start(b, slip([PY, os.path.join(APPS, "asyncio_echo.py"), "0.0.0.0", "7212"]), l2,
               env={**os.environ, "SLIP_SHARE": "0"})
    wait_listening(b, 7212, proc=s2, log=l2)
    echo_round(a, 7212, conns=2, msgs=2)     # served by the kernel
    text = read(l2)
    warn = [l for l in text.splitlines() if "not accelerated" in l]
    assert len(warn) == 1 and "already attached" in warn[0], text
    stop(s1)
    stop(s2)


@pytest.mark.parametrize("how", ["sendmsg", "sendmmsg", "sender_exits"])
def test_fd_passing_between_programs(testbed, slip, tmp_path, how):
    """An acceptor hands each accepted connection to a separate worker program over a UNIX socket
    (sendmsg, or every other one with sendmmsg) and closes its own fd at once; the worker serves
    it, accelerated, on the shared stack. sender_exits: the worker takes the last fd only after
    the acceptor has exited, as the kernel allows (a fd in flight lives on its own): the exit
    once dropped the reference that travelled with it and closed the connection (ENOTCONN in
    the worker, now and then when a loaded machine ran the worker late)."""
    a, b = testbed.host("a"), testbed.host("b")
    path = str(tmp_path / "pass.sock")
    app = os.path.join(APPS, "fd_pass.py")
    n = 20
    w = b.popen(slip([PY, app, "worker", path, str(n), *(["--late"] if how == "sender_exits" else [])]), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert w.stdout.readline().startswith("ready")
    acc = b.popen(slip([PY, app, "acceptor", path, "7221", str(n), *(["--sendmmsg"] if how == "sendmmsg" else [])]),
                  stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE, text=True)
    assert acc.stdout.readline().startswith("ready")
    client = (
        "import socket, sys\n"
        f"for i in range({n}):\n"
        f"    s = socket.create_connection(('{B_ADDR}', 7221), timeout=10)\n"
        "    s.sendall(b'hello %d\\n' % i)\n"
        "    d = b''\n"
        "    while True:\n"
        "        x = s.recv(100)\n"
        "        if not x: break\n"
        "        d += x\n"
        "    assert d == b'worker hello %d\\n' % i, d\n"
        "    s.close()\n"
        "print('ok')\n")
    proof = Proof(b).start(peer=a)
    time.sleep(0.3)
    proof.note_xdp()
    r = a.run([PY, "-c", client], timeout=60)
    wout, werr = w.communicate(timeout=20)
    aout, aerr = acc.communicate(timeout=20)
    if r.returncode != 0:   # whole, for a failure that comes now and then (pytest cuts assertion text)
        print(f"client: {r.stdout}{r.stderr}\nworker: {wout}{werr}\nacceptor: {aout}{aerr}")
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.stdout, r.stderr, werr, aerr)
    assert f"done {n}" in wout and f"done {n}" in aout, (wout, werr, aout, aerr)
    assert_accelerated_log(werr + aerr)
    proof.check()
