/* asm/types.h for BPF objects. The uapi headers (linux/types.h) include <asm/...>, which lives in
 * the host's multiarch directory (/usr/include/<triplet>/asm); putting that directory on the path
 * also exposes the host C library, and a stray libc include then needs the 32-bit stubs under
 * -target bpf. BPF is its own architecture: the generic kernel definitions are the right ones. */
#ifndef SLIP_BPF_ASM_TYPES_H
#define SLIP_BPF_ASM_TYPES_H
#include <asm-generic/types.h>
#endif
