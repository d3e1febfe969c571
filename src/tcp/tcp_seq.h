/* Sequence-number arithmetic modulo 2^32 (RFC 9293 §3.4): every comparison goes through these,
 * on the signed difference, as FreeBSD's tcp_seq.h does. */
#ifndef SLIP_TCP_SEQ_H
#define SLIP_TCP_SEQ_H

#include <stdint.h>

static inline int seq_lt(uint32_t a, uint32_t b) { return (int32_t)(a - b) < 0; }
static inline int seq_leq(uint32_t a, uint32_t b) { return (int32_t)(a - b) <= 0; }
static inline int seq_gt(uint32_t a, uint32_t b) { return (int32_t)(a - b) > 0; }
static inline int seq_geq(uint32_t a, uint32_t b) { return (int32_t)(a - b) >= 0; }
static inline uint32_t seq_max(uint32_t a, uint32_t b) { return seq_gt(a, b) ? a : b; }
static inline uint32_t seq_min(uint32_t a, uint32_t b) { return seq_lt(a, b) ? a : b; }
/* lo <= x < hi */
static inline int seq_in(uint32_t x, uint32_t lo, uint32_t hi) { return seq_leq(lo, x) && seq_lt(x, hi); }

#endif
