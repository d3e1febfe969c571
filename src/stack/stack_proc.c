/* Processes sharing the stack: their slots and the references each holds on sockets (fork,
 * exec, fd passing), reaping the dead, and leaving (exit) with the stack's data delivered. */
#include "stack/stack_int.h"

/* ---- processes sharing the stack (see proc.h) ---- */

/* Takes slot `want` when it was reserved for this process (fork child, exec'd or spawned image)
 * or already is ours (exec keeps the pid), else any free slot. Without a slot the process still
 * works; only its references cannot be reclaimed if it dies. */
void proc_register(struct slip_stack *s, int want)
{
    struct slip_procs *t = &s->shm->procs;
    uint64_t self = slip_proc__start_time(g_stack_pid);
    s->reap_ok = self != 0 && self != SLIP_PROC_START_UNKNOWN;
    s->proc = -1;
    if (want >= 0 && want < SLIP_PROC_MAX) {
        int32_t cur = __atomic_load_n(&t->p[want].pid, __ATOMIC_ACQUIRE);
        if (cur == SLIP_PROC_RESERVED || cur == (int32_t)g_stack_pid) {
            slip_procs__bind(t, want, g_stack_pid);
            s->proc = want;
            return;
        }
    }
    int i = slip_procs__find(t, g_stack_pid);
    if (i < 0)
        i = slip_procs__claim(t, g_stack_pid);
    if (i < 0)
        slip_warn("more than %d processes share the stack: sockets of this one (pid %d) are not released if it dies",
                  SLIP_PROC_MAX, (int)g_stack_pid);
    s->proc = i;
}

/* Lock held: close the copies of reservation sockets that other processes released. */
void proc_drain_closeq(struct slip_stack *s)
{
    STACK_ASSERT_LOCKED(s);
    struct slip_proc *me = &s->shm->procs.p[s->proc];
    uint32_t n = SLIP_MIN(me->closeq_n, (uint32_t)SLIP_PROC_CLOSEQ);
    for (uint32_t i = 0; i < n; i++)
        kfd_close(s, me->closeq[i]);
    me->closeq_n = 0;
}

static uint32_t *proc_tcp(struct slip_stack *s, int k)
{
    return slip_socktab__proc_tcp(&s->t, k);
}

static uint32_t *proc_udp(struct slip_stack *s, int k)
{
    return slip_socktab__proc_udp(&s->t, k);
}

static uint64_t *proc_held(struct slip_stack *s, int k)
{
    return slip_socktab__proc_held(&s->t, k);
}

static bool held_test(struct slip_stack *s, int k, unsigned i)
{
    return (proc_held(s, k)[i / 64] >> (i % 64)) & 1;
}

/* A slot whose block can hold anything: free slots' blocks are zero and stay untouched. */
static bool proc_in_use(struct slip_stack *s, int k)
{
    return __atomic_load_n(&s->shm->procs.p[k].pid, __ATOMIC_ACQUIRE) != SLIP_PROC_FREE;
}

/* Lock held: this process just made the reservation socket of TCP slot i; nobody else has a copy. */
void proc_kfd_hold(struct slip_stack *s, unsigned i)
{
    STACK_ASSERT_LOCKED(s);
    for (int k = 0; k < SLIP_PROC_MAX; k++)
        if (k != s->proc && proc_in_use(s, k) && held_test(s, k, i))
            proc_held(s, k)[i / 64] &= ~(1ull << (i % 64));
    if (s->proc >= 0)
        proc_held(s, s->proc)[i / 64] |= 1ull << (i % 64);
}

/* Lock held: the reservation socket fd of TCP slot i is released. Every process with a copy
 * closes its own: this one now, the others on their next turn with the lock (a dead one's copy
 * went with it). Without slots (table full), only this process's copy can be closed. */
