/* Socket calls of the POSIX layer. An accelerated socket is a real kernel socket (the fd the
 * application holds, which also reserves the port) plus a stack socket found through the fd
 * table. Anything else, and any socket that turns out not to be ours (loopback, another
 * interface), is the kernel's: the call goes to libc unchanged. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <linux/close_range.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "base/sandbox.h"
#include "preload/file.h"
#include "preload/preload.h"
#include "stack/stack.h"
#include "tcp/cc/cc.h"
#include "tcp/tcp.h"
#include "tcp/tcp_fsm.h"
#include "udp/udp.h"

#ifndef SIOCOUTQ
#define SIOCOUTQ TIOCOUTQ
#endif

struct pfd *pfd_new(int fd)
{
    if (fd < 0 || fd >= g_pre.nfds)
        return NULL;
    struct pfd *p = &g_pre.fds[fd];
    memset(p, 0, sizeof(*p));
    p->rcvtimeo_ms = p->sndtimeo_ms = -1;
    return p;
}

void pfd_clear(int fd)
{
    if (fd >= 0 && fd < g_pre.nfds)
        memset(&g_pre.fds[fd], 0, sizeof(g_pre.fds[fd]));
}

/* The kernel socket behind an accelerated fd, by inode, so that a process receiving it over a
 * UNIX socket finds the stack socket (fd passing). Recorded when the fd is sent (pass_rights),
 * not for every new socket: an fstat per accepted connection was one of the 6 syscalls nginx
 * made per connection; a new socket only clears what an earlier one at its index left. */
static void note_ino(struct slip_stack *s, bool tcp, int sock, int fd)
{
    struct stat st;
    if (fstat(fd, &st) == 0)
        slip_sock__set_ino(s, tcp, sock, (uint64_t)st.st_ino);
}

/* Drops one reference to the stack socket behind p; closes it with the last one. */
static void sock_unref(struct pfd *p)
{
    struct slip_stack *s = g_pre.stack;
    bool tcp = p->kind == PFD_TCP;
    if (slip_sock__ref(s, tcp, p->sock, -1) == 0) {
        if (tcp)
            slip_tcp__close(s, p->sock);
        else
            slip_udp__close(s, p->sock);
    }
}

void preload_release(int fd)
{
    struct pfd *p = pfd_get(fd);
    if (p && (p->kind == PFD_TCP || p->kind == PFD_UDP))
        sock_unref(p);
    pfd_clear(fd);
}

unsigned pfd_poll(struct pfd *p)
{
    if (p->kind == PFD_TCP) {
        unsigned ev = slip_tcp__poll(g_pre.stack, p->sock);
        /* SO_RCVLOWAT (Linux tcp_poll/tcp_stream_is_readable): readable only with that much
         * queued, unless the stream ended or failed. */
        struct tcp_conn_info in;
        if (p->rcvlowat && (ev & EPOLLIN) && !(ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) &&
            slip_tcp__info(g_pre.stack, p->sock, &in) == 0 && in.rcv_queued < (uint32_t)p->rcvlowat)
            ev &= ~(unsigned)(EPOLLIN | EPOLLRDNORM);
        /* POLLERR while a zero-copy completion waits on the error queue (zerocopy.c). */
        return ev | (p->zc_pending ? EPOLLERR : 0u);
    }
    if (p->kind == PFD_UDP)
        return slip_udp__poll(g_pre.stack, p->sock) | (p->zc_pending ? EPOLLERR : 0u);
    return 0;
}

/* Linux restarts a blocking socket call without a timeout (SO_RCVTIMEO/SO_SNDTIMEO) that a
 * signal handler interrupted when the handler was installed with SA_RESTART; with a timeout, or
 * without SA_RESTART, the call fails with EINTR (signal.c tells which kind of handler ran). */
static bool handlers_all_restart(void);

/* The handler that interrupted us is known when it was installed through our sigaction; one
 * installed before the library loaded (or by libc internally) falls back to the scan. */
static bool restartable(void)
{
    int r = preload_signal_restart();
    return r == 1 || (r == 0 && handlers_all_restart());
}

/* For handlers we did not see installed: restart when every handler installed has SA_RESTART. */
static bool handlers_all_restart(void)
{
    bool any = false;
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction sa;
        if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &sa) < 0)
            continue;
        void (*h)(int) = sa.sa_handler;
        if (!(sa.sa_flags & SA_SIGINFO) && (h == SIG_DFL || h == SIG_IGN))
            continue;
        if (!(sa.sa_flags & SA_RESTART))
            return false;
        any = true;
    }
    return any;
}

/* ---- many threads blocked on one stack ----
 * A thread blocked in a socket call sleeps until the stack has something for it. Sleeping on
 * the stack's wait fds (the AF_XDP sockets) is right for one thread, but with many (a client
 * with a thread per connection, a thread-per-connection server) every received frame woke every
 * one of them to poll the stack and fight for its lock, to find in most cases that the frame was
 * for someone else. So one blocked thread per process, the poller, sleeps on the wait fds and
 * polls; the others (TCP, no extra fd) sleep on their socket's futex word, which the poll that
 * delivers an event for that socket bumps and wakes (src/stack/poll.c). When the poller leaves it bumps
 * g_poller_gen and wakes one futex sleeper, which waits on that word too (futex_waitv) and takes
 * the poller's place. Without futex_waitv (Linux < 5.16) every thread sleeps on the fds. */
static uint32_t g_poller;           /* a thread of this process is the poller */
static uint32_t g_futex_sleepers;   /* threads of this process asleep on a socket futex */
static uint32_t g_poller_gen;       /* bumped when the poller leaves (private futex word) */
static int g_waitv = -1;            /* futex_waitv works: -1 not known yet, 0 no, 1 yes */

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif

/* A fork child has only the thread that forked: whatever the parent's threads were doing
 * (poller, futex sleepers) is not the child's. */
void preload_block_atfork_child(void)
{
    g_poller = 0;
    g_futex_sleepers = 0;
}

