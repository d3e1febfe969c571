/* Init stages of the POSIX layer, in order: (1) resolve the real libc functions (dlsym
 * RTLD_NEXT, generated from calls.h), (2) size the fd table from RLIMIT_NOFILE, (3) read and
 * check the configuration (every SLIP_* variable, base/env.h), (4) in strict mode open the stack
 * at once so a failure stops the program with one clear line; otherwise the stack opens on the
 * first socket that can use it, and a failure prints one warning and leaves every socket to the
 * kernel. */

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/env.h"
#include "base/log.h"
#include "base/sandbox.h"
#include "preload/file.h"
#include "preload/preload.h"
#include "stack/share.h"
#include "stack/stack.h"

#define SLIP_DEFINE_REAL(ret, name, params, args) ret (*real_##name) params;
SLIP_CALLS(SLIP_DEFINE_REAL)
#undef SLIP_DEFINE_REAL
int (*real_fcntl)(int fd, int cmd, ...);
int (*real_ioctl)(int fd, unsigned long req, ...);

struct preload_state g_pre;
__thread int preload_depth;
__thread uint8_t preload_thread_slot;

int set_errno(int neg)
{
    errno = -neg;
    return -1;
}

static void resolve(void)
{
#define SLIP_RESOLVE(ret, name, params, args) real_##name = (ret (*) params)dlsym(RTLD_NEXT, #name);
    SLIP_CALLS(SLIP_RESOLVE)
#undef SLIP_RESOLVE
    real_fcntl = (int (*)(int, int, ...))dlsym(RTLD_NEXT, "fcntl");
    real_ioctl = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
}

/* Sized for the hard limit, not the soft one: servers raise their soft limit themselves
 * (nginx worker_rlimit_nofile, Go at start-up) after this runs. calloc'd pages are touched
 * only as fds are used, so a large table costs address space, not memory. */
static void size_fd_table(void)
{
    struct rlimit rl;
    rlim_t n = 65536, cap = 1u << 20;   /* fs.nr_open's default, the kernel's own cap */
    FILE *f = fopen("/proc/sys/fs/nr_open", "re");
    unsigned long nr = 0;
    if (f && fscanf(f, "%lu", &nr) == 1 && nr >= 1024 && nr <= 1u << 26)
        cap = nr;
    if (f)
        fclose(f);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        n = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > cap ? cap : rl.rlim_max;
    if (n < 1024)
        n = 1024;
    g_pre.fds = calloc(n, sizeof(*g_pre.fds));
    g_pre.nfds = g_pre.fds ? (int)n : 0;
}

static void strict_bad(const char *line, void *arg)
{
    (void)arg;
    fprintf(stderr, "slipstream: error: %s; stopping (strict mode)\n", line);
}

/* Every SLIP_* value is checked here, once. Strict mode stops on a bad one, as it does when it
 * cannot accelerate; otherwise each bad one gets one warning line and its default (slipstream
 * run refuses them all before the program starts). A SLIP_STRICT that is not a boolean counts
 * as strict: whoever set it wanted it on, and it used to mean "set and not 0". */
static void config_read(void)
{
    uint64_t v;
    char err[256];
    g_pre.strict = slip_env__get(SLIP_ENV_STRICT, &v, err, sizeof(err)) < 0 || v;
    if (g_pre.strict && slip_env__check_all(strict_bad, NULL))
        _exit(1);
    slip_env__use_defaults();
    for (unsigned i = 0; i < SLIP_ENV_COUNT; i++)
        slip_env__get((enum slip_env_id)i, &v, err, sizeof(err));     /* the warnings, now */
    slip_env__get(SLIP_ENV_SPIN_USEC, &v, err, sizeof(err));
    g_pre.spin_usec = (int)v;                   /* at most 10 s */
    slip_env__get(SLIP_ENV_EPOLL_ALL_MS, &v, err, sizeof(err));
    g_pre.epoll_all_ms = (int)v;                /* at most 1 h */
}

void preload_init(void)
{
    if (g_pre.ready)
        return;
    resolve();
    size_fd_table();
    config_read();
    preload_depth++;
    preload_file_init();
    preload_depth--;
    g_pre.ready = true;
}

static void progress_start(void);
static void stack_exit_register(void);
static void config_ifaces(struct slip_config *cfg);
static void progress_atfork_child(void);
static void progress_atfork_register(void);

