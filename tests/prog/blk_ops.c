/* A fixed sequence of file and block-device operations for the block path's differential test
 * (tests/system/test_block_diff.py): run once on the kernel and once under the shim, each line
 * it prints ("step result errno [data digest]") must be the same. Usage:
 *   blk_ops file PATH     a regular file (created; O_APPEND, ftruncate, fork, exec, threads, libaio)
 *   blk_ops dev PATH      a block device the test made (loop, zram): reads, writes, errors, libaio
 *   blk_ops eio PATH      a file whose blocks the device fails (EIO): every way to read and write it
 * It prints the block engine's counters of its own process to stderr at the end (when the shim
 * made them), so the test can tell that the engine, not the kernel, did the work. */
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "block/blk.h"

/* libaio's names (the shim exports them; without it, the program links against libaio). */
int io_setup(int nr, aio_context_t *ctx);
int io_destroy(aio_context_t ctx);
int io_submit(aio_context_t ctx, long nr, struct iocb **cbs);
int io_getevents(aio_context_t ctx, long min, long nr, struct io_event *ev, struct timespec *ts);

#define BS 4096
static char *buf, *pat;
static const char *path;

static uint32_t digest(const void *p, size_t n)
{
    const unsigned char *c = p;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 16777619u;
    return h;
}

/* One line per step: its name, what it returned, errno when it failed. */
static long step(const char *name, long r)
{
    if (r < 0)
        printf("%-28s -1 %s\n", name, strerrorname_np(errno));
    else
        printf("%-28s %ld\n", name, r);
    fflush(stdout);
    return r;
}

static void step_data(const char *name, long r, const void *p)
{
    if (r < 0)
        printf("%-28s -1 %s\n", name, strerrorname_np(errno));
    else
        printf("%-28s %ld %08x\n", name, r, digest(p, (size_t)r));
    fflush(stdout);
}

static void fill(char *p, size_t n, int seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (char)(seed * 31 + i * 7 + (i >> 9));
}

static void *thread_main(void *arg)
{
    int fd = (int)(intptr_t)arg >> 8, t = (int)(intptr_t)arg & 0xff;
    char *b = aligned_alloc(BS, BS), *c = aligned_alloc(BS, BS);
    long bad = 0;
    for (int i = 0; i < 200; i++) {
        off_t off = (off_t)(64 + t * 200 + i) * BS;
        fill(b, BS, t * 1000 + i);
        if (pwrite(fd, b, BS, off) != BS || pread(fd, c, BS, off) != BS || memcmp(b, c, BS))
            bad++;
    }
    free(b);
    free(c);
    return (void *)bad;
}

