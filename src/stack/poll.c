/* The poll loop: frames from the RX rings through ip/ to udp/ and tcp/, timers, and the TX
 * policy (when a send kicks the TX ring at once and when its frames wait for the next poll). The
 * poll loop is the one place that reads the clock; protocol code gets `now` from it. */
#include "stack/stack_int.h"

/* IPv6 (issue 16): UDP, TCP and the ICMPv6 errors quoting either. */
static void rx6_deliver(struct slip_stack *s, slip_idx_t p, uint32_t ifindex)
{
    struct ip6_rx rx;
    if (!ip6_input(&s->env, p, ifindex, &rx))
        return;
    switch (rx.ip.proto) {
    case WIRE_IPPROTO_UDP:
        udp6_input(&s->env, s->udp, &rx);
        return;
    case WIRE_IPPROTO_TCP:
        tcp6_input(&s->env, s->tcp, &rx);
        return;
    case WIRE_IPPROTO_ICMPV6: {
        struct ip6_icmp_err e;
        if (ip6_icmp__input(&s->env, &rx, &e)) {
            if (e.q.ip.proto == WIRE_IPPROTO_UDP)
                udp6_icmp_error(s->udp, &e);
            else if (e.q.ip.proto == WIRE_IPPROTO_TCP)
                tcp6_icmp_error(&s->env, s->tcp, &e);
        }
        break;
    }
    default:
        s->shm->c.rx_other_proto++;
        break;
    }
    pkt__free_chain(&s->pool, rx.pkt);
}

static void rx_deliver(struct slip_stack *s, slip_idx_t p, uint32_t ifindex)
{
    struct ip_rx rx;
    int r = ip_input(&s->env, p, ifindex, &rx);
    if (SLIP_UNLIKELY(r == IP_INPUT_IPV6)) {
        rx6_deliver(s, p, ifindex);
        return;
    }
    if (!r)
        return;
    switch (rx.ip.proto) {
    case WIRE_IPPROTO_UDP:
        udp_input(&s->env, s->udp, &rx);
        return;
    case WIRE_IPPROTO_TCP:
        tcp_input(&s->env, s->tcp, &rx);
        return;
    case WIRE_IPPROTO_ICMP: {
        struct ip_icmp_err e;
        if (ip_icmp__input(&s->env, &rx, &e)) {
            if (e.q.ip.proto == WIRE_IPPROTO_TCP)
                tcp_icmp_error(&s->env, s->tcp, &e);
            else
                udp_icmp_error(s->udp, &e);
        }
        break;
    }
    default:
        s->shm->c.rx_other_proto++;
        break;
    }
    pkt__free_chain(&s->pool, rx.pkt);
}

/* Lock held, before a kick: what sends held back for it (autocork) goes out now. */
void uncork_all(struct slip_stack *s)
{
    STACK_ASSERT_LOCKED(s);
    for (uint32_t k = 0; k < s->shm->ncork && k < s->t.max_conns; k++)
        if (s->t.cork[k] < s->t.max_conns)
            tcp_conn__uncork(&s->env, s->tcp, s->t.cork[k]);
    s->shm->ncork = 0;
}

