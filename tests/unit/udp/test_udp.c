/* UDP sockets on the port-less harness: demux priority, checksums (including the RFC 768 "no
 * checksum" zero), length checks, receive-buffer bounds, MSG_PEEK/MSG_TRUNC, ICMP errors, and a
 * fragmented datagram sent and received through ip/. Every test ends with a frame leak check. */
#include "tests/unit/common/harness.h"
#include "udp/udp.h"
#include "wire/checksum.h"

static struct udp_shared *new_udp(void)
{
    struct udp_shared *u = malloc(udp_shared__bytes(64));
    udp_shared__init(u, 64);
    return u;
}

static int bound(struct udp_shared *u, be32 addr, uint16_t port)
{
    int s = udp_sock__alloc(u);
    CHECK(s, >=, 0);
    CHECK(udp_sock__bind(u, (slip_idx_t)s, addr, port), ==, 0);
    return s;
}

/* A datagram from 198.18.0.1:sport to 198.18.0.2:dport, checksum computed here by summing the
 * pseudo-header and bytes (csum_mode 0: correct, 1: zero = none, 2: corrupted). */
static void deliver(struct harness *h, struct udp_shared *u, uint16_t sport, uint16_t dport,
                    const void *pl, size_t plen, int csum_mode, int len_delta)
{
    uint8_t buf[2000];
    struct wire_udp_hdr *uh = (void *)buf;
    uh->sport = hton16(sport);
    uh->dport = hton16(dport);
    uh->len = hton16((uint16_t)(8 + plen + len_delta));
    uh->csum = 0;
    memcpy(buf + 8, pl, plen);
    uint32_t sum = wire_csum_pseudo4(ip4(198, 18, 0, 1), ip4(198, 18, 0, 2), 17, (uint16_t)(8 + plen));
    uh->csum = wire_csum_fold(wire_csum_add(sum, buf, 8 + plen));
    if (csum_mode == 1)
        uh->csum = 0;
    if (csum_mode == 2)
        uh->csum ^= 0x0101;
    struct wire_ipv4_repr ip = { .src = ip4(198, 18, 0, 1), .dst = ip4(198, 18, 0, 2), .proto = 17, .id = 5 };
    struct ip_rx rx;
    if (ip_input(&h->env, h_rx_frame(h, &ip, buf, 8 + plen), H_IFINDEX, &rx))
        udp_input(&h->env, u, &rx);
}

TEST(test_udp_receive_and_peek_trunc)
{
    struct harness h;
    harness_init(&h);
    struct udp_shared *u = new_udp();
    int s = bound(u, 0, 7);
    deliver(&h, u, 5000, 7, "hello world", 11, 0, 0);
    CHECK(u->c.rx_datagrams, ==, 1);
    char out[64];
    be32 from;
    uint16_t fport;
    CHECK(udp_sock__recv(u, &h.pool, (slip_idx_t)s, out, 5, &from, &fport, UDP_RECV_PEEK | UDP_RECV_TRUNC), ==, 11);
    CHECK_MEM(out, "hello", 5);
    CHECK(udp_sock__recv(u, &h.pool, (slip_idx_t)s, out, sizeof(out), &from, &fport, 0), ==, 11);
    CHECK_MEM(out, "hello world", 11);
    CHECK(from, ==, ip4(198, 18, 0, 1));
    CHECK(fport, ==, 5000);
    CHECK(udp_sock__recv(u, &h.pool, (slip_idx_t)s, out, sizeof(out), NULL, NULL, 0), ==, -EAGAIN);
    udp_sock__close(u, &h.pool, (slip_idx_t)s);
    CHECK(u->nused, ==, 0);
    free(u);
    harness_fini(&h);
}

