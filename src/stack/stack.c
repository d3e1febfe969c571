/* The stack object: arena layout, ports and steering per interface, the poll loop that moves
 * frames between the rings and the protocol layers, and the UDP entry points. The poll loop is
 * the one place that reads the clock; protocol code gets `now` from it. */
#include "stack/stack.h"

#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <linux/rtnetlink.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <pthread.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <limits.h>
#include <linux/futex.h>
#include <time.h>
#include <unistd.h>

#include "base/env.h"
#include "base/log.h"
#include "ctl/ctl.h"
#include "ip/ip.h"
#include "pkt/pkt.h"
#include "stack/arena.h"
#include "stack/fault.h"
#include "stack/kfd.h"
#include "stack/guard.h"
#include "stack/lock.h"
#include "stack/proc.h"
#include "stack/socktab.h"
#include "tcp/tcp.h"
#include "tcp/tcp_fsm.h"
#include "udp/udp.h"

#define SLIP_SHM_MAGIC   0x736c6970737472ull    /* "slipstr" */
#define SLIP_SHM_VERSION 9   /* 7: reassembly eviction state; 8: stack.kfd_refused; 9: tables sized at run time */
#define CTL_POLL_INTERVAL (2 * SLIP_MSEC)

#define STACK_COUNTERS(X) X(polls) X(rx_bursts) X(rx_frames) X(rx_other_proto) X(tcp_wakeups) X(kfd_refused)

struct stack_counters {
#define STACK_COUNTER_FIELD(n) uint64_t n;
    STACK_COUNTERS(STACK_COUNTER_FIELD)
#undef STACK_COUNTER_FIELD
};

/* Table sizes: SLIP_MAX_CONNS and SLIP_MAX_UDP. Their regions are sized for the maximum but
 * only touched as sockets come (see slip_arena__create), so the default is generous. */
#define SLIP_MAX_CONNS_DEFAULT 131072
#define SLIP_MAX_UDP_DEFAULT   8192

/* Head of the arena. Offsets locate every region. */
struct slip_shm {
    uint64_t magic;
    uint32_t version;
    uint32_t nframes;
    uint32_t frame_size;
    uint32_t headroom;
    struct slip_lock lock;
    uint64_t off_umem, off_pool, off_meta, off_ctl, off_ip;
    struct slip_socktab_layout tabs;    /* the tables sized by SLIP_MAX_CONNS / SLIP_MAX_UDP */
    struct stack_counters c;
    slip_time_t last_poll;      /* when any process last ran the poll loop */
    uint32_t last_holder;       /* pid that held the lock last */
    uint32_t sleepers;          /* application threads asleep on the wait fds */
    uint32_t tres_pending;      /* closed connections whose resources wait for the engine */
    uint32_t tres_seen;         /* the engine's freed_seq the last reap looked at */
    uint32_t ncork;             /* connections in the cork list (sends held for the next kick) */
    /* What another process needs to attach (exec'd images): the configuration's numbers and
     * the interfaces with their queue counts. */
    uint32_t ring_size, burst, nifs;
    uint32_t ifindex[SLIP_MAX_IFACES], nq[SLIP_MAX_IFACES];
    char ifname[SLIP_MAX_IFACES][16];
    struct slip_procs procs;    /* who holds which references and reservation sockets */
};

struct stack_iface {
    char name[IF_NAMESIZE];
    uint32_t ifindex;
    struct steer *steer;
    unsigned nq;
    struct xsk_port *ports[SLIP_MAX_QUEUES];
};

struct slip_stack {
    struct slip_config cfg;
    struct slip_arena arena;
    struct slip_shm *shm;
    struct pkt_pool pool;
    struct xsk_umem_area *umem;
    struct ctl *ctl;
    struct ctl_tables *ctl_t;
    struct ip_shared *ip;
    struct udp_shared *udp;
    struct stack_iface ifs[SLIP_MAX_IFACES];
    unsigned nifs;
    struct ip_txq txq[SLIP_MAX_IFACES];
    struct ip_env env;
    int epfd;
    slip_time_t ctl_next;
    slip_time_t next_deadline;  /* from the last poll */
    int doorbell;               /* eventfd: a helper thread's poll made something ready */
    int accept_bell;            /* eventfd: a poll made a listener ready (listener-only sets) */
    uint32_t accept_sleepers;   /* threads of this process asleep on accept_bell */
    struct fault fault;         /* test-only receive impairments (SLIP_FAULT_*) */
    struct tcp_shared *tcp;
    struct slip_socktab t;      /* the sized tables (socktab.h) */
    int proc;                   /* this process's slot in shm->procs, -1 without one */
    bool reap_ok;               /* /proc tells process start times here: dead holders can be found */
    slip_time_t reap_next;
    bool guard;                 /* the stack's guardian (guard.c): no slot, no reservation fds */
};



static void doorbell_open(struct slip_stack *s);

/* This process's pid, cached (glibc no longer does) and updated in fork children. */
static pid_t g_pid;

static void pid_refresh(void)
{
    g_pid = getpid();
}

/* The stacks this process has open or attached. */
static struct slip_stack *g_stacks[4];

/* In a fork child: frames another thread of the parent had batched for transmission (the
 * process-local TX batch, the fault injector's held frames) are the parent's, who sends or frees
 * them; a copy here would send them again later and free them twice. */
static void atfork_child(void)
{
    pid_refresh();
    for (unsigned k = 0; k < SLIP_ARRAY_SIZE(g_stacks); k++) {
        struct slip_stack *s = g_stacks[k];
        if (!s)
            continue;
        for (unsigned i = 0; i < SLIP_MAX_IFACES; i++)
            s->txq[i].n = 0;
        s->fault.nheld = 0;
        s->accept_sleepers = 0;     /* the parent's sleeping threads are not the child's */
    }
}

static void stacks_register(struct slip_stack *s)
{
    static bool atfork_done;
    if (!atfork_done) {
        pthread_atfork(NULL, NULL, atfork_child);
        atfork_done = true;
    }
    for (unsigned k = 0; k < SLIP_ARRAY_SIZE(g_stacks); k++)
        if (!g_stacks[k]) {
            g_stacks[k] = s;
            return;
        }
}

static void stacks_unregister(struct slip_stack *s)
{
    for (unsigned k = 0; k < SLIP_ARRAY_SIZE(g_stacks); k++)
        if (g_stacks[k] == s)
            g_stacks[k] = NULL;
}

/* Just took the lock: record the owner and, when another process held it last, reload the
 * rings' cached indices in this process (see xsk_port__resync). */
static void proc_drain_closeq(struct slip_stack *s);

/* Closes a port-reservation fd whose number came from shared memory, only if this process made
 * or inherited it as one (kfd.h); anything else is counted and left open. */
static void kfd_close(struct slip_stack *s, int fd)
{
    if (fd > 0 && slip_kfd__close(fd) < 0)      /* 0: none (socktab.h) */
        s->shm->c.kfd_refused++;
}

static void stack_locked_by_us(struct slip_stack *s)
{
    s->shm->lock.owner_pid = (uint32_t)g_pid;
    if (s->proc >= 0 && s->shm->procs.p[s->proc].closeq_n)
        proc_drain_closeq(s);
    if (s->shm->last_holder != (uint32_t)g_pid) {
        for (unsigned i = 0; i < s->nifs; i++)
            for (unsigned q = 0; q < s->ifs[i].nq; q++)
                if (s->ifs[i].ports[q])
                    xsk_port__resync(s->ifs[i].ports[q]);
        s->shm->last_holder = (uint32_t)g_pid;
    }
}

/* Takes the stack lock. When another process held it last, the rings' cached indices in this
 * process are stale: reload them (see xsk_port__resync). */
static void stack_lock(struct slip_stack *s)
{
    slip_lock__acquire(&s->shm->lock);
    stack_locked_by_us(s);
}

static void stack_unlock(struct slip_stack *s)
{
    slip_lock__release(&s->shm->lock);
}

/* ---- processes sharing the stack (see proc.h) ---- */

/* Takes slot `want` when it was reserved for this process (fork child, exec'd or spawned image)
 * or already is ours (exec keeps the pid), else any free slot. Without a slot the process still
 * works; only its references cannot be reclaimed if it dies. */
static void proc_register(struct slip_stack *s, int want)
{
    struct slip_procs *t = &s->shm->procs;
    s->reap_ok = slip_proc__start_time(g_pid) != 0;
    s->proc = -1;
    if (want >= 0 && want < SLIP_PROC_MAX) {
        int32_t cur = __atomic_load_n(&t->p[want].pid, __ATOMIC_ACQUIRE);
        if (cur == SLIP_PROC_RESERVED || cur == (int32_t)g_pid) {
            slip_procs__bind(t, want, g_pid);
            s->proc = want;
            return;
        }
    }
    int i = slip_procs__find(t, g_pid);
    if (i < 0)
        i = slip_procs__claim(t, g_pid);
    if (i < 0)
        slip_warn("more than %d processes share the stack: sockets of this one (pid %d) are not released if it dies",
                  SLIP_PROC_MAX, (int)g_pid);
    s->proc = i;
}

/* Lock held: close the copies of reservation sockets that other processes released. */
static void proc_drain_closeq(struct slip_stack *s)
{
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
static void proc_kfd_hold(struct slip_stack *s, unsigned i)
{
    for (int k = 0; k < SLIP_PROC_MAX; k++)
        if (k != s->proc && proc_in_use(s, k) && held_test(s, k, i))
            proc_held(s, k)[i / 64] &= ~(1ull << (i % 64));
    if (s->proc >= 0)
        proc_held(s, s->proc)[i / 64] |= 1ull << (i % 64);
}

/* Lock held: the reservation socket fd of TCP slot i is released. Every process with a copy
 * closes its own: this one now, the others on their next turn with the lock (a dead one's copy
 * went with it). Without slots (table full), only this process's copy can be closed. */
static void proc_kfd_drop(struct slip_stack *s, unsigned i, int fd)
{
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

unsigned slip_config__default_ifaces(char names[][IF_NAMESIZE], unsigned max)
{
    struct ifaddrs *ifa;
    unsigned n = 0;
    if (getifaddrs(&ifa) < 0)
        return 0;
    for (struct ifaddrs *i = ifa; i && n < max; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK) ||
            !(i->ifa_flags & IFF_UP))
            continue;
        bool dup = false;
        for (unsigned k = 0; k < n; k++)
            dup |= !strcmp(names[k], i->ifa_name);
        if (!dup)
            snprintf(names[n++], IF_NAMESIZE, "%s", i->ifa_name);
    }
    freeifaddrs(ifa);
    return n;
}

