/* IPv4 fragment reassembly (RFC 791 §3.2 and RFC 815's idea of tracking what is missing).
 * Fragments stay in their UMEM frames, chained in offset order, so a reassembled datagram is a
 * buffer chain. Any overlap other than an exact duplicate drops the whole datagram, as Linux does
 * for IPv4 since 4.19 (and RFC 5722 requires for IPv6).
 *
 * Reassembly is the classic denial-of-service target: a first fragment costs a sender one frame
 * and us a slot for the whole timeout. So nothing here ever refuses a new datagram for lack of
 * room; it makes room by evicting the least recently active incomplete datagram, the way Linux
 * did before 4.17 (ipfrag_high_thresh / ipfrag_low_thresh with an LRU evictor):
 * - slots: a new datagram with every slot in use takes the slot of the least recently active one;
 * - per source: one source holds at most IP_REASS_PER_SRC datagrams, a new one from a source at
 *   its share replaces that source's least recently active one, so a flood from one address
 *   recycles its own slots and leaves the other sources' datagrams alone;
 * - memory: above the high threshold of frames held, the least recently active datagrams go
 *   until the total is under the low threshold;
 * - time: 30 s (Linux ipfrag_time), but only IP_REASS_PRESSURE_TIMEOUT while under pressure
 *   (most slots in use, or frames above the low threshold): a real datagram's fragments arrive
 *   within milliseconds of each other, what waits longer under attack is almost surely garbage.
 * Every eviction is counted (ip.reass_evict_*, ip.reass_timeout*).
 * IPv6 datagrams (RFC 8200 §4.5, overlaps dropped per RFC 5722) share the slots and the bounds:
 * the key carries 16-byte addresses (v4-mapped for IPv4) and the family. */
#include "ip/ip.h"

#include <string.h>

static void slot_free(struct ip_env *env, struct ip_reass_slot *s)
{
    if (s->used && env->sh->reass_slots)
        env->sh->reass_slots--;
    env->sh->reass_bufs -= s->nbufs;
    pkt__free_chain(env->pool, s->frags);
    memset(s, 0, sizeof(*s));
    s->frags = SLIP_NIL;
}

static bool same_src(const struct ip_reass_key *a, const struct ip_reass_key *b)
{
    return memcmp(&a->src, &b->src, sizeof(a->src)) == 0;
}

static bool same_key(const struct ip_reass_key *a, const struct ip_reass_key *b)
{
    return a->id == b->id && a->proto == b->proto && a->v6 == b->v6 && same_src(a, b) &&
           memcmp(&a->dst, &b->dst, sizeof(a->dst)) == 0;
}

/* The least recently active datagram in use, optionally only from src's source, never skip. */
static struct ip_reass_slot *slot_lru(struct ip_env *env, const struct ip_reass_key *src,
                                      const struct ip_reass_slot *skip)
{
    struct ip_reass_slot *old = NULL;
    for (unsigned i = 0; i < IP_REASS_SLOTS; i++) {
        struct ip_reass_slot *s = &env->sh->reass[i];
        if (!s->used || s == skip || (src && !same_src(&s->k, src)))
            continue;
        if (!old || s->touched < old->touched)
            old = s;
    }
    return old;
}

/* The datagram ip belongs to, or a new one. Makes room by eviction when needed: never NULL. */
static struct ip_reass_slot *slot_find(struct ip_env *env, const struct ip_reass_key *k)
{
    struct ip_counters *c = &env->sh->c;
    struct ip_reass_slot *free_slot = NULL;
    unsigned from_src = 0;
    for (unsigned i = 0; i < IP_REASS_SLOTS; i++) {
        struct ip_reass_slot *s = &env->sh->reass[i];
        if (!s->used) {
            if (!free_slot)
                free_slot = s;
            continue;
        }
        if (same_src(&s->k, k)) {
            if (same_key(&s->k, k))
                return s;
            from_src++;
        }
    }
    struct ip_reass_slot *s = free_slot;
    if (from_src >= IP_REASS_PER_SRC) {
        s = slot_lru(env, k, NULL);
        c->reass_evict_src++;
        slot_free(env, s);
    } else if (!s) {
        s = slot_lru(env, NULL, NULL);
        c->reass_evict_slot++;
        slot_free(env, s);
    }
    s->used = 1;
    env->sh->reass_slots++;
    s->k = *k;
    s->frags = SLIP_NIL;
    s->born = env->now;
    return s;
}

/* Brings the frames held under the high threshold before one more is added to keep: evicts the
 * least recently active datagrams other than keep until under the low threshold, and keep itself
 * if it alone is too big. Returns false when keep was evicted. */
