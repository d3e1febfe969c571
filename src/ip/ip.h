/* IPv4 for the stack: input validation and classification, fragment reassembly, output with
 * route/neighbour lookup and fragmentation, path-MTU cache and ICMP error parsing. Protocol code:
 * time comes in through env->now and functions return their next deadline, never read a clock.
 * ip/ sits below udp/ and tcp/ and never calls up: the stack's poll loop dispatches what
 * ip_input() classified. */
#ifndef SLIP_IP_IP_H
#define SLIP_IP_IP_H

#include <sys/uio.h>

#include "base/types.h"
#include "ip/netdev.h"
#include "pkt/pkt.h"
#include "wire/ipv4.h"
#include "wire/icmp.h"
#include "wire/ipv6.h"

struct ctl;
struct ctl_tables;

#define IP_REASS_SLOTS      64
#define IP_REASS_TIMEOUT    (30 * SLIP_SEC)    /* Linux ipfrag_time */
#define IP_REASS_PRESSURE_TIMEOUT (1 * SLIP_SEC)   /* instead, while under pressure */
#define IP_REASS_PRESSURE_SLOTS   (IP_REASS_SLOTS * 3 / 4)  /* slots in use that mean pressure */
#define IP_REASS_PER_SRC    (IP_REASS_SLOTS / 4)   /* datagrams in progress per source address */
#define IP_NEIGH_SLOTS      64
#define IP_NEIGH_QLEN       16                 /* datagrams held per unresolved neighbour */
#define IP_NEIGH_TIMEOUT    (3 * SLIP_SEC)     /* give up on a neighbour the kernel cannot resolve */
#define IP_NEIGH_REASK      (1 * SLIP_SEC)
#define IP_PMTU_SLOTS       256
#define IP_PMTU_EXPIRES     (600 * SLIP_SEC)   /* Linux mtu_expires */
#define IP_MIN_MTU          552                /* Linux min_pmtu: below it we keep 552 */
#define IP_DEFAULT_TTL      64
#define IP_TX_KICK_EVERY    64                 /* a long burst is kicked this often as it is built */
/* IPv6 (ip6.h): its own neighbour waits and path-MTU cache; reassembly shares the slots above. */
#define IP6_NEIGH_SLOTS     32
#define IP6_PMTU_SLOTS      128
#define IP6_ID_BUCKETS      64      /* fragment identification counters (RFC 7739 §5.3) */
#define IP6_REASS_TIMEOUT   (60 * SLIP_SEC)    /* RFC 8200 §4.5, Linux ip6frag_time */
#define IP6_DEFAULT_HOPS    64                 /* Linux net.ipv6.conf.*.hop_limit */

/* Everything counted on the IP path. Shown by tools and checked by tests. */
#define IP_COUNTERS(X) \
    X(rx_frames) X(rx_not_ipv4) X(rx_bad_eth) X(rx_truncated) X(rx_bad_header) X(rx_bad_csum) \
    X(rx_bad_options) X(rx_source_route) X(rx_not_local) X(rx_delivered) \
    X(frag_rx) X(frag_bad) X(reass_ok) X(reass_timeout) X(reass_overlap) X(reass_dup) X(reass_time_exceeded_out) \
    X(reass_evict_slot) X(reass_evict_src) X(reass_evict_mem) X(reass_timeout_pressure) \
    X(tx_datagrams) X(tx_frames) X(tx_frags) X(tx_no_route) X(tx_no_frame) X(tx_too_big) \
    X(tx_port_full) X(tx_no_port) \
    X(neigh_wait) X(neigh_resolved) X(neigh_failed) X(neigh_overflow) \
    X(icmp_rx) X(icmp_bad) X(icmp_err_rx) X(pmtu_updates) \
    X(rx6_frames) X(rx6_truncated) X(rx6_bad_header) X(rx6_bad_ext) X(rx6_not_local) X(rx6_delivered) \
    X(frag6_rx) X(frag6_bad) X(reass6_ok) X(reass6_timeout) \
    X(tx6_datagrams) X(tx6_frags) X(tx6_no_route) X(tx6_too_big) X(tx6_no_frame) \
    X(neigh6_wait) X(neigh6_resolved) X(neigh6_failed) X(neigh6_overflow) \
    X(icmp6_rx) X(icmp6_bad) X(icmp6_err_rx) X(pmtu6_updates)

struct ip_counters {
#define IP_COUNTER_FIELD(n) uint64_t n;
    IP_COUNTERS(IP_COUNTER_FIELD)
#undef IP_COUNTER_FIELD
};

/* What names a datagram in reassembly: IPv4 (RFC 791: src, dst, id, protocol) with v4-mapped
 * addresses, or IPv6 (RFC 8200 §4.5: src, dst, 32-bit id; proto 0). */
