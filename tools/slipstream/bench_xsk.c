/* `slipstream bench xsk`: the raw AF_XDP baseline, in the spirit of the kernel's xdpsock sample.
 * One port on one queue, a memfd-backed shared UMEM exactly like the stack's, and three loops:
 * rxdrop (count and free), txonly (UDP/IPv4 frames as fast as the rings allow) and l2fwd (swap
 * MACs and send back). It prints one line per second and a parseable `result` line at the end. */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <net/if.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <linux/if_link.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "base/types.h"
#include "bpf/xsk_all.skel.h"
#include "tools/slipstream/cli.h"
#include "wire/eth.h"
#include "wire/ipv4.h"
#include "wire/udp.h"
#include "xsk/xsk_port.h"

#define BENCH_FRAME_SIZE 2048
#define BENCH_UDP_SPORT 1234
#define BENCH_UDP_DPORT 9           /* discard */

enum bench_mode { BENCH_RXDROP, BENCH_TXONLY, BENCH_L2FWD };
enum bench_xdp { BENCH_XDP_AUTO, BENCH_XDP_NATIVE, BENCH_XDP_GENERIC };

struct bench_opts {
    const char *iface;
    enum bench_mode mode;
    bool mode_set;
    double seconds;
    uint32_t queue;
    enum xsk_bind_mode bind;
    enum bench_xdp xdp;
    uint32_t size;
    uint32_t batch;
    bool busy_poll;
    bool need_wakeup;
    uint8_t dst_mac[6];
    be32 src_ip, dst_ip;
    uint32_t ring;
    uint32_t frames;
};

static const char *const mode_names[] = { "rxdrop", "txonly", "l2fwd" };
static volatile sig_atomic_t g_stop;

static void on_signal(int sig) { (void)sig; g_stop = 1; }

static void bench_usage(FILE *f)
{
    fprintf(f,
        "usage: slipstream bench xsk --iface IF --mode rxdrop|txonly|l2fwd [options]\n"
        "  --seconds N          run time (default 5)\n"
        "  --queue Q            interface queue (default 0)\n"
        "  --bind auto|copy|zerocopy   AF_XDP bind mode (default auto)\n"
        "  --xdp auto|native|generic   XDP attach mode for rxdrop/l2fwd (default auto)\n"
        "  --size N             txonly frame size in bytes without FCS, 60..1514 (default 64)\n"
        "  --batch N            RX/TX burst (default 64)\n"
        "  --busy-poll          SO_PREFER_BUSY_POLL + SO_BUSY_POLL=20 + budget=batch\n"
        "  --no-need-wakeup     do not bind with XDP_USE_NEED_WAKEUP\n"
        "  --dst-mac MAC        txonly destination (default ff:ff:ff:ff:ff:ff)\n"
        "  --src-ip A --dst-ip B   txonly addresses, inside 198.18.0.0/15 (default 198.18.0.1 -> .2)\n"
        "  --ring N             size of each ring (default 2048)\n"
        "  --frames N           UMEM frames of %d bytes (default 4 x ring)\n", BENCH_FRAME_SIZE);
}

static int bad_value(const char *opt, const char *val, const char *want)
{
    fprintf(stderr, "slipstream bench xsk: bad value '%s' for %s: %s\n", val, opt, want);
    return 2;
}

static bool parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 0);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = (uint32_t)v;
    return true;
}

static bool parse_mac(const char *s, uint8_t mac[6])
{
    unsigned b[6];
    char tail;
    if (sscanf(s, "%x:%x:%x:%x:%x:%x%c", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &tail) != 6)
        return false;
    for (int i = 0; i < 6; i++) {
        if (b[i] > 0xff)
            return false;
        mac[i] = (uint8_t)b[i];
    }
    return true;
}

/* Benchmark traffic stays inside 198.18.0.0/15 (RFC 2544's range), the project's safety rule. */
static bool parse_bench_ip(const char *s, be32 *out)
{
    struct in_addr a;
    if (inet_pton(AF_INET, s, &a) != 1)
        return false;
    if ((ntoh32(a.s_addr) & 0xfffe0000u) != 0xc6120000u)
        return false;
    *out = a.s_addr;
    return true;
}

