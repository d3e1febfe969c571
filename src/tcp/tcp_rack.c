/* Sender loss detection for SACK connections, as Linux does it: RACK-TLP (RFC 8985) marks
 * segments lost from transmit times (also lost retransmissions, without waiting for the RTO),
 * the Tail Loss Probe makes a lost tail produce SACKs, DupThresh (RFC 6675) still marks the first
 * hole, recovery retransmits what is marked, and PRR (RFC 6937) paces it. The transmit map
 * (struct tcp_txrec) records when each range of [SND.UNA, SND.MAX) was last sent. */
#include "tcp/tcp_var.h"

#define RACKF_VALID   0x1u    /* RACK.xmit_ts holds a delivered segment */
#define RACKF_REO     0x2u    /* RFC 8985 RACK.reordering_seen */
#define DUPTHRESH     3
#define TLP_WCDELACK  (200 * SLIP_MSEC)   /* RFC 8985 §7.2 WCDelAckT */
#define TLP_MIN       (2 * SLIP_MSEC)     /* Linux TCP_TIMEOUT_MIN */
#define RPROBE_MAX    4                   /* loss probes per silence (probe_again_later) */

static inline uint32_t now_us(slip_time_t now) { return (uint32_t)(now / SLIP_USEC); }
static inline int32_t tdiff(uint32_t a, uint32_t b) { return (int32_t)(a - b); }

static bool sack_capable(const struct tcp_conn *c)
{
    return (c->flags & TCPF_SACK_OK) && TCPS_HAVEESTABLISHED(c->state) && c->state != TCPS_TIME_WAIT;
}

/* ---- the transmit map ---- */

/* Same delivery-rate snapshot (tcp_rate.c; always true when rates are not sampled). */
static bool same_snapshot(const struct tcp_txrec *a, const struct tcp_txrec *b)
{
    return a->rs_delivered == b->rs_delivered && a->rs_delivered_us == b->rs_delivered_us &&
           a->rs_first_tx_us == b->rs_first_tx_us;
}

/* Merges neighbours sent at the same time with the same flags (lossless). */
static void coalesce(struct tcp_conn *c)
{
    struct tcp_txrec *txr = tcp_txr(c);
    unsigned k = 0;
    for (unsigned i = 0; i < c->ntxr; i++) {
        struct tcp_txrec *r = &txr[i];
        if (k && txr[k - 1].end == r->start && txr[k - 1].xmit_us == r->xmit_us &&
            txr[k - 1].flags == r->flags && same_snapshot(&txr[k - 1], r)) {
            txr[k - 1].end = r->end;
            continue;
        }
        txr[k++] = *r;
    }
    c->ntxr = (uint16_t)k;
}

/* Merges record i+1 into record i. The later send time goes with that send's rate snapshot:
 * loss of the merged range is then detected later (or by the RTO), never sooner. */
static void merge_next(struct tcp_conn *c, unsigned i)
{
    struct tcp_txrec *txr = tcp_txr(c), *a = &txr[i], *b = &txr[i + 1];
    a->end = b->end;
    uint32_t app = (tdiff(b->xmit_us, a->xmit_us) > 0 ? b->flags : a->flags) & TXR_APP_LTD;
    if (tdiff(b->xmit_us, a->xmit_us) > 0) {
        a->xmit_us = b->xmit_us;
        a->rs_delivered = b->rs_delivered;
        a->rs_delivered_us = b->rs_delivered_us;
        a->rs_first_tx_us = b->rs_first_tx_us;
    }
    a->flags = ((a->flags | b->flags) & TXR_RETRANS) | (a->flags & b->flags & (TXR_LOST | TXR_MARKED)) | app;
    memmove(&txr[i + 1], &txr[i + 2], (size_t)(c->ntxr - i - 2) * sizeof(txr[0]));
    c->ntxr--;
}

/* Makes room for n more records (n <= 2), before any split: a merge between the two splits of
 * one range could undo the first (the pieces agree and have the same time). Lossless merging
 * first. When that is not enough, the neighbours in the same loss state (both marked lost or
 * both not, both resent or both not) whose send times are nearest merge: that only delays when
 * the earlier of them may be judged lost. Records in different states merge only when no pair
 * agrees (the two oldest): merging a range marked lost into one that is not unmarks it, and
 * with a window of many times TCP_TXMAP_MAX segments after an RTO (every range marked lost,
 * each resend splitting one) merging the oldest pair unmarked the lost ranges one by one and
 * left recovery to the RTO. */
static void reserve(struct tcp_conn *c, unsigned n)
{
    if (c->ntxr + n <= tcp_txr_cap(c))
        return;
    if (tcp_map__grow(c))
        return;         /* a large map (tcp_map.c): room for many more */
    coalesce(c);
    const uint32_t state = TXR_LOST | TXR_MARKED | TXR_RETRANS;
    const struct tcp_txrec *txr = tcp_txr(c);
    while (c->ntxr + n > tcp_txr_cap(c)) {
        unsigned best = 0;
        uint32_t best_gap = UINT32_MAX;
        for (unsigned i = 0; i + 1 < c->ntxr; i++) {
            const struct tcp_txrec *a = &txr[i], *b = &txr[i + 1];
            if ((a->flags & state) != (b->flags & state))
                continue;
            int32_t d = tdiff(b->xmit_us, a->xmit_us);
            uint32_t gap = d < 0 ? (uint32_t)-(int64_t)d : (uint32_t)d;
            if (gap < best_gap) {
                best_gap = gap;
                best = i;
            }
        }
        merge_next(c, best);
    }
}

/* The first record that ends above seq (ntxr when none): the map is sorted. */
static unsigned txr_find(const struct tcp_conn *c, uint32_t seq)
{
    return tcp__bisect_end(tcp_txr(c), sizeof(struct tcp_txrec), offsetof(struct tcp_txrec, end), c->ntxr, seq);
}

