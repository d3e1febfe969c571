"""Dual-stack scenarios for posix_semantics.py (the kernel-vs-slipstream differential test): AF_INET6
sockets talking IPv4 through v4-mapped addresses (::ffff:a.b.c.d), as Java, Node, Python's
http.server and nginx `listen [::]` do. Each returns what a program can observe; posix_semantics.py
registers them as v6_<name> and passes itself as `m` (its helpers: attempt, recv_exact,
connectback, pattern, PEER).
"""
import ctypes
import socket
import struct

V6, TCP, UDP = socket.AF_INET6, socket.SOCK_STREAM, socket.SOCK_DGRAM
IP6 = socket.IPPROTO_IPV6
LOCAL = "198.18.0.2"

libc = ctypes.CDLL(None, use_errno=True)
for _n, _args in (("connect", [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint]),
                  ("bind", [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint]),
                  ("accept4", [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]),
                  ("getsockname", [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]),
                  ("getpeername", [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p])):
    getattr(libc, _n).argtypes = _args
libc.sendto.restype = ctypes.c_ssize_t
libc.sendto.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
                        ctypes.c_uint]


def mapped(ip):
    return "::ffff:" + ip


def name6(a, port=None):
    """A sockaddr_in6 tuple with the (random) port replaced by whether it is set (or equals port)."""
    return [a[0], (a[1] == port) if port is not None else a[1] != 0, a[2], a[3]]


def sin_raw(ip, port):
    return struct.pack("<H", socket.AF_INET) + struct.pack("!H", port) + socket.inet_aton(ip) + bytes(8)


def cerr(rc):
    import errno
    return rc if rc >= 0 else "E" + errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


def raw_name(fd, cap):
    """getsockname into a buffer of cap bytes: the length the kernel says and the family."""
    buf = ctypes.create_string_buffer(cap)
    n = ctypes.c_uint32(cap)
    rc = libc.getsockname(fd, buf, ctypes.byref(n))
    return [rc, n.value, struct.unpack("<H", buf.raw[:2])[0] if cap >= 2 else None]


def sc_tcp_connect(m, o):
    s = socket.socket(V6, TCP)
    o["v6only_default"] = s.getsockopt(IP6, socket.IPV6_V6ONLY)
    o["unbound"] = list(s.getsockname())
    o["connect"] = m.attempt(s.connect, (mapped(m.PEER), m.ECHO))
    o["name"] = name6(s.getsockname())
    o["peer"] = list(s.getpeername())
    o["raw_name_28"] = raw_name(s.fileno(), 28)
    o["raw_name_16"] = raw_name(s.fileno(), 16)
    data = m.pattern(100_000)
    s.sendall(data)
    o["echo"] = m.recv_exact(s, len(data)) == data
    o["v6only_after_connect"] = m.attempt(s.setsockopt, IP6, socket.IPV6_V6ONLY, 1)
    for opt, val in (("IPV6_TCLASS", 0x20), ("IPV6_UNICAST_HOPS", 33), ("IPV6_MTU_DISCOVER", 2),
                     ("IPV6_RECVPKTINFO", 1)):
        o[opt] = [m.attempt(s.setsockopt, IP6, getattr(socket, opt), val),
                  m.attempt(s.getsockopt, IP6, getattr(socket, opt))]
    o["ip_tos"] = [m.attempt(s.setsockopt, socket.IPPROTO_IP, socket.IP_TOS, 0x10),
                   m.attempt(s.getsockopt, socket.IPPROTO_IP, socket.IP_TOS)]
    s.close()
    # An AF_INET sockaddr is not for an AF_INET6 TCP socket (tcp_v6_connect)
    s = socket.socket(V6, TCP)
    b = ctypes.create_string_buffer(sin_raw(m.PEER, m.ECHO), 16)
    o["connect_af_inet"] = cerr(libc.connect(s.fileno(), b, 16))
    s.close()


