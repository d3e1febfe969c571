/* AF_XDP port on libxdp's xsk API: a UMEM registered over caller memory (memfd, MAP_SHARED) and
 * one socket per (interface, queue) sharing it. Frames move between the caller's frame pool and
 * the fill/TX rings; completions and received frames come back as UMEM offsets. Every failure
 * is turned into one line that names its cause, since most of them are setup problems. */
#include "xsk/xsk_port.h"

#include <dirent.h>
#include <errno.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/ethtool.h>
#include <linux/if_xdp.h>
#include <linux/sockios.h>

#include <xdp/xsk.h>

#include "base/log.h"
#include "base/sandbox.h"

#ifndef SOL_XDP
#define SOL_XDP 283
#endif
#ifndef SO_BUSY_POLL
#define SO_BUSY_POLL 46
#endif
#ifndef SO_PREFER_BUSY_POLL
#define SO_PREFER_BUSY_POLL 69
#endif
#ifndef SO_BUSY_POLL_BUDGET
#define SO_BUSY_POLL_BUDGET 70
#endif

/* How many sendto() kicks one tx_flush may spend. Copy mode transmits at most 32 frames per
 * syscall (the kernel's TX_BATCH_SIZE) and answers EAGAIN when more are queued, so a full
 * 2048-entry ring needs 64 kicks; beyond the bound the rest waits for the next flush. */
#define XSK_KICK_MIN 8
#define XSK_COPY_TX_BATCH 32

struct xsk_umem_area {
    struct xsk_umem *umem;          /* libxdp handle; its fd is the first socket's fd */
    void *mem;
    uint64_t size;
    struct xsk_umem_area_config cfg;
    struct xsk_frame_pool *pool;
    /* The UMEM's own fill/completion rings (created with the UMEM): the first port uses them,
     * later ports on other (ifindex, queue) pairs get their own through create_shared. */
    struct xsk_ring_prod fill;
    struct xsk_ring_cons comp;
    bool own_rings_mapped;          /* still ours to unmap (no port took them) */
    struct xsk_port *ports;         /* live ports, to refuse a second one on the same queue */
};

struct xsk_port {
    struct xsk_umem_area *u;
    struct xsk_port *next;
    struct xsk_socket *xsk;
    struct xsk_ring_cons rx;
    struct xsk_ring_prod tx;
    struct xsk_ring_prod own_fill;
    struct xsk_ring_cons own_comp;
    struct xsk_ring_prod *fill;     /* &own_fill, or the UMEM's rings for the first port */
    struct xsk_ring_cons *comp;
    bool uses_umem_rings;
    /* The fill and completion rings are the queue's, shared with the sockets of other stacks
     * (XDP_SHARED_UMEM on one queue), each with its own cached indices: reload them before
     * every use (the caller serialises users of one queue, see xsk_port.h). */
    bool shared_rings;
    _Atomic uint32_t *qlock;        /* the queue's lock across stacks (xsk_port__share_rings) */
    const pid_t *self;
    uint32_t qlock_misses;          /* in a row: every 4096th looks whether the holder lives */
    /* Rings this process mapped by hand (adopted or joined ports; libxdp unmaps its own). The
     * mappings hold the socket open: destroy unmaps them so close() really releases it. */
    void *maps[4];
    size_t map_len[4];
    int fd;
    int ifindex;
    uint32_t queue;
    uint32_t burst;
    uint32_t kick_max;
    bool zerocopy;
    bool need_wakeup;
    bool busy_poll;
    char ifname[IF_NAMESIZE];
    /* Software counters (kernel ones are read on demand): the port's own, or the stack's copy in
     * memory every process of the stack maps (xsk_port__share_counters). */
    struct xsk_port_stats *sw;
    struct xsk_port_stats sw_own;
};

static bool is_pow2(uint32_t v) { return v && !(v & (v - 1)); }

/* ---- UMEM area --------------------------------------------------------------------------- */

static int umem_register(struct xsk_umem_area *u)
{
    struct xsk_umem_config lc = {
        .fill_size = u->cfg.fill_size,
        .comp_size = u->cfg.comp_size,
        .frame_size = u->cfg.frame_size,
        .frame_headroom = u->cfg.headroom,
        .flags = 0,
    };
    memset(&u->fill, 0, sizeof(u->fill));
    memset(&u->comp, 0, sizeof(u->comp));
    int ret = xsk_umem__create(&u->umem, u->mem, u->size, &u->fill, &u->comp, &lc);
    if (ret) {
        u->umem = NULL;
        return ret;
    }
    u->own_rings_mapped = true;
    return 0;
}

/* Unmaps the UMEM's own fill/completion rings (libxdp only unmaps them when a socket that used
 * them is deleted) and closes the UMEM socket. */
