"""The block path against the kernel (issue 14): tests/prog/blk_ops runs one fixed sequence of file
and block-device operations (O_DIRECT pread/pwrite and their vector forms, the file offset, EINVAL
for misaligned O_DIRECT, short reads at EOF, O_APPEND, ENOSPC past a device's end, dup, F_SETFL,
fsync, fork (and a raw fork syscall without atfork handlers), threads, libaio, a daemon closing every fd it does not know, exec with the fd open) once on the kernel and once under the shim,
and every line (return value, errno, a digest of the data read) must be the same, and so must the
file or device contents afterwards. The shim's run must show that its engine did the I/O.

Devices: a file on the root disk's file system (pytest's tmp_path), a loop device over a file in
tmp_path, a zram device the test adds. Those two devices are the only block devices written, and
they are detached/removed at the end, also on failure."""
import hashlib
import os
import pathlib
import re
import shutil
import subprocess

import pytest

ZRAM_CTL = pathlib.Path("/sys/class/zram-control")


def _need_root():
    if os.geteuid() != 0:
        pytest.skip("needs root (loop and zram devices, O_DIRECT on them)")


@pytest.fixture
def blk_ops(build_dir):
    p = build_dir / "tests/prog/blk_ops"
    if not p.exists():
        pytest.skip("blk_ops not built (libaio-dev missing: scripts/deps.sh installs it)")
    return str(p)


@pytest.fixture
def lib(build_dir):
    return str(build_dir / "src/preload/libslipstream.so")


# The shim's settings a run uses: the engine on every call (with registered files, the default),
# the per-device probe (half of the first calls are the kernel's), a SQPOLL submission thread with
# user-space polling, the registered bounce buffer, the engine without registered files, and a
# polled ring (IOPOLL) forced on a device that has no poll queues.
MODES = {
    "engine": {"SLIP_BLOCK_PROBE": "0"},
    "probing": {"SLIP_BLOCK_PROBE": "1"},
    "sqpoll": {"SLIP_BLOCK_PROBE": "0", "SLIP_BLOCK_SQPOLL": "1", "SLIP_BLOCK_SPIN_USEC": "50"},
    "bounce": {"SLIP_BLOCK_PROBE": "0", "SLIP_BLOCK_BOUNCE": "1"},
    "no-fixed-files": {"SLIP_BLOCK_PROBE": "0", "SLIP_BLOCK_FIXED_FILES": "0"},
    "iopoll-forced": {"SLIP_BLOCK_PROBE": "0", "SLIP_BLOCK_IOPOLL": "2"},
}


def run_ops(blk_ops, kind, path, shim_lib=None, mode="engine"):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLIP_") and k != "LD_PRELOAD"}
    if shim_lib:
        env.update(LD_PRELOAD=shim_lib, SLIP_BLOCK="1", SLIP_DUMP_AT_EXIT="1", **MODES[mode])
    r = subprocess.run([blk_ops, kind, path], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, f"blk_ops {kind} {path} {'shim' if shim_lib else 'kernel'}: rc {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout, r.stderr


def engine_counts(stderr):
    """The 'engine: submitted N ...' lines blk_ops prints (one per image: before and after exec)."""
    return [int(m.group(1)) for m in re.finditer(r"engine: submitted (\d+)", stderr)]


def compare(kernel_out, shim_out):
    k, s = kernel_out.splitlines(), shim_out.splitlines()
    diffs = [f"  step {i}: kernel {a!r} / shim {b!r}" for i, (a, b) in enumerate(zip(k, s)) if a != b]
    assert len(k) == len(s) and not diffs, (
        f"{len(diffs)} of {len(k)} steps differ (kernel {len(k)} lines, shim {len(s)}):\n" + "\n".join(diffs[:40]))


def digest(path, limit=None):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(limit) if limit else f.read())
    return h.hexdigest()


