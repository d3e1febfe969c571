/* Control plane: links, IPv4 and IPv6 addresses, routes and neighbours mirrored from the kernel over
 * netlink (libmnl) into fixed-size tables in the stack's shared memory, kept current by
 * subscribing to rtnetlink groups. Readers use the ctl_tables__* functions, which are pure and
 * never touch a socket. Neighbour resolution asks the kernel (the kernel owns ARP). */
#ifndef SLIP_CTL_CTL_H
#define SLIP_CTL_CTL_H

#include "base/types.h"
#include "wire/ipv6.h"

#define CTL_MAX_LINKS  64
#define CTL_MAX_ADDRS  256
#define CTL_MAX_ROUTES 1024
#define CTL_MAX_NEIGHS 4096
#define CTL_IFNAMSIZ   16
#define CTL_MAX_ADDRS6  256
#define CTL_MAX_ROUTES6 512
#define CTL_MAX_NEIGHS6 1024

struct ctl_link {
    uint32_t ifindex;
    uint32_t mtu;
    uint32_t flags;             /* IFF_* */
    uint8_t mac[6];
    char name[CTL_IFNAMSIZ];
};

struct ctl_addr {
    uint32_t ifindex;
    be32 addr;
    be32 broadcast;
    uint8_t prefixlen;
};

struct ctl_route {
    be32 dst;
    uint8_t prefixlen;
    uint8_t type;               /* RTN_UNICAST, RTN_LOCAL, RTN_BLACKHOLE ... */
    be32 gateway;               /* 0 when directly connected */
    be32 prefsrc;
    uint32_t oif;
    uint32_t mtu;               /* RTAX_MTU, 0 when unset */
    uint32_t priority;          /* metric */
    uint32_t table;
};

struct ctl_neigh {
    uint32_t ifindex;
    be32 addr;
    uint16_t state;             /* NUD_* */
    uint8_t mac[6];
};

/* IPv6 (RFC 8200) entries: kept in their own arrays so the IPv4 lookups stay as they were. */
struct ctl_addr6 {
    uint32_t ifindex;
    struct wire_ipv6_addr addr;
    uint8_t prefixlen;
    uint8_t scope;              /* RT_SCOPE_* the kernel gave it (link for fe80::/10) */
    uint32_t flags;             /* IFA_F_*: tentative/deprecated/dadfailed addresses are not sources */
};

struct ctl_route6 {
    struct wire_ipv6_addr dst;
    struct wire_ipv6_addr gateway;  /* :: when directly connected */
    struct wire_ipv6_addr prefsrc;  /* :: when unset */
    uint8_t prefixlen;
    uint8_t type;
    uint32_t oif;
    uint32_t mtu;
    uint32_t priority;
    uint32_t table;
};

struct ctl_neigh6 {
    uint32_t ifindex;
    struct wire_ipv6_addr addr;
    uint16_t state;
    uint8_t mac[6];
};

/* The mirrored tables. Written by the one process that runs ctl__process(); a reader that may
 * race a writer checks `seq` (odd while an update is in progress) before and after reading. */
struct ctl_tables {
    uint32_t seq;
    uint32_t nlinks, naddrs, nroutes, nneighs;
    uint64_t updates;           /* netlink messages applied */
    uint64_t overflows;         /* entries dropped because a table was full */
    struct ctl_link links[CTL_MAX_LINKS];
    struct ctl_addr addrs[CTL_MAX_ADDRS];
    struct ctl_route routes[CTL_MAX_ROUTES];
    struct ctl_neigh neighs[CTL_MAX_NEIGHS];
    uint32_t naddrs6, nroutes6, nneighs6;
    struct ctl_addr6 addrs6[CTL_MAX_ADDRS6];
    struct ctl_route6 routes6[CTL_MAX_ROUTES6];
    struct ctl_neigh6 neighs6[CTL_MAX_NEIGHS6];
};

/* Seqlock reader side, for a reader in another process or thread than the writer:
 *     uint32_t s; do { s = ctl_tables__read_begin(t); ...lookups, copy results... }
 *     while (ctl_tables__read_retry(t, s));
 * Results (nexthop, MAC) must be copied out inside the loop; pointers into t are not stable. */
static inline uint32_t ctl_tables__read_begin(const struct ctl_tables *t)
{
    uint32_t s;
    while ((s = __atomic_load_n(&t->seq, __ATOMIC_ACQUIRE)) & 1) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
    return s;
}

static inline bool ctl_tables__read_retry(const struct ctl_tables *t, uint32_t s)
{
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return __atomic_load_n(&t->seq, __ATOMIC_RELAXED) != s;
}

