/* IPv4 input, reassembly, output, neighbour waiting and path MTU, on a port-less harness
 * (tests/unit/common/harness.h). Frames are built with the wire builders, which have their own
 * vector tests; checksums of what ip/ emits are re-verified here by summing the bytes. */
#include "tests/unit/common/harness.h"
#include "wire/checksum.h"
#include "wire/icmp.h"

static struct wire_ipv4_repr udp_to_us(void)
{
    struct wire_ipv4_repr ip = {
        .src = ip4(198, 18, 0, 1), .dst = ip4(198, 18, 0, 2), .proto = WIRE_IPPROTO_UDP, .id = 77,
    };
    return ip;
}

TEST(test_input_udp_delivered)
{
    struct harness h;
    harness_init(&h);
    struct wire_ipv4_repr ip = udp_to_us();
    uint8_t pl[100];
    memset(pl, 0xab, sizeof(pl));
    struct ip_rx rx;
    slip_idx_t p = h_rx_frame(&h, &ip, pl, sizeof(pl));
    CHECK(ip_input(&h.env, p, H_IFINDEX, &rx), ==, 1);
    CHECK(rx.l4_len, ==, 100);
    CHECK(rx.ip.src, ==, ip4(198, 18, 0, 1));
    CHECK(pkt__meta(&h.pool, rx.pkt)->len, ==, 100);
    CHECK(pkt__data(&h.pool, rx.pkt)[0], ==, 0xab);
    CHECK(h.ip->c.rx_delivered, ==, 1);
    pkt__free_chain(&h.pool, rx.pkt);
    harness_fini(&h);
}

TEST(test_input_trailing_padding_trimmed)
{
    struct harness h;
    harness_init(&h);
    struct wire_ipv4_repr ip = udp_to_us();
    uint8_t pl[4] = { 1, 2, 3, 4 };
    struct ip_rx rx;
    slip_idx_t p = h_rx_frame(&h, &ip, pl, sizeof(pl));
    pkt__meta(&h.pool, p)->len = 60;    /* Ethernet minimum: 22 bytes of link padding */
    CHECK(ip_input(&h.env, p, H_IFINDEX, &rx), ==, 1);
    CHECK(rx.l4_len, ==, 4);
    pkt__free_chain(&h.pool, rx.pkt);
    harness_fini(&h);
}

TEST(test_input_bad_csum_counted)
{
    struct harness h;
    harness_init(&h);
    struct wire_ipv4_repr ip = udp_to_us();
    uint8_t pl[8] = { 0 };
    struct ip_rx rx;
    slip_idx_t p = h_rx_frame(&h, &ip, pl, sizeof(pl));
    pkt__data(&h.pool, p)[WIRE_ETH_HLEN + 10] ^= 0x40;  /* checksum field */
    CHECK(ip_input(&h.env, p, H_IFINDEX, &rx), ==, 0);
    CHECK(h.ip->c.rx_bad_csum, ==, 1);
    harness_fini(&h);
}

TEST(test_input_truncated_counted)
{
    struct harness h;
    harness_init(&h);
    struct wire_ipv4_repr ip = udp_to_us();
    uint8_t pl[200] = { 0 };
    struct ip_rx rx;
    slip_idx_t p = h_rx_frame(&h, &ip, pl, sizeof(pl));
    pkt__meta(&h.pool, p)->len = WIRE_ETH_HLEN + 40;    /* total_len says 220 */
    CHECK(ip_input(&h.env, p, H_IFINDEX, &rx), ==, 0);
    CHECK(h.ip->c.rx_truncated, ==, 1);
    p = h_rx_frame(&h, &ip, pl, sizeof(pl));
    pkt__meta(&h.pool, p)->len = 10;                    /* not even Ethernet */
    CHECK(ip_input(&h.env, p, H_IFINDEX, &rx), ==, 0);
    CHECK(h.ip->c.rx_bad_eth, ==, 1);
    harness_fini(&h);
}