@pytest.mark.parametrize("mode", list(MODES))
def test_file_on_root_disk_same_as_kernel(blk_ops, lib, tmp_path, mode):
    _need_root()
    k_out, k_err = run_ops(blk_ops, "file", str(tmp_path / "kernel.dat"))
    s_out, s_err = run_ops(blk_ops, "file", str(tmp_path / "shim.dat"), lib, mode)
    print(s_err)
    compare(k_out, s_out)
    assert digest(tmp_path / "kernel.dat") == digest(tmp_path / "shim.dat"), "file contents differ"
    assert engine_counts(k_err) == [], k_err            # no engine without the shim
    counts = engine_counts(s_err)
    # Both images (before and after exec) used the engine; with probing, half of the first
    # calls on the device are the kernel's own, still the engine did some.
    assert len(counts) == 2 and all(c > 0 for c in counts), s_err
    assert "block pid" in s_err, s_err                   # SLIP_DUMP_AT_EXIT's counters
    # The engine's requests named registered files (and went through the bounce buffer when asked).
    fixed = [int(x) for x in re.findall(r"fixed_file_ops (\d+)", s_err)]
    bounced = [int(x) for x in re.findall(r"bounced_ops (\d+)", s_err)]
    assert (sum(fixed) > 0) == (mode != "no-fixed-files"), s_err
    assert (sum(bounced) > 0) == (mode == "bounce"), s_err
    # A polled ring on a device without poll queues: the kernel either polls until the interrupt's
    # completion (iopoll_ops) or refuses (EOPNOTSUPP: iopoll_refused) and the engine goes back to
    # an interrupt-driven ring with the same request; either way the results are the kernel's.
    polled = sum(int(a) + int(b) for a, b in re.findall(r"iopoll_ops (\d+) iopoll_refused (\d+)", s_err))
    assert (polled > 0) == (mode == "iopoll-forced"), s_err
    # The fork child (it ends with _exit, which prints its counters too) made a ring of its own
    # instead of using its parent's.
    child = re.search(r"fork child pid (\d+)", s_err).group(1)
    rings = re.search(rf"block pid {child}: submitted (\d+) .* rings (\d+)", s_err)
    assert rings and int(rings.group(1)) > 0 and int(rings.group(2)) >= 1, s_err


