/* IPv6 input (extension headers, scopes, drops), reassembly beside IPv4's, output (header fields,
 * source selection, fragmentation that our own input reassembles), neighbour waiting through the
 * kernel's ND, path MTU and ICMPv6 errors, on the port-less harness (tests/unit/common/harness.h)
 * with IPv6 added: 2001:2::2/64 and fe80::2/64 on ifindex 2, default via fe80::1. */
#include "tests/unit/common/harness6.h"
#include "wire/checksum.h"
#include "wire/icmpv6.h"

static slip_idx_t rx6_frag(struct harness *h, uint32_t id, uint16_t off, bool more, const void *payload, size_t plen)
{
    uint8_t fh[8];
    wire_ipv6__emit_frag(fh, WIRE_IPPROTO_UDP, off, more, id);
    return rx6(h, "2001:2::1", "2001:2::2", WIRE_IPPROTO_FRAGMENT, fh, sizeof(fh), payload, plen);
}

/* The bytes of a delivered chain, flattened. */
static size_t flatten(struct harness *h, slip_idx_t p, uint8_t *out, size_t max)
{
    size_t n = 0;
    for (; p != SLIP_NIL; p = pkt__meta(&h->pool, p)->chain) {
        const struct pkt_meta *m = pkt__meta(&h->pool, p);
        if (n + m->len > max)
            return 0;
        memcpy(out + n, pkt__data(&h->pool, p), m->len);
        n += m->len;
    }
    return n;
}

TEST(test_input6_udp_delivered_and_padding_cut)
{
    struct harness h;
    h6_init(&h);
    uint8_t pl[6] = { 1, 2, 3, 4, 5, 6 };
    struct ip6_rx rx;
    slip_idx_t p = rx6(&h, "2001:2::1", "2001:2::2", WIRE_IPPROTO_UDP, NULL, 0, pl, sizeof(pl));
    pkt__meta(&h.pool, p)->len = 64;    /* link padding past the payload */
    CHECK(ip6_input(&h.env, p, H_IFINDEX, &rx), ==, 1);
    CHECK(rx.ip.proto, ==, WIRE_IPPROTO_UDP);
    CHECK(rx.l4_len, ==, 6);
    CHECK_ADDR(rx.ip.src, "2001:2::1");
    CHECK(pkt__meta(&h.pool, rx.pkt)->len, ==, 6);
    CHECK(pkt__data(&h.pool, rx.pkt)[0], ==, 1);
    CHECK(h.ip->c.rx6_delivered, ==, 1);
    CHECK(h.ip->c.rx_delivered, ==, 0);
    pkt__free_chain(&h.pool, rx.pkt);
    harness_fini(&h);
}

TEST(test_input6_extension_headers_walked)
{
    struct harness h;
    h6_init(&h);
    /* hop-by-hop (8 bytes: PadN) then destination options (8 bytes: PadN), then TCP */
    uint8_t ext[16] = { WIRE_IPPROTO_DSTOPTS, 0, 1, 4, 0, 0, 0, 0, WIRE_IPPROTO_TCP, 0, 1, 4, 0, 0, 0, 0 };
    uint8_t pl[20] = { 0xaa };
    struct ip6_rx rx;
    CHECK(ip6_input(&h.env, rx6(&h, "2001:2::1", "2001:2::2", WIRE_IPPROTO_HOPOPTS, ext, sizeof(ext), pl, sizeof(pl)),
                    H_IFINDEX, &rx), ==, 1);
    CHECK(rx.ip.proto, ==, WIRE_IPPROTO_TCP);
    CHECK(rx.l4_len, ==, 20);
    CHECK(pkt__data(&h.pool, rx.pkt)[0], ==, 0xaa);
    pkt__free_chain(&h.pool, rx.pkt);
    /* an option whose type says "discard" (0x80 high bits 10) refuses the packet */
    ext[10] = 0x80;
    CHECK(ip6_input(&h.env, rx6(&h, "2001:2::1", "2001:2::2", WIRE_IPPROTO_HOPOPTS, ext, sizeof(ext), pl, sizeof(pl)),
                    H_IFINDEX, &rx), ==, 0);
    CHECK(h.ip->c.rx6_bad_ext, ==, 1);
    /* a header length that runs past the packet */
    ext[10] = 1;
    ext[9] = 9;
    CHECK(ip6_input(&h.env, rx6(&h, "2001:2::1", "2001:2::2", WIRE_IPPROTO_HOPOPTS, ext, sizeof(ext), pl, 4),
                    H_IFINDEX, &rx), ==, 0);
    CHECK(h.ip->c.rx6_delivered, ==, 1);
    harness_fini(&h);
}

