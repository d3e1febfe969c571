/* IPv4 header view: decode, encode, truncation, impossible fields, checksum, options and
 * fragment fields, on hand-written vectors.
 *
 * Every checksum below was computed independently of checksum.c with this python3 one-liner
 * ("csum HEX" below), run over the header with its checksum field set to 0000:
 *   python3 -c "import sys;b=bytes.fromhex(sys.argv[1]);b+=b'\0'*(len(b)%2);s=sum(int.from_bytes(b[i:i+2],'big') for i in range(0,len(b),2));s=(s&0xffff)+(s>>16);s=(s&0xffff)+(s>>16);print(hex(~s&0xffff))" HEX
 */
#include <errno.h>

#include "tests/unit/check.h"
#include "wire/checksum.h"
#include "wire/ipv4.h"

/* UDP datagram 198.18.0.1:12345 -> 198.18.0.2:53, payload "hello" (odd length on purpose),
 * DF set, TTL 64, id 0x1c46. Header written by hand from RFC 791 §3.1 figure 4;
 * csum 450000211c4640004011 0000 c6120001c6120002 = 0x925e. (UDP part: see test_udp.c.) */
static const uint8_t ipv4_udp[33] = {
    0x45, 0x00, 0x00, 0x21, 0x1c, 0x46, 0x40, 0x00,
    0x40, 0x11, 0x92, 0x5e, 0xc6, 0x12, 0x00, 0x01,
    0xc6, 0x12, 0x00, 0x02, 0x30, 0x39, 0x00, 0x35,
    0x00, 0x0d, 0xff, 0x6b, 0x68, 0x65, 0x6c, 0x6c,
    0x6f,
};

/* IHL 7: loose source route (type 131, len 7, pointer 4, hop 198.18.0.3) then EOL, from RFC 791
 * "Loose Source and Record Route"; no payload (total length 28).
 * csum 4700001c1c4640004011 0000 c6120001c6120002 830704c612000300 = 0xf395. */
static const uint8_t ipv4_lsrr[28] = {
    0x47, 0x00, 0x00, 0x1c, 0x1c, 0x46, 0x40, 0x00,
    0x40, 0x11, 0xf3, 0x95, 0xc6, 0x12, 0x00, 0x01,
    0xc6, 0x12, 0x00, 0x02, 0x83, 0x07, 0x04, 0xc6,
    0x12, 0x00, 0x03, 0x00,
};

/* IHL 6 with a timestamp option (type 0x44) whose length octet is 1: malformed, but with a
 * correct checksum so the option walk, not the checksum, must reject it.
 * csum 460000181c4640004011 0000 c6120001c6120002 44010000 = 0x4d66. */
static const uint8_t ipv4_badopt[24] = {
    0x46, 0x00, 0x00, 0x18, 0x1c, 0x46, 0x40, 0x00,
    0x40, 0x11, 0x4d, 0x66, 0xc6, 0x12, 0x00, 0x01,
    0xc6, 0x12, 0x00, 0x02, 0x44, 0x01, 0x00, 0x00,
};

/* First fragment: MF set, offset 0, id 0x4242, 8 zero payload bytes.
 * csum 4500001c42422000 4011 0000 c6120001c6120002 = 0x8c67. */
static const uint8_t ipv4_frag_mf[28] = {
    0x45, 0x00, 0x00, 0x1c, 0x42, 0x42, 0x20, 0x00,
    0x40, 0x11, 0x8c, 0x67, 0xc6, 0x12, 0x00, 0x01,
    0xc6, 0x12, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00,
};

/* Last fragment: MF clear, offset field 0x00b9 = 185 * 8 = 1480 bytes.
 * csum 4500001c424200b9 4011 0000 c6120001c6120002 = 0xabae. */
static const uint8_t ipv4_frag_last[28] = {
    0x45, 0x00, 0x00, 0x1c, 0x42, 0x42, 0x00, 0xb9,
    0x40, 0x11, 0xab, 0xae, 0xc6, 0x12, 0x00, 0x01,
    0xc6, 0x12, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00,
};

/* Largest offset (8191 * 8 = 65528) with 7 payload bytes: ends exactly at 65535, legal.
 * csum 4500001b42421fff 4011 0000 c6120001c6120002 = 0x8c69. */
static const uint8_t ipv4_frag_edge[27] = {
    0x45, 0x00, 0x00, 0x1b, 0x42, 0x42, 0x1f, 0xff,
    0x40, 0x11, 0x8c, 0x69, 0xc6, 0x12, 0x00, 0x01,
    0xc6, 0x12, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00,
};

