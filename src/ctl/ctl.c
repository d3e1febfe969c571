/* Netlink side of the control plane: dumps the kernel's links, IPv4 and IPv6 addresses, main-table routes and
 * neighbours, follows their changes on a socket bound to the rtnetlink groups, and asks the kernel
 * to resolve neighbours. Three libmnl sockets: events (non-blocking, multicast), dump (blocking
 * request/answer) and request (non-blocking, for NTF_USE), so one never reads another's replies. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libmnl/libmnl.h>
#include <linux/if_addr.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include "base/log.h"
#include "base/sandbox.h"
#include "ctl/ctl_apply.h"

/* Big enough for the kernel's largest dump chunk (it fills up to 32 KiB per recvmsg). */
#define CTL_BUF_SIZE 32768
/* Bursts of route/neigh changes (a device going away) overrun the default 208 KiB quickly. */
#define CTL_EVENT_RCVBUF (4 << 20)
#define CTL_DUMP_RETRIES 5
/* Reads per ctl__process call, so a storm of changes cannot keep the caller here forever; what is
 * left keeps the fd readable. */
#define CTL_PROCESS_BUDGET 256

struct ctl {
    struct ctl_tables *t;
    struct mnl_socket *ev;      /* bound to RTMGRP_* */
    struct mnl_socket *dump;
    struct mnl_socket *req;
    uint32_t seq;
    struct ctl_tables *scratch; /* a re-dump builds here, then is published in one write section */
    char buf[CTL_BUF_SIZE];
};

struct apply_ctx {
    struct ctl_tables *t;
    int flags;                  /* CTL_APPLY_* ORed over the messages */
    int applied;
    bool intr;                  /* NLM_F_DUMP_INTR: the dump raced a change, redo it */
};

static int apply_cb(const struct nlmsghdr *nlh, void *data)
{
    struct apply_ctx *ctx = data;
    if (nlh->nlmsg_flags & NLM_F_DUMP_INTR)
        ctx->intr = true;
    int r = ctl_apply__msg(ctx->t, nlh);
    if (r < 0) {
        slip_debug("ctl: ignoring malformed rtnetlink message type %u", nlh->nlmsg_type);
        return MNL_CB_OK;
    }
    ctx->flags |= r;
    ctx->applied += (r & CTL_APPLY_USED) != 0;
    return MNL_CB_OK;
}

static struct mnl_socket *nl_open(unsigned int groups, bool nonblock)
{
    struct mnl_socket *nl = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0));
    if (!nl)
        return NULL;
    if (mnl_socket_bind(nl, groups, MNL_SOCKET_AUTOPID) < 0) {
        int e = errno;
        mnl_socket_close(nl);
        errno = e;
        return NULL;
    }
    return nl;
}

/* One dump request; messages are applied to t as they arrive. */
static int dump_one(struct ctl *c, struct apply_ctx *ctx, uint16_t type, uint8_t family)
{
    char req[MNL_NLMSG_HDRLEN + 64];
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(req);
    nlh->nlmsg_type = type;
    nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    nlh->nlmsg_seq = ++c->seq;
    /* The family byte leads every one of these headers; the rest of the request is zero. */
    size_t hdr;
    switch (type) {
    case RTM_GETLINK: hdr = sizeof(struct ifinfomsg); break;
    case RTM_GETADDR: hdr = sizeof(struct ifaddrmsg); break;
    case RTM_GETROUTE: hdr = sizeof(struct rtmsg); break;
    default: hdr = sizeof(struct ndmsg); break;
    }
    uint8_t *fam = mnl_nlmsg_put_extra_header(nlh, hdr);
    fam[0] = family;

    if (mnl_socket_sendto(c->dump, nlh, nlh->nlmsg_len) < 0)
        return -errno;
    uint32_t portid = mnl_socket_get_portid(c->dump);
    for (;;) {
        ssize_t n = mnl_socket_recvfrom(c->dump, c->buf, sizeof(c->buf));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        int r = mnl_cb_run(c->buf, (size_t)n, nlh->nlmsg_seq, portid, apply_cb, ctx);
        if (r == MNL_CB_ERROR)
            return errno ? -errno : -EIO;
        if (r == MNL_CB_STOP)
            return 0;
    }
}

