/* Zero-copy send (tcp_zc.c): frames filled by the caller join the send queue as they are, mixed
 * with ordinary sends, and every byte arrives in order across a lossy wire; the bytes before a
 * frame's off are not sent; send_room answers as send does; a connection that cannot send frees
 * the frames it was given; no frame is lost at the end. */
#include "tests/unit/tcp/tcp_test.h"

#define BUF 65536

static void fill(uint8_t *dst, uint64_t from, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = t_pattern(from + i);
}

static bool connect_pair(struct tpair *p, int listener, slip_idx_t *ac, slip_idx_t *bc)
{
    struct ip_env *env = tp_env(p, p->a);
    int c = tcp_conn__open(p->a);
    tcp_conn__setopt(env, p->a, (slip_idx_t)c, TCPO_SNDBUF, BUF);
    CHECK(tcp_conn__connect(env, p->a, (slip_idx_t)c, US, 40000, B_ADDR, 80), ==, -EINPROGRESS);
    int acc = tp_establish(p, listener, (slip_idx_t)c);
    CHECK(acc, >=, 0);
    *ac = (slip_idx_t)c;
    *bc = (slip_idx_t)acc;
    return acc >= 0;
}

TEST(test_zc_frames_and_copies_arrive_in_order)
{
    static struct tpair p;
    tp_init(&p, 8, 11);
    uint32_t free0 = p.h.pool.frames->count;
    int l = tcp_conn__open(p.b);
    CHECK(tcp_conn__listen(p.b, (slip_idx_t)l, 0, 80, 4), ==, 0);
    slip_idx_t ac, bc;
    connect_pair(&p, l, &ac, &bc);
    p.drop_pct = 3;
    const uint64_t total = 3 << 20;
    uint64_t sent = 0, rcvd = 0;
    bool bad = false;
    unsigned round = 0, frames_sent = 0;
    static uint8_t in[32768], chunk[5000];
    for (int i = 0; i < 3000000 && rcvd < total; i++) {
        struct ip_env *env = tp_env(&p, p.a);
        while (sent < total) {
            ssize_t room = tcp_conn__send_room(env, p.a, ac);
            if (room == -EAGAIN)
                break;
            CHECK(room, >, 0);
            if (room <= 0)
                break;
            if (round++ % 3 == 0) {
                /* An ordinary send of an odd length, so frames follow a partial tail frame. */
                size_t n = (size_t)SLIP_MIN((uint64_t)SLIP_MIN((size_t)room, sizeof(chunk)), total - sent);
                fill(chunk, sent, n);
                struct iovec v = { chunk, n };
                ssize_t r = tcp_conn__send(env, p.a, ac, &v, 1, 0);
                if (r <= 0)
                    break;
                sent += (uint64_t)r;
                continue;
            }
            /* Up to 4 frames, the first with its bytes from off 100 (what precedes is not sent). */
            slip_idx_t f[4];
            unsigned n = 0;
            size_t budget = (size_t)SLIP_MIN((uint64_t)room, total - sent);
            uint64_t at = sent;
            for (; n < 4 && budget; n++) {
                f[n] = pkt__alloc(&p.h.pool);
                if (f[n] == SLIP_NIL)
                    break;
                struct pkt_meta *m = pkt__meta(&p.h.pool, f[n]);
                uint8_t *base = pkt__frame(&p.h.pool, f[n]);
                m->off = n == 0 ? 100 : 0;
                memset(base, 0xee, m->off);
                m->len = (uint16_t)SLIP_MIN(budget, (size_t)(H_FRAME - m->off));
                fill(base + m->off, at, m->len);
                at += m->len;
                budget -= m->len;
            }
            if (n == 0)
                break;
            ssize_t r = tcp_conn__send_frames(env, p.a, ac, f, n, 0);
            CHECK(r, >, 0);
            if (r <= 0)
                break;
            sent += (uint64_t)r;
            frames_sent += n;
        }
        env = tp_env(&p, p.b);
        for (;;) {
            ssize_t r = tcp_conn__recv(env, p.b, bc, in, sizeof(in), 0);
            if (r <= 0)
                break;
            for (ssize_t k = 0; k < r; k++)
                bad |= in[k] != t_pattern(rcvd + (uint64_t)k);
            rcvd += (uint64_t)r;
        }
        tp_step(&p);
    }
    p.drop_pct = 0;
    CHECK(rcvd, ==, total);
    CHECK(bad, ==, false);
    CHECK(frames_sent, >, 100);
    CHECK(tcp_conn__get(p.a, ac)->st.retransmits, >, 0);   /* segments rebuilt from frames too */
    /* A closed connection: the frames handed over are freed, send's error comes back. */
    tcp_conn__close(tp_env(&p, p.a), p.a, ac);
    for (int i = 0; i < 200000 && tcp_conn__get(p.a, ac)->state != TCPS_FIN_WAIT_2; i++)
        tp_step(&p);
    uint32_t before = p.h.pool.frames->count;
    slip_idx_t f = pkt__alloc(&p.h.pool);
    pkt__meta(&p.h.pool, f)->len = 10;
    CHECK(tcp_conn__send_frames(tp_env(&p, p.a), p.a, ac, &f, 1, 0), ==, -EBADF);   /* closed by the user */
    CHECK(p.h.pool.frames->count, ==, before);
    tcp_conn__close(tp_env(&p, p.b), p.b, bc);
    tcp_conn__close(tp_env(&p, p.b), p.b, (slip_idx_t)l);
    for (int i = 0; i < 400000 && (p.a->nused || p.b->nused || p.nq); i++)
        tp_step(&p);
    CHECK(p.a->nused, ==, 0);
    CHECK(p.b->nused, ==, 0);
    CHECK(p.h.pool.frames->count, ==, free0);
    tp_fini(&p);
}

TEST(test_zc_room_full_then_eagain)
{
    static struct tpair p;
    tp_init(&p, 8, 3);
    int l = tcp_conn__open(p.b);
    CHECK(tcp_conn__listen(p.b, (slip_idx_t)l, 0, 80, 4), ==, 0);
    slip_idx_t ac, bc;
    connect_pair(&p, l, &ac, &bc);
    struct ip_env *env = tp_env(&p, p.a);
    CHECK(tcp_conn__send_room(env, p.a, ac), ==, BUF);
    static uint8_t big[BUF];
    struct iovec v = { big, sizeof(big) };
    CHECK(tcp_conn__send(env, p.a, ac, &v, 1, 0), ==, BUF);
    CHECK(tcp_conn__send_room(env, p.a, ac), ==, -EAGAIN);
    CHECK(tcp_conn__send_room(env, p.a, 8), ==, -EBADF);      /* past the table (8 slots) */
    tp_fini(&p);
}

TEST_MAIN()
