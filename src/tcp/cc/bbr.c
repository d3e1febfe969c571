/* BBR congestion control, version 1, as draft-cardwell-iccrg-bbr-congestion-control-00 (July
 * 2017) specifies it ("BBR" below: section numbers of that draft). A model of the path, the
 * bottleneck bandwidth (a windowed maximum of delivery-rate samples, tcp_rate.c) and the
 * round-trip propagation time (a windowed minimum of RTT samples), sets the pacing rate and
 * cwnd; loss is not a congestion signal except through the rate samples, so random loss does
 * not collapse the window the way it does for NewReno and CUBIC. The engine's loss recovery
 * (RACK-TLP, RTO) still decides what to resend; BBR only sizes cwnd through it (§4.2.3.4).
 * Differences from the draft are listed in docs/COMPLIANCE.md. */
#include <string.h>

#include "tcp/tcp_var.h"

/* §4.3.2.1: 2/ln(2), the smallest gain that doubles the sending rate every round. */
#define BBR_HIGH_GAIN       2.88539008177792681
#define BBR_PROBE_CWND_GAIN 2.0                 /* §4.3.4.1: cwnd_gain in PROBE_BW */
#define BBR_BW_ROUNDS       10u                 /* §4.1.1.2 BtlBwFilterLen, in rounds */
#define BBR_RTPROP_WIN      (10 * SLIP_SEC)     /* §4.1.2.2 RTpropFilterLen */
#define BBR_PROBE_RTT_TIME  (200 * SLIP_MSEC)   /* §4.3.5 ProbeRTTDuration */
#define BBR_MIN_PIPE_SEGS   4u                  /* §4.2.3.3 BBRMinPipeCwnd */
#define BBR_CYCLE_LEN       8u                  /* §4.3.4.3 BBRGainCycleLen */
#define BBR_FULL_BW_GROWTH  1.25                /* §4.3.2.2: the pipe is full when three ... */
#define BBR_FULL_BW_ROUNDS  3u                  /* ... rounds brought less than 25 % more */

/* §4.3.4.3: probe with 5/4, drain what that queued with 3/4, cruise at 1 for six phases. */
static const double bbr_cycle_gain[BBR_CYCLE_LEN] = { 1.25, 0.75, 1, 1, 1, 1, 1, 1 };

static uint32_t smss(const struct tcp_conn *c) { return tcp_output__data_mss(c); }

/* Unacknowledged bytes the network holds: RFC 6675's pipe with SACK (SACKed and lost ranges
 * left out), else everything unacknowledged. */
static uint32_t inflight_now(const struct tcp_conn *c)
{
    if ((c->flags & TCPF_SACK_OK) && c->ntxr)
        return tcp_rack__pipe(c);
    return c->snd_max - c->snd_una;
}

uint64_t tcp_bbr__max_bw(const struct tcp_conn *c)
{
    return c->cc.bbr.bw[0];
}

/* The filter's second and third samples move up one place (the third stays as it was). */
static void bw_shift(struct tcp_bbr *b)
{
    b->bw[0] = b->bw[1];
    b->bw_round[0] = b->bw_round[1];
    b->bw[1] = b->bw[2];
    b->bw_round[1] = b->bw_round[2];
}

/* §4.1.1.2: the maximum over the last BBR_BW_ROUNDS rounds, kept as three samples (the best,
 * and the best of later sub-windows in case it ages out), Kathleen Nichols' windowed filter. */