TEST(test_input6_drops_counted)
{
    struct harness h;
    h6_init(&h);
    uint8_t pl[8] = { 0 };
    struct ip6_rx rx;
    /* not ours, multicast (ND/MLD are the kernel's), multicast source, truncated, bad version */
    CHECK(ip6_input(&h.env, rx6(&h, "2001:2::1", "2001:2::99", 17, NULL, 0, pl, 8), H_IFINDEX, &rx), ==, 0);
    CHECK(ip6_input(&h.env, rx6(&h, "fe80::1", "ff02::1", 58, NULL, 0, pl, 8), H_IFINDEX, &rx), ==, 0);
    CHECK(h.ip->c.rx6_not_local, ==, 2);
    CHECK(ip6_input(&h.env, rx6(&h, "ff02::1", "2001:2::2", 17, NULL, 0, pl, 8), H_IFINDEX, &rx), ==, 0);
    CHECK(h.ip->c.rx6_bad_header, ==, 1);
    slip_idx_t p = rx6(&h, "2001:2::1", "2001:2::2", 17, NULL, 0, pl, 8);
    pkt__meta(&h.pool, p)->len = WIRE_ETH_HLEN + WIRE_IPV6_HLEN + 4;
    CHECK(ip6_input(&h.env, p, H_IFINDEX, &rx), ==, 0);
    CHECK(h.ip->c.rx6_truncated, ==, 1);
    p = rx6(&h, "2001:2::1", "2001:2::2", 17, NULL, 0, pl, 8);
    pkt__data(&h.pool, p)[WIRE_ETH_HLEN] = 0x45;
    CHECK(ip6_input(&h.env, p, H_IFINDEX, &rx), ==, 0);
    CHECK(h.ip->c.rx6_bad_header, ==, 2);
    /* a link-local address of ours is ours only on its own link */
    CHECK(ip6_input(&h.env, rx6(&h, "fe80::1", "fe80::2", 17, NULL, 0, pl, 8), 3, &rx), ==, 0);
    CHECK(h.ip->c.rx6_not_local, ==, 3);
    CHECK(ip6_input(&h.env, rx6(&h, "fe80::1", "fe80::2", 17, NULL, 0, pl, 8), H_IFINDEX, &rx), ==, 1);
    pkt__free_chain(&h.pool, rx.pkt);
    harness_fini(&h);
}

