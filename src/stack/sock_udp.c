/* The stack's UDP socket calls (the internal API the POSIX layer uses); each takes the lock. */
#include "stack/stack_int.h"

/* The facade's receive flags are the engine's. */
_Static_assert(SLIP_UDP_RECV_PEEK == UDP_RECV_PEEK && SLIP_UDP_RECV_TRUNC == UDP_RECV_TRUNC,
               "SLIP_UDP_RECV_* follow UDP_RECV_*");

static bool sock_ok(struct slip_stack *s, int sock)
{
    return sock >= 0 && (uint32_t)sock < s->t.max_udp && udp_sock__in_use(s->udp, (slip_idx_t)sock);
}

int slip_udp__open(struct slip_stack *s)
{
    stack_lock(s);
    int rc = udp_sock__alloc(s->udp);
    stack_unlock(s);
    return rc;
}

int slip_udp__bind(struct slip_stack *s, int sock, be32 addr, uint16_t port)
{
    return slip_udp__bind_kfd(s, sock, addr, port, -1);
}

static int udp_bind_claim(struct slip_stack *s, int sock, be32 addr, uint16_t port, int kfd, int app_kfd);

int slip_udp__bind_kfd(struct slip_stack *s, int sock, be32 addr, uint16_t port, int app_kfd)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    /* The kernel socket holds the port for us: kernel applications cannot take it, and port 0
     * gets an ephemeral port from the kernel's own range. The application's own kernel socket
     * does it when there is one (the POSIX layer); else we make one. */
    int kfd = app_kfd >= 0 ? app_kfd : fd_above_stdio(socket(AF_INET, SOCK_DGRAM, 0));
    if (kfd < 0)
        return kfd;
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = hton16(port), .sin_addr.s_addr = addr };
    socklen_t sl = sizeof(sin);
    if (bind(kfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || getsockname(kfd, (struct sockaddr *)&sin, &sl) < 0) {
        int e = errno;
        if (app_kfd < 0)
            close(kfd);
        return -e;
    }
    return udp_bind_claim(s, sock, addr, ntoh16(sin.sin_port), kfd, app_kfd);
}

int slip_udp__bind_bound(struct slip_stack *s, int sock, be32 addr, int app_kfd)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    /* sin6_port and sin_port sit at the same offset: the port is read the same for both. */
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(app_kfd, (struct sockaddr *)&ss, &sl) < 0)
        return -errno;
    uint16_t port = ntoh16(((struct sockaddr_in *)&ss)->sin_port);
    if (!port)
        return -EINVAL;
    return udp_bind_claim(s, sock, addr, port, app_kfd, app_kfd);
}

/* The kernel socket kfd holds (addr, port): bind the stack socket there and claim it in the XDP
 * program. kfd is the application's (app_kfd) or one we made (closed on failure). */
static int udp_bind_claim(struct slip_stack *s, int sock, be32 addr, uint16_t port, int kfd, int app_kfd)
{
    /* SO_REUSEPORT was set on the kernel socket, whose bind() just applied Linux's rules. */
    int reuseport = 0;
    socklen_t rl = sizeof(reuseport);
    if (getsockopt(kfd, SOL_SOCKET, SO_REUSEPORT, &reuseport, &rl) < 0)
        reuseport = 0;

    stack_lock(s);
    udp_sock__set_reuseport(s->udp, (slip_idx_t)sock, reuseport != 0);
    int rc = udp_sock__bind(s->udp, (slip_idx_t)sock, addr, port);
    if (rc == 0) {
        struct steer_key k;
        steer_key(&k, addr, port);
        rc = udp_claim_keys(s, &k, NULL, reuseport != 0);
        if (rc < 0) {
            udp_sock__close(s->udp, &s->pool, (slip_idx_t)sock);
            udp_sock__alloc(s->udp);    /* hands back the same slot: the caller's handle stays open */
        }
    }
    stack_unlock(s);
    if (rc < 0) {
        if (app_kfd < 0)
            close(kfd);
        return rc;
    }
    if (app_kfd < 0)
        slip_kfd__add(kfd);
    s->t.us[sock].kfd = app_kfd >= 0 ? 0 : kfd;
    return 0;
}