static void poller_leave(void)
{
    __atomic_store_n(&g_poller, 0, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&g_futex_sleepers, __ATOMIC_SEQ_CST)) {
        __atomic_add_fetch(&g_poller_gen, 1, __ATOMIC_SEQ_CST);
        syscall(SYS_futex, &g_poller_gen, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
}

/* Sleeps on the event words of socks[0..m) (with the generations read in gens) and on
 * g_poller_gen (pgen), for at most ms. 0 woken, timed out or a word already changed; -EINTR;
 * -ENOSYS (no futex_waitv). */
static int futex_sleep(struct slip_stack *s, const int *socks, const uint32_t *gens, int m,
                       uint32_t pgen, int ms)
{
    struct futex_waitv w[PRELOAD_FUTEX_MAX + 1];
    for (int i = 0; i < m; i++)
        w[i] = (struct futex_waitv){ .val = gens[i], .flags = FUTEX_32,
                                     .uaddr = (uintptr_t)slip_sock__tcp_evgen_word(s, socks[i]) };
    w[m] = (struct futex_waitv){ .val = pgen, .uaddr = (uintptr_t)&g_poller_gen,
                                 .flags = FUTEX_32 | FUTEX_PRIVATE_FLAG };
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    long r = syscall(SYS_futex_waitv, w, (unsigned)m + 1u, 0u, &t, CLOCK_MONOTONIC);
    if (r >= 0)
        return 0;
    if (errno == ENOSYS)
        return -ENOSYS;
    return errno == EINTR ? -EINTR : 0;     /* EAGAIN: a word changed first; ETIMEDOUT */
}

bool preload_futex_usable(void)
{
    /* futex_waitv is not on sandboxes' lists (futex is): a filtered thread polls instead. */
    return __atomic_load_n(&g_waitv, __ATOMIC_RELAXED) != 0 && !slip_sandbox__limited();
}

void preload_poller_leave(void)
{
    poller_leave();
}

int preload_futex_round(struct slip_stack *s, const int *socks, int m, bool (*ready)(void *),
                        void *arg, int left_ms)
{
    /* Counted before reading the words and before the last look: a poller that leaves from
     * now on wakes one of us, a poll that delivers for one of socks from now on bumps its
     * generation. */
    __atomic_add_fetch(&g_futex_sleepers, 1, __ATOMIC_SEQ_CST);
    uint32_t pgen = __atomic_load_n(&g_poller_gen, __ATOMIC_SEQ_CST);
    uint32_t zero = 0;
    if (__atomic_compare_exchange_n(&g_poller, &zero, 1, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
        __atomic_sub_fetch(&g_futex_sleepers, 1, __ATOMIC_SEQ_CST);
        return 1;
    }
    uint32_t gens[PRELOAD_FUTEX_MAX];
    for (int i = 0; i < m; i++)
        slip_sock__tcp_waiters(s, socks[i], 1);
    for (int i = 0; i < m; i++)
        gens[i] = __atomic_load_n(slip_sock__tcp_evgen_word(s, socks[i]), __ATOMIC_SEQ_CST);
    int fr = 0;
    if (!ready(arg)) {
        /* The callers forgot the handlers that ran before their call started; one that ran
         * since (while they polled the stack, or just now) interrupts the call here as it would
         * have interrupted the kernel's sleep: sleeping on would miss it (recv blocked on). */
        if (preload_signal_restart()) {
            fr = -EINTR;
        } else {
            int ms = left_ms < 0 || left_ms > PRELOAD_MAX_SLEEP_MS ? PRELOAD_MAX_SLEEP_MS : left_ms;
            fr = futex_sleep(s, socks, gens, m, pgen, ms);
            __atomic_store_n(&g_waitv, fr == -ENOSYS ? 0 : 1, __ATOMIC_RELAXED);
        }
    }
    for (int i = 0; i < m; i++)
        slip_sock__tcp_waiters(s, socks[i], -1);
    __atomic_sub_fetch(&g_futex_sleepers, 1, __ATOMIC_SEQ_CST);
    return fr == -EINTR ? -EINTR : 0;
}

void preload_poller_cleanup(void *poller)
{
    if (*(bool *)poller)
        poller_leave();
}

struct block_look {
    struct pfd *p;
    unsigned want;
};

static bool block_ready(void *arg)
{
    struct block_look *l = arg;
    return (pfd_poll(l->p) & (l->want | EPOLLERR | EPOLLHUP)) != 0;
}

/* A handler ran during this call outside the kernel's sleep (while the stack was polled, a
 * spin, or between the last look and the sleep): the kernel's call would have been interrupted
 * by it. true: fail with EINTR; false: go on (nothing ran, or the call restarts, and the record
 * starts over). The record used to be cleared before each sleep, which forgot such a handler and
 * blocked on: eintr_no_restart hung now and then on a loaded machine. */
static bool interrupted(int timeout_ms)
{
    if (!preload_signal_restart())
        return false;
    if (timeout_ms >= 0 || !restartable())
        return true;
    preload_signal_reset();
    return false;
}

/* *poller: this thread took the poller's place (the caller gives it up, also when cancelled). */
static int block_loop(struct pfd *p, unsigned want, int timeout_ms, int extra_fd, bool *poller)
{
    struct slip_stack *s = g_pre.stack;
    /* Another thread may close (and reuse) the fd while this one sleeps: never go on with a
     * socket the fd no longer names, it could be someone else's. */
    const uint8_t kind = p->kind;
    const int sock = p->sock;
    const bool may_futex = kind == PFD_TCP && extra_fd < 0;
    uint64_t start = preload_mono_us(), spun = 0;
    uint64_t end = timeout_ms < 0 ? UINT64_MAX : start + (uint64_t)timeout_ms * 1000u;
    int rc = 0;
    preload_signal_reset();     /* handlers that ran before the call are not its business */
    for (;;) {
        if (p->kind != kind || p->sock != sock) {
            rc = -EBADF;
            break;
        }
        slip_stack__poll(s);
        if (pfd_poll(p) & (want | EPOLLERR | EPOLLHUP))
            break;
        uint64_t now = preload_mono_us();
        if (now >= end) {
            rc = -EAGAIN;
            break;
        }
        /* Spin first when asked (latency profile), then sleep in the kernel. */
        bool spin = preload_spin_more(&spun);
        if (interrupted(timeout_ms)) {
            rc = -EINTR;
            break;
        }
        if (spin)
            continue;
        int left = end == UINT64_MAX ? -1 : (int)((end - now + 999) / 1000);
        if (may_futex && !*poller && preload_futex_usable()) {
            struct block_look look = { p, want };
            int fr = preload_futex_round(s, &sock, 1, block_ready, &look, left);
            if (fr == -EINTR && (timeout_ms >= 0 || !restartable())) {
                rc = -EINTR;
                break;
            }
            if (fr <= 0)
                continue;
            *poller = true;
        }
        struct pollfd pf[SLIP_WAIT_FDS_MAX + 1];
        int fds[SLIP_WAIT_FDS_MAX];
        int n = slip_stack__wait_fds(s, fds, SLIP_WAIT_FDS_MAX);
        if (slip_sandbox__limited())
            n = 0;          /* no more fds than the program itself would poll (sandbox.c) */
        for (int i = 0; i < n; i++)
            pf[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
        if (extra_fd >= 0)
            pf[n++] = (struct pollfd){ .fd = extra_fd, .events = POLLIN };
        int t = preload_sandbox_sleep_ms(preload_sleep_ms(s, left));
        slip_stack__sleepers(s, 1);
        /* Counted as a sleeper before the last look: a poll that delivers from now on rings the
         * doorbell we sleep on, so nothing slips in between the look and the sleep. */
        if (pfd_poll(p) & (want | EPOLLERR | EPOLLHUP)) {
            slip_stack__sleepers(s, -1);
            break;
        }
        if (interrupted(timeout_ms)) {
            slip_stack__sleepers(s, -1);
            rc = -EINTR;
            break;
        }
        int pr = real_poll(pf, (nfds_t)n, t);
        int saved = errno;
        slip_stack__sleepers(s, -1);
        slip_stack__doorbell_drain(s);
        if (pr < 0 && saved == EINTR && (timeout_ms >= 0 || !restartable())) {
            rc = -EINTR;
            break;
        }
        if (extra_fd >= 0 && (pf[n - 1].revents & POLLIN)) {
            rc = 1;
            break;
        }
    }
    return rc;
}

int preload_block(struct pfd *p, unsigned want, int timeout_ms, int extra_fd)
{
    struct { bool poller; int rc; } st = { false, 0 };
    /* recv and friends are cancellation points: a cancelled poller must hand its place on. */
    pthread_cleanup_push(preload_poller_cleanup, &st.poller);
    st.rc = block_loop(p, want, timeout_ms, extra_fd, &st.poller);
    pthread_cleanup_pop(0);
    if (st.poller)
        poller_leave();
    return st.rc;
}

/* AF_INET6 too: a dual-stack socket carries IPv4 through the stack (inet6.c); one that turns out
 * v6-only or to talk native IPv6 is released to the kernel at bind/connect. */
static bool is_inet_stream_or_dgram(int domain, int type, int protocol, bool *tcp)
{
    int t = type & 0xf;
    if (domain != AF_INET && domain != AF_INET6)
        return false;
    if (t == SOCK_STREAM && (protocol == 0 || protocol == IPPROTO_TCP)) {
        *tcp = true;
        return true;
    }
    if (t == SOCK_DGRAM && (protocol == 0 || protocol == IPPROTO_UDP)) {
        *tcp = false;
        return true;
    }
    return false;
}

int pre_socket(int domain, int type, int protocol)
{
    int fd = real_socket(domain, type, protocol);
    bool tcp;
    if (fd < 0 || !is_inet_stream_or_dgram(domain, type, protocol, &tcp))
        return fd;
    struct slip_stack *s = preload_stack();
    if (!s)
        return fd;
    int sock = tcp ? slip_tcp__open(s) : slip_udp__open(s);
    if (sock < 0) {
        static int warned;
        if (!warned++)
            fprintf(stderr, "slipstream: warning: stack socket table full (%s); further sockets use the kernel\n",
                    strerror(-sock));
        return fd;
    }
    struct pfd *p = pfd_new(fd);
    if (!p) {
        if (tcp)
            slip_tcp__close(s, sock);
        else
            slip_udp__close(s, sock);
        return fd;
    }
    p->kind = tcp ? PFD_TCP : PFD_UDP;
    p->sock = sock;
    p->nonblock = (type & SOCK_NONBLOCK) != 0;
    p->v6 = domain == AF_INET6;
    slip_sock__ref(s, tcp, sock, 1);
    slip_sock__set_ino(s, tcp, sock, 0);
    return fd;
}

int pre_bind(int fd, const struct sockaddr *sa, socklen_t len)
{
    struct pfd *p = pfd_get(fd);
    be32 addr;
    uint16_t port;
    if (!p || p->kind == PFD_EPOLL)
        return real_bind(fd, sa, len);
    if (p->kind == PFD_UDP && p->v6) {
        int r6 = pre_udp6_bind(fd, p, sa, len);     /* native IPv6 and :: (udp6.c) */
        if (r6 != 1)
            return r6;
    }
    if (p->kind == PFD_TCP && p->v6) {
        int r6 = pre_tcp6_bind(fd, p, sa, len);     /* native IPv6 and :: (tcp6.c) */
        if (r6 != 1)
            return r6;
    }
    bool v4 = !(p->v6 && sa && len >= (socklen_t)sizeof(sa_family_t) && sa->sa_family == AF_INET) &&
              pre_sa_v4(p, sa, len, true, &addr, &port);
    if (p->v6 && !v4 && !pre_v6only(fd)) {
        /* Native IPv6 is the kernel's; a bind the kernel refuses (length, family) leaves the
         * socket ours, as it leaves a kernel socket unbound. */
        int r = real_bind(fd, sa, len);
        if (r == 0)
            preload_release(fd);
        return r;
    }
    if (!v4 || !slip_stack__owns_addr(g_pre.stack, addr) || (p->v6 && pre_v6only(fd))) {
        /* Loopback, an address of another interface or a v6-only socket: the kernel's socket. */
        preload_release(fd);
        return real_bind(fd, sa, len);
    }
    if (p->kind == PFD_UDP && p->v6) {
        /* The kernel binds the application's own sockaddr_in6 (its errors are Linux's); the
         * stack takes the same IPv4 address and port. */
        if (real_bind(fd, sa, len) < 0)
            return -1;
        int rc = slip_udp__bind_bound(g_pre.stack, p->sock, addr, fd);
        return rc < 0 ? set_errno(rc) : 0;
    }
    if (p->kind == PFD_UDP) {
        int rc = slip_udp__bind_kfd(g_pre.stack, p->sock, addr, port, fd);
        return rc < 0 ? set_errno(rc) : 0;
    }
    /* Connections of the stack on that port (accepted children, TIME_WAIT) have no kernel socket
     * holding it: refuse as Linux does without SO_REUSEADDR. */
    int ra = 0;
    socklen_t rl = sizeof(ra);
    if (port && (real_getsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &ra, &rl) < 0 || !ra) &&
        slip_tcp__port_busy(g_pre.stack, addr, port))
        return set_errno(-EADDRINUSE);
    return real_bind(fd, sa, len);     /* TCP: the kernel socket holds the address until listen/connect */
}

int pre_listen(int fd, int backlog)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind != PFD_TCP)
        return real_listen(fd, backlog);
    struct sockaddr_storage ss = { 0 };
    socklen_t sl = sizeof(ss);
    be32 addr = 0;
    uint16_t port = 0;
    if (p->v6) {
        /* Native IPv6 or :: (tcp6.c: dual-stack unless v6-only); the rest on a v4-mapped
         * address here. A listen without bind gets an ephemeral port on [::] first, as Linux's
         * autobind. */
        int r6 = pre_tcp6_listen(fd, p, backlog);
        if (r6 != 1)
            return r6;
        int rc = pre_v6only(fd) ? -1 : pre_v6_autobind(fd);
        if (rc == 0)
            real_getsockname(fd, (struct sockaddr *)&ss, &sl);
        if (rc < 0 || !pre_sa_v4(p, (struct sockaddr *)&ss, sl, true, &addr, &port)) {
            preload_release(fd);
            return real_listen(fd, backlog);
        }
    } else {
        real_getsockname(fd, (struct sockaddr *)&ss, &sl);
        pre_sa_v4(p, (struct sockaddr *)&ss, sl, false, &addr, &port);
    }
    int rc = slip_tcp__listen_kfd(g_pre.stack, p->sock, addr, port, backlog > 0 ? backlog : 128, fd);
    if (rc < 0)
        return set_errno(rc);
    p->listening = 1;
    /* The kernel socket listens too: connections from this host (loopback, own addresses) reach
     * the kernel and are accepted from it, the wire's from the stack. */
    real_listen(fd, backlog);
    return 0;
}

