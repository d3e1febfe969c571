"""The stack's sender against a peer that shrinks its window, with the window update still on the
AF_XDP RX ring when the program writes (packetdrill tcp_info/tcp-info-rwnd-limited saw this).

The kernel processes a peer's ACK in its softirq before the program's next write(); the stack
processes frames when something polls. Here nothing polls in between: the program runs with
SLIP_NO_PROGRESS_THREAD=1 and sleeps in time.sleep() while the ACK arrives. Before the send path
took in waiting frames first, the write used the window from before the ACK and sent 1000
bytes past the 10 the peer had just offered.

The peer is a raw AF_PACKET program in a, answering for an address a's kernel does not own
(198.18.0.99, which b's neighbour table maps to a's MAC), so a's kernel stays out of it: it
offers MSS 1000 and a 2000-byte window (no scaling), receives the first 1000 bytes, ACKs them
with a window of 10, and then watches b's segments for anything beyond that edge.
"""
import json
import os
import subprocess

PEER_IP = "198.18.0.99"
PORT = 7411

APP = r"""
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
s.settimeout(None)               # a plain blocking send: no poll() of Python's own before it
s.send(b"a" * 1000)
time.sleep(0.4)                  # the peer's window update arrives meanwhile
n = s.send(b"b" * 1000)
print("sent", n, flush=True)
time.sleep(1.0)
"""

PEER = r"""
import json, random, socket, struct, sys, time
iface, mymac, peer_ip, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
mac = lambda m: bytes(int(x, 16) for x in m.split(":"))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((iface, 0))
s.settimeout(0.05)
def csum(b):
    if len(b) % 2: b += b"\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16: t = (t & 0xffff) + (t >> 16)
    return ~t & 0xffff
def seg(dmac, src, dst, sport, dport, seq, ack, flags, win, opts=b""):
    h = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xffffffff, ack & 0xffffffff,
                    ((20 + len(opts)) // 4) << 4, flags, win, 0, 0) + opts
    ph = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(h))
    h = h[:16] + struct.pack("!H", csum(ph + h)) + h[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(h), random.randrange(65536), 0x4000, 64, 6, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return dmac + mac(mymac) + b"\x08\x00" + ip + h
def frames(deadline):
    while time.monotonic() < deadline:
        try:
            f = s.recv(4096)
        except socket.timeout:
            continue
        if len(f) < 54 or f[12:14] != b"\x08\x00" or f[23] != 6:
            continue
        ihl = (f[14] & 15) * 4
        if socket.inet_ntoa(f[30:34]) != peer_ip:
            continue
        t = f[14 + ihl:]
        sp, dp, sq, ak, off, fl = struct.unpack("!HHIIBB", t[:14])
        if dp != port:
            continue
        tot = struct.unpack("!H", f[16:18])[0]
        yield f[6:12], socket.inet_ntoa(f[26:30]), sp, sq, ak, fl, tot - ihl - (off >> 4) * 4
print("ready", flush=True)
res = {"handshake": False, "first": False, "beyond": [], "segs": []}
iss = 5000
end = time.monotonic() + 10
for smac, src, sp, sq, ak, fl, ln in frames(end):
    if fl & 0x02:                                   # SYN: answer MSS 1000, window 2000
        cli = (smac, src, sp, sq + 1)
        s.send(seg(smac, peer_ip, src, port, sp, iss, sq + 1, 0x12, 2000, b"\x02\x04\x03\xe8"))
        res["handshake"] = True
        continue
    if res["handshake"] and ln == 1000 and sq == cli[3]:
        res["first"] = True
        break
if res["first"]:
    time.sleep(0.1)
    edge = cli[3] + 1000 + 10
    s.send(seg(cli[0], peer_ip, cli[1], port, cli[2], iss + 1, cli[3] + 1000, 0x10, 10))
    for smac, src, sp, sq, ak, fl, ln in frames(time.monotonic() + 1.2):
        if ln:
            res["segs"].append([sq - cli[3], ln])
            if ((sq + ln - edge) & 0xffffffff) < 0x80000000 and sq + ln != edge:
                res["beyond"].append([sq - cli[3], ln])
print(json.dumps(res), flush=True)
"""


def test_write_sees_window_update_waiting_on_the_ring(testbed, slip_bin):
    a, b = testbed.host("a"), testbed.host("b")
    b.run(["ip", "neigh", "replace", PEER_IP, "lladdr", a.mac, "dev", b.ifname, "nud", "permanent"],
          check=True, timeout=10)
    peer = a.popen(["python3", "-c", PEER, a.ifname, a.mac, PEER_IP, str(PORT)],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert peer.stdout.readline().strip() == "ready", peer.stderr.read()
        env = dict(os.environ, SLIP_NO_PROGRESS_THREAD="1")
        app = b.run([str(slip_bin("slipstream")), "run", "--iface", b.ifname, "--", "python3", "-c", APP,
                     PEER_IP, str(PORT)], env=env, timeout=30)
        out, err = peer.communicate(timeout=30)
    finally:
        if peer.poll() is None:
            peer.kill()
            peer.wait()
    res = json.loads(out.strip().splitlines()[-1])
    print(f"\napp: {app.stdout.strip()} {app.stderr.strip()[-300:]}\npeer: {res}")
    assert app.returncode == 0, app.stdout + app.stderr
    assert res["handshake"] and res["first"], (res, err[-500:])
    assert "sent 1000" in app.stdout, app.stdout
    assert not res["beyond"], \
        f"data sent past the 10-byte window the peer offered (offset, length): {res['beyond']}"
