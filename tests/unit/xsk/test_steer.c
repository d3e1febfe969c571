/* Runs the XDP steering program (bpf/steer.bpf.c) on hand-built frames with BPF_PROG_TEST_RUN,
 * without attaching it anywhere, and checks the verdict and the counters of each case. Frames are
 * built field by field below (no captures); checksums are left zero because the program never
 * reads them. Needs root (CAP_BPF); exits 77 (skip) with a reason when BPF is not available. */
#include <errno.h>
#include <arpa/inet.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/if_xdp.h>
#include <linux/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "tests/unit/check.h"
#include "bpf/steer.h"
#include "bpf/steer.skel.h"
#include "xsk/steer.h"

static struct slip_steer *skel;

#define LOCAL  "198.18.0.2"
#define REMOTE "198.18.0.1"
#define IP_MF  0x2000

static uint32_t ip4(const char *s)
{
    struct in_addr a;

    inet_pton(AF_INET, s, &a);
    return a.s_addr;
}

/* ---- frame builder ---- */

struct frame {
    uint8_t b[6000];
    size_t len;
};

struct ip_spec {
    uint32_t saddr, daddr;
    uint8_t proto;
    uint8_t ihl;                /* 0 means 5 */
    uint16_t id;
    uint16_t frag;              /* host order: flags | offset in 8-byte units */
    int tot_len;                /* 0 means computed; -1 keeps the computed one too */
};

static size_t put_eth(uint8_t *p, uint16_t type)
{
    static const uint8_t dst[6] = { 0xaa, 0xbb, 0xcc, 0x00, 0x00, 0x02 };
    static const uint8_t src[6] = { 0xaa, 0xbb, 0xcc, 0x00, 0x00, 0x01 };

    memcpy(p, dst, 6);
    memcpy(p + 6, src, 6);
    p[12] = type >> 8;
    p[13] = type & 0xff;
    return ETH_HLEN;
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = v >> 8;
    p[1] = v & 0xff;
}

/* Writes eth + IPv4 header + l4 (already laid out by the caller after the header) into f. */
static void build_ip(struct frame *f, const struct ip_spec *s, const uint8_t *l4, size_t l4len)
{
    uint8_t ihl = s->ihl ? s->ihl : 5;
    size_t hlen = ihl * 4u;
    uint8_t *ip;

    memset(f->b, 0, sizeof(f->b));
    f->len = put_eth(f->b, ETH_P_IP);
    ip = f->b + f->len;
    ip[0] = 0x40 | ihl;
    put16(ip + 2, s->tot_len > 0 ? (uint16_t)s->tot_len : (uint16_t)(hlen + l4len));
    put16(ip + 4, s->id);
    put16(ip + 6, s->frag);
    ip[8] = 64;
    ip[9] = s->proto;
    memcpy(ip + 12, &s->saddr, 4);
    memcpy(ip + 16, &s->daddr, 4);
    memcpy(ip + hlen, l4, l4len);
    f->len += hlen + l4len;
}

static size_t udp_hdr(uint8_t *p, uint16_t sport, uint16_t dport, size_t payload)
{
    put16(p, sport);
    put16(p + 2, dport);
    put16(p + 4, (uint16_t)(8 + payload));
    memset(p + 8, 'u', payload);
    return 8 + payload;
}

/* The flags tcp_hdr writes: PSH|ACK unless a test opens connections (SYN). */
static uint8_t g_tcp_flags = 0x18;

static size_t tcp_hdr(uint8_t *p, uint16_t sport, uint16_t dport, size_t payload)
{
    put16(p, sport);
    put16(p + 2, dport);
    p[12] = 5 << 4;             /* data offset: 20 bytes */
    p[13] = g_tcp_flags;
    put16(p + 14, 65535);
    memset(p + 20, 't', payload);
    return 20 + payload;
}

/* A UDP or TCP datagram from REMOTE:sport to LOCAL:dport. */
static void build_l4(struct frame *f, uint8_t proto, uint16_t sport, uint16_t dport, size_t payload)
{
    static uint8_t l4[6000];
    struct ip_spec s = { .saddr = ip4(REMOTE), .daddr = ip4(LOCAL), .proto = proto, .id = 1 };
    size_t n = proto == IPPROTO_UDP ? udp_hdr(l4, sport, dport, payload) : tcp_hdr(l4, sport, dport, payload);

    build_ip(f, &s, l4, n);
}

/* ---- running the program ---- */

struct result {
    int rc;                     /* of bpf_prog_test_run_opts */
    uint32_t verdict;
    uint64_t d[STEER_C__MAX];   /* counter deltas */
};

