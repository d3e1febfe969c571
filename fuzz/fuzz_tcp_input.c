/* Feeds arbitrary segments to a TCP connection brought into a chosen state first. Input format:
 * byte 0 picks the state (mod 9: LISTEN, SYN_SENT, SYN_RECEIVED, ESTABLISHED passive with
 * timestamps/SACK, ESTABLISHED active without, FIN_WAIT_1, CLOSE_WAIT, FIN_WAIT_2, TIME_WAIT);
 * then, repeated: a flags byte (bit 0: put the connection's ports in, bit 1: make seq/ack relative
 * to RCV.NXT/SND.UNA, bit 2: break the checksum, bit 3: let the application read, send and
 * maybe close, bits 4-7: tens of milliseconds to advance the clock and run timers), a length
 * byte, then that many bytes of TCP segment (header, options, payload). Besides sanitizer
 * findings, a frame or connection slot left over at the end aborts (a leak). */
#include <stdlib.h>

#include "tests/unit/tcp/tcp_test.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct harness h;
static struct tcp_shared *sh;

static void feed_raw(uint8_t *seg, size_t len, bool bad_csum)
{
    wire_tcp__set_csum(seg, len, PEER, US);
    if (bad_csum && len > 17)
        seg[16] ^= 1;
    struct wire_ipv4_repr ip = { .src = PEER, .dst = US, .proto = WIRE_IPPROTO_TCP, .id = 1 };
    struct ip_rx rx;
    if (ip_input(&h.env, h_rx_frame(&h, &ip, seg, len), H_IFINDEX, &rx))
        tcp_input(&h.env, sh, &rx);
    h_free_sent(&h);
}

static void seg(uint16_t sport, uint16_t dport, uint32_t seq, uint32_t ack, uint8_t flags, struct wire_tcp_opts *o)
{
    struct tseg t = { .sport = sport, .dport = dport, .seq = seq, .ack = ack, .flags = flags, .win = 4000 };
    if (o)
        t.opts = *o;
    t_feed(&h, sh, &t);
}

static uint32_t last_seq(void)
{
    struct tout o;
    return t_last(&h, &o) ? o.th.seq : 0;
}

