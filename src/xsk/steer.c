/* Loader of the XDP steering program (bpf/steer.bpf.c): loads the embedded skeleton, attaches it
 * through a bpf_link so it disappears with the owning process, edits its maps, and turns every
 * failure into one line that says what is wrong and what to do. */
#include "xsk/steer.h"

#include <errno.h>
#include <net/if.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/capability.h>
#include <linux/ethtool.h>
#include <linux/if_link.h>
#include <linux/sockios.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "base/log.h"
#include "bpf/steer.skel.h"

struct steer {
    struct slip_steer *skel;    /* NULL when adopted from another image's fds */
    int link_fd;
    int ifindex;
    bool native;
    int fd_xsks, fd_owned, fd_counters;
    int fd_owned6;              /* slip_owned6, or -1 when an adopted link's program hid it */
};

static const char *const counter_names[STEER_C__MAX] = {
    [STEER_C_RX] = "rx",
    [STEER_C_REDIRECTED] = "redirected",
    [STEER_C_PASSED] = "passed",
    [STEER_C_MALFORMED] = "malformed",
    [STEER_C_NO_XSK] = "no_xsk",
    [STEER_C_FRAG] = "frag",
    [STEER_C_ICMP_ERR] = "icmp_err",
    [STEER_C_MULTIBUF] = "multibuf",
    [STEER_C_PARKED] = "parked_syn_dropped",
};

const char *steer__counter_name(enum steer_counter c)
{
    if ((unsigned)c >= STEER_C__MAX || !counter_names[c])
        return "unknown";
    return counter_names[c];
}

/* libbpf prints multi-line warnings (verifier logs, probe failures) on stderr by default; the
 * user gets our one-line error instead and can see libbpf's detail with SLIP_LOG=debug. */
static int libbpf_to_debug(enum libbpf_print_level level, const char *fmt, va_list ap)
{
    char line[512];
    size_t n;

    if (slip_log_get_level() < SLIP_LOG_DEBUG)
        return 0;
    vsnprintf(line, sizeof(line), fmt, ap);
    n = strlen(line);
    if (n && line[n - 1] == '\n')
        line[n - 1] = '\0';
    slip_debug("libbpf: %s", line);
    return 0;
}

/* Names the capabilities an EPERM is most likely about: loading an XDP program needs CAP_BPF and
 * CAP_NET_ADMIN (CAP_SYS_ADMIN stands in for either), attaching it needs CAP_NET_ADMIN. */
static void missing_caps(char *out, size_t len)
{
    struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
    bool bpf, net, sys;

    if (syscall(SYS_capget, &hdr, data)) {
        snprintf(out, len, "CAP_BPF and CAP_NET_ADMIN (or CAP_SYS_ADMIN)");
        return;
    }
#define HAS(c) (!!(data[(c) / 32].effective & (1u << ((c) % 32))))
    sys = HAS(CAP_SYS_ADMIN);
    bpf = HAS(CAP_BPF) || sys;
    net = HAS(CAP_NET_ADMIN) || sys;
#undef HAS
    if (!bpf && !net)
        snprintf(out, len, "CAP_BPF and CAP_NET_ADMIN (or CAP_SYS_ADMIN), both missing");
    else if (!bpf)
        snprintf(out, len, "CAP_BPF (or CAP_SYS_ADMIN), which is missing");
    else if (!net)
        snprintf(out, len, "CAP_NET_ADMIN (or CAP_SYS_ADMIN), which is missing");
    else
        snprintf(out, len, "CAP_BPF and CAP_NET_ADMIN (all present: a security module or "
                           "kernel.unprivileged_bpf_disabled may refuse)");
}

/* The driver's name makes "no native XDP" actionable (e.g. an old driver or a tunnel device). */
static void driver_name(const char *ifname, char *out, size_t len)
{
    struct ethtool_drvinfo info = { .cmd = ETHTOOL_GDRVINFO };
    struct ifreq ifr = {};
    int fd;

    snprintf(out, len, "unknown driver");
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
    ifr.ifr_data = (void *)&info;
    if (ioctl(fd, SIOCETHTOOL, &ifr) == 0 && info.driver[0])
        snprintf(out, len, "driver '%.*s'", (int)sizeof(info.driver), info.driver);
    close(fd);
}