static void read_counters(uint64_t *out)
{
    int ncpu = libbpf_num_possible_cpus();
    uint64_t vals[ncpu > 0 ? ncpu : 1];

    for (uint32_t i = 0; i < STEER_C__MAX; i++) {
        out[i] = 0;
        if (bpf_map__lookup_elem(skel->maps.slip_counters, &i, sizeof(i), vals, sizeof(vals), 0) == 0)
            for (int c = 0; c < ncpu; c++)
                out[i] += vals[c];
    }
}

static struct result run(const void *data, size_t len)
{
    uint64_t before[STEER_C__MAX], after[STEER_C__MAX];
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = data, .data_size_in = (uint32_t)len, .repeat = 1);
    struct result r = {};

    read_counters(before);
    r.rc = bpf_prog_test_run_opts(bpf_program__fd(skel->progs.slip_steer), &opts);
    if (r.rc)
        r.rc = r.rc < -1 ? r.rc : -errno;
    r.verdict = opts.retval;
    read_counters(after);
    for (int i = 0; i < STEER_C__MAX; i++)
        r.d[i] = after[i] - before[i];
    return r;
}

/* Every frame ends in exactly one outcome: the outcome counters add up to RX. */
static void check_outcome(const struct result *r, uint32_t verdict, enum steer_counter outcome)
{
    CHECK(r->rc, ==, 0);
    CHECK(r->verdict, ==, verdict);
    CHECK(r->d[STEER_C_RX], ==, 1);
    CHECK(r->d[outcome], ==, 1);
    CHECK(r->d[STEER_C_REDIRECTED] + r->d[STEER_C_PASSED] + r->d[STEER_C_MALFORMED] + r->d[STEER_C_NO_XSK] +
          r->d[STEER_C_MULTIBUF], ==, 1);
}

static struct steer_key key(uint8_t proto, const char *laddr, const char *raddr, uint16_t lport, uint16_t rport)
{
    struct steer_key k = {
        .laddr = laddr ? ip4(laddr) : 0,
        .raddr = raddr ? ip4(raddr) : 0,
        .lport = htons(lport),
        .rport = htons(rport),
        .proto = proto,
    };
    return k;
}

static void own_by(struct steer_key k, uint16_t stack)
{
    struct steer_val v = { .stack = stack, .pid = 7 };

    CHECK(bpf_map__update_elem(skel->maps.slip_owned, &k, sizeof(k), &v, sizeof(v), BPF_ANY), ==, 0);
}

static void own(struct steer_key k)
{
    own_by(k, 0);
}

static void disown(struct steer_key k)
{
    CHECK(bpf_map__delete_elem(skel->maps.slip_owned, &k, sizeof(k), 0), ==, 0);
}

/* ---- owned flows without a socket: the redirect falls back to the kernel ---- */

TEST(test_udp_4tuple_no_xsk)
{
    struct steer_key k = key(IPPROTO_UDP, LOCAL, REMOTE, 9000, 40000);
    struct frame f;

    own(k);
    build_l4(&f, IPPROTO_UDP, 40000, 9000, 32);
    struct result r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    /* Same ports, other remote port: not this connection. */
    build_l4(&f, IPPROTO_UDP, 40001, 9000, 32);
    r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    disown(k);
}

TEST(test_tcp_4tuple_no_xsk)
{
    struct steer_key k = key(IPPROTO_TCP, LOCAL, REMOTE, 9001, 40000);
    struct frame f;

    own(k);
    build_l4(&f, IPPROTO_TCP, 40000, 9001, 100);
    struct result r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    /* The protocol is part of the key: UDP to the same ports is not ours. */
    build_l4(&f, IPPROTO_UDP, 40000, 9001, 100);
    r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    disown(k);
}

TEST(test_listen_laddr_lport)
{
    struct steer_key k = key(IPPROTO_TCP, LOCAL, NULL, 8080, 0);
    struct frame f;

    own(k);
    build_l4(&f, IPPROTO_TCP, 51515, 8080, 0);
    struct result r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    disown(k);
    /* Bound to another local address: not ours. */
    k = key(IPPROTO_TCP, "198.18.0.3", NULL, 8080, 0);
    own(k);
    r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    disown(k);
}

TEST(test_wildcard_lport)
{
    struct steer_key k = key(IPPROTO_UDP, NULL, NULL, 5353, 0);
    struct frame f;

    own(k);
    build_l4(&f, IPPROTO_UDP, 12345, 5353, 10);
    struct result r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    disown(k);
    r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
}

/* ---- with a socket in the map the program asks for a redirect ---- */

