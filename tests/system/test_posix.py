"""Differential test of socket-API semantics: apps/posix_semantics.py runs its scenarios in host b
twice, once on the plain kernel and once under `slipstream run --iface veth0`, against
apps/posix_peer.py on the kernel of host a; each scenario's observable outcome (return values,
errno names, bytes, readiness bits, order) must be the same. One test per scenario, plus one that
checks that the accelerated pass really went through the stack.

Known deviations documented in docs/COMPLIANCE.md are xfail(strict=True): a fix makes the test
fail, so the mark (and the COMPLIANCE entry) gets removed."""
import json
import os
import re
import subprocess
import sys
import time

import pytest

from test_apps import snmp


HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join(HERE, "apps", "posix_semantics.py")
PY = sys.executable
PASS_TIMEOUT_S = 120

NAMES = subprocess.run([PY, APP, "--list"], stdout=subprocess.PIPE, text=True, check=True).stdout.split()

# Documented deviations (docs/COMPLIANCE.md, "POSIX socket layer"): expected to differ.
KNOWN = {}


class Outcomes(dict):
    """Both passes' results; a short repr keeps pytest's failure report to the one scenario."""

    def __repr__(self):
        return f"<outcomes of {len(self.get('kernel', {}))} scenarios>"


def run_pass(host, prefix, env=None, names=None):
    """Runs every scenario (or those named); a scenario that hangs or kills the program is recorded
    as such and the program restarted with the ones left. Returns ({name: outcome}, stderr text)."""
    results, errs = {}, []
    left = list(names or NAMES)
    deadline = time.monotonic() + PASS_TIMEOUT_S
    while left and time.monotonic() < deadline:
        cmd = [*prefix, PY, APP, "--peer", "198.18.0.1", *left]
        if env:
            cmd = ["env", *[f"{k}={v}" for k, v in env.items()], *cmd]
        p = host.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = p.communicate(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        errs.append(err)
        started = None
        for line in out.splitlines():
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if "start" in j:
                started = j["start"]
            elif "name" in j:
                results[j["name"]] = j["out"]
                started = None
        if started is not None:
            results[started] = {"crashed_or_hung": f"rc={p.returncode}",
                                "stderr_tail": err.strip().splitlines()[-3:]}
        left = [n for n in left if n not in results]
        if p.returncode == 0 and left:
            break       # it ran everything it was given: nothing more will come
    for n in left:
        results[n] = {"not_run": True}
    return results, "".join(errs)


@pytest.fixture(scope="module")
def outcomes(posix_peer_bed):
    a, b, slip_prefix = posix_peer_bed
    kern, kerr = run_pass(b, [])
    before = snmp(b)
    slip, serr = run_pass(b, slip_prefix, env={"SLIP_DUMP_AT_EXIT": "1"})
    after = snmp(b)
    kseg = {k: after[k] - before.get(k, 0) for k in ("Tcp.InSegs", "Tcp.OutSegs", "Udp.InDatagrams",
                                                      "Udp.OutDatagrams")}
    if os.environ.get("SLIP_POSIX_DUMP"):
        with open(os.environ["SLIP_POSIX_DUMP"], "w") as f:
            json.dump({"kernel": kern, "slip": slip, "slip_stderr": serr}, f, indent=1)
    yield Outcomes(kernel=kern, slip=slip, kernel_stderr=kerr, slip_stderr=serr,
                   kernel_counters_during_slip=kseg)


def test_accelerated(outcomes):
    """The accelerated pass went through the stack: its own counters show the traffic, and the
    kernel of host b saw little of it (connects to closed ports and reservations aside)."""
    err = outcomes["slip_stderr"]
    print("kernel counters of host b during the accelerated pass:", outcomes["kernel_counters_during_slip"])
    assert "not accelerated" not in err and "slipstream: error" not in err, err[-2000:]
    counters = {}
    for m in re.finditer(r"^(tcp\.\w+|udp\.\w+|ip\.\w+) (\d+)$", err, re.M):
        counters[m.group(1)] = counters.get(m.group(1), 0) + int(m.group(2))
    assert counters, "no SLIP_DUMP_AT_EXIT counters in the accelerated pass's stderr:\n" + err[-2000:]
    rx = {k: v for k, v in counters.items() if re.search(r"rx|in", k) and v}
    print("stack counters (rx):", rx)
    tcp_rx = counters.get("tcp.segs_in", 0)
    assert tcp_rx > 100, f"the stack saw little TCP traffic: {counters}"
    kseg = outcomes["kernel_counters_during_slip"]
    assert kseg["Tcp.InSegs"] + kseg["Tcp.OutSegs"] < tcp_rx / 4, (kseg, tcp_rx)


def stack_counters(err):
    counters = {}
    for m in re.finditer(r"^(tcp\.\w+|udp\.\w+|ip\.\w+) (\d+)$", err, re.M):
        counters[m.group(1)] = counters.get(m.group(1), 0) + int(m.group(2))
    return counters


def test_dualstack_accelerated(posix_peer_bed):
    """The dual-stack scenarios (v6_*: AF_INET6 sockets, v4-mapped addresses) on their own under
    slipstream: the stack carried their TCP and UDP, host b's kernel almost none of it (the
    v6-only scenario's refused connect is the kernel's on purpose)."""
    a, b, slip_prefix = posix_peer_bed
    names = [n for n in NAMES if n.startswith("v6_")]
    before = snmp(b)
    res, err = run_pass(b, slip_prefix, env={"SLIP_DUMP_AT_EXIT": "1"}, names=names)
    after = snmp(b)
    assert all("crashed_or_hung" not in r and "not_run" not in r for r in res.values()), res
    c = stack_counters(err)
    kseg = after["Tcp.InSegs"] + after["Tcp.OutSegs"] - before["Tcp.InSegs"] - before["Tcp.OutSegs"]
    kdg = after["Udp.InDatagrams"] + after["Udp.OutDatagrams"] - before["Udp.InDatagrams"] - before["Udp.OutDatagrams"]
    print(f"stack tcp.segs_in {c.get('tcp.segs_in')} udp.rx_datagrams {c.get('udp.rx_datagrams')}; "
          f"host b kernel: {kseg} TCP segments, {kdg} UDP datagrams")
    assert c.get("tcp.segs_in", 0) > 60 and c.get("udp.rx_datagrams", 0) >= 6, c
    assert kseg < c["tcp.segs_in"] / 10, (kseg, c["tcp.segs_in"])
    assert kdg <= 2, kdg    # the v6-only socket's sendto fails before anything leaves


def snmp6(host):
    return {k: int(v) for k, v in (l.split() for l in host.run(["cat", "/proc/net/snmp6"], check=True)
                                   .stdout.splitlines() if l.strip())}


def test_native6_accelerated(posix_peer_bed):
    """The native IPv6 scenarios (v6n_*) on their own under slipstream: the stack carried their
    datagrams (both families for the dual-stack one) and TCP segments, host b's kernel none of the
    IPv6 datagrams (the v6-only socket's v4-mapped sendto fails before anything leaves) and
    almost none of the segments (the TCP MIB counts both families)."""
    a, b, slip_prefix = posix_peer_bed
    names = [n for n in NAMES if n.startswith("v6n_")]
    before, before4 = snmp6(b), snmp(b)
    res, err = run_pass(b, slip_prefix, env={"SLIP_DUMP_AT_EXIT": "1"}, names=names)
    after, after4 = snmp6(b), snmp(b)
    kseg = after4["Tcp.InSegs"] + after4["Tcp.OutSegs"] - before4["Tcp.InSegs"] - before4["Tcp.OutSegs"]
    assert all("crashed_or_hung" not in r and "not_run" not in r for r in res.values()), res
    c = stack_counters(err)
    k6 = after["Udp6InDatagrams"] + after["Udp6OutDatagrams"] - before["Udp6InDatagrams"] - before["Udp6OutDatagrams"]
    print(f"stack udp.rx_datagrams {c.get('udp.rx_datagrams')} ip.rx6_delivered {c.get('ip.rx6_delivered')}; "
          f"host b kernel: {k6} UDP6 datagrams")
    assert c.get("ip.rx6_delivered", 0) >= 10 and c.get("udp.rx_datagrams", 0) >= 10, c
    assert k6 == 0, k6
    print(f"stack tcp.segs_in {c.get('tcp.segs_in')}; host b kernel: {kseg} TCP segments")
    assert c.get("tcp.segs_in", 0) > 100, c
    assert kseg < c["tcp.segs_in"] / 10, (kseg, c["tcp.segs_in"])


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN[n]))
                                  if n in KNOWN else n for n in NAMES])
