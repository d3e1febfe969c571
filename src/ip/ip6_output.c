/* IPv6 output: route and source from the mirrored tables (ctl_tables__route6), the 40-byte header
 * with hop limit, traffic class and flow label, a fragment header per fragment when a datagram
 * exceeds the path MTU (RFC 8200 §4.5; the source is the only IPv6 node that fragments),
 * neighbour resolution by the kernel's ND with frames waiting in a small per-neighbour queue, and
 * the path-MTU cache (RFC 8201). Frames go through the same per-port batches as IPv4. */
#include "ip/ip6.h"

#include <errno.h>
#include <linux/rtnetlink.h>
#include <string.h>

#include "ctl/ctl.h"
#include "ip/ip_int.h"
#include "wire/eth.h"

static bool addr_eq(const struct wire_ipv6_addr *a, const struct wire_ipv6_addr *b)
{
    return memcmp(a, b, sizeof(*a)) == 0;
}

static bool addr_zero(const struct wire_ipv6_addr *a)
{
    static const struct wire_ipv6_addr zero;
    return addr_eq(a, &zero);
}

int ip6_output__route(struct ip_env *env, const struct wire_ipv6_addr *dst, uint32_t oif, struct ip6_route *rt)
{
    return ip6_output__route_from(env, NULL, dst, oif, rt);
}

int ip6_output__route_from(struct ip_env *env, const struct wire_ipv6_addr *src, const struct wire_ipv6_addr *dst,
                           uint32_t oif, struct ip6_route *rt)
{
    struct ctl_nexthop6 nh;
    int rc = ctl_tables__route6_from(env->ctl_t, src, dst, oif, &nh);
    if (rc == 0 && nh.type != RTN_UNICAST)
        rc = -EHOSTUNREACH;     /* local addresses are the kernel's loopback, never the wire */
    const struct ctl_link *l = rc == 0 ? ctl_tables__link(env->ctl_t, nh.ifindex) : NULL;
    if (rc == 0 && !l)
        rc = -ENETUNREACH;
    if (rc < 0) {
        env->sh->c.tx6_no_route++;
        return rc;
    }
    rt->ifindex = nh.ifindex;
    rt->src = nh.src;
    rt->nexthop = nh.nexthop;
    rt->mtu = nh.mtu ? nh.mtu : l->mtu;
    uint32_t pmtu = ip6_pmtu__get(env, dst);
    if (pmtu && pmtu < rt->mtu)
        rt->mtu = pmtu;
    if (rt->mtu < WIRE_IPV6_MIN_MTU)
        rt->mtu = WIRE_IPV6_MIN_MTU;
    memcpy(rt->src_mac, l->mac, 6);
    return 0;
}

static struct ip6_neigh_wait *neigh_slot(struct ip_env *env, uint32_t ifindex, const struct wire_ipv6_addr *ip,
                                         bool create)
{
    if (!create && !env->sh->neigh6_pending)
        return NULL;
    struct ip6_neigh_wait *free_slot = NULL;
    for (unsigned i = 0; i < IP6_NEIGH_SLOTS; i++) {
        struct ip6_neigh_wait *w = &env->sh->neigh6[i];
        if (w->used && w->ifindex == ifindex && addr_eq(&w->ip, ip))
            return w;
        if (!w->used && !free_slot)
            free_slot = w;
    }
    if (!create || !free_slot)
        return NULL;
    free_slot->used = 1;
    env->sh->neigh6_pending++;
    free_slot->ifindex = ifindex;
    free_slot->ip = *ip;
    pkt_queue__init(&free_slot->q);
    free_slot->expires = env->now + IP_NEIGH_TIMEOUT;
    free_slot->next_ask = env->now + IP_NEIGH_REASK;
    return free_slot;
}

