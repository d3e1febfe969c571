"""Unmodified applications on the kernel and under `slipstream run`, side by side, on the two-host
namespace testbed (a=198.18.0.1, b=198.18.0.2): nginx (keep-alive and Connection: close, wrk),
sockperf ping-pong (UDP and TCP, both ends accelerated), redis (redis-benchmark), memcached
(memcslap) and iperf3 (against the kernel plain and with an XDP program attached).

The server runs in b pinned to CPU 1, the load generator in a pinned to CPU 0, on the kernel
(except sockperf's client, which runs under `slipstream run` too in the slipstream configuration).
Every measurement runs twice, configurations alternating; the table keeps each configuration's
best run (highest rate, lowest latency and CPU), and every run is printed to stderr. Server CPU is
the run time (schedstat) of the server's whole process tree (nginx master and worker) from /proc during the
load generator's run; "all CPUs" is both cores' busy time from /proc/stat over the same window.
Where a program fails under slipstream (or falls back to the kernel), its row says so.

SLIP_BENCH_APPS=nginx,sockperf,redis,memcached,iperf3 (comma list) limits the run to some of them.
SLIP_BENCH_NGINX_LISTEN=dual makes nginx listen on `[::]:PORT ipv6only=off` (a dual-stack AF_INET6
socket, issue 16) instead of 198.18.0.2:PORT; wrk still connects over IPv4.
"""

import importlib.util
import json
import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROUNDS = 2
PORT_BASE = 7000
ALL = ["nginx", "sockperf", "redis", "memcached", "iperf3", "neighbour", "workers", "threads"]