static bool make_room(struct ip_env *env, struct ip_reass_slot *keep)
{
    struct ip_shared *sh = env->sh;
    if (sh->reass_bufs < sh->reass_high)
        return true;
    while (sh->reass_bufs >= sh->reass_low) {
        struct ip_reass_slot *old = slot_lru(env, NULL, keep);
        sh->c.reass_evict_mem++;
        if (!old) {
            slot_free(env, keep);
            return false;
        }
        slot_free(env, old);
    }
    return true;
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
    struct ip_reass_key k = { .id = ip->id, .proto = ip->proto, .hdr_len = ip->hdr_len };
    wire_ipv6__v4mapped(ip->src, &k.src);
    wire_ipv6__v4mapped(ip->dst, &k.dst);
    return ip_reass__add_key(env, &k, ip->frag_offset, ip->more_frags, 0, 0, pkt, l4_len, NULL);
}

slip_idx_t ip_reass__add_key(struct ip_env *env, const struct ip_reass_key *k, uint32_t off, bool more,
                             uint8_t l4_proto, uint16_t l4_skip, slip_idx_t pkt, uint32_t *l4_len,
                             uint8_t *l4_proto_out)
{
    struct ip_counters *c = &env->sh->c;
    struct pkt_pool *pool = env->pool;
    struct pkt_meta *m = pkt__meta(pool, pkt);
    uint32_t len = m->len, end = off + len;

    /* RFC 791 and RFC 8200 §4.5: every fragment but the last carries a multiple of 8 bytes; an
     * empty fragment carries nothing we could place; nothing may end past 65535. */
    if (len == 0 || (more && (len & 7)) || end > 65535) {
        c->frag_bad++;
        pkt__free_chain(pool, pkt);
        return SLIP_NIL;
    }
    struct ip_reass_slot *s = slot_find(env, k);
    /* Activity counts before eviction: the datagram receiving a fragment is the most recent. */
    s->touched = ++env->sh->reass_clock;
    if (!make_room(env, s)) {
        pkt__free_chain(pool, pkt);
        return SLIP_NIL;
    }
    if (!more) {
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
    if (off == 0) {
        s->l4_proto = l4_proto;
        s->l4_skip = l4_skip;
        s->hdr_len = k->hdr_len;
    }

    if (!slot_complete(env, s))
        return SLIP_NIL;

    slip_idx_t head = s->frags;
    struct pkt_meta *hm = pkt__meta(pool, head);
    /* IPv6: the first fragment held every extension header up to the upper layer (RFC 7112, as
     * the parser checked), so skipping them stays inside the head buffer. */
    if (s->l4_skip > hm->len) {
        c->frag_bad++;
        slot_free(env, s);
        return SLIP_NIL;
    }
    hm->off += s->l4_skip;
    hm->len -= s->l4_skip;
    hm->total = s->total - s->l4_skip;
    *l4_len = hm->total;
    if (l4_proto_out)
        *l4_proto_out = s->l4_proto;
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

bool ip_reass__pressure(const struct ip_shared *sh)
{
    return sh->reass_slots >= IP_REASS_PRESSURE_SLOTS || sh->reass_bufs > sh->reass_low;
}

slip_time_t ip_reass__expire(struct ip_env *env)
{
    /* Pressure is judged once, before anything is freed: under pressure every datagram older
     * than the short timeout goes, which leaves room for a burst of new ones. */
    if (!env->sh->reass_slots)
        return SLIP_TIME_NEVER;     /* nothing in reassembly: every poll comes here (64 slots) */
    bool pressure = ip_reass__pressure(env->sh);
    slip_time_t next = SLIP_TIME_NEVER;
    for (unsigned i = 0; i < IP_REASS_SLOTS; i++) {
        struct ip_reass_slot *s = &env->sh->reass[i];
        if (!s->used)
            continue;
        slip_time_t dl = s->born + (s->k.v6 ? env->sh->reass6_time : env->sh->reass_time);
        if (dl <= env->now) {
            ip_reass__time_exceeded(env, s);    /* RFC 792, RFC 8200 §4.5 */
            if (s->k.v6)
                env->sh->c.reass6_timeout++;
            else
                env->sh->c.reass_timeout++;
            slot_free(env, s);
            continue;
        }
        if (pressure) {
            dl = s->born + IP_REASS_PRESSURE_TIMEOUT;
            if (dl <= env->now) {
                env->sh->c.reass_timeout_pressure++;
                slot_free(env, s);
                continue;
            }
        }
        if (dl < next)
            next = dl;
    }
    return next;
}
