/* The stack's TCP socket calls (the internal API the POSIX layer uses); each takes the lock. */
#include <netinet/tcp.h>

#include "stack/stack_int.h"

/* ---- TCP entry points ---- */

static bool tsock_ok(struct slip_stack *s, int sock)
{
    return sock >= 0 && (uint32_t)sock < s->t.max_conns && tcp_conn__user(s->tcp, (slip_idx_t)sock);
}

int slip_tcp__open(struct slip_stack *s)
{
    stack_lock(s);
    int c = tcp_conn__open(s->tcp);
    if (c >= 0)
        tcp_res_take(s, c);
    stack_unlock(s);
    return c;
}

int slip_tcp__listen(struct slip_stack *s, int sock, be32 addr, uint16_t port, int backlog)
{
    return slip_tcp__listen_kfd(s, sock, addr, port, backlog, -1);
}

int slip_tcp__listen_kfd(struct slip_stack *s, int sock, be32 addr, uint16_t port, int backlog, int app_kfd)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    slip_stack__tcp_sysctls(s, true);
    int kfd = app_kfd >= 0 ? adopt_kfd(app_kfd, addr, &port) : kernel_reserve_tcp(addr, &port);
    if (kfd < 0)
        return kfd;
    /* SO_REUSEPORT lives on the application's kernel socket (setsockopt goes there first, and
     * its bind() already applied Linux's rules); the engine needs it to admit the group. */
    int reuseport = 0;
    socklen_t rl = sizeof(reuseport);
    if (app_kfd >= 0 && getsockopt(app_kfd, SOL_SOCKET, SO_REUSEPORT, &reuseport, &rl) < 0)
        reuseport = 0;
    stack_lock(s);
    struct tcp_res *r = &s->t.ts[sock].res;
    if (app_kfd >= 0 && tcp_conn__state(s->tcp, (slip_idx_t)sock) == TCPS_CLOSED)
        tcp_conn__setopt(&s->env, s->tcp, (slip_idx_t)sock, TCPO_REUSEPORT, reuseport != 0);
    int rc = tcp_conn__listen(s->tcp, (slip_idx_t)sock, addr, port, backlog);
    if (rc == 0) {
        r->kfd = kfd;
        proc_kfd_hold(s, (unsigned)sock);
        r->key = 1;
        r->laddr = addr;
        r->lport = port;
        rc = tcp_res_claim(s, r);
        if (rc < 0) {
            tcp_res_release(s, r);
            kfd = -1;
        }
    }
    stack_unlock(s);
    if (rc < 0 && kfd >= 0)
        slip_kfd__close(kfd);
    return rc;
}

int slip_tcp__accept(struct slip_stack *s, int listener, be32 *raddr, uint16_t *rport)
{
    if (!tsock_ok(s, listener))
        return -EBADF;
    stack_lock(s);
    int c = tcp_conn__accept(s->tcp, (slip_idx_t)listener);
    if (c == -EAGAIN) {
        /* The handshake's last ACK may still wait on the RX ring, where the kernel's softirq
         * would have queued the connection before this call (packetdrill, non-blocking accept). */
        env_refresh(s, slip_stack__now());
        rx_catch_up(s);
        c = tcp_conn__accept(s->tcp, (slip_idx_t)listener);
    }
    if (c >= 0) {
        tcp_res_take(s, c);
        be32 ra;
        uint16_t rp;
        tcp_conn__remote(s->tcp, (slip_idx_t)c, &ra, &rp);
        if (raddr)
            *raddr = ra;
        if (rport)
            *rport = rp;
    }
    stack_unlock(s);
    return c;
}

int slip_tcp__connect(struct slip_stack *s, int sock, be32 addr, uint16_t port)
{
    return slip_tcp__connect_kfd(s, sock, addr, port, -1);
}

