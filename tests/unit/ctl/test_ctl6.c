/* Unit tests of the IPv6 control-plane tables: AF_INET6 rtnetlink messages (built with libmnl as
 * the kernel lays them out) applied to the tables, route lookup (longest prefix, per-link fe80::/64,
 * link-local scopes), source address selection (RFC 6724 rules 1, 2, 3, 5, 8, tentative skipped)
 * and neighbour states. */
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

static struct wire_ipv6_addr ip6(const char *s)
{
    struct wire_ipv6_addr a;
    if (inet_pton(AF_INET6, s, &a) != 1)
        abort();
    return a;
}

#define CHECK_ADDR(a, s) do { struct wire_ipv6_addr e_ = ip6(s); CHECK_MEM(&(a), &e_, 16); } while (0)

static char msgbuf[4096];

static struct nlmsghdr *msg_link(int ifindex, const char *name, uint32_t mtu, uint32_t flags)
{
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(msgbuf);
    nlh->nlmsg_type = RTM_NEWLINK;
    struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifi));
    ifi->ifi_family = AF_UNSPEC;
    ifi->ifi_index = ifindex;
    ifi->ifi_flags = flags;
    mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
    mnl_attr_put_u32(nlh, IFLA_MTU, mtu);
    return nlh;
}

static struct nlmsghdr *msg_addr6(uint16_t type, uint32_t ifindex, const char *a, uint8_t len, uint32_t flags)
{
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(msgbuf);
    nlh->nlmsg_type = type;
    struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifa));
    ifa->ifa_family = AF_INET6;
    ifa->ifa_prefixlen = len;
    ifa->ifa_index = ifindex;
    ifa->ifa_flags = (uint8_t)flags;
    struct wire_ipv6_addr v = ip6(a);
    mnl_attr_put(nlh, IFA_ADDRESS, 16, &v);
    mnl_attr_put_u32(nlh, IFA_FLAGS, flags);
    return nlh;
}

static struct nlmsghdr *msg_route6(uint16_t type, const char *dst, uint8_t len, const char *gw, uint32_t oif,
                                   uint32_t metric, uint32_t mtu, uint8_t rtype, uint32_t table)
{
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(msgbuf);
    nlh->nlmsg_type = type;
    struct rtmsg *rtm = mnl_nlmsg_put_extra_header(nlh, sizeof(*rtm));
    rtm->rtm_family = AF_INET6;
    rtm->rtm_dst_len = len;
    rtm->rtm_table = (uint8_t)table;
    rtm->rtm_type = rtype;
    mnl_attr_put_u32(nlh, RTA_TABLE, table);
    if (len) {
        struct wire_ipv6_addr d = ip6(dst);
        mnl_attr_put(nlh, RTA_DST, 16, &d);
    }
    if (gw) {
        struct wire_ipv6_addr g = ip6(gw);
        mnl_attr_put(nlh, RTA_GATEWAY, 16, &g);
    }
    mnl_attr_put_u32(nlh, RTA_OIF, oif);
    mnl_attr_put_u32(nlh, RTA_PRIORITY, metric);
    if (mtu) {
        struct nlattr *nest = mnl_attr_nest_start(nlh, RTA_METRICS);
        mnl_attr_put_u32(nlh, RTAX_MTU, mtu);
        mnl_attr_nest_end(nlh, nest);
    }
    return nlh;
}

static struct nlmsghdr *msg_neigh6(uint16_t type, int ifindex, const char *a, uint16_t state, const uint8_t *mac,
                                   uint8_t flags)
{
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(msgbuf);
    nlh->nlmsg_type = type;
    struct ndmsg *ndm = mnl_nlmsg_put_extra_header(nlh, sizeof(*ndm));
    ndm->ndm_family = AF_INET6;
    ndm->ndm_ifindex = ifindex;
    ndm->ndm_state = state;
    ndm->ndm_flags = flags;
    struct wire_ipv6_addr v = ip6(a);
    mnl_attr_put(nlh, NDA_DST, 16, &v);
    if (mac)
        mnl_attr_put(nlh, NDA_LLADDR, 6, mac);
    return nlh;
}

/* A host like the testbed's: eth (2) with 2001:2::2/64 and fe80::2/64, eth2 (3) with
 * 2001:db8:5::2/64, a default route via fe80::1 on 2, plus a tentative and a deprecated address. */
