/* TCP output: what to send now (SYN, data under the send and congestion windows with Nagle, cork
 * and sender SWS avoidance, limited transmit, SACK recovery resending what RACK marked lost,
 * FIN, owed ACKs), how the receive window is advertised (receiver SWS avoidance, never
 * shrinking), and segment building. Every
 * segment, retransmissions included, is built afresh from the send queue and handed to ip/,
 * which copies it into a new frame: a frame given to the TX ring is never touched again. */
#include <errno.h>
#include <string.h>

#include "tcp/tcp_var.h"
#include "wire/ipv4.h"

#define SEG_BUF (WIRE_TCP_HLEN_MAX + 9216)

uint32_t tcp_output__data_mss(const struct tcp_conn *c)
{
    uint32_t m = c->mss;
    if (c->flags & TCPF_TS_OK)
        m -= 12;
    return m;
}

/* Copies [off, off+len) of the send queue to dst. */
static void sndq_copy(const struct pkt_pool *pool, const struct tcp_conn *c, uint32_t off, uint8_t *dst,
                      uint32_t len)
{
    for (slip_idx_t b = c->sndq.head; b != SLIP_NIL && len; b = pkt__meta(pool, b)->next) {
        const struct pkt_meta *m = pkt__meta(pool, b);
        if (off >= m->len) {
            off -= m->len;
            continue;
        }
        uint32_t n = SLIP_MIN((uint32_t)m->len - off, len);
        memcpy(dst, pkt__data(pool, b) + off, n);
        dst += n;
        len -= n;
        off = 0;
    }
}

/* RFC 9293 §3.8.6.2.2 (receiver SWS avoidance) and §3.8.6 (do not shrink the window): the right
 * edge moves only when it can move by min(RCV.BUFF/2, MSS), and never backwards. Returns the
 * 16-bit field value and records RCV.ADV. */
static uint16_t select_window(struct tcp_conn *c)
{
    uint32_t space = tcp_rcv_space(c);
    uint32_t adv = seq_gt(c->rcv_adv, c->rcv_nxt) ? c->rcv_adv - c->rcv_nxt : 0;
    uint32_t thresh = SLIP_MIN(c->rcvbuf / 2, (uint32_t)c->rcv_mss);
    uint32_t win = space;
    if (space < adv)
        win = adv;                          /* never shrink */
    else if (space - adv < thresh && space < thresh)
        win = adv;                          /* a small opening waits */
    uint8_t s = c->rcv_wscale;
    uint32_t max = 65535u << s;
    if (win > max)
        win = max;
    uint32_t field = win >> s;
    /* Rounding down to the scale granularity must not pull the edge below RCV.ADV. */
    if ((field << s) < adv)
        field = (adv + (1u << s) - 1) >> s;
    if (field > 65535)
        field = 65535;
    c->rcv_adv = c->rcv_nxt + (field << s);
    return (uint16_t)field;
}

/* Builds and sends one segment: seq, len bytes of the send queue from seq, flags. tsval_cookie
 * overrides the timestamp (SYN cookie SYN-ACKs). Returns 0 or negative errno. */
