/* epoll over sets that mix accelerated and kernel fds (the user-space part of a set: struct
 * uepoll in preload.h). Accelerated members are checked in user space after a poll of their
 * stacks; when none is ready the thread sleeps in the kernel's epoll_wait on the kernel members
 * plus the wake fds of those stacks (wait_int.h), with a timeout no later than their next
 * protocol deadline. poll and select are in wait.c. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "preload/preload.h"
#include "preload/wait_int.h"
#include "stack/stack.h"

/* ---- epoll ---- */

static struct uepoll *g_sets;
/* Threads create, close and leave sets at the same time: the list of sets is guarded. What one
 * set holds is not (as with a kernel epoll fd, programs serialise epoll_ctl on one set). */
static pthread_mutex_t g_sets_mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- which sets watch the stack's wake fds ----
 * Every set that holds an accelerated socket used to have the AF_XDP fds in its kernel set, so a
 * thread whose set holds only a listener (memcached's main thread, beside its worker's set of
 * connections) woke on every frame for the worker, polled, and slept again. Such a set now
 * sleeps on the process's accept bell (rung by a poll that makes a listener ready) while another
 * set of the process watches the wake fds and no other process shares the stack (the bell is
 * this process's). Whenever that stops being true (the last watching set lets go) the bell is
 * rung so listener-only sets look again and take the wake fds back. */
static uint32_t g_watching;         /* sets of this process with the wake fds in their kernel set */

/* Stack s's wake fds into (add) or out of epfd's kernel set. */
static void ctl_wake_fds(int epfd, struct slip_stack *s, bool add)
{
    int wake[MAX_WAKE];
    int nw = slip_stack__wait_fds(s, wake, MAX_WAKE);
    for (int i = 0; i < nw; i++) {
        /* The doorbell edge-triggered: every ring reaches every epoll set once and nobody
         * reads it here, so no thread can take a ring meant for another (a level-triggered
         * doorbell had to be drained, and the drain of one sleeper lost another's wakeup). */
        bool bell = wake[i] == slip_stack__doorbell_fd(s);
        bool peer = wake[i] == slip_stack__peer_bell_fd(s);
        struct epoll_event kev = { .events = bell ? EPOLLIN | EPOLLET : EPOLLIN,
                                   .data.u64 = bell ? BELL_MARK : peer ? PEER_MARK : WAKE_MARK };
        real_epoll_ctl(epfd, add ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, wake[i], add ? &kev : NULL);
    }
}

static void add_wake_fds(int epfd, struct uepoll *ep)
{
    ctl_wake_fds(epfd, g_pre.stack, true);
    ep->stack_fds_added = true;
    __atomic_add_fetch(&g_watching, 1, __ATOMIC_SEQ_CST);
}

static void del_wake_fds(int epfd, struct uepoll *ep)
{
    ctl_wake_fds(epfd, g_pre.stack, false);
    ep->stack_fds_added = false;
    if (__atomic_sub_fetch(&g_watching, 1, __ATOMIC_SEQ_CST) == 0)
        slip_stack__ring_accept_bell(g_pre.stack);  /* listener-only sets: watch them yourselves now */
}

/* A thread stack's wake fds (slot i) into or out of ep's kernel set. No accept bell and no count
 * of watching sets: those serve the process stack's sets. */
static void thread_wake_fds(int epfd, struct uepoll *ep, int i, bool add)
{
    struct slip_stack *s = preload_stack_at(i);
    if (!s)
        return;
    ctl_wake_fds(epfd, s, add);
    if (add)
        ep->thread_fds_added |= 1u << i;
    else
        ep->thread_fds_added &= ~(1u << i);
}

/* The stacks ep's members live in, as slot bits (a nested set may hold any). */
unsigned uepoll_mask(const struct uepoll *ep)
{
    if (ep->nested)
        return wait_all_stacks();
    unsigned m = 0;
    int i;
    PRELOAD_EACH_SLOT(i, preload_slots())      /* a socket's slot is always one in use */
        if (ep->per_st[i])
            m |= 1u << i;
    return m;
}

/* Takes entry i out of ep (its place goes to the last one). */
static void ent_drop(struct uepoll *ep, int i)
{
    struct uepoll_ent *x = &ep->ents[i];
    if (x->kind == PFD_EPOLL)
        ep->nested--;
    else
        ep->per_st[x->st]--;
    ep->ents[i] = ep->ents[--ep->n];
}

/* The stack's wake fds leave a kernel set that no longer holds an accelerated fd: they would wake
 * its sleeper for traffic it does not wait for (the progress thread keeps the stack going). A
 * thread stack's leave once the set holds none of its sockets. */
static void drop_wake_fds(int epfd, struct uepoll *ep)
{
    if (!g_pre.stack)
        return;
    for (int i = 1; i < PRELOAD_STACKS && ep->thread_fds_added; i++)
        if ((ep->thread_fds_added >> i) & 1u && !ep->per_st[i] && !ep->nested)
            thread_wake_fds(epfd, ep, i, false);
    if (!ep->stack_fds_added || ep->n)
        return;
    del_wake_fds(epfd, ep);
}

/* Every member is an accelerated listener (what accept bells are for). */
static bool listeners_only(struct uepoll *ep)
{
    for (int i = 0; i < ep->n; i++) {
        struct uepoll_ent *x = &ep->ents[i];
        struct pfd *p = x->detached ? NULL : pfd_get(x->fd);
        if (!p || p->kind != PFD_TCP || !p->listening)
            return false;
    }
    return ep->n > 0;
}

/* Chooses, before a sleep, what ep's kernel set watches: true = the accept bell only. */
static bool choose_watch(int epfd, struct uepoll *ep)
{
    struct slip_stack *s = g_pre.stack;
    uint32_t others = __atomic_load_n(&g_watching, __ATOMIC_SEQ_CST) - (ep->stack_fds_added ? 1 : 0);
    bool bell = slip_stack__accept_bell_fd(s) >= 0 && others > 0 && listeners_only(ep) &&
                slip_stack__alone(s);
    if (bell) {
        if (!ep->accept_bell_added) {
            struct epoll_event kev = { .events = EPOLLIN | EPOLLET, .data.u64 = BELL_MARK };
            if (real_epoll_ctl(epfd, EPOLL_CTL_ADD, slip_stack__accept_bell_fd(s), &kev) < 0)
                bell = false;
            else
                ep->accept_bell_added = true;
        }
        if (bell && ep->stack_fds_added)
            del_wake_fds(epfd, ep);
    }
    if (!bell && !ep->stack_fds_added)
        add_wake_fds(epfd, ep);
    return bell;
}

/* In a fork child, after the stack gave it bells of its own (stack.c): an inherited set is the
 * parent's kernel set too and keeps the parent's bells (taking them out would take them from the
 * parent); the child's are added beside them, or the child's own rings would not wake its waits. */
static void add_bells(int epfd, struct slip_stack *s)
{
    struct epoll_event bell = { .events = EPOLLIN | EPOLLET, .data.u64 = BELL_MARK };
    struct epoll_event peer = { .events = EPOLLIN, .data.u64 = PEER_MARK };
    if (slip_stack__doorbell_fd(s) >= 0)
        real_epoll_ctl(epfd, EPOLL_CTL_ADD, slip_stack__doorbell_fd(s), &bell);
    if (slip_stack__peer_bell_fd(s) >= 0)
        real_epoll_ctl(epfd, EPOLL_CTL_ADD, slip_stack__peer_bell_fd(s), &peer);
}

void uepoll_atfork_child(void)
{
    struct slip_stack *s = g_pre.stack;
    /* another thread of the parent may have held it at the fork; the child has only this one */
    g_sets_mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    if (!s)
        return;
    for (struct uepoll *ep = g_sets; ep; ep = ep->next) {
        struct epoll_event bell = { .events = EPOLLIN | EPOLLET, .data.u64 = BELL_MARK };
        if (ep->stack_fds_added)
            add_bells(ep->epfd, s);
        for (int i = 1; i < PRELOAD_STACKS; i++)
            if ((ep->thread_fds_added >> i) & 1u && preload_stack_at(i))
                add_bells(ep->epfd, preload_stack_at(i));
        if (ep->accept_bell_added && slip_stack__accept_bell_fd(s) >= 0)
            real_epoll_ctl(ep->epfd, EPOLL_CTL_ADD, slip_stack__accept_bell_fd(s), &bell);
    }
}

void uepoll_forget_fd(int fd)
{
    pthread_mutex_lock(&g_sets_mu);
    for (struct uepoll *ep = g_sets; ep; ep = ep->next)
        for (int i = 0; i < ep->n; i++)
            if (ep->ents[i].fd == fd && !ep->ents[i].detached) {
                ent_drop(ep, i);
                drop_wake_fds(ep->epfd, ep);
                break;
            }
    pthread_mutex_unlock(&g_sets_mu);
}

void uepoll_detach_fd(int fd, uint8_t kind, uint8_t st, int sock)
{
    pthread_mutex_lock(&g_sets_mu);
    for (struct uepoll *ep = g_sets; ep; ep = ep->next)
        for (int i = 0; i < ep->n; i++)
            if (ep->ents[i].fd == fd && !ep->ents[i].detached) {
                ep->ents[i].detached = true;
                ep->ents[i].looked = false;
                ep->ents[i].kind = kind;
                ep->ents[i].st = st;
                ep->ents[i].sock = sock;
            }
    pthread_mutex_unlock(&g_sets_mu);
}

void uepoll_forget_sock(uint8_t kind, uint8_t st, int sock)
{
    pthread_mutex_lock(&g_sets_mu);
    for (struct uepoll *ep = g_sets; ep; ep = ep->next)
        for (int i = 0; i < ep->n; i++)
            if (ep->ents[i].detached && ep->ents[i].kind == kind && ep->ents[i].st == st &&
                ep->ents[i].sock == sock) {
                ent_drop(ep, i--);
                drop_wake_fds(ep->epfd, ep);
            }
    pthread_mutex_unlock(&g_sets_mu);
}

/* The member's pfd: the fd's entry, or for a detached registration one made from the socket. */
static struct pfd *ent_pfd(struct uepoll_ent *x, struct pfd *tmp)
{
    if (!x->detached)
        return pfd_get(x->fd);
    memset(tmp, 0, sizeof(*tmp));
    tmp->kind = x->kind;
    tmp->st = x->st;
    tmp->sock = x->sock;
    tmp->rcvtimeo_ms = tmp->sndtimeo_ms = -1;
    return tmp;
}

void uepoll_free(struct uepoll *ep)
{
    /* The kernel set goes with its fd: only the count of watching sets is ours to fix. */
    if (ep->stack_fds_added && g_pre.stack &&
        __atomic_sub_fetch(&g_watching, 1, __ATOMIC_SEQ_CST) == 0)
        slip_stack__ring_accept_bell(g_pre.stack);
    pthread_mutex_lock(&g_sets_mu);
    if (ep->prev)
        ep->prev->next = ep->next;
    else
        g_sets = ep->next;
    if (ep->next)
        ep->next->prev = ep->prev;
    pthread_mutex_unlock(&g_sets_mu);
    free(ep->ents);
    free(ep);
}

static int new_epoll(int epfd)
{
    if (epfd < 0)
        return epfd;
    struct pfd *p = pfd_new(epfd);
    if (!p)
        return epfd;
    p->ep = calloc(1, sizeof(*p->ep));
    if (!p->ep)
        return epfd;
    p->ep->epfd = epfd;
    pthread_mutex_lock(&g_sets_mu);
    p->ep->next = g_sets;
    if (g_sets)
        g_sets->prev = p->ep;
    g_sets = p->ep;
    pthread_mutex_unlock(&g_sets_mu);
    p->kind = PFD_EPOLL;
    return epfd;
}

int pre_epoll_create(int size)
{
    return new_epoll(real_epoll_create(size));
}

int pre_epoll_create1(int flags)
{
    return new_epoll(real_epoll_create1(flags));
}

static struct uepoll_ent *ep_find(struct uepoll *ep, int fd)
{
    for (int i = 0; i < ep->n; i++)
        if (ep->ents[i].fd == fd && !ep->ents[i].detached)
            return &ep->ents[i];
    return NULL;
}

/* An epoll set inside another: the kernel set holds it (for its kernel members, and to check
 * EINVAL/ELOOP/EEXIST as Linux does), and the user part too, so that the outer set reports it
 * when its accelerated members are ready. */
static int nested_ctl(int epfd, struct uepoll *ep, int op, int fd, struct epoll_event *ev)
{
    int rc = real_epoll_ctl(epfd, op, fd, ev);
    if (rc < 0)
        return rc;
    struct uepoll_ent *x = ep_find(ep, fd);
    if (op == EPOLL_CTL_ADD && !x) {
        if (ep->n == ep->cap) {
            int cap = ep->cap ? ep->cap * 2 : 16;
            struct uepoll_ent *n = realloc(ep->ents, sizeof(*n) * (size_t)cap);
            if (!n) {
                real_epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
                return set_errno(-ENOMEM);
            }
            ep->ents = n;
            ep->cap = cap;
        }
        ep->ents[ep->n++] = (struct uepoll_ent){ .fd = fd, .events = ev->events, .data = ev->data,
                                                 .gen_seen = UINT32_MAX, .kind = PFD_EPOLL };
        ep->nested++;
    } else if (op == EPOLL_CTL_MOD && x) {
        x->events = ev->events;
        x->data = ev->data;
        x->disabled = false;
        x->bits_seen = 0;
    } else if (op == EPOLL_CTL_DEL && x) {
        ent_drop(ep, (int)(x - ep->ents));
        drop_wake_fds(epfd, ep);
    }
    return 0;
}

bool uepoll_any_accelerated(void)
{
    bool any = false;
    pthread_mutex_lock(&g_sets_mu);
    for (struct uepoll *ep = g_sets; ep && !any; ep = ep->next)
        any = ep->n > 0 || ep->stack_fds_added || ep->accept_bell_added;
    pthread_mutex_unlock(&g_sets_mu);
    return any;
}

int pre_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    struct pfd *e = pfd_get(epfd);
    struct pfd *p = pfd_get(fd);
    if (op == EPOLL_CTL_ADD && e && e->kind == PFD_EPOLL && p && p->kind == PFD_TCP && p->listening && !p->used)
        preload_listener_use(fd, p);
    if (e && e->kind == PFD_EPOLL && e->ep && p && p->kind == PFD_EPOLL && p->ep)
        return nested_ctl(epfd, e->ep, op, fd, ev);
    if (!e || e->kind != PFD_EPOLL || !p || p->kind == PFD_EPOLL)
        return real_epoll_ctl(epfd, op, fd, ev);
    struct uepoll *ep = e->ep;
    struct uepoll_ent *x = ep_find(ep, fd);
    switch (op) {
    case EPOLL_CTL_ADD:
        if (x)
            return set_errno(-EEXIST);
        if (ep->n == ep->cap) {
            int cap = ep->cap ? ep->cap * 2 : 16;
            struct uepoll_ent *n = realloc(ep->ents, sizeof(*n) * (size_t)cap);
            if (!n)
                return set_errno(-ENOMEM);
            ep->ents = n;
            ep->cap = cap;
        }
        ep->ents[ep->n++] = (struct uepoll_ent){ .fd = fd, .events = ev->events, .data = ev->data,
                                                 .gen_seen = UINT32_MAX, .kind = p->kind, .st = p->st };
        ep->per_st[p->st]++;
        /* A listener's (or UDP socket's) kernel socket takes this host's own traffic: watch it too. */
        if (p->listening || p->kind == PFD_UDP) {
            struct epoll_event kev = { .events = EPOLLIN, .data = ev->data };
            real_epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &kev);
        }
        return 0;
    case EPOLL_CTL_MOD:
        if (!x)
            return set_errno(-ENOENT);
        x->events = ev->events;
        x->data = ev->data;
        x->disabled = false;
        x->bits_seen = 0;       /* Linux re-arms readiness on EPOLL_CTL_MOD */
        x->looked = false;
        if (p->listening || p->kind == PFD_UDP) {
            struct epoll_event kev = { .events = EPOLLIN, .data = ev->data };
            real_epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &kev);
        }
        return 0;
    case EPOLL_CTL_DEL:
        if (!x)
            return set_errno(-ENOENT);
        ent_drop(ep, (int)(x - ep->ents));
        if (p->listening || p->kind == PFD_UDP)
            real_epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
        drop_wake_fds(epfd, ep);
        return 0;
    }
    return set_errno(-EINVAL);
}

