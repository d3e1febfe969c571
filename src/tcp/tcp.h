/* TCP (RFC 9293) for the stack: connections in a fixed table in shared memory (indices, never
 * pointers), demux hashes for 4-tuples and listeners, input organised by RFC 9293 §3.10.7, output,
 * timers, SACK, congestion control, SYN cookies. Time comes in as env->now; tcp_timer__poll()
 * returns the next deadline. No locking inside: the stack holds its lock around every call.
 * Errors are negative errno. A connection is named by its index (slip_idx_t) in the table. */
#ifndef SLIP_TCP_TCP_H
#define SLIP_TCP_TCP_H

#include <sys/types.h>
#include <sys/uio.h>

#include "base/types.h"
#include "ip/ip.h"
#include "ip/ip6.h"
#include "pkt/pkt.h"
#include "tcp/cc/cc.h"
#include "tcp/tcp_fsm.h"
#include "tcp/tcp_timer.h"
#include "wire/tcp.h"

#define TCP_HASH_MIN       64              /* 4-tuple buckets at least (power of two); see tcp_shared__bytes */
#define TCP_LHASH_BUCKETS  256             /* listener buckets, by local port */
#define TCP_FOLD6_SLOTS    16              /* IPv6 address folds remembered (power of two) */
#define TCP_SNDBUF_DEFAULT (256 * 1024)    /* where a buffer starts; autotuning grows it (tcp_buf.c) */
#define TCP_RCVBUF_DEFAULT (256 * 1024)
#define TCP_BUF_MIN        4096
#define TCP_BUF_MAX        (6 * 1024 * 1024)  /* most SO_SNDBUF/SO_RCVBUF take */
#define TCP_WMEM_MAX_DEFAULT (4 * 1024 * 1024) /* Linux net.ipv4.tcp_wmem[2], if unreadable */
#define TCP_RMEM_MAX_DEFAULT (6 * 1024 * 1024) /* Linux net.ipv4.tcp_rmem[2], if unreadable */
#define TCP_BUF_AUTO_LIMIT (32 * 1024 * 1024) /* autotuning's ceiling, whatever the sysctls say */
#define TCP_LOCK_SND       0x1             /* buf_lock: SO_SNDBUF was set (Linux SOCK_SNDBUF_LOCK) */
#define TCP_LOCK_RCV       0x2             /* buf_lock: SO_RCVBUF was set (Linux SOCK_RCVBUF_LOCK) */
#define TCP_MSS_NO_OPTION    536             /* RFC 9293 §3.7.1 when the peer sends no MSS option */
#define TCP_MSS_MIN        88              /* Linux TCP_MIN_MSS */
#define TCP_INIT_CWND      10              /* segments, RFC 6928 (as Linux) */
#define TCP_RTO_INIT       (1 * SLIP_SEC)  /* RFC 6298 §2.1 */
#define TCP_RTO_MIN        (200 * SLIP_MSEC) /* Linux; RFC 6298 §2.4 says 1 s (COMPLIANCE-tcp.md) */
#define TCP_RTO_MAX        (120 * SLIP_SEC)
#define TCP_SYN_RETRIES    6
#define TCP_SYNACK_RETRIES 5
#define TCP_RETRIES2       15
#define TCP_ORPHAN_RETRIES 8               /* Linux default for closed-by-application connections */
#define TCP_DELACK_TIME    (40 * SLIP_MSEC)
#define TCP_QUICKACKS      16              /* Linux TCP_MAX_QUICKACKS */
/* Within a received burst (ip_env.rx_burst) the ACK data calls for waits for the end of the run
 * of contiguous segments (or of the burst), up to this many unacknowledged bytes (Linux's GRO
 * packet: 64 KiB) and this many connections a burst. */
#define TCP_BURST_ACK_BYTES 65535u
#define TCP_BURST_ACKS      64
/* SACK compression (as Linux's receiver, tcp_comp_sack_*): while a hole is open, the first
 * TCP_COMP_DUPS ACKs at one RCV.NXT go at once (the sender's duplicate-ACK threshold); later
 * ones for out-of-order data wait TCP_COMP_RTT_DIV of the RTT (at most TCP_COMP_MAX_DELAY) or
 * until TCP_COMP_SEGS segments wait. */
#define TCP_COMP_DUPS       3
#define TCP_COMP_SEGS       44
#define TCP_COMP_RTT_DIV    20
#define TCP_COMP_MAX_DELAY  SLIP_MSEC
#define TCP_TIMEWAIT_LEN   (60 * SLIP_SEC) /* 2*MSL as Linux */
#define TCP_FIN_TIMEOUT    (60 * SLIP_SEC) /* orphaned FIN_WAIT_2 */
#define TCP_KEEPIDLE_DEFAULT       7200            /* seconds, Linux defaults */
#define TCP_KEEPINTVL_DEFAULT      75
#define TCP_KEEPCNT_DEFAULT        9
#define TCP_SYNQ_MAX       256             /* bound of half-open children per listener */
#define TCP_SACK_MAX       32              /* scoreboard blocks (sender side), in the connection */
#define TCP_TXMAP_MAX      256             /* transmit-time records for RACK (sender side), likewise */
/* A connection whose window outgrows those takes a large map from its stack's pool (tcp_map.c):
 * a window of thousands of segments after a burst of tail drops has a hole every other segment,
 * and a scoreboard that forgets blocks makes the sender resend what arrived. */