static void publish(struct ctl_tables *t, const struct ctl_tables *s)
{
    ctl_tables__write_begin(t);
    t->nlinks = s->nlinks;
    t->naddrs = s->naddrs;
    t->nroutes = s->nroutes;
    t->nneighs = s->nneighs;
    t->updates += s->updates;
    t->overflows += s->overflows;
    memcpy(t->links, s->links, s->nlinks * sizeof(s->links[0]));
    memcpy(t->addrs, s->addrs, s->naddrs * sizeof(s->addrs[0]));
    memcpy(t->routes, s->routes, s->nroutes * sizeof(s->routes[0]));
    memcpy(t->neighs, s->neighs, s->nneighs * sizeof(s->neighs[0]));
    t->naddrs6 = s->naddrs6;
    t->nroutes6 = s->nroutes6;
    t->nneighs6 = s->nneighs6;
    memcpy(t->addrs6, s->addrs6, s->naddrs6 * sizeof(s->addrs6[0]));
    memcpy(t->routes6, s->routes6, s->nroutes6 * sizeof(s->routes6[0]));
    memcpy(t->neighs6, s->neighs6, s->nneighs6 * sizeof(s->neighs6[0]));
    ctl_tables__write_end(t);
}

/* Full re-dump into scratch, then one short write section on the shared tables, so readers are
 * never held off for the length of a dump. Events that arrived meanwhile are applied afterwards;
 * every change is "set this key to this value", so replaying them over a newer snapshot converges. */
static int ctl__resync(struct ctl *c)
{
    static const struct { uint16_t type; uint8_t family; } dumps[] = {
        { RTM_GETLINK, AF_UNSPEC }, { RTM_GETADDR, AF_INET },
        { RTM_GETROUTE, AF_INET }, { RTM_GETNEIGH, AF_INET },
        { RTM_GETADDR, AF_INET6 }, { RTM_GETROUTE, AF_INET6 }, { RTM_GETNEIGH, AF_INET6 },
    };
    for (int attempt = 0; attempt < CTL_DUMP_RETRIES; attempt++) {
        memset(c->scratch, 0, sizeof(*c->scratch));
        struct apply_ctx ctx = { .t = c->scratch };
        for (size_t i = 0; i < SLIP_ARRAY_SIZE(dumps); i++) {
            int err = dump_one(c, &ctx, dumps[i].type, dumps[i].family);
            if (err < 0) {
                slip_err("ctl: netlink dump (type %u) failed: %s", dumps[i].type, strerror(-err));
                return err;
            }
        }
        if (!ctx.intr) {
            publish(c->t, c->scratch);
            return 0;
        }
        slip_debug("ctl: dump interrupted by a concurrent change, retrying");
    }
    return -EAGAIN;
}

static void set_rcvbuf(struct mnl_socket *nl, int size)
{
    int fd = mnl_socket_get_fd(nl);
    /* FORCE needs CAP_NET_ADMIN; without it the plain option is capped by rmem_max. */
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)) < 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
}

int ctl__open(struct ctl **out, struct ctl_tables *t)
{
    int err;
    struct ctl *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->t = t;
    c->seq = (uint32_t)time(NULL);
    c->scratch = malloc(sizeof(*c->scratch));
    if (!c->scratch) {
        err = -ENOMEM;
        goto fail;
    }
    /* Subscribe before dumping so no change falls between the snapshot and the first event. */
    c->ev = nl_open(RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_NEIGH |
                    RTMGRP_IPV6_IFADDR | RTMGRP_IPV6_ROUTE, true);
    c->dump = nl_open(0, false);
    c->req = nl_open(0, true);
    if (!c->ev || !c->dump || !c->req) {
        err = -errno;
        slip_err("ctl: cannot open rtnetlink socket: %s", strerror(errno));
        goto fail;
    }
    set_rcvbuf(c->ev, CTL_EVENT_RCVBUF);
    err = ctl__resync(c);
    if (err < 0)
        goto fail;
    *out = c;
    return 0;
fail:
    ctl__close(c);
    return err;
}

void ctl__close(struct ctl *c)
{
    if (!c)
        return;
    if (c->ev)
        mnl_socket_close(c->ev);
    if (c->dump)
        mnl_socket_close(c->dump);
    if (c->req)
        mnl_socket_close(c->req);
    free(c->scratch);
    free(c);
}

int ctl__fd(const struct ctl *c)
{
    return mnl_socket_get_fd(c->ev);
}

int ctl__fds(const struct ctl *c, int fds[3])
{
    fds[0] = mnl_socket_get_fd(c->ev);
    fds[1] = mnl_socket_get_fd(c->dump);
    fds[2] = mnl_socket_get_fd(c->req);
    return 3;
}