static void umem_unregister(struct xsk_umem_area *u)
{
    if (!u->umem)
        return;
    if (u->own_rings_mapped) {
        struct xdp_mmap_offsets off;
        socklen_t optlen = sizeof(off);
        /* Kernels >= 5.4 report the layout with flags; that is all we support (>= 5.15). */
        if (!getsockopt(xsk_umem__fd(u->umem), SOL_XDP, XDP_MMAP_OFFSETS, &off, &optlen) &&
            optlen == sizeof(off)) {
            munmap((uint8_t *)u->fill.ring - off.fr.desc,
                   off.fr.desc + (size_t)u->cfg.fill_size * sizeof(uint64_t));
            munmap((uint8_t *)u->comp.ring - off.cr.desc,
                   off.cr.desc + (size_t)u->cfg.comp_size * sizeof(uint64_t));
        }
        u->own_rings_mapped = false;
    }
    if (xsk_umem__delete(u->umem) == -EBUSY)
        slip_warn("xsk: UMEM destroyed while ports still use it; destroy the ports first");
    u->umem = NULL;
}

int xsk_umem_area__create(struct xsk_umem_area **out, void *mem, const struct xsk_umem_area_config *cfg,
                          struct xsk_frame_pool *pool, char *err, size_t errlen)
{
    *out = NULL;
    if (!mem || !cfg || !pool)
        return -EINVAL;
    if ((cfg->frame_size != 2048 && cfg->frame_size != 4096) || !cfg->nframes ||
        !is_pow2(cfg->fill_size) || !is_pow2(cfg->comp_size) ||
        cfg->headroom + 256 + 64 > cfg->frame_size) {
        snprintf(err, errlen, "xsk: bad UMEM config: frame size %u (2048 or 4096), %u frames, fill %u and comp %u "
                 "(powers of two), headroom %u", cfg->frame_size, cfg->nframes, cfg->fill_size,
                 cfg->comp_size, cfg->headroom);
        return -EINVAL;
    }
    if ((uintptr_t)mem & (uintptr_t)(sysconf(_SC_PAGESIZE) - 1)) {
        snprintf(err, errlen, "xsk: UMEM memory must be page aligned");
        return -EINVAL;
    }
    struct xsk_umem_area *u = calloc(1, sizeof(*u));
    if (!u)
        return -ENOMEM;
    u->mem = mem;
    u->size = (uint64_t)cfg->nframes * cfg->frame_size;
    u->cfg = *cfg;
    u->pool = pool;
    xsk_frame_pool__init(pool, cfg->nframes, cfg->frame_size);

    int ret = umem_register(u);
    if (ret) {
        switch (-ret) {
        case EPERM:
        case EACCES:
            snprintf(err, errlen, "xsk: cannot create an AF_XDP socket: missing CAP_NET_RAW (run as root or grant "
                     "CAP_NET_RAW, CAP_NET_ADMIN, CAP_BPF)");
            break;
        case EAFNOSUPPORT:
            snprintf(err, errlen, "xsk: the kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS is off)");
            break;
        case ENOMEM:
        case ENOBUFS:
            snprintf(err, errlen, "xsk: UMEM registration of %llu bytes failed (%s): RLIMIT_MEMLOCK too low "
                     "(ulimit -l) or out of memory", (unsigned long long)u->size, strerror(-ret));
            break;
        default:
            snprintf(err, errlen, "xsk: UMEM registration of %llu bytes failed: %s", (unsigned long long)u->size,
                     strerror(-ret));
        }
        free(u);
        return ret;
    }
    *out = u;
    return 0;
}

void xsk_umem_area__destroy(struct xsk_umem_area *u)
{
    if (!u)
        return;
    umem_unregister(u);
    free(u);
}

void *xsk_umem_area__data(const struct xsk_umem_area *u, uint64_t addr)
{
    return (uint8_t *)u->mem + addr;
}

struct xsk_frame_pool *xsk_umem_area__pool(const struct xsk_umem_area *u) { return u->pool; }
uint32_t xsk_umem_area__headroom(const struct xsk_umem_area *u) { return u->cfg.headroom; }

/* ---- diagnostics ------------------------------------------------------------------------- */

static void driver_name(const char *ifname, char *buf, size_t len)
{
    struct ethtool_drvinfo info = { .cmd = ETHTOOL_GDRVINFO };
    struct ifreq ifr;
    snprintf(buf, len, "unknown");
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
    ifr.ifr_data = (void *)&info;
    if (!ioctl(fd, SIOCETHTOOL, &ifr) && info.driver[0])
        snprintf(buf, len, "%.*s", (int)sizeof(info.driver), info.driver);
    close(fd);
}

/* Number of RX queues the kernel exposes (real_num_rx_queues), from sysfs; -1 if unknown. */
/* In a seccomp sandbox (base/sandbox.h) sendto and recvfrom may kill the process; poll is on
 * every such list, and on an AF_XDP socket bound with XDP_USE_NEED_WAKEUP it does both jobs
 * (kernel xsk_poll: it transmits a batch in copy mode, wakes the driver in zero-copy mode). One
 * fd, as a sandbox may have set RLIMIT_NOFILE to 1 (poll refuses more fds than the limit). */
static void sandbox_kick(struct xsk_port *p)
{
    struct pollfd pf = { .fd = p->fd, .events = POLLIN | POLLOUT };
    poll(&pf, 1, 0);
}

static int rx_queue_count(const char *ifname)
{
    char path[128];
    snprintf(path, sizeof(path), "/sys/class/net/%s/queues", ifname);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "rx-", 3))
            n++;
    closedir(d);
    return n ? n : -1;
}

