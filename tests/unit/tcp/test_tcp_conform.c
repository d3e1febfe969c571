/* Conformance bugs found by packetdrill's TCP scripts (issue 15), one test each, against crafted
 * peer segments: the initial window on a connection whose peer lowered the MSS (RFC 6928), a
 * receive window the peer shrank (never send past the right edge it offers), TCP_NODELAY
 * pushing what TCP_CORK holds and the 200 ms ceiling of TCP_CORK / MSG_MORE (tcp(7)), a
 * connection reset before accept() (Linux still hands it out), and the fields of TCP_INFO.
 * We are 198.18.0.2, the crafted peer 198.18.0.1. */
#include "tests/unit/tcp/tcp_test.h"

struct cf {
    struct harness h;
    struct tcp_shared *sh;
    struct ip_env *env;
    int l;
    slip_idx_t c;
    uint32_t iss, pseq;
};

static void cf_init(struct cf *s)
{
    memset(s, 0, sizeof(*s));
    harness_init(&s->h);
    s->sh = t_new_shared(64);
    s->env = &s->h.env;
    s->l = -1;
}

static void cf_fini(struct cf *s)
{
    tcp_shared__purge(s->sh, &s->h.pool);
    free(s->sh);
    harness_fini(&s->h);
}

static void pseg(struct cf *s, uint8_t flags, uint32_t seq, uint32_t ack, const void *data, size_t len, uint16_t win)
{
    struct tseg t = { .sport = 5555, .dport = 80, .seq = seq, .ack = ack, .flags = flags, .win = win,
                      .data = data, .len = len };
    t_feed(&s->h, s->sh, &t);
}

static struct tcp_conn *C(struct cf *s) { return tcp_conn__get(s->sh, s->c); }

/* LISTEN on port 80, the peer's SYN from 5555 (sequence seq, window win, options opts): our
 * SYN-ACK goes to *o, s->iss and s->pseq (seq + 1) are set, and nothing sent stays captured. */
static void cf_listen_syn(struct cf *s, uint32_t seq, uint16_t win, struct wire_tcp_opts opts, struct tout *o)
{
    s->l = tcp_conn__open(s->sh);
    CHECK(s->l, >=, 0);
    CHECK(tcp_conn__listen(s->sh, (slip_idx_t)s->l, 0, 80, 8), ==, 0);
    struct tseg syn = { .sport = 5555, .dport = 80, .seq = seq, .flags = WIRE_TCP_SYN, .win = win, .opts = opts };
    t_feed(&s->h, s->sh, &syn);
    CHECK(t_last(&s->h, o), ==, true);
    s->iss = o->th.seq;
    s->pseq = seq + 1;
    h_free_sent(&s->h);
}

/* LISTEN, the peer's SYN with MSS mss and window scale 7 (no timestamps), our SYN-ACK, the
 * peer's ACK (window win << 7). With accept, s->c is the accepted connection. */
static void cf_handshake(struct cf *s, uint16_t mss, uint16_t win, bool accept)
{
    struct tout o;
    cf_listen_syn(s, 1000, 65535, t_synopts(mss, 7, true, false, 0), &o);
    pseg(s, WIRE_TCP_ACK, s->pseq, s->iss + 1, NULL, 0, win);
    if (accept) {
        int c = tcp_conn__accept(s->sh, (slip_idx_t)s->l);
        CHECK(c, >=, 0);
        s->c = (slip_idx_t)c;
        CHECK(C(s)->state, ==, TCPS_ESTABLISHED);
    }
}

static ssize_t cf_send(struct cf *s, size_t len, unsigned flags)
{
    static char buf[65536];
    memset(buf, 'x', sizeof(buf));
    struct iovec iov = { buf, len };
    return tcp_conn__send(s->env, s->sh, s->c, &iov, 1, flags);
}

/* Bytes of data in the frames sent since the last h_free_sent, and the highest end. */
static uint32_t sent_bytes(struct cf *s, unsigned *nseg, uint32_t *max_end)
{
    uint32_t bytes = 0;
    *nseg = 0;
    *max_end = s->iss + 1;
    for (unsigned i = 0; i < s->h.nsent; i++) {
        struct tout o;
        CHECK(t_sent(&s->h, i, &o), ==, true);
        if (!o.len)
            continue;
        (*nseg)++;
        bytes += o.len;
        if (seq_gt(o.th.seq + o.len, *max_end))
            *max_end = o.th.seq + o.len;
    }
    return bytes;
}

/* Runs timers up to now + dt. */
static void advance(struct cf *s, slip_time_t dt)
{
    slip_time_t end = s->env->now + dt;
    for (;;) {
        slip_time_t next = tcp_timer__poll(s->env, s->sh);
        if (next > end)
            break;
        s->env->now = next > s->env->now ? next : s->env->now;
        tcp_timer__poll(s->env, s->sh);
    }
    s->env->now = end;
    tcp_timer__poll(s->env, s->sh);
}

static void cf_close(struct cf *s)
{
    tcp_conn__abort(s->env, s->sh, s->c);
    tcp_conn__close(s->env, s->sh, (slip_idx_t)s->l);
    cf_fini(s);
}

/* RFC 6928: at most 10 segments of the effective MSS leave before the first ACK. The peer's SYN
 * says 1000: 10 segments of 1000 bytes, not 14 (cwnd from the route's 1460-byte MSS). */
TEST(test_iw10_in_segments_of_the_peer_mss)
{
    struct cf s;
    cf_init(&s);
    cf_handshake(&s, 1000, 2000, true);      /* window 256000: cwnd is the limit */
    CHECK(cf_send(&s, 30000, 0), ==, 30000);
    unsigned n;
    uint32_t end;
    uint32_t bytes = sent_bytes(&s, &n, &end);
    CHECK(n, ==, 10u);
    CHECK(bytes, ==, 10000u);
    CHECK(C(&s)->cwnd, ==, 10000u);
    cf_close(&s);
}

/* Which segments of those sent since the last h_free_sent carry PSH, as a bit mask by position. */
static uint32_t psh_mask(struct cf *s)
{
    uint32_t m = 0;
    for (unsigned i = 0; i < s->h.nsent && i < 32; i++) {
        struct tout o;
        CHECK(t_sent(&s->h, i, &o), ==, true);
        if (o.th.flags & WIRE_TCP_PSH)
            m |= 1u << i;
    }
    return m;
}

