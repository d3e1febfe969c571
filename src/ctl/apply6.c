/* rtnetlink AF_INET6 messages -> the IPv6 arrays of struct ctl_tables. Same keys and the same
 * insert/overwrite/swap-remove discipline as apply.c (address: ifindex+addr+prefixlen; route:
 * dst+prefixlen+metric+oif, since IPv6 puts a fe80::/64 of the same metric on every link;
 * neighbour: ifindex+addr). */
#include <errno.h>
#include <string.h>

#include <libmnl/libmnl.h>
#include <linux/if_addr.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include "ctl/ctl_apply.h"

/* 16 raw bytes, copied (netlink payloads are only 4-byte aligned). 1 present, 0 absent. */
static int attr_in6(const struct nlattr *a, struct wire_ipv6_addr *v)
{
    if (!a)
        return 0;
    if (mnl_attr_get_payload_len(a) != sizeof(*v))
        return -EINVAL;
    memcpy(v, mnl_attr_get_payload(a), sizeof(*v));
    return 1;
}

static void prefix_apply(struct wire_ipv6_addr *a, uint8_t len)
{
    for (unsigned i = 0; i < 16; i++) {
        unsigned bits = len >= (i + 1) * 8 ? 8 : (len > i * 8 ? len - i * 8 : 0);
        a->b[i] &= (uint8_t)(bits == 8 ? 0xff : (0xff00 >> bits) & 0xff);
    }
}

static bool addr_eq(const struct wire_ipv6_addr *a, const struct wire_ipv6_addr *b)
{
    return memcmp(a, b, sizeof(*a)) == 0;
}

void ctl_apply6__purge(struct ctl_tables *t, uint32_t ifindex)
{
    for (uint32_t i = 0; i < t->naddrs6;)
        if (t->addrs6[i].ifindex == ifindex)
            t->addrs6[i] = t->addrs6[--t->naddrs6];
        else
            i++;
    for (uint32_t i = 0; i < t->nroutes6;)
        if (t->routes6[i].oif == ifindex)
            t->routes6[i] = t->routes6[--t->nroutes6];
        else
            i++;
    for (uint32_t i = 0; i < t->nneighs6;)
        if (t->neighs6[i].ifindex == ifindex)
            t->neighs6[i] = t->neighs6[--t->nneighs6];
        else
            i++;
}

int ctl_apply6__addr(struct ctl_tables *t, const struct nlmsghdr *nlh)
{
    const struct nlattr *tb[IFA_MAX + 1];
    const struct ifaddrmsg *ifa = mnl_nlmsg_get_payload(nlh);
    if (ctl_attr__parse(nlh, sizeof(*ifa), tb, IFA_MAX) < 0)
        return -EINVAL;
    if (ifa->ifa_prefixlen > 128)
        return -EINVAL;
    struct ctl_addr6 a = { .ifindex = ifa->ifa_index, .prefixlen = ifa->ifa_prefixlen, .scope = ifa->ifa_scope,
                           .flags = ifa->ifa_flags };
    int r = attr_in6(tb[IFA_LOCAL], &a.addr);
    if (r == 0)
        r = attr_in6(tb[IFA_ADDRESS], &a.addr);
    if (r <= 0)
        return -EINVAL;
    /* IFA_FLAGS carries the 32-bit flags; ifa_flags holds only the low 8. */
    if (ctl_attr__u32(tb[IFA_FLAGS], &a.flags) < 0)
        return -EINVAL;

    int i = -1;
    for (uint32_t k = 0; k < t->naddrs6; k++)
        if (t->addrs6[k].ifindex == a.ifindex && addr_eq(&t->addrs6[k].addr, &a.addr) &&
            t->addrs6[k].prefixlen == a.prefixlen) {
            i = (int)k;
            break;
        }
    if (nlh->nlmsg_type == RTM_DELADDR) {
        if (i >= 0)
            t->addrs6[i] = t->addrs6[--t->naddrs6];
        return CTL_APPLY_USED;
    }
    if (i < 0) {
        if (t->naddrs6 >= CTL_MAX_ADDRS6) {
            t->overflows++;
            return CTL_APPLY_USED;
        }
        i = (int)t->naddrs6++;
    }
    /* A tentative address becomes usable with a later RTM_NEWADDR without IFA_F_TENTATIVE. */
    t->addrs6[i] = a;
    return CTL_APPLY_USED;
}

/* First hop of a multipath route (no ECMP in the stack), as for IPv4. */
static int multipath_first(const struct nlattr *mp, struct ctl_route6 *r)
{
    const struct nlattr *gw;
    if (ctl_attr__multipath_first(mp, &r->oif, &gw) < 0 || (gw && attr_in6(gw, &r->gateway) < 0))
        return -EINVAL;
    return 0;
}

