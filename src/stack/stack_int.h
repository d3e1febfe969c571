/* What the files of src/stack share and nobody else may see: the arena's header, the stack
 * object, and the helpers one file gives another (the lock, the process table, the TX policy,
 * port claims, wakeups). The public API is stack.h. */
#ifndef SLIP_STACK_STACK_INT_H
#define SLIP_STACK_STACK_INT_H

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
#include <sys/stat.h>
#include <sys/syscall.h>
#include <limits.h>
#include <linux/futex.h>
#include <time.h>
#include <unistd.h>

#include "base/env.h"
#include "base/sandbox.h"
#include "base/log.h"
#include "ctl/ctl.h"
#include "ip/ip.h"
#include "pkt/pkt.h"
#include "stack/arena.h"
#include "stack/bell.h"
#include "stack/fault.h"
#include "xsk/xsk_netdev.h"
#include "stack/kfd.h"
#include "stack/guard.h"
#include "stack/lock.h"
#include "stack/proc.h"
#include "stack/socktab.h"
#include "tcp/tcp.h"
#include "tcp/tcp_fsm.h"
#include "tcp/tcp_query.h"
#include "udp/udp.h"
#include "udp/udp_query.h"

#define SLIP_SHM_MAGIC   0x736c6970737472ull    /* "slipstr" */
#define SLIP_SHM_VERSION 18  /* 9: tables sized at run time; 10: sleepers per process; 11: stacks in a group;
                                * 12: SO_REUSEPORT groups across stacks; 13: frames lent per process, port counters;
                                * 14: the TCP table's IPv6 fold cache; 15: cache_closed;
                                * 16: reassembly slots counted, a UDP socket's last flow label;
                                * 17: sockets passed between stacks (slip_group.passed);
                                * 18: tcp_conn's probe_stamp, in_send, sndbuf_full */
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

/* What the stacks of one group (one UMEM on a set of interfaces, one user) share besides the
 * UMEM and its frame records: the group's frame pool behind each stack's cache, and a lock per
 * queue for its fill and completion rings. It lives in the header of the group's first stack
 * (index 0), whose memory every stack of the group maps. See docs/ARCHITECTURE.md. */
struct slip_group {
    struct slip_lock pool_lock;         /* the group pool (off_pool of the first stack) */
    _Atomic uint32_t qlock[SLIP_MAX_IFACES][SLIP_MAX_QUEUES];   /* xsk_port__share_rings */
    uint64_t refills, spills;           /* batches moved between the group pool and caches */
    uint64_t starved;                   /* a refill found the group pool empty */
    uint32_t hungry;                    /* the last refill was short: others spill to their low mark */
    /* Serialises edits of shared SO_REUSEPORT listen keys in the XDP maps (claims.c): each is a
     * read-modify-write of the key's member set. Taken under a stack's lock, never the reverse. */
    struct slip_lock claim_lock;
    /* Sockets passed over UNIX sockets lately (SCM_RIGHTS), by the inode of their kernel socket,
     * with the index of the stack they live in: a receiver that has a stack of its own finds the
     * sender's stack here and joins it (slip_group__passed_index). A ring written by any process
     * of the group: an index read from it is bounded, and joining checks the user as always. */
    struct slip_passed {
        uint64_t ino;
        uint32_t index;
        uint32_t pad;
    } passed[64];
    uint32_t passed_next;
};

#define SLIP_STACK_NAME_MAX 32     /* = sizeof(slip_config.stack_name) */

