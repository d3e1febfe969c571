/* UDP over IPv6 on the port-less harness with IPv6 (harness6.h): the IPv6 demux (specific
 * address over ::, connected over bound), the mandatory checksum, dual-stack sockets receiving
 * both families from one queue with the right source each, v6-only sockets receiving no IPv4,
 * link-local sources with their scope, ICMPv6 errors, and sending (checksum, fragments that our
 * own input reassembles, link-local scope). Every test ends with a frame leak check. */
#include "tests/unit/common/harness6.h"
#include "udp/udp.h"
#include "wire/checksum.h"

static struct udp_shared *new_udp(void)
{
    struct udp_shared *u = malloc(udp_shared__bytes(64));
    udp_shared__init(u, 64);
    return u;
}

static slip_idx_t bound6(struct udp_shared *u, const char *addr, uint16_t port, bool dual)
{
    int s = udp_sock__alloc(u);
    CHECK(s, >=, 0);
    struct wire_ipv6_addr a = a6(addr);
    CHECK(udp_sock__bind6(u, (slip_idx_t)s, &a, port, 0, dual), ==, 0);
    return (slip_idx_t)s;
}

/* csum_mode 0: correct, 1: zero, 2: corrupted */
static void deliver6(struct harness *h, struct udp_shared *u, const char *src, const char *dst, uint16_t sport,
                     uint16_t dport, const void *pl, size_t plen, int csum_mode)
{
    uint8_t buf[1400];
    struct wire_udp_hdr *uh = (void *)buf;
    uh->sport = hton16(sport);
    uh->dport = hton16(dport);
    uh->len = hton16((uint16_t)(8 + plen));
    uh->csum = 0;
    memcpy(buf + 8, pl, plen);
    struct wire_ipv6_addr s = a6(src), d = a6(dst);
    uint32_t sum = wire_csum_pseudo6(s.b, d.b, WIRE_IPPROTO_UDP, (uint32_t)(8 + plen));
    uh->csum = wire_csum_fold(wire_csum_add(sum, buf, 8 + plen));
    if (csum_mode == 1)
        uh->csum = 0;
    if (csum_mode == 2)
        uh->csum ^= 0x0101;
    struct ip6_rx rx;
    if (ip6_input(&h->env, rx6(h, src, dst, WIRE_IPPROTO_UDP, NULL, 0, buf, 8 + plen), H_IFINDEX, &rx))
        udp6_input(&h->env, u, &rx);
}

static void deliver4(struct harness *h, struct udp_shared *u, uint16_t sport, uint16_t dport, const char *pl)
{
    uint8_t buf[64];
    size_t plen = strlen(pl);
    struct wire_udp_hdr *uh = (void *)buf;
    uh->sport = hton16(sport);
    uh->dport = hton16(dport);
    uh->len = hton16((uint16_t)(8 + plen));
    uh->csum = 0;
    memcpy(buf + 8, pl, plen);
    struct wire_ipv4_repr ip = { .src = ip4(198, 18, 0, 1), .dst = ip4(198, 18, 0, 2), .proto = 17, .id = 5 };
    struct ip_rx rx;
    if (ip_input(&h->env, h_rx_frame(h, &ip, buf, 8 + plen), H_IFINDEX, &rx))
        udp_input(&h->env, u, &rx);
}

