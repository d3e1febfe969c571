/* The block engine's counters (a small file in /dev/shm per process, which `slipstream stat`
 * reads) and the per-device step-aside probe: the first BLK_PROBE_OPS operations on a device
 * alternate between the kernel's own call and the engine, timed; when the engine is not clearly
 * faster (a device that completes inline, such as zram, where the submission thread's hand-off
 * only adds latency) the device's I/O goes to the kernel from then on. A device known to be
 * bio-based (its disk has no blk-mq queue in sysfs: zram, brd, pmem) is given to the kernel
 * before any probe: such a driver does the work in the submitting thread (zram compresses and
 * copies right there), so the kernel's pread is already done when it returns, while io_uring,
 * which submits without blocking, has to hand each request to a worker thread (no NOWAIT
 * support) and comes back tens of microseconds later: the probe would only lose 64 such calls,
 * and libaio, which never probes, would lose them all. */
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "base/log.h"
#include "block/blk.h"

#define BLK_PROBE_OPS 64        /* per route: 64 kernel calls and 64 engine calls */
#define BLK_PROBE_DEVS 64

static struct blk_stats g_static_stats = { .magic = BLK_STATS_MAGIC, .version = 1 };
static struct blk_stats *g_stats;
static pid_t g_stats_pid;
static char g_stats_path[64];
static pthread_mutex_t g_stats_lock = PTHREAD_MUTEX_INITIALIZER;

struct probe_dev {
    uint64_t dev;
    int route;                  /* enum blk_route once decided; probing before */
    unsigned nk, ne;            /* samples taken per route */
    uint32_t k[BLK_PROBE_OPS], e[BLK_PROBE_OPS];    /* ns, capped */
    bool used;
    int8_t poll;                /* the queue polls (sysfs io_poll): -1 not looked yet, 0, 1 */
    bool poll_refused;          /* a file on it answered EOPNOTSUPP on a polled ring */
};
static struct probe_dev g_devs[BLK_PROBE_DEVS];
static pthread_mutex_t g_probe_lock = PTHREAD_MUTEX_INITIALIZER;

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

struct blk_stats *blk__stats(void)
{
    struct blk_stats *s = __atomic_load_n(&g_stats, __ATOMIC_ACQUIRE);
    pid_t pid = blk__pid();
    if (__builtin_expect(s && g_stats_pid == pid, 1))
        return s;
    pthread_mutex_lock(&g_stats_lock);
    if (g_stats && g_stats_pid == pid) {
        pthread_mutex_unlock(&g_stats_lock);
        return g_stats;
    }
    s = &g_static_stats;
    snprintf(g_stats_path, sizeof(g_stats_path), "/dev/shm/slipstream-blk.%d", (int)pid);
    /* A file of our own, new: one left by a dead process with our pid goes first; one another
     * user put there (the sticky /dev/shm keeps it) makes O_EXCL fail, and the counters stay in
     * this process's memory only. */
    unlink(g_stats_path);
    int fd = open(g_stats_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd >= 0) {
        if (ftruncate(fd, sizeof(*s)) == 0) {
            void *m = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (m != MAP_FAILED)
                s = m;
        }
        close(fd);
    }
    if (s == &g_static_stats) {
        g_stats_path[0] = 0;
        memset(s, 0, sizeof(*s));
    }
    s->magic = BLK_STATS_MAGIC;
    s->version = 1;
    s->pid = (int32_t)pid;
    s->sqpoll = blk__config()->sqpoll;
    g_stats_pid = pid;
    __atomic_store_n(&g_stats, s, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_stats_lock);
    return s;
}

void blk__count_pass(enum blk_pass why)
{
    if ((unsigned)why < BLK_PASS_COUNT)
        __atomic_fetch_add(&blk__stats()->passed[why], 1, __ATOMIC_RELAXED);
}

/* Whether the disk behind dev (a whole disk or a partition) is known to be bio-based: its sysfs
 * node is there and neither it nor its parent disk has the mq directory of a blk-mq queue. A
 * device sysfs does not show (a file system's anonymous device, no /sys) is not known. */
static bool dev_bio_based(uint64_t dev)
{
    char p[PATH_MAX];
    unsigned ma = major((dev_t)dev), mi = minor((dev_t)dev);
    snprintf(p, sizeof(p), "/sys/dev/block/%u:%u", ma, mi);
    if (access(p, F_OK) != 0)
        return false;
    snprintf(p, sizeof(p), "/sys/dev/block/%u:%u/mq", ma, mi);
    if (access(p, F_OK) == 0)
        return false;
    snprintf(p, sizeof(p), "/sys/dev/block/%u:%u/partition", ma, mi);
    if (access(p, F_OK) == 0) {
        snprintf(p, sizeof(p), "/sys/dev/block/%u:%u/../mq", ma, mi);
        if (access(p, F_OK) == 0)
            return false;
    }
    return true;
}

