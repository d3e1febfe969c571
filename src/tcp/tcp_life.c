/* Connection lifecycle from the socket side: open, connect (both families), a passive child made
 * for a listener, shutdown, abort and close. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "tcp/tcp_var.h"
#include "wire/eth.h"
#include "wire/ipv4.h"

int tcp_conn__open(struct tcp_shared *sh)
{
    int i = tcp_conn__alloc(sh);
    if (i < 0)
        return i;
    sh->conns[i].flags |= TCPF_USER;
    return i;
}

/* RFC 7323 §2.2: the smallest shift that lets the largest buffer we may offer fit 16 bits: the
 * buffer autotuning may grow to, or the one the application set (Linux tcp_select_initial_window
 * likewise starts from tcp_rmem[2] unless SO_RCVBUF locked the buffer). */
uint8_t tcp_conn__wscale(const struct tcp_shared *sh, const struct tcp_conn *c)
{
    uint8_t s = 0;
    uint32_t max = SLIP_MAX(c->rcvbuf, (uint32_t)TCP_RCVBUF_DEFAULT);
    if (tcp_buf__rcv_auto(sh, c))
        max = SLIP_MAX(max, tcp_buf__rcv_max(sh));
    while (s < 14 && (max >> s) > 65535)
        s++;
    return s;
}

/* Send-side initial values once the ISS is chosen (active open, or SYN on a listener). */
static void init_send(struct tcp_shared *sh, struct tcp_conn *c, uint32_t iss)
{
    c->iss = iss;
    c->snd_una = c->snd_nxt = c->snd_max = iss;
    c->snd_q_seq = iss + 1;
    c->snd_recover = c->high_rxt = iss;
    c->snd_sml = iss;
    c->cwnd_usage_seq = iss;
    c->max_flight = 0;
    c->cwnd_limited = 0;
    tcp_map__release(c);
    c->ntxr = 0;                /* RACK state starts afresh (TIME-WAIT reuse keeps the slot) */
    c->rack_flags = 0;
    c->tlp_state = 0;
    c->rcv_wscale = tcp_conn__wscale(sh, c);
    c->rcv_rtt = c->rcv_rtt_time = c->rcvq_time = 0;   /* autotuning measures afresh */
    c->ts_offset = tcp_ts_offset(sh, c->laddr, c->lport, c->raddr, c->rport);
    c->quickacks = TCP_QUICKACKS;
}

/* What connect() checks before the route, for both families. */
static int connect_check(struct tcp_conn *c, bool have_raddr, uint16_t lport, uint16_t rport)
{
    if (c->state == TCPS_SYN_SENT)
        return -EALREADY;
    if (c->state == TCPS_LISTEN)
        return -EINVAL;
    if (c->state != TCPS_CLOSED || ((c->flags & TCPF_DONE) && !(c->flags & TCPF_OPEN_FAILED)))
        return -EISCONN;
    if (!have_raddr || !rport || !lport)
        return -EINVAL;
    /* A failed attempt (refused, timed out) leaves the socket ready for another, as in Linux. */
    c->flags &= ~(TCPF_DONE | TCPF_OPEN_FAILED);
    c->so_error = 0;
    return 0;
}

static int connect_tail(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, slip_idx_t old,
                        be32 laddr, uint16_t lport, be32 raddr, uint16_t rport);

int tcp_conn__connect(struct ip_env *env, struct tcp_shared *sh, slip_idx_t i, be32 laddr, uint16_t lport,
                      be32 raddr, uint16_t rport)
{
    struct tcp_conn *c = tcp_conn__user(sh, i);
    if (!c)
        return -EBADF;
    int rc = connect_check(c, raddr != 0, lport, rport);
    if (rc < 0)
        return rc;
    struct ip_route rt;
    rc = ip_output__route(env, raddr, &rt);
    if (rc < 0)
        return rc;
    if (!laddr)
        laddr = rt.src;
    c->flags &= ~TCPF_V6;
    return connect_tail(env, sh, c, tcp__lookup4_conn(sh, laddr, lport, raddr, rport), laddr, lport, raddr, rport);
}