/* Head of the arena. Offsets locate every region. */
struct slip_shm {
    uint64_t magic;
    uint32_t version;
    uint32_t nframes;
    uint32_t frame_size;
    uint32_t headroom;
    struct slip_lock lock;
    /* UMEM, group pool and frame records: in this memory for the group's first stack, in the
     * group's (the second memfd) for the others (grouped). off_cache: this stack's frames. */
    uint64_t off_umem, off_pool, off_meta, off_ctl, off_ip, off_cache;
    uint32_t index;             /* the stack's index in its group: its sockets' XSKMAP slots */
    uint32_t grouped;
    char name[SLIP_STACK_NAME_MAX];     /* SLIP_STACK_NAME, or empty */
    struct slip_group group;    /* the group's, when index 0 */
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
    /* Each AF_XDP socket's software counters, added to by every process that drives it (read
     * only by counters.c: nothing indexes with them). */
    struct xsk_port_stats xsk[SLIP_MAX_IFACES][SLIP_MAX_QUEUES];
    /* Set (under the group's pool lock) when the guardian gives the cache back to the group: a
     * process still in its exit path refills it no more (group.c). */
    uint32_t cache_closed;
};

struct stack_iface {
    char name[IF_NAMESIZE];
    uint32_t ifindex;
    struct steer *steer;
    unsigned nq;
    struct xsk_port *ports[SLIP_MAX_QUEUES];
    struct xsk_netdev xdev[SLIP_MAX_QUEUES];    /* each port as a device */
    struct netdev *dev[SLIP_MAX_QUEUES];        /* what the poll loop uses: xdev, or a device
                                                 * stacked on it (the fault injector) */
    struct fault_dev *fault[SLIP_MAX_QUEUES];   /* that injector (SLIP_FAULT_*), else NULL */
};

struct slip_stack {
    struct slip_config cfg;
    struct slip_arena arena;
    struct slip_arena garena;   /* the group's first stack's memory (grouped stacks), else unmapped */
    struct slip_group *group;
    unsigned index;             /* shm->index, read once */
    int token_fd;               /* the listening socket that holds the index (group.c), or -1 */
    struct slip_shm *shm;
    slip_time_t sysctl_at;      /* when a connect or listen last read the TCP sysctls (0: none yet) */
    bool cc_unknown_said;       /* the log said the namespace's congestion control is not ours */
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
    int peer_bell;              /* this process's bell for the others' polls (bell.h) */
    uint64_t ring_procs;        /* lock held: slots of other processes a poll must ring */
    int accept_bell;            /* eventfd: a poll made a listener ready (listener-only sets) */
    uint32_t accept_sleepers;   /* threads of this process asleep on accept_bell */
    struct tcp_shared *tcp;
    struct slip_socktab t;      /* the sized tables (socktab.h) */
    int proc;                   /* this process's slot in shm->procs, -1 without one */
    bool reap_ok;               /* /proc tells process start times here: dead holders can be found */
    slip_time_t reap_next;
    bool guard;                 /* the stack's guardian (guard.c): no slot, no reservation fds */
};

/* This process's pid, cached (glibc no longer does) and updated in fork children. */
extern pid_t g_stack_pid;

/* Lock ownership, checked wherever a function says "Lock held", in every build with assertions
 * (all but release builds): the lock is taken and this process recorded itself as its owner. A
 * failure names the function and aborts. */
#ifndef NDEBUG
#define STACK_ASSERT_LOCKED(s) stack_assert_locked((s), __func__)
#else
#define STACK_ASSERT_LOCKED(s) ((void)0)
#endif
void stack_assert_locked(const struct slip_stack *s, const char *fn);

/* stack.c: the lock (taking it reloads the rings' cached indices when another process held it
 * last), reservation fds named by shared memory, the per-poll environment. */
void pid_refresh(void);
void stack_lock(struct slip_stack *s);
void stack_unlock(struct slip_stack *s);
void stack_locked_by_us(struct slip_stack *s);
void kfd_close(struct slip_stack *s, int fd);
void env_refresh(struct slip_stack *s, slip_time_t now);
void slip_stack__tcp_sysctls(struct slip_stack *s, bool take_lock);

/* stack_proc.c: this process's slot, and the reservation fds each process has a copy of. */
void proc_register(struct slip_stack *s, int want);
void proc_drain_closeq(struct slip_stack *s);
void proc_kfd_hold(struct slip_stack *s, unsigned i);
void proc_kfd_drop(struct slip_stack *s, unsigned i, int fd);
unsigned procs_live(const struct slip_stack *s);

