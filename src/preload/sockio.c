/* Data calls of the POSIX layer on accelerated sockets: send/recv and their variants (write,
 * readv, sendmsg, recvmmsg, sendfile ...), TCP and UDP, blocking as Linux would. */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include "preload/file.h"
#include "preload/preload.h"
#include "stack/stack.h"

/* ---- data ---- */

static ssize_t tcp_send_data(struct pfd *p, const struct iovec *iov, int iovcnt, int flags);

static ssize_t tcp_send(struct pfd *p, const struct iovec *iov, int iovcnt, int flags)
{
    ssize_t n = tcp_send_data(p, iov, iovcnt, flags);
    /* Linux ignores MSG_ZEROCOPY on a socket without SO_ZEROCOPY. */
    if (n > 0 && (flags & MSG_ZEROCOPY) && p->zerocopy)
        pre_zc__sent(p);
    return n;
}

static ssize_t tcp_send_data(struct pfd *p, const struct iovec *iov, int iovcnt, int flags)
{
    struct slip_stack *s = pfd_stack(p);
    size_t total = 0, done = 0;
    for (int i = 0; i < iovcnt; i++)
        total += iov[i].iov_len;
    bool nb = p->nonblock || (flags & MSG_DONTWAIT);
    for (int i = 0; i < iovcnt; i++)
        if (!iov[i].iov_base && iov[i].iov_len)
            return set_errno(-EFAULT);  /* the kernel's copy would fault; ours would crash */
    for (int i = 0; i < iovcnt;) {
        size_t off = 0;
        for (int k = 0; k < i; k++)
            off += iov[k].iov_len;
        size_t skip = done - off;
        if (skip >= iov[i].iov_len) {
            i++;
            continue;
        }
        bool last = done + (iov[i].iov_len - skip) == total;
        ssize_t n = slip_tcp__send(s, p->sock, (const char *)iov[i].iov_base + skip, iov[i].iov_len - skip,
                                   (((flags & MSG_MORE) || !last) ? SLIP_SEND_MORE : 0) |
                                       ((flags & MSG_EOR) && last ? SLIP_SEND_EOR : 0));
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n == -EAGAIN || n == -ENOBUFS) {
            if (nb)
                return done ? (ssize_t)done : set_errno(-EAGAIN);
            /* A blocking send waits until all of it is queued, as Linux's tcp_sendmsg does: only
             * a signal or SO_SNDTIMEO ends it early, with what was queued so far. A program that
             * does not loop on write() must not lose the rest. */
            int rc = preload_block(p, EPOLLOUT, p->sndtimeo_ms, -1);
            if (rc < 0)
                return done ? (ssize_t)done : set_errno(rc);
            continue;
        }
        if (done)
            return (ssize_t)done;
        if (n == -ENOTCONN)
            n = -EPIPE;     /* Linux (sk_stream_wait_connect): not connected yet/any more is EPIPE */
        if (n == -EPIPE && !(flags & MSG_NOSIGNAL))
            raise(SIGPIPE);
        return set_errno((int)n);
    }
    return (ssize_t)done;
}

static ssize_t tcp_recv(struct pfd *p, void *buf, size_t len, int flags)
{
    struct slip_stack *s = pfd_stack(p);
    bool nb = p->nonblock || (flags & MSG_DONTWAIT);
    size_t done = 0;
    if (len == 0)
        return 0;
    if (!buf)
        return set_errno(-EFAULT);  /* the kernel's copy would fault; ours would crash */
    if (p->rcvlowat && !nb && !(flags & MSG_WAITALL) && !(pfd_poll(p) & EPOLLIN)) {
        /* SO_RCVLOWAT: a blocking read waits for that much (pfd_poll counts it); on SO_RCVTIMEO
         * it returns what is there, as Linux. */
        int rc = preload_block(p, EPOLLIN | EPOLLRDHUP, p->rcvtimeo_ms, -1);
        if (rc == -EAGAIN)
            nb = true;
        else if (rc < 0)
            return set_errno(rc);
    }
    for (;;) {
        ssize_t n = slip_tcp__recv(s, p->sock, (char *)buf + done, len - done, (flags & MSG_PEEK) != 0);
        if (n > 0) {
            done += (size_t)n;
            if (!(flags & MSG_WAITALL) || done == len || (flags & MSG_PEEK))
                return (ssize_t)done;
            continue;
        }
        if (n == 0)
            return (ssize_t)done;
        if (n != -EAGAIN)
            return done ? (ssize_t)done : set_errno((int)n);
        if (nb)
            return done ? (ssize_t)done : set_errno(-EAGAIN);
        int rc = preload_block(p, EPOLLIN | EPOLLRDHUP, p->rcvtimeo_ms, -1);
        if (rc < 0)
            return done ? (ssize_t)done : set_errno(rc);
    }
}

