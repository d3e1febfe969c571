/* Test program for the process-creation and splice paths of the preload layer (test_spawn.py):
 *   spawn_tool vfork  ADDR PORT PROG ARGS...   accept one connection, vfork + execv PROG ARGS
 *                                              (an argument "FD" becomes the connection's fd), wait,
 *                                              then write "parent\n" and close
 *   spawn_tool daemon ADDR PORT PIDFILE        listen, accept one connection, daemon(1, 1),
 *                                              write PIDFILE ("pid pid-before"), run a forked
 *                                              child for 1 s, write
 *                                              "daemon <pid>\n" on it and close it; accept a
 *                                              second, write "daemon <pid> again\n", close it
 *                                              and the listener, create PIDFILE.closed, live 5 s
 *   spawn_tool splice ADDR PORT DADDR DPORT PIPESZ block|nonblock
 *                                              accept one connection, connect to DADDR:DPORT and
 *                                              move everything from the first to the second
 *                                              through a pipe of PIPESZ bytes with splice()
 * Prints one result line on stdout; exits non-zero with a message on failure. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *what)
{
    fprintf(stderr, "spawn_tool: %s: %s\n", what, strerror(errno));
    exit(1);
}

static struct sockaddr_in sin_of(const char *addr, const char *port)
{
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port)) };
    if (inet_pton(AF_INET, addr, &sin.sin_addr) != 1) {
        fprintf(stderr, "spawn_tool: bad address %s\n", addr);
        exit(2);
    }
    return sin;
}

static int listener(const char *addr, const char *port)
{
    int one = 1;
    struct sockaddr_in sin = sin_of(addr, port);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        die("socket");
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0)
        die("bind");
    if (listen(fd, 8) < 0)
        die("listen");
    return fd;
}

static void write_all(int fd, const char *s)
{
    size_t n = strlen(s), done = 0;
    while (done < n) {
        ssize_t w = write(fd, s + done, n - done);
        if (w < 0)
            die("write");
        done += (size_t)w;
    }
}

static int do_vfork(char **av)
{
    int lfd = listener(av[0], av[1]);
    printf("listening\n");
    fflush(stdout);
    int c = accept(lfd, NULL, NULL);
    if (c < 0)
        die("accept");
    char fdstr[16];
    snprintf(fdstr, sizeof(fdstr), "%d", c);
    char **argv = av + 2;
    for (char **a = argv; *a; a++)
        if (!strcmp(*a, "FD"))
            *a = fdstr;
    pid_t pid = vfork();
    if (pid < 0)
        die("vfork");
    if (pid == 0) {
        execv(argv[0], argv);
        _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid)
        die("waitpid");
    write_all(c, "parent\n");
    close(c);
    close(lfd);
    printf("vfork child status %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 3;
}

static int do_daemon(char **av)
{
    int lfd = listener(av[0], av[1]);
    /* The first connection is accepted before daemon(): its close in the daemon must end it
     * (FIN), which needs the parent's reference handed over, not counted twice. */
    int c1 = accept(lfd, NULL, NULL);
    if (c1 < 0)
        die("accept");
    pid_t before = getpid();
    if (daemon(1, 1) < 0)
        die("daemon");
    FILE *f = fopen(av[2], "w");
    if (!f)
        die("pidfile");
    fprintf(f, "%d %d\n", (int)getpid(), (int)before);
    fclose(f);
    /* A second process of the stack for a second: it reaps dead processes' references, the
     * launcher's among them. The daemon's must not be taken with them. */
    pid_t h = fork();
    if (h < 0)
        die("fork");
    if (h == 0) {
        sleep(1);
        _exit(0);
    }
    waitpid(h, NULL, 0);
    char msg[64];
    snprintf(msg, sizeof(msg), "daemon %d\n", (int)getpid());
    write_all(c1, msg);
    close(c1);
    int c = accept(lfd, NULL, NULL);
    if (c < 0)
        die("accept");
    snprintf(msg, sizeof(msg), "daemon %d again\n", (int)getpid());
    write_all(c, msg);
    close(c);
    close(lfd);
    fprintf(stderr, "daemon %d served two connections\n", (int)getpid());
    /* Tell the test the listener is closed, then stay alive a while: a listener kept open by a
     * leaked reference would still accept. */
    char closed[4200];
    snprintf(closed, sizeof(closed), "%s.closed", av[2]);
    FILE *cf = fopen(closed, "w");
    if (cf)
        fclose(cf);
    sleep(5);
    return 0;
}