int tcp_conn__connect6(struct ip_env *env, struct tcp_shared *sh, slip_idx_t i, const struct wire_ipv6_addr *laddr,
                       uint16_t lport, const struct wire_ipv6_addr *raddr, uint16_t rport, uint32_t scope)
{
    struct tcp_conn *c = tcp_conn__user(sh, i);
    if (!c)
        return -EBADF;
    be32 rf = tcp6__fold(sh, raddr);
    int rc = connect_check(c, rf != 0, lport, rport);
    if (rc < 0)
        return rc;
    struct ip6_route rt;
    rc = ip6_output__route(env, raddr, scope, &rt);
    if (rc < 0)
        return rc;
    const struct wire_ipv6_addr *src = (laddr && tcp6__fold(sh, laddr)) ? laddr : &rt.src;
    be32 lf = tcp6__fold(sh, src);
    slip_idx_t old = tcp__lookup6_conn(sh, lf, src, lport, rf, raddr, rport);
    c->flags |= TCPF_V6;
    c->laddr6 = *src;
    c->raddr6 = *raddr;
    c->flowlabel = 0;           /* a new tuple: tcp6__send hashes it again */
    c->scope = wire_ipv6__is_link_local(raddr) ? (scope ? scope : rt.ifindex) : 0;
    return connect_tail(env, sh, c, old, lf, lport, rf, rport);
}

static int connect_tail(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, slip_idx_t old,
                        be32 laddr, uint16_t lport, be32 raddr, uint16_t rport)
{
    if (old != SLIP_NIL) {
        struct tcp_conn *o = &sh->conns[old];
        /* A TIME_WAIT of the same tuple is taken over (Linux tcp_tw_reuse with timestamps);
         * the ISN below is time-based so it lies beyond the old sequence space. */
        if (o->state != TCPS_TIME_WAIT || (o->flags & TCPF_USER))
            return -EADDRINUSE;
        sh->c.tw_reused++;
        tcp_timer__stop_all(o);
        tcp_conn__free(env, sh, o);
    }
    c->laddr = laddr;
    c->lport = lport;
    c->raddr = raddr;
    c->rport = rport;
    c->mss = tcp_conn__route_mss(env, c);
    init_send(sh, c, tcp_isn(sh, laddr, lport, raddr, rport, env->now));
    tcp_conn__default_cc(sh, c);
    tcp_cc__get(c->cc_algo)->init(c);
    tcp_set_state(sh, c, TCPS_SYN_SENT);
    tcp_conn__hash(sh, c);
    sh->c.active_opens++;
    tcp_output(env, sh, c);
    return -EINPROGRESS;
}

int tcp_conn__spawn(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *l, const struct tcp_seg *s,
                    uint32_t iss)
{
    int i = tcp_conn__alloc(sh);
    if (i < 0)
        return i;
    struct tcp_conn *c = &sh->conns[i];
    c->flags = l->flags & (TCPF_NODELAY | TCPF_KEEPALIVE | TCPF_LINGER | TCPF_REUSEPORT);
    c->flags |= TCPF_PASSIVE;
    c->sndbuf = l->sndbuf;
    c->rcvbuf = l->rcvbuf;
    c->buf_lock = l->buf_lock;
    c->keepidle = l->keepidle;
    c->keepintvl = l->keepintvl;
    c->keepcnt = l->keepcnt;
    c->user_timeout_ms = l->user_timeout_ms;
    c->linger = l->linger;
    c->cc_algo = l->cc_algo;
    c->cc_user = l->cc_user;
    c->user_mss = l->user_mss;
    c->tclass = l->tclass;
    c->hops = l->hops;
    tcp_seg__name(c, s);
    c->parent = tcp_conn__idx(sh, l);
    c->mss = tcp_conn__route_mss(env, c);
    init_send(sh, c, iss);
    tcp_cc__get(c->cc_algo)->init(c);
    tcp_set_state(sh, c, TCPS_SYN_RECEIVED);
    tcp_conn__hash(sh, c);
    l->synq_len++;
    sh->c.passive_opens++;
    return i;
}

void tcp_conn__clamp_iw(struct tcp_conn *c)
{
    uint32_t iw = TCP_INIT_CWND * tcp_output__data_mss(c);
    if (c->cwnd > iw)
        c->cwnd = iw;
}

