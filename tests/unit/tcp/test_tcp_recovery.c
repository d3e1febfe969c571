/* Loss recovery of the sender, one rule per test, against crafted peer ACKs (the harness of
 * test_tcp_state.c, reduced to what these need): spurious-timeout and spurious-recovery undo
 * (RFC 3522 timestamps, RFC 2883/3708 D-SACK), RACK with a SACK of a few bytes (packetdrill
 * fr-4pkt-fack-last-byte), PRR on the ACK that starts recovery and RACK.rtt taken in Linux's
 * order after an ACK below SND.UNA (prr-ss-ack-below-snd_una-cubic) and without segments SACKed
 * before a cumulative ACK, a recovery that restarts on its last ACK while a loss is still out,
 * HyStart++ (RFC 9406) and CUBIC's Reno-friendly region (RFC 9438 §4.3). */
#include <math.h>

#include "tests/unit/tcp/tcp_test.h"

struct st {
    struct harness h;
    struct tcp_shared *sh;
    struct ip_env *env;
    slip_idx_t c;
    uint32_t iss, pseq, tsval, our_tsval;
    bool ts;
};

static void st_init(struct st *s)
{
    memset(s, 0, sizeof(*s));
    harness_init(&s->h);
    s->sh = t_new_shared(8);
    s->env = &s->h.env;
    s->tsval = 1000;
}

static void st_fini(struct st *s)
{
    tcp_conn__abort(s->env, s->sh, s->c);
    CHECK(s->sh->nused, ==, 0);
    tcp_shared__purge(s->sh, &s->h.pool);
    free(s->sh);
    harness_fini(&s->h);
}

static struct tcp_conn *C(struct st *s) { return tcp_conn__get(s->sh, s->c); }

/* An ACK from the peer: una, up to two SACK blocks (nsack), timestamps echoing tsecr. */
static void ack(struct st *s, uint32_t una, unsigned nsack, const uint32_t (*blk)[2], uint32_t tsecr)
{
    struct tseg t = { .sport = 80, .dport = 40000, .seq = s->pseq, .ack = una, .flags = WIRE_TCP_ACK,
                      .win = 1000 };
    for (unsigned i = 0; i < nsack; i++) {
        t.opts.sack[i].left = blk[i][0];
        t.opts.sack[i].right = blk[i][1];
    }
    t.opts.nsack = (uint8_t)nsack;
    if (s->ts) {
        t.opts.has_ts = true;
        t.opts.tsval = ++s->tsval;
        t.opts.tsecr = tsecr;
    }
    t_feed(&s->h, s->sh, &t);
}

/* connect() + SYN-ACK (MSS 1460, SACK, window scale 7, timestamps when ts). */
static void st_active(struct st *s, bool ts)
{
    s->ts = ts;
    int c = tcp_conn__open(s->sh);
    CHECK(c, >=, 0);
    s->c = (slip_idx_t)c;
    CHECK(tcp_conn__connect(s->env, s->sh, s->c, 0, 40000, PEER, 80), ==, -EINPROGRESS);
    struct tout o;
    CHECK(t_last(&s->h, &o), ==, true);
    s->iss = o.th.seq;
    s->our_tsval = o.th.opts.tsval;
    h_free_sent(&s->h);
    struct tseg sa = { .sport = 80, .dport = 40000, .seq = 5000, .ack = s->iss + 1,
                       .flags = WIRE_TCP_SYN | WIRE_TCP_ACK, .win = 65535,
                       .opts = t_synopts(1460, 7, true, ts, s->tsval) };
    sa.opts.tsecr = s->our_tsval;
    t_feed(&s->h, s->sh, &sa);
    s->pseq = 5001;
    CHECK(C(s)->state, ==, TCPS_ESTABLISHED);
    h_free_sent(&s->h);
}

/* SRTT 10 ms, RTTVAR 2.5 ms, and the RTO far (210 ms): probes and RACK act long before it. */
static void st_timing(struct st *s)
{
    C(s)->srtt_us = 10000;
    C(s)->rttvar_us = 2500;
    C(s)->rto_us = 210000;
}

static void send_bytes(struct st *s, size_t n)
{
    static char buf[64 * 1460];
    memset(buf, 'x', sizeof(buf));
    struct iovec iov = { buf, n };
    CHECK(tcp_conn__send(s->env, s->sh, s->c, &iov, 1, 0), ==, (ssize_t)n);
}

/* Runs timers up to now + dt. */
static void advance(struct st *s, slip_time_t dt)
{
    slip_time_t end = s->env->now + dt;
    for (;;) {
        slip_time_t next = tcp_timer__poll(s->env, s->sh);
        if (next > end)
            break;
        s->env->now = next > s->env->now ? next : s->env->now;
        tcp_timer__poll(s->env, s->sh);
    }
    s->env->now = end;
    tcp_timer__poll(s->env, s->sh);
}

/* Data segments sent at seq since the last h_free_sent; *tsval gets the last one's TSval. */
static unsigned sent_at(struct st *s, uint32_t seq, uint32_t *tsval)
{
    unsigned n = 0;
    for (unsigned i = 0; i < s->h.nsent; i++) {
        struct tout o;
        if (t_sent(&s->h, i, &o) && o.len && o.th.seq == seq) {
            n++;
            if (tsval)
                *tsval = o.th.opts.tsval;
        }
    }
    return n;
}

static unsigned data_sent(struct st *s)
{
    unsigned n = 0;
    for (unsigned i = 0; i < s->h.nsent; i++) {
        struct tout o;
        if (t_sent(&s->h, i, &o) && o.len)
            n++;
    }
    return n;
}

/* Ten segments out, all delivered, but every ACK is lost: the RTO fires and resends the
 * first. The ACK that then arrives echoes the original's timestamp (RFC 3522 §3.2): the timeout
 * was spurious, and cwnd, ssthresh come back (Linux; RFC 4015 §2: SND.NXT = SND.MAX). */
