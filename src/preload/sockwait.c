/* Blocking socket calls of the POSIX layer: waiting until an accelerated socket is ready, with
 * Linux's answers to signals (restart or EINTR), and many threads of one process waiting on one
 * stack (one poller on the stack's fds, the others on socket futexes). */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/sandbox.h"
#include "preload/preload.h"
#include "stack/stack.h"

/* Linux restarts a blocking socket call without a timeout (SO_RCVTIMEO/SO_SNDTIMEO) that a
 * signal handler interrupted when the handler was installed with SA_RESTART; with a timeout, or
 * without SA_RESTART, the call fails with EINTR (signal.c tells which kind of handler ran). */
static bool handlers_all_restart(void);

/* The handler that interrupted us is known when it was installed through our sigaction; one
 * installed before the library loaded (or by libc internally) falls back to the scan. */
static bool restartable(void)
{
    int r = preload_signal_restart();
    return r == 1 || (r == 0 && handlers_all_restart());
}

/* For handlers we did not see installed: restart when every handler installed has SA_RESTART. */
static bool handlers_all_restart(void)
{
    bool any = false;
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction sa;
        if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &sa) < 0)
            continue;
        void (*h)(int) = sa.sa_handler;
        if (!(sa.sa_flags & SA_SIGINFO) && (h == SIG_DFL || h == SIG_IGN))
            continue;
        if (!(sa.sa_flags & SA_RESTART))
            return false;
        any = true;
    }
    return any;
}

/* ---- many threads blocked on one stack ----
 * A thread blocked in a socket call sleeps until the stack has something for it. Sleeping on
 * the stack's wait fds (the AF_XDP sockets) is right for one thread, but with many (a client
 * with a thread per connection, a thread-per-connection server) every received frame woke every
 * one of them to poll the stack and fight for its lock, to find in most cases that the frame was
 * for someone else. So one blocked thread per process, the poller, sleeps on the wait fds and
 * polls; the others (TCP, no extra fd) sleep on their socket's futex word, which the poll that
 * delivers an event for that socket bumps and wakes (src/stack/poll.c). When the poller leaves it bumps
 * g_poller_gen and wakes one futex sleeper, which waits on that word too (futex_waitv) and takes
 * the poller's place. Without futex_waitv (Linux < 5.16) every thread sleeps on the fds. */
static uint32_t g_poller;           /* a thread of this process is the poller */
static uint32_t g_futex_sleepers;   /* threads of this process asleep on a socket futex */
static uint32_t g_poller_gen;       /* bumped when the poller leaves (private futex word) */
static int g_waitv = -1;            /* futex_waitv works: -1 not known yet, 0 no, 1 yes */

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif

/* A fork child has only the thread that forked: whatever the parent's threads were doing
 * (poller, futex sleepers) is not the child's. */
void preload_block_atfork_child(void)
{
    g_poller = 0;
    g_futex_sleepers = 0;
}

