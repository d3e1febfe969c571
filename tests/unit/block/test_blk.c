/* The block engine (src/block) on a temporary file on /var/tmp: a synchronous write and read
 * through the thread's ring give the kernel's results (errors included), an asynchronous ring
 * refuses more than it can complete, the per-device probe decides by medians, and a thread's
 * ring with registered files and a bounce buffer gives the same results and lets a closed file go. Without
 * io_uring (ENOSYS) the ring tests say so and check only that the engine reports it. */
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "block/blk.h"
#include "tests/unit/check.h"

#define BS 4096

static int tmpfile_direct(char *path, size_t len, int extra_bytes)
{
    snprintf(path, len, "/var/tmp/slip-test-blk-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    if (ftruncate(fd, 4 * BS + extra_bytes) < 0) {
        close(fd);
        return -1;
    }
    close(fd);
    fd = open(path, O_RDWR | O_DIRECT);
    if (fd < 0)
        fd = open(path, O_RDWR);        /* a file system without O_DIRECT: buffered, same checks */
    return fd;
}

static bool have_uring(void)
{
    struct blk_ring *r;
    int rc = blk_ring__new(&r, 4);
    if (rc == 0) {
        blk_ring__free(r);
        return true;
    }
    printf("skip: io_uring unavailable here (%d)\n", rc);
    return false;
}

TEST(test_sync_write_read_as_the_kernel)
{
    char path[64];
    int fd = tmpfile_direct(path, sizeof(path), 100);
    CHECK(fd, >=, 0);
    if (fd < 0 || !have_uring())
        goto out;
    char *a = aligned_alloc(BS, 2 * BS), *b = aligned_alloc(BS, 2 * BS);
    for (int i = 0; i < 2 * BS; i++)
        a[i] = (char)(i * 13);
    struct iovec w = { a, BS }, r = { b, BS };
    CHECK(blk__rw(fd, BLK_OP_WRITE, &w, 1, BS, 0), ==, BS);
    CHECK(blk__rw(fd, BLK_OP_READ, &r, 1, BS, 0), ==, BS);
    CHECK_MEM(a, b, BS);
    /* Two buffers: READV/WRITEV. */
    struct iovec w2[2] = { { a, BS }, { a + BS, BS } }, r2[2] = { { b, BS }, { b + BS, BS } };
    CHECK(blk__rw(fd, BLK_OP_WRITE, w2, 2, 2 * BS, 0), ==, 2 * BS);
    memset(b, 0, 2 * BS);
    CHECK(blk__rw(fd, BLK_OP_READ, r2, 2, 2 * BS, 0), ==, 2 * BS);
    CHECK_MEM(a, b, 2 * BS);
    /* The kernel's answers for what it refuses or cuts short, beside its own call. */
    struct iovec odd = { b + 1, BS };
    ssize_t k = pread(fd, b + 1, BS, 0);
    CHECK(blk__rw(fd, BLK_OP_READ, &odd, 1, 0, 0), ==, k < 0 ? -errno : k);
    struct iovec tail = { b, 2 * BS };
    k = pread(fd, b, 2 * BS, 4 * BS);
    CHECK(blk__rw(fd, BLK_OP_READ, &tail, 1, 4 * BS, 0), ==, k < 0 ? -errno : k);
    CHECK(blk__rw(fd, BLK_OP_READ, &tail, 1, 100 * BS, 0), ==, 0);
    CHECK(blk__rw(-1, BLK_OP_READ, &tail, 1, 0, 0), ==, -EBADF);
    CHECK(blk__stats()->submitted, >=, 8);
    CHECK(blk__stats()->completed, ==, blk__stats()->submitted);
    free(a);
    free(b);
out:
    if (fd >= 0)
        close(fd);
    unlink(path);
}

