/* The kernel-socket counterpart of tcp_tool, so benchmarks compare the stack with the kernel
 * using the same program logic on both sides (and give the kernel a fast C client).
 *   kernel_tool serve-recv PORT            accept one, read to EOF, discard
 *   kernel_tool serve-send PORT BYTES      accept one, send BYTES, close
 *   kernel_tool connect-send HOST PORT BYTES
 *   kernel_tool connect-recv HOST PORT
 *   kernel_tool echo PORT                  echo server, many connections (epoll), until SIGTERM
 *   kernel_tool rr HOST PORT COUNT SIZE    request/response: SIZE bytes each way, COUNT times
 * Each prints one JSON line on stdout: bytes, seconds, MB/s, or latency percentiles in µs. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
    fprintf(stderr, "kernel_tool: %s: %s\n", what, strerror(errno));
    exit(1);
}

static int listen_on(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 1024) < 0)
        die("listen");
    printf("{\"listening\": %d}\n", port);
    fflush(stdout);
    return fd;
}

static int connect_to(const char *host, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
        fprintf(stderr, "kernel_tool: '%s' is not an IPv4 address\n", host);
        exit(2);
    }
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
        die("connect");
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static void report(const char *mode, unsigned long long bytes, double secs)
{
    printf("{\"mode\": \"%s\", \"bytes\": %llu, \"seconds\": %.3f, \"mbytes_per_s\": %.1f}\n", mode, bytes, secs,
           secs > 0 ? (double)bytes / secs / 1e6 : 0.0);
}

static unsigned long long drain(int fd)
{
    static char buf[1 << 18];
    unsigned long long n = 0;
    for (;;) {
        ssize_t r = read(fd, buf, sizeof(buf));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return n;
        n += (unsigned long long)r;
    }
}

static void pour(int fd, unsigned long long bytes)
{
    static char buf[1 << 18];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (char)(i * 131);
    while (bytes) {
        size_t n = bytes < sizeof(buf) ? (size_t)bytes : sizeof(buf);
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("write");
        bytes -= (unsigned long long)w;
    }
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void echo(int lfd)
{
    int ep = epoll_create1(0);
    struct epoll_event ev = { .events = EPOLLIN, .data.fd = lfd }, evs[64];
    static char buf[1 << 16];
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    for (;;) {
        int n = epoll_wait(ep, evs, 64, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == lfd) {
                int c = accept(lfd, NULL, NULL), one = 1;
                if (c < 0)
                    continue;
                setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                ev.data.fd = c;
                epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
                continue;
            }
            ssize_t r = read(fd, buf, sizeof(buf));
            if (r <= 0) {
                close(fd);
                continue;
            }
            for (ssize_t off = 0; off < r;) {
                ssize_t w = write(fd, buf + off, (size_t)(r - off));
                if (w <= 0)
                    break;
                off += w;
            }
        }
    }
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc < 3) {
        fprintf(stderr, "usage: kernel_tool serve-recv|serve-send|connect-send|connect-recv|echo|rr ...\n");
        return 2;
    }
    const char *m = argv[1];
    double t0;
    if (!strcmp(m, "serve-recv")) {
        int l = listen_on(atoi(argv[2])), c = accept(l, NULL, NULL);
        t0 = now_s();
        unsigned long long n = drain(c);
        report(m, n, now_s() - t0);
    } else if (!strcmp(m, "serve-send") && argc > 3) {
        int l = listen_on(atoi(argv[2])), c = accept(l, NULL, NULL);
        t0 = now_s();
        pour(c, strtoull(argv[3], NULL, 0));
        shutdown(c, SHUT_WR);
        drain(c);
        report(m, strtoull(argv[3], NULL, 0), now_s() - t0);
    } else if (!strcmp(m, "connect-send") && argc > 4) {
        int c = connect_to(argv[2], atoi(argv[3]));
        t0 = now_s();
        pour(c, strtoull(argv[4], NULL, 0));
        shutdown(c, SHUT_WR);
        drain(c);
        report(m, strtoull(argv[4], NULL, 0), now_s() - t0);
    } else if (!strcmp(m, "connect-recv")) {
        int c = connect_to(argv[2], atoi(argv[3]));
        t0 = now_s();
        unsigned long long n = drain(c);
        report(m, n, now_s() - t0);
    } else if (!strcmp(m, "echo")) {
        echo(listen_on(atoi(argv[2])));
    } else if (!strcmp(m, "rr") && argc > 5) {
        int c = connect_to(argv[2], atoi(argv[3]));
        long count = atol(argv[4]);
        size_t size = (size_t)atol(argv[5]);
        char *buf = calloc(1, size);
        double *lat = calloc((size_t)count, sizeof(double));
        if (!buf || !lat || count <= 0 || size == 0)
            return 2;
        t0 = now_s();
        for (long i = 0; i < count; i++) {
            double s = now_s();
            if (write(c, buf, size) != (ssize_t)size)
                die("write");
            for (size_t got = 0; got < size;) {
                ssize_t r = read(c, buf + got, size - got);
                if (r <= 0)
                    die("read");
                got += (size_t)r;
            }
            lat[i] = (now_s() - s) * 1e6;
        }
        double total = now_s() - t0;
        qsort(lat, (size_t)count, sizeof(double), cmp_d);
        printf("{\"mode\": \"rr\", \"count\": %ld, \"size\": %zu, \"seconds\": %.3f, \"p50_us\": %.1f, "
               "\"p99_us\": %.1f, \"p999_us\": %.1f, \"rps\": %.0f}\n", count, size, total,
               lat[count / 2], lat[count * 99 / 100], lat[count * 999 / 1000], (double)count / total);
    } else {
        fprintf(stderr, "kernel_tool: unknown mode or missing arguments: %s\n", m);
        return 2;
    }
    return 0;
}
