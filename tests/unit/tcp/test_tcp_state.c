/* TCP state machine tests, named test_<state>_<event>: one stack (198.18.0.2) against a peer
 * whose segments are crafted from templates (198.18.0.1); what we send is captured and parsed.
 * Every test ends with the table empty (or purged) and harness_fini()'s frame leak check. */
#include "tests/unit/tcp/tcp_test.h"
#include "wire/icmp.h"

struct st {
    struct harness h;
    struct tcp_shared *sh;
    struct ip_env *env;
    int l;                  /* listener, or -1 */
    slip_idx_t c;           /* the connection under test */
    uint16_t pport, lport;  /* peer's port, ours */
    uint32_t iss;           /* our ISS */
    uint32_t pseq;          /* the peer's next sequence number */
    bool ts;
    uint32_t tsval;         /* the peer's clock */
    uint32_t our_tsval;     /* last TSval we sent */
};

static void st_init(struct st *s)
{
    memset(s, 0, sizeof(*s));
    harness_init(&s->h);
    s->sh = t_new_shared(64);
    s->env = &s->h.env;
    s->l = -1;
    s->tsval = 1000;
}

/* Teardown: with expect_empty the table must be empty already (the test closed everything). */
static void st_fini(struct st *s, bool expect_empty)
{
    if (expect_empty)
        CHECK(s->sh->nused, ==, 0);
    tcp_shared__purge(s->sh, &s->h.pool);
    free(s->sh);
    harness_fini(&s->h);
}

/* A segment from the peer on the connection under test. */
static void pseg(struct st *s, uint8_t flags, uint32_t seq, uint32_t ack, const void *data, size_t len, uint16_t win)
{
    struct tseg t = { .sport = s->pport, .dport = s->lport, .seq = seq, .ack = ack, .flags = flags,
                      .win = win, .data = data, .len = len };
    if (s->ts) {
        t.opts.has_ts = true;
        t.opts.tsval = ++s->tsval;
        t.opts.tsecr = s->our_tsval;
    }
    t_feed(&s->h, s->sh, &t);
}

static bool last(struct st *s, struct tout *o)
{
    bool ok = t_last(&s->h, o);
    if (ok && o->th.opts.has_ts)
        s->our_tsval = o->th.opts.tsval;
    return ok;
}

static struct tcp_conn *C(struct st *s) { return tcp_conn__get(s->sh, s->c); }

static void st_listen(struct st *s, int backlog)
{
    s->l = tcp_conn__open(s->sh);
    CHECK(s->l, >=, 0);
    CHECK(tcp_conn__listen(s->sh, (slip_idx_t)s->l, 0, 80, backlog), ==, 0);
    s->lport = 80;
    s->pport = 5555;
}

/* LISTEN + SYN + ACK, accepted: ESTABLISHED passive connection. */
static void st_passive(struct st *s, bool ts)
{
    st_listen(s, 8);
    s->ts = ts;
    struct tseg syn = { .sport = 5555, .dport = 80, .seq = 1000, .flags = WIRE_TCP_SYN, .win = 65535,
                        .opts = t_synopts(1460, 7, true, ts, s->tsval) };
    t_feed(&s->h, s->sh, &syn);
    struct tout o;
    CHECK(last(s, &o), ==, true);
    s->iss = o.th.seq;
    s->pseq = 1001;
    h_free_sent(&s->h);
    pseg(s, WIRE_TCP_ACK, s->pseq, s->iss + 1, NULL, 0, 1000);   /* 1000 << 7 = 128000 */
    int c = tcp_conn__accept(s->sh, (slip_idx_t)s->l);
    CHECK(c, >=, 0);
    s->c = (slip_idx_t)c;
    CHECK(C(s)->state, ==, TCPS_ESTABLISHED);
    h_free_sent(&s->h);
}

/* connect() + SYN-ACK: ESTABLISHED active connection. */
static void st_active(struct st *s, bool ts)
{
    s->ts = ts;
    s->lport = 40000;
    s->pport = 80;
    int c = tcp_conn__open(s->sh);
    CHECK(c, >=, 0);
    s->c = (slip_idx_t)c;
    CHECK(tcp_conn__connect(s->env, s->sh, s->c, 0, 40000, PEER, 80), ==, -EINPROGRESS);
    struct tout o;
    CHECK(last(s, &o), ==, true);
    s->iss = o.th.seq;
    h_free_sent(&s->h);
    struct tseg sa = { .sport = 80, .dport = 40000, .seq = 5000, .ack = s->iss + 1,
                       .flags = WIRE_TCP_SYN | WIRE_TCP_ACK, .win = 65535,
                       .opts = t_synopts(1460, 7, true, ts, s->tsval) };
    sa.opts.tsecr = s->our_tsval;
    t_feed(&s->h, s->sh, &sa);
    s->pseq = 5001;
    CHECK(C(s)->state, ==, TCPS_ESTABLISHED);
    CHECK(last(s, &o), ==, true);
    h_free_sent(&s->h);
}

static ssize_t sendstr(struct st *s, const char *str, unsigned flags)
{
    struct iovec iov = { (void *)str, strlen(str) };
    return tcp_conn__send(s->env, s->sh, s->c, &iov, 1, flags);
}

/* Runs timers up to now + dt. */
static void advance(struct st *s, slip_time_t dt)
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

/* ---------------- CLOSED / LISTEN ---------------- */

TEST(test_closed_syn_sends_rst)
{
    struct st s;
    st_init(&s);
    struct tseg syn = { .sport = 5555, .dport = 81, .seq = 77, .flags = WIRE_TCP_SYN, .win = 1000 };
    t_feed(&s.h, s.sh, &syn);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_RST | WIRE_TCP_ACK);
    CHECK(o.th.seq, ==, 0);
    CHECK(o.th.ack, ==, 78);
    CHECK(s.sh->c.no_conn, ==, 1);
    /* ACK-bearing segment: <SEQ=SEG.ACK><CTL=RST>; a RST is never answered. */
    h_free_sent(&s.h);
    struct tseg ack = { .sport = 5555, .dport = 81, .seq = 77, .ack = 4242, .flags = WIRE_TCP_ACK, .win = 1000 };
    t_feed(&s.h, s.sh, &ack);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_RST);
    CHECK(o.th.seq, ==, 4242);
    h_free_sent(&s.h);
    struct tseg rst = { .sport = 5555, .dport = 81, .seq = 77, .flags = WIRE_TCP_RST };
    t_feed(&s.h, s.sh, &rst);
    CHECK(s.h.nsent, ==, 0);
    st_fini(&s, true);
}

