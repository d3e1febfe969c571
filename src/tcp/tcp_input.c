/* TCP input, organised as RFC 9293 §3.10.7 "SEGMENT ARRIVES": validation and demux, then one
 * function per group of states (no connection, LISTEN, SYN-SENT, the others) with the RFC's
 * numbered steps as comments. RFC 5961 hardening (RST/SYN/ACK checks, challenge ACKs), RFC 7323
 * PAWS, RFC 6191 TIME-WAIT reuse, SYN cookies, and the ACK processing that drives congestion
 * control and loss recovery (RFC 5681, RFC 6582, RFC 6675; RACK-TLP and PRR in tcp_rack.c) live
 * here too. */
#include <errno.h>
#include <string.h>

#include "tcp/tcp_var.h"
#include "wire/checksum.h"
#include "wire/icmp.h"
#include "wire/ipv4.h"

static void free_payload(struct ip_env *env, struct tcp_seg *s)
{
    if (s->pkt != SLIP_NIL)
        pkt__free_chain(env->pool, s->pkt);
    s->pkt = SLIP_NIL;
}

/* ---- options on SYN segments ---- */

static void apply_syn_options(struct ip_env *env, struct tcp_conn *c, const struct tcp_seg *s, bool active)
{
    const struct wire_tcp_opts *o = &s->th.opts;
    /* RFC 9293 §3.7.1: without the option assume 536; never below Linux's floor. */
    uint32_t peer = o->has_mss ? o->mss : TCP_MSS_NO_OPTION;
    if (peer < TCP_MSS_MIN)
        peer = TCP_MSS_MIN;
    c->peer_mss = (uint16_t)SLIP_MIN(peer, 65535u);
    c->mss = (uint16_t)SLIP_MIN((uint32_t)tcp_conn__route_mss(env, c), peer);
    c->rcv_mss = (uint16_t)SLIP_MIN((uint32_t)c->mss, (uint32_t)TCP_MSS_NO_OPTION);
    /* RFC 7323 §2.2: scaling only when both SYNs carry the option; §2.3: shift above 14 is 14. */
    if (o->has_wscale) {
        c->flags |= TCPF_WS_OK;
        c->snd_wscale = (uint8_t)SLIP_MIN(o->wscale, 14);
    } else {
        c->flags &= ~TCPF_WS_OK;
        c->snd_wscale = 0;
        c->rcv_wscale = 0;
    }
    if (o->sack_ok)
        c->flags |= TCPF_SACK_OK;
    else
        c->flags &= ~TCPF_SACK_OK;
    /* RFC 7323 §3.2: timestamps only if the SYN (and for us, the SYN-ACK) carried them. */
    if (o->has_ts) {
        c->flags |= TCPF_TS_OK;
        c->ts_recent = o->tsval;
    } else {
        c->flags &= ~TCPF_TS_OK;
    }
    (void)active;
    tcp_conn__clamp_iw(c);
}

/* ---- ACK processing (RFC 9293 §3.10.7.4 fifth step, with RFC 5681/6582/6675) ---- */

static void enter_recovery(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    const struct tcp_cc_ops *cc = tcp_cc__get(c->cc_algo);
    uint32_t dmss = tcp_output__data_mss(c);
    tcp_undo__begin(c, TCP_UNDO_RECOVERY, env->now);
    c->ssthresh = cc->ssthresh(c, env->now);
    c->snd_recover = c->snd_max;
    c->flags |= TCPF_RECOVERY;
    c->flags &= ~TCPF_RTT_TIMING;
    c->st.recoveries++;
    c->st.fast_retransmits++;
    sh->c.fast_retransmits++;
    uint32_t len = SLIP_MIN(dmss, c->snd_max - c->snd_una);
    bool fin = false;
    if (cc->cong_control) {
        /* BBR draft-00 §4.2.3.4: packet conservation from what is in flight (the model's
         * cong_control takes over on the next ACK). */
        c->cwnd = c->snd_max - c->snd_una + dmss;
        if (c->flags & TCPF_SACK_OK) {
            if (c->nsb && seq_lt(tcp_sb(c)[0].start, c->snd_una + len) && seq_gt(tcp_sb(c)[0].start, c->snd_una))
                len = tcp_sb(c)[0].start - c->snd_una;
        }
    } else if (c->flags & TCPF_SACK_OK) {
        /* RFC 6675 §5 (4.2-4.3): cwnd = ssthresh, retransmit the first unacknowledged segment. */
        c->cwnd = c->ssthresh;
        if (c->nsb && seq_lt(tcp_sb(c)[0].start, c->snd_una + len) && seq_gt(tcp_sb(c)[0].start, c->snd_una))
            len = tcp_sb(c)[0].start - c->snd_una;
    } else {
        /* RFC 6582 §3.2 step 2-3: cwnd = ssthresh + 3*SMSS (the three segments that left). */
        c->cwnd = c->ssthresh + 3 * dmss;
    }
    uint32_t data_end = c->snd_q_seq + c->sndq.bytes;
    if (seq_gt(c->snd_una + len, data_end)) {
        len = seq_gt(data_end, c->snd_una) ? data_end - c->snd_una : 0;
        fin = (c->flags & TCPF_FIN_SENT) != 0;
    }
    if (tcp_output__segment(env, sh, c, c->snd_una, len,
                            WIRE_TCP_ACK | (fin ? WIRE_TCP_FIN : 0)) == 0)
        c->high_rxt = c->snd_una + len + fin;
    tcp_timer__rexmt_restart(env, sh, c);
}

static void on_dupack(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    c->st.dupacks_in++;
    if (c->flags & TCPF_RECOVERY) {
        if (!(c->flags & TCPF_SACK_OK))
            c->cwnd += tcp_output__data_mss(c);     /* RFC 6582 §3.2 step 4: inflate */
        return;
    }
    c->dupacks++;
    if (c->flags & TCPF_SACK_OK)
        return;     /* tcp_rack__after_ack() decides (RFC 6675 DupThresh and RFC 8985 RACK) */
    bool lost = false;
    /* RFC 6582 §3.2 step 2 / RFC 6675 §5: three duplicates (or SACK saying the first segment is
     * lost), unless this ACK does not cover "recover" (avoids a second reduction after RTO). */
    if ((c->dupacks >= 3 || lost) && seq_geq(c->snd_una, c->snd_recover))
        enter_recovery(env, sh, c);
}

