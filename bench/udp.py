"""UDP 64-byte datagrams per second into one receiver: a kernel sender in host a (sockperf tp,
as fast as it can, pinned to CPU 0) blasts 64-byte datagrams at host b, where `sockperf sr`
(pinned to CPU 1) receives and counts them, on the kernel or under `slipstream run`.

The sender is the same kernel program in both configurations, so its rate is the offered load;
the receiver's rate is what the stack under test delivered to the application (sockperf sr's
"Total N messages received" on exit, over the sender's test time). The receiver's CPU and both
cores' busy time are counted per 1,000 datagrams received. Best of two alternating runs.
"""

import importlib.util
import pathlib
import re
import signal
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent


def _load_apps():
    spec = importlib.util.spec_from_file_location("slip_bench_apps_helpers", HERE / "apps.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


A = _load_apps()


def log(msg):
    print(f"[udp] {msg}", file=sys.stderr, flush=True)


def measure(apps, cfg, secs, profile):
    port = apps.next_port()
    srv = apps.start(cfg, ["sockperf", "sr", "-i", apps.b.addr, "-p", str(port)],
                     lambda l: "using " in l and "to block" in l, profile=profile)
    try:
        cmd = ["sockperf", "tp", "-i", apps.b.addr, "-p", str(port), "-m", "64", "-t", str(secs)]
        (text, _), cpu, allcpu, mach = apps.measured(srv, lambda: apps.client(cmd, timeout=secs + 60))
        time.sleep(0.3)    # let the receiver drain what is still queued before it counts
    finally:
        apps.stop(srv, signal.SIGINT)
    sent = re.search(r"Total of (\d+) messages sent in ([\d.]+) sec", text)
    got = re.search(r"Total (\d+) messages received", srv.text("out") + "\n" + srv.text("err"))
    if not sent or not got:
        raise RuntimeError("no counts: sender: " + A.one_line(text[-200:]) + " receiver: " +
                           A.one_line(srv.tail(300)))
    n_sent, t = int(sent.group(1)), float(sent.group(2))
    n_got = int(got.group(1))
    k = max(n_got, 1) / 1000.0
    return {"rx_pps": n_got / t, "tx_pps": n_sent / t, "delivered_pct": 100.0 * n_got / max(n_sent, 1),
            "cpu_per_k": cpu / k, "all_per_k": allcpu / k, "machine": mach}


def run(repo, build_dir, quick=False, prefix="slb"):
    import shutil
    sys.path.insert(0, str(repo / "tests" / "system"))
    from testbed import Testbed, Topology  # noqa: E402

    if not shutil.which("sockperf"):
        return "udp: skipped, sockperf is not installed (apt-get install sockperf)\n"
    if not (build_dir / "slipstream").exists():
        return f"udp: not built: {build_dir / 'slipstream'}\n"
    secs = 2 if quick else 5
    tmp = tempfile.mkdtemp(prefix=f"{prefix}-udp-")
    tb = Testbed(Topology(), prefix=prefix)
    rows = []
    try:
        tb.up()
        apps = A.Apps(tb, build_dir, quick, tmp)
        apps.port = 7500
        for profile in (None, "latency"):
            res = A.alternate(["kernel", "slip"], lambda c: measure(apps, c, secs, profile),
                              f"udp 64 B (profile {profile or 'default'})")
            p = f" (slipstream --profile {profile})" if profile else " (slipstream default profile)"
            if profile:
                # The kernel does not change with the launcher's profile: one kernel column.
                res["kernel"] = first_res["kernel"] + res["kernel"]
            else:
                first_res = res
            rows += [(f"received datagrams/s{p}", res, "rx_pps", True, 0),
                     (f"offered (sender) datagrams/s{p}", res, "tx_pps", True, 0),
                     (f"delivered % of sent{p}", res, "delivered_pct", True, 1),
                     (f"receiver CPU s/1000 datagrams{p}", res, "cpu_per_k", False, 5),
                     (f"all CPUs s/1000 datagrams{p}", res, "all_per_k", False, 5)]
    finally:
        tb.down()
        shutil.rmtree(tmp, ignore_errors=True)
    out = [f"`{A.command_line(repo, prefix)}`", "",
           A.table("UDP 64-byte datagrams into one receiver", A.KS, rows),
           f"- `sockperf tp -i 198.18.0.2 -p PORT -m 64 -t {secs}` (kernel, CPU 0 of a) against "
           "`sockperf sr -i 198.18.0.2 -p PORT` in b (CPU 1), or `slipstream run --iface veth0 "
           "[--profile latency] -- sockperf sr ...`; received = sockperf sr's count / the sender's "
           "time. Best of 2 alternating runs per number."]
    return "\n".join(out) + "\n"
