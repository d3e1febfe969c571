/* Socket options and ioctls of accelerated sockets (POSIX layer): the kernel socket validates and
 * keeps every option; the stack gets the ones it acts on and answers the ones it knows better
 * (SO_ERROR, TCP_INFO, the TCP options it implements, FIONREAD/SIOCOUTQ). */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "preload/preload.h"
#include "stack/stack.h"
#include "tcp/cc/cc.h"

#ifndef SIOCOUTQ
#define SIOCOUTQ TIOCOUTQ
#endif

/* As Linux's sock_getsockopt: a short optlen gets the first bytes of the value, not EINVAL. */
static int put_int(void *val, socklen_t *len, int v)
{
    if (!len || (int)*len < 0)
        return set_errno(-EINVAL);
    socklen_t n = SLIP_MIN(*len, (socklen_t)sizeof(v));
    if (n && !val)
        return set_errno(-EFAULT);
    memcpy(val, &v, (size_t)n);
    *len = n;
    return 0;
}

static int tcp_info_fill(struct pfd *p, int fd, void *val, socklen_t *len)
{
    struct slip_tcp_info in;
    int rc = slip_tcp__info(pfd_stack(p), p->sock, &in);
    if (rc < 0)
        return set_errno(rc);
    rc = pre_tcpinfo__fill(fd, &in, val, len);     /* tcpinfo.c */
    return rc < 0 ? set_errno(rc) : 0;
}

/* TCP_CONGESTION as Linux answers it: the algorithm's name in a 16-byte field (TCP_CA_NAME_MAX),
 * zero-padded, cut to optlen. The name is the stack's (SLIP_TCP_CC or what setsockopt chose),
 * not the kernel socket's. */
static int cc_name_out(int algo, void *val, socklen_t *len)
{
    char name[16] = "";
    snprintf(name, sizeof(name), "%s", tcp_cc__get((unsigned)algo)->name);
    if (!len || (int)*len < 0)
        return set_errno(-EINVAL);
    socklen_t n = SLIP_MIN(*len, (socklen_t)sizeof(name));
    if (n && !val)
        return set_errno(-EFAULT);
    memcpy(val, name, (size_t)n);
    *len = n;
    return 0;
}

/* The engine's option for a socket option that maps to one int, or -1. */
static int tcp_opt_of(int level, int opt)
{
    if (level == IPPROTO_TCP) {
        switch (opt) {
        case TCP_NODELAY: return SLIP_TCPO_NODELAY;
        case TCP_CORK: return SLIP_TCPO_CORK;
        case TCP_KEEPIDLE: return SLIP_TCPO_KEEPIDLE;
        case TCP_KEEPINTVL: return SLIP_TCPO_KEEPINTVL;
        case TCP_KEEPCNT: return SLIP_TCPO_KEEPCNT;
        case TCP_MAXSEG: return SLIP_TCPO_MAXSEG;
        case TCP_USER_TIMEOUT: return SLIP_TCPO_USER_TIMEOUT;
        }
    } else if (level == SOL_SOCKET) {
        switch (opt) {
        case SO_KEEPALIVE: return SLIP_TCPO_KEEPALIVE;
        case SO_RCVBUF: return SLIP_TCPO_RCVBUF;
        case SO_SNDBUF: return SLIP_TCPO_SNDBUF;
        case SO_REUSEPORT: return SLIP_TCPO_REUSEPORT;   /* listen() also reads it from the kernel socket */
        }
    }
    return -1;
}

int pre_getsockopt(int fd, int level, int opt, void *val, socklen_t *len)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind == PFD_EPOLL)
        return real_getsockopt(fd, level, opt, val, len);
    struct slip_stack *s = pfd_stack(p);
    int v;
    if (level == SOL_SOCKET && opt == SO_ERROR) {
        int e = p->kind == PFD_TCP ? slip_tcp__so_error(s, p->sock) : slip_udp__so_error(s, p->sock);
        return put_int(val, len, e < 0 ? -e : e);
    }
    if (p->kind == PFD_TCP) {
        if (level == IPPROTO_TCP && opt == TCP_INFO)
            return tcp_info_fill(p, fd, val, len);
        if (level == IPPROTO_TCP && opt == TCP_CONGESTION &&
            slip_tcp__getopt(s, p->sock, SLIP_TCPO_CONGESTION, &v) == 0)
            return cc_name_out(v, val, len);
        int o = tcp_opt_of(level, opt);
        if (o >= 0 && slip_tcp__getopt(s, p->sock, o, &v) == 0)
            return put_int(val, len, v);
    }
    return real_getsockopt(fd, level, opt, val, len);
}

static int timeo_ms(const void *val, socklen_t len)
{
    struct timeval tv;
    if (!val || len < (socklen_t)sizeof(tv))
        return -1;
    memcpy(&tv, val, sizeof(tv));
    if (tv.tv_sec == 0 && tv.tv_usec == 0)
        return -1;
    return (int)(tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
}

static int setsockopt_sock(struct pfd *p, int fd, int level, int opt, const void *val, socklen_t len);

int pre_setsockopt(int fd, int level, int opt, const void *val, socklen_t len)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind == PFD_EPOLL)
        return real_setsockopt(fd, level, opt, val, len);
    int rc = setsockopt_sock(p, fd, level, opt, val, len);
    preload_ready_epoch_bump();     /* after it: SO_RCVLOWAT or SO_SNDBUF may make it ready */
    return rc;
}

