/* Fault injector decisions; see fault.h. The poll loop does the holding and copying. */
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
