/* What a reassembly that runs out of time tells its sender (RFC 792, RFC 1122 §3.2.1.8; RFC 8200
 * §4.5, RFC 4443 §3.3): an ICMP or ICMPv6 "fragment reassembly time exceeded" quoting the first
 * fragment, sent only when that first fragment arrived (as Linux's ip_expire and
 * ip6_frag_expire), and the reassembly timeouts themselves, read from the namespace's
 * net.ipv4.ipfrag_time and net.ipv6.ip6frag_time as Linux uses them.
 *
 * The quote comes from the first fragment's own frame: its IP header (and IPv6 extension
 * headers, hdr_len bytes) still lie just before the payload the slot holds. The frame is in
 * the UMEM that the application's processes map too, so the length is bounded by the frame and
 * the version nibble checked; the bytes only go back to the sender. Errors are few by
 * construction: one per timed-out slot, and the slots are bounded (IP_REASS_SLOTS). */
#include "ip/ip6.h"

#include <stdio.h>
#include <string.h>

#include "wire/eth.h"
#include "wire/icmp.h"
#include "wire/icmpv6.h"
#include "wire/ipv4.h"
#include "wire/ipv6.h"

#define ICMP4_QUOTE_MAX (576 - WIRE_IPV4_HLEN_MIN - 8)  /* RFC 1812 §4.3.2.3: within 576 bytes */
#define ICMP6_QUOTE_MAX (WIRE_IPV6_MIN_MTU - WIRE_IPV6_HLEN - 8)   /* RFC 4443 §2.4 (c) */

static slip_time_t read_secs(const char *path, slip_time_t dflt)
{
    long v = 0;
    FILE *f = fopen(path, "re");
    if (!f)
        return dflt;
    bool ok = fscanf(f, "%ld", &v) == 1 && v > 0 && v <= 3600;
    fclose(f);
    return ok ? (slip_time_t)v * SLIP_SEC : dflt;
}

void ip_reass__read_sysctls(struct ip_shared *sh)
{
    sh->reass_time = read_secs("/proc/sys/net/ipv4/ipfrag_time", IP_REASS_TIMEOUT);
    sh->reass6_time = read_secs("/proc/sys/net/ipv6/ip6frag_time", IP6_REASS_TIMEOUT);
}

void ip_reass__time_exceeded(struct ip_env *env, const struct ip_reass_slot *s)
{
    struct pkt_pool *pool = env->pool;
    if (s->frags == SLIP_NIL)
        return;
    const struct pkt_meta *m = pkt__meta(pool, s->frags);
    size_t hlen = s->hdr_len;
    if (m->frag_off != 0 || m->off >= pool->frame_size || m->off < hlen)
        return;                 /* the first fragment never came: nothing to quote (nor does Linux) */
    const uint8_t *hdr = pkt__frame(pool, s->frags) + (m->off - hlen);
    size_t max = s->k.v6 ? ICMP6_QUOTE_MAX : ICMP4_QUOTE_MAX;
    if (hlen > max || hlen < (s->k.v6 ? WIRE_IPV6_HLEN : WIRE_IPV4_HLEN_MIN) ||
        (hdr[0] >> 4) != (s->k.v6 ? 6 : 4))
        return;
    size_t plen = SLIP_MIN((size_t)m->len, max - hlen);
    if (m->off + plen > pool->frame_size)
        plen = pool->frame_size - m->off;
    uint8_t buf[8 + ICMP6_QUOTE_MAX];
    memcpy(buf + 8, hdr, hlen + plen);
    size_t body = hlen + plen;
    int rc;
    if (s->k.v6) {
        /* Back to the sender from the address it wrote to; a link-local sender has no scope
         * here (the slot does not keep the interface): it gets nothing. */
        struct ip6_route rt;
        rc = ip6_output__route(env, &s->k.src, 0, &rt);
        if (rc < 0)
            return;
        struct wire_icmpv6_repr r = { .type = WIRE_ICMPV6_TIME_EXCEEDED, .code = 1 };
        wire_icmpv6__emit(&r, &s->k.dst, &s->k.src, buf, body);
        struct ip6_tx tx = { .src = s->k.dst, .dst = s->k.src, .proto = WIRE_IPPROTO_ICMPV6 };
        struct iovec iov = { buf, 8 + body };
        rc = ip6_output__send(env, &rt, &tx, &iov, 1);
    } else {
        be32 src, dst;          /* v4-mapped in the key */
        memcpy(&src, s->k.src.b + 12, 4);
        memcpy(&dst, s->k.dst.b + 12, 4);
        struct ip_route rt;
        rc = ip_output__route(env, src, &rt);
        if (rc < 0)
            return;
        struct wire_icmp_repr r = { .type = WIRE_ICMP_TIME_EXCEEDED, .code = 1 };
        wire_icmp__emit(&r, buf, body);
        struct ip_tx tx = { .src = dst, .dst = src, .proto = WIRE_IPPROTO_ICMP };
        struct iovec iov = { buf, 8 + body };
        rc = ip_output__send(env, &rt, &tx, &iov, 1);
    }
    if (rc == 0)
        env->sh->c.reass_time_exceeded_out++;
}
