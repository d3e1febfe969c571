/* asm/posix_types.h for BPF objects (see types.h here): the generic kernel types. */
#ifndef SLIP_BPF_ASM_POSIX_TYPES_H
#define SLIP_BPF_ASM_POSIX_TYPES_H
#include <asm-generic/posix_types.h>
#endif
