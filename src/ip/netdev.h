/* The device seam between ip/ and whatever moves frames: an AF_XDP queue (xsk/netdev.c), the
 * fault injector stacked on one (stack/fault.c), a unit test's capture device. ip/ and the poll
 * loop see only this interface. A device works in bursts of frame descriptors (UMEM offset and
 * length); calls go through a small table, once per burst, never per byte. */
#ifndef SLIP_IP_NETDEV_H
#define SLIP_IP_NETDEV_H

#include "base/types.h"

/* One frame: its UMEM offset (of the packet data) and length. Same layout as struct xsk_frame
 * (xsk/netdev.c asserts it), so bursts pass through without copies. */
struct netdev_frame {
    uint64_t addr;
    uint32_t len;
    uint32_t pad_;
};

struct netdev;

struct netdev_ops {
    /* Takes up to max received frames (the caller owns them, frees them into the frame pool). */
    unsigned (*rx_burst)(struct netdev *d, struct netdev_frame *frames, unsigned max);
    /* Queues frames for transmission; returns how many were taken (the rest stay the caller's).
     * A taken frame is the device's until it comes back into the frame pool. */
    unsigned (*tx_enqueue)(struct netdev *d, const struct netdev_frame *frames, unsigned n);
    /* Hands queued frames to the hardware (or kernel) and reaps completions; 0 or -errno. */
    int (*kick)(struct netdev *d);
    /* Frames queued and not yet taken by the hardware (waiting for a kick). */
    uint32_t (*tx_queued)(const struct netdev *d);
    /* Reaps transmit completions only. */
    void (*complete)(struct netdev *d);
    /* True when received frames wait. */
    bool (*rx_pending)(const struct netdev *d);
    /* Optional: when the device wants rx_burst called again (frames it holds back), or
     * SLIP_TIME_NEVER. NULL: never. */
    slip_time_t (*deadline)(const struct netdev *d);
    /* Optional, both or neither: rx_peek reads up to max received frames and leaves them on the
     * device's ring, rx_release gives up the ring's first n of them (the caller owns those
     * frames from then on). A process killed while it works through a burst then leaves what it
     * had not reached yet on the ring, for whoever takes the ring over, where rx_burst's frames
     * would have gone with it (up to a burst). */
    unsigned (*rx_peek)(struct netdev *d, struct netdev_frame *frames, unsigned max);
    void (*rx_release)(struct netdev *d, unsigned n);
};

struct netdev {
    const struct netdev_ops *ops;
    uint32_t ifindex;
};

static inline unsigned netdev__rx_burst(struct netdev *d, struct netdev_frame *f, unsigned max)
{
    return d->ops->rx_burst(d, f, max);
}

/* Received frames left on the ring until netdev__rx_release (a device without rx_peek hands them
 * over at once, as rx_burst does, and its release does nothing). */
static inline unsigned netdev__rx_peek(struct netdev *d, struct netdev_frame *f, unsigned max)
{
    return d->ops->rx_peek ? d->ops->rx_peek(d, f, max) : d->ops->rx_burst(d, f, max);
}

static inline void netdev__rx_release(struct netdev *d, unsigned n)
{
    if (d->ops->rx_peek)
        d->ops->rx_release(d, n);
}

static inline unsigned netdev__tx_enqueue(struct netdev *d, const struct netdev_frame *f, unsigned n)
{
    return d->ops->tx_enqueue(d, f, n);
}

static inline int netdev__kick(struct netdev *d)
{
    return d->ops->kick(d);
}

static inline uint32_t netdev__tx_queued(const struct netdev *d)
{
    return d->ops->tx_queued(d);
}

static inline void netdev__complete(struct netdev *d)
{
    d->ops->complete(d);
}

static inline bool netdev__rx_pending(const struct netdev *d)
{
    return d->ops->rx_pending(d);
}

static inline slip_time_t netdev__deadline(const struct netdev *d)
{
    return d->ops->deadline ? d->ops->deadline(d) : SLIP_TIME_NEVER;
}

#endif