def sc_tcp_listen_accept(m, o):
    ls = socket.socket(V6, TCP)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("::", 0))
    ls.listen(8)
    port = ls.getsockname()[1]
    o["listener"] = name6(ls.getsockname())
    c = m.connectback(port)
    a, peer = ls.accept()
    o["family"] = a.family
    o["peer"] = [peer[0], peer[1] != 0, peer[2], peer[3]]
    o["peer_same"] = list(a.getpeername()) == list(peer)
    o["accepted_name"] = name6(a.getsockname(), port)
    o["hi"] = m.recv_exact(a, 2).decode()
    o["cmd"] = m.recv_exact(c, 3).decode()
    o["v6only_accepted"] = m.attempt(a.setsockopt, IP6, socket.IPV6_V6ONLY, 1)
    o["v6only_listener"] = m.attempt(ls.setsockopt, IP6, socket.IPV6_V6ONLY, 1)
    a.close()
    c.close()
    # accept4 into a sockaddr_in-sized buffer: truncated, the full length reported
    c = m.connectback(port)
    buf = ctypes.create_string_buffer(16)
    n = ctypes.c_uint32(16)
    fd = libc.accept4(ls.fileno(), buf, ctypes.byref(n), socket.SOCK_CLOEXEC)
    o["accept4_short"] = [fd >= 0, n.value, struct.unpack("<H", buf.raw[:2])[0], buf.raw[8:16].hex()]
    if fd >= 0:
        a = socket.socket(fileno=fd)
        o["accept4_family"] = a.family
        o["hi2"] = m.recv_exact(a, 2).decode()
        a.close()
    c.close()
    ls.close()


def sc_tcp_listen_unbound(m, o):
    """listen() without bind: Linux binds [::] and an ephemeral port."""
    ls = socket.socket(V6, TCP)
    ls.listen(4)
    port = ls.getsockname()[1]
    o["listener"] = name6(ls.getsockname())
    c = m.connectback(port)
    a, peer = ls.accept()
    o["peer"] = peer[0]
    o["hi"] = m.recv_exact(a, 2).decode()
    o["cmd"] = m.recv_exact(c, 3).decode()
    for x in (a, c, ls):
        x.close()


def sc_bind_mapped(m, o):
    ls = socket.socket(V6, TCP)
    o["bind"] = m.attempt(ls.bind, (mapped(LOCAL), 0))
    port = ls.getsockname()[1]
    o["name"] = name6(ls.getsockname())
    o["v6only_after_bind"] = m.attempt(ls.setsockopt, IP6, socket.IPV6_V6ONLY, 1)
    ls.listen(4)
    c = m.connectback(port)
    a, peer = ls.accept()
    o["peer"] = peer[0]
    o["accepted_name"] = name6(a.getsockname(), port)
    o["hi"] = m.recv_exact(a, 2).decode()
    for x in (a, c, ls):
        x.close()
    # the same port again, dual-stack any: taken
    s = socket.socket(V6, TCP)
    s.bind((mapped(LOCAL), 0))
    s.listen(1)
    s2 = socket.socket(V6, TCP)
    o["bind_any_same_port"] = m.attempt(s2.bind, ("::", s.getsockname()[1]))
    s4 = socket.socket(socket.AF_INET, TCP)
    o["bind_v4_same_port"] = m.attempt(s4.bind, ("0.0.0.0", s.getsockname()[1]))
    s5 = socket.socket(V6, TCP)
    o["bind_not_local"] = m.attempt(s5.bind, (mapped("198.18.0.99"), 0))
    s6 = socket.socket(V6, TCP)
    b = ctypes.create_string_buffer(sin_raw(LOCAL, 0), 16)
    o["bind_af_inet"] = cerr(libc.bind(s6.fileno(), b, 16))
    o["bind_af_inet_then_mapped"] = m.attempt(s6.bind, (mapped(LOCAL), 0))
    for x in (s, s2, s4, s5, s6):
        x.close()


def sc_udp(m, o):
    u = socket.socket(V6, UDP)
    o["unbound"] = list(u.getsockname())
    o["sendto"] = u.sendto(b"hello", (mapped(m.PEER), m.UDPECHO))
    o["after_sendto"] = name6(u.getsockname())
    d, src = u.recvfrom(100)
    o["recvfrom"] = [d.decode(), list(src)]
    u.sendto(b"again", (mapped(m.PEER), m.UDPECHO))
    d, anc, flags, src = u.recvmsg(100, 256)
    o["recvmsg"] = [d.decode(), anc, flags, list(src)]
    u.sendto(b"trunc-me", (mapped(m.PEER), m.UDPECHO))
    d, anc, flags, src = u.recvmsg(4)
    o["recvmsg_trunc"] = [d.decode(), flags & socket.MSG_TRUNC != 0]
    # an AF_INET destination on an AF_INET6 UDP socket: Linux takes it (udpv6_sendmsg)
    b = ctypes.create_string_buffer(sin_raw(m.PEER, m.UDPECHO), 16)
    o["sendto_af_inet"] = cerr(libc.sendto(u.fileno(), b"v4", 2, 0, b, 16))
    d, src = u.recvfrom(100)
    o["sendto_af_inet_reply"] = [d.decode(), list(src)]
    o["connect"] = m.attempt(u.connect, (mapped(m.PEER), m.UDPECHO))
    o["peer"] = list(u.getpeername())
    o["send"] = u.send(b"conn")
    o["recv"] = u.recv(100).decode()
    o["disconnect"] = cerr(libc.connect(u.fileno(), ctypes.create_string_buffer(
        struct.pack("<H", socket.AF_UNSPEC) + bytes(26), 28), 28))
    o["peer_after"] = m.attempt(u.getpeername)
    o["connect_af_inet"] = cerr(libc.connect(u.fileno(), b, 16))
    o["peer_af_inet"] = m.attempt(lambda: list(u.getpeername()))
    o["v6only_bound"] = m.attempt(u.setsockopt, IP6, socket.IPV6_V6ONLY, 1)
    u.close()