static void describe_bind_error(const struct xsk_port_config *cfg, bool zc_asked, int ret, char *err,
                                size_t errlen)
{
    char drv[48];
    switch (-ret) {
    case EOPNOTSUPP:
        if (zc_asked) {
            driver_name(cfg->ifname, drv, sizeof(drv));
            snprintf(err, errlen, "zero-copy refused by %s (driver %s): use --mode copy or auto",
                     cfg->ifname, drv);
            return;
        }
        break;
    case EPERM:
    case EACCES:
        snprintf(err, errlen, "AF_XDP on %s: permission denied: needs CAP_NET_RAW, CAP_NET_ADMIN and "
                 "CAP_BPF (run as root)", cfg->ifname);
        return;
    case EBUSY:
        snprintf(err, errlen, "queue %u of %s is busy: another AF_XDP socket is bound to it, or the "
                 "UMEM's mode does not fit this device", cfg->queue_id, cfg->ifname);
        return;
    case ENODEV:
    case ENXIO:
        snprintf(err, errlen, "interface %s or its queue %u does not exist (it has %d rx queues)",
                 cfg->ifname, cfg->queue_id, rx_queue_count(cfg->ifname));
        return;
    case EINVAL: {
        int nq = rx_queue_count(cfg->ifname);
        if (nq > 0 && cfg->queue_id >= (uint32_t)nq) {
            snprintf(err, errlen, "queue %u does not exist on %s (it has %d rx queues)", cfg->queue_id,
                     cfg->ifname, nq);
            return;
        }
        break;
    }
    case ENOMEM:
    case ENOBUFS:
        snprintf(err, errlen, "AF_XDP socket on %s queue %u: %s: RLIMIT_MEMLOCK too low (ulimit -l) or "
                 "out of memory", cfg->ifname, cfg->queue_id, strerror(-ret));
        return;
    }
    snprintf(err, errlen, "AF_XDP socket on %s queue %u: %s", cfg->ifname, cfg->queue_id, strerror(-ret));
}

/* ---- port -------------------------------------------------------------------------------- */

static int set_busy_poll(struct xsk_port *p, const struct xsk_port_config *cfg, char *err, size_t errlen)
{
    static const struct { int opt; const char *name; } opts[] = {
        { SO_PREFER_BUSY_POLL, "SO_PREFER_BUSY_POLL" },
        { SO_BUSY_POLL, "SO_BUSY_POLL" },
        { SO_BUSY_POLL_BUDGET, "SO_BUSY_POLL_BUDGET" },
    };
    int vals[3] = { 1, (int)(cfg->busy_poll_usec ? cfg->busy_poll_usec : 20),
                    (int)(cfg->busy_poll_budget ? cfg->busy_poll_budget : cfg->burst) };
    for (int i = 0; i < 3; i++) {
        if (!setsockopt(p->fd, SOL_SOCKET, opts[i].opt, &vals[i], sizeof(vals[i])))
            continue;
        int e = errno;
        if (e == ENOPROTOOPT || e == EINVAL)
            snprintf(err, errlen, "busy poll on %s: the kernel does not know %s (needs Linux >= 5.11)",
                     cfg->ifname, opts[i].name);
        else if (e == EPERM)
            snprintf(err, errlen, "busy poll on %s: %s=%d needs CAP_NET_ADMIN (or a value within "
                     "net.core.busy_poll limits)", cfg->ifname, opts[i].name, vals[i]);
        else
            snprintf(err, errlen, "busy poll on %s: %s: %s", cfg->ifname, opts[i].name, strerror(e));
        return -e;
    }
    return 0;
}

/* Moves as many frames from the pool to the fill ring as both allow, once a quarter of the ring
 * is free. Refilling after every burst (often one frame when the consumer spins) writes the
 * producer index per packet, and each write takes the cache line away from the CPU where the
 * kernel consumes fill entries; a quarter-ring batch keeps 3/4 of the ring posted and moves that
 * line once per ring/4 frames. Asking libxdp for at least that much room also means the
 * kernel's consumer index is only read when the cached view falls short. */
static void resync_cons(struct xsk_ring_cons *r);
static void resync_prod(struct xsk_ring_prod *r);

/* The queue's try-lock across stacks: true when taken (or when the port has none). */
static bool qlock_take(struct xsk_port *p)
{
    if (!p->qlock)
        return true;
    uint32_t expect = 0, me = (uint32_t)*p->self;
    if (atomic_compare_exchange_strong_explicit(p->qlock, &expect, me, memory_order_acquire, memory_order_relaxed)) {
        p->qlock_misses = 0;
        return true;
    }
    /* expect is the holder. A process killed while holding it would stop the queue for good. */
    if ((++p->qlock_misses & 4095) == 0 && expect != me && !slip_sandbox__limited() && kill((pid_t)expect, 0) < 0 && errno == ESRCH &&
        atomic_compare_exchange_strong_explicit(p->qlock, &expect, me, memory_order_acquire, memory_order_relaxed)) {
        p->qlock_misses = 0;
        return true;
    }
    return false;
}

static void qlock_drop(struct xsk_port *p)
{
    if (p->qlock)
        atomic_store_explicit(p->qlock, 0, memory_order_release);
}

void xsk_port__share_rings(struct xsk_port *p, _Atomic uint32_t *lock, const pid_t *self)
{
    p->qlock = self ? lock : NULL;
    p->self = self;
    if (lock)
        p->shared_rings = true;
}