static void bw_filter_update(struct tcp_bbr *b, uint32_t round, uint64_t v)
{
    if (!b->bw[0] || v >= b->bw[0] || round - b->bw_round[2] > BBR_BW_ROUNDS) {
        for (int i = 0; i < 3; i++) {
            b->bw[i] = v;
            b->bw_round[i] = round;
        }
        return;
    }
    if (v >= b->bw[1]) {
        b->bw[1] = b->bw[2] = v;
        b->bw_round[1] = b->bw_round[2] = round;
    } else if (v >= b->bw[2]) {
        b->bw[2] = v;
        b->bw_round[2] = round;
    }
    if (round - b->bw_round[0] > BBR_BW_ROUNDS) {
        /* The best aged out: the next ones move up, the new sample fills the last place. */
        bw_shift(b);
        b->bw[2] = v;
        b->bw_round[2] = round;
        if (round - b->bw_round[0] > BBR_BW_ROUNDS)
            bw_shift(b);
    } else if (b->bw_round[1] == b->bw_round[0] && round - b->bw_round[1] > BBR_BW_ROUNDS / 4) {
        b->bw[1] = b->bw[2] = v;        /* a quarter of the window passed: a fresh second best */
        b->bw_round[1] = b->bw_round[2] = round;
    } else if (b->bw_round[2] == b->bw_round[1] && round - b->bw_round[2] > BBR_BW_ROUNDS / 2) {
        b->bw[2] = v;
        b->bw_round[2] = round;
    }
}

/* §4.2.2 send quantum, at least two segments (the smallest burst the pacer lets out). */
static uint32_t send_quantum(const struct tcp_conn *c)
{
    uint64_t q = c->pacing_rate / 1000;     /* 1 ms worth */
    q = SLIP_MIN(q, (uint64_t)65536);
    return (uint32_t)SLIP_MAX(q, (uint64_t)(2 * smss(c)));
}

/* §4.2.3.2 BBRInflight: gain times the estimated BDP, plus three quanta for the pacer's and
 * the receiver's (delayed ACK) bursts; the initial window until RTprop is known. */
static uint32_t bbr_inflight(const struct tcp_conn *c, double gain)
{
    const struct tcp_bbr *b = &c->cc.bbr;
    if (!b->min_rtt_us || !b->bw[0])
        return TCP_INIT_CWND * smss(c);
    double bdp = (double)b->bw[0] * b->min_rtt_us / 1e6;
    double w = gain * bdp + 3.0 * send_quantum(c);
    return w > (double)(UINT32_MAX / 2) ? UINT32_MAX / 2 : (uint32_t)w;
}

/* §4.2.3.4 BBRSaveCwnd: the window to come back to after recovery, RTO or PROBE_RTT. */
static void save_cwnd(struct tcp_conn *c)
{
    struct tcp_bbr *b = &c->cc.bbr;
    if (!(c->flags & (TCPF_RECOVERY | TCPF_LOSS)) && b->mode != TCP_BBR_PROBE_RTT)
        b->prior_cwnd = c->cwnd;
    else
        b->prior_cwnd = SLIP_MAX(b->prior_cwnd, c->cwnd);
}

static void restore_cwnd(struct tcp_conn *c)
{
    c->cwnd = SLIP_MAX(c->cwnd, c->cc.bbr.prior_cwnd);
}

/* §4.2.1 BBRSetPacingRateWithGain: never below the current rate before the pipe is full
 * (STARTUP must not slow down on a sample that happened to be low). */
static void set_pacing_rate(struct tcp_conn *c, double gain)
{
    struct tcp_bbr *b = &c->cc.bbr;
    uint64_t rate = (uint64_t)(gain * (double)b->bw[0]);
    if (!b->bw[0])
        return;
    if (b->filled_pipe || rate > c->pacing_rate)
        c->pacing_rate = rate;
}

/* §4.2.1 BBRInitPacingRate: the initial window over the RTT of the handshake (1 ms without). */
static void init_pacing_rate(struct tcp_conn *c)
{
    uint32_t rtt = c->srtt_us ? c->srtt_us : 1000;
    double nominal = (double)c->cwnd * 1e6 / rtt;
    c->pacing_rate = (uint64_t)(BBR_HIGH_GAIN * nominal);
}

static void enter_startup(struct tcp_bbr *b)
{
    b->mode = TCP_BBR_STARTUP;
    b->pacing_gain = BBR_HIGH_GAIN;     /* §4.3.2.1 */
    b->cwnd_gain = BBR_HIGH_GAIN;
}

