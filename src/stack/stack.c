/* The stack object: its configuration, the arena's layout, opening (ports and steering per
 * interface) and closing it, carrying it across exec or to another program (export, attach, the
 * checks of memory handed over), the lock, and what the guardian asks of it. */
#include "stack/stack_int.h"

/* This process's pid, cached (glibc no longer does) and updated in fork children. */
pid_t g_stack_pid;

void pid_refresh(void)
{
    g_stack_pid = getpid();
}

/* The stacks this process has open or attached. */
static struct slip_stack *g_stacks[16];

/* In a fork child: frames the parent's fault injector holds back are the parent's, who delivers
 * or frees them; a copy here would deliver them again later and free them twice. (Frames built
 * for transmission go straight onto the shared TX ring: nothing of them is process-local.) */
static void atfork_child(void)
{
    pid_refresh();
    for (unsigned k = 0; k < SLIP_ARRAY_SIZE(g_stacks); k++) {
        struct slip_stack *s = g_stacks[k];
        if (!s)
            continue;
        devices_forget(s);
        s->accept_sleepers = 0;     /* the parent's sleeping threads are not the child's */
        /* The bell is named after the pid: the child needs its own (the parent keeps its). */
        if (s->peer_bell >= 0)
            close(s->peer_bell);
        s->peer_bell = slip_sandbox__limited() ? -1 : slip_bell__open(g_stack_pid);
        /* The doorbell and the accept bell wake this process's sleepers: shared with the parent,
         * each process's rings woke the other's, and a blocking call's drain in one took a ring
         * the other's poll() had not seen yet (a lost wakeup: it slept to its timeout). The
         * child's own eventfds (a sandboxed child keeps the shared ones: eventfd may be fatal). */
        if (!slip_sandbox__limited()) {
            int *bells[] = { &s->doorbell, &s->accept_bell };
            for (unsigned i = 0; i < SLIP_ARRAY_SIZE(bells); i++) {
                if (*bells[i] >= 0)
                    close(*bells[i]);
                *bells[i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
            }
        }
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

/* Closes a port-reservation fd whose number came from shared memory, only if this process made
 * or inherited it as one (kfd.h); anything else is counted and left open. */
void kfd_close(struct slip_stack *s, int fd)
{
    if (fd > 0 && slip_kfd__close(fd) < 0)      /* 0: none (socktab.h) */
        s->shm->c.kfd_refused++;
}

void stack_locked_by_us(struct slip_stack *s)
{
    s->shm->lock.owner_pid = (uint32_t)g_stack_pid;
    if (s->proc >= 0 && s->shm->procs.p[s->proc].closeq_n)
        proc_drain_closeq(s);
    if (s->shm->last_holder != (uint32_t)g_stack_pid) {
        for (unsigned i = 0; i < s->nifs; i++)
            for (unsigned q = 0; q < s->ifs[i].nq; q++)
                if (s->ifs[i].ports[q])
                    xsk_port__resync(s->ifs[i].ports[q]);
        s->shm->last_holder = (uint32_t)g_stack_pid;
    }
}

/* Takes the stack lock. When another process held it last, the rings' cached indices in this
 * process are stale: reload them (see xsk_port__resync). */
void stack_lock(struct slip_stack *s)
{
    slip_lock__acquire(&s->shm->lock);
    stack_locked_by_us(s);
}

void stack_assert_locked(const struct slip_stack *s, const char *fn)
{
    if (SLIP_LIKELY(atomic_load_explicit(&s->shm->lock.word, memory_order_relaxed) != 0 &&
                    s->shm->lock.owner_pid == (uint32_t)g_stack_pid))
        return;
    slip_err("internal error: %s runs without the stack lock (lock word %u, owner %u, this process %d)", fn,
               (unsigned)atomic_load(&s->shm->lock.word), s->shm->lock.owner_pid, (int)g_stack_pid);
    abort();
}

void stack_unlock(struct slip_stack *s)
{
    slip_lock__release(&s->shm->lock);
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

bool slip_config__stack_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= sizeof(((struct slip_config *)0)->stack_name))
        return false;
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '.' ||
              *c == '_' || *c == '-'))
            return false;
    return true;
}

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
    /* The name goes into abstract socket names and `stat`: a short word, nothing else. */
    const char *name = slip_env__text(SLIP_ENV_STACK_NAME);
    c->stack_name[0] = 0;
    if (name && *name) {
        if (!slip_config__stack_name_ok(name)) {
            snprintf(err, errlen, "SLIP_STACK_NAME=%s: at most %zu characters of A-Z a-z 0-9 . _ -", name,
                     sizeof(c->stack_name) - 1);
            return -EINVAL;
        }
        snprintf(c->stack_name, sizeof(c->stack_name), "%s", name);
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

void env_refresh(struct slip_stack *s, slip_time_t now)
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

/* Reads n integers from a sysctl file: false if it cannot be read or holds fewer. */
static bool read_sysctl(const char *path, long *v, int n)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    int got = 0;
    while (got < n && fscanf(f, "%ld", &v[got]) == 1)
        got++;
    fclose(f);
    return got == n;
}