TEST(test_async_ring_bounds)
{
    char path[64];
    int fd = tmpfile_direct(path, sizeof(path), 0);
    CHECK(fd, >=, 0);
    struct blk_ring *r = NULL;
    if (fd < 0 || !have_uring() || blk_ring__new(&r, 4) < 0)
        goto out;
    char *a = aligned_alloc(BS, 4 * BS);
    memset(a, 7, 4 * BS);
    int queued = 0;
    for (int i = 0; i < 8; i++)
        if (blk_ring__queue(r, IORING_OP_WRITE, fd, (uint64_t)(uintptr_t)(a + i % 4 * BS), BS, (i % 4) * BS,
                            0, 100 + (uint64_t)i) == 0)
            queued++;
    /* No more in flight than the CQ can hold: the rest is EAGAIN, as io_submit's is. */
    CHECK(queued, ==, 4);
    CHECK(blk_ring__inflight(r), ==, 4);
    CHECK(blk_ring__submit(r), ==, 0);
    struct blk_cqe c[8];
    int got = 0;
    while (got < 4) {
        int m = blk_ring__reap(r, c + got, 1, 8 - got, 1000000000);
        CHECK(m, >, 0);
        if (m <= 0)
            break;
        got += m;
    }
    uint64_t seen = 0;
    for (int i = 0; i < got; i++) {
        CHECK(c[i].res, ==, BS);
        seen |= 1ull << (c[i].user_data - 100);
    }
    CHECK(seen, ==, 0xf);
    CHECK(blk_ring__inflight(r), ==, 0);
    /* Nothing in flight: a reap with a limit of 0 returns at once with nothing. */
    CHECK(blk_ring__reap(r, c, 0, 8, 0), ==, 0);
    blk_ring__free(r);
    free(a);
out:
    if (fd >= 0)
        close(fd);
    unlink(path);
}

TEST(test_probe_decides_by_medians)
{
    struct blk_config cfg = *blk__config();
    cfg.probe = true;
    blk__configure(&cfg);
    uint64_t slow = 0x10000001, fast = 0x10000002;
    /* The kernel at 1 us, the engine at 2 us but for a few very fast outliers: the kernel. */
    for (int i = 0; i < 64; i++) {
        CHECK(blk__route(slow) == BLK_ROUTE_PROBE_KERNEL || blk__route(slow) == BLK_ROUTE_PROBE_ENGINE, ==, 1);
        blk__probe_note(slow, BLK_ROUTE_PROBE_KERNEL, 1000);
        blk__probe_note(slow, BLK_ROUTE_PROBE_ENGINE, i < 10 ? 10 : 2000);
    }
    CHECK(blk__route(slow), ==, BLK_ROUTE_KERNEL);
    /* The engine 20 % faster, with one preempted call of a second: the engine. (A device is
     * known to the probe from its first blk__route, as in the POSIX layer.) */
    CHECK(blk__route(fast), !=, BLK_ROUTE_ENGINE);
    for (int i = 0; i < 64; i++) {
        blk__probe_note(fast, BLK_ROUTE_PROBE_KERNEL, 1000);
        blk__probe_note(fast, BLK_ROUTE_PROBE_ENGINE, i == 3 ? 1000000000 : 800);
    }
    CHECK(blk__route(fast), ==, BLK_ROUTE_ENGINE);
    /* Within 5 %: the kernel (no polling thread for nothing). */
    uint64_t even = 0x10000003;
    CHECK(blk__route(even), !=, BLK_ROUTE_KERNEL);
    for (int i = 0; i < 64; i++) {
        blk__probe_note(even, BLK_ROUTE_PROBE_KERNEL, 1000);
        blk__probe_note(even, BLK_ROUTE_PROBE_ENGINE, 970);
    }
    CHECK(blk__route(even), ==, BLK_ROUTE_KERNEL);
}