int ctl_apply6__route(struct ctl_tables *t, const struct nlmsghdr *nlh)
{
    const struct nlattr *tb[RTA_MAX + 1];
    const struct rtmsg *rtm = mnl_nlmsg_get_payload(nlh);
    if (ctl_attr__parse(nlh, sizeof(*rtm), tb, RTA_MAX) < 0)
        return -EINVAL;
    if (rtm->rtm_dst_len > 128)
        return -EINVAL;
    if (rtm->rtm_flags & RTM_F_CLONED)
        return 0;
    struct ctl_route6 r = { .prefixlen = rtm->rtm_dst_len, .type = rtm->rtm_type, .table = rtm->rtm_table };
    if (ctl_attr__u32(tb[RTA_TABLE], &r.table) < 0)
        return -EINVAL;
    /* The local table (our own addresses, multicast) is answered from the address table. */
    if (r.table != RT_TABLE_MAIN)
        return 0;
    switch (r.type) {
    case RTN_UNICAST: case RTN_BLACKHOLE: case RTN_UNREACHABLE: case RTN_PROHIBIT:
        break;
    default:
        return 0;
    }
    if (attr_in6(tb[RTA_DST], &r.dst) < 0 || attr_in6(tb[RTA_GATEWAY], &r.gateway) < 0 ||
        attr_in6(tb[RTA_PREFSRC], &r.prefsrc) < 0 || ctl_attr__u32(tb[RTA_OIF], &r.oif) < 0 ||
        ctl_attr__u32(tb[RTA_PRIORITY], &r.priority) < 0)
        return -EINVAL;
    if (tb[RTA_METRICS] && ctl_attr__metrics_mtu(tb[RTA_METRICS], &r.mtu) < 0)
        return -EINVAL;
    if (tb[RTA_MULTIPATH] && !tb[RTA_OIF] && multipath_first(tb[RTA_MULTIPATH], &r) < 0)
        return -EINVAL;
    prefix_apply(&r.dst, r.prefixlen);

    int i = -1;
    for (uint32_t k = 0; k < t->nroutes6; k++) {
        const struct ctl_route6 *o = &t->routes6[k];
        if (addr_eq(&o->dst, &r.dst) && o->prefixlen == r.prefixlen && o->priority == r.priority &&
            o->oif == r.oif) {
            i = (int)k;
            break;
        }
    }
    if (nlh->nlmsg_type == RTM_DELROUTE) {
        if (i >= 0)
            t->routes6[i] = t->routes6[--t->nroutes6];
        return CTL_APPLY_USED;
    }
    if (i < 0) {
        if (t->nroutes6 >= CTL_MAX_ROUTES6) {
            t->overflows++;
            return CTL_APPLY_USED;
        }
        i = (int)t->nroutes6++;
    }
    t->routes6[i] = r;
    return CTL_APPLY_USED;
}

int ctl_apply6__neigh(struct ctl_tables *t, const struct nlmsghdr *nlh)
{
    const struct nlattr *tb[NDA_MAX + 1];
    const struct ndmsg *ndm = mnl_nlmsg_get_payload(nlh);
    if (ctl_attr__parse(nlh, sizeof(*ndm), tb, NDA_MAX) < 0)
        return -EINVAL;
    /* Proxy-ND entries answer for others. */
    if ((ndm->ndm_flags & NTF_PROXY) || ndm->ndm_ifindex <= 0)
        return 0;
    struct ctl_neigh6 n = { .ifindex = (uint32_t)ndm->ndm_ifindex, .state = ndm->ndm_state };
    if (attr_in6(tb[NDA_DST], &n.addr) <= 0)
        return -EINVAL;

    int i = -1;
    for (uint32_t k = 0; k < t->nneighs6; k++)
        if (t->neighs6[k].ifindex == n.ifindex && addr_eq(&t->neighs6[k].addr, &n.addr)) {
            i = (int)k;
            break;
        }
    if (nlh->nlmsg_type == RTM_DELNEIGH) {
        if (i >= 0)
            t->neighs6[i] = t->neighs6[--t->nneighs6];
        return CTL_APPLY_USED;
    }
    if (i >= 0)
        memcpy(n.mac, t->neighs6[i].mac, sizeof(n.mac));
    if (tb[NDA_LLADDR] && mnl_attr_get_payload_len(tb[NDA_LLADDR]) == sizeof(n.mac))
        memcpy(n.mac, mnl_attr_get_payload(tb[NDA_LLADDR]), sizeof(n.mac));
    if (i < 0) {
        if (t->nneighs6 >= CTL_MAX_NEIGHS6) {
            t->overflows++;
            return CTL_APPLY_USED;
        }
        i = (int)t->nneighs6++;
    }
    t->neighs6[i] = n;
    return CTL_APPLY_USED;
}
