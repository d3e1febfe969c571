/* TCP header (RFC 9293 §3.1) and the options the stack uses: MSS, window scale and timestamps
 * (RFC 7323), SACK-permitted and SACK blocks (RFC 2018). Parsing walks the options once;
 * emitting lays them out 4-byte aligned, the way Linux does, so peers' fast paths match. */
#include <errno.h>
#include <string.h>

#include "wire/checksum.h"
#include "wire/ipv4.h"
#include "wire/tcp.h"
#include "wire/tlv.h"

#define TCPOLEN_MSS       4
#define TCPOLEN_WSCALE    3
#define TCPOLEN_SACK_OK   2
#define TCPOLEN_TIMESTAMP 10
#define TCPOLEN_SACK_BASE 2
#define TCPOLEN_SACK_PERBLOCK 8
#define TCP_OPT_SPACE (WIRE_TCP_HLEN_MAX - WIRE_TCP_HLEN_MIN)

static uint16_t get16(const uint8_t *p)
{
    be16 v;
    memcpy(&v, p, 2);
    return ntoh16(v);
}

static uint32_t get32(const uint8_t *p)
{
    be32 v;
    memcpy(&v, p, 4);
    return ntoh32(v);
}

static void put16(uint8_t *p, uint16_t v)
{
    be16 b = hton16(v);
    memcpy(p, &b, 2);
}

static void put32(uint8_t *p, uint32_t v)
{
    be32 b = hton32(v);
    memcpy(p, &b, 4);
}

/* RFC 9293 §3.2: EOL ends the list, NOP is one octet, every other option is kind, length
 * (counting both octets), data. Unknown kinds are skipped by their length (RFC 9293 §3.1
 * "must be prepared to handle an illegal option length"; RFC 1122 §4.2.2.5). */
static int tcp_parse_options(const uint8_t *opt, size_t len, struct wire_tcp_opts *o)
{
    struct wire_tlv t;
    size_t i = 0;
    int rc;

    while ((rc = wire_tlv__next(opt, len, &i, &t)) > 0) {
        const uint8_t *d = t.data;
        uint8_t olen = t.len;
        switch (t.kind) {
        case WIRE_TCPOPT_MSS:
            if (olen != TCPOLEN_MSS)
                return -EPROTO;
            o->has_mss = true;
            o->mss = get16(d);
            break;
        case WIRE_TCPOPT_WSCALE:
            if (olen != TCPOLEN_WSCALE)
                return -EPROTO;
            o->has_wscale = true;
            o->wscale = d[0];
            break;
        case WIRE_TCPOPT_SACK_OK:
            if (olen != TCPOLEN_SACK_OK)
                return -EPROTO;
            o->sack_ok = true;
            break;
        case WIRE_TCPOPT_TIMESTAMP:
            if (olen != TCPOLEN_TIMESTAMP)
                return -EPROTO;
            o->has_ts = true;
            o->tsval = get32(d);
            o->tsecr = get32(d + 4);
            break;
        case WIRE_TCPOPT_SACK: {
            /* RFC 2018 §3: length 2 + 8n, n >= 1; at most 4 blocks fit in 40 bytes. */
            unsigned n = (unsigned)(olen - TCPOLEN_SACK_BASE) / TCPOLEN_SACK_PERBLOCK;
            if (olen < TCPOLEN_SACK_BASE + TCPOLEN_SACK_PERBLOCK ||
                (olen - TCPOLEN_SACK_BASE) % TCPOLEN_SACK_PERBLOCK != 0 || n > WIRE_TCP_MAX_SACK)
                return -EPROTO;
            o->nsack = (uint8_t)n;
            for (unsigned b = 0; b < n; b++) {
                o->sack[b].left = get32(d + b * 8);
                o->sack[b].right = get32(d + b * 8 + 4);
            }
            break;
        }
        default:
            break;
        }
    }
    return rc;
}

int wire_tcp__parse(const void *buf, size_t len, struct wire_tcp_repr *out)
{
    const uint8_t *p = buf;
    uint16_t hdr_len;

    if (SLIP_UNLIKELY(len < WIRE_TCP_HLEN_MIN))
        return -EMSGSIZE;
    hdr_len = (uint16_t)((p[12] >> 4) * 4);
    if (SLIP_UNLIKELY(hdr_len < WIRE_TCP_HLEN_MIN))
        return -EINVAL;
    if (SLIP_UNLIKELY(hdr_len > len))
        return -EMSGSIZE;

    memset(&out->opts, 0, sizeof(out->opts));
    if (hdr_len > WIRE_TCP_HLEN_MIN) {
        int err = tcp_parse_options(p + WIRE_TCP_HLEN_MIN, hdr_len - WIRE_TCP_HLEN_MIN, &out->opts);
        if (err)
            return err;
    }
    out->sport = get16(p);
    out->dport = get16(p + 2);
    out->seq = get32(p + 4);
    out->ack = get32(p + 8);
    out->flags = p[13];
    out->window = get16(p + 14);
    out->urg = get16(p + 18);
    out->hdr_len = hdr_len;
    return 0;
}

