/* The connection table: allocation, the 4-tuple and listener hashes and lookups, state changes,
 * wakeups, freeing. Everything is an index into sh->conns; see tcp.h for the contract. The
 * socket-facing calls are in tcp_life.c (open, connect, shutdown, close), tcp_listen.c (listen,
 * accept), tcp_io.c (send, recv) and tcp_sockopt.c (options, readiness, TCP_INFO). */
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

static uint32_t big_maps(uint32_t max_conns)
{
    return SLIP_MIN(max_conns, (uint32_t)TCP_BIG_MAPS);
}

size_t tcp_shared__bytes(uint32_t max_conns)
{
    /* The large maps last, aligned to 64 bytes (63 to spare); like the slots, their memory is
     * touched only when one is handed out. */
    return sizeof(struct tcp_shared) + (size_t)max_conns * sizeof(struct tcp_conn) +
           (size_t)hash_buckets(max_conns) * sizeof(slip_idx_t) + 63 +
           (size_t)big_maps(max_conns) * sizeof(struct tcp_bigmap);
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
    sh->nmaps = big_maps(max_conns);
    sh->map_free = 0;           /* tcp_map.c hands them out from map_high up, then reused ones */
    sh->map_high = 0;
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
        tcp_map__release(c);
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

void tcp_conn__hash(struct tcp_shared *sh, struct tcp_conn *c)
{
    slip_idx_t i = tcp_conn__idx(sh, c);
    if (c->state == TCPS_LISTEN) {
        unsigned b = tcp__lhash(c->lport);
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
        pp = &sh->lhash[tcp__lhash(c->lport)];
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

slip_idx_t tcp__lookup4_conn(const struct tcp_shared *sh, be32 laddr, uint16_t lport, be32 raddr, uint16_t rport)
{
    for (slip_idx_t i = tcp__hash_tab(sh)[hash4(sh, laddr, lport, raddr, rport)]; i != SLIP_NIL; i = sh->conns[i].hnext) {
        const struct tcp_conn *c = &sh->conns[i];
        if (c->lport == lport && c->rport == rport && c->laddr == laddr && c->raddr == raddr &&
            !(c->flags & TCPF_V6))
            return i;
    }
    return SLIP_NIL;
}

slip_idx_t tcp__lookup6_conn(const struct tcp_shared *sh, be32 lf, const struct wire_ipv6_addr *l6, uint16_t lport,
                             be32 rf, const struct wire_ipv6_addr *r6, uint16_t rport)
{
    for (slip_idx_t i = tcp__hash_tab(sh)[hash4(sh, lf, lport, rf, rport)]; i != SLIP_NIL; i = sh->conns[i].hnext) {
        const struct tcp_conn *c = &sh->conns[i];
        if (c->lport == lport && c->rport == rport && c->laddr == lf && c->raddr == rf && (c->flags & TCPF_V6) &&
            tcp__addr6_eq(&c->laddr6, l6) && tcp__addr6_eq(&c->raddr6, r6))
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
    return c->laddr == laddr && tcp__addr6_eq(&c->laddr6, l6) ? 2 : 0;
}

static slip_idx_t lookup_listen(const struct tcp_shared *sh, be32 laddr, const struct wire_ipv6_addr *l6,
                                uint16_t lport, be32 raddr, uint16_t rport)
{
    slip_idx_t exact = SLIP_NIL, wild = SLIP_NIL;
    uint32_t nexact = 0, nwild = 0;
    for (slip_idx_t i = sh->lhash[tcp__lhash(lport)]; i != SLIP_NIL; i = sh->conns[i].hnext) {
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
    slip_idx_t i = tcp__lookup4_conn(sh, laddr, lport, raddr, rport);
    return i != SLIP_NIL ? i : lookup_listen(sh, laddr, NULL, lport, raddr, rport);
}

static void conn_reset_fields(struct tcp_conn *c)
{
    memset(c, 0, sizeof(*c));
    c->state = TCPS_CLOSED;
    c->hnext = c->parent = c->qnext = c->wnext = SLIP_NIL;
    c->acceptq_head = c->acceptq_tail = SLIP_NIL;
    c->ooo_head = c->ooo_tail = SLIP_NIL;
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
    tcp_map__release(c);
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
    c->self = i;
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

void tcp_conn__default_cc(const struct tcp_shared *sh, struct tcp_conn *c)
{
    if (c->cc_user || c->cc_algo == sh->default_cc)
        return;
    c->cc_algo = sh->default_cc;
    c->pacing_rate = 0;         /* only an algorithm that paces sets it (BBR's init) */
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

void tcp_conn__acceptq_remove(struct tcp_shared *sh, struct tcp_conn *l, struct tcp_conn *c)
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


void tcp_conn__detach_parent(struct tcp_shared *sh, struct tcp_conn *c)
{
    if (c->parent == SLIP_NIL)
        return;
    struct tcp_conn *l = &sh->conns[c->parent];
    if (c->flags & TCPF_IN_ACCEPTQ)
        tcp_conn__acceptq_remove(sh, l, c);
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
    tcp_conn__detach_parent(sh, c);
    wake_remove(sh, c);
    pkt_queue__purge(env->pool, &c->sndq);
    tcp_rcvq__purge(env->pool, c);
    tcp_reass__purge(env->pool, c);
    tcp_map__release(c);
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
