/* Socket calls of the POSIX layer: the per-fd table, readiness, and a socket's life from
 * socket() to shutdown() (bind, listen, accept, connect, its names). An accelerated socket is a
 * real kernel socket (the fd the application holds, which also reserves the port) plus a stack
 * socket found through the fd table. Anything else, and any socket that turns out not to be ours
 * (loopback, another interface), is the kernel's: the call goes to libc unchanged. Data calls are
 * in sockio.c, options in sockopt.c, descriptors (close, dup, fcntl, fork, fd passing) in
 * sockfd.c, blocking in sockwait.c. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "preload/preload.h"
#include "stack/stack.h"

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

/* Drops one reference to the stack socket behind p; closes it with the last one. */
void preload_sock_unref(struct pfd *p)
{
    struct slip_stack *s = pfd_stack(p);
    bool tcp = p->kind == PFD_TCP;
    if (p->left_sock)
        preload_worker_forget(p);
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
        preload_sock_unref(p);
    pfd_clear(fd);
}

unsigned pfd_poll(struct pfd *p)
{
    if (p->kind == PFD_TCP) {
        unsigned ev = slip_tcp__poll(pfd_stack(p), p->sock);
        /* SO_RCVLOWAT (Linux tcp_poll/tcp_stream_is_readable): readable only with that much
         * queued, unless the stream ended or failed. */
        struct slip_tcp_info in;
        if (p->rcvlowat && (ev & EPOLLIN) && !(ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) &&
            slip_tcp__info(pfd_stack(p), p->sock, &in) == 0 && in.rcv_queued < (uint32_t)p->rcvlowat)
            ev &= ~(unsigned)(EPOLLIN | EPOLLRDNORM);
        /* POLLERR while a zero-copy completion waits on the error queue (zerocopy.c). */
        return ev | (p->zc_pending ? EPOLLERR : 0u);
    }
    if (p->kind == PFD_UDP)
        return slip_udp__poll(pfd_stack(p), p->sock) | (p->zc_pending ? EPOLLERR : 0u);
    return 0;
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
    uint8_t st = preload_thread_slot;
    if (st)
        s = g_pre.stacks[st];           /* a thread with a stack of its own (init.c) */
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
    p->st = st;
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
    if (!v4 || !slip_stack__owns_addr(pfd_stack(p), addr) || (p->v6 && pre_v6only(fd))) {
        /* Loopback, an address of another interface or a v6-only socket: the kernel's socket. */
        preload_release(fd);
        return real_bind(fd, sa, len);
    }
    if (p->kind == PFD_UDP && p->v6) {
        /* The kernel binds the application's own sockaddr_in6 (its errors are Linux's); the
         * stack takes the same IPv4 address and port. */
        if (real_bind(fd, sa, len) < 0)
            return -1;
        int rc = slip_udp__bind_bound(pfd_stack(p), p->sock, addr, fd);
        return rc < 0 ? set_errno(rc) : 0;
    }
    if (p->kind == PFD_UDP) {
        int rc = slip_udp__bind_kfd(pfd_stack(p), p->sock, addr, port, fd);
        return rc < 0 ? set_errno(rc) : 0;
    }
    /* Connections of the stack on that port (accepted children, TIME_WAIT) have no kernel socket
     * holding it: refuse as Linux does without SO_REUSEADDR. */
    int ra = 0;
    socklen_t rl = sizeof(ra);
    if (port && (real_getsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &ra, &rl) < 0 || !ra) &&
        slip_tcp__port_busy(pfd_stack(p), addr, port))
        return set_errno(-EADDRINUSE);
    return real_bind(fd, sa, len);     /* TCP: the kernel socket holds the address until listen/connect */
}

static int listen_sock(int fd, struct pfd *p, int backlog)
{
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
    int rc = slip_tcp__listen_kfd(pfd_stack(p), p->sock, addr, port, backlog > 0 ? backlog : 128, fd);
    if (rc < 0)
        return set_errno(rc);
    p->listening = 1;
    /* The kernel socket listens too: connections from this host (loopback, own addresses) reach
     * the kernel and are accepted from it, the wire's from the stack. */
    real_listen(fd, backlog);
    return 0;
}

int pre_listen(int fd, int backlog)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind != PFD_TCP)
        return real_listen(fd, backlog);
    bool again = p->listening;
    int rc = listen_sock(fd, p, backlog);
    p = pfd_get(fd);
    if (rc == 0 && !again && p && p->kind == PFD_TCP && p->listening)
        preload_thread_listen(fd, p);
    return rc;
}

static int accept_common(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
    struct pfd *p = pfd_get(fd);
    if (p && p->kind == PFD_TCP && p->listening && !p->used)
        preload_listener_use(fd, p);
    if (!p || p->kind != PFD_TCP || !p->listening)
        return real_accept4(fd, sa, len, flags);
    struct slip_stack *s = pfd_stack(p);
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
            np->st = p->st;             /* a connection lives in its listener's stack */
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
    struct slip_stack *s = pfd_stack(p);
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
    struct slip_tcp_info in;    /* Linux's inet_shutdown: an attempt that got through is connected for good */
    if (p->connecting && slip_tcp__info(pfd_stack(p), p->sock, &in) == 0 && in.state != TCP_SYN_SENT &&
        in.state != TCP_SYN_RECV && in.state != TCP_CLOSE)
        p->connecting = 0;
    int rc = slip_tcp__shutdown(pfd_stack(p), p->sock, how);
    if (rc == 0 && p->listening && how != SHUT_WR) {
        /* it no longer listens: nor does its kernel twin (a thread blocked in accept wakes) */
        p->listening = 0;
        real_shutdown(fd, how);
    }
    return rc < 0 ? set_errno(rc) : 0;
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
    if (p && p->kind == PFD_TCP && slip_tcp__local(pfd_stack(p), p->sock, &a, &port) == 0 && port &&
        (a || !p->v6)) {
        pre_sa_fill(p, sa, len, a, port);
        return 0;
    }
    if (p && p->kind == PFD_UDP && slip_udp__local(pfd_stack(p), p->sock, &a, &port) == 0 && port &&
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
        struct slip_udp_peer peer;
        int rc = slip_udp6__peer(pfd_stack(p), p->sock, &peer);
        if (rc < 0)
            return set_errno(rc);
        pre_sa_fill_peer(p, sa, len, &peer);
        return 0;
    }
    int e6;
    if (p->kind == PFD_TCP && pre_tcp6_name(p, true, sa, len, &e6))
        return e6 < 0 ? set_errno(e6) : 0;
    int rc = p->kind == PFD_TCP ? slip_tcp__peer(pfd_stack(p), p->sock, &a, &port)
                                : slip_udp__peer(pfd_stack(p), p->sock, &a, &port);
    if (rc < 0)
        return set_errno(rc);
    pre_sa_fill(p, sa, len, a, port);
    return 0;
}
