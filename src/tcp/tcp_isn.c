/* Initial sequence numbers (RFC 6528) and timestamp offsets (RFC 7323 §5.4) from a keyed hash
 * of the 4-tuple (SipHash-2-4, base/siphash.c). */
#include <string.h>

#include "tcp/tcp_var.h"

static uint32_t tuple_hash(const uint64_t key[2], be32 laddr, uint16_t lport, be32 raddr, uint16_t rport,
                           uint32_t salt)
{
    uint8_t buf[16];
    memcpy(buf, &laddr, 4);
    memcpy(buf + 4, &raddr, 4);
    memcpy(buf + 8, &lport, 2);
    memcpy(buf + 10, &rport, 2);
    memcpy(buf + 12, &salt, 4);
    return (uint32_t)tcp_siphash(key, buf, sizeof(buf));
}

/* RFC 6528 §3: M is a timer ticking every 4 microseconds; F a keyed hash of the 4-tuple, so
 * ISNs of one tuple increase with time while other tuples' ISNs are unpredictable. */
uint32_t tcp_isn(const struct tcp_shared *sh, be32 laddr, uint16_t lport, be32 raddr, uint16_t rport,
                 slip_time_t now)
{
    uint32_t m = (uint32_t)(now / (4 * SLIP_USEC));
    return m + tuple_hash(sh->key, laddr, lport, raddr, rport, 0);
}

uint32_t tcp_ts_offset(const struct tcp_shared *sh, be32 laddr, uint16_t lport, be32 raddr, uint16_t rport)
{
    return tuple_hash(sh->key, laddr, lport, raddr, rport, 0x7473u);
}
