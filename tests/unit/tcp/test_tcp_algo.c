/* TCP arithmetic without packets: sequence comparisons, SipHash test vectors, ISNs (RFC 6528),
 * SYN cookies, the RTO estimator (RFC 6298 worked numbers), NewReno and CUBIC window arithmetic
 * (RFC 5681, RFC 9438), the RFC 6675 scoreboard (IsLost, pipe, NextSeg), receiver SACK blocks. */
#include <math.h>

#include "tests/unit/tcp/tcp_test.h"

static struct tcp_conn *fresh_conn(struct tcp_shared **shp)
{
    *shp = t_new_shared(4);
    int i = tcp_conn__alloc(*shp);
    struct tcp_conn *c = tcp_conn__get(*shp, (slip_idx_t)i);
    c->mss = 1000;
    return c;
}

TEST(test_seq_wraparound)
{
    CHECK(seq_lt(0xfffffff0u, 0x10u), ==, 1);
    CHECK(seq_gt(0x10u, 0xfffffff0u), ==, 1);
    CHECK(seq_leq(5, 5), ==, 1);
    CHECK(seq_geq(0x80000000u, 0x7fffffffu), ==, 1);
    CHECK(seq_in(0, 0xffffff00u, 0x100u), ==, 1);
    CHECK(seq_max(0xfffffff0u, 0x10u), ==, 0x10u);
}

/* Test vectors from the SipHash paper, appendix A: key 00..0f, messages 00..(n-1). */
TEST(test_siphash_vectors)
{
    uint64_t key[2] = { 0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull };
    uint8_t msg[64];
    for (int i = 0; i < 64; i++)
        msg[i] = (uint8_t)i;
    CHECK(tcp_siphash(key, msg, 0), ==, (long long)0x726fdb47dd0e0e31ull);
    CHECK(tcp_siphash(key, msg, 15), ==, (long long)0xa129ca6149be45e5ull);
}

TEST(test_isn_monotonic_and_keyed)
{
    struct tcp_shared *sh = t_new_shared(1);
    uint32_t a = tcp_isn(sh, US, 1000, PEER, 80, 1 * SLIP_SEC);
    uint32_t b = tcp_isn(sh, US, 1000, PEER, 80, 1 * SLIP_SEC + 4 * SLIP_USEC);
    uint32_t c = tcp_isn(sh, US, 1000, PEER, 80, 2 * SLIP_SEC);
    CHECK(b - a, ==, 1);                        /* 4 µs ticks */
    CHECK(c - a, ==, 250000);                   /* 1 s = 250000 ticks */
    uint32_t other = tcp_isn(sh, US, 1001, PEER, 80, 1 * SLIP_SEC);
    CHECK(other, !=, a);                        /* another tuple: another offset */
    struct tcp_shared *sh2 = malloc(tcp_shared__bytes(1));
    uint8_t key[32] = { 9 };
    tcp_shared__init(sh2, 1, key);
    CHECK(tcp_isn(sh2, US, 1000, PEER, 80, 1 * SLIP_SEC), !=, a);   /* another key */
    free(sh);
    free(sh2);
}