static struct ctl_tables *host(void)
{
    struct ctl_tables *t = calloc(1, sizeof(*t));
    if (!t)
        abort();
    CHECK(ctl_apply__msg(t, msg_link(1, "lo", 65536, IFF_UP | IFF_LOOPBACK)), ==, CTL_APPLY_USED);
    CHECK(ctl_apply__msg(t, msg_link(2, "veth0", 1500, IFF_UP)), ==, CTL_APPLY_USED);
    CHECK(ctl_apply__msg(t, msg_link(3, "veth1", 9000, IFF_UP)), ==, CTL_APPLY_USED);
    CHECK(ctl_apply__msg(t, msg_addr6(RTM_NEWADDR, 1, "::1", 128, IFA_F_PERMANENT)), ==, CTL_APPLY_USED);
    CHECK(ctl_apply__msg(t, msg_addr6(RTM_NEWADDR, 2, "fe80::2", 64, IFA_F_PERMANENT)), ==, CTL_APPLY_USED);
    CHECK(ctl_apply__msg(t, msg_addr6(RTM_NEWADDR, 2, "2001:2::2", 64, IFA_F_PERMANENT)), ==, CTL_APPLY_USED);
    CHECK(ctl_apply__msg(t, msg_addr6(RTM_NEWADDR, 2, "2001:2::9", 64, IFA_F_TENTATIVE)), ==, CTL_APPLY_USED);
    CHECK(ctl_apply__msg(t, msg_addr6(RTM_NEWADDR, 3, "fe80::3", 64, IFA_F_PERMANENT)), ==, CTL_APPLY_USED);
    CHECK(ctl_apply__msg(t, msg_addr6(RTM_NEWADDR, 3, "2001:db8:5::2", 64, IFA_F_PERMANENT)), ==, CTL_APPLY_USED);
    CHECK(ctl_apply__msg(t, msg_addr6(RTM_NEWADDR, 3, "2001:db8:5::7", 64, IFA_F_DEPRECATED)), ==, CTL_APPLY_USED);
    CHECK(ctl_apply__msg(t, msg_route6(RTM_NEWROUTE, "2001:2::", 64, NULL, 2, 256, 0, RTN_UNICAST, RT_TABLE_MAIN)),
          ==, CTL_APPLY_USED);
    CHECK(ctl_apply__msg(t, msg_route6(RTM_NEWROUTE, "fe80::", 64, NULL, 2, 256, 0, RTN_UNICAST, RT_TABLE_MAIN)),
          ==, CTL_APPLY_USED);
    /* fe80::/64 on every link, same metric: distinct entries keyed by oif */
    CHECK(ctl_apply__msg(t, msg_route6(RTM_NEWROUTE, "fe80::", 64, NULL, 3, 256, 0, RTN_UNICAST, RT_TABLE_MAIN)),
          ==, CTL_APPLY_USED);
    CHECK(ctl_apply__msg(t, msg_route6(RTM_NEWROUTE, "2001:db8:5::", 64, NULL, 3, 256, 0, RTN_UNICAST, RT_TABLE_MAIN)),
          ==, CTL_APPLY_USED);
    CHECK(ctl_apply__msg(t, msg_route6(RTM_NEWROUTE, NULL, 0, "fe80::1", 2, 1024, 0, RTN_UNICAST, RT_TABLE_MAIN)),
          ==, CTL_APPLY_USED);
    /* the local table is not mirrored (our addresses come from the address table) */
    CHECK(ctl_apply__msg(t, msg_route6(RTM_NEWROUTE, "2001:2::2", 128, NULL, 2, 0, 0, RTN_LOCAL, RT_TABLE_LOCAL)),
          ==, 0);
    CHECK(t->naddrs6, ==, 7);
    CHECK(t->nroutes6, ==, 5);
    return t;
}

