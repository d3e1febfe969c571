/* The table of processes sharing a stack; see proc.h. Slots change hands with compare-and-swap
 * on pid, so processes that do not hold the stack lock may claim and reap. */
#include "stack/proc.h"

#include "base/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

uint64_t slip_proc__start_time(pid_t pid)
{
    char path[64], buf[1024];
    /* A sandbox may kill us for open or kill: nobody is declared dead from inside one. */
    if (slip_sandbox__limited())
        return SLIP_PROC_START_UNKNOWN;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        /* No /proc here (a chroot: sshd's pre-authentication child), or no fd left (EMFILE,
         * RLIMIT_NOFILE lowered): only ESRCH from kill says the process is gone. Reading
         * "cannot open" as "dead" released every live process's sockets. */
        return kill(pid, 0) < 0 && errno == ESRCH ? 0 : SLIP_PROC_START_UNKNOWN;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    /* "pid (comm) S ppid ...": comm may hold spaces and parentheses, so start after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ')
        return 0;
    p += 2;
    if (*p == 'Z' || *p == 'X')
        return 0;
    /* state is field 3; starttime is field 22 */
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p)
            return 0;
        p++;
    }
    unsigned long long v = 0;
    if (sscanf(p, "%llu", &v) != 1)
        return 0;
    return v ? v : 1;           /* a process started at tick 0 still exists */
}

static void slot_clear(struct slip_proc *p)
{
    p->closeq_n = 0;
    p->start = 0;
    p->lent = 0;                /* the frames went back first (slip_tcp__zc_release) */
}

int slip_procs__claim(struct slip_procs *t, int32_t pid)
{
    for (int i = 0; i < SLIP_PROC_MAX; i++) {
        int32_t expect = SLIP_PROC_FREE;
        /* RESERVED first so nobody reads half-cleared counts as a holder's */
        if (__atomic_compare_exchange_n(&t->p[i].pid, &expect, SLIP_PROC_RESERVED, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            slot_clear(&t->p[i]);
            if (pid != SLIP_PROC_RESERVED)
                slip_procs__bind(t, i, pid);
            return i;
        }
    }
    return -ENOSPC;
}

int slip_procs__find(const struct slip_procs *t, pid_t pid)
{
    for (int i = 0; i < SLIP_PROC_MAX; i++)
        if (__atomic_load_n(&t->p[i].pid, __ATOMIC_ACQUIRE) == (int32_t)pid)
            return i;
    return -1;
}

void slip_procs__bind(struct slip_procs *t, int i, pid_t pid)
{
    /* The start time is read before the pid is published, so a reaper never pairs the pid with a
     * missing start time; 0 (already exited) makes the slot dead at once, which is right. */
    t->p[i].start = slip_proc__start_time(pid);
    __atomic_store_n(&t->p[i].sleepers, 0, __ATOMIC_RELAXED);   /* a fork child's are not its parent's */
    __atomic_store_n(&t->p[i].pid, (int32_t)pid, __ATOMIC_RELEASE);
}

bool slip_procs__dead(const struct slip_procs *t, int i)
{
    int32_t pid = __atomic_load_n(&t->p[i].pid, __ATOMIC_ACQUIRE);
    if (pid <= 0)
        return false;
    uint64_t st = slip_proc__start_time(pid), was = t->p[i].start;
    if (st == SLIP_PROC_START_UNKNOWN || was == SLIP_PROC_START_UNKNOWN)
        return st == 0;
    return st == 0 || st != was;
}

bool slip_procs__take_dead(struct slip_procs *t, int i)
{
    int32_t pid = __atomic_load_n(&t->p[i].pid, __ATOMIC_ACQUIRE);
    if (pid <= 0 || !slip_procs__dead(t, i))
        return false;
    return __atomic_compare_exchange_n(&t->p[i].pid, &pid, SLIP_PROC_REAPING, false, __ATOMIC_ACQ_REL,
                                       __ATOMIC_RELAXED);
}

void slip_procs__free(struct slip_procs *t, int i)
{
    slot_clear(&t->p[i]);
    __atomic_store_n(&t->p[i].pid, SLIP_PROC_FREE, __ATOMIC_RELEASE);
}