TEST(test_udp6_receive_source_and_checksum)
{
    struct harness h;
    h6_init(&h);
    struct udp_shared *u = new_udp();
    slip_idx_t s = bound6(u, "2001:2::2", 53, false);
    deliver6(&h, u, "2001:2::1", "2001:2::2", 4000, 53, "hello six", 9, 0);
    CHECK(u->c.rx_datagrams, ==, 1);
    char out[64];
    struct udp_peer p;
    CHECK(udp_sock__recv6(u, &h.pool, s, out, 5, &p, UDP_RECV_PEEK | UDP_RECV_TRUNC), ==, 9);
    CHECK(udp_sock__recv6(u, &h.pool, s, out, sizeof(out), &p, 0), ==, 9);
    CHECK_MEM(out, "hello six", 9);
    CHECK(p.v6, ==, true);
    CHECK_ADDR(p.a6, "2001:2::1");
    CHECK(p.port, ==, 4000);
    CHECK(p.scope, ==, 0);
    CHECK(p.has_dst, ==, true);             /* IPV6_PKTINFO's destination and interface */
    CHECK_ADDR(p.dst, "2001:2::2");
    CHECK(p.ifindex, ==, H_IFINDEX);
    /* zero checksum: forbidden over IPv6; corrupted: dropped */
    deliver6(&h, u, "2001:2::1", "2001:2::2", 4000, 53, "x", 1, 1);
    deliver6(&h, u, "2001:2::1", "2001:2::2", 4000, 53, "x", 1, 2);
    CHECK(u->c.rx_bad_csum, ==, 2);
    CHECK(udp_sock__recv6(u, &h.pool, s, out, sizeof(out), &p, 0), ==, -EAGAIN);
    /* no socket on the port */
    deliver6(&h, u, "2001:2::1", "2001:2::2", 4000, 54, "x", 1, 0);
    CHECK(u->c.rx_no_socket, ==, 1);
    /* a link-local source comes with the receiving interface as its scope */
    slip_idx_t l = bound6(u, "::", 99, false);
    deliver6(&h, u, "fe80::1", "fe80::2", 7, 99, "ll", 2, 0);
    CHECK(udp_sock__recv6(u, &h.pool, l, out, sizeof(out), &p, 0), ==, 2);
    CHECK_ADDR(p.a6, "fe80::1");
    CHECK(p.scope, ==, H_IFINDEX);
    udp_sock__close(u, &h.pool, s);
    udp_sock__close(u, &h.pool, l);
    CHECK(u->nused, ==, 0);
    free(u);
    harness_fini(&h);
}

TEST(test_udp6_demux_priority_and_bind_conflicts)
{
    struct harness h;
    h6_init(&h);
    struct udp_shared *u = new_udp();
    slip_idx_t any = bound6(u, "::", 7, false);
    slip_idx_t spec = bound6(u, "2001:2::2", 7, false);
    int c = udp_sock__alloc(u);
    struct wire_ipv6_addr a = a6("2001:2::2"), peer = a6("2001:2::1");
    CHECK(udp_sock__bind6(u, (slip_idx_t)c, &a, 7, 0, false), ==, -EADDRINUSE);
    CHECK(udp_sock__bind6(u, (slip_idx_t)c, &a, 8, 0, false), ==, 0);
    CHECK(udp_sock__bind6(u, (slip_idx_t)c, &a, 9, 0, false), ==, -EINVAL);
    udp_sock__close(u, &h.pool, (slip_idx_t)c);
    CHECK(udp__lookup6(u, &a, 7, &peer, 1000), ==, spec);
    struct wire_ipv6_addr other = a6("fe80::2");
    CHECK(udp__lookup6(u, &other, 7, &peer, 1000), ==, any);
    /* a connected socket wins for its peer only */
    c = udp_sock__alloc(u);
    CHECK(udp_sock__bind6(u, (slip_idx_t)c, &a, 7, 0, false), ==, -EADDRINUSE);
    udp_sock__close(u, &h.pool, (slip_idx_t)c);
    CHECK(udp_sock__connect6(u, spec, &peer, 1000, 0), ==, 0);
    CHECK(udp__lookup6(u, &a, 7, &peer, 1000), ==, spec);
    CHECK(udp__lookup6(u, &a, 7, &peer, 1001), ==, any);
    /* the IPv4 demux knows none of them */
    CHECK(udp__lookup(u, ip4(198, 18, 0, 2), 7, ip4(198, 18, 0, 1), 1000), ==, SLIP_NIL);
    udp_sock__close(u, &h.pool, any);
    udp_sock__close(u, &h.pool, spec);
    CHECK(udp__lookup6(u, &a, 7, &peer, 1000), ==, SLIP_NIL);
    free(u);
    harness_fini(&h);
}