TEST(test_syncookie_encode_decode)
{
    struct tcp_shared *sh = t_new_shared(1);
    slip_time_t now = 5000 * SLIP_SEC;
    for (unsigned k = 0; k < 4; k++) {
        struct tcp_cookie_opts o = { .mss = (uint16_t)(tcp_syncookie_mss[k] + 3) };
        uint32_t ck = tcp_syncookie__make(sh, US, 80, PEER, 5555, 12345, now, &o, NULL);
        struct tcp_cookie_opts got;
        CHECK(tcp_syncookie__check(sh, US, 80, PEER, 5555, 12345, ck, now + 90 * SLIP_SEC, false, 0, &got), ==, 0);
        CHECK(got.mss, ==, tcp_syncookie_mss[k]);
        CHECK(got.ts_ok, ==, false);
        /* Wrong tuple, wrong peer sequence, too old: rejected. */
        CHECK(tcp_syncookie__check(sh, US, 80, PEER, 5556, 12345, ck, now, false, 0, &got), ==, -EINVAL);
        CHECK(tcp_syncookie__check(sh, US, 80, PEER, 5555, 12346, ck, now, false, 0, &got), ==, -EINVAL);
        CHECK(tcp_syncookie__check(sh, US, 80, PEER, 5555, 12345, ck, now + 200 * SLIP_SEC, false, 0, &got), ==, -EINVAL);
    }
    /* With timestamps: wscale and SACK ride in the low bits of TSval. */
    struct tcp_cookie_opts o = { .mss = 1460, .ts_ok = true, .sack_ok = true, .ws_ok = true, .wscale = 9 };
    uint32_t ts = 0x12345678;
    uint32_t ck = tcp_syncookie__make(sh, US, 80, PEER, 5555, 1, now, &o, &ts);
    CHECK(seq_leq(ts, 0x12345678), ==, 1);
    CHECK(ts & 0x3f, ==, 9 | 0x10);
    struct tcp_cookie_opts got;
    CHECK(tcp_syncookie__check(sh, US, 80, PEER, 5555, 1, ck, now, true, ts, &got), ==, 0);
    CHECK(got.ws_ok && got.sack_ok && got.ts_ok, ==, 1);
    CHECK(got.wscale, ==, 9);
    /* Random guesses almost never pass (4 valid MSS indexes in 2^24). */
    unsigned pass = 0;
    uint64_t rng = 99;
    for (int i = 0; i < 100000; i++)
        pass += tcp_syncookie__check(sh, US, 80, PEER, 5555, 1, t_rand(&rng), now, false, 0, &got) == 0;
    CHECK(pass, <, 3);
    free(sh);
}

/* RFC 6298 §2: first sample R: SRTT = R, RTTVAR = R/2, RTO = SRTT + 4 RTTVAR; then
 * RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R'|, SRTT = 7/8 SRTT + 1/8 R'. */
TEST(test_rto_rfc6298_arithmetic)
{
    struct tcp_shared *sh;
    struct tcp_conn *c = fresh_conn(&sh);
    CHECK(tcp_rto(c), ==, TCP_RTO_INIT);
    tcp_rtt__sample(c, 100 * SLIP_MSEC);
    CHECK(c->srtt_us, ==, 100000);
    CHECK(c->rttvar_us, ==, 50000);
    CHECK(tcp_rto(c), ==, 300 * SLIP_MSEC);
    tcp_rtt__sample(c, 200 * SLIP_MSEC);
    CHECK(c->rttvar_us, ==, 62500);
    CHECK(c->srtt_us, ==, 112500);
    CHECK(tcp_rto(c), ==, 362500 * SLIP_USEC);
    /* Backoff doubles, bounded by TCP_RTO_MAX. */
    c->rxt_shift = 2;
    CHECK(tcp_rto(c), ==, 4 * 362500 * SLIP_USEC);
    c->rxt_shift = 12;
    CHECK(tcp_rto(c), ==, TCP_RTO_MAX);
    /* A tiny RTT: SRTT plus the 200 ms floor on the variance term (Linux tcp_set_rto; RFC 6298
     * §2.4 would say 1 s for the whole RTO). */
    c->rxt_shift = 0;
    for (int i = 0; i < 50; i++)
        tcp_rtt__sample(c, 1 * SLIP_MSEC);
    CHECK(c->srtt_us, <, 1200);
    CHECK(tcp_rto(c), ==, (slip_time_t)c->srtt_us * SLIP_USEC + TCP_RTO_MIN);
    /* A 50 ms path (first sample: RTTVAR = 25 ms, 4*RTTVAR = 100 ms): 250 ms as Linux, where a
     * floor on the whole RTO gave 200 ms, below SRTT + a delayed ACK + some queueing. */
    c->srtt_us = 0;
    tcp_rtt__sample(c, 50 * SLIP_MSEC);
    CHECK(tcp_rto(c), ==, 250 * SLIP_MSEC);
    tcp_rtt__sample(c, 50 * SLIP_MSEC);
    CHECK(c->rttvar_us, ==, 18750);
    CHECK(tcp_rto(c), ==, 250 * SLIP_MSEC);
    free(sh);
}