static int accept_common(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind != PFD_TCP || !p->listening)
        return real_accept4(fd, sa, len, flags);
    struct slip_stack *s = g_pre.stack;
    for (;;) {
        be32 ra;
        uint16_t rp;
        int c = slip_tcp__accept(s, p->sock, &ra, &rp);
        if (c >= 0) {
            int nfd = real_socket(p->v6 ? AF_INET6 : AF_INET, SOCK_STREAM | (flags & (SOCK_NONBLOCK | SOCK_CLOEXEC)), 0);
            struct pfd *np = nfd >= 0 ? pfd_new(nfd) : NULL;
            if (!np) {
                int e = nfd < 0 ? errno : EMFILE;
                if (nfd >= 0)
                    real_close(nfd);
                slip_tcp__close(s, c);
                return set_errno(-e);
            }
            np->kind = PFD_TCP;
            np->sock = c;
            np->nonblock = (flags & SOCK_NONBLOCK) != 0;
            if (p->zerocopy) {
                /* Linux: an accepted socket inherits SO_ZEROCOPY from its listener. */
                int one = 1;
                real_setsockopt(nfd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one));
                np->zerocopy = 1;
            }
            np->v6 = p->v6;
            slip_sock__ref(s, true, c, 1);
            slip_sock__set_ino(s, true, c, 0);
            /* The peer as it connected, even if it has reset the connection since (Linux). */
            if (!pre_tcp6_name(np, true, sa, len, NULL))
                pre_sa_fill(np, sa, len, ra, rp);   /* IPv4, v4-mapped on an AF_INET6 socket */
            if (nfd <= 2)
                preload_stdio_std(nfd);     /* a server that closed its standard fds */
            return nfd;
        }
        if (c == -EINVAL || !p->listening)
            return set_errno(-EINVAL);      /* shut down by another thread meanwhile */
        /* A connection from this host, through the kernel. */
        struct pollfd kp = { .fd = fd, .events = POLLIN };
        if (real_poll(&kp, 1, 0) == 1)
            return real_accept4(fd, sa, len, flags);
        if (p->nonblock)
            return set_errno(-EAGAIN);
        int rc = preload_block(p, EPOLLIN, p->rcvtimeo_ms, fd);
        if (rc < 0)
            return set_errno(rc);
    }
}

int pre_accept(int fd, struct sockaddr *sa, socklen_t *len)
{
    return accept_common(fd, sa, len, 0);
}

int pre_accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
    return accept_common(fd, sa, len, flags);
}

