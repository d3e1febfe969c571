/* Descriptors of accelerated sockets (POSIX layer): close, dup, fcntl, fork and close_range keep
 * the stack socket's references and epoll registrations as the kernel keeps its open files, and
 * SCM_RIGHTS carries a reference with each accelerated fd a UNIX socket passes. */
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "base/log.h"
#include "preload/file.h"
#include "preload/preload.h"
#include "stack/stack.h"

/* The kernel socket behind an accelerated fd, by inode, so that a process receiving it over a
 * UNIX socket finds the stack socket (fd passing). Recorded when the fd is sent (pass_rights),
 * not for every new socket: an fstat per accepted connection was one of the 6 syscalls nginx
 * made per connection; a new socket only clears what an earlier one at its index left. */
static void note_ino(struct slip_stack *s, bool tcp, int sock, int fd)
{
    struct stat st;
    if (fstat(fd, &st) == 0) {
        slip_sock__set_ino(s, tcp, sock, (uint64_t)st.st_ino);
        slip_group__note_passed(s, (uint64_t)st.st_ino);   /* for a receiver with another stack */
    }
}

/* close() of an accelerated socket's fd. Its epoll registrations go with it unless another fd
 * of this process still refers to the socket (dup): the kernel keys them on the open file. */
static void close_sock_fd(int fd, struct pfd *p)
{
    uint8_t kind = p->kind, st = p->st;
    int sock = p->sock;
    struct slip_stack *s = pfd_stack(p);
    preload_release(fd);
    if (slip_proc__held(s, kind == PFD_TCP, sock) > 0) {
        uepoll_detach_fd(fd, kind, st, sock);
    } else {
        uepoll_forget_fd(fd);
        uepoll_forget_sock(kind, st, sock);
    }
}

void preload_fd_gone(int fd)
{
    struct pfd *p = pfd_get(fd);
    if (p) {
        if (p->kind == PFD_EPOLL) {
            uepoll_forget_fd(fd);       /* it may sit inside another epoll set */
            uepoll_free(p->ep);
            pfd_clear(fd);
        } else {
            close_sock_fd(fd, p);
        }
    }
}

int pre_close(int fd)
{
    if (g_pre.stack && preload_own_fd(fd))
        return 0;       /* keep.c: the stack's own fds stay open */
    preload_fd_gone(fd);
    file_fd_gone(fd);
    return real_close(fd);
}
/* A socket passed to us that none of our stacks has: the stack the group says it lives in
 * (slip_group__passed_index), joined as one more stack of this process, as a program joins a
 * stack by name (its user, or root, only). The socket there, with its slot in *slot; or -ENOENT
 * (then the fd is the kernel socket here, with one warning line). */
static int join_passed(struct slip_stack *s, uint64_t ino, bool *tcp, int *slot)
{
    int index = slip_group__passed_index(s, ino);
    if (index < 0)
        return -ENOENT;
    for (int i = 0; i < PRELOAD_STACKS; i++)
        if (preload_stack_at(i) && slip_stack__index(preload_stack_at(i)) == (unsigned)index)
            return -ENOENT;     /* a stack we have: the socket is not (or no longer) in it */
    char err[256] = "";
    struct slip_stack *js = NULL;
    preload_depth++;
    int rc = slip_stack__join_index(s, (unsigned)index, &js, err, sizeof(err));
    preload_depth--;
    int sock = rc < 0 ? rc : slip_sock__by_ino(js, ino, tcp);
    if (sock >= 0 && (*slot = preload_stack_add(js)) < 0)
        sock = -ENOSPC;
    if (sock < 0) {
        if (js) {
            /* Leave it (our slot there goes) but keep it mapped: closing a stack from a live
             * process would take the group's XDP link and shared state down with it. */
            preload_depth++;
            slip_stack__exit(js, 0, NULL);
            preload_depth--;
        }
        static int warned;
        if (!warned++)
            slip_warn("a socket passed to this process lives in another stack that cannot be joined (%s): it is "
                      "the kernel socket here, not accelerated", err[0] ? err : strerror(-sock));
        return -ENOENT;
    }
    slip_info("joined the stack %s of a socket passed to this process", slip_stack__name(js));
    return sock;
}

