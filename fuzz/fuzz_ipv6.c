/* libFuzzer target for the IPv6 view and ICMPv6. Checks that the walk respects its documented
 * bounds (upper-layer offset inside the packet, at most WIRE_IPV6_MAX_EXT headers, fragment
 * fields consistent), that a quote parse accepts whatever a full parse accepts, that emitting
 * the fixed header with the same chain parses back to the same values, and, for ICMPv6 inside,
 * that the checksum flag only adds a check and the quote's ports lie inside the message. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wire/icmpv6.h"
#include "wire/ipv4.h"
#include "wire/ipv6.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t out[65536 + WIRE_IPV6_HLEN];

static void check_icmpv6(const struct wire_ipv6_repr *r, const uint8_t *m, size_t ml)
{
    struct wire_icmpv6_repr c, nc;
    struct wire_icmpv6_quote q;
    int err = wire_icmpv6__parse(m, ml, &r->src, &r->dst, &c, 0);
    int err_nc = wire_icmpv6__parse(m, ml, &r->src, &r->dst, &nc, WIRE_PARSE_NO_CSUM);
    if ((err == 0 && err_nc != 0) || (err != 0 && err != -EBADMSG && err != err_nc))
        abort();
    if (err_nc != 0)
        return;
    if (nc.body != m + WIRE_ICMPV6_HLEN || nc.body_len != ml - WIRE_ICMPV6_HLEN)
        abort();
    if (wire_icmpv6__parse_quote(&nc, &q) == 0) {
        if (q.ip.l4_off + 8u > nc.body_len)
            abort();
        if (q.ip.proto != WIRE_IPPROTO_TCP && q.ip.proto != WIRE_IPPROTO_UDP)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct wire_ipv6_repr r, rq, back;
    int err = wire_ipv6__parse(data, size, &r, 0);
    int errq = wire_ipv6__parse(data, size, &rq, WIRE_IPV6_PARSE_QUOTE);
    if (err == 0 && errq != 0)
        abort();
    if (errq == 0 && (rq.l4_off > size || rq.nexts > WIRE_IPV6_MAX_EXT))
        abort();
    if (err != 0)
        return 0;
    if (r.total_len != WIRE_IPV6_HLEN + r.payload_len || r.total_len > size || r.l4_off > r.total_len ||
        r.l4_off < WIRE_IPV6_HLEN || r.nexts > WIRE_IPV6_MAX_EXT || r.flow > 0xfffff)
        abort();
    if (r.fragment && (r.frag_offset % 8 || r.frag_hdr_off < WIRE_IPV6_HLEN ||
                       r.frag_hdr_off + WIRE_IPV6_FRAG_HLEN > r.l4_off ||
                       (!r.more_frags && r.frag_offset == 0)))
        abort();
    if (memcmp(&r, &rq, sizeof(r)) != 0)
        abort();

    /* The same chain behind a header we emit parses back the same. */
    wire_ipv6__emit(&r, out);
    out[6] = ((const uint8_t *)data)[6];        /* the first Next Header, as received */
    memcpy(out + WIRE_IPV6_HLEN, data + WIRE_IPV6_HLEN, r.payload_len);
    if (wire_ipv6__parse(out, r.total_len, &back, 0) != 0 || memcmp(&r, &back, sizeof(r)) != 0)
        abort();

    if (r.proto == WIRE_IPPROTO_ICMPV6 && !r.fragment)
        check_icmpv6(&r, data + r.l4_off, r.total_len - r.l4_off);
    return 0;
}
