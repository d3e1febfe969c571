/* A stack: AF_XDP ports (one per interface queue) on one UMEM, the XDP steering program, the
 * mirrored control plane and all protocol state, in one shared arena behind one lock. This is
 * the small internal API that programs use until the POSIX layer exists; every call takes the
 * lock itself. Socket calls return negative errno. */
#ifndef SLIP_STACK_STACK_H
#define SLIP_STACK_STACK_H

#include <stdio.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "base/types.h"
#include "xsk/steer.h"
#include "xsk/xsk_port.h"

#define SLIP_MAX_IFACES 4
#define SLIP_MAX_QUEUES 16

struct slip_config {
    const char *ifnames[SLIP_MAX_IFACES];
    unsigned nifaces;
    uint32_t frame_size;        /* UMEM frame size (power of two) */
    uint32_t ring_size;         /* RX, TX, fill and completion rings */
    uint32_t burst;
    enum xsk_bind_mode bind;
    enum steer_xdp_mode xdp;
    bool busy_poll;
    uint32_t busy_poll_usec;
    uint32_t busy_poll_budget;
};

void slip_config__defaults(struct slip_config *c);
/* Reads SLIP_FRAME_SIZE, SLIP_RING_SIZE, SLIP_BURST, SLIP_BIND (auto|copy|zerocopy),
 * SLIP_XDP_MODE (auto|native|generic), SLIP_BUSY_POLL (usec, 0 = off), SLIP_BUSY_POLL_BUDGET.
 * A bad value gives -EINVAL and names the variable in err. */
int slip_config__from_env(struct slip_config *c, char *err, size_t errlen);

struct slip_stack;

/* Builds the arena, opens the control plane, attaches steering and opens one AF_XDP socket per
 * queue of every interface. On failure: negative errno and one line naming the cause in err. */
int slip_stack__open(struct slip_stack **out, const struct slip_config *cfg, char *err, size_t errlen);
void slip_stack__close(struct slip_stack *s);
/* Receives and processes what is waiting, runs due timers, sends what is queued. Returns the
 * next protocol deadline (CLOCK_MONOTONIC ns) or SLIP_TIME_NEVER. */
slip_time_t slip_stack__poll(struct slip_stack *s);
/* Sleeps until a port has frames, the control plane changed, the next deadline, or timeout_ms
 * (-1: no limit). Returns after polling once. */
int slip_stack__wait(struct slip_stack *s, int timeout_ms);
/* Prints every counter of the stack as `group.name value` lines. */
void slip_stack__dump(struct slip_stack *s, FILE *f);
/* Reads one counter by its `group.name` (as printed by dump); -ENOENT when unknown. */
int slip_stack__counter(struct slip_stack *s, const char *name, uint64_t *out);

/* UDP sockets. Binding reserves the same address and port in the kernel with a real UDP socket
 * (so no kernel application takes it, and port 0 gets a kernel-chosen ephemeral port) and claims
 * the port in the XDP program. */
int slip_udp__open(struct slip_stack *s);
int slip_udp__bind(struct slip_stack *s, int sock, be32 addr, uint16_t port);
int slip_udp__connect(struct slip_stack *s, int sock, be32 addr, uint16_t port);
int slip_udp__local(struct slip_stack *s, int sock, be32 *addr, uint16_t *port);
ssize_t slip_udp__sendto(struct slip_stack *s, int sock, const void *buf, size_t len, be32 dst, uint16_t dport);
ssize_t slip_udp__sendmsg(struct slip_stack *s, int sock, const struct iovec *iov, int iovcnt, be32 dst, uint16_t dport);
/* flags: UDP_RECV_PEEK, UDP_RECV_TRUNC (udp/udp.h). -EAGAIN when nothing is queued. */
ssize_t slip_udp__recvfrom(struct slip_stack *s, int sock, void *buf, size_t len, be32 *src, uint16_t *sport, unsigned flags);
int slip_udp__close(struct slip_stack *s, int sock);

#endif