void slip_config__defaults(struct slip_config *c)
{
    memset(c, 0, sizeof(*c));
    c->frame_size = 4096;
    c->ring_size = 2048;
    c->burst = XSK_BURST_DEFAULT;
    c->bind = XSK_BIND_AUTO;
    c->xdp = STEER_XDP_AUTO;
    c->busy_poll_budget = 64;
    c->max_conns = SLIP_MAX_CONNS_DEFAULT;
    c->max_udp = SLIP_MAX_UDP_DEFAULT;
}

/* Every SLIP_* variable the stack reads goes through the one table and parser (base/env.h). */
_Static_assert(SLIP_MAX_IFACES == 4, "SLIP_IFACES's row in base/env_vars.h says 4 interfaces");

int slip_config__from_env(struct slip_config *c, char *err, size_t errlen)
{
    static const enum xsk_bind_mode binds[] = { XSK_BIND_AUTO, XSK_BIND_COPY, XSK_BIND_ZEROCOPY };
    static const enum steer_xdp_mode modes[] = { STEER_XDP_AUTO, STEER_XDP_NATIVE, STEER_XDP_GENERIC };
    uint64_t frame, ring, burst, busy, budget, bind, xdp, maxc, maxu;
    int rc;
    if ((rc = slip_env__get(SLIP_ENV_FRAME_SIZE, &frame, err, errlen)) < 0 ||
        (rc = slip_env__get(SLIP_ENV_RING_SIZE, &ring, err, errlen)) < 0 ||
        (rc = slip_env__get(SLIP_ENV_BURST, &burst, err, errlen)) < 0 ||
        (rc = slip_env__get(SLIP_ENV_BUSY_POLL, &busy, err, errlen)) < 0 ||
        (rc = slip_env__get(SLIP_ENV_BUSY_POLL_BUDGET, &budget, err, errlen)) < 0 ||
        (rc = slip_env__get(SLIP_ENV_BIND, &bind, err, errlen)) < 0 ||
        (rc = slip_env__get(SLIP_ENV_XDP_MODE, &xdp, err, errlen)) < 0 ||
        (rc = slip_env__get(SLIP_ENV_MAX_CONNS, &maxc, err, errlen)) < 0 ||
        (rc = slip_env__get(SLIP_ENV_MAX_UDP, &maxu, err, errlen)) < 0)
        return rc;
    /* The table bounds every number below 2^32 and every index to its choices. */
    c->frame_size = (uint32_t)frame;
    c->ring_size = (uint32_t)ring;
    c->burst = (uint32_t)burst;
    c->busy_poll_usec = (uint32_t)busy;
    c->busy_poll_budget = (uint32_t)budget;
    c->busy_poll = c->busy_poll_usec > 0;
    c->max_conns = (uint32_t)maxc;
    c->max_udp = (uint32_t)maxu;
    c->bind = binds[bind];
    c->xdp = modes[xdp];
    return 0;
}

/* RX queues of an interface, from sysfs (what the driver exposes to XDP). */
static unsigned count_rx_queues(const char *ifname)
{
    char path[128];
    snprintf(path, sizeof(path), "/sys/class/net/%s/queues", ifname);
    DIR *d = opendir(path);
    unsigned n = 0;
    if (!d)
        return 1;
    for (struct dirent *e; (e = readdir(d));)
        n += !strncmp(e->d_name, "rx-", 3);
    closedir(d);
    return n ? n : 1;
}

static void env_refresh(struct slip_stack *s, slip_time_t now)
{
    s->env.now = now;
}

/* The per-call context of the protocol layers and the epoll set slip_stack__wait sleeps on. */
static int env_and_epoll_setup(struct slip_stack *s)
{
    s->env.pool = &s->pool;
    s->env.sh = s->ip;
    s->env.ctl_t = s->ctl_t;
    s->env.ctl = s->ctl;
    s->env.txq = s->txq;
    s->env.ntxq = s->nifs;
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (s->epfd < 0)
        return -errno;
    struct epoll_event ev = { .events = EPOLLIN };
    for (unsigned i = 0; i < s->nifs; i++)
        for (unsigned q = 0; q < s->ifs[i].nq; q++)
            epoll_ctl(s->epfd, EPOLL_CTL_ADD, xsk_port__fd(s->ifs[i].ports[q]), &ev);
    epoll_ctl(s->epfd, EPOLL_CTL_ADD, ctl__fd(s->ctl), &ev);
    return 0;
}

int slip_stack__open(struct slip_stack **out, const struct slip_config *cfg, char *err, size_t errlen)
{
    struct slip_stack *s = calloc(1, sizeof(*s));
    unsigned nports = 0;
    int rc = -EINVAL;

    if (!s)
        return -ENOMEM;
    pid_refresh();
    s->cfg = *cfg;
    s->proc = -1;
    s->epfd = -1;
    s->doorbell = -1;
    s->arena.memfd = -1;
    doorbell_open(s);
    rc = fault__init(&s->fault, err, errlen);
    if (rc < 0)
        goto fail;
    if (s->fault.on)
        slip_warn("fault injection on: drop %u, duplicate %u, reorder %u per million received frames",
                  s->fault.drop_ppm, s->fault.dup_ppm, s->fault.reorder_ppm);
    if (cfg->nifaces == 0 || cfg->nifaces > SLIP_MAX_IFACES) {
        snprintf(err, errlen, "need 1 to %d interfaces, got %u", SLIP_MAX_IFACES, cfg->nifaces);
        goto fail;
    }
    for (unsigned i = 0; i < cfg->nifaces; i++) {
        struct stack_iface *f = &s->ifs[i];
        if (strlen(cfg->ifnames[i]) >= IF_NAMESIZE || !(f->ifindex = if_nametoindex(cfg->ifnames[i]))) {
            snprintf(err, errlen, "interface '%s' does not exist", cfg->ifnames[i]);
            rc = -ENODEV;
            goto fail;
        }
        snprintf(f->name, sizeof(f->name), "%s", cfg->ifnames[i]);
        f->nq = SLIP_MIN(count_rx_queues(f->name), SLIP_MAX_QUEUES);
        nports += f->nq;
        s->nifs++;
    }

    /* Frames: every fill and TX ring full at once, plus as many again for socket queues,
     * reassembly and frames waiting for a neighbour. */
    uint32_t nframes = nports * 2 * cfg->ring_size + 2 * cfg->ring_size + 8192;
    size_t umem_bytes = (size_t)nframes * cfg->frame_size;
    uint32_t mc = cfg->max_conns ? cfg->max_conns : SLIP_MAX_CONNS_DEFAULT;
    uint32_t mu = cfg->max_udp ? cfg->max_udp : SLIP_MAX_UDP_DEFAULT;
    size_t hot = umem_bytes + 2 * 4096 + sizeof(struct slip_shm) + xsk_frame_pool__bytes(nframes) +
                 (size_t)nframes * sizeof(struct pkt_meta) + sizeof(struct ctl_tables) +
                 sizeof(struct ip_shared) + 4 * SLIP_CACHELINE;
    /* The tables sized for the maximum come last, never faulted in as a whole (socktab.h). */
    size_t total = hot + slip_socktab__bytes(mc, mu);
    rc = slip_arena__create(&s->arena, "slipstream-stack", total, hot);
    if (rc < 0) {
        snprintf(err, errlen, "cannot create the stack's shared memory (%zu MiB): %s", total >> 20, strerror(-rc));
        goto fail;
    }
    struct slip_arena *a = &s->arena;
    int64_t o_shm = slip_arena__carve(a, sizeof(struct slip_shm), 4096);
    int64_t o_umem = slip_arena__carve(a, umem_bytes, 4096);
    int64_t o_pool = slip_arena__carve(a, xsk_frame_pool__bytes(nframes), SLIP_CACHELINE);
    int64_t o_meta = slip_arena__carve(a, (size_t)nframes * sizeof(struct pkt_meta), SLIP_CACHELINE);
    int64_t o_ctl = slip_arena__carve(a, sizeof(struct ctl_tables), SLIP_CACHELINE);
    int64_t o_ip = slip_arena__carve(a, sizeof(struct ip_shared), SLIP_CACHELINE);
    struct slip_socktab_layout tabs;
    if (o_ip < 0 || slip_socktab__carve(&s->t, &tabs, a, mc, mu) < 0) {
        snprintf(err, errlen, "internal error: arena layout does not fit");
        rc = -ENOMEM;
        goto fail;
    }
    s->shm = slip_arena__ptr(a, (uint64_t)o_shm);
    s->shm->magic = SLIP_SHM_MAGIC;
    s->shm->version = SLIP_SHM_VERSION;
    s->shm->nframes = nframes;
    s->shm->frame_size = cfg->frame_size;
    s->shm->off_umem = (uint64_t)o_umem;
    s->shm->off_pool = (uint64_t)o_pool;
    s->shm->off_meta = (uint64_t)o_meta;
    s->shm->off_ctl = (uint64_t)o_ctl;
    s->shm->off_ip = (uint64_t)o_ip;
    s->shm->tabs = tabs;
    s->shm->ring_size = cfg->ring_size;
    s->shm->burst = cfg->burst;
    s->shm->nifs = s->nifs;
    for (unsigned i = 0; i < s->nifs; i++) {
        s->shm->ifindex[i] = s->ifs[i].ifindex;
        s->shm->nq[i] = s->ifs[i].nq;
        snprintf(s->shm->ifname[i], sizeof(s->shm->ifname[i]), "%s", s->ifs[i].name);
    }
    slip_lock__init(&s->shm->lock);
    s->udp = s->t.udp;
    s->tcp = s->t.tcp;
    proc_register(s, -1);

    s->pool.umem = slip_arena__ptr(a, (uint64_t)o_umem);
    s->pool.frames = slip_arena__ptr(a, (uint64_t)o_pool);
    s->pool.meta = slip_arena__ptr(a, (uint64_t)o_meta);
    s->pool.frame_size = cfg->frame_size;
    s->pool.headroom = 0;
    s->pool.nframes = nframes;
    s->ctl_t = slip_arena__ptr(a, (uint64_t)o_ctl);
    s->ip = slip_arena__ptr(a, (uint64_t)o_ip);
    ip_shared__init(s->ip, nframes / 8);
    udp_shared__init(s->udp, mu);
    uint8_t key[32];
    if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key)) {
        rc = -errno;
        snprintf(err, errlen, "getrandom: %s", strerror(errno));
        goto fail;
    }
    tcp_shared__init(s->tcp, mc, key);

    rc = ctl__open(&s->ctl, s->ctl_t);
    if (rc < 0) {
        snprintf(err, errlen, "cannot read the kernel's addresses and routes over netlink: %s", strerror(-rc));
        goto fail;
    }

    struct xsk_umem_area_config ucfg = {
        .frame_size = cfg->frame_size, .nframes = nframes,
        .fill_size = cfg->ring_size, .comp_size = cfg->ring_size, .headroom = 0,
    };
    rc = xsk_umem_area__create(&s->umem, s->pool.umem, &ucfg, s->pool.frames, err, errlen);
    if (rc < 0)
        goto fail;

    for (unsigned i = 0; i < s->nifs; i++) {
        struct stack_iface *f = &s->ifs[i];
        rc = steer__attach(&f->steer, f->name, cfg->xdp, mc + mu, err, errlen);
        if (rc < 0)
            goto fail;
        for (unsigned q = 0; q < f->nq; q++) {
            struct xsk_port_config pc = {
                .ifname = f->name, .queue_id = q, .rx_size = cfg->ring_size, .tx_size = cfg->ring_size,
                .burst = cfg->burst, .mode = cfg->bind, .need_wakeup = true, .busy_poll = cfg->busy_poll,
                .busy_poll_usec = cfg->busy_poll_usec, .busy_poll_budget = cfg->busy_poll_budget,
            };
            rc = xsk_port__create(&f->ports[q], s->umem, &pc, err, errlen);
            if (rc < 0)
                goto fail;
            rc = steer__set_xsk(f->steer, q, xsk_port__fd(f->ports[q]));
            if (rc < 0) {
                snprintf(err, errlen, "cannot register the AF_XDP socket of %s queue %u: %s", f->name, q, strerror(-rc));
                goto fail;
            }
        }
        s->txq[i].port = f->ports[0];
        s->txq[i].ifindex = f->ifindex;
    }

    rc = env_and_epoll_setup(s);
    if (rc < 0) {
        snprintf(err, errlen, "epoll_create1: %s", strerror(-rc));
        goto fail;
    }
    slip_info("stack up: %u interface(s), %u AF_XDP socket(s), %u frames of %u bytes, %u TCP connections, "
              "%u UDP sockets", s->nifs, nports, nframes, cfg->frame_size, mc, mu);
    stacks_register(s);
    *out = s;
    return 0;

