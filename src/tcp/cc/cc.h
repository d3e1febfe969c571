/* Congestion control as a table of operations (FreeBSD cc_algo, Linux tcp_congestion_ops).
 * The engine owns the loss-recovery mechanics (RFC 6675 / RFC 6582: when to enter and leave
 * recovery, what to retransmit); an algorithm only says how cwnd grows on new ACKs and what
 * ssthresh becomes on a congestion event. Windows are in bytes. */
#ifndef SLIP_TCP_CC_H
#define SLIP_TCP_CC_H

#include <stdint.h>

#include "base/types.h"

struct tcp_conn;

#define TCP_CC_NEWRENO 0
#define TCP_CC_CUBIC   1
#define TCP_CC_COUNT   2

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
};

extern const struct tcp_cc_ops tcp_cc_newreno;
extern const struct tcp_cc_ops tcp_cc_cubic;
const struct tcp_cc_ops *tcp_cc__get(unsigned algo);
/* "cubic" / "reno" / "newreno" -> TCP_CC_*, or -ENOENT. */
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

#endif
