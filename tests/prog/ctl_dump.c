/* ctl_dump: prints the control-plane tables as src/ctl mirrors them, one object per line, so
 * system tests can compare them with `ip`. Options: --watch SECONDS follows live updates (printed
 * as "update +<line>" / "update -<line>"), --resolve IFNAME A.B.C.D asks the kernel to ARP,
 * --route A.B.C.D prints the lookup done on the final tables. --rcvbuf BYTES and --pause SECONDS
 * (shrink the event socket, then stay away from it) let a test overrun it to exercise ENOBUFS.
 * IPv6: addr6/route6/neigh6 lines, --route6 ADDR[%IFINDEX] and --resolve6 IFNAME ADDR. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

#include <linux/neighbour.h>
#include <linux/rtnetlink.h>

#include "ctl/ctl.h"

#define MAX_LINES (CTL_MAX_LINKS + CTL_MAX_ADDRS + CTL_MAX_ROUTES + CTL_MAX_NEIGHS + CTL_MAX_ADDRS6 + \
                   CTL_MAX_ROUTES6 + CTL_MAX_NEIGHS6)
#define LINE_LEN 160

struct lines {
    unsigned n;
    char (*v)[LINE_LEN];
};

static const char *ip_str(be32 a, char *buf)
{
    return inet_ntop(AF_INET, &a, buf, INET_ADDRSTRLEN);
}

static const char *ip6_str(const struct wire_ipv6_addr *a, char *buf)
{
    return inet_ntop(AF_INET6, a, buf, INET6_ADDRSTRLEN);
}

static const char *mac_str(const uint8_t *m, char *buf)
{
    snprintf(buf, 18, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
    return buf;
}

static const char *rtn_str(uint8_t type)
{
    switch (type) {
    case RTN_UNICAST: return "unicast";
    case RTN_LOCAL: return "local";
    case RTN_BROADCAST: return "broadcast";
    case RTN_BLACKHOLE: return "blackhole";
    case RTN_UNREACHABLE: return "unreachable";
    case RTN_PROHIBIT: return "prohibit";
    default: return "other";
    }
}

static const char *nud_str(uint16_t s)
{
    switch (s) {
    case NUD_INCOMPLETE: return "INCOMPLETE";
    case NUD_REACHABLE: return "REACHABLE";
    case NUD_STALE: return "STALE";
    case NUD_DELAY: return "DELAY";
    case NUD_PROBE: return "PROBE";
    case NUD_FAILED: return "FAILED";
    case NUD_NOARP: return "NOARP";
    case NUD_PERMANENT: return "PERMANENT";
    case NUD_NONE: return "NONE";
    default: return "MIXED";
    }
}

static void render(const struct ctl_tables *t, struct lines *out)
{
    char a[INET_ADDRSTRLEN], b[INET_ADDRSTRLEN], c[INET_ADDRSTRLEN], m[18];
    out->n = 0;
    for (uint32_t i = 0; i < t->nlinks; i++) {
        const struct ctl_link *l = &t->links[i];
        snprintf(out->v[out->n++], LINE_LEN, "link ifindex=%u name=%s mtu=%u mac=%s flags=0x%x",
                 l->ifindex, l->name, l->mtu, mac_str(l->mac, m), l->flags);
    }
    for (uint32_t i = 0; i < t->naddrs; i++) {
        const struct ctl_addr *x = &t->addrs[i];
        snprintf(out->v[out->n++], LINE_LEN, "addr ifindex=%u addr=%s/%u brd=%s",
                 x->ifindex, ip_str(x->addr, a), x->prefixlen, ip_str(x->broadcast, b));
    }
    for (uint32_t i = 0; i < t->nroutes; i++) {
        const struct ctl_route *r = &t->routes[i];
        snprintf(out->v[out->n++], LINE_LEN,
                 "route dst=%s/%u type=%s gw=%s oif=%u src=%s mtu=%u metric=%u table=%u",
                 ip_str(r->dst, a), r->prefixlen, rtn_str(r->type), ip_str(r->gateway, b), r->oif,
                 ip_str(r->prefsrc, c), r->mtu, r->priority, r->table);
    }
    for (uint32_t i = 0; i < t->nneighs; i++) {
        const struct ctl_neigh *n = &t->neighs[i];
        snprintf(out->v[out->n++], LINE_LEN, "neigh ifindex=%u ip=%s mac=%s state=%s",
                 n->ifindex, ip_str(n->addr, a), mac_str(n->mac, m), nud_str(n->state));
    }
    char a6[INET6_ADDRSTRLEN], b6[INET6_ADDRSTRLEN], c6[INET6_ADDRSTRLEN];
    for (uint32_t i = 0; i < t->naddrs6; i++) {
        const struct ctl_addr6 *x = &t->addrs6[i];
        snprintf(out->v[out->n++], LINE_LEN, "addr6 ifindex=%u addr=%s/%u scope=%u flags=0x%x",
                 x->ifindex, ip6_str(&x->addr, a6), x->prefixlen, x->scope, x->flags);
    }
    for (uint32_t i = 0; i < t->nroutes6; i++) {
        const struct ctl_route6 *r = &t->routes6[i];
        snprintf(out->v[out->n++], LINE_LEN,
                 "route6 dst=%s/%u type=%s gw=%s oif=%u src=%s mtu=%u metric=%u table=%u",
                 ip6_str(&r->dst, a6), r->prefixlen, rtn_str(r->type), ip6_str(&r->gateway, b6), r->oif,
                 ip6_str(&r->prefsrc, c6), r->mtu, r->priority, r->table);
    }
    for (uint32_t i = 0; i < t->nneighs6; i++) {
        const struct ctl_neigh6 *n = &t->neighs6[i];
        snprintf(out->v[out->n++], LINE_LEN, "neigh6 ifindex=%u ip=%s mac=%s state=%s",
                 n->ifindex, ip6_str(&n->addr, a6), mac_str(n->mac, m), nud_str(n->state));
    }
}

static void print_tables(const char *title, const struct ctl_tables *t, struct lines *ls)
{
    render(t, ls);
    printf("# %s links=%u addrs=%u routes=%u neighs=%u addrs6=%u routes6=%u neighs6=%u updates=%llu "
           "overflows=%llu\n", title, t->nlinks, t->naddrs, t->nroutes, t->nneighs, t->naddrs6, t->nroutes6, t->nneighs6, (unsigned long long)t->updates,
           (unsigned long long)t->overflows);
    for (unsigned i = 0; i < ls->n; i++)
        printf("%s\n", ls->v[i]);
    fflush(stdout);
}

static bool has_line(const struct lines *ls, const char *s)
{
    for (unsigned i = 0; i < ls->n; i++)
        if (strcmp(ls->v[i], s) == 0)
            return true;
    return false;
}

/* Updates are shown as the difference between the tables before and after each batch. */
static void print_diff(const struct lines *before, const struct lines *after)
{
    for (unsigned i = 0; i < before->n; i++)
        if (!has_line(after, before->v[i]))
            printf("update -%s\n", before->v[i]);
    for (unsigned i = 0; i < after->n; i++)
        if (!has_line(before, after->v[i]))
            printf("update +%s\n", after->v[i]);
    fflush(stdout);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int watch(struct ctl *c, struct ctl_tables *t, double seconds, double pause_s,
                 struct lines *prev, struct lines *cur)
{
    render(t, prev);
    printf("watching seconds=%g\n", seconds);
    fflush(stdout);
    double end = now_s() + seconds;
    if (pause_s > 0)
        usleep((useconds_t)(pause_s * 1e6));
    for (double left; (left = end - now_s()) > 0;) {
        struct pollfd p = { .fd = ctl__fd(c), .events = POLLIN };
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno != EINTR)
            return -errno;
        if (r <= 0)
            continue;
        int n = ctl__process(c);
        if (n < 0) {
            fprintf(stderr, "ctl__process: %s\n", strerror(-n));
            return n;
        }
        render(t, cur);
        print_diff(prev, cur);
        struct lines tmp = *prev;
        *prev = *cur;
        *cur = tmp;
    }
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: ctl_dump [--watch SECONDS [--pause SECONDS] [--rcvbuf BYTES]] [--route A.B.C.D]\n"
                    "                [--resolve IFNAME A.B.C.D] [--route6 ADDR[%%IFINDEX]] [--resolve6 IFNAME ADDR]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "watch", required_argument, NULL, 'w' },
        { "route", required_argument, NULL, 'r' },
        { "resolve", required_argument, NULL, 'R' },
        { "rcvbuf", required_argument, NULL, 'b' },
        { "pause", required_argument, NULL, 'p' },
        { "route6", required_argument, NULL, '6' },
        { "resolve6", required_argument, NULL, 'S' },
        { NULL, 0, NULL, 0 },
    };
    double watch_s = 0, pause_s = 0;
    int rcvbuf = 0;
    const char *route = NULL, *res_if = NULL, *res_ip = NULL, *route6 = NULL;
    bool res6 = false;
    for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (o) {
        case 'w': watch_s = atof(optarg); break;
        case 'r': route = optarg; break;
        case 'b': rcvbuf = atoi(optarg); break;
        case 'p': pause_s = atof(optarg); break;
        case '6': route6 = optarg; break;
        case 'S':
            if (optind >= argc)
                usage();
            res_if = optarg;
            res_ip = argv[optind++];
            res6 = true;
            break;
        case 'R':
            if (optind >= argc)
                usage();
            res_if = optarg;
            res_ip = argv[optind++];
            break;
        default: usage();
        }
    }
    if (optind != argc)
        usage();

    struct ctl_tables *t = calloc(1, sizeof(*t));
    struct lines l1 = { 0, calloc(MAX_LINES, LINE_LEN) }, l2 = { 0, calloc(MAX_LINES, LINE_LEN) };
    if (!t || !l1.v || !l2.v)
        return 1;
    struct ctl *c;
    int err = ctl__open(&c, t);
    if (err < 0) {
        fprintf(stderr, "ctl__open: %s\n", strerror(-err));
        return 1;
    }
    print_tables("tables", t, &l1);
    if (rcvbuf > 0 && setsockopt(ctl__fd(c), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)) < 0) {
        perror("SO_RCVBUF");
        return 1;
    }

    if (res_if) {
        const struct ctl_link *l = ctl_tables__link_by_name(t, res_if);
        struct in_addr a;
        struct wire_ipv6_addr a6;
        if (!l || inet_pton(res6 ? AF_INET6 : AF_INET, res_ip, res6 ? (void *)&a6 : (void *)&a) != 1) {
            fprintf(stderr, "--resolve: unknown interface %s or bad address %s\n", res_if, res_ip);
            return 1;
        }
        err = res6 ? ctl__resolve6(c, l->ifindex, &a6) : ctl__resolve(c, l->ifindex, a.s_addr);
        printf("resolve ifindex=%u ip=%s rc=%d\n", l->ifindex, res_ip, err);
        fflush(stdout);
        if (err < 0)
            return 1;
    }
    if (watch_s > 0) {
        err = watch(c, t, watch_s, pause_s, &l1, &l2);
        if (err < 0)
            return 1;
        print_tables("final", t, &l1);
    }
    if (route) {
        struct in_addr a;
        struct ctl_nexthop nh;
        char v[INET_ADDRSTRLEN], s[INET_ADDRSTRLEN];
        if (inet_pton(AF_INET, route, &a) != 1)
            usage();
        err = ctl_tables__route(t, a.s_addr, &nh);
        if (err < 0)
            printf("nexthop dst=%s error=%s\n", route, strerror(-err));
        else
            printf("nexthop dst=%s ifindex=%u via=%s src=%s mtu=%u type=%s\n", route, nh.ifindex,
                   ip_str(nh.nexthop, v), ip_str(nh.src, s), nh.mtu, rtn_str(nh.type));
        fflush(stdout);
    }
    if (route6) {
        char buf[INET6_ADDRSTRLEN + 16], v[INET6_ADDRSTRLEN], sbuf[INET6_ADDRSTRLEN];
        snprintf(buf, sizeof(buf), "%s", route6);
        char *pct = strchr(buf, '%');
        uint32_t oif = 0;
        if (pct) {
            *pct = 0;
            oif = (uint32_t)atoi(pct + 1);
        }
        struct wire_ipv6_addr d;
        struct ctl_nexthop6 nh;
        if (inet_pton(AF_INET6, buf, &d) != 1)
            usage();
        err = ctl_tables__route6(t, &d, oif, &nh);
        if (err < 0)
            printf("nexthop6 dst=%s error=%s\n", route6, strerror(-err));
        else
            printf("nexthop6 dst=%s ifindex=%u via=%s src=%s mtu=%u type=%s\n", route6, nh.ifindex,
                   ip6_str(&nh.nexthop, v), ip6_str(&nh.src, sbuf), nh.mtu, rtn_str(nh.type));
        fflush(stdout);
    }
    ctl__close(c);
    free(l1.v);
    free(l2.v);
    free(t);
    return 0;
}
