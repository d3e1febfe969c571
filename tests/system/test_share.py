"""Programs accelerated on the same interface at once (issues 4 and 13): each `slipstream run`
gets a stack of its own, in the group (one UMEM) the first opened (src/stack/group.c, share.c),
instead of falling back to the kernel; programs started with one name share one stack; a stack
survives the death of the others; fd passing between programs of one stack. Each server is a
Python asyncio echo server driven by a kernel client."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from test_apps import A_ADDR, APPS, B_ADDR, PY, Proof, assert_accelerated_log, read, start, stop, wait_listening


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


def group_missing(b, exe):
    """Frames of the UMEM neither free (a stack's cache or the group pool) nor posted to the fill
    ring, as the first stack of the group (index 0) sees them; None while `slipstream stat` cannot
    say (a stack of the group is being closed by its guardian)."""
    st = b.run([str(exe), "stat", "--iface", "veth0"], timeout=30)
    c, cur = {}, None
    for line in st.stdout.splitlines():
        if line.startswith("stack "):
            cur = dict(f.split("=", 1) for f in line.split()[2:]).get("index")
        elif cur == "0" and line.startswith("pool."):
            k, v = line.split()[:2]
            c[k] = int(v)
    if not {"pool.frames", "pool.free", "pool.fill_posted"} <= set(c):
        return None, st.stdout + st.stderr
    return c["pool.frames"] - c["pool.free"] - c["pool.fill_posted"], c


def settled_missing(b, exe, wait=15):
    """group_missing once the guardians have closed the dead stacks (one takes about 0.3 s to see
    its stack orphaned, then closes it), or after wait seconds."""
    deadline = time.monotonic() + wait
    while True:
        missing, c = group_missing(b, exe)
        if missing == 0 or time.monotonic() > deadline:
            return missing, c
        time.sleep(0.5)


def stat_stacks(b, slip, *opts):
    """`slipstream stat` in host b: {index: (header fields, counters, proc lines, listeners)}."""
    st = b.run([str(slip.exe), "stat", "--iface", "veth0", "--conns", *opts], timeout=30)
    assert st.returncode == 0, st.stdout + st.stderr
    stacks, cur = {}, None
    for l in st.stdout.splitlines():
        if l.startswith("stack "):
            head = dict(f.split("=", 1) for f in l.split()[2:])
            cur = stacks.setdefault(int(head["index"]), (head, {}, [], []))
        elif cur is None or not l.strip():
            continue
        elif l.startswith("proc "):
            cur[2].append(l.split())
        elif l.startswith("tcpconn"):
            if " LISTEN " in l:
                cur[3].append(l)
        else:
            k, v = l.split()[:2]
            cur[1][k] = v
    print("slipstream stat:", {i: (h, c.get("procs.live"), c.get("tcp.conns"), ls) for i, (h, c, p, ls) in stacks.items()})
    return stacks


def test_unrelated_programs_get_stacks_of_their_own(testbed, slip, tmp_path):
    """Two programs started with `slipstream run` on one interface: a stack each (one UMEM: the
    second opened its stack in the group of the first), `slipstream stat` lists both, kill -9 of
    the first leaves the second serving, accelerated, and a newcomer opens its stack through the
    survivor."""
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

    # Two stacks, one program each, each holding its own listener and nobody else's.
    stacks = stat_stacks(b, slip)
    assert sorted(stacks) == [0, 1], stacks
    for i, port in ((0, 7201), (1, 7202)):
        head, c, procs, listeners = stacks[i]
        assert head["uid"] == "0" and head["procs"] == "1" and head["name"].startswith("run-"), head
        assert c.get("procs.live") == "1" and int(c["tcp.segs_in"]) > 0, c
        assert len(procs) == 1 and procs[0][2].startswith("python"), procs
        assert len(listeners) == 1 and f":{port} " in listeners[0], listeners
        assert c.get("group.stack") == str(i), c

    # kill -9 of the program whose stack's memory is the group's: the other keeps serving on its
    # own stack, accelerated, every byte echoed intact.
    os.killpg(s1.pid, signal.SIGKILL)
    s1.wait(timeout=10)
    proof = Proof(b).start(peer=a)
    time.sleep(0.3)
    proof.note_xdp()
    echo_round(a, 7202)
    proof.check()
    # The dead stack's guardian gave its frames back to the group: once the survivor is idle,
    # every frame of the UMEM is free (its cache and the group's pool) or posted to the fill ring.
    deadline = time.monotonic() + 10
    while True:
        c = stat_stacks(b, slip)[1][1]
        if int(c["pool.free"]) + int(c["pool.fill_posted"]) == int(c["pool.frames"]) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert int(c["pool.free"]) + int(c["pool.fill_posted"]) == int(c["pool.frames"]), c
    assert int(c["group.refills"]) > 0, c

    # A newcomer opens its stack in the group through the survivor.
    s3 = start(b, slip([PY, os.path.join(APPS, "asyncio_echo.py"), "0.0.0.0", "7203"]), logs[2])
    wait_listening(b, 7203, proc=s3, log=logs[2])
    proof = Proof(b).start(peer=a)
    time.sleep(0.3)
    proof.note_xdp()
    echo_round(a, 7203)
    echo_round(a, 7202)
    proof.check()
    assert_accelerated_log(read(logs[2]))
    stacks = stat_stacks(b, slip)
    assert 1 in stacks and len(stacks) == 2 and 0 not in stacks, stacks
    stop(s2)
    stop(s3)


def test_programs_with_one_name_share_one_stack(testbed, slip, tmp_path):
    """`slipstream run --name web` twice: one stack with both programs (SLIP_STACK_NAME, as
    Onload's EF_NAME); a third program without the name gets its own; the named stack outlives
    the program that opened it."""
    a, b = testbed.host("a"), testbed.host("b")
    logs = [str(tmp_path / f"s{i}.log") for i in range(3)]
    s1 = start(b, slip([PY, os.path.join(APPS, "asyncio_echo.py"), "0.0.0.0", "7206"], "--name", "web"), logs[0])
    wait_listening(b, 7206, proc=s1, log=logs[0])
    s2 = start(b, slip([PY, os.path.join(APPS, "asyncio_echo.py"), "0.0.0.0", "7207"], "--name", "web"), logs[1])
    wait_listening(b, 7207, proc=s2, log=logs[1])
    s3 = start(b, slip([PY, os.path.join(APPS, "asyncio_echo.py"), "0.0.0.0", "7208"]), logs[2])
    wait_listening(b, 7208, proc=s3, log=logs[2])
    proof = Proof(b).start(peer=a)
    time.sleep(0.3)
    proof.note_xdp()
    for port in (7206, 7207, 7208):
        echo_round(a, port, conns=5, msgs=5)
    proof.check()
    stacks = stat_stacks(b, slip)
    named = [v for v in stacks.values() if v[0]["name"] == "web"]
    other = [v for v in stacks.values() if v[0]["name"].startswith("run-")]
    assert len(stacks) == 2 and len(named) == 1 and len(other) == 1, stacks
    assert named[0][0]["procs"] == "2" and len(named[0][2]) == 2, named
    assert sorted(l.split()[3].rsplit(":", 1)[1] for l in named[0][3]) == ["7206", "7207"], named
    assert other[0][0]["procs"] == "1" and len(other[0][3]) == 1 and ":7208 " in other[0][3][0], other
    assert stop(s1) is not None
    echo_round(a, 7207, conns=5, msgs=5)
    stacks = stat_stacks(b, slip)
    named = [v for v in stacks.values() if v[0]["name"] == "web"]
    assert len(named) == 1 and named[0][0]["procs"] == "1", stacks
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


# The kernel client of the fd passing tests: argv[1] connections, one after the other, each
# sending "hello I" and expecting the worker's "worker hello I" and the end of the stream.
PASS_CLIENT = """
import socket, sys
for i in range(int(sys.argv[1])):
    s = socket.create_connection(("{addr}", {port}), timeout=10)
    s.sendall(b"hello %d\\n" % i)
    d = b""
    while True:
        x = s.recv(100)
        if not x:
            break
        d += x
    assert d == b"worker hello %d\\n" % i, d
    s.close()
print("ok")
"""


@pytest.mark.parametrize("named", [True, False], ids=["one-name", "own-names"])
@pytest.mark.parametrize("how", ["sendmsg", "sendmmsg", "sender_exits"])
def test_fd_passing_between_programs(testbed, slip, tmp_path, how, named):
    """An acceptor hands each accepted connection to a separate worker program over a UNIX socket
    (sendmsg, or every other one with sendmmsg) and closes its own fd at once; the worker serves
    it, accelerated, on the acceptor's stack: both programs started with one --name, or each
    with its own (the worker, with no stack yet when the first socket comes, opens the sender's;
    see docs/ARCHITECTURE.md on fd passing between stacks). sender_exits: the worker takes the
    last fd only after the acceptor has exited, as the kernel allows (a fd in flight lives on its
    own): the exit once dropped the reference that travelled with it and closed the connection
    (ENOTCONN in the worker, now and then when a loaded machine ran the worker late)."""
    a, b = testbed.host("a"), testbed.host("b")
    path = str(tmp_path / "pass.sock")
    app = os.path.join(APPS, "fd_pass.py")
    n = 20
    name = ["--name", "fdpass"] if named else []
    w = b.popen(slip([PY, app, "worker", path, str(n), *(["--late"] if how == "sender_exits" else [])], *name),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert w.stdout.readline().startswith("ready")
    acc = b.popen(slip([PY, app, "acceptor", path, "7221", str(n), *(["--sendmmsg"] if how == "sendmmsg" else [])],
                       *name),
                  stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE, text=True)
    assert acc.stdout.readline().startswith("ready")
    client = PASS_CLIENT.format(addr=B_ADDR, port=7221)
    proof = Proof(b).start(peer=a)
    time.sleep(0.3)
    proof.note_xdp()
    r = a.run([PY, "-c", client, str(n)], timeout=60)
    wout, werr = w.communicate(timeout=20)
    aout, aerr = acc.communicate(timeout=20)
    if r.returncode != 0:   # whole, for a failure that comes now and then (pytest cuts assertion text)
        print(f"client: {r.stdout}{r.stderr}\nworker: {wout}{werr}\nacceptor: {aout}{aerr}")
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.stdout, r.stderr, werr, aerr)
    assert f"done {n}" in wout and f"done {n}" in aout, (wout, werr, aout, aerr)
    assert_accelerated_log(werr + aerr)
    proof.check()


def test_fd_passing_into_a_program_with_a_stack_of_its_own(testbed, slip, tmp_path):
    """The worker has a stack of its own (an accelerated UDP socket, its own name) before the
    acceptor's connections reach it over a UNIX socket: it finds the acceptor's stack in the group
    (slip_group__passed_index), joins it as a second stack of its process and serves every
    connection there, accelerated (before, each was the kernel socket: ENOTCONN)."""
    a, b = testbed.host("a"), testbed.host("b")
    path = str(tmp_path / "pass.sock")
    app = os.path.join(APPS, "fd_pass.py")
    n = 20
    w = b.popen(slip([PY, app, "worker", path, str(n), "--own"]), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True)
    assert w.stdout.readline().startswith("ready")
    acc = b.popen(slip([PY, app, "acceptor", path, "7222", str(n)]), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                  text=True)
    assert acc.stdout.readline().startswith("ready")
    client = PASS_CLIENT.format(addr=B_ADDR, port=7222)
    proof = Proof(b).start(peer=a)
    time.sleep(0.3)
    proof.note_xdp()
    r = a.run([PY, "-c", client, str(n - 1)], timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.stdout, r.stderr)
    stacks = stat_stacks(b, slip)       # both programs still run: the last connection is to come
    r = a.run([PY, "-c", client, "1"], timeout=60)
    wout, werr = w.communicate(timeout=20)
    aout, aerr = acc.communicate(timeout=20)
    print("stacks:", stacks)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.stdout, r.stderr, werr, aerr)
    assert f"done {n}" in wout and f"done {n}" in aout, (wout, werr, aout, aerr)
    assert_accelerated_log(werr + aerr)
    assert "cannot be joined" not in werr, werr
    # Two stacks (one per program); the worker is a process of both.
    assert sorted(stacks) == [0, 1], stacks
    procs = {i: sorted(pl[1] for pl in st[2]) for i, st in stacks.items()}
    wpid = str(w.pid)
    assert all(wpid in pids for pids in procs.values()), (wpid, procs)
    assert sorted(len(pids) for pids in procs.values()) == [1, 2], procs
    proof.check()


def test_exec_in_a_stack_that_joined_a_group(testbed, slip, tmp_path):
    """A program whose stack is the group's second (its frames in the first one's memory) execs
    with an accelerated listener open: the new image maps both memories again and serves on the
    listener, accelerated, while the first program serves too."""
    a, b = testbed.host("a"), testbed.host("b")
    l1 = str(tmp_path / "s1.log")
    s1 = start(b, slip([PY, os.path.join(APPS, "asyncio_echo.py"), "0.0.0.0", "7231"]), l1)
    wait_listening(b, 7231, proc=s1, log=l1)
    p = b.popen(slip([PY, os.path.join(APPS, "exec_listener.py"), "7232"]), stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "listening", p.stderr.read() if p.poll() is not None else ""
    stacks = stat_stacks(b, slip)
    assert sorted(stacks) == [0, 1] and stacks[1][0]["procs"] == "1", stacks
    assert any(":7232 " in l for l in stacks[1][3]), stacks
    proof = Proof(b).start(peer=a)
    time.sleep(0.3)
    proof.note_xdp()
    r = a.run([PY, "-c", f"import socket; s = socket.create_connection(('{B_ADDR}', 7232), timeout=5); "
                          "s.sendall(b'x' * 3000); d = b''\n"
                          "while len(d) < 100: d += s.recv(100)\n"
                          "print(len(d))"], timeout=30)
    echo_round(a, 7231, conns=5, msgs=5)
    proof.check()
    assert r.stdout.strip() == "100", r.stdout + r.stderr
    assert p.stdout.readline().strip() == "closed"
    p.stdin.write("\n")
    p.stdin.flush()
    _, perr = p.communicate(timeout=20)
    assert_accelerated_log(perr)
    stop(s1)


def test_four_programs_share_the_group_frames(testbed, slip, tmp_path):
    """Four programs, four stacks on one UMEM: each one's frames come from the group's pool, and
    a stack that finds it short makes the others give back what they hold beyond their low mark,
    so the last one to start still gets frames to answer with."""
    a, b = testbed.host("a"), testbed.host("b")
    procs = []
    for i in range(4):
        lg = str(tmp_path / f"s{i}.log")
        p = start(b, slip([PY, os.path.join(APPS, "asyncio_echo.py"), "0.0.0.0", str(7241 + i)]), lg)
        wait_listening(b, 7241 + i, proc=p, log=lg)
        procs.append(p)
    proof = Proof(b).start(peer=a)
    time.sleep(0.3)
    proof.note_xdp()
    for rnd in range(2):
        for i in range(4):
            echo_round(a, 7241 + i, conns=8, msgs=8)
    # A fifth program that starts by sending (a client: its first frame is a SYN, before anything
    # arrived to give it frames) while the four hold theirs.
    srv = a.popen([PY, "-c", "import socket\nl = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                   "l.bind(('0.0.0.0', 7249)); l.listen(4); print('ready', flush=True)\n"
                   "for _ in range(3):\n    c, _ = l.accept(); c.sendall(b'y' * 2000000); c.close()\n"],
                  stdout=subprocess.PIPE, text=True)
    assert srv.stdout.readline().strip() == "ready"
    cli = ("import socket\nfor _ in range(3):\n"
           f"    s = socket.create_connection(('{A_ADDR}', 7249), timeout=10); n = 0\n"
           "    while True:\n        d = s.recv(65536)\n        if not d: break\n        n += len(d)\n"
           "    assert n == 2000000, n\nprint('ok')\n")
    r = b.run(slip([PY, "-c", cli]), timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
    assert_accelerated_log(r.stderr)
    srv.wait(timeout=10)
    proof.check()
    stacks = stat_stacks(b, slip)       # the client's stack may still be there (its guardian)
    assert {0, 1, 2, 3} <= set(stacks), stacks
    for i in range(4):
        assert stacks[i][1].get("procs.live") == "1" and int(stacks[i][1]["tcp.segs_in"]) > 0, stacks[i][1]
    for p in procs:
        stop(p)


RECEIVER = """
import selectors, socket, sys
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", int(sys.argv[1])))
l.listen(4)
print("listening", flush=True)
sel = selectors.DefaultSelector()
sel.register(l, selectors.EVENT_READ)
while True:
    for k, _ in sel.select():
        if k.fileobj is l:
            c, _ = l.accept()
            c.setblocking(False)
            sel.register(c, selectors.EVENT_READ)
        else:
            try:
                if not k.fileobj.recv(1 << 16):
                    sel.unregister(k.fileobj)
            except BlockingIOError:
                pass
"""

FLOOD = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
b = b"x" * (1 << 20)
while True:
    s.sendall(b)
"""


def kill_rounds(a, b, exe, victim, load, tmp_path, port0, before_kill=None, rounds=4, per=3):
    """An echo server (the keeper) in b on its own stack; then `rounds` times `per` victims
    (victim(port, i): the argv of a program under `slipstream run` in b, listening on port), each
    given a load from a (load(port, i): the Popen objects it starts), killed (SIGKILL) together at a
    random moment (before_kill() first, if given); then an echo round. Returns the frames of the
    group's UMEM missing once the guardians closed the dead stacks (settled_missing) and the
    counters, after checking that none were missing before the kills."""
    import random
    lg = str(tmp_path / "keeper.log")
    keeper = start(b, [str(exe), "run", "--iface", "veth0", "--", PY, os.path.join(APPS, "asyncio_echo.py"),
                       "0.0.0.0", "7301"], lg)
    victims = []
    try:
        wait_listening(b, 7301, proc=keeper, log=lg)
        echo_round(a, 7301, conns=5, msgs=5)
        missing, c = settled_missing(b, exe)
        assert missing == 0, c          # nothing is missing before the kills
        for rnd in range(rounds):
            group, loads = [], []
            for i in range(per):
                port, log = port0 + per * rnd + i, str(tmp_path / f"v{rnd}-{i}.log")
                v = start(b, victim(port, i), log)
                victims.append(v)
                group.append(v)
                wait_listening(b, port, proc=v, log=log)
                loads += load(port, i)
            time.sleep(0.4 + random.random() * 0.6)
            if before_kill:
                before_kill()
            for v in group:
                os.killpg(v.pid, signal.SIGKILL)
            for v in group:
                v.wait(timeout=10)
            for p in loads:
                p.kill()
                p.wait()
        echo_round(a, 7301, conns=5, msgs=5)        # the keeper still serves
        missing, c = settled_missing(b, exe)
        print("frames missing:", missing, c)
        return missing, c
    finally:
        for v in victims:
            if v.poll() is None:
                os.killpg(v.pid, signal.SIGKILL)
                v.wait()
        stop(keeper)


def test_receivers_killed_mid_stream_lose_no_frames(testbed, slip, tmp_path):
    """Programs receiving two kernel streams each, killed (SIGKILL) at a random moment, lose no
    frame of the UMEM they share with an echo server: their stacks spend most of their time
    working through bursts of received segments, and a burst taken off the RX ring at once went
    with a killed process (up to 63 frames a kill: 124 in one round of three, 205 in eight
    rounds); now each frame leaves the ring as its turn comes (src/stack/poll.c). Three at a time,
    four times; then every frame is free or posted to the fill ring, but for the frame a kill can
    catch in the process's hands (docs/ARCHITECTURE.md, "Many stacks on one interface": Death),
    and the echo server still serves."""
    a, b = testbed.host("a"), testbed.host("b")

    def load(port, i):
        return [a.popen([PY, "-c", FLOOD, B_ADDR, str(port)], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL) for _ in range(2)]
    missing, c = kill_rounds(a, b, slip.exe, lambda port, i: slip([PY, "-c", RECEIVER, str(port)]), load,
                             tmp_path, 9200)
    assert missing is not None and missing <= 4 * 3, c