/* poll.c: the TX policy after a send, receive or close (lock held). */
void uncork_all(struct slip_stack *s);
bool tx_deferring(struct slip_stack *s);
void tx_done(struct slip_stack *s);
void rx_catch_up(struct slip_stack *s);

/* wake.c: bells and sleepers. */
void doorbell_open(struct slip_stack *s);
void doorbell_close(struct slip_stack *s);
void ring_doorbell(struct slip_stack *s);
uint64_t others_asleep(struct slip_stack *s);
void note_sleeping_holders(struct slip_stack *s, bool tcp, unsigned w, uint64_t asleep);
void ring_procs(struct slip_stack *s, uint64_t mask);

/* claims.c: port reservations and XDP claims. */
int fd_above_stdio(int fd);
void steer_key(struct steer_key *k, be32 addr, uint16_t port);
int kernel_reserve_tcp(be32 addr, uint16_t *port);
int adopt_kfd(int app_kfd, be32 addr, uint16_t *port);
void tcp_res_take(struct slip_stack *s, int c);
int tcp_res_claim(struct slip_stack *s, struct tcp_res *r);
void tcp_res_release(struct slip_stack *s, struct tcp_res *r);
void tcp_res_used(struct slip_stack *s, struct tcp_res *r);
bool tcp_res_done(struct slip_stack *s, unsigned i);
void tcp_res_reap(struct slip_stack *s);

/* group.c: the stacks of one UMEM. */
struct group_in {
    int memfd;                  /* the group's memory; -1 once the stack took it */
    int steer[SLIP_MAX_IFACES][4];
    int share[SLIP_MAX_IFACES][SLIP_MAX_QUEUES];
    unsigned nifs, nq[SLIP_MAX_IFACES];
    bool steer_taken[SLIP_MAX_IFACES];
};
int group_in_parse(struct group_in *g, const char *spec, const struct slip_config *cfg, char *err, size_t errlen);
int group_in_map(struct slip_stack *s, struct group_in *g, char *err, size_t errlen);
void group_in_taken(struct group_in *g, unsigned i);
void group_in_done(struct group_in *g);
const char *stack_layout_bad(const struct slip_shm *h, size_t size, size_t frames_size);
void group_wire(struct slip_stack *s);
void group_balance(struct slip_stack *s);
void group_return_all(struct slip_stack *s);
int group_token_bind(struct slip_stack *s, unsigned index);
int group_claim_index(struct slip_stack *s, char *err, size_t errlen);
void group_token_name(const struct slip_stack *s, unsigned index, char *buf, size_t len);
/* sock_udp6.c: lock held */
void udp6_unclaim(struct slip_stack *s, int sock);
/* claims.c: a bound UDP socket's keys in the XDP maps, a SO_REUSEPORT one's as a group member. */
int udp_claim_keys(struct slip_stack *s, const struct steer_key *k4, const struct steer_key6 *k6, bool group);
void udp_unclaim_keys(struct slip_stack *s, const struct steer_key *k4, const struct steer_key6 *k6, bool group);

/* devices.c: at open and attach, once the interface's ports exist */
int devices_wire(struct slip_stack *s, unsigned i, const struct fault *fault);
void devices_kick_all(struct slip_stack *s);
void devices_close(struct slip_stack *s);
void devices_forget(struct slip_stack *s);
bool devices_counters(const struct slip_stack *s, uint64_t *dropped, uint64_t *duplicated, uint64_t *reordered);

/* sock_tcp.c */
void listener_handover(struct slip_stack *s, int sock);
/* sock_tcp_zc.c: lock held, slot c going away: the frames lent to it go back to the pool. And
 * for the guardian closing an orphaned stack: every slot's (it takes the lock). */
void tcp_zc_release(struct slip_stack *s, int c);
void tcp_zc_release_all(struct slip_stack *s);

#endif
