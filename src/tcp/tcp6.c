/* TCP over IPv6 (RFC 9293 over RFC 8200): the input path's checksum over the IPv6 pseudo-header
 * and hand-off to the family-independent segment processing, output of built segments through
 * ip6_output, ICMPv6 errors, and the keyed 32-bit folds that stand for IPv6 addresses in a
 * connection's laddr/raddr. Folding keeps one 4-tuple hash, one listener table and the IPv4
 * code paths as they were: the ISN, timestamp offsets and SYN cookies hash the folds (keyed by
 * the table's secret, so a remote host cannot pick addresses that collide), and every IPv6
 * lookup compares the full addresses as well. */
#include "tcp/tcp_var.h"

#include <errno.h>
#include <string.h>

#include "wire/checksum.h"

be32 tcp6__fold(const struct tcp_shared *sh, const struct wire_ipv6_addr *a)
{
    static const struct wire_ipv6_addr any;
    if (memcmp(a, &any, sizeof(any)) == 0)
        return 0;
    uint64_t h = tcp_siphash(&sh->key[2], a, sizeof(*a));
    uint32_t f = (uint32_t)(h ^ (h >> 32));
    return f ? f : 1;
}

/* tcp6__fold through sh->fold6 (lock held: the entry is written). The slot's hash needs no key:
 * the entry is checked against the whole address, so a collision costs a SipHash, never a
 * wrong fold. */
static be32 fold_cached(struct tcp_shared *sh, const struct wire_ipv6_addr *a)
{
    struct tcp_fold_ent *e = &sh->fold6[((uint64_t)ip6_addr__mix(a) * TCP_FOLD6_SLOTS) >> 32];
    if (memcmp(&e->a, a, sizeof(*a)) != 0) {
        e->fold = tcp6__fold(sh, a);
        e->a = *a;
    }
    return e->fold;
}

static bool chain_csum6_ok(const struct pkt_pool *p, slip_idx_t i, const struct ip6_rx *rx)
{
    uint32_t sum = wire_csum_pseudo6(rx->ip.src.b, rx->ip.dst.b, WIRE_IPPROTO_TCP, rx->l4_len);
    for (; i != SLIP_NIL; i = pkt__meta(p, i)->chain)
        sum = wire_csum_add(sum, pkt__data(p, i), pkt__meta(p, i)->len);
    return wire_csum_fold(sum) == 0;
}

void tcp6_input(struct ip_env *env, struct tcp_shared *sh, const struct ip6_rx *rx)
{
    struct pkt_pool *pool = env->pool;
    struct tcp_seg s;
    memset(&s, 0, sizeof(s));
    s.pkt = rx->pkt;
    sh->c.segs_in++;
    if (rx->l4_len < WIRE_TCP_HLEN_MIN || !tcp_input__fit(pool, s.pkt, rx->l4_len)) {
        sh->c.bad_header++;
        pkt__free_chain(pool, s.pkt);
        return;
    }
    if (!chain_csum6_ok(pool, s.pkt, rx)) {
        sh->c.bad_csum++;
        pkt__free_chain(pool, s.pkt);
        return;
    }
    s.v6 = true;
    s.saddr6 = rx->ip.src;
    s.daddr6 = rx->ip.dst;
    s.ifindex = rx->ifindex;
    s.tos = rx->ip.tclass;      /* the ECN field: the low two bits, as in IPv4's TOS (RFC 3168 §5) */
    s.saddr = fold_cached(sh, &s.saddr6);
    s.daddr = fold_cached(sh, &s.daddr6);
    tcp_input__segment(env, sh, &s, rx->l4_len);
}

int tcp6__send(struct ip_env *env, struct tcp_conn *c, const struct ip6_route *rt, uint8_t *buf, size_t len,
               uint8_t ecn)
{
    /* The checksum field (bytes 16-17) is zero from wire_tcp__emit. */
    uint32_t sum = wire_csum_pseudo6(c->laddr6.b, c->raddr6.b, WIRE_IPPROTO_TCP, (uint32_t)len);
    be16 cs = wire_csum_fold(wire_csum_add(sum, buf, len));
    memcpy(buf + 16, &cs, 2);
    /* Segments are sized to the path MTU: an oversized one is refused (-EMSGSIZE, the MSS then
     * shrinks) rather than fragmented, as DF does over IPv4. */
    /* One flow label for the whole connection, SYN to FIN, as Linux's auto_flowlabels (a
     * SYN-ACK sent from a listener's stand-in gets the same: the hash is of the 4-tuple). */
    if (!c->flowlabel)
        c->flowlabel = ip6_flow__label(env->sh, &c->laddr6, &c->raddr6, WIRE_IPPROTO_TCP, hton16(c->lport),
                                       hton16(c->rport));
    struct ip6_tx tx = { .src = c->laddr6, .dst = c->raddr6, .proto = WIRE_IPPROTO_TCP, .dontfrag = true,
                         .tclass = (uint8_t)((c->tclass & ~3u) | (ecn & 3u)), .hop_limit = c->hops,
                         .flow = c->flowlabel };
    struct iovec iov = { buf, len };
    return ip6_output__send(env, rt, &tx, &iov, 1);
}

void tcp6_icmp_error(struct ip_env *env, struct tcp_shared *sh, const struct ip6_icmp_err *err)
{
    const struct wire_icmpv6_quote *q = &err->q;
    if (q->ip.proto != WIRE_IPPROTO_TCP)
        return;
    be32 lf = tcp6__fold(sh, &q->ip.src), rf = tcp6__fold(sh, &q->ip.dst);
    slip_idx_t i = tcp__lookup6_conn(sh, lf, &q->ip.src, q->sport, rf, &q->ip.dst, q->dport);
    if (i == SLIP_NIL)
        return;
    /* Packet too big: ip6/ lowered the path MTU (RFC 8201), resend smaller; the rest as Linux's
     * icmpv6_err_convert, soft errors once synchronized. */
    int e = err->type == WIRE_ICMPV6_PKT_TOO_BIG ? 0 : ip6_icmp__errno(err->type, err->code);
    tcp_icmp__apply(env, sh, &sh->conns[i], q->tcp_seq, e);
}
