/* IPv6 header view and ICMPv6: decode, encode, truncation, impossible fields, the extension
 * header walk (hop-by-hop, destination options, routing, fragment, AH) and its bounds, and an
 * ICMPv6 packet-too-big with its quote.
 *
 * The packets are assembled here byte by byte from the RFC 8200 §3/§4 layouts (pkt() below
 * writes the fixed header by hand, not with wire_ipv6__emit). icmpv6_ptb was made with Python's
 * struct module and its checksum computed independently of checksum.c (RFC 1071 sum over the RFC
 * 8200 §8.1 pseudo-header: src, dst, 32-bit length, 32-bit next header 58, then the message). */
#include <errno.h>

#include "tests/unit/check.h"
#include "wire/checksum.h"
#include "wire/icmpv6.h"
#include "wire/ipv4.h"
#include "wire/ipv6.h"

/* 2001:db8::1 -> 2001:db8::2, packet too big (MTU 1280) quoting TCP 2001:db8::2:443 ->
 * 2001:db8::1:40000, seq 0x01020304; ICMPv6 checksum 0xe930. */
static const uint8_t icmpv6_ptb[108] = {
    0x60, 0x00, 0x00, 0x00, 0x00, 0x44, 0x3a, 0x40, 0x20, 0x01, 0x0d, 0xb8,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
    0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0xe9, 0x30, 0x00, 0x00, 0x05, 0x00,
    0x60, 0x00, 0x00, 0x00, 0x00, 0x14, 0x06, 0x40, 0x20, 0x01, 0x0d, 0xb8,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02,
    0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x01, 0x01, 0xbb, 0x9c, 0x40, 0x01, 0x02, 0x03, 0x04,
    0x00, 0x00, 0x00, 0x00, 0x50, 0x10, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00,
};

static uint8_t work[2048];

/* Fixed header by hand (version 6, traffic class 0x2e, flow 0x12345, hop limit 64, 2001:db8::1
 * -> 2001:db8::2) at work + 1 (frames are not aligned), then ext (the extension headers and
 * payload). Returns the total length. */
static size_t pkt(uint8_t next, const uint8_t *ext, size_t n)
{
    static const uint8_t fixed[8] = { 0x62, 0xe1, 0x23, 0x45, 0, 0, 0, 64 };
    uint8_t *p = work + 1;
    memcpy(p, fixed, 8);
    p[4] = (uint8_t)(n >> 8);
    p[5] = (uint8_t)n;
    p[6] = next;
    static const uint8_t a[16] = { 0x20, 0x01, 0x0d, 0xb8, [15] = 1 };
    memcpy(p + 8, a, 16);
    memcpy(p + 24, a, 16);
    p[39] = 2;
    memcpy(p + 40, ext, n);
    return 40 + n;
}

static int parse(size_t len, struct wire_ipv6_repr *r)
{
    return wire_ipv6__parse(work + 1, len, r, 0);
}

/* 8 bytes of UDP header + "hello" (ports 5000 -> 7). */
static const uint8_t udp13[13] = { 0x13, 0x88, 0x00, 0x07, 0x00, 0x0d, 0, 0, 'h', 'e', 'l', 'l', 'o' };

TEST(test_ipv6_decode)
{
    struct wire_ipv6_repr r;
    size_t n = pkt(WIRE_IPPROTO_UDP, udp13, sizeof(udp13));
    CHECK(parse(n, &r), ==, 0);
    CHECK(r.tclass, ==, 0x2e);
    CHECK(r.flow, ==, 0x12345);
    CHECK(r.hop_limit, ==, 64);
    CHECK(r.proto, ==, WIRE_IPPROTO_UDP);
    CHECK(r.l4_off, ==, 40);
    CHECK(r.payload_len, ==, 13);
    CHECK(r.total_len, ==, 53);
    CHECK(r.fragment, ==, false);
    CHECK(r.nexts, ==, 0);
    CHECK(r.src.b[15], ==, 1);
    CHECK(r.dst.b[15], ==, 2);
    CHECK(r.src.b[0], ==, 0x20);
}

