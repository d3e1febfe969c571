/* Unit tests of the control-plane tables: lookups over hand-built tables (route LPM, metrics, MTU,
 * neighbour states, local addresses) and the message->table application fed with rtnetlink messages
 * built here with libmnl, the way the kernel lays them out (header, then attributes). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>

#include <libmnl/libmnl.h>
#include <linux/if.h>
#include <linux/if_addr.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include "ctl/ctl.h"
#include "ctl/ctl_apply.h"
#include "../check.h"

static be32 ip(const char *s)
{
    struct in_addr a;
    if (inet_pton(AF_INET, s, &a) != 1)
        abort();
    return a.s_addr;
}

static struct ctl_tables *tables_new(void)
{
    struct ctl_tables *t = calloc(1, sizeof(*t));
    if (!t)
        abort();
    return t;
}

static void add_link(struct ctl_tables *t, uint32_t ifindex, const char *name, uint32_t mtu, uint32_t flags)
{
    struct ctl_link *l = &t->links[t->nlinks++];
    *l = (struct ctl_link){ .ifindex = ifindex, .mtu = mtu, .flags = flags,
                            .mac = { 0x02, 0, 0, 0, 0, (uint8_t)ifindex } };
    strncpy(l->name, name, sizeof(l->name) - 1);
}

static void add_addr(struct ctl_tables *t, uint32_t ifindex, const char *a, uint8_t len, const char *brd)
{
    t->addrs[t->naddrs++] = (struct ctl_addr){ .ifindex = ifindex, .addr = ip(a), .prefixlen = len,
                                               .broadcast = brd ? ip(brd) : 0 };
}

static struct ctl_route *add_route(struct ctl_tables *t, const char *dst, uint8_t len, const char *gw,
                                   uint32_t oif, uint32_t metric)
{
    struct ctl_route *r = &t->routes[t->nroutes++];
    *r = (struct ctl_route){ .dst = ip(dst), .prefixlen = len, .type = RTN_UNICAST,
                             .gateway = gw ? ip(gw) : 0, .oif = oif, .priority = metric,
                             .table = RT_TABLE_MAIN };
    return r;
}

/* b's view on the default testbed: veth0 (2) 198.18.0.2/24, default via 198.18.0.1, plus lo. */
static struct ctl_tables *host_b(void)
{
    struct ctl_tables *t = tables_new();
    add_link(t, 1, "lo", 65536, IFF_UP | IFF_LOOPBACK);
    add_link(t, 2, "veth0", 1500, IFF_UP);
    add_addr(t, 1, "127.0.0.1", 8, NULL);
    add_addr(t, 2, "198.18.0.2", 24, "198.18.0.255");
    add_route(t, "0.0.0.0", 0, "198.18.0.1", 2, 0);
    add_route(t, "198.18.0.0", 24, NULL, 2, 0)->prefsrc = ip("198.18.0.2");
    return t;
}

TEST(test_route_default_via_gateway)
{
    struct ctl_tables *t = host_b();
    struct ctl_nexthop nh;
    CHECK(ctl_tables__route(t, ip("198.19.7.7"), &nh), ==, 0);
    CHECK(nh.ifindex, ==, 2);
    CHECK(nh.nexthop, ==, ip("198.18.0.1"));
    CHECK(nh.src, ==, ip("198.18.0.2"));     /* no prefsrc: the device's address */
    CHECK(nh.mtu, ==, 1500);
    CHECK(nh.type, ==, RTN_UNICAST);
    free(t);
}

TEST(test_route_connected_24)
{
    struct ctl_tables *t = host_b();
    struct ctl_nexthop nh;
    CHECK(ctl_tables__route(t, ip("198.18.0.77"), &nh), ==, 0);
    CHECK(nh.ifindex, ==, 2);
    CHECK(nh.nexthop, ==, ip("198.18.0.77"));    /* on-link: the destination itself */
    CHECK(nh.src, ==, ip("198.18.0.2"));
    free(t);
}

