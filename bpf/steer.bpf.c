/* XDP steering program: claims the TCP/UDP flows the user-space stacks own (maps slip_owned for
 * IPv4, slip_owned6 for IPv6) and redirects each to the AF_XDP socket of its owning stack on the
 * receiving queue; every other frame (ARP, neighbour discovery, router advertisements, MLD, echo
 * ...), and every frame it cannot parse, goes to the kernel untouched (XDP_PASS). Never drops. */
#include <stdbool.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "bpf/steer.h"

/* Map names carry the slip_ prefix so `bpftool map show` finds them without ambiguity. */
struct {
    __uint(type, BPF_MAP_TYPE_XSKMAP);
    __uint(max_entries, STEER_XSK_SLOTS);
    __type(key, __u32);
    __type(value, __u32);
} slip_xsks SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, STEER_MAX_FLOWS);
    __type(key, struct steer_key);
    __type(value, struct steer_val);
} slip_owned SEC(".maps");

/* Value: the outcome counter of the datagram's first fragment and its stack, so later fragments
 * follow it (to the same stack's socket, or to the kernel when the first one went there). LRU:
 * a datagram whose last fragment never comes must not pin an entry forever. */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, STEER_MAX_FRAGS);
    __type(key, struct steer_frag_key);
    __type(value, struct steer_frag_val);
} slip_frags SEC(".maps");

/* Every frame counts RX and exactly one outcome: REDIRECTED, PASSED, MALFORMED, NO_XSK or MULTIBUF,
 * so RX is their sum. FRAG and ICMP_ERR count owned fragments and ICMP errors on top of the outcome,
 * whether they reached a socket or fell back to the kernel. */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, STEER_C__MAX);
    __type(key, __u32);
    __type(value, __u64);
} slip_counters SEC(".maps");

/* IPv6 owned flows and fragments, as slip_owned and slip_frags (bpf/steer.h). Nothing in user
 * space claims IPv6 flows yet: with the map empty every IPv6 frame is the kernel's. */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, STEER_MAX_FLOWS);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, struct steer_key6);
    __type(value, struct steer_val);
} slip_owned6 SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, STEER_MAX_FRAGS);
    __type(key, struct steer_frag6_key);
    __type(value, struct steer_frag_val);
} slip_frags6 SEC(".maps");

/* The member a TCP SYN to a SO_REUSEPORT group was given to, by 4-tuple seen from the stack
 * (steer.h, STEER_F_GROUP). Written here only; user space never needs them. */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, STEER_MAX_PINS);
    __type(key, struct steer_key);
    __type(value, __u32);
} slip_pins SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, STEER_MAX_PINS);
    __type(key, struct steer_key6);
    __type(value, __u32);
} slip_pins6 SEC(".maps");

#define IP_MF     0x2000
#define IP_OFFSET 0x1fff

/* The ICMP header, RFC 792. Not from <linux/icmp.h>: that one includes linux/if.h and so the C
 * library's sys/socket.h, which a BPF object must never need (see bpf/include/asm/types.h). */
struct steer_icmphdr {
    __u8 type;
    __u8 code;
    __sum16 checksum;
    __be32 rest;                /* unused by errors, or the pointer/MTU of some */
};

_Static_assert(sizeof(struct steer_icmphdr) == 8, "RFC 792: an ICMP header is 8 bytes");

#define STEER_ICMP_DEST_UNREACH   3
#define STEER_ICMP_TIME_EXCEEDED  11
#define STEER_ICMP_PARAMETERPROB  12

/* A parsing cursor: every read goes through cur_pull(), which checks the bound first, so the
 * verifier sees a data_end comparison before each access. */
struct cursor {
    void *pos;
    void *end;
};

static __always_inline void *cur_pull(struct cursor *c, __u32 len)
{
    void *p = c->pos;

    if (p + len > c->end)
        return NULL;
    c->pos = p + len;
    return p;
}

static __always_inline void count(__u32 idx)
{
    __u64 *v = bpf_map_lookup_elem(&slip_counters, &idx);

    if (v)
        *v += 1;
}

