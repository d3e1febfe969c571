/* Ethernet II and ARP views: decode and encode of hand-written frames, truncation, and ARP
 * hardware/protocol types other than Ethernet/IPv4. */
#include <errno.h>

#include "tests/unit/check.h"
#include "wire/arp.h"
#include "wire/eth.h"

/* Broadcast ARP request "who has 198.18.0.2, tell 198.18.0.1" from 02:00:00:00:00:01, written
 * by hand from RFC 826 "Packet format" (htype 1, ptype 0x0800, hlen 6, plen 4, op 1). ARP has
 * no checksum. */
static const uint8_t arp_request[WIRE_ETH_HLEN + WIRE_ARP_LEN] = {
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06,
    0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01,
    0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0xc6, 0x12, 0x00, 0x01,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc6, 0x12, 0x00, 0x02,
};

static const uint8_t mac1[6] = { 0x02, 0, 0, 0, 0, 0x01 };
static const uint8_t bcast[6] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };

TEST(test_eth_decode)
{
    struct wire_eth_repr e;
    uint8_t buf[64];

    /* Unaligned on purpose: frames sit at arbitrary UMEM offsets. */
    memcpy(buf + 1, arp_request, sizeof(arp_request));
    CHECK(wire_eth__parse(buf + 1, sizeof(arp_request), &e), ==, WIRE_ETH_HLEN);
    CHECK_MEM(e.dst, bcast, 6);
    CHECK_MEM(e.src, mac1, 6);
    CHECK(e.type, ==, WIRE_ETHERTYPE_ARP);
    /* Exactly a header is enough; one byte less is not. */
    CHECK(wire_eth__parse(arp_request, 14, &e), ==, 14);
    CHECK(wire_eth__parse(arp_request, 13, &e), ==, -EMSGSIZE);
    CHECK(wire_eth__parse(arp_request, 0, &e), ==, -EMSGSIZE);
}

TEST(test_eth_encode_round_trip)
{
    struct wire_eth_repr e = { .type = WIRE_ETHERTYPE_ARP }, back;
    uint8_t buf[WIRE_ETH_HLEN + 1];

    memcpy(e.dst, bcast, 6);
    memcpy(e.src, mac1, 6);
    wire_eth__emit(&e, buf + 1);
    CHECK_MEM(buf + 1, arp_request, WIRE_ETH_HLEN);
    e.type = WIRE_ETHERTYPE_VLAN;
    wire_eth__emit(&e, buf);
    CHECK(buf[12], ==, 0x81);
    CHECK(buf[13], ==, 0x00);
    CHECK(wire_eth__parse(buf, WIRE_ETH_HLEN, &back), ==, WIRE_ETH_HLEN);
    CHECK(back.type, ==, WIRE_ETHERTYPE_VLAN);
}

TEST(test_arp_decode)
{
    struct wire_arp_repr a;
    const uint8_t *p = arp_request + WIRE_ETH_HLEN;

    CHECK(wire_arp__parse(p, WIRE_ARP_LEN, &a), ==, 0);
    CHECK(a.op, ==, WIRE_ARPOP_REQUEST);
    CHECK_MEM(a.sha, mac1, 6);
    CHECK(ntoh32(a.spa), ==, 0xc6120001);
    CHECK_MEM(a.tha, (uint8_t[6]){ 0 }, 6);
    CHECK(ntoh32(a.tpa), ==, 0xc6120002);
    /* Ethernet pads ARP to 46 bytes: trailing bytes are fine. */
    uint8_t padded[46] = { 0 };
    memcpy(padded, p, WIRE_ARP_LEN);
    CHECK(wire_arp__parse(padded, sizeof(padded), &a), ==, 0);
}

TEST(test_arp_truncated)
{
    struct wire_arp_repr a;
    const uint8_t *p = arp_request + WIRE_ETH_HLEN;

    for (size_t len = 0; len < WIRE_ARP_LEN; len++)
        CHECK(wire_arp__parse(p, len, &a), ==, -EMSGSIZE);
}

/* Each of htype, ptype, hlen, plen changed by hand to a non-Ethernet/IPv4 value. */
TEST(test_arp_unsupported_types)
{
    struct wire_arp_repr a;
    uint8_t v[WIRE_ARP_LEN];
    static const struct { size_t at; uint8_t val; } bad[] = {
        { 1, 6 },       /* htype 6: IEEE 802 */
        { 0, 1 },       /* htype 0x0101 */
        { 2, 0x86 },    /* ptype 0x86dd: IPv6 */
        { 4, 8 },       /* hlen 8 */
        { 5, 16 },      /* plen 16 */
    };

    for (size_t i = 0; i < SLIP_ARRAY_SIZE(bad); i++) {
        memcpy(v, arp_request + WIRE_ETH_HLEN, sizeof(v));
        v[bad[i].at] = bad[i].val;
        CHECK(wire_arp__parse(v, sizeof(v), &a), ==, -EPROTONOSUPPORT);
    }
}

TEST(test_arp_encode_round_trip)
{
    struct wire_arp_repr a = { .op = WIRE_ARPOP_REQUEST, .spa = hton32(0xc6120001),
                               .tpa = hton32(0xc6120002) }, r;
    uint8_t buf[WIRE_ARP_LEN + 3];

    memcpy(a.sha, mac1, 6);
    memset(a.tha, 0, 6);
    wire_arp__emit(&a, buf + 3);
    CHECK_MEM(buf + 3, arp_request + WIRE_ETH_HLEN, WIRE_ARP_LEN);

    /* A reply swaps the roles; decode(encode(x)) == x. */
    struct wire_arp_repr rep = { .op = WIRE_ARPOP_REPLY, .spa = a.tpa, .tpa = a.spa };
    memcpy(rep.sha, (uint8_t[6]){ 0x02, 0, 0, 0, 0, 0x02 }, 6);
    memcpy(rep.tha, mac1, 6);
    wire_arp__emit(&rep, buf);
    CHECK(wire_arp__parse(buf, WIRE_ARP_LEN, &r), ==, 0);
    CHECK(r.op, ==, WIRE_ARPOP_REPLY);
    CHECK_MEM(r.sha, rep.sha, 6);
    CHECK_MEM(r.tha, rep.tha, 6);
    CHECK(r.spa, ==, rep.spa);
    CHECK(r.tpa, ==, rep.tpa);
}

TEST_MAIN()
