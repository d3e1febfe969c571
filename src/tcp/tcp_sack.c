/* Selective acknowledgments. Receiver side (RFC 2018 §4): the blocks we report, the one holding
 * the latest out-of-order segment first. Sender side (RFC 6675): a scoreboard of SACKed ranges
 * above SND.UNA, and the IsLost / pipe / NextSeg rules of SACK-based loss recovery (the engine
 * uses IsLost for DupThresh; pipe and what to resend come from RACK's marks in tcp_rack.c, as in
 * Linux, and the RFC 6675 pipe/NextSeg here remain as the tested reference). The
 * scoreboard holds TCP_SACK_MAX disjoint, sorted blocks, or TCP_BIG_SACK once it takes a large
 * map (tcp_map.c); when that overflows too the highest block is forgotten, which only makes us
 * retransmit more, never less. */
#include <string.h>

#include "tcp/tcp_var.h"

#define DUPTHRESH 3

/* The blocks to report after one arrival (RFC 2018 §4): first the run holding the segment that
 * just arrived, then the blocks reported before, most recent first, and, while room remains,
 * other runs from the front of the queue. One arrival only adds to one run (or fills the front
 * and moves whole runs in order), so a block reported before is still exact unless it merged
 * into the first or was taken in order. The queue is not walked for the first block: with a
 * window of MBs and random loss it holds thousands of segments in hundreds of runs (a walk per
 * arrival, bounded at 64 runs, never reported a segment past the 64th hole; the sender then
 * called SACKed data lost and sent it again). */
#define RCV_FILL_WALK 64        /* entries looked at for the remaining blocks */

static bool rblock_touches(const struct tcp_sack_block *a, const struct tcp_sack_block *b)
{
    return seq_leq(a->start, b->end) && seq_leq(b->start, a->end);
}

static void rblock_add(struct tcp_sack_block *out, unsigned *k, const struct tcp_sack_block *b)
{
    for (unsigned q = 0; q < *k; q++)
        if (rblock_touches(&out[q], b))
            return;
    out[(*k)++] = *b;
}

void tcp_sack__rcv_update(const struct pkt_pool *pool, struct tcp_conn *c, const struct tcp_sack_block *latest)
{
    struct tcp_sack_block out[WIRE_TCP_MAX_SACK];
    unsigned k = 0;
    if (latest && seq_lt(latest->start, latest->end) && seq_gt(latest->start, c->rcv_nxt))
        out[k++] = *latest;
    for (unsigned p = 0; p < c->nrsack && k < WIRE_TCP_MAX_SACK; p++)
        if (seq_gt(c->rsack[p].start, c->rcv_nxt))
            rblock_add(out, &k, &c->rsack[p]);
    struct tcp_sack_block run = { 0, 0 };
    bool have = false;
    unsigned walked = 0;
    for (slip_idx_t e = c->ooo_head; e != SLIP_NIL && k < WIRE_TCP_MAX_SACK && walked < RCV_FILL_WALK;
         e = pkt__meta(pool, e)->next, walked++) {
        uint32_t s = pkt__meta(pool, e)->addr, end = s + pkt__meta(pool, e)->total;
        if (have && run.end == s) {
            run.end = end;
            continue;
        }
        if (have)
            rblock_add(out, &k, &run);
        run.start = s;
        run.end = end;
        have = true;
    }
    if (have && k < WIRE_TCP_MAX_SACK && walked < RCV_FILL_WALK)
        rblock_add(out, &k, &run);      /* the walk reached the queue's end: the last run is whole */
    for (unsigned q = 0; q < k; q++)
        c->rsack[q] = out[q];
    c->nrsack = (uint8_t)k;
}

/* RFC 2883 §4: a duplicate is reported in the first SACK block of the next ACK only (a later
 * one replaces it); Linux's receiver does the same (net.ipv4.tcp_dsack, on by default), and its
 * sender uses it to undo a reduction for a retransmission or loss probe that was not needed. */
