/* SO_REUSEPORT groups: TCP listeners sharing (laddr, lport), with each new connection (SYN or
 * SYN-cookie ACK) steered to one member by a hash of its 4-tuple, and UDP sockets sharing a port
 * with datagrams spread the same way. One stack (198.18.0.2) against crafted peer segments
 * (198.18.0.1, source ports varied); every test ends with the frame leak check. */
#include "tests/unit/tcp/tcp_test.h"
#include "udp/udp.h"

#define NSYN 64

struct rp {
    struct harness h;
    struct tcp_shared *sh;
    struct ip_env *env;
};

static void rp_init(struct rp *r)
{
    memset(r, 0, sizeof(*r));
    harness_init(&r->h);
    r->sh = t_new_shared(512);
    r->env = &r->h.env;
}

static void rp_fini(struct rp *r)
{
    h_free_sent(&r->h);
    tcp_shared__purge(r->sh, &r->h.pool);
    free(r->sh);
    harness_fini(&r->h);
}

/* A listener on (laddr, 80), with SO_REUSEPORT when rp; returns tcp_conn__listen's result and
 * the connection in *out. */
static int listener(struct rp *r, be32 laddr, bool rp, int *out)
{
    int l = tcp_conn__open(r->sh);
    CHECK(l, >=, 0);
    CHECK(tcp_conn__setopt(r->env, r->sh, (slip_idx_t)l, TCPO_REUSEPORT, rp), ==, 0);
    *out = l;
    return tcp_conn__listen(r->sh, (slip_idx_t)l, laddr, 80, 200);
}

static void syn(struct rp *r, uint16_t sport, uint32_t seq)
{
    struct tseg t = { .sport = sport, .dport = 80, .seq = seq, .flags = WIRE_TCP_SYN, .win = 65535,
                      .opts = t_synopts(1460, 7, true, false, 0) };
    t_feed(&r->h, r->sh, &t);
}

/* The half-open child of (PEER:sport -> US:80), or -1. */
static int child_of_tuple(struct rp *r, uint16_t sport)
{
    for (uint32_t i = 0; i < r->sh->high_water; i++) {
        struct tcp_conn *c = tcp_conn__get(r->sh, i);
        if (c->rcvbuf && c->state != TCPS_LISTEN && c->lport == 80 && c->rport == sport && c->raddr == PEER)
            return (int)i;
    }
    return -1;
}

