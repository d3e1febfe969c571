/* IPv4 header (RFC 791 §3.1): one pass of length and sanity checks, the option walk, then the
 * repr. Emitting never writes options: the stack sends plain 20-byte headers. */
#include <errno.h>
#include <string.h>

#include "wire/checksum.h"
#include "wire/ipv4.h"
#include "wire/tlv.h"

#define IPOPT_EOL  0
#define IPOPT_NOP  1
#define IPOPT_LSRR 131
#define IPOPT_SSRR 137
#define IPV4_MAX_LEN 65535u

/* RFC 791 §3.1 "Options": EOL ends the list (the rest is padding), NOP is one octet, every other
 * option is type, length (counting both), data. A length below 2 or past the header is malformed
 * (RFC 1122 §3.2.1.8 lets a host discard such a datagram). Returns 0 or -EPROTO. */
static int ipv4_walk_options(const uint8_t *opt, size_t len, bool *source_route)
{
    struct wire_tlv t;
    size_t i = 0;
    int rc;

    *source_route = false;
    while ((rc = wire_tlv__next(opt, len, &i, &t)) > 0) {
        if (t.kind == IPOPT_LSRR || t.kind == IPOPT_SSRR) {
            /* A route option carries at least its pointer octet (RFC 791 "Loose Source ..."). */
            if (t.len < 3)
                return -EPROTO;
            *source_route = true;
        }
    }
    return rc;
}

int wire_ipv4__parse(const void *buf, size_t len, struct wire_ipv4_repr *out, unsigned flags)
{
    struct wire_ipv4_hdr h;
    uint16_t hdr_len, total_len, frag;
    int err;

    if (SLIP_UNLIKELY(len < WIRE_IPV4_HLEN_MIN))
        return -EMSGSIZE;
    memcpy(&h, buf, sizeof(h));
    if (SLIP_UNLIKELY((h.ver_ihl >> 4) != 4))
        return -EINVAL;
    hdr_len = (uint16_t)((h.ver_ihl & 0x0f) * 4);
    if (SLIP_UNLIKELY(hdr_len < WIRE_IPV4_HLEN_MIN))
        return -EINVAL;
    if (SLIP_UNLIKELY(hdr_len > len))
        return -EMSGSIZE;
    total_len = ntoh16(h.tot_len);
    if (SLIP_UNLIKELY(total_len < hdr_len))
        return -EINVAL;
    /* Bytes past total_len are link-layer padding (Ethernet minimum frame) and are allowed. */
    if (SLIP_UNLIKELY(total_len > len))
        return -EMSGSIZE;

    frag = ntoh16(h.frag_off);
    out->frag_offset = (uint16_t)((frag & WIRE_IPV4_OFFMASK) * 8);
    /* A fragment whose data would end past the 65535-byte datagram cannot be reassembled and is
     * the classic overlap/overflow attack ("ping of death"). */
    if (SLIP_UNLIKELY((uint32_t)out->frag_offset + (total_len - hdr_len) > IPV4_MAX_LEN))
        return -EINVAL;

    if (!(flags & WIRE_PARSE_NO_CSUM) &&
        SLIP_UNLIKELY(wire_csum_fold(wire_csum_add(0, buf, hdr_len)) != 0))
        return -EBADMSG;

    out->source_route = false;
    if (hdr_len > WIRE_IPV4_HLEN_MIN) {
        err = ipv4_walk_options((const uint8_t *)buf + WIRE_IPV4_HLEN_MIN,
                                hdr_len - WIRE_IPV4_HLEN_MIN, &out->source_route);
        if (err)
            return err;
    }

    out->src = h.src;
    out->dst = h.dst;
    out->proto = h.proto;
    out->ttl = h.ttl;
    out->tos = h.tos;
    out->id = ntoh16(h.id);
    /* The reserved flag bit (RFC 791: "must be zero") is ignored on receive, as Linux does. */
    out->more_frags = (frag & WIRE_IPV4_MF) != 0;
    out->dont_frag = (frag & WIRE_IPV4_DF) != 0;
    out->hdr_len = hdr_len;
    out->total_len = total_len;
    return 0;
}

void wire_ipv4__emit(const struct wire_ipv4_repr *r, void *buf)
{
    struct wire_ipv4_hdr h;
    uint16_t frag = (uint16_t)((r->frag_offset / 8) & WIRE_IPV4_OFFMASK);

    if (r->more_frags)
        frag |= WIRE_IPV4_MF;
    if (r->dont_frag)
        frag |= WIRE_IPV4_DF;
    h.ver_ihl = 0x45;
    h.tos = r->tos;
    h.tot_len = hton16(r->total_len);
    h.id = hton16(r->id);
    h.frag_off = hton16(frag);
    h.ttl = r->ttl;
    h.proto = r->proto;
    h.csum = 0;
    h.src = r->src;
    h.dst = r->dst;
    h.csum = wire_csum_fold(wire_csum_add(0, &h, sizeof(h)));
    memcpy(buf, &h, sizeof(h));
}