static int xmit(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, uint32_t seq, uint32_t len,
                uint8_t flags, const uint32_t *tsval_cookie)
{
    uint8_t buf[SEG_BUF];
    struct wire_tcp_repr r;
    struct ip_route rt;
    struct ip6_route rt6;
    bool v6 = c->flags & TCPF_V6;
    /* Over IPv6 the connection's own address is the source (tcp6__send), so none is selected
     * (laddr, its fold, is 0 only for ::). */
    int rc = v6 ? ip6_output__route_from(env, c->laddr ? &c->laddr6 : NULL, &c->raddr6, c->scope, &rt6)
                : ip_output__route(env, c->raddr, &rt);
    if (rc < 0)
        return rc;
    memset(&r, 0, sizeof(r));
    r.sport = c->lport;
    r.dport = c->rport;
    r.seq = seq;
    uint8_t ecn = tcp_ecn__out(sh, c, &flags, seq, len);
    r.flags = flags;
    if (flags & WIRE_TCP_ACK)
        r.ack = c->rcv_nxt;
    bool syn = flags & WIRE_TCP_SYN;
    bool active_syn = syn && !(flags & WIRE_TCP_ACK);
    if (syn) {
        /* RFC 9293 §3.7.1: our MSS from the route MTU (RFC 6691: minus fixed headers only). */
        r.opts.has_mss = true;
        r.opts.mss = tcp_conn__route_mss(env, c);
        c->adv_mss = r.opts.mss;
        /* Our SYN offers what the namespace's sysctls leave on (tcp_input.c masks a peer's SYN
         * the same way, so a SYN-ACK echoes only those). */
        if ((active_syn && !(sh->opts_off & TCP_OPTS_OFF_WS)) || (c->flags & TCPF_WS_OK)) {
            r.opts.has_wscale = true;
            r.opts.wscale = c->rcv_wscale;
        }
        r.opts.sack_ok = (active_syn && !(sh->opts_off & TCP_OPTS_OFF_SACK)) || (c->flags & TCPF_SACK_OK);
        r.opts.has_ts = (active_syn && !(sh->opts_off & TCP_OPTS_OFF_TS)) || (c->flags & TCPF_TS_OK);
        uint32_t space = tcp_rcv_space(c);
        r.window = (uint16_t)SLIP_MIN(space, 65535u);
        c->rcv_adv = c->rcv_nxt + r.window;
    } else if (!(flags & WIRE_TCP_RST) || (flags & WIRE_TCP_ACK)) {
        r.opts.has_ts = (c->flags & TCPF_TS_OK) != 0;
        r.window = (flags & WIRE_TCP_RST) ? 0 : select_window(c);
    }
    if (r.opts.has_ts) {
        r.opts.tsval = tsval_cookie ? *tsval_cookie : tcp_ts_now(env->now) + c->ts_offset;
        r.opts.tsecr = c->ts_recent;
    }
    /* RFC 2018 §4: report what we hold out of order, as long as the options fit beside data. */
    bool dsack = c->dsack.start != c->dsack.end;
    if (!syn && !(flags & WIRE_TCP_RST) && (c->flags & TCPF_SACK_OK) && (c->nrsack || dsack)) {
        uint32_t optroom = c->mss > len ? c->mss - len : 0;
        uint32_t used = r.opts.has_ts ? 12 : 0;
        uint32_t n = optroom > used + 4 ? (optroom - used - 4) / 8 : 0;
        n = SLIP_MIN(n, (uint32_t)WIRE_TCP_MAX_SACK);
        unsigned k = 0;
        if (dsack && n) {
            /* RFC 2883 §4: the duplicate first, then the usual blocks (the one holding the
             * latest segment, which holds a duplicate of out-of-order data, comes next). */
            r.opts.sack[k].left = c->dsack.start;
            r.opts.sack[k].right = c->dsack.end;
            k++;
            c->dsack.start = c->dsack.end = 0;
            sh->c.dsacks_out++;
        }
        for (unsigned q = 0; q < c->nrsack && k < n; q++, k++) {
            r.opts.sack[k].left = c->rsack[q].start;
            r.opts.sack[k].right = c->rsack[q].end;
        }
        r.opts.nsack = (uint8_t)k;
    }
    size_t hl = wire_tcp__emit(&r, buf);
    if (hl + len > sizeof(buf))
        return -EMSGSIZE;
    if (len)
        sndq_copy(env->pool, c, seq - c->snd_q_seq, buf + hl, len);
    if (v6) {
        rc = tcp6__send(env, c, &rt6, buf, hl + len, ecn);
    } else {
        wire_tcp__set_csum(buf, hl + len, c->laddr, c->raddr);
        struct ip_tx tx = { .src = c->laddr, .dst = c->raddr, .proto = WIRE_IPPROTO_TCP, .ttl = IP_DEFAULT_TTL,
                            .tos = ecn, .df = true };
        struct iovec iov = { buf, hl + len };
        rc = ip_output__send(env, &rt, &tx, &iov, 1);
    }
    if (rc == -EMSGSIZE) {
        /* The path MTU dropped below our MSS: shrink and let the caller retry. */
        uint16_t m = tcp_conn__route_mss(env, c);
        if (m < c->mss) {
            c->mss = m;
            sh->c.pmtu_reductions++;
        }
        return rc;
    }
    if (rc < 0) {
        if (rc == -ENOBUFS) {
            sh->c.no_frame++;
            c->st.no_frame++;
        }
        return rc;
    }
    sh->c.segs_out++;
    c->st.segs_out++;
    if (flags & WIRE_TCP_ACK) {
        if (c->ooo_head != SLIP_NIL) {
            /* An ACK with a hole open: counted per RCV.NXT for SACK compression (tcp_input.c). */
            if (c->comp_rcv_nxt != c->rcv_nxt) {
                c->comp_rcv_nxt = c->rcv_nxt;
                c->comp_dups = 0;
            }
            if (c->comp_dups < UINT8_MAX)
                c->comp_dups++;
        }
        c->comp_segs = 0;
        c->last_ack_sent = c->rcv_nxt;
        c->rcv_unacked = 0;
        c->flags &= ~(TCPF_ACK_NOW | TCPF_ACK_PENDING);
        tcp_timer__stop(c, TT_DELACK);
    }
    return 0;
}

