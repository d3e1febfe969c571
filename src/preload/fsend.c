/* sendfile from a file to an accelerated TCP socket through the block path: the stack lends
 * frames of its UMEM for the connection's send queue (slip_tcp__zc_reserve), the file is read
 * into them, and the frames join the send queue as they are (slip_tcp__zc_commit). What the page
 * cache holds is read from there (RWF_NOWAIT on the program's descriptor: one copy, where the
 * copying path, sock.c's pre_sendfile, reads into a buffer and copies that into frames); what it
 * does not is read by the block engine with O_DIRECT straight into the frames (no copy), on an
 * O_DIRECT twin of the same open file made on first need (the descriptor itself when the program
 * opened it with O_DIRECT). The frames are whole and frame-aligned, so O_DIRECT's buffer rule
 * holds whenever the frame size is a multiple of the file's alignment; an offset inside a block
 * reads from the block's start and queues from the offset. A file that cannot do O_DIRECT
 * (tmpfs), or no frame to lend, leaves the call to the copying path. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "block/blk.h"
#include "preload/file.h"
#include "preload/preload.h"
#include "stack/stack.h"

/* Reads [pos, pos + len) of the twin into the lent frames (len a multiple of the alignment):
 * bytes read, or -errno. A device the probe gave to the kernel gets the kernel's own call, into
 * the same frames. */
static ssize_t read_into(int twin, uint64_t dev, struct slip_tcp_zc *z, size_t len, off_t pos)
{
    struct iovec iov[SLIP_TCP_ZC_MAX];
    int n = 0;
    for (size_t left = len; left && n < (int)z->n; n++) {
        iov[n].iov_base = z->iov[n].iov_base;
        iov[n].iov_len = left < z->iov[n].iov_len ? left : z->iov[n].iov_len;
        left -= iov[n].iov_len;
    }
    if (blk__route(dev) == BLK_ROUTE_KERNEL) {
        ssize_t r = real_preadv(twin, iov, n, pos);
        return r < 0 ? -errno : r;
    }
    struct blk_file f = { .fd = twin };     /* no registered slot (a twin lives one request), no bounce */
    ssize_t r = blk__rw_file(&f, BLK_OP_READ, iov, n, pos, 0);
    if (r == -ENOSYS) {
        r = real_preadv(twin, iov, n, pos);
        return r < 0 ? -errno : r;
    }
    return r;
}

/* Reads [pos, pos + len) of the program's own descriptor into the lent frames from byte lead
 * of the first, only from the page cache (RWF_NOWAIT: -EAGAIN rather than wait for the disk). */
static ssize_t read_cached(int in, struct slip_tcp_zc *z, size_t lead, size_t len, off_t pos)
{
    struct iovec iov[SLIP_TCP_ZC_MAX];
    int n = 0;
    for (size_t left = len; left && n < (int)z->n; n++) {
        size_t from = n == 0 ? lead : 0;
        iov[n].iov_base = (char *)z->iov[n].iov_base + from;
        iov[n].iov_len = z->iov[n].iov_len - from < left ? z->iov[n].iov_len - from : left;
        left -= iov[n].iov_len;
    }
    ssize_t r = real_preadv2(in, iov, n, pos, RWF_NOWAIT);
    return r < 0 ? -errno : r;
}

/* The error a send would have raised, as the POSIX call reports it. */
static ssize_t send_error(ssize_t e)
{
    if (e == -ENOTCONN)
        e = -EPIPE;             /* Linux: not connected (any more) is EPIPE for a send */
    if (e == -EPIPE)
        raise(SIGPIPE);         /* sendfile has no MSG_NOSIGNAL */
    return e;
}

/* The O_DIRECT side of one call, made on first need: a file served from the page cache never
 * gets a twin (nginx opens a file per request: that would be an open and a statx each). */
struct direct {
    int in, twin;               /* twin -2: not asked yet, -1: the file cannot (the copying path) */
    uint32_t align, mem;
    uint64_t dev;
    const struct stat *sb;
};

static bool direct_ready(struct direct *d)
{
    if (d->twin == -2)
        d->twin = file_direct_twin(d->in, d->sb, &d->align, &d->mem, &d->dev);
    return d->twin >= 0 && d->align && d->mem;
}

/* Waits for room in a blocking socket's send queue, as a blocking send does (0, or -errno). */
static int wait_room(struct pfd *p)
{
    return preload_block(p, EPOLLOUT, p->sndtimeo_ms, -1);
}

/* The loop: bytes sent (> 0), 0 at end of file before anything was sent, -errno, or -ENOTSUP
 * when nothing was done and the copying path should take the call. */