TEST(test_udp6_dual_stack_one_queue_both_families)
{
    struct harness h;
    h6_init(&h);
    struct udp_shared *u = new_udp();
    slip_idx_t d = bound6(u, "::", 5353, true);
    slip_idx_t only = bound6(u, "::", 5354, false);
    deliver4(&h, u, 1111, 5353, "four");
    deliver6(&h, u, "2001:2::1", "2001:2::2", 2222, 5353, "six", 3, 0);
    deliver4(&h, u, 1111, 5354, "lost");    /* v6-only: no IPv4 */
    CHECK(u->c.rx_no_socket, ==, 1);
    char out[16];
    struct udp_peer p;
    CHECK(udp_sock__recv6(u, &h.pool, d, out, sizeof(out), &p, 0), ==, 4);
    CHECK(p.v6, ==, false);
    CHECK(p.has_dst, ==, false);
    CHECK(p.v4, ==, ip4(198, 18, 0, 1));
    CHECK(p.port, ==, 1111);
    CHECK(udp_sock__recv6(u, &h.pool, d, out, sizeof(out), &p, 0), ==, 3);
    CHECK(p.v6, ==, true);
    CHECK_ADDR(p.a6, "2001:2::1");
    CHECK(p.port, ==, 2222);
    /* connected to an IPv6 peer: IPv4 no longer arrives */
    struct wire_ipv6_addr peer = a6("2001:2::1");
    CHECK(udp_sock__connect6(u, d, &peer, 2222, 0), ==, 0);
    deliver4(&h, u, 1111, 5353, "four");
    CHECK(u->c.rx_no_socket, ==, 2);
    deliver6(&h, u, "2001:2::1", "2001:2::2", 2222, 5353, "six", 3, 0);
    CHECK(udp_sock__recv6(u, &h.pool, d, out, sizeof(out), &p, 0), ==, 3);
    udp_sock__close(u, &h.pool, d);
    udp_sock__close(u, &h.pool, only);
    deliver4(&h, u, 1111, 5353, "four");
    CHECK(u->c.rx_no_socket, ==, 3);
    free(u);
    harness_fini(&h);
}