bool wire_tcp__csum_ok(const void *buf, size_t tcp_len, be32 src, be32 dst)
{
    if (tcp_len > UINT16_MAX)
        return false;
    uint32_t sum = wire_csum_pseudo4(src, dst, WIRE_IPPROTO_TCP, (uint16_t)tcp_len);
    return wire_csum_fold(wire_csum_add(sum, buf, tcp_len)) == 0;
}

/* Writes the options of o at p and returns their length (a multiple of 4, <= 40). SACK blocks
 * that do not fit in what is left are dropped from the end (the first block is the most recent,
 * RFC 2018 §4). */
static size_t tcp_emit_options(const struct wire_tcp_opts *o, uint8_t *p)
{
    size_t n = 0;

    if (o->has_mss) {
        p[n++] = WIRE_TCPOPT_MSS;
        p[n++] = TCPOLEN_MSS;
        put16(p + n, o->mss);
        n += 2;
    }
    /* SACK-permitted fills the two octets before the timestamp that would otherwise be NOPs. */
    if (o->sack_ok && o->has_ts) {
        p[n++] = WIRE_TCPOPT_SACK_OK;
        p[n++] = TCPOLEN_SACK_OK;
    } else if (o->sack_ok) {
        p[n++] = WIRE_TCPOPT_NOP;
        p[n++] = WIRE_TCPOPT_NOP;
        p[n++] = WIRE_TCPOPT_SACK_OK;
        p[n++] = TCPOLEN_SACK_OK;
    } else if (o->has_ts) {
        p[n++] = WIRE_TCPOPT_NOP;
        p[n++] = WIRE_TCPOPT_NOP;
    }
    if (o->has_ts) {
        p[n++] = WIRE_TCPOPT_TIMESTAMP;
        p[n++] = TCPOLEN_TIMESTAMP;
        put32(p + n, o->tsval);
        put32(p + n + 4, o->tsecr);
        n += 8;
    }
    if (o->has_wscale) {
        p[n++] = WIRE_TCPOPT_NOP;
        p[n++] = WIRE_TCPOPT_WSCALE;
        p[n++] = TCPOLEN_WSCALE;
        p[n++] = o->wscale;
    }
    size_t nsack = SLIP_MIN((size_t)o->nsack, (size_t)WIRE_TCP_MAX_SACK);
    if (nsack && n + 4 + TCPOLEN_SACK_PERBLOCK <= TCP_OPT_SPACE) {
        nsack = SLIP_MIN(nsack, (TCP_OPT_SPACE - n - 4) / TCPOLEN_SACK_PERBLOCK);
        p[n++] = WIRE_TCPOPT_NOP;
        p[n++] = WIRE_TCPOPT_NOP;
        p[n++] = WIRE_TCPOPT_SACK;
        p[n++] = (uint8_t)(TCPOLEN_SACK_BASE + nsack * TCPOLEN_SACK_PERBLOCK);
        for (size_t b = 0; b < nsack; b++) {
            put32(p + n, o->sack[b].left);
            put32(p + n + 4, o->sack[b].right);
            n += 8;
        }
    }
    return n;
}

size_t wire_tcp__emit(const struct wire_tcp_repr *r, void *buf)
{
    uint8_t *p = buf;
    size_t hdr_len = WIRE_TCP_HLEN_MIN + tcp_emit_options(&r->opts, p + WIRE_TCP_HLEN_MIN);

    put16(p, r->sport);
    put16(p + 2, r->dport);
    put32(p + 4, r->seq);
    put32(p + 8, r->ack);
    p[12] = (uint8_t)((hdr_len / 4) << 4);
    p[13] = r->flags;
    put16(p + 14, r->window);
    put16(p + 16, 0);
    put16(p + 18, r->urg);
    return hdr_len;
}

void wire_tcp__set_csum(void *buf, size_t tcp_len, be32 src, be32 dst)
{
    uint8_t *csum_p = (uint8_t *)buf + offsetof(struct wire_tcp_hdr, csum);
    be16 csum = 0;
    uint32_t sum;

    memcpy(csum_p, &csum, 2);
    sum = wire_csum_pseudo4(src, dst, WIRE_IPPROTO_TCP, (uint16_t)tcp_len);
    csum = wire_csum_fold(wire_csum_add(sum, buf, tcp_len));
    memcpy(csum_p, &csum, 2);
}