/* SYN, then the ACK of our SYN-ACK: an established child waiting in its listener's queue. */
static int handshake(struct rp *r, uint16_t sport)
{
    syn(r, sport, 1000);
    struct tout o;
    CHECK(t_last(&r->h, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_SYN | WIRE_TCP_ACK);
    uint32_t iss = o.th.seq;
    h_free_sent(&r->h);
    struct tseg ack = { .sport = sport, .dport = 80, .seq = 1001, .ack = iss + 1, .flags = WIRE_TCP_ACK, .win = 1000 };
    t_feed(&r->h, r->sh, &ack);
    int c = child_of_tuple(r, sport);
    CHECK(c, >=, 0);
    CHECK(tcp_conn__get(r->sh, (slip_idx_t)c)->state, ==, TCPS_ESTABLISHED);
    return c;
}

TEST(test_reuseport_second_listener_needs_reuseport_on_all)
{
    struct rp r;
    rp_init(&r);
    int a, b, c, d;
    /* Neither, only the first, only the second: EADDRINUSE as before. */
    CHECK(listener(&r, 0, false, &a), ==, 0);
    CHECK(listener(&r, 0, true, &b), ==, -EADDRINUSE);
    tcp_conn__close(r.env, r.sh, (slip_idx_t)a);
    tcp_conn__close(r.env, r.sh, (slip_idx_t)b);
    CHECK(listener(&r, 0, true, &a), ==, 0);
    CHECK(listener(&r, 0, false, &b), ==, -EADDRINUSE);
    /* Both: a group; a third without the option is still refused, one with it joins. */
    CHECK(listener(&r, 0, true, &c), ==, 0);
    CHECK(listener(&r, 0, true, &d), ==, 0);
    int e;
    CHECK(listener(&r, 0, false, &e), ==, -EADDRINUSE);
    int v = -1;
    CHECK(tcp_conn__getopt(r.sh, (slip_idx_t)c, TCPO_REUSEPORT, &v), ==, 0);
    CHECK(v, ==, 1);
    /* Another address is another key: no conflict either way. */
    int f;
    CHECK(listener(&r, US, false, &f), ==, 0);
    tcp_conn__close(r.env, r.sh, (slip_idx_t)a);
    tcp_conn__close(r.env, r.sh, (slip_idx_t)b);
    tcp_conn__close(r.env, r.sh, (slip_idx_t)c);
    tcp_conn__close(r.env, r.sh, (slip_idx_t)d);
    tcp_conn__close(r.env, r.sh, (slip_idx_t)e);
    tcp_conn__close(r.env, r.sh, (slip_idx_t)f);
    CHECK(r.sh->nused, ==, 0);
    rp_fini(&r);
}

/* Every freed slot is on the engine's ring of the last TCP_FREED_RING, in order (the stack
 * releases a closed connection's port and steering claim from it). */
TEST(test_freed_slots_ring)
{
    struct rp r;
    rp_init(&r);
    uint32_t seq0 = r.sh->freed_seq;
    int a, b;
    CHECK(listener(&r, 0, true, &a), ==, 0);
    CHECK(listener(&r, 0, true, &b), ==, 0);
    CHECK(r.sh->freed_seq, ==, seq0);
    tcp_conn__close(r.env, r.sh, (slip_idx_t)b);
    tcp_conn__close(r.env, r.sh, (slip_idx_t)a);
    CHECK(r.sh->freed_seq, ==, seq0 + 2);
    CHECK(tcp__freed_slot(r.sh, seq0), ==, (slip_idx_t)b);
    CHECK(tcp__freed_slot(r.sh, seq0 + 1), ==, (slip_idx_t)a);
    /* More than the ring holds: the newest are there. */
    int x = -1, y = -1;
    for (int i = 0; i < TCP_FREED_RING + 10; i++) {
        CHECK(listener(&r, 0, true, &x), ==, 0);
        CHECK(listener(&r, 0, true, &y), ==, 0);
        tcp_conn__close(r.env, r.sh, (slip_idx_t)x);
        tcp_conn__close(r.env, r.sh, (slip_idx_t)y);
    }
    CHECK(r.sh->freed_seq, ==, seq0 + 2 + 2 * (TCP_FREED_RING + 10));
    CHECK(tcp__freed_slot(r.sh, r.sh->freed_seq - 2), ==, (slip_idx_t)x);
    CHECK(tcp__freed_slot(r.sh, r.sh->freed_seq - 1), ==, (slip_idx_t)y);
    CHECK(r.sh->nused, ==, 0);
    rp_fini(&r);
}

/* Many SYNs from different source ports: every one gets a child, both listeners get some, and
 * each child's listener is the one tcp__lookup_listener names for its 4-tuple. */
TEST(test_reuseport_syns_spread_over_group)
{
    struct rp r;
    rp_init(&r);
    int l[2];
    CHECK(listener(&r, 0, true, &l[0]), ==, 0);
    CHECK(listener(&r, 0, true, &l[1]), ==, 0);
    unsigned per[2] = { 0, 0 };
    for (uint16_t k = 0; k < NSYN; k++) {
        uint16_t sport = (uint16_t)(20000 + k * 7);
        syn(&r, sport, 1000 + k);
        int c = child_of_tuple(&r, sport);
        CHECK(c, >=, 0);
        slip_idx_t parent = tcp_conn__get(r.sh, (slip_idx_t)c)->parent;
        CHECK(parent, ==, tcp__lookup_listener(r.sh, US, 80, PEER, sport));
        CHECK(parent == (slip_idx_t)l[0] || parent == (slip_idx_t)l[1], ==, true);
        per[parent == (slip_idx_t)l[1]]++;
        h_free_sent(&r.h);
    }
    CHECK(per[0] + per[1], ==, NSYN);
    CHECK(per[0], >, 0);
    CHECK(per[1], >, 0);
    /* Not grossly lopsided either: 64 draws of a fair coin stay within 12..52 (p > 0.9999). */
    CHECK(per[0], >=, 12);
    CHECK(per[1], >=, 12);
    CHECK(tcp_conn__get(r.sh, (slip_idx_t)l[0])->synq_len, ==, per[0]);
    CHECK(tcp_conn__get(r.sh, (slip_idx_t)l[1])->synq_len, ==, per[1]);
    tcp_conn__close(r.env, r.sh, (slip_idx_t)l[0]);
    tcp_conn__close(r.env, r.sh, (slip_idx_t)l[1]);
    CHECK(r.sh->nused, ==, 0);
    rp_fini(&r);
}

/* The same 4-tuple lands on the same listener every time: SYN, the child dies (peer RST),
 * the SYN comes again and goes to the same listener; the lookup itself is a function of the
 * tuple; and accept() on that listener returns the completed connection. */
TEST(test_reuseport_same_tuple_same_listener)
{
    struct rp r;
    rp_init(&r);
    int l[3];
    for (int i = 0; i < 3; i++)
        CHECK(listener(&r, 0, true, &l[i]), ==, 0);
    for (uint16_t k = 0; k < 16; k++) {
        uint16_t sport = (uint16_t)(30000 + k * 13);
        slip_idx_t want = tcp__lookup_listener(r.sh, US, 80, PEER, sport);
        for (int round = 0; round < 3; round++) {
            syn(&r, sport, 5000);
            int c = child_of_tuple(&r, sport);
            CHECK(c, >=, 0);
            CHECK(tcp_conn__get(r.sh, (slip_idx_t)c)->parent, ==, want);
            struct tout o;
            CHECK(t_last(&r.h, &o), ==, true);
            h_free_sent(&r.h);
            struct tseg rst = { .sport = sport, .dport = 80, .seq = 5001, .flags = WIRE_TCP_RST };
            t_feed(&r.h, r.sh, &rst);
            CHECK(child_of_tuple(&r, sport), ==, -1);
        }
        CHECK(tcp__lookup_listener(r.sh, US, 80, PEER, sport), ==, want);
    }
    /* All three members are used by some tuple. */
    bool used[3] = { false, false, false };
    for (uint16_t p = 1000; p < 1200; p++) {
        slip_idx_t x = tcp__lookup_listener(r.sh, US, 80, PEER, p);
        for (int i = 0; i < 3; i++)
            used[i] |= x == (slip_idx_t)l[i];
    }
    CHECK(used[0] && used[1] && used[2], ==, true);
    /* A completed handshake waits on its own listener only. */
    int c = handshake(&r, 40001);
    slip_idx_t owner = tcp__lookup_listener(r.sh, US, 80, PEER, 40001);
    for (int i = 0; i < 3; i++) {
        int got = tcp_conn__accept(r.sh, (slip_idx_t)l[i]);
        CHECK(got, ==, (slip_idx_t)l[i] == owner ? c : -EAGAIN);
    }
    tcp_conn__abort(r.env, r.sh, (slip_idx_t)c);
    for (int i = 0; i < 3; i++)
        tcp_conn__close(r.env, r.sh, (slip_idx_t)l[i]);
    CHECK(r.sh->nused, ==, 0);
    rp_fini(&r);
}

/* With SYN cookies the ACK carries no state: it must reach the same member the SYN hashed to. */
TEST(test_reuseport_syncookie_ack_same_listener)
{
    struct rp r;
    rp_init(&r);
    r.sh->syncookies = 2;
    int l[2];
    CHECK(listener(&r, 0, true, &l[0]), ==, 0);
    CHECK(listener(&r, 0, true, &l[1]), ==, 0);
    unsigned per[2] = { 0, 0 };
    for (uint16_t k = 0; k < 32; k++) {
        uint16_t sport = (uint16_t)(41000 + k);
        syn(&r, sport, 9000);
        CHECK(child_of_tuple(&r, sport), ==, -1);       /* stateless */
        struct tout o;
        CHECK(t_last(&r.h, &o), ==, true);
        CHECK(o.th.flags, ==, WIRE_TCP_SYN | WIRE_TCP_ACK);
        h_free_sent(&r.h);
        struct tseg ack = { .sport = sport, .dport = 80, .seq = 9001, .ack = o.th.seq + 1, .flags = WIRE_TCP_ACK,
                            .win = 1000 };
        t_feed(&r.h, r.sh, &ack);
        int c = child_of_tuple(&r, sport);
        CHECK(c, >=, 0);
        slip_idx_t parent = tcp_conn__get(r.sh, (slip_idx_t)c)->parent;
        CHECK(parent, ==, tcp__lookup_listener(r.sh, US, 80, PEER, sport));
        per[parent == (slip_idx_t)l[1]]++;
        CHECK(tcp_conn__accept(r.sh, parent), ==, c);
        tcp_conn__abort(r.env, r.sh, (slip_idx_t)c);
        h_free_sent(&r.h);
    }
    CHECK(r.sh->c.syncookies_ok, ==, 32);
    CHECK(per[0], >, 0);
    CHECK(per[1], >, 0);
    tcp_conn__close(r.env, r.sh, (slip_idx_t)l[0]);
    tcp_conn__close(r.env, r.sh, (slip_idx_t)l[1]);
    CHECK(r.sh->nused, ==, 0);
    rp_fini(&r);
}

/* Closing one member: its own unaccepted children are reset and freed, the other member's stay,
 * accepted connections of either stay, and every new SYN goes to the survivor. */
TEST(test_reuseport_close_one_listener_other_serves)
{
    struct rp r;
    rp_init(&r);
    int l[2];
    CHECK(listener(&r, 0, true, &l[0]), ==, 0);
    CHECK(listener(&r, 0, true, &l[1]), ==, 0);
    /* Established children of both, one accepted from each, the rest left in the queues. */
    int kids[24];
    slip_idx_t owner[24];
    int accepted[2] = { -1, -1 };
    for (int k = 0; k < 24; k++) {
        uint16_t sport = (uint16_t)(50000 + k * 3);
        kids[k] = handshake(&r, sport);
        owner[k] = tcp_conn__get(r.sh, (slip_idx_t)kids[k])->parent;
        h_free_sent(&r.h);
    }
    for (int i = 0; i < 2; i++) {
        accepted[i] = tcp_conn__accept(r.sh, (slip_idx_t)l[i]);
        CHECK(accepted[i], >=, 0);
    }
    /* A half-open child on each, too. */
    uint16_t half[2] = { 0, 0 };
    for (uint16_t p = 60000; (!half[0] || !half[1]) && p < 61000; p++) {
        int i = tcp__lookup_listener(r.sh, US, 80, PEER, p) == (slip_idx_t)l[1];
        if (half[i])
            continue;
        syn(&r, p, 77);
        half[i] = p;
    }
    h_free_sent(&r.h);
    CHECK(half[0] && half[1], ==, true);
    uint32_t before = r.sh->nused;
    uint32_t q0 = tcp_conn__get(r.sh, (slip_idx_t)l[0])->acceptq_len;
    tcp_conn__close(r.env, r.sh, (slip_idx_t)l[0]);
    /* The RSTs went to l[0]'s unaccepted children only (queued ones and the half-open one). */
    unsigned rsts = 0;
    for (unsigned n = 0; n < r.h.nsent; n++) {
        struct tout o;
        CHECK(t_sent(&r.h, n, &o), ==, true);
        CHECK(o.th.flags & WIRE_TCP_RST, !=, 0);
        rsts++;
    }
    CHECK(rsts, ==, q0 + 1);
    h_free_sent(&r.h);
    CHECK(r.sh->nused, ==, before - 1 - q0 - 1);
    for (int k = 0; k < 24; k++) {
        struct tcp_conn *c = tcp_conn__get(r.sh, (slip_idx_t)kids[k]);
        if (kids[k] == accepted[0] || kids[k] == accepted[1] || owner[k] == (slip_idx_t)l[1])
            CHECK(c->state, ==, TCPS_ESTABLISHED);
        else
            CHECK(c->rcvbuf, ==, 0);      /* freed */
    }
    CHECK(child_of_tuple(&r, half[0]), ==, -1);
    CHECK(child_of_tuple(&r, half[1]), >=, 0);
    /* New connections: all on the survivor. */
    for (uint16_t k = 0; k < 32; k++) {
        uint16_t sport = (uint16_t)(10000 + k * 11);
        syn(&r, sport, 1);
        int c = child_of_tuple(&r, sport);
        CHECK(c, >=, 0);
        CHECK(tcp_conn__get(r.sh, (slip_idx_t)c)->parent, ==, (slip_idx_t)l[1]);
        h_free_sent(&r.h);
    }
    /* Closing the last one takes the rest of the unaccepted ones. */
    tcp_conn__close(r.env, r.sh, (slip_idx_t)l[1]);
    h_free_sent(&r.h);
    CHECK(r.sh->nused, ==, 2);
    tcp_conn__abort(r.env, r.sh, (slip_idx_t)accepted[0]);
    tcp_conn__abort(r.env, r.sh, (slip_idx_t)accepted[1]);
    h_free_sent(&r.h);
    CHECK(r.sh->nused, ==, 0);
    rp_fini(&r);
}

/* A group bound to the address wins over a wildcard listener on the same port (Linux scores a
 * bound address higher), and the wildcard one gets nothing. */
TEST(test_reuseport_bound_group_before_wildcard)
{
    struct rp r;
    rp_init(&r);
    int w, l[2];
    CHECK(listener(&r, 0, false, &w), ==, 0);
    CHECK(listener(&r, US, true, &l[0]), ==, 0);
    CHECK(listener(&r, US, true, &l[1]), ==, 0);
    unsigned per[2] = { 0, 0 };
    for (uint16_t p = 2000; p < 2100; p++) {
        slip_idx_t x = tcp__lookup_listener(r.sh, US, 80, PEER, p);
        CHECK(x != (slip_idx_t)w, ==, true);
        per[x == (slip_idx_t)l[1]]++;
    }
    CHECK(per[0], >, 0);
    CHECK(per[1], >, 0);
    /* Another local address only matches the wildcard one. */
    CHECK(tcp__lookup_listener(r.sh, ip4(198, 18, 0, 9), 80, PEER, 2000), ==, (slip_idx_t)w);
    tcp_conn__close(r.env, r.sh, (slip_idx_t)w);
    tcp_conn__close(r.env, r.sh, (slip_idx_t)l[0]);
    tcp_conn__close(r.env, r.sh, (slip_idx_t)l[1]);
    CHECK(r.sh->nused, ==, 0);
    rp_fini(&r);
}

/* ---------------- UDP ---------------- */

/* A datagram 198.18.0.1:sport -> 198.18.0.2:dport with a correct checksum. */
static void udp_deliver(struct harness *h, struct udp_shared *u, uint16_t sport, uint16_t dport)
{
    uint8_t buf[64];
    struct wire_udp_hdr *uh = (void *)buf;
    uh->sport = hton16(sport);
    uh->dport = hton16(dport);
    uh->len = hton16(8 + 4);
    uh->csum = 0;
    memcpy(buf + 8, "ping", 4);
    uint32_t sum = wire_csum_pseudo4(PEER, US, 17, 12);
    uh->csum = wire_csum_fold(wire_csum_add(sum, buf, 12));
    struct wire_ipv4_repr ip = { .src = PEER, .dst = US, .proto = 17, .id = 5 };
    struct ip_rx rx;
    if (ip_input(&h->env, h_rx_frame(h, &ip, buf, 12), H_IFINDEX, &rx))
        udp_input(&h->env, u, &rx);
}

static int udp_bound(struct udp_shared *u, be32 addr, uint16_t port, bool rp, int *rc)
{
    int s = udp_sock__alloc(u);
    CHECK(s, >=, 0);
    udp_sock__set_reuseport(u, (slip_idx_t)s, rp);
    *rc = udp_sock__bind(u, (slip_idx_t)s, addr, port);
    return s;
}

TEST(test_udp_reuseport_group_spreads_by_tuple)
{
    struct harness h;
    harness_init(&h);
    struct udp_shared *u = malloc(udp_shared__bytes(64));
    udp_shared__init(u, 64);
    int rc;
    int a = udp_bound(u, 0, 53, true, &rc);
    CHECK(rc, ==, 0);
    int b = udp_bound(u, 0, 53, true, &rc);
    CHECK(rc, ==, 0);
    int c = udp_bound(u, 0, 53, false, &rc);
    CHECK(rc, ==, -EADDRINUSE);
    udp_sock__close(u, &h.pool, (slip_idx_t)c);
    int d = udp_bound(u, 0, 54, false, &rc);
    CHECK(rc, ==, 0);
    int e = udp_bound(u, 0, 54, true, &rc);
    CHECK(rc, ==, -EADDRINUSE);
    udp_sock__close(u, &h.pool, (slip_idx_t)e);
    udp_sock__close(u, &h.pool, (slip_idx_t)d);

    for (uint16_t p = 0; p < NSYN; p++)
        udp_deliver(&h, u, (uint16_t)(7000 + p * 5), 53);
    uint32_t na = u->socks[a].rcvq.count, nb = u->socks[b].rcvq.count;
    CHECK(na + nb, ==, NSYN);
    CHECK(na, >, 0);
    CHECK(nb, >, 0);
    /* The same 4-tuple keeps its socket. */
    for (uint16_t p = 0; p < 16; p++) {
        uint16_t sport = (uint16_t)(7000 + p * 5);
        slip_idx_t x = udp__lookup(u, US, 53, PEER, sport);
        for (int k = 0; k < 4; k++) {
            uint32_t qa = u->socks[a].rcvq.count, qb = u->socks[b].rcvq.count;
            udp_deliver(&h, u, sport, 53);
            CHECK(u->socks[a].rcvq.count - qa, ==, x == (slip_idx_t)a ? 1u : 0u);
            CHECK(u->socks[b].rcvq.count - qb, ==, x == (slip_idx_t)b ? 1u : 0u);
        }
    }
    /* Closing one: the other takes everything. */
    udp_sock__close(u, &h.pool, (slip_idx_t)a);
    uint32_t qb = u->socks[b].rcvq.count;
    for (uint16_t p = 0; p < 32; p++)
        udp_deliver(&h, u, (uint16_t)(9000 + p), 53);
    CHECK(u->socks[b].rcvq.count, ==, qb + 32);
    CHECK(u->c.rx_no_socket, ==, 0);
    udp_sock__close(u, &h.pool, (slip_idx_t)b);
    CHECK(u->nused, ==, 0);
    free(u);
    harness_fini(&h);
}

TEST_MAIN()
