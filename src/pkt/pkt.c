/* Packet buffer records and queues; see pkt.h. */
#include "pkt/pkt.h"

#include <string.h>

static void meta_reset(struct pkt_meta *m)
{
    memset(m, 0, sizeof(*m));
    m->next = SLIP_NIL;
    m->chain = SLIP_NIL;
}

/* Frames taken from the group per refill: enough that the lock is taken once per many packets,
 * few enough that stacks do not hoard what others need. */
#define PKT_REFILL_BATCH 256

bool pkt__reserve(struct pkt_pool *p, uint32_t n)
{
    uint32_t have = p->frames->count;
    if (have >= n)
        return true;
    if (p->refill)
        p->refill(p, n - have + PKT_REFILL_BATCH);
    return p->frames->count >= n;
}

slip_idx_t pkt__alloc(struct pkt_pool *p)
{
    uint64_t a = xsk_frame_pool__get(p->frames, p->nframes);
    if (SLIP_UNLIKELY(a == UINT64_MAX)) {
        if (!p->refill || !p->refill(p, PKT_REFILL_BATCH))
            return SLIP_NIL;
        a = xsk_frame_pool__get(p->frames, p->nframes);
        if (a == UINT64_MAX)
            return SLIP_NIL;
    }
    slip_idx_t i = pkt__bound(p, pkt__index(p, a));
    struct pkt_meta *m = &p->meta[i];   /* bounded just above */
    meta_reset(m);
    m->off = (uint16_t)p->headroom;
    return i;
}

slip_idx_t pkt__adopt(struct pkt_pool *p, uint64_t addr, uint32_t len)
{
    slip_idx_t i = pkt__bound(p, pkt__index(p, addr));
    struct pkt_meta *m = &p->meta[i];   /* bounded just above */
    meta_reset(m);
    m->off = (uint16_t)(addr - pkt__addr(p, i));
    m->len = (uint16_t)len;
    m->total = len;
    return i;
}

void pkt__free_chain(struct pkt_pool *p, slip_idx_t i)
{
    while (i != SLIP_NIL) {
        slip_idx_t n = pkt__meta(p, i)->chain;
        xsk_frame_pool__put(p->frames, p->nframes, pkt__addr(p, pkt__bound(p, i)));
        i = n;
    }
}

uint32_t pkt__chain_len(const struct pkt_pool *p, slip_idx_t i)
{
    uint32_t n = 0;
    for (; i != SLIP_NIL; i = pkt__meta(p, i)->chain)
        n += pkt__meta(p, i)->len;
    return n;
}

size_t pkt__chain_copy(const struct pkt_pool *p, slip_idx_t i, size_t skip, void *dst, size_t len)
{
    size_t done = 0;
    for (; i != SLIP_NIL && done < len; i = pkt__meta(p, i)->chain) {
        size_t blen = pkt__meta(p, i)->len;
        if (skip >= blen) {
            skip -= blen;
            continue;
        }
        size_t n = SLIP_MIN(blen - skip, len - done);
        memcpy((uint8_t *)dst + done, pkt__data(p, i) + skip, n);
        done += n;
        skip = 0;
    }
    return done;
}

void pkt_queue__init(struct pkt_queue *q)
{
    q->head = q->tail = SLIP_NIL;
    q->count = q->bytes = 0;
}

void pkt_queue__push(struct pkt_pool *p, struct pkt_queue *q, slip_idx_t i, uint32_t bytes)
{
    pkt__meta(p, i)->next = SLIP_NIL;
    if (q->tail == SLIP_NIL)
        q->head = i;
    else
        pkt__meta(p, q->tail)->next = i;
    q->tail = i;
    q->count++;
    q->bytes += bytes;
}

slip_idx_t pkt_queue__pop(struct pkt_pool *p, struct pkt_queue *q, uint32_t bytes)
{
    slip_idx_t i = q->head;
    if (i == SLIP_NIL)
        return SLIP_NIL;
    q->head = pkt__meta(p, i)->next;
    if (q->head == SLIP_NIL)
        q->tail = SLIP_NIL;
    pkt__meta(p, i)->next = SLIP_NIL;
    q->count--;
    q->bytes -= bytes;
    return i;
}

void pkt_queue__purge(struct pkt_pool *p, struct pkt_queue *q)
{
    slip_idx_t i = q->head;
    while (i != SLIP_NIL) {
        slip_idx_t n = pkt__meta(p, i)->next;
        pkt__free_chain(p, i);
        i = n;
    }
    pkt_queue__init(q);
}