/* Splits the record holding seq so that one starts at seq; false when there was no room. */
static bool split_at(struct tcp_conn *c, uint32_t seq)
{
    struct tcp_txrec *txr = tcp_txr(c);
    unsigned i = txr_find(c, seq);
    if (i == c->ntxr || !seq_lt(txr[i].start, seq))
        return true;            /* no record holds it, or one starts there already */
    if (c->ntxr == tcp_txr_cap(c))
        return false;           /* the caller reserves room first */
    memmove(&txr[i + 2], &txr[i + 1], (size_t)(c->ntxr - i - 1) * sizeof(txr[0]));
    c->ntxr++;
    txr[i + 1] = txr[i];
    txr[i].end = seq;
    txr[i + 1].start = seq;
    return true;
}

void tcp_rack__sent(struct tcp_conn *c, uint32_t seq, uint32_t end, slip_time_t now)
{
    /* Kept for SACK connections (RACK) and for those that sample delivery rates (BBR). */
    if (!((c->flags & TCPF_SACK_OK) || tcp_rate__on(c)) || !seq_lt(seq, end))
        return;
    uint32_t t = now_us(now);
    struct tcp_txrec snap = { 0 };
    tcp_rate__snapshot(c, &snap, now);      /* DRE §3.2: the state at this send */
    if (c->ntxr && seq_lt(seq, tcp_txr(c)[0].start))
        seq = tcp_txr(c)[0].start;          /* already acknowledged below */
    uint32_t tail = c->ntxr ? tcp_txr(c)[c->ntxr - 1].end : seq;
    if (c->ntxr && seq_lt(seq, tail)) {
        /* A retransmission: the range gets the new send time and loses its LOST mark. */
        uint32_t re = seq_min(end, tail);
        reserve(c, 2);
        split_at(c, seq);
        split_at(c, re);
        struct tcp_txrec *txr = tcp_txr(c);
        for (unsigned i = txr_find(c, seq); i < c->ntxr && seq_lt(txr[i].start, re); i++) {
            struct tcp_txrec *r = &txr[i];
            if (seq_geq(r->start, seq) && seq_leq(r->end, re)) {
                r->xmit_us = t;
                r->flags = (r->flags & ~(TXR_LOST | TXR_APP_LTD)) | TXR_RETRANS | snap.flags;
                r->rs_delivered = snap.rs_delivered;
                r->rs_delivered_us = snap.rs_delivered_us;
                r->rs_first_tx_us = snap.rs_first_tx_us;
            }
        }
        coalesce(c);
        seq = re;
        if (!seq_lt(seq, end))
            return;
    }
    if (c->ntxr && seq != tail)
        seq = tail;                     /* keep the map contiguous */
    struct tcp_txrec *last = c->ntxr ? &tcp_txr(c)[c->ntxr - 1] : NULL;
    if (last && last->xmit_us == t && last->flags == snap.flags && same_snapshot(last, &snap)) {
        last->end = end;
        return;
    }
    reserve(c, 1);
    snap.start = seq;
    snap.end = end;
    snap.xmit_us = t;
    tcp_txr(c)[c->ntxr++] = snap;
}

void tcp_rack__trim(struct tcp_conn *c)
{
    struct tcp_txrec *txr = tcp_txr(c);
    unsigned i = txr_find(c, c->snd_una);
    if (i) {
        memmove(&txr[0], &txr[i], (size_t)(c->ntxr - i) * sizeof(txr[0]));
        c->ntxr = (uint16_t)(c->ntxr - i);
    }
    if (c->ntxr && seq_lt(txr[0].start, c->snd_una))
        txr[0].start = c->snd_una;
    if (c->ntxr == 0 && c->nsb == 0)
        tcp_map__release(c);        /* nothing outstanding: the large map goes back to the pool */
}

/* Marks [s, e) lost (records not already lost); returns unSACKed bytes newly marked. */
static uint32_t mark_lost(struct tcp_conn *c, uint32_t s, uint32_t e, bool skip_retrans)
{
    reserve(c, 2);
    split_at(c, s);
    split_at(c, e);
    uint32_t n = 0;
    struct tcp_txrec *txr = tcp_txr(c);
    for (unsigned i = txr_find(c, s); i < c->ntxr && seq_lt(txr[i].start, e); i++) {
        struct tcp_txrec *r = &txr[i];
        if (seq_lt(r->start, s) || seq_gt(r->end, e) || (r->flags & TXR_LOST))
            continue;
        if (skip_retrans && (r->flags & TXR_RETRANS))
            continue;
        uint32_t u = tcp_sack__unsacked(c, r->start, r->end);
        if (u) {
            r->flags |= TXR_LOST | TXR_MARKED;
            n += u;
        }
    }
    coalesce(c);
    return n;
}

void tcp_rack__mark_all_lost(struct tcp_conn *c)
{
    struct tcp_txrec *txr = tcp_txr(c);
    for (unsigned i = 0; i < c->ntxr; i++)
        txr[i].flags |= TXR_LOST | TXR_MARKED;
    coalesce(c);
}

void tcp_rack__clear_lost(struct tcp_conn *c)
{
    struct tcp_txrec *txr = tcp_txr(c);
    for (unsigned i = 0; i < c->ntxr; i++)
        txr[i].flags &= ~(TXR_LOST | TXR_MARKED);
    coalesce(c);
}

/* Linux's in_flight: unSACKed bytes not marked lost (a retransmitted range counts once). */
uint32_t tcp_rack__pipe(const struct tcp_conn *c)
{
    uint32_t pipe = 0;
    const struct tcp_txrec *txr = tcp_txr(c);
    for (unsigned i = 0; i < c->ntxr; i++)
        if (!(txr[i].flags & TXR_LOST))
            pipe += tcp_sack__unsacked(c, txr[i].start, txr[i].end);
    return pipe;
}

/* TCP_INFO's lost and retrans in segments of dmss, as Linux's lost_out (marked lost and not yet
 * delivered, resent or not) and retrans_out (resent, not delivered, not marked lost again). */
