/* What the stack's IPv6 packets must not let an outsider predict: flow labels and fragment
 * identifications, both keyed by the per-stack secret ip_shared.key.
 *
 * Flow labels (RFC 6437) on the stack's own packets, as Linux sets them with
 * net.ipv6.auto_flowlabels at its default (1): every TCP connection and UDP flow gets a label
 * that is the same for all its packets (so ECMP and LAG hashing on the label keep it on one path)
 * and that an off-path host cannot predict (RFC 7098 §3: a keyed hash, here SipHash over the
 * addresses, protocol and ports with a per-stack secret). With net.ipv6.flowlabel_state_ranges
 * at its default Linux keeps automatic labels in the upper half (0x80000 set), the lower half
 * being for labels a program leases; we do the same. */
#include "ip/ip6.h"

#include <stdio.h>
#include <string.h>

#include "base/siphash.h"

#define IP6_FLOW_STATELESS 0x80000u

void ip6_flow__init(struct ip_shared *sh, const uint8_t key[16])
{
    memcpy(sh->key, key, sizeof(sh->key));
    /* 0 off, 1 on unless a socket opts out, 2 off unless it opts in, 3 forced (Linux's
     * ip-sysctl.rst). Sockets cannot opt in or out here (IPV6_AUTOFLOWLABEL is the kernel
     * socket's only), so 1 and 3 label and 0 and 2 do not. No file (no IPv6): the default. */
    int v = 1;
    FILE *f = fopen("/proc/sys/net/ipv6/auto_flowlabels", "re");
    if (f) {
        if (fscanf(f, "%d", &v) != 1)
            v = 1;
        fclose(f);
    }
    sh->auto_flowlabels = v == 1 || v == 3;
}

uint32_t ip6_flow__label(const struct ip_shared *sh, const struct wire_ipv6_addr *src,
                         const struct wire_ipv6_addr *dst, uint8_t proto, uint16_t sport, uint16_t dport)
{
    if (!sh->auto_flowlabels)
        return 0;
    uint8_t buf[16 + 16 + 2 + 2 + 1];
    memcpy(buf, src, 16);
    memcpy(buf + 16, dst, 16);
    memcpy(buf + 32, &sport, 2);
    memcpy(buf + 34, &dport, 2);
    buf[36] = proto;
    uint64_t h = slip_siphash(sh->key, buf, sizeof(buf));
    return ((uint32_t)(h ^ (h >> 32)) & (IP6_FLOW_STATELESS - 1)) | IP6_FLOW_STATELESS;
}

uint32_t ip6_flow__frag_id(struct ip_shared *sh, const struct wire_ipv6_addr *src, const struct wire_ipv6_addr *dst)
{
    /* RFC 7739 §5.3: a keyed per-pair offset over a counter picked by another keyed hash of the
     * pair. An outsider can neither predict the identification of a datagram to someone else
     * nor count, from its own, what the stack sent to others (a counter is shared only within
     * its bucket); one destination's identifications still follow a counter, so they do not
     * repeat before 2^32 datagrams. */
    uint8_t buf[32];
    memcpy(buf, src, 16);
    memcpy(buf + 16, dst, 16);
    uint64_t h = slip_siphash(sh->key, buf, sizeof(buf));
    return (uint32_t)h + sh->id6[(h >> 32) % IP6_ID_BUCKETS]++;
}
