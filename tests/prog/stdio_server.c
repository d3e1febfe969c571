/* A TCP server that talks through stdio, for tests/system/test_stdio.py: it accepts one
 * connection per MODE, in order, and answers each line "MODE LEN LINE" until the line "quit",
 * which it answers "bye". Built twice: as stdio_server (stdio: fdopen, setvbuf, fgets, fprintf,
 * fclose, stdout/stdin on the socket by dup2 or inherited through exec, freopen, flush at exit,
 * exec of a static image, static=PATH) and, with -D_FORTIFY_SOURCE=2 -O2,
 * as fortify_server (read/recv/recvfrom/poll/ppoll/select/dprintf as fortified code calls them,
 * preadv2/pwritev2 at offset -1, syscall(SYS_read)), one line per connection there.
 *   stdio_server PORT MODE...      prints "listening" when ready, "done" at the end */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *what)
{
    fprintf(stderr, "stdio_server: %s: %s\n", what, strerror(errno));
    exit(1);
}

static int listen_on(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 16) < 0)
        die("listen");
    return fd;
}

#ifndef FORTIFY_SERVER

/* Lines from r, answers to w, until "quit". */
static void serve_lines(const char *mode, FILE *r, FILE *w, int flush)
{
    char line[512];
    while (fgets(line, sizeof(line), r)) {
        if (!strcmp(line, "quit\n")) {
            fputs("bye\n", w);
            break;
        }
        fprintf(w, "%s %zu %s", mode, strlen(line), line);
        if (flush)
            fflush(w);
    }
}

/* After the stream closed its fd: the fd must be gone (fclose closed it, and only once). */
static void check_closed(int c, const char *mode)
{
    if (close(c) == 0 || errno != EBADF)
        fprintf(stderr, "stdio_server: %s: fd %d still open after fclose\n", mode, c), exit(3);
}

