/* A stack without ports for unit tests: packet memory in the heap, control-plane tables filled
 * by hand, and transmitted frames captured in a list by a capture device (ip/netdev.h) that
 * takes each frame as it is sent and turns it back into its buffer. Every test ends with
 * harness_fini(), which checks that all frames came back to the pool (a leak check). */
#ifndef SLIP_TESTS_HARNESS_H
#define SLIP_TESTS_HARNESS_H

#include <errno.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/ctl.h"
#include "ip/ip.h"
#include "pkt/pkt.h"
#include "tests/unit/check.h"
#include "wire/eth.h"
#include "wire/ipv4.h"
#include "wire/udp.h"

#ifndef H_MAXSENT
#define H_MAXSENT 256           /* frames one step may send; more are counted in sent_lost */
#endif
#ifndef H_NFRAMES
#define H_NFRAMES 512           /* a test may define more before including this */
#endif
#define H_FRAME   2048
#define H_IFINDEX 2

struct harness;

/* The transmit side of the harness: a device that takes each frame as ip/ hands it over. */
struct h_capdev {
    struct netdev dev;
    struct harness *h;
};

struct harness {
    struct h_capdev cap;
    struct ip_txq txq;
    struct pkt_pool pool;
    struct ctl_tables *t;
    struct ip_shared *ip;
    struct ip_env env;
    slip_idx_t sent[H_MAXSENT];
    uint32_t sent_if[H_MAXSENT];
    unsigned nsent;
    uint64_t sent_lost;             /* frames sent past H_MAXSENT in one step, freed unseen */
};

static const uint8_t H_MAC[6] = { 0x02, 0, 0, 0, 0, 0x02 };
static const uint8_t H_PEER_MAC[6] = { 0x02, 0, 0, 0, 0, 0x01 };

static inline be32 ip4(unsigned a, unsigned b, unsigned c, unsigned d)
{
    return hton32(a << 24 | b << 16 | c << 8 | d);
}

static inline void h_capture(struct harness *h, uint32_t ifindex, slip_idx_t pkt)
{
    if (h->nsent < H_MAXSENT) {
        h->sent_if[h->nsent] = ifindex;
        h->sent[h->nsent++] = pkt;
    } else {
        h->sent_lost++;
        pkt__free_chain(&h->pool, pkt);
    }
}

/* The frame back into the buffer it was sent from (its metadata is still there). */
static inline unsigned h_cap_tx(struct netdev *d, const struct netdev_frame *f, unsigned n)
{
    struct h_capdev *c = (struct h_capdev *)d;
    for (unsigned i = 0; i < n; i++) {
        slip_idx_t p = pkt__index(&c->h->pool, f[i].addr);
        CHECK(pkt__addr(&c->h->pool, p) + pkt__meta(&c->h->pool, p)->off, ==, f[i].addr);
        h_capture(c->h, d->ifindex, p);
    }
    return n;
}

static inline unsigned h_cap_rx(struct netdev *d, struct netdev_frame *f, unsigned max)
{
    (void)d, (void)f, (void)max;
    return 0;
}

static inline int h_cap_kick(struct netdev *d)
{
    (void)d;
    return 0;
}

static inline uint32_t h_cap_queued(const struct netdev *d)
{
    (void)d;
    return 0;
}

static inline void h_cap_complete(struct netdev *d)
{
    (void)d;
}

static inline bool h_cap_pending(const struct netdev *d)
{
    (void)d;
    return false;
}

static const struct netdev_ops h_cap_ops = {
    .rx_burst = h_cap_rx, .tx_enqueue = h_cap_tx, .kick = h_cap_kick, .tx_queued = h_cap_queued,
    .complete = h_cap_complete, .rx_pending = h_cap_pending,
};

static inline void h_add_neigh(struct harness *h, be32 ip, const uint8_t mac[6], uint16_t state)
{
    struct ctl_neigh *n = &h->t->neighs[h->t->nneighs++];
    n->ifindex = H_IFINDEX;
    n->addr = ip;
    n->state = state;
    memcpy(n->mac, mac, 6);
}

