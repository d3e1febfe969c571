/* `slipstream doctor [--iface IF]`: checks privileges, kernel features and (optionally) one
 * interface, printing `ok`/`warn`/`FAIL` lines that say what to do. It only looks: it never
 * attaches a program or changes a setting, because it may be pointed at a production NIC. */
#include <dirent.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include "tools/slipstream/cli.h"
#include "tools/slipstream/doctor_nl.h"

#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <net/if.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/capability.h>
#include <linux/ethtool.h>
#include <linux/if_link.h>
#include <linux/magic.h>
#include <linux/sockios.h>

#ifndef AF_XDP
#define AF_XDP 44
#endif
#ifndef CAP_BPF
#define CAP_BPF 39
#endif
#ifndef BPF_FS_MAGIC
#define BPF_FS_MAGIC 0xcafe4a11
#endif

/* A UMEM of 4096 frames of 4 KiB is locked memory; without CAP_IPC_LOCK it counts against
 * RLIMIT_MEMLOCK (AF_XDP still charges it there, unlike BPF maps since 5.11). */
#define DOCTOR_MEMLOCK_NEEDED (16ULL << 20)
/* Copy mode without multi-buffer carries a frame in one UMEM chunk: 4096 minus headroom and
 * skb_shared_info leaves a little over 3000 bytes of MTU to be safe with. */
#define DOCTOR_MTU_MAX_SINGLE_BUF 3000
#define DOCTOR_KERNEL_MIN_MAJOR 5
#define DOCTOR_KERNEL_MIN_MINOR 15

enum doctor_level { DOCTOR_OK, DOCTOR_WARN, DOCTOR_FAIL };

struct doctor {
    int fails;
    int warns;
    int ioctl_fd;               /* AF_INET datagram socket for SIOC* ioctls, -1 if none */
    bool may_load_bpf;          /* CAP_BPF or CAP_SYS_ADMIN in the effective set */
};

