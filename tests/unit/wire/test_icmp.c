/* ICMPv4 view: echo decode/encode, checksum over odd lengths, and error messages whose quoted
 * IPv4 header + 8 bytes are parsed back into addresses, ports and the TCP sequence number.
 *
 * Checksums were computed independently with the python3 one-liner quoted at the top of
 * tests/unit/wire/test_ipv4.c ("csum HEX", checksum field as 0000).
 */
#include <errno.h>

#include "tests/unit/check.h"
#include "wire/icmp.h"

/* Echo request id 0x1234 seq 1, payload "ping!" (odd length), from RFC 792 "Echo or Echo Reply
 * Message". csum 0800 0000 12340001 70696e6721 = 0xe5f9. */
static const uint8_t icmp_echo[13] = {
    0x08, 0x00, 0xe5, 0xf9, 0x12, 0x34, 0x00, 0x01,
    0x70, 0x69, 0x6e, 0x67, 0x21,
};

/* Destination unreachable / fragmentation needed (RFC 1191 §4: unused 16 bits, next-hop MTU
 * 1400 = 0x0578), quoting a 1500-byte DF TCP datagram 198.18.0.1:50000 -> 198.18.0.2:80 with
 * seq 0x11223344. Quoted header: csum 450005dc0abc40004006 0000 c6120001c6120002 = 0x9e38.
 * Whole message (one argument): csum 0304 0000 00000578 450005dc0abc400040069e38c6120001c6120002
 * c350005011223344 = 0xef7c. */
static const uint8_t icmp_frag_needed[36] = {
    0x03, 0x04, 0xef, 0x7c, 0x00, 0x00, 0x05, 0x78,
    0x45, 0x00, 0x05, 0xdc, 0x0a, 0xbc, 0x40, 0x00,
    0x40, 0x06, 0x9e, 0x38, 0xc6, 0x12, 0x00, 0x01,
    0xc6, 0x12, 0x00, 0x02, 0xc3, 0x50, 0x00, 0x50,
    0x11, 0x22, 0x33, 0x44,
};

static uint8_t work[128];

TEST(test_icmp_decode_echo)
{
    struct wire_icmp_repr r;
    struct wire_icmp_quote q;

    memcpy(work + 3, icmp_echo, sizeof(icmp_echo));
    CHECK(wire_icmp__parse(work + 3, sizeof(icmp_echo), &r, 0), ==, 0);
    CHECK(r.type, ==, WIRE_ICMP_ECHO);
    CHECK(r.code, ==, 0);
    CHECK(ntoh32(r.rest), ==, 0x12340001);
    CHECK(r.next_hop_mtu, ==, 0);
    CHECK(r.body_len, ==, 5);
    CHECK(r.body, ==, work + 3 + 8);
    CHECK_MEM(r.body, "ping!", 5);
    CHECK(wire_icmp__is_error(r.type), ==, false);
    /* An echo has no quote. */
    CHECK(wire_icmp__parse_quote(&r, &q), ==, -EINVAL);
}

TEST(test_icmp_truncated_and_bad_checksum)
{
    struct wire_icmp_repr r;
    uint8_t v[sizeof(icmp_echo)];

    for (size_t len = 0; len < WIRE_ICMP_HLEN; len++)
        CHECK(wire_icmp__parse(icmp_echo, len, &r, WIRE_PARSE_NO_CSUM), ==, -EMSGSIZE);
    /* Cutting the odd last byte breaks the checksum, which covers the whole message. */
    CHECK(wire_icmp__parse(icmp_echo, sizeof(icmp_echo) - 1, &r, 0), ==, -EBADMSG);
    memcpy(v, icmp_echo, sizeof(v));
    v[12] ^= 0x01;
    CHECK(wire_icmp__parse(v, sizeof(v), &r, 0), ==, -EBADMSG);
    CHECK(wire_icmp__parse(v, sizeof(v), &r, WIRE_PARSE_NO_CSUM), ==, 0);
    CHECK(r.body_len, ==, 5);
}