/* PSH ends each burst, as Linux ends each TSO packet with it (packetdrill's slow_start/
 * slow-start-ack-per-2pkt, shutdown/shutdown-rdwr-send-queue-ack-close, mss/mss-setsockopt-*):
 * the 10th of the initial window, the 4th of each later burst cwnd allows, and the segment
 * that empties the queue; none in the middle. */
TEST(test_psh_ends_each_burst)
{
    struct cf s;
    cf_init(&s);
    cf_handshake(&s, 1000, 2000, true);      /* window 256000: cwnd is the limit */
    CHECK(cf_send(&s, 30000, 0), ==, 30000);
    CHECK(s.h.nsent, ==, 10u);
    CHECK(psh_mask(&s), ==, 1u << 9);
    h_free_sent(&s.h);
    /* Slow start: an ACK of 2 segments lets 4 out. */
    s.env->now += 100 * SLIP_MSEC;
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 2001, NULL, 0, 2000);
    CHECK(s.h.nsent, ==, 4u);
    CHECK(psh_mask(&s), ==, 1u << 3);
    h_free_sent(&s.h);
    /* The last burst empties the queue: 2 segments after an ACK of 1 (8000 in flight). */
    for (uint32_t a = 4001; a <= 10001; a += 2000) {
        s.env->now += 5 * SLIP_MSEC;
        pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + a, NULL, 0, 2000);
        CHECK(s.h.nsent, ==, 4u);
        CHECK(psh_mask(&s), ==, 1u << 3);
        h_free_sent(&s.h);
    }
    CHECK(C(&s)->snd_max, ==, s.iss + 30001);
    cf_close(&s);
}

/* MSG_EOR (packetdrill's eor/no-coalesce-small): 10400 bytes, then 400 that end a record, then
 * 10000. After the initial window, the 800 bytes up to the record's end leave as one segment
 * (with PSH, although shorter than the MSS and more follows), and nothing joins them to the
 * next write's bytes. */
TEST(test_msg_eor_ends_a_segment)
{
    struct cf s;
    cf_init(&s);
    cf_handshake(&s, 1000, 2000, true);
    CHECK(cf_send(&s, 10400, 0), ==, 10400);
    CHECK(cf_send(&s, 400, TCP_SEND_EOR), ==, 400);
    CHECK(cf_send(&s, 10000, 0), ==, 10000);
    CHECK(s.h.nsent, ==, 10u);
    h_free_sent(&s.h);
    s.env->now += 10 * SLIP_MSEC;
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 10001, NULL, 0, 2000);
    CHECK(s.h.nsent, ==, 11u);
    struct tout o;
    CHECK(t_sent(&s.h, 0, &o), ==, true);
    CHECK(o.th.seq, ==, s.iss + 10001);
    CHECK(o.len, ==, 800u);
    CHECK(o.th.flags & WIRE_TCP_PSH, !=, 0);
    for (unsigned i = 1; i < s.h.nsent; i++) {
        CHECK(t_sent(&s.h, i, &o), ==, true);
        CHECK(o.th.seq, ==, s.iss + 10801 + (i - 1) * 1000);
        CHECK(o.len, ==, 1000u);
    }
    cf_close(&s);
}

/* A segment resent in fast recovery carries no PSH (Linux resends the lost segment alone, cut
 * from its TSO packet; packetdrill's fast_retransmit/fr-4pkt-sack, fast_recovery/prr-ss-*):
 * three segments SACKed above the first, which goes again without PSH. */
TEST(test_psh_not_on_a_fast_retransmission)
{
    struct cf s;
    cf_init(&s);
    cf_handshake(&s, 1000, 2000, true);
    CHECK(cf_send(&s, 30000, 0), ==, 30000);
    CHECK(s.h.nsent, ==, 10u);
    h_free_sent(&s.h);
    s.env->now += 100 * SLIP_MSEC;
    struct tseg t = { .sport = 5555, .dport = 80, .seq = s.pseq, .ack = s.iss + 1, .flags = WIRE_TCP_ACK,
                      .win = 2000 };
    t.opts.nsack = 1;
    t.opts.sack[0].left = s.iss + 1001;
    for (uint32_t k = 2; k <= 4; k++) {
        t.opts.sack[0].right = s.iss + 1 + k * 1000;
        t_feed(&s.h, s.sh, &t);
    }
    unsigned resent = 0;
    for (unsigned i = 0; i < s.h.nsent; i++) {
        struct tout o;
        CHECK(t_sent(&s.h, i, &o), ==, true);
        if (o.len && o.th.seq == s.iss + 1) {
            resent++;
            CHECK(o.th.flags & WIRE_TCP_PSH, ==, 0);
        }
    }
    CHECK(resent, ==, 1u);
    CHECK(C(&s)->st.retransmits, ==, 1u);
    cf_close(&s);
}

/* net.ipv4.tcp_timestamps, tcp_sack, tcp_window_scaling at 0 (packetdrill's nagle/https_client
 * turns timestamps off): our SYN offers none of those turned off, and a peer's SYN offering them
 * gets a SYN-ACK without them and a connection that does not use them. */
