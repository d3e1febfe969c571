/* Netlink helpers for `slipstream doctor` (libmnl): the netdev generic-netlink family for XDP
 * features, rtnetlink for a veth's peer. One request, one answer each; nothing is changed. */
#include "tools/slipstream/doctor_nl.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <libmnl/libmnl.h>
#include <linux/genetlink.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>

/* UAPI of the netdev family (include/uapi/linux/netdev.h), absent from older headers. */
#define DOCTOR_NETDEV_FAMILY_NAME        "netdev"
#define DOCTOR_NETDEV_CMD_DEV_GET        1
#define DOCTOR_NETDEV_A_DEV_IFINDEX      1
#define DOCTOR_NETDEV_A_DEV_XDP_FEATURES 3
#define DOCTOR_NETDEV_A_DEV_XDP_ZC_MAX_SEGS 4

/* Sends one request and runs cb over the answer until the kernel's ACK/DONE. Negative errno. */
static int nl_transact(int bus, struct nlmsghdr *nlh, mnl_cb_t cb, void *data)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct mnl_socket *nl = mnl_socket_open(bus);
    int ret;

    if (!nl)
        return -errno;
    if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
        ret = -errno;
        goto out;
    }
    unsigned int portid = mnl_socket_get_portid(nl);
    uint32_t seq = nlh->nlmsg_seq;
    if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0) {
        ret = -errno;
        goto out;
    }
    for (;;) {
        ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
        if (n < 0) {
            ret = -errno;
            goto out;
        }
        ret = mnl_cb_run(buf, (size_t)n, seq, portid, cb, data);
        if (ret <= MNL_CB_STOP) {
            ret = ret < 0 ? -errno : 0;
            goto out;
        }
    }
out:
    mnl_socket_close(nl);
    return ret;
}

/* ---- generic netlink: family id of "netdev", then DEV_GET ---------------------------------- */

static int family_attr_cb(const struct nlattr *attr, void *data)
{
    if (mnl_attr_get_type(attr) == CTRL_ATTR_FAMILY_ID &&
        mnl_attr_validate(attr, MNL_TYPE_U16) >= 0)
        *(uint16_t *)data = mnl_attr_get_u16(attr);
    return MNL_CB_OK;
}

static int family_cb(const struct nlmsghdr *nlh, void *data)
{
    mnl_attr_parse(nlh, sizeof(struct genlmsghdr), family_attr_cb, data);
    return MNL_CB_OK;
}

static struct nlmsghdr *genl_start(char *buf, uint16_t type, uint8_t cmd)
{
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = type;
    nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
    nlh->nlmsg_seq = (uint32_t)time(NULL);
    struct genlmsghdr *g = mnl_nlmsg_put_extra_header(nlh, sizeof(*g));
    g->cmd = cmd;
    g->version = 1;
    return nlh;
}

static int dev_attr_cb(const struct nlattr *attr, void *data)
{
    struct doctor_xdp_features *f = data;

    switch (mnl_attr_get_type(attr)) {
    case DOCTOR_NETDEV_A_DEV_XDP_FEATURES:
        if (mnl_attr_validate(attr, MNL_TYPE_U64) >= 0)
            f->flags = mnl_attr_get_u64(attr);
        break;
    case DOCTOR_NETDEV_A_DEV_XDP_ZC_MAX_SEGS:
        if (mnl_attr_validate(attr, MNL_TYPE_U32) >= 0) {
            f->zc_max_segs = mnl_attr_get_u32(attr);
            f->has_zc_max_segs = true;
        }
        break;
    }
    return MNL_CB_OK;
}

static int dev_cb(const struct nlmsghdr *nlh, void *data)
{
    mnl_attr_parse(nlh, sizeof(struct genlmsghdr), dev_attr_cb, data);
    return MNL_CB_OK;
}

int doctor_nl__xdp_features(int ifindex, struct doctor_xdp_features *out)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    uint16_t family = 0;
    int ret;

    memset(out, 0, sizeof(*out));
    struct nlmsghdr *nlh = genl_start(buf, GENL_ID_CTRL, CTRL_CMD_GETFAMILY);
    mnl_attr_put_strz(nlh, CTRL_ATTR_FAMILY_NAME, DOCTOR_NETDEV_FAMILY_NAME);
    ret = nl_transact(NETLINK_GENERIC, nlh, family_cb, &family);
    if (ret < 0)
        return ret;     /* -ENOENT: the kernel does not know the family */
    if (!family)
        return -ENOENT;

    nlh = genl_start(buf, family, DOCTOR_NETDEV_CMD_DEV_GET);
    mnl_attr_put_u32(nlh, DOCTOR_NETDEV_A_DEV_IFINDEX, (uint32_t)ifindex);
    return nl_transact(NETLINK_GENERIC, nlh, dev_cb, out);
}

/* ---- rtnetlink: IFLA_LINK of a veth is its peer's ifindex ---------------------------------- */

static int link_attr_cb(const struct nlattr *attr, void *data)
{
    struct doctor_link_peer *p = data;

    switch (mnl_attr_get_type(attr)) {
    case IFLA_LINK:
        if (mnl_attr_validate(attr, MNL_TYPE_U32) >= 0)
            p->ifindex = (int)mnl_attr_get_u32(attr);
        break;
    case IFLA_LINK_NETNSID:
        p->other_netns = true;
        break;
    }
    return MNL_CB_OK;
}

static int link_cb(const struct nlmsghdr *nlh, void *data)
{
    mnl_attr_parse(nlh, sizeof(struct ifinfomsg), link_attr_cb, data);
    return MNL_CB_OK;
}

int doctor_nl__link_peer(int ifindex, struct doctor_link_peer *out)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];

    memset(out, 0, sizeof(*out));
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = RTM_GETLINK;
    nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
    nlh->nlmsg_seq = (uint32_t)time(NULL);
    struct ifinfomsg *ifm = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifm));
    ifm->ifi_family = AF_UNSPEC;
    ifm->ifi_index = ifindex;
    return nl_transact(NETLINK_ROUTE, nlh, link_cb, out);
}