void proc_kfd_drop(struct slip_stack *s, unsigned i, int fd)
{
    STACK_ASSERT_LOCKED(s);
    struct slip_procs *t = &s->shm->procs;
    bool mine = s->proc < 0 && !s->guard;   /* fd numbers of the dead mean nothing in the guardian */
    for (int k = 0; k < SLIP_PROC_MAX; k++) {
        struct slip_proc *p = &t->p[k];
        if (!proc_in_use(s, k) || !held_test(s, k, i))
            continue;
        proc_held(s, k)[i / 64] &= ~(1ull << (i % 64));
        if (k == s->proc) {
            mine = true;
        } else {
            if (p->closeq_n < SLIP_PROC_CLOSEQ)
                p->closeq[p->closeq_n++] = fd;
            else
                t->closeq_overflows++;
        }
    }
    if (mine)
        kfd_close(s, fd);
}

/* Processes attached to the stack (slots with a pid). */
unsigned procs_live(const struct slip_stack *s)
{
    unsigned live = 0;
    for (int i = 0; i < SLIP_PROC_MAX; i++)
        live += __atomic_load_n(&s->shm->procs.p[i].pid, __ATOMIC_RELAXED) > 0;
    return live;
}

bool slip_stack__alone(struct slip_stack *s)
{
    return procs_live(s) <= 1;
}

uint32_t slip_sock__evgen(struct slip_stack *s, bool tcp, int sock)
{
    if (tcp)
        return __atomic_load_n(&s->t.ts[sock].evgen, __ATOMIC_RELAXED);
    return (uint32_t)udp_sock__rx_datagrams(s->udp, (slip_idx_t)sock);
}

size_t slip_sock__tcp_evgen_stride(void)
{
    return sizeof(struct tcp_side);
}

uint32_t *slip_sock__tcp_evgen_word(struct slip_stack *s, int sock)
{
    return &s->t.ts[sock].evgen;
}

void slip_sock__tcp_waiters(struct slip_stack *s, int sock, int delta)
{
    __atomic_add_fetch(&s->t.ts[sock].waiters, (uint32_t)delta, __ATOMIC_SEQ_CST);
}

uint32_t slip_sock__ref_in(struct slip_stack *s, int slot, bool tcp, int sock, int delta)
{
    if (slot >= 0 && slot < SLIP_PROC_MAX)
        __atomic_add_fetch(tcp ? &proc_tcp(s, slot)[sock] : &proc_udp(s, slot)[sock], (uint32_t)delta,
                           __ATOMIC_RELAXED);
    uint32_t *r = tcp ? &s->t.ts[sock].refs : &s->t.us[sock].refs;
    return __atomic_add_fetch(r, (uint32_t)delta, __ATOMIC_ACQ_REL);
}

uint32_t slip_sock__ref(struct slip_stack *s, bool tcp, int sock, int delta)
{
    uint32_t n = slip_sock__ref_in(s, s->proc, tcp, sock, delta);
    if (n == 0)
        slip_sock__set_ino(s, tcp, sock, 0);
    return n;
}

void slip_sock__pass_out(struct slip_stack *s, bool tcp, int sock)
{
    stack_lock(s);
    slip_sock__ref_in(s, s->proc, tcp, sock, 1);
    if (tcp) {
        s->t.ts[sock].inflight++;
        s->t.ts[sock].inflight_slot = s->proc;
    } else {
        s->t.us[sock].inflight++;
        s->t.us[sock].inflight_slot = s->proc;
    }
    stack_unlock(s);
}

void slip_sock__pass_in(struct slip_stack *s, bool tcp, int sock)
{
    stack_lock(s);
    uint32_t *n = tcp ? &s->t.ts[sock].inflight : &s->t.us[sock].inflight;
    int from = tcp ? s->t.ts[sock].inflight_slot : s->t.us[sock].inflight_slot;
    slip_sock__ref_in(s, s->proc, tcp, sock, 1);
    if (*n) {
        (*n)--;
        /* the travelling reference is now ours: give back the sender's (the total stays). Not
         * below zero: two senders of one socket share one inflight_slot. */
        uint32_t *sent = from >= 0 && from < SLIP_PROC_MAX ? (tcp ? &proc_tcp(s, from)[sock] : &proc_udp(s, from)[sock])
                                                           : NULL;
        if (sent && __atomic_load_n(sent, __ATOMIC_RELAXED))
            __atomic_sub_fetch(sent, 1, __ATOMIC_RELAXED);
        __atomic_sub_fetch(tcp ? &s->t.ts[sock].refs : &s->t.us[sock].refs, 1, __ATOMIC_ACQ_REL);
    }
    stack_unlock(s);
}