/* Runs in a thread of its own: a thread's ring takes the configuration of when it is made. */
static void *fixed_thread(void *arg)
{
    char *path = arg;
    long fails = 0;
#define EXPECT(c) do { if (!(c)) { printf("  failed: %s (line %d)\n", #c, __LINE__); fails++; } } while (0)
    int fd = open(path, O_RDWR | O_DIRECT);
    if (fd < 0)
        return (void *)1;
    char *a = aligned_alloc(BS, 2 * BS), *b = aligned_alloc(BS, 2 * BS), *k = aligned_alloc(BS, 2 * BS);
    for (int i = 0; i < 2 * BS; i++)
        a[i] = (char)(i * 7 + 1);
    struct blk_file f = { .fd = fd, .gen = 7, .mem_align = 512 };
    uint64_t fixed0 = blk__stats()->fixed_file_ops, bounced0 = blk__stats()->bounced_ops;
    struct iovec w = { a, BS }, r = { b, BS };
    EXPECT(blk__rw_file(&f, BLK_OP_WRITE, &w, 1, BS, 0) == BS);
    EXPECT(blk__rw_file(&f, BLK_OP_READ, &r, 1, BS, 0) == BS);
    EXPECT(memcmp(a, b, BS) == 0);
    EXPECT(pread(fd, k, BS, BS) == BS && memcmp(a, k, BS) == 0);     /* what the kernel sees */
    /* Past the end: a short read as the kernel's, its bytes copied out of the bounce (what lies
     * past the count is unspecified; the kernel's DMA may fill the rest of the block). */
    memset(b, 0x5a, 2 * BS);
    memset(k, 0x5a, 2 * BS);
    struct iovec tail = { b, 2 * BS };
    ssize_t kt = pread(fd, k, 2 * BS, 4 * BS);
    EXPECT(blk__rw_file(&f, BLK_OP_READ, &tail, 1, 4 * BS, 0) == kt);
    EXPECT(kt > 0 && memcmp(b, k, (size_t)kt) == 0);
    EXPECT(blk__stats()->fixed_file_ops - fixed0 == 3);
    EXPECT(blk__stats()->bounced_ops - bounced0 == 3);
    /* A buffer the kernel refuses (misaligned) is not bounced: the kernel's EINVAL. */
    struct iovec odd = { a + 1, BS };
    ssize_t ko = pread(fd, a + 1, BS, 0);
    EXPECT(blk__rw_file(&f, BLK_OP_READ, &odd, 1, 0, 0) == (ko < 0 ? -errno : ko));
    EXPECT(blk__stats()->bounced_ops - bounced0 == 3);
    /* Closing lets the file go: its flock lock ends with the last reference to the open file,
     * which the ring's registered slot holds until blk__file_forget drops it. */
    EXPECT(flock(fd, LOCK_EX) == 0);
    blk__file_forget(fd);
    close(fd);
    int fd2 = open(path, O_RDWR);
    EXPECT(fd2 >= 0 && flock(fd2, LOCK_EX | LOCK_NB) == 0);
    close(fd2);
    free(a);
    free(b);
    free(k);
    return (void *)fails;
#undef EXPECT
}

TEST(test_fixed_files_and_bounce_as_the_kernel)
{
    char path[64];
    int fd = tmpfile_direct(path, sizeof(path), 100);
    CHECK(fd, >=, 0);
    if (fd < 0 || !have_uring())
        goto out;
    close(fd);
    struct blk_config cfg = *blk__config(), saved = cfg;
    cfg.fixed_files = true;
    cfg.bounce = true;
    blk__configure(&cfg);
    pthread_t t;
    void *fails = (void *)1;
    CHECK(pthread_create(&t, NULL, fixed_thread, path), ==, 0);
    pthread_join(t, &fails);
    CHECK((long)fails, ==, 0);
    blk__configure(&saved);
out:
    unlink(path);
}

int main(int argc, char **argv)
{
    int rc = slip_test_main(argc, argv);
    blk__stats_unlink();
    return rc;
}