static ssize_t frames_send(struct pfd *p, struct direct *d, bool cache, off_t start, size_t n)
{
    struct slip_stack *s = pfd_stack(p);
    struct blk_stats *st = blk__stats();
    struct slip_tcp_zc z;
    size_t done = 0;
    while (done < n) {
        off_t pos = start + (off_t)done;
        ssize_t b, r;
        if (cache) {
            /* The page cache first: a file served again and again is there, and a read from it
             * into the frames is one copy where the copying path makes two. */
            b = slip_tcp__zc_reserve(s, p->sock, 0, n - done, &z);
            if (b == -EAGAIN && !p->nonblock) {
                int rc = wait_room(p);
                if (rc < 0)
                    return done ? (ssize_t)done : rc;
                continue;
            }
            if (b == -ENOBUFS || b == -EOPNOTSUPP || b == 0) {
                slip_tcp__zc_commit(s, p->sock, &z, 0, 0, 0);
                return done ? (ssize_t)done : -ENOTSUP;     /* nothing to lend: the copying path */
            }
            if (b < 0)
                return done ? (ssize_t)done : (b == -EAGAIN ? b : send_error(b));
            r = read_cached(d->in, &z, 0, (size_t)b, pos);
            if (r >= 0) {
                __atomic_fetch_add(&st->sendfile_cached_reads, 1, __ATOMIC_RELAXED);
                if (r == 0) {           /* end of file */
                    slip_tcp__zc_commit(s, p->sock, &z, 0, 0, 0);
                    break;
                }
                ssize_t c = slip_tcp__zc_commit(s, p->sock, &z, 0, (size_t)r, done + (size_t)r < n);
                if (c < 0)
                    return done ? (ssize_t)done : send_error(c);
                done += (size_t)c;
                __atomic_fetch_add(&st->sendfile_bytes, (uint64_t)c, __ATOMIC_RELAXED);
                __atomic_fetch_add(&st->sendfile_cached_bytes, (uint64_t)c, __ATOMIC_RELAXED);
                continue;               /* a short read: the rest is not cached, or the file ends */
            }
            slip_tcp__zc_commit(s, p->sock, &z, 0, 0, 0);
            if (r != -EAGAIN)
                cache = false;          /* no RWF_NOWAIT here, or an error (EBADF: the twin checks) */
        }
        /* Not in the page cache: from the disk with O_DIRECT, straight into frames (no copy, and
         * no page cache filled with it; the failed NOWAIT read started the kernel's readahead). */
        if (!direct_ready(d))
            return done ? (ssize_t)done : -ENOTSUP;
        size_t lead = (size_t)(pos % d->align);
        b = slip_tcp__zc_reserve(s, p->sock, lead, n - done, &z);
        if (b == -EAGAIN && !p->nonblock) {
            int rc = wait_room(p);
            if (rc < 0)
                return done ? (ssize_t)done : rc;
            continue;
        }
        if (b == -ENOBUFS || b == -EOPNOTSUPP || b == 0 ||
            (b > 0 && (z.frame_size % d->align || z.frame_size % d->mem))) {
            /* Nothing to lend, or frames O_DIRECT cannot take: the copying path (from here on). */
            slip_tcp__zc_commit(s, p->sock, &z, 0, 0, 0);
            return done ? (ssize_t)done : -ENOTSUP;
        }
        if (b < 0)
            return done ? (ssize_t)done : (b == -EAGAIN ? b : send_error(b));
        size_t rlen = (lead + (size_t)b + d->align - 1) / d->align * d->align;
        r = read_into(d->twin, d->dev, &z, rlen, pos - (off_t)lead);
        __atomic_fetch_add(&st->sendfile_reads, 1, __ATOMIC_RELAXED);
        if (r < 0) {
            slip_tcp__zc_commit(s, p->sock, &z, 0, 0, 0);
            if (r == -EINVAL && !done)
                return -ENOTSUP;        /* O_DIRECT refused after all: the copying path */
            return done ? (ssize_t)done : r;
        }
        size_t got = (size_t)r > lead ? (size_t)r - lead : 0;
        if (got > (size_t)b)
            got = (size_t)b;
        if (got == 0) {                 /* end of file */
            slip_tcp__zc_commit(s, p->sock, &z, 0, 0, 0);
            break;
        }
        ssize_t c = slip_tcp__zc_commit(s, p->sock, &z, lead, got, done + got < n);
        if (c < 0)
            return done ? (ssize_t)done : send_error(c);
        done += (size_t)c;
        __atomic_fetch_add(&st->sendfile_bytes, (uint64_t)c, __ATOMIC_RELAXED);
        if ((size_t)r < rlen && (size_t)r - lead <= got)
            break;                      /* a short read: the file ends here */
    }
    return (ssize_t)done;
}

void file_sendfile_copied(size_t n)
{
    if (g_bfd && n)
        __atomic_fetch_add(&blk__stats()->sendfile_copied_bytes, (uint64_t)n, __ATOMIC_RELAXED);
}

bool bfd_frames_on(void)
{
    return g_bfd && blk__config()->sendfile && g_pre.stack;
}

/* Below this a call goes the copying way: its two copies of a few KiB cost less than the loan's
 * second turn with the stack lock and the fstat (nginx's small files, measured with wrk). */
#define FSEND_MIN 16384

bool file_sendfile(struct pfd *p, int in, off_t *off, size_t n, ssize_t *ret)
{
    if (n < FSEND_MIN || !bfd_frames_on())
        return false;
    struct stat sb;
    if (fstat(in, &sb) < 0 || !S_ISREG(sb.st_mode) || (off && *off < 0))
        return false;           /* the copying path gives the kernel's answers */
    off_t start = off ? *off : lseek(in, 0, SEEK_CUR);
    if (start < 0)
        return false;
    struct direct d = { .in = in, .twin = -2, .sb = &sb };
    /* A descriptor the program opened with O_DIRECT is its own twin and never reads the cache. */
    ssize_t r = frames_send(p, &d, bfd_get(in) == NULL, start, n);
    struct blk_stats *st = blk__stats();
    if (r == -ENOTSUP) {
        __atomic_fetch_add(&st->sendfile_declined, 1, __ATOMIC_RELAXED);
        return false;
    }
    __atomic_fetch_add(&st->sendfile_calls, 1, __ATOMIC_RELAXED);
    if (r > 0) {
        if (off)
            *off = start + r;
        else
            lseek(in, start + r, SEEK_SET);
    }
    *ret = r < 0 ? set_errno((int)r) : r;
    return true;
}