TEST(test_closed_bad_checksum_and_options_counted)
{
    struct st s;
    st_init(&s);
    st_listen(&s, 4);
    struct tseg syn = { .sport = 5555, .dport = 80, .seq = 1, .flags = WIRE_TCP_SYN, .win = 1000, .bad_csum = true };
    t_feed(&s.h, s.sh, &syn);
    CHECK(s.sh->c.bad_csum, ==, 1);
    CHECK(s.h.nsent, ==, 0);
    /* An option whose length runs past the header. */
    uint8_t raw[24] = { 0x15, 0xb3, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x60, WIRE_TCP_SYN, 0x10, 0, 0, 0, 0, 0,
                        2, 9, 5, 0xb4 };
    wire_tcp__set_csum(raw, sizeof(raw), PEER, US);
    struct wire_ipv4_repr ip = { .src = PEER, .dst = US, .proto = WIRE_IPPROTO_TCP, .id = 1 };
    struct ip_rx rx;
    if (ip_input(s.env, h_rx_frame(&s.h, &ip, raw, sizeof(raw)), H_IFINDEX, &rx))
        tcp_input(s.env, s.sh, &rx);
    CHECK(s.sh->c.bad_options, ==, 1);
    CHECK(s.h.nsent, ==, 0);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

TEST(test_listen_syn)
{
    struct st s;
    st_init(&s);
    st_listen(&s, 8);
    struct tseg syn = { .sport = 5555, .dport = 80, .seq = 1000, .flags = WIRE_TCP_SYN, .win = 29200,
                        .opts = t_synopts(1400, 7, true, true, 12345) };
    t_feed(&s.h, s.sh, &syn);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_SYN | WIRE_TCP_ACK);
    CHECK(o.th.ack, ==, 1001);
    CHECK(o.th.opts.has_mss, ==, true);
    CHECK(o.th.opts.mss, ==, 1460);         /* MTU 1500 - 40 */
    CHECK(o.th.opts.has_wscale, ==, true);
    CHECK(o.th.opts.sack_ok, ==, true);
    CHECK(o.th.opts.has_ts, ==, true);
    CHECK(o.th.opts.tsecr, ==, 12345);
    slip_idx_t child = tcp__lookup(s.sh, US, 80, PEER, 5555);
    CHECK(child, !=, (slip_idx_t)s.l);
    CHECK(tcp_conn__get(s.sh, child)->state, ==, TCPS_SYN_RECEIVED);
    CHECK(tcp_conn__get(s.sh, child)->mss, ==, 1400);
    CHECK(tcp_conn__get(s.sh, child)->snd_wscale, ==, 7);
    CHECK(tcp_conn__accept(s.sh, (slip_idx_t)s.l), ==, -EAGAIN);
    CHECK(tcp_conn__poll(s.sh, (slip_idx_t)s.l), ==, 0);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

TEST(test_listen_syn_without_options_gets_none)
{
    struct st s;
    st_init(&s);
    st_listen(&s, 8);
    struct tseg syn = { .sport = 5555, .dport = 80, .seq = 1000, .flags = WIRE_TCP_SYN, .win = 29200 };
    t_feed(&s.h, s.sh, &syn);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.opts.has_mss, ==, true);     /* MSS is always sent */
    CHECK(o.th.opts.has_wscale, ==, false);
    CHECK(o.th.opts.sack_ok, ==, false);
    CHECK(o.th.opts.has_ts, ==, false);
    slip_idx_t child = tcp__lookup(s.sh, US, 80, PEER, 5555);
    CHECK(tcp_conn__get(s.sh, child)->mss, ==, 536);   /* RFC 9293 §3.7.1 default */
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

TEST(test_listen_ack_without_syn_sends_rst)
{
    struct st s;
    st_init(&s);
    st_listen(&s, 8);
    struct tseg ack = { .sport = 5555, .dport = 80, .seq = 1000, .ack = 99999, .flags = WIRE_TCP_ACK, .win = 100 };
    t_feed(&s.h, s.sh, &ack);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_RST);
    CHECK(o.th.seq, ==, 99999);
    CHECK(s.sh->c.syncookies_failed, ==, 1);
    CHECK(s.sh->nused, ==, 1);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

TEST(test_listen_rst_ignored)
{
    struct st s;
    st_init(&s);
    st_listen(&s, 8);
    struct tseg rst = { .sport = 5555, .dport = 80, .seq = 1000, .flags = WIRE_TCP_RST };
    t_feed(&s.h, s.sh, &rst);
    CHECK(s.h.nsent, ==, 0);
    CHECK(s.sh->nused, ==, 1);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

TEST(test_listen_second_listener_same_port_in_use)
{
    struct st s;
    st_init(&s);
    st_listen(&s, 8);
    int l2 = tcp_conn__open(s.sh);
    CHECK(tcp_conn__listen(s.sh, (slip_idx_t)l2, 0, 80, 8), ==, -EADDRINUSE);
    CHECK(tcp_conn__listen(s.sh, (slip_idx_t)l2, US, 80, 8), ==, 0);   /* specific address is distinct */
    /* The specific listener wins the demux. */
    CHECK(tcp__lookup(s.sh, US, 80, PEER, 1), ==, (slip_idx_t)l2);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)l2);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

/* A full SYN queue makes the listener answer with SYN cookies; the cookie's ACK builds a
 * connection with the encoded MSS, and with timestamps the window scale and SACK. */
TEST(test_listen_syn_flood_syncookies)
{
    struct st s;
    st_init(&s);
    st_listen(&s, 2);
    for (uint16_t p = 0; p < 2; p++) {
        struct tseg syn = { .sport = (uint16_t)(6000 + p), .dport = 80, .seq = 1, .flags = WIRE_TCP_SYN, .win = 100 };
        t_feed(&s.h, s.sh, &syn);
    }
    CHECK(tcp_conn__get(s.sh, (slip_idx_t)s.l)->synq_len, ==, 2);
    h_free_sent(&s.h);
    struct tseg syn = { .sport = 5555, .dport = 80, .seq = 7000, .flags = WIRE_TCP_SYN, .win = 512,
                        .opts = t_synopts(1460, 5, true, true, 777) };
    t_feed(&s.h, s.sh, &syn);
    CHECK(s.sh->c.syncookies_sent, ==, 1);
    CHECK(s.sh->nused, ==, 3);          /* no state for the cookie */
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_SYN | WIRE_TCP_ACK);
    CHECK(o.th.opts.mss, ==, 1460);
    uint32_t cookie = o.th.seq;
    struct tseg ack = { .sport = 5555, .dport = 80, .seq = 7001, .ack = cookie + 1, .flags = WIRE_TCP_ACK,
                        .win = 512, .data = "hello", .len = 5 };
    ack.opts.has_ts = true;
    ack.opts.tsval = 778;
    ack.opts.tsecr = o.th.opts.tsval;
    h_free_sent(&s.h);
    /* The accept queue has room (backlog 2, none accepted yet but both others are half-open). */
    t_feed(&s.h, s.sh, &ack);
    CHECK(s.sh->c.syncookies_ok, ==, 1);
    int c = tcp_conn__accept(s.sh, (slip_idx_t)s.l);
    CHECK(c, >=, 0);
    struct tcp_conn *cc = tcp_conn__get(s.sh, (slip_idx_t)c);
    CHECK(cc->state, ==, TCPS_ESTABLISHED);
    CHECK(cc->mss, ==, 1460);
    CHECK(cc->snd_wscale, ==, 5);
    CHECK(!!(cc->flags & TCPF_SACK_OK), ==, 1);
    CHECK(!!(cc->flags & TCPF_TS_OK), ==, 1);
    CHECK(cc->snd_wnd, ==, 512u << 5);
    char buf[16];
    CHECK(tcp_conn__recv(s.env, s.sh, (slip_idx_t)c, buf, sizeof(buf), 0), ==, 5);
    CHECK_MEM(buf, "hello", 5);
    /* A forged cookie fails. */
    struct tseg bad = { .sport = 5556, .dport = 80, .seq = 7001, .ack = cookie + 1, .flags = WIRE_TCP_ACK, .win = 1 };
    t_feed(&s.h, s.sh, &bad);
    CHECK(s.sh->c.syncookies_failed, ==, 1);
    tcp_conn__abort(s.env, s.sh, (slip_idx_t)c);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

/* ---------------- SYN-SENT ---------------- */

TEST(test_syn_sent_synack)
{
    struct st s;
    st_init(&s);
    int c = tcp_conn__open(s.sh);
    s.c = (slip_idx_t)c;
    CHECK(tcp_conn__connect(s.env, s.sh, s.c, 0, 40000, PEER, 80), ==, -EINPROGRESS);
    CHECK(C(&s)->state, ==, TCPS_SYN_SENT);
    CHECK(C(&s)->laddr, ==, US);
    CHECK(tcp_conn__poll(s.sh, s.c) & TCP_EV_OUT, ==, 0);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_SYN);
    CHECK(o.th.opts.has_mss && o.th.opts.has_wscale && o.th.opts.sack_ok && o.th.opts.has_ts, ==, 1);
    uint32_t iss = o.th.seq;
    h_free_sent(&s.h);
    struct tseg sa = { .sport = 80, .dport = 40000, .seq = 5000, .ack = iss + 1, .flags = WIRE_TCP_SYN | WIRE_TCP_ACK,
                       .win = 1000, .opts = t_synopts(1200, 2, true, false, 0) };
    t_feed(&s.h, s.sh, &sa);
    CHECK(C(&s)->state, ==, TCPS_ESTABLISHED);
    CHECK(C(&s)->mss, ==, 1200);
    CHECK(C(&s)->snd_wnd, ==, 1000);        /* a SYN's window is not scaled */
    CHECK(!!(C(&s)->flags & TCPF_TS_OK), ==, 0);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_ACK);
    CHECK(o.th.ack, ==, 5001);
    CHECK(o.th.seq, ==, iss + 1);
    CHECK(tcp_conn__poll(s.sh, s.c) & TCP_EV_OUT, ==, TCP_EV_OUT);
    CHECK(C(&s)->srtt_us, >, 0);
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

TEST(test_syn_sent_rst_bad_ack_ignored)
{
    struct st s;
    st_init(&s);
    s.c = (slip_idx_t)tcp_conn__open(s.sh);
    tcp_conn__connect(s.env, s.sh, s.c, 0, 40000, PEER, 80);
    struct tout o;
    last(&s, &o);
    h_free_sent(&s.h);
    struct tseg rst = { .sport = 80, .dport = 40000, .seq = 0, .ack = o.th.seq + 5, .flags = WIRE_TCP_RST | WIRE_TCP_ACK };
    t_feed(&s.h, s.sh, &rst);
    CHECK(C(&s)->state, ==, TCPS_SYN_SENT);
    CHECK(s.h.nsent, ==, 0);
    /* Without ACK a RST in SYN-SENT is dropped too (RFC 5961 §3.2 / RFC 9293). */
    struct tseg rst2 = { .sport = 80, .dport = 40000, .seq = 0, .flags = WIRE_TCP_RST };
    t_feed(&s.h, s.sh, &rst2);
    CHECK(C(&s)->state, ==, TCPS_SYN_SENT);
    tcp_conn__close(s.env, s.sh, s.c);
    st_fini(&s, true);
}

TEST(test_syn_sent_rst_good_ack_refused)
{
    struct st s;
    st_init(&s);
    s.c = (slip_idx_t)tcp_conn__open(s.sh);
    tcp_conn__connect(s.env, s.sh, s.c, 0, 40000, PEER, 80);
    struct tout o;
    last(&s, &o);
    struct tseg rst = { .sport = 80, .dport = 40000, .seq = 0, .ack = o.th.seq + 1, .flags = WIRE_TCP_RST | WIRE_TCP_ACK };
    t_feed(&s.h, s.sh, &rst);
    CHECK(C(&s)->state, ==, TCPS_CLOSED);
    unsigned ev = tcp_conn__poll(s.sh, s.c);
    CHECK(ev & (TCP_EV_ERR | TCP_EV_HUP), ==, TCP_EV_ERR | TCP_EV_HUP);
    CHECK(tcp_conn__so_error(s.sh, s.c), ==, ECONNREFUSED);
    CHECK(tcp_conn__so_error(s.sh, s.c), ==, 0);
    CHECK(tcp__lookup(s.sh, US, 40000, PEER, 80), ==, SLIP_NIL);
    tcp_conn__close(s.env, s.sh, s.c);
    st_fini(&s, true);
}

TEST(test_syn_sent_bad_ack_sends_rst)
{
    struct st s;
    st_init(&s);
    s.c = (slip_idx_t)tcp_conn__open(s.sh);
    tcp_conn__connect(s.env, s.sh, s.c, 0, 40000, PEER, 80);
    struct tout o;
    last(&s, &o);
    h_free_sent(&s.h);
    struct tseg sa = { .sport = 80, .dport = 40000, .seq = 5000, .ack = o.th.seq + 1000,
                       .flags = WIRE_TCP_SYN | WIRE_TCP_ACK, .win = 1000 };
    t_feed(&s.h, s.sh, &sa);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_RST);
    CHECK(o.th.seq, ==, sa.ack);
    CHECK(C(&s)->state, ==, TCPS_SYN_SENT);
    tcp_conn__close(s.env, s.sh, s.c);
    st_fini(&s, true);
}

TEST(test_syn_sent_simultaneous_open)
{
    struct st s;
    st_init(&s);
    s.c = (slip_idx_t)tcp_conn__open(s.sh);
    tcp_conn__connect(s.env, s.sh, s.c, 0, 40000, PEER, 80);
    struct tout o;
    last(&s, &o);
    uint32_t iss = o.th.seq;
    h_free_sent(&s.h);
    struct tseg syn = { .sport = 80, .dport = 40000, .seq = 9000, .flags = WIRE_TCP_SYN, .win = 1000,
                        .opts = t_synopts(1460, -1, false, false, 0) };
    t_feed(&s.h, s.sh, &syn);
    CHECK(C(&s)->state, ==, TCPS_SYN_RECEIVED);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_SYN | WIRE_TCP_ACK);
    CHECK(o.th.seq, ==, iss);
    CHECK(o.th.ack, ==, 9001);
    /* The peer's SYN-ACK (its answer to our SYN) completes it. */
    struct tseg sa = { .sport = 80, .dport = 40000, .seq = 9000, .ack = iss + 1, .flags = WIRE_TCP_SYN | WIRE_TCP_ACK,
                       .win = 1000 };
    t_feed(&s.h, s.sh, &sa);
    struct tseg ack = { .sport = 80, .dport = 40000, .seq = 9001, .ack = iss + 1, .flags = WIRE_TCP_ACK, .win = 1000 };
    t_feed(&s.h, s.sh, &ack);
    CHECK(C(&s)->state, ==, TCPS_ESTABLISHED);
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

TEST(test_syn_sent_timeout_etimedout)
{
    struct st s;
    st_init(&s);
    s.c = (slip_idx_t)tcp_conn__open(s.sh);
    tcp_conn__connect(s.env, s.sh, s.c, 0, 40000, PEER, 80);
    h_free_sent(&s.h);
    advance(&s, 1 * SLIP_SEC);
    CHECK(s.h.nsent, ==, 1);            /* first retransmission after the initial 1 s RTO */
    advance(&s, 2 * SLIP_SEC);
    CHECK(s.h.nsent, ==, 2);            /* then 2 s */
    h_free_sent(&s.h);
    advance(&s, 200 * SLIP_SEC);
    CHECK(C(&s)->state, ==, TCPS_CLOSED);
    CHECK(tcp_conn__so_error(s.sh, s.c), ==, ETIMEDOUT);
    CHECK(C(&s)->st.rto_expiries, ==, TCP_SYN_RETRIES);
    tcp_conn__close(s.env, s.sh, s.c);
    st_fini(&s, true);
}