def sc_udp_bind(m, o):
    u = socket.socket(V6, UDP)
    o["bind"] = m.attempt(u.bind, ("::", 0))
    port = u.getsockname()[1]
    o["name"] = name6(u.getsockname())
    u.sendto(b"x1", (mapped(m.PEER), m.UDPECHO))
    d, src = u.recvfrom(100)
    o["reply"] = [d.decode(), list(src)]
    u2 = socket.socket(V6, UDP)
    o["bind_same"] = m.attempt(u2.bind, ("::", port))
    u4 = socket.socket(socket.AF_INET, UDP)
    o["bind_v4_same"] = m.attempt(u4.bind, ("0.0.0.0", port))
    u3 = socket.socket(V6, UDP)
    o["bind_mapped"] = m.attempt(u3.bind, (mapped(LOCAL), 0))
    o["mapped_name"] = name6(u3.getsockname())
    u3.sendto(b"x3", (mapped(m.PEER), m.UDPECHO))
    d, src = u3.recvfrom(100)
    o["mapped_reply"] = [d.decode(), list(src)]
    u5 = socket.socket(V6, UDP)
    o["bind_mapped_any"] = m.attempt(u5.bind, ("::ffff:0.0.0.0", 0))
    o["mapped_any_name"] = name6(u5.getsockname())
    u6 = socket.socket(V6, UDP)
    b = ctypes.create_string_buffer(sin_raw(LOCAL, 0), 16)
    o["bind_af_inet"] = cerr(libc.bind(u6.fileno(), b, 16))
    for x in (u, u2, u3, u4, u5, u6):
        x.close()


def sc_v6only(m, o):
    s = socket.socket(V6, TCP)
    s.setsockopt(IP6, socket.IPV6_V6ONLY, 1)
    o["v6only"] = s.getsockopt(IP6, socket.IPV6_V6ONLY)
    o["connect_mapped"] = m.attempt(s.connect, (mapped(m.PEER), m.ECHO))
    s.close()
    u = socket.socket(V6, UDP)
    u.setsockopt(IP6, socket.IPV6_V6ONLY, 1)
    o["udp_sendto_mapped"] = m.attempt(u.sendto, b"x", (mapped(m.PEER), m.UDPECHO))
    o["udp_bind_mapped"] = m.attempt(u.bind, (mapped(LOCAL), 0))
    u.close()
    ls = socket.socket(V6, TCP)
    ls.setsockopt(IP6, socket.IPV6_V6ONLY, 1)
    ls.bind(("::", 0))
    ls.listen(4)
    o["listener"] = name6(ls.getsockname())
    c = m.connectback(ls.getsockname()[1])
    o["connectback"] = c.recv(100).decode().strip()     # an IPv4 client cannot reach it
    c.close()
    ls.close()


def sc_names_short(m, o):
    """getpeername/recvfrom into short buffers: truncated copy, full length."""
    s = socket.socket(V6, TCP)
    s.connect((mapped(m.PEER), m.ECHO))
    for cap in (0, 8, 24, 28, 64):
        buf = ctypes.create_string_buffer(max(cap, 1))
        n = ctypes.c_uint32(cap)
        rc = libc.getpeername(s.fileno(), buf, ctypes.byref(n))
        o[f"peer_{cap}"] = [rc, n.value, buf.raw[:min(cap, 28)].hex()]
    s.close()


SCENARIOS = {
    "tcp_connect": sc_tcp_connect,
    "tcp_listen_accept": sc_tcp_listen_accept,
    "tcp_listen_unbound": sc_tcp_listen_unbound,
    "bind_mapped": sc_bind_mapped,
    "udp": sc_udp,
    "udp_bind": sc_udp_bind,
    "v6only": sc_v6only,
    "names_short": sc_names_short,
}