/* Returns false when the segment must be dropped. */
static bool process_ack(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, struct tcp_seg *s)
{
    uint32_t ack = s->ack;
    uint32_t win = (uint32_t)s->th.window << c->snd_wscale;
    uint32_t newly_sacked = 0;
    c->last_ack_rx = env->now;      /* TCP_INFO last_ack_recv */

    /* RFC 5961 §5.2: an ACK older than SND.UNA - MAX.SND.WND gets a challenge ACK. */
    uint32_t maxwnd = SLIP_MAX(c->max_sndwnd, 1u);
    if (seq_lt(ack, c->snd_una - maxwnd)) {
        sh->c.old_ack_drops++;
        tcp_output__challenge_ack(env, sh, c);
        return false;
    }
    /* RFC 9293: an ACK for something not yet sent gets an ACK, and the segment is dropped. */
    if (seq_gt(ack, c->snd_max)) {
        sh->c.old_ack_drops++;
        tcp_output__ack(env, sh, c);
        return false;
    }
    uint32_t sacked_before = tcp_sack__sacked_bytes(c), old_una = c->snd_una;
    bool sack = (c->flags & TCPF_SACK_OK) != 0;
    const struct tcp_cc_ops *ops = tcp_cc__get(c->cc_algo);
    /* Delivery-rate sample (tcp_rate.c) for a model-based algorithm: the newest range this
     * ACK delivers, judged against the old scoreboard like RACK's. */
    struct tcp_rate_sample rs;
    uint32_t prior_flight = 0;
    uint64_t lost_before = c->st.rack_lost;
    if (ops->cong_control) {
        prior_flight = tcp_flight(c);
        tcp_rate__on_ack(c, seq_gt(ack, c->snd_una) ? ack : c->snd_una, &s->th.opts, env->now, &rs);
    }
    /* RFC 8985 §6.2: RACK learns from what this ACK delivers, judged against the old scoreboard;
     * the transmit map gives SRTT a sample from most ACKs (tcp_rack.c rtt_sample). */
    int64_t rtt = -1;
    if (sack && c->ntxr) {
        rtt = tcp_rack__on_ack(c, seq_gt(ack, c->snd_una) ? ack : c->snd_una, &s->th.opts, env->now);
        c->flags &= ~TCPF_RTT_TIMING;
        if (rtt >= 0)
            tcp_rtt__sample(c, (slip_time_t)rtt);
    }
    if (sack && s->th.opts.nsack)
        newly_sacked = tcp_sack__update(c, &s->th.opts);

    if (seq_gt(ack, c->snd_una)) {
        uint32_t acked = ack - c->snd_una;
        uint32_t flight_before = c->snd_max - c->snd_una;
        c->st.bytes_acked += acked;
        /* RFC 6298 §3 with Karn: only a segment never retransmitted gives a sample (without
         * SACK or with nothing in the transmit map: one timed segment per round trip). */
        if ((c->flags & TCPF_RTT_TIMING) && seq_gt(ack, c->rt_seq)) {
            tcp_rtt__sample(c, env->now - c->rt_time);
            c->flags &= ~TCPF_RTT_TIMING;
        }
        c->rxt_shift = 0;
        /* Free acknowledged data from the send queue. */
        uint32_t data_acked = 0;
        if (seq_gt(ack, c->snd_q_seq))
            data_acked = SLIP_MIN(ack - c->snd_q_seq, c->sndq.bytes);
        uint32_t left = data_acked;
        while (left && c->sndq.head != SLIP_NIL) {
            struct pkt_meta *m = pkt__meta(env->pool, c->sndq.head);
            if (m->len <= left) {
                left -= m->len;
                pkt__free_chain(env->pool, pkt_queue__pop(env->pool, &c->sndq, m->len));
            } else {
                m->off = (uint16_t)(m->off + left);
                m->len = (uint16_t)(m->len - left);
                c->sndq.bytes -= left;
                left = 0;
            }
        }
        c->snd_q_seq += data_acked;
        c->snd_una = ack;
        c->rtx_stamp = env->now;    /* TCP_USER_TIMEOUT: the rest waits from now */
        if (seq_lt(c->snd_nxt, c->snd_una))
            c->snd_nxt = c->snd_una;
        if (seq_lt(c->high_rxt, c->snd_una))
            c->high_rxt = c->snd_una;
        tcp_sack__clean(c);
        tcp_rack__trim(c);
        /* An ACK that stops exactly where a SACKed block begins means the receiver dropped
         * data it had SACKed (reneging, RFC 2018 §8): the scoreboard can no longer be trusted. */
        if (c->nsb && tcp_sb(c)[0].start == c->snd_una)
            c->nsb = 0;
        if ((c->flags & TCPF_LOSS) && seq_geq(ack, c->snd_recover))
            c->flags &= ~TCPF_LOSS;     /* everything sent before the RTO is acknowledged */

        if (c->flags & TCPF_RECOVERY) {
            if (seq_geq(ack, c->snd_recover)) {
                /* RFC 6582 §3.2 step 6 / RFC 6675 §5: full ACK ends recovery. */
                c->flags &= ~TCPF_RECOVERY;
                uint32_t flight = c->snd_max - c->snd_una;
                uint32_t dmss = tcp_output__data_mss(c);
                if (!ops->cong_control)
                    c->cwnd = (c->flags & TCPF_SACK_OK) ? c->ssthresh
                                                        : SLIP_MIN(c->ssthresh, SLIP_MAX(flight, dmss) + dmss);
                c->dupacks = 0;
            } else if (!(c->flags & TCPF_SACK_OK)) {
                /* RFC 6582 §3.2 step 5: partial ACK: retransmit the next hole, deflate. */
                uint32_t dmss = tcp_output__data_mss(c);
                uint32_t data_end = c->snd_q_seq + c->sndq.bytes;
                uint32_t len = SLIP_MIN(dmss, seq_gt(data_end, c->snd_una) ? data_end - c->snd_una : 0);
                tcp_output__segment(env, sh, c, c->snd_una, len, WIRE_TCP_ACK);
                c->cwnd = c->cwnd > acked ? c->cwnd - acked : dmss;
                if (acked >= dmss)
                    c->cwnd += dmss;
                tcp_timer__rexmt_restart(env, sh, c);
            }
        } else {
            c->dupacks = 0;
            /* Grow only when the window was the limit (RFC 7661 spirit; Linux tcp_is_cwnd_limited):
             * cwnd stopped the sender in this window, or in slow start cwnd is below twice the
             * most that was in flight in it (an application that wrote exactly IW10 still
             * doubles it: packetdrill slow-start-app-limited), or the flight filled cwnd. */
            uint32_t most = SLIP_MAX(flight_before, c->max_flight);
            bool limited = c->cwnd_limited ||
                           (c->cwnd < c->ssthresh ? c->cwnd < 2 * most
                                                  : flight_before + tcp_output__data_mss(c) >= c->cwnd);
            if (limited && !ops->cong_control)
                ops->on_ack(c, acked, env->now);
        }
        if (c->snd_una == c->snd_max) {
            tcp_timer__stop(c, TT_REXMT);
        } else {
            tcp_timer__rexmt_restart(env, sh, c);
        }
        if (data_acked)
            tcp_conn__wake(sh, c);
    } else if (ack == c->snd_una && s->len == 0 && !(s->flags & (WIRE_TCP_SYN | WIRE_TCP_FIN)) &&
               c->snd_max != c->snd_una && (win == c->snd_wnd || newly_sacked)) {
        /* RFC 5681 §2 duplicate ACK (RFC 6675: or one carrying new SACK information). */
        on_dupack(env, sh, c);
    }

    tcp_undo__on_ack(sh, c, old_una, s);
    if (sack) {
        tcp_rack__tlp_ack(env, c, ack, &s->th.opts);
        int64_t delivered = (int64_t)(c->snd_una - old_una) + (int64_t)tcp_sack__sacked_bytes(c) - sacked_before;
        tcp_rack__after_ack(env, sh, c, delivered > 0 ? (uint32_t)delivered : 0, c->snd_una != old_una);
    }
    if (ops->cong_control) {
        /* Linux's cong_control: the model sees every ACK, after loss detection decided the
         * recovery state, and sets cwnd and the pacing rate. */
        int64_t delivered = (int64_t)(c->snd_una - old_una) + (int64_t)tcp_sack__sacked_bytes(c) - sacked_before;
        tcp_rate__gen(c, delivered > 0 ? (uint32_t)delivered : 0, env->now, &rs);
        rs.losses = (uint32_t)SLIP_MIN((c->st.rack_lost - lost_before) * tcp_output__data_mss(c), (uint64_t)UINT32_MAX);
        rs.prior_in_flight = prior_flight;
        rs.ca_state = (c->flags & TCPF_LOSS) ? TCP_CA_LOSS : (c->flags & TCPF_RECOVERY) ? TCP_CA_RECOVERY : TCP_CA_OPEN;
        ops->cong_control(c, &rs, env->now);
        c->st.bbr_acks++;
        sh->c.bbr_acks++;
    }
    tcp_ecn__ack_in(env, sh, c, s);     /* after recovery's decision: it takes precedence */
    if (c->sndbuf_full && c->snd_una != old_una)
        tcp_buf__snd_expand(env, sh, c);    /* after cwnd's update for this ACK */

    /* RFC 9293 §3.10.7.4: update the send window from the newest segment only. */
    if (seq_lt(c->snd_wl1, s->seq) || (c->snd_wl1 == s->seq && seq_leq(c->snd_wl2, ack))) {
        bool opened = win > c->snd_wnd;
        c->snd_wnd = win;
        c->snd_wl1 = s->seq;
        c->snd_wl2 = ack;
        if (win > c->max_sndwnd)
            c->max_sndwnd = win;
        if (opened && win > 0 && tcp_timer__armed(c, TT_PERSIST)) {
            tcp_timer__stop(c, TT_PERSIST);
            c->persist_shift = 0;
            c->probe_stamp = 0;
            /* Probing moved SND.NXT nowhere; resume from SND.UNA. */
        }
    }
    return true;
}

