/* Fault injector decisions; see fault.h. The poll loop does the holding and copying. */
#include "stack/fault.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int env_ppm(const char *name, uint32_t *out, char *err, size_t errlen)
{
    const char *v = getenv(name);
    *out = 0;
    if (!v || !*v)
        return 0;
    char *end;
    unsigned long x = strtoul(v, &end, 10);
    if (*end || x > 1000000) {
        snprintf(err, errlen, "%s=%s is not valid: want parts per million, 0..1000000", name, v);
        return -EINVAL;
    }
    *out = (uint32_t)x;
    return 0;
}

int fault__init(struct fault *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof(*f));
    int rc;
    if ((rc = env_ppm("SLIP_FAULT_DROP", &f->drop_ppm, err, errlen)) < 0 ||
        (rc = env_ppm("SLIP_FAULT_DUP", &f->dup_ppm, err, errlen)) < 0 ||
        (rc = env_ppm("SLIP_FAULT_REORDER", &f->reorder_ppm, err, errlen)) < 0)
        return rc;
    const char *seed = getenv("SLIP_FAULT_SEED");
    f->rng = seed && *seed ? strtoull(seed, NULL, 0) : 1;
    if (!f->rng)
        f->rng = 1;
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
