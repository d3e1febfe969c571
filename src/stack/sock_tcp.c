/* The stack's TCP socket calls (the internal API the POSIX layer uses); each takes the lock. */
#include "stack/stack_int.h"

/* ---- TCP entry points ---- */

static bool tsock_ok(struct slip_stack *s, int sock)
{
    return sock >= 0 && (uint32_t)sock < s->t.max_conns && (s->tcp->conns[sock].flags & TCPF_USER);
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
    if (app_kfd >= 0 && s->tcp->conns[sock].state == TCPS_CLOSED)
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
        if (raddr)
            *raddr = s->tcp->conns[c].raddr;
        if (rport)
            *rport = s->tcp->conns[c].rport;
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
    stack_lock(s);
    env_refresh(s, slip_stack__now());
    struct ip_route rt;
    int rc = ip_output__route(&s->env, addr, &rt);
    /* Another try after a failed attempt: the first one's reservation and claim go first. */
    if (rc == 0 && s->tcp->conns[sock].state == TCPS_CLOSED && (s->t.ts[sock].res.key || s->t.ts[sock].res.kfd > 0))
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

ssize_t slip_tcp__send(struct slip_stack *s, int sock, const void *buf, size_t len, int more)
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
    bool corked = (s->tcp->conns[sock].flags & TCPF_AUTOCORK) != 0;
    ssize_t rc = tcp_conn__send(&s->env, s->tcp, (slip_idx_t)sock, &v, 1,
                                (more ? TCP_SEND_MORE : 0) | (cork ? TCP_SEND_AUTOCORK : 0));
    if (cork && !corked && (s->tcp->conns[sock].flags & TCPF_AUTOCORK))
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
    tx_done(s);     /* a window update may have been sent */
    stack_unlock(s);
    return rc;
}

/* Lock held, listener sock about to stop listening: accepted children were steered by the
 * listener's claim, so each live one gets its own 4-tuple claim first. */
void listener_handover(struct slip_stack *s, int sock)
{
    STACK_ASSERT_LOCKED(s);
    struct tcp_conn *c = &s->tcp->conns[sock];
    for (uint32_t i = 0; i < s->tcp->high_water; i++) {
        struct tcp_conn *ch = &s->tcp->conns[i];
        if ((int)i == sock || ch->state == TCPS_CLOSED || ch->state == TCPS_LISTEN ||
            !(ch->flags & TCPF_PASSIVE) || ch->lport != c->lport || s->t.ts[i].res.key)
            continue;
        struct tcp_res *cr = &s->t.ts[i].res;
        cr->key = 2;
        cr->laddr = ch->laddr;
        cr->lport = ch->lport;
        cr->raddr = ch->raddr;
        cr->rport = ch->rport;
        if (ch->flags & TCPF_V6) {
            cr->v6 = TCP_RES_V6;
            cr->laddr6 = ch->laddr6;
            cr->raddr6 = ch->raddr6;
        }
        tcp_res_claim(s, cr);
        if (!(ch->flags & TCPF_USER)) {
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
    bool listener = s->tcp->conns[sock].state == TCPS_LISTEN;
    if (listener && how != SHUT_WR)
        listener_handover(s, sock);
    int rc = tcp_conn__shutdown(&s->env, s->tcp, (slip_idx_t)sock, how);
    if (rc == 0 && listener && s->tcp->conns[sock].state == TCPS_CLOSED)
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
    struct tcp_conn *c = &s->tcp->conns[sock];
    struct tcp_res *r = &s->t.ts[sock].res;
    if (c->state == TCPS_LISTEN) {
        listener_handover(s, sock);
        tcp_conn__close(&s->env, s->tcp, (slip_idx_t)sock);
        tcp_res_release(s, r);
    } else {
        /* Remember the 4-tuple to recognise the connection until the engine frees it. */
        if (!r->key) {
            r->laddr = c->laddr;
            r->lport = c->lport;
            r->raddr = c->raddr;
            r->rport = c->rport;
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

int slip_tcp__info(struct slip_stack *s, int sock, struct tcp_conn_info *out)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    /* What already arrived counts, as in the kernel (FIONREAD/SIOCINQ, TCP_INFO): frames still on
     * the RX ring are taken in first. */
    env_refresh(s, slip_stack__now());
    rx_catch_up(s);
    int rc = tcp_conn__info_at(s->tcp, (slip_idx_t)sock, slip_stack__now(), out);
    stack_unlock(s);
    return rc;
}

int slip_tcp__peer(struct slip_stack *s, int sock, be32 *addr, uint16_t *port)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    uint8_t st = s->tcp->conns[sock].state;
    if (st == TCPS_CLOSED || st == TCPS_LISTEN || st == TCPS_SYN_SENT)
        return -ENOTCONN;
    *addr = s->tcp->conns[sock].raddr;
    *port = s->tcp->conns[sock].rport;
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
    *addr = s->tcp->conns[sock].laddr;
    *port = s->tcp->conns[sock].lport;
    return 0;
}