TEST(test_icmp_frag_needed_quote)
{
    struct wire_icmp_repr r;
    struct wire_icmp_quote q;

    memcpy(work + 1, icmp_frag_needed, sizeof(icmp_frag_needed));
    CHECK(wire_icmp__parse(work + 1, sizeof(icmp_frag_needed), &r, 0), ==, 0);
    CHECK(r.type, ==, WIRE_ICMP_DEST_UNREACH);
    CHECK(r.code, ==, WIRE_ICMP_FRAG_NEEDED);
    CHECK(r.next_hop_mtu, ==, 1400);
    CHECK(wire_icmp__is_error(r.type), ==, true);
    CHECK(r.body_len, ==, 28);
    CHECK(wire_icmp__parse_quote(&r, &q), ==, 0);
    CHECK(ntoh32(q.ip.src), ==, 0xc6120001);
    CHECK(ntoh32(q.ip.dst), ==, 0xc6120002);
    CHECK(q.ip.proto, ==, WIRE_IPPROTO_TCP);
    CHECK(q.ip.total_len, ==, 1500);
    CHECK(q.ip.hdr_len, ==, 20);
    CHECK(q.ip.id, ==, 0x0abc);
    CHECK(q.ip.dont_frag, ==, true);
    CHECK(q.sport, ==, 50000);
    CHECK(q.dport, ==, 80);
    CHECK(q.tcp_seq, ==, 0x11223344);

    /* Same message as port unreachable: the MTU field is only read for code 4. */
    uint8_t v[sizeof(icmp_frag_needed)];
    memcpy(v, icmp_frag_needed, sizeof(v));
    v[1] = WIRE_ICMP_PORT_UNREACH;
    CHECK(wire_icmp__parse(v, sizeof(v), &r, WIRE_PARSE_NO_CSUM), ==, 0);
    CHECK(r.next_hop_mtu, ==, 0);
    CHECK(wire_icmp__parse_quote(&r, &q), ==, 0);
}

/* Variants of the quote, edited by hand in a copy of icmp_frag_needed and parsed without the
 * ICMP checksum; the quoted header's own checksum is never checked (routers may rewrite it). */
TEST(test_icmp_quote_variants)
{
    struct wire_icmp_repr r;
    struct wire_icmp_quote q;
    uint8_t v[64];

    /* Quoted header checksum wrong: still accepted. */
    memcpy(v, icmp_frag_needed, sizeof(icmp_frag_needed));
    v[8 + 10] ^= 0xff;
    CHECK(wire_icmp__parse(v, sizeof(icmp_frag_needed), &r, WIRE_PARSE_NO_CSUM), ==, 0);
    CHECK(wire_icmp__parse_quote(&r, &q), ==, 0);

    /* UDP: ports, no sequence number. */
    memcpy(v, icmp_frag_needed, sizeof(icmp_frag_needed));
    v[8 + 9] = WIRE_IPPROTO_UDP;
    CHECK(wire_icmp__parse(v, sizeof(icmp_frag_needed), &r, WIRE_PARSE_NO_CSUM), ==, 0);
    CHECK(wire_icmp__parse_quote(&r, &q), ==, 0);
    CHECK(q.sport, ==, 50000);
    CHECK(q.tcp_seq, ==, 0);

    /* Another protocol (ICMP in ICMP): no ports. */
    v[8 + 9] = WIRE_IPPROTO_ICMP;
    CHECK(wire_icmp__parse(v, sizeof(icmp_frag_needed), &r, WIRE_PARSE_NO_CSUM), ==, 0);
    CHECK(wire_icmp__parse_quote(&r, &q), ==, 0);
    CHECK(q.sport, ==, 0);
    CHECK(q.dport, ==, 0);

    /* Quote with 4 option bytes (NOP NOP NOP EOL): IHL 6, so 24 + 8 bytes are needed. */
    memcpy(v, icmp_frag_needed, 28);
    v[8] = 0x46;
    memcpy(v + 28, (uint8_t[4]){ 1, 1, 1, 0 }, 4);
    memcpy(v + 32, icmp_frag_needed + 28, 8);
    CHECK(wire_icmp__parse(v, 40, &r, WIRE_PARSE_NO_CSUM), ==, 0);
    CHECK(wire_icmp__parse_quote(&r, &q), ==, 0);
    CHECK(q.ip.hdr_len, ==, 24);
    CHECK(q.sport, ==, 50000);
    CHECK(q.tcp_seq, ==, 0x11223344);
    /* ... and one byte short of IHL + 8. */
    CHECK(wire_icmp__parse(v, 39, &r, WIRE_PARSE_NO_CSUM), ==, 0);
    CHECK(wire_icmp__parse_quote(&r, &q), ==, -EMSGSIZE);
    /* Malformed quoted option (length 1). */
    v[28] = 0x44, v[29] = 0x01;
    CHECK(wire_icmp__parse(v, 40, &r, WIRE_PARSE_NO_CSUM), ==, 0);
    CHECK(wire_icmp__parse_quote(&r, &q), ==, -EINVAL);
}