__attribute__((constructor)) static void preload_ctor(void)
{
    preload_init();
    preload_sandbox_inherited();
    if (slip_env__text(SLIP_ENV_ATTACH) && slip_sandbox__limited()) {
        /* Attaching takes calls the inherited filter may kill us for (netlink, getsockopt). */
        slip_warn("this image runs under a seccomp filter it inherited: the accelerated sockets it inherited "
                  "are not usable here (not accelerated)");
        return;
    }
    if (slip_env__text(SLIP_ENV_ATTACH)) {
        preload_depth++;
        struct slip_config cfg;
        slip_config__defaults(&cfg);
        config_ifaces(&cfg);
        preload_attach_inherited();
        preload_stdio_inherited();
        if (g_pre.stack) {
            progress_start();
            progress_atfork_register();
            stack_exit_register();
        }
        preload_depth--;
        return;
    }
    if (!g_pre.strict)
        return;
    preload_depth++;
    struct slip_stack *s = preload_stack();
    preload_depth--;
    if (!s) {
        fprintf(stderr, "slipstream: error: strict mode: cannot accelerate, stopping (unset SLIP_STRICT to fall back to the kernel)\n");
        _exit(1);
    }
}

/* Keeps the stack going while the application computes: when nobody has polled for
 * PROGRESS_IDLE, poll (ACKs, retransmissions, accepts, timers). Sleeps on the stack's wake fds
 * meanwhile. One per process; re-created in a fork child (threads do not survive fork). */
#define PROGRESS_IDLE (2 * SLIP_MSEC)

/* The names other programs on the same interfaces find us by (share.h); empty: sharing is off
 * (SLIP_SHARE=0). g_share_name is the group's: a program that connects opens a stack of its own
 * in our group. "<group>/n/<SLIP_STACK_NAME>" is our stack's when it has a name: a program
 * started with that name joins it. The listening sockets are inherited by fork children, whose
 * progress threads serve them too; an exec'd image or a survivor binds a name again when it is
 * free. The stack's index token (group.c) is served as well, for `slipstream stat`. */
static char g_share_name[108];
static int g_share_fd = -1;
static int g_named_fd = -1;

static void share_drop(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

static void share_keep(struct slip_stack *s)
{
    static struct timespec next;
    struct timespec now;
    /* A process that is no longer the stack's user (a worker that dropped root after fork)
     * neither keeps the names it inherited nor binds them again: it would serve its parent's
     * stack to anyone of its new user. */
    if (!slip_share__may_serve(s)) {
        share_drop(&g_share_fd);
        share_drop(&g_named_fd);
        /* The index token still answers `slipstream stat`: serve_one hands the stack to its
         * owner or root only, whoever serves (a worker's own stack after it dropped root). */
        if (slip_stack__token_fd(s) >= 0)
            slip_share__serve(s, slip_stack__token_fd(s));
        return;
    }
    const char *sname = slip_stack__name(s);
    if (g_share_name[0] && (g_share_fd < 0 || (sname[0] && g_named_fd < 0))) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > next.tv_sec || (now.tv_sec == next.tv_sec && now.tv_nsec >= next.tv_nsec)) {
            next = now;
            next.tv_nsec += 500 * 1000000L;
            if (next.tv_nsec >= 1000000000L) {
                next.tv_sec++;
                next.tv_nsec -= 1000000000L;
            }
            if (g_share_fd < 0)
                g_share_fd = slip_share__listen(g_share_name);
            if (sname[0] && g_named_fd < 0) {
                char named[160];
                snprintf(named, sizeof(named), "%s/n/%s", g_share_name, sname);
                g_named_fd = slip_share__listen(named);
            }
        }
    }
    if (g_share_fd >= 0)
        slip_share__serve_group(s, g_share_fd);
    if (g_named_fd >= 0)
        slip_share__serve(s, g_named_fd);
    if (slip_stack__token_fd(s) >= 0)
        slip_share__serve(s, slip_stack__token_fd(s));
}

/* Held by the progress thread while it works inside the stack, never while it sleeps. A process
 * that is about to end (_exit, exit, exec: its other threads vanish on the spot) takes it first,
 * so the progress thread is not cut off halfway through the stack's shared state with the stack
 * lock held (the survivors would take the lock over and find half-done work). */
static pthread_mutex_t g_progress_mu = PTHREAD_MUTEX_INITIALIZER;
/* The process whose progress thread it is: a child made by clone(CLONE_VM) shares this memory
 * but not the thread, and must not take the parent's mutex. */
