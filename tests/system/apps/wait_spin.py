"""For test_apps.py: epoll_wait (argv[2] "epoll") or poll() ("poll") on a set with an
accelerated socket, under the latency profile (SLIP_SPIN_USEC=100000) or not. With it the wait spins before it sleeps, and while it spins it
must still report a kernel fd (a pipe), data on the socket, a signal (EINTR) and its timeout.
Prints one JSON line: the wall and thread CPU seconds of each wait, and ref_cpu: the CPU seconds
a busy loop got in 0.1 s of wall time around the idle wait (the share of a core to expect)."""
import json
import os
import select
import signal
import sys
import threading
import time

from listening import listen


class Interrupted(Exception):
    pass


def on_alarm(sig, frame):
    raise Interrupted()


def timed(fn):
    w0, c0 = time.monotonic(), time.thread_time()
    try:
        out = fn()
    except Interrupted:
        out = "interrupted"
    return out, round(time.monotonic() - w0, 4), round(time.thread_time() - c0, 4)


l = listen(int(sys.argv[1]))
c, _ = l.accept()
rfd, wfd = os.pipe()
if sys.argv[2] == "poll":
    class Poll:     # select.poll() with epoll's seconds
        def __init__(self):
            self.p = select.poll()

        def register(self, fd, ev):
            self.p.register(fd, ev)

        def poll(self, secs):
            return self.p.poll(int(secs * 1000))
    ep = Poll()
else:
    ep = select.epoll()
ep.register(c.fileno(), select.POLLIN)
ep.register(rfd, select.POLLIN)
res = {}

def busy(secs):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        pass


# What a thread that never sleeps gets of a core for 0.1 s here and now (a loaded machine gives
# a spinning wait less than a core: its CPU time is compared with this, not with the clock).
# A machine so busy that the busy loop got less than a fifth of a core cannot tell a spin from a
# sleep: measured again (up to 5 times) for a calmer moment.
for attempt in range(5):
    _, _, ref_before = timed(lambda: busy(0.1))
    ev, res["idle_wall"], res["idle_cpu"] = timed(lambda: ep.poll(0.3))
    res["idle_events"] = len(ev)
    _, _, ref_after = timed(lambda: busy(0.1))
    res["ref_cpu"] = min(ref_before, ref_after)
    res["idle_attempts"] = attempt + 1
    if res["idle_events"] or res["ref_cpu"] >= 0.02:
        break

threading.Timer(0.03, lambda: os.write(wfd, b"x")).start()
ev, res["pipe_wall"], _ = timed(lambda: ep.poll(2.0))
res["pipe_ready"] = [fd for fd, _ in ev] == [rfd]
os.read(rfd, 1)

signal.signal(signal.SIGALRM, on_alarm)
signal.setitimer(signal.ITIMER_REAL, 0.03)
ev, res["signal_wall"], _ = timed(lambda: ep.poll(2.0))
res["signal"] = ev == "interrupted"

c.send(b"go")                       # the peer answers 30 ms later
ev, res["data_wall"], _ = timed(lambda: ep.poll(2.0))
res["data_ready"] = [fd for fd, _ in ev] == [c.fileno()]
c.recv(1)
c.close()
print(json.dumps(res), flush=True)
