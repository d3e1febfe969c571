"""System tests of the raw AF_XDP port through `slipstream bench xsk` on a two-host veth testbed:
txonly in a feeds rxdrop or l2fwd in b; zero-copy on veth is refused with one clear line; bad
input fails with the documented exit codes; no XDP program outlives the benchmark.
Counts are compared, never speeds (benchmarks are not tests).
"""

import json
import re
import select
import subprocess
import time

import pytest

from testbed import Topology

PREFIX = "slx"
RESULT_RE = re.compile(r"^result mode=(\w+) seconds=([\d.]+) rx_pkts=(\d+) tx_pkts=(\d+) "
                       r"rx_mpps=([\d.]+) tx_mpps=([\d.]+)$", re.M)


def bench(slip_bin, *args):
    return [str(slip_bin("slipstream")), "bench", "xsk", *args]


def parse_result(out):
    m = RESULT_RE.search(out)
    assert m, f"no result line in:\n{out}"
    return {"mode": m.group(1), "seconds": float(m.group(2)), "rx": int(m.group(3)),
            "tx": int(m.group(4))}


def skip_if_unsupported(stderr):
    if "CONFIG_XDP_SOCKETS" in stderr:
        pytest.skip("kernel without AF_XDP sockets: " + stderr.strip())


def start_ready(host, cmd, timeout=15):
    """Starts cmd in host and waits for its `bench xsk ...` header line (socket bound, program
    attached). Returns (popen, header)."""
    p = host.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 0.2)
        if r:
            line = p.stdout.readline()
            if line.startswith("bench xsk "):
                return p, line
            if not line:
                break
        if p.poll() is not None:
            break
    out, err = p.communicate(timeout=10) if p.poll() is not None else ("", "")
    skip_if_unsupported(err)
    p.kill()
    pytest.fail(f"bench did not come up (rc={p.returncode}):\n{out}\n{err}")


def finish(p, timeout=30):
    out, err = p.communicate(timeout=timeout)
    skip_if_unsupported(err)
    assert p.returncode == 0, f"rc={p.returncode}\n{out}\n{err}"
    return out


def rx_packets(host):
    r = host.run(["ip", "-s", "-j", "link", "show", host.ifname], check=True, timeout=10)
    return int(json.loads(r.stdout)[0]["stats64"]["rx"]["packets"])


def kernel_counters(host):
    out = host.run(["nstat", "-asz"], check=True, timeout=10).stdout
    vals = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 2 and f[1].isdigit():
            vals[f[0]] = int(f[1])
    return {k: vals.get(k, 0) for k in ("IpInHdrErrors", "UdpInCsumErrors", "UdpNoPorts", "IpInReceives")}


def assert_no_xdp(host):
    out = host.run(["ip", "-d", "link", "show", host.ifname], check=True, timeout=10).stdout
    assert not re.search(r"prog/xdp|\bxdp(generic|drv|offload)?\b", out), \
        f"an XDP program is still attached to {host.ns}/{host.ifname}:\n{out}"


@pytest.fixture
def hosts(make_testbed):
    tb = make_testbed(Topology(), prefix=PREFIX)
    return tb.host("a"), tb.host("b")


def test_txonly_to_rxdrop(hosts, slip_bin):
    a, b = hosts
    rx, header = start_ready(b, bench(slip_bin, "--iface", b.ifname, "--mode", "rxdrop", "--seconds", "4"))
    assert "mode=rxdrop" in header and "bind=copy" in header
    tx = a.run(bench(slip_bin, "--iface", a.ifname, "--mode", "txonly", "--seconds", "3",
                     "--dst-mac", b.mac), timeout=60)
    skip_if_unsupported(tx.stderr)
    assert tx.returncode == 0, tx.stderr
    sent = parse_result(tx.stdout)
    rx_out = finish(rx)
    got = parse_result(rx_out)
    assert sent["mode"] == "txonly" and got["mode"] == "rxdrop"
    assert sent["tx"] > 0
    assert got["rx"] > 0
    # b can only have seen what a queued (plus nothing else: IPv6 is off in the testbed).
    assert got["rx"] <= sent["tx"]
    assert re.search(r"^xdp_stats rx_dropped=\d+ rx_invalid_descs=0 ", rx_out, re.M), rx_out
    for h in (a, b):
        assert_no_xdp(h)