static void report(struct doctor *d, enum doctor_level lv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void report(struct doctor *d, enum doctor_level lv, const char *fmt, ...)
{
    static const char *const tag[] = { "ok   ", "warn ", "FAIL " };
    va_list ap;

    if (lv == DOCTOR_FAIL)
        d->fails++;
    else if (lv == DOCTOR_WARN)
        d->warns++;
    fputs(tag[lv], stdout);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
}

/* libbpf's own messages would interleave with the report; the report says what failed. */
static int quiet_libbpf(enum libbpf_print_level level, const char *fmt, va_list ap)
{
    return 0;
}

/* ---- privileges ------------------------------------------------------------------------------ */

static bool cap_has(const struct __user_cap_data_struct *data, int cap)
{
    return data[cap / 32].effective & (1U << (cap % 32));
}

static void check_privileges(struct doctor *d)
{
    struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
    struct __user_cap_data_struct data[2];
    const char *grant = "run as root, or grant it (setcap cap_net_admin,cap_net_raw,cap_bpf,"
                        "cap_ipc_lock+ep <binary>; docker/podman --cap-add)";

    memset(data, 0, sizeof(data));
    d->may_load_bpf = geteuid() == 0;
    if (syscall(SYS_capget, &hdr, data) != 0) {
        report(d, DOCTOR_WARN, "capabilities: capget failed (%s): cannot tell what is allowed",
               strerror(errno));
        return;
    }
    if (geteuid() == 0)
        report(d, DOCTOR_OK, "running as root (uid 0)");

    if (cap_has(data, CAP_NET_ADMIN))
        report(d, DOCTOR_OK, "CAP_NET_ADMIN (attach XDP programs)");
    else
        report(d, DOCTOR_FAIL, "CAP_NET_ADMIN missing (needed to attach XDP programs): %s", grant);

    if (cap_has(data, CAP_NET_RAW))
        report(d, DOCTOR_OK, "CAP_NET_RAW (open AF_XDP sockets)");
    else
        report(d, DOCTOR_FAIL, "CAP_NET_RAW missing (needed to open AF_XDP sockets): %s", grant);

    d->may_load_bpf = cap_has(data, CAP_BPF) || cap_has(data, CAP_SYS_ADMIN);
    if (cap_has(data, CAP_BPF))
        report(d, DOCTOR_OK, "CAP_BPF (load BPF programs and maps)");
    else if (cap_has(data, CAP_SYS_ADMIN))
        report(d, DOCTOR_OK, "CAP_SYS_ADMIN (stands in for CAP_BPF)");
    else
        report(d, DOCTOR_FAIL, "CAP_BPF missing (and no CAP_SYS_ADMIN; needed to load BPF "
               "programs): %s", grant);

    struct rlimit rl;
    bool rl_ok = getrlimit(RLIMIT_MEMLOCK, &rl) == 0;
    if (cap_has(data, CAP_IPC_LOCK)) {
        report(d, DOCTOR_OK, "CAP_IPC_LOCK (UMEM memory is not limited by RLIMIT_MEMLOCK)");
    } else if (rl_ok && (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= DOCTOR_MEMLOCK_NEEDED)) {
        if (rl.rlim_cur == RLIM_INFINITY)
            report(d, DOCTOR_OK, "RLIMIT_MEMLOCK unlimited (no CAP_IPC_LOCK needed)");
        else
            report(d, DOCTOR_OK, "RLIMIT_MEMLOCK %llu MiB (no CAP_IPC_LOCK needed)",
                   (unsigned long long)rl.rlim_cur >> 20);
    } else {
        report(d, DOCTOR_FAIL, "CAP_IPC_LOCK missing and RLIMIT_MEMLOCK is %llu KiB (the UMEM "
               "needs about %llu MiB locked): grant CAP_IPC_LOCK or raise it (ulimit -l "
               "unlimited, LimitMEMLOCK=infinity, docker --ulimit memlock=-1)",
               rl_ok ? (unsigned long long)rl.rlim_cur >> 10 : 0ULL,
               DOCTOR_MEMLOCK_NEEDED >> 20);
    }
}

/* ---- kernel ---------------------------------------------------------------------------------- */

static void check_kernel(struct doctor *d)
{
    struct utsname u;
    int major = 0, minor = 0;

    if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &major, &minor) != 2) {
        report(d, DOCTOR_WARN, "kernel version: cannot parse it: slipstream needs >= %d.%d",
               DOCTOR_KERNEL_MIN_MAJOR, DOCTOR_KERNEL_MIN_MINOR);
        return;
    }
    if (major > DOCTOR_KERNEL_MIN_MAJOR ||
        (major == DOCTOR_KERNEL_MIN_MAJOR && minor >= DOCTOR_KERNEL_MIN_MINOR))
        report(d, DOCTOR_OK, "kernel %s (>= %d.%d)", u.release, DOCTOR_KERNEL_MIN_MAJOR,
               DOCTOR_KERNEL_MIN_MINOR);
    else if (major == 5 && minor >= 4)
        /* need_wakeup and the rings slipstream uses exist since 5.4; older ones are untested. */
        report(d, DOCTOR_WARN, "kernel %s is older than %d.%d: untested, upgrade if anything "
               "misbehaves", u.release, DOCTOR_KERNEL_MIN_MAJOR, DOCTOR_KERNEL_MIN_MINOR);
    else
        report(d, DOCTOR_FAIL, "kernel %s is too old for AF_XDP as slipstream uses it: use "
               ">= %d.%d", u.release, DOCTOR_KERNEL_MIN_MAJOR, DOCTOR_KERNEL_MIN_MINOR);
}

static void check_af_xdp(struct doctor *d)
{
    int fd = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);

    if (fd >= 0) {
        close(fd);
        report(d, DOCTOR_OK, "AF_XDP sockets available");
    } else if (errno == EAFNOSUPPORT) {
        report(d, DOCTOR_FAIL, "AF_XDP sockets: not in this kernel: use a kernel built with "
               "CONFIG_XDP_SOCKETS=y");
    } else if (errno == EPERM || errno == EACCES) {
        report(d, DOCTOR_FAIL, "AF_XDP sockets: permission denied: needs CAP_NET_RAW");
    } else {
        report(d, DOCTOR_FAIL, "AF_XDP sockets: socket(AF_XDP) failed (%s): check the kernel "
               "configuration and seccomp/LSM policy", strerror(errno));
    }
}

