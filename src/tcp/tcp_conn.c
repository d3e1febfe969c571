/* The connection table: allocation, the 4-tuple and listener hashes, state changes, wakeups,
 * and the socket-facing calls (listen, connect, accept, send, recv, shutdown, close, options,
 * readiness, counters). Everything is an index into sh->conns; see tcp.h for the contract. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "tcp/tcp_var.h"
#include "wire/eth.h"
#include "wire/ipv4.h"

static uint32_t hash_buckets(uint32_t max_conns)
{
    uint32_t n = TCP_HASH_MIN;
    while (n < max_conns / 4 && n < (1u << 30))
        n <<= 1;
    return n;
}

size_t tcp_shared__bytes(uint32_t max_conns)
{
    return sizeof(struct tcp_shared) + (size_t)max_conns * sizeof(struct tcp_conn) +
           (size_t)hash_buckets(max_conns) * sizeof(slip_idx_t);
}

void tcp_shared__init(struct tcp_shared *sh, uint32_t max_conns, const uint8_t key[32])
{
    memset(sh, 0, sizeof(*sh));
    memcpy(sh->key, key, 32);
    sh->max_conns = max_conns;
    sh->free_head = SLIP_NIL;   /* then high_water up: see tcp_conn__alloc */
    sh->hash_mask = hash_buckets(max_conns) - 1;
    sh->wake_head = sh->wake_tail = SLIP_NIL;
    sh->next_deadline = SLIP_TIME_NEVER;
    sh->default_cc = TCP_CC_CUBIC;
    sh->syncookies = 1;
    sh->ecn = 2;                /* Linux's default net.ipv4.tcp_ecn */
    slip_idx_t *hash = tcp__hash_tab(sh);
    for (uint32_t i = 0; i <= sh->hash_mask; i++)
        hash[i] = SLIP_NIL;
    for (unsigned i = 0; i < TCP_LHASH_BUCKETS; i++)
        sh->lhash[i] = SLIP_NIL;
    /* No slot is touched here: tcp_conn__alloc clears each one the first time it hands it out. */
}

void tcp_shared__purge(struct tcp_shared *sh, struct pkt_pool *pool)
{
    for (uint32_t i = 0; i < sh->high_water; i++) {
        struct tcp_conn *c = &sh->conns[i];
        if (c->rcvbuf == 0)
            continue;
        pkt_queue__purge(pool, &c->sndq);
        tcp_rcvq__purge(pool, c);
        tcp_reass__purge(pool, c);
    }
    uint8_t key[32];
    memcpy(key, sh->key, 32);
    tcp_shared__init(sh, sh->max_conns, key);
}

/* Every state change passes here so it can be traced (SLIP_TCP_TRACE=1 at build time). */
void tcp_set_state(struct tcp_shared *sh, struct tcp_conn *c, int state)
{
#ifdef SLIP_TCP_TRACE
    fprintf(stderr, "tcp %u: %s -> %s\n", tcp_conn__idx(sh, c), tcp_state__name(c->state), tcp_state__name(state));
#endif
    int old = c->state;
    c->state = (uint8_t)state;
    if (old != state && state == TCPS_TIME_WAIT)
        sh->tw_entered++;       /* a full table may recycle it: see tcp_conn__room */
    if (old != state)
        tcp_conn__wake(sh, c);
}

static unsigned hash4(const struct tcp_shared *sh, be32 laddr, uint16_t lport, be32 raddr, uint16_t rport)
{
    uint32_t h = laddr ^ (raddr * 0x9e3779b1u) ^ (((uint32_t)lport << 16 | rport) * 0x85ebca6bu);
    h ^= h >> 15;
    h *= 0xc2b2ae35u;
    h ^= h >> 13;
    return h & sh->hash_mask;
}

static unsigned lhash(uint16_t lport)
{
    return (lport * 40503u >> 4) & (TCP_LHASH_BUCKETS - 1);
}