TEST(test_input_not_local_counted)
{
    struct harness h;
    harness_init(&h);
    struct wire_ipv4_repr ip = udp_to_us();
    ip.dst = ip4(198, 18, 0, 99);
    uint8_t pl[8] = { 0 };
    struct ip_rx rx;
    CHECK(ip_input(&h.env, h_rx_frame(&h, &ip, pl, sizeof(pl)), H_IFINDEX, &rx), ==, 0);
    CHECK(h.ip->c.rx_not_local, ==, 1);
    harness_fini(&h);
}

TEST(test_input_arp_not_ipv4)
{
    struct harness h;
    harness_init(&h);
    struct wire_ipv4_repr ip = udp_to_us();
    uint8_t pl[8] = { 0 };
    struct ip_rx rx;
    slip_idx_t p = h_rx_frame(&h, &ip, pl, sizeof(pl));
    pkt__data(&h.pool, p)[12] = 0x08;
    pkt__data(&h.pool, p)[13] = 0x06;
    CHECK(ip_input(&h.env, p, H_IFINDEX, &rx), ==, 0);
    CHECK(h.ip->c.rx_not_ipv4, ==, 1);
    harness_fini(&h);
}

/* A 24-byte header with a loose source route option (type 131, length 3) and one EOL. */
TEST(test_input_source_route_dropped)
{
    struct harness h;
    harness_init(&h);
    slip_idx_t p = pkt__alloc(&h.pool);
    uint8_t *d = pkt__data(&h.pool, p);
    struct wire_eth_repr eth = { .type = WIRE_ETHERTYPE_IPV4 };
    wire_eth__emit(&eth, d);
    uint8_t *iph = d + WIRE_ETH_HLEN;
    memset(iph, 0, 32);
    iph[0] = 0x46;
    iph[3] = 32;        /* total length */
    iph[8] = 64;
    iph[9] = WIRE_IPPROTO_UDP;
    memcpy(iph + 12, &(be32){ ip4(198, 18, 0, 1) }, 4);
    memcpy(iph + 16, &(be32){ ip4(198, 18, 0, 2) }, 4);
    iph[20] = 131;
    iph[21] = 3;
    iph[22] = 4;
    iph[23] = 0;
    be16 cs = wire_csum_fold(wire_csum_add(0, iph, 24));
    memcpy(iph + 10, &cs, 2);
    pkt__meta(&h.pool, p)->len = WIRE_ETH_HLEN + 32;
    struct ip_rx rx;
    CHECK(ip_input(&h.env, p, H_IFINDEX, &rx), ==, 0);
    CHECK(h.ip->c.rx_source_route, ==, 1);
    harness_fini(&h);
}

/* Sends one fragment of a datagram of id 9 carrying bytes [off, off + len) of pattern(). */
static uint8_t pattern(size_t i) { return (uint8_t)(i * 7 + 3); }

static int feed_frag(struct harness *h, uint16_t id, size_t off, size_t len, bool more, struct ip_rx *rx)
{
    uint8_t buf[1500];
    for (size_t i = 0; i < len; i++)
        buf[i] = pattern(off + i);
    struct wire_ipv4_repr ip = udp_to_us();
    ip.id = id;
    ip.frag_offset = (uint16_t)off;
    ip.more_frags = more;
    return ip_input(&h->env, h_rx_frame(h, &ip, buf, len), H_IFINDEX, rx);
}

static void check_datagram(struct harness *h, const struct ip_rx *rx, size_t len)
{
    static uint8_t out[70000];
    CHECK(rx->l4_len, ==, len);
    CHECK(pkt__chain_copy(&h->pool, rx->pkt, 0, out, sizeof(out)), ==, len);
    size_t bad = 0;
    for (size_t i = 0; i < len; i++)
        bad += out[i] != pattern(i);
    CHECK(bad, ==, 0);
}

TEST(test_reass_in_order)
{
    struct harness h;
    harness_init(&h);
    struct ip_rx rx;
    CHECK(feed_frag(&h, 9, 0, 1480, true, &rx), ==, 0);
    CHECK(feed_frag(&h, 9, 1480, 1480, true, &rx), ==, 0);
    CHECK(feed_frag(&h, 9, 2960, 100, false, &rx), ==, 1);
    check_datagram(&h, &rx, 3060);
    CHECK(h.ip->c.reass_ok, ==, 1);
    CHECK(h.ip->reass_bufs, ==, 0);
    pkt__free_chain(&h.pool, rx.pkt);
    harness_fini(&h);
}