static void check_bpf(struct doctor *d)
{
    int ret = libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_XDP, NULL);

    if (ret == 1)
        report(d, DOCTOR_OK, "BPF: XDP programs can be loaded");
    else if ((ret == 0 && !d->may_load_bpf) || ret == -EPERM || ret == -EACCES)
        /* libbpf's probe answers 0 for a refused load too: without the capability that is it. */
        report(d, DOCTOR_FAIL, "BPF: loading an XDP program is not permitted: needs CAP_BPF "
               "(or CAP_SYS_ADMIN) and CAP_NET_ADMIN");
    else if (ret == 0)
        report(d, DOCTOR_FAIL, "BPF: this kernel does not support XDP programs: use a kernel "
               "with CONFIG_BPF_SYSCALL and XDP");
    else
        report(d, DOCTOR_FAIL, "BPF: probing XDP support failed (%s): check the kernel "
               "configuration and seccomp/LSM policy", strerror(-ret));

    /* The interpreter works, but a stack per packet through it is far slower than JIT code. */
    FILE *f = fopen("/proc/sys/net/core/bpf_jit_enable", "r");
    int jit = -1;
    if (f) {
        if (fscanf(f, "%d", &jit) != 1)
            jit = -1;
        fclose(f);
    }
    if (jit == 0)
        report(d, DOCTOR_WARN, "BPF JIT disabled: sysctl -w net.core.bpf_jit_enable=1");
    else if (jit > 0)
        report(d, DOCTOR_OK, "BPF JIT enabled");
}

static void check_bpffs(struct doctor *d)
{
    struct statfs st;

    if (statfs("/sys/fs/bpf", &st) == 0 && (unsigned long)st.f_type == BPF_FS_MAGIC)
        report(d, DOCTOR_OK, "bpffs mounted at /sys/fs/bpf");
    else
        report(d, DOCTOR_WARN, "bpffs not mounted at /sys/fs/bpf (pinned maps need it): "
               "mount -t bpf bpf /sys/fs/bpf");
}

/* ---- interface ------------------------------------------------------------------------------- */

static int ethtool_ioctl(struct doctor *d, const char *ifname, void *cmd)
{
    struct ifreq ifr;

    if (d->ioctl_fd < 0)
        return -EBADF;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
    ifr.ifr_data = cmd;
    return ioctl(d->ioctl_fd, SIOCETHTOOL, &ifr) == 0 ? 0 : -errno;
}

/* One legacy ETHTOOL_G* boolean (tx csum, TSO, GRO): 1 on, 0 off, negative errno. */
static int ethtool_flag(struct doctor *d, const char *ifname, uint32_t cmd)
{
    struct ethtool_value ev = { .cmd = cmd };
    int ret = ethtool_ioctl(d, ifname, &ev);
    return ret < 0 ? ret : ev.data != 0;
}

static int count_sysfs_queues(const char *ifname, int *rx, int *tx)
{
    char path[128];
    struct dirent *de;

    snprintf(path, sizeof(path), "/sys/class/net/%s/queues", ifname);
    DIR *dir = opendir(path);
    if (!dir)
        return -errno;
    *rx = *tx = 0;
    while ((de = readdir(dir)) != NULL) {
        if (!strncmp(de->d_name, "rx-", 3))
            (*rx)++;
        else if (!strncmp(de->d_name, "tx-", 3))
            (*tx)++;
    }
    closedir(dir);
    return 0;
}