void tcp_conn__hash(struct tcp_shared *sh, struct tcp_conn *c)
{
    slip_idx_t i = tcp_conn__idx(sh, c);
    if (c->state == TCPS_LISTEN) {
        unsigned b = lhash(c->lport);
        c->hnext = sh->lhash[b];
        sh->lhash[b] = i;
        c->flags |= TCPF_LHASHED;
    } else {
        slip_idx_t *hash = tcp__hash_tab(sh);
        unsigned b = hash4(sh, c->laddr, c->lport, c->raddr, c->rport);
        c->hnext = hash[b];
        hash[b] = i;
        c->flags |= TCPF_HASHED;
    }
}

void tcp_conn__unhash(struct tcp_shared *sh, struct tcp_conn *c)
{
    slip_idx_t i = tcp_conn__idx(sh, c);
    slip_idx_t *pp;
    if (c->flags & TCPF_LHASHED)
        pp = &sh->lhash[lhash(c->lport)];
    else if (c->flags & TCPF_HASHED)
        pp = &tcp__hash_tab(sh)[hash4(sh, c->laddr, c->lport, c->raddr, c->rport)];
    else
        return;
    while (*pp != SLIP_NIL && *pp != i)
        pp = &sh->conns[*pp].hnext;
    if (*pp == i)
        *pp = c->hnext;
    c->hnext = SLIP_NIL;
    c->flags &= ~(TCPF_HASHED | TCPF_LHASHED);
}

static slip_idx_t lookup4(const struct tcp_shared *sh, be32 laddr, uint16_t lport, be32 raddr, uint16_t rport)
{
    for (slip_idx_t i = tcp__hash_tab(sh)[hash4(sh, laddr, lport, raddr, rport)]; i != SLIP_NIL; i = sh->conns[i].hnext) {
        const struct tcp_conn *c = &sh->conns[i];
        if (c->lport == lport && c->rport == rport && c->laddr == laddr && c->raddr == raddr &&
            !(c->flags & TCPF_V6))
            return i;
    }
    return SLIP_NIL;
}

static bool addr6_eq(const struct wire_ipv6_addr *a, const struct wire_ipv6_addr *b)
{
    return memcmp(a, b, sizeof(*a)) == 0;
}

slip_idx_t tcp__lookup6_conn(const struct tcp_shared *sh, be32 lf, const struct wire_ipv6_addr *l6, uint16_t lport,
                             be32 rf, const struct wire_ipv6_addr *r6, uint16_t rport)
{
    for (slip_idx_t i = tcp__hash_tab(sh)[hash4(sh, lf, lport, rf, rport)]; i != SLIP_NIL; i = sh->conns[i].hnext) {
        const struct tcp_conn *c = &sh->conns[i];
        if (c->lport == lport && c->rport == rport && c->laddr == lf && c->raddr == rf && (c->flags & TCPF_V6) &&
            addr6_eq(&c->laddr6, l6) && addr6_eq(&c->raddr6, r6))
            return i;
    }
    return SLIP_NIL;
}

/* SO_REUSEPORT spreading: a hash of the 4-tuple keyed with the table's secret (so a remote host
 * cannot aim its connections at one member), scaled onto [0, n) as Linux's reciprocal_scale()
 * does. Linux hashes with jhash and its own secret; the member a tuple lands on differs from
 * Linux's, which no program can observe or rely on (docs/COMPLIANCE.md). */
static uint32_t reuseport_pick(const struct tcp_shared *sh, be32 laddr, uint16_t lport, be32 raddr,
                               uint16_t rport, uint32_t n)
{
    uint64_t h = sh->key[1] ^ ((uint64_t)laddr << 32 | raddr);
    h ^= ((uint64_t)lport << 16 | rport) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 32;
    return (uint32_t)(((h & 0xffffffffu) * n) >> 32);
}

/* Listeners on lport for a segment to laddr: the ones bound to laddr if any, else the wildcard
 * ones (Linux scores a bound address above the wildcard). Several in the chosen set can only be
 * a SO_REUSEPORT group (tcp_conn__listen), and the 4-tuple hash picks one of them. */
