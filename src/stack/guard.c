/* The stack's guardian; see guard.h. The application hands the stack over in one message on a
 * socket pair: its description (as an exec'd image gets it, marked "g": no process slot) and its
 * fds in the order the description names them. The guardian then looks at the stack's process
 * table every GUARD_LOOK, which costs the application nothing: it never touches the lock until
 * everybody is dead. */
#include "stack/guard.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "stack/share.h"
#include "stack/stack.h"

#define GUARD_LOOK_MS  50
/* A process without a slot (the last one, lingering in exit; one past SLIP_PROC_MAX) polls at
 * least every 200 ms (its progress thread): the stack is only orphaned once that long has passed
 * without a poll. */
#define GUARD_QUIET (300 * SLIP_MSEC)

static void nap_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

int slip_guard__handoff(struct slip_stack *s, int sock)
{
    char spec[SLIP_SHARE_SPEC_MAX];
    int fds[SLIP_SHARE_MAX_FDS];
    int rc = slip_stack__describe_for_guard(s, spec, sizeof(spec));
    if (rc < 0)
        return rc;
    return slip_share__send(sock, spec, fds, slip_stack__export_fds(s, fds, SLIP_SHARE_MAX_FDS));
}

int slip_guard__adopt(struct slip_stack **out, int sock, char *err, size_t errlen)
{
    struct timeval tv = { 5, 0 };
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char mine[SLIP_SHARE_SPEC_MAX + 64];
    int fds[SLIP_SHARE_MAX_FDS], nfds = 0;
    int rc = slip_share__recv(sock, mine, sizeof(mine), fds, &nfds);
    if (rc == -ENOENT || (rc < 0 && rc != -EPROTO)) {
        snprintf(err, errlen, "no stack handed over on fd %d: %s", sock, rc == -ENOENT ? "end of file" : strerror(-rc));
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        return rc;
    }
    size_t ml = rc == 0 ? strlen(mine) : 0;
    if (rc == 0 && (ml < 2 || strcmp(mine + ml - 2, ";g") != 0))
        rc = -EPROTO;       /* only a guardian's description: anything else would claim a slot */
    if (rc == 0)
        rc = slip_stack__attach(out, mine, err, errlen);
    else
        snprintf(err, errlen, "malformed stack description handed over");
    if (rc < 0)
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
    return rc;
}

/* While the guardian delivers what the dead had closed, a program started on the same
 * interfaces (a server restarted at once) opens its stack in this stack's group: the guardian
 * serves the group's name meanwhile (nobody else may be left to). */
static void serve_joiners(struct slip_stack *s, const char *share, int *lfd)
{
    if (!share || !*share)
        return;
    if (*lfd < 0)
        *lfd = slip_share__listen(share);
    if (*lfd >= 0)
        slip_share__serve_group(s, *lfd);
}

void slip_guard__run(struct slip_stack *s, int linger_ms, const char *share)
{
    int lfd = -1;
    slip_time_t alone_since = 0;        /* when no process of the stack was alive any more */
    for (;;) {
        nap_ms(GUARD_LOOK_MS);
        if (!slip_stack__orphaned(s, 0)) {
            alone_since = 0;
            continue;
        }
        slip_time_t now = slip_stack__now();
        if (!alone_since)
            alone_since = now;
        /* Nothing left to end (the last process exited and delivered everything): go at once,
         * so the interfaces are free for the next program. */
        if (!slip_stack__guard_pending(s))
            return;
        if (!slip_stack__orphaned(s, GUARD_QUIET))
            continue;
        /* Everybody is gone: what they held gets RST now; what they had closed goes on being
         * delivered until linger_ms after they went (a program joining meanwhile takes over). */
        unsigned left = slip_stack__guard_sweep(s, false);
        slip_time_t end = alone_since + (slip_time_t)linger_ms * SLIP_MSEC;
        bool joined = false;
        while (left && slip_stack__now() < end && !joined) {
            slip_stack__wait(s, 10);
            serve_joiners(s, share, &lfd);
            joined = !slip_stack__orphaned(s, 0);
            if (!joined)
                left = slip_stack__guard_sweep(s, false);
        }
        if (lfd >= 0)
            close(lfd);     /* the joined program's processes serve the name from now on */
        lfd = -1;
        if (joined) {
            alone_since = 0;
            continue;
        }
        slip_stack__guard_sweep(s, true);
        /* Kick the RSTs out and let the kernel take the frames before the sockets close. */
        for (int k = 0; k < 5; k++) {
            slip_stack__poll(s);
            nap_ms(2);
        }
        return;
    }
}