/* ---- the peer's FIN (eighth step) ---- */

static void enter_time_wait(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    tcp_set_state(sh, c, TCPS_TIME_WAIT);
    tcp_timer__stop_all(c);
    pkt_queue__purge(env->pool, &c->sndq);
    tcp_timer__set(sh, c, TT_2MSL, env->now + TCP_TIMEWAIT_LEN);
}

static bool our_fin_acked(const struct tcp_conn *c)
{
    return (c->flags & TCPF_FIN_SENT) && c->snd_una == c->snd_max && c->sndq.bytes == 0;
}

static void fin_received(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    c->rcv_nxt++;
    c->flags |= TCPF_RCVD_FIN | TCPF_ACK_NOW;
    c->flags &= ~TCPF_OOO_FIN;
    tcp_conn__wake(sh, c);
    switch (c->state) {
    case TCPS_SYN_RECEIVED:
    case TCPS_ESTABLISHED:
        tcp_set_state(sh, c, TCPS_CLOSE_WAIT);
        break;
    case TCPS_FIN_WAIT_1:
        if (our_fin_acked(c))
            enter_time_wait(env, sh, c);
        else
            tcp_set_state(sh, c, TCPS_CLOSING);
        break;
    case TCPS_FIN_WAIT_2:
        enter_time_wait(env, sh, c);
        break;
    default:
        break;
    }
}

/* ---- seventh step: segment text ---- */

/* Quick ACKs again after a sign that the sender is repairing a loss: data out of order, data a
 * second time, data after a silence longer than our RTO (as Linux's receiver, which enters its
 * quickack mode there). Each in-order segment is then acknowledged at once, up to half the
 * receive window's worth of segments and at most TCP_QUICKACKS: a sender whose cwnd the loss cut
 * to a few segments gets its ACK clock back from them instead of waiting out our delayed-ACK timer
 * (40 ms, where the path's RTT may be 1 ms) on every odd segment. (Linux since 4.18 no longer
 * enters it for out-of-order data; without it here BBR's transfers in test_tcp_bbr's lossy
 * path took an RTO in 2 of 36 seeds, none with it.) */
static void quickack_enter(struct tcp_conn *c)
{
    uint32_t mss = c->rcv_mss ? c->rcv_mss : TCP_MSS_NO_OPTION;
    uint32_t n = tcp_rcv_space(c) / (2 * mss);
    n = SLIP_MAX(SLIP_MIN(n, (uint32_t)TCP_QUICKACKS), 2u);
    if (c->quickacks < n)
        c->quickacks = (uint16_t)n;
}

/* RFC 2883 §4.1.1: text of s that lies below RCV.NXT arrived before; that part is reported as a
 * D-SACK in the next ACK. Returns whether s carried any. */
static bool old_duplicate(struct tcp_conn *c, const struct tcp_seg *s)
{
    if (!s->len || !seq_lt(s->seq, c->rcv_nxt))
        return false;
    tcp_sack__dup(c, s->seq, seq_min(s->seq + s->len, c->rcv_nxt));
    return true;
}

/* Within a received burst (the poll loop's: env->rx_burst) an ACK that data calls for waits for
 * the burst's end (tcp__burst_end), which sends one for all of the connection's segments in it:
 * as Linux's receiver, which acknowledges the packet GRO made of a burst's segments once, in
 * order or not (about one ACK in six segments at 1 ms RTT on veth, where we sent one per
 * segment while a hole was open: each ACK costs the path and the sender a packet). RFC 5681
 * §4.2 says SHOULD for an ACK every second full segment and for each out-of-order one; the SACK
 * blocks of the burst's ACK carry what the sender needs (a connection without SACK still gets
 * a duplicate ACK for each out-of-order segment, the sender's only loss signal). Not past
 * TCP_BURST_ACK_BYTES unacknowledged; false when the list is full (an ACK at once). */
static bool burst_ack_defer(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, bool ooo)
{
    if (!env->rx_burst || c->rcv_unacked >= TCP_BURST_ACK_BYTES || (ooo && !(c->flags & TCPF_SACK_OK)))
        return false;
    if (c->burst_ack)
        return true;                    /* listed by an earlier segment of the burst */
    uint32_t n = SLIP_MIN(sh->nburst_acks, (uint32_t)TCP_BURST_ACKS);
    if (n == TCP_BURST_ACKS)
        return false;
    sh->burst_acks[n] = (slip_idx_t)(c - sh->conns);
    sh->nburst_acks = n + 1;
    c->burst_ack = 1;
    return true;
}

/* An ACK is owed, and the delayed-ACK timer sends it by at (or earlier, when it was already set
 * so) unless a segment carries it first. */
static void ack_delayed(struct tcp_shared *sh, struct tcp_conn *c, slip_time_t at)
{
    c->flags |= TCPF_ACK_PENDING;
    if (!tcp_timer__armed(c, TT_DELACK) || c->timer[TT_DELACK] > at)
        tcp_timer__set(sh, c, TT_DELACK, at);
}

/* SACK compression, as Linux's receiver (tcp_comp_sack_*): out-of-order data while a hole is
 * open calls for an ACK per segment (RFC 5681 §4.2), one per run within a received burst; at
 * 1 ms RTT and 1 % loss a hole is open most of the time and that was still four times the
 * kernel receiver's ACKs, each a packet for the path and an ACK for the sender to process. The
 * first TCP_COMP_DUPS ACKs at one RCV.NXT go as before (the sender's duplicate-ACK threshold);
 * after them the ACK for a segment that extends the run the previous one ended waits a
 * twentieth of the RTT (at most 1 ms) or until TCP_COMP_SEGS segments wait. A segment that
 * starts a run elsewhere (a new hole below it: a loss the sender should hear of at once) sends
 * what waited and is acknowledged itself as before, so each ACK reports every run that changed
 * (an ACK for runs in several places reports only 3-4: test_tcp_buf's large window saw 50x the
 * D-SACKs when compression spanned runs). Connections without SACK are not compressed: their
 * duplicate ACKs are the sender's only signal. true: the ACK waits (TT_DELACK moved to the
 * compression deadline). */
