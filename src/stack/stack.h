/* A stack: AF_XDP ports (one per interface queue) on one UMEM, the XDP steering program, the
 * mirrored control plane and all protocol state, in one shared arena behind one lock. This is
 * the small internal API that programs use until the POSIX layer exists; every call takes the
 * lock itself. Socket calls return negative errno. */
#ifndef SLIP_STACK_STACK_H
#define SLIP_STACK_STACK_H

#include <net/if.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "base/types.h"
#include "wire/ipv6.h"
#include "xsk/steer.h"
#include "xsk/xsk_port.h"

/* The stack's clock (CLOCK_MONOTONIC in ns): what the poll loop passes to protocol code as now,
 * and what the guardian measures quiet time with. */
static inline slip_time_t slip_stack__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (slip_time_t)ts.tv_sec * SLIP_SEC + (slip_time_t)ts.tv_nsec;
}

#define SLIP_MAX_IFACES 4
#define SLIP_MAX_QUEUES 16

struct slip_config {
    const char *ifnames[SLIP_MAX_IFACES];
    unsigned nifaces;
    uint32_t frame_size;        /* UMEM frame size (power of two) */
    uint32_t ring_size;         /* RX, TX, fill and completion rings */
    uint32_t burst;
    enum xsk_bind_mode bind;
    enum steer_xdp_mode xdp;
    bool busy_poll;
    uint32_t busy_poll_usec;
    uint32_t busy_poll_budget;
    uint32_t max_conns;         /* TCP connections (listeners included) the stack can hold */
    uint32_t max_udp;           /* UDP sockets */
    char stack_name[32];        /* SLIP_STACK_NAME: programs that share a stack name it */
};

void slip_config__defaults(struct slip_config *c);
/* The interfaces used when none are named: every one that is up with an IPv4 address, never
 * loopback, in getifaddrs order (`slipstream run` and `slipstream stat` agree on them). */
unsigned slip_config__default_ifaces(char names[][IF_NAMESIZE], unsigned max);
/* Reads SLIP_FRAME_SIZE, SLIP_RING_SIZE, SLIP_BURST, SLIP_BIND (auto|copy|zerocopy),
 * SLIP_XDP_MODE (auto|native|generic), SLIP_BUSY_POLL (usec, 0 = off), SLIP_BUSY_POLL_BUDGET,
 * SLIP_MAX_CONNS, SLIP_MAX_UDP.
 * A bad value gives -EINVAL and names the variable in err. */
int slip_config__from_env(struct slip_config *c, char *err, size_t errlen);
/* A stack name fit for SLIP_STACK_NAME / `run --name`: it goes into abstract socket names and
 * `stat`, so 1 to 31 characters of A-Z a-z 0-9 . _ - and nothing else. */
bool slip_config__stack_name_ok(const char *name);

struct slip_stack;

/* Builds the arena, opens the control plane, attaches steering and opens one AF_XDP socket per
 * queue of every interface. On failure: negative errno and one line naming the cause in err. */
int slip_stack__open(struct slip_stack **out, const struct slip_config *cfg, char *err, size_t errlen);
void slip_stack__close(struct slip_stack *s);
/* exec: export writes the description of the stack's fds (shared memory, XDP link and maps,
 * AF_XDP sockets) into buf and makes those fds survive exec; attach, in the new image, takes the
 * stack over from that description. */
int slip_stack__export(struct slip_stack *s, char *buf, size_t len);
/* Opens a stack of our own in the group another stack on the same interfaces belongs to: spec
 * is slip_stack__describe_group's, renumbered with our fds (share.c); the fds it names are
 * ours to close (we keep what we use). Same result and errors as slip_stack__open. */
int slip_stack__open_in_group(struct slip_stack **out, const struct slip_config *cfg, const char *spec, char *err,
                              size_t errlen);
/* What a program needs to open a stack of its own in s's group: "G,M;L,X,O,C,S0,S1...;..." (the
 * group memory, then per interface the XDP link, its 3 maps and a socket per queue to share the
 * UMEM with), into buf; the same fds, in order, into fds (at most max). Count of fds, or negative
 * errno. */
