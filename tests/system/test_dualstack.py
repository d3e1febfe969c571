"""Servers that open the dual-stack AF_INET6 socket most programs open by default (issue 16): nginx
`listen [::]:8080 ipv6only=off`, `python3 -m http.server` without --bind, Node's
`server.listen(port)` and Java's `new ServerSocket(port)`, each under `slipstream run` in host b.
An IPv4 curl in host a downloads a file (sha256 checked) and the kernel of b must have seen none of
it (the stack carried it); an IPv6 curl to b's 2001:db8::2 is then served by the same listener
through the stack too (TCP over native IPv6), ping -6 and neighbour discovery after a flush work
with the steering program attached, and a v6-only listener serves IPv6 through the stack while
IPv4 clients are refused by b's kernel.
The hosts get 2001:db8::1/64 and ::2/64 on their veth, inside the test's namespaces only."""
import os
import shutil
import subprocess
import time

import pytest

from test_apps import (APPS, A_ADDR, B_ADDR, PY, Proof, assert_accelerated_log, curl_argv, need,
                       nginx_conf, parse_curl, read, sha256, slip, snmp, start, stop, www,
                       wait_listening, kill_pidfile, workdir, diff)
from testbed import Topology

A6, B6 = "2001:db8::1", "2001:db8::2"
__all__ = ["slip", "www", "workdir"]    # fixtures imported from test_apps


@pytest.fixture
def bed6(make_testbed):
    """Two hosts with IPv4 198.18.0.1/.2 and IPv6 2001:db8::1/::2 on veth0 (no DAD wait)."""
    tb = make_testbed(Topology(ipv6=True))
    for h, addr in ((tb.host("a"), A6), (tb.host("b"), B6)):
        h.run(["ip", "-6", "addr", "add", f"{addr}/64", "dev", "veth0", "nodad"], check=True)
    r = tb.host("a").run(["ping", "-6", "-c", "1", "-W", "3", B6])
    assert r.returncode == 0, f"no IPv6 between the hosts: {r.stdout} {r.stderr}"
    return tb.host("a"), tb.host("b")


def fetch_v4(a, b, workdir, urls, sums):
    """curl over IPv4 from a, with the proof that b's kernel saw (almost) none of it."""
    proof = Proof(b).start(peer=a)
    outs = [os.path.join(workdir, f"v4-{i}") for i in range(len(urls))]
    cp = a.popen(curl_argv(urls, outs), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.2)
    proof.note_xdp()
    out, err = cp.communicate(timeout=120)
    rows = parse_curl(out)
    print("curl -4:", rows)
    assert cp.returncode == 0, err[-2000:]
    assert [r["code"] for r in rows] == [200] * len(urls), rows
    assert [sha256(o) for o in outs] == sums
    proof.check()
    return rows


def fetch_v6(a, b, workdir, url, want_sum):
    """curl over native IPv6 from a: served by the same listener through the stack, so b's kernel
    saw (almost) none of it (the TCP MIB counts both families)."""
    proof = Proof(b).start(peer=a)
    out = os.path.join(workdir, "v6")
    r = a.run(curl_argv([url], [out], ["-6", "-g"]), timeout=120)
    proof.note_xdp()
    rows = parse_curl(r.stdout)
    print("curl -6:", rows)
    assert r.returncode == 0, r.stderr[-2000:]
    assert rows[0]["code"] == 200 and sha256(out) == want_sum
    proof.check()


def test_nginx_listen_v6_any_dualstack(bed6, slip, www, workdir):
    """nginx `listen [::]:8080 ipv6only=off` (nginx's default for [::] is ipv6only=on): 100 MB to
    an IPv4 curl and 100 MB to an IPv6 curl, both through the stack."""
    need("nginx", "curl")
    a, b = bed6
    d, sums = www
    conf = nginx_conf(workdir, d, True, addr="[::]", port="8080 ipv6only=off")
    r = b.run(slip(["nginx", "-c", conf, "-p", workdir + "/"]), timeout=30)
    try:
        assert r.returncode == 0, f"nginx: {r.stderr}\n{read(os.path.join(workdir, 'error.log'))}"
        wait_listening(b, 8080, log=os.path.join(workdir, "error.log"))
        fetch_v4(a, b, workdir, [f"http://{B_ADDR}:8080/1k", f"http://{B_ADDR}:8080/100m"],
                 [sums["1k"], sums["100m"]])
        fetch_v6(a, b, workdir, f"http://[{B6}]:8080/100m", sums["100m"])
        # The kernel's IPv6 on the same interface, with the steering program attached: echo, and
        # neighbour discovery again after both sides forgot each other.
        for h in (a, b):
            h.run(["ip", "-6", "neigh", "flush", "dev", "veth0"], check=True)
        p6 = a.run(["ping", "-6", "-c", "2", "-i", "0.2", "-W", "3", B6])
        assert p6.returncode == 0, p6.stdout + p6.stderr
        fetch_v6(a, b, workdir, f"http://[{B6}]:8080/1k", sums["1k"])
        assert "lladdr" in b.run(["ip", "-6", "neigh", "show", A6, "dev", "veth0"]).stdout
        assert_accelerated_log(r.stdout + r.stderr)
        assert "[alert]" not in read(os.path.join(workdir, "error.log"))
    finally:
        kill_pidfile(os.path.join(workdir, "nginx.pid"))


