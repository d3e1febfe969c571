/* ECN (RFC 3168) against crafted peer segments: the negotiation in both directions and what
 * net.ipv4.tcp_ecn allows (§6.1.1), ECT(0) on new data only (§6.1.4-6.1.5), the receiver's echo
 * of CE until CWR (§6.1.3), the sender's one reduction per window and its CWR (§6.1.2). */
#include "tests/unit/tcp/tcp_test.h"

#define ECT0 0x02
#define CE   0x03

struct st {
    struct harness h;
    struct tcp_shared *sh;
    struct ip_env *env;
    int l;
    slip_idx_t c;
    uint32_t iss, pseq;
};

static void st_init(struct st *s, uint8_t mode)
{
    memset(s, 0, sizeof(*s));
    harness_init(&s->h);
    s->sh = t_new_shared(8);
    s->sh->ecn = mode;
    s->env = &s->h.env;
    s->l = -1;
}

static void st_fini(struct st *s)
{
    tcp_conn__abort(s->env, s->sh, s->c);
    if (s->l >= 0)
        tcp_conn__close(s->env, s->sh, (slip_idx_t)s->l);
    CHECK(s->sh->nused, ==, 0);
    tcp_shared__purge(s->sh, &s->h.pool);
    free(s->sh);
    harness_fini(&s->h);
}

static struct tcp_conn *C(struct st *s) { return tcp_conn__get(s->sh, s->c); }

static void peer(struct st *s, uint8_t flags, uint32_t seq, uint32_t ack, const char *data, uint8_t tos)
{
    struct tseg t = { .sport = 5555, .dport = 80, .seq = seq, .ack = ack, .flags = flags, .win = 1000,
                      .data = data, .len = data ? strlen(data) : 0, .tos = tos };
    t_feed(&s->h, s->sh, &t);
}

/* A passive connection: SYN (with ECE|CWR when ask), the SYN-ACK returned in *synack. */
static void st_passive(struct st *s, bool ask, struct tout *synack)
{
    s->l = tcp_conn__open(s->sh);
    CHECK(tcp_conn__listen(s->sh, (slip_idx_t)s->l, 0, 80, 8), ==, 0);
    struct tseg syn = { .sport = 5555, .dport = 80, .seq = 1000,
                        .flags = WIRE_TCP_SYN | (ask ? WIRE_TCP_ECE | WIRE_TCP_CWR : 0), .win = 65535,
                        .opts = t_synopts(1460, 7, true, false, 0) };
    t_feed(&s->h, s->sh, &syn);
    CHECK(t_last(&s->h, synack), ==, true);
    s->iss = synack->th.seq;
    s->pseq = 1001;
    h_free_sent(&s->h);
    peer(s, WIRE_TCP_ACK, s->pseq, s->iss + 1, NULL, 0);
    int c = tcp_conn__accept(s->sh, (slip_idx_t)s->l);
    CHECK(c, >=, 0);
    s->c = (slip_idx_t)c;
    h_free_sent(&s->h);
}

static void send_n(struct st *s, size_t n)
{
    static char buf[20 * 1460];
    memset(buf, 'x', sizeof(buf));
    struct iovec iov = { buf, n };
    CHECK(tcp_conn__send(s->env, s->sh, s->c, &iov, 1, 0), ==, (ssize_t)n);
}

TEST(test_ecn_passive_negotiation_follows_mode)
{
    for (uint8_t mode = 0; mode <= 2; mode++) {
        for (int ask = 0; ask <= 1; ask++) {
            struct st s;
            st_init(&s, mode);
            struct tout sa;
            st_passive(&s, ask, &sa);
            bool on = ask && mode != 0;
            CHECK(!!(sa.th.flags & WIRE_TCP_ECE), ==, on);
            CHECK(!!(sa.th.flags & WIRE_TCP_CWR), ==, 0);
            CHECK(sa.tos & 3, ==, 0);               /* SYNs are not ECN-capable */
            CHECK(!!(C(&s)->ecn & TCP_ECN_OK), ==, on);
            send_n(&s, 1000);
            struct tout o;
            CHECK(t_last(&s.h, &o), ==, true);
            CHECK(o.len, ==, 1000);
            CHECK(o.tos & 3, ==, on ? ECT0 : 0);
            st_fini(&s);
        }
    }
}

/* tcp_ecn = 1 asks in our SYN (ECE|CWR); the SYN-ACK's ECE without CWR turns it on. tcp_ecn = 2
 * does not ask. */
TEST(test_ecn_active_asks_only_with_mode_1)
{
    for (uint8_t mode = 1; mode <= 2; mode++) {
        struct st s;
        st_init(&s, mode);
        int c = tcp_conn__open(s.sh);
        s.c = (slip_idx_t)c;
        CHECK(tcp_conn__connect(s.env, s.sh, s.c, 0, 40000, PEER, 80), ==, -EINPROGRESS);
        struct tout o;
        CHECK(t_last(&s.h, &o), ==, true);
        CHECK(o.th.flags & (WIRE_TCP_ECE | WIRE_TCP_CWR), ==, mode == 1 ? WIRE_TCP_ECE | WIRE_TCP_CWR : 0);
        h_free_sent(&s.h);
        struct tseg sa = { .sport = 80, .dport = 40000, .seq = 5000, .ack = o.th.seq + 1,
                           .flags = WIRE_TCP_SYN | WIRE_TCP_ACK | WIRE_TCP_ECE, .win = 65535,
                           .opts = t_synopts(1460, 7, true, false, 0) };
        t_feed(&s.h, s.sh, &sa);
        CHECK(C(&s)->state, ==, TCPS_ESTABLISHED);
        CHECK(!!(C(&s)->ecn & TCP_ECN_OK), ==, mode == 1);
        st_fini(&s);
    }
}

