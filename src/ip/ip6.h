/* IPv6 (RFC 8200) for the stack, beside IPv4 in ip.h and sharing its environment, transmit
 * batching and reassembly slots: input validation with the extension headers walked with bounds,
 * fragment reassembly, output with route and RFC 6724 source selection from the mirrored kernel
 * tables, hop limit, traffic class, flow label, fragmentation to the path MTU (never below the
 * 1280 bytes every IPv6 link carries), neighbour resolution by the kernel's ND, and ICMPv6
 * errors (packet too big -> path MTU, the rest -> the socket). Neighbour discovery, router
 * advertisements and MLD never reach the stack (the XDP program passes them to the kernel). */
#ifndef SLIP_IP_IP6_H
#define SLIP_IP_IP6_H

#include <string.h>

#include "ip/ip.h"
#include "wire/icmpv6.h"

/* What ip6_input() found: like struct ip_rx, the buffer chain starts at the upper-layer header. */
struct ip6_rx {
    struct wire_ipv6_repr ip;   /* proto: the upper layer, also after reassembly */
    slip_idx_t pkt;
    uint32_t l4_len;
    uint32_t ifindex;
};

/* Validates one received Ethernet frame carrying IPv6 (ethertype 0x86dd) for one of our
 * addresses; same contract as ip_input(). Multicast destinations (ND, MLD) and anything the
 * parser refuses are dropped and counted (ip.rx6_*). */
int ip6_input(struct ip_env *env, slip_idx_t pkt, uint32_t ifindex, struct ip6_rx *out);

struct ip6_route {
    uint32_t ifindex;
    struct wire_ipv6_addr src;
    struct wire_ipv6_addr nexthop;
    uint32_t mtu;               /* min(route or link MTU, cached path MTU), at least 1280 */
    uint8_t src_mac[6];
};

struct ip6_tx {
    struct wire_ipv6_addr src;  /* :: -> the route's source */
    struct wire_ipv6_addr dst;
    uint8_t proto;
    uint8_t hop_limit;          /* 0 -> IP6_DEFAULT_HOPS */
    uint8_t tclass;
    uint32_t flow;              /* 20-bit flow label */
    bool dontfrag;              /* IPV6_DONTFRAG / PMTU probe: -EMSGSIZE instead of fragments */
};

/* Route lookup for dst; oif is the scope id of a link-local dst or a bound device (0: any).
 * -ENETUNREACH, -EHOSTUNREACH (blackhole/unreachable/prohibit), -EINVAL (link-local without
 * scope), -EADDRNOTAVAIL (no usable source) or 0. */
int ip6_output__route(struct ip_env *env, const struct wire_ipv6_addr *dst, uint32_t oif, struct ip6_route *rt);
/* The same for a sender with a source of its own (a connection's local address, every segment):
 * rt->src is src and no source is selected (ctl_tables__route6_from). */
int ip6_output__route_from(struct ip_env *env, const struct wire_ipv6_addr *src, const struct wire_ipv6_addr *dst,
                           uint32_t oif, struct ip6_route *rt);
/* Sends one transport datagram (headers in iov, checksum done over the IPv6 pseudo-header),
 * with a fragment header per RFC 8200 §4.5 when it exceeds the route MTU. 0 or negative errno. */
int ip6_output__send(struct ip_env *env, const struct ip6_route *rt, const struct ip6_tx *tx,
                     const struct iovec *iov, int iovcnt);
/* Releases frames whose neighbour the kernel resolved, re-asks, drops the hopeless; returns the
 * next deadline. */
slip_time_t ip6_neigh__service(struct ip_env *env);

/* Flow labels (RFC 6437, ip6_flow.c; ip_shared.key is their secret) as Linux's net.ipv6.auto_flowlabels gives them: a keyed
 * hash of the flow, the same for every packet of it, in Linux's stateless range (0x80000 set).
 * init takes a 16-byte secret and reads the sysctl of the stack's namespace; label is 0 when
 * the sysctl turned labels off. */
void ip6_flow__init(struct ip_shared *sh, const uint8_t key[16]);
uint32_t ip6_flow__label(const struct ip_shared *sh, const struct wire_ipv6_addr *src,
                         const struct wire_ipv6_addr *dst, uint8_t proto, uint16_t sport, uint16_t dport);
/* The identification of a fragmented datagram from src to dst (RFC 7739 §5.3, keyed). */
uint32_t ip6_flow__frag_id(struct ip_shared *sh, const struct wire_ipv6_addr *src, const struct wire_ipv6_addr *dst);

/* Path MTU for IPv6 (RFC 8201): learnt from packet-too-big, never below 1280, expires. */
void ip6_pmtu__update(struct ip_env *env, const struct wire_ipv6_addr *dst, uint32_t mtu);
uint32_t ip6_pmtu__get(struct ip_env *env, const struct wire_ipv6_addr *dst);

/* An ICMPv6 error quoting one of our datagrams. */
struct ip6_icmp_err {
    uint8_t type, code;
    uint32_t mtu;               /* packet too big */
    struct wire_icmpv6_quote q; /* q.ip.src is our address */
};
/* Parses an ICMPv6 message delivered by ip6_input (checksum verified). Returns 1 for an error
 * quoting a TCP/UDP datagram of ours (packet too big has already lowered the path MTU), 0 for
 * anything else (counted); never frees rx->pkt. */
int ip6_icmp__input(struct ip_env *env, const struct ip6_rx *rx, struct ip6_icmp_err *err);
/* The errno an ICMPv6 error means for a socket (RFC 4443 §3, as Linux's icmpv6_err_convert). */
int ip6_icmp__errno(uint8_t type, uint8_t code);

/* An unkeyed 32-bit mix of an address, for picking a slot in a small direct-mapped cache whose
 * entries hold the whole address (a collision only evicts): the path-MTU cache, TCP's fold
 * cache. Take the top bits for a power-of-two table: (h * slots) >> 32. */
static inline uint32_t ip6_addr__mix(const struct wire_ipv6_addr *a)
{
    uint64_t w[2];
    memcpy(w, a, sizeof(w));
    uint64_t x = w[0] ^ w[1];
    return (uint32_t)(((x ^ (x >> 32)) * 0x9e3779b97f4a7c15ull) >> 32);
}

#endif