TEST(test_newreno_cwnd_arithmetic)
{
    struct tcp_shared *sh;
    struct tcp_conn *c = fresh_conn(&sh);
    c->cc_algo = TCP_CC_NEWRENO;
    const struct tcp_cc_ops *cc = tcp_cc__get(TCP_CC_NEWRENO);
    cc->init(c);
    CHECK(c->cwnd, ==, 10000);           /* IW10 */
    /* Slow start: +min(acked, L SMSS) per ACK, L = 8 unpaced (RFC 9406 §4.3). */
    cc->on_ack(c, 1000, 0);
    CHECK(c->cwnd, ==, 11000);
    cc->on_ack(c, 5000, 0);
    CHECK(c->cwnd, ==, 16000);
    cc->on_ack(c, 12000, 0);
    CHECK(c->cwnd, ==, 24000);
    c->cwnd = 13000;
    /* Loss: ssthresh = max(flight/2, 2 SMSS). */
    c->snd_una = 0;
    c->snd_max = 12000;
    c->ssthresh = cc->ssthresh(c, 0);
    CHECK(c->ssthresh, ==, 6000);
    c->snd_max = 1000;
    CHECK(cc->ssthresh(c, 0), ==, 2000);
    /* Congestion avoidance: +1 SMSS per cwnd of bytes acknowledged. */
    c->cwnd = 6000;
    c->ssthresh = 6000;
    for (int i = 0; i < 5; i++)
        cc->on_ack(c, 1000, 0);
    CHECK(c->cwnd, ==, 6000);
    cc->on_ack(c, 1000, 0);
    CHECK(c->cwnd, ==, 7000);
    /* Slow start stops at ssthresh and the rest counts toward avoidance. */
    c->cwnd = 5500;
    c->ssthresh = 6000;
    c->cc.acked_acc = 0;
    cc->on_ack(c, 2000, 0);
    CHECK(c->cwnd, ==, 6000);
    CHECK(c->cc.acked_acc, ==, 1500);
    free(sh);
}

/* RFC 9438 §4.2: W_cubic(t) = C (t - K)^3 + W_max with K = cbrt(W_max (1 - beta) / C) when
 * cwnd_epoch = beta W_max. For W_max = 100, beta 0.7, C 0.4: K = cbrt(75) = 4.2172 s. */
TEST(test_cubic_formula_values)
{
    double k = tcp_cubic__k(100.0, 70.0);
    CHECK(fabs(k - cbrt(75.0)) < 1e-9, ==, 1);
    CHECK(fabs(k - 4.2172) < 1e-3, ==, 1);
    CHECK(fabs(tcp_cubic__w(0.0, k, 100.0) - 70.0) < 1e-9, ==, 1);     /* starts at beta W_max */
    CHECK(fabs(tcp_cubic__w(k, k, 100.0) - 100.0) < 1e-9, ==, 1);      /* plateau at K */
    CHECK(fabs(tcp_cubic__w(k + 2.0, k, 100.0) - 103.2) < 1e-9, ==, 1); /* 0.4 * 8 above */
    CHECK(tcp_cubic__k(50.0, 60.0), ==, 0);
}

