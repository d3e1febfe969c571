/* UDP (RFC 768) sockets of the stack: a table in shared memory sized at run time, a demux hash on the local
 * port, per-socket receive queues of zero-copy buffer chains bounded by SO_RCVBUF bytes, and
 * full-checksum output through ip/. No locking here: the stack layer holds its lock around calls. */
#ifndef SLIP_UDP_UDP_H
#define SLIP_UDP_UDP_H

#include <sys/uio.h>

#include "base/types.h"
#include "ip/ip.h"
#include "ip/ip6.h"
#include "pkt/pkt.h"

#define UDP_HASH_BUCKETS 1024
#define UDP_RCVBUF_DEFAULT 212992  /* Linux net.core.rmem_default */
#define UDP_MAX_PAYLOAD  (65535 - 20 - 8)

enum udp_state {
    UDPS_FREE,
    UDPS_OPEN,                  /* allocated, not bound */
    UDPS_BOUND,                 /* in the demux table */
};

#define UDP_COUNTERS(X) \
    X(rx_datagrams) X(rx_bad_len) X(rx_bad_csum) X(rx_no_socket) X(rx_rcvbuf_drop) \
    X(tx_datagrams) X(tx_errors) X(icmp_errors)

struct udp_counters {
#define UDP_COUNTER_FIELD(n) uint64_t n;
    UDP_COUNTERS(UDP_COUNTER_FIELD)
#undef UDP_COUNTER_FIELD
};

struct udp_sock {
    uint8_t state;
    uint8_t connected;
    uint8_t reuseport;          /* SO_REUSEPORT: may share (laddr, lport), see udp__lookup */
    uint16_t lport, rport;      /* host order */
    be32 laddr, raddr;
    slip_idx_t hnext;           /* demux chain, or free list when UDPS_FREE */
    struct pkt_queue rcvq;      /* bytes counts payload bytes */
    uint32_t rcvbuf;
    int32_t so_error;           /* positive errno, reported once (SO_ERROR semantics) */
    uint64_t rx_datagrams, rx_bytes, rx_drops, tx_datagrams, tx_bytes;
    /* IPv6 (udp6.c): a socket in the IPv6 demux (hash6) as well as, for a dual-stack one bound
     * to ::, the IPv4 one. Kept after the IPv4 fields so the IPv4 path touches the same lines. */
    uint8_t in6;                /* in hash6 */
    uint8_t v6only;             /* in hash6 only, not in the IPv4 demux */
    uint8_t tclass;             /* IPV6_TCLASS */
    uint8_t hops;               /* IPV6_UNICAST_HOPS, 0: the default */
    uint8_t pmtudisc;           /* IPV6_MTU_DISCOVER (IPV6_PMTUDISC_*); 0 (DONT) sends as WANT does */
    uint8_t dontfrag;           /* IPV6_DONTFRAG */
    slip_idx_t hnext6;
    uint32_t scope;             /* sin6_scope_id of a link-local laddr6/raddr6, or 0 */
    struct wire_ipv6_addr laddr6, raddr6;   /* :: = any / not connected to IPv6 */
    /* The flow label of the last IPv6 datagram sent (udp6.c), for the next one to the same
     * place: a keyed hash of everything below, which otherwise costs every datagram a SipHash.
     * Only this socket's own packets read it. Ports in network order. */
    uint8_t fl_set;
    uint16_t fl_sport, fl_dport;
    uint32_t fl_label;
    struct wire_ipv6_addr fl_src, fl_dst;
};

struct udp_shared {
    struct udp_counters c;
    slip_idx_t free_head;
    uint32_t nused;
    uint32_t max_socks;
    uint32_t high_water;        /* slots [0, high_water) were ever used */
    slip_idx_t hash[UDP_HASH_BUCKETS];
    slip_idx_t hash6[UDP_HASH_BUCKETS];     /* IPv6 demux on the local port, chained by hnext6 */
    /* max_socks of them, handed out from the free list first, then from high_water up: only
     * slots ever used are touched (see tcp_shared). */
    struct udp_sock socks[];
};

/* Demux bucket of a local port, for both the IPv4 (hash) and the IPv6 (hash6) table. */
static inline unsigned udp__bucket(uint16_t lport)
{
    return (lport * 40503u >> 6) & (UDP_HASH_BUCKETS - 1);
}

/* Bytes of a udp_shared with room for max_socks sockets. */
size_t udp_shared__bytes(uint32_t max_socks);
void udp_shared__init(struct udp_shared *sh, uint32_t max_socks);

/* Returns a socket index or -EMFILE. */
int udp_sock__alloc(struct udp_shared *sh);
/* Enters (laddr, lport) in the demux table; laddr 0 is INADDR_ANY. -EADDRINUSE when an
 * identical binding exists (unless it and s both have SO_REUSEPORT), -EINVAL when already bound. */
int udp_sock__bind(struct udp_shared *sh, slip_idx_t s, be32 laddr, uint16_t lport);
/* SO_REUSEPORT, taken into account by the next udp_sock__bind (the stack copies it from the
 * application's kernel socket, whose bind() already applied Linux's same-user rule). */
