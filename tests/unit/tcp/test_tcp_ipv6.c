/* TCP over IPv6 on the harness with IPv6 (harness6.h: we are 2001:2::2, the peer 2001:2::1,
 * MTU 1500): segments built and checked with the IPv6 pseudo-header checksum and fed through
 * ip6_input/tcp6_input; passive and active opens, MSS from the IPv6 MTU (1500 - 60), data both
 * ways, SACK blocks, SYN cookies, dual-stack and v6-only listeners beside IPv4 ones, resets for
 * no listener, traffic class and hop limit, ICMPv6 errors (port unreachable in SYN-SENT, packet too big lowers the MSS). Every
 * test ends with a frame leak check. */
#include "tests/unit/common/harness6.h"
#include "tests/unit/tcp/tcp_test.h"

#define P6 "2001:2::1"
#define U6 "2001:2::2"

/* A peer segment from src to dst over IPv6 (t->bad_csum corrupts the checksum). */
static void feed6(struct harness *h, struct tcp_shared *sh, const struct tseg *t, const char *src, const char *dst)
{
    uint8_t buf[2000];
    struct wire_tcp_repr r;
    memset(&r, 0, sizeof(r));
    r.sport = t->sport;
    r.dport = t->dport;
    r.seq = t->seq;
    r.ack = t->ack;
    r.flags = t->flags;
    r.window = t->win;
    r.opts = t->opts;
    size_t hl = wire_tcp__emit(&r, buf);
    if (t->len)
        memcpy(buf + hl, t->data, t->len);
    struct wire_ipv6_addr s = a6(src), d = a6(dst);
    uint32_t sum = wire_csum_pseudo6(s.b, d.b, WIRE_IPPROTO_TCP, (uint32_t)(hl + t->len));
    be16 cs = wire_csum_fold(wire_csum_add(sum, buf, hl + t->len));
    memcpy(buf + 16, &cs, 2);
    if (t->bad_csum)
        buf[16] ^= 0x55;
    struct ip6_rx rx;
    if (ip6_input(&h->env, rx6(h, src, dst, WIRE_IPPROTO_TCP, NULL, 0, buf, hl + t->len), H_IFINDEX, &rx) == 1) {
        CHECK(rx.ip.proto, ==, WIRE_IPPROTO_TCP);
        tcp6_input(&h->env, sh, &rx);
    }
}

/* The n-th captured frame as a TCP segment over IPv6 (false when it is not one, or its
 * checksum over the IPv6 pseudo-header is wrong). */
static bool sent6(struct harness *h, unsigned n, struct tout *o, struct wire_ipv6_repr *ip)
{
    if (n >= h->nsent)
        return false;
    const uint8_t *f = pkt__data(&h->pool, h->sent[n]);
    uint32_t flen = pkt__meta(&h->pool, h->sent[n])->len;
    if (flen < WIRE_ETH_HLEN + WIRE_IPV6_HLEN || f[12] != 0x86 || f[13] != 0xdd)
        return false;
    if (wire_ipv6__parse(f + WIRE_ETH_HLEN, flen - WIRE_ETH_HLEN, ip, 0) < 0 || ip->proto != WIRE_IPPROTO_TCP)
        return false;
    const uint8_t *tcp = f + WIRE_ETH_HLEN + ip->l4_off;
    uint32_t tl = ip->total_len - ip->l4_off;
    if (wire_tcp__parse(tcp, tl, &o->th) < 0)
        return false;
    uint32_t sum = wire_csum_pseudo6(ip->src.b, ip->dst.b, WIRE_IPPROTO_TCP, tl);
    if (wire_csum_fold(wire_csum_add(sum, tcp, tl)) != 0)
        return false;
    o->len = tl - o->th.hdr_len;
    o->data = tcp + o->th.hdr_len;
    return true;
}

static bool last6(struct harness *h, struct tout *o)
{
    struct wire_ipv6_repr ip;
    if (!h->nsent || !sent6(h, h->nsent - 1, o, &ip))
        return false;
    CHECK_ADDR(ip.src, U6);
    CHECK_ADDR(ip.dst, P6);
    return true;
}

