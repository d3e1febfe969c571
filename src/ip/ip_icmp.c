/* ICMP input for the stack. Echo requests never get here (the XDP program passes them to the
 * kernel, which answers); what the stack receives are errors that quote one of its datagrams:
 * port unreachable for UDP, fragmentation needed (RFC 1191) for path MTU, and the like. */
#include "ip/ip.h"

#include "wire/checksum.h"

static bool chain_csum_ok(const struct pkt_pool *p, slip_idx_t i)
{
    uint32_t sum = 0;
    for (; i != SLIP_NIL; i = pkt__meta(p, i)->chain)
        sum = wire_csum_add(sum, pkt__data(p, i), pkt__meta(p, i)->len);
    return wire_csum_fold(sum) == 0;
}

int ip_icmp__input(struct ip_env *env, const struct ip_rx *rx, struct ip_icmp_err *err)
{
    struct ip_counters *c = &env->sh->c;
    const struct pkt_meta *m = pkt__meta(env->pool, rx->pkt);
    struct wire_icmp_repr icmp;

    c->icmp_rx++;
    if (!chain_csum_ok(env->pool, rx->pkt) ||
        wire_icmp__parse(pkt__data(env->pool, rx->pkt), m->len, &icmp, WIRE_PARSE_NO_CSUM) < 0) {
        c->icmp_bad++;
        return 0;
    }
    if (!wire_icmp__is_error(icmp.type))
        return 0;
    if (wire_icmp__parse_quote(&icmp, &err->q) < 0) {
        c->icmp_bad++;
        return 0;
    }
    /* RFC 1122 §3.2.2: the quote must be one of ours. */
    if (err->q.ip.src != rx->ip.dst ||
        (err->q.ip.proto != WIRE_IPPROTO_UDP && err->q.ip.proto != WIRE_IPPROTO_TCP)) {
        c->icmp_bad++;
        return 0;
    }
    c->icmp_err_rx++;
    err->type = icmp.type;
    err->code = icmp.code;
    err->mtu = icmp.next_hop_mtu;
    if (icmp.type == WIRE_ICMP_DEST_UNREACH && icmp.code == WIRE_ICMP_FRAG_NEEDED && icmp.next_hop_mtu)
        ip_pmtu__update(env, err->q.ip.dst, icmp.next_hop_mtu);
    return 1;
}
