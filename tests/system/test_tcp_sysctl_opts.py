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
# test changes the sysctls and makes a file appear; then it connects or listens.
SCLIENT = r"""
import os, socket, sys, time
s = socket.socket()
print("started", flush=True)
while not os.path.exists(sys.argv[3]):
    time.sleep(0.05)
s.settimeout(20)
s.connect((sys.argv[1], int(sys.argv[2])))
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


def stack_client(a, b, slip, tmp_path, value, port):
    flag = str(tmp_path / f"go-client-{value}")
    set_opts(b, 1 - value)          # what the stack sees when it starts
    srv = a.popen(["python3", "-c", KSERVER, str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cli = None
    try:
        assert srv.stdout.readline().strip() == "listening"
        cli = b.popen(slip + ["python3", "-c", SCLIENT, a.addr, str(port), flag],
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert cli.stdout.readline().strip() == "started", cli.stderr.read() if cli.poll() is not None else ""
        time.sleep(1.1)             # past the stack's once-a-second limit on reading them again
        set_opts(b, value)
        open(flag, "w").close()
        opts = options_of(srv)
        out, err = cli.communicate(timeout=30)
        assert cli.returncode == 0 and "done" in out, (out, err[-1000:])
        return opts
    finally:
        for p in (srv, cli):
            if p and p.poll() is None:
                p.kill()
                p.wait()


def stack_server(a, b, slip, tmp_path, value, port):
    flag = str(tmp_path / f"go-server-{value}")
    set_opts(b, 1 - value)
    srv = b.popen(slip + ["python3", "-c", SSERVER, str(port), flag],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cli = None
    try:
        assert srv.stdout.readline().strip() == "started", srv.stderr.read() if srv.poll() is not None else ""
        time.sleep(1.1)
        set_opts(b, value)
        open(flag, "w").close()
        assert srv.stdout.readline().strip() == "listening", srv.stderr.read() if srv.poll() is not None else ""
        cli = a.popen(["python3", "-c", KCLIENT, b.addr, str(port)], stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE, text=True)
        opts = options_of(cli)
        out, err = srv.communicate(timeout=30)
        assert srv.returncode == 0 and "done" in out, (out, err[-1000:])
        return opts
    finally:
        for p in (srv, cli):
            if p and p.poll() is None:
                p.kill()
                p.wait()


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
        ("client", 0): stack_client(a, b, slip, tmp_path, 0, 7431),
        ("server", 0): stack_server(a, b, slip, tmp_path, 0, 7432),
        ("client", 1): stack_client(a, b, slip, tmp_path, 1, 7433),
        ("server", 1): stack_server(a, b, slip, tmp_path, 1, 7434),
    }
    print(got)
    for (side, value), opts in got.items():
        assert opts & all3 == (all3 if value else 0), f"stack {side}, sysctls {value}: tcpi_options {opts:#x}"