static __always_inline int pass(__u32 why)
{
    count(why);
    return XDP_PASS;
}

/* What the parser found in one IPv4 packet (addresses and ports in network order). */
struct flow {
    __u32 saddr;
    __u32 daddr;
    __u16 sport;
    __u16 dport;
    __u8 proto;
};

/* A 32-bit mixer (good avalanche, a few instructions): the member pick must spread flows evenly
 * and, keyed with the group's seed, not be steerable by a remote host choosing its ports. */
static __always_inline __u32 mix32(__u32 h)
{
    h ^= h >> 16;
    h *= 0x7feb352d;
    h ^= h >> 15;
    h *= 0x846ca68b;
    h ^= h >> 16;
    return h;
}

/* Set bits of a 16-bit word, without a branch (the verifier walks every branch of every
 * caller: a loop with tests here made the program too long to verify). */
static __always_inline __u32 popcount16(__u32 x)
{
    x &= 0xffff;
    x = x - ((x >> 1) & 0x5555);
    x = (x & 0x3333) + ((x >> 2) & 0x3333);
    x = (x + (x >> 4)) & 0x0f0f;
    return (x + (x >> 8)) & 0x1f;
}

/* The member of a SO_REUSEPORT group (STEER_F_GROUP) that gets a new flow with this hash: the
 * hash's rank among the members that are not parked, found by clearing that many lowest bits. */
static __always_inline int group_pick(const struct steer_val *v, __u32 hash)
{
    __u32 elig = v->members & ~v->parked & 0xffff;
    __u32 n = popcount16(elig), k;

    if (n == 0)
        return v->stack < STEER_MAX_STACKS ? v->stack : STEER_MAX_STACKS;
    k = hash % n;
    for (__u32 j = 0; j < STEER_MAX_STACKS - 1; j++) {
        __u32 before = (__u32)((__s32)(j - k) >> 31);      /* all ones while j < k */

        elig &= ~(elig & -elig & before);
    }
    return (int)popcount16((elig & -elig) - 1);
}

/* What owned_lookup returns for a SYN no member may take: the frame is dropped (counted). */
#define STEER_DROP_SYN (STEER_MAX_STACKS + 1)

/* A flow that hit a group's listen key: a SYN (syn > 0) is given a member and pinned to it; a
 * later TCP segment goes where its SYN went while that stack is a member (syn == 0, or < 0 for
 * an ICMP error's quote, which never pins); UDP goes by the hash each time. A SYN when every
 * member is parked (a worker's copy died and nothing of the origin's stack accepts on its
 * listener, steer_group.c) is dropped: the peer sends it again (after 1 s, 3 s, ...) and reaches
 * the next copy, where a handshake completed by the origin would wait in a queue nobody reads. */
static __always_inline int group_member(const struct steer_val *v, const void *pin_map, const void *pin_key,
                                        __u32 hash, __u8 proto, int syn)
{
    __u32 only = v->members & ~v->parked;

    if (proto == IPPROTO_TCP && syn > 0 && !(only & 0xffff) && (v->members & 0xffff))
        return STEER_DROP_SYN;

    if (proto == IPPROTO_TCP && syn <= 0 && (v->members & (v->members - 1))) {
        __u32 *pin = bpf_map_lookup_elem((void *)pin_map, pin_key);

        if (pin && *pin < STEER_MAX_STACKS && ((v->members >> *pin) & 1))
            return *pin;
    }
    /* One member takes everything; its SYNs are pinned all the same, for when others join. */
    int m = (only && !(only & (only - 1))) ? v->stack : group_pick(v, hash);

    if (proto == IPPROTO_TCP && syn > 0 && m < STEER_MAX_STACKS) {
        __u32 pv = m;

        bpf_map_update_elem((void *)pin_map, pin_key, &pv, BPF_ANY);
    }
    return m < STEER_MAX_STACKS ? m : STEER_MAX_STACKS;
}

/* The index of the stack that owns the flow, or -1 when none does. syn: 1 for a TCP SYN without
 * ACK, 0 for other segments and datagrams, -1 for a flow quoted by an ICMP error. */