/* A nested epoll set is in both parts of the outer set: when the user part reported it, the same
 * set reported again by the kernel (its kernel members are ready too) is one event, not two. */
static int drop_nested_dups(struct uepoll *ep, struct epoll_event *ev, int nuser, int n)
{
    int k = nuser;
    for (int i = nuser; i < n; i++) {
        bool dup = false;
        for (int j = 0; j < nuser && !dup; j++)
            if (ev[j].data.u64 == ev[i].data.u64)
                for (int m = 0; m < ep->n && !dup; m++) {
                    struct pfd *p = pfd_get(ep->ents[m].fd);
                    dup = p && p->kind == PFD_EPOLL && ep->ents[m].data.u64 == ev[i].data.u64;
                }
        if (!dup)
            ev[k++] = ev[i];
    }
    return k;
}

/* Removes the stack's wake events from what the kernel returned. The bell other processes ring
 * is level-triggered: whoever sees it takes it (and rings this process's doorbell for the rest). */
static int strip_wake(struct epoll_event *ev, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (ev[i].data.u64 == PEER_MARK)
            for (int j = 0; j < PRELOAD_STACKS && preload_stack_at(j); j++)
                slip_stack__peer_bell_take(preload_stack_at(j));
        else if (ev[i].data.u64 != WAKE_MARK && ev[i].data.u64 != BELL_MARK)
            ev[k++] = ev[i];
    }
    return k;
}

