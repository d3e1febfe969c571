/* IPv4 output: route lookup through the mirrored kernel tables, header building, fragmentation to
 * the path MTU, neighbour resolution by the kernel (frames wait in a small per-neighbour queue
 * meanwhile), and frames queued on their device (netdev.h) until the kick of ip_output__flush(). */
#include "ip/ip.h"
#include "ip/ip_int.h"

#include <errno.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <string.h>

#include "ctl/ctl.h"
#include "wire/eth.h"
#include "xsk/frame_pool.h"

int ip_output__route(struct ip_env *env, be32 dst, struct ip_route *rt)
{
    struct ctl_nexthop nh;
    int rc = ctl_tables__route(env->ctl_t, dst, &nh);
    if (rc < 0) {
        env->sh->c.tx_no_route++;
        return rc;
    }
    if (nh.type != RTN_UNICAST) {
        env->sh->c.tx_no_route++;
        return -EHOSTUNREACH;
    }
    const struct ctl_link *l = ctl_tables__link(env->ctl_t, nh.ifindex);
    if (!l) {
        env->sh->c.tx_no_route++;
        return -ENETUNREACH;
    }
    rt->ifindex = nh.ifindex;
    rt->src = nh.src;
    rt->nexthop = nh.nexthop;
    rt->mtu = nh.mtu ? nh.mtu : l->mtu;
    uint32_t pmtu = ip_pmtu__get(env, dst);
    if (pmtu && pmtu < rt->mtu)
        rt->mtu = pmtu;
    memcpy(rt->src_mac, l->mac, 6);
    return 0;
}

static struct ip_txq *txq_for(struct ip_env *env, uint32_t ifindex)
{
    for (unsigned i = 0; i < env->ntxq; i++)
        if (env->txq[i].ifindex == ifindex)
            return &env->txq[i];
    return NULL;
}

/* Hands one complete frame (Ethernet header filled) to its device's TX queue at once; the kick
 * (ip_output__flush, ip_output__push, a poll) comes once per batch of sends, and every
 * IP_TX_KICK_EVERY frames of a long burst. The
 * queue is the AF_XDP socket's TX ring, which outlives the process and which any process of the
 * stack (the guardian too) kicks: a process killed inside the stack lock leaves what it built
 * there, sent by the next kick. (A batch kept in this process's memory until the flush, as
 * before, was lost with it: up to a congestion window's worth of frames of the group.) */
static void xmit(struct ip_env *env, uint32_t ifindex, slip_idx_t pkt)
{
    struct ip_txq *q = txq_for(env, ifindex);
    if (!q) {
        env->sh->c.tx_no_port++;
        pkt__free_chain(env->pool, pkt);
        return;
    }
    if (q->unkicked >= IP_TX_KICK_EVERY) {
        netdev__kick(q->dev);   /* the peer starts on a long burst while the rest is built */
        q->unkicked = 0;
    }
    const struct pkt_meta *m = pkt__meta(env->pool, pkt);
    struct netdev_frame f = { .addr = pkt__addr(env->pool, pkt) + m->off, .len = m->len };
    if (!netdev__tx_enqueue(q->dev, &f, 1)) {
        /* TX ring full: a kick drains it (copy mode sends inside it, and it reaps completions);
         * still full, the frame is dropped, as a full NIC queue would. */
        netdev__kick(q->dev);
        if (!netdev__tx_enqueue(q->dev, &f, 1)) {
            env->sh->c.tx_port_full++;
            xsk_frame_pool__put(env->pool->frames, env->pool->nframes, f.addr);
            return;
        }
    }
    env->sh->c.tx_frames++;
    q->unkicked++;
}

/* The IPv6 half's way in; IPv4 keeps calling the static one, which the compiler inlines. */
void ip_output__xmit(struct ip_env *env, uint32_t ifindex, slip_idx_t pkt)
{
    xmit(env, ifindex, pkt);
}

void ip_output__flush(struct ip_env *env)
{
    for (unsigned i = 0; i < env->ntxq; i++)
        if (env->txq[i].dev) {
            netdev__kick(env->txq[i].dev);
            env->txq[i].unkicked = 0;
        }
}

uint32_t ip_output__push(struct ip_env *env, uint32_t kick_at)
{
    uint32_t left = 0;
    for (unsigned i = 0; i < env->ntxq; i++) {
        struct ip_txq *q = &env->txq[i];
        if (!q->dev)
            continue;
        q->unkicked = 0;        /* the cadence the batch had: 64 frames after each push */
        uint32_t n = netdev__tx_queued(q->dev);
        if (n >= kick_at) {
            netdev__kick(q->dev);
            n = netdev__tx_queued(q->dev);
        }
        left += n;
    }
    return left;
}

