/* The stack's UDP calls for IPv6 (issue 16): an AF_INET6 socket bound natively, v6-only, or
 * dual-stack on :: (then in both demux tables and both steering maps). The application's kernel
 * socket, already bound by the POSIX layer, holds the port as for IPv4; the claim goes into the
 * steering program's slip_owned6 (and slip_owned for a dual-stack socket). Each call takes the
 * lock. */
#include "stack/stack_int.h"

static bool sock_ok(struct slip_stack *s, int sock)
{
    return sock >= 0 && (uint32_t)sock < s->t.max_udp && udp_sock__in_use(s->udp, (slip_idx_t)sock);
}

static void key6(struct steer_key6 *k, const struct wire_ipv6_addr *addr, uint16_t port)
{
    memset(k, 0, sizeof(*k));
    memcpy(k->laddr, addr, 16);
    k->lport = hton16(port);
    k->proto = IPPROTO_UDP;
}

/* Lock held: drops the claims of a bound IPv6 socket unless another socket of a SO_REUSEPORT
 * group still needs them. */
void udp6_unclaim(struct slip_stack *s, int sock)
{
    STACK_ASSERT_LOCKED(s);
    if (udp_sock__port_shared6(s->udp, (slip_idx_t)sock, slip_socktab__udp_high(&s->t)))
        return;
    struct wire_ipv6_addr la;
    uint16_t lp;
    udp_sock__local6(s->udp, (slip_idx_t)sock, &la, &lp);
    struct steer_key6 k;
    key6(&k, &la, lp);
    udp_unclaim_keys(s, NULL, &k, udp_sock__reuseport(s->udp, (slip_idx_t)sock));
}

int slip_udp6__bind_bound(struct slip_stack *s, int sock, const struct wire_ipv6_addr *addr, uint32_t scope,
                          bool dual, int app_kfd)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    struct sockaddr_in6 sin6;
    socklen_t sl = sizeof(sin6);
    if (getsockname(app_kfd, (struct sockaddr *)&sin6, &sl) < 0)
        return -errno;
    uint16_t port = ntoh16(sin6.sin6_port);
    if (!port)
        return -EINVAL;
    int reuseport = 0;
    socklen_t rl = sizeof(reuseport);
    if (getsockopt(app_kfd, SOL_SOCKET, SO_REUSEPORT, &reuseport, &rl) < 0)
        reuseport = 0;

    stack_lock(s);
    udp_sock__set_reuseport(s->udp, (slip_idx_t)sock, reuseport != 0);
    int rc = udp_sock__bind6(s->udp, (slip_idx_t)sock, addr, port, scope, dual);
    if (rc == 0) {
        struct steer_key6 k6;
        struct steer_key k4;
        key6(&k6, addr, port);
        steer_key(&k4, 0, port);
        rc = udp_claim_keys(s, dual ? &k4 : NULL, &k6, reuseport != 0);
        if (rc < 0) {
            udp_sock__close(s->udp, &s->pool, (slip_idx_t)sock);
            udp_sock__alloc(s->udp);    /* the same slot: the caller's handle stays open */
        }
    }
    stack_unlock(s);
    if (rc == 0)
        s->t.us[sock].kfd = 0;      /* the application's socket holds the port */
    return rc;
}

int slip_udp6__connect(struct slip_stack *s, int sock, const struct wire_ipv6_addr *addr, uint16_t port,
                       uint32_t scope)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    int rc = udp_sock__connect6(s->udp, (slip_idx_t)sock, addr, port, scope);
    stack_unlock(s);
    return rc;
}

bool slip_udp6__bound6(struct slip_stack *s, int sock)
{
    return sock_ok(s, sock) && udp_sock__in6(s->udp, (slip_idx_t)sock);
}

/* The engine's peer as the facade names it. */
static void peer_out(const struct udp_peer *in, struct slip_udp_peer *o)
{
    o->v6 = in->v6;
    o->v4 = in->v4;
    o->a6 = in->a6;
    o->scope = in->scope;
    o->port = in->port;
    o->has_dst = in->has_dst;
    o->dst = in->dst;
    o->ifindex = in->ifindex;
}

int slip_udp6__peer(struct slip_stack *s, int sock, struct slip_udp_peer *p)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    struct udp_peer peer;
    int rc = udp_sock__remote6(s->udp, (slip_idx_t)sock, &peer);
    if (rc == 0)
        peer_out(&peer, p);
    return rc;
}

ssize_t slip_udp6__sendmsg(struct slip_stack *s, int sock, const struct iovec *iov, int iovcnt,
                           const struct wire_ipv6_addr *dst, uint16_t dport, uint32_t scope)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    env_refresh(s, slip_stack__now());
    ssize_t rc = udp_sock__send6(&s->env, s->udp, (slip_idx_t)sock, iov, iovcnt, dst, dport, scope);
    if (rc == -ENOBUFS) {
        devices_kick_all(s);
        rc = udp_sock__send6(&s->env, s->udp, (slip_idx_t)sock, iov, iovcnt, dst, dport, scope);
    }
    ip_output__flush(&s->env);
    stack_unlock(s);
    return rc;
}

ssize_t slip_udp6__recvfrom(struct slip_stack *s, int sock, void *buf, size_t len, struct slip_udp_peer *from,
                            unsigned flags)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    struct udp_peer peer;
    stack_lock(s);
    ssize_t rc = udp_sock__recv6(s->udp, &s->pool, (slip_idx_t)sock, buf, len, from ? &peer : NULL, flags);
    if (rc == -EAGAIN) {
        rx_catch_up(s);         /* a datagram may still wait on an RX ring (as slip_tcp__recv) */
        rc = udp_sock__recv6(s->udp, &s->pool, (slip_idx_t)sock, buf, len, from ? &peer : NULL, flags);
    }
    stack_unlock(s);
    if (rc >= 0 && from)
        peer_out(&peer, from);
    return rc;
}

int slip_udp6__setopt(struct slip_stack *s, int sock, int opt, int val)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    switch (opt) {
    case IPV6_TCLASS:
        udp_sock__set_tclass(s->udp, (slip_idx_t)sock, val);
        return 0;
    case IPV6_UNICAST_HOPS:
        udp_sock__set_hops(s->udp, (slip_idx_t)sock, val);
        return 0;
    case IPV6_MTU_DISCOVER:
        udp_sock__set_pmtudisc(s->udp, (slip_idx_t)sock, val, IPV6_PMTUDISC_OMIT, IPV6_PMTUDISC_WANT);
        return 0;
    case IPV6_DONTFRAG:
        udp_sock__set_dontfrag(s->udp, (slip_idx_t)sock, val != 0);
        return 0;
    default:
        return -ENOPROTOOPT;
    }
}
