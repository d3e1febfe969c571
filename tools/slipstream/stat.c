/* `slipstream stat [--iface IF]... [--conns]`: the counters, the processes (and with --conns the
 * TCP connections) of the stack that programs run with `slipstream run` share on these
 * interfaces, read live. It joins the stack the way a second program does (src/stack/share.c), prints, and
 * leaves; run it in the network namespace of the programs. */
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "stack/share.h"
#include "stack/stack.h"
#include "tools/slipstream/cli.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: slipstream stat [--iface IF]... [--conns]\n"
               "  --iface IF  the interfaces the programs were started with (default: every interface that is\n"
               "              up with an IPv4 address, as `slipstream run` chooses)\n"
               "  --conns     also list the TCP connections\n");
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
    char name[108], err[256] = "";
    slip_share__name(name, sizeof(name), ifs, n);
    struct slip_stack *s = NULL;
    int rc = slip_share__join(&s, name, err, sizeof(err));
    if (rc == -ENOENT) {
        fprintf(stderr, "slipstream stat: no running stack on %s%s in this network namespace\n", ifs[0],
                n > 1 ? " (and the others given)" : "");
        return 1;
    }
    if (rc < 0) {
        fprintf(stderr, "slipstream stat: cannot join the stack: %s\n", err[0] ? err : strerror(-rc));
        return 1;
    }
    /* Give back the process slot it was handed first: procs.live then counts the programs. */
    slip_stack__exit(s, 0, NULL);
    slip_stack__dump(s, stdout);
    slip_stack__dump_procs(s, stdout);
    if (conns)
        slip_tcp__dump(s, stdout);
    return 0;
}
