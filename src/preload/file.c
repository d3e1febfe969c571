/* The block path of the POSIX layer: open/openat/creat note which fds were opened with O_DIRECT
 * on a regular file or a block device (the block fd table, beside the socket one), and their
 * reads and writes at an explicit offset (pread/pwrite/preadv/pwritev here, preadv2/pwritev2
 * handed over by doors.c) go to the block engine (src/block) instead of the kernel's call.
 * Calls at the file offset (read, write, readv, writev, preadv2 at -1) go to the kernel:
 * io_uring's "offset -1" does not advance f_pos as read(2) does once an O_DIRECT write completes
 * asynchronously (the differential test saw it), and the offset is shared with dups, fork
 * children and exec'd images, so only the kernel can keep it. O_APPEND is the kernel's to apply
 * either way. Everything else passes straight through. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/env.h"
#include "base/log.h"
#include "block/blk.h"
#include "preload/file.h"
#include "preload/preload.h"

#define EXPORT __attribute__((visibility("default")))

struct bfd *g_bfd;
int g_bfd_n;

/* RWF_* flags the engine maps (io_uring takes them as the kernel's call does); RWF_HIPRI needs
 * a polled ring and RWF_NOWAIT a different EAGAIN path: those calls go to the kernel. */
#define BLK_RWF_OK (RWF_DSYNC | RWF_SYNC | RWF_APPEND)

static int (*real_openat64)(int dirfd, const char *path, int flags, ...);

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* fd was just opened (or found open) with flags: is it one the engine serves? */
static void file_note(int fd, int flags)
{
    if (!g_bfd || fd < 0 || fd >= g_bfd_n)
        return;
    g_bfd[fd].on = 0;
    if (!(flags & O_DIRECT)) {
        blk__count_pass(BLK_PASS_NOT_DIRECT);
        return;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !(S_ISREG(st.st_mode) || S_ISBLK(st.st_mode))) {
        blk__count_pass(BLK_PASS_NOT_FILE);
        return;
    }
    g_bfd[fd].dev = S_ISBLK(st.st_mode) ? (uint64_t)st.st_rdev : (uint64_t)st.st_dev;
    g_bfd[fd].kernel = 0;
    static uint32_t gen;
    uint32_t g = __atomic_add_fetch(&gen, 1, __ATOMIC_RELAXED);
    g_bfd[fd].gen = g ? g : __atomic_add_fetch(&gen, 1, __ATOMIC_RELAXED);
    struct statx sx;
    g_bfd[fd].mem_align = statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN)
                          ? sx.stx_dio_mem_align : 0;
    g_bfd[fd].iopoll = blk__dev_iopoll(g_bfd[fd].dev);
    g_bfd[fd].on = 1;
}

static bool g_dump;

/* exit() and _exit() (fio's job processes end with _exit): the writes of libaio contexts still
 * in flight complete first, then the counters. Only in a process that used the engine itself. */
void preload_file_exit(void)
{
    static pid_t done;
    if (!g_bfd || !blk__stats_mine() || done == getpid())
        return;
    done = getpid();
    preload_depth++;
    blk__at_exit();
    if (g_dump)
        blk__stats_print(blk__stats(), stderr);
    blk__stats_unlink();
    preload_depth--;
}

static void file_at_exit(void)
{
    preload_file_exit();
}

static void file_atfork_child(void)
{
    blk__atfork_child();
}

/* An image started after exec keeps the O_DIRECT fds it inherited: find them once. */
static void file_scan_inherited(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return;
    int self = dirfd(d);
    for (struct dirent *e; (e = readdir(d));) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end || fd == self || fd < 0 || fd >= g_bfd_n)
            continue;
        int fl = real_fcntl((int)fd, F_GETFL);
        if (fl >= 0 && (fl & O_DIRECT))
            file_note((int)fd, fl);
    }
    closedir(d);
}

