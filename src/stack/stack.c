/* The stack object: arena layout, ports and steering per interface, the poll loop that moves
 * frames between the rings and the protocol layers, and the UDP entry points. The poll loop is
 * the one place that reads the clock; protocol code gets `now` from it. */
#include "stack/stack.h"

#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <pthread.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "ctl/ctl.h"
#include "ip/ip.h"
#include "pkt/pkt.h"
#include "stack/arena.h"
#include "stack/fault.h"
#include "stack/lock.h"
#include "tcp/tcp.h"
#include "tcp/tcp_fsm.h"
#include "udp/udp.h"

#define SLIP_SHM_MAGIC   0x736c6970737472ull    /* "slipstr" */
#define SLIP_SHM_VERSION 1
#define CTL_POLL_INTERVAL (2 * SLIP_MSEC)

#define STACK_COUNTERS(X) X(polls) X(rx_bursts) X(rx_frames) X(rx_other_proto) X(tcp_wakeups)

struct stack_counters {
#define STACK_COUNTER_FIELD(n) uint64_t n;
    STACK_COUNTERS(STACK_COUNTER_FIELD)
#undef STACK_COUNTER_FIELD
};

#define SLIP_TCP_MAX_CONNS 4096

/* What a TCP connection holds outside the engine: the kernel socket reserving its port and its
 * claim in the XDP program. Released when the engine is done with the connection (after
 * TIME_WAIT or LAST_ACK), not at close, so neither the kernel nor the XDP program can hand the
 * 4-tuple to someone else while segments of it are still in flight. It lives in shared memory
 * with the connection: the kernel socket is inherited (not close-on-exec) by fork children and
 * exec'd images, so whichever process releases it holds the same fd number. */
struct tcp_res {
    int kfd;
    uint8_t key;                /* 0 none, 1 listen (laddr, lport), 2 connected 4-tuple */
    uint8_t pending;            /* closed by the application, waiting for the engine */
    be32 laddr, raddr;
    uint16_t lport, rport;
};

/* Head of the arena. Offsets locate every region. */
struct slip_shm {
    uint64_t magic;
    uint32_t version;
    uint32_t nframes;
    uint32_t frame_size;
    uint32_t headroom;
    struct slip_lock lock;
    uint64_t off_umem, off_pool, off_meta, off_ctl, off_ip, off_udp, off_tcp;
    struct stack_counters c;
    /* File descriptors (in all processes) that refer to each socket: the POSIX layer closes the
     * stack socket when the last one goes, wherever fork() or dup() put them. */
    slip_time_t last_poll;      /* when any process last ran the poll loop */
    uint32_t last_holder;       /* pid that held the lock last */
    uint32_t sleepers;          /* application threads asleep on the wait fds */
    uint32_t tcp_refs[4096];
    uint32_t tcp_evgen[4096];   /* bumped on every engine wakeup: edge-triggered epoll */
    struct tcp_res tres[SLIP_TCP_MAX_CONNS];
    uint32_t tres_pending;      /* closed connections whose resources wait for the engine */
    int32_t udp_kfd[UDP_MAX_SOCKS];   /* kernel socket reserving each UDP socket's port */
    /* What another process needs to attach (exec'd images): the configuration's numbers and
     * the interfaces with their queue counts. */
    uint32_t ring_size, burst, nifs;
    uint32_t ifindex[SLIP_MAX_IFACES], nq[SLIP_MAX_IFACES];
    char ifname[SLIP_MAX_IFACES][16];
    uint32_t udp_refs[1024];
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
    struct fault fault;         /* test-only receive impairments (SLIP_FAULT_*) */
    int *kfd;                   /* shm->udp_kfd */
    struct tcp_shared *tcp;
    struct tcp_res *tres;       /* shm->tres */
};



static void doorbell_open(struct slip_stack *s);

/* This process's pid, cached (glibc no longer does) and updated in fork children. */
static pid_t g_pid;

static void pid_refresh(void)
{
    g_pid = getpid();
}

/* Just took the lock: record the owner and, when another process held it last, reload the
 * rings' cached indices in this process (see xsk_port__resync). */
