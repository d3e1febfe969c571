/* The fault injector as a device: stacked on a scripted device that hands out numbered frames, it
 * drops, duplicates and holds back frames exactly as its decisions say (hand-written cases for
 * each knob at 100 %, and a mixed run on a fixed seed against a model of the rules in fault.h),
 * hands them out whatever the caller's burst size, tells the poll loop when held frames are due,
 * forwards transmit calls below, and leaks no frame. */
#include <string.h>

#include "check.h"
#include "stack/fault.h"
#include "xsk/frame_pool.h"

#define NFRAMES 256
#define FSIZE   2048
#define FLEN    64

static struct pkt_pool pool;

static void pool_init(void)
{
    memset(&pool, 0, sizeof(pool));
    pool.umem = aligned_alloc(4096, (size_t)NFRAMES * FSIZE);
    pool.frames = malloc(xsk_frame_pool__bytes(NFRAMES));
    pool.meta = calloc(NFRAMES, sizeof(struct pkt_meta));
    pool.frame_size = FSIZE;
    pool.headroom = 256;
    pool.nframes = NFRAMES;
    xsk_frame_pool__init(pool.frames, NFRAMES, FSIZE);
}

static void pool_fini(void)
{
    CHECK(pool.frames->count, ==, NFRAMES);     /* every frame came back */
    free(pool.umem);
    free(pool.frames);
    free(pool.meta);
}

/* Below: frames numbered 0..total-1, at most per_burst a burst; counts transmit calls. */
struct script {
    struct netdev dev;
    unsigned next, total, per_burst;
    unsigned tx, kicks;
};

static unsigned sc_rx(struct netdev *d, struct netdev_frame *f, unsigned max)
{
    struct script *s = (struct script *)d;
    unsigned n = 0;
    while (n < max && n < s->per_burst && s->next < s->total) {
        slip_idx_t p = pkt__alloc(&pool);
        CHECK(p != SLIP_NIL, ==, 1);
        uint8_t *data = pkt__data(&pool, p);
        memset(data, 0, FLEN);
        memcpy(data, &s->next, sizeof(s->next));
        f[n].addr = pkt__addr(&pool, p) + pkt__meta(&pool, p)->off;
        f[n].len = FLEN;
        f[n].pad_ = 0;
        n++, s->next++;
    }
    return n;
}

static unsigned sc_tx(struct netdev *d, const struct netdev_frame *f, unsigned n)
{
    (void)f;
    ((struct script *)d)->tx += n;
    return n;
}

static int sc_kick(struct netdev *d)
{
    ((struct script *)d)->kicks++;
    return 0;
}

static uint32_t sc_queued(const struct netdev *d)
{
    return ((const struct script *)d)->tx;
}

static void sc_complete(struct netdev *d)
{
    (void)d;
}

static bool sc_pending(const struct netdev *d)
{
    const struct script *s = (const struct script *)d;
    return s->next < s->total;
}

static const struct netdev_ops script_ops = {
    .rx_burst = sc_rx, .tx_enqueue = sc_tx, .kick = sc_kick, .tx_queued = sc_queued,
    .complete = sc_complete, .rx_pending = sc_pending,
};

static struct script script(unsigned total, unsigned per_burst)
{
    return (struct script){ .dev = { .ops = &script_ops, .ifindex = 7 }, .total = total, .per_burst = per_burst };
}

static struct fault knobs(uint32_t drop, uint32_t dup, uint32_t reorder, uint64_t seed)
{
    return (struct fault){ .on = true, .drop_ppm = drop, .dup_ppm = dup, .reorder_ppm = reorder, .rng = seed };
}

/* Takes up to max frames a burst until nothing is left to take now; records each frame's number and frees
 * it (as the poll loop would once it is delivered). Returns how many. */