#define TCP_BIG_SACK       2048
#define TCP_BIG_TXMAP      4096
#define TCP_BIG_MAPS       32              /* per stack (at most one per connection slot) */
#define TCP_OOO_MAX_SEGS   256             /* out-of-order segments held, at least (tcp_ooo_segs_max) */
#define TCP_CHALLENGE_ACK_LIMIT 1000       /* per second per tcp_shared (RFC 5961 §7) */

/* Connection flags (struct tcp_conn.flags). */
#define TCPF_USER        0x00000001u   /* the application holds it (opened or accepted) */
#define TCPF_ORPHAN      0x00000002u   /* the application closed it; freed once CLOSED */
#define TCPF_NODELAY     0x00000004u
#define TCPF_CORK        0x00000008u
#define TCPF_MORE        0x00000010u   /* last send had MSG_MORE (its tail: no PSH, the 200 ms limit) */
#define TCPF_KEEPALIVE   0x00000020u
#define TCPF_SACK_OK     0x00000040u   /* negotiated (RFC 2018) */
#define TCPF_TS_OK       0x00000080u   /* negotiated (RFC 7323 §3) */
#define TCPF_WS_OK       0x00000100u   /* negotiated (RFC 7323 §2) */
#define TCPF_FIN_QUEUED  0x00000200u   /* shutdown(WR)/close: FIN after the send queue */
#define TCPF_FIN_SENT    0x00000400u
#define TCPF_RCVD_FIN    0x00000800u   /* the peer's FIN was taken in order: EOF after rcvq */
#define TCPF_SHUT_RD     0x00001000u
#define TCPF_ACK_NOW     0x00002000u
#define TCPF_ACK_PENDING 0x00004000u   /* an ACK is owed (delayed) */
#define TCPF_RECOVERY    0x00008000u   /* in fast recovery */
#define TCPF_OOO_FIN     0x00010000u   /* a FIN arrived beyond a hole: at rcv_fin_seq */
#define TCPF_IN_WAKE     0x00020000u   /* on the wake list */
#define TCPF_HASHED      0x00040000u   /* in the 4-tuple hash */
#define TCPF_LHASHED     0x00080000u   /* in the listener hash */
#define TCPF_IN_ACCEPTQ  0x00100000u
#define TCPF_LINGER      0x00200000u   /* SO_LINGER on (linger seconds in .linger) */
#define TCPF_PASSIVE     0x00400000u   /* opened from a listener */
#define TCPF_RTT_TIMING  0x00800000u   /* rt_seq/rt_time time one segment (Karn) */
#define TCPF_SYNCOOKIE   0x01000000u   /* created from a valid SYN cookie */
#define TCPF_DONE        0x02000000u   /* dropped (reset, timeout): both directions shut */
#define TCPF_LOSS        0x04000000u   /* SACK connection recovering from an RTO (Linux "Loss") */
#define TCPF_REUSEPORT   0x08000000u   /* SO_REUSEPORT: may share (laddr, lport) with other listeners */
#define TCPF_OPEN_FAILED 0x10000000u   /* dropped in SYN_SENT: connect() may be tried again (Linux) */
#define TCPF_AUTOCORK    0x20000000u   /* the last send's partial tail waits for tcp_conn__uncork */
#define TCPF_PUSH_HELD   0x40000000u   /* this output sends what cork/MSG_MORE hold (TCP_NODELAY set) */
#define TCPF_V6          0x80000000u   /* IPv6 (tcp6.c): laddr6/raddr6 name it, laddr/raddr hold their folds */

/* Readiness bits returned by tcp_conn__poll(), equal to the epoll ones. */
#define TCP_EV_IN    0x001u   /* EPOLLIN */
#define TCP_EV_OUT   0x004u   /* EPOLLOUT */
#define TCP_EV_ERR   0x008u   /* EPOLLERR */
#define TCP_EV_HUP   0x010u   /* EPOLLHUP */
#define TCP_EV_RDHUP 0x2000u  /* EPOLLRDHUP */

/* Flags of tcp_conn__send / tcp_conn__recv. */
#define TCP_SEND_MORE 0x1     /* MSG_MORE */
#define TCP_SEND_AUTOCORK 0x2 /* hold a partial last segment until tcp_conn__uncork: the caller's
                               * frames wait for a later TX kick anyway, so sends made before it
                               * leave in full segments (Linux's autocorking, for the same reason:
                               * the previous packet has not left the host yet) */
#define TCP_SEND_EOR 0x4      /* MSG_EOR: this send ends a record; no segment joins it to the next */
#define TCP_RECV_PEEK 0x1     /* MSG_PEEK */

struct tcp_sack_block {
    uint32_t start, end;      /* [start, end) */
};

/* RACK (RFC 8985 §5.2): when a range of sequence space was last sent. Records are sorted,
 * disjoint and cover [SND.UNA, SND.MAX) of a SACK connection; a burst sent at one instant is
 * one record. SACKed state comes from the scoreboard, not from here. */
#define TXR_LOST    0x1u      /* marked lost, waiting to be retransmitted */
#define TXR_MARKED  0x4u      /* marked lost, resent or not (Linux's TCPCB_LOST: TCP_INFO lost) */
#define TXR_RETRANS 0x2u      /* retransmitted at least once (RTT samples are ambiguous) */
#define TXR_APP_LTD 0x8u      /* sent in an application-limited phase (tcp_rate.c) */
/* The rs_* fields are the delivery-rate snapshot taken when the range was (last) sent
 * (draft-cheng-iccrg-delivery-rate-estimation §3.2 P.delivered, P.delivered_time,
 * P.first_sent_time), kept only for connections whose congestion control samples rates (BBR):
 * for the others they stay 0, so merging records works as before. */