TEST(test_route_host_32_beats_24)
{
    struct ctl_tables *t = host_b();
    add_route(t, "198.18.0.99", 32, "198.18.0.5", 2, 0);
    struct ctl_nexthop nh;
    CHECK(ctl_tables__route(t, ip("198.18.0.99"), &nh), ==, 0);
    CHECK(nh.nexthop, ==, ip("198.18.0.5"));
    CHECK(ctl_tables__route(t, ip("198.18.0.98"), &nh), ==, 0);
    CHECK(nh.nexthop, ==, ip("198.18.0.98"));
    free(t);
}

TEST(test_route_tie_lowest_metric)
{
    struct ctl_tables *t = host_b();
    add_route(t, "198.19.0.0", 16, "198.18.0.10", 2, 100);
    add_route(t, "198.19.0.0", 16, "198.18.0.20", 2, 50);
    add_route(t, "198.19.0.0", 16, "198.18.0.30", 2, 200);
    struct ctl_nexthop nh;
    CHECK(ctl_tables__route(t, ip("198.19.1.1"), &nh), ==, 0);
    CHECK(nh.nexthop, ==, ip("198.18.0.20"));
    free(t);
}

TEST(test_route_mtu_route_vs_link)
{
    struct ctl_tables *t = host_b();
    add_route(t, "198.19.50.0", 24, "198.18.0.1", 2, 0)->mtu = 1400;
    struct ctl_nexthop nh;
    CHECK(ctl_tables__route(t, ip("198.19.50.7"), &nh), ==, 0);
    CHECK(nh.mtu, ==, 1400);
    CHECK(ctl_tables__route(t, ip("198.19.51.7"), &nh), ==, 0);   /* default route: link MTU */
    CHECK(nh.mtu, ==, 1500);
    t->links[1].mtu = 9000;
    CHECK(ctl_tables__route(t, ip("198.19.51.7"), &nh), ==, 0);
    CHECK(nh.mtu, ==, 9000);
    free(t);
}

TEST(test_route_prefsrc_and_src_selection)
{
    struct ctl_tables *t = host_b();
    /* A /32 secondary first in the table must not be picked for a gateway on the /24. */
    t->addrs[1] = (struct ctl_addr){ .ifindex = 2, .addr = ip("198.18.9.1"), .prefixlen = 32 };
    add_addr(t, 2, "198.18.0.2", 24, NULL);
    add_route(t, "198.19.50.0", 24, "198.18.0.1", 2, 0);
    struct ctl_nexthop nh;
    CHECK(ctl_tables__route(t, ip("198.19.50.7"), &nh), ==, 0);
    CHECK(nh.src, ==, ip("198.18.0.2"));
    add_route(t, "198.19.60.0", 24, "198.18.0.1", 2, 0)->prefsrc = ip("198.18.9.1");
    CHECK(ctl_tables__route(t, ip("198.19.60.1"), &nh), ==, 0);
    CHECK(nh.src, ==, ip("198.18.9.1"));
    free(t);
}

TEST(test_route_none_is_enetunreach)
{
    struct ctl_tables *t = host_b();
    t->routes[0] = t->routes[--t->nroutes];     /* drop the default */
    struct ctl_nexthop nh;
    CHECK(ctl_tables__route(t, ip("198.19.7.7"), &nh), ==, -ENETUNREACH);
    CHECK(ctl_tables__route(t, ip("198.18.0.7"), &nh), ==, 0);
    struct ctl_tables *empty = tables_new();
    CHECK(ctl_tables__route(empty, ip("198.18.0.7"), &nh), ==, -ENETUNREACH);
    free(empty);
    free(t);
}

TEST(test_route_link_down_skipped)
{
    struct ctl_tables *t = host_b();
    add_link(t, 3, "veth1", 1500, IFF_UP);
    add_route(t, "198.19.0.0", 16, "198.18.0.1", 2, 10);
    add_route(t, "198.19.0.0", 16, NULL, 3, 5);
    struct ctl_nexthop nh;
    CHECK(ctl_tables__route(t, ip("198.19.0.1"), &nh), ==, 0);
    CHECK(nh.ifindex, ==, 3);
    t->links[2].flags &= ~(uint32_t)IFF_UP;
    CHECK(ctl_tables__route(t, ip("198.19.0.1"), &nh), ==, 0);
    CHECK(nh.ifindex, ==, 2);
    free(t);
}

