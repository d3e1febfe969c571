"""netperf's TCP_MAERTS pattern without netperf (issue 12): the accelerated server sends 256 KiB
buffers with blocking send() until its interval timer (SIGALRM) says the test is over, and takes
any count other than the full buffer for the end of the test, as netserver does; then
shutdown(SHUT_WR), a recv() that waits for the client's FIN, and the results on a control
connection. The run used to end after 0.01 s of 5 (a blocking send that returned short). The
kernel client counts what it received; the server must have sent for (nearly) the whole interval
and the two counts must agree."""
import os
import subprocess
import sys
import time

from test_apps import B_ADDR, Proof, read, slip, start, stop, workdir  # noqa: F401

SECONDS = 2.0
SERVER = r'''
import signal, socket, sys, time
done = False
def alarm(sig, frame):
    global done
    done = True
signal.signal(signal.SIGALRM, alarm)
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[1], 12866))
ls.listen(4)
print("listening", flush=True)
ctl, _ = ls.accept()
data, _ = ls.accept()
buf = bytes(range(256)) * 1024          # 256 KiB, netserver's default send size here
sent = calls = 0
t0 = time.monotonic()
signal.setitimer(signal.ITIMER_REAL, float(sys.argv[2]))
while not done:
    n = data.send(buf)
    if n != len(buf):
        sent += n
        break                            # netserver: "the test was interrupted, must be the end"
    sent += n
    calls += 1
elapsed = time.monotonic() - t0
data.shutdown(socket.SHUT_WR)
data.recv(len(buf))                      # until the client's FIN
ctl.sendall(f"{sent} {elapsed:.3f} {calls}\n".encode())
ctl.close(); data.close()
'''
CLIENT = r'''
import socket, sys
ctl = socket.create_connection((sys.argv[1], 12866))
data = socket.create_connection((sys.argv[1], 12866))
got = 0
while True:
    b = data.recv(1 << 20)
    if not b:
        break
    got += len(b)
data.shutdown(socket.SHUT_WR)
print(got, ctl.makefile().readline().strip(), flush=True)
'''


def test_maerts_send_until_timer(testbed, slip, workdir):
    a, b = testbed.host("a"), testbed.host("b")
    srv, cli = os.path.join(workdir, "srv.py"), os.path.join(workdir, "cli.py")
    for path, text in ((srv, SERVER), (cli, CLIENT)):
        with open(path, "w") as f:
            f.write(text)
    log = os.path.join(workdir, "srv.log")
    p = start(b, slip([sys.executable, srv, B_ADDR, str(SECONDS)]), log)
    try:
        deadline = time.monotonic() + 20
        while "listening" not in read(log) and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.05)
        proof = Proof(b).start(peer=a)
        r = a.run([sys.executable, cli, B_ADDR], timeout=60)
        proof.note_xdp()
        assert r.returncode == 0, (r.stderr, read(log))
        got, sent, elapsed, calls = r.stdout.split()
        print(f"client received {int(got)} bytes; server sent {int(sent)} in {float(elapsed)} s "
              f"({int(calls)} full sends): {int(got) * 8 / float(elapsed) / 1e6:.0f} Mbit/s")
        assert int(got) == int(sent) > 0
        assert float(elapsed) >= 0.9 * SECONDS, f"the send loop ended after {elapsed} s of {SECONDS}"
        proof.check()
        assert p.wait(timeout=20) == 0, read(log)
    finally:
        stop(p)
