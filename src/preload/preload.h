/* State of the POSIX layer in one process: the per-fd table, the stack (opened on the first
 * socket that can be accelerated), and the helpers the call implementations share. */
#ifndef SLIP_PRELOAD_PRELOAD_H
#define SLIP_PRELOAD_PRELOAD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <time.h>

#include "preload/calls.h"

struct slip_stack;

/* Stacks one process may have: its own and up to PRELOAD_STACKS - 1 thread stacks. */
#define PRELOAD_STACKS 8

enum pfd_kind { PFD_NONE, PFD_TCP, PFD_UDP, PFD_EPOLL };

struct uepoll_ent {
    int fd;
    uint32_t events;
    epoll_data_t data;
    bool disabled;              /* EPOLLONESHOT fired, until EPOLL_CTL_MOD */
    uint32_t bits_seen;         /* EPOLLET: readiness when last looked at */
    uint32_t gen_seen;          /* EPOLLET: event generation when last reported */
    /* The registration outlived its fd (closed while a dup of it stays open: the kernel keys
     * epoll on the open file, not the number): readiness comes from the socket itself. */
    bool detached;
    uint8_t kind;
    uint8_t st;                 /* the member's stack slot (pfd.st); nested epoll sets: 0 */
    int sock;
    /* When epoll_wait last computed its readiness (TCP): the socket's event generation then,
     * and whether it was ready. Unset after EPOLL_CTL_ADD/MOD. */
    bool looked, was_ready;
    uint32_t gen_look;
    int sock_look;              /* the TCP socket it was then */
};

/* User-space part of an epoll set: the accelerated fds in it (the kernel set holds the rest). */
struct uepoll {
    int n, cap;
    struct uepoll_ent *ents;
    uint32_t epoch_seen;        /* g_ready_epoch at the last look at every entry ... */
    uint64_t all_ms;            /* ... and when (CLOCK_MONOTONIC ms) */
    bool stack_fds_added;       /* the process stack's wake fds are in the kernel set */
    /* Members per stack slot, and nested epoll sets among them (which may hold any stack's);
     * thread stacks (slots 1..) whose wake fds are in the kernel set, by bit. */
    uint32_t per_st[PRELOAD_STACKS];
    uint32_t nested;
    uint32_t thread_fds_added;
    bool accept_bell_added;     /* the stack's accept bell is in the kernel set */
    int epfd;
    struct uepoll *next, *prev; /* every set of the process, so close() can leave them all */
};

/* close(fd): drop fd from every epoll set, as the kernel does when a file goes away. */
void uepoll_forget_fd(int fd);
/* In a fork child: the inherited epoll sets watch the child's own bells too (wait.c). */
void uepoll_atfork_child(void);
/* close(fd) of a socket another fd of this process still refers to: keep its registrations;
 * close of the last one: drop them. */
void uepoll_detach_fd(int fd, uint8_t kind, uint8_t st, int sock);
void uepoll_forget_sock(uint8_t kind, uint8_t st, int sock);
void uepoll_free(struct uepoll *ep);

struct pfd {
    uint8_t kind;
    uint8_t nonblock;
    uint8_t listening;
    uint8_t connecting;         /* TCP connect() returned EINPROGRESS/EINTR, no connect() saw the end */
    uint8_t v6;                 /* an AF_INET6 socket (dual-stack): its IPv4 peers are ::ffff:a.b.c.d */
    int sock;                   /* stack socket index */
    int rcvtimeo_ms, sndtimeo_ms;   /* -1: none */
    int rcvlowat;               /* TCP SO_RCVLOWAT when above 1, else 0 */
    struct uepoll *ep;          /* PFD_EPOLL */
    /* UDP sendto: the last destination found to route through the stack, and the control-plane
     * generation that answer came from (0 = none), so a server replying to one peer asks once. */
    uint32_t via_us_dst;
    uint32_t via_us_seq;
    /* The same for IPv6 (udp6.c pre_udp6_dst): address, sin6_scope_id, generation (0 = none). */
    uint8_t via_us6_dst[16];
    uint32_t via_us6_scope;
    uint32_t via_us6_seq;
    /* SO_ZEROCOPY (zerocopy.c): on, the next notification id, the pending range [lo, hi]. */
    uint8_t zerocopy, zc_pending;
    uint8_t recvpktinfo6;       /* IPV6_RECVPKTINFO on an AF_INET6 UDP socket (udp6.c) */
    uint8_t used;               /* a listener this process accepted or waited on (preload_listener_use) */
    uint8_t st;                 /* the stack the socket lives in: g_pre.stacks[st] (0: the process's) */
    int tid;                    /* a listener: the thread that called listen() (thread stacks, init.c) */
    int left_sock;              /* a worker's listener not used yet: its socket in the stack the worker
                                 * left, + 1 (sock is a copy that does not listen yet); 0 none */
    uint32_t zc_next, zc_lo, zc_hi;
};