static unsigned drain(struct fault_dev *d, unsigned max, unsigned *seq, uint64_t *addr, unsigned room)
{
    struct netdev_frame f[FAULT_BURST];
    unsigned got = 0, n;
    while ((n = netdev__rx_burst(&d->dev, f, max)) > 0 || netdev__rx_pending(&d->dev)) {
        CHECK(n, <=, max);
        for (unsigned k = 0; k < n; k++) {
            CHECK(f[k].len, ==, FLEN);
            if (got < room) {
                memcpy(&seq[got], pool.umem + f[k].addr, sizeof(unsigned));
                if (addr)
                    addr[got] = f[k].addr;
            }
            got++;
            pkt__free_chain(&pool, pkt__adopt(&pool, f[k].addr, f[k].len));
        }
    }
    return got;
}

TEST(test_drop_all)
{
    pool_init();
    struct script s = script(40, 16);
    struct fault_dev d;
    slip_time_t now = SLIP_SEC;
    struct fault k = knobs(1000000, 0, 0, 1);
    fault_dev__init(&d, &s.dev, &k, &pool, &now);
    CHECK(d.dev.ifindex, ==, 7);
    unsigned seq[64];
    CHECK(drain(&d, 64, seq, NULL, 64), ==, 0);
    CHECK(s.next, ==, 40);              /* all taken from below ... */
    CHECK(d.dropped, ==, 40);           /* ... and dropped, their frames back in the pool */
    CHECK(netdev__deadline(&d.dev), ==, SLIP_TIME_NEVER);
    fault_dev__close(&d);
    pool_fini();
}

TEST(test_dup_all)
{
    pool_init();
    struct script s = script(10, 4);
    struct fault_dev d;
    slip_time_t now = SLIP_SEC;
    struct fault k = knobs(0, 1000000, 0, 1);
    fault_dev__init(&d, &s.dev, &k, &pool, &now);
    unsigned seq[32];
    uint64_t addr[32];
    CHECK(drain(&d, 64, seq, addr, 32), ==, 20);
    for (unsigned i = 0; i < 10; i++) {
        CHECK(seq[2 * i], ==, i);       /* the copy first, then the frame itself */
        CHECK(seq[2 * i + 1], ==, i);
        CHECK(addr[2 * i] != addr[2 * i + 1], ==, 1);
    }
    CHECK(d.duplicated, ==, 10);
    fault_dev__close(&d);
    pool_fini();
}

TEST(test_hold_all_depth_then_time)
{
    pool_init();
    struct script s = script(20, 64);
    struct fault_dev d;
    slip_time_t now = SLIP_SEC;
    struct fault k = knobs(0, 0, 1000000, 1);
    fault_dev__init(&d, &s.dev, &k, &pool, &now);
    unsigned seq[64];
    /* 0..15 are held (the most it holds), 16..18 pass; after the third, 0..15 went out
     * FAULT_DEPTH frames late; 19 is held again. */
    CHECK(drain(&d, 64, seq, NULL, 64), ==, 19);
    unsigned want[] = { 16, 17, 18, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };
    for (unsigned i = 0; i < 19; i++)
        CHECK(seq[i], ==, want[i]);
    CHECK(d.reordered, ==, 17);
    CHECK(netdev__deadline(&d.dev), ==, now + FAULT_HOLD_NS);   /* 19's time */
    now += FAULT_HOLD_NS - 1;
    CHECK(drain(&d, 64, seq, NULL, 64), ==, 0);
    now += 1;
    CHECK(drain(&d, 64, seq, NULL, 64), ==, 1);                /* due: out without a frame from below */
    CHECK(seq[0], ==, 19);
    CHECK(netdev__deadline(&d.dev), ==, SLIP_TIME_NEVER);
    fault_dev__close(&d);
    pool_fini();
}