void preload_file_init(void)
{
    uint64_t v;
    char err[256];
    real_openat64 = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat64");
    if (slip_env__get(SLIP_ENV_BLOCK, &v, err, sizeof(err)) < 0 || !v || !g_pre.nfds)
        return;
    struct blk_config c = { .sq_cpu = -1 };
    slip_env__get(SLIP_ENV_BLOCK_SQPOLL, &v, err, sizeof(err));
    c.sqpoll = v;
    slip_env__get(SLIP_ENV_BLOCK_SQ_IDLE_MS, &v, err, sizeof(err));
    c.sq_idle_ms = (int)v;
    slip_env__get(SLIP_ENV_BLOCK_SQ_CPU, &v, err, sizeof(err));
    c.sq_cpu = v < 4096 ? (int)v : -1;
    slip_env__get(SLIP_ENV_BLOCK_SPIN_USEC, &v, err, sizeof(err));
    c.spin_usec = (int)v;
    slip_env__get(SLIP_ENV_BLOCK_PROBE, &v, err, sizeof(err));
    c.probe = v;
    slip_env__get(SLIP_ENV_BLOCK_FIXED_FILES, &v, err, sizeof(err));
    c.fixed_files = v;
    slip_env__get(SLIP_ENV_BLOCK_BOUNCE, &v, err, sizeof(err));
    c.bounce = v;
    slip_env__get(SLIP_ENV_BLOCK_IOPOLL, &v, err, sizeof(err));
    c.iopoll = (int)v;
    slip_env__get(SLIP_ENV_BLOCK_SENDFILE, &v, err, sizeof(err));
    c.sendfile = v;
    blk__configure(&c);
    slip_env__get(SLIP_ENV_DUMP_AT_EXIT, &v, err, sizeof(err));
    g_dump = v;
    g_bfd = calloc((size_t)g_pre.nfds, sizeof(*g_bfd));
    if (!g_bfd)
        return;
    g_bfd_n = g_pre.nfds;
    pthread_atfork(NULL, NULL, file_atfork_child);
    atexit(file_at_exit);
    file_scan_inherited();
}

/* The kernel's own call, for what the engine does not take. */
static ssize_t kernel_rw(int fd, bool wr, const struct iovec *iov, int n, off_t off, int flags)
{
    return wr ? real_pwritev2(fd, iov, n, off, flags) : real_preadv2(fd, iov, n, off, flags);
}

ssize_t file_rw(int fd, bool wr, const struct iovec *iov, int n, off_t off, int flags)
{
    struct bfd *b = bfd_get(fd);
    if (!b)
        return kernel_rw(fd, wr, iov, n, off, flags);
    /* What the kernel checks itself (and answers with its own errno): the iovec count, a
     * negative offset, the total length (MAX_RW_COUNT clamps it), unknown or polled flags. */
    size_t total = 0;
    bool odd = n <= 0 || n > IOV_MAX || off < -1 || (flags & ~BLK_RWF_OK);
    for (int i = 0; !odd && i < n; i++) {
        total += iov[i].iov_len;
        odd = total > 0x7ffff000u || iov[i].iov_len > 0x7ffff000u;
    }
    if (odd) {
        blk__count_pass(BLK_PASS_UNSUPPORTED);
        return kernel_rw(fd, wr, iov, n, off, flags);
    }
    if (off == -1) {
        blk__count_pass(BLK_PASS_FILE_OFFSET);
        return kernel_rw(fd, wr, iov, n, off, flags);
    }
    enum blk_route r = b->kernel ? BLK_ROUTE_KERNEL : blk__route(b->dev);
    if (r == BLK_ROUTE_KERNEL) {
        b->kernel = 1;          /* decided for good: later calls skip the probe's table */
        blk__count_pass(BLK_PASS_INLINE);
        return kernel_rw(fd, wr, iov, n, off, flags);
    }
    uint64_t t0 = r == BLK_ROUTE_ENGINE ? 0 : now_ns();
    ssize_t x;
    if (r == BLK_ROUTE_PROBE_KERNEL) {
        x = kernel_rw(fd, wr, iov, n, off, flags);
        blk__probe_note(b->dev, r, now_ns() - t0);
        return x;
    }
    struct blk_file f = { .fd = fd, .gen = b->gen, .mem_align = b->mem_align, .iopoll = b->iopoll };
    x = blk__rw_file(&f, wr ? BLK_OP_WRITE : BLK_OP_READ, iov, n, off, flags);
    if (x == -EOPNOTSUPP && f.iopoll) {
        /* The file cannot be polled (its file system has no iopoll, or no polled ring could be
         * made): nothing was done; the device goes back to interrupts for good. */
        blk__dev_iopoll_off(b->dev);
        b->iopoll = 0;
        f.iopoll = false;
        x = blk__rw_file(&f, wr ? BLK_OP_WRITE : BLK_OP_READ, iov, n, off, flags);
    }
    if (x == -ENOSYS) {
        blk__count_pass(BLK_PASS_NO_RING);
        return kernel_rw(fd, wr, iov, n, off, flags);
    }
    if (t0)
        blk__probe_note(b->dev, r, now_ns() - t0);
    return x < 0 ? set_errno((int)x) : x;
}

