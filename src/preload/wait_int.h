/* What poll/select (wait.c) and epoll (epoll.c) share: the marks on the stacks' wake fds in a
 * kernel epoll set, the clock and deadline helpers, the record of signal handlers, and waits over
 * several stacks. A process has its stack and may have thread stacks (preload.h, g_pre.stacks); a
 * wait concerns the stacks of the sockets it watches, given as a mask of slot bits (bit 0: the
 * process's stack): each is polled, and the sleep watches the wake fds of each until the earliest
 * of their deadlines. */
#ifndef SLIP_PRELOAD_WAIT_INT_H
#define SLIP_PRELOAD_WAIT_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "preload/preload.h"
#include "stack/stack.h"

#define WAKE_MARK 0x736c6970776b7570ull   /* epoll data of the stack's wake fds */
#define BELL_MARK 0x736c697062656c6cull   /* ... and of its doorbell (edge-triggered) */
#define PEER_MARK 0x736c697070656572ull   /* ... and of the bell other processes ring (stack.h) */
#define MAX_WAKE SLIP_WAIT_FDS_MAX

/* Every stack slot in use, as a mask. */
static inline unsigned wait_all_stacks(void)
{
    return preload_slots();
}
/* Each stack in m polled; its sleepers counted (delta); its doorbell drained; its TX kicks
 * deferred or not. Inline: every wait call makes a few of these, nearly always for one stack. */
#define WAIT_EACH_STACK(m, call) \
    do { \
        int ws_i_; \
        PRELOAD_EACH_SLOT(ws_i_, m) { \
            struct slip_stack *ws_s_ = preload_stack_at(ws_i_); \
            if (ws_s_) \
                call; \
        } \
    } while (0)
static inline void wait_stacks_poll(unsigned m)
{
    WAIT_EACH_STACK(m, slip_stack__poll(ws_s_));
}
static inline void wait_stacks_sleepers(unsigned m, int delta)
{
    WAIT_EACH_STACK(m, slip_stack__sleepers(ws_s_, delta));
}
static inline void wait_stacks_drain(unsigned m)
{
    WAIT_EACH_STACK(m, slip_stack__doorbell_drain(ws_s_));
}
static inline void wait_stacks_tx_defer(unsigned m, bool on)
{
    WAIT_EACH_STACK(m, slip_stack__tx_defer(ws_s_, on));
}
/* The wake fds of every stack in m, at most max; the shortest sleep any of them allows. */
int wait_stacks_wait_fds(unsigned m, int *fds, int max);
int wait_stacks_sleep_ms(unsigned m, int timeout_ms);

/* CLOCK_MONOTONIC in ms; ms left until end (UINT64_MAX: -1, no limit). */
uint64_t wait_mono_ms(void);
int wait_remaining(uint64_t end);

/* Signal handlers that ran (see wait.c): the calls that take a signal mask arm the record before
 * they install the mask; a wait starts it unless armed; wait_signals_armed goes back to false after. */
extern __thread bool wait_signals_armed;
void wait_signals_arm(void);
void wait_signals_start(void);

/* epoll.c: the stacks ep's members live in (a nested set: every stack); whether epoll_wait on ep
 * would report one of its accelerated members now (for poll() and nested sets). */
unsigned uepoll_mask(const struct uepoll *ep);
bool uepoll_user_ready(struct uepoll *ep, int depth);

#endif