int slip_stack__describe_group(struct slip_stack *s, char *buf, size_t len, int *fds, int max);
/* fd passing between stacks of a group: the sender notes the inode of a socket's kernel socket
 * with its stack's index; a receiver whose stacks do not have it finds that index (-ENOENT:
 * none) and joins that stack (its user, or root, only) through the index's token name, as
 * `slipstream stat` does. */
void slip_group__note_passed(struct slip_stack *s, uint64_t ino);
int slip_group__passed_index(struct slip_stack *s, uint64_t ino);
int slip_stack__join_index(struct slip_stack *s, unsigned index, struct slip_stack **out, char *err, size_t errlen);
/* The stack's index in its group and its name (SLIP_STACK_NAME, may be empty). */
unsigned slip_stack__index(const struct slip_stack *s);
/* The listening socket that holds the stack's index (served like the stack's name), or -1. */
int slip_stack__token_fd(const struct slip_stack *s);
const char *slip_stack__name(const struct slip_stack *s);
int slip_stack__attach(struct slip_stack **out, const char *spec, char *err, size_t errlen);
/* What is wrong with memfd as a stack's memory (size, seals, header, every region inside it),
 * or NULL: for memory handed over by another process, checked before anything in it is used. */
const char *slip_stack__memory_bad(int memfd);
/* The fds export describes, without touching them (posix_spawn restores their close-on-exec
 * flags after the call). Returns how many, at most max. */
int slip_stack__export_fds(struct slip_stack *s, int *fds, int max);
/* Receives and processes what is waiting, runs due timers, sends what is queued. Returns the
 * next protocol deadline (CLOCK_MONOTONIC ns) or SLIP_TIME_NEVER. */
slip_time_t slip_stack__poll(struct slip_stack *s);
/* Sleeps until a port has frames, the control plane changed, the next deadline, or timeout_ms
 * (-1: no limit). Returns after polling once. */
int slip_stack__wait(struct slip_stack *s, int timeout_ms);
/* Polls only when nobody has for idle_ns and the lock is free: for a helper thread that keeps
 * TCP going while the application computes. Returns 0 when it polled, else the milliseconds
 * until it would be worth trying again. */
int slip_stack__poll_if_idle(struct slip_stack *s, slip_time_t idle_ns);
/* The fds a sleeper must watch (AF_XDP sockets, netlink), and how long it may sleep given the
 * protocol deadline from the last poll. */
int slip_stack__wait_fds(struct slip_stack *s, int *fds, int max);
/* Every fd the stack holds in this process (export_fds, its eventfds, epoll and netlink fds). */
int slip_stack__own_fds(struct slip_stack *s, int *fds, int max);
int slip_stack__timeout_ms(struct slip_stack *s, int timeout_ms);
/* A sleeper woken through the wait fds clears the helper thread's doorbell (one of them). */
void slip_stack__doorbell_drain(struct slip_stack *s);
int slip_stack__doorbell_fd(struct slip_stack *s);
/* This process's bell for other processes' polls (one of the wait fds, level-triggered): a poll
 * in another process that delivered something to a socket this process holds while threads of
 * it sleep rings it. Whoever wakes on it takes it: drains it and rings the doorbell for the
 * process's other sleepers; true when it was rung. */
int slip_stack__peer_bell_fd(struct slip_stack *s);
bool slip_stack__peer_bell_take(struct slip_stack *s);
/* Epoll sets that hold only listening sockets, in a process where another set watches the wake
 * fds, sleep on this process's accept bell instead (an eventfd nobody reads: watch it
 * edge-triggered). A poll that makes a listener ready rings it while accept_sleepers > 0. */
int slip_stack__accept_bell_fd(struct slip_stack *s);
void slip_stack__accept_sleepers(struct slip_stack *s, int delta);
void slip_stack__ring_accept_bell(struct slip_stack *s);
/* No other live process shares the stack (the accept bell is process-local). */
bool slip_stack__alone(struct slip_stack *s);
/* An application thread about to sleep on the wait fds (+1) or back from it (-1): polls that
 * deliver something while sleepers exist ring the doorbell. */
void slip_stack__sleepers(struct slip_stack *s, int delta);
/* on: this thread is working through events a wait (epoll_wait, poll, select) returned, and
 * will wait again soon; its TCP sends, receives and closes may leave their frames on the TX
 * ring for the next poll to kick, within a bound (see tx_done in poll.c). */
