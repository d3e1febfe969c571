/* Received data: the in-order queue (rcvq) and the out-of-order queue. Payload stays in the
 * frames it arrived in; headers are trimmed by moving pkt_meta.off/len. Out-of-order entries are
 * kept sorted by sequence number, with overlaps cut from the newcomer (old data wins, as in
 * RFC 9293 §3.10.7.4 "seventh"); their sequence number is kept in meta.addr (host order) and
 * their length in meta.total. Memory is bounded by RCVBUF bytes, tcp_ooo_segs_max() segments and
 * tcp_rcv_frames_max() frames. The usual newcomer lies past everything held (the sender goes on
 * while a hole waits): ooo_tail, the last entry, lets it skip the walk (ooo_tail_run, where the
 * run of contiguous entries ending there starts, gives the SACK block it joins). Every removal
 * of that entry clears the hint; tiny in-order segments are copied into the tail buffer so a peer
 * cannot pin a frame per byte. */
#include <string.h>

#include "tcp/tcp_var.h"

#define COALESCE_MAX 512

uint32_t tcp_pkt__nbufs(const struct pkt_pool *pool, slip_idx_t pkt)
{
    uint32_t n = 0;
    for (; pkt != SLIP_NIL; pkt = pkt__meta(pool, pkt)->chain)
        n++;
    return n;
}

slip_idx_t tcp_pkt__trim_front(struct pkt_pool *pool, slip_idx_t pkt, uint32_t n, uint32_t *freed)
{
    while (pkt != SLIP_NIL && n) {
        struct pkt_meta *m = pkt__meta(pool, pkt);
        if (m->len > n) {
            m->off = (uint16_t)(m->off + n);
            m->len = (uint16_t)(m->len - n);
            if (m->total >= n)
                m->total -= n;
            return pkt;
        }
        n -= m->len;
        slip_idx_t next = m->chain;
        uint32_t total = m->total >= m->len ? m->total - m->len : 0;
        m->chain = SLIP_NIL;
        pkt__free_chain(pool, pkt);
        (*freed)++;
        pkt = next;
        if (pkt != SLIP_NIL) {
            pkt__meta(pool, pkt)->total = total;
            pkt__meta(pool, pkt)->next = SLIP_NIL;
        }
    }
    /* Zero-length leading buffers (a header that filled a whole buffer) go too. */
    while (pkt != SLIP_NIL && pkt__meta(pool, pkt)->len == 0 && pkt__meta(pool, pkt)->chain != SLIP_NIL) {
        slip_idx_t next = pkt__meta(pool, pkt)->chain;
        uint32_t total = pkt__meta(pool, pkt)->total;
        pkt__meta(pool, pkt)->chain = SLIP_NIL;
        pkt__free_chain(pool, pkt);
        (*freed)++;
        pkt = next;
        pkt__meta(pool, pkt)->total = total;
    }
    return pkt;
}

uint32_t tcp_pkt__trim_back(struct pkt_pool *pool, slip_idx_t pkt, uint32_t n)
{
    uint32_t have = 0, freed = 0;
    pkt__meta(pool, pkt)->total = n;
    for (slip_idx_t b = pkt; b != SLIP_NIL; b = pkt__meta(pool, b)->chain) {
        struct pkt_meta *m = pkt__meta(pool, b);
        if (have + m->len >= n) {
            m->len = (uint16_t)(n - have);
            if (m->chain != SLIP_NIL) {
                freed = tcp_pkt__nbufs(pool, m->chain);
                pkt__free_chain(pool, m->chain);
                m->chain = SLIP_NIL;
            }
            break;
        }
        have += m->len;
    }
    return freed;
}

void tcp_rcvq__append(struct pkt_pool *pool, struct tcp_conn *c, slip_idx_t pkt, uint32_t len)
{
    struct pkt_meta *m = pkt__meta(pool, pkt);
    slip_idx_t t = c->rcvq.tail;
    if (t != SLIP_NIL && len <= COALESCE_MAX && m->chain == SLIP_NIL) {
        struct pkt_meta *tm = pkt__meta(pool, t);
        /* Only a single-buffer tail can grow in place. */
        if (tm->chain == SLIP_NIL && (uint32_t)tm->off + tm->len + len <= pool->frame_size) {
            memcpy(pkt__data(pool, t) + tm->len, pkt__data(pool, pkt), len);
            tm->len = (uint16_t)(tm->len + len);
            tm->total += len;
            c->rcvq.bytes += len;
            pkt__free_chain(pool, pkt);
            return;
        }
    }
    m->total = len;
    c->rcv_frames += tcp_pkt__nbufs(pool, pkt);
    pkt_queue__push(pool, &c->rcvq, pkt, len);
}

static inline uint32_t ooo_seq(const struct pkt_pool *pool, slip_idx_t e) { return pkt__meta(pool, e)->addr; }
static inline uint32_t ooo_len(const struct pkt_pool *pool, slip_idx_t e) { return pkt__meta(pool, e)->total; }

static void ooo_unlink_free(struct pkt_pool *pool, struct tcp_conn *c, slip_idx_t *pp)
{
    slip_idx_t e = *pp;
    struct pkt_meta *m = pkt__meta(pool, e);
    *pp = m->next;
    if (c->ooo_tail == e)
        c->ooo_tail = SLIP_NIL;
    c->ooo_bytes -= m->total;
    c->ooo_segs--;
    c->rcv_frames -= tcp_pkt__nbufs(pool, e);
    pkt__free_chain(pool, e);
}

/* The run of contiguous entries walked so far: e = [es, ee) extends it or starts the next. */
static inline void run_track(struct tcp_sack_block *run, bool *have, uint32_t es, uint32_t ee)
{
    if (*have && run->end == es) {
        run->end = ee;
    } else {
        run->start = es;
        run->end = ee;
        *have = true;
    }
}

