/* The stack's TCP calls for IPv6 (issue 16): listeners on a native IPv6 address or on :: (v6-only,
 * or dual-stack: then IPv4 SYNs too, whose children are IPv4 connections), active opens to IPv6
 * peers, and the addresses of an IPv6 connection for the POSIX layer. The application's kernel
 * socket, bound by the POSIX layer, holds the port; a duplicate of it stays with the connection
 * until the engine frees it (as adopt_kfd does for IPv4). Claims go into slip_owned6 (and
 * slip_owned for a dual-stack listener) through tcp_res_claim. Each call takes the lock. A claim
 * that fails (an adopted steering program without slip_owned6) returns the error; the POSIX layer
 * then releases the socket (closing the stack's side) and lets the kernel carry it. */
#include "stack/stack_int.h"

static bool tsock_ok(struct slip_stack *s, int sock)
{
    return sock >= 0 && (uint32_t)sock < s->t.max_conns && tcp_conn__user(s->tcp, (slip_idx_t)sock);
}

/* The port (and address, when addr is not NULL) the application's AF_INET6 kernel socket is
 * bound to, and a duplicate of it that keeps the reservation (placed high, inherited across exec
 * like the stack). */
static int adopt_kfd6(int app_kfd, uint16_t *port, struct wire_ipv6_addr *addr)
{
    struct sockaddr_in6 sin6;
    socklen_t sl = sizeof(sin6);
    if (getsockname(app_kfd, (struct sockaddr *)&sin6, &sl) < 0)
        return -errno;
    if (sin6.sin6_family != AF_INET6 || !sin6.sin6_port)
        return -EINVAL;
    *port = ntoh16(sin6.sin6_port);
    if (addr)
        memcpy(addr, &sin6.sin6_addr, 16);
    int d = fcntl(app_kfd, F_DUPFD, 1000);
    if (d < 0)
        d = fcntl(app_kfd, F_DUPFD, 3);
    if (d < 0)
        return -errno;
    slip_kfd__add(d);
    return d;
}

/* Whether every interface's steering program has slip_owned6 (an adopted attachment may not):
 * deleting a key no claim uses answers -EOPNOTSUPP without it. */
static bool can_claim6(struct slip_stack *s)
{
    struct steer_key6 none;
    memset(&none, 0, sizeof(none));
    for (unsigned i = 0; i < s->nifs; i++)
        if (steer__del6(s->ifs[i].steer, &none) == -EOPNOTSUPP)
            return false;
    return true;
}

int slip_tcp6__listen_kfd(struct slip_stack *s, int sock, const struct wire_ipv6_addr *addr, uint32_t scope,
                          bool v6only, int backlog, int app_kfd)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    if (!can_claim6(s))
        return -EOPNOTSUPP;     /* before the engine listens: the caller may take the IPv4 path */
    slip_stack__tcp_sysctls(s, true);
    uint16_t port = 0;
    int kfd = adopt_kfd6(app_kfd, &port, NULL);
    if (kfd < 0)
        return kfd;
    int reuseport = 0;
    socklen_t rl = sizeof(reuseport);
    if (getsockopt(app_kfd, SOL_SOCKET, SO_REUSEPORT, &reuseport, &rl) < 0)
        reuseport = 0;
    stack_lock(s);
    struct tcp_res *r = &s->t.ts[sock].res;
    if (tcp_conn__state(s->tcp, (slip_idx_t)sock) == TCPS_CLOSED)
        tcp_conn__setopt(&s->env, s->tcp, (slip_idx_t)sock, TCPO_REUSEPORT, reuseport != 0);
    int rc = tcp_conn__listen6(s->tcp, (slip_idx_t)sock, addr, scope, v6only, port, backlog);
    if (rc == 0) {
        static const struct wire_ipv6_addr any;
        r->kfd = kfd;
        proc_kfd_hold(s, (unsigned)sock);
        r->key = 1;
        r->v6 = TCP_RES_V6 | (!v6only && memcmp(addr, &any, sizeof(any)) == 0 ? TCP_RES_DUAL : 0);
        r->laddr6 = *addr;
        uint16_t lp;
        tcp_conn__local(s->tcp, (slip_idx_t)sock, &r->laddr, &lp);     /* the engine's fold of addr */
        r->lport = port;
        rc = tcp_res_claim(s, r);
        if (rc < 0) {
            tcp_res_release(s, r);
            kfd = -1;
        }
    }
    stack_unlock(s);
    if (rc < 0 && kfd >= 0)
        slip_kfd__close(kfd);
    return rc;
}

int slip_tcp6__connect_kfd(struct slip_stack *s, int sock, const struct wire_ipv6_addr *addr, uint16_t port,
                           uint32_t scope, int app_kfd)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    if (!can_claim6(s))
        return -EOPNOTSUPP;
    slip_stack__tcp_sysctls(s, true);
    stack_lock(s);
    env_refresh(s, slip_stack__now());
    struct ip6_route rt;
    int rc = ip6_output__route(&s->env, addr, scope, &rt);
    /* Another try after a failed attempt: the first one's reservation and claim go first. */
    if (rc == 0 && tcp_conn__state(s->tcp, (slip_idx_t)sock) == TCPS_CLOSED &&
        (s->t.ts[sock].res.key || s->t.ts[sock].res.kfd > 0))
        tcp_res_release(s, &s->t.ts[sock].res);
    stack_unlock(s);
    if (rc < 0)
        return rc;
    uint16_t lport = 0;
    struct wire_ipv6_addr bound;
    int kfd = adopt_kfd6(app_kfd, &lport, &bound);
    if (kfd < 0)
        return kfd;
    /* A socket the application bound to one of its addresses connects from it (RFC 6724 picks
     * the source only for a socket bound to ::). */
    static const struct wire_ipv6_addr any;
    be32 mapped;
    if (memcmp(&bound, &any, sizeof(any)) != 0 && !wire_ipv6__is_v4mapped(&bound, &mapped))
        rt.src = bound;

    stack_lock(s);
    env_refresh(s, slip_stack__now());
    struct tcp_res *r = &s->t.ts[sock].res;
    r->kfd = kfd;
    proc_kfd_hold(s, (unsigned)sock);
    r->key = 2;
    r->v6 = TCP_RES_V6;
    r->laddr6 = rt.src;
    r->raddr6 = *addr;
    r->laddr = tcp6__fold(s->tcp, &rt.src);
    r->raddr = tcp6__fold(s->tcp, addr);
    r->lport = lport;
    r->rport = port;
    /* Claim the 4-tuple before the SYN leaves, so the SYN-ACK is steered to us. */
    rc = tcp_res_claim(s, r);
    if (rc == 0)
        rc = tcp_conn__connect6(&s->env, s->tcp, (slip_idx_t)sock, &rt.src, lport, addr, port, scope);
    if (rc < 0 && rc != -EINPROGRESS)
        tcp_res_release(s, r);
    tx_done(s);
    stack_unlock(s);
    return rc;
}

int slip_tcp6__names(struct slip_stack *s, int sock, struct slip_tcp6_names *out)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    struct tcp_names n;
    tcp_conn__names(s->tcp, (slip_idx_t)sock, &n);
    memset(out, 0, sizeof(*out));
    if (!n.v6)
        return 0;
    out->v6 = true;
    out->laddr = n.laddr6;
    out->raddr = n.raddr6;
    out->lport = n.lport;
    out->rport = n.rport;
    out->scope = n.scope;
    out->connected = tcp_conn__has_peer(s->tcp, (slip_idx_t)sock);
    return 0;
}