static void advance_cycle(struct tcp_bbr *b, slip_time_t now)
{
    b->cycle_stamp = now;
    b->cycle_index = (uint8_t)((b->cycle_index + 1) % BBR_CYCLE_LEN);
    b->pacing_gain = bbr_cycle_gain[b->cycle_index];
}

/* §4.3.4.2 BBREnterProbeBW: a pseudo-random phase other than the draining one, so flows that
 * start together do not probe together. */
static void enter_probe_bw(struct tcp_conn *c, slip_time_t now)
{
    struct tcp_bbr *b = &c->cc.bbr;
    b->mode = TCP_BBR_PROBE_BW;
    b->pacing_gain = 1;
    b->cwnd_gain = BBR_PROBE_CWND_GAIN;
    b->cycle_index = (uint8_t)(BBR_CYCLE_LEN - 1 - (c->iss ^ c->lport) % (BBR_CYCLE_LEN - 1));
    advance_cycle(b, now);
}

/* §4.3.4.4 BBRIsNextCyclePhase. */
static bool next_cycle_phase(const struct tcp_conn *c, const struct tcp_rate_sample *rs, slip_time_t now)
{
    const struct tcp_bbr *b = &c->cc.bbr;
    bool full_length = now - b->cycle_stamp > (slip_time_t)b->min_rtt_us * SLIP_USEC;
    if (b->pacing_gain > 1)     /* probing: until a round-trip passed and it queued data or lost */
        return full_length && (rs->losses > 0 || rs->prior_in_flight >= bbr_inflight(c, b->pacing_gain));
    if (b->pacing_gain < 1)     /* draining: until the queue is gone, at most a round-trip */
        return full_length || rs->prior_in_flight <= bbr_inflight(c, 1);
    return full_length;
}

/* §4.3.2.2 BBRCheckFullPipe: STARTUP ends once three rounds in a row (not app-limited) failed
 * to raise the bandwidth by a quarter. A round in which the peer's receive window held the
 * sender back while the path showed no queue does not count either: the plateau was the
 * receiver's, not the path's. A receiver whose application waits on holes at 3-5 % loss opens
 * its window slowly; Linux's BBR, which counts such rounds, can leave STARTUP there at a tenth
 * of the path's rate and then grows by a quarter per eight rounds. Once STARTUP's excess queues
 * at a bottleneck (RTT a quarter above RTprop) the rounds count again, window or not. */
static void check_full_pipe(struct tcp_conn *c, const struct tcp_rate_sample *rs)
{
    struct tcp_bbr *b = &c->cc.bbr;
    if (b->filled_pipe || !b->round_start || rs->is_app_limited)
        return;
    if ((double)b->bw[0] >= (double)b->full_bw * BBR_FULL_BW_GROWTH) {
        b->full_bw = b->bw[0];
        b->full_bw_count = 0;
        return;
    }
    if (b->rwnd_round)
        return;
    if (++b->full_bw_count >= BBR_FULL_BW_ROUNDS)
        b->filled_pipe = 1;
}

/* §4.3.3 Drain and its exit to PROBE_BW. */
static void check_drain(struct tcp_conn *c, slip_time_t now)
{
    struct tcp_bbr *b = &c->cc.bbr;
    if (b->mode == TCP_BBR_STARTUP && b->filled_pipe) {
        b->mode = TCP_BBR_DRAIN;
        b->pacing_gain = 1 / BBR_HIGH_GAIN;     /* drain the queue STARTUP built */
        b->cwnd_gain = BBR_HIGH_GAIN;
    }
    if (b->mode == TCP_BBR_DRAIN && inflight_now(c) <= bbr_inflight(c, 1))
        enter_probe_bw(c, now);
}

