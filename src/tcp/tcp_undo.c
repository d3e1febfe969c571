/* Undo of spurious congestion responses: a fast recovery or a retransmission timeout whose
 * retransmissions prove unneeded gets its cwnd, ssthresh and CUBIC state back, as Linux does.
 * Evidence: timestamps (Eifel detection, RFC 3522: the ACK echoes a TSval older than the first
 * retransmission, so the original arrived) and D-SACK (RFC 2883 / RFC 3708: every retransmission
 * of the episode was reported as a duplicate). A spurious RTO also stops the go-back of the loss
 * state (RFC 4015 §2: SND.NXT = SND.MAX), so the original flight is not sent a second time.
 * F-RTO (RFC 5682 §3, the SACK-enhanced algorithm, as Linux) detects spurious timeouts without
 * timestamps: after the timeout's retransmission is acknowledged it sends new data, and an ACK
 * that then acknowledges never-retransmitted data from before the timeout proves the originals
 * arrived. */
#include "tcp/tcp_var.h"

static uint32_t segs(const struct tcp_conn *c, uint32_t bytes)
{
    uint32_t m = tcp_output__data_mss(c);
    return bytes ? (bytes + m - 1) / m : 0;
}

void tcp_undo__begin(struct tcp_conn *c, int kind, slip_time_t now)
{
    (void)now;
    /* A timeout inside a recovery episode keeps that episode's priors (Linux tcp_enter_loss):
     * undoing it must restore the window from before the first reduction. */
    c->undo.frto = 0;
    if (kind == TCP_UNDO_RTO && c->undo.kind != TCP_UNDO_NONE) {
        c->undo.kind = TCP_UNDO_RTO;
        c->undo.eifel_done = 0;
        return;
    }
    c->undo.kind = (uint8_t)kind;
    c->undo.have_ts = 0;
    c->undo.eifel_done = 0;
    c->undo.marker = c->snd_una;
    c->undo.retrans_ts = 0;
    c->undo.retrans_segs = 0;
    c->undo.prior_cwnd = c->cwnd;
    c->undo.prior_ssthresh = c->ssthresh;
    c->undo.prior_cc = c->cc;
}

void tcp_undo__retransmitted(struct tcp_conn *c, uint32_t len, slip_time_t now)
{
    if (c->undo.kind == TCP_UNDO_NONE)
        return;
    if (!c->undo.have_ts) {
        /* RFC 3522 §3.2: RetransmitTS is the timestamp of the first retransmission. */
        c->undo.retrans_ts = tcp_ts_now(now);
        c->undo.have_ts = 1;
    }
    c->undo.retrans_segs += len ? segs(c, len) : 1;
}

static void undo(struct tcp_shared *sh, struct tcp_conn *c, bool rto)
{
    /* Linux tcp_undo_cwnd_reduction: the window and the algorithm's memory from before. */
    c->cwnd = SLIP_MAX(c->cwnd, c->undo.prior_cwnd);
    c->ssthresh = SLIP_MAX(c->ssthresh, c->undo.prior_ssthresh);
    /* A model-based algorithm (BBR) keeps what it learnt since: its model is measurements,
     * not a reaction to the loss being undone. */
    if (!tcp_cc__get(c->cc_algo)->cong_control)
        c->cc = c->undo.prior_cc;
    c->st.undos++;
    if (rto) {
        sh->c.spurious_rto++;
        /* RFC 4015 §2 (response to a spurious timeout): resume with new data; what the timeout
         * marked lost was not, so forget the marks (SACK) or the go-back (SND.NXT). */
        c->flags &= ~TCPF_LOSS;
        tcp_rack__clear_lost(c);
        c->snd_nxt = c->snd_max;
        c->rxt_shift = 0;
    } else {
        sh->c.undo_recovery++;
        tcp_rack__clear_lost(c);
    }
    c->flags &= ~TCPF_RECOVERY;
    c->dupacks = 0;
    c->undo.kind = TCP_UNDO_NONE;
    c->undo.frto = 0;
}

/* RFC 5682 §3 step 1: the timeout's retransmission of the first unacknowledged segment is
 * leaving; "recover" is the highest sequence sent. As Linux, not for a timeout that ends a fast
 * recovery (that episode already proved a loss), and §3 step 1: not for a repeated timeout of
 * the same episode. */
void tcp_undo__frto_start(struct tcp_conn *c, bool was_recovery)
{
    c->undo.frto = 0;
    if (was_recovery || c->rxt_shift != 1 || !(c->flags & TCPF_SACK_OK))
        return;
    c->undo.frto = 1;
    c->undo.frto_recover = c->snd_max;
    c->undo.orig_acked = 0;
}

