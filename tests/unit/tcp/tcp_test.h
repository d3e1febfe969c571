/* Helpers for the TCP unit tests: segment templates that craft a peer's segment and feed it to
 * tcp_input through ip_input (so checksums and demux are real), parsing of the segments we
 * transmitted (captured by the harness), and a two-stack "wire" that moves frames between two
 * tcp_shared instances with seeded loss, duplication and reordering, advancing time to the next
 * deadline when idle. Addresses: we are 198.18.0.2, the crafted peer 198.18.0.1; in two-stack
 * tests side A is 198.18.0.2 and side B 198.18.0.3. */
#ifndef SLIP_TESTS_TCP_TEST_H
#define SLIP_TESTS_TCP_TEST_H

#include <sys/socket.h>

#include "tests/unit/common/harness.h"
#include "tcp/tcp.h"
#include "tcp/tcp_seq.h"
#include "tcp/tcp_var.h"     /* white-box: tests look inside connections */
#include "wire/checksum.h"
#include "wire/tcp.h"

#define US   ip4(198, 18, 0, 2)
#define PEER ip4(198, 18, 0, 1)
#define B_ADDR ip4(198, 18, 0, 3)

static const uint8_t T_KEY[32] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                   17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32 };

static inline struct tcp_shared *t_new_shared(uint32_t max_conns)
{
    struct tcp_shared *sh = malloc(tcp_shared__bytes(max_conns));
    tcp_shared__init(sh, max_conns, T_KEY);
    return sh;
}

/* A peer segment. */
struct tseg {
    uint16_t sport, dport;
    uint32_t seq, ack;
    uint8_t flags;
    uint16_t win;
    struct wire_tcp_opts opts;
    const void *data;
    size_t len;
    be32 src, dst;
    bool bad_csum;
    uint8_t tos;            /* the IP header's TOS byte (ECN field) */
};

/* Builds the segment as the wire would carry it and runs it through ip_input and tcp_input. */
static inline void t_feed(struct harness *h, struct tcp_shared *sh, const struct tseg *t)
{
    uint8_t buf[2000];
    struct wire_tcp_repr r;
    memset(&r, 0, sizeof(r));
    r.sport = t->sport;
    r.dport = t->dport;
    r.seq = t->seq;
    r.ack = t->ack;
    r.flags = t->flags;
    r.window = t->win;
    r.opts = t->opts;
    size_t hl = wire_tcp__emit(&r, buf);
    if (t->len)
        memcpy(buf + hl, t->data, t->len);
    be32 src = t->src ? t->src : PEER, dst = t->dst ? t->dst : US;
    wire_tcp__set_csum(buf, hl + t->len, src, dst);
    if (t->bad_csum)
        buf[16] ^= 0x55;
    struct wire_ipv4_repr ip = { .src = src, .dst = dst, .proto = WIRE_IPPROTO_TCP, .id = 1, .tos = t->tos };
    struct ip_rx rx;
    if (ip_input(&h->env, h_rx_frame(h, &ip, buf, hl + t->len), H_IFINDEX, &rx))
        tcp_input(&h->env, sh, &rx);
}

/* What we sent: the n-th captured frame parsed back. */
struct tout {
    struct wire_tcp_repr th;
    uint32_t len;
    be32 src, dst;
    uint8_t tos;
    const uint8_t *data;
};

static inline bool t_sent(struct harness *h, unsigned n, struct tout *o)
{
    if (n >= h->nsent)
        return false;
    const uint8_t *f = pkt__data(&h->pool, h->sent[n]);
    uint32_t flen = pkt__meta(&h->pool, h->sent[n])->len;
    struct wire_ipv4_repr ip;
    if (wire_ipv4__parse(f + WIRE_ETH_HLEN, flen - WIRE_ETH_HLEN, &ip, 0) < 0)
        return false;
    const uint8_t *tcp = f + WIRE_ETH_HLEN + ip.hdr_len;
    uint32_t tl = ip.total_len - ip.hdr_len;
    if (wire_tcp__parse(tcp, tl, &o->th) < 0)
        return false;
    if (!wire_tcp__csum_ok(tcp, tl, ip.src, ip.dst))
        return false;
    o->len = tl - o->th.hdr_len;
    o->tos = ip.tos;
    o->src = ip.src;
    o->dst = ip.dst;
    o->data = tcp + o->th.hdr_len;
    return true;
}

/* The last segment we sent (false when none). */
static inline bool t_last(struct harness *h, struct tout *o)
{
    return h->nsent && t_sent(h, h->nsent - 1, o);
}

static inline struct wire_tcp_opts t_synopts(uint16_t mss, int wscale, bool sack, bool ts, uint32_t tsval)
{
    struct wire_tcp_opts o;
    memset(&o, 0, sizeof(o));
    o.has_mss = mss != 0;
    o.mss = mss;
    o.has_wscale = wscale >= 0;
    o.wscale = (uint8_t)(wscale < 0 ? 0 : wscale);
    o.sack_ok = sack;
    o.has_ts = ts;
    o.tsval = tsval;
    return o;
}

/* ---- two stacks over a simulated wire ---- */