def test_txonly_prints_stats_lines(hosts, slip_bin):
    a, b = hosts
    r = a.run(bench(slip_bin, "--iface", a.ifname, "--mode", "txonly", "--seconds", "1.5",
                    "--dst-mac", b.mac, "--size", "128"), timeout=60)
    skip_if_unsupported(r.stderr)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^rx pps=\d+ tx pps=\d+$", r.stdout, re.M), r.stdout
    assert re.search(r"^xdp_stats rx_dropped=\d+ rx_invalid_descs=\d+ tx_invalid_descs=0 ", r.stdout, re.M)
    res = parse_result(r.stdout)
    assert res["tx"] > 0 and res["rx"] == 0
    # The frames reached b's kernel (no XDP there) as valid datagrams: no header or checksum
    # error, and each ended as "no socket on port 9".
    assert rx_packets(b) > 0
    snmp = kernel_counters(b)
    assert snmp["IpInHdrErrors"] == 0 and snmp["UdpInCsumErrors"] == 0, snmp
    assert snmp["UdpNoPorts"] > 0, snmp


def test_l2fwd_sends_back(hosts, slip_bin):
    a, b = hosts
    before = rx_packets(a)
    fw, header = start_ready(b, bench(slip_bin, "--iface", b.ifname, "--mode", "l2fwd", "--seconds", "4"))
    assert "mode=l2fwd" in header
    tx = a.run(bench(slip_bin, "--iface", a.ifname, "--mode", "txonly", "--seconds", "3",
                     "--dst-mac", b.mac), timeout=60)
    assert tx.returncode == 0, tx.stderr
    res = parse_result(finish(fw))
    after = rx_packets(a)
    assert res["rx"] > 0 and res["tx"] > 0
    assert res["tx"] <= res["rx"]
    # What b forwarded arrived at a's veth0.
    assert after - before > 0
    assert after - before <= res["tx"] + 100
    assert_no_xdp(b)


def test_zerocopy_on_veth_is_refused(hosts, slip_bin):
    _, b = hosts
    r = b.run(bench(slip_bin, "--iface", b.ifname, "--mode", "rxdrop", "--bind", "zerocopy",
                    "--seconds", "1"), timeout=30)
    skip_if_unsupported(r.stderr)
    assert r.returncode == 1, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "zero-copy refused by veth0 (driver veth)" in lines[0]
    assert "--bind copy or auto" in lines[0]
    assert_no_xdp(b)


def test_missing_interface_one_line(hosts, slip_bin):
    _, b = hosts
    r = b.run(bench(slip_bin, "--iface", "nosuch0", "--mode", "rxdrop"), timeout=30)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "nosuch0" in lines[0] and "does not exist" in lines[0], r.stderr


def test_missing_queue_says_how_many(hosts, slip_bin):
    _, b = hosts
    r = b.run(bench(slip_bin, "--iface", b.ifname, "--mode", "rxdrop", "--queue", "5"), timeout=30)
    assert r.returncode == 1
    assert "queue 5 does not exist on veth0 (it has 1 rx queue)" in r.stderr, r.stderr
    assert_no_xdp(b)


def test_unknown_option_exit_2(hosts, slip_bin):
    _, b = hosts
    r = b.run(bench(slip_bin, "--iface", b.ifname, "--mode", "rxdrop", "--frobnicate"), timeout=30)
    assert r.returncode == 2
    assert "--frobnicate" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_address_outside_benchmark_range_refused(hosts, slip_bin):
    a, _ = hosts
    r = a.run(bench(slip_bin, "--iface", a.ifname, "--mode", "txonly", "--dst-ip", "10.0.0.1"), timeout=30)
    assert r.returncode == 2
    assert "198.18.0.0/15" in r.stderr


def test_sigterm_stops_cleanly(hosts, slip_bin):
    _, b = hosts
    p, _ = start_ready(b, bench(slip_bin, "--iface", b.ifname, "--mode", "rxdrop", "--seconds", "60"))
    time.sleep(0.5)
    p.terminate()
    out = finish(p, timeout=15)
    assert parse_result(out)["seconds"] < 30
    assert_no_xdp(b)
