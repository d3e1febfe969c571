/* `slipstream run [--iface IF]... [--profile latency|throughput|safe] [--strict] [--block] -- CMD ARGS`:
 * runs CMD with libslipstream.so preloaded and the stack configured through SLIP_* variables.
 * Every SLIP_* value is checked first (base/env.h): a bad one stops it with exit 2. Also
 * `slipstream config --doc` (every variable, its default and what it accepts) and `--markdown`
 * (docs/CONFIG.md's tables), both from the parser's own table (base/env_vars.h). */
#include <elf.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/exe.h"
#include "base/env.h"
#include "stack/stack.h"
#include "tools/slipstream/cli.h"

static const char *const section_title[] = {
    [SLIP_ENV_STACK] = "The stack",
    [SLIP_ENV_POSIX] = "The POSIX layer (slipstream run, libslipstream.so)",
    [SLIP_ENV_INTERNAL] = "Set by the library itself, not by users",
    [SLIP_ENV_FAULT] = "Test-only fault injection",
};

static void default_text(const struct slip_env_var *v, char *buf, size_t len)
{
    if (v->def && v->kind == SLIP_ENV_DURATION)
        snprintf(buf, len, "%s %s", v->def, v->unit);
    else
        snprintf(buf, len, "%s", v->def ? v->def : v->def_doc ? v->def_doc : "unset");
}

/* docs/CONFIG.md's tables, generated from the same table the parser uses. */
static void print_markdown(void)
{
    for (unsigned sec = SLIP_ENV_STACK; sec <= SLIP_ENV_FAULT; sec++) {
        printf("%s### %s\n\n| variable | default | accepted | meaning |\n|---|---|---|---|\n",
               sec == SLIP_ENV_STACK ? "" : "\n", section_title[sec]);
        for (unsigned i = 0; i < SLIP_ENV_COUNT; i++) {
            const struct slip_env_var *v = &slip_env_vars[i];
            char def[128], acc[160];
            if (v->section != sec)
                continue;
            default_text(v, def, sizeof(def));
            slip_env__accepted((enum slip_env_id)i, acc, sizeof(acc));
            printf("| `%s` | %s | %s | %s |\n", v->name, def, acc, v->doc);
        }
    }
}

int cmd_config(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--markdown")) {
        print_markdown();
        return 0;
    }
    if (argc != 2 || strcmp(argv[1], "--doc") != 0) {
        fprintf(stderr, "usage: slipstream config --doc | --markdown\n");
        return 2;
    }
    printf("%-24s %-8s %s\n", "variable", "default", "meaning; accepted values");
    for (unsigned i = 0; i < SLIP_ENV_COUNT; i++) {
        const struct slip_env_var *v = &slip_env_vars[i];
        char def[128], acc[160];
        default_text(v, def, sizeof(def));
        slip_env__accepted((enum slip_env_id)i, acc, sizeof(acc));
        if (strchr(def, ' ') && v->kind != SLIP_ENV_DURATION)
            printf("%-24s %-8s %s (default: %s); %s\n", v->name, "-", v->doc, def, acc);
        else
            printf("%-24s %-8s %s; %s\n", v->name, def, v->doc, acc);
    }
    return 0;
}

static void run_bad(const char *line, void *arg)
{
    (void)arg;
    fprintf(stderr, "slipstream run: %s\n", line);
}

/* Finds CMD on PATH as execvp would; 0 and the path, or -errno. */
static int which(const char *cmd, char *out, size_t len)
{
    if (strchr(cmd, '/')) {
        snprintf(out, len, "%s", cmd);
        return access(out, X_OK) == 0 ? 0 : -errno;
    }
    const char *path = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", path ? path : "/usr/local/bin:/usr/bin:/bin");
    for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, len, "%s/%s", d, cmd);
        if (access(out, X_OK) == 0)
            return 0;
    }
    return -ENOENT;
}