TEST(test_udp_zero_checksum_accepted_bad_checksum_dropped)
{
    struct harness h;
    harness_init(&h);
    struct udp_shared *u = new_udp();
    int s = bound(u, 0, 7);
    deliver(&h, u, 5000, 7, "abc", 3, 1, 0);
    CHECK(u->c.rx_datagrams, ==, 1);
    deliver(&h, u, 5000, 7, "abc", 3, 2, 0);
    CHECK(u->c.rx_bad_csum, ==, 1);
    CHECK(u->socks[s].rcvq.count, ==, 1);
    udp_sock__close(u, &h.pool, (slip_idx_t)s);     /* frees the queued datagram */
    free(u);
    harness_fini(&h);
}

TEST(test_udp_impossible_lengths_dropped)
{
    struct harness h;
    harness_init(&h);
    struct udp_shared *u = new_udp();
    int s = bound(u, 0, 7);
    deliver(&h, u, 5000, 7, "abcdef", 6, 1, +1);    /* length field past the IP payload */
    deliver(&h, u, 5000, 7, "abcdef", 6, 1, -14);   /* length field 0 < 8 */
    CHECK(u->c.rx_bad_len, ==, 2);
    deliver(&h, u, 5000, 7, "abcdef", 6, 1, -2);    /* shorter: trailing bytes trimmed (Linux) */
    char out[16];
    CHECK(udp_sock__recv(u, &h.pool, (slip_idx_t)s, out, sizeof(out), NULL, NULL, 0), ==, 4);
    udp_sock__close(u, &h.pool, (slip_idx_t)s);
    free(u);
    harness_fini(&h);
}

TEST(test_udp_no_socket_counted)
{
    struct harness h;
    harness_init(&h);
    struct udp_shared *u = new_udp();
    deliver(&h, u, 5000, 9, "x", 1, 0, 0);
    CHECK(u->c.rx_no_socket, ==, 1);
    free(u);
    harness_fini(&h);
}

TEST(test_udp_rcvbuf_bounds_queue)
{
    struct harness h;
    harness_init(&h);
    struct udp_shared *u = new_udp();
    int s = bound(u, 0, 7);
    u->socks[s].rcvbuf = 2500;
    static uint8_t pl[1000];
    for (int i = 0; i < 4; i++)
        deliver(&h, u, 5000, 7, pl, sizeof(pl), 0, 0);
    CHECK(u->socks[s].rcvq.count, ==, 2);
    CHECK(u->c.rx_rcvbuf_drop, ==, 2);
    udp_sock__close(u, &h.pool, (slip_idx_t)s);
    free(u);
    harness_fini(&h);
}

TEST(test_udp_lookup_prefers_connected_then_bound_then_wildcard)
{
    struct udp_shared *u = new_udp();
    int any = bound(u, 0, 7);
    int addr = bound(u, ip4(198, 18, 0, 2), 7);
    int conn = udp_sock__alloc(u);
    /* A connected socket shares the port (what SO_REUSEADDR/REUSEPORT allow). */
    u->socks[conn].state = UDPS_OPEN;
    CHECK(udp_sock__bind(u, (slip_idx_t)conn, ip4(198, 18, 0, 2), 8), ==, 0);
    u->socks[conn].lport = 7;   /* re-key by hand: bind refuses an identical unconnected binding */
    udp_sock__close(u, NULL, SLIP_NIL == 0 ? 0 : (slip_idx_t)conn);
    conn = udp_sock__alloc(u);
    CHECK(udp_sock__bind(u, (slip_idx_t)conn, ip4(198, 18, 0, 2), 9), ==, 0);
    CHECK(udp_sock__connect(u, (slip_idx_t)conn, ip4(198, 18, 0, 1), 5000), ==, 0);
    CHECK(udp__lookup(u, ip4(198, 18, 0, 2), 9, ip4(198, 18, 0, 1), 5000), ==, conn);
    CHECK(udp__lookup(u, ip4(198, 18, 0, 2), 9, ip4(198, 18, 0, 1), 5001), ==, SLIP_NIL);
    CHECK(udp__lookup(u, ip4(198, 18, 0, 2), 7, ip4(198, 18, 0, 1), 5000), ==, addr);
    CHECK(udp__lookup(u, ip4(198, 18, 0, 3), 7, ip4(198, 18, 0, 1), 5000), ==, any);
    CHECK(udp__lookup(u, ip4(198, 18, 0, 3), 6, ip4(198, 18, 0, 1), 5000), ==, SLIP_NIL);
    int dup = udp_sock__alloc(u);
    CHECK(udp_sock__bind(u, (slip_idx_t)dup, 0, 7), ==, -EADDRINUSE);
    free(u);
}

