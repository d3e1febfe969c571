/* Feeds arbitrary bytes to the control plane as a stream of rtnetlink messages (walked with
 * libmnl's own bounds checks, as ctl.c does with what the kernel sends), then exercises the
 * lookups on whatever tables resulted. */
#include <libmnl/libmnl.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/ctl.h"
#include "ctl/ctl_apply.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct ctl_tables t;
    /* netlink messages are 4-byte aligned in a kernel buffer: copy into one. */
    static uint32_t buf[16384];
    memset(&t, 0, sizeof(t));
    if (size > sizeof(buf))
        size = sizeof(buf);
    memcpy(buf, data, size);
    /* Walked by hand: libmnl 1.0.4's mnl_nlmsg_ok casts nlmsg_len to int, so a length above 2^31
     * passes its check (the kernel never sends one). */
    size_t off = 0;
    while (size - off >= sizeof(struct nlmsghdr)) {
        const struct nlmsghdr *nlh = (const void *)((const uint8_t *)buf + off);
        size_t l = nlh->nlmsg_len;
        if (l < sizeof(*nlh) || l > size - off)
            break;
        ctl_tables__write_begin(&t);
        ctl_apply__msg(&t, nlh);
        ctl_tables__write_end(&t);
        off += (l + 3) & ~(size_t)3;
        if (off > size)
            break;
    }
    struct ctl_nexthop nh;
    uint8_t mac[6];
    for (uint32_t i = 0; i < 8 && i < t.nroutes && i < CTL_MAX_ROUTES; i++)
        ctl_tables__route(&t, t.routes[i].dst | hton32(1), &nh);
    for (uint32_t i = 0; i < 8 && i < t.nneighs && i < CTL_MAX_NEIGHS; i++)
        ctl_tables__neigh(&t, t.neighs[i].ifindex, t.neighs[i].addr, mac);
    ctl_tables__route(&t, hton32(0xc6120001), &nh);
    ctl_tables__is_local(&t, hton32(0xc6120002), 0);
    return 0;
}