static void serve(const char *mode, int c)
{
    if (!strcmp(mode, "fdopen")) {
        /* fully buffered, fflush after each answer; fileno() names the socket for poll */
        FILE *f = fdopen(c, "r+");
        if (!f || fileno(f) != c)
            die("fdopen r+");
        struct pollfd pf = { .fd = fileno(f), .events = POLLIN };
        if (poll(&pf, 1, 10000) != 1)
            die("poll on fileno");
        serve_lines(mode, f, f, 1);
        if (fclose(f) != 0)
            die("fclose");
        check_closed(c, mode);
    } else if (!strcmp(mode, "split")) {
        /* the usual pair: reading on the fd, writing line-buffered on a dup of it */
        FILE *r = fdopen(c, "r"), *w = fdopen(dup(c), "w");
        if (!r || !w)
            die("fdopen r/w");
        setvbuf(w, NULL, _IOLBF, 0);
        serve_lines(mode, r, w, 0);
        if (fclose(w) != 0 || fclose(r) != 0)
            die("fclose");
        check_closed(c, mode);
    } else if (!strcmp(mode, "unbuf")) {
        /* unbuffered: reads one byte at a time, so reading ahead cannot happen */
        FILE *f = fdopen(c, "a+");
        if (!f)
            die("fdopen a+");
        setvbuf(f, NULL, _IONBF, 0);
        serve_lines(mode, f, f, 0);
        if (fclose(f) != 0)
            die("fclose");
        check_closed(c, mode);
    } else if (!strcmp(mode, "eof")) {
        /* the client half-closes: fgets sees end of file, not an error; the answer goes out
         * with dprintf */
        FILE *f = fdopen(c, "r");
        char line[512];
        size_t n = 0;
        while (fgets(line, sizeof(line), f))
            n += strlen(line);
        dprintf(c, "eof %d %d %zu\n", feof(f) != 0, ferror(f) != 0, n);
        fclose(f);
    } else if (!strcmp(mode, "stdout")) {
        /* inetd style: the socket becomes stdin and stdout; what stdout still buffered goes to
         * the socket, as it would with the kernel */
        int in = dup(0), out = dup(1);
        printf("carried ");
        if (dup2(c, 0) != 0 || dup2(c, 1) != 1)
            die("dup2");
        close(c);
        serve_lines(mode, stdin, stdout, 1);
        fflush(stdout);
        dup2(in, 0);
        dup2(out, 1);
        close(in);
        close(out);
    } else if (!strcmp(mode, "exec")) {
        /* inetd style through exec: the new image finds the socket as its stdin and stdout */
        pid_t pid = fork();
        if (pid == 0) {
            dup2(c, 0);
            dup2(c, 1);
            close(c);
            execl("/proc/self/exe", "stdio_server", "--child", (char *)NULL);
            _exit(127);
        }
        close(c);
        int st = 0;
        if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
            fprintf(stderr, "stdio_server: exec child failed (%d)\n", st), exit(4);
    } else if (strncmp(mode, "static=", 7) == 0) {
        /* a statically linked image inherits the socket as stdout: its write cannot reach the
         * stack and must fail rather than hang; this process answers afterwards */
        pid_t pid = fork();
        if (pid == 0) {
            dup2(c, 1);
            close(c);
            execl(mode + 7, mode + 7, (char *)NULL);
            _exit(127);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        dprintf(c, "after static %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        close(c);
    } else if (!strcmp(mode, "freopen")) {
        /* the answer to quit is still buffered when freopen replaces the socket */
        FILE *f = fdopen(c, "r+");
        serve_lines(mode, f, f, 1);
        if (!freopen("/dev/null", "w", f))
            die("freopen");
        fclose(f);
    } else if (!strcmp(mode, "exit")) {
        /* never flushed nor closed: exit() must flush it before the socket closes */
        FILE *r = fdopen(c, "r"), *w = fdopen(c, "w");
        serve_lines(mode, r, w, 0);
        printf("done\n");
        fflush(stdout);
        exit(0);
    } else {
        fprintf(stderr, "stdio_server: unknown mode %s\n", mode);
        exit(2);
    }
}

#else

/* Sizes the compiler cannot see: with them fortified code calls the checking variants
 * (__read_chk, __recv_chk, __recvfrom_chk, __poll_chk, __ppoll_chk), not the plain calls. */
static volatile size_t g_chunk = 128;
static volatile nfds_t g_one = 1;

/* One line, read and answered through the calls fortified code makes. */
static void serve(const char *mode, int c)
{
    char buf[512], tmp[128];
    size_t n = 0, chunk = g_chunk;
    ssize_t r = 0;
    if (!strcmp(mode, "poll")) {
        struct pollfd pf[1] = { { .fd = c, .events = POLLIN } };
        if (poll(pf, g_one, 10000) != 1 || pf[0].revents != POLLIN)
            die("poll");
    } else if (!strcmp(mode, "ppoll")) {
        struct pollfd pf[1] = { { .fd = c, .events = POLLIN } };
        struct timespec ts = { 10, 0 };
        if (ppoll(pf, g_one, &ts, NULL) != 1 || pf[0].revents != POLLIN)
            die("ppoll");
    } else if (!strcmp(mode, "select")) {
        fd_set rs;
        FD_ZERO(&rs);
        FD_SET(c, &rs);
        struct timeval tv = { 10, 0 };
        if (select(c + 1, &rs, NULL, NULL, &tv) != 1 || !FD_ISSET(c, &rs))
            die("select");
    }
    while (n == 0 || buf[n - 1] != '\n') {
        if (!strcmp(mode, "recv"))
            r = recv(c, tmp, chunk, 0);
        else if (!strcmp(mode, "recvfrom"))
            r = recvfrom(c, tmp, chunk, 0, NULL, NULL);
        else if (!strcmp(mode, "syscall"))
            r = syscall(SYS_read, c, tmp, chunk);
        else if (!strcmp(mode, "preadv2")) {
            struct iovec v = { tmp, chunk };
            r = preadv2(c, &v, 1, -1, 0);
        } else
            r = read(c, tmp, chunk);
        if (r <= 0)
            die("read");
        if ((size_t)r > sizeof(buf) - n)
            break;
        memcpy(buf + n, tmp, (size_t)r);
        n += (size_t)r;
    }
    char out[600];
    int k = snprintf(out, sizeof(out), "%s %zu %.*s", mode, n, (int)n, buf);
    if (!strcmp(mode, "dprintf"))
        r = dprintf(c, "%s %zu %.*s", mode, n, (int)n, buf);
    else if (!strcmp(mode, "syscall"))
        r = syscall(SYS_write, c, out, (size_t)k);
    else if (!strcmp(mode, "preadv2")) {
        struct iovec v[2] = { { out, 3 }, { out + 3, (size_t)k - 3 } };
        r = pwritev2(c, v, 2, -1, 0);
    } else
        r = write(c, out, (size_t)k);
    if (r != k)
        die("write");
    close(c);
}

#endif

int main(int argc, char **argv)
{
#ifndef FORTIFY_SERVER
    if (argc == 2 && !strcmp(argv[1], "--child")) {
        serve_lines("exec", stdin, stdout, 0);      /* exit() flushes */
        return 0;
    }
#endif
    if (argc < 3) {
        fprintf(stderr, "usage: %s PORT MODE...\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    int l = listen_on(atoi(argv[1]));
    printf("listening\n");
    fflush(stdout);
    for (int i = 2; i < argc; i++) {
        int c = accept(l, NULL, NULL);
        if (c < 0)
            die("accept");
        serve(argv[i], c);
    }
    printf("done\n");
    return 0;
}
