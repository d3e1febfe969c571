/* io_uring rings of the block engine, through the raw syscalls: setup and mapping, queueing,
 * submission (none when the SQPOLL thread is awake), completion reaped in user space (spin for
 * SLIP_BLOCK_SPIN_USEC, then sleep in io_uring_enter), and the synchronous call blk__rw on a ring
 * per thread. Every SQPOLL ring of a process attaches to the first one's thread (ATTACH_WQ), so
 * a process has one polling kernel thread, not one per thread. A thread's ring registers the
 * files it serves (a sparse table indexed by fd number, filled on first use, emptied on close) and
 * may hold a registered bounce buffer (SLIP_BLOCK_BOUNCE): the kernel then neither looks the file
 * up nor pins the caller's pages for each request. */
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "block/blk.h"

struct blk_ring {
    int fd;
    pid_t pid;                  /* the process that made it: a fork child never touches it */
    bool sqpoll;
    unsigned *sq_head, *sq_tail, *sq_mask, *sq_flags, *sq_array, sq_entries;
    unsigned *cq_head, *cq_tail, *cq_mask;
    struct io_uring_cqe *cqes;
    struct io_uring_sqe *sqes;
    void *sq_map, *cq_map;
    size_t sq_len, cq_len, sqes_len;
    unsigned queued;            /* SQEs filled, not yet published */
    unsigned inflight;          /* published, not yet reaped */
    bool sync;                  /* a thread's ring for blocking calls (that thread waits itself) */
    bool iopoll;                /* IORING_SETUP_IOPOLL: completions are polled for by io_uring_enter */
    unsigned nfiles;            /* registered-file table size (slot = fd number); 0: none */
    uint32_t *fgen;             /* per slot: the blk_file gen registered there, 0 when empty */
    void *bounce;               /* registered buffer 0 (BLK_BOUNCE_LEN bytes), or NULL */
    struct blk_ring *next;      /* every ring of the process (exit waits on them) */
};

#define BLK_FIXED_FILES 1024            /* fds below this number can be registered files */
#define BLK_BOUNCE_LEN (128u << 10)     /* the bounce buffer of a thread's ring */

static struct blk_config g_cfg = { .sqpoll = false, .sq_idle_ms = 2, .sq_cpu = -1, .spin_usec = 0, .probe = true,
                                   .fixed_files = true, .bounce = false, .iopoll = 1 };
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct blk_ring *g_rings;
static int g_group_fd = -1;     /* the SQPOLL ring others attach to */
static bool g_no_uring;         /* io_uring_setup failed for good: everything passes through */
static __thread struct blk_ring *t_ring, *t_pring;     /* a thread's ring, its polled ring */
static uint64_t g_fd_mask;      /* bit fd % 64 set for every ring fd: close() looks only then */
static uint64_t g_reg_mask;     /* bit fd % 64 set for every fd some ring registered */
static pthread_key_t g_key, g_pkey;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

void blk__configure(const struct blk_config *cfg)
{
    g_cfg = *cfg;
}

const struct blk_config *blk__config(void)
{
    return &g_cfg;
}

/* getpid() is a syscall (glibc caches nothing since 2.25): asked on every request it cost a
 * syscall per I/O, which on an inline device is a tenth of the I/O. The pid is kept in a page of
 * its own marked MADV_WIPEONFORK: the kernel hands every fork child that page zeroed, however the
 * child was made (fork, _Fork, a raw clone without atfork handlers), so a child always asks
 * again and never takes its parent's rings for its own. Without that page (a kernel before 4.14),
 * every call asks the kernel. */
static pid_t *g_pidp;           /* the wipe-on-fork page, once made */
static bool g_pid_nowipe;       /* no such page here: getpid() every time */