static bool sack_compress(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, bool extends)
{
    if (!extends || !(c->flags & TCPF_SACK_OK) || c->comp_rcv_nxt != c->rcv_nxt ||
        c->comp_dups < TCP_COMP_DUPS || c->comp_segs >= TCP_COMP_SEGS)
        return false;
    c->comp_segs++;
    slip_time_t rtt = c->rcv_rtt;
    if (c->srtt_us && (!rtt || (slip_time_t)c->srtt_us * SLIP_USEC < rtt))
        rtt = (slip_time_t)c->srtt_us * SLIP_USEC;
    ack_delayed(sh, c, env->now + SLIP_MIN(rtt / TCP_COMP_RTT_DIV, (slip_time_t)TCP_COMP_MAX_DELAY));
    sh->c.sack_compressed++;
    return true;
}

/* The segment's data calls for an ACK: at once, or at the end of the received burst (with the
 * delayed-ACK timer behind it, should the burst never end: its process killed in it). */
static void ack_owed(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, bool ooo, bool extends)
{
    if (ooo && !c->burst_ack && sack_compress(env, sh, c, extends))
        return;
    if (burst_ack_defer(env, sh, c, ooo))
        ack_delayed(sh, c, env->now + TCP_DELACK_TIME);
    else
        c->flags |= TCPF_ACK_NOW;
}

void tcp__burst_end(struct ip_env *env, struct tcp_shared *sh)
{
    uint32_t n = SLIP_MIN(sh->nburst_acks, (uint32_t)TCP_BURST_ACKS);
    sh->nburst_acks = 0;
    for (uint32_t k = 0; k < n; k++) {
        slip_idx_t i = sh->burst_acks[k];
        if (i >= sh->max_conns)
            continue;                   /* shared memory: bounded */
        struct tcp_conn *c = &sh->conns[i];
        bool owed = c->burst_ack && (c->flags & TCPF_ACK_PENDING) && c->state != TCPS_CLOSED;
        c->burst_ack = 0;
        if (!owed)
            continue;                   /* a segment of ours carried it meanwhile */
        sh->c.burst_acks++;
        c->flags |= TCPF_ACK_NOW;
        tcp_output(env, sh, c);
    }
}

static void delack_account(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, uint32_t len)
{
    if (len > c->rcv_mss)
        c->rcv_mss = (uint16_t)SLIP_MIN(len, 65535u);
    c->rcv_unacked += len;
    /* Linux-like: quick ACKs at the start, then every second full segment, else 40 ms (the
     * first two, within a received burst, at its end). */
    if (c->quickacks) {
        c->quickacks--;
        ack_owed(env, sh, c, false, false);
    } else if (c->rcv_unacked >= 2u * c->rcv_mss) {
        ack_owed(env, sh, c, false, false);
    } else {
        ack_delayed(sh, c, env->now + TCP_DELACK_TIME);
    }
}

/* false: the segment brought new data after the application shut reading and sent its FIN,
 * and the connection was reset (it may be freed: the caller stops). */
static bool process_text(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, struct tcp_seg *s)
{
    if (s->len == 0)
        return true;
    if ((c->burst_ack || c->comp_segs) && s->seq != c->burst_next && (c->flags & TCPF_ACK_PENDING)) {
        /* Not where the previous segment ended (a hole, or a retransmission into one): the ACK
         * held for the burst or by SACK compression goes first, as GRO packs only contiguous
         * segments and Linux acknowledges each packet. One ACK for runs in several places
         * would report the changes to only the 3-4 SACK blocks it carries (seen: 1.4-2x the
         * sender's retransmissions at 3-5 % loss with one ACK a burst; 50x the D-SACKs of
         * test_a_large_window_keeps_its_out_of_order_segments with compression across runs). */
        tcp_output__ack(env, sh, c);
    }
    const bool extends = s->seq == c->burst_next;
    c->burst_next = s->seq + s->len;
    if (c->last_data_rx && env->now - c->last_data_rx > tcp_rto(c))
        quickack_enter(c);          /* the sender may restart from a small window */
    c->last_data_rx = env->now;     /* TCP_INFO last_data_recv */
    if (c->state != TCPS_ESTABLISHED && c->state != TCPS_FIN_WAIT_1 && c->state != TCPS_FIN_WAIT_2)
        return true;    /* after the peer's FIN no more text is accepted */
    if ((c->flags & TCPF_SHUT_RD) && c->state != TCPS_ESTABLISHED && seq_gt(s->seq + s->len, c->rcv_nxt)) {
        /* RFC 1122 4.2.2.13, as Linux (tcp_rcv_state_process, TCPAbortOnData): new data after
         * shutdown(SHUT_RD) or close() and our FIN is lost for good; a reset says so, and the
         * application's next call gets ECONNRESET. The reset answers this segment as
         * RFC 9293 §3.10.7.1 does, <SEQ=SEG.ACK><CTL=RST>, as Linux's (packetdrill user_timeout):
         * SEG.ACK is what the peer expects next, so its RFC 5961 §3.2 check takes the reset at
         * once, where one at our SND.MAX (past a FIN it has not seen) would only draw a
         * challenge ACK. */
        sh->c.abort_on_data++;
        free_payload(env, s);
        tcp_output__rst_reply(env, sh, s);
        tcp_conn__drop(env, sh, c, ECONNRESET);
        return false;
    }
    if (s->seq == c->rcv_nxt) {
        /* After shutdown(SHUT_RD) data is still taken, acknowledged and queued, and read()
         * returns it before 0, as Linux does (packetdrill shutdown-rd-wr-close): RCV_SHUTDOWN
         * only ends reads once the queue is empty; closing with it unread resets. */
        if (c->rcv_frames >= tcp_rcv_frames_max(c) && s->len >= 512) {
            sh->c.rcvbuf_drops++;
            c->st.rcv_drops++;
            c->flags |= TCPF_ACK_NOW;
            return true;
        }
        tcp_rcvq__append(env->pool, c, s->pkt, s->len);
        s->pkt = SLIP_NIL;
        c->rcv_nxt += s->len;
        c->st.bytes_in += s->len;
        tcp_buf__rcv_rtt(c, env->now);
        if (c->ooo_head != SLIP_NIL) {
            /* RFC 5681 §4.2: ACK at once when a segment fills (part of) a hole (within a
             * received burst, at its end). */
            tcp_reass__pull(env, c);
            ack_owed(env, sh, c, false, false);
            tcp_sack__rcv_update(env->pool, c, NULL);
        }
        delack_account(env, sh, c, s->len);
        tcp_conn__wake(sh, c);
    } else {
        /* RFC 5681 §4.2: an out-of-order segment is acknowledged at once (duplicate ACK; with
         * SACK, within a received burst, at its end). */
        c->st.ooo_segs++;
        quickack_enter(c);
        struct tcp_sack_block run;
        tcp_reass__add(env, c, s->seq, s->pkt, s->len, &run);
        s->pkt = SLIP_NIL;
        tcp_sack__rcv_update(env->pool, c, &run);
        ack_owed(env, sh, c, true, extends);
    }
    return true;
}

/* ---- LISTEN (RFC 9293 §3.10.7.2) ---- */

static void input_listen(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *l, struct tcp_seg *s,
                         uint32_t iss);

static void input_other(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, struct tcp_seg *s);

