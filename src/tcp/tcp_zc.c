/* Zero-copy send: the send queue takes whole frames the caller filled itself (a file read
 * straight into UMEM frames by the block engine, see src/stack/sock_tcp_zc.c) instead of
 * copying the caller's bytes into frames of its own. The frames join the queue as they are,
 * so segments are built from them exactly as from copied data. */
#include <errno.h>

#include "tcp/tcp_var.h"

/* The checks tcp_conn__send makes before it copies (the same answers, in the same order). */
static struct tcp_conn *sendable(struct tcp_shared *sh, slip_idx_t i, ssize_t *err)
{
    struct tcp_conn *c = i < sh->max_conns ? &sh->conns[i] : NULL;
    if (!c || !(c->flags & TCPF_USER)) {
        *err = -EBADF;
        return NULL;
    }
    if (c->so_error) {
        *err = -c->so_error;
        c->so_error = 0;
        return NULL;
    }
    if ((c->flags & (TCPF_FIN_QUEUED | TCPF_DONE)) || c->state > TCPS_CLOSE_WAIT)
        *err = -EPIPE;
    else if (c->state == TCPS_CLOSED || c->state == TCPS_LISTEN)
        *err = -ENOTCONN;
    else if (c->state == TCPS_SYN_SENT || c->state == TCPS_SYN_RECEIVED)
        *err = -EAGAIN;
    else
        return c;
    return NULL;
}

ssize_t tcp_conn__send_room(struct ip_env *env, struct tcp_shared *sh, slip_idx_t i)
{
    ssize_t err;
    struct tcp_conn *c = sendable(sh, i, &err);
    if (!c)
        return err;
    if (c->sndq.bytes >= c->sndbuf) {
        c->sndbuf_full = 1;     /* the writer waits for room (TCP_INFO sndbuf_limited) */
        return -EAGAIN;
    }
    return (ssize_t)(c->sndbuf - c->sndq.bytes);
}

ssize_t tcp_conn__send_frames(struct ip_env *env, struct tcp_shared *sh, slip_idx_t i, const slip_idx_t *f,
                              unsigned n, unsigned flags)
{
    ssize_t err;
    struct tcp_conn *c = sendable(sh, i, &err);
    if (!c) {
        for (unsigned k = 0; k < n; k++)
            pkt__free_chain(env->pool, f[k]);
        return err;
    }
    size_t done = 0;
    for (unsigned k = 0; k < n; k++) {
        struct pkt_meta *m = pkt__meta(env->pool, f[k]);
        m->chain = SLIP_NIL;
        if (m->len == 0 || (uint32_t)m->off + m->len > env->pool->frame_size) {
            pkt__free_chain(env->pool, f[k]);
            continue;
        }
        pkt_queue__push(env->pool, &c->sndq, f[k], 0);
        c->sndq.bytes += m->len;
        done += m->len;
    }
    if (done == 0)
        return 0;
    tcp_send__queued(env, sh, c, flags);
    return (ssize_t)done;
}
