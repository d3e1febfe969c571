/* SYN cookies: when a listener's SYN queue is full, the SYN-ACK's ISN carries what we would have
 * stored, so the ACK that completes the handshake can rebuild the connection (RFC 4987 §3.6).
 * Layout, as Linux: cookie = H1(tuple) + SEG.SEQ + (count << 24) + ((H2(tuple, count, SEG.SEQ) +
 * mssind) mod 2^24), count = minutes; with timestamps the low 6 bits of TSval carry wscale (4 bits,
 * 0xf = none) and SACK-permitted (bit 4). */
#include <errno.h>
#include <string.h>

#include "tcp/tcp_var.h"

#define COOKIE_PERIOD  (60 * SLIP_SEC)
#define COOKIE_MAX_AGE 2            /* periods a cookie stays valid */
#define TS_OPT_MASK    0x3fu
#define TS_WS_NONE     0xfu
#define TS_SACK_BIT    0x10u

/* Linux's table: the MSS values most often seen on SYNs. */
const uint16_t tcp_syncookie_mss[4] = { 536, 1300, 1440, 1460 };

static uint32_t cookie_hash(const struct tcp_shared *sh, be32 laddr, uint16_t lport, be32 raddr,
                            uint16_t rport, uint32_t count, uint32_t which)
{
    uint8_t buf[24];
    memcpy(buf, &laddr, 4);
    memcpy(buf + 4, &raddr, 4);
    memcpy(buf + 8, &lport, 2);
    memcpy(buf + 10, &rport, 2);
    memcpy(buf + 12, &count, 4);
    memcpy(buf + 16, &which, 4);
    memset(buf + 20, 0, 4);
    return (uint32_t)tcp_siphash(&sh->key[2], buf, sizeof(buf));
}

uint32_t tcp_syncookie__make(const struct tcp_shared *sh, be32 laddr, uint16_t lport, be32 raddr,
                             uint16_t rport, uint32_t peer_seq, slip_time_t now,
                             const struct tcp_cookie_opts *o, uint32_t *tsval)
{
    uint32_t count = (uint32_t)(now / COOKIE_PERIOD);
    uint32_t mssind = 0;
    for (uint32_t i = 0; i < 4; i++)
        if (tcp_syncookie_mss[i] <= o->mss)
            mssind = i;
    uint32_t h1 = cookie_hash(sh, laddr, lport, raddr, rport, 0, 1);
    /* H2 also covers the peer's ISN (Linux leaves it out), so a cookie checked against a
     * neighbouring sequence number does not decode to another valid MSS index. */
    uint32_t h2 = cookie_hash(sh, laddr, lport, raddr, rport, count, 2) ^ cookie_hash(sh, laddr, lport, raddr, rport, peer_seq, 3);
    if (tsval && o->ts_ok) {
        uint32_t bits = (o->ws_ok ? (o->wscale & 0xfu) : TS_WS_NONE) | (o->sack_ok ? TS_SACK_BIT : 0);
        uint32_t t = (*tsval & ~TS_OPT_MASK) | bits;
        /* Never ahead of the real clock: later segments must not look older (PAWS). */
        if (seq_gt(t, *tsval))
            t -= TS_OPT_MASK + 1;
        *tsval = t;
    }
    return h1 + peer_seq + (count << 24) + ((h2 + mssind) & 0xffffffu);
}

int tcp_syncookie__check(const struct tcp_shared *sh, be32 laddr, uint16_t lport, be32 raddr, uint16_t rport,
                         uint32_t peer_seq, uint32_t cookie, slip_time_t now, bool has_ts, uint32_t tsecr,
                         struct tcp_cookie_opts *o)
{
    uint32_t count = (uint32_t)(now / COOKIE_PERIOD);
    uint32_t h1 = cookie_hash(sh, laddr, lport, raddr, rport, 0, 1);
    uint32_t v = cookie - h1 - peer_seq;
    uint32_t age = (count - (v >> 24)) & 0xffu;
    if (age > COOKIE_MAX_AGE)
        return -EINVAL;
    uint32_t h2 = cookie_hash(sh, laddr, lport, raddr, rport, count - age, 2) ^
                  cookie_hash(sh, laddr, lport, raddr, rport, peer_seq, 3);
    uint32_t mssind = ((v & 0xffffffu) - h2) & 0xffffffu;
    if (mssind >= 4)
        return -EINVAL;
    memset(o, 0, sizeof(*o));
    o->mss = tcp_syncookie_mss[mssind];
    if (has_ts && tsecr) {
        uint32_t ws = tsecr & 0xfu;
        o->ts_ok = true;
        o->sack_ok = (tsecr & TS_SACK_BIT) != 0;
        if (ws != TS_WS_NONE) {
            if (ws > 14)
                return -EINVAL;
            o->ws_ok = true;
            o->wscale = (uint8_t)ws;
        }
    }
    return 0;
}
