/* Buffer autotuning, as the kernel's TCP does it for a socket whose application did not size the
 * buffer itself (SO_SNDBUF / SO_RCVBUF lock it, TCP_LOCK_*):
 *
 * - the send buffer follows cwnd: once a writer found it full and an ACK freed room, it grows to
 *   hold twice the congestion window (Linux tcp_sndbuf_expand), so a path whose window outgrows
 *   the default 256 KiB (BBR at 50 ms, any long fat path) is not held back by the buffer;
 * - the receive buffer follows what the application reads per round trip (dynamic right-sizing,
 *   Linux tcp_rcv_space_adjust): when it read more in one receiver RTT than in the last, the
 *   buffer grows to twice that plus a cushion, more while the rate still climbs.
 *
 * Both only grow. Their ceilings are the namespace's net.ipv4.tcp_wmem[2] / tcp_rmem[2] (read
 * at stack start, bounded here because they sit in shared memory), TCP_BUF_AUTO_LIMIT, and a
 * quarter of the stack's frames: the buffers hold UMEM frames, and one connection must leave
 * the rest for others. The window scale we offer covers the receive ceiling (tcp_conn__wscale). */
#include "tcp/tcp_var.h"

static uint32_t sysctl_max(uint32_t v, uint32_t dflt)
{
    if (v == 0)
        v = dflt;
    return SLIP_MAX(SLIP_MIN(v, (uint32_t)TCP_BUF_AUTO_LIMIT), (uint32_t)TCP_BUF_MIN);
}

/* A quarter of the frames, each carrying per_frame bytes of data. */
static uint32_t pool_max(const struct pkt_pool *pool, uint32_t per_frame)
{
    uint64_t v = (uint64_t)(pool->nframes / 4) * per_frame;
    return (uint32_t)SLIP_MIN(v, (uint64_t)TCP_BUF_AUTO_LIMIT);
}

uint32_t tcp_buf__rcv_max(const struct tcp_shared *sh)
{
    return sysctl_max(sh->rmem_max, TCP_RMEM_MAX_DEFAULT);
}

bool tcp_buf__rcv_auto(const struct tcp_shared *sh, const struct tcp_conn *c)
{
    return !(c->buf_lock & TCP_LOCK_RCV) && sh->moderate_rcvbuf != 1;
}

void tcp_buf__snd_expand(const struct ip_env *env, const struct tcp_shared *sh, struct tcp_conn *c)
{
    if (c->buf_lock & TCP_LOCK_SND)
        return;
    uint32_t mss = tcp_output__data_mss(c);
    uint64_t want = 2ull * SLIP_MAX(c->cwnd, (uint32_t)TCP_INIT_CWND * mss);
    uint32_t max = SLIP_MIN(sysctl_max(sh->wmem_max, TCP_WMEM_MAX_DEFAULT), pool_max(env->pool, pkt__room(env->pool)));
    want = SLIP_MIN(want, (uint64_t)max);
    if (want > c->sndbuf)
        c->sndbuf = (uint32_t)want;
}

/* The receiver's RTT without help from the sender (Linux tcp_rcv_rtt_measure): the time from
 * offering a window to receiving the data at its right edge. A sender that is not held by our
 * window takes longer than one RTT for it, so a shorter sample replaces the estimate at once and
 * a longer one moves it by an eighth. Called for every in-order data segment. */
void tcp_buf__rcv_rtt(struct tcp_conn *c, slip_time_t now)
{
    if (c->rcv_rtt_time && seq_lt(c->rcv_nxt, c->rcv_rtt_seq))
        return;
    if (c->rcv_rtt_time) {
        slip_time_t m = SLIP_MAX(now - c->rcv_rtt_time, (slip_time_t)SLIP_USEC);
        if (!c->rcv_rtt || m < c->rcv_rtt)
            c->rcv_rtt = m;
        else
            c->rcv_rtt += (m - c->rcv_rtt) / 8;
    }
    uint32_t wnd = seq_gt(c->rcv_adv, c->rcv_nxt) ? c->rcv_adv - c->rcv_nxt : 0;
    c->rcv_rtt_seq = c->rcv_nxt + SLIP_MAX(wnd, (uint32_t)c->rcv_mss);
    c->rcv_rtt_time = now;
}

/* After the application read: once a receiver RTT has passed since the last measurement, what
 * it read in that time is compared with the interval before (Linux tcp_rcv_space_adjust). */
void tcp_buf__rcv_space(const struct ip_env *env, const struct tcp_shared *sh, struct tcp_conn *c)
{
    uint32_t copied_seq = c->rcv_nxt - c->rcvq.bytes;
    slip_time_t now = env->now;
    uint32_t mss = c->rcv_mss ? c->rcv_mss : TCP_MSS_NO_OPTION;
    if (!c->rcvq_time) {
        c->rcvq_time = now;
        c->rcvq_seq = copied_seq;
        c->rcvq_space = SLIP_MIN(c->rcvbuf, (uint32_t)TCP_INIT_CWND * mss);
        return;
    }
    if (!c->rcv_rtt || now - c->rcvq_time < c->rcv_rtt)
        return;
    uint32_t copied = copied_seq - c->rcvq_seq;
    if (copied > c->rcvq_space) {
        if (tcp_buf__rcv_auto(sh, c)) {
            /* Twice what was read, for a round trip of losses, plus 16 segments of slack; while
             * the rate climbs (slow start), twice the growth on top. */
            uint64_t win = 2ull * copied + 16ull * mss;
            if (c->rcvq_space)
                win += 2 * (win * (copied - c->rcvq_space) / c->rcvq_space);
            uint32_t max = SLIP_MIN(tcp_buf__rcv_max(sh), pool_max(env->pool, mss));
            win = SLIP_MIN(win, (uint64_t)max);
            if (win > c->rcvbuf)
                c->rcvbuf = (uint32_t)win;
        }
        c->rcvq_space = copied;
    }
    c->rcvq_seq = copied_seq;
    c->rcvq_time = now;
}
