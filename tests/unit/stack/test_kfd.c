/* The process-local set of port-reservation fds (stack/kfd.h): a fd number read from shared
 * memory is closed only if this process made it as a reservation, so another process of the
 * stack cannot make this one close its own files. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "stack/kfd.h"

static int is_open(int fd)
{
    return fcntl(fd, F_GETFD) >= 0;
}

TEST(test_a_fd_never_added_is_not_closed)
{
    int p[2];
    CHECK(pipe(p), ==, 0);
    CHECK(slip_kfd__close(p[0]), ==, -EBADF);
    CHECK(is_open(p[0]), ==, 1);
    CHECK(slip_kfd__close(-1), ==, -EBADF);
    CHECK(slip_kfd__close(1 << 20), ==, -EBADF);
    close(p[0]);
    close(p[1]);
}

TEST(test_an_added_fd_is_closed_once)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(s, >=, 0);
    slip_kfd__add(s);
    CHECK(slip_kfd__has(s), ==, 1);
    CHECK(slip_kfd__close(s), ==, 0);
    CHECK(is_open(s), ==, 0);
    CHECK(slip_kfd__has(s), ==, 0);
    /* The number may be reused by the program for anything: a second close must not touch it. */
    int p[2];
    CHECK(pipe(p), ==, 0);
    int again = p[0] == s ? p[0] : p[1] == s ? p[1] : -1;
    if (again >= 0) {
        CHECK(slip_kfd__close(again), ==, -EBADF);
        CHECK(is_open(again), ==, 1);
    }
    close(p[0]);
    close(p[1]);
}

TEST(test_high_fds_grow_the_set)
{
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK(s, >=, 0);
    int hi = fcntl(s, F_DUPFD, 1000);
    CHECK(hi, >=, 1000);
    slip_kfd__add(hi);
    CHECK(slip_kfd__has(hi), ==, 1);
    CHECK(slip_kfd__has(hi - 1), ==, 0);
    CHECK(slip_kfd__close(hi), ==, 0);
    close(s);
}

TEST(test_export_import_takes_only_open_sockets)
{
    int a = socket(AF_INET, SOCK_STREAM, 0), b = socket(AF_INET, SOCK_STREAM, 0);
    int p[2];
    CHECK(pipe(p), ==, 0);
    slip_kfd__add(a);
    slip_kfd__add(b);
    char *list = slip_kfd__export();
    CHECK(list != NULL, ==, 1);
    CHECK(slip_kfd__close(a), ==, 0);
    CHECK(slip_kfd__close(b), ==, 0);
    /* as an exec'd image would get it, plus names that are a pipe and a closed fd */
    char env[256];
    snprintf(env, sizeof(env), "%s,%d,%d,junk", list, p[0], a);
    free(list);
    int c = socket(AF_INET, SOCK_STREAM, 0);        /* reuses a's or b's number */
    slip_kfd__import(env);
    CHECK(slip_kfd__has(p[0]), ==, 0);
    CHECK(slip_kfd__has(c), ==, 1);                 /* an open socket named by the list */
    CHECK(slip_kfd__close(c), ==, 0);
    close(p[0]);
    close(p[1]);
}

TEST_MAIN()