/* Same offset with 8 payload bytes: would end at 65536, the "ping of death" shape.
 * csum 4500001c42421fff 4011 0000 c6120001c6120002 = 0x8c68. */
static const uint8_t ipv4_frag_over[28] = {
    0x45, 0x00, 0x00, 0x1c, 0x42, 0x42, 0x1f, 0xff,
    0x40, 0x11, 0x8c, 0x68, 0xc6, 0x12, 0x00, 0x01,
    0xc6, 0x12, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00,
};

static uint8_t work[128];

/* Copies a vector to an odd address (frames are not aligned in UMEM) and parses it. */
static int parse_at1(const uint8_t *v, size_t len, struct wire_ipv4_repr *r, unsigned flags)
{
    memcpy(work + 1, v, len);
    return wire_ipv4__parse(work + 1, len, r, flags);
}

TEST(test_ipv4_decode)
{
    struct wire_ipv4_repr r;

    CHECK(parse_at1(ipv4_udp, sizeof(ipv4_udp), &r, 0), ==, 0);
    CHECK(ntoh32(r.src), ==, 0xc6120001);
    CHECK(ntoh32(r.dst), ==, 0xc6120002);
    CHECK(r.proto, ==, WIRE_IPPROTO_UDP);
    CHECK(r.ttl, ==, 64);
    CHECK(r.tos, ==, 0);
    CHECK(r.id, ==, 0x1c46);
    CHECK(r.hdr_len, ==, 20);
    CHECK(r.total_len, ==, 33);
    CHECK(r.dont_frag, ==, true);
    CHECK(r.more_frags, ==, false);
    CHECK(r.frag_offset, ==, 0);
    CHECK(r.source_route, ==, false);
    CHECK(wire_ipv4__is_fragment(&r), ==, false);
}

/* Ethernet pads short frames to 60 bytes: bytes beyond total length are not an error. */
TEST(test_ipv4_trailing_padding_allowed)
{
    struct wire_ipv4_repr r;
    uint8_t frame[46] = { 0 };

    memcpy(frame, ipv4_udp, sizeof(ipv4_udp));
    CHECK(wire_ipv4__parse(frame, sizeof(frame), &r, 0), ==, 0);
    CHECK(r.total_len, ==, 33);
}

TEST(test_ipv4_truncated)
{
    struct wire_ipv4_repr r;

    for (size_t len = 0; len < sizeof(ipv4_udp); len++)
        CHECK(parse_at1(ipv4_udp, len, &r, 0), ==, -EMSGSIZE);
    /* IHL says 28 bytes of header but only 24 are there. */
    CHECK(parse_at1(ipv4_lsrr, 24, &r, 0), ==, -EMSGSIZE);
}

/* Impossible fields, each changed by hand in a copy of ipv4_udp; these checks come before the
 * checksum, so the stale checksum does not matter. */
TEST(test_ipv4_impossible_fields)
{
    struct wire_ipv4_repr r;
    uint8_t v[sizeof(ipv4_udp)];

    memcpy(v, ipv4_udp, sizeof(v));
    v[0] = 0x65;                        /* version 6 */
    CHECK(wire_ipv4__parse(v, sizeof(v), &r, 0), ==, -EINVAL);
    v[0] = 0x44;                        /* IHL 4: header shorter than the fixed part */
    CHECK(wire_ipv4__parse(v, sizeof(v), &r, 0), ==, -EINVAL);
    v[0] = 0x40;                        /* IHL 0 */
    CHECK(wire_ipv4__parse(v, sizeof(v), &r, 0), ==, -EINVAL);
    v[0] = 0x45;
    v[2] = 0x00, v[3] = 19;             /* total length below the header length */
    CHECK(wire_ipv4__parse(v, sizeof(v), &r, 0), ==, -EINVAL);
    v[3] = 0;                           /* total length 0 (TSO-style) is not accepted */
    CHECK(wire_ipv4__parse(v, sizeof(v), &r, 0), ==, -EINVAL);
    v[2] = 0xff, v[3] = 0xff;           /* 65535 > 33 bytes present */
    CHECK(wire_ipv4__parse(v, sizeof(v), &r, 0), ==, -EMSGSIZE);
    memcpy(v, ipv4_udp, sizeof(v));
    v[0] = 0x4f;                        /* IHL 15 = 60 bytes > 33 present */
    CHECK(wire_ipv4__parse(v, sizeof(v), &r, 0), ==, -EMSGSIZE);
}

