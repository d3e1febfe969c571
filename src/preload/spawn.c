/* Process creation that glibc does without our exported fork/execve: posix_spawn(p), system(), popen(),
 * daemon(), and vfork (which is our fork). Each new image gets the stack and the accelerated
 * sockets it inherits through the same hand-over as exec (exec_handoff in exec.c), and every
 * process that ends up holding an accelerated fd is counted in the socket's references. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "preload/preload.h"
#include "stack/stack.h"

extern char **environ;

#define SPAWN_STACK_FDS_MAX 256

typedef int (*spawn_fn)(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                        const posix_spawnattr_t *attr, char *const argv[], char *const envp[]);

/* posix_spawn with the hand-over. The child must see the stack's own fds, which are
 * close-on-exec. posix_spawn_file_actions_adddup2(fd, fd) would clear the flag in the child only,
 * but the caller's file-actions object is const and opaque (no portable way to copy it and add
 * to it), so the flag is cleared in the parent for the duration of the call and put back as it
 * was: another thread that execs during that window may carry those fds into its image too
 * (docs/COMPLIANCE.md). Returns an error number, as posix_spawn does. */
static int spawn_common(spawn_fn real, pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                        const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    struct slip_stack *s = g_pre.stack;
    if (!s)
        return real(pid, path, fa, attr, argv, envp);
    int sfd[SPAWN_STACK_FDS_MAX], sflag[SPAWN_STACK_FDS_MAX];
    int ns = slip_stack__export_fds(s, sfd, SPAWN_STACK_FDS_MAX);
    for (int i = 0; i < ns; i++)
        sflag[i] = real_fcntl(sfd[i], F_GETFD);
    /* The child's references go in a process slot of its own, given back if it dies holding
     * them (as for fork); the slot travels in SLIP_ATTACH. */
    int slot = slip_proc__reserve(s, false);
    struct exec_handoff x;
    pid_t child = -1;
    bool handed = false;
    int rc;
    if (exec_handoff__prep(&x, envp, true, slot) < 0 || !x.envp) {
        /* Nothing can be handed over: the child sees plain kernel sockets, as before. */
        exec_handoff__undo(&x);
        rc = real(&child, path, fa, attr, argv, envp);
    } else {
        rc = real(&child, path, fa, attr, argv, x.envp);
        /* glibc reports a failed exec of the child as an error (the child is already reaped):
         * no image took the references. */
        handed = rc == 0;
        if (handed)
            exec_handoff__done(&x);
        else
            exec_handoff__undo(&x);
    }
    if (rc == 0 && pid)
        *pid = child;
    slip_proc__started(s, slot, handed ? child : -1);
    for (int i = 0; i < ns; i++)
        if (sflag[i] >= 0)
            real_fcntl(sfd[i], F_SETFD, sflag[i]);
    return rc;
}

int pre_posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *attr,
                    char *const argv[], char *const envp[])
{
    return spawn_common(real_posix_spawn, pid, path, fa, attr, argv, envp);
}

int pre_posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *attr,
                     char *const argv[], char *const envp[])
{
    return spawn_common(real_posix_spawnp, pid, file, fa, attr, argv, envp);
}

/* POSIX system(): /bin/sh -c cmd through spawn_common, SIGCHLD blocked and SIGINT/SIGQUIT
 * ignored in the caller while it waits, the child starting with the caller's mask and those two
 * back to default. Not reference-counted across threads as glibc's is: two threads in system()
 * at once may restore each other's SIGINT/SIGQUIT dispositions early. */
int pre_system(const char *cmd)
{
    if (!g_pre.stack)
        return real_system(cmd);
    if (!cmd)
        return access("/bin/sh", X_OK) == 0;
    struct sigaction ign = { .sa_handler = SIG_IGN }, oint, oquit;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGINT, &ign, &oint);
    sigaction(SIGQUIT, &ign, &oquit);
    sigset_t chld, omask;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &omask);

    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t def;
    sigemptyset(&def);
    if (oint.sa_handler != SIG_IGN)
        sigaddset(&def, SIGINT);
    if (oquit.sa_handler != SIG_IGN)
        sigaddset(&def, SIGQUIT);
    posix_spawnattr_setsigdefault(&attr, &def);
    posix_spawnattr_setsigmask(&attr, &omask);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

    char *argv[] = { "sh", "-c", "--", (char *)cmd, NULL };
    pid_t pid;
    int status;
    int rc = spawn_common(real_posix_spawn, &pid, "/bin/sh", NULL, &attr, argv, environ);
    posix_spawnattr_destroy(&attr);
    if (rc == 0) {
        pid_t w;
        while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
            ;
        if (w != pid)
            status = -1;
    } else {
        status = 127 << 8;      /* POSIX: as if the shell had exited with 127 */
    }
    int e = errno;
    sigaction(SIGINT, &oint, NULL);
    sigaction(SIGQUIT, &oquit, NULL);
    sigprocmask(SIG_SETMASK, &omask, NULL);
    errno = e;
    return status;
}

