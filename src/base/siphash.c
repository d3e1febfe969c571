/* SipHash-2-4, written from the description in Aumasson and Bernstein, "SipHash: a fast
 * short-input PRF" (2012): the keyed hash behind TCP's ISNs, timestamp offsets, SYN cookies and
 * IPv6 address folds, and IPv6 flow labels. */
#include "base/siphash.h"

#include <stddef.h>

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

uint64_t slip_siphash(const uint64_t key[2], const void *data, size_t len)
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
