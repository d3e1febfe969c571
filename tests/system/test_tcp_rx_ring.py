"""Calls that must see what already arrived while it still waits on the AF_XDP RX ring: a
non-blocking accept() after the handshake's last ACK, ioctl(FIONREAD) after data, a non-blocking
recv() after data (issue 15, packetdrill's non-blocking accept and SIOCINQ scripts).

The kernel processes arrivals in its softirq before the program's next system call; the stack
processes frames when something polls. Here nothing polls in between: the program runs with
SLIP_NO_PROGRESS_THREAD=1 and sleeps in time.sleep() while the segments arrive. A kernel client
in a connects and sends 1000 bytes, 500 more half a second later, and 300 more at 3 s.
"""
import json
import os
import subprocess

PORT = 7421

APP = r"""
import fcntl, json, socket, struct, sys, termios, time
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", int(sys.argv[1])))
l.listen(8)
l.setblocking(False)
print("ready", flush=True)
res = {"accepted_at": None}
for attempt in range(1, 9):
    # The first attempt may only take in the SYN (the SYN-ACK leaves then; its ACK comes after
    # the call returned); the next finds the ACK on the ring.
    time.sleep(0.3)
    try:
        c, _ = l.accept()
        res["accepted_at"] = attempt
        break
    except BlockingIOError:
        pass
if res["accepted_at"]:
    time.sleep(1.5)                # the client's second write arrives meanwhile
    n = struct.unpack("i", fcntl.ioctl(c.fileno(), termios.FIONREAD, b"\0" * 4))[0]
    res["fionread"] = n
    c.setblocking(False)
    got = b""
    while len(got) < n:
        got += c.recv(4096)
    time.sleep(2.0)                # the client's third write arrives meanwhile
    try:
        res["recv_after_sleep"] = len(c.recv(4096))
    except BlockingIOError:
        res["recv_after_sleep"] = "EAGAIN"
    c.close()
print(json.dumps(res), flush=True)
"""

CLIENT = r"""
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
s.sendall(b"a" * 1000)
time.sleep(0.5)
s.sendall(b"b" * 500)
time.sleep(2.5)
s.sendall(b"c" * 300)
time.sleep(3)
"""


def test_accept_fionread_and_recv_see_arrivals_waiting_on_the_ring(testbed, slip_bin):
    a, b = testbed.host("a"), testbed.host("b")
    env = dict(os.environ, SLIP_NO_PROGRESS_THREAD="1")
    app = b.popen([str(slip_bin("slipstream")), "run", "--iface", b.ifname, "--", "python3", "-c", APP, str(PORT)],
                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cli = None
    try:
        line = app.stdout.readline()
        assert line.strip() == "ready", line + app.stderr.read()
        cli = a.popen(["python3", "-c", CLIENT, b.addr, str(PORT)],
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = app.communicate(timeout=30)
    finally:
        for p in (app, cli):
            if p and p.poll() is None:
                p.kill()
                p.wait()
    assert app.returncode == 0, out + err
    res = json.loads(out.strip().splitlines()[-1])
    print(f"\napp: {res}")
    assert res["accepted_at"] is not None and res["accepted_at"] <= 2, \
        f"non-blocking accept() did not see the connection whose handshake ended on the ring: {res}"
    assert res["fionread"] == 1500, \
        f"FIONREAD did not count the 500 bytes that arrived while the program slept: {res}"
    assert res["recv_after_sleep"] == 300, \
        f"a non-blocking recv() did not take the 300 bytes that arrived while the program slept: {res}"


UDP_APP = r"""
import json, socket, sys, time
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("0.0.0.0", int(sys.argv[1])))
u.setblocking(False)
print("ready", flush=True)
time.sleep(1.5)                    # the client's datagram arrives meanwhile
try:
    got = len(u.recv(2048))
except BlockingIOError:
    got = "EAGAIN"
print(json.dumps({"recv_after_sleep": got}), flush=True)
"""


def test_udp_recv_sees_a_datagram_waiting_on_the_ring(testbed, slip_bin):
    a, b = testbed.host("a"), testbed.host("b")
    env = dict(os.environ, SLIP_NO_PROGRESS_THREAD="1")
    app = b.popen([str(slip_bin("slipstream")), "run", "--iface", b.ifname, "--", "python3", "-c", UDP_APP,
                   str(PORT + 1)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = app.stdout.readline()
        assert line.strip() == "ready", line + app.stderr.read()
        a.run(["python3", "-c", "import socket, sys; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)"
               ".sendto(b'x' * 200, (sys.argv[1], int(sys.argv[2])))", b.addr, str(PORT + 1)], timeout=10)
        out, err = app.communicate(timeout=30)
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
    assert app.returncode == 0, out + err
    res = json.loads(out.strip().splitlines()[-1])
    assert res["recv_after_sleep"] == 200, \
        f"a non-blocking recv() did not take the datagram that arrived while the program slept: {res}"