TEST(test_reass_reverse_order)
{
    struct harness h;
    harness_init(&h);
    struct ip_rx rx;
    CHECK(feed_frag(&h, 9, 2960, 100, false, &rx), ==, 0);
    CHECK(feed_frag(&h, 9, 1480, 1480, true, &rx), ==, 0);
    CHECK(feed_frag(&h, 9, 0, 1480, true, &rx), ==, 1);
    check_datagram(&h, &rx, 3060);
    pkt__free_chain(&h.pool, rx.pkt);
    harness_fini(&h);
}

TEST(test_reass_duplicate_ignored)
{
    struct harness h;
    harness_init(&h);
    struct ip_rx rx;
    CHECK(feed_frag(&h, 9, 0, 1480, true, &rx), ==, 0);
    CHECK(feed_frag(&h, 9, 0, 1480, true, &rx), ==, 0);
    CHECK(h.ip->c.reass_dup, ==, 1);
    CHECK(feed_frag(&h, 9, 1480, 8, false, &rx), ==, 1);
    check_datagram(&h, &rx, 1488);
    pkt__free_chain(&h.pool, rx.pkt);
    harness_fini(&h);
}

TEST(test_reass_overlap_drops_datagram)
{
    struct harness h;
    harness_init(&h);
    struct ip_rx rx;
    CHECK(feed_frag(&h, 9, 0, 1480, true, &rx), ==, 0);
    CHECK(feed_frag(&h, 9, 1472, 800, true, &rx), ==, 0);     /* overlaps the first by 8 bytes */
    CHECK(h.ip->c.reass_overlap, ==, 1);
    CHECK(h.ip->reass_bufs, ==, 0);
    /* The rest of the datagram no longer completes anything. */
    CHECK(feed_frag(&h, 9, 1480, 8, false, &rx), ==, 0);
    harness_fini(&h);
}

TEST(test_reass_conflicting_last_fragment)
{
    struct harness h;
    harness_init(&h);
    struct ip_rx rx;
    CHECK(feed_frag(&h, 9, 1480, 100, false, &rx), ==, 0);
    CHECK(feed_frag(&h, 9, 1480, 200, false, &rx), ==, 0);
    CHECK(h.ip->c.reass_overlap, ==, 1);
    harness_fini(&h);
}

TEST(test_reass_unaligned_middle_fragment_dropped)
{
    struct harness h;
    harness_init(&h);
    struct ip_rx rx;
    CHECK(feed_frag(&h, 9, 0, 1001, true, &rx), ==, 0);
    CHECK(h.ip->c.frag_bad, ==, 1);
    harness_fini(&h);
}

TEST(test_reass_timeout_frees)
{
    struct harness h;
    harness_init(&h);
    struct ip_rx rx;
    CHECK(feed_frag(&h, 9, 0, 1480, true, &rx), ==, 0);
    CHECK(h.ip->reass_bufs, ==, 1);
    CHECK(h.ip->reass_slots, ==, 1);
    slip_time_t dl = ip_reass__expire(&h.env);
    CHECK(dl, ==, h.env.now + IP_REASS_TIMEOUT);
    h.env.now += IP_REASS_TIMEOUT;
    CHECK(ip_reass__expire(&h.env), ==, SLIP_TIME_NEVER);
    CHECK(h.ip->c.reass_timeout, ==, 1);
    CHECK(h.ip->reass_bufs, ==, 0);
    CHECK(h.ip->reass_slots, ==, 0);
    harness_fini(&h);
}

/* Like feed_frag, from source src: the eviction tests need many sources (a source holds at most
 * IP_REASS_PER_SRC datagrams). */
static int feed_from(struct harness *h, be32 src, uint16_t id, size_t off, size_t len, bool more, struct ip_rx *rx)
{
    uint8_t buf[1500];
    for (size_t i = 0; i < len; i++)
        buf[i] = pattern(off + i);
    struct wire_ipv4_repr ip = udp_to_us();
    ip.src = src;
    ip.id = id;
    ip.frag_offset = (uint16_t)off;
    ip.more_frags = more;
    return ip_input(&h->env, h_rx_frame(h, &ip, buf, len), H_IFINDEX, rx);
}

