/* AF_XDP port: one UMEM shared by one socket per (interface, queue). Rings are process-local
 * mappings; the UMEM memory and its frame pool live in the caller's shared memory (memfd), so a
 * forked child can keep using them. Frames are addressed by UMEM offset everywhere. */
#ifndef SLIP_XSK_PORT_H
#define SLIP_XSK_PORT_H

#include <stdatomic.h>
#include <sys/types.h>

#include "base/types.h"
#include "xsk/frame_pool.h"

#define XSK_BURST_DEFAULT 64

enum xsk_bind_mode {
    XSK_BIND_AUTO,              /* zero-copy if the driver allows it, else copy */
    XSK_BIND_COPY,
    XSK_BIND_ZEROCOPY,          /* fails with a clear error when the driver refuses */
};

struct xsk_umem_area_config {
    uint32_t frame_size;        /* power of two, 2048 or 4096 */
    uint32_t nframes;
    uint32_t fill_size;         /* ring sizes, powers of two */
    uint32_t comp_size;
    uint32_t headroom;          /* bytes reserved before packet data in each frame */
};

struct xsk_port_config {
    const char *ifname;
    uint32_t queue_id;
    uint32_t rx_size, tx_size;  /* powers of two */
    uint32_t burst;             /* RX/TX burst, default XSK_BURST_DEFAULT */
    enum xsk_bind_mode mode;
    bool need_wakeup;           /* XDP_USE_NEED_WAKEUP (default on) */
    bool busy_poll;             /* SO_PREFER_BUSY_POLL + SO_BUSY_POLL + SO_BUSY_POLL_BUDGET */
    uint32_t busy_poll_usec;
    uint32_t busy_poll_budget;
};

/* What a frame holds: its UMEM offset (of the packet data) and the packet length. */
struct xsk_frame {
    uint64_t addr;
    uint32_t len;
    uint32_t pad_;
};

/* Kernel XDP_STATISTICS plus the port's own counters. */
struct xsk_port_stats {
    uint64_t rx_dropped;                /* kernel: dropped for reasons other than invalid desc */
    uint64_t rx_invalid_descs;
    uint64_t tx_invalid_descs;
    uint64_t rx_ring_full;
    uint64_t rx_fill_ring_empty_descs;
    uint64_t tx_ring_empty_descs;
    uint64_t rx_packets, rx_bursts;     /* software */
    uint64_t tx_packets, tx_kicks, tx_kick_eagain, tx_kick_ebusy, tx_ring_full;
    uint64_t fill_pool_empty;           /* refill found the frame pool empty */
    uint64_t fill_busy, comp_busy;      /* another stack held the queue's rings: left to it */
};

struct xsk_umem_area;
struct xsk_port;

/* Registers mem (size >= nframes * frame_size, page aligned, typically an mmap of a memfd) as a
 * UMEM and initialises pool (which must hold xsk_frame_pool__bytes(nframes)). On failure returns
 * negative errno and writes one line naming the cause (capability, memlock limit ...) into err. */
int xsk_umem_area__create(struct xsk_umem_area **out, void *mem, const struct xsk_umem_area_config *cfg,
                          struct xsk_frame_pool *pool, char *err, size_t errlen);
void xsk_umem_area__destroy(struct xsk_umem_area *u);
static inline void *xsk_umem_area__data_at(void *mem, uint64_t addr) { return (uint8_t *)mem + addr; }
void *xsk_umem_area__data(const struct xsk_umem_area *u, uint64_t addr);
struct xsk_frame_pool *xsk_umem_area__pool(const struct xsk_umem_area *u);
uint32_t xsk_umem_area__headroom(const struct xsk_umem_area *u);

/* Creates the AF_XDP socket for cfg->ifname/queue_id, binds it and fills the fill ring. No XDP
 * program is loaded (the caller's steering program redirects to xsk_port__fd()). On failure
 * returns negative errno and writes one line that names the cause into err. */
int xsk_port__create(struct xsk_port **out, struct xsk_umem_area *u, const struct xsk_port_config *cfg,
                     char *err, size_t errlen);
void xsk_port__destroy(struct xsk_port *p);
int xsk_port__fd(const struct xsk_port *p);
bool xsk_port__zerocopy(const struct xsk_port *p);
uint32_t xsk_port__queue(const struct xsk_port *p);
int xsk_port__ifindex(const struct xsk_port *p);