static void port_refill_locked(struct xsk_port *p);

static void port_refill(struct xsk_port *p)
{
    if (!qlock_take(p)) {
        p->sw->fill_busy++;
        return;
    }
    port_refill_locked(p);
    qlock_drop(p);
}

static void port_refill_locked(struct xsk_port *p)
{
    struct xsk_frame_pool *pool = p->u->pool;
    if (p->shared_rings)
        resync_prod(p->fill);
    uint32_t want = SLIP_MAX(p->fill->size / 4, 1u);
    uint32_t room = xsk_prod_nb_free(p->fill, want);
    if (room < want)
        return;
    uint32_t n = SLIP_MIN(room, pool->count);
    if (!n) {
        p->sw->fill_pool_empty++;
        return;
    }
    uint32_t idx;
    /* reserve is all-or-nothing, and n fits the free room computed above. */
    if (xsk_ring_prod__reserve(p->fill, n, &idx) != n)
        return;
    /* One entry at a time, each submitted as soon as its frame left the pool: a process killed
     * in this loop loses at most the frame in between, where a submit of the whole batch at the
     * end lost every frame taken so far (up to a quarter ring). */
    for (uint32_t i = 0; i < n; i++) {
        *xsk_ring_prod__fill_addr(p->fill, idx + i) = xsk_frame_pool__get(pool, p->u->cfg.nframes);
        xsk_ring_prod__submit(p->fill, 1);
    }
}

int xsk_port__create(struct xsk_port **out, struct xsk_umem_area *u, const struct xsk_port_config *cfg,
                     char *err, size_t errlen)
{
    int ret;
    *out = NULL;
    if (errlen)
        err[0] = 0;
    if (!u || !cfg || !cfg->ifname) {
        snprintf(err, errlen, "xsk_port__create: missing UMEM or interface name");
        return -EINVAL;
    }
    if (!u->umem) {
        snprintf(err, errlen, "xsk_port__create: the UMEM is not registered");
        return -EINVAL;
    }
    if (!is_pow2(cfg->rx_size) || !is_pow2(cfg->tx_size)) {
        snprintf(err, errlen, "AF_XDP ring sizes must be powers of two (rx %u, tx %u)", cfg->rx_size,
                 cfg->tx_size);
        return -EINVAL;
    }
    if (strlen(cfg->ifname) >= IF_NAMESIZE) {
        snprintf(err, errlen, "interface name '%s' is too long", cfg->ifname);
        return -EINVAL;
    }
    int ifindex = (int)if_nametoindex(cfg->ifname);
    if (!ifindex) {
        snprintf(err, errlen, "interface %s does not exist in this network namespace", cfg->ifname);
        return -ENODEV;
    }
    int nq = rx_queue_count(cfg->ifname);
    if (nq > 0 && cfg->queue_id >= (uint32_t)nq) {
        snprintf(err, errlen, "queue %u does not exist on %s (it has %d rx queue%s)", cfg->queue_id,
                 cfg->ifname, nq, nq == 1 ? "" : "s");
        return -ENXIO;
    }
    for (struct xsk_port *q = u->ports; q; q = q->next)
        if (q->ifindex == ifindex && q->queue == cfg->queue_id) {
            snprintf(err, errlen, "%s queue %u already has a port on this UMEM", cfg->ifname, cfg->queue_id);
            return -EEXIST;
        }

    struct xsk_port *p = calloc(1, sizeof(*p));
    if (p)
        p->sw = &p->sw_own;
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    p->u = u;
    p->ifindex = ifindex;
    p->queue = cfg->queue_id;
    p->burst = cfg->burst ? cfg->burst : XSK_BURST_DEFAULT;
    p->need_wakeup = cfg->need_wakeup;
    p->busy_poll = cfg->busy_poll;
    p->kick_max = SLIP_MAX(XSK_KICK_MIN, cfg->tx_size / XSK_COPY_TX_BATCH + 2);
    snprintf(p->ifname, sizeof(p->ifname), "%s", cfg->ifname);

    /* The first socket is the UMEM's own socket and uses its fill/completion rings; the kernel
     * gives every further (device, queue) its own pair, which create_shared maps into ours. */
    bool first = u->own_rings_mapped && !u->ports;
    p->uses_umem_rings = first;
    p->fill = first ? &u->fill : &p->own_fill;
    p->comp = first ? &u->comp : &p->own_comp;

    struct xsk_socket_config sc = {
        .rx_size = cfg->rx_size,
        .tx_size = cfg->tx_size,
        .libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD,
        .xdp_flags = 0,
        .bind_flags = 0,
    };
    /* AUTO passes neither flag: the kernel then tries zero-copy and falls back to copy itself.
     * Sockets after the first inherit the UMEM's mode (the kernel refuses flags with
     * XDP_SHARED_UMEM), so libxdp ignores bind_flags for them. */
    if (cfg->mode == XSK_BIND_COPY)
        sc.bind_flags |= XDP_COPY;
    else if (cfg->mode == XSK_BIND_ZEROCOPY)
        sc.bind_flags |= XDP_ZEROCOPY;
    if (cfg->need_wakeup)
        sc.bind_flags |= XDP_USE_NEED_WAKEUP;

    ret = xsk_socket__create_shared(&p->xsk, cfg->ifname, cfg->queue_id, u->umem, &p->rx, &p->tx,
                                    p->fill, p->comp, &sc);
    if (ret) {
        describe_bind_error(cfg, cfg->mode == XSK_BIND_ZEROCOPY, ret, err, errlen);
        if (first) {
            /* A failed first bind leaves ring setup behind on the UMEM socket that libxdp cannot
             * redo: register the UMEM afresh so the area stays usable for another attempt. */
            umem_unregister(u);
            int r2 = umem_register(u);
            if (r2)
                slip_warn("xsk: re-registering the UMEM after a failed bind: %s", strerror(-r2));
        }
        free(p);
        return ret;
    }
    p->fd = xsk_socket__fd(p->xsk);
    if (first)
        u->own_rings_mapped = false;    /* libxdp unmaps them when this socket is deleted */

    struct xdp_options opts = { 0 };
    socklen_t optlen = sizeof(opts);
    if (!getsockopt(p->fd, SOL_XDP, XDP_OPTIONS, &opts, &optlen))
        p->zerocopy = opts.flags & XDP_OPTIONS_ZEROCOPY;
    if (cfg->mode == XSK_BIND_ZEROCOPY && !p->zerocopy) {
        snprintf(err, errlen, "zero-copy not available on %s queue %u: the shared UMEM is bound in copy "
                 "mode by its first port", cfg->ifname, cfg->queue_id);
        ret = -EOPNOTSUPP;
        goto fail_socket;
    }
    if (cfg->busy_poll) {
        ret = set_busy_poll(p, cfg, err, errlen);
        if (ret)
            goto fail_socket;
    }

    p->next = u->ports;
    u->ports = p;
    port_refill(p);
    *out = p;
    return 0;

fail_socket:
    xsk_socket__delete(p->xsk);
    if (first) {
        /* The UMEM's rings went with the socket: start the UMEM over (see above). */
        umem_unregister(u);
        umem_register(u);
    }
    free(p);
    return ret;
}

