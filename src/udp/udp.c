/* UDP input, output and the socket table; see udp.h. */
#include "udp/udp.h"

#include <errno.h>
#include <string.h>

#include "wire/checksum.h"
#include "wire/udp.h"

size_t udp_shared__bytes(uint32_t max_socks)
{
    return sizeof(struct udp_shared) + (size_t)max_socks * sizeof(struct udp_sock);
}

void udp_shared__init(struct udp_shared *sh, uint32_t max_socks)
{
    memset(sh, 0, sizeof(*sh));
    for (unsigned i = 0; i < UDP_HASH_BUCKETS; i++)
        sh->hash[i] = sh->hash6[i] = SLIP_NIL;
    sh->max_socks = max_socks;
    sh->free_head = SLIP_NIL;
}

int udp_sock__alloc(struct udp_shared *sh)
{
    slip_idx_t s = sh->free_head;
    if (s != SLIP_NIL)
        sh->free_head = sh->socks[s].hnext;
    else if (sh->high_water < sh->max_socks)
        s = sh->high_water++;
    else
        return -EMFILE;
    struct udp_sock *u = &sh->socks[s];
    memset(u, 0, sizeof(*u));
    u->state = UDPS_OPEN;
    u->hnext = SLIP_NIL;
    u->hnext6 = SLIP_NIL;
    u->rcvbuf = UDP_RCVBUF_DEFAULT;
    pkt_queue__init(&u->rcvq);
    sh->nused++;
    return (int)s;
}

int udp_sock__bind(struct udp_shared *sh, slip_idx_t s, be32 laddr, uint16_t lport)
{
    struct udp_sock *u = &sh->socks[s];
    if (u->state != UDPS_OPEN)
        return -EINVAL;
    unsigned b = udp__bucket(lport);
    for (slip_idx_t i = sh->hash[b]; i != SLIP_NIL; i = sh->socks[i].hnext)
        if (sh->socks[i].lport == lport && sh->socks[i].laddr == laddr && !sh->socks[i].connected &&
            !(u->reuseport && sh->socks[i].reuseport))
            return -EADDRINUSE;
    u->laddr = laddr;
    u->lport = lport;
    u->state = UDPS_BOUND;
    u->hnext = sh->hash[b];
    sh->hash[b] = s;
    return 0;
}

void udp_sock__set_reuseport(struct udp_shared *sh, slip_idx_t s, bool on)
{
    sh->socks[s].reuseport = on;
}

int udp_sock__connect(struct udp_shared *sh, slip_idx_t s, be32 raddr, uint16_t rport)
{
    struct udp_sock *u = &sh->socks[s];
    if (u->state != UDPS_BOUND)
        return -EINVAL;
    memset(&u->raddr6, 0, sizeof(u->raddr6));   /* an IPv6 peer no more (udp6.c) */
    if (raddr == 0 || rport == 0) {
        u->connected = 0;
        u->raddr = 0;
        u->rport = 0;
        return 0;
    }
    u->raddr = raddr;
    u->rport = rport;
    u->connected = 1;
    return 0;
}

void udp_sock__close(struct udp_shared *sh, struct pkt_pool *pool, slip_idx_t s)
{
    struct udp_sock *u = &sh->socks[s];
    if (u->state == UDPS_FREE)
        return;
    if (u->state == UDPS_BOUND) {
        slip_idx_t *pp = &sh->hash[udp__bucket(u->lport)];
        while (*pp != SLIP_NIL && *pp != s)
            pp = &sh->socks[*pp].hnext;
        if (*pp == s)
            *pp = u->hnext;
    }
    if (u->in6)
        udp6__unhash(sh, s);
    pkt_queue__purge(pool, &u->rcvq);
    u->state = UDPS_FREE;
    u->hnext = sh->free_head;
    sh->free_head = s;
    sh->nused--;
}

static bool in_group(const struct udp_sock *u, const struct udp_sock *b)
{
    return u->reuseport && !u->connected && u->lport == b->lport && u->laddr == b->laddr;
}

static uint32_t tuple_hash(be32 laddr, uint16_t lport, be32 raddr, uint16_t rport)
{
    uint64_t h = ((uint64_t)laddr << 32 | raddr) ^ ((uint64_t)lport << 16 | rport) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 32;
    return (uint32_t)h;
}

