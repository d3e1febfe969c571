/* Timer handlers (one per kind, described in tcp_timer.h), the poll that runs them, and the RTO
 * estimator of RFC 6298. */
#include <errno.h>

#include "tcp/tcp_var.h"

void tcp_timer__set(struct tcp_shared *sh, struct tcp_conn *c, int kind, slip_time_t when)
{
    c->timer[kind] = when;
    if (when < sh->next_deadline)
        sh->next_deadline = when;
}

void tcp_timer__stop_all(struct tcp_conn *c)
{
    for (int k = 0; k < TT_NTIMERS; k++)
        c->timer[k] = SLIP_TIME_NEVER;
}

/* RFC 6298 §2.2 (first sample) and §2.3 (later ones), alpha = 1/8, beta = 1/4, K = 4. The clock
 * granularity G is 1 µs here. The floor of §2.4 goes on the variance term, as Linux does
 * (tcp_set_rto: RTO = SRTT + max(4*RTTVAR, rto_min)), not on the whole RTO: on a 50 ms path the
 * RTO is 250 ms, not 200 ms, so a delayed ACK plus some queueing does not look like a loss
 * (docs/COMPLIANCE.md). */
void tcp_rtt__sample(struct tcp_conn *c, slip_time_t rtt)
{
    uint64_t r = rtt / SLIP_USEC;
    if (r == 0)
        r = 1;
    if (r > UINT32_MAX / 8)
        r = UINT32_MAX / 8;
    if (c->srtt_us == 0) {
        c->srtt_us = (uint32_t)r;
        c->rttvar_us = (uint32_t)(r / 2);
    } else {
        uint64_t diff = c->srtt_us > r ? c->srtt_us - r : r - c->srtt_us;
        c->rttvar_us = (uint32_t)((3ull * c->rttvar_us + diff) / 4);
        c->srtt_us = (uint32_t)((7ull * c->srtt_us + r) / 8);
    }
    uint64_t var4 = SLIP_MAX(4ull * c->rttvar_us, (uint64_t)(TCP_RTO_MIN / SLIP_USEC));
    c->rto_us = (uint32_t)SLIP_MIN((uint64_t)c->srtt_us + var4, (uint64_t)UINT32_MAX);
}

slip_time_t tcp_rto(const struct tcp_conn *c)
{
    slip_time_t rto = (slip_time_t)c->rto_us * SLIP_USEC;
    /* RFC 6298 §2.4 says 1 s minimum; we follow Linux (200 ms on the variance term, above, so
     * this bound only matters for a hand-set rto_us: docs/COMPLIANCE.md). */
    if (rto < TCP_RTO_MIN)
        rto = TCP_RTO_MIN;
    for (unsigned k = 0; k < c->rxt_shift && rto < TCP_RTO_MAX; k++)
        rto *= 2;       /* §5.5: back off */
    return rto > TCP_RTO_MAX ? TCP_RTO_MAX : rto;
}

/* TCP_USER_TIMEOUT (RFC 5482) watches the states in which Linux's tcp_write_timeout does: the
 * synchronized ones and our own SYN (connect(), or a simultaneous open that took us to
 * SYN-RECEIVED). A passive child still in SYN-RECEIVED is what Linux keeps as a request
 * socket, whose SYN-ACK retries ignore the option: so does ours. */
static bool user_timeout_on(const struct tcp_conn *c)
{
    return c->user_timeout_ms &&
           (TCPS_HAVEESTABLISHED(c->state) || c->state == TCPS_SYN_SENT ||
            (c->state == TCPS_SYN_RECEIVED && c->parent == SLIP_NIL));
}

static slip_time_t user_timeout(const struct tcp_conn *c)
{
    return (slip_time_t)c->user_timeout_ms * SLIP_MSEC;
}