TEST(test_icmp_quote_invalid)
{
    struct wire_icmp_repr r;
    struct wire_icmp_quote q;
    uint8_t v[sizeof(icmp_frag_needed)];

    /* Truncated quotes: fewer than 20 bytes, then fewer than IHL + 8. */
    for (size_t len = 8; len < sizeof(icmp_frag_needed); len++) {
        CHECK(wire_icmp__parse(icmp_frag_needed, len, &r, WIRE_PARSE_NO_CSUM), ==, 0);
        CHECK(wire_icmp__parse_quote(&r, &q), ==, -EMSGSIZE);
    }
    static const struct { size_t at; uint8_t val; } bad[] = {
        { 8 + 0, 0x65 },        /* quoted version 6 */
        { 8 + 0, 0x44 },        /* quoted IHL 4 */
        { 8 + 2, 0x00 },        /* quoted total length 0x00dc ... */
        { 8 + 7, 0xb9 },        /* non-first fragment (offset 1480): RFC 1122 §3.2.2 */
    };
    for (size_t i = 0; i < SLIP_ARRAY_SIZE(bad); i++) {
        memcpy(v, icmp_frag_needed, sizeof(v));
        v[bad[i].at] = bad[i].val;
        if (i == 2)
            v[8 + 3] = 19;      /* ... set to 19, below the header length */
        CHECK(wire_icmp__parse(v, sizeof(v), &r, WIRE_PARSE_NO_CSUM), ==, 0);
        CHECK(wire_icmp__parse_quote(&r, &q), ==, -EINVAL);
    }
}

TEST(test_icmp_encode)
{
    struct wire_icmp_repr r = { .type = WIRE_ICMP_ECHO, .rest = hton32(0x12340001) }, back;
    uint8_t buf[64];

    memcpy(buf + 1 + 8, "ping!", 5);
    wire_icmp__emit(&r, buf + 1, 5);
    CHECK_MEM(buf + 1, icmp_echo, sizeof(icmp_echo));

    /* Frag-needed from next_hop_mtu with rest left 0. */
    struct wire_icmp_repr f = { .type = WIRE_ICMP_DEST_UNREACH, .code = WIRE_ICMP_FRAG_NEEDED,
                                .next_hop_mtu = 1400 };
    memcpy(buf + 8, icmp_frag_needed + 8, 28);
    wire_icmp__emit(&f, buf, 28);
    CHECK_MEM(buf, icmp_frag_needed, sizeof(icmp_frag_needed));

    /* Round trip of an echo reply with an empty body. */
    r.type = WIRE_ICMP_ECHOREPLY;
    r.rest = hton32(0xbeef0007);
    wire_icmp__emit(&r, buf, 0);
    CHECK(wire_icmp__parse(buf, 8, &back, 0), ==, 0);
    CHECK(back.type, ==, WIRE_ICMP_ECHOREPLY);
    CHECK(back.code, ==, 0);
    CHECK(back.rest, ==, r.rest);
    CHECK(back.body_len, ==, 0);
}

TEST_MAIN()
