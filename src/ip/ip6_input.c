/* IPv6 input: the Ethernet frame's IPv6 header and extension headers validated by the bounded
 * walk of wire_ipv6__parse, unicast destinations of ours only, fragments handed to the shared
 * reassembly (keyed by source, destination and 32-bit id), and ICMPv6 errors that quote one of
 * our datagrams turned into a path-MTU update or an error for the socket. */
#include "ip/ip6.h"

#include <errno.h>
#include <string.h>

#include "ctl/ctl.h"
#include "wire/eth.h"

/* RFC 4443 §2.4 (c): an error message never exceeds the minimum IPv6 MTU. */
#define IP6_ICMP_ERR_MAX WIRE_IPV6_MIN_MTU

static int drop(struct ip_env *env, slip_idx_t pkt, uint64_t *counter)
{
    (*counter)++;
    pkt__free_chain(env->pool, pkt);
    return 0;
}

int ip6_input(struct ip_env *env, slip_idx_t pkt, uint32_t ifindex, struct ip6_rx *out)
{
    struct ip_counters *c = &env->sh->c;
    struct pkt_meta *m = pkt__meta(env->pool, pkt);
    const uint8_t *frame = pkt__data(env->pool, pkt);
    struct wire_eth_repr eth;
    struct wire_ipv6_repr ip;

    c->rx6_frames++;
    if (wire_eth__parse(frame, m->len, &eth) < 0)
        return drop(env, pkt, &c->rx_bad_eth);
    if (eth.type != WIRE_ETHERTYPE_IPV6)
        return drop(env, pkt, &c->rx_not_ipv4);
    int rc = wire_ipv6__parse(frame + WIRE_ETH_HLEN, m->len - WIRE_ETH_HLEN, &ip, 0);
    if (rc < 0) {
        if (rc == -EMSGSIZE)
            return drop(env, pkt, &c->rx6_truncated);
        if (rc == -EPROTO)
            return drop(env, pkt, &c->rx6_bad_ext);
        return drop(env, pkt, &c->rx6_bad_header);
    }
    /* RFC 4291 §2.7: a multicast address is never a source. */
    if (wire_ipv6__is_multicast(&ip.src))
        return drop(env, pkt, &c->rx6_bad_header);
    /* Multicast (ND, MLD) is the kernel's; a link-local destination is ours only on its link. */
    if (wire_ipv6__is_multicast(&ip.dst))
        return drop(env, pkt, &c->rx6_not_local);
    if (env->ctl_t &&
        !ctl_tables__local6(env->ctl_t, &ip.dst, wire_ipv6__is_link_local(&ip.dst) ? ifindex : 0))
        return drop(env, pkt, &c->rx6_not_local);

    /* From here the buffer starts after the headers; link padding past the payload is cut. */
    uint32_t end = ip.total_len;
    uint32_t start = ip.fragment ? ip.frag_hdr_off + (uint32_t)WIRE_IPV6_FRAG_HLEN : ip.l4_off;
    if (start > end)
        return drop(env, pkt, &c->rx6_bad_header);
    m->off += (uint16_t)(WIRE_ETH_HLEN + start);
    m->len = (uint16_t)(end - start);
    m->total = m->len;
    m->addr = 0;                /* IPv4 peers only: the IPv6 source is in out->ip */

    uint32_t l4_len = m->len;
    if (ip.fragment) {
        c->frag6_rx++;
        struct ip_reass_key k = { .src = ip.src, .dst = ip.dst, .id = ip.frag_id, .v6 = 1,
                                  .hdr_len = (uint16_t)start };
        /* The first fragment holds the headers that follow the fragment header, up to the
         * upper layer (the parser insisted, RFC 7112); later ones start with data. */
        uint16_t skip = ip.frag_offset == 0 ? (uint16_t)(ip.l4_off - start) : 0;
        uint8_t proto = ip.proto;
        pkt = ip_reass__add_key(env, &k, ip.frag_offset, ip.more_frags, ip.proto, skip, pkt, &l4_len, &proto);
        if (pkt == SLIP_NIL)
            return 0;
        c->reass6_ok++;
        ip.proto = proto;
        ip.fragment = false;
    }
    c->rx6_delivered++;
    out->ip = ip;
    out->pkt = pkt;
    out->l4_len = l4_len;
    out->ifindex = ifindex;
    return 1;
}

int ip6_icmp__errno(uint8_t type, uint8_t code)
{
    switch (type) {
    case WIRE_ICMPV6_DEST_UNREACH:
        switch (code) {
        case 0: return ENETUNREACH;        /* no route */
        case 1: case 5: case 6: return EACCES;  /* prohibited, policy, reject route */
        case WIRE_ICMPV6_PORT_UNREACH: return ECONNREFUSED;
        default: return EHOSTUNREACH;      /* beyond scope, address unreachable */
        }
    case WIRE_ICMPV6_PKT_TOO_BIG: return EMSGSIZE;
    case WIRE_ICMPV6_PARAMPROB: return EPROTO;
    default: return EHOSTUNREACH;          /* time exceeded */
    }
}

int ip6_icmp__input(struct ip_env *env, const struct ip6_rx *rx, struct ip6_icmp_err *err)
{
    struct ip_counters *c = &env->sh->c;
    uint8_t buf[IP6_ICMP_ERR_MAX];
    c->icmp6_rx++;
    /* Errors fit the minimum MTU; anything longer is an informational message (echo) the
     * kernel answers, or garbage. Copied flat: a reassembled message is a chain. */
    if (rx->l4_len > sizeof(buf)) {
        c->icmp6_bad++;
        return 0;
    }
    size_t got = 0;
    for (slip_idx_t i = rx->pkt; i != SLIP_NIL && got < rx->l4_len; i = pkt__meta(env->pool, i)->chain) {
        const struct pkt_meta *m = pkt__meta(env->pool, i);
        size_t n = SLIP_MIN((size_t)m->len, rx->l4_len - got);
        memcpy(buf + got, pkt__data(env->pool, i), n);
        got += n;
    }
    struct wire_icmpv6_repr r;
    if (got != rx->l4_len || wire_icmpv6__parse(buf, got, &rx->ip.src, &rx->ip.dst, &r, 0) < 0) {
        c->icmp6_bad++;
        return 0;
    }
    if (!wire_icmpv6__is_error(r.type))
        return 0;
    struct wire_icmpv6_quote q;
    if (wire_icmpv6__parse_quote(&r, &q) < 0) {
        c->icmp6_bad++;
        return 0;
    }
    /* It must quote a datagram we sent: our address as its source. */
    if (env->ctl_t && !ctl_tables__local6(env->ctl_t, &q.ip.src, 0)) {
        c->icmp6_bad++;
        return 0;
    }
    c->icmp6_err_rx++;
    err->type = r.type;
    err->code = r.code;
    err->mtu = 0;
    err->q = q;
    if (r.type == WIRE_ICMPV6_PKT_TOO_BIG) {
        err->mtu = r.param < WIRE_IPV6_MIN_MTU ? WIRE_IPV6_MIN_MTU : r.param;
        ip6_pmtu__update(env, &q.ip.dst, r.param);
    }
    return 1;
}