static void stack_locked_by_us(struct slip_stack *s)
{
    s->shm->lock.owner_pid = (uint32_t)g_pid;
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

static slip_time_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (slip_time_t)ts.tv_sec * SLIP_SEC + (slip_time_t)ts.tv_nsec;
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
}

static int env_u32(const char *name, uint32_t *out, uint32_t min, uint32_t max, bool pow2, char *err, size_t errlen)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    char *end;
    unsigned long x = strtoul(v, &end, 10);
    if (*end || x < min || x > max || (pow2 && (x & (x - 1)))) {
        snprintf(err, errlen, "%s=%s is not valid: want %s%u..%u", name, v, pow2 ? "a power of two in " : "", min, max);
        return -EINVAL;
    }
    *out = (uint32_t)x;
    return 0;
}

int slip_config__from_env(struct slip_config *c, char *err, size_t errlen)
{
    int rc;
    if ((rc = env_u32("SLIP_FRAME_SIZE", &c->frame_size, 2048, 4096, true, err, errlen)) < 0 ||
        (rc = env_u32("SLIP_RING_SIZE", &c->ring_size, 64, 16384, true, err, errlen)) < 0 ||
        (rc = env_u32("SLIP_BURST", &c->burst, 1, 256, false, err, errlen)) < 0 ||
        (rc = env_u32("SLIP_BUSY_POLL", &c->busy_poll_usec, 0, 1000000, false, err, errlen)) < 0 ||
        (rc = env_u32("SLIP_BUSY_POLL_BUDGET", &c->busy_poll_budget, 1, 1024, false, err, errlen)) < 0)
        return rc;
    c->busy_poll = c->busy_poll_usec > 0;
    const char *b = getenv("SLIP_BIND");
    if (b && *b) {
        if (!strcmp(b, "auto")) c->bind = XSK_BIND_AUTO;
        else if (!strcmp(b, "copy")) c->bind = XSK_BIND_COPY;
        else if (!strcmp(b, "zerocopy")) c->bind = XSK_BIND_ZEROCOPY;
        else {
            snprintf(err, errlen, "SLIP_BIND=%s is not valid: want auto, copy or zerocopy", b);
            return -EINVAL;
        }
    }
    const char *x = getenv("SLIP_XDP_MODE");
    if (x && *x) {
        if (!strcmp(x, "auto")) c->xdp = STEER_XDP_AUTO;
        else if (!strcmp(x, "native")) c->xdp = STEER_XDP_NATIVE;
        else if (!strcmp(x, "generic")) c->xdp = STEER_XDP_GENERIC;
        else {
            snprintf(err, errlen, "SLIP_XDP_MODE=%s is not valid: want auto, native or generic", x);
            return -EINVAL;
        }
    }
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
    static bool atfork_done;
    if (!atfork_done) {
        pthread_atfork(NULL, NULL, pid_refresh);
        atfork_done = true;
    }
    pid_refresh();
    s->cfg = *cfg;
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
    size_t total = umem_bytes + 2 * 4096 + sizeof(struct slip_shm) + xsk_frame_pool__bytes(nframes) +
                   (size_t)nframes * sizeof(struct pkt_meta) + sizeof(struct ctl_tables) +
                   sizeof(struct ip_shared) + sizeof(struct udp_shared) +
                   tcp_shared__bytes(SLIP_TCP_MAX_CONNS) + 8 * SLIP_CACHELINE;
    rc = slip_arena__create(&s->arena, "slipstream-stack", total);
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
    int64_t o_udp = slip_arena__carve(a, sizeof(struct udp_shared), SLIP_CACHELINE);
    int64_t o_tcp = slip_arena__carve(a, tcp_shared__bytes(SLIP_TCP_MAX_CONNS), SLIP_CACHELINE);
    if (o_udp < 0 || o_tcp < 0) {
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
    s->shm->off_udp = (uint64_t)o_udp;
    s->shm->off_tcp = (uint64_t)o_tcp;
    s->shm->ring_size = cfg->ring_size;
    s->shm->burst = cfg->burst;
    s->shm->nifs = s->nifs;
    for (unsigned i = 0; i < s->nifs; i++) {
        s->shm->ifindex[i] = s->ifs[i].ifindex;
        s->shm->nq[i] = s->ifs[i].nq;
        snprintf(s->shm->ifname[i], sizeof(s->shm->ifname[i]), "%s", s->ifs[i].name);
    }
    slip_lock__init(&s->shm->lock);

    s->pool.umem = slip_arena__ptr(a, (uint64_t)o_umem);
    s->pool.frames = slip_arena__ptr(a, (uint64_t)o_pool);
    s->pool.meta = slip_arena__ptr(a, (uint64_t)o_meta);
    s->pool.frame_size = cfg->frame_size;
    s->pool.headroom = 0;
    s->pool.nframes = nframes;
    s->ctl_t = slip_arena__ptr(a, (uint64_t)o_ctl);
    s->ip = slip_arena__ptr(a, (uint64_t)o_ip);
    s->udp = slip_arena__ptr(a, (uint64_t)o_udp);
    ip_shared__init(s->ip, nframes / 8);
    udp_shared__init(s->udp);
    s->tcp = slip_arena__ptr(a, (uint64_t)o_tcp);
    uint8_t key[32];
    if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key)) {
        rc = -errno;
        snprintf(err, errlen, "getrandom: %s", strerror(errno));
        goto fail;
    }
    tcp_shared__init(s->tcp, SLIP_TCP_MAX_CONNS, key);
    s->tres = s->shm->tres;
    s->kfd = s->shm->udp_kfd;
    for (unsigned i = 0; i < SLIP_TCP_MAX_CONNS; i++)
        s->tres[i].kfd = -1;
    for (unsigned i = 0; i < UDP_MAX_SOCKS; i++)
        s->kfd[i] = -1;

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
        rc = steer__attach(&f->steer, f->name, cfg->xdp, err, errlen);
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
    slip_info("stack up: %u interface(s), %u AF_XDP socket(s), %u frames of %u bytes",
              s->nifs, nports, nframes, cfg->frame_size);
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
    if (s->kfd)
        for (unsigned i = 0; i < UDP_MAX_SOCKS; i++)
            if (s->kfd[i] >= 0)
                close(s->kfd[i]);
    if (s->tres)
        for (unsigned i = 0; i < SLIP_TCP_MAX_CONNS; i++)
            if (s->tres[i].kfd >= 0)
                close(s->tres[i].kfd);
    if (s->tcp && s->pool.frames)
        tcp_shared__purge(s->tcp, &s->pool);
    if (s->epfd >= 0)
        close(s->epfd);
    if (s->doorbell >= 0)
        close(s->doorbell);
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
    struct steer_val v = { .stack_id = (uint32_t)getpid() };
    int rc = 0;
    steer_tcp_key(&k, r);
    for (unsigned i = 0; i < s->nifs && rc == 0; i++)
        rc = steer__add(s->ifs[i].steer, &k, &v);
    return rc;
}

