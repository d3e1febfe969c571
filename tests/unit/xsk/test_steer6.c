/* The XDP steering program (bpf/steer.bpf.c) on IPv6 frames, with BPF_PROG_TEST_RUN as
 * test_steer.c does for IPv4: owned flows in slip_owned6 (4-tuple, address+port, any address),
 * extension headers walked and bounded, fragments following their first, ICMPv6 errors quoting
 * an owned flow, and neighbour discovery, router advertisements, MLD and echo always the
 * kernel's. Frames are built field by field from the RFC 8200 / RFC 4443 layouts; checksums are
 * left zero because the program never reads them. Needs root (CAP_BPF); exits 77 (skip) with a
 * reason when BPF is not available. */
#include <errno.h>
#include <arpa/inet.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "tests/unit/check.h"
#include "bpf/steer.h"
#include "bpf/steer.skel.h"

static struct slip_steer *skel;

#define LOCAL6  "2001:db8::2"
#define REMOTE6 "2001:db8::1"
#define NH_HOP 0
#define NH_FRAG 44
#define NH_DST 60
#define NH_ICMPV6 58

static void ip6(const char *s, uint8_t out[16])
{
    inet_pton(AF_INET6, s, out);
}

struct frame {
    uint8_t b[4096];
    size_t len;
};

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = v >> 8;
    p[1] = v & 0xff;
}

/* eth (0x86dd) + IPv6 from src to dst with first next header nh, then body (extension headers
 * and upper layer, laid out by the caller). plen < 0: the payload length is body's. */
static void build6(struct frame *f, const char *src, const char *dst, uint8_t nh, const uint8_t *body, size_t n,
                   int plen)
{
    static const uint8_t mac[12] = { 0xaa, 0xbb, 0xcc, 0, 0, 2, 0xaa, 0xbb, 0xcc, 0, 0, 1 };
    memset(f->b, 0, sizeof(f->b));
    memcpy(f->b, mac, 12);
    put16(f->b + 12, 0x86dd);
    uint8_t *h = f->b + ETH_HLEN;
    h[0] = 0x60;
    put16(h + 4, (uint16_t)(plen >= 0 ? plen : (int)n));
    h[6] = nh;
    h[7] = 64;
    ip6(src, h + 8);
    ip6(dst, h + 24);
    memcpy(h + 40, body, n);
    f->len = ETH_HLEN + 40 + n;
}

static size_t udp(uint8_t *p, uint16_t sport, uint16_t dport, size_t payload)
{
    put16(p, sport);
    put16(p + 2, dport);
    put16(p + 4, (uint16_t)(8 + payload));
    memset(p + 8, 'u', payload);
    return 8 + payload;
}

static size_t tcp(uint8_t *p, uint16_t sport, uint16_t dport)
{
    memset(p, 0, 20);
    put16(p, sport);
    put16(p + 2, dport);
    p[12] = 5 << 4;
    p[13] = 0x10;
    return 20;
}

struct result {
    int rc;
    uint32_t verdict;
    uint64_t d[STEER_C__MAX];
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

static struct result run(const struct frame *f)
{
    uint64_t before[STEER_C__MAX], after[STEER_C__MAX];
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = f->b, .data_size_in = (uint32_t)f->len, .repeat = 1);
    struct result r = {};

    read_counters(before);
    r.rc = bpf_prog_test_run_opts(bpf_program__fd(skel->progs.slip_steer), &opts);
    if (r.rc)
        r.rc = -errno;
    r.verdict = opts.retval;
    read_counters(after);
    for (int i = 0; i < STEER_C__MAX; i++)
        r.d[i] = after[i] - before[i];
    return r;
}

static void check_outcome(const struct result *r, uint32_t verdict, enum steer_counter outcome)
{
    CHECK(r->rc, ==, 0);
    CHECK(r->verdict, ==, verdict);
    CHECK(r->d[STEER_C_RX], ==, 1);
    CHECK(r->d[outcome], ==, 1);
    CHECK(r->d[STEER_C_REDIRECTED] + r->d[STEER_C_PASSED] + r->d[STEER_C_MALFORMED] + r->d[STEER_C_NO_XSK] +
          r->d[STEER_C_MULTIBUF], ==, 1);
}