void tcp_timer__rexmt_restart(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    slip_time_t at = env->now + tcp_rto(c);
    if (user_timeout_on(c) && c->snd_una != c->snd_max) {
        /* Linux tcp_clamp_rto_to_user_timeout: no expiry later than the user timeout, which
         * rexmt_expired then enforces (also when a probe restarts this timer). */
        slip_time_t end = c->rtx_stamp + user_timeout(c);
        if (at > end)
            at = SLIP_MAX(end, env->now + SLIP_MSEC);
    }
    tcp_timer__set(sh, c, TT_REXMT, at);
}

void tcp_timer__keep_restart(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    if (!(c->flags & TCPF_KEEPALIVE))
        return;
    c->keep_probes = 0;
    tcp_timer__set(sh, c, TT_KEEP, env->now + (slip_time_t)c->keepidle * SLIP_SEC);
}

static void timeout_drop(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    sh->c.conn_timeouts++;
    int e = c->soft_error ? c->soft_error : ETIMEDOUT;
    if (TCPS_HAVERCVDSYN(c->state))
        tcp_output__rst(env, sh, c);
    tcp_conn__drop(env, sh, c, e);
}

static void rexmt_expired(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    bool syn_state = c->state == TCPS_SYN_SENT || c->state == TCPS_SYN_RECEIVED;
    if (c->snd_una == c->snd_max && !syn_state) {
        /* Nothing outstanding: this was a retry after running out of frames. */
        tcp_output(env, sh, c);
        return;
    }
    unsigned limit = c->state == TCPS_SYN_SENT ? TCP_SYN_RETRIES
                     : c->state == TCPS_SYN_RECEIVED ? TCP_SYNACK_RETRIES
                     : (c->flags & TCPF_ORPHAN) ? TCP_ORPHAN_RETRIES : TCP_RETRIES2;
    if (c->rxt_shift >= limit) {
        timeout_drop(env, sh, c);
        return;
    }
    /* TCP_USER_TIMEOUT (RFC 5482; Linux tcp_write_timeout): data (or our SYN) unacknowledged
     * for that long ends the connection, whichever of it and the retry count comes first.
     * rtx_stamp: the send that found nothing in flight, the last ACK that moved SND.UNA, or
     * the first transmission of our SYN (Linux: the head segment's send time). */
    if (user_timeout_on(c) && env->now - c->rtx_stamp >= user_timeout(c)) {
        timeout_drop(env, sh, c);
        return;
    }
    c->rxt_shift++;
    sh->c.rto_expiries++;
    c->st.rto_expiries++;
    c->flags &= ~TCPF_RTT_TIMING;   /* Karn */
    if (syn_state) {
        sh->c.syn_rto++;        /* of rto_expiries: our SYN or SYN-ACK (Linux TCPSynRetrans) */
        c->snd_nxt = c->iss;
    } else {
        /* RFC 5681 §3.1 eq. 4 and cwnd = loss window; RFC 6298 §5.4-5.6. ssthresh is set once
         * per loss episode (§3.1: not again when the retransmission is lost, nor when the
         * timeout ends a fast recovery that already reduced it, as Linux tcp_enter_loss). */
        const struct tcp_cc_ops *cc = tcp_cc__get(c->cc_algo);
        bool was_recovery = (c->flags & TCPF_RECOVERY) != 0;
        tcp_undo__begin(c, TCP_UNDO_RTO, env->now);
        if (c->rxt_shift == 1 && !was_recovery)
            c->ssthresh = cc->ssthresh(c, env->now);
        cc->on_rto(c);
        c->cwnd = tcp_output__data_mss(c);
        c->flags &= ~TCPF_RECOVERY;
        c->snd_recover = c->snd_max;
        c->dupacks = 0;
        c->high_rxt = c->snd_una;
        if ((c->flags & TCPF_SACK_OK) && c->ntxr && TCPS_HAVEESTABLISHED(c->state)) {
            /* As Linux (tcp_enter_loss): keep the scoreboard (RFC 6675 §5.1 allows it), mark
             * every unSACKed range lost and resend only those, in order, as cwnd opens. */
            c->flags |= TCPF_LOSS;
            tcp_rack__on_rto(c);
            tcp_undo__frto_start(c, was_recovery);
        } else {
            /* Without SACK (or with nothing recorded) go back to SND.UNA. */
            c->nsb = 0;
            c->snd_nxt = c->snd_una;
        }
        /* RFC 6298 §5.7: after a backed-off RTO the estimate is suspect. */
        if (c->rxt_shift > 3) {
            c->srtt_us = 0;
        }
    }
    tcp_timer__rexmt_restart(env, sh, c);
    tcp_output(env, sh, c);
    if (c->flags & TCPF_LOSS)
        tcp_rack__schedule_pto(env, sh, c);     /* the recovery probe (tcp_rack.c) */
}