int tcp_output__segment(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, uint32_t seq,
                        uint32_t len, uint8_t flags)
{
    int rc = xmit(env, sh, c, seq, len, flags, NULL);
    if (rc == 0 && seq_lt(seq, c->snd_max) && (len || (flags & (WIRE_TCP_SYN | WIRE_TCP_FIN)))) {
        sh->c.retransmits++;
        c->st.retransmits++;
        c->st.retrans_bytes += len;
        tcp_undo__retransmitted(c, len, env->now);
        /* Karn: a retransmitted segment's ACK is ambiguous; stop timing it. */
        if ((c->flags & TCPF_RTT_TIMING) && seq_leq(seq, c->rt_seq) && seq_lt(c->rt_seq, seq + len + 1))
            c->flags &= ~TCPF_RTT_TIMING;
    }
    if (rc == 0 && len)
        c->last_data_tx = env->now;     /* TCP_INFO last_data_sent */
    if (rc == 0 && !(flags & (WIRE_TCP_SYN | WIRE_TCP_RST)) && (len || (flags & WIRE_TCP_FIN))) {
        /* RFC 8985 §5.2: remember when this range left; RFC 6937: count what recovery sent. */
        tcp_rack__sent(c, seq, seq + len + !!(flags & WIRE_TCP_FIN), env->now);
        if (c->flags & TCPF_RECOVERY)
            c->prr_out += len ? len : 1;
    }
    return rc;
}

int tcp_output__ack(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    /* SND.MAX, not SND.NXT: after a timeout pulled SND.NXT back, the peer may already hold
     * data beyond it and would find an ACK at SND.NXT out of window (FreeBSD does the same). */
    return xmit(env, sh, c, c->snd_max, 0, WIRE_TCP_ACK, NULL);
}

int tcp_output__rst(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    int rc = xmit(env, sh, c, c->snd_max, 0, WIRE_TCP_RST | WIRE_TCP_ACK, NULL);
    if (rc == 0)
        sh->c.rst_out++;
    return rc;
}

int tcp_output__probe(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    return xmit(env, sh, c, c->snd_una - 1, 0, WIRE_TCP_ACK, NULL);
}

void tcp_output__challenge_ack(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    /* RFC 5961 §7: bound the challenge ACKs we send, so they cannot be used as an amplifier or
     * a side channel; the limit is per second for the whole stack (as Linux's sysctl). */
    if (env->now - sh->challenge_window >= SLIP_SEC) {
        sh->challenge_window = env->now;
        sh->challenge_count = 0;
    }
    if (sh->challenge_count >= TCP_CHALLENGE_ACK_LIMIT) {
        sh->c.challenge_ack_limited++;
        return;
    }
    sh->challenge_count++;
    sh->c.challenge_acks++;
    c->st.challenge_acks++;
    tcp_output__ack(env, sh, c);
}

void tcp_output__rst_reply(struct ip_env *env, struct tcp_shared *sh, const struct tcp_seg *s)
{
    /* RFC 9293 §3.10.7.1: never answer a RST; with ACK, <SEQ=SEG.ACK><CTL=RST>; without,
     * <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>. */
    if (s->flags & WIRE_TCP_RST)
        return;
    struct tcp_conn tmp;
    memset(&tmp, 0, sizeof(tmp));
    tcp_seg__name(&tmp, s);
    tmp.mss = TCP_MSS_NO_OPTION;
    int rc;
    if (s->flags & WIRE_TCP_ACK) {
        rc = xmit(env, sh, &tmp, s->ack, 0, WIRE_TCP_RST, NULL);
    } else {
        tmp.rcv_nxt = s->seq + tcp_seg_len(s);
        rc = xmit(env, sh, &tmp, 0, 0, WIRE_TCP_RST | WIRE_TCP_ACK, NULL);
    }
    if (rc == 0)
        sh->c.rst_out++;
}

