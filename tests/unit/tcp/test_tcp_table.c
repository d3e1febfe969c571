/* The connection table (tcp_conn.c): sized at run time and touched only as connections come
 * (a table for a million connections on a memfd allocates almost nothing until used; slots are
 * handed out from the lowest never-used index up, freed ones first), and a full table's
 * behaviour at a listener: a SYN it cannot hold gets no SYN cookie (dropped, the peer retries),
 * a cookie ACK that finds the table full since is answered with RST, TIME_WAIT slots are
 * recycled first. */
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/unit/tcp/tcp_test.h"

static long allocated(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 ? (long)st.st_blocks * 512 : -1;
}

TEST(test_table_pages_follow_use_not_size)
{
    const uint32_t max = 1u << 20;
    size_t bytes = tcp_shared__bytes(max);
    int fd = memfd_create("tcp-table", MFD_CLOEXEC);
    CHECK(fd, >=, 0);
    CHECK(ftruncate(fd, (off_t)bytes), ==, 0);
    struct tcp_shared *sh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(sh != MAP_FAILED, ==, 1);
    tcp_shared__init(sh, max, T_KEY);
    /* the head and the hash buckets (a quarter of max, 4 bytes each): 1 MiB, not 2.8 GiB */
    long at_init = allocated(fd);
    CHECK(at_init, <=, 2L << 20);
    for (int i = 0; i < 1000; i++)
        CHECK(tcp_conn__open(sh), ==, i);       /* lowest never-used index first */
    long used = allocated(fd) - at_init;
    CHECK(used, >=, 1000L * (long)sizeof(struct tcp_conn) - 4096);
    CHECK(used, <=, 1000L * (long)sizeof(struct tcp_conn) + 4 * 4096);
    CHECK(sh->high_water, ==, 1000);
    /* A freed slot is handed out again before a never-used one. */
    struct harness h;
    harness_init(&h);
    tcp_conn__close(&h.env, sh, 500);
    CHECK(tcp_conn__open(sh), ==, 500);
    CHECK(tcp_conn__open(sh), ==, 1000);
    CHECK(sh->nused, ==, 1001);
    tcp_shared__purge(sh, &h.pool);
    harness_fini(&h);
    munmap(sh, bytes);
    close(fd);
}

struct full {
    struct harness h;
    struct tcp_shared *sh;
    int l;
};

/* A listener and SYN_RECEIVED children from ports 6000.. filling a table of 16. */
static void fill(struct full *f)
{
    harness_init(&f->h);
    f->sh = t_new_shared(16);
    f->l = tcp_conn__open(f->sh);
    CHECK(tcp_conn__listen(f->sh, (slip_idx_t)f->l, 0, 80, 128), ==, 0);
    for (uint16_t p = 0; p < 15; p++) {
        struct tseg syn = { .sport = (uint16_t)(6000 + p), .dport = 80, .seq = 1, .flags = WIRE_TCP_SYN, .win = 100 };
        t_feed(&f->h, f->sh, &syn);
    }
    CHECK(f->sh->nused, ==, 16);
    CHECK(tcp_conn__room(f->sh), ==, false);
    h_free_sent(&f->h);
}

static void unfill(struct full *f)
{
    tcp_conn__close(&f->h.env, f->sh, (slip_idx_t)f->l);     /* aborts the unaccepted children */
    CHECK(f->sh->nused, ==, 0);
    tcp_shared__purge(f->sh, &f->h.pool);
    free(f->sh);
    harness_fini(&f->h);
}

