"""Stack sharing against a hostile neighbour (issue 11, item 2). The rendezvous name of a stack
(an abstract UNIX socket, `slipstream/1/<ifaces>`) can be bound by anyone in the namespace, and a
stack's memory is shared with processes that may have dropped to another user. Each test plays
one attack and checks that it gets nothing:

- a squatter of another user binds the name first and answers a root program with a "stack" of
  its own making: root must not join it, must not crash, and runs on a stack of its own;
- the same answer from a root server (a trusted user whose memory is nonetheless wrong): the
  joining side checks the memory's seals and every offset before it uses one;
- a server whose worker dropped root for nobody: no nobody process may get the stack's memory
  or sockets from either process, while root still can (`slipstream stat`)."""
import json
import os
import re
import time

import pytest

from test_apps import APPS, B_ADDR, PY, Proof, assert_accelerated_log, read, start, stop, wait_listening
from test_share import echo_round, slip  # noqa: F401  (fixture)

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
NAME = "slipstream/1/veth0"


def name_holders(host):
    """Pids of the processes holding the stack's rendezvous socket (listening, abstract name)."""
    out = host.run(["ss", "-xlpn"], check=True, timeout=30).stdout
    return {pid for line in out.splitlines() if f"@{NAME} " in line for pid in re.findall(r"pid=(\d+)", line)}


def script(name):
    """The text of a test program, passed with -c: nobody may not be able to read the checkout
    (a clone under /root)."""
    return open(os.path.join(APPS, name)).read()


def layout_version():
    """The arena layout version this build checks (a squatter that gets it wrong would be
    turned away for that alone, which is not the check under test)."""
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src", "stack", "stack_int.h")
    return int(re.search(r"#define SLIP_SHM_VERSION (\d+)", open(src).read()).group(1))


def squat(b, tmp_path, as_nobody, sealed):
    argv = [PY, "-c", script("share_squatter.py"), NAME, str(layout_version()), "1" if sealed else "0"]
    log = str(tmp_path / "squat.log")
    p = start(b, (NOBODY if as_nobody else []) + argv, log)
    deadline = time.monotonic() + 10
    while "squatting" not in read(log):
        assert p.poll() is None and time.monotonic() < deadline, read(log)
        time.sleep(0.05)
    return p, log


def run_echo_beside_squatter(testbed, slip, tmp_path, as_nobody, sealed, port):
    a, b = testbed.host("a"), testbed.host("b")
    squatter, squat_log = squat(b, tmp_path, as_nobody, sealed)
    log = str(tmp_path / "echo.log")
    srv = start(b, slip([PY, os.path.join(APPS, "asyncio_echo.py"), "0.0.0.0", str(port)]), log)
    wait_listening(b, port, proc=srv, log=log)
    proof = Proof(b).start(peer=a)
    time.sleep(0.3)
    proof.note_xdp()
    echo_round(a, port)
    proof.check()
    assert srv.poll() is None, f"the root program died: {read(log)[-2000:]}"
    maps = open(f"/proc/{srv.pid}/maps").read() if os.path.exists(f"/proc/{srv.pid}/maps") else ""
    asked = [json.loads(l) for l in read(squat_log).splitlines() if l.startswith("{")]
    stop(srv)
    stop(squatter)
    text = read(log)
    print(f"squatter ({'nobody' if as_nobody else 'root'}, memfd {'sealed' if sealed else 'unsealed'}): "
          f"{len(asked)} connection(s) from the program; its log: "
          f"{[l for l in text.splitlines() if 'slipstream' in l]}")
    assert len(asked) >= 1, "the program never asked the squatter: the test proves nothing"
    assert "slip-squat" not in maps, "the program mapped the squatter's memory"
    assert_accelerated_log(text)
    return text


def test_squatter_of_another_user_gets_nothing(testbed, slip, tmp_path):
    text = run_echo_beside_squatter(testbed, slip, tmp_path, as_nobody=True, sealed=True, port=7301)
    assert "uid 65534" in text and "not joining" in text, text[-2000:]