TEST(test_rto_spurious_by_timestamp_is_undone)
{
    struct st s;
    st_init(&s);
    st_active(&s, true);
    send_bytes(&s, 10 * 1448);
    uint32_t mss = tcp_output__data_mss(C(&s)), una = s.iss + 1;
    CHECK(mss, ==, 1448);
    uint32_t orig_ts = 0;
    CHECK(sent_at(&s, una, &orig_ts), ==, 1);
    uint32_t cwnd0 = C(&s)->cwnd, ssthresh0 = C(&s)->ssthresh;
    h_free_sent(&s.h);
    advance(&s, 300 * SLIP_MSEC);
    CHECK(C(&s)->st.rto_expiries, ==, 1);
    CHECK(C(&s)->cwnd, ==, mss);
    uint32_t rxt_ts = 0;
    /* The timeout's retransmission alone: no probe follows a timeout until an ACK of new data
     * shows the path alive (RFC 8961 §4: only the backed-off RTO retransmits until then). */
    CHECK(sent_at(&s, una, &rxt_ts), ==, 1);
    CHECK(C(&s)->st.recovery_probes, ==, 0);
    CHECK(seq_gt(rxt_ts, orig_ts), ==, 1);
    ack(&s, una + 10 * mss, 0, NULL, orig_ts);
    CHECK(C(&s)->st.undos, ==, 1);
    CHECK(s.sh->c.spurious_rto, ==, 1);
    CHECK(C(&s)->cwnd, >=, cwnd0);
    CHECK(C(&s)->ssthresh, ==, ssthresh0);
    CHECK(!!(C(&s)->flags & TCPF_LOSS), ==, 0);
    st_fini(&s);
}

/* The same timeout, but the segment was really lost: the ACK echoes the retransmission's
 * timestamp, nothing is undone and cwnd stays at what the timeout left. */
TEST(test_rto_real_loss_is_not_undone)
{
    struct st s;
    st_init(&s);
    st_active(&s, true);
    send_bytes(&s, 10 * 1448);
    uint32_t mss = tcp_output__data_mss(C(&s)), una = s.iss + 1;
    h_free_sent(&s.h);
    advance(&s, 300 * SLIP_MSEC);
    uint32_t rxt_ts = 0;
    CHECK(sent_at(&s, una, &rxt_ts), ==, 1);     /* the timeout's; no probe after it */
    ack(&s, una + 10 * mss, 0, NULL, rxt_ts);
    CHECK(C(&s)->st.undos, ==, 0);
    CHECK(s.sh->c.spurious_rto, ==, 0);
    /* The loss window (1 SMSS) and one slow-start step (at most L = 8 SMSS): not the 10 SMSS
     * an undo would give back. */
    CHECK(C(&s)->cwnd, <=, 9 * mss);
    CHECK(C(&s)->ssthresh, <, 10 * mss);
    st_fini(&s);
}

/* Fast recovery for segment 0, which was only delayed: the receiver reports the
 * retransmission as a duplicate (RFC 2883 D-SACK, first block below the cumulative ACK);
 * with every retransmission of the episode D-SACKed the reduction is undone (RFC 3708 §3). */
TEST(test_recovery_undone_by_dsack)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    send_bytes(&s, 10 * 1460);
    uint32_t mss = tcp_output__data_mss(C(&s)), una = s.iss + 1;
    uint32_t cwnd0 = C(&s)->cwnd;
    h_free_sent(&s.h);
    s.env->now += 2 * SLIP_MSEC;
    uint32_t b[2][2] = { { una + mss, una + 4 * mss }, { 0, 0 } };
    ack(&s, una, 1, b, 0);
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 1);
    CHECK(sent_at(&s, una, NULL), ==, 1);
    CHECK(C(&s)->ssthresh, <, cwnd0);
    b[0][0] = una;
    b[0][1] = una + mss;
    ack(&s, una + 10 * mss, 1, b, 0);
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 0);
    CHECK(C(&s)->st.undos, ==, 1);
    CHECK(s.sh->c.undo_recovery, ==, 1);
    CHECK(s.sh->c.dsacks_in, ==, 1);
    CHECK(C(&s)->cwnd, >=, cwnd0);
    st_fini(&s);
}

/* The same recovery with segment 0 really lost: the ACK carries no D-SACK, the window stays
 * reduced. */
TEST(test_recovery_real_loss_keeps_reduction)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    send_bytes(&s, 10 * 1460);
    uint32_t mss = tcp_output__data_mss(C(&s)), una = s.iss + 1;
    uint32_t cwnd0 = C(&s)->cwnd;
    h_free_sent(&s.h);
    s.env->now += 2 * SLIP_MSEC;
    uint32_t b[1][2] = { { una + mss, una + 4 * mss } };
    ack(&s, una, 1, b, 0);
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 1);
    ack(&s, una + 10 * mss, 0, NULL, 0);
    CHECK(C(&s)->st.undos, ==, 0);
    CHECK(C(&s)->cwnd, <, cwnd0);
    st_fini(&s);
}

/* packetdrill fast_retransmit/fr-4pkt-fack-last-byte: four segments, the first three lost,
 * and a SACK for only the last byte of the fourth. That delivers no whole segment, so RACK
 * learns nothing and no recovery starts; the tail loss probe resends the last segment, 2 SRTT
 * (+2 ms) after the data went out: the SACK-only ACK does not re-arm the PTO (RFC 8985 §7.2). */
