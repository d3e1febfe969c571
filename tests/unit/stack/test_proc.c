/* The process table and the stack lock across processes: a dead holder is found (also a
 * zombie, whose fds the kernel has closed), a reused pid is told apart by start time, and a
 * lock whose holder died is taken over instead of hanging everyone. */
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "stack/lock.h"
#include "stack/proc.h"

static void *shared(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

TEST(test_start_time_of_self_and_of_a_missing_pid)
{
    CHECK(slip_proc__start_time(getpid()), >, 0);
    CHECK(slip_proc__start_time(0x3ffffff), ==, 0);     /* above pid_max */
}

TEST(test_claim_bind_find_free)
{
    struct slip_procs *t = shared(sizeof(*t));
    CHECK(t != NULL, ==, 1);
    int a = slip_procs__claim(t, getpid());
    CHECK(a, >=, 0);
    CHECK(slip_procs__find(t, getpid()), ==, a);
    CHECK(slip_procs__dead(t, a), ==, 0);
    int r = slip_procs__claim(t, SLIP_PROC_RESERVED);
    CHECK(r, >=, 0);
    CHECK(r, !=, a);
    CHECK(slip_procs__dead(t, r), ==, 0);      /* reserved: a child to come, not dead */
    /* A pid whose start time does not match is another process: the holder is dead. */
    t->p[a].start += 1;
    CHECK(slip_procs__dead(t, a), ==, 1);
    CHECK(slip_procs__take_dead(t, a), ==, 1);
    CHECK(slip_procs__take_dead(t, a), ==, 0); /* only one reaper wins */
    slip_procs__free(t, a);
    CHECK(slip_procs__find(t, getpid()), ==, -1);
    for (int i = 0; i < SLIP_PROC_MAX - 1; i++)
        CHECK(slip_procs__claim(t, SLIP_PROC_RESERVED), >=, 0);
    CHECK(slip_procs__claim(t, getpid()), <, 0);
    munmap(t, sizeof(*t));
}

TEST(test_zombie_child_is_dead)
{
    struct slip_procs *t = shared(sizeof(*t));
    pid_t pid = fork();
    if (pid == 0) {
        pause();
        _exit(0);
    }
    int i = slip_procs__claim(t, pid);
    CHECK(slip_procs__dead(t, i), ==, 0);
    kill(pid, SIGKILL);
    /* not waited yet: a zombie, which holds no fds any more */
    struct timespec ts = { 0, 50 * 1000 * 1000 };
    for (int k = 0; k < 40 && !slip_procs__dead(t, i); k++)
        nanosleep(&ts, NULL);
    CHECK(slip_procs__dead(t, i), ==, 1);
    waitpid(pid, NULL, 0);
    CHECK(slip_procs__dead(t, i), ==, 1);
    munmap(t, sizeof(*t));
}

TEST(test_lock_of_a_dead_holder_is_taken_over)
{
    struct slip_lock *l = shared(sizeof(*l));
    slip_lock__init(l);
    pid_t pid = fork();
    if (pid == 0) {
        slip_lock__acquire(l);
        l->owner_pid = (uint32_t)getpid();
        _exit(0);                           /* dies holding it */
    }
    waitpid(pid, NULL, 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    slip_lock__acquire(l);                  /* would hang forever without the takeover */
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(l->stolen, ==, 1);
    CHECK(t1.tv_sec - t0.tv_sec, <=, 5);
    l->owner_pid = (uint32_t)getpid();
    slip_lock__release(l);
    CHECK(slip_lock__try(l), ==, 1);        /* and it works normally afterwards */
    slip_lock__release(l);
    munmap(l, sizeof(*l));
}

TEST(test_lock_of_a_live_holder_is_not_taken)
{
    struct slip_lock *l = shared(sizeof(*l));
    slip_lock__init(l);
    int pfd[2];
    CHECK(pipe(pfd), ==, 0);
    pid_t pid = fork();
    if (pid == 0) {
        slip_lock__acquire(l);
        l->owner_pid = (uint32_t)getpid();
        char c = 1;
        (void)!write(pfd[1], &c, 1);
        struct timespec ts = { 1, 500 * 1000 * 1000 };
        nanosleep(&ts, NULL);               /* longer than the first liveness check */
        slip_lock__release(l);
        _exit(0);
    }
    char c;
    CHECK(read(pfd[0], &c, 1), ==, 1);
    slip_lock__acquire(l);
    CHECK(l->stolen, ==, 0);
    l->owner_pid = (uint32_t)getpid();
    slip_lock__release(l);
    waitpid(pid, NULL, 0);
    close(pfd[0]);
    close(pfd[1]);
    munmap(l, sizeof(*l));
}

TEST(test_lock_seized_from_a_dead_holder_at_once)
{
    /* The guardian, once every process is dead: no second of waiting, and the lock works after. */
    struct slip_lock *l = shared(sizeof(*l));
    slip_lock__init(l);
    pid_t pid = fork();
    if (pid == 0) {
        slip_lock__acquire(l);
        atomic_store(&l->word, 2);          /* as if another (now dead too) waited */
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    CHECK(slip_lock__try(l), ==, 0);
    slip_lock__seize(l);
    CHECK(l->stolen, ==, 1);
    CHECK(atomic_load(&l->word), ==, 1);
    slip_lock__release(l);
    CHECK(atomic_load(&l->word), ==, 0);
    CHECK(slip_lock__try(l), ==, 1);
    slip_lock__release(l);
    munmap(l, sizeof(*l));
}

TEST_MAIN()
