/* Internet checksum (RFC 1071): a ones-complement sum over raw memory with a 64-bit accumulator.
 * The sum is byte-order independent (RFC 1071 §2(B)), so we add native-order words and the folded
 * result can be stored into a header field without swapping. */
#include <string.h>

#include "wire/checksum.h"

/* Ones-complement 64-bit add: the carry out of bit 63 wraps around to bit 0 (RFC 1071 §2(C)). */
static inline uint64_t csum_add64(uint64_t acc, uint64_t v)
{
    acc += v;
    return acc + (acc < v);
}

/* Folds 64 -> 32 bits keeping the ones-complement value. */
static inline uint32_t csum_fold64(uint64_t acc)
{
    acc = (acc & 0xffffffffu) + (acc >> 32);
    acc = (acc & 0xffffffffu) + (acc >> 32);
    return (uint32_t)acc;
}

uint32_t wire_csum_add(uint32_t sum, const void *data, size_t len)
{
    const uint8_t *p = data;
    uint64_t acc = sum;
    uint64_t w0, w1, w2, w3;

    /* Loads go through memcpy: frames in UMEM and test buffers are not aligned. */
    while (len >= 32) {
        memcpy(&w0, p, 8);
        memcpy(&w1, p + 8, 8);
        memcpy(&w2, p + 16, 8);
        memcpy(&w3, p + 24, 8);
        acc = csum_add64(acc, w0);
        acc = csum_add64(acc, w1);
        acc = csum_add64(acc, w2);
        acc = csum_add64(acc, w3);
        p += 32;
        len -= 32;
    }
    while (len >= 8) {
        memcpy(&w0, p, 8);
        acc = csum_add64(acc, w0);
        p += 8;
        len -= 8;
    }
    if (len >= 4) {
        uint32_t v;
        memcpy(&v, p, 4);
        acc = csum_add64(acc, v);
        p += 4;
        len -= 4;
    }
    if (len >= 2) {
        uint16_t v;
        memcpy(&v, p, 2);
        acc = csum_add64(acc, v);
        p += 2;
        len -= 2;
    }
    if (len) {
        /* RFC 1071 §4.1: an odd last byte is padded with a zero byte to form a 16-bit word. */
        uint8_t pad[2] = { p[0], 0 };
        uint16_t v;
        memcpy(&v, pad, 2);
        acc = csum_add64(acc, v);
    }
    return csum_fold64(acc);
}

be16 wire_csum_fold(uint32_t sum)
{
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return (be16)~sum;
}

uint32_t wire_csum_pseudo4(be32 src, be32 dst, uint8_t proto, uint16_t l4_len)
{
    /* src, dst and the two be16 words are already in memory order, like the rest of the sum. */
    uint64_t acc = (uint64_t)src + dst + hton16(proto) + hton16(l4_len);
    return csum_fold64(acc);
}

uint32_t wire_csum_pseudo6(const void *src, const void *dst, uint8_t proto, uint32_t l4_len)
{
    /* RFC 8200 §8.1: the 32-bit upper-layer length and the next header in a 32-bit word, both
     * in network order; added as memory like the addresses. */
    uint64_t a[4];
    memcpy(&a[0], src, 16);
    memcpy(&a[2], dst, 16);
    uint64_t acc = (uint64_t)hton32(l4_len) + hton32(proto);     /* below 2^33: no carry */
    for (unsigned i = 0; i < 4; i++)
        acc = csum_add64(acc, a[i]);
    return csum_fold64(acc);
}

be16 wire_csum_update16(be16 csum, be16 old_v, be16 new_v)
{
    /* RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'); unlike eqn. 2 it cannot produce -0 wrongly. */
    uint32_t sum = (uint16_t)~csum + (uint32_t)(uint16_t)~old_v + new_v;
    return wire_csum_fold(sum);
}
