/* TCP on the stack through its internal API, for the system tests (the POSIX layer comes later):
 * bulk transfers between a pipe and one connection, and an echo server for many connections.
 *   tcp_tool --iface IF [--counters] serve-recv PORT | serve-send PORT
 *                                    | connect-send HOST PORT | connect-recv HOST PORT
 *                                    | echo PORT [--max-conns N]
 * Listeners print "ready port=N" on stderr. Every transfer mode ends with one JSON line on stderr
 * ({"mode","bytes","seconds",...}). With --counters the stack's counters (`group.name value`) and
 * the per-connection lines of slip_tcp__dump() follow at exit; they go to stdout, except in the
 * modes whose stdout carries the received data (serve-recv, connect-recv): there to stderr.
 * SIGUSR1 prints the counters at once (echo mode: to see the idle values). Errors: one line on
 * stderr, exit 1; bad usage exit 2. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "stack/stack.h"

#define XFER_BUF   (1u << 20)     /* between the pipe and the connection */
#define ECHO_BUF   (16u << 10)    /* per echo connection */
#define LINGER_MS  15000          /* after close: bound on waiting for the FIN exchange */

static volatile sig_atomic_t g_stop, g_dump;

static void on_signal(int sig)
{
    if (sig == SIGUSR1)
        g_dump = 1;
    else
        g_stop = 1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tcp_tool --iface IF [--counters] MODE ...\n"
               "  serve-recv PORT | serve-send PORT | connect-send HOST PORT | connect-recv HOST PORT\n"
               "  echo PORT [--max-conns N]\n");
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static struct slip_stack *g_s;
static FILE *g_cfile;             /* where counters go */
static bool g_counters;

static void dump_counters(void)
{
    if (!g_counters)
        return;
    fflush(stdout);
    slip_stack__dump(g_s, g_cfile);
    slip_tcp__dump(g_s, g_cfile);
    fflush(g_cfile);
}

static int fail(const char *what, int err)
{
    fprintf(stderr, "tcp_tool: %s: %s\n", what, strerror(err < 0 ? -err : err));
    return 1;
}

/* Waits for progress when the last round made none: on the pipe when it is what blocks us
 * (the stack's wait cannot see it), else in the stack until a frame or a deadline. */
static void idle(int pipe_fd, short pipe_ev)
{
    if (pipe_fd >= 0) {
        struct pollfd p = { .fd = pipe_fd, .events = pipe_ev };
        poll(&p, 1, 1);
        slip_stack__poll(g_s);
    } else {
        slip_stack__wait(g_s, 10);
    }
    if (g_dump) {
        g_dump = 0;
        dump_counters();
    }
}

static int parse_port(const char *a, uint16_t *port)
{
    char *end;
    long v = strtol(a, &end, 10);
    if (!*a || *end || v < 0 || v > 65535) {
        fprintf(stderr, "tcp_tool: '%s' is not a port number\n", a);
        return -1;
    }
    *port = (uint16_t)v;
    return 0;
}

static int listen_on(uint16_t port, int backlog, int *out)
{
    int l = slip_tcp__open(g_s);
    if (l < 0)
        return fail("cannot open a TCP socket", l);
    int rc = slip_tcp__listen(g_s, l, 0, port, backlog);
    if (rc < 0) {
        fprintf(stderr, "tcp_tool: cannot listen on port %u: %s\n", port, strerror(-rc));
        return 1;
    }
    be32 la;
    uint16_t lp = port;
    slip_tcp__local(g_s, l, &la, &lp);
    fprintf(stderr, "ready port=%u\n", lp);
    fflush(stderr);
    *out = l;
    return 0;
}

/* One accepted connection (the listener is closed right after: one transfer per run). */
static int accept_one(int l, int *out)
{
    for (;;) {
        if (g_stop) {
            fprintf(stderr, "tcp_tool: interrupted before a connection came\n");
            return 1;
        }
        be32 ra;
        uint16_t rp;
        int c = slip_tcp__accept(g_s, l, &ra, &rp);
        if (c >= 0) {
            slip_tcp__close(g_s, l);
            *out = c;
            return 0;
        }
        if (c != -EAGAIN)
            return fail("accept", c);
        idle(-1, 0);
    }
}

