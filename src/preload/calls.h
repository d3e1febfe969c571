/* The one list of intercepted calls. Each X(ret, name, params, args) generates the pointer to
 * the real libc function (real_<name>), its lookup with dlsym(RTLD_NEXT) at init, and the
 * prototype of our implementation (slip_<name>); the exported symbol itself is in preload.c and
 * listed in exports.map. Variadic calls (fcntl, ioctl, dprintf, syscall) are written by hand
 * beside the list, and so is vfork (spawn.c), which must never reach the real vfork from a
 * wrapper; doors.c has the other names libc gives the same calls (fortified, legacy, 64-bit).
 * With _FILE_OFFSET_BITS=64 the headers rename freopen, preadv2 and pwritev2 (and sendfile) to
 * their 64 names: the generated export then carries that name and doors.c adds the plain one
 * (file.c for pread, pwrite, preadv and pwritev). The block path's variadic open/openat
 * (and their fortified and 64 names) and creat are written by hand in file.c, libaio's calls in aio.c
 * (libaio may not be loaded: its kernel side is reached by raw syscalls). */
#ifndef SLIP_PRELOAD_CALLS_H
#define SLIP_PRELOAD_CALLS_H

#include <poll.h>
#include <stdio.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define SLIP_CALLS(X) \
    X(int, socket, (int domain, int type, int protocol), (domain, type, protocol)) \
    X(int, bind, (int fd, const struct sockaddr *sa, socklen_t len), (fd, sa, len)) \
    X(int, listen, (int fd, int backlog), (fd, backlog)) \
    X(int, accept, (int fd, struct sockaddr *sa, socklen_t *len), (fd, sa, len)) \
    X(int, accept4, (int fd, struct sockaddr *sa, socklen_t *len, int flags), (fd, sa, len, flags)) \
    X(int, connect, (int fd, const struct sockaddr *sa, socklen_t len), (fd, sa, len)) \
    X(int, shutdown, (int fd, int how), (fd, how)) \
    X(int, close, (int fd), (fd)) \
    X(int, getsockname, (int fd, struct sockaddr *sa, socklen_t *len), (fd, sa, len)) \
    X(int, getpeername, (int fd, struct sockaddr *sa, socklen_t *len), (fd, sa, len)) \
    X(int, getsockopt, (int fd, int level, int opt, void *val, socklen_t *len), (fd, level, opt, val, len)) \
    X(int, setsockopt, (int fd, int level, int opt, const void *val, socklen_t len), (fd, level, opt, val, len)) \
    X(ssize_t, send, (int fd, const void *buf, size_t n, int flags), (fd, buf, n, flags)) \
    X(ssize_t, sendto, (int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t len), \
      (fd, buf, n, flags, sa, len)) \
    X(ssize_t, sendmsg, (int fd, const struct msghdr *msg, int flags), (fd, msg, flags)) \
    X(ssize_t, recv, (int fd, void *buf, size_t n, int flags), (fd, buf, n, flags)) \
    X(ssize_t, recvfrom, (int fd, void *buf, size_t n, int flags, struct sockaddr *sa, socklen_t *len), \
      (fd, buf, n, flags, sa, len)) \
    X(ssize_t, recvmsg, (int fd, struct msghdr *msg, int flags), (fd, msg, flags)) \
    X(ssize_t, read, (int fd, void *buf, size_t n), (fd, buf, n)) \
    X(ssize_t, write, (int fd, const void *buf, size_t n), (fd, buf, n)) \
    X(ssize_t, readv, (int fd, const struct iovec *iov, int n), (fd, iov, n)) \
    X(ssize_t, writev, (int fd, const struct iovec *iov, int n), (fd, iov, n)) \
    X(ssize_t, sendfile, (int out, int in, off_t *off, size_t n), (out, in, off, n)) \
    X(int, dup, (int fd), (fd)) \
    X(int, dup2, (int fd, int fd2), (fd, fd2)) \
    X(int, dup3, (int fd, int fd2, int flags), (fd, fd2, flags)) \
    X(int, poll, (struct pollfd *fds, nfds_t n, int timeout), (fds, n, timeout)) \
    X(int, ppoll, (struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask), \
      (fds, n, ts, mask)) \
    X(int, select, (int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv), (n, r, w, e, tv)) \
    X(int, pselect, (int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts, const sigset_t *mask), \
      (n, r, w, e, ts, mask)) \
    X(int, epoll_create, (int size), (size)) \
    X(int, epoll_create1, (int flags), (flags)) \
    X(int, epoll_ctl, (int epfd, int op, int fd, struct epoll_event *ev), (epfd, op, fd, ev)) \
    X(int, epoll_wait, (int epfd, struct epoll_event *ev, int max, int timeout), (epfd, ev, max, timeout)) \
    X(int, epoll_pwait, (int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask), \
      (epfd, ev, max, timeout, mask)) \
    X(int, sendmmsg, (int fd, struct mmsghdr *v, unsigned int n, int flags), (fd, v, n, flags)) \
    X(int, recvmmsg, (int fd, struct mmsghdr *v, unsigned int n, int flags, struct timespec *t), \
      (fd, v, n, flags, t)) \
    X(int, close_range, (unsigned int first, unsigned int last, int flags), (first, last, flags)) \
    X(int, epoll_pwait2, (int epfd, struct epoll_event *ev, int max, const struct timespec *t, const sigset_t *m), \
      (epfd, ev, max, t, m)) \
    X(pid_t, fork, (void), ()) \
    X(int, sigaction, (int sig, const struct sigaction *act, struct sigaction *old), (sig, act, old)) \
    X(sighandler_t, signal, (int sig, sighandler_t h), (sig, h)) \
    X(int, setuid, (uid_t u), (u)) \
    X(int, setgid, (gid_t g), (g)) \
    X(int, seteuid, (uid_t u), (u)) \
    X(int, setegid, (gid_t g), (g)) \
    X(int, setreuid, (uid_t r, uid_t e), (r, e)) \
    X(int, setregid, (gid_t r, gid_t e), (r, e)) \
    X(int, setresuid, (uid_t r, uid_t e, uid_t s), (r, e, s)) \
    X(int, setresgid, (gid_t r, gid_t e, gid_t s), (r, e, s)) \
    X(int, execve, (const char *path, char *const argv[], char *const envp[]), (path, argv, envp)) \
    X(int, execv, (const char *path, char *const argv[]), (path, argv)) \
    X(int, execvp, (const char *file, char *const argv[]), (file, argv)) \
    X(int, execvpe, (const char *file, char *const argv[], char *const envp[]), (file, argv, envp)) \
    X(int, posix_spawn, (pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa, \
                         const posix_spawnattr_t *attr, char *const argv[], char *const envp[]), \
      (pid, path, fa, attr, argv, envp)) \
    X(int, posix_spawnp, (pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa, \
                          const posix_spawnattr_t *attr, char *const argv[], char *const envp[]), \
      (pid, file, fa, attr, argv, envp)) \
    X(int, system, (const char *cmd), (cmd)) \
    X(FILE *, popen, (const char *cmd, const char *mode), (cmd, mode)) \
    X(int, pclose, (FILE *f), (f)) \
    X(int, daemon, (int nochdir, int noclose), (nochdir, noclose)) \
    X(ssize_t, splice, (int in, loff_t *off_in, int out, loff_t *off_out, size_t len, unsigned int flags), \
      (in, off_in, out, off_out, len, flags)) \
    X(FILE *, fdopen, (int fd, const char *mode), (fd, mode)) \
    X(FILE *, freopen, (const char *path, const char *mode, FILE *f), (path, mode, f)) \
    X(int, vdprintf, (int fd, const char *fmt, va_list ap), (fd, fmt, ap)) \
    X(ssize_t, preadv2, (int fd, const struct iovec *iov, int n, off_t off, int flags), (fd, iov, n, off, flags)) \
    X(ssize_t, pwritev2, (int fd, const struct iovec *iov, int n, off_t off, int flags), (fd, iov, n, off, flags)) \
    X(ssize_t, pread, (int fd, void *buf, size_t n, off_t off), (fd, buf, n, off)) \
    X(ssize_t, pwrite, (int fd, const void *buf, size_t n, off_t off), (fd, buf, n, off)) \
    X(ssize_t, preadv, (int fd, const struct iovec *iov, int n, off_t off), (fd, iov, n, off)) \
    X(ssize_t, pwritev, (int fd, const struct iovec *iov, int n, off_t off), (fd, iov, n, off))

#define SLIP_DECLARE_REAL(ret, name, params, args) extern ret (*real_##name) params;
SLIP_CALLS(SLIP_DECLARE_REAL)
#undef SLIP_DECLARE_REAL
extern int (*real_fcntl)(int fd, int cmd, ...);
extern int (*real_ioctl)(int fd, unsigned long req, ...);

#endif
