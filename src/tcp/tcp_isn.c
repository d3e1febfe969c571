/* Initial sequence numbers (RFC 6528) and timestamp offsets (RFC 7323 §5.4) from a keyed hash
 * of the 4-tuple. The hash is SipHash-2-4, written from the description in Aumasson and
 * Bernstein, "SipHash: a fast short-input PRF" (2012). */
#include <string.h>

#include "tcp/tcp_var.h"

static inline uint64_t rotl(uint64_t x, unsigned b) { return (x << b) | (x >> (64 - b)); }

#define SIPROUND()                                                            \
    do {                                                                      \
        v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);             \
        v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;                                \
        v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;                                \
        v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);             \
    } while (0)

static uint64_t load_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

uint64_t tcp_siphash(const uint64_t key[2], const void *data, size_t len)
{
    const uint8_t *p = data;
    uint64_t v0 = key[0] ^ 0x736f6d6570736575ull;
    uint64_t v1 = key[1] ^ 0x646f72616e646f6dull;
    uint64_t v2 = key[0] ^ 0x6c7967656e657261ull;
    uint64_t v3 = key[1] ^ 0x7465646279746573ull;
    size_t words = len / 8;

    /* Compression: two rounds per 64-bit little-endian word. */
    for (size_t i = 0; i < words; i++) {
        uint64_t m = load_le64(p + 8 * i);
        v3 ^= m;
        SIPROUND();
        SIPROUND();
        v0 ^= m;
    }
    /* Last word: the remaining bytes, with the length modulo 256 in the top byte. */
    uint64_t b = (uint64_t)(len & 0xff) << 56;
    const uint8_t *tail = p + 8 * words;
    for (size_t i = 0; i < (len & 7); i++)
        b |= (uint64_t)tail[i] << (8 * i);
    v3 ^= b;
    SIPROUND();
    SIPROUND();
    v0 ^= b;
    /* Finalisation: four rounds. */
    v2 ^= 0xff;
    SIPROUND();
    SIPROUND();
    SIPROUND();
    SIPROUND();
    return v0 ^ v1 ^ v2 ^ v3;
}

static uint32_t tuple_hash(const uint64_t key[2], be32 laddr, uint16_t lport, be32 raddr, uint16_t rport,
                           uint32_t salt)
{
    uint8_t buf[16];
    memcpy(buf, &laddr, 4);
    memcpy(buf + 4, &raddr, 4);
    memcpy(buf + 8, &lport, 2);
    memcpy(buf + 10, &rport, 2);
    memcpy(buf + 12, &salt, 4);
    return (uint32_t)tcp_siphash(key, buf, sizeof(buf));
}

/* RFC 6528 §3: M is a timer ticking every 4 microseconds; F a keyed hash of the 4-tuple, so
 * ISNs of one tuple increase with time while other tuples' ISNs are unpredictable. */
uint32_t tcp_isn(const struct tcp_shared *sh, be32 laddr, uint16_t lport, be32 raddr, uint16_t rport,
                 slip_time_t now)
{
    uint32_t m = (uint32_t)(now / (4 * SLIP_USEC));
    return m + tuple_hash(sh->key, laddr, lport, raddr, rport, 0);
}

uint32_t tcp_ts_offset(const struct tcp_shared *sh, be32 laddr, uint16_t lport, be32 raddr, uint16_t rport)
{
    return tuple_hash(sh->key, laddr, lport, raddr, rport, 0x7473u);
}