/* Returns 0, or the exit status for bad input (2). Accepts `--opt value` and `--opt=value`. */
static int parse_opts(int argc, char **argv, struct bench_opts *o)
{
    for (int i = 0; i < argc; i++) {
        char name[64];
        const char *arg = argv[i], *val = NULL;
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            bench_usage(stdout);
            exit(0);
        }
        const char *eq = strchr(arg, '=');
        size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
        if (nlen >= sizeof(name))
            nlen = sizeof(name) - 1;
        memcpy(name, arg, nlen);
        name[nlen] = 0;

        static const char *const flags[] = { "--busy-poll", "--no-need-wakeup" };
        static const char *const valued[] = { "--iface", "--mode", "--seconds", "--queue", "--bind",
            "--xdp", "--size", "--batch", "--dst-mac", "--src-ip", "--dst-ip", "--ring", "--frames" };
        bool is_flag = false, is_valued = false;
        for (size_t k = 0; k < SLIP_ARRAY_SIZE(flags); k++)
            is_flag |= !strcmp(name, flags[k]);
        for (size_t k = 0; k < SLIP_ARRAY_SIZE(valued); k++)
            is_valued |= !strcmp(name, valued[k]);
        if (!is_flag && !is_valued) {
            fprintf(stderr, "slipstream bench xsk: unknown option '%s' (try --help)\n", arg);
            return 2;
        }
        if (is_flag) {
            if (eq) {
                fprintf(stderr, "slipstream bench xsk: option '%s' takes no value\n", name);
                return 2;
            }
            if (!strcmp(name, "--busy-poll"))
                o->busy_poll = true;
            else
                o->need_wakeup = false;
            continue;
        }
        if (eq) {
            val = eq + 1;
        } else if (i + 1 < argc) {
            val = argv[++i];
        } else {
            fprintf(stderr, "slipstream bench xsk: option '%s' needs a value\n", name);
            return 2;
        }

        if (!strcmp(name, "--iface")) {
            o->iface = val;
        } else if (!strcmp(name, "--mode")) {
            size_t k;
            for (k = 0; k < SLIP_ARRAY_SIZE(mode_names); k++)
                if (!strcmp(val, mode_names[k]))
                    break;
            if (k == SLIP_ARRAY_SIZE(mode_names))
                return bad_value(name, val, "rxdrop, txonly or l2fwd");
            o->mode = (enum bench_mode)k;
            o->mode_set = true;
        } else if (!strcmp(name, "--seconds")) {
            char *end;
            o->seconds = strtod(val, &end);
            if (end == val || *end || !(o->seconds > 0) || o->seconds > 86400)
                return bad_value(name, val, "a number of seconds > 0");
        } else if (!strcmp(name, "--queue")) {
            if (!parse_u32(val, 0, 1023, &o->queue))
                return bad_value(name, val, "a queue number");
        } else if (!strcmp(name, "--bind")) {
            if (!strcmp(val, "auto")) o->bind = XSK_BIND_AUTO;
            else if (!strcmp(val, "copy")) o->bind = XSK_BIND_COPY;
            else if (!strcmp(val, "zerocopy")) o->bind = XSK_BIND_ZEROCOPY;
            else return bad_value(name, val, "auto, copy or zerocopy");
        } else if (!strcmp(name, "--xdp")) {
            if (!strcmp(val, "auto")) o->xdp = BENCH_XDP_AUTO;
            else if (!strcmp(val, "native")) o->xdp = BENCH_XDP_NATIVE;
            else if (!strcmp(val, "generic")) o->xdp = BENCH_XDP_GENERIC;
            else return bad_value(name, val, "auto, native or generic");
        } else if (!strcmp(name, "--size")) {
            if (!parse_u32(val, WIRE_ETH_ZLEN, 1514, &o->size))
                return bad_value(name, val, "60..1514 bytes");
        } else if (!strcmp(name, "--batch")) {
            if (!parse_u32(val, 1, 1024, &o->batch))
                return bad_value(name, val, "1..1024");
        } else if (!strcmp(name, "--dst-mac")) {
            if (!parse_mac(val, o->dst_mac))
                return bad_value(name, val, "a MAC like aa:bb:cc:dd:ee:ff");
        } else if (!strcmp(name, "--src-ip")) {
            if (!parse_bench_ip(val, &o->src_ip))
                return bad_value(name, val, "an IPv4 address inside 198.18.0.0/15");
        } else if (!strcmp(name, "--dst-ip")) {
            if (!parse_bench_ip(val, &o->dst_ip))
                return bad_value(name, val, "an IPv4 address inside 198.18.0.0/15");
        } else if (!strcmp(name, "--ring")) {
            if (!parse_u32(val, 64, 32768, &o->ring) || (o->ring & (o->ring - 1)))
                return bad_value(name, val, "a power of two, 64..32768");
        } else if (!strcmp(name, "--frames")) {
            if (!parse_u32(val, 256, 1u << 20, &o->frames))
                return bad_value(name, val, "256..1048576");
        }
    }
    if (!o->iface) {
        fprintf(stderr, "slipstream bench xsk: --iface is required\n");
        return 2;
    }
    if (!o->mode_set) {
        fprintf(stderr, "slipstream bench xsk: --mode is required (rxdrop, txonly or l2fwd)\n");
        return 2;
    }
    if (!o->frames)
        o->frames = 4 * o->ring;
    if (o->frames < 2 * o->ring + o->batch) {
        fprintf(stderr, "slipstream bench xsk: --frames %u is too few for --ring %u (need >= %u)\n",
                o->frames, o->ring, 2 * o->ring + o->batch);
        return 2;
    }
    return 0;
}