void slip_sock__set_ino(struct slip_stack *s, bool tcp, int sock, uint64_t ino)
{
    __atomic_store_n(tcp ? &s->t.ts[sock].ino : &s->t.us[sock].ino, ino, __ATOMIC_RELEASE);
}

int slip_sock__by_ino(struct slip_stack *s, uint64_t ino, bool *tcp)
{
    if (!ino)
        return -ENOENT;
    for (uint32_t i = 0; i < slip_socktab__tcp_high(&s->t); i++)
        if (__atomic_load_n(&s->t.ts[i].ino, __ATOMIC_ACQUIRE) == ino) {
            *tcp = true;
            return i;
        }
    for (uint32_t i = 0; i < slip_socktab__udp_high(&s->t); i++)
        if (__atomic_load_n(&s->t.us[i].ino, __ATOMIC_ACQUIRE) == ino) {
            *tcp = false;
            return i;
        }
    return -ENOENT;
}

int slip_proc__reserve(struct slip_stack *s, bool copy_refs)
{
    if (s->proc < 0)
        return -1;
    struct slip_procs *t = &s->shm->procs;
    int c = slip_procs__claim(t, SLIP_PROC_RESERVED);
    if (c < 0)
        return -1;
    stack_lock(s);      /* a consistent copy of what this process holds */
    /* Reservation sockets are never close-on-exec: any child gets a copy. Slots at and above
     * the high water never had one (nor a reference): their words are left untouched. */
    uint32_t th = slip_socktab__tcp_high(&s->t), uh = slip_socktab__udp_high(&s->t);
    memcpy(proc_held(s, c), proc_held(s, s->proc), SLIP_ALIGN_UP((size_t)th, 64) / 8);
    stack_unlock(s);
    if (copy_refs) {
        const uint32_t *mt = proc_tcp(s, s->proc), *mu = proc_udp(s, s->proc);
        for (uint32_t i = 0; i < th; i++) {
            uint32_t n = __atomic_load_n(&mt[i], __ATOMIC_RELAXED);
            if (n)
                slip_sock__ref_in(s, c, true, (int)i, (int)n);
        }
        for (uint32_t i = 0; i < uh; i++) {
            uint32_t n = __atomic_load_n(&mu[i], __ATOMIC_RELAXED);
            if (n)
                slip_sock__ref_in(s, c, false, (int)i, (int)n);
        }
    }
    return c;
}

/* Lock held: the references slot c sent away in UNIX socket messages that nobody received yet
 * leave its count and travel on their own (inflight_slot -1). A fd in flight keeps its file
 * alive after its sender exits or dies, as the kernel's does; dropping them with the slot closed
 * the connection of an acceptor's last hand-over before a loaded worker took it (ENOTCONN in
 * the worker). One never received (the UNIX socket closed with it unread) keeps the socket open
 * until the stack goes. */
static void proc_detach_inflight(struct slip_stack *s, uint32_t *count, uint32_t inflight, int32_t *from, int c)
{
    STACK_ASSERT_LOCKED(s);
    if (!inflight || *from != c)
        return;
    uint32_t n = __atomic_load_n(count, __ATOMIC_RELAXED);
    __atomic_sub_fetch(count, SLIP_MIN(n, inflight), __ATOMIC_RELAXED);
    *from = -1;
}

