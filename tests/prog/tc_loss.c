/* Test helper for system tests: attaches tests/bpf/loss.bpf.c at the tc ingress of one interface
 * so that packets arriving there are dropped with a given probability, like loss on a wire.
 *   tc_loss --iface IF --ppm N [--only-l4]
 * Prints "attached ifindex=N" once the filter is in place. Each stdin line "ppm N" changes the
 * rate (answered "ppm N"); "droplen LEN COUNT" drops the next COUNT IPv4 TCP/UDP packets of total
 * length LEN besides (answered the same; a later "ppm" line cancels what is left). SIGTERM, SIGINT or EOF on stdin print the counters on one line
 * ("passed=N dropped=N skipped=N gso=N"), remove the filter (and the clsact qdisc if this program
 * created it) and exit 0. Any error: one line on stderr, exit 1. A SIGKILLed tc_loss leaves its
 * filter behind until the interface or namespace goes away. */
#include <errno.h>
#include <getopt.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "tests/bpf/loss.h"
#include "tests/bpf/loss.skel.h"

/* A handle and priority of our own, so detaching never touches another filter on the hook. */
#define TC_LOSS_HANDLE 0x5117
#define TC_LOSS_PRIO   1

struct tc_loss {
    struct slip_loss *skel;
    struct bpf_tc_hook hook;
    struct bpf_tc_opts opts;
    bool hook_created;
    bool attached;
    struct loss_cfg cfg;
};