/* Lock held. */
static slip_time_t poll_locked(struct slip_stack *s)
{
    STACK_ASSERT_LOCKED(s);
    struct netdev_frame f[256];
    slip_time_t now = slip_stack__now();
    unsigned burst = SLIP_MIN(s->cfg.burst, SLIP_ARRAY_SIZE(f));

    env_refresh(s, now);
    uint64_t udp_before = s->udp->c.rx_datagrams;
    s->shm->c.polls++;
    s->shm->last_poll = now;
    /* The frame cache back between its marks (a group lock only when it is outside them). */
    group_balance(s);
    /* Frames a deferring thread left on the TX rings go first: on veth the peer's answer (an
     * ACK, a RST) comes back inside the kick, and this poll then sees it, as the kernel's socket
     * would have by the time its send() returned. */
    bool corked = s->shm->ncork != 0;  /* their segments are built now, not yet on a ring */
    uncork_all(s);
    for (unsigned i = 0; i < s->nifs; i++)
        for (unsigned q = 0; q < s->ifs[i].nq; q++)
            if (corked || netdev__tx_queued(s->ifs[i].dev[q])) {
                ip_output__flush(&s->env);
                i = s->nifs;
                break;
            }
    if (now >= s->ctl_next) {
        ctl__process(s->ctl);
        s->ctl_next = now + CTL_POLL_INTERVAL;
    }
    /* Within the burst TCP owes one ACK per run of a connection's contiguous segments, sent at
     * the burst's end (tcp__burst_end); a list a killed holder left is served first. */
    tcp__burst_end(&s->env, s->tcp);
    s->env.rx_burst = true;
    for (unsigned i = 0; i < s->nifs; i++) {
        struct stack_iface *fc = &s->ifs[i];
        for (unsigned q = 0; q < fc->nq; q++) {
            /* Each frame leaves the RX ring as its turn comes: a process killed in this loop (a
             * busy stream's ACKs make long bursts, each sending) leaves the rest on the ring for
             * whoever takes the lock over, where a burst taken off at once lost up to 63. */
            unsigned n = netdev__rx_peek(fc->dev[q], f, burst);
            if (!n)
                continue;
            s->shm->c.rx_bursts++;
            s->shm->c.rx_frames += n;
            for (unsigned k = 0; k < n; k++) {
                netdev__rx_release(fc->dev[q], 1);
                slip_idx_t p = pkt__adopt(&s->pool, f[k].addr, f[k].len);
                pkt__meta(&s->pool, p)->stamp = s->env.now;
                rx_deliver(s, p, fc->ifindex);
            }
        }
    }
    s->env.rx_burst = false;
    tcp__burst_end(&s->env, s->tcp);
    slip_time_t next = tcp_timer__poll(&s->env, s->tcp);
    next = SLIP_MIN(next, ip_neigh__service(&s->env));
    if (s->ip->neigh6_pending)
        next = SLIP_MIN(next, ip6_neigh__service(&s->env));
    /* The engine's wake list tells which connections had an event: count them per connection,
     * which is what edge-triggered epoll reports. */
    uint64_t asleep = others_asleep(s);
    if (asleep && s->udp->c.rx_datagrams != udp_before)
        note_sleeping_holders(s, false, 0, asleep);
    for (slip_idx_t w; (w = tcp__next_wakeup(s->tcp)) != SLIP_NIL;) {
        s->shm->c.tcp_wakeups++;
        if (w < s->t.max_conns && asleep)
            note_sleeping_holders(s, true, w, asleep);
        if (w < s->t.max_conns) {
            /* The bump is ordered before the look at the waiters (both sequentially
             * consistent): a waiter counted itself before it read the generation it sleeps on,
             * so either we see it here or its futex wait sees the new generation. */
            __atomic_add_fetch(&s->t.ts[w].evgen, 1, __ATOMIC_SEQ_CST);
            if (__atomic_load_n(&s->t.ts[w].waiters, __ATOMIC_SEQ_CST))
                syscall(SYS_futex, &s->t.ts[w].evgen, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
            /* A listener with news (a connection to accept) wakes this process's epoll sets
             * that hold only listeners and sleep on the accept bell (preload wait.c). */
            if (__atomic_load_n(&s->accept_sleepers, __ATOMIC_SEQ_CST) &&
                tcp_conn__state(s->tcp, w) == TCPS_LISTEN)
                slip_stack__ring_accept_bell(s);
        }
    }
    tcp_res_reap(s);
    for (unsigned i = 0; i < s->nifs; i++)
        for (unsigned q = 0; q < s->ifs[i].nq; q++)
            next = SLIP_MIN(next, netdev__deadline(s->ifs[i].dev[q]));  /* frames a device holds */
    next = SLIP_MIN(next, ip_reass__expire(&s->env));
    uncork_all(s);
    ip_output__flush(&s->env);
    for (unsigned i = 0; i < s->nifs; i++)
        for (unsigned q = 0; q < s->ifs[i].nq; q++)
            netdev__complete(s->ifs[i].dev[q]);
    /* While a neighbour is being resolved, watch the kernel's table closely. */
    if (s->ip->neigh_pending || s->ip->neigh6_pending) {
        s->ctl_next = SLIP_MIN(s->ctl_next, now + 100 * SLIP_USEC);
        next = SLIP_MIN(next, s->ctl_next);
    }
    return next;
}

/* Lock held: polls, then lets the lock go. What the poll delivered may be for a thread asleep on
 * fds whose readiness it consumed (the AF_XDP RX ring): this process's sleepers get the doorbell,
 * other processes' their bells (rung after the unlock: the lock is not held over a syscall). */
static slip_time_t poll_and_unlock(struct slip_stack *s)
{
    STACK_ASSERT_LOCKED(s);
    uint64_t before = s->shm->c.rx_frames + s->shm->c.tcp_wakeups;
    slip_time_t next = poll_locked(s);
    s->next_deadline = next;
    if (s->shm->c.rx_frames + s->shm->c.tcp_wakeups != before &&
        __atomic_load_n(&s->shm->sleepers, __ATOMIC_ACQUIRE))
        ring_doorbell(s);
    uint64_t ring = s->ring_procs;
    s->ring_procs = 0;
    stack_unlock(s);
    ring_procs(s, ring);
    return next;
}

slip_time_t slip_stack__poll(struct slip_stack *s)
{
    stack_lock(s);
    return poll_and_unlock(s);
}

/* Lock held: when frames wait on an RX ring, a poll takes them in first, and the lock is held
 * again on return. A send must see the ACKs and window updates the peer already sent, as the
 * kernel's softirq would have processed them before write() runs: else data can go past a
 * window the peer has just shrunk (packetdrill tcp-info-rwnd-limited). */
void rx_catch_up(struct slip_stack *s)
{
    STACK_ASSERT_LOCKED(s);
    for (unsigned i = 0; i < s->nifs; i++)
        for (unsigned q = 0; q < s->ifs[i].nq; q++)
            if (netdev__rx_pending(s->ifs[i].dev[q])) {
                poll_and_unlock(s);
                stack_lock(s);
                env_refresh(s, slip_stack__now());
                return;
            }
}

/* ---- deferred TX kicks ----
 * A kick (sendto on the AF_XDP socket) is a syscall, and on veth in copy mode it also runs the
 * peer's receive softirq. A thread working through what epoll_wait/poll returned leaves the
 * frames of its sends on the TX ring, and the next poll (its next wait, a blocking call, any
 * stack poll) kicks them all at once. Nothing waits unbounded: a thread defers only while this
 * process's progress thread is due within TX_DEFER_BOUND, and while deferral is in use the
 * progress thread comes back at least that often and kicks what was left. */
#define TX_DEFER_BOUND (3 * SLIP_MSEC)
#define TX_DEFER_HOT SLIP_SEC           /* how long after the last deferral it keeps doing so */
#define TX_DEFER_KICK_AT 32             /* ring fill that kicks at once (copy mode: 32 a kick) */
#define PROGRESS_AFTER_POLL (2 * SLIP_MSEC)     /* init.c's progress thread naps after its poll */

static __thread bool t_tx_defer;        /* this thread handles events a wait returned */
static __thread bool t_progress;        /* this thread is the progress thread */
static slip_time_t g_progress_due;      /* when the progress thread looks again ... */
static pid_t g_progress_pid;            /* ... in this process (not a fork child) */
static slip_time_t g_defer_wanted;      /* when a thread last wanted to defer */

void slip_stack__tx_defer(struct slip_stack *s, bool on)
{
    (void)s;
    t_tx_defer = on;
}

/* Lock held: this thread's frames may wait for the next poll's kick (it handles events a wait
 * returned, and this process's progress thread is due soon). */
bool tx_deferring(struct slip_stack *s)
{
    STACK_ASSERT_LOCKED(s);
    if (!t_tx_defer)
        return false;
    slip_time_t now = s->env.now;
    __atomic_store_n(&g_defer_wanted, now, __ATOMIC_RELAXED);
    /* Only while the progress thread is due soon; otherwise the caller kicks now (and the
     * progress thread, seeing g_defer_wanted, shortens its sleeps). */
    return __atomic_load_n(&g_progress_pid, __ATOMIC_ACQUIRE) == g_stack_pid &&
           __atomic_load_n(&g_progress_due, __ATOMIC_ACQUIRE) <= now + TX_DEFER_BOUND;
}

/* Lock held, after a send, receive or close: kick now, or leave the frames for the next poll. */
void tx_done(struct slip_stack *s)
{
    STACK_ASSERT_LOCKED(s);
    if (tx_deferring(s)) {
        ip_output__push(&s->env, TX_DEFER_KICK_AT);
        return;
    }
    uncork_all(s);
    ip_output__flush(&s->env);
}

static void progress_due(slip_time_t at)
{
    __atomic_store_n(&g_progress_due, at, __ATOMIC_RELEASE);
    __atomic_store_n(&g_progress_pid, g_stack_pid, __ATOMIC_RELEASE);
}

static bool defer_hot(slip_time_t now)
{
    return now - __atomic_load_n(&g_defer_wanted, __ATOMIC_RELAXED) < TX_DEFER_HOT;
}

/* Progress thread: kicks frames that deferring threads left on the TX rings. */
static void tx_kick_left(struct slip_stack *s)
{
    bool any = __atomic_load_n(&s->shm->ncork, __ATOMIC_RELAXED) != 0;
    for (unsigned i = 0; i < s->nifs && !any; i++)
        for (unsigned q = 0; q < s->ifs[i].nq && !any; q++)
            any = netdev__tx_queued(s->ifs[i].dev[q]) != 0;
    if (!any || !slip_lock__try(&s->shm->lock))
        return;     /* the lock holder kicks, or leaves them for our next round */
    stack_locked_by_us(s);
    uncork_all(s);
    ip_output__flush(&s->env);
    stack_unlock(s);
}

int slip_stack__poll_if_idle(struct slip_stack *s, slip_time_t idle_ns)
{
    slip_time_t now = slip_stack__now();
    t_progress = true;
    if (now - s->shm->last_poll < idle_ns) {
        int ms = (int)((idle_ns - (now - s->shm->last_poll)) / SLIP_MSEC) + 1;
        if (defer_hot(now)) {
            tx_kick_left(s);
            ms = SLIP_MIN(ms, (int)(TX_DEFER_BOUND / SLIP_MSEC) - 1);
        }
        progress_due(now + (slip_time_t)ms * SLIP_MSEC);
        return ms;
    }
    if (!slip_lock__try(&s->shm->lock)) {
        progress_due(now + SLIP_MSEC);
        return 1;
    }
    stack_locked_by_us(s);
    poll_and_unlock(s);
    return 0;
}

int slip_stack__wait_fds(struct slip_stack *s, int *fds, int max)
{
    int n = 0;
    if (s->doorbell >= 0 && n < max)
        fds[n++] = s->doorbell;
    if (s->peer_bell >= 0 && n < max)
        fds[n++] = s->peer_bell;
    for (unsigned i = 0; i < s->nifs; i++)
        for (unsigned q = 0; q < s->ifs[i].nq && n < max; q++)
            fds[n++] = xsk_port__fd(s->ifs[i].ports[q]);
    if (n < max)
        fds[n++] = ctl__fd(s->ctl);
    return n;
}

int slip_stack__timeout_ms(struct slip_stack *s, int timeout_ms)
{
    slip_time_t next = s->next_deadline, now = slip_stack__now();
    int t = timeout_ms;
    if (next != SLIP_TIME_NEVER) {
        slip_time_t d = next > now ? (next - now + SLIP_MSEC - 1) / SLIP_MSEC : 0;
        if (t < 0 || (slip_time_t)t > d)
            t = (int)d;
    }
    if (t_progress) {
        /* The progress thread about to sleep after its poll: while threads defer kicks it
         * only naps (see tx_done); otherwise tell them how long it will be away. */
        if (defer_hot(now))
            t = 0;
        progress_due(t < 0 ? SLIP_TIME_NEVER : now + (slip_time_t)t * SLIP_MSEC + PROGRESS_AFTER_POLL);
    }
    return t;
}

uint32_t slip_stack__ctl_seq(struct slip_stack *s)
{
    return __atomic_load_n(&s->ctl_t->seq, __ATOMIC_ACQUIRE);
}

bool slip_stack__routes_via_us(struct slip_stack *s, be32 dst)
{
    struct ctl_nexthop nh;
    stack_lock(s);
    bool ok = ctl_tables__route(s->ctl_t, dst, &nh) == 0 && nh.type == RTN_UNICAST;
    stack_unlock(s);
    if (!ok)
        return false;
    for (unsigned i = 0; i < s->nifs; i++)
        if (s->ifs[i].ifindex == nh.ifindex)
            return true;
    return false;
}

uint32_t slip_stack__routes_via_us6(struct slip_stack *s, const struct wire_ipv6_addr *dst, uint32_t oif)
{
    struct ctl_nexthop6 nh;
    stack_lock(s);
    bool ok = ctl_tables__route6(s->ctl_t, dst, oif, &nh) == 0 && nh.type == RTN_UNICAST;
    stack_unlock(s);
    for (unsigned i = 0; ok && i < s->nifs; i++)
        if (s->ifs[i].ifindex == nh.ifindex)
            return nh.ifindex;
    return 0;
}

bool slip_stack__owns_addr6(struct slip_stack *s, const struct wire_ipv6_addr *addr, uint32_t scope)
{
    static const struct wire_ipv6_addr any;
    if (memcmp(addr, &any, sizeof(any)) == 0)
        return true;
    bool ok = false;
    stack_lock(s);
    for (unsigned i = 0; i < s->nifs && !ok; i++)
        ok = (!scope || scope == s->ifs[i].ifindex) && ctl_tables__local6(s->ctl_t, addr, s->ifs[i].ifindex);
    stack_unlock(s);
    return ok;
}

bool slip_stack__owns_addr(struct slip_stack *s, be32 addr)
{
    if (addr == 0)
        return true;
    bool ok = false;
    stack_lock(s);
    for (unsigned i = 0; i < s->nifs && !ok; i++)
        ok = ctl_tables__is_local(s->ctl_t, addr, s->ifs[i].ifindex);
    stack_unlock(s);
    return ok;
}

int slip_stack__wait(struct slip_stack *s, int timeout_ms)
{
    slip_time_t next = slip_stack__poll(s);
    slip_time_t now = slip_stack__now();
    slip_time_t wait = timeout_ms < 0 ? SLIP_TIME_NEVER : (slip_time_t)timeout_ms * SLIP_MSEC;
    if (next != SLIP_TIME_NEVER)
        wait = SLIP_MIN(wait, next > now ? next - now : 0);
    /* To the nanosecond (epoll_pwait2): a deadline rounded up to the next millisecond held
     * paced data back that long. A BBR sender at ~150 MB/s is due to send every ~10 us; only
     * the next incoming ACK, not its deadline, woke it. */
    struct timespec ts = { (time_t)(wait / SLIP_SEC), (long)(wait % SLIP_SEC) };
    struct epoll_event ev[8];
    int n = epoll_pwait2(s->epfd, ev, 8, wait == SLIP_TIME_NEVER ? NULL : &ts, NULL);
    if (n < 0 && errno != EINTR)
        return -errno;
    slip_stack__poll(s);
    return n < 0 ? 0 : n;
}
