"""SO_REUSEPORT through the stack: several accelerated listeners on one (address, port), each new
connection going to one of them by a hash of its 4-tuple, as Linux does.

- apps/reuseport_server.py under `slipstream run` in host b opens two SO_REUSEPORT listeners on
  one port (one process; two processes sharing them after fork; two processes opening their own
  after fork; and two UDP sockets), a kernel client in host a makes 200 connections (or sends
  from 200 source ports): every one is served, both listeners got some, and the kernel of b saw
  (almost) none of the traffic while the steering program was attached;
- nginx with `worker_processes 2;` and `listen ... reuseport;` under `slipstream run`: curl and wrk
  from host a, every response 200, and both workers served connections (pid in the access log).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from test_apps import snmp, kill_pidfile
from testbed import Topology

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "apps", "reuseport_server.py")
PY = sys.executable
A_ADDR, B_ADDR = "198.18.0.1", "198.18.0.2"
PORT = 8090
NCONN = 200
KERNEL_SHARE_MAX = 0.05     # kernel segments of b as a share of the run's (ARP/port stragglers)


@pytest.fixture(scope="module")
def slip(build_dir):
    exe = build_dir / "slipstream"
    lib = build_dir / "src" / "preload" / "libslipstream.so"
    for f in (exe, lib):
        if not f.exists():
            pytest.skip(f"not built: {f}")
    return lambda cmd: [str(exe), "run", "--iface", "veth0", "--", *cmd]


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="slrp-")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def kernel_traffic(after, before, proto):
    keys = ("InSegs", "OutSegs") if proto == "Tcp" else ("InDatagrams", "OutDatagrams")
    return sum(after[f"{proto}.{k}"] - before[f"{proto}.{k}"] for k in keys)


def xdp_attached(host):
    out = host.run(["ip", "link", "show", "veth0"], check=True).stdout
    return "prog/xdp" in out and "slip_steer" in out


def read(path):
    return open(path, errors="replace").read() if os.path.exists(path) else ""


def stop(p, timeout=10):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        return p.wait(timeout=5)


def assert_accelerated_log(text):
    assert "not accelerated" not in text and "slipstream: error" not in text, text[-2000:]


def check_proof(a, b, before_a, before_b, proto):
    """The kernel of b carried (almost) none of what the kernel of a sent and received."""
    ref = kernel_traffic(snmp(a), before_a, proto)
    kern = kernel_traffic(snmp(b), before_b, proto)
    print(f"proof: kernel {proto} traffic of b = {kern} during a run of {ref} on a "
          f"({100.0 * kern / max(ref, 1):.2f} %)")
    assert ref > 0
    assert kern < KERNEL_SHARE_MAX * ref, f"the kernel of b saw {kern} of {ref}: not accelerated"


# The kernel client in host a: NCONN connections (or datagrams from NCONN sockets) one after the
# other, each from a new ephemeral port; prints per-listener counts from the servers' answers.
CLIENT = r"""
import json, socket, sys, collections
addr, port, n, udp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "udp"
seen, errors = collections.Counter(), []
for i in range(n):
    try:
        if udp:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(1.0)
            s.bind(("0.0.0.0", 0))
            line = b""
            for attempt in range(5):       # UDP: a lost datagram is resent
                s.sendto(b"ping", (addr, port))
                try:
                    line = s.recv(64)
                    break
                except socket.timeout:
                    continue
        else:
            s = socket.create_connection((addr, port), timeout=10)
            s.sendall(b"hello\n")
            line = b""
            while not line.endswith(b"\n"):
                b = s.recv(64)
                if not b:
                    break
                line += b
        s.close()
        f = line.decode().split()
        if len(f) != 2:
            errors.append(f"{i}: answer {line!r}")
            continue
        seen[f[0] + " " + f[1]] += 1
    except OSError as e:
        errors.append(f"{i}: {e}")