static ssize_t udp_sendv(int fd, struct pfd *p, const struct iovec *iov, int iovcnt, const struct sockaddr *sa,
                         socklen_t sl, int flags)
{
    be32 dst = 0;
    uint16_t dport = 0;
    if (p->v6 && sa && sl >= (socklen_t)sizeof(sa_family_t) && sa->sa_family == AF_UNSPEC)
        sa = NULL;      /* udpv6_sendmsg: no address, the connected peer's */
    if (p->v6) {
        be32 la;
        uint16_t lp;
        if (slip_udp__local(pfd_stack(p), p->sock, &la, &lp) == 0 && !lp) {
            /* Unbound: bind the kernel socket to [::]:0 and the stack to its port (both
             * families unless v6-only), so that every datagram leaves from one port, whichever
             * of the stack or the kernel socket (loopback) sends it, as on Linux. */
            int rc = pre_udp6_autobind(fd, p);
            if (rc < 0) {
                preload_release(fd);
                struct msghdr m = { .msg_name = (void *)sa, .msg_namelen = sa ? sl : 0,
                                    .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt };
                return real_sendmsg(fd, &m, flags);
            }
        }
    }
    if (p->v6) {
        struct wire_ipv6_addr d6;
        uint32_t scope = 0;
        uint16_t dp6 = 0;
        struct slip_udp_peer peer;
        int r6 = sa ? pre_udp6_dst(p, sa, sl, &d6, &scope, &dp6)
                    : (slip_udp6__peer(pfd_stack(p), p->sock, &peer) == 0 && peer.v6);
        if (r6 < 0) {
            struct msghdr m = { .msg_name = (void *)sa, .msg_namelen = sl, .msg_iov = (struct iovec *)iov,
                                .msg_iovlen = (size_t)iovcnt };
            return real_sendmsg(fd, &m, flags);
        }
        if (r6 == 1) {
            if (slip_udp__poll(pfd_stack(p), p->sock) & SLIP_EV_ERR) {
                int e = slip_udp__so_error(pfd_stack(p), p->sock);
                if (e)
                    return set_errno(e < 0 ? e : -e);
            }
            ssize_t n = slip_udp6__sendmsg(pfd_stack(p), p->sock, iov, iovcnt, sa ? &d6 : NULL, dp6, scope);
            return n < 0 ? set_errno((int)n) : n;
        }
    }
    if (sa) {
        bool v4 = pre_sa_v4(p, sa, sl, false, &dst, &dport);
        if (!v4 && !p->v6)
            return set_errno(-EINVAL);
        uint32_t seq = slip_stack__ctl_seq(pfd_stack(p)) | 1u;     /* never 0: 0 means no answer */
        bool via_us = v4 && p->via_us_seq == seq && p->via_us_dst == dst;
        if (!via_us && v4 && slip_stack__routes_via_us(pfd_stack(p), dst)) {
            p->via_us_dst = dst;
            p->via_us_seq = seq;
            via_us = true;
        }
        if (!via_us) {
            /* Loopback or another interface: the kernel socket (same port) sends it, and its
             * replies are read from the kernel socket too (udp_recv). */
            struct msghdr m = { .msg_name = (void *)sa, .msg_namelen = sl, .msg_iov = (struct iovec *)iov,
                                .msg_iovlen = (size_t)iovcnt };
            return real_sendmsg(fd, &m, flags);
        }
    }
    /* A pending error (ICMP port unreachable on a connected socket) is reported by the next send
     * too, once, as Linux's sock_alloc_send_skb does. */
    if (slip_udp__poll(pfd_stack(p), p->sock) & SLIP_EV_ERR) {
        int e = slip_udp__so_error(pfd_stack(p), p->sock);
        if (e)
            return set_errno(e < 0 ? e : -e);
    }
    ssize_t n = slip_udp__sendmsg(pfd_stack(p), p->sock, iov, iovcnt, dst, dport);
    return n < 0 ? set_errno((int)n) : n;
}

