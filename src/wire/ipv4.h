/* IPv4 header (RFC 791) view: one length check, then a parsed repr in host values. */
#ifndef SLIP_WIRE_IPV4_H
#define SLIP_WIRE_IPV4_H

#include "base/types.h"

#define WIRE_IPV4_HLEN_MIN 20
#define WIRE_IPV4_HLEN_MAX 60
#define WIRE_IPPROTO_ICMP 1
#define WIRE_IPPROTO_TCP  6
#define WIRE_IPPROTO_UDP  17

#define WIRE_IPV4_DF 0x4000
#define WIRE_IPV4_MF 0x2000
#define WIRE_IPV4_OFFMASK 0x1fff

struct wire_ipv4_hdr {
    uint8_t ver_ihl;
    uint8_t tos;
    be16 tot_len;
    be16 id;
    be16 frag_off;
    uint8_t ttl;
    uint8_t proto;
    be16 csum;
    be32 src;
    be32 dst;
} __attribute__((packed));

struct wire_ipv4_repr {
    be32 src, dst;
    uint8_t proto;
    uint8_t ttl;
    uint8_t tos;
    uint16_t id;                /* host order */
    uint16_t frag_offset;       /* in bytes */
    bool more_frags;
    bool dont_frag;
    bool source_route;          /* LSRR or SSRR option present */
    uint16_t hdr_len;           /* bytes, 20..60 */
    uint16_t total_len;         /* bytes, header included */
};

#define WIRE_PARSE_NO_CSUM 0x1  /* caller verified (or does not need) the checksum */

/* Validates version, IHL, total length against len (trailing link padding is allowed), the
 * fragment extent (offset + payload <= 65535), option TLV lengths and, unless WIRE_PARSE_NO_CSUM,
 * the header checksum. Returns 0, -EMSGSIZE (buffer shorter than the header says), -EINVAL
 * (impossible field), -EPROTO (malformed options) or -EBADMSG (checksum). */
int wire_ipv4__parse(const void *buf, size_t len, struct wire_ipv4_repr *out, unsigned flags);
/* Writes a 20-byte header (options are never emitted) with its checksum, from r->total_len,
 * id, frag_offset, more_frags, dont_frag, ttl, tos, proto, src, dst. */
void wire_ipv4__emit(const struct wire_ipv4_repr *r, void *buf);

static inline bool wire_ipv4__is_fragment(const struct wire_ipv4_repr *r)
{
    return r->more_frags || r->frag_offset != 0;
}

#endif