TEST(test_sack_of_last_byte_gets_probe_not_fast_retransmit)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    C(&s)->srtt_us = 100000;
    C(&s)->rttvar_us = 25000;
    C(&s)->rto_us = 1000000;            /* the RTO far away: only the PTO can act */
    send_bytes(&s, 4 * 1460);
    uint32_t mss = tcp_output__data_mss(C(&s)), una = s.iss + 1;
    h_free_sent(&s.h);
    s.env->now += 100 * SLIP_MSEC;
    uint32_t b[1][2] = { { una + 4 * mss - 1, una + 4 * mss } };
    ack(&s, una, 1, b, 0);
    advance(&s, 101 * SLIP_MSEC);
    CHECK(C(&s)->st.tlp_probes, ==, 0);
    advance(&s, 2 * SLIP_MSEC);         /* 203 ms after the data: PTO = 2 SRTT + 2 ms */
    CHECK(C(&s)->st.tlp_probes, ==, 1);
    CHECK(C(&s)->st.fast_retransmits, ==, 0);
    CHECK(C(&s)->st.tlp_probes, ==, 1);
    CHECK(sent_at(&s, una + 3 * mss, NULL), ==, 1);
    CHECK(sent_at(&s, una, NULL), ==, 0);
    CHECK(C(&s)->st.rto_expiries, ==, 0);
    st_fini(&s);
}

/* packetdrill fast_recovery/prr-ss-ack-below-snd_una-cubic, first part: 10 segments, 0, 4 and 7
 * lost; the third duplicate ACK (SACK 1-2 and 8) starts recovery. PRR sends exactly one
 * segment, the retransmission of 0 (RFC 6937 with SSRB's extra segment only on an ACK that
 * advances SND.UNA, as Linux and rfc6937bis). */
TEST(test_recovery_start_sends_only_the_retransmission)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    C(&s)->mss = 1000;
    send_bytes(&s, 10 * 1000);
    uint32_t una = s.iss + 1;
    CHECK(C(&s)->snd_max, ==, una + 10000);
    h_free_sent(&s.h);
    s.env->now += 10 * SLIP_MSEC;
    uint32_t b1[1][2] = { { una + 1000, una + 2000 } };
    uint32_t b2[1][2] = { { una + 1000, una + 3000 } };
    uint32_t b3[2][2] = { { una + 8000, una + 9000 }, { una + 1000, una + 3000 } };
    ack(&s, una, 1, b1, 0);
    ack(&s, una, 1, b2, 0);
    CHECK(data_sent(&s), ==, 0);
    ack(&s, una, 2, b3, 0);
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 1);
    CHECK(data_sent(&s), ==, 1);
    CHECK(sent_at(&s, una, NULL), ==, 1);
    st_fini(&s);
}

/* The same script, second part: ACK 4001 with SACK 8001-9001 resends 4001-7001 (RACK: all
 * sent before the SACKed 8001); 10000 more bytes are written; then a reordered ACK below
 * SND.UNA (3001) SACKs 5001-7001, the retransmissions just sent. Linux sends 7001-8001 (lost:
 * sent before 8001) and new data 10001-11001; 9001-10001 is not lost (nothing sent after it was
 * delivered) and must not be resent. */
TEST(test_recovery_ack_below_una_sends_lost_then_new)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    C(&s)->mss = 1000;
    tcp_conn__clamp_iw(C(&s));
    C(&s)->srtt_us = 10000;         /* the script's handshake RTT */
    C(&s)->rttvar_us = 5000;
    send_bytes(&s, 10 * 1000);
    uint32_t una = s.iss + 1;
    h_free_sent(&s.h);
    s.env->now += 10 * SLIP_MSEC;
    uint32_t b1[1][2] = { { una + 1000, una + 2000 } };
    uint32_t b2[1][2] = { { una + 1000, una + 3000 } };
    uint32_t b3[2][2] = { { una + 8000, una + 9000 }, { una + 1000, una + 3000 } };
    ack(&s, una, 1, b1, 0);
    ack(&s, una, 1, b2, 0);
    ack(&s, una, 2, b3, 0);
    CHECK(sent_at(&s, una, NULL), ==, 1);
    h_free_sent(&s.h);
    s.env->now += 12 * SLIP_MSEC;
    uint32_t b4[1][2] = { { una + 8000, una + 9000 } };
    ack(&s, una + 4000, 1, b4, 0);
    CHECK(sent_at(&s, una + 4000, NULL), ==, 1);
    CHECK(data_sent(&s), ==, 3);
    h_free_sent(&s.h);
    send_bytes(&s, 10 * 1000);
    CHECK(data_sent(&s), ==, 0);
    s.env->now += 2 * SLIP_MSEC;
    uint32_t b5[1][2] = { { una + 5000, una + 7000 } };
    ack(&s, una + 3000, 1, b5, 0);
    CHECK(sent_at(&s, una + 7000, NULL), ==, 1);
    CHECK(sent_at(&s, una + 9000, NULL), ==, 0);
    CHECK(sent_at(&s, una + 10000, NULL), ==, 1);
    CHECK(data_sent(&s), ==, 2);
    st_fini(&s);
}

/* nseg segments out at SRTT 10 ms, segment 0 lost: the SACK of 1-3 10 ms later starts fast
 * recovery, and segment 0's retransmission leaves. */
static void recovery_for_segment_0(struct st *s, unsigned nseg, uint32_t *mss, uint32_t *una)
{
    st_init(s);
    st_active(s, false);
    st_timing(s);
    send_bytes(s, nseg * 1460);
    *mss = tcp_output__data_mss(C(s));
    *una = s->iss + 1;
    h_free_sent(&s->h);
    s->env->now += 10 * SLIP_MSEC;
    uint32_t b[1][2] = { { *una + *mss, *una + 4 * *mss } };
    ack(s, *una, 1, b, 0);
    CHECK(!!(C(s)->flags & TCPF_RECOVERY), ==, 1);
    CHECK(sent_at(s, *una, NULL), ==, 1);
}

