/* A process's bell that other processes of the stack can ring: a datagram UNIX socket bound to
 * an abstract name made of the pid. A poll in one process may deliver data to a socket another
 * process sleeps on (its epoll or poll set watches the AF_XDP fds, whose readiness that poll just
 * consumed); the per-process doorbell (an eventfd) cannot reach it, this can. */
#ifndef SLIP_STACK_BELL_H
#define SLIP_STACK_BELL_H

#include <stdbool.h>
#include <sys/types.h>

/* The bell of process pid (non-blocking, close-on-exec), or -1 when it cannot be made (the name
 * is taken: that process is then woken by its own polls and timeouts only). */
int slip_bell__open(pid_t pid);
/* Rings pid's bell from fd (any datagram UNIX socket). Never blocks; a full or missing bell is
 * fine: its owner is awake already, or gone. */
void slip_bell__ring(int fd, pid_t pid);
/* Reads everything rung so far (with read(2): allowed in a sandbox); true when there was something. */
bool slip_bell__drain(int fd);

#endif
