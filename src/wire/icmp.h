/* ICMPv4 (RFC 792, RFC 1191) view: echo, and errors that quote an IPv4 header plus 8 bytes. */
#ifndef SLIP_WIRE_ICMP_H
#define SLIP_WIRE_ICMP_H

#include "base/types.h"
#include "wire/ipv4.h"

#define WIRE_ICMP_HLEN 8
#define WIRE_ICMP_ECHOREPLY     0
#define WIRE_ICMP_DEST_UNREACH  3
#define WIRE_ICMP_ECHO          8
#define WIRE_ICMP_TIME_EXCEEDED 11
#define WIRE_ICMP_PARAMPROB     12
#define WIRE_ICMP_PORT_UNREACH  3   /* code */
#define WIRE_ICMP_FRAG_NEEDED   4   /* code */

struct wire_icmp_hdr {
    uint8_t type;
    uint8_t code;
    be16 csum;
    be32 rest;                  /* echo id/seq, or unused + next-hop MTU (RFC 1191) */
} __attribute__((packed));

struct wire_icmp_repr {
    uint8_t type, code;
    be32 rest;
    uint16_t next_hop_mtu;      /* host order; frag-needed only, else 0 */
    const uint8_t *body;        /* bytes after the 8-byte header */
    size_t body_len;
};

/* The quoted datagram of an error message: its IPv4 header and first 8 payload bytes. */
struct wire_icmp_quote {
    struct wire_ipv4_repr ip;
    uint16_t sport, dport;      /* host order; TCP or UDP */
    uint32_t tcp_seq;           /* host order; TCP only */
};

/* Validates length and (unless WIRE_PARSE_NO_CSUM) the checksum over len bytes.
 * Returns 0, -EMSGSIZE or -EBADMSG. */
int wire_icmp__parse(const void *buf, size_t len, struct wire_icmp_repr *out, unsigned flags);
static inline bool wire_icmp__is_error(uint8_t type)
{
    return type == WIRE_ICMP_DEST_UNREACH || type == WIRE_ICMP_TIME_EXCEEDED ||
           type == WIRE_ICMP_PARAMPROB;
}
/* Parses the quote of an error message (no checksum check on the quoted header, which may be
 * truncated by routers). Returns 0, -EMSGSIZE (fewer than IHL + 8 bytes) or -EINVAL. */
int wire_icmp__parse_quote(const struct wire_icmp_repr *r, struct wire_icmp_quote *q);
/* Writes the 8-byte header and the checksum over 8 + body_len bytes; the body must already be
 * at buf + 8. */
void wire_icmp__emit(const struct wire_icmp_repr *r, void *buf, size_t body_len);

#endif
