"""Proves the loss infrastructure the TCP system tests stand on, with kernel TCP at both ends
(the stack is not involved): a router namespace between a and b, tests/prog/tc_loss dropping at
the ingress of its ports (Testbed.router_loss), and the bulk peer tests/system/peers/tcp_bulk.py.
Checks that transfers stay intact, that the drop counters match the requested rate within
binomial bounds, that the sender really retransmits, and that tiny receive buffers cause zero
windows without stalling.
"""

import json
import math
import pathlib
import subprocess
import sys

import pytest

from testbed import Topology

HERE = pathlib.Path(__file__).resolve().parent
BULK = HERE / "peers" / "tcp_bulk.py"
PORT = 5001
MiB = 1 << 20


@pytest.fixture
def router_tb(make_testbed, build_dir):
    exe = build_dir / "tests" / "prog" / "tc_loss"
    if not exe.is_file():
        pytest.skip(f"not built: {exe} (ninja -C {build_dir} tests/prog/tc_loss)")
    tb = make_testbed(Topology(router=True))
    tb.build_dir = build_dir
    return tb


def nstat(host):
    """Absolute TCP counters of the host's namespace (fresh per test, so absolute = this test)."""
    out = host.run(["nstat", "-asz"], check=True, timeout=10).stdout
    vals = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1].isdigit():
            vals[parts[0]] = int(parts[1])
    return vals


def parse_json(out, who):
    lines = [l for l in (out or "").splitlines() if l.startswith("{")]
    assert lines, f"{who} printed no JSON line: {out!r}"
    return json.loads(lines[-1])