static void report_xdp_features(struct doctor *d, const char *ifname, int ifindex,
                                const char *driver)
{
    struct doctor_xdp_features f;
    int ret = doctor_nl__xdp_features(ifindex, &f);

    if (ret == -ENOENT) {
        report(d, DOCTOR_WARN, "XDP features: this kernel does not report them (netdev netlink "
               "family needs 6.3): native XDP and zero-copy support are unknown");
        return;
    }
    if (ret < 0) {
        report(d, DOCTOR_WARN, "XDP features: query failed (%s): native XDP and zero-copy "
               "support are unknown", strerror(-ret));
        return;
    }
    char list[128] = "";
    static const struct { uint64_t bit; const char *name; } names[] = {
        { DOCTOR_XDP_ACT_BASIC, "basic" }, { DOCTOR_XDP_ACT_REDIRECT, "redirect" },
        { DOCTOR_XDP_ACT_NDO_XMIT, "ndo_xmit" }, { DOCTOR_XDP_ACT_XSK_ZEROCOPY, "xsk_zerocopy" },
        { DOCTOR_XDP_ACT_HW_OFFLOAD, "hw_offload" }, { DOCTOR_XDP_ACT_RX_SG, "rx_sg" },
        { DOCTOR_XDP_ACT_NDO_XMIT_SG, "ndo_xmit_sg" },
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (f.flags & names[i].bit)
            snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
                     list[0] ? " " : "", names[i].name);

    if (f.flags & DOCTOR_XDP_ACT_BASIC)
        report(d, DOCTOR_OK, "native XDP: yes (%s)", list);
    else
        report(d, DOCTOR_WARN, "native XDP: no: driver '%s' of %s has no XDP support; only "
               "generic (skb) mode works, which is slower", driver, ifname);
    if ((f.flags & DOCTOR_XDP_ACT_BASIC) && !(f.flags & DOCTOR_XDP_ACT_REDIRECT))
        report(d, DOCTOR_WARN, "XDP_REDIRECT: not supported natively by '%s': AF_XDP needs "
               "it, so only generic mode works", driver);
    if (f.flags & DOCTOR_XDP_ACT_XSK_ZEROCOPY) {
        if (f.has_zc_max_segs)
            report(d, DOCTOR_OK, "AF_XDP zero-copy: yes (up to %u segment%s per packet)",
                   f.zc_max_segs, f.zc_max_segs == 1 ? "" : "s");
        else
            report(d, DOCTOR_OK, "AF_XDP zero-copy: yes");
    } else {
        report(d, DOCTOR_OK, "AF_XDP zero-copy: no (copy mode: works, costs one copy per "
               "packet)");
    }
}

static void report_attached(struct doctor *d, const char *ifname, int ifindex)
{
    LIBBPF_OPTS(bpf_xdp_query_opts, q);
    int ret = bpf_xdp_query(ifindex, 0, &q);

    if (ret < 0) {
        report(d, DOCTOR_WARN, "XDP attachment: query failed (%s)", strerror(-ret));
        return;
    }
    if (q.attach_mode == XDP_ATTACHED_NONE) {
        report(d, DOCTOR_OK, "no XDP program attached to %s", ifname);
        return;
    }
    static const struct { const char *mode; size_t off; } modes[] = {
        { "native", offsetof(struct bpf_xdp_query_opts, drv_prog_id) },
        { "generic", offsetof(struct bpf_xdp_query_opts, skb_prog_id) },
        { "offloaded", offsetof(struct bpf_xdp_query_opts, hw_prog_id) },
    };
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        uint32_t id = *(const uint32_t *)((const char *)&q + modes[i].off);
        if (!id)
            continue;
        /* The name tells slipstream's own program from someone else's; needs privileges. */
        char name[BPF_OBJ_NAME_LEN + 3] = "";
        int fd = bpf_prog_get_fd_by_id(id);
        if (fd >= 0) {
            struct bpf_prog_info info;
            uint32_t len = sizeof(info);
            memset(&info, 0, sizeof(info));
            if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && info.name[0])
                snprintf(name, sizeof(name), " '%s'", info.name);
            close(fd);
        }
        report(d, DOCTOR_WARN, "XDP program already attached to %s: id %u%s (%s mode): "
               "slipstream needs its own; if it is stale, look at `bpftool prog show id %u` "
               "and detach it with `ip link set dev %s xdp off`", ifname, id, name,
               modes[i].mode, id, ifname);
    }
}