void tcp_rack__info(const struct tcp_conn *c, uint32_t dmss, uint32_t *lost, uint32_t *retrans)
{
    *lost = *retrans = 0;
    if (!dmss)
        return;
    const struct tcp_txrec *txr = tcp_txr(c);
    for (unsigned i = 0; i < c->ntxr; i++) {
        const struct tcp_txrec *r = &txr[i];
        uint32_t n = (tcp_sack__unsacked(c, r->start, r->end) + dmss - 1) / dmss;
        if (r->flags & (TXR_LOST | TXR_MARKED))
            *lost += n;
        if ((r->flags & TXR_RETRANS) && !(r->flags & TXR_LOST))
            *retrans += n;
    }
}

/* The first piece at or above from that is marked lost and not SACKed (records start at or above
 * SND.UNA: tcp_rack__trim). */
static bool lost_from(const struct tcp_conn *c, uint32_t from, uint32_t *seq, uint32_t *len)
{
    const struct tcp_txrec *txr = tcp_txr(c);
    const struct tcp_sack_block *sb = tcp_sb(c);
    for (unsigned i = 0; i < c->ntxr; i++) {
        const struct tcp_txrec *r = &txr[i];
        if (!(r->flags & TXR_LOST) || seq_leq(r->end, from))
            continue;
        uint32_t pos = seq_max(r->start, from);
        for (unsigned b = tcp_sack__first_above(c, pos); b < c->nsb && seq_lt(pos, r->end); b++) {
            if (seq_geq(sb[b].start, r->end))
                break;
            if (seq_gt(sb[b].start, pos)) {
                *seq = pos;
                *len = sb[b].start - pos;
                return true;
            }
            pos = sb[b].end;
        }
        if (seq_lt(pos, r->end)) {
            *seq = pos;
            *len = r->end - pos;
            return true;
        }
    }
    return false;
}

bool tcp_rack__next_lost(const struct tcp_conn *c, uint32_t *seq, uint32_t *len)
{
    return lost_from(c, c->snd_una, seq, len);
}

bool tcp_rack__lost_above(const struct tcp_conn *c, uint32_t from)
{
    uint32_t s, l;
    return lost_from(c, from, &s, &l);
}

bool tcp_rack__has_lost(const struct tcp_conn *c)
{
    uint32_t s, l;
    return tcp_rack__next_lost(c, &s, &l);
}

/* Linux's lost_out > 0: something once marked lost, resent or not, is still neither
 * acknowledged nor SACKed (what tcp_rack__has_lost finds, waiting to be resent, included). */
static bool lost_outstanding(const struct tcp_conn *c)
{
    const struct tcp_txrec *txr = tcp_txr(c);
    for (unsigned i = 0; i < c->ntxr; i++)
        if ((txr[i].flags & (TXR_LOST | TXR_MARKED)) && tcp_sack__unsacked(c, txr[i].start, txr[i].end))
            return true;
    return false;
}

/* ---- RACK (RFC 8985 §6.2) ---- */

/* Is [xmit, end) sent after RACK.segment (RFC 8985 §6.2 RACK_sent_after)? */
static bool sent_after(uint32_t t1, uint32_t e1, uint32_t t2, uint32_t e2)
{
    return tdiff(t1, t2) > 0 || (t1 == t2 && seq_gt(e1, e2));
}

static bool fully_sacked(const struct tcp_conn *c, uint32_t s, uint32_t e)
{
    return tcp_sack__unsacked(c, s, e) == 0;
}

/* RFC 8985 §6.2 step 2: an ACK whose TSecr is older than the TSval a retransmission carried
 * was sent for an earlier copy, so the retransmission's age is no round trip. ts_now: our TSval
 * now. The retransmission's TSval is not kept; the earliest it can have been is ts_now minus its
 * age in whole milliseconds rounded up, so a TSecr below that is certainly older. Applied to the
 * cumulatively acknowledged part only: an ACK that moves the left edge echoes the TSval of the
 * segment that filled the hole (RFC 7323 §4.3); one for out-of-order data echoes an older
 * in-order segment's, whichever copy arrived, and skipping those too kept RACK from seeing lost
 * retransmissions (an RTO in test_tcp_loss's BBR transfer on the bare path). Linux has no such
 * test (min_RTT alone guards step 2). It removes one way a queue-delayed original passes for
 * its retransmission's delivery (RACK then moves to the retransmission's send time with a short
 * RACK.rtt and calls all that is still queued before it lost); SACKed ones still can (issue
 * 15's note: bursts of spurious retransmissions at 3 % loss and 1 ms). */
static bool ack_for_earlier_copy(const struct tcp_conn *c, const struct tcp_txrec *r, uint32_t t,
                                 const struct wire_tcp_opts *o, uint32_t ts_now)
{
    if (!(r->flags & TXR_RETRANS) || !(c->flags & TCPF_TS_OK) || !o->has_ts)
        return false;
    int32_t age = tdiff(t, r->xmit_us);
    uint32_t sent_ts = ts_now - ((uint32_t)(age > 0 ? age : 0) + 999u) / 1000u;
    return tdiff(o->tsecr, sent_ts) < 0;
}