TEST(test_route_local_and_broadcast)
{
    struct ctl_tables *t = host_b();
    struct ctl_nexthop nh;
    CHECK(ctl_tables__route(t, ip("198.18.0.2"), &nh), ==, 0);
    CHECK(nh.type, ==, RTN_LOCAL);
    CHECK(nh.ifindex, ==, 2);
    CHECK(ctl_tables__route(t, ip("198.18.0.255"), &nh), ==, 0);
    CHECK(nh.type, ==, RTN_BROADCAST);
    CHECK(nh.src, ==, ip("198.18.0.2"));
    free(t);
}

TEST(test_route_blackhole_type)
{
    struct ctl_tables *t = host_b();
    struct ctl_route *r = add_route(t, "198.19.66.0", 24, NULL, 0, 0);
    r->type = RTN_BLACKHOLE;
    struct ctl_nexthop nh;
    CHECK(ctl_tables__route(t, ip("198.19.66.1"), &nh), ==, 0);
    CHECK(nh.type, ==, RTN_BLACKHOLE);
    CHECK(nh.ifindex, ==, 0);
    free(t);
}

TEST(test_neigh_states)
{
    static const struct { uint16_t state; int want; } cases[] = {
        { NUD_REACHABLE, 0 }, { NUD_STALE, 0 }, { NUD_DELAY, 0 }, { NUD_PROBE, 0 },
        { NUD_PERMANENT, 0 }, { NUD_NOARP, 0 }, { NUD_INCOMPLETE, -EAGAIN },
        { NUD_NONE, -EAGAIN }, { NUD_FAILED, -EHOSTUNREACH },
    };
    struct ctl_tables *t = host_b();
    uint8_t want_mac[6] = { 0xaa, 0xbb, 0xcc, 0, 0, 1 };
    for (size_t i = 0; i < SLIP_ARRAY_SIZE(cases); i++) {
        t->nneighs = 0;
        struct ctl_neigh *n = &t->neighs[t->nneighs++];
        *n = (struct ctl_neigh){ .ifindex = 2, .addr = ip("198.18.0.1"), .state = cases[i].state };
        memcpy(n->mac, want_mac, 6);
        uint8_t mac[6] = { 0 };
        int r = ctl_tables__neigh(t, 2, ip("198.18.0.1"), mac);
        if (r != cases[i].want)
            fprintf(stderr, "state 0x%x\n", cases[i].state);
        CHECK(r, ==, cases[i].want);
        if (r == 0)
            CHECK_MEM(mac, want_mac, 6);
        CHECK(ctl_tables__neigh(t, 3, ip("198.18.0.1"), mac), ==, -EAGAIN);   /* other device */
        CHECK(ctl_tables__neigh(t, 2, ip("198.18.0.3"), mac), ==, -EAGAIN);   /* absent */
    }
    free(t);
}

TEST(test_is_local_first_addr_links)
{
    struct ctl_tables *t = host_b();
    CHECK(ctl_tables__is_local(t, ip("198.18.0.2"), 0), ==, true);
    CHECK(ctl_tables__is_local(t, ip("198.18.0.2"), 2), ==, true);
    CHECK(ctl_tables__is_local(t, ip("198.18.0.2"), 1), ==, false);
    CHECK(ctl_tables__is_local(t, ip("198.18.0.1"), 0), ==, false);
    CHECK(ctl_tables__first_addr(t, 2), ==, ip("198.18.0.2"));
    CHECK(ctl_tables__first_addr(t, 1), ==, ip("127.0.0.1"));
    CHECK(ctl_tables__first_addr(t, 7), ==, 0);
    CHECK(ctl_tables__link(t, 2), ==, &t->links[1]);
    CHECK(ctl_tables__link(t, 9), ==, NULL);
    CHECK(ctl_tables__link_by_name(t, "veth0"), ==, &t->links[1]);
    CHECK(ctl_tables__link_by_name(t, "veth1"), ==, NULL);
    free(t);
}

/* ---- message application ------------------------------------------------------------------ */

static char msgbuf[4096];