void slip_stack__tx_defer(struct slip_stack *s, bool on);
/* Most fds slip_stack__wait_fds returns. */
#define SLIP_WAIT_FDS_MAX (SLIP_MAX_IFACES * SLIP_MAX_QUEUES + 3)
/* True when traffic to dst leaves through one of the stack's interfaces (else: the kernel's). */
bool slip_stack__routes_via_us(struct slip_stack *s, be32 dst);
/* Changes whenever the mirrored control-plane tables change: answers derived from them (such as
 * slip_stack__routes_via_us) stay valid while it does not. */
uint32_t slip_stack__ctl_seq(struct slip_stack *s);
/* True when addr is 0 or an address of one of the stack's interfaces. */
bool slip_stack__owns_addr(struct slip_stack *s, be32 addr);
/* IPv6 counterparts (:: is any; scope: the sin6_scope_id, 0 for any). routes_via_us6 returns the
 * outgoing interface when it is one of the stack's, else 0. */
uint32_t slip_stack__routes_via_us6(struct slip_stack *s, const struct wire_ipv6_addr *dst, uint32_t oif);
bool slip_stack__owns_addr6(struct slip_stack *s, const struct wire_ipv6_addr *addr, uint32_t scope);
/* A number that changes whenever something happened on the socket (data, space, state). */
uint32_t slip_sock__evgen(struct slip_stack *s, bool tcp, int sock);
/* A TCP socket's event generation as a futex word (shared memory: wait on it without
 * FUTEX_PRIVATE_FLAG), and the count of threads asleep on it: a poll that bumps the generation
 * of a socket with waiters wakes them (preload_block's many-thread path). */
uint32_t *slip_sock__tcp_evgen_word(struct slip_stack *s, int sock);
/* Bytes from one TCP socket's event generation word to the next one's (they are not an array of
 * uint32_t): a scan over many sockets loads word(0) + sock * stride. */
size_t slip_sock__tcp_evgen_stride(void);
void slip_sock__tcp_waiters(struct slip_stack *s, int sock, int delta);
/* Adds delta to the count of file descriptors (in every process) referring to a socket, and to
 * this process's share of it (so the share can be given back if the process dies). Returns the
 * new total. */
uint32_t slip_sock__ref(struct slip_stack *s, bool tcp, int sock, int delta);

/* Processes sharing the stack. Before fork or posix_spawn, reserve the child's slot (fork:
 * copy_refs, the child holds every fd this process holds; spawn: add the child's references
 * with slip_sock__ref_in for the fds it inherits). After it, slip_proc__started with the pid the
 * call returned (0 in a fork child; negative: it failed, the slot and its references are given
 * back). The slot travels to an exec'd or spawned image in slip_stack__export_for's description.
 * Any process of the stack calls slip_stack__reap now and then: the references of processes
 * that died are released as the kernel closes their fds (at most every 100 ms; returns how many
 * processes were reaped). */
/* fd passing: the inode of the kernel socket behind a stack socket (0: none), and the stack
 * socket behind an inode (-ENOENT). The inode is forgotten with the last reference. */
void slip_sock__set_ino(struct slip_stack *s, bool tcp, int sock, uint64_t ino);
int slip_sock__by_ino(struct slip_stack *s, uint64_t ino, bool *tcp);
/* True when a connection of the stack (established, closing, TIME_WAIT: not a listener, whose
 * kernel socket holds the port itself) uses local port `port` on addr (0: any). */
bool slip_tcp__port_busy(struct slip_stack *s, be32 addr, uint16_t port);
/* A fd of the socket leaves in a UNIX socket message (one reference travels with it, counted
 * for this process until received), and a fd of it arrives (the receiver takes a travelling
 * reference over, or a new one). */
void slip_sock__pass_out(struct slip_stack *s, bool tcp, int sock);
void slip_sock__pass_in(struct slip_stack *s, bool tcp, int sock);
int slip_proc__reserve(struct slip_stack *s, bool copy_refs);
void slip_proc__started(struct slip_stack *s, int slot, pid_t pid);
uint32_t slip_sock__ref_in(struct slip_stack *s, int slot, bool tcp, int sock, int delta);
int slip_proc__slot(struct slip_stack *s);
/* References this process holds on a socket (its fds to it, plus fds it passed that nobody
 * received yet). */
