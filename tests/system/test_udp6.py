"""UDP over native IPv6 through the stack (issue 16) under `slipstream run`, against Linux peers in
the testbed's IPv6 (2001:2::/48 and link-local addresses, inside the test's namespaces only): an
accelerated client and an accelerated server, datagrams large enough to be fragmented both ways,
a link-local peer with its scope id, an ICMPv6 port unreachable on a connected socket, and
neighbour discovery done again by the kernel after `ip -6 neigh flush`. Proof of acceleration: the
accelerated host's kernel counted none of the UDP datagrams (/proc/net/snmp6), while the peer's
counted them all; ping -6 of the accelerated host keeps working (the kernel's)."""
import json
import os
import re
import shutil
import socket
import subprocess
import time

import pytest

from test_apps import PY, assert_accelerated_log, diff, slip, xdp_attached  # noqa: F401 (fixture)
from testbed import Topology

__all__ = ["slip"]
PORT = 7200
SIZES = [1, 1200, 1452, 1453, 3000, 9000, 20000]


def snmp6(host):
    return {k: int(v) for k, v in (l.split() for l in host.run(["cat", "/proc/net/snmp6"], check=True)
                                   .stdout.splitlines() if l.strip())}


def ifindex(host):
    return json.loads(host.run(["ip", "-j", "link", "show", "veth0"], check=True).stdout)[0]["ifindex"]


def linklocal(host):
    out = json.loads(host.run(["ip", "-j", "-6", "addr", "show", "dev", "veth0"], check=True).stdout)
    return next(a["local"] for a in out[0]["addr_info"] if a.get("scope") == "link")


# Echo server: replies with the datagram and, after it, the source address and port it saw.
ECHO = ("import socket, sys\n"
        "s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
        "s.bind(('::', int(sys.argv[1]))); print('ready', flush=True)\n"
        "while True:\n"
        "    d, p = s.recvfrom(65536)\n"
        "    s.sendto(d + (' %s %d' % (p[0].split('%')[0], p[1])).encode(), p)\n")

# Client: for each (address, scope) sends every size, checks each reply byte for byte and that
# it came from the address it was sent to; prints one JSON line.
CLIENT = ("import json, socket, sys\n"
          "u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); u.settimeout(5)\n"
          "sizes = [int(x) for x in sys.argv[2].split(',')]\n"
          "res = []\n"
          "for dst in sys.argv[3:]:\n"
          "    addr, _, scope = dst.partition('%')\n"
          "    for n in sizes:\n"
          "        data = bytes((i * 7 + n) & 0xff for i in range(n))\n"
          "        u.sendto(data, (addr, int(sys.argv[1]), 0, int(scope or 0)))\n"
          "        d, p = u.recvfrom(65536)\n"
          "        assert d[:n] == data, (n, len(d))\n"
          "        assert p[0].split('%')[0] == addr, (p, addr)\n"
          "        res.append([addr, n, d[n:].decode().split()])\n"
          "print(json.dumps({'port': u.getsockname()[1], 'res': res}))\n")


