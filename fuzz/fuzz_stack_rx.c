/* Feeds sequences of Ethernet frames to the receive path of a port-less stack: ip_input,
 * reassembly, ICMP errors, UDP input and socket queues. Input format, repeated: one flags byte
 * (bit 0: fix the IPv4 header checksum, bit 1: zero the UDP checksum, bits 2-7: seconds to
 * advance the clock), a big-endian 16-bit length, then that many frame bytes. Besides sanitizer
 * findings, a frame not returned to the pool at the end aborts (a leak). */
#include <stdlib.h>

#include "tests/unit/common/harness.h"
#include "udp/udp.h"
#include "wire/checksum.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fix_ip_csum(uint8_t *f, size_t len)
{
    if (len < WIRE_ETH_HLEN + 20)
        return;
    uint8_t *ip = f + WIRE_ETH_HLEN;
    size_t ihl = (size_t)(ip[0] & 15) * 4;
    if (ihl < 20 || WIRE_ETH_HLEN + ihl > len)
        return;
    ip[10] = ip[11] = 0;
    be16 c = wire_csum_fold(wire_csum_add(0, ip, ihl));
    memcpy(ip + 10, &c, 2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct harness h;
    static struct udp_shared *up;
    if (!up)
        up = malloc(udp_shared__bytes(16));
    struct udp_shared *u = up;
    harness_init(&h);
    udp_shared__init(u, 16);
    int s1 = udp_sock__alloc(u), s2 = udp_sock__alloc(u);
    udp_sock__bind(u, (slip_idx_t)s1, 0, 7);
    udp_sock__bind(u, (slip_idx_t)s2, ip4(198, 18, 0, 2), 9);
    udp_sock__connect(u, (slip_idx_t)s2, ip4(198, 18, 0, 1), 5000);

    while (size >= 3) {
        uint8_t flags = data[0];
        size_t len = (size_t)data[1] << 8 | data[2];
        data += 3;
        size -= 3;
        if (len > size)
            len = size;
        if (len > H_FRAME)
            len = H_FRAME;
        h.env.now += (slip_time_t)(flags >> 2) * SLIP_SEC;
        ip_reass__expire(&h.env);
        slip_idx_t p = pkt__alloc(&h.pool);
        if (p == SLIP_NIL)
            abort();    /* every frame must have come back before the next one */
        uint8_t *f = pkt__data(&h.pool, p);
        memcpy(f, data, len);
        data += len;
        size -= len;
        if (flags & 1)
            fix_ip_csum(f, len);
        if ((flags & 2) && len >= WIRE_ETH_HLEN + 28 && (f[WIRE_ETH_HLEN] & 15) == 5)
            f[WIRE_ETH_HLEN + 26] = f[WIRE_ETH_HLEN + 27] = 0;
        pkt__meta(&h.pool, p)->len = (uint16_t)len;
        struct ip_rx rx;
        if (!ip_input(&h.env, p, H_IFINDEX, &rx))
            continue;
        if (rx.ip.proto == WIRE_IPPROTO_UDP) {
            udp_input(&h.env, u, &rx);
        } else {
            struct ip_icmp_err e;
            if (rx.ip.proto == WIRE_IPPROTO_ICMP && ip_icmp__input(&h.env, &rx, &e))
                udp_icmp_error(u, &e);
            pkt__free_chain(&h.pool, rx.pkt);
        }
        /* Keep queues short so a long input does not run out of frames. */
        static uint8_t out[65536];
        while (udp_sock__recv(u, &h.pool, (slip_idx_t)s1, out, sizeof(out), NULL, NULL, UDP_RECV_TRUNC) != -EAGAIN)
            ;
        while (udp_sock__recv(u, &h.pool, (slip_idx_t)s2, out, sizeof(out), NULL, NULL, 0) != -EAGAIN)
            ;
    }
    udp_sock__close(u, &h.pool, (slip_idx_t)s1);
    udp_sock__close(u, &h.pool, (slip_idx_t)s2);
    h_free_sent(&h);            /* what the receive path sent back (reassembly time exceeded) */
    ip_shared__purge(&h.env);
    if (h.pool.frames->count != H_NFRAMES)
        abort();
    free(h.pool.umem);
    free(h.pool.frames);
    free(h.pool.meta);
    free(h.t);
    free(h.ip);
    return 0;
}