uint32_t slip_proc__held(struct slip_stack *s, bool tcp, int sock);
int slip_stack__export_for(struct slip_stack *s, int slot, char *buf, size_t len);
int slip_stack__reap(struct slip_stack *s);
/* Sharing with unrelated programs (share.c): the description of the stack for process pid, with
 * a slot claimed for it, naming this process's fds (the caller passes them over a UNIX socket
 * in the order slip_stack__export_fds gives). */
int slip_stack__describe_for_peer(struct slip_stack *s, pid_t pid, char *buf, size_t len);
/* A thread of this process holds the stack's lock (an exit from inside it must not wait for
 * it). */
bool slip_stack__held_here(struct slip_stack *s);
/* This process is exiting: gives back its references (closing the sockets only it held) and,
 * when no other process shares the stack, keeps the stack running up to linger_ms so data and
 * FINs already written reach the peer, as the kernel delivers a dead process's writes. tick
 * (may be NULL) runs every 10 ms meanwhile, to let programs join (share.h): once another process
 * carries the stack, the lingering stops. */
void slip_stack__exit(struct slip_stack *s, int linger_ms, void (*tick)(struct slip_stack *s));
/* Prints the stack (interfaces, owner, processes) and one "proc PID COMM slot=K tcp=N udp=N"
 * line per process sharing it. */
void slip_stack__dump_procs(struct slip_stack *s, FILE *f);
/* Prints every counter of the stack as `group.name value` lines. */
void slip_stack__dump(struct slip_stack *s, FILE *f);
/* Reads one counter by its `group.name` (as printed by dump); -ENOENT when unknown. */
int slip_stack__counter(struct slip_stack *s, const char *name, uint64_t *out);

/* ---- The socket facade's types: what the POSIX layer sees of the engines, so that it needs no
 * tcp/ or udp/ header (the calls below translate to and from the engines' own). ---- */

/* The peer of a datagram, or of a connected UDP socket (slip_udp6__recvfrom, slip_udp6__peer). */
struct slip_udp_peer {
    bool v6;                    /* IPv6 (a6, scope), else IPv4 (v4) */
    be32 v4;
    struct wire_ipv6_addr a6;
    uint32_t scope;             /* receiving interface of a link-local source */
    uint16_t port;              /* host order */
    /* IPv6 datagrams only: the destination they were sent to and the receiving interface
     * (IPV6_PKTINFO). */
    bool has_dst;
    struct wire_ipv6_addr dst;
    uint32_t ifindex;
};
/* Flags of slip_udp__recvfrom and slip_udp6__recvfrom. */
#define SLIP_UDP_RECV_PEEK  0x1     /* leave the datagram queued (MSG_PEEK) */
#define SLIP_UDP_RECV_TRUNC 0x2     /* return the datagram's real length (MSG_TRUNC) */

/* Options of slip_tcp__setopt / slip_tcp__getopt (values as the socket option has them, except
 * where said). */
enum slip_tcp_opt {
    SLIP_TCPO_NODELAY,          /* bool */
    SLIP_TCPO_CORK,             /* bool; clearing it pushes */
    SLIP_TCPO_KEEPALIVE,        /* bool (SO_KEEPALIVE) */
    SLIP_TCPO_KEEPIDLE,         /* seconds, 1..32767 */
    SLIP_TCPO_KEEPINTVL,        /* seconds, 1..32767 */
    SLIP_TCPO_KEEPCNT,          /* probes, 1..127 */
    SLIP_TCPO_LINGER,           /* -1 off, else seconds (0 = abortive close) */
    SLIP_TCPO_RCVBUF,           /* bytes */
    SLIP_TCPO_SNDBUF,
    SLIP_TCPO_MAXSEG,           /* TCP_MAXSEG before connect/listen; 0 = none */
    SLIP_TCPO_CONGESTION,       /* slip_tcp__cc_by_name's number */
    SLIP_TCPO_REUSEPORT,        /* bool (SO_REUSEPORT), read by listen */
    SLIP_TCPO_TCLASS,           /* IPV6_TCLASS, 0..255 (IPv6 connections only) */
    SLIP_TCPO_HOPS,             /* IPV6_UNICAST_HOPS, 1..255, 0 = default (IPv6 connections only) */
    SLIP_TCPO_USER_TIMEOUT,     /* TCP_USER_TIMEOUT, ms; 0 = the retransmission limits */
};
/* The SLIP_TCPO_CONGESTION value for a TCP_CONGESTION name ("cubic", "reno", "newreno"), or
 * -ENOENT. */