int pre_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
    struct pfd *p = pfd_get(fd);
    be32 dst;
    uint16_t dport;
    if (!p || p->kind == PFD_EPOLL)
        return real_connect(fd, sa, len);
    struct slip_stack *s = g_pre.stack;
    if (sa && len >= (socklen_t)sizeof(sa_family_t) && sa->sa_family == AF_UNSPEC && p->kind == PFD_UDP) {
        int rc = slip_udp__connect(s, p->sock, 0, 0);
        return rc < 0 ? set_errno(rc) : 0;
    }
    if (p->kind == PFD_UDP && p->v6) {
        struct wire_ipv6_addr d6;
        uint32_t scope;
        uint16_t dp6;
        be32 la;
        uint16_t lp;
        if (pre_sa_v6(sa, len, &d6, &scope, &dp6) && slip_udp__local(s, p->sock, &la, &lp) == 0 && !lp &&
            pre_udp6_autobind(fd, p) < 0) {
            preload_release(fd);
            return real_connect(fd, sa, len);
        }
        int r6 = pre_udp6_dst(p, sa, len, &d6, &scope, &dp6);
        if (r6 == 1) {
            int rc = slip_udp6__connect(s, p->sock, &d6, dp6, scope);
            return rc < 0 ? set_errno(rc) : 0;
        }
        if (r6 < 0) {
            preload_release(fd);
            return real_connect(fd, sa, len);
        }
    }
    struct wire_ipv6_addr d6;
    uint32_t scope6 = 0;
    uint16_t dport6 = 0;
    int native6 = p->kind == PFD_TCP && p->v6 && !p->listening ? pre_tcp6_dst(p, sa, len, &d6, &scope6, &dport6) : 0;
    if (native6 > 0) {
        dst = 0;
        dport = 0;
    }
    if (native6 < 0 && !p->connecting) {
        preload_release(fd);
        return real_connect(fd, sa, len);
    }
    if (native6 == 0 && (!pre_sa_v4(p, sa, len, false, &dst, &dport) || !slip_stack__routes_via_us(s, dst) ||
                         (p->v6 && !p->connecting && pre_v6only(fd)))) {
        preload_release(fd);
        return real_connect(fd, sa, len);
    }
    if (p->kind == PFD_UDP) {
        be32 la;
        uint16_t lp;
        slip_udp__local(s, p->sock, &la, &lp);
        int rc = 0;
        if (!lp && p->v6) {
            rc = pre_udp6_autobind(fd, p);
        } else if (!lp) {
            rc = slip_udp__bind_kfd(s, p->sock, 0, 0, fd);
        }
        if (rc == 0)
            rc = slip_udp__connect(s, p->sock, dst, dport);
        return rc < 0 ? set_errno(rc) : 0;
    }
    if (p->listening)
        return set_errno(-EISCONN);     /* Linux: a socket that is not in CLOSE */
    int rc;
    if (p->connecting) {
        /* connect() again after EINPROGRESS, as Linux's __inet_stream_connect in SS_CONNECTING:
         * EALREADY while the handshake runs (a blocking socket waits for it), then the socket
         * becomes connected (0, once; EISCONN after) or reports what ended the attempt. */
        slip_stack__poll(s);
        if (!(pfd_poll(p) & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
            if (p->nonblock)
                return set_errno(-EALREADY);
            rc = preload_block(p, EPOLLOUT, p->sndtimeo_ms, -1);
            if (rc < 0)
                return set_errno(rc == -EAGAIN ? -EINPROGRESS : rc);
        }
        p->connecting = 0;
        int e = slip_tcp__so_error(s, p->sock);
        if (e)
            return set_errno(e > 0 ? -e : e);
        /* Failed, and SO_ERROR already read: Linux says ECONNABORTED. */
        return (pfd_poll(p) & EPOLLHUP) ? set_errno(-ECONNABORTED) : 0;
    } else {
        /* An AF_INET6 socket gets its ephemeral port on [::] here; the stack then finds the
         * socket bound and takes that port. */
        rc = p->v6 ? pre_v6_autobind(fd) : 0;
        if (rc == 0)
            rc = native6 > 0 ? slip_tcp6__connect_kfd(s, p->sock, &d6, dport6, scope6, fd)
                             : slip_tcp__connect_kfd(s, p->sock, dst, dport, fd);
        if (rc == -EOPNOTSUPP && native6 > 0) {
            pre_tcp6_warn(rc);      /* no IPv6 steering (an adopted attachment): the kernel's */
            preload_release(fd);
            return real_connect(fd, sa, len);
        }
        if (rc != -EINPROGRESS)
            return set_errno(rc == 0 ? -EISCONN : rc);
        if (p->nonblock) {
            p->connecting = 1;
            return set_errno(-EINPROGRESS);
        }
        /* SO_SNDTIMEO bounds a blocking connect; Linux then says EINPROGRESS and the
         * handshake goes on */
        rc = preload_block(p, EPOLLOUT, p->sndtimeo_ms, -1);
        if (rc < 0) {
            p->connecting = 1;
            return set_errno(rc == -EAGAIN ? -EINPROGRESS : rc);
        }
    }
    int e = slip_tcp__so_error(s, p->sock);
    return e > 0 ? set_errno(-e) : (e < 0 ? set_errno(e) : 0);
}

int pre_shutdown(int fd, int how)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind != PFD_TCP)
        return real_shutdown(fd, how);
    int rc = slip_tcp__shutdown(g_pre.stack, p->sock, how);
    if (rc == 0 && p->listening && how != SHUT_WR) {
        /* it no longer listens: nor does its kernel twin (a thread blocked in accept wakes) */
        p->listening = 0;
        real_shutdown(fd, how);
    }
    return rc < 0 ? set_errno(rc) : 0;
}

/* close() of an accelerated socket's fd. Its epoll registrations go with it unless another fd
 * of this process still refers to the socket (dup): the kernel keys them on the open file. */
