"""TCP on slipstream against the kernel's TCP, on the two-host namespace testbed (a=198.18.0.1,
b=198.18.0.2). The client in host a is always the kernel (tests/prog/kernel_tool); the server in
host b is kernel_tool ("kernel") or tests/prog/tcp_tool on the stack ("slipstream").

The kernel is measured twice: plain, and with an XDP program attached to b's veth0 that passes
everything (tests/prog/steer_ctl claiming only UDP port 9). Attaching any XDP program to a veth
makes its peer drop TSO (TESTBED.md), so "XDP attached" is what the kernel's own TCP costs when it
shares the interface with the stack; slipstream always has its program attached.

Workloads: bulk a->b and b->a (1 GiB, 256 MiB with --quick) and 64-byte request/response
(kernel_tool rr, 20,000 requests). Throughput and latency come from the client, the same program
in every configuration. Server CPU is the server process's own utime+stime from after it printed
"ready" to its exit (wait4 rusage), or across the rr run for the echo servers (schedstat). The
kernel does much of its TCP work in softirq context, often on the client's CPU, so the kernel's
server CPU undercounts the kernel's total work; the stack's is all of it on b's side. Server
pinned to CPU 1, client (and the stack's data generator) to CPU 0. Every measurement runs twice,
configurations alternating; the table keeps each configuration's best run, and every run goes to
stderr.
"""

import json
import os
import re
import select
import shlex
import signal
import subprocess
import sys
import threading
import time

GiB = 1 << 30
MiB = 1 << 20
RR_COUNT = 20000
RR_SIZE = 64
ROUNDS = 2
CONFIGS = ["plain", "xdp", "slip"]    # kernel plain, kernel with XDP attached, slipstream
STEER_DUMMY_UDP = "9"                  # steer_ctl claims only this port: every TCP frame passes
# Counters of tcp_tool --counters worth a look after a run (nonzero ones are logged).
COUNTER_RE = re.compile(r"^(tcp\.(retransmits|rto_expiries|fast_retransmits|ooo_drops|rcvbuf_drops|"
                        r"no_frame|out_of_window|segs_in|segs_out)|xsk\.\S+|stack\.\S+|pool\.low_water)$")


def log(msg):
    print(f"[tcp] {msg}", file=sys.stderr, flush=True)


def cpu_pin(cpu):
    return ["taskset", "-c", str(cpu)] if (os.cpu_count() or 1) >= 2 else []


def proc_cpu_s(pid):
    """CPU seconds a live process has used: schedstat's exact runtime, else stat's ticks."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu():
    """Per-CPU (busy, softirq) jiffies from /proc/stat: where the time went, whoever spent it."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            m = re.match(r"^cpu(\d+) (.*)", line)
            if m:
                v = [int(x) for x in m.group(2).split()]
                busy = v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)
                out[int(m.group(1))] = (busy, v[6])
    return out


def machine_busy_s(before, after):
    return sum(after[c][0] - before[c][0] for c in after) / os.sysconf("SC_CLK_TCK")


def machine_delta(before, after):
    hz = os.sysconf("SC_CLK_TCK")
    return " ".join(f"cpu{c}: busy {(after[c][0] - before[c][0]) / hz:.2f}s "
                    f"softirq {(after[c][1] - before[c][1]) / hz:.2f}s" for c in sorted(after))