/* Fast recovery with a small window: segment 0 lost, the SACK of 1-3 starts recovery and its
 * retransmission leaves; then no ACK comes (the one that would have acknowledged the
 * retransmission is lost on the way back). Within a PTO (2 SRTT + 2 ms = 22 ms) the recovery
 * probe resends the first hole (segment 0: the retransmission there is the likeliest loss),
 * long before the RTO; while no ACK delivers anything, more follow at twice the previous wait
 * (44 ms, 88 ms) as long as they come before the RTO the first one restarted (210 ms after it). */
TEST(test_recovery_probe_when_acks_stop)
{
    struct st s;
    uint32_t mss, una;
    recovery_for_segment_0(&s, 6, &mss, &una);
    uint32_t b[1][2] = { { una + mss, una + 4 * mss } };
    h_free_sent(&s.h);
    advance(&s, 21 * SLIP_MSEC);
    CHECK(data_sent(&s), ==, 0);
    advance(&s, 3 * SLIP_MSEC);
    CHECK(C(&s)->st.recovery_probes, ==, 1);
    CHECK(sent_at(&s, una, NULL), ==, 1);
    CHECK(data_sent(&s), ==, 1);
    CHECK(C(&s)->st.rto_expiries, ==, 0);
    /* The probe is lost too: the second follows 44 ms after the first (now + 2 ms). */
    h_free_sent(&s.h);
    advance(&s, 41 * SLIP_MSEC);
    CHECK(C(&s)->st.recovery_probes, ==, 1);
    advance(&s, 2 * SLIP_MSEC);
    CHECK(C(&s)->st.recovery_probes, ==, 2);
    CHECK(sent_at(&s, una, NULL), ==, 1);
    /* An ACK that delivers nothing new (what a receiver with a full buffer sends for the
     * probe it dropped) neither ends the series nor brings the next probe closer: probes never
     * feed on their own ACKs. The third comes 88 ms after the second. */
    ack(&s, una, 1, b, 0);
    advance(&s, 86 * SLIP_MSEC);
    CHECK(C(&s)->st.recovery_probes, ==, 2);
    advance(&s, 2 * SLIP_MSEC);
    CHECK(C(&s)->st.recovery_probes, ==, 3);
    /* A fourth would come 176 ms later, after the RTO (first probe + 210 ms): none. */
    h_free_sent(&s.h);
    advance(&s, 76 * SLIP_MSEC);
    CHECK(C(&s)->st.recovery_probes, ==, 3);
    CHECK(data_sent(&s), ==, 0);
    CHECK(C(&s)->st.rto_expiries, ==, 0);
    ack(&s, una + 6 * mss, 0, NULL, 0);
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 0);
    CHECK(C(&s)->st.rto_expiries, ==, 0);
    st_fini(&s);
}

/* Ten segments sent at t=0 on a fresh connection (timestamps when ts), then 10 ms later: the
 * start of the RACK tests below. */
static void ten_sent(struct st *s, bool ts, uint32_t *mss, uint32_t *una)
{
    st_init(s);
    st_active(s, ts);
    st_timing(s);
    send_bytes(s, 10 * 1460);
    *mss = tcp_output__data_mss(C(s));
    *una = s->iss + 1;
    h_free_sent(&s->h);
    s->env->now += 10 * SLIP_MSEC;
}

/* RFC 8985 §6.2 step 3 counts reordering only for an original delivered below what was
 * delivered BEFORE it (the step takes an ACK's segments in send order; Linux: prior_fack). Lost
 * ACKs must not look like reordering, or RACK.reo_wnd (min_RTT/4) delays the repair of every
 * later loss: ten segments at t=0, 2 and 5 lost. At 10 ms the ACKs for 0-1 were lost and the
 * next one acknowledges them with the SACK of 3 (the cumulative part is taken in after the SACK
 * block, which already raised RACK.fack to 4); the ACK that SACKed 4 is lost too, so the next
 * one carries 6-9 first and 3-4 second (the newest block first, RFC 2018). With six segments
 * SACKed and no reordering seen, RACK calls 5 lost on that ACK (reo_wnd 0 past DupThresh; 2,
 * at SND.UNA, is RFC 6675's). Either ordering taken as reordering leaves 5 waiting 2.5 ms. */
TEST(test_rack_lost_acks_are_not_reordering)
{
    struct st s;
    uint32_t mss, una;
    ten_sent(&s, false, &mss, &una);
    uint32_t b1[1][2] = { { una + 3 * mss, una + 4 * mss } };
    ack(&s, una + 2 * mss, 1, b1, 0);
    CHECK(data_sent(&s), ==, 0);
    uint32_t b2[2][2] = { { una + 6 * mss, una + 10 * mss }, { una + 3 * mss, una + 5 * mss } };
    ack(&s, una + 2 * mss, 2, b2, 0);
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 1);
    CHECK(sent_at(&s, una + 2 * mss, NULL), ==, 1);
    CHECK(C(&s)->st.rack_lost, ==, 1);
    st_fini(&s);
}

/* The other side of the rule above: segment 1 SACKed after 2 was (an original delivered below
 * the highest one delivered before it) is reordering. From then on a hole waits min_RTT/4
 * (2.5 ms here) past RACK's RTT before RACK calls it lost, even past DupThresh (RFC 8985 §6.2
 * step 4): 0 is lost, 3-4 are holes below the SACKed 5-7. 0, at SND.UNA, goes at once (RFC
 * 6675's DupThresh); 3 and 4 after 2.5 ms. */