/* As IPv4's neigh_output: in order behind frames already waiting for the same neighbour. */
static void neigh_output(struct ip_env *env, const struct ip6_route *rt, slip_idx_t pkt)
{
    uint8_t mac[6];
    int rc = ctl_tables__neigh6(env->ctl_t, rt->ifindex, &rt->nexthop, mac);
    struct ip6_neigh_wait *w = neigh_slot(env, rt->ifindex, &rt->nexthop, false);
    if (rc == 0 && !w) {
        memcpy(pkt__data(env->pool, pkt), mac, 6);
        ip_output__xmit(env, rt->ifindex, pkt);
        return;
    }
    if (rc == -EHOSTUNREACH && !w) {
        env->sh->c.neigh6_failed++;
        pkt__free_chain(env->pool, pkt);
        return;
    }
    bool fresh = !w;
    w = w ? w : neigh_slot(env, rt->ifindex, &rt->nexthop, true);
    if (!w || w->q.count >= IP_NEIGH_QLEN) {
        env->sh->c.neigh6_overflow++;
        pkt__free_chain(env->pool, pkt);
        return;
    }
    env->sh->c.neigh6_wait++;
    pkt_queue__push(env->pool, &w->q, pkt, 1);
    if (fresh && env->ctl)
        ctl__resolve6(env->ctl, rt->ifindex, &rt->nexthop);
}

slip_time_t ip6_neigh__service(struct ip_env *env)
{
    slip_time_t next = SLIP_TIME_NEVER;
    for (unsigned i = 0; i < IP6_NEIGH_SLOTS && env->sh->neigh6_pending; i++) {
        struct ip6_neigh_wait *w = &env->sh->neigh6[i];
        uint8_t mac[6];
        if (!w->used)
            continue;
        int rc = ctl_tables__neigh6(env->ctl_t, w->ifindex, &w->ip, mac);
        if (rc == 0) {
            slip_idx_t p;
            while ((p = pkt_queue__pop(env->pool, &w->q, 1)) != SLIP_NIL) {
                memcpy(pkt__data(env->pool, p), mac, 6);
                env->sh->c.neigh6_resolved++;
                ip_output__xmit(env, w->ifindex, p);
            }
            w->used = 0;
            env->sh->neigh6_pending--;
            continue;
        }
        if (rc == -EHOSTUNREACH || w->expires <= env->now) {
            env->sh->c.neigh6_failed += w->q.count;
            pkt_queue__purge(env->pool, &w->q);
            w->used = 0;
            env->sh->neigh6_pending--;
            continue;
        }
        if (w->next_ask <= env->now) {
            if (env->ctl)
                ctl__resolve6(env->ctl, w->ifindex, &w->ip);
            w->next_ask = env->now + IP_NEIGH_REASK;
        }
        next = SLIP_MIN(next, SLIP_MIN(w->next_ask, w->expires));
    }
    return next;
}

