/* SipHash-2-4 (siphash.c): a keyed 64-bit hash of a short input, for values a remote host must
 * not predict (ISNs, SYN cookies, flow labels). */
#ifndef SLIP_BASE_SIPHASH_H
#define SLIP_BASE_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t slip_siphash(const uint64_t key[2], const void *data, size_t len);

#endif
