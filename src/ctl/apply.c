/* rtnetlink message -> mirrored table. Each kind of object has a key (link: ifindex; address:
 * ifindex+addr+prefixlen; route: dst+prefixlen+metric; neighbour: ifindex+addr); RTM_NEW* inserts or
 * overwrites the entry with that key, RTM_DEL* removes it by swapping the last entry into its slot,
 * so the tables stay dense arrays without pointers (they live in shared memory). */
#include <errno.h>
#include <string.h>

#include <libmnl/libmnl.h>
#include <linux/if.h>
#include <linux/if_addr.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include "ctl/ctl_apply.h"

void ctl_tables__write_begin(struct ctl_tables *t)
{
    uint32_t s = __atomic_load_n(&t->seq, __ATOMIC_RELAXED);
    /* A writer that died mid-update leaves seq odd; keep it odd rather than making it even. */
    __atomic_store_n(&t->seq, s | 1, __ATOMIC_RELAXED);
    /* Orders the odd seq before every table store that follows (pairs with the reader's acquire
     * fence before it re-reads seq). */
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

void ctl_tables__write_end(struct ctl_tables *t)
{
    uint32_t s = __atomic_load_n(&t->seq, __ATOMIC_RELAXED);
    __atomic_store_n(&t->seq, (s | 1) + 1, __ATOMIC_RELEASE);
}

/* ---- attribute collection ---------------------------------------------------------------- */

struct attr_table {
    const struct nlattr **tb;
    uint16_t max;
};

/* Keeps the last attribute of each known type; lengths are checked where each one is used. */
static int attr_collect(const struct nlattr *a, void *data)
{
    struct attr_table *at = data;
    uint16_t type = mnl_attr_get_type(a);
    if (type <= at->max)
        at->tb[type] = a;
    return MNL_CB_OK;
}

int ctl_attr__parse(const struct nlmsghdr *nlh, size_t hdrlen, const struct nlattr **tb, uint16_t max)
{
    struct attr_table at = { tb, max };
    memset(tb, 0, (max + 1u) * sizeof(*tb));
    if (mnl_nlmsg_get_payload_len(nlh) < hdrlen)
        return -EINVAL;
    return mnl_attr_parse(nlh, (unsigned int)hdrlen, attr_collect, &at) == MNL_CB_ERROR ? -EINVAL : 0;
}

int ctl_attr__u32(const struct nlattr *a, uint32_t *v)
{
    if (!a)
        return 0;
    if (mnl_attr_validate(a, MNL_TYPE_U32) < 0)
        return -EINVAL;
    *v = mnl_attr_get_u32(a);
    return 1;
}

/* IPv4 addresses are 4 raw bytes in network order; copied, never cast, as the payload is only
 * 4-byte aligned by netlink convention. */
static int attr_in4(const struct nlattr *a, be32 *v)
{
    if (!a)
        return 0;
    if (mnl_attr_get_payload_len(a) != 4)
        return -EINVAL;
    memcpy(v, mnl_attr_get_payload(a), 4);
    return 1;
}

static be32 prefix_mask(uint8_t len)
{
    return len == 0 ? 0 : hton32(len >= 32 ? UINT32_MAX : ~(UINT32_MAX >> len));
}

/* ---- links ------------------------------------------------------------------------------- */

static int link_find(const struct ctl_tables *t, uint32_t ifindex)
{
    for (uint32_t i = 0; i < t->nlinks; i++)
        if (t->links[i].ifindex == ifindex)
            return (int)i;
    return -1;
}

/* A link that disappears takes its addresses, routes and neighbours with it. */
static void purge_ifindex(struct ctl_tables *t, uint32_t ifindex)
{
    for (uint32_t i = 0; i < t->naddrs;)
        if (t->addrs[i].ifindex == ifindex)
            t->addrs[i] = t->addrs[--t->naddrs];
        else
            i++;
    for (uint32_t i = 0; i < t->nroutes;)
        if (t->routes[i].oif == ifindex)
            t->routes[i] = t->routes[--t->nroutes];
        else
            i++;
    for (uint32_t i = 0; i < t->nneighs;)
        if (t->neighs[i].ifindex == ifindex)
            t->neighs[i] = t->neighs[--t->nneighs];
        else
            i++;
    ctl_apply6__purge(t, ifindex);
}

static int apply_link(struct ctl_tables *t, const struct nlmsghdr *nlh)
{
    const struct nlattr *tb[IFLA_MAX + 1];
    const struct ifinfomsg *ifi = mnl_nlmsg_get_payload(nlh);
    if (ctl_attr__parse(nlh, sizeof(*ifi), tb, IFLA_MAX) < 0)
        return -EINVAL;
    /* AF_BRIDGE and friends describe ports of a master device, not the device itself. */
    if (ifi->ifi_family != AF_UNSPEC || ifi->ifi_index <= 0)
        return 0;
    uint32_t ifindex = (uint32_t)ifi->ifi_index;
    int i = link_find(t, ifindex);

    if (nlh->nlmsg_type == RTM_DELLINK) {
        if (i >= 0)
            t->links[i] = t->links[--t->nlinks];
        purge_ifindex(t, ifindex);
        /* The kernel flushes routes through a vanished device without RTM_DELROUTE. */
        return CTL_APPLY_USED | CTL_APPLY_RESYNC;
    }

    struct ctl_link l = { .ifindex = ifindex, .flags = ifi->ifi_flags };
    if (i >= 0)
        l = t->links[i];
    uint32_t old_flags = l.flags;
    l.flags = ifi->ifi_flags;
    if (ctl_attr__u32(tb[IFLA_MTU], &l.mtu) < 0)
        return -EINVAL;
    if (tb[IFLA_IFNAME]) {
        if (mnl_attr_validate(tb[IFLA_IFNAME], MNL_TYPE_NUL_STRING) < 0)
            return -EINVAL;
        memset(l.name, 0, sizeof(l.name));
        strncpy(l.name, mnl_attr_get_str(tb[IFLA_IFNAME]), sizeof(l.name) - 1);
    }
    if (tb[IFLA_ADDRESS] && mnl_attr_get_payload_len(tb[IFLA_ADDRESS]) == sizeof(l.mac))
        memcpy(l.mac, mnl_attr_get_payload(tb[IFLA_ADDRESS]), sizeof(l.mac));

    if (i < 0) {
        if (t->nlinks >= CTL_MAX_LINKS) {
            t->overflows++;
            return CTL_APPLY_USED;
        }
        i = (int)t->nlinks++;
    }
    t->links[i] = l;
    /* Taking a device down (NETDEV_DOWN) flushes its routes silently, see fib_disable_ip(). */
    if ((old_flags & IFF_UP) && !(l.flags & IFF_UP))
        return CTL_APPLY_USED | CTL_APPLY_RESYNC;
    return CTL_APPLY_USED;
}

/* ---- addresses --------------------------------------------------------------------------- */

static int apply_addr(struct ctl_tables *t, const struct nlmsghdr *nlh)
{
    const struct nlattr *tb[IFA_MAX + 1];
    const struct ifaddrmsg *ifa = mnl_nlmsg_get_payload(nlh);
    if (ctl_attr__parse(nlh, sizeof(*ifa), tb, IFA_MAX) < 0)
        return -EINVAL;
    if (ifa->ifa_family == AF_INET6)
        return ctl_apply6__addr(t, nlh);
    if (ifa->ifa_family != AF_INET || ifa->ifa_prefixlen > 32)
        return 0;

    struct ctl_addr a = { .ifindex = ifa->ifa_index, .prefixlen = ifa->ifa_prefixlen };
    /* IFA_LOCAL is our address; IFA_ADDRESS is the peer's on point-to-point links and equal to
     * IFA_LOCAL elsewhere. */
    int r = attr_in4(tb[IFA_LOCAL], &a.addr);
    if (r == 0)
        r = attr_in4(tb[IFA_ADDRESS], &a.addr);
    if (r <= 0)
        return -EINVAL;
    if (attr_in4(tb[IFA_BROADCAST], &a.broadcast) < 0)
        return -EINVAL;

    int i = -1;
    for (uint32_t k = 0; k < t->naddrs; k++)
        if (t->addrs[k].ifindex == a.ifindex && t->addrs[k].addr == a.addr &&
            t->addrs[k].prefixlen == a.prefixlen) {
            i = (int)k;
            break;
        }

    if (nlh->nlmsg_type == RTM_DELADDR) {
        if (i >= 0)
            t->addrs[i] = t->addrs[--t->naddrs];
        /* Routes whose prefsrc was this address go away without RTM_DELROUTE
         * (fib_sync_down_addr()). */
        return CTL_APPLY_USED | CTL_APPLY_RESYNC;
    }
    if (i < 0) {
        if (t->naddrs >= CTL_MAX_ADDRS) {
            t->overflows++;
            return CTL_APPLY_USED;
        }
        i = (int)t->naddrs++;
    }
    t->addrs[i] = a;
    return CTL_APPLY_USED;
}

/* ---- routes ------------------------------------------------------------------------------ */

int ctl_attr__metrics_mtu(const struct nlattr *metrics, uint32_t *mtu)
{
    const struct nlattr *a;
    mnl_attr_for_each_nested(a, metrics) {
        if (mnl_attr_get_type(a) == RTAX_MTU)
            return ctl_attr__u32(a, mtu) < 0 ? -EINVAL : 0;
    }
    return 0;
}

/* Multipath routes: we mirror the first hop only (no ECMP in the stack yet). Both families. */
int ctl_attr__multipath_first(const struct nlattr *mp, uint32_t *oif, const struct nlattr **gateway)
{
    size_t len = mnl_attr_get_payload_len(mp);
    const struct rtnexthop *nh = mnl_attr_get_payload(mp);
    if (len < sizeof(*nh) || nh->rtnh_len < sizeof(*nh) || nh->rtnh_len > len)
        return -EINVAL;
    *oif = (uint32_t)nh->rtnh_ifindex;
    *gateway = NULL;
    const char *p = (const char *)nh + RTNH_ALIGN(sizeof(*nh));
    const char *end = (const char *)nh + nh->rtnh_len;
    while (p + sizeof(struct nlattr) <= end) {
        const struct nlattr *a = (const struct nlattr *)p;
        if (a->nla_len < sizeof(*a) || p + a->nla_len > end)
            return -EINVAL;
        if (mnl_attr_get_type(a) == RTA_GATEWAY)
            *gateway = a;
        p += MNL_ALIGN(a->nla_len);
    }
    return 0;
}

static int multipath_first(const struct nlattr *mp, struct ctl_route *r)
{
    const struct nlattr *gw;
    if (ctl_attr__multipath_first(mp, &r->oif, &gw) < 0 || (gw && attr_in4(gw, &r->gateway) < 0))
        return -EINVAL;
    return 0;
}

static int apply_route(struct ctl_tables *t, const struct nlmsghdr *nlh)
{
    const struct nlattr *tb[RTA_MAX + 1];
    const struct rtmsg *rtm = mnl_nlmsg_get_payload(nlh);
    if (ctl_attr__parse(nlh, sizeof(*rtm), tb, RTA_MAX) < 0)
        return -EINVAL;
    if (rtm->rtm_family == AF_INET6)
        return ctl_apply6__route(t, nlh);
    if (rtm->rtm_family != AF_INET || rtm->rtm_dst_len > 32 || (rtm->rtm_flags & RTM_F_CLONED))
        return 0;

    struct ctl_route r = { .prefixlen = rtm->rtm_dst_len, .type = rtm->rtm_type, .table = rtm->rtm_table };
    if (ctl_attr__u32(tb[RTA_TABLE], &r.table) < 0)
        return -EINVAL;
    if (r.table != RT_TABLE_MAIN)
        return 0;
    switch (r.type) {
    case RTN_UNICAST: case RTN_LOCAL: case RTN_BLACKHOLE: case RTN_UNREACHABLE: case RTN_PROHIBIT:
        break;
    default:
        return 0;
    }
    if (attr_in4(tb[RTA_DST], &r.dst) < 0 || attr_in4(tb[RTA_GATEWAY], &r.gateway) < 0 ||
        attr_in4(tb[RTA_PREFSRC], &r.prefsrc) < 0 || ctl_attr__u32(tb[RTA_OIF], &r.oif) < 0 ||
        ctl_attr__u32(tb[RTA_PRIORITY], &r.priority) < 0)
        return -EINVAL;
    if (tb[RTA_METRICS] && ctl_attr__metrics_mtu(tb[RTA_METRICS], &r.mtu) < 0)
        return -EINVAL;
    if (tb[RTA_MULTIPATH] && !tb[RTA_OIF] && multipath_first(tb[RTA_MULTIPATH], &r) < 0)
        return -EINVAL;
    r.dst &= prefix_mask(r.prefixlen);

    /* The kernel's key also has tos; we do not route by tos, so same dst/len/metric is one entry
     * (an NLM_F_APPEND sibling overwrites it). */
    int i = -1;
    for (uint32_t k = 0; k < t->nroutes; k++)
        if (t->routes[k].dst == r.dst && t->routes[k].prefixlen == r.prefixlen &&
            t->routes[k].priority == r.priority) {
            i = (int)k;
            break;
        }

    if (nlh->nlmsg_type == RTM_DELROUTE) {
        if (i >= 0)
            t->routes[i] = t->routes[--t->nroutes];
        return CTL_APPLY_USED;
    }
    if (i < 0) {
        if (t->nroutes >= CTL_MAX_ROUTES) {
            t->overflows++;
            return CTL_APPLY_USED;
        }
        i = (int)t->nroutes++;
    }
    t->routes[i] = r;
    return CTL_APPLY_USED;
}

/* ---- neighbours -------------------------------------------------------------------------- */

static int apply_neigh(struct ctl_tables *t, const struct nlmsghdr *nlh)
{
    const struct nlattr *tb[NDA_MAX + 1];
    const struct ndmsg *ndm = mnl_nlmsg_get_payload(nlh);
    if (ctl_attr__parse(nlh, sizeof(*ndm), tb, NDA_MAX) < 0)
        return -EINVAL;
    if (ndm->ndm_family == AF_INET6)
        return ctl_apply6__neigh(t, nlh);
    /* Proxy-ARP entries are answers we give for others, not neighbours we can reach. */
    if (ndm->ndm_family != AF_INET || (ndm->ndm_flags & NTF_PROXY) || ndm->ndm_ifindex <= 0)
        return 0;

    struct ctl_neigh n = { .ifindex = (uint32_t)ndm->ndm_ifindex, .state = ndm->ndm_state };
    if (attr_in4(tb[NDA_DST], &n.addr) <= 0)
        return -EINVAL;

    int i = -1;
    for (uint32_t k = 0; k < t->nneighs; k++)
        if (t->neighs[k].ifindex == n.ifindex && t->neighs[k].addr == n.addr) {
            i = (int)k;
            break;
        }

    if (nlh->nlmsg_type == RTM_DELNEIGH) {
        if (i >= 0)
            t->neighs[i] = t->neighs[--t->nneighs];
        return CTL_APPLY_USED;
    }
    /* INCOMPLETE/FAILED updates carry no lladdr: keep what we had (it is not used in those
     * states) rather than invent one. */
    if (i >= 0)
        memcpy(n.mac, t->neighs[i].mac, sizeof(n.mac));
    if (tb[NDA_LLADDR] && mnl_attr_get_payload_len(tb[NDA_LLADDR]) == sizeof(n.mac))
        memcpy(n.mac, mnl_attr_get_payload(tb[NDA_LLADDR]), sizeof(n.mac));
    if (i < 0) {
        if (t->nneighs >= CTL_MAX_NEIGHS) {
            t->overflows++;
            return CTL_APPLY_USED;
        }
        i = (int)t->nneighs++;
    }
    t->neighs[i] = n;
    return CTL_APPLY_USED;
}

int ctl_apply__msg(struct ctl_tables *t, const struct nlmsghdr *nlh)
{
    int r;
    switch (nlh->nlmsg_type) {
    case RTM_NEWLINK: case RTM_DELLINK:
        r = apply_link(t, nlh);
        break;
    case RTM_NEWADDR: case RTM_DELADDR:
        r = apply_addr(t, nlh);
        break;
    case RTM_NEWROUTE: case RTM_DELROUTE:
        r = apply_route(t, nlh);
        break;
    case RTM_NEWNEIGH: case RTM_DELNEIGH:
        r = apply_neigh(t, nlh);
        break;
    default:
        return 0;
    }
    if (r > 0)
        t->updates++;
    return r;
}
