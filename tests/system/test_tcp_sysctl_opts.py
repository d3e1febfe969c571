"""The SYN options follow the namespace's net.ipv4.tcp_timestamps, tcp_sack and
tcp_window_scaling (src/stack/stack.c slip_stack__tcp_sysctls, src/tcp/tcp_input.c), read again
when a program connects or listens, so a change made after the stack started still counts (as
Linux reads them per connection). The kernel peer in a reports what the connection negotiated
(TCP_INFO tcpi_options):

- a stack client in b, the sysctls set to 0 after the stack started: no timestamps, SACK or
  window scaling on the connection to a kernel server;
- a stack server in b with the same settings, a kernel client: the same;
- both again with the sysctls back at 1: all three on (the test would pass vacuously if the
  kernel peer never negotiated them).
"""
import os
import subprocess
import time

# tcp_info: state, ca_state, retransmits, probes, backoff, options (byte 5)
OPT_TS, OPT_SACK, OPT_WS = 1, 2, 4

KSERVER = r"""
import socket, sys
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", int(sys.argv[1]))); l.listen(1)
print("listening", flush=True)
c, _ = l.accept()
print("options", c.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)[5], flush=True)
c.sendall(b"ok"); c.recv(1)
"""

KCLIENT = r"""
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)
print("options", s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)[5], flush=True)
s.recv(2); s.close()
"""

# The stack's side: its socket exists (so the stack has started, with the old values) before the
# test changes the sysctls and makes a file appear; then it connects or listens. The client also
# prints its connection's congestion control.
SCLIENT = r"""
import os, socket, sys, time
s = socket.socket()
print("started", flush=True)
while not os.path.exists(sys.argv[3]):
    time.sleep(0.05)
s.settimeout(20)
s.connect((sys.argv[1], int(sys.argv[2])))
name = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode()
print("cc", name, flush=True)
assert s.recv(2) == b"ok"
s.close()
print("done", flush=True)
"""

SSERVER = r"""
import os, socket, sys, time
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
print("started", flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
l.bind(("0.0.0.0", int(sys.argv[1]))); l.listen(1)
print("listening", flush=True)
c, _ = l.accept()
c.sendall(b"ok"); c.recv(1)
print("done", flush=True)
"""

KEYS = ("net.ipv4.tcp_timestamps", "net.ipv4.tcp_sack", "net.ipv4.tcp_window_scaling")


def set_opts(host, value):
    for k in KEYS:
        host.run(["sysctl", "-w", f"{k}={value}"], check=True, timeout=10)


def options_of(proc):
    out, err = proc.communicate(timeout=30)
    for line in out.splitlines():
        if line.startswith("options "):
            return int(line.split()[1])
    raise AssertionError(f"no options line: {out!r} {err[-1000:]!r}")


