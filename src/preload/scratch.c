/* Per-thread scratch buffers for the calls that must copy through memory of their own (UDP
 * recvmsg into scattered buffers, sendfile, splice). They are allocated on a thread's first use
 * and freed when it ends: static thread-local arrays would sit in every thread's static TLS,
 * which glibc carves from each new thread's stack, so a program creating threads with small
 * stacks (MariaDB's 16-256 KiB timer and I/O threads) would get EINVAL from pthread_create.
 * What stays in TLS is one pointer per kind. */
#include <pthread.h>
#include <stdlib.h>

#include "base/types.h"
#include "preload/preload.h"

static __thread void *t_bufs[PRELOAD_SCRATCH_KINDS];
static pthread_key_t g_key;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *arg)
{
    (void)arg;
    for (int k = 0; k < PRELOAD_SCRATCH_KINDS; k++) {
        free(t_bufs[k]);
        t_bufs[k] = NULL;
    }
}

static void scratch_key(void)
{
    pthread_key_create(&g_key, scratch_free);
}

void *preload_scratch(enum preload_scratch_kind kind)
{
    void *b = t_bufs[kind];
    if (SLIP_LIKELY(b != NULL))
        return b;
    b = malloc(PRELOAD_SCRATCH_BYTES);
    if (!b)
        return NULL;
    pthread_once(&g_once, scratch_key);
    pthread_setspecific(g_key, b);      /* any non-NULL value: the destructor frees them all */
    t_bufs[kind] = b;
    return b;
}