TEST(test_syn_sent_icmp_unreachable_aborts)
{
    struct st s;
    st_init(&s);
    s.c = (slip_idx_t)tcp_conn__open(s.sh);
    tcp_conn__connect(s.env, s.sh, s.c, 0, 40000, PEER, 80);
    struct ip_icmp_err e;
    memset(&e, 0, sizeof(e));
    e.type = WIRE_ICMP_DEST_UNREACH;
    e.code = 1;
    e.q.ip.src = US;
    e.q.ip.dst = PEER;
    e.q.sport = 40000;
    e.q.dport = 80;
    e.q.tcp_seq = C(&s)->iss + 77;          /* not in flight: ignored (RFC 5927) */
    tcp_icmp_error(s.env, s.sh, &e);
    CHECK(C(&s)->state, ==, TCPS_SYN_SENT);
    e.q.tcp_seq = C(&s)->iss;
    tcp_icmp_error(s.env, s.sh, &e);
    CHECK(C(&s)->state, ==, TCPS_CLOSED);
    CHECK(tcp_conn__so_error(s.sh, s.c), ==, EHOSTUNREACH);
    tcp_conn__close(s.env, s.sh, s.c);
    st_fini(&s, true);
}

/* ---------------- SYN-RECEIVED ---------------- */

TEST(test_syn_received_ack)
{
    struct st s;
    st_init(&s);
    st_passive(&s, true);
    CHECK(C(&s)->snd_wnd, ==, 1000u << 7);
    CHECK(!!(C(&s)->flags & TCPF_TS_OK), ==, 1);
    CHECK(tcp_conn__get(s.sh, (slip_idx_t)s.l)->synq_len, ==, 0);
    tcp_conn__abort(s.env, s.sh, s.c);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

TEST(test_syn_received_bad_ack_sends_rst)
{
    struct st s;
    st_init(&s);
    st_listen(&s, 8);
    struct tseg syn = { .sport = 5555, .dport = 80, .seq = 1000, .flags = WIRE_TCP_SYN, .win = 100 };
    t_feed(&s.h, s.sh, &syn);
    struct tout o;
    last(&s, &o);
    h_free_sent(&s.h);
    struct tseg ack = { .sport = 5555, .dport = 80, .seq = 1001, .ack = o.th.seq + 50, .flags = WIRE_TCP_ACK, .win = 100 };
    t_feed(&s.h, s.sh, &ack);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_RST);
    CHECK(o.th.seq, ==, ack.ack);
    CHECK(tcp_conn__accept(s.sh, (slip_idx_t)s.l), ==, -EAGAIN);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

TEST(test_syn_received_rst_returns_to_listen)
{
    struct st s;
    st_init(&s);
    st_listen(&s, 8);
    struct tseg syn = { .sport = 5555, .dport = 80, .seq = 1000, .flags = WIRE_TCP_SYN, .win = 100 };
    t_feed(&s.h, s.sh, &syn);
    CHECK(s.sh->nused, ==, 2);
    struct tseg rst = { .sport = 5555, .dport = 80, .seq = 1001, .flags = WIRE_TCP_RST };
    t_feed(&s.h, s.sh, &rst);
    CHECK(s.sh->nused, ==, 1);
    CHECK(tcp_conn__get(s.sh, (slip_idx_t)s.l)->synq_len, ==, 0);
    CHECK(tcp_conn__get(s.sh, (slip_idx_t)s.l)->state, ==, TCPS_LISTEN);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

TEST(test_syn_received_synack_retransmit_and_give_up)
{
    struct st s;
    st_init(&s);
    st_listen(&s, 8);
    struct tseg syn = { .sport = 5555, .dport = 80, .seq = 1000, .flags = WIRE_TCP_SYN, .win = 100 };
    t_feed(&s.h, s.sh, &syn);
    h_free_sent(&s.h);
    /* A duplicate SYN gets the SYN-ACK again. */
    t_feed(&s.h, s.sh, &syn);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_SYN | WIRE_TCP_ACK);
    h_free_sent(&s.h);
    advance(&s, 1 * SLIP_SEC);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_SYN | WIRE_TCP_ACK);
    h_free_sent(&s.h);
    advance(&s, 300 * SLIP_SEC);
    CHECK(s.sh->nused, ==, 1);          /* the child gave up */
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

/* ---------------- ESTABLISHED ---------------- */

TEST(test_established_data_in_order)
{
    struct st s;
    st_init(&s);
    st_passive(&s, true);
    pseg(&s, WIRE_TCP_ACK | WIRE_TCP_PSH, s.pseq, s.iss + 1, "abcdef", 6, 1000);
    struct tout o;
    CHECK(last(&s, &o), ==, true);      /* quick-ACK mode at the start */
    CHECK(o.th.ack, ==, s.pseq + 6);
    CHECK(o.th.opts.has_ts, ==, true);
    CHECK(o.th.opts.tsecr, ==, s.tsval);
    CHECK(tcp_conn__poll(s.sh, s.c) & TCP_EV_IN, ==, TCP_EV_IN);
    char buf[16];
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, buf, 3, TCP_RECV_PEEK), ==, 3);
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, buf, 4, 0), ==, 4);
    CHECK_MEM(buf, "abcd", 4);
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, buf, 16, 0), ==, 2);
    CHECK_MEM(buf, "ef", 2);
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, buf, 16, 0), ==, -EAGAIN);
    CHECK(C(&s)->st.bytes_in, ==, 6);
    tcp_conn__abort(s.env, s.sh, s.c);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

TEST(test_established_data_after_shut_rd_is_queued)
{
    /* Linux (packetdrill shutdown/shutdown-rd-wr-close): after shutdown(SHUT_RD) a read with
     * nothing queued returns 0, but data that arrives later is acknowledged, queued and read,
     * and what was queued before the shutdown stays readable too. */
    struct st s;
    st_init(&s);
    st_passive(&s, true);
    pseg(&s, WIRE_TCP_ACK | WIRE_TCP_PSH, s.pseq, s.iss + 1, "ab", 2, 1000);
    CHECK(tcp_conn__shutdown(s.env, s.sh, s.c, SHUT_RD), ==, 0);
    char buf[16];
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, buf, 16, 0), ==, 2);
    CHECK_MEM(buf, "ab", 2);
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, buf, 16, 0), ==, 0);
    pseg(&s, WIRE_TCP_ACK | WIRE_TCP_PSH, s.pseq + 2, s.iss + 1, "cdef", 4, 1000);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.ack, ==, s.pseq + 6);
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, buf, 16, 0), ==, 4);
    CHECK_MEM(buf, "cdef", 4);
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, buf, 16, 0), ==, 0);
    tcp_conn__abort(s.env, s.sh, s.c);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

TEST(test_established_out_of_order_then_fill)
{
    struct st s;
    st_init(&s);
    st_passive(&s, false);
    pseg(&s, WIRE_TCP_ACK, s.pseq + 4, s.iss + 1, "EFGH", 4, 1000);
    struct tout o;
    CHECK(last(&s, &o), ==, true);      /* duplicate ACK at once, with a SACK block */
    CHECK(o.th.ack, ==, s.pseq);
    CHECK(o.th.opts.nsack, ==, 1);
    CHECK(o.th.opts.sack[0].left, ==, s.pseq + 4);
    CHECK(o.th.opts.sack[0].right, ==, s.pseq + 8);
    pseg(&s, WIRE_TCP_ACK, s.pseq + 12, s.iss + 1, "MNOP", 4, 1000);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.opts.nsack, ==, 2);
    CHECK(o.th.opts.sack[0].left, ==, s.pseq + 12);  /* the latest block first (RFC 2018 §4) */
    /* An overlapping duplicate adds nothing, and the ACK reports it first (RFC 2883 §4.2.1):
     * the D-SACK block, then the block holding it, then the other. */
    pseg(&s, WIRE_TCP_ACK, s.pseq + 5, s.iss + 1, "FG", 2, 1000);
    CHECK(C(&s)->ooo_bytes, ==, 8);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.opts.nsack, ==, 3);
    CHECK(o.th.opts.sack[0].left, ==, s.pseq + 5);
    CHECK(o.th.opts.sack[0].right, ==, s.pseq + 7);
    CHECK(o.th.opts.sack[1].left, ==, s.pseq + 4);
    CHECK(o.th.opts.sack[1].right, ==, s.pseq + 8);
    CHECK(o.th.opts.sack[2].left, ==, s.pseq + 12);
    CHECK(s.sh->c.dsacks_out, ==, 1);
    char buf[32];
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, buf, sizeof(buf), 0), ==, -EAGAIN);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, "ABCD", 4, 1000);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.ack, ==, s.pseq + 8);
    CHECK(o.th.opts.nsack, ==, 1);      /* the D-SACK went once (§4 rule 4) */
    CHECK(o.th.opts.sack[0].left, ==, s.pseq + 12);
    pseg(&s, WIRE_TCP_ACK, s.pseq + 6, s.iss + 1, "GHIJKL", 6, 1000);   /* overlaps both sides */
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.ack, ==, s.pseq + 16);
    CHECK(o.th.opts.nsack, ==, 1);      /* its part below RCV.NXT, reported (§4.1.1) */
    CHECK(o.th.opts.sack[0].left, ==, s.pseq + 6);
    CHECK(o.th.opts.sack[0].right, ==, s.pseq + 8);
    /* A whole old duplicate (a retransmission or loss probe that was not needed, §4.1.1). */
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, "ABCD", 4, 1000);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.ack, ==, s.pseq + 16);
    CHECK(o.th.opts.nsack, ==, 1);
    CHECK(o.th.opts.sack[0].left, ==, s.pseq);
    CHECK(o.th.opts.sack[0].right, ==, s.pseq + 4);
    CHECK(s.sh->c.dsacks_out, ==, 3);
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, buf, sizeof(buf), 0), ==, 16);
    CHECK_MEM(buf, "ABCDEFGHIJKLMNOP", 16);
    CHECK(C(&s)->ooo_segs, ==, 0);
    CHECK(C(&s)->rcv_frames, ==, 0);
    tcp_conn__abort(s.env, s.sh, s.c);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

/* RFC 2018 §4 with many holes: every out-of-order segment is reported in the first block of its
 * ACK, the previous three after it (no timestamps: four blocks fit), however many runs the queue holds (a walk bounded at 64 runs
 * reported nothing of the 65th and later, and with a window of MBs the sender then called that
 * data lost and sent it again). A segment that joins two runs is reported as the joined run. */
