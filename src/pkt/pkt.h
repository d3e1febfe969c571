/* Packet buffers: every UMEM frame has a small metadata record (same index as the frame), so a
 * received frame can sit in a reassembly or socket queue without being copied, and a datagram
 * larger than a frame is a chain of frames. Records live in shared memory and link by index. */
#ifndef SLIP_PKT_PKT_H
#define SLIP_PKT_PKT_H

#include "base/types.h"
#include "xsk/frame_pool.h"

struct pkt_meta {
    slip_idx_t next;            /* next datagram in a queue */
    slip_idx_t chain;           /* next buffer of the same datagram */
    uint16_t off;               /* start of the useful bytes, from the frame base */
    uint16_t len;               /* useful bytes in this buffer */
    uint32_t total;             /* whole datagram length (head buffer only) */
    be32 addr;                  /* peer address (head buffer of a received datagram) */
    be16 port;                  /* peer port */
    union {
        uint16_t frag_off;      /* reassembly: payload offset of this fragment in the datagram */
        uint16_t sflags;        /* a TCP send-queue buffer: PKT_SND_* */
    };
    slip_time_t stamp;          /* receive time */
};

/* pkt_meta.sflags of a TCP send-queue buffer. */
#define PKT_SND_EOR 0x1u        /* its last byte ends a record (MSG_EOR): no segment runs past it */

/* A FIFO of datagrams, by index. Lives inside whatever owns it (a socket, a neighbour entry). */
struct pkt_queue {
    slip_idx_t head, tail;
    uint32_t count;
    uint32_t bytes;
};

/* Process-local view of the packet memory of one stack. frames is the stack's own free list;
 * when several stacks share one UMEM (a group, see docs/ARCHITECTURE.md) it is a cache in front
 * of the group's pool, and refill (set by the stack) moves a batch of frames from the group into
 * it under the group's lock: once per batch, never per packet. */
struct pkt_pool {
    uint8_t *umem;
    struct xsk_frame_pool *frames;
    struct pkt_meta *meta;
    uint32_t frame_size;
    uint32_t headroom;          /* bytes kept free before packet data in frames we build */
    uint32_t nframes;
    /* Moves at least want frames (if the group has them) into frames; returns how many came. */
    uint32_t (*refill)(struct pkt_pool *p, uint32_t want);
    void *owner;                /* the stack, for refill */
};

static inline slip_idx_t pkt__index(const struct pkt_pool *p, uint64_t addr)
{
    return (slip_idx_t)(addr / p->frame_size);
}

static inline uint64_t pkt__addr(const struct pkt_pool *p, slip_idx_t i)
{
    return (uint64_t)i * p->frame_size;
}

/* Buffer indices live in shared memory (queues, chains), which every process of the stack can
 * write, some of them less privileged than others: an index past the pool (whose size is this
 * process's own copy) is turned into frame 0, so a corrupted queue garbles packets inside the
 * arena instead of reaching outside it. One compare on the way to every record. */
static inline slip_idx_t pkt__bound(const struct pkt_pool *p, slip_idx_t i)
{
    return SLIP_LIKELY(i < p->nframes) ? i : 0;
}

static inline struct pkt_meta *pkt__meta(const struct pkt_pool *p, slip_idx_t i)
{
    return &p->meta[pkt__bound(p, i)];
}

static inline uint8_t *pkt__frame(const struct pkt_pool *p, slip_idx_t i)
{
    return p->umem + (uint64_t)pkt__bound(p, i) * p->frame_size;
}

/* off is a 16-bit field: even unchecked it stays inside the arena (the frame pool and records
 * follow the UMEM), but a start past the frame is nonsense: read from the frame's start. */
static inline uint8_t *pkt__data(const struct pkt_pool *p, slip_idx_t i)
{
    uint16_t off = pkt__meta(p, i)->off;
    return pkt__frame(p, i) + (off < p->frame_size ? off : 0);
}

/* Bytes a frame can hold after the headroom. */
static inline uint32_t pkt__room(const struct pkt_pool *p)
{
    return p->frame_size - p->headroom;
}

/* Takes a free frame and resets its record (off = headroom, len = 0). SLIP_NIL when none. */
slip_idx_t pkt__alloc(struct pkt_pool *p);
/* Makes sure n frames can be allocated now (refilling from the group if needed): false if not. */
bool pkt__reserve(struct pkt_pool *p, uint32_t n);
/* Adopts a received frame: its record describes addr/len as the port returned them. */
slip_idx_t pkt__adopt(struct pkt_pool *p, uint64_t addr, uint32_t len);
/* Frees one buffer and every buffer chained after it. */
void pkt__free_chain(struct pkt_pool *p, slip_idx_t i);
/* Bytes of a chain. */
uint32_t pkt__chain_len(const struct pkt_pool *p, slip_idx_t i);
/* Copies up to len bytes of a chain, starting skip bytes in, into dst; returns bytes copied. */
size_t pkt__chain_copy(const struct pkt_pool *p, slip_idx_t i, size_t skip, void *dst, size_t len);

void pkt_queue__init(struct pkt_queue *q);
void pkt_queue__push(struct pkt_pool *p, struct pkt_queue *q, slip_idx_t i, uint32_t bytes);
slip_idx_t pkt_queue__pop(struct pkt_pool *p, struct pkt_queue *q, uint32_t bytes);
static inline slip_idx_t pkt_queue__peek(const struct pkt_queue *q) { return q->head; }
/* Frees every datagram in the queue. */
void pkt_queue__purge(struct pkt_pool *p, struct pkt_queue *q);

#endif
