"""nginx `sendfile on` serving one large file from the root disk to curl (kernel) in host a, one
connection at a time, the servers side by side (a port each) and the downloads taking turns
round after round: nginx on the kernel, under `slipstream run` (sendfile copies the file
through a buffer into the stack), and under `slipstream run --block` (sendfile reads the file
with O_DIRECT straight into the stack's frames, src/preload/fsend.c), also with
SLIP_BLOCK_SENDFILE=0 (the copying path under --block). MB/s is curl's download speed (median
of the rounds); CPU is the nginx worker's user + system time per MB (from /proc), which for the
kernel rows leaves out the softirq time the kernel charges elsewhere. The copying rows read the
file from the page cache (it is hot after the first round); the O_DIRECT row reads it from the
disk every time, by design (the page cache is bypassed).

    SLIP_NS_PREFIX=slb bench/run --only sendfile [--quick]
"""
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

B_ADDR = "198.18.0.2"

CONFIGS = [
    ("kernel nginx", None, {}),
    ("slipstream run (copying sendfile)", [], {}),
    ("slipstream run --block, SLIP_BLOCK_SENDFILE=0 (copying)", ["--block"], {"SLIP_BLOCK_SENDFILE": "0"}),
    ("slipstream run --block (O_DIRECT into frames)", ["--block"], {}),
]


def worker_cpu(pidfile):
    """The nginx worker's utime + stime in seconds (its master's only child)."""
    master = int(open(pidfile).read().split()[0])
    kids = open(f"/proc/{master}/task/{master}/children").read().split()
    total = 0
    for k in kids:
        f = open(f"/proc/{k}/stat").read().rsplit(")", 1)[1].split()
        total += int(f[11]) + int(f[12])
    return total / os.sysconf("SC_CLK_TCK")


def run(repo, build_dir, quick=False, prefix="slb"):
    sys.path.insert(0, str(repo / "tests" / "system"))
    from testbed import Testbed, Topology  # noqa: E402  (imported by path on purpose)
    from test_apps import kill_pidfile, nginx_conf, wait_listening  # noqa: E402
    if shutil.which("nginx") is None or shutil.which("curl") is None:
        return "nginx or curl not installed\n"
    size = (64 if quick else 256) << 20
    rounds = 2 if quick else 7
    root = tempfile.mkdtemp(prefix="slip-bench-sendfile-", dir="/var/tmp")
    os.chmod(root, 0o755)
    big = os.path.join(root, "big")
    with open(big, "wb") as f:
        for _ in range(size >> 20):
            f.write(os.urandom(1 << 20))
    os.chmod(big, 0o644)
    rows = []
    tb = Testbed(Topology(), prefix=prefix)
    works = []
    try:
        tb.up()
        a, b = tb.host("a"), tb.host("b")
        # Every server at once (a port each), the downloads taking turns: the machine's load
        # moves under all of them alike.
        live = []
        for i, (name, opts, env) in enumerate(CONFIGS):
            port = 8080 + i
            work = tempfile.mkdtemp(prefix="slip-bench-sendfile-run-")
            os.chmod(work, 0o755)
            works.append(work)
            conf = nginx_conf(work, root, True, port=port)
            cmd = ["nginx", "-c", conf, "-p", work + "/"]
            if opts is not None:
                cmd = ["env", *[f"{k}={v}" for k, v in env.items()], str(pathlib.Path(build_dir) / "slipstream"),
                       "run", *opts, "--iface", "veth0", "--", *cmd]
            r = b.run(cmd, timeout=30)
            if r.returncode != 0:
                rows.append(f"| {name} | failed to start: {r.stderr.strip()[-200:]} | | | |")
                continue
            wait_listening(b, port)
            live.append((name, port, os.path.join(work, "nginx.pid"), [], []))
        for _ in range(rounds):
            for name, port, pidfile, speeds, cpus in live:
                c0 = worker_cpu(pidfile)
                out = a.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{size_download} %{speed_download}",
                             f"http://{B_ADDR}:{port}/big"], timeout=300)
                c1 = worker_cpu(pidfile)
                got, speed = out.stdout.split() if out.stdout.strip() else ("0", "0")
                if int(got) != size:
                    speeds.append(None)
                    continue
                speeds.append(float(speed) / 1e6)
                cpus.append((c1 - c0) * 1e6 / (size / 1e6))
                time.sleep(0.2)
        for name, port, pidfile, speeds, cpus in live:
            ok = [x for x in speeds if x is not None]
            if not ok:
                rows.append(f"| {name} | failed: no complete download | | | |")
            else:
                rows.append((name, statistics.median(ok), statistics.median(cpus), speeds))
    finally:
        for w in works:
            kill_pidfile(os.path.join(w, "nginx.pid"))
            shutil.rmtree(w, ignore_errors=True)
        tb.down()
        shutil.rmtree(root, ignore_errors=True)
    base = next((r[1] for r in rows if isinstance(r, tuple) and r[0] == "kernel nginx"), None)
    out = [f"{size >> 20} MiB file, {rounds} downloads each; load average at the end: "
           f"{' '.join(open('/proc/loadavg').read().split()[:3])} (2 cores, shared).\n",
           "| nginx | MB/s (median) | vs kernel | worker CPU µs per MB | rounds MB/s |", "|---|---|---|---|---|"]
    for r in rows:
        if isinstance(r, str):
            out.append(r)
            continue
        name, mbps, cpu, speeds = r
        each = ", ".join("failed" if x is None else f"{x:.0f}" for x in speeds)
        out.append(f"| {name} | {mbps:.0f} | {mbps / base:.2f} | {cpu:.0f} | {each} |" if base
                   else f"| {name} | {mbps:.0f} | - | {cpu:.0f} | {each} |")
    return "\n".join(out) + "\n"