/* Gives back everything slot c holds; closes the sockets whose last reference it was. */
static void proc_release_slot(struct slip_stack *s, int c)
{
    /* Only slots below the tables' high water can hold a count (see slip_proc__reserve). */
    uint32_t th = slip_socktab__tcp_high(&s->t), uh = slip_socktab__udp_high(&s->t);
    uint32_t *pt = proc_tcp(s, c), *pu = proc_udp(s, c);
    stack_lock(s);
    for (uint32_t i = 0; i < th; i++)
        proc_detach_inflight(s, &pt[i], s->t.ts[i].inflight, &s->t.ts[i].inflight_slot, c);
    for (uint32_t i = 0; i < uh; i++)
        proc_detach_inflight(s, &pu[i], s->t.us[i].inflight, &s->t.us[i].inflight_slot, c);
    stack_unlock(s);
    for (uint32_t i = 0; i < th; i++) {
        uint32_t n = __atomic_exchange_n(&pt[i], 0, __ATOMIC_ACQ_REL);
        if (n && __atomic_sub_fetch(&s->t.ts[i].refs, n, __ATOMIC_ACQ_REL) == 0) {
            slip_sock__set_ino(s, true, (int)i, 0);
            slip_tcp__close(s, (int)i);
        }
    }
    for (uint32_t i = 0; i < uh; i++) {
        uint32_t n = __atomic_exchange_n(&pu[i], 0, __ATOMIC_ACQ_REL);
        if (n && __atomic_sub_fetch(&s->t.us[i].refs, n, __ATOMIC_ACQ_REL) == 0) {
            slip_sock__set_ino(s, false, (int)i, 0);
            slip_udp__close(s, (int)i);
        }
    }
    stack_lock(s);
    tcp_zc_release(s, c);
    slip_socktab__proc_clear(&s->t, c);
    slip_procs__free(&s->shm->procs, c);
    stack_unlock(s);
}

void slip_proc__started(struct slip_stack *s, int slot, pid_t pid)
{
    if (slot < 0)
        return;
    if (pid == 0) {             /* in the fork child */
        pid_refresh();
        slip_procs__bind(&s->shm->procs, slot, g_stack_pid);
        s->proc = slot;
    } else if (pid > 0) {
        slip_procs__bind(&s->shm->procs, slot, pid);
    } else {
        proc_release_slot(s, slot);
    }
}

uint32_t slip_proc__held(struct slip_stack *s, bool tcp, int sock)
{
    if (s->proc < 0)
        return 0;
    return __atomic_load_n(tcp ? &proc_tcp(s, s->proc)[sock] : &proc_udp(s, s->proc)[sock], __ATOMIC_RELAXED);
}

int slip_proc__slot(struct slip_stack *s)
{
    return s->proc;
}

static int proc_reap_now(struct slip_stack *s, slip_time_t now)
{
    s->reap_next = now + 100 * SLIP_MSEC;
    int n = 0;
    for (int i = 0; i < SLIP_PROC_MAX; i++) {
        if (i == s->proc || !slip_procs__take_dead(&s->shm->procs, i))
            continue;
        proc_release_slot(s, i);
        __atomic_add_fetch(&s->shm->procs.reaped, 1, __ATOMIC_RELAXED);
        n++;
    }
    return n;
}

int slip_stack__reap(struct slip_stack *s)
{
    slip_time_t now = slip_stack__now();
    if (!s->reap_ok || now < s->reap_next)
        return 0;
    return proc_reap_now(s, now);
}

static unsigned tcp_unfinished(struct slip_stack *s)
{
    unsigned n = 0;
    stack_lock(s);
    uint32_t high = tcp_shared__high(s->tcp);
    for (uint32_t i = 0; i < high; i++)
        n += tcp_conn__unfinished(s->tcp, i);
    stack_unlock(s);
    return n;
}

/* After this process gave its slot back: another process (alive) holds one. */
static bool others_carry_on(struct slip_stack *s)
{
    for (int i = 0; i < SLIP_PROC_MAX; i++)
        if (__atomic_load_n(&s->shm->procs.p[i].pid, __ATOMIC_ACQUIRE) != SLIP_PROC_FREE &&
            !slip_procs__dead(&s->shm->procs, i))
            return true;
    return false;
}

