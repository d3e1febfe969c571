/* Loads and attaches the XDP steering program (bpf/steer.bpf.c) to one interface through a
 * bpf_link (it goes away with its owner), and edits its maps: which AF_XDP socket serves each
 * queue and which flows the stack owns. Everything not owned keeps going to the kernel. */
#ifndef SLIP_XSK_STEER_H
#define SLIP_XSK_STEER_H

#include "base/types.h"
#include "bpf/steer.h"

enum steer_xdp_mode {
    STEER_XDP_AUTO,             /* native (driver) mode, else generic with one warning line */
    STEER_XDP_NATIVE,           /* fail when the driver has no XDP */
    STEER_XDP_GENERIC,          /* skb mode */
};

struct steer;

/* On failure returns negative errno and writes one line naming the cause into err (missing
 * interface, missing capability, no native XDP, another XDP program already attached ...). */
/* max_flows sizes the owned-flow map (every socket of the stack may claim one entry); the map
 * is not preallocated, so entries cost kernel memory only while they exist. 0: STEER_MAX_FLOWS. */
int steer__attach(struct steer **out, const char *ifname, enum steer_xdp_mode mode, uint32_t max_flows, char *err,
                  size_t errlen);
void steer__detach(struct steer *s);
/* The fds that carry the attachment to another image (exec): link, xsks, owned, counters. */
void steer__export(const struct steer *s, int fds[4]);
/* Takes over those fds in a new image (no skeleton: maps are edited through their fds). */
int steer__adopt(struct steer **out, int ifindex, const int fds[4]);
int steer__ifindex(const struct steer *s);
bool steer__native(const struct steer *s);
/* The AF_XDP socket of stack `stack` (its index among the stacks sharing the interface, <
 * STEER_MAX_STACKS) for one queue: flows whose owned-map value names that stack go to it. */
int steer__set_xsk(struct steer *s, uint32_t stack, uint32_t queue_id, int xsk_fd);
int steer__clear_xsk(struct steer *s, uint32_t stack, uint32_t queue_id);
int steer__add(struct steer *s, const struct steer_key *k, const struct steer_val *v);
int steer__del(struct steer *s, const struct steer_key *k);
/* Deletes every owned flow naming stack (a dead stack's, before its index is used again) and
 * takes it out of every group it is a member of: how many, or negative errno. */
int steer__forget_stack(struct steer *s, uint32_t stack);
/* The same on an owned-flow map's fd (the unit tests' skeleton). */
int steer_map__forget_stack(int fd_owned, uint32_t stack);
/* IPv6 flows (slip_owned6). -EOPNOTSUPP when an adopted attachment could not find that map. */
int steer__add6(struct steer *s, const struct steer_key6 *k, const struct steer_val *v);
int steer__del6(struct steer *s, const struct steer_key6 *k);
/* SO_REUSEPORT listen keys shared by stacks (STEER_F_GROUP, steer_group.c). join makes stack a
 * member of key's group (creating it); origin >= 0: stack's listener is a worker's copy of
 * origin's, which is parked from then on (until it uses its listener, steer__unpark: while no
 * member is left unparked, the key's SYNs are dropped). leave takes stack out (the key goes with
 * its last member). The caller serialises edits (read-modify-write). */
int steer__join(struct steer *s, const struct steer_key *k, uint32_t stack, uint32_t pid, int origin);
int steer__join6(struct steer *s, const struct steer_key6 *k, uint32_t stack, uint32_t pid, int origin);
int steer__leave(struct steer *s, const struct steer_key *k, uint32_t stack);
int steer__leave6(struct steer *s, const struct steer_key6 *k, uint32_t stack);
int steer_map__join(int fd_owned, const void *key, uint32_t stack, uint32_t pid, int origin);
int steer_map__leave(int fd_owned, const void *key, uint32_t stack);
/* A parked stack takes new flows again (a process of it uses its listener): its copies become
 * plain members. 1 when it was parked, 0 when not, negative errno. */
int steer__unpark(struct steer *s, const struct steer_key *k, uint32_t stack);
int steer__unpark6(struct steer *s, const struct steer_key6 *k, uint32_t stack);
int steer_map__unpark(int fd_owned, const void *key, uint32_t stack);
/* The value edits themselves (pure; unit-tested). leave returns false when no member is left. */
void steer_val__unpark(struct steer_val *v, uint32_t stack);
void steer_val__join(struct steer_val *v, bool existed, uint32_t stack, uint32_t pid, int origin, uint32_t seed);
bool steer_val__leave(struct steer_val *v, uint32_t stack);
/* Sums the per-CPU counters into out[STEER_C__MAX]. */
int steer__counters(struct steer *s, uint64_t *out);
/* Human-readable counter names, index by enum steer_counter. */
const char *steer__counter_name(enum steer_counter c);

#endif
