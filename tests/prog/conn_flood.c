/* A kernel client holding many concurrent TCP connections to one server, for the capacity
 * tests and bench/capacity.sh:
 *   conn_flood DST PORT COUNT [--src A,B,...] [--sport-base P] [--inflight K] [--timeout S] [--hold]
 * Opens COUNT connections (at most K handshakes at once, default 1000), spread over the source
 * addresses given (several are needed past ~28,000: the kernel's ephemeral ports are per source
 * address), sends each one 9 bytes of its own and waits for them to be echoed. --sport-base
 * binds connection i to port P + i / (number of sources) instead of letting connect() search
 * for a free ephemeral port (a search that costs the kernel more per connection the more
 * connections to the same server it holds). Connections stay
 * open. Prints one JSON line: how many connected, were served (echo right), failed (and why),
 * and the seconds taken. With --hold it then prints "holding", waits for a line (or EOF) on
 * stdin, closes everything and exits. Exit 0 unless the arguments are wrong. */
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

enum { C_IDLE, C_CONNECTING, C_SENT, C_SERVED, C_FAILED };

struct conn {
    int fd;
    uint8_t state;
    uint8_t got;
    char want[12];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: conn_flood DST PORT COUNT [--src A,B,...] [--inflight K] [--timeout S] [--hold]\n");
        return 2;
    }
    struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
    if (inet_pton(AF_INET, argv[1], &dst.sin_addr) != 1) {
        fprintf(stderr, "conn_flood: bad address %s\n", argv[1]);
        return 2;
    }
    int count = atoi(argv[3]), inflight = 1000, sport_base = 0;
    double timeout = 60;
    bool hold = false;
    struct in_addr srcs[64];
    int nsrc = 0;
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "--src") && i + 1 < argc) {
            char *save = NULL;
            for (char *t = strtok_r(argv[++i], ",", &save); t && nsrc < 64; t = strtok_r(NULL, ",", &save))
                if (inet_pton(AF_INET, t, &srcs[nsrc]) == 1)
                    nsrc++;
        } else if (!strcmp(argv[i], "--sport-base") && i + 1 < argc) {
            sport_base = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--inflight") && i + 1 < argc) {
            inflight = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) {
            timeout = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--hold")) {
            hold = true;
        } else {
            fprintf(stderr, "conn_flood: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (count <= 0 || inflight <= 0) {
        fprintf(stderr, "conn_flood: COUNT and --inflight must be positive\n");
        return 2;
    }
    struct rlimit rl = { (rlim_t)count + 1024, (rlim_t)count + 1024 };
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0 && getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    struct conn *c = calloc((size_t)count, sizeof(*c));
    int ep = epoll_create1(0);
    if (!c || ep < 0) {
        fprintf(stderr, "conn_flood: out of memory\n");
        return 1;
    }
    int next = 0, pending = 0, connected = 0, served = 0, failed = 0, wrong = 0;
    int e_refused = 0, e_reset = 0, e_timeout = 0, e_other = 0, e_local = 0;
    double t0 = now_s(), end = t0 + timeout;
    struct epoll_event evs[1024];
    while (served + failed < count && now_s() < end) {
        /* open more while under the handshake budget */
        while (next < count && pending < inflight) {
            struct conn *k = &c[next];
            snprintf(k->want, sizeof(k->want), "%08d\n", next % 100000000);
            next++;
            k->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
            if (k->fd < 0)
                goto local_failure;
            if (nsrc || sport_base) {
                int one = 1;
                struct sockaddr_in sa = { .sin_family = AF_INET };
                if (nsrc)
                    sa.sin_addr = srcs[next % nsrc];
                if (sport_base)
                    sa.sin_port = htons((uint16_t)(sport_base + (next - 1) / (nsrc ? nsrc : 1)));
                else
                    setsockopt(k->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
                if (bind(k->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                    goto local_failure;
            }
            if (connect(k->fd, (struct sockaddr *)&dst, sizeof(dst)) < 0 && errno != EINPROGRESS)
                goto local_failure;
            k->state = C_CONNECTING;
            pending++;
            struct epoll_event ev = { .events = EPOLLOUT, .data.u32 = (uint32_t)(k - c) };
            epoll_ctl(ep, EPOLL_CTL_ADD, k->fd, &ev);
            continue;
        local_failure:      /* this host could not open, bind or start the connection */
            if (k->fd >= 0)
                close(k->fd);
            k->fd = -1;
            k->state = C_FAILED;
            failed++;
            e_local++;
        }
        int n = epoll_wait(ep, evs, 1024, 100);
        for (int i = 0; i < n; i++) {
            struct conn *k = &c[evs[i].data.u32];
            int err = 0;
            socklen_t el = sizeof(err);
            if (k->state == C_CONNECTING) {
                pending--;
                getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &err, &el);
                if (!err && send(k->fd, k->want, 9, MSG_NOSIGNAL) != 9)
                    err = errno ? errno : EIO;
                if (err) {
                    k->state = C_FAILED;
                    failed++;
                    if (err == ECONNREFUSED) e_refused++;
                    else if (err == ECONNRESET) e_reset++;
                    else if (err == ETIMEDOUT) e_timeout++;
                    else e_other++;
                    epoll_ctl(ep, EPOLL_CTL_DEL, k->fd, NULL);
                    continue;
                }
                connected++;
                k->state = C_SENT;
                struct epoll_event ev = { .events = EPOLLIN, .data.u32 = evs[i].data.u32 };
                epoll_ctl(ep, EPOLL_CTL_MOD, k->fd, &ev);
            } else if (k->state == C_SENT) {
                char buf[16];
                ssize_t r = recv(k->fd, buf, sizeof(buf), 0);
                if (r > 0 && k->got + r <= 9 && !memcmp(buf, k->want + k->got, (size_t)r)) {
                    k->got = (uint8_t)(k->got + r);
                    if (k->got == 9) {
                        k->state = C_SERVED;
                        served++;
                        epoll_ctl(ep, EPOLL_CTL_DEL, k->fd, NULL);
                    }
                } else if (r < 0 && errno == EAGAIN) {
                    continue;
                } else {
                    k->state = C_FAILED;
                    failed++;
                    if (r > 0) wrong++;
                    else if (r == 0 || errno == ECONNRESET) e_reset++;
                    else e_other++;
                    epoll_ctl(ep, EPOLL_CTL_DEL, k->fd, NULL);
                }
            }
        }
    }
    double took = now_s() - t0;
    int unserved_connected = 0, still_connecting = 0;
    for (int i = 0; i < count; i++) {
        unserved_connected += c[i].state == C_SENT;
        still_connecting += c[i].state == C_CONNECTING;
    }
    printf("{\"count\": %d, \"opened\": %d, \"connected\": %d, \"served\": %d, \"failed\": %d, "
           "\"connected_unserved\": %d, \"still_connecting\": %d, \"refused\": %d, \"reset\": %d, "
           "\"timedout\": %d, \"other\": %d, \"local\": %d, \"wrong\": %d, \"seconds\": %.2f}\n",
           count, next, connected, served, failed, unserved_connected, still_connecting, e_refused, e_reset,
           e_timeout, e_other, e_local, wrong, took);
    fflush(stdout);
    if (hold) {
        printf("holding\n");
        fflush(stdout);
        char line[64];
        if (!fgets(line, sizeof(line), stdin)) {
            /* EOF: let go as well */
        }
    }
    for (int i = 0; i < count; i++)
        if (c[i].fd > 0)
            close(c[i].fd);
    return 0;
}