/* How a listener c matches a segment to (laddr, l6; l6 NULL over IPv4): 2 its bound address,
 * 1 its wildcard, 0 not at all. An IPv6 listener takes IPv4 only on :: without v6only (a
 * dual-stack socket); an IPv4 one never takes IPv6. */
static int listen_match(const struct tcp_conn *c, be32 laddr, const struct wire_ipv6_addr *l6)
{
    if (!l6) {
        if ((c->flags & TCPF_V6) && (c->laddr != 0 || c->v6only))
            return 0;
        return c->laddr == laddr ? 2 : c->laddr == 0;
    }
    if (!(c->flags & TCPF_V6))
        return 0;
    if (c->laddr == 0)
        return 1;
    return c->laddr == laddr && addr6_eq(&c->laddr6, l6) ? 2 : 0;
}

static slip_idx_t lookup_listen(const struct tcp_shared *sh, be32 laddr, const struct wire_ipv6_addr *l6,
                                uint16_t lport, be32 raddr, uint16_t rport)
{
    slip_idx_t exact = SLIP_NIL, wild = SLIP_NIL;
    uint32_t nexact = 0, nwild = 0;
    for (slip_idx_t i = sh->lhash[lhash(lport)]; i != SLIP_NIL; i = sh->conns[i].hnext) {
        const struct tcp_conn *c = &sh->conns[i];
        if (c->lport != lport)
            continue;
        int m = listen_match(c, laddr, l6);
        if (m == 2) {
            if (!nexact++)
                exact = i;
        } else if (m == 1) {
            if (!nwild++)
                wild = i;
        }
    }
    slip_idx_t first = nexact ? exact : wild;
    uint32_t n = nexact ? nexact : nwild;
    int want = nexact ? 2 : 1;
    if (n <= 1)
        return first;
    uint32_t k = reuseport_pick(sh, laddr, lport, raddr, rport, n);
    for (slip_idx_t i = first; i != SLIP_NIL; i = sh->conns[i].hnext) {
        const struct tcp_conn *c = &sh->conns[i];
        if (c->lport == lport && listen_match(c, laddr, l6) == want && k-- == 0)
            return i;
    }
    return first;
}

slip_idx_t tcp__lookup_listener6(const struct tcp_shared *sh, be32 lf, const struct wire_ipv6_addr *l6,
                                 uint16_t lport, be32 rf, uint16_t rport)
{
    return lookup_listen(sh, lf, l6, lport, rf, rport);
}

slip_idx_t tcp__lookup6(const struct tcp_shared *sh, const struct wire_ipv6_addr *laddr, uint16_t lport,
                        const struct wire_ipv6_addr *raddr, uint16_t rport)
{
    be32 lf = tcp6__fold(sh, laddr), rf = tcp6__fold(sh, raddr);
    slip_idx_t i = tcp__lookup6_conn(sh, lf, laddr, lport, rf, raddr, rport);
    return i != SLIP_NIL ? i : lookup_listen(sh, lf, laddr, lport, rf, rport);
}

slip_idx_t tcp__lookup_listener(const struct tcp_shared *sh, be32 laddr, uint16_t lport, be32 raddr,
                                uint16_t rport)
{
    return lookup_listen(sh, laddr, NULL, lport, raddr, rport);
}

slip_idx_t tcp__lookup(const struct tcp_shared *sh, be32 laddr, uint16_t lport, be32 raddr, uint16_t rport)
{
    slip_idx_t i = lookup4(sh, laddr, lport, raddr, rport);
    return i != SLIP_NIL ? i : lookup_listen(sh, laddr, NULL, lport, raddr, rport);
}

static void conn_reset_fields(struct tcp_conn *c)
{
    memset(c, 0, sizeof(*c));
    c->state = TCPS_CLOSED;
    c->hnext = c->parent = c->qnext = c->wnext = SLIP_NIL;
    c->acceptq_head = c->acceptq_tail = SLIP_NIL;
    c->ooo_head = SLIP_NIL;
    pkt_queue__init(&c->sndq);
    pkt_queue__init(&c->rcvq);
    for (int k = 0; k < TT_NTIMERS; k++)
        c->timer[k] = SLIP_TIME_NEVER;
}

