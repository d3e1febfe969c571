/* `slipstream`: one binary, one subcommand per task. Unknown commands and options name themselves. */
#include <stdio.h>
#include <string.h>

#include "tools/slipstream/cli.h"

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
};

static const struct command commands[] = {
    { "run",    cmd_run,    "run a program on the stack: run [--iface IF]... [--profile P] [--strict] -- CMD" },
    { "config", cmd_config, "config --doc | --markdown: every SLIP_* variable, its default and what it accepts" },
    { "doctor", cmd_doctor, "check privileges, kernel features and an interface; say what to fix" },
    { "stat",   cmd_stat,   "counters (and --conns: TCP connections) of the running stack: stat [--iface IF]..." },
    { "guard",  cmd_guard,  "the guardian of a stack (started by libslipstream.so, not by hand)" },
    { "bench",  cmd_bench,  "raw AF_XDP benchmarks: bench xsk --iface IF --mode rxdrop|txonly|l2fwd" },
};

static void usage(FILE *f)
{
    fprintf(f, "usage: slipstream <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'slipstream <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "slipstream: unknown command '%s' (try 'slipstream --help')\n", argv[1]);
    return 2;
}
