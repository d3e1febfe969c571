/* Structures shared between the XDP steering program (steer.bpf.c) and user space
 * (src/xsk/steer.c). Plain fixed-width types only: this header is compiled by clang -target bpf too. */
#ifndef SLIP_BPF_STEER_H
#define SLIP_BPF_STEER_H

#include <linux/types.h>

#define STEER_MAX_QUEUES   64
/* Stacks that may share one interface (each with its own AF_XDP socket per queue, all on one
 * UMEM): the socket of stack k for queue q sits at k * STEER_MAX_QUEUES + q in the socket map. */
#define STEER_MAX_STACKS   16
#define STEER_XSK_SLOTS    (STEER_MAX_QUEUES * STEER_MAX_STACKS)
#define STEER_MAX_FLOWS    65536
#define STEER_MAX_FRAGS    1024

/* Key of the owned-flow map, all fields in network byte order. A connected flow is the full
 * 4-tuple seen from the stack (laddr/lport local). A listening or bound socket has raddr = 0 and
 * rport = 0; laddr = 0 means every local address. Lookup order: 4-tuple, (laddr, lport), (0, lport). */
struct steer_key {
    __u32 laddr;
    __u32 raddr;
    __u16 lport;
    __u16 rport;
    __u8 proto;                 /* IPPROTO_TCP or IPPROTO_UDP */
    __u8 pad[3];
};

struct steer_val {
    __u16 stack;                /* index of the owning stack: picks its socket (< STEER_MAX_STACKS) */
    __u16 flags;                /* STEER_F_* */
    __u32 pid;                  /* the process that claimed it, for tools */
    /* STEER_F_GROUP: a SO_REUSEPORT listen key that stacks share. A new flow goes to one of
     * members & ~parked, picked by a hash of its addresses and ports keyed with seed; a TCP SYN
     * pins its 4-tuple to that stack (slip_pins) so the connection stays there when members
     * come and go. A member made as a worker's copy of another stack's listener names that
     * stack in origin[] (index + 1); a stack whose listener is copied is parked (gets no new
     * flows) until a process of it uses that listener, copies or none: a SYN when every member
     * is parked is dropped (STEER_C_PARKED). stack is the lowest member that is not parked,
     * else the lowest member. */
    __u16 members;
    __u16 parked;
    __u32 seed;
    __u8 origin[STEER_MAX_STACKS];
};
#define STEER_F_GROUP 0x1

/* Per-CPU counters, indices into the `counters` array map. */
enum steer_counter {
    STEER_C_RX,                 /* frames seen */
    STEER_C_REDIRECTED,         /* sent to an AF_XDP socket */
    STEER_C_PASSED,             /* handed to the kernel, not ours */
    STEER_C_MALFORMED,          /* could not be parsed: passed to the kernel */
    STEER_C_NO_XSK,             /* ours but no socket on this queue: passed */
    STEER_C_FRAG,               /* IPv4 fragments redirected */
    STEER_C_ICMP_ERR,           /* ICMP errors quoting an owned flow, redirected */
    STEER_C_MULTIBUF,           /* multi-buffer frames of owned flows: passed (socket lacks SG) */
    STEER_C_PARKED,             /* SYNs to a reuseport key whose members are all parked: dropped */
    STEER_C__MAX
};

/* Value of the fragment map: where the datagram's first fragment went (its outcome counter)
 * and, when it reached a socket, which stack's. */
struct steer_frag_val {
    __u8 outcome;
    __u8 pad;
    __u16 stack;
};

/* Key of the fragment map: a datagram whose first fragment matched an owned flow. */
struct steer_frag_key {
    __u32 saddr;
    __u32 daddr;
    __u16 id;
    __u8 proto;
    __u8 pad;
};

/* IPv6 (map slip_owned6): the same key with 16-byte addresses, the same lookup order (4-tuple,
 * (laddr, lport), (::, lport)). */
struct steer_key6 {
    __u8 laddr[16];
    __u8 raddr[16];
    __u16 lport;
    __u16 rport;
    __u8 proto;
    __u8 pad[3];
};

/* Key of the IPv6 fragment map (RFC 8200 §4.5: a datagram is source, destination and the 32-bit
 * identification of its fragment header). */
struct steer_frag6_key {
    __u8 saddr[16];
    __u8 daddr[16];
    __u32 id;
};

/* Pins of TCP flows to the member a group's SYN was given to (LRU: an evicted pin falls back to
 * the hash, which gives the same member while the group's membership stays). */
#define STEER_MAX_PINS 65536
/* Extension headers the program walks before it gives a packet to the kernel as unparsable. */
#define STEER_IPV6_MAX_EXT 8

#endif
