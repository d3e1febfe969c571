/* ICMPv4 messages (RFC 792): header, checksum, and the quoted datagram of error messages, which
 * is how the stack maps an error (e.g. RFC 1191 frag-needed) back to a connection. */
#include <errno.h>
#include <string.h>

#include "wire/checksum.h"
#include "wire/icmp.h"

static bool icmp_is_frag_needed(uint8_t type, uint8_t code)
{
    return type == WIRE_ICMP_DEST_UNREACH && code == WIRE_ICMP_FRAG_NEEDED;
}

int wire_icmp__parse(const void *buf, size_t len, struct wire_icmp_repr *out, unsigned flags)
{
    struct wire_icmp_hdr h;

    if (SLIP_UNLIKELY(len < WIRE_ICMP_HLEN))
        return -EMSGSIZE;
    /* RFC 792: the checksum covers the whole ICMP message. */
    if (!(flags & WIRE_PARSE_NO_CSUM) &&
        SLIP_UNLIKELY(wire_csum_fold(wire_csum_add(0, buf, len)) != 0))
        return -EBADMSG;
    memcpy(&h, buf, sizeof(h));
    out->type = h.type;
    out->code = h.code;
    out->rest = h.rest;
    /* RFC 1191 §4: the low-order 16 bits of the unused field carry the next-hop MTU; old
     * routers send 0 there, and the caller then falls back to a plateau guess. */
    out->next_hop_mtu = icmp_is_frag_needed(h.type, h.code) ? (uint16_t)(ntoh32(h.rest) & 0xffff) : 0;
    out->body = (const uint8_t *)buf + WIRE_ICMP_HLEN;
    out->body_len = len - WIRE_ICMP_HLEN;
    return 0;
}

int wire_icmp__parse_quote(const struct wire_icmp_repr *r, struct wire_icmp_quote *q)
{
    uint8_t hdr[WIRE_IPV4_HLEN_MAX];
    be16 tot_len;
    size_t hdr_len;
    int err;

    if (!wire_icmp__is_error(r->type))
        return -EINVAL;
    if (r->body_len < WIRE_IPV4_HLEN_MIN)
        return -EMSGSIZE;
    if ((r->body[0] >> 4) != 4)
        return -EINVAL;
    hdr_len = (size_t)(r->body[0] & 0x0f) * 4;
    if (hdr_len < WIRE_IPV4_HLEN_MIN)
        return -EINVAL;
    /* RFC 792: the error quotes the internet header plus the first 64 bits of data. */
    if (r->body_len < hdr_len + 8)
        return -EMSGSIZE;

    /* The quoted datagram is cut short, so its total length cannot be checked against the
     * buffer. Parse a copy of the header whose total length says "header only", which reuses
     * the version, IHL and option checks, then restore the quoted value. */
    memcpy(&tot_len, r->body + 2, 2);
    memcpy(hdr, r->body, hdr_len);
    be16 fake = hton16((uint16_t)hdr_len);
    memcpy(hdr + 2, &fake, 2);
    err = wire_ipv4__parse(hdr, hdr_len, &q->ip, WIRE_PARSE_NO_CSUM);
    if (err)
        return -EINVAL;
    q->ip.total_len = ntoh16(tot_len);
    if (q->ip.total_len < hdr_len)
        return -EINVAL;
    /* RFC 1122 §3.2.2: no error is sent about a non-first fragment, whose 8 quoted bytes would
     * not be a transport header anyway. */
    if (q->ip.frag_offset != 0)
        return -EINVAL;

    const uint8_t *l4 = r->body + hdr_len;
    q->sport = q->dport = 0;
    q->tcp_seq = 0;
    if (q->ip.proto == WIRE_IPPROTO_TCP || q->ip.proto == WIRE_IPPROTO_UDP) {
        be16 sp, dp;
        memcpy(&sp, l4, 2);
        memcpy(&dp, l4 + 2, 2);
        q->sport = ntoh16(sp);
        q->dport = ntoh16(dp);
    }
    if (q->ip.proto == WIRE_IPPROTO_TCP) {
        be32 seq;
        memcpy(&seq, l4 + 4, 4);
        q->tcp_seq = ntoh32(seq);
    }
    return 0;
}

void wire_icmp__emit(const struct wire_icmp_repr *r, void *buf, size_t body_len)
{
    struct wire_icmp_hdr h;

    h.type = r->type;
    h.code = r->code;
    h.csum = 0;
    h.rest = r->rest;
    if (icmp_is_frag_needed(r->type, r->code) && r->next_hop_mtu)
        h.rest = hton32((ntoh32(r->rest) & 0xffff0000u) | r->next_hop_mtu);
    memcpy(buf, &h, sizeof(h));
    h.csum = wire_csum_fold(wire_csum_add(0, buf, WIRE_ICMP_HLEN + body_len));
    memcpy((uint8_t *)buf + offsetof(struct wire_icmp_hdr, csum), &h.csum, 2);
}