struct preload_state {
    bool ready;                 /* real functions resolved */
    bool tried;                 /* stack open attempted */
    bool strict;
    int spin_usec;
    int epoll_all_ms;           /* SLIP_EPOLL_ALL_MS: epoll_wait looks at every entry this often */
    struct slip_stack *stack;   /* the process's stack (slot 0 of stacks) */
    /* Slot 0 is always the process's stack (stack above, which changes once when a worker moves
     * to its own); 1.. are thread stacks (init.c, SLIP_THREAD_STACKS), opened and never reused
     * while the process lives. nstacks: slots in use, stored last when a slot is filled. */
    struct slip_stack *stacks[PRELOAD_STACKS];
    int nstacks;
    struct pfd *fds;
    int nfds;
};

extern struct preload_state g_pre;
/* Non-zero while this thread runs inside the POSIX layer or the stack: socket calls the stack
 * itself makes (kernel port reservations, libbpf, libxdp) then go straight to libc. */
extern __thread int preload_depth;

/* A per-thread scratch buffer of PRELOAD_SCRATCH_BYTES, one per kind (so a call cannot clobber
 * another's), allocated on first use (scratch.c); NULL when memory is short. */
#define PRELOAD_SCRATCH_BYTES 65536
enum preload_scratch_kind { SCRATCH_RECVMSG, SCRATCH_SENDFILE, SCRATCH_SPLICE_IN, SCRATCH_SPLICE_OUT,
                            PRELOAD_SCRATCH_KINDS };
void *preload_scratch(enum preload_scratch_kind kind);

void preload_init(void);
/* The entry for fd if it is an accelerated socket or a user-space epoll set, else NULL. */
/* How long a sleeping application thread may sleep: the stack's deadline, and never more than
 * PRELOAD_MAX_SLEEP_MS, a safety net for a wakeup lost to the progress thread. */
#define PRELOAD_MAX_SLEEP_MS 100
int preload_sleep_ms(struct slip_stack *s, int timeout_ms);

static inline struct pfd *pfd_get(int fd)
{
    if (fd < 0 || fd >= g_pre.nfds || !g_pre.fds)
        return NULL;
    struct pfd *p = &g_pre.fds[fd];
    return p->kind == PFD_NONE ? NULL : p;
}
struct pfd *pfd_new(int fd);
/* The stack behind accelerated socket p. */
static inline struct slip_stack *pfd_stack(const struct pfd *p)
{
    return p->st ? g_pre.stacks[p->st] : g_pre.stack;
}
/* The stack in slot i (0: the process's), or NULL. */
static inline struct slip_stack *preload_stack_at(int i)
{
    return i == 0 ? g_pre.stack : i < __atomic_load_n(&g_pre.nstacks, __ATOMIC_ACQUIRE) ? g_pre.stacks[i] : NULL;
}
/* The slots in use, as a mask (bit 0, the process's stack, always). */
static inline unsigned preload_slots(void)
{
    int n = __atomic_load_n(&g_pre.nstacks, __ATOMIC_ACQUIRE);
    return n <= 1 ? 1u : n >= PRELOAD_STACKS ? (1u << PRELOAD_STACKS) - 1u : (1u << n) - 1u;
}
/* Runs its body with i set to each slot in mask m, lowest first, and only those: a process with
 * one stack (nearly all) pays one turn, not PRELOAD_STACKS (per wait call, per close). */
#define PRELOAD_EACH_SLOT(i, m) \
    for (unsigned each_slot_ = (m); each_slot_ && ((i) = __builtin_ctz(each_slot_), 1); \
         each_slot_ &= each_slot_ - 1)
/* The slot of the stack new sockets of this thread go to (0 unless it has a thread stack). */
extern __thread uint8_t preload_thread_slot;
/* listen() of p succeeded: a thread that listens on a SO_REUSEPORT port another thread of this
 * process already listens on moves the listener (and, from then on, its new sockets) to a stack
 * of its own (init.c, SLIP_THREAD_STACKS). */