fail:
    slip_stack__close(s);
    return rc;
}

void slip_stack__close(struct slip_stack *s)
{
    if (!s)
        return;
    stacks_unregister(s);       /* a later fork must not touch it (atfork_child) */
    if (s->t.us && s->udp)
        for (unsigned i = 0; i < slip_socktab__udp_high(&s->t); i++)
            if (s->t.us[i].kfd > 0)
                kfd_close(s, s->t.us[i].kfd);
    if (s->t.ts && s->tcp)
        for (unsigned i = 0; i < slip_socktab__tcp_high(&s->t); i++)
            if (s->t.ts[i].res.kfd > 0)
                kfd_close(s, s->t.ts[i].res.kfd);
    if (s->tcp && s->pool.frames)
        tcp_shared__purge(s->tcp, &s->pool);
    if (s->epfd >= 0)
        close(s->epfd);
    if (s->doorbell >= 0)
        close(s->doorbell);
    if (s->accept_bell >= 0)
        close(s->accept_bell);
    if (s->fault.nheld) {
        for (unsigned i = 0; i < s->fault.nheld; i++)
            pkt__free_chain(&s->pool, s->fault.held[i].pkt);
        s->fault.nheld = 0;
    }
    for (unsigned i = 0; i < s->nifs; i++) {
        struct stack_iface *f = &s->ifs[i];
        /* Detach first so the kernel stops redirecting to sockets about to close. */
        if (f->steer)
            steer__detach(f->steer);
        for (unsigned q = 0; q < f->nq; q++)
            if (f->ports[q])
                xsk_port__destroy(f->ports[q]);
    }
    if (s->umem)
        xsk_umem_area__destroy(s->umem);
    if (s->ctl)
        ctl__close(s->ctl);
    slip_arena__destroy(&s->arena);
    free(s);
}

static void rx_deliver(struct slip_stack *s, slip_idx_t p, uint32_t ifindex)
{
    struct ip_rx rx;
    if (!ip_input(&s->env, p, ifindex, &rx))
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

/* Delivers held (reordered) frames that waited long enough, or all of them when `all`. */
static void fault_release(struct slip_stack *s, bool all)
{
    struct fault *f = &s->fault;
    unsigned k = 0;
    for (unsigned i = 0; i < f->nheld; i++) {
        if (all || f->held[i].passed >= FAULT_DEPTH || f->held[i].until <= s->env.now)
            rx_deliver(s, f->held[i].pkt, f->held[i].ifindex);
        else
            f->held[k++] = f->held[i];
    }
    f->nheld = k;
}

static void rx_frame(struct slip_stack *s, uint64_t addr, uint32_t len, uint32_t ifindex)
{
    slip_idx_t p = pkt__adopt(&s->pool, addr, len);
    pkt__meta(&s->pool, p)->stamp = s->env.now;
    if (SLIP_LIKELY(!s->fault.on)) {
        rx_deliver(s, p, ifindex);
        return;
    }
    struct fault *f = &s->fault;
    switch (fault__decide(f)) {
    case FAULT_DROP:
        f->dropped++;
        pkt__free_chain(&s->pool, p);
        return;
    case FAULT_DUP: {
        slip_idx_t c = pkt__alloc(&s->pool);
        if (c != SLIP_NIL) {
            f->duplicated++;
            memcpy(pkt__data(&s->pool, c), pkt__data(&s->pool, p), len);
            pkt__meta(&s->pool, c)->len = (uint16_t)len;
            rx_deliver(s, c, ifindex);
        }
        break;
    }
    case FAULT_HOLD:
        if (f->nheld < FAULT_MAX_HELD) {
            f->reordered++;
            f->held[f->nheld].pkt = p;
            f->held[f->nheld].ifindex = ifindex;
            f->held[f->nheld].passed = 0;
            f->held[f->nheld].until = s->env.now + FAULT_HOLD_NS;
            f->nheld++;
            return;
        }
        break;
    case FAULT_PASS:
        break;
    }
    rx_deliver(s, p, ifindex);
    for (unsigned i = 0; i < f->nheld; i++)
        f->held[i].passed++;
    fault_release(s, false);
}

static void steer_tcp_key(struct steer_key *k, const struct tcp_res *r)
{
    memset(k, 0, sizeof(*k));
    k->proto = IPPROTO_TCP;
    k->laddr = r->laddr;
    k->lport = hton16(r->lport);
    if (r->key == 2) {
        k->raddr = r->raddr;
        k->rport = hton16(r->rport);
    }
}

/* Lock held. */
static int tcp_res_claim(struct slip_stack *s, struct tcp_res *r)
{
    struct steer_key k;
    struct steer_val v = { .stack_id = (uint32_t)g_pid };
    int rc = 0;
    steer_tcp_key(&k, r);
    for (unsigned i = 0; i < s->nifs && rc == 0; i++)
        rc = steer__add(s->ifs[i].steer, &k, &v);
    return rc;
}

/* Lock held. True when another listener of a SO_REUSEPORT group still needs r's listen key. */
static bool tcp_res_key_shared(struct slip_stack *s, const struct tcp_res *r)
{
    if (r->key != 1)
        return false;
    for (unsigned i = 0; i < slip_socktab__tcp_high(&s->t); i++) {
        const struct tcp_res *o = &s->t.ts[i].res;
        if (o != r && o->key == 1 && o->lport == r->lport && o->laddr == r->laddr)
            return true;
    }
    return false;
}

/* Lock held. */
static void tcp_res_release(struct slip_stack *s, struct tcp_res *r)
{
    if (r->key && !tcp_res_key_shared(s, r)) {
        struct steer_key k;
        steer_tcp_key(&k, r);
        for (unsigned i = 0; i < s->nifs; i++)
            steer__del(s->ifs[i].steer, &k);
    }
    if (r->kfd > 0)
        proc_kfd_drop(s, (unsigned)((const struct tcp_side *)(const void *)r - s->t.ts), r->kfd);
    if (r->pending)
        s->shm->tres_pending--;
    memset(r, 0, sizeof(*r));
}

/* True when the engine no longer holds the connection these resources belong to. */
static bool tcp_res_done(struct slip_stack *s, unsigned i)
{
    const struct tcp_conn *c = &s->tcp->conns[i];
    const struct tcp_res *r = &s->t.ts[i].res;
    return c->state == TCPS_CLOSED || c->lport != r->lport || c->rport != r->rport || c->raddr != r->raddr;
}

/* Lock held. A pending connection's resources go when the engine frees its slot: only the
 * slots freed since the last reap are looked at (every slot when more than the engine's ring
 * holds were freed since). Every poll runs this; scanning the whole table there cost a client
 * making new connections 5 % of its core (the slots of its LAST_ACK connections are anywhere). */
static void tcp_res_reap(struct slip_stack *s)
{
    uint32_t seq = s->tcp->freed_seq, seen = s->shm->tres_seen;
    s->shm->tres_seen = seq;
    if (!s->shm->tres_pending || seq == seen)
        return;
    if (seq - seen > TCP_FREED_RING) {
        for (unsigned i = 0; i < slip_socktab__tcp_high(&s->t) && s->shm->tres_pending; i++)
            if (s->t.ts[i].res.pending && tcp_res_done(s, i))
                tcp_res_release(s, &s->t.ts[i].res);
        return;
    }
    for (uint32_t k = seen; k != seq && s->shm->tres_pending; k++) {
        slip_idx_t i = tcp__freed_slot(s->tcp, k);
        if (i < s->t.max_conns && s->t.ts[i].res.pending && tcp_res_done(s, i))
            tcp_res_release(s, &s->t.ts[i].res);
    }
}

/* Lock held, before a kick: what sends held back for it (autocork) goes out now. */
static void uncork_all(struct slip_stack *s)
{
    for (uint32_t k = 0; k < s->shm->ncork && k < s->t.max_conns; k++)
        if (s->t.cork[k] < s->t.max_conns)
            tcp_conn__uncork(&s->env, s->tcp, s->t.cork[k]);
    s->shm->ncork = 0;
}

/* Lock held. */
static slip_time_t poll_locked(struct slip_stack *s)
{
    struct xsk_frame f[256];
    slip_time_t now = slip_stack__now();
    unsigned burst = SLIP_MIN(s->cfg.burst, SLIP_ARRAY_SIZE(f));

    env_refresh(s, now);
    s->shm->c.polls++;
    s->shm->last_poll = now;
    /* Frames a deferring thread left on the TX rings go first: on veth the peer's answer (an
     * ACK, a RST) comes back inside the kick, and this poll then sees it, as the kernel's socket
     * would have by the time its send() returned. */
    bool corked = s->shm->ncork != 0;  /* their segments are built now, not yet on a ring */
    uncork_all(s);
    for (unsigned i = 0; i < s->nifs; i++)
        for (unsigned q = 0; q < s->ifs[i].nq; q++)
            if (corked || xsk_port__tx_queued(s->ifs[i].ports[q])) {
                ip_output__flush(&s->env);
                i = s->nifs;
                break;
            }
    if (now >= s->ctl_next) {
        ctl__process(s->ctl);
        s->ctl_next = now + CTL_POLL_INTERVAL;
    }
    for (unsigned i = 0; i < s->nifs; i++) {
        struct stack_iface *fc = &s->ifs[i];
        for (unsigned q = 0; q < fc->nq; q++) {
            unsigned n = xsk_port__rx_burst(fc->ports[q], f, burst);
            if (!n)
                continue;
            s->shm->c.rx_bursts++;
            s->shm->c.rx_frames += n;
            for (unsigned k = 0; k < n; k++)
                rx_frame(s, f[k].addr, f[k].len, fc->ifindex);
        }
    }
    slip_time_t next = tcp_timer__poll(&s->env, s->tcp);
    next = SLIP_MIN(next, ip_neigh__service(&s->env));
    /* The engine's wake list tells which connections had an event: count them per connection,
     * which is what edge-triggered epoll reports. */
    for (slip_idx_t w; (w = tcp__next_wakeup(s->tcp)) != SLIP_NIL;) {
        s->shm->c.tcp_wakeups++;
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
                s->tcp->conns[w].state == TCPS_LISTEN)
                slip_stack__ring_accept_bell(s);
        }
    }
    tcp_res_reap(s);
    if (s->fault.nheld) {
        fault_release(s, false);
        for (unsigned i = 0; i < s->fault.nheld; i++)
            next = SLIP_MIN(next, s->fault.held[i].until);
    }
    next = SLIP_MIN(next, ip_reass__expire(&s->env));
    uncork_all(s);
    ip_output__flush(&s->env);
    for (unsigned i = 0; i < s->nifs; i++)
        for (unsigned q = 0; q < s->ifs[i].nq; q++)
            xsk_port__complete(s->ifs[i].ports[q]);
    /* While a neighbour is being resolved, watch the kernel's table closely. */
    if (s->ip->neigh_pending) {
        s->ctl_next = SLIP_MIN(s->ctl_next, now + 100 * SLIP_USEC);
        next = SLIP_MIN(next, s->ctl_next);
    }
    return next;
}