TEST(test_syn_options_turned_off_by_sysctl)
{
    struct cf s;
    cf_init(&s);
    s.sh->opts_off = TCP_OPTS_OFF_TS;
    int a = tcp_conn__open(s.sh);
    CHECK(a, >=, 0);
    CHECK(tcp_conn__connect(s.env, s.sh, (slip_idx_t)a, 0, 40000, PEER, 80), ==, -EINPROGRESS);
    struct tout o;
    CHECK(t_last(&s.h, &o), ==, true);
    CHECK(o.th.opts.has_ts, ==, false);
    CHECK(o.th.opts.sack_ok, ==, true);
    CHECK(o.th.opts.has_wscale, ==, true);
    h_free_sent(&s.h);
    /* The peer answers with timestamps anyway: they are not used. */
    struct tseg sa = { .sport = 80, .dport = 40000, .seq = 5000, .ack = o.th.seq + 1,
                       .flags = WIRE_TCP_SYN | WIRE_TCP_ACK, .win = 65535,
                       .opts = t_synopts(1460, 7, true, true, 77) };
    t_feed(&s.h, s.sh, &sa);
    struct tcp_conn *c = tcp_conn__get(s.sh, (slip_idx_t)a);
    CHECK(c->state, ==, TCPS_ESTABLISHED);
    CHECK(c->flags & TCPF_TS_OK, ==, 0u);
    CHECK(c->flags & TCPF_SACK_OK, !=, 0u);
    CHECK(t_last(&s.h, &o), ==, true);
    CHECK(o.th.opts.has_ts, ==, false);
    h_free_sent(&s.h);
    tcp_conn__abort(s.env, s.sh, (slip_idx_t)a);

    /* Passive: all three off. */
    s.sh->opts_off = TCP_OPTS_OFF_TS | TCP_OPTS_OFF_SACK | TCP_OPTS_OFF_WS;
    cf_listen_syn(&s, 1000, 65535, t_synopts(1000, 7, true, true, 5), &o);
    CHECK(o.th.opts.has_ts, ==, false);
    CHECK(o.th.opts.sack_ok, ==, false);
    CHECK(o.th.opts.has_wscale, ==, false);
    CHECK(o.th.opts.mss, ==, 1460u);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, NULL, 0, 1000);
    int ci = tcp_conn__accept(s.sh, (slip_idx_t)s.l);
    CHECK(ci, >=, 0);
    s.c = (slip_idx_t)ci;
    CHECK(C(&s)->flags & (TCPF_TS_OK | TCPF_SACK_OK | TCPF_WS_OK), ==, 0u);
    CHECK(C(&s)->snd_wnd, ==, 1000u);        /* not scaled */
    cf_close(&s);
}

/* tcp(7): setting TCP_NODELAY pushes what TCP_CORK holds (with PSH), and what MSG_MORE holds
 * (without PSH: the application said more follows), as Linux does (packetdrill's
 * nagle/sockopt_cork_nodelay). */
TEST(test_nodelay_pushes_what_cork_and_msg_more_hold)
{
    struct cf s;
    cf_init(&s);
    cf_handshake(&s, 1000, 257, true);
    struct tout o;
    tcp_conn__setopt(s.env, s.sh, s.c, TCPO_CORK, 1);
    CHECK(cf_send(&s, 40, 0), ==, 40);
    s.env->now += 50 * SLIP_MSEC;
    CHECK(cf_send(&s, 40, 0), ==, 40);
    CHECK(s.h.nsent, ==, 0u);
    tcp_conn__setopt(s.env, s.sh, s.c, TCPO_NODELAY, 1);
    CHECK(s.h.nsent, ==, 1u);
    CHECK(t_last(&s.h, &o), ==, true);
    CHECK(o.len, ==, 80u);
    CHECK(o.th.flags, ==, WIRE_TCP_ACK | WIRE_TCP_PSH);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 81, NULL, 0, 257);
    h_free_sent(&s.h);
    /* The cork stays for later writes. */
    CHECK(cf_send(&s, 40, 0), ==, 40);
    CHECK(s.h.nsent, ==, 0u);
    tcp_conn__setopt(s.env, s.sh, s.c, TCPO_CORK, 0);
    CHECK(s.h.nsent, ==, 1u);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 121, NULL, 0, 257);
    h_free_sent(&s.h);
    tcp_conn__setopt(s.env, s.sh, s.c, TCPO_NODELAY, 0);
    CHECK(cf_send(&s, 40, TCP_SEND_MORE), ==, 40);
    CHECK(cf_send(&s, 40, TCP_SEND_MORE), ==, 40);
    CHECK(s.h.nsent, ==, 0u);
    tcp_conn__setopt(s.env, s.sh, s.c, TCPO_NODELAY, 1);
    CHECK(s.h.nsent, ==, 1u);
    CHECK(t_last(&s.h, &o), ==, true);
    CHECK(o.len, ==, 80u);
    CHECK(o.th.flags, ==, WIRE_TCP_ACK);
    cf_close(&s);
}

/* tcp(7): TCP_CORK (and MSG_MORE) hold a partial segment at most 200 ms; Linux sends it (with
 * PSH) from its probe timer one RTO after nothing was left in flight. Before the fix it stayed
 * unsent for ever. */
TEST(test_cork_and_msg_more_hold_at_most_an_rto)
{
    struct cf s;
    cf_init(&s);
    cf_handshake(&s, 1000, 257, true);
    struct tout o;
    tcp_conn__setopt(s.env, s.sh, s.c, TCPO_CORK, 1);
    CHECK(cf_send(&s, 40, 0), ==, 40);
    advance(&s, 150 * SLIP_MSEC);
    CHECK(s.h.nsent, ==, 0u);
    advance(&s, 100 * SLIP_MSEC);    /* the handshake's RTT sample gave the 200 ms floor */
    CHECK(s.h.nsent, ==, 1u);
    CHECK(t_last(&s.h, &o), ==, true);
    CHECK(o.len, ==, 40u);
    CHECK(o.th.flags, ==, WIRE_TCP_ACK | WIRE_TCP_PSH);
    s.env->now += 10 * SLIP_MSEC;
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 41, NULL, 0, 257);
    h_free_sent(&s.h);
    tcp_conn__setopt(s.env, s.sh, s.c, TCPO_CORK, 0);
    CHECK(cf_send(&s, 40, TCP_SEND_MORE), ==, 40);
    advance(&s, 150 * SLIP_MSEC);
    CHECK(s.h.nsent, ==, 0u);
    advance(&s, 100 * SLIP_MSEC);
    CHECK(s.h.nsent, ==, 1u);
    CHECK(t_last(&s.h, &o), ==, true);
    CHECK(o.len, ==, 40u);
    cf_close(&s);
}

/* A connection reset while it waits on the accept queue is still handed out by accept(), as
 * Linux does (packetdrill's fastopen/server/reset-non-tfo-socket): CLOSED, its first write
 * reports ECONNRESET, the data that came before the reset can be read, then end of stream.
 * Without data the first read reports the reset. Before the fix the child was freed and a
 * blocking accept() waited for ever. */