static void close_sock_fd(int fd, struct pfd *p)
{
    uint8_t kind = p->kind;
    int sock = p->sock;
    preload_release(fd);
    if (slip_proc__held(g_pre.stack, kind == PFD_TCP, sock) > 0) {
        uepoll_detach_fd(fd, kind, sock);
    } else {
        uepoll_forget_fd(fd);
        uepoll_forget_sock(kind, sock);
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

int pre_getsockname(int fd, struct sockaddr *sa, socklen_t *len)
{
    struct pfd *p = pfd_get(fd);
    be32 a;
    uint16_t port;
    int e6;
    if (p && p->kind == PFD_TCP && pre_tcp6_name(p, false, sa, len, &e6))
        return 0;
    /* An AF_INET6 socket on any address: its kernel socket is bound the same way, and says
     * :: or ::ffff:0.0.0.0 as the application bound it. */
    if (p && p->kind == PFD_TCP && slip_tcp__local(g_pre.stack, p->sock, &a, &port) == 0 && port &&
        (a || !p->v6)) {
        pre_sa_fill(p, sa, len, a, port);
        return 0;
    }
    if (p && p->kind == PFD_UDP && slip_udp__local(g_pre.stack, p->sock, &a, &port) == 0 && port &&
        (a || !p->v6)) {
        pre_sa_fill(p, sa, len, a, port);
        return 0;
    }
    return real_getsockname(fd, sa, len);
}

int pre_getpeername(int fd, struct sockaddr *sa, socklen_t *len)
{
    struct pfd *p = pfd_get(fd);
    be32 a;
    uint16_t port;
    if (!p || p->kind == PFD_EPOLL)
        return real_getpeername(fd, sa, len);
    if (p->kind == PFD_UDP && p->v6) {
        struct udp_peer peer;
        int rc = slip_udp6__peer(g_pre.stack, p->sock, &peer);
        if (rc < 0)
            return set_errno(rc);
        pre_sa_fill_peer(p, sa, len, &peer);
        return 0;
    }
    int e6;
    if (p->kind == PFD_TCP && pre_tcp6_name(p, true, sa, len, &e6))
        return e6 < 0 ? set_errno(e6) : 0;
    int rc = p->kind == PFD_TCP ? slip_tcp__peer(g_pre.stack, p->sock, &a, &port)
                                : slip_udp__peer(g_pre.stack, p->sock, &a, &port);
    if (rc < 0)
        return set_errno(rc);
    pre_sa_fill(p, sa, len, a, port);
    return 0;
}

/* As Linux's sock_getsockopt: a short optlen gets the first bytes of the value, not EINVAL. */
static int put_int(void *val, socklen_t *len, int v)
{
    if (!len || (int)*len < 0)
        return set_errno(-EINVAL);
    socklen_t n = SLIP_MIN(*len, (socklen_t)sizeof(v));
    if (n && !val)
        return set_errno(-EFAULT);
    memcpy(val, &v, (size_t)n);
    *len = n;
    return 0;
}

static int tcp_info_fill(struct pfd *p, int fd, void *val, socklen_t *len)
{
    struct tcp_conn_info in;
    int rc = slip_tcp__info(g_pre.stack, p->sock, &in);
    if (rc < 0)
        return set_errno(rc);
    rc = pre_tcpinfo__fill(fd, &in, val, len);     /* tcpinfo.c */
    return rc < 0 ? set_errno(rc) : 0;
}

/* The engine's option for a socket option that maps to one int, or -1. */
static int tcp_opt_of(int level, int opt)
{
    if (level == IPPROTO_TCP) {
        switch (opt) {
        case TCP_NODELAY: return TCPO_NODELAY;
        case TCP_CORK: return TCPO_CORK;
        case TCP_KEEPIDLE: return TCPO_KEEPIDLE;
        case TCP_KEEPINTVL: return TCPO_KEEPINTVL;
        case TCP_KEEPCNT: return TCPO_KEEPCNT;
        case TCP_MAXSEG: return TCPO_MAXSEG;
        }
    } else if (level == SOL_SOCKET) {
        switch (opt) {
        case SO_KEEPALIVE: return TCPO_KEEPALIVE;
        case SO_RCVBUF: return TCPO_RCVBUF;
        case SO_SNDBUF: return TCPO_SNDBUF;
        case SO_REUSEPORT: return TCPO_REUSEPORT;   /* listen() also reads it from the kernel socket */
        }
    }
    return -1;
}

int pre_getsockopt(int fd, int level, int opt, void *val, socklen_t *len)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind == PFD_EPOLL)
        return real_getsockopt(fd, level, opt, val, len);
    struct slip_stack *s = g_pre.stack;
    int v;
    if (level == SOL_SOCKET && opt == SO_ERROR) {
        int e = p->kind == PFD_TCP ? slip_tcp__so_error(s, p->sock) : slip_udp__so_error(s, p->sock);
        return put_int(val, len, e < 0 ? -e : e);
    }
    if (p->kind == PFD_TCP) {
        if (level == IPPROTO_TCP && opt == TCP_INFO)
            return tcp_info_fill(p, fd, val, len);
        int o = tcp_opt_of(level, opt);
        if (o >= 0 && slip_tcp__getopt(s, p->sock, o, &v) == 0)
            return put_int(val, len, v);
    }
    return real_getsockopt(fd, level, opt, val, len);
}

static int timeo_ms(const void *val, socklen_t len)
{
    struct timeval tv;
    if (!val || len < (socklen_t)sizeof(tv))
        return -1;
    memcpy(&tv, val, sizeof(tv));
    if (tv.tv_sec == 0 && tv.tv_usec == 0)
        return -1;
    return (int)(tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
}

static int setsockopt_sock(struct pfd *p, int fd, int level, int opt, const void *val, socklen_t len);

int pre_setsockopt(int fd, int level, int opt, const void *val, socklen_t len)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind == PFD_EPOLL)
        return real_setsockopt(fd, level, opt, val, len);
    int rc = setsockopt_sock(p, fd, level, opt, val, len);
    preload_ready_epoch_bump();     /* after it: SO_RCVLOWAT or SO_SNDBUF may make it ready */
    return rc;
}

static int setsockopt_sock(struct pfd *p, int fd, int level, int opt, const void *val, socklen_t len)
{
    /* The kernel socket gets every option too: it validates them (EINVAL, ENOPROTOOPT exactly as
     * Linux) and getsockopt of options we do not keep reads them back from it. */
    be32 la;
    uint16_t lp = 0;
    if (p->v6 && level == IPPROTO_IPV6 && opt == IPV6_V6ONLY && p->kind == PFD_TCP &&
        slip_tcp__local(g_pre.stack, p->sock, &la, &lp) == 0 && lp)
        return set_errno(-EINVAL);  /* Linux: not once it has a port (an accepted socket's
                                       kernel twin has none to refuse it) */
    int krc = real_setsockopt(fd, level, opt, val, len);
    if (krc < 0)
        return krc;
    if (level == SOL_SOCKET && opt == SO_RCVTIMEO)
        p->rcvtimeo_ms = timeo_ms(val, len);
    if (level == SOL_SOCKET && opt == SO_SNDTIMEO)
        p->sndtimeo_ms = timeo_ms(val, len);
    int v = 0;
    if (val && len >= (socklen_t)sizeof(int))
        memcpy(&v, val, sizeof(v));
    if (level == SOL_SOCKET && opt == SO_ZEROCOPY)
        p->zerocopy = v != 0;       /* the kernel socket accepted it: completions come from zerocopy.c */
    if (p->kind == PFD_UDP && p->v6 && level == IPPROTO_IPV6 && opt == IPV6_RECVPKTINFO)
        p->recvpktinfo6 = v != 0;   /* udp6.c adds IPV6_PKTINFO to the stack's IPv6 datagrams */
    if (p->kind == PFD_UDP && p->v6 && level == IPPROTO_IPV6 && (opt == IPV6_TCLASS || opt == IPV6_UNICAST_HOPS)) {
        /* For the stack's native IPv6 datagrams: the value as the kernel socket kept it (-1
         * becomes its default). */
        int kv = 0;
        socklen_t kl = sizeof(kv);
        if (real_getsockopt(fd, level, opt, &kv, &kl) == 0)
            slip_udp6__setopt(g_pre.stack, p->sock, opt, kv);
        return 0;
    }
    if (p->kind != PFD_TCP)
        return 0;
    if (p->v6 && level == IPPROTO_IPV6 && (opt == IPV6_TCLASS || opt == IPV6_UNICAST_HOPS)) {
        /* For the stack's IPv6 segments: the value as the kernel socket kept it. */
        int kv = 0;
        socklen_t kl = sizeof(kv);
        if (real_getsockopt(fd, level, opt, &kv, &kl) == 0)
            slip_tcp__setopt(g_pre.stack, p->sock, opt == IPV6_TCLASS ? TCPO_TCLASS : TCPO_HOPS, kv);
        return 0;
    }
    if (level == SOL_SOCKET && opt == SO_RCVLOWAT) {
        int lw = 0;     /* the value as the kernel socket kept it (Linux caps it) */
        socklen_t lwl = sizeof(lw);
        real_getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lw, &lwl);
        p->rcvlowat = lw > 1 ? lw : 0;
    }
    int o = tcp_opt_of(level, opt);
    if (level == SOL_SOCKET && opt == SO_LINGER && len >= (socklen_t)sizeof(struct linger)) {
        struct linger l;
        memcpy(&l, val, sizeof(l));
        o = TCPO_LINGER;
        v = l.l_onoff ? l.l_linger : -1;
    }
    if (level == IPPROTO_TCP && opt == TCP_CONGESTION) {
        char name[16] = "";
        memcpy(name, val, SLIP_MIN((size_t)len, sizeof(name) - 1));
        int cc = tcp_cc__by_name(name);
        if (cc < 0)
            return 0;   /* the kernel accepted it; we keep our default */
        o = TCPO_CONGESTION;
        v = cc;
    }
    if ((level == SOL_SOCKET && (opt == SO_RCVBUF || opt == SO_SNDBUF)))
        v *= 2;         /* Linux doubles the value for bookkeeping overhead */
    if (o >= 0) {
        int rc = slip_tcp__setopt(g_pre.stack, p->sock, o, v);
        if (rc < 0 && rc != -EINVAL)
            return set_errno(rc);
    }
    return 0;
}