int ip6_output__send(struct ip_env *env, const struct ip6_route *rt, const struct ip6_tx *tx,
                     const struct iovec *iov, int iovcnt)
{
    struct ip_counters *c = &env->sh->c;
    size_t total = 0;
    for (int i = 0; i < iovcnt; i++)
        total += iov[i].iov_len;
    if (total > 65535) {        /* no jumbograms (RFC 2675) */
        c->tx6_too_big++;
        return -EMSGSIZE;
    }
    uint32_t mtu = SLIP_MIN(rt->mtu, pkt__room(env->pool) - WIRE_ETH_HLEN);
    if (mtu < WIRE_IPV6_MIN_MTU)
        mtu = WIRE_IPV6_MIN_MTU;
    bool frag = total + WIRE_IPV6_HLEN > mtu;
    if (frag && tx->dontfrag) {
        c->tx6_too_big++;
        return -EMSGSIZE;
    }
    /* Fragments but the last carry a multiple of 8 bytes after a 40 + 8 byte header. */
    size_t per_frag = frag ? ((mtu - WIRE_IPV6_HLEN - WIRE_IPV6_FRAG_HLEN) & ~7u) : total;
    unsigned nfrags = frag ? (unsigned)((total + per_frag - 1) / per_frag) : 1;
    if (env->pool->frames->count < nfrags) {
        c->tx6_no_frame++;
        return -ENOBUFS;
    }
    struct wire_ipv6_repr ip = {
        .src = addr_zero(&tx->src) ? rt->src : tx->src,
        .dst = tx->dst,
        .tclass = tx->tclass,
        .flow = tx->flow & 0xfffffu,
        .hop_limit = tx->hop_limit ? tx->hop_limit : IP6_DEFAULT_HOPS,
        .proto = frag ? WIRE_IPPROTO_FRAGMENT : tx->proto,
    };
    /* RFC 7739: identifications not predictable from outside (ip6_flow.c) */
    uint32_t id = frag ? ip6_flow__frag_id(env->sh, &ip.src, &tx->dst) : 0;
    struct wire_eth_repr eth = { .type = WIRE_ETHERTYPE_IPV6 };
    memcpy(eth.src, rt->src_mac, 6);

    c->tx6_datagrams++;
    if (frag)
        c->tx6_frags += nfrags;
    size_t off = 0;
    do {
        size_t n = SLIP_MIN(per_frag, total - off);
        slip_idx_t p = pkt__alloc(env->pool);   /* cannot fail: counted above, lock held */
        uint8_t *d = pkt__data(env->pool, p);
        size_t hl = WIRE_IPV6_HLEN + (frag ? WIRE_IPV6_FRAG_HLEN : 0);
        ip.payload_len = (uint16_t)(hl - WIRE_IPV6_HLEN + n);
        wire_eth__emit(&eth, d);
        wire_ipv6__emit(&ip, d + WIRE_ETH_HLEN);
        if (frag)
            wire_ipv6__emit_frag(d + WIRE_ETH_HLEN + WIRE_IPV6_HLEN, tx->proto, (uint16_t)off, off + n < total, id);
        ip_iov__copy(iov, iovcnt, off, d + WIRE_ETH_HLEN + hl, n);
        uint32_t flen = WIRE_ETH_HLEN + (uint32_t)(hl + n);
        if (flen < WIRE_ETH_ZLEN) {
            memset(d + flen, 0, WIRE_ETH_ZLEN - flen);
            flen = WIRE_ETH_ZLEN;
        }
        pkt__meta(env->pool, p)->len = (uint16_t)flen;
        neigh_output(env, rt, p);
        off += n;
    } while (off < total);
    return 0;
}

static struct ip6_pmtu_entry *pmtu_find(struct ip_env *env, const struct wire_ipv6_addr *dst)
{
    /* Asked on every route lookup (every segment TCP sends). Unkeyed: a colliding address only
     * evicts an entry (the kernel's PMTU is then learnt again). */
    return &env->sh->pmtu6[((uint64_t)ip6_addr__mix(dst) * IP6_PMTU_SLOTS) >> 32];     /* the top bits */
}

void ip6_pmtu__update(struct ip_env *env, const struct wire_ipv6_addr *dst, uint32_t mtu)
{
    /* RFC 8201 §4: never below the IPv6 minimum link MTU, never raised by a message. */
    if (mtu < WIRE_IPV6_MIN_MTU)
        mtu = WIRE_IPV6_MIN_MTU;
    struct ip6_pmtu_entry *e = pmtu_find(env, dst);
    if (addr_eq(&e->dst, dst) && e->expires > env->now && e->mtu <= mtu)
        return;
    e->dst = *dst;
    e->mtu = mtu;
    e->expires = env->now + IP_PMTU_EXPIRES;
    env->sh->c.pmtu6_updates++;
}

uint32_t ip6_pmtu__get(struct ip_env *env, const struct wire_ipv6_addr *dst)
{
    struct ip6_pmtu_entry *e = pmtu_find(env, dst);
    if (!addr_eq(&e->dst, dst) || e->expires <= env->now)
        return 0;
    return e->mtu;
}