/* The first word of a sysctl file (a name such as net.ipv4.tcp_congestion_control's). */
static bool read_sysctl_word(const char *path, char *out, size_t len)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    bool ok = fgets(out, (int)len, f) != NULL;
    fclose(f);
    if (!ok)
        return false;
    out[strcspn(out, " \t\n")] = 0;
    return out[0] != 0;
}

/* ECN, buffer autotuning, the SYN options and the congestion control as the kernel's TCP in
 * this namespace has them (src/tcp/tcp_ecn.c, tcp_buf.c, tcp_input.c, cc/; docs/CONFIG.md).
 * Read when the stack starts (nothing else runs yet), again at the first connect or listen, and
 * after that at most once a second when a program connects or listens (take_lock: the update
 * under the stack's lock), so a change reaches the connections opened after it, as in Linux,
 * which reads them per connection (a change within a second of the last read may wait for the
 * next one). */
void slip_stack__tcp_sysctls(struct slip_stack *s, bool take_lock)
{
    if (take_lock) {
        slip_time_t now = slip_stack__now();
        if (s->sysctl_at && now - s->sysctl_at < SLIP_SEC)
            return;
        s->sysctl_at = now;
    }
    struct tcp_shared *t = s->tcp;
    uint8_t ecn = t->ecn, moderate = t->moderate_rcvbuf, off = 0;
    uint32_t wmem = t->wmem_max, rmem = t->rmem_max;
    long v[3];
    if (read_sysctl("/proc/sys/net/ipv4/tcp_ecn", v, 1) && v[0] >= 0 && v[0] <= 2)
        ecn = (uint8_t)v[0];
    if (read_sysctl("/proc/sys/net/ipv4/tcp_wmem", v, 3) && v[2] > 0 && v[2] <= UINT32_MAX)
        wmem = (uint32_t)v[2];
    if (read_sysctl("/proc/sys/net/ipv4/tcp_rmem", v, 3) && v[2] > 0 && v[2] <= UINT32_MAX)
        rmem = (uint32_t)v[2];
    if (read_sysctl("/proc/sys/net/ipv4/tcp_moderate_rcvbuf", v, 1))
        moderate = v[0] ? 2 : 1;
    static const struct { const char *path; uint8_t off; } opts[] = {
        { "/proc/sys/net/ipv4/tcp_timestamps", TCP_OPTS_OFF_TS },
        { "/proc/sys/net/ipv4/tcp_sack", TCP_OPTS_OFF_SACK },
        { "/proc/sys/net/ipv4/tcp_window_scaling", TCP_OPTS_OFF_WS },
    };
    for (size_t i = 0; i < SLIP_ARRAY_SIZE(opts); i++)
        if (read_sysctl(opts[i].path, v, 1) && v[0] == 0)
            off |= opts[i].off;
    /* net.ipv4.tcp_congestion_control, unless SLIP_TCP_CC named one: an unmodified program gets
     * the algorithm the kernel's TCP would give it (this machine's BBR, Debian's CUBIC). */
    uint8_t cc = t->default_cc;
    char name[32];
    if (t->cc_sysctl && read_sysctl_word("/proc/sys/net/ipv4/tcp_congestion_control", name, sizeof(name))) {
        int a = tcp_cc__by_name(name);
        if (a < 0 && !s->cc_unknown_said) {
            slip_info("net.ipv4.tcp_congestion_control is %s, which the stack does not have: cubic", name);
            s->cc_unknown_said = true;
        }
        cc = a < 0 ? TCP_CC_CUBIC : (uint8_t)a;
    }
    if (take_lock)
        stack_lock(s);
    t->default_cc = cc;
    t->ecn = ecn;
    t->wmem_max = wmem;
    t->rmem_max = rmem;
    t->moderate_rcvbuf = moderate;
    t->opts_off = off;
    if (take_lock)
        stack_unlock(s);
}

