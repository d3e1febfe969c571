#!/usr/bin/env python3
"""`make demo`: two network namespaces joined by a veth; in host b the slipstream stack serves a
UDP echo service on AF_XDP while b's kernel keeps answering ping and TCP on the same interface;
host a (plain kernel) talks to both. Then an unmodified program, python's HTTP server, runs on
the stack under `slipstream run` and curl in host a downloads from it. Prints what happened,
then removes everything.

    scripts/demo.py BUILD_DIR
"""

import hashlib
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "system"))

from testbed import Testbed, Topology  # noqa: E402

PEERS = ROOT / "tests" / "system" / "peers"
PY = sys.executable


def say(msg=""):
    print(msg, flush=True)


def main():
    build = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build").resolve()
    echo_exe = build / "tests" / "prog" / "udp_echo"
    if os.geteuid() != 0:
        sys.exit("demo: needs root (it creates network namespaces): run it as root")
    if not echo_exe.exists():
        sys.exit(f"demo: {echo_exe} is missing: run make")

    tb = Testbed(Topology(), prefix="slipdemo", tag="")
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(130))
    try:
        tb.up()
        a, b = tb.host("a"), tb.host("b")
        say(f"1. testbed: host a {a.addr} ({a.ns}) <-- veth --> host b {b.addr} ({b.ns})")
        echo = b.popen([str(echo_exe), "--iface", "veth0", "--port", "7", "--counters"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = echo.stdout.readline()
        if not line.startswith("ready"):
            sys.exit(f"demo: the stack did not start: {line.strip()} {echo.stderr.read().strip()}")
        say("2. host b: slipstream stack up on veth0 (XDP steering program + AF_XDP socket),"
            " UDP echo on port 7")

        server = b.popen([PY, str(PEERS / "tcp_exchange.py"), "server", "8080"], stdout=subprocess.PIPE, text=True)
        server.stdout.readline()
        r = a.run([PY, str(PEERS / "udp_client.py"), b.addr, "7", "20000", "1", "1472"], check=True, timeout=300)
        res = json.loads(r.stdout.strip().splitlines()[-1])
        say(f"3. host a (kernel UDP) -> stack: {res['ok']} of 20000 datagrams of 1..1472 bytes echoed and"
            f" verified byte for byte in {res['seconds']} s ({res['bad']} wrong)")
        r = a.run([PY, str(PEERS / "udp_client.py"), b.addr, "7", "200", "1473", "65507", "8"], check=True,
                  timeout=300)
        big = json.loads(r.stdout.strip().splitlines()[-1])
        say(f"   and {big['ok']} of 200 datagrams of 1473..65507 bytes (IP fragments reassembled and sent"
            " back fragmented)")
        ping = a.run(["ping", "-c", "3", "-i", "0.2", b.addr], timeout=30)
        loss = re.search(r"(\d+)% packet loss", ping.stdout)
        say(f"4. meanwhile b's kernel still owns everything else on veth0: ping {loss.group(0) if loss else 'failed'}",)
        tcp = a.run([PY, str(PEERS / "tcp_exchange.py"), "client", b.addr, "8080", "50"], timeout=60)
        say(f"   kernel TCP to b:8080: {tcp.stdout.strip() or tcp.stderr.strip()}")

        echo.send_signal(signal.SIGTERM)
        out, err = echo.communicate(timeout=30)
        c = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\S+) (\d+)$", out, re.M)}
        say("5. counters of the stack:")
        say(f"   XDP program on veth0: {c.get('steer.veth0.redirected', 0)} frames redirected to the stack,"
            f" {c.get('steer.veth0.passed', 0)} passed to the kernel, {c.get('steer.veth0.malformed', 0)} malformed")
        say(f"   AF_XDP: {c.get('xsk.veth0.q0.rx_packets', 0)} received, {c.get('xsk.veth0.q0.tx_packets', 0)} sent"
            f" in {c.get('xsk.veth0.q0.tx_kicks', 0)} kicks")
        say(f"   IPv4: {c.get('ip.reass_ok', 0)} datagrams reassembled, {c.get('ip.tx_frags', 0)} fragments sent;"
            f" UDP: {c.get('udp.rx_datagrams', 0)} in, {c.get('udp.tx_datagrams', 0)} out,"
            f" {c.get('udp.rx_bad_csum', 0)} bad checksums")
        ok = res["ok"] == 20000 and big["ok"] == 200 and loss and loss.group(1) == "0" and tcp.returncode == 0

        # An unmodified program on the stack: python's HTTP server under `slipstream run`.
        slip = build / "slipstream"
        www = b
        with tempfile.TemporaryDirectory() as d:
            blob = os.urandom(20 << 20)
            with open(os.path.join(d, "blob"), "wb") as f:
                f.write(blob)
            httpd = www.popen([str(slip), "run", "--iface", "veth0", "--", PY, "-m", "http.server", "8000",
                               "--bind", "0.0.0.0", "--directory", d],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            started = time.time()
            got = None
            while time.time() - started < 10 and got is None:
                # Binary output: run curl directly rather than through Host.run (text mode).
                r = subprocess.run(a.wrap(["curl", "-s", "--max-time", "30", f"http://{b.addr}:8000/blob"]),
                                   capture_output=True, timeout=60)
                if r.returncode == 0 and r.stdout:
                    got = r.stdout
                else:
                    time.sleep(0.3)
            xdp = "xdp" in b.run(["ip", "link", "show", "veth0"]).stdout
            httpd.send_signal(signal.SIGINT)
            try:
                httpd.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                httpd.kill()
            web_ok = got is not None and hashlib.sha256(got).digest() == hashlib.sha256(blob).digest()
            say("6. host b: `slipstream run -- python3 -m http.server` (unmodified, on the stack; XDP "
                f"program {'attached' if xdp else 'NOT attached'}); host a: curl downloaded 20 MiB, sha256 "
                + ("equal" if web_ok else "DIFFERENT or failed"))
        ok = ok and web_ok and xdp
        say("7. " + ("demo OK" if ok else "demo FAILED (see above)") + "; removing the namespaces")
        return 0 if ok else 1
    finally:
        tb.down()


if __name__ == "__main__":
    sys.exit(main())