static ssize_t udp_recv(int fd, struct pfd *p, void *buf, size_t len, int flags, struct sockaddr *sa, socklen_t *sl,
                        int *mflags, struct slip_udp_peer *peer_out)
{
    struct slip_stack *s = pfd_stack(p);
    bool nb = p->nonblock || (flags & MSG_DONTWAIT);
    for (;;) {
        be32 a;
        uint16_t port;
        struct slip_udp_peer peer;
        unsigned uf = SLIP_UDP_RECV_TRUNC | ((flags & MSG_PEEK) ? SLIP_UDP_RECV_PEEK : 0);
        /* An AF_INET6 socket may hold datagrams of both families (udp6.c). */
        ssize_t full = p->v6 ? slip_udp6__recvfrom(s, p->sock, buf, len, &peer, uf)
                             : slip_udp__recvfrom(s, p->sock, buf, len, &a, &port, uf);
        if (full >= 0) {
            if (p->v6)
                pre_sa_fill_peer(p, sa, sl, &peer);
            else
                pre_sa_fill(p, sa, sl, a, port);
            if (peer_out && p->v6)
                *peer_out = peer;
            if (mflags && (size_t)full > len)
                *mflags |= MSG_TRUNC;
            return (flags & MSG_TRUNC) ? full : (ssize_t)SLIP_MIN((size_t)full, len);
        }
        if (full != -EAGAIN)
            return set_errno((int)full);
        /* Datagrams from this host (loopback) arrive on the kernel socket. */
        struct pollfd kp = { .fd = fd, .events = POLLIN };
        if (real_poll(&kp, 1, 0) == 1)
            return real_recvfrom(fd, buf, len, flags | MSG_DONTWAIT, sa, sl);
        if (nb)
            return set_errno(-EAGAIN);
        int rc = preload_block(p, EPOLLIN, p->rcvtimeo_ms, fd);
        if (rc < 0)
            return set_errno(rc);
    }
}

ssize_t pre_sendmsg(int fd, const struct msghdr *m, int flags)
{
    struct pfd *p = pfd_get(fd);
    if (!p && g_pre.stack && m->msg_control) {
        int passed = preload_pass_rights(m, 1);
        ssize_t r = real_sendmsg(fd, m, flags);
        if (r < 0 && passed) {
            int e = errno;
            preload_pass_rights(m, -1);
            errno = e;
        }
        return r;
    }
    if (!p || p->kind == PFD_EPOLL)
        return real_sendmsg(fd, m, flags);
    if (m->msg_iovlen > UIO_MAXIOV)
        return set_errno(-EMSGSIZE);    /* as the kernel's ___sys_sendmsg */
    if (p->kind == PFD_UDP)
        return udp_sendv(fd, p, m->msg_iov, (int)m->msg_iovlen, m->msg_name, m->msg_namelen, flags);
    return tcp_send(p, m->msg_iov, (int)m->msg_iovlen, flags);
}

ssize_t pre_sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t sl)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind == PFD_EPOLL)
        return real_sendto(fd, buf, n, flags, sa, sl);
    struct iovec v = { (void *)buf, n };
    if (p->kind == PFD_UDP)
        return udp_sendv(fd, p, &v, 1, sa, sl, flags);
    return tcp_send(p, &v, 1, flags);
}

ssize_t pre_send(int fd, const void *buf, size_t n, int flags)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind == PFD_EPOLL)
        return real_send(fd, buf, n, flags);
    return pre_sendto(fd, buf, n, flags, NULL, 0);
}

ssize_t pre_write(int fd, const void *buf, size_t n)
{
    struct pfd *p = pfd_get(fd);
    if (!p && bfd_get(fd))
        return file_write(fd, buf, n);
    if (!p || p->kind == PFD_EPOLL)
        return real_write(fd, buf, n);
    return pre_sendto(fd, buf, n, 0, NULL, 0);
}

