/* Free list of UMEM frames. It lives in the stack's shared memory (no pointers inside), so every
 * process that maps the stack can take and return frames under the stack lock. */
#ifndef SLIP_XSK_FRAME_POOL_H
#define SLIP_XSK_FRAME_POOL_H

#include "base/types.h"

struct xsk_frame_pool {
    uint32_t count;             /* frames currently free */
    uint32_t capacity;          /* total frames in the UMEM */
    uint32_t frame_size;        /* power of two */
    uint32_t low_water;         /* fewest free frames ever seen (a counter for `stat`) */
    uint64_t addrs[];           /* LIFO of free frame base offsets into the UMEM */
};

static inline size_t xsk_frame_pool__bytes(uint32_t nframes)
{
    return sizeof(struct xsk_frame_pool) + (size_t)nframes * sizeof(uint64_t);
}

/* Fills the pool with every frame of a UMEM of nframes frames of frame_size bytes. */
void xsk_frame_pool__init(struct xsk_frame_pool *p, uint32_t nframes, uint32_t frame_size);

/* The pool lives in shared memory that every process of the stack can write: its count is
 * checked against nframes, the caller's own copy of the UMEM's size, before it indexes the
 * LIFO (a count past it reads as an empty, or full, pool). Addresses handed out are checked by
 * whoever turns them into pointers (pkt__bound) and by the kernel (fill and TX rings). */

/* Returns a free frame's base offset, or UINT64_MAX when none is left. */
static inline uint64_t xsk_frame_pool__get(struct xsk_frame_pool *p, uint32_t nframes)
{
    uint32_t c = p->count;
    if (SLIP_UNLIKELY(c == 0 || c > nframes))
        return UINT64_MAX;
    uint64_t a = p->addrs[--c];
    p->count = c;
    if (c < p->low_water)
        p->low_water = c;
    return a;
}

/* Takes any address inside a frame (RX descriptors point past the headroom) and frees the frame. */
static inline void xsk_frame_pool__put(struct xsk_frame_pool *p, uint32_t nframes, uint64_t addr)
{
    uint32_t c = p->count;
    if (SLIP_UNLIKELY(c >= nframes))
        return;
    p->addrs[c] = addr & ~(uint64_t)(p->frame_size - 1);
    p->count = c + 1;
}

#endif
