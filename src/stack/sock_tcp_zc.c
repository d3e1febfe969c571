/* Zero-copy TCP send at the stack's API: frames lent to a process (recorded in its slot of the
 * process table, so a holder that dies between the loan and the send loses nothing), filled by
 * it without the lock, then queued on the connection by tcp_conn__send_frames. */
#include "stack/stack_int.h"

static bool zc_sock_ok(struct slip_stack *s, int sock)
{
    return sock >= 0 && (uint32_t)sock < s->t.max_conns && tcp_conn__user(s->tcp, (slip_idx_t)sock);
}

/* Frees one loan (a chain of frames). The records are in shared memory, which every process of
 * the stack can write: walks are bounded, and an index past the pool ends them (rather than
 * freeing frame 0, which pkt__bound would make of it). */
static void loan_free(struct slip_stack *s, slip_idx_t f)
{
    for (uint32_t steps = 0; f < s->pool.nframes && steps < s->pool.nframes; steps++) {
        struct pkt_meta *m = pkt__meta(&s->pool, f);
        slip_idx_t next = m->chain;
        m->chain = SLIP_NIL;
        pkt__free_chain(&s->pool, f);
        f = next;
    }
}

void tcp_zc_release(struct slip_stack *s, int c)
{
    STACK_ASSERT_LOCKED(s);
    struct slip_proc *p = &s->shm->procs.p[c];
    slip_idx_t h = p->lent ? p->lent - 1 : SLIP_NIL;
    for (uint32_t steps = 0; h < s->pool.nframes && steps < s->pool.nframes; steps++) {
        slip_idx_t next = pkt__meta(&s->pool, h)->next;
        loan_free(s, h);
        h = next;
    }
    p->lent = 0;
}

void tcp_zc_release_all(struct slip_stack *s)
{
    stack_lock(s);
    for (int c = 0; c < SLIP_PROC_MAX; c++)
        if (s->shm->procs.p[c].lent)
            tcp_zc_release(s, c);
    stack_unlock(s);
}

/* Lock held: takes the loan that starts at head out of this process's list. */
static bool loan_unlink(struct slip_stack *s, slip_idx_t head)
{
    STACK_ASSERT_LOCKED(s);
    struct slip_proc *p = &s->shm->procs.p[s->proc];
    slip_idx_t prev = SLIP_NIL, h = p->lent ? p->lent - 1 : SLIP_NIL;
    for (uint32_t steps = 0; h < s->pool.nframes && steps < s->pool.nframes; steps++) {
        slip_idx_t next = pkt__meta(&s->pool, h)->next;
        if (h == head) {
            if (prev == SLIP_NIL)
                p->lent = next == SLIP_NIL ? 0 : next + 1;
            else
                pkt__meta(&s->pool, prev)->next = next;
            return true;
        }
        prev = h;
        h = next;
    }
    return false;
}

ssize_t slip_tcp__zc_reserve(struct slip_stack *s, int sock, size_t skip, size_t want, struct slip_tcp_zc *z)
{
    z->n = 0;
    z->frame_size = s->pool.frame_size;
    if (!zc_sock_ok(s, sock))
        return -EBADF;
    if (s->proc < 0)
        return -EOPNOTSUPP;
    uint32_t fs = s->pool.frame_size;
    if (want == 0 || skip >= fs)
        return want == 0 ? 0 : -EINVAL;
    stack_lock(s);
    env_refresh(s, slip_stack__now());
    rx_catch_up(s);             /* ACKs waiting in the rings make room */
    ssize_t rc = tcp_conn__send_room(&s->env, s->tcp, (slip_idx_t)sock);
    if (rc > 0) {
        size_t bytes = SLIP_MIN(want, (size_t)rc);
        unsigned n = (unsigned)SLIP_MIN((skip + bytes + fs - 1) / fs, (size_t)SLIP_TCP_ZC_MAX);
        if (!pkt__reserve(&s->pool, n))
            n = SLIP_MIN(n, s->pool.frames->count);
        /* The loan is in the process's slot from its first frame on, and each frame joins its
         * chain as soon as it leaves the cache: a holder killed in this loop leaves nothing
         * behind but, at worst, the one frame between those two stores. */
        struct slip_proc *p = &s->shm->procs.p[s->proc];
        slip_idx_t prev = SLIP_NIL;
        for (unsigned k = 0; k < n; k++) {
            slip_idx_t f = pkt__alloc(&s->pool);
            if (f == SLIP_NIL)
                break;
            struct pkt_meta *m = pkt__meta(&s->pool, f);
            m->off = 0;
            m->len = 0;
            m->chain = SLIP_NIL;
            /* Release stores: whoever frees a dead holder's loan must never walk a stale link. */
            if (prev != SLIP_NIL) {
                __atomic_store_n(&pkt__meta(&s->pool, prev)->chain, f, __ATOMIC_RELEASE);
            } else {
                m->next = p->lent ? p->lent - 1 : SLIP_NIL;
                __atomic_store_n(&p->lent, f + 1, __ATOMIC_RELEASE);
            }
            prev = f;
            z->idx[z->n] = f;
            z->iov[z->n].iov_base = pkt__frame(&s->pool, f);
            z->iov[z->n].iov_len = fs;
            z->n++;
        }
        if (z->n == 0) {
            rc = -ENOBUFS;
        } else {
            rc = (ssize_t)SLIP_MIN(bytes, (size_t)z->n * fs - skip);
        }
    }
    /* No tx_done: a loan sends nothing, and a kick here would push out what the program wrote
     * just before (nginx's headers, autocorked) in a segment of its own, ahead of the file. */
    stack_unlock(s);
    return rc;
}

ssize_t slip_tcp__zc_commit(struct slip_stack *s, int sock, struct slip_tcp_zc *z, size_t skip, size_t len,
                            int more)
{
    if (z->n == 0)
        return 0;
    uint32_t fs = z->frame_size;
    stack_lock(s);
    env_refresh(s, slip_stack__now());
    ssize_t rc = 0;
    if (s->proc < 0 || !loan_unlink(s, z->idx[0])) {
        rc = -ENOBUFS;          /* taken back meanwhile (never by a live holder's own stack) */
    } else if (len == 0 || skip >= fs || !zc_sock_ok(s, sock)) {
        loan_free(s, z->idx[0]);
        rc = len == 0 ? 0 : skip >= fs ? -EINVAL : -EBADF;
    } else {
        size_t left = len;
        for (unsigned k = 0; k < z->n; k++) {
            struct pkt_meta *m = pkt__meta(&s->pool, z->idx[k]);
            uint32_t from = k == 0 ? (uint32_t)skip : 0;
            m->chain = SLIP_NIL;
            m->off = (uint16_t)from;
            m->len = (uint16_t)SLIP_MIN(left, (size_t)(fs - from));
            left -= m->len;
        }
        bool cork = tx_deferring(s);
        if (s->shm->ncork >= s->t.max_conns)
            uncork_all(s);
        bool corked = tcp_conn__autocorked(s->tcp, (slip_idx_t)sock);
        rc = tcp_conn__send_frames(&s->env, s->tcp, (slip_idx_t)sock, z->idx, z->n,
                                   (more ? TCP_SEND_MORE : 0) | (cork ? TCP_SEND_AUTOCORK : 0));
        if (cork && !corked && tcp_conn__autocorked(s->tcp, (slip_idx_t)sock))
            s->t.cork[s->shm->ncork++] = (uint32_t)sock;
        tx_done(s);
    }
    stack_unlock(s);
    z->n = 0;
    return rc;
}
