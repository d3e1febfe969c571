"""The stack as a TCP sender on a lossy path against a kernel receiver (issue 15), through the
router namespace (tc BPF loss at its ingress, tests/prog/tc_loss):

- a lost tail segment is repaired by RACK-TLP (RFC 8985), not by a retransmission timeout: the
  router drops exactly the last data segment once (tc_loss "droplen"). tcp_tool closes right
  after the data, so the FIN usually follows the tail in its own segment and its SACK-less
  duplicate ACK lets RACK resend the tail (rack_lost); when the FIN rides on the tail, the loss
  probe does it (tlp_probes). Either way no timeout;
- 8 MiB at 5 % loss each way sent by the stack finishes within twice the time the kernel's
  sender needs for the same transfer in the same test. Both run CUBIC (SLIP_TCP_CC=cubic: the
  stack's default follows the namespace's net.ipv4.tcp_congestion_control): this machine's
  default is BBR, which does not treat random loss as congestion and is several times faster
  here (bench/loss.py shows both). Each side runs twice,
  alternating, and the sums are compared: one transfer at 5 % swings by 2-3x between runs, most
  of it in a few retransmission timeouts.
"""
import time

import pytest

from test_tcp import (BULK, PY, check_intact, json_of, nonzero, nstat, stack_to_kernel,
                      tool)  # noqa: F401 (tool is a fixture)

MiB = 1 << 20
MSS = 1448          # 1500 - 20 (IP) - 20 (TCP) - 12 (timestamps)


@pytest.fixture
def router_tb(make_testbed, build_dir):
    for exe in ("tc_loss", "tcp_tool"):
        if not (build_dir / "tests" / "prog" / exe).is_file():
            pytest.skip(f"not built: {exe} (ninja -C {build_dir} tests/prog/{exe})")
    from testbed import Topology
    tb = make_testbed(Topology(router=True))
    tb.build_dir = build_dir
    return tb