def run_client(host, slip, dsts, sizes=SIZES):
    r = host.run(slip([PY, "-c", CLIENT, str(PORT), ",".join(map(str, sizes)), *dsts]), timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert_accelerated_log(r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_udp6_client_fragments_linklocal_and_nd_flush(bed6, slip):
    a, b = bed6
    echo = a.popen([PY, "-c", ECHO, str(PORT)], stdout=subprocess.PIPE, text=True)
    try:
        assert echo.stdout.readline().strip() == "ready"
        ll_a = linklocal(a)
        b6, a6 = snmp6(b), snmp6(a)
        out = run_client(b, slip, [a.addr6, f"{ll_a}%{ifindex(b)}"])
        # the kernel resolves the neighbour again after a flush, for the stack as for itself
        b.run(["ip", "-6", "neigh", "flush", "dev", "veth0"], check=True)
        a.run(["ip", "-6", "neigh", "flush", "dev", "veth0"], check=True)
        out2 = run_client(b, slip, [a.addr6], sizes=[100, 5000])
        kb, ka = diff(snmp6(b), b6), diff(snmp6(a), a6)
    finally:
        echo.kill()
        echo.wait()
    n = 2 * len(SIZES) + 2
    print("b kernel Udp6 in/out:", kb["Udp6InDatagrams"], kb["Udp6OutDatagrams"], "a:", ka["Udp6InDatagrams"],
          ka["Udp6OutDatagrams"], "a reassembled:", ka["Ip6ReasmOKs"], "b Ip6 frags created:", kb["Ip6FragCreates"])
    # the peer saw the source our socket has: its global address, or its link-local one
    ll_b = linklocal(b)
    for addr, size, (src, port) in out["res"]:
        assert src == (b.addr6 if addr == a.addr6 else ll_b), (addr, src)
        assert int(port) == out["port"]
    assert len(out["res"]) == 2 * len(SIZES) and len(out2["res"]) == 2
    # the peer's kernel carried every datagram (and reassembled ours), ours none of them
    assert ka["Udp6InDatagrams"] == n and ka["Udp6OutDatagrams"] == n, ka
    assert ka["Ip6ReasmOKs"] >= 2 * 3, ka
    assert kb["Udp6InDatagrams"] == 0 and kb["Udp6OutDatagrams"] == 0, kb
    assert kb["Ip6FragCreates"] == 0 and kb["Ip6ReasmOKs"] == 0, kb
    # and the kernel of the accelerated host still answers ping -6
    r = a.run(["ping", "-6", "-c", "2", "-i", "0.2", "-W", "3", b.addr6])
    assert r.returncode == 0, r.stdout


SERVER = ("import socket, sys\n"
          "s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
          "s.bind(('::', int(sys.argv[1]))); print('ready', flush=True)\n"
          "for _ in range(int(sys.argv[2])):\n"
          "    d, p = s.recvfrom(65536)\n"
          "    s.sendto(d + (' %s %d' % (p[0].split('%')[0], p[1])).encode(), p)\n")

KCLIENT = ("import json, socket, sys\n"
           "res = []\n"
           "for fam, dst in ((socket.AF_INET6, sys.argv[2]), (socket.AF_INET, sys.argv[3])):\n"
           "    u = socket.socket(fam, socket.SOCK_DGRAM); u.settimeout(5)\n"
           "    for n in (10, 4000):\n"
           "        u.sendto(b'y' * n, (dst, int(sys.argv[1])))\n"
           "        d, p = u.recvfrom(65536)\n"
           "        assert d[:n] == b'y' * n and p[0] == dst, (p, dst)\n"
           "        res.append(d[n:].decode().split())\n"
           "print(json.dumps(res))\n")


def test_udp6_dualstack_server_both_families(bed6, slip):
    """An accelerated server on [::] (dual-stack, Python's default) serves a kernel client over
    native IPv6 and over IPv4 from one socket: the peer addresses are what Linux reports (native,
    and ::ffff:a.b.c.d), and b's kernel saw none of the datagrams; a kernel TCP server on b's
    IPv6 address keeps serving curl -6 meanwhile."""
    a, b = bed6
    srv = b.popen(slip([PY, "-c", SERVER, str(PORT), "4"]), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # a kernel TCP server on the same interface, over IPv6: untouched by the steering program
    web = b.popen([PY, "-m", "http.server", "--bind", "::", "8088"], stdout=subprocess.DEVNULL,
                  stderr=subprocess.DEVNULL)
    try:
        assert srv.stdout.readline().strip() == "ready"
        assert xdp_attached(b)
        b6 = snmp6(b)
        r = a.run([PY, "-c", KCLIENT, str(PORT), b.addr6, b.addr], timeout=60)
        kb = diff(snmp6(b), b6)
        out, err = srv.communicate(timeout=30)
        code = ""
        for _ in range(50):
            code = a.run(["curl", "-6", "-g", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5",
                          f"http://[{b.addr6}]:8088/"]).stdout
            if code == "200":
                break
            time.sleep(0.1)
        assert code == "200", code
    finally:
        web.kill()
        web.wait()
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    assert r.returncode == 0, r.stderr[-2000:]
    assert srv.returncode == 0, err[-2000:]
    assert_accelerated_log(err)
    rows = json.loads(r.stdout)
    assert [x[0] for x in rows] == [a.addr6, a.addr6, f"::ffff:{a.addr}", f"::ffff:{a.addr}"], rows
    assert kb["Udp6InDatagrams"] == 0 and kb["Udp6OutDatagrams"] == 0, kb


CONNREFUSED = ("import errno, socket, sys, time\n"
               "u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
               "u.connect((sys.argv[1], 9)); u.send(b'x')\n"
               "u.settimeout(3)\n"
               "try:\n"
               "    u.recv(100); print('no error')\n"
               "except ConnectionRefusedError:\n"
               "    print('refused', u.getpeername()[0])\n")


def test_udp6_connected_port_unreachable(bed6, slip):
    """The peer's kernel answers a closed port with ICMPv6 port unreachable, which the steering
    program hands to the stack for the owned flow: the connected socket reports ECONNREFUSED."""
    a, b = bed6
    b6 = snmp6(b)
    r = b.run(slip([PY, "-c", CONNREFUSED, a.addr6]), timeout=30)
    kb = diff(snmp6(b), b6)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["refused", a.addr6], r.stdout
    assert kb["Udp6OutDatagrams"] == 0 and kb["Icmp6InDestUnreachs"] == 0, kb


RECV_OPTS = ("import socket, struct, sys\n"
             "s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
             "s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVTCLASS, 1)\n"
             "s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVHOPLIMIT, 1)\n"
             "s.bind(('::', int(sys.argv[1]))); s.settimeout(10); print('ready', flush=True)\n"
             "for _ in range(2):\n"
             "    d, anc, fl, p = s.recvmsg(100, 256)\n"
             "    got = {t: struct.unpack('i', v[:4])[0] for _, t, v in anc}\n"
             "    print(d.decode(), got.get(socket.IPV6_TCLASS), got.get(socket.IPV6_HOPLIMIT), flush=True)\n")

SEND_OPTS = ("import socket, sys\n"
             "u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
             "u.sendto(b'plain', (sys.argv[1], int(sys.argv[2])))\n"
             "u.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, 0x28)\n"
             "u.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, 7)\n"
             "u.sendto(b'marked', (sys.argv[1], int(sys.argv[2])))\n")


def test_udp6_tclass_and_hop_limit_honoured(bed6, slip):
    """IPV6_TCLASS and IPV6_UNICAST_HOPS set by the application reach the wire on datagrams the
    stack sends (the kernel peer reads them with IPV6_RECVTCLASS / IPV6_RECVHOPLIMIT)."""
    a, b = bed6
    rx = a.popen([PY, "-c", RECV_OPTS, str(PORT)], stdout=subprocess.PIPE, text=True)
    try:
        assert rx.stdout.readline().strip() == "ready"
        b6 = snmp6(b)
        r = b.run(slip([PY, "-c", SEND_OPTS, a.addr6, str(PORT)]), timeout=30)
        assert r.returncode == 0, r.stderr[-2000:]
        out, _ = rx.communicate(timeout=15)
        kb = diff(snmp6(b), b6)
    finally:
        if rx.poll() is None:
            rx.kill()
            rx.wait()
    assert out.split("\n")[:2] == ["plain 0 64", "marked 40 7"], out
    assert kb["Udp6OutDatagrams"] == 0, kb


PMTU_CLIENT = ("import socket, sys\n"
               "u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); u.settimeout(1)\n"
               "data = bytes(range(256)) * 6 + bytes(range(64))\n"
               "for attempt in range(1, 6):\n"
               "    u.sendto(data, (sys.argv[1], int(sys.argv[2])))\n"
               "    try:\n"
               "        d, p = u.recvfrom(65536)\n"
               "    except socket.timeout:\n"
               "        continue\n"
               "    assert d[:len(data)] == data\n"
               "    print('ok', attempt); break\n"
               "else:\n"
               "    print('lost')\n")


def test_udp6_pmtu_through_small_mtu_router(make_testbed, slip):
    """a -- r -- b with a 1280-byte MTU on the a-r link: b's first 1600-byte datagram, fragmented
    for b's 1500-byte link, dies at r, whose ICMPv6 packet too big reaches b's stack (steered for
    the owned flow), which then fragments to 1280: a later attempt gets through, and b's kernel
    handled neither the datagrams nor the ICMPv6 error."""
    tb = make_testbed(Topology(hosts=("a", "b"), router=True, ipv6=True))
    a, b, r = tb.host("a"), tb.host("b"), tb.host("r")
    for h in (a, r):    # both ends of the a-r link (a veth drops frames above its own MTU)
        h.run(["ip", "link", "set", "dev", "veth0", "mtu", "1280"], check=True)
    assert b.run(["ping", "-6", "-c", "1", "-W", "3", a.addr6]).returncode == 0
    b.run(["ip", "-6", "route", "flush", "cache"])
    echo = a.popen([PY, "-c", ECHO, str(PORT)], stdout=subprocess.PIPE, text=True)
    try:
        assert echo.stdout.readline().strip() == "ready"
        b6 = snmp6(b)
        res = b.run(slip([PY, "-c", PMTU_CLIENT, a.addr6, str(PORT)]), timeout=30)
        kb = diff(snmp6(b), b6)
    finally:
        echo.kill()
        echo.wait()
    assert res.returncode == 0, res.stderr[-2000:]
    words = res.stdout.split()
    assert words[:1] == ["ok"] and int(words[1]) >= 2, res.stdout     # the first one was too big
    assert kb["Udp6OutDatagrams"] == 0 and kb["Icmp6InPktTooBigs"] == 0, kb


# sendto to one IPv6 peer and one IPv4 peer (v4-mapped) from one dual-stack socket, three echoes
# each, once per line read from stdin; prints 'ok', or 'timeout' or the errno of the failure, per peer.
ROUTED = ("import socket, sys\n"
          "u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); u.settimeout(1)\n"
          "dsts = [(sys.argv[1], int(sys.argv[3])), ('::ffff:' + sys.argv[2], int(sys.argv[3]))]\n"
          "print('ready', flush=True)\n"
          "for _ in sys.stdin:\n"
          "    out = []\n"
          "    for d in dsts:\n"
          "        try:\n"
          "            for i in range(3):\n"
          "                u.sendto(b'r%d' % i, d)\n"
          "                r, _ = u.recvfrom(100)\n"
          "            out.append('ok')\n"
          "        except socket.timeout:\n"
          "            out.append('timeout')\n"
          "        except OSError as e:\n"
          "            out.append('errno%s' % e.errno)\n"
          "    print(' '.join(out), flush=True)\n")


def test_udp_sendto_follows_route_changes(bed6, slip):
    """A socket remembers that its last destination routes through the stack (one route lookup
    per peer, not per datagram) only while the control plane's tables do not change: once the
    peer's address is routed through an interface the stack does not serve (a second veth pair
    inside b), the next sendto is the kernel's, and once that route is gone it is the stack's
    again. IPv6 and IPv4 (v4-mapped) from one socket."""
    a, b = bed6
    b.run(["ip", "link", "add", "vx0", "type", "veth", "peer", "name", "vx1"], check=True)
    for dev in ("vx0", "vx1"):
        b.run(["ip", "link", "set", dev, "up"], check=True)
    moved = [(["ip", "-6", "route"], f"{a.addr6}/128"), (["ip", "route"], f"{a.addr}/32")]
    echo = a.popen([PY, "-c", ECHO, str(PORT)], stdout=subprocess.PIPE, text=True)
    cli = None
    try:
        assert echo.stdout.readline().strip() == "ready"
        cli = b.popen(slip([PY, "-c", ROUTED, a.addr6, a.addr, str(PORT)]), stdin=subprocess.PIPE,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert cli.stdout.readline().strip() == "ready"

        def phase():
            k = snmp6(b), b.run(["nstat", "-asz", "UdpOutDatagrams"], check=True).stdout.split()
            cli.stdin.write("go\n")
            cli.stdin.flush()
            got = cli.stdout.readline().split()
            k6 = diff(snmp6(b), k[0])["Udp6OutDatagrams"]
            k4 = int(b.run(["nstat", "-asz", "UdpOutDatagrams"], check=True).stdout.split()[-2]) - int(k[1][-2])
            return got, k6, k4

        def until(want):
            # the control plane's netlink listener takes a route change a moment after `ip`
            # returns: a phase before that may still see the old route, so look a few times
            for _ in range(10):
                time.sleep(0.3)
                got = phase()
                if got[0] == want:
                    break
            return got

        first = phase()
        for ip, pfx in moved:
            b.run([*ip, "add", pfx, "dev", "vx0"], check=True)
        away = until(["timeout", "timeout"])
        for ip, pfx in moved:
            b.run([*ip, "del", pfx, "dev", "vx0"], check=True)
        again = until(["ok", "ok"])
        cli.stdin.close()
        rc = cli.wait(timeout=15)
        err = cli.stderr.read()
    finally:
        for p in (echo, cli):
            if p and p.poll() is None:
                p.kill()
                p.wait()
        b.run(["ip", "link", "del", "vx0"])
    print("phases (replies, b kernel Udp6 out, Udp out):", first, away, again)
    assert rc == 0, err[-2000:]
    assert_accelerated_log(err)
    # through the stack: every echo back, b's kernel sent nothing
    assert first == (["ok", "ok"], 0, 0) and again == (["ok", "ok"], 0, 0), (first, again)
    # routed away: b's kernel sent the first datagram to each peer into vx0, where nobody answers
    assert away[0] == ["timeout", "timeout"] and away[1] >= 1 and away[2] >= 1, away


def sockperf6():
    """A sockperf that takes IPv6 addresses (upstream 3.8 and later): SLIP_SOCKPERF, else the one
    on PATH; Debian 12's is 3.7, which rejects them, so there the test is skipped and says why."""
    exe = os.environ.get("SLIP_SOCKPERF") or shutil.which("sockperf")
    if not exe:
        pytest.skip("sockperf is not installed")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"version (\d+)\.(\d+)", out)
    if not m or (int(m.group(1)), int(m.group(2))) < (3, 8):
        pytest.skip(f"{exe} is {out.split(chr(10))[0].strip()!r}: sockperf takes IPv6 addresses from 3.8 "
                    f"on (SLIP_SOCKPERF names another)")
    return exe


@pytest.mark.parametrize("proto", ["udp", "tcp"])
def test_sockperf_ping_pong_over_ipv6(bed6, slip, proto):
    """sockperf's server under `slipstream run` on b's IPv6 address, a kernel sockperf client in a
    over IPv6 for 2 s: every message answered, and b's kernel carried none of them (Udp6 / Tcp
    counters of b's namespace; the TCP MIB counts both families)."""
    exe = sockperf6()
    a, b = bed6
    tcp = ["--tcp"] if proto == "tcp" else []
    srv = b.popen(slip([exe, "sr", "-i", b.addr6, "-p", "11112", *tcp]), stdout=subprocess.PIPE,
                  stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(1.5)         # sockperf prints nothing once it is ready
        b6 = snmp6(b)
        bt = b.run(["nstat", "-asz", "TcpOutSegs"], check=True).stdout.split()
        c = a.run([exe, "pp", "-i", b.addr6, "-p", "11112", "-t", "2", *tcp], timeout=60)
        kb = diff(snmp6(b), b6)
        tcp_out = int(b.run(["nstat", "-asz", "TcpOutSegs"], check=True).stdout.split()[-2]) - int(bt[-2])
    finally:
        srv.kill()
        sout, _ = srv.communicate(timeout=15)
    out = c.stdout + c.stderr
    m = re.search(r"SentMessages=(\d+); ReceivedMessages=(\d+)", out)
    lat = re.search(r"avg-latency=([\d.]+)", out)
    print(f"sockperf {proto} over IPv6, server on the stack: avg latency {lat.group(1) if lat else '?'} us, "
          f"messages {m.groups() if m else '?'}; b's kernel Udp6 out {kb['Udp6OutDatagrams']}, Tcp out {tcp_out}")
    assert c.returncode == 0 and m and lat, out[-2000:]
    assert_accelerated_log(sout)
    sent, received = int(m.group(1)), int(m.group(2))
    assert sent > 1000 and received >= sent - 1, (sent, received)
    assert kb["Udp6OutDatagrams"] == 0 and kb["Udp6InDatagrams"] == 0, kb
    # a few segments of the kernel's own (none expected) are tolerated, not one per message
    assert tcp_out < received // 100, (tcp_out, received)


# A dual-stack SO_REUSEPORT UDP socket on [::]:port answering every datagram with its index.
RP_SERVER = ("import socket, sys\n"
             "s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
             "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)\n"
             "s.bind(('::', int(sys.argv[1]))); print('ready', flush=True)\n"
             "while True:\n"
             "    d, p = s.recvfrom(100)\n"
             "    s.sendto(sys.argv[2].encode(), p)\n")

# From n new sockets per family (each a new source port): one datagram each, resent up to 5
# times; prints the answers counted per family and answer.
RP_CLIENT = ("import collections, json, socket, sys\n"
             "seen = collections.Counter()\n"
             "for fam, dst in ((socket.AF_INET6, sys.argv[1]), (socket.AF_INET, sys.argv[2])):\n"
             "    for i in range(int(sys.argv[4])):\n"
             "        u = socket.socket(fam, socket.SOCK_DGRAM); u.settimeout(1)\n"
             "        got = 'none'\n"
             "        for _ in range(5):\n"
             "            u.sendto(b'x', (dst, int(sys.argv[3])))\n"
             "            try:\n"
             "                got = u.recv(100).decode(); break\n"
             "            except socket.timeout:\n"
             "                pass\n"
             "        seen['%d %s' % (fam, got)] += 1\n"
             "        u.close()\n"
             "print(json.dumps(seen))\n")


def test_udp6_reuseport_across_two_programs(bed6, slip):
    """Two programs (two stacks) with a dual-stack SO_REUSEPORT UDP socket on one port share its
    datagrams, over IPv6 and over IPv4 (the XDP program's member set for the IPv6 key and for the
    IPv4 one): every datagram answered, each program answered some of each family, and b's kernel
    carried none."""
    a, b = bed6
    port = PORT + 7
    srv = []
    try:
        for i in range(2):
            srv.append(b.popen(slip([PY, "-c", RP_SERVER, str(port), str(i)]), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True))
            assert srv[-1].stdout.readline().strip() == "ready"
        b6 = snmp6(b)
        bu = b.run(["nstat", "-asz", "UdpInDatagrams"], check=True).stdout.split()
        r = a.run([PY, "-c", RP_CLIENT, b.addr6, b.addr, str(port), "60"], timeout=120)
        kb = diff(snmp6(b), b6)
        k4 = int(b.run(["nstat", "-asz", "UdpInDatagrams"], check=True).stdout.split()[-2]) - int(bu[-2])
    finally:
        for p in srv:
            p.kill()
            p.wait()
    assert r.returncode == 0, r.stderr[-2000:]
    seen = json.loads(r.stdout)
    print("answers (family, program):", seen, "b kernel Udp6 in", kb["Udp6InDatagrams"], "Udp in", k4)
    six, four = int(socket.AF_INET6), int(socket.AF_INET)
    assert sum(seen.values()) == 120 and not any(k.endswith("none") for k in seen), seen
    assert all(seen.get(f"{f} {i}", 0) > 0 for f in (six, four) for i in (0, 1)), seen
    assert kb["Udp6InDatagrams"] == 0 and k4 == 0, (kb, k4)