void tcp_output__synack_cookie(struct ip_env *env, struct tcp_shared *sh, const struct tcp_conn *l,
                               const struct tcp_seg *s, uint32_t iss, uint16_t mss, uint32_t tsval)
{
    struct tcp_conn tmp;
    memset(&tmp, 0, sizeof(tmp));
    tcp_seg__name(&tmp, s);
    tmp.rcvbuf = l->rcvbuf;
    tmp.buf_lock = l->buf_lock;
    tmp.user_mss = l->user_mss;
    tmp.tclass = l->tclass;
    tmp.hops = l->hops;
    tmp.mss = mss;
    tmp.rcv_nxt = s->seq + 1;
    tmp.rcv_mss = TCP_MSS_NO_OPTION;
    const struct wire_tcp_opts *o = &s->th.opts;
    if (o->has_wscale) {
        tmp.flags |= TCPF_WS_OK;
        tmp.rcv_wscale = tcp_conn__wscale(sh, &tmp);
    }
    if (o->has_ts) {
        tmp.flags |= TCPF_TS_OK;
        tmp.ts_recent = o->tsval;
        if (o->sack_ok)
            tmp.flags |= TCPF_SACK_OK;
    }
    if (xmit(env, sh, &tmp, iss, 0, WIRE_TCP_SYN | WIRE_TCP_ACK, o->has_ts ? &tsval : NULL) == 0)
        sh->c.syncookies_sent++;
}

uint32_t tcp_flight(const struct tcp_conn *c)
{
    if ((c->flags & TCPF_SACK_OK) && (c->flags & (TCPF_RECOVERY | TCPF_LOSS)))
        return tcp_rack__pipe(c);
    return c->snd_max - c->snd_una;
}

static void start_rtt(struct ip_env *env, struct tcp_conn *c, uint32_t seq)
{
    if (c->flags & TCPF_RTT_TIMING)
        return;
    c->flags |= TCPF_RTT_TIMING;
    c->rt_seq = seq;
    c->rt_time = env->now;
}

/* Sender-side decision for a segment of len new bytes (RFC 9293 §3.8.6.2.1, RFC 1122 §4.2.3.4
 * with Nagle, RFC 896): full segments go; a partial one goes when it empties the queue and
 * neither cork nor MSG_MORE holds it and (TCP_NODELAY or no partial segment is unacknowledged:
 * Minshall's refinement, as Linux), or when it is at least half the largest window offered.
 * MSG_MORE holds only in the output of the send that carried it (Linux's tcp_push): an ACK
 * later lets the tail go by the rules above. */
static bool may_send_partial(const struct tcp_conn *c, uint32_t len, uint32_t left)
{
    if (c->flags & TCPF_PUSH_HELD)
        return len == left;
    bool hold = (c->flags & (TCPF_CORK | TCPF_AUTOCORK)) || ((c->flags & TCPF_MORE) && c->in_send);
    if (len == left && !hold) {
        if ((c->flags & TCPF_NODELAY) || !seq_gt(c->snd_sml, c->snd_una))
            return true;
    }
    if (c->max_sndwnd && len >= c->max_sndwnd / 2 && !hold)
        return true;
    return false;
}

/* Data waits that cwnd would let out but the peer's receive window does not. */
static bool rwnd_held(const struct tcp_conn *c, uint32_t data_end, uint32_t dmss)
{
    if (!seq_lt(c->snd_nxt, data_end))
        return false;
    uint32_t next = SLIP_MIN(data_end - c->snd_nxt, dmss);
    return tcp_flight(c) + next <= c->cwnd && seq_gt(c->snd_nxt + next, c->snd_una + c->snd_wnd);
}

/* Linux's chrono for TCP_INFO: busy while data is queued; limited by the receive window while
 * data waits that cwnd would let out but the peer's window does not; limited by the send buffer
 * (Linux tcp_cwnd_validate) from a send after which nothing queued is left unsent, cwnd was not
 * what held the sender back, and the writer had found the buffer full: the path then idles for
 * want of data the buffer could not take. That limit ends when a third of the buffer is free
 * again (Linux's sk_stream_write_space clears SOCK_NOSPACE there). Time the buffer is full
 * while cwnd keeps the data queued is busy time, not this. */
