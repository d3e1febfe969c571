"""IPv6 beside IPv4 in one run (issue 16): nginx keep-alive (wrk) and a 64-byte ping-pong
(sockperf, UDP and TCP), each over IPv4 (198.18.0.2) and over IPv6 (2001:2::2, the testbed's
benchmarking range, inside its namespaces only), on the kernel and under `slipstream run`.
What it answers: is slipstream's ratio to the kernel over IPv6 the one it has over IPv4 (the
issue wants them within 5 %)? So every number is taken in the same run, families and
configurations alternating, best of ROUNDS each (apps.py's method and parsers).

The ping-pong needs a sockperf that takes IPv6 addresses: Debian 12's 3.7 does not (upstream
added IPv6 in 3.8). SLIP_SOCKPERF=<path> names one (the project does not build it); without one
the ping-pong table says so and the nginx table still runs. The same sockperf binary is used for
both families.
"""

import importlib.util
import os
import pathlib
import shutil
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent


def _load_apps():
    spec = importlib.util.spec_from_file_location("slip_bench_apps_helpers", HERE / "apps.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


A = _load_apps()

ROUNDS = int(os.environ.get("SLIP_BENCH_ROUNDS", "3"))
NGINX = [("kernel", "kernel"), ("slip", "slipstream server"), ("both", "slipstream both ends")]
PINGPONG = [("kernel", "kernel"), ("kspin", "kernel spinning"), ("slip", "slipstream")]


def sockperf_binary(build_dir):
    """A sockperf >= 3.8 (IPv6), or None."""
    for cand in (os.environ.get("SLIP_SOCKPERF"), str(build_dir / "sockperf" / "sockperf")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def both_families(apps, configs, fn, label):
    """{family: {cfg: [runs]}}: ROUNDS rounds; in each, every configuration runs over both
    families back to back (IPv4 first in odd rounds, IPv6 first in even ones), so the load of a
    shared machine, which drifts over minutes, weighs on a pair alike."""
    out = {4: {c: [] for c in configs}, 6: {c: [] for c in configs}}
    addr = {4: apps.b.addr, 6: apps.b.addr6}
    try:
        for rnd in range(ROUNDS):
            for cfg in configs:
                for fam in ((4, 6) if rnd % 2 == 0 else (6, 4)):
                    apps.dst = addr[fam]
                    try:
                        r = fn(cfg)
                    except Exception as e:  # noqa: BLE001 - the table reports it
                        r = RuntimeError(A.one_line(e))
                    out[fam][cfg].append(r)
                    A.log(f"{label} round {rnd + 1} {cfg} IPv{fam}: {A.one_line(r, 600)}")
    finally:
        apps.dst = apps.b.addr
    return out


def family_table(title, cols, rows):
    """rows: (label, {4: runs, 6: runs}, key, higher, digits). Columns: each configuration over
    IPv4 and IPv6, slipstream's ratio to the kernel in each family (the first configuration is
    the kernel), and the IPv6 ratio over the IPv4 one (1.00: IPv6 costs slipstream what it costs
    the kernel)."""
    base = cols[0][0]
    head = ["workload"]
    for fam in (4, 6):
        head += [f"{name} IPv{fam}" for _, name in cols]
    others = [c for c in cols if c[0] != base]
    for c, name in others:
        head += [f"{name} / kernel IPv4", f"{name} / kernel IPv6", "IPv6 ratio / IPv4 ratio"]
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, runs, key, higher, nd in rows:
        vals = {fam: {c: A.best(runs[fam].get(c, []), key, higher) for c, _ in cols} for fam in (4, 6)}
        cells = []
        for fam in (4, 6):
            cells += [A.fmt(vals[fam][c], nd) if vals[fam][c] is not None
                      else A.first_error(runs[fam].get(c, [])) for c, _ in cols]
        for c, _ in others:
            r = {fam: (vals[fam][c] / vals[fam][base] if vals[fam][c] is not None and vals[fam][base]
                       else None) for fam in (4, 6)}
            cells += [f"{r[4]:.2f}" if r[4] else "-", f"{r[6]:.2f}" if r[6] else "-",
                      f"{r[6] / r[4]:.2f}" if r[4] and r[6] else "-"]
        lines.append("| " + " | ".join([label, *cells]) + " |")
    return "\n".join(lines) + "\n"


def run_nginx(apps, out):
    secs = 2 if apps.quick else 5
    subs = (("ka16", 16), ("ka64", 64))
    res = both_families(apps, [c for c, _ in NGINX],
                        lambda c: apps.nginx(c, secs, subs=[s for s, _ in subs]), "nginx")
    rows = []
    for sub, conns in subs:
        s = {fam: A.split(res[fam], sub) for fam in (4, 6)}
        rows += [(f"keep-alive {conns} conns: req/s", s, "rps", True, 0),
                 (f"keep-alive {conns} conns: p50 µs", s, "p50", False, 0),
                 (f"keep-alive {conns} conns: server CPU s/1000 req", s, "cpu_per_k", False, 4)]
    out.append(family_table("nginx 1 KiB GET keep-alive, 1 worker (wrk -t1 in a), IPv4 and IPv6", NGINX, rows))
    out.append(f"- `wrk -t1 -cN -d{secs}s --latency http://198.18.0.2:PORT/1k.bin` and "
               f"`http://[2001:2::2]:PORT/1k.bin` against `nginx -c bench/apps/nginx.conf.in` listening on "
               f"`198.18.0.2:PORT` or `[2001:2::2]:PORT` (an AF_INET or an AF_INET6 socket), or "
               f"`slipstream run --iface veth0 -- nginx -c ...` (both ends: wrk too).\n")


def run_pingpong(apps, out, sockperf):
    if not sockperf:
        out.append("### ping-pong IPv4 and IPv6\n\nskipped: no sockperf >= 3.8 (Debian's 3.7 rejects IPv6 "
                   "addresses): set SLIP_SOCKPERF to one\n")
        return
    apps.sockperf_bin = sockperf
    secs = 2 if apps.quick else 5
    rows = []
    for proto in ("udp", "tcp"):
        res = both_families(apps, [c for c, _ in PINGPONG], lambda c: apps.sockperf(c, proto, secs),
                            f"sockperf {proto}")
        P = proto.upper()
        rows += [(f"{P} 64 B ping-pong p50 half-RTT µs", res, "p50", False, 3),
                 (f"{P} p99 µs", res, "p99", False, 3),
                 (f"{P} server CPU s/1000 msgs", res, "cpu_per_k", False, 4)]
    out.append(family_table("sockperf ping-pong, IPv4 and IPv6: both ends kernel (sleeping, spinning) "
                            "vs both ends slipstream (latency profile)", PINGPONG, rows))
    out.append(f"- `{sockperf} sr [--tcp] -i ADDR -p PORT` in b, `... pp [--tcp] -i ADDR -p PORT -t {secs} "
               f"-m 64` in a, ADDR 198.18.0.2 or 2001:2::2; kernel spinning: `--nonblocked` on both ends; "
               f"slipstream: both under `slipstream run --iface veth0 --profile latency --`.\n")


def run(repo, build_dir, quick=False, prefix="slb"):
    sys.path.insert(0, str(repo / "tests" / "system"))
    from testbed import Testbed, Topology  # noqa: E402  (imported by path on purpose)

    need = [build_dir / "slipstream", build_dir / "src" / "preload" / "libslipstream.so",
            build_dir / "tests" / "prog" / "steer_ctl"]
    missing = [str(p) for p in need if not os.path.exists(p)]
    if missing:
        return "v6: not built: " + ", ".join(missing) + "\n"
    sockperf = sockperf_binary(build_dir)
    out = [f"`{A.command_line(repo, prefix)}`", "",
           f"Server in b on CPU 1, load generator in a on CPU 0; best of {ROUNDS} runs per number "
           "(SLIP_BENCH_ROUNDS), each configuration over IPv4 and IPv6 back to back (all runs on stderr). Ratios are to the kernel "
           "in the same family; the last column divides the IPv6 ratio by the IPv4 one.", ""]
    tmp = tempfile.mkdtemp(prefix=f"{prefix}-v6-")
    os.chmod(tmp, 0o755)
    tb = Testbed(Topology(ipv6=True), prefix=prefix)
    try:
        tb.up()
        apps = A.Apps(tb, build_dir, quick, tmp)
        for name, fn in (("nginx", lambda: run_nginx(apps, out)),
                         ("ping-pong", lambda: run_pingpong(apps, out, sockperf))):
            if name == "nginx" and not (shutil.which("nginx") and shutil.which("wrk")):
                out.append("### nginx\n\nskipped: nginx or wrk not installed\n")
                continue
            A.log(f"--- v6 {name}")
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - one workload's crash must not end the suite
                out.append(f"### {name}\n\nfailed: {A.one_line(e)}\n")
                A.log(f"v6 {name} FAILED: {e}")
    finally:
        tb.down()
        shutil.rmtree(tmp, ignore_errors=True)
    return "\n".join(out) + "\n"