def _losetup(backing):
    r = subprocess.run(["losetup", "-f", "--show", str(backing)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"no loop device here: {r.stderr.strip()}")
    return r.stdout.strip()


def test_loop_device_same_as_kernel(blk_ops, lib, tmp_path):
    _need_root()
    if shutil.which("losetup") is None:
        pytest.skip("needs losetup")
    outs = {}
    for who in ("kernel", "shim"):
        backing = tmp_path / f"{who}.img"
        with open(backing, "wb") as f:
            f.truncate(16 << 20)
        dev = _losetup(backing)
        try:
            outs[who] = run_ops(blk_ops, "dev", dev, lib if who == "shim" else None)
        finally:
            subprocess.run(["losetup", "-d", dev], check=False)
    compare(outs["kernel"][0], outs["shim"][0])
    assert digest(tmp_path / "kernel.img") == digest(tmp_path / "shim.img"), "device contents differ"
    assert engine_counts(outs["shim"][1])[0] > 0, outs["shim"][1]


class Zram:
    """A zram device of our own (hot_add), reset and removed at the end."""

    def __init__(self, size):
        if not ZRAM_CTL.exists():
            pytest.skip("no zram here (/sys/class/zram-control)")
        self.n = int((ZRAM_CTL / "hot_add").read_text())
        self.size = size
        self.path = f"/dev/zram{self.n}"
        (pathlib.Path(f"/sys/block/zram{self.n}") / "disksize").write_text(str(size))

    def reset(self):
        (pathlib.Path(f"/sys/block/zram{self.n}") / "reset").write_text("1")
        (pathlib.Path(f"/sys/block/zram{self.n}") / "disksize").write_text(str(self.size))

    def remove(self):
        try:
            (pathlib.Path(f"/sys/block/zram{self.n}") / "reset").write_text("1")
        finally:
            (ZRAM_CTL / "hot_remove").write_text(str(self.n))


def test_zram_same_as_kernel(blk_ops, lib):
    _need_root()
    z = Zram(16 << 20)
    try:
        k_out, _ = run_ops(blk_ops, "dev", z.path)
        k_sum = digest(z.path)
        z.reset()
        s_out, s_err = run_ops(blk_ops, "dev", z.path, lib)
        s_sum = digest(z.path)
    finally:
        z.remove()
    compare(k_out, s_out)
    assert k_sum == s_sum, "device contents differ"
    assert engine_counts(s_err)[0] > 0, s_err


def test_zram_steps_aside(blk_ops, lib):
    """zram is bio-based: it compresses and copies in the submitting thread, so the kernel's pread
    is done when it returns, while io_uring hands every request to a worker thread. With the probe
    on (the default), the shim gives that device to the kernel before the first request, for
    pread/pwrite and libaio alike: the same results, no request through the engine."""
    _need_root()
    z = Zram(16 << 20)
    try:
        k_out, _ = run_ops(blk_ops, "dev", z.path)
        z.reset()
        s_out, s_err = run_ops(blk_ops, "dev", z.path, lib, mode="probing")
    finally:
        z.remove()
    compare(k_out, s_out)
    m = re.search(r"engine: submitted (\d+) completed \d+ aio (\d+) passed_probe (\d+)", s_err)
    assert m, s_err
    submitted, aio, passed = (int(x) for x in m.groups())
    assert submitted == 0 and aio == 0, f"the engine served zram requests:\n{s_err}"
    assert passed > 0, f"nothing was counted as given to the kernel:\n{s_err}"


def _run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{' '.join(cmd)}: {r.stderr.strip()}"
    return r.stdout


# Runs inside a mount namespace of its own (unshare -m, private propagation), so the mount is
# never seen by, nor copied into, a namespace anyone else makes meanwhile (`ip netns exec` copies
# the mount table: a copy would keep the file system, and so the loop device, alive after our
# umount); it ends with the namespace at the latest.
EIO_SCRIPT = r"""
set -e
mount -o noatime "$DEV" "$MNT"
trap 'umount "$MNT"' EXIT
for who in kernel shim; do
    dd if=/dev/urandom of="$MNT/$who.dat" bs=64k count=1 conv=fsync status=none
done
first=$(filefrag -v "$MNT/kernel.dat" "$MNT/shim.dat" | awk '$1 == "0:" { sub(/\.\./, "", $4); print $4 }' | sort -n | head -1)
echo "first data block $first" >&2
[ "$first" -gt 16 ]
truncate -s $((first * 4096)) "$IMG"
losetup -c "$DEV"
"$BLK_OPS" eio "$MNT/kernel.dat" > "$OUT/kernel.out" 2> "$OUT/kernel.err" || echo "kernel run: $?" >&2
env LD_PRELOAD="$LIB" SLIP_BLOCK=1 SLIP_DUMP_AT_EXIT=1 SLIP_BLOCK_PROBE=0 \
    "$BLK_OPS" eio "$MNT/shim.dat" > "$OUT/shim.out" 2> "$OUT/shim.err" || echo "shim run: $?" >&2
"""


def test_device_eio_same_as_kernel(blk_ops, lib, tmp_path):
    """A device that fails requests: an ext2 file system on a loop device of our own, two files
    written, then the device shrunk below their blocks (the backing file truncated, `losetup -c`).
    Every request for those blocks then fails in the block layer (beyond the end of the device)
    with EIO: pread, pwrite, preadv, pwritev2, libaio's events must give the kernel's EIO under the
    engine too. (No device-mapper, fault injection, null_blk or ublk in this kernel: this is the
    way it has to a device error.) The mount lives in a private mount namespace; the loop device
    is detached at the end, also on failure."""
    _need_root()
    for tool in ("losetup", "mkfs.ext2", "filefrag", "unshare"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool}")
    img, mnt = tmp_path / "eio.img", tmp_path / "mnt"
    mnt.mkdir()
    with open(img, "wb") as f:
        f.truncate(32 << 20)
    _run(["mkfs.ext2", "-q", "-F", "-b", "4096", str(img)])
    dev = _losetup(img)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLIP_") and k != "LD_PRELOAD"}
        env.update(DEV=dev, MNT=str(mnt), IMG=str(img), OUT=str(tmp_path), BLK_OPS=blk_ops, LIB=lib)
        r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", EIO_SCRIPT],
                           capture_output=True, text=True, env=env, timeout=120)
        if r.returncode != 0 and "cannot change root filesystem propagation" in r.stderr:
            # In a chroot (CI's clean root) "/" is no mount point and cannot be made private: the
            # mount may then be seen outside while it exists (the script unmounts it at exit).
            r = subprocess.run(["unshare", "-m", "--propagation", "unchanged", "sh", "-c", EIO_SCRIPT],
                               capture_output=True, text=True, env=env, timeout=120)
        if r.returncode != 0 and "mount" in r.stderr and not (tmp_path / "kernel.out").exists():
            pytest.skip(f"cannot mount ext2 on {dev} in a mount namespace: {r.stderr.strip()}")
        assert r.returncode == 0 and "run:" not in r.stderr, r.stderr
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)
    k_out, s_out = (tmp_path / "kernel.out").read_text(), (tmp_path / "shim.out").read_text()
    s_err = (tmp_path / "shim.err").read_text()
    assert "EIO" in k_out and "-5" in k_out, f"the device did not fail as planned:\n{k_out}"
    compare(k_out, s_out)
    m = re.search(r"engine: submitted (\d+) completed \d+ aio (\d+)", s_err)
    assert m and int(m.group(1)) >= 5 and int(m.group(2)) >= 2, f"the engine did not take the requests:\n{s_err}"