static void chrono_update(struct tcp_conn *c, uint32_t data_end, bool by_rwnd, bool sent, slip_time_t now)
{
    if (c->sndbuf_full && c->sndbuf - SLIP_MIN(c->sndq.bytes, c->sndbuf) >= c->sndq.bytes / 2) {
        c->sndbuf_full = 0;
        tcp_chrono__stop(c, TCP_CHRONO_SNDBUF, now);
    }
    if (c->sndq.bytes == 0) {
        tcp_chrono__stop(c, TCP_CHRONO_BUSY, now);
        return;
    }
    if (c->chrono_type == TCP_CHRONO_NONE)
        tcp_chrono__start(c, TCP_CHRONO_BUSY, now);
    if (by_rwnd)
        tcp_chrono__start(c, TCP_CHRONO_RWND, now);
    else
        tcp_chrono__stop(c, TCP_CHRONO_RWND, now);
    /* In slow start cwnd counts as the limit while it is below twice the most in flight in
     * this window (Linux tcp_is_cwnd_limited, as the ACK path uses it). */
    bool cwnd_limited = c->cwnd_limited || (c->cwnd < c->ssthresh && c->cwnd < 2 * c->max_flight);
    if (sent && c->sndbuf_full && !seq_lt(c->snd_nxt, data_end) && !cwnd_limited &&
        (c->state == TCPS_ESTABLISHED || c->state == TCPS_CLOSE_WAIT))
        tcp_chrono__start(c, TCP_CHRONO_SNDBUF, now);
}

/* Linux's tcp_cwnd_validate (the idea of RFC 7661): after a send, remember per window (until
 * SND.UNA passes what was then SND.NXT) whether cwnd was what stopped the sender, else the most
 * that was in flight. The ACK path grows cwnd only when it was used (tcp_input.c). */
static void cwnd_validate(struct tcp_conn *c, uint32_t data_end, uint32_t dmss)
{
    uint32_t flight = tcp_flight(c);
    bool limited = flight >= c->cwnd ||
                   (seq_lt(c->snd_nxt, data_end) && flight + SLIP_MIN(data_end - c->snd_nxt, dmss) > c->cwnd);
    if (!seq_lt(c->snd_una, c->cwnd_usage_seq) || limited || (!c->cwnd_limited && flight > c->max_flight)) {
        c->cwnd_limited = limited;
        c->max_flight = flight;
        c->cwnd_usage_seq = c->snd_nxt;
    }
}

/* ---- pacing (BBR draft-cardwell-iccrg-bbr-congestion-control-00 §4.2.1-4.2.2) ----
 * A token bucket of depth pace_quantum filled at pacing_rate: pace_vt is the time at which the
 * bucket was (or will be) empty, never earlier than one full bucket ago. A segment of len bytes
 * leaves when the bucket holds len, so the bytes sent in any interval T are at most
 * pacing_rate * T + pace_quantum. Only connections with a pacing rate (BBR) are paced. */
static slip_time_t pace_cost(const struct tcp_conn *c, uint32_t bytes)
{
    return (slip_time_t)((unsigned __int128)bytes * SLIP_SEC / c->pacing_rate);
}

/* The bucket's empty time now, the burst allowance applied. */
static slip_time_t pace_base(const struct tcp_conn *c, slip_time_t now)
{
    slip_time_t full = pace_cost(c, SLIP_MAX(c->pace_quantum, 2 * tcp_output__data_mss(c)));
    slip_time_t floor = now > full ? now - full : 0;
    return SLIP_MAX(c->pace_vt, floor);
}

static bool paced(const struct tcp_conn *c)
{
    return c->pacing_rate && tcp_rate__on(c);
}

/* Open state (outside SACK recovery): the window left for new segments. RFC 3042 limited
 * transmit: the first two duplicate ACKs each let one new segment beyond cwnd out, so that a
 * small window still produces DupThresh ACKs. */
static uint32_t open_usable(const struct tcp_conn *c, uint32_t dmss)
{
    uint32_t lt = 0;
    if (!(c->flags & TCPF_RECOVERY) && c->dupacks && c->dupacks < 3 && c->snd_nxt == c->snd_max)
        lt = c->dupacks * dmss;
    uint32_t wnd = SLIP_MIN(c->snd_wnd, c->cwnd + lt);
    uint32_t inflight = c->snd_nxt - c->snd_una;
    return wnd > inflight ? wnd - inflight : 0;
}

/* MSG_EOR (as Linux since 4.8): a segment of [seq, seq+len) stops at the end of a record;
 * *rec_end says it ends at one. Only connections that sent a record walk the queue. */
