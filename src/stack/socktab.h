/* The stack layer's tables sized by SLIP_MAX_CONNS / SLIP_MAX_UDP: the engines' socket tables,
 * what the stack keeps per socket beside them (side arrays), the cork list, and one block per
 * process slot of proc.h (references held per socket, copies of reservation sockets). They sit
 * at the end of the arena, sized for the maximum in address space; a page behind them is
 * allocated when a socket first touches it, so nothing here may walk a whole table: walks stop
 * at the engines' high water (slots above it were never used and are all zeros). */
#ifndef SLIP_STACK_SOCKTAB_H
#define SLIP_STACK_SOCKTAB_H

#include <stddef.h>
#include <stdint.h>

#include "base/types.h"
#include "stack/arena.h"
#include "wire/ipv6.h"

#define SLIP_SOCKTAB_MAX_CONNS (1u << 24)
#define SLIP_SOCKTAB_MAX_UDP   (1u << 22)

/* What a TCP connection holds outside the engine: the kernel socket reserving its port and its
 * claim in the XDP program. Released when the engine is done with the connection (after
 * TIME_WAIT or LAST_ACK), not at close, so neither the kernel nor the XDP program can hand the
 * 4-tuple to someone else while segments of it are still in flight. It lives in shared memory
 * with the connection: the kernel socket is inherited (not close-on-exec) by fork children and
 * exec'd images, so whichever process releases it holds the same fd number. kfd 0 means none
 * (a reservation socket is never fd 0): a slot never used is all zeros. */
struct tcp_res {
    int kfd;
    uint8_t key;                /* 0 none, 1 listen (laddr, lport), 2 connected 4-tuple */
    uint8_t pending;            /* closed by the application, waiting for the engine */
    be32 laddr, raddr;
    uint16_t lport, rport;
    /* IPv6 (sock_tcp6.c): TCP_RES_V6 the claim is in slip_owned6 by laddr6/raddr6 (laddr/raddr
     * hold the engine's folds), TCP_RES_DUAL a dual-stack listener also claims IPv4 on 0.0.0.0. */
    uint8_t v6;
    /* group: the listen key is claimed as a member of a SO_REUSEPORT group across stacks
     * (steer__join). origin: index + 1 of the stack whose listener this one copies (a worker's
     * own stack took it over, slip_tcp__copy_listener; 0 none): that stack is parked from then
     * on, until a process of it uses the listener. used: a process accepted or waited on this
     * listener (a stack with a used listener on a key is never parked). */
    uint8_t group, origin, used;
    struct wire_ipv6_addr laddr6, raddr6;
};
#define TCP_RES_V6   0x1
#define TCP_RES_DUAL 0x2

/* What the stack layer keeps per TCP connection, beside the engine's tcp_conn. */
struct tcp_side {
    struct tcp_res res;         /* first: a tcp_res pointer is its side's pointer */
    /* File descriptors (in all processes) that refer to the socket: the POSIX layer closes the
     * stack socket when the last one goes, wherever fork() or dup() put them. */
    uint32_t refs;
    uint32_t evgen;             /* bumped on every engine wakeup: edge-triggered epoll (a futex) */
    uint32_t waiters;           /* threads (any process) asleep on a futex on evgen */
    /* References travelling in UNIX socket messages (SCM_RIGHTS), counted in the sender's slot
     * until a receiver takes one over: the sender may close its fd before anyone receives. */
    uint32_t inflight;
    int32_t inflight_slot;
    /* Inode of the application's kernel socket behind the stack socket: a process that
     * receives that kernel socket over a UNIX socket (SCM_RIGHTS) finds the stack socket. */
    uint64_t ino;
};

/* The same per UDP socket. */
struct udp_side {
    uint32_t refs, inflight;
    int32_t inflight_slot;
    int32_t kfd;                /* kernel socket reserving the port; 0 none */
    uint64_t ino;
};

/* Where the tables are, in the arena's head (shared memory). */
struct slip_socktab_layout {
    uint32_t max_conns, max_udp;
    uint64_t off_udp, off_tcp, off_tside, off_uside, off_cork, off_pblk, pblk_stride;
};

/* A process's view of them: pointers into its mapping, sizes copied once (checked against the
 * arena when attaching, never re-read from shared memory). */
struct slip_socktab {
    uint32_t max_conns, max_udp;
    struct udp_shared *udp;
    struct tcp_shared *tcp;
    struct tcp_side *ts;
    struct udp_side *us;
    uint32_t *cork;             /* max_conns entries */
    char *pblk;                 /* SLIP_PROC_MAX blocks of pstride bytes */
    size_t pstride;
};

/* Arena bytes the tables need, alignment included. */
size_t slip_socktab__bytes(uint32_t max_conns, uint32_t max_udp);
/* Carves the tables out of the arena (after everything that is faulted in at creation), records
 * where in lay and locates them in t. The engines' tables are not initialised here. */
int slip_socktab__carve(struct slip_socktab *t, struct slip_socktab_layout *lay, struct slip_arena *a,
                        uint32_t max_conns, uint32_t max_udp);
/* Locates the tables a layout (read from shared memory) describes: -EINVAL unless every region
 * lies inside the arena and the engines' tables agree on their sizes. */
int slip_socktab__locate(struct slip_socktab *t, const struct slip_socktab_layout *lay, struct slip_arena *a,
                         bool check_engines);

/* Slots below these were ever used; above, every table is zeros. */
uint32_t slip_socktab__tcp_high(const struct slip_socktab *t);
uint32_t slip_socktab__udp_high(const struct slip_socktab *t);

/* Process slot k's block: its reference counts per TCP socket, per UDP socket, then one bit per
 * TCP slot whose reservation socket it has a copy of. */
static inline uint32_t *slip_socktab__proc_tcp(const struct slip_socktab *t, int k)
{
    return (uint32_t *)(void *)(t->pblk + (size_t)k * t->pstride);
}

static inline uint32_t *slip_socktab__proc_udp(const struct slip_socktab *t, int k)
{
    return slip_socktab__proc_tcp(t, k) + t->max_conns;
}

static inline uint64_t *slip_socktab__proc_held(const struct slip_socktab *t, int k)
{
    size_t off = SLIP_ALIGN_UP(((size_t)t->max_conns + t->max_udp) * sizeof(uint32_t), 8);
    return (uint64_t *)(void *)(t->pblk + (size_t)k * t->pstride + off);
}

/* Slot k's block back to zeros, its pages given back (hole punched in the memfd). */
void slip_socktab__proc_clear(const struct slip_socktab *t, int k);

#endif