struct tcp_txrec {
    uint32_t start, end;
    uint32_t xmit_us;         /* send time, microseconds (wraps; compared as int32 differences) */
    uint32_t flags;           /* TXR_* */
    uint32_t rs_delivered;    /* C.delivered when sent (low 32 bits; differences only) */
    uint32_t rs_delivered_us; /* C.delivered_time when sent */
    uint32_t rs_first_tx_us;  /* C.first_sent_time when sent */
};

/* Delivery-rate estimation state of a connection (draft-cheng-iccrg-delivery-rate-estimation
 * §3.1 names; tcp_rate.c). Times in microseconds of the stack clock, wrapping. */
struct tcp_rate {
    uint64_t delivered;       /* C.delivered: bytes delivered (cumulatively ACKed or SACKed) */
    uint64_t app_limited;     /* C.app_limited: end of the app-limited phase in delivered bytes, 0: none */
    uint32_t delivered_us;    /* C.delivered_time */
    uint32_t first_tx_us;     /* C.first_sent_time */
    uint32_t rwnd_held;       /* nonzero: the peer's window held data back since BBR's last round start */
};

/* ECN state of a connection (RFC 3168, tcp_ecn.c). */
#define TCP_ECN_OK       0x01u  /* negotiated: new data leaves ECT(0) */
#define TCP_ECN_ECE      0x02u  /* a CE arrived: ACKs carry ECE until the peer's CWR */
#define TCP_ECN_CWR      0x04u  /* reduced for an ECE: the next new data carries CWR */
#define TCP_ECN_SYN_SENT 0x08u  /* our SYN asked for ECN */
#define TCP_ECN_WAIT     0x10u  /* reduced for an ECE in the window ending at ecn_high */

/* SYN options a stack neither offers nor accepts (tcp_shared.opts_off, from the sysctls
 * net.ipv4.tcp_timestamps, tcp_sack and tcp_window_scaling at 0). */
#define TCP_OPTS_OFF_TS   0x01u
#define TCP_OPTS_OFF_SACK 0x02u
#define TCP_OPTS_OFF_WS   0x04u

/* Counters of one connection (what `slipstream stat` shows). bytes_out counts each data byte
 * once, when it is first sent; every later copy goes to retransmits/retrans_bytes. */
struct tcp_conn_stats {
    uint64_t segs_in, segs_out, bytes_in, bytes_out, bytes_acked;
    uint64_t retransmits, retrans_bytes, rto_expiries, fast_retransmits, recoveries;
    uint64_t dupacks_in, ooo_segs, ooo_drops, rcv_drops, zero_window_probes, keepalive_probes;
    uint64_t challenge_acks, no_frame;
    uint64_t tlp_probes, rack_lost;   /* RFC 8985: loss probes sent, segments RACK marked lost */
    uint64_t recovery_probes;         /* probes sent in recovery or after an RTO (tcp_rack.c) */
    uint64_t ecn_reductions;          /* cwnd reductions for an ECN echo (tcp_ecn.c) */
    uint64_t undos;                   /* reductions undone as spurious (tcp_undo.c) */
    uint64_t bbr_acks;                /* ACKs BBR's model took (cc/bbr.c) */
    uint64_t paced_waits;             /* times pacing held data back (tcp_output.c) */
};

/* A congestion episode that may prove spurious (tcp_undo.c): what the reduction replaced, and
 * the evidence collected since (RFC 3522 RetransmitTS, RFC 3708 D-SACKed retransmissions). */
#define TCP_UNDO_NONE     0
#define TCP_UNDO_RECOVERY 1   /* fast recovery (RFC 6675 / RACK) */
#define TCP_UNDO_RTO      2   /* retransmission timeout */
struct tcp_undo {
    uint8_t kind;             /* TCP_UNDO_* */
    uint8_t have_ts;          /* retrans_ts is set */
    uint8_t eifel_done;       /* the first new ACK after the timeout was judged */
    uint8_t frto;             /* F-RTO (RFC 5682 §3): 0 off, 1 step 2, 2 step 3 (tcp_undo.c) */
    uint8_t orig_acked;       /* this ACK delivered data below frto_recover never retransmitted */
    uint8_t pad[3];
    uint32_t frto_recover;    /* RFC 5682 "recover": SND.MAX when the timeout fired */
    uint32_t marker;          /* SND.UNA when the episode began */
    uint32_t retrans_ts;      /* our timestamp clock (no offset) at the first retransmission */
    uint32_t retrans_segs;    /* retransmitted segments no D-SACK has reported yet */
    uint32_t prior_cwnd, prior_ssthresh;
    struct tcp_cc_state prior_cc;
};

struct tcp_conn {
    uint8_t state;            /* TCPS_* */
    uint8_t cc_algo;          /* TCP_CC_* */
    uint8_t snd_wscale, rcv_wscale;
    uint32_t flags;           /* TCPF_* */
    be32 laddr, raddr;
    uint16_t lport, rport;    /* host order */
    slip_idx_t hnext;         /* hash chain (4-tuple or listener), free list when unused */
    slip_idx_t parent;        /* listener of a passive child until accepted */
    slip_idx_t qnext;         /* accept-queue link */
    slip_idx_t wnext;         /* wake-list link */

    /* Listener. */
    uint32_t backlog, synq_len, acceptq_len;
    slip_idx_t acceptq_head, acceptq_tail;

