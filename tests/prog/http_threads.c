/* A small HTTP/1.1 server with a thread per listener, plain POSIX: each of NTHREADS threads opens
 * its own SO_REUSEPORT listener on PORT and serves the connections it accepts with an epoll loop
 * of its own (the shape of a server that scales with threads, not processes). A stack per thread
 * under `slipstream run` (tests/system/test_reuseport.py, bench/apps.py "threads").
 *   http_threads PORT NTHREADS [BODY_BYTES]
 * Every request (anything ending in an empty line; keep-alive, pipelined or not) is answered with
 * 200 and BODY_BYTES (default 1024) bytes; "Connection: close" closes after the answer. A GET of
 * /who is answered with "<thread index> <pid>\n" instead. Prints "listening N" once every thread
 * listens; each thread's count of answers is printed at SIGTERM/SIGINT ("thread I served N"). */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_THREADS 16
#define BUF 16384

static int g_port;
static size_t g_body;
static char *g_resp;            /* header + body */
static size_t g_resp_len;
static atomic_int g_listening;
static atomic_ulong g_served[MAX_THREADS];

struct conn {
    int fd;
    size_t have;
    char buf[BUF];
};

static int open_listener(void)
{
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)g_port) };
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(fd, 1024) < 0) {
        perror("http_threads: listener");
        exit(1);
    }
    return fd;
}

static bool send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            /* A full send buffer (a large body): wait for room, briefly. */
            struct epoll_event ev;
            int ep = epoll_create1(EPOLL_CLOEXEC);
            struct epoll_event want = { .events = EPOLLOUT };
            epoll_ctl(ep, EPOLL_CTL_ADD, fd, &want);
            int r = epoll_wait(ep, &ev, 1, 5000);
            close(ep);
            if (r <= 0)
                return false;
            continue;
        }
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Answers every complete request in c's buffer; false: close the connection. */
static bool serve(struct conn *c, int idx)
{
    for (;;) {
        char *end = memmem(c->buf, c->have, "\r\n\r\n", 4);
        if (!end)
            return c->have < BUF;
        size_t len = (size_t)(end - c->buf) + 4;
        bool close_after = memmem(c->buf, len, "Connection: close", 17) != NULL;
        bool ok;
        if (len > 9 && !memcmp(c->buf, "GET /who ", 9)) {
            char body[64], head[160];
            int bl = snprintf(body, sizeof(body), "%d %d\n", idx, (int)getpid());
            int hl = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", bl);
            ok = send_all(c->fd, head, (size_t)hl) && send_all(c->fd, body, (size_t)bl);
        } else {
            ok = send_all(c->fd, g_resp, g_resp_len);
        }
        atomic_fetch_add(&g_served[idx], 1);
        memmove(c->buf, c->buf + len, c->have - len);
        c->have -= len;
        if (!ok || close_after)
            return false;
    }
}

static void *thread_main(void *arg)
{
    int idx = (int)(long)arg;
    int lfd = open_listener();
    atomic_fetch_add(&g_listening, 1);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event lev = { .events = EPOLLIN, .data.ptr = NULL };
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev) < 0) {
        perror("http_threads: epoll");
        exit(1);
    }
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(ep, evs, 64, -1);
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (!c) {
                for (;;) {
                    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    if (fd < 0)
                        break;
                    struct conn *nc = malloc(sizeof(*nc));
                    if (!nc) {
                        close(fd);
                        continue;
                    }
                    nc->fd = fd;
                    nc->have = 0;
                    struct epoll_event cev = { .events = EPOLLIN | EPOLLRDHUP, .data.ptr = nc };
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev);
                }
                continue;
            }
            ssize_t r = recv(c->fd, c->buf + c->have, BUF - c->have, 0);
            if (r < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            bool keep = r > 0;
            if (keep) {
                c->have += (size_t)r;
                keep = serve(c, idx);
            }
            if (!keep) {
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                free(c);
            }
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: http_threads PORT NTHREADS [BODY_BYTES]\n");
        return 2;
    }
    g_port = atoi(argv[1]);
    int nt = atoi(argv[2]);
    g_body = argc > 3 ? strtoul(argv[3], NULL, 10) : 1024;
    if (nt < 1 || nt > MAX_THREADS || g_port <= 0 || g_port > 65535 || g_body > (1u << 20)) {
        fprintf(stderr, "http_threads: bad arguments\n");
        return 2;
    }
    char head[128];
    int hl = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", g_body);
    g_resp_len = (size_t)hl + g_body;
    g_resp = malloc(g_resp_len);
    if (!g_resp)
        return 1;
    memcpy(g_resp, head, (size_t)hl);
    memset(g_resp + hl, 'x', g_body);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);     /* the threads inherit it; main waits for them */
    for (int i = 0; i < nt; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, thread_main, (void *)(long)i) != 0) {
            fprintf(stderr, "http_threads: cannot start thread %d\n", i);
            return 1;
        }
        /* One after the other: thread i listens before thread i + 1 starts. */
        while (atomic_load(&g_listening) < i + 1)
            usleep(1000);
    }
    printf("listening %d\n", nt);
    fflush(stdout);
    int sig;
    sigwait(&set, &sig);
    for (int i = 0; i < nt; i++)
        printf("thread %d served %lu\n", i, atomic_load(&g_served[i]));
    fflush(stdout);
    return 0;
}
