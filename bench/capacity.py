"""Concurrent connections: how many kernel clients an accelerated server serves at once, and what
an idle connection costs. Two-host testbed (a=198.18.0.1, b=198.18.0.2). tests/prog/echo_many runs
in b under `slipstream run` (default SLIP_MAX_CONNS) and tests/prog/conn_flood in a opens the
connections (1,000 handshakes in flight, each from a port of its own: --sport-base, so the
kernel client does not search for free ephemeral ports), has 9 bytes echoed on each, and holds
them open while the server's memory is read.

Every connection is a fd on both sides, and a process's fds stop at the hard RLIMIT_NOFILE
(raising it needs CAP_SYS_RESOURCE): past PER_PROC connections the server runs as several worker
processes sharing the listener (as nginx workers do; the stack is one, shared by all of them)
and the client as several processes, each from a source address of its own (198.18.0.10 up:
the kernel's ephemeral ports are per source address, ~28,000 each).

Measured with the connections held:
  - PSS of the server's processes (/proc/PID/smaps_rollup; PSS splits the shared arena between
    them) and the stack memfd's allocated size (st_blocks of /proc/PID/fd/N for the memfd
    "slipstream-stack": pages actually in use);
  - kernel slab memory (Slab in /proc/meminfo, machine-wide: it includes the clients' own
    sockets in host a, and other activity on the machine blurs it): each accepted connection
    has a kernel socket behind its fd (the preload's placeholder).
Each N starts a fresh server; the figures per connection are (held - idle server) / N.

    bench/run --only capacity            # N = 10,000 and 100,000 (--quick: 10,000 only)
"""

import json
import os
import re
import subprocess
import sys
import time

PORT = 9600
PER_PROC = 18000        # connections per process, under this machine's hard RLIMIT_NOFILE


def log(msg):
    print(f"[capacity] {msg}", file=sys.stderr, flush=True)


def server_pids(host):
    out = []
    for pid in host.pids():
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "echo_many":
                    out.append(pid)
        except OSError:
            pass
    return out


def cpu_s(pid):
    """utime + stime of a process, all threads, in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def nofile_hard():
    import resource
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def memory(pid):
    """RSS, PSS (kB) of pid and the stack memfd's allocated bytes."""
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            m = re.match(r"(Rss|Pss|Pss_Shmem|Pss_Anon):\s+(\d+) kB", line)
            if m:
                out[m.group(1)] = int(m.group(2))
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:slipstream-stack"):
                st = os.stat(f"/proc/{pid}/fd/{fd}")
                out["memfd_alloc"] = st.st_blocks * 512
                out["memfd_size"] = st.st_size
        except OSError:
            pass
    return out


def slab_kb():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Slab:"):
                return int(line.split()[1])
    return 0


def server_memory(pids):
    per = [memory(p) for p in pids]
    return {"Pss": sum(m.get("Pss", 0) for m in per), "Rss_max": max(m.get("Rss", 0) for m in per),
            "memfd_alloc": max(m.get("memfd_alloc", 0) for m in per),
            "memfd_size": max(m.get("memfd_size", 0) for m in per), "procs": len(per)}