/* The ACK completing a SYN-cookie handshake: rebuild the connection from the cookie. */
static bool cookie_ack(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *l, struct tcp_seg *s)
{
    struct tcp_cookie_opts co;
    const struct wire_tcp_opts *o = &s->th.opts;
    uint32_t tsecr = 0;
    if (o->has_ts)
        tsecr = o->tsecr - tcp_ts_offset(sh, s->daddr, s->th.dport, s->saddr, s->th.sport);
    if (tcp_syncookie__check(sh, s->daddr, s->th.dport, s->saddr, s->th.sport, s->seq - 1, s->ack - 1,
                             env->now, o->has_ts, tsecr, &co) < 0) {
        sh->c.syncookies_failed++;
        return false;
    }
    if (l->acceptq_len >= l->backlog) {
        sh->c.listen_overflows++;
        return true;    /* drop; the peer retransmits */
    }
    int i = tcp_conn__spawn(env, sh, l, s, s->ack - 1);
    if (i < 0) {
        /* The table filled up since the cookie left. The peer believes it is connected: a
         * reset tells it we are not, instead of an established connection nobody serves. */
        sh->c.cookie_full_rsts++;
        return false;
    }
    sh->c.syncookies_ok++;
    struct tcp_conn *c = &sh->conns[i];
    c->flags |= TCPF_SYNCOOKIE;
    c->irs = s->seq - 1;
    c->rcv_nxt = s->seq;
    c->last_ack_sent = c->rcv_nxt;
    c->snd_nxt = c->snd_max = s->ack;
    c->peer_mss = co.mss;
    c->mss = (uint16_t)SLIP_MIN((uint32_t)c->mss, (uint32_t)co.mss);
    if (co.ts_ok) {
        c->flags |= TCPF_TS_OK;
        c->ts_recent = o->tsval;
    }
    if (co.sack_ok)
        c->flags |= TCPF_SACK_OK;
    if (co.ws_ok) {
        c->flags |= TCPF_WS_OK;
        c->snd_wscale = co.wscale;
    } else {
        c->rcv_wscale = 0;
    }
    tcp_conn__clamp_iw(c);
    /* What our cookie SYN-ACK advertised (unscaled, as in any SYN). */
    c->rcv_adv = c->rcv_nxt + SLIP_MIN(tcp_rcv_space(c), 65535u);
    c->snd_wl1 = s->seq - 1;
    c->snd_wl2 = s->ack;
    tcp_cc__get(c->cc_algo)->init(c);
    /* Now an ordinary SYN-RECEIVED connection whose SYN-ACK is acknowledged by this segment. */
    c->snd_una = c->iss;
    input_other(env, sh, c, s);
    return true;
}

static void input_listen(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *l, struct tcp_seg *s,
                         uint32_t iss)
{
    /* first, check for a RST: an incoming RST is ignored. */
    if (s->flags & WIRE_TCP_RST)
        return;
    /* second, check for an ACK: any acknowledgment is bad in LISTEN (unless it returns a SYN
     * cookie): <SEQ=SEG.ACK><CTL=RST>. */
    if (s->flags & WIRE_TCP_ACK) {
        if (!(s->flags & WIRE_TCP_SYN) && sh->syncookies && cookie_ack(env, sh, l, s))
            return;
        tcp_output__rst_reply(env, sh, s);
        return;
    }
    /* third, check for a SYN. */
    if (!(s->flags & WIRE_TCP_SYN))
        return;
    sh->c.syn_in++;
    if (l->acceptq_len >= l->backlog) {
        sh->c.listen_overflows++;
        return;
    }
    /* A connection we could not hold gets no SYN cookie either: the peer would believe it is
     * connected and send into nothing. Dropped, the SYN is retransmitted (1 s, 3 s, 7 s ...)
     * and succeeds once a slot is free, as with a full SYN queue without cookies. */
    if (!tcp_conn__room(sh)) {
        sh->c.syn_full_drops++;
        return;
    }
    uint32_t synq_max = SLIP_MIN(l->backlog, (uint32_t)TCP_SYNQ_MAX);
    if (sh->syncookies == 2 || l->synq_len >= synq_max) {
        if (!sh->syncookies) {
            sh->c.synq_drops++;
            return;
        }
        /* RFC 4987 §3.6: answer statelessly. */
        const struct wire_tcp_opts *o = &s->th.opts;
        struct tcp_conn tmp;
        memset(&tmp, 0, sizeof(tmp));
        tcp_seg__name(&tmp, s);
        tmp.user_mss = l->user_mss;
        struct tcp_cookie_opts co = {
            .mss = (uint16_t)SLIP_MIN(o->has_mss ? o->mss : TCP_MSS_NO_OPTION, tcp_conn__route_mss(env, &tmp)),
            .sack_ok = o->sack_ok, .ts_ok = o->has_ts, .ws_ok = o->has_wscale,
            .wscale = (uint8_t)SLIP_MIN(o->wscale, 14),
        };
        uint32_t off = tcp_ts_offset(sh, s->daddr, s->th.dport, s->saddr, s->th.sport);
        uint32_t ts = tcp_ts_now(env->now);
        uint32_t cookie = tcp_syncookie__make(sh, s->daddr, s->th.dport, s->saddr, s->th.sport, s->seq,
                                              env->now, &co, &ts);
        uint32_t mssind_mss = tcp_syncookie_mss[0];
        for (unsigned k = 0; k < 4; k++)
            if (tcp_syncookie_mss[k] <= co.mss)
                mssind_mss = tcp_syncookie_mss[k];
        tcp_output__synack_cookie(env, sh, l, s, cookie, (uint16_t)mssind_mss, ts + off);
        return;
    }
    if (!iss)
        iss = tcp_isn(sh, s->daddr, s->th.dport, s->saddr, s->th.sport, env->now);
    int i = tcp_conn__spawn(env, sh, l, s, iss);
    if (i < 0) {
        sh->c.listen_drops++;
        return;
    }
    struct tcp_conn *c = &sh->conns[i];
    /* Set RCV.NXT to SEG.SEQ+1, IRS to SEG.SEQ; send <SEQ=ISS><ACK=RCV.NXT><CTL=SYN,ACK>. Text in
     * the SYN is not kept (the peer retransmits it); see docs/COMPLIANCE-tcp.md. */
    c->irs = s->seq;
    c->rcv_nxt = s->seq + 1;
    c->rcv_adv = c->rcv_nxt;
    c->last_ack_sent = c->rcv_nxt;
    apply_syn_options(env, c, s, false);
    tcp_ecn__syn_in(sh, c, s, false);
    c->snd_wnd = s->th.window;      /* RFC 7323 §2.2: a SYN's window is never scaled */
    c->max_sndwnd = c->snd_wnd;
    c->snd_wl1 = s->seq;
    c->snd_wl2 = c->iss;
    c->last_rx = env->now;
    tcp_output(env, sh, c);
}

/* ---- SYN-SENT (RFC 9293 §3.10.7.3) ---- */

