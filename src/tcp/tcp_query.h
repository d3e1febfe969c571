/* What the stack layer asks of a TCP connection it does not drive (its state, names, whether an
 * application holds it, whether it still has something to deliver): small read-only questions,
 * so that src/stack keeps out of struct tcp_conn and the engine can change its layout. No
 * locking inside: the caller holds the stack's lock, or accepts a racy answer where it says so
 * (the guardian). c is a valid index below sh->max_conns. */
#ifndef SLIP_TCP_TCP_QUERY_H
#define SLIP_TCP_TCP_QUERY_H

#include "tcp/tcp.h"

/* TCPS_* (tcp_fsm.h). */
static inline uint8_t tcp_conn__state(const struct tcp_shared *sh, slip_idx_t c)
{
    return sh->conns[c].state;
}

/* An application holds it (opened or accepted, not closed yet). */
static inline bool tcp_conn__user(const struct tcp_shared *sh, slip_idx_t c)
{
    return (sh->conns[c].flags & TCPF_USER) != 0;
}

/* Opened from a listener (an accepted connection, or one waiting to be). */
static inline bool tcp_conn__passive(const struct tcp_shared *sh, slip_idx_t c)
{
    return (sh->conns[c].flags & TCPF_PASSIVE) != 0;
}

/* The last send's partial tail waits for tcp_conn__uncork (TCP_SEND_AUTOCORK). */
static inline bool tcp_conn__autocorked(const struct tcp_shared *sh, slip_idx_t c)
{
    return (sh->conns[c].flags & TCPF_AUTOCORK) != 0;
}

/* Synchronized with a peer at some point and not yet back to CLOSED/LISTEN: it has a peer name
 * (getpeername), as Linux answers it. */
static inline bool tcp_conn__has_peer(const struct tcp_shared *sh, slip_idx_t c)
{
    uint8_t st = sh->conns[c].state;
    return st != TCPS_CLOSED && st != TCPS_LISTEN && st != TCPS_SYN_SENT;
}

/* Still delivering what the application wrote before closing: data or FIN not acknowledged yet
 * (the guardian and a lingering exit wait for it). */
static inline bool tcp_conn__unfinished(const struct tcp_shared *sh, slip_idx_t c)
{
    const struct tcp_conn *k = &sh->conns[c];
    return k->state == TCPS_FIN_WAIT_1 || k->state == TCPS_CLOSING || k->state == TCPS_LAST_ACK ||
           ((k->state == TCPS_ESTABLISHED || k->state == TCPS_CLOSE_WAIT) && k->sndq.bytes);
}

/* The names of a connection. IPv4: laddr/raddr. IPv6 (v6): laddr6/raddr6 name it, scope is the
 * interface of a link-local raddr6, and laddr/raddr hold the engine's 32-bit folds of the IPv6
 * addresses (what its hashes and the stack's claims key on). Ports in host order. */
struct tcp_names {
    bool v6;
    be32 laddr, raddr;
    uint16_t lport, rport;
    struct wire_ipv6_addr laddr6, raddr6;
    uint32_t scope;
};
static inline void tcp_conn__names(const struct tcp_shared *sh, slip_idx_t c, struct tcp_names *n)
{
    const struct tcp_conn *k = &sh->conns[c];
    n->v6 = (k->flags & TCPF_V6) != 0;
    n->laddr = k->laddr;
    n->raddr = k->raddr;
    n->lport = k->lport;
    n->rport = k->rport;
    n->laddr6 = k->laddr6;
    n->raddr6 = k->raddr6;
    n->scope = k->scope;
}

/* The IPv4 names alone (the folds for an IPv6 connection). */
static inline void tcp_conn__local(const struct tcp_shared *sh, slip_idx_t c, be32 *addr, uint16_t *port)
{
    *addr = sh->conns[c].laddr;
    *port = sh->conns[c].lport;
}
static inline void tcp_conn__remote(const struct tcp_shared *sh, slip_idx_t c, be32 *addr, uint16_t *port)
{
    *addr = sh->conns[c].raddr;
    *port = sh->conns[c].rport;
}

/* SO_REUSEPORT was set on it. */
static inline bool tcp_conn__reuseport(const struct tcp_shared *sh, slip_idx_t c)
{
    return (sh->conns[c].flags & TCPF_REUSEPORT) != 0;
}

/* What a copy of a listener needs (src/stack/sock_worker.c): its names, IPV6_V6ONLY, backlog and
 * the TCP_MAXSEG set on it (0: none; TCPO_MAXSEG reads back 536 then, as Linux). */
struct tcp_listen_params {
    bool listening, v6, v6only;
    be32 laddr;
    uint16_t lport, user_mss;
    struct wire_ipv6_addr laddr6;
    uint32_t scope, backlog;
    uint8_t buf_lock;         /* TCP_LOCK_*: which buffer sizes the application set */
};
static inline void tcp_conn__listen_params(const struct tcp_shared *sh, slip_idx_t c, struct tcp_listen_params *p)
{
    const struct tcp_conn *k = &sh->conns[c];
    p->listening = k->state == TCPS_LISTEN;
    p->v6 = (k->flags & TCPF_V6) != 0;
    p->v6only = k->v6only != 0;
    p->laddr = k->laddr;
    p->lport = k->lport;
    p->user_mss = k->user_mss;
    p->laddr6 = k->laddr6;
    p->scope = k->scope;
    p->backlog = k->backlog;
    p->buf_lock = k->buf_lock;
}

/* Slots [0, high) were ever used: a scan over the connections stops there. */
static inline uint32_t tcp_shared__high(const struct tcp_shared *sh)
{
    return sh->high_water;
}

#endif
