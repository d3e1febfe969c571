/* UDP over IPv6 (RFC 768 with RFC 8200 §8.1): a second demux table on the local port whose
 * entries carry 16-byte addresses, the mandatory checksum over the IPv6 pseudo-header, and the
 * datagram's IPv6 source and destination kept in its own frame (the 40 bytes before the payload
 * held headers we no longer need), so a receive queue holds IPv4 and IPv6 datagrams alike and the IPv4 path and
 * struct pkt_meta are unchanged. A dual-stack socket bound to :: is in both tables. */
#include "udp/udp.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "ctl/ctl.h"
#include "wire/checksum.h"
#include "wire/udp.h"

/* pkt_meta.frag_off of a queued IPv6 datagram's head buffer (IPv4 ones have 0 there: a delivered
 * head is always at offset 0 of its datagram). */
#define UDP6_META_MARK 0xffffu
/* Written before the payload, over the UDP header and the IPv6 header (or extension headers) that
 * preceded it in the same frame: destination (16), receiving interface (4), source scope (4),
 * source (16). */
#define UDP6_PEER_BYTES 40

static bool addr_eq(const struct wire_ipv6_addr *a, const struct wire_ipv6_addr *b)
{
    return memcmp(a, b, sizeof(*a)) == 0;
}

static bool addr_any(const struct wire_ipv6_addr *a)
{
    static const struct wire_ipv6_addr zero;
    return addr_eq(a, &zero);
}

int udp_sock__bind6(struct udp_shared *sh, slip_idx_t s, const struct wire_ipv6_addr *laddr6, uint16_t lport,
                    uint32_t scope, bool dual)
{
    struct udp_sock *u = &sh->socks[s];
    if (u->state != UDPS_OPEN)
        return -EINVAL;
    unsigned b = udp__bucket(lport);
    for (slip_idx_t i = sh->hash6[b]; i != SLIP_NIL; i = sh->socks[i].hnext6) {
        const struct udp_sock *o = &sh->socks[i];
        if (o->lport == lport && addr_eq(&o->laddr6, laddr6) && !o->connected && !(u->reuseport && o->reuseport))
            return -EADDRINUSE;
    }
    if (dual) {
        int rc = udp_sock__bind(sh, s, 0, lport);
        if (rc < 0)
            return rc;
    } else {
        u->lport = lport;
        u->state = UDPS_BOUND;
        u->v6only = 1;
    }
    u->laddr6 = *laddr6;
    u->scope = scope;
    u->in6 = 1;
    u->hnext6 = sh->hash6[b];
    sh->hash6[b] = s;
    return 0;
}

void udp6__unhash(struct udp_shared *sh, slip_idx_t s)
{
    struct udp_sock *u = &sh->socks[s];
    slip_idx_t *pp = &sh->hash6[udp__bucket(u->lport)];
    while (*pp != SLIP_NIL && *pp != s)
        pp = &sh->socks[*pp].hnext6;
    if (*pp == s)
        *pp = u->hnext6;
    u->in6 = 0;
    u->hnext6 = SLIP_NIL;
}

int udp_sock__connect6(struct udp_shared *sh, slip_idx_t s, const struct wire_ipv6_addr *raddr6, uint16_t rport,
                       uint32_t scope)
{
    struct udp_sock *u = &sh->socks[s];
    if (u->state != UDPS_BOUND || !u->in6)
        return -EINVAL;
    u->raddr = 0;
    if (addr_any(raddr6) || rport == 0) {
        memset(&u->raddr6, 0, sizeof(u->raddr6));
        u->connected = 0;
        u->rport = 0;
        return 0;
    }
    /* raddr stays 0, which no IPv4 source matches: a dual-stack socket connected to an IPv6
     * peer receives no IPv4 (Linux: the connected 4-tuple is IPv6). */
    u->raddr6 = *raddr6;
    u->rport = rport;
    if (scope)
        u->scope = scope;
    u->connected = 1;
    return 0;
}

static uint32_t tuple_hash6(const struct wire_ipv6_addr *raddr, uint16_t rport)
{
    uint64_t h = rport * 0x9e3779b97f4a7c15ull;
    for (unsigned i = 0; i < 16; i += 4) {
        uint32_t w;
        memcpy(&w, &raddr->b[i], 4);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 29;
    }
    return (uint32_t)(h >> 32);
}

