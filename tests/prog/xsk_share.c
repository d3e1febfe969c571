/* Two stacks on one queue, at the AF_XDP level (tests/system/test_xsk_share.py): one UMEM, the
 * queue's first socket made by xsk_port__create ("stack 0"), a second one bound to the same
 * queue with XDP_SHARED_UMEM by xsk_port__join ("stack 1"), and the steering program sending
 * UDP port A to stack 0 and port B to stack 1. Counts what each socket receives, by destination
 * port. On SIGUSR1 stack 1's socket goes away (as when a stack dies): its flows must then reach
 * the kernel, never stack 0.
 *
 *   xsk_share IFNAME PORT_A PORT_B SECONDS
 *
 * Prints "ready" once both sockets are bound and claimed, "gone" after SIGUSR1, and at the end
 * one line: stack0_a=N stack0_b=N stack1_a=N stack1_b=N other=N no_xsk=N fill_empty=N. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/in.h>

#include "xsk/steer.h"
#include "xsk/xsk_port.h"

#define NFRAMES 8192
#define RING 1024

static volatile sig_atomic_t g_drop;

static void on_usr1(int sig)
{
    (void)sig;
    g_drop = 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Destination UDP port of an Ethernet/IPv4/UDP frame, 0 if it is not one. */
static unsigned udp_dport(const uint8_t *f, uint32_t len)
{
    if (len < 14 + 20 + 8 || f[12] != 0x08 || f[13] != 0x00 || (f[14] >> 4) != 4 || f[23] != IPPROTO_UDP)
        return 0;
    uint32_t ihl = (f[14] & 15u) * 4u;
    if (ihl < 20 || len < 14 + ihl + 8)
        return 0;
    return (unsigned)f[14 + ihl + 2] << 8 | f[14 + ihl + 3];
}

int main(int argc, char **argv)
{
    char err[256];
    if (argc != 5) {
        fprintf(stderr, "usage: xsk_share IFNAME PORT_A PORT_B SECONDS\n");
        return 2;
    }
    const char *ifname = argv[1];
    unsigned pa = (unsigned)atoi(argv[2]), pb = (unsigned)atoi(argv[3]);
    double secs = atof(argv[4]);
    signal(SIGUSR1, on_usr1);

    size_t umem_bytes = (size_t)NFRAMES * 2048;
    void *mem = mmap(NULL, umem_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    struct xsk_frame_pool *pool = malloc(xsk_frame_pool__bytes(NFRAMES));
    if (mem == MAP_FAILED || !pool) {
        perror("memory");
        return 1;
    }
    xsk_frame_pool__init(pool, NFRAMES, 2048);
    struct xsk_umem_area_config ucfg = { .frame_size = 2048, .nframes = NFRAMES, .fill_size = RING,
                                         .comp_size = RING };
    struct xsk_umem_area *u;
    if (xsk_umem_area__create(&u, mem, &ucfg, pool, err, sizeof(err))) {
        fprintf(stderr, "umem: %s\n", err);
        return 1;
    }
    struct steer *st;
    if (steer__attach(&st, ifname, STEER_XDP_AUTO, 0, err, sizeof(err))) {
        fprintf(stderr, "steer: %s\n", err);
        return 1;
    }
    struct xsk_port_config pc = { .ifname = ifname, .queue_id = 0, .rx_size = RING, .tx_size = RING,
                                  .mode = XSK_BIND_AUTO, .need_wakeup = true };
    struct xsk_port *p[2] = { NULL, NULL };
    if (xsk_port__create(&p[0], u, &pc, err, sizeof(err))) {
        fprintf(stderr, "stack 0 socket: %s\n", err);
        return 1;
    }
    if (xsk_port__join(&p[1], u, xsk_port__fd(p[0]), &pc, err, sizeof(err))) {
        fprintf(stderr, "stack 1 socket: %s\n", err);
        return 1;
    }
    for (uint32_t k = 0; k < 2; k++) {
        int rc = steer__set_xsk(st, k, 0, xsk_port__fd(p[k]));
        struct steer_key key = { .lport = htons((uint16_t)(k ? pb : pa)), .proto = IPPROTO_UDP };
        struct steer_val v = { .stack = (uint16_t)k, .pid = (uint32_t)getpid() };
        if (rc || (rc = steer__add(st, &key, &v))) {
            fprintf(stderr, "claiming for stack %u: %s\n", k, strerror(-rc));
            return 1;
        }
    }
    printf("ready\n");
    fflush(stdout);

    uint64_t got[2][2] = { { 0 } }, other = 0;
    double end = now_s() + secs;
    bool gone = false;
    while (now_s() < end) {
        if (g_drop && !gone) {
            /* Stack 1 dies: its socket closes, and the kernel takes it out of the socket map. */
            xsk_port__destroy(p[1]);
            p[1] = NULL;
            gone = true;
            printf("gone\n");
            fflush(stdout);
        }
        unsigned n = 0;
        for (int k = 0; k < 2; k++) {
            if (!p[k])
                continue;
            struct xsk_frame f[64];
            unsigned m = xsk_port__rx_burst(p[k], f, 64);
            for (unsigned i = 0; i < m; i++) {
                unsigned d = udp_dport(xsk_umem_area__data(u, f[i].addr), f[i].len);
                if (d == pa)
                    got[k][0]++;
                else if (d == pb)
                    got[k][1]++;
                else
                    other++;
                xsk_frame_pool__put(pool, NFRAMES, f[i].addr);
            }
            n += m;
        }
        if (!n)
            usleep(1000);
    }
    uint64_t c[STEER_C__MAX];
    if (steer__counters(st, c))
        memset(c, 0, sizeof(c));
    struct xsk_port_stats ps;
    memset(&ps, 0, sizeof(ps));
    xsk_port__stats(p[0], &ps);
    printf("stack0_a=%llu stack0_b=%llu stack1_a=%llu stack1_b=%llu other=%llu no_xsk=%llu fill_empty=%llu\n",
           (unsigned long long)got[0][0], (unsigned long long)got[0][1], (unsigned long long)got[1][0],
           (unsigned long long)got[1][1], (unsigned long long)other, (unsigned long long)c[STEER_C_NO_XSK],
           (unsigned long long)ps.rx_fill_ring_empty_descs);
    for (int k = 1; k >= 0; k--)
        xsk_port__destroy(p[k]);
    steer__detach(st);
    xsk_umem_area__destroy(u);
    return 0;
}
