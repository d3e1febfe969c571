/* The shared arena: one memfd mapped MAP_SHARED that holds a whole stack, UMEM included. Inside
 * it, references are offsets from the base, never pointers, so another process (a fork child,
 * an exec'd image given the memfd) can map it at any address. Regions are carved once, at
 * creation, by a bump allocator; nothing is freed back to the arena. */
#ifndef SLIP_STACK_ARENA_H
#define SLIP_STACK_ARENA_H

#include "base/types.h"

struct slip_arena {
    int memfd;
    uint8_t *base;
    size_t size;
    size_t used;                /* bump pointer, creation time only */
};

/* Creates a memfd of size bytes (rounded up to pages) and maps it, with the first `populate`
 * bytes faulted in now (the frames and rings of the hot path); the rest (tables sized for their
 * maximum) gets pages only where it is touched. Negative errno. */
int slip_arena__create(struct slip_arena *a, const char *name, size_t size, size_t populate);
/* Maps an existing arena memfd (size read with fstat). */
int slip_arena__attach(struct slip_arena *a, int memfd);
void slip_arena__destroy(struct slip_arena *a);
/* Carves size bytes aligned to align (a power of two); returns the offset or -ENOMEM. */
int64_t slip_arena__carve(struct slip_arena *a, size_t size, size_t align);

static inline void *slip_arena__ptr(const struct slip_arena *a, uint64_t off)
{
    return a->base + off;
}

#endif