@pytest.mark.parametrize("sealed", [False, True], ids=["unsealed", "sealed-garbage"])
def test_memory_from_a_trusted_server_is_checked_before_use(testbed, slip, tmp_path, sealed):
    text = run_echo_beside_squatter(testbed, slip, tmp_path, as_nobody=False, sealed=sealed, port=7302)
    want = "inconsistent" if sealed else "not sealed"
    assert want in text and "not joining" in text, text[-2000:]


def test_worker_that_dropped_root_does_not_serve_the_stack(testbed, slip, tmp_path):
    a, b = testbed.host("a"), testbed.host("b")
    log = str(tmp_path / "srv.log")
    srv = start(b, slip([PY, os.path.join(APPS, "fork_drop_echo.py"), "0.0.0.0", "7303"]), log)
    deadline = time.monotonic() + 15
    while "ready" not in read(log):
        assert srv.poll() is None and time.monotonic() < deadline, read(log)
        time.sleep(0.05)
    wait_listening(b, 7303, proc=srv, log=log)
    # The worker's progress thread looks at its privileges and closes the rendezvous socket it
    # inherited: waited for (a fixed 0.6 s could be too short on a loaded machine).
    worker = re.search(r"ready (\d+)", read(log)).group(1)
    deadline = time.monotonic() + 15
    while worker in name_holders(b) and time.monotonic() < deadline:
        time.sleep(0.05)
    holders = name_holders(b)
    assert worker not in holders and str(srv.pid) in holders, (worker, srv.pid, holders)
    echo_round(a, 7303)

    r = b.run(NOBODY + [PY, "-c", script("share_probe.py"), NAME, "30"], timeout=120)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"nobody asking for the stack 30 times: {res}")
    assert res["got_fds"] == 0, res

    # The stack's own user still joins it (served by the root process).
    st = b.run([str(slip.exe), "stat", "--iface", "veth0"], timeout=30)
    assert st.returncode == 0, st.stdout + st.stderr
    live = dict(l.split()[:2] for l in st.stdout.splitlines() if l.count(" ") >= 1).get("procs.live")
    print(f"root's slipstream stat: procs.live {live}")
    assert live == "2", st.stdout
    echo_round(a, 7303)
    stop(srv)
    assert_accelerated_log(read(log))


def test_exec_image_releases_reservations_it_inherited(testbed, slip, tmp_path):
    """Port-reservation fds are closed only when this process knows them as its own (so nobody
    can make it close another fd); an exec'd image learns them from SLIP_KFDS. Its close of an
    inherited listener must free the port in the kernel, and refuse nothing."""
    import subprocess
    a, b = testbed.host("a"), testbed.host("b")
    p = b.popen(slip([PY, os.path.join(APPS, "exec_listener.py"), "7304"]), stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "listening", p.stderr.read() if p.poll() is not None else ""
    r = a.run([PY, "-c", f"import socket; s = socket.create_connection(('{B_ADDR}', 7304), timeout=5); "
                          "s.sendall(b'x'); print(s.recv(10).decode())"], timeout=30)
    assert r.stdout.strip() == "x", r.stdout + r.stderr
    assert p.stdout.readline().strip() == "closed"
    st = b.run([str(slip.exe), "stat", "--iface", "veth0"], timeout=30)
    refused = dict(l.split()[:2] for l in st.stdout.splitlines() if l.count(" ") >= 1).get("stack.kfd_refused")
    # The engine frees the listener at once (no TIME_WAIT for a listener); give the poll a moment.
    deadline, ok, err = time.monotonic() + 3, False, ""
    while time.monotonic() < deadline and not ok:
        k = b.run([PY, "-c", "import socket; l = socket.socket(); l.bind(('0.0.0.0', 7304)); print('bound')"])
        ok, err = k.stdout.strip() == "bound", k.stderr
        time.sleep(0.1)
    p.stdin.write("\n")
    p.stdin.flush()
    _, perr = p.communicate(timeout=20)
    print(f"after exec and close: kernel bind of the port {'ok' if ok else 'failed'}, stack.kfd_refused {refused}")
    assert refused == "0", st.stdout
    assert ok, err[-500:]
    assert_accelerated_log(perr)
