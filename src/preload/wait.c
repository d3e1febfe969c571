/* poll and select over sets that mix accelerated and kernel fds (epoll is in epoll.c). Accelerated
 * fds are checked in user space after a poll of their stacks; when nothing is ready the thread
 * sleeps in the kernel on the kernel fds plus those stacks' wake fds (AF_XDP sockets, netlink),
 * with a timeout no later than their next protocol deadline, so TCP keeps its timers while the
 * application waits. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/sandbox.h"
#include "preload/preload.h"
#include "preload/wait_int.h"
#include "stack/stack.h"

int preload_sleep_ms(struct slip_stack *s, int timeout_ms)
{
    int t = slip_stack__timeout_ms(s, timeout_ms);
    return (t < 0 || t > PRELOAD_MAX_SLEEP_MS) ? PRELOAD_MAX_SLEEP_MS : t;
}

/* ---- waits over several stacks (wait_int.h) ---- */
/* The wake fds of every stack in m, at most max. */
int wait_stacks_wait_fds(unsigned m, int *fds, int max)
{
    int n = 0, i;
    PRELOAD_EACH_SLOT(i, m) {
        struct slip_stack *s = preload_stack_at(i);
        if (s && n < max)
            n += slip_stack__wait_fds(s, fds + n, max - n);
    }
    return n;
}

/* The shortest sleep any stack in m allows. */
int wait_stacks_sleep_ms(unsigned m, int timeout_ms)
{
    int t = PRELOAD_MAX_SLEEP_MS, i;
    PRELOAD_EACH_SLOT(i, m) {
        struct slip_stack *s = preload_stack_at(i);
        if (s) {
            int ti = preload_sleep_ms(s, timeout_ms);
            t = ti < t ? ti : t;
        }
    }
    return t;
}

static unsigned nbits(unsigned m)
{
    return (unsigned)__builtin_popcount(m);
}

uint64_t wait_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Spinning costs the core and saves the sleep and the wakeup (on a VM an interrupt to another
 * core for every wakeup). */
bool preload_spin_more(uint64_t *since)
{
    if (g_pre.spin_usec <= 0)
        return false;
    uint64_t now = preload_mono_us();
    if (!*since)
        *since = now;
    return now - *since < (uint64_t)g_pre.spin_usec;
}

int wait_remaining(uint64_t end)
{
    if (end == UINT64_MAX)
        return -1;
    uint64_t now = wait_mono_ms();
    return now >= end ? 0 : (int)(end - now);
}

/* As the kernel's do_pollfd: only the bits asked for, plus POLLERR and POLLHUP (a POLLWRNORM
 * nobody asked for would make poll() return "ready" for a POLLIN-only wait). */
static short ev_to_poll(unsigned ev, short want)
{
    short r = 0;
    if (ev & EPOLLIN) r |= POLLIN | POLLRDNORM;
    if (ev & EPOLLOUT) r |= POLLOUT | POLLWRNORM;
    if (ev & EPOLLRDHUP) r |= POLLRDHUP;
    r &= want;
    if (ev & EPOLLERR) r |= POLLERR;
    if (ev & EPOLLHUP) r |= POLLHUP;
    return r;
}


/* A poll set of connected accelerated TCP sockets only (libmemcached's poll on its one socket,
 * a thread per connection): it can sleep on the sockets' futexes instead of the stack's wait
 * fds when another thread already polls those (sockwait.c, preload_futex_round). Fills socks. */
static int poll_futex_socks(const struct pollfd *fds, nfds_t n, int *socks)
{
    int m = 0;
    for (nfds_t i = 0; i < n; i++) {
        if (fds[i].fd < 0)
            continue;
        struct pfd *p = pfd_get(fds[i].fd);
        if (!p || p->kind != PFD_TCP || p->listening || m == PRELOAD_FUTEX_MAX)
            return 0;
        socks[m++] = p->sock;
    }
    return m;
}

