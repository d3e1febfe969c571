/* Wire-loss emulator for the system tests: a tc direct-action classifier attached at the ingress
 * of a router namespace's ports that drops each packet with the probability set in the config
 * map, independently (Bernoulli), as a lossy link would. The loader is tests/prog/tc_loss.c. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "tests/bpf/loss.h"

/* An array map rather than a const volatile global: the loader changes the rate while the
 * program stays attached. */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct loss_cfg);
} slip_loss_cfg SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, LOSS_C__MAX);
    __type(key, __u32);
    __type(value, __u64);
} slip_loss_counters SEC(".maps");

static __always_inline void count(__u32 idx)
{
    __u64 *v = bpf_map_lookup_elem(&slip_loss_counters, &idx);

    if (v)
        *v += 1;
}

/* IPv4 carrying TCP or UDP. bpf_skb_load_bytes instead of direct access: it also works when
 * the headers are not in the linear part of the skb. */
static __always_inline int is_ipv4_l4(struct __sk_buff *skb, __u32 *tot_len)
{
    struct iphdr iph;

    if (skb->protocol != bpf_htons(ETH_P_IP))
        return 0;
    if (bpf_skb_load_bytes(skb, ETH_HLEN, &iph, sizeof(iph)) < 0)
        return 0;
    *tot_len = bpf_ntohs(iph.tot_len);
    return iph.version == 4 && (iph.protocol == IPPROTO_TCP || iph.protocol == IPPROTO_UDP);
}

SEC("tc")
int slip_loss(struct __sk_buff *skb)
{
    __u32 key = 0;
    struct loss_cfg *cfg = bpf_map_lookup_elem(&slip_loss_cfg, &key);

    if (!cfg)
        return TC_ACT_OK;
    __u32 tot_len = 0;
    int l4 = is_ipv4_l4(skb, &tot_len);

    if (cfg->only_l4 && !l4) {
        count(LOSS_C_SKIPPED);
        return TC_ACT_OK;
    }
    /* Not atomic (the target's clang has no fetching add): two packets of that length racing
     * on two CPUs could both go; the tail-loss test sends one, and its probe an RTT later. */
    if (l4 && cfg->drop_left && tot_len == cfg->drop_len) {
        cfg->drop_left--;
        count(LOSS_C_DROPPED);
        return TC_ACT_SHOT;
    }
    if (skb->gso_segs > 1)
        count(LOSS_C_GSO);
    /* Scale the 32-bit random number to [0, 10^6) by multiplication: no modulo bias worth
     * naming and no division in the program. */
    if ((((__u64)bpf_get_prandom_u32() * LOSS_PPM_MAX) >> 32) < cfg->ppm) {
        count(LOSS_C_DROPPED);
        return TC_ACT_SHOT;
    }
    count(LOSS_C_PASSED);
    return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