TEST(test_ipv6_truncated_and_padding)
{
    struct wire_ipv6_repr r;
    size_t n = pkt(WIRE_IPPROTO_UDP, udp13, sizeof(udp13));
    for (size_t len = 0; len < n; len++)
        CHECK(parse(len, &r), ==, -EMSGSIZE);
    CHECK(parse(n + 7, &r), ==, 0);     /* link-layer padding after the payload */
    CHECK(r.total_len, ==, n);
}

TEST(test_ipv6_version)
{
    struct wire_ipv6_repr r;
    size_t n = pkt(WIRE_IPPROTO_UDP, udp13, sizeof(udp13));
    work[1] = 0x45;
    CHECK(parse(n, &r), ==, -EINVAL);
}

/* Hop-by-hop (PadN of 4, Router Alert), destination options (Pad1 x6), then UDP. */
TEST(test_ipv6_options_walked)
{
    struct wire_ipv6_repr r;
    uint8_t e[16 + 8 + 13] = {
        WIRE_IPPROTO_DSTOPTS, 1, 1, 2, 0, 0, 5, 2, 0, 0, 1, 2, 0, 0, 0, 0,
        WIRE_IPPROTO_UDP, 0, 0, 0, 0, 0, 0, 0,
    };
    memcpy(e + 24, udp13, sizeof(udp13));
    size_t n = pkt(WIRE_IPPROTO_HOPOPTS, e, sizeof(e));
    CHECK(parse(n, &r), ==, 0);
    CHECK(r.proto, ==, WIRE_IPPROTO_UDP);
    CHECK(r.l4_off, ==, 64);
    CHECK(r.nexts, ==, 2);
    /* an option type whose high bits say "discard if unknown" (01): refused */
    e[10] = 0x41;
    n = pkt(WIRE_IPPROTO_HOPOPTS, e, sizeof(e));
    CHECK(parse(n, &r), ==, -EPROTO);
    /* 00: skipped */
    e[10] = 0x1e;
    n = pkt(WIRE_IPPROTO_HOPOPTS, e, sizeof(e));
    CHECK(parse(n, &r), ==, 0);
    /* an option longer than its header (6 + 2 + 5 bytes from offset 10 of 16) */
    e[11] = 5;
    n = pkt(WIRE_IPPROTO_HOPOPTS, e, sizeof(e));
    CHECK(parse(n, &r), ==, -EPROTO);
    e[11] = 2;
    /* Router Alert in a destination options header is an unknown option of type 00: skipped;
     * the jumbo payload option (0xc2, action 11) is refused */
    e[18] = 0xc2;
    e[19] = 4;
    n = pkt(WIRE_IPPROTO_HOPOPTS, e, sizeof(e));
    CHECK(parse(n, &r), ==, -EPROTO);
}

TEST(test_ipv6_hopopts_only_first)
{
    struct wire_ipv6_repr r;
    uint8_t e[16 + 13] = { WIRE_IPPROTO_HOPOPTS, 0, 1, 4, 0, 0, 0, 0,
                           WIRE_IPPROTO_UDP, 0, 1, 4, 0, 0, 0, 0 };
    memcpy(e + 16, udp13, sizeof(udp13));
    CHECK(parse(pkt(WIRE_IPPROTO_DSTOPTS, e, sizeof(e)), &r), ==, -EPROTO);
    e[0] = WIRE_IPPROTO_DSTOPTS;
    CHECK(parse(pkt(WIRE_IPPROTO_HOPOPTS, e, sizeof(e)), &r), ==, 0);
    CHECK(r.l4_off, ==, 56);
}

TEST(test_ipv6_routing_segments_left)
{
    struct wire_ipv6_repr r;
    uint8_t e[24 + 13] = { WIRE_IPPROTO_UDP, 2, 4, 0 };     /* type 4 (SRH), 24 bytes */
    memcpy(e + 24, udp13, sizeof(udp13));
    CHECK(parse(pkt(WIRE_IPPROTO_ROUTING, e, sizeof(e)), &r), ==, 0);
    CHECK(r.l4_off, ==, 64);
    e[3] = 1;
    CHECK(parse(pkt(WIRE_IPPROTO_ROUTING, e, sizeof(e)), &r), ==, -EPROTO);
}