TEST(test_reass6_out_of_order_overlap_timeout)
{
    struct harness h;
    h6_init(&h);
    uint8_t pl[3000];
    for (size_t i = 0; i < sizeof(pl); i++)
        pl[i] = (uint8_t)(i * 7);
    struct ip6_rx rx;
    /* 3 fragments, last first */
    CHECK(ip6_input(&h.env, rx6_frag(&h, 99, 2048, false, pl + 2048, 952), H_IFINDEX, &rx), ==, 0);
    CHECK(ip6_input(&h.env, rx6_frag(&h, 99, 0, true, pl, 1024), H_IFINDEX, &rx), ==, 0);
    CHECK(ip6_input(&h.env, rx6_frag(&h, 99, 1024, true, pl + 1024, 1024), H_IFINDEX, &rx), ==, 1);
    CHECK(rx.ip.proto, ==, WIRE_IPPROTO_UDP);
    CHECK(rx.ip.fragment, ==, false);
    CHECK(rx.l4_len, ==, 3000);
    static uint8_t got[4096];
    CHECK(flatten(&h, rx.pkt, got, sizeof(got)), ==, 3000);
    CHECK_MEM(got, pl, 3000);
    CHECK(h.ip->c.reass6_ok, ==, 1);
    CHECK(h.ip->reass_bufs, ==, 0);
    pkt__free_chain(&h.pool, rx.pkt);

    /* overlapping fragments drop the whole datagram (RFC 5722) */
    CHECK(ip6_input(&h.env, rx6_frag(&h, 100, 0, true, pl, 1024), H_IFINDEX, &rx), ==, 0);
    CHECK(ip6_input(&h.env, rx6_frag(&h, 100, 1016, false, pl, 64), H_IFINDEX, &rx), ==, 0);
    CHECK(h.ip->c.reass_overlap, ==, 1);
    CHECK(h.ip->reass_bufs, ==, 0);
    /* a non-last fragment not a multiple of 8 (the header walk refuses it already) */
    CHECK(ip6_input(&h.env, rx6_frag(&h, 101, 0, true, pl, 1001), H_IFINDEX, &rx), ==, 0);
    CHECK(h.ip->c.rx6_bad_header, ==, 1);
    CHECK(h.ip->reass_bufs, ==, 0);
    /* an incomplete datagram times out after 60 s, not IPv4's 30 */
    CHECK(ip6_input(&h.env, rx6_frag(&h, 102, 0, true, pl, 1024), H_IFINDEX, &rx), ==, 0);
    h.env.now += 31 * SLIP_SEC;
    ip_reass__expire(&h.env);
    CHECK(h.ip->c.reass6_timeout, ==, 0);
    CHECK(h.ip->reass_bufs, ==, 1);
    h.env.now += 30 * SLIP_SEC;
    ip_reass__expire(&h.env);
    CHECK(h.ip->c.reass6_timeout, ==, 1);
    CHECK(h.ip->reass_bufs, ==, 0);
    harness_fini(&h);
}

TEST(test_reass6_first_fragment_with_dest_options)
{
    struct harness h;
    h6_init(&h);
    /* fragmentable part: destination options (8 bytes) then UDP payload; the first fragment
     * carries the options, the second the rest */
    uint8_t first[8 + 16], rest[24];
    uint8_t dopt[8] = { WIRE_IPPROTO_UDP, 0, 1, 4, 0, 0, 0, 0 };
    memcpy(first, dopt, 8);
    for (int i = 0; i < 16; i++)
        first[8 + i] = (uint8_t)i;
    for (int i = 0; i < 24; i++)
        rest[i] = (uint8_t)(16 + i);
    uint8_t fh[8];
    struct ip6_rx rx;
    wire_ipv6__emit_frag(fh, WIRE_IPPROTO_DSTOPTS, 0, true, 7);
    CHECK(ip6_input(&h.env, rx6(&h, "2001:2::1", "2001:2::2", WIRE_IPPROTO_FRAGMENT, fh, 8, first, sizeof(first)),
                    H_IFINDEX, &rx), ==, 0);
    wire_ipv6__emit_frag(fh, WIRE_IPPROTO_DSTOPTS, 24, false, 7);
    CHECK(ip6_input(&h.env, rx6(&h, "2001:2::1", "2001:2::2", WIRE_IPPROTO_FRAGMENT, fh, 8, rest, sizeof(rest)),
                    H_IFINDEX, &rx), ==, 1);
    CHECK(rx.ip.proto, ==, WIRE_IPPROTO_UDP);
    CHECK(rx.l4_len, ==, 40);
    uint8_t got[64];
    CHECK(flatten(&h, rx.pkt, got, sizeof(got)), ==, 40);
    for (int i = 0; i < 40; i++)
        CHECK(got[i], ==, i);
    pkt__free_chain(&h.pool, rx.pkt);
    harness_fini(&h);
}

