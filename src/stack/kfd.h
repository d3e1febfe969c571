/* The kernel sockets this process made (or inherited) to reserve stack ports: a process-local
 * set of fd numbers. Shared memory says which fd reserves which connection, but shared memory
 * can be written by every process of the stack, some of them less privileged (a server's
 * workers after they drop root): a fd number read from it is closed only if this set has it,
 * so no process can make another close a fd of its own. Fork children inherit the set with the
 * fds; an exec'd image gets it in SLIP_KFDS. */
#ifndef SLIP_STACK_KFD_H
#define SLIP_STACK_KFD_H

#include <stdbool.h>

void slip_kfd__add(int fd);
bool slip_kfd__has(int fd);
/* Closes fd when it is one of ours and forgets it: 0, or -EBADF for a fd we never made. */
int slip_kfd__close(int fd);
/* The set as "fd,fd,..." (malloc'd; NULL without memory), for an exec'd image; and back. Only
 * fds open in the new image are taken. */
char *slip_kfd__export(void);
void slip_kfd__import(const char *list);

#endif