TEST(test_cubic_reduction_and_growth)
{
    struct tcp_shared *sh;
    struct tcp_conn *c = fresh_conn(&sh);
    c->cc_algo = TCP_CC_CUBIC;
    const struct tcp_cc_ops *cc = tcp_cc__get(TCP_CC_CUBIC);
    cc->init(c);
    c->cwnd = 100000;                    /* 100 segments */
    c->snd_una = 0;
    c->snd_max = 100000;
    c->ssthresh = cc->ssthresh(c, 10 * SLIP_SEC);
    CHECK(c->ssthresh, ==, 70000);       /* beta = 0.7 */
    CHECK(fabs(c->cc.w_max - 100.0) < 1e-9, ==, 1);
    c->cwnd = c->ssthresh;
    c->srtt_us = 100000;
    /* Avoidance: the window climbs back towards W_max, concave, near it by t = K. */
    slip_time_t t0 = 10 * SLIP_SEC;
    slip_time_t t = t0;
    uint32_t prev = c->cwnd;
    bool monotonic = true;
    while (t < t0 + 4 * SLIP_SEC) {
        for (uint32_t acked = 0; acked < c->cwnd; acked += 1000)
            cc->on_ack(c, 1000, t);
        monotonic &= c->cwnd >= prev;
        prev = c->cwnd;
        t += 100 * SLIP_MSEC;
    }
    CHECK(monotonic, ==, 1);
    CHECK(c->cwnd, >, 90000);
    CHECK(c->cwnd, <=, 101000);
    CHECK(fabs(c->cc.k - cbrt(75.0)) < 1e-6, ==, 1);
    /* Fast convergence: a loss below the previous W_max lowers W_max to cwnd (1 + beta) / 2. */
    c->cwnd = 80000;
    c->snd_max = c->snd_una + 80000;
    cc->ssthresh(c, t);
    CHECK(fabs(c->cc.w_max - 80.0 * 0.85) < 1e-9, ==, 1);
    free(sh);
}

/* RFC 6675 §4: a scoreboard with holes [0,1000) and [2000,3000) lost, SACKed [1000,2000) and
 * [3000,6000) (SMSS 1000, DupThresh 3). */
TEST(test_sack_scoreboard_pipe_nextseg)
{
    struct tcp_shared *sh;
    struct tcp_conn *c = fresh_conn(&sh);
    c->snd_una = 0;
    c->high_rxt = 0;
    c->snd_max = 8000;
    c->snd_q_seq = 0;
    struct wire_tcp_opts o;
    memset(&o, 0, sizeof(o));
    o.nsack = 2;
    o.sack[0].left = 3000;
    o.sack[0].right = 6000;
    o.sack[1].left = 1000;
    o.sack[1].right = 2000;
    CHECK(tcp_sack__update(c, &o), ==, 4000);
    CHECK(c->nsb, ==, 2);
    CHECK(tcp_sack__update(c, &o), ==, 0);          /* nothing new */
    CHECK(tcp_sack__is_lost(c, 0), ==, 1);          /* 4000 bytes SACKed above > 2 SMSS */
    CHECK(tcp_sack__is_lost(c, 2000), ==, 1);       /* 3000 above */
    CHECK(tcp_sack__is_lost(c, 6000), ==, 0);       /* nothing above */
    /* pipe: holes [0,1000) and [2000,3000) lost (0), [6000,8000) in flight (2000). */
    CHECK(tcp_sack__pipe(c), ==, 2000);
    uint32_t seq, len;
    bool rx;
    CHECK(tcp_sack__next_seg(c, &seq, &len, &rx), ==, true);
    CHECK(seq, ==, 0);
    CHECK(len, ==, 1000);
    CHECK(rx, ==, true);
    c->high_rxt = 1000;                             /* retransmitted the first hole */
    CHECK(tcp_sack__pipe(c), ==, 3000);
    CHECK(tcp_sack__next_seg(c, &seq, &len, &rx), ==, true);
    CHECK(seq, ==, 2000);
    c->high_rxt = 3000;
    /* Rule 2: no new data queued, rule 3: nothing unSACKed above HighRxt below a SACK block. */
    CHECK(tcp_sack__next_seg(c, &seq, &len, &rx), ==, false);
    /* Adjacent blocks merge; blocks below SND.UNA are ignored; clean trims. */
    o.nsack = 2;
    o.sack[0].left = 2000;
    o.sack[0].right = 3000;
    o.sack[1].left = 0;
    o.sack[1].right = 0;
    tcp_sack__update(c, &o);
    CHECK(c->nsb, ==, 1);
    CHECK(c->sb[0].start, ==, 1000);
    CHECK(c->sb[0].end, ==, 6000);
    c->snd_una = 4000;
    tcp_sack__clean(c);
    CHECK(c->sb[0].start, ==, 4000);
    c->snd_una = 6000;
    tcp_sack__clean(c);
    CHECK(c->nsb, ==, 0);
    free(sh);
}

