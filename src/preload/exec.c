/* exec: the new image takes over the stack and the accelerated sockets it inherits. Before the
 * exec, the stack's fds (shared memory, XDP link and maps, AF_XDP sockets) are made to survive it
 * and described in SLIP_ATTACH, and every accelerated fd that survives is described in SLIP_FDS
 * (fd:kind:socket:nonblock:listening:v6). The library's constructor in the new image reads both
 * (preload_attach_inherited). Fds that exec closes (close-on-exec) give up their reference as a
 * close would. A failed exec undoes that. The same hand-over serves posix_spawn (spawn.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/exe.h"
#include "base/log.h"
#include "base/env.h"
#include "preload/preload.h"
#include "stack/kfd.h"
#include "stack/stack.h"

extern char **environ;

/* Builds x for a new image: every accelerated fd that survives into it (not close-on-exec) goes
 * into SLIP_FDS, the stack's fds are made to survive (slip_stack__export_for) and SLIP_ATTACH
 * describes them and the image's process slot; the copy of envp carries both. References: an
 * exec'd image replaces this process and keeps its slot, so close-on-exec fds give up theirs
 * (spawn == false); a spawned child is one more holder of every fd it inherits, so those gain
 * one in the child's slot (spawn == true, slot reserved by the caller, or -1 when none could
 * be). x->envp stays NULL when there is no stack (nothing to pass). */
int exec_handoff__prep(struct exec_handoff *x, char *const envp[], bool spawn, int slot)
{
    memset(x, 0, sizeof(*x));
    struct slip_stack *s = g_pre.stack;
    if (!s)
        return 0;
    x->delta = spawn ? 1 : -1;
    x->slot = spawn ? slot : slip_proc__slot(s);
    size_t cap = 4096, len = 0;
    x->fds = malloc(cap);
    x->touched = malloc(sizeof(*x->touched) * (size_t)g_pre.nfds);
    if (!x->fds || !x->touched)
        return -ENOMEM;
    x->fds[0] = 0;
    for (int fd = 0; fd < g_pre.nfds; fd++) {
        struct pfd *p = &g_pre.fds[fd];
        if (p->kind != PFD_TCP && p->kind != PFD_UDP)
            continue;
        int f = real_fcntl(fd, F_GETFD);
        if (f < 0)
            continue;
        bool survives = !(f & FD_CLOEXEC);
        if (p->st) {
            /* Only the process stack is handed over (a thread's stack, or one joined for a socket
             * passed to us, is not): an exec gives up this process's reference as a close would;
             * a spawned child gets none, and either way a surviving fd is only its kernel socket
             * there (said once). */
            if (!spawn) {
                slip_sock__ref(pfd_stack(p), p->kind == PFD_TCP, p->sock, -1);
                x->touched[x->ntouched++] = (struct exec_ref){ p->kind == PFD_TCP, p->st, p->sock };
            }
            static int warned;
            if (survives && !warned++)
                slip_warn("a socket of another stack than the process's (a thread's, or a passed socket's) is "
                          "inherited by a new image: it is not accelerated there");
            continue;
        }
        if (survives == spawn) {
            slip_sock__ref_in(s, x->slot, p->kind == PFD_TCP, p->sock, x->delta);
            x->touched[x->ntouched++] = (struct exec_ref){ p->kind == PFD_TCP, 0, p->sock };
        }
        if (!survives)
            continue;
        if (len + 64 > cap) {
            char *n = realloc(x->fds, cap *= 2);
            if (!n)
                return -ENOMEM;
            x->fds = n;
        }
        len += (size_t)snprintf(x->fds + len, cap - len, "%s%d:%d:%d:%d:%d:%d", len ? ";" : "", fd, p->kind, p->sock,
                                p->nonblock, p->listening, p->v6);
    }
    if (slip_stack__export_for(s, x->slot, x->attach, sizeof(x->attach)) < 0)
        return -ENOSPC;
    size_t n = 0;
    for (char *const *e = envp; e && *e; e++)
        n++;
    char **nenv = calloc(n + 4, sizeof(char *));
    if (!nenv)
        return -ENOMEM;
    size_t k = 0;
    for (char *const *e = envp; e && *e; e++)
        if (strncmp(*e, "SLIP_ATTACH=", 12) && strncmp(*e, "SLIP_FDS=", 9) && strncmp(*e, "SLIP_KFDS=", 10))
            nenv[k++] = *e;
    snprintf(x->attach_var, sizeof(x->attach_var), "SLIP_ATTACH=%s", x->attach);
    nenv[k++] = x->attach_var;
    char *f_var = malloc(len + 16);
    if (!f_var) {
        free(nenv);
        return -ENOMEM;
    }
    snprintf(f_var, len + 16, "SLIP_FDS=%s", x->fds);
    free(x->fds);
    x->fds = f_var;             /* freed by exec_handoff__done */
    nenv[k++] = f_var;
    char *kl = slip_kfd__export();
    if (kl && (x->kfds = malloc(strlen(kl) + 16))) {
        sprintf(x->kfds, "SLIP_KFDS=%s", kl);
        nenv[k++] = x->kfds;
    }
    free(kl);
    nenv[k] = NULL;
    x->envp = nenv;
    return 0;
}

void exec_handoff__done(struct exec_handoff *x)
{
    free(x->envp);
    free(x->fds);
    free(x->kfds);
    free(x->touched);
    memset(x, 0, sizeof(*x));
}