TEST(test_route6_connected_and_default)
{
    struct ctl_tables *t = host();
    struct ctl_nexthop6 nh;
    struct wire_ipv6_addr d = ip6("2001:2::1");
    CHECK(ctl_tables__route6(t, &d, 0, &nh), ==, 0);
    CHECK(nh.ifindex, ==, 2);
    CHECK(nh.type, ==, RTN_UNICAST);
    CHECK(nh.mtu, ==, 1500);
    CHECK_ADDR(nh.nexthop, "2001:2::1");
    CHECK_ADDR(nh.src, "2001:2::2");        /* not the tentative 2001:2::9 */
    d = ip6("2001:db8:99::1");
    CHECK(ctl_tables__route6(t, &d, 0, &nh), ==, 0);
    CHECK(nh.ifindex, ==, 2);
    CHECK_ADDR(nh.nexthop, "fe80::1");
    CHECK_ADDR(nh.src, "2001:2::2");        /* global scope for a global destination */
    d = ip6("2001:db8:5::1");
    CHECK(ctl_tables__route6(t, &d, 0, &nh), ==, 0);
    CHECK(nh.ifindex, ==, 3);
    CHECK(nh.mtu, ==, 9000);
    CHECK_ADDR(nh.src, "2001:db8:5::2");    /* not the deprecated one */
    /* a device given (SO_BINDTODEVICE) that the longest prefix does not use: the default */
    CHECK(ctl_tables__route6(t, &d, 2, &nh), ==, 0);
    CHECK(nh.ifindex, ==, 2);
    CHECK_ADDR(nh.nexthop, "fe80::1");
    free(t);
}

TEST(test_route6_link_local_needs_scope)
{
    struct ctl_tables *t = host();
    struct ctl_nexthop6 nh;
    struct wire_ipv6_addr d = ip6("fe80::1");
    CHECK(ctl_tables__route6(t, &d, 0, &nh), ==, -EINVAL);
    CHECK(ctl_tables__route6(t, &d, 3, &nh), ==, 0);
    CHECK(nh.ifindex, ==, 3);
    CHECK_ADDR(nh.src, "fe80::3");          /* rule 2: link scope for a link-local peer */
    CHECK_ADDR(nh.nexthop, "fe80::1");
    CHECK(ctl_tables__route6(t, &d, 2, &nh), ==, 0);
    CHECK_ADDR(nh.src, "fe80::2");
    free(t);
}

TEST(test_route6_local_mtu_types_none)
{
    struct ctl_tables *t = host();
    struct ctl_nexthop6 nh;
    struct wire_ipv6_addr d = ip6("2001:db8:5::2");
    CHECK(ctl_tables__route6(t, &d, 0, &nh), ==, 0);
    CHECK(nh.type, ==, RTN_LOCAL);
    CHECK(nh.ifindex, ==, 3);
    CHECK(ctl_tables__local6(t, &d, 0), ==, 3);
    CHECK(ctl_tables__local6(t, &d, 2), ==, 0);
    /* route MTU beats link MTU; blackhole matches with its type */
    CHECK(ctl_apply__msg(t, msg_route6(RTM_NEWROUTE, "2001:db8:77::", 48, "fe80::1", 2, 10, 1280, RTN_UNICAST,
                                       RT_TABLE_MAIN)), ==, CTL_APPLY_USED);
    CHECK(ctl_apply__msg(t, msg_route6(RTM_NEWROUTE, "2001:db8:66::", 48, NULL, 0, 10, 0, RTN_BLACKHOLE,
                                       RT_TABLE_MAIN)), ==, CTL_APPLY_USED);
    d = ip6("2001:db8:77::5");
    CHECK(ctl_tables__route6(t, &d, 0, &nh), ==, 0);
    CHECK(nh.mtu, ==, 1280);
    d = ip6("2001:db8:66::5");
    CHECK(ctl_tables__route6(t, &d, 0, &nh), ==, 0);
    CHECK(nh.type, ==, RTN_BLACKHOLE);
    /* deleting the default leaves nothing for the rest of the world */
    CHECK(ctl_apply__msg(t, msg_route6(RTM_DELROUTE, NULL, 0, "fe80::1", 2, 1024, 0, RTN_UNICAST, RT_TABLE_MAIN)),
          ==, CTL_APPLY_USED);
    d = ip6("2001:db8:99::1");
    CHECK(ctl_tables__route6(t, &d, 0, &nh), ==, -ENETUNREACH);
    /* a link going down takes its routes out of the lookup */
    CHECK(ctl_apply__msg(t, msg_link(3, "veth1", 9000, 0)), ==, CTL_APPLY_USED | CTL_APPLY_RESYNC);
    d = ip6("2001:db8:5::1");
    CHECK(ctl_tables__route6(t, &d, 0, &nh), ==, -ENETUNREACH);
    free(t);
}

/* A sender with its own source (a TCP connection, every segment) skips source selection but
 * must get the same answer otherwise: next hop, device, MTU, type and error, the source being
 * its own. */
