/* TCP view: header and option decode/encode, malformed options (RFC 9293 §3.2 lengths, RFC 7323
 * and RFC 2018 sizes), checksum with the pseudo-header, and emit -> parse round trips.
 *
 * Checksums were computed independently with the python3 one-liner quoted at the top of
 * tests/unit/wire/test_ipv4.c ("csum HEX"), over the pseudo-header (198.18.0.1, 198.18.0.2,
 * 00, proto 6, TCP length) followed by the segment with its checksum field as 0000.
 */
#include <errno.h>

#include "tests/unit/check.h"
#include "wire/tcp.h"

#define SRC 0xc6120001u
#define DST 0xc6120002u

/* SYN 50000 -> 80, seq 0x11223344, window 64240, with the options in the order Linux sends
 * them: MSS 1460, SACK-permitted, timestamps (tsval 0x01020304, tsecr 0), NOP, window scale 7.
 * Written by hand from RFC 9293 §3.1 and RFC 7323 §2/§3.
 * csum c6120001c6120002 0006 0028 c3500050 11223344 00000000 a002 faf0 0000 0000 020405b4
 * 0402080a 01020304 00000000 01030307 = 0xb4da (one argument). */
static const uint8_t tcp_syn[40] = {
    0xc3, 0x50, 0x00, 0x50, 0x11, 0x22, 0x33, 0x44,
    0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfa, 0xf0,
    0xb4, 0xda, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4,
    0x04, 0x02, 0x08, 0x0a, 0x01, 0x02, 0x03, 0x04,
    0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x07,
};

/* PSH|ACK 80 -> 50000 with NOP NOP TS(0x0a0b0c0d, 0x01020304) NOP NOP SACK with two blocks
 * (0x1000-0x2000, 0x3000-0x4000; RFC 2018 §3) and payload "abc" (odd length).
 * csum c6120001c6120002 0006 0037 0050c350 55667788 11223345 d018 0400 0000 0000 0101080a
 * 0a0b0c0d 01020304 0101 0512 00001000 00002000 00003000 00004000 616263 = 0x3ceb. */
static const uint8_t tcp_data[55] = {
    0x00, 0x50, 0xc3, 0x50, 0x55, 0x66, 0x77, 0x88,
    0x11, 0x22, 0x33, 0x45, 0xd0, 0x18, 0x04, 0x00,
    0x3c, 0xeb, 0x00, 0x00, 0x01, 0x01, 0x08, 0x0a,
    0x0a, 0x0b, 0x0c, 0x0d, 0x01, 0x02, 0x03, 0x04,
    0x01, 0x01, 0x05, 0x12, 0x00, 0x00, 0x10, 0x00,
    0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x30, 0x00,
    0x00, 0x00, 0x40, 0x00, 0x61, 0x62, 0x63,
};

static uint8_t work[128];

TEST(test_tcp_decode_syn)
{
    struct wire_tcp_repr r;

    memcpy(work + 1, tcp_syn, sizeof(tcp_syn));
    CHECK(wire_tcp__parse(work + 1, sizeof(tcp_syn), &r), ==, 0);
    CHECK(r.sport, ==, 50000);
    CHECK(r.dport, ==, 80);
    CHECK(r.seq, ==, 0x11223344);
    CHECK(r.ack, ==, 0);
    CHECK(r.flags, ==, WIRE_TCP_SYN);
    CHECK(r.window, ==, 64240);
    CHECK(r.urg, ==, 0);
    CHECK(r.hdr_len, ==, 40);
    CHECK(r.opts.has_mss, ==, true);
    CHECK(r.opts.mss, ==, 1460);
    CHECK(r.opts.sack_ok, ==, true);
    CHECK(r.opts.has_ts, ==, true);
    CHECK(r.opts.tsval, ==, 0x01020304);
    CHECK(r.opts.tsecr, ==, 0);
    CHECK(r.opts.has_wscale, ==, true);
    CHECK(r.opts.wscale, ==, 7);
    CHECK(r.opts.nsack, ==, 0);
    CHECK(wire_tcp__csum_ok(work + 1, sizeof(tcp_syn), hton32(SRC), hton32(DST)), ==, true);
}

