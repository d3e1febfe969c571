/* The stack's own fds (its memory, the XDP program's maps, the AF_XDP sockets, its eventfds)
 * outlive a program that closes every fd above a number: closefrom() and close_range() are how
 * daemons start clean (sshd does it right after its re-exec for each connection), and closing
 * them under the stack leaves its sockets without a way to transmit. Those calls close
 * everything else in the range; close() of one of them is answered 0 without closing it. */

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "preload/preload.h"
#include "stack/stack.h"

#define EXPORT __attribute__((visibility("default")))
#define OWN_MAX (64 * PRELOAD_STACKS)

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The stacks' fds in this process, sorted when asked (close() only looks for one). */
static int own_fds(int *fds, bool sort)
{
    int n = 0, i;
    PRELOAD_EACH_SLOT(i, preload_slots()) {     /* the process's stack and its threads' */
        struct slip_stack *s = preload_stack_at(i);
        if (s)
            n += slip_stack__own_fds(s, fds + n, OWN_MAX - n);
    }
    if (sort)
        qsort(fds, (size_t)n, sizeof(int), cmp_int);
    return n;
}

bool preload_own_fd(int fd)
{
    int own[OWN_MAX];
    int n = own_fds(own, false);
    for (int i = 0; i < n; i++)
        if (own[i] == fd)
            return fd >= 0;
    return false;
}

int preload_close_range_keep(unsigned first, unsigned last, int flags)
{
    int own[OWN_MAX];
    int n = own_fds(own, true);
    unsigned lo = first;
    int rc = 0;
    for (int i = 0; i < n && lo <= last; i++) {
        if (own[i] < 0 || (unsigned)own[i] < lo || (unsigned)own[i] > last)
            continue;
        if ((unsigned)own[i] > lo && real_close_range(lo, (unsigned)own[i] - 1, flags) < 0)
            rc = -1;
        lo = (unsigned)own[i] + 1;
        if (lo == 0)
            return rc;      /* wrapped: the range ended at UINT_MAX */
    }
    if (lo <= last && real_close_range(lo, last, flags) < 0)
        rc = -1;
    return rc;
}

/* glibc's closefrom calls close_range inside libc, where the close_range above never sees it. */
EXPORT void closefrom(int lowfd)
{
    if (lowfd < 0)
        lowfd = 0;
    if (!g_pre.ready)
        preload_init();
    if (preload_depth || !g_pre.stack) {
        real_close_range((unsigned)lowfd, ~0U, 0);
        return;
    }
    preload_depth++;
    if (pre_close_range((unsigned)lowfd, ~0U, 0) < 0 && errno == ENOSYS)
        /* Kernels before 5.9: one close each, as glibc does, the stack's fds skipped. */
        for (int fd = lowfd; fd < g_pre.nfds; fd++)
            if (!preload_own_fd(fd))
                pre_close(fd);
    preload_depth--;
}