static void report_queues(struct doctor *d, const char *ifname)
{
    struct ethtool_channels ch = { .cmd = ETHTOOL_GCHANNELS };
    int rx = 0, tx = 0;

    /* Some drivers (tun) answer with all zeros; sysfs then knows better. */
    if (ethtool_ioctl(d, ifname, &ch) == 0 && ch.rx_count + ch.tx_count + ch.combined_count) {
        report(d, DOCTOR_OK, "queues: %u rx, %u tx, %u combined (max %u/%u/%u; one AF_XDP "
               "socket per queue)", ch.rx_count, ch.tx_count, ch.combined_count,
               ch.max_rx, ch.max_tx, ch.max_combined);
    } else if (count_sysfs_queues(ifname, &rx, &tx) == 0) {
        report(d, DOCTOR_OK, "queues: %d rx, %d tx (from /sys/class/net/%s/queues)", rx, tx,
               ifname);
    } else {
        report(d, DOCTOR_WARN, "queues: cannot read the queue count of %s: slipstream will "
               "use queue 0 only", ifname);
    }
}

/* The veth peer decides what checksum state arrives here (TESTBED.md). */
static void report_veth_peer(struct doctor *d, int ifindex)
{
    struct doctor_link_peer peer;
    char peer_name[IF_NAMESIZE];

    if (doctor_nl__link_peer(ifindex, &peer) < 0 || !peer.ifindex) {
        report(d, DOCTOR_WARN, "veth peer: not found: make sure its tx checksum offload is off "
               "(ethtool -K <peer> tx off), or it sends CHECKSUM_PARTIAL frames");
        return;
    }
    if (peer.other_netns || !if_indextoname((unsigned)peer.ifindex, peer_name)) {
        report(d, DOCTOR_WARN, "veth peer: in another network namespace, not checked: its tx "
               "checksum offload must be off (ethtool -K <peer> tx off) or the kernel sends "
               "CHECKSUM_PARTIAL frames with unfinished checksums");
        return;
    }
    int csum = ethtool_flag(d, peer_name, ETHTOOL_GTXCSUM);
    if (csum == 1)
        report(d, DOCTOR_WARN, "veth peer %s has tx checksum offload on, so the kernel sends "
               "CHECKSUM_PARTIAL frames: ethtool -K %s tx off", peer_name, peer_name);
    else if (csum == 0)
        report(d, DOCTOR_OK, "veth peer %s: tx checksum offload off", peer_name);
}

static void report_offloads(struct doctor *d, const char *ifname, bool is_veth)
{
    int csum = ethtool_flag(d, ifname, ETHTOOL_GTXCSUM);
    int tso = ethtool_flag(d, ifname, ETHTOOL_GTSO);
    int gro = ethtool_flag(d, ifname, ETHTOOL_GGRO);
    static const char *const state[] = { "off", "on" };

    if (csum < 0 && tso < 0 && gro < 0) {
        report(d, DOCTOR_WARN, "offloads: cannot read them (%s)", strerror(-csum));
        return;
    }
    /* Frames slipstream sends always carry full checksums, so this only affects kernel traffic. */
    if (csum >= 0)
        report(d, DOCTOR_OK, "tx checksum offload: %s", state[csum]);
    if (tso >= 0) {
        if (is_veth && tso)
            report(d, DOCTOR_OK, "TSO: on (note: attaching XDP to a veth makes its peer lose "
                   "TSO; kernel TCP through it gets ~4x slower)");
        else
            report(d, DOCTOR_OK, "TSO: %s", state[tso]);
    }
    if (gro >= 0) {
        if (is_veth && !gro)
            report(d, DOCTOR_WARN, "GRO: off: kernel TCP sharing this veth with XDP wins back "
                   "part of the lost TSO with `ethtool -K %s gro on`", ifname);
        else
            report(d, DOCTOR_OK, "GRO: %s", state[gro]);
    }
}