static void sack_one(struct tcp_conn *c, uint32_t left, uint32_t right)
{
    struct wire_tcp_opts o;
    memset(&o, 0, sizeof(o));
    o.nsack = 1;
    o.sack[0].left = left;
    o.sack[0].right = right;
    tcp_sack__update(c, &o);
}

/* The scoreboard outgrows the connection's TCP_SACK_MAX blocks into a large map of the pool
 * (tcp_map.c), keeps every block up to TCP_BIG_SACK, then forgets the highest (a lower block
 * still enters, pushing the highest out); it goes back to the pool once nothing is outstanding.
 * With the pool empty the connection's own blocks overflow the same way. */
TEST(test_sack_scoreboard_grows_then_forgets_highest)
{
    struct tcp_shared *sh;
    struct tcp_conn *c = fresh_conn(&sh);
    c->snd_una = 0;
    c->snd_max = 2000 * (TCP_BIG_SACK + 10);
    for (uint32_t i = 0; i < TCP_SACK_MAX + 5; i++)
        sack_one(c, 2000 * (i + 1), 2000 * (i + 1) + 1000);
    CHECK(c->nsb, ==, TCP_SACK_MAX + 5);
    CHECK(c->map, !=, 0);
    CHECK(sh->c.big_maps_taken, ==, 1);
    for (uint32_t i = 0; i < TCP_SACK_MAX + 5; i++)
        CHECK(tcp_sb(c)[i].start, ==, 2000 * (i + 1));
    for (uint32_t i = TCP_SACK_MAX + 5; i < TCP_BIG_SACK + 5; i++)
        sack_one(c, 2000 * (i + 1), 2000 * (i + 1) + 1000);
    CHECK(c->nsb, ==, TCP_BIG_SACK);
    CHECK(tcp_sb(c)[TCP_BIG_SACK - 1].start, ==, 2000 * TCP_BIG_SACK);
    CHECK(tcp_sack__unsacked(c, 0, 2000 * (TCP_BIG_SACK + 1)), ==, 2000 * (TCP_BIG_SACK + 1) - 1000 * TCP_BIG_SACK);
    CHECK(tcp_sack__unsacked(c, 2500, 5500), ==, 1500);
    sack_one(c, 500, 600);
    CHECK(tcp_sb(c)[0].start, ==, 500);
    CHECK(c->nsb, ==, TCP_BIG_SACK);
    CHECK(tcp_sb(c)[TCP_BIG_SACK - 1].start, ==, 2000 * (TCP_BIG_SACK - 1));
    /* A block joining two: they become one. */
    sack_one(c, 3000, 4000);
    CHECK(tcp_sb(c)[1].start, ==, 2000);
    CHECK(tcp_sb(c)[1].end, ==, 5000);
    CHECK(c->nsb, ==, TCP_BIG_SACK - 1);
    /* Everything acknowledged: the map goes back. */
    c->snd_una = c->snd_max;
    tcp_sack__clean(c);
    tcp_rack__trim(c);
    CHECK(c->nsb, ==, 0);
    CHECK(c->map, ==, 0);
    CHECK(sh->map_free, !=, 0);
    /* The pool empty (every map handed out): the connection's own blocks, as before. */
    sh->map_free = 0;
    sh->map_high = sh->nmaps;
    c->snd_una = 0;
    for (uint32_t i = 0; i < TCP_SACK_MAX + 5; i++)
        sack_one(c, 2000 * (i + 1), 2000 * (i + 1) + 1000);
    CHECK(c->map, ==, 0);
    CHECK(c->nsb, ==, TCP_SACK_MAX);
    CHECK(c->sb[TCP_SACK_MAX - 1].start, ==, 2000 * TCP_SACK_MAX);
    CHECK(sh->c.big_maps_none, >, 0);
    free(sh);
}

