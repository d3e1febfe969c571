/* Congestion control as a table of operations (FreeBSD cc_algo, Linux tcp_congestion_ops).
 * The engine owns the loss-recovery mechanics (RFC 6675 / RFC 6582: when to enter and leave
 * recovery, what to retransmit); a loss-based algorithm (NewReno, CUBIC) only says how cwnd
 * grows on new ACKs and what ssthresh becomes on a congestion event. A model-based one (BBR)
 * has a cong_control op instead: it gets a delivery-rate sample on every ACK and sets cwnd and
 * the pacing rate itself, and the engine then leaves cwnd alone (no PRR, no ssthresh-based
 * window, no ECN reduction). Windows are in bytes. */
#ifndef SLIP_TCP_CC_H
#define SLIP_TCP_CC_H

#include <stdint.h>

#include "base/types.h"

struct tcp_conn;

#define TCP_CC_NEWRENO 0
#define TCP_CC_CUBIC   1
#define TCP_CC_BBR     2
#define TCP_CC_COUNT   3

/* BBR (version 1, draft-cardwell-iccrg-bbr-congestion-control-00; cc/bbr.c). */
#define TCP_BBR_STARTUP   0
#define TCP_BBR_DRAIN     1
#define TCP_BBR_PROBE_BW  2
#define TCP_BBR_PROBE_RTT 3
struct tcp_bbr {
    uint64_t bw[3];             /* BtlBw max filter: best, second, third sample (bytes/s) ... */
    uint32_t bw_round[3];       /* ... and the round each was taken in */
    uint64_t next_round_delivered;  /* a round ends when a packet sent after this is delivered */
    uint64_t full_bw;           /* bandwidth at the last STARTUP growth check */
    slip_time_t min_rtt_stamp;  /* when min_rtt_us was taken */
    slip_time_t probe_rtt_done; /* PROBE_RTT may end after this, 0: not armed */
    slip_time_t cycle_stamp;    /* start of the current PROBE_BW gain phase */
    double pacing_gain, cwnd_gain;
    uint32_t round_count;
    uint32_t min_rtt_us;        /* RTprop (0: none yet) */
    uint32_t prior_cwnd;        /* cwnd saved on entering recovery, RTO or PROBE_RTT */
    uint8_t mode;               /* TCP_BBR_* */
    uint8_t cycle_index;
    uint8_t full_bw_count;
    uint8_t filled_pipe;
    uint8_t round_start;
    uint8_t conservation;       /* packet conservation: the first round of recovery */
    uint8_t probe_rtt_round_done;
    uint8_t prev_state;         /* TCP_CA_* the last ACK saw (for recovery entry and exit) */
    uint8_t idle_restart;
    uint8_t rwnd_round;         /* the peer's window held the sender in the round just ended */
};

/* Per-connection algorithm state, kept inside struct tcp_conn (shared memory: no pointers). */
struct tcp_cc_state {
    double w_max;               /* CUBIC: window before the last reduction (segments) */
    double k;                   /* CUBIC: seconds to get back to w_max */
    double w_est;               /* CUBIC: Reno-friendly estimate (segments) */
    double cwnd_prior;          /* CUBIC: cwnd at the last reduction (segments) */
    slip_time_t epoch;          /* CUBIC: start of the current avoidance epoch, 0 = none */
    uint32_t acked_acc;         /* NewReno: bytes acked towards the next +1 MSS in avoidance */
    /* HyStart++ (RFC 9406 §4.2 names), microseconds; see cc/hystart.c. */
    uint32_t hs_window_end;     /* windowEnd: the round ends when SND.UNA reaches it */
    uint32_t hs_last_min_us;    /* lastRoundMinRTT (0 = none yet) */
    uint32_t hs_cur_min_us;     /* currentRoundMinRTT (0 = none yet) */
    uint32_t hs_css_base_us;    /* cssBaselineMinRtt */
    uint16_t hs_samples;        /* rttSampleCount */
    uint8_t hs_state;           /* TCP_HS_* */
    uint8_t hs_css_rounds;      /* rounds spent in CSS */
    struct tcp_bbr bbr;
};