static struct nlmsghdr *msg_link(uint16_t type, int ifindex, const char *name, uint32_t mtu, uint32_t flags)
{
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(msgbuf);
    nlh->nlmsg_type = type;
    struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifi));
    ifi->ifi_family = AF_UNSPEC;
    ifi->ifi_index = ifindex;
    ifi->ifi_flags = flags;
    mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
    mnl_attr_put_u32(nlh, IFLA_MTU, mtu);
    static const uint8_t mac[6] = { 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0x01 };
    mnl_attr_put(nlh, IFLA_ADDRESS, 6, mac);
    return nlh;
}

static struct nlmsghdr *msg_addr(uint16_t type, uint32_t ifindex, const char *a, uint8_t len)
{
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(msgbuf);
    nlh->nlmsg_type = type;
    struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifa));
    ifa->ifa_family = AF_INET;
    ifa->ifa_prefixlen = len;
    ifa->ifa_index = ifindex;
    be32 v = ip(a);
    mnl_attr_put(nlh, IFA_ADDRESS, 4, &v);
    mnl_attr_put(nlh, IFA_LOCAL, 4, &v);
    return nlh;
}

static struct nlmsghdr *msg_route(uint16_t type, const char *dst, uint8_t len, const char *gw,
                                  uint32_t oif, uint32_t metric, uint32_t mtu, uint32_t table)
{
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(msgbuf);
    nlh->nlmsg_type = type;
    struct rtmsg *rtm = mnl_nlmsg_put_extra_header(nlh, sizeof(*rtm));
    rtm->rtm_family = AF_INET;
    rtm->rtm_dst_len = len;
    /* The kernel puts the low 8 bits of the table in rtm_table and the full id in RTA_TABLE. */
    rtm->rtm_table = table < 256 ? (uint8_t)table : RT_TABLE_COMPAT;
    rtm->rtm_type = RTN_UNICAST;
    mnl_attr_put_u32(nlh, RTA_TABLE, table);
    if (len) {
        be32 d = ip(dst);
        mnl_attr_put(nlh, RTA_DST, 4, &d);
    }
    if (gw) {
        be32 g = ip(gw);
        mnl_attr_put(nlh, RTA_GATEWAY, 4, &g);
    }
    mnl_attr_put_u32(nlh, RTA_OIF, oif);
    if (metric)
        mnl_attr_put_u32(nlh, RTA_PRIORITY, metric);
    if (mtu) {
        struct nlattr *nest = mnl_attr_nest_start(nlh, RTA_METRICS);
        mnl_attr_put_u32(nlh, RTAX_MTU, mtu);
        mnl_attr_nest_end(nlh, nest);
    }
    return nlh;
}

static struct nlmsghdr *msg_neigh(uint16_t type, int ifindex, const char *a, uint16_t state, const uint8_t *mac)
{
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(msgbuf);
    nlh->nlmsg_type = type;
    struct ndmsg *ndm = mnl_nlmsg_put_extra_header(nlh, sizeof(*ndm));
    ndm->ndm_family = AF_INET;
    ndm->ndm_ifindex = ifindex;
    ndm->ndm_state = state;
    be32 v = ip(a);
    mnl_attr_put(nlh, NDA_DST, 4, &v);
    if (mac)
        mnl_attr_put(nlh, NDA_LLADDR, 6, mac);
    return nlh;
}