def _load_tcp():
    """bench/tcp.py's helpers (Proc, CPU accounting, pinning), imported by path like bench/run."""
    spec = importlib.util.spec_from_file_location("slip_bench_tcp_helpers", HERE / "tcp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


T = _load_tcp()
Proc, cpu_pin, machine_cpu, machine_busy_s, machine_delta = (
    T.Proc, T.cpu_pin, T.machine_cpu, T.machine_busy_s, T.machine_delta)


def log(msg):
    print(f"[apps] {msg}", file=sys.stderr, flush=True)


def tree_cpu_s(root):
    """CPU seconds of a live process and its live descendants, every thread: the sum of the
    tasks' schedstat run times (exact), falling back to stat's utime+stime ticks."""
    hz = os.sysconf("SC_CLK_TCK")
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                pass
    kids = {}
    for pid, ppid in parent.items():
        kids.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid not in parent:
            continue
        todo.extend(kids.get(pid, []))
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0]) / 1e9
            except (OSError, ValueError, IndexError):
                try:
                    with open(f"/proc/{pid}/task/{tid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    total += (int(fields[11]) + int(fields[12])) / hz
                except OSError:
                    pass
    return total


def fallback_line(text):
    """The launcher's or library's 'not accelerated' warning, if the program ran on the kernel."""
    for line in (text or "").splitlines():
        if "slipstream" in line and ("not accelerated" in line or "error" in line.lower()):
            return line.strip()
    return None


def one_line(s, n=240):
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[:n] + "..."


class Apps:
    def __init__(self, tb, build, quick, tmp):
        self.tb = tb
        self.a, self.b = tb.host("a"), tb.host("b")
        self.slip = str(build / "slipstream")
        self.steer_ctl = str(build / "tests" / "prog" / "steer_ctl")
        self.http_threads = str(build / "tests" / "prog" / "http_threads")
        self.quick = quick
        self.tmp = tmp
        self.port = PORT_BASE
        self.steer = None
        # where nginx/sockperf listen and clients connect: b's IPv4 address unless bench/v6.py
        # points them at b's IPv6 one; and the sockperf to run (v6.py: one that takes IPv6)
        self.dst = self.b.addr
        self.sockperf_bin = "sockperf"

    def dst_host(self):
        """self.dst as it goes in a URL or an nginx listen directive: IPv6 in brackets."""
        return f"[{self.dst}]" if ":" in self.dst else self.dst

    def next_port(self):
        # A fresh port per server start: TIME_WAIT or a lingering stack of the last run cannot interfere.
        self.port += 1
        return self.port

    # -- running things ----------------------------------------------------------------------
    # Configurations: "kernel" (both ends on the kernel), "slip" (the server in b under
    # `slipstream run`, the load generator on the kernel), "both" (both ends under slipstream).
    @staticmethod
    def server_cfg(cfg):
        return "kernel" if cfg == "kernel" else "slip"

    @staticmethod
    def client_cfg(cfg):
        return "slip" if cfg == "both" else "kernel"

    def wrap(self, cfg, cmd, profile=None, cpu=1):
        """CMD pinned to `cpu`, under `slipstream run --iface veth0` for cfg "slip"."""
        if cfg != "slip":
            return [*cpu_pin(cpu), *cmd]
        prof = ["--profile", profile] if profile else []
        return [*cpu_pin(cpu), self.slip, "run", "--iface", "veth0", *prof, "--", *cmd]

    def probe_tcp(self, port):
        r = self.a.run(["timeout", "2", "bash", "-c", f"echo -n > /dev/tcp/{self.dst}/{port}"],
                       timeout=10)
        return r.returncode == 0

    def start(self, cfg, cmd, ready, profile=None, timeout=30):
        """Starts a server in b; `ready` is a port to probe over TCP or a predicate on output lines."""
        full = self.wrap(cfg, cmd, profile)
        p = Proc(self.b, full)
        deadline = time.monotonic() + timeout
        ok = False
        while time.monotonic() < deadline and p.p.poll() is None:
            if callable(ready):
                if any(ready(l) for l in p.text("out").splitlines() + p.text("err").splitlines()):
                    ok = True
                    break
                time.sleep(0.1)
            else:
                if self.probe_tcp(ready):
                    ok = True
                    break
                time.sleep(0.2)
        if not ok:
            self.stop(p)
            raise RuntimeError(f"server did not start: {shlex.join(full)}: {one_line(p.tail())}")
        if cfg == "slip":
            fb = fallback_line(p.text("err") + "\n" + p.text("out"))
            if fb:
                self.stop(p)
                raise RuntimeError(f"ran on the kernel, not the stack: {fb}")
        return p

    def stop(self, p, sig=signal.SIGTERM):
        if p.p.poll() is None:
            try:
                p.p.send_signal(sig)
            except ProcessLookupError:
                pass
        p.reap(15)

    def client(self, cmd, timeout, cfg="kernel", profile=None):
        """Runs the load generator in a (pinned to CPU 0); returns (stdout+stderr text, seconds)."""
        full = self.wrap(cfg, cmd, profile, cpu=0)
        t0 = time.monotonic()
        try:
            r = self.a.run(full, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"timed out after {timeout} s: {shlex.join(cmd)}")
        secs = time.monotonic() - t0
        text = (r.stdout or "") + "\n" + (r.stderr or "")
        if r.returncode != 0:
            raise RuntimeError(f"{shlex.join(cmd)} exited {r.returncode}: {one_line(text[-400:])}")
        if cfg == "slip":
            fb = fallback_line(text)
            if fb:
                raise RuntimeError(f"client ran on the kernel, not the stack: {fb}")
        return text, secs

    def measured(self, server, fn):
        """Runs fn() (the client) and returns (its result, server CPU s, all-CPU s, machine text)."""
        c0 = tree_cpu_s(server.pid)
        m0 = machine_cpu()
        res = fn()
        m1 = machine_cpu()
        c1 = tree_cpu_s(server.pid)
        if server.p.poll() is not None:
            raise RuntimeError(f"server died during the run: {one_line(server.tail())}")
        return res, c1 - c0, machine_busy_s(m0, m1), machine_delta(m0, m1)

    # -- the XDP program for iperf3's "kernel (XDP attached)" ------------------------------------
    def xdp(self, want):
        if want and self.steer is None:
            p = Proc(self.b, [self.steer_ctl, "--iface", self.b.ifname, "--udp", T.STEER_DUMMY_UDP],
                     stdin=subprocess.PIPE)
            if not p.wait_line("out", lambda l: l.startswith("attached"), 20):
                p.p.kill()
                p.reap(5)
                raise RuntimeError("steer_ctl did not attach: " + one_line(p.tail()))
            self.steer = p
        elif not want and self.steer is not None:
            p, self.steer = self.steer, None
            p.p.stdin.close()
            p.reap(10)
        for _ in range(50):
            out = self.b.run(["ip", "link", "show", self.b.ifname], timeout=10).stdout
            if (re.search(r"\bxdp(generic|drv)?\b", out) is not None) == want:
                return
            time.sleep(0.1)
        raise RuntimeError(f"XDP on b:veth0 should be {'on' if want else 'off'}")

    # -- nginx -----------------------------------------------------------------------------------
    def nginx_conf(self, port, workers=1):
        d = pathlib.Path(tempfile.mkdtemp(prefix="nginx-", dir=self.tmp))
        root = d / "www"
        root.mkdir()
        (root / "1k.bin").write_bytes(os.urandom(1024))
        # the worker runs as "nobody": it must be able to reach and read the file
        for path, mode in ((d, 0o755), (root, 0o755), (root / "1k.bin", 0o644)):
            os.chmod(path, mode)
        text = (HERE / "apps" / "nginx.conf.in").read_text()
        dual = os.environ.get("SLIP_BENCH_NGINX_LISTEN") == "dual"
        for k, v in (("@DIR@", str(d)), ("@ROOT@", str(root)), ("@ADDR@", "[::]" if dual else self.dst_host()),
                     ("@PORT@", f"{port} ipv6only=off" if dual else str(port))):
            text = text.replace(k, v)
        if workers > 1:
            # A listener per worker (SO_REUSEPORT): under slipstream each worker moves to a stack
            # of its own (docs/ARCHITECTURE.md, "a stack per worker").
            text = text.replace("worker_processes 1;", f"worker_processes {workers};")
            text = text.replace(" backlog=4096;", " backlog=4096 reuseport;")
        conf = d / "nginx.conf"
        conf.write_text(text)
        return conf

    def hold_idle(self, port, n):
        """n idle keep-alive connections to nginx from a (kernel), held until stop()."""
        p = Proc(self.a, [sys.executable, "-c", IDLE_HOLDER, self.b.addr, str(port), str(n)],
                 stdin=subprocess.PIPE)
        if not p.wait_line("out", lambda l: l.startswith("open"), 60):
            p.p.kill()
            p.reap(5)
            raise RuntimeError("idle connections not opened: " + one_line(p.tail()))
        return p

    def nginx(self, cfg, secs, subs=("ka16", "ka64", "ka256", "idle", "close")):
        """All nginx rows of one configuration from one nginx: keep-alive 16/64/256, keep-alive 16
        beside IDLE idle connections, then close (those of them named in subs)."""
        port = self.next_port()
        conf = self.nginx_conf(port)
        srv = self.start(self.server_cfg(cfg), ["nginx", "-c", str(conf)], port)
        out = {}
        url = f"http://{self.dst_host()}:{port}/1k.bin"
        try:
            for name, extra, conns in (("ka16", [], 16), ("ka64", [], 64), ("ka256", [], 256),
                                       ("idle", [], 16), ("close", ["-H", "Connection: close"], 16)):
                if name not in subs:
                    continue
                cmd = ["wrk", "-t1", f"-c{conns}", f"-d{secs}s", "--latency", *extra, url]
                holder = None
                try:
                    if name == "idle":
                        holder = self.hold_idle(port, IDLE)
                    (text, _), cpu, allcpu, mach = self.measured(
                        srv, lambda: self.client(cmd, timeout=secs + 60, cfg=self.client_cfg(cfg)))
                    r = parse_wrk(text)
                    k = r["requests"] / 1000.0
                    r.update(cpu_per_k=cpu / k, all_per_k=allcpu / k, machine=mach)
                    out[name] = r
                except Exception as e:  # noqa: BLE001 - one row fails, the others go on
                    out[name] = RuntimeError(one_line(e))
                    if srv.p.poll() is not None:
                        break
                finally:
                    if holder:
                        holder.p.stdin.close()
                        holder.reap(15)
        finally:
            self.stop(srv)
        if cfg != "kernel":
            err = (conf.parent / "error.log")
            tail = err.read_text().strip().splitlines()[-3:] if err.exists() else []
            if tail:
                log("nginx error.log (slip): " + " | ".join(tail))
        return out

    def stack_waits(self):
        """Cross-stack and lock waits summed over every stack `slipstream stat` lists in b, and
        how many stacks there were."""
        st = self.b.run([self.slip, "stat", "--iface", "veth0"], timeout=30)
        keys = ("lock.contended", "group.pool_lock_contended")
        out = {k: 0 for k in keys + ("fill_busy", "comp_busy", "stacks")}
        seen_pool = False
        for line in st.stdout.splitlines():
            f = line.split()
            if line.startswith("stack "):
                out["stacks"] += 1
            elif len(f) == 2 and f[1].isdigit():
                if f[0] == "group.pool_lock_contended":
                    if not seen_pool:      # the group's lock, repeated by every stack
                        out[f[0]] = int(f[1])
                        seen_pool = True
                elif f[0] in keys:
                    out[f[0]] += int(f[1])
                elif f[0].endswith(".fill_busy") or f[0].endswith(".comp_busy"):
                    out[f[0].rsplit(".", 1)[1]] += int(f[1])
        return out

    def wrk_point(self, cfg, srv, cmd, secs):
        """One wrk run against srv: wrk's numbers, requests per server CPU-second and, under
        slipstream, the waits `slipstream stat` counts per 1000 requests (or the error)."""
        try:
            w0 = self.stack_waits() if cfg != "kernel" else None
            (text, _), cpu, allcpu, mach = self.measured(srv, lambda: self.client(cmd, timeout=secs + 60))
            r = parse_wrk(text)
            r.update(per_cpu_s=r["requests"] / cpu if cpu > 0 else 0.0, machine=mach)
            if w0 is not None:
                w1 = self.stack_waits()
                per_k = {k: (w1[k] - w0[k]) / (r["requests"] / 1000.0) for k in w1 if k != "stacks"}
                r.update(waits_per_k=sum(per_k.values()), stacks=w1["stacks"],
                         lock_per_k=per_k["lock.contended"], pool_per_k=per_k["group.pool_lock_contended"],
                         ring_per_k=per_k["fill_busy"] + per_k["comp_busy"])
            return r
        except Exception as e:  # noqa: BLE001
            return RuntimeError(one_line(e))

    def workers(self, cfg, secs):
        """nginx with 1 worker, then 2 workers with `listen ... reuseport` (a stack each under
        slipstream): wrk keep-alive and Connection: close; server CPU per request; after each
        slipstream run, the waits `slipstream stat` counts."""
        out = {}
        for n in (1, 2):
            port = self.next_port()
            conf = self.nginx_conf(port, workers=n)
            srv = self.start(self.server_cfg(cfg), ["nginx", "-c", str(conf)], port)
            url = f"http://{self.b.addr}:{port}/1k.bin"
            try:
                for name, extra in (("ka", []), ("close", ["-H", "Connection: close"])):
                    out[f"{name}{n}"] = self.wrk_point(cfg, srv, ["wrk", "-t1", "-c64", f"-d{secs}s", "--latency",
                                                               *extra, url], secs)
            finally:
                self.stop(srv)
        return out

    def threads(self, cfg, secs):
        """tests/prog/http_threads with 1 thread, then 2 (a SO_REUSEPORT listener and an epoll
        loop each: a stack per thread under slipstream), wrk keep-alive; server CPU per request;
        after each slipstream run, the waits `slipstream stat` counts."""
        out = {}
        for n in (1, 2):
            port = self.next_port()
            srv = self.start(self.server_cfg(cfg), [self.http_threads, str(port), str(n)], port)
            url = f"http://{self.b.addr}:{port}/"
            try:
                out[f"ka{n}"] = self.wrk_point(cfg, srv, ["wrk", "-t1", "-c64", f"-d{secs}s", "--latency", url], secs)
            finally:
                self.stop(srv)
        return out

    # -- sockperf --------------------------------------------------------------------------------
    def sockperf(self, cfg, proto, secs):
        """cfg "kspin": both ends on the kernel, spinning (`--nonblocked`: non-blocking sockets
        polled in a loop), the fair anchor for a spinning stack; the kernel wakes from idle in
        the plain "kernel" runs, which is most of their latency on an idle VM."""
        port = self.next_port()
        tcp = ["--tcp"] if proto == "tcp" else []
        if cfg == "kspin":
            tcp.append("--nonblocked")
            cfg = "kernel"
        srv = self.start(cfg, [self.sockperf_bin, "sr", *tcp, "-i", self.dst, "-p", str(port)],
                         lambda l: "using " in l and "to block" in l,
                         profile="latency")
        try:
            cmd = [self.sockperf_bin, "pp", *tcp, "-i", self.dst, "-p", str(port), "-t", str(secs),
                   "-m", "64"]
            (text, _), cpu, allcpu, mach = self.measured(
                srv, lambda: self.client(cmd, timeout=secs + 60, cfg=cfg, profile="latency"))
        finally:
            self.stop(srv, signal.SIGINT)
        r = parse_sockperf_pp(text)
        k = r["messages"] / 1000.0
        r.update(cpu_per_k=cpu / k, all_per_k=allcpu / k, machine=mach)
        return r

    # -- redis -----------------------------------------------------------------------------------
    def redis(self, cfg, n):
        port = self.next_port()
        srv = self.start(self.server_cfg(cfg), ["redis-server", "--bind", self.b.addr, "--port", str(port),
                               "--save", "", "--appendonly", "no", "--protected-mode", "no",
                               "--daemonize", "no", "--dir", self.tmp], port)
        out = {}
        try:
            for t in ("set", "get"):
                cmd = ["redis-benchmark", "-h", self.b.addr, "-p", str(port), "-q", "-n", str(n),
                       "-t", t, "-c", "50", "-P", "1"]
                try:
                    (text, _), cpu, allcpu, mach = self.measured(
                        srv, lambda: self.client(cmd, timeout=300, cfg=self.client_cfg(cfg)))
                    m = re.search(rf"{t.upper()}: ([\d.]+) requests per second(?:, p50=([\d.]+) msec)?",
                                  text)
                    if not m:
                        raise RuntimeError(f"no result in redis-benchmark output: {one_line(text[-300:])}")
                    out[t] = {"rps": float(m.group(1)),
                              "p50": float(m.group(2)) * 1000 if m.group(2) else None,
                              "cpu_per_k": cpu / (n / 1000), "all_per_k": allcpu / (n / 1000),
                              "machine": mach}
                except Exception as e:  # noqa: BLE001
                    out[t] = RuntimeError(one_line(e))
                    if srv.p.poll() is not None:
                        break
        finally:
            self.stop(srv)
        return out

    # -- neighbour: redis with nginx beside it on the same interface ----------------------------
    def neighbour(self, cfg, n):
        """redis-benchmark SET against redis alone, with an idle nginx started beside it, and
        after that nginx served a 20 MB file (issue 13: programs sharing a stack disturbed each
        other). Same configuration for both servers; the client on the kernel."""
        rport, nport = self.next_port(), self.next_port()
        redis = self.start(self.server_cfg(cfg), ["redis-server", "--bind", self.b.addr, "--port", str(rport),
                                "--save", "", "--appendonly", "no", "--protected-mode", "no",
                                "--daemonize", "no", "--dir", self.tmp], rport)
        conf = self.nginx_conf(nport)
        big = conf.parent / "www" / "big.bin"
        big.write_bytes(os.urandom(20 * 1000 * 1000))
        os.chmod(big, 0o644)
        nginx = None
        out = {}
        cmd = ["redis-benchmark", "-h", self.b.addr, "-p", str(rport), "-n", str(n), "-t", "set", "-c", "16"]

        def one(label):
            try:
                (text, _), cpu, allcpu, mach = self.measured(redis, lambda: self.client(cmd, timeout=300))
                m = re.search(r"throughput summary: ([\d.]+) requests per second", text)
                pct = [(float(a), float(b)) for a, b in re.findall(
                    r"([\d.]+)% <= ([\d.]+) milliseconds \(cumulative", text.split("Cumulative distribution")[0])]
                if not m or not pct:
                    raise RuntimeError(f"no result in redis-benchmark output: {one_line(text[-300:])}")
                p99 = next(b for a, b in pct if a >= 99.0)
                out[label] = {"rps": float(m.group(1)), "p99": p99 * 1000, "cpu_per_k": cpu / (n / 1000)}
            except Exception as e:  # noqa: BLE001
                out[label] = RuntimeError(one_line(e))
        try:
            one("alone")
            nginx = self.start(self.server_cfg(cfg), ["nginx", "-c", str(conf)], nport)
            one("idle")
            r = self.a.run(["curl", "-s", "-o", "/dev/null", "-w", "%{size_download}",
                            f"http://{self.b.addr}:{nport}/big.bin"], timeout=120)
            if r.stdout.strip() != str(20 * 1000 * 1000):
                raise RuntimeError(f"the 20 MB download failed: {one_line(r.stdout + r.stderr)}")
            one("after")
            # ... and while wrk keeps that nginx busy (its own load on the same interface).
            wrk = self.a.popen(["wrk", "-t1", "-c8", "-d60s", f"http://{self.b.addr}:{nport}/"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                time.sleep(1.0)
                one("busy")
            finally:
                wrk.terminate()
                wrk.wait(timeout=10)
        finally:
            if nginx:
                self.stop(nginx)
            self.stop(redis)
        return out

    # -- memcached -------------------------------------------------------------------------------
    def memcached(self, cfg, n, threads, limit):
        port = self.next_port()
        # -u root: memcached drops to "nobody" before creating its sockets otherwise, and an
        # unprivileged process cannot open AF_XDP sockets (the launcher then falls back).
        srv = self.start(self.server_cfg(cfg), ["memcached", "-u", "root", "-l", self.b.addr, "-p", str(port),
                               "-U", "0", "-t", "1", "-c", "4096"], port)
        out = {}
        try:
            for t in ("set", "get"):
                cmd = ["memcslap", f"--servers={self.b.addr}:{port}", f"--concurrency={threads}",
                       f"--execute-number={n}", "--binary", f"--test={t}"]
                try:
                    (text, _), cpu, allcpu, mach = self.measured(
                        srv, lambda: self.client(cmd, timeout=limit, cfg=self.client_cfg(cfg)))
                    m = re.search(rf"Time to {t}\s+(\d+) keys by\s+\d+ threads:\s+([\d.]+) seconds", text)
                    if not m:
                        raise RuntimeError(f"no result in memcslap output: {one_line(text[-300:])}")
                    ops, s = int(m.group(1)), float(m.group(2))
                    # memcslap's get test loads its keys first (one thread): that load is in
                    # the CPU window too, so count its sets as requests.
                    total = ops + (n if t == "get" else 0)
                    out[t] = {"rps": ops / s, "cpu_per_k": cpu / (total / 1000),
                              "all_per_k": allcpu / (total / 1000), "machine": mach}
                except Exception as e:  # noqa: BLE001
                    out[t] = RuntimeError(one_line(e))
                    if srv.p.poll() is not None:
                        break
        finally:
            self.stop(srv)
        return out

    # -- iperf3 ----------------------------------------------------------------------------------
    def iperf3(self, cfg, reverse, secs):
        self.xdp(cfg == "xdp")
        port = self.next_port()
        # readiness from iperf3's own line: a probe connection would count as a test
        srv = self.start("slip" if cfg == "slip" else "kernel",
                         ["iperf3", "-s", "--forceflush", "-B", self.b.addr, "-p", str(port)],
                         lambda l: "Server listening" in l)
        cmd = ["iperf3", "-c", self.b.addr, "-p", str(port), "-t", str(secs), "-J",
               *(["-R"] if reverse else [])]
        try:
            (text, _), cpu, allcpu, mach = self.measured(
                srv, lambda: self.client(cmd, timeout=secs + 60))
        finally:
            self.stop(srv)
        j = json.loads(text[text.index("{"):text.rindex("}") + 1])
        if "error" in j:
            raise RuntimeError("iperf3: " + j["error"])
        recv = j["end"]["sum_received"]
        gib = recv["bytes"] / (1 << 30)
        return {"mbps": recv["bits_per_second"] / 8e6, "cpu_per_gib": cpu / gib,
                "all_per_gib": allcpu / gib, "retr": j["end"]["sum_sent"].get("retransmits"),
                "machine": mach}


# -- parsers ---------------------------------------------------------------------------------------
UNITS = {"us": 1.0, "ms": 1e3, "s": 1e6}


def parse_wrk(text):
    m = re.search(r"(\d+) requests in ([\d.]+)(\w+)", text)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    if not m or not rps:
        raise RuntimeError(f"no result in wrk output: {one_line(text[-300:])}")
    lat = {}
    for pct, val, unit in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", text, re.M):
        lat[pct] = float(val) * UNITS[unit]
    errs = re.search(r"Socket errors: (.*)", text)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    r = {"rps": float(rps.group(1)), "requests": int(m.group(1)), "p50": lat.get("50"),
         "p99": lat.get("99"), "errors": errs.group(1).strip() if errs else None,
         "non2xx": int(non2xx.group(1)) if non2xx else 0}
    if r["non2xx"] > r["requests"] // 100:
        raise RuntimeError(f"{r['non2xx']} of {r['requests']} responses were not 2xx/3xx")
    if r["requests"] == 0:
        raise RuntimeError("wrk completed no request: " + (r["errors"] or one_line(text[-200:])))
    return r


def parse_sockperf_pp(text):
    pct = {p: float(v) for p, v in re.findall(r"percentile\s+([\d.]+)\s+=\s+([\d.]+)", text)}
    msgs = re.search(r"\[Valid Duration\].*?ReceivedMessages=(\d+)", text)
    if "50.000" not in pct or not msgs:
        raise RuntimeError(f"no result in sockperf output: {one_line(text[-300:])}")
    return {"p50": pct["50.000"], "p99": pct.get("99.000"), "p999": pct.get("99.900"),
            "messages": int(msgs.group(1))}


# -- tables ----------------------------------------------------------------------------------------
def fmt(v, nd=1):
    return "-" if v is None else f"{v:,.{nd}f}"


def best(runs, key, higher):
    vals = [r[key] for r in runs if isinstance(r, dict) and r.get(key) is not None]
    if not vals:
        return None
    return max(vals) if higher else min(vals)


def first_error(runs):
    for r in runs:
        if isinstance(r, Exception):
            return f"failed: {r}"
    return "-"


def table(title, cols, rows, base=None):
    """rows: (label, {cfg: [runs]}, key, higher_is_better, digits). Ratio columns: the last
    configuration against each other one, or (base = a cfg) every other one against base."""
    if base:
        pairs = [(c, base) for c, _ in cols if c != base]
        names = dict(cols)
        rhead = [f"ratio {names[c]} / {names[b]}" for c, b in pairs]
    else:
        pairs = [(cols[-1][0], c) for c, _ in cols[:-1]]
        rhead = [f"ratio vs {c[1]}" for c in cols[:-1]]
    head = ["workload", *[c[1] for c in cols], *rhead]
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, runs, key, higher, nd in rows:
        vals = {c: best(runs.get(c, []), key, higher) for c, _ in cols}
        cells = [fmt(vals[c], nd) if vals[c] is not None else first_error(runs.get(c, []))
                 for c, _ in cols]
        ratios = [f"{vals[c] / vals[b]:.2f}" if vals[c] is not None and vals[b] else "-" for c, b in pairs]
        lines.append("| " + " | ".join([label, *cells, *ratios]) + " |")
    return "\n".join(lines) + "\n"


def alternate(configs, fn, label):
    """ROUNDS rounds, configurations alternating; returns {cfg: [result or Exception]}."""
    res = {c: [] for c in configs}
    for rnd in range(ROUNDS):
        for cfg in configs:
            try:
                r = fn(cfg)
            except Exception as e:  # noqa: BLE001 - the table reports it
                r = RuntimeError(one_line(e))
            res[cfg].append(r)
            show = r if isinstance(r, Exception) else {
                k: (round(v, 3) if isinstance(v, float) else v) for k, v in
                (r.items() if isinstance(r, dict) else [])}
            log(f"{label} round {rnd + 1} {cfg}: {show}")
    return res


def split(res, sub):
    """{cfg: [ {sub: r} ]} -> {cfg: [r]} (an Exception of the whole run stays an Exception)."""
    return {c: [(r if isinstance(r, Exception) else r.get(sub, RuntimeError("not run")))
                for r in runs] for c, runs in res.items()}


KS = [("kernel", "kernel"), ("slip", "slipstream")]
# sockperf: the sleeping kernel, the kernel spinning on both ends, and slipstream (spinning).
KSPIN = [("kernel", "kernel"), ("kspin", "kernel spinning"), ("slip", "slipstream")]
# Server-side runs: both ends on the kernel; the server on slipstream (client on the kernel);
# both ends on slipstream (what sockperf always does, and what users of kernel-bypass stacks do
# when they own both ends). On this 2-core machine the kernel load generator takes more than half
# the CPU, which caps what a faster server alone can show.
K3 = [("kernel", "kernel"), ("slip", "slipstream server"), ("both", "slipstream both ends")]

# nginx beside many idle keep-alive connections (as servers carry): opened from a by a kernel
# process in every configuration, they wait in nginx's epoll set while wrk runs.
IDLE = 3000
IDLE_HOLDER = r"""
import resource, socket, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
addr, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
held = [socket.create_connection((addr, port), timeout=10) for _ in range(n)]
print("open", len(held), flush=True)
sys.stdin.read()
"""


def run_nginx(apps, out, plots):
    secs = 2 if apps.quick else 5
    res = alternate([c for c, _ in K3], lambda c: apps.nginx(c, secs), "nginx")
    rows = []
    for sub, what in (("ka16", "keep-alive 16 conns"), ("ka64", "keep-alive 64 conns"),
                      ("ka256", "keep-alive 256 conns"),
                      ("idle", f"keep-alive 16 conns beside {IDLE:,} idle"),
                      ("close", "Connection: close, 16 conns")):
        s = split(res, sub)
        plots.setdefault("nginx", {})[sub] = s
        rows += [(f"{what}: req/s", s, "rps", True, 0),
                 (f"{what}: p50 µs", s, "p50", False, 0),
                 (f"{what}: p99 µs", s, "p99", False, 0),
                 (f"{what}: server CPU s/1000 req", s, "cpu_per_k", False, 4),
                 (f"{what}: all CPUs s/1000 req", s, "all_per_k", False, 4)]
    dual = os.environ.get("SLIP_BENCH_NGINX_LISTEN") == "dual"
    out.append(table("nginx 1 KiB GET, 1 worker (wrk -t1 in a)" +
                     (", nginx on [::] dual-stack, IPv4 clients" if dual else ""), K3, rows, base="kernel"))
    errs = sorted({r["errors"] for runs in (split(res, x) for x in ("ka16", "ka64", "ka256", "idle", "close"))
                   for rr in runs.values() for r in rr if isinstance(r, dict) and r.get("errors")})
    out.append(f"- `wrk -t1 -cN -d{secs}s --latency [-H 'Connection: close'] "
               f"http://198.18.0.2:PORT/1k.bin` against `nginx -c bench/apps/nginx.conf.in` "
               f"(filled in), or `slipstream run --iface veth0 -- nginx -c ...` (both ends: wrk too). "
               f"Idle: {IDLE:,} keep-alive connections opened first by a kernel Python process in a "
               f"and held while wrk runs." +
               (f" wrk socket errors seen: {'; '.join(errs)}." if errs else "") + "\n")


def run_sockperf(apps, out, plots):
    secs = 2 if apps.quick else 5
    rows = []
    for proto in ("udp", "tcp"):
        s = alternate([c for c, _ in KSPIN], lambda c: apps.sockperf(c, proto, secs), f"sockperf {proto}")
        plots.setdefault("sockperf", {})[proto] = s
        P = proto.upper()
        rows += [(f"{P} 64 B ping-pong p50 half-RTT µs", s, "p50", False, 3),
                 (f"{P} p99 µs", s, "p99", False, 3),
                 (f"{P} p99.9 µs", s, "p999", False, 3),
                 (f"{P} server CPU s/1000 msgs", s, "cpu_per_k", False, 4),
                 (f"{P} all CPUs s/1000 msgs", s, "all_per_k", False, 4)]
    out.append(table("sockperf ping-pong, both ends kernel (sleeping, then spinning) vs both ends "
                     "slipstream (latency profile)", KSPIN, rows))
    out.append(f"- `sockperf sr [--tcp] -i 198.18.0.2 -p PORT` in b, `sockperf pp [--tcp] -i 198.18.0.2 "
               f"-p PORT -t {secs} -m 64` in a; kernel spinning: `--nonblocked` on both ends (non-blocking "
               f"sockets polled in a loop, as the stack spins); slipstream: both under `slipstream run "
               f"--iface veth0 --profile latency --` (spinning, so both cores are busy all the time). "
               f"Latency is sockperf's half round trip.\n")


def run_redis(apps, out, plots):
    n = 20000 if apps.quick else 100000
    res = alternate([c for c, _ in K3], lambda c: apps.redis(c, n), "redis")
    rows = []
    for t in ("set", "get"):
        s = split(res, t)
        rows += [(f"{t.upper()} req/s", s, "rps", True, 0),
                 (f"{t.upper()} p50 µs", s, "p50", False, 0),
                 (f"{t.upper()} server CPU s/1000 req", s, "cpu_per_k", False, 4),
                 (f"{t.upper()} all CPUs s/1000 req", s, "all_per_k", False, 4)]
    out.append(table("redis-server, redis-benchmark 50 connections", K3, rows, base="kernel"))
    out.append(f"- `redis-benchmark -h 198.18.0.2 -p PORT -q -n {n} -t set|get -c 50 -P 1` against "
               f"`redis-server --save '' --appendonly no --protected-mode no` (both ends: "
               f"redis-benchmark under `slipstream run` too).\n")


def run_memcached(apps, out, plots):
    n, threads = (1000, 16) if apps.quick else (5000, 16)
    limit = 20 if apps.quick else 30
    res = alternate([c for c, _ in K3], lambda c: apps.memcached(c, n, threads, limit), "memcached")
    rows = []
    for t in ("set", "get"):
        s = split(res, t)
        rows += [(f"{t} ops/s", s, "rps", True, 0),
                 (f"{t} server CPU s/1000 ops", s, "cpu_per_k", False, 4),
                 (f"{t} all CPUs s/1000 ops", s, "all_per_k", False, 4)]
    out.append(table(f"memcached -t 1, memcslap {threads} threads x {n} ops", K3, rows, base="kernel"))
    out.append(f"- `memcslap --servers=198.18.0.2:PORT --concurrency={threads} --execute-number={n} "
               f"--binary --test=set|get` (ops/s = keys / memcslap's time) against `memcached -u root "
               f"-l 198.18.0.2 -p PORT -U 0 -t 1 -c 4096` (both ends: memcslap under `slipstream "
               f"run` too); a run longer than {limit} s is cut.\n")


def run_iperf3(apps, out, plots):
    secs = 2 if apps.quick else 5
    cfgs = [("plain", "kernel (plain)"), ("xdp", "kernel (XDP attached)"), ("slip", "slipstream")]
    rows = []
    try:
        for rev, what in ((False, "a->b (client sends)"), (True, "b->a (-R, server sends)")):
            s = alternate([c for c, _ in cfgs], lambda c: apps.iperf3(c, rev, secs), f"iperf3 {what}")
            rows += [(f"{what} MB/s", s, "mbps", True, 0),
                     (f"{what} server CPU s/GiB", s, "cpu_per_gib", False, 3),
                     (f"{what} all CPUs s/GiB", s, "all_per_gib", False, 3)]
    finally:
        apps.xdp(False)
    out.append(table("iperf3 TCP, one stream", cfgs, rows))
    out.append(f"- `iperf3 -c 198.18.0.2 -p PORT -t {secs} -J [-R]` in a against `iperf3 -s --forceflush -B "
               f"198.18.0.2 -p PORT` in b; XDP attached: `steer_ctl --iface veth0 --udp "
               f"{T.STEER_DUMMY_UDP}` in b (passes all TCP). MB/s = 10^6 B/s received.\n")


def plot(plots, results_dir):
    """PNGs of nginx req/s vs connections and latency percentiles; returns lines for the report."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return [f"- no plots: matplotlib is not importable ({e}); `pip install matplotlib`"]
    results_dir.mkdir(parents=True, exist_ok=True)
    done = []
    ng = plots.get("nginx")
    if ng:
        fig, ax = plt.subplots(figsize=(6, 4))
        for cfg, label in K3:
            xs, ys = [], []
            for conns, sub in ((16, "ka16"), (64, "ka64"), (256, "ka256")):
                v = best(ng[sub].get(cfg, []), "rps", True)
                if v is not None:
                    xs.append(conns)
                    ys.append(v)
            if xs:
                ax.plot(xs, ys, marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("wrk connections")
        ax.set_ylabel("requests/s")
        ax.set_title("nginx 1 KiB GET keep-alive, 1 worker")
        ax.legend()
        f = results_dir / "nginx_rps.png"
        fig.tight_layout()
        fig.savefig(f, dpi=100)
        plt.close(fig)
        done.append(f)
    panels = []
    if plots.get("sockperf"):
        for proto, s in plots["sockperf"].items():
            panels.append((f"sockperf {proto.upper()} half-RTT", s, ["p50", "p99", "p999"]))
    if ng:
        for sub in ("ka16", "ka64", "ka256", "close"):
            panels.append((f"nginx {sub}", ng[sub], ["p50", "p99"]))
    if panels:
        fig, axes = plt.subplots(1, len(panels), figsize=(3 * len(panels), 3.5), squeeze=False)
        for ax, (title, s, keys) in zip(axes[0], panels):
            cfgs = [c for c in K3 if c[0] in s]     # sockperf: kernel and slip (both ends) only
            w = 0.8 / len(cfgs)
            for i, (cfg, label) in enumerate(cfgs):
                vals = [best(s.get(cfg, []), k, False) or 0 for k in keys]
                ax.bar([j + (i - (len(cfgs) - 1) / 2) * w for j in range(len(keys))], vals, w,
                       label=label if cfg != "slip" or len(cfgs) > 2 else "slipstream")
            ax.set_xticks(range(len(keys)))
            ax.set_xticklabels(keys)
            ax.set_yscale("log")
            ax.set_ylabel("µs")
            ax.set_title(title, fontsize=9)
        for ax in axes[0]:
            ax.legend(fontsize=6)
        f = results_dir / "latency.png"
        fig.tight_layout()
        fig.savefig(f, dpi=100)
        plt.close(fig)
        done.append(f)
    return [f"- plots: {', '.join(str(p.relative_to(results_dir.parent.parent)) for p in done)}"] \
        if done else []


def run_neighbour(apps, out, plots):
    n = 20000 if apps.quick else 100000
    res = alternate(["kernel", "slip"], lambda c: apps.neighbour(c, n), "neighbour")
    rows = []
    for sub, what in (("alone", "redis alone"), ("idle", "beside an idle nginx"),
                      ("after", "after that nginx served 20 MB"), ("busy", "while wrk loads that nginx")):
        s = split(res, sub)
        rows += [(f"{what}: SET/s", s, "rps", True, 0), (f"{what}: p99 µs", s, "p99", False, 0),
                 (f"{what}: server CPU s/1000 req", s, "cpu_per_k", False, 4)]
    out.append(table("redis with nginx beside it (both servers on the kernel, or both under slipstream run)",
                     KS, rows))
    out.append(f"- `redis-benchmark -h 198.18.0.2 -p PORT -n {n} -t set -c 16` in a (kernel) against "
               f"`redis-server` in b; then `nginx -c bench/apps/nginx.conf.in` started beside it (idle), then "
               f"`curl` of a 20 MB file from that nginx, then `wrk -t1 -c8` against that nginx during the "
               f"run. slipstream: both servers under `slipstream run --iface veth0`, a stack each (one "
               f"group). Compare each slipstream row with its own alone row for the neighbour's cost.\n")


def wait_rows(label, s):
    """The waits `slipstream stat` counts, per 1000 requests: all of them, then split into a stack's
    own lock (lock.contended: its threads and its progress thread), the group's frame pool lock
    (group.pool_lock_contended) and a queue's shared fill and completion rings (fill_busy, comp_busy)."""
    return [(f"{label}: lock/ring waits per 1000 req", s, "waits_per_k", False, 3),
            (f"{label}: of them, a stack's own lock", s, "lock_per_k", False, 3),
            (f"{label}: of them, the group's pool lock", s, "pool_per_k", False, 3),
            (f"{label}: of them, shared fill/completion rings", s, "ring_per_k", False, 3)]


def run_workers(apps, out, plots):
    secs = 2 if apps.quick else 5
    res = alternate(["kernel", "slip"], lambda c: apps.workers(c, secs), "workers")
    rows = []
    for kind, what in (("ka", "keep-alive 64 conns"), ("close", "Connection: close, 64 conns")):
        for n in (1, 2):
            s = split(res, f"{kind}{n}")
            label = f"{what}, {n} worker{'s + reuseport' if n > 1 else ''}"
            rows += [(f"{label}: req/s", s, "rps", True, 0),
                     (f"{label}: req per server CPU-s", s, "per_cpu_s", True, 0),
                     (f"{label}: p99 µs", s, "p99", False, 0)]
            if n == 2:
                rows.append((f"{label}: stacks in b", split(res, f"{kind}{n}"), "stacks", True, 0))
            rows += wait_rows(label, s)
    out.append(table("nginx 1 KiB GET, 1 worker vs 2 workers with reuseport (wrk -t1 -c64 in a)", KS, rows,
                     base="kernel"))
    out.append(f"- `wrk -t1 -c64 -d{secs}s --latency [-H 'Connection: close'] http://198.18.0.2:PORT/1k.bin` "
               f"against `nginx -c bench/apps/nginx.conf.in` with `worker_processes 1`, then `worker_processes 2` "
               f"and `listen ... reuseport`, server pinned to CPU 1 (both workers on it: the row measures "
               f"the cost per request, not scaling), wrk on CPU 0. Waits: `slipstream stat` before and "
               f"after each run, summed over every stack in b: lock.contended, group.pool_lock_contended, "
               f"xsk.*.fill_busy and comp_busy, then each kind alone (every row is its own best of the "
               f"rounds, so the parts need not add up to the total).\n")


def run_threads(apps, out, plots):
    secs = 2 if apps.quick else 5
    res = alternate(["kernel", "slip"], lambda c: apps.threads(c, secs), "threads")
    rows = []
    for n in (1, 2):
        s = split(res, f"ka{n}")
        label = f"keep-alive 64 conns, {n} thread{'s, a reuseport listener each' if n > 1 else ''}"
        rows += [(f"{label}: req/s", s, "rps", True, 0),
                 (f"{label}: req per server CPU-s", s, "per_cpu_s", True, 0),
                 (f"{label}: p99 µs", s, "p99", False, 0)]
        if n == 2:
            rows.append((f"{label}: stacks in b", s, "stacks", True, 0))
        rows += wait_rows(label, s)
    out.append(table("A thread per listener: 1 KiB answers, 1 thread vs 2 threads (wrk -t1 -c64 in a)", KS, rows,
                     base="kernel"))
    out.append(f"- `wrk -t1 -c64 -d{secs}s --latency http://198.18.0.2:PORT/` against "
               f"`tests/prog/http_threads PORT N` (N threads, each with its own SO_REUSEPORT listener and "
               f"epoll loop), N = 1 then 2, pinned to CPU 1 (both threads on it: the row measures the "
               f"cost per request, not scaling), wrk on CPU 0. Waits as in the workers table.\n")


RUNNERS = {"nginx": run_nginx, "sockperf": run_sockperf, "redis": run_redis,
           "memcached": run_memcached, "iperf3": run_iperf3, "neighbour": run_neighbour,
           "workers": run_workers, "threads": run_threads}
PROGRAMS = {"nginx": ["nginx", "wrk"], "sockperf": ["sockperf"], "redis": ["redis-server", "redis-benchmark"],
            "memcached": ["memcached", "memcslap"], "iperf3": ["iperf3"],
            "neighbour": ["redis-server", "redis-benchmark", "nginx", "curl", "wrk"],
            "workers": ["nginx", "wrk"], "threads": ["wrk"]}


def command_line(repo, prefix):
    cmd = shlex.join([os.path.relpath(sys.argv[0], repo) if sys.argv[0].startswith(str(repo))
                      else sys.argv[0], *sys.argv[1:]])
    return (f"SLIP_NS_PREFIX={prefix} " if os.environ.get("SLIP_NS_PREFIX") else "") + cmd


def run(repo, build_dir, quick=False, prefix="slb"):
    import shutil
    sys.path.insert(0, str(repo / "tests" / "system"))
    from testbed import Testbed, Topology  # noqa: E402  (imported by path on purpose)

    need = [build_dir / "slipstream", build_dir / "src" / "preload" / "libslipstream.so",
            build_dir / "tests" / "prog" / "steer_ctl"]
    missing = [str(p) for p in need if not os.path.exists(p)]
    if missing:
        return "apps: not built: " + ", ".join(missing) + "\n"
    only = [x for x in os.environ.get("SLIP_BENCH_APPS", "").split(",") if x] or ALL
    out = [f"`{command_line(repo, prefix)}`"
           + (f" (SLIP_BENCH_APPS={','.join(only)})" if only != ALL else ""), "",
           f"Server in b on CPU 1, load generator in a on CPU 0 (kernel unless stated); best of "
           f"{ROUNDS} alternating runs per number (all runs on stderr). Ratio = slipstream / kernel. "
           "Server CPU: run time (utime+stime, from /proc/PID/task/*/schedstat) of the server's process tree during the load; all CPUs: both "
           "cores' busy time from /proc/stat over the same window.", ""]
    plots = {}
    tmp = tempfile.mkdtemp(prefix=f"{prefix}-apps-")
    os.chmod(tmp, 0o755)
    tb = Testbed(Topology(), prefix=prefix)
    try:
        tb.up()
        apps = Apps(tb, build_dir, quick, tmp)
        for name in only:
            absent = [p for p in PROGRAMS[name] if not shutil.which(p)]
            if absent:
                out.append(f"### {name}\n\nskipped: {', '.join(absent)} not installed\n")
                continue
            log(f"--- {name}")
            try:
                RUNNERS[name](apps, out, plots)
            except Exception as e:  # noqa: BLE001 - one workload's crash must not end the suite
                out.append(f"### {name}\n\nfailed: {one_line(e)}\n")
                log(f"{name} FAILED: {e}")
    finally:
        tb.down()
        shutil.rmtree(tmp, ignore_errors=True)
    out += plot(plots, repo / "bench" / "results")
    return "\n".join(out) + "\n"