/* The fuzz-style robustness check in unit form: random segments against every state must not
 * crash, leak or break the table. */
TEST(test_random_segments_every_state_no_leak)
{
    struct harness h;
    harness_init(&h);
    struct tcp_shared *sh = t_new_shared(32);
    uint64_t rng = 4242;
    int l = tcp_conn__open(sh);
    tcp_conn__listen(sh, (slip_idx_t)l, 0, 80, 4);
    int a = tcp_conn__open(sh);
    tcp_conn__connect(&h.env, sh, (slip_idx_t)a, 0, 40000, PEER, 80);
    for (int i = 0; i < 20000; i++) {
        uint8_t data[64];
        for (unsigned k = 0; k < sizeof(data); k++)
            data[k] = (uint8_t)t_rand(&rng);
        struct tseg t = { .sport = (uint16_t)(t_rand(&rng) & 1 ? 80 : 5555 + (t_rand(&rng) & 3)),
                          .dport = (uint16_t)(t_rand(&rng) & 1 ? 80 : 40000),
                          .seq = t_rand(&rng) & 1 ? t_rand(&rng) : tcp_conn__get(sh, (slip_idx_t)a)->rcv_nxt,
                          .ack = t_rand(&rng) & 1 ? t_rand(&rng) : tcp_conn__get(sh, (slip_idx_t)a)->snd_nxt,
                          .flags = (uint8_t)t_rand(&rng), .win = (uint16_t)t_rand(&rng),
                          .data = data, .len = t_rand(&rng) % 3 ? 0 : t_rand(&rng) % sizeof(data) };
        if (t_rand(&rng) % 4 == 0)
            t.opts = t_synopts((uint16_t)t_rand(&rng), (int)(t_rand(&rng) % 20) - 2, t_rand(&rng) & 1,
                               t_rand(&rng) & 1, t_rand(&rng));
        if (t_rand(&rng) % 8 == 0) {
            t.opts.nsack = (uint8_t)(t_rand(&rng) % 4);
            for (unsigned k = 0; k < t.opts.nsack; k++) {
                t.opts.sack[k].left = t_rand(&rng);
                t.opts.sack[k].right = t_rand(&rng);
            }
        }
        t_feed(&h, sh, &t);
        h_free_sent(&h);
        if (i % 100 == 0) {
            h.env.now += (t_rand(&rng) % 2000) * SLIP_MSEC;
            tcp_timer__poll(&h.env, sh);
            h_free_sent(&h);
        }
        if (i % 1000 == 0) {
            int acc;
            while ((acc = tcp_conn__accept(sh, (slip_idx_t)l)) >= 0)
                tcp_conn__close(&h.env, sh, (slip_idx_t)acc);
            if (tcp_conn__get(sh, (slip_idx_t)a)->state == TCPS_CLOSED) {
                tcp_conn__close(&h.env, sh, (slip_idx_t)a);
                a = tcp_conn__open(sh);
                tcp_conn__connect(&h.env, sh, (slip_idx_t)a, 0, 40000, PEER, 80);
            }
        }
    }
    tcp_conn__abort(&h.env, sh, (slip_idx_t)a);
    tcp_conn__close(&h.env, sh, (slip_idx_t)l);
    h.env.now += 1000 * SLIP_SEC;
    tcp_timer__poll(&h.env, sh);
    h_free_sent(&h);
    CHECK(sh->nused, ==, 0);
    free(sh);
    harness_fini(&h);
}

TEST_MAIN()
