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

/* Shared by the IPv4 (apply.c) and IPv6 (apply6.c) halves. ctl_attr__parse keeps the last
 * attribute of each type up to max (lengths checked where used); ctl_attr__u32: 1 and *v when a
 * present, 0 when absent, -EINVAL when not a u32. */
int ctl_attr__parse(const struct nlmsghdr *nlh, size_t hdrlen, const struct nlattr **tb, uint16_t max);
int ctl_attr__u32(const struct nlattr *a, uint32_t *v);
/* RTAX_MTU of an RTA_METRICS nest into *mtu (left alone when absent); -EINVAL when malformed. */
int ctl_attr__metrics_mtu(const struct nlattr *metrics, uint32_t *mtu);
/* The first hop of an RTA_MULTIPATH: its interface, and its RTA_GATEWAY attribute or NULL (the
 * caller reads it in its family); -EINVAL when a length runs past the attribute. */
int ctl_attr__multipath_first(const struct nlattr *mp, uint32_t *oif, const struct nlattr **gateway);
/* AF_INET6 addresses, routes and neighbours (apply6.c); same contract as ctl_apply__msg. */
int ctl_apply6__addr(struct ctl_tables *t, const struct nlmsghdr *nlh);
int ctl_apply6__route(struct ctl_tables *t, const struct nlmsghdr *nlh);
int ctl_apply6__neigh(struct ctl_tables *t, const struct nlmsghdr *nlh);
/* A vanished link's IPv6 entries go with it. */
void ctl_apply6__purge(struct ctl_tables *t, uint32_t ifindex);

/* Seqlock writer side: seq is odd between the two calls. */
void ctl_tables__write_begin(struct ctl_tables *t);
void ctl_tables__write_end(struct ctl_tables *t);

#endif