void preload_thread_listen(int fd, struct pfd *p);
/* Opens (or joins) this process's stack into *out, or with thread_name a thread stack in its
 * group (init.c): 0, or negative errno with one warning line printed. */
int preload_open_stack(struct slip_stack **out, const char *thread_name);
/* Puts s (a thread stack, or a stack joined for a socket passed to us) in the next slot of
 * g_pre.stacks: the slot, or -1 when they are all taken (tstack.c). */
int preload_stack_add(struct slip_stack *s);
/* This process is a worker that moved to a stack of its own (init.c). */
bool preload_is_worker(void);
void pfd_clear(int fd);
/* Process p's listener fd is about to be accepted from or waited on (accept, epoll_ctl ADD, poll/select):
 * the first time, a fork child may move to a stack of its own (SLIP_WORKER_STACKS; init.c), and
 * the stack learns the listener is used (slip_tcp__listener_used). */
void preload_listener_use(int fd, struct pfd *p);
/* A fork child about to drop its privileges: the move preload_listener_use would make at the
 * first use, made now while the process can still open a stack. */
void preload_worker_early(void);
/* The last fd of a worker's listener that never listened closes: its reference in the stack the
 * worker left goes. */
void preload_worker_forget(struct pfd *p);
/* True when an epoll set of this process watches an accelerated socket (wait.c). */
bool uepoll_any_accelerated(void);
/* The stack, opened on first use; NULL when it cannot be (fallback to the kernel). */
struct slip_stack *preload_stack(void);
/* The same, for a process that receives sockets over the UNIX socket ufd: if it has no stack yet
 * it opens the one the sending process runs on (by the SLIP_STACK_NAME that process was started
 * with), so a socket handed over by another program is found. */
struct slip_stack *preload_stack_for_passed(int ufd);
/* In a new image after exec: take over the stack and the sockets described by SLIP_ATTACH and
 * SLIP_FDS, if any. */
void preload_attach_inherited(void);
/* Handing the stack and the inherited accelerated sockets to a new image (exec.c), shared by
 * exec (this process becomes the image) and posix_spawn/system (a child becomes it). */
struct exec_ref {
    bool tcp;
    uint8_t st;                 /* 0: counted in slot `slot` of the process stack; else a thread
                                 * stack's socket whose reference this process gave up */
    int sock;
};
struct exec_handoff {
    char **envp;                /* malloc'd copy of envp with SLIP_ATTACH/SLIP_FDS, or NULL: no stack */
    char attach[600];
    char attach_var[640];
    char *fds;                  /* "SLIP_FDS=..." */
    char *kfds;                 /* "SLIP_KFDS=...": this process's port-reservation fds (kfd.h) */
    struct exec_ref *touched;   /* sockets whose reference count prep changed, by delta */
    int ntouched;
    int delta;
    int slot;                   /* process slot the references were counted in */
};
/* spawn false: exec, close-on-exec fds give up their reference (slot ignored: this process's);
 * true: a child image in process slot `slot` (slip_proc__reserve, or -1), every fd it inherits
 * gains one there. Negative errno (undo still required). */
int exec_handoff__prep(struct exec_handoff *x, char *const envp[], bool spawn, int slot);
/* The new image did not start: give the references back, free. */
void exec_handoff__undo(struct exec_handoff *x);
/* It started (spawn): keep the references, free. */
void exec_handoff__done(struct exec_handoff *x);

/* Drops the stack socket behind fd (last reference) and leaves fd to the kernel. */
void preload_release(int fd);
/* Drops one reference to the stack socket behind p (sock.c); closes it with the last one. */
void preload_sock_unref(struct pfd *p);
/* SCM_RIGHTS (sockfd.c). preload_pass_rights: before (dir 1) a UNIX socket message carries
 * accelerated fds away a reference travels with each; dir -1 gives them back (the send failed);
 * the number of accelerated fds in m. preload_adopt_rights: the fds m received on ufd that are
 * kernel twins of accelerated sockets become those sockets here. */
struct msghdr;
int preload_pass_rights(const struct msghdr *m, int dir);
void preload_adopt_rights(struct msghdr *m, int ufd);
/* fd stops naming what it named (close, or libc replacing it behind our back: freopen): its
 * socket loses this reference and its epoll registrations go as close() would. */
void preload_fd_gone(int fd);

/* stdio on accelerated sockets (stdio.c). fd 0, 1 or 2 just became an accelerated socket: the
 * standard stream on it becomes one of ours. */