static be32 nth_src(unsigned n) { return ip4(198, 19, (uint8_t)(n >> 8), (uint8_t)n); }

static unsigned slots_used(const struct harness *h)
{
    unsigned n = 0;
    for (unsigned i = 0; i < IP_REASS_SLOTS; i++)
        n += h->ip->reass[i].used != 0;
    return n;
}

/* Completes datagram (src, id) whose first 8 bytes were fed: 1 if it was still there. */
static int finish(struct harness *h, be32 src, uint16_t id)
{
    struct ip_rx rx;
    int r = feed_from(h, src, id, 8, 8, false, &rx);
    if (r == 1) {
        check_datagram(h, &rx, 16);
        pkt__free_chain(&h->pool, rx.pkt);
    }
    return r;
}

/* Slots full of first fragments that never get their rest (the flood of issue 11): a new
 * datagram still gets through, at the cost of the least recently active one. */
TEST(test_reass_full_slots_evict_least_recently_active)
{
    struct harness h;
    harness_init(&h);
    struct ip_rx rx;
    h.ip->reass_high = 256;     /* slots run out here, not frames */
    h.ip->reass_low = 192;
    for (unsigned i = 0; i < IP_REASS_SLOTS; i++)
        CHECK(feed_from(&h, nth_src(i), (uint16_t)i, 0, 8, true, &rx), ==, 0);
    CHECK(slots_used(&h), ==, IP_REASS_SLOTS);
    /* Datagram 0 is the oldest but gets a fragment now: datagram 1 becomes the least active. */
    CHECK(feed_from(&h, nth_src(0), 0, 16, 8, true, &rx), ==, 0);
    for (unsigned i = 0; i < 5; i++)
        CHECK(feed_from(&h, nth_src(1000 + i), 7, 0, 8, true, &rx), ==, 0);
    CHECK(h.ip->c.reass_evict_slot, ==, 5);
    for (unsigned i = 0; i < 5; i++)
        CHECK(finish(&h, nth_src(1000 + i), 7), ==, 1);
    CHECK(h.ip->c.reass_ok, ==, 5);
    /* Evicted in order of last activity: 1..5 went, 0 and 6 are still there. */
    for (unsigned i = 1; i <= 5; i++)
        CHECK(finish(&h, nth_src(i), (uint16_t)i), ==, 0);
    CHECK(feed_from(&h, nth_src(0), 0, 8, 8, true, &rx), ==, 0);
    int done = feed_from(&h, nth_src(0), 0, 24, 8, false, &rx);
    CHECK(done, ==, 1);
    if (done == 1) {
        check_datagram(&h, &rx, 32);
        pkt__free_chain(&h.pool, rx.pkt);
    }
    CHECK(finish(&h, nth_src(6), 6), ==, 1);
    CHECK(h.ip->reass_bufs, <=, h.ip->reass_high);
    harness_fini(&h);
}

/* One source floods: it recycles its own share of the slots, the others' datagrams stay. */
TEST(test_reass_per_source_share)
{
    struct harness h;
    harness_init(&h);
    struct ip_rx rx;
    be32 other = ip4(198, 18, 0, 1), flood = ip4(198, 19, 0, 1);
    CHECK(feed_from(&h, other, 1, 0, 8, true, &rx), ==, 0);
    for (unsigned i = 0; i < 1000; i++)
        CHECK(feed_from(&h, flood, (uint16_t)(100 + i), 0, 8, true, &rx), ==, 0);
    CHECK(slots_used(&h), ==, 1 + IP_REASS_PER_SRC);
    CHECK(h.ip->c.reass_evict_src, ==, 1000 - IP_REASS_PER_SRC);
    CHECK(h.ip->c.reass_evict_slot, ==, 0);
    CHECK(finish(&h, other, 1), ==, 1);
    /* The source's newest datagrams are the ones kept. */
    CHECK(finish(&h, flood, (uint16_t)(100 + 999)), ==, 1);
    CHECK(finish(&h, flood, (uint16_t)(100 + 999 - IP_REASS_PER_SRC)), ==, 0);
    harness_fini(&h);
}

/* Above the high threshold of frames held, the least recently active datagrams go until the
 * total is under the low threshold (the harness: high 64, low 48). */
