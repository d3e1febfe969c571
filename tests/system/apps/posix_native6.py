"""Native IPv6 scenarios for posix_semantics.py (the kernel-vs-slipstream differential test,
issue 16): AF_INET6 datagram and stream sockets talking to the peer's IPv6 address (PEER6,
2001:2::1 in the testbed), which the stack carries. Registered as v6n_<name>; `m` is
posix_semantics itself (attempt, pattern, PEER, PEER6, UDPECHO, UDPOTHER, ECHO, RESET, CLOSED,
CMD ...). Each returns what a program can observe; ports the kernel picks are reported as "set"
only.
"""
import select
import socket
import struct

V6, UDP = socket.AF_INET6, socket.SOCK_DGRAM
IP6 = socket.IPPROTO_IPV6


def name6(a):
    return [a[0], a[1] != 0, a[2], a[3]]


def sc_udp_sendto_recvfrom(m, o):
    u = socket.socket(V6, UDP)
    u.settimeout(3)
    o["unbound"] = list(u.getsockname())
    o["sendto"] = m.attempt(u.sendto, m.pattern(100), (m.PEER6, m.UDPECHO))
    o["name"] = name6(u.getsockname())
    d, src = u.recvfrom(2000)
    o["data_ok"] = d == m.pattern(100)
    o["from"] = list(src)
    # a datagram larger than the link MTU: fragmented both ways
    o["big_sendto"] = m.attempt(u.sendto, m.pattern(5000, 3), (m.PEER6, m.UDPECHO))
    d, src = u.recvfrom(8000)
    o["big"] = [len(d), d == m.pattern(5000, 3), list(src)]
    # MSG_PEEK|MSG_TRUNC with a short buffer: the full length, the datagram stays
    m.attempt(u.sendto, b"0123456789", (m.PEER6, m.UDPECHO))
    o["peek_trunc"] = u.recvmsg(4, 0, socket.MSG_PEEK | socket.MSG_TRUNC)[2] & socket.MSG_TRUNC != 0
    o["after_peek"] = u.recv(100)
    u.close()


def sc_udp_connected(m, o):
    u = socket.socket(V6, UDP)
    u.settimeout(3)
    o["connect"] = m.attempt(u.connect, (m.PEER6, m.UDPECHO))
    o["peer"] = list(u.getpeername())
    o["send"] = u.send(b"hello")
    o["recv"] = u.recv(100)
    # the peer answers "other:" from another port first: a connected socket never sees it
    u.send(b"other:x")
    o["other_filtered"] = u.recv(100)
    u.settimeout(0.3)
    o["nothing_more"] = m.attempt(u.recv, 100)
    # sendto another destination on a connected UDP socket is allowed (Linux)
    u.settimeout(3)
    o["sendto_other"] = m.attempt(u.sendto, b"again", (m.PEER6, m.UDPECHO))
    o["recv_again"] = m.attempt(u.recv, 100)
    u.close()


def sc_udp_unconnected_sees_both_ports(m, o):
    u = socket.socket(V6, UDP)
    u.settimeout(3)
    u.sendto(b"other:y", (m.PEER6, m.UDPECHO))
    got = sorted([list(u.recvfrom(100)) for _ in range(2)], key=lambda x: x[1][1])
    o["both"] = [[d.decode(), list(src)] for d, src in got]
    u.close()


def sc_udp_refused(m, o):
    u = socket.socket(V6, UDP)
    u.settimeout(3)
    u.connect((m.PEER6, m.CLOSED))
    o["send"] = u.send(b"x")
    p = select.poll()
    p.register(u, select.POLLIN)
    o["poll"] = sorted(e for _, e in p.poll(3000))
    o["recv"] = m.attempt(u.recv, 100)
    o["so_error_after"] = u.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    u.close()


