/* A stack per thread (SLIP_THREAD_STACKS). A program whose threads each open a SO_REUSEPORT
 * listener on one port (a thread per core, each with its own accept loop) would otherwise run
 * every thread's connections through the process's one stack and its lock. The second and later
 * threads to listen on such a port get a stack of their own in the group instead: the listener
 * is copied there on the same kernel socket (slip_tcp__copy_listener, as a worker's) and joins
 * the port's group in the XDP program under the new stack's index, so the connections it is
 * given and every later packet of them go to that stack. The thread's later sockets are opened
 * there too (preload_thread_slot). The first thread's listener stays in the process stack, which
 * the other threads keep using for everything else. A listener made by the same thread as the
 * others (a prefork master) does not move: the rule is another thread's listener on the same
 * address, or another process's in the stack (processes that share a stack and each open their
 * own listener: a prefork server whose processes listen after the fork). A thread stack's sockets
 * are not handed to an exec'd or spawned image (exec.c); one passed over a UNIX socket is found by
 * the receiver in the group and joined (sockfd.c). */
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/env.h"
#include "base/log.h"
#include "base/sandbox.h"
#include "preload/preload.h"
#include "stack/share.h"
#include "stack/stack.h"

/* SO_REUSEPORT listeners of this process by fd, with the thread that listened (checked against
 * the fd table, which is the truth: an entry whose fd was closed or reused no longer matches). */
#define THREAD_LISTENERS 64
static struct { int fd, tid; } g_rp[THREAD_LISTENERS];
static pthread_mutex_t g_rp_mu = PTHREAD_MUTEX_INITIALIZER;

/* Entry i names a listener that still lives: its fd is still a listening socket of the thread
 * that listened on it. */
static bool rp_live(int i)
{
    struct pfd *q = g_rp[i].tid ? pfd_get(g_rp[i].fd) : NULL;
    return q && q->kind == PFD_TCP && q->listening && q->tid == g_rp[i].tid;
}

/* Another thread's live SO_REUSEPORT listener of this process on the address fd is bound to. */
static bool other_thread_listens(int fd, int tid)
{
    struct sockaddr_storage a, b;
    socklen_t al = sizeof(a);
    if (real_getsockname(fd, (struct sockaddr *)&a, &al) < 0)
        return false;
    for (int i = 0; i < THREAD_LISTENERS; i++) {
        socklen_t bl = sizeof(b);
        if (rp_live(i) && g_rp[i].fd != fd && g_rp[i].tid != tid &&
            real_getsockname(g_rp[i].fd, (struct sockaddr *)&b, &bl) == 0 && bl == al && memcmp(&a, &b, al) == 0)
            return true;
    }
    return false;
}

static void remember_listener(int fd, int tid)
{
    int free_i = -1;
    for (int i = 0; i < THREAD_LISTENERS; i++) {
        bool live = rp_live(i);
        if (live && g_rp[i].fd == fd)
            return;
        if (!live && free_i < 0)
            free_i = i;
    }
    if (free_i >= 0) {
        g_rp[free_i].fd = fd;
        g_rp[free_i].tid = tid;
    }
}

static pthread_mutex_t g_slots_mu = PTHREAD_MUTEX_INITIALIZER;

int preload_stack_add(struct slip_stack *s)
{
    pthread_mutex_lock(&g_slots_mu);
    int slot = __atomic_load_n(&g_pre.nstacks, __ATOMIC_ACQUIRE);
    if (slot < 1)
        slot = 1;
    if (slot < PRELOAD_STACKS) {
        g_pre.stacks[slot] = s;
        __atomic_store_n(&g_pre.nstacks, slot + 1, __ATOMIC_RELEASE);
    } else {
        slot = -1;
    }
    pthread_mutex_unlock(&g_slots_mu);
    return slot;
}

/* Opens the calling thread's stack into the next slot: the slot, or -1. */
static int thread_stack_open(int tid)
{
    if (__atomic_load_n(&g_pre.nstacks, __ATOMIC_ACQUIRE) >= PRELOAD_STACKS) {
        static int warned;
        if (!warned++)
            slip_warn("this process has as many stacks as it can hold (%d): this thread stays on its "
                      "process's stack", PRELOAD_STACKS);
        return -1;
    }
    char nm[64];
    const char *base = slip_stack__name(g_pre.stack);
    /* A process's main thread (a prefork server's process): <stack>.<pid>, as a worker's. */
    if (tid == (int)getpid())
        snprintf(nm, sizeof(nm), "%s.%d", base[0] ? base : "p", tid);
    else
        snprintf(nm, sizeof(nm), "%s.t%d", base[0] ? base : "p", tid);
    if (strlen(nm) >= sizeof(((struct slip_config *)0)->stack_name) || !slip_config__stack_name_ok(nm))
        snprintf(nm, sizeof(nm), "t%d", tid);
    struct slip_stack *s;
    if (preload_open_stack(&s, nm) < 0)
        return -1;
    int slot = preload_stack_add(s);
    if (slot < 0)
        slip_stack__exit(s, 0, NULL);   /* fd passing took the last slot meanwhile: left, unused */
    return slot;
}

void preload_thread_listen(int fd, struct pfd *p)
{
    int tid = (int)syscall(SYS_gettid);
    int reuse = 0;
    socklen_t rl = sizeof(reuse);
    uint64_t on;
    char err[256];
    p->tid = tid;
    if (!g_pre.stack || real_getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &reuse, &rl) < 0 || !reuse)
        return;
    slip_env__get(SLIP_ENV_THREAD_STACKS, &on, err, sizeof(err));
    pthread_mutex_lock(&g_rp_mu);
    /* A listener this thread made before it had a stack of its own goes to that stack. Only a
     * socket this fd alone refers to moves (a dup, or a fork child's copy, would be left naming
     * the one in the process stack). */
    bool move = !p->st && on && !preload_is_worker() && !slip_sandbox__limited() &&
                slip_share__may_serve(g_pre.stack) && slip_sock__ref(g_pre.stack, true, p->sock, 0) == 1 &&
                (other_thread_listens(fd, tid) || slip_tcp__reuseport_others(g_pre.stack, p->sock) > 0);
    remember_listener(fd, tid);
    int slot = -1;
    if (move) {
        preload_depth++;
        slot = preload_thread_slot ? preload_thread_slot : thread_stack_open(tid);
        preload_depth--;
    }
    pthread_mutex_unlock(&g_rp_mu);
    if (slot < 0)
        return;
    preload_thread_slot = (uint8_t)slot;
    struct slip_stack *from = g_pre.stack, *to = g_pre.stacks[slot];
    preload_depth++;
    int c = slip_tcp__copy_listener(from, p->sock, to, fd, true);
    if (c >= 0) {
        slip_sock__set_ino(to, true, c, 0);
        slip_sock__ref(to, true, c, 1);
        if (slip_sock__ref(from, true, p->sock, -1) == 0)
            slip_tcp__close(from, p->sock);
        p->sock = c;
        p->st = (uint8_t)slot;
        slip_info("thread %d: its listener on a stack of its own (%s)", tid, slip_stack__name(to));
    } else {
        slip_warn("a listener of this thread could not be copied into its own stack (%s): it stays on its "
                  "process's stack", strerror(-c));
    }
    preload_depth--;
}
