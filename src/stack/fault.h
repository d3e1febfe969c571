/* Fault injector on the stack's receive path, for tests: a device (ip/netdev.h) stacked on a
 * queue's device that drops, duplicates and reorders the frames it receives with given
 * probabilities (parts per million), from a seeded PRNG so a failing run can be repeated.
 * Configured by SLIP_FAULT_DROP, SLIP_FAULT_DUP, SLIP_FAULT_REORDER (ppm) and SLIP_FAULT_SEED;
 * off unless one is set (then no device is stacked and the receive path is untouched). A
 * reordered frame is held back until FAULT_DEPTH later frames went past it, or for at most
 * FAULT_HOLD_NS; deadline() tells the poll loop when. Transmit calls go to the lower device. */
#ifndef SLIP_STACK_FAULT_H
#define SLIP_STACK_FAULT_H

#include "base/types.h"
#include "ip/netdev.h"
#include "pkt/pkt.h"

#define FAULT_MAX_HELD 16
#define FAULT_DEPTH    3
#define FAULT_HOLD_NS  (2 * SLIP_MSEC)
#define FAULT_BURST    256      /* frames taken from the lower device per burst, at most */

/* The knobs and the PRNG. */
struct fault {
    bool on;
    uint32_t drop_ppm, dup_ppm, reorder_ppm;
    uint64_t rng;
};

/* Reads the environment; -EINVAL with the variable named in err for a bad value. */
int fault__init(struct fault *f, char *err, size_t errlen);

/* What to do with one received frame. */
enum fault_verdict { FAULT_PASS, FAULT_DROP, FAULT_DUP, FAULT_HOLD };
enum fault_verdict fault__decide(struct fault *f);

struct fault_dev {
    struct netdev dev;
    struct netdev *lower;
    struct pkt_pool *pool;      /* duplicates are copies in frames of it; dropped frames go back */
    const slip_time_t *now;     /* the poll loop's clock */
    struct fault f;
    uint64_t dropped, duplicated, reordered;
    unsigned nheld;
    struct {
        struct netdev_frame fr;
        unsigned passed;        /* frames delivered since this one was held */
        slip_time_t until;
    } held[FAULT_MAX_HELD];
    /* What the last pull produced beyond the caller's room, handed out by the next bursts. */
    unsigned npend, pend_at;
    struct netdev_frame pend[2 * FAULT_BURST + FAULT_MAX_HELD];
};

/* Stacks d on lower with the knobs of cfg (its seed as is: each device gets its own copy). */
void fault_dev__init(struct fault_dev *d, struct netdev *lower, const struct fault *cfg, struct pkt_pool *pool,
                     const slip_time_t *now);
/* Frees the frames it holds back. */
void fault_dev__close(struct fault_dev *d);
/* A fork child: the frames held back are the parent's (it delivers or frees them). */
void fault_dev__forget(struct fault_dev *d);

#endif
