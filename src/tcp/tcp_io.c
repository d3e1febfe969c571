/* The data path from the socket side: send (into sndq, then output) and recv (out of rcvq, then
 * a window update when the window grew enough). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "tcp/tcp_var.h"
#include "wire/eth.h"
#include "wire/ipv4.h"

ssize_t tcp_conn__send(struct ip_env *env, struct tcp_shared *sh, slip_idx_t i, const struct iovec *iov,
                       int iovcnt, unsigned flags)
{
    struct tcp_conn *c = tcp_conn__user(sh, i);
    if (!c)
        return -EBADF;
    if (c->so_error) {
        int e = c->so_error;
        c->so_error = 0;
        return -e;
    }
    if ((c->flags & (TCPF_FIN_QUEUED | TCPF_DONE)) || c->state > TCPS_CLOSE_WAIT)
        return -EPIPE;
    if (c->state == TCPS_CLOSED || c->state == TCPS_LISTEN)
        return -ENOTCONN;
    if (c->state == TCPS_SYN_SENT || c->state == TCPS_SYN_RECEIVED)
        return -EAGAIN;
    size_t want = 0;
    for (int k = 0; k < iovcnt; k++)
        want += iov[k].iov_len;
    if (want == 0)
        return 0;
    if (c->sndq.bytes >= c->sndbuf) {
        c->sndbuf_full = 1;     /* the writer waits for room (TCP_INFO sndbuf_limited) */
        return -EAGAIN;
    }
    size_t room = c->sndbuf - c->sndq.bytes;
    size_t todo = SLIP_MIN(want, room);
    if (todo < want)
        c->sndbuf_full = 1;
    size_t done = 0;
    int k = 0;
    size_t koff = 0;
    struct pkt_pool *pool = env->pool;
    uint32_t cap = pool->frame_size;

    while (done < todo) {
        slip_idx_t t = c->sndq.tail;
        struct pkt_meta *m = t != SLIP_NIL ? pkt__meta(pool, t) : NULL;
        if (!m || (uint32_t)m->off + m->len >= cap || (m->sflags & PKT_SND_EOR)) {
            slip_idx_t n = pkt__alloc(pool);
            if (n == SLIP_NIL) {
                sh->c.no_frame++;
                c->st.no_frame++;
                break;
            }
            pkt_queue__push(pool, &c->sndq, n, 0);
            continue;
        }
        uint32_t space = cap - m->off - m->len;
        size_t n = SLIP_MIN((size_t)space, todo - done);
        uint8_t *dst = pkt__data(pool, t) + m->len;
        size_t copied = 0;
        while (copied < n) {
            while (k < iovcnt && koff == iov[k].iov_len) {
                k++;
                koff = 0;
            }
            size_t part = SLIP_MIN(n - copied, iov[k].iov_len - koff);
            memcpy(dst + copied, (const uint8_t *)iov[k].iov_base + koff, part);
            copied += part;
            koff += part;
        }
        m->len = (uint16_t)(m->len + n);
        c->sndq.bytes += (uint32_t)n;
        done += n;
    }
    if (done == 0)
        return -ENOBUFS;
    if ((flags & TCP_SEND_EOR) && done == want) {
        /* The whole record is queued: its last buffer ends it (a short send leaves the mark to
         * the call that queues the rest, as the caller passes MSG_EOR again). */
        pkt__meta(pool, c->sndq.tail)->sflags |= PKT_SND_EOR;
        c->eor_recs = 1;
    }
    tcp_send__queued(env, sh, c, flags);
    return (ssize_t)done;
}

void tcp_send__queued(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, unsigned flags)
{
    if (flags & TCP_SEND_MORE)
        c->flags |= TCPF_MORE;
    else
        c->flags &= ~TCPF_MORE;
    if (flags & TCP_SEND_AUTOCORK)
        c->flags |= TCPF_AUTOCORK;
    else
        c->flags &= ~TCPF_AUTOCORK;     /* a send that does not wait pushes what waited */
    /* MSG_MORE holds a partial tail in this send's own output only, as Linux (tcp_push corks
     * that one push): output driven later by an ACK sends it under the socket's own Nagle and
     * TCP_CORK rules (packetdrill nagle/sendmsg_msg_more). */
    c->in_send = 1;
    tcp_output(env, sh, c);
    c->in_send = 0;
}