TEST(test_udp_icmp_port_unreachable_sets_so_error_on_connected)
{
    struct harness h;
    harness_init(&h);
    struct udp_shared *u = new_udp();
    int s = bound(u, ip4(198, 18, 0, 2), 4000);
    udp_sock__connect(u, (slip_idx_t)s, ip4(198, 18, 0, 1), 53);
    struct ip_icmp_err e = { .type = 3, .code = 3 };
    e.q.ip.src = ip4(198, 18, 0, 2);
    e.q.ip.dst = ip4(198, 18, 0, 1);
    e.q.ip.proto = 17;
    e.q.sport = 4000;
    e.q.dport = 53;
    udp_icmp_error(u, &e);
    char out[4];
    CHECK(udp_sock__recv(u, &h.pool, (slip_idx_t)s, out, sizeof(out), NULL, NULL, 0), ==, -ECONNREFUSED);
    CHECK(udp_sock__recv(u, &h.pool, (slip_idx_t)s, out, sizeof(out), NULL, NULL, 0), ==, -EAGAIN);
    free(u);
    harness_fini(&h);
}

TEST(test_udp_send_checksum_and_fragmented_roundtrip)
{
    struct harness h;
    harness_init(&h);
    struct udp_shared *u = new_udp();
    int tx = bound(u, 0, 1111);
    int rx = bound(u, 0, 2222);
    h_add_neigh(&h, ip4(198, 18, 0, 9), H_MAC, NUD_PERMANENT);
    static uint8_t pl[20001], out[30000];
    for (size_t i = 0; i < sizeof(pl); i++)
        pl[i] = (uint8_t)(i * 13);
    /* Three iovecs with odd lengths, to exercise the checksum's byte-lane carry. */
    struct iovec v[3] = { { pl, 3 }, { pl + 3, 9998 }, { pl + 10001, 10000 } };
    CHECK(udp_sock__send(&h.env, u, (slip_idx_t)tx, v, 3, ip4(198, 18, 0, 9), 2222), ==, 20001);
    CHECK(h.nsent, ==, 14);     /* 20009 bytes of UDP in 1480-byte pieces */
    h_add_addr(&h, ip4(198, 18, 0, 9));
    unsigned n = h.nsent;
    h.nsent = 0;
    for (unsigned i = 0; i < n; i++) {
        struct ip_rx r;
        if (ip_input(&h.env, h_loop(&h, h.sent[i]), H_IFINDEX, &r))
            udp_input(&h.env, u, &r);
    }
    CHECK(u->c.rx_bad_csum, ==, 0);
    be32 from;
    uint16_t fport;
    CHECK(udp_sock__recv(u, &h.pool, (slip_idx_t)rx, out, sizeof(out), &from, &fport, 0), ==, 20001);
    CHECK_MEM(out, pl, sizeof(pl));
    CHECK(fport, ==, 1111);
    CHECK(from, ==, ip4(198, 18, 0, 2));
    /* Errors name themselves. */
    int un = udp_sock__alloc(u);
    CHECK(udp_sock__send(&h.env, u, (slip_idx_t)un, v, 1, ip4(198, 18, 0, 9), 2222), ==, -EINVAL);
    CHECK(udp_sock__send(&h.env, u, (slip_idx_t)tx, v, 1, 0, 0), ==, -EDESTADDRREQ);
    struct iovec big = { out, UDP_MAX_PAYLOAD + 1 };
    CHECK(udp_sock__send(&h.env, u, (slip_idx_t)tx, &big, 1, ip4(198, 18, 0, 9), 2222), ==, -EMSGSIZE);
    free(u);
    harness_fini(&h);
}

TEST_MAIN()