static uint32_t eor_clamp(const struct pkt_pool *pool, const struct tcp_conn *c, uint32_t seq, uint32_t len,
                          bool *rec_end)
{
    *rec_end = false;
    if (!c->eor_recs || !len || seq_lt(seq, c->snd_q_seq))
        return len;
    uint32_t off = seq - c->snd_q_seq, pos = 0;
    for (slip_idx_t b = c->sndq.head; b != SLIP_NIL; b = pkt__meta(pool, b)->next) {
        const struct pkt_meta *m = pkt__meta(pool, b);
        uint32_t end = pos + m->len;
        if (end >= off + len && !(end == off + len && (m->sflags & PKT_SND_EOR)))
            return len;
        if (end > off && (m->sflags & PKT_SND_EOR)) {
            *rec_end = true;
            return end - off;
        }
        pos = end;
    }
    return len;
}

/* Open state: the segment from seq, with usable bytes of window and left bytes of data after
 * seq (fin_last: the FIN follows them). Its length in *len, whether the FIN rides on it in *fin
 * and whether it ends a record in *rec_end; false when nothing may leave now. */
static bool open_next(const struct pkt_pool *pool, const struct tcp_conn *c, uint32_t seq, uint32_t usable,
                      uint32_t left, bool fin_last, uint32_t dmss, uint32_t *len, bool *fin, bool *rec_end)
{
    uint32_t n = eor_clamp(pool, c, seq, SLIP_MIN(SLIP_MIN(left, usable), dmss), rec_end);
    /* The FIN rides on the segment that carries the last byte (or alone). */
    *fin = fin_last && n == left;
    *len = n;
    if (n == 0 && !*fin)
        return false;
    /* Nagle holds a partial last segment; one cut short by a record end with more data after it
     * goes (Linux tests Nagle on the queue's last skb only). */
    if (n > 0 && n < dmss && !seq_lt(seq, c->snd_max) && !*fin && !(*rec_end && n < left) &&
        !may_send_partial(c, n, left))
        return false;
    return true;
}

/* Whether [seq, seq+len), about to leave, is the last segment this output sends: the next one
 * would find no room in the window, would be held (Nagle, cork), would wait for pacing, or
 * there is nothing more to send. In SACK recovery (sack_rec), pipe is pipe before this segment. */
static bool burst_ends(const struct ip_env *env, const struct tcp_conn *c, uint32_t seq, uint32_t len,
                       bool rexmit, bool sack_rec, uint32_t pipe, uint32_t data_end, bool fin_wanted,
                       uint32_t dmss, slip_time_t pace_at)
{
    if (pace_at && pace_at + pace_cost(c, dmss) > env->now)
        return true;
    uint32_t next = seq + len;
    if (sack_rec) {
        /* What this segment adds to pipe (a resent lost range left it; new data was never in). */
        if (pipe + len + dmss > c->cwnd)
            return true;
        if (rexmit && c->undo.frto != 2 && tcp_rack__lost_above(c, next))
            return false;
        uint32_t nseq = rexmit ? c->snd_max : next;
        return !seq_lt(nseq, data_end) || seq_geq(nseq, c->snd_una + c->snd_wnd);
    }
    uint32_t usable = open_usable(c, dmss);
    usable = usable > len ? usable - len : 0;
    uint32_t left = seq_lt(next, data_end) ? data_end - next : 0;
    uint32_t nlen;
    bool nfin, nrec;
    return !open_next(env->pool, c, next, usable, left, fin_wanted && next + left == data_end, dmss, &nlen, &nfin,
                      &nrec);
}

