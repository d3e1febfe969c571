"""TCP over native IPv6 through the stack (issue 16) under `slipstream run`, against Linux peers in
the testbed's IPv6 (2001:2::/48, inside the test's namespaces only): curl -6 from a kernel client
to an accelerated `python3 -m http.server --bind ::` (dual-stack: a curl -4 is served by the same
listener), and an accelerated client downloading from a kernel server over IPv6; each a 20 MB
transfer checked by sha256 and the names the socket API reports. Proof of acceleration: b's kernel
counted (almost) none of the TCP segments (Proof: the TCP MIB counts both families) while a
kernel TCP server on b's IPv6 address, ping -6 and neighbour discovery after a flush keep working
on the same interface."""
import json
import os
import shutil
import subprocess
import time

import pytest

from test_apps import (PY, Proof, assert_accelerated_log, curl_argv, parse_curl, read, sha256, slip, start,
                       stop, wait_listening, www, workdir)
from testbed import Topology

__all__ = ["slip", "www", "workdir"]    # fixtures imported from test_apps


def curl(a, b, workdir, url, want, family):
    """One download from a with b's kernel counters watched: b's kernel must not carry it."""
    proof = Proof(b).start(peer=a)
    out = os.path.join(workdir, f"dl{family}")
    cp = a.popen(curl_argv([url], [out], [f"-{family}", "-g"]), stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE, text=True)
    time.sleep(0.2)
    proof.note_xdp()
    so, se = cp.communicate(timeout=120)
    rows = parse_curl(so)
    print(f"curl -{family}:", rows)
    assert cp.returncode == 0, se[-2000:]
    assert rows[0]["code"] == 200 and sha256(out) == want
    proof.check()


