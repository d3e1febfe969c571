/* `slipstream stat [--iface IF]... [--conns]` (or `--block`: the block engine's counters): the
 * processes, counters (and with --conns the TCP connections) of every stack that programs run
 * with `slipstream run` have on these interfaces, read live. It joins each stack the way a
 * program started with its SLIP_STACK_NAME does (src/stack/share.c), prints, and leaves; run it
 * in the network namespace of the programs. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "block/blk.h"
#include "stack/share.h"
#include "stack/stack.h"
#include "tools/slipstream/cli.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: slipstream stat [--iface IF]... [--conns] | --block\n"
               "  --iface IF  the interfaces the programs were started with (default: every interface that is\n"
               "              up with an IPv4 address, as `slipstream run` chooses)\n"
               "  --conns     also list the TCP connections\n"
               "  --block     the block path's counters of every running process that uses it\n");
}

/* The block engine's counters of every running process that uses it (src/block/blk.h): one
 * small file each in /dev/shm, written by that process only. */
static int stat_block(void)
{
    DIR *d = opendir("/dev/shm");
    int found = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        int pid;
        char tail;
        if (sscanf(e->d_name, "slipstream-blk.%d%c", &pid, &tail) != 1 || pid <= 0)
            continue;
        char p[300];
        snprintf(p, sizeof(p), "/dev/shm/%s", e->d_name);
        int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        struct blk_stats s;
        bool ok = fd >= 0 && read(fd, &s, sizeof(s)) == (ssize_t)sizeof(s);
        if (fd >= 0)
            close(fd);
        /* A process killed before its exit handler (or an image that exec'd into a program
         * without the block path) left its file: it is not running; the file goes. */
        if (kill(pid, 0) < 0 && errno == ESRCH) {
            unlink(p);
            continue;
        }
        if (!ok || s.magic != BLK_STATS_MAGIC || s.pid != pid)
            continue;
        blk__stats_print(&s, stdout);
        found++;
    }
    if (d)
        closedir(d);
    if (!found)
        printf("block: no running process uses the block path\n");
    return 0;
}

int cmd_stat(int argc, char **argv)
{
    static char names[SLIP_MAX_IFACES][IF_NAMESIZE];
    const char *ifs[SLIP_MAX_IFACES];
    unsigned n = 0;
    bool conns = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iface") && i + 1 < argc && n < SLIP_MAX_IFACES) {
            snprintf(names[n], IF_NAMESIZE, "%s", argv[++i]);
            ifs[n] = names[n];
            n++;
        } else if (!strcmp(argv[i], "--conns")) {
            conns = true;
        } else if (!strcmp(argv[i], "--block")) {
            return stat_block();
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "slipstream stat: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (n == 0) {
        n = slip_config__default_ifaces(names, SLIP_MAX_IFACES);
        for (unsigned k = 0; k < n; k++)
            ifs[k] = names[k];
    }
    if (n == 0) {
        fprintf(stderr, "slipstream stat: no interface (give --iface)\n");
        return 2;
    }
    /* Every stack on these interfaces: each holds "<group name>/s<index>" (src/stack/group.c)
     * and serves itself there. */
    char group[108], name[128], err[256] = "";
    slip_share__name(group, sizeof(group), ifs, n);
    int found = 0, failed = 0;
    for (unsigned k = 0; k < 16; k++) {
        snprintf(name, sizeof(name), "%s/s%u", group, k);
        struct slip_stack *s = NULL;
        err[0] = 0;
        int rc = slip_share__join(&s, name, err, sizeof(err));
        /* A stack whose guardian is closing it holds its name until the end and answers no
         * more: it is going, not broken. Asked again a few times over a second, a stack that is
         * gone by then is left out like one that was never there. */
        for (int tries = 0; rc < 0 && rc != -ENOENT && rc != -EACCES && tries < 5; tries++) {
            struct timespec ts = { 0, 200 * 1000 * 1000 };
            nanosleep(&ts, NULL);
            err[0] = 0;
            rc = slip_share__join(&s, name, err, sizeof(err));
        }
        if (rc == -ENOENT)
            continue;
        if (rc < 0) {
            fprintf(stderr, "slipstream stat: cannot join stack %u: %s\n", k, err[0] ? err : strerror(-rc));
            failed++;
            continue;
        }
        /* Give back the process slot it was handed first: procs.live then counts the programs. */
        slip_stack__exit(s, 0, NULL);
        if (found++)
            printf("\n");
        slip_stack__dump_procs(s, stdout);
        slip_stack__dump(s, stdout);
        if (conns)
            slip_tcp__dump(s, stdout);
    }
    if (!found && !failed) {
        fprintf(stderr, "slipstream stat: no running stack on %s%s in this network namespace\n", ifs[0],
                n > 1 ? " (and the others given)" : "");
        return 1;
    }
    if (failed)
        return 1;
    return 0;
}