TEST(test_established_sack_reports_every_run_past_many_holes)
{
    struct st s;
    st_init(&s);
    st_passive(&s, false);
    struct tout o;
    const unsigned runs = 100;
    for (unsigned k = 0; k < runs; k++) {
        pseg(&s, WIRE_TCP_ACK, s.pseq + 8 * k + 4, s.iss + 1, "abcd", 4, 1000);
        CHECK(last(&s, &o), ==, true);
        CHECK(o.th.ack, ==, s.pseq);
        CHECK(o.th.opts.sack[0].left, ==, s.pseq + 8 * k + 4);
        CHECK(o.th.opts.sack[0].right, ==, s.pseq + 8 * k + 8);
        CHECK(o.th.opts.nsack, ==, SLIP_MIN(k + 1, 4u));
        for (unsigned q = 1; q < o.th.opts.nsack; q++)
            CHECK(o.th.opts.sack[q].left, ==, s.pseq + 8 * (k - q) + 4);
    }
    CHECK(C(&s)->ooo_segs, ==, runs);
    /* The hole between runs 49 and 50: one block [run 49, end of run 50). */
    pseg(&s, WIRE_TCP_ACK, s.pseq + 8 * 50, s.iss + 1, "efgh", 4, 1000);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.opts.sack[0].left, ==, s.pseq + 8 * 49 + 4);
    CHECK(o.th.opts.sack[0].right, ==, s.pseq + 8 * 50 + 8);
    CHECK(o.th.opts.sack[1].left, ==, s.pseq + 8 * 99 + 4);     /* the most recent before it */
    /* The hole below the last run, then a segment appended to it: one block from run 98. */
    pseg(&s, WIRE_TCP_ACK, s.pseq + 8 * 99, s.iss + 1, "efgh", 4, 1000);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.opts.sack[0].left, ==, s.pseq + 8 * 98 + 4);
    pseg(&s, WIRE_TCP_ACK, s.pseq + 8 * 100, s.iss + 1, "ijkl", 4, 1000);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.opts.sack[0].left, ==, s.pseq + 8 * 98 + 4);
    CHECK(o.th.opts.sack[0].right, ==, s.pseq + 8 * 100 + 4);
    /* A duplicate inside a run: D-SACK first, then the run holding it. */
    pseg(&s, WIRE_TCP_ACK, s.pseq + 8 * 80 + 4, s.iss + 1, "abcd", 4, 1000);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.opts.sack[0].left, ==, s.pseq + 8 * 80 + 4);
    CHECK(o.th.opts.sack[1].left, ==, s.pseq + 8 * 80 + 4);
    CHECK(o.th.opts.sack[1].right, ==, s.pseq + 8 * 80 + 8);
    /* The front hole: everything up to run 0's end is in order; the blocks left are all above. */
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, "ABCD", 4, 1000);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.ack, ==, s.pseq + 8);
    CHECK(o.th.opts.nsack, >=, 1);
    for (unsigned q = 0; q < o.th.opts.nsack; q++)
        CHECK(seq_gt(o.th.opts.sack[q].left, s.pseq + 8), ==, true);
    tcp_conn__abort(s.env, s.sh, s.c);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

TEST(test_established_delayed_ack)
{
    struct st s;
    st_init(&s);
    st_passive(&s, false);
    C(&s)->quickacks = 0;
    static char seg[1460];
    memset(seg, 'x', sizeof(seg));
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, seg, 1000, 1000);
    CHECK(s.h.nsent, ==, 0);            /* delayed */
    advance(&s, 39 * SLIP_MSEC);
    CHECK(s.h.nsent, ==, 0);
    advance(&s, 2 * SLIP_MSEC);
    CHECK(s.h.nsent, ==, 1);            /* 40 ms delack timer */
    h_free_sent(&s.h);
    s.pseq += 1000;
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, seg, 1000, 1000);
    CHECK(s.h.nsent, ==, 0);
    s.pseq += 1000;
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, seg, 1000, 1000);
    CHECK(s.h.nsent, ==, 1);            /* every second full segment */
    tcp_conn__abort(s.env, s.sh, s.c);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

/* Within a received burst (the poll loop's, env->rx_burst) the ACK data calls for waits for the
 * burst's end: one ACK for each run of contiguous segments in it, as Linux's receiver sends one
 * for each packet GRO made of them; at 64 KiB unacknowledged one goes at once; out-of-order
 * segments of a SACK connection are held the same way (the ACK's SACK block says what arrived),
 * those of a connection without SACK get a duplicate ACK each; a burst whose ACK a segment of
 * ours carried owes none at its end. */
TEST(test_established_one_ack_per_received_burst)
{
    struct st s;
    st_init(&s);
    st_passive(&s, false);
    C(&s)->quickacks = 0;
    static char seg[1460];
    memset(seg, 'x', sizeof(seg));
    s.env->rx_burst = true;
    for (int i = 0; i < 6; i++, s.pseq += 1000)
        pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, seg, 1000, 1000);
    CHECK(s.h.nsent, ==, 0);            /* held for the burst's end */
    s.env->rx_burst = false;
    tcp__burst_end(s.env, s.sh);
    struct tout o;
    CHECK(s.h.nsent, ==, 1);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.ack, ==, s.pseq);        /* all six */
    CHECK(s.sh->c.burst_acks, ==, 1);
    h_free_sent(&s.h);
    tcp__burst_end(s.env, s.sh);        /* the list was emptied */
    CHECK(s.h.nsent, ==, 0);

    /* A long burst: an ACK at 64 KiB unacknowledged, the rest at the end. */
    s.env->rx_burst = true;
    for (int i = 0; i < 70; i++, s.pseq += 1000)
        pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, seg, 1000, 1000);
    CHECK(s.h.nsent, ==, 1);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.ack, ==, s.pseq - 70000 + 66000);
    s.env->rx_burst = false;
    tcp__burst_end(s.env, s.sh);
    CHECK(s.h.nsent, ==, 2);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.ack, ==, s.pseq);
    h_free_sent(&s.h);

    /* Two runs in one burst, the second out of order (SACK): the first run's ACK when the second
     * starts, the second's at the burst's end, with its block. */
    C(&s)->quickacks = 0;
    s.env->rx_burst = true;
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, seg, 1000, 1000);
    pseg(&s, WIRE_TCP_ACK, s.pseq + 1000, s.iss + 1, seg, 1000, 1000);
    CHECK(s.h.nsent, ==, 0);
    pseg(&s, WIRE_TCP_ACK, s.pseq + 3000, s.iss + 1, seg, 1000, 1000);
    CHECK(s.h.nsent, ==, 1);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.ack, ==, s.pseq + 2000);
    CHECK(o.th.opts.nsack, ==, 0);
    pseg(&s, WIRE_TCP_ACK, s.pseq + 4000, s.iss + 1, seg, 1000, 1000);
    CHECK(s.h.nsent, ==, 1);
    s.env->rx_burst = false;
    tcp__burst_end(s.env, s.sh);
    CHECK(s.h.nsent, ==, 2);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.ack, ==, s.pseq + 2000);
    CHECK(o.th.opts.nsack, >=, 1);
    CHECK(o.th.opts.sack[0].left, ==, s.pseq + 3000);
    CHECK(o.th.opts.sack[0].right, ==, s.pseq + 5000);
    h_free_sent(&s.h);
    /* The hole filled inside a burst: one ACK at its end, for all of it. */
    s.env->rx_burst = true;
    pseg(&s, WIRE_TCP_ACK, s.pseq + 2000, s.iss + 1, seg, 1000, 1000);
    CHECK(s.h.nsent, ==, 0);
    s.env->rx_burst = false;
    tcp__burst_end(s.env, s.sh);
    CHECK(s.h.nsent, ==, 1);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.ack, ==, s.pseq + 5000);
    s.pseq += 5000;
    h_free_sent(&s.h);
    /* Without SACK a duplicate ACK for each out-of-order segment, burst or not. */
    C(&s)->flags &= ~TCPF_SACK_OK;
    s.env->rx_burst = true;
    pseg(&s, WIRE_TCP_ACK, s.pseq + 1000, s.iss + 1, seg, 1000, 1000);
    pseg(&s, WIRE_TCP_ACK, s.pseq + 2000, s.iss + 1, seg, 1000, 1000);
    CHECK(s.h.nsent, ==, 2);
    s.env->rx_burst = false;
    tcp__burst_end(s.env, s.sh);
    CHECK(s.h.nsent, ==, 2);
    tcp_conn__abort(s.env, s.sh, s.c);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

/* SACK compression (Linux's tcp_comp_sack_*): with a hole open, the first three ACKs at one
 * RCV.NXT go at once; then a segment that extends the last run waits for a twentieth of the RTT
 * (the delayed-ACK timer moved there) or for 44 such segments, and one that starts a run
 * elsewhere sends what waited, then its own ACK at once. A new RCV.NXT starts the count over. */
TEST(test_established_sack_compression_after_three_dupacks)
{
    struct st s;
    st_init(&s);
    st_passive(&s, false);
    C(&s)->srtt_us = 20000;             /* 20 ms: the compressed ACK waits 1 ms (the cap) */
    C(&s)->rcv_rtt = 0;
    static char seg[1460];
    memset(seg, 'x', sizeof(seg));
    struct tout o;
    uint32_t at = s.pseq + 1000;        /* one segment lost at s.pseq */
    for (int i = 0; i < 3; i++, at += 1000)
        pseg(&s, WIRE_TCP_ACK, at, s.iss + 1, seg, 1000, 1000);
    CHECK(s.h.nsent, ==, 3);            /* three duplicate ACKs at once */
    for (int i = 0; i < 5; i++, at += 1000)
        pseg(&s, WIRE_TCP_ACK, at, s.iss + 1, seg, 1000, 1000);
    CHECK(s.h.nsent, ==, 3);            /* the run grows: its ACK waits */
    CHECK(s.sh->c.sack_compressed, ==, 5);
    CHECK(tcp_timer__armed(C(&s), TT_DELACK), ==, true);
    CHECK(C(&s)->timer[TT_DELACK], ==, s.env->now + SLIP_MSEC);
    s.env->now += SLIP_MSEC;
    tcp_timer__poll(s.env, s.sh);
    CHECK(s.h.nsent, ==, 4);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.ack, ==, s.pseq);
    CHECK(o.th.opts.nsack, ==, 1);
    CHECK(o.th.opts.sack[0].left, ==, s.pseq + 1000);
    CHECK(o.th.opts.sack[0].right, ==, at);
    /* Two more on the run wait; a segment past a second hole sends them, then its own ACK. */
    pseg(&s, WIRE_TCP_ACK, at, s.iss + 1, seg, 1000, 1000);
    pseg(&s, WIRE_TCP_ACK, at + 1000, s.iss + 1, seg, 1000, 1000);
    CHECK(s.h.nsent, ==, 4);
    pseg(&s, WIRE_TCP_ACK, at + 3000, s.iss + 1, seg, 1000, 1000);
    CHECK(s.h.nsent, ==, 6);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.opts.sack[0].left, ==, at + 3000);       /* the new run first */
    CHECK(o.th.opts.sack[1].left, ==, s.pseq + 1000);
    CHECK(o.th.opts.sack[1].right, ==, at + 2000);       /* the two that waited */
    at += 4000;
    /* 44 segments waiting send the ACK without the timer. */
    for (int i = 0; i < 45; i++, at += 1000)
        pseg(&s, WIRE_TCP_ACK, at, s.iss + 1, seg, 1000, 1000);
    CHECK(s.h.nsent, ==, 7);
    /* The lost segment arrives: RCV.NXT moves, the hole below the second run is still open,
     * and the count starts over (the filling segment's ACK and two more at once). */
    h_free_sent(&s.h);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, seg, 1000, 1000);
    CHECK(s.h.nsent, ==, 1);
    for (int i = 0; i < 3; i++, at += 1000)
        pseg(&s, WIRE_TCP_ACK, at, s.iss + 1, seg, 1000, 1000);
    CHECK(s.h.nsent, ==, 3);
    CHECK(C(&s)->comp_dups, ==, 3);
    /* Without SACK no compression: a duplicate ACK for each. */
    C(&s)->flags &= ~TCPF_SACK_OK;
    for (int i = 0; i < 3; i++, at += 1000)
        pseg(&s, WIRE_TCP_ACK, at, s.iss + 1, seg, 1000, 1000);
    CHECK(s.h.nsent, ==, 6);
    tcp_conn__abort(s.env, s.sh, s.c);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

