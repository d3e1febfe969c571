/* The stacks of one group: several stacks (one per application, or per SLIP_STACK_NAME) on the
 * same interfaces share one UMEM, because an AF_XDP queue takes one UMEM and its fill and
 * completion rings serve every socket bound to it. This file is what they share and how:
 *
 * - frames: each stack allocates from and frees to its own cache (struct xsk_frame_pool in its
 *   own memory, under its own lock); the cache refills from and spills to the group pool in
 *   batches under the group's pool lock (group_refill, group_balance);
 * - the queues' fill and completion rings: a try-lock per queue (xsk_port__share_rings);
 * - an index per stack (its XSKMAP slots and the owner named in its flows' values), held by a
 *   listening abstract socket "<group name>/s<index>" that every holder of the stack keeps
 *   open: the name is free exactly when the stack is gone (group_claim_index).
 *
 * See docs/ARCHITECTURE.md, "Many stacks on one interface". */
#include "stack/stack_int.h"
#include "stack/share.h"

#include <sys/un.h>

/* A stack keeps between these many frames in its cache when it polls: the low mark covers a
 * quarter-ring fill refill and a burst of sends; the rest goes back for the other stacks. When a
 * stack found the group pool short (hungry), the others give back down to the low mark. */
static uint32_t cache_low(const struct slip_stack *s) { return s->cfg.ring_size + 256; }
static uint32_t cache_high(const struct slip_stack *s) { return 4 * s->cfg.ring_size + 1024; }

static struct xsk_frame_pool *group_pool(const struct slip_stack *s)
{
    const struct slip_arena *g = s->shm->grouped ? &s->garena : &s->arena;
    return slip_arena__ptr(g, s->shm->off_pool);
}

/* Moves up to n frames from one pool to the other: both are bounded by nframes, the caller's own
 * copy (the counts live in memory other processes write). */
static uint32_t move_frames(struct xsk_frame_pool *from, struct xsk_frame_pool *to, uint32_t n, uint32_t nframes)
{
    uint32_t moved = 0;
    while (moved < n) {
        uint64_t a = xsk_frame_pool__get(from, nframes);
        if (a == UINT64_MAX)
            break;
        if (to->count >= nframes) {
            xsk_frame_pool__put(from, nframes, a);
            break;
        }
        xsk_frame_pool__put(to, nframes, a);
        moved++;
    }
    return moved;
}

static uint32_t group_refill(struct pkt_pool *p, uint32_t want)
{
    struct slip_stack *s = p->owner;
    slip_lock__acquire(&s->group->pool_lock);
    if (__atomic_load_n(&s->shm->cache_closed, __ATOMIC_RELAXED)) {
        /* Closed by the guardian: frames taken now would go nowhere when this process ends. */
        slip_lock__release(&s->group->pool_lock);
        return 0;
    }
    uint32_t n = move_frames(group_pool(s), p->frames, want, p->nframes);
    s->group->refills++;
    if (n < want)
        s->group->starved++;
    /* Hungry until a refill is served in full: meanwhile the others spill what they hold above
     * their low mark. */
    __atomic_store_n(&s->group->hungry, n < want, __ATOMIC_RELAXED);
    slip_lock__release(&s->group->pool_lock);
    return n;
}

/* The group's pool lock held: n frames of the stack's cache back to the group. */
static void spill_locked(struct slip_stack *s, uint32_t n)
{
    move_frames(s->pool.frames, group_pool(s), n, s->pool.nframes);
    s->group->spills++;
}

static void group_spill(struct slip_stack *s, uint32_t n)
{
    slip_lock__acquire(&s->group->pool_lock);
    spill_locked(s, n);
    slip_lock__release(&s->group->pool_lock);
}

void group_balance(struct slip_stack *s)
{
    uint32_t have = s->pool.frames->count, lo = cache_low(s), hi = cache_high(s);
    if (have < lo)
        group_refill(&s->pool, lo + (hi - lo) / 2 - have);
    else if (have > s->pool.nframes)
        return;     /* a count nobody of ours wrote: left alone */
    else if (have > hi)
        group_spill(s, have - (lo + (hi - lo) / 2));
    else if (have > lo && __atomic_load_n(&s->group->hungry, __ATOMIC_RELAXED))
        group_spill(s, have - lo);
}

