"""IPv6 flow labels on the wire (issue 16): Linux labels its TCP and UDP packets by default
(net.ipv6.auto_flowlabels=1), one label per flow, in the stateless range (0x80000 set); the
stack's packets must carry labels the same way. tcpdump in host a (the kernel peer) reads the
IPv6 headers of what an accelerated program in b sends: two TCP connections and two UDP flows,
then the same with auto_flowlabels=0 in b's namespace (no labels, as the kernel then sends)."""
import re
import subprocess
import time

from test_apps import PY, assert_accelerated_log, slip  # noqa: F401 (fixture)

__all__ = ["slip"]
TPORT, UPORT = 8093, 7210

# Kernel server in a: reads each connection to its end, answers "ok".
SERVER = ("import socket, sys\n"
          "l = socket.socket(socket.AF_INET6); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "l.bind(('::', int(sys.argv[1]))); l.listen(8); print('ready', flush=True)\n"
          "while True:\n"
          "    c, _ = l.accept()\n"
          "    while c.recv(65536): pass\n"
          "    c.sendall(b'ok'); c.close()\n")

# Client in b: two TCP connections (3000 bytes each), then datagrams from two UDP sockets.
CLIENT = ("import socket, sys\n"
          "dst, tp, up = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n"
          "for _ in range(2):\n"
          "    s = socket.socket(socket.AF_INET6); s.settimeout(10)\n"
          "    s.connect((dst, tp)); s.sendall(b'x' * 3000); s.shutdown(socket.SHUT_WR)\n"
          "    assert s.recv(10) == b'ok'; s.close()\n"
          "for _ in range(2):\n"
          "    u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
          "    for _ in range(3): u.sendto(b'y' * 100, (dst, up))\n"
          "    u.close()\n"
          "print('done')\n")

LINE = re.compile(r"^IP6 \((?:class 0x[0-9a-f]+, )?(?:flowlabel (0x[0-9a-f]+), )?hlim \d+, "
                  r"next-header (TCP|UDP) .*?\) ([0-9a-f:]+)\.(\d+) > ")


def labels_seen(a, b, slip):
    """Runs the client accelerated in b; {(proto, source port): {labels}} of what a received."""
    srv = a.popen([PY, "-c", SERVER, str(TPORT)], stdout=subprocess.PIPE, text=True)
    dump = a.popen(["tcpdump", "-l", "-n", "-t", "-v", "-i", "veth0",
                    f"ip6 and src host {b.addr6} and (tcp dst port {TPORT} or udp dst port {UPORT})"],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "ready"
        assert "listening on" in dump.stderr.readline()
        r = b.run(slip([PY, "-c", CLIENT, a.addr6, str(TPORT), str(UPORT)]), timeout=60)
        assert r.returncode == 0 and "done" in r.stdout, r.stderr[-2000:]
        assert_accelerated_log(r.stderr)
        time.sleep(0.5)
    finally:
        for p in (srv, dump):
            if p.poll() is None:
                p.terminate()
        out, _ = dump.communicate(timeout=10)
        srv.wait()
    flows = {}
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            label = int(m.group(1), 16) if m.group(1) else 0
            flows.setdefault((m.group(2), int(m.group(4))), set()).add(label)
    print(flows)
    print("\n".join(out.splitlines()[:6]))
    return flows


def test_flowlabel6_one_label_per_flow_as_linux(bed6, slip):
    a, b = bed6
    flows = labels_seen(a, b, slip)
    tcp = [v for (p, _), v in flows.items() if p == "TCP"]
    udp = [v for (p, _), v in flows.items() if p == "UDP"]
    assert len(tcp) == 2 and len(udp) == 2, flows
    for v in tcp + udp:
        assert len(v) == 1, f"a flow changed its label: {flows}"
        (label,) = v
        assert label & 0x80000 and label <= 0xfffff, f"not an automatic (stateless-range) label: {flows}"
    labels = [next(iter(v)) for v in tcp + udp]
    assert len(set(labels)) == 4, f"flows share a label: {flows}"

    # auto_flowlabels=0 in b's namespace: the kernel sends 0, and so does a stack started there.
    b.run(["sysctl", "-qw", "net.ipv6.auto_flowlabels=0"], check=True)
    flows = labels_seen(a, b, slip)
    assert len(flows) == 4 and all(v == {0} for v in flows.values()), flows