/* Rings an eventfd bell (the doorbell, the accept bell); nobody reads them, sleepers watch them
 * edge-triggered. */
static void bell_ring(int fd)
{
    uint64_t one = 1;
    if (fd >= 0 && write(fd, &one, sizeof(one)) < 0) {
        /* saturated: the sleepers are awake anyway */
    }
}

static void ring_doorbell(struct slip_stack *s)
{
    bell_ring(s->doorbell);
}

void slip_stack__sleepers(struct slip_stack *s, int delta)
{
    __atomic_add_fetch(&s->shm->sleepers, (uint32_t)delta, __ATOMIC_ACQ_REL);
}

slip_time_t slip_stack__poll(struct slip_stack *s)
{
    stack_lock(s);
    uint64_t before = s->shm->c.rx_frames + s->shm->c.tcp_wakeups;
    slip_time_t next = poll_locked(s);
    s->next_deadline = next;
    /* What this poll delivered may be for a thread asleep on fds whose readiness it consumed
     * (the AF_XDP RX ring): wake the sleepers, which look again. */
    if (s->shm->c.rx_frames + s->shm->c.tcp_wakeups != before &&
        __atomic_load_n(&s->shm->sleepers, __ATOMIC_ACQUIRE))
        ring_doorbell(s);
    stack_unlock(s);
    return next;
}