/* daemon() with glibc's semantics through our fork: the child gets a process slot of its own
 * holding every socket, and the parent's references, left behind by its _exit, are given back
 * when a process of the stack reaps the dead parent's slot (slip_stack__reap). */
int pre_daemon(int nochdir, int noclose)
{
    pid_t pid = pre_fork();
    if (pid < 0)
        return -1;
    if (pid > 0)
        _exit(0);
    if (setsid() < 0)
        return -1;
    if (!nochdir && chdir("/") < 0)
        return -1;
    if (!noclose) {
        int fd = open("/dev/null", O_RDWR);
        if (fd < 0)
            return -1;
        /* Through pre_dup2: a standard fd that was an accelerated socket (inetd style) gives up
         * its reference. */
        for (int k = 0; k <= 2; k++)
            if (fd != k)
                pre_dup2(fd, k);
        if (fd > 2)
            real_close(fd);
    }
    return 0;
}

/* vfork is fork here: returning twice through a wrapper is only safe with fork's separate
 * memory, and a program that relies on vfork sharing memory is outside POSIX (which allows only
 * _exit or exec in the child). */
__attribute__((visibility("default"))) pid_t vfork(void)
{
    return fork();
}

pid_t __vfork(void);
__attribute__((visibility("default"))) pid_t __vfork(void)
{
    return fork();
}

/* popen/pclose: the command is started through the posix_spawn path above, so it can take over
 * accelerated sockets it inherits. POSIX: the child must not keep the pipes of earlier popen()
 * streams open, so they are remembered (also to find the pid pclose waits for). */
struct popen_ent {
    FILE *f;
    pid_t pid;
    struct popen_ent *next;
};
static struct popen_ent *g_popen;
static pthread_mutex_t g_popen_mu = PTHREAD_MUTEX_INITIALIZER;

FILE *pre_popen(const char *cmd, const char *mode)
{
    if (!g_pre.stack || !mode || (mode[0] != 'r' && mode[0] != 'w'))
        return real_popen(cmd, mode);
    bool rd = mode[0] == 'r', cloexec = strchr(mode, 'e') != NULL;
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return NULL;
    int mine = rd ? p[0] : p[1], theirs = rd ? p[1] : p[0], target = rd ? 1 : 0;
    struct popen_ent *e = calloc(1, sizeof(*e));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    /* dup2 onto the standard fd (fd == target: glibc clears close-on-exec instead) */
    posix_spawn_file_actions_adddup2(&fa, theirs, target);
    pthread_mutex_lock(&g_popen_mu);
    for (struct popen_ent *o = g_popen; o; o = o->next)
        if (fileno(o->f) != target)
            posix_spawn_file_actions_addclose(&fa, fileno(o->f));
    pthread_mutex_unlock(&g_popen_mu);
    char *argv[] = { "sh", "-c", "--", (char *)cmd, NULL };
    pid_t pid = -1;
    int rc = e ? spawn_common(real_posix_spawn, &pid, "/bin/sh", &fa, NULL, argv, environ) : ENOMEM;
    posix_spawn_file_actions_destroy(&fa);
    close(theirs);
    FILE *f = NULL;
    if (rc == 0) {
        if (!cloexec)
            real_fcntl(mine, F_SETFD, 0);
        f = fdopen(mine, rd ? "r" : "w");
    }
    if (!f) {
        int err = rc ? rc : errno;
        close(mine);
        if (rc == 0)
            waitpid(pid, NULL, 0);
        free(e);
        errno = err;
        return NULL;
    }
    e->f = f;
    e->pid = pid;
    pthread_mutex_lock(&g_popen_mu);
    e->next = g_popen;
    g_popen = e;
    pthread_mutex_unlock(&g_popen_mu);
    return f;
}

int pre_pclose(FILE *f)
{
    pthread_mutex_lock(&g_popen_mu);
    struct popen_ent **pp = &g_popen, *e = NULL;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->f == f) {
            e = *pp;
            *pp = e->next;
            break;
        }
    pthread_mutex_unlock(&g_popen_mu);
    if (!e)
        return real_pclose(f);      /* a stream glibc's popen made before the stack existed */
    pid_t pid = e->pid;
    free(e);
    fclose(f);
    int status;
    pid_t r;
    do
        r = waitpid(pid, &status, 0);
    while (r < 0 && errno == EINTR);
    return r < 0 ? -1 : status;
}
