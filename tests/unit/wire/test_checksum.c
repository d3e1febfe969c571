/* Internet checksum tests: RFC 1071/1624 examples, and a plain 16-bit reference sum (written
 * here, independent of checksum.c) compared over many lengths, alignments and chunkings. */
#include "tests/unit/check.h"
#include "wire/checksum.h"

/* The straightforward RFC 1071 §4.1 loop on big-endian 16-bit words; returns the host-order
 * checksum (complement of the folded sum). */
static uint16_t ref_csum(const uint8_t *p, size_t len)
{
    uint64_t s = 0;
    for (size_t i = 0; i + 1 < len; i += 2)
        s += (uint32_t)p[i] << 8 | p[i + 1];
    if (len & 1)
        s += (uint32_t)p[len - 1] << 8;
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return (uint16_t)~s;
}

static uint32_t rng_state = 0x12345678;
static uint32_t rng(void)
{
    /* xorshift32: deterministic data, so a failure reproduces. */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

/* RFC 1071 §3 numerical example: bytes 00 01 f2 03 f4 f5 f6 f7 sum to 0xddf2, so the checksum is
 * 0x220d (checked with the python3 one-liner in tests/unit/wire/test_ipv4.c). Tried at every
 * alignment because UMEM frames start at arbitrary offsets. */
TEST(test_csum_rfc1071_example)
{
    static const uint8_t v[8] = { 0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7 };
    uint8_t buf[32];

    for (size_t off = 0; off < 16; off++) {
        memcpy(buf + off, v, sizeof(v));
        CHECK(ntoh16(wire_csum_fold(wire_csum_add(0, buf + off, sizeof(v)))), ==, 0x220d);
    }
    /* Stored as is, the field is 22 0d in memory whatever the host byte order. */
    be16 f = wire_csum_fold(wire_csum_add(0, v, sizeof(v)));
    uint8_t raw[2];
    memcpy(raw, &f, 2);
    CHECK(raw[0], ==, 0x22);
    CHECK(raw[1], ==, 0x0d);
}

TEST(test_csum_matches_reference_all_lengths_and_alignments)
{
    static uint8_t buf[2100];

    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)rng();
    for (size_t len = 0; len <= 1500; len += (len < 80 ? 1 : 37)) {
        for (size_t off = 0; off < 9; off++) {
            uint16_t got = ntoh16(wire_csum_fold(wire_csum_add(0, buf + off, len)));
            uint16_t want = ref_csum(buf + off, len);
            if (got != want) {
                fprintf(stderr, "len %zu off %zu\n", len, off);
                CHECK(got, ==, want);
                return;
            }
        }
    }
    CHECK(1, ==, 1);
}

/* Worst case for carries: all-ones data makes every addition carry. */
TEST(test_csum_all_ones_and_max_length)
{
    static uint8_t buf[65536 + 8];

    memset(buf, 0xff, sizeof(buf));
    CHECK(ntoh16(wire_csum_fold(wire_csum_add(0, buf, 2))), ==, 0x0000);
    CHECK(ntoh16(wire_csum_fold(wire_csum_add(0, buf + 1, 65535))), ==, ref_csum(buf + 1, 65535));
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)rng();
    CHECK(ntoh16(wire_csum_fold(wire_csum_add(0, buf + 3, 65535))), ==, ref_csum(buf + 3, 65535));
    /* An all-zero buffer sums to 0 and checksums to 0xffff. */
    memset(buf, 0, 64);
    CHECK(ntoh16(wire_csum_fold(wire_csum_add(0, buf, 64))), ==, 0xffff);
    CHECK(ntoh16(wire_csum_fold(wire_csum_add(0, buf, 0))), ==, 0xffff);
}

/* Headers and payload are summed in separate calls; any split at an even offset must agree
 * with one pass, whatever the running sum (including large, unfolded accumulators). */
TEST(test_csum_chunked_equals_one_pass)
{
    uint8_t buf[301];

    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)rng();
    uint16_t want = ref_csum(buf, sizeof(buf));
    for (size_t a = 0; a <= 120; a += 2) {
        for (size_t b = a; b <= 240; b += 26) {
            uint32_t s = wire_csum_add(0, buf, a);
            s = wire_csum_add(s, buf + a, b - a);
            s = wire_csum_add(s, buf + b, sizeof(buf) - b);
            if (ntoh16(wire_csum_fold(s)) != want) {
                fprintf(stderr, "split %zu %zu\n", a, b);
                CHECK(ntoh16(wire_csum_fold(s)), ==, want);
                return;
            }
        }
    }
    /* A saturated starting accumulator: 0xffffffff is 0xffff + 0xffff, i.e. two "-0" words,
     * which must not change the checksum. */
    CHECK(ntoh16(wire_csum_fold(wire_csum_add(0xffffffffu, buf, sizeof(buf)))), ==, want);
}

