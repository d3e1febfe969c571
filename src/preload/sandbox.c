/* Programs that sandbox themselves with seccomp (OpenSSH's pre-authentication child, and any
 * program or service manager that installs a filter): prctl(PR_SET_SECCOMP) and
 * syscall(SYS_seccomp) are watched, and a filter inherited across exec is read from
 * /proc/self/status when the library loads. From then on the stack uses only calls such filters
 * allow (base/sandbox.h): poll on the AF_XDP socket kicks TX and RX, waits poll at most one fd
 * in short slices (OpenSSH also sets RLIMIT_NOFILE to 1, and poll refuses more fds than that),
 * no futex_waitv. The library's helper thread, when it started before the filter and the filter
 * did not ask for TSYNC, is not filtered and keeps its usual calls. */

#include <errno.h>
#include <linux/seccomp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <dlfcn.h>

#include "base/sandbox.h"
#include "preload/preload.h"

#define EXPORT __attribute__((visibility("default")))

/* How long a wait in a sandbox sleeps between two looks at the stack: it cannot sleep on the
 * stack's wake fds (more fds than the sandbox may allow), so it looks again this often. */
#define SANDBOX_SLICE_MS 1

void preload_sandbox_entered(unsigned long mode, unsigned long flags)
{
    if (mode != SECCOMP_MODE_STRICT && mode != SECCOMP_MODE_FILTER)
        return;
    /* SECCOMP_MODE_STRICT allows read, write, exit and sigreturn only: not even poll. The stack
     * then cannot work in that thread at all; the helper thread (unfiltered) still kicks. */
    slip_sandbox__enter((flags & SECCOMP_FILTER_FLAG_TSYNC) ? SLIP_SANDBOX_PROCESS : SLIP_SANDBOX_THREADS);
}

/* A filter installed before exec stays on every thread of the new image. The dynamic loader
 * opened our library and libc, so open and read are allowed here. */
void preload_sandbox_inherited(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    char line[128];
    if (!f)
        return;
    while (fgets(line, sizeof(line), f)) {
        unsigned mode;
        if (sscanf(line, "Seccomp: %u", &mode) == 1) {
            if (mode == SECCOMP_MODE_STRICT || mode == SECCOMP_MODE_FILTER)
                slip_sandbox__enter(SLIP_SANDBOX_PROCESS);
            break;
        }
    }
    fclose(f);
}

int preload_sandbox_sleep_ms(int t)
{
    if (!slip_sandbox__limited())
        return t;
    return t < 0 || t > SANDBOX_SLICE_MS ? SANDBOX_SLICE_MS : t;
}

EXPORT int prctl(int option, ...)
{
    static int (*real)(int, ...);
    va_list ap;
    va_start(ap, option);
    unsigned long a2 = va_arg(ap, unsigned long), a3 = va_arg(ap, unsigned long);
    unsigned long a4 = va_arg(ap, unsigned long), a5 = va_arg(ap, unsigned long);
    va_end(ap);
    if (!real)
        real = (int (*)(int, ...))dlsym(RTLD_NEXT, "prctl");
    /* Marked before the call: from the moment the filter is in place, a kick by this thread
     * must already be a poll. A filter that fails to install costs only slower kicks. */
    if (option == PR_SET_SECCOMP)
        preload_sandbox_entered(a2, 0);
    return real(option, a2, a3, a4, a5);
}
