/* HyStart++ (RFC 9406): the first slow start watches the minimum RTT of each round; when it rises
 * by more than RttThresh the sender switches to Conservative Slow Start (a quarter of the growth)
 * and, unless the RTT falls back, ends slow start CSS_ROUNDS rounds later without having
 * overshot into loss. Used by both algorithms through tcp_cc__slow_start (Linux runs its own
 * HyStart in CUBIC only). RTT samples come from RACK's per-ACK measurements (SACK connections). */
#include "tcp/tcp_var.h"

/* RFC 9406 §4.3, the RECOMMENDED values. */
#define MIN_RTT_THRESH_US  4000u
#define MAX_RTT_THRESH_US  16000u
#define MIN_RTT_DIVISOR    8u
#define N_RTT_SAMPLE       8u
#define CSS_GROWTH_DIVISOR 4u
#define CSS_ROUNDS         5u
#define SS_LIMIT_SEGS      8u      /* L without pacing */

void tcp_hystart__rtt(struct tcp_conn *c, uint32_t rtt_us)
{
    struct tcp_cc_state *h = &c->cc;
    if (h->hs_state == TCP_HS_DONE || c->cwnd >= c->ssthresh || rtt_us == 0 || c->cc_algo == TCP_CC_BBR)
        return;     /* BBR leaves STARTUP by its own bandwidth plateau rule */
    /* §4.2: currentRoundMinRTT = min(currentRoundMinRTT, RTT); rttSampleCount += 1. */
    if (h->hs_cur_min_us == 0 || rtt_us < h->hs_cur_min_us)
        h->hs_cur_min_us = rtt_us;
    if (h->hs_samples < UINT16_MAX)
        h->hs_samples++;
    if (h->hs_state != TCP_HS_SS || h->hs_samples < N_RTT_SAMPLE || !h->hs_last_min_us)
        return;
    /* RttThresh = max(MIN_RTT_THRESH, min(lastRoundMinRTT / MIN_RTT_DIVISOR, MAX_RTT_THRESH)). */
    uint32_t thresh = SLIP_MAX(MIN_RTT_THRESH_US, SLIP_MIN(h->hs_last_min_us / MIN_RTT_DIVISOR, MAX_RTT_THRESH_US));
    if (h->hs_cur_min_us >= h->hs_last_min_us + thresh) {
        h->hs_css_base_us = h->hs_cur_min_us;
        h->hs_state = TCP_HS_CSS;
        h->hs_css_rounds = 0;
    }
}

void tcp_hystart__exit(struct tcp_conn *c)
{
    c->cc.hs_state = TCP_HS_DONE;
}

/* §4.2 at the start of each round (an ACK reached windowEnd). Returns the divisor of this
 * ACK's growth (1 in slow start, CSS_GROWTH_DIVISOR in CSS). */
static uint32_t round_check(struct tcp_conn *c)
{
    struct tcp_cc_state *h = &c->cc;
    if (h->hs_state == TCP_HS_DONE)
        return 1;
    if (h->hs_window_end == 0 || seq_geq(c->snd_una, h->hs_window_end)) {
        if (h->hs_state == TCP_HS_CSS) {
            /* §4.2: the RTT fell back below the baseline: the rise was a false alarm. */
            if (h->hs_cur_min_us && h->hs_cur_min_us < h->hs_css_base_us) {
                h->hs_state = TCP_HS_SS;
                h->hs_css_base_us = 0;
            } else if (++h->hs_css_rounds >= CSS_ROUNDS) {
                /* §4.2: CSS_ROUNDS rounds in CSS: slow start ends here. */
                c->ssthresh = c->cwnd;
                h->hs_state = TCP_HS_DONE;
                return 0;
            }
        }
        h->hs_last_min_us = h->hs_cur_min_us ? h->hs_cur_min_us : h->hs_last_min_us;
        h->hs_cur_min_us = 0;
        h->hs_samples = 0;
        h->hs_window_end = c->snd_max ? c->snd_max : 1;
    }
    return h->hs_state == TCP_HS_CSS ? CSS_GROWTH_DIVISOR : 1;
}

uint32_t tcp_cc__slow_start(struct tcp_conn *c, uint32_t acked)
{
    uint32_t smss = tcp_output__data_mss(c);
    uint32_t div = round_check(c);
    if (div == 0)
        return acked;                   /* HyStart++ just ended slow start: all of it is avoidance */
    /* RFC 9406 §4.2: cwnd grows by min(acked, L * SMSS) per ACK, divided by CSS_GROWTH_DIVISOR
     * in CSS, with L = 8 for a sender that does not pace (§4.3; CUBIC and NewReno here; BBR
     * runs its own STARTUP). RFC 3465's L = 2 held a sender back behind receivers that
     * acknowledge several segments at once (Linux's after GRO: about six at 1 ms; ours, one ACK
     * per received burst), where Linux's sender takes all of it. */
    uint32_t inc = SLIP_MIN(acked, SS_LIMIT_SEGS * smss) / div;
    uint32_t room = c->ssthresh > c->cwnd ? c->ssthresh - c->cwnd : 0;
    if (inc <= room) {
        c->cwnd += inc;
        return acked > inc * div ? (c->cwnd >= c->ssthresh ? acked - inc * div : 0) : 0;
    }
    c->cwnd += room;
    return acked - room * div;
}