slip_idx_t udp__lookup(const struct udp_shared *sh, be32 laddr, uint16_t lport, be32 raddr, uint16_t rport)
{
    slip_idx_t best = SLIP_NIL;
    int best_score = -1;
    for (slip_idx_t i = sh->hash[udp__bucket(lport)]; i != SLIP_NIL; i = sh->socks[i].hnext) {
        const struct udp_sock *u = &sh->socks[i];
        int score = 0;
        if (u->lport != lport)
            continue;
        if (u->laddr) {
            if (u->laddr != laddr)
                continue;
            score += 1;
        }
        if (u->connected) {
            if (u->raddr != raddr || u->rport != rport)
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
    /* A SO_REUSEPORT group: the unconnected reuseport sockets of the same (laddr, lport). Linux
     * picks one with a secret-keyed hash of the 4-tuple; ours is unkeyed (docs/COMPLIANCE.md). */
    const struct udp_sock *b = &sh->socks[best];
    uint32_t n = 0;
    for (slip_idx_t i = sh->hash[udp__bucket(lport)]; i != SLIP_NIL; i = sh->socks[i].hnext)
        n += in_group(&sh->socks[i], b);
    if (n <= 1)
        return best;
    uint32_t k = (uint32_t)(((uint64_t)tuple_hash(laddr, lport, raddr, rport) * n) >> 32);
    for (slip_idx_t i = sh->hash[udp__bucket(lport)]; i != SLIP_NIL; i = sh->socks[i].hnext)
        if (in_group(&sh->socks[i], b) && k-- == 0)
            return i;
    return best;
}

static bool chain_csum_ok(const struct pkt_pool *p, slip_idx_t i, be32 src, be32 dst, uint32_t l4_len)
{
    const struct wire_udp_hdr *h = (const void *)pkt__data(p, i);
    if (h->csum == 0)
        return true;    /* RFC 768: the sender computed none */
    uint32_t sum = wire_csum_pseudo4(src, dst, WIRE_IPPROTO_UDP, (uint16_t)l4_len);
    for (; i != SLIP_NIL; i = pkt__meta(p, i)->chain)
        sum = wire_csum_add(sum, pkt__data(p, i), pkt__meta(p, i)->len);
    return wire_csum_fold(sum) == 0;
}

void udp_input(struct ip_env *env, struct udp_shared *sh, const struct ip_rx *rx)
{
    struct pkt_pool *pool = env->pool;
    struct pkt_meta *m = pkt__meta(pool, rx->pkt);
    struct wire_udp_repr udp;

    /* Parsed by hand: the first buffer of a reassembled datagram holds only part of it, so the
     * length field is checked against the IP payload length instead (RFC 768). */
    if (m->len < WIRE_UDP_HLEN) {
        sh->c.rx_bad_len++;
        pkt__free_chain(pool, rx->pkt);
        return;
    }
    const struct wire_udp_hdr *h = (const void *)pkt__data(pool, rx->pkt);
    udp.sport = ntoh16(h->sport);
    udp.dport = ntoh16(h->dport);
    udp.len = ntoh16(h->len);
    udp.csum = h->csum;
    /* Linux accepts a length field shorter than the IP payload and trims; a longer one, or one
     * below the header size, is malformed. We require equality except for trailing bytes, which
     * we trim like Linux. */
    if (udp.len < WIRE_UDP_HLEN || udp.len > rx->l4_len) {
        sh->c.rx_bad_len++;
        pkt__free_chain(pool, rx->pkt);
        return;
    }
    if (udp.len < rx->l4_len) {
        if (pkt__meta(pool, rx->pkt)->chain != SLIP_NIL) {
            sh->c.rx_bad_len++;     /* trimming a fragmented datagram is not worth supporting */
            pkt__free_chain(pool, rx->pkt);
            return;
        }
        m->len = udp.len;
    }
    uint32_t l4_len = udp.len;
    if (!chain_csum_ok(pool, rx->pkt, rx->ip.src, rx->ip.dst, l4_len)) {
        sh->c.rx_bad_csum++;
        pkt__free_chain(pool, rx->pkt);
        return;
    }
    slip_idx_t s = udp__lookup(sh, rx->ip.dst, udp.dport, rx->ip.src, udp.sport);
    if (s == SLIP_NIL) {
        /* The XDP program only redirects ports we own, so this is a socket closing while its
         * datagrams were in flight. Counted, not answered (docs/COMPLIANCE.md). */
        sh->c.rx_no_socket++;
        pkt__free_chain(pool, rx->pkt);
        return;
    }
    struct udp_sock *u = &sh->socks[s];
    uint32_t plen = l4_len - WIRE_UDP_HLEN;
    if (u->rcvq.bytes + plen > u->rcvbuf) {
        sh->c.rx_rcvbuf_drop++;
        u->rx_drops++;
        pkt__free_chain(pool, rx->pkt);
        return;
    }
    m->off += WIRE_UDP_HLEN;
    m->len -= WIRE_UDP_HLEN;
    m->total = plen;
    m->addr = rx->ip.src;
    m->port = hton16(udp.sport);
    m->stamp = env->now;
    pkt_queue__push(pool, &u->rcvq, rx->pkt, plen);
    u->rx_datagrams++;
    u->rx_bytes += plen;
    sh->c.rx_datagrams++;
}

void udp_icmp_error(struct udp_shared *sh, const struct ip_icmp_err *err)
{
    if (err->q.ip.proto != WIRE_IPPROTO_UDP)
        return;
    slip_idx_t s = udp__lookup(sh, err->q.ip.src, err->q.sport, err->q.ip.dst, err->q.dport);
    if (s == SLIP_NIL)
        return;
    struct udp_sock *u = &sh->socks[s];
    sh->c.icmp_errors++;
    if (!u->connected)
        return;
    if (err->type == WIRE_ICMP_DEST_UNREACH) {
        switch (err->code) {
        case WIRE_ICMP_PORT_UNREACH: u->so_error = ECONNREFUSED; break;
        case WIRE_ICMP_FRAG_NEEDED: u->so_error = EMSGSIZE; break;
        case 0: u->so_error = ENETUNREACH; break;
        default: u->so_error = EHOSTUNREACH; break;
        }
    } else {
        u->so_error = EHOSTUNREACH;
    }
}

ssize_t udp_sock__recv(struct udp_shared *sh, struct pkt_pool *pool, slip_idx_t s, void *buf, size_t len,
                       be32 *from, uint16_t *from_port, unsigned flags)
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
    if (from)
        *from = m->addr;
    if (from_port)
        *from_port = ntoh16(m->port);
    if (!(flags & UDP_RECV_PEEK)) {
        pkt_queue__pop(pool, &u->rcvq, dlen);
        pkt__free_chain(pool, p);
    }
    return (flags & UDP_RECV_TRUNC) ? (ssize_t)dlen : (ssize_t)n;
}

uint32_t udp__csum_iov(uint32_t sum, const struct iovec *iov, int iovcnt)
{
    /* An odd-length piece in the middle would shift the byte lanes: sum a contiguous copy then. */
    uint8_t carry[2];
    bool odd = false;
    for (int i = 0; i < iovcnt; i++) {
        const uint8_t *b = iov[i].iov_base;
        size_t l = iov[i].iov_len;
        if (odd && l) {
            carry[1] = b[0];
            sum = wire_csum_add(sum, carry, 2);
            b++;
            l--;
            odd = false;
        }
        if (l & 1) {
            sum = wire_csum_add(sum, b, l - 1);
            carry[0] = b[l - 1];
            odd = true;
        } else {
            sum = wire_csum_add(sum, b, l);
        }
    }
    if (odd)
        sum = wire_csum_add(sum, carry, 1);
    return sum;
}

ssize_t udp_sock__send(struct ip_env *env, struct udp_shared *sh, slip_idx_t s,
                       const struct iovec *iov, int iovcnt, be32 dst, uint16_t dport)
{
    struct udp_sock *u = &sh->socks[s];
    if (u->state != UDPS_BOUND)
        return -EINVAL;
    if (u->v6only)
        return -ENETUNREACH;    /* udpv6_sendmsg: no IPv4 (v4-mapped) on a v6-only socket */
    if (!dst) {
        if (!u->connected)
            return -EDESTADDRREQ;
        dst = u->raddr;
        dport = u->rport;
    }
    if (dport == 0)
        return -EINVAL;
    size_t plen = 0;
    for (int i = 0; i < iovcnt; i++)
        plen += iov[i].iov_len;
    if (plen > UDP_MAX_PAYLOAD) {
        sh->c.tx_errors++;
        return -EMSGSIZE;
    }
    struct ip_route rt;
    int rc = ip_output__route(env, dst, &rt);
    if (rc < 0) {
        sh->c.tx_errors++;
        return rc;
    }
    be32 src = u->laddr ? u->laddr : rt.src;

    /* Full checksum over pseudo-header, header and payload (RFC 768); never offloaded. */
    struct wire_udp_hdr h = {
        .sport = hton16(u->lport), .dport = hton16(dport),
        .len = hton16((uint16_t)(WIRE_UDP_HLEN + plen)), .csum = 0,
    };
    uint32_t sum = wire_csum_pseudo4(src, dst, WIRE_IPPROTO_UDP, (uint16_t)(WIRE_UDP_HLEN + plen));
    sum = wire_csum_add(sum, &h, sizeof(h));
    sum = udp__csum_iov(sum, iov, iovcnt);
    h.csum = wire_csum_fold(sum);
    if (h.csum == 0)
        h.csum = 0xffff;

    struct iovec v[1 + 16];
    if (iovcnt > 16)
        return -EINVAL;
    v[0].iov_base = &h;
    v[0].iov_len = sizeof(h);
    memcpy(&v[1], iov, sizeof(*iov) * (size_t)iovcnt);
    struct ip_tx tx = { .src = src, .dst = dst, .proto = WIRE_IPPROTO_UDP };
    rc = ip_output__send(env, &rt, &tx, v, iovcnt + 1);
    if (rc < 0) {
        sh->c.tx_errors++;
        return rc;
    }
    sh->c.tx_datagrams++;
    u->tx_datagrams++;
    u->tx_bytes += plen;
    return (ssize_t)plen;
}
