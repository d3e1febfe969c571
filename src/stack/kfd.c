/* Process-local set of port-reservation fds; see kfd.h. A bitmap indexed by fd, grown on
 * demand: reservations are few per connection and fd numbers are dense. */
#include "stack/kfd.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t *g_bits;
static size_t g_words;
/* Callers hold the stack lock, but two stacks (or stack and exec hand-over) may not share it. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* A fork child has the set (and the fds) but not the thread that may have held the mutex. */
static void kfd_atfork_child(void)
{
    pthread_mutex_init(&g_mu, NULL);
}

static void kfd_once(void)
{
    pthread_atfork(NULL, NULL, kfd_atfork_child);
}

void slip_kfd__add(int fd)
{
    if (fd < 0)
        return;
    size_t w = (size_t)fd / 64;
    pthread_once(&g_once, kfd_once);
    pthread_mutex_lock(&g_mu);
    if (w >= g_words) {
        size_t n = g_words ? g_words : 16;
        while (n <= w)
            n *= 2;
        uint64_t *b = realloc(g_bits, n * sizeof(*b));
        if (b) {
            memset(b + g_words, 0, (n - g_words) * sizeof(*b));
            g_bits = b;
            g_words = n;
        }
    }
    if (w < g_words)
        g_bits[w] |= 1ull << (fd % 64);
    pthread_mutex_unlock(&g_mu);
}

static bool has_locked(int fd)
{
    return fd >= 0 && (size_t)fd / 64 < g_words && ((g_bits[fd / 64] >> (fd % 64)) & 1);
}

bool slip_kfd__has(int fd)
{
    pthread_mutex_lock(&g_mu);
    bool r = has_locked(fd);
    pthread_mutex_unlock(&g_mu);
    return r;
}

int slip_kfd__close(int fd)
{
    pthread_mutex_lock(&g_mu);
    bool mine = has_locked(fd);
    if (mine)
        g_bits[fd / 64] &= ~(1ull << (fd % 64));
    pthread_mutex_unlock(&g_mu);
    if (!mine)
        return -EBADF;
    close(fd);
    return 0;
}

char *slip_kfd__export(void)
{
    pthread_mutex_lock(&g_mu);
    size_t cap = 64, len = 0;
    char *out = malloc(cap);
    if (out)
        out[0] = 0;
    for (size_t w = 0; out && w < g_words; w++)
        for (unsigned b = 0; g_bits[w] && b < 64; b++) {
            if (!((g_bits[w] >> b) & 1))
                continue;
            if (len + 16 > cap) {
                char *n = realloc(out, cap *= 2);
                if (!n) {
                    free(out);
                    out = NULL;
                    break;
                }
                out = n;
            }
            len += (size_t)snprintf(out + len, cap - len, "%s%zu", len ? "," : "", w * 64 + b);
        }
    pthread_mutex_unlock(&g_mu);
    return out;
}

void slip_kfd__import(const char *list)
{
    for (const char *p = list; p && *p;) {
        char *end;
        long fd = strtol(p, &end, 10);
        if (end == p)
            break;
        /* A number the environment names is taken only if it is a socket open here. */
        struct stat st;
        if (fd >= 0 && fd < (1L << 24) && fstat((int)fd, &st) == 0 && S_ISSOCK(st.st_mode))
            slip_kfd__add((int)fd);
        p = *end == ',' ? end + 1 : end;
    }
}
