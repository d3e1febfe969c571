/* An AF_XDP port behind the device interface; see xsk_netdev.h. Each call is one burst. */
#include "xsk/xsk_netdev.h"

#include <stddef.h>

/* Bursts pass between the two frame types by pointer: the layouts must match. */
_Static_assert(sizeof(struct netdev_frame) == sizeof(struct xsk_frame), "frame layout");
_Static_assert(offsetof(struct netdev_frame, addr) == offsetof(struct xsk_frame, addr), "frame layout");
_Static_assert(offsetof(struct netdev_frame, len) == offsetof(struct xsk_frame, len), "frame layout");

static struct xsk_port *port_of(const struct netdev *d)
{
    return ((const struct xsk_netdev *)d)->port;
}

static unsigned xd_rx_burst(struct netdev *d, struct netdev_frame *f, unsigned max)
{
    return xsk_port__rx_burst(port_of(d), (struct xsk_frame *)f, max);
}

static unsigned xd_rx_peek(struct netdev *d, struct netdev_frame *f, unsigned max)
{
    return xsk_port__rx_peek(port_of(d), (struct xsk_frame *)f, max);
}

static void xd_rx_release(struct netdev *d, unsigned n)
{
    xsk_port__rx_release(port_of(d), n);
}

static unsigned xd_tx_enqueue(struct netdev *d, const struct netdev_frame *f, unsigned n)
{
    return xsk_port__tx_burst(port_of(d), (const struct xsk_frame *)f, n);
}

static int xd_kick(struct netdev *d)
{
    return xsk_port__tx_flush(port_of(d));
}

static uint32_t xd_tx_queued(const struct netdev *d)
{
    return xsk_port__tx_queued(port_of(d));
}

static void xd_complete(struct netdev *d)
{
    xsk_port__complete(port_of(d));
}

static bool xd_rx_pending(const struct netdev *d)
{
    return xsk_port__rx_pending(port_of(d));
}

static const struct netdev_ops xsk_netdev_ops = {
    .rx_burst = xd_rx_burst,
    .tx_enqueue = xd_tx_enqueue,
    .kick = xd_kick,
    .tx_queued = xd_tx_queued,
    .complete = xd_complete,
    .rx_pending = xd_rx_pending,
    .rx_peek = xd_rx_peek,
    .rx_release = xd_rx_release,
};

void xsk_netdev__init(struct xsk_netdev *x, struct xsk_port *p, uint32_t ifindex)
{
    x->dev = (struct netdev){ .ops = &xsk_netdev_ops, .ifindex = ifindex };
    x->port = p;
}
