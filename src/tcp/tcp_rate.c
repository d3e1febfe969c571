/* Delivery-rate estimation (draft-cheng-iccrg-delivery-rate-estimation-00, "DRE" below) for
 * connections whose congestion control has a cong_control op (BBR). The per-packet state of
 * DRE lives in the RACK transmit map (struct tcp_txrec, tcp_rack.c): a record is a range sent at
 * one instant, so its snapshot stands for every packet in it. The sample of an ACK is taken
 * from the most recently sent range it delivers. Times are microseconds of the stack clock. */
#include "tcp/tcp_var.h"

static inline uint32_t now_us(slip_time_t now) { return (uint32_t)(now / SLIP_USEC); }
static inline int32_t tdiff(uint32_t a, uint32_t b) { return (int32_t)(a - b); }

void tcp_rate__snapshot(struct tcp_conn *c, struct tcp_txrec *r, slip_time_t now)
{
    r->rs_delivered = r->rs_delivered_us = r->rs_first_tx_us = 0;
    r->flags &= ~TXR_APP_LTD;
    if (!tcp_rate__on(c))
        return;
    /* DRE §3.2 (transmitting a data packet): with nothing in flight the send and ACK
     * intervals both start now, so an idle period is never counted as delivery time. */
    if (c->ntxr == 0) {
        c->rate.first_tx_us = now_us(now);
        c->rate.delivered_us = now_us(now);
    }
    r->rs_delivered = (uint32_t)c->rate.delivered;
    r->rs_delivered_us = c->rate.delivered_us;
    r->rs_first_tx_us = c->rate.first_tx_us;
    if (c->rate.app_limited)
        r->flags |= TXR_APP_LTD;
}

/* DRE §3.3 UpdateRateSample for one delivered range: keep the most recently sent one (the
 * largest P.delivered, then the latest send time). */
static void take(const struct tcp_conn *c, const struct tcp_txrec *r, struct tcp_rate_sample *rs)
{
    uint64_t pd = c->rate.delivered - (uint32_t)((uint32_t)c->rate.delivered - r->rs_delivered);
    if (rs->have_prior && (pd < rs->prior_delivered ||
                           (pd == rs->prior_delivered && tdiff(r->xmit_us, rs->send_us) <= 0)))
        return;
    rs->have_prior = 1;
    rs->prior_delivered = pd;
    rs->prior_us = r->rs_delivered_us;
    rs->send_us = r->xmit_us;
    rs->send_elapsed_us = tdiff(r->xmit_us, r->rs_first_tx_us);
    rs->is_app_limited = (r->flags & TXR_APP_LTD) != 0;
}

void tcp_rate__on_ack(struct tcp_conn *c, uint32_t ack, const struct wire_tcp_opts *o, slip_time_t now,
                      struct tcp_rate_sample *rs)
{
    memset(rs, 0, sizeof(*rs));
    rs->interval_us = -1;
    rs->rtt_us = -1;
    if (!tcp_rate__on(c))
        return;
    uint32_t t = now_us(now);
    int32_t newest_rtt_send = 0;
    bool have_rtt = false;
    const struct tcp_txrec *txr = tcp_txr(c);
    unsigned n = SLIP_MIN((unsigned)c->ntxr, tcp_txr_cap(c));
    for (unsigned i = 0; i < n; i++) {
        const struct tcp_txrec *r = &txr[i];
        bool hit = false;
        /* Newly cumulatively acknowledged, not SACKed before (the scoreboard does not hold this
         * ACK's blocks yet). */
        if (seq_gt(ack, c->snd_una) && seq_lt(r->start, ack) && tcp_sack__unsacked(c, r->start, seq_min(r->end, ack)))
            hit = true;
        /* Newly SACKed. */
        for (unsigned k = 0; !hit && k < o->nsack && k < WIRE_TCP_MAX_SACK; k++) {
            uint32_t bs = o->sack[k].left, be = o->sack[k].right;
            if (!seq_lt(bs, be) || seq_gt(be, c->snd_max) || seq_leq(be, c->snd_una))
                continue;
            uint32_t os = seq_max(bs, r->start), oe = seq_min(be, r->end);
            if (seq_lt(os, oe) && tcp_sack__unsacked(c, os, oe))
                hit = true;
        }
        if (!hit)
            continue;
        take(c, r, rs);
        /* The RTT of the newest range never resent (Karn): BBR's RTprop samples. */
        if (!(r->flags & TXR_RETRANS) && (!have_rtt || tdiff(r->xmit_us, (uint32_t)newest_rtt_send) > 0)) {
            have_rtt = true;
            newest_rtt_send = (int32_t)r->xmit_us;
            rs->rtt_us = SLIP_MAX(tdiff(t, r->xmit_us), 1);
        }
    }
}

void tcp_rate__gen(struct tcp_conn *c, uint32_t delivered, slip_time_t now, struct tcp_rate_sample *rs)
{
    rs->acked_sacked = delivered;
    if (!tcp_rate__on(c))
        return;
    /* DRE §3.3: every delivered packet adds to C.delivered and moves C.delivered_time. */
    if (delivered) {
        c->rate.delivered += delivered;
        c->rate.delivered_us = now_us(now);
    }
    /* DRE §3.4: the app-limited phase ends once the data in flight at its start is delivered. */
    if (c->rate.app_limited && c->rate.delivered > c->rate.app_limited)
        c->rate.app_limited = 0;
    if (!rs->have_prior || !delivered)
        return;
    /* The next send interval starts at the send time of the packet just delivered. */
    c->rate.first_tx_us = rs->send_us;
    int32_t ack_elapsed = tdiff(c->rate.delivered_us, rs->prior_us);
    /* DRE §3.3: the interval is the longer of the send and ACK intervals, so neither ACK
     * compression nor a burst at send time overestimates the rate. */
    int64_t interval = SLIP_MAX(rs->send_elapsed_us, ack_elapsed);
    rs->delivered = c->rate.delivered - rs->prior_delivered;
    /* DRE §3.3: an interval shorter than the minimum RTT is the result of ACK aggregation or
     * a stretched ACK, not a measurement: discard it. */
    uint32_t min_rtt = c->rack_min_rtt_us;
    if (interval <= 0 || (min_rtt && interval < (int64_t)min_rtt)) {
        rs->interval_us = -1;
        return;
    }
    rs->interval_us = interval;
}

/* Bytes per second of a valid sample, 0 otherwise. */
uint64_t tcp_rate__bps(const struct tcp_rate_sample *rs)
{
    if (rs->interval_us <= 0)
        return 0;
    return rs->delivered * 1000000ull / (uint64_t)rs->interval_us;
}

void tcp_rate__check_app_limited(struct tcp_conn *c, uint32_t data_end, uint32_t dmss, bool lost_pending)
{
    if (!tcp_rate__on(c))
        return;
    /* DRE §3.4: less than a segment waits to be sent, cwnd is not full and nothing marked lost
     * waits for retransmission: the sender is limited by the application. The phase lasts
     * until what is in flight now has been delivered. */
    uint32_t unsent = seq_gt(data_end, c->snd_max) ? data_end - c->snd_max : 0;
    uint32_t flight = tcp_flight(c);
    if (unsent < dmss && flight < c->cwnd && !lost_pending) {
        uint64_t end = c->rate.delivered + flight;
        c->rate.app_limited = end ? end : 1;
    }
}