static struct steer_key6 key6(uint8_t proto, const char *laddr, const char *raddr, uint16_t lport, uint16_t rport)
{
    struct steer_key6 k = { .lport = htons(lport), .rport = htons(rport), .proto = proto };
    if (laddr)
        ip6(laddr, k.laddr);
    if (raddr)
        ip6(raddr, k.raddr);
    return k;
}

static void own(struct steer_key6 k)
{
    struct steer_val v = { .stack = 0, .pid = 7 };
    CHECK(bpf_map__update_elem(skel->maps.slip_owned6, &k, sizeof(k), &v, sizeof(v), BPF_ANY), ==, 0);
}

static void disown(struct steer_key6 k)
{
    CHECK(bpf_map__delete_elem(skel->maps.slip_owned6, &k, sizeof(k), 0), ==, 0);
}

TEST(test_v6_owned_keys)
{
    uint8_t b[64];
    struct frame f;
    struct steer_key6 any = key6(IPPROTO_UDP, NULL, NULL, 9000, 0);
    struct steer_key6 addr = key6(IPPROTO_UDP, LOCAL6, NULL, 9000, 0);
    struct steer_key6 tuple = key6(IPPROTO_TCP, LOCAL6, REMOTE6, 9001, 40000);

    build6(&f, REMOTE6, LOCAL6, IPPROTO_UDP, b, udp(b, 40000, 9000, 10), -1);
    struct result r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    own(any);
    r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    disown(any);
    own(addr);
    r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    disown(addr);
    /* bound to another address */
    addr = key6(IPPROTO_UDP, "2001:db8::3", NULL, 9000, 0);
    own(addr);
    r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    disown(addr);
    own(tuple);
    build6(&f, REMOTE6, LOCAL6, IPPROTO_TCP, b, tcp(b, 40000, 9001), -1);
    r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    build6(&f, REMOTE6, LOCAL6, IPPROTO_TCP, b, tcp(b, 40001, 9001), -1);
    r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    disown(tuple);
}

TEST(test_v6_redirect_with_xsk)
{
    struct steer_key6 k = key6(IPPROTO_UDP, NULL, NULL, 9100, 0);
    uint8_t b[64];
    uint32_t q = 0;
    struct frame f;
    int xsk = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);

    CHECK(xsk, >=, 0);
    if (xsk < 0)
        return;
    CHECK(bpf_map__update_elem(skel->maps.slip_xsks, &q, sizeof(q), &xsk, sizeof(xsk), BPF_ANY), ==, 0);
    own(k);
    build6(&f, REMOTE6, LOCAL6, IPPROTO_UDP, b, udp(b, 1000, 9100, 10), -1);
    struct result r = run(&f);
    check_outcome(&r, XDP_REDIRECT, STEER_C_REDIRECTED);
    disown(k);
    CHECK(bpf_map__delete_elem(skel->maps.slip_xsks, &q, sizeof(q), 0), ==, 0);
    close(xsk);
}

TEST(test_v6_extension_headers)
{
    struct steer_key6 k = key6(IPPROTO_UDP, NULL, NULL, 9200, 0);
    uint8_t b[256];
    struct frame f;

    own(k);
    /* hop-by-hop (8), destination options (16), AH ((4 + 2) * 4 = 24), then UDP */
    memset(b, 0, sizeof(b));
    b[0] = NH_DST;
    b[8] = 51, b[9] = 1;
    b[24] = IPPROTO_UDP, b[25] = 4;
    size_t n = 48 + udp(b + 48, 1, 9200, 4);
    build6(&f, REMOTE6, LOCAL6, NH_HOP, b, n, -1);
    struct result r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    /* a length that runs past the frame */
    b[9] = 200;
    build6(&f, REMOTE6, LOCAL6, NH_HOP, b, n, -1);
    r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_MALFORMED);
    /* STEER_IPV6_MAX_EXT destination options headers, then UDP: walked; one more: refused */
    memset(b, 0, sizeof(b));
    for (int i = 0; i < STEER_IPV6_MAX_EXT; i++)
        b[8 * i] = NH_DST;
    b[8 * (STEER_IPV6_MAX_EXT - 1)] = IPPROTO_UDP;
    n = 8 * STEER_IPV6_MAX_EXT + udp(b + 8 * STEER_IPV6_MAX_EXT, 1, 9200, 4);
    build6(&f, REMOTE6, LOCAL6, NH_DST, b, n, -1);
    r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    b[8 * (STEER_IPV6_MAX_EXT - 1)] = NH_DST;
    b[8 * STEER_IPV6_MAX_EXT] = IPPROTO_UDP;
    n = 8 * (STEER_IPV6_MAX_EXT + 1) + udp(b + 8 * (STEER_IPV6_MAX_EXT + 1), 1, 9200, 4);
    build6(&f, REMOTE6, LOCAL6, NH_DST, b, n, -1);
    r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_MALFORMED);
    disown(k);
}

