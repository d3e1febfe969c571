/* Addresses at the POSIX boundary for both socket families. The stack carries IPv4; an AF_INET6
 * socket (dual-stack, IPV6_V6ONLY off) reaches it through v4-mapped addresses (::ffff:a.b.c.d),
 * which Linux hands the application for its IPv4 peers exactly like this. Everything else an
 * AF_INET6 socket can name (native IPv6, a v6-only socket) stays the kernel's. */
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "base/types.h"
#include "preload/preload.h"

/* Linux's inet6_bind/tcp_v6_connect refuse a sockaddr_in6 shorter than RFC 2133's, which had no
 * sin6_scope_id. */
#define PRE_SIN6_LEN_RFC2133 24

static bool mapped_v4(const struct in6_addr *a, be32 *v4)
{
    static const uint8_t prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    if (memcmp(a->s6_addr, prefix, sizeof(prefix)) != 0)
        return false;
    memcpy(v4, &a->s6_addr[12], 4);
    return true;
}

bool pre_sa_v4(const struct pfd *p, const struct sockaddr *sa, socklen_t len, bool any_ok, be32 *addr,
               uint16_t *port)
{
    if (!sa || len < (socklen_t)sizeof(sa_family_t))
        return false;
    if (sa->sa_family == AF_INET && (!p->v6 || p->kind == PFD_UDP)) {
        /* An AF_INET6 UDP socket takes AF_INET destinations too (udpv6_sendmsg,
         * ip6_datagram_connect), when it is not v6-only; a TCP one does not. */
        struct sockaddr_in sin;
        if (len < (socklen_t)sizeof(sin))
            return false;
        memcpy(&sin, sa, sizeof(sin));
        *addr = sin.sin_addr.s_addr;
        *port = ntoh16(sin.sin_port);
        return true;
    }
    if (sa->sa_family != AF_INET6 || !p->v6 || len < PRE_SIN6_LEN_RFC2133)
        return false;
    struct sockaddr_in6 s6;
    memset(&s6, 0, sizeof(s6));
    memcpy(&s6, sa, SLIP_MIN((size_t)len, sizeof(s6)));
    *port = ntoh16(s6.sin6_port);
    if (mapped_v4(&s6.sin6_addr, addr))
        return true;
    /* :: is any address of both families (a dual-stack bind); as a destination it is native
     * IPv6 (the kernel's loopback) */
    *addr = 0;
    return any_ok && IN6_IS_ADDR_UNSPECIFIED(&s6.sin6_addr);
}

void pre_sa_fill(const struct pfd *p, struct sockaddr *sa, socklen_t *len, be32 addr, uint16_t port)
{
    if (!sa || !len)
        return;
    if (!p->v6) {
        struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = hton16(port), .sin_addr.s_addr = addr };
        memcpy(sa, &sin, SLIP_MIN((size_t)*len, sizeof(sin)));
        *len = sizeof(sin);
        return;
    }
    struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_port = hton16(port) };
    s6.sin6_addr.s6_addr[10] = s6.sin6_addr.s6_addr[11] = 0xff;
    memcpy(&s6.sin6_addr.s6_addr[12], &addr, 4);
    memcpy(sa, &s6, SLIP_MIN((size_t)*len, sizeof(s6)));
    *len = sizeof(s6);
}

bool pre_v6only(int fd)
{
    int v = 0;
    socklen_t l = sizeof(v);
    return real_getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v, &l) == 0 && v;
}

int pre_v6_autobind(int fd)
{
    /* [::]:0 on a dual-stack socket: the kernel picks a port free in both families, so the
     * reservation holds the IPv4 port too. EINVAL: the application bound it already. */
    struct sockaddr_in6 any = { .sin6_family = AF_INET6 };
    if (real_bind(fd, (struct sockaddr *)&any, sizeof(any)) < 0 && errno != EINVAL)
        return -errno;
    return 0;
}
