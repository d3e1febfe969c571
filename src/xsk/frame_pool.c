/* Frame pool initialisation. The pool is a LIFO of frame base offsets (see frame_pool.h): the
 * hot get/put paths are inline there; only the one-time fill lives here. */
#include "xsk/frame_pool.h"

void xsk_frame_pool__init(struct xsk_frame_pool *p, uint32_t nframes, uint32_t frame_size)
{
    p->capacity = nframes;
    p->frame_size = frame_size;
    /* Push the highest offsets first so the first gets hand out frame 0, 1, 2 ...: neighbouring
     * frames in order keep early traffic on few pages. */
    for (uint32_t i = 0; i < nframes; i++)
        p->addrs[i] = (uint64_t)(nframes - 1 - i) * frame_size;
    p->count = nframes;
    p->low_water = nframes;
}