/* Takes up to max received frames (the caller owns them and returns them with
 * xsk_frame_pool__put), then tops up the fill ring from the pool (waking the kernel when
 * need_wakeup asks for it). */
unsigned xsk_port__rx_burst(struct xsk_port *p, struct xsk_frame *frames, unsigned max);
/* The same, but the frames stay on the RX ring until xsk_port__rx_release gives up its first n
 * (the caller owns them from then on): one at a time, a process killed inside a burst loses at
 * most the frame in its hands, and the ring's next reader (after a resync) gets the rest. */
unsigned xsk_port__rx_peek(struct xsk_port *p, struct xsk_frame *frames, unsigned max);
void xsk_port__rx_release(struct xsk_port *p, unsigned n);
/* Queues frames on the TX ring; returns how many were taken (the rest stay the caller's).
 * Frames are owned by the port until their completion comes back into the pool. */
unsigned xsk_port__tx_burst(struct xsk_port *p, const struct xsk_frame *frames, unsigned n);
/* Kicks the kernel if needed (sendto MSG_DONTWAIT, looping on EAGAIN/EBUSY within a bound) and
 * drains the completion ring into the pool. Returns 0 or negative errno. */
int xsk_port__tx_flush(struct xsk_port *p);
/* Descriptors on the TX ring that the kernel has not taken yet (queued, not yet kicked). */
uint32_t xsk_port__tx_queued(const struct xsk_port *p);
/* Frames on the fill ring the kernel has not taken yet (posted for reception). */
uint32_t xsk_port__fill_posted(const struct xsk_port *p);
/* Drains completions only. */
void xsk_port__complete(struct xsk_port *p);
/* True when the RX ring has descriptors waiting. */
bool xsk_port__rx_pending(const struct xsk_port *p);
int xsk_port__stats(struct xsk_port *p, struct xsk_port_stats *out);
/* The port's software counters live at area from now on (NULL: its own again): memory every
 * process using the port maps, so that each adds to one count and any of them (slipstream stat)
 * reads it. The kernel's counters are the socket's and need nothing. Increments are plain adds
 * by whoever drives the port: exact when one process at a time does (the stack's lock). */
void xsk_port__share_counters(struct xsk_port *p, struct xsk_port_stats *area);
/* Reloads the rings' cached indices from the shared ones: call after another process that maps
 * the same rings (a fork child or parent) may have used them. */
void xsk_port__resync(struct xsk_port *p);
/* Several stacks on one queue share its fill and completion rings (XDP_SHARED_UMEM): lock names
 * a word in memory they all map, taken with a try-lock around every refill and reap (a stack
 * that finds it held leaves the work to the holder, and counts fill_busy/comp_busy). The
 * indices are reloaded under it. NULL: this port's stack alone uses the rings. The lock word holds
 * the holder's pid (*self, kept current across fork by the caller): a holder found dead is
 * replaced, so a process killed inside the few instructions of a refill cannot stop the queue. */
void xsk_port__share_rings(struct xsk_port *p, _Atomic uint32_t *lock, const pid_t *self);

/* An exec'd image takes over a stack: the UMEM area over the same memory (already registered,
 * pool already in use) and each inherited, bound AF_XDP socket fd with its rings mapped again. */
int xsk_umem_area__adopt(struct xsk_umem_area **out, void *mem, const struct xsk_umem_area_config *cfg,
                         struct xsk_frame_pool *pool);
int xsk_port__adopt(struct xsk_port **out, struct xsk_umem_area *u, int fd, int ifindex, uint32_t queue,
                    uint32_t ring_size, uint32_t burst);
/* Another stack's socket on a queue that already has one on this UMEM (XDP_SHARED_UMEM):
 * share_fd is any socket bound to that (device, queue) on the UMEM, possibly another process's.
 * The new socket has its own RX and TX rings (so the XDP program can send a flow to it alone)
 * and shares the queue's fill and completion rings with every other socket there: whoever uses
 * those must hold the queue's lock (one user at a time), and each port reloads the rings'
 * indices before it touches them. cfg->mode is ignored: the queue's first bind chose it. */
int xsk_port__join(struct xsk_port **out, struct xsk_umem_area *u, int share_fd, const struct xsk_port_config *cfg,
                   char *err, size_t errlen);

#endif
