/* Basic types shared by every layer: byte-order-visible integers and small helpers.
 * Network-order values are be16/be32 so a reader can see the byte order at a glance. */
#ifndef SLIP_BASE_TYPES_H
#define SLIP_BASE_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <endian.h>

typedef uint16_t be16;
typedef uint32_t be32;

static inline be16 hton16(uint16_t v) { return htobe16(v); }
static inline be32 hton32(uint32_t v) { return htobe32(v); }
static inline uint16_t ntoh16(be16 v) { return be16toh(v); }
static inline uint32_t ntoh32(be32 v) { return be32toh(v); }

#define SLIP_LIKELY(x)   __builtin_expect(!!(x), 1)
#define SLIP_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define SLIP_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define SLIP_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SLIP_MAX(a, b) ((a) > (b) ? (a) : (b))
#define SLIP_ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((__typeof__(x))(a) - 1))
#define SLIP_CACHELINE 64

/* Index into a table in shared memory; SLIP_NIL marks "none". */
typedef uint32_t slip_idx_t;
#define SLIP_NIL UINT32_MAX

/* Nanoseconds on CLOCK_MONOTONIC; protocol code receives it as an argument. */
typedef uint64_t slip_time_t;
#define SLIP_TIME_NEVER UINT64_MAX
#define SLIP_USEC 1000ull
#define SLIP_MSEC 1000000ull
#define SLIP_SEC  1000000000ull

#endif
