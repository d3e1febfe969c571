/* XDP steering program: claims the IPv4 TCP/UDP flows the user-space stacks own (map slip_owned)
 * and redirects each to the AF_XDP socket of its owning stack on the receiving queue; every
 * other frame, and every frame it cannot parse, goes to the kernel untouched (XDP_PASS). Never
 * drops. */
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

/* The index of the stack that owns the flow, or -1 when none does. */
static __always_inline int owned_lookup(__u32 laddr, __u32 raddr, __u16 lport, __u16 rport, __u8 proto)
{
    struct steer_key k = {
        .laddr = laddr, .raddr = raddr, .lport = lport, .rport = rport, .proto = proto,
    };
    struct steer_val *v;

    /* Most specific first: a connected socket, then a socket bound to this address, then a
     * socket bound to every address (see bpf/steer.h). */
    v = bpf_map_lookup_elem(&slip_owned, &k);
    if (!v) {
        k.raddr = 0;
        k.rport = 0;
        v = bpf_map_lookup_elem(&slip_owned, &k);
    }
    if (!v) {
        k.laddr = 0;
        v = bpf_map_lookup_elem(&slip_owned, &k);
    }
    if (!v)
        return -1;
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

/* Reads the two ports at the start of a TCP or UDP header; the full fixed header must be there. */
static __always_inline int parse_ports(struct cursor *c, __u8 proto, __u16 *src, __u16 *dst)
{
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
    stack = owned_lookup(inner->saddr, inner->daddr, lport, rport, inner->protocol);
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
    int verdict, stack;

    count(STEER_C_RX);
    eth = cur_pull(&c, sizeof(*eth));
    if (!eth)
        return pass(STEER_C_MALFORMED);
    /* IPv4 only; ARP, IPv6, VLAN-tagged and everything else belong to the kernel. */
    if (eth->h_proto != bpf_htons(ETH_P_IP))
        return pass(STEER_C_PASSED);
    if (buff_len < sizeof(*eth))
        return pass(STEER_C_MALFORMED);
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
    if (parse_ports(&c, f.proto, &f.sport, &f.dport))
        return pass(STEER_C_MALFORMED);
    /* Seen from the stack: the destination is the local side. */
    stack = owned_lookup(f.daddr, f.saddr, f.dport, f.sport, f.proto);
    if (stack < 0)
        return pass(STEER_C_PASSED);

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