/* §6.1.3: a CE-marked segment is acknowledged at once with ECE, and so is every segment after it
 * until one carries CWR. */
TEST(test_ecn_receiver_echoes_ce_until_cwr)
{
    struct st s;
    st_init(&s, 2);
    struct tout sa;
    st_passive(&s, true, &sa);
    peer(&s, WIRE_TCP_ACK, s.pseq, s.iss + 1, "aaaa", ECT0);
    h_free_sent(&s.h);
    peer(&s, WIRE_TCP_ACK, s.pseq + 4, s.iss + 1, "bbbb", CE);
    struct tout o;
    CHECK(t_last(&s.h, &o), ==, true);      /* at once, not delayed */
    CHECK(o.th.ack, ==, s.pseq + 8);
    CHECK(!!(o.th.flags & WIRE_TCP_ECE), ==, 1);
    CHECK(o.tos & 3, ==, 0);                /* a pure ACK is not ECN-capable */
    CHECK(s.sh->c.ecn_ce_in, ==, 1);
    h_free_sent(&s.h);
    peer(&s, WIRE_TCP_ACK | WIRE_TCP_PSH, s.pseq + 8, s.iss + 1, "cccc", ECT0);
    tcp_conn__recv(s.env, s.sh, s.c, (char[64]){0}, 64, 0);
    send_n(&s, 10);
    CHECK(t_last(&s.h, &o), ==, true);
    CHECK(!!(o.th.flags & WIRE_TCP_ECE), ==, 1);
    h_free_sent(&s.h);
    peer(&s, WIRE_TCP_ACK | WIRE_TCP_CWR, s.pseq + 12, s.iss + 11, "dddd", ECT0);
    send_n(&s, 10);
    CHECK(t_last(&s.h, &o), ==, true);
    CHECK(!!(o.th.flags & WIRE_TCP_ECE), ==, 0);
    st_fini(&s);
}

/* §6.1.2: an ACK with ECE halves the window (ssthresh from the congestion control, cwnd =
 * ssthresh) once per window of data; the next new segment carries CWR; a retransmission is not
 * ECN-capable (§6.1.5). */
TEST(test_ecn_sender_reduces_once_per_window_and_sends_cwr)
{
    struct st s;
    st_init(&s, 2);
    struct tout sa;
    st_passive(&s, true, &sa);
    send_n(&s, 10 * 1460);
    uint32_t una = s.iss + 1, cwnd0 = C(&s)->cwnd, mss = tcp_output__data_mss(C(&s));
    CHECK(C(&s)->snd_max, ==, una + 10 * mss);
    h_free_sent(&s.h);
    s.env->now += 10 * SLIP_MSEC;
    peer(&s, WIRE_TCP_ACK | WIRE_TCP_ECE, s.pseq, una + mss, NULL, 0);
    CHECK(C(&s)->st.ecn_reductions, ==, 1);
    CHECK(C(&s)->cwnd, <, cwnd0);
    struct tcp_conn_info ti;
    CHECK(tcp_conn__info(s.sh, s.c, &ti), ==, 0);
    CHECK(ti.ca_state, ==, 2);                  /* Linux's TCP_CA_CWR */
    CHECK(C(&s)->cwnd, ==, C(&s)->ssthresh);
    uint32_t cwnd1 = C(&s)->cwnd;
    peer(&s, WIRE_TCP_ACK | WIRE_TCP_ECE, s.pseq, una + 2 * mss, NULL, 0);
    CHECK(C(&s)->st.ecn_reductions, ==, 1);     /* same window */
    CHECK(C(&s)->cwnd, >=, cwnd1);
    send_n(&s, 2 * 1460);
    h_free_sent(&s.h);
    peer(&s, WIRE_TCP_ACK, s.pseq, una + 8 * mss, NULL, 0);
    unsigned cwr = 0, ect = 0;
    for (unsigned i = 0; i < s.h.nsent; i++) {
        struct tout o;
        if (t_sent(&s.h, i, &o) && o.len) {
            cwr += !!(o.th.flags & WIRE_TCP_CWR);
            ect += (o.tos & 3) == ECT0;
        }
    }
    CHECK(cwr, ==, 1);                          /* on the first new segment only */
    CHECK(ect, ==, 2);
    /* No ACK comes: the loss probes' and the RTO's retransmissions leave Not-ECT. */
    h_free_sent(&s.h);
    for (int i = 0; i < 2000; i++) {
        s.env->now += SLIP_MSEC;
        tcp_timer__poll(s.env, s.sh);
    }
    CHECK(C(&s)->st.rto_expiries, >=, 1);
    struct tout o;
    bool found = false;
    for (unsigned i = 0; i < s.h.nsent; i++)
        if (t_sent(&s.h, i, &o) && o.len) {
            found |= o.th.seq == una + 8 * mss;
            CHECK(o.tos & 3, ==, 0);
        }
    CHECK(found, ==, true);
    st_fini(&s);
}

TEST_MAIN()
