/* Sharing one stack between unrelated programs; see share.h. The handshake is one message from
 * the serving process: the stack's description with a process slot claimed for the peer, and
 * its fds in the order the description names them. The joining side renumbers the description
 * with the fds it received and attaches as an exec'd image would. */
#include "stack/share.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "stack/stack.h"

#define SHARE_MAX_FDS  (1 + SLIP_MAX_IFACES * (4 + SLIP_MAX_QUEUES))
#define SHARE_SPEC_MAX 600

void slip_share__name(char *buf, size_t len, const char *const *ifnames, unsigned n)
{
    size_t k = (size_t)snprintf(buf, len, "slipstream/1/");
    for (unsigned i = 0; i < n && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%s", i ? "," : "", ifnames[i]);
}

static socklen_t abstract_addr(struct sockaddr_un *sa, const char *name)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    size_t n = strlen(name);
    if (n > sizeof(sa->sun_path) - 2)
        n = sizeof(sa->sun_path) - 2;
    memcpy(sa->sun_path + 1, name, n);      /* sun_path[0] = 0: the abstract namespace */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

int slip_share__listen(const char *name)
{
    struct sockaddr_un sa;
    socklen_t sl = abstract_addr(&sa, name);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (bind(fd, (struct sockaddr *)&sa, sl) < 0 || listen(fd, 16) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

static void serve_one(struct slip_stack *s, int c)
{
    struct ucred cr;
    socklen_t cl = sizeof(cr);
    if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0)
        return;
    /* The stack is this user's memory and packets: only the same user, or root, may join. */
    if (cr.uid != 0 && cr.uid != geteuid())
        return;
    char spec[SHARE_SPEC_MAX];
    int fds[SHARE_MAX_FDS];
    if (slip_stack__describe_for_peer(s, cr.pid, spec, sizeof(spec)) < 0)
        return;
    int n = slip_stack__export_fds(s, fds, SHARE_MAX_FDS);
    union {
        char buf[CMSG_SPACE(sizeof(int) * SHARE_MAX_FDS)];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof(u));
    struct iovec iov = { .iov_base = spec, .iov_len = strlen(spec) + 1 };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n) };
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
    memcpy(CMSG_DATA(h), fds, sizeof(int) * (size_t)n);
    if (sendmsg(c, &m, MSG_NOSIGNAL) < 0) {
        /* the peer went away; its slot is reaped like any dead process's */
    }
}

void slip_share__serve(struct slip_stack *s, int lfd)
{
    for (int k = 0; k < 16; k++) {
        int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            return;
        serve_one(s, c);
        close(c);
    }
}

/* Rewrites the serving process's fd numbers in spec with ours, in order. */
static int renumber(const char *spec, const int *fds, int nfds, char *out, size_t len)
{
    size_t o = 0;
    int k = 0;
    for (const char *p = spec; *p;) {
        if (*p >= '0' && *p <= '9' && (p == spec || p[-1] == ';' || p[-1] == ',')) {
            if (k >= nfds)
                return -EPROTO;
            while (*p >= '0' && *p <= '9')
                p++;
            o += (size_t)snprintf(out + o, o < len ? len - o : 0, "%d", fds[k++]);
        } else {
            if (o + 1 < len)
                out[o] = *p;
            o++;
            p++;
        }
    }
    if (o >= len)
        return -ENOSPC;
    out[o] = 0;
    return k == nfds ? 0 : -EPROTO;
}

int slip_share__join(struct slip_stack **out, const char *name, char *err, size_t errlen)
{
    struct sockaddr_un sa;
    socklen_t sl = abstract_addr(&sa, name);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sl) < 0) {
        close(fd);
        return -ENOENT;
    }
    /* The serving process answers from its progress thread, which wakes at least every 200 ms. */
    struct timeval tv = { 2, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char spec[SHARE_SPEC_MAX];
    union {
        char buf[CMSG_SPACE(sizeof(int) * SHARE_MAX_FDS)];
        struct cmsghdr align;
    } u;
    struct iovec iov = { .iov_base = spec, .iov_len = sizeof(spec) - 1 };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
    ssize_t r = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
    int e = errno;
    close(fd);
    if (r <= 0) {
        snprintf(err, errlen, "the process serving %s did not answer: %s", name, r < 0 ? strerror(e) : "refused");
        return r < 0 ? -e : -EPERM;
    }
    spec[r] = 0;
    int fds[SHARE_MAX_FDS], nfds = 0;
    for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
        if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
            int n = (int)((h->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (int i = 0; i < n && nfds < SHARE_MAX_FDS; i++)
                memcpy(&fds[nfds++], CMSG_DATA(h) + (size_t)i * sizeof(int), sizeof(int));
        }
    char mine[SHARE_SPEC_MAX + 64];
    int rc = (m.msg_flags & MSG_CTRUNC) ? -EPROTO : renumber(spec, fds, nfds, mine, sizeof(mine));
    if (rc == 0)
        rc = slip_stack__attach(out, mine, err, errlen);
    else
        snprintf(err, errlen, "malformed answer from the process serving %s", name);
    if (rc < 0)
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
    return rc;
}