bool slip_stack__held_here(struct slip_stack *s)
{
    return __atomic_load_n(&s->shm->lock.owner_pid, __ATOMIC_ACQUIRE) == (uint32_t)g_stack_pid;
}

void slip_stack__exit(struct slip_stack *s, int linger_ms, void (*tick)(struct slip_stack *s))
{
    /* exit() from inside the stack (a signal handler, another thread's abort): touch nothing. */
    if (slip_stack__held_here(s))
        return;
    /* Frames a deferring thread left on the TX rings wait for the progress thread's kick, and
     * the exit stopped that thread (preload_quiesce): kick them here, or the last process's
     * final reply and close would die with the stack (test_tx_defer). */
    slip_stack__tx_defer(s, false);
    stack_lock(s);
    tx_done(s);                 /* not deferring any more: kicks now */
    stack_unlock(s);
    if (s->proc >= 0) {
        proc_release_slot(s, s->proc);
        s->proc = -1;
    }
    if (s->reap_ok)
        proc_reap_now(s, slip_stack__now());
    /* The last process: the stack dies with it, so deliver what was written first, as the
     * kernel would after the process is gone (bounded: the kernel's orphans may take minutes).
     * A program that joins meanwhile (a server restarted at once) takes the stack over. */
    slip_time_t end = slip_stack__now() + (slip_time_t)linger_ms * SLIP_MSEC;
    while (!others_carry_on(s) && tcp_unfinished(s) && slip_stack__now() < end) {
        slip_stack__wait(s, 10);
        if (tick)
            tick(s);
    }
}

/* "stack IFS uid=U procs=N index=K name=NAME", then one line per process of the stack: "proc PID
 * COMM slot=K tcp=N udp=N" (sockets it holds). The stack lock is held only to copy the slot
 * table: counting a slot's sockets walks every socket of the tables (and the per-process counts
 * are atomics that move without the lock anyway), and reading /proc and printing can block; none
 * of that may stall the datapath. */
void slip_stack__dump_procs(struct slip_stack *s, FILE *f)
{
    struct stat st;
    uid_t owner = fstat(s->arena.memfd, &st) == 0 ? st.st_uid : (uid_t)-1;
    fprintf(f, "stack");
    for (unsigned i = 0; i < s->nifs; i++)
        fprintf(f, "%s%s", i ? "," : " ", s->ifs[i].name);
    fprintf(f, " uid=%d procs=%u index=%u name=%s\n", (int)owner, procs_live(s), s->index,
            s->shm->name[0] && memchr(s->shm->name, 0, sizeof(s->shm->name)) ? s->shm->name : "-");
    int32_t pids[SLIP_PROC_MAX];
    stack_lock(s);
    for (int k = 0; k < SLIP_PROC_MAX; k++)
        pids[k] = __atomic_load_n(&s->shm->procs.p[k].pid, __ATOMIC_ACQUIRE);
    uint32_t th = slip_socktab__tcp_high(&s->t), uh = slip_socktab__udp_high(&s->t);
    stack_unlock(s);
    for (int k = 0; k < SLIP_PROC_MAX; k++) {
        int32_t pid = pids[k];
        if (pid <= 0)
            continue;
        unsigned nt = 0, nu = 0;
        const uint32_t *pt = proc_tcp(s, k), *pu = proc_udp(s, k);
        for (unsigned i = 0; i < th; i++)
            nt += __atomic_load_n(&pt[i], __ATOMIC_RELAXED) != 0;
        for (unsigned i = 0; i < uh; i++)
            nu += __atomic_load_n(&pu[i], __ATOMIC_RELAXED) != 0;
        char path[64], comm[64] = "?";
        snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
        FILE *c = fopen(path, "re");
        if (c) {
            if (fgets(comm, sizeof(comm), c))
                comm[strcspn(comm, "\n")] = 0;
            fclose(c);
        }
        for (char *p = comm; *p; p++)
            if (*p == ' ')
                *p = '_';
        fprintf(f, "proc %d %s slot=%d tcp=%u udp=%u\n", (int)pid, comm[0] ? comm : "?", k, nt, nu);
    }
}
