/* libFuzzer target for the ICMP view and its error quote: parse (without the checksum, so the
 * fuzzer reaches the quote), then re-emit the message and check that it verifies and parses to
 * the same header, MTU and quote. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wire/icmp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t out[65536 + WIRE_ICMP_HLEN];

static bool quote_eq(const struct wire_icmp_quote *a, const struct wire_icmp_quote *b)
{
    return a->ip.src == b->ip.src && a->ip.dst == b->ip.dst && a->ip.proto == b->ip.proto &&
           a->ip.ttl == b->ip.ttl && a->ip.tos == b->ip.tos && a->ip.id == b->ip.id &&
           a->ip.frag_offset == b->ip.frag_offset && a->ip.more_frags == b->ip.more_frags &&
           a->ip.dont_frag == b->ip.dont_frag && a->ip.source_route == b->ip.source_route &&
           a->ip.hdr_len == b->ip.hdr_len && a->ip.total_len == b->ip.total_len &&
           a->sport == b->sport && a->dport == b->dport && a->tcp_seq == b->tcp_seq;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct wire_icmp_repr r, back;
    struct wire_icmp_quote q, qb;
    int qerr, qerr_b;

    if (size > sizeof(out))
        return 0;
    if (wire_icmp__parse(data, size, &r, WIRE_PARSE_NO_CSUM) != 0)
        return 0;
    /* The checked parse may only add -EBADMSG. */
    int cerr = wire_icmp__parse(data, size, &back, 0);
    if (cerr != 0 && cerr != -EBADMSG)
        abort();
    if (r.body != data + WIRE_ICMP_HLEN || r.body_len != size - WIRE_ICMP_HLEN)
        abort();
    qerr = wire_icmp__parse_quote(&r, &q);
    if (qerr == 0 && (q.ip.hdr_len < WIRE_IPV4_HLEN_MIN || r.body_len < (size_t)q.ip.hdr_len + 8))
        abort();

    memcpy(out + WIRE_ICMP_HLEN, r.body, r.body_len);
    wire_icmp__emit(&r, out, r.body_len);
    if (wire_icmp__parse(out, size, &back, 0) != 0)
        abort();
    if (back.type != r.type || back.code != r.code || back.rest != r.rest ||
        back.next_hop_mtu != r.next_hop_mtu || back.body_len != r.body_len)
        abort();
    qerr_b = wire_icmp__parse_quote(&back, &qb);
    if (qerr_b != qerr || (qerr == 0 && !quote_eq(&q, &qb)))
        abort();
    return 0;
}