static __always_inline int owned_lookup(__u32 laddr, __u32 raddr, __u16 lport, __u16 rport, __u8 proto, int syn)
{
    struct steer_key k = {
        .laddr = laddr, .raddr = raddr, .lport = lport, .rport = rport, .proto = proto,
    };
    struct steer_val *v;

    /* Most specific first: a connected socket, then a socket bound to this address, then a
     * socket bound to every address (see bpf/steer.h). */
    v = bpf_map_lookup_elem(&slip_owned, &k);
    if (v)
        return v->stack < STEER_MAX_STACKS ? v->stack : STEER_MAX_STACKS;
    k.raddr = 0;
    k.rport = 0;
    v = bpf_map_lookup_elem(&slip_owned, &k);
    if (!v) {
        k.laddr = 0;
        v = bpf_map_lookup_elem(&slip_owned, &k);
    }
    if (!v)
        return -1;
    if (v->flags & STEER_F_GROUP) {
        struct steer_key pk = {
            .laddr = laddr, .raddr = raddr, .lport = lport, .rport = rport, .proto = proto,
        };
        __u32 h = mix32(raddr ^ v->seed) ^ mix32((((__u32)rport << 16) | lport) + v->seed);

        return group_member(v, &slip_pins, &pk, h, proto, syn);
    }
    /* A value out of range names no socket: the frame goes to the kernel (NO_XSK). */
    return v->stack < STEER_MAX_STACKS ? v->stack : STEER_MAX_STACKS;
}

/* Hands an owned frame to the AF_XDP socket of stack `stack` on the receiving queue. Returns the
 * verdict and stores the outcome counter in *outcome (REDIRECTED, NO_XSK or MULTIBUF) so
 * fragments can follow their first. */
static __always_inline int deliver(struct xdp_md *ctx, __u32 stack, __u8 *outcome)
{
    __u32 q = ctx->rx_queue_index;
    __u32 linear = ctx->data_end - ctx->data;
    int verdict;

    /* Sockets are bound without XDP_USE_SG: a multi-buffer frame would be dropped by the socket. */
    if (bpf_xdp_get_buff_len(ctx) > linear) {
        *outcome = STEER_C_MULTIBUF;
        return pass(STEER_C_MULTIBUF);
    }
    if (q >= STEER_MAX_QUEUES || stack >= STEER_MAX_STACKS) {
        *outcome = STEER_C_NO_XSK;
        return pass(STEER_C_NO_XSK);
    }
    q += stack * STEER_MAX_QUEUES;
    if (!bpf_map_lookup_elem(&slip_xsks, &q)) {
        *outcome = STEER_C_NO_XSK;
        return pass(STEER_C_NO_XSK);
    }
    verdict = bpf_redirect_map(&slip_xsks, q, XDP_PASS);
    *outcome = verdict == XDP_REDIRECT ? STEER_C_REDIRECTED : STEER_C_NO_XSK;
    count(*outcome);
    return verdict;
}

/* Reads the two ports at the start of a TCP or UDP header; the full fixed header must be there.
 * *syn: 1 for a TCP segment opening a connection (SYN without ACK), else 0. */
static __always_inline int parse_ports(struct cursor *c, __u8 proto, __u16 *src, __u16 *dst, int *syn)
{
    *syn = 0;
    if (proto == IPPROTO_UDP) {
        struct udphdr *uh = cur_pull(c, sizeof(*uh));

        if (!uh)
            return -1;
        *src = uh->source;
        *dst = uh->dest;
        return 0;
    }
    struct tcphdr *th = cur_pull(c, sizeof(*th));

    if (!th || th->doff < 5)
        return -1;
    *src = th->source;
    *dst = th->dest;
    *syn = th->syn && !th->ack;
    return 0;
}

/* Checks an IPv4 header at the cursor and leaves the cursor on its payload. frame_len is the
 * length of the whole frame from this header on (linear part plus fragments). */
