"""Programs LD_PRELOAD cannot accelerate are named, not silently left on the kernel (issue 12).

A Go program makes its system calls from its own runtime, not through libc, even when it is
dynamically linked (cgo): the preload loads but never sees a socket. `slipstream run` reads the
executable's ELF sections (.go.buildinfo, .note.go.buildid), prints one warning line and runs it
untouched on the kernel; --strict refuses it with one error line. Checked on a real `go build`
where Go is installed, and always on a C program carrying a .go.buildinfo section (objcopy), so a
machine without Go still checks the detection."""
import os
import shutil
import subprocess

import pytest

from test_apps import lines_of, need, slip, workdir  # noqa: F401

HELLO_C = '#include <stdio.h>\nint main(void) { puts("hello from the program"); return 0; }\n'
HELLO_GO = '''package main

// #include <stdio.h>
import "C"

import "fmt"

func main() { fmt.Println("hello from the program") }
'''


def dynamic(exe):
    r = subprocess.run(["readelf", "-l", exe], capture_output=True, text=True, timeout=30)
    return "program interpreter" in r.stdout


def check_warned_and_refused(b, slip, exe):
    r = b.run(slip([exe]), timeout=60)
    ls = lines_of(r.stderr)
    print("fallback:", r.returncode, r.stdout.strip(), ls)
    assert r.returncode == 0 and r.stdout.strip() == "hello from the program", (r.stdout, r.stderr)
    assert len(ls) == 1 and "Go program" in ls[0] and "not accelerated" in ls[0] and "warning" in ls[0], ls
    r = b.run(slip([exe], opts=["--strict"]), timeout=60)
    ls = lines_of(r.stderr)
    print("--strict:", r.returncode, r.stdout.strip(), ls)
    assert r.returncode != 0 and r.stdout == "", (r.stdout, r.stderr)
    assert len(ls) == 1 and "Go program" in ls[0] and "strict" in ls[0], ls


def test_elf_with_go_buildinfo_section_is_reported(testbed, slip, workdir):
    need("gcc", "objcopy", "readelf")
    src, exe = os.path.join(workdir, "hello.c"), os.path.join(workdir, "hello_go_like")
    with open(src, "w") as f:
        f.write(HELLO_C)
    subprocess.run(["gcc", "-o", exe, src], check=True, timeout=60)
    b = testbed.host("b")
    plain = b.run(slip([exe], opts=["--strict"]), timeout=60)
    # The same program without the section runs accelerated, without a word.
    assert plain.returncode == 0 and plain.stderr == "", plain.stderr
    info = os.path.join(workdir, "buildinfo")
    with open(info, "wb") as f:
        f.write(b"\xff Go buildinf:\x08\x02" + bytes(16))     # the header Go writes there
    subprocess.run(["objcopy", "--add-section", f".go.buildinfo={info}", exe], check=True, timeout=60)
    assert dynamic(exe)
    check_warned_and_refused(b, slip, exe)


def test_real_go_program_is_reported(testbed, slip, workdir):
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
    if not go:
        pytest.skip("go is not installed (the synthetic ELF test checks the detection)")
    need("gcc", "readelf")
    d = os.path.join(workdir, "gohello")
    os.makedirs(d)
    with open(os.path.join(d, "main.go"), "w") as f:
        f.write(HELLO_GO)
    env = dict(os.environ, CGO_ENABLED="1", GO111MODULE="off", GOFLAGS="")
    exe = os.path.join(d, "gohello")
    r = subprocess.run([go, "build", "-o", exe, "main.go"], cwd=d, env=env, capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == 0, r.stderr
    assert dynamic(exe), "cgo build is expected to be dynamically linked"
    check_warned_and_refused(testbed.host("b"), slip, exe)
