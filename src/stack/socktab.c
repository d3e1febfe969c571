/* Layout of the tables sized by SLIP_MAX_CONNS / SLIP_MAX_UDP; see socktab.h. */
#include "stack/socktab.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "stack/proc.h"
#include "tcp/tcp_query.h"
#include "udp/udp_query.h"

#define PAGE 4096

static size_t proc_stride(uint32_t max_conns, uint32_t max_udp)
{
    size_t n = SLIP_ALIGN_UP(((size_t)max_conns + max_udp) * sizeof(uint32_t), 8) +
               SLIP_ALIGN_UP((size_t)max_conns, 64) / 8;
    return SLIP_ALIGN_UP(n, (size_t)PAGE);     /* page aligned: a block is punched out whole */
}

size_t slip_socktab__bytes(uint32_t mc, uint32_t mu)
{
    return udp_shared__bytes(mu) + tcp_shared__bytes(mc) + (size_t)mc * sizeof(struct tcp_side) +
           (size_t)mu * sizeof(struct udp_side) + (size_t)mc * sizeof(uint32_t) +
           SLIP_PROC_MAX * proc_stride(mc, mu) + 7 * PAGE;
}

int slip_socktab__carve(struct slip_socktab *t, struct slip_socktab_layout *lay, struct slip_arena *a,
                        uint32_t mc, uint32_t mu)
{
    int64_t o[6] = {
        slip_arena__carve(a, udp_shared__bytes(mu), PAGE),
        slip_arena__carve(a, tcp_shared__bytes(mc), PAGE),
        slip_arena__carve(a, (size_t)mc * sizeof(struct tcp_side), PAGE),
        slip_arena__carve(a, (size_t)mu * sizeof(struct udp_side), PAGE),
        slip_arena__carve(a, (size_t)mc * sizeof(uint32_t), PAGE),
        slip_arena__carve(a, SLIP_PROC_MAX * proc_stride(mc, mu), PAGE),
    };
    for (int i = 0; i < 6; i++)
        if (o[i] < 0)
            return -ENOMEM;
    *lay = (struct slip_socktab_layout){
        .max_conns = mc, .max_udp = mu, .off_udp = (uint64_t)o[0], .off_tcp = (uint64_t)o[1],
        .off_tside = (uint64_t)o[2], .off_uside = (uint64_t)o[3], .off_cork = (uint64_t)o[4],
        .off_pblk = (uint64_t)o[5], .pblk_stride = proc_stride(mc, mu),
    };
    return slip_socktab__locate(t, lay, a, false);
}

static bool fits(uint64_t off, size_t len, size_t size)
{
    return off <= size && len <= size - off;
}

int slip_socktab__locate(struct slip_socktab *t, const struct slip_socktab_layout *lay, struct slip_arena *a,
                         bool check_engines)
{
    struct slip_socktab_layout l = *lay;      /* one read of shared memory */
    size_t size = a->size;
    uint32_t mc = l.max_conns, mu = l.max_udp;
    if (mc < 1 || mc > SLIP_SOCKTAB_MAX_CONNS || mu < 1 || mu > SLIP_SOCKTAB_MAX_UDP ||
        l.pblk_stride != proc_stride(mc, mu) ||
        !fits(l.off_udp, udp_shared__bytes(mu), size) || !fits(l.off_tcp, tcp_shared__bytes(mc), size) ||
        !fits(l.off_tside, (size_t)mc * sizeof(struct tcp_side), size) ||
        !fits(l.off_uside, (size_t)mu * sizeof(struct udp_side), size) ||
        !fits(l.off_cork, (size_t)mc * sizeof(uint32_t), size) ||
        !fits(l.off_pblk, SLIP_PROC_MAX * (size_t)l.pblk_stride, size))
        return -EINVAL;
    t->max_conns = mc;
    t->max_udp = mu;
    t->udp = slip_arena__ptr(a, l.off_udp);
    t->tcp = slip_arena__ptr(a, l.off_tcp);
    t->ts = slip_arena__ptr(a, l.off_tside);
    t->us = slip_arena__ptr(a, l.off_uside);
    t->cork = slip_arena__ptr(a, l.off_cork);
    t->pblk = slip_arena__ptr(a, l.off_pblk);
    t->pstride = (size_t)l.pblk_stride;
    if (check_engines && (t->tcp->max_conns != mc || t->udp->max_socks != mu))
        return -EINVAL;
    return 0;
}

uint32_t slip_socktab__tcp_high(const struct slip_socktab *t)
{
    return SLIP_MIN(tcp_shared__high(t->tcp), t->max_conns);
}

uint32_t slip_socktab__udp_high(const struct slip_socktab *t)
{
    return SLIP_MIN(udp_shared__high(t->udp), t->max_udp);
}

void slip_socktab__proc_clear(const struct slip_socktab *t, int k)
{
    if (madvise(t->pblk + (size_t)k * t->pstride, t->pstride, MADV_REMOVE) == 0)
        return;
    /* No hole punching here: clear what can have been set (slots below the high water). */
    uint32_t th = slip_socktab__tcp_high(t), uh = slip_socktab__udp_high(t);
    memset(slip_socktab__proc_tcp(t, k), 0, th * sizeof(uint32_t));
    memset(slip_socktab__proc_udp(t, k), 0, uh * sizeof(uint32_t));
    memset(slip_socktab__proc_held(t, k), 0, SLIP_ALIGN_UP((size_t)th, 64) / 8);
}