def test_tcp6_server_dualstack_curl6_and_curl4(bed6, slip, www, workdir):
    """An accelerated `python3 -m http.server --bind ::` (dual-stack) serves 20 MB to curl -6 and to
    curl -4, both off b's kernel; the access log names the IPv6 client natively and the IPv4 one
    as ::ffff:a.b.c.d, as Linux does. Meanwhile b's kernel serves curl -6 on another port and
    answers ping -6, also after both sides flushed their neighbours."""
    a, b = bed6
    d, sums = www
    log = os.path.join(workdir, "http.log")
    s = start(b, slip([PY, "-m", "http.server", "-d", d, "--bind", "::", "8000"]), log)
    kweb = b.popen([PY, "-m", "http.server", "-d", d, "--bind", "::", "8088"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    try:
        wait_listening(b, 8000, proc=s, log=log)
        wait_listening(b, 8088)
        curl(a, b, workdir, f"http://[{b.addr6}]:8000/20m", sums["20m"], 6)
        curl(a, b, workdir, f"http://{b.addr}:8000/20m", sums["20m"], 4)
        # The kernel's IPv6 on the same interface: its own TCP server, echo, neighbour discovery.
        for h in (a, b):
            h.run(["ip", "-6", "neigh", "flush", "dev", "veth0"], check=True)
        p6 = a.run(["ping", "-6", "-c", "2", "-i", "0.2", "-W", "3", b.addr6])
        assert p6.returncode == 0, p6.stdout + p6.stderr
        out = os.path.join(workdir, "k6")
        r = a.run(curl_argv([f"http://[{b.addr6}]:8088/1k"], [out], ["-6", "-g"]), timeout=60)
        assert r.returncode == 0 and sha256(out) == sums["1k"], r.stderr
        # ... and the accelerated server again, after the flush.
        curl(a, b, workdir, f"http://[{b.addr6}]:8000/1k", sums["1k"], 6)
    finally:
        stop(s)
        kweb.kill()
        kweb.wait()
    text = read(log)
    assert_accelerated_log(text)
    assert f"{a.addr6} - - " in text, text[-2000:]
    assert f"::ffff:{a.addr} - - " in text, text[-2000:]


# A client: connects over IPv6, sends an HTTP request, hashes the body; prints its socket names.
CLIENT = ("import hashlib, json, socket, sys\n"
          "src = (sys.argv[4], 0) if len(sys.argv) > 4 else None\n"
          "s = socket.create_connection((sys.argv[1], int(sys.argv[2])), 10, source_address=src)\n"
          "s.sendall(('GET /%s HTTP/1.0\\r\\n\\r\\n' % sys.argv[3]).encode())\n"
          "buf = b''\n"
          "while True:\n"
          "    x = s.recv(1 << 20)\n"
          "    if not x: break\n"
          "    buf += x\n"
          "body = buf.split(b'\\r\\n\\r\\n', 1)[1]\n"
          "print(json.dumps({'sock': s.getsockname()[:2], 'peer': s.getpeername()[:2], 'family': int(s.family),\n"
          "                  'len': len(body), 'sha': hashlib.sha256(body).hexdigest()}))\n")


def test_tcp6_client_to_kernel_server(bed6, slip, www, workdir):
    """An accelerated client in b downloads 20 MB from a kernel HTTP server in a over IPv6: the
    body's sha256 matches, getsockname/getpeername give the native addresses, and b's kernel saw
    (almost) none of the segments. A client bound to b's second address connects from it (the
    server sees that address)."""
    a, b = bed6
    d, sums = www
    b2 = b.addr6 + "2"      # a second address of b, bound explicitly by the second client
    b.run(["ip", "-6", "addr", "add", f"{b2}/64", "dev", "veth0", "nodad"], check=True)
    web = a.popen([PY, "-m", "http.server", "-d", d, "--bind", "::", "8090"], stdout=subprocess.DEVNULL,
                  stderr=subprocess.DEVNULL)
    try:
        wait_listening(a, 8090)
        proof = Proof(b).start(peer=a)
        r = b.run(slip([PY, "-c", CLIENT, a.addr6, "8090", "20m"]), timeout=120)
        proof.note_xdp()
        print(r.stdout, r.stderr[-1000:])
        assert r.returncode == 0, r.stderr[-2000:]
        assert_accelerated_log(r.stderr)
        res = json.loads(r.stdout.strip().splitlines()[-1])
        assert res["sha"] == sums["20m"] and res["len"] == 20_000_000
        assert res["family"] == 10      # AF_INET6
        assert res["peer"] == [a.addr6, 8090], res
        assert res["sock"][0] == b.addr6, res
        proof.check()
        proof = Proof(b).start(peer=a)
        r = b.run(slip([PY, "-c", CLIENT, a.addr6, "8090", "3m", b2]), timeout=60)
        proof.note_xdp()
        assert r.returncode == 0, r.stderr[-2000:]
        res = json.loads(r.stdout.strip().splitlines()[-1])
        assert res["sha"] == sums["3m"] and res["sock"][0] == b2, res
        proof.check()
        conns = a.run(["ss", "-tnH", "state", "time-wait"]).stdout      # the server closed first
        assert f"[{b2}]" in conns, conns
    finally:
        web.kill()
        web.wait()


# A kernel server: reads everything a client sends, answers with its sha256.
HASH_SERVER = ("import hashlib, socket, sys\n"
               "s = socket.socket(socket.AF_INET6); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
               "s.bind(('::', int(sys.argv[1]))); s.listen(4); print('ready', flush=True)\n"
               "c, _ = s.accept(); h = hashlib.sha256()\n"
               "while True:\n"
               "    x = c.recv(1 << 20)\n"
               "    if not x: break\n"
               "    h.update(x)\n"
               "c.sendall(h.hexdigest().encode()); c.close()\n")

# An uploading client: 1 MB, then the server's digest next to its own, the send MSS and how many
# retransmission timeouts the connection had (TCP_INFO tcpi_snd_mss, tcpi_total_rto).
UPLOAD = ("import hashlib, os, socket, struct, sys\n"
          "data = os.urandom(1_000_000)\n"
          "s = socket.create_connection((sys.argv[1], int(sys.argv[2])), 10)\n"
          "s.sendall(data); s.shutdown(socket.SHUT_WR)\n"
          "got = s.recv(100).decode()\n"
          "ti = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 248)\n"
          "print(got, hashlib.sha256(data).hexdigest(), struct.unpack_from('<I', ti, 16)[0],\n"
          "      struct.unpack_from('<H', ti, 240)[0])\n")


def test_tcp6_pmtu_through_small_mtu_router(make_testbed, slip):
    """a -- r -- b with r sending at most 1280 bytes towards a: a advertises MSS 1440 (its own link
    is 1500), b's stack sends 1500-byte packets that die at r, whose ICMPv6 packet too big reaches
    b's stack (steered for the owned connection): the MSS drops to 1220 and what was lost is sent
    again at once (no retransmission timeout: tcpi_total_rto 0), and the 1 MB upload arrives
    intact. b's kernel handled neither the segments nor the ICMPv6 error."""
    tb = make_testbed(Topology(hosts=("a", "b"), router=True, ipv6=True))
    a, b, r = tb.host("a"), tb.host("b"), tb.host("r")
    r.run(["ip", "link", "set", "dev", "veth0", "mtu", "1280"], check=True)     # r's side of the a-r link
    assert b.run(["ping", "-6", "-c", "1", "-W", "3", a.addr6]).returncode == 0
    b.run(["ip", "-6", "route", "flush", "cache"])
    srv = a.popen([PY, "-c", HASH_SERVER, "8091"], stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "ready"
        b6 = snmp6(b)
        proof = Proof(b).start(peer=a)
        res = b.run(slip([PY, "-c", UPLOAD, a.addr6, "8091"]), timeout=60)
        proof.note_xdp()
        kb = {k: v - b6.get(k, 0) for k, v in snmp6(b).items()}
        print(res.stdout, res.stderr[-1000:])
        assert res.returncode == 0, res.stderr[-2000:]
        got, want, mss, rtos = res.stdout.split()
        assert got == want
        assert int(mss) in (1208, 1220) and int(rtos) == 0, res.stdout     # 1280 - 60 (- 12 of timestamps)
        assert kb["Icmp6InPktTooBigs"] == 0, kb
        proof.check()
        rtr = {k: v for k, v in snmp6(r).items() if k == "Icmp6OutPktTooBigs"}
        assert rtr["Icmp6OutPktTooBigs"] >= 1, rtr      # the path MTU was really learnt on the way
    finally:
        srv.kill()
        srv.wait()


def snmp6(host):
    return {k: int(v) for k, v in (l.split() for l in host.run(["cat", "/proc/net/snmp6"], check=True)
                                   .stdout.splitlines() if l.strip())}


TCLASS_CLIENT = ("import socket, sys\n"
                 "s = socket.socket(socket.AF_INET6)\n"
                 "s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, 0x28)\n"
                 "s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, 9)\n"
                 "s.connect((sys.argv[1], int(sys.argv[2])))\n"
                 "s.sendall(b'x' * 3000); s.shutdown(socket.SHUT_WR); s.recv(10); print('done')\n")


def test_tcp6_tclass_and_hop_limit_honoured(bed6, slip):
    """IPV6_TCLASS and IPV6_UNICAST_HOPS set on an accelerated TCP socket reach the wire on the
    stack's segments (tcpdump in a, the kernel peer, reads the IPv6 headers)."""
    a, b = bed6
    srv = a.popen([PY, "-c", HASH_SERVER, "8092"], stdout=subprocess.PIPE, text=True)
    dump = a.popen(["tcpdump", "-l", "-n", "-v", "-i", "veth0", "-c", "4", "ip6 and tcp dst port 8092"],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "ready"
        assert "listening on" in dump.stderr.readline()
        r = b.run(slip([PY, "-c", TCLASS_CLIENT, a.addr6, "8092"]), timeout=30)
        assert r.returncode == 0 and "done" in r.stdout, r.stderr[-2000:]
        assert_accelerated_log(r.stderr)
        out, _ = dump.communicate(timeout=10)
    finally:
        for p in (srv, dump):
            if p.poll() is None:
                p.kill()
                p.wait()
    heads = [l for l in out.splitlines() if "hlim" in l]
    print("\n".join(heads))
    assert len(heads) == 4, out
    assert all("class 0x28" in l and "hlim 9," in l for l in heads), out


def linklocal(host):
    out = json.loads(host.run(["ip", "-j", "-6", "addr", "show", "dev", "veth0"], check=True).stdout)
    return next(x["local"] for x in out[0]["addr_info"] if x.get("scope") == "link")


def ifindex(host):
    return json.loads(host.run(["ip", "-j", "link", "show", "veth0"], check=True).stdout)[0]["ifindex"]


# A link-local client: connects to addr%scope, reads the body, prints its names with their scopes.
LL_CLIENT = ("import hashlib, json, socket, sys\n"
             "s = socket.socket(socket.AF_INET6); s.settimeout(10)\n"
             "s.connect((sys.argv[1], int(sys.argv[2]), 0, int(sys.argv[3])))\n"
             "s.sendall(b'GET /3m HTTP/1.0\\r\\n\\r\\n')\n"
             "buf = b''\n"
             "while True:\n"
             "    x = s.recv(1 << 20)\n"
             "    if not x: break\n"
             "    buf += x\n"
             "print(json.dumps({'sock': s.getsockname(), 'peer': s.getpeername(),\n"
             "                  'sha': hashlib.sha256(buf.split(b'\\r\\n\\r\\n', 1)[1]).hexdigest()}))\n")


def test_tcp6_link_local_both_ways(bed6, slip, www, workdir):
    """Link-local addresses with their scope: an accelerated client in b downloads from a kernel
    server at a's fe80:: address (sin6_scope_id = b's veth0), and curl -6 in a downloads from an
    accelerated server at b's fe80:: address; both 3 MB with sha256, b's kernel saw none of it,
    and the names carry the scope."""
    a, b = bed6
    d, sums = www
    ll_a, ll_b, ifb = linklocal(a), linklocal(b), ifindex(b)
    web = a.popen([PY, "-m", "http.server", "-d", d, "--bind", "::", "8093"], stdout=subprocess.DEVNULL,
                  stderr=subprocess.DEVNULL)
    log = os.path.join(workdir, "http.log")
    s = start(b, slip([PY, "-m", "http.server", "-d", d, "--bind", "::", "8094"]), log)
    try:
        wait_listening(a, 8093)
        wait_listening(b, 8094, proc=s, log=log)
        proof = Proof(b).start(peer=a)
        r = b.run(slip([PY, "-c", LL_CLIENT, ll_a, "8093", str(ifb)]), timeout=60)
        proof.note_xdp()
        print(r.stdout, r.stderr[-1000:])
        assert r.returncode == 0, r.stderr[-2000:]
        assert_accelerated_log(r.stderr)
        res = json.loads(r.stdout.strip().splitlines()[-1])
        assert res["sha"] == sums["3m"]
        assert res["peer"] == [ll_a, 8093, 0, ifb], res
        assert res["sock"][0] == ll_b and res["sock"][3] == ifb, res
        proof.check()
        curl(a, b, workdir, f"http://[{ll_b}%25veth0]:8094/3m", sums["3m"], 6)
    finally:
        stop(s)
        web.kill()
        web.wait()
    assert f"{ll_a} - - " in read(log), read(log)[-2000:]


def iperf_bytes(text):
    j = json.loads(text)
    assert "error" not in j, j["error"]
    e = j["end"]
    return e["sum_sent"]["bytes"], e["sum_received"]["bytes"], e["sum_received"]["bits_per_second"] / 1e9


def test_iperf3_ipv6_server_and_client_accelerated(bed6, slip, workdir):
    """`iperf3 -s` (its default socket: [::], dual-stack) accelerated in b against `iperf3 -6 -c`
    in a, then an accelerated `iperf3 -6 -c` in b against a kernel server in a: 2 s each, what
    was sent arrived (less what was in flight when time ran out), b's kernel saw none of it."""
    if shutil.which("iperf3") is None:
        pytest.skip("iperf3 not installed")
    a, b = bed6
    log = os.path.join(workdir, "iperf3-s.log")
    s = start(b, slip(["iperf3", "-s", "-1", "-p", "5201"]), log)
    try:
        wait_listening(b, 5201, proc=s, log=log)
        proof = Proof(b).start(peer=a)
        c = a.run(["iperf3", "-6", "-c", b.addr6, "-p", "5201", "-t", "2", "-J"], timeout=30)
        proof.note_xdp()
        assert c.returncode == 0, c.stderr
        sent, recv, gbps = iperf_bytes(c.stdout)
        print(f"iperf3 -6 kernel client -> accelerated server: {gbps:.2f} Gbit/s, {recv} bytes")
        assert 0.9 * sent < recv <= sent, (sent, recv)
        assert s.wait(timeout=15) == 0, read(log)
        proof.check()
    finally:
        stop(s)
    assert_accelerated_log(read(log))
    ks = start(a, ["iperf3", "-s", "-1", "-p", "5202"], os.path.join(workdir, "iperf3-k.log"))
    try:
        wait_listening(a, 5202, proc=ks)
        proof = Proof(b).start(peer=a)
        c = b.run(slip(["iperf3", "-6", "-c", a.addr6, "-p", "5202", "-t", "2", "-J"]), timeout=30)
        proof.note_xdp()
        assert c.returncode == 0, c.stderr
        assert_accelerated_log(c.stderr)
        sent, recv, gbps = iperf_bytes(c.stdout)
        print(f"iperf3 -6 accelerated client -> kernel server: {gbps:.2f} Gbit/s, {recv} bytes")
        assert 0.9 * sent < recv <= sent, (sent, recv)
        proof.check()
    finally:
        stop(ks)