def sc_udp_bind_any_v6only(m, o):
    u = socket.socket(V6, UDP)
    u.settimeout(3)
    u.setsockopt(IP6, socket.IPV6_V6ONLY, 1)
    o["bind"] = m.attempt(u.bind, ("::", 0))
    o["name"] = name6(u.getsockname())
    o["sendto_mapped"] = m.attempt(u.sendto, b"x", ("::ffff:" + m.PEER, m.UDPECHO))
    o["sendto_v6"] = m.attempt(u.sendto, b"y", (m.PEER6, m.UDPECHO))
    o["recvfrom"] = [x if isinstance(x, bytes) else list(x) for x in u.recvfrom(100)]
    o["v6only_after_bind"] = m.attempt(u.setsockopt, IP6, socket.IPV6_V6ONLY, 0)
    u.close()


def sc_udp_dualstack_both(m, o):
    u = socket.socket(V6, UDP)
    u.settimeout(3)
    o["bind"] = m.attempt(u.bind, ("::", 0))
    u.sendto(b"four", ("::ffff:" + m.PEER, m.UDPECHO))
    d, src = u.recvfrom(100)
    o["v4"] = [d.decode(), list(src)]
    u.sendto(b"six", (m.PEER6, m.UDPECHO))
    d, src = u.recvfrom(100)
    o["v6"] = [d.decode(), list(src)]
    u.close()


def sc_udp_recvpktinfo(m, o):
    u = socket.socket(V6, UDP)
    u.settimeout(3)
    u.setsockopt(IP6, socket.IPV6_RECVPKTINFO, 1)
    u.sendto(b"pi", (m.PEER6, m.UDPECHO))
    d, anc, fl, src = u.recvmsg(100, 256)
    o["first"] = [d, fl, [[lvl, typ, socket.inet_ntop(V6, data[:16]), struct.unpack("I", data[16:20])[0], len(data)]
                          for lvl, typ, data in anc]]
    # a control buffer too small for even a header: nothing, MSG_CTRUNC
    u.sendto(b"small", (m.PEER6, m.UDPECHO))
    d, anc, fl, src = u.recvmsg(100, 8)
    o["small_buffer"] = [d, fl & socket.MSG_CTRUNC != 0, len(anc)]
    u.setsockopt(IP6, socket.IPV6_RECVPKTINFO, 0)
    u.sendto(b"off", (m.PEER6, m.UDPECHO))
    d, anc, fl, src = u.recvmsg(100, 256)
    o["off"] = [d, fl, len(anc)]
    u.close()


# Linux's values (linux/in6.h); Python's socket module has no names for most of them
IPV6_MTU_DISCOVER, IPV6_DONTFRAG = 23, 62
PMTUDISC = {"dont": 0, "want": 1, "do": 2, "probe": 3, "interface": 4, "omit": 5}


def sc_udp_mtu_discover_dontfrag(m, o):
    """A datagram larger than the link MTU (3000 bytes over 1500): fragmented, or EMSGSIZE, by
    IPV6_MTU_DISCOVER and IPV6_DONTFRAG; a small one always goes. What came back is echoed."""
    def one(opts):
        u = socket.socket(V6, UDP)
        u.settimeout(2)
        r = {"set": [m.attempt(u.setsockopt, IP6, k, v) for k, v in opts]}
        r["get"] = [u.getsockopt(IP6, IPV6_MTU_DISCOVER), u.getsockopt(IP6, IPV6_DONTFRAG)]
        r["big"] = m.attempt(u.sendto, m.pattern(3000, 5), (m.PEER6, m.UDPECHO))
        r["small"] = m.attempt(u.sendto, m.pattern(500, 7), (m.PEER6, m.UDPECHO))
        got = []
        for _ in range(2):
            d = m.attempt(u.recv, 8000)
            got.append(d if isinstance(d, str) else len(d))
            if isinstance(d, str):
                break
        r["echoed"] = sorted(got, key=str)
        u.close()
        return r
    o["default"] = one([])
    o["dontfrag"] = one([(IPV6_DONTFRAG, 1)])
    o["dontfrag_off"] = one([(IPV6_DONTFRAG, 1), (IPV6_DONTFRAG, 0)])
    for name, v in PMTUDISC.items():
        o[name] = one([(IPV6_MTU_DISCOVER, v)])
    o["dont_dontfrag"] = one([(IPV6_MTU_DISCOVER, 0), (IPV6_DONTFRAG, 1)])
    o["bad_value"] = one([(IPV6_MTU_DISCOVER, 6)])
    # connected, 1400 bytes: fits the 1500-byte link whatever the option
    u = socket.socket(V6, UDP)
    u.settimeout(2)
    u.setsockopt(IP6, IPV6_MTU_DISCOVER, PMTUDISC["do"])
    u.connect((m.PEER6, m.UDPECHO))
    o["connected_fits"] = [m.attempt(u.send, m.pattern(1400)), len(u.recv(8000))]
    o["connected_big"] = m.attempt(u.send, m.pattern(1500))
    u.close()