/* Lock held. */
static void tcp_res_release(struct slip_stack *s, struct tcp_res *r)
{
    if (r->key) {
        struct steer_key k;
        steer_tcp_key(&k, r);
        for (unsigned i = 0; i < s->nifs; i++)
            steer__del(s->ifs[i].steer, &k);
    }
    if (r->kfd >= 0)
        close(r->kfd);
    if (r->pending)
        s->shm->tres_pending--;
    memset(r, 0, sizeof(*r));
    r->kfd = -1;
}

/* True when the engine no longer holds the connection these resources belong to. */
static bool tcp_res_done(struct slip_stack *s, unsigned i)
{
    const struct tcp_conn *c = &s->tcp->conns[i];
    const struct tcp_res *r = &s->tres[i];
    return c->state == TCPS_CLOSED || c->lport != r->lport || c->rport != r->rport || c->raddr != r->raddr;
}

/* Lock held. */
static void tcp_res_reap(struct slip_stack *s)
{
    for (unsigned i = 0; i < SLIP_TCP_MAX_CONNS && s->shm->tres_pending; i++)
        if (s->tres[i].pending && tcp_res_done(s, i))
            tcp_res_release(s, &s->tres[i]);
}

/* Lock held. */
static slip_time_t poll_locked(struct slip_stack *s)
{
    struct xsk_frame f[256];
    slip_time_t now = now_ns();
    unsigned burst = SLIP_MIN(s->cfg.burst, SLIP_ARRAY_SIZE(f));

    env_refresh(s, now);
    s->shm->c.polls++;
    s->shm->last_poll = now;
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
        if (w < SLIP_TCP_MAX_CONNS)
            s->shm->tcp_evgen[w]++;
    }
    if (s->shm->tres_pending)
        tcp_res_reap(s);
    if (s->fault.nheld) {
        fault_release(s, false);
        for (unsigned i = 0; i < s->fault.nheld; i++)
            next = SLIP_MIN(next, s->fault.held[i].until);
    }
    next = SLIP_MIN(next, ip_reass__expire(&s->env));
    ip_output__flush(&s->env);
    for (unsigned i = 0; i < s->nifs; i++)
        for (unsigned q = 0; q < s->ifs[i].nq; q++)
            xsk_port__complete(s->ifs[i].ports[q]);
    /* While a neighbour is being resolved, watch the kernel's table closely. */
    for (unsigned i = 0; i < IP_NEIGH_SLOTS; i++)
        if (s->ip->neigh[i].used) {
            s->ctl_next = SLIP_MIN(s->ctl_next, now + 100 * SLIP_USEC);
            next = SLIP_MIN(next, s->ctl_next);
            break;
        }
    return next;
}