static void aio_steps(int fd, int bfd)
{
    aio_context_t ctx = 0;
    if (step("aio.setup", io_setup(64, &ctx)) < 0)
        return;
    struct iocb cb[6];
    struct iocb *cbs[6];
    memset(cb, 0, sizeof(cb));
    for (int i = 0; i < 4; i++) {
        fill(pat + i * BS, BS, 50 + i);
        cb[i].aio_fildes = (uint32_t)fd;
        cb[i].aio_lio_opcode = IOCB_CMD_PWRITE;
        cb[i].aio_buf = (uint64_t)(uintptr_t)(pat + i * BS);
        cb[i].aio_nbytes = BS;
        cb[i].aio_offset = (int64_t)(32 + i) * BS;
        cb[i].aio_data = 100 + (uint64_t)i;
        cbs[i] = &cb[i];
    }
    cb[4] = cb[0];              /* misaligned: the error comes back in the event */
    cb[4].aio_buf += 1;
    cb[4].aio_data = 104;
    cbs[4] = &cb[4];
    int n = 5;
    if (bfd >= 0) {             /* a buffered fd: the kernel's aio takes this one */
        cb[5] = cb[0];
        cb[5].aio_fildes = (uint32_t)bfd;
        cb[5].aio_offset = 0;
        cb[5].aio_data = 105;
        cbs[5] = &cb[5];
        n = 6;
    }
    int r = io_submit(ctx, n, cbs);
    printf("%-28s %d\n", "aio.submit", r < 0 ? r : r);
    struct io_event ev[8];
    int got = 0;
    while (got < r) {
        int m = io_getevents(ctx, 1, 8 - got, ev + got, NULL);
        if (m <= 0) {
            printf("%-28s %d\n", "aio.getevents", m);
            break;
        }
        got += m;
    }
    long res[8] = { 0 };
    for (int i = 0; i < got; i++)
        if (ev[i].data >= 100 && ev[i].data < 108 && ev[i].obj == (uint64_t)(uintptr_t)&cb[ev[i].data - 100])
            res[ev[i].data - 100] = ev[i].res;
    for (int i = 0; i < n; i++)
        printf("aio.event%-19d %ld\n", i, res[i]);
    struct timespec zero = { 0, 0 };
    printf("%-28s %d\n", "aio.getevents.empty", io_getevents(ctx, 0, 8, ev, &zero));
    /* libc's syscall() on the same context (the shim routes it; libaio's is the kernel's own). */
    step("aio.syscall_getevents", syscall(SYS_io_getevents, ctx, 0, 8, ev, &zero));
    step("aio.syscall_badctx", syscall(SYS_io_getevents, (aio_context_t)1, 0, 8, ev, &zero));
    /* Reads back, then an fsync through aio. */
    memset(cb, 0, sizeof(cb));
    cb[0].aio_fildes = (uint32_t)fd;
    cb[0].aio_lio_opcode = IOCB_CMD_PREAD;
    cb[0].aio_buf = (uint64_t)(uintptr_t)buf;
    cb[0].aio_nbytes = 4 * BS;
    cb[0].aio_offset = 32 * BS;
    cb[1].aio_fildes = (uint32_t)fd;
    cb[1].aio_lio_opcode = IOCB_CMD_FDSYNC;
    cbs[0] = &cb[0];
    cbs[1] = &cb[1];
    printf("%-28s %d\n", "aio.submit2", io_submit(ctx, 2, cbs));
    got = 0;
    while (got < 2) {
        int m = io_getevents(ctx, 2 - got, 2 - got, ev + got, NULL);
        if (m <= 0)
            break;
        got += m;
    }
    /* In a fixed order: completions may come in either. */
    long long rd = -1, sy = -1;
    for (int i = 0; i < got; i++)
        if (ev[i].obj == (uint64_t)(uintptr_t)&cb[0])
            rd = (long long)ev[i].res;
        else
            sy = (long long)ev[i].res;
    step_data("aio.read", rd, buf);
    printf("%-28s %lld\n", "aio.fdsync", sy);
    printf("%-28s %d\n", "aio.destroy", io_destroy(ctx));
    printf("%-28s %d\n", "aio.submit.destroyed", io_submit(ctx, 1, cbs));
}

static void counters(void)
{
    char p[64];
    snprintf(p, sizeof(p), "/dev/shm/slipstream-blk.%d", (int)getpid());
    int fd = open(p, O_RDONLY);
    struct blk_stats s;
    if (fd < 0 || read(fd, &s, sizeof(s)) != sizeof(s) || s.magic != BLK_STATS_MAGIC) {
        fprintf(stderr, "engine: none\n");
    } else {
        fprintf(stderr, "engine: submitted %llu completed %llu aio %llu passed_probe %llu\n",
                (unsigned long long)s.submitted, (unsigned long long)s.completed,
                (unsigned long long)s.aio_submitted, (unsigned long long)s.passed[BLK_PASS_INLINE]);
    }
    if (fd >= 0)
        close(fd);
}

static int after_exec(int fd)
{
    /* An O_DIRECT fd inherited across exec still reads and writes at its offset. */
    step_data("exec.read", read(fd, buf, BS), buf);
    step("exec.offset", lseek(fd, 0, SEEK_CUR));
    fill(pat, BS, 77);
    step("exec.pwrite", pwrite(fd, pat, BS, 20 * BS));
    step_data("exec.pread", pread(fd, buf, BS, 20 * BS), buf);
    counters();
    return 0;
}