/* ---- frame template (txonly) ------------------------------------------------------------- */

/* RFC 1071 sum, local so the benchmark does not depend on the wire module's state. */
static uint32_t csum_add(uint32_t sum, const void *data, size_t len)
{
    const uint8_t *p = data;
    for (; len > 1; p += 2, len -= 2)
        sum += (uint32_t)(p[0] << 8 | p[1]);
    if (len)
        sum += (uint32_t)p[0] << 8;
    return sum;
}

static be16 csum_fold(uint32_t sum)
{
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return hton16((uint16_t)~sum);
}

static int iface_mac(const char *ifname, uint8_t mac[6])
{
    struct ifreq ifr;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
    int ret = ioctl(fd, SIOCGIFHWADDR, &ifr) ? -errno : 0;
    close(fd);
    if (!ret)
        memcpy(mac, ifr.ifr_hwaddr.sa_data, 6);
    return ret;
}

/* A UDP/IPv4 datagram with valid IPv4 and UDP checksums, size bytes from the Ethernet header on. */
static void build_udp_frame(uint8_t *buf, const struct bench_opts *o, const uint8_t src_mac[6])
{
    memset(buf, 0, o->size);
    struct wire_eth_hdr *eth = (struct wire_eth_hdr *)buf;
    memcpy(eth->dst, o->dst_mac, 6);
    memcpy(eth->src, src_mac, 6);
    eth->type = hton16(WIRE_ETHERTYPE_IPV4);

    uint16_t ip_len = (uint16_t)(o->size - WIRE_ETH_HLEN);
    uint16_t udp_len = (uint16_t)(ip_len - WIRE_IPV4_HLEN_MIN);
    struct wire_ipv4_hdr *ip = (struct wire_ipv4_hdr *)(buf + WIRE_ETH_HLEN);
    ip->ver_ihl = 0x45;
    ip->tot_len = hton16(ip_len);
    ip->frag_off = hton16(WIRE_IPV4_DF);
    ip->ttl = 64;
    ip->proto = WIRE_IPPROTO_UDP;
    ip->src = o->src_ip;
    ip->dst = o->dst_ip;
    ip->csum = csum_fold(csum_add(0, ip, WIRE_IPV4_HLEN_MIN));

    uint8_t *l4 = (uint8_t *)ip + WIRE_IPV4_HLEN_MIN;
    struct wire_udp_hdr *udp = (struct wire_udp_hdr *)l4;
    udp->sport = hton16(BENCH_UDP_SPORT);
    udp->dport = hton16(BENCH_UDP_DPORT);
    udp->len = hton16(udp_len);
    for (uint32_t i = WIRE_UDP_HLEN; i < udp_len; i++)
        l4[i] = (uint8_t)i;
    /* RFC 768: checksum over the pseudo-header (src, dst, zero, proto, UDP length) and the
     * datagram; a computed zero is sent as all ones. */
    uint32_t sum = csum_add(0, &ip->src, 8);
    sum += WIRE_IPPROTO_UDP + udp_len;
    sum = csum_add(sum, l4, udp_len);
    be16 c = csum_fold(sum);
    udp->csum = c ? c : 0xffff;
}

/* ---- XDP program ------------------------------------------------------------------------- */