/* Step 1-2 for one delivered range [r->start, dend) of record r; cum: acknowledged cumulatively. */
static void rack_update(struct tcp_conn *c, const struct tcp_txrec *r, uint32_t dend, uint32_t t, bool newly,
                        bool cum)
{
    /* F-RTO (RFC 5682 §3 step 3b, tcp_undo.c): an original from before the timeout arrived. */
    if (c->undo.frto && newly && !(r->flags & TXR_RETRANS) && seq_leq(dend, c->undo.frto_recover))
        c->undo.orig_acked = 1;
    int32_t rtt = tdiff(t, r->xmit_us);
    if (rtt < 0)
        rtt = 0;
    /* Step 2: a retransmitted segment acknowledged sooner than min_RTT was the original's
     * delivery (ambiguous); it must not advance RACK. */
    if ((r->flags & TXR_RETRANS) && (c->rack_min_rtt_us == 0 || (uint32_t)rtt < c->rack_min_rtt_us))
        return;
    if (!(r->flags & TXR_RETRANS) && rtt > 0 && (c->rack_min_rtt_us == 0 || (uint32_t)rtt < c->rack_min_rtt_us))
        c->rack_min_rtt_us = (uint32_t)rtt;
    if (newly && !(r->flags & TXR_RETRANS))
        tcp_hystart__rtt(c, (uint32_t)rtt);     /* RFC 9406 §4.2: one sample per delivery */
    /* RACK.rtt is the sample of the last segment taken in (§6.2 step 2), in Linux's order
     * (tcp_rack_advance): newly SACKed ones first, then every cumulatively acknowledged one in
     * sequence order, SACKed before or not. The RFC's order is by send time, which after a
     * retransmission leaves RACK.rtt at the retransmission's short sample and calls originals
     * lost that Linux still waits for (packetdrill prr-ss-ack-below-snd_una-cubic: 9001-10001
     * resent instead of new data). */
    if (newly || cum)
        c->rack_rtt_us = (uint32_t)rtt;
    if (!(c->rack_flags & RACKF_VALID) || sent_after(r->xmit_us, dend, c->rack_xmit_us, c->rack_end)) {
        c->rack_xmit_us = r->xmit_us;
        c->rack_end = dend;
        c->rack_rtt_us = (uint32_t)rtt;
        c->rack_flags |= RACKF_VALID;
    }
    if (seq_gt(dend, c->rack_fack) || !(c->rack_flags & RACKF_VALID))
        c->rack_fack = seq_max(c->rack_fack, dend);
}

/* The first byte at or above s that no SACK block covers. */
static uint32_t first_unsacked(const struct tcp_conn *c, uint32_t s)
{
    const struct tcp_sack_block *sb = tcp_sb(c);
    unsigned i = tcp_sack__first_above(c, s);
    return i < c->nsb && seq_leq(sb[i].start, s) ? sb[i].end : s;
}

/* Step 3: an original (never retransmitted) delivered below the highest byte delivered before
 * was reordered, not lost. low: the lowest byte of record r this ACK delivers, taken before the
 * scoreboard learns the ACK's blocks (Linux compares each newly SACKed packet's start). The
 * step takes one ACK's segments in the order they were sent, so they are compared with
 * RACK.fack as it stood before the ACK (Linux's prior_fack), not as the ranges taken in before
 * them raised it: tcp_rack__on_ack goes by record, a record's SACK blocks in the option's order
 * (the newest, highest, first), and the cumulative part last. An ACK lost on the way makes the
 * next one deliver a lower range beside a higher one; compared with the raised RACK.fack that
 * looked like reordering, and RACK then waited min_RTT/4 on every loss (12.5 ms per hole at
 * 50 ms: issue 15's 3 % row). */
static void note_reordering(struct tcp_conn *c, const struct tcp_txrec *r, uint32_t low, uint32_t prior_fack)
{
    if (!(r->flags & TXR_RETRANS) && seq_lt(low, prior_fack))
        c->rack_flags |= RACKF_REO;
}

/* The ACK's round-trip sample for SRTT (RFC 6298 §3 allows one per ACK with timestamps, RFC 7323
 * §4; Linux's tcp_ack_update_rtt takes the same three, in this order): the age of the lowest
 * range the ACK newly acknowledges cumulatively, unless something resent is among what it
 * acknowledges (Karn: which copy arrived is unknown); else the age of the lowest newly SACKed
 * range never resent; else, when the ACK moves the left edge, TSecr's age (RFC 7323 §4.3: it
 * echoes the segment that filled the hole, resent or not). -1: no sample. The one timed segment
 * per round trip used before gave none in recovery, and the first after it included the time the
 * holes took to fill: on a lossy path SRTT stayed high and stale (issue 15). */
static int64_t rtt_sample(const struct tcp_conn *c, uint32_t ack, const struct wire_tcp_opts *o, uint32_t t,
                          uint32_t ts_now, int64_t sack_us)
{
    const struct tcp_txrec *txr = tcp_txr(c);
    int64_t cum_us = -1;
    for (unsigned i = 0; i < c->ntxr && seq_lt(txr[i].start, ack); i++) {
        const struct tcp_txrec *r = &txr[i];
        if (r->flags & TXR_RETRANS) {
            cum_us = -1;
            break;
        }
        if (cum_us < 0 && !fully_sacked(c, r->start, seq_min(r->end, ack)))
            cum_us = SLIP_MAX(tdiff(t, r->xmit_us), 0);
    }
    if (cum_us >= 0)
        return cum_us;
    if (sack_us >= 0)
        return sack_us;
    if (seq_gt(ack, c->snd_una) && (c->flags & TCPF_TS_OK) && o->has_ts && o->tsecr &&
        tdiff(ts_now, o->tsecr) >= 0 && tdiff(ts_now, o->tsecr) < 600 * 1000)
        return (int64_t)tdiff(ts_now, o->tsecr) * 1000;
    return -1;
}