TEST(test_reass_memory_thresholds)
{
    struct harness h;
    harness_init(&h);
    struct ip_rx rx;
    CHECK(h.ip->reass_high, ==, 64);
    CHECK(h.ip->reass_low, ==, 48);
    for (unsigned d = 0; d < 8; d++)
        for (unsigned f = 0; f < 8; f++)
            CHECK(feed_from(&h, nth_src(d), (uint16_t)d, 8 * f, 8, true, &rx), ==, 0);
    CHECK(h.ip->reass_bufs, ==, 64);
    CHECK(h.ip->c.reass_evict_mem, ==, 0);
    /* One more for datagram 7: 0, 1 and 2 (8 frames each) go, 64 -> 40, then 41. */
    CHECK(feed_from(&h, nth_src(7), 7, 64, 8, true, &rx), ==, 0);
    CHECK(h.ip->c.reass_evict_mem, ==, 3);
    CHECK(h.ip->reass_bufs, ==, 41);
    CHECK(slots_used(&h), ==, 5);
    CHECK(h.ip->reass_slots, ==, 5);    /* the count every poll's expiry looks at first */
    CHECK(feed_from(&h, nth_src(2), 2, 64, 8, false, &rx), ==, 0);      /* gone: a new datagram */
    CHECK(feed_from(&h, nth_src(3), 3, 64, 8, false, &rx), ==, 1);      /* kept: completes */
    check_datagram(&h, &rx, 72);
    pkt__free_chain(&h.pool, rx.pkt);
    harness_fini(&h);
}

/* A datagram that alone reaches the high threshold is dropped, not the pool exhausted. */
TEST(test_reass_memory_one_datagram_too_big)
{
    struct harness h;
    harness_init(&h);
    struct ip_rx rx;
    for (unsigned f = 0; f < 64; f++)
        CHECK(feed_from(&h, nth_src(1), 1, 8 * f, 8, true, &rx), ==, 0);
    CHECK(h.ip->reass_bufs, ==, 64);
    CHECK(feed_from(&h, nth_src(1), 1, 8 * 64, 8, true, &rx), ==, 0);
    CHECK(h.ip->c.reass_evict_mem, ==, 1);
    CHECK(h.ip->reass_bufs, ==, 0);
    CHECK(slots_used(&h), ==, 0);
    CHECK(h.ip->reass_slots, ==, 0);
    harness_fini(&h);
}

/* Under pressure (IP_REASS_PRESSURE_SLOTS in use) a datagram gets IP_REASS_PRESSURE_TIMEOUT,
 * otherwise IP_REASS_TIMEOUT; expire() returns the deadline that applies. */
TEST(test_reass_pressure_timeout)
{
    struct harness h;
    harness_init(&h);
    struct ip_rx rx;
    slip_time_t t0 = h.env.now;
    for (unsigned i = 0; i < IP_REASS_PRESSURE_SLOTS - 1; i++)
        CHECK(feed_from(&h, nth_src(i), (uint16_t)i, 0, 8, true, &rx), ==, 0);
    CHECK(ip_reass__pressure(h.ip), ==, false);
    CHECK(ip_reass__expire(&h.env), ==, t0 + IP_REASS_TIMEOUT);
    h.env.now = t0 + IP_REASS_PRESSURE_TIMEOUT;
    CHECK(ip_reass__expire(&h.env), ==, t0 + IP_REASS_TIMEOUT);
    CHECK(slots_used(&h), ==, IP_REASS_PRESSURE_SLOTS - 1);

    /* One more, half a second in: pressure, so the first ones' deadline is now t0 + 1 s. */
    h.env.now = t0 + IP_REASS_PRESSURE_TIMEOUT / 2;
    CHECK(feed_from(&h, nth_src(500), 500, 0, 8, true, &rx), ==, 0);
    CHECK(ip_reass__pressure(h.ip), ==, true);
    CHECK(ip_reass__expire(&h.env), ==, t0 + IP_REASS_PRESSURE_TIMEOUT);
    h.env.now = t0 + IP_REASS_PRESSURE_TIMEOUT;
    /* Pressure is judged before the sweep: the survivor's deadline comes out as the short one,
     * which costs one early wake-up at most. */
    slip_time_t born = t0 + IP_REASS_PRESSURE_TIMEOUT / 2;
    CHECK(ip_reass__expire(&h.env), ==, born + IP_REASS_PRESSURE_TIMEOUT);
    CHECK(h.ip->c.reass_timeout_pressure, ==, IP_REASS_PRESSURE_SLOTS - 1);
    CHECK(h.ip->c.reass_timeout, ==, 0);
    CHECK(slots_used(&h), ==, 1);
    CHECK(ip_reass__pressure(h.ip), ==, false);
    /* The survivor, no longer under pressure, keeps the full timeout. */
    h.env.now = born + IP_REASS_PRESSURE_TIMEOUT;
    CHECK(ip_reass__expire(&h.env), ==, born + IP_REASS_TIMEOUT);
    h.env.now = born + IP_REASS_TIMEOUT;
    CHECK(ip_reass__expire(&h.env), ==, SLIP_TIME_NEVER);
    CHECK(h.ip->c.reass_timeout, ==, 1);
    harness_fini(&h);
}