@pytest.mark.parametrize("bind", [None, "::"])
def test_python_http_server_default_bind(bed6, slip, www, workdir, bind):
    """`python3 -m http.server PORT` with no --bind (it binds the first address getaddrinfo gives
    for a passive socket: 0.0.0.0 with Debian 12's glibc, [::] where the policy puts IPv6 first)
    and with --bind :: (its DualStackServer clears IPV6_V6ONLY)."""
    a, b = bed6
    d, sums = www
    log = os.path.join(workdir, "http.log")
    s = start(b, slip([PY, "-m", "http.server", "-d", d, *(["--bind", bind] if bind else []), "8000"]), log)
    try:
        wait_listening(b, 8000, proc=s, log=log)
        out = b.run(["ss", "-tlnH", "sport = :8000"]).stdout
        v6 = "[::]" in out or "*:8000" in out
        print("http.server listens on", out.split()[3:4], "dual-stack" if v6 else "IPv4")
        assert v6 or not bind, f"http.server --bind :: did not bind [::]: {out}"
        fetch_v4(a, b, workdir, [f"http://{B_ADDR}:8000/20m"], [sums["20m"]])
        if v6:
            fetch_v6(a, b, workdir, f"http://[{B6}]:8000/1k", sums["1k"])
    finally:
        stop(s)
    assert_accelerated_log(read(log))
    client = f"::ffff:{A_ADDR}" if v6 else A_ADDR
    assert f"{client} - - " in read(log), f"http.server did not log the IPv4 client as {client}"


def test_node_listen_port(bed6, slip, www, workdir):
    """Node `server.listen(port)`: [::], dual-stack."""
    need("node", "curl")
    a, b = bed6
    d, sums = www
    log = os.path.join(workdir, "node.log")
    s = start(b, slip(["node", os.path.join(APPS, "node_http.js"), d, "8001"]), log)
    try:
        wait_listening(b, 8001, proc=s, log=log, timeout=20)
        fetch_v4(a, b, workdir, [f"http://{B_ADDR}:8001/20m", f"http://{B_ADDR}:8001/1k"],
                 [sums["20m"], sums["1k"]])
        fetch_v6(a, b, workdir, f"http://[{B6}]:8001/1k", sums["1k"])
    finally:
        stop(s)
    print(read(log)[-1000:])
    assert "listening IPv6 :: 8001" in read(log)
    assert_accelerated_log(read(log))


def test_java_server_socket(bed6, slip, www, workdir):
    """Java `new ServerSocket(port)` (JDK from Debian: openjdk-17-jdk-headless, run as a
    single-file source program): [::], dual-stack."""
    need("java", "curl")
    a, b = bed6
    d, sums = www
    src = os.path.join(workdir, "JavaHttp.java")
    shutil.copy(os.path.join(APPS, "JavaHttp.java"), src)
    log = os.path.join(workdir, "java.log")
    s = start(b, slip(["java", "-Xshare:auto", src, d, "8002"]), log)
    try:
        wait_listening(b, 8002, proc=s, log=log, timeout=60)
        fetch_v4(a, b, workdir, [f"http://{B_ADDR}:8002/20m", f"http://{B_ADDR}:8002/1k"],
                 [sums["20m"], sums["1k"]])
        fetch_v6(a, b, workdir, f"http://[{B6}]:8002/1k", sums["1k"])
    finally:
        stop(s)
    print(read(log)[-1000:])
    assert "listening 0.0.0.0/0.0.0.0:8002" in read(log) or "listening /[0:0:0:0:0:0:0:0]:8002" in read(log) \
        or "listening /0:0:0:0:0:0:0:0:8002" in read(log), read(log)[-1000:]
    assert_accelerated_log(read(log))


def test_v6only_listener_ipv6_only(bed6, slip, workdir):
    """A listener with IPV6_V6ONLY set takes IPv6 only: its IPv6 client is served through the stack
    (b's kernel saw none of it), an IPv4 client is refused by b's kernel (no IPv4 claim)."""
    a, b = bed6
    prog = ("import socket,sys\n"
            "s=socket.socket(socket.AF_INET6)\n"
            "s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)\n"
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "s.bind(('::', 8003)); s.listen(4); print('ready', flush=True)\n"
            "for _ in range(2):\n"
            "    c, p = s.accept(); c.sendall(p[0].encode() + b'\\n'); c.close()\n")
    log = os.path.join(workdir, "v6only.log")
    s = start(b, slip([PY, "-c", prog]), log)
    try:
        wait_listening(b, 8003, proc=s, log=log)
        r4 = a.run(["curl", "-sS", "--max-time", "5", f"http://{B_ADDR}:8003/"])
        assert r4.returncode == 7, (r4.stdout, r4.stderr)     # curl: could not connect (RST)
        proof = Proof(b).start(peer=a)
        proof.note_xdp()
        r6 = a.run([PY, "-c", f"import socket; s=socket.create_connection(('{B6}', 8003), 5); "
                              "print(s.recv(100).decode().strip())"], timeout=20)
        assert r6.stdout.strip() == A6, (r6.stdout, r6.stderr)
        proof.check()
    finally:
        stop(s)
    assert_accelerated_log(read(log))


