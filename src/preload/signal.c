/* Which signal interrupted a blocking call. Linux restarts a blocking socket call without a
 * timeout after a handler installed with SA_RESTART, and fails it with EINTR after one without;
 * our sleep (poll) reports EINTR either way. So the handlers the application installs through
 * sigaction()/signal() run behind a trampoline that notes, per thread, whether the handler that
 * just ran asked for SA_RESTART. sigaction() still reports the application's own handler. */
#include <signal.h>
#include <string.h>

#include "preload/preload.h"

#define TLS_IE __attribute__((tls_model("initial-exec")))

struct user_handler {
    void *fn;                   /* the application's handler (sa_handler or sa_sigaction) */
    int flags;                  /* its sa_flags */
};
static struct user_handler g_user[NSIG];
/* 0 nothing ran since preload_signal_reset, 1 only SA_RESTART handlers, 2 one without */
static __thread volatile sig_atomic_t t_seen TLS_IE;

static void trampoline(int sig, siginfo_t *si, void *uc)
{
    void *fn = sig > 0 && sig < NSIG ? g_user[sig].fn : NULL;
    int flags = sig > 0 && sig < NSIG ? g_user[sig].flags : 0;
    t_seen = (flags & SA_RESTART) && t_seen != 2 ? 1 : 2;
    if (!fn)
        return;
    if (flags & SA_SIGINFO)
        ((void (*)(int, siginfo_t *, void *))fn)(sig, si, uc);
    else
        ((void (*)(int))fn)(sig);
}

void preload_signal_reset(void)
{
    t_seen = 0;
}

int preload_signal_restart(void)
{
    return t_seen;
}

static bool is_user_fn(const struct sigaction *a)
{
    if (a->sa_flags & SA_SIGINFO)
        return a->sa_sigaction != NULL;
    return a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN;
}

int pre_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    struct sigaction prev;
    if (sig <= 0 || sig >= NSIG || sig == SIGKILL || sig == SIGSTOP)
        return real_sigaction(sig, act, old);
    struct user_handler saved = g_user[sig];
    int rc;
    if (act && is_user_fn(act)) {
        struct sigaction k = *act;
        k.sa_flags |= SA_SIGINFO;
        k.sa_sigaction = trampoline;
        /* the table first: a signal arriving right after the switch must find the handler */
        g_user[sig].fn = (act->sa_flags & SA_SIGINFO) ? (void *)act->sa_sigaction : (void *)act->sa_handler;
        g_user[sig].flags = act->sa_flags;
        rc = real_sigaction(sig, &k, &prev);
        if (rc < 0)
            g_user[sig] = saved;
    } else {
        rc = real_sigaction(sig, act, &prev);
    }
    if (rc == 0 && old) {
        *old = prev;
        if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction == trampoline) {
            /* report the application's handler as it installed it */
            old->sa_flags = saved.flags;
            if (saved.flags & SA_SIGINFO)
                old->sa_sigaction = (void (*)(int, siginfo_t *, void *))saved.fn;
            else
                old->sa_handler = (void (*)(int))saved.fn;
        }
    }
    return rc;
}

/* glibc's signal() has BSD semantics: SA_RESTART, the signal blocked while its handler runs
 * (no SA_NODEFER), the handler kept after delivery (no SA_RESETHAND). glibc implements it on its
 * internal sigaction, which would bypass ours. */
sighandler_t pre_signal(int sig, sighandler_t h)
{
    struct sigaction a, o;
    memset(&a, 0, sizeof(a));
    a.sa_handler = h;
    a.sa_flags = SA_RESTART;
    sigemptyset(&a.sa_mask);
    if (sig > 0 && sig < NSIG)
        sigaddset(&a.sa_mask, sig);
    if (pre_sigaction(sig, &a, &o) < 0)
        return SIG_ERR;
    return (o.sa_flags & SA_SIGINFO) ? (sighandler_t)(void *)o.sa_sigaction : o.sa_handler;
}