TEST(test_output6_header_fields_and_source)
{
    struct harness h;
    h6_init(&h);
    struct ip6_route rt;
    struct wire_ipv6_addr dst = a6("2001:2::1");
    CHECK(ip6_output__route(&h.env, &dst, 0, &rt), ==, 0);
    CHECK_ADDR(rt.src, "2001:2::2");
    CHECK_ADDR(rt.nexthop, "2001:2::1");
    CHECK(rt.mtu, ==, 1500);
    uint8_t pl[100];
    memset(pl, 0x5a, sizeof(pl));
    struct iovec iov = { pl, sizeof(pl) };
    struct ip6_tx tx = { .dst = dst, .proto = WIRE_IPPROTO_UDP, .tclass = 0xb8, .flow = 0x12345, .hop_limit = 7 };
    CHECK(ip6_output__send(&h.env, &rt, &tx, &iov, 1), ==, 0);
    CHECK(h.nsent, ==, 1);
    const uint8_t *f = pkt__data(&h.pool, h.sent[0]);
    CHECK_MEM(f, H_PEER_MAC, 6);
    CHECK_MEM(f + 6, H_MAC, 6);
    CHECK(f[12], ==, 0x86);
    CHECK(f[13], ==, 0xdd);
    struct wire_ipv6_repr r;
    CHECK(wire_ipv6__parse(f + WIRE_ETH_HLEN, pkt__meta(&h.pool, h.sent[0])->len - WIRE_ETH_HLEN, &r, 0), ==, 0);
    CHECK(r.tclass, ==, 0xb8);
    CHECK(r.flow, ==, 0x12345);
    CHECK(r.hop_limit, ==, 7);
    CHECK(r.proto, ==, WIRE_IPPROTO_UDP);
    CHECK(r.payload_len, ==, 100);
    CHECK_ADDR(r.src, "2001:2::2");
    CHECK(f[WIRE_ETH_HLEN + WIRE_IPV6_HLEN], ==, 0x5a);
    h_free_sent(&h);

    /* off link: the default router's link-local address is the next hop, hop limit defaults */
    dst = a6("2001:db8:1::1");
    CHECK(ip6_output__route(&h.env, &dst, 0, &rt), ==, 0);
    CHECK_ADDR(rt.nexthop, "fe80::1");
    tx = (struct ip6_tx){ .dst = dst, .proto = WIRE_IPPROTO_UDP };
    CHECK(ip6_output__send(&h.env, &rt, &tx, &iov, 1), ==, 0);
    CHECK(h.nsent, ==, 1);
    CHECK(pkt__data(&h.pool, h.sent[0])[WIRE_ETH_HLEN + 7], ==, IP6_DEFAULT_HOPS);
    h_free_sent(&h);

    /* link-local needs its scope; our own address is not for the wire */
    dst = a6("fe80::1");
    CHECK(ip6_output__route(&h.env, &dst, 0, &rt), ==, -EINVAL);
    CHECK(ip6_output__route(&h.env, &dst, H_IFINDEX, &rt), ==, 0);
    CHECK_ADDR(rt.src, "fe80::2");
    dst = a6("2001:2::2");
    CHECK(ip6_output__route(&h.env, &dst, 0, &rt), ==, -EHOSTUNREACH);
    CHECK(h.ip->c.tx6_no_route, ==, 2);
    harness_fini(&h);
}

