"""System tests of `slipstream doctor`: run inside testbed namespaces against veths the test made,
as root and as an unprivileged user, on interfaces with and without native XDP."""

import json
import os
import re
import shutil
import subprocess

import pytest

from testbed import Topology

PREFIX = "sld"
SETPRIV = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
           "--bounding-set=-all"]

LINE = re.compile(r"^(ok   |warn |FAIL )\S")


@pytest.fixture
def doctor(slip_bin):
    return str(slip_bin("slipstream"))


@pytest.fixture
def tb(make_testbed):
    return make_testbed(Topology(queues=2), prefix=PREFIX)


def run_doctor(host, doctor, *args, prefix=()):
    r = host.run([*prefix, doctor, "doctor", *args], timeout=60)
    # Never a crash: a signal shows up as a negative return code (or 128+n through the shell).
    assert r.returncode in (0, 1, 2), f"rc={r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def lines(r):
    out = r.stdout.splitlines()
    for l in out:
        assert LINE.match(l), f"not an ok/warn/FAIL line: {l!r}"
    return out


def test_veth_in_testbed_is_fine(tb, doctor):
    b = tb.host("b")
    r = run_doctor(b, doctor, "--iface", "veth0")
    out = lines(r)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not [l for l in out if l.startswith("FAIL")]
    assert "ok   driver: veth 1.0" in out or any(l.startswith("ok   driver: veth") for l in out)
    assert any(l.startswith("ok   native XDP: yes") for l in out), r.stdout
    assert any(l.startswith("ok   AF_XDP zero-copy: no") for l in out), r.stdout
    assert any(l.startswith("ok   no XDP program attached to veth0") for l in out), r.stdout
    assert any(l.startswith("ok   queues: 2 rx, 2 tx") for l in out), r.stdout
    assert "ok   tx checksum offload: off" in out
    assert "ok   MTU 1500" in out
    assert "ok   bpffs mounted at /sys/fs/bpf" in out


def test_nonexistent_interface_fails(tb, doctor):
    r = run_doctor(tb.host("a"), doctor, "--iface", "sldnope0")
    out = lines(r)
    assert r.returncode == 1
    fails = [l for l in out if l.startswith("FAIL")]
    assert len(fails) == 1 and "interface 'sldnope0' does not exist" in fails[0], r.stdout


def test_unknown_option_exit_2(tb, doctor):
    r = run_doctor(tb.host("a"), doctor, "--frobnicate")
    assert r.returncode == 2
    assert r.stdout == ""
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "--frobnicate" in err[0], r.stderr


def test_missing_argument_exit_2(tb, doctor):
    r = run_doctor(tb.host("a"), doctor, "--iface")
    assert r.returncode == 2 and "--iface" in r.stderr


def test_unprivileged_reports_missing_capabilities(tb, nobody_bin):
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux) to drop privileges")
    r = run_doctor(tb.host("b"), str(nobody_bin("slipstream")), "--iface", "veth0", prefix=SETPRIV)
    out = lines(r)
    assert r.returncode == 1, r.stdout + r.stderr
    fails = "\n".join(l for l in out if l.startswith("FAIL"))
    for cap in ("CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_BPF", "CAP_IPC_LOCK"):
        assert cap in fails, f"{cap} not named:\n{r.stdout}"
    assert "running as root" not in r.stdout
    # The interface checks that need no privileges still run.
    assert any(l.startswith("ok   driver: veth") for l in out), r.stdout