static int attach_link(struct steer *s, uint32_t flags)
{
    LIBBPF_OPTS(bpf_link_create_opts, opts, .flags = flags);
    int fd = bpf_link_create(bpf_program__fd(s->skel->progs.slip_steer), s->ifindex, BPF_XDP, &opts);

    if (fd < 0)
        return fd < -1 ? fd : -errno;
    s->link_fd = fd;
    s->native = flags & XDP_FLAGS_DRV_MODE;
    return 0;
}

static void attach_error(const char *ifname, int ifindex, int rc, bool native, char *err, size_t errlen)
{
    uint32_t other = 0;
    char drv[64], caps[160];

    switch (rc) {
    case -EPERM:
    case -EACCES:
        missing_caps(caps, sizeof(caps));
        snprintf(err, errlen, "attaching XDP to '%s': %s; needs %s", ifname, strerror(-rc), caps);
        break;
    case -EBUSY:
    case -EEXIST:
        if (bpf_xdp_query_id(ifindex, 0, &other) == 0 && other)
            snprintf(err, errlen, "another XDP program (id %u) is already attached to '%s'; detach it first",
                     other, ifname);
        else
            snprintf(err, errlen, "another XDP program is already attached to '%s' (%s); detach it first",
                     ifname, strerror(-rc));
        break;
    case -EOPNOTSUPP:
        if (native) {
            driver_name(ifname, drv, sizeof(drv));
            snprintf(err, errlen, "'%s' (%s) has no native XDP support; use generic (skb) mode instead",
                     ifname, drv);
            break;
        }
        /* fall through */
    default:
        snprintf(err, errlen, "cannot attach XDP (%s mode) to '%s': %s",
                 native ? "native" : "generic", ifname, strerror(-rc));
        break;
    }
}