static void doorbell_open(struct slip_stack *s)
{
    s->doorbell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->accept_bell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
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

/* Processes attached to the stack (slots with a pid). */
static unsigned procs_live(const struct slip_stack *s)
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
    errno = saved;
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
static bool tx_deferring(struct slip_stack *s)
{
    if (!t_tx_defer)
        return false;
    slip_time_t now = s->env.now;
    __atomic_store_n(&g_defer_wanted, now, __ATOMIC_RELAXED);
    /* Only while the progress thread is due soon; otherwise the caller kicks now (and the
     * progress thread, seeing g_defer_wanted, shortens its sleeps). */
    return __atomic_load_n(&g_progress_pid, __ATOMIC_ACQUIRE) == g_pid &&
           __atomic_load_n(&g_progress_due, __ATOMIC_ACQUIRE) <= now + TX_DEFER_BOUND;
}

/* Lock held, after a send, receive or close: kick now, or leave the frames for the next poll. */
static void tx_done(struct slip_stack *s)
{
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
    __atomic_store_n(&g_progress_pid, g_pid, __ATOMIC_RELEASE);
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
            any = xsk_port__tx_queued(s->ifs[i].ports[q]) != 0;
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
    uint64_t before = s->shm->c.rx_frames + s->shm->c.tcp_wakeups;
    s->next_deadline = poll_locked(s);
    /* As in slip_stack__poll: what this poll delivered may be for a sleeping thread. */
    if (s->shm->c.rx_frames + s->shm->c.tcp_wakeups != before &&
        __atomic_load_n(&s->shm->sleepers, __ATOMIC_ACQUIRE))
        ring_doorbell(s);
    stack_unlock(s);
    return 0;
}

int slip_stack__wait_fds(struct slip_stack *s, int *fds, int max)
{
    int n = 0;
    if (s->doorbell >= 0 && n < max)
        fds[n++] = s->doorbell;
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

uint32_t slip_sock__evgen(struct slip_stack *s, bool tcp, int sock)
{
    if (tcp)
        return __atomic_load_n(&s->t.ts[sock].evgen, __ATOMIC_RELAXED);
    return (uint32_t)s->udp->socks[sock].rx_datagrams;
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
        /* the travelling reference is now ours: give back the sender's (the total stays) */
        if (from >= 0 && from < SLIP_PROC_MAX)
            __atomic_sub_fetch(tcp ? &proc_tcp(s, from)[sock] : &proc_udp(s, from)[sock], 1, __ATOMIC_RELAXED);
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

/* Gives back everything slot c holds; closes the sockets whose last reference it was. */
static void proc_release_slot(struct slip_stack *s, int c)
{
    /* Only slots below the tables' high water can hold a count (see slip_proc__reserve). */
    uint32_t th = slip_socktab__tcp_high(&s->t), uh = slip_socktab__udp_high(&s->t);
    uint32_t *pt = proc_tcp(s, c), *pu = proc_udp(s, c);
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
        slip_procs__bind(&s->shm->procs, slot, g_pid);
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

/* Connections still delivering what the application wrote before closing: data or FIN not
 * acknowledged yet. */
static bool conn_unfinished(const struct tcp_conn *c)
{
    return c->state == TCPS_FIN_WAIT_1 || c->state == TCPS_CLOSING || c->state == TCPS_LAST_ACK ||
           ((c->state == TCPS_ESTABLISHED || c->state == TCPS_CLOSE_WAIT) && c->sndq.bytes);
}

static unsigned tcp_unfinished(struct slip_stack *s)
{
    unsigned n = 0;
    stack_lock(s);
    for (uint32_t i = 0; i < s->tcp->high_water; i++)
        n += conn_unfinished(&s->tcp->conns[i]);
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
    return __atomic_load_n(&s->shm->lock.owner_pid, __ATOMIC_ACQUIRE) == (uint32_t)g_pid;
}

void slip_stack__exit(struct slip_stack *s, int linger_ms, void (*tick)(struct slip_stack *s))
{
    /* exit() from inside the stack (a signal handler, another thread's abort): touch nothing. */
    if (slip_stack__held_here(s))
        return;
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

int slip_stack__wait(struct slip_stack *s, int timeout_ms)
{
    slip_time_t next = slip_stack__poll(s);
    slip_time_t now = slip_stack__now();
    int t = timeout_ms;
    if (next != SLIP_TIME_NEVER) {
        slip_time_t d = next > now ? (next - now + SLIP_MSEC - 1) / SLIP_MSEC : 0;
        if (t < 0 || (slip_time_t)t > d)
            t = (int)d;
    }
    struct epoll_event ev[8];
    int n = epoll_wait(s->epfd, ev, 8, t);
    if (n < 0 && errno != EINTR)
        return -errno;
    slip_stack__poll(s);
    return n < 0 ? 0 : n;
}

/* ---- counters ---- */

struct counter_sink {
    FILE *f;
    const char *want;
    uint64_t *out;
    bool found;
};

static void emit(struct counter_sink *k, const char *name, uint64_t v)
{
    if (k->f)
        fprintf(k->f, "%s %llu\n", name, (unsigned long long)v);
    if (k->want && !strcmp(k->want, name)) {
        *k->out = v;
        k->found = true;
    }
}

static void walk_counters(struct slip_stack *s, struct counter_sink *k)
{
    char name[96];
#define EMIT_STACK(n) emit(k, "stack." #n, s->shm->c.n);
    STACK_COUNTERS(EMIT_STACK)
#define EMIT_IP(n) emit(k, "ip." #n, s->ip->c.n);
    IP_COUNTERS(EMIT_IP)
#define EMIT_UDP(n) emit(k, "udp." #n, s->udp->c.n);
    UDP_COUNTERS(EMIT_UDP)
    emit(k, "udp.sockets", s->udp->nused);
#define EMIT_TCP(n) emit(k, "tcp." #n, s->tcp->c.n);
    TCP_COUNTERS(EMIT_TCP)
    emit(k, "tcp.conns", s->tcp->nused);
    emit(k, "tcp.res_pending", s->shm->tres_pending);
    emit(k, "pool.frames", s->pool.nframes);
    emit(k, "pool.free", s->pool.frames->count);
    emit(k, "pool.low_water", s->pool.frames->low_water);
    uint64_t posted = 0;
    for (unsigned i = 0; i < s->nifs; i++)
        for (unsigned q = 0; q < s->ifs[i].nq; q++)
            posted += xsk_port__fill_posted(s->ifs[i].ports[q]);
    emit(k, "pool.fill_posted", posted);
    emit(k, "ip.reass_bufs", s->ip->reass_bufs);
    emit(k, "lock.contended", s->shm->lock.contended);
    emit(k, "lock.stolen", s->shm->lock.stolen);
    emit(k, "procs.live", procs_live(s));
    emit(k, "procs.reaped", s->shm->procs.reaped);
    emit(k, "procs.closeq_overflows", s->shm->procs.closeq_overflows);
    if (s->fault.on) {
        emit(k, "fault.dropped", s->fault.dropped);
        emit(k, "fault.duplicated", s->fault.duplicated);
        emit(k, "fault.reordered", s->fault.reordered);
    }
    for (unsigned i = 0; i < s->nifs; i++) {
        struct stack_iface *f = &s->ifs[i];
        uint64_t sc[STEER_C__MAX];
        if (steer__counters(f->steer, sc) == 0)
            for (int c = 0; c < STEER_C__MAX; c++) {
                snprintf(name, sizeof(name), "steer.%s.%s", f->name, steer__counter_name((enum steer_counter)c));
                emit(k, name, sc[c]);
            }
        for (unsigned q = 0; q < f->nq; q++) {
            struct xsk_port_stats st;
            if (xsk_port__stats(f->ports[q], &st) < 0)
                continue;
#define EMIT_XSK(n) snprintf(name, sizeof(name), "xsk.%s.q%u." #n, f->name, q); emit(k, name, st.n);
            EMIT_XSK(rx_dropped) EMIT_XSK(rx_invalid_descs) EMIT_XSK(tx_invalid_descs)
            EMIT_XSK(rx_ring_full) EMIT_XSK(rx_fill_ring_empty_descs) EMIT_XSK(tx_ring_empty_descs)
            EMIT_XSK(rx_packets) EMIT_XSK(tx_packets) EMIT_XSK(tx_kicks) EMIT_XSK(tx_kick_eagain)
            EMIT_XSK(tx_kick_ebusy) EMIT_XSK(tx_ring_full) EMIT_XSK(fill_pool_empty)
        }
    }
}

void slip_stack__dump(struct slip_stack *s, FILE *f)
{
    struct counter_sink k = { .f = f };
    stack_lock(s);
    walk_counters(s, &k);
    stack_unlock(s);
}

int slip_stack__counter(struct slip_stack *s, const char *name, uint64_t *out)
{
    struct counter_sink k = { .want = name, .out = out };
    stack_lock(s);
    walk_counters(s, &k);
    stack_unlock(s);
    return k.found ? 0 : -ENOENT;
}

/* ---- UDP entry points ---- */

/* A reservation socket is never fd 0 (0 marks "none" in the tables, whose untouched slots are
 * zeros): a program that closed its stdin gets the socket moved up. Negative errno passes. */
static int fd_above_stdio(int fd)
{
    if (fd < 0 || fd > 2)
        return fd < 0 ? -errno : fd;
    int d = fcntl(fd, F_DUPFD, 3);
    int e = errno;
    close(fd);
    return d < 0 ? -e : d;
}

static bool sock_ok(struct slip_stack *s, int sock)
{
    return sock >= 0 && (uint32_t)sock < s->t.max_udp && s->udp->socks[sock].state != UDPS_FREE;
}

int slip_udp__open(struct slip_stack *s)
{
    stack_lock(s);
    int rc = udp_sock__alloc(s->udp);
    stack_unlock(s);
    return rc;
}

static void steer_key(struct steer_key *k, be32 addr, uint16_t port)
{
    memset(k, 0, sizeof(*k));
    k->laddr = addr;
    k->lport = hton16(port);
    k->proto = IPPROTO_UDP;
}

int slip_udp__bind(struct slip_stack *s, int sock, be32 addr, uint16_t port)
{
    return slip_udp__bind_kfd(s, sock, addr, port, -1);
}

static int udp_bind_claim(struct slip_stack *s, int sock, be32 addr, uint16_t port, int kfd, int app_kfd);

int slip_udp__bind_kfd(struct slip_stack *s, int sock, be32 addr, uint16_t port, int app_kfd)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    /* The kernel socket holds the port for us: kernel applications cannot take it, and port 0
     * gets an ephemeral port from the kernel's own range. The application's own kernel socket
     * does it when there is one (the POSIX layer); else we make one. */
    int kfd = app_kfd >= 0 ? app_kfd : fd_above_stdio(socket(AF_INET, SOCK_DGRAM, 0));
    if (kfd < 0)
        return kfd;
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = hton16(port), .sin_addr.s_addr = addr };
    socklen_t sl = sizeof(sin);
    if (bind(kfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || getsockname(kfd, (struct sockaddr *)&sin, &sl) < 0) {
        int e = errno;
        if (app_kfd < 0)
            close(kfd);
        return -e;
    }
    return udp_bind_claim(s, sock, addr, ntoh16(sin.sin_port), kfd, app_kfd);
}

int slip_udp__bind_bound(struct slip_stack *s, int sock, be32 addr, int app_kfd)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    /* sin6_port and sin_port sit at the same offset: the port is read the same for both. */
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(app_kfd, (struct sockaddr *)&ss, &sl) < 0)
        return -errno;
    uint16_t port = ntoh16(((struct sockaddr_in *)&ss)->sin_port);
    if (!port)
        return -EINVAL;
    return udp_bind_claim(s, sock, addr, port, app_kfd, app_kfd);
}

/* The kernel socket kfd holds (addr, port): bind the stack socket there and claim it in the XDP
 * program. kfd is the application's (app_kfd) or one we made (closed on failure). */
static int udp_bind_claim(struct slip_stack *s, int sock, be32 addr, uint16_t port, int kfd, int app_kfd)
{
    /* SO_REUSEPORT was set on the kernel socket, whose bind() just applied Linux's rules. */
    int reuseport = 0;
    socklen_t rl = sizeof(reuseport);
    if (getsockopt(kfd, SOL_SOCKET, SO_REUSEPORT, &reuseport, &rl) < 0)
        reuseport = 0;

    stack_lock(s);
    udp_sock__set_reuseport(s->udp, (slip_idx_t)sock, reuseport != 0);
    int rc = udp_sock__bind(s->udp, (slip_idx_t)sock, addr, port);
    if (rc == 0) {
        struct steer_key k;
        struct steer_val v = { .stack_id = (uint32_t)g_pid };
        steer_key(&k, addr, port);
        for (unsigned i = 0; i < s->nifs && rc == 0; i++)
            rc = steer__add(s->ifs[i].steer, &k, &v);
        if (rc < 0) {
            for (unsigned i = 0; i < s->nifs; i++)
                steer__del(s->ifs[i].steer, &k);
            udp_sock__close(s->udp, &s->pool, (slip_idx_t)sock);
            udp_sock__alloc(s->udp);    /* hands back the same slot: the caller's handle stays open */
        }
    }
    stack_unlock(s);
    if (rc < 0) {
        if (app_kfd < 0)
            close(kfd);
        return rc;
    }
    if (app_kfd < 0)
        slip_kfd__add(kfd);
    s->t.us[sock].kfd = app_kfd >= 0 ? 0 : kfd;
    return 0;
}

unsigned slip_udp__poll(struct slip_stack *s, int sock)
{
    if (!sock_ok(s, sock))
        return SLIP_EV_ERR | SLIP_EV_HUP;
    const struct udp_sock *u = &s->udp->socks[sock];
    return SLIP_EV_OUT | (u->rcvq.count ? SLIP_EV_IN : 0) | (u->so_error ? SLIP_EV_ERR : 0);
}

int slip_udp__so_error(struct slip_stack *s, int sock)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    int e = s->udp->socks[sock].so_error;
    s->udp->socks[sock].so_error = 0;
    stack_unlock(s);
    return e;
}

int slip_udp__peer(struct slip_stack *s, int sock, be32 *addr, uint16_t *port)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    if (!s->udp->socks[sock].connected)
        return -ENOTCONN;
    *addr = s->udp->socks[sock].raddr;
    *port = s->udp->socks[sock].rport;
    return 0;
}

int slip_udp__connect(struct slip_stack *s, int sock, be32 addr, uint16_t port)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    if (s->udp->socks[sock].state == UDPS_OPEN) {
        int rc = slip_udp__bind(s, sock, 0, 0);
        if (rc < 0)
            return rc;
    }
    stack_lock(s);
    int rc = udp_sock__connect(s->udp, (slip_idx_t)sock, addr, port);
    stack_unlock(s);
    return rc;
}

int slip_udp__local(struct slip_stack *s, int sock, be32 *addr, uint16_t *port)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    *addr = s->udp->socks[sock].laddr;
    *port = s->udp->socks[sock].lport;
    return 0;
}

ssize_t slip_udp__sendmsg(struct slip_stack *s, int sock, const struct iovec *iov, int iovcnt, be32 dst, uint16_t dport)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    if (s->udp->socks[sock].state == UDPS_OPEN) {
        int rc = slip_udp__bind(s, sock, 0, 0);
        if (rc < 0)
            return rc;
    }
    stack_lock(s);
    env_refresh(s, slip_stack__now());
    ssize_t rc = udp_sock__send(&s->env, s->udp, (slip_idx_t)sock, iov, iovcnt, dst, dport);
    if (rc == -ENOBUFS) {
        /* Out of frames: reclaim completions and retry once, as the kernel would block briefly. */
        for (unsigned i = 0; i < s->nifs; i++)
            for (unsigned q = 0; q < s->ifs[i].nq; q++)
                xsk_port__tx_flush(s->ifs[i].ports[q]);
        rc = udp_sock__send(&s->env, s->udp, (slip_idx_t)sock, iov, iovcnt, dst, dport);
    }
    ip_output__flush(&s->env);
    stack_unlock(s);
    return rc;
}

ssize_t slip_udp__sendto(struct slip_stack *s, int sock, const void *buf, size_t len, be32 dst, uint16_t dport)
{
    struct iovec v = { .iov_base = (void *)buf, .iov_len = len };
    return slip_udp__sendmsg(s, sock, &v, 1, dst, dport);
}

ssize_t slip_udp__recvfrom(struct slip_stack *s, int sock, void *buf, size_t len, be32 *src, uint16_t *sport, unsigned flags)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    ssize_t rc = udp_sock__recv(s->udp, &s->pool, (slip_idx_t)sock, buf, len, src, sport, flags);
    stack_unlock(s);
    return rc;
}