    /* Send side (RFC 9293 §3.3.1 names). */
    uint32_t iss, snd_una, snd_nxt, snd_max, snd_wnd, snd_wl1, snd_wl2, max_sndwnd;
    uint32_t snd_q_seq;       /* sequence number of the first byte in sndq */
    uint32_t snd_recover;     /* RFC 6582 "recover" / RFC 6675 RecoveryPoint */
    uint32_t high_rxt;        /* RFC 6675 HighRxt */
    uint32_t snd_sml;         /* end of the last partial segment sent (Nagle, Minshall's variant) */
    uint32_t cwnd, ssthresh;
    /* Linux's cwnd use per window (tcp_cwnd_validate): the most in flight since cwnd_usage_seq
     * was sent, and whether cwnd stopped the sender in that window (tcp_output.c). */
    uint32_t max_flight, cwnd_usage_seq;
    uint8_t cwnd_limited;
    uint8_t in_send;          /* tcp_send__queued's output runs: MSG_MORE holds only then */
    uint8_t sndbuf_full;      /* a send found too little room (Linux SOCK_NOSPACE): TCP_INFO */
    uint8_t buf_lock;         /* TCP_LOCK_*: the application sized a buffer, no autotuning */
    uint8_t eor_recs;         /* a send with MSG_EOR queued data: the output looks for record ends */
    uint16_t mss;             /* effective send MSS (no options): peer MSS clamped by route */
    uint16_t peer_mss, user_mss, rcv_mss;
    uint16_t dupacks;
    uint16_t nsb;             /* scoreboard blocks in use */
    uint8_t nrsack;           /* receive-side SACK blocks to report */
    struct pkt_queue sndq;    /* buffers of unacked and unsent data; bytes = data bytes */
    uint32_t sndbuf;

    /* Receive side. */
    uint32_t irs, rcv_nxt, rcv_adv, rcv_fin_seq;
    uint32_t rcvbuf;
    /* Receive-buffer autotuning (tcp_buf.c, Linux's dynamic right-sizing): the receiver's RTT
     * estimate, the window-edge measurement behind it, and what the application read in the
     * current measurement interval. */
    slip_time_t rcv_rtt, rcv_rtt_time, rcvq_time;
    uint32_t rcv_rtt_seq, rcvq_seq, rcvq_space;
    struct pkt_queue rcvq;    /* in order; each head's meta.total = payload bytes of that entry */
    uint32_t rcv_frames;      /* buffers held by rcvq + ooo */
    slip_idx_t ooo_head;      /* out of order: heads sorted by seq, linked by meta.next */
    slip_idx_t ooo_tail;      /* its last entry when known, else SLIP_NIL (an append skips the walk) */
    uint32_t ooo_tail_run;    /* with ooo_tail: where the run of contiguous entries ending there starts */
    uint32_t ooo_bytes, ooo_segs;
    uint32_t rcv_unacked;     /* bytes received since the last ACK we sent */
    uint16_t quickacks;
    uint8_t burst_ack;        /* an ACK owed at the end of the received burst (tcp__burst_end) */
    uint8_t comp_dups;        /* ACKs sent with a hole open at comp_rcv_nxt (SACK compression) */
    uint16_t comp_segs;       /* out-of-order segments whose ACK waits (SACK compression) */
    uint16_t pad_ack_;
    uint32_t comp_rcv_nxt;    /* RCV.NXT of the ACKs comp_dups counts */
    uint32_t burst_next;      /* where the last data segment received ended (a run's next) */
    uint32_t last_ack_sent;

    /* The scoreboard and the transmit map are here, or in the stack's large map number map - 1
     * (tcp_map.c); read them through tcp_sb() and tcp_txr(). */
    struct tcp_sack_block sb[TCP_SACK_MAX];   /* sender scoreboard, sorted, disjoint */
    struct tcp_txrec txr[TCP_TXMAP_MAX];      /* RACK transmit times (tcp_rack.c) */
    uint16_t ntxr;
    uint16_t map;             /* 0: the arrays above; else a large map of the pool */
    slip_idx_t self;          /* this slot's index in the table (finds the pool) */
    uint8_t rack_flags;       /* RACKF_* (tcp_rack.c) */
    uint8_t tlp_state;        /* 0 none, 1 new-data probe, 2 retransmission probe outstanding,
                               * 3 recovery probe outstanding (tcp_rack.c) */
    uint8_t rprobes;          /* loss probes of the current silence (tcp_rack.c probe_again_later) */
    uint8_t ecn;              /* TCP_ECN_* (tcp_ecn.c) */
    uint32_t tlp_end;         /* RFC 8985 TLP.end_seq */
    uint32_t ecn_high;        /* RFC 3168 §6.1.2: no second reduction before SND.UNA passes it */
    /* RFC 8985 §6.1 RACK.xmit_ts / end_seq / rtt / min_RTT, and the highest delivered byte. */
    uint32_t rack_xmit_us, rack_end, rack_rtt_us, rack_min_rtt_us, rack_fack;
    /* RFC 6937 PRR: bytes delivered and sent since recovery began, flight at its start. */
    uint32_t prr_delivered, prr_out, prr_recover_fs;
    struct tcp_sack_block rsack[WIRE_TCP_MAX_SACK]; /* receiver: blocks we report, newest first */
    struct tcp_sack_block dsack;  /* receiver: a duplicate to report once, first (RFC 2883 §4);
                                   * start == end: none */

    /* Timestamps (RFC 7323). */
    uint32_t ts_recent, ts_offset;

    /* RTT (RFC 6298), in microseconds. */
    uint32_t srtt_us, rttvar_us, rto_us;
    uint32_t rt_seq;
    slip_time_t rt_time;
    uint8_t rxt_shift, persist_shift, keep_probes, probes_out;  /* probes_out: unanswered window probes */

    slip_time_t timer[TT_NTIMERS];
    slip_time_t last_rx;      /* for keepalive */