int steer__attach(struct steer **out, const char *ifname, enum steer_xdp_mode mode, uint32_t max_flows, char *err,
                  size_t errlen)
{
    libbpf_print_fn_t old_print = libbpf_set_print(libbpf_to_debug);
    struct steer *s = NULL;
    int rc;

    *out = NULL;
    if (errlen)
        err[0] = '\0';
    s = calloc(1, sizeof(*s));
    if (!s) {
        rc = -ENOMEM;
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    s->link_fd = -1;
    s->fd_owned6 = -1;
    s->ifindex = (int)if_nametoindex(ifname);
    if (!s->ifindex) {
        rc = -ENODEV;
        snprintf(err, errlen, "interface '%s' does not exist", ifname);
        goto out;
    }

    s->skel = slip_steer__open();
    if (!s->skel) {
        rc = -errno;
        snprintf(err, errlen, "cannot open the XDP steering program: %s", strerror(-rc));
        goto out;
    }
    /* Sized from the stack's tables at load time; BPF_F_NO_PREALLOC: a hash map of 100,000s of
     * entries would otherwise pin all of them in kernel memory up front. */
    bpf_map__set_max_entries(s->skel->maps.slip_owned, max_flows ? max_flows : STEER_MAX_FLOWS);
    bpf_map__set_map_flags(s->skel->maps.slip_owned, bpf_map__map_flags(s->skel->maps.slip_owned) | BPF_F_NO_PREALLOC);
    bpf_map__set_max_entries(s->skel->maps.slip_owned6, max_flows ? max_flows : STEER_MAX_FLOWS);
    bpf_map__set_map_flags(s->skel->maps.slip_owned6,
                           bpf_map__map_flags(s->skel->maps.slip_owned6) | BPF_F_NO_PREALLOC);
    rc = slip_steer__load(s->skel);
    if (rc) {
        rc = rc < -1 ? rc : -errno;
        if (rc == -EPERM || rc == -EACCES) {
            char caps[160];

            missing_caps(caps, sizeof(caps));
            snprintf(err, errlen, "loading the XDP steering program: %s; needs %s", strerror(-rc), caps);
        }
        else
            snprintf(err, errlen, "cannot load the XDP steering program: %s (SLIP_LOG=debug shows the verifier log)",
                     strerror(-rc));
        goto out;
    }
    s->fd_xsks = bpf_map__fd(s->skel->maps.slip_xsks);
    s->fd_owned = bpf_map__fd(s->skel->maps.slip_owned);
    s->fd_owned6 = bpf_map__fd(s->skel->maps.slip_owned6);
    s->fd_counters = bpf_map__fd(s->skel->maps.slip_counters);

    switch (mode) {
    case STEER_XDP_NATIVE:
        rc = attach_link(s, XDP_FLAGS_DRV_MODE);
        if (rc)
            attach_error(ifname, s->ifindex, rc, true, err, errlen);
        break;
    case STEER_XDP_GENERIC:
        rc = attach_link(s, XDP_FLAGS_SKB_MODE);
        if (rc)
            attach_error(ifname, s->ifindex, rc, false, err, errlen);
        break;
    case STEER_XDP_AUTO:
    default:
        rc = attach_link(s, XDP_FLAGS_DRV_MODE);
        /* Permission and an occupied hook fail the same way in generic mode: report them as they are. */
        if (rc && rc != -EPERM && rc != -EACCES && rc != -EBUSY && rc != -EEXIST) {
            char drv[64];

            driver_name(ifname, drv, sizeof(drv));
            slip_warn("native XDP on '%s' (%s) failed (%s); using generic XDP, which is slower",
                      ifname, drv, strerror(-rc));
            rc = attach_link(s, XDP_FLAGS_SKB_MODE);
            if (rc)
                attach_error(ifname, s->ifindex, rc, false, err, errlen);
        } else if (rc) {
            attach_error(ifname, s->ifindex, rc, true, err, errlen);
        }
        break;
    }
out:
    libbpf_set_print(old_print);
    if (rc) {
        steer__detach(s);
        return rc;
    }
    *out = s;
    return 0;
}

void steer__detach(struct steer *s)
{
    if (!s)
        return;
    /* Closing the last fd of the link detaches the program; the maps go with the skeleton. */
    if (s->link_fd >= 0)
        close(s->link_fd);
    if (s->skel) {
        slip_steer__destroy(s->skel);
    } else {
        close(s->fd_xsks);
        close(s->fd_owned);
        close(s->fd_counters);
        if (s->fd_owned6 >= 0)
            close(s->fd_owned6);
    }
    free(s);
}

void steer__export(const struct steer *s, int fds[4])
{
    fds[0] = s->link_fd;
    fds[1] = s->fd_xsks;
    fds[2] = s->fd_owned;
    fds[3] = s->fd_counters;
}

/* fd is a BPF map of this type with these key and value sizes (not one of somebody else's
 * objects, nor a file that would take our writes). */
static bool map_is(int fd, uint32_t type, uint32_t key_size, uint32_t value_size)
{
    struct bpf_map_info mi;
    uint32_t len = sizeof(mi);
    memset(&mi, 0, sizeof(mi));
    return bpf_obj_get_info_by_fd(fd, &mi, &len) == 0 && mi.type == type && mi.key_size == key_size &&
           mi.value_size == value_size;
}

/* The IPv6 owned-flow map of the program behind an adopted link, found by name among the
 * program's maps (the export format carries the IPv4 map only). -1 when it cannot be had (no
 * CAP_SYS_ADMIN for bpf_prog_get_fd_by_id): IPv6 then stays the kernel's. */
static int owned6_of_link(int link_fd)
{
    struct bpf_link_info li;
    uint32_t ll = sizeof(li);
    memset(&li, 0, sizeof(li));
    if (bpf_obj_get_info_by_fd(link_fd, &li, &ll) != 0)
        return -1;
    int pfd = bpf_prog_get_fd_by_id(li.prog_id);
    if (pfd < 0)
        return -1;
    uint32_t ids[16];
    struct bpf_prog_info pi;
    uint32_t pl = sizeof(pi);
    memset(&pi, 0, sizeof(pi));
    pi.nr_map_ids = SLIP_ARRAY_SIZE(ids);
    pi.map_ids = (uint64_t)(uintptr_t)ids;
    int found = -1;
    if (bpf_obj_get_info_by_fd(pfd, &pi, &pl) == 0) {
        for (uint32_t i = 0; i < SLIP_MIN(pi.nr_map_ids, (uint32_t)SLIP_ARRAY_SIZE(ids)) && found < 0; i++) {
            int mfd = bpf_map_get_fd_by_id(ids[i]);
            struct bpf_map_info mi;
            uint32_t ml = sizeof(mi);
            memset(&mi, 0, sizeof(mi));
            if (mfd >= 0 && bpf_obj_get_info_by_fd(mfd, &mi, &ml) == 0 && strcmp(mi.name, "slip_owned6") == 0 &&
                map_is(mfd, BPF_MAP_TYPE_HASH, sizeof(struct steer_key6), sizeof(struct steer_val)))
                found = mfd;
            else if (mfd >= 0)
                close(mfd);
        }
    }
    close(pfd);
    return found;
}

int steer__adopt(struct steer **out, int ifindex, const int fds[4])
{
    /* The fds may come from another process (a stack shared over a UNIX socket): check they are
     * the XDP link of this interface and the three maps the program uses before touching them. */
    struct bpf_link_info li;
    uint32_t ll = sizeof(li);
    memset(&li, 0, sizeof(li));
    if (bpf_obj_get_info_by_fd(fds[0], &li, &ll) != 0 || li.type != BPF_LINK_TYPE_XDP ||
        li.xdp.ifindex != (uint32_t)ifindex || !map_is(fds[1], BPF_MAP_TYPE_XSKMAP, 4, 4) ||
        !map_is(fds[2], BPF_MAP_TYPE_HASH, sizeof(struct steer_key), sizeof(struct steer_val)) ||
        !map_is(fds[3], BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8))
        return -EINVAL;
    struct steer *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->ifindex = ifindex;
    s->link_fd = fds[0];
    s->fd_xsks = fds[1];
    s->fd_owned = fds[2];
    s->fd_counters = fds[3];
    s->fd_owned6 = owned6_of_link(fds[0]);
    s->native = true;
    *out = s;
    return 0;
}

int steer__ifindex(const struct steer *s)
{
    return s->ifindex;
}

bool steer__native(const struct steer *s)
{
    return s->native;
}

int steer__set_xsk(struct steer *s, uint32_t stack, uint32_t queue_id, int xsk_fd)
{
    if (queue_id >= STEER_MAX_QUEUES || stack >= STEER_MAX_STACKS)
        return -EINVAL;
    uint32_t k = stack * STEER_MAX_QUEUES + queue_id;
    return bpf_map_update_elem(s->fd_xsks, &k, &xsk_fd, BPF_ANY);
}

int steer__clear_xsk(struct steer *s, uint32_t stack, uint32_t queue_id)
{
    int rc;

    if (queue_id >= STEER_MAX_QUEUES || stack >= STEER_MAX_STACKS)
        return -EINVAL;
    uint32_t k = stack * STEER_MAX_QUEUES + queue_id;
    rc = bpf_map_delete_elem(s->fd_xsks, &k);
    /* Clearing an empty slot is not an error: the caller wants it empty. */
    return rc == -ENOENT ? 0 : rc;
}

int steer__add(struct steer *s, const struct steer_key *k, const struct steer_val *v)
{
    struct steer_key key = *k;

    /* The program builds keys with zeroed padding; a caller's stray padding would never match. */
    memset(key.pad, 0, sizeof(key.pad));
    return bpf_map_update_elem(s->fd_owned, &key, v, BPF_ANY);
}

int steer__del(struct steer *s, const struct steer_key *k)
{
    struct steer_key key = *k;

    memset(key.pad, 0, sizeof(key.pad));
    return bpf_map_delete_elem(s->fd_owned, &key);
}

int steer__join(struct steer *s, const struct steer_key *k, uint32_t stack, uint32_t pid, int origin)
{
    struct steer_key key = *k;
    memset(key.pad, 0, sizeof(key.pad));
    return steer_map__join(s->fd_owned, &key, stack, pid, origin);
}

int steer__join6(struct steer *s, const struct steer_key6 *k, uint32_t stack, uint32_t pid, int origin)
{
    if (s->fd_owned6 < 0)
        return -EOPNOTSUPP;
    struct steer_key6 key = *k;
    memset(key.pad, 0, sizeof(key.pad));
    return steer_map__join(s->fd_owned6, &key, stack, pid, origin);
}

int steer__leave(struct steer *s, const struct steer_key *k, uint32_t stack)
{
    struct steer_key key = *k;
    memset(key.pad, 0, sizeof(key.pad));
    return steer_map__leave(s->fd_owned, &key, stack);
}

int steer__leave6(struct steer *s, const struct steer_key6 *k, uint32_t stack)
{
    if (s->fd_owned6 < 0)
        return -EOPNOTSUPP;
    struct steer_key6 key = *k;
    memset(key.pad, 0, sizeof(key.pad));
    return steer_map__leave(s->fd_owned6, &key, stack);
}

int steer__unpark(struct steer *s, const struct steer_key *k, uint32_t stack)
{
    struct steer_key key = *k;
    memset(key.pad, 0, sizeof(key.pad));
    return steer_map__unpark(s->fd_owned, &key, stack);
}

int steer__unpark6(struct steer *s, const struct steer_key6 *k, uint32_t stack)
{
    if (s->fd_owned6 < 0)
        return -EOPNOTSUPP;
    struct steer_key6 key = *k;
    memset(key.pad, 0, sizeof(key.pad));
    return steer_map__unpark(s->fd_owned6, &key, stack);
}

int steer__forget_stack(struct steer *s, uint32_t stack)
{
    int n = steer_map__forget_stack(s->fd_owned, stack);
    int n6 = s->fd_owned6 >= 0 ? steer_map__forget_stack(s->fd_owned6, stack) : 0;
    return n < 0 ? n : n6 < 0 ? n6 : n + n6;
}

/* Any owned-flow map (IPv4 or IPv6 keys: the key size is the map's). */
int steer_map__forget_stack(int fd_owned, uint32_t stack)
{
    struct bpf_map_info mi;
    uint32_t len = sizeof(mi);
    memset(&mi, 0, sizeof(mi));
    if (bpf_obj_get_info_by_fd(fd_owned, &mi, &len) != 0 || mi.value_size != sizeof(struct steer_val) ||
        mi.key_size == 0 || mi.key_size > 64)
        return -EINVAL;
    size_t ks = mi.key_size;
    uint8_t k[64], next[64];
    struct steer_val v;
    int n = 0;
    /* Deleting the key just visited would make get_next_key restart from the top (it does not
     * find prev): keys are collected first, a batch at a time, then deleted. */
    enum { BATCH = 256 };
    uint8_t *del = malloc(BATCH * ks);
    if (!del)
        return -ENOMEM;
    for (;;) {
        int nd = 0;
        bool first = true;
        while (nd < BATCH && bpf_map_get_next_key(fd_owned, first ? NULL : k, next) == 0) {
            memcpy(k, next, ks);
            first = false;
            if (bpf_map_lookup_elem(fd_owned, k, &v) == 0 &&
                ((v.flags & STEER_F_GROUP) ? (stack < STEER_MAX_STACKS && (v.members & (1u << stack))) : v.stack == stack))
                memcpy(del + (size_t)nd++ * ks, k, ks);
        }
        /* A group's key loses the member only (steer_map__leave deletes it with the last). */
        for (int i = 0; i < nd; i++)
            if (steer_map__leave(fd_owned, del + (size_t)i * ks, stack) == 0)
                n++;
        if (nd < BATCH)
            break;
    }
    free(del);
    return n;
}

int steer__add6(struct steer *s, const struct steer_key6 *k, const struct steer_val *v)
{
    if (s->fd_owned6 < 0)
        return -EOPNOTSUPP;
    struct steer_key6 key = *k;
    memset(key.pad, 0, sizeof(key.pad));
    return bpf_map_update_elem(s->fd_owned6, &key, v, BPF_ANY);
}

int steer__del6(struct steer *s, const struct steer_key6 *k)
{
    if (s->fd_owned6 < 0)
        return -EOPNOTSUPP;
    struct steer_key6 key = *k;
    memset(key.pad, 0, sizeof(key.pad));
    return bpf_map_delete_elem(s->fd_owned6, &key);
}

int steer__counters(struct steer *s, uint64_t *out)
{
    int ncpu = libbpf_num_possible_cpus();
    uint64_t *vals;
    int rc = 0;

    if (ncpu <= 0)
        return ncpu < 0 ? ncpu : -EINVAL;
    vals = calloc((size_t)ncpu, sizeof(*vals));
    if (!vals)
        return -ENOMEM;
    for (uint32_t i = 0; i < STEER_C__MAX; i++) {
        out[i] = 0;
        rc = bpf_map_lookup_elem(s->fd_counters, &i, vals);
        if (rc)
            break;
        for (int c = 0; c < ncpu; c++)
            out[i] += vals[c];
    }
    free(vals);
    return rc;
}
