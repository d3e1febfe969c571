/* Static-binary and Go-program detection and sibling files (exe.h). */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
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

int slip_exe__is_go(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    Elf64_Ehdr eh;
    if (fd < 0)
        return -1;
    int rc = -1;
    if (pread(fd, &eh, sizeof(eh), 0) != sizeof(eh) || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shstrndx >= eh.e_shnum)
        goto out;
    /* The section names: every offset and size read from the file is bounded before use. */
    Elf64_Shdr strs;
    if (pread(fd, &strs, sizeof(strs), (off_t)(eh.e_shoff + (uint64_t)eh.e_shstrndx * sizeof(Elf64_Shdr))) !=
        sizeof(strs))
        goto out;
    rc = 0;
    for (int i = 0; i < eh.e_shnum && i < 4096; i++) {
        Elf64_Shdr sh;
        char name[sizeof(".note.go.buildid")];
        if (pread(fd, &sh, sizeof(sh), (off_t)(eh.e_shoff + (uint64_t)i * sizeof(Elf64_Shdr))) != sizeof(sh))
            break;
        if (sh.sh_name >= strs.sh_size)
            continue;
        ssize_t n = pread(fd, name, sizeof(name) - 1, (off_t)(strs.sh_offset + sh.sh_name));
        if (n <= 0)
            continue;
        name[n] = 0;
        if (!strcmp(name, ".go.buildinfo") || !strcmp(name, ".note.go.buildid")) {
            rc = 1;
            break;
        }
    }
out:
    close(fd);
    return rc;
}

int slip_exe__beside(const char *file, const char *const *rel, size_t n, int amode, char *out, size_t len)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", file);
    char *slash = strrchr(dir, '/');
    if (!slash)
        return -ENOENT;
    *slash = 0;
    for (size_t i = 0; i < n; i++) {
        int w = snprintf(out, len, "%s/%s", dir, rel[i]);
        if (w > 0 && (size_t)w < len && access(out, amode) == 0)
            return 0;
    }
    return -ENOENT;
}