def transfer(tb, nbytes, seed, recv_args=(), timeout=120):
    """a sends nbytes to b (b listens); returns (sender JSON, receiver JSON)."""
    a, b = tb.host("a"), tb.host("b")
    recv_cmd = [sys.executable, BULK, "recv", str(PORT), str(nbytes), "--seed", str(seed)]
    recv_cmd += list(recv_args)
    rp = b.popen(recv_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        sr = a.run([sys.executable, BULK, "send", b.addr, str(PORT), str(nbytes),
                    "--seed", str(seed)], timeout=timeout)
        rout, rerr = rp.communicate(timeout=30)
    finally:
        if rp.poll() is None:
            rp.kill()
            rp.communicate()
    snd = parse_json(sr.stdout, f"sender (rc={sr.returncode}, stderr={sr.stderr[-400:]!r})")
    rcv = parse_json(rout, f"receiver (rc={rp.returncode}, stderr={rerr[-400:]!r})")
    return snd, rcv


def check_intact(snd, rcv, nbytes):
    assert snd["ok"], f"sender failed: {snd}"
    assert rcv["ok"], f"receiver failed: {rcv}"
    assert rcv["first_diff"] is None
    assert snd["bytes"] == rcv["bytes"] == nbytes
    assert snd["sha256"] == rcv["sha256"]


def check_binomial(name, c, p, sigmas=4.0):
    """dropped given n candidates is Binomial(n, p) when every packet is an independent draw."""
    n = c["passed"] + c["dropped"]
    mean = n * p
    sd = math.sqrt(n * p * (1 - p))
    print(f"  {name}: candidates={n} dropped={c['dropped']} rate={c['rate'] * 100:.3f}% "
          f"(asked {p * 100:g}%, {sigmas:g} sigma = +-{sigmas * sd:.1f} packets) "
          f"skipped={c['skipped']} gso={c['gso']}")
    assert n > 0, f"{name}: no packet went through the loss program"
    assert c["dropped"] > 0, f"{name}: nothing dropped at {p * 100:g}%"
    assert abs(c["dropped"] - mean) <= sigmas * sd + 1, \
        f"{name}: dropped {c['dropped']} of {n}, expected {mean:.0f} +- {sigmas * sd:.0f}"
    # A multi-segment skb dropped at once would be a burst loss no wire produces.
    assert c["gso"] == 0, f"{name}: {c['gso']} GSO packets reached the router"


def test_clean_transfer(router_tb):
    n = 200 * MiB
    snd, rcv = transfer(router_tb, n, seed=11)
    check_intact(snd, rcv, n)
    st = nstat(router_tb.host("a"))
    # Not asserted zero: the veth path reorders a little on 2 CPUs (per-CPU backlogs), which
    # Linux answers with some fast retransmits even without loss (TcpExtTCPSACKReorder).
    print(f"\nclean: {n} bytes in {rcv['seconds']} s = {rcv['mbytes_per_s']} MB/s; sender "
          f"retrans={st.get('TcpRetransSegs', 0)} reorder={st.get('TcpExtTCPSACKReorder', 0)}")


@pytest.mark.parametrize("percent", [1, 5])
def test_loss_each_way(router_tb, percent):
    tb = router_tb
    n = 50 * MiB
    tb.router_loss(percent, only_l4=True, build_dir=tb.build_dir)
    try:
        snd, rcv = transfer(tb, n, seed=percent)
    finally:
        stats = tb.router_loss_stats()
    st = nstat(tb.host("a"))
    print(f"\n{percent}% each way: {n} bytes in {rcv['seconds']} s = {rcv['mbytes_per_s']} MB/s; "
          f"sender TcpRetransSegs={st.get('TcpRetransSegs', 0)} "
          f"TCPLostRetransmit={st.get('TcpExtTCPLostRetransmit', 0)} "
          f"TCPTimeouts={st.get('TcpExtTCPTimeouts', 0)}")
    check_intact(snd, rcv, n)
    check_binomial("a->b (data)", stats["a"], percent / 100)
    check_binomial("b->a (acks)", stats["b"], percent / 100)
    assert stats["a"]["passed"] >= n // 1500, "fewer data packets than the transfer needs"
    assert st.get("TcpRetransSegs", 0) > 0, \
        f"no retransmission at {percent}% loss: {pick(st, 'TcpRetransSegs', 'TcpOutSegs')}"


def test_loss_rate_changes_and_only_l4(router_tb):
    """100% loss for TCP/UDP leaves ping working and blocks TCP; setting 0 at run time lets TCP
    through again without re-attaching."""
    tb = router_tb
    a, b = tb.host("a"), tb.host("b")
    tb.router_loss(100, only_l4=True, build_dir=tb.build_dir)
    try:
        ping = a.run(["ping", "-c", "3", "-i", "0.05", "-W", "1", b.addr], timeout=15)
        assert ping.returncode == 0, f"ICMP must pass with only_l4: {ping.stdout}"
        blocked = a.run([sys.executable, "-c",
                         "import socket,sys\n"
                         "s=socket.socket(); s.settimeout(1.5)\n"
                         "try:\n s.connect((sys.argv[1], 9))\nexcept socket.timeout:\n print('timeout')\n"
                         "except OSError as e:\n print('error', e)\nelse:\n print('connected')\n",
                         b.addr], timeout=15)
        assert blocked.stdout.strip() == "timeout", blocked.stdout + blocked.stderr
        tb.router_loss(0)  # in place: same programs, new rate
        n = 4 * MiB
        snd, rcv = transfer(tb, n, seed=4, timeout=60)
        check_intact(snd, rcv, n)
    finally:
        stats = tb.router_loss_stats()
    print(f"\nrate change: a->b {stats['a']}, b->a {stats['b']}")
    assert stats["a"]["dropped"] >= 1 and stats["a"]["skipped"] >= 3
    assert stats["a"]["passed"] >= n // 1500


def pick(st, *names):
    return {k: st.get(k, 0) for k in names}


def test_tiny_receive_buffer(router_tb):
    """A 4 KiB SO_RCVBUF and a reader that stops for 300 ms after every 4 MiB: the window closes
    (a fast reader alone keeps it open here), and the pauses outlast the sender's RTO, so the
    persist timer probes the zero window too."""
    tb = router_tb
    n = 20 * MiB
    snd, rcv = transfer(tb, n, seed=7, timeout=150,
                        recv_args=["--rcvbuf", "4096", "--pause-ms", "300", "--pause-every", "4M"])
    check_intact(snd, rcv, n)
    sa, sb = nstat(tb.host("a")), nstat(tb.host("b"))
    to_zero = sb.get("TcpExtTCPToZeroWindowAdv", 0)
    from_zero = sb.get("TcpExtTCPFromZeroWindowAdv", 0)
    probes = sa.get("TcpExtTCPWinProbe", 0)
    print(f"\nrcvbuf 4096: {n} bytes in {rcv['seconds']} s = {rcv['mbytes_per_s']} MB/s; receiver "
          f"ToZeroWindowAdv={to_zero} FromZeroWindowAdv={from_zero} "
          f"WantZeroWindowAdv={sb.get('TcpExtTCPWantZeroWindowAdv', 0)}; sender WinProbe={probes}")
    assert to_zero > 0 and from_zero > 0, \
        f"no zero window with a 4 KiB receive buffer and a slow reader: " \
        f"{pick(sb, 'TcpExtTCPToZeroWindowAdv', 'TcpExtTCPFromZeroWindowAdv', 'TcpExtTCPWantZeroWindowAdv')}"