/* fd's twin goes with it (a twin the program closed itself is only forgotten). */
static void twin_drop(int fd)
{
    struct bfd *b = &g_bfd[fd];
    if (b->twin > 0) {
        int t = b->twin - 1;
        if (t < g_bfd_n && g_bfd[t].twin_of == fd + 1) {
            g_bfd[t].twin_of = 0;
            real_close(t);
        }
    }
    b->twin = 0;
    if (b->twin_of > 0) {
        int o = b->twin_of - 1;
        if (o < g_bfd_n && g_bfd[o].twin == fd + 1)
            g_bfd[o].twin = 0;
        b->twin_of = 0;
    }
}

void file_fd_gone(int fd)
{
    if (g_bfd && fd >= 0 && fd < g_bfd_n) {
        g_bfd[fd].on = 0;
        twin_drop(fd);
        blk__file_forget(fd);
        blk__fd_closing(fd);
    }
}

void file_fd_dup(int fd, int newfd)
{
    if (g_bfd && fd >= 0 && fd < g_bfd_n && newfd >= 0 && newfd < g_bfd_n && newfd != fd) {
        twin_drop(newfd);
        g_bfd[newfd] = g_bfd[fd];
        g_bfd[newfd].twin = 0;          /* each number gets its own twin when it needs one */
        g_bfd[newfd].twin_of = 0;
    }
}

int file_direct_twin(int fd, const struct stat *st, uint32_t *align, uint32_t *mem, uint64_t *dev)
{
    if (!g_bfd || fd < 0 || fd >= g_bfd_n)
        return -1;
    struct bfd *b = &g_bfd[fd];
    if (b->on && b->twin == 0) {
        /* Opened with O_DIRECT by the program: it is its own twin. */
        struct statx sx;
        if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) < 0 || !(sx.stx_mask & STATX_DIOALIGN) ||
            !sx.stx_dio_offset_align || !sx.stx_dio_mem_align)
            return -1;
        *align = sx.stx_dio_offset_align;
        *mem = sx.stx_dio_mem_align;
        *dev = (uint64_t)st->st_dev;
        return fd;
    }
    bool same = b->twin_dev == (uint64_t)st->st_dev && b->twin_ino == (uint64_t)st->st_ino;
    if (b->twin != 0 && same) {
        *align = b->twin_align;
        *mem = b->twin_mem;
        *dev = (uint64_t)st->st_dev;
        return b->twin > 0 ? b->twin - 1 : -1;
    }
    /* First use, or the number now names another file (closed behind our back by a raw syscall). */
    twin_drop(fd);
    b->twin_dev = (uint64_t)st->st_dev;
    b->twin_ino = (uint64_t)st->st_ino;
    b->twin = -1;
    /* Only for an fd the program may read: a reopen would read what its own fd cannot (O_WRONLY,
     * O_PATH), where the kernel answers EBADF (the copying path gets that answer). */
    int fl = real_fcntl(fd, F_GETFL);
    if (fl < 0 || (fl & O_ACCMODE) == O_WRONLY || (fl & O_PATH))
        return -1;
    char path[40];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    preload_depth++;
    int t = real_openat64(AT_FDCWD, path, O_RDONLY | O_DIRECT | O_CLOEXEC | O_NOCTTY);
    preload_depth--;
    if (t < 0)
        return -1;
    struct statx sx;
    struct stat tst;
    bool ok = t < g_bfd_n && fstat(t, &tst) == 0 && tst.st_dev == st->st_dev && tst.st_ino == st->st_ino &&
              statx(t, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN) &&
              sx.stx_dio_offset_align && sx.stx_dio_mem_align;
    if (!ok) {
        real_close(t);
        return -1;
    }
    __atomic_fetch_add(&blk__stats()->sendfile_twins, 1, __ATOMIC_RELAXED);
    memset(&g_bfd[t], 0, sizeof(g_bfd[t]));
    g_bfd[t].twin_of = fd + 1;
    b->twin = t + 1;
    b->twin_align = sx.stx_dio_offset_align;
    b->twin_mem = sx.stx_dio_mem_align;
    *align = b->twin_align;
    *mem = b->twin_mem;
    *dev = (uint64_t)st->st_dev;
    return t;
}

