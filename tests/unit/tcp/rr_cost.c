/* The server side of keep-alive request/response on the unit harness, over IPv4 or IPv6, for
 * counting instructions rather than timing (issue 16: is the stack's IPv6 server path dearer per
 * request than its IPv4 one?). A crafted peer (198.18.0.1 or 2001:2::1, timestamps on, as wrk on
 * Linux) sends a 60-byte request whose ACK covers our last response; the server reads it and
 * answers 1,250 bytes (nginx's headers and a 1 KiB file), then the timers run. Not a test: run
 *
 *     valgrind --tool=callgrind --toggle-collect='ip_input' --toggle-collect='ip6_input' \
 *         --toggle-collect='tcp_input' --toggle-collect='tcp6_input' \
 *         --toggle-collect='tcp_conn__recv' --toggle-collect='tcp_conn__send' \
 *         --toggle-collect='tcp_timer__poll' build/tests/unit/tcp/tcp_rr_cost 6 10000
 *
 * so that only the stack's calls are counted (the peer's segment building differs by family),
 * and divide the total by the requests. Without valgrind it checks that every exchange ran. */
#include "tests/unit/common/harness6.h"
#include "tests/unit/tcp/tcp_test.h"

#define REQ_LEN  60
#define RESP_LEN 1250

struct peer {
    int fam;
    uint32_t seq, ack;      /* next byte we send, next byte we expect */
    uint32_t tsval, tsecr;
};

/* A peer segment over the peer's family: through ip(6)_input into tcp(6)_input. */
static void feed(struct harness *h, struct tcp_shared *sh, struct peer *pr, uint8_t flags, const void *data,
                 size_t len, const struct wire_tcp_opts *syn_opts)
{
    uint8_t buf[2000];
    struct wire_tcp_repr r;
    memset(&r, 0, sizeof(r));
    r.sport = 40000;
    r.dport = 80;
    r.seq = pr->seq;
    r.ack = pr->ack;
    r.flags = flags;
    r.window = 65535;
    if (syn_opts) {
        r.opts = *syn_opts;
    } else {
        r.opts.has_ts = true;
        r.opts.tsval = pr->tsval;
        r.opts.tsecr = pr->tsecr;
    }
    size_t hl = wire_tcp__emit(&r, buf);
    memcpy(buf + hl, data, len);
    if (pr->fam == 4) {
        wire_tcp__set_csum(buf, hl + len, PEER, US);
        struct wire_ipv4_repr ip = { .src = PEER, .dst = US, .proto = WIRE_IPPROTO_TCP, .id = 1 };
        struct ip_rx rx;
        if (ip_input(&h->env, h_rx_frame(h, &ip, buf, hl + len), H_IFINDEX, &rx))
            tcp_input(&h->env, sh, &rx);
    } else {
        struct wire_ipv6_addr s = a6("2001:2::1"), d = a6("2001:2::2");
        uint32_t sum = wire_csum_pseudo6(s.b, d.b, WIRE_IPPROTO_TCP, (uint32_t)(hl + len));
        be16 cs = wire_csum_fold(wire_csum_add(sum, buf, hl + len));
        memcpy(buf + 16, &cs, 2);
        /* As the poll loop (src/stack/poll.c): ip_input first, which hands IPv6 on. */
        slip_idx_t p = rx6(h, "2001:2::1", "2001:2::2", WIRE_IPPROTO_TCP, NULL, 0, buf, hl + len);
        struct ip_rx rx4;
        struct ip6_rx rx;
        CHECK(ip_input(&h->env, p, H_IFINDEX, &rx4), ==, IP_INPUT_IPV6);
        if (ip6_input(&h->env, p, H_IFINDEX, &rx) == 1)
            tcp6_input(&h->env, sh, &rx);
    }
    pr->seq += (uint32_t)len + ((flags & WIRE_TCP_SYN) ? 1 : 0);
}