/* Frames above the low threshold are pressure too, with few datagrams. */
TEST(test_reass_pressure_from_frames)
{
    struct harness h;
    harness_init(&h);
    struct ip_rx rx;
    for (unsigned f = 0; f < 49; f++)
        CHECK(feed_from(&h, nth_src(1), 1, 8 * f, 8, true, &rx), ==, 0);
    CHECK(ip_reass__pressure(h.ip), ==, true);
    h.env.now += IP_REASS_PRESSURE_TIMEOUT;
    CHECK(ip_reass__expire(&h.env), ==, SLIP_TIME_NEVER);
    CHECK(h.ip->c.reass_timeout_pressure, ==, 1);
    CHECK(h.ip->reass_bufs, ==, 0);
    harness_fini(&h);
}

static struct ip_route route_to(struct harness *h, be32 dst)
{
    struct ip_route rt;
    CHECK(ip_output__route(&h->env, dst, &rt), ==, 0);
    return rt;
}

TEST(test_output_route_gateway_and_connected)
{
    struct harness h;
    harness_init(&h);
    struct ip_route rt = route_to(&h, ip4(198, 19, 1, 1));
    CHECK(rt.nexthop, ==, ip4(198, 18, 0, 1));
    CHECK(rt.src, ==, ip4(198, 18, 0, 2));
    CHECK(rt.mtu, ==, 1500);
    rt = route_to(&h, ip4(198, 18, 0, 9));
    CHECK(rt.nexthop, ==, ip4(198, 18, 0, 9));
    h.t->nroutes = 0;
    CHECK(ip_output__route(&h.env, ip4(198, 18, 0, 9), &rt), ==, -ENETUNREACH);
    CHECK(h.ip->c.tx_no_route, ==, 1);
    harness_fini(&h);
}