TEST(test_redirect_with_xsk)
{
    struct steer_key k = key(IPPROTO_UDP, NULL, NULL, 9100, 0);
    uint32_t q = 0;
    struct frame f;
    /* The map accepts any AF_XDP socket, bound or not; BPF_PROG_TEST_RUN without live frames
     * only reports the verdict, so nothing is actually sent to it. */
    int xsk = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);

    CHECK(xsk, >=, 0);
    if (xsk < 0) {
        fprintf(stderr, "socket(AF_XDP): %s\n", strerror(errno));
        return;
    }
    CHECK(bpf_map__update_elem(skel->maps.slip_xsks, &q, sizeof(q), &xsk, sizeof(xsk), BPF_ANY), ==, 0);
    own(k);
    build_l4(&f, IPPROTO_UDP, 1000, 9100, 10);
    struct result r = run(f.b, f.len);
    check_outcome(&r, XDP_REDIRECT, STEER_C_REDIRECTED);
    /* Unowned traffic still goes to the kernel while a socket is there. */
    build_l4(&f, IPPROTO_UDP, 1000, 9101, 10);
    r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    disown(k);
    CHECK(bpf_map__delete_elem(skel->maps.slip_xsks, &q, sizeof(q), 0), ==, 0);
    close(xsk);
}

/* ---- not ours ---- */

TEST(test_unowned)
{
    struct frame f;

    build_l4(&f, IPPROTO_UDP, 1000, 9999, 10);
    struct result r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    build_l4(&f, IPPROTO_TCP, 1000, 9999, 10);
    r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
}

TEST(test_arp)
{
    /* ARP request who-has LOCAL tell REMOTE (RFC 826 layout), padded to the Ethernet minimum. */
    uint8_t b[60] = {};
    size_t n = put_eth(b, ETH_P_ARP);
    static const uint8_t arp[8] = { 0, 1, 8, 0, 6, 4, 0, 1 };
    uint32_t spa = ip4(REMOTE), tpa = ip4(LOCAL);

    memcpy(b + n, arp, 8);
    memcpy(b + n + 14, &spa, 4);
    memcpy(b + n + 24, &tpa, 4);
    struct result r = run(b, sizeof(b));
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
}

TEST(test_icmp_echo)
{
    own(key(IPPROTO_UDP, NULL, NULL, 0, 0));    /* port 0 claimed: an echo must still not match */
    uint8_t icmp[16] = { 8, 0, 0, 0, 0x12, 0x34, 0, 1 };
    struct ip_spec s = { .saddr = ip4(REMOTE), .daddr = ip4(LOCAL), .proto = IPPROTO_ICMP };
    struct frame f;

    build_ip(&f, &s, icmp, sizeof(icmp));
    struct result r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    CHECK(r.d[STEER_C_ICMP_ERR], ==, 0);
    disown(key(IPPROTO_UDP, NULL, NULL, 0, 0));
}

TEST(test_other_ip_proto)
{
    uint8_t gre[8] = {};
    struct ip_spec s = { .saddr = ip4(REMOTE), .daddr = ip4(LOCAL), .proto = 47 };
    struct frame f;

    build_ip(&f, &s, gre, sizeof(gre));
    struct result r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
}

/* ---- malformed: always passed, never dropped ---- */

TEST(test_truncated_eth)
{
    uint8_t b[ETH_HLEN] = {};

    /* BPF_PROG_TEST_RUN refuses frames shorter than an Ethernet header, so the shortest frame
     * we can feed is a bare header announcing IPv4 with nothing after it. */
    put_eth(b, ETH_P_IP);
    struct result r = run(b, sizeof(b));
    check_outcome(&r, XDP_PASS, STEER_C_MALFORMED);
    struct result shorter = run(b, ETH_HLEN - 1);
    fprintf(stderr, "note: a %d-byte frame gives rc=%d (%s)\n", ETH_HLEN - 1, shorter.rc,
            shorter.rc ? strerror(-shorter.rc) : "ran");
    if (shorter.rc == 0)
        check_outcome(&shorter, XDP_PASS, STEER_C_MALFORMED);
}

TEST(test_truncated_ip)
{
    struct frame f;

    build_l4(&f, IPPROTO_UDP, 1, 9000, 0);
    struct result r = run(f.b, ETH_HLEN + 19);
    check_outcome(&r, XDP_PASS, STEER_C_MALFORMED);
}

TEST(test_truncated_udp)
{
    struct steer_key k = key(IPPROTO_UDP, NULL, NULL, 9000, 0);
    struct frame f;

    own(k);
    build_l4(&f, IPPROTO_UDP, 1, 9000, 0);
    /* Total length kept consistent with the cut so only the UDP header is short. */
    f.b[ETH_HLEN + 3] = 20 + 7;
    struct result r = run(f.b, ETH_HLEN + 20 + 7);
    check_outcome(&r, XDP_PASS, STEER_C_MALFORMED);
    disown(k);
}

