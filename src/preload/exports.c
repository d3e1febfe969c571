/* The exported symbols: each checks that init ran and that the call does not come from inside the
 * layer (then it goes straight to libc), and forwards to pre_<name>. Generated from calls.h. */
#include <stdarg.h>

#include "preload/preload.h"

/* Declared here because libc's headers declare some of them differently or not at all. */
int fcntl64(int fd, int cmd, ...);
ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags, struct sockaddr *sa, socklen_t *len);
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);
ssize_t splice(int in, loff_t *off_in, int out, loff_t *off_out, size_t len, unsigned int flags);
/* <fcntl.h> is not included: with _FILE_OFFSET_BITS=64 it renames fcntl to fcntl64, and this file
 * defines both. */
int fcntl(int fd, int cmd, ...);
int ioctl(int fd, unsigned long req, ...);

#define SLIP_EXPORT(ret, name, params, args)                \
    __attribute__((visibility("default"))) ret name params  \
    {                                                       \
        if (__builtin_expect(!g_pre.ready, 0))              \
            preload_init();                                 \
        if (preload_depth)                                  \
            return real_##name args;                        \
        preload_depth++;                                    \
        ret r_ = pre_##name args;                           \
        preload_depth--;                                    \
        return r_;                                          \
    }
SLIP_CALLS(SLIP_EXPORT)
#undef SLIP_EXPORT

__attribute__((visibility("default"))) int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);
    va_end(ap);
    if (__builtin_expect(!g_pre.ready, 0))
        preload_init();
    if (preload_depth)
        return real_fcntl(fd, cmd, arg);
    preload_depth++;
    int r = pre_fcntl(fd, cmd, arg);
    preload_depth--;
    return r;
}

__attribute__((visibility("default"))) int fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);
    va_end(ap);
    return fcntl(fd, cmd, arg);
}

__attribute__((visibility("default"))) int ioctl(int fd, unsigned long req, ...)
{
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (__builtin_expect(!g_pre.ready, 0))
        preload_init();
    if (preload_depth)
        return real_ioctl(fd, req, arg);
    preload_depth++;
    int r = pre_ioctl(fd, req, arg);
    preload_depth--;
    return r;
}

/* _FORTIFY_SOURCE variants: the length checks are the compiler's promise, keep them. */
__attribute__((visibility("default"))) ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
    if (n > buflen)
        __builtin_trap();
    return read(fd, buf, n);
}

__attribute__((visibility("default"))) ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
    if (n > buflen)
        __builtin_trap();
    return recv(fd, buf, n, flags);
}

__attribute__((visibility("default"))) ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                                                              struct sockaddr *sa, socklen_t *len)
{
    if (n > buflen)
        __builtin_trap();
    return recvfrom(fd, buf, n, flags, sa, len);
}

__attribute__((visibility("default"))) int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
    if (fdslen / sizeof(*fds) < n)
        __builtin_trap();
    return poll(fds, n, timeout);
}

/* With _FILE_OFFSET_BITS=64 the header renamed the generated `sendfile` to sendfile64; programs
 * built without it call plain sendfile (the same ABI on 64-bit). */
ssize_t slip_sendfile_plain(int out, int in, off_t *off, size_t n) __asm__("sendfile");
__attribute__((visibility("default"))) ssize_t slip_sendfile_plain(int out, int in, off_t *off, size_t n)
{
    return sendfile(out, in, off, n);
}