static struct probe_dev *dev_find(uint64_t dev, bool add)
{
    struct probe_dev *free_slot = NULL;
    for (int i = 0; i < BLK_PROBE_DEVS; i++) {
        if (g_devs[i].used && g_devs[i].dev == dev)
            return &g_devs[i];
        if (!g_devs[i].used && !free_slot)
            free_slot = &g_devs[i];
    }
    if (!add || !free_slot)
        return NULL;
    memset(free_slot, 0, sizeof(*free_slot));
    free_slot->dev = dev;
    free_slot->route = -1;
    free_slot->used = true;
    free_slot->poll = -1;
    if (dev_bio_based(dev)) {
        free_slot->route = BLK_ROUTE_KERNEL;
        slip_info("block: device %u:%u is bio-based (completes in the submitting thread): the kernel's own calls",
                  major((dev_t)dev), minor((dev_t)dev));
    }
    return free_slot;
}

/* Whether the queue of the disk behind dev polls for completions (queue/io_poll is 1: a driver
 * with poll queues, such as NVMe or virtio-blk with poll_queues set). */
static bool dev_polls(uint64_t dev)
{
    char p[PATH_MAX], v[8] = "";
    unsigned ma = major((dev_t)dev), mi = minor((dev_t)dev);
    snprintf(p, sizeof(p), "/sys/dev/block/%u:%u/partition", ma, mi);
    bool part = access(p, F_OK) == 0;
    snprintf(p, sizeof(p), "/sys/dev/block/%u:%u/%squeue/io_poll", ma, mi, part ? "../" : "");
    /* stdio, not read(2): this runs inside the POSIX layer's init (an inherited fd after exec),
     * where the exported read would start that init again; libc's own reads are not ours. */
    FILE *f = fopen(p, "re");
    if (!f)
        return false;
    bool on = fgets(v, sizeof(v), f) && v[0] == '1';
    fclose(f);
    return on;
}

bool blk__dev_iopoll(uint64_t dev)
{
    int mode = blk__config()->iopoll;
    if (mode <= 0)
        return false;
    pthread_mutex_lock(&g_probe_lock);
    struct probe_dev *d = dev_find(dev, true);
    bool on = false;
    if (d && !d->poll_refused) {
        if (d->poll < 0) {
            d->poll = dev_polls(dev);
            if (d->poll)
                slip_info("block: device %u:%u polls for completions: the engine uses a polled ring (IOPOLL)",
                          major((dev_t)dev), minor((dev_t)dev));
        }
        on = mode >= 2 || d->poll;
    }
    pthread_mutex_unlock(&g_probe_lock);
    return on;
}

void blk__dev_iopoll_off(uint64_t dev)
{
    pthread_mutex_lock(&g_probe_lock);
    struct probe_dev *d = dev_find(dev, true);
    if (d && !d->poll_refused) {
        d->poll_refused = true;
        __atomic_fetch_add(&blk__stats()->iopoll_refused, 1, __ATOMIC_RELAXED);
        slip_info("block: device %u:%u: its files refuse polled I/O: completions by interrupt",
                  major((dev_t)dev), minor((dev_t)dev));
    }
    pthread_mutex_unlock(&g_probe_lock);
}

enum blk_route blk__route(uint64_t dev)
{
    if (!blk__config()->probe)
        return BLK_ROUTE_ENGINE;
    pthread_mutex_lock(&g_probe_lock);
    struct probe_dev *d = dev_find(dev, true);
    enum blk_route r;
    if (!d)
        r = BLK_ROUTE_ENGINE;   /* more devices than slots: no probe, the engine */
    else if (d->route >= 0)
        r = (enum blk_route)d->route;
    else
        r = d->nk <= d->ne ? BLK_ROUTE_PROBE_KERNEL : BLK_ROUTE_PROBE_ENGINE;
    pthread_mutex_unlock(&g_probe_lock);
    return r;
}

