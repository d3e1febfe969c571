/* Ethernet II header: the parse only needs a length check, every 14-byte header is well formed.
 * VLAN tags are not stripped here; the type is reported as found. */
#include <errno.h>
#include <string.h>

#include "wire/eth.h"

int wire_eth__parse(const void *buf, size_t len, struct wire_eth_repr *out)
{
    struct wire_eth_hdr h;

    if (len < WIRE_ETH_HLEN)
        return -EMSGSIZE;
    memcpy(&h, buf, sizeof(h));
    memcpy(out->dst, h.dst, WIRE_ETH_ALEN);
    memcpy(out->src, h.src, WIRE_ETH_ALEN);
    out->type = ntoh16(h.type);
    return WIRE_ETH_HLEN;
}

void wire_eth__emit(const struct wire_eth_repr *r, void *buf)
{
    struct wire_eth_hdr h;

    memcpy(h.dst, r->dst, WIRE_ETH_ALEN);
    memcpy(h.src, r->src, WIRE_ETH_ALEN);
    h.type = hton16(r->type);
    memcpy(buf, &h, sizeof(h));
}