void group_return_all(struct slip_stack *s)
{
    /* What the stack's queues hold (TCP's are purged by the caller): received datagrams,
     * fragments being reassembled, frames waiting for a neighbour. */
    for (unsigned i = 0; i < slip_socktab__udp_high(&s->t); i++)
        pkt_queue__purge(&s->pool, &s->udp->socks[i].rcvq);
    if (s->ip)
        ip_shared__purge(&s->env);
    /* Closed and emptied under one hold of the pool lock: a process of the stack still in its
     * exit path (its slot already free, so the stack looked orphaned) refilled the cache after
     * the guardian emptied it, and a whole refill (5,760 frames) left with the stack. */
    slip_lock__acquire(&s->group->pool_lock);
    __atomic_store_n(&s->shm->cache_closed, 1, __ATOMIC_RELAXED);
    uint32_t have = s->pool.frames->count;
    if (have && have <= s->pool.nframes)
        spill_locked(s, have);
    slip_lock__release(&s->group->pool_lock);
}

void group_wire(struct slip_stack *s)
{
    s->pool.refill = group_refill;
    s->pool.owner = s;
    for (unsigned i = 0; i < s->nifs; i++)
        for (unsigned q = 0; q < s->ifs[i].nq; q++)
            if (s->ifs[i].ports[q])
                xsk_port__share_rings(s->ifs[i].ports[q], &s->group->qlock[i][q], &g_stack_pid);
}

void group_token_name(const struct slip_stack *s, unsigned index, char *buf, size_t len)
{
    const char *names[SLIP_MAX_IFACES];
    for (unsigned i = 0; i < s->nifs; i++)
        names[i] = s->ifs[i].name;
    slip_share__name(buf, len, names, s->nifs);
    size_t k = strlen(buf);
    snprintf(buf + k, len > k ? len - k : 0, "/s%u", index);
}

int group_token_bind(struct slip_stack *s, unsigned index)
{
    char name[108];
    group_token_name(s, index, name, sizeof(name));
    int fd = slip_share__listen(name);
    if (fd >= 0)
        s->token_fd = fd;
    return fd < 0 ? fd : 0;
}

int group_claim_index(struct slip_stack *s, char *err, size_t errlen)
{
    /* Index 0 is the group's first stack's, whose memory is the group's: never reused while the
     * group lives. A name bound by anyone (another user squatting it included) is skipped. */
    for (unsigned k = 1; k < STEER_MAX_STACKS; k++) {
        if (group_token_bind(s, k) < 0)
            continue;
        /* A dead stack that had this index may have left flows naming it: they would reach our
         * sockets. Forget them before our sockets enter the map. */
        slip_lock__acquire(&s->group->claim_lock);     /* it edits shared SO_REUSEPORT keys */
        for (unsigned i = 0; i < s->nifs; i++)
            if (s->ifs[i].steer)
                steer__forget_stack(s->ifs[i].steer, k);
        slip_lock__release(&s->group->claim_lock);
        s->index = k;
        return 0;
    }
    snprintf(err, errlen, "the interfaces already carry %d stacks (the most one XDP program steers to)",
             STEER_MAX_STACKS);
    return -EBUSY;
}

/* ---- a stack joining a group ---- */

int group_in_parse(struct group_in *g, const char *spec, const struct slip_config *cfg, char *err, size_t errlen)
{
    memset(g, 0xff, sizeof(*g));        /* every fd -1 */
    g->nifs = 0;
    memset(g->nq, 0, sizeof(g->nq));
    memset(g->steer_taken, 0, sizeof(g->steer_taken));
    char buf[SLIP_SHARE_SPEC_MAX + 64];
    snprintf(buf, sizeof(buf), "%s", spec);
    char *save = NULL, *tok = strtok_r(buf, ";", &save);
    if (!tok || tok[0] != 'G' || tok[1] != ',')
        goto bad;
    g->memfd = atoi(tok + 2);
    while ((tok = strtok_r(NULL, ";", &save)) != NULL) {
        if (g->nifs >= SLIP_MAX_IFACES)
            goto bad;
        unsigned i = g->nifs, n = 0;
        for (char *s2 = NULL, *t = strtok_r(tok, ",", &s2); t; t = strtok_r(NULL, ",", &s2), n++) {
            if (n < 4)
                g->steer[i][n] = atoi(t);
            else if (n - 4 < SLIP_MAX_QUEUES)
                g->share[i][n - 4] = atoi(t);
            else
                goto bad;
        }
        if (n < 5)
            goto bad;
        g->nq[i] = n - 4;
        g->nifs++;
    }
    if (g->nifs != cfg->nifaces) {
        snprintf(err, errlen, "the group on these interfaces has %u of them, we asked for %u", g->nifs, cfg->nifaces);
        return -EINVAL;
    }
    return 0;
bad:
    snprintf(err, errlen, "malformed description of the group");
    return -EPROTO;
}

