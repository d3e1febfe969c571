/* IPv6 header (RFC 8200) view: one length check of the fixed header, a bounded walk of the
 * extension headers to the upper-layer header, then a parsed repr in host values. */
#ifndef SLIP_WIRE_IPV6_H
#define SLIP_WIRE_IPV6_H

#include "base/types.h"

#define WIRE_IPV6_HLEN 40
#define WIRE_IPV6_FRAG_HLEN 8
#define WIRE_IPV6_MIN_MTU 1280          /* RFC 8200 §5 */

/* Next Header values (IANA "Assigned Internet Protocol Numbers") the walk knows. */
#define WIRE_IPPROTO_HOPOPTS  0
#define WIRE_IPPROTO_ROUTING  43
#define WIRE_IPPROTO_FRAGMENT 44
#define WIRE_IPPROTO_ESP      50
#define WIRE_IPPROTO_AH       51
#define WIRE_IPPROTO_ICMPV6   58
#define WIRE_IPPROTO_NONE     59
#define WIRE_IPPROTO_DSTOPTS  60

/* At most this many extension headers are walked; a longer chain is refused (-EPROTO). RFC 8200
 * §4.1 lets each appear once (destination options twice); 8 leaves room for AH and unknown ones
 * a host would meet in practice, and bounds the work per packet. */
#define WIRE_IPV6_MAX_EXT 8

struct wire_ipv6_addr {
    uint8_t b[16];
};

struct wire_ipv6_hdr {
    be32 ver_tc_flow;
    be16 payload_len;
    uint8_t next;
    uint8_t hop_limit;
    struct wire_ipv6_addr src;
    struct wire_ipv6_addr dst;
} __attribute__((packed));

struct wire_ipv6_repr {
    struct wire_ipv6_addr src, dst;
    uint8_t tclass;
    uint32_t flow;              /* 20-bit flow label */
    uint8_t hop_limit;
    uint8_t proto;              /* upper-layer protocol (or ESP, NONE, a header we do not know) */
    uint16_t l4_off;            /* offset of that header from the start of the IPv6 header */
    uint16_t payload_len;       /* bytes after the fixed header, extension headers included */
    uint32_t total_len;         /* WIRE_IPV6_HLEN + payload_len: up to 65575, past 16 bits */
    /* Fragment header (RFC 8200 §4.5): present and not atomic (RFC 6946: offset 0 and M clear
     * is a whole datagram) */
    bool fragment;
    bool more_frags;
    uint16_t frag_offset;       /* bytes */
    uint32_t frag_id;
    uint16_t frag_hdr_off;      /* offset of the fragment header: what precedes it is the
                                   unfragmentable part */
    uint8_t nexts;              /* extension headers walked */
};

/* Validates the version, the payload length against len (trailing link padding is allowed, a
 * jumbogram's 0 with extension headers is not), and walks the extension headers: hop-by-hop only
 * first, every header inside the payload, options (hop-by-hop, destination) with in-bound lengths
 * and none whose type asks an unknown-option discard (RFC 8200 §4.2), no routing header with
 * segments left (we are not a router), a fragment header with a reserved field that is sound. A
 * first fragment must hold the whole chain up to the upper-layer header (RFC 7112), and a later
 * fragment's chain ends at its fragment header. Returns 0, -EMSGSIZE (buffer shorter than the
 * header says), -EINVAL (impossible field) or -EPROTO (extension header to refuse). */
int wire_ipv6__parse(const void *buf, size_t len, struct wire_ipv6_repr *out, unsigned flags);
/* flags: the packet is the quote inside an ICMPv6 error (RFC 4443 §2.4 (c): as much of the
 * offending packet as fits), so it may end before its payload length says; the walk stops at
 * the end of what is there (still bounded) and total_len says what the header claimed. */
#define WIRE_IPV6_PARSE_QUOTE 0x1
/* Writes the 40-byte fixed header from tclass, flow, payload_len, proto (as Next Header),
 * hop_limit, src, dst. */
void wire_ipv6__emit(const struct wire_ipv6_repr *r, void *buf);
/* Writes an 8-byte fragment header: next header, offset (bytes, a multiple of 8), M, id. */
void wire_ipv6__emit_frag(void *buf, uint8_t next, uint16_t offset, bool more, uint32_t id);

/* ::ffff:a.b.c.d (RFC 4291 §2.5.5.2) */
bool wire_ipv6__is_v4mapped(const struct wire_ipv6_addr *a, be32 *v4);
void wire_ipv6__v4mapped(be32 v4, struct wire_ipv6_addr *out);

static inline bool wire_ipv6__is_multicast(const struct wire_ipv6_addr *a)
{
    return a->b[0] == 0xff;
}

static inline bool wire_ipv6__is_link_local(const struct wire_ipv6_addr *a)
{
    return a->b[0] == 0xfe && (a->b[1] & 0xc0) == 0x80;
}

#endif