int slip_tcp__connect_kfd(struct slip_stack *s, int sock, be32 addr, uint16_t port, int app_kfd)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    slip_stack__tcp_sysctls(s, true);
    stack_lock(s);
    env_refresh(s, slip_stack__now());
    struct ip_route rt;
    int rc = ip_output__route(&s->env, addr, &rt);
    /* Another try after a failed attempt: the first one's reservation and claim go first. */
    if (rc == 0 && tcp_conn__state(s->tcp, (slip_idx_t)sock) == TCPS_CLOSED &&
        (s->t.ts[sock].res.key || s->t.ts[sock].res.kfd > 0))
        tcp_res_release(s, &s->t.ts[sock].res);
    stack_unlock(s);
    if (rc < 0)
        return rc;
    uint16_t lport = 0;
    int kfd = app_kfd >= 0 ? adopt_kfd(app_kfd, 0, &lport) : kernel_reserve_tcp(0, &lport);
    if (kfd < 0)
        return kfd;

    stack_lock(s);
    env_refresh(s, slip_stack__now());
    struct tcp_res *r = &s->t.ts[sock].res;
    r->kfd = kfd;
    proc_kfd_hold(s, (unsigned)sock);
    r->key = 2;
    r->laddr = rt.src;
    r->lport = lport;
    r->raddr = addr;
    r->rport = port;
    /* Claim the 4-tuple before the SYN leaves, so the SYN-ACK is steered to us. */
    rc = tcp_res_claim(s, r);
    if (rc == 0)
        rc = tcp_conn__connect(&s->env, s->tcp, (slip_idx_t)sock, rt.src, lport, addr, port);
    if (rc < 0 && rc != -EINPROGRESS)
        tcp_res_release(s, r);
    tx_done(s);     /* an event loop's SYNs leave with its next poll's kick */
    stack_unlock(s);
    return rc;
}

ssize_t slip_tcp__send(struct slip_stack *s, int sock, const void *buf, size_t len, unsigned flags)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    struct iovec v = { .iov_base = (void *)buf, .iov_len = len };
    stack_lock(s);
    env_refresh(s, slip_stack__now());
    rx_catch_up(s);
    /* Frames that wait for the next kick anyway: a partial last segment waits too, so that what
     * the thread sends before that kick (nginx's headers, then the file) leaves in one segment. */
    bool cork = tx_deferring(s);
    if (s->shm->ncork >= s->t.max_conns)
        uncork_all(s);          /* full of entries gone stale (uncorked by sends that kicked) */
    bool corked = tcp_conn__autocorked(s->tcp, (slip_idx_t)sock);
    ssize_t rc = tcp_conn__send(&s->env, s->tcp, (slip_idx_t)sock, &v, 1,
                                ((flags & SLIP_SEND_MORE) ? TCP_SEND_MORE : 0) |
                                    ((flags & SLIP_SEND_EOR) ? TCP_SEND_EOR : 0) | (cork ? TCP_SEND_AUTOCORK : 0));
    if (cork && !corked && tcp_conn__autocorked(s->tcp, (slip_idx_t)sock))
        s->t.cork[s->shm->ncork++] = (uint32_t)sock;
    tx_done(s);
    stack_unlock(s);
    return rc;
}

ssize_t slip_tcp__recv(struct slip_stack *s, int sock, void *buf, size_t len, int peek)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    env_refresh(s, slip_stack__now());
    ssize_t rc = tcp_conn__recv(&s->env, s->tcp, (slip_idx_t)sock, buf, len, peek ? TCP_RECV_PEEK : 0);
    if (rc == -EAGAIN) {
        /* Nothing queued: data may still wait on an RX ring, where the kernel's softirq would
         * have queued it before this call. Only a read that finds nothing looks (a loop reading
         * until EAGAIN pays it once), and only frames waiting cost a poll. */
        rx_catch_up(s);
        rc = tcp_conn__recv(&s->env, s->tcp, (slip_idx_t)sock, buf, len, peek ? TCP_RECV_PEEK : 0);
    }
    tx_done(s);     /* a window update may have been sent */
    stack_unlock(s);
    return rc;
}

/* Lock held, listener sock about to stop listening: accepted children were steered by the
 * listener's claim, so each live one gets its own 4-tuple claim first. */
void listener_handover(struct slip_stack *s, int sock)
{
    STACK_ASSERT_LOCKED(s);
    struct tcp_names l;
    tcp_conn__names(s->tcp, (slip_idx_t)sock, &l);
    uint32_t high = tcp_shared__high(s->tcp);
    for (uint32_t i = 0; i < high; i++) {
        uint8_t st = tcp_conn__state(s->tcp, i);
        if ((int)i == sock || st == TCPS_CLOSED || st == TCPS_LISTEN || !tcp_conn__passive(s->tcp, i) ||
            s->t.ts[i].res.key)
            continue;
        struct tcp_names ch;
        tcp_conn__names(s->tcp, i, &ch);
        if (ch.lport != l.lport)
            continue;
        struct tcp_res *cr = &s->t.ts[i].res;
        cr->key = 2;
        cr->laddr = ch.laddr;
        cr->lport = ch.lport;
        cr->raddr = ch.raddr;
        cr->rport = ch.rport;
        if (ch.v6) {
            cr->v6 = TCP_RES_V6;
            cr->laddr6 = ch.laddr6;
            cr->raddr6 = ch.raddr6;
        }
        tcp_res_claim(s, cr);
        if (!tcp_conn__user(s->tcp, i)) {
            cr->pending = 1;
            s->shm->tres_pending++;
        }
    }
}