unsigned slip_udp__poll(struct slip_stack *s, int sock)
{
    if (!sock_ok(s, sock))
        return SLIP_EV_ERR | SLIP_EV_HUP;
    return SLIP_EV_OUT | (udp_sock__readable(s->udp, (slip_idx_t)sock) ? SLIP_EV_IN : 0) |
           (udp_sock__has_error(s->udp, (slip_idx_t)sock) ? SLIP_EV_ERR : 0);
}

int slip_udp__so_error(struct slip_stack *s, int sock)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    int e = udp_sock__so_error(s->udp, (slip_idx_t)sock);
    stack_unlock(s);
    return e;
}

int slip_udp__peer(struct slip_stack *s, int sock, be32 *addr, uint16_t *port)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    return udp_sock__remote(s->udp, (slip_idx_t)sock, addr, port);
}

/* A socket that sends or connects before bind gets an ephemeral port first, as on Linux. */
static int autobind(struct slip_stack *s, int sock)
{
    return udp_sock__unbound(s->udp, (slip_idx_t)sock) ? slip_udp__bind(s, sock, 0, 0) : 0;
}

int slip_udp__connect(struct slip_stack *s, int sock, be32 addr, uint16_t port)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    int brc = autobind(s, sock);
    if (brc < 0)
        return brc;
    stack_lock(s);
    int rc = udp_sock__connect(s->udp, (slip_idx_t)sock, addr, port);
    stack_unlock(s);
    return rc;
}

int slip_udp__local(struct slip_stack *s, int sock, be32 *addr, uint16_t *port)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    udp_sock__local(s->udp, (slip_idx_t)sock, addr, port);
    return 0;
}

ssize_t slip_udp__sendmsg(struct slip_stack *s, int sock, const struct iovec *iov, int iovcnt, be32 dst, uint16_t dport)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    int brc = autobind(s, sock);
    if (brc < 0)
        return brc;
    stack_lock(s);
    env_refresh(s, slip_stack__now());
    ssize_t rc = udp_sock__send(&s->env, s->udp, (slip_idx_t)sock, iov, iovcnt, dst, dport);
    if (rc == -ENOBUFS) {
        /* Out of frames: reclaim completions and retry once, as the kernel would block briefly. */
        devices_kick_all(s);
        rc = udp_sock__send(&s->env, s->udp, (slip_idx_t)sock, iov, iovcnt, dst, dport);
    }
    ip_output__flush(&s->env);
    stack_unlock(s);
    return rc;
}

ssize_t slip_udp__sendto(struct slip_stack *s, int sock, const void *buf, size_t len, be32 dst, uint16_t dport)
{
    struct iovec v = { .iov_base = (void *)buf, .iov_len = len };
    return slip_udp__sendmsg(s, sock, &v, 1, dst, dport);
}

ssize_t slip_udp__recvfrom(struct slip_stack *s, int sock, void *buf, size_t len, be32 *src, uint16_t *sport, unsigned flags)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    ssize_t rc = udp_sock__recv(s->udp, &s->pool, (slip_idx_t)sock, buf, len, src, sport, flags);
    if (rc == -EAGAIN) {
        rx_catch_up(s);         /* a datagram may still wait on an RX ring (as slip_tcp__recv) */
        rc = udp_sock__recv(s->udp, &s->pool, (slip_idx_t)sock, buf, len, src, sport, flags);
    }
    stack_unlock(s);
    return rc;
}

int slip_udp__close(struct slip_stack *s, int sock)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    slip_idx_t u = (slip_idx_t)sock;
    if (udp_sock__bound(s->udp, u) && !udp_sock__v6only(s->udp, u)) {
        struct steer_key k;
        be32 la;
        uint16_t lp;
        udp_sock__local(s->udp, u, &la, &lp);
        steer_key(&k, la, lp);
        /* Other members of a SO_REUSEPORT group in this stack still need the key: only the last
         * one releases it (a group's key stays while other stacks are members). */
        if (!udp_sock__port_shared(s->udp, u, slip_socktab__udp_high(&s->t)))
            udp_unclaim_keys(s, &k, NULL, udp_sock__reuseport(s->udp, u));
    }
    if (udp_sock__bound(s->udp, u) && udp_sock__in6(s->udp, u))
        udp6_unclaim(s, sock);
    udp_sock__close(s->udp, &s->pool, (slip_idx_t)sock);
    stack_unlock(s);
    if (s->t.us[sock].kfd > 0) {
        kfd_close(s, s->t.us[sock].kfd);
        s->t.us[sock].kfd = 0;
    }
    return 0;
}