static struct ip_neigh_wait *neigh_slot(struct ip_env *env, uint32_t ifindex, be32 ip, bool create)
{
    if (!create && !env->sh->neigh_pending)
        return NULL;
    struct ip_neigh_wait *free_slot = NULL;
    for (unsigned i = 0; i < IP_NEIGH_SLOTS; i++) {
        struct ip_neigh_wait *w = &env->sh->neigh[i];
        if (w->used && w->ifindex == ifindex && w->ip == ip)
            return w;
        if (!w->used && !free_slot)
            free_slot = w;
    }
    if (!create || !free_slot)
        return NULL;
    free_slot->used = 1;
    env->sh->neigh_pending++;
    free_slot->ifindex = ifindex;
    free_slot->ip = ip;
    pkt_queue__init(&free_slot->q);
    free_slot->expires = env->now + IP_NEIGH_TIMEOUT;
    free_slot->next_ask = env->now + IP_NEIGH_REASK;
    return free_slot;
}

/* Sends a frame whose Ethernet source and type are set, once the next hop's MAC is known. */
static void neigh_output(struct ip_env *env, const struct ip_route *rt, slip_idx_t pkt)
{
    uint8_t mac[6];
    int rc = ctl_tables__neigh(env->ctl_t, rt->ifindex, rt->nexthop, mac);
    struct ip_neigh_wait *w = neigh_slot(env, rt->ifindex, rt->nexthop, false);

    /* Keep order: while earlier frames wait for this neighbour, later ones queue behind them. */
    if (rc == 0 && !w) {
        memcpy(pkt__data(env->pool, pkt), mac, 6);
        xmit(env, rt->ifindex, pkt);
        return;
    }
    if (rc == -EHOSTUNREACH && !w) {
        env->sh->c.neigh_failed++;
        pkt__free_chain(env->pool, pkt);
        return;
    }
    bool fresh = !w;
    w = w ? w : neigh_slot(env, rt->ifindex, rt->nexthop, true);
    if (!w || w->q.count >= IP_NEIGH_QLEN) {
        env->sh->c.neigh_overflow++;
        pkt__free_chain(env->pool, pkt);
        return;
    }
    env->sh->c.neigh_wait++;
    pkt_queue__push(env->pool, &w->q, pkt, 1);
    if (fresh && env->ctl)
        ctl__resolve(env->ctl, rt->ifindex, rt->nexthop);
}

slip_time_t ip_neigh__service(struct ip_env *env)
{
    slip_time_t next = SLIP_TIME_NEVER;
    for (unsigned i = 0; i < IP_NEIGH_SLOTS && env->sh->neigh_pending; i++) {
        struct ip_neigh_wait *w = &env->sh->neigh[i];
        uint8_t mac[6];
        if (!w->used)
            continue;
        int rc = ctl_tables__neigh(env->ctl_t, w->ifindex, w->ip, mac);
        if (rc == 0) {
            slip_idx_t p;
            while ((p = pkt_queue__pop(env->pool, &w->q, 1)) != SLIP_NIL) {
                memcpy(pkt__data(env->pool, p), mac, 6);
                env->sh->c.neigh_resolved++;
                xmit(env, w->ifindex, p);
            }
            w->used = 0;
            env->sh->neigh_pending--;
            continue;
        }
        if (rc == -EHOSTUNREACH || w->expires <= env->now) {
            env->sh->c.neigh_failed += w->q.count;
            pkt_queue__purge(env->pool, &w->q);
            w->used = 0;
            env->sh->neigh_pending--;
            continue;
        }
        if (w->next_ask <= env->now) {
            if (env->ctl)
                ctl__resolve(env->ctl, w->ifindex, w->ip);
            w->next_ask = env->now + IP_NEIGH_REASK;
        }
        next = SLIP_MIN(next, SLIP_MIN(w->next_ask, w->expires));
    }
    return next;
}

void ip_shared__purge(struct ip_env *env)
{
    for (unsigned i = 0; i < IP_NEIGH_SLOTS; i++) {
        pkt_queue__purge(env->pool, &env->sh->neigh[i].q);
        env->sh->neigh[i].used = 0;
    }
    env->sh->neigh_pending = 0;
    for (unsigned i = 0; i < IP6_NEIGH_SLOTS; i++) {
        pkt_queue__purge(env->pool, &env->sh->neigh6[i].q);
        env->sh->neigh6[i].used = 0;
    }
    env->sh->neigh6_pending = 0;
    for (unsigned i = 0; i < IP_REASS_SLOTS; i++) {
        struct ip_reass_slot *s = &env->sh->reass[i];
        if (s->used) {
            env->sh->reass_bufs -= s->nbufs;
            pkt__free_chain(env->pool, s->frags);
        }
        memset(s, 0, sizeof(*s));
        s->frags = SLIP_NIL;
    }
    env->sh->reass_slots = 0;
}

void ip_iov__copy(const struct iovec *iov, int iovcnt, size_t skip, uint8_t *dst, size_t len)
{
    for (int i = 0; i < iovcnt && len; i++) {
        if (skip >= iov[i].iov_len) {
            skip -= iov[i].iov_len;
            continue;
        }
        size_t n = SLIP_MIN(iov[i].iov_len - skip, len);
        memcpy(dst, (const uint8_t *)iov[i].iov_base + skip, n);
        dst += n;
        len -= n;
        skip = 0;
    }
}