static int connect_to(const char *host, uint16_t port, int *out)
{
    struct in_addr ia;
    if (inet_pton(AF_INET, host, &ia) != 1) {
        fprintf(stderr, "tcp_tool: '%s' is not an IPv4 address\n", host);
        return 2;
    }
    int c = slip_tcp__open(g_s);
    if (c < 0)
        return fail("cannot open a TCP socket", c);
    int rc = slip_tcp__connect(g_s, c, (be32)ia.s_addr, port);
    if (rc < 0 && rc != -EINPROGRESS) {
        fprintf(stderr, "tcp_tool: connect %s:%u: %s\n", host, port, strerror(-rc));
        return 1;
    }
    for (;;) {
        unsigned ev = slip_tcp__poll(g_s, c);
        if (ev & SLIP_EV_ERR) {
            int e = slip_tcp__so_error(g_s, c);
            fprintf(stderr, "tcp_tool: connect %s:%u: %s\n", host, port, strerror(e ? e : ECONNREFUSED));
            return 1;
        }
        if (ev & SLIP_EV_OUT)
            break;
        if (g_stop) {
            fprintf(stderr, "tcp_tool: interrupted while connecting\n");
            return 1;
        }
        idle(-1, 0);
    }
    *out = c;
    return 0;
}

/* After close: keep the stack running while the connection finishes its close, so exiting does
 * not cut it off. A receiver closes second (LAST_ACK): its FIN may need retransmitting under loss
 * and the peer waits for it, so it stays until the stack holds no connection (tcp.conns == 0).
 * A sender closed first and sits in TIME_WAIT: a moment for the last ACK is enough. */
static void linger_after_close(bool until_gone)
{
    double start = now_s(), end = start + (until_gone ? LINGER_MS / 1000.0 : 0.2);
    uint64_t v;
    while (now_s() < end && !g_stop) {
        slip_stack__wait(g_s, 10);
        if (until_gone && slip_stack__counter(g_s, "tcp.conns", &v) == 0 && v == 0)
            break;
    }
}

static void print_result(const char *mode, uint64_t bytes, double secs, uint64_t unexpected)
{
    fprintf(stderr, "{\"mode\": \"%s\", \"bytes\": %llu, \"seconds\": %.3f, \"mbytes_per_s\": %.1f, "
            "\"unexpected_bytes\": %llu}\n", mode, (unsigned long long)bytes, secs,
            secs > 0 ? (double)bytes / 1e6 / secs : 0.0, (unsigned long long)unexpected);
    fflush(stderr);
}

/* stdin -> connection, then shutdown(WR) and wait for the peer's close: its FIN comes after it
 * read everything, so the time covers delivery. Bytes the peer sends are counted, not kept. */
static int run_send(const char *mode, int c)
{
    static uint8_t buf[XFER_BUF], sink[65536];
    size_t head = 0, tail = 0;
    bool in_eof = false, shut = false;
    uint64_t sent = 0, unexpected = 0;
    double t0 = now_s();

    fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
    for (;;) {
        if (g_stop) {
            fprintf(stderr, "tcp_tool: interrupted after sending %llu bytes\n", (unsigned long long)sent);
            return 1;
        }
        bool progress = false, want_pipe = false;
        if (!in_eof && tail < sizeof(buf)) {
            ssize_t n = read(0, buf + tail, sizeof(buf) - tail);
            if (n > 0) {
                tail += (size_t)n;
                progress = true;
            } else if (n == 0) {
                in_eof = true;
            } else if (errno == EAGAIN) {
                want_pipe = head == tail;
            } else if (errno != EINTR) {
                return fail("read stdin", errno);
            }
        }
        if (head < tail) {
            ssize_t w = slip_tcp__send(g_s, c, buf + head, tail - head, 0);
            if (w > 0) {
                head += (size_t)w;
                sent += (uint64_t)w;
                progress = true;
            } else if (w != -EAGAIN) {
                fprintf(stderr, "tcp_tool: send after %llu bytes: %s\n", (unsigned long long)sent,
                        strerror((int)-w));
                return 1;
            }
            if (head == tail) {
                head = tail = 0;
            } else if (tail == sizeof(buf) && head >= sizeof(buf) / 2) {
                memmove(buf, buf + head, tail - head);
                tail -= head;
                head = 0;
            }
        }
        if (in_eof && head == tail && !shut) {
            int rc = slip_tcp__shutdown(g_s, c, SHUT_WR);
            if (rc < 0)
                return fail("shutdown", rc);
            shut = true;
        }
        ssize_t r = slip_tcp__recv(g_s, c, sink, sizeof(sink), 0);
        if (r > 0) {
            unexpected += (uint64_t)r;
            progress = true;
        } else if (r == 0) {
            if (!shut) {
                fprintf(stderr, "tcp_tool: the peer closed after %llu bytes were sent\n",
                        (unsigned long long)sent);
                return 1;
            }
            break;
        } else if (r != -EAGAIN) {
            fprintf(stderr, "tcp_tool: connection failed after %llu bytes were sent: %s\n",
                    (unsigned long long)sent, strerror((int)-r));
            return 1;
        }
        if (progress)
            slip_stack__poll(g_s);
        else
            idle(want_pipe ? 0 : -1, POLLIN);
    }
    double secs = now_s() - t0;
    slip_tcp__close(g_s, c);
    linger_after_close(false);
    print_result(mode, sent, secs, unexpected);
    return 0;
}