void exec_handoff__undo(struct exec_handoff *x)
{
    for (int i = 0; i < x->ntouched; i++) {
        struct exec_ref *r = &x->touched[i];
        if (r->st)
            slip_sock__ref(preload_stack_at(r->st), r->tcp, r->sock, 1);
        else
            slip_sock__ref_in(g_pre.stack, x->slot, r->tcp, r->sock, -x->delta);
    }
    exec_handoff__done(x);
}

/* A static image never loads the library: the accelerated sockets it inherits would be their
 * kernel twins, which carry none of the data (an accepted connection's twin is not even
 * connected). Nothing can move a connected socket to the kernel, so say it, once per exec. */
static void warn_if_static(const char *path, const struct exec_handoff *x)
{
    if (path && strchr(path, '/') && x->fds && x->fds[strlen("SLIP_FDS=")] &&
        slip_exe__is_static(path) == 1)
        fprintf(stderr, "slipstream: warning: %s is statically linked: the accelerated sockets it "
                "inherits will not carry data in it (see docs/COMPLIANCE.md)\n", path);
}

int pre_execve(const char *path, char *const argv[], char *const envp[])
{
    struct exec_handoff x;
    if (exec_handoff__prep(&x, envp, false, -1) < 0 || !x.envp) {
        exec_handoff__undo(&x);
        return real_execve(path, argv, envp);
    }
    warn_if_static(path, &x);
    preload_quiesce();          /* exec ends the progress thread wherever it is */
    int r = real_execve(path, argv, x.envp);
    preload_unquiesce();
    int e = errno;
    exec_handoff__undo(&x);
    errno = e;
    return r;
}

int pre_execv(const char *path, char *const argv[])
{
    return pre_execve(path, argv, environ);
}

int pre_execvpe(const char *file, char *const argv[], char *const envp[])
{
    struct exec_handoff x;
    if (exec_handoff__prep(&x, envp, false, -1) < 0 || !x.envp) {
        exec_handoff__undo(&x);
        return real_execvpe(file, argv, envp);
    }
    warn_if_static(file, &x);
    preload_quiesce();
    int r = real_execvpe(file, argv, x.envp);
    preload_unquiesce();
    int e = errno;
    exec_handoff__undo(&x);
    errno = e;
    return r;
}

int pre_execvp(const char *file, char *const argv[])
{
    return pre_execvpe(file, argv, environ);
}

/* The execl family, variadic, gathered into argv. */
static char **gather(const char *arg0, va_list ap, char ***envp_out)
{
    size_t n = 1, cap = 16;
    char **argv = malloc(cap * sizeof(char *));
    if (!argv)
        return NULL;
    argv[0] = (char *)arg0;
    for (char *a; arg0 && (a = va_arg(ap, char *));) {
        if (n + 2 > cap) {
            char **nv = realloc(argv, (cap *= 2) * sizeof(char *));
            if (!nv) {
                free(argv);
                return NULL;
            }
            argv = nv;
        }
        argv[n++] = a;
    }
    argv[n] = NULL;
    if (envp_out)
        *envp_out = va_arg(ap, char **);
    return argv;
}

__attribute__((visibility("default"))) int execl(const char *path, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    char **argv = gather(arg, ap, NULL);
    va_end(ap);
    if (!argv)
        return set_errno(-ENOMEM);
    int r = execv(path, argv);
    free(argv);
    return r;
}

__attribute__((visibility("default"))) int execlp(const char *file, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    char **argv = gather(arg, ap, NULL);
    va_end(ap);
    if (!argv)
        return set_errno(-ENOMEM);
    int r = execvp(file, argv);
    free(argv);
    return r;
}

__attribute__((visibility("default"))) int execle(const char *path, const char *arg, ...)
{
    va_list ap;
    char **envp = NULL;
    va_start(ap, arg);
    char **argv = gather(arg, ap, &envp);
    va_end(ap);
    if (!argv)
        return set_errno(-ENOMEM);
    int r = execve(path, argv, envp);
    free(argv);
    return r;
}

void preload_attach_inherited(void)
{
    const char *spec = slip_env__text(SLIP_ENV_ATTACH);
    if (!spec)
        return;
    slip_kfd__import(slip_env__text(SLIP_ENV_KFDS));
    unsetenv("SLIP_KFDS");
    char err[256] = "";
    struct slip_stack *s = NULL;
    int rc = slip_stack__attach(&s, spec, err, sizeof(err));
    g_pre.tried = true;
    if (rc < 0) {
        fprintf(stderr, "slipstream: warning: cannot take over the inherited stack: %s\n", err);
        unsetenv("SLIP_ATTACH");
        unsetenv("SLIP_FDS");
        return;
    }
    g_pre.stack = s;
    const char *fds = slip_env__text(SLIP_ENV_FDS);
    char *copy = fds ? strdup(fds) : NULL;
    for (char *save = NULL, *t = copy ? strtok_r(copy, ";", &save) : NULL; t; t = strtok_r(NULL, ";", &save)) {
        int fd, kind, sock, nb, lis, v6 = 0;
        if (sscanf(t, "%d:%d:%d:%d:%d:%d", &fd, &kind, &sock, &nb, &lis, &v6) < 5 || sock < 0 ||
            (kind != PFD_TCP && kind != PFD_UDP))
            continue;
        struct pfd *p = pfd_new(fd);
        if (!p)
            continue;
        p->kind = (uint8_t)kind;
        p->sock = sock;
        p->nonblock = (uint8_t)nb;
        p->listening = (uint8_t)lis;
        p->v6 = v6 == 1;
    }
    free(copy);
    unsetenv("SLIP_ATTACH");
    unsetenv("SLIP_FDS");
}