int64_t tcp_rack__on_ack(struct tcp_conn *c, uint32_t ack, const struct wire_tcp_opts *o, slip_time_t now)
{
    if (!(c->flags & TCPF_SACK_OK) || !c->ntxr)
        return -1;
    uint32_t t = now_us(now), dmss = tcp_output__data_mss(c);
    if (!(c->rack_flags & RACKF_VALID))
        c->rack_fack = c->snd_una;
    uint32_t prior_fack = c->rack_fack, ts_now = tcp_ts_now(now) + c->ts_offset;
    int64_t sack_us = -1;
    const struct tcp_txrec *txr = tcp_txr(c);
    for (unsigned i = 0; i < c->ntxr; i++) {
        const struct tcp_txrec *r = &txr[i];
        for (unsigned k = 0; k < o->nsack && k < WIRE_TCP_MAX_SACK; k++) {
            uint32_t bs = o->sack[k].left, be = o->sack[k].right;
            if (!seq_lt(bs, be) || seq_gt(be, c->snd_max) || seq_leq(be, c->snd_una))
                continue;
            uint32_t os = seq_max(bs, r->start), oe = seq_min(be, r->end);
            /* RFC 8985 §6.2 step 1 takes segments that are SACKed, i.e. whole ones: a block
             * covering a few bytes of a segment (packetdrill fr-4pkt-fack-last-byte: the last
             * byte of four) delivers none, as in Linux, whose SACK tagging works on whole
             * packets. A record holds segments sent at one instant; less than a full segment
             * of it is not taken as a delivery. */
            if (seq_lt(os, oe) && oe - os >= SLIP_MIN(dmss, r->end - r->start)) {
                bool newly = !fully_sacked(c, os, oe);
                if (newly)
                    note_reordering(c, r, first_unsacked(c, os), prior_fack);
                if (newly && sack_us < 0 && !(r->flags & TXR_RETRANS))
                    sack_us = SLIP_MAX(tdiff(t, r->xmit_us), 0);    /* records go up in sequence */
                rack_update(c, r, oe, t, newly, false);
            }
        }
    }
    /* Then the newly cumulatively acknowledged part, after the SACK blocks as in Linux. What
     * was SACKed before was taken in then: its age now is the time the hole below it took to
     * fill, not a round trip, and would stretch RACK.rtt (Linux's tcp_clean_rtx_queue skips
     * SACKed segments too). */
    for (unsigned i = 0; i < c->ntxr && seq_lt(txr[i].start, ack); i++) {
        const struct tcp_txrec *r = &txr[i];
        uint32_t e = seq_min(r->end, ack);
        if (!fully_sacked(c, r->start, e)) {
            note_reordering(c, r, first_unsacked(c, r->start), prior_fack);
            if (!ack_for_earlier_copy(c, r, t, o, ts_now))
                rack_update(c, r, e, t, true, true);
        }
    }
    int64_t us = rtt_sample(c, ack, o, t, ts_now, sack_us);
    return us < 0 ? -1 : us * (int64_t)SLIP_USEC;
}

/* RFC 8985 §6.2 step 4: min_RTT/4 (never above SRTT), or 0 when no reordering was seen and the
 * sender is already in recovery or DupThresh segments are SACKed. */
static uint32_t reo_wnd_us(const struct tcp_conn *c)
{
    if (!(c->rack_flags & RACKF_REO) &&
        ((c->flags & (TCPF_RECOVERY | TCPF_LOSS)) ||
         tcp_sack__sacked_bytes(c) >= DUPTHRESH * tcp_output__data_mss(c)))
        return 0;
    uint32_t w = c->rack_min_rtt_us / 4;
    if (c->srtt_us && w > c->srtt_us)
        w = c->srtt_us;
    return w;
}

/* Step 5: marks lost what was sent before RACK.segment more than RTT + reo_wnd ago. Returns the
 * microseconds until the next record becomes old enough (0 when none waits). */
static uint32_t rack_detect(struct tcp_shared *sh, struct tcp_conn *c, uint32_t t)
{
    if (!(c->rack_flags & RACKF_VALID))
        return 0;
    uint32_t reo = reo_wnd_us(c), wait = 0;
    struct tcp_txrec *txr = tcp_txr(c);       /* split_at below never moves the map */
    for (unsigned i = 0; i < c->ntxr; i++) {
        struct tcp_txrec *r = &txr[i];
        if (r->flags & TXR_LOST)
            continue;
        /* At one instant, originals leave in sequence order, so a lower one was sent first;
         * a retransmission sent in that instant may have left after new data, so the clock
         * must move on before it can be called lost. */
        bool same = r->xmit_us == c->rack_xmit_us;
        if (!(tdiff(c->rack_xmit_us, r->xmit_us) > 0 ||
              (same && !(r->flags & TXR_RETRANS) && seq_lt(r->start, c->rack_end))))
            continue;
        uint32_t e = same ? seq_min(r->end, c->rack_end) : r->end;
        if (!tcp_sack__unsacked(c, r->start, e))
            continue;
        int32_t left = tdiff(r->xmit_us + c->rack_rtt_us + reo, t);
        if (left > 0) {
            wait = SLIP_MAX(wait, (uint32_t)left);
            continue;
        }
        if (e != r->end && c->ntxr < tcp_txr_cap(c))
            split_at(c, e);            /* only the part below RACK.end_seq is older */
        r = &txr[i];
        uint32_t n = tcp_sack__unsacked(c, r->start, r->end);
        r->flags |= TXR_LOST | TXR_MARKED;
        c->st.rack_lost += (n + tcp_output__data_mss(c) - 1) / tcp_output__data_mss(c);
        sh->c.rack_lost += (n + tcp_output__data_mss(c) - 1) / tcp_output__data_mss(c);
    }
    coalesce(c);
    return wait;
}

/* ---- recovery: entry and PRR ---- */

static void enter_recovery(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    const struct tcp_cc_ops *cc = tcp_cc__get(c->cc_algo);
    tcp_undo__begin(c, TCP_UNDO_RECOVERY, env->now);
    c->ssthresh = cc->ssthresh(c, env->now);
    c->snd_recover = c->snd_max;
    c->high_rxt = c->snd_una;
    c->flags |= TCPF_RECOVERY;
    c->flags &= ~TCPF_RTT_TIMING;
    c->prr_delivered = 0;
    c->prr_out = 0;
    c->prr_recover_fs = c->snd_max - c->snd_una;
    c->tlp_state = 0;
    tcp_timer__stop(c, TT_PTO);
    c->st.recoveries++;
    c->st.fast_retransmits++;
    sh->c.fast_retransmits++;
}

/* RFC 6937 §3 with PRR-SSRB: cwnd = pipe + sndcnt, proportional while pipe > ssthresh, then
 * slow start back up to ssthresh. The first ACK always lets one segment out (fast retransmit).
 * SSRB's extra segment comes only with an ACK that advances SND.UNA (Linux tcp_cwnd_reduction,
 * and the rfc6937bis revision): a SACK-only ACK sends what it delivered, no more, so the ACK
 * that starts recovery sends just the retransmission (packetdrill prr-ss-ack-below-snd_una). */