def sc_tcp_connect_echo_names(m, o):
    s = socket.socket(V6, socket.SOCK_STREAM)
    s.settimeout(5)
    o["connect"] = m.attempt(s.connect, (m.PEER6, m.ECHO))
    o["name"] = name6(s.getsockname())
    o["peer"] = list(s.getpeername())
    data = m.pattern(200_000, 7)
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        x = s.recv(65536)
        if not x:
            break
        got += x
    o["echo"] = [len(got), got == data]
    s.close()


def sc_tcp_refused_and_reset(m, o):
    s = socket.socket(V6, socket.SOCK_STREAM)
    s.settimeout(5)
    o["refused"] = m.attempt(s.connect, (m.PEER6, m.CLOSED))
    o["peer_after"] = m.attempt(s.getpeername)
    s.close()
    s = socket.socket(V6, socket.SOCK_STREAM)
    s.setblocking(False)
    o["nb_connect"] = m.attempt(s.connect, (m.PEER6, m.CLOSED))
    p = select.poll()
    p.register(s, select.POLLOUT)
    o["nb_poll"] = sorted(e for _, e in p.poll(5000))
    o["nb_so_error"] = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    s.close()
    # a blocking connect returns once established, before the peer's RST (which a timeout's poll
    # for the connect could see first, or not)
    s = socket.socket(V6, socket.SOCK_STREAM)
    o["reset_connect"] = m.attempt(s.connect, (m.PEER6, m.RESET))
    o["reset_recv"] = m.attempt(s.recv, 100)
    o["reset_recv_again"] = m.attempt(s.recv, 100)
    o["reset_so_error"] = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    s.close()


def accept_connectback(m, o, ls, prefix):
    """The peer connects back to ls's port on our IPv6 address; what accept and the names say."""
    port = ls.getsockname()[1]
    c = socket.create_connection((m.PEER6, m.CMD), 5)
    c.sendall(f"connectback {port}\n".encode())
    ls.settimeout(5)
    a, peer = ls.accept()
    me = c.getsockname()[0]
    o[prefix + "accepted_from_peer"] = [peer[0] == m.PEER6, peer[1] != 0, peer[2], peer[3]]
    o[prefix + "accepted_name"] = [a.getsockname()[0] == me, a.getsockname()[1] == port]
    o[prefix + "accepted_peername"] = list(a.getpeername()) == list(peer)
    o[prefix + "data"] = a.recv(10)
    o[prefix + "cmd"] = c.recv(100).decode().strip()
    a.close()
    c.close()


def sc_tcp_listen_dualstack_accept(m, o):
    ls = socket.socket(V6, socket.SOCK_STREAM)
    o["bind"] = m.attempt(ls.bind, ("::", 0))
    o["listen"] = m.attempt(ls.listen, 8)
    o["name"] = name6(ls.getsockname())
    accept_connectback(m, o, ls, "")
    ls.close()


def sc_tcp_listen_v6only_accept(m, o):
    ls = socket.socket(V6, socket.SOCK_STREAM)
    ls.setsockopt(IP6, socket.IPV6_V6ONLY, 1)
    o["listen"] = m.attempt(ls.listen, 8)      # autobind on [::]
    o["name"] = name6(ls.getsockname())
    accept_connectback(m, o, ls, "")
    o["v6only_after"] = m.attempt(ls.setsockopt, IP6, socket.IPV6_V6ONLY, 0)
    ls.close()


SCENARIOS = {n[3:]: f for n, f in list(globals().items()) if n.startswith("sc_") and callable(f)}