ssize_t pre_writev(int fd, const struct iovec *iov, int n)
{
    struct pfd *p = pfd_get(fd);
    if (!p && bfd_get(fd))
        return file_rw(fd, true, iov, n, -1, 0);
    if (!p || p->kind == PFD_EPOLL)
        return real_writev(fd, iov, n);
    if (n < 0 || n > UIO_MAXIOV)
        return set_errno(-EINVAL);      /* as the kernel's import_iovec */
    if (p->kind == PFD_UDP)
        return udp_sendv(fd, p, iov, n, NULL, 0, 0);
    return tcp_send(p, iov, n, 0);
}

ssize_t pre_recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *sa, socklen_t *sl)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind == PFD_EPOLL)
        return real_recvfrom(fd, buf, n, flags, sa, sl);
    if (p->kind == PFD_UDP)
        return udp_recv(fd, p, buf, n, flags, sa, sl, NULL, NULL);
    ssize_t r = tcp_recv(p, buf, n, flags);
    if (r >= 0 && sa && sl)
        *sl = 0;
    return r;
}

ssize_t pre_recv(int fd, void *buf, size_t n, int flags)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind == PFD_EPOLL)
        return real_recv(fd, buf, n, flags);
    return pre_recvfrom(fd, buf, n, flags, NULL, NULL);
}

ssize_t pre_read(int fd, void *buf, size_t n)
{
    struct pfd *p = pfd_get(fd);
    if (!p && bfd_get(fd))
        return file_read(fd, buf, n);
    if (!p || p->kind == PFD_EPOLL)
        return real_read(fd, buf, n);
    return pre_recvfrom(fd, buf, n, 0, NULL, NULL);
}

ssize_t pre_readv(int fd, const struct iovec *iov, int n)
{
    struct pfd *p = pfd_get(fd);
    if (!p && bfd_get(fd))
        return file_rw(fd, false, iov, n, -1, 0);
    if (!p || p->kind == PFD_EPOLL)
        return real_readv(fd, iov, n);
    if (n < 0 || n > UIO_MAXIOV)
        return set_errno(-EINVAL);
    ssize_t total = 0;
    for (int i = 0; i < n; i++) {
        if (!iov[i].iov_len)
            continue;
        /* Only the first piece may block; later ones take what is already there. */
        ssize_t r = pre_recvfrom(fd, iov[i].iov_base, iov[i].iov_len, total ? MSG_DONTWAIT : 0, NULL, NULL);
        if (r < 0)
            return total ? total : -1;
        total += r;
        if ((size_t)r < iov[i].iov_len)
            break;
    }
    return total;
}

ssize_t pre_recvmsg(int fd, struct msghdr *m, int flags)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind == PFD_EPOLL) {
        ssize_t r = real_recvmsg(fd, m, flags);
        if (r >= 0 && !p)
            preload_adopt_rights(m, fd);
        return r;
    }
    if (m->msg_iovlen > UIO_MAXIOV)
        return set_errno(-EMSGSIZE);    /* as the kernel's ___sys_recvmsg */
    if (flags & MSG_ERRQUEUE) {
        /* Our error queue holds zero-copy completions only; never the stream's data. */
        ssize_t r = pre_zc__recv_errqueue(p, m);
        return r < 0 ? set_errno((int)r) : r;
    }
    m->msg_flags = 0;
    size_t ctl_room = m->msg_control ? m->msg_controllen : 0;
    m->msg_controllen = 0;
    if (p->kind == PFD_UDP) {
        /* Gather into the first iovec piece when there is one; else a bounce buffer. */
        char *bounce = preload_scratch(SCRATCH_RECVMSG);
        if (!bounce)
            return set_errno(-ENOMEM);
        size_t cap = 0;
        for (size_t i = 0; i < m->msg_iovlen; i++)
            cap += m->msg_iov[i].iov_len;
        socklen_t nl = m->msg_namelen;
        struct slip_udp_peer peer = { 0 };
        size_t ctl_cap = ctl_room;
        ssize_t r = udp_recv(fd, p, bounce, SLIP_MIN(cap, (size_t)PRELOAD_SCRATCH_BYTES), flags & ~MSG_TRUNC,
                             m->msg_name, m->msg_name ? &nl : NULL, &m->msg_flags, &peer);
        if (r < 0)
            return r;
        m->msg_namelen = m->msg_name ? nl : 0;
        if (p->recvpktinfo6 && peer.has_dst)
            pre_put_pktinfo6(m, ctl_cap, &peer.dst, peer.ifindex);
        size_t off = 0;
        for (size_t i = 0; i < m->msg_iovlen && off < (size_t)r; i++) {
            size_t k = SLIP_MIN(m->msg_iov[i].iov_len, (size_t)r - off);
            memcpy(m->msg_iov[i].iov_base, bounce + off, k);
            off += k;
        }
        return r;
    }
    m->msg_namelen = 0;
    ssize_t total = 0;
    for (size_t i = 0; i < m->msg_iovlen; i++) {
        if (!m->msg_iov[i].iov_len)
            continue;
        ssize_t r = tcp_recv(p, m->msg_iov[i].iov_base, m->msg_iov[i].iov_len, total ? (flags | MSG_DONTWAIT) : flags);
        if (r < 0)
            return total ? total : -1;
        total += r;
        if ((size_t)r < m->msg_iov[i].iov_len)
            break;
    }
    return total;
}

