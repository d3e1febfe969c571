/* The stack lock: a futex-based mutex in shared memory (not FUTEX_PRIVATE), so every process that
 * maps the stack serialises on it. Whoever holds it polls rings and runs protocol work. */
#ifndef SLIP_STACK_LOCK_H
#define SLIP_STACK_LOCK_H

#include <stdatomic.h>
#include "base/types.h"

struct slip_lock {
    _Atomic uint32_t word;      /* 0 free, 1 held, 2 held with waiters (Drepper, "Futexes are tricky") */
    uint32_t owner_pid;         /* for diagnostics after a crash */
    uint64_t contended;         /* times a locker had to wait */
    uint64_t stolen;            /* times a waiter took the lock over from a dead holder */
};

void slip_lock__init(struct slip_lock *l);
void slip_lock__acquire(struct slip_lock *l);
bool slip_lock__try(struct slip_lock *l);
void slip_lock__release(struct slip_lock *l);
/* Takes the lock whoever holds it: only for a caller that knows every other process using the
 * lock is dead (the stack's guardian), which need not wait a second for slip_lock__acquire's
 * takeover. */
void slip_lock__seize(struct slip_lock *l);

#endif