/* Result of a route lookup. */
struct ctl_nexthop {
    uint32_t ifindex;
    be32 src;                   /* preferred source: route prefsrc, else the first address of ifindex */
    be32 nexthop;               /* gateway, or the destination itself when directly connected */
    uint32_t mtu;               /* route MTU if set, else link MTU */
    uint8_t type;               /* RTN_* of the matched route */
};

/* Result of an IPv6 route lookup. */
struct ctl_nexthop6 {
    uint32_t ifindex;
    struct wire_ipv6_addr src;      /* RFC 6724 §5 choice among the host's addresses, :: if none */
    struct wire_ipv6_addr nexthop;  /* gateway, or the destination itself on link */
    uint32_t mtu;
    uint8_t type;
};

struct ctl;

/* Opens netlink sockets in the calling process's network namespace, dumps links, addresses,
 * main-table routes and neighbours into t, and subscribes to their changes. Negative errno. */
int ctl__open(struct ctl **out, struct ctl_tables *t);
void ctl__close(struct ctl *c);
/* Fd that becomes readable when updates are pending (for epoll). */
int ctl__fd(const struct ctl *c);
/* Every netlink socket of c (3), for a caller that must keep them open. */
int ctl__fds(const struct ctl *c, int fds[3]);
/* Applies every pending update without blocking. Returns how many were applied, or -errno. */
int ctl__process(struct ctl *c);
/* Asks the kernel to resolve ip on ifindex (RTM_NEWNEIGH with NTF_USE): the kernel sends the ARP
 * request and the reply lands in its own table, which reaches us as an update. Never blocks. */
int ctl__resolve(struct ctl *c, uint32_t ifindex, be32 ip);

/* IPv6 counterparts. oif: the destination's scope (sin6_scope_id) or a bound device, 0 for any;
 * a link-local or link-scope multicast destination needs it (-EINVAL without). */
int ctl__resolve6(struct ctl *c, uint32_t ifindex, const struct wire_ipv6_addr *ip);
int ctl_tables__route6(const struct ctl_tables *t, const struct wire_ipv6_addr *dst, uint32_t oif,
                       struct ctl_nexthop6 *out);
/* The same for a sender that has its source already (src, e.g. a connection's local address):
 * out->src is src, and the source selection is skipped (the answer is the same otherwise,
 * -EADDRNOTAVAIL included). src NULL: ctl_tables__route6. */
int ctl_tables__route6_from(const struct ctl_tables *t, const struct wire_ipv6_addr *src,
                            const struct wire_ipv6_addr *dst, uint32_t oif, struct ctl_nexthop6 *out);
int ctl_tables__neigh6(const struct ctl_tables *t, uint32_t ifindex, const struct wire_ipv6_addr *ip, uint8_t mac[6]);
/* ifindex of the local address addr (on ifindex when not 0), or 0 when it is not ours. */
uint32_t ctl_tables__local6(const struct ctl_tables *t, const struct wire_ipv6_addr *addr, uint32_t ifindex);
/* Source address selection (RFC 6724 §5, rules 1, 2, 3, 5 and 8) for dst leaving through
 * ifindex; false when the host has no usable address. */
bool ctl_tables__select_src6(const struct ctl_tables *t, uint32_t ifindex, const struct wire_ipv6_addr *dst,
                             struct wire_ipv6_addr *src);

/* Longest-prefix match over the main table (ties broken by lowest metric). 0, or -ENETUNREACH. */
int ctl_tables__route(const struct ctl_tables *t, be32 dst, struct ctl_nexthop *out);
/* 0 and the MAC when the kernel has a usable entry (REACHABLE, STALE, DELAY, PROBE, PERMANENT,
 * NOARP), -EAGAIN when absent or still INCOMPLETE, -EHOSTUNREACH when FAILED. */
int ctl_tables__neigh(const struct ctl_tables *t, uint32_t ifindex, be32 ip, uint8_t mac[6]);
const struct ctl_link *ctl_tables__link(const struct ctl_tables *t, uint32_t ifindex);
const struct ctl_link *ctl_tables__link_by_name(const struct ctl_tables *t, const char *name);
/* True when addr is one of this host's addresses (on ifindex, or any when ifindex is 0). */
bool ctl_tables__is_local(const struct ctl_tables *t, be32 addr, uint32_t ifindex);
/* The first IPv4 address of ifindex, or 0. */
be32 ctl_tables__first_addr(const struct ctl_tables *t, uint32_t ifindex);

#endif