TEST(test_ipv4_bad_checksum)
{
    struct wire_ipv4_repr r;
    uint8_t v[sizeof(ipv4_udp)];

    memcpy(v, ipv4_udp, sizeof(v));
    v[11] ^= 0x01;                      /* checksum field off by one bit */
    CHECK(wire_ipv4__parse(v, sizeof(v), &r, 0), ==, -EBADMSG);
    CHECK(wire_ipv4__parse(v, sizeof(v), &r, WIRE_PARSE_NO_CSUM), ==, 0);
    memcpy(v, ipv4_udp, sizeof(v));
    v[15] ^= 0x80;                      /* source address corrupted */
    CHECK(wire_ipv4__parse(v, sizeof(v), &r, 0), ==, -EBADMSG);
    memcpy(v, ipv4_udp, sizeof(v));
    v[30] ^= 0xff;                      /* payload is not covered by the header checksum */
    CHECK(wire_ipv4__parse(v, sizeof(v), &r, 0), ==, 0);
    /* The -0 form: 0xffff and 0x0000 differ, only the one the sum gives is valid; here the
     * field 0x925e with bits flipped to 0x0000 must fail. */
    memcpy(v, ipv4_udp, sizeof(v));
    v[10] = v[11] = 0;
    CHECK(wire_ipv4__parse(v, sizeof(v), &r, 0), ==, -EBADMSG);
}

TEST(test_ipv4_options_source_route)
{
    struct wire_ipv4_repr r;

    CHECK(parse_at1(ipv4_lsrr, sizeof(ipv4_lsrr), &r, 0), ==, 0);
    CHECK(r.hdr_len, ==, 28);
    CHECK(r.total_len, ==, 28);
    CHECK(r.source_route, ==, true);

    /* SSRR (137) is a source route too; checksum skipped since the type byte changed. */
    uint8_t v[sizeof(ipv4_lsrr)];
    memcpy(v, ipv4_lsrr, sizeof(v));
    v[20] = 137;
    CHECK(wire_ipv4__parse(v, sizeof(v), &r, WIRE_PARSE_NO_CSUM), ==, 0);
    CHECK(r.source_route, ==, true);
    /* Record route (7) is not. */
    v[20] = 7;
    CHECK(wire_ipv4__parse(v, sizeof(v), &r, WIRE_PARSE_NO_CSUM), ==, 0);
    CHECK(r.source_route, ==, false);
}

TEST(test_ipv4_malformed_options)
{
    struct wire_ipv4_repr r;

    /* Option length 1 with a valid header checksum. */
    CHECK(parse_at1(ipv4_badopt, sizeof(ipv4_badopt), &r, 0), ==, -EPROTO);

    /* The 8 option bytes of ipv4_lsrr replaced by hand; checksum not checked. */
    static const struct { uint8_t opt[8]; int want; const char *what; } cases[] = {
        { { 0x44, 0x00, 0, 0, 0, 0, 0, 0 }, -EPROTO, "length 0" },
        { { 0x44, 0x01, 0, 0, 0, 0, 0, 0 }, -EPROTO, "length 1" },
        { { 0x44, 0x09, 0, 0, 0, 0, 0, 0 }, -EPROTO, "length 9 runs past the header" },
        { { 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x44 }, -EPROTO, "type octet without length at the end" },
        { { 0x83, 0x02, 0x01, 0x01, 0, 0, 0, 0 }, -EPROTO, "LSRR without its pointer octet" },
        { { 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01 }, 0, "all NOP" },
        { { 0x00, 0x44, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff }, 0, "EOL then garbage padding" },
        { { 0x44, 0x08, 0x05, 0x00, 0, 0, 0, 0 }, 0, "timestamp filling the area exactly" },
        { { 0x94, 0x04, 0x00, 0x00, 0x01, 0x00, 0, 0 }, 0, "router alert, NOP, EOL" },
    };
    for (size_t i = 0; i < SLIP_ARRAY_SIZE(cases); i++) {
        uint8_t v[sizeof(ipv4_lsrr)];
        memcpy(v, ipv4_lsrr, sizeof(v));
        memcpy(v + 20, cases[i].opt, 8);
        int got = wire_ipv4__parse(v, sizeof(v), &r, WIRE_PARSE_NO_CSUM);
        if (got != cases[i].want)
            fprintf(stderr, "case: %s\n", cases[i].what);
        CHECK(got, ==, cases[i].want);
    }
}

