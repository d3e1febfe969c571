"""fio under the block path (issue 14): psync, pvsync2 and libaio, 4 jobs as processes and as
threads, random writes of 4 KiB O_DIRECT blocks then every block read back and checked (verify=
crc32c), on files in pytest's tmp_path (the root disk). fio must finish without an error and every
fio process must show that the engine did its I/O (SLIP_DUMP_AT_EXIT's counters)."""
import os
import re
import shutil
import subprocess

import pytest

JOB = """
[global]
directory={dir}
size=2m
bs=4k
direct=1
ioengine={engine}
iodepth={depth}
rw=randwrite
verify=crc32c
do_verify=1
verify_fatal=1
verify_state_save=0
numjobs=4
thread={thread}
group_reporting=1
[v]
"""


@pytest.mark.parametrize("thread", [0, 1], ids=["processes", "threads"])
@pytest.mark.parametrize("engine", ["psync", "pvsync2", "libaio"])
def test_fio_verify_under_the_shim(build_dir, tmp_path, engine, thread):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    if shutil.which("fio") is None:
        pytest.skip("fio not installed (scripts/deps.sh installs it)")
    job = tmp_path / "job.fio"
    job.write_text(JOB.format(dir=tmp_path, engine=engine, thread=thread, depth=8 if engine == "libaio" else 1))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLIP_") and k != "LD_PRELOAD"}
    env.update(SLIP_BLOCK_PROBE="0", SLIP_DUMP_AT_EXIT="1")
    r = subprocess.run([str(build_dir / "slipstream"), "run", "--block", "--", "fio", str(job)],
                       capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    print(r.stdout[-3000:], r.stderr[-3000:])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verify" not in r.stderr.lower() or "bad" not in r.stderr.lower(), r.stderr
    assert re.search(r"err= 0", r.stdout), r.stdout
    subs = [int(m.group(1)) for m in re.finditer(r"block pid \d+: submitted (\d+)", r.stderr)]
    # 4 jobs x 512 writes + 512 verifying reads each go through the engine; with processes each
    # job is its own process with its own counters (the parent fio does no I/O), with threads
    # one process counts them all.
    total = sum(subs)
    assert total >= 4 * 1024, f"engine submitted {subs} (want >= {4 * 1024} in all)\n{r.stderr}"
    if engine == "libaio":
        aio = sum(int(m.group(1)) for m in re.finditer(r"aio_submitted (\d+)", r.stderr))
        assert aio >= 4 * 1024, r.stderr
