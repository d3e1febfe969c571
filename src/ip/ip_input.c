/* IPv4 input: validate the Ethernet and IPv4 headers of a received frame, hand fragments to
 * reassembly and return complete datagrams for local addresses to the poll loop. */
#include "ip/ip.h"

#include <errno.h>
#include <string.h>

#include "ctl/ctl.h"
#include "wire/eth.h"

void ip_shared__init(struct ip_shared *sh, uint32_t reass_high)
{
    memset(sh, 0, sizeof(*sh));
    /* Linux's defaults are 4 MB and 3 MB: evict down to three quarters of the high mark. */
    sh->reass_high = reass_high ? reass_high : 1;
    sh->reass_low = sh->reass_high * 3 / 4 ? sh->reass_high * 3 / 4 : 1;
    sh->next_id = 1;
    sh->reass_time = IP_REASS_TIMEOUT;
    sh->reass6_time = IP6_REASS_TIMEOUT;
    for (unsigned i = 0; i < IP_NEIGH_SLOTS; i++)
        pkt_queue__init(&sh->neigh[i].q);
    for (unsigned i = 0; i < IP_REASS_SLOTS; i++)
        sh->reass[i].frags = SLIP_NIL;
    for (unsigned i = 0; i < IP6_NEIGH_SLOTS; i++)
        pkt_queue__init(&sh->neigh6[i].q);
}

static int drop(struct ip_env *env, slip_idx_t pkt, uint64_t *counter)
{
    (*counter)++;
    pkt__free_chain(env->pool, pkt);
    return 0;
}

int ip_input(struct ip_env *env, slip_idx_t pkt, uint32_t ifindex, struct ip_rx *out)
{
    struct ip_counters *c = &env->sh->c;
    struct pkt_meta *m = pkt__meta(env->pool, pkt);
    const uint8_t *frame = pkt__data(env->pool, pkt);
    struct wire_eth_repr eth;
    struct wire_ipv4_repr ip;
    int rc;

    c->rx_frames++;
    if (wire_eth__parse(frame, m->len, &eth) < 0)
        return drop(env, pkt, &c->rx_bad_eth);
    if (eth.type != WIRE_ETHERTYPE_IPV4) {
        if (eth.type == WIRE_ETHERTYPE_IPV6)
            return IP_INPUT_IPV6;   /* untouched: the caller hands it to ip6_input */
        return drop(env, pkt, &c->rx_not_ipv4);
    }

    rc = wire_ipv4__parse(frame + WIRE_ETH_HLEN, m->len - WIRE_ETH_HLEN, &ip, 0);
    if (rc < 0) {
        if (rc == -EMSGSIZE)
            return drop(env, pkt, &c->rx_truncated);
        if (rc == -EBADMSG)
            return drop(env, pkt, &c->rx_bad_csum);
        if (rc == -EPROTO)
            return drop(env, pkt, &c->rx_bad_options);
        return drop(env, pkt, &c->rx_bad_header);
    }
    /* RFC 1122 §3.2.1.8 lets a host refuse source-routed datagrams; Linux does by default
     * (accept_source_route = 0), and so do we (docs/COMPLIANCE.md). */
    if (ip.source_route)
        return drop(env, pkt, &c->rx_source_route);
    /* RFC 1122 §3.2.1.7: a host MUST NOT discard a datagram for a low TTL, so TTL is not checked. */
    if (env->ctl_t && !ctl_tables__is_local(env->ctl_t, ip.dst, 0))
        return drop(env, pkt, &c->rx_not_local);

    /* From here the buffer starts at the IPv4 payload; link padding past total_len is cut. */
    m->off += WIRE_ETH_HLEN + ip.hdr_len;
    m->len = (uint16_t)(ip.total_len - ip.hdr_len);
    m->total = m->len;
    m->addr = ip.src;

    uint32_t l4_len = m->len;
    if (wire_ipv4__is_fragment(&ip)) {
        c->frag_rx++;
        pkt = ip_reass__add(env, &ip, pkt, &l4_len);
        if (pkt == SLIP_NIL)
            return 0;
    }
    c->rx_delivered++;
    out->ip = ip;
    out->pkt = pkt;
    out->l4_len = l4_len;
    out->ifindex = ifindex;
    return 1;
}
