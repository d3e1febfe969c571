/* Other doors into the intercepted calls. libc offers the same socket I/O under more names than
 * the plain ones: fortified variants (_FORTIFY_SOURCE), the legacy __read/__write/... exports,
 * preadv2/pwritev2 at offset -1 (readv/writev with flags), dprintf, and syscall(SYS_read, ...).
 * Each one here ends in the exported plain call, so an accelerated fd is served by the stack
 * whichever name the program used. (What only the kernel sees, a `syscall` instruction or a
 * static binary, is in docs/COMPLIANCE.md.) */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <linux/seccomp.h>
#include <sys/uio.h>
#include <dlfcn.h>

#include "base/env.h"
#include "base/log.h"
#include "preload/file.h"
#include "preload/preload.h"

#define EXPORT __attribute__((visibility("default")))

/* Declared here: some are in no header, the others are renamed by _FILE_OFFSET_BITS=64. */
int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask, size_t fdslen);
int __dprintf_chk(int fd, int flag, const char *fmt, ...);
int __vdprintf_chk(int fd, int flag, const char *fmt, va_list ap);
ssize_t __read(int fd, void *buf, size_t n);
ssize_t __write(int fd, const void *buf, size_t n);
int __close(int fd);
int __connect(int fd, const struct sockaddr *sa, socklen_t len);
ssize_t __send(int fd, const void *buf, size_t n, int flags);
int __poll(struct pollfd *fds, nfds_t n, int timeout);
int __select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv);
int fcntl(int fd, int cmd, ...);

/* ---- fortified ---- */

EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask, size_t fdslen)
{
    if (fdslen / sizeof(*fds) < n)
        __builtin_trap();
    return ppoll(fds, n, ts, mask);
}

/* __fdelt_chk (FD_SET/FD_ISSET with _FORTIFY_SOURCE) only checks the fd against FD_SETSIZE: it
 * reaches no socket, select() itself is intercepted. */

EXPORT int __vdprintf_chk(int fd, int flag, const char *fmt, va_list ap)
{
    if (__builtin_expect(!g_pre.ready, 0))
        preload_init();
    if (preload_depth) {
        static int (*real)(int, int, const char *, va_list);
        if (!real)
            real = (int (*)(int, int, const char *, va_list))dlsym(RTLD_NEXT, "__vdprintf_chk");
        return real(fd, flag, fmt, ap);
    }
    return preload_vdprintf_chk(fd, flag, fmt, ap);
}

EXPORT int __dprintf_chk(int fd, int flag, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = __vdprintf_chk(fd, flag, fmt, ap);
    va_end(ap);
    return r;
}

EXPORT int dprintf(int fd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vdprintf(fd, fmt, ap);
    va_end(ap);
    return r;
}

/* ---- legacy names (GLIBC_2.2.5, public) ---- */

EXPORT ssize_t __read(int fd, void *buf, size_t n) { return read(fd, buf, n); }
EXPORT ssize_t __write(int fd, const void *buf, size_t n) { return write(fd, buf, n); }
EXPORT int __close(int fd) { return close(fd); }
EXPORT int __connect(int fd, const struct sockaddr *sa, socklen_t len) { return connect(fd, sa, len); }
EXPORT ssize_t __send(int fd, const void *buf, size_t n, int flags) { return send(fd, buf, n, flags); }
EXPORT int __poll(struct pollfd *fds, nfds_t n, int timeout) { return poll(fds, n, timeout); }
EXPORT int __select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv) { return select(n, r, w, e, tv); }

/* ---- preadv2/pwritev2 ---- */

/* At offset -1 Linux reads a socket as readv does, or recvmsg with MSG_DONTWAIT under
 * RWF_NOWAIT (sock_read_iter); any other offset is ESPIPE, and flags Linux does not know are
 * EOPNOTSUPP: the kernel twin says both. */
#define RWF_KNOWN (RWF_HIPRI | RWF_DSYNC | RWF_SYNC | RWF_NOWAIT | RWF_APPEND)

