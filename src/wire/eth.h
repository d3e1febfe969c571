/* Ethernet II header view and builder. */
#ifndef SLIP_WIRE_ETH_H
#define SLIP_WIRE_ETH_H

#include "base/types.h"

#define WIRE_ETH_ALEN 6
#define WIRE_ETH_HLEN 14
#define WIRE_ETH_ZLEN 60          /* minimum frame without FCS */
#define WIRE_ETHERTYPE_IPV4 0x0800
#define WIRE_ETHERTYPE_ARP  0x0806
#define WIRE_ETHERTYPE_IPV6 0x86dd
#define WIRE_ETHERTYPE_VLAN 0x8100

struct wire_eth_hdr {
    uint8_t dst[WIRE_ETH_ALEN];
    uint8_t src[WIRE_ETH_ALEN];
    be16 type;
} __attribute__((packed));

struct wire_eth_repr {
    uint8_t dst[WIRE_ETH_ALEN];
    uint8_t src[WIRE_ETH_ALEN];
    uint16_t type;              /* host order */
};

/* Returns the header length (14) or -EMSGSIZE when len is too short. */
int wire_eth__parse(const void *buf, size_t len, struct wire_eth_repr *out);
/* Writes WIRE_ETH_HLEN bytes. */
void wire_eth__emit(const struct wire_eth_repr *r, void *buf);

#endif