static __always_inline struct iphdr *parse_ipv4(struct cursor *c, __u32 frame_len)
{
    struct iphdr *iph = c->pos;
    __u32 hlen, tot;

    if ((void *)(iph + 1) > c->end)
        return NULL;
    hlen = iph->ihl * 4;
    if (iph->version != 4 || hlen < sizeof(*iph))
        return NULL;
    tot = bpf_ntohs(iph->tot_len);
    if (tot < hlen || tot > frame_len)
        return NULL;
    if (!cur_pull(c, hlen))
        return NULL;
    return iph;
}

/* RFC 792 / RFC 1122 §3.2.2: an ICMP error carries the offending datagram's IP header and at
 * least its first 8 bytes, which hold the ports. The quoted packet is one we sent, so its source
 * is the local side of the flow. */
static __always_inline int icmp_error(struct xdp_md *ctx, struct cursor *c)
{
    struct steer_icmphdr *ich = cur_pull(c, sizeof(*ich));
    struct iphdr *inner;
    __u16 lport, rport;
    __u8 outcome;
    int stack;

    if (!ich)
        return pass(STEER_C_MALFORMED);
    if (ich->type != STEER_ICMP_DEST_UNREACH && ich->type != STEER_ICMP_TIME_EXCEEDED &&
        ich->type != STEER_ICMP_PARAMETERPROB)
        return pass(STEER_C_PASSED);

    inner = c->pos;
    if ((void *)(inner + 1) > c->end)
        return pass(STEER_C_MALFORMED);
    __u32 hlen = inner->ihl * 4;
    if (inner->version != 4 || hlen < sizeof(*inner) || !cur_pull(c, hlen))
        return pass(STEER_C_MALFORMED);
    /* A quoted later fragment has no ports: nothing to match, the kernel handles it. */
    if (inner->frag_off & bpf_htons(IP_OFFSET))
        return pass(STEER_C_PASSED);
    if (inner->protocol != IPPROTO_TCP && inner->protocol != IPPROTO_UDP)
        return pass(STEER_C_PASSED);
    /* Only 8 bytes are promised: read the ports without asking for a full TCP header. */
    __u16 *ports = cur_pull(c, 8);
    if (!ports)
        return pass(STEER_C_MALFORMED);
    lport = ports[0];
    rport = ports[1];
    stack = owned_lookup(inner->saddr, inner->daddr, lport, rport, inner->protocol, -1);
    if (stack < 0)
        return pass(STEER_C_PASSED);
    count(STEER_C_ICMP_ERR);
    return deliver(ctx, stack, &outcome);
}

/* A fragment with a non-zero offset has no transport header: it follows the first fragment of its
 * datagram if that one was owned. The entry goes when the last fragment (MF clear) passes. */
static __always_inline int later_fragment(struct xdp_md *ctx, struct iphdr *iph)
{
    struct steer_frag_key fk = {
        .saddr = iph->saddr, .daddr = iph->daddr, .id = iph->id, .proto = iph->protocol,
    };
    bool last = !(iph->frag_off & bpf_htons(IP_MF));
    struct steer_frag_val *first = bpf_map_lookup_elem(&slip_frags, &fk);
    __u8 how, outcome;
    __u32 stack;

    if (!first)
        return pass(STEER_C_PASSED);
    how = first->outcome;
    stack = first->stack;
    if (last)
        bpf_map_delete_elem(&slip_frags, &fk);
    count(STEER_C_FRAG);
    /* The first fragment went to the kernel: the rest must join it there to reassemble. */
    if (how != STEER_C_REDIRECTED)
        return pass(how == STEER_C_MULTIBUF ? STEER_C_MULTIBUF : STEER_C_NO_XSK);
    return deliver(ctx, stack, &outcome);
}

/* ---- IPv6 (RFC 8200) ---- */

#define STEER_ETH_P_IPV6 0x86DD
#define NH_HOPOPTS  0
#define NH_ROUTING  43
#define NH_FRAGMENT 44
#define NH_AH       51
#define NH_ICMPV6   58
#define NH_DSTOPTS  60