TEST(test_truncated_tcp)
{
    struct steer_key k = key(IPPROTO_TCP, NULL, NULL, 9001, 0);
    struct frame f;

    own(k);
    build_l4(&f, IPPROTO_TCP, 1, 9001, 0);
    f.b[ETH_HLEN + 3] = 20 + 19;
    struct result r = run(f.b, ETH_HLEN + 20 + 19);
    check_outcome(&r, XDP_PASS, STEER_C_MALFORMED);
    /* A full header with a data offset below 5 words is impossible too. */
    build_l4(&f, IPPROTO_TCP, 1, 9001, 0);
    f.b[ETH_HLEN + 20 + 12] = 4 << 4;
    r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_MALFORMED);
    disown(k);
}

TEST(test_bad_ihl)
{
    struct steer_key k = key(IPPROTO_UDP, NULL, NULL, 9000, 0);
    struct frame f;

    own(k);
    /* IHL 4 (16 bytes) is below the minimum header. */
    build_l4(&f, IPPROTO_UDP, 1, 9000, 8);
    f.b[ETH_HLEN] = 0x44;
    struct result r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_MALFORMED);
    /* IHL 15 (60 bytes) runs past the end of a 20 + 16 byte packet. */
    build_l4(&f, IPPROTO_UDP, 1, 9000, 8);
    f.b[ETH_HLEN] = 0x4f;
    r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_MALFORMED);
    /* Version 6 in an IPv4 ethertype. */
    build_l4(&f, IPPROTO_UDP, 1, 9000, 8);
    f.b[ETH_HLEN] = 0x65;
    r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_MALFORMED);
    disown(k);
}

TEST(test_bad_total_length)
{
    struct steer_key k = key(IPPROTO_UDP, NULL, NULL, 9000, 0);
    struct frame f;

    own(k);
    build_l4(&f, IPPROTO_UDP, 1, 9000, 8);
    put16(f.b + ETH_HLEN + 2, 19);          /* shorter than the header */
    struct result r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_MALFORMED);
    put16(f.b + ETH_HLEN + 2, 1400);        /* longer than the frame */
    r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_MALFORMED);
    /* Ethernet padding after a shorter datagram is fine. */
    build_l4(&f, IPPROTO_UDP, 1, 9000, 0);
    r = run(f.b, 60);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    disown(k);
}

/* ---- IPv4 fragments ---- */

TEST(test_fragments_of_owned_datagram)
{
    struct steer_key k = key(IPPROTO_UDP, NULL, NULL, 9000, 0);
    static uint8_t l4[64];
    struct frame f;

    own(k);
    /* First fragment: offset 0, MF, carries the UDP header of a 48 + 16 byte datagram. */
    size_t n = udp_hdr(l4, 5555, 9000, 56);
    struct ip_spec s = { .saddr = ip4(REMOTE), .daddr = ip4(LOCAL), .proto = IPPROTO_UDP, .id = 0x4242,
                         .frag = IP_MF };
    build_ip(&f, &s, l4, 48);
    struct result r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    CHECK(r.d[STEER_C_FRAG], ==, 1);
    CHECK(n, ==, 64u);
    /* The datagram is remembered with the first fragment's outcome. */
    struct steer_frag_key fk = { .saddr = s.saddr, .daddr = s.daddr, .id = htons(0x4242), .proto = IPPROTO_UDP };
    struct steer_frag_val how = { 0 };
    CHECK(bpf_map__lookup_elem(skel->maps.slip_frags, &fk, sizeof(fk), &how, sizeof(how), 0), ==, 0);
    CHECK(how.outcome, ==, STEER_C_NO_XSK);

    /* Middle fragment (offset 48 = 6 units, MF): follows the first and keeps the entry. */
    s.frag = IP_MF | 6;
    build_ip(&f, &s, l4 + 48, 8);
    r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    CHECK(r.d[STEER_C_FRAG], ==, 1);

    /* Last fragment (offset 56 = 7 units, no MF): follows, and the entry is dropped. */
    s.frag = 7;
    build_ip(&f, &s, l4 + 56, 8);
    r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    CHECK(r.d[STEER_C_FRAG], ==, 1);
    CHECK(bpf_map__lookup_elem(skel->maps.slip_frags, &fk, sizeof(fk), &how, sizeof(how), 0), ==, -ENOENT);

    /* Replaying the last fragment finds nothing any more. */
    r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    CHECK(r.d[STEER_C_FRAG], ==, 0);
    disown(k);
}