int ip_output__send(struct ip_env *env, const struct ip_route *rt, const struct ip_tx *tx,
                    const struct iovec *iov, int iovcnt)
{
    struct ip_counters *c = &env->sh->c;
    size_t total = 0;
    for (int i = 0; i < iovcnt; i++)
        total += iov[i].iov_len;
    if (total > 65535 - WIRE_IPV4_HLEN_MIN) {
        c->tx_too_big++;
        return -EMSGSIZE;
    }
    /* A frame must also fit in a UMEM frame; beyond that we fragment as for a smaller MTU. */
    uint32_t mtu = SLIP_MIN(rt->mtu, pkt__room(env->pool) - WIRE_ETH_HLEN);
    if (mtu < IP_MIN_MTU)
        mtu = IP_MIN_MTU;
    if (total + WIRE_IPV4_HLEN_MIN > mtu && tx->df) {
        c->tx_too_big++;
        return -EMSGSIZE;
    }
    /* Each fragment but the last carries a multiple of 8 bytes (RFC 791). */
    size_t per_frag = total + WIRE_IPV4_HLEN_MIN <= mtu ? total : ((mtu - WIRE_IPV4_HLEN_MIN) & ~7u);
    unsigned nfrags = (unsigned)((total + per_frag - 1) / per_frag);
    if (nfrags == 0)
        nfrags = 1;
    if (!pkt__reserve(env->pool, nfrags)) {
        c->tx_no_frame++;
        return -ENOBUFS;
    }

    struct wire_ipv4_repr ip = {
        .src = tx->src ? tx->src : rt->src,
        .dst = tx->dst,
        .proto = tx->proto,
        .ttl = tx->ttl ? tx->ttl : IP_DEFAULT_TTL,
        .tos = tx->tos,
        .id = env->sh->next_id++,
        .dont_frag = tx->df,
        .hdr_len = WIRE_IPV4_HLEN_MIN,
    };
    struct wire_eth_repr eth = { .type = WIRE_ETHERTYPE_IPV4 };
    memcpy(eth.src, rt->src_mac, 6);

    c->tx_datagrams++;
    if (nfrags > 1)
        c->tx_frags += nfrags;
    for (size_t off = 0; off < total || (total == 0 && off == 0);) {
        size_t n = SLIP_MIN(per_frag, total - off);
        slip_idx_t p = pkt__alloc(env->pool);   /* cannot fail: counted above, lock held */
        uint8_t *d = pkt__data(env->pool, p);
        ip.frag_offset = (uint16_t)off;
        ip.more_frags = off + n < total;
        ip.total_len = (uint16_t)(WIRE_IPV4_HLEN_MIN + n);
        wire_eth__emit(&eth, d);
        wire_ipv4__emit(&ip, d + WIRE_ETH_HLEN);
        ip_iov__copy(iov, iovcnt, off, d + WIRE_ETH_HLEN + WIRE_IPV4_HLEN_MIN, n);
        uint32_t flen = WIRE_ETH_HLEN + WIRE_IPV4_HLEN_MIN + (uint32_t)n;
        /* Pad to the Ethernet minimum so no stale UMEM bytes leave the host. */
        if (flen < WIRE_ETH_ZLEN) {
            memset(d + flen, 0, WIRE_ETH_ZLEN - flen);
            flen = WIRE_ETH_ZLEN;
        }
        pkt__meta(env->pool, p)->len = (uint16_t)flen;
        neigh_output(env, rt, p);
        off += n;
        if (total == 0)
            break;
    }
    return 0;
}

static struct ip_pmtu_entry *pmtu_find(struct ip_env *env, be32 dst)
{
    struct ip_pmtu_entry *e = &env->sh->pmtu[(ntoh32(dst) * 2654435761u) >> 24 & (IP_PMTU_SLOTS - 1)];
    return e;
}

void ip_pmtu__update(struct ip_env *env, be32 dst, uint32_t mtu)
{
    /* RFC 1191 §3: never raise the estimate from an ICMP message; RFC 1191 §7 and Linux's
     * min_pmtu: ignore values below what IPv4 hosts must accept. */
    if (mtu < IP_MIN_MTU)
        mtu = IP_MIN_MTU;
    struct ip_pmtu_entry *e = pmtu_find(env, dst);
    if (e->dst == dst && e->expires > env->now && e->mtu <= mtu)
        return;
    e->dst = dst;
    e->mtu = (uint16_t)mtu;
    e->expires = env->now + IP_PMTU_EXPIRES;
    env->sh->c.pmtu_updates++;
}

uint32_t ip_pmtu__get(struct ip_env *env, be32 dst)
{
    struct ip_pmtu_entry *e = pmtu_find(env, dst);
    if (e->dst != dst || e->expires <= env->now)
        return 0;
    return e->mtu;
}