static void prr_update(struct tcp_conn *c, uint32_t delivered, bool una_advanced)
{
    uint32_t dmss = tcp_output__data_mss(c);
    c->prr_delivered += delivered;
    uint32_t pipe = tcp_rack__pipe(c);
    int64_t sndcnt;
    if (pipe > c->ssthresh) {
        uint64_t fs = SLIP_MAX(c->prr_recover_fs, 1u);
        sndcnt = (int64_t)(((uint64_t)c->prr_delivered * c->ssthresh + fs - 1) / fs) - c->prr_out;
    } else {
        int64_t limit = SLIP_MAX((int64_t)c->prr_delivered - c->prr_out, (int64_t)delivered) +
                        (una_advanced ? dmss : 0);
        sndcnt = SLIP_MIN((int64_t)c->ssthresh - pipe, limit);
    }
    if (sndcnt < 0)
        sndcnt = 0;
    sndcnt = (sndcnt + dmss - 1) / dmss * dmss;      /* whole segments, as Linux counts */
    if (c->prr_out == 0 && sndcnt < dmss)
        sndcnt = dmss;
    c->cwnd = pipe + (uint32_t)sndcnt;
}

void tcp_rack__after_ack(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, uint32_t delivered,
                         bool una_advanced)
{
    if (c->tlp_state == 3 && !(c->flags & (TCPF_RECOVERY | TCPF_LOSS)))
        c->tlp_state = 0;               /* the recovery it probed for is over */
    if (!sack_capable(c) || c->snd_una == c->snd_max) {
        tcp_timer__stop(c, TT_REO);
        if (c->snd_una == c->snd_max)
            tcp_timer__stop(c, TT_PTO);
        return;
    }
    /* RFC 6675 §5: DupThresh duplicate ACKs, or IsLost(SND.UNA), mark the first segment lost
     * (unless it was already retransmitted: then only RACK can call it lost again). */
    if (!(c->flags & (TCPF_RECOVERY | TCPF_LOSS)) && seq_geq(c->snd_una, c->snd_recover) &&
        (c->dupacks >= DUPTHRESH || tcp_sack__is_lost(c, c->snd_una))) {
        uint32_t e = c->snd_una + tcp_output__data_mss(c);
        if (c->nsb && seq_lt(tcp_sb(c)[0].start, e))
            e = tcp_sb(c)[0].start;
        mark_lost(c, c->snd_una, seq_min(e, c->snd_max), true);
    }
    uint32_t wait = rack_detect(sh, c, now_us(env->now));
    if (wait)
        tcp_timer__set(sh, c, TT_REO, env->now + (slip_time_t)wait * SLIP_USEC + 1);
    else
        tcp_timer__stop(c, TT_REO);
    /* A loss still outstanding when the ACK that ended recovery arrives (data sent during that
     * recovery, marked lost and resent in it) starts the next episode on the same ACK, as
     * Linux's tcp_time_to_recover (lost_out): a new congestion event (RFC 5681 §3.1: one
     * reduction per window that lost data). */
    if (!(c->flags & (TCPF_RECOVERY | TCPF_LOSS)) && lost_outstanding(c))
        enter_recovery(env, sh, c);
    /* PRR sets cwnd for the loss-based algorithms; a model-based one (BBR) sets it itself
     * from the same ACK (cong_control, after this). */
    if ((c->flags & TCPF_RECOVERY) && !tcp_cc__get(c->cc_algo)->cong_control)
        prr_update(c, delivered, una_advanced);
    /* RFC 8985 §7.2: the PTO is (re)armed when new data is sent or an ACK acknowledges new data;
     * a duplicate ACK (SACK only) leaves it running, as in Linux, so a SACK that starts no
     * recovery does not push the probe further away (fr-4pkt-fack-last-byte: the probe leaves
     * 2 SRTT after the data, not after the SACK). Entering recovery still stops it. */
    if (c->flags & (TCPF_RECOVERY | TCPF_LOSS)) {
        /* The recovery probe: re-armed by an ACK that delivered something (the clock runs);
         * an ACK with nothing new, such as the duplicate the probe itself drew from a
         * receiver that drops it (a full receive buffer), neither ends the probe nor arms
         * another: the RTO takes over, so probes never feed on their own ACKs. */
        if (delivered || una_advanced) {
            if (c->tlp_state == 3)
                c->tlp_state = 0;
            tcp_rack__schedule_pto(env, sh, c);
        } else if (!c->tlp_state && !tcp_timer__armed(c, TT_PTO)) {
            tcp_rack__schedule_pto(env, sh, c);
        }
    } else if (una_advanced || !tcp_timer__armed(c, TT_PTO)) {
        tcp_rack__schedule_pto(env, sh, c);
    }
}

void tcp_rack__reo_timeout(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    if (!sack_capable(c) || c->snd_una == c->snd_max)
        return;
    uint32_t wait = rack_detect(sh, c, now_us(env->now));
    if (wait)
        tcp_timer__set(sh, c, TT_REO, env->now + (slip_time_t)wait * SLIP_USEC + 1);
    if (!(c->flags & (TCPF_RECOVERY | TCPF_LOSS)) && tcp_rack__has_lost(c)) {
        enter_recovery(env, sh, c);
        if (!tcp_cc__get(c->cc_algo)->cong_control)
            prr_update(c, 0, false);
        else    /* BBR draft-00 §4.2.3.4 packet conservation, with nothing delivered: one segment */
            c->cwnd = tcp_rack__pipe(c) + tcp_output__data_mss(c);
    }
    tcp_output(env, sh, c);
}

