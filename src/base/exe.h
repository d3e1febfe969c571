/* What an executable file is, as far as LD_PRELOAD cares: a static binary never loads the preload
 * library, so the launcher and exec() can tell the user instead of leaving sockets stranded. And
 * where the project's files sit relative to each other (the CLI finds the library, the library
 * finds the CLI), in the build tree and installed. */
#ifndef SLIP_BASE_EXE_H
#define SLIP_BASE_EXE_H

#include <stddef.h>

/* 1 when path is a 64-bit ELF file without a program interpreter (statically linked), 0 when it
 * has one, -1 when it is not an ELF file we can read (a script: its interpreter gets the
 * preload). */
int slip_exe__is_static(const char *path);

/* 1 when path is a 64-bit ELF file built by Go (a .go.buildinfo or .note.go.buildid section):
 * its runtime makes system calls itself, not through libc, so LD_PRELOAD sees none of its
 * sockets even when it is dynamically linked. 0 when not, -1 when unreadable or not ELF. */
int slip_exe__is_go(const char *path);

/* The first of rel[0..n) (paths relative to the folder holding file) that access() allows with
 * amode, written to out: 0, or -ENOENT when none does. */
int slip_exe__beside(const char *file, const char *const *rel, size_t n, int amode, char *out, size_t len);

#endif
