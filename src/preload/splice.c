/* splice() between an accelerated TCP socket and a pipe, by copying through a buffer: the stack's
 * data is in its own memory, not in kernel pages. Nothing may be lost in between, so each
 * direction takes from its source only what the destination has accepted: socket -> pipe peeks,
 * writes without waiting (RWF_NOWAIT), then consumes exactly what the pipe took; pipe -> socket
 * reads no more than the socket has room for. Anything else goes to the kernel's splice. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "block/blk.h"
#include "preload/file.h"
#include "preload/preload.h"
#include "stack/stack.h"

#define SPLICE_CHUNK PRELOAD_SCRATCH_BYTES

static bool is_pipe(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

static bool fd_nonblock(int fd)
{
    int fl = real_fcntl(fd, F_GETFL);
    return fl >= 0 && (fl & O_NONBLOCK);
}

/* Free bytes in a pipe (capacity less what is queued); an estimate, used only where the kernel
 * cannot write without waiting (no RWF_NOWAIT on pipes before Linux 5.x). */
static size_t pipe_room(int fd)
{
    int cap = real_fcntl(fd, F_GETPIPE_SZ);
    int queued = 0;
    if (cap <= 0 || real_ioctl(fd, FIONREAD, &queued) < 0)
        return 0;
    return queued < cap ? (size_t)(cap - queued) : 0;
}

/* Writes to the pipe without waiting: bytes taken, -EAGAIN when it is full, negative errno. */
static ssize_t pipe_write_nowait(int fd, const void *buf, size_t n)
{
    static int no_nowait;
    struct iovec v = { (void *)buf, n };
    if (!no_nowait) {
        ssize_t w = pwritev2(fd, &v, 1, -1, RWF_NOWAIT);
        if (w >= 0)
            return w;
        if (errno != EOPNOTSUPP && errno != EINVAL)
            return -errno;
        no_nowait = 1;
    }
    size_t room = pipe_room(fd);
    if (room == 0)
        return -EAGAIN;
    ssize_t w = real_write(fd, buf, n < room ? n : room);
    return w < 0 ? -errno : w;
}

/* Waits until fd is ready for ev (a pipe end); 0, or negative errno (EINTR). */
static int wait_fd(int fd, short ev)
{
    struct pollfd pf = { .fd = fd, .events = ev };
    for (;;) {
        int r = real_poll(&pf, 1, -1);
        if (r > 0)
            return 0;
        if (r < 0)
            return -errno;
    }
}

/* Socket -> pipe. */
static ssize_t from_socket(struct pfd *p, int pipefd, size_t len, bool nb)
{
    char *buf = preload_scratch(SCRATCH_SPLICE_IN);
    if (!buf)
        return -ENOMEM;
    struct slip_stack *s = pfd_stack(p);
    size_t done = 0;
    while (done < len) {
        size_t want = len - done < SPLICE_CHUNK ? len - done : SPLICE_CHUNK;
        ssize_t n = slip_tcp__recv(s, p->sock, buf, want, 1);
        if (n == -EAGAIN && !done && !nb) {
            int rc = preload_block(p, EPOLLIN | EPOLLRDHUP, p->rcvtimeo_ms, -1);
            if (rc < 0)
                return rc;
            continue;
        }
        if (n <= 0) {
            if (done)
                break;
            return n;           /* 0: end of stream; -EAGAIN; an error */
        }
        ssize_t w = pipe_write_nowait(pipefd, buf, (size_t)n);
        if (w == -EAGAIN && !done && !nb) {
            /* The pipe is full: wait for its reader, then look at the socket again. */
            int rc = wait_fd(pipefd, POLLOUT);
            if (rc < 0)
                return rc;
            continue;
        }
        if (w <= 0) {
            if (done)
                break;
            return w == 0 ? -EAGAIN : w;
        }
        /* Consume exactly what the pipe took; it is what was peeked, the start of the queue. */
        ssize_t c = slip_tcp__recv(s, p->sock, buf, (size_t)w, 0);
        if (c != w)
            return c < 0 ? c : -EIO;
        done += (size_t)w;
        if (w < n)
            break;              /* the pipe is full */
    }
    return (ssize_t)done;
}

/* Room in the socket's send queue, in bytes. */
static size_t sock_room(struct pfd *p)
{
    struct slip_tcp_info in;
    int sndbuf = 0;
    if (slip_tcp__info(pfd_stack(p), p->sock, &in) < 0 || slip_tcp__getopt(pfd_stack(p), p->sock, SLIP_TCPO_SNDBUF, &sndbuf) < 0)
        return 0;
    return (size_t)sndbuf > in.snd_queued ? (size_t)sndbuf - in.snd_queued : 0;
}

/* Sends all of buf on a blocking socket (what was taken from the pipe must not be lost). */
static ssize_t send_all(int fd, const char *buf, size_t n, int flags)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = pre_send(fd, buf + done, n - done, flags);
        if (w < 0) {
            if (errno == EAGAIN) {
                struct pfd *p = pfd_get(fd);
                if (p)
                    preload_block(p, EPOLLOUT, -1, -1);
                continue;
            }
            if (errno == EINTR)
                continue;
            return done ? (ssize_t)done : -errno;
        }
        done += (size_t)w;
    }
    return (ssize_t)done;
}

/* Pipe -> socket with the block path on (SLIP_BLOCK_SENDFILE): the pipe is read straight into
 * frames the stack lends for the send queue (slip_tcp__zc_reserve), one copy where the buffer
 * takes two; a file -> pipe -> socket relay thus costs what sendfile's cached path costs. The
 * loan is taken only once the pipe has data and the queue has room, and the pipe read never
 * waits (RWF_NOWAIT, or a poll before a plain read), so frames are not held across a wait.
 * -ENOTSUP: no frames to lend here, the buffered way goes on. */