/* Every slot freed goes on the ring of the last TCP_FREED_RING (see struct tcp_shared). */
static void note_freed(struct tcp_shared *sh, slip_idx_t i)
{
    sh->freed[sh->freed_seq % TCP_FREED_RING] = i;
    sh->freed_seq++;
}

/* Table full: the TIME_WAIT connections closest to expiry give their slots (Linux likewise bounds
 * TIME_WAIT sockets with tcp_max_tw_buckets). One scan frees the oldest eighth of them at once
 * (by 2MSL deadline), so a server closing first at a high rate pays the table scan once per
 * batch of new connections, not once per connection. */
static void recycle_one(struct tcp_shared *sh, struct tcp_conn *c)
{
    sh->c.tw_recycled++;
    note_freed(sh, tcp_conn__idx(sh, c));
    tcp_conn__unhash(sh, c);
    tcp_timer__stop_all(c);
    c->flags = 0;
    conn_reset_fields(c);
}

static int recycle_time_wait(struct tcp_shared *sh)
{
    slip_time_t lo = SLIP_TIME_NEVER, hi = 0;
    for (uint32_t i = 0; i < sh->high_water; i++) {
        const struct tcp_conn *c = &sh->conns[i];
        if (c->state == TCPS_TIME_WAIT && !(c->flags & TCPF_USER)) {
            lo = SLIP_MIN(lo, c->timer[TT_2MSL]);
            hi = SLIP_MAX(hi, c->timer[TT_2MSL]);
        }
    }
    if (lo == SLIP_TIME_NEVER)
        return -EMFILE;
    slip_time_t cut = lo + (hi - lo) / 8;
    int first = -1;
    for (uint32_t i = 0; i < sh->high_water; i++) {
        struct tcp_conn *c = &sh->conns[i];
        if (c->state != TCPS_TIME_WAIT || (c->flags & TCPF_USER) || c->timer[TT_2MSL] > cut)
            continue;
        recycle_one(sh, c);
        if (first < 0) {
            first = (int)i;     /* handed to the caller, still counted in nused */
        } else {
            c->hnext = sh->free_head;
            sh->free_head = i;
            sh->nused--;
        }
    }
    return first;
}

bool tcp_conn__room(struct tcp_shared *sh)
{
    if (sh->free_head != SLIP_NIL || sh->high_water < sh->max_conns)
        return true;
    /* Full. The scan for TIME_WAIT slots is O(table): skip it while no connection entered
     * TIME_WAIT since one found none (a SYN flood at a full table must not scan per SYN). */
    if (sh->tw_full_seen == sh->tw_entered + 1)
        return false;
    int r = recycle_time_wait(sh);
    if (r < 0) {
        sh->tw_full_seen = sh->tw_entered + 1;
        return false;
    }
    sh->conns[r].hnext = sh->free_head;
    sh->free_head = (slip_idx_t)r;
    sh->nused--;
    return true;
}

int tcp_conn__alloc(struct tcp_shared *sh)
{
    if (!tcp_conn__room(sh)) {
        sh->c.conn_full++;
        return -EMFILE;
    }
    slip_idx_t i = sh->free_head;
    struct tcp_conn *c;
    if (i != SLIP_NIL) {
        c = &sh->conns[i];
        sh->free_head = c->hnext;
    } else {
        /* A slot never used: its memory is touched for the first time here. */
        i = sh->high_water++;
        c = &sh->conns[i];
        memset(c, 0, sizeof(*c));
        c->state = TCPS_CLOSED;
        c->hnext = SLIP_NIL;
    }
    conn_reset_fields(c);
    sh->nused++;
    tcp_conn__defaults(sh, c);
    return (int)i;
}

