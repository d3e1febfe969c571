/* ARP for Ethernet/IPv4 (RFC 826). The stack leaves ARP to the kernel; this view serves tools,
 * tests and counters. */
#ifndef SLIP_WIRE_ARP_H
#define SLIP_WIRE_ARP_H

#include "base/types.h"
#include "wire/eth.h"

#define WIRE_ARP_LEN 28
#define WIRE_ARPOP_REQUEST 1
#define WIRE_ARPOP_REPLY   2

struct wire_arp_repr {
    uint16_t op;                /* host order */
    uint8_t sha[WIRE_ETH_ALEN];
    be32 spa;
    uint8_t tha[WIRE_ETH_ALEN];
    be32 tpa;
};

/* 0, -EMSGSIZE (truncated) or -EPROTONOSUPPORT (not Ethernet/IPv4 hardware/protocol sizes). */
int wire_arp__parse(const void *buf, size_t len, struct wire_arp_repr *out);
/* Writes WIRE_ARP_LEN bytes. */
void wire_arp__emit(const struct wire_arp_repr *r, void *buf);

#endif