int slip_tcp__cc_by_name(const char *name);

/* A TCP connection as getsockopt(TCP_INFO), FIONREAD/SIOCOUTQ, SO_RCVLOWAT and splice see it
 * (slip_tcp__info), with Linux's meanings: state in Linux's TCP_* numbering (<netinet/tcp.h>;
 * TIME_WAIT reads as TCP_CLOSE: Linux has moved the connection to a timewait mini-socket by
 * then), ca_state TCP_CA_Open 0 / Disorder 1 / Recovery 3 / Loss 4, sacked in segments, times in
 * microseconds, last_* in milliseconds ago, the rest in bytes or counts. */
struct slip_tcp_info {
    uint8_t state, ca_state, backoff, probes;
    uint8_t snd_wscale, rcv_wscale;
    bool sack, timestamps;
    uint32_t rto_us, ato_us, srtt_us, rttvar_us;
    uint32_t mss, rcv_mss, advmss;
    uint32_t cwnd, ssthresh, snd_wnd, rcv_wnd, rcv_space, reordering, sacked, lost, retrans;
    uint32_t snd_queued, rcv_queued, unacked, notsent;
    uint32_t last_data_sent_ms, last_data_recv_ms, last_ack_recv_ms;
    uint64_t busy_us, rwnd_limited_us, sndbuf_limited_us;
    uint64_t segs_in, segs_out, bytes_in, bytes_out, bytes_acked;
    uint64_t retransmits, retrans_bytes, rto_expiries;
};

/* UDP sockets. Binding reserves the same address and port in the kernel with a real UDP socket
 * (so no kernel application takes it, and port 0 gets a kernel-chosen ephemeral port) and claims
 * the port in the XDP program. */
int slip_udp__open(struct slip_stack *s);
int slip_udp__bind(struct slip_stack *s, int sock, be32 addr, uint16_t port);
int slip_udp__connect(struct slip_stack *s, int sock, be32 addr, uint16_t port);
int slip_udp__local(struct slip_stack *s, int sock, be32 *addr, uint16_t *port);
ssize_t slip_udp__sendto(struct slip_stack *s, int sock, const void *buf, size_t len, be32 dst, uint16_t dport);
ssize_t slip_udp__sendmsg(struct slip_stack *s, int sock, const struct iovec *iov, int iovcnt, be32 dst, uint16_t dport);
/* flags: SLIP_UDP_RECV_*. -EAGAIN when nothing is queued. */
ssize_t slip_udp__recvfrom(struct slip_stack *s, int sock, void *buf, size_t len, be32 *src, uint16_t *sport, unsigned flags);
int slip_udp__close(struct slip_stack *s, int sock);
/* As slip_udp__bind, with the application's own kernel socket doing the port reservation. */
int slip_udp__bind_kfd(struct slip_stack *s, int sock, be32 addr, uint16_t port, int app_kfd);
/* The application's kernel socket is bound already, by the POSIX layer with the application's
 * own address (an AF_INET6 socket, whose sockaddr and errors stay the kernel's): the stack socket
 * binds IPv4 address addr (0: any) and the port the kernel socket holds. */
int slip_udp__bind_bound(struct slip_stack *s, int sock, be32 addr, int app_kfd);
unsigned slip_udp__poll(struct slip_stack *s, int sock);
int slip_udp__so_error(struct slip_stack *s, int sock);
int slip_udp__peer(struct slip_stack *s, int sock, be32 *addr, uint16_t *port);
/* IPv6 (sock_udp6.c): app_kfd is the application's AF_INET6 socket, already bound to addr (:: is
 * any; dual: IPv4 too, a dual-stack socket). Datagrams of both families are read with
 * slip_udp6__recvfrom, which says which family each came from. */
int slip_udp6__bind_bound(struct slip_stack *s, int sock, const struct wire_ipv6_addr *addr, uint32_t scope,
                          bool dual, int app_kfd);
int slip_udp6__connect(struct slip_stack *s, int sock, const struct wire_ipv6_addr *addr, uint16_t port,
                       uint32_t scope);
