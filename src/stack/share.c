/* Sharing one stack between unrelated programs; see share.h. The handshake is one message from
 * the serving process: the stack's description with a process slot claimed for the peer, and
 * its fds in the order the description names them. The joining side checks who serves and what
 * it handed over, renumbers the description with the fds it received and attaches as an exec'd
 * image would. The guardian gets its stack the same way (slip_share__send/recv). */
#include "stack/share.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "stack/stack.h"

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

/* Rewrites the sender's fd numbers in spec with ours, in order: a number starts the description
 * or follows ';' or ','; anything else (a "p3" slot, a "g") is copied. */
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

int slip_share__send(int sock, const char *spec, const int *fds, int n)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * SLIP_SHARE_MAX_FDS)];
        struct cmsghdr align;
    } u;
    if (n < 1 || n > SLIP_SHARE_MAX_FDS)
        return -EINVAL;
    memset(&u, 0, sizeof(u));
    struct iovec iov = { .iov_base = (void *)spec, .iov_len = strlen(spec) + 1 };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n) };
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
    memcpy(CMSG_DATA(h), fds, sizeof(int) * (size_t)n);
    return sendmsg(sock, &m, MSG_NOSIGNAL) < 0 ? -errno : 0;
}

int slip_share__recv(int sock, char *out, size_t len, int *fds, int *nfds)
{
    char spec[SLIP_SHARE_SPEC_MAX];
    union {
        char buf[CMSG_SPACE(sizeof(int) * SLIP_SHARE_MAX_FDS)];
        struct cmsghdr align;
    } u;
    struct iovec iov = { .iov_base = spec, .iov_len = sizeof(spec) - 1 };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
    *nfds = 0;
    ssize_t r = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
    if (r < 0)
        return -errno;
    for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
        if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
            int n = (int)((h->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (int i = 0; i < n; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(h) + (size_t)i * sizeof(int), sizeof(int));
                if (*nfds < SLIP_SHARE_MAX_FDS)
                    fds[(*nfds)++] = fd;
                else
                    close(fd);      /* more than a stack has: the message is refused below */
            }
        }
    if (r == 0)
        return -ENOENT;
    spec[r] = 0;
    if (m.msg_flags & (MSG_CTRUNC | MSG_TRUNC))
        return -EPROTO;
    return renumber(spec, fds, *nfds, out, len);
}

/* The user a stack belongs to: the owner of its memfd, set by the kernel when the creating
 * process made it, and the same in every process that maps it, whatever their euid is now. */
static int owner_uid(int memfd, uid_t *uid)
{
    struct stat st;
    if (fstat(memfd, &st) < 0)
        return -errno;
    *uid = st.st_uid;
    return 0;
}

bool slip_share__may_serve(struct slip_stack *s)
{
    int fd;
    uid_t owner, me = geteuid();
    if (slip_stack__export_fds(s, &fd, 1) != 1 || owner_uid(fd, &owner) < 0)
        return false;
    return me == owner || me == 0;
}

static void serve_one(struct slip_stack *s, int c)
{
    struct ucred cr;
    socklen_t cl = sizeof(cr);
    if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0)
        return;
    int fds[SLIP_SHARE_MAX_FDS];
    int n = slip_stack__export_fds(s, fds, SLIP_SHARE_MAX_FDS);
    uid_t owner = (uid_t)-1;
    /* The stack is its creator's memory and packets: only that user, or root, may join, whoever
     * serves it now (a worker that dropped to another user never serves: slip_share__may_serve). */
    if (n < 1 || owner_uid(fds[0], &owner) < 0 || (cr.uid != 0 && cr.uid != owner))
        return;
    char spec[SLIP_SHARE_SPEC_MAX];
    if (slip_stack__describe_for_peer(s, cr.pid, spec, sizeof(spec)) < 0)
        return;
    /* If the peer went away, its slot is reaped like any dead process's. */
    (void)slip_share__send(c, spec, fds, n);
}

/* A program opening its own stack in our group gets the group's memory, the XDP objects and a
 * socket per queue to share the UMEM with: the same user check as for the whole stack (the UMEM
 * holds every stack's packets). */
static void serve_group(struct slip_stack *s, int c)
{
    struct ucred cr;
    socklen_t cl = sizeof(cr);
    if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0)
        return;
    int fds[SLIP_SHARE_MAX_FDS];
    char spec[SLIP_SHARE_SPEC_MAX];
    int n = slip_stack__describe_group(s, spec, sizeof(spec), fds, SLIP_SHARE_MAX_FDS);
    uid_t owner = (uid_t)-1;
    if (n < 1 || owner_uid(fds[0], &owner) < 0 || (cr.uid != 0 && cr.uid != owner))
        return;
    (void)slip_share__send(c, spec, fds, n);
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

void slip_share__serve_group(struct slip_stack *s, int lfd)
{
    for (int k = 0; k < 16; k++) {
        int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            return;
        serve_group(s, c);
        close(c);
    }
}


/* What the server handed over must be what a stack is made of before we map or use any of it:
 * first a sealed memfd (it cannot shrink under us: a SIGBUS) owned by root or by us, then BPF
 * objects and AF_XDP sockets (the attach checks the maps' types and the rings' sizes). */
