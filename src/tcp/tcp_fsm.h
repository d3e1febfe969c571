/* TCP connection states (RFC 9293 §3.3.2), numbered as FreeBSD's tcp_fsm.h so that "has reached
 * at least" tests are plain comparisons. Only tcp_set_state() assigns them. */
#ifndef SLIP_TCP_FSM_H
#define SLIP_TCP_FSM_H

#define TCPS_CLOSED       0
#define TCPS_LISTEN       1
#define TCPS_SYN_SENT     2
#define TCPS_SYN_RECEIVED 3
#define TCPS_ESTABLISHED  4
#define TCPS_CLOSE_WAIT   5
#define TCPS_FIN_WAIT_1   6
#define TCPS_CLOSING      7
#define TCPS_LAST_ACK     8
#define TCPS_FIN_WAIT_2   9
#define TCPS_TIME_WAIT    10
#define TCP_NSTATES       11

/* Synchronized states: a SYN was exchanged both ways (RFC 9293 §3.5). */
#define TCPS_HAVERCVDSYN(s)    ((s) >= TCPS_SYN_RECEIVED)
#define TCPS_HAVEESTABLISHED(s) ((s) >= TCPS_ESTABLISHED)
/* States after our FIN was queued: the application can send no more. */
#define TCPS_SENT_FIN(s) ((s) >= TCPS_FIN_WAIT_1)
/* States in which the peer's FIN was received. */
#define TCPS_HAVERCVDFIN(s) \
    ((s) == TCPS_CLOSE_WAIT || (s) == TCPS_CLOSING || (s) == TCPS_LAST_ACK || (s) == TCPS_TIME_WAIT)

static inline const char *tcp_state__name(int s)
{
    static const char *const names[TCP_NSTATES] = {
        "CLOSED", "LISTEN", "SYN_SENT", "SYN_RECEIVED", "ESTABLISHED", "CLOSE_WAIT",
        "FIN_WAIT_1", "CLOSING", "LAST_ACK", "FIN_WAIT_2", "TIME_WAIT",
    };
    return s >= 0 && s < TCP_NSTATES ? names[s] : "?";
}

#endif