TEST(test_output6_fragments_reassemble)
{
    struct harness h;
    h6_init(&h);
    add_addr6(&h, H_IFINDEX, "2001:2::77", 128);   /* a local destination to loop back */
    struct ip6_route rt;
    struct wire_ipv6_addr dst = a6("2001:2::1");
    CHECK(ip6_output__route(&h.env, &dst, 0, &rt), ==, 0);
    static uint8_t pl[4000];
    for (size_t i = 0; i < sizeof(pl); i++)
        pl[i] = (uint8_t)(i * 13 + 1);
    struct iovec iov[2] = { { pl, 1000 }, { pl + 1000, 3000 } };
    struct ip6_tx tx = { .dst = a6("2001:2::77"), .proto = WIRE_IPPROTO_UDP };
    tx.dontfrag = true;
    CHECK(ip6_output__send(&h.env, &rt, &tx, iov, 2), ==, -EMSGSIZE);
    CHECK(h.nsent, ==, 0);
    tx.dontfrag = false;
    CHECK(ip6_output__send(&h.env, &rt, &tx, iov, 2), ==, 0);
    CHECK(h.nsent, ==, 3);
    CHECK(h.ip->c.tx6_frags, ==, 3);
    uint32_t id = 0;
    for (unsigned i = 0; i < h.nsent; i++) {
        const uint8_t *f = pkt__data(&h.pool, h.sent[i]);
        struct wire_ipv6_repr r;
        CHECK(pkt__meta(&h.pool, h.sent[i])->len, <=, 1514);
        CHECK(wire_ipv6__parse(f + WIRE_ETH_HLEN, pkt__meta(&h.pool, h.sent[i])->len - WIRE_ETH_HLEN, &r, 0), ==, 0);
        CHECK(r.fragment, ==, true);
        CHECK(r.frag_offset % 8, ==, 0);
        CHECK(r.more_frags, ==, i + 1 < h.nsent);
        if (i == 0)
            id = r.frag_id;
        CHECK(r.frag_id, ==, id);
    }
    /* fed back in, last fragment first: our own input puts it together */
    struct ip6_rx rx;
    slip_idx_t f[3] = { h_loop(&h, h.sent[0]), h_loop(&h, h.sent[1]), h_loop(&h, h.sent[2]) };
    h.nsent = 0;
    CHECK(ip6_input(&h.env, f[2], H_IFINDEX, &rx), ==, 0);
    CHECK(ip6_input(&h.env, f[0], H_IFINDEX, &rx), ==, 0);
    CHECK(ip6_input(&h.env, f[1], H_IFINDEX, &rx), ==, 1);
    CHECK(rx.l4_len, ==, 4000);
    CHECK(rx.ip.proto, ==, WIRE_IPPROTO_UDP);
    static uint8_t got[4096];
    CHECK(flatten(&h, rx.pkt, got, sizeof(got)), ==, 4000);
    CHECK_MEM(got, pl, 4000);
    pkt__free_chain(&h.pool, rx.pkt);
    /* the next datagram has another id */
    CHECK(ip6_output__send(&h.env, &rt, &tx, iov, 2), ==, 0);
    struct wire_ipv6_repr r;
    CHECK(wire_ipv6__parse(pkt__data(&h.pool, h.sent[0]) + WIRE_ETH_HLEN, 1500, &r, 0), ==, 0);
    CHECK(r.frag_id, !=, id);
    harness_fini(&h);
}

/* First and second fragmented datagram from one stack to one destination: their ids. */
static void frag_ids(uint64_t k0, uint64_t k1, uint32_t out[2])
{
    struct harness h;
    h6_init(&h);
    h.ip->key[0] = k0;
    h.ip->key[1] = k1;
    struct ip6_route rt;
    struct wire_ipv6_addr dst = a6("2001:2::1");
    CHECK(ip6_output__route(&h.env, &dst, 0, &rt), ==, 0);
    static uint8_t pl[3000];
    struct iovec iov = { pl, sizeof(pl) };
    struct ip6_tx tx = { .dst = dst, .proto = WIRE_IPPROTO_UDP };
    for (int i = 0; i < 2; i++) {
        h.nsent = 0;
        CHECK(ip6_output__send(&h.env, &rt, &tx, &iov, 1), ==, 0);
        struct wire_ipv6_repr r;
        CHECK(wire_ipv6__parse(pkt__data(&h.pool, h.sent[0]) + WIRE_ETH_HLEN, 1500, &r, 0), ==, 0);
        CHECK(r.fragment, ==, true);
        out[i] = r.frag_id;
        h_free_sent(&h);
    }
    harness_fini(&h);
}

TEST(test_output6_frag_id_keyed)
{
    /* RFC 7739: another secret, other ids for the same pair (an outsider cannot compute them);
     * one pair's ids follow a counter, so they do not repeat. */
    uint32_t a[2], b[2];
    frag_ids(0x0123456789abcdefull, 0xfedcba9876543210ull, a);
    frag_ids(0x1111111111111111ull, 0x2222222222222222ull, b);
    CHECK(a[0], !=, b[0]);
    CHECK(a[1], ==, a[0] + 1);
    CHECK(b[1], ==, b[0] + 1);
}

