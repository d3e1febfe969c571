/* Fault injector device; see fault.h. */
#include "stack/fault.h"

#include "base/env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fault__init(struct fault *f, char *err, size_t errlen)
{
    uint64_t drop, dup, reorder, seed;
    int rc;
    memset(f, 0, sizeof(*f));
    if ((rc = slip_env__get(SLIP_ENV_FAULT_DROP, &drop, err, errlen)) < 0 ||
        (rc = slip_env__get(SLIP_ENV_FAULT_DUP, &dup, err, errlen)) < 0 ||
        (rc = slip_env__get(SLIP_ENV_FAULT_REORDER, &reorder, err, errlen)) < 0 ||
        (rc = slip_env__get(SLIP_ENV_FAULT_SEED, &seed, err, errlen)) < 0)
        return rc;
    f->drop_ppm = (uint32_t)drop;       /* the table bounds them to 1000000 */
    f->dup_ppm = (uint32_t)dup;
    f->reorder_ppm = (uint32_t)reorder;
    f->rng = seed ? seed : 1;
    f->on = f->drop_ppm || f->dup_ppm || f->reorder_ppm;
    return 0;
}

/* xorshift64*: small, fast, and good enough to decide coin flips reproducibly. */
static uint32_t rnd_ppm(struct fault *f)
{
    f->rng ^= f->rng >> 12;
    f->rng ^= f->rng << 25;
    f->rng ^= f->rng >> 27;
    return (uint32_t)(((f->rng * 2685821657736338717ull) >> 32) % 1000000);
}

enum fault_verdict fault__decide(struct fault *f)
{
    uint32_t r = rnd_ppm(f);
    if (r < f->drop_ppm)
        return FAULT_DROP;
    r -= f->drop_ppm;
    if (r < f->dup_ppm)
        return FAULT_DUP;
    r -= f->dup_ppm;
    if (r < f->reorder_ppm)
        return FAULT_HOLD;
    return FAULT_PASS;
}

static struct fault_dev *fd_of(const struct netdev *d)
{
    return (struct fault_dev *)d;
}

static void emit(struct fault_dev *d, struct netdev_frame fr)
{
    d->pend[d->npend++] = fr;
}

/* Hands on held frames that waited long enough, or all of them when `all`. */
static void release(struct fault_dev *d, bool all)
{
    unsigned k = 0;
    for (unsigned i = 0; i < d->nheld; i++) {
        if (all || d->held[i].passed >= FAULT_DEPTH || d->held[i].until <= *d->now)
            emit(d, d->held[i].fr);
        else
            d->held[k++] = d->held[i];
    }
    d->nheld = k;
}

static void drop_frame(struct fault_dev *d, struct netdev_frame fr)
{
    pkt__free_chain(d->pool, pkt__adopt(d->pool, fr.addr, fr.len));
}

/* One frame from below: dropped, copied and passed, held back, or passed. */
static void impair(struct fault_dev *d, struct netdev_frame fr)
{
    switch (fault__decide(&d->f)) {
    case FAULT_DROP:
        d->dropped++;
        drop_frame(d, fr);
        return;
    case FAULT_DUP: {
        slip_idx_t c = pkt__alloc(d->pool);
        if (c != SLIP_NIL) {
            d->duplicated++;
            struct pkt_meta *m = pkt__meta(d->pool, c);
            memcpy(pkt__data(d->pool, c), d->pool->umem + fr.addr, fr.len);
            m->len = (uint16_t)fr.len;
            emit(d, (struct netdev_frame){ .addr = pkt__addr(d->pool, c) + m->off, .len = fr.len });
        }
        break;
    }
    case FAULT_HOLD:
        if (d->nheld < FAULT_MAX_HELD) {
            d->reordered++;
            d->held[d->nheld].fr = fr;
            d->held[d->nheld].passed = 0;
            d->held[d->nheld].until = *d->now + FAULT_HOLD_NS;
            d->nheld++;
            return;
        }
        break;
    case FAULT_PASS:
        break;
    }
    emit(d, fr);
    for (unsigned i = 0; i < d->nheld; i++)
        d->held[i].passed++;
    release(d, false);
}

static unsigned fd_rx_burst(struct netdev *nd, struct netdev_frame *out, unsigned max)
{
    struct fault_dev *d = fd_of(nd);
    if (d->pend_at == d->npend) {
        struct netdev_frame in[FAULT_BURST];
        d->npend = d->pend_at = 0;
        unsigned n = netdev__rx_burst(d->lower, in, SLIP_MIN(max, FAULT_BURST));
        for (unsigned k = 0; k < n; k++)
            impair(d, in[k]);
        release(d, false);      /* those whose time is up, frames from below or not */
    }
    unsigned n = SLIP_MIN(max, d->npend - d->pend_at);
    memcpy(out, d->pend + d->pend_at, n * sizeof(*out));
    d->pend_at += n;
    return n;
}

static unsigned fd_tx_enqueue(struct netdev *nd, const struct netdev_frame *f, unsigned n)
{
    return netdev__tx_enqueue(fd_of(nd)->lower, f, n);
}

static int fd_kick(struct netdev *nd)
{
    return netdev__kick(fd_of(nd)->lower);
}

static uint32_t fd_tx_queued(const struct netdev *nd)
{
    return netdev__tx_queued(fd_of(nd)->lower);
}

static void fd_complete(struct netdev *nd)
{
    netdev__complete(fd_of(nd)->lower);
}

static bool fd_rx_pending(const struct netdev *nd)
{
    const struct fault_dev *d = fd_of(nd);
    return d->pend_at != d->npend || netdev__rx_pending(d->lower);
}

static slip_time_t fd_deadline(const struct netdev *nd)
{
    const struct fault_dev *d = fd_of(nd);
    if (d->pend_at != d->npend)
        return 0;
    slip_time_t t = netdev__deadline(d->lower);
    for (unsigned i = 0; i < d->nheld; i++)
        t = SLIP_MIN(t, d->held[i].until);
    return t;
}

static const struct netdev_ops fault_dev_ops = {
    .rx_burst = fd_rx_burst,
    .tx_enqueue = fd_tx_enqueue,
    .kick = fd_kick,
    .tx_queued = fd_tx_queued,
    .complete = fd_complete,
    .rx_pending = fd_rx_pending,
    .deadline = fd_deadline,
};

void fault_dev__init(struct fault_dev *d, struct netdev *lower, const struct fault *cfg, struct pkt_pool *pool,
                     const slip_time_t *now)
{
    memset(d, 0, sizeof(*d));
    d->dev = (struct netdev){ .ops = &fault_dev_ops, .ifindex = lower->ifindex };
    d->lower = lower;
    d->pool = pool;
    d->now = now;
    d->f = *cfg;
}

void fault_dev__close(struct fault_dev *d)
{
    for (unsigned i = 0; i < d->nheld; i++)
        drop_frame(d, d->held[i].fr);
    for (unsigned i = d->pend_at; i < d->npend; i++)
        drop_frame(d, d->pend[i]);
    fault_dev__forget(d);
}

void fault_dev__forget(struct fault_dev *d)
{
    d->nheld = 0;
    d->npend = d->pend_at = 0;
}