slip_idx_t udp__lookup6(const struct udp_shared *sh, const struct wire_ipv6_addr *laddr, uint16_t lport,
                        const struct wire_ipv6_addr *raddr, uint16_t rport)
{
    slip_idx_t best = SLIP_NIL;
    int best_score = -1;
    for (slip_idx_t i = sh->hash6[udp__bucket(lport)]; i != SLIP_NIL; i = sh->socks[i].hnext6) {
        const struct udp_sock *u = &sh->socks[i];
        int score = 0;
        if (u->lport != lport)
            continue;
        if (!addr_any(&u->laddr6)) {
            if (!addr_eq(&u->laddr6, laddr))
                continue;
            score += 1;
        }
        if (u->connected) {
            if (!addr_eq(&u->raddr6, raddr) || u->rport != rport)
                continue;
            score += 2;
        }
        if (score > best_score) {
            best = i;
            best_score = score;
        }
    }
    if (best == SLIP_NIL || !sh->socks[best].reuseport || sh->socks[best].connected)
        return best;
    /* A SO_REUSEPORT group, spread by the peer as for IPv4. */
    const struct udp_sock *b = &sh->socks[best];
    uint32_t n = 0;
    for (slip_idx_t i = sh->hash6[udp__bucket(lport)]; i != SLIP_NIL; i = sh->socks[i].hnext6) {
        const struct udp_sock *u = &sh->socks[i];
        n += u->reuseport && !u->connected && u->lport == lport && addr_eq(&u->laddr6, &b->laddr6);
    }
    if (n <= 1)
        return best;
    uint32_t k = (uint32_t)(((uint64_t)tuple_hash6(raddr, rport) * n) >> 32);
    for (slip_idx_t i = sh->hash6[udp__bucket(lport)]; i != SLIP_NIL; i = sh->socks[i].hnext6) {
        const struct udp_sock *u = &sh->socks[i];
        if (u->reuseport && !u->connected && u->lport == lport && addr_eq(&u->laddr6, &b->laddr6) && k-- == 0)
            return i;
    }
    return best;
}

void udp6_input(struct ip_env *env, struct udp_shared *sh, const struct ip6_rx *rx)
{
    struct pkt_pool *pool = env->pool;
    struct pkt_meta *m = pkt__meta(pool, rx->pkt);
    if (m->len < WIRE_UDP_HLEN) {
        sh->c.rx_bad_len++;
        pkt__free_chain(pool, rx->pkt);
        return;
    }
    const struct wire_udp_hdr *h = (const void *)pkt__data(pool, rx->pkt);
    uint16_t sport = ntoh16(h->sport), dport = ntoh16(h->dport), ulen = ntoh16(h->len);
    if (ulen < WIRE_UDP_HLEN || ulen > rx->l4_len ||
        (ulen < rx->l4_len && m->chain != SLIP_NIL)) {
        sh->c.rx_bad_len++;
        pkt__free_chain(pool, rx->pkt);
        return;
    }
    if (ulen < rx->l4_len)
        m->len = ulen;
    /* RFC 8200 §8.1: the checksum is not optional over IPv6. */
    uint32_t sum = wire_csum_pseudo6(rx->ip.src.b, rx->ip.dst.b, WIRE_IPPROTO_UDP, ulen);
    for (slip_idx_t i = rx->pkt; i != SLIP_NIL; i = pkt__meta(pool, i)->chain)
        sum = wire_csum_add(sum, pkt__data(pool, i), pkt__meta(pool, i)->len);
    if (h->csum == 0 || wire_csum_fold(sum) != 0) {
        sh->c.rx_bad_csum++;
        pkt__free_chain(pool, rx->pkt);
        return;
    }
    slip_idx_t s = udp__lookup6(sh, &rx->ip.dst, dport, &rx->ip.src, sport);
    if (s == SLIP_NIL) {
        sh->c.rx_no_socket++;
        pkt__free_chain(pool, rx->pkt);
        return;
    }
    struct udp_sock *u = &sh->socks[s];
    uint32_t plen = ulen - WIRE_UDP_HLEN;
    /* The addresses are written over the UDP header and what precedes it, which ip6_input left
     * in the frame: at least an Ethernet and an IPv6 header, more than the 40 bytes needed. */
    if (u->rcvq.bytes + plen > u->rcvbuf || m->off < UDP6_PEER_BYTES - WIRE_UDP_HLEN) {
        sh->c.rx_rcvbuf_drop++;
        u->rx_drops++;
        pkt__free_chain(pool, rx->pkt);
        return;
    }
    m->off += WIRE_UDP_HLEN;
    m->len -= WIRE_UDP_HLEN;
    m->total = plen;
    uint8_t *peer = pkt__data(pool, rx->pkt) - UDP6_PEER_BYTES;
    uint32_t scope = wire_ipv6__is_link_local(&rx->ip.src) ? rx->ifindex : 0;
    memcpy(peer, &rx->ip.dst, 16);     /* rx->ip is a copy: the header bytes may be overwritten */
    memcpy(peer + 16, &rx->ifindex, 4);
    memcpy(peer + 20, &scope, 4);
    memcpy(peer + 24, &rx->ip.src, 16);
    m->frag_off = UDP6_META_MARK;
    m->addr = 0;
    m->port = hton16(sport);
    m->stamp = env->now;
    pkt_queue__push(pool, &u->rcvq, rx->pkt, plen);
    u->rx_datagrams++;
    u->rx_bytes += plen;
    sh->c.rx_datagrams++;
}