TEST(test_rack_reordered_original_widens_the_window)
{
    struct st s;
    uint32_t mss, una;
    ten_sent(&s, false, &mss, &una);
    uint32_t b1[1][2] = { { una + 2 * mss, una + 3 * mss } };
    uint32_t b2[1][2] = { { una + mss, una + 3 * mss } };
    uint32_t b3[2][2] = { { una + 5 * mss, una + 8 * mss }, { una + mss, una + 3 * mss } };
    ack(&s, una, 1, b1, 0);
    ack(&s, una, 1, b2, 0);
    ack(&s, una, 2, b3, 0);
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 1);
    CHECK(sent_at(&s, una, NULL), ==, 1);
    CHECK(C(&s)->st.rack_lost, ==, 0);
    advance(&s, 2 * SLIP_MSEC);
    CHECK(C(&s)->st.rack_lost, ==, 0);
    advance(&s, 1 * SLIP_MSEC);
    CHECK(C(&s)->st.rack_lost, ==, 2);
    st_fini(&s);
}

/* RFC 8985 §6.2 step 2 with timestamps: ten segments at t=0, 1-9 SACKed at 10 ms, 0 resent
 * then. At 21 ms the cumulative ACK comes; its TSecr tells which copy of 0 it was for. The
 * original's (sent at 0, delayed on the way): the retransmission is 11 ms old, past min_RTT, but
 * that is no round trip of it, and RACK stays at the SACK's sample (10 ms, the segments sent at
 * 0). The retransmission's: RACK takes its 11 ms and its send time. */
static void retransmission_acked(bool by_original, uint32_t *rtt, uint32_t *xmit, uint32_t *xmit0)
{
    struct st s;
    uint32_t mss, una, ts0 = 0, ts1 = 0;
    st_init(&s);
    st_active(&s, true);
    st_timing(&s);
    send_bytes(&s, 10 * 1460);
    mss = tcp_output__data_mss(C(&s));
    una = s.iss + 1;
    CHECK(sent_at(&s, una, &ts0), ==, 1);
    h_free_sent(&s.h);
    s.env->now += 10 * SLIP_MSEC;
    uint32_t b[1][2] = { { una + mss, una + 10 * mss } };
    ack(&s, una, 1, b, ts0);
    CHECK(sent_at(&s, una, &ts1), ==, 1);
    CHECK(ts1, ==, ts0 + 10);
    *xmit0 = C(&s)->rack_xmit_us;
    s.env->now += 11 * SLIP_MSEC;
    ack(&s, una + 10 * mss, 0, NULL, by_original ? ts0 : ts1);
    *rtt = C(&s)->rack_rtt_us;
    *xmit = C(&s)->rack_xmit_us;
    st_fini(&s);
}

TEST(test_rack_ignores_a_retransmission_acked_for_its_original)
{
    uint32_t rtt, xmit, xmit0;
    retransmission_acked(true, &rtt, &xmit, &xmit0);
    CHECK(rtt, ==, 10000);
    CHECK(xmit, ==, xmit0);
    retransmission_acked(false, &rtt, &xmit, &xmit0);
    CHECK(rtt, ==, 11000);
    CHECK(xmit, ==, xmit0 + 10000);
}

/* SRTT's samples (tcp_rack.c rtt_sample): ten segments at t=0 with SRTT 10 ms; at 40 ms the
 * ACK SACKs 1-9 (0 lost) and recovery resends 0. The SACKed originals are 40 ms old: SRTT
 * (7 * 10 + 40) / 8 = 13.75 ms, RTTVAR (3 * 2.5 + 30) / 4 = 9.375 ms, from an ACK that does
 * not move SND.UNA. At 65 ms the cumulative ACK covers the retransmission: Karn gives no sample
 * from its send time; with timestamps its TSecr (the retransmission's TSval) gives 25 ms, SRTT
 * (7 * 13.75 + 25) / 8 = 15.156 ms. The one timed segment per round trip used before gave
 * neither: recovery stops the timing, and SRTT stayed 10 ms. */
static void recovery_rtts(bool ts, uint32_t *srtt_sack, uint32_t *rttvar_sack, uint32_t *srtt_cum)
{
    struct st s;
    uint32_t mss, una, rts = 0;
    ten_sent(&s, ts, &mss, &una);
    s.env->now += 30 * SLIP_MSEC;
    uint32_t b[1][2] = { { una + mss, una + 10 * mss } };
    ack(&s, una, 1, b, s.our_tsval);
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 1);
    CHECK(sent_at(&s, una, &rts), ==, 1);
    *srtt_sack = C(&s)->srtt_us;
    *rttvar_sack = C(&s)->rttvar_us;
    s.env->now += 25 * SLIP_MSEC;
    ack(&s, una + 10 * mss, 0, NULL, rts);
    CHECK(C(&s)->snd_una, ==, una + 10 * mss);
    *srtt_cum = C(&s)->srtt_us;
    st_fini(&s);
}

TEST(test_srtt_samples_sacks_and_timestamps_in_recovery)
{
    uint32_t srtt_sack, rttvar_sack, srtt_cum;
    recovery_rtts(false, &srtt_sack, &rttvar_sack, &srtt_cum);
    CHECK(srtt_sack, ==, 13750);
    CHECK(rttvar_sack, ==, 9375);
    CHECK(srtt_cum, ==, 13750);
    recovery_rtts(true, &srtt_sack, &rttvar_sack, &srtt_cum);
    CHECK(srtt_sack, ==, 13750);
    CHECK(srtt_cum, ==, 15156);
}

/* In recovery with one segment left outstanding (segment 4, after the ACK for 0-3), the recovery
 * probe does not add RFC 8985's 200 ms for a delayed ACK: the receiver has just seen a hole and
 * acknowledges at once (RFC 5681 §4.2). It resends segment 4 about 2 SRTT + 2 ms after the ACK,
 * not just before the RTO (210 ms). */