int tcp_conn__shutdown(struct ip_env *env, struct tcp_shared *sh, slip_idx_t i, int how)
{
    struct tcp_conn *c = tcp_conn__user(sh, i);
    if (!c)
        return -EBADF;
    if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
        return -EINVAL;
    if (c->state == TCPS_LISTEN && how != SHUT_WR) {
        /* Linux (inet_shutdown): a listener shut for reading stops listening; blocked accepts
         * fail with EINVAL and the socket may listen or connect again. */
        tcp_conn__stop_listener(env, sh, c);
        c->acceptq_len = c->synq_len = 0;
        c->acceptq_head = c->acceptq_tail = SLIP_NIL;
        tcp_set_state(sh, c, TCPS_CLOSED);
        tcp_conn__wake(sh, c);
        return 0;
    }
    if (c->state == TCPS_CLOSED || c->state == TCPS_LISTEN || c->state == TCPS_SYN_SENT) {
        if (c->state == TCPS_SYN_SENT) {
            tcp_conn__drop(env, sh, c, 0);
            return 0;
        }
        return -ENOTCONN;
    }
    if (how == SHUT_RD || how == SHUT_RDWR) {
        /* Linux (inet_shutdown) keeps what is queued: reads return it, then 0. */
        c->flags |= TCPF_SHUT_RD;
        tcp_conn__wake(sh, c);
    }
    if ((how == SHUT_WR || how == SHUT_RDWR) && !(c->flags & TCPF_FIN_QUEUED)) {
        /* RFC 9293 §3.10.4 CLOSE: ESTABLISHED/SYN-RECEIVED -> FIN-WAIT-1, CLOSE-WAIT -> LAST-ACK,
         * the FIN going out after queued data. */
        c->flags |= TCPF_FIN_QUEUED;
        if (c->state == TCPS_ESTABLISHED || c->state == TCPS_SYN_RECEIVED)
            tcp_set_state(sh, c, TCPS_FIN_WAIT_1);
        else if (c->state == TCPS_CLOSE_WAIT)
            tcp_set_state(sh, c, TCPS_LAST_ACK);
        tcp_output(env, sh, c);
    }
    return 0;
}

void tcp_conn__abort(struct ip_env *env, struct tcp_shared *sh, slip_idx_t i)
{
    if (i >= sh->max_conns || sh->conns[i].rcvbuf == 0)
        return;
    struct tcp_conn *c = &sh->conns[i];
    if (TCPS_HAVERCVDSYN(c->state) && c->state != TCPS_TIME_WAIT)
        tcp_output__rst(env, sh, c);
    c->flags &= ~TCPF_USER;
    if (c->state == TCPS_LISTEN) {
        tcp_conn__close(env, sh, i);
        return;
    }
    tcp_conn__drop(env, sh, c, 0);
    tcp_conn__free(env, sh, c);
}

void tcp_conn__close(struct ip_env *env, struct tcp_shared *sh, slip_idx_t i)
{
    if (i >= sh->max_conns || sh->conns[i].rcvbuf == 0)
        return;
    struct tcp_conn *c = &sh->conns[i];
    if (c->state == TCPS_LISTEN) {
        tcp_conn__close_listener(env, sh, c);
        return;
    }
    c->flags &= ~TCPF_USER;
    c->flags |= TCPF_ORPHAN;
    if (c->state == TCPS_CLOSED || c->state == TCPS_SYN_SENT) {
        tcp_conn__drop(env, sh, c, 0);
        return;
    }
    /* RFC 2525 §2.17 and Linux: closing with unread data, or SO_LINGER with zero time, aborts. */
    bool unread = c->rcvq.bytes > 0 || c->ooo_bytes > 0;
    if (unread || ((c->flags & TCPF_LINGER) && c->linger == 0)) {
        /* What the application wrote before closing and the window allows leaves first: Linux
         * sent it at write time, where a send from an event loop waits (autocork) for the next
         * kick. Without this an event-loop server's reply, written just before a close that
         * left the request unread, never left: the peer got the RST alone (test_tx_defer). */
        if (c->state != TCPS_TIME_WAIT && unread) {
            c->flags &= ~TCPF_AUTOCORK;
            tcp_output(env, sh, c);
        }
        if (c->state != TCPS_TIME_WAIT)
            tcp_output__rst(env, sh, c);
        tcp_conn__drop(env, sh, c, 0);
        return;
    }
    c->flags |= TCPF_SHUT_RD;
    if (!(c->flags & TCPF_FIN_QUEUED)) {
        c->flags |= TCPF_FIN_QUEUED;
        if (c->state == TCPS_ESTABLISHED || c->state == TCPS_SYN_RECEIVED)
            tcp_set_state(sh, c, TCPS_FIN_WAIT_1);
        else if (c->state == TCPS_CLOSE_WAIT)
            tcp_set_state(sh, c, TCPS_LAST_ACK);
    }
    if (c->state == TCPS_FIN_WAIT_2)
        tcp_timer__set(sh, c, TT_2MSL, env->now + TCP_FIN_TIMEOUT);
    tcp_output(env, sh, c);
}