int slip_udp__close(struct slip_stack *s, int sock)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    struct udp_sock *u = &s->udp->socks[sock];
    if (u->state == UDPS_BOUND) {
        struct steer_key k;
        steer_key(&k, u->laddr, u->lport);
        bool shared = false;
        /* Other members of a SO_REUSEPORT group still need the key: only the last one removes it. */
        for (unsigned i = 0; i < slip_socktab__udp_high(&s->t); i++)
            if ((int)i != sock && s->udp->socks[i].state == UDPS_BOUND && s->udp->socks[i].lport == u->lport &&
                s->udp->socks[i].laddr == u->laddr)
                shared = true;
        if (!shared)
            for (unsigned i = 0; i < s->nifs; i++)
                steer__del(s->ifs[i].steer, &k);
    }
    udp_sock__close(s->udp, &s->pool, (slip_idx_t)sock);
    stack_unlock(s);
    if (s->t.us[sock].kfd > 0) {
        kfd_close(s, s->t.us[sock].kfd);
        s->t.us[sock].kfd = 0;
    }
    return 0;
}

/* ---- TCP entry points ---- */

static bool tsock_ok(struct slip_stack *s, int sock)
{
    return sock >= 0 && (uint32_t)sock < s->t.max_conns && (s->tcp->conns[sock].flags & TCPF_USER);
}

/* A kernel TCP socket bound to (addr, port): it reserves the port (port 0: an ephemeral one from
 * ip_local_port_range) and, never listening, makes the kernel answer stray SYNs with RST. */
static int kernel_reserve_tcp(be32 addr, uint16_t *port)
{
    int kfd = fd_above_stdio(socket(AF_INET, SOCK_STREAM, 0));    /* inherited across exec: see struct tcp_res */
    if (kfd < 0)
        return kfd;
    int one = 1;
    setsockopt(kfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = hton16(*port), .sin_addr.s_addr = addr };
    socklen_t sl = sizeof(sin);
    if (bind(kfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || getsockname(kfd, (struct sockaddr *)&sin, &sl) < 0) {
        int e = errno;
        close(kfd);
        return -e;
    }
    *port = ntoh16(sin.sin_port);
    slip_kfd__add(kfd);
    return kfd;
}

/* Lock held: a slot the engine just handed out may still carry resources of its previous,
 * finished connection. */
static void tcp_res_take(struct slip_stack *s, int c)
{
    if (s->t.ts[c].res.pending || s->t.ts[c].res.key || s->t.ts[c].res.kfd > 0)
        tcp_res_release(s, &s->t.ts[c].res);
}

int slip_tcp__open(struct slip_stack *s)
{
    stack_lock(s);
    int c = tcp_conn__open(s->tcp);
    if (c >= 0)
        tcp_res_take(s, c);
    stack_unlock(s);
    return c;
}

/* The application's kernel socket reserves the port; a duplicate (placed high, inherited across
 * exec like the stack itself) keeps the reservation while the connection outlives the
 * application's close (TIME_WAIT). */
static int adopt_kfd(int app_kfd, be32 addr, uint16_t *port)
{
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = hton16(*port), .sin_addr.s_addr = addr };
    socklen_t sl = sizeof(sin);
    if (!addr && !*port) {
        /* Any address, an ephemeral port (connect): the bind fails with EINVAL, and only so,
         * when the application bound the socket itself. One syscall less per connection than
         * asking first. */
        if (bind(app_kfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 && errno != EINVAL)
            return -errno;
    } else {
        /* A given address and port (listen): asked first, since a second bind could fail for
         * other reasons first (a privileged port after the program dropped its privileges). */
        struct sockaddr_in cur;
        socklen_t cl = sizeof(cur);
        if (getsockname(app_kfd, (struct sockaddr *)&cur, &cl) < 0)
            return -errno;
        if (cur.sin_port == 0 && bind(app_kfd, (struct sockaddr *)&sin, sizeof(sin)) < 0)
            return -errno;
    }
    if (getsockname(app_kfd, (struct sockaddr *)&sin, &sl) < 0)
        return -errno;
    if (!sin.sin_port)
        return -EINVAL;     /* bound with IP_BIND_ADDRESS_NO_PORT: no port to reserve yet */
    *port = ntoh16(sin.sin_port);
    int d = fcntl(app_kfd, F_DUPFD, 1000);
    if (d < 0)
        d = fcntl(app_kfd, F_DUPFD, 3);
    if (d < 0)
        return -errno;
    slip_kfd__add(d);
    return d;
}

bool slip_tcp__port_busy(struct slip_stack *s, be32 addr, uint16_t port)
{
    bool busy = false;
    stack_lock(s);
    for (uint32_t i = 0; i < s->tcp->high_water && !busy; i++) {
        const struct tcp_conn *c = &s->tcp->conns[i];
        busy = c->state != TCPS_CLOSED && c->state != TCPS_LISTEN && c->lport == port &&
               (c->laddr == addr || !addr || !c->laddr);
    }
    stack_unlock(s);
    return busy;
}

int slip_tcp__listen(struct slip_stack *s, int sock, be32 addr, uint16_t port, int backlog)
{
    return slip_tcp__listen_kfd(s, sock, addr, port, backlog, -1);
}

int slip_tcp__listen_kfd(struct slip_stack *s, int sock, be32 addr, uint16_t port, int backlog, int app_kfd)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    int kfd = app_kfd >= 0 ? adopt_kfd(app_kfd, addr, &port) : kernel_reserve_tcp(addr, &port);
    if (kfd < 0)
        return kfd;
    /* SO_REUSEPORT lives on the application's kernel socket (setsockopt goes there first, and
     * its bind() already applied Linux's rules); the engine needs it to admit the group. */
    int reuseport = 0;
    socklen_t rl = sizeof(reuseport);
    if (app_kfd >= 0 && getsockopt(app_kfd, SOL_SOCKET, SO_REUSEPORT, &reuseport, &rl) < 0)
        reuseport = 0;
    stack_lock(s);
    struct tcp_res *r = &s->t.ts[sock].res;
    if (app_kfd >= 0 && s->tcp->conns[sock].state == TCPS_CLOSED)
        tcp_conn__setopt(&s->env, s->tcp, (slip_idx_t)sock, TCPO_REUSEPORT, reuseport != 0);
    int rc = tcp_conn__listen(s->tcp, (slip_idx_t)sock, addr, port, backlog);
    if (rc == 0) {
        r->kfd = kfd;
        proc_kfd_hold(s, (unsigned)sock);
        r->key = 1;
        r->laddr = addr;
        r->lport = port;
        rc = tcp_res_claim(s, r);
        if (rc < 0) {
            tcp_res_release(s, r);
            kfd = -1;
        }
    }
    stack_unlock(s);
    if (rc < 0 && kfd >= 0)
        slip_kfd__close(kfd);
    return rc;
}

int slip_tcp__accept(struct slip_stack *s, int listener, be32 *raddr, uint16_t *rport)
{
    if (!tsock_ok(s, listener))
        return -EBADF;
    stack_lock(s);
    int c = tcp_conn__accept(s->tcp, (slip_idx_t)listener);
    if (c >= 0) {
        tcp_res_take(s, c);
        if (raddr)
            *raddr = s->tcp->conns[c].raddr;
        if (rport)
            *rport = s->tcp->conns[c].rport;
    }
    stack_unlock(s);
    return c;
}

int slip_tcp__connect(struct slip_stack *s, int sock, be32 addr, uint16_t port)
{
    return slip_tcp__connect_kfd(s, sock, addr, port, -1);
}

int slip_tcp__connect_kfd(struct slip_stack *s, int sock, be32 addr, uint16_t port, int app_kfd)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    env_refresh(s, slip_stack__now());
    struct ip_route rt;
    int rc = ip_output__route(&s->env, addr, &rt);
    /* Another try after a failed attempt: the first one's reservation and claim go first. */
    if (rc == 0 && s->tcp->conns[sock].state == TCPS_CLOSED && (s->t.ts[sock].res.key || s->t.ts[sock].res.kfd > 0))
        tcp_res_release(s, &s->t.ts[sock].res);
    stack_unlock(s);
    if (rc < 0)
        return rc;
    uint16_t lport = 0;
    int kfd = app_kfd >= 0 ? adopt_kfd(app_kfd, 0, &lport) : kernel_reserve_tcp(0, &lport);
    if (kfd < 0)
        return kfd;

    stack_lock(s);
    env_refresh(s, slip_stack__now());
    struct tcp_res *r = &s->t.ts[sock].res;
    r->kfd = kfd;
    proc_kfd_hold(s, (unsigned)sock);
    r->key = 2;
    r->laddr = rt.src;
    r->lport = lport;
    r->raddr = addr;
    r->rport = port;
    /* Claim the 4-tuple before the SYN leaves, so the SYN-ACK is steered to us. */
    rc = tcp_res_claim(s, r);
    if (rc == 0)
        rc = tcp_conn__connect(&s->env, s->tcp, (slip_idx_t)sock, rt.src, lport, addr, port);
    if (rc < 0 && rc != -EINPROGRESS)
        tcp_res_release(s, r);
    tx_done(s);     /* an event loop's SYNs leave with its next poll's kick */
    stack_unlock(s);
    return rc;
}

ssize_t slip_tcp__send(struct slip_stack *s, int sock, const void *buf, size_t len, int more)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    struct iovec v = { .iov_base = (void *)buf, .iov_len = len };
    stack_lock(s);
    env_refresh(s, slip_stack__now());
    /* Frames that wait for the next kick anyway: a partial last segment waits too, so that what
     * the thread sends before that kick (nginx's headers, then the file) leaves in one segment. */
    bool cork = tx_deferring(s);
    if (s->shm->ncork >= s->t.max_conns)
        uncork_all(s);          /* full of entries gone stale (uncorked by sends that kicked) */
    bool corked = (s->tcp->conns[sock].flags & TCPF_AUTOCORK) != 0;
    ssize_t rc = tcp_conn__send(&s->env, s->tcp, (slip_idx_t)sock, &v, 1,
                                (more ? TCP_SEND_MORE : 0) | (cork ? TCP_SEND_AUTOCORK : 0));
    if (cork && !corked && (s->tcp->conns[sock].flags & TCPF_AUTOCORK))
        s->t.cork[s->shm->ncork++] = (uint32_t)sock;
    tx_done(s);
    stack_unlock(s);
    return rc;
}