TEST(test_close_frees_held)
{
    pool_init();
    struct script s = script(5, 64);
    struct fault_dev d;
    slip_time_t now = SLIP_SEC;
    struct fault k = knobs(0, 0, 1000000, 1);
    fault_dev__init(&d, &s.dev, &k, &pool, &now);
    unsigned seq[8];
    CHECK(drain(&d, 64, seq, NULL, 8), ==, 0);
    CHECK(d.nheld, ==, 5);
    CHECK(pool.frames->count, ==, NFRAMES - 5);
    fault_dev__close(&d);
    pool_fini();        /* the held frames are back */
}

/* What fault.h says, written out: decisions from the same seed, outputs in order. */
static unsigned model(struct fault k, unsigned total, unsigned *out)
{
    struct { unsigned seq, passed; } held[FAULT_MAX_HELD];
    unsigned nheld = 0, n = 0;
    for (unsigned i = 0; i < total; i++) {
        switch (fault__decide(&k)) {
        case FAULT_DROP:
            continue;
        case FAULT_DUP:
            out[n++] = i;
            break;
        case FAULT_HOLD:
            if (nheld < FAULT_MAX_HELD) {
                held[nheld].seq = i;
                held[nheld++].passed = 0;
                continue;
            }
            break;
        case FAULT_PASS:
            break;
        }
        out[n++] = i;
        unsigned kept = 0;
        for (unsigned h = 0; h < nheld; h++) {
            if (++held[h].passed >= FAULT_DEPTH)
                out[n++] = held[h].seq;
            else
                held[kept++] = held[h];
        }
        nheld = kept;
    }
    for (unsigned h = 0; h < nheld; h++)
        out[n++] = held[h].seq;     /* at their time */
    return n;
}

TEST(test_mixed_seed_any_burst)
{
    const unsigned total = 600;
    static unsigned want[2 * 600], got[2 * 600];
    struct fault k = knobs(50000, 50000, 100000, 12345);
    unsigned nwant = model(k, total, want);
    unsigned maxes[] = { 1, 3, 64, 256 };
    for (unsigned m = 0; m < SLIP_ARRAY_SIZE(maxes); m++) {
        pool_init();
        struct script s = script(total, 32);
        struct fault_dev d;
        slip_time_t now = SLIP_SEC;
        fault_dev__init(&d, &s.dev, &k, &pool, &now);
        unsigned n = drain(&d, maxes[m], got, NULL, SLIP_ARRAY_SIZE(got));
        now += FAULT_HOLD_NS;
        n += drain(&d, maxes[m], got + n, NULL, SLIP_ARRAY_SIZE(got) - n);
        CHECK(n, ==, nwant);
        for (unsigned i = 0; i < n && i < nwant; i++)
            if (got[i] != want[i]) {
                CHECK(got[i], ==, want[i]);
                fprintf(stderr, "  at %u of %u, burst %u\n", i, n, maxes[m]);
                break;
            }
        CHECK(d.dropped > 0 && d.duplicated > 0 && d.reordered > 0, ==, 1);
        CHECK(n, ==, total - d.dropped + d.duplicated);
        fault_dev__close(&d);
        pool_fini();
    }
}

TEST(test_transmit_goes_below)
{
    pool_init();
    struct script s = script(0, 1);
    struct fault_dev d;
    slip_time_t now = SLIP_SEC;
    struct fault k = knobs(1000000, 0, 0, 1);
    fault_dev__init(&d, &s.dev, &k, &pool, &now);
    struct netdev_frame f[3] = { 0 };
    CHECK(netdev__tx_enqueue(&d.dev, f, 3), ==, 3);
    CHECK(netdev__tx_queued(&d.dev), ==, 3);
    CHECK(netdev__kick(&d.dev), ==, 0);
    CHECK(s.kicks, ==, 1);
    CHECK(s.tx, ==, 3);             /* nothing dropped on the way out */
    s.total = 1;
    CHECK(netdev__rx_pending(&d.dev), ==, 1);
    fault_dev__close(&d);
    pool_fini();
}

TEST_MAIN()