void tcp_sack__dup(struct tcp_conn *c, uint32_t start, uint32_t end)
{
    if (!(c->flags & TCPF_SACK_OK) || !seq_lt(start, end))
        return;
    c->dsack.start = start;
    c->dsack.end = end;
}

static void sb_insert(struct tcp_conn *c, uint32_t s, uint32_t e, uint32_t *added)
{
    if (c->nsb == tcp_sb_cap(c))
        tcp_map__grow(c);
    struct tcp_sack_block *sb = tcp_sb(c);
    unsigned cap = tcp_sb_cap(c), n = c->nsb;
    /* The blocks [i, j) overlap [s, e) or are adjacent to it (end >= s): they merge with it. */
    unsigned i = tcp_sack__first_above(c, s - 1), j = i;
    uint32_t covered = 0;
    for (; j < n && seq_leq(sb[j].start, e); j++) {
        uint32_t os = seq_max(sb[j].start, s), oe = seq_min(sb[j].end, e);
        if (seq_lt(os, oe))
            covered += oe - os;
        s = seq_min(s, sb[j].start);
        e = seq_max(e, sb[j].end);
    }
    uint32_t total = e - s;
    if (j > i) {
        sb[i].start = s;
        sb[i].end = e;
        memmove(&sb[i + 1], &sb[j], (size_t)(n - j) * sizeof(sb[0]));
        n -= j - i - 1;
    } else {
        if (n == cap) {
            if (i == cap)
                return;     /* the new block is the highest: forget it */
            n--;            /* forget the highest */
        }
        memmove(&sb[i + 1], &sb[i], (size_t)(n - i) * sizeof(sb[0]));
        sb[i].start = s;
        sb[i].end = e;
        n++;
    }
    c->nsb = (uint16_t)n;
    *added += total > covered ? total - covered : 0;
}

uint32_t tcp_sack__update(struct tcp_conn *c, const struct wire_tcp_opts *o)
{
    uint32_t added = 0, before = tcp_sack__sacked_bytes(c);
    for (unsigned k = 0; k < o->nsack && k < WIRE_TCP_MAX_SACK; k++) {
        uint32_t s = o->sack[k].left, e = o->sack[k].right;
        /* RFC 2018 §5: ignore blocks that are empty, below SND.UNA (D-SACK) or beyond SND.MAX. */
        if (!seq_lt(s, e) || seq_leq(e, c->snd_una) || seq_gt(e, c->snd_max))
            continue;
        if (seq_lt(s, c->snd_una))
            s = c->snd_una;
        sb_insert(c, s, e, &added);
    }
    uint32_t after = tcp_sack__sacked_bytes(c);
    return after > before ? after - before : 0;
}

void tcp_sack__clean(struct tcp_conn *c)
{
    struct tcp_sack_block *sb = tcp_sb(c);
    unsigned i = tcp_sack__first_above(c, c->snd_una);
    if (i) {
        memmove(&sb[0], &sb[i], (size_t)(c->nsb - i) * sizeof(sb[0]));
        c->nsb = (uint16_t)(c->nsb - i);
    }
    if (c->nsb && seq_lt(sb[0].start, c->snd_una))
        sb[0].start = c->snd_una;
}

unsigned tcp_sack__first_above(const struct tcp_conn *c, uint32_t seq)
{
    return tcp__bisect_end(tcp_sb(c), sizeof(struct tcp_sack_block), offsetof(struct tcp_sack_block, end), c->nsb, seq);
}

uint32_t tcp_sack__unsacked(const struct tcp_conn *c, uint32_t s, uint32_t e)
{
    const struct tcp_sack_block *sb = tcp_sb(c);
    uint32_t n = e - s;
    for (unsigned i = tcp_sack__first_above(c, s); i < c->nsb && seq_lt(sb[i].start, e); i++) {
        uint32_t os = seq_max(sb[i].start, s), oe = seq_min(sb[i].end, e);
        if (seq_lt(os, oe))
            n -= oe - os;
    }
    return n;
}