TEST(test_listen_syn_table_full_no_cookie)
{
    struct full f;
    fill(&f);
    struct tseg syn = { .sport = 7000, .dport = 80, .seq = 1, .flags = WIRE_TCP_SYN, .win = 100 };
    t_feed(&f.h, f.sh, &syn);
    CHECK(f.h.nsent, ==, 0u);                   /* no SYN-ACK: the peer retransmits its SYN */
    CHECK(f.sh->c.syn_full_drops, ==, 1);
    CHECK(f.sh->c.syncookies_sent, ==, 0);
    /* Not even when cookies are always on. */
    f.sh->syncookies = 2;
    t_feed(&f.h, f.sh, &syn);
    CHECK(f.h.nsent, ==, 0u);
    CHECK(f.sh->c.syn_full_drops, ==, 2);
    CHECK(f.sh->c.syncookies_sent, ==, 0);
    /* One child goes (the peer reset it): the retransmitted SYN gets in. */
    struct tseg rst = { .sport = 6000, .dport = 80, .seq = 2, .flags = WIRE_TCP_RST };
    t_feed(&f.h, f.sh, &rst);
    CHECK(f.sh->nused, ==, 15);
    f.sh->syncookies = 1;
    t_feed(&f.h, f.sh, &syn);
    struct tout o;
    CHECK(t_last(&f.h, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_SYN | WIRE_TCP_ACK);
    CHECK(f.sh->nused, ==, 16);
    h_free_sent(&f.h);
    unfill(&f);
}

TEST(test_listen_cookie_ack_after_table_filled_gets_rst)
{
    struct harness h;
    harness_init(&h);
    struct tcp_shared *sh = t_new_shared(16);
    int l = tcp_conn__open(sh);
    CHECK(tcp_conn__listen(sh, (slip_idx_t)l, 0, 80, 128), ==, 0);
    sh->syncookies = 2;
    struct tseg syn = { .sport = 7000, .dport = 80, .seq = 1000, .flags = WIRE_TCP_SYN, .win = 100 };
    t_feed(&h, sh, &syn);
    struct tout o;
    CHECK(t_last(&h, &o), ==, true);
    CHECK(o.th.flags, ==, WIRE_TCP_SYN | WIRE_TCP_ACK);
    uint32_t cookie = o.th.seq;
    h_free_sent(&h);
    /* The table fills up before the cookie comes back. */
    int held[15];
    for (int i = 0; i < 15; i++)
        held[i] = tcp_conn__open(sh);
    CHECK(sh->nused, ==, 16);
    struct tseg ack = { .sport = 7000, .dport = 80, .seq = 1001, .ack = cookie + 1, .flags = WIRE_TCP_ACK,
                        .win = 100, .data = "hi", .len = 2 };
    t_feed(&h, sh, &ack);
    CHECK(sh->c.cookie_full_rsts, ==, 1);
    CHECK(t_last(&h, &o), ==, true);
    CHECK(o.th.flags & WIRE_TCP_RST, ==, WIRE_TCP_RST);    /* told, not left established */
    CHECK(o.th.seq, ==, cookie + 1);
    h_free_sent(&h);
    for (int i = 0; i < 15; i++)
        tcp_conn__close(&h.env, sh, (slip_idx_t)held[i]);
    tcp_conn__close(&h.env, sh, (slip_idx_t)l);
    CHECK(sh->nused, ==, 0);
    tcp_shared__purge(sh, &h.pool);
    free(sh);
    harness_fini(&h);
}

/* A full table gives up a TIME_WAIT slot for a new connection; with none, it stops scanning
 * until a connection enters TIME_WAIT (the scan is over the whole table). */
TEST(test_table_full_recycles_time_wait_once_scanned)
{
    struct harness h;
    harness_init(&h);
    struct tcp_shared *sh = t_new_shared(16);
    int c[16];
    for (int i = 0; i < 16; i++)
        c[i] = tcp_conn__open(sh);
    CHECK(tcp_conn__room(sh), ==, false);
    CHECK(sh->tw_full_seen, ==, sh->tw_entered + 1);
    CHECK(tcp_conn__open(sh), <, 0);
    CHECK(sh->c.conn_full, ==, 1);
    /* Slot 3 in TIME_WAIT, closed by the application (what the engine leaves after an active close). */
    struct tcp_conn *tw = tcp_conn__get(sh, (slip_idx_t)c[3]);
    tcp_set_state(sh, tw, TCPS_TIME_WAIT);
    tw->flags &= ~TCPF_USER;
    tw->timer[TT_2MSL] = 1000;
    CHECK(tcp_conn__room(sh), ==, true);
    CHECK(tcp_conn__open(sh), ==, c[3]);
    CHECK(sh->c.tw_recycled, ==, 1);
    for (int i = 0; i < 16; i++)
        tcp_conn__close(&h.env, sh, (slip_idx_t)c[i]);
    CHECK(sh->nused, ==, 0);
    tcp_shared__purge(sh, &h.pool);
    free(sh);
    harness_fini(&h);
}

TEST_MAIN()
