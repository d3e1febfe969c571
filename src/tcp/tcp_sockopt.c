/* Socket options, readiness (poll), SO_ERROR, TCP_INFO and Linux's chrono (busy, rwnd- and
 * sndbuf-limited time). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "tcp/tcp_var.h"
#include "wire/eth.h"
#include "wire/ipv4.h"

int tcp_conn__setopt(struct ip_env *env, struct tcp_shared *sh, slip_idx_t i, enum tcp_opt opt, int val)
{
    struct tcp_conn *c = tcp_conn__user(sh, i);
    if (!c)
        return -EBADF;
    switch (opt) {
    case TCPO_NODELAY:
        c->flags = val ? c->flags | TCPF_NODELAY : c->flags & ~TCPF_NODELAY;
        if (val && TCPS_HAVEESTABLISHED(c->state)) {
            /* tcp(7), as Linux: setting TCP_NODELAY pushes what TCP_CORK or MSG_MORE hold, once;
             * the cork itself stays for later writes. */
            c->flags |= TCPF_PUSH_HELD;
            tcp_output(env, sh, c);
            c->flags &= ~TCPF_PUSH_HELD;
        }
        return 0;
    case TCPO_CORK:
        /* uncorking pushes everything, also what a MSG_MORE send held back (Linux) */
        c->flags = val ? c->flags | TCPF_CORK : c->flags & ~(TCPF_CORK | TCPF_MORE);
        if (!val && TCPS_HAVEESTABLISHED(c->state))
            tcp_output(env, sh, c);
        return 0;
    case TCPO_KEEPALIVE:
        c->flags = val ? c->flags | TCPF_KEEPALIVE : c->flags & ~TCPF_KEEPALIVE;
        if (val && TCPS_HAVEESTABLISHED(c->state))
            tcp_timer__keep_restart(env, sh, c);
        else if (!val)
            tcp_timer__stop(c, TT_KEEP);
        return 0;
    case TCPO_KEEPIDLE:
    case TCPO_KEEPINTVL:
        if (val < 1 || val > 32767)
            return -EINVAL;
        if (opt == TCPO_KEEPIDLE)
            c->keepidle = (uint32_t)val;
        else
            c->keepintvl = (uint32_t)val;
        if ((c->flags & TCPF_KEEPALIVE) && TCPS_HAVEESTABLISHED(c->state))
            tcp_timer__keep_restart(env, sh, c);
        return 0;
    case TCPO_KEEPCNT:
        if (val < 1 || val > 127)
            return -EINVAL;
        c->keepcnt = (uint32_t)val;
        return 0;
    case TCPO_LINGER:
        if (val < 0) {
            c->flags &= ~TCPF_LINGER;
        } else {
            c->flags |= TCPF_LINGER;
            c->linger = val;
        }
        return 0;
    case TCPO_RCVBUF:
    case TCPO_SNDBUF: {
        uint32_t v = (uint32_t)SLIP_MIN(SLIP_MAX(val, TCP_BUF_MIN), TCP_BUF_MAX);
        /* As Linux's SOCK_*BUF_LOCK: a size the application chose is not autotuned. */
        if (opt == TCPO_RCVBUF) {
            c->rcvbuf = v;
            c->buf_lock |= TCP_LOCK_RCV;
        } else {
            c->sndbuf = v;
            c->buf_lock |= TCP_LOCK_SND;
        }
        return 0;
    }
    case TCPO_MAXSEG:
        if (val != 0 && (val < TCP_MSS_MIN || val > 65495))
            return -EINVAL;
        c->user_mss = (uint16_t)val;
        if (val && TCPS_HAVEESTABLISHED(c->state) && val < c->mss)
            c->mss = (uint16_t)val;
        return 0;
    case TCPO_CONGESTION:
        if (val < 0 || val >= TCP_CC_COUNT)
            return -ENOENT;
        c->cc_algo = (uint8_t)val;
        c->cc_user = 1;
        c->pacing_rate = 0;     /* only an algorithm that paces sets it (BBR's init) */
        tcp_cc__get(c->cc_algo)->init(c);
        return 0;
    case TCPO_REUSEPORT:
        /* As on Linux, changing it on a listener does not move it in or out of its group. */
        c->flags = val ? c->flags | TCPF_REUSEPORT : c->flags & ~TCPF_REUSEPORT;
        return 0;
    case TCPO_TCLASS:
        c->tclass = (uint8_t)(val < 0 || val > 255 ? 0 : val);
        return 0;
    case TCPO_HOPS:
        c->hops = (uint8_t)(val < 0 || val > 255 ? 0 : val);
        return 0;
    case TCPO_USER_TIMEOUT:
        if (val < 0)
            return -EINVAL;     /* as Linux */
        c->user_timeout_ms = (uint32_t)val;
        return 0;
    }
    return -ENOPROTOOPT;
}

