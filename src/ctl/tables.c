/* Read side of the mirrored control-plane tables: route, neighbour, link and address lookups.
 * Pure functions over struct ctl_tables (no sockets, no clock), so they are safe to run in any
 * process that maps the tables; counts are clamped so a torn read cannot index past an array. */
#include <errno.h>
#include <string.h>

#include <linux/if.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>

#include "ctl/ctl.h"

static be32 prefix_mask(uint8_t len)
{
    return len == 0 ? 0 : hton32(len >= 32 ? UINT32_MAX : ~(UINT32_MAX >> len));
}

static uint32_t count(uint32_t n, uint32_t max)
{
    return n < max ? n : max;
}

const struct ctl_link *ctl_tables__link(const struct ctl_tables *t, uint32_t ifindex)
{
    uint32_t n = count(t->nlinks, CTL_MAX_LINKS);
    for (uint32_t i = 0; i < n; i++)
        if (t->links[i].ifindex == ifindex)
            return &t->links[i];
    return NULL;
}

const struct ctl_link *ctl_tables__link_by_name(const struct ctl_tables *t, const char *name)
{
    uint32_t n = count(t->nlinks, CTL_MAX_LINKS);
    for (uint32_t i = 0; i < n; i++)
        if (strncmp(t->links[i].name, name, CTL_IFNAMSIZ) == 0)
            return &t->links[i];
    return NULL;
}

bool ctl_tables__is_local(const struct ctl_tables *t, be32 addr, uint32_t ifindex)
{
    uint32_t n = count(t->naddrs, CTL_MAX_ADDRS);
    for (uint32_t i = 0; i < n; i++)
        if (t->addrs[i].addr == addr && (ifindex == 0 || t->addrs[i].ifindex == ifindex))
            return true;
    return false;
}

be32 ctl_tables__first_addr(const struct ctl_tables *t, uint32_t ifindex)
{
    uint32_t n = count(t->naddrs, CTL_MAX_ADDRS);
    for (uint32_t i = 0; i < n; i++)
        if (t->addrs[i].ifindex == ifindex)
            return t->addrs[i].addr;
    return 0;
}

/* Source for a route without prefsrc: like the kernel's inet_select_addr(), prefer an address of
 * the device whose subnet holds the next hop, else the device's first address. */
static be32 select_src(const struct ctl_tables *t, uint32_t ifindex, be32 nexthop)
{
    uint32_t n = count(t->naddrs, CTL_MAX_ADDRS);
    for (uint32_t i = 0; i < n; i++) {
        const struct ctl_addr *a = &t->addrs[i];
        be32 m = prefix_mask(a->prefixlen);
        if (a->ifindex == ifindex && a->prefixlen < 32 && (a->addr & m) == (nexthop & m))
            return a->addr;
    }
    return ctl_tables__first_addr(t, ifindex);
}

static uint32_t link_mtu(const struct ctl_tables *t, uint32_t ifindex)
{
    const struct ctl_link *l = ctl_tables__link(t, ifindex);
    return l ? l->mtu : 0;
}

/* Local and directed-broadcast destinations are routed by the kernel's local table, which we do
 * not mirror; answer them from the address table so a caller never puts them on the wire. */
static bool route_local(const struct ctl_tables *t, be32 dst, struct ctl_nexthop *out)
{
    uint32_t n = count(t->naddrs, CTL_MAX_ADDRS);
    for (uint32_t i = 0; i < n; i++) {
        const struct ctl_addr *a = &t->addrs[i];
        if (a->addr == dst || (a->broadcast != 0 && a->broadcast == dst)) {
            *out = (struct ctl_nexthop){
                .ifindex = a->ifindex,
                .src = a->addr,
                .nexthop = dst,
                .mtu = link_mtu(t, a->ifindex),
                .type = a->addr == dst ? RTN_LOCAL : RTN_BROADCAST,
            };
            return true;
        }
    }
    return false;
}

int ctl_tables__route(const struct ctl_tables *t, be32 dst, struct ctl_nexthop *out)
{
    if (route_local(t, dst, out))
        return 0;

    const struct ctl_route *best = NULL;
    uint32_t n = count(t->nroutes, CTL_MAX_ROUTES);
    for (uint32_t i = 0; i < n; i++) {
        const struct ctl_route *r = &t->routes[i];
        if ((dst & prefix_mask(r->prefixlen)) != r->dst)
            continue;
        /* Unicast routes through a device that is down are dead (the kernel flushes them; until
         * our re-dump lands, skip them). */
        if (r->type == RTN_UNICAST) {
            const struct ctl_link *l = ctl_tables__link(t, r->oif);
            if (!l || !(l->flags & IFF_UP))
                continue;
        }
        if (!best || r->prefixlen > best->prefixlen ||
            (r->prefixlen == best->prefixlen && r->priority < best->priority))
            best = r;
    }
    if (!best)
        return -ENETUNREACH;

    /* Blackhole/unreachable/prohibit also match: the caller sees the type and drops or answers
     * with the matching ICMP error, as the kernel would. */
    be32 nh = best->gateway ? best->gateway : dst;
    *out = (struct ctl_nexthop){
        .ifindex = best->oif,
        .nexthop = nh,
        .src = best->prefsrc ? best->prefsrc : (best->oif ? select_src(t, best->oif, nh) : 0),
        .mtu = best->mtu ? best->mtu : link_mtu(t, best->oif),
        .type = best->type,
    };
    return 0;
}

int ctl_tables__neigh(const struct ctl_tables *t, uint32_t ifindex, be32 ip, uint8_t mac[6])
{
    uint32_t n = count(t->nneighs, CTL_MAX_NEIGHS);
    for (uint32_t i = 0; i < n; i++) {
        const struct ctl_neigh *e = &t->neighs[i];
        if (e->ifindex != ifindex || e->addr != ip)
            continue;
        if (e->state & (NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT | NUD_NOARP)) {
            memcpy(mac, e->mac, 6);
            return 0;
        }
        if (e->state & NUD_FAILED)
            return -EHOSTUNREACH;
        return -EAGAIN;         /* INCOMPLETE, NONE */
    }
    return -EAGAIN;
}