/* Reads what we sent since the last call: the peer's ack and tsecr follow it. Returns bytes. */
static uint32_t take_sent(struct harness *h, struct peer *pr)
{
    uint32_t bytes = 0;
    for (unsigned i = 0; i < h->nsent; i++) {
        const uint8_t *f = pkt__data(&h->pool, h->sent[i]);
        bool v6 = f[12] == 0x86 && f[13] == 0xdd;
        size_t ihl = v6 ? WIRE_IPV6_HLEN : (size_t)(f[WIRE_ETH_HLEN] & 0xf) * 4;
        uint32_t tot = v6 ? WIRE_IPV6_HLEN + (uint32_t)(f[WIRE_ETH_HLEN + 4] << 8 | f[WIRE_ETH_HLEN + 5])
                          : (uint32_t)(f[WIRE_ETH_HLEN + 2] << 8 | f[WIRE_ETH_HLEN + 3]);
        struct wire_tcp_repr th;
        CHECK(wire_tcp__parse(f + WIRE_ETH_HLEN + ihl, tot - ihl, &th), >=, 0);
        uint32_t dlen = tot - (uint32_t)ihl - th.hdr_len + ((th.flags & WIRE_TCP_SYN) ? 1 : 0);
        if ((th.flags & WIRE_TCP_SYN) || seq_gt(th.seq + dlen, pr->ack))
            pr->ack = th.seq + dlen;
        if (th.opts.has_ts)
            pr->tsecr = th.opts.tsval;
        bytes += tot - (uint32_t)ihl - th.hdr_len;
    }
    h_free_sent(h);
    return bytes;
}

int main(int argc, char **argv)
{
    int fam = argc > 1 ? atoi(argv[1]) : 4;
    long n = argc > 2 ? atol(argv[2]) : 1000;
    if (fam != 4 && fam != 6) {
        fprintf(stderr, "usage: %s 4|6 [requests]\n", argv[0]);
        return 2;
    }
    struct harness h;
    h6_init(&h);
    struct tcp_shared *sh = t_new_shared(16);
    int l = tcp_conn__open(sh);
    CHECK(l, >=, 0);
    if (fam == 4) {
        CHECK(tcp_conn__listen(sh, (slip_idx_t)l, 0, 80, 16), ==, 0);
    } else {
        struct wire_ipv6_addr any = { 0 };
        CHECK(tcp_conn__listen6(sh, (slip_idx_t)l, &any, 0, false, 80, 16), ==, 0);
    }
    struct peer pr = { .fam = fam, .seq = 1000, .tsval = 1 };
    struct wire_tcp_opts so = t_synopts(1460, 7, true, true, pr.tsval);
    feed(&h, sh, &pr, WIRE_TCP_SYN, NULL, 0, &so);
    take_sent(&h, &pr);
    feed(&h, sh, &pr, WIRE_TCP_ACK, NULL, 0, NULL);
    int c = tcp_conn__accept(sh, (slip_idx_t)l);
    CHECK(c, >=, 0);
    if (c < 0)
        return 1;

    static const char req[REQ_LEN] = "GET /1k.bin HTTP/1.1\r\nHost: 198.18.0.2:8080\r\n\r\n";
    static char resp[RESP_LEN];
    memset(resp, 'x', sizeof(resp));
    uint64_t got = 0, sent = 0;
    for (long i = 0; i < n; i++) {
        h.env.now += 40 * SLIP_USEC;
        pr.tsval++;
        feed(&h, sh, &pr, WIRE_TCP_ACK | WIRE_TCP_PSH, req, REQ_LEN, NULL);
        char buf[256];
        ssize_t r = tcp_conn__recv(&h.env, sh, (slip_idx_t)c, buf, sizeof(buf), 0);
        CHECK(r, ==, REQ_LEN);
        got += (uint64_t)r;
        struct iovec v = { resp, RESP_LEN };
        CHECK(tcp_conn__send(&h.env, sh, (slip_idx_t)c, &v, 1, 0), ==, RESP_LEN);
        h.env.now += 10 * SLIP_USEC;
        tcp_timer__poll(&h.env, sh);
        sent += take_sent(&h, &pr);
        if (slip_test_failures)
            return 1;
    }
    CHECK(sent, ==, (uint64_t)n * RESP_LEN);
    printf("IPv%d: %ld requests, %llu bytes in, %llu out\n", fam, n, (unsigned long long)got,
           (unsigned long long)sent);
    tcp_conn__abort(&h.env, sh, (slip_idx_t)c);
    tcp_conn__close(&h.env, sh, (slip_idx_t)l);
    h_free_sent(&h);
    tcp_shared__purge(sh, &h.pool);
    free(sh);
    harness_fini(&h);
    return slip_test_failures ? 1 : 0;
}
