/* Fault injector on the stack's receive path, for tests: drops, duplicates and reorders received
 * frames with given probabilities (parts per million), from a seeded PRNG so a failing run can
 * be repeated. Configured by SLIP_FAULT_DROP, SLIP_FAULT_DUP, SLIP_FAULT_REORDER (ppm) and
 * SLIP_FAULT_SEED; off unless one is set. A reordered frame is held back until FAULT_DEPTH
 * later frames went past it, or for at most FAULT_HOLD_NS. */
#ifndef SLIP_STACK_FAULT_H
#define SLIP_STACK_FAULT_H

#include "base/types.h"
#include "pkt/pkt.h"

#define FAULT_MAX_HELD 16
#define FAULT_DEPTH    3
#define FAULT_HOLD_NS  (2 * SLIP_MSEC)

struct fault {
    bool on;
    uint32_t drop_ppm, dup_ppm, reorder_ppm;
    uint64_t rng;
    unsigned nheld;
    struct {
        slip_idx_t pkt;
        uint32_t ifindex;
        unsigned passed;        /* frames delivered since this one was held */
        slip_time_t until;
    } held[FAULT_MAX_HELD];
    uint64_t dropped, duplicated, reordered;
};

/* Reads the environment; -EINVAL with the variable named in err for a bad value. */
int fault__init(struct fault *f, char *err, size_t errlen);

/* What to do with one received frame. */
enum fault_verdict { FAULT_PASS, FAULT_DROP, FAULT_DUP, FAULT_HOLD };
enum fault_verdict fault__decide(struct fault *f);

#endif