/* Loss-recovery state the engine is in, for cong_control (Linux's ca_state numbers). */
#define TCP_CA_OPEN     0
#define TCP_CA_RECOVERY 3
#define TCP_CA_LOSS     4

/* One ACK's delivery-rate sample (draft-cheng-iccrg-delivery-rate-estimation §3.3, tcp_rate.c)
 * and what else a model-based algorithm needs from it. */
struct tcp_rate_sample {
    uint64_t prior_delivered;   /* C.delivered when the newest delivered packet was sent */
    uint32_t prior_us;          /* P.delivered_time of that packet */
    uint32_t send_us;           /* its send time */
    int32_t send_elapsed_us;    /* its send time minus its P.first_sent_time */
    int64_t interval_us;        /* max(send_elapsed, ack_elapsed); -1: no valid sample */
    uint64_t delivered;         /* bytes delivered over the interval */
    uint32_t acked_sacked;      /* bytes this ACK newly acknowledged or SACKed */
    uint32_t losses;            /* bytes newly marked lost on this ACK */
    uint32_t prior_in_flight;   /* flight before the ACK */
    int32_t rtt_us;             /* RTT of the newest delivered, never resent packet; -1: none */
    uint8_t have_prior;         /* prior_* were taken from a delivered packet */
    uint8_t is_app_limited;
    uint8_t ca_state;           /* TCP_CA_* after the engine's loss detection for this ACK */
};

#define TCP_HS_SS   0           /* slow start, watching the RTT */
#define TCP_HS_CSS  1           /* Conservative Slow Start */
#define TCP_HS_DONE 2           /* left the first slow start: standard slow start from now on */

struct tcp_cc_ops {
    const char *name;
    void (*init)(struct tcp_conn *c);
    /* New data acknowledged outside recovery: grow cwnd. rtt_ns is the smoothed RTT. */
    void (*on_ack)(struct tcp_conn *c, uint32_t acked, slip_time_t now);
    /* Congestion event (fast retransmit or RTO): returns the new ssthresh in bytes. */
    uint32_t (*ssthresh)(struct tcp_conn *c, slip_time_t now);
    /* Retransmission timeout: cwnd is set to one segment by the engine after this. */
    void (*on_rto)(struct tcp_conn *c);
    /* Model-based algorithms only (NULL for the others): every ACK's rate sample, after the
     * engine's loss detection; sets cwnd and c->pacing_rate (Linux cong_control). When set,
     * on_ack is not called and the engine does not set cwnd from ssthresh. */
    void (*cong_control)(struct tcp_conn *c, const struct tcp_rate_sample *rs, slip_time_t now);
};

extern const struct tcp_cc_ops tcp_cc_newreno;
extern const struct tcp_cc_ops tcp_cc_cubic;
extern const struct tcp_cc_ops tcp_cc_bbr;
const struct tcp_cc_ops *tcp_cc__get(unsigned algo);
/* "cubic" / "reno" / "newreno" / "bbr" -> TCP_CC_*, or -ENOENT. */
int tcp_cc__by_name(const char *name);

/* Slow start shared by both algorithms: RFC 5681 §3.1 with RFC 3465 ABC (L = 2 SMSS).
 * Returns the bytes of acked left over once cwnd reached ssthresh. */
uint32_t tcp_cc__slow_start(struct tcp_conn *c, uint32_t acked);

/* HyStart++ (RFC 9406): an RTT sample of a newly acknowledged, never retransmitted segment; and
 * the end of the first slow start (a congestion event). */
void tcp_hystart__rtt(struct tcp_conn *c, uint32_t rtt_us);
void tcp_hystart__exit(struct tcp_conn *c);

/* CUBIC's formula pieces (RFC 9438 §4.2 eq. 1 and 2), exposed for tests. */
double tcp_cubic__k(double w_max, double cwnd_epoch);
double tcp_cubic__w(double t, double k, double w_max);

/* BBR's model, exposed for tests: the windowed maximum bandwidth (bytes/s). */
uint64_t tcp_bbr__max_bw(const struct tcp_conn *c);

#endif