TEST(test_udp6_send_checksum_fragments_scope)
{
    struct harness h;
    h6_init(&h);
    struct udp_shared *u = new_udp();
    slip_idx_t s = bound6(u, "::", 4000, false);
    slip_idx_t r = bound6(u, "2001:2::1", 9, false);   /* stands for the peer, see below */
    u->socks[s].tclass = 0x20;
    u->socks[s].hops = 9;
    struct iovec iov = { "abc", 3 };
    struct wire_ipv6_addr dst = a6("2001:2::1");
    CHECK(udp_sock__send6(&h.env, u, s, &iov, 1, &dst, 53, 0), ==, 3);
    CHECK(h.nsent, ==, 1);
    const uint8_t *f = pkt__data(&h.pool, h.sent[0]);
    struct wire_ipv6_repr ip;
    CHECK(wire_ipv6__parse(f + WIRE_ETH_HLEN, 60, &ip, 0), ==, 0);
    CHECK(ip.tclass, ==, 0x20);
    CHECK(ip.hop_limit, ==, 9);
    CHECK_ADDR(ip.src, "2001:2::2");
    const uint8_t *l4 = f + WIRE_ETH_HLEN + WIRE_IPV6_HLEN;
    uint32_t sum = wire_csum_pseudo6(ip.src.b, ip.dst.b, WIRE_IPPROTO_UDP, 11);
    CHECK(wire_csum_fold(wire_csum_add(sum, l4, 11)), ==, 0);
    CHECK(l4[6] | l4[7], !=, 0);
    h_free_sent(&h);
    CHECK(udp_sock__send6(&h.env, u, s, &iov, 1, NULL, 0, 0), ==, -EDESTADDRREQ);
    /* link-local: the scope is needed */
    struct wire_ipv6_addr ll = a6("fe80::1");
    CHECK(udp_sock__send6(&h.env, u, s, &iov, 1, &ll, 53, 0), ==, -EINVAL);
    CHECK(udp_sock__send6(&h.env, u, s, &iov, 1, &ll, 53, H_IFINDEX), ==, 3);
    CHECK(wire_ipv6__parse(pkt__data(&h.pool, h.sent[0]) + WIRE_ETH_HLEN, 60, &ip, 0), ==, 0);
    CHECK_ADDR(ip.src, "fe80::2");
    h_free_sent(&h);

    /* 3000 bytes: fragments, which our own input reassembles once the peer's address is made
     * ours (the stack never sends to its own addresses: that is the kernel's loopback) */
    static uint8_t big[3000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)(i * 31);
    struct iovec biov = { big, sizeof(big) };
    dst = a6("2001:2::1");
    CHECK(udp_sock__send6(&h.env, u, s, &biov, 1, &dst, 9, 0), ==, 3000);
    CHECK(h.nsent, ==, 3);
    add_addr6(&h, H_IFINDEX, "2001:2::1", 128);
    slip_idx_t fr[3];
    for (int i = 0; i < 3; i++)
        fr[i] = h_loop(&h, h.sent[i]);
    h.nsent = 0;
    struct ip6_rx rx;
    for (int i = 2; i >= 0; i--)
        if (ip6_input(&h.env, fr[i], H_IFINDEX, &rx))
            udp6_input(&h.env, u, &rx);
    static uint8_t got[4000];
    struct udp_peer p;
    CHECK(udp_sock__recv6(u, &h.pool, r, got, sizeof(got), &p, 0), ==, 3000);
    CHECK_MEM(got, big, 3000);
    CHECK_ADDR(p.a6, "2001:2::2");
    CHECK(p.port, ==, 4000);
    udp_sock__close(u, &h.pool, s);
    udp_sock__close(u, &h.pool, r);
    free(u);
    harness_fini(&h);
}

/* Each datagram carries its flow's label (a keyed hash of addresses, ports and protocol, as
 * net.ipv6.auto_flowlabels): the socket keeps the last one for the next datagram to the same
 * place, and a datagram elsewhere gets its own, then the first place its own again. */
TEST(test_udp6_flow_label_per_destination)
{
    struct harness h;
    h6_init(&h);
    h.env.sh->auto_flowlabels = 1;
    add_neigh6(&h, "2001:2::3", NUD_REACHABLE);
    struct udp_shared *u = new_udp();
    slip_idx_t s = bound6(u, "::", 4000, false);
    struct iovec iov = { "abc", 3 };
    struct { const char *dst; uint16_t port; } to[] = {
        { "2001:2::1", 53 }, { "2001:2::1", 53 }, { "2001:2::3", 53 }, { "2001:2::1", 54 }, { "2001:2::1", 53 },
    };
    uint32_t got[5];
    for (unsigned i = 0; i < 5; i++) {
        struct wire_ipv6_addr d = a6(to[i].dst);
        CHECK(udp_sock__send6(&h.env, u, s, &iov, 1, &d, to[i].port, 0), ==, 3);
        CHECK(h.nsent, ==, 1);
        struct wire_ipv6_repr ip;
        CHECK(wire_ipv6__parse(pkt__data(&h.pool, h.sent[0]) + WIRE_ETH_HLEN, 60, &ip, 0), ==, 0);
        got[i] = ip.flow;
        CHECK(got[i], ==, ip6_flow__label(h.env.sh, &ip.src, &d, WIRE_IPPROTO_UDP, hton16(4000),
                                          hton16(to[i].port)));
        CHECK(got[i], !=, 0);
        h_free_sent(&h);
    }
    CHECK(got[0], ==, got[1]);
    CHECK(got[0], ==, got[4]);
    CHECK(got[0], !=, got[2]);
    CHECK(got[0], !=, got[3]);
    udp_sock__close(u, &h.pool, s);
    free(u);
    harness_fini(&h);
}

