/* Sandbox state of the process and of the calling thread (sandbox.h). */
#include "base/sandbox.h"

static int g_level;
static __thread bool t_before;      /* a helper thread started while no filter was in place */

void slip_sandbox__enter(enum slip_sandbox_level level)
{
    int cur = __atomic_load_n(&g_level, __ATOMIC_ACQUIRE);
    while (cur < (int)level && !__atomic_compare_exchange_n(&g_level, &cur, (int)level, false,
                                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        ;
}

enum slip_sandbox_level slip_sandbox__level(void)
{
    return (enum slip_sandbox_level)__atomic_load_n(&g_level, __ATOMIC_ACQUIRE);
}

void slip_sandbox__thread_started(void)
{
    t_before = slip_sandbox__level() == SLIP_SANDBOX_NONE;
}

bool slip_sandbox__limited(void)
{
    int l = __atomic_load_n(&g_level, __ATOMIC_RELAXED);
    return l == SLIP_SANDBOX_PROCESS || (l == SLIP_SANDBOX_THREADS && !t_before);
}
