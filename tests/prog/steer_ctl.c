/* Test helper for system tests: attaches the XDP steering program to one interface, claims the
 * given UDP/TCP ports on every local address, and holds the attachment until SIGTERM, SIGINT or
 * EOF on stdin; then prints the counters as name=value lines and detaches.
 *   steer_ctl --iface IF [--mode auto|native|generic] [--udp PORT]... [--tcp PORT]... */
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "xsk/steer.h"

#define MAX_PORTS 64

static int parse_port(const char *s, uint16_t *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < 1 || v > 65535)
        return -1;
    *out = (uint16_t)v;
    return 0;
}

/* Returns when a stop signal arrives or stdin reaches EOF (the parent closed the pipe or died). */
static void wait_for_stop(void)
{
    sigset_t set;
    struct pollfd pfd[2];
    char buf[256];
    int sfd;

    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    sfd = signalfd(-1, &set, SFD_CLOEXEC);
    pfd[0] = (struct pollfd){ .fd = sfd, .events = POLLIN };
    pfd[1] = (struct pollfd){ .fd = STDIN_FILENO, .events = POLLIN };
    for (;;) {
        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pfd[0].revents)
            break;
        if (pfd[1].revents & POLLNVAL) {
            pfd[1].fd = -1;     /* no stdin at all: wait for a signal only */
            continue;
        }
        if (pfd[1].revents) {
            ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));

            if (n <= 0 && !(n < 0 && errno == EINTR))
                break;
        }
    }
    if (sfd >= 0)
        close(sfd);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: steer_ctl --iface IF [--mode auto|native|generic] [--udp PORT]... [--tcp PORT]...\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "iface", required_argument, NULL, 'i' },
        { "mode", required_argument, NULL, 'm' },
        { "udp", required_argument, NULL, 'u' },
        { "tcp", required_argument, NULL, 't' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    struct steer_key keys[MAX_PORTS];
    enum steer_xdp_mode mode = STEER_XDP_AUTO;
    const char *ifname = NULL;
    uint64_t counters[STEER_C__MAX];
    struct steer *s;
    char err[256];
    int nkeys = 0, c, rc;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        uint16_t port;

        switch (c) {
        case 'i':
            ifname = optarg;
            break;
        case 'm':
            if (!strcmp(optarg, "auto"))
                mode = STEER_XDP_AUTO;
            else if (!strcmp(optarg, "native"))
                mode = STEER_XDP_NATIVE;
            else if (!strcmp(optarg, "generic"))
                mode = STEER_XDP_GENERIC;
            else {
                fprintf(stderr, "steer_ctl: unknown mode '%s' (auto, native or generic)\n", optarg);
                return 1;
            }
            break;
        case 'u':
        case 't':
            if (parse_port(optarg, &port)) {
                fprintf(stderr, "steer_ctl: bad port '%s'\n", optarg);
                return 1;
            }
            if (nkeys == MAX_PORTS) {
                fprintf(stderr, "steer_ctl: at most %d ports\n", MAX_PORTS);
                return 1;
            }
            keys[nkeys++] = (struct steer_key){
                .lport = htons(port),
                .proto = c == 'u' ? IPPROTO_UDP : IPPROTO_TCP,
            };
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 1;
        }
    }
    if (!ifname || optind != argc) {
        usage(stderr);
        return 1;
    }

    rc = steer__attach(&s, ifname, mode, 0, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "steer_ctl: %s\n", err);
        return 1;
    }
    for (int i = 0; i < nkeys; i++) {
        struct steer_val v = { .stack = 0, .pid = (uint32_t)getpid() };

        rc = steer__add(s, &keys[i], &v);
        if (rc) {
            fprintf(stderr, "steer_ctl: cannot claim port %u: %s\n", ntohs(keys[i].lport), strerror(-rc));
            steer__detach(s);
            return 1;
        }
    }
    printf("attached ifindex=%d native=%d\n", steer__ifindex(s), steer__native(s) ? 1 : 0);
    fflush(stdout);

    wait_for_stop();

    rc = steer__counters(s, counters);
    if (rc) {
        fprintf(stderr, "steer_ctl: cannot read counters: %s\n", strerror(-rc));
        steer__detach(s);
        return 1;
    }
    for (int i = 0; i < STEER_C__MAX; i++)
        printf("%s=%llu\n", steer__counter_name(i), (unsigned long long)counters[i]);
    fflush(stdout);
    steer__detach(s);
    return 0;
}