print(json.dumps({"seen": seen, "errors": errors[:20], "nerrors": len(errors)}))
"""


def stop_with_log(p, log):
    """Stops a test server: its exit code and its log (whose tail is printed)."""
    rc = stop(p)
    text = read(log)
    print("server log (tail):", text[-1500:])
    return rc, text


def check_server_end(rc, text):
    """The server ran accelerated, served every connection without an error, and ended on SIGTERM."""
    assert_accelerated_log(text)
    assert "Traceback" not in text and "connection error" not in text, text[-2000:]
    assert rc in (0, -signal.SIGTERM), f"server exit code {rc}"


def wait_files(paths, proc, log, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(os.path.exists(p) for p in paths):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    pytest.fail(f"server not ready ({paths}): {read(log)[-2000:]}")


def count_file(path):
    try:
        return int(open(path).read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


@pytest.mark.parametrize("mode", ["one", "fork-after", "fork-before", "fork-poll", "udp"])
def test_two_reuseport_listeners_share_the_connections(testbed, slip, workdir, mode, build_dir):
    a, b = testbed.host("a"), testbed.host("b")
    out = os.path.join(workdir, "count")
    log = os.path.join(workdir, "server.log")
    with open(log, "w") as f:
        p = b.popen(slip([PY, SERVER, "--addr", B_ADDR, "--port", str(PORT), "--mode", mode, "--out", out]),
                    stdout=f, stderr=subprocess.STDOUT)
    try:
        wait_files([f"{out}.0", f"{out}.1"], p, log)
        proto = "Udp" if mode == "udp" else "Tcp"
        before_a, before_b = snmp(a), snmp(b)
        cp = a.popen([PY, "-c", CLIENT, B_ADDR, str(PORT), str(NCONN), "udp" if mode == "udp" else "tcp"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.2)
        xdp = xdp_attached(b)
        cout, cerr = cp.communicate(timeout=120)
        assert cp.returncode == 0, cerr[-2000:]
        res = json.loads(cout)
        print(f"mode {mode}: answers per listener/pid {res['seen']}, errors {res['nerrors']} {res['errors']}")
        # The servers' own counts (files are rewritten after each connection is served).
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and count_file(f"{out}.0") + count_file(f"{out}.1") < NCONN:
            time.sleep(0.1)
        served = [count_file(f"{out}.0"), count_file(f"{out}.1")]
        print(f"served per listener: {served}")
        assert xdp, "no slip_steer XDP program on b's veth0 during the run"
        assert res["nerrors"] == 0, res["errors"]
        assert sum(res["seen"].values()) == NCONN
        assert sum(served) == NCONN, served
        assert served[0] > 0 and served[1] > 0, f"one listener got nothing: {served}"
        by_listener = {k.split()[0] for k in res["seen"]}
        assert by_listener == {"0", "1"}, res["seen"]
        pids = {k.split()[1] for k in res["seen"]}
        if mode.startswith("fork"):
            assert len(pids) == 2, f"the two processes should each have served: {res['seen']}"
        check_proof(a, b, before_a, before_b, proto)
        if mode == "fork-before":
            # Processes that each open their own listener: the second to listen moves it to a
            # stack of its own (<stack>.<pid>); two that listen at the same instant may both move
            # (the shared stack then takes nothing). Either way the two listeners' connections
            # are in two stacks, each with one process's connections, one of them a process's own.
            stacks = [st for st in worker_stacks(b, build_dir / "slipstream") if set(st["procs"]) & pids]
            busy = [st for st in stacks if st["passive"] > 0]
            assert len(busy) == 2 and sum(st["passive"] for st in busy) == NCONN, stacks
            assert any(st["name"].rsplit(".", 1)[-1] in pids for st in busy), stacks
    finally:
        rc, text = stop_with_log(p, log)
    check_server_end(rc, text)


def test_threads_listening_on_one_port_get_a_stack_each(testbed, slip, workdir, build_dir):
    """A stack per thread (SLIP_THREAD_STACKS): two threads of one process each open a SO_REUSEPORT
    listener on one port and serve it (one with epoll, one with blocking accept). The second
    thread's listener moves to a stack of its own: `slipstream stat` shows two stacks of the one
    process, each of which took connections, every connection is served, through the stack."""
    a, b = testbed.host("a"), testbed.host("b")
    out = os.path.join(workdir, "count")
    log = os.path.join(workdir, "server.log")
    with open(log, "w") as f:
        p = b.popen(slip([PY, SERVER, "--addr", B_ADDR, "--port", str(PORT), "--mode", "threads", "--out", out]),
                    stdout=f, stderr=subprocess.STDOUT)
    try:
        wait_files([f"{out}.0", f"{out}.1"], p, log)
        before_a, before_b = snmp(a), snmp(b)
        res = run_client(a, NCONN)
        print(f"answers per thread: {res['seen']}, errors {res['nerrors']} {res['errors']}")
        assert res["nerrors"] == 0, res["errors"]
        assert sum(res["seen"].values()) == NCONN
        assert {k.split()[0] for k in res["seen"]} == {"0", "1"}, f"one thread got nothing: {res['seen']}"
        assert len({k.split()[1] for k in res["seen"]}) == 1, res["seen"]
        check_proof(a, b, before_a, before_b, "Tcp")
        pid = next(iter(res["seen"])).split()[1]
        stacks = [st for st in worker_stacks(b, build_dir / "slipstream") if pid in st["procs"]]
        assert len(stacks) == 2, f"the process should have two stacks: {stacks}"
        assert all(st["procs"] == [pid] for st in stacks), stacks
        assert sum(1 for st in stacks if ".t" in st["name"]) == 1, f"no thread stack: {stacks}"
        assert all(st["passive"] > 0 for st in stacks), f"a stack took no connection: {stacks}"
        assert sum(st["passive"] for st in stacks) >= NCONN, stacks
    finally:
        rc, text = stop_with_log(p, log)
    check_server_end(rc, text)


# GET /who from n new connections, one after the other: {"<thread> <pid>": count}.
WHO_CLIENT = r"""
import collections, json, socket, sys
addr, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
seen, errors = collections.Counter(), []
for i in range(n):
    try:
        s = socket.create_connection((addr, port), timeout=10)
        s.sendall(b"GET /who HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            b = s.recv(4096)
            if not b:
                break
            data += b
        s.close()
        head, _, body = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200") or len(body.split()) != 2:
            errors.append(f"{i}: {data!r}")
            continue
        seen[body.decode().strip()] += 1
    except OSError as e:
        errors.append(f"{i}: {e}")
print(json.dumps({"seen": seen, "errors": errors[:20], "nerrors": len(errors)}))
"""


def test_c_server_with_a_listener_per_thread(testbed, slip, workdir, build_dir):
    """tests/prog/http_threads: a C server whose 3 threads each open a SO_REUSEPORT listener and
    run their own epoll loop. Each thread past the first gets a stack of its own (3 stacks of one
    process in `slipstream stat`), every thread serves connections, wrk's keep-alive load is
    answered without error, all through the stack."""
    prog = build_dir / "tests" / "prog" / "http_threads"
    if not prog.exists():
        pytest.skip(f"not built: {prog}")
    a, b = testbed.host("a"), testbed.host("b")
    log = os.path.join(workdir, "server.log")
    with open(log, "w") as f:
        p = b.popen(slip([str(prog), str(PORT), "3"]), stdout=f, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while "listening" not in read(log) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "listening 3" in read(log), read(log)[-2000:]
        before_a, before_b = snmp(a), snmp(b)
        cp = a.run([PY, "-c", WHO_CLIENT, B_ADDR, str(PORT), str(NCONN)], timeout=120)
        assert cp.returncode == 0, cp.stderr[-2000:]
        res = json.loads(cp.stdout)
        print(f"answers per thread: {res['seen']}, errors {res['nerrors']} {res['errors']}")
        assert res["nerrors"] == 0, res["errors"]
        assert {k.split()[0] for k in res["seen"]} == {"0", "1", "2"}, f"a thread got nothing: {res['seen']}"
        if shutil.which("wrk"):
            w = a.run(["wrk", "-t1", "-c16", "-d2s", f"http://{B_ADDR}:{PORT}/"], timeout=30)
            print(w.stdout)
            assert w.returncode == 0 and re.search(r"(\d+) requests in", w.stdout), w.stdout + w.stderr
            assert "Socket errors" not in w.stdout and "Non-2xx" not in w.stdout, w.stdout
        check_proof(a, b, before_a, before_b, "Tcp")
        pid = next(iter(res["seen"])).split()[1]
        stacks = [st for st in worker_stacks(b, build_dir / "slipstream") if pid in st["procs"]]
        assert len(stacks) == 3 and sum(1 for st in stacks if ".t" in st["name"]) == 2, stacks
        assert all(st["passive"] > 0 for st in stacks), f"a stack took no connection: {stacks}"
    finally:
        rc = stop(p)
        text = read(log)
        print("server log (tail):", text[-1500:])
    assert_accelerated_log(text)
    served = [int(m) for m in re.findall(r"thread \d+ served (\d+)", text)]
    assert len(served) == 3 and all(n > 0 for n in served), text[-1500:]
    assert rc == 0, f"server exit code {rc}"


@pytest.mark.parametrize("proto", ["tcp", "udp"])
def test_two_programs_share_a_reuseport_port(testbed, slip, workdir, proto):
    """Two unrelated programs (two `slipstream run`, a stack each) with a SO_REUSEPORT listener (or
    UDP socket) on one port: new connections (datagrams from new ports) are spread over both
    stacks by the XDP program (the key's member set, bpf/steer.h STEER_F_GROUP), every one
    served; after kill -9 of one, the survivor gets every new one, accelerated."""
    a, b = testbed.host("a"), testbed.host("b")
    mode, kproto = ("single", "Tcp") if proto == "tcp" else ("single-udp", "Udp")
    out = os.path.join(workdir, "count")
    procs, logs = [], []
    for i in range(2):
        logs.append(os.path.join(workdir, f"server{i}.log"))
        with open(logs[-1], "w") as f:
            procs.append(b.popen(slip([PY, SERVER, "--addr", B_ADDR, "--port", str(PORT), "--mode", mode,
                                       "--index", str(i), "--out", out]), stdout=f, stderr=subprocess.STDOUT))
        wait_files([f"{out}.{i}"], procs[-1], logs[-1])
    try:
        before_a, before_b = snmp(a), snmp(b)
        res = run_client(a, NCONN, proto)
        print("answers per program:", res["seen"], "errors", res["nerrors"], res["errors"])
        assert res["nerrors"] == 0, res["errors"]
        assert {k.split()[0] for k in res["seen"]} == {"0", "1"}, f"one program got nothing: {res['seen']}"
        check_proof(a, b, before_a, before_b, kproto)

        os.killpg(procs[0].pid, signal.SIGKILL)
        procs[0].wait(timeout=10)
        # The dead program's stack leaves the key's members when its guardian closes it (a
        # connection hashed to it meanwhile is refused by the kernel; a datagram is answered by
        # the survivor's kernel socket): wait for a clean round, all through the stack.
        deadline = time.monotonic() + 15
        while True:
            kb = snmp(b)
            res = run_client(a, 40, proto)
            if (res["nerrors"] == 0 and kernel_traffic(snmp(b), kb, kproto) == 0) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        print("after kill -9 of program 0:", res["seen"], "errors", res["nerrors"])
        assert res["nerrors"] == 0, res["errors"]
        before_a, before_b = snmp(a), snmp(b)
        res = run_client(a, NCONN, proto)
        assert res["nerrors"] == 0, res["errors"]
        assert {k.split()[0] for k in res["seen"]} == {"1"}, res["seen"]
        check_proof(a, b, before_a, before_b, kproto)
    finally:
        for p in procs:
            stop(p)
    for lg in logs[1:]:
        assert_accelerated_log(read(lg))


def run_client(a, n, proto="tcp"):
    cp = a.run([PY, "-c", CLIENT, B_ADDR, str(PORT), str(n), proto], timeout=120)
    assert cp.returncode == 0, cp.stderr[-2000:]
    return json.loads(cp.stdout)


def test_closing_one_reuseport_listener_keeps_the_group_accelerated(testbed, slip, workdir):
    """The group's steering key outlives the first member to close: after listener 0 closes,
    listener 1 gets every new connection and the kernel of b still sees none of them (were the
    key gone, the SYNs would reach the kernel twin, which listens too, and still be served)."""
    a, b = testbed.host("a"), testbed.host("b")
    out = os.path.join(workdir, "count")
    log = os.path.join(workdir, "server.log")
    with open(log, "w") as f:
        p = b.popen(slip([PY, SERVER, "--addr", B_ADDR, "--port", str(PORT), "--mode", "close-one", "--out", out]),
                    stdout=f, stderr=subprocess.STDOUT)
    try:
        wait_files([f"{out}.0", f"{out}.1"], p, log)
        res = run_client(a, NCONN // 2)
        assert res["nerrors"] == 0, res["errors"]
        first = [count_file(f"{out}.0"), count_file(f"{out}.1")]
        print(f"before the close: served {first}")
        assert first[0] > 0 and first[1] > 0 and sum(first) == NCONN // 2, first
        pid = int(re.search(r"ready (\d+)", read(log)).group(1))
        b.run(["kill", "-USR1", str(pid)], check=True)
        wait_files([f"{out}.closed"], p, log, timeout=10)
        before_a, before_b = snmp(a), snmp(b)
        res = run_client(a, NCONN // 2)
        print(f"after the close: answers {res['seen']}, errors {res['nerrors']} {res['errors']}")
        assert xdp_attached(b), "no slip_steer XDP program on b's veth0"
        assert res["nerrors"] == 0, res["errors"]
        assert {k.split()[0] for k in res["seen"]} == {"1"}, res["seen"]
        second = [count_file(f"{out}.0"), count_file(f"{out}.1")]
        print(f"after the close: served {second}")
        assert second == [first[0], first[1] + NCONN // 2], (first, second)
        check_proof(a, b, before_a, before_b, "Tcp")
    finally:
        rc, text = stop_with_log(p, log)
    check_server_end(rc, text)


# ---------------------------------------------------------------------------------------------
# nginx: two workers, one reuseport listener each

NGINX_CONF = """
worker_processes 2;
master_process on;
daemon on;
pid @DIR@/nginx.pid;
error_log @DIR@/error.log info;
events { worker_connections 1024; }
http {
    log_format pidlog '$pid $status';
    access_log @DIR@/access.log pidlog;
    keepalive_timeout 65;
    keepalive_requests 100000;
    default_type application/octet-stream;
    client_body_temp_path @DIR@/body;
    proxy_temp_path @DIR@/proxy;
    fastcgi_temp_path @DIR@/fastcgi;
    uwsgi_temp_path @DIR@/uwsgi;
    scgi_temp_path @DIR@/scgi;
    server {
        listen @ADDR@:@PORT@ reuseport;
        root @ROOT@;
    }
}
"""


@pytest.fixture
def nginx_rp(make_testbed, slip, workdir):
    if not shutil.which("nginx"):
        pytest.skip("nginx is not installed (scripts/deps.sh installs it)")
    # Two queues on the veth pair (as the issue asks): each stack has an AF_XDP socket per queue,
    # and the kernel peer's flows arrive on both.
    testbed = make_testbed(Topology(queues=2))
    a, b = testbed.host("a"), testbed.host("b")
    root = os.path.join(workdir, "www")
    os.mkdir(root)
    os.chmod(root, 0o755)
    with open(os.path.join(root, "1k"), "wb") as f:
        f.write(os.urandom(1024))
    os.chmod(os.path.join(root, "1k"), 0o644)
    conf = os.path.join(workdir, "nginx.conf")
    text = NGINX_CONF
    for k, v in (("@DIR@", workdir), ("@ROOT@", root), ("@ADDR@", B_ADDR), ("@PORT@", str(PORT))):
        text = text.replace(k, v)
    with open(conf, "w") as f:
        f.write(text)
    log = os.path.join(workdir, "launcher.log")
    with open(log, "w") as f:
        r = b.run(slip(["nginx", "-c", conf, "-p", workdir + "/"]), stdout=f, stderr=subprocess.STDOUT,
                  timeout=30)
    assert r.returncode == 0, f"nginx did not start: rc {r.returncode}: {read(log)[-2000:]}"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not b.run(["ss", "-tlnH", f"sport = :{PORT}"]).stdout.strip():
        time.sleep(0.1)
    try:
        yield a, b, workdir
    finally:
        kill_pidfile(os.path.join(workdir, "nginx.pid"))
        print("nginx error.log (tail):", read(os.path.join(workdir, "error.log"))[-1500:])


def worker_pids(host, workdir):
    master = open(os.path.join(workdir, "nginx.pid")).read().split()[0]
    out = host.run(["ps", "-o", "pid=", "--ppid", master]).stdout.split()
    return set(out)


def test_nginx_two_workers_reuseport(nginx_rp, build_dir):
    a, b, nd = nginx_rp
    listeners = b.run(["ss", "-tlnH", f"sport = :{PORT}"]).stdout.strip().splitlines()
    print("kernel twins of the listeners:", listeners)
    assert len(listeners) == 2, f"expected one reuseport listener per worker: {listeners}"
    workers = worker_pids(b, nd)
    assert len(workers) == 2, f"nginx workers: {workers}"
    url = f"http://{B_ADDR}:{PORT}/1k"
    before_a, before_b = snmp(a), snmp(b)
    # 60 separate connections (curl's --next without keep-alive reuse: one process per request).
    codes = []
    for i in range(60):
        r = a.run(["curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", url], timeout=30)
        assert r.returncode == 0, (i, r.stderr)
        codes.append(r.stdout.strip())
        if i == 5:
            assert xdp_attached(b), "no slip_steer XDP program on b's veth0"
    assert codes == ["200"] * 60, codes
    if shutil.which("wrk"):
        wp = a.popen(["wrk", "-t", "2", "-c", "16", "-d", "2s", url], stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)
        out, err = wp.communicate(timeout=30)
        print(out)
        m = re.search(r"(\d+) requests in", out)
        assert wp.returncode == 0, err
        assert m and int(m.group(1)) > 0, out
        assert "Non-2xx" not in out and "Socket errors" not in out, out
    else:
        print("wrk not installed: curl only")
    check_proof(a, b, before_a, before_b, "Tcp")
    time.sleep(0.5)      # access log lines are written after the response
    lines = read(os.path.join(nd, "access.log")).split("\n")
    entries = [l.split() for l in lines if l.strip()]
    by_pid = {}
    for pid, status in entries:
        by_pid.setdefault(pid, []).append(status)
    print("requests per worker pid:", {p: len(s) for p, s in by_pid.items()})
    assert all(s == "200" for _, s in entries), [e for e in entries if e[1] != "200"][:10]
    assert set(by_pid) == workers, f"both workers must have served: {by_pid.keys()} vs {workers}"
    assert "[alert]" not in read(os.path.join(nd, "error.log"))
    assert_accelerated_log(read(os.path.join(nd, "launcher.log")))
    # A stack per worker (SLIP_WORKER_STACKS): each worker moved to a stack of its own before it
    # dropped root, and its connections were there; the master's stack (whose listeners the
    # workers copied) got none: it is parked in the XDP program while the copies live.
    stacks = worker_stacks(b, build_dir / "slipstream")
    master = open(os.path.join(nd, "nginx.pid")).read().split()[0]
    for w in workers:
        own = [st for st in stacks if st["name"].endswith(f".{w}")]
        assert len(own) == 1, f"worker {w} has no stack of its own: {stacks}"
        assert own[0]["passive"] > 0 and own[0]["procs"] == [w], f"worker {w}'s stack: {own[0]}"
    parent = [st for st in stacks if master in st["procs"]]
    assert len(parent) == 1 and parent[0]["passive"] == 0, f"the master's stack took connections: {parent}"
    assert sum(st["passive"] for st in stacks if st not in parent) >= 60, stacks
    # The copies keep the listener's MSS choice (none set: the route's and the peer's). A copy that
    # took the 536 TCP_MAXSEG reads back on an unconnected socket sent 524-byte segments.
    holder = a.popen([PY, "-c", HOLD_CONNS, B_ADDR, str(PORT), "16"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "connected"
        ss = a.run(["ss", "-tinH", "dst", f"{B_ADDR}:{PORT}"], timeout=10).stdout
    finally:
        holder.kill()
        holder.wait()
    mss = [int(m) for m in re.findall(r"\bmss:(\d+)", ss)]
    print("client-side mss of 16 connections:", mss)
    assert len(mss) == 16 and min(mss) >= 1400, ss
    # Each worker's stack has a socket on both queues, and the flows came in on both.
    own = [st for st in stacks if st not in parent]
    assert all(sorted(st["rxq"]) == [0, 1] for st in own), stacks
    assert all(sum(st["rxq"][q] for st in own) > 0 for q in (0, 1)), stacks


HOLD_CONNS = r"""
import socket, sys, time
conns = [socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5) for _ in range(int(sys.argv[3]))]
print("connected", flush=True)
time.sleep(30)
"""


def worker_stacks(host, exe):
    """`slipstream stat` in host b: a list of {"name", "procs", "passive"}, one per stack."""
    st = host.run([str(exe), "stat", "--iface", "veth0"], timeout=30)
    assert st.returncode == 0, st.stdout + st.stderr
    out = []
    for l in st.stdout.splitlines():
        if l.startswith("stack "):
            head = dict(f.split("=", 1) for f in l.split()[2:])
            out.append({"name": head.get("name", ""), "index": head.get("index"), "procs": [], "passive": 0,
                        "rxq": {}})
        elif out and l.startswith("proc "):
            out[-1]["procs"].append(l.split()[1])
        elif out and l.startswith("tcp.passive_opens "):
            out[-1]["passive"] = int(l.split()[1])
        else:
            m = re.match(r"xsk\.veth0\.q(\d+)\.rx_packets (\d+)$", l)
            if out and m:
                out[-1]["rxq"][int(m.group(1))] = int(m.group(2))
    print("stacks:", out)
    return out


def test_nginx_reload_moves_to_new_worker_stacks(nginx_rp, build_dir):
    """nginx reload (SIGHUP): the master forks new workers, which move to stacks of their own
    and take over its listeners (parking its stack again), while the old workers finish and their
    stacks go; every request before, during and after is answered."""
    a, b, nd = nginx_rp
    url = f"http://{B_ADDR}:{PORT}/1k"
    master = open(os.path.join(nd, "nginx.pid")).read().split()[0]

    def curls(n):
        codes = []
        for _ in range(n):
            r = a.run(["curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", url], timeout=30)
            codes.append(r.stdout.strip() if r.returncode == 0 else f"rc{r.returncode}:{r.stderr.strip()}")
        return codes

    assert curls(20) == ["200"] * 20
    old = worker_pids(b, nd)
    os.kill(int(master), signal.SIGHUP)
    deadline = time.monotonic() + 20
    new = set()
    while time.monotonic() < deadline:
        new = worker_pids(b, nd) - old
        if len(new) == 2:
            break
        time.sleep(0.2)
    assert len(new) == 2, f"no new workers after SIGHUP: old {old}, now {worker_pids(b, nd)}"
    codes = curls(60)
    assert codes == ["200"] * 60, codes
    # The old workers are gone with their stacks; each new one has its own, which took the
    # connections; the master's stack took none.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and worker_pids(b, nd) & old:
        time.sleep(0.2)
    stacks = worker_stacks(b, build_dir / "slipstream")
    for w in new:
        own = [st for st in stacks if st["name"].endswith(f".{w}")]
        assert len(own) == 1 and own[0]["passive"] > 0, f"new worker {w}: {stacks}"
    for w in old:
        assert not [st for st in stacks if st["name"].endswith(f".{w}")], f"old worker {w}'s stack stayed: {stacks}"
    parent = [st for st in stacks if master in st["procs"]]
    assert len(parent) == 1 and parent[0]["passive"] == 0, f"the master's stack took connections: {parent}"
    assert "[alert]" not in read(os.path.join(nd, "error.log"))


def steer_counter(host, exe, name):
    st = host.run([str(exe), "stat", "--iface", "veth0"], timeout=30).stdout
    m = re.search(rf"^steer\.veth0\.{name} (\d+)$", st, re.M)
    return int(m.group(1)) if m else None


def test_nginx_workers_killed_connections_wait_for_the_next_ones(nginx_rp, build_dir):
    """kill -9 of every worker while the master cannot fork new ones yet (stopped): the master's
    stack, whose listeners the workers had copied, stays parked (it never accepts), so the XDP
    program drops the SYNs that arrive meanwhile; the clients send them again and are answered
    by the workers nginx forks once it runs. Before, the master's stack took those connections
    into a queue nobody read, and the clients waited until they gave up."""
    a, b, nd = nginx_rp
    exe = build_dir / "slipstream"
    url = f"http://{B_ADDR}:{PORT}/1k"
    master = int(open(os.path.join(nd, "nginx.pid")).read().split()[0])
    r = a.run(["curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", url], timeout=30)
    assert r.stdout.strip() == "200", r.stderr
    old = worker_pids(b, nd)
    dropped0 = steer_counter(b, exe, "parked_syn_dropped")
    assert dropped0 is not None, "no steer.veth0.parked_syn_dropped in slipstream stat"
    # The workers' stacks by the abstract name that holds each index (`slipstream stat` cannot
    # join the master's stack while the master is stopped).
    names = [f"@slipstream/1/veth0/s{st['index']}" for st in worker_stacks(b, exe)
             if any(st["name"].endswith(f".{w}") for w in old)]
    assert len(names) == 2, names
    os.kill(master, signal.SIGSTOP)
    curls = []
    try:
        for w in old:
            os.kill(int(w), signal.SIGKILL)
        # The guardian removes a dead worker's claims (its copies leave the group), then
        # closes its stack and the name with it.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            listed = b.run(["ss", "-xlH"], timeout=10).stdout.split()
            if not set(names) & set(listed):
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"the dead workers' stacks stayed: {set(names) & set(listed)}")
        curls = [a.popen(["curl", "-sS", "--max-time", "20", "-o", "/dev/null", "-w", "%{http_code}", url],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
        time.sleep(1.5)         # their first SYNs (and the retry at 1 s) find no worker
    finally:
        os.kill(master, signal.SIGCONT)
    results = []
    for c in curls:
        out, err = c.communicate(timeout=40)
        results.append(out.strip() if c.returncode == 0 else f"rc{c.returncode}:{err.strip()}")
    dropped = steer_counter(b, exe, "parked_syn_dropped") - dropped0
    print("answers:", results, "SYNs dropped while every member was parked:", dropped)
    assert results == ["200"] * 4, results
    assert dropped >= 4, dropped
    new = worker_pids(b, nd) - old
    assert len(new) == 2, f"nginx forked no new workers: {worker_pids(b, nd)}"
    stacks = worker_stacks(b, exe)
    parent = [st for st in stacks if str(master) in st["procs"]]
    assert len(parent) == 1 and parent[0]["passive"] == 0, f"the master's stack took connections: {parent}"