static void input_syn_sent(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, struct tcp_seg *s)
{
    bool ack_ok = false;
    /* first, check the ACK bit: SEG.ACK =< ISS or > SND.NXT is unacceptable -> RST (unless RST). */
    if (s->flags & WIRE_TCP_ACK) {
        if (seq_leq(s->ack, c->iss) || seq_gt(s->ack, c->snd_max)) {
            if (!(s->flags & WIRE_TCP_RST))
                tcp_output__rst_reply(env, sh, s);
            return;
        }
        ack_ok = seq_leq(c->snd_una, s->ack) && seq_leq(s->ack, c->snd_max);
    }
    /* second, check the RST bit: with an acceptable ACK the connection is refused; otherwise
     * drop (RFC 5961 §3.2 keeps SYN-SENT as RFC 793 had it). */
    if (s->flags & WIRE_TCP_RST) {
        if (ack_ok) {
            sh->c.rst_in++;
            tcp_conn__drop(env, sh, c, ECONNREFUSED);
        }
        return;
    }
    /* third (security) does not apply; fourth, check the SYN bit. */
    if (!(s->flags & WIRE_TCP_SYN))
        return;
    c->irs = s->seq;
    c->rcv_nxt = s->seq + 1;
    c->rcv_adv = c->rcv_nxt;
    c->last_ack_sent = c->rcv_nxt;
    c->last_rx = env->now;
    apply_syn_options(env, c, s, true);
    tcp_ecn__syn_in(sh, c, s, (s->flags & WIRE_TCP_ACK) != 0);
    if (ack_ok) {
        c->snd_una = s->ack;
        if ((c->flags & TCPF_RTT_TIMING) && seq_gt(s->ack, c->rt_seq)) {
            tcp_rtt__sample(c, env->now - c->rt_time);
            c->flags &= ~TCPF_RTT_TIMING;
        }
        c->rxt_shift = 0;
    }
    if (seq_gt(c->snd_una, c->iss)) {
        /* Our SYN is acknowledged: ESTABLISHED, <SEQ=SND.NXT><ACK=RCV.NXT><CTL=ACK>. */
        c->snd_wnd = s->th.window;  /* unscaled in a SYN */
        c->max_sndwnd = c->snd_wnd;
        c->snd_wl1 = s->seq;
        c->snd_wl2 = s->ack;
        tcp_timer__stop(c, TT_REXMT);
        tcp_cc__get(c->cc_algo)->init(c);
        tcp_set_state(sh, c, TCPS_ESTABLISHED);
        c->last_data_rx = c->last_data_tx = c->last_ack_rx = env->now;     /* TCP_INFO counts from here */
        tcp_timer__keep_restart(env, sh, c);
        c->flags |= TCPF_ACK_NOW;
        /* Text or FIN on the SYN-ACK: continue at the sixth step. */
        if (s->len) {
            s->seq++;
            if (!process_text(env, sh, c, s))
                return;
        }
        if ((s->flags & WIRE_TCP_FIN) && s->seq + s->len == c->rcv_nxt)
            fin_received(env, sh, c);
        tcp_output(env, sh, c);
        return;
    }
    /* Simultaneous open: SYN-RECEIVED, <SEQ=ISS><ACK=RCV.NXT><CTL=SYN,ACK>. */
    c->snd_wnd = s->th.window;
    c->max_sndwnd = c->snd_wnd;
    c->snd_wl1 = s->seq;
    c->snd_wl2 = c->iss;
    tcp_set_state(sh, c, TCPS_SYN_RECEIVED);
    c->snd_nxt = c->iss;
    tcp_output(env, sh, c);
}

/* ---- the other states (RFC 9293 §3.10.7.4) ---- */

