/* SLIP_* environment variables: one table (env_vars.h) and one parser, so every variable is
 * checked the same way and a bad value gets one line naming the variable, the value and what is
 * accepted. An unset or empty variable takes its default.
 *
 * What a bad value does depends on who reads it: `slipstream run` checks them all and refuses to
 * start the program (exit 2); programs on the stack's API get -EINVAL and the line; the preload
 * library (slip_env__use_defaults) prints the line once and uses the default, unless strict mode
 * makes it stop (see src/preload/init.c and docs/CONFIG.md). */
#ifndef SLIP_BASE_ENV_H
#define SLIP_BASE_ENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/env_vars.h"

enum slip_env_kind {
    SLIP_ENV_BOOL,      /* 0/1, no/yes, false/true, off/on */
    SLIP_ENV_INT,       /* decimal digits in [min, max] */
    SLIP_ENV_DURATION,  /* digits in .unit, or digits with a unit (us, ms, s), in [min, max] .unit */
    SLIP_ENV_ENUM,      /* one of .choices; the value is its index */
    SLIP_ENV_LIST,      /* min..max comma-separated names of 1..15 characters [A-Za-z0-9._@-] */
    SLIP_ENV_TEXT,      /* not checked here: its reader parses it */
};

enum slip_env_section {
    SLIP_ENV_STACK,     /* read by the stack */
    SLIP_ENV_POSIX,     /* read by slipstream run and libslipstream.so */
    SLIP_ENV_INTERNAL,  /* set by the library itself, not by users */
    SLIP_ENV_FAULT,     /* test-only fault injection */
};

#define SLIP_ENV_POW2 1u    /* INT: a power of two */

struct slip_env_var {
    const char *name;
    enum slip_env_kind kind;
    enum slip_env_section section;
    uint64_t min, max;
    const char *unit;
    const char *choices;
    unsigned flags;
    const char *def;
    const char *def_doc;
    const char *doc;
};

#define SLIP_ENV_ID(id, kind, section, ...) SLIP_ENV_##id,
enum slip_env_id {
    SLIP_ENV_VARS(SLIP_ENV_ID)
    SLIP_ENV_COUNT
};
#undef SLIP_ENV_ID

extern const struct slip_env_var slip_env_vars[SLIP_ENV_COUNT];

/* Parses text as variable id's value. 0 and *out (BOOL 0/1, INT, DURATION in .unit, ENUM index,
 * LIST item count; TEXT 0), or -EINVAL with one line in err: "SLIP_X=<value> is not valid: want
 * <what is accepted>". */
int slip_env__parse(enum slip_env_id id, const char *text, uint64_t *out, char *err, size_t errlen);

/* The variable's value from the environment, or its default when unset or empty. A bad value
 * gives -EINVAL with the line in err, or, after slip_env__use_defaults(), a warning line on
 * stderr (once per variable and process) and the default. */
int slip_env__get(enum slip_env_id id, uint64_t *out, char *err, size_t errlen);

/* The variable's text, NULL when unset or empty (no check: for LIST after a check, and TEXT). */
const char *slip_env__text(enum slip_env_id id);

/* From now on slip_env__get warns and uses the default on a bad value (the preload library). */
void slip_env__use_defaults(void);

/* Checks every variable set in the environment: calls bad(line, arg) for each bad value with the
 * line slip_env__parse gives, and returns how many were bad. */
unsigned slip_env__check_all(void (*bad)(const char *line, void *arg), void *arg);

/* What a variable accepts ("an integer in 1..256", "one of auto, copy, zerocopy"), for errors
 * and documentation. */
void slip_env__accepted(enum slip_env_id id, char *buf, size_t len);

#endif