/* ---- data ---- */

static ssize_t tcp_send_data(struct pfd *p, const struct iovec *iov, int iovcnt, int flags);

static ssize_t tcp_send(struct pfd *p, const struct iovec *iov, int iovcnt, int flags)
{
    ssize_t n = tcp_send_data(p, iov, iovcnt, flags);
    /* Linux ignores MSG_ZEROCOPY on a socket without SO_ZEROCOPY. */
    if (n > 0 && (flags & MSG_ZEROCOPY) && p->zerocopy)
        pre_zc__sent(p);
    return n;
}

static ssize_t tcp_send_data(struct pfd *p, const struct iovec *iov, int iovcnt, int flags)
{
    struct slip_stack *s = g_pre.stack;
    size_t total = 0, done = 0;
    for (int i = 0; i < iovcnt; i++)
        total += iov[i].iov_len;
    bool nb = p->nonblock || (flags & MSG_DONTWAIT);
    for (int i = 0; i < iovcnt; i++)
        if (!iov[i].iov_base && iov[i].iov_len)
            return set_errno(-EFAULT);  /* the kernel's copy would fault; ours would crash */
    for (int i = 0; i < iovcnt;) {
        size_t off = 0;
        for (int k = 0; k < i; k++)
            off += iov[k].iov_len;
        size_t skip = done - off;
        if (skip >= iov[i].iov_len) {
            i++;
            continue;
        }
        ssize_t n = slip_tcp__send(s, p->sock, (const char *)iov[i].iov_base + skip, iov[i].iov_len - skip,
                                   (flags & MSG_MORE) || done + (iov[i].iov_len - skip) < total);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n == -EAGAIN || n == -ENOBUFS) {
            if (nb)
                return done ? (ssize_t)done : set_errno(-EAGAIN);
            /* A blocking send waits until all of it is queued, as Linux's tcp_sendmsg does: only
             * a signal or SO_SNDTIMEO ends it early, with what was queued so far. A program that
             * does not loop on write() must not lose the rest. */
            int rc = preload_block(p, EPOLLOUT, p->sndtimeo_ms, -1);
            if (rc < 0)
                return done ? (ssize_t)done : set_errno(rc);
            continue;
        }
        if (done)
            return (ssize_t)done;
        if (n == -ENOTCONN)
            n = -EPIPE;     /* Linux (sk_stream_wait_connect): not connected yet/any more is EPIPE */
        if (n == -EPIPE && !(flags & MSG_NOSIGNAL))
            raise(SIGPIPE);
        return set_errno((int)n);
    }
    return (ssize_t)done;
}

static ssize_t tcp_recv(struct pfd *p, void *buf, size_t len, int flags)
{
    struct slip_stack *s = g_pre.stack;
    bool nb = p->nonblock || (flags & MSG_DONTWAIT);
    size_t done = 0;
    if (len == 0)
        return 0;
    if (p->rcvlowat && !nb && !(flags & MSG_WAITALL) && !(pfd_poll(p) & EPOLLIN)) {
        /* SO_RCVLOWAT: a blocking read waits for that much (pfd_poll counts it); on SO_RCVTIMEO
         * it returns what is there, as Linux. */
        int rc = preload_block(p, EPOLLIN | EPOLLRDHUP, p->rcvtimeo_ms, -1);
        if (rc == -EAGAIN)
            nb = true;
        else if (rc < 0)
            return set_errno(rc);
    }
    for (;;) {
        ssize_t n = slip_tcp__recv(s, p->sock, (char *)buf + done, len - done, (flags & MSG_PEEK) != 0);
        if (n > 0) {
            done += (size_t)n;
            if (!(flags & MSG_WAITALL) || done == len || (flags & MSG_PEEK))
                return (ssize_t)done;
            continue;
        }
        if (n == 0)
            return (ssize_t)done;
        if (n != -EAGAIN)
            return done ? (ssize_t)done : set_errno((int)n);
        if (nb)
            return done ? (ssize_t)done : set_errno(-EAGAIN);
        int rc = preload_block(p, EPOLLIN | EPOLLRDHUP, p->rcvtimeo_ms, -1);
        if (rc < 0)
            return done ? (ssize_t)done : set_errno(rc);
    }
}

static ssize_t udp_sendv(int fd, struct pfd *p, const struct iovec *iov, int iovcnt, const struct sockaddr *sa,
                         socklen_t sl, int flags)
{
    be32 dst = 0;
    uint16_t dport = 0;
    if (p->v6 && sa && sl >= (socklen_t)sizeof(sa_family_t) && sa->sa_family == AF_UNSPEC)
        sa = NULL;      /* udpv6_sendmsg: no address, the connected peer's */
    if (p->v6) {
        be32 la;
        uint16_t lp;
        if (slip_udp__local(g_pre.stack, p->sock, &la, &lp) == 0 && !lp) {
            /* Unbound: bind the kernel socket to [::]:0 and the stack to its port (both
             * families unless v6-only), so that every datagram leaves from one port, whichever
             * of the stack or the kernel socket (loopback) sends it, as on Linux. */
            int rc = pre_udp6_autobind(fd, p);
            if (rc < 0) {
                preload_release(fd);
                struct msghdr m = { .msg_name = (void *)sa, .msg_namelen = sa ? sl : 0,
                                    .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt };
                return real_sendmsg(fd, &m, flags);
            }
        }
    }
    if (p->v6) {
        struct wire_ipv6_addr d6;
        uint32_t scope = 0;
        uint16_t dp6 = 0;
        struct udp_peer peer;
        int r6 = sa ? pre_udp6_dst(p, sa, sl, &d6, &scope, &dp6)
                    : (slip_udp6__peer(g_pre.stack, p->sock, &peer) == 0 && peer.v6);
        if (r6 < 0) {
            struct msghdr m = { .msg_name = (void *)sa, .msg_namelen = sl, .msg_iov = (struct iovec *)iov,
                                .msg_iovlen = (size_t)iovcnt };
            return real_sendmsg(fd, &m, flags);
        }
        if (r6 == 1) {
            if (slip_udp__poll(g_pre.stack, p->sock) & SLIP_EV_ERR) {
                int e = slip_udp__so_error(g_pre.stack, p->sock);
                if (e)
                    return set_errno(e < 0 ? e : -e);
            }
            ssize_t n = slip_udp6__sendmsg(g_pre.stack, p->sock, iov, iovcnt, sa ? &d6 : NULL, dp6, scope);
            return n < 0 ? set_errno((int)n) : n;
        }
    }
    if (sa) {
        bool v4 = pre_sa_v4(p, sa, sl, false, &dst, &dport);
        if (!v4 && !p->v6)
            return set_errno(-EINVAL);
        uint32_t seq = slip_stack__ctl_seq(g_pre.stack) | 1u;     /* never 0: 0 means no answer */
        bool via_us = v4 && p->via_us_seq == seq && p->via_us_dst == dst;
        if (!via_us && v4 && slip_stack__routes_via_us(g_pre.stack, dst)) {
            p->via_us_dst = dst;
            p->via_us_seq = seq;
            via_us = true;
        }
        if (!via_us) {
            /* Loopback or another interface: the kernel socket (same port) sends it, and its
             * replies are read from the kernel socket too (udp_recv). */
            struct msghdr m = { .msg_name = (void *)sa, .msg_namelen = sl, .msg_iov = (struct iovec *)iov,
                                .msg_iovlen = (size_t)iovcnt };
            return real_sendmsg(fd, &m, flags);
        }
    }
    /* A pending error (ICMP port unreachable on a connected socket) is reported by the next send
     * too, once, as Linux's sock_alloc_send_skb does. */
    if (slip_udp__poll(g_pre.stack, p->sock) & SLIP_EV_ERR) {
        int e = slip_udp__so_error(g_pre.stack, p->sock);
        if (e)
            return set_errno(e < 0 ? e : -e);
    }
    ssize_t n = slip_udp__sendmsg(g_pre.stack, p->sock, iov, iovcnt, dst, dport);
    return n < 0 ? set_errno((int)n) : n;
}