def test_dualstack_listener_across_exec(bed6, slip, workdir):
    """A dual-stack listener inherited through exec is still an AF_INET6 socket of the stack in
    the new image (SLIP_FDS carries the family): its IPv4 client is ::ffff:a.b.c.d and the
    kernel of b sees none of the exchange."""
    a, b = bed6
    log = os.path.join(workdir, "exec.log")
    s = start(b, slip([PY, os.path.join(APPS, "exec_dualstack.py"), "8004"]), log)
    try:
        wait_listening(b, 8004, proc=s, log=log)
        proof = Proof(b).start(peer=a)
        proof.note_xdp()
        r = a.run([PY, "-c", f"import socket; s=socket.create_connection(('{B_ADDR}', 8004), 10); "
                             "d=b''\nwhile True:\n    x=s.recv(65536)\n    if not x: break\n    d+=x\n"
                             "print(d.split(b'\\n')[0].decode(), len(d))"], timeout=30)
        print("client:", r.stdout, r.stderr[-500:])
        assert r.stdout.split() == [f"::ffff:{A_ADDR}", f"::ffff:{B_ADDR}", "AF_INET6",
                                    str(2_000_000 + len(f"::ffff:{A_ADDR} ::ffff:{B_ADDR} AF_INET6\n"))]
        proof.check()
        assert s.wait(timeout=10) == 0
    finally:
        stop(s)
    print(read(log))
    assert "listening AF_INET6 ::" in read(log)
    assert_accelerated_log(read(log))


def snmp6(host):
    """The host's kernel IPv6 counters (/proc/net/snmp6: one "name value" per line)."""
    return {k: int(v) for k, v in (l.split() for l in host.run(["cat", "/proc/net/snmp6"], check=True)
                                   .stdout.splitlines() if l.strip())}


ECHO6 = ("import socket\n"
         "s=socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); s.bind(('::', 7100)); print('ready', flush=True)\n"
         "while True:\n"
         "    d, p = s.recvfrom(65536); s.sendto(d + (' from %s %d' % (p[0], p[1])).encode(), p)\n")

UDP_CLIENT = ("import socket, sys\n"
              "u=socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); u.settimeout(5)\n"
              "for dst in sys.argv[1:]:\n"
              "    u.sendto(b'x' * 3000, (dst, 7100)); d, p = u.recvfrom(65536)\n"
              "    print(p[0], d[3000:].decode(), len(d), u.getsockname()[1])\n")


def test_udp_dualstack_socket_both_families(bed6, slip, workdir):
    """One dual-stack UDP socket under slipstream talks to an IPv4 peer (as ::ffff:198.18.0.1) and
    to a native IPv6 peer, fragmented both, from one port as on Linux, all through the stack (UDP
    over native IPv6 is the stack's since issue 16 phase 2); each reply comes back to it."""
    a, b = bed6
    echo = a.popen([PY, "-c", ECHO6], stdout=subprocess.PIPE, text=True)
    try:
        assert echo.stdout.readline().strip() == "ready"
        before, before6 = snmp(b), snmp6(b)
        r = b.run(slip([PY, "-c", UDP_CLIENT, f"::ffff:{A_ADDR}", A6, f"::ffff:{A_ADDR}"]), timeout=30)
        kern, kern6 = diff(snmp(b), before), diff(snmp6(b), before6)
    finally:
        echo.kill()
        echo.wait()
    print(r.stdout, r.stderr[-1000:], "b kernel Udp (IPv4):", kern["Udp.InDatagrams"], kern["Udp.OutDatagrams"],
          "Udp6:", kern6["Udp6InDatagrams"], kern6["Udp6OutDatagrams"])
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [l.split() for l in r.stdout.splitlines()]
    assert [x[0] for x in rows] == [f"::ffff:{A_ADDR}", A6, f"::ffff:{A_ADDR}"]
    # the peer saw one source port for both families, the socket's own
    # (columns: peer, "from", our address as the peer saw it, our port as it saw it, reply length,
    # our own port)
    ports = {x[3] for x in rows} | {x[5] for x in rows}
    assert len(ports) == 1, rows
    assert [x[2] for x in rows] == [f"::ffff:{B_ADDR}", B6, f"::ffff:{B_ADDR}"]
    assert [int(x[4]) for x in rows] == [3000 + len(" from ") + len(x[2]) + 1 + len(x[3]) for x in rows]
    # b's kernel carried none of the three exchanges
    assert kern["Udp.OutDatagrams"] == 0 and kern["Udp.InDatagrams"] == 0, kern
    assert kern6["Udp6OutDatagrams"] == 0 and kern6["Udp6InDatagrams"] == 0, kern6
    assert_accelerated_log(r.stderr)