static void poller_leave(void)
{
    __atomic_store_n(&g_poller, 0, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&g_futex_sleepers, __ATOMIC_SEQ_CST)) {
        __atomic_add_fetch(&g_poller_gen, 1, __ATOMIC_SEQ_CST);
        syscall(SYS_futex, &g_poller_gen, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
}

/* Sleeps on the event words of socks[0..m) (with the generations read in gens) and on
 * g_poller_gen (pgen), for at most ms. 0 woken, timed out or a word already changed; -EINTR;
 * -ENOSYS (no futex_waitv). */
static int futex_sleep(struct slip_stack *s, const int *socks, const uint32_t *gens, int m,
                       uint32_t pgen, int ms)
{
    struct futex_waitv w[PRELOAD_FUTEX_MAX + 1];
    for (int i = 0; i < m; i++)
        w[i] = (struct futex_waitv){ .val = gens[i], .flags = FUTEX_32,
                                     .uaddr = (uintptr_t)slip_sock__tcp_evgen_word(s, socks[i]) };
    w[m] = (struct futex_waitv){ .val = pgen, .uaddr = (uintptr_t)&g_poller_gen,
                                 .flags = FUTEX_32 | FUTEX_PRIVATE_FLAG };
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    long r = syscall(SYS_futex_waitv, w, (unsigned)m + 1u, 0u, &t, CLOCK_MONOTONIC);
    if (r >= 0)
        return 0;
    if (errno == ENOSYS)
        return -ENOSYS;
    return errno == EINTR ? -EINTR : 0;     /* EAGAIN: a word changed first; ETIMEDOUT */
}

bool preload_futex_usable(void)
{
    /* futex_waitv is not on sandboxes' lists (futex is): a filtered thread polls instead. */
    return __atomic_load_n(&g_waitv, __ATOMIC_RELAXED) != 0 && !slip_sandbox__limited();
}

void preload_poller_leave(void)
{
    poller_leave();
}

int preload_futex_round(struct slip_stack *s, const int *socks, int m, bool (*ready)(void *),
                        void *arg, int left_ms)
{
    /* Counted before reading the words and before the last look: a poller that leaves from
     * now on wakes one of us, a poll that delivers for one of socks from now on bumps its
     * generation. */
    __atomic_add_fetch(&g_futex_sleepers, 1, __ATOMIC_SEQ_CST);
    uint32_t pgen = __atomic_load_n(&g_poller_gen, __ATOMIC_SEQ_CST);
    uint32_t zero = 0;
    if (__atomic_compare_exchange_n(&g_poller, &zero, 1, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
        __atomic_sub_fetch(&g_futex_sleepers, 1, __ATOMIC_SEQ_CST);
        return 1;
    }
    uint32_t gens[PRELOAD_FUTEX_MAX];
    for (int i = 0; i < m; i++)
        slip_sock__tcp_waiters(s, socks[i], 1);
    for (int i = 0; i < m; i++)
        gens[i] = __atomic_load_n(slip_sock__tcp_evgen_word(s, socks[i]), __ATOMIC_SEQ_CST);
    int fr = 0;
    if (!ready(arg)) {
        /* The callers forgot the handlers that ran before their call started; one that ran
         * since (while they polled the stack, or just now) interrupts the call here as it would
         * have interrupted the kernel's sleep: sleeping on would miss it (recv blocked on). */
        if (preload_signal_restart()) {
            fr = -EINTR;
        } else {
            int ms = left_ms < 0 || left_ms > PRELOAD_MAX_SLEEP_MS ? PRELOAD_MAX_SLEEP_MS : left_ms;
            fr = futex_sleep(s, socks, gens, m, pgen, ms);
            __atomic_store_n(&g_waitv, fr == -ENOSYS ? 0 : 1, __ATOMIC_RELAXED);
        }
    }
    for (int i = 0; i < m; i++)
        slip_sock__tcp_waiters(s, socks[i], -1);
    __atomic_sub_fetch(&g_futex_sleepers, 1, __ATOMIC_SEQ_CST);
    return fr == -EINTR ? -EINTR : 0;
}

void preload_poller_cleanup(void *poller)
{
    if (*(bool *)poller)
        poller_leave();
}

struct block_look {
    struct pfd *p;
    unsigned want;
};

static bool block_ready(void *arg)
{
    struct block_look *l = arg;
    return (pfd_poll(l->p) & (l->want | EPOLLERR | EPOLLHUP)) != 0;
}

/* A handler ran during this call outside the kernel's sleep (while the stack was polled, a
 * spin, or between the last look and the sleep): the kernel's call would have been interrupted
 * by it. true: fail with EINTR; false: go on (nothing ran, or the call restarts, and the record
 * starts over). The record used to be cleared before each sleep, which forgot such a handler and
 * blocked on: eintr_no_restart hung now and then on a loaded machine. */
static bool interrupted(int timeout_ms)
{
    if (!preload_signal_restart())
        return false;
    if (timeout_ms >= 0 || !restartable())
        return true;
    preload_signal_reset();
    return false;
}

/* *poller: this thread took the poller's place (the caller gives it up, also when cancelled). */
static int block_loop(struct pfd *p, unsigned want, int timeout_ms, int extra_fd, bool *poller)
{
    struct slip_stack *s = pfd_stack(p);
    /* Another thread may close (and reuse) the fd while this one sleeps: never go on with a
     * socket the fd no longer names, it could be someone else's. */
    const uint8_t kind = p->kind;
    const int sock = p->sock;
    /* The poller's place is the process stack's: a thread stack's sleepers watch its fds. */
    const bool may_futex = kind == PFD_TCP && extra_fd < 0 && p->st == 0;
    uint64_t start = preload_mono_us(), spun = 0;
    uint64_t end = timeout_ms < 0 ? UINT64_MAX : start + (uint64_t)timeout_ms * 1000u;
    int rc = 0;
    preload_signal_reset();     /* handlers that ran before the call are not its business */
    for (;;) {
        if (p->kind != kind || p->sock != sock || pfd_stack(p) != s) {
            rc = -EBADF;
            break;
        }
        slip_stack__poll(s);
        if (pfd_poll(p) & (want | EPOLLERR | EPOLLHUP))
            break;
        uint64_t now = preload_mono_us();
        if (now >= end) {
            rc = -EAGAIN;
            break;
        }
        /* Spin first when asked (latency profile), then sleep in the kernel. */
        bool spin = preload_spin_more(&spun);
        if (interrupted(timeout_ms)) {
            rc = -EINTR;
            break;
        }
        if (spin)
            continue;
        int left = end == UINT64_MAX ? -1 : (int)((end - now + 999) / 1000);
        if (may_futex && !*poller && preload_futex_usable()) {
            struct block_look look = { p, want };
            int fr = preload_futex_round(s, &sock, 1, block_ready, &look, left);
            if (fr == -EINTR && (timeout_ms >= 0 || !restartable())) {
                rc = -EINTR;
                break;
            }
            if (fr <= 0)
                continue;
            *poller = true;
        }
        struct pollfd pf[SLIP_WAIT_FDS_MAX + 1];
        int fds[SLIP_WAIT_FDS_MAX];
        int n = slip_stack__wait_fds(s, fds, SLIP_WAIT_FDS_MAX);
        if (slip_sandbox__limited())
            n = 0;          /* no more fds than the program itself would poll (sandbox.c) */
        for (int i = 0; i < n; i++)
            pf[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
        if (extra_fd >= 0)
            pf[n++] = (struct pollfd){ .fd = extra_fd, .events = POLLIN };
        int t = preload_sandbox_sleep_ms(preload_sleep_ms(s, left));
        slip_stack__sleepers(s, 1);
        /* Counted as a sleeper before the last look: a poll that delivers from now on rings the
         * doorbell we sleep on, so nothing slips in between the look and the sleep. */
        if (pfd_poll(p) & (want | EPOLLERR | EPOLLHUP)) {
            slip_stack__sleepers(s, -1);
            break;
        }
        if (interrupted(timeout_ms)) {
            slip_stack__sleepers(s, -1);
            rc = -EINTR;
            break;
        }
        int pr = real_poll(pf, (nfds_t)n, t);
        int saved = errno;
        slip_stack__sleepers(s, -1);
        slip_stack__doorbell_drain(s);
        if (pr < 0 && saved == EINTR && (timeout_ms >= 0 || !restartable())) {
            rc = -EINTR;
            break;
        }
        if (extra_fd >= 0 && (pf[n - 1].revents & POLLIN)) {
            rc = 1;
            break;
        }
    }
    return rc;
}

int preload_block(struct pfd *p, unsigned want, int timeout_ms, int extra_fd)
{
    struct { bool poller; int rc; } st = { false, 0 };
    /* recv and friends are cancellation points: a cancelled poller must hand its place on. */
    pthread_cleanup_push(preload_poller_cleanup, &st.poller);
    st.rc = block_loop(p, want, timeout_ms, extra_fd, &st.poller);
    pthread_cleanup_pop(0);
    if (st.poller)
        poller_leave();
    return st.rc;
}
