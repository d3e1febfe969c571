/* Shared arena; see arena.h. */
#include "stack/arena.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Faults [p, p + len) in for writing: MADV_POPULATE_WRITE (Linux 5.14), else one touch a page. */
static void populate(void *p, size_t len, size_t page)
{
#ifdef MADV_POPULATE_WRITE
    if (madvise(p, len, MADV_POPULATE_WRITE) == 0)
        return;
#endif
    for (size_t o = 0; o < len; o += page)
        ((volatile char *)p)[o] = 0;
}

int slip_arena__create(struct slip_arena *a, const char *name, size_t size, size_t populate_len)
{
    long page = sysconf(_SC_PAGESIZE);
    size = SLIP_ALIGN_UP(size, (size_t)page);
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    /* Sealed at its size: a process that shares the stack cannot shrink it under another's
     * mapping (whose next touch of the lost pages would be a SIGBUS) nor grow it. */
    if (ftruncate(fd, (off_t)size) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return -e;
    }
    /* Fault the hot part in now, not on the first packet. */
    populate(p, SLIP_MIN(SLIP_ALIGN_UP(populate_len, (size_t)page), size), (size_t)page);
    a->memfd = fd;
    a->base = p;
    a->size = size;
    a->used = 0;
    return 0;
}

int slip_arena__attach(struct slip_arena *a, int memfd)
{
    struct stat st;
    if (fstat(memfd, &st) < 0)
        return -errno;
    int seals = fcntl(memfd, F_GET_SEALS);
    if (!S_ISREG(st.st_mode) || seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
        return -EINVAL;
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (p == MAP_FAILED)
        return -errno;
    a->memfd = memfd;
    a->base = p;
    a->size = (size_t)st.st_size;
    a->used = a->size;
    return 0;
}

void slip_arena__destroy(struct slip_arena *a)
{
    if (a->base)
        munmap(a->base, a->size);
    if (a->memfd >= 0)
        close(a->memfd);
    a->base = NULL;
    a->memfd = -1;
}

int64_t slip_arena__carve(struct slip_arena *a, size_t size, size_t align)
{
    size_t off = SLIP_ALIGN_UP(a->used, align);
    if (off + size > a->size)
        return -ENOMEM;
    a->used = off + size;
    return (int64_t)off;
}