void udp6_icmp_error(struct udp_shared *sh, const struct ip6_icmp_err *err)
{
    if (err->q.ip.proto != WIRE_IPPROTO_UDP)
        return;
    slip_idx_t s = udp__lookup6(sh, &err->q.ip.src, err->q.sport, &err->q.ip.dst, err->q.dport);
    if (s == SLIP_NIL)
        return;
    struct udp_sock *u = &sh->socks[s];
    sh->c.icmp_errors++;
    if (!u->connected)
        return;
    /* Linux (udpv6_err without IPV6_RECVERR) reports the errors icmpv6_err_convert calls fatal,
     * and packet too big while path-MTU discovery is on (its default). */
    bool report = err->type == WIRE_ICMPV6_PKT_TOO_BIG || err->type == WIRE_ICMPV6_PARAMPROB ||
                  (err->type == WIRE_ICMPV6_DEST_UNREACH && (err->code == 1 || err->code >= WIRE_ICMPV6_PORT_UNREACH));
    if (report)
        u->so_error = ip6_icmp__errno(err->type, err->code);
}

ssize_t udp_sock__recv6(struct udp_shared *sh, struct pkt_pool *pool, slip_idx_t s, void *buf, size_t len,
                        struct udp_peer *from, unsigned flags)
{
    struct udp_sock *u = &sh->socks[s];
    if (u->so_error) {
        int e = u->so_error;
        u->so_error = 0;
        return -e;
    }
    slip_idx_t p = pkt_queue__peek(&u->rcvq);
    if (p == SLIP_NIL)
        return -EAGAIN;
    const struct pkt_meta *m = pkt__meta(pool, p);
    uint32_t dlen = m->total;
    size_t n = pkt__chain_copy(pool, p, 0, buf, len);
    if (from) {
        memset(from, 0, sizeof(*from));
        from->port = ntoh16(m->port);
        /* The queue is in shared memory: an offset too small to hold the peer (never one
         * udp6_input made) gives no address rather than a read before the frame. */
        if (m->frag_off == UDP6_META_MARK && m->off >= UDP6_PEER_BYTES) {
            const uint8_t *peer = pkt__data(pool, p) - UDP6_PEER_BYTES;
            from->v6 = true;
            from->has_dst = true;
            memcpy(&from->dst, peer, 16);
            memcpy(&from->ifindex, peer + 16, 4);
            memcpy(&from->scope, peer + 20, 4);
            memcpy(&from->a6, peer + 24, 16);
        } else {
            from->v4 = m->addr;
        }
    }
    if (!(flags & UDP_RECV_PEEK)) {
        pkt_queue__pop(pool, &u->rcvq, dlen);
        pkt__free_chain(pool, p);
    }
    return (flags & UDP_RECV_TRUNC) ? (ssize_t)dlen : (ssize_t)n;
}

/* The flow label of a datagram from src:sport to dst:dport (ports in network order): the last
 * one's when it went to the same place, else computed and kept (ip6_flow__label, a SipHash). */
