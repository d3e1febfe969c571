"""Concurrent connections: how many kernel clients an accelerated server serves at once, and what
an idle connection costs. Two-host testbed (a=198.18.0.1, b=198.18.0.2); host a gets four more
source addresses (198.18.0.10-13: the kernel's ephemeral ports are per source address, ~28,000
each). tests/prog/echo_many runs in b under `slipstream run` (default SLIP_MAX_CONNS), and
tests/prog/conn_flood in a opens N connections (1,000 handshakes in flight), has 9 bytes echoed
on each, and holds them open while the server's memory is read:

  - RSS and PSS of the server (/proc/PID/smaps_rollup), and the stack memfd's allocated size
    (st_blocks of /proc/PID/fd/N for the memfd "slipstream-stack": pages actually in use);
  - kernel slab memory (Slab in /proc/meminfo, machine-wide, so other activity blurs it): each
    accepted connection has a kernel socket behind its fd (the preload's placeholder).

Each N starts a fresh server; the figures per connection are (held - idle server) / N.

    bench/run --only capacity            # N = 10,000 and 100,000 (--quick: 10,000 only)
"""

import json
import os
import re
import subprocess
import sys
import time

ADDRS = ["198.18.0.10", "198.18.0.11", "198.18.0.12", "198.18.0.13"]
PORT = 9600


def log(msg):
    print(f"[capacity] {msg}", file=sys.stderr, flush=True)


def server_pid(host):
    for pid in host.pids():
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "echo_many":
                    return pid
        except OSError:
            pass
    return None


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


def one(tb, build_dir, n):
    a, b = tb.host("a"), tb.host("b")
    exe = build_dir / "slipstream"
    srv = b.popen([str(exe), "run", "--iface", "veth0", "--strict", "--",
                   str(build_dir / "tests/prog/echo_many"), str(PORT)],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert srv.stdout.readline().strip() == "listening"
    time.sleep(0.5)
    pid = server_pid(b)
    idle = memory(pid)
    slab0 = slab_kb()
    cl = a.popen([str(build_dir / "tests/prog/conn_flood"), "198.18.0.2", str(PORT), str(n), "--src",
                  ",".join(ADDRS), "--inflight", "1000", "--timeout", "300", "--hold"],
                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    res = json.loads(cl.stdout.readline())
    assert cl.stdout.readline().strip() == "holding"
    time.sleep(1.0)
    held = memory(pid)
    slab1 = slab_kb()
    sockstat = b.run(["cat", "/proc/net/sockstat"]).stdout
    cl.stdin.write("\n")
    cl.stdin.flush()
    cl.communicate(timeout=120)
    srv.terminate()
    srv.communicate(timeout=30)
    row = {"n": n, **res, "idle": idle, "held": held, "slab_kb_delta": slab1 - slab0,
           "sockstat_b": " | ".join(sockstat.strip().splitlines())}
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
        for addr in ADDRS:
            a.run(["ip", "addr", "add", f"{addr}/24", "dev", "veth0"], check=True)
        for n in ([10000] if quick else [10000, 100000]):
            rows.append(one(tb, build_dir, n))
    finally:
        tb.down()
    lines = ["| clients | served | failed | seconds | server RSS (MiB) | PSS (MiB) | memfd allocated (MiB) | "
             "memfd per conn (B) | PSS per conn (B) | kernel slab per conn (B, machine-wide) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        n, i, h = r["n"], r["idle"], r["held"]
        lines.append(f"| {n:,} | {r['served']:,} | {r['failed']:,} | {r['seconds']} | {h['Rss'] / 1024:.1f} | "
                     f"{h['Pss'] / 1024:.1f} | {h['memfd_alloc'] / 2**20:.1f} | "
                     f"{(h['memfd_alloc'] - i['memfd_alloc']) / n:.0f} | {(h['Pss'] - i['Pss']) * 1024 / n:.0f} | "
                     f"{r['slab_kb_delta'] * 1024 / n:.0f} |")
    lines.append("")
    lines.append(f"idle server: RSS {rows[0]['idle']['Rss'] / 1024:.1f} MiB, PSS {rows[0]['idle']['Pss'] / 1024:.1f} MiB, "
                 f"memfd {rows[0]['idle']['memfd_alloc'] / 2**20:.1f} MiB allocated of "
                 f"{rows[0]['idle']['memfd_size'] / 2**20:.1f} MiB")
    return "\n".join(lines)