TEST(test_output_single_frame_headers)
{
    struct harness h;
    harness_init(&h);
    struct ip_route rt = route_to(&h, ip4(198, 19, 1, 1));
    uint8_t pl[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
    struct iovec v = { pl, sizeof(pl) };
    struct ip_tx tx = { .dst = ip4(198, 19, 1, 1), .proto = 253 };
    CHECK(ip_output__send(&h.env, &rt, &tx, &v, 1), ==, 0);
    CHECK(h.nsent, ==, 1);
    uint8_t *d = pkt__data(&h.pool, h.sent[0]);
    CHECK(pkt__meta(&h.pool, h.sent[0])->len, ==, WIRE_ETH_ZLEN);   /* padded */
    CHECK_MEM(d, H_PEER_MAC, 6);
    CHECK_MEM(d + 6, H_MAC, 6);
    CHECK(wire_csum_fold(wire_csum_add(0, d + 14, 20)), ==, 0);     /* header checksum verifies */
    struct wire_ipv4_repr ip;
    CHECK(wire_ipv4__parse(d + 14, 46, &ip, 0), ==, 0);
    CHECK(ip.total_len, ==, 30);
    CHECK(ip.ttl, ==, IP_DEFAULT_TTL);
    CHECK_MEM(d + 34, pl, 10);
    CHECK(d[44], ==, 0);                                             /* padding zeroed */
    harness_fini(&h);
}

TEST(test_output_fragments_reassemble)
{
    struct harness h;
    harness_init(&h);
    static uint8_t pl[5000];
    for (size_t i = 0; i < sizeof(pl); i++)
        pl[i] = pattern(i);
    /* Send to a neighbour, then make its address ours so the fragments can be fed back in. */
    h_add_neigh(&h, ip4(198, 18, 0, 9), H_MAC, NUD_PERMANENT);
    struct ip_route rt = route_to(&h, ip4(198, 18, 0, 9));
    struct iovec v[2] = { { pl, 1234 }, { pl + 1234, sizeof(pl) - 1234 } };
    struct ip_tx tx = { .dst = ip4(198, 18, 0, 9), .proto = WIRE_IPPROTO_UDP };
    CHECK(ip_output__send(&h.env, &rt, &tx, v, 2), ==, 0);
    CHECK(h.nsent, ==, 4);                          /* 1480 * 3 + 560 */
    CHECK(h.ip->c.tx_frags, ==, 4);
    for (unsigned i = 0; i < h.nsent; i++)
        CHECK(pkt__meta(&h.pool, h.sent[i])->len, <=, 1514);
    h_add_addr(&h, ip4(198, 18, 0, 9));
    /* Feed them back last first. */
    struct ip_rx rx;
    int done = 0;
    for (int i = (int)h.nsent - 1; i >= 0; i--)
        done += ip_input(&h.env, h_loop(&h, h.sent[i]), H_IFINDEX, &rx);
    h.nsent = 0;
    CHECK(done, ==, 1);
    check_datagram(&h, &rx, sizeof(pl));
    pkt__free_chain(&h.pool, rx.pkt);
    harness_fini(&h);
}

TEST(test_output_df_too_big)
{
    struct harness h;
    harness_init(&h);
    struct ip_route rt = route_to(&h, ip4(198, 19, 1, 1));
    static uint8_t pl[2000];
    struct iovec v = { pl, sizeof(pl) };
    struct ip_tx tx = { .dst = ip4(198, 19, 1, 1), .proto = 253, .df = true };
    CHECK(ip_output__send(&h.env, &rt, &tx, &v, 1), ==, -EMSGSIZE);
    CHECK(h.nsent, ==, 0);
    harness_fini(&h);
}

TEST(test_output_waits_for_neighbour)
{
    struct harness h;
    harness_init(&h);
    be32 dst = ip4(198, 18, 0, 50);
    struct ip_route rt = route_to(&h, dst);
    uint8_t pl[10] = { 0 };
    struct iovec v = { pl, sizeof(pl) };
    struct ip_tx tx = { .dst = dst, .proto = 253 };
    CHECK(ip_output__send(&h.env, &rt, &tx, &v, 1), ==, 0);
    CHECK(ip_output__send(&h.env, &rt, &tx, &v, 1), ==, 0);
    CHECK(h.nsent, ==, 0);
    CHECK(h.ip->c.neigh_wait, ==, 2);
    CHECK(h.ip->neigh_pending, ==, 1);      /* one slot, both frames queued in it */
    slip_time_t dl = ip_neigh__service(&h.env);
    CHECK(dl, ==, h.env.now + IP_NEIGH_REASK);
    /* The kernel resolved it: the next service sends both, in order, with the MAC. */
    static const uint8_t mac[6] = { 2, 9, 9, 9, 9, 9 };
    h_add_neigh(&h, dst, mac, NUD_REACHABLE);
    CHECK(ip_neigh__service(&h.env), ==, SLIP_TIME_NEVER);
    CHECK(h.nsent, ==, 2);
    CHECK_MEM(pkt__data(&h.pool, h.sent[0]), mac, 6);
    CHECK(h.ip->c.neigh_resolved, ==, 2);
    CHECK(h.ip->neigh_pending, ==, 0);
    /* Resolved now: the next frame goes out at once, without a slot. */
    CHECK(ip_output__send(&h.env, &rt, &tx, &v, 1), ==, 0);
    CHECK(h.nsent, ==, 3);
    CHECK(h.ip->neigh_pending, ==, 0);
    harness_fini(&h);
}

TEST(test_output_neighbour_gives_up)
{
    struct harness h;
    harness_init(&h);
    be32 dst = ip4(198, 18, 0, 51);
    struct ip_route rt = route_to(&h, dst);
    uint8_t pl[10] = { 0 };
    struct iovec v = { pl, sizeof(pl) };
    struct ip_tx tx = { .dst = dst, .proto = 253 };
    for (int i = 0; i < IP_NEIGH_QLEN + 3; i++)
        ip_output__send(&h.env, &rt, &tx, &v, 1);
    CHECK(h.ip->c.neigh_overflow, ==, 3);
    h.env.now += IP_NEIGH_TIMEOUT;
    ip_neigh__service(&h.env);
    CHECK(h.ip->c.neigh_failed, ==, IP_NEIGH_QLEN);
    CHECK(h.nsent, ==, 0);
    CHECK(h.ip->neigh_pending, ==, 0);
    harness_fini(&h);
}

TEST(test_pmtu_from_icmp_frag_needed)
{
    struct harness h;
    harness_init(&h);
    /* A router says 198.19.1.1 needs MTU 1280, quoting a UDP datagram we sent. */
    uint8_t msg[8 + 28];
    struct wire_ipv4_repr q = { .src = ip4(198, 18, 0, 2), .dst = ip4(198, 19, 1, 1), .proto = WIRE_IPPROTO_UDP,
                                .ttl = 63, .hdr_len = 20, .total_len = 1400, .dont_frag = true };
    wire_ipv4__emit(&q, msg + 8);
    memcpy(msg + 28, (uint8_t[]){ 0x30, 0x39, 0x00, 0x07, 0x05, 0x64, 0, 0 }, 8);
    struct wire_icmp_repr ic = { .type = WIRE_ICMP_DEST_UNREACH, .code = WIRE_ICMP_FRAG_NEEDED,
                                 .rest = hton32(1280), .next_hop_mtu = 1280 };
    wire_icmp__emit(&ic, msg, 28);
    struct wire_ipv4_repr ip = { .src = ip4(198, 18, 0, 1), .dst = ip4(198, 18, 0, 2), .proto = WIRE_IPPROTO_ICMP };
    struct ip_rx rx;
    CHECK(ip_input(&h.env, h_rx_frame(&h, &ip, msg, sizeof(msg)), H_IFINDEX, &rx), ==, 1);
    struct ip_icmp_err e;
    CHECK(ip_icmp__input(&h.env, &rx, &e), ==, 1);
    pkt__free_chain(&h.pool, rx.pkt);
    CHECK(e.q.sport, ==, 12345);
    CHECK(e.q.dport, ==, 7);
    CHECK(ip_pmtu__get(&h.env, ip4(198, 19, 1, 1)), ==, 1280);
    CHECK(route_to(&h, ip4(198, 19, 1, 1)).mtu, ==, 1280);
    /* Never below the minimum, and forgotten after IP_PMTU_EXPIRES. */
    ip_pmtu__update(&h.env, ip4(198, 19, 1, 1), 68);
    CHECK(ip_pmtu__get(&h.env, ip4(198, 19, 1, 1)), ==, IP_MIN_MTU);
    h.env.now += IP_PMTU_EXPIRES;
    CHECK(ip_pmtu__get(&h.env, ip4(198, 19, 1, 1)), ==, 0);
    harness_fini(&h);
}

TEST(test_icmp_bad_checksum_counted)
{
    struct harness h;
    harness_init(&h);
    uint8_t msg[8 + 28] = { 3, 3, 0x12, 0x34 };
    struct wire_ipv4_repr ip = { .src = ip4(198, 18, 0, 1), .dst = ip4(198, 18, 0, 2), .proto = WIRE_IPPROTO_ICMP };
    struct ip_rx rx;
    CHECK(ip_input(&h.env, h_rx_frame(&h, &ip, msg, sizeof(msg)), H_IFINDEX, &rx), ==, 1);
    struct ip_icmp_err e;
    CHECK(ip_icmp__input(&h.env, &rx, &e), ==, 0);
    CHECK(h.ip->c.icmp_bad, ==, 1);
    pkt__free_chain(&h.pool, rx.pkt);
    harness_fini(&h);
}

TEST_MAIN()
