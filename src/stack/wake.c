/* Waking sleepers: the process's doorbell, the accept bell of listener-only epoll sets, the
 * count of sleeping threads, and the bells other processes of the stack ring (bell.h). */
#include "stack/stack_int.h"

/* Rings an eventfd bell (the doorbell, the accept bell); nobody reads them, sleepers watch them
 * edge-triggered. */
static void bell_ring(int fd)
{
    uint64_t one = 1;
    if (fd >= 0 && write(fd, &one, sizeof(one)) < 0) {
        /* saturated: the sleepers are awake anyway */
    }
}

void ring_doorbell(struct slip_stack *s)
{
    bell_ring(s->doorbell);
}

void slip_stack__sleepers(struct slip_stack *s, int delta)
{
    /* Per process first: a poll that sees the total moved looks for the process (see
     * others_asleep); the total is what its fast path reads. */
    if (s->proc >= 0)
        __atomic_add_fetch(&s->shm->procs.p[s->proc].sleepers, (uint32_t)delta, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&s->shm->sleepers, (uint32_t)delta, __ATOMIC_SEQ_CST);
}

/* Lock held, once per poll after its receive work: the slots of other processes with threads
 * asleep on the wait fds. Two loads when nobody else sleeps. A process that counts itself asleep
 * after this looks at its sockets afterwards and finds what this poll delivered. */
uint64_t others_asleep(struct slip_stack *s)
{
    STACK_ASSERT_LOCKED(s);
    uint32_t all = __atomic_load_n(&s->shm->sleepers, __ATOMIC_SEQ_CST);
    uint32_t mine = s->proc >= 0 ? __atomic_load_n(&s->shm->procs.p[s->proc].sleepers, __ATOMIC_SEQ_CST) : 0;
    if (all == mine)
        return 0;
    uint64_t mask = 0;
    for (int k = 0; k < SLIP_PROC_MAX; k++)
        if (k != s->proc && __atomic_load_n(&s->shm->procs.p[k].sleepers, __ATOMIC_SEQ_CST) &&
            __atomic_load_n(&s->shm->procs.p[k].pid, __ATOMIC_ACQUIRE) > 0)
            mask |= 1ull << k;
    return mask;
}

/* Lock held: socket w had an event; note which of the sleeping processes in `asleep` hold it. */
void note_sleeping_holders(struct slip_stack *s, bool tcp, unsigned w, uint64_t asleep)
{
    STACK_ASSERT_LOCKED(s);
    for (int k = 0; asleep; k++, asleep >>= 1)
        /* UDP has no per-socket event list here: a datagram rings every sleeping process. */
        if ((asleep & 1) && (!tcp || slip_socktab__proc_tcp(&s->t, k)[w]))
            s->ring_procs |= 1ull << k;
}

void doorbell_open(struct slip_stack *s)
{
    s->doorbell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->accept_bell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->peer_bell = slip_sandbox__limited() ? -1 : slip_bell__open(getpid());
}

/* Closes what doorbell_open made (this process's own fds, never inherited ones). */
void doorbell_close(struct slip_stack *s)
{
    int *fds[] = { &s->doorbell, &s->accept_bell, &s->peer_bell };
    for (unsigned i = 0; i < SLIP_ARRAY_SIZE(fds); i++)
        if (*fds[i] >= 0) {
            close(*fds[i]);
            *fds[i] = -1;
        }
}

int slip_stack__peer_bell_fd(struct slip_stack *s)
{
    return s->peer_bell;
}

bool slip_stack__peer_bell_take(struct slip_stack *s)
{
    if (!slip_bell__drain(s->peer_bell))
        return false;
    /* Another process's poll delivered to us: every sleeping set of this process looks again
     * (its doorbell is edge-triggered in epoll sets, so a drain here takes nothing from them). */
    ring_doorbell(s);
    return true;
}

/* After a poll, unlocked: ring the processes whose sleeping threads it delivered something to. */
void ring_procs(struct slip_stack *s, uint64_t mask)
{
    if (slip_sandbox__limited())
        return;     /* sendto may kill a sandboxed thread: the others wake by their timeouts */
    for (int k = 0; mask && k < SLIP_PROC_MAX; k++, mask >>= 1) {
        if (!(mask & 1))
            continue;
        int32_t pid = __atomic_load_n(&s->shm->procs.p[k].pid, __ATOMIC_ACQUIRE);
        if (pid > 0)
            slip_bell__ring(s->peer_bell, pid);
    }
}

int slip_stack__accept_bell_fd(struct slip_stack *s)
{
    return s->accept_bell;
}

void slip_stack__accept_sleepers(struct slip_stack *s, int delta)
{
    __atomic_add_fetch(&s->accept_sleepers, (uint32_t)delta, __ATOMIC_SEQ_CST);
}

void slip_stack__ring_accept_bell(struct slip_stack *s)
{
    bell_ring(s->accept_bell);
}

int slip_stack__doorbell_fd(struct slip_stack *s)
{
    return s->doorbell;
}

void slip_stack__doorbell_drain(struct slip_stack *s)
{
    uint64_t v;
    int saved = errno;      /* callers report the errno of the wait that preceded this */
    if (s->doorbell >= 0)
        while (read(s->doorbell, &v, sizeof(v)) == sizeof(v))
            ;
    /* A bell rung by another process: this thread is awake and looks again; the process's other
     * sleepers get the doorbell (rung after the drain above, so they see it). */
    if (slip_bell__drain(s->peer_bell) && s->doorbell >= 0)
        ring_doorbell(s);
    errno = saved;
}
