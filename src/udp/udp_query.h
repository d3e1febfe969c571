/* What the stack layer asks of a UDP socket (in use, bound, its names, readiness, whether another
 * socket shares its port) and the few plain fields it sets: small functions, so that src/stack
 * keeps out of struct udp_sock. No locking inside: the caller holds the stack's lock where the
 * answer must be exact. s is a valid index below sh->max_socks. */
#ifndef SLIP_UDP_UDP_QUERY_H
#define SLIP_UDP_UDP_QUERY_H

#include <errno.h>
#include <string.h>

#include "udp/udp.h"

/* Allocated (not on the free list). */
static inline bool udp_sock__in_use(const struct udp_shared *sh, slip_idx_t s)
{
    return sh->socks[s].state != UDPS_FREE;
}

/* Allocated, not bound yet (a send or connect binds it first). */
static inline bool udp_sock__unbound(const struct udp_shared *sh, slip_idx_t s)
{
    return sh->socks[s].state == UDPS_OPEN;
}
/* Bound: in a demux table. in6: in the IPv6 one (bound through bind6); v6only: not in the IPv4
 * one. */
static inline bool udp_sock__bound(const struct udp_shared *sh, slip_idx_t s)
{
    return sh->socks[s].state == UDPS_BOUND;
}
static inline bool udp_sock__in6(const struct udp_shared *sh, slip_idx_t s)
{
    return sh->socks[s].in6 != 0;
}
static inline bool udp_sock__v6only(const struct udp_shared *sh, slip_idx_t s)
{
    return sh->socks[s].v6only != 0;
}

/* Local address and port (host order); 0/0 before bind. */
static inline void udp_sock__local(const struct udp_shared *sh, slip_idx_t s, be32 *addr, uint16_t *port)
{
    *addr = sh->socks[s].laddr;
    *port = sh->socks[s].lport;
}

/* The IPv6 local address (:: before bind6) and port. */
static inline void udp_sock__local6(const struct udp_shared *sh, slip_idx_t s, struct wire_ipv6_addr *addr,
                                    uint16_t *port)
{
    *addr = sh->socks[s].laddr6;
    *port = sh->socks[s].lport;
}

/* The connected peer: -ENOTCONN when not connected. IPv6 (udp_peer.v6) when connected to a
 * native IPv6 address. */
static inline int udp_sock__remote(const struct udp_shared *sh, slip_idx_t s, be32 *addr, uint16_t *port)
{
    const struct udp_sock *u = &sh->socks[s];
    if (!u->connected)
        return -ENOTCONN;
    *addr = u->raddr;
    *port = u->rport;
    return 0;
}
static inline int udp_sock__remote6(const struct udp_shared *sh, slip_idx_t s, struct udp_peer *p)
{
    static const struct wire_ipv6_addr any;
    const struct udp_sock *u = &sh->socks[s];
    if (!u->connected)
        return -ENOTCONN;
    memset(p, 0, sizeof(*p));
    p->v6 = memcmp(&u->raddr6, &any, sizeof(any)) != 0;
    p->v4 = u->raddr;
    p->a6 = u->raddr6;
    p->scope = u->scope;
    p->port = u->rport;
    return 0;
}

/* Datagrams waiting, and a pending error (SO_ERROR). */
static inline bool udp_sock__readable(const struct udp_shared *sh, slip_idx_t s)
{
    return sh->socks[s].rcvq.count != 0;
}
static inline bool udp_sock__has_error(const struct udp_shared *sh, slip_idx_t s)
{
    return sh->socks[s].so_error != 0;
}
/* SO_ERROR: the pending error (positive errno, 0 if none), cleared. */
static inline int udp_sock__so_error(struct udp_shared *sh, slip_idx_t s)
{
    int e = sh->socks[s].so_error;
    sh->socks[s].so_error = 0;
    return e;
}

/* Datagrams received so far (a number that changes when one arrives). */
static inline uint64_t udp_sock__rx_datagrams(const struct udp_shared *sh, slip_idx_t s)
{
    return sh->socks[s].rx_datagrams;
}

/* SO_REUSEPORT was set when the socket was bound. */
static inline bool udp_sock__reuseport(const struct udp_shared *sh, slip_idx_t s)
{
    return sh->socks[s].reuseport != 0;
}

/* Another socket among [0, high) is bound to the same IPv4 (address, port) in the IPv4 demux
 * (a SO_REUSEPORT group member), or to the same IPv6 (address, port): the last member of a
 * group is the one that gives up the steering claim. */
static inline bool udp_sock__port_shared(const struct udp_shared *sh, slip_idx_t s, uint32_t high)
{
    const struct udp_sock *u = &sh->socks[s];
    for (uint32_t i = 0; i < high; i++) {
        const struct udp_sock *o = &sh->socks[i];
        if (i != s && o->state == UDPS_BOUND && !o->v6only && o->lport == u->lport && o->laddr == u->laddr)
            return true;
    }
    return false;
}
static inline bool udp_sock__port_shared6(const struct udp_shared *sh, slip_idx_t s, uint32_t high)
{
    const struct udp_sock *u = &sh->socks[s];
    for (uint32_t i = 0; i < high; i++) {
        const struct udp_sock *o = &sh->socks[i];
        if (i != s && o->in6 && o->state == UDPS_BOUND && o->lport == u->lport &&
            memcmp(&o->laddr6, &u->laddr6, 16) == 0)
            return true;
    }
    return false;
}

/* Slots [0, high) were ever used: a scan over the sockets stops there. */
static inline uint32_t udp_shared__high(const struct udp_shared *sh)
{
    return sh->high_water;
}

/* IPV6_TCLASS and IPV6_UNICAST_HOPS of its IPv6 datagrams (-1 or below: the default). */
static inline void udp_sock__set_tclass(struct udp_shared *sh, slip_idx_t s, int val)
{
    sh->socks[s].tclass = (uint8_t)(val < 0 ? 0 : val);
}
static inline void udp_sock__set_hops(struct udp_shared *sh, slip_idx_t s, int val)
{
    sh->socks[s].hops = (uint8_t)(val < 0 ? 0 : val);
}

/* IPV6_MTU_DISCOVER (the kernel socket checked it: 0..IPV6_PMTUDISC_OMIT) and IPV6_DONTFRAG. */
static inline void udp_sock__set_pmtudisc(struct udp_shared *sh, slip_idx_t s, int val, int max, int dflt)
{
    sh->socks[s].pmtudisc = (uint8_t)(val < 0 || val > max ? dflt : val);
}

static inline void udp_sock__set_dontfrag(struct udp_shared *sh, slip_idx_t s, bool on)
{
    sh->socks[s].dontfrag = on;
}

#endif