void tcp_rack__on_rto(struct tcp_conn *c)
{
    /* RFC 8985 §6.3 / Linux tcp_enter_loss: everything not SACKed is lost; the scoreboard is kept
     * (RFC 6675 §5.1 allows it), so only holes are resent. After repeated timeouts the peer may
     * have reneged: then forget the SACK information and resend everything. */
    if (c->rxt_shift > 2)
        c->nsb = 0;
    tcp_rack__mark_all_lost(c);
    c->tlp_state = 0;
    tcp_timer__stop(c, TT_PTO);
    tcp_timer__stop(c, TT_REO);
}

/* ---- Tail Loss Probe (RFC 8985 §7) ---- */

/* §7.2's PTO: 2 SRTT, and room for a delayed ACK when one segment is outstanding. Not for the
 * recovery probe: in recovery the receiver has just seen a hole, and RFC 5681 §4.2 has it
 * acknowledge a segment that fills one at once (Linux's receiver also takes quick ACKs after
 * out-of-order data); waiting 200 ms more for a lone lost retransmission or tail there cost
 * a transfer of 8 MiB at ~0.1 ms three times its length. */
static slip_time_t pto_interval(const struct tcp_conn *c)
{
    slip_time_t pto = c->srtt_us ? 2 * (slip_time_t)c->srtt_us * SLIP_USEC : SLIP_SEC;
    if (c->snd_max - c->snd_una <= tcp_output__data_mss(c) && !(c->flags & (TCPF_RECOVERY | TCPF_LOSS)))
        pto += TLP_WCDELACK;            /* the one segment may wait for a delayed ACK */
    else
        pto += TLP_MIN;
    return pto;
}

void tcp_rack__schedule_pto(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    /* §7.2: with something outstanding and no probe already out; outside recovery, not after a
     * timeout. In recovery and after a timeout the same timer arms the recovery probe
     * (recovery_probe below), re-armed by every ACK; but not while timeouts follow each other
     * with no ACK of new data between them (rxt_shift): then the path may be dead, and only the
     * backed-off RTO retransmits (RFC 8961 §4 (4); Linux does not probe in its Loss state
     * either). */
    if (!sack_capable(c) || c->snd_una == c->snd_max || c->tlp_state || c->rxt_shift) {
        tcp_timer__stop(c, TT_PTO);
        return;
    }
    slip_time_t when = env->now + pto_interval(c);
    /* §7.2: the PTO never waits longer than the RTO would; as Linux, the probe then takes the
     * RTO's place (it fires just before it and restarts it), so a single lost segment costs a
     * probe instead of a timeout that collapses cwnd. */
    if (tcp_timer__armed(c, TT_REXMT) && c->timer[TT_REXMT] <= when)
        when = SLIP_MAX(c->timer[TT_REXMT] - 1, env->now);
    tcp_timer__set(sh, c, TT_PTO, when);
}

/* The first hole: from SND.UNA to the first SACKed byte (or SND.MAX), at most one segment. */
static bool first_hole(const struct tcp_conn *c, uint32_t *seq, uint32_t *len)
{
    if (!seq_gt(c->snd_max, c->snd_una))
        return false;
    uint32_t end = c->snd_max;
    if (c->nsb && seq_gt(tcp_sb(c)[0].start, c->snd_una))
        end = seq_min(end, tcp_sb(c)[0].start);
    *seq = c->snd_una;
    *len = SLIP_MIN(end - c->snd_una, tcp_output__data_mss(c));
    return true;
}

/* A probe that no ACK answers is followed by another, up to RPROBE_MAX in one silence, each
 * after twice the previous wait (RFC 9002 §6.2.1's backoff), as long as it comes before the RTO
 * the first one restarted. RFC 8985 §7 sends one probe and leaves the rest to the RTO; but
 * when the probe or the only ACK left to come is lost (at 3-5 % loss each way one time in ten),
 * the RTO (200 ms at least) costs more than the whole transfer does on a short path, and
 * collapses cwnd. The RTO still ends a silence that outlasts the probes, so a dead path sees
 * at most RPROBE_MAX probes per RTO; an ACK that delivers nothing (a receiver dropping the
 * probe) neither ends the series nor arms more, so probes never feed on their own ACKs. */
static void probe_again_later(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    if (++c->rprobes >= RPROBE_MAX)
        return;
    slip_time_t when = env->now + (pto_interval(c) << c->rprobes);
    if (!tcp_timer__armed(c, TT_REXMT) || when < c->timer[TT_REXMT])
        tcp_timer__set(sh, c, TT_PTO, when);
}

/* A probe in fast recovery or after a timeout (not in RFC 8985, which arms the PTO only in the
 * open state; modelled on QUIC's PTO, RFC 9002 §6.2, which runs in every state): recovery
 * clocks its retransmissions out with ACKs, and with a small window one lost ACK, or one lost
 * retransmission with nothing sent after it, leaves no ACK to come, so the sender would wait
 * for the RTO (200 ms or more, backed off after a timeout) although the connection could go on.
 * When no ACK came for a PTO, one segment leaves: what is marked lost and not yet resent first,
 * else the first hole again (from SND.UNA). In a silence of two round trips in recovery the
 * retransmission that fills the first hole is the likeliest loss: sending it again repairs it
 * outright, and if only ACKs were lost its ACK carries the cumulative ACK that was lost.
 * (The highest unSACKed segment, RFC 8985 §7.3's choice for the open state, would let RACK
 * find the lost retransmission only a round trip later, and when it is the FIN alone it
 * cannot be SACKed at all: probes of it taught nothing and the RTO followed.) cwnd is not
 * touched: the probe is outside it. The first probe of a silence restarts the RTO (§7.3); more
 * follow while no ACK delivers anything (probe_again_later). */