static void persist_expired(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    uint32_t data_end = c->snd_q_seq + c->sndq.bytes;
    if (!seq_lt(c->snd_nxt, data_end) || c->snd_max != c->snd_una) {
        c->probe_stamp = 0;
        tcp_output(env, sh, c);
        return;
    }
    if (c->snd_wnd > 0) {
        /* SWS override: the window stayed too small for a full segment; send what fits. */
        uint32_t len = SLIP_MIN(SLIP_MIN(c->snd_wnd, data_end - c->snd_nxt), tcp_output__data_mss(c));
        if (tcp_output__segment(env, sh, c, c->snd_nxt, len, WIRE_TCP_ACK | WIRE_TCP_PSH) == 0) {
            c->snd_nxt += len;
            c->snd_max = seq_max(c->snd_max, c->snd_nxt);
            c->st.bytes_out += len;
            tcp_timer__rexmt_restart(env, sh, c);
            c->persist_shift = 0;
            c->probe_stamp = 0;
            return;
        }
    } else {
        /* As Linux: a peer that answers keeps us probing forever; one that stays silent for
         * TCP_RETRIES2 probes (TCP_ORPHAN_RETRIES once the application closed) is dropped.
         * With TCP_USER_TIMEOUT, probing that has gone on that long ends the connection even
         * while the peer answers with a zero window (Linux tcp_probe_timer: the time counts
         * from the first probe and restarts only when the window opens). 0 = not probing. */
        unsigned max = (c->flags & TCPF_ORPHAN) ? TCP_ORPHAN_RETRIES : TCP_RETRIES2;
        if (!c->probe_stamp)
            c->probe_stamp = SLIP_MAX(env->now, (slip_time_t)1);
        else if (user_timeout_on(c) && env->now - c->probe_stamp >= user_timeout(c)) {
            timeout_drop(env, sh, c);
            return;
        }
        if (c->probes_out >= max) {
            timeout_drop(env, sh, c);
            return;
        }
        c->probes_out++;
        c->st.zero_window_probes++;
        sh->c.zero_window_probes++;
        tcp_output__probe(env, sh, c);
    }
    if (c->persist_shift < 16)
        c->persist_shift++;
    slip_time_t t = tcp_rto(c);
    for (unsigned k = 0; k < c->persist_shift && t < TCP_RTO_MAX; k++)
        t *= 2;
    slip_time_t at = env->now + SLIP_MIN(t, (slip_time_t)TCP_RTO_MAX);
    if (c->probe_stamp && user_timeout_on(c)) {
        /* Linux tcp_clamp_probe0_to_user_timeout: the next expiry no later than the end. */
        slip_time_t end = c->probe_stamp + user_timeout(c);
        if (at > end)
            at = SLIP_MAX(end, env->now + SLIP_MSEC);
    }
    tcp_timer__set(sh, c, TT_PERSIST, at);
}

