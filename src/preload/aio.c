/* libaio's calls (io_setup, io_submit, io_getevents, io_cancel, io_destroy, io_queue_init,
 * io_queue_release) on the block engine: a context made here is a ring of the engine (one per
 * context, as libaio contexts are), and iocbs on fds the engine serves go to it; any other iocb
 * (a buffered fd, a socket, IOCB_CMD_POLL, an eventfd to notify) goes to a kernel aio context
 * made beside it on first need, and io_getevents collects both. Written by hand, not in calls.h:
 * libaio may not be loaded at all, so the kernel's side is reached through the raw syscalls
 * (which is all libaio does). libaio returns -errno from each call, not errno. */
#include <errno.h>
#include <linux/aio_abi.h>
#include <linux/io_uring.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/types.h"
#include "block/blk.h"
#include "preload/file.h"
#include "preload/preload.h"

#define EXPORT __attribute__((visibility("default")))
#define AIO_MAGIC 0x61696f62u   /* "aiob" */
#define AIO_MAX_CTX 256

struct aio_ctx {
    uint32_t magic;
    pid_t pid;
    struct blk_ring *ring;
    aio_context_t kctx;         /* the kernel's, for what the ring does not take (0: none yet) */
    unsigned nr;                /* io_setup's nr_events */
    unsigned kinflight;         /* submitted to kctx, not yet reaped */
    pthread_mutex_t lock;
};

/* Every context made here: an aio_context_t not in this list is the kernel's. */
static struct aio_ctx *g_ctx[AIO_MAX_CTX];
static pthread_mutex_t g_ctx_lock = PTHREAD_MUTEX_INITIALIZER;

static long ksys(long nr, long a, long b, long c, long d, long e)
{
    long r = syscall(nr, a, b, c, d, e);
    return r < 0 ? -errno : r;
}

static struct aio_ctx *ctx_find(aio_context_t id)
{
    struct aio_ctx *c = (struct aio_ctx *)(uintptr_t)id;
    if (!c)
        return NULL;
    for (int i = 0; i < AIO_MAX_CTX; i++)
        if (__atomic_load_n(&g_ctx[i], __ATOMIC_ACQUIRE) == c)
            return c;
    return NULL;
}

static int aio_setup(unsigned nr, aio_context_t *out)
{
    if (!out)
        return -EFAULT;
    if (!g_bfd || nr == 0 || nr > 32768)
        return (int)ksys(SYS_io_setup, nr, (long)out, 0, 0, 0);
    struct aio_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    int rc = blk_ring__new(&c->ring, nr);
    if (rc < 0) {
        free(c);
        blk__count_pass(BLK_PASS_NO_RING);
        return (int)ksys(SYS_io_setup, nr, (long)out, 0, 0, 0);
    }
    c->magic = AIO_MAGIC;
    c->pid = blk__pid();
    c->nr = nr;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_lock(&g_ctx_lock);
    int i = 0;
    while (i < AIO_MAX_CTX && g_ctx[i])
        i++;
    if (i == AIO_MAX_CTX) {
        pthread_mutex_unlock(&g_ctx_lock);
        blk_ring__free(c->ring);
        free(c);
        return (int)ksys(SYS_io_setup, nr, (long)out, 0, 0, 0);
    }
    __atomic_store_n(&g_ctx[i], c, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_ctx_lock);
    *out = (aio_context_t)(uintptr_t)c;
    return 0;
}