static pid_t g_progress_pid;

static bool g_quiesced;

/* Bounded: exit() from a signal handler that interrupted this process inside the stack would
 * otherwise wait for a progress thread that waits for the lock the interrupted code holds. */
void preload_quiesce(void)
{
    pid_t owner = __atomic_load_n(&g_progress_pid, __ATOMIC_ACQUIRE);
    if (!owner || owner != getpid())
        return;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += 1;
    g_quiesced = pthread_mutex_timedlock(&g_progress_mu, &t) == 0;
}

void preload_unquiesce(void)
{
    pid_t owner = __atomic_load_n(&g_progress_pid, __ATOMIC_ACQUIRE);
    if (owner && owner == getpid() && g_quiesced) {
        g_quiesced = false;
        pthread_mutex_unlock(&g_progress_mu);
    }
}

/* The stack the progress thread serves: the process's, which changes once when a worker moves
 * to a stack of its own (worker_takeover, under g_progress_mu). */
static struct slip_stack *g_progress_stack;

/* The stack in slot i the progress thread serves (slot 0: g_progress_stack), or NULL. */
static struct slip_stack *progress_stack_at(int i)
{
    return i == 0 ? g_progress_stack : preload_stack_at(i);
}

static void *progress_main(void *arg)
{
    (void)arg;
    preload_depth = 1;          /* everything this thread calls goes straight to libc */
    slip_sandbox__thread_started();
    for (;;) {
        pthread_mutex_lock(&g_progress_mu);
        /* Every stack of the process: its own and its threads' (each polled only when nobody
         * has for PROGRESS_IDLE; the sleep is until the soonest of their deadlines). */
        int wait_ms = 1000, si;
        PRELOAD_EACH_SLOT(si, preload_slots()) {
            struct slip_stack *s = progress_stack_at(si);
            if (!s)
                continue;
            /* Both need calls a sandbox forbids (sandbox.c): filtered too (TSYNC), this thread
             * leaves them to the stack's other processes. */
            if (!slip_sandbox__limited()) {
                slip_stack__reap(s);    /* processes that died holding sockets: release them */
                if (si == 0)
                    share_keep(s);      /* programs joining the stack */
                else if (slip_stack__token_fd(s) >= 0)
                    slip_share__serve(s, slip_stack__token_fd(s));      /* `slipstream stat` */
            }
            int w = slip_stack__poll_if_idle(s, PROGRESS_IDLE);
            wait_ms = w < wait_ms ? w : wait_ms;
        }
        pthread_mutex_unlock(&g_progress_mu);
        if (wait_ms == 0) {
            struct pollfd pf[PRELOAD_STACKS * (SLIP_WAIT_FDS_MAX + 1) + 2];
            int k = 0, t = 200, j;
            PRELOAD_EACH_SLOT(j, preload_slots()) {
                struct slip_stack *s = progress_stack_at(j);
                if (!s)
                    continue;
                int fds[SLIP_WAIT_FDS_MAX];
                int n = slip_stack__wait_fds(s, fds, SLIP_WAIT_FDS_MAX);
                for (int i = 0; i < n; i++)
                    /* Our own doorbell would wake us, and the bell other processes ring is for the
                     * application's sleepers (who drain it). */
                    if (fds[i] != slip_stack__doorbell_fd(s) && fds[i] != slip_stack__peer_bell_fd(s))
                        pf[k++] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
                if (slip_stack__token_fd(s) >= 0)
                    pf[k++] = (struct pollfd){ .fd = slip_stack__token_fd(s), .events = POLLIN };
                int ts = slip_stack__timeout_ms(s, 200);
                t = ts >= 0 && ts < t ? ts : t;
            }
            int lfds[2] = { g_share_fd, g_named_fd };
            for (int i = 0; i < 2; i++)
                if (lfds[i] >= 0)
                    pf[k++] = (struct pollfd){ .fd = lfds[i], .events = POLLIN };
            real_poll(pf, (nfds_t)k, t);
            /* Let an application thread that is polling anyway take what woke us. */
            struct timespec ts = { 0, (long)PROGRESS_IDLE };
            nanosleep(&ts, NULL);
        } else {
            struct timespec ts = { wait_ms / 1000, (long)(wait_ms % 1000) * 1000000L };
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

static void progress_start(void)
{
    pthread_t t;
    pthread_attr_t a;
    sigset_t all, old;
    uint64_t off;
    char err[256];
    slip_env__get(SLIP_ENV_NO_PROGRESS_THREAD, &off, err, sizeof(err));
    /* A thread made now by a filtered thread would be filtered too (and a sandbox may not
     * allow making one at all): the program's own waits drive the stack instead. */
    if (!g_pre.stack || off || slip_sandbox__limited())
        return;
    /* in a fork child the parent's thread may have held it at the fork */
    pthread_mutex_init(&g_progress_mu, NULL);
    g_progress_stack = g_pre.stack;
    __atomic_store_n(&g_progress_pid, getpid(), __ATOMIC_RELEASE);
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    /* The application's signals must not land on our thread. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_create(&t, &a, progress_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&a);
}

/* A fork child that may move to a stack of its own (preload_listener_use), and the stack it left
 * (still mapped: its slot there goes when it exits). */
static bool g_worker_candidate;
static struct slip_stack *g_left_stack;

static void progress_atfork_child(void)
{
    preload_block_atfork_child();
    uepoll_atfork_child();      /* after stack.c's handler (registered first) renewed the bells */
    progress_start();
    uint64_t on;
    char err[256];
    slip_env__get(SLIP_ENV_WORKER_STACKS, &on, err, sizeof(err));
    g_worker_candidate = g_pre.stack && on && !g_left_stack;
}

/* Registered once per process, whichever stack it opens first (a worker opens a second). */
static void progress_atfork_register(void)
{
    static bool done;
    if (!done) {
        done = true;
        pthread_atfork(NULL, NULL, progress_atfork_child);
    }
}

/* At exit the kernel closes the process's fds; the stack's sockets get the same treatment (see
 * slip_stack__exit). SLIP_EXIT_LINGER_MS bounds how long the last process keeps delivering. */
static void stack_at_exit(void)
{
    static bool done;
    if (!g_pre.stack || done)
        return;
    done = true;                /* exit() ran it; an exit handler may still call _exit() */
    /* Releasing sockets and steering entries takes calls a sandbox forbids: the other
     * processes of the stack release a dead process's sockets (slip_stack__reap), as after a
     * crash. */
    if (slip_sandbox__limited())
        return;
    preload_quiesce();
    /* The kernel closes a process's fds when it ends; ours are closed now, before the stack
     * lingers: their kernel sockets would otherwise keep listening ports (and bound UDP ports)
     * taken from a server restarted meanwhile. */
    for (int fd = 0; fd < g_pre.nfds && !slip_stack__held_here(g_pre.stack); fd++) {
        struct pfd *p = pfd_get(fd);
        if (p && (p->kind == PFD_TCP || p->kind == PFD_UDP))
            pre_close(fd);
    }
    uint64_t linger;
    char err[256];
    slip_env__get(SLIP_ENV_EXIT_LINGER_MS, &linger, err, sizeof(err));
    preload_depth++;
    /* The threads' stacks first (nobody joins them: no tick), then the process's. */
    for (int i = 1; i < PRELOAD_STACKS; i++)
        if (preload_stack_at(i) && !slip_stack__held_here(preload_stack_at(i)))
            slip_stack__exit(preload_stack_at(i), (int)linger, NULL);
    slip_stack__exit(g_pre.stack, (int)linger, share_keep);
    preload_depth--;
}

/* exit(): the streams on accelerated sockets are flushed before the sockets close. */
static void stack_at_exit_flush(void)
{
    preload_stdio_at_exit();
    stack_at_exit();
}

static void stack_exit_register(void)
{
    static bool done;
    if (!done) {
        done = true;
        atexit(stack_at_exit_flush);
    }
}

/* SLIP_DUMP_AT_EXIT=1: print the stack's counters when the program exits (diagnostics). */
static void dump_at_exit(void)
{
    if (g_pre.stack) {
        preload_depth++;
        fprintf(stderr, "slipstream: counters of pid %d:\n", (int)getpid());
        for (int i = 0; i < PRELOAD_STACKS; i++)
            if (preload_stack_at(i)) {
                if (i)
                    fprintf(stderr, "slipstream: thread stack %s:\n", slip_stack__name(preload_stack_at(i)));
                slip_stack__dump(preload_stack_at(i), stderr);
                slip_tcp__dump(preload_stack_at(i), stderr);
            }
        preload_depth--;
    }
}

static struct slip_stack *stack_open_once(void);

/* The stack name of a process that sent us sockets, when we have no stack yet (stack_open_once
 * uses it instead of our own). */
static char g_peer_stack_name[32];

struct slip_stack *preload_stack_for_passed(int ufd)
{
    if (__atomic_load_n(&g_pre.tried, __ATOMIC_ACQUIRE))
        return g_pre.stack;
    struct ucred cr;
    socklen_t cl = sizeof(cr);
    char path[64];
    /* Not on the caller's stack: threads may run on small ones (16 KiB). Once per process. */
    static char env[16384];
    static pthread_mutex_t env_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&env_mu);
    if (!g_peer_stack_name[0] && ufd >= 0 && real_getsockopt(ufd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 &&
        cr.pid > 0) {
        /* The name the sender was started with (slipstream run sets it: run-PID, or --name). Its
         * environment is readable by its user and root only; anything unreadable or odd leaves
         * us on a stack of our own, as before. */
        snprintf(path, sizeof(path), "/proc/%d/environ", (int)cr.pid);
        /* open(2) itself: the library's open wrapper (block path) is not needed here. */
        int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? (ssize_t)syscall(SYS_read, fd, env, sizeof(env) - 1) : -1;
        if (fd >= 0)
            real_close(fd);
        static const char key[] = "SLIP_STACK_NAME=";
        for (ssize_t i = 0; n > 0 && i < n;) {
            env[n] = 0;
            const char *e = env + i;
            size_t len = strlen(e);
            if (!strncmp(e, key, sizeof(key) - 1) && len - (sizeof(key) - 1) < sizeof(g_peer_stack_name))
                snprintf(g_peer_stack_name, sizeof(g_peer_stack_name), "%s", e + sizeof(key) - 1);
            i += (ssize_t)len + 1;
        }
    }
    pthread_mutex_unlock(&env_mu);
    return preload_stack();
}

/* Threads creating their first sockets at the same time must open one stack, not two. */
struct slip_stack *preload_stack(void)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    if (__atomic_load_n(&g_pre.tried, __ATOMIC_ACQUIRE))
        return g_pre.stack;
    pthread_mutex_lock(&mu);
    struct slip_stack *s = g_pre.tried ? g_pre.stack : stack_open_once();
    pthread_mutex_unlock(&mu);
    return s;
}

/* The interfaces to accelerate (SLIP_IFACES, else the default ones) into cfg, and the sharing
 * name derived from them. */
static void config_ifaces(struct slip_config *cfg)
{
    static char names[SLIP_MAX_IFACES][IF_NAMESIZE];
    uint64_t n, share;
    char err[256];
    /* Checked at init: a bad list is a warning and the default (strict mode stopped already). */
    slip_env__get(SLIP_ENV_IFACES, &n, err, sizeof(err));
    const char *list = n ? slip_env__text(SLIP_ENV_IFACES) : NULL;
    cfg->nifaces = 0;
    if (list) {
        char buf[256];
        snprintf(buf, sizeof(buf), "%s", list);
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && cfg->nifaces < SLIP_MAX_IFACES;
             t = strtok_r(NULL, ",", &save))
            snprintf(names[cfg->nifaces++], IF_NAMESIZE, "%s", t);
    } else {
        cfg->nifaces = slip_config__default_ifaces(names, SLIP_MAX_IFACES);
    }
    for (unsigned i = 0; i < cfg->nifaces; i++)
        cfg->ifnames[i] = names[i];
    slip_env__get(SLIP_ENV_SHARE, &share, err, sizeof(err));
    g_share_name[0] = 0;
    if (cfg->nifaces && share)
        slip_share__name(g_share_name, sizeof(g_share_name), cfg->ifnames, cfg->nifaces);
}

/* Opens this program's stack: it joins the stack named SLIP_STACK_NAME if a program serves it;
 * else it opens a stack of its own, in the group another program on the same interfaces opened
 * (one UMEM per queue: see docs/ARCHITECTURE.md), or as a new group. Two programs starting
 * together may both find nobody serving: the one whose open fails because the other took the
 * interfaces joins that group once it serves. The interfaces may also still be held by the
 * guardian of a stack whose programs all ended (it lets go within a second): open again. */
static int open_or_join(struct slip_config *cfg, bool by_name, struct slip_stack **out, char *err, size_t errlen)
{
    /* For up to 3 s. Each step can fail for a moment: the serving process may be busy, exiting
     * (its connection resets) or no longer allowed to serve, and another process of the stack
     * binds the name within half a second; the interfaces may still be held by a stack whose
     * last process or guardian is finishing. Those are retried every 100 ms, not turned into a
     * fallback to the kernel at once. */
    bool warned = false;
    int rc = -ENOENT;
    char named[160] = "";
    if (g_share_name[0] && cfg->stack_name[0] && by_name)
        snprintf(named, sizeof(named), "%s/n/%s", g_share_name, cfg->stack_name);
    for (int i = 0; i < 30; i++) {
        if (i) {
            struct timespec ts = { 0, 100 * 1000000L };
            nanosleep(&ts, NULL);
        }
        rc = named[0] ? slip_share__join(out, named, err, errlen) : -ENOENT;
        if (rc == -EACCES || rc == -EPROTO) {
            /* Another user's process holds our stack's name: a stack of our own in the group,
             * not served under that name. */
            slip_warn("%s", err);
            named[0] = 0;
            rc = -ENOENT;
        }
        /* Nobody serves the name: whoever binds it first opens the stack, the others (processes
         * of one program forked before any of them had a stack) wait for it to serve. */
        if (rc == -ENOENT && named[0] && g_named_fd < 0 && (g_named_fd = slip_share__listen(named)) < 0) {
            snprintf(err, errlen, "the stack %s is being opened by another process and did not answer", cfg->stack_name);
            rc = -EAGAIN;
        }
        if (rc == -ENOENT && g_share_name[0]) {
            rc = slip_share__join_group(out, g_share_name, cfg, err, errlen);
            if (rc == 0)
                preload_guard_start(*out, g_share_name);
        }
        if (rc == 0)
            return 0;
        if (rc == -EACCES || rc == -EPROTO) {
            /* Somebody else's process holds the name (or answers it with nonsense): say so, and
             * run on a stack of our own if the interfaces are free (the name stays theirs, so
             * nobody can join ours). */
            if (!warned)
                slip_warn("%s", err);
            warned = true;
            rc = -ENOENT;
        }
        bool transient = rc == -EAGAIN || rc == -ECONNRESET || rc == -EPERM || rc == -ECONNREFUSED ||
                         rc == -EPIPE || rc == -EINTR;
        if (transient && g_share_name[0])
            continue;
        if (rc != -ENOENT)
            break;
        rc = slip_stack__open(out, cfg, err, errlen);
        if (rc == 0) {
            preload_guard_start(*out, g_share_name);
            return 0;
        }
        if ((rc != -EBUSY && rc != -EEXIST) || !g_share_name[0])
            break;
    }
    if (by_name)
        share_drop(&g_named_fd);    /* no stack of ours to serve under the name */
    return rc;
}

/* Opens (or joins) a stack for this process into *out: 0, or negative errno with the warning
 * printed. A worker moving to a stack of its own (g_left_stack set) gets one named after its
 * parent's; a thread stack (thread_name) is opened in the group under that name, which is not
 * served (nobody joins a thread's stack). */
int preload_open_stack(struct slip_stack **out, const char *thread_name)
{
    struct slip_config cfg;
    char err[256] = "";
    slip_config__defaults(&cfg);
    config_ifaces(&cfg);
    int rc = -ENODEV;
    *out = NULL;
    if (slip_sandbox__limited())
        /* Opening a stack takes calls no sandbox allows (bpf, netlink, AF_XDP sockets). */
        snprintf(err, sizeof(err), "the program runs under a seccomp filter: its new sockets stay on the kernel");
    else if (cfg.nifaces == 0)
        snprintf(err, sizeof(err), "no interface to accelerate (set SLIP_IFACES or --iface)");
    else if ((rc = slip_config__from_env(&cfg, err, sizeof(err))) == 0) {
        if (thread_name) {
            snprintf(cfg.stack_name, sizeof(cfg.stack_name), "%s", thread_name);
        } else if (g_left_stack) {
            /* A worker's own stack: named after its parent's and its pid (unique, joinable). */
            char nm[64];
            snprintf(nm, sizeof(nm), "%s.%d", slip_stack__name(g_left_stack), (int)getpid());
            if (strlen(nm) >= sizeof(cfg.stack_name) || !slip_config__stack_name_ok(nm))
                snprintf(nm, sizeof(nm), "w%d", (int)getpid());
            snprintf(cfg.stack_name, sizeof(cfg.stack_name), "%s", nm);
        } else if (slip_config__stack_name_ok(g_peer_stack_name) && strcmp(g_peer_stack_name, cfg.stack_name) != 0) {
            /* The sender of the sockets we received first: its stack is ours (only a name of the
             * characters slip_config__from_env accepts). */
            slip_info("opening the stack %s of the program that sent us sockets", g_peer_stack_name);
            snprintf(cfg.stack_name, sizeof(cfg.stack_name), "%s", g_peer_stack_name);
        }
        rc = open_or_join(&cfg, !thread_name, out, err, sizeof(err));
    }
    if (rc < 0) {
        *out = NULL;
        if (thread_name)
            fprintf(stderr, "slipstream: warning: this thread stays on its process's stack: %s\n", err);
        else if (g_left_stack)
            fprintf(stderr, "slipstream: warning: this worker stays on its parent's stack: %s\n", err);
        else if (g_pre.strict)
            fprintf(stderr, "slipstream: error: %s\n", err);
        else
            fprintf(stderr, "slipstream: warning: not accelerated, using the kernel: %s\n", err);
    }
    return rc;
}

static struct slip_stack *stack_open_once(void)
{
    struct slip_stack *s;
    if (preload_open_stack(&s, NULL) == 0) {
        g_pre.stack = s;
        progress_start();
        progress_atfork_register();
        stack_exit_register();
        uint64_t dump;
        char err[256];
        slip_env__get(SLIP_ENV_DUMP_AT_EXIT, &dump, err, sizeof(err));
        if (dump)
            atexit(dump_at_exit);
    }
    g_pre.stack = s;
    __atomic_store_n(&g_pre.tried, true, __ATOMIC_RELEASE);
    return g_pre.stack;
}

/* A stack per worker (SLIP_WORKER_STACKS): a fork child whose accelerated sockets are all
 * SO_REUSEPORT listeners of its parent's stack, and whose epoll sets watch none yet, opens a
 * stack of its own in the group at its first accept or epoll_ctl on one of them, or before it
 * drops root (it could not open one after). Each listener gets a copy there
 * (slip_tcp__copy_listener): the one in use listens at once, on the same kernel socket; the
 * others at their first use (a listener the worker never uses, such as another nginx worker's,
 * must take no connections). The worker then gives its references to the parent's sockets back.
 * Anything else (a connection, a UDP socket, a listener without SO_REUSEPORT, whose queue the
 * kernel would share between processes) keeps it in the parent's stack. use_fd: the listener
 * in use, or -1. Returns 0 when it moved. */
static int worker_takeover(int use_fd)
{
    struct slip_stack *from = g_pre.stack;
    int n = 0, reuse = 0;
    socklen_t rl = sizeof(reuse);
    /* A worker that dropped its user's privileges may not open a stack in the group (its
     * creator's user only, and AF_XDP sockets need CAP_NET_RAW): it stays. */
    if (!from || !slip_share__may_serve(from) || uepoll_any_accelerated())
        return -1;
    for (int fd = 0; fd < g_pre.nfds; fd++) {
        struct pfd *p = pfd_get(fd);
        if (!p || p->kind == PFD_EPOLL)
            continue;
        reuse = 0;
        if (p->kind != PFD_TCP || !p->listening || p->left_sock || p->st ||
            real_getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &reuse, &rl) < 0 || !reuse)
            return -1;
        n++;
    }
    if (!n || n > 1024)
        return -1;
    /* The process goes on using its parent's stack until the copies are made; a fork child is
     * single-threaded here but for the progress thread, which is kept out meanwhile. */
    pthread_mutex_lock(&g_progress_mu);
    /* Our new stack: the name we served was the parent's (its processes serve it). */
    share_drop(&g_named_fd);
    g_left_stack = from;
    struct slip_stack *to;
    preload_open_stack(&to, NULL);
    int copies[1024];
    int nc = 0, rc = to ? 0 : -1;
    for (int fd = 0; fd < g_pre.nfds && rc == 0; fd++) {
        struct pfd *p = pfd_get(fd);
        if (!p || p->kind != PFD_TCP)
            continue;
        int c = slip_tcp__copy_listener(from, p->sock, to, fd, fd == use_fd);
        if (c < 0)
            rc = c;
        else
            copies[nc++] = c;
    }
    if (rc < 0) {
        /* Stay where we were: the copies go (their kernel sockets are the listeners' own). The
         * new stack stays open, unused, until we exit. */
        for (int i = 0; to && i < nc; i++)
            slip_tcp__close(to, copies[i]);
        if (to)
            slip_warn("this worker keeps its parent's stack: a listener could not be copied into its own (%s)",
                      strerror(-rc));
        g_left_stack = NULL;
        pthread_mutex_unlock(&g_progress_mu);
        return -1;
    }
    g_pre.stack = to;
    int i = 0;
    for (int fd = 0; fd < g_pre.nfds; fd++) {
        struct pfd *p = pfd_get(fd);
        if (!p || p->kind != PFD_TCP)
            continue;
        slip_sock__set_ino(to, true, copies[i], 0);
        slip_sock__ref(to, true, copies[i], 1);
        if (fd == use_fd) {
            if (slip_sock__ref(from, true, p->sock, -1) == 0)
                slip_tcp__close(from, p->sock);
        } else {
            p->left_sock = p->sock + 1;     /* our reference there goes when it listens */
        }
        p->sock = copies[i++];
    }
    g_progress_stack = to;
    pthread_mutex_unlock(&g_progress_mu);
    slip_info("worker %d: %d listener(s) on a stack of its own (%s)", (int)getpid(), nc, slip_stack__name(to));
    return 0;
}

/* A worker's listener used for the first time: its copy listens now (see worker_takeover). */
static void worker_listen(int fd, struct pfd *p)
{
    int fsock = p->left_sock - 1;
    p->left_sock = 0;
    preload_depth++;
    int c = slip_tcp__copy_listener(g_left_stack, fsock, g_pre.stack, fd, true);
    if (c >= 0) {
        slip_sock__set_ino(g_pre.stack, true, c, 0);
        slip_sock__ref(g_pre.stack, true, c, 1);
        if (slip_sock__ref(g_pre.stack, true, p->sock, -1) == 0)
            slip_tcp__close(g_pre.stack, p->sock);
        p->sock = c;
    } else {
        slip_warn("a listener of this worker could not be copied into its own stack (%s): it takes no connections",
                  strerror(-c));
    }
    if (slip_sock__ref(g_left_stack, true, fsock, -1) == 0)
        slip_tcp__close(g_left_stack, fsock);
    preload_depth--;
}

bool preload_is_worker(void)
{
    return g_left_stack != NULL;
}

void preload_worker_forget(struct pfd *p)
{
    if (p->left_sock && g_left_stack) {
        int fsock = p->left_sock - 1;
        p->left_sock = 0;
        if (slip_sock__ref(g_left_stack, true, fsock, -1) == 0)
            slip_tcp__close(g_left_stack, fsock);
    }
}

void preload_worker_early(void)
{
    if (!g_worker_candidate || !g_pre.stack)
        return;
    g_worker_candidate = false;
    preload_depth++;
    worker_takeover(-1);
    preload_depth--;
}

void preload_listener_use(int fd, struct pfd *p)
{
    if (p->used || !g_pre.stack)
        return;
    p->used = 1;
    if (p->left_sock && g_left_stack) {
        worker_listen(fd, p);
        return;
    }
    if (g_worker_candidate) {
        g_worker_candidate = false;
        preload_depth++;
        worker_takeover(fd);    /* when it moved, p names the copy, which listens */
        preload_depth--;
    }
    slip_tcp__listener_used(pfd_stack(p), p->sock);
}

/* _exit and _Exit end the process without exit handlers: the progress thread must be outside the
 * stack first (preload_quiesce). */
static void (*real_exit_fn)(int);

__attribute__((visibility("default"), noreturn)) void _exit(int status)
{
    pid_t owner = __atomic_load_n(&g_progress_pid, __ATOMIC_ACQUIRE);
    /* As at exit(): the process's sockets are released by the process itself (not by the
     * others noticing its death later). Not in a child that shares our memory (CLONE_VM). */
    if (!preload_depth && (!owner || owner == getpid()))
        stack_at_exit();
    if (!preload_depth)
        preload_file_exit();
    if (!real_exit_fn)
        real_exit_fn = (void (*)(int))dlsym(RTLD_NEXT, "_exit");
    real_exit_fn(status);
    __builtin_unreachable();
}

__attribute__((visibility("default"), noreturn)) void _Exit(int status)
{
    _exit(status);
}