void file_fd_setfl(int fd, long flags)
{
    /* F_SETFL can turn O_DIRECT on or off (O_APPEND is the kernel's to apply). */
    if (g_bfd && fd >= 0 && fd < g_bfd_n)
        file_note(fd, (int)flags);
}

/* ---- pread/pwrite/preadv/pwritev ---- */

/* A device the probe gave to the kernel: its own call, as without the layer (only counted). */
static inline bool to_kernel(struct bfd *b)
{
    if (!b)
        return true;
    if (b->kernel)
        blk__count_pass(BLK_PASS_INLINE);
    return b->kernel;
}

ssize_t pre_pread(int fd, void *buf, size_t n, off_t off)
{
    if (off < 0 || to_kernel(bfd_get(fd)))
        return real_pread(fd, buf, n, off);
    struct iovec v = { buf, n };
    return file_rw(fd, false, &v, 1, off, 0);
}

ssize_t pre_pwrite(int fd, const void *buf, size_t n, off_t off)
{
    if (off < 0 || to_kernel(bfd_get(fd)))
        return real_pwrite(fd, buf, n, off);
    struct iovec v = { (void *)buf, n };
    return file_rw(fd, true, &v, 1, off, 0);
}

ssize_t pre_preadv(int fd, const struct iovec *iov, int n, off_t off)
{
    if (off < 0 || to_kernel(bfd_get(fd)))
        return real_preadv(fd, iov, n, off);
    return file_rw(fd, false, iov, n, off, 0);
}

ssize_t pre_pwritev(int fd, const struct iovec *iov, int n, off_t off)
{
    if (off < 0 || to_kernel(bfd_get(fd)))
        return real_pwritev(fd, iov, n, off);
    return file_rw(fd, true, iov, n, off, 0);
}


/* The plain names, for programs built without _FILE_OFFSET_BITS=64 (the generated exports carry
 * the 64 names; the same ABI on 64-bit). */
ssize_t slip_pread_plain(int fd, void *buf, size_t n, off_t off) __asm__("pread");
EXPORT ssize_t slip_pread_plain(int fd, void *buf, size_t n, off_t off) { return pread(fd, buf, n, off); }
ssize_t slip_pwrite_plain(int fd, const void *buf, size_t n, off_t off) __asm__("pwrite");
EXPORT ssize_t slip_pwrite_plain(int fd, const void *buf, size_t n, off_t off) { return pwrite(fd, buf, n, off); }
ssize_t slip_preadv_plain(int fd, const struct iovec *iov, int n, off_t off) __asm__("preadv");
EXPORT ssize_t slip_preadv_plain(int fd, const struct iovec *iov, int n, off_t off) { return preadv(fd, iov, n, off); }
ssize_t slip_pwritev_plain(int fd, const struct iovec *iov, int n, off_t off) __asm__("pwritev");
EXPORT ssize_t slip_pwritev_plain(int fd, const struct iovec *iov, int n, off_t off) { return pwritev(fd, iov, n, off); }

