/* libFuzzer target for the IPv4 view. Checks that the checksum flag only adds a check, that
 * the repr respects the documented bounds, and that emitting the repr (options dropped, total
 * length reduced by as much) with the same payload parses back to the same values. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wire/ipv4.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t out[65536];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct wire_ipv4_repr r, nc, back;
    int err = wire_ipv4__parse(data, size, &r, 0);
    int err_nc = wire_ipv4__parse(data, size, &nc, WIRE_PARSE_NO_CSUM);

    /* Skipping the checksum may only turn -EBADMSG into success or a later error. */
    if (err == 0 && err_nc != 0)
        abort();
    if (err != 0 && err != -EBADMSG && err != err_nc)
        abort();
    if (err_nc != 0)
        return 0;
    if (nc.hdr_len < WIRE_IPV4_HLEN_MIN || nc.hdr_len > WIRE_IPV4_HLEN_MAX || nc.hdr_len % 4 ||
        nc.total_len < nc.hdr_len || nc.total_len > size ||
        (uint32_t)nc.frag_offset + nc.total_len - nc.hdr_len > 65535 || nc.frag_offset % 8)
        abort();

    size_t payload = nc.total_len - nc.hdr_len;
    struct wire_ipv4_repr e = nc;
    e.total_len = (uint16_t)(WIRE_IPV4_HLEN_MIN + payload);
    wire_ipv4__emit(&e, out);
    memcpy(out + WIRE_IPV4_HLEN_MIN, data + nc.hdr_len, payload);
    if (wire_ipv4__parse(out, e.total_len, &back, 0) != 0)
        abort();
    if (back.src != nc.src || back.dst != nc.dst || back.proto != nc.proto || back.ttl != nc.ttl ||
        back.tos != nc.tos || back.id != nc.id || back.frag_offset != nc.frag_offset ||
        back.more_frags != nc.more_frags || back.dont_frag != nc.dont_frag ||
        back.hdr_len != WIRE_IPV4_HLEN_MIN || back.total_len != e.total_len || back.source_route)
        abort();
    if (memcmp(out + WIRE_IPV4_HLEN_MIN, data + nc.hdr_len, payload) != 0)
        abort();
    return 0;
}