TEST(test_recovery_probe_for_a_lone_segment_does_not_wait_for_a_delayed_ack)
{
    struct st s;
    uint32_t mss, una;
    recovery_for_segment_0(&s, 5, &mss, &una);
    s.env->now += 10 * SLIP_MSEC;
    ack(&s, una + 4 * mss, 0, NULL, 0);
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 1);
    CHECK(C(&s)->snd_max - C(&s)->snd_una, <=, mss);
    h_free_sent(&s.h);
    advance(&s, 15 * SLIP_MSEC);
    CHECK(data_sent(&s), ==, 0);
    advance(&s, 25 * SLIP_MSEC);
    CHECK(C(&s)->st.recovery_probes, ==, 1);
    CHECK(sent_at(&s, una + 4 * mss, NULL), ==, 1);
    CHECK(C(&s)->st.rto_expiries, ==, 0);
    st_fini(&s);
}

/* RACK.rtt after a hole fills: ten segments at t=0, the first lost, 1-9 SACKed at 10 ms; the
 * retransmission (sent at 10 ms) is acknowledged cumulatively at 21 ms with 1-9. Those were taken
 * in when SACKed; their age now (21 ms) is how long the hole took, not a round trip, and must
 * not become RACK.rtt, or every loss after it waits that much longer to be seen (Linux's
 * tcp_clean_rtx_queue advances RACK only for segments not SACKed before). */
TEST(test_rack_rtt_skips_segments_sacked_before_the_cumulative_ack)
{
    struct st s;
    uint32_t mss, una;
    ten_sent(&s, false, &mss, &una);
    uint32_t b[1][2] = { { una + mss, una + 10 * mss } };
    ack(&s, una, 1, b, 0);
    CHECK(sent_at(&s, una, NULL), ==, 1);
    CHECK(C(&s)->rack_rtt_us, ==, 10000);
    s.env->now += 11 * SLIP_MSEC;
    ack(&s, una + 10 * mss, 0, NULL, 0);
    CHECK(C(&s)->rack_rtt_us, ==, 11000);      /* the retransmission's sample */
    st_fini(&s);
}

/* A loss that outlives the recovery it was found in starts the next one on the ACK that ends
 * the first (Linux's tcp_time_to_recover: lost_out): segment 0 lost, recovery to 10 segments;
 * new segments 10 and on leave in it, 10 is lost and resent; the ACK that acknowledges 0-9 ends the
 * first recovery with 10 still out, so a second begins on it. For BBR that is no new episode
 * of packet conservation: cwnd stays where the ACK left it (no cut to what is in flight). */
TEST(test_recovery_restarts_on_its_last_ack_while_a_loss_is_outstanding)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    st_timing(&s);
    CHECK(tcp_conn__setopt(s.env, s.sh, s.c, TCPO_CONGESTION, TCP_CC_BBR), ==, 0);
    uint32_t mss = tcp_output__data_mss(C(&s)), una = s.iss + 1;
    slip_time_t t0 = s.env->now;
    send_bytes(&s, 10 * 1460);
    advance(&s, 5 * SLIP_MSEC);                 /* the pacer lets all ten out */
    CHECK(C(&s)->snd_max, ==, una + 10 * mss);
    h_free_sent(&s.h);
    s.env->now = t0 + 10 * SLIP_MSEC;
    uint32_t b1[1][2] = { { una + mss, una + 10 * mss } };
    ack(&s, una, 1, b1, 0);
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 1);
    CHECK(C(&s)->st.recoveries, ==, 1);
    send_bytes(&s, 10 * 1460);
    advance(&s, 5 * SLIP_MSEC);
    uint32_t hi = C(&s)->snd_max;               /* conservation: what 1-9 delivered, less 0 */
    CHECK(seq_geq(hi, una + 14 * mss), ==, 1);
    h_free_sent(&s.h);
    s.env->now = t0 + 26 * SLIP_MSEC;           /* 11 and on arrive, 10 does not */
    uint32_t b2[2][2] = { { una + 11 * mss, hi }, { una + mss, una + 10 * mss } };
    ack(&s, una, 2, b2, 0);
    advance(&s, 1 * SLIP_MSEC);
    CHECK(sent_at(&s, una + 10 * mss, NULL), ==, 1);
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 1);
    s.env->now += 2 * SLIP_MSEC;
    uint32_t b3[1][2] = { { una + 11 * mss, hi } };
    uint32_t cwnd = C(&s)->cwnd;
    ack(&s, una + 10 * mss, 1, b3, 0);          /* 0 arrived: the first recovery's point */
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 1);
    CHECK(C(&s)->st.recoveries, ==, 2);
    CHECK(C(&s)->cwnd, >=, cwnd);
    CHECK(C(&s)->cc.bbr.conservation, ==, 0);
    st_fini(&s);
}

/* One segment out and lost: the PTO (2 SRTT + 200 ms for a lone segment, RFC 8985 §7.2) would
 * come after the RTO, so it is set just before it and the probe takes the RTO's place. A stack
 * that polls late finds both due in one poll: the probe must still go first (timers in
 * deadline order), restarting the RTO, so there is no timeout and no collapse of cwnd. */
TEST(test_tail_probe_goes_before_the_rto_when_one_poll_finds_both_due)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    st_timing(&s);
    send_bytes(&s, 1000);
    CHECK(data_sent(&s), ==, 1);
    CHECK(tcp_timer__armed(C(&s), TT_PTO), ==, true);
    CHECK(C(&s)->timer[TT_PTO], <, C(&s)->timer[TT_REXMT]);
    h_free_sent(&s.h);
    s.env->now += 300 * SLIP_MSEC;
    tcp_timer__poll(s.env, s.sh);
    CHECK(C(&s)->st.tlp_probes, ==, 1);
    CHECK(C(&s)->st.rto_expiries, ==, 0);
    CHECK(data_sent(&s), ==, 1);
    CHECK(!!(C(&s)->flags & TCPF_LOSS), ==, 0);
    st_fini(&s);
}