/* Acks and errors of ctl__resolve requests; nothing waits for them, they only must not pile up. */
static void drain_req(struct ctl *c)
{
    for (;;) {
        ssize_t n = recv(mnl_socket_get_fd(c->req), c->buf, sizeof(c->buf), MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
    }
}

int ctl__process(struct ctl *c)
{
    int applied = 0;
    if (slip_sandbox__limited())
        return 0;       /* no netlink in a sandbox: the tables are shared, others keep them */
    bool resync = false;
    drain_req(c);
    for (int reads = 0; reads < CTL_PROCESS_BUDGET; reads++) {
        ssize_t n = recv(mnl_socket_get_fd(c->ev), c->buf, sizeof(c->buf), MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            if (errno == ENOBUFS) {
                /* The kernel dropped notifications: our tables are behind by an unknown amount. */
                slip_info("ctl: rtnetlink events overran the socket buffer, re-dumping");
                resync = true;
                continue;
            }
            return -errno;
        }
        if (n == 0)
            break;
        struct apply_ctx ctx = { .t = c->t };
        ctl_tables__write_begin(c->t);
        /* seq 0 / portid 0: notifications carry the seq and port of whoever caused them. */
        int r = mnl_cb_run(c->buf, (size_t)n, 0, 0, apply_cb, &ctx);
        ctl_tables__write_end(c->t);
        if (r == MNL_CB_ERROR)
            slip_debug("ctl: bad event batch: %s", strerror(errno));
        applied += ctx.applied;
        if (ctx.flags & CTL_APPLY_RESYNC)
            resync = true;
    }
    if (resync) {
        int err = ctl__resync(c);
        if (err < 0)
            return err;
    }
    return applied;
}

/* RTM_NEWNEIGH with NTF_USE for (family, ifindex, addr of alen bytes). */
static int resolve_req(struct ctl *c, uint8_t family, uint32_t ifindex, const void *addr, size_t alen)
{
    drain_req(c);
    char req[MNL_NLMSG_HDRLEN + 64];
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(req);
    nlh->nlmsg_type = RTM_NEWNEIGH;
    /* CREATE: neigh_add() answers -ENOENT for an absent entry without it. No REPLACE/EXCL: we add
     * no lladdr and must not fail on an entry that exists. ACK: the kernel handles the request
     * inside our sendmsg(), so its answer is already queued when sendto returns. */
    nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_ACK;
    nlh->nlmsg_seq = ++c->seq;
    struct ndmsg *ndm = mnl_nlmsg_put_extra_header(nlh, sizeof(*ndm));
    ndm->ndm_family = family;
    ndm->ndm_ifindex = (int)ifindex;
    ndm->ndm_state = NUD_NONE;
    /* NTF_USE: the kernel runs neigh_event_send() as if it had a packet to send, i.e. it starts
     * (or refreshes) resolution and sends the ARP request or neighbour solicitation itself. */
    ndm->ndm_flags = NTF_USE;
    mnl_attr_put(nlh, NDA_DST, alen, addr);

    if (mnl_socket_sendto(c->req, nlh, nlh->nlmsg_len) < 0)
        return errno == EAGAIN ? -EAGAIN : -errno;
    ssize_t r = recv(mnl_socket_get_fd(c->req), c->buf, sizeof(c->buf), MSG_DONTWAIT);
    if (r <= 0)
        return 0;               /* no answer yet: nothing to wait for */
    if (mnl_cb_run(c->buf, (size_t)r, nlh->nlmsg_seq, mnl_socket_get_portid(c->req), NULL, NULL) == MNL_CB_ERROR)
        return -errno;
    return 0;
}

int ctl__resolve(struct ctl *c, uint32_t ifindex, be32 ip)
{
    if (slip_sandbox__limited())
        return -EPERM;  /* as above; the next packet to ip from another thread asks again */
    /* NTF_USE on a PERMANENT entry would strip PERMANENT (__neigh_update with NEIGH_UPDATE_F_USE
     * keeps old & ~NUD_PERMANENT), and NOARP entries never need asking. */
    uint32_t n = SLIP_MIN(c->t->nneighs, (uint32_t)CTL_MAX_NEIGHS);
    for (uint32_t i = 0; i < n; i++) {
        const struct ctl_neigh *e = &c->t->neighs[i];
        if (e->ifindex == ifindex && e->addr == ip && (e->state & (NUD_PERMANENT | NUD_NOARP)))
            return 0;
    }
    return resolve_req(c, AF_INET, ifindex, &ip, sizeof(ip));
}

int ctl__resolve6(struct ctl *c, uint32_t ifindex, const struct wire_ipv6_addr *ip)
{
    if (slip_sandbox__limited())
        return -EPERM;
    uint32_t n = SLIP_MIN(c->t->nneighs6, (uint32_t)CTL_MAX_NEIGHS6);
    for (uint32_t i = 0; i < n; i++) {
        const struct ctl_neigh6 *e = &c->t->neighs6[i];
        if (e->ifindex == ifindex && memcmp(&e->addr, ip, sizeof(*ip)) == 0 &&
            (e->state & (NUD_PERMANENT | NUD_NOARP)))
            return 0;
    }
    return resolve_req(c, AF_INET6, ifindex, ip, sizeof(*ip));
}