TEST(test_reset_before_accept_is_still_accepted)
{
    struct cf s;
    cf_init(&s);
    cf_handshake(&s, 1460, 257, false);
    pseg(&s, WIRE_TCP_ACK | WIRE_TCP_PSH, s.pseq, s.iss + 1, "0123456789", 10, 257);
    pseg(&s, WIRE_TCP_RST | WIRE_TCP_ACK, s.pseq + 10, s.iss + 1, NULL, 0, 257);
    int c = tcp_conn__accept(s.sh, (slip_idx_t)s.l);
    CHECK(c, >=, 0);
    s.c = (slip_idx_t)c;
    CHECK(C(&s)->state, ==, TCPS_CLOSED);
    CHECK(cf_send(&s, 100, 0), ==, -ECONNRESET);
    char buf[64];
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, buf, sizeof(buf), 0), ==, 10);
    CHECK_MEM(buf, "0123456789", 10);
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, buf, sizeof(buf), 0), ==, 0);
    tcp_conn__close(s.env, s.sh, s.c);
    CHECK(tcp_conn__accept(s.sh, (slip_idx_t)s.l), ==, -EAGAIN);

    /* A second one, reset without data: the first read reports it. */
    struct tseg syn = { .sport = 5556, .dport = 80, .seq = 7000, .flags = WIRE_TCP_SYN, .win = 65535,
                        .opts = t_synopts(1460, 7, true, false, 0) };
    t_feed(&s.h, s.sh, &syn);
    struct tout o;
    CHECK(t_last(&s.h, &o), ==, true);
    struct tseg ack = { .sport = 5556, .dport = 80, .seq = 7001, .ack = o.th.seq + 1, .flags = WIRE_TCP_ACK,
                        .win = 257 };
    t_feed(&s.h, s.sh, &ack);
    ack.flags = WIRE_TCP_RST;
    t_feed(&s.h, s.sh, &ack);
    c = tcp_conn__accept(s.sh, (slip_idx_t)s.l);
    CHECK(c, >=, 0);
    s.c = (slip_idx_t)c;
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, buf, sizeof(buf), 0), ==, -ECONNRESET);
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, buf, sizeof(buf), 0), ==, 0);
    tcp_conn__close(s.env, s.sh, s.c);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    CHECK(s.sh->nused, ==, 0u);
    cf_fini(&s);
}

/* Never send past the right edge the peer offers, also when it moved the edge back (packetdrill's
 * tcp_info/tcp-info-rwnd-limited: a window of 10 bytes after 2000, then a 1000-byte write). */
TEST(test_shrunk_window_is_respected)
{
    struct cf s;
    cf_init(&s);
    s.c = (slip_idx_t)tcp_conn__open(s.sh);
    CHECK(tcp_conn__connect(s.env, s.sh, s.c, 0, 40000, PEER, 80), ==, -EINPROGRESS);
    struct tout o;
    CHECK(t_last(&s.h, &o), ==, true);
    s.iss = o.th.seq;
    h_free_sent(&s.h);
    s.env->now += 10 * SLIP_MSEC;
    struct tseg sa = { .sport = 80, .dport = 40000, .seq = 0, .ack = s.iss + 1,
                       .flags = WIRE_TCP_SYN | WIRE_TCP_ACK, .win = 0, .opts = t_synopts(1000, -1, true, false, 0) };
    t_feed(&s.h, s.sh, &sa);
    CHECK(C(&s)->state, ==, TCPS_ESTABLISHED);
    h_free_sent(&s.h);
    struct tseg a = { .sport = 80, .dport = 40000, .seq = 1, .ack = s.iss + 1, .flags = WIRE_TCP_ACK };
    CHECK(cf_send(&s, 1000, 0), ==, 1000);
    CHECK(s.h.nsent, ==, 0u);
    advance(&s, 100 * SLIP_MSEC);
    h_free_sent(&s.h);
    struct tcp_conn_info in;
    tcp_conn__info_at(s.sh, s.c, s.env->now, &in);
    CHECK(in.rwnd_limited_us, >=, 99000u);
    CHECK(in.rwnd_limited_us, <=, 101000u);
    a.win = 2000;
    t_feed(&s.h, s.sh, &a);
    CHECK(t_last(&s.h, &o), ==, true);
    CHECK(o.len, ==, 1000u);
    h_free_sent(&s.h);
    s.env->now += 30 * SLIP_MSEC;
    a.ack = s.iss + 1001;
    a.win = 10;
    t_feed(&s.h, s.sh, &a);
    CHECK(cf_send(&s, 1000, 0), ==, 1000);
    unsigned n;
    uint32_t end;
    sent_bytes(&s, &n, &end);
    CHECK(seq_leq(end, s.iss + 1001 + 10), ==, true);
    advance(&s, 100 * SLIP_MSEC);
    sent_bytes(&s, &n, &end);
    CHECK(seq_leq(end, s.iss + 1001 + 10), ==, true);
    a.win = 2000;
    t_feed(&s.h, s.sh, &a);
    sent_bytes(&s, &n, &end);
    CHECK(end, ==, s.iss + 2001);
    tcp_conn__info_at(s.sh, s.c, s.env->now, &in);
    CHECK(in.rwnd_limited_us, >=, 199000u);
    CHECK(in.rwnd_limited_us, <=, 201000u);
    tcp_conn__abort(s.env, s.sh, s.c);
    cf_fini(&s);
}

/* TCP_INFO's later fields with Linux's meaning: advmss (what our SYN offered), the times since
 * the last data and ACK (from the handshake on), ca_state (Disorder or Recovery) with sacked in
 * segments when a SACK reports a hole, busy time. Before, these were all 0. */
TEST(test_tcp_info_fields)
{
    struct cf s;
    cf_init(&s);
    cf_handshake(&s, 1000, 2000, true);
    struct tcp_conn_info in;
    advance(&s, 500 * SLIP_MSEC);
    tcp_conn__info_at(s.sh, s.c, s.env->now, &in);
    CHECK(in.advmss, ==, (uint32_t)C(&s)->adv_mss);
    CHECK(in.advmss, >, 1000u);
    CHECK(in.last_data_recv_ms, ==, 500u);
    CHECK(in.last_ack_recv_ms, ==, 500u);
    CHECK(in.ca_state, ==, 0);
    pseg(&s, WIRE_TCP_ACK | WIRE_TCP_PSH, s.pseq, s.iss + 1, "abc", 3, 2000);
    s.pseq += 3;
    tcp_conn__info_at(s.sh, s.c, s.env->now, &in);
    CHECK(in.last_data_recv_ms, ==, 0u);
    CHECK(cf_send(&s, 3000, 0), ==, 3000);
    /* The peer got the third segment only: SACK [2001, 3001). */
    struct tseg t = { .sport = 5555, .dport = 80, .seq = s.pseq, .ack = s.iss + 1, .flags = WIRE_TCP_ACK,
                      .win = 2000 };
    t.opts.nsack = 1;
    t.opts.sack[0].left = s.iss + 2001;
    t.opts.sack[0].right = s.iss + 3001;
    t_feed(&s.h, s.sh, &t);
    s.env->now += 5 * SLIP_MSEC;
    tcp_conn__info_at(s.sh, s.c, s.env->now, &in);
    CHECK(in.ca_state, ==, (C(&s)->flags & TCPF_RECOVERY) ? 3 : 1);  /* Recovery, else Disorder */
    CHECK(in.sacked, ==, 1u);
    CHECK(in.unacked, ==, 3000u);
    CHECK(in.busy_us, ==, 5000u);
    cf_close(&s);
}