ssize_t pre_preadv2(int fd, const struct iovec *iov, int n, off_t off, int flags)
{
    struct pfd *p = pfd_get(fd);
    if (!p && bfd_get(fd))
        return file_rw(fd, false, iov, n, off, flags);
    if (!p || p->kind == PFD_EPOLL || off != -1 || (flags & ~RWF_KNOWN))
        return real_preadv2(fd, iov, n, off, flags);
    if (!(flags & RWF_NOWAIT))
        return pre_readv(fd, iov, n);
    if (n < 0 || n > IOV_MAX)
        return set_errno(-EINVAL);
    struct msghdr m = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n };
    return pre_recvmsg(fd, &m, MSG_DONTWAIT);
}

ssize_t pre_pwritev2(int fd, const struct iovec *iov, int n, off_t off, int flags)
{
    struct pfd *p = pfd_get(fd);
    if (!p && bfd_get(fd))
        return file_rw(fd, true, iov, n, off, flags);
    if (!p || p->kind == PFD_EPOLL || off != -1 || (flags & ~RWF_KNOWN))
        return real_pwritev2(fd, iov, n, off, flags);
    if (!(flags & RWF_NOWAIT))
        return pre_writev(fd, iov, n);
    if (n < 0 || n > IOV_MAX)
        return set_errno(-EINVAL);
    struct msghdr m = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n };
    return pre_sendmsg(fd, &m, MSG_DONTWAIT);
}

/* The plain names, for programs built without _FILE_OFFSET_BITS=64 (the same ABI on 64-bit). */
ssize_t slip_preadv2_plain(int fd, const struct iovec *iov, int n, off_t off, int flags) __asm__("preadv2");
EXPORT ssize_t slip_preadv2_plain(int fd, const struct iovec *iov, int n, off_t off, int flags)
{
    return preadv2(fd, iov, n, off, flags);
}

ssize_t slip_pwritev2_plain(int fd, const struct iovec *iov, int n, off_t off, int flags) __asm__("pwritev2");
EXPORT ssize_t slip_pwritev2_plain(int fd, const struct iovec *iov, int n, off_t off, int flags)
{
    return pwritev2(fd, iov, n, off, flags);
}

FILE *slip_freopen_plain(const char *path, const char *mode, FILE *f) __asm__("freopen");
EXPORT FILE *slip_freopen_plain(const char *path, const char *mode, FILE *f)
{
    return freopen(path, mode, f);
}

/* ---- syscall() ---- */

/* syscall() is a libc function like the others: a program calling syscall(SYS_read, fd, ...) on
 * an accelerated fd gets the same call as read(fd, ...). Only the calls that take a fd of ours
 * (or a set of fds: poll, select) are routed; everything else, and everything while the stack
 * is not open, goes to libc's syscall() with the six argument registers as they came (the way
 * libc's own syscall() passes them). */
static bool ours(long fd)
{
    return fd >= 0 && fd <= INT32_MAX && pfd_get((int)fd) != NULL;
}

/* x86-64 numbers; the calls newer architectures lack (poll, select, epoll_wait, dup2) are
 * compiled only where they exist. */