static int attach_xdp(struct slip_xsk_all *skel, int ifindex, const struct bench_opts *o, int *link_fd,
                      const char **how)
{
    int prog_fd = bpf_program__fd(skel->progs.slip_xsk_all);
    LIBBPF_OPTS(bpf_link_create_opts, lo);
    int fd = -1;
    if (o->xdp != BENCH_XDP_GENERIC) {
        lo.flags = XDP_FLAGS_DRV_MODE;
        fd = bpf_link_create(prog_fd, ifindex, BPF_XDP, &lo);
        *how = "native";
        if (fd < 0 && o->xdp == BENCH_XDP_AUTO && errno != EBUSY && errno != EEXIST && errno != EPERM) {
            fprintf(stderr, "slipstream bench xsk: warning: native XDP on %s failed (%s); using generic "
                    "(skb) mode, which is slower\n", o->iface, strerror(errno));
        } else if (fd < 0) {
            goto fail;
        }
    }
    if (fd < 0) {
        lo.flags = XDP_FLAGS_SKB_MODE;
        fd = bpf_link_create(prog_fd, ifindex, BPF_XDP, &lo);
        *how = "generic";
        if (fd < 0)
            goto fail;
    }
    *link_fd = fd;
    return 0;
fail:;
    int e = errno;
    if (e == EBUSY || e == EEXIST)
        fprintf(stderr, "slipstream bench xsk: another XDP program is attached to %s (see `ip link show "
                "%s`): detach it first\n", o->iface, o->iface);
    else if (e == EPERM)
        fprintf(stderr, "slipstream bench xsk: attaching XDP to %s needs CAP_NET_ADMIN and CAP_BPF\n",
                o->iface);
    else
        fprintf(stderr, "slipstream bench xsk: cannot attach %s XDP to %s: %s\n", *how, o->iface,
                strerror(e));
    return -e;
}

/* ---- loops ------------------------------------------------------------------------------- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * SLIP_SEC + (uint64_t)ts.tv_nsec;
}

struct bench_run {
    const struct bench_opts *o;
    struct xsk_port *port;
    struct xsk_frame_pool *pool;
    uint8_t *umem;
    uint32_t headroom;
    uint64_t rx, tx;            /* frames received, frames handed to the TX ring */
    int err;
};

static void step_rxdrop(struct bench_run *r, struct xsk_frame *f)
{
    unsigned n = xsk_port__rx_burst(r->port, f, r->o->batch);
    for (unsigned i = 0; i < n; i++)
        xsk_frame_pool__put(r->pool, r->o->frames, f[i].addr);
    r->rx += n;
}

static void step_txonly(struct bench_run *r, struct xsk_frame *f)
{
    /* Every frame already holds the template (written once at start), as in xdpsock: the loop
     * measures the rings, not memcpy. Frames come back unchanged through completions. */
    unsigned n = 0;
    while (n < r->o->batch) {
        uint64_t a = xsk_frame_pool__get(r->pool, r->o->frames);
        if (a == UINT64_MAX)
            break;
        f[n].addr = a + r->headroom;
        f[n].len = r->o->size;
        n++;
    }
    unsigned sent = xsk_port__tx_burst(r->port, f, n);
    for (unsigned i = sent; i < n; i++)
        xsk_frame_pool__put(r->pool, r->o->frames, f[i].addr);
    r->tx += sent;
    int ret = xsk_port__tx_flush(r->port);
    if (ret && !r->err)
        r->err = ret;
}

static void step_l2fwd(struct bench_run *r, struct xsk_frame *f)
{
    unsigned n = xsk_port__rx_burst(r->port, f, r->o->batch);
    r->rx += n;
    for (unsigned i = 0; i < n; i++) {
        uint8_t *p = r->umem + f[i].addr, tmp[6];
        memcpy(tmp, p, 6);
        memcpy(p, p + 6, 6);
        memcpy(p + 6, tmp, 6);
    }
    unsigned sent = n ? xsk_port__tx_burst(r->port, f, n) : 0;
    for (unsigned i = sent; i < n; i++)
        xsk_frame_pool__put(r->pool, r->o->frames, f[i].addr);
    r->tx += sent;
    int ret = xsk_port__tx_flush(r->port);
    if (ret && !r->err)
        r->err = ret;
}

