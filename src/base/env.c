/* The SLIP_* variable parser; see env.h. Values are parsed by hand, never with strtoul/atoi:
 * those take "-5" as a huge number, "1e99" as 1 and "x" as 0, which is how bad values used to
 * pass silently. */
#include "base/env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLIP_ENV_ROW(id, k, sec, ...) \
    [SLIP_ENV_##id] = { .name = "SLIP_" #id, .kind = SLIP_ENV_##k, .section = SLIP_ENV_##sec, __VA_ARGS__ },
const struct slip_env_var slip_env_vars[SLIP_ENV_COUNT] = {
    SLIP_ENV_VARS(SLIP_ENV_ROW)
};
#undef SLIP_ENV_ROW

static bool g_use_defaults;
static bool g_warned[SLIP_ENV_COUNT];

void slip_env__use_defaults(void) { g_use_defaults = true; }

/* Decimal digits only, no sign, no space, no overflow. */
static int parse_u64(const char *s, const char **end, uint64_t *out)
{
    uint64_t v = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -ERANGE;
        v = v * 10 + d;
    }
    if (p == s)
        return -EINVAL;
    *end = p;
    *out = v;
    return 0;
}

static uint64_t unit_ns(const char *u)
{
    if (!strcmp(u, "us")) return 1000;
    if (!strcmp(u, "ms")) return 1000000;
    if (!strcmp(u, "s")) return 1000000000;
    return 0;
}

/* The n-th (0-based) comma-separated choice into buf; false past the last. */
static bool choice(const char *choices, unsigned n, char *buf, size_t len)
{
    const char *p = choices;
    for (; n; n--) {
        p = strchr(p, ',');
        if (!p)
            return false;
        p++;
    }
    size_t l = strcspn(p, ",");
    snprintf(buf, len, "%.*s", (int)l, p);
    return true;
}

void slip_env__accepted(enum slip_env_id id, char *buf, size_t len)
{
    const struct slip_env_var *v = &slip_env_vars[id];
    switch (v->kind) {
    case SLIP_ENV_BOOL:
        snprintf(buf, len, "0 or 1 (or no/yes, false/true, off/on)");
        break;
    case SLIP_ENV_INT:
        snprintf(buf, len, "%s %llu..%llu", v->flags & SLIP_ENV_POW2 ? "a power of two in" : "an integer in",
                 (unsigned long long)v->min, (unsigned long long)v->max);
        break;
    case SLIP_ENV_DURATION:
        snprintf(buf, len, "a duration in %llu..%llu %s (a number of %s, or with a unit: us, ms, s)",
                 (unsigned long long)v->min, (unsigned long long)v->max, v->unit,
                 !strcmp(v->unit, "us") ? "microseconds" : "milliseconds");
        break;
    case SLIP_ENV_ENUM: {
        size_t o = (size_t)snprintf(buf, len, "one of ");
        char c[32];
        for (unsigned i = 0; o < len && choice(v->choices, i, c, sizeof(c)); i++)
            o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", c);
        break;
    }
    case SLIP_ENV_LIST:
        snprintf(buf, len, "%llu to %llu comma-separated names of 1..15 characters",
                 (unsigned long long)v->min, (unsigned long long)v->max);
        break;
    case SLIP_ENV_TEXT:
        snprintf(buf, len, "any text");
        break;
    }
}

static int parse_bool(const char *s, uint64_t *out)
{
    static const char *const no[] = { "0", "no", "false", "off" }, *const yes[] = { "1", "yes", "true", "on" };
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        if (!strcmp(s, no[i])) { *out = 0; return 0; }
        if (!strcmp(s, yes[i])) { *out = 1; return 0; }
    }
    return -EINVAL;
}

static int parse_duration(const struct slip_env_var *v, const char *s, uint64_t *out)
{
    const char *end;
    uint64_t n;
    if (parse_u64(s, &end, &n) < 0)
        return -EINVAL;
    uint64_t base = unit_ns(v->unit), given = *end ? unit_ns(end) : base;
    if (!given)
        return -EINVAL;
    /* n in the given unit, converted to the variable's unit; a fraction of it is refused. */
    if (given >= base) {
        uint64_t f = given / base;
        if (n > UINT64_MAX / f)
            return -EINVAL;
        *out = n * f;
    } else {
        uint64_t f = base / given;
        if (n % f)
            return -EINVAL;
        *out = n / f;
    }
    return 0;
}

