"""Raw AF_XDP benchmark: `slipstream bench xsk` against dpdk-testpmd's net_af_xdp PMD, on the same
veth of a two-host namespace testbed, mode by mode (rxdrop, txonly, l2fwd).

Traffic: for rxdrop and l2fwd the source is `slipstream bench xsk --mode txonly` in host a and the
tool under test runs in host b; for txonly the tool under test runs in a and the sink is
`slipstream bench xsk --mode rxdrop` in b. The tool under test is pinned to CPU 1 (testpmd's
forwarding lcore) and the other side to CPU 0. Both tools bind in copy mode (veth has no zero-copy)
without busy polling (testpmd: busy_budget=0). A rate is the median of the per-second samples of
the tool under test, leaving out the first and last non-zero (partial) seconds; the table keeps
each tool's best of two alternating rounds (one with --quick).
"""

import os
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import time

MODES = ["rxdrop", "txonly", "l2fwd"]
TESTPMD_FWD = {"rxdrop": "rxonly", "txonly": "txonly", "l2fwd": "macswap"}
TESTPMD_PKGS = ["dpdk-dev", "librte-net-af-xdp23"]   # dpdk-testpmd, and its AF_XDP PMD


def log(msg):
    print(f"[xsk] {msg}", file=sys.stderr, flush=True)


def steady_rate(samples):
    """Median of the non-zero per-second samples without the first and last (partial) ones."""
    nz = [s for s in samples if s > 0]
    if len(nz) > 2:
        nz = nz[1:-1]
    return statistics.median(nz) if nz else 0.0


def ensure_testpmd():
    """Returns None when dpdk-testpmd and the AF_XDP PMD are there (installing them with apt-get if
    missing), else one line saying why not."""
    def have_pmd():
        r = subprocess.run(["sh", "-c", "ls /usr/lib/*/dpdk/pmds-*/librte_net_af_xdp.so* 2>/dev/null"],
                           stdout=subprocess.PIPE, text=True)
        return bool(r.stdout.strip())
    if shutil.which("dpdk-testpmd") and have_pmd():
        return None
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "dpdk-testpmd missing (install " + " ".join(TESTPMD_PKGS) + ")"
    log("installing " + " ".join(TESTPMD_PKGS) + " with apt-get")
    r = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *TESTPMD_PKGS],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    if r.returncode != 0 or not shutil.which("dpdk-testpmd") or not have_pmd():
        tail = (r.stdout.strip().splitlines() or ["?"])[-1]
        return f"apt-get install {' '.join(TESTPMD_PKGS)} failed: {tail}"
    return None


