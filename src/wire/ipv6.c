/* IPv6 header (RFC 8200 §3) and its extension headers (§4): the fixed header is checked once,
 * then the chain is walked header by header, each one's length checked against the payload
 * before anything past it is read, at most WIRE_IPV6_MAX_EXT of them. Emitting writes the fixed
 * header and, for fragmentation, a fragment header; the stack never sends other extensions. */
#include <errno.h>
#include <string.h>

#include "wire/ipv6.h"

#define OPT_PAD1 0
#define OPT_PADN 1
#define OPT_ROUTER_ALERT 5      /* RFC 2711, hop-by-hop */

/* Options of a hop-by-hop or destination options header (RFC 8200 §4.2): Pad1 is one octet,
 * every other option is type, length, data. An option we do not know is skipped when the two
 * high bits of its type are 00; any other action is a discard (the ICMP Parameter Problem that
 * two of them also ask for is the kernel's business: we only refuse the packet). */
static int ipv6_walk_options(const uint8_t *o, size_t n, bool hop)
{
    size_t i = 0;
    while (i < n) {
        uint8_t type = o[i];
        if (type == OPT_PAD1) {
            i++;
            continue;
        }
        if (n - i < 2 || n - i - 2 < o[i + 1])
            return -EPROTO;
        bool known = type == OPT_PADN || (hop && type == OPT_ROUTER_ALERT);
        if (!known && (type >> 6) != 0)
            return -EPROTO;
        i += 2u + o[i + 1];
    }
    return 0;
}

int wire_ipv6__parse(const void *buf, size_t len, struct wire_ipv6_repr *out, unsigned flags)
{
    const uint8_t *p = buf;
    struct wire_ipv6_hdr h;

    if (SLIP_UNLIKELY(len < WIRE_IPV6_HLEN))
        return -EMSGSIZE;
    memcpy(&h, buf, sizeof(h));
    uint32_t vtf = ntoh32(h.ver_tc_flow);
    if (SLIP_UNLIKELY((vtf >> 28) != 6))
        return -EINVAL;
    uint16_t plen = ntoh16(h.payload_len);
    /* Bytes past the payload are link-layer padding and are allowed. */
    bool quote = (flags & WIRE_IPV6_PARSE_QUOTE) != 0;
    if (SLIP_UNLIKELY((size_t)WIRE_IPV6_HLEN + plen > len && !quote))
        return -EMSGSIZE;

    memset(out, 0, sizeof(*out));
    out->src = h.src;
    out->dst = h.dst;
    out->tclass = (uint8_t)(vtf >> 20);
    out->flow = vtf & 0xfffffu;
    out->hop_limit = h.hop_limit;
    out->payload_len = plen;
    out->total_len = WIRE_IPV6_HLEN + (uint32_t)plen;

    size_t off = WIRE_IPV6_HLEN, end = SLIP_MIN((size_t)out->total_len, len);
    uint8_t next = h.next;
    bool seen_frag = false;
    for (unsigned n = 0;; n++) {
        size_t hlen;
        uint8_t after;
        if (next != WIRE_IPPROTO_HOPOPTS && next != WIRE_IPPROTO_DSTOPTS && next != WIRE_IPPROTO_ROUTING &&
            next != WIRE_IPPROTO_FRAGMENT && next != WIRE_IPPROTO_AH)
            break;      /* upper layer, ESP, no next header, or one we do not know: it starts here */
        if (n >= WIRE_IPV6_MAX_EXT)
            return -EPROTO;
        /* Every extension header starts with Next Header and a length octet; a chain that runs
         * past the payload (a jumbogram's payload length 0 included) is refused. */
        if (end - off < 8)
            return -EPROTO;
        after = p[off];
        switch (next) {
        case WIRE_IPPROTO_HOPOPTS:
        case WIRE_IPPROTO_DSTOPTS:
            /* RFC 8200 §4.1: hop-by-hop options only immediately after the IPv6 header */
            if (next == WIRE_IPPROTO_HOPOPTS && n != 0)
                return -EPROTO;
            hlen = ((size_t)p[off + 1] + 1) * 8;
            if (hlen > end - off)
                return -EPROTO;
            if (ipv6_walk_options(p + off + 2, hlen - 2, next == WIRE_IPPROTO_HOPOPTS) < 0)
                return -EPROTO;
            break;
        case WIRE_IPPROTO_ROUTING:
            hlen = ((size_t)p[off + 1] + 1) * 8;
            if (hlen > end - off)
                return -EPROTO;
            /* RFC 8200 §4.4: segments left non-zero means we are not the final destination (and
             * type 0 is deprecated, RFC 5095); a host drops it */
            if (p[off + 3] != 0)
                return -EPROTO;
            break;
        case WIRE_IPPROTO_AH:
            hlen = ((size_t)p[off + 1] + 2) * 4;      /* RFC 4302 §2.2: in 32-bit words, minus 2 */
            if (hlen > end - off)
                return -EPROTO;
            break;
        default: {      /* WIRE_IPPROTO_FRAGMENT, RFC 8200 §4.5 */
            if (seen_frag)
                return -EPROTO;
            seen_frag = true;
            hlen = WIRE_IPV6_FRAG_HLEN;
            uint16_t offlg = (uint16_t)(p[off + 2] << 8 | p[off + 3]);
            uint16_t foff = offlg & 0xfff8u;
            bool more = (offlg & 1u) != 0;
            if (foff == 0 && !more)
                break;  /* RFC 6946: an atomic fragment is a whole datagram */
            size_t data = end - off - hlen;
            /* §4.5: a fragment with M set carries a multiple of 8 octets, and no fragment
             * reaches past the 65535-octet reassembled payload */
            if (!quote && ((more && data % 8) || foff + data > 65535u))
                return -EINVAL;
            out->fragment = true;
            out->more_frags = more;
            out->frag_offset = foff;
            out->frag_id = (uint32_t)p[off + 4] << 24 | (uint32_t)p[off + 5] << 16 |
                           (uint32_t)p[off + 6] << 8 | p[off + 7];
            out->frag_hdr_off = (uint16_t)off;
            if (foff != 0) {
                /* a later fragment: what follows is data, its header chain was in the first */
                out->nexts = (uint8_t)(n + 1);
                out->proto = after;
                out->l4_off = (uint16_t)(off + hlen);
                return 0;
            }
            break;
        }
        }
        off += hlen;
        next = after;
        out->nexts = (uint8_t)(n + 1);
    }
    out->proto = next;
    out->l4_off = (uint16_t)off;
    return 0;
}