    uint32_t keepidle, keepintvl, keepcnt;   /* seconds, seconds, probes */
    uint32_t user_timeout_ms;  /* TCP_USER_TIMEOUT, 0 = none */
    slip_time_t rtx_stamp;    /* since when the oldest unacknowledged data waits (user timeout) */
    slip_time_t probe_stamp;  /* first zero-window probe of this episode (user timeout), 0: none */
    int32_t linger;           /* seconds when TCPF_LINGER */
    int32_t so_error;         /* positive errno, reported once */
    int32_t soft_error;       /* last ICMP soft error, reported on timeout */

    struct tcp_cc_state cc;
    struct tcp_undo undo;
    /* Delivery-rate sampling and pacing, for algorithms with a cong_control op (BBR). */
    struct tcp_rate rate;
    uint64_t pacing_rate;     /* bytes per second; 0: not paced (tcp_output.c) */
    slip_time_t pace_vt;      /* pacing token bucket: when it was (or will be) empty */
    uint32_t pace_quantum;    /* bucket depth in bytes (the burst one pacing slot may send) */
    struct tcp_conn_stats st;

    /* For TCP_INFO (Linux's struct tcp_info): when new data last left, data last arrived and an
     * ACK last arrived; the MSS our SYN offered; and Linux's "chrono": time spent busy (data
     * unacknowledged or unsent), limited by the peer's window, limited by the send buffer. */
    slip_time_t last_data_tx, last_data_rx, last_ack_rx;
    slip_time_t chrono_start;
    uint64_t chrono_ns[3];    /* by TCP_CHRONO_* - 1 */
    uint8_t chrono_type;      /* TCP_CHRONO_*: the one running since chrono_start */
    uint8_t cc_user;          /* TCP_CONGESTION chose cc_algo: connect and listen keep it */
    uint16_t adv_mss;

    /* IPv6 (tcp6.c), last so the IPv4 path touches the same lines as before. With TCPF_V6 the
     * 16-byte addresses name the connection and laddr/raddr hold their keyed 32-bit folds
     * (tcp6__fold; :: folds to 0), so the 4-tuple hash, the ISN, timestamp offsets and SYN
     * cookies work unchanged on both families; every comparison also checks the family. */
    uint8_t v6only;           /* a listener on :: with IPV6_V6ONLY: no IPv4 SYNs */
    uint8_t tclass;           /* IPV6_TCLASS of its IPv6 segments (children inherit it, as Linux) */
    uint8_t hops;             /* IPV6_UNICAST_HOPS, 0: the default */
    uint32_t scope;           /* interface of a link-local raddr6 (0: none) */
    struct wire_ipv6_addr laddr6, raddr6;
    uint32_t flowlabel;       /* of its IPv6 segments (ip6_flow__label), 0: not computed yet */
};

/* Linux's chrono kinds (tcp_info busy_time, rwnd_limited, sndbuf_limited); a later kind
 * preempts an earlier one. */
#define TCP_CHRONO_NONE   0
#define TCP_CHRONO_BUSY   1
#define TCP_CHRONO_RWND   2
#define TCP_CHRONO_SNDBUF 3

/* Counters of the whole TCP layer. */
#define TCP_COUNTERS(X) \
    X(segs_in) X(segs_out) X(bad_csum) X(bad_header) X(bad_options) X(no_conn) X(rst_out) \
    X(rst_in) X(rst_ignored) X(challenge_acks) X(challenge_ack_limited) X(syn_in) X(syncookies_sent) \
    X(syncookies_ok) X(syncookies_failed) X(listen_overflows) X(listen_drops) X(synq_drops) \
    X(paws_drops) X(old_ack_drops) X(out_of_window) X(retransmits) X(rto_expiries) \
    X(fast_retransmits) X(ooo_drops) X(rcvbuf_drops) X(no_frame) X(conn_full) X(syn_full_drops) \
    X(cookie_full_rsts) X(tw_recycled) \
    X(tw_reused) X(active_opens) X(passive_opens) X(conn_timeouts) X(conn_resets) X(abort_on_data) X(icmp_errors) \
    X(pmtu_reductions) X(keepalive_drops) X(zero_window_probes) X(tlp_probes) X(rack_lost) \
    X(spurious_rto) X(undo_recovery) X(dsacks_in) X(dsacks_out) X(recovery_probes) \
    X(frto_spurious) X(ecn_ce_in) X(ecn_reductions) X(bbr_acks) X(paced_waits) X(burst_acks) X(sack_compressed) \
    X(big_maps_taken) X(big_maps_none) X(syn_rto)

struct tcp_counters {
#define TCP_COUNTER_FIELD(n) uint64_t n;
    TCP_COUNTERS(TCP_COUNTER_FIELD)
#undef TCP_COUNTER_FIELD
};

#define TCP_FREED_RING 256