struct ip_reass_key {
    struct wire_ipv6_addr src, dst;
    uint32_t id;
    uint8_t proto;
    uint8_t v6;
    uint16_t hdr_len;           /* not part of the name: IP header bytes before this fragment's data */
};

struct ip_reass_slot {
    struct ip_reass_key k;
    uint8_t used;
    uint8_t l4_proto;           /* IPv6: upper-layer protocol, from the first fragment */
    uint16_t l4_skip;           /* IPv6: extension headers after the fragment header (first fragment) */
    uint16_t hdr_len;           /* the first fragment's IP header bytes, before its data (for a quote) */
    uint32_t total;             /* payload length, known once the last fragment arrived, else 0 */
    uint32_t received;          /* payload bytes held */
    uint32_t nbufs;
    slip_idx_t frags;           /* buffers sorted by frag_off, linked through pkt_meta.chain */
    uint64_t touched;           /* ip_shared.reass_clock when a fragment last came: eviction order */
    slip_time_t born;           /* first fragment's arrival: timeouts count from here */
};

struct ip_neigh_wait {
    uint32_t ifindex;
    be32 ip;
    uint8_t used;
    struct pkt_queue q;         /* complete frames waiting for a destination MAC */
    slip_time_t expires;
    slip_time_t next_ask;
};

struct ip_pmtu_entry {
    be32 dst;
    uint16_t mtu;
    slip_time_t expires;
};

struct ip6_neigh_wait {
    uint32_t ifindex;
    struct wire_ipv6_addr ip;
    uint8_t used;
    struct pkt_queue q;
    slip_time_t expires;
    slip_time_t next_ask;
};

struct ip6_pmtu_entry {
    struct wire_ipv6_addr dst;
    uint32_t mtu;
    slip_time_t expires;
};

/* IP state in the stack's shared memory. */
struct ip_shared {
    struct ip_counters c;
    uint16_t next_id;
    uint32_t reass_bufs;        /* buffers held by reassembly */
    uint32_t reass_slots;       /* reass[] slots in use: every poll's expiry scan (ip_reass__expire)
                                 * is skipped while it is 0 */
    uint32_t reass_high;        /* at this many, evict the least recently active datagrams ... */
    uint32_t reass_low;         /* ... until fewer than this many (Linux ipfrag_*_thresh) */
    uint64_t reass_clock;       /* counts fragments kept, orders datagrams by last activity */
    slip_time_t reass_time, reass6_time;    /* timeouts: net.ipv4.ipfrag_time, net.ipv6.ip6frag_time */
    struct ip_reass_slot reass[IP_REASS_SLOTS];
    struct ip_neigh_wait neigh[IP_NEIGH_SLOTS];
    uint32_t neigh_pending;     /* slots of neigh[] in use: every sent frame and every poll
                                 * looks at the table, and skips it when this is 0 */
    struct ip_pmtu_entry pmtu[IP_PMTU_SLOTS];
    /* IPv6 (ip6.h) */
    uint8_t auto_flowlabels;    /* net.ipv6.auto_flowlabels says labels by default (ip6_flow.c) */
    uint64_t key[2];            /* secret of the flow label and fragment identification hashes */
    uint32_t id6[IP6_ID_BUCKETS];   /* fragment identification counters (ip6_flow__frag_id) */
    uint32_t neigh6_pending;
    struct ip6_neigh_wait neigh6[IP6_NEIGH_SLOTS];
    struct ip6_pmtu_entry pmtu6[IP6_PMTU_SLOTS];
};

/* One interface's transmit queue: the device its frames go to (each at once, kicked by
 * ip_output__flush(), and every IP_TX_KICK_EVERY frames of a long burst). No frame is held here:
 * see ip_output.c's xmit; unkicked only paces the kicks. */
struct ip_txq {
    struct netdev *dev;
    uint32_t ifindex;
    unsigned unkicked;
};

/* Per-call context, process-local. */
struct ip_env {
    struct pkt_pool *pool;
    struct ip_shared *sh;
    const struct ctl_tables *ctl_t;
    struct ctl *ctl;            /* for neighbour resolution requests; NULL in unit tests */
    struct ip_txq *txq;
    unsigned ntxq;
    slip_time_t now;
    /* The caller is working through a burst of received frames and calls tcp__burst_end after
     * it: TCP may owe one ACK for several of the burst's segments (as Linux after GRO). */
    bool rx_burst;
};

/* What ip_input() found: a datagram for a local address. pkt is the head of a buffer chain whose
 * first buffer starts at the transport header; l4_len is the transport length (header included). */
struct ip_rx {
    struct wire_ipv4_repr ip;
    slip_idx_t pkt;
    uint32_t l4_len;
    uint32_t ifindex;
};

/* reass_high: frames reassembly may hold before it evicts (the low threshold is 3/4 of it). */
void ip_shared__init(struct ip_shared *sh, uint32_t reass_high);