void preload_stdio_std(int fd);
/* The same for the standard streams of a new image that inherited accelerated sockets. */
void preload_stdio_inherited(void);
/* exit(), before the stack closes the sockets: flush our streams. */
void preload_stdio_at_exit(void);
int preload_vdprintf_chk(int fd, int flag, const char *fmt, va_list ap);

/* keep.c: fd is one of the stack's own; close_range that leaves those open. */
bool preload_own_fd(int fd);
int preload_close_range_keep(unsigned first, unsigned last, int flags);
/* seccomp (sandbox.c): a filter (mode SECCOMP_MODE_*) is being installed with flags
 * (SECCOMP_FILTER_FLAG_*); one inherited across exec (read at load); a wait's sleep, cut into
 * short slices in a sandbox. */
void preload_sandbox_entered(unsigned long mode, unsigned long flags);
void preload_sandbox_inherited(void);
int preload_sandbox_sleep_ms(int t);

/* Readiness of an accelerated socket, as EPOLL* bits. */
unsigned pfd_poll(struct pfd *p);
/* Waits until p is ready for want (or an error/hangup), timeout_ms (-1 forever), also waking when
 * extra_fd (>= 0) is readable. 0, -EAGAIN on timeout, -EINTR. */
int preload_block(struct pfd *p, unsigned want, int timeout_ms, int extra_fd);
/* Many threads waiting on one stack (sockwait.c): one per process, the poller, sleeps on the
 * stack's wait fds; the others sleep on futexes of the TCP sockets they wait for (at most
 * PRELOAD_FUTEX_MAX). preload_futex_round: 1 = the caller became the poller (sleep on the fds,
 * then preload_poller_leave), 0 = it slept on the futexes or ready(arg) was already true (look
 * again), -EINTR (also without sleeping, when a handler ran since the caller's
 * preload_signal_reset). left_ms < 0: no limit (the sleep is capped at PRELOAD_MAX_SLEEP_MS). */
#define PRELOAD_FUTEX_MAX 64
bool preload_futex_usable(void);
int preload_futex_round(struct slip_stack *s, const int *socks, int m, bool (*ready)(void *),
                        void *arg, int left_ms);
void preload_poller_leave(void);
/* This process changed something that can make a socket more ready without an event of the
 * stack (a socket option): epoll_wait looks at every entry next time (wait.c). */
void preload_ready_epoch_bump(void);
/* SLIP_SPIN_USEC: a wait that found nothing looks again, without sleeping, until this long
 * after it first found nothing (*since, 0 before); false at once without it (wait.c). */
bool preload_spin_more(uint64_t *since);

static inline uint64_t preload_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}
/* pthread_cleanup_push handler: leaves the poller's place if *(bool *)poller (a cancelled
 * thread must not keep it). */
void preload_poller_cleanup(void *poller);
/* Forgets this process's blocked-thread roles (a fork child: only the forking thread is left). */
void preload_block_atfork_child(void);

/* Signals (signal.c): forget what ran, then after an EINTR: 0 no handler of ours ran, 1 only
 * handlers installed with SA_RESTART ran, 2 one without did. */
void preload_signal_reset(void);
int preload_signal_restart(void);

/* Keeps the progress thread out of the stack from now on (before _exit, exit, exec, which end it
 * wherever it is); unquiesce undoes it after a failed exec. */
void preload_quiesce(void);
void preload_unquiesce(void);

/* Addresses of either family (inet6.c). pre_sa_v4: the IPv4 address and port sa names for
 * accelerated socket p (AF_INET; for an AF_INET6 socket a v4-mapped sockaddr_in6, AF_INET for UDP
 * as Linux allows, and :: as any address when any_ok), false for anything else (native IPv6, a
 * bad length or family: the kernel's to answer). pre_sa_fill: (addr, port) as p's family names
 * it, ::ffff:a.b.c.d on an AF_INET6 socket. pre_v6only: IPV6_V6ONLY of the kernel socket (it
 * holds the option and net.ipv6.bindv6only's default). pre_v6_autobind: bind the kernel socket
 * to [::]:0 unless it is bound; 0 or -errno. */
struct sockaddr;
bool pre_sa_v4(const struct pfd *p, const struct sockaddr *sa, socklen_t len, bool any_ok, uint32_t *addr,
               uint16_t *port);
void pre_sa_fill(const struct pfd *p, struct sockaddr *sa, socklen_t *len, uint32_t addr, uint16_t port);
bool pre_v6only(int fd);
int pre_v6_autobind(int fd);