TEST(test_ipv6_ah)
{
    struct wire_ipv6_repr r;
    uint8_t e[24 + 13] = { WIRE_IPPROTO_UDP, 4 };           /* (4 + 2) * 4 = 24 bytes */
    memcpy(e + 24, udp13, sizeof(udp13));
    CHECK(parse(pkt(WIRE_IPPROTO_AH, e, sizeof(e)), &r), ==, 0);
    CHECK(r.l4_off, ==, 64);
    e[1] = 5;       /* 28 bytes: the UDP header is now inside it, and the chain ends in data */
    CHECK(parse(pkt(WIRE_IPPROTO_AH, e, sizeof(e)), &r), ==, 0);
    CHECK(r.l4_off, ==, 68);
    e[1] = 255;     /* past the payload */
    CHECK(parse(pkt(WIRE_IPPROTO_AH, e, sizeof(e)), &r), ==, -EPROTO);
}

TEST(test_ipv6_fragments)
{
    struct wire_ipv6_repr r;
    /* first fragment: offset 0, M, id 0xdeadbeef, 16 bytes of UDP (a multiple of 8) */
    uint8_t e[8 + 16] = { WIRE_IPPROTO_UDP, 0, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef };
    memcpy(e + 8, udp13, sizeof(udp13));
    CHECK(parse(pkt(WIRE_IPPROTO_FRAGMENT, e, sizeof(e)), &r), ==, 0);
    CHECK(r.fragment, ==, true);
    CHECK(r.more_frags, ==, true);
    CHECK(r.frag_offset, ==, 0);
    CHECK(r.frag_id, ==, 0xdeadbeefu);
    CHECK(r.frag_hdr_off, ==, 40);
    CHECK(r.proto, ==, WIRE_IPPROTO_UDP);
    CHECK(r.l4_off, ==, 48);
    /* M with 15 bytes: not a multiple of 8 */
    CHECK(parse(pkt(WIRE_IPPROTO_FRAGMENT, e, sizeof(e) - 1), &r), ==, -EINVAL);
    /* a later one (offset 1232): its data is not walked */
    e[2] = 0x04;
    e[3] = 0xd0;
    e[8] = WIRE_IPPROTO_HOPOPTS;        /* data that would be an impossible header */
    CHECK(parse(pkt(WIRE_IPPROTO_FRAGMENT, e, sizeof(e)), &r), ==, 0);
    CHECK(r.fragment, ==, true);
    CHECK(r.more_frags, ==, false);
    CHECK(r.frag_offset, ==, 1232);
    CHECK(r.l4_off, ==, 48);
    /* offset 65528 with 16 bytes: past 65535 */
    e[2] = 0xff;
    e[3] = 0xf8;
    CHECK(parse(pkt(WIRE_IPPROTO_FRAGMENT, e, sizeof(e)), &r), ==, -EINVAL);
    /* atomic fragment (RFC 6946): a whole datagram */
    e[2] = e[3] = 0;
    memcpy(e + 8, udp13, sizeof(udp13));
    CHECK(parse(pkt(WIRE_IPPROTO_FRAGMENT, e, 8 + 13), &r), ==, 0);
    CHECK(r.fragment, ==, false);
    CHECK(r.proto, ==, WIRE_IPPROTO_UDP);
    CHECK(r.l4_off, ==, 48);
    /* two fragment headers */
    uint8_t e2[16 + 16] = { WIRE_IPPROTO_FRAGMENT, 0, 0, 1, 0, 0, 0, 1, WIRE_IPPROTO_UDP, 0, 0, 1, 0, 0, 0, 1 };
    CHECK(parse(pkt(WIRE_IPPROTO_FRAGMENT, e2, sizeof(e2)), &r), ==, -EPROTO);
    /* a first fragment whose chain does not end in it (RFC 7112) */
    uint8_t e3[8 + 8] = { WIRE_IPPROTO_DSTOPTS, 0, 0, 1, 0, 0, 0, 1, WIRE_IPPROTO_UDP, 1 };
    CHECK(parse(pkt(WIRE_IPPROTO_FRAGMENT, e3, sizeof(e3)), &r), ==, -EPROTO);
}

