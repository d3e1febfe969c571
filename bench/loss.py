"""TCP as a sender on a lossy path (issue 15): the stack's sender against the kernel's, in one run.

Topology: a - r - b (tests/system/testbed.py, Topology(router=True)); the router drops at random
at the ingress of both its ports (tests/prog/tc_loss, the same loss both ways), so data and ACKs
are lost as on a wire. For every loss rate the same 64 MiB (16 MiB with --quick) goes from b to a
kernel receiver in a (tests/system/peers/tcp_bulk.py recv) twice:

- kernel: tcp_bulk send in b (the kernel's TCP) with CUBIC, the stack's algorithm, and with BBR
  (this test machine's default, net.ipv4.tcp_congestion_control=bbr, which namespaces inherit:
  BBR does not take random loss as congestion, so it is the reference for what the path allows,
  not a like-for-like comparison);
- slipstream: tests/prog/tcp_tool connect-send in b (the stack's TCP), its stdin the same stream
  written to a file on tmpfs beforehand (SLIP_LOSS_FEED=pipe: tcp_bulk gen | tcp_tool instead),
  with CUBIC (SLIP_TCP_CC=cubic) and with BBR (SLIP_TCP_CC=bbr: src/tcp/cc/bbr.c). Both sides are
  told their algorithm, whatever the namespace's net.ipv4.tcp_congestion_control.

MiB/s is the receiver's (first byte to EOF, data verified). Kernel retransmissions and RTO
expiries are nstat's TcpRetransSegs / TcpExtTCPTimeouts (and TCPLossProbes) of b's namespace
over that transfer; the stack's are tcp_tool's own counters (tcp.retransmits, tcp.rto_expiries,
tcp.tlp_probes). Each point runs ROUNDS times, kernel and stack alternating; the table keeps
the median of each (runs go to stderr). Under each table, the RTO expiries of every transfer
summed per side, and how many of them were the handshake's (a lost SYN or SYN-ACK: nstat's
TcpExtTCPSynRetrans, the stack's tcp.syn_rto), which cost the 1 s initial RTO before the first
byte and so not the MiB/s.

RTT: rows at "~0.1 ms" are the bare veth path, the loss done by tc_loss at the router's ingress.
Rows with an RTT (SLIP_LOSS_RTTS, default "0,50" ms) route TCP/UDP through tools/delayfwd
(slip-delayfwd: AF_PACKET in, a timed FIFO, out) in the router, which also does the loss; they
move SLIP_LOSS_RTT_MIB (default 4) MiB, since CUBIC at 5 % loss and 50 ms moves ~0.2 MB/s.
SLIP_LOSS_MIB (default 64, 16 with --quick), SLIP_LOSS_RATES (default 0.1,1,3,5),
SLIP_LOSS_ROUNDS (default 1) change the rest; SLIP_LOSS_RECV=0 leaves out the receiver side,
SLIP_LOSS_SEND=0 the sender side; SLIP_LOSS_STACK_RECV picks the stack's receiver (below);
SLIP_LOSS_ALGOS=bbr leaves out the CUBIC senders (default "cubic,bbr").

Receiver side (a second table): the same loss rates and RTTs, a kernel CUBIC sender in a to a
receiver in b, the kernel's (tcp_bulk recv) or the stack's (by default the same tcp_bulk recv
under `slipstream run`; SLIP_LOSS_STACK_RECV=tool: tcp_tool serve-recv | tcp_bulk check), same
bytes (SLIP_LOSS_RECV_CC=bbr: a kernel BBR sender instead, whose window at 50 ms outgrows a fixed
256 KiB receive buffer); the sender's retransmissions and RTO expiries (nstat in a) show how well
each receiver's ACKs (SACK, D-SACK, immediate ACKs for holes) let the same sender recover.
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
# How the stack's sender gets its bytes: "file" (default: the stream written to tmpfs beforehand,
# its stdin) or "pipe" (tcp_bulk gen | tcp_tool, a third process during the transfer, as
# test_tcp.py does; the tables before 2026-11-24's fourth session were taken this way).
FEED = os.environ.get("SLIP_LOSS_FEED", "file")
# The kernel sender's algorithm in the receiver-side table (SLIP_LOSS_RECV_CC, default cubic).
RECV_CC = os.environ.get("SLIP_LOSS_RECV_CC", "cubic")
# Which sender pairs run (SLIP_LOSS_ALGOS, default "cubic,bbr"): "bbr" alone skips the CUBIC
# transfers, which at 50 ms and 3-5 % loss take minutes each.
ALGOS = [x for x in os.environ.get("SLIP_LOSS_ALGOS", "cubic,bbr").split(",") if x]
# The stack's receiver (SLIP_LOSS_STACK_RECV): "bulk" (default), the kernel side's own program,
# tcp_bulk recv, under `slipstream run`, so both sides run the same receiver; "tool", tcp_tool
# serve-recv piping into tcp_bulk check (the tables before the twelfth session: a third process
# and a pipe copy on a 2-core machine, which at 1 ms held it near 75 MiB/s).
STACK_RECV = os.environ.get("SLIP_LOSS_STACK_RECV", "bulk")


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
            "syn_rto": d.get("TcpExtTCPSynRetrans", 0),
            "tlp": d.get("TcpExtTCPLossProbes", 0), "segs": d.get("TcpOutSegs", 0)}


def stream_file(tcp, nbytes, seed):
    """The seed's byte stream in a file on tmpfs, written once (tcp_bulk gen): the stack's sender
    reads it as its stdin, so no third process feeds it during the transfer (the kernel's
    sender, tcp_bulk send, makes the same stream inside its own process)."""
    path = f"/dev/shm/slip-loss-{nbytes}-{seed}"
    if not os.path.exists(path) or os.path.getsize(path) != nbytes:
        with open(path + ".tmp", "wb") as f:
            subprocess.run([tcp.PY, tcp.BULK, "gen", str(nbytes), "--seed", str(seed)], stdout=f,
                           stderr=subprocess.DEVNULL, check=True, timeout=300)
        os.replace(path + ".tmp", path)
    return path


def stack_send(tcp, tb, tool, nbytes, seed, cc="cubic"):
    """The stack's sender with congestion control cc (SLIP_TCP_CC)."""
    a, b = tb.host("a"), tb.host("b")
    if FEED == "pipe":
        old = os.environ.get("SLIP_TCP_CC")
        os.environ["SLIP_TCP_CC"] = cc
        try:
            res = tcp.stack_to_kernel(a, b, tool, nbytes, seed, port=PORT + 1, timeout=900)
        finally:
            if old is None:
                os.environ.pop("SLIP_TCP_CC", None)
            else:
                os.environ["SLIP_TCP_CC"] = old
        r, c, rc = res["receiver"], res["counters"], res["tool_rc"]
    else:
        port = PORT + 1
        rcv = a.popen([tcp.PY, tcp.BULK, "recv", str(port), str(nbytes), "--seed", str(seed)],
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = rcv.stderr.readline()
        assert line.startswith("listening"), line
        with open(stream_file(tcp, nbytes, seed), "rb") as f:
            t = b.popen([tool, "--iface", b.ifname, "--counters", "connect-send", a.addr, str(port)],
                        env=tcp.tool_env({"SLIP_TCP_CC": cc}), stdin=f, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE)
        outs = tcp.finish([("tool", t), ("recv", rcv)], 900)
        r = tcp.json_of(outs["recv"][0], f"tcp_bulk recv {outs['recv'][1][-300:]!r}")
        c, _ = tcp.counters_of(outs["tool"][0].decode(errors="replace"))
        rc = t.returncode
    ok = rc == 0 and r["ok"] and r.get("first_diff") is None
    return {"ok": ok, "mibs": r["bytes"] / MiB / r["seconds"], "seconds": r["seconds"],
            "retrans": c.get("tcp.retransmits", 0), "rto": c.get("tcp.rto_expiries", 0),
            "syn_rto": c.get("tcp.syn_rto", 0),
            "tlp": c.get("tcp.tlp_probes", 0), "segs": c.get("tcp.segs_out", 0)}


def recv_side(tcp, tb, tool, nbytes, seed, stack, cc="cubic"):
    """a (kernel tcp_bulk send, CUBIC) -> b: the kernel's receiver (tcp_bulk recv) or the
    stack's (tcp_tool serve-recv | tcp_bulk check). MiB/s from the sender's clock; the sender's
    retransmissions and RTO expiries are nstat's in a (the same kernel sender both times)."""
    a, b = tb.host("a"), tb.host("b")
    port = PORT + 2 + int(stack)
    before = nstat(a)
    if stack and STACK_RECV == "bulk":
        slip = tool.parent.parent.parent / "slipstream"
        t = b.popen([str(slip), "run", "--iface", b.ifname, "--", tcp.PY, tcp.BULK, "recv", str(port), str(nbytes),
                     "--seed", str(seed)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = t.stderr.readline().decode(errors="replace")
        assert line.startswith("listening"), line + t.stderr.read().decode(errors="replace")[-500:]
        procs = [("recv", t)]
    elif stack:
        t = b.popen([str(tool), "--iface", b.ifname, "--counters", "serve-recv", str(port)],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        chk = b.popen([tcp.PY, tcp.BULK, "check", str(nbytes), "--seed", str(seed)], stdin=t.stdout,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        t.stdout.close()
        tcp.wait_ready(t, "tcp_tool serve-recv")
        procs = [("check", chk), ("tool", t)]
    else:
        rcv = b.popen([tcp.PY, tcp.BULK, "recv", str(port), str(nbytes), "--seed", str(seed)],
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = rcv.stderr.readline().decode(errors="replace")
        assert line.startswith("listening"), line
        procs = [("recv", rcv)]
    snd = a.popen([tcp.PY, tcp.BULK, "send", b.addr, str(port), str(nbytes), "--seed", str(seed), "--cc", cc],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    outs = tcp.finish([("send", snd)] + procs, 900)
    r = tcp.json_of(outs["check" if stack and STACK_RECV != "bulk" else "recv"][0].decode(errors="replace"),
                    "receiver")
    # The sender's time (connect to the receiver's clean close) for both: tcp_bulk check, behind
    # the stack's receiver, starts its clock when it starts, before the sender connects.
    snt = tcp.json_of(outs["send"][0].decode(errors="replace"), "sender")
    after = nstat(a)
    d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    ok = r["ok"] and snt["ok"] and (r.get("first_diff") is None) and (not stack or t.returncode == 0)
    return {"ok": ok, "mibs": snt["bytes"] / MiB / snt["seconds"], "seconds": snt["seconds"],
            "retrans": d.get("TcpRetransSegs", 0), "rto": d.get("TcpExtTCPTimeouts", 0),
            "syn_rto": d.get("TcpExtTCPSynRetrans", 0)}


def recv_point(tcp, testbed, build_dir, tool, prefix, pct, rtt_ms, nbytes):
    tb = testbed.Testbed(testbed.Topology(router=True), prefix=prefix, tag="lossr").up()
    fwd = None
    try:
        if rtt_ms:
            fwd = start_delay(tb, build_dir, rtt_ms, pct)
        else:
            tb.router_loss(pct, only_l4=True, build_dir=build_dir)
        k_runs, s_runs = [], []
        for i in range(ROUNDS):
            seed = 200 + i
            for name, stack, runs in (("kernel receiver", False, k_runs), ("stack receiver ", True, s_runs)):
                t0 = time.monotonic()
                x = recv_side(tcp, tb, tool, nbytes, seed, stack, RECV_CC)
                log(f"{pct}% {rtt_ms} ms receive {name} round {i}: {x} ({time.monotonic() - t0:.1f} s)")
                runs.append(x)
    finally:
        if fwd:
            stop_delay(fwd)
        tb.down()
    return k_runs, s_runs


def med(runs, key):
    return statistics.median(x[key] for x in runs)


def start_delay(tb, build_dir, rtt_ms, pct):
    """The router forwards TCP/UDP through slip-delayfwd (rtt_ms/2 each way, pct % loss each
    way); tc_loss at 100 % keeps the kernel from forwarding them too (tc ingress runs after
    AF_PACKET has taken its copy)."""
    exe = build_dir / "tools" / "delayfwd" / "slip-delayfwd"
    tb.router_loss(100, only_l4=True, build_dir=build_dir)
    r = tb.host("r")
    args = [str(exe)]
    for f in r.ifaces:
        args += ["--if", f"{f.name},{f.peer_mac}"]
    args += ["--delay-ms", str(rtt_ms / 2), "--ppm", str(int(round(pct * 10000)))]
    p = r.popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith("ready"):
        p.kill()
        raise RuntimeError(f"slip-delayfwd did not start: {line!r} {p.stderr.read()!r}")
    return p


def stop_delay(p):
    p.terminate()
    out, err = p.communicate(timeout=10)
    return (out.strip().splitlines() or [""])[-1]


def point(tcp, testbed, build_dir, tool, prefix, pct, rtt_ms, nbytes):
    """One (loss, RTT) point: returns (kernel CUBIC runs, stack runs, kernel BBR runs, stack BBR runs)."""
    tb = testbed.Testbed(testbed.Topology(router=True), prefix=prefix, tag="loss").up()
    fwd = None
    try:
        if rtt_ms:
            fwd = start_delay(tb, build_dir, rtt_ms, pct)
        else:
            tb.router_loss(pct, only_l4=True, build_dir=build_dir)
        k_runs, s_runs, b_runs, sb_runs = [], [], [], []
        for i in range(ROUNDS):
            seed = 100 + i
            for algo, name, fn, runs in (
                    ("cubic", "kernel cubic", lambda: kernel_send(tcp, tb, nbytes, seed, "cubic"), k_runs),
                    ("bbr", "kernel bbr  ", lambda: kernel_send(tcp, tb, nbytes, seed, "bbr"), b_runs),
                    ("cubic", "stack       ", lambda: stack_send(tcp, tb, str(tool), nbytes, seed), s_runs),
                    ("bbr", "stack bbr   ", lambda: stack_send(tcp, tb, str(tool), nbytes, seed, "bbr"), sb_runs)):
                if algo not in ALGOS:
                    continue
                t0 = time.monotonic()
                x = fn()
                log(f"{pct}% {rtt_ms} ms {name} round {i}: {x} ({time.monotonic() - t0:.1f} s)")
                runs.append(x)
        if fwd:
            log(f"{pct}% {rtt_ms} ms forwarder (0: from a, 1: from b): {stop_delay(fwd)}")
            fwd = None
        stats = tb.router_loss_stats()
        if not rtt_ms:
            log(f"{pct}% router: data b->a {stats['b']}, acks a->b {stats['a']}")
    finally:
        if fwd:
            stop_delay(fwd)
        tb.down()
    return k_runs, s_runs, b_runs, sb_runs


def run(repo, build_dir, quick=False, prefix="slb"):
    sys.path.insert(0, str(repo / "tests" / "system"))
    import testbed
    import test_tcp as tcp          # the transfer helpers of the system tests

    tool = build_dir / "tests" / "prog" / "tcp_tool"
    for exe in (tool, build_dir / "tests" / "prog" / "tc_loss", build_dir / "tools" / "delayfwd" / "slip-delayfwd"):
        if not exe.is_file():
            return f"(skipped: {exe} is not built)\n"
    nbytes = int(os.environ.get("SLIP_LOSS_MIB", "16" if quick else "64")) * MiB
    nbytes_rtt = int(os.environ.get("SLIP_LOSS_RTT_MIB", "4")) * MiB
    rates = [float(x) for x in os.environ.get("SLIP_LOSS_RATES", ",".join(map(str, RATES))).split(",")]
    rtts = [float(x) for x in os.environ.get("SLIP_LOSS_RTTS", "0,50").split(",")]
    rows = []
    # Every transfer's RTO expiries, and those of the handshake among them (a lost SYN or SYN-ACK
    # costs the 1 s initial RTO, before the first byte the MiB/s count from), by side.
    totals = {}

    def total(name, runs):
        if not runs:
            return
        t = totals.setdefault(name, [0, 0])
        t[0] += sum(x["rto"] for x in runs)
        t[1] += sum(x.get("syn_rto", 0) for x in runs)

    def totals_line(names):
        parts = [f"{n} {totals[n][0]} ({totals[n][1]} in handshakes)" for n in names if n in totals]
        return ("\nRTO expiries over all transfers (of them, SYN or SYN-ACK timeouts): " + "; ".join(parts)
                + "\n" if parts else "")
    # SLIP_LOSS_SEND=0 skips the sender-side table (for receiver-side runs alone).
    for rtt in (rtts if os.environ.get("SLIP_LOSS_SEND", "1") != "0" else []):
        for pct in rates:
            n = nbytes_rtt if rtt else nbytes
            k_runs, s_runs, b_runs, sb_runs = point(tcp, testbed, build_dir, tool, prefix, pct, rtt, n)
            for name, runs in (("kernel CUBIC sender", k_runs), ("stack CUBIC sender", s_runs),
                               ("kernel BBR sender", b_runs), ("stack BBR sender", sb_runs)):
                total(name, runs)
            ok = all(x["ok"] for x in k_runs + s_runs + b_runs + sb_runs)
            cub = bbr = "| - | - | - | - | - | - "
            if k_runs:
                km, sm = med(k_runs, "mibs"), med(s_runs, "mibs")
                cub = (f"| {km:.2f} | {sm:.2f} | {sm / km:.2f} | "
                       f"{med(k_runs, 'retrans'):.0f} / {med(s_runs, 'retrans'):.0f} | "
                       f"{med(k_runs, 'rto'):.0f} / {med(s_runs, 'rto'):.0f} | "
                       f"{med(k_runs, 'tlp'):.0f} / {med(s_runs, 'tlp'):.0f} ")
            if b_runs:
                bm, sbm = med(b_runs, "mibs"), med(sb_runs, "mibs")
                bbr = (f"| {bm:.2f} | {sbm:.2f} | {sbm / bm if bm else 0:.2f} | "
                       f"{med(b_runs, 'retrans'):.0f} / {med(sb_runs, 'retrans'):.0f} | "
                       f"{med(b_runs, 'rto'):.0f} / {med(sb_runs, 'rto'):.0f} ")
            else:
                bbr = "| - | - | - | - | - "
            rows.append(f"| {pct:g} % | {f'{rtt:g} ms' if rtt else '~0.1 ms'} | {n // MiB} " + cub + bbr + "|"
                        + ("" if ok else " FAILED |"))
    rrows = []
    # SLIP_LOSS_RECV=0 skips the receiver-side table (sender-side A/B runs are shorter).
    for rtt, pct in ([(r, p) for r in rtts for p in rates] if os.environ.get("SLIP_LOSS_RECV", "1") != "0" else []):
        n = nbytes_rtt if rtt else nbytes
        k_runs, s_runs = recv_point(tcp, testbed, build_dir, tool, prefix, pct, rtt, n)
        total("kernel sender behind the kernel receiver", k_runs)
        total("kernel sender behind the stack receiver", s_runs)
        ok = all(x["ok"] for x in k_runs + s_runs)
        km, sm = med(k_runs, "mibs"), med(s_runs, "mibs")
        rrows.append(f"| {pct:g} % | {f'{rtt:g} ms' if rtt else '~0.1 ms'} | {n // MiB} | {km:.2f} | {sm:.2f} | {sm / km:.2f} | "
                     f"{med(k_runs, 'retrans'):.0f} / {med(s_runs, 'retrans'):.0f} | "
                     f"{med(k_runs, 'rto'):.0f} / {med(s_runs, 'rto'):.0f} |" + ("" if ok else " FAILED |"))
    rhead = (f"\na -> b (kernel {RECV_CC.upper()} sender), receiver side: the kernel's receiver or the stack's in b, "
             f"median of {ROUNDS} run(s)\n\n"
             "| loss each way | RTT | MiB | kernel receiver MiB/s | slipstream receiver MiB/s | ratio | "
             "sender retransmits (kernel rcv / slip rcv) | sender RTO expiries (kernel rcv / slip rcv) |\n"
             "|---|---|---|---|---|---|---|---|\n")
    head = (f"b -> a (kernel receiver), loss at the router each way, median of {ROUNDS} run(s)\n\n"
            "| loss each way | RTT | MiB | kernel CUBIC sender MiB/s | slipstream (CUBIC) sender MiB/s | ratio | "
            "retransmits kernel / slip | RTO expiries kernel / slip | loss probes kernel / slip | "
            "kernel BBR MiB/s | slipstream BBR MiB/s | ratio BBR | retransmits kernel BBR / slip BBR | "
            "RTO expiries kernel BBR / slip BBR |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    send_names = ("kernel CUBIC sender", "stack CUBIC sender", "kernel BBR sender", "stack BBR sender")
    recv_names = ("kernel sender behind the kernel receiver", "kernel sender behind the stack receiver")
    return (head + "\n".join(rows) + "\n" + totals_line(send_names) + rhead + "\n".join(rrows) + "\n"
            + totals_line(recv_names))