static bool routed(long nr, const long *a)
{
    switch (nr) {
    case SYS_read: case SYS_write: case SYS_readv: case SYS_writev: case SYS_recvfrom: case SYS_sendto:
    case SYS_recvmsg: case SYS_sendmsg: case SYS_recvmmsg: case SYS_sendmmsg: case SYS_close:
    case SYS_shutdown: case SYS_accept: case SYS_accept4: case SYS_connect: case SYS_bind: case SYS_listen:
    case SYS_getsockname: case SYS_getpeername: case SYS_getsockopt: case SYS_setsockopt: case SYS_dup:
    case SYS_fcntl: case SYS_ioctl: case SYS_epoll_ctl: case SYS_epoll_pwait:
#ifdef SYS_epoll_wait
    case SYS_epoll_wait:
#endif
        return ours(a[0]);
    case SYS_preadv2: case SYS_pwritev2:
        return ours(a[0]) || (a[0] >= 0 && a[0] <= INT32_MAX && bfd_get((int)a[0]));
    /* The block path's fds, and libaio contexts made by the block path (aio.c). */
    case SYS_pread64: case SYS_pwrite64: case SYS_preadv: case SYS_pwritev:
        return a[0] >= 0 && a[0] <= INT32_MAX && bfd_get((int)a[0]);
    case SYS_io_submit: case SYS_io_getevents: case SYS_io_destroy: case SYS_io_cancel:
        return aio_ctx_ours((unsigned long)a[0]);
    case SYS_sendfile:
        return ours(a[0]) || ours(a[1]);
    case SYS_dup3:
#ifdef SYS_dup2
    case SYS_dup2:
#endif
        return ours(a[0]) || ours(a[1]);
    case SYS_ppoll: case SYS_pselect6:
#ifdef SYS_poll
    case SYS_poll:
#endif
#ifdef SYS_select
    case SYS_select:
#endif
        return true;
    default:
        return false;
    }
}

static long route(long nr, const long *a)
{
    int fd = (int)a[0];
    void *p1 = (void *)a[1];
    switch (nr) {
    case SYS_read: return read(fd, p1, (size_t)a[2]);
    case SYS_write: return write(fd, p1, (size_t)a[2]);
    case SYS_readv: return readv(fd, p1, (int)a[2]);
    case SYS_writev: return writev(fd, p1, (int)a[2]);
    case SYS_recvfrom: return recvfrom(fd, p1, (size_t)a[2], (int)a[3], (void *)a[4], (socklen_t *)a[5]);
    case SYS_sendto: return sendto(fd, p1, (size_t)a[2], (int)a[3], (void *)a[4], (socklen_t)a[5]);
    case SYS_recvmsg: return recvmsg(fd, p1, (int)a[2]);
    case SYS_sendmsg: return sendmsg(fd, p1, (int)a[2]);
    case SYS_recvmmsg: return recvmmsg(fd, p1, (unsigned)a[2], (int)a[3], (struct timespec *)a[4]);
    case SYS_sendmmsg: return sendmmsg(fd, p1, (unsigned)a[2], (int)a[3]);
    case SYS_close: return close(fd);
    case SYS_shutdown: return shutdown(fd, (int)a[1]);
    case SYS_accept: return accept(fd, p1, (socklen_t *)a[2]);
    case SYS_accept4: return accept4(fd, p1, (socklen_t *)a[2], (int)a[3]);
    case SYS_connect: return connect(fd, p1, (socklen_t)a[2]);
    case SYS_bind: return bind(fd, p1, (socklen_t)a[2]);
    case SYS_listen: return listen(fd, (int)a[1]);
    case SYS_getsockname: return getsockname(fd, p1, (socklen_t *)a[2]);
    case SYS_getpeername: return getpeername(fd, p1, (socklen_t *)a[2]);
    case SYS_getsockopt: return getsockopt(fd, (int)a[1], (int)a[2], (void *)a[3], (socklen_t *)a[4]);
    case SYS_setsockopt: return setsockopt(fd, (int)a[1], (int)a[2], (void *)a[3], (socklen_t)a[4]);
    case SYS_dup: return dup(fd);
#ifdef SYS_dup2
    case SYS_dup2: return dup2(fd, (int)a[1]);
#endif
    case SYS_dup3: return dup3(fd, (int)a[1], (int)a[2]);
    case SYS_fcntl: return fcntl(fd, (int)a[1], a[2]);
    case SYS_ioctl: return ioctl(fd, (unsigned long)a[1], (void *)a[2]);
    case SYS_epoll_ctl: return epoll_ctl(fd, (int)a[1], (int)a[2], (struct epoll_event *)a[3]);
#ifdef SYS_epoll_wait
    case SYS_epoll_wait: return epoll_wait(fd, p1, (int)a[2], (int)a[3]);
#endif
    case SYS_epoll_pwait: return epoll_pwait(fd, p1, (int)a[2], (int)a[3], (const sigset_t *)a[4]);
    case SYS_preadv2: return preadv2(fd, p1, (int)a[2], (off_t)a[3], (int)a[5]);
    case SYS_pwritev2: return pwritev2(fd, p1, (int)a[2], (off_t)a[3], (int)a[5]);
    case SYS_sendfile: return sendfile(fd, (int)a[1], (off_t *)a[2], (size_t)a[3]);
    case SYS_pread64: return pread(fd, p1, (size_t)a[2], (off_t)a[3]);
    case SYS_pwrite64: return pwrite(fd, p1, (size_t)a[2], (off_t)a[3]);
    case SYS_preadv: return preadv(fd, p1, (int)a[2], (off_t)a[3]);        /* x86-64: pos_l is the offset */
    case SYS_pwritev: return pwritev(fd, p1, (int)a[2], (off_t)a[3]);
    case SYS_io_submit: case SYS_io_getevents: case SYS_io_destroy: case SYS_io_cancel: {
        long r = aio_syscall(nr, a);    /* libaio's convention, -errno: the syscall's is errno */
        if (r < 0) {
            errno = (int)-r;
            return -1;
        }
        return r;
    }
#ifdef SYS_poll
    case SYS_poll: return poll((struct pollfd *)a[0], (nfds_t)a[1], (int)a[2]);
#endif
    case SYS_ppoll: return ppoll((struct pollfd *)a[0], (nfds_t)a[1], (struct timespec *)a[2], (const sigset_t *)a[3]);
#ifdef SYS_select
    case SYS_select: return select(fd, p1, (fd_set *)a[2], (fd_set *)a[3], (struct timeval *)a[4]);
#endif
    case SYS_pselect6: {
        /* The kernel's sixth argument: { const sigset_t *set; size_t size; }. */
        const struct { const sigset_t *set; size_t size; } *sm = (const void *)a[5];
        return pselect(fd, p1, (fd_set *)a[2], (fd_set *)a[3], (struct timespec *)a[4], sm ? sm->set : NULL);
    }
    }
    errno = ENOSYS;
    return -1;
}