TEST(test_ipv6_chain_bounded)
{
    struct wire_ipv6_repr r;
    uint8_t e[8 * (WIRE_IPV6_MAX_EXT + 1) + 13];
    memset(e, 0, sizeof(e));
    for (int k = 0; k < WIRE_IPV6_MAX_EXT + 1; k++)
        e[8 * k] = WIRE_IPPROTO_DSTOPTS;
    e[8 * (WIRE_IPV6_MAX_EXT - 1)] = WIRE_IPPROTO_UDP;      /* the 8th ends the chain */
    CHECK(parse(pkt(WIRE_IPPROTO_DSTOPTS, e, sizeof(e)), &r), ==, 0);
    CHECK(r.nexts, ==, WIRE_IPV6_MAX_EXT);
    e[8 * (WIRE_IPV6_MAX_EXT - 1)] = WIRE_IPPROTO_DSTOPTS;
    e[8 * WIRE_IPV6_MAX_EXT] = WIRE_IPPROTO_UDP;           /* a 9th */
    CHECK(parse(pkt(WIRE_IPPROTO_DSTOPTS, e, sizeof(e)), &r), ==, -EPROTO);
    /* a header that starts in the last 7 bytes of the payload, and payload length 0 */
    CHECK(parse(pkt(WIRE_IPPROTO_DSTOPTS, e, 7), &r), ==, -EPROTO);
    CHECK(parse(pkt(WIRE_IPPROTO_HOPOPTS, e, 0), &r), ==, -EPROTO);
    CHECK(parse(pkt(WIRE_IPPROTO_NONE, e, 0), &r), ==, 0);
    CHECK(r.proto, ==, WIRE_IPPROTO_NONE);
    /* a quote whose payload length says 65535: 65575 bytes in all, past 16 bits (the fuzzer's
     * first find: a 16-bit total wrapped and the walk read past the buffer) */
    size_t n = pkt(WIRE_IPPROTO_DSTOPTS, e, 16);
    work[5] = work[6] = 0xff;
    CHECK(wire_ipv6__parse(work + 1, n, &r, WIRE_IPV6_PARSE_QUOTE), ==, -EPROTO);
    CHECK(r.total_len, ==, 65575);
    CHECK(wire_ipv6__parse(work + 1, n, &r, 0), ==, -EMSGSIZE);
}

TEST(test_ipv6_emit_roundtrip)
{
    struct wire_ipv6_repr r, back;
    memset(&r, 0, sizeof(r));
    r.src.b[0] = 0x20, r.src.b[1] = 0x01, r.src.b[15] = 9;
    r.dst.b[0] = 0xfe, r.dst.b[1] = 0x80, r.dst.b[15] = 7;
    r.tclass = 0xb8;
    r.flow = 0xfffff;
    r.hop_limit = 255;
    r.proto = WIRE_IPPROTO_FRAGMENT;
    r.payload_len = 8 + 24;
    memset(work, 0, sizeof(work));
    wire_ipv6__emit(&r, work + 1);
    wire_ipv6__emit_frag(work + 41, WIRE_IPPROTO_TCP, 2960, true, 0x01020304);
    CHECK(work[1], ==, 0x6b);
    CHECK(work[2], ==, 0x8f);
    CHECK(work[43], ==, 0x0b);          /* 2960 = 0x0b90, M */
    CHECK(work[44], ==, 0x91);
    CHECK(wire_ipv6__parse(work + 1, 40 + 32, &back, 0), ==, 0);
    CHECK(back.tclass, ==, 0xb8);
    CHECK(back.flow, ==, 0xfffff);
    CHECK(back.hop_limit, ==, 255);
    CHECK(memcmp(&back.src, &r.src, 16), ==, 0);
    CHECK(memcmp(&back.dst, &r.dst, 16), ==, 0);
    CHECK(back.fragment, ==, true);
    CHECK(back.frag_offset, ==, 2960);
    CHECK(back.frag_id, ==, 0x01020304);
    CHECK(back.proto, ==, WIRE_IPPROTO_TCP);
    CHECK(wire_ipv6__is_link_local(&back.dst), ==, true);
    CHECK(wire_ipv6__is_multicast(&back.dst), ==, false);
}