TEST(test_fragments_follow_redirect)
{
    struct steer_key k = key(IPPROTO_UDP, NULL, NULL, 9200, 0);
    static uint8_t l4[64];
    uint32_t q = 0;
    struct frame f;
    int xsk = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);

    CHECK(xsk, >=, 0);
    if (xsk < 0)
        return;
    CHECK(bpf_map__update_elem(skel->maps.slip_xsks, &q, sizeof(q), &xsk, sizeof(xsk), BPF_ANY), ==, 0);
    own(k);
    udp_hdr(l4, 5555, 9200, 56);
    struct ip_spec s = { .saddr = ip4(REMOTE), .daddr = ip4(LOCAL), .proto = IPPROTO_UDP, .id = 0x77,
                         .frag = IP_MF };
    build_ip(&f, &s, l4, 48);
    struct result r = run(f.b, f.len);
    check_outcome(&r, XDP_REDIRECT, STEER_C_REDIRECTED);
    CHECK(r.d[STEER_C_FRAG], ==, 1);
    s.frag = 6;
    build_ip(&f, &s, l4 + 48, 16);
    r = run(f.b, f.len);
    check_outcome(&r, XDP_REDIRECT, STEER_C_REDIRECTED);
    CHECK(r.d[STEER_C_FRAG], ==, 1);
    disown(k);
    CHECK(bpf_map__delete_elem(skel->maps.slip_xsks, &q, sizeof(q), 0), ==, 0);
    close(xsk);
}

/* Several stacks on one interface: each owned flow goes to the socket of the stack its map
 * value names (slot stack * STEER_MAX_QUEUES + queue), never to another stack's socket; a
 * stack with no socket on the queue gets nothing (the kernel does), nor does an index out of
 * range. Fragments follow their first fragment to the same stack. */
TEST(test_flows_go_to_their_stack)
{
    struct steer_key k3 = key(IPPROTO_UDP, NULL, NULL, 9400, 0);
    struct steer_key k0 = key(IPPROTO_UDP, NULL, NULL, 9401, 0);
    struct steer_key kbad = key(IPPROTO_UDP, NULL, NULL, 9402, 0);
    static uint8_t l4[64];
    uint32_t slot = 3 * STEER_MAX_QUEUES + 0;
    struct frame f;
    int xsk = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);

    CHECK(xsk, >=, 0);
    if (xsk < 0)
        return;
    CHECK(bpf_map__update_elem(skel->maps.slip_xsks, &slot, sizeof(slot), &xsk, sizeof(xsk), BPF_ANY), ==, 0);
    own_by(k3, 3);
    own_by(k0, 0);
    own_by(kbad, STEER_MAX_STACKS);

    build_l4(&f, IPPROTO_UDP, 5555, 9400, 0);
    struct result r = run(f.b, f.len);
    check_outcome(&r, XDP_REDIRECT, STEER_C_REDIRECTED);
    /* Stack 0 has no socket on queue 0 (stack 3's is not its). */
    build_l4(&f, IPPROTO_UDP, 5555, 9401, 0);
    r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    build_l4(&f, IPPROTO_UDP, 5555, 9402, 0);
    r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);

    /* A fragmented datagram of stack 3's flow: the first fragment records the stack ... */
    udp_hdr(l4, 5555, 9400, 56);
    struct ip_spec s = { .saddr = ip4(REMOTE), .daddr = ip4(LOCAL), .proto = IPPROTO_UDP, .id = 0x78,
                         .frag = IP_MF };
    build_ip(&f, &s, l4, 48);
    r = run(f.b, f.len);
    check_outcome(&r, XDP_REDIRECT, STEER_C_REDIRECTED);
    struct steer_frag_key fk = { .saddr = s.saddr, .daddr = s.daddr, .id = htons(0x78), .proto = IPPROTO_UDP };
    struct steer_frag_val how = { 0 };
    CHECK(bpf_map__lookup_elem(skel->maps.slip_frags, &fk, sizeof(fk), &how, sizeof(how), 0), ==, 0);
    CHECK(how.stack, ==, 3);
    /* ... and the next one follows it there even after the flow changed hands. */
    disown(k3);
    own_by(k3, 0);
    s.frag = 6;
    build_ip(&f, &s, l4 + 48, 16);
    r = run(f.b, f.len);
    check_outcome(&r, XDP_REDIRECT, STEER_C_REDIRECTED);

    disown(k3);
    disown(k0);
    disown(kbad);
    CHECK(bpf_map__delete_elem(skel->maps.slip_xsks, &slot, sizeof(slot), 0), ==, 0);
    close(xsk);
}

/* Sends one TCP segment from REMOTE:sport to LOCAL:dport: 1 when it was redirected (to stack 3,
 * the only one with a socket), 0 when it went to the kernel for want of one, -1 when the
 * program dropped it as a SYN no member may take. */
