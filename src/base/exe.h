/* What an executable file is, as far as LD_PRELOAD cares: a static binary never loads the preload
 * library, so the launcher and exec() can tell the user instead of leaving sockets stranded. */
#ifndef SLIP_BASE_EXE_H
#define SLIP_BASE_EXE_H

/* 1 when path is a 64-bit ELF file without a program interpreter (statically linked), 0 when it
 * has one, -1 when it is not an ELF file we can read (a script: its interpreter gets the
 * preload). */
int slip_exe__is_static(const char *path);

#endif