TEST(test_v6_malformed)
{
    uint8_t b[64];
    struct frame f;
    struct steer_key6 k = key6(IPPROTO_UDP, NULL, NULL, 9300, 0);

    own(k);
    size_t n = udp(b, 1, 9300, 10);
    build6(&f, REMOTE6, LOCAL6, IPPROTO_UDP, b, n, (int)n + 1);   /* payload past the frame */
    struct result r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_MALFORMED);
    build6(&f, REMOTE6, LOCAL6, IPPROTO_UDP, b, n, -1);
    f.b[ETH_HLEN] = 0x40;                                          /* version 4 */
    r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_MALFORMED);
    build6(&f, REMOTE6, LOCAL6, IPPROTO_UDP, b, n, -1);
    f.len = ETH_HLEN + 30;                                         /* cut inside the header */
    r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_MALFORMED);
    build6(&f, REMOTE6, LOCAL6, IPPROTO_UDP, b, 4, 4);             /* cut inside UDP */
    r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_MALFORMED);
    disown(k);
}

TEST(test_v6_kernel_control_traffic)
{
    /* Every port owned, and still: neighbour solicitation (135) and advertisement (136), router
     * solicitation (133) and advertisement (134), MLDv2 report (143), echo (128) go to the kernel. */
    struct steer_key6 k = key6(NH_ICMPV6, NULL, NULL, 0, 0);
    static const uint8_t types[] = { 133, 134, 135, 136, 143, 128, 129 };
    uint8_t b[64] = { 0 };
    struct frame f;

    own(k);
    for (size_t i = 0; i < sizeof(types); i++) {
        b[0] = types[i];
        build6(&f, "fe80::1", "ff02::1:ff00:2", NH_ICMPV6, b, 32, -1);
        struct result r = run(&f);
        check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    }
    /* MLD behind a hop-by-hop header with router alert (RFC 3810 §5) */
    memset(b, 0, sizeof(b));
    b[0] = NH_ICMPV6;
    b[2] = 5, b[3] = 2;
    b[8] = 143;
    build6(&f, "fe80::1", "ff02::16", NH_HOP, b, 8 + 28, -1);
    struct result r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    disown(k);
}

/* ICMPv6 error type/code quoting a packet we sent from LOCAL6:lport to REMOTE6:rport; frag: the
 * quote has a (first or later) fragment header. */
static void build_icmpv6_error(struct frame *f, uint8_t type, uint8_t proto, uint16_t lport, uint16_t rport,
                               int frag_offset, size_t quoted_l4)
{
    uint8_t b[256];
    memset(b, 0, sizeof(b));
    b[0] = type;
    if (type == 2)
        put16(b + 6, 1280);
    uint8_t *in = b + 8;
    in[0] = 0x60;
    in[6] = frag_offset >= 0 ? NH_FRAG : proto;
    in[7] = 64;
    ip6(LOCAL6, in + 8);
    ip6(REMOTE6, in + 24);
    uint8_t *l4 = in + 40;
    if (frag_offset >= 0) {
        l4[0] = proto;
        put16(l4 + 2, (uint16_t)(frag_offset | 1));
        l4 += 8;
    }
    put16(l4, lport);
    put16(l4 + 2, rport);
    size_t n = (size_t)(l4 - b) + quoted_l4;
    put16(in + 4, (uint16_t)(n - 48 + 100));     /* the quoted packet was longer than its quote */
    build6(f, REMOTE6, LOCAL6, NH_ICMPV6, b, n, -1);
}

