/* SO_ZEROCOPY / MSG_ZEROCOPY on accelerated sockets (Linux's msg_zerocopy.rst). The stack copies
 * what a send hands it into its own buffers before the call returns, so the application's pages
 * are free again at once: every MSG_ZEROCOPY send that queued data gets its notification id (a
 * per-socket counter from 0) completed immediately, with SO_EE_CODE_ZEROCOPY_COPIED, as Linux
 * reports a send whose data it had to copy. Completions wait on the socket's error queue:
 * POLLERR is up while one is pending, and recvmsg(MSG_ERRQUEUE) returns them as Linux does, one
 * range [ee_info, ee_data] of consecutive ids per message (Linux merges consecutive ones too). */
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <linux/errqueue.h>

#include "base/types.h"
#include "preload/preload.h"

void pre_zc__sent(struct pfd *p)
{
    uint32_t id = p->zc_next++;
    if (p->zc_pending && p->zc_hi + 1 == id) {
        p->zc_hi = id;
        return;
    }
    /* Only one range is kept: ids are consecutive, since every send completes at once. */
    if (!p->zc_pending)
        p->zc_lo = id;
    p->zc_hi = id;
    p->zc_pending = 1;
    preload_ready_epoch_bump();     /* POLLERR is up: waiters look again */
}

ssize_t pre_zc__recv_errqueue(struct pfd *p, struct msghdr *m)
{
    if (!p->zc_pending)
        return -EAGAIN;     /* Linux: an empty error queue, blocking or not */
    /* Linux's IP_RECVERR payload: the extended error, then the offender's address (zeroed for
     * a zero-copy completion). */
    struct {
        struct sock_extended_err ee;
        struct sockaddr_in offender;
    } errhdr;
    struct sock_extended_err ee;
    memset(&errhdr, 0, sizeof(errhdr));
    memset(&ee, 0, sizeof(ee));
    ee.ee_origin = SO_EE_ORIGIN_ZEROCOPY;
    ee.ee_code = SO_EE_CODE_ZEROCOPY_COPIED;
    ee.ee_info = p->zc_lo;
    ee.ee_data = p->zc_hi;
    p->zc_pending = 0;
    m->msg_flags = MSG_ERRQUEUE;
    size_t room = m->msg_control ? m->msg_controllen : 0;
    m->msg_controllen = 0;
    errhdr.ee = ee;
    if (room < CMSG_LEN(sizeof(errhdr))) {
        m->msg_flags |= MSG_CTRUNC;
        return 0;
    }
    struct cmsghdr *h = (struct cmsghdr *)m->msg_control;
    h->cmsg_level = SOL_IP;
    h->cmsg_type = IP_RECVERR;
    h->cmsg_len = CMSG_LEN(sizeof(errhdr));
    memcpy(CMSG_DATA(h), &errhdr, sizeof(errhdr));
    m->msg_controllen = SLIP_MIN(room, (size_t)CMSG_SPACE(sizeof(errhdr)));
    return 0;
}