/* Validates one received Ethernet frame (already adopted as pkt). Returns 1 with *out filled when
 * a datagram is ready for the transport layer (its buffers are then the caller's), 0 when the
 * frame was consumed: dropped and counted, or held for reassembly, IP_INPUT_IPV6 when it is an
 * IPv6 frame, left as it was for ip6_input (ip6.h). */
#define IP_INPUT_IPV6 2
int ip_input(struct ip_env *env, slip_idx_t pkt, uint32_t ifindex, struct ip_rx *out);

/* Reassembly (RFC 791 §3.2, with RFC 5722-style rejection of overlaps as Linux does for IPv4).
 * Takes one fragment whose buffer starts at its payload; returns the head of the whole datagram
 * (chain ordered by offset) or SLIP_NIL when more fragments are needed or it was dropped. */
slip_idx_t ip_reass__add(struct ip_env *env, const struct wire_ipv4_repr *ip, slip_idx_t pkt, uint32_t *l4_len);
/* Both families: adds the fragment at byte offset off (more: not the last) to the datagram named
 * by k. For an IPv6 first fragment (off 0), l4_proto and l4_skip say where the upper layer starts;
 * on completion they come back in *l4_proto and the head buffer already skips l4_skip bytes. */
slip_idx_t ip_reass__add_key(struct ip_env *env, const struct ip_reass_key *k, uint32_t off, bool more,
                             uint8_t l4_proto, uint16_t l4_skip, slip_idx_t pkt, uint32_t *l4_len,
                             uint8_t *l4_proto_out);
/* Drops datagrams past their deadline (reass_time / reass6_time, or IP_REASS_PRESSURE_TIMEOUT while
 * ip_reass__pressure()); returns the earliest remaining deadline. */
slip_time_t ip_reass__expire(struct ip_env *env);
/* ip_reass_err.c: the timeouts from the namespace's sysctls (defaults without them), and the
 * "fragment reassembly time exceeded" error for a slot whose first fragment came. */
void ip_reass__read_sysctls(struct ip_shared *sh);
void ip_reass__time_exceeded(struct ip_env *env, const struct ip_reass_slot *s);
/* Under pressure: IP_REASS_PRESSURE_SLOTS datagrams in progress or more frames than reass_low. */
bool ip_reass__pressure(const struct ip_shared *sh);

/* Where a datagram to dst goes. */
struct ip_route {
    uint32_t ifindex;
    be32 src;
    be32 nexthop;
    uint32_t mtu;               /* min(route or link MTU, cached path MTU) */
    uint8_t src_mac[6];
};

struct ip_tx {
    be32 src, dst;
    uint8_t proto;
    uint8_t ttl;
    uint8_t tos;
    bool df;
};

/* Route lookup for dst. -ENETUNREACH, -EHOSTUNREACH (blackhole/unreachable route) or 0. */
int ip_output__route(struct ip_env *env, be32 dst, struct ip_route *rt);
/* Sends one transport datagram (headers already in iov, checksums done), fragmenting to the
 * route MTU unless tx->df (then -EMSGSIZE). Frames wait for the neighbour when needed.
 * Returns 0 or negative errno (-ENOBUFS when out of frames). */
int ip_output__send(struct ip_env *env, const struct ip_route *rt, const struct ip_tx *tx,
                    const struct iovec *iov, int iovcnt);
/* Kicks every device: the frames queued on it go out. */
void ip_output__flush(struct ip_env *env);
/* Kicks only a device that already holds kick_at queued frames or more: the caller kicks later
 * (ip_output__flush, or a poll). Returns the frames left queued unkicked. */
uint32_t ip_output__push(struct ip_env *env, uint32_t kick_at);
/* Releases datagrams whose neighbour got resolved, re-asks the kernel, drops the hopeless.
 * Returns the next deadline. */
slip_time_t ip_neigh__service(struct ip_env *env);
/* Frees everything held (shutdown). */
void ip_shared__purge(struct ip_env *env);

/* Path MTU (RFC 1191): learnt from ICMP fragmentation-needed, expires after IP_PMTU_EXPIRES. */
void ip_pmtu__update(struct ip_env *env, be32 dst, uint32_t mtu);
uint32_t ip_pmtu__get(struct ip_env *env, be32 dst);

/* An ICMP error that quotes one of our datagrams. */
struct ip_icmp_err {
    uint8_t type, code;
    uint16_t mtu;               /* frag-needed */
    struct wire_icmp_quote q;   /* quote.ip.src is our address */
};
/* Parses an ICMP message delivered by ip_input (rx->pkt: whole message, contiguous or chained).
 * Returns 1 for an error quoting a TCP/UDP datagram (filled in *err), 0 for anything else
 * (counted); never frees rx->pkt. */
int ip_icmp__input(struct ip_env *env, const struct ip_rx *rx, struct ip_icmp_err *err);

#endif
