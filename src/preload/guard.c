/* Starts the stack's guardian (src/stack/guard.h) when this process opens a stack: `slipstream
 * guard`, found through SLIP_GUARD (`slipstream run` sets it to its own binary) or next to this
 * library. posix_spawn, not fork: the application may have threads, and only exec is safe after
 * fork there. The child gets /dev/null as stdin/stdout/stderr, the socket the stack arrives on as
 * fd 3 and no other fd, a session of its own (the application's process-group signals miss it)
 * and default signal handling; it forks again and its first process exits at once, so the
 * guardian is nobody's child here and never a zombie in the application's wait(). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/env.h"
#include "base/exe.h"
#include "base/log.h"
#include "preload/preload.h"
#include "stack/guard.h"

/* The slipstream binary: SLIP_GUARD, else where it sits relative to this library (build tree:
 * build/src/preload/libslipstream.so and build/slipstream; installed: lib/slipstream/ and bin/). */
static int guard_exe(char *out, size_t len)
{
    const char *env = slip_env__text(SLIP_ENV_GUARD);
    if (env && *env) {
        snprintf(out, len, "%s", env);
        return access(out, X_OK) == 0 ? 0 : -errno;
    }
    Dl_info info;
    if (!dladdr((void *)guard_exe, &info) || !info.dli_fname)
        return -ENOENT;
    static const char *const rel[] = { "../../slipstream", "../../bin/slipstream" };
    return slip_exe__beside(info.dli_fname, rel, SLIP_ARRAY_SIZE(rel), X_OK, out, len);
}

void preload_guard_start(struct slip_stack *s, const char *share)
{
    const char *env = slip_env__text(SLIP_ENV_GUARD);
    if (env && !strcmp(env, "0"))
        return;
    char exe[PATH_MAX];
    if (guard_exe(exe, sizeof(exe)) < 0) {
        slip_warn("no guardian for the stack (slipstream binary not found: set SLIP_GUARD): if every process "
                  "of it is killed, its peers are not told");
        return;
    }
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
        return;
    /* fd 3 in the child: keep our end off 0..3 so the file actions below never collide */
    if (sp[1] <= 3) {
        int hi = real_fcntl(sp[1], F_DUPFD_CLOEXEC, 10);
        close(sp[1]);
        sp[1] = hi;
    }
    int rc = sp[1] < 0 ? -EMFILE : slip_guard__handoff(s, sp[0]);
    close(sp[0]);
    if (rc < 0) {
        if (sp[1] >= 0)
            close(sp[1]);
        slip_warn("no guardian for the stack: cannot hand it over: %s", strerror(-rc));
        return;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDWR, 0);
    posix_spawn_file_actions_adddup2(&fa, 0, 1);
    posix_spawn_file_actions_adddup2(&fa, 0, 2);
    posix_spawn_file_actions_adddup2(&fa, sp[1], 3);
    posix_spawn_file_actions_addclosefrom_np(&fa, 4);
    posix_spawnattr_init(&at);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    /* Not the application's environment: no LD_PRELOAD of ourselves, only what the guardian reads. */
    char linger[64] = "SLIP_EXIT_LINGER_MS=2000", log[64] = "SLIP_LOG=warn";
    const char *l = slip_env__text(SLIP_ENV_EXIT_LINGER_MS), *g = slip_env__text(SLIP_ENV_LOG);
    if (l && *l)
        snprintf(linger, sizeof(linger), "SLIP_EXIT_LINGER_MS=%s", l);
    if (g && *g)
        snprintf(log, sizeof(log), "SLIP_LOG=%s", g);
    char pid[32];
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    char name[128];
    snprintf(name, sizeof(name), "%s", share ? share : "");
    char *argv[] = { exe, "guard", pid, name, NULL };
    char *envp[] = { linger, log, NULL };
    pid_t child;
    rc = real_posix_spawn(&child, exe, &fa, &at, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(sp[1]);
    if (rc != 0) {
        slip_warn("no guardian for the stack: cannot start %s: %s", exe, strerror(rc));
        return;
    }
    /* Its first process exits as soon as it forked the guardian. */
    while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
        ;
}
