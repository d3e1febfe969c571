/* UDP echo service on the stack, through the internal API (the POSIX layer comes later). System
 * tests and `make demo` run it in a network namespace against kernel clients.
 *   udp_echo --iface IF [--iface IF2] [--port N] [--seconds N] [--counters]
 * Prints "ready port=N" once listening; on SIGTERM/SIGINT or after --seconds prints the counters
 * (with --counters) and exits 0. Errors: one line on stderr, exit 1 (2 for bad usage). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "stack/stack.h"
#include "udp/udp.h"

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: udp_echo --iface IF [--iface IF]... [--port N] [--seconds N] [--counters]\n");
}

int main(int argc, char **argv)
{
    struct slip_config cfg;
    char err[256] = "";
    long port = 7, seconds = 0;
    bool counters = false;

    slip_config__defaults(&cfg);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--iface") && i + 1 < argc) {
            if (cfg.nifaces == SLIP_MAX_IFACES) {
                fprintf(stderr, "udp_echo: at most %d --iface\n", SLIP_MAX_IFACES);
                return 2;
            }
            cfg.ifnames[cfg.nifaces++] = argv[++i];
        } else if (!strcmp(a, "--port") && i + 1 < argc) {
            char *end;
            port = strtol(argv[++i], &end, 10);
            if (*end || port < 0 || port > 65535) {
                fprintf(stderr, "udp_echo: --port %s is not a port number\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--seconds") && i + 1 < argc) {
            seconds = strtol(argv[++i], NULL, 10);
        } else if (!strcmp(a, "--counters")) {
            counters = true;
        } else if (!strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "udp_echo: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (cfg.nifaces == 0) {
        fprintf(stderr, "udp_echo: --iface is required\n");
        return 2;
    }
    if (slip_config__from_env(&cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "udp_echo: %s\n", err);
        return 2;
    }

    struct slip_stack *s;
    int rc = slip_stack__open(&s, &cfg, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "udp_echo: %s\n", err);
        return 1;
    }
    int sock = slip_udp__open(s);
    if (sock >= 0)
        rc = slip_udp__bind(s, sock, 0, (uint16_t)port);
    if (sock < 0 || rc < 0) {
        fprintf(stderr, "udp_echo: cannot bind UDP port %ld: %s\n", port, strerror(sock < 0 ? -sock : -rc));
        slip_stack__close(s);
        return 1;
    }
    be32 la;
    uint16_t lp;
    slip_udp__local(s, sock, &la, &lp);

    struct sigaction sa = { .sa_handler = on_signal };
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    printf("ready port=%u\n", lp);
    fflush(stdout);

    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    static uint8_t buf[65536];
    uint64_t echoed = 0, send_errors = 0;
    while (!g_stop) {
        slip_stack__wait(s, 100);
        for (;;) {
            be32 src;
            uint16_t sport;
            ssize_t n = slip_udp__recvfrom(s, sock, buf, sizeof(buf), &src, &sport, 0);
            if (n == -EAGAIN)
                break;
            if (n < 0) {
                send_errors++;
                continue;
            }
            ssize_t w = slip_udp__sendto(s, sock, buf, (size_t)n, src, sport);
            if (w < 0)
                send_errors++;
            else
                echoed++;
        }
        if (seconds) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if (t.tv_sec - t0.tv_sec >= seconds)
                break;
        }
    }
    printf("echoed %llu send_errors %llu\n", (unsigned long long)echoed, (unsigned long long)send_errors);
    if (counters)
        slip_stack__dump(s, stdout);
    fflush(stdout);
    slip_udp__close(s, sock);
    slip_stack__close(s);
    return 0;
}