/* A fd received with SCM_RIGHTS that is the kernel twin of an accelerated socket becomes that
 * socket here too, as the kernel's would (one more reference). ufd: the UNIX socket it came on
 * (a process with no stack yet opens the sender's: preload_stack_for_passed). */
static void adopt_passed(int fd, int ufd)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
        return;
    int dom = 0;
    socklen_t dl = sizeof(dom);
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &dl) < 0 || (dom != AF_INET && dom != AF_INET6))
        return;
    struct slip_stack *s = preload_stack_for_passed(ufd);
    bool tcp = false;
    int sock = -ENOENT, slot = 0;
    /* Our stacks first (a socket of this process's own, or of a stack we joined before). */
    for (int i = 0; s && sock < 0 && i < PRELOAD_STACKS; i++)
        if (preload_stack_at(i) && (sock = slip_sock__by_ino(preload_stack_at(i), (uint64_t)st.st_ino, &tcp)) >= 0)
            slot = i;
    if (s && sock < 0)
        sock = join_passed(s, (uint64_t)st.st_ino, &tcp, &slot);
    if (sock < 0)
        return;
    s = preload_stack_at(slot);
    struct pfd *p = pfd_new(fd);
    if (!p)
        return;
    int acc = 0;
    socklen_t al = sizeof(acc);
    p->kind = tcp ? PFD_TCP : PFD_UDP;
    p->st = (uint8_t)slot;
    p->sock = sock;
    p->nonblock = (real_fcntl(fd, F_GETFL) & O_NONBLOCK) != 0;
    p->v6 = dom == AF_INET6;
    p->listening = getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &al) == 0 && acc;
    slip_sock__pass_in(s, tcp, sock);
}

/* Before a UNIX socket message carries accelerated fds away: a reference travels with each. */
int preload_pass_rights(const struct msghdr *m, int dir)
{
    int n = 0;
    if (!g_pre.stack || !m->msg_control || m->msg_controllen < sizeof(struct cmsghdr))
        return 0;
    for (struct cmsghdr *h = CMSG_FIRSTHDR((struct msghdr *)m); h; h = CMSG_NXTHDR((struct msghdr *)m, h)) {
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int f;
            memcpy(&f, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
            struct pfd *p = pfd_get(f);
            if (!p || (p->kind != PFD_TCP && p->kind != PFD_UDP))
                continue;
            struct slip_stack *s = pfd_stack(p);
            if (dir > 0) {
                note_ino(s, p->kind == PFD_TCP, p->sock, f);
                slip_sock__pass_out(s, p->kind == PFD_TCP, p->sock);
            }
            else
                slip_sock__pass_in(s, p->kind == PFD_TCP, p->sock), preload_sock_unref(p);
            n++;
        }
    }
    return n;
}

void preload_adopt_rights(struct msghdr *m, int ufd)
{
    if (!m->msg_control || m->msg_controllen < sizeof(struct cmsghdr))
        return;
    for (struct cmsghdr *h = CMSG_FIRSTHDR(m); h; h = CMSG_NXTHDR(m, h)) {
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int f;
            memcpy(&f, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
            adopt_passed(f, ufd);
        }
    }
}

/* ---- descriptors ---- */

static int dup_into(int oldfd, int newfd)
{
    file_fd_dup(oldfd, newfd);
    struct pfd *p = pfd_get(oldfd);
    if (!p || newfd < 0 || newfd >= g_pre.nfds)
        return newfd;
    g_pre.fds[newfd] = *p;
    if (p->kind == PFD_TCP || p->kind == PFD_UDP) {
        slip_sock__ref(pfd_stack(p), p->kind == PFD_TCP, p->sock, 1);
        if (newfd <= 2)
            preload_stdio_std(newfd);   /* inetd style: dup2(conn, 1), then printf */
    } else if (p->kind == PFD_EPOLL) {
        pfd_clear(newfd);   /* a duplicated epoll fd sees only the kernel set (see COMPLIANCE) */
    }
    return newfd;
}