int tcp_output(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    int rc = 0;
    if (c->state == TCPS_CLOSED || c->state == TCPS_LISTEN || c->state == TCPS_TIME_WAIT) {
        if (c->state == TCPS_TIME_WAIT && (c->flags & TCPF_ACK_NOW))
            tcp_output__ack(env, sh, c);
        return 0;
    }
    /* Our SYN (or SYN-ACK) first; nothing else until it is acknowledged. */
    if (c->snd_una == c->iss && (c->state == TCPS_SYN_SENT || c->state == TCPS_SYN_RECEIVED)) {
        if (c->snd_nxt == c->iss) {
            uint8_t f = WIRE_TCP_SYN | (c->state == TCPS_SYN_RECEIVED ? WIRE_TCP_ACK : 0);
            rc = tcp_output__segment(env, sh, c, c->iss, 0, f);
            if (rc == 0) {
                if (c->snd_max == c->iss) {
                    start_rtt(env, c, c->iss);
                    c->rtx_stamp = env->now;    /* TCP_USER_TIMEOUT counts from the first SYN */
                }
                c->snd_nxt = c->iss + 1;
                c->snd_max = seq_max(c->snd_max, c->snd_nxt);
            }
            if (!tcp_timer__armed(c, TT_REXMT))
                tcp_timer__rexmt_restart(env, sh, c);
        } else if (c->flags & TCPF_ACK_NOW) {
            tcp_output__ack(env, sh, c);
        }
        return rc;
    }

    uint32_t data_end = c->snd_q_seq + c->sndq.bytes;
    uint32_t fin_seq = data_end;
    bool fin_wanted = (c->flags & TCPF_FIN_QUEUED) != 0;
    uint32_t dmss = tcp_output__data_mss(c);
    bool sent = false, sent_new = false;
    bool sack_rec = (c->flags & TCPF_SACK_OK) && (c->flags & (TCPF_RECOVERY | TCPF_LOSS));
    bool was_idle = c->snd_una == c->snd_max;
    bool pace_wait = false;

    for (int guard = 0; guard < 4096; guard++) {
        uint32_t seq, len;
        bool rexmit = false;
        uint8_t flags = WIRE_TCP_ACK;
        uint32_t pipe = 0;
        bool rec_end = false;

        if (sack_rec) {
            /* RFC 6675 §5 step (C) with RACK's marks (as Linux): while pipe leaves room in cwnd,
             * first what is marked lost, then new data. */
            pipe = tcp_rack__pipe(c);
            if (pipe + dmss > c->cwnd)
                break;
            /* F-RTO step 2b (RFC 5682 §3, tcp_undo.c): new data only, until the next ACK. */
            if (c->undo.frto != 2 && tcp_rack__next_lost(c, &seq, &len)) {
                rexmit = true;
            } else if (seq_lt(c->snd_max, data_end) || (fin_wanted && !(c->flags & TCPF_FIN_SENT))) {
                seq = c->snd_max;
                len = seq_lt(seq, data_end) ? data_end - seq : 0;
            } else {
                break;
            }
            len = SLIP_MIN(len, dmss);
            if (rexmit && seq_gt(seq + len, data_end))
                len = seq_gt(data_end, seq) ? data_end - seq : 0;   /* the rest is the FIN */
            if (!rexmit) {
                uint32_t wend = c->snd_una + c->snd_wnd;
                if (seq_geq(seq, wend))
                    break;
                len = SLIP_MIN(len, wend - seq);
            }
            len = eor_clamp(env->pool, c, seq, len, &rec_end);
            if (!rexmit && len < dmss && !(rec_end && seq + len != data_end) &&
                !may_send_partial(c, len, data_end - seq))
                break;
            if (seq_geq(seq + len, data_end) && fin_wanted && seq_leq(seq, fin_seq) &&
                (!rexmit || seq_leq(fin_seq, c->snd_max)))
                flags |= WIRE_TCP_FIN;
            if (len == 0 && !(flags & WIRE_TCP_FIN))
                break;
        } else {
            seq = c->snd_nxt;
            uint32_t left = seq_lt(seq, data_end) ? data_end - seq : 0;
            bool fin_now;
            if (!open_next(env->pool, c, seq, open_usable(c, dmss), left, fin_wanted && seq + left == fin_seq, dmss,
                           &len, &fin_now, &rec_end))
                break;
            rexmit = seq_lt(seq, c->snd_max);
            /* A FIN alone needs no window; data with it respects what was computed above. */
            if (fin_now)
                flags |= WIRE_TCP_FIN;
        }
        slip_time_t pace_at = 0;
        if (len && paced(c)) {
            pace_at = pace_base(c, env->now) + pace_cost(c, len);
            if (pace_at > env->now) {
                /* The bucket does not hold this segment yet: come back when it does. */
                pace_wait = true;
                tcp_timer__set(sh, c, TT_PACE, pace_at);
                c->st.paced_waits++;
                sh->c.paced_waits++;
                break;
            }
        }
        /* PSH on the segment that empties the queue, on one that ends a record (MSG_EOR) and on
         * the last of each burst of two or more (as Linux, which ends each TSO packet with it
         * but resends a lone lost segment, or sends one new segment per ACK in recovery,
         * without it), unless the application said more follows (MSG_MORE: Linux marks no push
         * for it either). RFC 9293 §3.9.1: PSH is advisory; receivers' GRO delivers at it. */
        if (len && !(c->flags & TCPF_MORE) &&
            (seq + len == data_end || rec_end ||
             (sent && burst_ends(env, c, seq, len, rexmit, sack_rec, pipe, data_end, fin_wanted, dmss, pace_at))))
            flags |= WIRE_TCP_PSH;
        rc = tcp_output__segment(env, sh, c, seq, len, flags);
        if (rc < 0)
            break;
        if (pace_at)
            c->pace_vt = pace_at;
        sent = true;
        uint32_t end = seq + len + ((flags & WIRE_TCP_FIN) ? 1 : 0);
        if (flags & WIRE_TCP_FIN)
            c->flags |= TCPF_FIN_SENT;
        if (rexmit && sack_rec) {
            c->high_rxt = seq_max(c->high_rxt, end);
        } else {
            if (seq_geq(seq, c->snd_max) && len)
                start_rtt(env, c, seq);
            if (sack_rec)
                c->high_rxt = seq_max(c->high_rxt, end);
            if (seq_gt(end, c->snd_nxt))
                c->snd_nxt = end;
        }
        if (len && len < dmss && seq_gt(seq + len, c->snd_sml))
            c->snd_sml = seq + len;
        if (seq_gt(end, c->snd_max)) {
            /* bytes_out counts each data byte once; resent bytes go to retrans_bytes. */
            if (seq_gt(seq + len, c->snd_max))
                c->st.bytes_out += seq + len - seq_max(seq, c->snd_max);
            c->snd_max = end;
            sent_new = true;
        }
        if (!tcp_timer__armed(c, TT_REXMT))
            tcp_timer__rexmt_restart(env, sh, c);
        tcp_timer__stop(c, TT_PERSIST);
        c->probe_stamp = 0;     /* the window let data out: no zero-window episode now */
        if (flags & WIRE_TCP_FIN)
            break;
    }
    if (sent_new)
        tcp_rack__schedule_pto(env, sh, c);    /* RFC 8985 §7.2: (re)armed on new data */
    if (sent)
        cwnd_validate(c, data_end, dmss);
    if (!pace_wait && tcp_rate__on(c))
        tcp_rate__check_app_limited(c, data_end, dmss, sack_rec && tcp_rack__has_lost(c));
    if (was_idle && sent_new)
        c->rtx_stamp = env->now;    /* TCP_USER_TIMEOUT counts from here (tcp_timer.c) */
    bool by_rwnd = rwnd_held(c, data_end, dmss);
    chrono_update(c, data_end, by_rwnd, sent, env->now);
    if (by_rwnd && tcp_rate__on(c))
        c->rate.rwnd_held = 1;      /* for BBR's STARTUP exit (cc/bbr.c check_full_pipe) */
    if (rc == -ENOBUFS || rc == -EMSGSIZE) {
        /* No frame now (or a smaller MTU): retry from the retransmission timer soon. */
        if (!tcp_timer__armed(c, TT_REXMT) || c->timer[TT_REXMT] > env->now + TCP_RTO_MIN)
            tcp_timer__set(sh, c, TT_REXMT, env->now + (rc == -EMSGSIZE ? SLIP_MSEC : TCP_RTO_MIN));
    }
    /* RFC 9293 §3.8.6.1: data waiting, a window too small to use (zero, or below what sender
     * SWS avoidance lets out) and nothing in flight to elicit an ACK: the persist timer probes,
     * or after it sends what fits (the SWS override timeout of §3.8.6.2.1). Data that TCP_CORK
     * or MSG_MORE hold with nothing in flight is sent by the same timer: the ceiling of tcp(7)
     * ("at most 200 ms"), which Linux implements with its probe timer after one RTO too. */
    bool held = (c->flags & (TCPF_CORK | TCPF_MORE)) != 0;
    if (seq_lt(c->snd_nxt, data_end) && c->snd_max == c->snd_una && !tcp_timer__armed(c, TT_REXMT) &&
        !tcp_timer__armed(c, TT_PERSIST) && (held || c->snd_wnd < SLIP_MIN(dmss, data_end - c->snd_nxt))) {
        c->persist_shift = 0;
        tcp_timer__set(sh, c, TT_PERSIST, env->now + tcp_rto(c));
    }
    if (!sent && (c->flags & TCPF_ACK_NOW)) {
        int arc = tcp_output__ack(env, sh, c);
        if (arc == -ENOBUFS) {
            /* Still owed: the delayed-ACK timer tries again. */
            c->flags |= TCPF_ACK_PENDING;
            tcp_timer__set(sh, c, TT_DELACK, env->now + TCP_DELACK_TIME);
        }
    }
    return rc;
}
