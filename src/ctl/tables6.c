/* Read side of the IPv6 tables: route lookup (longest prefix in the main table, link-local
 * destinations by their scope), neighbours, local addresses and source address selection after
 * RFC 6724 §5. Pure functions over struct ctl_tables, counts clamped like tables.c. */
#include <endian.h>
#include <errno.h>
#include <string.h>

#include <linux/if.h>
#include <linux/if_addr.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>

#include "ctl/ctl.h"

static uint32_t count(uint32_t n, uint32_t max)
{
    return n < max ? n : max;
}

static bool addr_eq(const struct wire_ipv6_addr *a, const struct wire_ipv6_addr *b)
{
    return memcmp(a, b, sizeof(*a)) == 0;
}

static bool is_zero(const struct wire_ipv6_addr *a)
{
    static const struct wire_ipv6_addr zero;
    return addr_eq(a, &zero);
}

/* Leading bits a and b share, up to 128: two 64-bit words in network order (every route
 * lookup runs this once per route, so not byte by byte). */
static unsigned common_prefix(const struct wire_ipv6_addr *a, const struct wire_ipv6_addr *b)
{
    uint64_t x[2], y[2];
    memcpy(x, a, sizeof(x));
    memcpy(y, b, sizeof(y));
    for (unsigned i = 0; i < 2; i++) {
        uint64_t d = be64toh(x[i] ^ y[i]);
        if (d)
            return i * 64 + (unsigned)__builtin_clzll(d);
    }
    return 128;
}

/* RFC 6724 §3.1 scopes: 2 link-local (and loopback), 5 site-local, 14 global; multicast carries
 * its own. */
static unsigned scope_of(const struct wire_ipv6_addr *a)
{
    static const struct wire_ipv6_addr loop = { .b = { [15] = 1 } };
    if (wire_ipv6__is_multicast(a))
        return a->b[1] & 0x0f;
    if (wire_ipv6__is_link_local(a) || addr_eq(a, &loop))
        return 2;
    if (a->b[0] == 0xfe && (a->b[1] & 0xc0) == 0xc0)
        return 5;
    return 14;
}

static uint32_t link_mtu(const struct ctl_tables *t, uint32_t ifindex)
{
    const struct ctl_link *l = ctl_tables__link(t, ifindex);
    return l ? l->mtu : 0;
}

static bool link_up(const struct ctl_tables *t, uint32_t ifindex)
{
    const struct ctl_link *l = ctl_tables__link(t, ifindex);
    return l && (l->flags & IFF_UP);
}

uint32_t ctl_tables__local6(const struct ctl_tables *t, const struct wire_ipv6_addr *addr, uint32_t ifindex)
{
    uint32_t n = count(t->naddrs6, CTL_MAX_ADDRS6);
    for (uint32_t i = 0; i < n; i++) {
        const struct ctl_addr6 *a = &t->addrs6[i];
        if (addr_eq(&a->addr, addr) && (ifindex == 0 || a->ifindex == ifindex))
            return a->ifindex ? a->ifindex : 1;
    }
    return 0;
}

/* True when candidate a beats b (both usable) as the source for dst leaving through oif. */
static bool src_better(const struct ctl_addr6 *a, const struct ctl_addr6 *b, const struct wire_ipv6_addr *dst,
                       uint32_t oif)
{
    /* Rule 1: the destination itself. */
    bool sa = addr_eq(&a->addr, dst), sb = addr_eq(&b->addr, dst);
    if (sa != sb)
        return sa;
    /* Rule 2: the smallest scope that still reaches the destination. */
    unsigned ca = scope_of(&a->addr), cb = scope_of(&b->addr), cd = scope_of(dst);
    if (ca != cb)
        return ca < cb ? ca >= cd : cb < cd;
    /* Rule 3: avoid deprecated addresses. */
    bool da = a->flags & IFA_F_DEPRECATED, db = b->flags & IFA_F_DEPRECATED;
    if (da != db)
        return !da;
    /* Rule 5: an address of the outgoing interface. */
    bool oa = a->ifindex == oif, ob = b->ifindex == oif;
    if (oa != ob)
        return oa;
    /* Rule 8: the longest matching prefix. */
    return common_prefix(&a->addr, dst) > common_prefix(&b->addr, dst);
}

/* A candidate source for a datagram leaving through ifindex. An address still in duplicate
 * address detection (or that failed it) must not be used (RFC 4862 §5.4); a link-local one means
 * something only on its own link. */
static bool src_usable(const struct ctl_addr6 *a, uint32_t ifindex)
{
    if (a->flags & (IFA_F_TENTATIVE | IFA_F_DADFAILED))
        return false;
    return a->ifindex == ifindex || scope_of(&a->addr) > 2;
}

