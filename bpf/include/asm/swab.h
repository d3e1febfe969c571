/* asm/swab.h for BPF objects (see types.h here): no architecture byte-swap, clang lowers the
 * builtins to BPF's own instructions. */
#ifndef SLIP_BPF_ASM_SWAB_H
#define SLIP_BPF_ASM_SWAB_H
#include <asm-generic/swab.h>
#endif
