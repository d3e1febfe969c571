/* TCP on AF_INET6 sockets with native IPv6 (issue 16): bind to an IPv6 address the stack serves
 * (or ::, also v6-only), listen there (a dual-stack listener on :: takes both families through
 * the stack), connect to an IPv6 peer the stack routes to, and the native addresses getsockname,
 * getpeername and accept return. Dual-stack sockets on v4-mapped addresses keep the IPv4 path
 * (inet6.c); anything else native goes to the kernel as before. */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "preload/preload.h"
#include "stack/stack.h"

static bool is_any(const struct wire_ipv6_addr *a)
{
    static const struct wire_ipv6_addr any;
    return memcmp(a, &any, sizeof(any)) == 0;
}

int pre_tcp6_bind(int fd, struct pfd *p, const struct sockaddr *sa, socklen_t len)
{
    struct wire_ipv6_addr a;
    uint32_t scope;
    uint16_t port;
    if (!pre_sa_v6(sa, len, &a, &scope, &port))
        return 1;   /* v4-mapped, AF_INET, malformed: as before */
    if (!slip_stack__owns_addr6(pfd_stack(p), &a, scope)) {
        preload_release(fd);
        return real_bind(fd, sa, len);
    }
    /* Connections of the stack on that port (accepted children, TIME_WAIT) have no kernel socket
     * holding it: refuse as Linux does without SO_REUSEADDR (the folds of IPv6 addresses are not
     * IPv4 ones: any connection on the port counts). */
    int ra = 0;
    socklen_t rl = sizeof(ra);
    if (port && (real_getsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &ra, &rl) < 0 || !ra) &&
        slip_tcp__port_busy(pfd_stack(p), 0, port))
        return set_errno(-EADDRINUSE);
    (void)p;
    return real_bind(fd, sa, len);     /* the kernel socket holds the address until listen/connect */
}

void pre_tcp6_warn(int rc)
{
    static int warned;
    if (!warned++)
        fprintf(stderr, "slipstream: warning: IPv6 TCP socket not accelerated (%s); using the kernel\n",
                strerror(-rc));
}

int pre_tcp6_listen(int fd, struct pfd *p, int backlog)
{
    bool only = pre_v6only(fd);
    struct sockaddr_in6 s6;
    socklen_t sl = sizeof(s6);
    int rc = pre_v6_autobind(fd);
    if (rc < 0 || real_getsockname(fd, (struct sockaddr *)&s6, &sl) < 0)
        return 1;
    struct wire_ipv6_addr a;
    uint32_t scope;
    uint16_t port;
    if (!pre_sa_v6((struct sockaddr *)&s6, sl, &a, &scope, &port))
        return 1;   /* bound to a v4-mapped address: the IPv4 path */
    if (!slip_stack__owns_addr6(pfd_stack(p), &a, scope)) {
        preload_release(fd);
        return real_listen(fd, backlog);
    }
    rc = slip_tcp6__listen_kfd(pfd_stack(p), p->sock, &a, scope, only, backlog > 0 ? backlog : 128, fd);
    if (rc < 0) {
        if (rc == -EADDRINUSE || rc == -EINVAL)
            return set_errno(rc);
        if (rc == -EOPNOTSUPP && is_any(&a) && !only)
            return 1;   /* no IPv6 steering: a dual-stack listener still carries IPv4 (inet6.c) */
        pre_tcp6_warn(rc);
        preload_release(fd);
        return real_listen(fd, backlog);
    }
    p->listening = 1;
    /* The kernel socket listens too: connections from this host reach the kernel (accept
     * takes them from it), the wire's the stack. */
    real_listen(fd, backlog);
    return 0;
}

int pre_tcp6_dst(struct pfd *p, const struct sockaddr *sa, socklen_t len, struct wire_ipv6_addr *dst,
                 uint32_t *scope, uint16_t *port)
{
    if (!pre_sa_v6(sa, len, dst, scope, port))
        return 0;
    (void)p;
    if (is_any(dst))
        return -1;      /* :: as a destination is the kernel's loopback */
    return slip_stack__routes_via_us6(pfd_stack(p), dst, *scope) ? 1 : -1;
}

bool pre_tcp6_name(struct pfd *p, bool peer, struct sockaddr *sa, socklen_t *len, int *err)
{
    struct slip_tcp6_names n;
    if (err)
        *err = 0;
    if (!p->v6 || slip_tcp6__names(pfd_stack(p), p->sock, &n) < 0 || !n.v6)
        return false;
    if (peer && err && !n.connected) {
        *err = -ENOTCONN;
        return true;
    }
    if (!peer && (!n.lport || is_any(&n.laddr)))
        return false;   /* the kernel socket is bound the same way */
    if (!sa || !len)
        return true;
    const struct wire_ipv6_addr *a = peer ? &n.raddr : &n.laddr;
    struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_port = hton16(peer ? n.rport : n.lport) };
    memcpy(&s6.sin6_addr, a, 16);
    if (wire_ipv6__is_link_local(a))
        s6.sin6_scope_id = n.scope;
    memcpy(sa, &s6, SLIP_MIN((size_t)*len, sizeof(s6)));
    *len = sizeof(s6);
    return true;
}
