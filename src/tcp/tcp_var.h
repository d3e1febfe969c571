/* Private interfaces between the TCP files (FreeBSD's tcp_var.h): the per-segment context,
 * state changes, timers, output primitives, reassembly, SACK, ISN and SYN cookies. */
#ifndef SLIP_TCP_VAR_H
#define SLIP_TCP_VAR_H

#include <string.h>

#include "tcp/tcp.h"
#include "base/siphash.h"
#include "tcp/tcp_seq.h"
#include "wire/tcp.h"

/* One received segment while it is processed: passed by pointer, never kept in a global. */
struct tcp_seg {
    struct wire_tcp_repr th;
    be32 saddr, daddr;          /* as received: saddr is the peer */
    uint32_t seq, ack;
    uint32_t len;               /* payload bytes (SYN and FIN not counted) */
    slip_idx_t pkt;             /* payload chain (header trimmed), SLIP_NIL when none/consumed */
    uint8_t flags;
    uint8_t tos;                /* the IP header's TOS byte (ECN field: RFC 3168) */
    /* IPv6: saddr/daddr above hold the folds of these (tcp6__fold). */
    bool v6;
    uint32_t ifindex;           /* receiving interface (scope of a link-local peer) */
    struct wire_ipv6_addr saddr6, daddr6;
};

/* Names c (a reply's template or a new child) by the segment's addresses, in its family. */
static inline void tcp_seg__name(struct tcp_conn *c, const struct tcp_seg *s)
{
    c->laddr = s->daddr;
    c->raddr = s->saddr;
    c->lport = s->th.dport;
    c->rport = s->th.sport;
    if (s->v6) {
        c->flags |= TCPF_V6;
        c->laddr6 = s->daddr6;
        c->raddr6 = s->saddr6;
        c->scope = wire_ipv6__is_link_local(&s->saddr6) ? s->ifindex : 0;
    }
}

/* Options we put in a segment: the MSS of a SYN and how many SACK blocks fit. */
static inline uint32_t tcp_seg_len(const struct tcp_seg *s)
{
    return s->len + !!(s->flags & WIRE_TCP_SYN) + !!(s->flags & WIRE_TCP_FIN);
}

/* tcp_conn.c */
void tcp_set_state(struct tcp_shared *sh, struct tcp_conn *c, int state);
int tcp_conn__alloc(struct tcp_shared *sh);
/* True when tcp_conn__alloc would succeed now (a free slot, or a TIME_WAIT one to recycle, which
 * this frees). A SYN we could not hold gets no SYN cookie: see input_listen. */
bool tcp_conn__room(struct tcp_shared *sh);
void tcp_conn__free(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c);
void tcp_conn__hash(struct tcp_shared *sh, struct tcp_conn *c);
void tcp_conn__unhash(struct tcp_shared *sh, struct tcp_conn *c);
void tcp_conn__wake(struct tcp_shared *sh, struct tcp_conn *c);
/* Connection reached CLOSED (reset, timeout, last ACK): report err (positive errno or 0), drop
 * buffers and timers, free it when nobody holds it. */
void tcp_conn__drop(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, int err);
/* Initial values for a fresh connection (buffers, options inherited from a listener). */
void tcp_conn__defaults(struct tcp_shared *sh, struct tcp_conn *c);
/* At connect and listen: a connection whose algorithm TCP_CONGESTION did not choose takes the
 * stack's default as it is now (SLIP_TCP_CC, or the namespace's net.ipv4.tcp_congestion_control
 * as read again at that call), not the one of when its socket was made. */
void tcp_conn__default_cc(const struct tcp_shared *sh, struct tcp_conn *c);
/* Our window scale for a receive buffer (RFC 7323 §2.2); a listener's children and SYN cookies
 * must agree on it. */
uint8_t tcp_conn__wscale(const struct tcp_shared *sh, const struct tcp_conn *c);
/* A SYN (or cookie ACK) s on listener l: a child in SYN_RECEIVED with ISS iss, named by s's
 * addresses in s's family; its index or -EMFILE. */