/* Host 198.18.0.2/24 on ifindex 2 (MTU 1500), default route via 198.18.0.1 (a known neighbour). */
static inline void harness_init(struct harness *h)
{
    memset(h, 0, sizeof(*h));
    h->pool.umem = aligned_alloc(4096, (size_t)H_NFRAMES * H_FRAME);
    h->pool.frames = malloc(xsk_frame_pool__bytes(H_NFRAMES));
    h->pool.meta = calloc(H_NFRAMES, sizeof(struct pkt_meta));
    h->pool.frame_size = H_FRAME;
    h->pool.nframes = H_NFRAMES;
    xsk_frame_pool__init(h->pool.frames, H_NFRAMES, H_FRAME);
    h->t = calloc(1, sizeof(*h->t));
    h->ip = malloc(sizeof(*h->ip));
    ip_shared__init(h->ip, 64);

    struct ctl_link *l = &h->t->links[h->t->nlinks++];
    l->ifindex = H_IFINDEX;
    l->mtu = 1500;
    l->flags = IFF_UP | IFF_RUNNING;
    memcpy(l->mac, H_MAC, 6);
    strcpy(l->name, "veth0");
    struct ctl_addr *a = &h->t->addrs[h->t->naddrs++];
    a->ifindex = H_IFINDEX;
    a->addr = ip4(198, 18, 0, 2);
    a->prefixlen = 24;
    struct ctl_route *r = &h->t->routes[h->t->nroutes++];
    r->dst = ip4(198, 18, 0, 0);
    r->prefixlen = 24;
    r->type = RTN_UNICAST;
    r->oif = H_IFINDEX;
    r->table = RT_TABLE_MAIN;
    r = &h->t->routes[h->t->nroutes++];
    r->dst = 0;
    r->prefixlen = 0;
    r->gateway = ip4(198, 18, 0, 1);
    r->type = RTN_UNICAST;
    r->oif = H_IFINDEX;
    r->table = RT_TABLE_MAIN;
    h_add_neigh(h, ip4(198, 18, 0, 1), H_PEER_MAC, NUD_REACHABLE);

    h->env.pool = &h->pool;
    h->env.sh = h->ip;
    h->env.ctl_t = h->t;
    h->env.now = 1000 * SLIP_SEC;
    h->cap = (struct h_capdev){ .dev = { .ops = &h_cap_ops, .ifindex = H_IFINDEX }, .h = h };
    h->txq.dev = &h->cap.dev;
    h->txq.ifindex = H_IFINDEX;
    h->env.txq = &h->txq;
    h->env.ntxq = 1;
}

static inline void h_free_sent(struct harness *h)
{
    for (unsigned i = 0; i < h->nsent; i++)
        pkt__free_chain(&h->pool, h->sent[i]);
    h->nsent = 0;
}

static inline void harness_fini(struct harness *h)
{
    h_free_sent(h);
    ip_shared__purge(&h->env);
    CHECK(h->pool.frames->count, ==, H_NFRAMES);    /* nothing leaked */
    free(h->pool.umem);
    free(h->pool.frames);
    free(h->pool.meta);
    free(h->t);
    free(h->ip);
}

/* Builds a received Ethernet/IPv4 frame in a pool buffer, as the port would hand it over. */
static inline slip_idx_t h_rx_frame(struct harness *h, const struct wire_ipv4_repr *ip, const void *payload, size_t plen)
{
    slip_idx_t p = pkt__alloc(&h->pool);
    uint8_t *d = pkt__data(&h->pool, p);
    struct wire_eth_repr eth = { .type = WIRE_ETHERTYPE_IPV4 };
    memcpy(eth.dst, H_MAC, 6);
    memcpy(eth.src, H_PEER_MAC, 6);
    wire_eth__emit(&eth, d);
    struct wire_ipv4_repr r = *ip;
    r.hdr_len = WIRE_IPV4_HLEN_MIN;
    r.total_len = (uint16_t)(WIRE_IPV4_HLEN_MIN + plen);
    if (!r.ttl)
        r.ttl = 64;
    wire_ipv4__emit(&r, d + WIRE_ETH_HLEN);
    memcpy(d + WIRE_ETH_HLEN + WIRE_IPV4_HLEN_MIN, payload, plen);
    pkt__meta(&h->pool, p)->len = (uint16_t)(WIRE_ETH_HLEN + WIRE_IPV4_HLEN_MIN + plen);
    return p;
}

/* Makes addr one of the host's own addresses (so frames sent to it can be fed back in). */
static inline void h_add_addr(struct harness *h, be32 addr)
{
    struct ctl_addr *a = &h->t->addrs[h->t->naddrs++];
    a->ifindex = H_IFINDEX;
    a->addr = addr;
    a->prefixlen = 32;
}

/* Turns a captured transmitted frame into a received one (same buffer, off/len of the frame). */
static inline slip_idx_t h_loop(struct harness *h, slip_idx_t p)
{
    struct pkt_meta *m = pkt__meta(&h->pool, p);
    return pkt__adopt(&h->pool, pkt__addr(&h->pool, p) + m->off, m->len);
}

#endif
