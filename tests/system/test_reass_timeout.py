"""A reassembly that runs out of time tells its sender (RFC 792 / RFC 1122 §3.2.1.8, RFC 8200 §4.5
/ RFC 4443 §3.3), as Linux does: host a (kernel) sends an accelerated UDP server in b a lone first
fragment over IPv4 and over IPv6 (raw sockets, the rest never follows); the stack, with the
timeouts it read from b's net.ipv4.ipfrag_time and net.ipv6.ip6frag_time (set to 1 s here, so the
test is short), answers each with "fragment reassembly time exceeded" quoting that fragment
(its identification checked), and its counters say it was the stack, not b's kernel."""
import json
import re
import subprocess

from test_apps import PY, slip  # noqa: F401 (fixture)

__all__ = ["slip"]
PORT = 7230

# Accelerated dual-stack UDP socket on PORT; ends by itself (so the stack's counters are dumped).
SERVER = ("import socket, sys, time\n"
          "u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
          "u.bind(('::', int(sys.argv[1]))); u.settimeout(0.2); print('ready', flush=True)\n"
          "end = time.monotonic() + float(sys.argv[2])\n"
          "while time.monotonic() < end:\n"
          "    try: u.recvfrom(65536)\n"
          "    except socket.timeout: pass\n")

# In a: the two lone first fragments, then the ICMP/ICMPv6 errors that come back.
PROBE = r"""
import json, select, socket, struct, sys, time
a4, b4, a6, b6, port = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
r4 = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
r6 = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
data = struct.pack("!HHHH", 40000, port, 8 + 2000, 0) + bytes(992)       # first 1000 bytes of 2008
ip4 = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(data), 0x4242, 0x2000, 64, 17, 0,
                  socket.inet_aton(a4), socket.inet_aton(b4))
s4 = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
s4.sendto(ip4 + data, (b4, 0))
frag = struct.pack("!BBHI", 17, 0, 0x0001, 0x43434343)                  # offset 0, more fragments
ip6 = struct.pack("!IHBB16s16s", 6 << 28, len(frag) + len(data), 44, 64,
                  socket.inet_pton(socket.AF_INET6, a6), socket.inet_pton(socket.AF_INET6, b6))
s6 = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW)
s6.sendto(ip6 + frag + data, (b6, 0))
sent = time.monotonic()
got = {}
while time.monotonic() < sent + 8 and len(got) < 2:
    for s in select.select([r4, r6], [], [], 0.2)[0]:
        pkt, src = s.recvfrom(4096)
        if s is r4:
            icmp = pkt[(pkt[0] & 15) * 4:]
            if icmp[0] == 11:
                q = icmp[8:]
                got["v4"] = {"from": src[0], "code": icmp[1], "quoted_id": struct.unpack("!H", q[4:6])[0],
                             "quoted_dport": struct.unpack("!H", q[(q[0] & 15) * 4 + 2:][:2])[0],
                             "after_s": round(time.monotonic() - sent, 1)}
        elif pkt[0] == 3:
            q = pkt[8:]
            got["v6"] = {"from": src[0], "code": pkt[1], "quoted_next": q[6],
                         "quoted_id": struct.unpack("!I", q[44:48])[0],
                         "quoted_dport": struct.unpack("!H", q[50:52])[0],
                         "after_s": round(time.monotonic() - sent, 1)}
print(json.dumps(got))
"""


def test_reass_timeout_sends_time_exceeded_both_families(bed6, slip):
    a, b = bed6
    b.run(["sysctl", "-qw", "net.ipv4.ipfrag_time=1", "net.ipv6.ip6frag_time=1"], check=True)
    srv = b.popen(["env", "SLIP_DUMP_AT_EXIT=1", *slip([PY, "-c", SERVER, str(PORT), "12"])],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "ready", srv.stderr.read()[-2000:] if srv.poll() else ""
        r = a.run([PY, "-c", PROBE, a.addr, b.addr, a.addr6, b.addr6, str(PORT)], timeout=30)
        assert r.returncode == 0, r.stderr[-2000:]
        got = json.loads(r.stdout.strip().splitlines()[-1])
        _, err = srv.communicate(timeout=30)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    print(got)
    assert got.get("v4", {}).get("from") == b.addr and got["v4"]["code"] == 1, got
    assert got["v4"]["quoted_id"] == 0x4242 and got["v4"]["quoted_dport"] == PORT, got
    assert got.get("v6", {}).get("from") == b.addr6 and got["v6"]["code"] == 1, got
    assert got["v6"]["quoted_next"] == 44 and got["v6"]["quoted_id"] == 0x43434343, got
    assert got["v6"]["quoted_dport"] == PORT, got
    # after the timeouts b's namespace set (1 s), not Linux's defaults (30 s, 60 s)
    assert got["v4"]["after_s"] < 5 and got["v6"]["after_s"] < 5, got
    counters = dict(re.findall(r"^(ip\.reass\w*) (\d+)$", err, re.M))
    print(counters)
    assert int(counters.get("ip.reass_time_exceeded_out", 0)) == 2, err[-3000:]
