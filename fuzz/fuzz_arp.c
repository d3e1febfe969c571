/* libFuzzer target for the ARP view: a parsed Ethernet/IPv4 ARP packet must be re-emitted
 * byte for byte (the format has no free fields) and parse back to the same repr. */
#include <stdlib.h>
#include <string.h>

#include "wire/arp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct wire_arp_repr r, back;
    uint8_t buf[WIRE_ARP_LEN];

    if (wire_arp__parse(data, size, &r) != 0)
        return 0;
    wire_arp__emit(&r, buf);
    if (memcmp(buf, data, WIRE_ARP_LEN) != 0)
        abort();
    if (wire_arp__parse(buf, sizeof(buf), &back) != 0 || back.op != r.op || back.spa != r.spa ||
        back.tpa != r.tpa || memcmp(back.sha, r.sha, WIRE_ETH_ALEN) ||
        memcmp(back.tha, r.tha, WIRE_ETH_ALEN))
        abort();
    return 0;
}