static void common_steps(int fd, bool dev)
{
    fill(pat, 16 * BS, 1);
    step("pwrite.0", pwrite(fd, pat, BS, 0));
    step("pwrite.4k", pwrite(fd, pat + BS, 2 * BS, BS));
    step_data("pread.0", pread(fd, buf, BS, 0), buf);
    step_data("pread.12k", pread(fd, buf, 3 * BS, 0), buf);
    step("pread.misaligned_off", pread(fd, buf, BS, 1));
    step("pread.misaligned_buf", pread(fd, buf + 1, BS, 0));
    step("pread.misaligned_len", pread(fd, buf, 100, 0));
    step("pwrite.misaligned_buf", pwrite(fd, pat + 3, BS, 0));
    step("pread.off-1", pread(fd, buf, BS, -1));
    step("pread.zero_len", pread(fd, buf, 0, 0));
    if (!dev) {
        step_data("pread.short_at_eof", pread(fd, buf, 4 * BS, 2 * BS), buf);
        step("pread.at_eof", pread(fd, buf, BS, 3 * BS));
        step("pread.past_eof", pread(fd, buf, BS, 100 * BS));
    }
    /* The file offset, as read/write/lseek keep it. */
    step("lseek.0", lseek(fd, 0, SEEK_SET));
    step_data("read.1", read(fd, buf, BS), buf);
    step("offset.after_read", lseek(fd, 0, SEEK_CUR));
    fill(pat, BS, 2);
    step("write.1", write(fd, pat, BS));
    step("offset.after_write", lseek(fd, 0, SEEK_CUR));
    step("read.misaligned", read(fd, buf + 1, BS));
    step("offset.after_einval", lseek(fd, 0, SEEK_CUR));
    struct iovec v[2] = { { buf, BS }, { buf + BS, BS } };
    step("lseek.4k", lseek(fd, BS, SEEK_SET));
    step_data("readv.2", readv(fd, v, 2), buf);
    step("offset.after_readv", lseek(fd, 0, SEEK_CUR));
    struct iovec w[2] = { { pat, BS }, { pat + BS, BS } };
    fill(pat, 2 * BS, 3);
    step("pwritev.2", pwritev(fd, w, 2, 4 * BS));
    step_data("preadv.2", preadv(fd, v, 2, 4 * BS), buf);
    step("pwritev2.dsync", pwritev2(fd, w, 2, 6 * BS, RWF_DSYNC));
    step_data("preadv2.cur", preadv2(fd, v, 1, -1, 0), buf);
    step("offset.after_preadv2", lseek(fd, 0, SEEK_CUR));
    step("preadv.iov0", preadv(fd, v, 0, 0));
    volatile int neg = -1;
    step("preadv.iov_neg", preadv(fd, v, neg, 0));
    step("preadv2.badflag", preadv2(fd, v, 1, 0, 0x4000));
    step("fsync", fsync(fd));
    step("fdatasync", fdatasync(fd));
    /* dup shares the offset; a closed fd is EBADF. */
    int d = dup(fd);
    step("dup", d >= 0);
    step("lseek.dup", lseek(d, 2 * BS, SEEK_SET));
    step_data("read.orig_after_dup_seek", read(fd, buf, BS), buf);
    step("offset.dup", lseek(d, 0, SEEK_CUR));
    step("close.dup", close(d));
    step("pread.closed", pread(d, buf, BS, 0));
    /* close lets the open file go (the engine's registered-file slot must not keep it): its
     * flock lock ends, so another open file can take the lock at once. */
    int l = open(path, O_RDWR | O_DIRECT);
    step("flock.open", l >= 0);
    step("flock.lock", flock(l, LOCK_EX));
    step_data("flock.pread", pread(l, buf, BS, 0), buf);
    step("flock.close", close(l));
    int l2 = open(path, O_RDWR);
    step("flock.after_close", flock(l2, LOCK_EX | LOCK_NB));
    close(l2);
    int d2 = fcntl(fd, F_DUPFD_CLOEXEC, 100);
    step("fdupfd", d2 >= 100);
    step_data("pread.fdupfd", pread(d2, buf, BS, 0), buf);
    close(d2);
    int ro = open(path, O_RDONLY | O_DIRECT);
    step("pwrite.rdonly", pwrite(ro, pat, BS, 0));
    step_data("syscall.pread64", syscall(SYS_pread64, fd, buf, BS, 0), buf);
    close(ro);
}

