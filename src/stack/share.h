/* One stack per set of interfaces in a network namespace, shared by every accelerated program
 * there. An interface's XDP hook and each queue's AF_XDP socket can have only one owner, so a
 * second program started with `slipstream run` on the same interfaces joins the stack the first
 * one opened instead of failing over to the kernel: some process of the stack listens on an
 * abstract UNIX socket (per network namespace by nature) named after the interfaces, and hands
 * the stack's fds (SCM_RIGHTS) and description to a program of the same user (or root) that
 * connects. Whichever process of the stack is alive keeps the name: the first that finds it free
 * binds it. */
#ifndef SLIP_STACK_SHARE_H
#define SLIP_STACK_SHARE_H

#include <stdbool.h>
#include <stddef.h>

struct slip_stack;

/* A stack handed to another process is one message: its description (slip_stack__export_for and
 * friends) and its fds, in the order the description names them. At most this many fds (the
 * memfd, then per interface the XDP link and 3 maps and one AF_XDP socket per queue). */
#define SLIP_SHARE_MAX_FDS  (1 + SLIP_MAX_IFACES * (4 + SLIP_MAX_QUEUES))
#define SLIP_SHARE_SPEC_MAX 600
/* Sends that message on sock: 0 or negative errno. */
int slip_share__send(int sock, const char *spec, const int *fds, int n);
/* Receives one: the description renumbered with our fds into out, the fds in fds (*nfds of
 * them, the caller's to close if it does not attach). 0; -ENOENT: the sender closed without
 * answering; -EPROTO: malformed; other negative errno from recvmsg (-EAGAIN on SO_RCVTIMEO). */
int slip_share__recv(int sock, char *out, size_t len, int *fds, int *nfds);

/* The rendezvous name for a list of interfaces (as in SLIP_IFACES), into buf. */
void slip_share__name(char *buf, size_t len, const char *const *ifnames, unsigned n);
/* Binds the name and listens (non-blocking, close-on-exec): the fd, or -EADDRINUSE when another
 * process serves it already. */
int slip_share__listen(const char *name);
/* Whether this process may serve the stack: its euid is the stack's owner's (the creator's).
 * A process that changed user since (a server's worker dropping root) must not, whoever it
 * would serve. */
bool slip_share__may_serve(struct slip_stack *s);
/* Serves every program waiting on lfd (never blocks): only the stack's owner and root get it. */
void slip_share__serve(struct slip_stack *s, int lfd);
/* Serves programs that open a stack of their own in s's group (the group's name). */
void slip_share__serve_group(struct slip_stack *s, int lfd);
/* Opens a stack of our own in the group served under name (same results as slip_share__join). */
struct slip_config;
int slip_share__join_group(struct slip_stack **out, const char *name, const struct slip_config *cfg, char *err,
                           size_t errlen);
/* Joins the stack served under name: 0 with *out, -ENOENT when nobody serves it, -EACCES (with
 * a line in err) when the server or what it hands over is not to be trusted (another user's
 * process, not a stack), other negative errno with a line in err. */
int slip_share__join(struct slip_stack **out, const char *name, char *err, size_t errlen);

#endif