def one(tb, build_dir, n, addrs):
    a, b = tb.host("a"), tb.host("b")
    exe = build_dir / "slipstream"
    procs = -(-n // PER_PROC)
    srv = b.popen([str(exe), "run", "--iface", "veth0", "--strict", "--",
                   str(build_dir / "tests/prog/echo_many"), str(PORT), "262144", str(procs)],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert srv.stdout.readline().strip() == "listening"
    time.sleep(1.0)
    pids = server_pids(b)
    idle = server_memory(pids)
    slab0 = slab_kb()
    clients = []
    t0 = time.monotonic()
    for k in range(procs):
        cnt = n // procs + (1 if k < n % procs else 0)
        clients.append(a.popen([str(build_dir / "tests/prog/conn_flood"), "198.18.0.2", str(PORT), str(cnt),
                                "--src", addrs[k], "--sport-base", "20000", "--inflight", str(max(1000 // procs, 100)),
                                "--timeout", "300", "--hold"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for cl in clients:
        results.append(json.loads(cl.stdout.readline()))
        assert cl.stdout.readline().strip() == "holding"
    took = time.monotonic() - t0
    time.sleep(1.0)
    held = server_memory(server_pids(b))
    # CPU the server spends holding the idle connections (all its threads), over 5 s
    c0 = sum(cpu_s(p) for p in server_pids(b))
    time.sleep(5.0)
    idle_cpu = (sum(cpu_s(p) for p in server_pids(b)) - c0) / 5.0
    slab1 = slab_kb()
    sockstat = b.run(["cat", "/proc/net/sockstat"]).stdout
    counters = b.run([str(exe), "stat", "--iface", "veth0"]).stdout
    for cl in clients:
        cl.stdin.write("\n")
        cl.stdin.flush()
    for cl in clients:
        cl.communicate(timeout=120)
    b.run(["pkill", "-TERM", "-x", "echo_many"])
    srv.communicate(timeout=30)
    tot = {k: sum(r[k] for r in results) for k in results[0] if k != "seconds"}
    row = {"n": n, **tot, "seconds": round(took, 2), "server_procs": procs, "idle": idle, "held": held,
           "idle_cpu": round(idle_cpu, 3),
           "slab_kb_delta": slab1 - slab0, "sockstat_b": " | ".join(sockstat.strip().splitlines()),
           "counters": {k: v for k, v in (l.split() for l in counters.splitlines() if len(l.split()) == 2)
                        if k in ("tcp.conns", "tcp.conn_full", "tcp.syn_full_drops", "tcp.listen_overflows",
                                 "tcp.syncookies_sent", "tcp.syncookies_ok")}}
    log(json.dumps(row))
    return row


def run(repo, build_dir, quick=False, prefix="slc"):
    sys.path.insert(0, str(repo / "tests" / "system"))
    from testbed import Testbed, Topology  # noqa: E402  (imported by path on purpose)
    tb = Testbed(Topology(), prefix=prefix)
    rows = []
    try:
        tb.up()
        a = tb.host("a")
        addrs = [f"198.18.0.{10 + k}" for k in range(8)]
        for addr in addrs:
            a.run(["ip", "addr", "add", f"{addr}/24", "dev", "veth0"], check=True)
        log(f"hard RLIMIT_NOFILE {nofile_hard()}: {PER_PROC} connections per process")
        used = 0
        for n in ([10000] if quick else [10000, 100000]):
            # fresh source addresses per run: the last run's ports are in TIME_WAIT
            rows.append(one(tb, build_dir, n, addrs[used:]))
            used += -(-n // PER_PROC)
    finally:
        tb.down()
    lines = ["| clients | served | failed | seconds | server procs | server PSS (MiB) | memfd allocated (MiB) | "
             "memfd per conn (B) | PSS per conn (B) | kernel slab per conn (B, machine-wide, both ends) | "
             "server CPU while idle (cores) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        n, i, h = r["n"], r["idle"], r["held"]
        lines.append(f"| {n:,} | {r['served']:,} | {r['failed']:,} | {r['seconds']} | {r['server_procs']} | "
                     f"{h['Pss'] / 1024:.1f} | {h['memfd_alloc'] / 2**20:.1f} | "
                     f"{(h['memfd_alloc'] - i['memfd_alloc']) / n:.0f} | {(h['Pss'] - i['Pss']) * 1024 / n:.0f} | "
                     f"{r['slab_kb_delta'] * 1024 / n:.0f} | {r['idle_cpu']} |")
    lines.append("")
    i = rows[0]["idle"]
    lines.append(f"idle server (1 process): PSS {i['Pss'] / 1024:.1f} MiB, memfd {i['memfd_alloc'] / 2**20:.1f} MiB "
                 f"allocated of {i['memfd_size'] / 2**20:.1f} MiB")
    return "\n".join(lines)
