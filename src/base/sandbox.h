/* Whether the calling thread may make only the system calls a sandbox allows. A program that
 * installed a seccomp filter (OpenSSH's pre-authentication child, browsers' renderers, services
 * with a systemd SystemCallFilter) is killed by the kernel for a call outside its list, so the
 * stack keeps going there with the few calls every such list has: poll, read, write, futex,
 * clock_gettime, nanosleep. The preload sets the state (preload/sandbox.c); the AF_XDP port and
 * the preload's waits read it. */
#ifndef SLIP_BASE_SANDBOX_H
#define SLIP_BASE_SANDBOX_H

#include <stdbool.h>

enum slip_sandbox_level {
    SLIP_SANDBOX_NONE = 0,
    SLIP_SANDBOX_THREADS,       /* some threads are filtered (seccomp without TSYNC) */
    SLIP_SANDBOX_PROCESS,       /* every thread is (TSYNC, or a filter inherited across exec) */
};

/* Set once, never lowered: a filter cannot be removed. */
void slip_sandbox__enter(enum slip_sandbox_level level);
enum slip_sandbox_level slip_sandbox__level(void);

/* The library's own helper thread, started before any filter: a filter installed later by
 * another thread without TSYNC does not apply to it. Called by that thread when it starts. */
void slip_sandbox__thread_started(void);

/* True when the calling thread must stay within the calls above. Without TSYNC only the
 * installing thread (and threads it makes later) is filtered, but which ones are cannot be read
 * without a system call: every application thread counts as filtered, only the helper thread
 * started before the filter does not. */
bool slip_sandbox__limited(void);

#endif
