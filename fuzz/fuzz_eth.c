/* libFuzzer target for the Ethernet view: parse, and for a parsed header, emit it again and
 * check the bytes and the re-parsed repr agree with the input. */
#include <stdlib.h>
#include <string.h>

#include "wire/eth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct wire_eth_repr r, back;
    uint8_t buf[WIRE_ETH_HLEN];
    int n = wire_eth__parse(data, size, &r);

    if (n < 0)
        return 0;
    if (n != WIRE_ETH_HLEN || size < WIRE_ETH_HLEN)
        abort();
    wire_eth__emit(&r, buf);
    if (memcmp(buf, data, WIRE_ETH_HLEN) != 0)
        abort();
    if (wire_eth__parse(buf, sizeof(buf), &back) != WIRE_ETH_HLEN || back.type != r.type ||
        memcmp(back.dst, r.dst, WIRE_ETH_ALEN) || memcmp(back.src, r.src, WIRE_ETH_ALEN))
        abort();
    return 0;
}