TEST(test_apply_link_new_update_del)
{
    struct ctl_tables *t = tables_new();
    CHECK(ctl_apply__msg(t, msg_link(RTM_NEWLINK, 2, "veth0", 1500, IFF_UP)), ==, CTL_APPLY_USED);
    CHECK(t->nlinks, ==, 1);
    const struct ctl_link *l = ctl_tables__link_by_name(t, "veth0");
    CHECK(l != NULL, ==, true);
    CHECK(l->ifindex, ==, 2);
    CHECK(l->mtu, ==, 1500);
    CHECK(l->mac[5], ==, 0x01);
    CHECK(ctl_apply__msg(t, msg_link(RTM_NEWLINK, 2, "veth0", 1400, IFF_UP)), ==, CTL_APPLY_USED);
    CHECK(t->nlinks, ==, 1);
    CHECK(ctl_tables__link(t, 2)->mtu, ==, 1400);
    /* Going down: the kernel flushes routes silently, so the caller must re-dump. */
    CHECK(ctl_apply__msg(t, msg_link(RTM_NEWLINK, 2, "veth0", 1400, 0)), ==, CTL_APPLY_USED | CTL_APPLY_RESYNC);
    CHECK(ctl_apply__msg(t, msg_link(RTM_NEWLINK, 2, "veth0", 1400, 0)), ==, CTL_APPLY_USED);

    ctl_apply__msg(t, msg_addr(RTM_NEWADDR, 2, "198.18.0.2", 24));
    ctl_apply__msg(t, msg_route(RTM_NEWROUTE, "198.18.0.0", 24, NULL, 2, 0, 0, RT_TABLE_MAIN));
    ctl_apply__msg(t, msg_neigh(RTM_NEWNEIGH, 2, "198.18.0.1", NUD_REACHABLE, (const uint8_t *)"\1\2\3\4\5\6"));
    ctl_apply__msg(t, msg_link(RTM_NEWLINK, 3, "veth1", 1500, IFF_UP));
    ctl_apply__msg(t, msg_addr(RTM_NEWADDR, 3, "198.18.1.2", 24));
    CHECK(ctl_apply__msg(t, msg_link(RTM_DELLINK, 2, "veth0", 1400, 0)) & CTL_APPLY_USED, !=, 0);
    CHECK(t->nlinks, ==, 1);
    CHECK(t->links[0].ifindex, ==, 3);
    CHECK(t->naddrs, ==, 1);      /* veth0's address, route and neighbour went with it */
    CHECK(t->nroutes, ==, 0);
    CHECK(t->nneighs, ==, 0);
    CHECK(t->updates, ==, 10);
    free(t);
}

TEST(test_apply_addr_new_del)
{
    struct ctl_tables *t = tables_new();
    CHECK(ctl_apply__msg(t, msg_addr(RTM_NEWADDR, 2, "198.18.0.2", 24)), ==, CTL_APPLY_USED);
    CHECK(ctl_apply__msg(t, msg_addr(RTM_NEWADDR, 2, "198.18.9.1", 32)), ==, CTL_APPLY_USED);
    CHECK(ctl_apply__msg(t, msg_addr(RTM_NEWADDR, 2, "198.18.9.1", 32)), ==, CTL_APPLY_USED);
    CHECK(t->naddrs, ==, 2);
    CHECK(ctl_tables__is_local(t, ip("198.18.9.1"), 2), ==, true);
    CHECK(ctl_apply__msg(t, msg_addr(RTM_DELADDR, 2, "198.18.0.2", 24)), ==, CTL_APPLY_USED | CTL_APPLY_RESYNC);
    CHECK(t->naddrs, ==, 1);
    CHECK(t->addrs[0].addr, ==, ip("198.18.9.1"));  /* swapped in from the end */
    free(t);
}

