"""TCP_USER_TIMEOUT (RFC 5482, tcp(7); packetdrill user_timeout): set on an accelerated socket,
it ends a connection whose data stays unacknowledged for that long with ETIMEDOUT. Before, the
option went to the kernel socket only and the engine kept retransmitting for minutes.

The program under `slipstream run` in b connects to a kernel listener in a, sets 1000 ms, then
a's interface goes down (nothing answers any more) and the program writes and waits in recv().
"""
import os
import subprocess
import time

PORT = 7431

APP = r"""
import errno, socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, 1000)
print("opt", s.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT), flush=True)
sys.stdin.readline()                   # the peer is gone
t0 = time.monotonic()
s.send(b"x" * 100)
s.settimeout(20)
try:
    s.recv(10)
    print("recv returned", flush=True)
except OSError as e:
    print("error", errno.errorcode.get(e.errno, e), round(time.monotonic() - t0, 2), flush=True)
"""


def test_user_timeout_ends_connection(testbed, slip_bin):
    a, b = testbed.host("a"), testbed.host("b")
    srv = a.popen(["python3", "-c", "import socket, time\nl = socket.socket(); "
                   "l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                   f"l.bind(('0.0.0.0', {PORT})); l.listen(1); print('ready', flush=True)\n"
                   "c, _ = l.accept(); time.sleep(30)\n"],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    app = None
    try:
        assert srv.stdout.readline().strip() == "ready"
        app = b.popen([str(slip_bin("slipstream")), "run", "--iface", b.ifname, "--", "python3", "-c", APP,
                       a.addr, str(PORT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE, text=True)
        line = app.stdout.readline()
        assert line.strip() == "opt 1000", line + app.stderr.read()
        a.run(["ip", "link", "set", a.ifname, "down"], check=True, timeout=10)
        app.stdin.write("go\n")
        app.stdin.flush()
        out, err = app.communicate(timeout=30)
    finally:
        for p in (app, srv):
            if p and p.poll() is None:
                p.kill()
                p.wait()
    print(f"\napp: {out.strip()}")
    words = out.split()
    assert words[:2] == ["error", "ETIMEDOUT"], out + err[-1500:]
    assert float(words[2]) < 5, f"took {words[2]} s for a 1 s user timeout"