def kernel_to_kernel(a, b, nbytes, seed, port, cc="cubic"):
    """b (kernel tcp_bulk send, congestion control cc) -> a (kernel tcp_bulk recv)."""
    import subprocess
    rcv = a.popen([PY, BULK, "recv", str(port), str(nbytes), "--seed", str(seed)],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = rcv.stderr.readline()
    assert line.startswith("listening"), line + rcv.stderr.read()
    snd = b.run([PY, BULK, "send", a.addr, str(port), str(nbytes), "--seed", str(seed), "--cc", cc],
                timeout=300)
    rout, rerr = rcv.communicate(timeout=60)
    r = json_of(rout, f"tcp_bulk recv {rerr[-500:]!r}")
    s = json_of(snd.stdout, f"tcp_bulk send {snd.stderr[-500:]!r}")
    assert s["ok"] and r["ok"] and r["first_diff"] is None, (s, r)
    return r


def test_tail_loss_repaired_by_probe(router_tb, tool):
    tb = router_tb
    a, b = tb.host("a"), tb.host("b")
    n = 20 * MSS + 777          # the last segment carries 777 bytes: an IP packet of 829
    tb.router_loss(0, only_l4=True, build_dir=tb.build_dir)
    tb.router_drop_len("b", 20 + 32 + 777, 1)
    try:
        res = stack_to_kernel(a, b, tool, n, seed=51, timeout=60)
    finally:
        stats = tb.router_loss_stats()
    c = res["counters"]
    print(f"\ntail loss: router from b {stats['b']}; stack tcp {nonzero(c, 'tcp.')}")
    check_intact(res, n, "tail loss")
    assert stats["b"]["dropped"] == 1, f"the tail segment was not the one dropped: {stats['b']}"
    assert c.get("tcp.retransmits", 0) >= 1, f"the tail was not resent: {nonzero(c, 'tcp.')}"
    assert c.get("tcp.tlp_probes", 0) + c.get("tcp.rack_lost", 0) >= 1, \
        f"neither a loss probe nor RACK resent the tail: {nonzero(c, 'tcp.')}"
    assert c.get("tcp.rto_expiries", 0) == 0, f"the tail waited for the RTO: {nonzero(c, 'tcp.')}"


def test_5pct_loss_within_twice_kernel_time(router_tb, tool):
    tb = router_tb
    a, b = tb.host("a"), tb.host("b")
    n = 8 * MiB
    tb.router_loss(5, only_l4=True, build_dir=tb.build_dir)
    kt, st, rto_k, rto_s = [], [], 0, 0
    try:
        for i in range(2):
            k0 = nstat(b)
            t0 = time.monotonic()
            r = kernel_to_kernel(a, b, n, seed=60 + i, port=5301 + i)
            k1 = nstat(b)
            kt.append(r["seconds"])
            rto_k += k1.get("TcpExtTCPTimeouts", 0) - k0.get("TcpExtTCPTimeouts", 0)
            print(f"\nkernel CUBIC round {i}: {r['seconds']} s ({time.monotonic() - t0:.1f} s wall)")
            res = stack_to_kernel(a, b, tool, n, seed=70 + i, port=5311 + i, env={"SLIP_TCP_CC": "cubic"},
                                  timeout=300)
            check_intact(res, n, f"stack round {i}")
            st.append(res["receiver"]["seconds"])
            rto_s += res["counters"].get("tcp.rto_expiries", 0)
            print(f"stack round {i}: {res['receiver']['seconds']} s; "
                  f"{nonzero(res['counters'], 'tcp.r', 'tcp.t', 'tcp.f', 'tcp.s', 'tcp.u', 'tcp.d')}")
    finally:
        stats = tb.router_loss_stats()
    print(f"kernel {sum(kt):.2f} s ({rto_k} RTO), stack {sum(st):.2f} s ({rto_s} RTO); router {stats}")
    for k in ("a", "b"):
        assert 0.03 < stats[k]["rate"] < 0.07, stats[k]
    assert sum(st) <= 2 * sum(kt), \
        f"the stack took {sum(st):.2f} s for 2 x 8 MiB at 5 % loss, the kernel {sum(kt):.2f} s"


def test_bbr_sender_under_loss_within_twice_kernel_bbr(router_tb, tool):
    """SLIP_TCP_CC=bbr (src/tcp/cc/bbr.c): 8 MiB at 3 % loss each way from the stack with BBR
    arrive intact, BBR's model ran (tcp.bbr_acks: ACKs its cong_control took; tcp.paced_waits:
    the pacer held data back), and the transfers take at most twice what the kernel's BBR sender
    needs for the same in the same test (three rounds each, alternating, sums compared). On this
    bare path (~0.1 ms RTT) one retransmission timeout adds ~0.2 s to a ~0.09 s transfer, on
    either side (the kernel's rounds show the same 0.33 s outliers); with two rounds a single
    one in the stack's could fail the test. The pacer's holds are counted over the rounds: with
    a BDP of a few segments the window, not the pacer, can limit a whole transfer. Ten runs of
    the two-round version on 2026-11-25: c235def's build failed 2 on time and 3 on a round
    without a pacer hold; 33220a6's failed 2 on the pacer, and once on time in a fresh-machine
    run. The three-round version: 8 of 8 passed; with the pacer disabled it fails."""
    tb = router_tb
    a, b = tb.host("a"), tb.host("b")
    n = 8 * MiB
    tb.router_loss(3, only_l4=True, build_dir=tb.build_dir)
    kt, st = [], []
    paced = 0
    try:
        for i in range(3):
            r = kernel_to_kernel(a, b, n, seed=80 + i, port=5321 + i, cc="bbr")
            kt.append(r["seconds"])
            res = stack_to_kernel(a, b, tool, n, seed=90 + i, port=5331 + i, env={"SLIP_TCP_CC": "bbr"},
                                  timeout=120)
            check_intact(res, n, f"stack bbr round {i}")
            st.append(res["receiver"]["seconds"])
            c = res["counters"]
            print(f"\nkernel bbr {r['seconds']} s, stack bbr {res['receiver']['seconds']} s; "
                  f"{nonzero(c, 'tcp.b', 'tcp.p', 'tcp.r', 'tcp.t')}")
            assert c.get("tcp.bbr_acks", 0) > 0, f"BBR did not run: {nonzero(c, 'tcp.')}"
            paced += c.get("tcp.paced_waits", 0)
    finally:
        stats = tb.router_loss_stats()
    print(f"kernel bbr {sum(kt):.2f} s, stack bbr {sum(st):.2f} s; router {stats}")
    assert paced > 0, "the pacer never held data in three transfers"
    assert sum(st) <= 2 * sum(kt), \
        f"the stack (BBR) took {sum(st):.2f} s for 3 x 8 MiB at 3 % loss, the kernel's BBR {sum(kt):.2f} s"