static int listen6(struct tcp_shared *sh, const char *addr, bool v6only, uint16_t port)
{
    int l = tcp_conn__open(sh);
    CHECK(l, >=, 0);
    struct wire_ipv6_addr a = a6(addr);
    CHECK(tcp_conn__listen6(sh, (slip_idx_t)l, &a, 0, v6only, port, 16), ==, 0);
    return l;
}

static void fini(struct harness *h, struct tcp_shared *sh)
{
    h_free_sent(h);
    tcp_shared__purge(sh, &h->pool);
    free(sh);
    harness_fini(h);
}

/* SYN from the peer's port sport to port, then the ACK of our SYN-ACK: the established child. */
static slip_idx_t handshake6(struct harness *h, struct tcp_shared *sh, uint16_t sport, uint16_t port, uint32_t *iss)
{
    struct tseg syn = { .sport = sport, .dport = port, .seq = 1000, .flags = WIRE_TCP_SYN, .win = 65535,
                        .opts = t_synopts(1440, 7, true, false, 0) };
    feed6(h, sh, &syn, P6, U6);
    struct tout o;
    CHECK(last6(h, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_SYN | WIRE_TCP_ACK);
    CHECK(o.th.ack, ==, 1001);
    *iss = o.th.seq;
    struct tseg ack = { .sport = sport, .dport = port, .seq = 1001, .ack = o.th.seq + 1, .flags = WIRE_TCP_ACK,
                        .win = 65535 };
    feed6(h, sh, &ack, P6, U6);
    struct wire_ipv6_addr u = a6(U6), p = a6(P6);
    slip_idx_t c = tcp__lookup6(sh, &u, port, &p, sport);
    CHECK(c, !=, SLIP_NIL);
    CHECK(tcp_conn__get(sh, c)->state, ==, TCPS_ESTABLISHED);
    CHECK(tcp_conn__accept(sh, tcp_conn__get(sh, c)->parent), ==, (int)c);
    return c;
}

TEST(test_tcp6_passive_open_data_sack)
{
    struct harness h;
    h6_init(&h);
    struct tcp_shared *sh = t_new_shared(16);
    int l = listen6(sh, "::", false, 80);
    struct tseg syn = { .sport = 5555, .dport = 80, .seq = 1000, .flags = WIRE_TCP_SYN, .win = 65535,
                        .opts = t_synopts(1440, 7, true, true, 777) };
    feed6(&h, sh, &syn, P6, U6);
    struct tout o;
    CHECK(last6(&h, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_SYN | WIRE_TCP_ACK);
    CHECK(o.th.opts.mss, ==, 1440);         /* IPv6 MTU 1500 - 60 */
    CHECK(o.th.opts.sack_ok, ==, true);
    CHECK(o.th.opts.tsecr, ==, 777);
    uint32_t iss = o.th.seq;
    struct wire_ipv6_addr u = a6(U6), p = a6(P6);
    slip_idx_t child = tcp__lookup6(sh, &u, 80, &p, 5555);
    CHECK(child, !=, (slip_idx_t)l);
    struct tcp_conn *c = tcp_conn__get(sh, child);
    CHECK(c->flags & TCPF_V6, ==, TCPF_V6);
    CHECK(c->mss, ==, 1440);
    CHECK_ADDR(c->raddr6, P6);
    CHECK_ADDR(c->laddr6, U6);
    /* The IPv4 demux does not see it (only the dual-stack listener, for a segment with these
     * folds as IPv4 addresses). */
    CHECK(tcp__lookup(sh, c->laddr, 80, c->raddr, 5555), ==, (slip_idx_t)l);
    struct tseg ack = { .sport = 5555, .dport = 80, .seq = 1001, .ack = iss + 1, .flags = WIRE_TCP_ACK,
                        .win = 65535, .opts = { .has_ts = true, .tsval = 778, .tsecr = o.th.opts.tsval } };
    feed6(&h, sh, &ack, P6, U6);
    CHECK(c->state, ==, TCPS_ESTABLISHED);
    CHECK(tcp_conn__accept(sh, (slip_idx_t)l), ==, (int)child);

    /* Data in, data out. */
    struct tseg data = ack;
    data.data = "hello";
    data.len = 5;
    data.flags = WIRE_TCP_ACK | WIRE_TCP_PSH;
    feed6(&h, sh, &data, P6, U6);
    char buf[64];
    CHECK(tcp_conn__recv(&h.env, sh, child, buf, sizeof(buf), 0), ==, 5);
    CHECK_MEM(buf, "hello", 5);
    h_free_sent(&h);
    struct iovec v = { "world!", 6 };
    CHECK(tcp_conn__send(&h.env, sh, child, &v, 1, 0), ==, 6);
    CHECK(last6(&h, &o), ==, true);
    CHECK(o.len, ==, 6);
    CHECK_MEM(o.data, "world!", 6);
    CHECK(o.th.seq, ==, iss + 1);

    /* Out of order: the duplicate ACK carries a SACK block (RFC 2018) over IPv6. */
    h_free_sent(&h);
    struct tseg ooo = data;
    ooo.seq = 1006 + 100;
    ooo.data = "0123456789";
    ooo.len = 10;
    ooo.ack = iss + 7;
    feed6(&h, sh, &ooo, P6, U6);
    CHECK(last6(&h, &o), ==, true);
    CHECK(o.th.ack, ==, 1006);
    CHECK(o.th.opts.nsack, ==, 1);
    CHECK(o.th.opts.sack[0].left, ==, 1106);
    CHECK(o.th.opts.sack[0].right, ==, 1116);

    tcp_conn__abort(&h.env, sh, child);
    tcp_conn__close(&h.env, sh, (slip_idx_t)l);
    fini(&h, sh);
}

TEST(test_tcp6_tclass_and_hop_limit)
{
    struct harness h;
    h6_init(&h);
    struct tcp_shared *sh = t_new_shared(16);
    int l = listen6(sh, "::", false, 80);
    CHECK(tcp_conn__setopt(&h.env, sh, (slip_idx_t)l, TCPO_TCLASS, 0x28), ==, 0);
    CHECK(tcp_conn__setopt(&h.env, sh, (slip_idx_t)l, TCPO_HOPS, 7), ==, 0);
    int v;
    CHECK(tcp_conn__getopt(sh, (slip_idx_t)l, TCPO_TCLASS, &v), ==, 0);
    CHECK(v, ==, 0x28);
    /* The child's SYN-ACK and later segments carry the listener's values (Linux copies them). */
    uint32_t iss;
    slip_idx_t c = handshake6(&h, sh, 5555, 80, &iss);
    struct tout o;
    struct wire_ipv6_repr ip;
    CHECK(sent6(&h, 0, &o, &ip), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_SYN | WIRE_TCP_ACK);
    CHECK(ip.tclass, ==, 0x28);
    CHECK(ip.hop_limit, ==, 7);
    CHECK(tcp_conn__setopt(&h.env, sh, c, TCPO_HOPS, 0), ==, 0);    /* back to the default */
    h_free_sent(&h);
    struct iovec iov = { "x", 1 };
    CHECK(tcp_conn__send(&h.env, sh, c, &iov, 1, 0), ==, 1);
    CHECK(sent6(&h, 0, &o, &ip), ==, true);
    CHECK(ip.tclass, ==, 0x28);
    CHECK(ip.hop_limit, ==, 64);
    tcp_conn__abort(&h.env, sh, c);
    tcp_conn__close(&h.env, sh, (slip_idx_t)l);
    fini(&h, sh);
}

TEST(test_tcp6_reuseport_group)
{
    struct harness h;
    h6_init(&h);
    struct tcp_shared *sh = t_new_shared(128);
    struct wire_ipv6_addr u = a6(U6), p = a6(P6);
    int l[2];
    for (int k = 0; k < 2; k++) {
        l[k] = tcp_conn__open(sh);
        CHECK(tcp_conn__setopt(&h.env, sh, (slip_idx_t)l[k], TCPO_REUSEPORT, 1), ==, 0);
        CHECK(tcp_conn__listen6(sh, (slip_idx_t)l[k], &u, 0, true, 80, 64), ==, 0);
    }
    /* Without SO_REUSEPORT the same address and port is taken. */
    int l3 = tcp_conn__open(sh);
    CHECK(tcp_conn__listen6(sh, (slip_idx_t)l3, &u, 0, true, 80, 64), ==, -EADDRINUSE);
    tcp_conn__close(&h.env, sh, (slip_idx_t)l3);
    unsigned got[2] = { 0, 0 };
    for (uint16_t port = 20000; port < 20040; port++) {
        feed6(&h, sh, &(struct tseg){ .sport = port, .dport = 80, .seq = 1, .flags = WIRE_TCP_SYN, .win = 1000 }, P6, U6);
        slip_idx_t c = tcp__lookup6(sh, &u, 80, &p, port);
        CHECK(c, !=, SLIP_NIL);
        slip_idx_t parent = tcp_conn__get(sh, c)->parent;
        CHECK(parent == (slip_idx_t)l[0] || parent == (slip_idx_t)l[1], ==, true);
        got[parent == (slip_idx_t)l[1]]++;
        /* The same 4-tuple lands on the same member again. */
        CHECK(tcp__lookup_listener6(sh, tcp6__fold(sh, &u), &u, 80, tcp6__fold(sh, &p), port), ==, parent);
    }
    CHECK(got[0], >, 5);
    CHECK(got[1], >, 5);
    tcp_conn__close(&h.env, sh, (slip_idx_t)l[0]);
    tcp_conn__close(&h.env, sh, (slip_idx_t)l[1]);
    fini(&h, sh);
}

TEST(test_tcp6_listeners_by_family)
{
    struct harness h;
    h6_init(&h);
    struct tcp_shared *sh = t_new_shared(16);
    int dual = listen6(sh, "::", false, 80);
    int only6 = listen6(sh, "::", true, 81);
    int l4 = tcp_conn__open(sh);
    CHECK(tcp_conn__listen(sh, (slip_idx_t)l4, 0, 82, 16), ==, 0);
    /* A v6-only listener and an IPv4 one may share a port (Linux allows it); a dual-stack one
     * and an IPv4 wildcard may not. */
    int l4b = tcp_conn__open(sh);
    CHECK(tcp_conn__listen(sh, (slip_idx_t)l4b, 0, 81, 16), ==, 0);
    int l4c = tcp_conn__open(sh);
    CHECK(tcp_conn__listen(sh, (slip_idx_t)l4c, 0, 80, 16), ==, -EADDRINUSE);
    tcp_conn__close(&h.env, sh, (slip_idx_t)l4c);

    /* IPv4 SYN to the dual-stack listener: an IPv4 child. */
    struct tseg syn4 = { .sport = 5555, .dport = 80, .seq = 1, .flags = WIRE_TCP_SYN, .win = 1000 };
    t_feed(&h, sh, &syn4);
    struct tout o;
    CHECK(t_last(&h, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_SYN | WIRE_TCP_ACK);
    CHECK(o.th.opts.mss, ==, 1460);
    slip_idx_t c4 = tcp__lookup(sh, US, 80, PEER, 5555);
    CHECK(c4, !=, (slip_idx_t)dual);
    CHECK(tcp_conn__get(sh, c4)->flags & TCPF_V6, ==, 0);
    CHECK(tcp_conn__get(sh, c4)->parent, ==, (slip_idx_t)dual);

    /* IPv4 SYN to port 81: the IPv4 listener there, not the v6-only one. */
    t_feed(&h, sh, &(struct tseg){ .sport = 5556, .dport = 81, .seq = 1, .flags = WIRE_TCP_SYN, .win = 1000 });
    slip_idx_t c4b = tcp__lookup(sh, US, 81, PEER, 5556);
    CHECK(tcp_conn__get(sh, c4b)->parent, ==, (slip_idx_t)l4b);
    /* IPv6 SYN to port 81: the v6-only listener. */
    feed6(&h, sh, &(struct tseg){ .sport = 5557, .dport = 81, .seq = 1, .flags = WIRE_TCP_SYN, .win = 1000 }, P6, U6);
    CHECK(last6(&h, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_SYN | WIRE_TCP_ACK);
    struct wire_ipv6_addr u = a6(U6), p = a6(P6);
    CHECK(tcp_conn__get(sh, tcp__lookup6(sh, &u, 81, &p, 5557))->parent, ==, (slip_idx_t)only6);

    /* IPv6 SYN to port 82 (an IPv4 listener only): reset over IPv6 (RFC 9293 §3.10.7.1). */
    uint64_t no_conn = sh->c.no_conn;
    feed6(&h, sh, &(struct tseg){ .sport = 5558, .dport = 82, .seq = 41, .flags = WIRE_TCP_SYN, .win = 1000 }, P6, U6);
    CHECK(last6(&h, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_RST | WIRE_TCP_ACK);
    CHECK(o.th.ack, ==, 42);
    CHECK(sh->c.no_conn, ==, no_conn + 1);

    /* A bad checksum is dropped and counted. */
    h_free_sent(&h);
    feed6(&h, sh, &(struct tseg){ .sport = 5559, .dport = 80, .seq = 1, .flags = WIRE_TCP_SYN, .win = 1000,
                                  .bad_csum = true }, P6, U6);
    CHECK(sh->c.bad_csum, ==, 1);
    CHECK(h.nsent, ==, 0);
    fini(&h, sh);
}

TEST(test_tcp6_active_open_mss_and_source)
{
    struct harness h;
    h6_init(&h);
    struct tcp_shared *sh = t_new_shared(16);
    int c = tcp_conn__open(sh);
    struct wire_ipv6_addr p = a6(P6), any = a6("::");
    CHECK(tcp_conn__connect6(&h.env, sh, (slip_idx_t)c, &any, 40000, &p, 80, 0), ==, -EINPROGRESS);
    struct tout o;
    CHECK(last6(&h, &o), ==, true);         /* source 2001:2::2 chosen by the route */
    CHECK(o.th.flags, ==, WIRE_TCP_SYN);
    CHECK(o.th.opts.mss, ==, 1440);
    CHECK(o.th.opts.sack_ok, ==, true);
    CHECK(o.th.sport, ==, 40000);
    struct tcp_conn *tc = tcp_conn__get(sh, (slip_idx_t)c);
    CHECK_ADDR(tc->laddr6, U6);
    feed6(&h, sh, &(struct tseg){ .sport = 80, .dport = 40000, .seq = 5000, .ack = o.th.seq + 1,
                                  .flags = WIRE_TCP_SYN | WIRE_TCP_ACK, .win = 65535,
                                  .opts = t_synopts(1220, 7, true, false, 0) }, P6, U6);
    CHECK(tc->state, ==, TCPS_ESTABLISHED);
    CHECK(tc->mss, ==, 1220);
    CHECK(last6(&h, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_ACK);
    CHECK(o.th.ack, ==, 5001);
    /* The same 4-tuple again is taken. */
    int c2 = tcp_conn__open(sh);
    CHECK(tcp_conn__connect6(&h.env, sh, (slip_idx_t)c2, &any, 40000, &p, 80, 0), ==, -EADDRINUSE);
    tcp_conn__abort(&h.env, sh, (slip_idx_t)c2);
    tcp_conn__abort(&h.env, sh, (slip_idx_t)c);
    fini(&h, sh);
}

TEST(test_tcp6_syncookies)
{
    struct harness h;
    h6_init(&h);
    struct tcp_shared *sh = t_new_shared(16);
    sh->syncookies = 2;
    int l = listen6(sh, U6, false, 443);
    feed6(&h, sh, &(struct tseg){ .sport = 6000, .dport = 443, .seq = 9000, .flags = WIRE_TCP_SYN, .win = 65535,
                                  .opts = t_synopts(1440, 7, true, true, 100) }, P6, U6);
    struct tout o;
    CHECK(last6(&h, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_SYN | WIRE_TCP_ACK);
    CHECK(sh->c.syncookies_sent, ==, 1);
    CHECK(sh->nused, ==, 1);                /* no state kept */
    feed6(&h, sh, &(struct tseg){ .sport = 6000, .dport = 443, .seq = 9001, .ack = o.th.seq + 1,
                                  .flags = WIRE_TCP_ACK, .win = 65535,
                                  .opts = { .has_ts = true, .tsval = 101, .tsecr = o.th.opts.tsval } }, P6, U6);
    CHECK(sh->c.syncookies_ok, ==, 1);
    struct wire_ipv6_addr u = a6(U6), p = a6(P6);
    slip_idx_t c = tcp__lookup6(sh, &u, 443, &p, 6000);
    CHECK(c, !=, (slip_idx_t)l);
    CHECK(tcp_conn__get(sh, c)->state, ==, TCPS_ESTABLISHED);
    CHECK(tcp_conn__get(sh, c)->flags & (TCPF_V6 | TCPF_SACK_OK | TCPF_SYNCOOKIE), ==,
          TCPF_V6 | TCPF_SACK_OK | TCPF_SYNCOOKIE);
    CHECK(tcp_conn__get(sh, c)->mss, ==, 1440);  /* the cookie's MSS table has 1440 */
    CHECK(tcp_conn__accept(sh, (slip_idx_t)l), ==, (int)c);
    /* A forged cookie ACK from elsewhere is refused with a reset. */
    feed6(&h, sh, &(struct tseg){ .sport = 6001, .dport = 443, .seq = 9001, .ack = o.th.seq + 1,
                                  .flags = WIRE_TCP_ACK, .win = 65535 }, P6, U6);
    CHECK(sh->c.syncookies_failed, ==, 1);
    CHECK(last6(&h, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_RST);
    tcp_conn__abort(&h.env, sh, c);
    tcp_conn__close(&h.env, sh, (slip_idx_t)l);
    fini(&h, sh);
}

/* An ICMPv6 error from the peer's router quoting a segment we sent from sport to dport. */
static slip_idx_t icmp6_tcp(struct harness *h, uint8_t type, uint8_t code, uint32_t param, uint16_t sport,
                            uint16_t dport, uint32_t seq)
{
    uint8_t msg[8 + 40 + 8];
    struct wire_ipv6_repr q = { .src = a6(U6), .dst = a6(P6), .proto = WIRE_IPPROTO_TCP, .hop_limit = 64,
                                .payload_len = 1460 };
    wire_ipv6__emit(&q, msg + 8);
    uint8_t tcp[8] = { (uint8_t)(sport >> 8), (uint8_t)sport, (uint8_t)(dport >> 8), (uint8_t)dport,
                       (uint8_t)(seq >> 24), (uint8_t)(seq >> 16), (uint8_t)(seq >> 8), (uint8_t)seq };
    memcpy(msg + 48, tcp, 8);
    struct wire_icmpv6_repr r = { .type = type, .code = code, .param = param };
    struct wire_ipv6_addr s = a6("fe80::1"), d = a6("fe80::2");
    wire_icmpv6__emit(&r, &s, &d, msg, sizeof(msg) - 8);
    return rx6(h, "fe80::1", "fe80::2", WIRE_IPPROTO_ICMPV6, NULL, 0, msg, sizeof(msg));
}

static void deliver_icmp6(struct harness *h, struct tcp_shared *sh, slip_idx_t frame)
{
    struct ip6_rx rx;
    struct ip6_icmp_err e;
    CHECK(ip6_input(&h->env, frame, H_IFINDEX, &rx), ==, 1);
    CHECK(ip6_icmp__input(&h->env, &rx, &e), ==, 1);
    tcp6_icmp_error(&h->env, sh, &e);
    pkt__free_chain(&h->pool, rx.pkt);
}

TEST(test_tcp6_icmpv6_errors)
{
    struct harness h;
    h6_init(&h);
    struct tcp_shared *sh = t_new_shared(16);
    /* Port unreachable for our SYN: connect fails with ECONNREFUSED (a wrong sequence number is
     * ignored first, RFC 5927). */
    int c = tcp_conn__open(sh);
    struct wire_ipv6_addr p = a6(P6);
    CHECK(tcp_conn__connect6(&h.env, sh, (slip_idx_t)c, NULL, 40001, &p, 9, 0), ==, -EINPROGRESS);
    struct tout o;
    CHECK(last6(&h, &o), ==, true);
    deliver_icmp6(&h, sh, icmp6_tcp(&h, WIRE_ICMPV6_DEST_UNREACH, WIRE_ICMPV6_PORT_UNREACH, 0, 40001, 9,
                                    o.th.seq + 12345));
    CHECK(tcp_conn__get(sh, (slip_idx_t)c)->state, ==, TCPS_SYN_SENT);
    deliver_icmp6(&h, sh, icmp6_tcp(&h, WIRE_ICMPV6_DEST_UNREACH, WIRE_ICMPV6_PORT_UNREACH, 0, 40001, 9, o.th.seq));
    CHECK(tcp_conn__get(sh, (slip_idx_t)c)->state, ==, TCPS_CLOSED);
    CHECK(tcp_conn__so_error(sh, (slip_idx_t)c), ==, ECONNREFUSED);
    tcp_conn__abort(&h.env, sh, (slip_idx_t)c);

    /* Packet too big on an established connection: MSS 1280 - 60, resent in smaller pieces. */
    int l = listen6(sh, "::", false, 80);
    uint32_t iss;
    slip_idx_t ch = handshake6(&h, sh, 5555, 80, &iss);
    CHECK(tcp_conn__get(sh, ch)->mss, ==, 1440);
    static char big[3000];
    struct iovec v = { big, sizeof(big) };
    h_free_sent(&h);
    CHECK(tcp_conn__send(&h.env, sh, ch, &v, 1, 0), ==, (ssize_t)sizeof(big));
    CHECK(last6(&h, &o), ==, true);
    unsigned before = h.nsent;
    deliver_icmp6(&h, sh, icmp6_tcp(&h, WIRE_ICMPV6_PKT_TOO_BIG, 0, 1280, 80, 5555, iss + 1));
    CHECK(tcp_conn__get(sh, ch)->mss, ==, 1220);
    CHECK(sh->c.pmtu_reductions, ==, 1);
    CHECK(h.nsent, >, before);
    struct wire_ipv6_repr ip;
    CHECK(sent6(&h, before, &o, &ip), ==, true);
    CHECK(o.th.seq, ==, iss + 1);
    CHECK(o.len, <=, 1220);
    CHECK(ip.total_len, <=, 1280);
    tcp_conn__abort(&h.env, sh, ch);
    tcp_conn__close(&h.env, sh, (slip_idx_t)l);
    fini(&h, sh);
}

/* tcp6_input keeps the last folds in a small direct-mapped cache (sh->fold6): with more peers
 * than slots, evictions and returns, every connection still has the fold of its own addresses
 * and every cached entry is the fold of the address it holds. */
TEST(test_tcp6_fold_cache_many_peers)
{
    struct harness h;
    h6_init(&h);
    struct tcp_shared *sh = t_new_shared(256);
    int l = tcp_conn__open(sh);
    struct wire_ipv6_addr any = { 0 };
    CHECK(tcp_conn__listen6(sh, (slip_idx_t)l, &any, 0, false, 80, 128), ==, 0);
    struct wire_ipv6_addr u = a6(U6);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 3 * TCP_FOLD6_SLOTS; i++) {
            char src[64];
            snprintf(src, sizeof(src), "2001:2::%x:%x", 0x100 + i, round);
            struct tseg syn = { .sport = 5555, .dport = 80, .seq = 1000, .flags = WIRE_TCP_SYN, .win = 65535,
                                .opts = t_synopts(1440, 7, true, false, 0) };
            feed6(&h, sh, &syn, src, U6);
            h_free_sent(&h);
            struct wire_ipv6_addr p = a6(src);
            slip_idx_t c = tcp__lookup6(sh, &u, 80, &p, 5555);
            CHECK(c, !=, SLIP_NIL);
            if (c == SLIP_NIL)
                continue;
            CHECK(tcp_conn__get(sh, c)->raddr, ==, tcp6__fold(sh, &p));
            CHECK(tcp_conn__get(sh, c)->laddr, ==, tcp6__fold(sh, &u));
        }
    }
    for (unsigned k = 0; k < TCP_FOLD6_SLOTS; k++)
        CHECK(sh->fold6[k].fold, ==, tcp6__fold(sh, &sh->fold6[k].a));
    tcp_conn__close(&h.env, sh, (slip_idx_t)l);
    fini(&h, sh);
}

TEST_MAIN()