void tcp_conn__defaults(struct tcp_shared *sh, struct tcp_conn *c)
{
    c->sndbuf = TCP_SNDBUF_DEFAULT;
    c->rcvbuf = TCP_RCVBUF_DEFAULT;
    c->keepidle = TCP_KEEPIDLE_DEFAULT;
    c->keepintvl = TCP_KEEPINTVL_DEFAULT;
    c->keepcnt = TCP_KEEPCNT_DEFAULT;
    c->cc_algo = sh->default_cc;
    c->mss = TCP_MSS_NO_OPTION;
    c->rcv_mss = TCP_MSS_NO_OPTION;
    c->rto_us = (uint32_t)(TCP_RTO_INIT / SLIP_USEC);
}

static void wake_remove(struct tcp_shared *sh, struct tcp_conn *c)
{
    if (!(c->flags & TCPF_IN_WAKE))
        return;
    slip_idx_t i = tcp_conn__idx(sh, c), prev = SLIP_NIL;
    for (slip_idx_t w = sh->wake_head; w != SLIP_NIL; prev = w, w = sh->conns[w].wnext) {
        if (w != i)
            continue;
        if (prev == SLIP_NIL)
            sh->wake_head = c->wnext;
        else
            sh->conns[prev].wnext = c->wnext;
        if (sh->wake_tail == i)
            sh->wake_tail = prev;
        break;
    }
    c->wnext = SLIP_NIL;
    c->flags &= ~TCPF_IN_WAKE;
}

static void acceptq_remove(struct tcp_shared *sh, struct tcp_conn *l, struct tcp_conn *c)
{
    slip_idx_t i = tcp_conn__idx(sh, c), prev = SLIP_NIL;
    for (slip_idx_t w = l->acceptq_head; w != SLIP_NIL; prev = w, w = sh->conns[w].qnext) {
        if (w != i)
            continue;
        if (prev == SLIP_NIL)
            l->acceptq_head = c->qnext;
        else
            sh->conns[prev].qnext = c->qnext;
        if (l->acceptq_tail == i)
            l->acceptq_tail = prev;
        l->acceptq_len--;
        break;
    }
    c->qnext = SLIP_NIL;
    c->flags &= ~TCPF_IN_ACCEPTQ;
}

/* Detaches a passive child from its listener (accepted, or dying before that). */
static void detach_parent(struct tcp_shared *sh, struct tcp_conn *c)
{
    if (c->parent == SLIP_NIL)
        return;
    struct tcp_conn *l = &sh->conns[c->parent];
    if (c->flags & TCPF_IN_ACCEPTQ)
        acceptq_remove(sh, l, c);
    else if (l->synq_len)
        l->synq_len--;
    c->parent = SLIP_NIL;
}

void tcp_conn__free(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    slip_idx_t i = tcp_conn__idx(sh, c);
    if (c->rcvbuf == 0)
        return;     /* already free: a slot in use always has a receive buffer size */
    tcp_conn__unhash(sh, c);
    detach_parent(sh, c);
    wake_remove(sh, c);
    pkt_queue__purge(env->pool, &c->sndq);
    tcp_rcvq__purge(env->pool, c);
    tcp_reass__purge(env->pool, c);
    conn_reset_fields(c);
    c->hnext = sh->free_head;
    sh->free_head = i;
    sh->nused--;
    note_freed(sh, i);
}

void tcp_conn__wake(struct tcp_shared *sh, struct tcp_conn *c)
{
    if (!(c->flags & TCPF_USER) && c->state != TCPS_LISTEN)
        return;
    if (c->flags & TCPF_IN_WAKE)
        return;
    slip_idx_t i = tcp_conn__idx(sh, c);
    c->flags |= TCPF_IN_WAKE;
    c->wnext = SLIP_NIL;
    if (sh->wake_tail == SLIP_NIL)
        sh->wake_head = i;
    else
        sh->conns[sh->wake_tail].wnext = i;
    sh->wake_tail = i;
}

slip_idx_t tcp__next_wakeup(struct tcp_shared *sh)
{
    slip_idx_t i = sh->wake_head;
    if (i == SLIP_NIL)
        return SLIP_NIL;
    struct tcp_conn *c = &sh->conns[i];
    sh->wake_head = c->wnext;
    if (sh->wake_head == SLIP_NIL)
        sh->wake_tail = SLIP_NIL;
    c->wnext = SLIP_NIL;
    c->flags &= ~TCPF_IN_WAKE;
    return i;
}

