/* Private to src/ctl: turning one rtnetlink message into a change of struct ctl_tables. Kept apart
 * from the sockets so the unit tests can feed hand-built messages (libmnl) and check the tables.
 * These functions never touch t->seq; the caller brackets them with ctl_tables__write_begin/end. */
#ifndef SLIP_CTL_CTL_APPLY_H
#define SLIP_CTL_CTL_APPLY_H

#include <linux/netlink.h>

#include "ctl/ctl.h"

/* Bits of ctl_apply__msg's result. */
#define CTL_APPLY_USED   0x1    /* a link/addr/route/neigh message of ours (counted in t->updates) */
#define CTL_APPLY_RESYNC 0x2    /* the kernel may now drop routes without telling us: re-dump them */

/* Applies RTM_NEW/DEL{LINK,ADDR,ROUTE,NEIGH}; ignores everything else (other families, other
 * tables, proxy entries, cloned routes). Returns a CTL_APPLY_* mask, or -EINVAL for a malformed
 * message (which leaves t unchanged). */
int ctl_apply__msg(struct ctl_tables *t, const struct nlmsghdr *nlh);

/* Seqlock writer side: seq is odd between the two calls. */
void ctl_tables__write_begin(struct ctl_tables *t);
void ctl_tables__write_end(struct ctl_tables *t);

#endif
