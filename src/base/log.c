/* Implementation of the one-line logger; see log.h. */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_level = -1;

static void log_init(void)
{
    const char *e = getenv("SLIP_LOG");
    g_level = SLIP_LOG_WARN;
    if (!e)
        return;
    if (!strcmp(e, "error")) g_level = SLIP_LOG_ERROR;
    else if (!strcmp(e, "warn")) g_level = SLIP_LOG_WARN;
    else if (!strcmp(e, "info")) g_level = SLIP_LOG_INFO;
    else if (!strcmp(e, "debug")) g_level = SLIP_LOG_DEBUG;
    else fprintf(stderr, "slipstream: warning: SLIP_LOG=%s is not one of error, warn, info, debug; using warn\n", e);
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