int tcp_conn__getopt(struct tcp_shared *sh, slip_idx_t i, enum tcp_opt opt, int *val)
{
    struct tcp_conn *c = tcp_conn__user(sh, i);
    if (!c)
        return -EBADF;
    switch (opt) {
    case TCPO_NODELAY: *val = !!(c->flags & TCPF_NODELAY); return 0;
    case TCPO_CORK: *val = !!(c->flags & TCPF_CORK); return 0;
    case TCPO_KEEPALIVE: *val = !!(c->flags & TCPF_KEEPALIVE); return 0;
    case TCPO_KEEPIDLE: *val = (int)c->keepidle; return 0;
    case TCPO_KEEPINTVL: *val = (int)c->keepintvl; return 0;
    case TCPO_KEEPCNT: *val = (int)c->keepcnt; return 0;
    case TCPO_LINGER: *val = (c->flags & TCPF_LINGER) ? c->linger : -1; return 0;
    case TCPO_RCVBUF: *val = (int)c->rcvbuf; return 0;
    case TCPO_SNDBUF: *val = (int)c->sndbuf; return 0;
    /* Linux reports the payload per segment after options (mss_cache), e.g. 1448 with timestamps;
     * a connection reset or timed out after its handshake keeps it (mss_cache is not cleared:
     * packetdrill's wire server resets the connection before mss-getsockopt-tcp_maxseg-server
     * reads it). */
    case TCPO_MAXSEG: {
        bool synced = TCPS_HAVEESTABLISHED(c->state) ||
                      (c->state == TCPS_CLOSED && (c->flags & TCPF_DONE) && !(c->flags & TCPF_OPEN_FAILED));
        *val = synced ? (int)tcp_output__data_mss(c) : (c->user_mss ? c->user_mss : TCP_MSS_NO_OPTION);
        return 0;
    }
    case TCPO_CONGESTION: *val = c->cc_algo; return 0;
    case TCPO_REUSEPORT: *val = !!(c->flags & TCPF_REUSEPORT); return 0;
    case TCPO_TCLASS: *val = c->tclass; return 0;
    case TCPO_USER_TIMEOUT: *val = (int)c->user_timeout_ms; return 0;
    case TCPO_HOPS: *val = c->hops; return 0;
    }
    return -ENOPROTOOPT;
}

unsigned tcp_conn__poll(const struct tcp_shared *sh, slip_idx_t i)
{
    if (i >= sh->max_conns)
        return TCP_EV_ERR | TCP_EV_HUP;
    const struct tcp_conn *c = &sh->conns[i];
    unsigned ev = 0;
    if (c->state == TCPS_LISTEN)
        return c->acceptq_len ? TCP_EV_IN : 0;
    if (c->so_error)
        ev |= TCP_EV_ERR;
    if (c->state == TCPS_CLOSED) {
        ev |= TCP_EV_HUP | TCP_EV_OUT;
        if (c->flags & TCPF_DONE)
            ev |= TCP_EV_IN | TCP_EV_RDHUP;
        return ev;
    }
    bool rd_shut = (c->flags & (TCPF_RCVD_FIN | TCPF_SHUT_RD)) != 0;
    if (rd_shut && (c->flags & TCPF_FIN_QUEUED))
        ev |= TCP_EV_HUP;
    if (rd_shut)
        ev |= TCP_EV_IN | TCP_EV_RDHUP;
    if (c->rcvq.bytes)
        ev |= TCP_EV_IN;
    if (TCPS_HAVEESTABLISHED(c->state)) {
        if (c->flags & TCPF_FIN_QUEUED)
            ev |= TCP_EV_OUT;
        else if (c->sndq.bytes < c->sndbuf && c->sndbuf - c->sndq.bytes >= c->sndq.bytes / 2)
            ev |= TCP_EV_OUT;
    }
    return ev;
}

int tcp_conn__so_error(struct tcp_shared *sh, slip_idx_t i)
{
    if (i >= sh->max_conns)
        return EBADF;
    int e = sh->conns[i].so_error;
    sh->conns[i].so_error = 0;
    return e;
}