static int steered(uint16_t sport, uint16_t dport, bool syn)
{
    struct frame f;
    g_tcp_flags = syn ? 0x02 : 0x10;
    build_l4(&f, IPPROTO_TCP, sport, dport, 0);
    g_tcp_flags = 0x18;
    struct result r = run(f.b, f.len);
    CHECK(r.rc, ==, 0);
    CHECK(r.d[STEER_C_REDIRECTED] + r.d[STEER_C_NO_XSK] + r.d[STEER_C_PARKED], ==, 1);
    if (r.d[STEER_C_PARKED]) {
        CHECK(r.verdict, ==, XDP_DROP);
        return -1;
    }
    return r.d[STEER_C_REDIRECTED] == 1;
}

static bool to_stack3(uint16_t sport, uint16_t dport, bool syn)
{
    return steered(sport, dport, syn) == 1;
}

/* A SO_REUSEPORT listen key shared by stacks 3 and 5 (steer_group.c, STEER_F_GROUP): new
 * connections are spread over both, each stays with the stack its SYN went to while that stack
 * is a member, and a worker's copy parks the stack it copies. Stack 5 has no socket, so a
 * segment given to it goes to the kernel (NO_XSK): that tells the two apart. */
TEST(test_reuseport_group_across_stacks)
{
    enum { N = 64, PORT = 9500 };
    struct steer_key k = key(IPPROTO_TCP, NULL, NULL, PORT, 0);
    int fd = bpf_map__fd(skel->maps.slip_owned);
    uint32_t slot = 3 * STEER_MAX_QUEUES + 0;
    int xsk = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);
    bool at3[N];

    CHECK(xsk, >=, 0);
    if (xsk < 0)
        return;
    CHECK(bpf_map__update_elem(skel->maps.slip_xsks, &slot, sizeof(slot), &xsk, sizeof(xsk), BPF_ANY), ==, 0);
    CHECK(steer_map__join(fd, &k, 3, 11, -1), ==, 0);
    CHECK(steer_map__join(fd, &k, 5, 12, -1), ==, 0);
    int n3 = 0;
    for (int i = 0; i < N; i++)
        n3 += at3[i] = to_stack3((uint16_t)(42000 + i), PORT, true);
    /* Both get some (64 flows, an even split expected: each side below 8 is a 1-in-10^10 event). */
    CHECK(n3, >, 8);
    CHECK(n3, <, N - 8);
    /* The same flows' later segments go where their SYN went. */
    for (int i = 0; i < N; i++)
        CHECK(to_stack3((uint16_t)(42000 + i), PORT, false), ==, at3[i]);

    /* Stack 5 becomes a worker's copy of stack 3's listener: 3 is parked (new flows to 5), but
     * the connections pinned to 3 stay there. */
    CHECK(steer_map__leave(fd, &k, 5), ==, 0);
    CHECK(steer_map__join(fd, &k, 5, 13, 3), ==, 0);
    for (int i = 0; i < 16; i++)
        CHECK(to_stack3((uint16_t)(43000 + i), PORT, true), ==, false);
    for (int i = 0; i < N; i++)
        if (at3[i])
            CHECK(to_stack3((uint16_t)(42000 + i), PORT, false), ==, true);
    /* The copy leaves (its worker died): 3 stays parked, nothing of it accepting on the listener.
     * New SYNs are dropped (the peer's next SYN finds the next copy); later segments of every
     * flow go to 3, stack 5's pinned ones included (5 is no member: 3 answers them). */
    CHECK(steer_map__leave(fd, &k, 5), ==, 0);
    for (int i = 0; i < 16; i++)
        CHECK(steered((uint16_t)(44000 + i), PORT, true), ==, -1);
    for (int i = 0; i < N; i++)
        CHECK(to_stack3((uint16_t)(42000 + i), PORT, false), ==, true);
    /* A new copy takes the SYNs; when a process of 3 uses its listener, 3 takes them again. */
    CHECK(steer_map__join(fd, &k, 5, 14, 3), ==, 0);
    for (int i = 0; i < 16; i++)
        CHECK(steered((uint16_t)(44000 + i), PORT, true), ==, 0);
    CHECK(steer_map__leave(fd, &k, 5), ==, 0);
    CHECK(steer_map__unpark(fd, &k, 3), ==, 1);
    for (int i = 0; i < 16; i++)
        CHECK(steered((uint16_t)(45000 + i), PORT, true), ==, 1);

    /* A dead stack 3 is forgotten: the key goes with its last member. */
    CHECK(steer_map__forget_stack(fd, 3), ==, 1);
    struct steer_val v;
    CHECK(bpf_map__lookup_elem(skel->maps.slip_owned, &k, sizeof(k), &v, sizeof(v), 0), !=, 0);
    CHECK(bpf_map__delete_elem(skel->maps.slip_xsks, &slot, sizeof(slot), 0), ==, 0);
    close(xsk);
}