class Proc:
    """A process in a host, its stdout/stderr collected by threads, reaped with wait4 so its
    rusage (CPU) is known. The process is the command itself: the testbed's wrapper and taskset
    exec into it."""

    def __init__(self, host, cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=None):
        self.cmd = cmd
        self.lines = {"out": [], "err": []}
        self.cond = threading.Condition()
        self.p = host.popen(cmd, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, text=True,
                            env=env)
        self.threads = []
        for key, pipe in (("out", self.p.stdout), ("err", self.p.stderr)):
            if pipe is not None:
                t = threading.Thread(target=self._reader, args=(key, pipe), daemon=True)
                t.start()
                self.threads.append(t)
        self.rusage_cpu = None

    def _reader(self, key, pipe):
        for line in pipe:
            with self.cond:
                self.lines[key].append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    @property
    def pid(self):
        return self.p.pid

    def wait_line(self, key, pred, timeout):
        """The first line of stdout/stderr matching pred, or None on timeout/exit."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for line in self.lines[key]:
                    if pred(line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or (self.p.poll() is not None and
                                 not any(t.is_alive() for t in self.threads)):
                    return None
                self.cond.wait(min(left, 0.2))

    def reap(self, timeout):
        """Waits for the exit (killing after timeout); returns the rusage CPU seconds."""
        deadline = time.monotonic() + timeout
        while True:
            pid, status, ru = os.wait4(self.p.pid, os.WNOHANG)
            if pid:
                self.p.returncode = os.waitstatus_to_exitcode(status)
                self.rusage_cpu = ru.ru_utime + ru.ru_stime
                break
            if time.monotonic() > deadline:
                self.p.kill()
                deadline = time.monotonic() + 5
            time.sleep(0.02)
        for t in self.threads:
            t.join(5)
        return self.rusage_cpu

    def text(self, key):
        with self.cond:
            return "\n".join(self.lines[key])

    def tail(self, n=600):
        return (self.text("err") + "\n" + self.text("out")).strip()[-n:]


def last_json(text):
    for line in reversed((text or "").splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


def counters_of(text):
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^([A-Za-z_][\w.]*) (\d+)$", text or "", re.M)}


def interesting(c):
    return {k: v for k, v in sorted(c.items()) if v and COUNTER_RE.match(k)}


class Bench:
    def __init__(self, tb, build, nbytes):
        self.tb = tb
        self.a, self.b = tb.host("a"), tb.host("b")
        self.tcp_tool = str(build / "tests" / "prog" / "tcp_tool")
        self.kernel_tool = str(build / "tests" / "prog" / "kernel_tool")
        self.steer_ctl = str(build / "tests" / "prog" / "steer_ctl")
        self.nbytes = nbytes
        self.port = 6000
        self.steer = None
        self.counters = {}        # (workload, config) -> list of counter dicts (slipstream)

    def next_port(self):
        # A fresh port per run: nothing of the last run (TIME_WAIT, a lingering stack) can interfere.
        self.port += 1
        return self.port

    # -- the XDP program for "kernel (XDP attached)" ----------------------------------------------
    def xdp_on(self, ifname):
        out = self.b.run(["ip", "link", "show", ifname], timeout=10).stdout
        return re.search(r"\bxdp(generic|drv|offload)?\b", out) is not None

    def set_config(self, cfg):
        """Attaches steer_ctl for "xdp", makes sure nothing is attached otherwise."""
        want = cfg == "xdp"
        if want and self.steer is None:
            p = Proc(self.b, [self.steer_ctl, "--iface", self.b.ifname, "--udp", STEER_DUMMY_UDP],
                     stdin=subprocess.PIPE)
            if not p.wait_line("out", lambda l: l.startswith("attached"), 20):
                p.p.kill()
                p.reap(5)
                raise RuntimeError("steer_ctl did not attach: " + p.tail())
            self.steer = p
            log(f"XDP attached to b:{self.b.ifname} ({p.text('out').strip()})")
        elif not want and self.steer is not None:
            p, self.steer = self.steer, None
            p.p.stdin.close()
            p.reap(10)
            log("XDP detached; steer_ctl counters: " + " ".join(p.text("out").split()[1:]))
        if cfg == "slip":
            return
        feats = self.a.run(["ethtool", "-k", self.a.ifname], timeout=10).stdout
        keep = ("tcp-segmentation-offload", "generic-segmentation-offload", "generic-receive-offload",
                "tx-checksumming")
        log(f"{cfg}: a:{self.a.ifname} " + ", ".join(
            l.strip() for l in feats.splitlines() if l.strip().split(":")[0] in keep))
        for _ in range(50):     # a stack that just exited may take a moment to let go of it
            if self.xdp_on(self.b.ifname) == want:
                return
            time.sleep(0.1)
        raise RuntimeError(f"XDP on b:{self.b.ifname} should be {'on' if want else 'off'} for {cfg}")

    # -- servers in b ----------------------------------------------------------------------------
    def start_server(self, cfg, args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE):
        """kernel_tool ARGS or tcp_tool ARGS, pinned to CPU 1; returns (proc, cpu at ready)."""
        if cfg == "slip":
            cmd = [*cpu_pin(1), self.tcp_tool, "--iface", self.b.ifname, "--counters", *args]
            p = Proc(self.b, cmd, stdin=stdin, stdout=stdout)
            ok = p.wait_line("err", lambda l: l.startswith("ready"), 30)
        else:
            cmd = [*cpu_pin(1), self.kernel_tool, *args]
            p = Proc(self.b, cmd, stdin=stdin, stdout=stdout)
            ok = p.wait_line("out", lambda l: l.startswith('{"listening"'), 30)
        if not ok:
            if p.p.poll() is None:
                p.p.kill()
            p.reap(5)
            raise RuntimeError(f"server did not start: {shlex.join(cmd)}: {p.tail()}")
        return p, proc_cpu_s(p.pid)

    def client(self, args, timeout):
        cmd = [*cpu_pin(0), self.kernel_tool, *args]
        r = self.a.run(cmd, timeout=timeout)
        j = last_json(r.stdout)
        if r.returncode != 0 or not j:
            raise RuntimeError(f"client {shlex.join(cmd)} exited {r.returncode}: "
                               f"{(r.stderr or r.stdout).strip()[-400:]}")
        return j

    def finish_server(self, p, cpu0, cfg, workload):
        cpu = p.reap(60) - cpu0
        if p.p.returncode != 0:
            raise RuntimeError(f"server exited {p.p.returncode}: {p.tail()}")
        if cfg == "slip":
            c = counters_of(p.text("err") + "\n" + p.text("out"))
            self.counters.setdefault(workload, []).append(c)
            log(f"  {workload} slipstream counters: {interesting(c)}")
            conns = [l for l in (p.text("err") + "\n" + p.text("out")).splitlines()
                     if l.startswith("tcpconn ")]
            for l in conns:
                log(f"  {l}")
        return cpu

    # -- workloads: each returns a dict of metrics -----------------------------------------------
    def bulk_ab(self, cfg):
        port = str(self.next_port())
        if cfg == "slip":
            p, cpu0 = self.start_server(cfg, ["serve-recv", port], stdout=subprocess.DEVNULL)
        else:
            p, cpu0 = self.start_server(cfg, ["serve-recv", port])
        m0 = machine_cpu()
        try:
            j = self.client(["connect-send", self.b.addr, port, str(self.nbytes)],
                            timeout=self.nbytes / 5e6 + 120)
        except BaseException:
            p.p.kill()
            p.reap(5)
            raise
        m1 = machine_cpu()
        cpu = self.finish_server(p, cpu0, cfg, "bulk_ab")
        return self.bulk_metrics(j, cpu, m0, m1)

    def bulk_ba(self, cfg):
        port = str(self.next_port())
        if cfg == "slip":
            gen = self.b.popen([*cpu_pin(0), "head", "-c", str(self.nbytes), "/dev/zero"],
                               stdout=subprocess.PIPE)
            try:
                p, cpu0 = self.start_server(cfg, ["serve-send", port], stdin=gen.stdout)
            finally:
                gen.stdout.close()   # tcp_tool holds the only read end now
        else:
            gen = None
            p, cpu0 = self.start_server(cfg, ["serve-send", port, str(self.nbytes)])
        m0 = machine_cpu()
        try:
            j = self.client(["connect-recv", self.b.addr, port], timeout=self.nbytes / 5e6 + 120)
        except BaseException:
            p.p.kill()
            p.reap(5)
            raise
        finally:
            if gen is not None:
                try:
                    gen.wait(10)
                except subprocess.TimeoutExpired:
                    gen.kill()
        m1 = machine_cpu()
        cpu = self.finish_server(p, cpu0, cfg, "bulk_ba")
        if j.get("bytes") != self.nbytes:
            raise RuntimeError(f"client received {j.get('bytes')} bytes, not {self.nbytes}")
        return self.bulk_metrics(j, cpu, m0, m1)

    def bulk_metrics(self, j, cpu, m0, m1):
        if j.get("bytes") != self.nbytes:
            raise RuntimeError(f"transfer moved {j.get('bytes')} bytes, not {self.nbytes}")
        secs = float(j["seconds"])
        return {"mbps": self.nbytes / secs / 1e6, "seconds": secs, "cpu_s": cpu,
                "cpu_per_gib": cpu / (self.nbytes / GiB), "busy": 100.0 * cpu / secs,
                "all_per_gib": machine_busy_s(m0, m1) / (self.nbytes / GiB),
                "machine": machine_delta(m0, m1)}

    def rr(self, cfg):
        port = str(self.next_port())
        p, _ = self.start_server(cfg, ["echo", port])
        m0 = machine_cpu()
        try:
            c0 = proc_cpu_s(p.pid)
            j = self.client(["rr", self.b.addr, port, str(RR_COUNT), str(RR_SIZE)], timeout=300)
            c1 = proc_cpu_s(p.pid)
        finally:
            m1 = machine_cpu()
            if p.p.poll() is None:
                p.p.send_signal(signal.SIGTERM)
        self.finish_server_echo(p, cfg)
        cpu = c1 - c0
        secs = float(j["seconds"])
        return {"p50": j["p50_us"], "p99": j["p99_us"], "p999": j["p999_us"], "rps": j["rps"],
                "seconds": secs, "cpu_s": cpu, "cpu_per_k": cpu / (RR_COUNT / 1000),
                "busy": 100.0 * cpu / secs, "all_per_k": machine_busy_s(m0, m1) / (RR_COUNT / 1000),
                "machine": machine_delta(m0, m1)}

    def finish_server_echo(self, p, cfg):
        p.reap(20)
        # kernel_tool echo has no SIGTERM handler: dying of it is its normal end.
        if cfg == "slip":
            if p.p.returncode != 0:
                raise RuntimeError(f"tcp_tool echo exited {p.p.returncode}: {p.tail()}")
            c = counters_of(p.text("out"))
            self.counters.setdefault("rr", []).append(c)
            log(f"  rr slipstream counters: {interesting(c)} "
                f"echo: { {k: v for k, v in c.items() if k.startswith('echo.')} }")


def generator_alone(nbytes):
    """The stack's b->a data source with a reader that only discards, pinned like the real run."""
    cmd = (f"{shlex.join([*cpu_pin(0), 'head', '-c', str(nbytes), '/dev/zero'])} | "
           f"{shlex.join([*cpu_pin(1), 'cat'])} > /dev/null")
    best = 0.0
    for _ in range(ROUNDS):
        t0 = time.monotonic()
        subprocess.run(["sh", "-c", cmd], check=True)
        best = max(best, nbytes / (time.monotonic() - t0) / 1e6)
    return best, cmd


