/* A path emulator for the benchmarks' router namespace: this kernel has no netem and no fq, and
 * a tc BPF program cannot hold packets without fq, so delay is done here. Two AF_PACKET sockets,
 * one per router port, take every IPv4 frame addressed to the router's MAC and not to one of its
 * own addresses; each frame waits in a FIFO for the one-way delay (and is dropped with the given
 * probability, as a lossy wire would), then leaves through the other port with the next hop's MAC.
 * The kernel must not forward those frames as well: the benchmark drops them at tc ingress
 * (tc_loss at 100 %, TCP/UDP only), which runs after AF_PACKET has seen them.
 *
 *   slip-delayfwd --if IF1,MAC1 --if IF2,MAC2 --delay-ms D [--ppm N] [--seed S]
 *
 * MACn is the host on the far side of IFn. Prints "ready" on stdout once both sockets are bound;
 * SIGTERM/SIGINT print "fwd0=N fwd1=N drop0=N drop1=N full0=N full1=N" and exit 0. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FRAME_MAX 1518
#define QCAP      32768        /* frames held per direction: 50 ms at ~900 MB/s of 1500-byte frames */

struct slot {
    uint64_t due_ns;
    uint16_t len;
    uint8_t data[FRAME_MAX];
};

struct port {
    int fd, ifindex;
    uint8_t mac[6];            /* ours */
    uint8_t peer[6];           /* the next hop beyond this port */
    uint32_t addr;             /* our IPv4 address on it (network order), 0 if none */
    /* Frames that arrived here and wait to leave through the other port. */
    struct slot *q;
    uint32_t head, n;
    uint64_t fwd, drop, full;
};

static volatile sig_atomic_t g_stop;
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static void on_signal(int s) { (void)s; g_stop = 1; }

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint32_t rnd(void)
{
    /* xorshift64*: enough for independent Bernoulli drops. */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (uint32_t)((g_rng * 2685821657736338717ull) >> 32);
}

static int parse_mac(const char *s, uint8_t m[6])
{
    unsigned v[6];
    if (sscanf(s, "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6)
        return -1;
    for (int i = 0; i < 6; i++) {
        if (v[i] > 255)
            return -1;
        m[i] = (uint8_t)v[i];
    }
    return 0;
}

static int port_open(struct port *p, const char *spec)
{
    char name[IFNAMSIZ];
    const char *comma = strchr(spec, ',');
    if (!comma || (size_t)(comma - spec) >= IFNAMSIZ || parse_mac(comma + 1, p->peer)) {
        fprintf(stderr, "slip-delayfwd: --if wants IF,MAC, not '%s'\n", spec);
        return -1;
    }
    memcpy(name, spec, (size_t)(comma - spec));
    name[comma - spec] = 0;
    /* ETH_P_ALL: only the "all protocols" taps run before tc ingress (which drops these frames
     * for the kernel); a socket for ETH_P_IP alone would never see them. */
    p->fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (p->fd < 0) {
        perror("slip-delayfwd: socket(AF_PACKET)");
        return -1;
    }
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    memcpy(ifr.ifr_name, name, strlen(name) + 1);
    if (ioctl(p->fd, SIOCGIFINDEX, &ifr) < 0) {
        fprintf(stderr, "slip-delayfwd: no interface '%s': %s\n", name, strerror(errno));
        return -1;
    }
    p->ifindex = ifr.ifr_ifindex;
    if (ioctl(p->fd, SIOCGIFHWADDR, &ifr) < 0) {
        perror("slip-delayfwd: SIOCGIFHWADDR");
        return -1;
    }
    memcpy(p->mac, ifr.ifr_hwaddr.sa_data, 6);
    if (ioctl(p->fd, SIOCGIFADDR, &ifr) == 0)
        p->addr = ((struct sockaddr_in *)&ifr.ifr_addr)->sin_addr.s_addr;
    int one = 1;
    /* Our own transmissions on this port are not input. */
    setsockopt(p->fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one));
    int big = 8 << 20;
    setsockopt(p->fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
    setsockopt(p->fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big));
    struct sockaddr_ll sll = { .sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
                               .sll_ifindex = p->ifindex };
    if (bind(p->fd, (struct sockaddr *)&sll, sizeof(sll)) < 0) {
        perror("slip-delayfwd: bind");
        return -1;
    }
    p->q = calloc(QCAP, sizeof(*p->q));
    if (!p->q) {
        perror("slip-delayfwd: calloc");
        return -1;
    }
    return 0;
}

/* Takes every frame waiting on in; queues those to forward with their due time. */
static void port_rx(struct port *in, uint64_t delay_ns, uint32_t ppm)
{
    for (;;) {
        struct slot tmp;
        struct sockaddr_ll from;
        socklen_t fl = sizeof(from);
        ssize_t n = recvfrom(in->fd, tmp.data, sizeof(tmp.data), MSG_DONTWAIT | MSG_TRUNC,
                             (struct sockaddr *)&from, &fl);
        if (n < 0)
            return;
        if (n > (ssize_t)sizeof(tmp.data)) {
            in->full++;             /* a GRO aggregate we cannot hold: counted, not forwarded */
            continue;
        }
        if (from.sll_pkttype != PACKET_HOST || n < 14 + 20 || tmp.data[12] != 0x08 || tmp.data[13] != 0x00)
            continue;
        uint32_t daddr;
        memcpy(&daddr, tmp.data + 14 + 16, 4);
        if (daddr == in->addr)
            continue;               /* for the router itself: the kernel's */
        if (ppm && (uint32_t)(((uint64_t)rnd() * 1000000u) >> 32) < ppm) {
            in->drop++;
            continue;
        }
        if (in->n == QCAP) {
            in->full++;             /* a full router queue: a tail drop, as a real one */
            continue;
        }
        struct slot *s = &in->q[(in->head + in->n) % QCAP];
        s->due_ns = now_ns() + delay_ns;
        s->len = (uint16_t)n;
        memcpy(s->data, tmp.data, (size_t)n);
        in->n++;
    }
}

/* Sends what is due from in's queue through out; returns ns until the next is due (or -1). */
static int64_t port_tx(struct port *in, struct port *out)
{
    uint64_t t = now_ns();
    while (in->n) {
        struct slot *s = &in->q[in->head];
        if (s->due_ns > t)
            return (int64_t)(s->due_ns - t);
        memcpy(s->data, out->peer, 6);
        memcpy(s->data + 6, out->mac, 6);
        struct sockaddr_ll to = { .sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_IP),
                                  .sll_ifindex = out->ifindex, .sll_halen = 6 };
        memcpy(to.sll_addr, out->peer, 6);
        if (sendto(out->fd, s->data, s->len, 0, (struct sockaddr *)&to, sizeof(to)) < 0 &&
            (errno == EAGAIN || errno == ENOBUFS))
            return 0;               /* try again next round */
        in->fwd++;
        in->head = (in->head + 1) % QCAP;
        in->n--;
    }
    return -1;
}