/* UDP on AF_INET6 sockets with native IPv6 (udp6.c). pre_sa_v6: a native (not v4-mapped)
 * sockaddr_in6, with its scope id for a link-local address. pre_sa_fill_peer: the peer of a
 * datagram of either family as p's family names it. pre_udp6_autobind: an unbound AF_INET6 UDP
 * socket gets [::]:0 in the kernel and the stack (dual-stack unless v6-only). pre_udp6_bind: 1
 * when sa is not native IPv6 (the caller goes on), else bind's result (released to the kernel
 * when the stack does not own the address). pre_udp6_dst: 1 when sa is a native IPv6
 * destination the stack carries for p, -1 when native but the kernel's, 0 when not native. */
struct wire_ipv6_addr;
struct slip_udp_peer;
bool pre_sa_v6(const struct sockaddr *sa, socklen_t len, struct wire_ipv6_addr *a, uint32_t *scope, uint16_t *port);
void pre_sa_fill_peer(const struct pfd *p, struct sockaddr *sa, socklen_t *len, const struct slip_udp_peer *peer);
int pre_udp6_autobind(int fd, struct pfd *p);
int pre_udp6_bind(int fd, struct pfd *p, const struct sockaddr *sa, socklen_t len);
int pre_udp6_dst(struct pfd *p, const struct sockaddr *sa, socklen_t len, struct wire_ipv6_addr *dst,
                 uint32_t *scope, uint16_t *port);
/* TCP on AF_INET6 sockets with native IPv6 (tcp6.c). pre_tcp6_bind: 1 when sa is not native
 * IPv6, else bind's result (released to the kernel when the stack does not own the address).
 * pre_tcp6_listen: 1 when the socket is bound to a v4-mapped address (the caller goes on), else
 * listen's result (the stack listens natively, dual-stack on :: unless v6-only, or the kernel
 * does). pre_tcp6_dst: as pre_udp6_dst. pre_tcp6_name: true when p is an IPv6 connection of the
 * stack whose local (or peer) name it wrote, or *err says why not (ENOTCONN for a peer name of a
 * connection not connected; err NULL: the peer name whatever the state, for accept). */
int pre_tcp6_bind(int fd, struct pfd *p, const struct sockaddr *sa, socklen_t len);
int pre_tcp6_listen(int fd, struct pfd *p, int backlog);
int pre_tcp6_dst(struct pfd *p, const struct sockaddr *sa, socklen_t len, struct wire_ipv6_addr *dst,
                 uint32_t *scope, uint16_t *port);
bool pre_tcp6_name(struct pfd *p, bool peer, struct sockaddr *sa, socklen_t *len, int *err);
/* The one warning line when an IPv6 TCP socket falls back to the kernel. */
void pre_tcp6_warn(int rc);
/* Appends an IPV6_PKTINFO control message (dst, ifindex) to m if its buffer (room bytes) holds
 * it, else sets MSG_CTRUNC, as Linux's put_cmsg. */
struct msghdr;
void pre_put_pktinfo6(struct msghdr *m, size_t room, const struct wire_ipv6_addr *dst, uint32_t ifindex);

/* For returning a negative errno from a POSIX call: sets errno, returns -1. */
int set_errno(int neg);

/* Our implementations, one per entry of calls.h. */
#define SLIP_DECLARE_PRE(ret, name, params, args) ret pre_##name params;
SLIP_CALLS(SLIP_DECLARE_PRE)
#undef SLIP_DECLARE_PRE
int pre_fcntl(int fd, int cmd, long arg);
int pre_ioctl(int fd, unsigned long req, void *arg);

/* This process just opened a stack (not joined one): start its guardian (guard.c), which lets
 * programs join under the sharing name share (empty: sharing is off) while it finishes a stack
 * whose processes died. */
void preload_guard_start(struct slip_stack *s, const char *share);

/* tcpinfo.c: getsockopt(TCP_INFO) from the stack's view of a connection, as Linux's struct
 * tcp_info of this kernel's size (asked of the kernel socket kfd once). 0 or -errno. */
struct slip_tcp_info;
int pre_tcpinfo__fill(int kfd, const struct slip_tcp_info *in, void *val, socklen_t *len);

/* zerocopy.c: a MSG_ZEROCOPY send on a socket with SO_ZEROCOPY queued data (its completion is
 * pending at once: the stack copied it); recvmsg(MSG_ERRQUEUE) returns it (0, or -EAGAIN). */
void pre_zc__sent(struct pfd *p);
ssize_t pre_zc__recv_errqueue(struct pfd *p, struct msghdr *m);

#endif