void udp_sock__set_reuseport(struct udp_shared *sh, slip_idx_t s, bool on);
/* Sets the default destination and narrows receive to it (RFC 768 says nothing; POSIX does). */
int udp_sock__connect(struct udp_shared *sh, slip_idx_t s, be32 raddr, uint16_t rport);
/* Frees queued datagrams and the slot. */
void udp_sock__close(struct udp_shared *sh, struct pkt_pool *pool, slip_idx_t s);
static inline struct udp_sock *udp_sock__get(struct udp_shared *sh, slip_idx_t s) { return &sh->socks[s]; }

/* Best match for a received datagram: connected 4-tuple, then bound address, then wildcard.
 * Among unconnected SO_REUSEPORT sockets of the best (laddr, lport), one picked by a hash of the
 * 4-tuple, as Linux spreads datagrams over a reuseport group. */
slip_idx_t udp__lookup(const struct udp_shared *sh, be32 laddr, uint16_t lport, be32 raddr, uint16_t rport);

/* Takes ownership of rx->pkt: checks length and checksum, queues on the socket or drops (counted). */
void udp_input(struct ip_env *env, struct udp_shared *sh, const struct ip_rx *rx);
/* An ICMP error quoting one of our datagrams: sets so_error on a connected socket (as Linux does
 * for port/host unreachable); ignored for unconnected ones. */
void udp_icmp_error(struct udp_shared *sh, const struct ip_icmp_err *err);

/* ---- IPv6 (udp6.c) ---- */

/* A datagram's source, of either family (a dual-stack socket receives both). */
struct udp_peer {
    bool v6;
    be32 v4;
    struct wire_ipv6_addr a6;
    uint32_t scope;             /* receiving interface of a link-local source */
    uint16_t port;              /* host order */
    /* IPv6 datagrams only: the destination they were sent to and the receiving interface
     * (IPV6_PKTINFO). */
    bool has_dst;
    struct wire_ipv6_addr dst;
    uint32_t ifindex;
};

/* Enters an open socket in the IPv6 demux at (laddr6, lport); laddr6 :: is any. dual: also in
 * the IPv4 demux as INADDR_ANY (a dual-stack socket, IPV6_V6ONLY off, bound to ::). scope: the
 * interface of a link-local laddr6. -EADDRINUSE, -EINVAL as udp_sock__bind. */
int udp_sock__bind6(struct udp_shared *sh, slip_idx_t s, const struct wire_ipv6_addr *laddr6, uint16_t lport,
                    uint32_t scope, bool dual);
/* Connects to a native IPv6 peer (raddr6 :: or rport 0: disconnect); a dual-stack socket then
 * stops receiving IPv4. */
int udp_sock__connect6(struct udp_shared *sh, slip_idx_t s, const struct wire_ipv6_addr *raddr6, uint16_t rport,
                       uint32_t scope);
slip_idx_t udp__lookup6(const struct udp_shared *sh, const struct wire_ipv6_addr *laddr, uint16_t lport,
                        const struct wire_ipv6_addr *raddr, uint16_t rport);
/* Takes ownership of rx->pkt: the checksum is mandatory over IPv6 (RFC 8200 §8.1: zero is
 * dropped), then as udp_input. */
void udp6_input(struct ip_env *env, struct udp_shared *sh, const struct ip6_rx *rx);
/* An ICMPv6 error quoting one of our datagrams: so_error on a connected socket for the errors
 * Linux reports there (port unreachable, prohibited, parameter problem, packet too big). */
void udp6_icmp_error(struct udp_shared *sh, const struct ip6_icmp_err *err);
/* udp_sock__recv for a socket that may hold IPv6 datagrams: the source in *from. */
ssize_t udp_sock__recv6(struct udp_shared *sh, struct pkt_pool *pool, slip_idx_t s, void *buf, size_t len,
                        struct udp_peer *from, unsigned flags);
/* Sends to (dst, dport), or to the connected IPv6 peer when dst is NULL; scope: sin6_scope_id
 * of a link-local dst (0: the socket's). Hop limit and traffic class from the socket. */
ssize_t udp_sock__send6(struct ip_env *env, struct udp_shared *sh, slip_idx_t s, const struct iovec *iov,
                        int iovcnt, const struct wire_ipv6_addr *dst, uint16_t dport, uint32_t scope);
/* Internal to udp/: the one's-complement sum of iov (odd-length pieces handled). */
uint32_t udp__csum_iov(uint32_t sum, const struct iovec *iov, int iovcnt);
/* Internal to udp/: unlinks s from the IPv6 demux (close). */
void udp6__unhash(struct udp_shared *sh, slip_idx_t s);

#define UDP_RECV_PEEK  0x1
#define UDP_RECV_TRUNC 0x2      /* return the datagram's real length (MSG_TRUNC) */

/* Copies the next datagram into buf; returns its length (or the copied part), -EAGAIN when the
 * queue is empty. Reports a pending so_error first, as Linux does. */
ssize_t udp_sock__recv(struct udp_shared *sh, struct pkt_pool *pool, slip_idx_t s, void *buf, size_t len,
                       be32 *from, uint16_t *from_port, unsigned flags);
/* Sends one datagram to (dst, dport), or to the connected peer when dst is 0. Returns the
 * payload length or negative errno (-EDESTADDRREQ, -EMSGSIZE, -ENETUNREACH, -ENOBUFS ...). */
ssize_t udp_sock__send(struct ip_env *env, struct udp_shared *sh, slip_idx_t s,
                       const struct iovec *iov, int iovcnt, be32 dst, uint16_t dport);

#endif