bool tcp_sack__dsack(const struct wire_tcp_opts *o, uint32_t ack)
{
    if (!o->nsack)
        return false;
    uint32_t l = o->sack[0].left, r = o->sack[0].right;
    return seq_lt(l, r) && (seq_leq(r, ack) ||
                            (o->nsack > 1 && seq_geq(l, o->sack[1].left) && seq_leq(r, o->sack[1].right)));
}

uint32_t tcp_sack__sacked_bytes(const struct tcp_conn *c)
{
    const struct tcp_sack_block *sb = tcp_sb(c);
    uint32_t n = 0;
    for (unsigned i = 0; i < c->nsb; i++)
        n += sb[i].end - sb[i].start;
    return n;
}

/* RFC 6675 §4 IsLost(SeqNum): DupThresh discontiguous SACKed ranges above it, or more than
 * (DupThresh - 1) * SMSS SACKed bytes above it. */
bool tcp_sack__is_lost(const struct tcp_conn *c, uint32_t seq)
{
    uint32_t bytes = 0, blocks = 0;
    for (unsigned i = 0; i < c->nsb; i++) {
        if (seq_leq(tcp_sb(c)[i].end, seq))
            continue;
        uint32_t s = seq_max(tcp_sb(c)[i].start, seq + 1);
        bytes += tcp_sb(c)[i].end - s;
        blocks++;
    }
    return blocks >= DUPTHRESH || bytes > (DUPTHRESH - 1) * tcp_output__data_mss(c);
}

/* RFC 6675 §4 SetPipe(): over every unSACKed octet in flight, one if it is not lost, one more
 * if it was retransmitted. Within a hole IsLost() is constant, so holes are counted whole. */
uint32_t tcp_sack__pipe(const struct tcp_conn *c)
{
    uint32_t pipe = 0, pos = c->snd_una;
    for (unsigned i = 0; i <= c->nsb; i++) {
        uint32_t hs = pos, he = i < c->nsb ? tcp_sb(c)[i].start : c->snd_max;
        if (i < c->nsb)
            pos = tcp_sb(c)[i].end;
        if (!seq_lt(hs, he))
            continue;
        if (!tcp_sack__is_lost(c, hs))
            pipe += he - hs;
        if (seq_gt(c->high_rxt, hs))
            pipe += seq_min(he, c->high_rxt) - hs;
    }
    return pipe;
}

bool tcp_sack__next_seg(const struct tcp_conn *c, uint32_t *seq, uint32_t *len, bool *rexmit)
{
    uint32_t pos = c->snd_una;
    /* Rule 1: the first unSACKed octet above HighRxt that IsLost(). */
    for (unsigned i = 0; i < c->nsb; i++) {
        uint32_t hs = seq_max(pos, c->high_rxt), he = tcp_sb(c)[i].start;
        pos = tcp_sb(c)[i].end;
        if (seq_lt(hs, he) && tcp_sack__is_lost(c, hs)) {
            *seq = hs;
            *len = he - hs;
            *rexmit = true;
            return true;
        }
    }
    /* Rule 2: new data, if any (the caller checks the receive window). */
    uint32_t data_end = c->snd_q_seq + c->sndq.bytes;
    bool fin_pending = (c->flags & TCPF_FIN_QUEUED) && !(c->flags & TCPF_FIN_SENT);
    if (seq_lt(c->snd_max, data_end) || fin_pending) {
        *seq = c->snd_max;
        *len = seq_lt(c->snd_max, data_end) ? data_end - c->snd_max : 0;
        *rexmit = false;
        return true;
    }
    /* Rule 3: an unSACKed octet above HighRxt with SACKed data above it. */
    pos = c->snd_una;
    for (unsigned i = 0; i < c->nsb; i++) {
        uint32_t hs = seq_max(pos, c->high_rxt), he = tcp_sb(c)[i].start;
        pos = tcp_sb(c)[i].end;
        if (seq_lt(hs, he)) {
            *seq = hs;
            *len = he - hs;
            *rexmit = true;
            return true;
        }
    }
    return false;
}