/* packetdrill slow_start/slow-start-app-limited: exactly IW10 written, ACKed two segments at a
 * time. cwnd grows by 2 with every ACK up to 20, as Linux (tcp_is_cwnd_limited: in slow start
 * cwnd may grow to twice the most that was in flight in the window), although the flight falls
 * as the ACKs come and nothing new is written. */
TEST(test_slow_start_app_limited_grows_to_twice_the_flight)
{
    struct cf s;
    cf_init(&s);
    cf_handshake(&s, 1000, 257, true);
    CHECK(C(&s)->cwnd, ==, 10000u);
    CHECK(cf_send(&s, 10000, 0), ==, 10000);
    h_free_sent(&s.h);
    for (uint32_t k = 1; k <= 5; k++) {
        s.env->now += 5 * SLIP_MSEC;
        pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1 + 2000 * k, NULL, 0, 257);
        CHECK(C(&s)->cwnd, ==, 10000u + 2000u * k);
    }
    cf_close(&s);
}

/* packetdrill sack/sack-shift-sacked-2-6-8-3-9-nofack, first part: 10 segments, SACKs of 3, 7
 * and 9 start recovery and 1 is resent. TCP_INFO says lost 6 (Linux's lost_out: 1-2, 4-6 and
 * 8 are marked lost, the resent one still counts) and retrans 1 (retrans_out); then the SACK
 * of 4 takes one off lost. Both read 0 before. */
TEST(test_tcp_info_lost_and_retrans)
{
    struct cf s;
    cf_init(&s);
    cf_handshake(&s, 1000, 1024, true);
    CHECK(cf_send(&s, 10000, 0), ==, 10000);
    h_free_sent(&s.h);
    uint32_t una = s.iss + 1;
    s.env->now += 100 * SLIP_MSEC;
    struct tseg t = { .sport = 5555, .dport = 80, .seq = s.pseq, .ack = una, .flags = WIRE_TCP_ACK, .win = 257 };
    uint32_t blk[3][2] = { { 2000, 3000 }, { 6000, 7000 }, { 8000, 9000 } };
    for (unsigned n = 1; n <= 3; n++) {
        t.opts.nsack = (uint8_t)n;
        for (unsigned k = 0; k < n; k++) {
            t.opts.sack[k].left = una + blk[k][0];
            t.opts.sack[k].right = una + blk[k][1];
        }
        t_feed(&s.h, s.sh, &t);
        s.env->now += SLIP_MSEC;
    }
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 1);
    struct tcp_conn_info in;
    tcp_conn__info_at(s.sh, s.c, s.env->now, &in);
    CHECK(in.ca_state, ==, 3);
    CHECK(in.lost, ==, 6u);
    CHECK(in.retrans, ==, 1u);
    t.opts.sack[0].right = una + 4000;
    t_feed(&s.h, s.sh, &t);
    tcp_conn__info_at(s.sh, s.c, s.env->now, &in);
    CHECK(in.lost, ==, 5u);
    cf_close(&s);
}

/* TCP_USER_TIMEOUT (RFC 5482, Linux's tcp(7) option; packetdrill user_timeout): with 3000 ms set,
 * data that is never acknowledged ends the connection with ETIMEDOUT about 3 s after it was
 * first sent (the last retransmission timeout is cut short to end there), not after the whole
 * exponential backoff (minutes). Option read back as set; a negative value is EINVAL. */
TEST(test_user_timeout_ends_unacknowledged_connection)
{
    struct cf s;
    cf_init(&s);
    cf_handshake(&s, 1000, 257, true);
    CHECK(tcp_conn__setopt(s.env, s.sh, s.c, TCPO_USER_TIMEOUT, -1), ==, -EINVAL);
    CHECK(tcp_conn__setopt(s.env, s.sh, s.c, TCPO_USER_TIMEOUT, 3000), ==, 0);
    int v = 0;
    CHECK(tcp_conn__getopt(s.sh, s.c, TCPO_USER_TIMEOUT, &v), ==, 0);
    CHECK(v, ==, 3000);
    slip_time_t t0 = s.env->now;
    CHECK(cf_send(&s, 1000, 0), ==, 1000);
    advance(&s, 2900 * SLIP_MSEC);
    CHECK(C(&s)->state, ==, TCPS_ESTABLISHED);
    CHECK(C(&s)->rxt_shift, >, 0);
    advance(&s, 200 * SLIP_MSEC);
    CHECK(C(&s)->state, ==, TCPS_CLOSED);
    CHECK(C(&s)->so_error, ==, ETIMEDOUT);
    CHECK(s.env->now - t0, <=, 3100 * SLIP_MSEC);
    cf_close(&s);
}

/* TCP_USER_TIMEOUT bounds our own SYN too (Linux tcp_write_timeout: the retry count or the user
 * timeout, whichever comes first): with 1500 ms set before connect() and no answer, connect
 * fails with ETIMEDOUT 1.5 s after the first SYN, not after TCP_SYN_RETRIES backed-off retries
 * (over two minutes). */
