"""System tests of the XDP steering program and its loader, driven through tests/prog/steer_ctl:
with the program attached in host b (ports claimed, no AF_XDP socket), kernel traffic keeps
working and owned traffic falls back to the kernel (counted no_xsk); detaching, process exit and
SIGKILL leave no program, link or map behind; errors are one line.
"""

import json
import os
import select
import shutil
import signal
import subprocess
import time

import pytest

from testbed import Topology

PREFIX = "sls"
OUTCOMES = ("redirected", "passed", "malformed", "no_xsk", "multibuf", "parked_syn_dropped")

TCP_SERVER = r"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(1)
print("listening", flush=True)
c, _ = s.accept()
data = b""
while True:
    chunk = c.recv(65536)
    if not chunk:
        break
    data += chunk
c.sendall(data)
c.close()
"""

TCP_CLIENT = r"""
import socket, sys, time
addr, port, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
payload = bytes((i * 7) & 0xff for i in range(size))
deadline = time.time() + 10
while True:
    try:
        s = socket.create_connection((addr, port), timeout=10)
        break
    except OSError:
        if time.time() > deadline:
            raise
        time.sleep(0.1)
s.sendall(payload)
s.shutdown(socket.SHUT_WR)
back = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    back += chunk
assert back == payload, (len(back), len(payload))
print("echoed", len(back))
"""

UDP_SEND = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(int(sys.argv[3])):
    s.sendto(b"slipstream" * 10, (sys.argv[1], int(sys.argv[2])))
"""


@pytest.fixture
def steer_ctl(build_dir):
    p = build_dir / "tests" / "prog" / "steer_ctl"
    if not (p.is_file() and os.access(p, os.X_OK)):
        pytest.skip(f"not built: {p} is missing")
    return p


@pytest.fixture
def bpftool():
    tool = shutil.which("bpftool") or ("/usr/sbin/bpftool" if os.path.exists("/usr/sbin/bpftool") else None)
    if tool is None:
        pytest.skip("needs bpftool to inspect BPF objects")
    return tool