/* A timeout that ends a fast recovery does not lower ssthresh a second time (RFC 5681 §3.1:
 * once per loss episode; Linux tcp_enter_loss). Before it, the silence drew the three recovery
 * probes that fit before the RTO (22, 66 and 154 ms after the ACK). After it no probe goes while
 * nothing is acknowledged (the path may be dead: RFC 8961 §4, only the backed-off RTO resends);
 * once an ACK of new data arrives, a silence in the loss state draws the recovery probe again. */
TEST(test_rto_in_recovery_keeps_ssthresh_then_probes)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    st_timing(&s);
    send_bytes(&s, 6 * 1460);
    uint32_t mss = tcp_output__data_mss(C(&s)), una = s.iss + 1;
    h_free_sent(&s.h);
    s.env->now += 10 * SLIP_MSEC;
    uint32_t b[1][2] = { { una + mss, una + 4 * mss } };
    ack(&s, una, 1, b, 0);
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 1);
    uint32_t ssthresh = C(&s)->ssthresh;
    advance(&s, 24 * SLIP_MSEC);        /* the recovery probe, unanswered */
    CHECK(C(&s)->st.recovery_probes, ==, 1);
    advance(&s, 207 * SLIP_MSEC);       /* two more, unanswered */
    CHECK(C(&s)->st.recovery_probes, ==, 3);
    CHECK(C(&s)->st.rto_expiries, ==, 0);
    h_free_sent(&s.h);
    advance(&s, 4 * SLIP_MSEC);         /* then the RTO */
    CHECK(C(&s)->st.rto_expiries, ==, 1);
    CHECK(C(&s)->ssthresh, ==, ssthresh);
    CHECK(!!(C(&s)->flags & TCPF_LOSS), ==, 1);
    CHECK(data_sent(&s), ==, 1);        /* the timeout's retransmission of segment 0 */
    h_free_sent(&s.h);
    advance(&s, 300 * SLIP_MSEC);
    CHECK(C(&s)->st.recovery_probes, ==, 3);
    CHECK(data_sent(&s), ==, 0);
    CHECK(C(&s)->st.rto_expiries, ==, 1);
    /* Segment 0 arrives: the loss state goes on (4 and 5 are still lost), so does the probe. */
    ack(&s, una + mss, 1, b, 0);
    CHECK(!!(C(&s)->flags & TCPF_LOSS), ==, 1);
    CHECK(C(&s)->rxt_shift, ==, 0u);
    h_free_sent(&s.h);
    advance(&s, 24 * SLIP_MSEC);
    CHECK(C(&s)->st.recovery_probes, ==, 4);
    CHECK(C(&s)->st.rto_expiries, ==, 1);
    st_fini(&s);
}

/* F-RTO (RFC 5682 §3) without timestamps: ten segments out, every ACK delayed past the RTO.
 * The timeout resends segment 0; its ACK (step 2) lets new data out instead of segments 1-9
 * (step 2b); the next ACK acknowledges 1-2, never retransmitted: the originals arrived, the
 * timeout was spurious and the reduction is undone (step 3b, RFC 4015 response). */
static void frto_setup(struct st *s, uint32_t *una, uint32_t *mss, uint32_t *cwnd0)
{
    st_init(s);
    st_active(s, false);
    st_timing(s);
    send_bytes(s, 10 * 1460);
    *mss = tcp_output__data_mss(C(s));
    *una = s->iss + 1;
    *cwnd0 = C(s)->cwnd;
    h_free_sent(&s->h);
    advance(s, 240 * SLIP_MSEC);        /* the loss probe at 22 ms, the RTO 210 ms after it */
    CHECK(C(s)->st.rto_expiries, ==, 1);
    CHECK(C(s)->undo.frto, ==, 1);
    send_bytes(s, 4 * 1460);            /* new data to send once step 2 allows */
    h_free_sent(&s->h);
    ack(s, *una + *mss, 0, NULL, 0);    /* step 2: the retransmission is acknowledged */
    CHECK(C(s)->undo.frto, ==, 2);
    CHECK(sent_at(s, *una + 10 * *mss, NULL), ==, 1);
    CHECK(sent_at(s, *una + *mss, NULL), ==, 0);
    h_free_sent(&s->h);
}

TEST(test_frto_spurious_timeout_is_undone)
{
    struct st s;
    uint32_t una, mss, cwnd0;
    frto_setup(&s, &una, &mss, &cwnd0);
    ack(&s, una + 3 * mss, 0, NULL, 0);
    CHECK(s.sh->c.frto_spurious, ==, 1);
    CHECK(s.sh->c.spurious_rto, ==, 1);
    CHECK(C(&s)->st.undos, ==, 1);
    CHECK(!!(C(&s)->flags & TCPF_LOSS), ==, 0);
    CHECK(C(&s)->cwnd, >=, cwnd0);
    CHECK(sent_at(&s, una + 3 * mss, NULL), ==, 0);     /* nothing of the window resent */
    st_fini(&s);
}

/* The same timeout with segments 1-9 really lost: the ACK after the new data SACKs only the
 * new data (step 3a); the timeout stands and the window is resent. */
TEST(test_frto_real_timeout_resends_window)
{
    struct st s;
    uint32_t una, mss, cwnd0;
    frto_setup(&s, &una, &mss, &cwnd0);
    uint32_t b[1][2] = { { una + 10 * mss, una + 11 * mss } };
    ack(&s, una + mss, 1, b, 0);
    CHECK(s.sh->c.frto_spurious, ==, 0);
    CHECK(C(&s)->st.undos, ==, 0);
    CHECK(C(&s)->undo.frto, ==, 0);
    CHECK(!!(C(&s)->flags & TCPF_LOSS), ==, 1);
    CHECK(sent_at(&s, una + mss, NULL), ==, 1);
    CHECK(C(&s)->cwnd, <, cwnd0);
    st_fini(&s);
}

