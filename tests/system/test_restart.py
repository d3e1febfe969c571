"""A server stopped and started again at once, while a kernel client keeps asking it (issue 12):
the new server must run accelerated every time (no "did not answer" fallback to the kernel,
always a listener), and answer. nginx (foreground, SIGQUIT: graceful stop) and redis
(foreground, SIGTERM), three restarts each; after each start a transfer proves the bypass with
the kernel counters of host b, as test_apps.py does."""
import os
import signal
import subprocess
import threading
import time

import pytest

from test_apps import B_ADDR, Proof, need, nginx_conf, read, redis_cli, slip, start, stop, \
    wait_listening, workdir, www  # noqa: F401

RESTARTS = 3
FALLBACK_WORDS = ("not accelerated", "did not answer", "slipstream: error")


class Loop:
    """argv run again and again in host a until stopped (the load during the restarts)."""

    def __init__(self, host, argv):
        self.host, self.argv = host, argv
        self.ok = self.failed = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            r = self.host.run(self.argv, timeout=30)
            if r.returncode == 0:
                self.ok += 1
            else:
                self.failed += 1
                time.sleep(0.02)

    def stop(self):
        self._stop.set()
        self._t.join(timeout=40)


def graceful(p, sig, timeout=15):
    os.killpg(p.pid, sig)
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return stop(p)


def check_log(text, what):
    for w in FALLBACK_WORDS:
        assert w not in text, f"{what}: {text[-2000:]}"


def test_nginx_immediate_restart_under_load(testbed, slip, www, workdir):
    need("nginx", "curl")
    a, b = testbed.host("a"), testbed.host("b")
    d, sums = www
    conf = nginx_conf(workdir, d, daemon=False)
    url = f"http://{B_ADDR}:8080/1k"
    loop = Loop(a, ["curl", "-sS", "--fail", "--max-time", "5", "-o", "/dev/null", url])
    try:
        for i in range(RESTARTS + 1):
            log = os.path.join(workdir, f"launcher{i}.log")
            p = start(b, slip(["nginx", "-c", conf, "-p", workdir + "/"]), log)
            wait_listening(b, 8080, proc=p, log=log)
            proof = Proof(b).start(peer=a)
            out = os.path.join(workdir, f"big{i}")
            r = a.run(["curl", "-sS", "--fail", "--max-time", "30", "-o", out, f"http://{B_ADDR}:8080/3m"],
                      timeout=60)
            proof.note_xdp()
            assert r.returncode == 0, (i, r.stderr, read(log))
            assert open(out, "rb").read() and __import__("hashlib").sha256(open(out, "rb").read()).hexdigest() \
                == sums["3m"]
            proof.check()
            check_log(read(log), f"start {i}")
            graceful(p, signal.SIGQUIT)     # and at once the next start
    finally:
        loop.stop()
    print(f"client loop during {RESTARTS} restarts: {loop.ok} answered, {loop.failed} refused or failed")
    assert loop.ok > 0


def test_redis_immediate_restart_under_load(testbed, slip, workdir):
    need("redis-server", "redis-cli")
    a, b = testbed.host("a"), testbed.host("b")
    cmd = ["redis-server", "--bind", B_ADDR, "--port", "6379", "--save", "", "--appendonly", "no",
           "--protected-mode", "no", "--dir", workdir]
    loop = Loop(a, ["redis-cli", "-h", B_ADDR, "-p", "6379", "PING"])
    try:
        for i in range(RESTARTS + 1):
            log = os.path.join(workdir, f"redis{i}.log")
            p = start(b, slip(cmd), log)
            wait_listening(b, 6379, proc=p, log=log)
            proof = Proof(b).start(peer=a)
            big = os.urandom(40_000).hex()     # one argument: under 128 KiB
            assert redis_cli(a, "SET", "big", big) == "OK", read(log)
            assert redis_cli(a, "GET", "big") == big
            proof.note_xdp()
            proof.check()
            check_log(read(log), f"start {i}")
            graceful(p, signal.SIGTERM)
    finally:
        loop.stop()
    print(f"client loop during {RESTARTS} restarts: {loop.ok} answered, {loop.failed} refused or failed")
    assert loop.ok > 0
