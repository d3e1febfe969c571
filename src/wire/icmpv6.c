/* ICMPv6 (RFC 4443): header and checksum (with the RFC 8200 §8.1 pseudo-header, which ICMPv6 has
 * and ICMPv4 has not), and the quote of an error down to the ports of the flow it is about. */
#include <errno.h>
#include <string.h>

#include "wire/checksum.h"
#include "wire/icmpv6.h"
#include "wire/ipv4.h"

int wire_icmpv6__parse(const void *buf, size_t len, const struct wire_ipv6_addr *src,
                       const struct wire_ipv6_addr *dst, struct wire_icmpv6_repr *out, unsigned flags)
{
    const uint8_t *p = buf;
    if (SLIP_UNLIKELY(len < WIRE_ICMPV6_HLEN))
        return -EMSGSIZE;
    if (!(flags & WIRE_PARSE_NO_CSUM)) {
        uint32_t sum = wire_csum_pseudo6(src->b, dst->b, WIRE_IPPROTO_ICMPV6, (uint32_t)len);
        if (SLIP_UNLIKELY(wire_csum_fold(wire_csum_add(sum, buf, len)) != 0))
            return -EBADMSG;
    }
    out->type = p[0];
    out->code = p[1];
    out->param = (uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 | (uint32_t)p[6] << 8 | p[7];
    out->body = p + WIRE_ICMPV6_HLEN;
    out->body_len = len - WIRE_ICMPV6_HLEN;
    return 0;
}

int wire_icmpv6__parse_quote(const struct wire_icmpv6_repr *r, struct wire_icmpv6_quote *q)
{
    int rc = wire_ipv6__parse(r->body, r->body_len, &q->ip, WIRE_IPV6_PARSE_QUOTE);
    if (rc < 0)
        return rc;
    if ((q->ip.proto != WIRE_IPPROTO_TCP && q->ip.proto != WIRE_IPPROTO_UDP) ||
        (q->ip.fragment && q->ip.frag_offset != 0))
        return -EPROTONOSUPPORT;
    if (r->body_len < (size_t)q->ip.l4_off + 8)
        return -EMSGSIZE;
    const uint8_t *l4 = r->body + q->ip.l4_off;
    q->sport = (uint16_t)(l4[0] << 8 | l4[1]);
    q->dport = (uint16_t)(l4[2] << 8 | l4[3]);
    q->tcp_seq = q->ip.proto == WIRE_IPPROTO_TCP ?
                 (uint32_t)l4[4] << 24 | (uint32_t)l4[5] << 16 | (uint32_t)l4[6] << 8 | l4[7] : 0;
    return 0;
}

void wire_icmpv6__emit(const struct wire_icmpv6_repr *r, const struct wire_ipv6_addr *src,
                       const struct wire_ipv6_addr *dst, void *buf, size_t body_len)
{
    uint8_t *p = buf;
    p[0] = r->type;
    p[1] = r->code;
    p[2] = p[3] = 0;
    p[4] = (uint8_t)(r->param >> 24);
    p[5] = (uint8_t)(r->param >> 16);
    p[6] = (uint8_t)(r->param >> 8);
    p[7] = (uint8_t)r->param;
    size_t len = WIRE_ICMPV6_HLEN + body_len;
    be16 c = wire_csum_fold(wire_csum_add(wire_csum_pseudo6(src->b, dst->b, WIRE_IPPROTO_ICMPV6, (uint32_t)len),
                                          buf, len));
    memcpy(p + 2, &c, 2);
}