void tcp_conn__uncork(struct ip_env *env, struct tcp_shared *sh, slip_idx_t i)
{
    struct tcp_conn *c = &sh->conns[i];
    if (!(c->flags & TCPF_AUTOCORK))
        return;
    c->flags &= ~TCPF_AUTOCORK;
    c->in_send = 1;     /* the deferred end of the last send: its MSG_MORE still holds */
    tcp_output(env, sh, c);
    c->in_send = 0;
}

/* Drops n bytes from the front of rcvq, freeing emptied buffers. */
static void rcvq_consume(struct pkt_pool *pool, struct tcp_conn *c, uint32_t n)
{
    while (n && c->rcvq.head != SLIP_NIL) {
        slip_idx_t h = c->rcvq.head;
        struct pkt_meta *m = pkt__meta(pool, h);
        if (m->len > n) {
            m->off = (uint16_t)(m->off + n);
            m->len = (uint16_t)(m->len - n);
            m->total -= n;
            c->rcvq.bytes -= n;
            return;
        }
        n -= m->len;
        c->rcvq.bytes -= m->len;
        slip_idx_t next = m->chain != SLIP_NIL ? m->chain : m->next;
        if (m->chain != SLIP_NIL) {
            struct pkt_meta *cm = pkt__meta(pool, m->chain);
            cm->next = m->next;
            cm->total = m->total - m->len;
        } else {
            c->rcvq.count--;
        }
        if (c->rcvq.tail == h)
            c->rcvq.tail = m->chain != SLIP_NIL ? m->chain : SLIP_NIL;
        c->rcvq.head = next;
        m->chain = SLIP_NIL;
        pkt__free_chain(pool, h);
        c->rcv_frames--;
    }
    if (c->rcvq.head == SLIP_NIL)
        c->rcvq.tail = SLIP_NIL;
}

void tcp_rcvq__purge(struct pkt_pool *pool, struct tcp_conn *c)
{
    rcvq_consume(pool, c, c->rcvq.bytes);
    pkt_queue__purge(pool, &c->rcvq);
    c->rcvq.bytes = 0;
}

/* RFC 9293 §3.8.6.2.2: after the application reads, tell the peer once the window grew by
 * min(RCV.BUFF/2, MSS) beyond what it knows; smaller openings would invite silly segments. The
 * space counts up to the largest window the header can carry (65535 << our scale, Linux's
 * window_clamp): without window scaling a 64 KiB window already offered cannot grow, and an
 * update would repeat it (packetdrill ioctl/ioctl-siocinq-fin: Linux sends none after a read). */
static void maybe_window_update(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    if (!TCPS_HAVEESTABLISHED(c->state) || c->state == TCPS_TIME_WAIT)
        return;
    uint32_t space = SLIP_MIN(tcp_rcv_space(c), 65535u << c->rcv_wscale);
    uint32_t edge = c->rcv_nxt + space;
    uint32_t thresh = SLIP_MIN(c->rcvbuf / 2, (uint32_t)c->rcv_mss);
    if (seq_geq(edge, c->rcv_adv + thresh) && seq_gt(edge, c->rcv_adv)) {
        /* Only worth it if the advertised window is getting small (Linux: under half). */
        if (c->rcv_adv - c->rcv_nxt <= space / 2) {
            c->flags |= TCPF_ACK_NOW;
            tcp_output(env, sh, c);
        }
    }
}

ssize_t tcp_conn__recv(struct ip_env *env, struct tcp_shared *sh, slip_idx_t i, void *buf, size_t len,
                       unsigned flags)
{
    struct tcp_conn *c = tcp_conn__user(sh, i);
    if (!c)
        return -EBADF;
    if (c->state == TCPS_LISTEN)
        return -ENOTCONN;
    if (c->rcvq.bytes == 0) {
        if (c->so_error) {
            int e = c->so_error;
            c->so_error = 0;
            return -e;
        }
        if (c->flags & (TCPF_RCVD_FIN | TCPF_SHUT_RD | TCPF_DONE))
            return 0;
        if (c->state == TCPS_CLOSED)
            return -ENOTCONN;
        return -EAGAIN;
    }
    if (len == 0)
        return 0;
    size_t n = 0;
    uint8_t *dst = buf;
    for (slip_idx_t h = c->rcvq.head; h != SLIP_NIL && n < len; h = pkt__meta(env->pool, h)->next)
        n += pkt__chain_copy(env->pool, h, 0, dst + n, len - n);
    if (!(flags & TCP_RECV_PEEK)) {
        rcvq_consume(env->pool, c, (uint32_t)n);
        tcp_buf__rcv_space(env, sh, c);
        maybe_window_update(env, sh, c);
    }
    return (ssize_t)n;
}