void xsk_port__destroy(struct xsk_port *p)
{
    if (!p)
        return;
    struct xsk_umem_area *u = p->u;
    /* Give back what the kernel already returned. Frames still in the fill ring or in flight
     * stay lost to the pool: reading them back races with the kernel while bound. */
    xsk_port__complete(p);
    uint32_t idx;
    p->rx.cached_cons = __atomic_load_n(p->rx.consumer, __ATOMIC_RELAXED);
    uint32_t n = xsk_ring_cons__peek(&p->rx, p->rx.size, &idx);
    for (uint32_t i = 0; i < n; i++)
        xsk_frame_pool__put(u->pool, u->cfg.nframes, xsk_ring_cons__rx_desc(&p->rx, idx + i)->addr);
    xsk_ring_cons__release(&p->rx, n);

    for (struct xsk_port **pp = &u->ports; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    if (p->xsk) {
        xsk_socket__delete(p->xsk);
    } else {
        for (int i = 0; i < 4; i++)
            if (p->maps[i])
                munmap(p->maps[i], p->map_len[i]);
        close(p->fd);
    }
    free(p);
}

int xsk_port__fd(const struct xsk_port *p) { return p->fd; }
bool xsk_port__zerocopy(const struct xsk_port *p) { return p->zerocopy; }
uint32_t xsk_port__queue(const struct xsk_port *p) { return p->queue; }
int xsk_port__ifindex(const struct xsk_port *p) { return p->ifindex; }

unsigned xsk_port__rx_burst(struct xsk_port *p, struct xsk_frame *frames, unsigned max)
{
    unsigned n = xsk_port__rx_peek(p, frames, max);
    xsk_port__rx_release(p, n);
    return n;
}

void xsk_port__rx_release(struct xsk_port *p, unsigned n)
{
    if (n)
        xsk_ring_cons__release(&p->rx, n);
}

unsigned xsk_port__rx_peek(struct xsk_port *p, struct xsk_frame *frames, unsigned max)
{
    uint32_t idx;
    /* From the shared consumer index: entries a previous peek left unreleased (its caller was
     * killed, or stopped early) come first, not after them. */
    p->rx.cached_cons = __atomic_load_n(p->rx.consumer, __ATOMIC_RELAXED);
    unsigned n = xsk_ring_cons__peek(&p->rx, max, &idx);
    for (unsigned i = 0; i < n; i++) {
        const struct xdp_desc *d = xsk_ring_cons__rx_desc(&p->rx, idx + i);
        frames[i].addr = d->addr;
        frames[i].len = d->len;
        frames[i].pad_ = 0;
    }
    if (n) {
        p->sw->rx_packets += n;
        p->sw->rx_bursts++;
    }
    port_refill(p);
    /* Kernel docs (af_xdp.rst, XDP_USE_NEED_WAKEUP): when the fill ring's flag is set the driver
     * waits for a syscall before it fills RX again. With busy poll, an empty RX ring is where the
     * application must drive NAPI itself. */
    if ((p->need_wakeup && xsk_ring_prod__needs_wakeup(p->fill)) || (p->busy_poll && !n)) {
        if (slip_sandbox__limited())
            sandbox_kick(p);
        else
            recvfrom(p->fd, NULL, 0, MSG_DONTWAIT, NULL, NULL);
    }
    return n;
}

unsigned xsk_port__tx_burst(struct xsk_port *p, const struct xsk_frame *frames, unsigned n)
{
    uint32_t room = xsk_prod_nb_free(&p->tx, n);
    uint32_t take = SLIP_MIN(room, n);
    if (take < n)
        p->sw->tx_ring_full++;
    if (!take)
        return 0;
    uint32_t idx;
    if (xsk_ring_prod__reserve(&p->tx, take, &idx) != take)
        return 0;
    for (uint32_t i = 0; i < take; i++) {
        struct xdp_desc *d = xsk_ring_prod__tx_desc(&p->tx, idx + i);
        d->addr = frames[i].addr;
        d->len = frames[i].len;
        d->options = 0;
    }
    xsk_ring_prod__submit(&p->tx, take);
    p->sw->tx_packets += take;
    return take;
}

/* Each ring entry is released before its frame goes back to the pool: a process that dies in
 * between (killed inside the stack; another process then takes the lock over) leaks that frame,
 * where the other order would let the survivor free it a second time and hand one frame to two
 * users. */
void xsk_port__complete(struct xsk_port *p)
{
    struct xsk_frame_pool *pool = p->u->pool;
    uint64_t addrs[256];
    if (!qlock_take(p)) {
        p->sw->comp_busy++;
        return;
    }
    if (p->shared_rings)
        resync_cons(p->comp);
    for (;;) {
        uint32_t idx;
        uint32_t n = xsk_ring_cons__peek(p->comp, SLIP_ARRAY_SIZE(addrs), &idx);
        if (!n)
            break;
        for (uint32_t i = 0; i < n; i++)
            addrs[i] = *xsk_ring_cons__comp_addr(p->comp, idx + i);
        /* One entry at a time: a reaper killed here loses at most the frame between its entry's
         * release and its put, where a release of the whole batch first lost up to 256. */
        for (uint32_t i = 0; i < n; i++) {
            xsk_ring_cons__release(p->comp, 1);
            xsk_frame_pool__put(pool, p->u->cfg.nframes, addrs[i]);
        }
        if (n < SLIP_ARRAY_SIZE(addrs))
            break;
    }
    qlock_drop(p);
}

/* Entries of a ring we produce into that the kernel has not taken yet. */
static uint32_t prod_pending(const struct xsk_ring_prod *r)
{
    return __atomic_load_n(r->producer, __ATOMIC_RELAXED) - __atomic_load_n(r->consumer, __ATOMIC_ACQUIRE);
}

/* Descriptors on the TX ring the kernel has not taken yet. */
static uint32_t tx_queued(const struct xsk_port *p)
{
    return prod_pending(&p->tx);
}

uint32_t xsk_port__tx_queued(const struct xsk_port *p)
{
    return tx_queued(p);
}

uint32_t xsk_port__fill_posted(const struct xsk_port *p)
{
    return prod_pending(p->fill);
}

int xsk_port__tx_flush(struct xsk_port *p)
{
    int ret = 0;
    xsk_port__complete(p);
    if (!tx_queued(p))
        return 0;
    /* Zero-copy drivers transmit asynchronously: one wakeup when they ask for it. Copy mode
     * transmits only inside the syscall, a bounded batch per call, so keep kicking while the
     * ring holds frames (TESTBED.md: EAGAIN = call again, EBUSY = the frame was dropped). */
    if (p->zerocopy && p->need_wakeup && !xsk_ring_prod__needs_wakeup(&p->tx))
        return 0;
    for (uint32_t tries = 0; tries < p->kick_max; tries++) {
        p->sw->tx_kicks++;
        int e = 0;
        if (slip_sandbox__limited())
            sandbox_kick(p);
        else if (sendto(p->fd, NULL, 0, MSG_DONTWAIT, NULL, 0) < 0)
            e = errno;
        xsk_port__complete(p);
        if (e == EAGAIN) {
            p->sw->tx_kick_eagain++;
        } else if (e == EBUSY) {
            p->sw->tx_kick_ebusy++;
        } else if (e && e != EINTR) {
            /* ENOBUFS, ENETDOWN, ENXIO...: not something another kick fixes. */
            ret = -e;
            break;
        } else if (p->zerocopy) {
            break;
        }
        if (!tx_queued(p))
            break;
    }
    return ret;
}

bool xsk_port__rx_pending(const struct xsk_port *p)
{
    return __atomic_load_n(p->rx.producer, __ATOMIC_ACQUIRE) != *p->rx.consumer;
}

void xsk_port__share_counters(struct xsk_port *p, struct xsk_port_stats *area)
{
    p->sw = area ? area : &p->sw_own;
}

int xsk_port__stats(struct xsk_port *p, struct xsk_port_stats *out)
{
    struct xdp_statistics ks;
    memset(&ks, 0, sizeof(ks));
    *out = *p->sw;
    socklen_t optlen = sizeof(ks);
    if (getsockopt(p->fd, SOL_XDP, XDP_STATISTICS, &ks, &optlen))
        return -errno;
    /* Kernels before 5.9 return only the first three fields; the rest stay zero. */
    out->rx_dropped = ks.rx_dropped;
    out->rx_invalid_descs = ks.rx_invalid_descs;
    out->tx_invalid_descs = ks.tx_invalid_descs;
    if (optlen >= offsetof(struct xdp_statistics, rx_ring_full) + sizeof(ks.rx_ring_full))
        out->rx_ring_full = ks.rx_ring_full;
    if (optlen >= offsetof(struct xdp_statistics, rx_fill_ring_empty_descs) + sizeof(uint64_t))
        out->rx_fill_ring_empty_descs = ks.rx_fill_ring_empty_descs;
    if (optlen >= offsetof(struct xdp_statistics, tx_ring_empty_descs) + sizeof(uint64_t))
        out->tx_ring_empty_descs = ks.tx_ring_empty_descs;
    return 0;
}

/* The rings are shared mappings, but libxdp keeps cached copies of the producer and consumer
 * indices in each process's ring structs. After another process (a fork child) used the rings,
 * those copies are stale: a consumer would read descriptors already consumed, a producer would
 * overwrite entries in use. Reloading them from the shared indices makes the rings safe to pass
 * between processes under the stack lock. */
static void resync_cons(struct xsk_ring_cons *r)
{
    r->cached_prod = __atomic_load_n(r->producer, __ATOMIC_ACQUIRE);
    r->cached_cons = __atomic_load_n(r->consumer, __ATOMIC_ACQUIRE);
}

static void resync_prod(struct xsk_ring_prod *r)
{
    r->cached_prod = __atomic_load_n(r->producer, __ATOMIC_ACQUIRE);
    r->cached_cons = __atomic_load_n(r->consumer, __ATOMIC_ACQUIRE) + r->size;
}

void xsk_port__resync(struct xsk_port *p)
{
    resync_cons(&p->rx);
    resync_prod(&p->tx);
    resync_prod(p->fill);
    resync_cons(p->comp);
}

/* ---- adoption by an exec'd image ------------------------------------------------------------
 * After exec the UMEM stays registered (the kernel pins its pages, which are the memfd's) and
 * the sockets stay bound; only this process's mappings of the rings are gone. Adoption maps the
 * rings of an inherited, bound socket again and rebuilds the ring structs from the shared
 * producer/consumer indices. There is no libxdp handle: such ports are closed with close(). */

int xsk_umem_area__adopt(struct xsk_umem_area **out, void *mem, const struct xsk_umem_area_config *cfg,
                         struct xsk_frame_pool *pool)
{
    struct xsk_umem_area *u = calloc(1, sizeof(*u));
    if (!u)
        return -ENOMEM;
    u->mem = mem;
    u->size = (uint64_t)cfg->nframes * cfg->frame_size;
    u->cfg = *cfg;
    u->pool = pool;         /* already initialised and in use: not reset */
    *out = u;
    return 0;
}

static void *map_ring(int fd, uint64_t pgoff, uint64_t desc_off, size_t entries, size_t entsz, size_t *len)
{
    *len = desc_off + entries * entsz;
    void *m = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, (off_t)pgoff);
    return m == MAP_FAILED ? NULL : m;
}

