/* TCP header and options (RFC 9293 §3.1, RFC 7323, RFC 2018) view and builder. */
#ifndef SLIP_WIRE_TCP_H
#define SLIP_WIRE_TCP_H

#include "base/types.h"

#define WIRE_TCP_HLEN_MIN 20
#define WIRE_TCP_HLEN_MAX 60

#define WIRE_TCP_FIN 0x01
#define WIRE_TCP_SYN 0x02
#define WIRE_TCP_RST 0x04
#define WIRE_TCP_PSH 0x08
#define WIRE_TCP_ACK 0x10
#define WIRE_TCP_URG 0x20
#define WIRE_TCP_ECE 0x40
#define WIRE_TCP_CWR 0x80

#define WIRE_TCPOPT_EOL       0
#define WIRE_TCPOPT_NOP       1
#define WIRE_TCPOPT_MSS       2
#define WIRE_TCPOPT_WSCALE    3
#define WIRE_TCPOPT_SACK_OK   4
#define WIRE_TCPOPT_SACK      5
#define WIRE_TCPOPT_TIMESTAMP 8
#define WIRE_TCP_MAX_SACK     4

struct wire_tcp_hdr {
    be16 sport;
    be16 dport;
    be32 seq;
    be32 ack;
    uint8_t doff_res;           /* data offset in the high nibble */
    uint8_t flags;
    be16 window;
    be16 csum;
    be16 urg;
} __attribute__((packed));

struct wire_tcp_sack_block {
    uint32_t left, right;       /* host order */
};

struct wire_tcp_opts {
    bool has_mss, has_wscale, sack_ok, has_ts;
    uint16_t mss;
    uint8_t wscale;             /* as received; clamping to 14 (RFC 7323 §2.3) is the caller's */
    uint32_t tsval, tsecr;
    uint8_t nsack;
    struct wire_tcp_sack_block sack[WIRE_TCP_MAX_SACK];
};

struct wire_tcp_repr {
    uint16_t sport, dport;      /* host order */
    uint32_t seq, ack;          /* host order */
    uint8_t flags;
    uint16_t window;            /* unscaled, host order */
    uint16_t urg;
    uint16_t hdr_len;           /* bytes, options included */
    struct wire_tcp_opts opts;
};

/* Checks 20 <= data offset <= len and walks the options: an option whose length is < 2 or runs
 * past the header, or a known option with the wrong length, gives -EPROTO. Unknown options
 * are skipped. Returns 0, -EMSGSIZE, -EINVAL or -EPROTO. The checksum is not verified here. */
int wire_tcp__parse(const void *buf, size_t len, struct wire_tcp_repr *out);
bool wire_tcp__csum_ok(const void *buf, size_t tcp_len, be32 src, be32 dst);
/* Writes header and options (those flagged in r->opts, NOP-padded to 4 bytes) at buf; returns
 * the header length written (<= 60). The checksum field is left 0: call wire_tcp__set_csum once
 * the payload is in place. */
size_t wire_tcp__emit(const struct wire_tcp_repr *r, void *buf);
void wire_tcp__set_csum(void *buf, size_t tcp_len, be32 src, be32 dst);

#endif