void tcp_conn__drop(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, int err)
{
    if (err)
        c->so_error = err;
    tcp_timer__stop_all(c);
    tcp_conn__unhash(sh, c);
    pkt_queue__purge(env->pool, &c->sndq);
    tcp_reass__purge(env->pool, c);
    if (c->state == TCPS_SYN_SENT)
        c->flags |= TCPF_OPEN_FAILED;
    c->flags |= TCPF_DONE;
    c->flags &= ~(TCPF_ACK_NOW | TCPF_ACK_PENDING);
    tcp_set_state(sh, c, TCPS_CLOSED);
    tcp_conn__wake(sh, c);
    /* Nobody will read it any more: a closed-by-application or never-accepted connection. One
     * on its listener's accept queue stays there, as on Linux: accept() hands it out CLOSED, its
     * first write or read reports the error (after any data that arrived before the reset). */
    if (!(c->flags & (TCPF_USER | TCPF_IN_ACCEPTQ)))
        tcp_conn__free(env, sh, c);
}

uint16_t tcp_conn__route_mss(struct ip_env *env, const struct tcp_conn *c)
{
    uint32_t mtu = 1500, hdrs = 40;
    if (c->flags & TCPF_V6) {
        /* RFC 8200: a fixed 40-byte IPv6 header (we send no extension headers), plus TCP's 20. */
        struct ip6_route rt6;
        hdrs = 60;
        mtu = ip6_output__route(env, &c->raddr6, c->scope, &rt6) == 0 ? rt6.mtu : 1280;
    } else {
        struct ip_route rt;
        if (ip_output__route(env, c->raddr, &rt) == 0)
            mtu = rt.mtu;
    }
    uint32_t room = pkt__room(env->pool) - WIRE_ETH_HLEN;
    mtu = SLIP_MIN(mtu, room);
    uint32_t mss = mtu > hdrs + TCP_MSS_MIN ? mtu - hdrs : TCP_MSS_MIN;
    if (c->user_mss && c->user_mss < mss)
        mss = SLIP_MAX(c->user_mss, TCP_MSS_MIN);
    return (uint16_t)mss;
}

uint32_t tcp_rcv_space(const struct tcp_conn *c)
{
    uint32_t held = c->rcvq.bytes + c->ooo_bytes;
    return held >= c->rcvbuf ? 0 : c->rcvbuf - held;
}

/* ---- Socket-facing calls ---- */

static struct tcp_conn *user_conn(struct tcp_shared *sh, slip_idx_t i)
{
    if (i >= sh->max_conns)
        return NULL;
    struct tcp_conn *c = &sh->conns[i];
    return (c->flags & TCPF_USER) ? c : NULL;
}

int tcp_conn__open(struct tcp_shared *sh)
{
    int i = tcp_conn__alloc(sh);
    if (i < 0)
        return i;
    sh->conns[i].flags |= TCPF_USER;
    return i;
}

/* Two listeners on the same port whose folded addresses are equal: do they take the same
 * segments? Same family and address; or IPv4 any and a dual-stack :: (Linux refuses that too). */
static bool listen_clash(const struct tcp_conn *c, const struct tcp_conn *o)
{
    bool c6 = c->flags & TCPF_V6, o6 = o->flags & TCPF_V6;
    if (c6 && o6)
        return addr6_eq(&c->laddr6, &o->laddr6);
    if (!c6 && !o6)
        return true;
    return c6 ? !c->v6only : !o->v6only;     /* laddr 0 on both: 0.0.0.0 against :: */
}

static int listen_at(struct tcp_shared *sh, struct tcp_conn *c, be32 laddr, uint16_t lport, int backlog);

int tcp_conn__listen(struct tcp_shared *sh, slip_idx_t i, be32 laddr, uint16_t lport, int backlog)
{
    struct tcp_conn *c = user_conn(sh, i);
    if (!c)
        return -EBADF;
    if (c->state == TCPS_CLOSED)
        c->flags &= ~TCPF_V6;
    return listen_at(sh, c, laddr, lport, backlog);
}

