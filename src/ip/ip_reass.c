/* IPv4 fragment reassembly (RFC 791 §3.2 and RFC 815's idea of tracking what is missing).
 * Fragments stay in their UMEM frames, chained in offset order, so a reassembled datagram is a
 * buffer chain. Memory is bounded twice: a fixed number of datagrams in progress and a bound on
 * frames held; time is bounded by IP_REASS_TIMEOUT. Any overlap other than an exact duplicate
 * drops the whole datagram, as Linux does for IPv4 since 4.19 (and RFC 5722 requires for IPv6). */
#include "ip/ip.h"

#include <string.h>

static void slot_free(struct ip_env *env, struct ip_reass_slot *s)
{
    env->sh->reass_bufs -= s->nbufs;
    pkt__free_chain(env->pool, s->frags);
    memset(s, 0, sizeof(*s));
    s->frags = SLIP_NIL;
}

static struct ip_reass_slot *slot_find(struct ip_env *env, const struct wire_ipv4_repr *ip)
{
    struct ip_reass_slot *free_slot = NULL;
    for (unsigned i = 0; i < IP_REASS_SLOTS; i++) {
        struct ip_reass_slot *s = &env->sh->reass[i];
        if (!s->used) {
            if (!free_slot)
                free_slot = s;
            continue;
        }
        if (s->src == ip->src && s->dst == ip->dst && s->id == ip->id && s->proto == ip->proto)
            return s;
    }
    if (!free_slot)
        return NULL;
    free_slot->used = 1;
    free_slot->src = ip->src;
    free_slot->dst = ip->dst;
    free_slot->id = ip->id;
    free_slot->proto = ip->proto;
    free_slot->frags = SLIP_NIL;
    free_slot->expires = env->now + IP_REASS_TIMEOUT;
    return free_slot;
}

/* True when the chain covers [0, total) without holes. */
static bool slot_complete(struct ip_env *env, const struct ip_reass_slot *s)
{
    if (!s->total)
        return false;
    uint32_t next = 0;
    for (slip_idx_t i = s->frags; i != SLIP_NIL; i = pkt__meta(env->pool, i)->chain) {
        const struct pkt_meta *m = pkt__meta(env->pool, i);
        if (m->frag_off != next)
            return false;
        next += m->len;
    }
    return next == s->total;
}

slip_idx_t ip_reass__add(struct ip_env *env, const struct wire_ipv4_repr *ip, slip_idx_t pkt, uint32_t *l4_len)
{
    struct ip_counters *c = &env->sh->c;
    struct pkt_pool *pool = env->pool;
    struct pkt_meta *m = pkt__meta(pool, pkt);
    uint32_t off = ip->frag_offset, len = m->len, end = off + len;

    /* RFC 791: every fragment but the last carries a multiple of 8 bytes; an empty fragment
     * carries nothing we could place. */
    if (len == 0 || (ip->more_frags && (len & 7))) {
        c->frag_bad++;
        pkt__free_chain(pool, pkt);
        return SLIP_NIL;
    }
    struct ip_reass_slot *s = slot_find(env, ip);
    if (!s) {
        c->reass_no_slot++;
        pkt__free_chain(pool, pkt);
        return SLIP_NIL;
    }
    if (env->sh->reass_bufs >= env->sh->reass_max_bufs) {
        c->reass_no_buf++;
        pkt__free_chain(pool, pkt);
        if (!s->frags)
            slot_free(env, s);
        return SLIP_NIL;
    }
    if (!ip->more_frags) {
        /* A second, different "last fragment" or data past the end is an inconsistency. */
        if ((s->total && s->total != end) || end < s->received) {
            c->reass_overlap++;
            pkt__free_chain(pool, pkt);
            slot_free(env, s);
            return SLIP_NIL;
        }
        s->total = end;
    } else if (s->total && end > s->total) {
        c->reass_overlap++;
        pkt__free_chain(pool, pkt);
        slot_free(env, s);
        return SLIP_NIL;
    }

    /* Insert in offset order; reject overlaps. */
    slip_idx_t prev = SLIP_NIL, cur = s->frags;
    while (cur != SLIP_NIL && pkt__meta(pool, cur)->frag_off < off) {
        prev = cur;
        cur = pkt__meta(pool, cur)->chain;
    }
    if (cur != SLIP_NIL) {
        const struct pkt_meta *cm = pkt__meta(pool, cur);
        if (cm->frag_off == off && cm->len == len) {
            c->reass_dup++;
            pkt__free_chain(pool, pkt);
            return SLIP_NIL;
        }
        if (cm->frag_off < end)
            goto overlap;
    }
    if (prev != SLIP_NIL) {
        const struct pkt_meta *pm = pkt__meta(pool, prev);
        if ((uint32_t)pm->frag_off + pm->len > off)
            goto overlap;
    }
    m->frag_off = (uint16_t)off;
    m->chain = cur;
    if (prev == SLIP_NIL)
        s->frags = pkt;
    else
        pkt__meta(pool, prev)->chain = pkt;
    s->nbufs++;
    s->received += len;
    env->sh->reass_bufs++;

    if (!slot_complete(env, s))
        return SLIP_NIL;

    slip_idx_t head = s->frags;
    pkt__meta(pool, head)->total = s->total;
    *l4_len = s->total;
    env->sh->reass_bufs -= s->nbufs;
    memset(s, 0, sizeof(*s));
    s->frags = SLIP_NIL;
    c->reass_ok++;
    return head;

overlap:
    c->reass_overlap++;
    pkt__free_chain(pool, pkt);
    slot_free(env, s);
    return SLIP_NIL;
}

slip_time_t ip_reass__expire(struct ip_env *env)
{
    slip_time_t next = SLIP_TIME_NEVER;
    for (unsigned i = 0; i < IP_REASS_SLOTS; i++) {
        struct ip_reass_slot *s = &env->sh->reass[i];
        if (!s->used)
            continue;
        if (s->expires <= env->now) {
            /* RFC 792 suggests an ICMP time-exceeded here; we stay silent (docs/COMPLIANCE.md). */
            env->sh->c.reass_timeout++;
            slot_free(env, s);
        } else if (s->expires < next) {
            next = s->expires;
        }
    }
    return next;
}