static int stack_open(struct slip_stack **out, const struct slip_config *cfg, struct group_in *g, char *err,
                      size_t errlen)
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
    s->token_fd = -1;
    s->arena.memfd = -1;
    s->garena.memfd = -1;
    doorbell_open(s);
    struct fault fault;
    rc = fault__init(&fault, err, errlen);
    if (rc < 0)
        goto fail;
    if (fault.on)
        slip_warn("fault injection on: drop %u, duplicate %u, reorder %u per million received frames",
                  fault.drop_ppm, fault.dup_ppm, fault.reorder_ppm);
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
     * reassembly and frames waiting for a neighbour. A stack joining a group uses the group's
     * UMEM: its own memory has no frames, only a cache of their addresses. */
    const struct slip_shm *gh = NULL;
    if (g) {
        if ((rc = group_in_map(s, g, err, errlen)) < 0)
            goto fail;
        gh = slip_arena__ptr(&s->garena, 0);
        s->cfg.ring_size = gh->ring_size;
        s->cfg.burst = gh->burst;
        s->cfg.frame_size = gh->frame_size;
        cfg = &s->cfg;
    }
    uint32_t nframes = g ? gh->nframes : nports * 2 * cfg->ring_size + 2 * cfg->ring_size + 8192;
    size_t umem_bytes = g ? 0 : (size_t)nframes * cfg->frame_size;
    size_t frame_bytes = g ? 0 : umem_bytes + xsk_frame_pool__bytes(nframes) + (size_t)nframes * sizeof(struct pkt_meta);
    uint32_t mc = cfg->max_conns ? cfg->max_conns : SLIP_MAX_CONNS_DEFAULT;
    uint32_t mu = cfg->max_udp ? cfg->max_udp : SLIP_MAX_UDP_DEFAULT;
    size_t hot = frame_bytes + 2 * 4096 + sizeof(struct slip_shm) + xsk_frame_pool__bytes(nframes) +
                 sizeof(struct ctl_tables) + sizeof(struct ip_shared) + 5 * SLIP_CACHELINE;
    /* The tables sized for the maximum come last, never faulted in as a whole (socktab.h). */
    size_t total = hot + slip_socktab__bytes(mc, mu);
    rc = slip_arena__create(&s->arena, "slipstream-stack", total, hot);
    if (rc < 0) {
        snprintf(err, errlen, "cannot create the stack's shared memory (%zu MiB): %s", total >> 20, strerror(-rc));
        goto fail;
    }
    struct slip_arena *a = &s->arena;
    int64_t o_shm = slip_arena__carve(a, sizeof(struct slip_shm), 4096);
    int64_t o_umem = g ? (int64_t)gh->off_umem : slip_arena__carve(a, umem_bytes, 4096);
    int64_t o_pool = g ? (int64_t)gh->off_pool : slip_arena__carve(a, xsk_frame_pool__bytes(nframes), SLIP_CACHELINE);
    int64_t o_meta = g ? (int64_t)gh->off_meta
                       : slip_arena__carve(a, (size_t)nframes * sizeof(struct pkt_meta), SLIP_CACHELINE);
    int64_t o_cache = slip_arena__carve(a, xsk_frame_pool__bytes(nframes), SLIP_CACHELINE);
    int64_t o_ctl = slip_arena__carve(a, sizeof(struct ctl_tables), SLIP_CACHELINE);
    int64_t o_ip = slip_arena__carve(a, sizeof(struct ip_shared), SLIP_CACHELINE);
    struct slip_socktab_layout tabs;
    if (o_umem < 0 || o_pool < 0 || o_meta < 0 || o_cache < 0 || o_ip < 0 ||
        slip_socktab__carve(&s->t, &tabs, a, mc, mu) < 0) {
        snprintf(err, errlen, "internal error: arena layout does not fit");
        rc = -ENOMEM;
        goto fail;
    }
    struct slip_arena *fa = g ? &s->garena : a;     /* where the frames are */
    s->shm = slip_arena__ptr(a, (uint64_t)o_shm);
    s->shm->magic = SLIP_SHM_MAGIC;
    s->shm->version = SLIP_SHM_VERSION;
    s->shm->nframes = nframes;
    s->shm->frame_size = cfg->frame_size;
    s->shm->off_umem = (uint64_t)o_umem;
    s->shm->off_pool = (uint64_t)o_pool;
    s->shm->off_meta = (uint64_t)o_meta;
    s->shm->off_cache = (uint64_t)o_cache;
    s->shm->off_ctl = (uint64_t)o_ctl;
    s->shm->off_ip = (uint64_t)o_ip;
    s->shm->grouped = g != NULL;
    s->shm->tabs = tabs;
    s->shm->ring_size = cfg->ring_size;
    s->shm->burst = cfg->burst;
    s->shm->nifs = s->nifs;
    snprintf(s->shm->name, sizeof(s->shm->name), "%s", cfg->stack_name);
    for (unsigned i = 0; i < s->nifs; i++) {
        s->shm->ifindex[i] = s->ifs[i].ifindex;
        s->shm->nq[i] = s->ifs[i].nq;
        snprintf(s->shm->ifname[i], sizeof(s->shm->ifname[i]), "%s", s->ifs[i].name);
    }
    slip_lock__init(&s->shm->lock);
    slip_lock__init(&s->shm->group.pool_lock);
    slip_lock__init(&s->shm->group.claim_lock);
    s->group = g ? &((struct slip_shm *)slip_arena__ptr(&s->garena, 0))->group : &s->shm->group;
    s->udp = s->t.udp;
    s->tcp = s->t.tcp;
    proc_register(s, -1);

    s->pool.umem = slip_arena__ptr(fa, (uint64_t)o_umem);
    s->pool.frames = slip_arena__ptr(a, (uint64_t)o_cache);
    s->pool.meta = slip_arena__ptr(fa, (uint64_t)o_meta);
    s->pool.frame_size = cfg->frame_size;
    s->pool.headroom = 0;
    s->pool.nframes = nframes;
    s->ctl_t = slip_arena__ptr(a, (uint64_t)o_ctl);
    s->ip = slip_arena__ptr(a, (uint64_t)o_ip);
    ip_shared__init(s->ip, nframes / 8);
    udp_shared__init(s->udp, mu);
    uint8_t key[48];    /* TCP's 32 bytes, then the IP layer's 16 (flow labels) */
    if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key)) {
        rc = -errno;
        snprintf(err, errlen, "getrandom: %s", strerror(errno));
        goto fail;
    }
    tcp_shared__init(s->tcp, mc, key);
    {
        /* SLIP_TCP_CC: the connections' congestion control (its choices in order; "kernel":
         * slip_stack__tcp_sysctls reads it). */
        static const uint8_t ccs[] = { TCP_CC_CUBIC, TCP_CC_CUBIC, TCP_CC_NEWRENO, TCP_CC_BBR };
        uint64_t v;
        if ((rc = slip_env__get(SLIP_ENV_TCP_CC, &v, err, errlen)) < 0)
            goto fail;
        s->tcp->default_cc = ccs[v];
        s->tcp->cc_sysctl = v == 0;
    }
    ip6_flow__init(s->ip, key + 32);
    ip_reass__read_sysctls(s->ip);
    slip_stack__tcp_sysctls(s, false);     /* the first connect or listen reads them again */

    rc = ctl__open(&s->ctl, s->ctl_t);
    if (rc < 0) {
        snprintf(err, errlen, "cannot read the kernel's addresses and routes over netlink: %s", strerror(-rc));
        goto fail;
    }

    struct xsk_umem_area_config ucfg = {
        .frame_size = cfg->frame_size, .nframes = nframes,
        .fill_size = cfg->ring_size, .comp_size = cfg->ring_size, .headroom = 0,
    };
    if (g) {
        /* Our cache starts empty; the group's pool is the group's. */
        struct xsk_frame_pool *c = s->pool.frames;
        c->capacity = nframes;
        c->frame_size = cfg->frame_size;
        c->count = 0;
        c->low_water = 0;
        rc = xsk_umem_area__adopt(&s->umem, s->pool.umem, &ucfg, s->pool.frames);
    } else {
        /* Every frame starts in our cache (the umem area fills it), the group pool empty: the
         * first poll spills what the cache should not hold. */
        rc = xsk_umem_area__create(&s->umem, s->pool.umem, &ucfg, s->pool.frames, err, errlen);
        struct xsk_frame_pool *gp = slip_arena__ptr(a, (uint64_t)o_pool);
        gp->capacity = nframes;
        gp->frame_size = cfg->frame_size;
        gp->count = 0;
        gp->low_water = 0;
    }
    if (rc < 0)
        goto fail;

    for (unsigned i = 0; i < s->nifs; i++) {
        struct stack_iface *f = &s->ifs[i];
        if (g) {
            rc = steer__adopt(&f->steer, (int)f->ifindex, g->steer[i]);
            if (rc < 0) {
                snprintf(err, errlen, "the group's XDP objects of %s are not what they should be", f->name);
                goto fail;
            }
            group_in_taken(g, i);
        } else {
            rc = steer__attach(&f->steer, f->name, cfg->xdp, mc + mu, err, errlen);
            if (rc < 0)
                goto fail;
        }
    }
    /* The index names our sockets in the XDP program's socket map: claimed (and the flows a dead
     * holder of it left forgotten) before any socket of ours is there. */
    if (g)
        rc = group_claim_index(s, err, errlen);
    else
        group_token_bind(s, 0);     /* for `slipstream stat`; the first stack's index is 0 anyway */
    if (rc < 0)
        goto fail;
    s->shm->index = s->index;
    for (unsigned i = 0; i < s->nifs; i++) {
        struct stack_iface *f = &s->ifs[i];
        for (unsigned q = 0; q < f->nq; q++) {
            struct xsk_port_config pc = {
                .ifname = f->name, .queue_id = q, .rx_size = cfg->ring_size, .tx_size = cfg->ring_size,
                .burst = cfg->burst, .mode = cfg->bind, .need_wakeup = true, .busy_poll = cfg->busy_poll,
                .busy_poll_usec = cfg->busy_poll_usec, .busy_poll_budget = cfg->busy_poll_budget,
            };
            rc = g ? xsk_port__join(&f->ports[q], s->umem, g->share[i][q], &pc, err, errlen)
                   : xsk_port__create(&f->ports[q], s->umem, &pc, err, errlen);
            if (rc < 0)
                goto fail;
            rc = steer__set_xsk(f->steer, s->index, q, xsk_port__fd(f->ports[q]));
            if (rc < 0) {
                snprintf(err, errlen, "cannot register the AF_XDP socket of %s queue %u: %s", f->name, q, strerror(-rc));
                goto fail;
            }
        }
        if ((rc = devices_wire(s, i, &fault)) < 0) {
            snprintf(err, errlen, "out of memory for the fault injector");
            goto fail;
        }
    }
    group_wire(s);

    rc = env_and_epoll_setup(s);
    if (rc < 0) {
        snprintf(err, errlen, "epoll_create1: %s", strerror(-rc));
        goto fail;
    }
    slip_info("stack %u up%s%s: %u interface(s), %u AF_XDP socket(s), %u frames of %u bytes%s, %u TCP connections, "
              "%u UDP sockets", s->index, cfg->stack_name[0] ? " as " : "", cfg->stack_name, s->nifs, nports, nframes,
              cfg->frame_size, g ? " (the group's)" : "", mc, mu);
    stacks_register(s);
    *out = s;
    return 0;

