/* `slipstream run [--iface IF]... [--profile latency|throughput|safe] [--strict] -- CMD ARGS`:
 * runs CMD with libslipstream.so preloaded and the stack configured through SLIP_* variables.
 * Also `slipstream config --doc`, the list of every variable with its default. */
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

#include "tools/slipstream/cli.h"

static const struct {
    const char *name, *def, *doc;
} options[] = {
    { "SLIP_IFACES", "interfaces that are up with an IPv4 address, never lo", "comma-separated interfaces to accelerate (--iface)" },
    { "SLIP_STRICT", "0", "1: fail instead of falling back to the kernel (--strict)" },
    { "SLIP_SPIN_USEC", "0", "microseconds a blocking call, epoll_wait, poll or select spins before sleeping (latency profile: 100000)" },
    { "SLIP_FRAME_SIZE", "4096", "UMEM frame size, 2048 or 4096" },
    { "SLIP_RING_SIZE", "2048", "size of each AF_XDP ring, power of two 64..16384" },
    { "SLIP_BURST", "64", "frames taken from a ring per poll, 1..256" },
    { "SLIP_BIND", "auto", "AF_XDP bind mode: auto, copy, zerocopy" },
    { "SLIP_XDP_MODE", "auto", "XDP attach mode: auto (native, else generic), native, generic" },
    { "SLIP_BUSY_POLL", "0", "SO_BUSY_POLL microseconds on the AF_XDP sockets (0: off)" },
    { "SLIP_BUSY_POLL_BUDGET", "64", "SO_BUSY_POLL_BUDGET" },
    { "SLIP_MAX_CONNS", "131072", "TCP connections (listeners included) the stack holds, 16..16777216; memory grows with use" },
    { "SLIP_MAX_UDP", "8192", "UDP sockets the stack holds, 16..4194304" },
    { "SLIP_RAISE_NOFILE", "1", "0: slipstream run leaves the soft RLIMIT_NOFILE as it is (1: raised to the hard limit)" },
    { "SLIP_LOG", "warn", "error, warn, info, debug" },
    { "SLIP_SHARE", "1", "0: do not join (or serve) the stack another program opened on the same interfaces" },
    { "SLIP_EXIT_LINGER_MS", "2000", "how long the last process of a stack keeps delivering written data at exit" },
    { "SLIP_FAULT_DROP", "0", "test only: drop received frames, parts per million" },
    { "SLIP_FAULT_DUP", "0", "test only: duplicate received frames, ppm" },
    { "SLIP_FAULT_REORDER", "0", "test only: reorder received frames, ppm" },
    { "SLIP_FAULT_SEED", "1", "test only: seed of the fault injector" },
};

int cmd_config(int argc, char **argv)
{
    if (argc != 2 || strcmp(argv[1], "--doc") != 0) {
        fprintf(stderr, "usage: slipstream config --doc\n");
        return 2;
    }
    printf("%-22s %-8s %s\n", "variable", "default", "meaning");
    for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++) {
        if (strchr(options[i].def, ' '))
            printf("%-22s %-8s %s (default: %s)\n", options[i].name, "-", options[i].doc, options[i].def);
        else
            printf("%-22s %-8s %s\n", options[i].name, options[i].def, options[i].doc);
    }
    return 0;
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

/* 1 when the ELF file has no program interpreter (statically linked), 0 when it has one, -1 when
 * it is not an ELF file we can read (a script: its interpreter gets the preload). */
static int is_static_elf(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    Elf64_Ehdr eh;
    if (fd < 0)
        return -1;
    int rc = -1;
    if (read(fd, &eh, sizeof(eh)) == sizeof(eh) && !memcmp(eh.e_ident, ELFMAG, SELFMAG) &&
        eh.e_ident[EI_CLASS] == ELFCLASS64) {
        rc = 1;
        for (int i = 0; i < eh.e_phnum; i++) {
            Elf64_Phdr ph;
            if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + (uint64_t)i * eh.e_phentsize)) != sizeof(ph))
                break;
            if (ph.p_type == PT_INTERP) {
                rc = 0;
                break;
            }
        }
    }
    close(fd);
    return rc;
}

static int find_library(char *out, size_t len)
{
    const char *env = getenv("SLIP_PRELOAD_LIB");
    if (env && *env) {
        snprintf(out, len, "%s", env);
        return access(out, R_OK) == 0 ? 0 : -errno;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return -errno;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = 0;
    static const char *const rel[] = { "src/preload/libslipstream.so", "../lib/slipstream/libslipstream.so" };
    for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
        int w = snprintf(out, len, "%s/%s", exe, rel[i]);
        if (w > 0 && (size_t)w < len && access(out, R_OK) == 0)
            return 0;
    }
    return -ENOENT;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: slipstream run [--iface IF]... [--profile latency|throughput|safe] [--strict] -- CMD [ARGS...]\n");
}

int cmd_run(int argc, char **argv)
{
    char ifaces[256] = "";
    const char *profile = NULL;
    bool strict = false;
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
    if (is_static_elf(path) == 1) {
        if (strict) {
            fprintf(stderr, "slipstream run: %s is statically linked: it cannot be accelerated (strict mode)\n", path);
            return 1;
        }
        fprintf(stderr, "slipstream: warning: %s is statically linked: not accelerated, running it on the kernel\n", path);
        execv(path, argv + i);
        fprintf(stderr, "slipstream run: cannot run %s: %s\n", path, strerror(errno));
        return 126;
    }
    /* Servers with many connections need many fds: the soft limit goes up to the hard one,
     * as servers (nginx worker_rlimit_nofile, Go, Java) do for themselves (SLIP_RAISE_NOFILE=0
     * keeps it, e.g. for a program that still uses select()). */
    const char *rn = getenv("SLIP_RAISE_NOFILE");
    struct rlimit rl;
    if ((!rn || strcmp(rn, "0") != 0) && getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    const char *old = getenv("LD_PRELOAD");
    char pre[2 * PATH_MAX];
    snprintf(pre, sizeof(pre), "%s%s%s", lib, old && *old ? ":" : "", old && *old ? old : "");
    setenv("LD_PRELOAD", pre, 1);
    if (*ifaces)
        setenv("SLIP_IFACES", ifaces, 1);
    if (strict)
        setenv("SLIP_STRICT", "1", 1);
    if (profile && !strcmp(profile, "latency") && !getenv("SLIP_SPIN_USEC"))
        setenv("SLIP_SPIN_USEC", "100000", 1);
    if (profile && !strcmp(profile, "safe") && !getenv("SLIP_SPIN_USEC"))
        setenv("SLIP_SPIN_USEC", "0", 1);
    execv(path, argv + i);
    fprintf(stderr, "slipstream run: cannot run %s: %s\n", path, strerror(errno));
    return 126;
}