static void run_loop(struct bench_run *r)
{
    const struct bench_opts *o = r->o;
    struct xsk_frame f[1024];
    uint64_t start = now_ns(), last = start, end = start + (uint64_t)(o->seconds * 1e9);
    uint64_t last_rx = 0, last_tx = 0;
    unsigned iter = 0;
    while (!g_stop && !r->err) {
        switch (o->mode) {
        case BENCH_RXDROP: step_rxdrop(r, f); break;
        case BENCH_TXONLY: step_txonly(r, f); break;
        case BENCH_L2FWD:  step_l2fwd(r, f); break;
        }
        if (++iter & 15)
            continue;
        uint64_t t = now_ns();
        if (t - last >= SLIP_SEC) {
            double dt = (double)(t - last) / 1e9;
            printf("rx pps=%.0f tx pps=%.0f\n", (double)(r->rx - last_rx) / dt, (double)(r->tx - last_tx) / dt);
            fflush(stdout);
            last = t;
            last_rx = r->rx;
            last_tx = r->tx;
        }
        if (t >= end)
            break;
    }
    double secs = (double)(now_ns() - start) / 1e9;
    /* Let the last TX batches leave before the socket closes. */
    for (int i = 0; i < 16 && o->mode != BENCH_RXDROP; i++)
        xsk_port__tx_flush(r->port);
    printf("result mode=%s seconds=%.2f rx_pkts=%llu tx_pkts=%llu rx_mpps=%.3f tx_mpps=%.3f\n",
           mode_names[o->mode], secs, (unsigned long long)r->rx, (unsigned long long)r->tx,
           (double)r->rx / secs / 1e6, (double)r->tx / secs / 1e6);
}

static void print_stats(struct xsk_port *port)
{
    struct xsk_port_stats s;
    if (xsk_port__stats(port, &s)) {
        printf("xdp_stats unavailable: %s\n", strerror(errno));
        return;
    }
    printf("xdp_stats rx_dropped=%llu rx_invalid_descs=%llu tx_invalid_descs=%llu rx_ring_full=%llu "
           "rx_fill_ring_empty_descs=%llu tx_ring_empty_descs=%llu\n",
           (unsigned long long)s.rx_dropped, (unsigned long long)s.rx_invalid_descs,
           (unsigned long long)s.tx_invalid_descs, (unsigned long long)s.rx_ring_full,
           (unsigned long long)s.rx_fill_ring_empty_descs, (unsigned long long)s.tx_ring_empty_descs);
    printf("port_stats rx_bursts=%llu tx_kicks=%llu tx_kick_eagain=%llu tx_kick_ebusy=%llu "
           "tx_ring_full=%llu fill_pool_empty=%llu\n",
           (unsigned long long)s.rx_bursts, (unsigned long long)s.tx_kicks,
           (unsigned long long)s.tx_kick_eagain, (unsigned long long)s.tx_kick_ebusy,
           (unsigned long long)s.tx_ring_full, (unsigned long long)s.fill_pool_empty);
}

/* ---- setup ------------------------------------------------------------------------------- */

/* The port's hint names the stack's option; here the bind mode is --bind. */
static void print_port_error(const char *err)
{
    const char *hint = strstr(err, "use --mode ");
    if (hint)
        fprintf(stderr, "slipstream bench xsk: %.*suse --bind %s\n", (int)(hint - err), err,
                hint + strlen("use --mode "));
    else
        fprintf(stderr, "slipstream bench xsk: %s\n", err);
}

