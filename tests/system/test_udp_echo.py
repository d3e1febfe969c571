"""The stack's UDP path end to end: a kernel client in host a against the udp_echo program (the
stack, through its internal API) in host b, with the kernel's own traffic on the same interface
at the same time; malformed frames; bad input; and teardown that leaves nothing behind."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from testbed import Topology

PEERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers")
PY = sys.executable


class Echo:
    """udp_echo running in a host; stop() returns its counters as a dict."""

    def __init__(self, host, exe, args=(), env=None):
        e = dict(os.environ)
        e.update(env or {})
        self.p = host.popen([str(exe), "--iface", host.ifname, "--counters", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
        line = self.p.stdout.readline()
        if not line.startswith("ready"):
            err = self.p.stderr.read() if self.p.poll() is not None else ""
            pytest.fail(f"udp_echo did not start: {line!r} {err!r}")
        self.port = int(line.split("=")[1])

    def stop(self, sig=signal.SIGTERM):
        self.p.send_signal(sig)
        out, err = self.p.communicate(timeout=30)
        self.stderr = err
        self.rc = self.p.returncode
        c = {}
        for line in out.splitlines():
            m = re.match(r"^(\S+) (\d+)$", line)
            if m:
                c[m.group(1)] = int(m.group(2))
        return c


def client(host, port, count, lo, hi, window=32, timeout=900):
    r = host.run([PY, os.path.join(PEERS, "udp_client.py"), "198.18.0.2", str(port), str(count), str(lo), str(hi),
                  str(window)], timeout=timeout)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture
def echo_exe(build_dir):
    exe = build_dir / "tests" / "prog" / "udp_echo"
    if not exe.exists():
        pytest.skip(f"not built: {exe}")
    return exe


def test_udp_echo_100k_random_sizes_while_kernel_traffic_flows(testbed, echo_exe):
    a, b = testbed.host("a"), testbed.host("b")
    echo = Echo(b, echo_exe, ["--port", "7"])
    server = b.popen([PY, os.path.join(PEERS, "tcp_exchange.py"), "server", "8080"], stdout=subprocess.PIPE, text=True)
    assert server.stdout.readline().strip() == "listening"
    ping = a.popen(["ping", "-c", "20", "-i", "0.2", "198.18.0.2"], stdout=subprocess.PIPE, text=True)
    tcp = a.popen([PY, os.path.join(PEERS, "tcp_exchange.py"), "client", "198.18.0.2", "8080", "200"],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    res = client(a, echo.port, 100_000, 1, 1472)

    ping_out, _ = ping.communicate(timeout=60)
    tcp_out, tcp_err = tcp.communicate(timeout=120)
    c = echo.stop()
    print("client", res)
    print("counters", {k: v for k, v in c.items() if v})
    assert res["bad"] == 0 and res["missing"] == 0 and res["ok"] == 100_000, res
    # Datagrams lost on a veth would mean a bug (ring overflow, lost frame): allow almost none.
    assert res["resent"] <= 100, res
    assert ping.returncode == 0 and " 0% packet loss" in ping_out, ping_out
    assert tcp.returncode == 0 and "tcp ok 200" in tcp_out, tcp_err
    assert c["udp.rx_datagrams"] >= 100_000
    assert c["udp.tx_datagrams"] >= 100_000
    # The kernel's traffic was passed, ours redirected.
    assert c["steer.veth0.passed"] > 0
    assert c["steer.veth0.redirected"] >= 100_000
    assert c["steer.veth0.malformed"] == 0
    # Every frame is back in the pool or in a ring: nothing leaked.
    assert c["pool.free"] + c["pool.fill_posted"] == c["pool.frames"] and c["pool.fill_posted"] >= 1536, c
    assert echo.rc == 0


def test_udp_echo_fragmented_datagrams(testbed, echo_exe):
    a, b = testbed.host("a"), testbed.host("b")
    echo = Echo(b, echo_exe, ["--port", "7"])
    res = client(a, echo.port, 1000, 1473, 65507, window=8)
    c = echo.stop()
    print(res, {k: v for k, v in c.items() if v})
    assert res["bad"] == 0 and res["missing"] == 0 and res["ok"] == 1000, res
    assert c["ip.reass_ok"] >= 1000
    assert c["ip.tx_frags"] > 1000
    assert c["steer.veth0.frag"] > 0
    assert c["ip.reass_bufs"] == 0
    assert c["pool.free"] + c["pool.fill_posted"] == c["pool.frames"] and c["pool.fill_posted"] >= 1536, c


def test_udp_echo_under_asan(testbed):
    san = os.environ.get("SLIP_BUILD_SAN")
    exe = os.path.join(san or "", "tests", "prog", "udp_echo")
    if not san or not os.path.exists(exe):
        pytest.skip("no ASan build (SLIP_BUILD_SAN): run make test")
    a, b = testbed.host("a"), testbed.host("b")
    echo = Echo(b, exe, ["--port", "7"], env={"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1",
                                              "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"})
    res = client(a, echo.port, 5000, 1, 9000, window=16)
    c = echo.stop()
    assert res["bad"] == 0 and res["missing"] == 0, res
    assert echo.rc == 0, echo.stderr
    assert "ERROR: AddressSanitizer" not in echo.stderr and "runtime error" not in echo.stderr, echo.stderr
    assert c["udp.rx_datagrams"] >= 5000


def test_neighbour_resolved_by_the_kernel(testbed, echo_exe):
    """b's kernel forgets a; the stack's reply waits while the kernel ARPs, then leaves."""
    a, b = testbed.host("a"), testbed.host("b")
    echo = Echo(b, echo_exe, ["--port", "7"])
    assert client(a, echo.port, 5, 10, 100, window=1)["ok"] == 5     # now a knows b's MAC
    b.run(["ip", "neigh", "flush", "dev", "veth0"], check=True)
    assert a.mac.lower() not in b.run(["ip", "neigh", "show", "dev", "veth0"], check=True).stdout.lower()
    res = client(a, echo.port, 50, 10, 100, window=1)
    c = echo.stop()
    assert res["ok"] == 50 and res["bad"] == 0, res
    assert c["ip.neigh_wait"] >= 1 and c["ip.neigh_resolved"] >= 1, c
    out = b.run(["ip", "neigh", "show", "dev", "veth0"], check=True).stdout
    assert a.mac.lower() in out.lower(), out


def test_multiqueue_one_socket_per_queue(make_testbed, echo_exe):
    tb = make_testbed(Topology(queues=2))
    a, b = tb.host("a"), tb.host("b")
    echo = Echo(b, echo_exe, ["--port", "7"])
    results = [client(a, echo.port, 2000, 1, 1472) for _ in range(4)]
    c = echo.stop()
    assert all(r["ok"] == 2000 and r["bad"] == 0 for r in results), results
    assert "xsk.veth0.q0.rx_packets" in c and "xsk.veth0.q1.rx_packets" in c, c


CRAFT = r"""
import socket, struct, sys
iface, dmac, smac, src, dst, port = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
mac = lambda m: bytes(int(x, 16) for x in m.split(":"))
def csum(b):
    if len(b) % 2: b += b"\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16: t = (t & 0xffff) + (t >> 16)
    return ~t & 0xffff
