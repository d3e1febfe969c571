/* An AF_XDP queue as a device (ip/netdev.h): the stack's data path reaches its xsk_port only
 * through this. The port itself (creation, fds, ring sharing, statistics) stays the stack's. */
#ifndef SLIP_XSK_NETDEV_H
#define SLIP_XSK_NETDEV_H

#include "ip/netdev.h"
#include "xsk/xsk_port.h"

struct xsk_netdev {
    struct netdev dev;
    struct xsk_port *port;
};

/* Makes x the device of port p (on interface ifindex). */
void xsk_netdev__init(struct xsk_netdev *x, struct xsk_port *p, uint32_t ifindex);

#endif