/* Moves everything from in to out through the pipe; counts the splices that moved less than
 * asked, those that filled the pipe, and the EAGAINs of the non-blocking variant. */
static int do_splice(char **av)
{
    int lfd = listener(av[0], av[1]);
    struct sockaddr_in dst = sin_of(av[2], av[3]);
    int pipesz = atoi(av[4]);
    int nb = !strcmp(av[5], "nonblock");
    printf("listening\n");
    fflush(stdout);
    int in = accept(lfd, NULL, NULL);
    if (in < 0)
        die("accept");
    int out = socket(AF_INET, SOCK_STREAM, 0);
    if (out < 0 || connect(out, (struct sockaddr *)&dst, sizeof(dst)) < 0)
        die("connect");
    int p[2];
    if (pipe(p) < 0)
        die("pipe");
    if (pipesz > 0 && fcntl(p[1], F_SETPIPE_SZ, pipesz) < 0)
        die("F_SETPIPE_SZ");
    int cap = fcntl(p[1], F_GETPIPE_SZ);
    if (nb) {
        fcntl(in, F_SETFL, O_NONBLOCK);
        fcntl(out, F_SETFL, O_NONBLOCK);
    }
    unsigned fl = nb ? SPLICE_F_NONBLOCK : 0;
    long long moved = 0, short_in = 0, short_out = 0, again = 0, full_in = 0;
    size_t inpipe = 0;
    int eof = 0;
    while (!eof || inpipe) {
        if (nb) {
            struct pollfd pf[2] = { { .fd = in, .events = (!eof && inpipe < (size_t)cap) ? POLLIN : 0 },
                                    { .fd = out, .events = inpipe ? POLLOUT : 0 } };
            if (poll(pf, 2, 5000) <= 0)
                die("poll (stalled)");
        }
        /* Blocking: this thread is also the pipe's reader, so fill it only when it is empty. */
        if (!eof && (nb ? inpipe < (size_t)cap : inpipe == 0)) {
            size_t ask = 1 << 20;
            ssize_t r = splice(in, NULL, p[1], NULL, ask, fl);
            if (r < 0 && errno != EAGAIN)
                die("splice socket->pipe");
            if (r < 0)
                again++;
            else if (r == 0)
                eof = 1;
            else {
                inpipe += (size_t)r;
                if ((size_t)r < ask)
                    short_in++;
                if (inpipe >= (size_t)cap)
                    full_in++;      /* this splice filled the pipe */
            }
        }
        if (inpipe) {
            ssize_t w = splice(p[0], NULL, out, NULL, inpipe, fl);
            if (w < 0 && errno != EAGAIN)
                die("splice pipe->socket");
            if (w < 0)
                again++;
            else {
                if ((size_t)w < inpipe)
                    short_out++;
                inpipe -= (size_t)w;
                moved += w;
            }
        }
    }
    if (nb) {
        int f = fcntl(out, F_GETFL);
        fcntl(out, F_SETFL, f & ~O_NONBLOCK);
    }
    shutdown(out, SHUT_WR);
    char b;
    while (read(out, &b, 1) > 0)    /* until the sink has read everything and closed */
        ;
    close(out);
    close(in);
    printf("moved %lld pipe %d short_in %lld full_in %lld short_out %lld eagain %lld\n", moved, cap, short_in,
           full_in, short_out, again);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 5 && !strcmp(argv[1], "vfork"))
        return do_vfork(argv + 2);
    if (argc == 5 && !strcmp(argv[1], "daemon"))
        return do_daemon(argv + 2);
    if (argc == 8 && !strcmp(argv[1], "splice"))
        return do_splice(argv + 2);
    fprintf(stderr, "usage: spawn_tool vfork ADDR PORT PROG ARGS... | daemon ADDR PORT PIDFILE | "
                    "splice ADDR PORT DADDR DPORT PIPESZ block|nonblock\n");
    return 2;
}