/* io_uring can carry a program's socket work (libuv batches its epoll_ctl calls through it;
 * others send and receive through it) where the layer cannot see it: the stack would complete
 * handshakes that the program never hears of. Programs that probe for it fall back to the
 * calls we serve when it is missing (libuv uses epoll), so under the layer io_uring_setup
 * says ENOSYS, with one warning line; SLIP_IO_URING=1 lets a program keep it (its files gain,
 * its sockets on io_uring would not be accelerated). */
static bool io_uring_refused(void)
{
    static int warned;
    uint64_t keep = 0;
    char err[160];
    slip_env__get(SLIP_ENV_IO_URING, &keep, err, sizeof(err));
    if (keep)
        return false;
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        slip_warn("io_uring is off for this program (io_uring_setup: ENOSYS): socket work submitted through it "
                  "would bypass the stack; libuv and others fall back to epoll (SLIP_IO_URING=1 keeps it)");
    return true;
}

EXPORT long syscall(long nr, ...)
{
    static long (*real)(long, ...);
    long a[6];
    va_list ap;
    va_start(ap, nr);
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (g_pre.ready && !preload_depth && (g_pre.stack || g_bfd) && routed(nr, a))
        return route(nr, a);
    if (nr == SYS_io_uring_setup && g_pre.ready && !preload_depth && io_uring_refused()) {
        errno = ENOSYS;
        return -1;
    }
    if (nr == SYS_seccomp && a[0] == SECCOMP_SET_MODE_FILTER)
        preload_sandbox_entered(SECCOMP_MODE_FILTER, (unsigned long)a[1]);   /* sandbox.c */
    if (nr == SYS_seccomp && a[0] == SECCOMP_SET_MODE_STRICT)
        preload_sandbox_entered(SECCOMP_MODE_STRICT, 0);
    if (!real)
        real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    return real(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