#ifndef TP_WIRE_SLOTS
#define TP_WIRE_SLOTS 1024      /* frames on the wire at once; more are tail drops */
#endif

struct wire_item {
    slip_idx_t pkt;
    slip_time_t at;
    uint64_t order;             /* FIFO among frames due at the same time */
};

struct tpair {
    struct harness h;
    struct tcp_shared *a, *b;
    struct ctl_tables *ta, *tb;     /* each side's view: its own address is the local one */
    struct wire_item q[TP_WIRE_SLOTS];
    unsigned nq;
    uint64_t rng;
    unsigned drop_pct, dup_pct, reorder_pct;   /* per cent, per frame */
    slip_time_t delay, jitter;
    uint64_t dropped, duplicated, delivered, order;
    /* A bottleneck (0: none): each direction serializes frames at rate_Bps bytes per second
     * behind a drop-tail queue of qlimit bytes, then adds delay. */
    uint64_t rate_Bps;
    uint32_t qlimit;
    slip_time_t link_free[2];       /* when each direction's link is idle again (to B, to A) */
    uint64_t tail_drops;
};

static inline uint32_t t_rand(uint64_t *s)
{
    /* xorshift64*: deterministic for a given seed. */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (uint32_t)((*s * 2685821657736338717ull) >> 32);
}

static inline void tp_init(struct tpair *p, uint32_t max_conns, uint64_t seed)
{
    memset(p, 0, sizeof(*p));
    harness_init(&p->h);
    h_add_neigh(&p->h, B_ADDR, H_MAC, NUD_REACHABLE);
    p->ta = p->h.t;
    p->tb = malloc(sizeof(*p->tb));
    memcpy(p->tb, p->ta, sizeof(*p->tb));
    p->tb->addrs[0].addr = B_ADDR;
    struct ctl_neigh *n = &p->tb->neighs[p->tb->nneighs++];
    n->ifindex = H_IFINDEX;
    n->addr = US;
    n->state = NUD_REACHABLE;
    memcpy(n->mac, H_MAC, 6);
    p->a = t_new_shared(max_conns);
    p->b = t_new_shared(max_conns);
    p->rng = seed ? seed : 1;
    p->delay = 1 * SLIP_MSEC;
}

/* The environment for calls on side sh (A or B). */
static inline struct ip_env *tp_env(struct tpair *p, struct tcp_shared *sh)
{
    p->h.env.ctl_t = sh == p->b ? p->tb : p->ta;
    return &p->h.env;
}

/* Takes what the stacks transmitted onto the wire, applying loss, duplication, reordering. */
static inline void tp_collect(struct tpair *p)
{
    struct harness *h = &p->h;
    for (unsigned i = 0; i < h->nsent; i++) {
        slip_idx_t pkt = h->sent[i];
        if (p->drop_pct && t_rand(&p->rng) % 100 < p->drop_pct) {
            p->dropped++;
            pkt__free_chain(&h->pool, pkt);
            continue;
        }
        int copies = 1;
        if (p->dup_pct && t_rand(&p->rng) % 100 < p->dup_pct)
            copies = 2;
        for (int k = 0; k < copies; k++) {
            slip_idx_t use = pkt;
            if (k == 1) {
                use = pkt__alloc(&h->pool);
                if (use == SLIP_NIL)
                    break;
                struct pkt_meta *m = pkt__meta(&h->pool, pkt);
                memcpy(pkt__frame(&h->pool, use), pkt__frame(&h->pool, pkt), H_FRAME);
                pkt__meta(&h->pool, use)->off = m->off;
                pkt__meta(&h->pool, use)->len = m->len;
                p->duplicated++;
            }
            if (p->nq >= SLIP_ARRAY_SIZE(p->q)) {
                p->dropped++;       /* the wire is full: a tail drop */
                pkt__free_chain(&h->pool, use);
                continue;
            }
            slip_time_t at = h->env.now + p->delay;
            if (p->rate_Bps) {
                be32 dst;
                memcpy(&dst, pkt__data(&h->pool, use) + WIRE_ETH_HLEN + 16, 4);
                int dir = dst == B_ADDR ? 0 : 1;
                slip_time_t start = SLIP_MAX(h->env.now, p->link_free[dir]);
                uint64_t queued = (uint64_t)(start - h->env.now) * p->rate_Bps / SLIP_SEC;
                if (p->qlimit && queued > p->qlimit) {
                    p->tail_drops++;
                    pkt__free_chain(&h->pool, use);
                    continue;
                }
                p->link_free[dir] = start + (slip_time_t)pkt__meta(&h->pool, use)->len * SLIP_SEC / p->rate_Bps;
                at = p->link_free[dir] + p->delay;
            }
            if (p->reorder_pct && t_rand(&p->rng) % 100 < p->reorder_pct)
                at += (t_rand(&p->rng) % 4 + 1) * SLIP_MSEC;     /* overtaken by later frames */
            p->q[p->nq].pkt = use;
            p->q[p->nq].at = at;
            p->q[p->nq].order = p->order++;
            p->nq++;
        }
    }
    h->nsent = 0;
}

