"""TCP as a sender on a lossy path (issue 15): the stack's sender against the kernel's, in one run.

Topology: a - r - b (tests/system/testbed.py, Topology(router=True)); the router drops at random
at the ingress of both its ports (tests/prog/tc_loss, the same loss both ways), so data and ACKs
are lost as on a wire. For every loss rate the same 64 MiB (16 MiB with --quick) goes from b to a
kernel receiver in a (tests/system/peers/tcp_bulk.py recv) twice:

- kernel: tcp_bulk send in b (the kernel's TCP) with CUBIC, the stack's algorithm, and with BBR
  (this test machine's default, net.ipv4.tcp_congestion_control=bbr, which namespaces inherit:
  BBR does not take random loss as congestion, so it is the reference for what the path allows,
  not a like-for-like comparison);
- slipstream: tcp_bulk gen | tests/prog/tcp_tool connect-send in b (the stack's TCP).

MiB/s is the receiver's (first byte to EOF, data verified). Kernel retransmissions and RTO
expiries are nstat's TcpRetransSegs / TcpExtTCPTimeouts (and TCPLossProbes) of b's namespace
over that transfer; the stack's are tcp_tool's own counters (tcp.retransmits, tcp.rto_expiries,
tcp.tlp_probes). Each point runs ROUNDS times, kernel and stack alternating; the table keeps
the median of each (runs go to stderr).

RTT: the rows at "1 ms" are the bare veth path (well under 1 ms); rows with a larger RTT need
a delay forwarder in the router, which is not built yet: those rows say so (SLIP_LOSS_RTTS).
"""

import os
import statistics
import subprocess
import sys
import time

MiB = 1 << 20
PORT = 5101
RATES = [0.1, 1, 3, 5]
ROUNDS = int(os.environ.get("SLIP_LOSS_ROUNDS", "1"))


def log(msg):
    print(f"[loss] {msg}", file=sys.stderr, flush=True)


def nstat(host):
    out = host.run(["nstat", "-asz"], check=True, timeout=10).stdout
    vals = {}
    for line in out.splitlines():
        p = line.split()
        if len(p) >= 2 and p[1].isdigit():
            vals[p[0]] = int(p[1])
    return vals


def kernel_send(tcp, tb, nbytes, seed, cc=None):
    a, b = tb.host("a"), tb.host("b")
    before = nstat(b)
    rcv = a.popen([tcp.PY, tcp.BULK, "recv", str(PORT), str(nbytes), "--seed", str(seed)],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = rcv.stderr.readline()
    assert line.startswith("listening"), line
    snd = b.popen([tcp.PY, tcp.BULK, "send", a.addr, str(PORT), str(nbytes), "--seed", str(seed)]
                  + (["--cc", cc] if cc else []),
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sout, _ = snd.communicate(timeout=900)
    rout, rerr = rcv.communicate(timeout=60)
    r = tcp.json_of(rout, f"tcp_bulk recv {rerr[-300:]!r}")
    after = nstat(b)
    d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    return {"ok": r["ok"], "mibs": r["bytes"] / MiB / r["seconds"], "seconds": r["seconds"],
            "retrans": d.get("TcpRetransSegs", 0), "rto": d.get("TcpExtTCPTimeouts", 0),
            "tlp": d.get("TcpExtTCPLossProbes", 0), "segs": d.get("TcpOutSegs", 0)}


def stack_send(tcp, tb, tool, nbytes, seed):
    a, b = tb.host("a"), tb.host("b")
    res = tcp.stack_to_kernel(a, b, tool, nbytes, seed, port=PORT + 1, timeout=900)
    r, c = res["receiver"], res["counters"]
    ok = res["tool_rc"] == 0 and r["ok"]
    return {"ok": ok, "mibs": r["bytes"] / MiB / r["seconds"], "seconds": r["seconds"],
            "retrans": c.get("tcp.retransmits", 0), "rto": c.get("tcp.rto_expiries", 0),
            "tlp": c.get("tcp.tlp_probes", 0), "segs": c.get("tcp.segs_out", 0)}


def med(runs, key):
    return statistics.median(x[key] for x in runs)


def run(repo, build_dir, quick=False, prefix="slb"):
    sys.path.insert(0, str(repo / "tests" / "system"))
    import testbed
    import test_tcp as tcp          # the transfer helpers of the system tests

    tool = build_dir / "tests" / "prog" / "tcp_tool"
    for exe in (tool, build_dir / "tests" / "prog" / "tc_loss"):
        if not exe.is_file():
            return f"(skipped: {exe} is not built)\n"
    nbytes = int(os.environ.get("SLIP_LOSS_MIB", "16" if quick else "64")) * MiB
    rates = [float(x) for x in os.environ.get("SLIP_LOSS_RATES", ",".join(map(str, RATES))).split(",")]
    rows = []
    for pct in rates:
        tb = testbed.Testbed(testbed.Topology(router=True), prefix=prefix, tag="loss").up()
        try:
            tb.router_loss(pct, only_l4=True, build_dir=build_dir)
            k_runs, s_runs, b_runs = [], [], []
            for i in range(ROUNDS):
                seed = 100 + i
                t0 = time.monotonic()
                k = kernel_send(tcp, tb, nbytes, seed, "cubic")
                log(f"{pct}% kernel cubic round {i}: {k} ({time.monotonic() - t0:.1f} s)")
                k_runs.append(k)
                t0 = time.monotonic()
                kb = kernel_send(tcp, tb, nbytes, seed, "bbr")
                log(f"{pct}% kernel bbr   round {i}: {kb} ({time.monotonic() - t0:.1f} s)")
                b_runs.append(kb)
                t0 = time.monotonic()
                s = stack_send(tcp, tb, str(tool), nbytes, seed)
                log(f"{pct}% stack        round {i}: {s} ({time.monotonic() - t0:.1f} s)")
                s_runs.append(s)
            stats = tb.router_loss_stats()
            log(f"{pct}% router: data b->a {stats['b']}, acks a->b {stats['a']}")
        finally:
            tb.down()
        ok = all(x["ok"] for x in k_runs + s_runs + b_runs)
        km, sm = med(k_runs, "mibs"), med(s_runs, "mibs")
        rows.append(f"| {pct:g} % | ~0.1 ms | {km:.1f} | {sm:.1f} | {sm / km:.2f} | "
                    f"{med(k_runs, 'retrans'):.0f} / {med(s_runs, 'retrans'):.0f} | "
                    f"{med(k_runs, 'rto'):.0f} / {med(s_runs, 'rto'):.0f} | "
                    f"{med(k_runs, 'tlp'):.0f} / {med(s_runs, 'tlp'):.0f} | "
                    f"{med(b_runs, 'mibs'):.1f} ({med(b_runs, 'rto'):.0f} RTO) |" + ("" if ok else " FAILED |"))
    head = (f"{nbytes // MiB} MiB b -> a (kernel receiver), loss at the router each way, "
            f"median of {ROUNDS} run(s)\n\n"
            "| loss each way | RTT | kernel CUBIC sender MiB/s | slipstream (CUBIC) sender MiB/s | ratio | "
            "retransmits kernel / slip | RTO expiries kernel / slip | loss probes kernel / slip | "
            "kernel BBR MiB/s |\n"
            "|---|---|---|---|---|---|---|---|---|\n")
    return head + "\n".join(rows) + "\n"
