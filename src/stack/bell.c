/* Cross-process bells; see bell.h. The name is per network namespace (abstract UNIX names are),
 * which is where a stack's processes all live. Anyone in the namespace may ring or even take a
 * bell's name: the worst either does is a spurious wakeup, or none (then the owner sleeps until
 * its own timeout, at most 100 ms, as before bells existed). Nothing read from a bell is used. */
#include "stack/bell.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static socklen_t bell_addr(struct sockaddr_un *sa, pid_t pid)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    int n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "slipstream/1/bell/%d", (int)pid);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int slip_bell__open(pid_t pid)
{
    struct sockaddr_un sa;
    socklen_t sl = bell_addr(&sa, pid);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&sa, sl) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

void slip_bell__ring(int fd, pid_t pid)
{
    struct sockaddr_un sa;
    socklen_t sl = bell_addr(&sa, pid);
    char one = 1;
    if (fd >= 0)
        (void)sendto(fd, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&sa, sl);
}

bool slip_bell__drain(int fd)
{
    char buf[64];
    bool any = false;
    int saved = errno;
    /* read(), not recv(): every seccomp sandbox allows read (base/sandbox.h), and the socket is
     * non-blocking, so a sandboxed thread can empty a bell rung before it entered its sandbox
     * (a level-triggered fd it cannot empty would wake its waits forever). */
    if (fd >= 0)
        while (read(fd, buf, sizeof(buf)) >= 0)
            any = true;
    errno = saved;
    return any;
}