/* _FORTIFY_SOURCE's pread: the length check is the compiler's promise, keep it. */
ssize_t slip_pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen) __asm__("__pread64_chk");
EXPORT ssize_t slip_pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen)
{
    if (n > buflen)
        __builtin_trap();
    return pread(fd, buf, n, off);
}
ssize_t slip_pread_chk_plain(int fd, void *buf, size_t n, off_t off, size_t buflen) __asm__("__pread_chk");
EXPORT ssize_t slip_pread_chk_plain(int fd, void *buf, size_t n, off_t off, size_t buflen)
{
    return slip_pread_chk(fd, buf, n, off, buflen);
}

/* ---- open, openat and their other names (variadic: written here, not in calls.h) ---- */

/* An open before the layer's init (a sanitizer's runtime reads /proc before any constructor):
 * no dlsym then (dlsym allocates, and that allocator is not ready either), the syscall itself. */
int __open64(const char *path, int flags, ...);

static int early_openat(int dirfd, const char *path, int flags, mode_t mode)
{
#if defined(__x86_64__)
    long ret;
    register long r10 __asm__("r10") = (long)mode;
    __asm__ volatile("syscall" : "=a"(ret) : "a"((long)SYS_openat), "D"((long)dirfd), "S"(path), "d"((long)flags), "r"(r10)
                     : "rcx", "r11", "memory");
    if (ret < 0) {
        errno = (int)-ret;
        return -1;
    }
    return (int)ret;
#else
    if (dirfd != AT_FDCWD && path[0] != '/')
        return set_errno(-ENOSYS);
    return __open64(path, flags, mode);
#endif
}

static int file_open(int dirfd, const char *path, int flags, mode_t mode)
{
    if (__builtin_expect(!g_pre.ready || !real_openat64, 0))
        return early_openat(dirfd, path, flags, mode);
    int fd = real_openat64(dirfd, path, flags, mode);
    if (fd >= 0 && g_bfd && !preload_depth) {
        int e = errno;
        preload_depth++;
        file_note(fd, flags);
        preload_depth--;
        errno = e;
    }
    return fd;
}

static mode_t open_mode(int flags, va_list ap)
{
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

int slip_open(const char *path, int flags, ...) __asm__("open");
EXPORT int slip_open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t m = open_mode(flags, ap);
    va_end(ap);
    return file_open(AT_FDCWD, path, flags, m);
}

int slip_open64(const char *path, int flags, ...) __asm__("open64");
EXPORT int slip_open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t m = open_mode(flags, ap);
    va_end(ap);
    return file_open(AT_FDCWD, path, flags, m);
}

int slip_openat(int dirfd, const char *path, int flags, ...) __asm__("openat");
EXPORT int slip_openat(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t m = open_mode(flags, ap);
    va_end(ap);
    return file_open(dirfd, path, flags, m);
}

int slip_openat64(int dirfd, const char *path, int flags, ...) __asm__("openat64");
EXPORT int slip_openat64(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t m = open_mode(flags, ap);
    va_end(ap);
    return file_open(dirfd, path, flags, m);
}

/* _FORTIFY_SOURCE's open without a mode (glibc checks O_CREAT needs one; so does the kernel's
 * answer when the program passes none). */
int slip_open_2(const char *path, int flags) __asm__("__open_2");
EXPORT int slip_open_2(const char *path, int flags) { return file_open(AT_FDCWD, path, flags, 0); }
int slip_open64_2(const char *path, int flags) __asm__("__open64_2");
EXPORT int slip_open64_2(const char *path, int flags) { return file_open(AT_FDCWD, path, flags, 0); }
int slip_openat_2(int dirfd, const char *path, int flags) __asm__("__openat_2");
EXPORT int slip_openat_2(int dirfd, const char *path, int flags) { return file_open(dirfd, path, flags, 0); }
int slip_openat64_2(int dirfd, const char *path, int flags) __asm__("__openat64_2");
EXPORT int slip_openat64_2(int dirfd, const char *path, int flags) { return file_open(dirfd, path, flags, 0); }

/* creat never gives O_DIRECT, but the number it returns may have been one of ours. */
int slip_creat(const char *path, mode_t mode) __asm__("creat");
EXPORT int slip_creat(const char *path, mode_t mode) { return file_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode); }
int slip_creat64(const char *path, mode_t mode) __asm__("creat64");
EXPORT int slip_creat64(const char *path, mode_t mode) { return file_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode); }
