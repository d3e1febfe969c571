/* Buffer autotuning (tcp_buf.c) between two stacks in virtual time: on a path whose
 * bandwidth-delay product is above the default 256 KiB buffers, the sender's buffer grows with
 * cwnd and the receiver's with what its reader takes per round trip, and the transfer runs near
 * the link's rate, where the same transfer with both buffers set to 256 KiB by the application
 * (SO_SNDBUF, SO_RCVBUF: no autotuning) is held to one buffer per round trip. Also the window
 * scale offered, which must cover the buffer autotuning may reach, and net.ipv4.
 * tcp_moderate_rcvbuf = 0. */
#define H_NFRAMES 8192      /* a quarter of them bounds a buffer: room for a few MB */
#include "tests/unit/tcp/tcp_test.h"

/* 10 MB/s bottleneck, 25 ms each way: RTT 50 ms, BDP 500 kB, a 250 kB queue. 256 KiB per round
 * trip is 5.2 MB/s. */
#define LINK_BPS 10000000
#define DEFAULT_BUF (256 * 1024)


struct run {
    double mbps;
    uint32_t sndbuf, rcvbuf, a_wscale, b_wscale, max_cwnd;
    uint64_t retrans, ooo_drops, dsacks;
};

/* A:40000 -> B:80, algorithm cc; lock: both applications set 256 KiB buffers first. */
static struct run transfer(int cc, bool lock, uint8_t moderate, uint64_t bytes, unsigned drop_pct)
{
    struct run r = { 0 };
    static struct tpair p;
    tp_init(&p, 8, 11);
    p.rate_Bps = LINK_BPS;
    p.qlimit = 250000;
    p.delay = 25 * SLIP_MSEC;
    p.b->moderate_rcvbuf = moderate;
    int l = tcp_conn__open(p.b);
    if (lock)
        tcp_conn__setopt(tp_env(&p, p.b), p.b, (slip_idx_t)l, TCPO_RCVBUF, DEFAULT_BUF);
    CHECK(tcp_conn__listen(p.b, (slip_idx_t)l, 0, 80, 8), ==, 0);
    struct ip_env *env = tp_env(&p, p.a);
    int c = tcp_conn__open(p.a);
    if (lock)
        tcp_conn__setopt(env, p.a, (slip_idx_t)c, TCPO_SNDBUF, DEFAULT_BUF);
    tcp_conn__setopt(env, p.a, (slip_idx_t)c, TCPO_CONGESTION, cc);
    CHECK(tcp_conn__connect(env, p.a, (slip_idx_t)c, US, 40000, B_ADDR, 80), ==, -EINPROGRESS);
    int acc = tp_establish(&p, l, (slip_idx_t)c);
    CHECK(acc, >=, 0);
    if (acc < 0) {
        tp_fini(&p);
        return r;
    }
    slip_idx_t ac = (slip_idx_t)c, bc = (slip_idx_t)acc;
    struct tcp_conn *a = tcp_conn__get(p.a, ac), *b = tcp_conn__get(p.b, bc);
    r.a_wscale = a->rcv_wscale;
    r.b_wscale = b->rcv_wscale;
    p.drop_pct = drop_pct;
    struct tp_xfer x = { p.a, p.b, ac, bc, bytes, 0, 0, false, false };
    slip_time_t t0 = p.h.env.now;
    for (long steps = 0; x.rcvd < bytes && steps < 20000000; steps++) {
        tp_pump(&p, &x);
        tp_step(&p);
        r.max_cwnd = SLIP_MAX(r.max_cwnd, a->cwnd);
    }
    CHECK(x.rcvd, ==, bytes);
    CHECK(x.bad, ==, false);
    r.mbps = (double)bytes / ((double)(p.h.env.now - t0) / 1e9) / 1e6;
    r.retrans = p.a->c.retransmits;
    r.ooo_drops = b->st.ooo_drops;
    r.dsacks = p.a->c.dsacks_in;
    r.sndbuf = a->sndbuf;
    r.rcvbuf = b->rcvbuf;
    printf("  %s %s moderate=%u loss %u%%: %.2f MB/s, %llu resent (%llu D-SACKed), %llu out-of-order dropped, sndbuf %u (max cwnd %u), rcvbuf %u, wscale A %u B %u\n",
           cc == TCP_CC_BBR ? "BBR" : "CUBIC", lock ? "SO_SNDBUF/SO_RCVBUF 256 KiB" : "autotuned", moderate,
           drop_pct, r.mbps, (unsigned long long)r.retrans, (unsigned long long)r.dsacks, (unsigned long long)r.ooo_drops, r.sndbuf, r.max_cwnd, r.rcvbuf, r.a_wscale, r.b_wscale);
    tcp_conn__abort(tp_env(&p, p.a), p.a, ac);
    tcp_conn__abort(tp_env(&p, p.b), p.b, bc);
    tcp_conn__close(tp_env(&p, p.b), p.b, (slip_idx_t)l);
    tp_fini(&p);
    return r;
}

