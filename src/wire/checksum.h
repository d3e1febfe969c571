/* Internet checksum (RFC 1071) helpers. Sums are taken over raw memory, so the folded result is
 * ready to store in a header field as is; incremental updates follow RFC 1624. */
#ifndef SLIP_WIRE_CHECKSUM_H
#define SLIP_WIRE_CHECKSUM_H

#include "base/types.h"

/* Adds len bytes at data to a 32-bit ones-complement accumulator. Only the last chunk of a
 * message may have an odd length. */
uint32_t wire_csum_add(uint32_t sum, const void *data, size_t len);
/* Folds the accumulator and complements it: the value to store in a checksum field. */
be16 wire_csum_fold(uint32_t sum);
/* Pseudo-header sum for TCP/UDP over IPv4 (RFC 768, RFC 9293 §3.1). l4_len in host order. */
uint32_t wire_csum_pseudo4(be32 src, be32 dst, uint8_t proto, uint16_t l4_len);
/* Pseudo-header sum for an upper layer over IPv6 (RFC 8200 §8.1): 16-byte src and dst. */
uint32_t wire_csum_pseudo6(const void *src, const void *dst, uint8_t proto, uint32_t l4_len);
/* RFC 1624 eqn. 3: new checksum after a 16-bit field changed from old_v to new_v. */
be16 wire_csum_update16(be16 csum, be16 old_v, be16 new_v);

#endif