class Runner:
    def __init__(self, tb, slipstream, seconds):
        self.tb = tb
        self.slip = str(slipstream)
        self.seconds = seconds
        ncpu = os.cpu_count() or 1
        self.pin_dut = ["taskset", "-c", "1"] if ncpu >= 2 else []
        self.pin_other = ["taskset", "-c", "0"] if ncpu >= 2 else []
        self.received = {}      # mode -> [(frames the source sent, frames slipstream received, dropped)]

    def bench_cmd(self, host, mode, seconds, pin, extra=()):
        return [*pin, self.slip, "bench", "xsk", "--iface", host.ifname, "--mode", mode,
                "--seconds", str(seconds), *extra]

    def start_slip(self, host, cmd):
        # The previous run's AF_XDP socket on the same queue may still be on its way out (the
        # kernel releases it after the process exits): "busy" is retried for a few seconds.
        for attempt in range(15):
            p = host.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                ready, _, _ = select.select([p.stdout], [], [], 0.2)
                if ready:
                    line = p.stdout.readline()
                    if line.startswith("bench xsk "):
                        return p
                    if not line:
                        break
                if p.poll() is not None:
                    break
            p.kill()
            out, err = p.communicate()
            why = (err.strip() or out.strip())[-300:]
            if "busy" not in why or attempt == 14:
                raise RuntimeError("slipstream bench did not start: " + why)
            time.sleep(0.2)

    def stop(self, p, timeout=20):
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        return out, err

    def wait_xdp(self, host, p, timeout=30):
        """testpmd buffers its stdout: readiness is its XDP program showing up on the veth."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if p.poll() is not None:
                return False
            out = host.run(["ip", "link", "show", host.ifname], timeout=10).stdout
            if re.search(r"\bxdp(generic)?\b", out):
                time.sleep(1.0)
                return True
            time.sleep(0.2)
        return False

    def testpmd_cmd(self, host, fwd, peer_mac):
        cmd = ["dpdk-testpmd", "-l", "0,1", "--no-huge", "-m", "1024", "--no-pci", "--no-shconf",
               "--file-prefix", host.ns, "--log-level", "pmd.net.af_xdp:info",
               "--vdev", f"net_af_xdp0,iface={host.ifname},start_queue=0,queue_count=1,busy_budget=0",
               "--", f"--forward-mode={fwd}", "--total-num-mbufs=16384", "--stats-period", "1"]
        if fwd == "txonly":
            cmd += [f"--eth-peer=0,{peer_mac}", "--txpkts=64"]
        return cmd

    @staticmethod
    def slip_samples(out, key):
        group = 1 if key == "rx" else 2
        return [float(m.group(group)) for m in re.finditer(r"^rx pps=(\d+) tx pps=(\d+)$", out, re.M)]

    @staticmethod
    def testpmd_samples(out, key):
        return [float(v) for v in re.findall(rf"{key}-pps:\s+(\d+)", out)]

    def source(self, a, b):
        """txonly from a to b for the measurement window; returns its output."""
        r = a.run(self.bench_cmd(a, "txonly", self.seconds, self.pin_other, ["--dst-mac", b.mac]),
                  timeout=self.seconds + 60)
        if r.returncode != 0:
            raise RuntimeError("traffic source failed: " + r.stderr.strip()[-300:])
        return r.stdout

    def run_slip(self, mode):
        a, b = self.tb.host("a"), self.tb.host("b")
        long = str(self.seconds + 60)
        if mode == "txonly":
            sink = self.start_slip(b, self.bench_cmd(b, "rxdrop", long, self.pin_other))
            try:
                r = a.run(self.bench_cmd(a, "txonly", self.seconds, self.pin_dut, ["--dst-mac", b.mac]),
                          timeout=self.seconds + 60)
            finally:
                self.stop(sink)
            if r.returncode != 0:
                raise RuntimeError(r.stderr.strip()[-300:])
            return steady_rate(self.slip_samples(r.stdout, "tx"))
        dut = self.start_slip(b, self.bench_cmd(b, mode, long, self.pin_dut))
        src = ""
        try:
            src = self.source(a, b)
        finally:
            out, err = self.stop(dut)
        if dut.returncode != 0:
            raise RuntimeError(err.strip()[-300:])
        # Whether the receiver kept up: if it took every frame the source sent, the rate is the
        # source's (on veth the copy into the receiver's UMEM runs in the sender's transmit).
        sent = re.search(r"tx_pkts=(\d+)", src or "")
        got = re.search(r"^result mode=\S+ .*rx_pkts=(\d+)", out, re.M)
        # rx_dropped counts every frame the kernel could not hand over (RX ring full or no fill
        # entry: those are also counted on their own, so they are not added again).
        st = re.search(r"xdp_stats rx_dropped=(\d+)", out)
        if sent and got and st:
            self.received.setdefault(mode, []).append(
                (int(sent.group(1)), int(got.group(1)), int(st.group(1))))
        return steady_rate(self.slip_samples(out, "rx" if mode == "rxdrop" else "tx"))

    def run_testpmd(self, mode):
        a, b = self.tb.host("a"), self.tb.host("b")
        fwd = TESTPMD_FWD[mode]
        key = "Rx" if mode == "rxdrop" else "Tx"
        if mode == "txonly":
            sink = self.start_slip(b, self.bench_cmd(b, "rxdrop", str(self.seconds + 60), self.pin_other))
            try:
                p = a.popen(self.testpmd_cmd(a, fwd, b.mac), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
                if not self.wait_xdp(a, p):
                    out, _ = self.stop(p)
                    raise RuntimeError("testpmd did not start: " + last_line(out))
                time.sleep(self.seconds)
                out, _ = self.stop(p)
            finally:
                self.stop(sink)
            return steady_rate(self.testpmd_samples(out, key))
        p = b.popen(self.testpmd_cmd(b, fwd, a.mac), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    text=True)
        try:
            if not self.wait_xdp(b, p):
                out, _ = self.stop(p)
                raise RuntimeError("testpmd did not start: " + last_line(out))
            self.source(a, b)
        finally:
            out, _ = self.stop(p)
        return steady_rate(self.testpmd_samples(out, key))


def last_line(out):
    lines = [l for l in (out or "").strip().splitlines() if l.strip()]
    for l in reversed(lines):
        if "Cause:" in l or "error" in l.lower() or "fail" in l.lower():
            return l.strip()[:200]
    return (lines[-1].strip() if lines else "no output")[:200]


def run(repo, build_dir, quick=False, prefix="slx"):
    """Runs the benchmark and returns the markdown table (a string)."""
    sys.path.insert(0, str(repo / "tests" / "system"))
    from testbed import Testbed, Topology  # noqa: E402  (imported by path on purpose)

    slip = build_dir / "slipstream"
    if not os.access(slip, os.X_OK):
        return f"xsk: {slip} is not built (run make)\n"
    seconds = 3 if quick else 6
    rounds = 1 if quick else 2
    why_no_testpmd = ensure_testpmd()
    rows = []
    runner = None
    tb = Testbed(Topology(), prefix=prefix)
    try:
        tb.up()
        runner = Runner(tb, slip, seconds)
        for mode in MODES:
            # Alternate the tools and keep each one's best round: the machine may be shared, and
            # a neighbour's burst of CPU should not decide the comparison.
            s_vals, t_vals, s_err, t_err = [], [], None, why_no_testpmd
            for rnd in range(rounds):
                try:
                    s_vals.append(runner.run_slip(mode) / 1e6)
                except Exception as e:  # noqa: BLE001 - report in the table, go on
                    s_err = f"failed: {e}"
                if not why_no_testpmd:
                    try:
                        t_vals.append(runner.run_testpmd(mode) / 1e6)
                    except Exception as e:  # noqa: BLE001
                        t_err = f"failed: {e}"
                log(f"{mode} round {rnd + 1}: slipstream {s_vals[-1:] or s_err} testpmd {t_vals[-1:] or t_err}")
            s = max(s_vals) if s_vals else None
            t = max(t_vals) if t_vals else None
            s_txt = f"{s:.3f}" if s is not None else s_err
            t_txt = f"{t:.3f}" if t is not None else t_err
            ratio = f"{s / t:.2f}" if s and t else "-"
            rows.append((mode, s_txt, t_txt, ratio))
    finally:
        tb.down()
    lines = [f"AF_XDP copy mode on one veth queue, 64-byte UDP frames, {seconds} s per run "
             f"(median of per-second samples, best of {rounds} alternating round(s))", "",
             "| mode | slipstream Mpps | testpmd Mpps | ratio |", "|---|---|---|---|"]
    lines += [f"| {m} | {s} | {t} | {r} |" for m, s, t, r in rows]
    notes = []
    for mode in ("rxdrop", "l2fwd"):
        for i, (sent, got, drop) in enumerate(runner.received.get(mode, []) if runner else []):
            notes.append(f"{mode} round {i + 1}: the source sent {sent:,} frames, slipstream received "
                         f"{got:,}, the kernel dropped {drop:,} (ring full or fill ring empty)")
    if notes:
        lines += ["", "- receiver side (slipstream's runs): " + "; ".join(notes) + ". A receiver that "
                  "takes every frame sent is measuring the source's rate: on veth the copy into the "
                  "receiver's UMEM runs inside the sender's transmit, on the sender's core. Frames "
                  "neither received nor dropped by the AF_XDP socket were lost before it (veth's "
                  "own queue)."]
    return "\n".join(lines) + "\n"