/* The fixed IPv6 header (RFC 8200 §3), not <linux/ipv6.h> (see steer_icmphdr). */
struct steer_ip6hdr {
    __be32 vtf;                 /* version, traffic class, flow label */
    __be16 payload_len;
    __u8 nexthdr;
    __u8 hop_limit;
    __u8 saddr[16];
    __u8 daddr[16];
};

_Static_assert(sizeof(struct steer_ip6hdr) == 40, "RFC 8200 §3: the IPv6 header is 40 bytes");

struct frag6 {
    bool present;               /* a fragment header that is not atomic (RFC 6946) */
    bool more;
    __u16 offset;               /* bytes */
    __u32 id;                   /* network order */
};

/* Walks the extension headers at the cursor (hop-by-hop, destination options, routing, AH,
 * fragment), each length checked against the frame before the cursor moves past it, at most
 * STEER_IPV6_MAX_EXT of them. On return *next is the first header that is none of those and the
 * cursor is on it; a later fragment stops at its fragment header (what follows is data).
 * Options are not looked at: the stack's own parser (src/wire/ipv6.c) judges them. 0 or -1. */
static __always_inline int ipv6_skip_ext(struct cursor *c, __u8 *next, struct frag6 *fr)
{
    /* A bounded loop, not unrolled: the verifier then explores one body per header instead of a
     * copy of every branch per unrolled step. */
#pragma clang loop unroll(disable)
    for (int i = 0; i < STEER_IPV6_MAX_EXT; i++) {
        __u8 nh = *next;
        __u8 *h = c->pos;
        __u32 len;

        if (nh != NH_HOPOPTS && nh != NH_DSTOPTS && nh != NH_ROUTING && nh != NH_AH && nh != NH_FRAGMENT)
            return 0;
        if ((void *)(h + 8) > c->end)
            return -1;
        if (nh == NH_FRAGMENT) {
            __u16 offlg = ((__u16)h[2] << 8) | h[3];

            if ((offlg & 0xfff8) || (offlg & 1)) {
                fr->present = true;
                fr->more = offlg & 1;
                fr->offset = offlg & 0xfff8;
                __builtin_memcpy(&fr->id, h + 4, 4);
            }
            *next = h[0];
            c->pos = h + 8;
            if (fr->offset)
                return 0;
            continue;
        }
        len = nh == NH_AH ? ((__u32)h[1] + 2) * 4 : ((__u32)h[1] + 1) * 8;
        *next = h[0];
        if (!cur_pull(c, len))
            return -1;
    }
    /* Still an extension header after the last one walked: more than we look through. */
    if (*next == NH_HOPOPTS || *next == NH_DSTOPTS || *next == NH_ROUTING || *next == NH_AH ||
        *next == NH_FRAGMENT)
        return -1;
    return 0;
}

/* As owned_lookup: the index of the owning stack, or -1. */
static __always_inline int owned6_lookup(const __u8 *laddr, const __u8 *raddr, __u16 lport, __u16 rport,
                                         __u8 proto, int syn)
{
    struct steer_key6 k = { .lport = lport, .rport = rport, .proto = proto };
    struct steer_val *v;

    __builtin_memcpy(k.laddr, laddr, 16);
    __builtin_memcpy(k.raddr, raddr, 16);
    v = bpf_map_lookup_elem(&slip_owned6, &k);
    if (v)
        return v->stack < STEER_MAX_STACKS ? v->stack : STEER_MAX_STACKS;
    __builtin_memset(k.raddr, 0, 16);
    k.rport = 0;
    v = bpf_map_lookup_elem(&slip_owned6, &k);
    if (!v) {
        __builtin_memset(k.laddr, 0, 16);
        v = bpf_map_lookup_elem(&slip_owned6, &k);
    }
    if (!v)
        return -1;
    if (v->flags & STEER_F_GROUP) {
        struct steer_key6 pk = { .lport = lport, .rport = rport, .proto = proto };
        __u32 r[4];

        __builtin_memcpy(pk.laddr, laddr, 16);
        __builtin_memcpy(pk.raddr, raddr, 16);
        __builtin_memcpy(r, raddr, 16);
        __u32 h = mix32(r[0] ^ v->seed) ^ mix32(r[1] + v->seed) ^ mix32(r[2] ^ ~v->seed) ^ mix32(r[3] - v->seed) ^
                  mix32((((__u32)rport << 16) | lport) + v->seed);

        return group_member(v, &slip_pins6, &pk, h, proto, syn);
    }
    return v->stack < STEER_MAX_STACKS ? v->stack : STEER_MAX_STACKS;
}