TEST(test_user_timeout_ends_unanswered_syn)
{
    struct cf s;
    cf_init(&s);
    s.c = (slip_idx_t)tcp_conn__open(s.sh);
    CHECK(tcp_conn__setopt(s.env, s.sh, s.c, TCPO_USER_TIMEOUT, 1500), ==, 0);
    slip_time_t t0 = s.env->now;
    CHECK(tcp_conn__connect(s.env, s.sh, s.c, 0, 40000, PEER, 80), ==, -EINPROGRESS);
    advance(&s, 1400 * SLIP_MSEC);
    CHECK(C(&s)->state, ==, TCPS_SYN_SENT);
    CHECK(C(&s)->rxt_shift, ==, 1);      /* the SYN went again after the 1 s initial RTO */
    advance(&s, 200 * SLIP_MSEC);
    CHECK(C(&s)->state, ==, TCPS_CLOSED);
    CHECK(C(&s)->so_error, ==, ETIMEDOUT);
    CHECK(s.sh->c.conn_timeouts, ==, 1u);
    CHECK(s.env->now - t0, <=, 1600 * SLIP_MSEC);
    tcp_conn__close(s.env, s.sh, s.c);
    cf_fini(&s);
}

/* Zero-window probing answered by a peer that keeps its window shut: without the option that
 * goes on for ever (RFC 9293 §3.8.6.1); with TCP_USER_TIMEOUT 3000 the connection ends about 3 s
 * after the first probe (Linux tcp_probe_timer), although every probe is answered. */
TEST(test_user_timeout_ends_zero_window_probing)
{
    struct cf s;
    cf_init(&s);
    cf_handshake(&s, 1000, 0, true);
    CHECK(tcp_conn__setopt(s.env, s.sh, s.c, TCPO_USER_TIMEOUT, 3000), ==, 0);
    CHECK(cf_send(&s, 1000, 0), ==, 1000);
    CHECK(s.h.nsent, ==, 0u);
    slip_time_t first = 0, end = s.env->now + 10 * SLIP_SEC;
    unsigned probes = 0;
    while (C(&s)->state == TCPS_ESTABLISHED && s.env->now < end) {
        advance(&s, 10 * SLIP_MSEC);
        if (s.h.nsent == 0 || C(&s)->state != TCPS_ESTABLISHED)
            continue;
        struct tout o;
        CHECK(t_last(&s.h, &o), ==, true);
        CHECK(o.len, ==, 0u);
        CHECK(o.th.seq, ==, s.iss);      /* the probe: SND.UNA - 1 */
        if (!first)
            first = s.env->now;
        probes++;
        h_free_sent(&s.h);
        pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, NULL, 0, 0);
    }
    CHECK(probes, >=, 3u);
    CHECK(C(&s)->state, ==, TCPS_CLOSED);
    CHECK(C(&s)->so_error, ==, ETIMEDOUT);
    CHECK(s.env->now - first, >=, 3000 * SLIP_MSEC);
    CHECK(s.env->now - first, <=, 3020 * SLIP_MSEC);
    cf_close(&s);
}

/* Keepalive with TCP_USER_TIMEOUT: the connection ends once the peer has been silent for the
 * user timeout and a probe went unanswered, whatever TCP_KEEPCNT says (Linux
 * tcp_keepalive_timer). Idle 1 s, interval 1 s, 9 probes, user timeout 2500 ms: probes at 1 s
 * and 2 s, the end at 3 s (not at 10 s after 9 probes). */
TEST(test_user_timeout_ends_keepalive_probing)
{
    struct cf s;
    cf_init(&s);
    cf_handshake(&s, 1000, 257, true);
    slip_time_t t0 = s.env->now;
    CHECK(tcp_conn__setopt(s.env, s.sh, s.c, TCPO_KEEPIDLE, 1), ==, 0);
    CHECK(tcp_conn__setopt(s.env, s.sh, s.c, TCPO_KEEPINTVL, 1), ==, 0);
    CHECK(tcp_conn__setopt(s.env, s.sh, s.c, TCPO_KEEPCNT, 9), ==, 0);
    CHECK(tcp_conn__setopt(s.env, s.sh, s.c, TCPO_USER_TIMEOUT, 2500), ==, 0);
    CHECK(tcp_conn__setopt(s.env, s.sh, s.c, TCPO_KEEPALIVE, 1), ==, 0);
    advance(&s, 2900 * SLIP_MSEC);
    CHECK(C(&s)->state, ==, TCPS_ESTABLISHED);
    CHECK(C(&s)->keep_probes, ==, 2);
    advance(&s, 200 * SLIP_MSEC);
    CHECK(C(&s)->state, ==, TCPS_CLOSED);
    CHECK(C(&s)->so_error, ==, ETIMEDOUT);
    CHECK(s.sh->c.keepalive_drops, ==, 1u);
    CHECK(s.env->now - t0, <=, 3100 * SLIP_MSEC);
    cf_close(&s);
}

/* New data after close() while our FIN is unacknowledged (packetdrill user_timeout): the reset
 * answers the segment, <SEQ=SEG.ACK><CTL=RST> without ACK, as Linux's; before, a RST+ACK at our
 * SND.MAX (past the FIN the peer has not acknowledged), which a peer following RFC 5961 §3.2
 * answers with a challenge ACK instead of closing. */
TEST(test_data_after_close_is_answered_by_rst_at_seg_ack)
{
    struct cf s;
    cf_init(&s);
    cf_handshake(&s, 1000, 257, true);
    tcp_conn__close(s.env, s.sh, s.c);
    struct tout o;
    CHECK(t_last(&s.h, &o), ==, true);
    CHECK(o.th.flags & WIRE_TCP_FIN, !=, 0);
    h_free_sent(&s.h);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, "z", 1, 257);
    CHECK(s.sh->c.abort_on_data, ==, 1u);
    CHECK(s.h.nsent, ==, 1u);
    CHECK(t_last(&s.h, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_RST);
    CHECK(o.th.seq, ==, s.iss + 1);
    CHECK(o.len, ==, 0u);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    CHECK(s.sh->nused, ==, 0u);
    cf_fini(&s);
}

/* MSG_MORE holds a partial tail only in the send that carried it, as Linux (its tcp_push corks
 * that one push): the next ACK sends the tail under the socket's own rules (TCP_NODELAY here),
 * without PSH (packetdrill nagle/sendmsg_msg_more: 3100 bytes and 50 with MSG_MORE, an ACK for
 * the first 2000, then the 150 alone). Before, the tail waited for a later send or the RTO. */
