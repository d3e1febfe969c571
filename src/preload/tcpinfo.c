/* getsockopt(TCP_INFO) on an accelerated TCP socket: Linux's struct tcp_info, as large as the
 * running kernel's (programs built against newer headers read the later fields), filled from
 * the stack's view of the connection with each field's Linux meaning (segments where Linux
 * counts segments, microseconds, milliseconds ago). Fields the stack has no notion of (pacing,
 * delivery rate, ECN counts) are 0, as Linux leaves them on a connection that did not use them. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "preload/preload.h"
#include "stack/stack.h"

/* Linux's uapi layout (include/uapi/linux/tcp.h): the kernel only ever appends to it. glibc's
 * <netinet/tcp.h> stops at tcpi_total_retrans (104 bytes); this goes to tcpi_total_rto_time. */
struct linux_tcp_info {
    uint8_t state, ca_state, retransmits, probes, backoff, options;
    uint8_t wscale;             /* snd_wscale:4 (low nibble), rcv_wscale:4 */
    uint8_t rate_fo;            /* delivery_rate_app_limited:1, fastopen_client_fail:2 */
    uint32_t rto, ato, snd_mss, rcv_mss;
    uint32_t unacked, sacked, lost, retrans, fackets;
    uint32_t last_data_sent, last_ack_sent, last_data_recv, last_ack_recv;
    uint32_t pmtu, rcv_ssthresh, rtt, rttvar, snd_ssthresh, snd_cwnd, advmss, reordering;
    uint32_t rcv_rtt, rcv_space;
    uint32_t total_retrans;
    uint64_t pacing_rate, max_pacing_rate, bytes_acked, bytes_received;
    uint32_t segs_out, segs_in;
    uint32_t notsent_bytes, min_rtt, data_segs_in, data_segs_out;
    uint64_t delivery_rate;
    uint64_t busy_time, rwnd_limited, sndbuf_limited;
    uint32_t delivered, delivered_ce;
    uint64_t bytes_sent, bytes_retrans;
    uint32_t dsack_dups, reord_seen;
    uint32_t rcv_ooopack;
    uint32_t snd_wnd;
    uint32_t rcv_wnd;
    uint32_t rehash;
    uint16_t total_rto, total_rto_recoveries;
    uint32_t total_rto_time;
};
_Static_assert(offsetof(struct linux_tcp_info, total_retrans) == 100, "Linux tcp_info layout");
_Static_assert(offsetof(struct linux_tcp_info, busy_time) == 168, "Linux tcp_info layout");
_Static_assert(sizeof(struct linux_tcp_info) == 248, "Linux tcp_info layout");

#define TI_OPT_TIMESTAMPS 1
#define TI_OPT_SACK       2
#define TI_OPT_WSCALE     4
#define TI_INFINITE_SSTHRESH 0x7fffffffu

/* The size of this kernel's struct tcp_info, asked once of a kernel TCP socket (getsockopt
 * copies min(asked, its size)); ours when the kernel does not say. */
static size_t kernel_size(int kfd)
{
    static size_t cached;
    size_t n = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (n)
        return n;
    uint8_t buf[1024];
    socklen_t len = sizeof(buf);
    n = sizeof(struct linux_tcp_info);
    if (real_getsockopt(kfd, IPPROTO_TCP, TCP_INFO, buf, &len) == 0 && len >= 104 && len <= sizeof(buf))
        n = len;
    __atomic_store_n(&cached, n, __ATOMIC_RELAXED);
    return n;
}

static uint32_t segs(uint64_t bytes, uint32_t mss)
{
    uint64_t s = mss ? (bytes + mss - 1) / mss : 0;
    return s > UINT32_MAX ? UINT32_MAX : (uint32_t)s;
}

int pre_tcpinfo__fill(int kfd, const struct slip_tcp_info *in, void *val, socklen_t *len)
{
    if (!len)
        return -EFAULT;
    if ((int)*len < 0)
        return -EINVAL;
    uint8_t out[1024];
    struct linux_tcp_info ti;
    memset(&ti, 0, sizeof(ti));
    uint32_t mss = in->mss;
    ti.state = in->state;    /* Linux's numbering already (stack.h) */
    ti.ca_state = in->ca_state;
    ti.retransmits = in->backoff;
    ti.probes = in->probes;
    ti.backoff = in->backoff;
    ti.options = (in->sack ? TI_OPT_SACK : 0) | (in->timestamps ? TI_OPT_TIMESTAMPS : 0) |
                 (in->snd_wscale || in->rcv_wscale ? TI_OPT_WSCALE : 0);
    ti.wscale = (uint8_t)((in->snd_wscale & 0xf) | (in->rcv_wscale & 0xf) << 4);
    ti.rto = in->rto_us;
    ti.ato = in->ato_us;
    ti.snd_mss = mss;
    ti.rcv_mss = in->rcv_mss;
    ti.unacked = segs(in->unacked, mss);            /* Linux: packets_out */
    ti.sacked = in->sacked;
    ti.lost = in->lost;
    ti.retrans = in->retrans;
    ti.last_data_sent = in->last_data_sent_ms;
    ti.last_data_recv = in->last_data_recv_ms;
    ti.last_ack_recv = in->last_ack_recv_ms;
    ti.pmtu = in->advmss + 40;
    ti.rcv_ssthresh = in->rcv_wnd;
    ti.rtt = in->srtt_us;
    ti.rttvar = in->rttvar_us;
    ti.snd_ssthresh = in->ssthresh >= UINT32_MAX / 2 ? TI_INFINITE_SSTHRESH : segs(in->ssthresh, mss);
    ti.snd_cwnd = mss ? in->cwnd / mss : in->cwnd;
    ti.advmss = in->advmss;
    ti.reordering = in->reordering;
    ti.rcv_space = in->rcv_space;
    ti.total_retrans = (uint32_t)in->retransmits;
    ti.max_pacing_rate = UINT64_MAX;                /* Linux: ~0 unless SO_MAX_PACING_RATE */
    ti.bytes_acked = in->bytes_acked;
    ti.bytes_received = in->bytes_in;
    ti.segs_out = (uint32_t)in->segs_out;
    ti.segs_in = (uint32_t)in->segs_in;
    ti.notsent_bytes = in->notsent;
    ti.busy_time = in->busy_us;
    ti.rwnd_limited = in->rwnd_limited_us;
    ti.sndbuf_limited = in->sndbuf_limited_us;
    ti.delivered = segs(in->bytes_acked, mss);
    ti.bytes_sent = in->bytes_out + in->retrans_bytes;
    ti.bytes_retrans = in->retrans_bytes;
    ti.snd_wnd = in->snd_wnd;
    ti.rcv_wnd = in->rcv_wnd;
    ti.total_rto = (uint16_t)(in->rto_expiries > UINT16_MAX ? UINT16_MAX : in->rto_expiries);
    size_t full = kernel_size(kfd);
    memset(out, 0, sizeof(out));
    memcpy(out, &ti, SLIP_MIN(sizeof(ti), full));
    socklen_t n = (socklen_t)SLIP_MIN((size_t)*len, full);
    if (n && !val)
        return -EFAULT;
    memcpy(val, out, (size_t)n);
    *len = n;
    return 0;
}