TEST(test_v6_icmp_errors)
{
    struct steer_key6 k = key6(IPPROTO_TCP, LOCAL6, REMOTE6, 443, 40000);
    struct frame f;

    own(k);
    for (uint8_t type = 1; type <= 4; type++) {
        build_icmpv6_error(&f, type, IPPROTO_TCP, 443, 40000, -1, 8);
        struct result r = run(&f);
        check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
        CHECK(r.d[STEER_C_ICMP_ERR], ==, 1);
    }
    /* the reverse direction, another flow: the kernel's */
    build_icmpv6_error(&f, 2, IPPROTO_TCP, 40000, 443, -1, 8);
    struct result r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    CHECK(r.d[STEER_C_ICMP_ERR], ==, 0);
    /* fewer than 8 bytes of the transport header */
    build_icmpv6_error(&f, 2, IPPROTO_TCP, 443, 40000, -1, 4);
    r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_MALFORMED);
    disown(k);
    /* a UDP first fragment quoted (our own fragmented datagram), and a later one (no ports) */
    k = key6(IPPROTO_UDP, NULL, NULL, 5353, 0);
    own(k);
    build_icmpv6_error(&f, 2, IPPROTO_UDP, 5353, 7, 0, 8);
    r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    CHECK(r.d[STEER_C_ICMP_ERR], ==, 1);
    build_icmpv6_error(&f, 2, IPPROTO_UDP, 5353, 7, 1232, 8);
    r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    disown(k);
}

TEST(test_v6_fragments)
{
    struct steer_key6 k = key6(IPPROTO_UDP, NULL, NULL, 9400, 0);
    uint8_t b[128];
    struct frame f;

    own(k);
    /* first fragment: offset 0, M, id 0x01020304 */
    memset(b, 0, sizeof(b));
    b[0] = IPPROTO_UDP;
    b[3] = 1;
    b[4] = 1, b[5] = 2, b[6] = 3, b[7] = 4;
    size_t n = 8 + udp(b + 8, 5555, 9400, 40);
    build6(&f, REMOTE6, LOCAL6, NH_FRAG, b, n, -1);
    struct result r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    CHECK(r.d[STEER_C_FRAG], ==, 1);
    struct steer_frag6_key fk = { .id = htonl(0x01020304) };
    ip6(REMOTE6, fk.saddr);
    ip6(LOCAL6, fk.daddr);
    struct steer_frag_val how = { 0 };
    CHECK(bpf_map__lookup_elem(skel->maps.slip_frags6, &fk, sizeof(fk), &how, sizeof(how), 0), ==, 0);
    CHECK(how.outcome, ==, STEER_C_NO_XSK);
    /* middle (offset 48, M): follows; its data looks like nothing in particular */
    put16(b + 2, 48 | 1);
    memset(b + 8, 0xee, 48);
    build6(&f, REMOTE6, LOCAL6, NH_FRAG, b, 8 + 48, -1);
    r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    CHECK(r.d[STEER_C_FRAG], ==, 1);
    /* last (offset 96, M clear): follows and forgets the datagram */
    put16(b + 2, 96);
    build6(&f, REMOTE6, LOCAL6, NH_FRAG, b, 8 + 8, -1);
    r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    CHECK(bpf_map__lookup_elem(skel->maps.slip_frags6, &fk, sizeof(fk), &how, sizeof(how), 0), ==, -ENOENT);
    r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    /* an atomic fragment (offset 0, M clear) is a whole datagram: owned, no fragment entry */
    put16(b + 2, 0);
    n = 8 + udp(b + 8, 5555, 9400, 4);
    build6(&f, REMOTE6, LOCAL6, NH_FRAG, b, n, -1);
    r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_NO_XSK);
    CHECK(r.d[STEER_C_FRAG], ==, 0);
    disown(k);
}

TEST(test_v4_and_v6_keys_apart)
{
    /* an IPv4 claim does not take IPv6 traffic to the same port, nor the reverse */
    struct steer_key k4 = { .lport = htons(9500), .proto = IPPROTO_UDP };
    struct steer_val v = { .stack = 0, .pid = 1 };
    uint8_t b[64];
    struct frame f;

    CHECK(bpf_map__update_elem(skel->maps.slip_owned, &k4, sizeof(k4), &v, sizeof(v), BPF_ANY), ==, 0);
    build6(&f, REMOTE6, LOCAL6, IPPROTO_UDP, b, udp(b, 1, 9500, 4), -1);
    struct result r = run(&f);
    check_outcome(&r, XDP_PASS, STEER_C_PASSED);
    CHECK(bpf_map__delete_elem(skel->maps.slip_owned, &k4, sizeof(k4), 0), ==, 0);
}

int main(int argc, char **argv)
{
    int rc;

    if (geteuid() != 0) {
        printf("SKIP: needs root (CAP_BPF) to load and test-run the XDP program\n");
        return 77;
    }
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