/* §4.1.2.3 BBRUpdateRTprop, and §4.3.5 entry to and exit from PROBE_RTT. */
static void update_rtprop_and_probe_rtt(struct tcp_conn *c, const struct tcp_rate_sample *rs, slip_time_t now)
{
    struct tcp_bbr *b = &c->cc.bbr;
    bool expired = b->min_rtt_stamp && now > b->min_rtt_stamp + BBR_RTPROP_WIN;
    if (rs->rtt_us >= 0 && (!b->min_rtt_us || (uint32_t)rs->rtt_us <= b->min_rtt_us || expired)) {
        b->min_rtt_us = (uint32_t)SLIP_MAX(rs->rtt_us, 1);
        b->min_rtt_stamp = now;
    }
    /* §4.3.5: RTprop not refreshed for 10 s: drain the pipe to four segments for at least
     * 200 ms and a round-trip to measure it again. */
    if (expired && !b->idle_restart && b->mode != TCP_BBR_PROBE_RTT) {
        b->mode = TCP_BBR_PROBE_RTT;
        b->pacing_gain = 1;
        b->cwnd_gain = 1;
        save_cwnd(c);
        b->probe_rtt_done = 0;
    }
    if (b->mode == TCP_BBR_PROBE_RTT) {
        /* The pipe is kept nearly empty on purpose: no bandwidth sample of this time may count
         * as the path's (§4.3.5, the app-limited marking of BBRHandleProbeRTT). */
        uint64_t end = c->rate.delivered + inflight_now(c);
        c->rate.app_limited = end ? end : 1;
        if (!b->probe_rtt_done && inflight_now(c) <= BBR_MIN_PIPE_SEGS * smss(c)) {
            b->probe_rtt_done = now + BBR_PROBE_RTT_TIME;
            b->probe_rtt_round_done = 0;
            b->next_round_delivered = c->rate.delivered;
        } else if (b->probe_rtt_done) {
            if (b->round_start)
                b->probe_rtt_round_done = 1;
            if (b->probe_rtt_round_done && now > b->probe_rtt_done) {
                b->min_rtt_stamp = now;
                restore_cwnd(c);
                if (b->filled_pipe)
                    enter_probe_bw(c, now);
                else
                    enter_startup(b);
            }
        }
    }
    if (rs->acked_sacked)
        b->idle_restart = 0;
}

/* §4.2.3.4 cwnd through loss recovery (fast recovery and after an RTO); returns true while
 * packet conservation holds cwnd. */
static bool modulate_for_recovery(struct tcp_conn *c, const struct tcp_rate_sample *rs)
{
    struct tcp_bbr *b = &c->cc.bbr;
    uint32_t mss = smss(c);
    uint32_t inflight = inflight_now(c);
    if (rs->losses > 0)
        c->cwnd = SLIP_MAX(c->cwnd > rs->losses ? c->cwnd - rs->losses : 0, mss);
    if (rs->ca_state == TCP_CA_RECOVERY && b->prev_state == TCP_CA_OPEN) {
        /* Entering fast recovery (cwnd was saved by ssthresh()): conservation for a round,
         * which starts now. */
        b->conservation = 1;
        b->next_round_delivered = c->rate.delivered;
        c->cwnd = inflight + SLIP_MAX(rs->acked_sacked, mss);
    } else if (rs->ca_state == TCP_CA_OPEN && b->prev_state != TCP_CA_OPEN) {
        /* Leaving recovery or the RTO's loss state: back to the window from before. */
        restore_cwnd(c);
        b->conservation = 0;
    } else if (b->round_start) {
        b->conservation = 0;        /* a round of recovery passed */
    }
    b->prev_state = rs->ca_state;
    if (b->conservation) {
        c->cwnd = SLIP_MAX(c->cwnd, inflight + rs->acked_sacked);
        return true;
    }
    return false;
}

/* §4.2.3.6 BBRSetCwnd. */
static void set_cwnd(struct tcp_conn *c, const struct tcp_rate_sample *rs)
{
    struct tcp_bbr *b = &c->cc.bbr;
    uint32_t mss = smss(c);
    uint32_t target = bbr_inflight(c, b->cwnd_gain);
    if (!modulate_for_recovery(c, rs)) {
        uint64_t w = c->cwnd;
        if (b->filled_pipe)
            w = SLIP_MIN(w + rs->acked_sacked, (uint64_t)target);
        else if (w < target || c->rate.delivered < (uint64_t)TCP_INIT_CWND * mss)
            w += rs->acked_sacked;
        c->cwnd = (uint32_t)SLIP_MIN(w, (uint64_t)(UINT32_MAX / 2));
    }
    c->cwnd = SLIP_MAX(c->cwnd, BBR_MIN_PIPE_SEGS * mss);
    if (b->mode == TCP_BBR_PROBE_RTT)
        c->cwnd = SLIP_MIN(c->cwnd, BBR_MIN_PIPE_SEGS * mss);   /* §4.2.3.5 */
}