static void ring_doorbell(struct slip_stack *s)
{
    uint64_t one = 1;
    if (s->doorbell >= 0 && write(s->doorbell, &one, sizeof(one)) < 0) {
        /* saturated: the sleepers are awake anyway */
    }
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

int slip_stack__poll_if_idle(struct slip_stack *s, slip_time_t idle_ns)
{
    slip_time_t now = now_ns();
    if (now - s->shm->last_poll < idle_ns)
        return (int)((idle_ns - (now - s->shm->last_poll)) / SLIP_MSEC) + 1;
    if (!slip_lock__try(&s->shm->lock))
        return 1;
    stack_locked_by_us(s);
    s->next_deadline = poll_locked(s);
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
    slip_time_t next = s->next_deadline, now = now_ns();
    if (next == SLIP_TIME_NEVER)
        return timeout_ms;
    slip_time_t d = next > now ? (next - now + SLIP_MSEC - 1) / SLIP_MSEC : 0;
    if (timeout_ms < 0 || (slip_time_t)timeout_ms > d)
        return (int)d;
    return timeout_ms;
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
        return __atomic_load_n(&s->shm->tcp_evgen[sock], __ATOMIC_RELAXED);
    return (uint32_t)s->udp->socks[sock].rx_datagrams;
}

uint32_t slip_sock__ref(struct slip_stack *s, bool tcp, int sock, int delta)
{
    uint32_t *r = tcp ? &s->shm->tcp_refs[sock] : &s->shm->udp_refs[sock];
    return __atomic_add_fetch(r, (uint32_t)delta, __ATOMIC_ACQ_REL);
}

int slip_stack__wait(struct slip_stack *s, int timeout_ms)
{
    slip_time_t next = slip_stack__poll(s);
    slip_time_t now = now_ns();
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
    emit(k, "ip.reass_bufs", s->ip->reass_bufs);
    emit(k, "lock.contended", s->shm->lock.contended);
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

static bool sock_ok(struct slip_stack *s, int sock)
{
    return sock >= 0 && sock < UDP_MAX_SOCKS && s->udp->socks[sock].state != UDPS_FREE;
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

int slip_udp__bind_kfd(struct slip_stack *s, int sock, be32 addr, uint16_t port, int app_kfd)
{
    if (!sock_ok(s, sock))
        return -EBADF;
    /* The kernel socket holds the port for us: kernel applications cannot take it, and port 0
     * gets an ephemeral port from the kernel's own range. The application's own kernel socket
     * does it when there is one (the POSIX layer); else we make one. */
    int kfd = app_kfd >= 0 ? app_kfd : socket(AF_INET, SOCK_DGRAM, 0);
    if (kfd < 0)
        return -errno;
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = hton16(port), .sin_addr.s_addr = addr };
    socklen_t sl = sizeof(sin);
    if (bind(kfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || getsockname(kfd, (struct sockaddr *)&sin, &sl) < 0) {
        int e = errno;
        if (app_kfd < 0)
            close(kfd);
        return -e;
    }
    port = ntoh16(sin.sin_port);

    stack_lock(s);
    int rc = udp_sock__bind(s->udp, (slip_idx_t)sock, addr, port);
    if (rc == 0) {
        struct steer_key k;
        struct steer_val v = { .stack_id = (uint32_t)getpid() };
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
    s->kfd[sock] = app_kfd >= 0 ? -1 : kfd;
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
    env_refresh(s, now_ns());
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
        /* Another socket may hold the same (addr, port) through SO_REUSEPORT later; keep the key then. */
        for (unsigned i = 0; i < UDP_MAX_SOCKS; i++)
            if ((int)i != sock && s->udp->socks[i].state == UDPS_BOUND && s->udp->socks[i].lport == u->lport &&
                s->udp->socks[i].laddr == u->laddr)
                shared = true;
        if (!shared)
            for (unsigned i = 0; i < s->nifs; i++)
                steer__del(s->ifs[i].steer, &k);
    }
    udp_sock__close(s->udp, &s->pool, (slip_idx_t)sock);
    stack_unlock(s);
    if (s->kfd[sock] >= 0) {
        close(s->kfd[sock]);
        s->kfd[sock] = -1;
    }
    return 0;
}

/* ---- TCP entry points ---- */

static bool tsock_ok(struct slip_stack *s, int sock)
{
    return sock >= 0 && (uint32_t)sock < s->tcp->max_conns && (s->tcp->conns[sock].flags & TCPF_USER);
}

/* A kernel TCP socket bound to (addr, port): it reserves the port (port 0: an ephemeral one from
 * ip_local_port_range) and, never listening, makes the kernel answer stray SYNs with RST. */
static int kernel_reserve_tcp(be32 addr, uint16_t *port)
{
    int kfd = socket(AF_INET, SOCK_STREAM, 0);     /* inherited across exec: see struct tcp_res */
    if (kfd < 0)
        return -errno;
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
    return kfd;
}

/* Lock held: a slot the engine just handed out may still carry resources of its previous,
 * finished connection. */
static void tcp_res_take(struct slip_stack *s, int c)
{
    if (s->tres[c].pending || s->tres[c].key || s->tres[c].kfd >= 0)
        tcp_res_release(s, &s->tres[c]);
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
    struct sockaddr_in cur;
    socklen_t cl = sizeof(cur);
    if (getsockname(app_kfd, (struct sockaddr *)&cur, &cl) < 0)
        return -errno;
    if (cur.sin_port == 0 && bind(app_kfd, (struct sockaddr *)&sin, sizeof(sin)) < 0)
        return -errno;
    if (getsockname(app_kfd, (struct sockaddr *)&sin, &sl) < 0)
        return -errno;
    *port = ntoh16(sin.sin_port);
    int d = fcntl(app_kfd, F_DUPFD, 1000);
    if (d < 0)
        d = fcntl(app_kfd, F_DUPFD, 3);
    return d < 0 ? -errno : d;
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
    stack_lock(s);
    struct tcp_res *r = &s->tres[sock];
    int rc = tcp_conn__listen(s->tcp, (slip_idx_t)sock, addr, port, backlog);
    if (rc == 0) {
        r->kfd = kfd;
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
        close(kfd);
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
    env_refresh(s, now_ns());
    struct ip_route rt;
    int rc = ip_output__route(&s->env, addr, &rt);
    stack_unlock(s);
    if (rc < 0)
        return rc;
    uint16_t lport = 0;
    int kfd = app_kfd >= 0 ? adopt_kfd(app_kfd, 0, &lport) : kernel_reserve_tcp(0, &lport);
    if (kfd < 0)
        return kfd;

    stack_lock(s);
    env_refresh(s, now_ns());
    struct tcp_res *r = &s->tres[sock];
    r->kfd = kfd;
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
    ip_output__flush(&s->env);
    stack_unlock(s);
    return rc;
}

ssize_t slip_tcp__send(struct slip_stack *s, int sock, const void *buf, size_t len, int more)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    struct iovec v = { .iov_base = (void *)buf, .iov_len = len };
    stack_lock(s);
    env_refresh(s, now_ns());
    ssize_t rc = tcp_conn__send(&s->env, s->tcp, (slip_idx_t)sock, &v, 1, more ? TCP_SEND_MORE : 0);
    ip_output__flush(&s->env);
    stack_unlock(s);
    return rc;
}

ssize_t slip_tcp__recv(struct slip_stack *s, int sock, void *buf, size_t len, int peek)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    env_refresh(s, now_ns());
    ssize_t rc = tcp_conn__recv(&s->env, s->tcp, (slip_idx_t)sock, buf, len, peek ? TCP_RECV_PEEK : 0);
    ip_output__flush(&s->env);     /* a window update may have been sent */
    stack_unlock(s);
    return rc;
}

int slip_tcp__shutdown(struct slip_stack *s, int sock, int how)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    env_refresh(s, now_ns());
    int rc = tcp_conn__shutdown(&s->env, s->tcp, (slip_idx_t)sock, how);
    ip_output__flush(&s->env);
    stack_unlock(s);
    return rc;
}

int slip_tcp__close(struct slip_stack *s, int sock)
{
    if (!tsock_ok(s, sock))
        return -EBADF;
    stack_lock(s);
    env_refresh(s, now_ns());
    struct tcp_conn *c = &s->tcp->conns[sock];
    struct tcp_res *r = &s->tres[sock];
    if (c->state == TCPS_LISTEN) {
        /* Accepted children were steered by the listener's claim: give each live one its own
         * 4-tuple claim before the listener's goes away. */
        for (uint32_t i = 0; i < s->tcp->high_water; i++) {
            struct tcp_conn *ch = &s->tcp->conns[i];
            if ((int)i == sock || ch->state == TCPS_CLOSED || ch->state == TCPS_LISTEN ||
                !(ch->flags & TCPF_PASSIVE) || ch->lport != c->lport || s->tres[i].key)
                continue;
            struct tcp_res *cr = &s->tres[i];
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
        if (r->key || r->kfd >= 0) {
            r->pending = 1;
            s->shm->tres_pending++;
            if (tcp_res_done(s, (unsigned)sock))
                tcp_res_release(s, r);
        } else {
            memset(r, 0, sizeof(*r));
            r->kfd = -1;
        }
    }
    ip_output__flush(&s->env);
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
    env_refresh(s, now_ns());
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
    size_t n = (size_t)snprintf(buf, len, "%d", s->arena.memfd);
    clear_cloexec(s->arena.memfd);
    for (unsigned i = 0; i < s->nifs && n < len; i++) {
        int fds[4];
        steer__export(s->ifs[i].steer, fds);
        n += (size_t)snprintf(buf + n, len - n, ";%d,%d,%d,%d", fds[0], fds[1], fds[2], fds[3]);
        for (int k = 0; k < 4; k++)
            clear_cloexec(fds[k]);
        for (unsigned q = 0; q < s->ifs[i].nq && n < len; q++) {
            int fd = xsk_port__fd(s->ifs[i].ports[q]);
            n += (size_t)snprintf(buf + n, len - n, ",%d", fd);
            clear_cloexec(fd);
        }
    }
    return n < len ? 0 : -ENOSPC;
}

int slip_stack__attach(struct slip_stack **out, const char *spec, char *err, size_t errlen)
{
    struct slip_stack *s = calloc(1, sizeof(*s));
    int rc = -EINVAL;
    if (!s)
        return -ENOMEM;
    s->epfd = -1;
    s->arena.memfd = -1;
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
    if (s->shm->magic != SLIP_SHM_MAGIC || s->shm->version != SLIP_SHM_VERSION) {
        snprintf(err, errlen, "SLIP_ATTACH: not a slipstream stack of this version");
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
    s->udp = slip_arena__ptr(a, s->shm->off_udp);
    s->tcp = slip_arena__ptr(a, s->shm->off_tcp);
    s->tres = s->shm->tres;
    s->kfd = s->shm->udp_kfd;
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
    *out = s;
    return 0;
fail:
    /* Never close inherited fds here: the stack keeps running for whoever else maps it. */
    free(s);
    return rc < 0 ? rc : -EINVAL;
}