static void input_other(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, struct tcp_seg *s)
{
    const uint32_t orig_seq = s->seq;
    const struct wire_tcp_opts *o = &s->th.opts;

    /* A retransmitted SYN while our SYN-ACK is unacknowledged: send the SYN-ACK again. */
    if (c->state == TCPS_SYN_RECEIVED && (s->flags & WIRE_TCP_SYN) && !(s->flags & (WIRE_TCP_ACK | WIRE_TCP_RST)) &&
        s->seq == c->irs) {
        c->snd_nxt = c->iss;
        tcp_output(env, sh, c);
        return;
    }

    /* RFC 7323 §5.3 PAWS: a timestamp older than TS.Recent marks an old duplicate. */
    if ((c->flags & TCPF_TS_OK) && o->has_ts && !(s->flags & WIRE_TCP_RST) && seq_lt(o->tsval, c->ts_recent)) {
        sh->c.paws_drops++;
        old_duplicate(c, s);
        tcp_output__ack(env, sh, c);
        return;
    }

    /* first, check sequence number (the four cases of the acceptability table). */
    uint32_t wnd = seq_gt(c->rcv_adv, c->rcv_nxt) ? c->rcv_adv - c->rcv_nxt : 0;
    uint32_t seglen = tcp_seg_len(s);
    bool ok;
    if (seglen == 0)
        ok = wnd == 0 ? s->seq == c->rcv_nxt : seq_in(s->seq, c->rcv_nxt, c->rcv_nxt + wnd);
    else
        ok = wnd != 0 && (seq_in(s->seq, c->rcv_nxt, c->rcv_nxt + wnd) ||
                          seq_in(s->seq + seglen - 1, c->rcv_nxt, c->rcv_nxt + wnd));
    /* A zero window still takes ACK/RST/FIN information on a segment at RCV.NXT. */
    if (!ok && wnd == 0 && s->seq == c->rcv_nxt)
        ok = true;
    if (!ok) {
        sh->c.out_of_window++;
        if (old_duplicate(c, s))
            quickack_enter(c);
        if (!(s->flags & WIRE_TCP_RST)) {
            if (c->state == TCPS_TIME_WAIT && (s->flags & WIRE_TCP_FIN))
                tcp_timer__set(sh, c, TT_2MSL, env->now + TCP_TIMEWAIT_LEN);
            tcp_output__ack(env, sh, c);
        }
        return;
    }
    /* Trim to the window: text before RCV.NXT (a SYN there too) and beyond the right edge. */
    if ((s->flags & WIRE_TCP_SYN) && seq_lt(s->seq, c->rcv_nxt)) {
        s->flags &= (uint8_t)~WIRE_TCP_SYN;
        s->seq++;
    }
    if (seq_lt(s->seq, c->rcv_nxt)) {
        uint32_t delta = c->rcv_nxt - s->seq;
        uint32_t cut = SLIP_MIN(delta, s->len);
        if (old_duplicate(c, s))
            quickack_enter(c);
        if (cut) {
            uint32_t freed = 0;
            s->pkt = tcp_pkt__trim_front(env->pool, s->pkt, cut, &freed);
            s->len -= cut;
            s->seq += cut;
            delta -= cut;
        }
        if (delta && (s->flags & WIRE_TCP_FIN)) {
            s->flags &= (uint8_t)~WIRE_TCP_FIN;   /* an old FIN */
            s->seq++;
        }
        c->flags |= TCPF_ACK_NOW;
    }
    uint32_t right = c->rcv_nxt + wnd;
    if (s->len && seq_gt(s->seq + s->len, right)) {
        uint32_t keep = seq_gt(right, s->seq) ? right - s->seq : 0;
        if (keep) {
            tcp_pkt__trim_back(env->pool, s->pkt, keep);
        } else {
            free_payload(env, s);
        }
        s->len = keep;
        s->flags &= (uint8_t)~WIRE_TCP_FIN;
        c->flags |= TCPF_ACK_NOW;
    }
    /* RFC 7323 §4.3: TS.Recent follows the segment covering Last.ACK.sent, once its ACK field is
     * acceptable (as Linux's tcp_ack, FLAG_UPDATE_TS_RECENT): a segment acknowledging data never
     * sent, or older than the RFC 5961 §5.2 bound, is dropped in the fifth step, and its TSval
     * taken as TS.Recent would make PAWS drop every later segment (packetdrill ts_recent/
     * invalid_ack: an invalid ACK with TSval 200000, then data with 201). */
    bool ack_ok = !(s->flags & WIRE_TCP_ACK) ||
                  (!seq_gt(s->ack, c->snd_max) && !seq_lt(s->ack, c->snd_una - SLIP_MAX(c->max_sndwnd, 1u)));
    if ((c->flags & TCPF_TS_OK) && o->has_ts && ack_ok && seq_leq(orig_seq, c->last_ack_sent))
        c->ts_recent = o->tsval;

    /* second, check the RST bit (RFC 5961 §3.2): exactly RCV.NXT resets, anything else in the
     * window only earns a challenge ACK. */
    if (s->flags & WIRE_TCP_RST) {
        if (orig_seq != c->rcv_nxt) {
            sh->c.rst_ignored++;
            tcp_output__challenge_ack(env, sh, c);
            return;
        }
        sh->c.rst_in++;
        switch (c->state) {
        case TCPS_SYN_RECEIVED:
            /* Passive: back to LISTEN (the child just goes); active: refused. */
            tcp_conn__drop(env, sh, c, (c->flags & TCPF_PASSIVE) ? 0 : ECONNREFUSED);
            break;
        case TCPS_ESTABLISHED:
        case TCPS_FIN_WAIT_1:
        case TCPS_FIN_WAIT_2:
            sh->c.conn_resets++;
            tcp_conn__drop(env, sh, c, ECONNRESET);
            break;
        case TCPS_CLOSE_WAIT:
            sh->c.conn_resets++;
            tcp_conn__drop(env, sh, c, EPIPE);    /* as Linux */
            break;
        default:    /* CLOSING, LAST-ACK, TIME-WAIT */
            tcp_conn__drop(env, sh, c, 0);
            break;
        }
        return;
    }

    /* third, security: not used. fourth, check the SYN bit: in a synchronized state a SYN is
     * answered with a challenge ACK (RFC 5961 §4.2), never a reset. */
    if (s->flags & WIRE_TCP_SYN) {
        tcp_output__challenge_ack(env, sh, c);
        return;
    }

    /* fifth, check the ACK field. */
    if (!(s->flags & WIRE_TCP_ACK))
        return;
    c->last_rx = env->now;
    c->keep_probes = 0;
    c->probes_out = 0;
    if (c->state == TCPS_SYN_RECEIVED) {
        if (!(seq_lt(c->snd_una, s->ack) && seq_leq(s->ack, c->snd_max))) {
            tcp_output__rst_reply(env, sh, s);
            return;
        }
        if (c->parent != SLIP_NIL && tcp_conn__queue_accept(sh, c) < 0) {
            /* Accept queue full: as Linux, ignore the ACK; the SYN-ACK timer retries. */
            sh->c.listen_overflows++;
            return;
        }
        c->snd_wnd = (uint32_t)s->th.window << c->snd_wscale;
        c->max_sndwnd = SLIP_MAX(c->max_sndwnd, c->snd_wnd);
        c->snd_wl1 = s->seq;
        c->snd_wl2 = s->ack;
        tcp_set_state(sh, c, (c->flags & TCPF_FIN_QUEUED) ? TCPS_FIN_WAIT_1 : TCPS_ESTABLISHED);
        c->last_data_rx = c->last_data_tx = env->now;     /* TCP_INFO counts from here */
        tcp_timer__keep_restart(env, sh, c);
    }
    if (c->state == TCPS_TIME_WAIT) {
        /* Only a retransmission of the remote FIN can arrive: ACK it and restart 2 MSL. */
        if (s->flags & WIRE_TCP_FIN) {
            c->flags |= TCPF_ACK_NOW;
            tcp_timer__set(sh, c, TT_2MSL, env->now + TCP_TIMEWAIT_LEN);
            tcp_output(env, sh, c);
        }
        return;
    }
    if (!process_ack(env, sh, c, s))
        return;
    switch (c->state) {
    case TCPS_FIN_WAIT_1:
        if (our_fin_acked(c)) {
            tcp_set_state(sh, c, TCPS_FIN_WAIT_2);
            tcp_timer__stop(c, TT_REXMT);
            if (c->flags & TCPF_ORPHAN)
                tcp_timer__set(sh, c, TT_2MSL, env->now + TCP_FIN_TIMEOUT);
        }
        break;
    case TCPS_CLOSING:
        if (our_fin_acked(c)) {
            enter_time_wait(env, sh, c);
            return;
        }
        break;
    case TCPS_LAST_ACK:
        if (our_fin_acked(c)) {
            tcp_conn__drop(env, sh, c, 0);
            return;
        }
        break;
    default:
        break;
    }

    /* sixth, check the URG bit: urgent data is delivered inline (see docs/COMPLIANCE-tcp.md).
     * seventh, process the segment text (RFC 3168 §6.1.3: its CE mark or CWR first). */
    if (tcp_ecn__seg_in(sh, c, s))
        c->flags |= TCPF_ACK_NOW;
    if (!process_text(env, sh, c, s))
        return;

    /* eighth, check the FIN bit (only once everything before it is in). */
    if (s->flags & WIRE_TCP_FIN) {
        uint32_t fin_seq = s->seq + s->len;
        if (fin_seq == c->rcv_nxt && !(c->flags & TCPF_RCVD_FIN)) {
            fin_received(env, sh, c);
        } else if (seq_gt(fin_seq, c->rcv_nxt)) {
            c->flags |= TCPF_OOO_FIN;
            c->rcv_fin_seq = fin_seq;
            c->flags |= TCPF_ACK_NOW;
        }
    }
    if ((c->flags & TCPF_OOO_FIN) && c->rcv_nxt == c->rcv_fin_seq && !(c->flags & TCPF_RCVD_FIN))
        fin_received(env, sh, c);
    tcp_output(env, sh, c);
}

/* ---- segment arrival ---- */

static bool chain_csum_ok(const struct pkt_pool *p, slip_idx_t i, be32 src, be32 dst, uint32_t l4_len)
{
    uint32_t sum = wire_csum_pseudo4(src, dst, WIRE_IPPROTO_TCP, (uint16_t)l4_len);
    for (; i != SLIP_NIL; i = pkt__meta(p, i)->chain)
        sum = wire_csum_add(sum, pkt__data(p, i), pkt__meta(p, i)->len);
    return wire_csum_fold(sum) == 0;
}

/* Cuts a received chain to exactly l4_len bytes (frames may carry Ethernet padding). */
bool tcp_input__fit(struct pkt_pool *p, slip_idx_t i, uint32_t l4_len)
{
    uint32_t have = 0;
    for (slip_idx_t b = i; b != SLIP_NIL; b = pkt__meta(p, b)->chain) {
        struct pkt_meta *m = pkt__meta(p, b);
        if (have + m->len >= l4_len) {
            m->len = (uint16_t)(l4_len - have);
            if (m->chain != SLIP_NIL) {
                pkt__free_chain(p, m->chain);
                m->chain = SLIP_NIL;
            }
            return true;
        }
        have += m->len;
    }
    return false;
}

/* RFC 6191 §2: a SYN for a TIME-WAIT connection may open a new incarnation when its timestamp
 * (or, without timestamps, its sequence number) is beyond the old connection's. */
static bool time_wait_reuse(const struct tcp_conn *c, const struct tcp_seg *s)
{
    if ((s->flags & (WIRE_TCP_SYN | WIRE_TCP_ACK | WIRE_TCP_RST)) != WIRE_TCP_SYN)
        return false;
    if ((c->flags & TCPF_TS_OK) && s->th.opts.has_ts)
        return seq_gt(s->th.opts.tsval, c->ts_recent);
    return seq_gt(s->seq, c->rcv_nxt);
}