static void keep_expired(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    if (!(c->flags & TCPF_KEEPALIVE) || !TCPS_HAVEESTABLISHED(c->state) || c->state == TCPS_TIME_WAIT)
        return;
    slip_time_t idle = (slip_time_t)c->keepidle * SLIP_SEC;
    slip_time_t intvl = (slip_time_t)c->keepintvl * SLIP_SEC;
    /* As Linux: while data is outstanding the retransmission timer watches the peer. */
    if (c->snd_max != c->snd_una || c->sndq.bytes > (c->snd_max - c->snd_q_seq)) {
        tcp_timer__set(sh, c, TT_KEEP, env->now + idle);
        return;
    }
    if (c->keep_probes == 0 && env->now < c->last_rx + idle) {
        tcp_timer__set(sh, c, TT_KEEP, c->last_rx + idle);
        return;
    }
    if (c->keep_probes && env->now < c->last_rx + idle + (slip_time_t)c->keep_probes * intvl &&
        c->last_rx + idle > env->now) {
        tcp_timer__set(sh, c, TT_KEEP, c->last_rx + idle);
        return;
    }
    /* With TCP_USER_TIMEOUT the connection ends when the peer has been silent that long and at
     * least one probe went unanswered, whatever TCP_KEEPCNT says (Linux tcp_keepalive_timer). */
    bool dead = user_timeout_on(c) ? c->keep_probes > 0 && env->now - c->last_rx >= user_timeout(c)
                                   : c->keep_probes >= c->keepcnt;
    if (dead) {
        sh->c.keepalive_drops++;
        timeout_drop(env, sh, c);
        return;
    }
    c->keep_probes++;
    c->st.keepalive_probes++;
    tcp_output__probe(env, sh, c);
    tcp_timer__set(sh, c, TT_KEEP, env->now + intvl);
}

static void twomsl_expired(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    if (c->state == TCPS_TIME_WAIT || c->state == TCPS_FIN_WAIT_2)
        tcp_conn__drop(env, sh, c, 0);
}

static void delack_expired(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    if (c->flags & TCPF_ACK_PENDING) {
        c->flags |= TCPF_ACK_NOW;
        tcp_output(env, sh, c);
    }
}

/* The pacing token bucket holds the next segment now (tcp_output.c). */
static void pace_expired(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c)
{
    tcp_output(env, sh, c);
}

typedef void (*timer_fn)(struct ip_env *, struct tcp_shared *, struct tcp_conn *);
static const timer_fn handlers[TT_NTIMERS] = {
    [TT_REXMT] = rexmt_expired,
    [TT_PERSIST] = persist_expired,
    [TT_KEEP] = keep_expired,
    [TT_2MSL] = twomsl_expired,
    [TT_DELACK] = delack_expired,
    [TT_REO] = tcp_rack__reo_timeout,
    [TT_PTO] = tcp_rack__pto_timeout,
    [TT_PACE] = pace_expired,
};

slip_time_t tcp_timer__poll(struct ip_env *env, struct tcp_shared *sh)
{
    if (env->now < sh->next_deadline)
        return sh->next_deadline;
    slip_time_t next = SLIP_TIME_NEVER;
    sh->next_deadline = SLIP_TIME_NEVER;
    for (uint32_t i = 0; i < sh->high_water; i++) {
        struct tcp_conn *c = &sh->conns[i];
        if (c->rcvbuf == 0)
            continue;
        /* Due timers run in deadline order (the lower index first on a tie), each at most once
         * per poll: a poll that comes late finds several due, and order matters. The tail loss
         * probe that takes the RTO's place is set just before it (tcp_rack.c): run by index,
         * the RTO (index 0) would fire first and collapse cwnd although the probe was due. */
        unsigned fired = 0;
        while (c->rcvbuf) {
            int due = -1;
            for (int k = 0; k < TT_NTIMERS; k++)
                if (!(fired & (1u << k)) && c->timer[k] <= env->now &&
                    (due < 0 || c->timer[k] < c->timer[due]))
                    due = k;
            if (due < 0)
                break;
            fired |= 1u << due;
            c->timer[due] = SLIP_TIME_NEVER;
            handlers[due](env, sh, c);
        }
        if (c->rcvbuf == 0)
            continue;
        for (int k = 0; k < TT_NTIMERS; k++)
            next = SLIP_MIN(next, c->timer[k]);
    }
    next = SLIP_MIN(next, sh->next_deadline);
    sh->next_deadline = next;
    return next;
}