/* True when the socket is in the IPv6 demux (native, v6-only or dual-stack through bind6). */
bool slip_udp6__bound6(struct slip_stack *s, int sock);
int slip_udp6__peer(struct slip_stack *s, int sock, struct slip_udp_peer *p);
ssize_t slip_udp6__sendmsg(struct slip_stack *s, int sock, const struct iovec *iov, int iovcnt,
                           const struct wire_ipv6_addr *dst, uint16_t dport, uint32_t scope);
ssize_t slip_udp6__recvfrom(struct slip_stack *s, int sock, void *buf, size_t len, struct slip_udp_peer *from,
                            unsigned flags);
/* IPV6_TCLASS, IPV6_UNICAST_HOPS (-1: the default). */
int slip_udp6__setopt(struct slip_stack *s, int sock, int opt, int val);

/* TCP sockets. A listener reserves its address and port in the kernel with a bound kernel TCP
 * socket (port 0 gets an ephemeral port); an active open reserves an ephemeral port from the
 * kernel's ip_local_port_range the same way and claims its 4-tuple in the XDP program. The
 * reservation and the claim last until the connection is gone (TIME_WAIT included), not just
 * until close. Calls never block: they return -EAGAIN / -EINPROGRESS, and the caller waits with
 * slip_stack__wait() and asks slip_tcp__poll() what is ready. */
int slip_tcp__open(struct slip_stack *s);
int slip_tcp__listen(struct slip_stack *s, int sock, be32 addr, uint16_t port, int backlog);
/* Returns the new connection's handle, or -EAGAIN. */
int slip_tcp__accept(struct slip_stack *s, int listener, be32 *raddr, uint16_t *rport);
/* -EINPROGRESS on success: writable (SLIP_EV_OUT) when established, SLIP_EV_ERR + so_error if not. */
int slip_tcp__connect(struct slip_stack *s, int sock, be32 addr, uint16_t port);
/* flags: SLIP_SEND_MORE (MSG_MORE, or more of the same call follows), SLIP_SEND_EOR (MSG_EOR:
 * these bytes end a record). */
#define SLIP_SEND_MORE 0x1u
#define SLIP_SEND_EOR  0x2u
ssize_t slip_tcp__send(struct slip_stack *s, int sock, const void *buf, size_t len, unsigned flags);
/* Bytes, 0 at end of stream, -EAGAIN, or the connection's error once. */
ssize_t slip_tcp__recv(struct slip_stack *s, int sock, void *buf, size_t len, int peek);
int slip_tcp__shutdown(struct slip_stack *s, int sock, int how);
/* Graceful close (RST if unread data remains or linger 0 is set). */
int slip_tcp__close(struct slip_stack *s, int sock);
/* SLIP_EV_* readiness bits (the epoll values). */
unsigned slip_tcp__poll(struct slip_stack *s, int sock);
int slip_tcp__so_error(struct slip_stack *s, int sock);
int slip_tcp__setopt(struct slip_stack *s, int sock, int opt, int val);   /* enum slip_tcp_opt */
int slip_tcp__local(struct slip_stack *s, int sock, be32 *addr, uint16_t *port);
/* With the application's own kernel socket doing the port reservation (POSIX layer). */
int slip_tcp__listen_kfd(struct slip_stack *s, int sock, be32 addr, uint16_t port, int backlog, int app_kfd);
int slip_tcp__connect_kfd(struct slip_stack *s, int sock, be32 addr, uint16_t port, int app_kfd);
int slip_tcp__getopt(struct slip_stack *s, int sock, int opt, int *val);
int slip_tcp__info(struct slip_stack *s, int sock, struct slip_tcp_info *out);
int slip_tcp__peer(struct slip_stack *s, int sock, be32 *addr, uint16_t *port);
/* Prints one line per TCP connection (state, addresses, cwnd, srtt, retransmits ...). */
void slip_tcp__dump(struct slip_stack *s, FILE *f);

/* ---- A stack per worker (sock_worker.c) ---- */
/* Copies listener fsock of stack `from` (listening, SO_REUSEPORT) into stack `to`: its options
 * and, with listen, its address, port and backlog on the same kernel socket app_kfd, joining its
 * key's group; `from` is parked then if its listener stays open in another process that never
 * used a listener on that key. Without listen the copy is a socket with the options only (a
 * listener the worker has not used yet). Returns the copy's socket. */