/* The pseudo-header sum must equal summing the 12-byte RFC 768 pseudo-header in memory. */
TEST(test_csum_pseudo4_matches_memory_layout)
{
    const uint8_t ph[12] = { 198, 18, 0, 1, 198, 18, 0, 2, 0, 17, 0x00, 0x0d };
    be32 src, dst;

    memcpy(&src, ph, 4);
    memcpy(&dst, ph + 4, 4);
    CHECK(wire_csum_fold(wire_csum_pseudo4(src, dst, 17, 13)), ==,
          wire_csum_fold(wire_csum_add(0, ph, sizeof(ph))));
    /* Saturated addresses exercise the carry out of 32 bits. */
    CHECK(ntoh16(wire_csum_fold(wire_csum_pseudo4(0xffffffffu, 0xffffffffu, 255, 65535))), ==,
          ref_csum((const uint8_t[12]){ 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 255, 0xff, 0xff }, 12));
}

/* The IPv6 pseudo-header (RFC 8200 §8.1: source, destination, 32-bit length, three zero bytes
 * and the next header) laid out in memory and summed by the reference loop must give what
 * wire_csum_pseudo6 gives: random addresses and lengths, and saturated ones for the carries. */
TEST(test_csum_pseudo6_matches_memory_layout)
{
    for (int k = 0; k < 2000; k++) {
        uint8_t ph[40];
        for (int i = 0; i < 32; i++)
            ph[i] = k == 0 ? 0xff : (uint8_t)rng();
        uint32_t len = k == 0 ? 0xffffffffu : rng() % 70000;
        uint8_t proto = k == 0 ? 255 : (uint8_t)rng();
        ph[32] = (uint8_t)(len >> 24), ph[33] = (uint8_t)(len >> 16), ph[34] = (uint8_t)(len >> 8);
        ph[35] = (uint8_t)len;
        ph[36] = ph[37] = ph[38] = 0;
        ph[39] = proto;
        uint16_t got = ntoh16(wire_csum_fold(wire_csum_pseudo6(ph, ph + 16, proto, len)));
        CHECK(got, ==, ref_csum(ph, sizeof(ph)));
        if (got != ref_csum(ph, sizeof(ph)))
            break;
    }
}

/* RFC 1624 §4 example: m = 0x5555 -> 0x3285 with the rest of the header summing to 0xcd7a,
 * so HC = ~(0xcd7a + 0x5555) = 0xdd2f and eqn. 3 gives 0x0000 (eqn. 2 would wrongly give
 * 0xffff). Arithmetic done by hand from the RFC text. */
TEST(test_csum_update16_rfc1624)
{
    CHECK(ntoh16(wire_csum_update16(hton16(0xdd2f), hton16(0x5555), hton16(0x3285))), ==, 0x0000);
}

/* TTL 64 -> 63 in the IPv4 header of test_ipv4.c's ipv4_udp vector: the new checksum 0x935e was
 * computed with the python3 one-liner over 450000211c4640003f110000c6120001c6120002. */
TEST(test_csum_update16_ttl_decrement)
{
    uint8_t h[20] = { 0x45, 0x00, 0x00, 0x21, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x11, 0x92, 0x5e,
                      0xc6, 0x12, 0x00, 0x01, 0xc6, 0x12, 0x00, 0x02 };
    be16 old_w, new_w, csum;

    memcpy(&old_w, h + 8, 2);
    memcpy(&csum, h + 10, 2);
    h[8] = 63;
    memcpy(&new_w, h + 8, 2);
    csum = wire_csum_update16(csum, old_w, new_w);
    CHECK(ntoh16(csum), ==, 0x935e);
    memcpy(h + 10, &csum, 2);
    CHECK(wire_csum_fold(wire_csum_add(0, h, 20)), ==, 0);

    /* Random fields and values: the update must agree with a full recomputation. */
    for (int i = 0; i < 1000; i++) {
        uint8_t b[20];
        for (int j = 0; j < 20; j++)
            b[j] = (uint8_t)rng();
        b[10] = b[11] = 0;
        be16 c = wire_csum_fold(wire_csum_add(0, b, 20));
        memcpy(b + 10, &c, 2);
        size_t at = (rng() % 9) * 2;        /* any 16-bit word but the checksum's (offset 10) */
        if (at >= 10)
            at += 2;
        be16 o, n = (be16)rng();
        memcpy(&o, b + at, 2);
        memcpy(b + at, &n, 2);
        c = wire_csum_update16(c, o, n);
        memcpy(b + 10, &c, 2);
        if (wire_csum_fold(wire_csum_add(0, b, 20)) != 0) {
            CHECK(ntoh16(wire_csum_fold(wire_csum_add(0, b, 20))), ==, 0);
            return;
        }
    }
    CHECK(1, ==, 1);
}

TEST_MAIN()
