"""Writes the seed corpora of fuzz_stack_rx and fuzz_ctl_apply. Frames are built here from the
RFC 791/768/792 layouts with Python's struct module; run from the repository root: python3 fuzz/make_seeds.py"""
import os
import socket
import struct


def csum(b):
    if len(b) % 2:
        b += b"\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16:
        t = (t & 0xFFFF) + (t >> 16)
    return ~t & 0xFFFF


SRC, DST = socket.inet_aton("198.18.0.1"), socket.inet_aton("198.18.0.2")
ETH = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0])


def ip(payload, proto=17, ident=1, frag=0):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident, frag, 64, proto, 0, SRC, DST)
    return h[:10] + struct.pack("!H", csum(h)) + h[12:] + payload


def udp(data, sport=5000, dport=7):
    ph = SRC + DST + struct.pack("!BBH", 0, 17, 8 + len(data))
    c = csum(ph + struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data) or 0xFFFF
    return struct.pack("!HHHH", sport, dport, 8 + len(data), c) + data


def rec(frame, flags=0):
    return bytes([flags]) + struct.pack("!H", len(frame)) + frame


def write(d, name, data):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


d = "fuzz/corpus/stack_rx"
write(d, "udp_one", rec(ETH + ip(udp(b"hello"))))
write(d, "udp_connected", rec(ETH + ip(udp(b"hi", dport=9))))
big = udp(b"x" * 3000)
write(d, "frags", rec(ETH + ip(big[:1480], ident=7, frag=0x2000)) + rec(ETH + ip(big[1480:2960], ident=7, frag=0x2000 | 185))
      + rec(ETH + ip(big[2960:], ident=7, frag=370)))
quote = ip(udp(b"q", sport=9, dport=5000))[:28]
quote = quote[:12] + DST + SRC + quote[20:]
icmp = struct.pack("!BBHHH", 3, 4, 0, 0, 1280) + quote
icmp = icmp[:2] + struct.pack("!H", csum(icmp)) + icmp[4:]
write(d, "icmp_frag_needed", rec(ETH + ip(icmp, proto=1)))
write(d, "timeout", rec(ETH + ip(big[:1480], ident=8, frag=0x2000)) + rec(ETH + ip(udp(b"a")), flags=31 << 2))

# rtnetlink: one RTM_NEWADDR and one RTM_NEWROUTE, laid out per linux/rtnetlink.h.
def nlmsg(typ, body):
    return struct.pack("=IHHII", 16 + len(body), typ, 0, 1, 0) + body


def rta(typ, data):
    b = struct.pack("=HH", 4 + len(data), typ) + data
    return b + b"\0" * ((4 - len(b) % 4) % 4)


addr = nlmsg(20, struct.pack("=BBBBI", 2, 24, 0, 0, 2) + rta(1, DST) + rta(2, DST))
route = nlmsg(24, struct.pack("=BBBBBBBBI", 2, 0, 0, 0, 254, 3, 0, 1, 0) + rta(5, SRC) + rta(4, struct.pack("=I", 2)))
link = nlmsg(16, struct.pack("=BBHiII", 0, 0, 1, 2, 1, 0) + rta(3, b"veth0\0") + rta(4, struct.pack("=I", 1500))
             + rta(1, bytes([2, 0, 0, 0, 0, 2])))
neigh = nlmsg(28, struct.pack("=BBHiHBB", 2, 0, 0, 2, 2, 0, 1) + rta(1, SRC) + rta(2, bytes([2, 0, 0, 0, 0, 1])))
write("fuzz/corpus/ctl_apply", "all", link + addr + route + neigh)
write("fuzz/corpus/ctl_apply", "route", route)