static int parse_ppm(const char *s, uint32_t *out)
{
    char *end;
    unsigned long v;

    errno = 0;
    v = strtoul(s, &end, 10);
    while (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')
        end++;
    if (errno || *end || end == s || s[0] == '-' || v > LOSS_PPM_MAX)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static int tc_loss__set_cfg(struct tc_loss *t)
{
    uint32_t key = 0;

    return bpf_map__update_elem(t->skel->maps.slip_loss_cfg, &key, sizeof(key), &t->cfg,
                                sizeof(t->cfg), BPF_ANY);
}

static int tc_loss__attach(struct tc_loss *t, int ifindex, char *err, size_t errlen)
{
    int rc;

    t->skel = slip_loss__open_and_load();
    if (!t->skel) {
        rc = -errno;
        snprintf(err, errlen, "cannot load the BPF program: %s", strerror(errno));
        return rc;
    }
    rc = tc_loss__set_cfg(t);
    if (rc) {
        snprintf(err, errlen, "cannot set the rate: %s", strerror(-rc));
        return rc;
    }
    t->hook = (struct bpf_tc_hook){ .sz = sizeof(t->hook), .ifindex = ifindex,
                                    .attach_point = BPF_TC_INGRESS };
    rc = bpf_tc_hook_create(&t->hook);
    if (rc == 0)
        t->hook_created = true;
    else if (rc != -EEXIST) {
        snprintf(err, errlen, "cannot create the clsact qdisc: %s", strerror(-rc));
        return rc;
    }
    t->opts = (struct bpf_tc_opts){ .sz = sizeof(t->opts), .handle = TC_LOSS_HANDLE,
                                    .priority = TC_LOSS_PRIO,
                                    .prog_fd = bpf_program__fd(t->skel->progs.slip_loss) };
    rc = bpf_tc_attach(&t->hook, &t->opts);
    if (rc) {
        snprintf(err, errlen, "cannot attach the tc filter: %s", strerror(-rc));
        return rc;
    }
    t->attached = true;
    return 0;
}

static void tc_loss__detach(struct tc_loss *t)
{
    if (t->attached) {
        /* bpf_tc_detach wants only handle and priority set. */
        struct bpf_tc_opts o = { .sz = sizeof(o), .handle = TC_LOSS_HANDLE, .priority = TC_LOSS_PRIO };

        bpf_tc_detach(&t->hook, &o);
        t->attached = false;
    }
    if (t->hook_created) {
        /* Both attach points together remove the whole clsact qdisc. */
        t->hook.attach_point = BPF_TC_INGRESS | BPF_TC_EGRESS;
        bpf_tc_hook_destroy(&t->hook);
        t->hook_created = false;
    }
    slip_loss__destroy(t->skel);
    t->skel = NULL;
}

static int tc_loss__counters(struct tc_loss *t, uint64_t out[LOSS_C__MAX])
{
    int ncpu = libbpf_num_possible_cpus();
    uint64_t *vals;
    int rc = 0;

    if (ncpu < 1)
        return ncpu < 0 ? ncpu : -EINVAL;
    vals = calloc((size_t)ncpu, sizeof(*vals));
    if (!vals)
        return -ENOMEM;
    for (uint32_t i = 0; i < LOSS_C__MAX; i++) {
        rc = bpf_map__lookup_elem(t->skel->maps.slip_loss_counters, &i, sizeof(i), vals,
                                  (size_t)ncpu * sizeof(*vals), 0);
        if (rc)
            break;
        out[i] = 0;
        for (int c = 0; c < ncpu; c++)
            out[i] += vals[c];
    }
    free(vals);
    return rc;
}

/* One stdin line. Unknown commands are reported but do not stop the loss. */
static void tc_loss__command(struct tc_loss *t, char *line)
{
    uint32_t ppm, len, count;
    int rc;

    if (sscanf(line, "droplen %u %u", &len, &count) == 2 && len >= 20 && len <= 65535) {
        /* The next `count` IPv4 TCP/UDP packets of total length `len` are dropped. */
        t->cfg.drop_len = len;
        t->cfg.drop_left = count;
        rc = tc_loss__set_cfg(t);
        if (rc)
            fprintf(stderr, "tc_loss: cannot set droplen: %s\n", strerror(-rc));
        else
            printf("droplen %u %u\n", len, count);
        fflush(stdout);
        return;
    }
    if (strncmp(line, "ppm ", 4) || parse_ppm(line + 4, &ppm)) {
        line[strcspn(line, "\n")] = 0;
        fprintf(stderr, "tc_loss: ignoring '%s' (expected 'ppm N', N <= %u, or 'droplen LEN COUNT')\n",
                line, LOSS_PPM_MAX);
        return;
    }
    t->cfg.ppm = ppm;
    t->cfg.drop_left = 0;
    rc = tc_loss__set_cfg(t);
    if (rc)
        fprintf(stderr, "tc_loss: cannot set the rate: %s\n", strerror(-rc));
    else
        printf("ppm %u\n", ppm);
    fflush(stdout);
}

/* Serves stdin commands until a stop signal or EOF on stdin (the parent closed it or died). */
static void tc_loss__serve(struct tc_loss *t)
{
    char line[256];
    size_t used = 0;
    struct pollfd pfd[2];
    sigset_t set;
    int sfd;

    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    sfd = signalfd(-1, &set, SFD_CLOEXEC);
    pfd[0] = (struct pollfd){ .fd = sfd, .events = POLLIN };
    pfd[1] = (struct pollfd){ .fd = STDIN_FILENO, .events = POLLIN };
    for (;;) {
        ssize_t n;
        char *nl;

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
        if (!pfd[1].revents)
            continue;
        n = read(STDIN_FILENO, line + used, sizeof(line) - 1 - used);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        used += (size_t)n;
        line[used] = 0;
        while ((nl = strchr(line, '\n'))) {
            *nl = 0;
            tc_loss__command(t, line);
            used -= (size_t)(nl + 1 - line);
            memmove(line, nl + 1, used + 1);
        }
        if (used == sizeof(line) - 1)
            used = 0;           /* an absurdly long line: drop it */
    }
    if (sfd >= 0)
        close(sfd);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tc_loss --iface IF --ppm N [--only-l4]   (N in parts per million, 0..%u)\n",
            LOSS_PPM_MAX);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "iface", required_argument, NULL, 'i' },
        { "ppm", required_argument, NULL, 'p' },
        { "only-l4", no_argument, NULL, 'l' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    struct tc_loss t = { 0 };
    uint64_t counters[LOSS_C__MAX];
    const char *ifname = NULL;
    bool have_ppm = false;
    char err[256];
    int c, ifindex, rc;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'i':
            ifname = optarg;
            break;
        case 'p':
            if (parse_ppm(optarg, &t.cfg.ppm)) {
                fprintf(stderr, "tc_loss: bad --ppm '%s' (0..%u)\n", optarg, LOSS_PPM_MAX);
                return 1;
            }
            have_ppm = true;
            break;
        case 'l':
            t.cfg.only_l4 = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 1;
        }
    }
    if (!ifname || !have_ppm || optind != argc) {
        usage(stderr);
        return 1;
    }
    ifindex = (int)if_nametoindex(ifname);
    if (!ifindex) {
        fprintf(stderr, "tc_loss: no interface '%s': %s\n", ifname, strerror(errno));
        return 1;
    }
    libbpf_set_print(NULL);     /* errors are reported as one line below, not libbpf's log */

    rc = tc_loss__attach(&t, ifindex, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "tc_loss: %s: %s\n", ifname, err);
        tc_loss__detach(&t);
        return 1;
    }
    printf("attached ifindex=%d\n", ifindex);
    fflush(stdout);

    tc_loss__serve(&t);

    rc = tc_loss__counters(&t, counters);
    tc_loss__detach(&t);
    if (rc) {
        fprintf(stderr, "tc_loss: cannot read the counters: %s\n", strerror(-rc));
        return 1;
    }
    printf("passed=%llu dropped=%llu skipped=%llu gso=%llu\n",
           (unsigned long long)counters[LOSS_C_PASSED], (unsigned long long)counters[LOSS_C_DROPPED],
           (unsigned long long)counters[LOSS_C_SKIPPED], (unsigned long long)counters[LOSS_C_GSO]);
    fflush(stdout);
    return 0;
}
