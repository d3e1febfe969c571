/* asm/byteorder.h for BPF objects (see types.h here). There is no generic one: the byte order is
 * the target's (bpfel or bpfeb), which the compiler reports. It decides the bit-field order of
 * struct iphdr, so it must match the target, not the build host. */
#ifndef SLIP_BPF_ASM_BYTEORDER_H
#define SLIP_BPF_ASM_BYTEORDER_H
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#include <linux/byteorder/little_endian.h>
#elif __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#include <linux/byteorder/big_endian.h>
#else
#error "unknown BPF target byte order"
#endif
#endif