static void check_iface(struct doctor *d, const char *ifname)
{
    unsigned ifindex = strlen(ifname) < IF_NAMESIZE ? if_nametoindex(ifname) : 0;
    struct ifreq ifr;

    if (!ifindex) {
        report(d, DOCTOR_FAIL, "interface '%s' does not exist: pick one from `ip link` "
               "(in this network namespace)", ifname);
        return;
    }
    report(d, DOCTOR_OK, "interface '%s' exists (ifindex %u)", ifname, ifindex);

    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
    if (d->ioctl_fd >= 0 && ioctl(d->ioctl_fd, SIOCGIFFLAGS, &ifr) == 0) {
        if (!(ifr.ifr_flags & IFF_UP))
            report(d, DOCTOR_WARN, "%s is down: ip link set dev %s up", ifname, ifname);
        else if (!(ifr.ifr_flags & IFF_RUNNING))
            report(d, DOCTOR_WARN, "%s is up but has no carrier: check the cable or the "
                   "other end (a veth peer must be up too)", ifname);
        else
            report(d, DOCTOR_OK, "%s is up", ifname);
        if (ifr.ifr_flags & IFF_LOOPBACK)
            report(d, DOCTOR_WARN, "%s is a loopback device: slipstream needs an Ethernet "
                   "interface", ifname);
    } else {
        report(d, DOCTOR_WARN, "%s: cannot read its flags (%s)", ifname, strerror(errno));
    }

    struct ethtool_drvinfo di = { .cmd = ETHTOOL_GDRVINFO };
    char driver[sizeof(di.driver) + 1] = "unknown";
    if (ethtool_ioctl(d, ifname, &di) == 0 && di.driver[0]) {
        snprintf(driver, sizeof(driver), "%s", di.driver);
        report(d, DOCTOR_OK, "driver: %s%s%s", driver, di.version[0] ? " " : "", di.version);
    } else {
        report(d, DOCTOR_WARN, "driver: unknown (ETHTOOL_GDRVINFO failed): XDP support "
               "depends on the driver");
    }
    bool is_veth = !strcmp(driver, "veth");

    report_xdp_features(d, ifname, (int)ifindex, driver);
    report_attached(d, ifname, (int)ifindex);
    report_queues(d, ifname);
    report_offloads(d, ifname, is_veth);
    if (is_veth)
        report_veth_peer(d, (int)ifindex);

    if (d->ioctl_fd >= 0 && ioctl(d->ioctl_fd, SIOCGIFMTU, &ifr) == 0) {
        if (ifr.ifr_mtu > DOCTOR_MTU_MAX_SINGLE_BUF)
            report(d, DOCTOR_WARN, "MTU %d: AF_XDP copy mode without multi-buffer needs MTU <= "
                   "frame size - headroom (use <= %d): ip link set dev %s mtu 1500",
                   ifr.ifr_mtu, DOCTOR_MTU_MAX_SINGLE_BUF, ifname);
        else
            report(d, DOCTOR_OK, "MTU %d", ifr.ifr_mtu);
    } else {
        report(d, DOCTOR_WARN, "MTU: cannot read it (%s)", strerror(errno));
    }
}

/* ---- block path -------------------------------------------------------------------------------- */

static long uring_try(unsigned flags)
{
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
    p.flags = flags;
    p.sq_thread_idle = 1;
    long fd = syscall(SYS_io_uring_setup, 4, &p);
    if (fd >= 0)
        close((int)fd);
    return fd < 0 ? -errno : 0;
}

/* sendfile into the stack's frames (SLIP_BLOCK_SENDFILE) reads with O_DIRECT what the page cache
 * does not hold, on files whose file system reports an O_DIRECT alignment (statx STATX_DIOALIGN,
 * Linux 6.1): asked of an unnamed file in the current folder. */
static void check_block_sendfile(struct doctor *d)
{
    /* An unnamed file (O_TMPFILE): nothing appears in the folder, and it goes with its fd. */
    int fd = open(".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return;                 /* a folder we cannot write, or no O_TMPFILE: nothing to say */
    struct statx sx;
    memset(&sx, 0, sizeof(sx));
    bool ok = statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN) &&
              sx.stx_dio_offset_align && sx.stx_dio_mem_align;
    close(fd);
    if (ok)
        report(d, DOCTOR_OK, "block path: sendfile to accelerated TCP sockets reads files of this folder's file "
               "system into the stack's frames (O_DIRECT alignment %u, buffers %u; what the page cache holds is "
               "copied from there once)", sx.stx_dio_offset_align, sx.stx_dio_mem_align);
    else
        report(d, DOCTOR_OK, "block path: this folder's file system reports no O_DIRECT alignment (tmpfs, or a "
               "kernel before 6.1): sendfile from its files copies through a buffer, as without --block");
}

/* The block path's engine is io_uring (`slipstream run --block`): whether rings, a submission
 * thread (SQPOLL) and polled completion (IOPOLL, per device) are there. */
