/* NewReno congestion control (RFC 5681 growth, RFC 6582 recovery in the engine): slow start
 * below ssthresh, one SMSS per window of ACKed bytes above it, ssthresh = max(flight/2, 2 SMSS). */
#include <errno.h>
#include <string.h>

#include "tcp/tcp_var.h"

static void newreno_init(struct tcp_conn *c)
{
    memset(&c->cc, 0, sizeof(c->cc));
    uint32_t smss = tcp_output__data_mss(c);
    c->cwnd = TCP_INIT_CWND * smss;     /* RFC 6928 IW10, as Linux */
    c->ssthresh = UINT32_MAX / 2;
}

static void newreno_on_ack(struct tcp_conn *c, uint32_t acked, slip_time_t now)
{
    (void)now;
    if (c->cwnd < c->ssthresh) {
        acked = tcp_cc__slow_start(c, acked);
        if (!acked)
            return;
    }
    /* RFC 5681 §3.1 eq. 3, byte counting: +SMSS once a cwnd's worth of bytes is ACKed. */
    uint32_t smss = tcp_output__data_mss(c);
    c->cc.acked_acc += acked;
    if (c->cc.acked_acc >= c->cwnd) {
        c->cc.acked_acc -= c->cwnd;
        c->cwnd += smss;
    }
}

static uint32_t newreno_ssthresh(struct tcp_conn *c, slip_time_t now)
{
    (void)now;
    tcp_hystart__exit(c);
    /* RFC 5681 §3.1 eq. 4. */
    uint32_t flight = c->snd_max - c->snd_una;
    uint32_t smss = tcp_output__data_mss(c);
    c->cc.acked_acc = 0;
    return SLIP_MAX(flight / 2, 2 * smss);
}

static void newreno_on_rto(struct tcp_conn *c)
{
    c->cc.acked_acc = 0;
}

const struct tcp_cc_ops tcp_cc_newreno = {
    .name = "reno",
    .init = newreno_init,
    .on_ack = newreno_on_ack,
    .ssthresh = newreno_ssthresh,
    .on_rto = newreno_on_rto,
};

const struct tcp_cc_ops *tcp_cc__get(unsigned algo)
{
    return algo == TCP_CC_NEWRENO ? &tcp_cc_newreno : algo == TCP_CC_BBR ? &tcp_cc_bbr : &tcp_cc_cubic;
}

int tcp_cc__by_name(const char *name)
{
    if (!strcmp(name, "reno") || !strcmp(name, "newreno"))
        return TCP_CC_NEWRENO;
    if (!strcmp(name, "cubic"))
        return TCP_CC_CUBIC;
    if (!strcmp(name, "bbr"))
        return TCP_CC_BBR;
    return -ENOENT;
}