static ssize_t to_socket_frames(int pipefd, struct pfd *p, size_t len, bool nb, bool more)
{
    struct slip_stack *s = pfd_stack(p);
    bool sock_nb = nb || p->nonblock;
    for (;;) {
        if (!nb) {
            int rc = wait_fd(pipefd, POLLIN);
            if (rc < 0)
                return rc;
        }
        struct slip_tcp_zc z;
        ssize_t b = slip_tcp__zc_reserve(s, p->sock, 0, len, &z);
        if (b == -EAGAIN && !sock_nb) {
            int rc = preload_block(p, EPOLLOUT, p->sndtimeo_ms, -1);
            if (rc < 0)
                return rc;
            continue;
        }
        if (b == -ENOBUFS || b == -EOPNOTSUPP || b == 0)
            return -ENOTSUP;
        if (b < 0)
            return b;
        struct iovec iov[SLIP_TCP_ZC_MAX];
        int n = 0;
        for (size_t left = (size_t)b; left && n < (int)z.n; n++) {
            iov[n].iov_base = z.iov[n].iov_base;
            iov[n].iov_len = left < z.iov[n].iov_len ? left : z.iov[n].iov_len;
            left -= iov[n].iov_len;
        }
        ssize_t r = preadv2(pipefd, iov, n, -1, RWF_NOWAIT);
        if (r < 0 && (errno == EOPNOTSUPP || errno == EINVAL)) {
            struct pollfd pf = { .fd = pipefd, .events = POLLIN };
            r = real_poll(&pf, 1, 0) == 1 ? real_readv(pipefd, iov, n) : (errno = EAGAIN, -1);
        }
        int e = errno;
        if (r <= 0) {
            slip_tcp__zc_commit(s, p->sock, &z, 0, 0, 0);
            if (r == 0)
                return 0;       /* no writer left */
            if (e == EAGAIN && !nb)
                continue;       /* another reader took it first: wait again */
            return -e;
        }
        ssize_t c = slip_tcp__zc_commit(s, p->sock, &z, 0, (size_t)r, more);
        if (c > 0) {
            struct blk_stats *st = blk__stats();
            __atomic_fetch_add(&st->splice_bytes, (uint64_t)c, __ATOMIC_RELAXED);
        }
        if (c == -EPIPE || c == -ENOTCONN) {
            raise(SIGPIPE);
            c = -EPIPE;
        }
        return c;
    }
}

/* Pipe -> socket. */
static ssize_t to_socket(int pipefd, int sockfd, struct pfd *p, size_t len, bool nb, bool more)
{
    if (bfd_frames_on()) {
        ssize_t r = to_socket_frames(pipefd, p, len, nb, more);
        if (r != -ENOTSUP)
            return r;
    }
    char *buf = preload_scratch(SCRATCH_SPLICE_OUT);
    if (!buf)
        return -ENOMEM;
    size_t want = len < SPLICE_CHUNK ? len : SPLICE_CHUNK;
    bool sock_nb = nb || p->nonblock;
    if (sock_nb) {
        slip_stack__poll(pfd_stack(p));
        size_t room = sock_room(p);
        if (room == 0)
            return -EAGAIN;
        if (want > room)
            want = room;
    }
    ssize_t r;
    if (nb) {
        struct iovec v = { buf, want };
        r = preadv2(pipefd, &v, 1, -1, RWF_NOWAIT);
        if (r < 0 && (errno == EOPNOTSUPP || errno == EINVAL)) {
            struct pollfd pf = { .fd = pipefd, .events = POLLIN };
            r = real_poll(&pf, 1, 0) == 1 ? real_read(pipefd, buf, want) : (errno = EAGAIN, -1);
        }
    } else {
        r = real_read(pipefd, buf, want);
    }
    if (r <= 0)
        return r < 0 ? -errno : 0;
    /* Within the room just measured this does not wait; if the stack still takes less (out of
     * frames), the rest is sent waiting rather than dropped. */
    return send_all(sockfd, buf, (size_t)r, more ? MSG_MORE : 0);     /* EPIPE raises SIGPIPE */
}

ssize_t pre_splice(int in, loff_t *off_in, int out, loff_t *off_out, size_t len, unsigned int flags)
{
    struct pfd *pi = pfd_get(in), *po = pfd_get(out);
    bool ai = pi && pi->kind != PFD_EPOLL, ao = po && po->kind != PFD_EPOLL;
    if (!ai && !ao)
        return real_splice(in, off_in, out, off_out, len, flags);
    /* Linux: one end must be a pipe; sockets and pipes take no offset. */
    int other = ai ? out : in;
    if ((ai && ao) || !is_pipe(other))
        return set_errno(-EINVAL);
    if (off_in || off_out)
        return set_errno(-ESPIPE);
    if ((ai && pi->kind != PFD_TCP) || (ao && po->kind != PFD_TCP))
        return set_errno(-EINVAL);      /* UDP: see docs/COMPLIANCE.md */
    if (len == 0)
        return 0;
    /* Linux (fs/splice.c): O_NONBLOCK on either file makes the whole call non-blocking. */
    bool nb = (flags & SPLICE_F_NONBLOCK) || fd_nonblock(in) || fd_nonblock(out);
    ssize_t r = ai ? from_socket(pi, out, len, nb) : to_socket(in, out, po, len, nb, (flags & SPLICE_F_MORE) != 0);
    return r < 0 ? set_errno((int)r) : r;
}
