/* The processes that share one stack (fork children, exec'd images, spawned programs), in shared
 * memory: which socket references each one holds and which kernel reservation sockets it has a
 * copy of. The kernel closes a dead process's fds; this table lets the survivors do the same for
 * its stack sockets (a fork child that exits without closing the connections it inherited must
 * not keep them open forever) and close their own copies of a reservation socket that another
 * process released. */
#ifndef SLIP_STACK_PROC_H
#define SLIP_STACK_PROC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define SLIP_PROC_MAX     64       /* processes attached to one stack at a time */
#define SLIP_PROC_CLOSEQ  256

/* pid values of a slot besides a holder's pid */
#define SLIP_PROC_FREE     0
#define SLIP_PROC_RESERVED (-1)    /* for a child not started yet (fork, posix_spawn) */
#define SLIP_PROC_REAPING  (-2)    /* its holder died; one process is releasing what it held */

struct slip_proc {
    int32_t pid;
    uint32_t sleepers;              /* its threads asleep on the wait fds (ring its bell, bell.h) */
    uint64_t start;                 /* the holder's start time: a reused pid is another process */
    /* The references it holds per stack socket and the copies of reservation sockets it has
     * live in a block per slot sized by the table sizes (socktab.h): untouched pages
     * of it cost nothing, and the stack zeroes it (frees its pages) before freeing the slot. */
    uint32_t closeq_n;
    int32_t closeq[SLIP_PROC_CLOSEQ];       /* fds to close in this process (released elsewhere) */
    /* UMEM frames lent to it for a zero-copy send (sock_tcp_zc.c) and not handed back yet: the
     * first frame of each loan + 1 (0: none), loans linked by their records' next, a loan's
     * frames by chain. A holder that dies between the loan and the send gives them back here. */
    uint32_t lent;
};

struct slip_procs {
    uint64_t closeq_overflows;      /* copies left open because a queue was full */
    uint64_t reaped;                /* dead processes whose references were released */
    struct slip_proc p[SLIP_PROC_MAX];
};

/* Start time of pid in clock ticks since boot (/proc/PID/stat field 22); 0 when the process is
 * gone or a zombie (its fds are closed already); SLIP_PROC_START_UNKNOWN when it exists but
 * /proc cannot tell (chroot, no fd left, a sandbox): alive, and never compared. */
#define SLIP_PROC_START_UNKNOWN UINT64_MAX
uint64_t slip_proc__start_time(pid_t pid);

/* A free slot set to pid (SLIP_PROC_RESERVED for a child to come), counts zero; -ENOSPC. */
int slip_procs__claim(struct slip_procs *t, int32_t pid);
/* The slot held by pid, or -1. */
int slip_procs__find(const struct slip_procs *t, pid_t pid);
/* Records pid (and its start time) as the holder of slot i. */
void slip_procs__bind(struct slip_procs *t, int i, pid_t pid);
/* True when slot i's holder has exited (or its pid now belongs to another process). Free and
 * reserved slots are not dead. */
bool slip_procs__dead(const struct slip_procs *t, int i);
/* Takes a dead slot for reaping (only one caller wins); the caller then releases its counts and
 * calls slip_procs__free. */
bool slip_procs__take_dead(struct slip_procs *t, int i);
void slip_procs__free(struct slip_procs *t, int i);

#endif