struct tcp_shared {
    struct tcp_counters c;
    uint64_t key[4];          /* secret: [0..1] ISN / TS offset, [2..3] SYN cookies */
    uint32_t max_conns;
    uint32_t nused;
    uint32_t high_water;      /* slots [0, high_water) were ever used: timer scan bound */
    slip_idx_t free_head;
    slip_idx_t wake_head, wake_tail;
    slip_time_t next_deadline;   /* earliest timer of any connection (a lower bound) */
    slip_time_t challenge_window;
    uint32_t challenge_count;
    uint8_t default_cc;
    uint8_t cc_sysctl;        /* 1: default_cc follows net.ipv4.tcp_congestion_control */
    uint8_t syncookies;       /* 0 never, 1 when the SYN queue overflows (Linux default), 2 always */
    uint8_t ecn;              /* net.ipv4.tcp_ecn: 0 off, 1 ask and accept, 2 accept (default) */
    uint8_t opts_off;         /* TCP_OPTS_OFF_*: options the namespace's sysctls turned off */
    uint8_t moderate_rcvbuf;  /* net.ipv4.tcp_moderate_rcvbuf + 1 (0: not read, taken as on) */
    uint32_t wmem_max, rmem_max;  /* net.ipv4.tcp_wmem[2], tcp_rmem[2] (0: not read); bounded on use */
    uint32_t hash_mask;       /* 4-tuple buckets - 1; the buckets follow conns[max_conns] */
    uint32_t tw_entered;      /* connections that entered TIME_WAIT so far ... */
    uint32_t tw_full_seen;    /* ... when a full table last found none to recycle (+1; 0 never) */
    uint32_t nmaps;           /* large maps after the hash buckets (tcp_map.c) */
    uint32_t map_free;        /* first free one + 1 (0: none) */
    uint32_t map_high;        /* [0, map_high) were ever handed out */
    slip_idx_t lhash[TCP_LHASH_BUCKETS];
    /* The last IPv6 addresses tcp6_input folded, direct-mapped by an unkeyed hash of the
     * address: a segment's two folds (two SipHashes) are otherwise the dearest thing its IPv6
     * path does beyond IPv4's. An entry holds the whole address, so a remote host that makes
     * its addresses collide here only evicts (and pays the SipHash again); zeroed, an entry is
     * `::` with its fold 0, which is right. Read and written under the stack lock. */
    struct tcp_fold_ent {
        struct wire_ipv6_addr a;
        be32 fold;
    } fold6[TCP_FOLD6_SLOTS];
    /* Slots freed so far (closed, TIME_WAIT ended or recycled) and the last TCP_FREED_RING of
     * them: whoever keeps resources per slot (src/stack: port reservations, steering claims)
     * looks at just these instead of every slot. */
    uint32_t freed_seq;
    slip_idx_t freed[TCP_FREED_RING];
    /* Connections owing an ACK at the end of the received burst being worked through
     * (tcp__burst_end); a process killed in the burst leaves them to the delayed-ACK timer. */
    uint32_t nburst_acks;
    slip_idx_t burst_acks[TCP_BURST_ACKS];
    /* max_conns of them. Only [0, high_water) were ever touched: slots are handed out from the
     * free list of released ones first, then from high_water up, so the memory behind the table
     * (a memfd) is allocated as connections come, not for the maximum. */
    struct tcp_conn conns[];
};

/* The 4-tuple hash buckets, after the connections. */
static inline slip_idx_t *tcp__hash_tab(const struct tcp_shared *sh)
{
    return (slip_idx_t *)(void *)&((struct tcp_shared *)sh)->conns[sh->max_conns];
}

/* A large scoreboard and transmit map (tcp_map.c). */
struct tcp_bigmap {
    struct tcp_sack_block sb[TCP_BIG_SACK];
    struct tcp_txrec txr[TCP_BIG_TXMAP];
    uint32_t next_free;       /* free list: the next free one + 1 */
};

/* The large maps, after the hash buckets. */
static inline struct tcp_bigmap *tcp__maps(const struct tcp_shared *sh)
{
    uintptr_t p = (uintptr_t)(tcp__hash_tab(sh) + sh->hash_mask + 1);
    return (struct tcp_bigmap *)((p + 63) & ~(uintptr_t)63);
}

/* The slot freed as number k (k < sh->freed_seq, k + TCP_FREED_RING >= sh->freed_seq). */
static inline slip_idx_t tcp__freed_slot(const struct tcp_shared *sh, uint32_t k)
{
    return sh->freed[k % TCP_FREED_RING];
}

/* Bytes of a tcp_shared with room for max_conns connections and their hash buckets (a power of
 * two, a quarter of max_conns: chains of four at a full table). */
size_t tcp_shared__bytes(uint32_t max_conns);
/* Initialises the tables; key (32 bytes) is the secret for ISNs, timestamp offsets and SYN
 * cookies (the stack passes getrandom() bytes; tests a fixed one). */
void tcp_shared__init(struct tcp_shared *sh, uint32_t max_conns, const uint8_t key[32]);
/* Frees every connection's buffers and empties the table (stack shutdown; no segments sent). */
void tcp_shared__purge(struct tcp_shared *sh, struct pkt_pool *pool);

static inline struct tcp_conn *tcp_conn__get(struct tcp_shared *sh, slip_idx_t c) { return &sh->conns[c]; }

/* ---- Input path, called by the stack's poll loop. ---- */

/* Takes ownership of rx->pkt (a TCP segment for a local address): checks checksum and header,
 * finds the connection (4-tuple, then listener on laddr, then on 0.0.0.0) and runs RFC 9293
 * §3.10.7. Segments for no connection get a RST (§3.10.7.1). May transmit. */
void tcp_input(struct ip_env *env, struct tcp_shared *sh, const struct ip_rx *rx);
/* An ICMP error quoting a TCP segment we sent (RFC 5927 checks on the quoted sequence number):
 * fragmentation-needed lowers the MSS and retransmits (RFC 1191); unreachable errors abort a
 * connection in SYN_SENT (hard) or are remembered as soft errors. */
void tcp_icmp_error(struct ip_env *env, struct tcp_shared *sh, const struct ip_icmp_err *err);
/* Connection of a 4-tuple, else the best listener, else SLIP_NIL. */
slip_idx_t tcp__lookup(const struct tcp_shared *sh, be32 laddr, uint16_t lport, be32 raddr, uint16_t rport);
/* The listener a new connection with this 4-tuple goes to: bound address before wildcard, then
 * within a SO_REUSEPORT group the member picked by a keyed hash of the 4-tuple (the same one
 * for the same 4-tuple while the group is unchanged). SLIP_NIL if none. */