def test_scenario(outcomes, name):
    k = outcomes["kernel"].get(name)
    s = outcomes["slip"].get(name)
    assert "crashed_or_hung" not in (k or {}) and "not_run" not in (k or {}), f"kernel pass: {k}"
    diffs = {key: (k.get(key, "<missing>"), s.get(key, "<missing>"))
             for key in sorted(set(k) | set(s)) if k.get(key, "<missing>") != s.get(key, "<missing>")}
    assert not diffs, (f"\nscenario {name} differs (kernel vs slipstream):\n"
                       + "\n".join(f"  {key}: kernel={kv!r}  slipstream={sv!r}" for key, (kv, sv) in diffs.items())
                       + f"\n  kernel:     {json.dumps(k)}\n  slipstream: {json.dumps(s)}")


def test_signal_during_a_spin_interrupts_the_call(outcomes, posix_peer_bed):
    """The signal scenarios again with blocking calls spinning for a second (SLIP_SPIN_USEC=1s)
    before they sleep: the SIGALRM of 0.2 s runs its handler while recv is awake in user space,
    not asleep in the kernel. recv must still end with EINTR (no SA_RESTART) or go on (SA_RESTART)
    as the kernel's does. The record of that handler was once cleared before the sleep, and recv
    slept on: the same loss, in the short windows between a wakeup and the next sleep, made
    eintr_no_restart fail now and then on a loaded machine."""
    a, b, slip_prefix = posix_peer_bed
    names = ["eintr_no_restart", "eintr_sa_restart"]
    res, err = run_pass(b, slip_prefix, env={"SLIP_SPIN_USEC": "1000000"}, names=names)
    for n in names:
        assert res[n] == outcomes["kernel"][n], (n, res[n], outcomes["kernel"][n], err[-1500:])
