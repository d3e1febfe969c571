"""ECN (RFC 3168) negotiated between the stack and the kernel, both ways, as net.ipv4.tcp_ecn of
each namespace says (the stack reads its namespace's value when it starts, src/tcp/tcp_ecn.c):

- a kernel client in a (tcp_ecn = 1: it asks) to a stack server in b: the stack's SYN-ACK
  carries ECE without CWR, and the data it sends leaves ECT(0);
- a stack client in b (tcp_ecn = 1) to a kernel server in a: the stack's SYN carries ECE and CWR,
  the kernel accepts (ECE in its SYN-ACK), and the stack's data is ECT(0).
With tcp_ecn = 0 in b the stack neither asks nor accepts. What the packets carried is read from
a capture in a. (The response to CE marks is covered by tests/unit/tcp/test_tcp_ecn.c.)
"""
import os
import struct
import subprocess
import time

N = 200000

SERVER = r"""
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", port)); l.listen(1)
print("listening", flush=True)
c, _ = l.accept()
got = 0
while got < n:
    d = c.recv(65536)
    if not d: break
    got += len(d)
c.sendall(b"y" * n)
c.shutdown(socket.SHUT_WR)
c.recv(1)
print("served", got, flush=True)
"""

CLIENT = r"""
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)
n = int(sys.argv[3])
s.sendall(b"x" * n)
got = 0
while True:
    d = s.recv(65536)
    if not d: break
    got += len(d)
s.close()
print("got", got, flush=True)
"""


def packets(path):
    """(src, sport, dst, dport, tcp flags, tos, payload length) of each TCP/IPv4 frame."""
    out = []
    with open(path, "rb") as f:
        data = f.read()
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack("<I", data[off + 8:off + 12])[0]
        fr = data[off + 16:off + 16 + incl]
        off += 16 + incl
        if len(fr) < 54 or fr[12:14] != b"\x08\x00" or fr[23] != 6:
            continue
        ihl = (fr[14] & 15) * 4
        tot = struct.unpack("!H", fr[16:18])[0]
        t = fr[14 + ihl:]
        sp, dp = struct.unpack("!HH", t[:4])
        doff = (t[12] >> 4) * 4
        out.append((".".join(map(str, fr[26:30])), sp, ".".join(map(str, fr[30:34])), dp, t[13], fr[15],
                    tot - ihl - doff))
    return out


def run_pair(srv_host, srv_cmd, cli_host, cli_cmd, port):
    srv = srv_host.popen(srv_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "listening", srv.stderr.read() if srv.poll() is not None else ""
        r = cli_host.run(cli_cmd, timeout=60)
        out, err = srv.communicate(timeout=30)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    assert r.returncode == 0 and f"got {N}" in r.stdout, (r.stdout, r.stderr[-1000:])
    assert f"served {N}" in out, (out, err[-1000:])


def capture(host, path, ports):
    flt = " or ".join(f"port {p}" for p in ports)
    p = host.popen(["tcpdump", "-i", host.ifname, "-s", "96", "-U", "-w", path, flt],
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)             # tcpdump is listening once it has printed to stderr; give it time
    return p


ECE, CWR, SYN, ACK = 0x40, 0x80, 0x02, 0x10


def check_flows(pk, stack_addr, port, stack_is_server, ecn_on):
    flow = [p for p in pk if port in (p[1], p[3])]
    assert flow, f"nothing captured on port {port}"
    from_stack = [p for p in flow if p[0] == stack_addr]
    syn = [p for p in from_stack if p[4] & SYN]
    assert syn, flow[:5]
    if stack_is_server:
        assert all(p[4] & ACK for p in syn)
        want = ECE if ecn_on else 0
        assert syn[0][4] & (ECE | CWR) == want, f"SYN-ACK flags {syn[0][4]:#x}"
    else:
        assert syn[0][4] & (ECE | CWR) == ((ECE | CWR) if ecn_on else 0), f"SYN flags {syn[0][4]:#x}"
        synack = [p for p in flow if p[0] != stack_addr and p[4] & SYN]
        assert synack and (bool(synack[0][4] & ECE) == ecn_on), synack[:1]
    assert all(p[5] & 3 == 0 for p in syn), "a SYN went ECN-capable"
    data = [p for p in from_stack if p[6] > 0]
    assert data, "the stack sent no data"
    ect = sum(1 for p in data if p[5] & 3 == 2)
    print(f"port {port}: {len(data)} data segments from the stack, {ect} ECT(0)")
    if ecn_on:
        assert ect >= len(data) * 9 // 10, f"only {ect} of {len(data)} data segments ECT(0)"
    else:
        assert ect == 0


def test_ecn_with_kernel_peers(testbed, slip_bin, tmp_path):
    a, b = testbed.host("a"), testbed.host("b")
    slip = [str(slip_bin("slipstream")), "run", "--iface", b.ifname, "--"]
    r = a.run(["sysctl", "-w", "net.ipv4.tcp_ecn=1"], timeout=10)
    if r.returncode != 0:
        import pytest
        pytest.skip(f"cannot set net.ipv4.tcp_ecn in a namespace: {r.stderr.strip()}")
    os.chmod(tmp_path, 0o777)
    for mode, on in ((1, True), (0, False)):
        pcap = str(tmp_path / f"ecn{mode}.pcap")
        b.run(["sysctl", "-w", f"net.ipv4.tcp_ecn={mode}"], check=True, timeout=10)
        cap = capture(a, pcap, (7421, 7422))
        try:
            run_pair(b, slip + ["python3", "-c", SERVER, "7421", str(N)],
                     a, ["python3", "-c", CLIENT, b.addr, "7421", str(N)], 7421)
            run_pair(a, ["python3", "-c", SERVER, "7422", str(N)],
                     b, slip + ["python3", "-c", CLIENT, a.addr, "7422", str(N)], 7422)
            time.sleep(1.0)
        finally:
            cap.terminate()
            cap.wait(timeout=10)
        pk = packets(pcap)
        check_flows(pk, b.addr, 7421, True, on)
        check_flows(pk, b.addr, 7422, False, on)