TEST(test_msg_more_tail_goes_with_the_next_ack)
{
    struct cf s;
    cf_init(&s);
    cf_handshake(&s, 1000, 257, true);
    CHECK(tcp_conn__setopt(s.env, s.sh, s.c, TCPO_NODELAY, 1), ==, 0);
    CHECK(cf_send(&s, 3100, TCP_SEND_MORE), ==, 3100);
    unsigned n;
    uint32_t end;
    CHECK(sent_bytes(&s, &n, &end), ==, 3000u);
    h_free_sent(&s.h);
    s.env->now += 3 * SLIP_MSEC;
    CHECK(cf_send(&s, 50, TCP_SEND_MORE), ==, 50);
    CHECK(s.h.nsent, ==, 0u);
    s.env->now += 10 * SLIP_MSEC;
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 2001, NULL, 0, 257);
    CHECK(s.h.nsent, ==, 1u);
    struct tout o;
    CHECK(t_last(&s.h, &o), ==, true);
    CHECK(o.th.seq, ==, s.iss + 3001);
    CHECK(o.len, ==, 150u);
    CHECK(o.th.flags, ==, WIRE_TCP_ACK);
    h_free_sent(&s.h);
    /* While data is in flight a MSG_MORE send still holds its own tail. */
    s.env->now += SLIP_MSEC;
    CHECK(cf_send(&s, 4, TCP_SEND_MORE), ==, 4);
    CHECK(s.h.nsent, ==, 0u);
    s.env->now += 10 * SLIP_MSEC;
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 3151, NULL, 0, 257);
    CHECK(t_last(&s.h, &o), ==, true);
    CHECK(o.th.seq, ==, s.iss + 3151);
    CHECK(o.len, ==, 4u);
    cf_close(&s);
}

/* TCP_INFO sndbuf_limited counts what Linux counts (tcp_cwnd_validate): time after a send that
 * left nothing queued unsent, with cwnd not the limit, while the writer had found the buffer
 * full; it ends when a third of the buffer is free again. A 20000-byte buffer, a writer with
 * 150000 bytes that refills it after the ACKs (as packetdrill tcp-info-sndbuf-limited's blocking
 * write), every segment acknowledged 10 ms after it left: the first two rounds are cwnd-limited
 * (10, then 20 segments in flight), the next two leave with room in cwnd and the buffer is the
 * limit: 30 ms of the 50 ms busy. Before, every moment the buffer was full counted: 50 ms. */
TEST(test_tcp_info_sndbuf_limited_counts_when_the_buffer_idles_the_path)
{
    struct cf s;
    cf_init(&s);
    s.c = (slip_idx_t)tcp_conn__open(s.sh);
    CHECK(tcp_conn__setopt(s.env, s.sh, s.c, TCPO_SNDBUF, 20000), ==, 0);
    CHECK(tcp_conn__connect(s.env, s.sh, s.c, 0, 40000, PEER, 80), ==, -EINPROGRESS);
    struct tout o;
    CHECK(t_last(&s.h, &o), ==, true);
    s.iss = o.th.seq;
    h_free_sent(&s.h);
    s.env->now += 10 * SLIP_MSEC;
    struct tseg sa = { .sport = 80, .dport = 40000, .seq = 0, .ack = s.iss + 1, .flags = WIRE_TCP_SYN | WIRE_TCP_ACK,
                       .win = 10000, .opts = t_synopts(1000, 8, true, false, 0) };
    t_feed(&s.h, s.sh, &sa);
    CHECK(C(&s)->state, ==, TCPS_ESTABLISHED);
    s.env->now += 90 * SLIP_MSEC;
    size_t left = 150000;
    ssize_t n = cf_send(&s, left, 0);
    CHECK(n, ==, 20000);
    left -= (size_t)n;
    for (unsigned round = 0; round < 3; round++) {
        s.env->now += 10 * SLIP_MSEC;
        uint32_t una = C(&s)->snd_una, nxt = C(&s)->snd_nxt;
        for (uint32_t ack = una + 1000; seq_leq(ack, nxt); ack += 1000) {
            struct tseg a = { .sport = 80, .dport = 40000, .seq = 1, .ack = ack, .flags = WIRE_TCP_ACK, .win = 10000 };
            t_feed(&s.h, s.sh, &a);
        }
        n = cf_send(&s, left, 0);       /* the blocked writer, woken: it fills the buffer again */
        CHECK(n, >, 0);
        left -= (size_t)n;
        CHECK(C(&s)->sndq.bytes, ==, 20000u);
        h_free_sent(&s.h);
    }
    CHECK(C(&s)->snd_nxt - s.iss, ==, 70001u);
    s.env->now += 20 * SLIP_MSEC;
    struct tcp_conn_info in;
    tcp_conn__info_at(s.sh, s.c, s.env->now, &in);
    CHECK(in.busy_us, ==, 50000u);
    CHECK(in.sndbuf_limited_us, ==, 30000u);
    CHECK(in.rwnd_limited_us, ==, 0u);
    tcp_conn__abort(s.env, s.sh, s.c);
    cf_fini(&s);
}

/* TCP_MAXSEG keeps reading the connection's MSS after a reset, as Linux's mss_cache does
 * (packetdrill mss/mss-getsockopt-tcp_maxseg-server: its wire server resets the connection
 * before the script reads 1100). Before, a CLOSED connection read 536, the value of a socket
 * that never connected. A failed connect() still reads 536. */
TEST(test_maxseg_after_reset_is_the_connection_mss)
{
    struct cf s;
    cf_init(&s);
    cf_handshake(&s, 1100, 257, true);
    int v = 0;
    CHECK(tcp_conn__getopt(s.sh, s.c, TCPO_MAXSEG, &v), ==, 0);
    CHECK(v, ==, 1100);
    pseg(&s, WIRE_TCP_RST | WIRE_TCP_ACK, s.pseq, s.iss + 1, NULL, 0, 257);
    CHECK(C(&s)->state, ==, TCPS_CLOSED);
    CHECK(tcp_conn__getopt(s.sh, s.c, TCPO_MAXSEG, &v), ==, 0);
    CHECK(v, ==, 1100);
    tcp_conn__close(s.env, s.sh, s.c);

    s.c = (slip_idx_t)tcp_conn__open(s.sh);
    CHECK(tcp_conn__connect(s.env, s.sh, s.c, 0, 40000, PEER, 80), ==, -EINPROGRESS);
    struct tout o;
    CHECK(t_last(&s.h, &o), ==, true);
    struct tseg rst = { .sport = 80, .dport = 40000, .seq = 0, .ack = o.th.seq + 1,
                        .flags = WIRE_TCP_RST | WIRE_TCP_ACK };
    t_feed(&s.h, s.sh, &rst);
    CHECK(C(&s)->state, ==, TCPS_CLOSED);
    CHECK(tcp_conn__getopt(s.sh, s.c, TCPO_MAXSEG, &v), ==, 0);
    CHECK(v, ==, 536);
    tcp_conn__close(s.env, s.sh, s.c);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    cf_fini(&s);
}