TEST(test_ipv6_v4mapped)
{
    struct wire_ipv6_addr a;
    be32 v4 = hton32(0xc6120002), got = 0;
    wire_ipv6__v4mapped(v4, &a);
    CHECK(a.b[10], ==, 0xff);
    CHECK(a.b[9], ==, 0);
    CHECK(wire_ipv6__is_v4mapped(&a, &got), ==, true);
    CHECK(got, ==, v4);
    a.b[9] = 1;
    CHECK(wire_ipv6__is_v4mapped(&a, &got), ==, false);
}

TEST(test_icmpv6_ptb_and_quote)
{
    struct wire_ipv6_repr ip;
    struct wire_icmpv6_repr r;
    struct wire_icmpv6_quote q;
    memcpy(work + 1, icmpv6_ptb, sizeof(icmpv6_ptb));
    CHECK(wire_ipv6__parse(work + 1, sizeof(icmpv6_ptb), &ip, 0), ==, 0);
    CHECK(ip.proto, ==, WIRE_IPPROTO_ICMPV6);
    const uint8_t *m = work + 1 + ip.l4_off;
    size_t ml = ip.total_len - ip.l4_off;
    CHECK(wire_icmpv6__parse(m, ml, &ip.src, &ip.dst, &r, 0), ==, 0);
    CHECK(r.type, ==, WIRE_ICMPV6_PKT_TOO_BIG);
    CHECK(r.param, ==, 1280);
    CHECK(wire_icmpv6__is_error(r.type), ==, true);
    CHECK(wire_icmpv6__parse_quote(&r, &q), ==, 0);
    CHECK(q.ip.proto, ==, WIRE_IPPROTO_TCP);
    CHECK(q.sport, ==, 443);
    CHECK(q.dport, ==, 40000);
    CHECK(q.tcp_seq, ==, 0x01020304u);
    CHECK(q.ip.src.b[15], ==, 2);
    /* the checksum covers the pseudo-header: another source address breaks it */
    struct wire_ipv6_addr other = ip.src;
    other.b[15] = 3;
    CHECK(wire_icmpv6__parse(m, ml, &other, &ip.dst, &r, 0), ==, -EBADMSG);
    CHECK(wire_icmpv6__parse(m, ml, &other, &ip.dst, &r, WIRE_PARSE_NO_CSUM), ==, 0);
    for (size_t l = 0; l < WIRE_ICMPV6_HLEN; l++)
        CHECK(wire_icmpv6__parse(m, l, &ip.src, &ip.dst, &r, WIRE_PARSE_NO_CSUM), ==, -EMSGSIZE);
    /* a quote cut inside the TCP ports, and one cut inside the IPv6 header */
    CHECK(wire_icmpv6__parse(m, 8 + 40 + 5, &ip.src, &ip.dst, &r, WIRE_PARSE_NO_CSUM), ==, 0);
    CHECK(wire_icmpv6__parse_quote(&r, &q), ==, -EMSGSIZE);
    CHECK(wire_icmpv6__parse(m, 8 + 30, &ip.src, &ip.dst, &r, WIRE_PARSE_NO_CSUM), ==, 0);
    CHECK(wire_icmpv6__parse_quote(&r, &q), ==, -EMSGSIZE);
    /* emit over the same body gives the same checksum */
    uint8_t out[108];
    memcpy(out, m, ml);
    struct wire_icmpv6_repr e = { .type = WIRE_ICMPV6_PKT_TOO_BIG, .param = 1280 };
    wire_icmpv6__emit(&e, &ip.src, &ip.dst, out, ml - 8);
    CHECK(out[2], ==, 0xe9);
    CHECK(out[3], ==, 0x30);
}

TEST_MAIN()