void tcp_input(struct ip_env *env, struct tcp_shared *sh, const struct ip_rx *rx)
{
    struct pkt_pool *pool = env->pool;
    struct tcp_seg s;
    memset(&s, 0, sizeof(s));
    s.pkt = rx->pkt;
    sh->c.segs_in++;

    if (rx->l4_len < WIRE_TCP_HLEN_MIN || !tcp_input__fit(pool, s.pkt, rx->l4_len)) {
        sh->c.bad_header++;
        free_payload(env, &s);
        return;
    }
    if (!chain_csum_ok(pool, s.pkt, rx->ip.src, rx->ip.dst, rx->l4_len)) {
        sh->c.bad_csum++;
        free_payload(env, &s);
        return;
    }
    s.saddr = rx->ip.src;
    s.daddr = rx->ip.dst;
    s.tos = rx->ip.tos;
    tcp_input__segment(env, sh, &s, rx->l4_len);
}

void tcp_input__segment(struct ip_env *env, struct tcp_shared *sh, struct tcp_seg *sp, uint32_t l4_len)
{
    struct pkt_pool *pool = env->pool;
    struct pkt_meta *m = pkt__meta(pool, sp->pkt);
    int rc = wire_tcp__parse(pkt__data(pool, sp->pkt), m->len, &sp->th);
    if (rc == -EPROTO) {
        sh->c.bad_options++;
        goto drop;
    }
    if (rc < 0 || sp->th.sport == 0 || sp->th.dport == 0) {
        sh->c.bad_header++;
        goto drop;
    }
    sp->seq = sp->th.seq;
    sp->ack = sp->th.ack;
    sp->flags = sp->th.flags;
    sp->len = l4_len - sp->th.hdr_len;
    {
        uint32_t freed = 0;
        sp->pkt = tcp_pkt__trim_front(pool, sp->pkt, sp->th.hdr_len, &freed);
        if (sp->len == 0 && sp->pkt != SLIP_NIL) {
            pkt__free_chain(pool, sp->pkt);
            sp->pkt = SLIP_NIL;
        }
    }
    /* A SYN with RST or FIN is nonsense that some scanners send; drop it as Linux does. */
    if ((sp->flags & WIRE_TCP_SYN) && (sp->flags & (WIRE_TCP_RST | WIRE_TCP_FIN))) {
        sh->c.bad_header++;
        goto drop;
    }
    /* net.ipv4.tcp_timestamps, tcp_sack, tcp_window_scaling at 0: a SYN's offer of the option
     * is not taken, so neither side uses it (as Linux, which ignores it there too). */
    if ((sp->flags & WIRE_TCP_SYN) && sh->opts_off) {
        if (sh->opts_off & TCP_OPTS_OFF_TS)
            sp->th.opts.has_ts = false;
        if (sh->opts_off & TCP_OPTS_OFF_SACK)
            sp->th.opts.sack_ok = false;
        if (sh->opts_off & TCP_OPTS_OFF_WS)
            sp->th.opts.has_wscale = false;
    }

    slip_idx_t i;
    if (!sp->v6) {
        i = tcp__lookup(sh, sp->daddr, sp->th.dport, sp->saddr, sp->th.sport);
    } else {
        i = tcp__lookup6_conn(sh, sp->daddr, &sp->daddr6, sp->th.dport, sp->saddr, &sp->saddr6, sp->th.sport);
        if (i == SLIP_NIL)
            i = tcp__lookup_listener6(sh, sp->daddr, &sp->daddr6, sp->th.dport, sp->saddr, sp->th.sport);
    }
    struct tcp_conn *c = i != SLIP_NIL ? &sh->conns[i] : NULL;
    uint32_t iss = 0;
    if (c && c->state == TCPS_TIME_WAIT && time_wait_reuse(c, sp)) {
        slip_idx_t li = sp->v6 ? tcp__lookup_listener6(sh, sp->daddr, &sp->daddr6, sp->th.dport, sp->saddr,
                                                       sp->th.sport)
                             : tcp__lookup_listener(sh, sp->daddr, sp->th.dport, sp->saddr, sp->th.sport);
        if (li != SLIP_NIL && sh->conns[li].state == TCPS_LISTEN && !(c->flags & TCPF_USER)) {
            iss = c->snd_max + 65535 + 2;     /* beyond the old incarnation, as Linux */
            sh->c.tw_reused++;
            tcp_timer__stop_all(c);
            tcp_conn__free(env, sh, c);
            c = &sh->conns[li];
        }
    }
    if (!c) {
        /* RFC 9293 §3.10.7.1: CLOSED (no connection): reset anything but a reset. */
        sh->c.no_conn++;
        tcp_output__rst_reply(env, sh, sp);
        goto drop;
    }
    if (c->state != TCPS_LISTEN)
        c->st.segs_in++;
    switch (c->state) {
    case TCPS_LISTEN:
        input_listen(env, sh, c, sp, iss);
        break;
    case TCPS_SYN_SENT:
        input_syn_sent(env, sh, c, sp);
        break;
    case TCPS_CLOSED:
        tcp_output__rst_reply(env, sh, sp);
        break;
    default:
        input_other(env, sh, c, sp);
        break;
    }
drop:
    free_payload(env, sp);
}

/* ---- ICMP errors (RFC 5927, RFC 1122 §4.2.3.9, RFC 1191) ---- */

void tcp_icmp_error(struct ip_env *env, struct tcp_shared *sh, const struct ip_icmp_err *err)
{
    const struct wire_icmp_quote *q = &err->q;
    slip_idx_t i = tcp__lookup(sh, q->ip.src, q->sport, q->ip.dst, q->dport);
    if (i == SLIP_NIL)
        return;
    int e = EHOSTUNREACH;
    if (err->type == WIRE_ICMP_DEST_UNREACH && err->code == WIRE_ICMP_FRAG_NEEDED) {
        e = 0;
    } else if (err->type == WIRE_ICMP_DEST_UNREACH) {
        switch (err->code) {
        case 0: e = ENETUNREACH; break;
        case 2: e = ENOPROTOOPT; break;
        case WIRE_ICMP_PORT_UNREACH: e = ECONNREFUSED; break;
        default: e = EHOSTUNREACH; break;
        }
    } else if (err->type == WIRE_ICMP_PARAMPROB) {
        e = EPROTO;
    }
    tcp_icmp__apply(env, sh, &sh->conns[i], q->tcp_seq, e);
}

void tcp_icmp__apply(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, uint32_t seq, int e)
{
    if (c->state == TCPS_LISTEN || c->state == TCPS_CLOSED || c->state == TCPS_TIME_WAIT)
        return;
    /* RFC 5927 §4.1: the quoted sequence number must be in flight, else it may be forged. */
    if (!seq_in(seq, c->snd_una, c->snd_max) && !(c->snd_una == c->snd_max && seq == c->snd_una))
        return;
    sh->c.icmp_errors++;
    if (e == 0) {
        /* RFC 1191: ip/ has recorded the path MTU; resend what is in flight in smaller pieces
         * without treating it as congestion (as Linux's tcp_simple_retransmit). */
        uint16_t mss = tcp_conn__route_mss(env, c);
        if (mss < c->mss) {
            c->mss = mss;
            sh->c.pmtu_reductions++;
            c->snd_nxt = c->snd_una;
            c->flags &= ~TCPF_RTT_TIMING;
            tcp_output(env, sh, c);
        }
        return;
    }
    /* RFC 1122 §4.2.3.9: these are soft errors for a synchronized connection; during SYN-SENT
     * Linux reports them at once, and so do we. */
    if (c->state == TCPS_SYN_SENT)
        tcp_conn__drop(env, sh, c, e);
    else
        c->soft_error = e;
}