struct poll_look {
    const struct pollfd *fds;
    nfds_t n;
};

static bool poll_set_ready(void *arg)
{
    const struct poll_look *l = arg;
    for (nfds_t i = 0; i < l->n; i++) {
        struct pfd *p = l->fds[i].fd >= 0 ? pfd_get(l->fds[i].fd) : NULL;
        if (p && ev_to_poll(pfd_poll(p), l->fds[i].events))
            return true;
    }
    return false;
}

static int poll_loop(struct pollfd *fds, nfds_t n, int timeout, bool *poller);

int pre_poll(struct pollfd *fds, nfds_t n, int timeout)
{
    bool any = false;
    for (nfds_t i = 0; i < n; i++) {
        struct pfd *p = pfd_get(fds[i].fd);
        if (!p)
            continue;
        any = true;
        /* Waiting for a connection on a listener is using it, as accept() and epoll_ctl() are:
         * a worker's copy of an inherited SO_REUSEPORT listener starts listening (and taking
         * its share of the connections) here when the worker polls or selects before accepting. */
        if (p->kind == PFD_TCP && p->listening && !p->used && (fds[i].events & (POLLIN | POLLRDNORM)))
            preload_listener_use(fds[i].fd, p);
    }
    if (!any || !g_pre.stack)
        return real_poll(fds, n, timeout);
    struct { bool poller; int rc; } st = { false, 0 };
    /* poll is a cancellation point: a cancelled poller must hand its place on. */
    pthread_cleanup_push(preload_poller_cleanup, &st.poller);
    st.rc = poll_loop(fds, n, timeout, &st.poller);
    pthread_cleanup_pop(0);
    if (st.poller)
        preload_poller_leave();
    return st.rc;
}

/* Set by the calls that take a signal mask (ppoll, epoll_pwait, pselect): they clear the record
 * of handlers that ran before they install the mask, since the mask may open a pending signal
 * whose handler runs at once; the wait loop must then not clear it again (it would forget that
 * handler and sleep on, where Linux returns EINTR). */
__thread bool wait_signals_armed;

void wait_signals_arm(void)
{
    preload_signal_reset();
    wait_signals_armed = true;
}

/* At the start of a wait: forget handlers that ran before it, unless the caller did already. */
void wait_signals_start(void)
{
    if (!wait_signals_armed)
        preload_signal_reset();
    wait_signals_armed = false;
}