TEST(test_tcp_decode_data_with_sack)
{
    struct wire_tcp_repr r;

    memcpy(work + 2, tcp_data, sizeof(tcp_data));
    CHECK(wire_tcp__parse(work + 2, sizeof(tcp_data), &r), ==, 0);
    CHECK(r.flags, ==, WIRE_TCP_PSH | WIRE_TCP_ACK);
    CHECK(r.seq, ==, 0x55667788);
    CHECK(r.ack, ==, 0x11223345);
    CHECK(r.window, ==, 1024);
    CHECK(r.hdr_len, ==, 52);
    CHECK(r.opts.has_mss, ==, false);
    CHECK(r.opts.has_wscale, ==, false);
    CHECK(r.opts.sack_ok, ==, false);
    CHECK(r.opts.has_ts, ==, true);
    CHECK(r.opts.tsval, ==, 0x0a0b0c0d);
    CHECK(r.opts.tsecr, ==, 0x01020304);
    CHECK(r.opts.nsack, ==, 2);
    CHECK(r.opts.sack[0].left, ==, 0x1000);
    CHECK(r.opts.sack[0].right, ==, 0x2000);
    CHECK(r.opts.sack[1].left, ==, 0x3000);
    CHECK(r.opts.sack[1].right, ==, 0x4000);
    CHECK(wire_tcp__csum_ok(work + 2, sizeof(tcp_data), hton32(SRC), hton32(DST)), ==, true);
}

TEST(test_tcp_truncated_and_impossible_offset)
{
    struct wire_tcp_repr r;
    uint8_t v[sizeof(tcp_syn)];

    for (size_t len = 0; len < WIRE_TCP_HLEN_MIN; len++)
        CHECK(wire_tcp__parse(tcp_syn, len, &r), ==, -EMSGSIZE);
    /* Data offset 10 words, fewer bytes present. */
    for (size_t len = WIRE_TCP_HLEN_MIN; len < sizeof(tcp_syn); len++)
        CHECK(wire_tcp__parse(tcp_syn, len, &r), ==, -EMSGSIZE);
    memcpy(v, tcp_syn, sizeof(v));
    v[12] = 0x40;               /* data offset 4 words: inside the fixed header */
    CHECK(wire_tcp__parse(v, sizeof(v), &r), ==, -EINVAL);
    v[12] = 0x00;
    CHECK(wire_tcp__parse(v, sizeof(v), &r), ==, -EINVAL);
    v[12] = 0x50;               /* offset 5: options become payload, which is fine */
    CHECK(wire_tcp__parse(v, sizeof(v), &r), ==, 0);
    CHECK(r.opts.has_mss, ==, false);
    v[12] = 0xf0;               /* offset 15 = 60 > 40 */
    CHECK(wire_tcp__parse(v, sizeof(v), &r), ==, -EMSGSIZE);
}

TEST(test_tcp_bad_checksum)
{
    uint8_t v[sizeof(tcp_data)];

    memcpy(v, tcp_data, sizeof(v));
    v[54] ^= 0x20;              /* odd last payload byte */
    CHECK(wire_tcp__csum_ok(v, sizeof(v), hton32(SRC), hton32(DST)), ==, false);
    CHECK(wire_tcp__csum_ok(tcp_data, sizeof(tcp_data), hton32(SRC), hton32(DST ^ 0x100)), ==, false);
    CHECK(wire_tcp__csum_ok(tcp_data, sizeof(tcp_data) - 1, hton32(SRC), hton32(DST)), ==, false);
    /* TCP has no "no checksum" value: a zero field is just wrong here. */
    memcpy(v, tcp_data, sizeof(v));
    v[16] = v[17] = 0;
    CHECK(wire_tcp__csum_ok(v, sizeof(v), hton32(SRC), hton32(DST)), ==, false);
}

