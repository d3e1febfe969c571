/* The unit-test harness (harness.h) with IPv6 added: 2001:2::2/64 and fe80::2/64 on ifindex 2,
 * routes for both prefixes and a default via fe80::1, 2001:2::1 and fe80::1 known neighbours,
 * and a builder of received IPv6 frames. */
#ifndef SLIP_TESTS_HARNESS6_H
#define SLIP_TESTS_HARNESS6_H

#include <arpa/inet.h>

#include "tests/unit/common/harness.h"
#include "ip/ip6.h"

static inline struct wire_ipv6_addr a6(const char *s)
{
    struct wire_ipv6_addr a;
    if (inet_pton(AF_INET6, s, &a) != 1)
        abort();
    return a;
}

#define CHECK_ADDR(a, s) do { struct wire_ipv6_addr e_ = a6(s); CHECK_MEM(&(a), &e_, 16); } while (0)

static inline void add_addr6(struct harness *h, uint32_t ifindex, const char *a, uint8_t len)
{
    h->t->addrs6[h->t->naddrs6++] = (struct ctl_addr6){ .ifindex = ifindex, .addr = a6(a), .prefixlen = len,
                                                        .flags = 0x80 };
}

static inline void add_neigh6(struct harness *h, const char *a, uint16_t state)
{
    struct ctl_neigh6 *n = &h->t->neighs6[h->t->nneighs6++];
    *n = (struct ctl_neigh6){ .ifindex = H_IFINDEX, .addr = a6(a), .state = state };
    memcpy(n->mac, H_PEER_MAC, 6);
}

static inline void h6_init(struct harness *h)
{
    harness_init(h);
    add_addr6(h, H_IFINDEX, "2001:2::2", 64);
    add_addr6(h, H_IFINDEX, "fe80::2", 64);
    h->t->routes6[h->t->nroutes6++] = (struct ctl_route6){ .dst = a6("2001:2::"), .prefixlen = 64,
        .type = RTN_UNICAST, .oif = H_IFINDEX, .priority = 256, .table = RT_TABLE_MAIN };
    h->t->routes6[h->t->nroutes6++] = (struct ctl_route6){ .dst = a6("fe80::"), .prefixlen = 64,
        .type = RTN_UNICAST, .oif = H_IFINDEX, .priority = 256, .table = RT_TABLE_MAIN };
    h->t->routes6[h->t->nroutes6++] = (struct ctl_route6){ .prefixlen = 0, .gateway = a6("fe80::1"),
        .type = RTN_UNICAST, .oif = H_IFINDEX, .priority = 1024, .table = RT_TABLE_MAIN };
    add_neigh6(h, "2001:2::1", NUD_REACHABLE);
    add_neigh6(h, "fe80::1", NUD_REACHABLE);
}

/* A received frame: Ethernet, IPv6 from src to dst, ext (already laid out, its first byte's
 * next-header chain ending in proto), then payload. first_next: the IPv6 header's Next Header. */
static inline slip_idx_t rx6(struct harness *h, const char *src, const char *dst, uint8_t first_next, const void *ext,
                      size_t elen, const void *payload, size_t plen)
{
    slip_idx_t p = pkt__alloc(&h->pool);
    uint8_t *d = pkt__data(&h->pool, p);
    struct wire_eth_repr eth = { .type = WIRE_ETHERTYPE_IPV6 };
    memcpy(eth.dst, H_MAC, 6);
    memcpy(eth.src, H_PEER_MAC, 6);
    wire_eth__emit(&eth, d);
    struct wire_ipv6_repr ip = { .src = a6(src), .dst = a6(dst), .proto = first_next, .hop_limit = 64,
                                 .payload_len = (uint16_t)(elen + plen) };
    wire_ipv6__emit(&ip, d + WIRE_ETH_HLEN);
    if (elen)
        memcpy(d + WIRE_ETH_HLEN + WIRE_IPV6_HLEN, ext, elen);
    memcpy(d + WIRE_ETH_HLEN + WIRE_IPV6_HLEN + elen, payload, plen);
    pkt__meta(&h->pool, p)->len = (uint16_t)(WIRE_ETH_HLEN + WIRE_IPV6_HLEN + elen + plen);
    return p;
}

#endif
