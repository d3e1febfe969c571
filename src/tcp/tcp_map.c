/* Large scoreboards and transmit maps. The ones in struct tcp_conn (TCP_SACK_MAX blocks,
 * TCP_TXMAP_MAX records) serve windows of a few hundred segments. A window of thousands (a path
 * of tens of ms at tens of MB/s, with autotuned buffers) can hold a hole every other segment:
 * the drop-tail queue a sender's startup overflows drops about two of every three segments for
 * a round trip, and random loss adds more. Linux keeps SACK state per packet; a scoreboard that
 * forgets blocks calls delivered data lost, and a transmit map that merges ranges loses their
 * send times. Such a connection takes a large map (TCP_BIG_SACK blocks, TCP_BIG_TXMAP records)
 * from a pool of TCP_BIG_MAPS in its stack's table, and gives it back once nothing it sent is
 * outstanding, or when it ends. With the pool empty it keeps its own arrays, as before (counted:
 * big_maps_none). The pool lives after the hash buckets in struct tcp_shared, so every process
 * that maps the stack finds it; a connection finds it from its own slot index. */
#include <string.h>

#include "tcp/tcp_var.h"

bool tcp_map__grow(struct tcp_conn *c)
{
    if (c->map)
        return false;       /* already large: the caller's limit is the large one */
    struct tcp_shared *sh = tcp_conn__shared(c);
    uint32_t k;
    struct tcp_bigmap *maps = tcp__maps(sh);
    if (sh->map_free && sh->map_free <= sh->nmaps) {
        k = sh->map_free - 1;
        sh->map_free = maps[k].next_free;
    } else if (sh->map_high < sh->nmaps) {
        k = sh->map_high++;
    } else {
        sh->c.big_maps_none++;
        return false;
    }
    struct tcp_bigmap *m = &maps[k];
    memcpy(m->sb, c->sb, (size_t)c->nsb * sizeof(c->sb[0]));
    memcpy(m->txr, c->txr, (size_t)c->ntxr * sizeof(c->txr[0]));
    m->next_free = 0;
    c->map = (uint16_t)(k + 1);
    sh->c.big_maps_taken++;
    return true;
}

void tcp_map__release(struct tcp_conn *c)
{
    struct tcp_bigmap *m = tcp_map__big(c);
    if (!m) {
        c->map = 0;
        return;
    }
    struct tcp_shared *sh = tcp_conn__shared(c);
    /* What still fits goes back into the connection; the callers release when it is empty
     * or the connection ends, so nothing is cut here in practice. */
    c->nsb = (uint16_t)SLIP_MIN(c->nsb, (unsigned)TCP_SACK_MAX);
    c->ntxr = (uint16_t)SLIP_MIN(c->ntxr, (unsigned)TCP_TXMAP_MAX);
    memcpy(c->sb, m->sb, (size_t)c->nsb * sizeof(c->sb[0]));
    memcpy(c->txr, m->txr, (size_t)c->ntxr * sizeof(c->txr[0]));
    m->next_free = sh->map_free;
    sh->map_free = c->map;
    c->map = 0;
}
