/* stdio on accelerated sockets. glibc's streams read and write their fd through libc's internal
 * __read/__write, which no LD_PRELOAD can reach: a stream on an accelerated socket would talk to
 * its kernel twin, which carries none of the connection's data. So a stream on an accelerated fd
 * is made with fopencookie, whose read/write/close are our read/write/close of that fd number
 * (fileno() still names it, for select and poll). Such streams come from fdopen, from the
 * standard streams when fd 0, 1 or 2 becomes an accelerated socket (inherited through exec, or
 * put there with dup2/dup), and from dprintf/vdprintf, which make a temporary stream of their
 * own. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "preload/preload.h"

/* Buffering flags of struct _IO_FILE's _flags (glibc's libio.h, part of its ABI since 2.0). */
#define STDIO_UNBUFFERED 0x0002
#define STDIO_LINE_BUF 0x0200

/* One per stream of ours, listed so that exit can flush them before the sockets close. */
struct stdio_cookie {
    int fd;
    FILE *f;
    struct stdio_cookie *next, *prev;
};

static pthread_mutex_t g_list_mu = PTHREAD_MUTEX_INITIALIZER;
static struct stdio_cookie *g_list;

/* A fork child has only the forking thread: another one may have held the list's lock. */
static void stdio_atfork_child(void)
{
    pthread_mutex_init(&g_list_mu, NULL);
}

static void stdio_cookie__unlist(struct stdio_cookie *c)
{
    pthread_mutex_lock(&g_list_mu);
    if (c->prev)
        c->prev->next = c->next;
    else if (g_list == c)
        g_list = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->next = c->prev = NULL;
    pthread_mutex_unlock(&g_list_mu);
}

static struct stdio_cookie *stdio_cookie__of(FILE *f)
{
    struct stdio_cookie *c;
    pthread_mutex_lock(&g_list_mu);
    for (c = g_list; c && c->f != f; c = c->next)
        ;
    pthread_mutex_unlock(&g_list_mu);
    return c;
}

/* The stream's calls go through our exported read/write/close, so they reach the stack only when
 * the application (preload_depth 0) made the stream do I/O, never from inside the layer. */
static ssize_t stdio_cookie__read(void *arg, char *buf, size_t n)
{
    return read(((struct stdio_cookie *)arg)->fd, buf, n);
}

/* glibc's file streams write until everything is out or write fails, and count what went out;
 * a cookie stream takes a short count as the error. So: loop, and never return -1 (glibc would
 * subtract it from what it has left to write): the count written, 0 included, errno set. */
