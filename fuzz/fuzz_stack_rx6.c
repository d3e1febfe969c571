/* Feeds sequences of Ethernet frames to the IPv6 receive path of a port-less stack: ip_input's
 * hand-off, ip6_input (extension headers, scopes), reassembly shared with IPv4, ICMPv6 errors,
 * UDP over IPv6 with a dual-stack and a connected socket, TCP over IPv6 with a dual-stack
 * listener on port 80 (SYN cookies when its queue fills) and a v6-only one on 443. Input format,
 * repeated: one flags byte (bit 0: fix the UDP or TCP checksum of an unfragmented datagram, bits
 * 2-7: seconds to advance the clock, then the TCP timers run), a big-endian 16-bit length, then
 * that many frame bytes. A frame not returned to the pool at the end aborts (a leak). */
#include <stdlib.h>

#include "tests/unit/common/harness6.h"
#include "tcp/tcp.h"
#include "udp/udp.h"
#include "wire/checksum.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fix_udp_csum(uint8_t *f, size_t len)
{
    struct wire_ipv6_repr r;
    if (len < WIRE_ETH_HLEN || wire_ipv6__parse(f + WIRE_ETH_HLEN, len - WIRE_ETH_HLEN, &r, 0) < 0 ||
        (r.proto != WIRE_IPPROTO_UDP && r.proto != WIRE_IPPROTO_TCP) || r.fragment ||
        r.l4_off + (r.proto == WIRE_IPPROTO_TCP ? 20u : 8u) > r.total_len ||
        WIRE_ETH_HLEN + r.total_len > len)
        return;
    uint8_t *u = f + WIRE_ETH_HLEN + r.l4_off;
    uint32_t l4 = r.total_len - r.l4_off;
    unsigned at = r.proto == WIRE_IPPROTO_TCP ? 16 : 6;
    u[at] = u[at + 1] = 0;
    be16 c = wire_csum_fold(wire_csum_add(wire_csum_pseudo6(r.src.b, r.dst.b, r.proto, l4), u, l4));
    memcpy(u + at, &c, 2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct harness h;
    static struct udp_shared *up;
    static struct tcp_shared *tp;
    static const uint8_t key[32] = { 1, 2, 3 };
    if (!up)
        up = malloc(udp_shared__bytes(16));
    if (!tp)
        tp = malloc(tcp_shared__bytes(16));
    struct udp_shared *u = up;
    struct tcp_shared *t = tp;
    tcp_shared__init(t, 16, key);
    int l1 = tcp_conn__open(t), l2 = tcp_conn__open(t);
    tcp_conn__listen6(t, (slip_idx_t)l1, &(struct wire_ipv6_addr){ { 0 } }, 0, false, 80, 4);
    struct wire_ipv6_addr me6 = a6("2001:2::2");
    tcp_conn__listen6(t, (slip_idx_t)l2, &me6, 0, true, 443, 4);
    h6_init(&h);
    udp_shared__init(u, 16);
    int s1 = udp_sock__alloc(u), s2 = udp_sock__alloc(u);
    struct wire_ipv6_addr any = { { 0 } }, me = a6("2001:2::2"), peer = a6("2001:2::1");
    udp_sock__bind6(u, (slip_idx_t)s1, &any, 7, 0, true);
    udp_sock__bind6(u, (slip_idx_t)s2, &me, 9, 0, false);
    udp_sock__connect6(u, (slip_idx_t)s2, &peer, 5000, 0);

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
        tcp_timer__poll(&h.env, t);
        h_free_sent(&h);
        slip_idx_t p = pkt__alloc(&h.pool);
        if (p == SLIP_NIL)
            abort();
        uint8_t *f = pkt__data(&h.pool, p);
        memcpy(f, data, len);
        data += len;
        size -= len;
        if (flags & 1)
            fix_udp_csum(f, len);
        pkt__meta(&h.pool, p)->len = (uint16_t)len;
        struct ip_rx rx4;
        int r = ip_input(&h.env, p, H_IFINDEX, &rx4);
        if (r == 1) {
            if (rx4.ip.proto == WIRE_IPPROTO_UDP)
                udp_input(&h.env, u, &rx4);
            else if (rx4.ip.proto == WIRE_IPPROTO_TCP)
                tcp_input(&h.env, t, &rx4);
            else
                pkt__free_chain(&h.pool, rx4.pkt);
        } else if (r == IP_INPUT_IPV6) {
            struct ip6_rx rx;
            if (ip6_input(&h.env, p, H_IFINDEX, &rx)) {
                if (rx.ip.proto == WIRE_IPPROTO_UDP) {
                    udp6_input(&h.env, u, &rx);
                } else if (rx.ip.proto == WIRE_IPPROTO_TCP) {
                    tcp6_input(&h.env, t, &rx);
                } else {
                    struct ip6_icmp_err e;
                    if (rx.ip.proto == WIRE_IPPROTO_ICMPV6 && ip6_icmp__input(&h.env, &rx, &e)) {
                        if (e.q.ip.proto == WIRE_IPPROTO_UDP)
                            udp6_icmp_error(u, &e);
                        else if (e.q.ip.proto == WIRE_IPPROTO_TCP)
                            tcp6_icmp_error(&h.env, t, &e);
                    }
                    pkt__free_chain(&h.pool, rx.pkt);
                }
            }
        }
        static uint8_t out[65536];
        struct udp_peer from;
        while (udp_sock__recv6(u, &h.pool, (slip_idx_t)s1, out, sizeof(out), &from, UDP_RECV_TRUNC) != -EAGAIN)
            ;
        while (udp_sock__recv6(u, &h.pool, (slip_idx_t)s2, out, sizeof(out), &from, 0) != -EAGAIN)
            ;
        /* Accepted children read and closed (FINs go out); what was sent is dropped. */
        for (int c; (c = tcp_conn__accept(t, (slip_idx_t)l1)) >= 0 || (c = tcp_conn__accept(t, (slip_idx_t)l2)) >= 0;) {
            while (tcp_conn__recv(&h.env, t, (slip_idx_t)c, out, sizeof(out), 0) > 0)
                ;
            tcp_conn__close(&h.env, t, (slip_idx_t)c);
        }
        h_free_sent(&h);
    }
    tcp_shared__purge(t, &h.pool);
    h_free_sent(&h);
    udp_sock__close(u, &h.pool, (slip_idx_t)s1);
    udp_sock__close(u, &h.pool, (slip_idx_t)s2);
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
