/* `slipstream guard`: the guardian of one stack (src/stack/guard.h), started by libslipstream.so
 * when a program opens a stack, never by hand. The stack arrives on fd 3. The first process forks
 * the guardian and exits at once: the program that started it reaps it, and the guardian is
 * nobody's child there (no zombie in the application's wait()). */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "base/env.h"
#include "stack/guard.h"
#include "stack/stack.h"
#include "tools/slipstream/cli.h"

#define GUARD_FD 3

int cmd_guard(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: slipstream guard PID [SHARING_NAME] (started by libslipstream.so with a stack on fd %d)\n",
               GUARD_FD);
        return 0;
    }
    if (fcntl(GUARD_FD, F_GETFD) < 0) {
        fprintf(stderr, "slipstream guard: no stack on fd %d: this is started by libslipstream.so\n", GUARD_FD);
        return 2;
    }
    pid_t p = fork();
    if (p < 0)
        return 1;
    if (p > 0)
        _exit(0);
    prctl(PR_SET_NAME, "slip-guard", 0, 0, 0);
    if (chdir("/") < 0) {
        /* only keeps the application's directory busy */
    }
    /* It ends by itself once the stack's processes are gone (at most SLIP_EXIT_LINGER_MS later):
     * a service manager stopping everything with SIGTERM, then SIGKILL for what remains, must
     * not take away the one process that would tell the peers of a server killed that way. */
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    struct slip_stack *s = NULL;
    char err[256] = "";
    int rc = slip_guard__adopt(&s, GUARD_FD, err, sizeof(err));
    close(GUARD_FD);
    if (rc < 0) {
        fprintf(stderr, "slipstream guard: %s\n", err);
        return 1;
    }
    uint64_t linger = 2000;
    slip_env__use_defaults();           /* a bad value: the warning goes to /dev/null, the default is used */
    slip_env__get(SLIP_ENV_EXIT_LINGER_MS, &linger, err, sizeof(err));
    /* argv: guard OPENER_PID [SHARING_NAME] */
    slip_guard__run(s, (int)linger, argc > 2 ? argv[2] : NULL);
    slip_stack__close(s);               /* gives the stack's frames back to its group */
    return 0;
}