/* The 20 option bytes of tcp_syn (data offset 10) replaced by hand. */
TEST(test_tcp_malformed_and_unusual_options)
{
    static const struct { uint8_t opt[20]; int want; const char *what; } cases[] = {
        { { 0x22, 0x00 }, -EPROTO, "unknown kind, length 0" },
        { { 0x22, 0x01 }, -EPROTO, "unknown kind, length 1" },
        { { 0x22, 0x15 }, -EPROTO, "length 21 runs past the header" },
        { { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0x02 }, -EPROTO,
          "MSS kind in the last byte, no length" },
        { { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0x02, 0x04, 0x05 }, 0,
          "MSS ending exactly at the header end (last byte 0)" },
        { { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0x02, 0x04, 0x05 }, -EPROTO,
          "MSS running one byte past the header" },
        { { 0x02, 0x03, 0x05 }, -EPROTO, "MSS length 3" },
        { { 0x02, 0x05, 0x05, 0xb4, 0x00 }, -EPROTO, "MSS length 5" },
        { { 0x03, 0x02 }, -EPROTO, "window scale length 2" },
        { { 0x03, 0x04, 0x07, 0x00 }, -EPROTO, "window scale length 4" },
        { { 0x04, 0x03, 0x00 }, -EPROTO, "SACK-permitted length 3" },
        { { 0x08, 0x08, 0, 0, 0, 1, 0, 0 }, -EPROTO, "timestamps length 8" },
        { { 0x08, 0x0b, 0, 0, 0, 1, 0, 0, 0, 2, 0 }, -EPROTO, "timestamps length 11" },
        { { 0x05, 0x02 }, -EPROTO, "SACK with no block" },
        { { 0x05, 0x09, 0, 0, 0, 1, 0, 0, 0 }, -EPROTO, "SACK length 9" },
        { { 0x05, 0x0b, 0, 0, 0, 1, 0, 0, 0, 2, 0 }, -EPROTO, "SACK length 11" },
        { { 0x1e, 0x04, 0x00, 0x00 }, 0, "unknown kind 30 (MPTCP) skipped" },
        { { 0xfe, 0x06, 0xf9, 0x89, 0x00, 0x00 }, 0, "experimental kind 254 skipped" },
        { { 0x00, 0x22, 0x00, 0xff }, 0, "EOL then garbage" },
    };
    struct wire_tcp_repr r;
    uint8_t v[sizeof(tcp_syn)];

    for (size_t i = 0; i < SLIP_ARRAY_SIZE(cases); i++) {
        memcpy(v, tcp_syn, 20);
        memcpy(v + 20, cases[i].opt, 20);
        int got = wire_tcp__parse(v, sizeof(v), &r);
        if (got != cases[i].want)
            fprintf(stderr, "case: %s\n", cases[i].what);
        CHECK(got, ==, cases[i].want);
    }

    /* An MSS after EOL is padding, not an option. */
    memcpy(v, tcp_syn, 20);
    memcpy(v + 20, (uint8_t[20]){ 0x00, 0x02, 0x04, 0x05, 0xb4 }, 20);
    CHECK(wire_tcp__parse(v, sizeof(v), &r), ==, 0);
    CHECK(r.opts.has_mss, ==, false);

    /* Four SACK blocks (2 + 32 = 34 bytes) is the most that fits. */
    uint8_t s[20 + 36] = { 0 };
    memcpy(s, tcp_syn, 20);
    s[12] = (uint8_t)((56 / 4) << 4);
    s[20] = 1, s[21] = 1, s[22] = 5, s[23] = 34;
    for (int b = 0; b < 8; b++)
        s[24 + b * 4 + 3] = (uint8_t)(b + 1);
    CHECK(wire_tcp__parse(s, sizeof(s), &r), ==, 0);
    CHECK(r.opts.nsack, ==, 4);
    CHECK(r.opts.sack[3].left, ==, 7);
    CHECK(r.opts.sack[3].right, ==, 8);
}

TEST(test_tcp_encode_matches_vectors)
{
    struct wire_tcp_repr r = {
        .sport = 50000, .dport = 80, .seq = 0x11223344, .flags = WIRE_TCP_SYN, .window = 64240,
        .opts = { .has_mss = true, .mss = 1460, .sack_ok = true, .has_ts = true,
                  .tsval = 0x01020304, .has_wscale = true, .wscale = 7 },
    };
    uint8_t buf[80];

    memset(buf, 0xee, sizeof(buf));
    CHECK(wire_tcp__emit(&r, buf + 1), ==, 40);
    CHECK(buf[1 + 16], ==, 0);  /* checksum left 0 */
    CHECK(buf[1 + 17], ==, 0);
    wire_tcp__set_csum(buf + 1, 40, hton32(SRC), hton32(DST));
    CHECK_MEM(buf + 1, tcp_syn, sizeof(tcp_syn));

    struct wire_tcp_repr d = {
        .sport = 80, .dport = 50000, .seq = 0x55667788, .ack = 0x11223345,
        .flags = WIRE_TCP_PSH | WIRE_TCP_ACK, .window = 1024,
        .opts = { .has_ts = true, .tsval = 0x0a0b0c0d, .tsecr = 0x01020304, .nsack = 2,
                  .sack = { { 0x1000, 0x2000 }, { 0x3000, 0x4000 } } },
    };
    memset(buf, 0xee, sizeof(buf));
    memcpy(buf + 52, "abc", 3);
    CHECK(wire_tcp__emit(&d, buf), ==, 52);
    wire_tcp__set_csum(buf, 55, hton32(SRC), hton32(DST));
    CHECK_MEM(buf, tcp_data, sizeof(tcp_data));
}