static ssize_t udp_recv(int fd, struct pfd *p, void *buf, size_t len, int flags, struct sockaddr *sa, socklen_t *sl,
                        int *mflags, struct udp_peer *peer_out)
{
    struct slip_stack *s = g_pre.stack;
    bool nb = p->nonblock || (flags & MSG_DONTWAIT);
    for (;;) {
        be32 a;
        uint16_t port;
        struct udp_peer peer;
        unsigned uf = UDP_RECV_TRUNC | ((flags & MSG_PEEK) ? UDP_RECV_PEEK : 0);
        /* An AF_INET6 socket may hold datagrams of both families (udp6.c). */
        ssize_t full = p->v6 ? slip_udp6__recvfrom(s, p->sock, buf, len, &peer, uf)
                             : slip_udp__recvfrom(s, p->sock, buf, len, &a, &port, uf);
        if (full >= 0) {
            if (p->v6)
                pre_sa_fill_peer(p, sa, sl, &peer);
            else
                pre_sa_fill(p, sa, sl, a, port);
            if (peer_out && p->v6)
                *peer_out = peer;
            if (mflags && (size_t)full > len)
                *mflags |= MSG_TRUNC;
            return (flags & MSG_TRUNC) ? full : (ssize_t)SLIP_MIN((size_t)full, len);
        }
        if (full != -EAGAIN)
            return set_errno((int)full);
        /* Datagrams from this host (loopback) arrive on the kernel socket. */
        struct pollfd kp = { .fd = fd, .events = POLLIN };
        if (real_poll(&kp, 1, 0) == 1)
            return real_recvfrom(fd, buf, len, flags | MSG_DONTWAIT, sa, sl);
        if (nb)
            return set_errno(-EAGAIN);
        int rc = preload_block(p, EPOLLIN, p->rcvtimeo_ms, fd);
        if (rc < 0)
            return set_errno(rc);
    }
}

static int pass_rights(const struct msghdr *m, int dir);

ssize_t pre_sendmsg(int fd, const struct msghdr *m, int flags)
{
    struct pfd *p = pfd_get(fd);
    if (!p && g_pre.stack && m->msg_control) {
        int passed = pass_rights(m, 1);
        ssize_t r = real_sendmsg(fd, m, flags);
        if (r < 0 && passed) {
            int e = errno;
            pass_rights(m, -1);
            errno = e;
        }
        return r;
    }
    if (!p || p->kind == PFD_EPOLL)
        return real_sendmsg(fd, m, flags);
    if (m->msg_iovlen > UIO_MAXIOV)
        return set_errno(-EMSGSIZE);    /* as the kernel's ___sys_sendmsg */
    if (p->kind == PFD_UDP)
        return udp_sendv(fd, p, m->msg_iov, (int)m->msg_iovlen, m->msg_name, m->msg_namelen, flags);
    return tcp_send(p, m->msg_iov, (int)m->msg_iovlen, flags);
}

ssize_t pre_sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t sl)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind == PFD_EPOLL)
        return real_sendto(fd, buf, n, flags, sa, sl);
    struct iovec v = { (void *)buf, n };
    if (p->kind == PFD_UDP)
        return udp_sendv(fd, p, &v, 1, sa, sl, flags);
    return tcp_send(p, &v, 1, flags);
}

ssize_t pre_send(int fd, const void *buf, size_t n, int flags)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind == PFD_EPOLL)
        return real_send(fd, buf, n, flags);
    return pre_sendto(fd, buf, n, flags, NULL, 0);
}

ssize_t pre_write(int fd, const void *buf, size_t n)
{
    struct pfd *p = pfd_get(fd);
    if (!p && bfd_get(fd))
        return file_write(fd, buf, n);
    if (!p || p->kind == PFD_EPOLL)
        return real_write(fd, buf, n);
    return pre_sendto(fd, buf, n, 0, NULL, 0);
}

ssize_t pre_writev(int fd, const struct iovec *iov, int n)
{
    struct pfd *p = pfd_get(fd);
    if (!p && bfd_get(fd))
        return file_rw(fd, true, iov, n, -1, 0);
    if (!p || p->kind == PFD_EPOLL)
        return real_writev(fd, iov, n);
    if (n < 0 || n > UIO_MAXIOV)
        return set_errno(-EINVAL);      /* as the kernel's import_iovec */
    if (p->kind == PFD_UDP)
        return udp_sendv(fd, p, iov, n, NULL, 0, 0);
    return tcp_send(p, iov, n, 0);
}

ssize_t pre_recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *sa, socklen_t *sl)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind == PFD_EPOLL)
        return real_recvfrom(fd, buf, n, flags, sa, sl);
    if (p->kind == PFD_UDP)
        return udp_recv(fd, p, buf, n, flags, sa, sl, NULL, NULL);
    ssize_t r = tcp_recv(p, buf, n, flags);
    if (r >= 0 && sa && sl)
        *sl = 0;
    return r;
}

ssize_t pre_recv(int fd, void *buf, size_t n, int flags)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind == PFD_EPOLL)
        return real_recv(fd, buf, n, flags);
    return pre_recvfrom(fd, buf, n, flags, NULL, NULL);
}

ssize_t pre_read(int fd, void *buf, size_t n)
{
    struct pfd *p = pfd_get(fd);
    if (!p && bfd_get(fd))
        return file_read(fd, buf, n);
    if (!p || p->kind == PFD_EPOLL)
        return real_read(fd, buf, n);
    return pre_recvfrom(fd, buf, n, 0, NULL, NULL);
}

ssize_t pre_readv(int fd, const struct iovec *iov, int n)
{
    struct pfd *p = pfd_get(fd);
    if (!p && bfd_get(fd))
        return file_rw(fd, false, iov, n, -1, 0);
    if (!p || p->kind == PFD_EPOLL)
        return real_readv(fd, iov, n);
    if (n < 0 || n > UIO_MAXIOV)
        return set_errno(-EINVAL);
    ssize_t total = 0;
    for (int i = 0; i < n; i++) {
        if (!iov[i].iov_len)
            continue;
        /* Only the first piece may block; later ones take what is already there. */
        ssize_t r = pre_recvfrom(fd, iov[i].iov_base, iov[i].iov_len, total ? MSG_DONTWAIT : 0, NULL, NULL);
        if (r < 0)
            return total ? total : -1;
        total += r;
        if ((size_t)r < iov[i].iov_len)
            break;
    }
    return total;
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
    bool tcp;
    int sock = s ? slip_sock__by_ino(s, (uint64_t)st.st_ino, &tcp) : -ENOENT;
    if (sock < 0)
        return;
    struct pfd *p = pfd_new(fd);
    if (!p)
        return;
    int acc = 0;
    socklen_t al = sizeof(acc);
    p->kind = tcp ? PFD_TCP : PFD_UDP;
    p->sock = sock;
    p->nonblock = (real_fcntl(fd, F_GETFL) & O_NONBLOCK) != 0;
    p->v6 = dom == AF_INET6;
    p->listening = getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &al) == 0 && acc;
    slip_sock__pass_in(s, tcp, sock);
}

/* Before a UNIX socket message carries accelerated fds away: a reference travels with each. */
static int pass_rights(const struct msghdr *m, int dir)
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
            if (dir > 0) {
                note_ino(g_pre.stack, p->kind == PFD_TCP, p->sock, f);
                slip_sock__pass_out(g_pre.stack, p->kind == PFD_TCP, p->sock);
            }
            else
                slip_sock__pass_in(g_pre.stack, p->kind == PFD_TCP, p->sock), sock_unref(p);
            n++;
        }
    }
    return n;
}

static void adopt_rights(struct msghdr *m, int ufd)
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

