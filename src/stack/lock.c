/* Futex mutex; see lock.h. */
#include "stack/lock.h"
#include "stack/proc.h"

#include <linux/futex.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Waits at most 50 ms: long enough to cost nothing, short enough to notice a dead owner. */
static void futex_wait(_Atomic uint32_t *w, uint32_t val)
{
    struct timespec ts = { 0, 50 * 1000 * 1000 };
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, val, &ts, NULL, 0);
}

/* The holder was killed inside the stack (SIGKILL, a crash): the lock would stay taken for
 * every other process. One waiter takes it over; what the dead holder left half done is the
 * same risk a kernel oops would be, but the others keep running instead of hanging. */
static bool steal_from_dead(struct slip_lock *l)
{
    uint32_t owner = __atomic_load_n(&l->owner_pid, __ATOMIC_ACQUIRE);
    if (owner == 0 || owner == (uint32_t)getpid() || slip_proc__start_time((pid_t)owner) != 0)
        return false;
    if (!__atomic_compare_exchange_n(&l->owner_pid, &owner, (uint32_t)getpid(), false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_RELAXED))
        return false;
    l->stolen++;
    return true;
}

static void futex_wake(_Atomic uint32_t *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, 1, NULL, NULL, 0);
}

void slip_lock__init(struct slip_lock *l)
{
    atomic_store(&l->word, 0);
    l->owner_pid = 0;
    l->contended = 0;
    l->stolen = 0;
}

bool slip_lock__try(struct slip_lock *l)
{
    uint32_t expect = 0;
    if (!atomic_compare_exchange_strong_explicit(&l->word, &expect, 1, memory_order_acquire, memory_order_relaxed))
        return false;
    /* the caller records owner_pid: getpid() is a syscall */
    return true;
}

void slip_lock__acquire(struct slip_lock *l)
{
    uint32_t c = 0;
    if (atomic_compare_exchange_strong_explicit(&l->word, &c, 1, memory_order_acquire, memory_order_relaxed)) {
        /* the caller records owner_pid: getpid() is a syscall */
        return;
    }
    l->contended++;
    if (c != 2)
        c = atomic_exchange_explicit(&l->word, 2, memory_order_acquire);
    unsigned waits = 0;
    while (c != 0) {
        futex_wait(&l->word, 2);
        c = atomic_exchange_explicit(&l->word, 2, memory_order_acquire);
        /* every 20th wait (a second when nobody releases): is the holder still alive? */
        if (c != 0 && ++waits % 20 == 0 && steal_from_dead(l))
            return;
    }
    /* the caller records owner_pid: getpid() is a syscall */
}

void slip_lock__release(struct slip_lock *l)
{
    l->owner_pid = 0;
    if (atomic_fetch_sub_explicit(&l->word, 1, memory_order_release) != 1) {
        atomic_store_explicit(&l->word, 0, memory_order_release);
        futex_wake(&l->word);
    }
}

void slip_lock__seize(struct slip_lock *l)
{
    /* 1, not 2: whoever waited died too */
    atomic_store_explicit(&l->word, 1, memory_order_seq_cst);
    l->stolen++;
}