int tcp_conn__listen6(struct tcp_shared *sh, slip_idx_t i, const struct wire_ipv6_addr *laddr, uint32_t scope,
                      bool v6only, uint16_t lport, int backlog)
{
    struct tcp_conn *c = user_conn(sh, i);
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
    /* SO_REUSEPORT (Linux): listeners may share (laddr, lport) when all of them asked for it.
     * The same-user rule is the kernel's: the application's kernel socket is bound first. */
    for (slip_idx_t j = sh->lhash[lhash(lport)]; j != SLIP_NIL; j = sh->conns[j].hnext) {
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

/* RFC 7323 §2.2: the smallest shift that lets the largest buffer we may offer fit 16 bits. */
uint8_t tcp_conn__wscale(uint32_t rcvbuf)
{
    uint8_t s = 0;
    uint32_t max = SLIP_MAX(rcvbuf, (uint32_t)TCP_RCVBUF_DEFAULT);
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
    c->ntxr = 0;                /* RACK state starts afresh (TIME-WAIT reuse keeps the slot) */
    c->rack_flags = 0;
    c->tlp_state = 0;
    c->rcv_wscale = tcp_conn__wscale(c->rcvbuf);
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
    struct tcp_conn *c = user_conn(sh, i);
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
    return connect_tail(env, sh, c, lookup4(sh, laddr, lport, raddr, rport), laddr, lport, raddr, rport);
}

int tcp_conn__connect6(struct ip_env *env, struct tcp_shared *sh, slip_idx_t i, const struct wire_ipv6_addr *laddr,
                       uint16_t lport, const struct wire_ipv6_addr *raddr, uint16_t rport, uint32_t scope)
{
    struct tcp_conn *c = user_conn(sh, i);
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
    c->keepidle = l->keepidle;
    c->keepintvl = l->keepintvl;
    c->keepcnt = l->keepcnt;
    c->linger = l->linger;
    c->cc_algo = l->cc_algo;
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
    struct tcp_conn *l = user_conn(sh, li);
    if (!l || l->state != TCPS_LISTEN)
        return -EINVAL;
    slip_idx_t i = l->acceptq_head;
    if (i == SLIP_NIL)
        return -EAGAIN;
    struct tcp_conn *c = &sh->conns[i];
    acceptq_remove(sh, l, c);
    c->parent = SLIP_NIL;
    c->flags |= TCPF_USER;
    return (int)i;
}

ssize_t tcp_conn__send(struct ip_env *env, struct tcp_shared *sh, slip_idx_t i, const struct iovec *iov,
                       int iovcnt, unsigned flags)
{
    struct tcp_conn *c = user_conn(sh, i);
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
        tcp_chrono__start(c, TCP_CHRONO_SNDBUF, env->now);    /* the writer waits for room */
        return -EAGAIN;
    }
    size_t room = c->sndbuf - c->sndq.bytes;
    size_t todo = SLIP_MIN(want, room);
    if (todo < want)
        tcp_chrono__start(c, TCP_CHRONO_SNDBUF, env->now);
    size_t done = 0;
    int k = 0;
    size_t koff = 0;
    struct pkt_pool *pool = env->pool;
    uint32_t cap = pool->frame_size;

    while (done < todo) {
        slip_idx_t t = c->sndq.tail;
        struct pkt_meta *m = t != SLIP_NIL ? pkt__meta(pool, t) : NULL;
        if (!m || (uint32_t)m->off + m->len >= cap) {
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
    if (flags & TCP_SEND_MORE)
        c->flags |= TCPF_MORE;
    else
        c->flags &= ~TCPF_MORE;
    if (flags & TCP_SEND_AUTOCORK)
        c->flags |= TCPF_AUTOCORK;
    else
        c->flags &= ~TCPF_AUTOCORK;     /* a send that does not wait pushes what waited */
    tcp_output(env, sh, c);
    return (ssize_t)done;
}

void tcp_conn__uncork(struct ip_env *env, struct tcp_shared *sh, slip_idx_t i)
{
    struct tcp_conn *c = &sh->conns[i];
    if (!(c->flags & TCPF_AUTOCORK))
        return;
    c->flags &= ~TCPF_AUTOCORK;
    tcp_output(env, sh, c);
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
 * min(RCV.BUFF/2, MSS) beyond what it knows; smaller openings would invite silly segments. */
static void maybe_window_update(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    if (!TCPS_HAVEESTABLISHED(c->state) || c->state == TCPS_TIME_WAIT)
        return;
    uint32_t edge = c->rcv_nxt + tcp_rcv_space(c);
    uint32_t thresh = SLIP_MIN(c->rcvbuf / 2, (uint32_t)c->rcv_mss);
    if (seq_geq(edge, c->rcv_adv + thresh) && seq_gt(edge, c->rcv_adv)) {
        /* Only worth it if the advertised window is getting small (Linux: under half). */
        if (c->rcv_adv - c->rcv_nxt <= tcp_rcv_space(c) / 2) {
            c->flags |= TCPF_ACK_NOW;
            tcp_output(env, sh, c);
        }
    }
}

ssize_t tcp_conn__recv(struct ip_env *env, struct tcp_shared *sh, slip_idx_t i, void *buf, size_t len,
                       unsigned flags)
{
    struct tcp_conn *c = user_conn(sh, i);
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
        maybe_window_update(env, sh, c);
    }
    return (ssize_t)n;
}

static void stop_listener(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *l);

int tcp_conn__shutdown(struct ip_env *env, struct tcp_shared *sh, slip_idx_t i, int how)
{
    struct tcp_conn *c = user_conn(sh, i);
    if (!c)
        return -EBADF;
    if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
        return -EINVAL;
    if (c->state == TCPS_LISTEN && how != SHUT_WR) {
        /* Linux (inet_shutdown): a listener shut for reading stops listening; blocked accepts
         * fail with EINVAL and the socket may listen or connect again. */
        stop_listener(env, sh, c);
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

/* Stops listening: no new connections, the unaccepted ones die. */
static void stop_listener(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *l)
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
        detach_parent(sh, c);
        c->flags &= ~TCPF_USER;
        tcp_conn__drop(env, sh, c, 0);
    }
}

static void close_listener(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *l)
{
    stop_listener(env, sh, l);
    l->flags &= ~TCPF_USER;
    tcp_conn__free(env, sh, l);
}

void tcp_conn__close(struct ip_env *env, struct tcp_shared *sh, slip_idx_t i)
{
    if (i >= sh->max_conns || sh->conns[i].rcvbuf == 0)
        return;
    struct tcp_conn *c = &sh->conns[i];
    if (c->state == TCPS_LISTEN) {
        close_listener(env, sh, c);
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

int tcp_conn__setopt(struct ip_env *env, struct tcp_shared *sh, slip_idx_t i, enum tcp_opt opt, int val)
{
    struct tcp_conn *c = user_conn(sh, i);
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
        if (opt == TCPO_RCVBUF)
            c->rcvbuf = v;
        else
            c->sndbuf = v;
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
    }
    return -ENOPROTOOPT;
}

int tcp_conn__getopt(struct tcp_shared *sh, slip_idx_t i, enum tcp_opt opt, int *val)
{
    struct tcp_conn *c = user_conn(sh, i);
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
    /* Linux reports the payload per segment after options (mss_cache), e.g. 1448 with timestamps */
    case TCPO_MAXSEG: *val = TCPS_HAVEESTABLISHED(c->state) ? (int)tcp_output__data_mss(c) : (c->user_mss ? c->user_mss : TCP_MSS_NO_OPTION); return 0;
    case TCPO_CONGESTION: *val = c->cc_algo; return 0;
    case TCPO_REUSEPORT: *val = !!(c->flags & TCPF_REUSEPORT); return 0;
    case TCPO_TCLASS: *val = c->tclass; return 0;
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