/* Connection -> stdout until the peer's FIN, then close. */
static int run_recv(const char *mode, int c)
{
    static uint8_t buf[XFER_BUF];
    size_t head = 0, tail = 0;
    bool eof = false;
    uint64_t got = 0;
    double t0 = now_s();

    fcntl(1, F_SETFL, fcntl(1, F_GETFL) | O_NONBLOCK);
    for (;;) {
        if (g_stop) {
            fprintf(stderr, "tcp_tool: interrupted after receiving %llu bytes\n", (unsigned long long)got);
            return 1;
        }
        bool progress = false, want_pipe = false;
        if (!eof && tail < sizeof(buf)) {
            ssize_t r = slip_tcp__recv(g_s, c, buf + tail, sizeof(buf) - tail, 0);
            if (r > 0) {
                tail += (size_t)r;
                got += (uint64_t)r;
                progress = true;
            } else if (r == 0) {
                eof = true;
            } else if (r != -EAGAIN) {
                fprintf(stderr, "tcp_tool: connection failed after %llu bytes were received: %s\n",
                        (unsigned long long)got, strerror((int)-r));
                return 1;
            }
        }
        if (head < tail) {
            ssize_t w = write(1, buf + head, tail - head);
            if (w > 0) {
                head += (size_t)w;
                progress = true;
            } else if (w < 0 && errno == EAGAIN) {
                want_pipe = true;
            } else if (w < 0 && errno != EINTR) {
                return fail("write stdout", errno);
            }
            if (head == tail)
                head = tail = 0;
        }
        if (eof && head == tail)
            break;
        if (progress)
            slip_stack__poll(g_s);
        else
            idle(want_pipe ? 1 : -1, POLLOUT);
    }
    double secs = now_s() - t0;
    slip_tcp__close(g_s, c);
    linger_after_close(true);
    print_result(mode, got, secs, 0);
    return 0;
}

struct echo_conn {
    int h;
    uint32_t head, tail;
    bool eof;
    uint8_t buf[ECHO_BUF];
};

/* Accepts every connection (up to max), echoes everything, closes when the peer has closed and
 * the echo is out. Runs until SIGTERM; the counters are printed before the remaining
 * connections are closed, so they show what was still open. */
static int run_echo(uint16_t port, unsigned max)
{
    int l, rc = listen_on(port, 1024, &l);
    if (rc)
        return rc;
    struct echo_conn **cs = calloc(max, sizeof(*cs));
    if (!cs)
        return fail("calloc", ENOMEM);
    unsigned n = 0;
    uint64_t accepted = 0, closed = 0, errors = 0, bytes = 0, accept_full = 0;

    while (!g_stop) {
        bool progress = false;
        while (n < max) {
            be32 ra;
            uint16_t rp;
            int h = slip_tcp__accept(g_s, l, &ra, &rp);
            if (h < 0) {
                if (h != -EAGAIN) {
                    errors++;
                    fprintf(stderr, "tcp_tool: accept: %s\n", strerror(-h));
                }
                break;
            }
            struct echo_conn *e = malloc(sizeof(*e));
            if (!e) {
                slip_tcp__close(g_s, h);
                errors++;
                break;
            }
            e->h = h;
            e->head = e->tail = 0;
            e->eof = false;
            cs[n++] = e;
            accepted++;
            progress = true;
        }
        if (n == max)
            accept_full++;
        for (unsigned i = 0; i < n;) {
            struct echo_conn *e = cs[i];
            bool drop = false;
            /* Drain the RX ring between slices of a long connection list: a full pass over
             * 1000 connections takes long enough for a burst to overflow it. */
            if (i % 128 == 127)
                slip_stack__poll(g_s);
            /* Readiness is read without the lock: skip the idle ones cheaply. */
            unsigned ev = slip_tcp__poll(g_s, e->h);
            if (!(ev & (SLIP_EV_IN | SLIP_EV_ERR | SLIP_EV_HUP | SLIP_EV_RDHUP)) && e->head == e->tail) {
                i++;
                continue;
            }
            if (!e->eof && e->tail < ECHO_BUF) {
                ssize_t r = slip_tcp__recv(g_s, e->h, e->buf + e->tail, ECHO_BUF - e->tail, 0);
                if (r > 0) {
                    e->tail += (uint32_t)r;
                    bytes += (uint64_t)r;
                    progress = true;
                } else if (r == 0) {
                    e->eof = true;
                    progress = true;
                } else if (r != -EAGAIN) {
                    errors++;
                    drop = true;
                }
            }
            if (!drop && e->head < e->tail) {
                ssize_t w = slip_tcp__send(g_s, e->h, e->buf + e->head, e->tail - e->head, 0);
                if (w > 0) {
                    e->head += (uint32_t)w;
                    progress = true;
                    if (e->head == e->tail)
                        e->head = e->tail = 0;
                } else if (w != -EAGAIN) {
                    errors++;
                    drop = true;
                }
            }
            if (drop || (e->eof && e->head == e->tail)) {
                slip_tcp__close(g_s, e->h);
                free(e);
                cs[i] = cs[--n];
                closed++;
                progress = true;
                continue;
            }
            i++;
        }
        if (progress)
            slip_stack__poll(g_s);
        else
            idle(-1, 0);
    }
    /* Let the last closes reach the wire before the snapshot. */
    for (int i = 0; i < 20; i++)
        slip_stack__wait(g_s, 5);
    printf("echo.accepted %llu\necho.closed %llu\necho.open %u\necho.errors %llu\necho.bytes %llu\n"
           "echo.accept_full %llu\n", (unsigned long long)accepted, (unsigned long long)closed, n,
           (unsigned long long)errors, (unsigned long long)bytes, (unsigned long long)accept_full);
    dump_counters();
    g_counters = false;
    for (unsigned i = 0; i < n; i++) {
        slip_tcp__close(g_s, cs[i]->h);
        free(cs[i]);
    }
    free(cs);
    slip_tcp__close(g_s, l);
    return 0;
}

