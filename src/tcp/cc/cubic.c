/* CUBIC (RFC 9438): after a reduction the window follows W_cubic(t) = C*(t-K)^3 + W_max, never
 * below the Reno-friendly estimate W_est (§4.3); beta = 0.7, C = 0.4, fast convergence (§4.7).
 * Windows are computed in segments (doubles) and applied to cwnd in bytes. Slow start is
 * tcp_cc__slow_start with HyStart++ (cc/hystart.c). */
#include <math.h>
#include <string.h>

#include "tcp/tcp_var.h"

#define CUBIC_C    0.4
#define CUBIC_BETA 0.7

/* RFC 9438 §4.2 eq. 2: K = cbrt((W_max - cwnd_epoch) / C). */
double tcp_cubic__k(double w_max, double cwnd_epoch)
{
    double d = w_max - cwnd_epoch;
    return d > 0 ? cbrt(d / CUBIC_C) : 0.0;
}

/* RFC 9438 §4.2 eq. 1. */
double tcp_cubic__w(double t, double k, double w_max)
{
    double x = t - k;
    return CUBIC_C * x * x * x + w_max;
}

static void cubic_init(struct tcp_conn *c)
{
    memset(&c->cc, 0, sizeof(c->cc));
    c->cwnd = TCP_INIT_CWND * tcp_output__data_mss(c);
    c->ssthresh = UINT32_MAX / 2;
}

static void cubic_on_ack(struct tcp_conn *c, uint32_t acked, slip_time_t now)
{
    double smss = tcp_output__data_mss(c);
    if (c->cwnd < c->ssthresh) {
        acked = tcp_cc__slow_start(c, acked);
        if (!acked)
            return;
    }
    double cwnd = c->cwnd / smss;
    if (c->cc.epoch == 0) {
        /* §4.2: a new congestion-avoidance epoch. */
        c->cc.epoch = now ? now : 1;
        if (c->cc.w_max < cwnd) {
            /* Coming out of slow start without a loss: start on the plateau. */
            c->cc.w_max = cwnd;
            c->cc.k = 0;
        } else {
            c->cc.k = tcp_cubic__k(c->cc.w_max, cwnd);
        }
        c->cc.w_est = cwnd;
    }
    double rtt = c->srtt_us ? c->srtt_us / 1e6 : 0.1;
    double t = (double)(now - c->cc.epoch) / 1e9;
    /* §4.2: the target is W_cubic one RTT ahead, clamped to [cwnd, 1.5 cwnd]. */
    double target = tcp_cubic__w(t + rtt, c->cc.k, c->cc.w_max);
    if (target < cwnd)
        target = cwnd;
    if (target > 1.5 * cwnd)
        target = 1.5 * cwnd;
    /* §4.3: Reno-friendly region; alpha = 3 (1 - beta) / (1 + beta) once W_est passed
     * cwnd_prior, 1 before. */
    double alpha = c->cc.w_est >= c->cc.cwnd_prior ? 1.0 : 3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA);
    c->cc.w_est += alpha * (acked / smss) / cwnd;
    double next;
    if (tcp_cubic__w(t, c->cc.k, c->cc.w_max) < c->cc.w_est) {
        next = c->cc.w_est;
    } else {
        /* §4.4/4.5: grow by (target - cwnd) / cwnd per SMSS acknowledged. */
        next = cwnd + (target - cwnd) / cwnd * (acked / smss);
    }
    uint32_t nb = (uint32_t)(next * smss);
    if (nb > c->cwnd)
        c->cwnd = nb;
}

static uint32_t cubic_ssthresh(struct tcp_conn *c, slip_time_t now)
{
    (void)now;
    tcp_hystart__exit(c);
    double smss = tcp_output__data_mss(c);
    double cwnd = c->cwnd / smss;
    /* §4.7 fast convergence: a flow that lost before reaching its previous W_max gives room. */
    if (cwnd < c->cc.w_max)
        c->cc.w_max = cwnd * (1.0 + CUBIC_BETA) / 2.0;
    else
        c->cc.w_max = cwnd;
    c->cc.cwnd_prior = cwnd;
    c->cc.epoch = 0;
    /* §4.6: ssthresh = cwnd * beta (flight size based as RFC 9438 allows, never < 2 SMSS). */
    double flight = (double)(c->snd_max - c->snd_una) / smss;
    double base = flight < cwnd ? flight : cwnd;
    double ss = base * CUBIC_BETA;
    if (ss < 2)
        ss = 2;
    return (uint32_t)(ss * smss);
}

static void cubic_on_rto(struct tcp_conn *c)
{
    /* §4.8: after a timeout start a new epoch; W_max was set by ssthresh(). */
    c->cc.epoch = 0;
    c->cc.w_est = 0;
}

const struct tcp_cc_ops tcp_cc_cubic = {
    .name = "cubic",
    .init = cubic_init,
    .on_ack = cubic_on_ack,
    .ssthresh = cubic_ssthresh,
    .on_rto = cubic_on_rto,
};
