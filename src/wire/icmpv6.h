/* ICMPv6 (RFC 4443) view: the 4-byte header, the checksum over the IPv6 pseudo-header, and the
 * quote an error carries (the offending packet's IPv6 header, extension headers and as much as
 * fits), down to the TCP/UDP ports that name the flow. Neighbour discovery (RFC 4861), router
 * advertisements and MLD are the kernel's: the XDP program never steers them to the stack. */
#ifndef SLIP_WIRE_ICMPV6_H
#define SLIP_WIRE_ICMPV6_H

#include "base/types.h"
#include "wire/ipv6.h"

#define WIRE_ICMPV6_HLEN 8
#define WIRE_ICMPV6_DEST_UNREACH  1
#define WIRE_ICMPV6_PKT_TOO_BIG   2
#define WIRE_ICMPV6_TIME_EXCEEDED 3
#define WIRE_ICMPV6_PARAMPROB     4
#define WIRE_ICMPV6_ECHO_REQUEST  128
#define WIRE_ICMPV6_ECHO_REPLY    129
#define WIRE_ICMPV6_PORT_UNREACH  4     /* code of DEST_UNREACH */

struct wire_icmpv6_repr {
    uint8_t type, code;
    uint32_t param;             /* host order: MTU (packet too big), pointer (parameter problem) */
    const uint8_t *body;        /* bytes after the 8-byte header */
    size_t body_len;
};

/* The quoted packet of an error message. */
struct wire_icmpv6_quote {
    struct wire_ipv6_repr ip;
    uint16_t sport, dport;      /* host order; TCP or UDP */
    uint32_t tcp_seq;           /* host order; TCP only */
};

/* Validates the length and (unless WIRE_PARSE_NO_CSUM, wire/ipv4.h) the checksum over len bytes
 * with the pseudo-header of src and dst (the IPv6 header's). Returns 0, -EMSGSIZE or -EBADMSG. */
int wire_icmpv6__parse(const void *buf, size_t len, const struct wire_ipv6_addr *src,
                       const struct wire_ipv6_addr *dst, struct wire_icmpv6_repr *out, unsigned flags);
static inline bool wire_icmpv6__is_error(uint8_t type)
{
    return type < 128;  /* RFC 4443 §2.1: error messages have the high bit of the type clear */
}
/* The quote of an error message, walked as WIRE_IPV6_PARSE_QUOTE, with the 8 bytes of TCP or UDP
 * header that carry the ports (and TCP's sequence number). Returns 0, -EMSGSIZE (too short for
 * them), -EPROTONOSUPPORT (neither TCP nor UDP, or a later fragment) or the walk's error. */
int wire_icmpv6__parse_quote(const struct wire_icmpv6_repr *r, struct wire_icmpv6_quote *q);
/* Writes the 8-byte header and the checksum over 8 + body_len bytes; the body must already be
 * at buf + 8. */
void wire_icmpv6__emit(const struct wire_icmpv6_repr *r, const struct wire_ipv6_addr *src,
                       const struct wire_ipv6_addr *dst, void *buf, size_t body_len);

#endif
