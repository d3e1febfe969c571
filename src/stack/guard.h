/* The stack's guardian: a small process (`slipstream guard`) the POSIX layer starts when it opens
 * a stack. It holds the stack's fds (shared memory, XDP link and maps, AF_XDP sockets) without
 * being one of the stack's processes, watches them, and once every one is dead (killed, crashed,
 * even inside the stack lock) ends what they left: RST for every connection they still held,
 * delivery (bounded) of what they wrote before closing, then RST for the rest. When it exits
 * the XDP program and the AF_XDP sockets go with its fds. The application never waits for it:
 * it is a safety net, and a stack whose guardian died works as before. */
#ifndef SLIP_STACK_GUARD_H
#define SLIP_STACK_GUARD_H

#include <stdbool.h>
#include <stddef.h>

#include "base/types.h"

struct slip_stack;

/* Application side: sends the stack's description and fds to the guardian over sock (one
 * SCM_RIGHTS message on a SOCK_SEQPACKET socket). */
int slip_guard__handoff(struct slip_stack *s, int sock);
/* Guardian side: receives that message and attaches to the stack without a process slot. */
int slip_guard__adopt(struct slip_stack **out, int sock, char *err, size_t errlen);
/* Watches the stack until every process of it is dead, ends their connections, returns. linger_ms
 * bounds the delivery of what they had written and closed (SLIP_EXIT_LINGER_MS); meanwhile
 * programs may join the stack under the sharing name share (share.h; NULL or empty: none). */
void slip_guard__run(struct slip_stack *s, int linger_ms, const char *share);

/* Implemented by the stack (stack.c) for the guardian. */
/* The description slip_stack__attach takes, marked as the guardian's (no slot). */
int slip_stack__describe_for_guard(struct slip_stack *s, char *buf, size_t len);
/* No process of the stack is alive, and nobody has polled it for quiet_ns (a process without a
 * slot, such as one lingering in exit, still polls). */
bool slip_stack__orphaned(struct slip_stack *s, slip_time_t quiet_ns);
/* Some connection is still held by the application or still delivering what it wrote. */
bool slip_stack__guard_pending(struct slip_stack *s);
/* Only once orphaned: takes the lock (from a dead holder at once), RSTs every connection an
 * application held and closes its listeners; with all, also RSTs the connections still
 * delivering what was written before close. Returns how many of those are left. */
unsigned slip_stack__guard_sweep(struct slip_stack *s, bool all);

#endif
