/* UDP view: decode, encode, length checks, pseudo-header checksum, checksum 0 ("none") on
 * receive and the 0 -> 0xffff rule on transmit.
 *
 * Checksums were computed independently with the python3 one-liner quoted at the top of
 * tests/unit/wire/test_ipv4.c ("csum HEX"), over the RFC 768 pseudo-header (src, dst, 00,
 * proto 17, length) followed by the datagram with its checksum field as 0000.
 */
#include <errno.h>

#include "tests/unit/check.h"
#include "wire/udp.h"

#define SRC 0xc6120001u         /* 198.18.0.1 */
#define DST 0xc6120002u         /* 198.18.0.2 */

/* 12345 -> 53, payload "hello" (odd length); the UDP part of test_ipv4.c's ipv4_udp.
 * csum c6120001c6120002 0011 000d 3039 0035 000d 0000 68656c6c6f = 0xff6b. */
static const uint8_t udp_hello[13] = {
    0x30, 0x39, 0x00, 0x35, 0x00, 0x0d, 0xff, 0x6b, 0x68, 0x65, 0x6c, 0x6c, 0x6f,
};

/* 1000 -> 2000 with a 2-byte payload chosen so the checksum computes to 0:
 * csum c6120001c6120002 0011 000a 03e8 07d0 000a 0000 67fa = 0x0 (payload found by solving
 * for the missing word in python3), so RFC 768 sends it as 0xffff. */
static const uint8_t udp_zero_sum[10] = {
    0x03, 0xe8, 0x07, 0xd0, 0x00, 0x0a, 0xff, 0xff, 0x67, 0xfa,
};

static uint8_t work[128];

TEST(test_udp_decode)
{
    struct wire_udp_repr r;

    memcpy(work + 1, udp_hello, sizeof(udp_hello));
    CHECK(wire_udp__parse(work + 1, sizeof(udp_hello), &r), ==, 0);
    CHECK(r.sport, ==, 12345);
    CHECK(r.dport, ==, 53);
    CHECK(r.len, ==, 13);
    CHECK(ntoh16(r.csum), ==, 0xff6b);
    CHECK(wire_udp__csum_ok(work + 1, r.len, hton32(SRC), hton32(DST)), ==, true);
    /* Bytes after the UDP length (IP padding) are allowed and not summed. */
    work[1 + 13] = 0xaa;
    CHECK(wire_udp__parse(work + 1, 14, &r), ==, 0);
    CHECK(r.len, ==, 13);
}

TEST(test_udp_truncated_and_impossible_lengths)
{
    struct wire_udp_repr r;
    uint8_t v[sizeof(udp_hello)];

    for (size_t len = 0; len < WIRE_UDP_HLEN; len++)
        CHECK(wire_udp__parse(udp_hello, len, &r), ==, -EMSGSIZE);
    for (size_t len = WIRE_UDP_HLEN; len < sizeof(udp_hello); len++)
        CHECK(wire_udp__parse(udp_hello, len, &r), ==, -EMSGSIZE);
    memcpy(v, udp_hello, sizeof(v));
    v[5] = 7;                   /* length field below the header size */
    CHECK(wire_udp__parse(v, sizeof(v), &r), ==, -EINVAL);
    v[5] = 0;
    CHECK(wire_udp__parse(v, sizeof(v), &r), ==, -EINVAL);
    v[5] = 8;                   /* header only is fine */
    CHECK(wire_udp__parse(v, sizeof(v), &r), ==, 0);
    CHECK(r.len, ==, 8);
}

TEST(test_udp_bad_checksum)
{
    uint8_t v[sizeof(udp_hello)];

    memcpy(v, udp_hello, sizeof(v));
    v[12] ^= 0x01;              /* last (odd) payload byte */
    CHECK(wire_udp__csum_ok(v, sizeof(v), hton32(SRC), hton32(DST)), ==, false);
    /* Right bytes, wrong pseudo-header. */
    CHECK(wire_udp__csum_ok(udp_hello, sizeof(udp_hello), hton32(SRC), hton32(DST + 1)), ==, false);
    CHECK(wire_udp__csum_ok(udp_hello, sizeof(udp_hello), hton32(DST), hton32(SRC)), ==, true);
    CHECK(wire_udp__csum_ok(udp_hello, sizeof(udp_hello) - 1, hton32(SRC), hton32(DST)), ==, false);
}

/* RFC 768: a zero checksum field means "none", accepted whatever the data. */
TEST(test_udp_checksum_zero_means_none)
{
    uint8_t v[sizeof(udp_hello)];

    memcpy(v, udp_hello, sizeof(v));
    v[6] = v[7] = 0;
    v[9] ^= 0x55;
    CHECK(wire_udp__csum_ok(v, sizeof(v), hton32(SRC), hton32(DST)), ==, true);
}

TEST(test_udp_zero_sum_sent_as_ffff)
{
    struct wire_udp_repr r = { .sport = 1000, .dport = 2000, .len = 10 };
    uint8_t buf[16];

    memset(buf, 0x5a, sizeof(buf));
    memcpy(buf + 8, udp_zero_sum + 8, 2);
    wire_udp__emit(&r, buf, hton32(SRC), hton32(DST));
    CHECK_MEM(buf, udp_zero_sum, sizeof(udp_zero_sum));
    /* 0xffff is the other ones-complement zero and verifies. */
    CHECK(wire_udp__csum_ok(udp_zero_sum, sizeof(udp_zero_sum), hton32(SRC), hton32(DST)), ==, true);
}

TEST(test_udp_encode_matches_vector)
{
    struct wire_udp_repr r = { .sport = 12345, .dport = 53, .len = 13, .csum = 0x1234 };
    uint8_t buf[32];

    /* r.csum is ignored: emit always computes the checksum. */
    memcpy(buf + 3 + 8, "hello", 5);
    wire_udp__emit(&r, buf + 3, hton32(SRC), hton32(DST));
    CHECK_MEM(buf + 3, udp_hello, sizeof(udp_hello));
}

TEST(test_udp_round_trip)
{
    uint32_t x = 12345;
    uint8_t buf[80];

    for (int i = 0; i < 1000; i++) {
        x = x * 1103515245u + 12345u;
        struct wire_udp_repr r = { .sport = (uint16_t)x, .dport = (uint16_t)(x >> 16),
                                   .len = (uint16_t)(8 + (x >> 8) % 64) }, back;
        for (size_t j = 8; j < sizeof(buf); j++)
            buf[j] = (uint8_t)(x >> (j % 24));
        wire_udp__emit(&r, buf + 1, hton32(x), hton32(~x));
        CHECK(wire_udp__parse(buf + 1, r.len, &back), ==, 0);
        CHECK(back.sport, ==, r.sport);
        CHECK(back.dport, ==, r.dport);
        CHECK(back.len, ==, r.len);
        CHECK(back.csum, !=, 0);
        CHECK(wire_udp__csum_ok(buf + 1, r.len, hton32(x), hton32(~x)), ==, true);
    }
}

TEST_MAIN()