def one_connection(a, b, slip, tmp_path, port, stack_serves, before, after, env=None):
    """The stack's program starts in b after before() (sysctls as it sees them at its start),
    then after() runs and the program connects to a kernel server in a (or listens, and a kernel
    client connects). Returns the kernel side's tcpi_options and the program's output."""
    flag = str(tmp_path / f"go-{port}")
    before()
    if stack_serves:
        kern_cmd = ["python3", "-c", KCLIENT, b.addr, str(port)]
        stack_cmd = slip + ["python3", "-c", SSERVER, str(port), flag]
    else:
        kern_cmd = ["python3", "-c", KSERVER, str(port)]
        stack_cmd = slip + ["python3", "-c", SCLIENT, a.addr, str(port), flag]
    kern = stack = None
    try:
        if not stack_serves:
            kern = a.popen(kern_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert kern.stdout.readline().strip() == "listening"
        stack = b.popen(stack_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                        env=dict(os.environ, **(env or {})))
        assert stack.stdout.readline().strip() == "started", stack.stderr.read() if stack.poll() is not None else ""
        after()
        open(flag, "w").close()
        if stack_serves:
            assert stack.stdout.readline().strip() == "listening", \
                stack.stderr.read() if stack.poll() is not None else ""
            kern = a.popen(kern_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        opts = options_of(kern)
        out, err = stack.communicate(timeout=30)
        assert stack.returncode == 0 and "done" in out, (out, err[-1000:])
        return opts, out
    finally:
        for p in (kern, stack):
            if p and p.poll() is None:
                p.kill()
                p.wait()


def options_follow(a, b, slip, tmp_path, value, port, stack_serves):
    """The sysctls at 1 - value when the program starts, value when it connects or listens: the
    kernel side's tcpi_options."""
    return one_connection(a, b, slip, tmp_path, port, stack_serves, lambda: set_opts(b, 1 - value),
                          lambda: set_opts(b, value))[0]


def test_syn_options_follow_the_namespace_sysctls(testbed, slip_bin, tmp_path):
    a, b = testbed.host("a"), testbed.host("b")
    r = b.run(["sysctl", "-w", "net.ipv4.tcp_timestamps=1"], timeout=10)
    if r.returncode != 0:
        import pytest
        pytest.skip(f"cannot set net.ipv4.tcp_timestamps in a namespace: {r.stderr.strip()}")
    set_opts(a, 1)
    os.chmod(tmp_path, 0o777)
    slip = [str(slip_bin("slipstream")), "run", "--iface", b.ifname, "--"]
    all3 = OPT_TS | OPT_SACK | OPT_WS
    got = {
        ("client", 0): options_follow(a, b, slip, tmp_path, 0, 7431, False),
        ("server", 0): options_follow(a, b, slip, tmp_path, 0, 7432, True),
        ("client", 1): options_follow(a, b, slip, tmp_path, 1, 7433, False),
        ("server", 1): options_follow(a, b, slip, tmp_path, 1, 7434, True),
    }
    print(got)
    for (side, value), opts in got.items():
        assert opts & all3 == (all3 if value else 0), f"stack {side}, sysctls {value}: tcpi_options {opts:#x}"


def set_cc(host, name):
    host.run(["sysctl", "-w", f"net.ipv4.tcp_congestion_control={name}"], check=True, timeout=10)


def stack_cc(a, b, slip, tmp_path, port, sysctl, env, later=None):
    """The congestion control of a stack client's connection from b to a kernel server in a:
    b's net.ipv4.tcp_congestion_control is sysctl when the program starts and makes its socket,
    and later (if given) from then until it connects."""
    _, out = one_connection(a, b, slip, tmp_path, port, False, lambda: set_cc(b, sysctl),
                            lambda: later and set_cc(b, later), env)
    return out.split("cc ", 1)[1].split()[0]


def test_congestion_control_follows_the_namespace_sysctl(testbed, slip_bin, tmp_path):
    """SLIP_TCP_CC's default, "kernel": the stack's connections take the namespace's
    net.ipv4.tcp_congestion_control (src/stack/stack.c slip_stack__tcp_sysctls), as the kernel's
    would, as it stands when the program connects (read again then, as packetdrill's scripts
    need: they set it after their program started); SLIP_TCP_CC=<name> overrides it, which also
    shows that the stack, not the kernel, holds the connection (--strict refuses a fallback as
    well). Outside the first namespace Linux lets only tcp_allowed_congestion_control's
    algorithms be set (this machine: reno and bbr; Debian's default: reno and cubic), so the test
    takes two that can be."""
    import pytest
    a, b = testbed.host("a"), testbed.host("b")
    names = [n for n in ("reno", "bbr", "cubic")
             if b.run(["sysctl", "-w", f"net.ipv4.tcp_congestion_control={n}"], timeout=10).returncode == 0]
    if len(names) < 2:
        pytest.skip(f"only {names} can be set as net.ipv4.tcp_congestion_control in a namespace")
    x, y = names[0], names[1]
    other = next(n for n in ("cubic", "bbr", "reno") if n != x)
    os.chmod(tmp_path, 0o777)
    slip = [str(slip_bin("slipstream")), "run", "--strict", "--iface", b.ifname, "--"]
    got = {
        (x, None, None): stack_cc(a, b, slip, tmp_path, 7441, x, {}),
        (y, None, None): stack_cc(a, b, slip, tmp_path, 7442, y, {}),
        (x, other, None): stack_cc(a, b, slip, tmp_path, 7443, x, {"SLIP_TCP_CC": other}),
        (x, None, y): stack_cc(a, b, slip, tmp_path, 7444, x, {}, later=y),
        (y, None, x): stack_cc(a, b, slip, tmp_path, 7445, y, {}, later=x),
    }
    print(got)
    for (sysctl, env, later), cc in got.items():
        want = env or later or sysctl
        assert cc == want, f"sysctl {sysctl} (then {later}), SLIP_TCP_CC {env}: the connection runs {cc}"