/* The member set's edits without the program. */
TEST(test_reuseport_group_values)
{
    struct steer_val v;
    memset(&v, 0xa5, sizeof(v));
    steer_val__join(&v, false, 2, 1, -1, 77);
    CHECK(v.flags, ==, STEER_F_GROUP);
    CHECK(v.members, ==, 1u << 2);
    CHECK(v.stack, ==, 2);
    CHECK(v.seed, ==, 77);
    steer_val__join(&v, true, 4, 1, 2, 0);       /* 4 copies 2's listener */
    steer_val__join(&v, true, 6, 1, 2, 0);       /* and 6 too */
    CHECK(v.members, ==, (1u << 2) | (1u << 4) | (1u << 6));
    CHECK(v.parked, ==, 1u << 2);
    CHECK(v.stack, ==, 4);
    CHECK(steer_val__leave(&v, 4), ==, true);
    CHECK(v.parked, ==, 1u << 2);               /* 6 still copies it */
    CHECK(v.stack, ==, 6);
    CHECK(steer_val__leave(&v, 6), ==, true);
    CHECK(v.parked, ==, 1u << 2);               /* until 2 uses its listener */
    CHECK(v.stack, ==, 2);
    steer_val__unpark(&v, 2);
    CHECK(v.parked, ==, 0);
    /* A copy of a stack that is no member parks nothing. */
    steer_val__join(&v, true, 9, 1, 7, 0);
    CHECK(v.parked, ==, 0);
    CHECK(v.origin[9], ==, 0);
    CHECK(steer_val__leave(&v, 2), ==, true);
    CHECK(v.stack, ==, 9);
    CHECK(steer_val__leave(&v, 9), ==, false);
    /* A plain value (a stack gone without leaving) is replaced, not merged. */
    struct steer_val plain = { .stack = 1, .pid = 5 };
    steer_val__join(&plain, true, 3, 1, -1, 5);
    CHECK(plain.members, ==, 1u << 3);
}

TEST(test_fragment_of_unknown_datagram)
{
    uint8_t data[16] = {};
    struct ip_spec s = { .saddr = ip4(REMOTE), .daddr = ip4(LOCAL), .proto = IPPROTO_UDP, .id = 0x9999,
                         .frag = 100 };
    struct frame f;

    build_ip(&f, &s, data, sizeof(data));
    struct result r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    CHECK(r.d[STEER_C_FRAG], ==, 0);
}

TEST(test_first_fragment_of_unowned_datagram)
{
    static uint8_t l4[64];
    struct frame f;

    udp_hdr(l4, 5555, 9300, 56);
    struct ip_spec s = { .saddr = ip4(REMOTE), .daddr = ip4(LOCAL), .proto = IPPROTO_UDP, .id = 0x55,
                         .frag = IP_MF };
    build_ip(&f, &s, l4, 48);
    struct result r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    CHECK(r.d[STEER_C_FRAG], ==, 0);
    s.frag = 6;
    build_ip(&f, &s, l4 + 48, 16);
    r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    CHECK(r.d[STEER_C_FRAG], ==, 0);
}

/* ---- ICMP errors quoting our flows ---- */

/* An ICMP error from REMOTE to LOCAL quoting a datagram LOCAL:lport -> REMOTE:rport. */
static void build_icmp_error(struct frame *f, uint8_t type, uint8_t code, uint8_t proto, uint16_t lport,
                             uint16_t rport, size_t quoted_l4)
{
    uint8_t msg[8 + 20 + 8] = { type, code };
    uint8_t *in = msg + 8;
    uint32_t l = ip4(LOCAL), r = ip4(REMOTE);
    struct ip_spec s = { .saddr = r, .daddr = l, .proto = IPPROTO_ICMP };

    in[0] = 0x45;
    put16(in + 2, 20 + 8 + 100);           /* the original was longer; only 8 bytes are quoted */
    in[8] = 64;
    in[9] = proto;
    memcpy(in + 12, &l, 4);
    memcpy(in + 16, &r, 4);
    put16(in + 20, lport);
    put16(in + 22, rport);
    build_ip(f, &s, msg, 8 + 20 + quoted_l4);
}

/* A stack joining a group takes the index of a dead one: the flows the dead one left go first
 * (more than one batch of the walk), and nobody else's. */
