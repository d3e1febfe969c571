/* The devices of a stack (ip/netdev.h): each AF_XDP port wrapped as a device, the fault injector
 * stacked on it when SLIP_FAULT_* asks for one (stack/fault.h), and the transmit queue of each
 * interface on its first queue's port. The poll loop and the socket facades move frames only
 * through these. */
#include "stack/stack_int.h"

/* Lock-free: at open and attach, before the stack is shared. fault: NULL or off for none. */
int devices_wire(struct slip_stack *s, unsigned i, const struct fault *fault)
{
    struct stack_iface *f = &s->ifs[i];
    for (unsigned q = 0; q < f->nq; q++) {
        /* i and q are within the shm's arrays: nifs and nq were checked (slip_stack__memory_bad). */
        xsk_port__share_counters(f->ports[q], &s->shm->xsk[i][q]);
        xsk_netdev__init(&f->xdev[q], f->ports[q], f->ifindex);
        f->dev[q] = &f->xdev[q].dev;
        if (!fault || !fault->on)
            continue;
        if (!(f->fault[q] = malloc(sizeof(*f->fault[q]))))
            return -ENOMEM;
        /* The configured seed for the first queue (one queue: the same run every time), a
         * seed of its own for each other queue. */
        struct fault cfg = *fault;
        cfg.rng += (uint64_t)(i * SLIP_MAX_QUEUES + q) * 0x9e3779b97f4a7c15ull;
        if (!cfg.rng)
            cfg.rng = 1;
        fault_dev__init(f->fault[q], f->dev[q], &cfg, &s->pool, &s->env.now);
        f->dev[q] = &f->fault[q]->dev;
    }
    /* Transmission goes to the port directly: the injector only impairs what is received. */
    s->txq[i].dev = &f->xdev[0].dev;
    s->txq[i].ifindex = f->ifindex;
    return 0;
}

/* Kicks every device, which also reaps its transmit completions: sent frames back in the pool. */
void devices_kick_all(struct slip_stack *s)
{
    for (unsigned i = 0; i < s->nifs; i++)
        for (unsigned q = 0; q < s->ifs[i].nq; q++)
            netdev__kick(s->ifs[i].dev[q]);
}

/* Before the ports go: frames the injectors hold go back to the pool. */
void devices_close(struct slip_stack *s)
{
    for (unsigned i = 0; i < SLIP_MAX_IFACES; i++)
        for (unsigned q = 0; q < SLIP_MAX_QUEUES; q++) {
            struct fault_dev *d = s->ifs[i].fault[q];
            if (!d)
                continue;
            if (s->pool.frames)
                fault_dev__close(d);
            free(d);
            s->ifs[i].fault[q] = NULL;
            s->ifs[i].dev[q] = &s->ifs[i].xdev[q].dev;
        }
}

/* A fork child: what the injectors hold is the parent's. */
void devices_forget(struct slip_stack *s)
{
    for (unsigned i = 0; i < s->nifs; i++)
        for (unsigned q = 0; q < s->ifs[i].nq; q++)
            if (s->ifs[i].fault[q])
                fault_dev__forget(s->ifs[i].fault[q]);
}

/* The injectors' counts, summed; false when there is none. */
bool devices_counters(const struct slip_stack *s, uint64_t *dropped, uint64_t *duplicated, uint64_t *reordered)
{
    bool any = false;
    *dropped = *duplicated = *reordered = 0;
    for (unsigned i = 0; i < s->nifs; i++)
        for (unsigned q = 0; q < s->ifs[i].nq; q++) {
            const struct fault_dev *d = s->ifs[i].fault[q];
            if (!d)
                continue;
            any = true;
            *dropped += d->dropped;
            *duplicated += d->duplicated;
            *reordered += d->reordered;
        }
    return any;
}
