"""SLIP_* configuration values (issue 11, item 6): `slipstream run` refuses a bad value before
the program starts, with one line naming the variable; the library used directly (LD_PRELOAD)
warns once and uses the default, or stops in strict mode; docs/CONFIG.md's tables are what
`slipstream config --markdown` prints from the parser's own table.

Every program runs in a network namespace of its own with no interface but lo (unshare --net):
strict mode opens the stack at once, on the default interfaces, and a build that lets a bad value
through must not touch an interface of this machine's namespace."""
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
PY = sys.executable

# The bad values of the issue, and a few more of each kind.
BAD = [
    ("SLIP_SPIN_USEC", "-5"),
    ("SLIP_SPIN_USEC", "1e99"),
    ("SLIP_EXIT_LINGER_MS", "x"),
    ("SLIP_SHARE", "maybe"),
    ("SLIP_STRICT", "maybe"),
    ("SLIP_RING_SIZE", "1000"),
    ("SLIP_BIND", "fast"),
    ("SLIP_IFACES", "veth0,,veth1"),
    ("SLIP_EPOLL_ALL_MS", "0"),
    ("SLIP_FAULT_DROP", "2000000"),
]


def isolated(cmd):
    """cmd in a new, empty network namespace (gone when cmd ends)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1): the programs run in a network namespace of their own")
    return ["unshare", "--net", "--", *cmd]


def clean_env(**extra):
    """The environment without any SLIP_* variable of the caller, plus extra."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("SLIP_")}
    e.update(extra)
    return e


def marker_cmd(path):
    """A program that proves it ran by creating path."""
    return [PY, "-c", f"open({str(path)!r}, 'w').close()"]


@pytest.mark.parametrize("name,value", BAD)
def test_run_refuses_a_bad_value_before_the_program_starts(slip_bin, tmp_path, name, value):
    exe = slip_bin("slipstream")
    marker = tmp_path / "ran"
    r = subprocess.run(isolated([str(exe), "run", "--", *marker_cmd(marker)]), env=clean_env(**{name: value}),
                       capture_output=True, text=True, timeout=30)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert r.returncode == 2, (r.returncode, lines)
    assert len(lines) == 1, lines
    assert f"{name}={value} is not valid: want " in lines[0], lines
    assert not marker.exists(), "the program ran despite the bad value"


def test_run_reports_every_bad_value(slip_bin, tmp_path):
    r = subprocess.run(isolated([str(slip_bin("slipstream")), "run", "--", "true"]),
                       env=clean_env(SLIP_SPIN_USEC="-5", SLIP_SHARE="maybe"), capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2
    assert "SLIP_SPIN_USEC=-5" in r.stderr and "SLIP_SHARE=maybe" in r.stderr, r.stderr


def test_run_checks_what_its_options_set(slip_bin, tmp_path):
    """--iface names go into SLIP_IFACES and are checked like any value."""
    marker = tmp_path / "ran"
    r = subprocess.run(isolated([str(slip_bin("slipstream")), "run", "--iface", "x" * 20, "--", *marker_cmd(marker)]),
                       env=clean_env(), capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "SLIP_IFACES=" in r.stderr, r.stderr
    assert not marker.exists()


@pytest.mark.parametrize("env", [
    {"SLIP_SPIN_USEC": "100"},
    {"SLIP_SPIN_USEC": "100ms"},
    {"SLIP_EXIT_LINGER_MS": "500"},
    {"SLIP_SHARE": "0"},
    {"SLIP_STRICT": "0"},
    {"SLIP_SHARE": ""},         # empty: the default
])
def test_run_starts_with_good_values(slip_bin, tmp_path, env):
    marker = tmp_path / "ran"
    r = subprocess.run(isolated([str(slip_bin("slipstream")), "run", "--profile", "latency", "--",
                                 *marker_cmd(marker)]),
                       env=clean_env(**env), capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == "", r.stderr
    assert marker.exists()


def preload_run(build_dir, tmp_path, env):
    lib = build_dir / "src" / "preload" / "libslipstream.so"
    if not lib.exists():
        pytest.skip(f"not built: {lib}")
    marker = tmp_path / "ran"
    # LD_PRELOAD for the program only, not for unshare, which runs in this machine's namespace.
    r = subprocess.run(isolated(["env", f"LD_PRELOAD={lib}", *marker_cmd(marker)]), env=clean_env(**env),
                       capture_output=True, text=True, timeout=30)
    return r, [l for l in r.stderr.splitlines() if l.strip()], marker.exists()


@pytest.mark.parametrize("name,value", BAD[:4])
def test_library_warns_once_and_uses_the_default(build_dir, tmp_path, name, value):
    r, lines, ran = preload_run(build_dir, tmp_path, {name: value})
    assert r.returncode == 0 and ran, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"slipstream: warning: {name}={value} is not valid: want "), lines
    assert "using the default" in lines[0], lines


@pytest.mark.parametrize("name,value", BAD[:4])
def test_library_in_strict_mode_stops_on_a_bad_value(build_dir, tmp_path, name, value):
    r, lines, ran = preload_run(build_dir, tmp_path, {"SLIP_STRICT": "1", name: value})
    assert r.returncode == 1 and not ran, (r.returncode, lines)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"slipstream: error: {name}={value} is not valid: want "), lines
    assert "strict mode" in lines[0]


def test_config_doc_lists_every_variable(slip_bin):
    r = subprocess.run([str(slip_bin("slipstream")), "config", "--doc"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0
    for name, _ in BAD:
        assert name in r.stdout
    # No SLIP_* variable is read past the table (a getenv of its own would bypass the checks).
    read = set()
    for d in ("src", "tools"):
        for f in (REPO / d).rglob("*.[ch]"):
            read |= set(re.findall(r'getenv\("(SLIP_[A-Z0-9_]+)"\)', f.read_text()))
    assert read == set(), f"read with getenv, not through base/env.h: {sorted(read)}"


def test_config_md_tables_are_generated_from_the_table(slip_bin):
    r = subprocess.run([str(slip_bin("slipstream")), "config", "--markdown"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0
    doc = (REPO / "docs" / "CONFIG.md").read_text()
    begin, end = "<!-- slipstream config --markdown: begin -->\n", "<!-- slipstream config --markdown: end -->"
    assert begin in doc and end in doc, "docs/CONFIG.md lost its generated block"
    block = doc[doc.index(begin) + len(begin):doc.index(end)]
    assert block.strip() == r.stdout.strip(), \
        "docs/CONFIG.md differs from `slipstream config --markdown`: regenerate its block"