/* Fills how the ring takes iocb, or false when the kernel must take it. */
static bool iocb_map(const struct iocb *cb, uint8_t *op, int *rwf)
{
    if (cb->aio_flags & (IOCB_FLAG_RESFD | IOCB_FLAG_IOPRIO))
        return false;
    if (cb->aio_rw_flags & ~(RWF_DSYNC | RWF_SYNC | RWF_APPEND))
        return false;
    struct bfd *b = bfd_get((int)cb->aio_fildes);
    if (!b || b->kernel)
        return false;
    if (blk__route(b->dev) == BLK_ROUTE_KERNEL) {
        b->kernel = 1;          /* decided for good (a bio-based device, or the probe's verdict) */
        return false;
    }
    *rwf = cb->aio_rw_flags;
    switch (cb->aio_lio_opcode) {
    case IOCB_CMD_PREAD: *op = IORING_OP_READ; break;
    case IOCB_CMD_PWRITE: *op = IORING_OP_WRITE; break;
    case IOCB_CMD_PREADV: *op = IORING_OP_READV; break;
    case IOCB_CMD_PWRITEV: *op = IORING_OP_WRITEV; break;
    case IOCB_CMD_FSYNC: *op = IORING_OP_FSYNC; *rwf = 0; break;
    case IOCB_CMD_FDSYNC: *op = IORING_OP_FSYNC; *rwf = IORING_FSYNC_DATASYNC; break;
    default: return false;
    }
    /* The kernel's aio refuses a negative offset; io_uring would take -1 as "the file offset". */
    if (*op != IORING_OP_FSYNC && (int64_t)cb->aio_offset < 0)
        return false;
    if ((*op == IORING_OP_READ || *op == IORING_OP_WRITE) && cb->aio_nbytes > 0x7ffff000u)
        return false;
    return true;
}

static int kctx_need(struct aio_ctx *c)
{
    if (c->kctx)
        return 0;
    return (int)ksys(SYS_io_setup, c->nr, (long)&c->kctx, 0, 0, 0);
}

static int aio_submit(aio_context_t id, long nr, struct iocb **cbs)
{
    struct aio_ctx *c = ctx_find(id);
    if (!c)
        return (int)ksys(SYS_io_submit, (long)id, nr, (long)cbs, 0, 0);
    if (c->pid != blk__pid())
        return -EINVAL;         /* a fork child has no use of its parent's contexts (nor in the kernel) */
    if (nr < 0)
        return -EINVAL;
    if (nr == 0)
        return 0;
    if (!cbs)
        return -EFAULT;
    pthread_mutex_lock(&c->lock);
    long done = 0;
    int err = 0;
    for (; done < nr; done++) {
        struct iocb *cb = cbs[done];
        uint8_t op;
        int rwf;
        if (!cb) {
            err = -EFAULT;
            break;
        }
        if (iocb_map(cb, &op, &rwf)) {
            uint32_t len = op == IORING_OP_FSYNC ? 0 : (uint32_t)cb->aio_nbytes;
            err = blk_ring__queue(c->ring, op, (int)cb->aio_fildes, cb->aio_buf, len,
                                  op == IORING_OP_FSYNC ? 0 : (int64_t)cb->aio_offset, rwf,
                                  (uint64_t)(uintptr_t)cb);
            if (err < 0)
                break;
            __atomic_fetch_add(&blk__stats()->aio_submitted, 1, __ATOMIC_RELAXED);
            continue;
        }
        /* The kernel's: what is queued on the ring goes first, so order is kept as submitted. */
        err = blk_ring__submit(c->ring);
        if (err == 0)
            err = kctx_need(c);
        if (err == 0) {
            long k = ksys(SYS_io_submit, (long)c->kctx, 1, (long)&cbs[done], 0, 0);
            err = k == 1 ? 0 : k < 0 ? (int)k : -EAGAIN;
        }
        if (err < 0)
            break;
        c->kinflight++;
        struct bfd *b = bfd_get((int)cb->aio_fildes);
        blk__count_pass(!b ? BLK_PASS_NOT_DIRECT
                        : b->kernel ? BLK_PASS_INLINE : BLK_PASS_UNSUPPORTED);
    }
    int rc = blk_ring__submit(c->ring);
    pthread_mutex_unlock(&c->lock);
    if (rc < 0 && !err)
        err = rc;
    return done ? (int)done : err;
}

static void event_of(struct io_event *ev, const struct blk_cqe *q)
{
    const struct iocb *cb = (const struct iocb *)(uintptr_t)q->user_data;
    ev->data = cb->aio_data;
    ev->obj = q->user_data;
    ev->res = q->res;
    ev->res2 = 0;
}