/* A file whose blocks lie where the device fails every request: the device's EIO comes back from
 * each call, and from libaio as the event's result. */
static int eio_steps(void)
{
    int fd = open(path, O_RDWR | O_DIRECT);
    if (step("open", fd >= 0) <= 0)
        return 1;
    fill(pat, 4 * BS, 3);
    step("eio.pread", pread(fd, buf, BS, 0));
    step("eio.pread_16k", pread(fd, buf, 4 * BS, BS));
    step("eio.pwrite", pwrite(fd, pat, BS, 0));
    struct iovec v[2] = { { buf, BS }, { buf + BS, BS } }, w[2] = { { pat, BS }, { pat + BS, BS } };
    step("eio.preadv", preadv(fd, v, 2, 2 * BS));
    step("eio.pwritev2_dsync", pwritev2(fd, w, 2, 2 * BS, RWF_DSYNC));
    aio_context_t ctx = 0;
    if (step("eio.aio_setup", io_setup(8, &ctx)) == 0) {
        struct iocb cb[2];
        struct iocb *cbs[2] = { &cb[0], &cb[1] };
        memset(cb, 0, sizeof(cb));
        cb[0].aio_fildes = cb[1].aio_fildes = (uint32_t)fd;
        cb[0].aio_lio_opcode = IOCB_CMD_PREAD;
        cb[1].aio_lio_opcode = IOCB_CMD_PWRITE;
        cb[0].aio_buf = (uint64_t)(uintptr_t)buf;
        cb[1].aio_buf = (uint64_t)(uintptr_t)pat;
        cb[0].aio_nbytes = cb[1].aio_nbytes = BS;
        cb[1].aio_offset = BS;
        cb[0].aio_data = 10;
        cb[1].aio_data = 11;
        step("eio.aio_submit", io_submit(ctx, 2, cbs));
        struct io_event ev[2];
        int n = io_getevents(ctx, 2, 2, ev, NULL);
        step("eio.aio_events", n);
        for (int i = 0; i < n; i++)     /* in data order: completion order is the device's */
            for (int j = 0; j < n; j++)
                if (ev[j].data == (uint64_t)(10 + i))
                    printf("%-28s %lld\n", i ? "eio.aio_write_res" : "eio.aio_read_res", (long long)ev[j].res);
        io_destroy(ctx);
    }
    step("close", close(fd));
    counters();
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "after-exec")) {
        buf = aligned_alloc(BS, 64 * BS);
        pat = aligned_alloc(BS, 64 * BS);
        return after_exec(atoi(argv[3]));
    }
    if (argc != 3 || (strcmp(argv[1], "file") && strcmp(argv[1], "dev") && strcmp(argv[1], "eio"))) {
        fprintf(stderr, "usage: blk_ops file|dev|eio PATH\n");
        return 2;
    }
    if (!strcmp(argv[1], "eio")) {
        path = argv[2];
        buf = aligned_alloc(BS, 64 * BS);
        pat = aligned_alloc(BS, 64 * BS);
        return eio_steps();
    }
    bool dev = !strcmp(argv[1], "dev");
    path = argv[2];
    buf = aligned_alloc(BS, 64 * BS);
    pat = aligned_alloc(BS, 64 * BS);
    int fd = open(path, O_RDWR | O_DIRECT | (dev ? 0 : O_CREAT | O_TRUNC), 0644);
    if (step("open", fd >= 0) <= 0)
        return 1;
    common_steps(fd, dev);
    if (dev) {
        /* Past the end of a block device: reads give 0, writes ENOSPC. */
        off_t size = lseek(fd, 0, SEEK_END);
        step("dev.size", size);
        step("pread.dev_end", pread(fd, buf, BS, size));
        step("pwrite.dev_end", pwrite(fd, pat, BS, size));
        step_data("pread.dev_last", pread(fd, buf, 2 * BS, size - BS), buf);
    } else {
        /* O_APPEND: write and even pwrite go to the end (Linux's pwrite on O_APPEND). */
        int a = open(path, O_WRONLY | O_APPEND | O_DIRECT);
        fill(pat, BS, 4);
        step("append.write", write(a, pat, BS));
        step("append.offset", lseek(a, 0, SEEK_CUR));
        step("append.pwrite", pwrite(a, pat, BS, 0));
        step("append.size", lseek(a, 0, SEEK_END));
        close(a);
        /* A size not a multiple of the block: the last read is short. */
        step("ftruncate", ftruncate(fd, 10 * BS + 1000));
        step_data("pread.short_tail", pread(fd, buf, 2 * BS, 10 * BS), buf);
        /* O_DIRECT turned off: a misaligned read is fine now. */
        int fl = fcntl(fd, F_GETFL);
        step("setfl.no_direct", fcntl(fd, F_SETFL, fl & ~O_DIRECT));
        step_data("pread.buffered_misaligned", pread(fd, buf + 1, 100, 3), buf + 1);
        step("setfl.direct", fcntl(fd, F_SETFL, fl));
        step("pread.direct_again", pread(fd, buf + 1, 100, 3));
        /* A fork child gets its own ring: its write is there when the parent looks. */
        /* Both sides keep doing I/O after the fork, at the same time, each checking what it
         * reads back: a child that used its parent's ring would mix their requests up. */
        pid_t pid = fork();
        if (pid == 0) {
            fill(pat, BS, 9);
            _exit(pwrite(fd, pat, BS, 11 * BS) == BS && pread(fd, buf, BS, 0) == BS && !thread_main((void *)(intptr_t)(fd << 8 | 5)) ? 0 : 1);
        }
        fprintf(stderr, "fork child pid %d\n", (int)pid);
        step("fork.parent_io_bad", (long)thread_main((void *)(intptr_t)(fd << 8 | 6)));
        int st = 0;
        waitpid(pid, &st, 0);
        step("fork.child", WIFEXITED(st) ? WEXITSTATUS(st) : 100);
        step_data("fork.parent_read", pread(fd, buf, BS, 11 * BS), buf);
#ifdef SYS_fork
        /* A child made without atfork handlers (the raw fork syscall, as _Fork or clone() make
         * one): it must not take its parent's rings for its own either. */
        pid = (pid_t)syscall(SYS_fork);
        if (pid == 0) {
            fill(pat, BS, 13);
            _exit(pwrite(fd, pat, BS, 13 * BS) == BS && !thread_main((void *)(intptr_t)(fd << 8 | 7)) ? 0 : 1);
        }
        step("rawfork.parent_io_bad", (long)thread_main((void *)(intptr_t)(fd << 8 | 8)));
        st = 0;
        waitpid(pid, &st, 0);
        step("rawfork.child", WIFEXITED(st) ? WEXITSTATUS(st) : 100);
        step_data("rawfork.parent_read", pread(fd, buf, BS, 13 * BS), buf);
#endif
        /* Threads, each on its own ring. */
        pthread_t th[4];
        for (int t = 0; t < 4; t++)
            pthread_create(&th[t], NULL, thread_main, (void *)(intptr_t)(fd << 8 | t));
        long bad = 0;
        for (int t = 0; t < 4; t++) {
            void *r;
            pthread_join(th[t], &r);
            bad += (long)r;
        }
        step("threads.bad", bad);
        /* A write through the ring then exit: it is on the file when the next open looks. */
        int bfd = open(path, O_RDWR);
        aio_steps(fd, bfd);
        close(bfd);
        /* A daemon closing every fd it does not know (the shim's rings among them) still reads. */
        for (int i = 3; i < 1024; i++)
            if (i != fd)
                close(i);
        step_data("closeall.pread", pread(fd, buf, BS, 0), buf);
        fill(pat, BS, 12);
        step("closeall.pwrite", pwrite(fd, pat, BS, 12 * BS));
        /* exec with the fd open at a known offset. */
        lseek(fd, BS, SEEK_SET);
        fflush(stdout);
        counters();
        char fds[16];
        snprintf(fds, sizeof(fds), "%d", fd);
        execl("/proc/self/exe", argv[0], "after-exec", path, fds, (char *)NULL);
        step("exec", -1);
        return 1;
    }
    aio_steps(fd, -1);
    step("close", close(fd));
    counters();
    return 0;
}