/* RFC 4443 §2.4 (c): an ICMPv6 error quotes as much of the offending packet as fits; the quoted
 * packet is one we sent (its source is the local side). Informational messages (echo, neighbour
 * discovery, router advertisements, MLD: types 128 and up) are the kernel's. */
static __always_inline int icmpv6_error(struct xdp_md *ctx, struct cursor *c)
{
    struct steer_icmphdr *ich = cur_pull(c, sizeof(*ich));
    struct steer_ip6hdr *inner;
    __u8 next, outcome;

    if (!ich)
        return pass(STEER_C_MALFORMED);
    if (ich->type >= 128 || ich->type == 0)
        return pass(STEER_C_PASSED);
    inner = cur_pull(c, sizeof(*inner));
    if (!inner || (bpf_ntohl(inner->vtf) >> 28) != 6)
        return pass(STEER_C_MALFORMED);
    next = inner->nexthdr;
    /* What we send carries no extension header but, when fragmented, a fragment header: a quote
     * is walked through that one only (a walk per message would double the program's paths). */
    if (next == NH_FRAGMENT) {
        __u8 *fh = cur_pull(c, 8);

        if (!fh)
            return pass(STEER_C_MALFORMED);
        if ((fh[2] & 0xff) || (fh[3] & 0xf8))
            return pass(STEER_C_PASSED);        /* a later fragment: no ports */
        next = fh[0];
    }
    if (next != IPPROTO_TCP && next != IPPROTO_UDP)
        return pass(STEER_C_PASSED);
    __u16 *ports = cur_pull(c, 8);
    if (!ports)
        return pass(STEER_C_MALFORMED);
    int stack = owned6_lookup(inner->saddr, inner->daddr, ports[0], ports[1], next, -1);
    if (stack < 0)
        return pass(STEER_C_PASSED);
    count(STEER_C_ICMP_ERR);
    return deliver(ctx, stack, &outcome);
}

static __always_inline int steer_ipv6(struct xdp_md *ctx, struct cursor *c, __u32 frame_len)
{
    struct steer_ip6hdr *ip6 = cur_pull(c, sizeof(*ip6));
    struct frag6 fr = {};
    __u16 sport, dport;
    __u8 next, outcome;
    int verdict, syn;

    if (!ip6 || (bpf_ntohl(ip6->vtf) >> 28) != 6 ||
        sizeof(*ip6) + (__u32)bpf_ntohs(ip6->payload_len) > frame_len)
        return pass(STEER_C_MALFORMED);
    next = ip6->nexthdr;
    if (ipv6_skip_ext(c, &next, &fr))
        return pass(STEER_C_MALFORMED);

    if (fr.offset) {
        /* A later fragment follows its datagram's first, as for IPv4 (later_fragment). */
        struct steer_frag6_key fk = { .id = fr.id };
        struct steer_frag_val *first;
        __u8 how;
        __u32 stack;

        __builtin_memcpy(fk.saddr, ip6->saddr, 16);
        __builtin_memcpy(fk.daddr, ip6->daddr, 16);
        first = bpf_map_lookup_elem(&slip_frags6, &fk);
        if (!first)
            return pass(STEER_C_PASSED);
        how = first->outcome;
        stack = first->stack;
        if (!fr.more)
            bpf_map_delete_elem(&slip_frags6, &fk);
        count(STEER_C_FRAG);
        if (how != STEER_C_REDIRECTED)
            return pass(how == STEER_C_MULTIBUF ? STEER_C_MULTIBUF : STEER_C_NO_XSK);
        return deliver(ctx, stack, &outcome);
    }
    if (next == NH_ICMPV6)
        return icmpv6_error(ctx, c);
    if (next != IPPROTO_TCP && next != IPPROTO_UDP)
        return pass(STEER_C_PASSED);
    if (parse_ports(c, next, &sport, &dport, &syn))
        return pass(STEER_C_MALFORMED);
    int stack = owned6_lookup(ip6->daddr, ip6->saddr, dport, sport, next, syn);
    if (stack < 0)
        return pass(STEER_C_PASSED);
    if (stack == STEER_DROP_SYN) {
        count(STEER_C_PARKED);
        return XDP_DROP;
    }
    verdict = deliver(ctx, stack, &outcome);
    if (fr.present) {
        struct steer_frag6_key fk = { .id = fr.id };

        __builtin_memcpy(fk.saddr, ip6->saddr, 16);
        __builtin_memcpy(fk.daddr, ip6->daddr, 16);
        struct steer_frag_val fv = { .outcome = outcome, .stack = stack };

        bpf_map_update_elem(&slip_frags6, &fk, &fv, BPF_ANY);
        count(STEER_C_FRAG);
    }
    return verdict;
}