slip_idx_t tcp__lookup_listener(const struct tcp_shared *sh, be32 laddr, uint16_t lport, be32 raddr,
                                uint16_t rport);

/* ---- IPv6 (tcp6.c) ---- */

/* Takes ownership of rx->pkt (a TCP segment over IPv6 for a local address): the checksum over
 * the IPv6 pseudo-header, then as tcp_input. */
void tcp6_input(struct ip_env *env, struct tcp_shared *sh, const struct ip6_rx *rx);
/* An ICMPv6 error quoting a segment we sent: packet too big lowers the MSS (MTU - 60) and
 * resends, unreachable errors as tcp_icmp_error. */
void tcp6_icmp_error(struct ip_env *env, struct tcp_shared *sh, const struct ip6_icmp_err *err);
/* IPv6 4-tuple, else the best IPv6 listener (bound address, then ::), else SLIP_NIL. */
slip_idx_t tcp__lookup6(const struct tcp_shared *sh, const struct wire_ipv6_addr *laddr, uint16_t lport,
                        const struct wire_ipv6_addr *raddr, uint16_t rport);
/* Passive open on an IPv6 address (:: = any): a listener on :: without v6only also takes IPv4
 * SYNs (a dual-stack socket), and its IPv4 children are IPv4 connections. scope: interface of a
 * link-local laddr. Errors as tcp_conn__listen. */
int tcp_conn__listen6(struct tcp_shared *sh, slip_idx_t c, const struct wire_ipv6_addr *laddr, uint32_t scope,
                      bool v6only, uint16_t lport, int backlog);
/* Active open to an IPv6 peer (scope: interface of a link-local raddr); laddr :: takes the
 * route's source (RFC 6724). The chosen local address in *src_out when not NULL. Returns as
 * tcp_conn__connect. */
int tcp_conn__connect6(struct ip_env *env, struct tcp_shared *sh, slip_idx_t c, const struct wire_ipv6_addr *laddr,
                       uint16_t lport, const struct wire_ipv6_addr *raddr, uint16_t rport, uint32_t scope);
/* The 32-bit stand-in of an IPv6 address in laddr/raddr: 0 for ::, else a keyed hash (never 0). */
be32 tcp6__fold(const struct tcp_shared *sh, const struct wire_ipv6_addr *a);

/* Runs the due timers of every connection; returns the earliest remaining deadline
 * (SLIP_TIME_NEVER if none). Cheap when nothing is due. */
slip_time_t tcp_timer__poll(struct ip_env *env, struct tcp_shared *sh);

/* ---- Socket interface, called by src/stack. ---- */

/* A new connection in CLOSED owned by the application: index or -EMFILE. */
int tcp_conn__open(struct tcp_shared *sh);
/* Passive open (RFC 9293 §3.10.1). laddr 0 = any. backlog bounds the accept queue (and the SYN
 * queue, with TCP_SYNQ_MAX); calling it again on a listener only changes backlog.
 * -EADDRINUSE if another listener has the same (laddr, lport), unless it and every other one
 * there have TCPO_REUSEPORT set, as does c: then they form a group (Linux SO_REUSEPORT) and each
 * new connection goes to one of them chosen by a hash of its 4-tuple. -EINVAL if not CLOSED. */
int tcp_conn__listen(struct tcp_shared *sh, slip_idx_t c, be32 laddr, uint16_t lport, int backlog);
/* Active open: sends the SYN. The caller has picked and reserved lport (kernel port
 * reservation); laddr 0 takes the route's source. Returns -EINPROGRESS (completion is reported
 * through tcp_conn__poll: TCP_EV_OUT, or TCP_EV_ERR with so_error), -EADDRINUSE if the 4-tuple
 * is taken, -ENETUNREACH/-EHOSTUNREACH, -EISCONN, -EALREADY. */
int tcp_conn__connect(struct ip_env *env, struct tcp_shared *sh, slip_idx_t c, be32 laddr, uint16_t lport,
                      be32 raddr, uint16_t rport);
/* Next established child of a listener (now owned by the application), -EAGAIN, -EINVAL. */
int tcp_conn__accept(struct tcp_shared *sh, slip_idx_t listener);
/* Copies application bytes into send buffers and transmits what the window, Nagle and cork
 * allow. Returns bytes accepted (possibly fewer than asked), -EAGAIN (buffer full),
 * -EPIPE (shut down for writing or closed; the stack raises SIGPIPE), -ENOTCONN, or the pending
 * so_error. flags: TCP_SEND_MORE, TCP_SEND_AUTOCORK, TCP_SEND_EOR. */
ssize_t tcp_conn__send(struct ip_env *env, struct tcp_shared *sh, slip_idx_t c, const struct iovec *iov,
                       int iovcnt, unsigned flags);
/* Zero-copy send (tcp_zc.c). send_room: the bytes the send queue takes now, or what a send would
 * answer instead (-EAGAIN when full, -EPIPE, -ENOTCONN, the pending so_error). send_frames:
 * queues n frames the caller filled (each record's off and len say where its bytes are), as a
 * send of those bytes would; the frames are the queue's (or freed) whatever it returns: bytes
 * queued or the error send_room would give. The caller keeps to the room it was told. */
ssize_t tcp_conn__send_room(struct ip_env *env, struct tcp_shared *sh, slip_idx_t c);
ssize_t tcp_conn__send_frames(struct ip_env *env, struct tcp_shared *sh, slip_idx_t c, const slip_idx_t *f,
                              unsigned n, unsigned flags);