/* Delivers frames due by now, earliest first. Returns how many. */
static inline unsigned tp_deliver(struct tpair *p)
{
    struct harness *h = &p->h;
    unsigned n = 0;
    for (;;) {
        int best = -1;
        for (unsigned j = 0; j < p->nq; j++)
            if (p->q[j].at <= h->env.now &&
                (best < 0 || p->q[j].at < p->q[best].at ||
                 (p->q[j].at == p->q[best].at && p->q[j].order < p->q[best].order)))
                best = (int)j;
        if (best < 0)
            break;
        slip_idx_t pkt = p->q[best].pkt;
        p->q[best] = p->q[--p->nq];
        struct ip_rx rx;
        slip_idx_t in = h_loop(h, pkt);
        const uint8_t *f = pkt__data(&h->pool, in);
        be32 dst;
        memcpy(&dst, f + WIRE_ETH_HLEN + 16, 4);
        tp_env(p, dst == B_ADDR ? p->b : p->a);
        if (ip_input(&h->env, in, H_IFINDEX, &rx)) {
            if (rx.ip.proto != WIRE_IPPROTO_TCP) {
                pkt__free_chain(&h->pool, rx.pkt);
                continue;
            }
            tcp_input(&h->env, rx.ip.dst == B_ADDR ? p->b : p->a, &rx);
        }
        n++;
        p->delivered++;
        tp_collect(p);      /* replies join the wire at once */
    }
    return n;
}

/* One step: collect, deliver what is due, or else move time to the next event. */
static inline void tp_step(struct tpair *p)
{
    struct harness *h = &p->h;
    tp_collect(p);
    if (tp_deliver(p))
        return;
    slip_time_t next = SLIP_MIN(tcp_timer__poll(tp_env(p, p->a), p->a), tcp_timer__poll(tp_env(p, p->b), p->b));
    tp_collect(p);
    for (unsigned j = 0; j < p->nq; j++)
        next = SLIP_MIN(next, p->q[j].at);
    if (next != SLIP_TIME_NEVER && next > h->env.now)
        h->env.now = next;
    tcp_timer__poll(tp_env(p, p->a), p->a);
    tcp_timer__poll(tp_env(p, p->b), p->b);
    tp_collect(p);
}

/* Runs the pair until B's listener has accepted A's connection c (connect() already called)
 * and c is ESTABLISHED: returns the accepted connection, or -EAGAIN if that never came. */
static inline int tp_establish(struct tpair *p, int listener, slip_idx_t c)
{
    int acc = -EAGAIN;
    for (int i = 0; i < 100000 && acc < 0; i++) {
        tp_step(p);
        acc = tcp_conn__accept(p->b, (slip_idx_t)listener);
    }
    for (int i = 0; i < 100000 && tcp_conn__get(p->a, c)->state != TCPS_ESTABLISHED; i++)
        tp_step(p);
    return acc;
}

static inline void tp_fini(struct tpair *p)
{
    /* Frames past H_MAXSENT in one step never reached the wire: the test measured another path. */
    CHECK(p->h.sent_lost, ==, 0);
    for (unsigned j = 0; j < p->nq; j++)
        pkt__free_chain(&p->h.pool, p->q[j].pkt);
    p->nq = 0;
    tcp_shared__purge(p->a, &p->h.pool);
    tcp_shared__purge(p->b, &p->h.pool);
    free(p->a);
    free(p->b);
    p->h.t = p->ta;
    free(p->tb);
    harness_fini(&p->h);
}

static inline uint8_t t_pattern(uint64_t off)
{
    return (uint8_t)((off * 2654435761u) >> 13 ^ off);
}

/* A one-way transfer of t_pattern bytes from connection sc of ssh to rc of rsh: tp_pump sends
 * what the send buffer takes, then (unless the reader is paused) reads and checks what came. */
struct tp_xfer {
    struct tcp_shared *ssh, *rsh;
    slip_idx_t sc, rc;
    uint64_t total, sent, rcvd;
    bool bad;
    bool reader_paused;
};

static inline void tp_pump(struct tpair *p, struct tp_xfer *x)
{
    static uint8_t chunk[16384];
    struct ip_env *env = tp_env(p, x->ssh);
    while (x->sent < x->total) {
        size_t n = SLIP_MIN((uint64_t)sizeof(chunk), x->total - x->sent);
        for (size_t i = 0; i < n; i++)
            chunk[i] = t_pattern(x->sent + i);
        struct iovec iov = { chunk, n };
        ssize_t r = tcp_conn__send(env, x->ssh, x->sc, &iov, 1, 0);
        if (r <= 0)
            break;
        x->sent += (uint64_t)r;
    }
    if (x->reader_paused)
        return;
    static uint8_t in[40000];
    env = tp_env(p, x->rsh);
    for (;;) {
        ssize_t r = tcp_conn__recv(env, x->rsh, x->rc, in, sizeof(in), 0);
        if (r <= 0)
            break;
        for (ssize_t i = 0; i < r; i++)
            if (in[i] != t_pattern(x->rcvd + (uint64_t)i))
                x->bad = true;
        x->rcvd += (uint64_t)r;
    }
}

#endif