#define RING_FIELDS(r, m, o, n)                                         \
    do {                                                                \
        (r)->producer = (void *)((uint8_t *)(m) + (o).producer);       \
        (r)->consumer = (void *)((uint8_t *)(m) + (o).consumer);       \
        (r)->flags = (void *)((uint8_t *)(m) + (o).flags);             \
        (r)->ring = (uint8_t *)(m) + (o).desc;                          \
        (r)->mask = (n) - 1;                                            \
        (r)->size = (n);                                                \
    } while (0)

/* Maps the four rings of a bound socket (its RX and TX rings, and the fill and completion rings
 * of the pool it is bound to) into p, and reads their indices from the shared ones. */
static int port_map(struct xsk_port *p, int fd, uint32_t ring_size, uint32_t fq_size)
{
    struct xdp_mmap_offsets off;
    socklen_t optlen = sizeof(off);
    if (getsockopt(fd, SOL_XDP, XDP_MMAP_OFFSETS, &off, &optlen) < 0)
        return -errno;
    size_t lrx, ltx, lfr, lcr;
    void *mrx = map_ring(fd, XDP_PGOFF_RX_RING, off.rx.desc, ring_size, sizeof(struct xdp_desc), &lrx);
    void *mtx = map_ring(fd, XDP_PGOFF_TX_RING, off.tx.desc, ring_size, sizeof(struct xdp_desc), &ltx);
    void *mfr = map_ring(fd, XDP_UMEM_PGOFF_FILL_RING, off.fr.desc, fq_size, sizeof(uint64_t), &lfr);
    void *mcr = map_ring(fd, XDP_UMEM_PGOFF_COMPLETION_RING, off.cr.desc, fq_size, sizeof(uint64_t), &lcr);
    if (!mrx || !mtx || !mfr || !mcr) {
        int e = errno;
        if (mrx) munmap(mrx, lrx);
        if (mtx) munmap(mtx, ltx);
        if (mfr) munmap(mfr, lfr);
        if (mcr) munmap(mcr, lcr);
        return -e;
    }
    RING_FIELDS(&p->rx, mrx, off.rx, ring_size);
    RING_FIELDS(&p->tx, mtx, off.tx, ring_size);
    RING_FIELDS(&p->own_fill, mfr, off.fr, fq_size);
    RING_FIELDS(&p->own_comp, mcr, off.cr, fq_size);
    void *m[4] = { mrx, mtx, mfr, mcr };
    size_t l[4] = { lrx, ltx, lfr, lcr };
    memcpy(p->maps, m, sizeof(m));
    memcpy(p->map_len, l, sizeof(l));
    p->fill = &p->own_fill;
    p->comp = &p->own_comp;
    p->uses_umem_rings = false;
    struct xdp_options opts = { 0 };
    optlen = sizeof(opts);
    if (!getsockopt(fd, SOL_XDP, XDP_OPTIONS, &opts, &optlen))
        p->zerocopy = opts.flags & XDP_OPTIONS_ZEROCOPY;
    xsk_port__resync(p);
    return 0;
}