int tcp_conn__info(const struct tcp_shared *sh, slip_idx_t i, struct tcp_conn_info *o)
{
    if (i >= sh->max_conns)
        return -EBADF;
    const struct tcp_conn *c = &sh->conns[i];
    memset(o, 0, sizeof(*o));
    o->state = c->state;
    o->cc_algo = c->cc_algo;
    o->laddr = c->laddr;
    o->raddr = c->raddr;
    o->lport = c->lport;
    o->rport = c->rport;
    o->srtt_us = c->srtt_us;
    o->rttvar_us = c->rttvar_us;
    o->rto_us = (uint32_t)(tcp_rto(c) / SLIP_USEC);
    o->cwnd = c->cwnd;
    o->ssthresh = c->ssthresh;
    o->mss = TCPS_HAVEESTABLISHED(c->state) ? tcp_output__data_mss(c) : c->mss;   /* as TCP_MAXSEG */
    o->snd_wnd = c->snd_wnd;
    o->rcv_wnd = c->rcv_adv - c->rcv_nxt;
    o->snd_queued = c->sndq.bytes;
    o->rcv_queued = c->rcvq.bytes;
    o->unacked = c->snd_max - c->snd_una;
    o->snd_wscale = c->snd_wscale;
    o->rcv_wscale = c->rcv_wscale;
    o->sack = (c->flags & TCPF_SACK_OK) != 0;
    o->timestamps = (c->flags & TCPF_TS_OK) != 0;
    o->st = c->st;
    /* Linux's names: TCP_CA_Loss after an RTO, Recovery in fast recovery, Disorder while
     * duplicate ACKs or SACKed data say something may be missing, else Open. */
    uint32_t sacked = (c->flags & TCPF_SACK_OK) ? tcp_sack__sacked_bytes(c) : 0;
    /* Linux's states: Open 0, Disorder 1, CWR 2 (reduced for an ECN echo, until SND.UNA passes
     * what was sent then: tcp_ecn.c), Recovery 3, Loss 4. */
    bool cwr = (c->ecn & TCP_ECN_WAIT) && seq_lt(c->snd_una, c->ecn_high);
    o->ca_state = (c->flags & TCPF_LOSS) ? 4 : (c->flags & TCPF_RECOVERY) ? 3 : cwr ? 2 : (c->dupacks || sacked) ? 1 : 0;
    uint32_t dmss = tcp_output__data_mss(c);
    o->sacked = dmss ? (sacked + dmss - 1) / dmss : 0;
    tcp_rack__info(c, dmss, &o->lost, &o->retrans);
    o->backoff = c->rxt_shift;
    o->probes = c->probes_out;
    /* Linux's advmss: what our SYN offered, less the timestamp option when it is on. */
    o->advmss = (c->adv_mss ? c->adv_mss : c->mss) - ((c->flags & TCPF_TS_OK) ? 12 : 0);
    o->rcv_mss = c->rcv_mss;
    o->reordering = 3;      /* the DupThresh we use (RFC 5681), Linux's default */
    o->rcv_space = c->rcvbuf;
    uint32_t sent = c->snd_nxt - c->snd_q_seq;
    o->notsent = c->sndq.bytes > sent ? c->sndq.bytes - sent : 0;
    return 0;
}

static uint32_t ms_since(slip_time_t now, slip_time_t t)
{
    return now > t ? (uint32_t)SLIP_MIN((now - t) / SLIP_MSEC, (slip_time_t)UINT32_MAX) : 0;
}

int tcp_conn__info_at(const struct tcp_shared *sh, slip_idx_t i, slip_time_t now, struct tcp_conn_info *o)
{
    int rc = tcp_conn__info(sh, i, o);
    if (rc < 0)
        return rc;
    const struct tcp_conn *c = &sh->conns[i];
    o->last_data_sent_ms = ms_since(now, c->last_data_tx);
    o->last_data_recv_ms = ms_since(now, c->last_data_rx);
    o->last_ack_recv_ms = ms_since(now, c->last_ack_rx);
    uint64_t ns[3] = { c->chrono_ns[0], c->chrono_ns[1], c->chrono_ns[2] };
    if (c->chrono_type > TCP_CHRONO_NONE && c->chrono_type <= TCP_CHRONO_SNDBUF && now > c->chrono_start)
        ns[c->chrono_type - 1] += now - c->chrono_start;
    /* As Linux: busy_time counts all three kinds. */
    o->busy_us = (ns[0] + ns[1] + ns[2]) / SLIP_USEC;
    o->rwnd_limited_us = ns[1] / SLIP_USEC;
    o->sndbuf_limited_us = ns[2] / SLIP_USEC;
    return 0;
}

static void chrono_set(struct tcp_conn *c, uint8_t kind, slip_time_t now)
{
    if (c->chrono_type > TCP_CHRONO_NONE && c->chrono_type <= TCP_CHRONO_SNDBUF && now > c->chrono_start)
        c->chrono_ns[c->chrono_type - 1] += now - c->chrono_start;
    c->chrono_type = kind;
    c->chrono_start = now;
}

void tcp_chrono__start(struct tcp_conn *c, uint8_t kind, slip_time_t now)
{
    if (kind > c->chrono_type)
        chrono_set(c, kind, now);
}

void tcp_chrono__stop(struct tcp_conn *c, uint8_t kind, slip_time_t now)
{
    if (c->sndq.bytes == 0 && !(c->flags & TCPF_FIN_QUEUED && c->snd_una != c->snd_max))
        chrono_set(c, TCP_CHRONO_NONE, now);
    else if (kind == c->chrono_type)
        chrono_set(c, TCP_CHRONO_BUSY, now);
}
