/* Listening sockets: listen() with its SO_REUSEPORT address check, the accept queue, accept(),
 * and stopping a listener (its unaccepted children die with it). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "tcp/tcp_var.h"
#include "wire/eth.h"
#include "wire/ipv4.h"

/* Two listeners on the same port whose folded addresses are equal: do they take the same
 * segments? Same family and address; or IPv4 any and a dual-stack :: (Linux refuses that too). */
static bool listen_clash(const struct tcp_conn *c, const struct tcp_conn *o)
{
    bool c6 = c->flags & TCPF_V6, o6 = o->flags & TCPF_V6;
    if (c6 && o6)
        return tcp__addr6_eq(&c->laddr6, &o->laddr6);
    if (!c6 && !o6)
        return true;
    return c6 ? !c->v6only : !o->v6only;     /* laddr 0 on both: 0.0.0.0 against :: */
}

static int listen_at(struct tcp_shared *sh, struct tcp_conn *c, be32 laddr, uint16_t lport, int backlog);

int tcp_conn__listen(struct tcp_shared *sh, slip_idx_t i, be32 laddr, uint16_t lport, int backlog)
{
    struct tcp_conn *c = tcp_conn__user(sh, i);
    if (!c)
        return -EBADF;
    if (c->state == TCPS_CLOSED)
        c->flags &= ~TCPF_V6;
    return listen_at(sh, c, laddr, lport, backlog);
}

int tcp_conn__listen6(struct tcp_shared *sh, slip_idx_t i, const struct wire_ipv6_addr *laddr, uint32_t scope,
                      bool v6only, uint16_t lport, int backlog)
{
    struct tcp_conn *c = tcp_conn__user(sh, i);
    if (!c)
        return -EBADF;
    if (c->state == TCPS_CLOSED) {
        c->flags |= TCPF_V6;
        c->laddr6 = *laddr;
        c->scope = scope;
        c->v6only = v6only;
    }
    return listen_at(sh, c, tcp6__fold(sh, laddr), lport, backlog);
}

static int listen_at(struct tcp_shared *sh, struct tcp_conn *c, be32 laddr, uint16_t lport, int backlog)
{
    if (backlog < 1)
        backlog = 1;
    if (backlog > 65535)
        backlog = 65535;
    if (c->state == TCPS_LISTEN) {
        c->backlog = (uint32_t)backlog;
        return 0;
    }
    if (c->state != TCPS_CLOSED || (c->flags & TCPF_DONE))
        return -EINVAL;
    tcp_conn__default_cc(sh, c);            /* the children take the listener's */
    /* SO_REUSEPORT (Linux): listeners may share (laddr, lport) when all of them asked for it.
     * The same-user rule is the kernel's: the application's kernel socket is bound first. */
    for (slip_idx_t j = sh->lhash[tcp__lhash(lport)]; j != SLIP_NIL; j = sh->conns[j].hnext) {
        const struct tcp_conn *o = &sh->conns[j];
        if (o->lport == lport && o->laddr == laddr && listen_clash(c, o) &&
            !((c->flags & TCPF_REUSEPORT) && (o->flags & TCPF_REUSEPORT)))
            return -EADDRINUSE;
    }
    c->laddr = laddr;
    c->lport = lport;
    c->backlog = (uint32_t)backlog;
    tcp_set_state(sh, c, TCPS_LISTEN);
    tcp_conn__hash(sh, c);
    return 0;
}

int tcp_conn__queue_accept(struct tcp_shared *sh, struct tcp_conn *c)
{
    if (c->parent == SLIP_NIL)
        return 0;
    struct tcp_conn *l = &sh->conns[c->parent];
    if (c->flags & TCPF_IN_ACCEPTQ)
        return 0;
    if (l->acceptq_len >= l->backlog)
        return -ENOSPC;
    if (l->synq_len)
        l->synq_len--;
    slip_idx_t i = tcp_conn__idx(sh, c);
    c->qnext = SLIP_NIL;
    if (l->acceptq_tail == SLIP_NIL)
        l->acceptq_head = i;
    else
        sh->conns[l->acceptq_tail].qnext = i;
    l->acceptq_tail = i;
    l->acceptq_len++;
    c->flags |= TCPF_IN_ACCEPTQ;
    tcp_conn__wake(sh, l);
    return 0;
}

int tcp_conn__accept(struct tcp_shared *sh, slip_idx_t li)
{
    struct tcp_conn *l = tcp_conn__user(sh, li);
    if (!l || l->state != TCPS_LISTEN)
        return -EINVAL;
    slip_idx_t i = l->acceptq_head;
    if (i == SLIP_NIL)
        return -EAGAIN;
    struct tcp_conn *c = &sh->conns[i];
    tcp_conn__acceptq_remove(sh, l, c);
    c->parent = SLIP_NIL;
    c->flags |= TCPF_USER;
    return (int)i;
}

/* Stops listening: no new connections, the unaccepted ones die. */
void tcp_conn__stop_listener(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *l)
{
    slip_idx_t li = tcp_conn__idx(sh, l);
    tcp_conn__unhash(sh, l);
    /* Children not accepted yet die with it; established ones get a RST as on Linux. */
    for (uint32_t j = 0; j < sh->high_water; j++) {
        struct tcp_conn *c = &sh->conns[j];
        if (c->parent != li || j == li)
            continue;
        if (TCPS_HAVERCVDSYN(c->state))
            tcp_output__rst(env, sh, c);
        tcp_conn__detach_parent(sh, c);
        c->flags &= ~TCPF_USER;
        tcp_conn__drop(env, sh, c, 0);
    }
}

void tcp_conn__close_listener(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *l)
{
    tcp_conn__stop_listener(env, sh, l);
    l->flags &= ~TCPF_USER;
    tcp_conn__free(env, sh, l);
}
