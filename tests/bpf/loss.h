/* Layout shared by tests/bpf/loss.bpf.c and its loader tests/prog/tc_loss.c: the one-element
 * configuration array and the indices of the per-CPU counters. */
#ifndef SLIP_TESTS_BPF_LOSS_H
#define SLIP_TESTS_BPF_LOSS_H

#include <linux/types.h>

#define LOSS_PPM_MAX 1000000u

struct loss_cfg {
    __u32 ppm;      /* drop probability in parts per million, 0 .. LOSS_PPM_MAX */
    __u32 only_l4;  /* nonzero: only IPv4 TCP/UDP packets are candidates for a drop */
    /* Deterministic drops besides the random ones: the next drop_left IPv4 packets whose total
     * length is drop_len (a tail segment of a size nothing else has, for a tail-loss test). */
    __u32 drop_len;
    __u32 drop_left;
};

/* PASSED + DROPPED are the candidates, so the measured rate is DROPPED / (PASSED + DROPPED).
 * SKIPPED counts packets that were no candidate (only_l4 and not IPv4 TCP/UDP); they pass.
 * GSO counts candidates that carried more than one segment: a drop of one of them would lose
 * a burst, which no wire does, so tests expect it to stay zero. */
enum loss_counter {
    LOSS_C_PASSED,
    LOSS_C_DROPPED,
    LOSS_C_SKIPPED,
    LOSS_C_GSO,
    LOSS_C__MAX,
};

#endif