def fmt(v, nd=1):
    return "-" if v is None else f"{v:.{nd}f}"


def ratio(s, k):
    return f"{s / k:.2f}" if s is not None and k else "-"


def run(repo, build_dir, quick=False, prefix="slq"):
    """Runs the benchmark and returns the markdown table (a string)."""
    sys.path.insert(0, str(repo / "tests" / "system"))
    from testbed import Testbed, Topology  # noqa: E402  (imported by path on purpose)

    need = [build_dir / "tests" / "prog" / n for n in ("tcp_tool", "kernel_tool", "steer_ctl")]
    missing = [str(p) for p in need if not os.access(p, os.X_OK)]
    if missing:
        return ("tcp: not built: " + ", ".join(missing) +
                f" (ninja -C {build_dir} tests/prog/tcp_tool tests/prog/kernel_tool tests/prog/steer_ctl)\n")
    nbytes = 256 * MiB if quick else GiB
    command = (f"SLIP_NS_PREFIX={prefix} " if os.environ.get("SLIP_NS_PREFIX") else "") + \
        shlex.join([os.path.relpath(sys.argv[0], repo) if sys.argv[0].startswith(str(repo))
                    else sys.argv[0], *sys.argv[1:]])

    gen_mbps, gen_cmd = generator_alone(nbytes)
    log(f"generator alone ({gen_cmd}): {gen_mbps:.0f} MB/s")

    workloads = [("bulk_ab", "bulk a->b"), ("bulk_ba", "bulk b->a"), ("rr", "rr")]
    results = {w: {c: [] for c in CONFIGS} for w, _ in workloads}
    errors = {w: {} for w, _ in workloads}
    tb = Testbed(Topology(), prefix=prefix)
    bench = None
    try:
        tb.up()
        bench = Bench(tb, build_dir, nbytes)
        for w, label in workloads:
            for rnd in range(ROUNDS):
                for cfg in CONFIGS:
                    try:
                        bench.set_config(cfg)
                        r = getattr(bench, w)(cfg)
                        results[w][cfg].append(r)
                        show = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}
                        log(f"{label} round {rnd + 1} {cfg}: {show}")
                    except Exception as e:  # noqa: BLE001 - report in the table, go on
                        errors[w][cfg] = f"failed: {str(e)[:300]}"
                        log(f"{label} round {rnd + 1} {cfg}: FAILED: {e}")
            bench.set_config("plain")
    finally:
        try:
            if tb.is_up and bench is not None and bench.steer is not None:
                bench.set_config("plain")
        finally:
            tb.down()

    def best(w, cfg, key):
        """Each metric's best over the runs: a neighbour's burst of CPU spoils one run's tail
        latency without touching the other's. Utilisation comes from the fastest run."""
        runs = results[w][cfg]
        if not runs:
            return None
        if key in ("mbps", "rps"):
            return max(r[key] for r in runs)
        if key == "busy":
            return max(runs, key=lambda r: r["rps" if w == "rr" else "mbps"])[key]
        return min(r[key] for r in runs)

    rows = []

    def row(name, w, key, nd=1, with_ratio=True):
        vals = {c: best(w, c, key) for c in CONFIGS}
        cells = [fmt(vals[c], nd) if vals[c] is not None else errors[w].get(c, "-") for c in CONFIGS]
        rx = ratio(vals["slip"], vals["xdp"]) if with_ratio else "-"
        rp = ratio(vals["slip"], vals["plain"]) if with_ratio else "-"
        rows.append(f"| {name} | {' | '.join(cells)} | {rx} | {rp} |")

    size = f"{nbytes // MiB} MiB" if nbytes < GiB else f"{nbytes // GiB} GiB"
    row(f"bulk a->b {size}, MB/s", "bulk_ab", "mbps")
    row("bulk a->b server CPU s/GiB", "bulk_ab", "cpu_per_gib", 2)
    row("bulk a->b server CPU % of a core", "bulk_ab", "busy", 0, with_ratio=False)
    row("bulk a->b all CPUs s/GiB (machine-wide)", "bulk_ab", "all_per_gib", 2)
    row(f"bulk b->a {size}, MB/s", "bulk_ba", "mbps")
    row("bulk b->a server CPU s/GiB", "bulk_ba", "cpu_per_gib", 2)
    row("bulk b->a server CPU % of a core", "bulk_ba", "busy", 0, with_ratio=False)
    row("bulk b->a all CPUs s/GiB (machine-wide)", "bulk_ba", "all_per_gib", 2)
    row(f"rr {RR_SIZE} B p50 µs", "rr", "p50")
    row(f"rr {RR_SIZE} B p99 µs", "rr", "p99")
    row(f"rr {RR_SIZE} B p99.9 µs", "rr", "p999")
    row(f"rr {RR_SIZE} B requests/s", "rr", "rps", 0)
    row("rr server CPU s/1000 req", "rr", "cpu_per_k", 3)
    row("rr server CPU % of a core", "rr", "busy", 0, with_ratio=False)
    row("rr all CPUs s/1000 req (machine-wide)", "rr", "all_per_k", 3)

    rexmt = []
    for w, label in workloads:
        cs = bench.counters.get(w, []) if bench is not None else []
        if cs:
            rexmt.append(f"{label} " + "/".join(str(c.get("tcp.retransmits", "?")) for c in cs))

    lines = [
        f"`{command}`", "",
        f"TCP, kernel client in host a (kernel_tool, CPU 0) -> server in host b (CPU 1): kernel_tool "
        f"(kernel) or tcp_tool on the stack (slipstream); one veth pair, 1 queue. Best of {ROUNDS} "
        f"alternating runs per number (highest MB/s and requests/s, lowest latency and CPU; all "
        f"runs on stderr). Ratios are slipstream / kernel.", "",
        "| workload | kernel (plain) | kernel (XDP attached) | slipstream | ratio vs XDP-attached "
        "| ratio vs plain |",
        "|---|---|---|---|---|---|",
        *rows, "",
        f"- bulk: `kernel_tool connect-send 198.18.0.2 PORT {nbytes}` / `kernel_tool connect-recv "
        f"198.18.0.2 PORT` in a (MB/s = 10^6 B/s from the client's JSON); b: `kernel_tool serve-recv "
        f"PORT` / `kernel_tool serve-send PORT {nbytes}` vs `tcp_tool --iface veth0 --counters "
        f"serve-recv PORT > /dev/null` / `head -c {nbytes} /dev/zero | tcp_tool --iface veth0 "
        f"--counters serve-send PORT`.",
        f"- the b->a generator alone (`{gen_cmd}`): {gen_mbps:.0f} MB/s.",
        f"- rr: `kernel_tool rr 198.18.0.2 PORT {RR_COUNT} {RR_SIZE}` against `kernel_tool echo PORT` "
        f"vs `tcp_tool --iface veth0 --counters echo PORT`.",
        f"- XDP attached: `steer_ctl --iface veth0 --udp {STEER_DUMMY_UDP}` in b (passes all TCP). "
        "The testbed turns TX checksum offload off on every veth (the stack needs full checksums), "
        "which also turns TSO off: \"plain\" is already the kernel without TSO (software GSO, GRO "
        "off), and attaching XDP leaves a's GSO on, so the XDP-attached cost here comes from veth's "
        "XDP receive path in b, not from losing TSO.",
        "- on veth, a copy-mode AF_XDP TX kick (sendto) runs the peer's receive softirq in the "
        "sender's syscall, so the stack's server CPU includes kernel work done for host a (and a "
        "kernel sender's CPU includes the same).",
        "- server CPU: the server process only (utime+stime); the kernel's softirq work done on "
        "other CPUs or in other contexts is not in it. All CPUs: busy time of both cores from "
        "/proc/stat during the client's run (client, softirq, server; and anything else the shared "
        "machine ran meanwhile).",
    ]
    if rexmt:
        lines.append("- slipstream tcp.retransmits per run: " + "; ".join(rexmt) + ".")
    return "\n".join(lines) + "\n"