static int parse_list(const struct slip_env_var *v, const char *s, uint64_t *out)
{
    uint64_t n = 0;
    for (const char *p = s;; p++) {
        size_t l = strcspn(p, ",");
        if (l == 0 || l > 15)
            return -EINVAL;
        for (size_t i = 0; i < l; i++) {
            char c = p[i];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-' || c == '@'))
                return -EINVAL;
        }
        n++;
        p += l;
        if (!*p)
            break;
    }
    if (n < v->min || n > v->max)
        return -EINVAL;
    *out = n;
    return 0;
}

int slip_env__parse(enum slip_env_id id, const char *text, uint64_t *out, char *err, size_t errlen)
{
    const struct slip_env_var *v = &slip_env_vars[id];
    uint64_t x = 0;
    int rc = 0;
    const char *end;
    switch (v->kind) {
    case SLIP_ENV_BOOL:
        rc = parse_bool(text, &x);
        break;
    case SLIP_ENV_INT:
        rc = parse_u64(text, &end, &x) < 0 || *end || x < v->min || x > v->max ||
             ((v->flags & SLIP_ENV_POW2) && (x & (x - 1))) ? -EINVAL : 0;
        break;
    case SLIP_ENV_DURATION:
        rc = parse_duration(v, text, &x) < 0 || x < v->min || x > v->max ? -EINVAL : 0;
        break;
    case SLIP_ENV_ENUM: {
        char c[32];
        rc = -EINVAL;
        for (unsigned i = 0; choice(v->choices, i, c, sizeof(c)); i++)
            if (!strcmp(text, c)) {
                x = i;
                rc = 0;
                break;
            }
        break;
    }
    case SLIP_ENV_LIST:
        rc = parse_list(v, text, &x);
        break;
    case SLIP_ENV_TEXT:
        break;
    }
    if (rc < 0) {
        /* The value is shown as given, but bounded and without control characters: it is
         * whatever was in the environment. */
        char shown[68], want[160];
        size_t n = 0;
        for (const unsigned char *p = (const unsigned char *)text; *p && n < 64; p++)
            shown[n++] = *p < 0x20 || *p == 0x7f ? '?' : (char)*p;
        if (strlen(text) > 64)
            shown[n++] = '.', shown[n++] = '.', shown[n++] = '.';
        shown[n] = 0;
        slip_env__accepted(id, want, sizeof(want));
        snprintf(err, errlen, "%s=%s is not valid: want %s", v->name, shown, want);
        return -EINVAL;
    }
    *out = x;
    return 0;
}

const char *slip_env__text(enum slip_env_id id)
{
    const char *s = getenv(slip_env_vars[id].name);
    return s && *s ? s : NULL;
}

int slip_env__get(enum slip_env_id id, uint64_t *out, char *err, size_t errlen)
{
    const struct slip_env_var *v = &slip_env_vars[id];
    const char *s = slip_env__text(id);
    char line[256];
    *out = 0;
    if (s) {
        int rc = slip_env__parse(id, s, out, line, sizeof(line));
        if (rc == 0)
            return 0;
        if (!g_use_defaults) {
            snprintf(err, errlen, "%s", line);
            return rc;
        }
        if (!__atomic_exchange_n(&g_warned[id], true, __ATOMIC_RELAXED)) {
            if (v->def)
                fprintf(stderr, "slipstream: warning: %s; using the default %s\n", line, v->def);
            else
                fprintf(stderr, "slipstream: warning: %s; using the default (%s)\n", line,
                        v->def_doc ? v->def_doc : "unset");
        }
    }
    if (v->def && slip_env__parse(id, v->def, out, line, sizeof(line)) < 0)
        abort();    /* a default the table itself refuses: caught by the unit tests */
    return 0;
}

unsigned slip_env__check_all(void (*bad)(const char *line, void *arg), void *arg)
{
    unsigned n = 0;
    for (unsigned i = 0; i < SLIP_ENV_COUNT; i++) {
        const char *s = slip_env__text((enum slip_env_id)i);
        char line[256];
        uint64_t x;
        if (s && slip_env__parse((enum slip_env_id)i, s, &x, line, sizeof(line)) < 0) {
            n++;
            if (bad)
                bad(line, arg);
        }
    }
    return n;
}
