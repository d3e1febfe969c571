/* Static-binary detection (exe.h). */
#include <elf.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "base/exe.h"

int slip_exe__is_static(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    Elf64_Ehdr eh;
    if (fd < 0)
        return -1;
    int rc = -1;
    if (pread(fd, &eh, sizeof(eh), 0) == sizeof(eh) && !memcmp(eh.e_ident, ELFMAG, SELFMAG) &&
        eh.e_ident[EI_CLASS] == ELFCLASS64) {
        rc = 1;
        for (int i = 0; i < eh.e_phnum; i++) {
            Elf64_Phdr ph;
            if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + (uint64_t)i * eh.e_phentsize)) != sizeof(ph))
                break;
            if (ph.p_type == PT_INTERP) {
                rc = 0;
                break;
            }
        }
    }
    close(fd);
    return rc;
}