TEST(test_apply_route_new_replace_del)
{
    struct ctl_tables *t = tables_new();
    CHECK(ctl_apply__msg(t, msg_route(RTM_NEWROUTE, NULL, 0, "198.18.0.1", 2, 0, 0, RT_TABLE_MAIN)), ==, CTL_APPLY_USED);
    CHECK(ctl_apply__msg(t, msg_route(RTM_NEWROUTE, "198.18.50.0", 24, "198.18.0.1", 2, 0, 1400, RT_TABLE_MAIN)), ==, CTL_APPLY_USED);
    CHECK(t->nroutes, ==, 2);
    CHECK(t->routes[1].dst, ==, ip("198.18.50.0"));
    CHECK(t->routes[1].prefixlen, ==, 24);
    CHECK(t->routes[1].gateway, ==, ip("198.18.0.1"));
    CHECK(t->routes[1].mtu, ==, 1400);
    CHECK(t->routes[1].oif, ==, 2);
    CHECK(t->routes[1].table, ==, RT_TABLE_MAIN);
    /* Same key (dst, len, metric): replaced in place. Another metric: a second route. */
    CHECK(ctl_apply__msg(t, msg_route(RTM_NEWROUTE, "198.18.50.0", 24, "198.18.0.5", 2, 0, 0, RT_TABLE_MAIN)), ==, CTL_APPLY_USED);
    CHECK(t->nroutes, ==, 2);
    CHECK(t->routes[1].gateway, ==, ip("198.18.0.5"));
    CHECK(t->routes[1].mtu, ==, 0);
    ctl_apply__msg(t, msg_route(RTM_NEWROUTE, "198.18.50.0", 24, "198.18.0.6", 2, 20, 0, RT_TABLE_MAIN));
    CHECK(t->nroutes, ==, 3);
    /* Other tables are not ours: local (255), a policy table with a 32-bit id. */
    CHECK(ctl_apply__msg(t, msg_route(RTM_NEWROUTE, "198.18.0.2", 32, NULL, 2, 0, 0, RT_TABLE_LOCAL)), ==, 0);
    CHECK(ctl_apply__msg(t, msg_route(RTM_NEWROUTE, "198.18.0.0", 16, NULL, 2, 0, 0, 1000)), ==, 0);
    CHECK(t->nroutes, ==, 3);
    CHECK(ctl_apply__msg(t, msg_route(RTM_DELROUTE, "198.18.50.0", 24, NULL, 2, 0, 0, RT_TABLE_MAIN)), ==, CTL_APPLY_USED);
    CHECK(t->nroutes, ==, 2);
    CHECK(t->routes[1].priority, ==, 20);
    /* The host bits of dst never survive into the table. */
    ctl_apply__msg(t, msg_route(RTM_NEWROUTE, "198.18.60.9", 24, NULL, 2, 0, 0, RT_TABLE_MAIN));
    CHECK(t->routes[2].dst, ==, ip("198.18.60.0"));
    free(t);
}

TEST(test_apply_route_types)
{
    struct ctl_tables *t = tables_new();
    struct nlmsghdr *nlh = msg_route(RTM_NEWROUTE, "198.18.66.0", 24, NULL, 0, 0, 0, RT_TABLE_MAIN);
    ((struct rtmsg *)mnl_nlmsg_get_payload(nlh))->rtm_type = RTN_BLACKHOLE;
    CHECK(ctl_apply__msg(t, nlh), ==, CTL_APPLY_USED);
    nlh = msg_route(RTM_NEWROUTE, "198.18.67.0", 24, NULL, 2, 0, 0, RT_TABLE_MAIN);
    ((struct rtmsg *)mnl_nlmsg_get_payload(nlh))->rtm_type = RTN_MULTICAST;
    CHECK(ctl_apply__msg(t, nlh), ==, 0);
    CHECK(t->nroutes, ==, 1);
    CHECK(t->routes[0].type, ==, RTN_BLACKHOLE);
    free(t);
}

TEST(test_apply_neigh_states_and_del)
{
    struct ctl_tables *t = tables_new();
    static const uint8_t mac[6] = { 0xaa, 0xbb, 0xcc, 0, 0, 1 };
    uint8_t got[6];
    CHECK(ctl_apply__msg(t, msg_neigh(RTM_NEWNEIGH, 2, "198.18.0.1", NUD_INCOMPLETE, NULL)), ==, CTL_APPLY_USED);
    CHECK(ctl_tables__neigh(t, 2, ip("198.18.0.1"), got), ==, -EAGAIN);
    ctl_apply__msg(t, msg_neigh(RTM_NEWNEIGH, 2, "198.18.0.1", NUD_REACHABLE, mac));
    CHECK(t->nneighs, ==, 1);
    CHECK(ctl_tables__neigh(t, 2, ip("198.18.0.1"), got), ==, 0);
    CHECK_MEM(got, mac, 6);
    ctl_apply__msg(t, msg_neigh(RTM_NEWNEIGH, 2, "198.18.0.1", NUD_FAILED, NULL));
    CHECK(ctl_tables__neigh(t, 2, ip("198.18.0.1"), got), ==, -EHOSTUNREACH);
    /* Proxy entries and other families (bridge FDB) are ignored; AF_INET6 has its own table
     * (test_ctl6), where a 4-byte address is malformed. */
    struct nlmsghdr *nlh = msg_neigh(RTM_NEWNEIGH, 2, "198.18.0.9", NUD_PERMANENT, mac);
    ((struct ndmsg *)mnl_nlmsg_get_payload(nlh))->ndm_flags = NTF_PROXY;
    CHECK(ctl_apply__msg(t, nlh), ==, 0);
    nlh = msg_neigh(RTM_NEWNEIGH, 2, "198.18.0.9", NUD_PERMANENT, mac);
    ((struct ndmsg *)mnl_nlmsg_get_payload(nlh))->ndm_family = AF_BRIDGE;
    CHECK(ctl_apply__msg(t, nlh), ==, 0);
    ((struct ndmsg *)mnl_nlmsg_get_payload(nlh))->ndm_family = AF_INET6;
    CHECK(ctl_apply__msg(t, nlh), ==, -EINVAL);
    CHECK(t->nneighs6, ==, 0);
    CHECK(t->nneighs, ==, 1);
    CHECK(ctl_apply__msg(t, msg_neigh(RTM_DELNEIGH, 2, "198.18.0.1", NUD_FAILED, NULL)), ==, CTL_APPLY_USED);
    CHECK(t->nneighs, ==, 0);
    CHECK(ctl_tables__neigh(t, 2, ip("198.18.0.1"), got), ==, -EAGAIN);
    free(t);
}