void blk__probe_note(uint64_t dev, enum blk_route how, uint64_t ns)
{
    struct blk_stats *st = blk__stats();
    pthread_mutex_lock(&g_probe_lock);
    struct probe_dev *d = dev_find(dev, false);
    if (!d || d->route >= 0) {
        pthread_mutex_unlock(&g_probe_lock);
        return;
    }
    uint32_t v = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
    if (how == BLK_ROUTE_PROBE_KERNEL) {
        if (d->nk < BLK_PROBE_OPS)
            d->k[d->nk++] = v;
        st->probes_kernel_ns += ns;
    } else {
        if (d->ne < BLK_PROBE_OPS)
            d->e[d->ne++] = v;
        st->probes_engine_ns += ns;
    }
    if (d->nk >= BLK_PROBE_OPS && d->ne >= BLK_PROBE_OPS) {
        /* Medians, not means: on a shared machine one preempted call would decide alone. The
         * engine must beat the kernel by 5 %: within that, the kernel's call costs no polling
         * thread and no second core. */
        qsort(d->k, BLK_PROBE_OPS, sizeof(d->k[0]), cmp_u32);
        qsort(d->e, BLK_PROBE_OPS, sizeof(d->e[0]), cmp_u32);
        uint64_t mk = d->k[BLK_PROBE_OPS / 2], me = d->e[BLK_PROBE_OPS / 2];
        bool engine = me * 100 < mk * 95;
        d->route = engine ? BLK_ROUTE_ENGINE : BLK_ROUTE_KERNEL;
        slip_info("block: device %u:%u: median kernel %llu ns, engine %llu ns per I/O: %s",
                  major((dev_t)dev), minor((dev_t)dev), (unsigned long long)mk, (unsigned long long)me,
                  engine ? "engine" : "kernel (the engine steps aside)");
    }
    pthread_mutex_unlock(&g_probe_lock);
}

bool blk__stats_mine(void)
{
    return __atomic_load_n(&g_stats, __ATOMIC_ACQUIRE) && g_stats_pid == getpid();
}

void blk__stats_unlink(void)
{
    if (g_stats && g_stats_pid == getpid() && g_stats_path[0])
        unlink(g_stats_path);
}

void blk__stats_print(const struct blk_stats *s, FILE *f)
{
    static const char *const why[BLK_PASS_COUNT] = {
        [BLK_PASS_NOT_DIRECT] = "not_direct", [BLK_PASS_NOT_FILE] = "not_file",
        [BLK_PASS_INLINE] = "probe_kernel", [BLK_PASS_NO_RING] = "no_ring",
        [BLK_PASS_UNSUPPORTED] = "unsupported", [BLK_PASS_FILE_OFFSET] = "file_offset",
    };
    fprintf(f, "block pid %d: submitted %llu completed %llu polled %llu slept %llu sq_wakeups %llu rings %llu "
               "sqpoll %d aio_submitted %llu aio_completed %llu\n",
            (int)s->pid, (unsigned long long)s->submitted, (unsigned long long)s->completed,
            (unsigned long long)s->polled, (unsigned long long)s->slept, (unsigned long long)s->sq_wakeups,
            (unsigned long long)s->rings, (int)s->sqpoll, (unsigned long long)s->aio_submitted,
            (unsigned long long)s->aio_completed);
    fprintf(f, "block pid %d: fixed_file_ops %llu bounced_ops %llu iopoll_ops %llu iopoll_refused %llu\n", (int)s->pid,
            (unsigned long long)s->fixed_file_ops, (unsigned long long)s->bounced_ops,
            (unsigned long long)s->iopoll_ops, (unsigned long long)s->iopoll_refused);
    fprintf(f, "block pid %d: sendfile_calls %llu sendfile_reads %llu sendfile_cached_reads %llu sendfile_bytes %llu "
               "sendfile_cached_bytes %llu sendfile_declined %llu sendfile_twins %llu splice_bytes %llu "
               "sendfile_copied_bytes %llu\n",
            (int)s->pid, (unsigned long long)s->sendfile_calls, (unsigned long long)s->sendfile_reads,
            (unsigned long long)s->sendfile_cached_reads, (unsigned long long)s->sendfile_bytes,
            (unsigned long long)s->sendfile_cached_bytes, (unsigned long long)s->sendfile_declined,
            (unsigned long long)s->sendfile_twins, (unsigned long long)s->splice_bytes,
            (unsigned long long)s->sendfile_copied_bytes);
    fprintf(f, "block pid %d: passed to the kernel:", (int)s->pid);
    for (int i = 0; i < BLK_PASS_COUNT; i++)
        fprintf(f, " %s %llu", why[i], (unsigned long long)s->passed[i]);
    fputc('\n', f);
}
