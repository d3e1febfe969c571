/* SO_REUSEPORT listen keys shared by several stacks (bpf/steer.h, STEER_F_GROUP): the member set
 * of a key's value, edited by read-modify-write. Callers serialise edits of one map (the group's
 * claim lock, src/stack/claims.c): two stacks joining at once would otherwise lose one. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <bpf/bpf.h>

#include "xsk/steer.h"

#define MEMBERS_MASK ((uint32_t)((1u << STEER_MAX_STACKS) - 1))

/* The lowest member that is not parked (parked ones have copies, which are members), else the
 * lowest member: what tools and a reader of `stack` see. */
static void steer_val__elect(struct steer_val *v)
{
    uint32_t elig = v->members & ~v->parked & MEMBERS_MASK;
    uint32_t m = elig ? elig : v->members & MEMBERS_MASK;
    v->stack = m ? (uint16_t)__builtin_ctz(m) : STEER_MAX_STACKS;
}

void steer_val__join(struct steer_val *v, bool existed, uint32_t stack, uint32_t pid, int origin, uint32_t seed)
{
    if (stack >= STEER_MAX_STACKS)
        return;
    if (!existed || !(v->flags & STEER_F_GROUP)) {
        /* A plain value left by a stack that is gone (a live one's port reservation would have
         * kept us from binding): replaced. */
        memset(v, 0, sizeof(*v));
        v->flags = STEER_F_GROUP;
        v->seed = seed;
    }
    v->members |= (uint16_t)(1u << stack);
    v->parked &= (uint16_t)~(1u << stack);
    v->origin[stack] = 0;
    v->pid = pid;
    if (origin >= 0 && origin < STEER_MAX_STACKS && (uint32_t)origin != stack &&
        (v->members & (1u << origin))) {
        /* A worker's copy of origin's listener: origin gets no new flows while copies exist. */
        v->origin[stack] = (uint8_t)(origin + 1);
        v->parked |= (uint16_t)(1u << origin);
    }
    steer_val__elect(v);
}

bool steer_val__leave(struct steer_val *v, uint32_t stack)
{
    if (stack < STEER_MAX_STACKS) {
        v->members &= (uint16_t)~(1u << stack);
        v->parked &= (uint16_t)~(1u << stack);
        v->origin[stack] = 0;
    }
    /* A parked stack stays parked when its last copy leaves (a worker that died or closed its
     * listener): nothing of it accepts on that listener, or it would have been unparked (its
     * first use, steer_val__unpark), so a connection given to it would wait in a queue nobody
     * reads. Until the next copy joins (nginx forks a new worker) or the stack's own process
     * uses the listener, the XDP program drops the key's SYNs and peers send them again. */
    steer_val__elect(v);
    return (v->members & MEMBERS_MASK) != 0;
}

int steer_map__join(int fd, const void *key, uint32_t stack, uint32_t pid, int origin)
{
    struct steer_val v;
    bool existed = bpf_map_lookup_elem(fd, key, &v) == 0;
    uint32_t seed = 0;
    if (!existed || !(v.flags & STEER_F_GROUP)) {
        /* Keys the member pick (a remote host choosing ports cannot aim at one member). */
        if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != sizeof(seed))
            seed = (uint32_t)random();
    }
    steer_val__join(&v, existed, stack, pid, origin, seed);
    int rc = bpf_map_update_elem(fd, key, &v, BPF_ANY);
    return rc < 0 ? -errno : 0;
}

int steer_map__leave(int fd, const void *key, uint32_t stack)
{
    struct steer_val v;
    if (bpf_map_lookup_elem(fd, key, &v) != 0)
        return 0;
    if (!(v.flags & STEER_F_GROUP)) {
        /* Not a group: the key is the leaver's alone when it names it. */
        if (v.stack == stack && bpf_map_delete_elem(fd, key) != 0)
            return -errno;
        return 0;
    }
    if (!(v.members & (1u << stack)))
        return 0;
    int rc = steer_val__leave(&v, stack) ? bpf_map_update_elem(fd, key, &v, BPF_EXIST) : bpf_map_delete_elem(fd, key);
    return rc < 0 ? -errno : 0;
}

void steer_val__unpark(struct steer_val *v, uint32_t stack)
{
    if (stack >= STEER_MAX_STACKS)
        return;
    v->parked &= (uint16_t)~(1u << stack);
    for (uint32_t m = 0; m < STEER_MAX_STACKS; m++)
        if (v->origin[m] == stack + 1)
            v->origin[m] = 0;       /* no longer a copy standing in for it: a member as any */
    steer_val__elect(v);
}

int steer_map__unpark(int fd, const void *key, uint32_t stack)
{
    struct steer_val v;
    if (bpf_map_lookup_elem(fd, key, &v) != 0 || !(v.flags & STEER_F_GROUP) || stack >= STEER_MAX_STACKS ||
        !(v.parked & (1u << stack)))
        return 0;
    steer_val__unpark(&v, stack);
    return bpf_map_update_elem(fd, key, &v, BPF_EXIST) < 0 ? -errno : 1;
}
