/* Minimal unit-test harness: CHECK(a, op, b) prints both sides when it fails, TEST() registers a
 * test, and main() runs them all (or those named on the command line) and returns non-zero if
 * any check failed. Header-only so each test binary is one file. */
#ifndef SLIP_TESTS_CHECK_H
#define SLIP_TESTS_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct slip_test {
    const char *name;
    void (*fn)(void);
};

extern int slip_test_failures;
extern int slip_test_checks;
int slip_test_failures;
int slip_test_checks;

#define SLIP_MAX_TESTS 512
static struct slip_test slip_tests[SLIP_MAX_TESTS];
static int slip_ntests;

#define TEST(name_)                                                              \
    static void name_(void);                                                     \
    __attribute__((constructor)) static void register_##name_(void)              \
    {                                                                            \
        if (slip_ntests < SLIP_MAX_TESTS)                                        \
            slip_tests[slip_ntests++] = (struct slip_test){ #name_, name_ };     \
    }                                                                            \
    static void name_(void)

#define CHECK(a, op, b)                                                          \
    do {                                                                         \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);          \
        slip_test_checks++;                                                      \
        if (!(check_a_ op check_b_)) {                                           \
            slip_test_failures++;                                                \
            fprintf(stderr, "%s:%d: CHECK(%s %s %s) failed: %lld vs %lld\n",     \
                    __FILE__, __LINE__, #a, #op, #b, check_a_, check_b_);        \
        }                                                                        \
    } while (0)

#define CHECK_MEM(a, b, n)                                                       \
    do {                                                                         \
        slip_test_checks++;                                                      \
        if (memcmp((a), (b), (n)) != 0) {                                        \
            slip_test_failures++;                                                \
            fprintf(stderr, "%s:%d: CHECK_MEM(%s, %s, %zu) differs\n",           \
                    __FILE__, __LINE__, #a, #b, (size_t)(n));                    \
        }                                                                        \
    } while (0)

static inline int slip_test_main(int argc, char **argv)
{
    int ran = 0;
    for (int i = 0; i < slip_ntests; i++) {
        if (argc > 1) {
            int want = 0;
            for (int j = 1; j < argc; j++)
                want |= !strcmp(argv[j], slip_tests[i].name);
            if (!want)
                continue;
        }
        int before = slip_test_failures;
        slip_tests[i].fn();
        ran++;
        printf("%s %s\n", slip_test_failures == before ? "ok  " : "FAIL", slip_tests[i].name);
    }
    printf("%d tests, %d checks, %d failures\n", ran, slip_test_checks, slip_test_failures);
    if (ran == 0 || slip_test_checks == 0) {
        fprintf(stderr, "no test ran or nothing was checked\n");
        return 1;
    }
    return slip_test_failures ? 1 : 0;
}

#define TEST_MAIN() int main(int argc, char **argv) { return slip_test_main(argc, argv); }

#endif
