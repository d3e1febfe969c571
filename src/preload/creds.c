/* Privilege drops. Servers such as memcached -u USER change to an unprivileged user before they
 * open their sockets, and an unprivileged process can no longer attach XDP or create AF_XDP
 * sockets (CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF). So the first set*id call of a privileged
 * process opens the stack while it still can; what it made keeps working after the drop (the
 * rings, maps and sockets are already open). The stack is opened lazily otherwise, so this only
 * changes when, not whether. The same holds for a worker's own stack. */
#include <unistd.h>

#include "preload/preload.h"

static void before_drop(void)
{
    if (!__atomic_load_n(&g_pre.tried, __ATOMIC_ACQUIRE) && geteuid() == 0)
        preload_stack();
    /* A fork child about to drop root (nginx's workers) moves to a stack of its own now, if it
     * is to move at all (init.c, SLIP_WORKER_STACKS): it could not open one afterwards. */
    if (geteuid() == 0)
        preload_worker_early();
}

#define CRED_CALL(name, params, args) \
    int pre_##name params             \
    {                                 \
        before_drop();                \
        return real_##name args;      \
    }

CRED_CALL(setuid, (uid_t u), (u))
CRED_CALL(setgid, (gid_t g), (g))
CRED_CALL(seteuid, (uid_t u), (u))
CRED_CALL(setegid, (gid_t g), (g))
CRED_CALL(setreuid, (uid_t r, uid_t e), (r, e))
CRED_CALL(setregid, (gid_t r, gid_t e), (r, e))
CRED_CALL(setresuid, (uid_t r, uid_t e, uid_t s), (r, e, s))
CRED_CALL(setresgid, (gid_t r, gid_t e, gid_t s), (r, e, s))