fail:
    slip_stack__close(s);
    return rc;
}

int slip_stack__open(struct slip_stack **out, const struct slip_config *cfg, char *err, size_t errlen)
{
    return stack_open(out, cfg, NULL, err, errlen);
}

int slip_stack__open_in_group(struct slip_stack **out, const struct slip_config *cfg, const char *spec, char *err,
                              size_t errlen)
{
    struct group_in g;
    int rc = group_in_parse(&g, spec, cfg, err, errlen);
    if (rc == 0)
        rc = stack_open(out, cfg, &g, err, errlen);
    group_in_done(&g);
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
    if (s->guard && s->pool.frames)
        tcp_zc_release_all(s);  /* frames lent to processes that died holding them */
    if (s->tcp && s->pool.frames)
        tcp_shared__purge(s->tcp, &s->pool);
    if (s->epfd >= 0)
        close(s->epfd);
    doorbell_close(s);
    devices_close(s);
    if (s->guard && s->group) {
        /* The guardian closes a stack whose processes are all gone: whatever it still claims in
         * the group's XDP maps goes (a UDP socket's key, a SO_REUSEPORT group's membership), so
         * no flow waits for its index to be taken again by a new stack to stop going nowhere. */
        slip_lock__acquire(&s->group->claim_lock);
        for (unsigned i = 0; i < s->nifs; i++)
            if (s->ifs[i].steer)
                steer__forget_stack(s->ifs[i].steer, s->index);
        slip_lock__release(&s->group->claim_lock);
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
    /* The guardian closes a stack whose processes are all gone: its cached frames go back to
     * the group, which other stacks may still use. Only once its sockets are closed: closing a
     * port reaps the completions and received frames the kernel returned meanwhile into this
     * cache (a stream killed at full speed has a few dozen in flight), and a cache given back
     * before that lost them with the stack's memory. Whatever the kernel completes later goes to
     * the queue's shared completion ring, which the other stacks reap. */
    if (s->guard && s->group && s->pool.frames)
        group_return_all(s);
    if (s->umem)
        xsk_umem_area__destroy(s->umem);
    if (s->ctl)
        ctl__close(s->ctl);
    if (s->token_fd >= 0)
        close(s->token_fd);
    slip_arena__destroy(&s->arena);
    slip_arena__destroy(&s->garena);
    free(s);
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
    /* "M,G,T": the stack's memory, the group's (-1: ours is the group's), the index token (-1:
     * none). A "-1" is not a number renumber() rewrites (it follows '-'). */
    size_t n = (size_t)snprintf(buf, len, "%d,%d,%d", s->arena.memfd, s->garena.memfd, s->token_fd);
    clear(s->arena.memfd);
    if (s->garena.memfd >= 0)
        clear(s->garena.memfd);
    if (s->token_fd >= 0)
        clear(s->token_fd);
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
    if (s->garena.memfd >= 0 && n < max)
        fds[n++] = s->garena.memfd;
    if (s->token_fd >= 0 && n < max)
        fds[n++] = s->token_fd;
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

int slip_stack__own_fds(struct slip_stack *s, int *fds, int max)
{
    int n = slip_stack__export_fds(s, fds, max);
    int more[7] = { s->doorbell, s->accept_bell, s->peer_bell, s->epfd, -1, -1, -1 };
    int m = 4 + (s->ctl ? ctl__fds(s->ctl, more + 4) : 0);
    for (int i = 0; i < m && n < max; i++)
        if (more[i] >= 0)
            fds[n++] = more[i];
    return n;
}

/* Every number of the header that sizes or locates something, checked against the memfd's
 * size before any of them is used: the memory may come from another process, and one that
 * shares the stack as another user must not be able to point us outside it. Returns what is
 * wrong, or NULL. */
const char *stack_layout_bad(const struct slip_shm *h, size_t size, size_t frames_size)
{
    struct region {
        uint64_t off, len;
        size_t in;              /* the size of the memory the region is in */
    } r[] = {
        { h->off_umem, (uint64_t)h->nframes * h->frame_size, frames_size },
        { h->off_pool, xsk_frame_pool__bytes(h->nframes), frames_size },
        { h->off_meta, (uint64_t)h->nframes * sizeof(struct pkt_meta), frames_size },
        { h->off_cache, xsk_frame_pool__bytes(h->nframes), size },
        { h->off_ctl, sizeof(struct ctl_tables), size },
        { h->off_ip, sizeof(struct ip_shared), size },
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
        if (r[i].off < sizeof(struct slip_shm) || r[i].off > r[i].in || r[i].len > r[i].in - r[i].off)
            return "region outside the memory";
    if (h->index >= STEER_MAX_STACKS)
        return "stack index";
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
    else if (!(bad = stack_layout_bad(h, a.size, h->grouped ? SIZE_MAX : a.size))) {
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
    s->garena.memfd = -1;
    s->token_fd = -1;
    s->proc = -1;
    pid_refresh();
    doorbell_open(s);
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", spec);
    char *save = NULL, *tok = strtok_r(buf, ";", &save);
    long mfd = -1, gfd = -1, tfd = -1;
    if (tok) {
        char *e = NULL;
        mfd = strtol(tok, &e, 10);
        if (*e == ',')
            gfd = strtol(e + 1, &e, 10);
        if (*e == ',')
            tfd = strtol(e + 1, &e, 10);
    }
    if (!tok || mfd < 0 || (rc = slip_arena__attach(&s->arena, (int)mfd)) < 0) {
        snprintf(err, errlen, "cannot map the stack's shared memory (SLIP_ATTACH=%s)", spec);
        goto fail;
    }
    if (gfd >= 0 && (rc = slip_arena__attach(&s->garena, (int)gfd)) < 0) {
        snprintf(err, errlen, "cannot map the group's shared memory (SLIP_ATTACH=%s)", spec);
        goto fail;
    }
    struct slip_arena *a = &s->arena;
    s->shm = slip_arena__ptr(a, 0);
    if (a->size < sizeof(struct slip_shm) || s->shm->magic != SLIP_SHM_MAGIC || s->shm->version != SLIP_SHM_VERSION) {
        snprintf(err, errlen, "SLIP_ATTACH: not a slipstream stack of this version");
        rc = -EINVAL;
        goto fail;
    }
    /* The frames are in the group's memory (checked as the group's first stack's header says)
     * or in ours. */
    const struct slip_shm *gh = s->garena.base ? slip_arena__ptr(&s->garena, 0) : NULL;
    const char *bad = NULL;
    if (s->shm->grouped != (gh != NULL))
        bad = "group memory missing or unexpected";
    else if (gh && (s->garena.size < sizeof(*gh) || gh->magic != SLIP_SHM_MAGIC || gh->version != SLIP_SHM_VERSION ||
                    gh->grouped || gh->nframes != s->shm->nframes || gh->frame_size != s->shm->frame_size ||
                    gh->off_umem != s->shm->off_umem || gh->off_pool != s->shm->off_pool ||
                    gh->off_meta != s->shm->off_meta))
        bad = "the group's memory does not match";
    if (!bad)
        bad = stack_layout_bad(s->shm, a->size, gh ? s->garena.size : a->size);
    if (bad) {
        snprintf(err, errlen, "the stack's shared memory is inconsistent (%s): not attaching", bad);
        rc = -EINVAL;
        goto fail;
    }
    slip_config__defaults(&s->cfg);
    s->cfg.ring_size = s->shm->ring_size;
    s->cfg.burst = s->shm->burst;
    s->cfg.frame_size = s->shm->frame_size;
    struct slip_arena *fa = gh ? &s->garena : a;
    s->index = s->shm->index;
    s->token_fd = (int)tfd;
    s->group = &((struct slip_shm *)slip_arena__ptr(fa, 0))->group;
    s->pool.umem = slip_arena__ptr(fa, s->shm->off_umem);
    s->pool.frames = slip_arena__ptr(a, s->shm->off_cache);
    s->pool.meta = slip_arena__ptr(fa, s->shm->off_meta);
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
        devices_wire(s, i, NULL);
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
    group_wire(s);
    /* The stack's own fds go back to close-on-exec; export clears it again when needed. */
    fcntl(s->arena.memfd, F_SETFD, FD_CLOEXEC);
    if (s->garena.memfd >= 0)
        fcntl(s->garena.memfd, F_SETFD, FD_CLOEXEC);
    if (s->token_fd >= 0)
        fcntl(s->token_fd, F_SETFD, FD_CLOEXEC);
    stacks_register(s);
    *out = s;
    return 0;
fail:
    /* Never close inherited fds here: the stack keeps running for whoever else maps it. Our
     * own eventfds are ours. */
    doorbell_close(s);
    if (s->arena.base)
        munmap(s->arena.base, s->arena.size);
    if (s->garena.base)
        munmap(s->garena.base, s->garena.size);
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
static bool guard_pending(const struct tcp_shared *sh, slip_idx_t c)
{
    uint8_t st = tcp_conn__state(sh, c);
    return st != TCPS_CLOSED && st != TCPS_TIME_WAIT && (tcp_conn__user(sh, c) || tcp_conn__unfinished(sh, c));
}

bool slip_stack__guard_pending(struct slip_stack *s)
{
    /* Without the lock: only the dead (or an exiting process that is about to be) change it.
     * Bounded by what the arena was built with: the guardian outlives whoever wrote it last. */
    uint32_t hw = slip_socktab__tcp_high(&s->t);
    for (uint32_t i = 0; i < hw; i++)
        if (guard_pending(s->tcp, i))
            return true;
    return false;
}

/* Lock held: RST and free connection i, and give back its port reservation and XDP claim as
 * slip_tcp__close does. */
static void guard_abort(struct slip_stack *s, unsigned i)
{
    STACK_ASSERT_LOCKED(s);
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
        uint8_t st = tcp_conn__state(s->tcp, i);
        if (st == TCPS_CLOSED || st == TCPS_TIME_WAIT)
            continue;
        if (st == TCPS_LISTEN) {
            /* Its unaccepted children get RST from the engine; closed children still delivering
             * were steered by its claim, and get their own first. */
            if (tcp_conn__user(s->tcp, i)) {
                listener_handover(s, (int)i);
                tcp_conn__close(&s->env, s->tcp, (slip_idx_t)i);
                tcp_res_release(s, &s->t.ts[i].res);
            }
        } else if (all || tcp_conn__user(s->tcp, i)) {
            guard_abort(s, i);
        } else {
            left += tcp_conn__unfinished(s->tcp, i);
        }
    }
    uncork_all(s);
    ip_output__flush(&s->env);
    stack_unlock(s);
    return left;
}
