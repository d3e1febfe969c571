/* An echo server for many concurrent connections, plain POSIX (epoll, level-triggered): the
 * capacity tests run it under `slipstream run` against tests/prog/conn_flood.c.
 *   echo_many PORT [NOFILE [WORKERS]]
 * Raises RLIMIT_NOFILE to NOFILE (default 262144; else to the hard limit), listens on
 * 0.0.0.0:PORT, forks WORKERS - 1 more processes that accept from the same listener (past one
 * process's fd limit, as nginx workers do), prints "listening" and echoes what each connection
 * sends until it closes. Runs until SIGTERM/SIGINT (of the whole process group). Errors: one
 * line on stderr, exit 1. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: echo_many PORT [NOFILE [WORKERS]]\n");
        return 2;
    }
    int port = atoi(argv[1]);
    rlim_t nofile = argc > 2 ? (rlim_t)strtoul(argv[2], NULL, 10) : 262144;
    struct rlimit rl = { nofile, nofile };
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0 && getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGPIPE, SIG_IGN);

    int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    if (l < 0 || bind(l, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(l, 65535) < 0) {
        fprintf(stderr, "echo_many: listen on port %d: %s\n", port, strerror(errno));
        return 1;
    }
    int workers = argc > 3 ? atoi(argv[3]) : 1;
    pid_t first = getpid();
    for (int w = 1; w < workers; w++)
        if (fork() == 0)
            break;
    int ep = epoll_create1(0);
    struct epoll_event ev = { .events = EPOLLIN, .data.fd = l };
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev) < 0) {
        fprintf(stderr, "echo_many: epoll: %s\n", strerror(errno));
        return 1;
    }
    if (getpid() == first) {
        printf("listening\n");
        fflush(stdout);
    }

    struct epoll_event evs[512];
    char buf[4096];
    while (!g_stop) {
        int n = epoll_wait(ep, evs, 512, 200);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == l) {
                for (int k = 0; k < 512; k++) {
                    int c = accept4(l, NULL, NULL, SOCK_NONBLOCK);
                    if (c < 0) {
                        if (errno != EAGAIN && errno != EINTR)
                            fprintf(stderr, "echo_many: accept: %s\n", strerror(errno));
                        break;
                    }
                    struct epoll_event ce = { .events = EPOLLIN, .data.fd = c };
                    if (epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce) < 0)
                        close(c);
                }
                continue;
            }
            ssize_t r = read(fd, buf, sizeof(buf));
            if (r > 0) {
                /* The clients send a few bytes and wait: a short write means a broken peer. */
                if (write(fd, buf, (size_t)r) != r)
                    close(fd);
            } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                close(fd);      /* closing the fd takes it out of the epoll set */
            }
        }
    }
    return 0;
}