TEST(test_output6_neighbour_wait_resolve_fail)
{
    struct harness h;
    h6_init(&h);
    struct ip6_route rt;
    struct wire_ipv6_addr dst = a6("2001:2::5");
    CHECK(ip6_output__route(&h.env, &dst, 0, &rt), ==, 0);
    uint8_t pl[10] = { 0 };
    struct iovec iov = { pl, sizeof(pl) };
    struct ip6_tx tx = { .dst = dst, .proto = WIRE_IPPROTO_UDP };
    CHECK(ip6_output__send(&h.env, &rt, &tx, &iov, 1), ==, 0);
    CHECK(ip6_output__send(&h.env, &rt, &tx, &iov, 1), ==, 0);
    CHECK(h.nsent, ==, 0);
    CHECK(h.ip->neigh6_pending, ==, 1);
    CHECK(h.ip->c.neigh6_wait, ==, 2);
    CHECK(ip6_neigh__service(&h.env), ==, h.env.now + IP_NEIGH_REASK);
    add_neigh6(&h, "2001:2::5", NUD_REACHABLE);
    ip6_neigh__service(&h.env);
    CHECK(h.nsent, ==, 2);
    CHECK_MEM(pkt__data(&h.pool, h.sent[0]), H_PEER_MAC, 6);
    CHECK(h.ip->neigh6_pending, ==, 0);
    h_free_sent(&h);
    /* FAILED: dropped at once; an unanswered one expires */
    h.t->neighs6[h.t->nneighs6 - 1].state = NUD_FAILED;
    CHECK(ip6_output__send(&h.env, &rt, &tx, &iov, 1), ==, 0);
    CHECK(h.ip->c.neigh6_failed, ==, 1);
    dst = tx.dst = a6("2001:2::6");
    CHECK(ip6_output__route(&h.env, &dst, 0, &rt), ==, 0);
    CHECK(ip6_output__send(&h.env, &rt, &tx, &iov, 1), ==, 0);
    h.env.now += IP_NEIGH_TIMEOUT;
    ip6_neigh__service(&h.env);
    CHECK(h.ip->c.neigh6_failed, ==, 2);
    CHECK(h.ip->neigh6_pending, ==, 0);
    CHECK(h.nsent, ==, 0);
    harness_fini(&h);
}

/* An ICMPv6 error from the router fe80::1 quoting a UDP datagram we sent to dst. */
static slip_idx_t icmp6_err(struct harness *h, uint8_t type, uint8_t code, uint32_t param, const char *qsrc,
                            const char *dst)
{
    uint8_t msg[8 + 40 + 8];
    struct wire_ipv6_repr q = { .src = a6(qsrc), .dst = a6(dst), .proto = WIRE_IPPROTO_UDP, .hop_limit = 64,
                                .payload_len = 1400 };
    wire_ipv6__emit(&q, msg + 8);
    uint8_t udp[8] = { 0x30, 0x39, 0x00, 0x35, 0x05, 0x78, 0, 0 };   /* 12345 -> 53 */
    memcpy(msg + 48, udp, 8);
    struct wire_icmpv6_repr r = { .type = type, .code = code, .param = param };
    struct wire_ipv6_addr s = a6("fe80::1"), d = a6("fe80::2");
    wire_icmpv6__emit(&r, &s, &d, msg, sizeof(msg) - 8);
    return rx6(h, "fe80::1", "fe80::2", WIRE_IPPROTO_ICMPV6, NULL, 0, msg, sizeof(msg));
}