int group_in_map(struct slip_stack *s, struct group_in *g, char *err, size_t errlen)
{
    int rc = slip_arena__attach(&s->garena, g->memfd);
    if (rc < 0) {
        snprintf(err, errlen, "cannot map the group's memory: %s", strerror(-rc));
        return rc;
    }
    g->memfd = -1;                      /* the arena's now */
    const struct slip_shm *h = slip_arena__ptr(&s->garena, 0);
    const char *bad = NULL;
    if (s->garena.size < sizeof(*h) || h->magic != SLIP_SHM_MAGIC || h->version != SLIP_SHM_VERSION)
        bad = "not a slipstream stack of this version";
    else if (h->grouped || h->index != 0)
        bad = "not the group's first stack";
    else if ((bad = stack_layout_bad(h, s->garena.size, s->garena.size)) != NULL)
        ;
    else if (h->nifs != s->nifs)
        bad = "another set of interfaces";
    for (unsigned i = 0; !bad && i < s->nifs; i++)
        if (strcmp(h->ifname[i], s->ifs[i].name) != 0 || h->nq[i] != s->ifs[i].nq || g->nq[i] != s->ifs[i].nq)
            bad = "another set of interfaces or queues";
    if (bad) {
        snprintf(err, errlen, "the group's memory is not usable (%s): not joining it", bad);
        return -EINVAL;
    }
    return 0;
}

void group_in_taken(struct group_in *g, unsigned i)
{
    g->steer_taken[i] = true;
}

void group_in_done(struct group_in *g)
{
    if (g->memfd >= 0)
        close(g->memfd);
    for (unsigned i = 0; i < g->nifs; i++) {
        for (unsigned k = 0; k < 4 && !g->steer_taken[i]; k++)
            if (g->steer[i][k] >= 0)
                close(g->steer[i][k]);
        for (unsigned q = 0; q < g->nq[i]; q++)
            if (g->share[i][q] >= 0)
                close(g->share[i][q]);
    }
}

int slip_stack__describe_group(struct slip_stack *s, char *buf, size_t len, int *fds, int max)
{
    int n = 0;
    int memfd = s->shm->grouped ? s->garena.memfd : s->arena.memfd;
    size_t k = (size_t)snprintf(buf, len, "G,%d", memfd);     /* a number after ',' is renumbered */
    if (n < max)
        fds[n++] = memfd;
    for (unsigned i = 0; i < s->nifs && k < len; i++) {
        int sf[4];
        steer__export(s->ifs[i].steer, sf);
        k += (size_t)snprintf(buf + k, len - k, ";%d,%d,%d,%d", sf[0], sf[1], sf[2], sf[3]);
        for (int j = 0; j < 4 && n < max; j++)
            fds[n++] = sf[j];
        for (unsigned q = 0; q < s->ifs[i].nq && k < len; q++) {
            int fd = xsk_port__fd(s->ifs[i].ports[q]);
            k += (size_t)snprintf(buf + k, len - k, ",%d", fd);
            if (n < max)
                fds[n++] = fd;
        }
    }
    return k < len ? n : -ENOSPC;
}

unsigned slip_stack__index(const struct slip_stack *s)
{
    return s->index;
}

const char *slip_stack__name(const struct slip_stack *s)
{
    return s->shm->name;
}

int slip_stack__token_fd(const struct slip_stack *s)
{
    return s->token_fd;
}

void slip_group__note_passed(struct slip_stack *s, uint64_t ino)
{
    if (!s->group || !ino)
        return;
    uint32_t k = __atomic_fetch_add(&s->group->passed_next, 1, __ATOMIC_RELAXED) % SLIP_ARRAY_SIZE(s->group->passed);
    struct slip_passed *e = &s->group->passed[k];
    __atomic_store_n(&e->ino, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&e->index, s->index, __ATOMIC_RELAXED);
    __atomic_store_n(&e->ino, ino, __ATOMIC_RELEASE);
}

int slip_group__passed_index(struct slip_stack *s, uint64_t ino)
{
    if (!s->group || !ino)
        return -ENOENT;
    for (unsigned k = 0; k < SLIP_ARRAY_SIZE(s->group->passed); k++) {
        struct slip_passed *e = &s->group->passed[k];
        if (__atomic_load_n(&e->ino, __ATOMIC_ACQUIRE) != ino)
            continue;
        uint32_t index = __atomic_load_n(&e->index, __ATOMIC_RELAXED);
        if (index < STEER_MAX_STACKS)
            return (int)index;
    }
    return -ENOENT;
}

int slip_stack__join_index(struct slip_stack *s, unsigned index, struct slip_stack **out, char *err, size_t errlen)
{
    char name[108];
    if (index >= STEER_MAX_STACKS)
        return -EINVAL;
    group_token_name(s, index, name, sizeof(name));
    return slip_share__join(out, name, err, errlen);
}