int slip_tcp__shutdown(struct slip_stack *s, int sock, int how)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    env_refresh(s, slip_stack__now());
    bool listener = tcp_conn__state(s->tcp, (slip_idx_t)sock) == TCPS_LISTEN;
    if (listener && how != SHUT_WR)
        listener_handover(s, sock);
    int rc = tcp_conn__shutdown(&s->env, s->tcp, (slip_idx_t)sock, how);
    if (rc == 0 && listener && tcp_conn__state(s->tcp, (slip_idx_t)sock) == TCPS_CLOSED)
        tcp_res_release(s, &s->t.ts[sock].res);     /* its port reservation and claim */
    ip_output__flush(&s->env);
    stack_unlock(s);
    return rc;
}

int slip_tcp__close(struct slip_stack *s, int sock)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    env_refresh(s, slip_stack__now());
    struct tcp_res *r = &s->t.ts[sock].res;
    if (tcp_conn__state(s->tcp, (slip_idx_t)sock) == TCPS_LISTEN) {
        listener_handover(s, sock);
        tcp_conn__close(&s->env, s->tcp, (slip_idx_t)sock);
        tcp_res_release(s, r);
    } else {
        /* Remember the 4-tuple to recognise the connection until the engine frees it. */
        if (!r->key) {
            tcp_conn__local(s->tcp, (slip_idx_t)sock, &r->laddr, &r->lport);
            tcp_conn__remote(s->tcp, (slip_idx_t)sock, &r->raddr, &r->rport);
        }
        tcp_conn__close(&s->env, s->tcp, (slip_idx_t)sock);
        if (r->key || r->kfd > 0) {
            r->pending = 1;
            s->shm->tres_pending++;
            if (tcp_res_done(s, (unsigned)sock))
                tcp_res_release(s, r);
        } else {
            memset(r, 0, sizeof(*r));
        }
    }
    tx_done(s);
    stack_unlock(s);
    return 0;
}

int slip_tcp__getopt(struct slip_stack *s, int sock, int opt, int *val)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    return tcp_conn__getopt(s->tcp, (slip_idx_t)sock, (enum tcp_opt)opt, val);
}

/* The facade's option numbers are the engine's (a cast translates them). */
_Static_assert(SLIP_TCPO_NODELAY == (int)TCPO_NODELAY && SLIP_TCPO_CORK == (int)TCPO_CORK &&
               SLIP_TCPO_KEEPALIVE == (int)TCPO_KEEPALIVE && SLIP_TCPO_KEEPIDLE == (int)TCPO_KEEPIDLE &&
               SLIP_TCPO_KEEPINTVL == (int)TCPO_KEEPINTVL && SLIP_TCPO_KEEPCNT == (int)TCPO_KEEPCNT &&
               SLIP_TCPO_LINGER == (int)TCPO_LINGER && SLIP_TCPO_RCVBUF == (int)TCPO_RCVBUF &&
               SLIP_TCPO_SNDBUF == (int)TCPO_SNDBUF && SLIP_TCPO_MAXSEG == (int)TCPO_MAXSEG &&
               SLIP_TCPO_CONGESTION == (int)TCPO_CONGESTION && SLIP_TCPO_REUSEPORT == (int)TCPO_REUSEPORT &&
               SLIP_TCPO_TCLASS == (int)TCPO_TCLASS && SLIP_TCPO_HOPS == (int)TCPO_HOPS &&
               SLIP_TCPO_USER_TIMEOUT == (int)TCPO_USER_TIMEOUT,
               "enum slip_tcp_opt follows enum tcp_opt");

int slip_tcp__cc_by_name(const char *name)
{
    return tcp_cc__by_name(name);
}