ssize_t pre_recvmsg(int fd, struct msghdr *m, int flags)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind == PFD_EPOLL) {
        ssize_t r = real_recvmsg(fd, m, flags);
        if (r >= 0 && !p)
            adopt_rights(m, fd);
        return r;
    }
    if (m->msg_iovlen > UIO_MAXIOV)
        return set_errno(-EMSGSIZE);    /* as the kernel's ___sys_recvmsg */
    if (flags & MSG_ERRQUEUE) {
        /* Our error queue holds zero-copy completions only; never the stream's data. */
        ssize_t r = pre_zc__recv_errqueue(p, m);
        return r < 0 ? set_errno((int)r) : r;
    }
    m->msg_flags = 0;
    size_t ctl_room = m->msg_control ? m->msg_controllen : 0;
    m->msg_controllen = 0;
    if (p->kind == PFD_UDP) {
        /* Gather into the first iovec piece when there is one; else a bounce buffer. */
        char *bounce = preload_scratch(SCRATCH_RECVMSG);
        if (!bounce)
            return set_errno(-ENOMEM);
        size_t cap = 0;
        for (size_t i = 0; i < m->msg_iovlen; i++)
            cap += m->msg_iov[i].iov_len;
        socklen_t nl = m->msg_namelen;
        struct udp_peer peer = { 0 };
        size_t ctl_cap = ctl_room;
        ssize_t r = udp_recv(fd, p, bounce, SLIP_MIN(cap, (size_t)PRELOAD_SCRATCH_BYTES), flags & ~MSG_TRUNC,
                             m->msg_name, m->msg_name ? &nl : NULL, &m->msg_flags, &peer);
        if (r < 0)
            return r;
        m->msg_namelen = m->msg_name ? nl : 0;
        if (p->recvpktinfo6 && peer.has_dst)
            pre_put_pktinfo6(m, ctl_cap, &peer.dst, peer.ifindex);
        size_t off = 0;
        for (size_t i = 0; i < m->msg_iovlen && off < (size_t)r; i++) {
            size_t k = SLIP_MIN(m->msg_iov[i].iov_len, (size_t)r - off);
            memcpy(m->msg_iov[i].iov_base, bounce + off, k);
            off += k;
        }
        return r;
    }
    m->msg_namelen = 0;
    ssize_t total = 0;
    for (size_t i = 0; i < m->msg_iovlen; i++) {
        if (!m->msg_iov[i].iov_len)
            continue;
        ssize_t r = tcp_recv(p, m->msg_iov[i].iov_base, m->msg_iov[i].iov_len, total ? (flags | MSG_DONTWAIT) : flags);
        if (r < 0)
            return total ? total : -1;
        total += r;
        if ((size_t)r < m->msg_iov[i].iov_len)
            break;
    }
    return total;
}

ssize_t pre_sendfile(int out, int in, off_t *off, size_t n)
{
    struct pfd *p = pfd_get(out);
    if (!p || p->kind != PFD_TCP)
        return real_sendfile(out, in, off, n);
    ssize_t zr;
    if (file_sendfile(p, in, off, n, &zr))      /* the block path: the file read into frames */
        return zr;
    char *buf = preload_scratch(SCRATCH_SENDFILE);
    if (!buf)
        return set_errno(-ENOMEM);
    size_t done = 0;
    while (done < n) {
        size_t want = SLIP_MIN(n - done, (size_t)PRELOAD_SCRATCH_BYTES);
        ssize_t r = off ? pread(in, buf, want, *off + (off_t)done) : real_read(in, buf, want);
        if (r < 0)
            return done ? (ssize_t)done : -1;
        if (r == 0)
            break;
        struct iovec v = { buf, (size_t)r };
        ssize_t w = tcp_send(p, &v, 1, 0);
        if (w < 0) {
            if (done)
                break;
            return -1;
        }
        done += (size_t)w;
        if (w < r) {
            if (!off)
                lseek(in, (off_t)w - r, SEEK_CUR);   /* give back what was not sent */
            break;
        }
    }
    if (off)
        *off += (off_t)done;
    return (ssize_t)done;
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
        slip_sock__ref(g_pre.stack, p->kind == PFD_TCP, p->sock, 1);
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

int pre_ioctl(int fd, unsigned long req, void *arg)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind == PFD_EPOLL)
        return real_ioctl(fd, req, arg);
    if (req == FIONBIO) {
        int r = real_ioctl(fd, req, arg);
        if (r == 0 && arg)
            p->nonblock = *(int *)arg != 0;
        return r;
    }
    if ((req == FIONREAD || req == SIOCOUTQ) && arg) {
        int v = 0;
        if (p->kind == PFD_TCP) {
            struct tcp_conn_info in;
            if (slip_tcp__info(g_pre.stack, p->sock, &in) == 0)
                v = (int)(req == FIONREAD ? in.rcv_queued : in.snd_queued + in.unacked);
        } else if (req == FIONREAD) {
            char c;
            ssize_t n = slip_udp__recvfrom(g_pre.stack, p->sock, &c, 1, NULL, NULL, UDP_RECV_PEEK | UDP_RECV_TRUNC);
            v = n > 0 ? (int)n : 0;
        }
        *(int *)arg = v;
        return 0;
    }
    return real_ioctl(fd, req, arg);
}

pid_t pre_fork(void)
{
    /* Both processes keep every socket: count the child's copies before it exists, in a slot of
     * its own so they are given back if it dies without closing them. */
    struct slip_stack *s = g_pre.stack;
    int slot = s ? slip_proc__reserve(s, true) : -1;
    if (s && slot < 0)
        for (int fd = 0; fd < g_pre.nfds; fd++) {
            struct pfd *p = &g_pre.fds[fd];
            if (p->kind == PFD_TCP || p->kind == PFD_UDP)
                slip_sock__ref(s, p->kind == PFD_TCP, p->sock, 1);
        }
    pid_t pid = real_fork();
    if (s && slot >= 0) {
        int e = errno;
        slip_proc__started(s, slot, pid);
        errno = e;
    } else if (pid < 0 && s) {
        for (int fd = 0; fd < g_pre.nfds; fd++) {
            struct pfd *p = &g_pre.fds[fd];
            if (p->kind == PFD_TCP || p->kind == PFD_UDP)
                slip_sock__ref(s, p->kind == PFD_TCP, p->sock, -1);
        }
    }
    return pid;
}

int pre_sendmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags)
{
    struct pfd *p = pfd_get(fd);
    /* A kernel socket (a UNIX one) may carry accelerated fds in SCM_RIGHTS: one message at a
     * time through pre_sendmsg, which accounts for them. */
    bool rights = false;
    for (unsigned int i = 0; !p && g_pre.stack && i < n && !rights; i++)
        rights = v[i].msg_hdr.msg_control != NULL;
    if ((!p || p->kind == PFD_EPOLL) && !rights)
        return real_sendmmsg(fd, v, n, flags);
    unsigned int i = 0;
    for (; i < n; i++) {
        ssize_t r = pre_sendmsg(fd, &v[i].msg_hdr, flags);
        if (r < 0)
            return i ? (int)i : -1;
        v[i].msg_len = (unsigned int)r;
    }
    return (int)i;
}

int pre_recvmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags, struct timespec *t)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind == PFD_EPOLL)
        return real_recvmmsg(fd, v, n, flags, t);
    unsigned int i = 0;
    for (; i < n; i++) {
        /* The first may block (unless MSG_DONTWAIT); later ones take what is queued (Linux also
         * returns what it has once one arrived, with MSG_WAITFORONE). */
        int f = i ? ((flags & ~MSG_WAITFORONE) | MSG_DONTWAIT) : (flags & ~MSG_WAITFORONE);
        ssize_t r = pre_recvmsg(fd, &v[i].msg_hdr, f);
        if (r < 0)
            return i ? (int)i : -1;
        v[i].msg_len = (unsigned int)r;
    }
    return (int)i;
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
