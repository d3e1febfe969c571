/* Explicit Congestion Notification (RFC 3168) for TCP: the negotiation in the SYNs (§6.1.1),
 * ECT(0) on new data (§6.1.4-6.1.5), the receiver's ECE echo of a CE mark until the sender's CWR
 * (§6.1.3), and the sender's response to ECE: one reduction per window, as for a loss
 * (§6.1.2). When to offer it follows Linux's net.ipv4.tcp_ecn: 0 never, 1 ask on connections we
 * open and accept on those we accept, 2 (Linux's default) only accept. */
#include "tcp/tcp_var.h"

#define ECN_MASK    0x03u
#define ECN_ECT0    0x02u
#define ECN_CE      0x03u

/* RFC 3168 §6.1.1: an ECN-setup SYN has ECE and CWR; an ECN-setup SYN-ACK has ECE, not CWR. */
void tcp_ecn__syn_in(const struct tcp_shared *sh, struct tcp_conn *c, const struct tcp_seg *s, bool active)
{
    uint8_t f = s->flags & (WIRE_TCP_ECE | WIRE_TCP_CWR);
    c->ecn &= (uint8_t)~(TCP_ECN_OK | TCP_ECN_ECE | TCP_ECN_CWR);
    if (active) {
        if ((c->ecn & TCP_ECN_SYN_SENT) && f == WIRE_TCP_ECE)
            c->ecn |= TCP_ECN_OK;
    } else if (sh->ecn && f == (WIRE_TCP_ECE | WIRE_TCP_CWR)) {
        c->ecn |= TCP_ECN_OK;
    }
}

uint8_t tcp_ecn__out(const struct tcp_shared *sh, struct tcp_conn *c, uint8_t *flags, uint32_t seq, uint32_t len)
{
    uint8_t f = *flags;
    if (f & WIRE_TCP_RST)
        return 0;
    if (f & WIRE_TCP_SYN) {
        if (!(f & WIRE_TCP_ACK)) {
            /* §6.1.1: ask when configured to (tcp_ecn = 1); §6.1.1.1 lets a retransmitted SYN
             * go without, but Linux keeps asking, and so do we. */
            if (sh->ecn == 1) {
                *flags |= WIRE_TCP_ECE | WIRE_TCP_CWR;
                c->ecn |= TCP_ECN_SYN_SENT;
            }
        } else if (c->ecn & TCP_ECN_OK) {
            *flags |= WIRE_TCP_ECE;
        }
        return 0;               /* §6.1.1: SYNs are not ECN-capable */
    }
    if (!(c->ecn & TCP_ECN_OK))
        return 0;
    /* §6.1.3: every ACK echoes the CE mark until a CWR arrives. */
    if ((c->ecn & TCP_ECN_ECE) && (f & WIRE_TCP_ACK))
        *flags |= WIRE_TCP_ECE;
    /* §6.1.5: retransmissions are not ECN-capable; §6.1.4: nor pure ACKs and window probes. */
    if (!len || seq_lt(seq, c->snd_max))
        return 0;
    /* §6.1.2: CWR on the first new data after the reduction. */
    if (c->ecn & TCP_ECN_CWR) {
        *flags |= WIRE_TCP_CWR;
        c->ecn &= (uint8_t)~TCP_ECN_CWR;
    }
    return ECN_ECT0;
}

bool tcp_ecn__seg_in(struct tcp_shared *sh, struct tcp_conn *c, const struct tcp_seg *s)
{
    if (!(c->ecn & TCP_ECN_OK))
        return false;
    /* §6.1.3: CWR ends the echo; a CE in this same segment starts it again. */
    if (s->flags & WIRE_TCP_CWR)
        c->ecn &= (uint8_t)~TCP_ECN_ECE;
    if ((s->tos & ECN_MASK) == ECN_CE) {
        sh->c.ecn_ce_in++;
        c->ecn |= TCP_ECN_ECE;
        return true;            /* Linux: the echo leaves at once, not with a delayed ACK */
    }
    return false;
}

void tcp_ecn__ack_in(struct ip_env *env, struct tcp_shared *sh, struct tcp_conn *c, const struct tcp_seg *s)
{
    if (!(c->ecn & TCP_ECN_OK) || !(s->flags & WIRE_TCP_ECE) || (s->flags & WIRE_TCP_SYN))
        return;
    /* §6.1.2: once per window of data, and not again in a recovery that already reduced. */
    if ((c->ecn & TCP_ECN_WAIT) && seq_lt(c->snd_una, c->ecn_high))
        return;
    c->ecn &= (uint8_t)~TCP_ECN_WAIT;
    if (c->flags & (TCPF_RECOVERY | TCPF_LOSS))
        return;
    const struct tcp_cc_ops *cc = tcp_cc__get(c->cc_algo);
    if (cc->cong_control) {
        /* BBR version 1 does not respond to ECN (as Linux's bbr): CWR still tells the peer
         * its echo was heard (docs/COMPLIANCE.md). */
        c->ecn_high = c->snd_max;
        c->ecn |= TCP_ECN_CWR | TCP_ECN_WAIT;
        return;
    }
    c->ssthresh = cc->ssthresh(c, env->now);
    c->cwnd = SLIP_MAX(c->ssthresh, tcp_output__data_mss(c));
    c->ecn_high = c->snd_max;
    c->ecn |= TCP_ECN_CWR | TCP_ECN_WAIT;
    c->undo.kind = TCP_UNDO_NONE;       /* a mark is not a loss a D-SACK could take back */
    c->st.ecn_reductions++;
    sh->c.ecn_reductions++;
}