TEST(test_forget_stack_deletes_only_that_stacks_flows)
{
    enum { N = 300 };
    for (unsigned i = 0; i < N; i++) {
        own_by(key(IPPROTO_TCP, NULL, NULL, (uint16_t)(20000 + i), 0), 5);
        if (i % 10 == 0)
            own_by(key(IPPROTO_TCP, NULL, NULL, (uint16_t)(30000 + i), 0), 2);
    }
    CHECK(steer_map__forget_stack(bpf_map__fd(skel->maps.slip_owned), 5), ==, N);
    struct steer_val v;
    for (unsigned i = 0; i < N; i++) {
        struct steer_key k5 = key(IPPROTO_TCP, NULL, NULL, (uint16_t)(20000 + i), 0);
        CHECK(bpf_map__lookup_elem(skel->maps.slip_owned, &k5, sizeof(k5), &v, sizeof(v), 0), !=, 0);
        if (i % 10 == 0) {
            struct steer_key k2 = key(IPPROTO_TCP, NULL, NULL, (uint16_t)(30000 + i), 0);
            CHECK(bpf_map__lookup_elem(skel->maps.slip_owned, &k2, sizeof(k2), &v, sizeof(v), 0), ==, 0);
            CHECK(v.stack, ==, 2);
            disown(k2);
        }
    }
    CHECK(steer_map__forget_stack(bpf_map__fd(skel->maps.slip_owned), 5), ==, 0);
}

TEST(test_icmp_port_unreachable_owned)
{
    struct steer_key k = key(IPPROTO_UDP, LOCAL, REMOTE, 9000, 7777);
    struct frame f;

    own(k);
    build_icmp_error(&f, 3, 3, IPPROTO_UDP, 9000, 7777, 8);
    struct result r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    CHECK(r.d[STEER_C_ICMP_ERR], ==, 1);
    /* Time exceeded (11) and parameter problem (12) are errors too. */
    build_icmp_error(&f, 11, 0, IPPROTO_UDP, 9000, 7777, 8);
    r = run(f.b, f.len);
    CHECK(r.d[STEER_C_ICMP_ERR], ==, 1);
    build_icmp_error(&f, 12, 0, IPPROTO_UDP, 9000, 7777, 8);
    r = run(f.b, f.len);
    CHECK(r.d[STEER_C_ICMP_ERR], ==, 1);
    /* Quoting another flow: the kernel's. */
    build_icmp_error(&f, 3, 3, IPPROTO_UDP, 9001, 7777, 8);
    r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    CHECK(r.d[STEER_C_ICMP_ERR], ==, 0);
    /* The quote is read as sent by us: the reverse direction does not match. */
    build_icmp_error(&f, 3, 3, IPPROTO_UDP, 7777, 9000, 8);
    r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    /* Fewer than 8 quoted bytes: cannot read the ports. */
    build_icmp_error(&f, 3, 3, IPPROTO_UDP, 9000, 7777, 4);
    r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_MALFORMED);
    disown(k);
}

TEST(test_icmp_error_listen_tcp)
{
    struct steer_key k = key(IPPROTO_TCP, NULL, NULL, 8443, 0);
    struct frame f;

    own(k);
    /* Only 8 bytes of the TCP header are quoted: ports are enough. */
    build_icmp_error(&f, 3, 4, IPPROTO_TCP, 8443, 33000, 8);
    struct result r = run(f.b, f.len);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    CHECK(r.d[STEER_C_ICMP_ERR], ==, 1);
    disown(k);
}

/* ---- multi-buffer frames (XDP frags) ---- */

TEST(test_multibuf_owned)
{
    struct steer_key k = key(IPPROTO_UDP, NULL, NULL, 9400, 0);
    static struct frame f;

    own(k);
    /* Larger than a page: BPF_PROG_TEST_RUN puts the tail in fragments for an xdp.frags program. */
    build_l4(&f, IPPROTO_UDP, 1, 9400, 5000);
    struct result r = run(f.b, f.len);
    if (r.rc) {
        fprintf(stderr, "BPF_PROG_TEST_RUN with a %zu-byte (multi-buffer) frame: %s\n", f.len, strerror(-r.rc));
        CHECK(r.rc, ==, 0);
    } else {
        check_outcome(&r, XDP_PASS, STEER_C_MULTIBUF);
    }
    build_l4(&f, IPPROTO_UDP, 1, 9401, 5000);
    r = run(f.b, f.len);
    if (!r.rc)
        check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    disown(k);
}

int main(int argc, char **argv)
{
    int rc;

    if (geteuid() != 0) {
        printf("SKIP: needs root (CAP_BPF) to load and test-run the XDP program\n");
        return 77;
    }
    /* A kernel without BPF is a skip; a program the verifier rejects is a failure. */
    rc = libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_XDP, NULL);
    if (rc <= 0) {
        printf("SKIP: this kernel cannot load XDP programs: %s\n", rc ? strerror(-rc) : "not supported");
        return 77;
    }
    skel = slip_steer__open_and_load();
    if (!skel) {
        fprintf(stderr, "cannot load the XDP steering program: %s\n", strerror(errno));
        return 1;
    }
    rc = slip_test_main(argc, argv);
    slip_steer__destroy(skel);
    return rc;
}
