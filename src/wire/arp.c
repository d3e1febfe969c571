/* ARP packets (RFC 826) for Ethernet hardware and IPv4 protocol addresses only: the fixed
 * 28-byte layout is the only one we parse or build. */
#include <errno.h>
#include <string.h>

#include "wire/arp.h"

#define ARP_HRD_ETHER 1         /* RFC 826 ar$hrd for Ethernet (IANA hardware type 1) */

int wire_arp__parse(const void *buf, size_t len, struct wire_arp_repr *out)
{
    const uint8_t *p = buf;
    be16 hrd, pro, op;

    if (len < WIRE_ARP_LEN)
        return -EMSGSIZE;
    memcpy(&hrd, p, 2);
    memcpy(&pro, p + 2, 2);
    if (ntoh16(hrd) != ARP_HRD_ETHER || ntoh16(pro) != WIRE_ETHERTYPE_IPV4 ||
        p[4] != WIRE_ETH_ALEN || p[5] != 4)
        return -EPROTONOSUPPORT;
    memcpy(&op, p + 6, 2);
    out->op = ntoh16(op);
    memcpy(out->sha, p + 8, WIRE_ETH_ALEN);
    memcpy(&out->spa, p + 14, 4);
    memcpy(out->tha, p + 18, WIRE_ETH_ALEN);
    memcpy(&out->tpa, p + 24, 4);
    return 0;
}

void wire_arp__emit(const struct wire_arp_repr *r, void *buf)
{
    uint8_t *p = buf;
    be16 hrd = hton16(ARP_HRD_ETHER), pro = hton16(WIRE_ETHERTYPE_IPV4), op = hton16(r->op);

    memcpy(p, &hrd, 2);
    memcpy(p + 2, &pro, 2);
    p[4] = WIRE_ETH_ALEN;
    p[5] = 4;
    memcpy(p + 6, &op, 2);
    memcpy(p + 8, r->sha, WIRE_ETH_ALEN);
    memcpy(p + 14, &r->spa, 4);
    memcpy(p + 18, r->tha, WIRE_ETH_ALEN);
    memcpy(p + 24, &r->tpa, 4);
}