int main(int argc, char **argv)
{
    struct port p[2];
    memset(p, 0, sizeof(p));
    int nports = 0;
    double delay_ms = -1;
    uint32_t ppm = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--if") && i + 1 < argc && nports < 2) {
            if (port_open(&p[nports++], argv[++i]))
                return 1;
        } else if (!strcmp(argv[i], "--delay-ms") && i + 1 < argc) {
            delay_ms = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--ppm") && i + 1 < argc) {
            ppm = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            g_rng = strtoull(argv[++i], NULL, 10) | 1;
        } else {
            fprintf(stderr, "usage: slip-delayfwd --if IF1,MAC1 --if IF2,MAC2 --delay-ms D [--ppm N] [--seed S]\n");
            return 2;
        }
    }
    if (nports != 2 || delay_ms < 0 || delay_ms > 10000 || ppm > 1000000) {
        fprintf(stderr, "slip-delayfwd: two --if, --delay-ms in 0..10000 and --ppm in 0..1000000 needed\n");
        return 2;
    }
    struct sigaction sa = { .sa_handler = on_signal };
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    uint64_t delay_ns = (uint64_t)(delay_ms * 1e6);
    /* A frame leaves when due, not up to 50 us later (the default timer slack of a sleep). */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    printf("ready\n");
    fflush(stdout);
    while (!g_stop) {
        int64_t w0 = port_tx(&p[0], &p[1]), w1 = port_tx(&p[1], &p[0]);
        int64_t w = w0 < 0 ? w1 : (w1 < 0 ? w0 : (w0 < w1 ? w0 : w1));
        struct pollfd pf[2] = { { .fd = p[0].fd, .events = POLLIN }, { .fd = p[1].fd, .events = POLLIN } };
        /* Sleeps until a frame arrives or the queue's head is due (ppoll's nanoseconds, a
         * timer slack of 1 us): poll's milliseconds made every sub-millisecond wait
         * a spin, a core of the machine's two taken from the endpoints under test. */
        struct timespec ts = { .tv_sec = 0, .tv_nsec = 100000000 };
        if (w >= 0) {
            ts.tv_sec = (time_t)(w / 1000000000);
            ts.tv_nsec = (long)(w % 1000000000);
        }
        if (ppoll(pf, 2, &ts, NULL) < 0 && errno != EINTR)
            break;
        port_rx(&p[0], delay_ns, ppm);
        port_rx(&p[1], delay_ns, ppm);
    }
    printf("fwd0=%llu fwd1=%llu drop0=%llu drop1=%llu full0=%llu full1=%llu\n",
           (unsigned long long)p[0].fwd, (unsigned long long)p[1].fwd, (unsigned long long)p[0].drop,
           (unsigned long long)p[1].drop, (unsigned long long)p[0].full, (unsigned long long)p[1].full);
    return 0;
}