def ip(payload, proto=17, ident=1, frag=0, opts=b"", bad_csum=False, tot=None):
    ihl = 5 + len(opts) // 4
    h = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, tot or 4 * ihl + len(payload), ident, frag, 64, proto, 0,
                    socket.inet_aton(src), socket.inet_aton(dst)) + opts
    c = csum(h) ^ (0x5555 if bad_csum else 0)
    return h[:10] + struct.pack("!H", c) + h[12:] + payload
def udp(data, length=None, bad_csum=False, sport=40000):
    l = length if length is not None else 8 + len(data)
    ph = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 17, 8 + len(data))
    c = csum(ph + struct.pack("!HHHH", sport, port, l, 0) + data) or 0xffff
    return struct.pack("!HHHH", sport, port, l, c ^ (0x0f0f if bad_csum else 0)) + data
eth = lambda p: mac(dmac) + mac(smac) + b"\x08\x00" + p
frames = {
  "ip_bad_csum": eth(ip(udp(b"x" * 20), bad_csum=True)),
  "udp_bad_csum": eth(ip(udp(b"x" * 20, bad_csum=True))),
  "udp_len_too_long": eth(ip(udp(b"x" * 20, length=200))),
  "udp_len_too_short": eth(ip(udp(b"x" * 20, length=4))),
  "ip_bad_option": eth(ip(udp(b"x" * 20), opts=b"\x07\x00\x00\x00")),
  "frag_overlap_a": eth(ip(udp(b"y" * 1000)[:1000], ident=77, frag=0x2000)),
  "frag_overlap_b": eth(ip(b"z" * 600, ident=77, frag=0x2000 | (992 // 8))),
  "frag_unaligned": eth(ip(udp(b"w" * 100)[:101], ident=78, frag=0x2000)),
}
for name, f in frames.items():
    s.send(f)
print("sent", len(frames))
"""


def test_malformed_frames_are_counted_and_nothing_breaks(testbed, echo_exe):
    a, b = testbed.host("a"), testbed.host("b")
    echo = Echo(b, echo_exe, ["--port", "7"])
    r = a.run([PY, "-c", CRAFT, "veth0", b.mac, a.mac, "198.18.0.1", "198.18.0.2", str(echo.port)], check=True)
    assert "sent 8" in r.stdout
    res = client(a, echo.port, 200, 1, 1472)
    c = echo.stop()
    print({k: v for k, v in c.items() if v})
    assert res["ok"] == 200 and res["bad"] == 0, res
    assert c["ip.rx_bad_csum"] == 1
    assert c["udp.rx_bad_csum"] == 1
    assert c["udp.rx_bad_len"] == 2
    assert c["ip.rx_bad_options"] == 1
    assert c["ip.reass_overlap"] == 1
    assert c["ip.frag_bad"] == 1
    assert c["ip.reass_bufs"] == 0
    assert echo.rc == 0


def _xdp_attached(host):
    return "xdp" in host.run(["ip", "link", "show", "veth0"], check=True).stdout


def _steer_prog_ids(host):
    r = host.run(["bpftool", "-j", "prog", "show"], check=True)
    return {p["id"] for p in json.loads(r.stdout or "[]") if p.get("name") == "slip_steer"}


def _attached_prog_id(host):
    link = json.loads(host.run(["ip", "-j", "-d", "link", "show", "veth0"], check=True).stdout)[0]
    return (link.get("xdp") or {}).get("prog", {}).get("id")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_teardown_leaves_no_program_link_or_map(testbed, echo_exe, sig):
    a, b = testbed.host("a"), testbed.host("b")
    echo = Echo(b, echo_exe, ["--port", "7"])
    # This run's program is the one on b's veth0: BPF programs are the whole machine's, and a
    # test elsewhere (another run, another worktree) may load its own slip_steer meanwhile (a
    # difference of bpftool's lists before and after counted 2 now and then).
    prog = _attached_prog_id(b)
    assert prog in _steer_prog_ids(b) and _xdp_attached(b), prog
    during = {prog}
    maps = set(json.loads(b.run(["bpftool", "-j", "prog", "show", "id", str(next(iter(during)))],
                                check=True).stdout).get("map_ids", []))
    assert client(a, echo.port, 10, 1, 100)["ok"] == 10
    echo.stop(sig)
    # The kernel frees programs and maps after an RCU grace period; bpftool lists the whole
    # machine's, so look for this run's program only (other tests may load their own meanwhile).
    deadline = time.monotonic() + 5
    while (during & _steer_prog_ids(b)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _xdp_attached(b)
    assert not (during & _steer_prog_ids(b)), during
    live_maps = {m["id"] for m in json.loads(b.run(["bpftool", "-j", "map", "show"], check=True).stdout or "[]")}
    assert not (maps & live_maps), maps & live_maps
    links = json.loads(b.run(["bpftool", "-j", "link", "show"], check=True).stdout or "[]")
    assert not [l for l in links if l.get("prog_id") in during]
    # The kernel's port reservation went away with the process too.
    b.run([PY, "-c", "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).bind(('0.0.0.0', 7))"],
          check=True)


def test_bad_input_gives_one_clear_line(testbed, echo_exe, nobody_bin):
    b = testbed.host("b")

    def run(args, env=None, pre=(), exe=echo_exe):
        e = dict(os.environ)
        e.update(env or {})
        r = b.run([*pre, str(exe), *args], env=e, timeout=30)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        return r.returncode, lines

    rc, lines = run(["--iface", "nosuch0"])
    assert rc == 1 and len(lines) == 1 and "nosuch0" in lines[0] and "does not exist" in lines[0], lines

    rc, lines = run(["--iface", "veth0", "--bogus"])
    assert rc == 2 and "--bogus" in lines[0], lines

    rc, lines = run(["--iface", "veth0"], env={"SLIP_RING_SIZE": "1000"})
    assert rc == 2 and len(lines) == 1 and "SLIP_RING_SIZE" in lines[0], lines

    # An interface without native XDP, when native mode is demanded.
    b.run(["ip", "link", "add", "mv0", "link", "veth0", "type", "macvlan", "mode", "bridge"], check=True)
    b.run(["ip", "link", "set", "mv0", "up"], check=True)
    rc, lines = run(["--iface", "mv0"], env={"SLIP_XDP_MODE": "native"})
    assert rc == 1 and len(lines) == 1 and "mv0" in lines[0] and "XDP" in lines[0], lines

    # Missing privileges.
    rc, lines = run(["--iface", "veth0"], pre=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                               "--inh-caps=-all", "--bounding-set=-all"],
                    exe=nobody_bin("tests/prog/udp_echo"))   # the checkout may be out of nobody's reach
    assert rc == 1 and len(lines) == 1 and "CAP_" in lines[0], lines


def test_fault_injector_drops_duplicates_and_reorders(testbed, echo_exe):
    """The stack's own receive impairments (used by the TCP tests) do what they say."""
    a, b = testbed.host("a"), testbed.host("b")
    echo = Echo(b, echo_exe, ["--port", "7"], env={"SLIP_FAULT_DROP": "5000", "SLIP_FAULT_DUP": "20000",
                                                    "SLIP_FAULT_REORDER": "50000", "SLIP_FAULT_SEED": "7"})
    res = client(a, echo.port, 2000, 4, 1000)
    c = echo.stop()
    print(res, {k: v for k, v in c.items() if k.startswith("fault.")})
    assert res["ok"] == 2000 and res["bad"] == 0 and res["missing"] == 0, res
    assert c["fault.dropped"] > 0 and c["fault.duplicated"] > 0 and c["fault.reordered"] > 0, c
    assert res["dup"] > 0 and res["resent"] > 0, res
    assert c["pool.free"] + c["pool.fill_posted"] == c["pool.frames"] and c["pool.fill_posted"] >= 1536, c
    rc = b.run([str(echo_exe), "--iface", "veth0"], env={**os.environ, "SLIP_FAULT_DUP": "2000000"}, timeout=30)
    assert rc.returncode == 1 and "SLIP_FAULT_DUP" in rc.stderr, rc.stderr