void wire_ipv6__emit(const struct wire_ipv6_repr *r, void *buf)
{
    struct wire_ipv6_hdr h;
    h.ver_tc_flow = hton32(6u << 28 | (uint32_t)r->tclass << 20 | (r->flow & 0xfffffu));
    h.payload_len = hton16(r->payload_len);
    h.next = r->proto;
    h.hop_limit = r->hop_limit;
    h.src = r->src;
    h.dst = r->dst;
    memcpy(buf, &h, sizeof(h));
}

void wire_ipv6__emit_frag(void *buf, uint8_t next, uint16_t offset, bool more, uint32_t id)
{
    uint8_t *p = buf;
    uint16_t offlg = (uint16_t)((offset & 0xfff8u) | (more ? 1u : 0u));
    p[0] = next;
    p[1] = 0;
    p[2] = (uint8_t)(offlg >> 8);
    p[3] = (uint8_t)offlg;
    p[4] = (uint8_t)(id >> 24);
    p[5] = (uint8_t)(id >> 16);
    p[6] = (uint8_t)(id >> 8);
    p[7] = (uint8_t)id;
}

bool wire_ipv6__is_v4mapped(const struct wire_ipv6_addr *a, be32 *v4)
{
    static const uint8_t prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    if (memcmp(a->b, prefix, sizeof(prefix)) != 0)
        return false;
    if (v4)
        memcpy(v4, &a->b[12], 4);
    return true;
}

void wire_ipv6__v4mapped(be32 v4, struct wire_ipv6_addr *out)
{
    memset(out->b, 0, 10);
    out->b[10] = out->b[11] = 0xff;
    memcpy(&out->b[12], &v4, 4);
}
