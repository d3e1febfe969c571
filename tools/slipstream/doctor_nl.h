/* Netlink queries used by `slipstream doctor`: read-only questions about an interface, answered
 * without attaching anything (doctor may run against a production NIC). */
#ifndef SLIP_TOOLS_DOCTOR_NL_H
#define SLIP_TOOLS_DOCTOR_NL_H

#include <stdbool.h>
#include <stdint.h>

/* Bits of NETDEV_A_DEV_XDP_FEATURES (enum netdev_xdp_act in <linux/netdev.h>, kernel >= 6.3),
 * spelled out here because older distribution headers lack that file. */
#define DOCTOR_XDP_ACT_BASIC        (1ULL << 0)
#define DOCTOR_XDP_ACT_REDIRECT     (1ULL << 1)
#define DOCTOR_XDP_ACT_NDO_XMIT     (1ULL << 2)
#define DOCTOR_XDP_ACT_XSK_ZEROCOPY (1ULL << 3)
#define DOCTOR_XDP_ACT_HW_OFFLOAD   (1ULL << 4)
#define DOCTOR_XDP_ACT_RX_SG        (1ULL << 5)
#define DOCTOR_XDP_ACT_NDO_XMIT_SG  (1ULL << 6)

struct doctor_xdp_features {
    uint64_t flags;            /* DOCTOR_XDP_ACT_* */
    uint32_t zc_max_segs;      /* valid if has_zc_max_segs */
    bool has_zc_max_segs;
};

/* Asks the "netdev" generic-netlink family for ifindex's XDP features (in the caller's network
 * namespace). 0, -ENOENT if the kernel has no such family (before 6.3), other negative errno. */
int doctor_nl__xdp_features(int ifindex, struct doctor_xdp_features *out);

struct doctor_link_peer {
    int ifindex;               /* IFLA_LINK, 0 if absent */
    bool other_netns;          /* IFLA_LINK_NETNSID present: the peer lives elsewhere */
};

/* Reads IFLA_LINK / IFLA_LINK_NETNSID of ifindex over rtnetlink (the veth peer). Negative errno. */
int doctor_nl__link_peer(int ifindex, struct doctor_link_peer *out);

#endif