def bpf_json(bpftool, *args):
    """`bpftool -j ARGS` parsed, or None when the object does not exist. BPF objects are global,
    so this runs in the root namespace (read only)."""
    r = subprocess.run([bpftool, "-j", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        return None
    return json.loads(r.stdout) if r.stdout.strip() else None


def xdp_info(host):
    """(ifindex, xdp attachment dict or None) of the host's veth0."""
    out = host.run(["ip", "-j", "-d", "link", "show", host.ifname], check=True, timeout=10).stdout
    link = json.loads(out)[0]
    return link["ifindex"], link.get("xdp")


def start(host, steer_ctl, *args):
    """Starts steer_ctl on the host's veth0 and waits for its "attached" line."""
    p = host.popen([steer_ctl, "--iface", host.ifname, *args], stdin=subprocess.PIPE,
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready, _, _ = select.select([p.stdout], [], [], 15)
    line = p.stdout.readline() if ready else ""
    if not line.startswith("attached "):
        p.kill()
        out, err = p.communicate(timeout=10)
        pytest.fail(f"steer_ctl did not attach: stdout={line + out!r} stderr={err!r}")
    fields = dict(kv.split("=") for kv in line.split()[1:])
    return p, int(fields["ifindex"]), int(fields["native"])


def stop(p):
    """SIGTERM, then the counters steer_ctl prints on the way out."""
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=15)
    assert p.returncode == 0, f"steer_ctl exited {p.returncode}: {err}"
    counters = {}
    for line in out.splitlines():
        name, _, value = line.partition("=")
        counters[name] = int(value)
    return counters, err


def objects_of(bpftool, prog_id):
    """The program, its maps and its links as {"prog": id, "maps": {id: name}, "links": [ids]}."""
    prog = bpf_json(bpftool, "prog", "show", "id", str(prog_id))
    assert prog is not None, f"program {prog_id} not found"
    maps = {}
    for mid in prog.get("map_ids", []):
        m = bpf_json(bpftool, "map", "show", "id", str(mid))
        assert m is not None
        maps[mid] = m.get("name", "")
    links = [lk["id"] for lk in (bpf_json(bpftool, "link", "show") or []) if lk.get("prog_id") == prog_id]
    return {"prog": prog_id, "name": prog.get("name", ""), "maps": maps, "links": links}


def slip_named(bpftool):
    """Ids of every program/map named after the steering program (slip_...) right now."""
    progs = {p["id"] for p in bpf_json(bpftool, "prog", "show") or [] if p.get("name", "").startswith("slip_")}
    maps = {m["id"] for m in bpf_json(bpftool, "map", "show") or [] if m.get("name", "").startswith("slip_")}
    return progs, maps


def wait_gone(bpftool, objs, host, timeout=10.0):
    """Waits until the interface has no XDP program and none of objs exists (freeing is deferred
    to RCU/work queues, so it can lag the process exit a little)."""
    deadline = time.time() + timeout
    while True:
        left = []
        if xdp_info(host)[1]:
            left.append("xdp on the interface")
        if bpf_json(bpftool, "prog", "show", "id", str(objs["prog"])) is not None:
            left.append(f"prog {objs['prog']}")
        left += [f"map {mid}" for mid in objs["maps"] if bpf_json(bpftool, "map", "show", "id", str(mid))]
        left += [f"link {lid}" for lid in objs["links"] if bpf_json(bpftool, "link", "show", "id", str(lid))]
        if not left or time.time() > deadline:
            return left
        time.sleep(0.2)


def test_steer_attach_traffic_detach(make_testbed, steer_ctl, bpftool):
    tb = make_testbed(Topology(), prefix=PREFIX)
    a, b = tb.host("a"), tb.host("b")
    before_progs, before_maps = slip_named(bpftool)

    p, ifindex, native = start(b, steer_ctl, "--udp", "9000", "--tcp", "9001")
    real_ifindex, xdp = xdp_info(b)
    assert ifindex == real_ifindex
    assert native == 1, "veth has native XDP: auto mode should have used it"
    assert xdp is not None and xdp["prog"]["name"] == "slip_steer"
    objs = objects_of(bpftool, xdp["prog"]["id"])
    assert objs["name"] == "slip_steer"
    assert sorted(objs["maps"].values()) == ["slip_counters", "slip_frags", "slip_frags6", "slip_owned",
                                             "slip_owned6", "slip_pins", "slip_pins6", "slip_xsks"]
    assert len(objs["links"]) == 1, "attached through a bpf_link"
    assert "xdp" in b.run(["ip", "link", "show", "veth0"], check=True).stdout

    # Kernel traffic is untouched: ICMP echo, ARP and a TCP exchange of a few hundred KB.
    r = a.run(["ping", "-n", "-c", "3", "-i", "0.2", "-W", "2", b.addr], timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    server = b.popen(["python3", "-c", TCP_SERVER, "8080"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     text=True)
    r = a.run(["python3", "-c", TCP_CLIENT, b.addr, "8080", str(300 * 1024)], timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "echoed 307200" in r.stdout
    server.wait(timeout=10)
    assert server.returncode == 0, server.stderr.read()

    # Owned UDP with no AF_XDP socket falls back to the kernel and is counted; other UDP passes.
    a.run(["python3", "-c", UDP_SEND, b.addr, "9000", "5"], check=True, timeout=30)
    a.run(["python3", "-c", UDP_SEND, b.addr, "9002", "3"], check=True, timeout=30)

    counters, err = stop(p)
    assert set(counters) == {"rx", "redirected", "passed", "malformed", "no_xsk", "frag", "icmp_err",
                             "multibuf", "parked_syn_dropped"}, counters
    assert counters["parked_syn_dropped"] == 0, counters
    assert counters["no_xsk"] == 5, counters
    assert counters["redirected"] == 0, counters
    assert counters["malformed"] == 0, counters
    assert counters["multibuf"] == 0, counters
    # 3 echo requests, ~200 TCP segments, 3 datagrams to 9002, ARP: all passed to the kernel.
    assert counters["passed"] >= 3 + 3 + 20, counters
    assert counters["rx"] == sum(counters[k] for k in OUTCOMES), counters

    left = wait_gone(bpftool, objs, b)
    assert not left, f"left behind after steer_ctl exited: {left}"
    assert "xdp" not in b.run(["ip", "link", "show", "veth0"], check=True).stdout
    after_progs, after_maps = slip_named(bpftool)
    # Others may load their own slip_ objects meanwhile; none of ours may survive.
    assert objs["prog"] not in after_progs and objs["prog"] not in before_progs
    assert not (set(objs["maps"]) & (after_maps | before_maps))


def test_steer_generic_mode(make_testbed, steer_ctl, bpftool):
    tb = make_testbed(Topology(), prefix=PREFIX)
    a, b = tb.host("a"), tb.host("b")
    p, _, native = start(b, steer_ctl, "--mode", "generic", "--udp", "9000")
    assert native == 0
    _, xdp = xdp_info(b)
    assert xdp is not None
    assert "xdpgeneric" in b.run(["ip", "link", "show", "veth0"], check=True).stdout
    objs = objects_of(bpftool, xdp["prog"]["id"])
    r = a.run(["ping", "-n", "-c", "2", "-i", "0.2", "-W", "2", b.addr], timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    a.run(["python3", "-c", UDP_SEND, b.addr, "9000", "4"], check=True, timeout=30)
    counters, _ = stop(p)
    assert counters["no_xsk"] == 4, counters
    assert counters["passed"] >= 2, counters
    assert not wait_gone(bpftool, objs, b)


def test_steer_stdin_eof_detaches(make_testbed, steer_ctl, bpftool):
    tb = make_testbed(Topology(), prefix=PREFIX)
    b = tb.host("b")
    p, _, _ = start(b, steer_ctl, "--tcp", "9001")
    objs = objects_of(bpftool, xdp_info(b)[1]["prog"]["id"])
    # communicate() writes nothing and closes stdin: steer_ctl sees EOF.
    out, err = p.communicate(input="", timeout=15)
    assert p.returncode == 0, err
    assert "rx=" in out
    assert not wait_gone(bpftool, objs, b)


def test_steer_nonexistent_interface(make_testbed, steer_ctl):
    tb = make_testbed(Topology(), prefix=PREFIX)
    b = tb.host("b")
    r = b.run([steer_ctl, "--iface", "nosuch0", "--udp", "9000"], timeout=30)
    assert r.returncode == 1
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "'nosuch0'" in lines[0] and "does not exist" in lines[0]


def test_steer_second_attach_is_refused(make_testbed, steer_ctl, bpftool):
    tb = make_testbed(Topology(), prefix=PREFIX)
    b = tb.host("b")
    p, _, _ = start(b, steer_ctl, "--udp", "9000")
    prog_id = xdp_info(b)[1]["prog"]["id"]
    for mode in ("auto", "native", "generic"):
        r = b.run([steer_ctl, "--iface", "veth0", "--mode", mode], timeout=30)
        assert r.returncode == 1, (mode, r.stdout)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, (mode, r.stderr)
        assert "already attached" in lines[0], (mode, r.stderr)
        assert f"id {prog_id}" in lines[0], (mode, r.stderr)
    # The first attachment is unharmed.
    assert xdp_info(b)[1]["prog"]["id"] == prog_id
    stop(p)


def test_steer_sigkill_detaches(make_testbed, steer_ctl, bpftool):
    tb = make_testbed(Topology(), prefix=PREFIX)
    a, b = tb.host("a"), tb.host("b")
    p, _, _ = start(b, steer_ctl, "--udp", "9000", "--tcp", "9001")
    objs = objects_of(bpftool, xdp_info(b)[1]["prog"]["id"])
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=10)
    assert p.returncode == -signal.SIGKILL
    left = wait_gone(bpftool, objs, b)
    assert not left, f"left behind after SIGKILL: {left}"
    r = a.run(["ping", "-n", "-c", "1", "-W", "2", b.addr], timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