static int64_t ts_ns(const struct timespec *ts)
{
    return ts ? (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec : -1;
}

static int aio_getevents(aio_context_t id, long min, long nr, struct io_event *ev, struct timespec *ts)
{
    struct aio_ctx *c = ctx_find(id);
    if (!c)
        return (int)ksys(SYS_io_getevents, (long)id, min, nr, (long)ev, (long)ts);
    if (c->pid != blk__pid())
        return -EINVAL;
    if (min < 0 || nr < 0 || min > nr || (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000)))
        return -EINVAL;
    int64_t limit = ts_ns(ts);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long got = 0;
    struct blk_cqe q[64];
    pthread_mutex_lock(&c->lock);
    for (;;) {
        /* What is there, from both sides, without waiting. */
        while (got < nr) {
            int m = blk_ring__reap(c->ring, q, 0, (int)SLIP_MIN(nr - got, 64), 0);
            if (m <= 0)
                break;
            for (int i = 0; i < m; i++)
                event_of(&ev[got++], &q[i]);
            __atomic_fetch_add(&blk__stats()->aio_completed, (uint64_t)m, __ATOMIC_RELAXED);
        }
        if (c->kinflight && got < nr) {
            struct timespec zero = { 0, 0 };
            long k = ksys(SYS_io_getevents, (long)c->kctx, 0, nr - got, (long)&ev[got], (long)&zero);
            if (k > 0) {
                got += k;
                c->kinflight -= (unsigned)k;
            }
        }
        if (got >= min || got >= nr)
            break;
        struct timespec t1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        int64_t spent = (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
        int64_t left = limit < 0 ? -1 : limit - spent;
        if (limit >= 0 && left <= 0)
            break;
        long want = min - got;
        if (!c->kinflight || !blk_ring__inflight(c->ring)) {
            if (c->kinflight) {
                /* Only the kernel's side can complete: sleep in it. */
                struct timespec lt = { left < 0 ? 0 : left / 1000000000, left < 0 ? 0 : left % 1000000000 };
                long k = ksys(SYS_io_getevents, (long)c->kctx, want, nr - got, (long)&ev[got], left < 0 ? 0 : (long)&lt);
                if (k < 0) {
                    pthread_mutex_unlock(&c->lock);
                    return got ? (int)got : (int)k;
                }
                got += k;
                c->kinflight -= (unsigned)k;
                continue;
            }
            int m = blk_ring__reap(c->ring, q, (int)want, (int)SLIP_MIN(nr - got, 64), left);
            if (m < 0) {
                pthread_mutex_unlock(&c->lock);
                return got ? (int)got : m;
            }
            for (int i = 0; i < m; i++)
                event_of(&ev[got++], &q[i]);
            __atomic_fetch_add(&blk__stats()->aio_completed, (uint64_t)m, __ATOMIC_RELAXED);
            continue;
        }
        /* Both sides have work in flight: look at each in turn, sleeping a little on the ring. */
        int m = blk_ring__reap(c->ring, q, 1, (int)SLIP_MIN(nr - got, 64), left < 0 || left > 1000000 ? 1000000 : left);
        if (m == -EINTR) {
            pthread_mutex_unlock(&c->lock);
            return got ? (int)got : m;
        }
        for (int i = 0; i < m; i++)
            event_of(&ev[got++], &q[i]);
        if (m > 0)
            __atomic_fetch_add(&blk__stats()->aio_completed, (uint64_t)m, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&c->lock);
    return (int)got;
}

static int aio_destroy(aio_context_t id)
{
    struct aio_ctx *c = ctx_find(id);
    if (!c)
        return (int)ksys(SYS_io_destroy, (long)id, 0, 0, 0, 0);
    pthread_mutex_lock(&g_ctx_lock);
    for (int i = 0; i < AIO_MAX_CTX; i++)
        if (g_ctx[i] == c)
            __atomic_store_n(&g_ctx[i], NULL, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_ctx_lock);
    if (c->pid == blk__pid()) {
        /* As the kernel's io_destroy: what was submitted completes before it returns. */
        struct blk_cqe q[64];
        while (blk_ring__inflight(c->ring) && blk_ring__reap(c->ring, q, 1, 64, 1000000000) >= 0)
            ;
        if (c->kctx)
            ksys(SYS_io_destroy, (long)c->kctx, 0, 0, 0, 0);
    }
    blk_ring__free(c->ring);
    free(c);
    return 0;
}

static int aio_cancel(aio_context_t id, struct iocb *cb, struct io_event *ev)
{
    struct aio_ctx *c = ctx_find(id);
    if (!c)
        return (int)ksys(SYS_io_cancel, (long)id, (long)cb, (long)ev, 0, 0);
    /* Reads and writes of files and block devices cannot be cancelled in the kernel either
     * (no ki_cancel): it answers EINVAL; the kernel's side answers for its own. */
    if (c->kctx && cb && !bfd_get((int)cb->aio_fildes))
        return (int)ksys(SYS_io_cancel, (long)c->kctx, (long)cb, (long)ev, 0, 0);
    return -EINVAL;
}

/* The exports: libaio's names and argument types (io_context_t is a pointer-sized handle). */
int io_setup(int nr, aio_context_t *ctx);
int io_queue_init(int nr, aio_context_t *ctx);
int io_destroy(aio_context_t ctx);
int io_queue_release(aio_context_t ctx);
int io_submit(aio_context_t ctx, long nr, struct iocb **cbs);
int io_getevents(aio_context_t ctx, long min, long nr, struct io_event *ev, struct timespec *ts);
int io_cancel(aio_context_t ctx, struct iocb *cb, struct io_event *ev);

#define AIO_ENTER()                                 \
    if (__builtin_expect(!g_pre.ready, 0))          \
        preload_init();                             \
    preload_depth++
#define AIO_LEAVE(r) do { preload_depth--; return r; } while (0)

EXPORT int io_setup(int nr, aio_context_t *ctx)
{
    AIO_ENTER();
    int r = aio_setup((unsigned)nr, ctx);
    AIO_LEAVE(r);
}

EXPORT int io_queue_init(int nr, aio_context_t *ctx)
{
    return io_setup(nr, ctx);
}

EXPORT int io_destroy(aio_context_t ctx)
{
    AIO_ENTER();
    int r = aio_destroy(ctx);
    AIO_LEAVE(r);
}

EXPORT int io_queue_release(aio_context_t ctx)
{
    return io_destroy(ctx);
}

EXPORT int io_submit(aio_context_t ctx, long nr, struct iocb **cbs)
{
    AIO_ENTER();
    int r = aio_submit(ctx, nr, cbs);
    AIO_LEAVE(r);
}

EXPORT int io_getevents(aio_context_t ctx, long min, long nr, struct io_event *ev, struct timespec *ts)
{
    AIO_ENTER();
    int r = aio_getevents(ctx, min, nr, ev, ts);
    AIO_LEAVE(r);
}

EXPORT int io_cancel(aio_context_t ctx, struct iocb *cb, struct io_event *ev)
{
    AIO_ENTER();
    int r = aio_cancel(ctx, cb, ev);
    AIO_LEAVE(r);
}

bool aio_ctx_ours(unsigned long id)
{
    return g_bfd && ctx_find((aio_context_t)id) != NULL;
}

long aio_syscall(long nr, const long *a)
{
    switch (nr) {
    case SYS_io_submit: return aio_submit((aio_context_t)a[0], a[1], (struct iocb **)a[2]);
    case SYS_io_getevents: return aio_getevents((aio_context_t)a[0], a[1], a[2], (struct io_event *)a[3],
                                                (struct timespec *)a[4]);
    case SYS_io_destroy: return aio_destroy((aio_context_t)a[0]);
    case SYS_io_cancel: return aio_cancel((aio_context_t)a[0], (struct iocb *)a[1], (struct io_event *)a[2]);
    default: return -ENOSYS;
    }
}
