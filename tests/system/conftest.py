"""pytest fixtures for the system tests: the build folder, built programs, and namespace testbeds
(see testbed.py). Every testbed a fixture makes is torn down at the end of its test, also on failure.
"""

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

HERE = pathlib.Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import testbed as _tb  # noqa: E402
from testbed import Testbed, Topology  # noqa: E402,F401

REPO = HERE.parent.parent


def default_prefix():
    """Namespace prefix for fixtures; SLIP_NS_PREFIX lets parallel pytest runs stay apart."""
    return os.environ.get("SLIP_NS_PREFIX", "slt")


def _need_root():
    if os.geteuid() != 0:
        pytest.skip("needs root: the testbed creates network namespaces and veths")
    for tool in ("ip", "ethtool", "mount"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs the '{tool}' command")


def pytest_configure(config):
    # SIGTERM would skip atexit: turn it into a clean teardown, then die of the signal as asked.
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        def on_term(signum, frame):
            _tb.cleanup_all()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        signal.signal(signal.SIGTERM, on_term)


@pytest.fixture(scope="session")
def build_dir():
    """The Meson build folder: env SLIP_BUILD, default <repo>/build."""
    return pathlib.Path(os.environ.get("SLIP_BUILD", REPO / "build")).resolve()


@pytest.fixture(scope="session")
def nobody_bin(build_dir):
    """nobody_bin("slipstream") -> a copy of build_dir/slipstream that user nobody can run, at the
    same place relative to the library as in the build (the CLI finds libslipstream.so beside
    itself). A checkout in root's 0700 home is out of nobody's reach; the tests that run the
    build as nobody (missing-privilege checks) run these copies."""
    top = pathlib.Path(tempfile.mkdtemp(prefix="slip-nobody-build-"))    # pytest's own tmp is 0700
    done = set()

    def copy(rel):
        dst = top / rel
        if rel not in done:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(build_dir / rel, dst)
            done.add(rel)
        for d in [dst.parent, *dst.parent.parents]:
            if d == top.parent:
                break
            d.chmod(0o755)
        return dst

    def find(name):
        if not (build_dir / name).is_file():
            pytest.skip(f"not built: run make ({build_dir / name} is missing)")
        if name == "slipstream":
            copy("src/preload/libslipstream.so")
        return copy(name)
    yield find
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="session")
def slip_bin(build_dir):
    """slip_bin("slipstream") -> build_dir/slipstream; skips if that program is not built."""
    def find(name):
        p = build_dir / name
        if not (p.is_file() and os.access(p, os.X_OK)):
            pytest.skip(f"not built: run make ({p} is missing)")
        return p
    return find


@pytest.fixture
def make_testbed():
    """make_testbed(topo=None, prefix=None, **kw) -> a started Testbed, torn down at test end."""
    _need_root()
    made = []

    def make(topo=None, prefix=None, **kw):
        tb = Testbed(topo if topo is not None else Topology(),
                     prefix=prefix if prefix is not None else default_prefix(), **kw)
        made.append(tb)
        tb.up()
        return tb

    yield make
    errors = []
    for tb in reversed(made):
        try:
            tb.down()
        except Exception as e:  # noqa: BLE001 - take down the others anyway
            errors.append(e)
    if errors:
        raise errors[0]


@pytest.fixture
def bed6(make_testbed):
    """A started two-host testbed with IPv6 (a 2001:2::1 -- b 2001:2::2 beside the IPv4 pair),
    checked with one ping -6: (a, b)."""
    tb = make_testbed(Topology(ipv6=True))
    a, b = tb.host("a"), tb.host("b")
    r = a.run(["ping", "-6", "-c", "1", "-W", "3", b.addr6])
    assert r.returncode == 0, f"no IPv6 between the hosts: {r.stdout} {r.stderr}"
    return a, b


@pytest.fixture
def testbed(make_testbed):
    """A started two-host testbed: a 198.18.0.1 -- b 198.18.0.2 on veth0, one queue."""
    return make_testbed(Topology())


@pytest.fixture(scope="module")
def posix_peer_bed(build_dir):
    """For the socket-API tests (test_posix, test_api_fuzz): one two-host testbed per module with
    apps/posix_peer.py serving in host a on the kernel. Yields (a, b, prefix), prefix being the
    argv that runs a program under `slipstream run` on b's veth0."""
    _need_root()
    exe = build_dir / "slipstream"
    lib = build_dir / "src" / "preload" / "libslipstream.so"
    for f in (exe, lib):
        if not f.exists():
            pytest.skip(f"not built: {f}")
    # IPv6 too: the v6n_* scenarios talk native IPv6 UDP to a's 2001:2::1 (issue 16)
    tb = Testbed(Topology(ipv6=True), prefix=default_prefix())
    try:
        tb.up()
        a, b = tb.host("a"), tb.host("b")
        peer = a.popen([sys.executable, str(HERE / "apps" / "posix_peer.py"), "--bind", a.addr,
                        "--bind6", a.addr6],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = peer.stdout.readline().strip()
        assert line == "ready", f"posix_peer did not start: {line!r} {peer.stderr.read() if peer.poll() else ''}"
        yield a, b, [str(exe), "run", "--iface", "veth0", "--"]
    finally:
        tb.down()