/* Brings a connection into the chosen state; returns its index (the listener for LISTEN). */
static slip_idx_t setup(unsigned which, int *listener)
{
    struct wire_tcp_opts so = t_synopts(1460, 7, true, true, 100);
    *listener = -1;
    if (which == 1 || which == 4 || which == 5 || which == 7 || which == 8) {
        int c = tcp_conn__open(sh);
        tcp_conn__connect(&h.env, sh, (slip_idx_t)c, 0, 40000, PEER, 80);
        if (which == 1)
            return (slip_idx_t)c;
        uint32_t iss = last_seq();
        h_free_sent(&h);
        seg(80, 40000, 5000, iss + 1, WIRE_TCP_SYN | WIRE_TCP_ACK, NULL);
        h_free_sent(&h);
        if (which >= 5) {
            tcp_conn__close(&h.env, sh, (slip_idx_t)c);
            h_free_sent(&h);
        }
        if (which >= 7)
            seg(80, 40000, 5001, iss + 2, WIRE_TCP_ACK, NULL);
        if (which == 8)
            seg(80, 40000, 5001, iss + 2, WIRE_TCP_ACK | WIRE_TCP_FIN, NULL);
        h_free_sent(&h);
        return (slip_idx_t)c;
    }
    int l = tcp_conn__open(sh);
    tcp_conn__listen(sh, (slip_idx_t)l, 0, 80, 4);
    *listener = l;
    if (which == 0)
        return (slip_idx_t)l;
    seg(5555, 80, 1000, 0, WIRE_TCP_SYN, &so);
    uint32_t iss = last_seq();
    h_free_sent(&h);
    slip_idx_t child = tcp__lookup(sh, US, 80, PEER, 5555);
    if (which == 2)
        return child;
    struct wire_tcp_opts ao;
    memset(&ao, 0, sizeof(ao));
    ao.has_ts = true;
    ao.tsval = 101;
    seg(5555, 80, 1001, iss + 1, WIRE_TCP_ACK, &ao);
    int c = tcp_conn__accept(sh, (slip_idx_t)l);
    if (c < 0)
        return child;
    if (which == 6) {
        ao.tsval = 102;
        seg(5555, 80, 1001, iss + 1, WIRE_TCP_ACK | WIRE_TCP_FIN, &ao);
    }
    h_free_sent(&h);
    return (slip_idx_t)c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    harness_init(&h);
    sh = t_new_shared(16);
    int listener;
    slip_idx_t c = setup(data[0] % 9, &listener);
    data++;
    size--;
    bool closed = false;

    while (size >= 2) {
        uint8_t flags = data[0];
        size_t len = data[1];
        data += 2;
        size -= 2;
        if (len > size)
            len = size;
        uint8_t buf[300];
        memset(buf, 0, sizeof(buf));
        memcpy(buf, data, len);
        data += len;
        size -= len;
        size_t slen = len < WIRE_TCP_HLEN_MIN ? WIRE_TCP_HLEN_MIN : len;
        struct tcp_conn *cc = tcp_conn__get(sh, c);
        if (flags & 1) {
            be16 sp = hton16(cc->state == TCPS_LISTEN || cc->lport == 80 ? 5555 : 80);
            be16 dp = hton16(cc->lport ? cc->lport : 80);
            memcpy(buf, &sp, 2);
            memcpy(buf + 2, &dp, 2);
        }
        if (flags & 2) {
            uint32_t s, a;
            memcpy(&s, buf + 4, 4);
            memcpy(&a, buf + 8, 4);
            be32 sb = hton32(cc->rcv_nxt + (ntoh32(s) & 0xffff) - 0x8000);
            be32 ab = hton32(cc->snd_una + (ntoh32(a) & 0xffff) - 0x8000);
            memcpy(buf + 4, &sb, 4);
            memcpy(buf + 8, &ab, 4);
        }
        feed_raw(buf, slen, flags & 4);
        if ((flags & 8) && !closed && listener != (int)c && (cc->flags & TCPF_USER)) {
            uint8_t in[1600];
            tcp_conn__recv(&h.env, sh, c, in, sizeof(in), flags & 16 ? TCP_RECV_PEEK : 0);
            struct iovec iov = { in, (flags >> 4) * 100u };
            tcp_conn__send(&h.env, sh, c, &iov, 1, flags & 32 ? TCP_SEND_MORE : 0);
            if ((flags & 0xc0) == 0xc0) {
                tcp_conn__close(&h.env, sh, c);
                closed = true;
            }
            h_free_sent(&h);
        }
        if (flags >> 4) {
            h.env.now += (slip_time_t)(flags >> 4) * 10 * SLIP_MSEC;
            tcp_timer__poll(&h.env, sh);
            h_free_sent(&h);
        }
        if (listener >= 0) {
            int a;
            while ((a = tcp_conn__accept(sh, (slip_idx_t)listener)) >= 0)
                tcp_conn__close(&h.env, sh, (slip_idx_t)a);
            h_free_sent(&h);
        }
    }
    /* Tear down: everything must come back. */
    if (!closed && listener != (int)c)
        tcp_conn__abort(&h.env, sh, c);
    if (listener >= 0)
        tcp_conn__close(&h.env, sh, (slip_idx_t)listener);
    for (int i = 0; i < 100 && sh->nused; i++) {
        slip_time_t next = tcp_timer__poll(&h.env, sh);
        h_free_sent(&h);
        if (next == SLIP_TIME_NEVER)
            break;
        if (next > h.env.now)
            h.env.now = next;
    }
    if (sh->nused != 0)
        abort();
    free(sh);
    h_free_sent(&h);
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
