/* Unit tests of the UMEM frame pool: a plain LIFO in caller memory, so these run without any
 * kernel feature. Vectors are small hand-made pools (8 frames of 2048 bytes). */
#include "tests/unit/check.h"
#include "xsk/frame_pool.h"

#define NFRAMES 8
#define FSIZE 2048

static uint64_t pool_mem[(sizeof(struct xsk_frame_pool) + NFRAMES * sizeof(uint64_t)) / sizeof(uint64_t) + 1];

static struct xsk_frame_pool *fresh_pool(void)
{
    struct xsk_frame_pool *p = (struct xsk_frame_pool *)pool_mem;
    memset(pool_mem, 0xa5, sizeof(pool_mem));
    xsk_frame_pool__init(p, NFRAMES, FSIZE);
    return p;
}

TEST(test_init_fills_every_frame)
{
    struct xsk_frame_pool *p = fresh_pool();
    CHECK(xsk_frame_pool__bytes(NFRAMES), <=, sizeof(pool_mem));
    CHECK(p->count, ==, NFRAMES);
    CHECK(p->capacity, ==, NFRAMES);
    CHECK(p->frame_size, ==, FSIZE);
    CHECK(p->low_water, ==, NFRAMES);
    /* Every frame comes out exactly once, each at a frame boundary inside the UMEM. */
    int seen[NFRAMES] = { 0 };
    for (int i = 0; i < NFRAMES; i++) {
        uint64_t a = xsk_frame_pool__get(p, NFRAMES);
        CHECK(a % FSIZE, ==, 0);
        CHECK(a, <, (uint64_t)NFRAMES * FSIZE);
        if (a < (uint64_t)NFRAMES * FSIZE)
            seen[a / FSIZE]++;
    }
    for (int i = 0; i < NFRAMES; i++)
        CHECK(seen[i], ==, 1);
}

TEST(test_first_get_is_frame_zero)
{
    struct xsk_frame_pool *p = fresh_pool();
    CHECK(xsk_frame_pool__get(p, NFRAMES), ==, 0);
    CHECK(xsk_frame_pool__get(p, NFRAMES), ==, FSIZE);
}

TEST(test_empty_returns_max)
{
    struct xsk_frame_pool *p = fresh_pool();
    for (int i = 0; i < NFRAMES; i++)
        CHECK(xsk_frame_pool__get(p, NFRAMES), !=, UINT64_MAX);
    CHECK(p->count, ==, 0);
    CHECK(xsk_frame_pool__get(p, NFRAMES) == UINT64_MAX, ==, 1);
    CHECK(xsk_frame_pool__get(p, NFRAMES) == UINT64_MAX, ==, 1);
    CHECK(p->count, ==, 0);
    CHECK(p->low_water, ==, 0);
}

TEST(test_put_then_get_is_lifo)
{
    struct xsk_frame_pool *p = fresh_pool();
    uint64_t a = xsk_frame_pool__get(p, NFRAMES);
    uint64_t b = xsk_frame_pool__get(p, NFRAMES);
    CHECK(p->count, ==, NFRAMES - 2);
    xsk_frame_pool__put(p, NFRAMES, a);
    xsk_frame_pool__put(p, NFRAMES, b);
    CHECK(p->count, ==, NFRAMES);
    CHECK(xsk_frame_pool__get(p, NFRAMES), ==, b);
    CHECK(xsk_frame_pool__get(p, NFRAMES), ==, a);
}

TEST(test_low_water_keeps_minimum)
{
    struct xsk_frame_pool *p = fresh_pool();
    uint64_t got[5];
    for (int i = 0; i < 5; i++)
        got[i] = xsk_frame_pool__get(p, NFRAMES);
    CHECK(p->low_water, ==, NFRAMES - 5);
    for (int i = 0; i < 5; i++)
        xsk_frame_pool__put(p, NFRAMES, got[i]);
    /* Returning frames never raises the mark: it records the worst moment. */
    CHECK(p->count, ==, NFRAMES);
    CHECK(p->low_water, ==, NFRAMES - 5);
    (void)xsk_frame_pool__get(p, NFRAMES);
    CHECK(p->low_water, ==, NFRAMES - 5);
}

TEST(test_put_masks_address_inside_frame)
{
    /* RX descriptors point at packet data past the headroom, TX code may return a pointer to
     * any byte it wrote: the pool must store the frame's base either way. */
    struct xsk_frame_pool *p = fresh_pool();
    uint64_t a = xsk_frame_pool__get(p, NFRAMES);
    uint64_t b = xsk_frame_pool__get(p, NFRAMES);
    uint64_t c = xsk_frame_pool__get(p, NFRAMES);
    xsk_frame_pool__put(p, NFRAMES, a + 256);
    CHECK(xsk_frame_pool__get(p, NFRAMES), ==, a);
    xsk_frame_pool__put(p, NFRAMES, b + FSIZE - 1);
    CHECK(xsk_frame_pool__get(p, NFRAMES), ==, b);
    xsk_frame_pool__put(p, NFRAMES, c + 1);
    CHECK(xsk_frame_pool__get(p, NFRAMES), ==, c);
}

TEST(test_pool_works_in_copied_memory)
{
    /* The pool lives in shared memory mapped at different addresses: a byte copy of it must
     * behave identically (no pointer inside). */
    struct xsk_frame_pool *p = fresh_pool();
    (void)xsk_frame_pool__get(p, NFRAMES);
    static uint64_t copy[sizeof(pool_mem) / sizeof(uint64_t)];
    memcpy(copy, pool_mem, sizeof(pool_mem));
    struct xsk_frame_pool *q = (struct xsk_frame_pool *)copy;
    CHECK(q->count, ==, p->count);
    CHECK(xsk_frame_pool__get(q, NFRAMES), ==, xsk_frame_pool__get(p, NFRAMES));
}

TEST_MAIN()