pid_t blk__pid(void)
{
    pid_t *pp = __atomic_load_n(&g_pidp, __ATOMIC_ACQUIRE);
    if (__builtin_expect(pp != NULL, 1)) {
        pid_t p = __atomic_load_n(pp, __ATOMIC_RELAXED);
        if (__builtin_expect(p != 0, 1))
            return p;
        p = getpid();
        __atomic_store_n(pp, p, __ATOMIC_RELAXED);
        return p;
    }
    if (__atomic_load_n(&g_pid_nowipe, __ATOMIC_RELAXED))
        return getpid();
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return getpid();
    if (madvise(m, 4096, MADV_WIPEONFORK) != 0) {
        munmap(m, 4096);
        __atomic_store_n(&g_pid_nowipe, true, __ATOMIC_RELAXED);
        return getpid();
    }
    pid_t *expect = NULL;
    if (!__atomic_compare_exchange_n(&g_pidp, &expect, (pid_t *)m, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        munmap(m, 4096);        /* another thread made it first */
    return blk__pid();
}

static int uring_register(int fd, unsigned op, void *arg, unsigned n)
{
    long r = syscall(SYS_io_uring_register, fd, op, arg, n);
    return r < 0 ? -errno : (int)r;
}
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int uring_enter(int fd, unsigned submit, unsigned min, unsigned flags)
{
    long r = syscall(SYS_io_uring_enter, fd, submit, min, flags, NULL, 0);
    return r < 0 ? -errno : (int)r;
}

static void ring_unmap(struct blk_ring *r)
{
    if (r->sqes)
        munmap(r->sqes, r->sqes_len);
    if (r->cq_map && r->cq_map != r->sq_map)
        munmap(r->cq_map, r->cq_len);
    if (r->sq_map)
        munmap(r->sq_map, r->sq_len);
}

/* Makes a ring of at least n entries: SQPOLL when configured and allowed (attached to the
 * process's first SQPOLL ring), else an ordinary one. */
static int ring_setup(struct blk_ring *r, unsigned n, bool iopoll)
{
    struct io_uring_params p;
    int fd = -1;
    memset(r, 0, sizeof(*r));
    r->fd = -1;
    for (int attempt = 0; attempt < 3 && fd < 0; attempt++) {
        memset(&p, 0, sizeof(p));
        bool sq = g_cfg.sqpoll && attempt < 2 && !iopoll;
        if (iopoll)
            p.flags |= IORING_SETUP_IOPOLL;
        if (sq) {
            p.flags |= IORING_SETUP_SQPOLL;
            p.sq_thread_idle = (unsigned)g_cfg.sq_idle_ms;
            if (g_cfg.sq_cpu >= 0) {
                p.flags |= IORING_SETUP_SQ_AFF;
                p.sq_thread_cpu = (unsigned)g_cfg.sq_cpu;
            }
            if (attempt == 0 && g_group_fd >= 0) {
                p.flags |= IORING_SETUP_ATTACH_WQ;
                p.wq_fd = (unsigned)g_group_fd;
            } else if (attempt == 0) {
                continue;       /* no group yet: the second attempt makes it */
            }
        }
        long rc = syscall(SYS_io_uring_setup, n, &p);
        if (rc >= 0) {
            fd = (int)rc;
            r->sqpoll = sq;
            r->iopoll = iopoll;
        } else if (errno == ENOSYS) {
            return -ENOSYS;
        }
    }
    if (fd < 0)
        return -errno;
    if (!(p.features & IORING_FEAT_RW_CUR_POS)) {
        close(fd);
        return -EOPNOTSUPP;     /* offset -1 would not mean "the file offset" */
    }
    r->fd = fd;
    r->sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    r->cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    bool single = p.features & IORING_FEAT_SINGLE_MMAP;
    if (single && r->cq_len > r->sq_len)
        r->sq_len = r->cq_len;
    r->sq_map = mmap(NULL, r->sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQ_RING);
    if (r->sq_map == MAP_FAILED) {
        r->sq_map = NULL;
        goto fail;
    }
    if (single) {
        r->cq_map = r->sq_map;
    } else {
        r->cq_map = mmap(NULL, r->cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_CQ_RING);
        if (r->cq_map == MAP_FAILED) {
            r->cq_map = NULL;
            goto fail;
        }
    }
    r->sqes_len = p.sq_entries * sizeof(struct io_uring_sqe);
    r->sqes = mmap(NULL, r->sqes_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQES);
    if (r->sqes == MAP_FAILED) {
        r->sqes = NULL;
        goto fail;
    }
    char *sq = r->sq_map, *cq = r->cq_map;
    r->sq_head = (unsigned *)(sq + p.sq_off.head);
    r->sq_tail = (unsigned *)(sq + p.sq_off.tail);
    r->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    r->sq_flags = (unsigned *)(sq + p.sq_off.flags);
    r->sq_array = (unsigned *)(sq + p.sq_off.array);
    r->sq_entries = p.sq_entries;
    r->cq_head = (unsigned *)(cq + p.cq_off.head);
    r->cq_tail = (unsigned *)(cq + p.cq_off.tail);
    r->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
    r->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    /* The SQ array maps slot i to SQE i once and for all. */
    for (unsigned i = 0; i < r->sq_entries; i++)
        r->sq_array[i] = i;
    r->pid = blk__pid();
    return 0;
fail:;
    int e = -errno;
    ring_unmap(r);
    close(fd);
    r->fd = -1;
    return e;
}

static void list_add(struct blk_ring *r)
{
    pthread_mutex_lock(&g_lock);
    if (r->sqpoll && g_group_fd < 0)
        g_group_fd = r->fd;
    r->next = g_rings;
    g_rings = r;
    __atomic_fetch_or(&g_fd_mask, 1ull << (r->fd & 63), __ATOMIC_RELAXED);
    blk__stats()->sqpoll = r->sqpoll;
    pthread_mutex_unlock(&g_lock);
    __atomic_fetch_add(&blk__stats()->rings, 1, __ATOMIC_RELAXED);
}

static void list_del(struct blk_ring *r)
{
    pthread_mutex_lock(&g_lock);
    for (struct blk_ring **pp = &g_rings; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    pthread_mutex_unlock(&g_lock);
}

static int ring_new(struct blk_ring **out, unsigned n, bool iopoll)
{
    struct blk_ring *r = malloc(sizeof(*r));
    if (!r)
        return -ENOMEM;
    int rc = ring_setup(r, n, iopoll);
    if (rc < 0) {
        free(r);
        return rc;
    }
    list_add(r);
    *out = r;
    return 0;
}

int blk_ring__new(struct blk_ring **out, unsigned n)
{
    return ring_new(out, n, false);
}

/* A thread's ring: the sparse registered-file table and the bounce buffer, each only when
 * configured and allowed (a kernel or limit that refuses leaves the ring without it). */
static void ring_register_extras(struct blk_ring *r)
{
    if (g_cfg.fixed_files) {
        /* The kernel refuses a table larger than RLIMIT_NOFILE (EMFILE). */
        struct rlimit rl;
        unsigned nf = BLK_FIXED_FILES;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < nf)
            nf = (unsigned)rl.rlim_cur;
        struct io_uring_rsrc_register rr = { .nr = nf, .flags = IORING_RSRC_REGISTER_SPARSE };
        r->fgen = nf ? calloc(nf, sizeof(*r->fgen)) : NULL;
        if (r->fgen && uring_register(r->fd, IORING_REGISTER_FILES2, &rr, sizeof(rr)) == 0) {
            r->nfiles = nf;
        } else {
            free(r->fgen);
            r->fgen = NULL;
        }
    }
    if (g_cfg.bounce) {
        void *b = mmap(NULL, BLK_BOUNCE_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        struct iovec v = { b, BLK_BOUNCE_LEN };
        if (b != MAP_FAILED && uring_register(r->fd, IORING_REGISTER_BUFFERS, &v, 1) == 0)
            r->bounce = b;
        else if (b != MAP_FAILED)
            munmap(b, BLK_BOUNCE_LEN);
    }
}

void blk_ring__free(struct blk_ring *r)
{
    if (!r)
        return;
    list_del(r);
    if (r->pid == blk__pid()) {
        /* The group's ring stays: others are attached to its thread and new rings attach to it. */
        if (r->fd == g_group_fd)
            return;
        ring_unmap(r);
        close(r->fd);
        if (r->bounce)
            munmap(r->bounce, BLK_BOUNCE_LEN);
    }
    free(r->fgen);
    free(r);
}

unsigned blk_ring__inflight(const struct blk_ring *r)
{
    return r->inflight + r->queued;
}

int blk_ring__queue(struct blk_ring *r, uint8_t opcode, int fd, uint64_t addr, uint32_t len,
                    int64_t off, int rw_flags, uint64_t user_data)
{
    unsigned head = __atomic_load_n(r->sq_head, __ATOMIC_ACQUIRE);
    unsigned tail = *r->sq_tail + r->queued;
    if (tail - head >= r->sq_entries || r->inflight + r->queued >= r->sq_entries)
        return -EAGAIN;         /* the CQ (as large as the SQ) must never overflow either */
    struct io_uring_sqe *e = &r->sqes[tail & *r->sq_mask];
    memset(e, 0, sizeof(*e));
    e->opcode = opcode;
    e->fd = fd;
    e->off = (uint64_t)off;
    e->addr = addr;
    e->len = len;
    e->rw_flags = rw_flags;
    e->user_data = user_data;
    r->queued++;
    return 0;
}

int blk_ring__submit(struct blk_ring *r)
{
    unsigned n = r->queued;
    if (!n)
        return 0;
    __atomic_store_n(r->sq_tail, *r->sq_tail + n, __ATOMIC_RELEASE);
    r->queued = 0;
    r->inflight += n;
    __atomic_fetch_add(&blk__stats()->submitted, n, __ATOMIC_RELAXED);
    if (r->sqpoll) {
        /* The tail store must be visible before we look at the flag: otherwise the thread could
         * go to sleep after missing our entries while we miss its NEED_WAKEUP. */
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        if (__atomic_load_n(r->sq_flags, __ATOMIC_RELAXED) & IORING_SQ_NEED_WAKEUP) {
            __atomic_fetch_add(&blk__stats()->sq_wakeups, 1, __ATOMIC_RELAXED);
            int rc;
            do
                rc = uring_enter(r->fd, 0, 0, IORING_ENTER_SQ_WAKEUP);
            while (rc == -EINTR);
        }
        return 0;
    }
    unsigned done = 0;
    while (done < n) {
        int rc = uring_enter(r->fd, n - done, 0, 0);
        if (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY)
            continue;
        if (rc < 0)
            return rc;          /* the entries stay in the SQ; reap finds nothing for them */
        done += (unsigned)rc;
    }
    return 0;
}

static unsigned cq_ready(struct blk_ring *r)
{
    return __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE) - *r->cq_head;
}

static int cq_take(struct blk_ring *r, struct blk_cqe *out, int max)
{
    unsigned head = *r->cq_head, tail = __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE);
    int n = 0;
    for (; head != tail && n < max; head++, n++) {
        struct io_uring_cqe *c = &r->cqes[head & *r->cq_mask];
        out[n].user_data = c->user_data;
        out[n].res = c->res;
    }
    __atomic_store_n(r->cq_head, head, __ATOMIC_RELEASE);
    r->inflight -= (unsigned)n;
    __atomic_fetch_add(&blk__stats()->completed, (uint64_t)n, __ATOMIC_RELAXED);
    return n;
}

int blk_ring__reap(struct blk_ring *r, struct blk_cqe *out, int min, int max, int64_t timeout_ns)
{
    int got = cq_take(r, out, max);
    if (got >= min || got >= max)
        return got;
    uint64_t start = mono_ns();
    uint64_t spin_ns = (uint64_t)g_cfg.spin_usec * 1000u;
    if (timeout_ns >= 0 && (uint64_t)timeout_ns < spin_ns)
        spin_ns = (uint64_t)timeout_ns;
    for (unsigned i = 1;; i++) {
        if (cq_ready(r)) {
            got += cq_take(r, out + got, max - got);
            if (got >= min) {
                __atomic_fetch_add(&blk__stats()->polled, 1, __ATOMIC_RELAXED);
                return got;
            }
        }
        if (!(i & 31) && mono_ns() - start >= spin_ns)
            break;
        cpu_relax();
    }
    /* Sleep in the kernel. With a limit, io_uring_enter's EXT_ARG timeout bounds each sleep. */
    __atomic_fetch_add(&blk__stats()->slept, 1, __ATOMIC_RELAXED);
    for (;;) {
        got += cq_take(r, out + got, max - got);
        if (got >= min)
            return got;
        int rc;
        unsigned want = (unsigned)(min - got);
        if (timeout_ns < 0) {
            rc = uring_enter(r->fd, 0, want, IORING_ENTER_GETEVENTS);
        } else {
            int64_t left = timeout_ns - (int64_t)(mono_ns() - start);
            if (left <= 0)
                return got;
            struct __kernel_timespec ts = { .tv_sec = left / 1000000000, .tv_nsec = left % 1000000000 };
            struct io_uring_getevents_arg arg = { .ts = (uint64_t)(uintptr_t)&ts };
            long x = syscall(SYS_io_uring_enter, r->fd, 0, want, IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG,
                             &arg, sizeof(arg));
            rc = x < 0 ? -errno : 0;
            if (rc == -ETIME)
                rc = 0;
        }
        if (rc == -EINTR)
            return got ? got : -EINTR;
        if ((rc == -EBADF || rc == -EOPNOTSUPP) && r->inflight) {
            /* The program closed the ring's fd beyond rescue (close_range of everything): what is
             * in flight still completes into the mapped CQ; look every 20 us. */
            struct timespec nap = { 0, 20000 };
            nanosleep(&nap, NULL);
            if (timeout_ns >= 0 && (int64_t)(mono_ns() - start) >= timeout_ns)
                return got;
            continue;
        }
        if (rc < 0 && rc != -EAGAIN && rc != -EBUSY)
            return got ? got : rc;
    }
}

static void thread_ring_free(void *p)
{
    blk_ring__free(p);
}

static void key_make(void)
{
    pthread_key_create(&g_key, thread_ring_free);
    pthread_key_create(&g_pkey, thread_ring_free);
}

/* This thread's ring (or its polled ring), made on first use (and again in a fork child: the
 * parent's is not ours). */
static struct blk_ring *thread_ring(bool iopoll)
{
    struct blk_ring *r = iopoll ? t_pring : t_ring;
    if (__builtin_expect(r && r->pid == blk__pid(), 1))
        return r;
    if (g_no_uring)
        return NULL;
    pthread_once(&g_key_once, key_make);
    int rc = ring_new(&r, 8, iopoll);
    if (rc < 0 && iopoll)
        return NULL;            /* the caller uses the ordinary ring */
    if (rc < 0) {
        if (rc == -ENOSYS || rc == -EPERM || rc == -EOPNOTSUPP) {
            g_no_uring = true;
            slip_warn("block path off: io_uring unavailable (%s); file I/O goes to the kernel", strerror(-rc));
        }
        return NULL;
    }
    r->sync = true;
    ring_register_extras(r);
    if (iopoll) {
        t_pring = r;
        pthread_setspecific(g_pkey, r);
    } else {
        t_ring = r;
        pthread_setspecific(g_key, r);
    }
    return r;
}

/* fd's slot in r's registered-file table, filled on first use (one io_uring_register per
 * thread and fd): true when the request may name the slot instead of the fd. */
static bool file_slot(struct blk_ring *r, const struct blk_file *f)
{
    if (!f->gen || f->fd < 0 || (unsigned)f->fd >= r->nfiles)
        return false;
    if (__atomic_load_n(&r->fgen[f->fd], __ATOMIC_ACQUIRE) == f->gen)
        return true;
    int fd = f->fd;
    struct io_uring_files_update u = { .offset = (unsigned)fd, .fds = (uint64_t)(uintptr_t)&fd };
    /* Marked before the update, so a close racing with it (another thread) clears it after. */
    __atomic_fetch_or(&g_reg_mask, 1ull << (fd & 63), __ATOMIC_SEQ_CST);
    if (uring_register(r->fd, IORING_REGISTER_FILES_UPDATE, &u, 1) != 1)
        return false;           /* a bad fd: the plain request gives the kernel's errno */
    __atomic_store_n(&r->fgen[fd], f->gen, __ATOMIC_RELEASE);
    return true;
}

void blk__file_forget(int fd)
{
    if (fd < 0 || !(__atomic_load_n(&g_reg_mask, __ATOMIC_SEQ_CST) & (1ull << (fd & 63))))
        return;
    pthread_mutex_lock(&g_lock);
    for (struct blk_ring *r = g_rings; r; r = r->next) {
        if (r->pid != blk__pid() || (unsigned)fd >= r->nfiles || !__atomic_load_n(&r->fgen[fd], __ATOMIC_ACQUIRE))
            continue;
        int none = -1;
        struct io_uring_files_update u = { .offset = (unsigned)fd, .fds = (uint64_t)(uintptr_t)&none };
        uring_register(r->fd, IORING_REGISTER_FILES_UPDATE, &u, 1);
        __atomic_store_n(&r->fgen[fd], 0, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_lock);
}

ssize_t blk__rw(int fd, enum blk_op op, const struct iovec *iov, int n, int64_t off, int rw_flags)
{
    struct blk_file f = { .fd = fd };
    return blk__rw_file(&f, op, iov, n, off, rw_flags);
}

ssize_t blk__rw_file(const struct blk_file *f, enum blk_op op, const struct iovec *iov, int n, int64_t off,
                     int rw_flags)
{
    struct blk_ring *r = f->iopoll ? thread_ring(true) : NULL;
    if (!r && f->iopoll)
        return -EOPNOTSUPP;     /* no polled ring here: the caller marks the device and retries */
    if (!r)
        r = thread_ring(false);
    if (!r)
        return -ENOSYS;
    uint8_t opcode;
    uint64_t addr;
    uint32_t len;
    void *bounce_to = NULL;     /* a read through the bounce buffer: where its bytes go */
    if (n == 1 && iov[0].iov_len <= 0x7ffff000u) {
        /* One buffer: READ/WRITE, no iovec for the kernel to copy in. */
        opcode = op == BLK_OP_READ ? IORING_OP_READ : IORING_OP_WRITE;
        addr = (uint64_t)(uintptr_t)iov[0].iov_base;
        len = (uint32_t)iov[0].iov_len;
        /* The bounce buffer only where the kernel would take the caller's buffer as it is (aligned
         * as the device demands): a misaligned one must still get the kernel's EINVAL. */
        if (r->bounce && len && len <= BLK_BOUNCE_LEN && f->mem_align && !(addr % f->mem_align)) {
            if (op == BLK_OP_WRITE) {
                memcpy(r->bounce, iov[0].iov_base, len);
            } else {
                bounce_to = iov[0].iov_base;
            }
            opcode = op == BLK_OP_READ ? IORING_OP_READ_FIXED : IORING_OP_WRITE_FIXED;
            addr = (uint64_t)(uintptr_t)r->bounce;
        }
    } else {
        opcode = op == BLK_OP_READ ? IORING_OP_READV : IORING_OP_WRITEV;
        addr = (uint64_t)(uintptr_t)iov;
        len = (uint32_t)n;
    }
    bool fixed = file_slot(r, f);
    int rc = blk_ring__queue(r, opcode, f->fd, addr, len, off, rw_flags, 1);
    if (rc < 0)
        return rc;
    struct io_uring_sqe *e = &r->sqes[(*r->sq_tail + r->queued - 1) & *r->sq_mask];
    if (fixed) {
        e->flags |= IOSQE_FIXED_FILE;
        __atomic_fetch_add(&blk__stats()->fixed_file_ops, 1, __ATOMIC_RELAXED);
    }
    if (addr == (uint64_t)(uintptr_t)r->bounce && r->bounce) {
        e->buf_index = 0;
        __atomic_fetch_add(&blk__stats()->bounced_ops, 1, __ATOMIC_RELAXED);
    }
    ssize_t res;
    if ((!r->sqpoll && g_cfg.spin_usec == 0) || r->iopoll) {
        /* Nothing to poll: submit and wait in one io_uring_enter, no more syscalls than the
         * kernel's own pread. A polled ring always: there io_uring_enter is what polls the
         * device's queue, a completion never shows in the CQ on its own. */
        __atomic_store_n(r->sq_tail, *r->sq_tail + 1, __ATOMIC_RELEASE);
        r->queued = 0;
        r->inflight++;
        __atomic_fetch_add(&blk__stats()->submitted, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&blk__stats()->slept, 1, __ATOMIC_RELAXED);
        do
            rc = uring_enter(r->fd, 1, 1, IORING_ENTER_GETEVENTS);
        while (rc == -EINTR && !cq_ready(r));
        if (rc < 0 && !cq_ready(r) && __atomic_load_n(r->sq_head, __ATOMIC_ACQUIRE) != *r->sq_tail) {
            /* Not submitted (the ring's fd is gone, or the kernel refused): take the entry back
             * and let the caller use the kernel's call; this thread makes a new ring next time. */
            __atomic_store_n(r->sq_tail, *r->sq_tail - 1, __ATOMIC_RELEASE);
            r->inflight--;
            if (r->iopoll)
                t_pring = NULL;
            else
                t_ring = NULL;
            return -ENOSYS;
        }
        struct blk_cqe c;
        do
            rc = blk_ring__reap(r, &c, 1, 1, -1);
        while (rc == -EINTR || rc == 0);
        res = rc < 0 ? rc : c.res;
    } else {
        rc = blk_ring__submit(r);
        if (rc < 0)
            return rc;
        struct blk_cqe c;
        /* The buffer is the kernel's until the completion: a signal must not end this wait. */
        do
            rc = blk_ring__reap(r, &c, 1, 1, -1);
        while (rc == -EINTR || rc == 0);
        res = rc < 0 ? rc : c.res;
    }
    if (bounce_to && res > 0)
        memcpy(bounce_to, r->bounce, (size_t)res);
    if (r->iopoll && res != -EOPNOTSUPP)
        __atomic_fetch_add(&blk__stats()->iopoll_ops, 1, __ATOMIC_RELAXED);
    return res;
}

void blk__fd_closing(int fd)
{
    if (fd < 0 || !(__atomic_load_n(&g_fd_mask, __ATOMIC_RELAXED) & (1ull << (fd & 63))))
        return;
    pthread_mutex_lock(&g_lock);
    for (struct blk_ring *r = g_rings; r; r = r->next) {
        if (r->fd != fd || r->pid != blk__pid())
            continue;
        int nfd = fcntl(fd, F_DUPFD_CLOEXEC, fd + 1);
        if (nfd < 0)
            break;              /* no fd left: the ring's syscalls fail and callers fall back */
        if (g_group_fd == fd)
            g_group_fd = nfd;
        __atomic_store_n(&r->fd, nfd, __ATOMIC_RELEASE);
        __atomic_fetch_or(&g_fd_mask, 1ull << (nfd & 63), __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&g_lock);
}

void blk__atfork_child(void)
{
    /* The parent's rings stay mapped and open in the child until it closes them (exec closes
     * them: io_uring fds are close-on-exec); nothing is ever submitted to them from here. */
    g_rings = NULL;
    g_group_fd = -1;
    t_ring = NULL;
    t_pring = NULL;
    pthread_mutex_init(&g_lock, NULL);
}

void blk__at_exit(void)
{
    /* Writes a libaio program submitted and never waited for still complete before exit, as
     * the kernel's own aio does at io_destroy. Only this process's rings. */
    pthread_mutex_lock(&g_lock);
    for (struct blk_ring *r = g_rings; r; r = r->next) {
        if (r->pid != blk__pid() || r->sync)
            continue;
        while (r->inflight) {
            struct blk_cqe c[16];
            if (blk_ring__reap(r, c, 1, 16, 1000000000) <= 0)
                break;
        }
    }
    pthread_mutex_unlock(&g_lock);
}