TEST(test_icmp6_too_big_sets_pmtu_and_errors)
{
    struct harness h;
    h6_init(&h);
    struct ip6_rx rx;
    struct ip6_icmp_err e;
    CHECK(ip6_input(&h.env, icmp6_err(&h, WIRE_ICMPV6_PKT_TOO_BIG, 0, 1300, "2001:2::2", "2001:db8:9::1"),
                    H_IFINDEX, &rx), ==, 1);
    CHECK(rx.ip.proto, ==, WIRE_IPPROTO_ICMPV6);
    CHECK(ip6_icmp__input(&h.env, &rx, &e), ==, 1);
    pkt__free_chain(&h.pool, rx.pkt);
    CHECK(e.type, ==, WIRE_ICMPV6_PKT_TOO_BIG);
    CHECK(e.mtu, ==, 1300);
    CHECK(e.q.sport, ==, 12345);
    CHECK(e.q.dport, ==, 53);
    struct wire_ipv6_addr dst = a6("2001:db8:9::1");
    CHECK(ip6_pmtu__get(&h.env, &dst), ==, 1300);
    struct ip6_route rt;
    CHECK(ip6_output__route(&h.env, &dst, 0, &rt), ==, 0);
    CHECK(rt.mtu, ==, 1300);
    /* never below 1280, never raised by a message, expires */
    ip6_pmtu__update(&h.env, &dst, 600);
    CHECK(ip6_pmtu__get(&h.env, &dst), ==, 1280);
    ip6_pmtu__update(&h.env, &dst, 1400);
    CHECK(ip6_pmtu__get(&h.env, &dst), ==, 1280);
    h.env.now += IP_PMTU_EXPIRES;
    CHECK(ip6_pmtu__get(&h.env, &dst), ==, 0);

    /* port unreachable: an error for the socket; errno as Linux maps them */
    CHECK(ip6_input(&h.env, icmp6_err(&h, WIRE_ICMPV6_DEST_UNREACH, WIRE_ICMPV6_PORT_UNREACH, 0, "2001:2::2",
                                      "2001:2::1"), H_IFINDEX, &rx), ==, 1);
    CHECK(ip6_icmp__input(&h.env, &rx, &e), ==, 1);
    pkt__free_chain(&h.pool, rx.pkt);
    CHECK(ip6_icmp__errno(e.type, e.code), ==, ECONNREFUSED);
    CHECK(ip6_icmp__errno(WIRE_ICMPV6_DEST_UNREACH, 0), ==, ENETUNREACH);
    CHECK(ip6_icmp__errno(WIRE_ICMPV6_DEST_UNREACH, 3), ==, EHOSTUNREACH);
    CHECK(ip6_icmp__errno(WIRE_ICMPV6_DEST_UNREACH, 1), ==, EACCES);
    CHECK(ip6_icmp__errno(WIRE_ICMPV6_PKT_TOO_BIG, 0), ==, EMSGSIZE);
    CHECK(ip6_icmp__errno(WIRE_ICMPV6_PARAMPROB, 0), ==, EPROTO);
    CHECK(ip6_icmp__errno(WIRE_ICMPV6_TIME_EXCEEDED, 0), ==, EHOSTUNREACH);

    /* quoting a datagram that is not ours, or a corrupted checksum: counted, nothing done */
    CHECK(ip6_input(&h.env, icmp6_err(&h, WIRE_ICMPV6_PKT_TOO_BIG, 0, 1280, "2001:2::99", "2001:db8:8::1"),
                    H_IFINDEX, &rx), ==, 1);
    CHECK(ip6_icmp__input(&h.env, &rx, &e), ==, 0);
    pkt__free_chain(&h.pool, rx.pkt);
    slip_idx_t p = icmp6_err(&h, WIRE_ICMPV6_PKT_TOO_BIG, 0, 1280, "2001:2::2", "2001:db8:8::1");
    pkt__data(&h.pool, p)[WIRE_ETH_HLEN + WIRE_IPV6_HLEN + 7] ^= 1;    /* the MTU */
    CHECK(ip6_input(&h.env, p, H_IFINDEX, &rx), ==, 1);
    CHECK(ip6_icmp__input(&h.env, &rx, &e), ==, 0);
    pkt__free_chain(&h.pool, rx.pkt);
    CHECK(h.ip->c.icmp6_bad, ==, 2);
    dst = a6("2001:db8:8::1");
    CHECK(ip6_pmtu__get(&h.env, &dst), ==, 0);
    harness_fini(&h);
}

TEST_MAIN()