static void bbr_control(struct tcp_conn *c, const struct tcp_rate_sample *rs, slip_time_t now)
{
    struct tcp_bbr *b = &c->cc.bbr;
    /* §4.1.1.3: a round trip ends when a packet sent after the previous end is delivered. */
    b->round_start = 0;
    if (rs->have_prior && rs->acked_sacked && rs->prior_delivered >= b->next_round_delivered) {
        b->next_round_delivered = c->rate.delivered;
        b->round_count++;
        b->round_start = 1;
        /* Held by the peer's window, and no queue on the path (RACK.rtt, the RTT of the
         * segment delivered last, retransmissions included, within a quarter of RTprop): the
         * round says nothing about the path's rate. */
        b->rwnd_round = c->rate.rwnd_held && c->rack_rtt_us && b->min_rtt_us &&
                        (uint64_t)c->rack_rtt_us * 4 < (uint64_t)b->min_rtt_us * 5;
        c->rate.rwnd_held = 0;
    }
    /* §4.1.1.4-5: an app-limited sample counts only when it raises the estimate. */
    uint64_t bw = tcp_rate__bps(rs);
    if (bw && (bw >= b->bw[0] || !rs->is_app_limited))
        bw_filter_update(b, b->round_count, bw);
    if (b->mode == TCP_BBR_PROBE_BW && next_cycle_phase(c, rs, now))
        advance_cycle(b, now);
    check_full_pipe(c, rs);
    check_drain(c, now);
    update_rtprop_and_probe_rtt(c, rs, now);
    if (b->bw[0])
        set_pacing_rate(c, b->pacing_gain);
    else
        init_pacing_rate(c);
    c->pace_quantum = send_quantum(c);
    set_cwnd(c, rs);
}

static void bbr_init(struct tcp_conn *c)
{
    memset(&c->cc, 0, sizeof(c->cc));
    memset(&c->rate, 0, sizeof(c->rate));
    c->cwnd = TCP_INIT_CWND * smss(c);
    c->ssthresh = UINT32_MAX / 2;
    c->cc.hs_state = TCP_HS_DONE;       /* no HyStart: STARTUP has its own exit */
    enter_startup(&c->cc.bbr);
    init_pacing_rate(c);
    c->pace_quantum = send_quantum(c);
    c->pace_vt = 0;
}

static void bbr_on_ack(struct tcp_conn *c, uint32_t acked, slip_time_t now)
{
    (void)c;
    (void)acked;
    (void)now;      /* everything happens in bbr_control */
}

/* A congestion event (fast recovery, a tail-loss probe's repair): BBR does not cut a
 * threshold; it saves the window to restore after recovery (§4.2.3.4). */
static uint32_t bbr_ssthresh(struct tcp_conn *c, slip_time_t now)
{
    (void)now;
    save_cwnd(c);
    return UINT32_MAX / 2;
}

/* §4.2.3.4: on an RTO the engine sets cwnd to one segment; the window from before comes back
 * when the loss state ends. The bandwidth plateau test starts over. */
static void bbr_on_rto(struct tcp_conn *c)
{
    struct tcp_bbr *b = &c->cc.bbr;
    save_cwnd(c);
    b->full_bw = 0;
    b->full_bw_count = 0;
    b->conservation = 0;
    b->prev_state = TCP_CA_LOSS;
}

const struct tcp_cc_ops tcp_cc_bbr = {
    .name = "bbr",
    .init = bbr_init,
    .on_ack = bbr_on_ack,
    .ssthresh = bbr_ssthresh,
    .on_rto = bbr_on_rto,
    .cong_control = bbr_control,
};