bool ctl_tables__select_src6(const struct ctl_tables *t, uint32_t ifindex, const struct wire_ipv6_addr *dst,
                             struct wire_ipv6_addr *src)
{
    const struct ctl_addr6 *best = NULL;
    uint32_t n = count(t->naddrs6, CTL_MAX_ADDRS6);
    for (uint32_t i = 0; i < n; i++) {
        const struct ctl_addr6 *a = &t->addrs6[i];
        if (!src_usable(a, ifindex))
            continue;
        if (!best || src_better(a, best, dst, ifindex))
            best = a;
    }
    if (!best)
        return false;
    *src = best->addr;
    return true;
}

/* The route's source: the caller's own (given) when it has one, which then only has to exist
 * among the usable ones for the route to hold, as selection would require; else selected. */
static bool route_src(const struct ctl_tables *t, uint32_t ifindex, const struct wire_ipv6_addr *dst,
                      const struct wire_ipv6_addr *given, struct wire_ipv6_addr *src)
{
    if (!given)
        return ctl_tables__select_src6(t, ifindex, dst, src);
    uint32_t n = count(t->naddrs6, CTL_MAX_ADDRS6);
    for (uint32_t i = 0; i < n; i++) {
        if (src_usable(&t->addrs6[i], ifindex)) {
            *src = *given;
            return true;
        }
    }
    return false;
}

int ctl_tables__route6(const struct ctl_tables *t, const struct wire_ipv6_addr *dst, uint32_t oif,
                       struct ctl_nexthop6 *out)
{
    return ctl_tables__route6_from(t, NULL, dst, oif, out);
}

int ctl_tables__route6_from(const struct ctl_tables *t, const struct wire_ipv6_addr *src,
                            const struct wire_ipv6_addr *dst, uint32_t oif, struct ctl_nexthop6 *out)
{
    memset(out, 0, sizeof(*out));
    uint32_t local = ctl_tables__local6(t, dst, 0);
    if (local) {
        out->ifindex = local;
        out->src = *dst;
        out->nexthop = *dst;
        out->mtu = link_mtu(t, local);
        out->type = RTN_LOCAL;
        return 0;
    }
    /* Link scope: the destination names no link by itself; the caller's scope id does. */
    if (scope_of(dst) <= 2) {
        if (!oif)
            return -EINVAL;
        if (!link_up(t, oif))
            return -ENETUNREACH;
        out->ifindex = oif;
        out->nexthop = *dst;
        out->mtu = link_mtu(t, oif);
        out->type = RTN_UNICAST;
        if (!route_src(t, oif, dst, src, &out->src))
            return -EADDRNOTAVAIL;
        return 0;
    }

    const struct ctl_route6 *best = NULL;
    uint32_t n = count(t->nroutes6, CTL_MAX_ROUTES6);
    for (uint32_t i = 0; i < n; i++) {
        const struct ctl_route6 *r = &t->routes6[i];
        if (r->prefixlen > 128 || common_prefix(dst, &r->dst) < r->prefixlen)
            continue;
        if (oif && r->oif && r->oif != oif)
            continue;
        if (r->type == RTN_UNICAST && !link_up(t, r->oif))
            continue;
        if (!best || r->prefixlen > best->prefixlen ||
            (r->prefixlen == best->prefixlen && r->priority < best->priority))
            best = r;
    }
    if (!best)
        return -ENETUNREACH;
    out->ifindex = best->oif;
    out->nexthop = is_zero(&best->gateway) ? *dst : best->gateway;
    out->mtu = best->mtu ? best->mtu : link_mtu(t, best->oif);
    out->type = best->type;
    if (best->type != RTN_UNICAST)
        return 0;
    if (!is_zero(&best->prefsrc))
        out->src = src ? *src : best->prefsrc;
    else if (!route_src(t, best->oif, dst, src, &out->src))
        return -EADDRNOTAVAIL;
    return 0;
}

int ctl_tables__neigh6(const struct ctl_tables *t, uint32_t ifindex, const struct wire_ipv6_addr *ip, uint8_t mac[6])
{
    uint32_t n = count(t->nneighs6, CTL_MAX_NEIGHS6);
    for (uint32_t i = 0; i < n; i++) {
        const struct ctl_neigh6 *e = &t->neighs6[i];
        if (e->ifindex != ifindex || !addr_eq(&e->addr, ip))
            continue;
        if (e->state & (NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT | NUD_NOARP)) {
            memcpy(mac, e->mac, 6);
            return 0;
        }
        if (e->state & NUD_FAILED)
            return -EHOSTUNREACH;
        return -EAGAIN;
    }
    return -EAGAIN;
}
