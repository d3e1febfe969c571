/* Implementation of the one-line logger; see log.h. */
#include "base/log.h"

#include "base/env.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_level = -1;

static void log_init(void)
{
    static const enum slip_log_level levels[] = { SLIP_LOG_ERROR, SLIP_LOG_WARN, SLIP_LOG_INFO, SLIP_LOG_DEBUG };
    uint64_t i;
    char err[256];
    g_level = SLIP_LOG_WARN;
    /* The logger cannot refuse to start: a bad value is a warning and the default, always. */
    if (slip_env__get(SLIP_ENV_LOG, &i, err, sizeof(err)) < 0)
        fprintf(stderr, "slipstream: warning: %s; using warn\n", err);
    else
        g_level = (int)levels[i];
}

void slip_log_set_level(enum slip_log_level level) { g_level = (int)level; }

enum slip_log_level slip_log_get_level(void)
{
    if (g_level < 0)
        log_init();
    return (enum slip_log_level)g_level;
}

void slip_log(enum slip_log_level level, const char *fmt, ...)
{
    static const char *const names[] = { "error", "warning", "info", "debug" };
    char line[512];
    va_list ap;

    if ((int)level > (int)slip_log_get_level())
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    /* One write per line so lines from several processes do not interleave. */
    fprintf(stderr, "slipstream: %s: %s\n", names[level], line);
}