static void route6_from_same(const struct ctl_tables *t, const char *dst, uint32_t oif)
{
    struct ctl_nexthop6 a, b;
    struct wire_ipv6_addr d = ip6(dst), own = ip6("2001:2::77");
    int ra = ctl_tables__route6(t, &d, oif, &a), rb = ctl_tables__route6_from(t, &own, &d, oif, &b);
    CHECK(rb, ==, ra);
    if (ra != 0 || ra != rb)
        return;
    CHECK(b.ifindex, ==, a.ifindex);
    CHECK(b.mtu, ==, a.mtu);
    CHECK(b.type, ==, a.type);
    CHECK_MEM(&b.nexthop, &a.nexthop, 16);
    if (a.type == RTN_UNICAST)
        CHECK_ADDR(b.src, "2001:2::77");
    /* NULL: ctl_tables__route6 itself */
    CHECK(ctl_tables__route6_from(t, NULL, &d, oif, &b), ==, ra);
    CHECK_MEM(&b, &a, sizeof(a));
}

TEST(test_route6_from_given_source)
{
    struct ctl_tables *t = host();
    static const char *dsts[] = { "2001:2::1", "2001:db8:99::1", "2001:db8:5::1", "fe80::1", "2001:db8:5::2" };
    for (unsigned i = 0; i < SLIP_ARRAY_SIZE(dsts); i++)
        for (uint32_t oif = 0; oif <= 3; oif++)
            route6_from_same(t, dsts[i], oif);
    /* fe80::3 tentative: a global address still serves a link-local peer on link 3 (rule 2 only
     * ranks), in both. Then nothing usable anywhere: -EADDRNOTAVAIL from both. */
    for (uint32_t i = 0; i < t->naddrs6; i++)
        if (t->addrs6[i].ifindex == 3 && wire_ipv6__is_link_local(&t->addrs6[i].addr))
            t->addrs6[i].flags |= IFA_F_TENTATIVE;
    route6_from_same(t, "fe80::1", 3);
    struct ctl_nexthop6 nh;
    struct wire_ipv6_addr d, own = ip6("fe80::3");
    for (uint32_t i = 0; i < t->naddrs6; i++)
        t->addrs6[i].flags |= IFA_F_TENTATIVE;
    for (unsigned i = 0; i < 3; i++)
        route6_from_same(t, dsts[i], 0);
    d = ip6("2001:2::1");
    CHECK(ctl_tables__route6_from(t, &own, &d, 0, &nh), ==, -EADDRNOTAVAIL);
    free(t);
}

TEST(test_select_src6_rules)
{
    struct ctl_tables *t = host();
    struct wire_ipv6_addr s, d = ip6("2001:2::2");
    CHECK(ctl_tables__select_src6(t, 3, &d, &s), ==, true);
    CHECK_ADDR(s, "2001:2::2");             /* rule 1 beats rule 5 */
    d = ip6("2001:db8:5::44");
    CHECK(ctl_tables__select_src6(t, 2, &d, &s), ==, true);
    CHECK_ADDR(s, "2001:2::2");             /* rule 5 beats rule 8 */
    /* once DAD finishes, rule 8 picks the longer match among the outgoing link's addresses */
    CHECK(ctl_apply__msg(t, msg_addr6(RTM_NEWADDR, 2, "2001:2::9", 64, IFA_F_PERMANENT)), ==, CTL_APPLY_USED);
    d = ip6("2001:2::8");
    CHECK(ctl_tables__select_src6(t, 2, &d, &s), ==, true);
    CHECK_ADDR(s, "2001:2::9");
    CHECK(ctl_apply__msg(t, msg_addr6(RTM_DELADDR, 2, "2001:2::9", 64, 0)), ==, CTL_APPLY_USED);
    CHECK(ctl_tables__select_src6(t, 2, &d, &s), ==, true);
    CHECK_ADDR(s, "2001:2::2");
    free(t);
}