TEST(test_ipv4_fragment_fields)
{
    struct wire_ipv4_repr r;

    CHECK(parse_at1(ipv4_frag_mf, sizeof(ipv4_frag_mf), &r, 0), ==, 0);
    CHECK(r.more_frags, ==, true);
    CHECK(r.dont_frag, ==, false);
    CHECK(r.frag_offset, ==, 0);
    CHECK(r.id, ==, 0x4242);
    CHECK(wire_ipv4__is_fragment(&r), ==, true);

    CHECK(parse_at1(ipv4_frag_last, sizeof(ipv4_frag_last), &r, 0), ==, 0);
    CHECK(r.more_frags, ==, false);
    CHECK(r.frag_offset, ==, 1480);
    CHECK(wire_ipv4__is_fragment(&r), ==, true);

    CHECK(parse_at1(ipv4_frag_edge, sizeof(ipv4_frag_edge), &r, 0), ==, 0);
    CHECK(r.frag_offset, ==, 65528);
    CHECK(parse_at1(ipv4_frag_over, sizeof(ipv4_frag_over), &r, 0), ==, -EINVAL);
}

/* Encoding the repr of each vector must give back the vector's bytes (20-byte headers only). */
TEST(test_ipv4_encode_matches_vectors)
{
    struct wire_ipv4_repr r = {
        .src = hton32(0xc6120001), .dst = hton32(0xc6120002), .proto = WIRE_IPPROTO_UDP,
        .ttl = 64, .tos = 0, .id = 0x1c46, .dont_frag = true, .total_len = 33,
    };
    uint8_t buf[WIRE_IPV4_HLEN_MIN + 1];

    wire_ipv4__emit(&r, buf + 1);
    CHECK_MEM(buf + 1, ipv4_udp, WIRE_IPV4_HLEN_MIN);

    r.id = 0x4242;
    r.dont_frag = false;
    r.more_frags = true;
    r.total_len = 28;
    wire_ipv4__emit(&r, buf);
    CHECK_MEM(buf, ipv4_frag_mf, WIRE_IPV4_HLEN_MIN);
    r.more_frags = false;
    r.frag_offset = 1480;
    wire_ipv4__emit(&r, buf);
    CHECK_MEM(buf, ipv4_frag_last, WIRE_IPV4_HLEN_MIN);
    /* Options are never emitted: hdr_len and source_route in the repr are ignored. */
    r.hdr_len = 28;
    r.source_route = true;
    wire_ipv4__emit(&r, buf);
    CHECK(buf[0], ==, 0x45);
}

TEST(test_ipv4_round_trip)
{
    uint32_t x = 0x9e3779b9;
    uint8_t buf[64];

    for (int i = 0; i < 2000; i++) {
        x = x * 1664525u + 1013904223u;
        struct wire_ipv4_repr r = {
            .src = x, .dst = x ^ 0xa5a5a5a5u, .proto = (uint8_t)(x >> 3), .ttl = (uint8_t)(x >> 11),
            .tos = (uint8_t)(x >> 19), .id = (uint16_t)(x >> 7), .more_frags = x & 1,
            .dont_frag = (x >> 1) & 1, .total_len = (uint16_t)(20 + (x >> 27)),
        }, back;
        /* Keep the fragment inside 65535 bytes, in 8-byte units. */
        r.frag_offset = (uint16_t)(((x >> 13) % (65536 / 8 - 5)) * 8);
        memset(buf, 0, sizeof(buf));
        wire_ipv4__emit(&r, buf);
        int err = wire_ipv4__parse(buf, r.total_len, &back, 0);
        CHECK(err, ==, 0);
        if (err)
            return;
        CHECK(back.src, ==, r.src);
        CHECK(back.dst, ==, r.dst);
        CHECK(back.proto, ==, r.proto);
        CHECK(back.ttl, ==, r.ttl);
        CHECK(back.tos, ==, r.tos);
        CHECK(back.id, ==, r.id);
        CHECK(back.frag_offset, ==, r.frag_offset);
        CHECK(back.more_frags, ==, r.more_frags);
        CHECK(back.dont_frag, ==, r.dont_frag);
        CHECK(back.total_len, ==, r.total_len);
        CHECK(back.hdr_len, ==, 20);
        CHECK(back.source_route, ==, false);
    }
}

TEST_MAIN()
