/* libFuzzer target for the UDP view: parse, run the checksum check, then emit the repr over
 * the same payload and check it parses back equal with a valid, never-zero checksum. */
#include <stdlib.h>
#include <string.h>

#include "wire/udp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t out[65536];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct wire_udp_repr r, back;
    const be32 src = hton32(0xc6120001), dst = hton32(0xc6120002);

    if (wire_udp__parse(data, size, &r) != 0)
        return 0;
    if (r.len < WIRE_UDP_HLEN || r.len > size)
        abort();
    (void)wire_udp__csum_ok(data, r.len, src, dst);

    memcpy(out, data, r.len);
    wire_udp__emit(&r, out, src, dst);
    if (wire_udp__parse(out, r.len, &back) != 0 || back.sport != r.sport ||
        back.dport != r.dport || back.len != r.len || back.csum == 0)
        abort();
    if (!wire_udp__csum_ok(out, r.len, src, dst))
        abort();
    if (memcmp(out + WIRE_UDP_HLEN, data + WIRE_UDP_HLEN, r.len - WIRE_UDP_HLEN) != 0)
        abort();
    return 0;
}
