/* Lock ownership is asserted, not only written in comments: a function of src/stack whose comment
 * says "Lock held" aborts when it runs without the stack lock (builds with assertions), and runs
 * normally when this process holds it. Each unlocked call runs in a child, which must die of
 * SIGABRT. */
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "stack/stack_int.h"

static struct slip_shm g_shm;
static struct slip_stack g_s;

static struct slip_stack *fake_stack(bool locked)
{
    memset(&g_shm, 0, sizeof(g_shm));
    memset(&g_s, 0, sizeof(g_s));
    g_s.shm = &g_shm;
    g_s.proc = -1;
    pid_refresh();
    if (locked) {
        atomic_store(&g_shm.lock.word, 1);
        g_shm.lock.owner_pid = (uint32_t)getpid();
    }
    return &g_s;
}

enum which { OTHERS_ASLEEP, TX_DEFERRING, UDP6_UNCLAIM, TX_DONE };

static void call(struct slip_stack *s, enum which w)
{
    switch (w) {
    case OTHERS_ASLEEP: (void)others_asleep(s); break;
    case TX_DEFERRING: (void)tx_deferring(s); break;
    case UDP6_UNCLAIM: udp6_unclaim(s, 0); break;
    case TX_DONE: tx_done(s); break;
    }
}

/* The signal that ended a child making call w without the lock (0: it returned). */
static int unlocked_call_signal(enum which w)
{
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 2);      /* the one "internal error" line */
        call(fake_stack(false), w);
        _exit(0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

TEST(test_lock_held_functions_abort_without_the_lock)
{
    CHECK(unlocked_call_signal(OTHERS_ASLEEP), ==, SIGABRT);
    CHECK(unlocked_call_signal(TX_DEFERRING), ==, SIGABRT);
    CHECK(unlocked_call_signal(UDP6_UNCLAIM), ==, SIGABRT);
    CHECK(unlocked_call_signal(TX_DONE), ==, SIGABRT);
}

TEST(test_lock_held_functions_run_with_the_lock)
{
    struct slip_stack *s = fake_stack(true);
    CHECK(others_asleep(s), ==, 0);         /* nobody sleeps in the fake stack */
    CHECK(tx_deferring(s), ==, false);      /* this thread is not handling a wait's events */
}

/* Another process's lock is not ours. */
TEST(test_lock_of_another_process_is_not_held)
{
    pid_t pid = fork();
    if (pid == 0) {
        struct slip_stack *s = fake_stack(true);
        g_shm.lock.owner_pid = (uint32_t)getppid();
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 2);
        (void)others_asleep(s);
        _exit(0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0), ==, pid);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, ==, 1);
}

#ifdef NDEBUG
int main(void)
{
    printf("assertions compiled out (NDEBUG): nothing to check\n");
    return 77;      /* meson: skipped */
}
#else
TEST_MAIN()
#endif