static ssize_t stdio_cookie__write(void *arg, const char *buf, size_t n)
{
    int fd = ((struct stdio_cookie *)arg)->fd;
    size_t done = 0;
    while (done < n) {
        ssize_t r = write(fd, buf + done, n - done);
        if (r <= 0)
            break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

/* lseek of the fd: ESPIPE on a socket, which glibc's fflush of a read stream ignores as it does
 * for a socket's file stream; a real offset once freopen put a file there. */
static int stdio_cookie__seek(void *arg, off64_t *off, int whence)
{
    off64_t r = lseek64(((struct stdio_cookie *)arg)->fd, *off, whence);
    if (r < 0)
        return -1;
    *off = r;
    return 0;
}

static int stdio_cookie__close(void *arg)
{
    struct stdio_cookie *c = arg;
    int fd = c->fd;
    stdio_cookie__unlist(c);
    free(c);
    return close(fd);
}

static const cookie_io_functions_t stdio_cookie_io = {
    .read = stdio_cookie__read,
    .write = stdio_cookie__write,
    .seek = stdio_cookie__seek,
    .close = stdio_cookie__close,
};

static bool is_accelerated_sock(int fd)
{
    struct pfd *p = pfd_get(fd);
    return p && (p->kind == PFD_TCP || p->kind == PFD_UDP);
}

static void stdio_atfork_register(void)
{
    pthread_atfork(NULL, NULL, stdio_atfork_child);
}

/* A stream of ours on fd; cmode is "r", "w" or "a", maybe with "+". */
static FILE *stdio_stream__open(int fd, const char *cmode)
{
    struct stdio_cookie *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->fd = fd;
    FILE *f = fopencookie(c, cmode, stdio_cookie_io);
    if (!f) {
        free(c);
        return NULL;
    }
    /* For fileno(): glibc marks a cookie stream's fd -2 and reads the field for nothing else
     * (its reads, writes, seeks and close go through the cookie functions). */
    f->_fileno = fd;
    c->f = f;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, stdio_atfork_register);
    pthread_mutex_lock(&g_list_mu);
    c->next = g_list;
    if (g_list)
        g_list->prev = c;
    g_list = c;
    pthread_mutex_unlock(&g_list_mu);
    return f;
}

FILE *pre_fdopen(int fd, const char *mode)
{
    if (!is_accelerated_sock(fd))
        return real_fdopen(fd, mode);
    /* The mode as glibc's fdopen reads it: r, w or a, then '+' among the next four characters
     * (the others, b, x, e, ..., are ignored). A socket is O_RDWR: every access is allowed. */
    char cmode[3] = { 0 };
    if (!mode || (mode[0] != 'r' && mode[0] != 'w' && mode[0] != 'a')) {
        errno = EINVAL;
        return NULL;
    }
    cmode[0] = mode[0];
    for (int i = 1; i < 5 && mode[i]; i++)
        if (mode[i] == '+') {
            cmode[1] = '+';
            break;
        }
    int fl = real_fcntl(fd, F_GETFL);
    if (fl < 0)
        return NULL;
    /* glibc's fdopen "a" adds O_APPEND to the fd (meaningless on a socket, but visible). */
    if (mode[0] == 'a' && !(fl & O_APPEND) && real_fcntl(fd, F_SETFL, fl | O_APPEND) < 0)
        return NULL;
    return stdio_stream__open(fd, cmode);
}

/* freopen on a stream of ours. glibc's freopen cannot take a cookie stream (it writes through
 * the wide-character data a cookie stream does not have), so it is done here the way glibc does
 * it for a file stream: flush, open the file, put it on the same fd number with dup3 (the socket
 * loses that fd as by close), and the stream goes on with the new access mode, through the same
 * cookie functions (plain read/write/lseek of a fd that is no longer ours). */
#define STDIO_NO_READS 0x0004       /* glibc libio.h _flags, as above */
#define STDIO_NO_WRITES 0x0008
#define STDIO_IS_APPENDING 0x1000
#define STDIO_ERR_EOF 0x0030

static FILE *stdio_stream__reopen(struct stdio_cookie *c, const char *path, const char *mode, FILE *f)
{
    int fd = c->fd, oflags, sflags;
    char proc[64];
    int depth = preload_depth;      /* the flush is the application's own I/O */
    preload_depth = 0;
    fflush(f);
    preload_depth = depth;
    switch (mode ? mode[0] : 0) {
    case 'r': oflags = O_RDONLY; sflags = STDIO_NO_WRITES; break;
    case 'w': oflags = O_WRONLY | O_CREAT | O_TRUNC; sflags = STDIO_NO_READS; break;
    case 'a': oflags = O_WRONLY | O_CREAT | O_APPEND; sflags = STDIO_NO_READS | STDIO_IS_APPENDING; break;
    default: errno = EINVAL; return NULL;
    }
    for (int i = 1; i < 7 && mode[i] && mode[i] != ','; i++) {
        if (mode[i] == '+') {
            oflags = (oflags & ~O_ACCMODE) | O_RDWR;
            sflags &= STDIO_IS_APPENDING;
        } else if (mode[i] == 'x') {
            oflags |= O_EXCL;
        } else if (mode[i] == 'e') {
            oflags |= O_CLOEXEC;
        }
    }
    if (!path) {    /* the same file again: glibc opens it through /proc */
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        path = proc;
    }
    int nfd = open(path, oflags, 0666);
    int e = errno;
    preload_fd_gone(fd);
    if (nfd < 0 || (nfd != fd && real_dup3(nfd, fd, oflags & O_CLOEXEC) < 0)) {
        e = nfd < 0 ? e : errno;
        if (nfd >= 0)
            real_close(nfd);
        real_close(fd);     /* glibc closes the fd of a stream it could not reopen */
        c->fd = -1;
        errno = e;
        return NULL;
    }
    if (nfd != fd)
        real_close(nfd);
    f->_flags = (f->_flags & ~(STDIO_NO_READS | STDIO_NO_WRITES | STDIO_IS_APPENDING | STDIO_ERR_EOF)) | sflags;
    return f;
}

FILE *pre_freopen(const char *path, const char *mode, FILE *f)
{
    struct stdio_cookie *c = f ? stdio_cookie__of(f) : NULL;
    if (c)
        return stdio_stream__reopen(c, path, mode, f);
    /* A glibc stream on an accelerated socket cannot exist (fdopen and the standard streams
     * give ours), but if one does, its socket goes as glibc's freopen drops the fd. */
    int fd = f ? f->_fileno : -1;
    if (fd >= 0 && pfd_get(fd))
        preload_fd_gone(fd);
    return real_freopen(path, mode, f);
}

/* ---- the standard streams ---- */

void preload_stdio_std(int fd)
{
    FILE **var = fd == 0 ? &stdin : fd == 1 ? &stdout : fd == 2 ? &stderr : NULL;
    if (!var || !*var || !is_accelerated_sock(fd) || stdio_cookie__of(*var))
        return;
    FILE *old = *var;
    if (old->_fileno != fd)
        return;     /* the program pointed stdout at another stream itself: leave it */
    FILE *f = stdio_stream__open(fd, fd == 0 ? "r" : "w");
    if (!f)
        return;
    flockfile(old);
    /* Buffering chosen with setvbuf on the old stream carries over; else glibc's choice for a
     * socket: stderr unbuffered, stdin and stdout fully buffered. */
    int oflags = old->_flags;
    if ((oflags & STDIO_UNBUFFERED) || (fd == 2 && !(oflags & STDIO_LINE_BUF)))
        setvbuf(f, NULL, _IONBF, 0);
    else if (oflags & STDIO_LINE_BUF)
        setvbuf(f, NULL, _IOLBF, 0);
    /* Output still buffered in the old stream goes wherever the fd points when it is flushed:
     * now the socket. (Input it buffered from the old fd 0 is dropped.) */
    if (fd != 0 && old->_IO_write_ptr > old->_IO_write_base) {
        int depth = preload_depth;
        preload_depth = 0;
        fwrite(old->_IO_write_base, 1, (size_t)(old->_IO_write_ptr - old->_IO_write_base), f);
        preload_depth = depth;
        old->_IO_write_ptr = old->_IO_write_base;
    }
    *var = f;
    funlockfile(old);
}

void preload_stdio_inherited(void)
{
    for (int fd = 0; fd < 3; fd++)
        preload_stdio_std(fd);
}

/* exit() flushes every stream, but only after the atexit handlers, the stack's among them (which
 * closes the accelerated sockets), have run: flush ours first. A stream another thread holds
 * locked (blocked in fgets) is skipped, as glibc's own flush at exit does not wait for it
 * either. Never at _exit, which must not flush. */
void preload_stdio_at_exit(void)
{
    pthread_mutex_lock(&g_list_mu);
    for (struct stdio_cookie *c = g_list; c; c = c->next)
        if (ftrylockfile(c->f) == 0) {
            fflush_unlocked(c->f);
            funlockfile(c->f);
        }
    pthread_mutex_unlock(&g_list_mu);
}

/* ---- dprintf ---- */

/* glibc's dprintf formats into a stream of its own on fd, which writes through __write. Ours
 * formats into memory and writes it all, as that stream's flush does; -1 if any write fails. */
static int write_all(int fd, char *s, int n)
{
    int r = n;
    for (int done = 0; n >= 0 && done < n;) {
        ssize_t w = write(fd, s + done, (size_t)(n - done));
        if (w < 0) {
            r = -1;
            break;
        }
        done += (int)w;
    }
    free(s);
    return r;
}

int pre_vdprintf(int fd, const char *fmt, va_list ap)
{
    if (!is_accelerated_sock(fd))
        return real_vdprintf(fd, fmt, ap);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    int depth = preload_depth;      /* the writes are the application's */
    preload_depth = 0;
    int r = write_all(fd, s, n);
    preload_depth = depth;
    return r;
}

int __vasprintf_chk(char **s, int flag, const char *fmt, va_list ap);

int preload_vdprintf_chk(int fd, int flag, const char *fmt, va_list ap)
{
    static int (*real_chk)(int fd, int flag, const char *fmt, va_list ap);
    if (!is_accelerated_sock(fd)) {
        if (!real_chk)
            real_chk = (int (*)(int, int, const char *, va_list))dlsym(RTLD_NEXT, "__vdprintf_chk");
        return real_chk(fd, flag, fmt, ap);
    }
    char *s = NULL;
    int n = __vasprintf_chk(&s, flag, fmt, ap);     /* keeps fortified code's checks of %n */
    return write_all(fd, s, n);
}