/* Extends run over the entries from e on that continue it. */
static void run_extend(const struct pkt_pool *pool, struct tcp_sack_block *run, slip_idx_t e)
{
    for (; e != SLIP_NIL && ooo_seq(pool, e) == run->end; e = pkt__meta(pool, e)->next)
        run->end += ooo_len(pool, e);
}

void tcp_reass__add(struct ip_env *env, struct tcp_conn *c, uint32_t seq, slip_idx_t pkt, uint32_t len,
                    struct tcp_sack_block *run)
{
    struct pkt_pool *pool = env->pool;
    uint32_t nb = tcp_pkt__nbufs(pool, pkt);
    run->start = run->end = seq;
    if (c->ooo_segs >= tcp_ooo_segs_max(c) || c->rcv_frames + nb > tcp_rcv_frames_max(c)) {
        c->st.ooo_drops++;
        pkt__free_chain(pool, pkt);
        return;
    }
    /* The walk keeps the run of contiguous entries before the place it reached, so the run the
     * segment joins is known without a second walk from the head. */
    bool have = false;
    slip_idx_t *pp = &c->ooo_head;
    slip_idx_t t = c->ooo_tail;
    if (t != SLIP_NIL && pkt__meta(pool, t)->next == SLIP_NIL && seq_geq(seq, ooo_seq(pool, t) + ooo_len(pool, t))) {
        pp = &pkt__meta(pool, t)->next;     /* past the last entry: nothing to walk or cut */
        run->start = c->ooo_tail_run;
        run->end = ooo_seq(pool, t) + ooo_len(pool, t);
        have = true;
    }
    bool dup = false;       /* the first overlap with data already held is reported */
    while (*pp != SLIP_NIL) {
        slip_idx_t e = *pp;
        uint32_t es = ooo_seq(pool, e), ee = es + ooo_len(pool, e);
        if (seq_leq(ee, seq)) {
            run_track(run, &have, es, ee);
            pp = &pkt__meta(pool, e)->next;
            continue;
        }
        if (seq_geq(es, seq + len))
            break;      /* goes before e */
        if (seq_leq(es, seq)) {
            /* e covers our front: keep only what lies beyond it. */
            uint32_t cut = ee - seq;
            if (!dup) {
                tcp_sack__dup(c, seq, seq + SLIP_MIN(cut, len));
                dup = true;
            }
            run_track(run, &have, es, ee);
            if (cut >= len) {
                pkt__free_chain(pool, pkt);
                run_extend(pool, run, pkt__meta(pool, e)->next);
                return;
            }
            uint32_t freed = 0;
            pkt = tcp_pkt__trim_front(pool, pkt, cut, &freed);
            nb -= freed;
            seq += cut;
            len -= cut;
            pp = &pkt__meta(pool, e)->next;
            continue;
        }
        /* We start before e. */
        if (!dup) {
            tcp_sack__dup(c, es, seq_geq(seq + len, ee) ? ee : seq + len);
            dup = true;
        }
        if (seq_geq(seq + len, ee)) {
            ooo_unlink_free(pool, c, pp);     /* we cover e entirely: ours replaces it */
            continue;
        }
        nb -= tcp_pkt__trim_back(pool, pkt, es - seq);
        len = es - seq;
        break;
    }
    struct pkt_meta *m = pkt__meta(pool, pkt);
    m->addr = seq;
    m->total = len;
    m->next = *pp;
    *pp = pkt;
    run_track(run, &have, seq, seq + len);
    if (m->next == SLIP_NIL)
        c->ooo_tail = pkt;
    run_extend(pool, run, m->next);
    /* The run reaching the tail (appended to it, or a hole below it filled): its start is the
     * tail's run start now. */
    t = c->ooo_tail;
    if (t != SLIP_NIL && run->end == ooo_seq(pool, t) + ooo_len(pool, t))
        c->ooo_tail_run = run->start;
    c->ooo_bytes += len;
    c->ooo_segs++;
    c->rcv_frames += nb;
}

uint32_t tcp_reass__pull(struct ip_env *env, struct tcp_conn *c)
{
    struct pkt_pool *pool = env->pool;
    uint32_t moved = 0;
    while (c->ooo_head != SLIP_NIL) {
        slip_idx_t e = c->ooo_head;
        uint32_t es = ooo_seq(pool, e), len = ooo_len(pool, e), ee = es + len;
        if (seq_gt(es, c->rcv_nxt))
            break;
        struct pkt_meta *m = pkt__meta(pool, e);
        c->ooo_head = m->next;
        if (c->ooo_tail == e)
            c->ooo_tail = SLIP_NIL;
        c->ooo_bytes -= len;
        c->ooo_segs--;
        uint32_t nb = tcp_pkt__nbufs(pool, e);
        c->rcv_frames -= nb;
        if (seq_leq(ee, c->rcv_nxt)) {
            pkt__free_chain(pool, e);
            continue;
        }
        uint32_t cut = c->rcv_nxt - es, freed = 0;
        m->next = SLIP_NIL;
        if (cut)
            e = tcp_pkt__trim_front(pool, e, cut, &freed);
        len -= cut;
        tcp_rcvq__append(pool, c, e, len);
        c->rcv_nxt += len;
        c->st.bytes_in += len;
        moved += len;
    }
    return moved;
}

void tcp_reass__purge(struct pkt_pool *pool, struct tcp_conn *c)
{
    while (c->ooo_head != SLIP_NIL)
        ooo_unlink_free(pool, c, &c->ooo_head);
    c->ooo_tail = SLIP_NIL;
    c->ooo_bytes = 0;
    c->ooo_segs = 0;
    c->nrsack = 0;
    c->dsack.start = c->dsack.end = 0;
}
