/* UDP header (RFC 768): length checks, and the checksum with the IPv4 pseudo-header, including
 * the rules for the value 0 ("no checksum") and its 0xffff stand-in. */
#include <errno.h>
#include <string.h>

#include "wire/checksum.h"
#include "wire/ipv4.h"
#include "wire/udp.h"

int wire_udp__parse(const void *buf, size_t len, struct wire_udp_repr *out)
{
    struct wire_udp_hdr h;
    uint16_t ulen;

    if (SLIP_UNLIKELY(len < WIRE_UDP_HLEN))
        return -EMSGSIZE;
    memcpy(&h, buf, sizeof(h));
    ulen = ntoh16(h.len);
    if (SLIP_UNLIKELY(ulen < WIRE_UDP_HLEN))
        return -EINVAL;
    if (SLIP_UNLIKELY(ulen > len))
        return -EMSGSIZE;
    out->sport = ntoh16(h.sport);
    out->dport = ntoh16(h.dport);
    out->len = ulen;
    out->csum = h.csum;
    return 0;
}

bool wire_udp__csum_ok(const void *buf, size_t udp_len, be32 src, be32 dst)
{
    be16 csum;

    if (udp_len < WIRE_UDP_HLEN || udp_len > UINT16_MAX)
        return false;
    memcpy(&csum, (const uint8_t *)buf + offsetof(struct wire_udp_hdr, csum), 2);
    /* RFC 768: "An all zero transmitted checksum value means that the transmitter generated no
     * checksum"; RFC 1122 §4.1.3.4 lets the receiver accept it. */
    if (csum == 0)
        return true;
    uint32_t sum = wire_csum_pseudo4(src, dst, WIRE_IPPROTO_UDP, (uint16_t)udp_len);
    return wire_csum_fold(wire_csum_add(sum, buf, udp_len)) == 0;
}

void wire_udp__emit(const struct wire_udp_repr *r, void *buf, be32 src, be32 dst)
{
    struct wire_udp_hdr h;
    uint32_t sum;

    h.sport = hton16(r->sport);
    h.dport = hton16(r->dport);
    h.len = hton16(r->len);
    h.csum = 0;
    memcpy(buf, &h, sizeof(h));
    sum = wire_csum_pseudo4(src, dst, WIRE_IPPROTO_UDP, r->len);
    h.csum = wire_csum_fold(wire_csum_add(sum, buf, r->len));
    /* RFC 768: "If the computed checksum is zero, it is transmitted as all ones", since a zero
     * field would mean "no checksum". */
    if (h.csum == 0)
        h.csum = 0xffff;
    memcpy((uint8_t *)buf + offsetof(struct wire_udp_hdr, csum), &h.csum, 2);
}