/* After a hole (and after a duplicate) the next in-order segments are acknowledged at once, as
 * Linux's receiver does in its quickack mode: a sender recovering with a small cwnd must not wait
 * 40 ms for each ACK. Then delayed ACKs again. */
TEST(test_established_quick_acks_after_a_hole_and_a_duplicate)
{
    struct st s;
    st_init(&s);
    st_passive(&s, false);
    C(&s)->quickacks = 0;
    static char seg[1460];
    memset(seg, 'x', sizeof(seg));
    pseg(&s, WIRE_TCP_ACK, s.pseq + 1000, s.iss + 1, seg, 1000, 1000);    /* out of order */
    CHECK(s.h.nsent, ==, 1);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, seg, 1000, 1000);           /* fills the hole */
    CHECK(s.h.nsent, ==, 2);
    s.pseq += 2000;
    unsigned quick = C(&s)->quickacks;
    CHECK(quick, >=, 2u);
    for (unsigned i = 0; i < quick; i++) {
        h_free_sent(&s.h);
        pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, seg, 1000, 1000);
        s.pseq += 1000;
        CHECK(s.h.nsent, ==, 1);        /* each one at once */
    }
    h_free_sent(&s.h);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, seg, 1000, 1000);
    s.pseq += 1000;
    CHECK(s.h.nsent, ==, 0);            /* delayed again */
    advance(&s, 41 * SLIP_MSEC);
    CHECK(s.h.nsent, ==, 1);
    /* A whole duplicate: answered at once (D-SACK) and quick ACKs again. */
    h_free_sent(&s.h);
    pseg(&s, WIRE_TCP_ACK, s.pseq - 1000, s.iss + 1, seg, 1000, 1000);
    CHECK(s.h.nsent, ==, 1);
    h_free_sent(&s.h);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, seg, 1000, 1000);
    CHECK(s.h.nsent, ==, 1);
    tcp_conn__abort(s.env, s.sh, s.c);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

TEST(test_established_rst_in_window_challenge_ack)
{
    struct st s;
    st_init(&s);
    st_passive(&s, false);
    pseg(&s, WIRE_TCP_RST, s.pseq + 100, 0, NULL, 0, 0);
    CHECK(C(&s)->state, ==, TCPS_ESTABLISHED);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_ACK);
    CHECK(o.th.ack, ==, s.pseq);
    CHECK(s.sh->c.challenge_acks, ==, 1);
    h_free_sent(&s.h);
    /* Out of the window entirely: dropped silently. */
    pseg(&s, WIRE_TCP_RST, s.pseq + 10000000, 0, NULL, 0, 0);
    CHECK(s.h.nsent, ==, 0);
    CHECK(C(&s)->state, ==, TCPS_ESTABLISHED);
    /* Exactly RCV.NXT: reset. */
    pseg(&s, WIRE_TCP_RST, s.pseq, 0, NULL, 0, 0);
    CHECK(C(&s)->state, ==, TCPS_CLOSED);
    char b[4];
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, b, 4, 0), ==, -ECONNRESET);
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, b, 4, 0), ==, 0);
    CHECK(sendstr(&s, "x", 0), ==, -EPIPE);
    tcp_conn__close(s.env, s.sh, s.c);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

TEST(test_established_syn_challenge_ack)
{
    struct st s;
    st_init(&s);
    st_passive(&s, false);
    pseg(&s, WIRE_TCP_SYN, s.pseq + 5, 0, NULL, 0, 100);
    CHECK(C(&s)->state, ==, TCPS_ESTABLISHED);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_ACK);
    CHECK(s.sh->c.challenge_acks, ==, 1);
    tcp_conn__abort(s.env, s.sh, s.c);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

TEST(test_established_challenge_ack_rate_limited)
{
    struct st s;
    st_init(&s);
    st_passive(&s, false);
    for (int i = 0; i < TCP_CHALLENGE_ACK_LIMIT + 50; i++) {
        pseg(&s, WIRE_TCP_RST, s.pseq + 1, 0, NULL, 0, 0);
        h_free_sent(&s.h);
    }
    CHECK(s.sh->c.challenge_acks, ==, TCP_CHALLENGE_ACK_LIMIT);
    CHECK(s.sh->c.challenge_ack_limited, ==, 50);
    tcp_conn__abort(s.env, s.sh, s.c);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

TEST(test_established_blind_data_out_of_window_acked_not_taken)
{
    struct st s;
    st_init(&s);
    st_passive(&s, false);
    pseg(&s, WIRE_TCP_ACK, s.pseq + 5000000, s.iss + 1, "evil", 4, 1000);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.ack, ==, s.pseq);
    CHECK(C(&s)->ooo_bytes, ==, 0);
    CHECK(s.sh->c.out_of_window, ==, 1);
    tcp_conn__abort(s.env, s.sh, s.c);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

TEST(test_established_old_ack_challenged_future_ack_dropped)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss - 200000, "data", 4, 1000);   /* < SND.UNA - MAX.SND.WND */
    CHECK(s.sh->c.challenge_acks, ==, 1);
    CHECK(C(&s)->rcvq.bytes, ==, 0);
    h_free_sent(&s.h);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 100, "data", 4, 1000);      /* acks unsent data */
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(C(&s)->rcvq.bytes, ==, 0);
    CHECK(C(&s)->snd_una, ==, s.iss + 1);
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

TEST(test_established_paws_drops_old_timestamp)
{
    struct st s;
    st_init(&s);
    st_passive(&s, true);
    struct tseg t = { .sport = 5555, .dport = 80, .seq = s.pseq, .ack = s.iss + 1, .flags = WIRE_TCP_ACK,
                      .win = 1000, .data = "old", .len = 3 };
    t.opts.has_ts = true;
    t.opts.tsval = s.tsval - 100;
    t_feed(&s.h, s.sh, &t);
    CHECK(s.sh->c.paws_drops, ==, 1);
    CHECK(C(&s)->rcvq.bytes, ==, 0);
    struct tout o;
    CHECK(last(&s, &o), ==, true);      /* answered with an ACK */
    tcp_conn__abort(s.env, s.sh, s.c);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

TEST(test_established_send_and_ack)
{
    struct st s;
    st_init(&s);
    st_active(&s, true);
    CHECK(sendstr(&s, "hello", 0), ==, 5);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.len, ==, 5);
    CHECK_MEM(o.data, "hello", 5);
    CHECK(o.th.seq, ==, s.iss + 1);
    CHECK(o.th.flags, ==, WIRE_TCP_ACK | WIRE_TCP_PSH);
    CHECK(tcp_timer__armed(C(&s), TT_REXMT), ==, true);
    h_free_sent(&s.h);
    s.env->now += 10 * SLIP_MSEC;
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 6, NULL, 0, 1000);
    CHECK(C(&s)->snd_una, ==, s.iss + 6);
    CHECK(C(&s)->sndq.bytes, ==, 0);
    CHECK(tcp_timer__armed(C(&s), TT_REXMT), ==, false);
    CHECK(C(&s)->snd_wnd, ==, 1000u << 7);
    struct tcp_conn_info info;
    tcp_conn__info(s.sh, s.c, &info);
    CHECK(info.st.bytes_out, ==, 5);
    CHECK(info.state, ==, TCPS_ESTABLISHED);
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

/* A single segment's tail loss probe (RFC 8985 §7.2: PTO capped by the RTO) fires just before
 * the RTO and takes its place: no timeout, no cwnd collapse. The probe being lost too, the RTO
 * follows one RTO later. */
TEST(test_established_tlp_single_segment_before_rto)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    CHECK(sendstr(&s, "data", 0), ==, 4);
    h_free_sent(&s.h);
    uint32_t cwnd = C(&s)->cwnd;
    slip_time_t rto = tcp_rto(C(&s));
    advance(&s, rto - 2);
    CHECK(s.h.nsent, ==, 0);
    advance(&s, 1);
    CHECK(s.h.nsent, ==, 1);
    CHECK(C(&s)->st.tlp_probes, ==, 1);
    CHECK(C(&s)->st.rto_expiries, ==, 0);
    CHECK(C(&s)->cwnd, ==, cwnd);
    advance(&s, rto + 1);
    CHECK(C(&s)->st.rto_expiries, ==, 1);
    CHECK(s.h.nsent, ==, 2);
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

TEST(test_established_rto_retransmit_backoff)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    C(&s)->flags &= ~TCPF_SACK_OK;      /* no tail loss probe first (see the test above) */
    CHECK(sendstr(&s, "data", 0), ==, 4);
    h_free_sent(&s.h);
    slip_time_t rto = tcp_rto(C(&s));
    /* Tiny RTT in the harness: SRTT plus the 200 ms floor of the variance term (Linux). */
    CHECK(rto, ==, (slip_time_t)C(&s)->srtt_us * SLIP_USEC + TCP_RTO_MIN);
    advance(&s, rto - 1);
    CHECK(s.h.nsent, ==, 0);
    advance(&s, 2);
    CHECK(s.h.nsent, ==, 1);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.seq, ==, s.iss + 1);
    CHECK(o.len, ==, 4);
    CHECK(C(&s)->cwnd, ==, tcp_output__data_mss(C(&s)));
    CHECK(tcp_rto(C(&s)), ==, 2 * rto);
    CHECK(C(&s)->st.retransmits, ==, 1);
    advance(&s, 2 * rto);
    CHECK(s.h.nsent, ==, 2);
    /* Karn: the ACK of a retransmitted segment gives no RTT sample. */
    uint32_t srtt = C(&s)->srtt_us;
    s.env->now += 5 * SLIP_SEC;
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 5, NULL, 0, 1000);
    CHECK(C(&s)->srtt_us, ==, srtt);
    CHECK(C(&s)->rxt_shift, ==, 0);
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

TEST(test_established_retransmit_timeout_etimedout)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    sendstr(&s, "data", 0);
    advance(&s, 2000 * SLIP_SEC);
    CHECK(C(&s)->state, ==, TCPS_CLOSED);
    CHECK(tcp_conn__so_error(s.sh, s.c), ==, ETIMEDOUT);
    CHECK(C(&s)->st.rto_expiries, ==, TCP_RETRIES2);
    tcp_conn__close(s.env, s.sh, s.c);
    st_fini(&s, true);
}

TEST(test_established_fast_retransmit_newreno)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    C(&s)->flags &= ~TCPF_SACK_OK;
    tcp_conn__setopt(s.env, s.sh, s.c, TCPO_CONGESTION, TCP_CC_NEWRENO);
    static char big[14600];
    memset(big, 'z', sizeof(big));
    struct iovec iov = { big, sizeof(big) };
    CHECK(tcp_conn__send(s.env, s.sh, s.c, &iov, 1, 0), ==, (ssize_t)sizeof(big));
    CHECK(s.h.nsent, ==, 10);           /* IW10 */
    h_free_sent(&s.h);
    uint32_t mss = tcp_output__data_mss(C(&s));
    uint32_t una = s.iss + 1;
    pseg(&s, WIRE_TCP_ACK, s.pseq, una + mss, NULL, 0, 1000);   /* first segment acked */
    h_free_sent(&s.h);
    for (int i = 0; i < 3; i++)
        pseg(&s, WIRE_TCP_ACK, s.pseq, una + mss, NULL, 0, 1000);
    CHECK(C(&s)->st.fast_retransmits, ==, 1);
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 1);
    struct tout o;
    CHECK(t_sent(&s.h, 0, &o), ==, true);
    CHECK(o.th.seq, ==, una + mss);
    CHECK(o.len, ==, mss);
    uint32_t flight = 9 * mss;
    CHECK(C(&s)->ssthresh, ==, flight / 2);
    CHECK(C(&s)->cwnd, ==, flight / 2 + 3 * mss);
    /* Partial ACK: the next hole goes out at once (RFC 6582). */
    h_free_sent(&s.h);
    pseg(&s, WIRE_TCP_ACK, s.pseq, una + 3 * mss, NULL, 0, 1000);
    CHECK(t_sent(&s.h, 0, &o), ==, true);
    CHECK(o.th.seq, ==, una + 3 * mss);
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 1);
    /* Full ACK ends recovery. */
    pseg(&s, WIRE_TCP_ACK, s.pseq, una + 10 * mss, NULL, 0, 1000);
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 0);
    CHECK(C(&s)->cwnd, <=, C(&s)->ssthresh);
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

