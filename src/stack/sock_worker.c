/* A stack per worker (issue 13): a process forked from a program's process, holding nothing of
 * its parent's stack but SO_REUSEPORT listeners (nginx's workers with `listen ... reuseport`),
 * moves to a stack of its own, where each of those listeners is copied: same address, port and
 * options, on the same kernel socket. A copy listens, and joins the listener's SO_REUSEPORT group
 * in the XDP program (claims.c), at the worker's first use of it (a listener the worker never
 * uses must take no connections), so its connections and every later packet of them go straight
 * to the worker's stack. The parent's listener, still open in a
 * process that never uses it (nginx's master), is parked from then on, also after the last copy
 * is gone, until a process of its stack uses it: it would get connections nobody accepts
 * (steer_group.c). Each call takes the locks it needs, one stack's at a time. */
#include "stack/stack_int.h"

/* Options a copy takes from the listener (those a listener keeps; the rest are the engine's).
 * TCP_MAXSEG is not read back (it reads 536 on a socket that is not connected and never set it,
 * as Linux): the copy takes the value set, if any (tcp_listen_params.user_mss). */
static const enum tcp_opt copied_opts[] = {
    TCPO_NODELAY, TCPO_KEEPALIVE, TCPO_KEEPIDLE, TCPO_KEEPINTVL, TCPO_KEEPCNT, TCPO_LINGER,
    TCPO_RCVBUF, TCPO_SNDBUF, TCPO_CONGESTION, TCPO_TCLASS, TCPO_HOPS, TCPO_USER_TIMEOUT,
};
#define NCOPIED (sizeof(copied_opts) / sizeof(copied_opts[0]))

int slip_tcp__copy_listener(struct slip_stack *from, int fsock, struct slip_stack *to, int app_kfd, bool listen)
{
    if (fsock < 0 || (uint32_t)fsock >= from->t.max_conns)
        return -EBADF;
    int vals[NCOPIED];
    bool have[NCOPIED];
    stack_lock(from);
    struct tcp_listen_params lp;
    tcp_conn__listen_params(from->tcp, (slip_idx_t)fsock, &lp);
    const struct tcp_res *r = &from->t.ts[fsock].res;
    bool ok = tcp_conn__user(from->tcp, (slip_idx_t)fsock) && lp.listening &&
              tcp_conn__reuseport(from->tcp, (slip_idx_t)fsock) && r->key == 1;
    /* Parked only when the parent's listener stays open (another process holds it) and no
     * process of that stack uses a listener on this key. */
    bool park = ok && from->t.ts[fsock].refs > 1;
    for (unsigned i = 0; park && i < slip_socktab__tcp_high(&from->t); i++) {
        const struct tcp_res *o = &from->t.ts[i].res;
        if (o->key == 1 && o->used && o->lport == r->lport && o->laddr == r->laddr && o->v6 == r->v6 &&
            memcmp(&o->laddr6, &r->laddr6, 16) == 0)
            park = false;
    }
    unsigned origin = from->index;
    for (unsigned i = 0; ok && i < NCOPIED; i++)
        have[i] = tcp_conn__getopt(from->tcp, (slip_idx_t)fsock, copied_opts[i], &vals[i]) == 0;
    stack_unlock(from);
    if (!ok)
        return -EINVAL;

    int sock = slip_tcp__open(to);
    if (sock < 0)
        return sock;
    stack_lock(to);
    for (unsigned i = 0; i < NCOPIED; i++) {
        /* A buffer size is copied only when the application set it: setting it locks it, and
         * the copy's buffers autotune like the parent's. */
        if ((copied_opts[i] == TCPO_SNDBUF && !(lp.buf_lock & TCP_LOCK_SND)) ||
            (copied_opts[i] == TCPO_RCVBUF && !(lp.buf_lock & TCP_LOCK_RCV)))
            continue;
        if (have[i])
            tcp_conn__setopt(&to->env, to->tcp, (slip_idx_t)sock, copied_opts[i], vals[i]);
    }
    /* None set: the route and the peer's MSS decide, as for the parent's own connections
     * (copying the 536 made every connection of a worker's stack send 524-byte segments). */
    if (lp.user_mss)
        tcp_conn__setopt(&to->env, to->tcp, (slip_idx_t)sock, TCPO_MAXSEG, lp.user_mss);
    struct tcp_res *nr = &to->t.ts[sock].res;
    nr->origin = park ? (uint8_t)(origin + 1) : 0;
    nr->used = 1;       /* the worker's use is what made it listen */
    stack_unlock(to);
    if (!listen)
        return sock;
    int rc = lp.v6 ? slip_tcp6__listen_kfd(to, sock, &lp.laddr6, lp.scope, lp.v6only, (int)lp.backlog, app_kfd)
                   : slip_tcp__listen_kfd(to, sock, lp.laddr, lp.lport, (int)lp.backlog, app_kfd);
    if (rc < 0) {
        slip_tcp__close(to, sock);
        return rc;
    }
    return sock;
}

void slip_tcp__listener_used(struct slip_stack *s, int sock)
{
    if (sock < 0 || (uint32_t)sock >= s->t.max_conns)
        return;
    stack_lock(s);
    if (tcp_conn__state(s->tcp, (slip_idx_t)sock) == TCPS_LISTEN)
        tcp_res_used(s, &s->t.ts[sock].res);
    stack_unlock(s);
}

int slip_tcp__reuseport_others(struct slip_stack *s, int sock)
{
    if (sock < 0 || (uint32_t)sock >= s->t.max_conns)
        return -EBADF;
    int n = 0;
    stack_lock(s);
    const struct tcp_res *r = &s->t.ts[sock].res;
    for (unsigned i = 0; r->key == 1 && i < slip_socktab__tcp_high(&s->t); i++) {
        const struct tcp_res *o = &s->t.ts[i].res;
        if (i != (unsigned)sock && o->key == 1 && o->lport == r->lport && o->laddr == r->laddr && o->v6 == r->v6 &&
            memcmp(&o->laddr6, &r->laddr6, 16) == 0 && tcp_conn__state(s->tcp, (slip_idx_t)i) == TCPS_LISTEN &&
            tcp_conn__reuseport(s->tcp, (slip_idx_t)i) && slip_proc__held(s, true, (int)i) == 0)
            n++;
    }
    stack_unlock(s);
    return n;
}