ssize_t slip_tcp__recv(struct slip_stack *s, int sock, void *buf, size_t len, int peek)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    env_refresh(s, slip_stack__now());
    ssize_t rc = tcp_conn__recv(&s->env, s->tcp, (slip_idx_t)sock, buf, len, peek ? TCP_RECV_PEEK : 0);
    tx_done(s);     /* a window update may have been sent */
    stack_unlock(s);
    return rc;
}

/* Lock held, listener sock about to stop listening: accepted children were steered by the
 * listener's claim, so each live one gets its own 4-tuple claim first. */
static void listener_handover(struct slip_stack *s, int sock)
{
    struct tcp_conn *c = &s->tcp->conns[sock];
    for (uint32_t i = 0; i < s->tcp->high_water; i++) {
        struct tcp_conn *ch = &s->tcp->conns[i];
        if ((int)i == sock || ch->state == TCPS_CLOSED || ch->state == TCPS_LISTEN ||
            !(ch->flags & TCPF_PASSIVE) || ch->lport != c->lport || s->t.ts[i].res.key)
            continue;
        struct tcp_res *cr = &s->t.ts[i].res;
        cr->key = 2;
        cr->laddr = ch->laddr;
        cr->lport = ch->lport;
        cr->raddr = ch->raddr;
        cr->rport = ch->rport;
        tcp_res_claim(s, cr);
        if (!(ch->flags & TCPF_USER)) {
            cr->pending = 1;
            s->shm->tres_pending++;
        }
    }
}

int slip_tcp__shutdown(struct slip_stack *s, int sock, int how)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    env_refresh(s, slip_stack__now());
    bool listener = s->tcp->conns[sock].state == TCPS_LISTEN;
    if (listener && how != SHUT_WR)
        listener_handover(s, sock);
    int rc = tcp_conn__shutdown(&s->env, s->tcp, (slip_idx_t)sock, how);
    if (rc == 0 && listener && s->tcp->conns[sock].state == TCPS_CLOSED)
        tcp_res_release(s, &s->t.ts[sock].res);     /* its port reservation and claim */
    ip_output__flush(&s->env);
    stack_unlock(s);
    return rc;
}

int slip_tcp__close(struct slip_stack *s, int sock)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    env_refresh(s, slip_stack__now());
    struct tcp_conn *c = &s->tcp->conns[sock];
    struct tcp_res *r = &s->t.ts[sock].res;
    if (c->state == TCPS_LISTEN) {
        listener_handover(s, sock);
        tcp_conn__close(&s->env, s->tcp, (slip_idx_t)sock);
        tcp_res_release(s, r);
    } else {
        /* Remember the 4-tuple to recognise the connection until the engine frees it. */
        if (!r->key) {
            r->laddr = c->laddr;
            r->lport = c->lport;
            r->raddr = c->raddr;
            r->rport = c->rport;
        }
        tcp_conn__close(&s->env, s->tcp, (slip_idx_t)sock);
        if (r->key || r->kfd > 0) {
            r->pending = 1;
            s->shm->tres_pending++;
            if (tcp_res_done(s, (unsigned)sock))
                tcp_res_release(s, r);
        } else {
            memset(r, 0, sizeof(*r));
        }
    }
    tx_done(s);
    stack_unlock(s);
    return 0;
}

int slip_tcp__getopt(struct slip_stack *s, int sock, int opt, int *val)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    return tcp_conn__getopt(s->tcp, (slip_idx_t)sock, (enum tcp_opt)opt, val);
}

int slip_tcp__info(struct slip_stack *s, int sock, struct tcp_conn_info *out)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    int rc = tcp_conn__info(s->tcp, (slip_idx_t)sock, out);
    stack_unlock(s);
    return rc;
}

int slip_tcp__peer(struct slip_stack *s, int sock, be32 *addr, uint16_t *port)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    uint8_t st = s->tcp->conns[sock].state;
    if (st == TCPS_CLOSED || st == TCPS_LISTEN || st == TCPS_SYN_SENT)
        return -ENOTCONN;
    *addr = s->tcp->conns[sock].raddr;
    *port = s->tcp->conns[sock].rport;
    return 0;
}

unsigned slip_tcp__poll(struct slip_stack *s, int sock)
{
    if (!tsock_ok(s, sock))
        return SLIP_EV_ERR | SLIP_EV_HUP;
    return tcp_conn__poll(s->tcp, (slip_idx_t)sock);
}

int slip_tcp__so_error(struct slip_stack *s, int sock)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    int rc = tcp_conn__so_error(s->tcp, (slip_idx_t)sock);
    stack_unlock(s);
    return rc;
}

int slip_tcp__setopt(struct slip_stack *s, int sock, int opt, int val)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    env_refresh(s, slip_stack__now());
    int rc = tcp_conn__setopt(&s->env, s->tcp, (slip_idx_t)sock, (enum tcp_opt)opt, val);
    ip_output__flush(&s->env);
    stack_unlock(s);
    return rc;
}

int slip_tcp__local(struct slip_stack *s, int sock, be32 *addr, uint16_t *port)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    *addr = s->tcp->conns[sock].laddr;
    *port = s->tcp->conns[sock].lport;
    return 0;
}

void slip_tcp__dump(struct slip_stack *s, FILE *f)
{
    static const char *const names[] = { "CLOSED", "LISTEN", "SYN_SENT", "SYN_RECEIVED", "ESTABLISHED",
                                         "CLOSE_WAIT", "FIN_WAIT_1", "CLOSING", "LAST_ACK", "FIN_WAIT_2",
                                         "TIME_WAIT" };
    stack_lock(s);
    for (uint32_t i = 0; i < s->tcp->high_water; i++) {
        struct tcp_conn_info in;
        if (s->tcp->conns[i].state == TCPS_CLOSED || tcp_conn__info(s->tcp, i, &in) < 0)
            continue;
        uint32_t la = ntoh32(in.laddr), ra = ntoh32(in.raddr);
        fprintf(f, "tcpconn %u %s %u.%u.%u.%u:%u %u.%u.%u.%u:%u cwnd=%u ssthresh=%u srtt_us=%u rto_us=%u "
                   "mss=%u retrans=%llu bytes_in=%llu bytes_out=%llu\n",
                i, in.state < SLIP_ARRAY_SIZE(names) ? names[in.state] : "?",
                la >> 24, la >> 16 & 255, la >> 8 & 255, la & 255, in.lport,
                ra >> 24, ra >> 16 & 255, ra >> 8 & 255, ra & 255, in.rport,
                in.cwnd, in.ssthresh, in.srtt_us, in.rto_us, in.mss,
                (unsigned long long)in.st.retransmits, (unsigned long long)in.st.bytes_in,
                (unsigned long long)in.st.bytes_out);
    }
    stack_unlock(s);
}

/* ---- carrying a stack across exec ---- */

static void clear_cloexec(int fd)
{
    int f = fcntl(fd, F_GETFD);
    if (f >= 0)
        fcntl(fd, F_SETFD, f & ~FD_CLOEXEC);
}

int slip_stack__export(struct slip_stack *s, char *buf, size_t len)
{
    return slip_stack__export_for(s, s->proc, buf, len);
}

static void no_clear(int fd)
{
    (void)fd;
}

/* The description attach reads: "memfd;steer fds,xsk fds;...;pSLOT". clear() is applied to every
 * fd it names (exec: make it survive; sharing over a socket: leave it). */
static int describe(struct slip_stack *s, int slot, char *buf, size_t len, void (*clear)(int))
{
    size_t n = (size_t)snprintf(buf, len, "%d", s->arena.memfd);
    clear(s->arena.memfd);
    for (unsigned i = 0; i < s->nifs && n < len; i++) {
        int fds[4];
        steer__export(s->ifs[i].steer, fds);
        n += (size_t)snprintf(buf + n, len - n, ";%d,%d,%d,%d", fds[0], fds[1], fds[2], fds[3]);
        for (int k = 0; k < 4; k++)
            clear(fds[k]);
        for (unsigned q = 0; q < s->ifs[i].nq && n < len; q++) {
            int fd = xsk_port__fd(s->ifs[i].ports[q]);
            n += (size_t)snprintf(buf + n, len - n, ",%d", fd);
            clear(fd);
        }
    }
    if (slot >= 0 && n < len)
        n += (size_t)snprintf(buf + n, len - n, ";p%d", slot);
    return n < len ? 0 : -ENOSPC;
}

int slip_stack__export_for(struct slip_stack *s, int slot, char *buf, size_t len)
{
    return describe(s, slot, buf, len, clear_cloexec);
}

int slip_stack__describe_for_peer(struct slip_stack *s, pid_t pid, char *buf, size_t len)
{
    struct slip_procs *t = &s->shm->procs;
    int slot = slip_procs__find(t, pid);
    if (slot < 0)
        slot = slip_procs__claim(t, pid);
    return describe(s, slot, buf, len, no_clear);
}

int slip_stack__export_fds(struct slip_stack *s, int *fds, int max)
{
    int n = 0;
    if (n < max)
        fds[n++] = s->arena.memfd;
    for (unsigned i = 0; i < s->nifs; i++) {
        int sf[4];
        steer__export(s->ifs[i].steer, sf);
        for (int k = 0; k < 4 && n < max; k++)
            fds[n++] = sf[k];
        for (unsigned q = 0; q < s->ifs[i].nq && n < max; q++)
            fds[n++] = xsk_port__fd(s->ifs[i].ports[q]);
    }
    return n;
}

/* Every number of the header that sizes or locates something, checked against the memfd's
 * size before any of them is used: the memory may come from another process, and one that
 * shares the stack as another user must not be able to point us outside it. Returns what is
 * wrong, or NULL. */
static const char *shm_layout_bad(const struct slip_shm *h, size_t size)
{
    struct region {
        uint64_t off, len;
    } r[] = {
        { h->off_umem, (uint64_t)h->nframes * h->frame_size },
        { h->off_pool, xsk_frame_pool__bytes(h->nframes) },
        { h->off_meta, (uint64_t)h->nframes * sizeof(struct pkt_meta) },
        { h->off_ctl, sizeof(struct ctl_tables) },
        { h->off_ip, sizeof(struct ip_shared) },
    };
    if (h->frame_size != 2048 && h->frame_size != 4096)
        return "frame size";
    if (h->nframes == 0 || h->nframes > (1u << 22))
        return "frame count";
    if (h->ring_size == 0 || h->ring_size > (1u << 16) || (h->ring_size & (h->ring_size - 1)) ||
        h->burst == 0 || h->burst > h->ring_size)
        return "ring size";
    if (h->nifs == 0 || h->nifs > SLIP_MAX_IFACES)
        return "interface count";
    for (unsigned i = 0; i < h->nifs; i++)
        if (h->nq[i] == 0 || h->nq[i] > SLIP_MAX_QUEUES || !memchr(h->ifname[i], 0, sizeof(h->ifname[i])))
            return "interface";
    if (h->off_umem % 4096)
        return "UMEM alignment";
    for (unsigned i = 0; i < SLIP_ARRAY_SIZE(r); i++)
        if (r[i].off < sizeof(struct slip_shm) || r[i].off > size || r[i].len > size - r[i].off)
            return "region outside the memory";
    return NULL;
}

