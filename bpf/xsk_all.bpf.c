/* XDP program of the raw AF_XDP benchmark (`slipstream bench xsk`): every frame of a queue goes to
 * the AF_XDP socket bound to that queue, so the benchmark measures the socket path alone. A queue
 * without a socket keeps its frames in the kernel (XDP_PASS), never drops them. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define SLIP_XSK_ALL_MAX_QUEUES 64

/* Named with the slip_ prefix so `bpftool map show` tells it from the stack's steering map. */
struct {
    __uint(type, BPF_MAP_TYPE_XSKMAP);
    __uint(max_entries, SLIP_XSK_ALL_MAX_QUEUES);
    __type(key, __u32);
    __type(value, __u32);
} slip_bench_xsks SEC(".maps");

SEC("xdp")
int slip_xsk_all(struct xdp_md *ctx)
{
    /* The flags argument is the action taken when the queue's slot is empty (kernel >= 5.3). */
    return bpf_redirect_map(&slip_bench_xsks, ctx->rx_queue_index, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
