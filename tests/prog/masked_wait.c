/* ppoll, epoll_pwait and pselect with a signal mask, on an accelerated socket (test_blocking_calls.py):
 * SIGCHLD is blocked, a child exits (the signal is pending), then the wait unblocks it through its
 * mask argument. Linux delivers the signal as the call starts and returns EINTR at once; OpenSSH's
 * session loop waits exactly this way for its command to end.
 *
 *   masked_wait ppoll|epoll_pwait|pselect PORT
 *
 * Prints "rc=R errno=E handler=H ms=M". */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_handled;

static void on_chld(int sig)
{
    (void)sig;
    g_handled = 1;
}

static long ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
    if (fd < 0 || bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
        perror("socket/bind");
        return 1;
    }
    struct sigaction sa = { .sa_handler = on_chld };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);
    sigset_t block, waitmask;
    sigemptyset(&block);
    sigaddset(&block, SIGCHLD);
    sigprocmask(SIG_BLOCK, &block, &waitmask);     /* waitmask: the mask before, SIGCHLD open */
    pid_t c = fork();
    if (c == 0)
        _exit(0);
    usleep(200 * 1000);                            /* the child is gone: SIGCHLD is pending */
    long t0 = ms_now();
    int rc;
    struct timespec ts = { 3, 0 };
    if (!strcmp(argv[1], "ppoll")) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        rc = ppoll(&p, 1, &ts, &waitmask);
    } else if (!strcmp(argv[1], "epoll_pwait")) {
        int ep = epoll_create1(0);
        struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
        rc = epoll_pwait(ep, &ev, 1, 3000, &waitmask);
    } else {
        fd_set r;
        FD_ZERO(&r);
        FD_SET(fd, &r);
        rc = pselect(fd + 1, &r, NULL, NULL, &ts, &waitmask);
    }
    int e = rc < 0 ? errno : 0;
    printf("rc=%d errno=%d handler=%d ms=%ld\n", rc, e, (int)g_handled, ms_now() - t0);
    waitpid(c, NULL, 0);
    return 0;
}