static void recovery_probe(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    bool repeat = c->tlp_state == 3;
    uint32_t dmss = tcp_output__data_mss(c);
    uint32_t data_end = c->snd_q_seq + c->sndq.bytes;
    uint32_t wend = c->snd_una + c->snd_wnd;
    uint32_t seq, len;
    int rc = -1;
    bool fin_out = (c->flags & TCPF_FIN_SENT) && c->snd_max == data_end + 1;
    bool found;
    /* (None before F-RTO step 2, while the first ACK after the timeout is awaited:
     * tcp_rack__schedule_pto arms no probe while rxt_shift holds.) */
    if (c->undo.frto == 2) {
        found = false;                  /* step 3: new data (below) */
    } else {
        found = tcp_rack__next_lost(c, &seq, &len) || first_hole(c, &seq, &len);
    }
    if (found) {
        len = SLIP_MIN(len, dmss);
        bool fin = fin_out && seq + len == c->snd_max;
        if (fin)
            len--;                      /* the FIN's sequence number is not data */
        rc = tcp_output__segment(env, sh, c, seq, len, WIRE_TCP_ACK | (fin ? WIRE_TCP_FIN : 0));
        if (rc == 0)
            c->high_rxt = seq_max(c->high_rxt, seq + len + fin);
    } else if (seq_lt(c->snd_max, data_end) && seq_lt(c->snd_max, wend) && !(c->flags & TCPF_FIN_SENT)) {
        seq = c->snd_max;
        len = SLIP_MIN(SLIP_MIN(dmss, data_end - seq), wend - seq);
        rc = tcp_output__segment(env, sh, c, seq, len,
                                 WIRE_TCP_ACK | (seq + len == data_end ? WIRE_TCP_PSH : 0));
        if (rc == 0) {
            c->snd_max = c->snd_nxt = seq + len;
            c->st.bytes_out += len;
        }
    }
    if (!repeat) {
        c->rprobes = 0;
        tcp_timer__rexmt_restart(env, sh, c);
    }
    if (rc != 0)
        return;
    c->tlp_state = 3;
    c->st.recovery_probes++;
    sh->c.recovery_probes++;
    probe_again_later(env, sh, c);
}

void tcp_rack__pto_timeout(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    if (!sack_capable(c) || c->snd_una == c->snd_max)
        return;
    if (c->flags & (TCPF_RECOVERY | TCPF_LOSS)) {
        if (c->tlp_state == 0 || c->tlp_state == 3)
            recovery_probe(env, sh, c);
        return;
    }
    /* A probe is out and no ACK has acknowledged anything since (one that does stops this
     * timer: tcp_rack__schedule_pto): the last segment again (probe_again_later). */
    bool repeat = c->tlp_state != 0;
    uint32_t dmss = tcp_output__data_mss(c);
    uint32_t data_end = c->snd_q_seq + c->sndq.bytes;
    uint32_t wend = c->snd_una + c->snd_wnd;
    int rc = -1;
    /* §7.3: new data if the receive window allows, else the last segment again. */
    if (!repeat && seq_lt(c->snd_max, data_end) && seq_lt(c->snd_max, wend) && !(c->flags & TCPF_FIN_SENT)) {
        uint32_t seq = c->snd_max;
        uint32_t len = SLIP_MIN(SLIP_MIN(dmss, data_end - seq), wend - seq);
        uint8_t f = WIRE_TCP_ACK | (seq + len == data_end ? WIRE_TCP_PSH : 0);
        rc = tcp_output__segment(env, sh, c, seq, len, f);
        if (rc == 0) {
            c->snd_max = c->snd_nxt = seq + len;
            c->st.bytes_out += len;
            c->tlp_state = 1;
        }
    } else {
        bool fin = (c->flags & TCPF_FIN_SENT) && c->snd_max == data_end + 1;
        uint32_t dend = fin ? c->snd_max - 1 : c->snd_max;
        uint32_t len = SLIP_MIN(dmss, seq_gt(dend, c->snd_una) ? dend - c->snd_una : 0);
        if (seq_lt(dend, c->snd_q_seq))
            len = 0;
        rc = tcp_output__segment(env, sh, c, dend - len, len, WIRE_TCP_ACK | (fin ? WIRE_TCP_FIN : 0));
        if (rc == 0 && !repeat)
            c->tlp_state = 2;
    }
    if (!repeat) {
        c->rprobes = 0;
        tcp_timer__rexmt_restart(env, sh, c);   /* §7.3: the RTO follows the probe */
    }
    if (rc == 0) {
        if (!repeat)
            c->tlp_end = c->snd_max;
        c->st.tlp_probes++;
        sh->c.tlp_probes++;
        probe_again_later(env, sh, c);
    }
}

/* §7.4 as Linux (tcp_process_tlp_ack): a D-SACK for the probe (RFC 2883: a first block below the
 * cumulative ACK or inside the second block) shows both copies arrived, so nothing was lost;
 * an ACK beyond the probe without one means the probe repaired a loss, and congestion control
 * responds once (§7.4.2). A new-data probe ends when it is acknowledged. Our own receivers send
 * no D-SACK, so against them every repaired-or-not retransmission probe counts as a loss. */
void tcp_rack__tlp_ack(struct ip_env *env, struct tcp_conn *c, uint32_t ack, const struct wire_tcp_opts *o)
{
    if (!c->tlp_state)
        return;
    if (c->tlp_state == 3)
        return;                         /* a recovery probe: tcp_rack__after_ack ends it */
    if (c->tlp_state == 2 && tcp_sack__dsack(o, ack)) {
        uint32_t r = o->sack[0].right;
        if (seq_gt(r, c->tlp_end - tcp_output__data_mss(c)) && seq_leq(r, c->tlp_end)) {
            c->tlp_state = 0;
            return;
        }
    }
    if (c->tlp_state == 1 && seq_geq(ack, c->tlp_end)) {
        c->tlp_state = 0;
    } else if (c->tlp_state == 2 && seq_gt(ack, c->tlp_end)) {
        if (!(c->flags & (TCPF_RECOVERY | TCPF_LOSS))) {
            c->ssthresh = tcp_cc__get(c->cc_algo)->ssthresh(c, env->now);
            c->cwnd = SLIP_MAX(SLIP_MIN(c->cwnd, c->ssthresh), 2 * tcp_output__data_mss(c));
        }
        c->tlp_state = 0;
    }
}