/* Every combination of options and 0..4 SACK blocks: the header stays <= 60 bytes and 4-byte
 * aligned, and parsing gives back what was asked, minus SACK blocks that did not fit (the
 * first blocks are kept, RFC 2018 §4). */
TEST(test_tcp_round_trip_all_option_sets)
{
    uint8_t buf[WIRE_TCP_HLEN_MAX + 8];

    for (unsigned m = 0; m < 16; m++) {
        for (uint8_t nsack = 0; nsack <= WIRE_TCP_MAX_SACK; nsack++) {
            struct wire_tcp_repr r = {
                .sport = 1, .dport = 65535, .seq = 0xfffffff0u + m, .ack = 0x80000000u,
                .flags = (uint8_t)(0xff - m), .window = (uint16_t)(m * 4099), .urg = 0x1234,
                .opts = { .has_mss = m & 1, .mss = 8960, .has_wscale = (m >> 1) & 1, .wscale = 14,
                          .sack_ok = (m >> 2) & 1, .has_ts = (m >> 3) & 1, .tsval = 0xdeadbeef,
                          .tsecr = 0xcafef00d, .nsack = nsack },
            }, back;
            for (unsigned b = 0; b < WIRE_TCP_MAX_SACK; b++)
                r.opts.sack[b] = (struct wire_tcp_sack_block){ 1000 * b + 1, 1000 * b + 500 };
            memset(buf, 0xee, sizeof(buf));
            size_t hl = wire_tcp__emit(&r, buf + 1);
            CHECK(hl % 4, ==, 0);
            CHECK(hl, <=, WIRE_TCP_HLEN_MAX);
            CHECK(buf[1 + hl], ==, 0xee);       /* nothing written past the header */
            CHECK(wire_tcp__parse(buf + 1, hl, &back), ==, 0);
            CHECK(back.hdr_len, ==, hl);
            CHECK(back.sport, ==, r.sport);
            CHECK(back.dport, ==, r.dport);
            CHECK(back.seq, ==, r.seq);
            CHECK(back.ack, ==, r.ack);
            CHECK(back.flags, ==, r.flags);
            CHECK(back.window, ==, r.window);
            CHECK(back.urg, ==, r.urg);
            CHECK(back.opts.has_mss, ==, r.opts.has_mss);
            CHECK(back.opts.has_wscale, ==, r.opts.has_wscale);
            CHECK(back.opts.sack_ok, ==, r.opts.sack_ok);
            CHECK(back.opts.has_ts, ==, r.opts.has_ts);
            if (r.opts.has_mss)
                CHECK(back.opts.mss, ==, 8960);
            if (r.opts.has_wscale)
                CHECK(back.opts.wscale, ==, 14);
            if (r.opts.has_ts) {
                CHECK(back.opts.tsval, ==, 0xdeadbeef);
                CHECK(back.opts.tsecr, ==, 0xcafef00d);
            }
            CHECK(back.opts.nsack, <=, nsack);
            /* With nothing else, all four blocks fit (4 + 32 = 36 bytes). */
            if (m == 0)
                CHECK(back.opts.nsack, ==, nsack);
            /* With timestamps only, three fit (12 + 28 = 40), as in Linux. */
            if (m == 8)
                CHECK(back.opts.nsack, ==, SLIP_MIN(nsack, 3));
            if (nsack > 0 && hl + 8 <= WIRE_TCP_HLEN_MAX)
                CHECK(back.opts.nsack, ==, nsack);
            for (unsigned b = 0; b < back.opts.nsack; b++) {
                CHECK(back.opts.sack[b].left, ==, r.opts.sack[b].left);
                CHECK(back.opts.sack[b].right, ==, r.opts.sack[b].right);
            }
            wire_tcp__set_csum(buf + 1, hl, hton32(SRC), hton32(DST));
            CHECK(wire_tcp__csum_ok(buf + 1, hl, hton32(SRC), hton32(DST)), ==, true);
        }
    }
}

TEST_MAIN()