int pre_dup(int fd)
{
    int n = real_dup(fd);
    return n < 0 ? n : dup_into(fd, n);
}

int pre_dup2(int fd, int fd2)
{
    if (fd == fd2)
        return real_dup2(fd, fd2);
    file_fd_gone(fd2);
    if (pfd_get(fd2) && pfd_get(fd2)->kind != PFD_EPOLL) {
        uepoll_forget_fd(fd2);
        preload_release(fd2);
    }
    int n = real_dup2(fd, fd2);
    return n < 0 ? n : dup_into(fd, n);
}

int pre_dup3(int fd, int fd2, int flags)
{
    if (fd != fd2)
        file_fd_gone(fd2);
    if (pfd_get(fd2) && fd != fd2 && pfd_get(fd2)->kind != PFD_EPOLL) {
        uepoll_forget_fd(fd2);
        preload_release(fd2);
    }
    int n = real_dup3(fd, fd2, flags);
    return n < 0 ? n : dup_into(fd, n);
}

int pre_fcntl(int fd, int cmd, long arg)
{
    struct pfd *p = pfd_get(fd);
    int r = real_fcntl(fd, cmd, arg);
    if (cmd == F_SETFL && r == 0)
        file_fd_setfl(fd, arg);
    else if ((cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && r >= 0)
        file_fd_dup(fd, r);
    if (!p || r < 0)
        return r;
    if (cmd == F_SETFL)
        p->nonblock = (arg & O_NONBLOCK) != 0;
    else if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
        dup_into(fd, r);
    return r;
}
/* Without a slot for a fork child in stack i: its references counted in this process's. */
static void fork_refs(int i, int delta)
{
    struct slip_stack *s = preload_stack_at(i);
    for (int fd = 0; fd < g_pre.nfds; fd++) {
        struct pfd *p = &g_pre.fds[fd];
        if ((p->kind == PFD_TCP || p->kind == PFD_UDP) && p->st == i)
            slip_sock__ref(s, p->kind == PFD_TCP, p->sock, delta);
    }
}

pid_t pre_fork(void)
{
    /* Both processes keep every socket: count the child's copies before it exists, in a slot of
     * its own in each stack so they are given back if it dies without closing them. */
    int slot[PRELOAD_STACKS];
    int ns = g_pre.stack ? __atomic_load_n(&g_pre.nstacks, __ATOMIC_ACQUIRE) : 0;
    if (g_pre.stack && ns < 1)
        ns = 1;
    for (int i = 0; i < ns; i++) {
        struct slip_stack *s = preload_stack_at(i);
        slot[i] = s ? slip_proc__reserve(s, true) : -1;
        if (s && slot[i] < 0)
            fork_refs(i, 1);
    }
    pid_t pid = real_fork();
    int e = errno;
    for (int i = 0; i < ns; i++) {
        struct slip_stack *s = preload_stack_at(i);
        if (s && slot[i] >= 0)
            slip_proc__started(s, slot[i], pid);
        else if (s && pid < 0)
            fork_refs(i, -1);
    }
    errno = e;
    return pid;
}

int pre_close_range(unsigned int first, unsigned int last, int flags)
{
    if (!(flags & CLOSE_RANGE_CLOEXEC))
        for (unsigned int fd = first; fd <= last && fd < (unsigned int)g_pre.nfds; fd++) {
            file_fd_gone((int)fd);
            struct pfd *p = pfd_get((int)fd);
            if (!p)
                continue;
            if (p->kind == PFD_EPOLL) {
                uepoll_forget_fd((int)fd);
                uepoll_free(p->ep);
                pfd_clear((int)fd);
            } else {
                close_sock_fd((int)fd, p);
            }
        }
    return preload_close_range_keep(first, last, flags);     /* keep.c */
}