static int setsockopt_sock(struct pfd *p, int fd, int level, int opt, const void *val, socklen_t len)
{
    /* The kernel socket gets every option too: it validates them (EINVAL, ENOPROTOOPT exactly as
     * Linux) and getsockopt of options we do not keep reads them back from it. */
    be32 la;
    uint16_t lp = 0;
    if (p->v6 && level == IPPROTO_IPV6 && opt == IPV6_V6ONLY && p->kind == PFD_TCP &&
        slip_tcp__local(pfd_stack(p), p->sock, &la, &lp) == 0 && lp)
        return set_errno(-EINVAL);  /* Linux: not once it has a port (an accepted socket's
                                       kernel twin has none to refuse it) */
    int krc = real_setsockopt(fd, level, opt, val, len);
    if (krc < 0)
        return krc;
    if (level == SOL_SOCKET && opt == SO_RCVTIMEO)
        p->rcvtimeo_ms = timeo_ms(val, len);
    if (level == SOL_SOCKET && opt == SO_SNDTIMEO)
        p->sndtimeo_ms = timeo_ms(val, len);
    int v = 0;
    if (val && len >= (socklen_t)sizeof(int))
        memcpy(&v, val, sizeof(v));
    if (level == SOL_SOCKET && opt == SO_ZEROCOPY)
        p->zerocopy = v != 0;       /* the kernel socket accepted it: completions come from zerocopy.c */
    if (p->kind == PFD_UDP && p->v6 && level == IPPROTO_IPV6 && opt == IPV6_RECVPKTINFO)
        p->recvpktinfo6 = v != 0;   /* udp6.c adds IPV6_PKTINFO to the stack's IPv6 datagrams */
    if (p->kind == PFD_UDP && p->v6 && level == IPPROTO_IPV6 && (opt == IPV6_TCLASS || opt == IPV6_UNICAST_HOPS ||
                                                                opt == IPV6_MTU_DISCOVER || opt == IPV6_DONTFRAG)) {
        /* For the stack's native IPv6 datagrams: the value as the kernel socket kept it (-1
         * becomes its default). */
        int kv = 0;
        socklen_t kl = sizeof(kv);
        if (real_getsockopt(fd, level, opt, &kv, &kl) == 0)
            slip_udp6__setopt(pfd_stack(p), p->sock, opt, kv);
        return 0;
    }
    if (p->kind != PFD_TCP)
        return 0;
    if (p->v6 && level == IPPROTO_IPV6 && (opt == IPV6_TCLASS || opt == IPV6_UNICAST_HOPS)) {
        /* For the stack's IPv6 segments: the value as the kernel socket kept it. */
        int kv = 0;
        socklen_t kl = sizeof(kv);
        if (real_getsockopt(fd, level, opt, &kv, &kl) == 0)
            slip_tcp__setopt(pfd_stack(p), p->sock, opt == IPV6_TCLASS ? SLIP_TCPO_TCLASS : SLIP_TCPO_HOPS, kv);
        return 0;
    }
    if (level == SOL_SOCKET && opt == SO_RCVLOWAT) {
        int lw = 0;     /* the value as the kernel socket kept it (Linux caps it) */
        socklen_t lwl = sizeof(lw);
        real_getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lw, &lwl);
        p->rcvlowat = lw > 1 ? lw : 0;
    }
    int o = tcp_opt_of(level, opt);
    if (level == SOL_SOCKET && opt == SO_LINGER && len >= (socklen_t)sizeof(struct linger)) {
        struct linger l;
        memcpy(&l, val, sizeof(l));
        o = SLIP_TCPO_LINGER;
        v = l.l_onoff ? l.l_linger : -1;
    }
    if (level == IPPROTO_TCP && opt == TCP_CONGESTION) {
        char name[16] = "";
        memcpy(name, val, SLIP_MIN((size_t)len, sizeof(name) - 1));
        int cc = slip_tcp__cc_by_name(name);
        if (cc < 0)
            return 0;   /* the kernel accepted it; we keep our default */
        o = SLIP_TCPO_CONGESTION;
        v = cc;
    }
    if ((level == SOL_SOCKET && (opt == SO_RCVBUF || opt == SO_SNDBUF)))
        v *= 2;         /* Linux doubles the value for bookkeeping overhead */
    if (o >= 0) {
        int rc = slip_tcp__setopt(pfd_stack(p), p->sock, o, v);
        if (rc < 0 && rc != -EINVAL)
            return set_errno(rc);
    }
    return 0;
}

int pre_ioctl(int fd, unsigned long req, void *arg)
{
    struct pfd *p = pfd_get(fd);
    if (!p || p->kind == PFD_EPOLL)
        return real_ioctl(fd, req, arg);
    if (req == FIONBIO) {
        int r = real_ioctl(fd, req, arg);
        if (r == 0 && arg)
            p->nonblock = *(int *)arg != 0;
        return r;
    }
    if ((req == FIONREAD || req == SIOCOUTQ) && arg) {
        int v = 0;
        if (p->kind == PFD_TCP) {
            struct slip_tcp_info in;
            if (slip_tcp__info(pfd_stack(p), p->sock, &in) == 0)
                v = (int)(req == FIONREAD ? in.rcv_queued : in.snd_queued + in.unacked);
        } else if (req == FIONREAD) {
            char c;
            ssize_t n = slip_udp__recvfrom(pfd_stack(p), p->sock, &c, 1, NULL, NULL, SLIP_UDP_RECV_PEEK | SLIP_UDP_RECV_TRUNC);
            v = n > 0 ? (int)n : 0;
        }
        *(int *)arg = v;
        return 0;
    }
    return real_ioctl(fd, req, arg);
}
