"""Tests of the testbed itself: the topology it builds (addresses, MACs, queues, checksum offload,
bpffs, routing) and that it always cleans up: after a failing body, at exit, on SIGINT/SIGTERM of
the CLI, and for processes that ignore SIGTERM.
"""

import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from testbed import Testbed, Topology, list_namespaces, ns_exec

PREFIX = "sld"
REPO = pathlib.Path(__file__).resolve().parent.parent.parent
CLI = REPO / "scripts" / "testbed.py"


def ping(host, addr, count=1):
    return host.run(["ping", "-n", "-c", str(count), "-W", "2", addr], timeout=30)


def need_root():
    if os.geteuid() != 0:
        pytest.skip("needs root: the testbed creates network namespaces")


def test_two_hosts_addresses_macs_ping(make_testbed):
    tb = make_testbed(Topology(), prefix=PREFIX)
    a, b = tb.host("a"), tb.host("b")
    assert (a.ns, b.ns) == (f"{PREFIX}{os.getpid()}-a", f"{PREFIX}{os.getpid()}-b")
    assert (a.ifname, b.ifname) == ("veth0", "veth0")
    assert (a.addr, b.addr) == ("198.18.0.1", "198.18.0.2")
    assert (a.mac, b.mac) == ("02:00:00:00:01:01", "02:00:00:00:01:02")
    assert a.peer_mac == b.mac and b.peer_addr == a.addr
    for h in (a, b):
        out = h.run(["ip", "-4", "-o", "addr", "show", "dev", "veth0"], check=True).stdout
        assert f"inet {h.addr}/24" in out
        assert h.run(["cat", "/sys/class/net/veth0/address"], check=True).stdout.strip() == h.mac
        assert "UP" in h.run(["ip", "-o", "link", "show", "lo"], check=True).stdout
    r = ping(a, b.addr)
    assert r.returncode == 0, r.stdout + r.stderr


def test_router_topology_forwards(make_testbed):
    tb = make_testbed(Topology(router=True), prefix=PREFIX)
    a, b, r = tb.host("a"), tb.host("b"), tb.host("r")
    assert (a.addr, b.addr) == ("198.18.1.1", "198.18.2.1")
    assert [f.addr for f in r.ifaces] == ["198.18.1.254", "198.18.2.254"]
    assert (a.gateway, b.gateway) == ("198.18.1.254", "198.18.2.254")
    assert a.ifname == b.ifname == "veth0"
    assert r.run(["sysctl", "-n", "net.ipv4.ip_forward"], check=True).stdout.strip() == "1"
    assert "default via 198.18.1.254" in a.run(["ip", "route"], check=True).stdout
    res = ping(a, b.addr)
    assert res.returncode == 0, res.stdout + res.stderr
    # One hop through r: TTL 64 arrives as 63.
    assert "ttl=63" in res.stdout


@pytest.mark.parametrize("queues", [1, 4])
def test_queue_count(make_testbed, queues):
    tb = make_testbed(Topology(queues=queues), prefix=PREFIX)
    for h in tb.hosts.values():
        q = h.run(["ls", "/sys/class/net/veth0/queues"], check=True).stdout.split()
        assert sorted(q) == sorted([f"rx-{i}" for i in range(queues)] +
                                   [f"tx-{i}" for i in range(queues)])


def test_tx_checksum_offload_off_everywhere(make_testbed):
    tb = make_testbed(Topology(router=True), prefix=PREFIX)
    seen = 0
    for h in tb.hosts.values():
        for f in h.ifaces:
            out = h.run(["ethtool", "-k", f.name], check=True).stdout
            m = re.search(r"^tx-checksumming: (\w+)", out, re.M)
            assert m and m.group(1) == "off", f"{h.name}:{f.name}\n{out}"
            seen += 1
    assert seen == 4


def test_bpffs_mounted_and_persistent(make_testbed):
    tb = make_testbed(Topology(), prefix=PREFIX)
    b = tb.host("b")
    assert b.run(["stat", "-f", "-c", "%T", "/sys/fs/bpf"], check=True).stdout.strip() == "bpf_fs"
    # A pin made by one command is seen by the next one in the same host, not by the other host.
    b.run(["mkdir", "/sys/fs/bpf/sld-mark"], check=True)
    assert b.run(["test", "-d", "/sys/fs/bpf/sld-mark"]).returncode == 0
    assert tb.host("a").run(["test", "-d", "/sys/fs/bpf/sld-mark"]).returncode != 0


def test_run_check_raises_with_output(make_testbed):
    tb = make_testbed(Topology(), prefix=PREFIX)
    with pytest.raises(subprocess.CalledProcessError) as ei:
        tb.host("a").run(["sh", "-c", "echo to-stderr >&2; exit 3"], check=True)
    assert ei.value.returncode == 3 and "to-stderr" in str(ei.value)