int xsk_port__adopt(struct xsk_port **out, struct xsk_umem_area *u, int fd, int ifindex, uint32_t queue,
                    uint32_t ring_size, uint32_t burst)
{
    struct xsk_port *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->sw = &p->sw_own;
    int rc = port_map(p, fd, ring_size, ring_size);
    if (rc < 0) {
        free(p);
        return rc;
    }
    p->u = u;
    p->fd = fd;
    p->ifindex = ifindex;
    p->queue = queue;
    p->burst = burst ? burst : XSK_BURST_DEFAULT;
    p->kick_max = SLIP_MAX(XSK_KICK_MIN, ring_size / XSK_COPY_TX_BATCH + 2);
    p->next = u->ports;
    u->ports = p;
    *out = p;
    return 0;
}

int xsk_port__join(struct xsk_port **out, struct xsk_umem_area *u, int share_fd, const struct xsk_port_config *cfg,
                   char *err, size_t errlen)
{
    *out = NULL;
    if (!u || !cfg || !cfg->ifname || !is_pow2(cfg->rx_size) || cfg->rx_size != cfg->tx_size) {
        snprintf(err, errlen, "xsk_port__join: bad configuration (equal power-of-two rx and tx sizes)");
        return -EINVAL;
    }
    int ifindex = (int)if_nametoindex(cfg->ifname);
    if (!ifindex) {
        snprintf(err, errlen, "interface %s does not exist in this network namespace", cfg->ifname);
        return -ENODEV;
    }
    int fd = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "AF_XDP socket: %s", strerror(e));
        return -e;
    }
    struct xsk_port *p = calloc(1, sizeof(*p));
    int rc = p ? 0 : -ENOMEM;
    if (p)
        p->sw = &p->sw_own;
    uint32_t rs = cfg->rx_size;
    if (!rc && (setsockopt(fd, SOL_XDP, XDP_RX_RING, &rs, sizeof(rs)) < 0 ||
                setsockopt(fd, SOL_XDP, XDP_TX_RING, &rs, sizeof(rs)) < 0))
        rc = -errno;
    /* The kernel takes the UMEM, its pool and so the queue's fill and completion rings from
     * share_fd's socket: any socket bound to this (device, queue) on the UMEM will do. Flags
     * are the pool's (copy or zero-copy, need_wakeup): the bind may not name any. */
    struct sockaddr_xdp sx = {
        .sxdp_family = AF_XDP, .sxdp_ifindex = (uint32_t)ifindex, .sxdp_queue_id = cfg->queue_id,
        .sxdp_flags = XDP_SHARED_UMEM, .sxdp_shared_umem_fd = (uint32_t)share_fd,
    };
    if (!rc && bind(fd, (struct sockaddr *)&sx, sizeof(sx)) < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot bind a second AF_XDP socket to %s queue %u on the shared UMEM: %s",
                 cfg->ifname, cfg->queue_id, strerror(-rc));
    } else if (!rc && (rc = port_map(p, fd, rs, u->cfg.fill_size)) < 0) {
        snprintf(err, errlen, "cannot map the rings of the AF_XDP socket on %s queue %u: %s", cfg->ifname,
                 cfg->queue_id, strerror(-rc));
    } else if (rc) {
        snprintf(err, errlen, "AF_XDP ring setup on %s queue %u: %s", cfg->ifname, cfg->queue_id, strerror(-rc));
    }
    if (rc) {
        free(p);
        close(fd);
        return rc;
    }
    p->u = u;
    p->fd = fd;
    p->ifindex = ifindex;
    p->queue = cfg->queue_id;
    p->shared_rings = true;
    p->burst = cfg->burst ? cfg->burst : XSK_BURST_DEFAULT;
    p->need_wakeup = cfg->need_wakeup;
    p->kick_max = SLIP_MAX(XSK_KICK_MIN, rs / XSK_COPY_TX_BATCH + 2);
    snprintf(p->ifname, sizeof(p->ifname), "%s", cfg->ifname);
    /* The first port on this queue in this process keeps its own copies of the shared rings'
     * indices: from now on both reload them before use. */
    for (struct xsk_port *q = u->ports; q; q = q->next)
        if (q->ifindex == ifindex && q->queue == cfg->queue_id)
            q->shared_rings = true;
    p->next = u->ports;
    u->ports = p;
    port_refill(p);
    *out = p;
    return 0;
}