/* ---- HyStart++ (RFC 9406) ---- */

/* One round of slow start: a window of w segments (1000 bytes) sent, then ACKed one by one, each
 * ACK carrying an RTT sample of rtt_us. */
static void hs_round(struct tcp_conn *c, const struct tcp_cc_ops *cc, uint32_t w, uint32_t rtt_us)
{
    c->snd_max = c->snd_una + w * 1000;
    for (uint32_t i = 0; i < w; i++) {
        c->snd_una += 1000;
        cc->on_ack(c, 1000, 1);
        tcp_hystart__rtt(c, rtt_us);
    }
}

static struct tcp_conn *hs_conn(struct tcp_shared **sh, const struct tcp_cc_ops **cc)
{
    *sh = t_new_shared(4);
    struct tcp_conn *c = tcp_conn__get(*sh, (slip_idx_t)tcp_conn__alloc(*sh));
    c->mss = 1000;
    c->cc_algo = TCP_CC_CUBIC;
    *cc = tcp_cc__get(TCP_CC_CUBIC);
    (*cc)->init(c);
    c->snd_una = c->snd_max = 1;
    return c;
}

/* §4.2 with the §4.3 constants: a round whose minimum RTT is at least lastRoundMinRTT +
 * RttThresh (max(4 ms, min(last/8, 16 ms)) = 4 ms for a 10 ms path) enters Conservative Slow
 * Start, where cwnd grows by a quarter (CSS_GROWTH_DIVISOR 4); after CSS_ROUNDS (5) rounds
 * slow start ends with ssthresh = cwnd, before any loss. A rise below the threshold does not. */
TEST(test_hystart_css_then_exit)
{
    struct tcp_shared *sh;
    const struct tcp_cc_ops *cc;
    struct tcp_conn *c = hs_conn(&sh, &cc);
    hs_round(c, cc, 10, 10000);
    hs_round(c, cc, 10, 10000);
    hs_round(c, cc, 10, 13000);         /* +3 ms < 4 ms: still slow start */
    CHECK(c->cc.hs_state, ==, TCP_HS_SS);
    hs_round(c, cc, 10, 10000);
    uint32_t w = c->cwnd / 1000;
    hs_round(c, cc, w, 14000);          /* +4 ms: CSS once 8 samples are in */
    CHECK(c->cc.hs_state, ==, TCP_HS_CSS);
    CHECK(c->cc.hs_css_base_us, ==, 14000);
    uint32_t before = c->cwnd;
    c->snd_una += 1000;
    cc->on_ack(c, 1000, 1);
    CHECK(c->cwnd - before, ==, 250);   /* 1000 / CSS_GROWTH_DIVISOR */
    for (int r = 0; r < 6 && c->cc.hs_state == TCP_HS_CSS; r++)
        hs_round(c, cc, c->cwnd / 1000, 14000);
    CHECK(c->cc.hs_state, ==, TCP_HS_DONE);
    CHECK(c->ssthresh, <=, c->cwnd);
    CHECK(c->ssthresh, <, UINT32_MAX / 2);
    free(sh);
}

/* §4.2: in CSS, a round whose minimum RTT falls below cssBaselineMinRtt goes back to slow
 * start; a congestion event ends HyStart++ for good. */
TEST(test_hystart_css_back_to_slow_start_and_loss_ends_it)
{
    struct tcp_shared *sh;
    const struct tcp_cc_ops *cc;
    struct tcp_conn *c = hs_conn(&sh, &cc);
    hs_round(c, cc, 10, 20000);
    hs_round(c, cc, 10, 20000);
    hs_round(c, cc, 20, 25000);         /* +5 ms >= max(4, 20/8 = 2.5) ms */
    CHECK(c->cc.hs_state, ==, TCP_HS_CSS);
    hs_round(c, cc, 20, 19000);
    hs_round(c, cc, 20, 19000);
    CHECK(c->cc.hs_state, ==, TCP_HS_SS);
    c->ssthresh = cc->ssthresh(c, 1);
    CHECK(c->cc.hs_state, ==, TCP_HS_DONE);
    free(sh);
}

/* RFC 9438 §4.3: right after a reduction from W_max = cwnd_prior = 10 segments to 7 on a 100 ms
 * path, W_cubic(0.1 s) = 0.4 (0.1 - cbrt(7.5))^3 + 10 = 7.44 lies below the Reno-friendly
 * W_est = 7 + alpha_cubic (3 (1 - 0.7) / (1 + 0.7) = 0.529) per window of ACKs = 7.53, so cwnd
 * follows W_est (the concave curve one RTT ahead would have given ~7.8). */
TEST(test_cubic_reno_friendly_region)
{
    struct tcp_shared *sh;
    const struct tcp_cc_ops *cc;
    struct tcp_conn *c = hs_conn(&sh, &cc);
    c->cwnd = 10000;
    c->snd_max = c->snd_una + 10000;
    c->ssthresh = cc->ssthresh(c, 1);
    CHECK(c->ssthresh, ==, 7000);
    c->cwnd = c->ssthresh;
    c->srtt_us = 100000;
    slip_time_t t0 = 5 * SLIP_SEC;
    for (int i = 0; i < 7; i++)
        cc->on_ack(c, 1000, t0 + (slip_time_t)i * 100 * SLIP_MSEC / 7);
    CHECK(fabs(c->cc.k - cbrt(7.5)) < 1e-9, ==, 1);
    CHECK(c->cwnd, >=, 7500);
    CHECK(c->cwnd, <=, 7560);
    free(sh);
}

TEST_MAIN()
