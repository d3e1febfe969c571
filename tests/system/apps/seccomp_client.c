/* A client that sandboxes itself with seccomp the way sshd's pre-authentication child does, then
 * keeps using its connection (test_seccomp.py). The filter kills the process on the calls the
 * library used to make there (sendto, recvfrom, sendmsg, recvmsg, bpf, futex_waitv) and
 * RLIMIT_NOFILE drops to the fds in use, as sshd's does.
 *   seccomp_client ADDR PORT prctl|tsync   connect, filter this thread (or all: TSYNC), then echo
 *   seccomp_client ADDR PORT exec          filter, exec itself as "child": the child connects and
 *                                          echoes under the inherited filter
 *   seccomp_client ADDR PORT exec-fd       connect, filter, exec itself with the connected fd:
 *                                          the child writes one byte to it and reports
 * Echo: write 1 MiB in 64 KiB writes, read it all back, compare; prints "ok N". */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define DENY(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS)

static struct sock_filter insns[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    DENY(__NR_sendto), DENY(__NR_recvfrom), DENY(__NR_sendmsg), DENY(__NR_recvmsg), DENY(__NR_bpf),
    DENY(449 /* futex_waitv */),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
};
static struct sock_fprog prog = { sizeof(insns) / sizeof(insns[0]), insns };

static void die(const char *what)
{
    fprintf(stderr, "seccomp_client: %s: %s\n", what, strerror(errno));
    exit(2);
}

static int dial(const char *addr, int port)
{
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((unsigned short)port) };
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || inet_pton(AF_INET, addr, &sin.sin_addr) != 1 || connect(fd, (void *)&sin, sizeof(sin)) < 0)
        die("connect");
    return fd;
}

static void filter(int tsync)
{
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        die("PR_SET_NO_NEW_PRIVS");
    if (tsync ? syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) < 0
              : prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
        die("seccomp");
}

static void echo(int fd)
{
    enum { TOTAL = 1 << 20, CHUNK = 65536 };
    static unsigned char out[TOTAL], in[TOTAL];
    for (int i = 0; i < TOTAL; i++)
        out[i] = (unsigned char)(i * 7 + i / 251);
    size_t sent = 0, got = 0;
    while (sent < TOTAL) {
        ssize_t w = write(fd, out + sent, CHUNK);
        if (w <= 0)
            die("write");
        sent += (size_t)w;
        /* read what came back meanwhile, so neither side's buffers fill up */
        while (got + CHUNK <= sent) {
            ssize_t r = read(fd, in + got, sent - got);
            if (r <= 0)
                die("read");
            got += (size_t)r;
        }
    }
    while (got < TOTAL) {
        ssize_t r = read(fd, in + got, TOTAL - got);
        if (r <= 0)
            die("read");
        got += (size_t)r;
    }
    if (memcmp(in, out, TOTAL)) {
        fprintf(stderr, "seccomp_client: echo differs\n");
        exit(3);
    }
    printf("ok %zu\n", got);
}

int main(int argc, char **argv)
{
    if (argc != 4)
        return 64;
    int port = atoi(argv[2]);
    if (!strcmp(argv[3], "child")) {
        echo(dial(argv[1], port));
        return 0;
    }
    if (!strncmp(argv[3], "fd:", 3)) {
        /* An accelerated socket inherited under a filter cannot carry data: only report. */
        char c = 'x';
        signal(SIGPIPE, SIG_IGN);       /* the kernel twin is not connected: EPIPE */
        ssize_t w = write(atoi(argv[3] + 3), &c, 1);
        printf("inherited fd: write %zd (%s)\n", w, w < 0 ? strerror(errno) : "ok");
        return 0;
    }
    if (!strcmp(argv[3], "exec-fd")) {
        char fdarg[32];
        int fd = dial(argv[1], port);
        snprintf(fdarg, sizeof(fdarg), "fd:%d", fd);
        filter(0);
        execl("/proc/self/exe", argv[0], argv[1], argv[2], fdarg, (char *)NULL);
        die("exec");
    }
    if (!strcmp(argv[3], "exec")) {
        filter(0);
        execl("/proc/self/exe", argv[0], argv[1], argv[2], "child", (char *)NULL);
        die("exec");
    }
    int fd = dial(argv[1], port);
    struct rlimit rl = { (rlim_t)fd + 1, (rlim_t)fd + 1 };
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
        die("setrlimit");
    filter(!strcmp(argv[3], "tsync"));
    echo(fd);
    return 0;
}