/* Sends what TCP_SEND_AUTOCORK held back (a no-op without it). */
void tcp_conn__uncork(struct ip_env *env, struct tcp_shared *sh, slip_idx_t c);
/* Copies received bytes; returns bytes, 0 at end of stream, -EAGAIN, -ENOTCONN, or the pending
 * so_error (-ECONNRESET...). May send a window update. flags: TCP_RECV_PEEK. */
ssize_t tcp_conn__recv(struct ip_env *env, struct tcp_shared *sh, slip_idx_t c, void *buf, size_t len,
                       unsigned flags);
/* how: SHUT_RD, SHUT_WR, SHUT_RDWR. -ENOTCONN when not connected. */
int tcp_conn__shutdown(struct ip_env *env, struct tcp_shared *sh, slip_idx_t c, int how);
/* The application lets go. Graceful (FIN after queued data, RFC 9293 §3.10.4) unless unread data
 * is pending or SO_LINGER is on with 0 seconds: then RST and free (RFC 2525 §2.17, as Linux).
 * A listener aborts its unaccepted children. The slot is freed when the connection reaches
 * CLOSED (after TIME_WAIT for the side that closed first). */
void tcp_conn__close(struct ip_env *env, struct tcp_shared *sh, slip_idx_t c);
/* Sends RST (if synchronized) and frees at once. */
void tcp_conn__abort(struct ip_env *env, struct tcp_shared *sh, slip_idx_t c);

/* Options. */
enum tcp_opt {
    TCPO_NODELAY,             /* bool */
    TCPO_CORK,                /* bool; clearing it pushes */
    TCPO_KEEPALIVE,           /* bool (SO_KEEPALIVE) */
    TCPO_KEEPIDLE,            /* seconds, 1..32767 */
    TCPO_KEEPINTVL,           /* seconds, 1..32767 */
    TCPO_KEEPCNT,             /* probes, 1..127 */
    TCPO_LINGER,              /* -1 off, else seconds (0 = abortive close) */
    TCPO_RCVBUF,              /* bytes, clamped to [TCP_BUF_MIN, TCP_BUF_MAX] */
    TCPO_SNDBUF,
    TCPO_MAXSEG,              /* TCP_MAXSEG before connect/listen; 0 = none */
    TCPO_CONGESTION,          /* TCP_CC_* */
    TCPO_REUSEPORT,           /* bool (SO_REUSEPORT); taken into account by tcp_conn__listen */
    TCPO_TCLASS,              /* IPV6_TCLASS, 0..255 (IPv6 connections only) */
    TCPO_HOPS,                /* IPV6_UNICAST_HOPS, 1..255, 0 = default (IPv6 connections only) */
    TCPO_USER_TIMEOUT,        /* TCP_USER_TIMEOUT, milliseconds, 0 = none (RFC 5482) */
};
int tcp_conn__setopt(struct ip_env *env, struct tcp_shared *sh, slip_idx_t c, enum tcp_opt opt, int val);
int tcp_conn__getopt(struct tcp_shared *sh, slip_idx_t c, enum tcp_opt opt, int *val);

/* Readiness now (TCP_EV_* bits), as the kernel computes it for epoll/poll. */
unsigned tcp_conn__poll(const struct tcp_shared *sh, slip_idx_t c);
/* SO_ERROR: returns the pending error (positive errno, 0 if none) and clears it. */
int tcp_conn__so_error(struct tcp_shared *sh, slip_idx_t c);
/* Connections whose readiness may have changed since the last call (listeners when a child
 * becomes acceptable, application-held connections otherwise): pops one, SLIP_NIL when none. */
slip_idx_t tcp__next_wakeup(struct tcp_shared *sh);
/* The end of a received burst (env->rx_burst was set through it): each connection whose ACK was
 * held for the burst sends it now, for its last run of segments, unless a segment of its own
 * carried it meanwhile. */
void tcp__burst_end(struct ip_env *env, struct tcp_shared *sh);

/* What `slipstream stat` shows for one connection. */
struct tcp_conn_info {
    uint8_t state;
    uint8_t cc_algo;
    be32 laddr, raddr;
    uint16_t lport, rport;
    uint32_t srtt_us, rttvar_us, rto_us;
    uint32_t cwnd, ssthresh, mss, snd_wnd, rcv_wnd;
    uint32_t snd_queued, rcv_queued, unacked;
    uint8_t snd_wscale, rcv_wscale;
    bool sack, timestamps;
    struct tcp_conn_stats st;
    /* For TCP_INFO, with Linux's meaning: ca_state TCP_CA_Open 0 / Disorder 1 / Recovery 3 /
     * Loss 4; sacked in segments; times in microseconds, last_* in milliseconds ago. */
    uint8_t ca_state, backoff, probes;
    uint32_t sacked, advmss, rcv_mss, reordering, rcv_space, notsent;
    uint32_t lost, retrans;   /* segments: Linux's lost_out and retrans_out (tcp_rack.c) */
    uint32_t last_data_sent_ms, last_data_recv_ms, last_ack_recv_ms;
    uint64_t busy_us, rwnd_limited_us, sndbuf_limited_us;
};
int tcp_conn__info(const struct tcp_shared *sh, slip_idx_t c, struct tcp_conn_info *out);
/* The same, with the fields that depend on the time (now: the stack's clock): the times since
 * the last data and ACK, and the chrono. */
int tcp_conn__info_at(const struct tcp_shared *sh, slip_idx_t c, slip_time_t now, struct tcp_conn_info *out);

#endif