static slip_idx_t icmp6_unreach(struct harness *h, uint8_t type, uint8_t code, uint16_t sport, uint16_t dport)
{
    uint8_t msg[8 + 40 + 8];
    struct wire_ipv6_repr q = { .src = a6("2001:2::2"), .dst = a6("2001:2::1"), .proto = WIRE_IPPROTO_UDP,
                                .hop_limit = 64, .payload_len = 20 };
    wire_ipv6__emit(&q, msg + 8);
    uint8_t udp[8] = { (uint8_t)(sport >> 8), (uint8_t)sport, (uint8_t)(dport >> 8), (uint8_t)dport, 0, 20, 0, 0 };
    memcpy(msg + 48, udp, 8);
    struct wire_icmpv6_repr r = { .type = type, .code = code, .param = type == WIRE_ICMPV6_PKT_TOO_BIG ? 1280 : 0 };
    struct wire_ipv6_addr s = a6("2001:2::1"), d = a6("2001:2::2");
    wire_icmpv6__emit(&r, &s, &d, msg, sizeof(msg) - 8);
    return rx6(h, "2001:2::1", "2001:2::2", WIRE_IPPROTO_ICMPV6, NULL, 0, msg, sizeof(msg));
}

TEST(test_udp6_icmp_errors_on_connected)
{
    struct harness h;
    h6_init(&h);
    struct udp_shared *u = new_udp();
    slip_idx_t s = bound6(u, "2001:2::2", 4000, false);
    slip_idx_t n = bound6(u, "2001:2::2", 4001, false);
    struct wire_ipv6_addr peer = a6("2001:2::1");
    CHECK(udp_sock__connect6(u, s, &peer, 53, 0), ==, 0);
    struct ip6_rx rx;
    struct ip6_icmp_err e;
    const struct { uint8_t type, code; int err; } cases[] = {
        { WIRE_ICMPV6_DEST_UNREACH, WIRE_ICMPV6_PORT_UNREACH, ECONNREFUSED },
        { WIRE_ICMPV6_DEST_UNREACH, 1, EACCES },
        { WIRE_ICMPV6_DEST_UNREACH, 3, 0 },         /* address unreachable: not reported */
        { WIRE_ICMPV6_TIME_EXCEEDED, 0, 0 },
        { WIRE_ICMPV6_PKT_TOO_BIG, 0, EMSGSIZE },
        { WIRE_ICMPV6_PARAMPROB, 0, EPROTO },
    };
    char out[8];
    struct udp_peer p;
    for (size_t i = 0; i < SLIP_ARRAY_SIZE(cases); i++) {
        CHECK(ip6_input(&h.env, icmp6_unreach(&h, cases[i].type, cases[i].code, 4000, 53), H_IFINDEX, &rx), ==, 1);
        CHECK(ip6_icmp__input(&h.env, &rx, &e), ==, 1);
        pkt__free_chain(&h.pool, rx.pkt);
        udp6_icmp_error(u, &e);
        CHECK(udp_sock__recv6(u, &h.pool, s, out, sizeof(out), &p, 0), ==, cases[i].err ? -cases[i].err : -EAGAIN);
    }
    /* an unconnected socket hears nothing */
    CHECK(ip6_input(&h.env, icmp6_unreach(&h, WIRE_ICMPV6_DEST_UNREACH, WIRE_ICMPV6_PORT_UNREACH, 4001, 53),
                    H_IFINDEX, &rx), ==, 1);
    CHECK(ip6_icmp__input(&h.env, &rx, &e), ==, 1);
    pkt__free_chain(&h.pool, rx.pkt);
    udp6_icmp_error(u, &e);
    CHECK(udp_sock__recv6(u, &h.pool, n, out, sizeof(out), &p, 0), ==, -EAGAIN);
    CHECK(u->c.icmp_errors, ==, SLIP_ARRAY_SIZE(cases) + 1);
    udp_sock__close(u, &h.pool, s);
    udp_sock__close(u, &h.pool, n);
    free(u);
    harness_fini(&h);
}

TEST_MAIN()