SEC("xdp.frags")
int slip_steer(struct xdp_md *ctx)
{
    struct cursor c = { .pos = (void *)(long)ctx->data, .end = (void *)(long)ctx->data_end };
    __u32 buff_len = bpf_xdp_get_buff_len(ctx);
    struct ethhdr *eth;
    struct iphdr *iph;
    struct flow f = {};
    bool first_frag;
    __u16 ip_id;
    __u8 outcome;
    int verdict, stack, syn;

    count(STEER_C_RX);
    eth = cur_pull(&c, sizeof(*eth));
    if (!eth)
        return pass(STEER_C_MALFORMED);
    if (buff_len < sizeof(*eth))
        return pass(STEER_C_MALFORMED);
    if (eth->h_proto == bpf_htons(STEER_ETH_P_IPV6))
        return steer_ipv6(ctx, &c, buff_len - sizeof(*eth));
    /* ARP, VLAN-tagged and everything else belong to the kernel. */
    if (eth->h_proto != bpf_htons(ETH_P_IP))
        return pass(STEER_C_PASSED);
    iph = parse_ipv4(&c, buff_len - sizeof(*eth));
    if (!iph)
        return pass(STEER_C_MALFORMED);

    if (iph->frag_off & bpf_htons(IP_OFFSET))
        return later_fragment(ctx, iph);

    f.saddr = iph->saddr;
    f.daddr = iph->daddr;
    f.proto = iph->protocol;
    first_frag = iph->frag_off & bpf_htons(IP_MF);
    ip_id = iph->id;
    if (f.proto == IPPROTO_ICMP)
        return icmp_error(ctx, &c);
    if (f.proto != IPPROTO_TCP && f.proto != IPPROTO_UDP)
        return pass(STEER_C_PASSED);
    if (parse_ports(&c, f.proto, &f.sport, &f.dport, &syn))
        return pass(STEER_C_MALFORMED);
    /* Seen from the stack: the destination is the local side. */
    stack = owned_lookup(f.daddr, f.saddr, f.dport, f.sport, f.proto, syn);
    if (stack < 0)
        return pass(STEER_C_PASSED);
    if (stack == STEER_DROP_SYN) {
        count(STEER_C_PARKED);
        return XDP_DROP;
    }

    verdict = deliver(ctx, stack, &outcome);
    if (first_frag) {
        /* First fragment of an owned datagram: remember where it went for the rest. */
        struct steer_frag_key fk = {
            .saddr = f.saddr, .daddr = f.daddr, .id = ip_id, .proto = f.proto,
        };

        struct steer_frag_val fv = { .outcome = outcome, .stack = stack };

        bpf_map_update_elem(&slip_frags, &fk, &fv, BPF_ANY);
        count(STEER_C_FRAG);
    }
    return verdict;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