TEST(test_established_sack_recovery_retransmits_holes_only)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    static char big[14600];
    memset(big, 'q', sizeof(big));
    struct iovec iov = { big, sizeof(big) };
    tcp_conn__send(s.env, s.sh, s.c, &iov, 1, 0);
    h_free_sent(&s.h);
    uint32_t mss = tcp_output__data_mss(C(&s));
    uint32_t una = s.iss + 1;
    /* Segments 0 and 2 lost; 1 and 3..9 SACKed over three ACKs. */
    uint32_t sacks[3][2] = { { una + mss, una + 2 * mss }, { una + 3 * mss, una + 6 * mss }, { una + 3 * mss, una + 10 * mss } };
    for (int i = 0; i < 3; i++) {
        struct tseg t = { .sport = 80, .dport = 40000, .seq = s.pseq, .ack = una, .flags = WIRE_TCP_ACK, .win = 1000 };
        t.opts.nsack = i == 0 ? 1 : 2;
        t.opts.sack[0].left = sacks[i][0];
        t.opts.sack[0].right = sacks[i][1];
        t.opts.sack[1].left = sacks[0][0];
        t.opts.sack[1].right = sacks[0][1];
        t_feed(&s.h, s.sh, &t);
    }
    CHECK(C(&s)->nsb, ==, 2);
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 1);
    /* Exactly the two holes were retransmitted. */
    unsigned rexmits = 0;
    for (unsigned i = 0; i < s.h.nsent; i++) {
        struct tout o;
        if (t_sent(&s.h, i, &o) && o.len) {
            CHECK(o.th.seq == una || o.th.seq == una + 2 * mss, ==, 1);
            rexmits++;
        }
    }
    CHECK(rexmits, ==, 2);
    pseg(&s, WIRE_TCP_ACK, s.pseq, una + 10 * mss, NULL, 0, 1000);
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 0);
    CHECK(C(&s)->nsb, ==, 0);
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

/* A peer ACK for una carrying one SACK block [l, r). */
static void sack_ack(struct st *s, uint32_t una, uint32_t l, uint32_t r)
{
    struct tseg t = { .sport = 80, .dport = 40000, .seq = s->pseq, .ack = una, .flags = WIRE_TCP_ACK, .win = 1000 };
    t.opts.nsack = 1;
    t.opts.sack[0].left = l;
    t.opts.sack[0].right = r;
    t_feed(&s->h, s->sh, &t);
}

/* Data segments sent at seq since the last h_free_sent. */
static unsigned sent_at(struct st *s, uint32_t seq)
{
    unsigned n = 0;
    for (unsigned i = 0; i < s->h.nsent; i++) {
        struct tout o;
        if (t_sent(&s->h, i, &o) && o.len && o.th.seq == seq)
            n++;
    }
    return n;
}

/* RFC 8985 §6: the first retransmission of segment 0 is lost too. Once data sent after it is
 * SACKed and an RTT has passed, RACK calls it lost and it goes again: no RTO needed. */
TEST(test_established_rack_lost_retransmission_without_rto)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    static char big[20 * 1460];
    memset(big, 'r', sizeof(big));
    struct iovec iov = { big, sizeof(big) };
    tcp_conn__send(s.env, s.sh, s.c, &iov, 1, 0);
    h_free_sent(&s.h);
    uint32_t mss = tcp_output__data_mss(C(&s));
    uint32_t una = s.iss + 1;
    CHECK(C(&s)->snd_max, ==, una + 10 * mss);
    /* Segment 0 lost: three SACKed above it start recovery and resend it. */
    s.env->now += 2 * SLIP_MSEC;
    sack_ack(&s, una, una + mss, una + 4 * mss);
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 1);
    CHECK(sent_at(&s, una), ==, 1);
    h_free_sent(&s.h);
    /* The rest of the window arrives; PRR lets new data out (sent after the retransmission). */
    s.env->now += 1 * SLIP_MSEC;
    sack_ack(&s, una, una + mss, una + 10 * mss);
    CHECK(seq_gt(C(&s)->snd_max, una + 10 * mss), ==, 1);
    CHECK(sent_at(&s, una), ==, 0);
    uint32_t high = C(&s)->snd_max;
    h_free_sent(&s.h);
    /* That new data is SACKed two milliseconds later, the hole is still there: the
     * retransmission was lost as well and is sent again at once. */
    s.env->now += 2 * SLIP_MSEC;
    sack_ack(&s, una, una + mss, high);
    CHECK(sent_at(&s, una), ==, 1);
    CHECK(C(&s)->st.rto_expiries, ==, 0);
    CHECK(C(&s)->st.rack_lost, >=, 1);
    pseg(&s, WIRE_TCP_ACK, s.pseq, high, NULL, 0, 1000);
    CHECK(!!(C(&s)->flags & TCPF_RECOVERY), ==, 0);
    CHECK(C(&s)->ntxr == 0 || C(&s)->txr[0].start == high, ==, 1);     /* acked records are gone */
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

/* RFC 8985 §7: the last two segments of a flight are lost and no ACK will come for them; after
 * PTO = 2*SRTT (+2 ms) the last segment is sent again as a probe, long before the RTO. When that
 * probe draws no ACK either, it is repeated 2 PTO later (tcp_rack.c probe_again_later). */
TEST(test_established_tlp_probes_lost_tail)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    static char big[14600];
    memset(big, 't', sizeof(big));
    struct iovec iov = { big, sizeof(big) };
    C(&s)->srtt_us = 10000;
    C(&s)->rttvar_us = 5000;
    C(&s)->rto_us = 30000;              /* below TCP_RTO_MIN: the RTO is 200 ms */
    tcp_conn__send(s.env, s.sh, s.c, &iov, 1, 0);
    h_free_sent(&s.h);
    uint32_t mss = tcp_output__data_mss(C(&s));
    uint32_t una = s.iss + 1;
    s.env->now += 10 * SLIP_MSEC;
    pseg(&s, WIRE_TCP_ACK, s.pseq, una + 8 * mss, NULL, 0, 1000);
    CHECK(tcp_timer__armed(C(&s), TT_PTO), ==, true);
    h_free_sent(&s.h);
    advance(&s, 21 * SLIP_MSEC);
    CHECK(s.h.nsent, ==, 0);            /* not yet: PTO is 22 ms */
    advance(&s, 2 * SLIP_MSEC);
    CHECK(sent_at(&s, una + 9 * mss), ==, 1);
    CHECK(C(&s)->st.tlp_probes, ==, 1);
    CHECK(C(&s)->st.rto_expiries, ==, 0);
    /* No ACK: the same probe again 2 PTO (44 ms) after the first, still before the RTO. */
    h_free_sent(&s.h);
    advance(&s, 42 * SLIP_MSEC);
    CHECK(s.h.nsent, ==, 0);
    advance(&s, 2 * SLIP_MSEC);
    CHECK(sent_at(&s, una + 9 * mss), ==, 1);
    CHECK(s.h.nsent, ==, 1);
    CHECK(C(&s)->st.tlp_probes, ==, 2);
    CHECK(C(&s)->st.rto_expiries, ==, 0);
    h_free_sent(&s.h);
    /* A round trip later the probe's SACK shows segment 8 missing: RACK/DupThresh recovery
     * resends it. */
    advance(&s, 12 * SLIP_MSEC);
    sack_ack(&s, una + 8 * mss, una + 9 * mss, una + 10 * mss);
    advance(&s, 5 * SLIP_MSEC);
    CHECK(sent_at(&s, una + 8 * mss), ==, 1);
    CHECK(C(&s)->st.rto_expiries, ==, 0);
    pseg(&s, WIRE_TCP_ACK, s.pseq, una + 10 * mss, NULL, 0, 1000);
    CHECK(tcp_timer__armed(C(&s), TT_PTO), ==, false);
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

/* After an RTO the SACK scoreboard is kept (RFC 6675 §5.1 allows it, Linux does it): only the
 * holes are sent again, not the SACKed data between them. */
TEST(test_established_rto_keeps_sack_and_resends_holes_only)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    static char big[14600];
    memset(big, 'k', sizeof(big));
    struct iovec iov = { big, sizeof(big) };
    tcp_conn__send(s.env, s.sh, s.c, &iov, 1, 0);
    h_free_sent(&s.h);
    uint32_t mss = tcp_output__data_mss(C(&s));
    uint32_t una = s.iss + 1;
    /* Segments 0 and 2..5 unSACKed; recovery resends them, and all of that is lost too. */
    sack_ack(&s, una, una + mss, una + 2 * mss);
    sack_ack(&s, una, una + 6 * mss, una + 10 * mss);
    h_free_sent(&s.h);
    uint64_t before = C(&s)->st.retransmits;
    for (int i = 0; i < 300 && C(&s)->st.rto_expiries == 0; i++) {
        h_free_sent(&s.h);
        advance(&s, 10 * SLIP_MSEC);
    }
    CHECK(C(&s)->st.rto_expiries, ==, 1);
    CHECK(C(&s)->nsb, ==, 2);
    CHECK(!!(C(&s)->flags & TCPF_LOSS), ==, 1);
    CHECK(sent_at(&s, una), ==, 1);     /* cwnd is one segment: the first hole */
    /* Whatever went out since: only segments 0, 2, 3, 4 and 5 (the unSACKed ones). */
    for (unsigned i = 0; i < s.h.nsent; i++) {
        struct tout o;
        if (t_sent(&s.h, i, &o) && o.len)
            CHECK(seq_lt(o.th.seq, una + 6 * mss), ==, 1);
    }
    CHECK(C(&s)->st.retransmits, >, before);
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

TEST(test_established_nagle_nodelay_cork_more)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    CHECK(sendstr(&s, "a", 0), ==, 1);
    CHECK(s.h.nsent, ==, 1);            /* nothing unacked: goes */
    CHECK(sendstr(&s, "b", 0), ==, 1);
    CHECK(s.h.nsent, ==, 1);            /* Nagle: waits for the ACK */
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 2, NULL, 0, 1000);
    CHECK(s.h.nsent, ==, 2);            /* the ACK releases it */
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 3, NULL, 0, 1000);
    h_free_sent(&s.h);
    tcp_conn__setopt(s.env, s.sh, s.c, TCPO_NODELAY, 1);
    sendstr(&s, "c", 0);
    sendstr(&s, "d", 0);
    CHECK(s.h.nsent, ==, 2);            /* TCP_NODELAY */
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 5, NULL, 0, 1000);
    h_free_sent(&s.h);
    tcp_conn__setopt(s.env, s.sh, s.c, TCPO_CORK, 1);
    sendstr(&s, "e", 0);
    CHECK(s.h.nsent, ==, 0);            /* TCP_CORK holds partial segments */
    tcp_conn__setopt(s.env, s.sh, s.c, TCPO_CORK, 0);
    CHECK(s.h.nsent, ==, 1);            /* uncork pushes */
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 6, NULL, 0, 1000);
    h_free_sent(&s.h);
    CHECK(sendstr(&s, "f", TCP_SEND_MORE), ==, 1);
    CHECK(s.h.nsent, ==, 0);            /* MSG_MORE holds */
    sendstr(&s, "g", 0);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.len, ==, 2);
    CHECK_MEM(o.data, "fg", 2);
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

