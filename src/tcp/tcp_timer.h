/* TCP timers. Each connection keeps one deadline per kind (SLIP_TIME_NEVER when stopped);
 * tcp_timer__poll() runs the handlers of those that are due and returns the earliest deadline
 * left, so the stack can sleep until then. Nothing here reads a clock: env->now is the time.
 *
 * TT_REXMT   Retransmission (RFC 6298). Armed while data, SYN or FIN is outstanding. On expiry
 *            the RTO doubles (up to TCP_RTO_MAX), cwnd collapses to one segment with ssthresh
 *            set from the flight (RFC 5681 §3.1). With SACK the scoreboard is kept, every
 *            unSACKed range is marked lost and only those are resent as cwnd opens (Linux's
 *            Loss state; forgotten after a third backed-off expiry in case the peer reneged);
 *            without SACK sending starts again from SND.UNA. After TCP_SYN_RETRIES (SYN states) or TCP_RETRIES2 (others)
 *            expiries the connection is dropped with ETIMEDOUT (or the ICMP soft error seen).
 *            It also retries output that failed for lack of frames.
 * TT_PERSIST Zero-window probing (RFC 9293 §3.8.6.1). Armed when data waits, the peer's window is
 *            zero and nothing is in flight (so no TT_REXMT). Each expiry sends a probe (an ACK
 *            with SEG.SEQ = SND.UNA - 1, as Linux does) and backs off exponentially like the RTO;
 *            it never gives up while the peer answers, and drops the connection after
 *            TCP_RETRIES2 unanswered probes (TCP_ORPHAN_RETRIES after close()). When the window
 *            is open but smaller than sender SWS avoidance accepts, the expiry sends what fits
 *            instead (the override timeout of RFC 9293 §3.8.6.2.1).
 * TT_KEEP    Keepalive (RFC 9293 §3.8.4, RFC 1122 §4.2.3.6) with TCP_KEEPIDLE_DEFAULT/INTVL/CNT
 *            semantics: after KEEPIDLE of silence a probe, then one every KEEPINTVL; KEEPCNT
 *            unanswered probes drop the connection with ETIMEDOUT.
 * TT_2MSL    TIME_WAIT lasts 2*MSL (TCP_TIMEWAIT_LEN, 60 s as Linux), then the slot is freed.
 *            Also bounds FIN_WAIT_2 for a connection the application closed (TCP_FIN_TIMEOUT).
 * TT_DELACK  Delayed ACK (RFC 9293 §3.8.6.3, RFC 1122 §4.2.3.2): an ACK owed for less than two
 *            full segments is sent when this fires, TCP_DELACK_TIME (40 ms) after the data.
 * TT_REO     RACK reordering window (RFC 8985 §6.3), SACK connections only: a segment sent before
 *            the most recently delivered one is not yet old enough to be called lost; when this
 *            fires RACK looks again, marks what is now lost and starts recovery.
 * TT_PTO     Tail loss probe (RFC 8985 §7), SACK connections outside recovery: 2*SRTT (+200 ms
 *            when one segment is in flight) after the last new send or advancing ACK, one probe
 *            (new data, else the last segment again) so that a lost tail is repaired by SACK
 *            recovery instead of the RTO. One probe per tail; the RTO is restarted after it.
 * TT_PACE    Pacing (connections with a pacing rate: BBR). Armed when tcp_output held data back
 *            because the pacing token bucket was empty, for when it holds the next segment;
 *            expiry runs tcp_output again. Nanosecond deadline (the stack sleeps whole ms, so
 *            on a quiet stack a wait lasts at least until the next poll). */
#ifndef SLIP_TCP_TIMER_H
#define SLIP_TCP_TIMER_H

#define TT_REXMT   0
#define TT_PERSIST 1
#define TT_KEEP    2
#define TT_2MSL    3
#define TT_DELACK  4
#define TT_REO     5
#define TT_PTO     6
#define TT_PACE    7
#define TT_NTIMERS 8

#endif