def _build_xdp_pass(tmp_path):
    clang = shutil.which("clang")
    if clang is None:
        pytest.skip("needs clang to build a test XDP program")
    src = tmp_path / "pass.bpf.c"
    src.write_text('#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n'
                   'SEC("xdp") int sld_pass(struct xdp_md *ctx) { return XDP_PASS; }\n'
                   'char _license[] SEC("license") = "GPL";\n')
    obj = tmp_path / "pass.bpf.o"
    # The project's <asm/...> headers for BPF (bpf/include, see bpf/meson.build): without them the
    # uapi headers need the host's multiarch tree. clang is installed by scripts/deps.sh, so a
    # failure to build is a broken setup, not a missing kernel feature: it fails, never skips.
    asm = os.path.join(os.path.dirname(__file__), "..", "..", "bpf", "include")
    r = subprocess.run([clang, "-O2", "-g", "-target", "bpf", "-I", asm, "-c", str(src), "-o", str(obj)],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"cannot build a test XDP program: {r.stderr.strip()[:500]}"
    return obj


def test_reports_attached_program(tb, doctor, tmp_path):
    # Attached only to a veth inside the test's own namespace (TESTBED.md safety rules).
    obj = _build_xdp_pass(tmp_path)
    b = tb.host("b")
    r = b.run(["ip", "link", "set", "dev", "veth0", "xdpdrv", "obj", str(obj), "sec", "xdp"])
    if r.returncode != 0:
        pytest.skip(f"cannot attach a native XDP program here: {r.stderr.strip()[:300]}")
    info = json.loads(b.run(["ip", "-j", "-d", "link", "show", "veth0"], check=True).stdout)[0]
    prog_id = info["xdp"]["prog"]["id"]
    r = run_doctor(b, doctor, "--iface", "veth0")
    out = lines(r)
    assert r.returncode == 0, r.stdout
    att = [l for l in out if "XDP program already attached to veth0" in l]
    assert len(att) == 1, r.stdout
    assert att[0].startswith("warn ") and f"id {prog_id} 'sld_pass' (native mode)" in att[0]
    b.run(["ip", "link", "set", "dev", "veth0", "xdp", "off"], check=True)


def _make_non_native(host):
    """Creates, inside the host, an interface type that exists in this kernel; returns its name
    or None. Candidates are types without an XDP implementation in the driver."""
    candidates = [
        ("sldmv0", ["ip", "link", "add", "link", "veth0", "name", "sldmv0", "type", "macvlan",
                    "mode", "bridge"]),
        ("sldipv0", ["ip", "link", "add", "link", "veth0", "name", "sldipv0", "type", "ipvlan",
                     "mode", "l2"]),
        ("sldvx0", ["ip", "link", "add", "sldvx0", "type", "vxlan", "id", "42", "dstport", "4789",
                    "dev", "veth0"]),
        # A tun (not tap) device: tap has native XDP, tun does not.
        ("sldtun0", ["ip", "tuntap", "add", "dev", "sldtun0", "mode", "tun"]),
    ]
    for name, cmd in candidates:
        if host.run(cmd).returncode == 0:
            host.run(["ip", "link", "set", name, "up"])
            return name
    return None


def test_interface_without_native_xdp(tb, doctor):
    b = tb.host("b")
    name = _make_non_native(b)
    if name is None:
        pytest.skip("no interface type without native XDP can be created here "
                    "(macvlan, ipvlan, vxlan, tun all failed)")
    r = run_doctor(b, doctor, "--iface", name)
    out = lines(r)
    assert r.returncode == 0, r.stdout
    native = [l for l in out if "native XDP" in l]
    assert len(native) == 1 and native[0].startswith("warn native XDP: no"), r.stdout
    assert "generic" in native[0]


def test_block_sendfile_line_follows_the_folder(doctor):
    """The block path's sendfile line speaks of the current folder's file system: one with an
    O_DIRECT alignment (the root disk's) gets the frames line, tmpfs the copying one."""
    said = {}
    for d in ("/var/tmp", "/dev/shm"):
        r = subprocess.run([doctor, "doctor"], cwd=d, capture_output=True, text=True, timeout=60)
        said[d] = [l for l in r.stdout.splitlines() if "block path: " in l and "sendfile" in l]
    assert any("into the stack's frames (O_DIRECT alignment" in l for l in said["/var/tmp"]), said
    assert any("reports no O_DIRECT alignment" in l for l in said["/dev/shm"]), said
