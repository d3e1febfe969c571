/* asm/bitsperlong.h for BPF objects (see types.h here). Older generic headers assume 32 unless told;
 * a BPF long is 64 bits, so say so from the compiler's own size. */
#ifndef SLIP_BPF_ASM_BITSPERLONG_H
#define SLIP_BPF_ASM_BITSPERLONG_H
#ifndef __BITS_PER_LONG
#define __BITS_PER_LONG (__CHAR_BIT__ * __SIZEOF_LONG__)
#endif
#include <asm-generic/bitsperlong.h>
#endif