static int check_fds(const int *fds, int nfds, uid_t me, const char *name, char *err, size_t errlen)
{
    struct stat st;
    char layout[128];
    int seals = nfds > 0 ? fcntl(fds[0], F_GET_SEALS) : -1;
    const char *why = NULL;
    if (nfds < 1 || fstat(fds[0], &st) < 0 || !S_ISREG(st.st_mode))
        why = "its first fd is not a memory file";
    else if (st.st_uid != 0 && st.st_uid != me)
        why = "its memory belongs to another user";
    else if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
        why = "its memory is not sealed against resizing";
    else if ((why = slip_stack__memory_bad(fds[0])) != NULL)
        snprintf(layout, sizeof(layout), "its memory is inconsistent: %s", why), why = layout;
    for (int i = 1; i < nfds && !why; i++) {
        int dom = 0;
        socklen_t dl = sizeof(dom);
        bool sock = fstat(fds[i], &st) == 0 && S_ISSOCK(st.st_mode);
        if (sock && getsockopt(fds[i], SOL_SOCKET, SO_DOMAIN, &dom, &dl) < 0)
            dom = -1;
        /* A stack of a group also hands over the group's memory (second) and the listening
         * socket holding its index (second or third): checked like the first, or harmless. */
        if (i == 1 && !sock && S_ISREG(st.st_mode)) {
            seals = fcntl(fds[i], F_GET_SEALS);
            if (st.st_uid != 0 && st.st_uid != me)
                why = "the group's memory belongs to another user";
            else if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
                why = "the group's memory is not sealed against resizing";
            else if ((why = slip_stack__memory_bad(fds[i])) != NULL)
                snprintf(layout, sizeof(layout), "the group's memory is inconsistent: %s", why), why = layout;
            continue;
        }
        if (i <= 2 && sock && dom == AF_UNIX)
            continue;
        if (fstat(fds[i], &st) < 0)
            why = "a fd is not open";
        else if (sock && dom != AF_XDP)
            why = "a socket is not an AF_XDP socket";
        else if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISBLK(st.st_mode) ||
                 S_ISCHR(st.st_mode))
            why = "a fd is neither a BPF object nor an AF_XDP socket";
    }
    if (!why)
        return 0;
    snprintf(err, errlen, "the process serving %s handed over something that is not a stack (%s): not joining it",
             name, why);
    return -EACCES;
}

/* Connects to name, checks who serves it and what it handed over: 0 with the description
 * (renumbered) in mine and the fds in fds, which are then the caller's; negative errno (and a
 * line in err) with nothing left open. */
static int fetch(const char *name, char *mine, size_t len, int *fds, int *nfds, char *err, size_t errlen)
{
    struct sockaddr_un sa;
    socklen_t sl = abstract_addr(&sa, name);
    *nfds = 0;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sl) < 0) {
        close(fd);
        return -ENOENT;
    }
    /* Anyone may bind an abstract name first. What it hands us becomes our memory, rings and
     * XDP maps, so only a stack served by root or by our own user is taken; anything else is
     * somebody's trap or mistake, and we open a stack of our own instead (-EACCES). */
    struct ucred sc;
    socklen_t scl = sizeof(sc);
    uid_t me = geteuid();
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &sc, &scl) < 0 || (sc.uid != 0 && sc.uid != me)) {
        snprintf(err, errlen, "%s is served by pid %d of uid %u, neither root nor our uid %u: not joining it",
                 name, (int)sc.pid, (unsigned)sc.uid, (unsigned)me);
        close(fd);
        return -EACCES;
    }
    /* The serving process answers from its progress thread, which wakes at least every 200 ms. */
    struct timeval tv = { 2, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int rc = slip_share__recv(fd, mine, len, fds, nfds);
    close(fd);
    if (rc == -EPROTO || rc == -ENOSPC) {
        snprintf(err, errlen, "malformed answer from the process serving %s", name);
    } else if (rc < 0) {
        snprintf(err, errlen, "the process serving %s did not answer: %s", name,
                 rc == -ENOENT ? "refused" : strerror(-rc));
        rc = rc == -ENOENT ? -EPERM : rc;
    }
    if (rc == 0)
        rc = check_fds(fds, *nfds, me, name, err, errlen);
    if (rc < 0) {
        for (int i = 0; i < *nfds; i++)
            close(fds[i]);
        *nfds = 0;
    }
    return rc;
}

int slip_share__join(struct slip_stack **out, const char *name, char *err, size_t errlen)
{
    char mine[SLIP_SHARE_SPEC_MAX + 64];
    int fds[SLIP_SHARE_MAX_FDS], nfds = 0;
    int rc = fetch(name, mine, sizeof(mine), fds, &nfds, err, errlen);
    if (rc == 0 && (rc = slip_stack__attach(out, mine, err, errlen)) < 0)
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
    return rc;
}

int slip_share__join_group(struct slip_stack **out, const char *name, const struct slip_config *cfg, char *err,
                           size_t errlen)
{
    char mine[SLIP_SHARE_SPEC_MAX + 64];
    int fds[SLIP_SHARE_MAX_FDS], nfds = 0;
    int rc = fetch(name, mine, sizeof(mine), fds, &nfds, err, errlen);
    /* open_in_group closes what it does not keep, on failure too. */
    return rc < 0 ? rc : slip_stack__open_in_group(out, cfg, mine, err, errlen);
}
