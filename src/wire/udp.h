/* UDP header (RFC 768) view and builder. */
#ifndef SLIP_WIRE_UDP_H
#define SLIP_WIRE_UDP_H

#include "base/types.h"

#define WIRE_UDP_HLEN 8

struct wire_udp_hdr {
    be16 sport;
    be16 dport;
    be16 len;
    be16 csum;
} __attribute__((packed));

struct wire_udp_repr {
    uint16_t sport, dport;      /* host order */
    uint16_t len;               /* header + payload, from the length field */
    be16 csum;                  /* as received; 0 means the sender computed none */
};

/* Checks len >= 8 and 8 <= length field <= len. Returns 0, -EMSGSIZE or -EINVAL.
 * The checksum is not verified here (it needs the pseudo-header): see wire_udp__csum_ok. */
int wire_udp__parse(const void *buf, size_t len, struct wire_udp_repr *out);
/* Verifies the checksum over udp_len contiguous bytes; a zero field means "none" and passes. */
bool wire_udp__csum_ok(const void *buf, size_t udp_len, be32 src, be32 dst);
/* Writes the 8-byte header at buf and the full checksum over r->len bytes starting at buf
 * (the payload must already be in place); a computed 0 is sent as 0xffff (RFC 768). */
void wire_udp__emit(const struct wire_udp_repr *r, void *buf, be32 src, be32 dst);

#endif