static int bench_xsk(int argc, char **argv)
{
    struct bench_opts o = {
        .seconds = 5, .bind = XSK_BIND_AUTO, .xdp = BENCH_XDP_AUTO, .size = 64, .batch = 64,
        .need_wakeup = true, .dst_mac = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff }, .ring = 2048,
    };
    inet_pton(AF_INET, "198.18.0.1", &o.src_ip);
    inet_pton(AF_INET, "198.18.0.2", &o.dst_ip);
    int rc = parse_opts(argc, argv, &o);
    if (rc)
        return rc;

    int ifindex = (int)if_nametoindex(o.iface);
    if (!ifindex) {
        fprintf(stderr, "slipstream bench xsk: interface %s does not exist in this network namespace\n",
                o.iface);
        return 1;
    }
    uint8_t src_mac[6];
    if (iface_mac(o.iface, src_mac)) {
        fprintf(stderr, "slipstream bench xsk: cannot read the MAC address of %s\n", o.iface);
        return 1;
    }

    rc = 1;
    struct xsk_umem_area *area = NULL;
    struct xsk_port *port = NULL;
    struct slip_xsk_all *skel = NULL;
    int link_fd = -1;
    uint8_t *mem = MAP_FAILED;
    char err[256];

    /* UMEM and frame pool in one memfd, MAP_SHARED, as the stack lays them out. */
    size_t umem_bytes = (size_t)o.frames * BENCH_FRAME_SIZE;
    size_t pool_off = SLIP_ALIGN_UP(umem_bytes, (size_t)4096);
    size_t total = pool_off + SLIP_ALIGN_UP(xsk_frame_pool__bytes(o.frames), (size_t)4096);
    int mfd = memfd_create("slip-bench-umem", MFD_CLOEXEC);
    if (mfd < 0 || ftruncate(mfd, (off_t)total)) {
        fprintf(stderr, "slipstream bench xsk: memfd of %zu bytes: %s\n", total, strerror(errno));
        goto out;
    }
    mem = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, mfd, 0);
    if (mem == MAP_FAILED) {
        fprintf(stderr, "slipstream bench xsk: mmap of %zu bytes: %s\n", total, strerror(errno));
        goto out;
    }
    struct xsk_frame_pool *pool = (struct xsk_frame_pool *)(mem + pool_off);
    struct xsk_umem_area_config ucfg = {
        .frame_size = BENCH_FRAME_SIZE, .nframes = o.frames, .fill_size = o.ring, .comp_size = o.ring,
        .headroom = 0,
    };
    if (xsk_umem_area__create(&area, mem, &ucfg, pool, err, sizeof(err))) {
        fprintf(stderr, "slipstream bench xsk: %s\n", err);
        goto out;
    }

    struct xsk_port_config pcfg = {
        .ifname = o.iface, .queue_id = o.queue, .rx_size = o.ring, .tx_size = o.ring, .burst = o.batch,
        .mode = o.bind, .need_wakeup = o.need_wakeup, .busy_poll = o.busy_poll,
        .busy_poll_usec = 20, .busy_poll_budget = o.batch,
    };
    if (xsk_port__create(&port, area, &pcfg, err, sizeof(err))) {
        print_port_error(err);
        goto out;
    }

    const char *xdp_how = "none";
    if (o.mode != BENCH_TXONLY) {
        skel = slip_xsk_all__open_and_load();
        if (!skel) {
            fprintf(stderr, "slipstream bench xsk: loading the XDP program failed: %s (needs CAP_BPF "
                    "and CAP_NET_ADMIN)\n", strerror(errno));
            goto out;
        }
        int fd = xsk_port__fd(port);
        if (bpf_map_update_elem(bpf_map__fd(skel->maps.slip_bench_xsks), &o.queue, &fd, 0)) {
            fprintf(stderr, "slipstream bench xsk: cannot put the socket into the XSKMAP: %s\n",
                    strerror(errno));
            goto out;
        }
        if (attach_xdp(skel, ifindex, &o, &link_fd, &xdp_how))
            goto out;
    }

    struct bench_run r = {
        .o = &o, .port = port, .pool = pool, .umem = mem, .headroom = xsk_umem_area__headroom(area),
    };
    if (o.mode == BENCH_TXONLY) {
        /* Frames in the fill ring never come back in txonly; the rest carry the template. */
        for (uint32_t i = 0; i < o.frames; i++)
            build_udp_frame(mem + (size_t)i * BENCH_FRAME_SIZE + r.headroom, &o, src_mac);
    }

    printf("bench xsk iface=%s queue=%u mode=%s bind=%s xdp=%s size=%u batch=%u ring=%u frames=%u "
           "busy_poll=%d need_wakeup=%d\n", o.iface, o.queue, mode_names[o.mode],
           xsk_port__zerocopy(port) ? "zerocopy" : "copy", xdp_how, o.size, o.batch, o.ring, o.frames,
           o.busy_poll, o.need_wakeup);
    fflush(stdout);

    struct sigaction sa = { .sa_handler = on_signal };
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    run_loop(&r);
    print_stats(port);
    if (r.err) {
        fprintf(stderr, "slipstream bench xsk: transmit on %s failed: %s\n", o.iface, strerror(-r.err));
        goto out;
    }
    rc = 0;
out:
    if (link_fd >= 0)
        close(link_fd);         /* detaches the program */
    slip_xsk_all__destroy(skel);
    xsk_port__destroy(port);
    xsk_umem_area__destroy(area);
    if (mem != MAP_FAILED)
        munmap(mem, total);
    if (mfd >= 0)
        close(mfd);
    fflush(stdout);
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: slipstream bench <benchmark> [options]\n\nbenchmarks:\n"
                   "  xsk      raw AF_XDP: --iface IF --mode rxdrop|txonly|l2fwd (see bench xsk --help)\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "xsk"))
        return bench_xsk(argc - 2, argv + 2);
    fprintf(stderr, "slipstream bench: unknown benchmark '%s' (try 'slipstream bench --help')\n", argv[1]);
    return 2;
}