int main(int argc, char **argv)
{
    struct slip_config cfg;
    char err[256] = "";
    const char *mode = NULL, *host = NULL;
    const char *pos[3];
    unsigned npos = 0;
    long max_conns = 4096;

    slip_config__defaults(&cfg);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--iface") && i + 1 < argc) {
            if (cfg.nifaces == SLIP_MAX_IFACES) {
                fprintf(stderr, "tcp_tool: at most %d --iface\n", SLIP_MAX_IFACES);
                return 2;
            }
            cfg.ifnames[cfg.nifaces++] = argv[++i];
        } else if (!strcmp(a, "--counters")) {
            g_counters = true;
        } else if (!strcmp(a, "--max-conns") && i + 1 < argc) {
            char *end;
            max_conns = strtol(argv[++i], &end, 10);
            if (*end || max_conns < 1 || max_conns > 1000000) {
                fprintf(stderr, "tcp_tool: --max-conns %s is not a count in 1..1000000\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "tcp_tool: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (!mode) {
            mode = a;
        } else if (npos < 3) {
            pos[npos++] = a;
        } else {
            fprintf(stderr, "tcp_tool: too many arguments at '%s'\n", a);
            return 2;
        }
    }
    if (cfg.nifaces == 0 || !mode) {
        fprintf(stderr, "tcp_tool: %s is required\n", cfg.nifaces ? "a mode" : "--iface");
        usage(stderr);
        return 2;
    }
    bool listens = !strcmp(mode, "serve-recv") || !strcmp(mode, "serve-send") || !strcmp(mode, "echo");
    bool connects = !strcmp(mode, "connect-send") || !strcmp(mode, "connect-recv");
    if (!listens && !connects) {
        fprintf(stderr, "tcp_tool: unknown mode '%s'\n", mode);
        usage(stderr);
        return 2;
    }
    if (npos != (listens ? 1u : 2u)) {
        fprintf(stderr, "tcp_tool: %s takes %s\n", mode, listens ? "PORT" : "HOST PORT");
        return 2;
    }
    uint16_t port;
    if (connects)
        host = pos[0];
    if (parse_port(pos[npos - 1], &port) < 0)
        return 2;
    if (slip_config__from_env(&cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "tcp_tool: %s\n", err);
        return 2;
    }
    bool data_on_stdout = !strcmp(mode, "serve-recv") || !strcmp(mode, "connect-recv");
    g_cfile = data_on_stdout ? stderr : stdout;

    int rc = slip_stack__open(&g_s, &cfg, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "tcp_tool: %s\n", err);
        return 1;
    }
    struct sigaction sa = { .sa_handler = on_signal };
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int c = -1;
    if (!strcmp(mode, "echo")) {
        rc = run_echo(port, (unsigned)max_conns);
    } else {
        if (listens) {
            int l;
            rc = listen_on(port, 1, &l);
            if (!rc)
                rc = accept_one(l, &c);
        } else {
            rc = connect_to(host, port, &c);
        }
        if (!rc) {
            if (!strcmp(mode, "serve-send") || !strcmp(mode, "connect-send"))
                rc = run_send(mode, c);
            else
                rc = run_recv(mode, c);
        }
    }
    /* Counters also after a failure: they are what explains it. */
    dump_counters();
    slip_stack__close(g_s);
    return rc;
}
