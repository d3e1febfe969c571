/* Futex mutex; see lock.h. */
#include "stack/lock.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

static void futex_wait(_Atomic uint32_t *w, uint32_t val)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, val, NULL, NULL, 0);
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
    while (c != 0) {
        futex_wait(&l->word, 2);
        c = atomic_exchange_explicit(&l->word, 2, memory_order_acquire);
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
