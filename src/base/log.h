/* One-line diagnostics for users and developers. Errors name the thing that failed and what to do;
 * the level is chosen by SLIP_LOG (error, warn, info, debug) and defaults to warn. */
#ifndef SLIP_BASE_LOG_H
#define SLIP_BASE_LOG_H

enum slip_log_level { SLIP_LOG_ERROR, SLIP_LOG_WARN, SLIP_LOG_INFO, SLIP_LOG_DEBUG };

void slip_log(enum slip_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void slip_log_set_level(enum slip_log_level level);
enum slip_log_level slip_log_get_level(void);

#define slip_err(...)   slip_log(SLIP_LOG_ERROR, __VA_ARGS__)
#define slip_warn(...)  slip_log(SLIP_LOG_WARN, __VA_ARGS__)
#define slip_info(...)  slip_log(SLIP_LOG_INFO, __VA_ARGS__)
#define slip_debug(...) slip_log(SLIP_LOG_DEBUG, __VA_ARGS__)

#endif