static unsigned ent_poll(struct pfd *p, int depth);

/* Whether epoll_wait on ep would report one of its accelerated (user-space) members now, without
 * consuming anything: what makes an epoll fd readable inside another set or in poll(). */
bool uepoll_user_ready(struct uepoll *ep, int depth)
{
    if (depth > 4)              /* Linux's EP_MAX_NESTS; loops are refused by the kernel's ELOOP */
        return false;
    for (int i = 0; i < ep->n; i++) {
        struct uepoll_ent *x = &ep->ents[i];
        struct pfd tmp, *p = ent_pfd(x, &tmp);
        if (x->disabled || !p)
            continue;
        unsigned bits = ent_poll(p, depth + 1) & (x->events | EPOLLERR | EPOLLHUP);
        if (!(x->events & EPOLLET) && bits)
            return true;
        if (x->events & EPOLLET) {
            uint32_t gen = (p->kind == PFD_TCP || p->kind == PFD_UDP)
                               ? slip_sock__evgen(pfd_stack(p), p->kind == PFD_TCP, p->sock) : 0;
            if ((bits & ~x->bits_seen) || (bits && gen != x->gen_seen))
                return true;
        }
    }
    return false;
}

/* Readiness of a member of an epoll set: a socket's bits, or EPOLLIN for a nested epoll set whose
 * accelerated members are ready (its kernel members reach the outer set through the kernel). */