const char *slip_stack__memory_bad(int memfd)
{
    struct slip_arena a = { .memfd = -1 };
    if (slip_arena__attach(&a, memfd) < 0)
        return "cannot be mapped, or not sealed against resizing";
    const struct slip_shm *h = slip_arena__ptr(&a, 0);
    const char *bad = NULL;
    if (a.size < sizeof(struct slip_shm) || h->magic != SLIP_SHM_MAGIC || h->version != SLIP_SHM_VERSION)
        bad = "not a slipstream stack of this version";
    else if (!(bad = shm_layout_bad(h, a.size))) {
        struct slip_socktab t;
        if (slip_socktab__locate(&t, &h->tabs, &a, true) < 0)
            bad = "connection tables outside the memory";
    }
    munmap(a.base, a.size);
    return bad;
}

int slip_stack__attach(struct slip_stack **out, const char *spec, char *err, size_t errlen)
{
    struct slip_stack *s = calloc(1, sizeof(*s));
    int rc = -EINVAL;
    if (!s)
        return -ENOMEM;
    s->epfd = -1;
    s->arena.memfd = -1;
    s->proc = -1;
    doorbell_open(s);
    pid_refresh();
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", spec);
    char *save = NULL, *tok = strtok_r(buf, ";", &save);
    if (!tok || (rc = slip_arena__attach(&s->arena, atoi(tok))) < 0) {
        snprintf(err, errlen, "cannot map the stack's shared memory (SLIP_ATTACH=%s)", spec);
        goto fail;
    }
    struct slip_arena *a = &s->arena;
    s->shm = slip_arena__ptr(a, 0);
    if (a->size < sizeof(struct slip_shm) || s->shm->magic != SLIP_SHM_MAGIC || s->shm->version != SLIP_SHM_VERSION) {
        snprintf(err, errlen, "SLIP_ATTACH: not a slipstream stack of this version");
        rc = -EINVAL;
        goto fail;
    }
    const char *bad = shm_layout_bad(s->shm, a->size);
    if (bad) {
        snprintf(err, errlen, "the stack's shared memory is inconsistent (%s): not attaching", bad);
        rc = -EINVAL;
        goto fail;
    }
    slip_config__defaults(&s->cfg);
    s->cfg.ring_size = s->shm->ring_size;
    s->cfg.burst = s->shm->burst;
    s->cfg.frame_size = s->shm->frame_size;
    s->pool.umem = slip_arena__ptr(a, s->shm->off_umem);
    s->pool.frames = slip_arena__ptr(a, s->shm->off_pool);
    s->pool.meta = slip_arena__ptr(a, s->shm->off_meta);
    s->pool.frame_size = s->shm->frame_size;
    s->pool.nframes = s->shm->nframes;
    s->ctl_t = slip_arena__ptr(a, s->shm->off_ctl);
    s->ip = slip_arena__ptr(a, s->shm->off_ip);
    if ((rc = slip_socktab__locate(&s->t, &s->shm->tabs, a, true)) < 0) {
        snprintf(err, errlen, "SLIP_ATTACH: the stack's table layout is damaged");
        goto fail;
    }
    s->udp = s->t.udp;
    s->tcp = s->t.tcp;
    struct xsk_umem_area_config ucfg = {
        .frame_size = s->shm->frame_size, .nframes = s->shm->nframes,
        .fill_size = s->shm->ring_size, .comp_size = s->shm->ring_size,
    };
    if ((rc = xsk_umem_area__adopt(&s->umem, s->pool.umem, &ucfg, s->pool.frames)) < 0)
        goto fail;
    for (unsigned i = 0; i < s->shm->nifs; i++) {
        struct stack_iface *f = &s->ifs[i];
        char *ifs = strtok_r(NULL, ";", &save);
        int v[4 + SLIP_MAX_QUEUES], nv = 0;
        for (char *s2 = NULL, *t = ifs ? strtok_r(ifs, ",", &s2) : NULL; t && nv < 4 + SLIP_MAX_QUEUES;
             t = strtok_r(NULL, ",", &s2))
            v[nv++] = atoi(t);
        if (nv != 4 + (int)s->shm->nq[i]) {
            snprintf(err, errlen, "SLIP_ATTACH: interface %u: expected %u fds", i, 4 + s->shm->nq[i]);
            rc = -EINVAL;
            goto fail;
        }
        snprintf(f->name, sizeof(f->name), "%s", s->shm->ifname[i]);
        f->ifindex = s->shm->ifindex[i];
        f->nq = s->shm->nq[i];
        if ((rc = steer__adopt(&f->steer, (int)f->ifindex, v)) < 0)
            goto fail;
        s->nifs++;
        for (unsigned q = 0; q < f->nq; q++) {
            rc = xsk_port__adopt(&f->ports[q], s->umem, v[4 + q], (int)f->ifindex, q, s->shm->ring_size,
                                 s->shm->burst);
            if (rc < 0) {
                snprintf(err, errlen, "SLIP_ATTACH: cannot map the rings of %s queue %u: %s", f->name, q,
                         strerror(-rc));
                goto fail;
            }
        }
        s->txq[i].port = f->ports[0];
        s->txq[i].ifindex = f->ifindex;
    }
    char *pt = strtok_r(NULL, ";", &save);
    if (pt && pt[0] == 'g')
        s->guard = true;        /* no slot: the guardian is not a process of the stack */
    else
        proc_register(s, pt && pt[0] == 'p' ? atoi(pt + 1) : -1);
    /* A netlink socket of our own; the tables are shared and already filled. */
    if ((rc = ctl__open(&s->ctl, s->ctl_t)) < 0) {
        snprintf(err, errlen, "netlink: %s", strerror(-rc));
        goto fail;
    }
    if ((rc = env_and_epoll_setup(s)) < 0) {
        snprintf(err, errlen, "epoll_create1: %s", strerror(-rc));
        goto fail;
    }
    /* The stack's own fds go back to close-on-exec; export clears it again when needed. */
    fcntl(s->arena.memfd, F_SETFD, FD_CLOEXEC);
    stacks_register(s);
    *out = s;
    return 0;
fail:
    /* Never close inherited fds here: the stack keeps running for whoever else maps it. Our
     * own eventfds are ours. */
    if (s->doorbell >= 0)
        close(s->doorbell);
    if (s->accept_bell >= 0)
        close(s->accept_bell);
    free(s);
    return rc < 0 ? rc : -EINVAL;
}

/* ---- for the stack's guardian (guard.h) ---- */

int slip_stack__describe_for_guard(struct slip_stack *s, char *buf, size_t len)
{
    int rc = describe(s, -1, buf, len, no_clear);
    size_t n = strlen(buf);
    if (rc < 0 || n + 3 > len)
        return rc < 0 ? rc : -ENOSPC;
    memcpy(buf + n, ";g", 3);
    return 0;
}

bool slip_stack__orphaned(struct slip_stack *s, slip_time_t quiet_ns)
{
    /* Reserved slots (a fork or spawn under way) do not count: their parent does, while alive. */
    for (int i = 0; i < SLIP_PROC_MAX; i++)
        if (__atomic_load_n(&s->shm->procs.p[i].pid, __ATOMIC_ACQUIRE) > 0 && !slip_procs__dead(&s->shm->procs, i))
            return false;
    return slip_stack__now() - __atomic_load_n(&s->shm->last_poll, __ATOMIC_RELAXED) >= quiet_ns;
}

/* A connection the application still holds (it never closed it), or one still delivering what it
 * wrote before closing. */
static bool guard_pending(const struct tcp_conn *c)
{
    return c->state != TCPS_CLOSED && c->state != TCPS_TIME_WAIT && ((c->flags & TCPF_USER) || conn_unfinished(c));
}

bool slip_stack__guard_pending(struct slip_stack *s)
{
    /* Without the lock: only the dead (or an exiting process that is about to be) change it.
     * Bounded by what the arena was built with: the guardian outlives whoever wrote it last. */
    uint32_t hw = slip_socktab__tcp_high(&s->t);
    for (uint32_t i = 0; i < hw; i++)
        if (guard_pending(&s->tcp->conns[i]))
            return true;
    return false;
}

/* Lock held: RST and free connection i, and give back its port reservation and XDP claim as
 * slip_tcp__close does. */
static void guard_abort(struct slip_stack *s, unsigned i)
{
    struct tcp_res *r = &s->t.ts[i].res;
    tcp_conn__abort(&s->env, s->tcp, (slip_idx_t)i);
    if (r->key || r->kfd > 0) {
        if (!r->pending) {
            r->pending = 1;
            s->shm->tres_pending++;
        }
        if (tcp_res_done(s, i))
            tcp_res_release(s, r);
    }
}

unsigned slip_stack__guard_sweep(struct slip_stack *s, bool all)
{
    /* Every process is dead: a holder of the lock is too, take it over at once. */
    if (!slip_lock__try(&s->shm->lock))
        slip_lock__seize(&s->shm->lock);
    stack_locked_by_us(s);
    env_refresh(s, slip_stack__now());
    unsigned left = 0;
    uint32_t hw = slip_socktab__tcp_high(&s->t);
    for (uint32_t i = 0; i < hw; i++) {
        struct tcp_conn *c = &s->tcp->conns[i];
        if (c->state == TCPS_CLOSED || c->state == TCPS_TIME_WAIT)
            continue;
        if (c->state == TCPS_LISTEN) {
            /* Its unaccepted children get RST from the engine; closed children still delivering
             * were steered by its claim, and get their own first. */
            if (c->flags & TCPF_USER) {
                listener_handover(s, (int)i);
                tcp_conn__close(&s->env, s->tcp, (slip_idx_t)i);
                tcp_res_release(s, &s->t.ts[i].res);
            }
        } else if (all || (c->flags & TCPF_USER)) {
            guard_abort(s, i);
        } else {
            left += conn_unfinished(c);
        }
    }
    uncork_all(s);
    ip_output__flush(&s->env);
    stack_unlock(s);
    return left;
}