int tcp_conn__spawn(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *l, const struct tcp_seg *s,
                    uint32_t iss);
/* A child finished its handshake: onto the listener's accept queue; -ENOSPC when it is full. */
int tcp_conn__queue_accept(struct tcp_shared *sh, struct tcp_conn *c);
/* RFC 6928: the initial window is IW10 in segments of the effective send MSS. The congestion
 * control set cwnd from the route's MSS when the connection was made; once the peer's SYN (or
 * the SYN cookie) lowered the MSS, this brings cwnd down to that many segments of it. */
void tcp_conn__clamp_iw(struct tcp_conn *c);
/* Send MSS from the route towards raddr (MTU minus 40, bounded by the frame size and TCP_MAXSEG). */
uint16_t tcp_conn__route_mss(struct ip_env *env, const struct tcp_conn *c);
static inline slip_idx_t tcp_conn__idx(const struct tcp_shared *sh, const struct tcp_conn *c)
{
    return (slip_idx_t)(c - sh->conns);
}
/* The first of n sorted, disjoint ranges that ends above seq (n when none), by bisection: the
 * ranges are elements stride bytes apart whose end (a sequence number) is end_off bytes in. */
static inline unsigned tcp__bisect_end(const void *base, size_t stride, size_t end_off, unsigned n, uint32_t seq)
{
    unsigned lo = 0, hi = n;
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        uint32_t end;
        memcpy(&end, (const uint8_t *)base + (size_t)mid * stride + end_off, sizeof(end));
        if (seq_leq(end, seq))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The table holding c, found from its slot index (only for slots of the table: a connection
 * built on the stack for one reply never has a large map, so never asks). */
static inline struct tcp_shared *tcp_conn__shared(const struct tcp_conn *c)
{
    const struct tcp_conn *first = c - c->self;
    return (struct tcp_shared *)((uintptr_t)first - offsetof(struct tcp_shared, conns));
}

/* tcp_map.c: c's large map, or NULL when it uses its own arrays (or the number is out of range). */
static inline struct tcp_bigmap *tcp_map__big(const struct tcp_conn *c)
{
    if (!c->map)
        return NULL;
    const struct tcp_shared *sh = tcp_conn__shared(c);
    if (c->map > sh->map_high)
        return NULL;
    return &tcp__maps(sh)[c->map - 1];
}
static inline struct tcp_sack_block *tcp_sb(const struct tcp_conn *c)
{
    struct tcp_bigmap *m = tcp_map__big(c);
    return m ? m->sb : (struct tcp_sack_block *)c->sb;
}
static inline struct tcp_txrec *tcp_txr(const struct tcp_conn *c)
{
    struct tcp_bigmap *m = tcp_map__big(c);
    return m ? m->txr : (struct tcp_txrec *)c->txr;
}
static inline unsigned tcp_sb_cap(const struct tcp_conn *c) { return tcp_map__big(c) ? TCP_BIG_SACK : TCP_SACK_MAX; }
static inline unsigned tcp_txr_cap(const struct tcp_conn *c) { return tcp_map__big(c) ? TCP_BIG_TXMAP : TCP_TXMAP_MAX; }
/* Moves c's scoreboard and transmit map into a large map of the pool: false when it has one
 * already or none is free. */
bool tcp_map__grow(struct tcp_conn *c);
/* Gives the large map back (the connection ended, or nothing it sent is outstanding). */
void tcp_map__release(struct tcp_conn *c);

/* The slot at i when it is open to the application (TCPF_USER), else NULL. */
static inline struct tcp_conn *tcp_conn__user(struct tcp_shared *sh, slip_idx_t i)
{
    if (i >= sh->max_conns)
        return NULL;
    struct tcp_conn *c = &sh->conns[i];
    return (c->flags & TCPF_USER) ? c : NULL;
}
static inline bool tcp__addr6_eq(const struct wire_ipv6_addr *a, const struct wire_ipv6_addr *b)
{
    return memcmp(a, b, sizeof(*a)) == 0;
}
/* The listener hash bucket of a port. */
static inline unsigned tcp__lhash(uint16_t lport)
{
    return (lport * 40503u >> 4) & (TCP_LHASH_BUCKETS - 1);
}
/* 4-tuple lookup over IPv4 (connections only, no listener). */
slip_idx_t tcp__lookup4_conn(const struct tcp_shared *sh, be32 laddr, uint16_t lport, be32 raddr, uint16_t rport);
/* Takes c off listener l's accept queue. */
void tcp_conn__acceptq_remove(struct tcp_shared *sh, struct tcp_conn *l, struct tcp_conn *c);
/* Detaches a passive child from its listener (accepted, or dying before that). */
void tcp_conn__detach_parent(struct tcp_shared *sh, struct tcp_conn *c);
/* tcp_listen.c: stops listening (unhashed; children not accepted yet die, established ones with a
 * RST); close also frees the listener's slot. */
void tcp_conn__stop_listener(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *l);
void tcp_conn__close_listener(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *l);
/* Receive window we can offer now (bytes), before SWS rounding. */
uint32_t tcp_rcv_space(const struct tcp_conn *c);
void tcp_rcvq__purge(struct pkt_pool *pool, struct tcp_conn *c);

/* tcp_input.c: the family-independent part of segment arrival, from header parsing on (s has
 * pkt, saddr/daddr and, over IPv6, the IPv6 fields; l4_len bytes checked and trimmed). */
void tcp_input__segment(struct ip_env *env, struct tcp_shared *sh, struct tcp_seg *s, uint32_t l4_len);
/* Cuts a received chain to exactly l4_len bytes; false when it is shorter. */
bool tcp_input__fit(struct pkt_pool *p, slip_idx_t i, uint32_t l4_len);
/* An ICMP(v6) error for c quoting seq: e 0 is "the path MTU dropped" (resend smaller), else the
 * errno of an unreachable error (hard in SYN_SENT, soft otherwise). */
void tcp_icmp__apply(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, uint32_t seq, int e);

/* tcp6.c */
/* Sends a built segment (header and payload in buf, checksum field zero) over IPv6. */
/* ecn: the ECN codepoint for the traffic class's low two bits (RFC 3168 §5: ECT(0) on new data). */
int tcp6__send(struct ip_env *env, struct tcp_conn *c, const struct ip6_route *rt, uint8_t *buf, size_t len,
               uint8_t ecn);
/* Listener lookup for IPv6 (l6 the destination, lf its fold). */
slip_idx_t tcp__lookup_listener6(const struct tcp_shared *sh, be32 lf, const struct wire_ipv6_addr *l6,
                                 uint16_t lport, be32 rf, uint16_t rport);
/* 4-tuple lookup for IPv6 with the folds already computed. */
slip_idx_t tcp__lookup6_conn(const struct tcp_shared *sh, be32 lf, const struct wire_ipv6_addr *l6, uint16_t lport,
                             be32 rf, const struct wire_ipv6_addr *r6, uint16_t rport);

/* tcp_timer.c */
void tcp_timer__set(struct tcp_shared *sh, struct tcp_conn *c, int kind, slip_time_t when);
static inline void tcp_timer__stop(struct tcp_conn *c, int kind) { c->timer[kind] = SLIP_TIME_NEVER; }
static inline bool tcp_timer__armed(const struct tcp_conn *c, int kind) { return c->timer[kind] != SLIP_TIME_NEVER; }
void tcp_timer__stop_all(struct tcp_conn *c);
/* RFC 6298 §2.2/2.3: one RTT sample in nanoseconds. */
void tcp_rtt__sample(struct tcp_conn *c, slip_time_t rtt);
/* Current RTO with backoff, clamped to [TCP_RTO_MIN, TCP_RTO_MAX]. */
slip_time_t tcp_rto(const struct tcp_conn *c);
/* Arms TT_REXMT for now + RTO (restart on new ACK, RFC 6298 §5.3). */
void tcp_timer__rexmt_restart(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c);
void tcp_timer__keep_restart(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c);

/* tcp_output.c */
/* Sends what the state, windows, Nagle/cork and recovery allow, and an owed ACK. */
int tcp_output(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c);
/* After a send queued bytes on c (tcp_io.c, tcp_zc.c): TCP_SEND_MORE / TCP_SEND_AUTOCORK of flags
 * set or clear the connection's hold (a send that does not wait pushes what waited), then output. */
void tcp_send__queued(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, unsigned flags);
/* Sends one segment of the connection now: [seq, seq+len) of the send queue with flags. */
int tcp_output__segment(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, uint32_t seq,
                        uint32_t len, uint8_t flags);
int tcp_output__ack(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c);
int tcp_output__rst(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c);
/* Challenge ACK (RFC 5961 §3.2, §4.2, §5.2), rate limited per tcp_shared (§7). */
void tcp_output__challenge_ack(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c);
/* RST for a segment that has no connection (RFC 9293 §3.10.7.1). */
void tcp_output__rst_reply(struct ip_env *env, struct tcp_shared *sh, const struct tcp_seg *s);
/* Zero-window / keepalive probe: ACK with SEG.SEQ = SND.UNA - 1. */
int tcp_output__probe(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c);
/* A SYN-ACK carrying a SYN cookie for a segment on a listener (no state kept). */
void tcp_output__synack_cookie(struct ip_env *env, struct tcp_shared *sh, const struct tcp_conn *l,
                               const struct tcp_seg *s, uint32_t iss, uint16_t mss, uint32_t tsval);
/* Timestamp clock (RFC 7323 §5.4): milliseconds, plus the connection's offset. */
static inline uint32_t tcp_ts_now(slip_time_t now) { return (uint32_t)(now / SLIP_MSEC); }
/* Bytes in flight not counting SACKed ones (RFC 6675 pipe when SACK is on). */
uint32_t tcp_flight(const struct tcp_conn *c);
/* Usable send MSS for data segments, options subtracted. */
uint32_t tcp_output__data_mss(const struct tcp_conn *c);

/* Linux's chrono (tcp_chrono_start/stop): start switches to kind when it is later than the one
 * running; stop of the running kind falls back to BUSY while data is queued, else to NONE. */
void tcp_chrono__start(struct tcp_conn *c, uint8_t kind, slip_time_t now);
void tcp_chrono__stop(struct tcp_conn *c, uint8_t kind, slip_time_t now);

/* tcp_reass.c */
/* Queues payload at seq (past rcv_nxt) out of order, within memory bounds; takes pkt. *run is
 * set to the run of contiguous data held that now contains seq (empty when the segment was
 * dropped): the block the next SACK option reports first. */
void tcp_reass__add(struct ip_env *env, struct tcp_conn *c, uint32_t seq, slip_idx_t pkt, uint32_t len,
                    struct tcp_sack_block *run);
/* RFC 2883: data [start, end) arrived a second time; the next segment we send reports it. */
void tcp_sack__dup(struct tcp_conn *c, uint32_t start, uint32_t end);
/* Moves segments that became in order to rcvq; returns bytes moved (rcv_nxt advanced). */
uint32_t tcp_reass__pull(struct ip_env *env, struct tcp_conn *c);
void tcp_reass__purge(struct pkt_pool *pool, struct tcp_conn *c);
/* Appends an in-order payload chain (len bytes) to rcvq, coalescing small ones into the tail. */
void tcp_rcvq__append(struct pkt_pool *pool, struct tcp_conn *c, slip_idx_t pkt, uint32_t len);
/* Drops the first n bytes of a payload chain; returns the new head (SLIP_NIL if empty). */
slip_idx_t tcp_pkt__trim_front(struct pkt_pool *pool, slip_idx_t pkt, uint32_t n, uint32_t *freed);
/* Keeps the first n bytes of a payload chain (n > 0); returns buffers freed. */
uint32_t tcp_pkt__trim_back(struct pkt_pool *pool, slip_idx_t pkt, uint32_t n);
/* Buffers in a chain. */
uint32_t tcp_pkt__nbufs(const struct pkt_pool *pool, slip_idx_t pkt);
/* Frames a connection may hold for received data (in order and out of order). */
static inline uint32_t tcp_rcv_frames_max(const struct tcp_conn *c) { return c->rcvbuf / 512 + 64; }
/* Out-of-order segments a connection may hold: a window's worth of full segments behind one hole
 * (an autotuned buffer of some MB holds thousands), at least TCP_OOO_MAX_SEGS. */
static inline uint32_t tcp_ooo_segs_max(const struct tcp_conn *c)
{
    return c->rcvbuf / 1024 > TCP_OOO_MAX_SEGS ? c->rcvbuf / 1024 : TCP_OOO_MAX_SEGS;
}

/* tcp_buf.c: buffer autotuning (Linux tcp_sndbuf_expand, dynamic right-sizing) */
/* The most the receive buffer may grow to (net.ipv4.tcp_rmem[2], bounded). */
uint32_t tcp_buf__rcv_max(const struct tcp_shared *sh);
/* Whether the receive buffer is autotuned: SO_RCVBUF not set, tcp_moderate_rcvbuf not 0. */
bool tcp_buf__rcv_auto(const struct tcp_shared *sh, const struct tcp_conn *c);
/* An ACK freed room after a writer found the send buffer full: grow it to twice cwnd. */
void tcp_buf__snd_expand(const struct ip_env *env, const struct tcp_shared *sh, struct tcp_conn *c);
/* An in-order data segment arrived: the receiver's RTT estimate. */
void tcp_buf__rcv_rtt(struct tcp_conn *c, slip_time_t now);
/* The application read: grow the receive buffer to what it reads per RTT. */
void tcp_buf__rcv_space(const struct ip_env *env, const struct tcp_shared *sh, struct tcp_conn *c);

/* tcp_sack.c */
/* Receiver: the blocks the SACK option reports (RFC 2018 §4) after one segment arrived: latest,
 * the run holding it (tcp_reass__add; NULL for an in-order segment), then the blocks reported
 * before that are still out of order. */
void tcp_sack__rcv_update(const struct pkt_pool *pool, struct tcp_conn *c, const struct tcp_sack_block *latest);
/* Sender: the first scoreboard block that ends above seq (nsb when none); the scoreboard is
 * sorted, so a binary search. */
unsigned tcp_sack__first_above(const struct tcp_conn *c, uint32_t seq);
/* Sender: bytes of [s, e) the scoreboard does not cover. */
uint32_t tcp_sack__unsacked(const struct tcp_conn *c, uint32_t s, uint32_t e);
/* Sender: merges the blocks of an arriving ACK into the scoreboard; returns bytes newly SACKed. */
uint32_t tcp_sack__update(struct tcp_conn *c, const struct wire_tcp_opts *o);
/* Forgets everything below SND.UNA. */
void tcp_sack__clean(struct tcp_conn *c);
bool tcp_sack__is_lost(const struct tcp_conn *c, uint32_t seq);
uint32_t tcp_sack__pipe(const struct tcp_conn *c);
/* RFC 6675 §4 NextSeg(): sets seq and len of the next segment to send; false when none. */
bool tcp_sack__next_seg(const struct tcp_conn *c, uint32_t *seq, uint32_t *len, bool *rexmit);
uint32_t tcp_sack__sacked_bytes(const struct tcp_conn *c);
/* RFC 2883 §4: the ACK's first block reports a duplicate (a D-SACK) when it lies below the
 * cumulative ACK or inside the second block. */
bool tcp_sack__dsack(const struct wire_tcp_opts *o, uint32_t ack);

/* tcp_rack.c: RACK-TLP (RFC 8985), DupThresh marking, PRR (RFC 6937) for SACK connections. */
/* A range [seq, end) (FIN counted) was just sent: new data extends the transmit map, a
 * retransmission gets a new send time and loses its LOST mark. */
void tcp_rack__sent(struct tcp_conn *c, uint32_t seq, uint32_t end, slip_time_t now);
/* Forgets records below SND.UNA. */
void tcp_rack__trim(struct tcp_conn *c);
/* RFC 8985 §6.2 steps 1-3 for an arriving ACK (before the scoreboard takes its blocks).
 * Returns the ACK's round-trip sample for SRTT (ns), or -1 when it gives none. */
int64_t tcp_rack__on_ack(struct tcp_conn *c, uint32_t ack, const struct wire_tcp_opts *o, slip_time_t now);
/* After an ACK: DupThresh and RACK marking, recovery entry, PRR's cwnd, the TLP timer.
 * delivered: bytes newly acknowledged or SACKed by it. */
void tcp_rack__after_ack(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, uint32_t delivered,
                         bool una_advanced);
/* Unsacked bytes in flight not marked lost. */
uint32_t tcp_rack__pipe(const struct tcp_conn *c);
/* TCP_INFO lost / retrans (Linux lost_out, retrans_out), in segments of dmss. */
void tcp_rack__info(const struct tcp_conn *c, uint32_t dmss, uint32_t *lost, uint32_t *retrans);
/* The first unSACKed range marked lost (the caller bounds len by the MSS). */
bool tcp_rack__next_lost(const struct tcp_conn *c, uint32_t *seq, uint32_t *len);
/* Whether anything at or above from is marked lost and not SACKed. */
bool tcp_rack__lost_above(const struct tcp_conn *c, uint32_t from);
bool tcp_rack__has_lost(const struct tcp_conn *c);
void tcp_rack__mark_all_lost(struct tcp_conn *c);
/* Forgets every LOST mark (a spurious episode was undone). */
void tcp_rack__clear_lost(struct tcp_conn *c);
/* RTO on a SACK connection: mark every unSACKed range lost, stop probes. */
void tcp_rack__on_rto(struct tcp_conn *c);
void tcp_rack__schedule_pto(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c);
void tcp_rack__reo_timeout(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c);
void tcp_rack__pto_timeout(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c);
/* RFC 8985 §7.4: ends a probe episode (every ACK, also duplicates that may carry a D-SACK). */
void tcp_rack__tlp_ack(struct ip_env *env, struct tcp_conn *c, uint32_t ack, const struct wire_tcp_opts *o);

/* tcp_rate.c: delivery-rate estimation (draft-cheng-iccrg-delivery-rate-estimation), for
 * algorithms with a cong_control op. */
static inline bool tcp_rate__on(const struct tcp_conn *c)
{
    return tcp_cc__get(c->cc_algo)->cong_control != NULL;
}
/* A range is being (re)sent into record r: its snapshot of the connection's delivery state
 * (zero unless rates are sampled). */
void tcp_rate__snapshot(struct tcp_conn *c, struct tcp_txrec *r, slip_time_t now);
/* An ACK arrived (before the scoreboard takes its blocks and SND.UNA moves): starts rs from
 * the newest range it delivers. */
void tcp_rate__on_ack(struct tcp_conn *c, uint32_t ack, const struct wire_tcp_opts *o, slip_time_t now,
                      struct tcp_rate_sample *rs);
/* After the ACK: delivered bytes newly acknowledged or SACKed by it; completes rs. */
void tcp_rate__gen(struct tcp_conn *c, uint32_t delivered, slip_time_t now, struct tcp_rate_sample *rs);
/* The delivery rate of a valid sample in bytes per second, else 0. */
uint64_t tcp_rate__bps(const struct tcp_rate_sample *rs);
/* After output: marks an application-limited phase when the sender ran out of data. */
void tcp_rate__check_app_limited(struct tcp_conn *c, uint32_t data_end, uint32_t dmss, bool lost_pending);

/* tcp_undo.c: spurious recovery and timeout detection (RFC 3522 timestamps, RFC 2883/3708
 * D-SACK) and the undo of the reduction (Linux; RFC 4015 §2 for timeouts). */
/* A reduction is about to happen (kind TCP_UNDO_RECOVERY or TCP_UNDO_RTO): remember what it
 * replaces. */
void tcp_undo__begin(struct tcp_conn *c, int kind, slip_time_t now);
/* A data segment (len bytes, 0 for a bare FIN) was sent again. */
void tcp_undo__retransmitted(struct tcp_conn *c, uint32_t len, slip_time_t now);
/* A timeout put a SACK connection in the loss state (its first retransmission about to
 * leave): F-RTO (RFC 5682 §3) watches the next two ACKs, unless the timeout ended a fast
 * recovery or is a repeated one. */
void tcp_undo__frto_start(struct tcp_conn *c, bool was_recovery);
/* After an ACK was processed (old_una: SND.UNA before it): D-SACK accounting, F-RTO's steps,
 * and the undo when the episode proves spurious. */
void tcp_undo__on_ack(struct tcp_shared *sh, struct tcp_conn *c, uint32_t old_una, const struct tcp_seg *s);

/* tcp_ecn.c: ECN (RFC 3168). */
/* A SYN (passive) or SYN-ACK (active) arrived: negotiate. */
void tcp_ecn__syn_in(const struct tcp_shared *sh, struct tcp_conn *c, const struct tcp_seg *s, bool active);
/* A segment [seq, seq+len) with *flags is about to leave: adds ECE/CWR to *flags, returns the
 * IP ECN field (ECT(0) for new data of an ECN connection, else 0). */
uint8_t tcp_ecn__out(const struct tcp_shared *sh, struct tcp_conn *c, uint8_t *flags, uint32_t seq, uint32_t len);
/* An acceptable segment arrived: CWR ends the echo, CE starts it; true when an ACK is owed now. */
bool tcp_ecn__seg_in(struct tcp_shared *sh, struct tcp_conn *c, const struct tcp_seg *s);
/* An ACK arrived: the sender's response to ECE. */
void tcp_ecn__ack_in(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, const struct tcp_seg *s);

/* tcp_isn.c; the keyed hash is base/siphash.c's */
static inline uint64_t tcp_siphash(const uint64_t key[2], const void *data, size_t len)
{
    return slip_siphash(key, data, len);
}
/* RFC 6528: ISN = M + F(localip, localport, remoteip, remoteport, secretkey). */
uint32_t tcp_isn(const struct tcp_shared *sh, be32 laddr, uint16_t lport, be32 raddr, uint16_t rport,
                 slip_time_t now);
/* RFC 7323 §5.4: per-connection random offset of TSval. */
uint32_t tcp_ts_offset(const struct tcp_shared *sh, be32 laddr, uint16_t lport, be32 raddr, uint16_t rport);

/* tcp_syncookie.c */
struct tcp_cookie_opts {
    uint16_t mss;
    bool sack_ok, ts_ok, ws_ok;
    uint8_t wscale;
};
/* The ISN of a SYN-ACK that encodes the MSS index (and, with timestamps, the low bits of *tsval
 * carry wscale and SACK-permitted as Linux does). */
uint32_t tcp_syncookie__make(const struct tcp_shared *sh, be32 laddr, uint16_t lport, be32 raddr,
                             uint16_t rport, uint32_t peer_seq, slip_time_t now,
                             const struct tcp_cookie_opts *o, uint32_t *tsval);
/* Checks the ACK that completes a cookie handshake (ack - 1 is the cookie). 0 with *o filled,
 * or -EINVAL. tsecr is the echoed timestamp (0 / has_ts false without). */
int tcp_syncookie__check(const struct tcp_shared *sh, be32 laddr, uint16_t lport, be32 raddr, uint16_t rport,
                         uint32_t peer_seq, uint32_t cookie, slip_time_t now, bool has_ts, uint32_t tsecr,
                         struct tcp_cookie_opts *o);
extern const uint16_t tcp_syncookie_mss[4];

#endif