/* Both algorithms: autotuned buffers grow past 256 KiB, the sender's to no more than twice its
 * largest cwnd, and the transfer runs at least 1.4x the locked one, which cannot pass one
 * buffer per round trip. The offered window scale covers Linux's default tcp_rmem[2] (6 MiB:
 * 7) when autotuned, the set buffer (256 KiB: 3) when locked (B's SO_RCVBUF; A's receive
 * buffer is autotuned in both runs). */
TEST(test_buffers_grow_to_the_path)
{
    static const int ccs[] = { TCP_CC_BBR, TCP_CC_CUBIC };
    for (unsigned k = 0; k < SLIP_ARRAY_SIZE(ccs); k++) {
        struct run fixed = transfer(ccs[k], true, 0, 24 << 20, 0);
        struct run tuned = transfer(ccs[k], false, 0, 24 << 20, 0);
        CHECK(fixed.sndbuf, ==, DEFAULT_BUF);
        CHECK(fixed.rcvbuf, ==, DEFAULT_BUF);
        CHECK(fixed.b_wscale, ==, 3);
        CHECK((long)(fixed.mbps * 100), <=, (long)(DEFAULT_BUF / 0.050 / 1e6 * 100) + 5);
        CHECK(tuned.a_wscale, ==, 7);
        CHECK(fixed.a_wscale, ==, 7);
        CHECK(tuned.retrans, <, 24u << 20 >> 10);     /* under one per KiB: no resend storm */
        CHECK(tuned.b_wscale, ==, 7);
        CHECK(tuned.sndbuf, >, DEFAULT_BUF);
        CHECK(tuned.sndbuf, <=, 2 * tuned.max_cwnd);
        CHECK(tuned.rcvbuf, >, DEFAULT_BUF);
        CHECK((long)(tuned.mbps * 100), >, (long)(fixed.mbps * 140));
    }
}

/* net.ipv4.tcp_moderate_rcvbuf = 0 (stored + 1): the receive buffer stays where it started, the
 * send buffer still grows. */
TEST(test_moderate_rcvbuf_off_keeps_the_receive_buffer)
{
    struct run r = transfer(TCP_CC_BBR, false, 1, 8 << 20, 0);
    CHECK(r.rcvbuf, ==, DEFAULT_BUF);
    CHECK(r.b_wscale, ==, 3);
    CHECK(r.sndbuf, >, DEFAULT_BUF);
}

/* BBR with 1 % random loss each way, on top of the tail drops of its startup (about two of
 * every three segments for a round trip once the queue is full): the receive window of MBs
 * holds far more than 256 segments behind a hole, and the receiver keeps them all (a bound of
 * 256 dropped most of each window after a loss, every one of them sent again); it reports
 * every one in a SACK block however many holes lie below (reports stopped at the 64th run);
 * and the sender's scoreboard and transmit map, grown into a large map of the pool
 * (tcp_map.c), keep a block per hole of a window of 1,000 segments. Then nothing is resent
 * that had arrived: the receiver reports no duplicate (D-SACK; with 32 blocks and 256 records
 * it reported 568 of 1,011 resent), and the transfer runs at over 2.5 times the locked rate
 * (7.6 against 2.4 MB/s here; 5.6 before). */
TEST(test_a_large_window_keeps_its_out_of_order_segments)
{
    struct run fixed = transfer(TCP_CC_BBR, true, 0, 16 << 20, 1);
    struct run tuned = transfer(TCP_CC_BBR, false, 0, 16 << 20, 1);
    CHECK(tuned.ooo_drops, ==, 0);
    CHECK(tuned.dsacks, <=, 4);
    CHECK(tuned.retrans, <, (uint64_t)(16 << 20) / 1448 / 5);
    CHECK((long)(tuned.mbps * 100), >, (long)(fixed.mbps * 250));
}

TEST_MAIN()