def test_cleanup_after_failing_body():
    need_root()
    tb = Testbed(Topology(), prefix=PREFIX, tag="fail")
    names = tb.namespaces
    p = None
    with pytest.raises(RuntimeError):
        try:
            tb.up()
            assert set(names) <= set(list_namespaces(PREFIX))
            p = tb.host("a").popen(["sleep", "300"])
            raise RuntimeError("test body failed")
        finally:
            tb.down()
    assert not set(names) & set(list_namespaces(PREFIX))
    assert p is not None and p.poll() is not None
    tb.down()  # twice is fine


def test_down_kills_stubborn_and_untracked_processes():
    need_root()
    tb = Testbed(Topology(), prefix=PREFIX, tag="kill")
    try:
        tb.up()
        a, b = tb.host("a"), tb.host("b")
        polite = a.popen(["sleep", "300"])
        stubborn = a.popen(["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"])
        # Not tracked: started straight in the namespace, detached from us.
        untracked = subprocess.Popen([*ns_exec(b.ns), "sleep", "300"],
                                     start_new_session=True)
        time.sleep(0.3)
        assert untracked.pid in b.pids()
        t0 = time.monotonic()
    finally:
        tb.down()
    took = time.monotonic() - t0
    assert polite.poll() == -signal.SIGTERM
    assert stubborn.poll() == -signal.SIGKILL
    assert untracked.wait(5) in (-signal.SIGTERM, -signal.SIGKILL)
    assert took < 15
    assert not set(tb.namespaces) & set(list_namespaces(PREFIX))


def test_up_removes_leftovers_with_same_names():
    need_root()
    tb = Testbed(Topology(), prefix=PREFIX, tag="left")
    subprocess.run(["ip", "netns", "add", tb.ns_name("a")], check=True)
    try:
        tb.up()
        r = ping(tb.host("a"), tb.host("b").addr)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        tb.down()
    assert not set(tb.namespaces) & set(list_namespaces(PREFIX))


def test_two_testbeds_alive_in_one_process(make_testbed):
    t1 = make_testbed(Topology(), prefix=PREFIX)
    t2 = make_testbed(Topology(), prefix=PREFIX)
    assert not set(t1.namespaces) & set(t2.namespaces)
    assert ping(t2.host("a"), t2.host("b").addr).returncode == 0


def test_cleanup_at_interpreter_exit():
    need_root()
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from testbed import Testbed, Topology\n"
            "tb = Testbed(Topology(), prefix='sld', tag='exit').up()\n"
            "tb.host('a').popen(['sleep', '300'])\n"
            "print(' '.join(tb.namespaces), flush=True)\n" % str(pathlib.Path(__file__).parent))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    names = r.stdout.split()
    assert names == ["sldexit-a", "sldexit-b"]
    assert not set(names) & set(list_namespaces(PREFIX))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_cli_hold_cleans_up_on_signal(sig):
    need_root()
    prefix = "sldint" if sig == signal.SIGINT else "sldterm"
    p = subprocess.Popen([sys.executable, str(CLI), "up", "--prefix", prefix, "--hold",
                          "--router", "--queues", "2"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("holding"):
                break
        assert lines and lines[-1].startswith("holding"), "".join(lines) + p.stderr.read()
        text = "".join(lines)
        assert f"ip netns exec {prefix}-b bash" in text and "198.18.2.1/24" in text
        assert sorted(list_namespaces(prefix + "-")) == [f"{prefix}-{h}" for h in "abr"]
        p.send_signal(sig)
        assert p.wait(30) == 0, p.stderr.read()
        assert list_namespaces(prefix + "-") == []
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        subprocess.run([sys.executable, str(CLI), "down", "--prefix", prefix],
                       capture_output=True)


def test_cli_up_status_down():
    need_root()
    prefix = "sldcli"
    try:
        r = subprocess.run([sys.executable, str(CLI), "up", "--prefix", prefix, "--hosts", "a,b"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "ip netns exec sldcli-a bash" in r.stdout
        # `up` without --hold leaves the testbed standing after the CLI exits.
        assert sorted(list_namespaces(prefix + "-")) == ["sldcli-a", "sldcli-b"]
        s = subprocess.run([sys.executable, str(CLI), "status", "--prefix", prefix],
                           capture_output=True, text=True, timeout=60)
        assert s.returncode == 0 and "198.18.0.2/24" in s.stdout, s.stdout + s.stderr
    finally:
        d = subprocess.run([sys.executable, str(CLI), "down", "--prefix", prefix],
                           capture_output=True, text=True, timeout=60)
    assert d.returncode == 0, d.stdout + d.stderr
    assert list_namespaces(prefix + "-") == []


def test_default_fixture_names_and_env_prefix(testbed):
    # The `testbed` fixture: prefix "slt" unless SLIP_NS_PREFIX says otherwise, then the pid.
    prefix = os.environ.get("SLIP_NS_PREFIX", "slt")
    a, b = testbed.host("a"), testbed.host("b")
    assert a.ns == f"{prefix}{os.getpid()}-a" and b.ns == f"{prefix}{os.getpid()}-b"
    r = ping(b, a.addr)
    assert r.returncode == 0, r.stdout + r.stderr