TEST(test_neigh6_states_proxy_purge)
{
    struct ctl_tables *t = host();
    static const uint8_t mac[6] = { 2, 0, 0, 0, 0, 9 };
    uint8_t out[6];
    struct wire_ipv6_addr a = ip6("fe80::1");
    CHECK(ctl_tables__neigh6(t, 2, &a, out), ==, -EAGAIN);
    CHECK(ctl_apply__msg(t, msg_neigh6(RTM_NEWNEIGH, 2, "fe80::1", NUD_INCOMPLETE, NULL, 0)), ==, CTL_APPLY_USED);
    CHECK(ctl_tables__neigh6(t, 2, &a, out), ==, -EAGAIN);
    CHECK(ctl_apply__msg(t, msg_neigh6(RTM_NEWNEIGH, 2, "fe80::1", NUD_REACHABLE, mac, NTF_ROUTER)), ==,
          CTL_APPLY_USED);
    CHECK(ctl_tables__neigh6(t, 2, &a, out), ==, 0);
    CHECK_MEM(out, mac, 6);
    CHECK(ctl_tables__neigh6(t, 3, &a, out), ==, -EAGAIN);    /* another link's fe80::1 */
    /* STALE keeps the MAC without lladdr; FAILED is unreachable */
    CHECK(ctl_apply__msg(t, msg_neigh6(RTM_NEWNEIGH, 2, "fe80::1", NUD_STALE, NULL, 0)), ==, CTL_APPLY_USED);
    CHECK(ctl_tables__neigh6(t, 2, &a, out), ==, 0);
    CHECK_MEM(out, mac, 6);
    CHECK(ctl_apply__msg(t, msg_neigh6(RTM_NEWNEIGH, 2, "fe80::1", NUD_FAILED, NULL, 0)), ==, CTL_APPLY_USED);
    CHECK(ctl_tables__neigh6(t, 2, &a, out), ==, -EHOSTUNREACH);
    /* proxy entries are ignored; delete removes */
    CHECK(ctl_apply__msg(t, msg_neigh6(RTM_NEWNEIGH, 2, "2001:2::77", NUD_PERMANENT, mac, NTF_PROXY)), ==, 0);
    CHECK(ctl_apply__msg(t, msg_neigh6(RTM_DELNEIGH, 2, "fe80::1", 0, NULL, 0)), ==, CTL_APPLY_USED);
    CHECK(t->nneighs6, ==, 0);
    CHECK(t->nneighs, ==, 0);               /* IPv4 table untouched by all of this */
    /* a vanished link takes its IPv6 addresses, routes and neighbours */
    CHECK(ctl_apply__msg(t, msg_neigh6(RTM_NEWNEIGH, 3, "fe80::5", NUD_REACHABLE, mac, 0)), ==, CTL_APPLY_USED);
    struct nlmsghdr *nlh = msg_link(3, "veth1", 9000, IFF_UP);
    nlh->nlmsg_type = RTM_DELLINK;
    CHECK(ctl_apply__msg(t, nlh), ==, CTL_APPLY_USED | CTL_APPLY_RESYNC);
    CHECK(t->nneighs6, ==, 0);
    CHECK(t->naddrs6, ==, 4);
    CHECK(t->nroutes6, ==, 3);
    free(t);
}

TEST(test_apply6_malformed)
{
    struct ctl_tables *t = calloc(1, sizeof(*t));
    /* an IPv4-sized address in an AF_INET6 message, a prefix past 128 */
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(msgbuf);
    nlh->nlmsg_type = RTM_NEWADDR;
    struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifa));
    ifa->ifa_family = AF_INET6;
    ifa->ifa_prefixlen = 64;
    ifa->ifa_index = 2;
    be32 v4 = htonl(0xc6120001);
    mnl_attr_put(nlh, IFA_ADDRESS, 4, &v4);
    CHECK(ctl_apply__msg(t, nlh), ==, -EINVAL);
    nlh = msg_addr6(RTM_NEWADDR, 2, "2001:2::2", 64, 0);
    ((struct ifaddrmsg *)mnl_nlmsg_get_payload(nlh))->ifa_prefixlen = 129;
    CHECK(ctl_apply__msg(t, nlh), ==, -EINVAL);
    nlh = msg_route6(RTM_NEWROUTE, "2001:2::", 64, NULL, 2, 1, 0, RTN_UNICAST, RT_TABLE_MAIN);
    ((struct rtmsg *)mnl_nlmsg_get_payload(nlh))->rtm_dst_len = 200;
    CHECK(ctl_apply__msg(t, nlh), ==, -EINVAL);
    CHECK(t->naddrs6, ==, 0);
    CHECK(t->nroutes6, ==, 0);
    CHECK(t->updates, ==, 0);
    free(t);
}

TEST_MAIN()