static unsigned ent_poll(struct pfd *p, int depth)
{
    if (p->kind == PFD_EPOLL)
        return p->ep && uepoll_user_ready(p->ep, depth) ? EPOLLIN | EPOLLRDNORM : 0;
    return pfd_poll(p);
}

static void reverse_ents(struct uepoll_ent *a, int n)
{
    for (int i = 0, j = n - 1; i < j; i++, j--) {
        struct uepoll_ent t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* Moves the first k entries of the set behind the others, keeping both groups in order. */
static void rotate_ents(struct uepoll *ep, int k)
{
    reverse_ents(ep->ents, k);
    reverse_ents(ep->ents + k, ep->n - k);
    reverse_ents(ep->ents, ep->n);
}

/* Bumped by this process's calls that can make a socket more ready without an event of the
 * stack (a lower SO_RCVLOWAT, a bigger SO_SNDBUF): the next epoll_wait looks at every entry. */
static uint32_t g_ready_epoch;

void preload_ready_epoch_bump(void)
{
    __atomic_add_fetch(&g_ready_epoch, 1, __ATOMIC_RELAXED);
}

/* A TCP socket gets more ready only through an event of the stack, which bumps its event
 * generation (tcp_evgen: data, ACKed data, a FIN, a state change, a connection to accept), or
 * through this process's own calls (g_ready_epoch). So an entry looked at before, with no event
 * since, is skipped when it was not ready then (level-triggered) or in any case (edge-triggered:
 * it fires only on news). A server with thousands of idle connections then pays a load per
 * entry, not a readiness computation (nginx keep-alive with 3,000 idle connections: 20 % of its
 * core went to this scan). Every 100 ms (SLIP_EPOLL_ALL_MS) every entry is looked at anyway. */
static bool skip_unchanged(const struct uepoll_ent *x, const char *evgen, size_t stride, bool all)
{
    return !all && x->looked && evgen &&
           __atomic_load_n((const uint32_t *)(const void *)(evgen + (size_t)x->sock_look * stride),
                           __ATOMIC_RELAXED) == x->gen_look &&
           (!x->was_ready || (x->events & EPOLLET));
}

static int user_ready(struct uepoll *ep, struct epoll_event *out, int max)
{
    int n = 0;
    uint64_t now = wait_mono_ms();
    uint32_t epoch = __atomic_load_n(&g_ready_epoch, __ATOMIC_RELAXED);
    bool all = epoch != ep->epoch_seen || now - ep->all_ms >= (uint64_t)g_pre.epoll_all_ms;
    if (all) {
        ep->epoch_seen = epoch;
        ep->all_ms = now;
    }
    /* The sockets' event generations, in the stack's shared memory: one load per entry. An
     * entry's fd cannot name another socket while it is in the set (close and dup2 take it out
     * or detach it), so the socket looked at last time is the one it names now. */
    const char *evgen[PRELOAD_STACKS] = { NULL };
    int si;
    PRELOAD_EACH_SLOT(si, preload_slots()) {
        struct slip_stack *s = preload_stack_at(si);
        evgen[si] = s ? (const char *)slip_sock__tcp_evgen_word(s, 0) : NULL;
    }
    size_t stride = slip_sock__tcp_evgen_stride();
    for (int i = 0; i < ep->n && n < max; i++) {
        struct uepoll_ent *x = &ep->ents[i];
        if (x->disabled || skip_unchanged(x, evgen[x->st], stride, all))
            continue;
        struct pfd tmp, *p = ent_pfd(x, &tmp);
        if (!p)
            continue;
        /* read before the readiness: an event after it shows as a new generation next time */
        uint32_t gen_now = (p->kind == PFD_TCP || p->kind == PFD_UDP)
                               ? slip_sock__evgen(pfd_stack(p), p->kind == PFD_TCP, p->sock) : 0;
        unsigned bits = ent_poll(p, 0) & (x->events | EPOLLERR | EPOLLHUP);
        x->looked = p->kind == PFD_TCP;
        x->sock_look = p->sock;
        x->gen_look = gen_now;
        x->was_ready = bits != 0;
        if (x->events & EPOLLET) {
            /* Edge-triggered: report a bit that was not set when we last looked, or any ready bit
             * after a new event on the socket (more data, more space, a state change). */
            bool fire = (bits & ~x->bits_seen) || (bits && gen_now != x->gen_seen);
            x->bits_seen = bits;
            if (!fire)
                continue;
            x->gen_seen = gen_now;
        }
        if (!bits)
            continue;
        out[n].events = bits;
        out[n].data = x->data;
        n++;
        if (x->events & EPOLLONESHOT)
            x->disabled = true;
        if (n == max && i + 1 < ep->n) {
            /* Cut short by maxevents: the entries looked at go behind the others, so the next
             * call starts with those not reported (Linux requeues reported items at the tail of
             * its ready list; without this a busy first socket would starve the rest). */
            rotate_ents(ep, i + 1);
            break;
        }
    }
    return n;
}

/* Sleepers of an epoll wait: on the process stack's accept bell (accept_only) or its doorbell,
 * and on the doorbell of each thread stack in m. */
static void epoll_sleepers(unsigned m, bool accept_only, int delta)
{
    if (accept_only) {
        slip_stack__accept_sleepers(g_pre.stack, delta);
        m &= ~1u;
    }
    wait_stacks_sleepers(m, delta);
}

int pre_epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
    struct pfd *e = pfd_get(epfd);
    struct slip_stack *s = g_pre.stack;
    if (!e || e->kind != PFD_EPOLL || !s || e->ep->n == 0) {
        int r = real_epoll_wait(epfd, ev, max, timeout);
        return r > 0 ? strip_wake(ev, r) : r;
    }
    struct uepoll *ep = e->ep;
    uint64_t end = timeout < 0 ? UINT64_MAX : wait_mono_ms() + (uint64_t)timeout;
    uint64_t spun = 0;
    unsigned spins = 0;
    unsigned m = uepoll_mask(ep);
    wait_stacks_tx_defer(m, true);           /* an event loop: sends may wait for the next poll */
    wait_signals_start();
    for (;;) {
        wait_stacks_poll(m);
        /* Thread stacks' wake fds join the kernel set; the process stack's (or its accept bell)
         * as choose_watch says, when the set holds a socket of it. */
        int i;
        PRELOAD_EACH_SLOT(i, m & ~1u & ~(unsigned)ep->thread_fds_added)
            thread_wake_fds(epfd, ep, i, true);
        /* Counted as a sleeper (on the doorbell, or on the accept bell) before the last look,
         * as in pre_poll. */
        bool accept_only = (m & 1u) && choose_watch(epfd, ep);
        epoll_sleepers(m, accept_only, 1);
        int n = user_ready(ep, ev, max);
        if (n > 0) {
            epoll_sleepers(m, accept_only, -1);
            if (n < max) {
                int r = real_epoll_wait(epfd, ev + n, max - n, 0);
                if (r > 0)
                    n = drop_nested_dups(ep, ev, n, n + strip_wake(ev + n, r));
            }
            return n;
        }
        int left = wait_remaining(end);
        if (left != 0 && preload_spin_more(&spun)) {
            epoll_sleepers(m, accept_only, -1);
            if (preload_signal_restart())
                return set_errno(-EINTR);   /* a handler ran: epoll_wait is never restarted */
            if (++spins % 16 == 0) {        /* the kernel members, now and then */
                int r = real_epoll_wait(epfd, ev, max, 0);
                if (r > 0 && (r = strip_wake(ev, r)) > 0)
                    return r;
            }
            continue;
        }
        if (preload_signal_restart()) {
            /* A handler ran during this call: epoll_wait returns EINTR (see poll_loop). */
            epoll_sleepers(m, accept_only, -1);
            return set_errno(-EINTR);
        }
        int t = wait_stacks_sleep_ms(m, left);
        if (left >= 0 && t > left)
            t = left;
        int r = real_epoll_wait(epfd, ev, max, t);
        int saved = errno;
        epoll_sleepers(m, accept_only, -1);
        errno = saved;
        if (r < 0)
            return r;
        r = strip_wake(ev, r);
        if (r > 0)
            return r;
        if (left == 0)
            return 0;
    }
}

int pre_epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask)
{
    struct pfd *e = pfd_get(epfd);
    if (!e || e->kind != PFD_EPOLL || !g_pre.stack || e->ep->n == 0) {
        int r = real_epoll_pwait(epfd, ev, max, timeout, mask);
        return r > 0 ? strip_wake(ev, r) : r;
    }
    sigset_t old;
    wait_signals_arm();
    if (mask)
        pthread_sigmask(SIG_SETMASK, mask, &old);
    int r = pre_epoll_wait(epfd, ev, max, timeout);
    int er = errno;
    wait_signals_armed = false;
    if (mask)
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = er;
    return r;
}

int pre_epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *t, const sigset_t *mask)
{
    struct pfd *e = pfd_get(epfd);
    if (!e || e->kind != PFD_EPOLL || !g_pre.stack || e->ep->n == 0) {
        int r = real_epoll_pwait2(epfd, ev, max, t, mask);
        return r > 0 ? strip_wake(ev, r) : r;
    }
    int ms = t ? (int)(t->tv_sec * 1000 + (t->tv_nsec + 999999) / 1000000) : -1;
    return pre_epoll_pwait(epfd, ev, max, ms, mask);
}
