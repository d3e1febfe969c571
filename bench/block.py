"""The block path (issue 14) beside the kernel's own ways: 4 KiB random reads and writes, O_DIRECT,
1 job, queue depth 1, on a file of the root disk's file system and on a zram device this benchmark
adds (and removes). Rows: fio psync plain and under `slipstream run --block` (default settings:
the per-device probe decides; with SLIP_BLOCK_PROBE=0, the engine forced; and the engine with a
SQPOLL thread and a spinning caller; the engine without registered files, and with its registered
bounce buffer), fio's own io_uring
engine (plain, sqpoll, fixedbufs), libaio plain and under the shim.

IOPS, mean and p99 completion latency come from fio's JSON. CPU per I/O is the fio process tree's
user + system time (wait4's rusage: every thread of every fio process, the io_uring SQPOLL thread
included, since it is a thread of the process) divided by the I/Os done: a polling thread's core
counts. Interrupt time the kernel charges to whatever ran on the CPU is not in it, for any row.

    SLIP_NS_PREFIX=slb bench/run --only block [--quick]
"""
import json
import os
import pathlib
import resource
import shutil
import subprocess
import tempfile
import time

ZRAM_CTL = pathlib.Path("/sys/class/zram-control")

# name, fio options, under the shim, extra environment
CONFIGS = [
    ("psync plain", {"ioengine": "psync"}, False, {}),
    ("psync under shim (probe)", {"ioengine": "psync"}, True, {}),
    ("psync under shim (engine forced)", {"ioengine": "psync"}, True, {"SLIP_BLOCK_PROBE": "0"}),
    ("psync under shim (engine forced, no registered files)", {"ioengine": "psync"}, True,
     {"SLIP_BLOCK_PROBE": "0", "SLIP_BLOCK_FIXED_FILES": "0"}),
    ("psync under shim (engine forced, bounce pool)", {"ioengine": "psync"}, True,
     {"SLIP_BLOCK_PROBE": "0", "SLIP_BLOCK_BOUNCE": "1"}),
    ("psync under shim (SQPOLL, spin 50 us, forced)", {"ioengine": "psync"}, True,
     {"SLIP_BLOCK_PROBE": "0", "SLIP_BLOCK_SQPOLL": "1", "SLIP_BLOCK_SPIN_USEC": "50"}),
    ("fio io_uring plain", {"ioengine": "io_uring"}, False, {}),
    ("fio io_uring sqpoll", {"ioengine": "io_uring", "sqthread_poll": "1"}, False, {}),
    ("fio io_uring fixedbufs", {"ioengine": "io_uring", "fixedbufs": "1", "registerfiles": "1"}, False, {}),
    ("libaio plain", {"ioengine": "libaio"}, False, {}),
    ("libaio under shim", {"ioengine": "libaio"}, True, {}),
]


def fio_run(slip, target, size, rw, opts, shim, extra, seconds):
    args = ["fio", "--name=b", f"--filename={target}", f"--size={size}", "--direct=1", "--bs=4k",
            "--iodepth=1", "--numjobs=1", f"--rw={rw}", "--time_based=1", f"--runtime={seconds}",
            "--ramp_time=1", "--norandommap=1", "--randrepeat=0", "--output-format=json"]
    args += [f"--{k}={v}" for k, v in opts.items()]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLIP_") and k != "LD_PRELOAD"}
    env.update(extra)
    if shim:
        args = [slip, "run", "--block", "--"] + args
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out, err = p.communicate(timeout=seconds + 120)     # reaps it: RUSAGE_CHILDREN then has it
    return out, err, p.returncode


def one(slip, target, size, rw, opts, shim, extra, seconds):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out, err, rc = fio_run(slip, target, size, rw, opts, shim, extra, seconds)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if rc != 0:
        return None, err.decode(errors="replace")[-300:]
    j = json.loads(out[out.index(b"{"):])
    job = j["jobs"][0]
    side = job["read"] if rw == "randread" else job["write"]
    ios = side["total_ios"]
    clat = side["clat_ns"]
    p99 = clat.get("percentile", {}).get("99.000000", 0)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # fio's ramp time is run but not counted in total_ios: count its I/Os in the CPU time too
    # by scaling with the ramp's share of the run (ramp 1 s of seconds + 1).
    ios_all = ios * (seconds + 1) / seconds
    return {"iops": side["iops"], "mean_us": clat["mean"] / 1000, "p99_us": p99 / 1000,
            "cpu_us": cpu * 1e6 / ios_all if ios_all else 0}, None


def zram_add(size):
    if not ZRAM_CTL.exists():
        return None
    n = int((ZRAM_CTL / "hot_add").read_text())
    pathlib.Path(f"/sys/block/zram{n}/disksize").write_text(str(size))
    return n


def zram_remove(n):
    try:
        pathlib.Path(f"/sys/block/zram{n}/reset").write_text("1")
    finally:
        (ZRAM_CTL / "hot_remove").write_text(str(n))


def run(repo, build_dir, quick=False, prefix="slb"):
    if shutil.which("fio") is None:
        return "fio is not installed (scripts/deps.sh)\n"
    slip = str(pathlib.Path(build_dir) / "slipstream")
    seconds = 2 if quick else 5
    tmp = tempfile.mkdtemp(prefix="slip-bench-block-", dir="/var/tmp")
    rows = []
    zn = None
    try:
        f = os.path.join(tmp, "data")
        subprocess.run(["fio", "--name=lay", f"--filename={f}", "--size=256m", "--rw=write", "--bs=1m",
                        "--direct=1", "--output=/dev/null"], check=True)
        devices = [("root-disk file (ext4 on virtio-blk)", f, "256m")]
        zn = zram_add(256 << 20)
        if zn is not None:
            devices.append((f"zram{zn} (added by the benchmark)", f"/dev/zram{zn}", "256m"))
        for dname, target, size in devices:
            for rw in ("randread", "randwrite"):
                base = None
                for name, opts, shim, extra in CONFIGS:
                    r, err = one(slip, target, size, rw, opts, shim, extra, seconds)
                    if r is None:
                        rows.append(f"| {dname} | {rw} | {name} | failed: {err.strip().splitlines()[-1] if err.strip() else '?'} | | | | |")
                        continue
                    if base is None:
                        base = r["iops"]
                    rows.append(f"| {dname} | {rw} | {name} | {r['iops']:,.0f} | {r['iops'] / base:.2f} | "
                                f"{r['mean_us']:.1f} | {r['p99_us']:.1f} | {r['cpu_us']:.1f} |")
                    time.sleep(0.5)
    finally:
        if zn is not None:
            zram_remove(zn)
        shutil.rmtree(tmp, ignore_errors=True)
    load = open("/proc/loadavg").read().split()[:3]
    head = (f"Load average at the end: {' '.join(load)} (2 cores, shared).\n\n"
            "| device | op | how | IOPS | vs psync plain | mean µs | p99 µs | CPU µs per I/O |\n"
            "|---|---|---|---|---|---|---|---|\n")
    return head + "\n".join(rows) + "\n"