/* The engine's view of a connection as the facade gives it (struct slip_tcp_info). */
static void tcp_info_out(const struct tcp_conn_info *in, struct slip_tcp_info *o)
{
    /* Linux's TCP_* state numbers (<netinet/tcp.h>) by TCPS_*. TIME_WAIT reads as CLOSE: Linux
     * moves the connection to a timewait mini-socket and the application's socket is left in
     * CLOSE. */
    static const uint8_t linux_state[TCP_NSTATES] = {
        [TCPS_CLOSED] = TCP_CLOSE, [TCPS_LISTEN] = TCP_LISTEN, [TCPS_SYN_SENT] = TCP_SYN_SENT,
        [TCPS_SYN_RECEIVED] = TCP_SYN_RECV, [TCPS_ESTABLISHED] = TCP_ESTABLISHED,
        [TCPS_CLOSE_WAIT] = TCP_CLOSE_WAIT, [TCPS_FIN_WAIT_1] = TCP_FIN_WAIT1, [TCPS_CLOSING] = TCP_CLOSING,
        [TCPS_LAST_ACK] = TCP_LAST_ACK, [TCPS_FIN_WAIT_2] = TCP_FIN_WAIT2, [TCPS_TIME_WAIT] = TCP_CLOSE,
    };
    memset(o, 0, sizeof(*o));
    o->state = in->state < TCP_NSTATES ? linux_state[in->state] : TCP_CLOSE;
    o->ca_state = in->ca_state;
    o->backoff = in->backoff;
    o->probes = in->probes;
    o->snd_wscale = in->snd_wscale;
    o->rcv_wscale = in->rcv_wscale;
    o->sack = in->sack;
    o->timestamps = in->timestamps;
    o->rto_us = in->rto_us;
    o->ato_us = (uint32_t)(TCP_DELACK_TIME / SLIP_USEC);
    o->srtt_us = in->srtt_us;
    o->rttvar_us = in->rttvar_us;
    o->mss = in->mss;
    o->rcv_mss = in->rcv_mss;
    o->advmss = in->advmss;
    o->cwnd = in->cwnd;
    o->ssthresh = in->ssthresh;
    o->snd_wnd = in->snd_wnd;
    o->rcv_wnd = in->rcv_wnd;
    o->rcv_space = in->rcv_space;
    o->reordering = in->reordering;
    o->sacked = in->sacked;
    o->lost = in->lost;
    o->retrans = in->retrans;
    o->snd_queued = in->snd_queued;
    o->rcv_queued = in->rcv_queued;
    o->unacked = in->unacked;
    o->notsent = in->notsent;
    o->last_data_sent_ms = in->last_data_sent_ms;
    o->last_data_recv_ms = in->last_data_recv_ms;
    o->last_ack_recv_ms = in->last_ack_recv_ms;
    o->busy_us = in->busy_us;
    o->rwnd_limited_us = in->rwnd_limited_us;
    o->sndbuf_limited_us = in->sndbuf_limited_us;
    o->segs_in = in->st.segs_in;
    o->segs_out = in->st.segs_out;
    o->bytes_in = in->st.bytes_in;
    o->bytes_out = in->st.bytes_out;
    o->bytes_acked = in->st.bytes_acked;
    o->retransmits = in->st.retransmits;
    o->retrans_bytes = in->st.retrans_bytes;
    o->rto_expiries = in->st.rto_expiries;
}

int slip_tcp__info(struct slip_stack *s, int sock, struct slip_tcp_info *out)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    struct tcp_conn_info in;
    stack_lock(s);
    /* What already arrived counts, as in the kernel (FIONREAD/SIOCINQ, TCP_INFO): frames still on
     * the RX ring are taken in first. */
    env_refresh(s, slip_stack__now());
    rx_catch_up(s);
    int rc = tcp_conn__info_at(s->tcp, (slip_idx_t)sock, slip_stack__now(), &in);
    stack_unlock(s);
    if (rc == 0)
        tcp_info_out(&in, out);
    return rc;
}

int slip_tcp__peer(struct slip_stack *s, int sock, be32 *addr, uint16_t *port)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    if (!tcp_conn__has_peer(s->tcp, (slip_idx_t)sock))
        return -ENOTCONN;
    tcp_conn__remote(s->tcp, (slip_idx_t)sock, addr, port);
    return 0;
}

unsigned slip_tcp__poll(struct slip_stack *s, int sock)
{
    if (!tsock_ok(s, sock))
        return SLIP_EV_ERR | SLIP_EV_HUP;
    return tcp_conn__poll(s->tcp, (slip_idx_t)sock);
}

int slip_tcp__so_error(struct slip_stack *s, int sock)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    int rc = tcp_conn__so_error(s->tcp, (slip_idx_t)sock);
    stack_unlock(s);
    return rc;
}

int slip_tcp__setopt(struct slip_stack *s, int sock, int opt, int val)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    env_refresh(s, slip_stack__now());
    int rc = tcp_conn__setopt(&s->env, s->tcp, (slip_idx_t)sock, (enum tcp_opt)opt, val);
    ip_output__flush(&s->env);
    stack_unlock(s);
    return rc;
}

int slip_tcp__local(struct slip_stack *s, int sock, be32 *addr, uint16_t *port)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    tcp_conn__local(s->tcp, (slip_idx_t)sock, addr, port);
    return 0;
}