static uint32_t flow_label(struct ip_env *env, struct udp_sock *u, const struct wire_ipv6_addr *src,
                           const struct wire_ipv6_addr *dst, uint16_t sport, uint16_t dport)
{
    if (u->fl_set && u->fl_sport == sport && u->fl_dport == dport && addr_eq(&u->fl_src, src) &&
        addr_eq(&u->fl_dst, dst))
        return u->fl_label;
    u->fl_label = ip6_flow__label(env->sh, src, dst, WIRE_IPPROTO_UDP, sport, dport);
    u->fl_sport = sport;
    u->fl_dport = dport;
    u->fl_src = *src;
    u->fl_dst = *dst;
    u->fl_set = 1;
    return u->fl_label;
}

ssize_t udp_sock__send6(struct ip_env *env, struct udp_shared *sh, slip_idx_t s, const struct iovec *iov,
                        int iovcnt, const struct wire_ipv6_addr *dst, uint16_t dport, uint32_t scope)
{
    struct udp_sock *u = &sh->socks[s];
    if (u->state != UDPS_BOUND || !u->in6)
        return -EINVAL;
    if (!dst) {
        if (!u->connected || addr_any(&u->raddr6))
            return -EDESTADDRREQ;
        dst = &u->raddr6;
        dport = u->rport;
    }
    if (dport == 0)
        return -EINVAL;
    if (iovcnt > 16)
        return -EINVAL;
    size_t plen = 0;
    for (int i = 0; i < iovcnt; i++)
        plen += iov[i].iov_len;
    if (plen > 65535 - WIRE_UDP_HLEN) {
        sh->c.tx_errors++;
        return -EMSGSIZE;
    }
    struct ip6_route rt;
    int rc = ip6_output__route(env, dst, scope ? scope : u->scope, &rt);
    if (rc < 0) {
        sh->c.tx_errors++;
        return rc;
    }
    /* IPV6_MTU_DISCOVER as Linux's ip6_append_data/ip6_fragment: PROBE, INTERFACE and OMIT
     * size to the device MTU, not the path's; DO, PROBE and INTERFACE refuse what would need
     * fragments (EMSGSIZE), as IPV6_DONTFRAG does; DONT, WANT and OMIT fragment. */
    if (u->pmtudisc >= IPV6_PMTUDISC_PROBE) {
        const struct ctl_link *l = ctl_tables__link(env->ctl_t, rt.ifindex);
        if (l && l->mtu)
            rt.mtu = SLIP_MAX(l->mtu, (uint32_t)WIRE_IPV6_MIN_MTU);
    }
    bool dontfrag = u->dontfrag || (u->pmtudisc >= IPV6_PMTUDISC_DO && u->pmtudisc != IPV6_PMTUDISC_OMIT);
    const struct wire_ipv6_addr *src = addr_any(&u->laddr6) ? &rt.src : &u->laddr6;
    struct wire_udp_hdr h = {
        .sport = hton16(u->lport), .dport = hton16(dport),
        .len = hton16((uint16_t)(WIRE_UDP_HLEN + plen)), .csum = 0,
    };
    uint32_t sum = wire_csum_pseudo6(src->b, dst->b, WIRE_IPPROTO_UDP, (uint32_t)(WIRE_UDP_HLEN + plen));
    sum = wire_csum_add(sum, &h, sizeof(h));
    sum = udp__csum_iov(sum, iov, iovcnt);
    h.csum = wire_csum_fold(sum);
    if (h.csum == 0)
        h.csum = 0xffff;
    struct iovec v[1 + 16];
    v[0].iov_base = &h;
    v[0].iov_len = sizeof(h);
    memcpy(&v[1], iov, sizeof(*iov) * (size_t)iovcnt);
    struct ip6_tx tx = { .src = *src, .dst = *dst, .proto = WIRE_IPPROTO_UDP, .hop_limit = u->hops,
                         .tclass = u->tclass, .dontfrag = dontfrag,
                         .flow = flow_label(env, u, src, dst, h.sport, h.dport) };
    rc = ip6_output__send(env, &rt, &tx, v, iovcnt + 1);
    if (rc < 0) {
        sh->c.tx_errors++;
        return rc;
    }
    sh->c.tx_datagrams++;
    u->tx_datagrams++;
    u->tx_bytes += plen;
    return (ssize_t)plen;
}