/* *poller: this thread took the poller's place (pre_poll gives it up, also when cancelled). */
static int poll_loop(struct pollfd *fds, nfds_t n, int timeout, bool *poller)
{
    struct slip_stack *s = g_pre.stack;
    unsigned m = 0;             /* the stacks of the accelerated fds in the set */
    for (nfds_t i = 0; i < n; i++) {
        struct pfd *p = pfd_get(fds[i].fd);
        if (p)
            m |= p->kind == PFD_EPOLL ? (p->ep ? uepoll_mask(p->ep) : 0u) : 1u << p->st;
    }
    if (!m)
        m = 1;
    uint64_t end = timeout < 0 ? UINT64_MAX : wait_mono_ms() + (uint64_t)timeout;
    int max_wake = MAX_WAKE * (int)nbits(m);
    struct pollfd *k = malloc(sizeof(*k) * (n + (nfds_t)max_wake));
    int *wake = malloc(sizeof(*wake) * (size_t)max_wake);
    if (!k || !wake) {
        free(k);
        free(wake);
        return set_errno(-ENOMEM);
    }
    int ret;
    int socks[PRELOAD_FUTEX_MAX];
    /* The poller's place and the futexes are the process stack's (sockwait.c). */
    int nsocks = m == 1 ? poll_futex_socks(fds, n, socks) : 0;
    uint64_t spun = 0;
    unsigned spins = 0;
    wait_stacks_tx_defer(m, true);           /* an event loop: sends may wait for the next poll */
    wait_signals_start();
    for (;;) {
        wait_stacks_poll(m);
        /* Counted as a sleeper before the last look: a poll by another thread that delivers
         * after this point rings the doorbell; what one delivered before is seen below. */
        wait_stacks_sleepers(m, 1);
        int ready = 0;
        nfds_t nk = 0;
        for (nfds_t i = 0; i < n; i++) {
            struct pfd *p = pfd_get(fds[i].fd);
            if (p && p->kind != PFD_EPOLL) {
                fds[i].revents = ev_to_poll(pfd_poll(p), fds[i].events);
                ready += fds[i].revents != 0;
                /* UDP sockets and listeners also hear from this host through the kernel socket;
                 * other slots are placeholders that keep indices aligned. */
                bool kern = (p->kind == PFD_UDP || p->listening) && (fds[i].events & POLLIN);
                k[nk] = (struct pollfd){ .fd = kern ? fds[i].fd : -1, .events = POLLIN };
            } else {
                /* An epoll fd: readable when its accelerated members are (user part), or through
                 * the kernel for its kernel members. */
                fds[i].revents = 0;
                if (p && p->ep) {
                    fds[i].revents = (uepoll_user_ready(p->ep, 0) ? POLLIN | POLLRDNORM : 0) & fds[i].events;
                    ready += fds[i].revents != 0;
                }
                k[nk] = fds[i];
                k[nk].revents = 0;
            }
            nk++;
        }
        int nw = wait_stacks_wait_fds(m, wake, max_wake);
        for (int w = 0; w < nw; w++)
            k[nk + (nfds_t)w] = (struct pollfd){ .fd = wake[w], .events = POLLIN };
        int left = ready ? 0 : wait_remaining(end);
        bool spinning = !ready && left != 0 && preload_spin_more(&spun);
        if (spinning) {
            if (preload_signal_restart()) {     /* a handler ran: poll is never restarted */
                wait_stacks_sleepers(m, -1);
                ret = set_errno(-EINTR);
                break;
            }
            if (++spins % 16 != 0) {            /* the kernel fds, now and then */
                wait_stacks_sleepers(m, -1);
                continue;
            }
        }
        if (!spinning && !ready && left != 0 && nsocks && !*poller && preload_futex_usable()) {
            slip_stack__sleepers(s, -1);
            struct poll_look look = { fds, n };
            int fr = preload_futex_round(s, socks, nsocks, poll_set_ready, &look, left);
            if (fr < 0) {
                ret = set_errno(fr);
                break;
            }
            if (fr == 0)
                continue;
            *poller = true;     /* this thread sleeps on the wait fds for the others */
            slip_stack__sleepers(s, 1);
            if (poll_set_ready(&look)) {
                slip_stack__sleepers(s, -1);
                continue;
            }
        }
        if (!ready && !spinning && preload_signal_restart()) {
            /* A handler ran during this call (outside the kernel's own wait): Linux's poll
             * would have returned EINTR, and is never restarted. */
            wait_stacks_sleepers(m, -1);
            ret = set_errno(-EINTR);
            break;
        }
        int t = ready || spinning ? 0 : wait_stacks_sleep_ms(m, left);
        if (!ready && left >= 0 && t > left)
            t = left;
        if (slip_sandbox__limited()) {  /* no more fds than the program asked for (sandbox.c) */
            nw = 0;
            t = preload_sandbox_sleep_ms(t);
        }
        int r = real_poll(k, nk + (nfds_t)nw, t);
        int saved = errno;
        wait_stacks_sleepers(m, -1);
        wait_stacks_drain(m);                    /* may leave EAGAIN in errno */
        errno = saved;
        if (r < 0) {
            ret = r;
            break;
        }
        for (nfds_t i = 0; i < n; i++) {
            if (k[i].fd < 0 || !k[i].revents)
                continue;
            if (pfd_get(fds[i].fd)) {
                short add = k[i].revents & (POLLIN | POLLRDNORM) & fds[i].events;
                if (add && !fds[i].revents)
                    ready++;
                fds[i].revents |= add;
            } else {
                fds[i].revents = k[i].revents;
                ready++;
            }
        }
        if (ready || left == 0) {
            ret = ready;
            break;
        }
    }
    free(k);
    free(wake);
    return ret;
}

