/* libFuzzer target for the TCP view: parse header and options, then emit the repr (options
 * re-laid out by the builder) and check it parses back to the same values, with the checksum
 * computed by set_csum verifying. */
#include <stdlib.h>
#include <string.h>

#include "wire/tcp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct wire_tcp_repr r, back;
    uint8_t out[WIRE_TCP_HLEN_MAX];
    const be32 src = hton32(0xc6120001), dst = hton32(0xc6120002);

    if (wire_tcp__parse(data, size, &r) != 0)
        return 0;
    if (r.hdr_len < WIRE_TCP_HLEN_MIN || r.hdr_len > WIRE_TCP_HLEN_MAX || r.hdr_len % 4 ||
        r.hdr_len > size || r.opts.nsack > WIRE_TCP_MAX_SACK)
        abort();
    if (size <= 65535)
        (void)wire_tcp__csum_ok(data, size, src, dst);

    size_t hl = wire_tcp__emit(&r, out);
    if (hl < WIRE_TCP_HLEN_MIN || hl > WIRE_TCP_HLEN_MAX || hl % 4)
        abort();
    wire_tcp__set_csum(out, hl, src, dst);
    if (!wire_tcp__csum_ok(out, hl, src, dst))
        abort();
    if (wire_tcp__parse(out, hl, &back) != 0 || back.hdr_len != hl)
        abort();
    const struct wire_tcp_opts *a = &r.opts, *b = &back.opts;
    if (back.sport != r.sport || back.dport != r.dport || back.seq != r.seq ||
        back.ack != r.ack || back.flags != r.flags || back.window != r.window ||
        back.urg != r.urg)
        abort();
    if (a->has_mss != b->has_mss || a->has_wscale != b->has_wscale ||
        a->sack_ok != b->sack_ok || a->has_ts != b->has_ts ||
        (a->has_mss && a->mss != b->mss) || (a->has_wscale && a->wscale != b->wscale) ||
        (a->has_ts && (a->tsval != b->tsval || a->tsecr != b->tsecr)))
        abort();
    /* The builder may drop trailing SACK blocks that no longer fit, never change the others. */
    if (b->nsack > a->nsack)
        abort();
    for (unsigned i = 0; i < b->nsack; i++)
        if (a->sack[i].left != b->sack[i].left || a->sack[i].right != b->sack[i].right)
            abort();
    return 0;
}
