/* placeholder */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("xdp") int placeholder(struct xdp_md *ctx) { return XDP_PASS; }
char LICENSE[] SEC("license") = "Dual BSD/GPL";