/* Minshall's Nagle (Linux): a small tail after full segments goes at once when no earlier
 * partial segment is unacknowledged. */
TEST(test_established_nagle_minshall_tail_goes)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    uint32_t mss = tcp_output__data_mss(C(&s));
    static char buf[4000];
    memset(buf, 't', sizeof(buf));
    struct iovec iov = { buf, mss + 10 };
    CHECK(tcp_conn__send(s.env, s.sh, s.c, &iov, 1, 0), ==, (ssize_t)(mss + 10));
    CHECK(s.h.nsent, ==, 2);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.len, ==, 10);
    /* Now a partial segment is outstanding: the next small write waits. */
    iov.iov_len = 10;
    tcp_conn__send(s.env, s.sh, s.c, &iov, 1, 0);
    CHECK(s.h.nsent, ==, 2);
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

TEST(test_established_zero_window_probe)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, NULL, 0, 0);     /* window closed */
    CHECK(C(&s)->snd_wnd, ==, 0);
    CHECK(sendstr(&s, "payload", 0), ==, 7);
    CHECK(s.h.nsent, ==, 0);
    CHECK(tcp_timer__armed(C(&s), TT_PERSIST), ==, true);
    advance(&s, tcp_rto(C(&s)));
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.seq, ==, s.iss);         /* SND.UNA - 1: elicits an ACK */
    CHECK(o.len, ==, 0);
    CHECK(C(&s)->st.zero_window_probes, ==, 1);
    h_free_sent(&s.h);
    advance(&s, 10 * SLIP_SEC);
    CHECK(C(&s)->st.zero_window_probes, >, 2);   /* keeps probing, backing off */
    CHECK(C(&s)->state, ==, TCPS_ESTABLISHED);
    h_free_sent(&s.h);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, NULL, 0, 100);   /* opens */
    CHECK(last(&s, &o), ==, true);
    CHECK(o.len, ==, 7);
    CHECK(tcp_timer__armed(C(&s), TT_PERSIST), ==, false);
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

TEST(test_established_keepalive)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    tcp_conn__setopt(s.env, s.sh, s.c, TCPO_KEEPIDLE, 10);
    tcp_conn__setopt(s.env, s.sh, s.c, TCPO_KEEPINTVL, 2);
    tcp_conn__setopt(s.env, s.sh, s.c, TCPO_KEEPCNT, 3);
    tcp_conn__setopt(s.env, s.sh, s.c, TCPO_KEEPALIVE, 1);
    advance(&s, 9 * SLIP_SEC);
    CHECK(s.h.nsent, ==, 0);
    advance(&s, 1 * SLIP_SEC + 1);
    CHECK(s.h.nsent, ==, 1);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.seq, ==, s.iss);         /* SND.UNA - 1 */
    /* An answer resets the count. */
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, NULL, 0, 1000);
    h_free_sent(&s.h);
    /* Silence again: probes at idle, idle + intvl, idle + 2 intvl; dropped at idle + 3 intvl. */
    advance(&s, 10 * SLIP_SEC + 3 * 2 * SLIP_SEC - SLIP_MSEC);
    CHECK(C(&s)->state, ==, TCPS_ESTABLISHED);
    CHECK(C(&s)->st.keepalive_probes, ==, 4);
    advance(&s, 2 * SLIP_MSEC);
    CHECK(C(&s)->state, ==, TCPS_CLOSED);
    CHECK(tcp_conn__so_error(s.sh, s.c), ==, ETIMEDOUT);
    CHECK(C(&s)->st.keepalive_probes, >=, 4);
    tcp_conn__close(s.env, s.sh, s.c);
    st_fini(&s, true);
}

TEST(test_established_icmp_frag_needed_lowers_mss)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    static char big[3000];
    memset(big, 'm', sizeof(big));
    struct iovec iov = { big, sizeof(big) };
    tcp_conn__send(s.env, s.sh, s.c, &iov, 1, 0);
    h_free_sent(&s.h);
    ip_pmtu__update(s.env, PEER, 1200);
    struct ip_icmp_err e;
    memset(&e, 0, sizeof(e));
    e.type = WIRE_ICMP_DEST_UNREACH;
    e.code = WIRE_ICMP_FRAG_NEEDED;
    e.mtu = 1200;
    e.q.ip.src = US;
    e.q.ip.dst = PEER;
    e.q.sport = 40000;
    e.q.dport = 80;
    e.q.tcp_seq = s.iss + 1;
    tcp_icmp_error(s.env, s.sh, &e);
    CHECK(C(&s)->mss, ==, 1160);
    CHECK(s.h.nsent, >=, 1);
    struct tout o;
    CHECK(t_sent(&s.h, 0, &o), ==, true);
    CHECK(o.th.seq, ==, s.iss + 1);
    CHECK(o.len, <=, 1160);
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

TEST(test_established_mss_clamped_by_route_mtu)
{
    struct st s;
    st_init(&s);
    s.h.t->links[0].mtu = 1400;
    s.c = (slip_idx_t)tcp_conn__open(s.sh);
    tcp_conn__connect(s.env, s.sh, s.c, 0, 40000, PEER, 80);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.opts.mss, ==, 1360);
    struct tseg sa = { .sport = 80, .dport = 40000, .seq = 5000, .ack = o.th.seq + 1,
                       .flags = WIRE_TCP_SYN | WIRE_TCP_ACK, .win = 1000, .opts = t_synopts(1460, -1, false, false, 0) };
    t_feed(&s.h, s.sh, &sa);
    CHECK(C(&s)->mss, ==, 1360);        /* ours is the smaller */
    tcp_conn__abort(s.env, s.sh, s.c);
    /* TCP_MAXSEG lowers it further. */
    s.c = (slip_idx_t)tcp_conn__open(s.sh);
    tcp_conn__setopt(s.env, s.sh, s.c, TCPO_MAXSEG, 1000);
    tcp_conn__connect(s.env, s.sh, s.c, 0, 40001, PEER, 80);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.opts.mss, ==, 1000);
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

/* ---------------- closing ---------------- */

TEST(test_established_fin_close_wait)
{
    struct st s;
    st_init(&s);
    st_passive(&s, false);
    pseg(&s, WIRE_TCP_ACK | WIRE_TCP_FIN, s.pseq, s.iss + 1, "bye", 3, 1000);
    CHECK(C(&s)->state, ==, TCPS_CLOSE_WAIT);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.ack, ==, s.pseq + 4);
    unsigned ev = tcp_conn__poll(s.sh, s.c);
    CHECK(ev & (TCP_EV_IN | TCP_EV_RDHUP | TCP_EV_OUT), ==, TCP_EV_IN | TCP_EV_RDHUP | TCP_EV_OUT);
    char b[8];
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, b, 8, 0), ==, 3);
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, b, 8, 0), ==, 0);
    CHECK(sendstr(&s, "still", 0), ==, 5);     /* half-close: we may still send */
    tcp_conn__abort(s.env, s.sh, s.c);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

TEST(test_established_fin_out_of_order_waits_for_hole)
{
    struct st s;
    st_init(&s);
    st_passive(&s, false);
    pseg(&s, WIRE_TCP_ACK | WIRE_TCP_FIN, s.pseq + 3, s.iss + 1, "def", 3, 1000);
    CHECK(C(&s)->state, ==, TCPS_ESTABLISHED);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, "abc", 3, 1000);
    CHECK(C(&s)->state, ==, TCPS_CLOSE_WAIT);
    CHECK(C(&s)->rcv_nxt, ==, s.pseq + 7);
    char b[8];
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, b, 8, 0), ==, 6);
    CHECK_MEM(b, "abcdef", 6);
    tcp_conn__close(s.env, s.sh, s.c);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    pseg(&s, WIRE_TCP_ACK, s.pseq + 7, s.iss + 2, NULL, 0, 1000);
    st_fini(&s, true);
}

TEST(test_close_wait_close)
{
    struct st s;
    st_init(&s);
    st_passive(&s, false);
    pseg(&s, WIRE_TCP_ACK | WIRE_TCP_FIN, s.pseq, s.iss + 1, NULL, 0, 1000);
    s.pseq++;
    h_free_sent(&s.h);
    tcp_conn__close(s.env, s.sh, s.c);
    CHECK(C(&s)->state, ==, TCPS_LAST_ACK);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_ACK | WIRE_TCP_FIN);
    CHECK(o.th.seq, ==, s.iss + 1);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, false);
}

TEST(test_last_ack_ack)
{
    struct st s;
    st_init(&s);
    st_passive(&s, false);
    pseg(&s, WIRE_TCP_ACK | WIRE_TCP_FIN, s.pseq, s.iss + 1, NULL, 0, 1000);
    s.pseq++;
    tcp_conn__close(s.env, s.sh, s.c);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    CHECK(s.sh->nused, ==, 1);
    /* The FIN is retransmitted until acknowledged. */
    h_free_sent(&s.h);
    advance(&s, tcp_rto(C(&s)));
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags & WIRE_TCP_FIN, ==, WIRE_TCP_FIN);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 2, NULL, 0, 1000);
    CHECK(s.sh->nused, ==, 0);
    st_fini(&s, true);
}

TEST(test_established_close_fin_wait_1)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    sendstr(&s, "last words", 0);
    tcp_conn__close(s.env, s.sh, s.c);
    CHECK(C(&s)->state, ==, TCPS_FIN_WAIT_1);
    /* Data went first; the FIN follows once Nagle lets it (here with the ACK of the data). */
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 11, NULL, 0, 1000);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags & WIRE_TCP_FIN, ==, WIRE_TCP_FIN);
    CHECK(o.th.seq, ==, s.iss + 11);
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

TEST(test_fin_wait_1_ack_of_fin)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    tcp_conn__close(s.env, s.sh, s.c);
    CHECK(C(&s)->state, ==, TCPS_FIN_WAIT_1);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 2, NULL, 0, 1000);
    CHECK(C(&s)->state, ==, TCPS_FIN_WAIT_2);
    CHECK(tcp_timer__armed(C(&s), TT_2MSL), ==, true);   /* orphan: FIN_WAIT_2 is bounded */
    /* The peer's FIN ends it. */
    pseg(&s, WIRE_TCP_ACK | WIRE_TCP_FIN, s.pseq, s.iss + 2, NULL, 0, 1000);
    CHECK(C(&s)->state, ==, TCPS_TIME_WAIT);
    advance(&s, TCP_TIMEWAIT_LEN + 1);
    st_fini(&s, true);
}