static int find_library(char *out, size_t len)
{
    const char *env = slip_env__text(SLIP_ENV_PRELOAD_LIB);
    if (env) {
        snprintf(out, len, "%s", env);
        return access(out, R_OK) == 0 ? 0 : -errno;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return -errno;
    exe[n] = 0;
    static const char *const rel[] = { "src/preload/libslipstream.so", "../lib/slipstream/libslipstream.so" };
    return slip_exe__beside(exe, rel, sizeof(rel) / sizeof(rel[0]), R_OK, out, len);
}

/* After an error: the usage line only (one line naming the error, then this). --help: the
 * options explained too. */
static void usage(FILE *f)
{
    fprintf(f, "usage: slipstream run [--iface IF]... [--profile latency|throughput|safe] [--strict] [--block] [--name NAME] -- CMD [ARGS...]\n");
    if (f == stdout) {
        fprintf(f, "  --block      also the block path: O_DIRECT file and block-device I/O through io_uring (SLIP_BLOCK=1)\n");
        fprintf(f, "  --name NAME  share one stack with the programs started with the same name (SLIP_STACK_NAME);\n"
                   "               without it the program (all its processes) gets a stack of its own, named run-PID\n");
    }
}

int cmd_run(int argc, char **argv)
{
    char ifaces[256] = "";
    const char *profile = NULL, *name = NULL;
    bool strict = false, block = false;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "--iface") && i + 1 < argc) {
            size_t l = strlen(ifaces);
            snprintf(ifaces + l, sizeof(ifaces) - l, "%s%s", l ? "," : "", argv[++i]);
        } else if (!strcmp(a, "--profile") && i + 1 < argc) {
            profile = argv[++i];
            if (strcmp(profile, "latency") && strcmp(profile, "throughput") && strcmp(profile, "safe")) {
                fprintf(stderr, "slipstream run: --profile %s: want latency, throughput or safe\n", profile);
                return 2;
            }
        } else if (!strcmp(a, "--strict")) {
            strict = true;
        } else if (!strcmp(a, "--block")) {
            block = true;
        } else if (!strcmp(a, "--name") && i + 1 < argc) {
            name = argv[++i];
            if (!slip_config__stack_name_ok(name)) {
                fprintf(stderr, "slipstream run: --name %s: want 1 to 31 characters of A-Z a-z 0-9 . _ -\n", name);
                return 2;
            }
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (a[0] == '-') {
            fprintf(stderr, "slipstream run: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else {
            break;     /* the command, without "--" */
        }
    }
    if (i >= argc) {
        fprintf(stderr, "slipstream run: no command given\n");
        usage(stderr);
        return 2;
    }
    char path[PATH_MAX], lib[PATH_MAX];
    if (which(argv[i], path, sizeof(path)) < 0) {
        fprintf(stderr, "slipstream run: '%s': command not found\n", argv[i]);
        return 127;
    }
    if (find_library(lib, sizeof(lib)) < 0) {
        fprintf(stderr, "slipstream run: libslipstream.so not found next to the slipstream binary (set SLIP_PRELOAD_LIB)\n");
        return 1;
    }
    if (slip_exe__is_static(path) == 1) {
        if (strict) {
            fprintf(stderr, "slipstream run: %s is statically linked: it cannot be accelerated (strict mode)\n", path);
            return 1;
        }
        fprintf(stderr, "slipstream: warning: %s is statically linked: not accelerated, running it on the kernel\n", path);
        execv(path, argv + i);
        fprintf(stderr, "slipstream run: cannot run %s: %s\n", path, strerror(errno));
        return 126;
    }
    if (slip_exe__is_go(path) == 1) {
        if (strict) {
            fprintf(stderr, "slipstream run: %s is a Go program (its runtime makes system calls without libc): "
                            "it cannot be accelerated (strict mode)\n", path);
            return 1;
        }
        fprintf(stderr, "slipstream: warning: %s is a Go program (system calls without libc): not accelerated, "
                        "running it on the kernel\n", path);
        execv(path, argv + i);
        fprintf(stderr, "slipstream run: cannot run %s: %s\n", path, strerror(errno));
        return 126;
    }
    /* Servers with many connections need many fds: the soft limit goes up to the hard one,
     * as servers (nginx worker_rlimit_nofile, Go, Java) do for themselves (SLIP_RAISE_NOFILE=0
     * keeps it, e.g. for a program that still uses select()). */
    uint64_t raise_nofile = 1;
    char rerr[160];
    slip_env__get(SLIP_ENV_RAISE_NOFILE, &raise_nofile, rerr, sizeof(rerr));  /* checked above with the rest */
    struct rlimit rl;
    if (raise_nofile && getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    const char *old = getenv("LD_PRELOAD");
    char pre[2 * PATH_MAX];
    snprintf(pre, sizeof(pre), "%s%s%s", lib, old && *old ? ":" : "", old && *old ? old : "");
    setenv("LD_PRELOAD", pre, 1);
    /* The library starts the stack's guardian with this very binary (`slipstream guard`). */
    char self[PATH_MAX];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (sl > 0 && !slip_env__text(SLIP_ENV_GUARD)) {
        self[sl] = 0;
        setenv("SLIP_GUARD", self, 1);
    }
    if (*ifaces)
        setenv("SLIP_IFACES", ifaces, 1);
    if (strict)
        setenv("SLIP_STRICT", "1", 1);
    if (block)
        setenv("SLIP_BLOCK", "1", 1);
    /* One stack per program: its processes find it by a name of its own even when they fork
     * before the first of them opens it (a prefork server), unless the user named it. */
    char own[32];
    if (!name && !slip_env__text(SLIP_ENV_STACK_NAME)) {
        snprintf(own, sizeof(own), "run-%d", (int)getpid());
        name = own;
    }
    if (name)
        setenv("SLIP_STACK_NAME", name, 1);
    if (profile && !strcmp(profile, "latency") && !slip_env__text(SLIP_ENV_SPIN_USEC))
        setenv("SLIP_SPIN_USEC", "100000", 1);
    if (profile && !strcmp(profile, "safe") && !slip_env__text(SLIP_ENV_SPIN_USEC))
        setenv("SLIP_SPIN_USEC", "0", 1);
    /* Every SLIP_* value, the ones set above included, is checked before the program starts:
     * a bad one stops here with one line each, never silently in the program. */
    if (slip_env__check_all(run_bad, NULL))
        return 2;
    execv(path, argv + i);
    fprintf(stderr, "slipstream run: cannot run %s: %s\n", path, strerror(errno));
    return 126;
}