/* RFC 5682 §3 steps 2 and 3 for one ACK; true when the timeout proved spurious. */
static bool frto_step(struct tcp_conn *c, uint32_t old_una, uint32_t ack, bool orig_acked)
{
    bool advanced = seq_gt(ack, old_una);
    if (c->undo.frto == 1) {
        /* Step 2a: a duplicate ACK, or one that covers "recover" (the retransmission filled
         * the only hole, or every original arrived): no verdict, conventional recovery goes on
         * (the timestamp and D-SACK checks still may undo it). */
        if (!advanced || seq_geq(ack, c->undo.frto_recover)) {
            c->undo.frto = 0;
            return false;
        }
        /* Step 2b: the retransmission was acknowledged: send new data (up to two segments,
         * what cwnd now allows) instead of the rest of the window, and watch the next ACK. A
         * sender with nothing new to send, or no receive window for it, cannot tell (§3 step
         * 2b's note) and goes on conventionally. */
        uint32_t data_end = c->snd_q_seq + c->sndq.bytes;
        if (seq_lt(c->snd_max, data_end) && seq_lt(c->snd_max, c->snd_una + c->snd_wnd) &&
            !(c->flags & TCPF_FIN_SENT)) {
            c->undo.frto = 2;
            return false;
        }
        c->undo.frto = 0;
        return false;
    }
    /* Step 3b: this ACK acknowledges (cumulatively or by SACK) data below "recover" that was
     * never retransmitted: the originals arrived, the timeout was spurious. Step 3a otherwise
     * (a duplicate ACK, or only the new data SACKed): the loss was real, resend the window. */
    if (orig_acked)
        return true;
    c->undo.frto = 0;
    return false;
}

void tcp_undo__on_ack(struct tcp_shared *sh, struct tcp_conn *c, uint32_t old_una, const struct tcp_seg *s)
{
    const struct wire_tcp_opts *o = &s->th.opts;
    uint32_t ack = s->ack;
    /* RFC 2883 §4 D-SACK; RFC 3708 §3: each one inside the episode accounts for a
     * retransmission. */
    if ((c->flags & TCPF_SACK_OK) && tcp_sack__dsack(o, ack)) {
        uint32_t l = o->sack[0].left, r = o->sack[0].right;
        sh->c.dsacks_in++;
        if (c->undo.kind != TCP_UNDO_NONE && seq_geq(l, c->undo.marker) && seq_leq(r, c->snd_max)) {
            uint32_t n = segs(c, r - l);
            c->undo.retrans_segs = c->undo.retrans_segs > n ? c->undo.retrans_segs - n : 0;
        }
    }
    bool orig_acked = c->undo.orig_acked;
    c->undo.orig_acked = 0;
    if (c->undo.frto && c->undo.kind != TCP_UNDO_RTO)
        c->undo.frto = 0;
    if (c->undo.frto && frto_step(c, old_una, ack, orig_acked)) {
        sh->c.frto_spurious++;
        undo(sh, c, true);
        return;
    }
    if (c->undo.kind == TCP_UNDO_NONE || !c->undo.have_ts)
        return;
    bool all_dsacked = c->undo.retrans_segs == 0;
    bool over = seq_geq(ack, c->snd_recover);
    if (c->undo.kind == TCP_UNDO_RTO) {
        /* RFC 3522 §3.2 (Eifel detection): the first ACK for new data after the retransmission
         * echoes a timestamp older than it: the original was delivered. The receiver echoes the
         * segment that advanced its window (RFC 7323 §4.3), so a loss our retransmission
         * repaired echoes the retransmission's own timestamp and is not taken for spurious. */
        if (seq_gt(ack, old_una) && !c->undo.eifel_done) {
            c->undo.eifel_done = 1;
            if ((c->flags & TCPF_TS_OK) && o->has_ts && o->tsecr &&
                seq_lt(o->tsecr - c->ts_offset, c->undo.retrans_ts)) {
                undo(sh, c, true);
                return;
            }
        }
        /* RFC 3708 §3: every retransmission since the timeout came back as a duplicate. */
        if (all_dsacked) {
            undo(sh, c, true);
            return;
        }
        if (over)
            c->undo.kind = TCP_UNDO_NONE;
        return;
    }
    /* Fast recovery: judged when it ends (Linux tcp_try_undo_recovery), by the timestamp the
     * recovery-ending ACK echoes or by D-SACKs for all its retransmissions. */
    if (over || !(c->flags & TCPF_RECOVERY)) {
        bool delayed = (c->flags & TCPF_TS_OK) && o->has_ts && o->tsecr &&
                       seq_lt(o->tsecr - c->ts_offset, c->undo.retrans_ts);
        if (delayed || all_dsacked)
            undo(sh, c, false);
        else
            c->undo.kind = TCP_UNDO_NONE;
    }
}