static void check_block(struct doctor *d)
{
    long rc = uring_try(0);
    if (rc < 0) {
        report(d, DOCTOR_WARN, "block path: io_uring_setup fails (%s): --block passes every file call to the kernel",
               strerror((int)-rc));
        return;
    }
    rc = uring_try(IORING_SETUP_SQPOLL);
    report(d, rc < 0 ? DOCTOR_WARN : DOCTOR_OK, "block path: io_uring rings%s", rc < 0
           ? ", no SQPOLL thread here (each request then costs one io_uring_enter; SLIP_BLOCK_SQPOLL=0)"
           : " and a SQPOLL submission thread");
    DIR *dir = opendir("/sys/block");
    for (struct dirent *e; dir && (e = readdir(dir));) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], drv[300] = "", buf[32] = "";
        unsigned long long sectors = 0;
        snprintf(path, sizeof(path), "/sys/block/%s/size", e->d_name);
        FILE *f = fopen(path, "re");
        if (f) {
            if (fscanf(f, "%llu", &sectors) != 1)
                sectors = 0;
            fclose(f);
        }
        if (!sectors)
            continue;           /* an unused loop or zram device */
        snprintf(path, sizeof(path), "/sys/block/%s/queue/io_poll", e->d_name);
        f = fopen(path, "re");
        if (f) {
            if (!fgets(buf, sizeof(buf), f))
                buf[0] = 0;
            fclose(f);
        }
        snprintf(path, sizeof(path), "/sys/block/%s/device/driver", e->d_name);
        ssize_t n = readlink(path, drv, sizeof(drv) - 1);
        drv[n > 0 ? n : 0] = 0;
        const char *dn = strrchr(drv, '/') ? strrchr(drv, '/') + 1 : !strncmp(e->d_name, "zram", 4) ? "zram"
                         : !strncmp(e->d_name, "loop", 4) ? "loop" : "?";
        bool inline_dev = !strncmp(e->d_name, "zram", 4) || !strncmp(e->d_name, "ram", 3);
        if (buf[0] == '1')
            report(d, DOCTOR_OK, "block path: %s (%s): polled completion (IOPOLL) available: the engine polls "
                   "this device's queue instead of sleeping until the interrupt (SLIP_BLOCK_IOPOLL=1)", e->d_name, dn);
        else
            report(d, DOCTOR_OK, "block path: %s (%s): IOPOLL unavailable (no poll queues): completions come by "
                   "interrupt and are reaped from the ring in user space%s", e->d_name, dn,
                   inline_dev ? "; it completes inline, so the engine measures and steps aside" : "");
    }
    if (dir)
        closedir(dir);
    check_block_sendfile(d);
}

/* ---- command --------------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: slipstream doctor [--iface IF]\n"
               "Checks privileges and kernel features, and with --iface one interface, without\n"
               "changing anything. Prints ok/warn/FAIL lines; exits 1 if anything FAILed.\n");
}

int cmd_doctor(int argc, char **argv)
{
    struct doctor d = { .ioctl_fd = -1 };
    const char *iface = NULL;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--iface") || !strcmp(a, "-i")) {
            if (i + 1 >= argc || !argv[i + 1][0]) {
                fprintf(stderr, "slipstream doctor: option '%s' needs an interface name\n", a);
                return 2;
            }
            iface = argv[++i];
        } else if (!strncmp(a, "--iface=", 8) && a[8]) {
            iface = a + 8;
        } else if (a[0] == '-') {
            fprintf(stderr, "slipstream doctor: unknown option '%s' (try --help)\n", a);
            return 2;
        } else {
            fprintf(stderr, "slipstream doctor: unexpected argument '%s' (try --help)\n", a);
            return 2;
        }
    }

    libbpf_set_print(quiet_libbpf);
    setvbuf(stdout, NULL, _IOLBF, 0);
    d.ioctl_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

    check_privileges(&d);
    check_kernel(&d);
    check_af_xdp(&d);
    check_bpf(&d);
    check_bpffs(&d);
    check_block(&d);
    if (iface)
        check_iface(&d, iface);

    if (d.ioctl_fd >= 0)
        close(d.ioctl_fd);
    return d.fails ? 1 : 0;
}