/* Without window scaling our window field tops out at 65535: a read that frees buffer space
 * beyond that cannot move the right edge, so no window update goes out (Linux's window_clamp;
 * packetdrill ioctl/ioctl-siocinq-fin: its next expected segment is the ACK of a later FIN, and
 * ours was a repeated ACK with the same 65535 window). With scaling the update still goes once
 * the offered window fell to half of what the buffer allows. */
TEST(test_read_sends_no_window_update_that_moves_nothing)
{
    struct cf s;
    cf_init(&s);
    struct tout o;
    cf_listen_syn(&s, 1000, 20000, t_synopts(1000, -1, true, false, 0), &o);
    CHECK(o.th.opts.has_wscale, ==, false);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, NULL, 0, 20000);
    int c = tcp_conn__accept(s.sh, (slip_idx_t)s.l);
    CHECK(c, >=, 0);
    s.c = (slip_idx_t)c;
    CHECK(tcp_rcv_space(C(&s)), >, 65535u);     /* the buffer could offer more than the field */
    static char data[1000];
    pseg(&s, WIRE_TCP_ACK | WIRE_TCP_PSH, s.pseq, s.iss + 1, data, sizeof(data), 20000);
    s.pseq += sizeof(data);
    CHECK(t_last(&s.h, &o), ==, true);           /* the ACK (one of the first, quick) */
    CHECK(o.th.ack, ==, s.pseq);
    CHECK(o.th.window, ==, 65535);
    h_free_sent(&s.h);
    char buf[5000];
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, buf, 1000, 0), ==, 1000);
    CHECK(s.h.nsent, ==, 0u);
    tcp_conn__abort(s.env, s.sh, s.c);

    /* Scaled, an 8192-byte buffer: 5000 bytes held leave 3192 offered, under half; reading
     * them moves the edge by 5000, and the update goes. */
    CHECK(tcp_conn__setopt(s.env, s.sh, (slip_idx_t)s.l, TCPO_RCVBUF, 8192), ==, 0);
    struct tseg syn = { .sport = 5556, .dport = 80, .seq = 1000, .flags = WIRE_TCP_SYN, .win = 20000,
                        .opts = t_synopts(1000, 7, true, false, 0) };
    t_feed(&s.h, s.sh, &syn);
    CHECK(t_last(&s.h, &o), ==, true);
    CHECK(o.th.opts.has_wscale, ==, true);
    uint32_t iss = o.th.seq, pseq = 1001;
    h_free_sent(&s.h);
    struct tseg t = { .sport = 5556, .dport = 80, .seq = pseq, .ack = iss + 1, .flags = WIRE_TCP_ACK, .win = 200 };
    t_feed(&s.h, s.sh, &t);
    c = tcp_conn__accept(s.sh, (slip_idx_t)s.l);
    CHECK(c, >=, 0);
    s.c = (slip_idx_t)c;
    t.flags = WIRE_TCP_ACK | WIRE_TCP_PSH;
    t.data = data;
    t.len = sizeof(data);
    for (int k = 0; k < 5; k++, t.seq += 1000)
        t_feed(&s.h, s.sh, &t);
    s.env->now += 50 * SLIP_MSEC;
    tcp_timer__poll(s.env, s.sh);               /* any delayed ACK out */
    h_free_sent(&s.h);
    CHECK(C(&s)->rcv_adv - C(&s)->rcv_nxt, <=, 4096u);
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, buf, sizeof(buf), 0), ==, 5000);
    CHECK(s.h.nsent, ==, 1u);
    CHECK(t_last(&s.h, &o), ==, true);
    CHECK((uint32_t)o.th.window << C(&s)->rcv_wscale, >=, 8000u);
    cf_close(&s);
}

/* A segment whose ACK acknowledges data never sent is dropped (RFC 9293 §3.10.7.4), and its
 * TSval must not become TS.Recent (Linux takes it only with an acceptable ACK): else PAWS
 * drops every later segment with sane timestamps (packetdrill ts_recent/invalid_ack: a FIN
 * with ACK 9999 and TSval 200000, then data with TSval 201, which must be taken and ACKed
 * with TSecr 201). Before, the data was dropped as an old duplicate. */
TEST(test_invalid_ack_does_not_set_ts_recent)
{
    struct cf s;
    cf_init(&s);
    struct tout o;
    cf_listen_syn(&s, 0, 20000, t_synopts(1000, -1, true, true, 100), &o);
    CHECK(o.th.opts.has_ts, ==, true);
    uint32_t iss = s.iss, ours = o.th.opts.tsval;
    struct tseg t = { .sport = 5555, .dport = 80, .win = 20000 };
    t.opts.has_ts = true;
    t.opts.tsecr = ours;
    t.seq = 1;
    t.ack = iss + 1;
    t.flags = WIRE_TCP_ACK;
    t.opts.tsval = 200;
    t_feed(&s.h, s.sh, &t);
    int c = tcp_conn__accept(s.sh, (slip_idx_t)s.l);
    CHECK(c, >=, 0);
    s.c = (slip_idx_t)c;
    t.flags = WIRE_TCP_FIN | WIRE_TCP_ACK;
    t.ack = iss + 9999;
    t.opts.tsval = 200000;
    t_feed(&s.h, s.sh, &t);
    CHECK(C(&s)->ts_recent, ==, 200u);
    h_free_sent(&s.h);
    static char data[1000];
    t.flags = WIRE_TCP_ACK;
    t.ack = iss + 1;
    t.opts.tsval = 201;
    t.data = data;
    t.len = sizeof(data);
    t_feed(&s.h, s.sh, &t);
    CHECK(C(&s)->rcv_nxt, ==, 1001u);
    CHECK(t_last(&s.h, &o), ==, true);
    CHECK(o.th.ack, ==, 1001u);
    CHECK(o.th.opts.tsecr, ==, 201u);
    cf_close(&s);
}

TEST_MAIN()