TEST(test_apply_overflow_counted)
{
    struct ctl_tables *t = tables_new();
    char name[16];
    for (int i = 1; i <= CTL_MAX_LINKS + 3; i++) {
        snprintf(name, sizeof(name), "if%d", i);
        ctl_apply__msg(t, msg_link(RTM_NEWLINK, i, name, 1500, IFF_UP));
    }
    CHECK(t->nlinks, ==, CTL_MAX_LINKS);
    CHECK(t->overflows, ==, 3);
    /* Updating a present entry is not an overflow. */
    ctl_apply__msg(t, msg_link(RTM_NEWLINK, 1, "if1", 9000, IFF_UP));
    CHECK(t->overflows, ==, 3);
    CHECK(ctl_tables__link(t, 1)->mtu, ==, 9000);
    free(t);
}

TEST(test_apply_malformed)
{
    struct ctl_tables *t = tables_new();
    /* Truncated: the header says ifinfomsg but the payload is shorter. */
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(msgbuf);
    nlh->nlmsg_type = RTM_NEWLINK;
    mnl_nlmsg_put_extra_header(nlh, 4);
    CHECK(ctl_apply__msg(t, nlh), ==, -EINVAL);
    /* An address whose IFA_LOCAL is 2 bytes. */
    nlh = mnl_nlmsg_put_header(msgbuf);
    nlh->nlmsg_type = RTM_NEWADDR;
    struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifa));
    ifa->ifa_family = AF_INET;
    ifa->ifa_index = 2;
    mnl_attr_put_u16(nlh, IFA_LOCAL, 7);
    CHECK(ctl_apply__msg(t, nlh), ==, -EINVAL);
    /* A route whose RTA_PRIORITY is not a u32. */
    nlh = msg_route(RTM_NEWROUTE, "198.18.0.0", 24, NULL, 2, 0, 0, RT_TABLE_MAIN);
    mnl_attr_put_u8(nlh, RTA_PRIORITY, 1);
    CHECK(ctl_apply__msg(t, nlh), ==, -EINVAL);
    /* Not ours at all. */
    nlh = mnl_nlmsg_put_header(msgbuf);
    nlh->nlmsg_type = RTM_NEWRULE;
    CHECK(ctl_apply__msg(t, nlh), ==, 0);
    CHECK(t->nlinks + t->naddrs + t->nroutes, ==, 0);
    CHECK(t->updates, ==, 0);
    free(t);
}

TEST(test_seq_write_section)
{
    struct ctl_tables *t = tables_new();
    uint32_t s = ctl_tables__read_begin(t);
    CHECK(s, ==, 0);
    ctl_tables__write_begin(t);
    CHECK(t->seq & 1, ==, 1);
    CHECK(ctl_tables__read_retry(t, s), ==, true);
    ctl_tables__write_end(t);
    CHECK(t->seq, ==, 2);
    s = ctl_tables__read_begin(t);
    CHECK(ctl_tables__read_retry(t, s), ==, false);
    free(t);
}

TEST_MAIN()