int pre_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask)
{
    bool any = false;
    for (nfds_t i = 0; i < n && !any; i++)
        any = pfd_get(fds[i].fd) != NULL;
    if (!any || !g_pre.stack)
        return real_ppoll(fds, n, ts, mask);
    sigset_t old;
    wait_signals_arm();
    if (mask)
        pthread_sigmask(SIG_SETMASK, mask, &old);
    int r = pre_poll(fds, n, ts ? (int)(ts->tv_sec * 1000 + ts->tv_nsec / 1000000) : -1);
    int e = errno;
    wait_signals_armed = false;
    if (mask)
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return r;
}

static int select_via_poll(int nfds, fd_set *r, fd_set *w, fd_set *e, int timeout_ms)
{
    struct pollfd *p = calloc((size_t)(nfds > 0 ? nfds : 1), sizeof(*p));
    int np = 0;
    if (!p)
        return set_errno(-ENOMEM);
    for (int fd = 0; fd < nfds; fd++) {
        short ev = 0;
        if (r && FD_ISSET(fd, r)) ev |= POLLIN;
        if (w && FD_ISSET(fd, w)) ev |= POLLOUT;
        if (e && FD_ISSET(fd, e)) ev |= POLLPRI;
        if (ev)
            p[np++] = (struct pollfd){ .fd = fd, .events = ev };
    }
    int rc = pre_poll(p, (nfds_t)np, timeout_ms);
    if (rc < 0) {
        free(p);
        return rc;
    }
    /* select() fails with EBADF for a closed fd in a set, where poll() reports POLLNVAL. */
    for (int i = 0; i < np; i++)
        if (p[i].revents & POLLNVAL) {
            free(p);
            return set_errno(-EBADF);
        }
    if (r) FD_ZERO(r);
    if (w) FD_ZERO(w);
    if (e) FD_ZERO(e);
    int count = 0;
    for (int i = 0; i < np; i++) {
        short re = p[i].revents;
        if (r && (re & (POLLIN | POLLHUP | POLLERR)) && (p[i].events & POLLIN)) { FD_SET(p[i].fd, r); count++; }
        if (w && (re & (POLLOUT | POLLERR)) && (p[i].events & POLLOUT)) { FD_SET(p[i].fd, w); count++; }
        if (e && (re & POLLPRI)) { FD_SET(p[i].fd, e); count++; }
    }
    free(p);
    return count;
}

static bool any_ours(int nfds, fd_set *r, fd_set *w, fd_set *e)
{
    for (int fd = 0; fd < nfds && fd < g_pre.nfds; fd++)
        if (((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e))) && pfd_get(fd))
            return true;
    return false;
}

int pre_select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
    if (!g_pre.stack || !any_ours(nfds, r, w, e))
        return real_select(nfds, r, w, e, tv);
    return select_via_poll(nfds, r, w, e, tv ? (int)(tv->tv_sec * 1000 + tv->tv_usec / 1000) : -1);
}

int pre_pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts, const sigset_t *mask)
{
    if (!g_pre.stack || !any_ours(nfds, r, w, e))
        return real_pselect(nfds, r, w, e, ts, mask);
    sigset_t old;
    wait_signals_arm();
    if (mask)
        pthread_sigmask(SIG_SETMASK, mask, &old);
    int rc = select_via_poll(nfds, r, w, e, ts ? (int)(ts->tv_sec * 1000 + ts->tv_nsec / 1000000) : -1);
    int er = errno;
    wait_signals_armed = false;
    if (mask)
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = er;
    return rc;
}