TEST(test_fin_wait_1_fin_closing_simultaneous_close)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    tcp_conn__shutdown(s.env, s.sh, s.c, SHUT_WR);
    CHECK(C(&s)->state, ==, TCPS_FIN_WAIT_1);
    pseg(&s, WIRE_TCP_ACK | WIRE_TCP_FIN, s.pseq, s.iss + 1, NULL, 0, 1000);   /* their FIN, ours not acked */
    CHECK(C(&s)->state, ==, TCPS_CLOSING);
    pseg(&s, WIRE_TCP_ACK, s.pseq + 1, s.iss + 2, NULL, 0, 1000);
    CHECK(C(&s)->state, ==, TCPS_TIME_WAIT);
    tcp_conn__close(s.env, s.sh, s.c);
    advance(&s, TCP_TIMEWAIT_LEN + 1);
    st_fini(&s, true);
}

TEST(test_closing_retransmits_fin)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    tcp_conn__close(s.env, s.sh, s.c);
    pseg(&s, WIRE_TCP_ACK | WIRE_TCP_FIN, s.pseq, s.iss + 1, NULL, 0, 1000);
    CHECK(C(&s)->state, ==, TCPS_CLOSING);
    h_free_sent(&s.h);
    advance(&s, tcp_rto(C(&s)));
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags & WIRE_TCP_FIN, ==, WIRE_TCP_FIN);
    CHECK(o.th.ack, ==, s.pseq + 1);
    pseg(&s, WIRE_TCP_ACK, s.pseq + 1, s.iss + 2, NULL, 0, 1000);
    CHECK(C(&s)->state, ==, TCPS_TIME_WAIT);
    advance(&s, TCP_TIMEWAIT_LEN + 1);
    st_fini(&s, true);
}

TEST(test_fin_wait_2_data_then_fin_time_wait)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    tcp_conn__shutdown(s.env, s.sh, s.c, SHUT_WR);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 2, NULL, 0, 1000);
    CHECK(C(&s)->state, ==, TCPS_FIN_WAIT_2);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 2, "more", 4, 1000);
    char b[8];
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, b, 8, 0), ==, 4);
    pseg(&s, WIRE_TCP_ACK | WIRE_TCP_FIN, s.pseq + 4, s.iss + 2, NULL, 0, 1000);
    CHECK(C(&s)->state, ==, TCPS_TIME_WAIT);
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, b, 8, 0), ==, 0);
    tcp_conn__close(s.env, s.sh, s.c);
    CHECK(s.sh->nused, ==, 1);
    st_fini(&s, false);
}

TEST(test_time_wait_fin_retransmit_acked_and_2msl)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    tcp_conn__close(s.env, s.sh, s.c);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 2, NULL, 0, 1000);
    pseg(&s, WIRE_TCP_ACK | WIRE_TCP_FIN, s.pseq, s.iss + 2, NULL, 0, 1000);
    CHECK(C(&s)->state, ==, TCPS_TIME_WAIT);
    advance(&s, 30 * SLIP_SEC);
    h_free_sent(&s.h);
    pseg(&s, WIRE_TCP_ACK | WIRE_TCP_FIN, s.pseq, s.iss + 2, NULL, 0, 1000);   /* our ACK was lost */
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.ack, ==, s.pseq + 1);
    advance(&s, 59 * SLIP_SEC);
    CHECK(s.sh->nused, ==, 1);          /* 2MSL restarted */
    advance(&s, 2 * SLIP_SEC);
    CHECK(s.sh->nused, ==, 0);
    st_fini(&s, true);
}

TEST(test_time_wait_syn_reuse)
{
    struct st s;
    st_init(&s);
    st_passive(&s, true);
    /* The server closes first and ends in TIME_WAIT. */
    tcp_conn__close(s.env, s.sh, s.c);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 2, NULL, 0, 1000);
    pseg(&s, WIRE_TCP_ACK | WIRE_TCP_FIN, s.pseq, s.iss + 2, NULL, 0, 1000);
    CHECK(C(&s)->state, ==, TCPS_TIME_WAIT);
    uint32_t old_max = C(&s)->snd_max;
    h_free_sent(&s.h);
    /* An old SYN (timestamp not newer) gets a (challenge) ACK, not a new connection. */
    struct tseg old = { .sport = 5555, .dport = 80, .seq = 500, .flags = WIRE_TCP_SYN, .win = 100,
                        .opts = t_synopts(1460, 7, true, true, 5) };
    t_feed(&s.h, s.sh, &old);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_ACK);
    CHECK(s.sh->c.tw_reused, ==, 0);
    h_free_sent(&s.h);
    /* RFC 6191: a newer timestamp opens a new incarnation, ISN beyond the old one. */
    struct tseg syn = { .sport = 5555, .dport = 80, .seq = 500, .flags = WIRE_TCP_SYN, .win = 100,
                        .opts = t_synopts(1460, 7, true, true, s.tsval + 1000) };
    t_feed(&s.h, s.sh, &syn);
    CHECK(s.sh->c.tw_reused, ==, 1);
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_SYN | WIRE_TCP_ACK);
    CHECK(o.th.seq, ==, old_max + 65535 + 2);
    slip_idx_t child = tcp__lookup(s.sh, US, 80, PEER, 5555);
    CHECK(tcp_conn__get(s.sh, child)->state, ==, TCPS_SYN_RECEIVED);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

TEST(test_established_close_with_unread_data_sends_rst)
{
    struct st s;
    st_init(&s);
    st_passive(&s, false);
    pseg(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, "unread", 6, 1000);
    h_free_sent(&s.h);
    tcp_conn__close(s.env, s.sh, s.c);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags & WIRE_TCP_RST, ==, WIRE_TCP_RST);
    CHECK(s.sh->nused, ==, 1);          /* only the listener */
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    st_fini(&s, true);
}

TEST(test_established_close_linger_zero_sends_rst)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    tcp_conn__setopt(s.env, s.sh, s.c, TCPO_LINGER, 0);
    tcp_conn__close(s.env, s.sh, s.c);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.th.flags & WIRE_TCP_RST, ==, WIRE_TCP_RST);
    CHECK(o.th.seq, ==, s.iss + 1);
    st_fini(&s, true);
}

TEST(test_listen_close_resets_unaccepted_children)
{
    struct st s;
    st_init(&s);
    st_passive(&s, false);
    /* A second, unaccepted child. */
    struct tseg syn = { .sport = 5556, .dport = 80, .seq = 1, .flags = WIRE_TCP_SYN, .win = 100 };
    t_feed(&s.h, s.sh, &syn);
    CHECK(s.sh->nused, ==, 3);
    tcp_conn__close(s.env, s.sh, (slip_idx_t)s.l);
    CHECK(s.sh->nused, ==, 1);          /* the accepted one stays */
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

TEST(test_established_send_buffer_full_eagain)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    tcp_conn__setopt(s.env, s.sh, s.c, TCPO_SNDBUF, 8192);
    static char big[20000];
    struct iovec iov = { big, sizeof(big) };
    CHECK(tcp_conn__send(s.env, s.sh, s.c, &iov, 1, 0), ==, 8192);
    CHECK(tcp_conn__send(s.env, s.sh, s.c, &iov, 1, 0), ==, -EAGAIN);
    CHECK(tcp_conn__poll(s.sh, s.c) & TCP_EV_OUT, ==, 0);
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

TEST(test_established_receive_window_closes_at_rcvbuf)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    struct tcp_conn *c = C(&s);
    c->rcvbuf = 8192;
    static char seg[1000];
    memset(seg, 'r', sizeof(seg));
    for (int i = 0; i < 12; i++)
        pseg(&s, WIRE_TCP_ACK, s.pseq + (uint32_t)i * 1000, s.iss + 1, seg, 1000, 1000);
    /* The window we advertised at the start (up to 64 KiB unscaled in our SYN-ACK... here the
     * connection began with the default buffer) never shrinks, but data beyond RCV.BUFF is
     * accounted: the window we now offer is zero. */
    h_free_sent(&s.h);
    tcp_output__ack(s.env, s.sh, c);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK((uint32_t)o.th.window << c->rcv_wscale, <=, c->rcv_adv - c->rcv_nxt);
    CHECK(tcp_rcv_space(c), ==, 0);
    char b[20000];
    CHECK(tcp_conn__recv(s.env, s.sh, s.c, b, sizeof(b), 0), ==, 12000);
    CHECK(c->rcv_frames, ==, 0);
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

/* The pool runs dry: send reports it, output stops without damage, and the retransmission
 * timer sends once frames are back. */
TEST(test_established_out_of_frames_degrades_gracefully)
{
    struct st s;
    st_init(&s);
    st_active(&s, false);
    tcp_conn__setopt(s.env, s.sh, s.c, TCPO_NODELAY, 1);
    slip_idx_t held[H_NFRAMES];
    unsigned n = 0;
    slip_idx_t f;
    while ((f = pkt__alloc(&s.h.pool)) != SLIP_NIL)
        held[n++] = f;
    CHECK(sendstr(&s, "x", 0), ==, -ENOBUFS);
    pkt__free_chain(&s.h.pool, held[--n]);      /* one frame: the send buffer takes it */
    CHECK(sendstr(&s, "queued", 0), ==, 6);
    CHECK(s.h.nsent, ==, 0);                    /* no frame to transmit with */
    CHECK(s.sh->c.no_frame, >=, 1);
    while (n)
        pkt__free_chain(&s.h.pool, held[--n]);
    advance(&s, TCP_RTO_MIN + 1);
    struct tout o;
    CHECK(last(&s, &o), ==, true);
    CHECK(o.len, ==, 6);
    CHECK_MEM(o.data, "queued", 6);
    tcp_conn__abort(s.env, s.sh, s.c);
    st_fini(&s, true);
}

/* Table full of TIME_WAIT: one allocation recycles the oldest eighth (by 2MSL deadline) at once,
 * hands out the oldest, and puts the others on the free list for the next allocations. */
TEST(test_time_wait_table_full_recycles_oldest_batch)
{
    struct st s;
    st_init(&s);
    for (int i = 0; i < 64; i++) {
        int c = tcp_conn__open(s.sh);
        CHECK(c, ==, i);
        struct tcp_conn *x = tcp_conn__get(s.sh, (slip_idx_t)c);
        x->state = TCPS_TIME_WAIT;
        x->flags &= ~TCPF_USER;
        tcp_timer__set(s.sh, x, TT_2MSL, 1000000 + (slip_time_t)((i * 37) % 64));   /* shuffled ages */
    }
    CHECK(tcp_conn__open(s.sh), >=, 0);     /* recycles */
    CHECK(s.sh->c.tw_recycled, ==, 8);      /* deadlines 0..7 above the oldest: 64 / 8 */
    CHECK(s.sh->nused, ==, 64 - 7);
    int tw = 0;
    for (int i = 0; i < 64; i++) {
        struct tcp_conn *x = &s.sh->conns[i];
        if (x->state == TCPS_TIME_WAIT) {
            tw++;
            CHECK(x->timer[TT_2MSL], >, 1000000 + 7);   /* only the oldest went */
        }
    }
    CHECK(tw, ==, 56);
    for (int k = 0; k < 7; k++)
        CHECK(tcp_conn__open(s.sh), >=, 0);
    CHECK(s.sh->c.tw_recycled, ==, 8);      /* from the free list, no new scan */
    CHECK(s.sh->nused, ==, 64);
    st_fini(&s, false);
}

TEST_MAIN()
