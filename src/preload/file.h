/* The POSIX layer's block path (file.c): which fds are served by the block engine (src/block),
 * and the calls the socket wrappers hand over when an fd is not a socket. */
#ifndef SLIP_PRELOAD_FILE_H
#define SLIP_PRELOAD_FILE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

struct bfd {
    uint8_t on;                 /* opened with O_DIRECT on a regular file or block device */
    uint8_t kernel;             /* the probe gave its device to the kernel: no engine, no lookup */
    uint8_t iopoll;             /* its device's requests go to a polled ring */
    uint64_t dev;               /* the device the probe decides for */
    uint32_t gen;               /* new for every open of this number (the engine's registered-file slots) */
    uint32_t mem_align;         /* O_DIRECT buffer alignment (statx dio_mem_align; 0 unknown) */
    /* sendfile from this fd (fsend.c): an O_DIRECT twin of the same open file (fd + 1; 0 none
     * yet, -1 the file cannot do O_DIRECT), for the file (dev, ino) it was made for; and on the
     * twin's own entry, the fd it serves (+ 1), so a program that closes it itself is noticed. */
    int32_t twin, twin_of;
    uint32_t twin_align, twin_mem;      /* the twin's dio_offset_align and dio_mem_align */
    uint64_t twin_dev, twin_ino;
};

extern struct bfd *g_bfd;       /* NULL until the block path is on; as long as g_pre.fds */

static inline struct bfd *bfd_get(int fd)
{
    extern int g_bfd_n;
    if (__builtin_expect(!g_bfd, 1) || fd < 0 || fd >= g_bfd_n || !g_bfd[fd].on)
        return NULL;
    return &g_bfd[fd];
}

/* read/write/readv/writev/preadv2/pwritev2 on an fd that is not an accelerated socket: the block
 * engine when the fd is one of ours and off >= 0, else the kernel (off -1: the fd's offset). */
ssize_t file_rw(int fd, bool write, const struct iovec *iov, int n, off_t off, int flags);
static inline ssize_t file_read(int fd, void *buf, size_t n)
{
    struct iovec v = { buf, n };
    return file_rw(fd, false, &v, 1, -1, 0);
}

static inline ssize_t file_write(int fd, const void *buf, size_t n)
{
    struct iovec v = { (void *)buf, n };
    return file_rw(fd, true, &v, 1, -1, 0);
}

/* fd stopped naming what it named (close, dup2 over it). */
void file_fd_gone(int fd);
/* newfd is a duplicate of fd (dup*, F_DUPFD*). */
void file_fd_dup(int fd, int newfd);
/* fcntl(F_SETFL) succeeded with these flags. */
void file_fd_setfl(int fd, long flags);
/* An O_DIRECT descriptor of the regular file open at fd (st: its fstat), made on first use and
 * closed with fd: the twin's number, or -1 when the file cannot do O_DIRECT (or the block path is
 * off). align: the file offset and length alignment O_DIRECT wants; mem: the buffer alignment;
 * dev: the device the engine's probe decides for. */
int file_direct_twin(int fd, const struct stat *st, uint32_t *align, uint32_t *mem, uint64_t *dev);
/* sendfile(out, in, off, n) with out an accelerated TCP socket (fsend.c): true when the block
 * path took the call (*ret: its result, errno set); false: the caller copies as before. */
struct pfd;
bool file_sendfile(struct pfd *p, int in, off_t *off, size_t n, ssize_t *ret);
/* The copying path sent n bytes of a sendfile to an accelerated TCP socket: counted while the
 * block path is on (sendfile_copied_bytes: a call below the frames' threshold, a declined file,
 * SLIP_BLOCK_SENDFILE=0). */
void file_sendfile_copied(size_t n);
/* Whether sends from files and pipes go through lent frames (the block path and
 * SLIP_BLOCK_SENDFILE on): sendfile above, splice's pipe -> socket half (splice.c). */
bool bfd_frames_on(void);
/* aio.c: whether a libaio context id is one of the block path's, and the io_* syscall on it
 * (a program calling syscall(SYS_io_submit, ...) itself); -errno as libaio returns it. */
bool aio_ctx_ours(unsigned long id);
long aio_syscall(long nr, const long *a);
/* At exit and _exit: in-flight libaio writes complete, counters printed (SLIP_DUMP_AT_EXIT). */
void preload_file_exit(void);
/* Reads SLIP_BLOCK*; with the block path on, makes the table and finds inherited O_DIRECT fds. */
void preload_file_init(void);

#endif