ssize_t pre_sendfile(int out, int in, off_t *off, size_t n)
{
    struct pfd *p = pfd_get(out);
    if (!p || p->kind != PFD_TCP)
        return real_sendfile(out, in, off, n);
    ssize_t zr;
    if (file_sendfile(p, in, off, n, &zr))      /* the block path: the file read into frames */
        return zr;
    char *buf = preload_scratch(SCRATCH_SENDFILE);
    if (!buf)
        return set_errno(-ENOMEM);
    size_t done = 0;
    while (done < n) {
        size_t want = SLIP_MIN(n - done, (size_t)PRELOAD_SCRATCH_BYTES);
        ssize_t r = off ? pread(in, buf, want, *off + (off_t)done) : real_read(in, buf, want);
        if (r < 0)
            return done ? (ssize_t)done : -1;
        if (r == 0)
            break;
        struct iovec v = { buf, (size_t)r };
        ssize_t w = tcp_send(p, &v, 1, 0);
        if (w < 0) {
            if (done)
                break;
            return -1;
        }
        done += (size_t)w;
        if (w < r) {
            if (!off)
                lseek(in, (off_t)w - r, SEEK_CUR);   /* give back what was not sent */
            break;
        }
    }
    if (off)
        *off += (off_t)done;
    file_sendfile_copied(done);
    return (ssize_t)done;
}

int pre_sendmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags)
{
    struct pfd *p = pfd_get(fd);
    /* A kernel socket (a UNIX one) may carry accelerated fds in SCM_RIGHTS: one message at a
     * time through pre_sendmsg, which accounts for them. */
    bool rights = false;
    for (unsigned int i = 0; !p && g_pre.stack && i < n && !rights; i++)
        rights = v[i].msg_hdr.msg_control != NULL;
    if ((!p || p->kind == PFD_EPOLL) && !rights)
        return real_sendmmsg(fd, v, n, flags);
    unsigned int i = 0;
    for (; i < n; i++) {
        ssize_t r = pre_sendmsg(fd, &v[i].msg_hdr, flags);
        if (r < 0)
            return i ? (int)i : -1;
        v[i].msg_len = (unsigned int)r;
    }
    return (int)i;
}

int pre_recvmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags, struct timespec *t)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind == PFD_EPOLL)
        return real_recvmmsg(fd, v, n, flags, t);
    unsigned int i = 0;
    for (; i < n; i++) {
        /* The first may block (unless MSG_DONTWAIT); later ones take what is queued (Linux also
         * returns what it has once one arrived, with MSG_WAITFORONE). */
        int f = i ? ((flags & ~MSG_WAITFORONE) | MSG_DONTWAIT) : (flags & ~MSG_WAITFORONE);
        ssize_t r = pre_recvmsg(fd, &v[i].msg_hdr, f);
        if (r < 0)
            return i ? (int)i : -1;
        v[i].msg_len = (unsigned int)r;
    }
    return (int)i;
}
