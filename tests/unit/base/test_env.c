/* The SLIP_* variable table and its parser (base/env.h): the table is consistent, every kind
 * takes what it documents and refuses the rest with one line naming the variable, the value and
 * what it accepts. The bad values of issue 11 (SLIP_SPIN_USEC=-5 and =1e99,
 * SLIP_EXIT_LINGER_MS=x, SLIP_SHARE=maybe) are among them. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/env.h"
#include "tests/unit/check.h"

/* parse() of a good value: its number; of a bad one: UINT64_MAX and the line in g_err. */
static char g_err[256];

static uint64_t parse(enum slip_env_id id, const char *text)
{
    uint64_t v = 12345;
    g_err[0] = 0;
    int rc = slip_env__parse(id, text, &v, g_err, sizeof(g_err));
    if (rc < 0) {
        CHECK(rc, ==, -EINVAL);
        CHECK(v, ==, 12345);    /* untouched */
        return UINT64_MAX;
    }
    return v;
}

static bool has(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* Refused, with a line that names the variable and the value as given, and says what is wanted. */
static void check_bad(enum slip_env_id id, const char *text)
{
    char first[96];
    CHECK(parse(id, text), ==, UINT64_MAX);
    snprintf(first, sizeof(first), "%s=%s is not valid: want ", slip_env_vars[id].name, text);
    if (!has(g_err, first)) {
        fprintf(stderr, "  line for %s: \"%s\"\n", text, g_err);
        CHECK(0, ==, 1);
    }
    CHECK(strchr(g_err, '\n'), ==, NULL);
}

TEST(test_table_consistent)
{
    for (unsigned i = 0; i < SLIP_ENV_COUNT; i++) {
        const struct slip_env_var *v = &slip_env_vars[i];
        CHECK(v->name != NULL, ==, 1);
        CHECK(strncmp(v->name, "SLIP_", 5), ==, 0);
        CHECK(v->doc && *v->doc, ==, 1);
        for (unsigned j = 0; j < i; j++)
            CHECK(strcmp(v->name, slip_env_vars[j].name) != 0, ==, 1);
        /* Every default is a value the parser takes; no default is described instead. */
        if (v->def) {
            uint64_t x;
            int rc = slip_env__parse((enum slip_env_id)i, v->def, &x, g_err, sizeof(g_err));
            if (rc < 0)
                fprintf(stderr, "  default of %s: %s\n", v->name, g_err);
            CHECK(rc, ==, 0);
        } else {
            CHECK(v->kind == SLIP_ENV_LIST || v->kind == SLIP_ENV_TEXT, ==, 1);
        }
        if (v->kind == SLIP_ENV_INT || v->kind == SLIP_ENV_DURATION || v->kind == SLIP_ENV_LIST)
            CHECK(v->min <= v->max, ==, 1);
        if (v->kind == SLIP_ENV_DURATION)
            CHECK(!strcmp(v->unit, "us") || !strcmp(v->unit, "ms"), ==, 1);
        if (v->kind == SLIP_ENV_ENUM)
            CHECK(v->choices && *v->choices, ==, 1);
    }
}

TEST(test_issue_11_values_refused)
{
    check_bad(SLIP_ENV_SPIN_USEC, "-5");
    check_bad(SLIP_ENV_SPIN_USEC, "1e99");
    check_bad(SLIP_ENV_EXIT_LINGER_MS, "x");
    check_bad(SLIP_ENV_SHARE, "maybe");
    CHECK(has(g_err, "0 or 1"), ==, 1);
}

TEST(test_int_range_and_form)
{
    CHECK(parse(SLIP_ENV_BURST, "1"), ==, 1);
    CHECK(parse(SLIP_ENV_BURST, "256"), ==, 256);
    CHECK(parse(SLIP_ENV_BURST, "0064"), ==, 64);
    check_bad(SLIP_ENV_BURST, "0");
    check_bad(SLIP_ENV_BURST, "257");
    CHECK(has(g_err, "an integer in 1..256"), ==, 1);
    check_bad(SLIP_ENV_BURST, "+5");
    check_bad(SLIP_ENV_BURST, " 5");
    check_bad(SLIP_ENV_BURST, "5 ");
    check_bad(SLIP_ENV_BURST, "0x10");
    check_bad(SLIP_ENV_BURST, "5.0");
    check_bad(SLIP_ENV_BURST, "");
    check_bad(SLIP_ENV_FAULT_DROP, "18446744073709551616");      /* 2^64: overflow, not 0 */
    check_bad(SLIP_ENV_FAULT_DROP, "99999999999999999999999999");
    CHECK(parse(SLIP_ENV_FAULT_SEED, "18446744073709551615"), ==, UINT64_MAX);
    CHECK(g_err[0], ==, 0);                                        /* that one was good */
    check_bad(SLIP_ENV_FAULT_SEED, "18446744073709551616");
    /* Powers of two */
    CHECK(parse(SLIP_ENV_RING_SIZE, "64"), ==, 64);
    CHECK(parse(SLIP_ENV_RING_SIZE, "16384"), ==, 16384);
    check_bad(SLIP_ENV_RING_SIZE, "100");
    CHECK(has(g_err, "a power of two in 64..16384"), ==, 1);
    check_bad(SLIP_ENV_RING_SIZE, "32");
    check_bad(SLIP_ENV_RING_SIZE, "32768");
    check_bad(SLIP_ENV_FRAME_SIZE, "3072");
}

TEST(test_duration_units)
{
    CHECK(parse(SLIP_ENV_SPIN_USEC, "0"), ==, 0);
    CHECK(parse(SLIP_ENV_SPIN_USEC, "100000"), ==, 100000);
    CHECK(parse(SLIP_ENV_SPIN_USEC, "250us"), ==, 250);
    CHECK(parse(SLIP_ENV_SPIN_USEC, "100ms"), ==, 100000);
    CHECK(parse(SLIP_ENV_SPIN_USEC, "10s"), ==, 10000000);
    check_bad(SLIP_ENV_SPIN_USEC, "11s");                  /* over 10 s */
    check_bad(SLIP_ENV_SPIN_USEC, "10000001");
    CHECK(has(g_err, "0..10000000 us"), ==, 1);
    check_bad(SLIP_ENV_SPIN_USEC, "5m");
    check_bad(SLIP_ENV_SPIN_USEC, "ms");
    check_bad(SLIP_ENV_SPIN_USEC, "5 ms");
    check_bad(SLIP_ENV_SPIN_USEC, "-0");
    CHECK(parse(SLIP_ENV_EXIT_LINGER_MS, "2s"), ==, 2000);
    CHECK(parse(SLIP_ENV_EXIT_LINGER_MS, "3000us"), ==, 3);
    check_bad(SLIP_ENV_EXIT_LINGER_MS, "500us");           /* half a millisecond: not a whole one */
    check_bad(SLIP_ENV_EXIT_LINGER_MS, "18446744073709551615s");   /* overflows in conversion */
    check_bad(SLIP_ENV_EPOLL_ALL_MS, "0");                 /* 1..3600000 */
}

TEST(test_bool_enum_list)
{
    CHECK(parse(SLIP_ENV_SHARE, "0"), ==, 0);
    CHECK(parse(SLIP_ENV_SHARE, "off"), ==, 0);
    CHECK(parse(SLIP_ENV_SHARE, "yes"), ==, 1);
    CHECK(parse(SLIP_ENV_STRICT, "true"), ==, 1);
    check_bad(SLIP_ENV_STRICT, "2");
    check_bad(SLIP_ENV_STRICT, "YES");
    CHECK(parse(SLIP_ENV_BIND, "auto"), ==, 0);
    CHECK(parse(SLIP_ENV_BIND, "zerocopy"), ==, 2);
    check_bad(SLIP_ENV_BIND, "Copy");
    CHECK(has(g_err, "one of auto, copy, zerocopy"), ==, 1);
    check_bad(SLIP_ENV_BIND, "auto,copy");
    CHECK(parse(SLIP_ENV_LOG, "debug"), ==, 3);
    check_bad(SLIP_ENV_XDP_MODE, "skb");
    CHECK(parse(SLIP_ENV_IFACES, "veth0"), ==, 1);
    CHECK(parse(SLIP_ENV_IFACES, "veth0,eth1.100,br-lan"), ==, 3);
    check_bad(SLIP_ENV_IFACES, "a,b,c,d,e");               /* SLIP_MAX_IFACES is 4 */
    check_bad(SLIP_ENV_IFACES, "veth0,,veth1");
    check_bad(SLIP_ENV_IFACES, "veth0,");
    check_bad(SLIP_ENV_IFACES, "0123456789abcdef");        /* 16 characters: IFNAMSIZ is 16 */
    check_bad(SLIP_ENV_IFACES, "eth 0");
    check_bad(SLIP_ENV_IFACES, "../x");
    CHECK(parse(SLIP_ENV_ATTACH, "anything at all"), ==, 0);
}

/* A hostile value is shown bounded and without control characters. */
TEST(test_error_line_bounded)
{
    char big[300];
    memset(big, '9', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    CHECK(parse(SLIP_ENV_BURST, big), ==, UINT64_MAX);
    CHECK(strlen(g_err), <, 200);
    CHECK(has(g_err, "...="), ==, 0);
    CHECK(has(g_err, "SLIP_BURST=9999"), ==, 1);
    CHECK(has(g_err, "... is not valid"), ==, 1);
    CHECK(parse(SLIP_ENV_BURST, "5\n\033[2J"), ==, UINT64_MAX);
    CHECK(has(g_err, "SLIP_BURST=5??[2J is not valid"), ==, 1);
}

/* Reads stderr written by fn into buf (the warnings of the default-using mode). */
static void capture_stderr(void (*fn)(void), char *buf, size_t len)
{
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    dup2(fileno(tmp), 2);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(buf, 1, len - 1, tmp);
    buf[n] = 0;
    fclose(tmp);
}

static uint64_t g_got[3];
static int g_rc[3];

static void get_spin_three_times(void)
{
    char err[256];
    for (int i = 0; i < 3; i++)
        g_rc[i] = slip_env__get(SLIP_ENV_SPIN_USEC, &g_got[i], err, sizeof(err));
}

/* Kept last among the environment tests: slip_env__use_defaults() lasts for the process. */
TEST(test_get_from_environment)
{
    uint64_t v;
    char err[256] = "";
    unsetenv("SLIP_BURST");
    CHECK(slip_env__get(SLIP_ENV_BURST, &v, err, sizeof(err)), ==, 0);
    CHECK(v, ==, 64);                                   /* unset: the default */
    setenv("SLIP_BURST", "", 1);
    CHECK(slip_env__get(SLIP_ENV_BURST, &v, err, sizeof(err)), ==, 0);
    CHECK(v, ==, 64);                                   /* empty: the default */
    CHECK(slip_env__text(SLIP_ENV_BURST) == NULL, ==, 1);
    setenv("SLIP_BURST", "32", 1);
    CHECK(slip_env__get(SLIP_ENV_BURST, &v, err, sizeof(err)), ==, 0);
    CHECK(v, ==, 32);
    unsetenv("SLIP_BURST");

    /* check_all finds every bad value set, and only those. */
    for (unsigned i = 0; i < SLIP_ENV_COUNT; i++)
        unsetenv(slip_env_vars[i].name);
    CHECK(slip_env__check_all(NULL, NULL), ==, 0);
    setenv("SLIP_SPIN_USEC", "-5", 1);
    setenv("SLIP_SHARE", "maybe", 1);
    setenv("SLIP_BURST", "8", 1);
    CHECK(slip_env__check_all(NULL, NULL), ==, 2);

    /* By default a bad value is an error with the line... */
    CHECK(slip_env__get(SLIP_ENV_SPIN_USEC, &v, err, sizeof(err)), ==, -EINVAL);
    CHECK(has(err, "SLIP_SPIN_USEC=-5 is not valid"), ==, 1);
    /* ... and for the preload, one warning line per variable and the default. */
    slip_env__use_defaults();
    char out[1024];
    capture_stderr(get_spin_three_times, out, sizeof(out));
    for (int i = 0; i < 3; i++) {
        CHECK(g_rc[i], ==, 0);
        CHECK(g_got[i], ==, 0);
    }
    CHECK(has(out, "slipstream: warning: SLIP_SPIN_USEC=-5 is not valid: want a duration in 0..10000000 us"), ==, 1);
    CHECK(has(out, "; using the default 0\n"), ==, 1);
    CHECK(strchr(out, '\n') == out + strlen(out) - 1, ==, 1);     /* one line, not three */
    for (unsigned i = 0; i < SLIP_ENV_COUNT; i++)
        unsetenv(slip_env_vars[i].name);
}

TEST_MAIN()
