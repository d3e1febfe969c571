/* UDP on AF_INET6 sockets at the POSIX boundary (issue 16): native IPv6 addresses go through the
 * stack when they are the stack's (bind) or leave through its interfaces (sendto/connect); a
 * dual-stack socket bound to :: carries both families, a v6-only one IPv6 only. What the stack
 * does not own (loopback, other interfaces) stays on the application's kernel socket, which
 * holds the port either way. */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "preload/preload.h"
#include "stack/stack.h"

bool pre_sa_v6(const struct sockaddr *sa, socklen_t len, struct wire_ipv6_addr *a, uint32_t *scope, uint16_t *port)
{
    /* Linux's inet6_bind/udpv6_sendmsg refuse a sockaddr_in6 shorter than RFC 2133's (24). */
    if (!sa || len < 24 || sa->sa_family != AF_INET6)
        return false;
    struct sockaddr_in6 s6;
    memset(&s6, 0, sizeof(s6));
    memcpy(&s6, sa, SLIP_MIN((size_t)len, sizeof(s6)));
    be32 v4;
    memcpy(a, &s6.sin6_addr, 16);
    if (wire_ipv6__is_v4mapped(a, &v4))
        return false;
    *scope = len >= (socklen_t)sizeof(s6) && wire_ipv6__is_link_local(a) ? s6.sin6_scope_id : 0;
    *port = ntoh16(s6.sin6_port);
    return true;
}

void pre_sa_fill_peer(const struct pfd *p, struct sockaddr *sa, socklen_t *len, const struct slip_udp_peer *peer)
{
    if (!peer->v6) {
        pre_sa_fill(p, sa, len, peer->v4, peer->port);
        return;
    }
    if (!sa || !len)
        return;
    struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_port = hton16(peer->port),
                               .sin6_scope_id = peer->scope };
    memcpy(&s6.sin6_addr, &peer->a6, 16);
    memcpy(sa, &s6, SLIP_MIN((size_t)*len, sizeof(s6)));
    *len = sizeof(s6);
}

/* [::] for both families; without an IPv6 steering map (an attachment adopted after exec by a
 * process that may not look up the program's maps) a dual-stack socket keeps IPv4 only, as
 * before IPv6 was carried. */
static int bind_any(int fd, struct pfd *p, uint32_t scope, bool dual)
{
    static const struct wire_ipv6_addr any;
    int rc = slip_udp6__bind_bound(pfd_stack(p), p->sock, &any, scope, dual, fd);
    if (rc == -EOPNOTSUPP && dual)
        rc = slip_udp__bind_bound(pfd_stack(p), p->sock, 0, fd);
    return rc;
}

int pre_udp6_autobind(int fd, struct pfd *p)
{
    int rc = pre_v6_autobind(fd);
    if (rc == 0)
        rc = bind_any(fd, p, 0, !pre_v6only(fd));
    return rc;
}

int pre_udp6_bind(int fd, struct pfd *p, const struct sockaddr *sa, socklen_t len)
{
    struct wire_ipv6_addr a;
    uint32_t scope;
    uint16_t port;
    if (!pre_sa_v6(sa, len, &a, &scope, &port))
        return 1;   /* v4-mapped, AF_INET, malformed: as before */
    static const struct wire_ipv6_addr any;
    bool is_any = memcmp(&a, &any, sizeof(any)) == 0;
    if (!slip_stack__owns_addr6(pfd_stack(p), &a, scope)) {
        /* Loopback or an address of an interface the stack does not serve. */
        preload_release(fd);
        return real_bind(fd, sa, len);
    }
    /* The kernel binds the application's own sockaddr_in6 (its errors are Linux's, and it holds
     * the port); the stack takes the same address and port. */
    if (real_bind(fd, sa, len) < 0)
        return -1;
    int rc = is_any ? bind_any(fd, p, scope, !pre_v6only(fd))
                    : slip_udp6__bind_bound(pfd_stack(p), p->sock, &a, scope, false, fd);
    if (rc < 0) {
        /* No IPv6 claim possible (an adopted steering program without slip_owned6): the kernel
         * socket, already bound, carries the socket, with one warning line. */
        static int warned;
        if (!warned++)
            fprintf(stderr, "slipstream: warning: IPv6 socket not accelerated (%s); using the kernel\n",
                    strerror(-rc));
        preload_release(fd);
    }
    return 0;
}

int pre_udp6_dst(struct pfd *p, const struct sockaddr *sa, socklen_t len, struct wire_ipv6_addr *dst,
                 uint32_t *scope, uint16_t *port)
{
    if (!pre_sa_v6(sa, len, dst, scope, port))
        return 0;
    if (!slip_udp6__bound6(pfd_stack(p), p->sock))
        return -1;      /* bound to an IPv4 (mapped) address: the kernel's */
    /* A server answering one peer asks the route table once per control-plane generation, as
     * IPv4's sendto does (sockio.c): the lookup takes the stack's lock and the engine repeats it. */
    uint32_t seq = slip_stack__ctl_seq(pfd_stack(p)) | 1u;     /* never 0: 0 means no answer */
    if (p->via_us6_seq == seq && p->via_us6_scope == *scope && memcmp(p->via_us6_dst, dst, 16) == 0)
        return 1;
    if (!slip_stack__routes_via_us6(pfd_stack(p), dst, *scope))
        return -1;
    memcpy(p->via_us6_dst, dst, 16);
    p->via_us6_scope = *scope;
    p->via_us6_seq = seq;
    return 1;
}

void pre_put_pktinfo6(struct msghdr *m, size_t room, const struct wire_ipv6_addr *dst, uint32_t ifindex)
{
    struct in6_pktinfo pi = { .ipi6_ifindex = ifindex };
    memcpy(&pi.ipi6_addr, dst, 16);
    size_t need = CMSG_SPACE(sizeof(pi));
    if (!m->msg_control || room < CMSG_LEN(sizeof(pi))) {
        m->msg_flags |= MSG_CTRUNC;
        return;
    }
    struct cmsghdr *h = (struct cmsghdr *)m->msg_control;
    h->cmsg_level = IPPROTO_IPV6;
    h->cmsg_type = IPV6_PKTINFO;
    h->cmsg_len = CMSG_LEN(sizeof(pi));
    memcpy(CMSG_DATA(h), &pi, sizeof(pi));
    m->msg_controllen = room < need ? room : need;
}