int slip_tcp__copy_listener(struct slip_stack *from, int fsock, struct slip_stack *to, int app_kfd, bool listen);
/* A process accepts or waits on listener sock (once per listener is enough): see
 * slip_tcp__copy_listener. */
void slip_tcp__listener_used(struct slip_stack *s, int sock);
/* SO_REUSEPORT listeners of s on listener sock's address and port that this process holds no fd
 * of (another process's: a prefork server's processes that each open their own), or -EBADF. */
int slip_tcp__reuseport_others(struct slip_stack *s, int sock);
/* ---- zero-copy TCP send (sock_tcp_zc.c) ---- */
/* Frames of the stack's UMEM lent to the caller, who fills them without the lock (a file read
 * straight into them by the block engine: sendfile) and then queues them on a connection as a
 * send of their bytes would, without the copy into frames a send makes. Each lent frame is
 * whole: frame_size bytes at a frame_size-aligned address (page-aligned with 4 KiB frames). */
#define SLIP_TCP_ZC_MAX 64
struct slip_tcp_zc {
    unsigned n;                         /* frames lent */
    uint32_t frame_size;
    uint32_t idx[SLIP_TCP_ZC_MAX];      /* the stack's, for slip_tcp__zc_commit */
    struct iovec iov[SLIP_TCP_ZC_MAX];
};
/* Lends frames for skip bytes the caller will not queue (the start of a disk block before the
 * bytes it sends) and up to want bytes of sock's send queue (no more than the queue has room for,
 * at most SLIP_TCP_ZC_MAX frames). Returns the bytes the caller may queue with them, or what a
 * send would answer (-EAGAIN when the queue is full, -EPIPE, -ENOTCONN, the socket's error),
 * -ENOBUFS when no frame is free, -EOPNOTSUPP in a process without a slot. Until the commit the
 * frames are this process's: if it dies, the process that reaps it gives them back. */
ssize_t slip_tcp__zc_reserve(struct slip_stack *s, int sock, size_t skip, size_t want, struct slip_tcp_zc *z);
/* Queues len bytes of the lent frames, from byte skip of the first (skip < frame_size), on sock
 * (more: MSG_MORE) and gives back the frames left over; len 0 gives them all back. Returns bytes
 * queued or a send's error (the frames are given back then). z is empty after it. */
ssize_t slip_tcp__zc_commit(struct slip_stack *s, int sock, struct slip_tcp_zc *z, size_t skip, size_t len,
                            int more);

/* ---- TCP over native IPv6 (sock_tcp6.c) ---- */
/* Listens on addr (:: = any) at the port app_kfd (the application's AF_INET6 kernel socket) is
 * bound to. Without v6only a listener on :: is dual-stack: IPv4 clients too. scope: the
 * interface of a link-local addr. Without an IPv6 steering map (an adopted attachment):
 * -EOPNOTSUPP and nothing done; another claim failure returns its error: the caller hands the
 * socket to the kernel. */
int slip_tcp6__listen_kfd(struct slip_stack *s, int sock, const struct wire_ipv6_addr *addr, uint32_t scope,
                          bool v6only, int backlog, int app_kfd);
/* Active open to (addr, port) from the port app_kfd is bound to; returns as slip_tcp__connect_kfd,
 * or -EOPNOTSUPP (nothing done) without an IPv6 steering map. */
int slip_tcp6__connect_kfd(struct slip_stack *s, int sock, const struct wire_ipv6_addr *addr, uint16_t port,
                           uint32_t scope, int app_kfd);
/* The addresses of a socket when it is an IPv6 one (v6 false: IPv4, see slip_tcp__local/peer). */
struct slip_tcp6_names {
    bool v6, connected;
    struct wire_ipv6_addr laddr, raddr;
    uint16_t lport, rport;      /* host order */
    uint32_t scope;
};
int slip_tcp6__names(struct slip_stack *s, int sock, struct slip_tcp6_names *out);

#define SLIP_EV_IN    0x001u
#define SLIP_EV_OUT   0x004u
#define SLIP_EV_ERR   0x008u
#define SLIP_EV_HUP   0x010u
#define SLIP_EV_RDHUP 0x2000u

#endif
