/* The devices of a stack (ip/netdev.h): each AF_XDP port wrapped as a device, and the transmit
 * queue of each interface on its first queue's device. The poll loop and the socket facades
 * move frames only through these. */
#include "stack/stack_int.h"

void devices_wire(struct slip_stack *s, unsigned i)
{
    struct stack_iface *f = &s->ifs[i];
    for (unsigned q = 0; q < f->nq; q++) {
        xsk_netdev__init(&f->xdev[q], f->ports[q], f->ifindex);
        f->dev[q] = &f->xdev[q].dev;
    }
    s->txq[i].dev = &f->xdev[0].dev;
    s->txq[i].ifindex = f->ifindex;
}

/* Kicks every device, which also reaps its transmit completions: sent frames back in the pool. */
void devices_kick_all(struct slip_stack *s)
{
    for (unsigned i = 0; i < s->nifs; i++)
        for (unsigned q = 0; q < s->ifs[i].nq; q++)
            netdev__kick(s->ifs[i].dev[q]);
}
