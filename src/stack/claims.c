/* What binds a socket to the host outside the engine: the kernel socket that reserves its port
 * and its claim in the XDP program, released when the engine frees the connection. */
#include "stack/stack_int.h"

static void steer_tcp_key(struct steer_key *k, const struct tcp_res *r)
{
    memset(k, 0, sizeof(*k));
    k->proto = IPPROTO_TCP;
    k->laddr = r->laddr;
    k->lport = hton16(r->lport);
    if (r->key == 2) {
        k->raddr = r->raddr;
        k->rport = hton16(r->rport);
    }
}

static void steer_tcp_key6(struct steer_key6 *k, const struct tcp_res *r)
{
    memset(k, 0, sizeof(*k));
    k->proto = IPPROTO_TCP;
    memcpy(k->laddr, &r->laddr6, 16);
    k->lport = hton16(r->lport);
    if (r->key == 2) {
        memcpy(k->raddr, &r->raddr6, 16);
        k->rport = hton16(r->rport);
    }
}

enum group_op { GROUP_JOIN, GROUP_LEAVE, GROUP_UNPARK };

/* Lock held; the group's claim lock held. Joins, leaves or unparks (see steer.h) the SO_REUSEPORT
 * group of r's listen key on every interface; a failed join leaves nothing behind. */
static int tcp_res_group(struct slip_stack *s, struct tcp_res *r, enum group_op op)
{
    struct steer_key k;
    struct steer_key6 k6;
    uint32_t me = s->index, pid = (uint32_t)g_stack_pid;
    int origin = (int)r->origin - 1, rc = 0;
    bool v6 = r->v6 & TCP_RES_V6, dual = r->v6 & TCP_RES_DUAL;
    steer_tcp_key(&k, r);
    if (v6) {
        steer_tcp_key6(&k6, r);
        k.laddr = 0;
    }
    if (op == GROUP_UNPARK) {
        for (unsigned i = 0; i < s->nifs; i++) {
            struct steer *st = s->ifs[i].steer;
            if (v6)
                steer__unpark6(st, &k6, me);
            if (!v6 || dual)
                steer__unpark(st, &k, me);
        }
        return 0;
    }
    unsigned i = 0;
    for (; i < s->nifs && op == GROUP_JOIN && rc == 0; i++) {
        struct steer *st = s->ifs[i].steer;
        if (v6)
            rc = steer__join6(st, &k6, me, pid, origin);
        if (rc == 0 && (!v6 || dual))
            rc = steer__join(st, &k, me, pid, origin);
    }
    if (op == GROUP_LEAVE || rc < 0)
        for (unsigned j = 0; j < (op == GROUP_JOIN ? i : s->nifs); j++) {
            struct steer *st = s->ifs[j].steer;
            if (v6)
                steer__leave6(st, &k6, me);
            if (!v6 || dual)
                steer__leave(st, &k, me);
        }
    return rc;
}

/* Lock held. A process accepts or waits on listener r: a listener whose stack was parked by a
 * worker's copy takes connections again (the copy shares them, as a process of each uses its
 * listener). Once per listener. */
void tcp_res_used(struct slip_stack *s, struct tcp_res *r)
{
    STACK_ASSERT_LOCKED(s);
    if (r->used || r->key != 1)
        return;
    r->used = 1;
    if (r->group) {
        slip_lock__acquire(&s->group->claim_lock);
        tcp_res_group(s, r, GROUP_UNPARK);
        slip_lock__release(&s->group->claim_lock);
    }
}

/* Lock held. An IPv6 connection or listener is claimed in slip_owned6 (a dual-stack listener in
 * slip_owned as well, on 0.0.0.0); a failure leaves nothing behind. A SO_REUSEPORT listener
 * joins its key's group (bpf/steer.h STEER_F_GROUP): listeners of other stacks on the same key
 * (another program's, or a worker's own stack) share new connections with it. */
int tcp_res_claim(struct slip_stack *s, struct tcp_res *r)
{
    STACK_ASSERT_LOCKED(s);
    struct steer_key k;
    struct steer_val v = { .stack = (uint16_t)s->index, .pid = (uint32_t)g_stack_pid };
    int rc = 0;
    unsigned sock = (unsigned)((const struct tcp_side *)(const void *)r - s->t.ts);
    if (r->key == 1 && sock < s->t.max_conns && tcp_conn__reuseport(s->tcp, (slip_idx_t)sock)) {
        slip_lock__acquire(&s->group->claim_lock);
        rc = tcp_res_group(s, r, GROUP_JOIN);
        slip_lock__release(&s->group->claim_lock);
        r->group = rc == 0;
        return rc;
    }
    if (r->v6 & TCP_RES_V6) {
        struct steer_key6 k6;
        steer_tcp_key6(&k6, r);
        steer_tcp_key(&k, r);
        k.laddr = 0;
        for (unsigned i = 0; i < s->nifs && rc == 0; i++) {
            rc = steer__add6(s->ifs[i].steer, &k6, &v);
            if (rc == 0 && (r->v6 & TCP_RES_DUAL))
                rc = steer__add(s->ifs[i].steer, &k, &v);
        }
        if (rc < 0) {
            for (unsigned i = 0; i < s->nifs; i++) {
                steer__del6(s->ifs[i].steer, &k6);
                if (r->v6 & TCP_RES_DUAL)
                    steer__del(s->ifs[i].steer, &k);
            }
        }
        return rc;
    }
    steer_tcp_key(&k, r);
    for (unsigned i = 0; i < s->nifs && rc == 0; i++)
        rc = steer__add(s->ifs[i].steer, &k, &v);
    return rc;
}

/* Lock held. True when another listener of a SO_REUSEPORT group still needs r's listen key. */
static bool tcp_res_key_shared(struct slip_stack *s, const struct tcp_res *r)
{
    STACK_ASSERT_LOCKED(s);
    if (r->key != 1)
        return false;
    for (unsigned i = 0; i < slip_socktab__tcp_high(&s->t); i++) {
        const struct tcp_res *o = &s->t.ts[i].res;
        if (o != r && o->key == 1 && o->lport == r->lport && o->laddr == r->laddr && o->v6 == r->v6 &&
            memcmp(&o->laddr6, &r->laddr6, 16) == 0)
            return true;
    }
    return false;
}

/* Lock held. */
void tcp_res_release(struct slip_stack *s, struct tcp_res *r)
{
    STACK_ASSERT_LOCKED(s);
    if (r->key && r->group && !tcp_res_key_shared(s, r)) {
        slip_lock__acquire(&s->group->claim_lock);
        tcp_res_group(s, r, GROUP_LEAVE);
        slip_lock__release(&s->group->claim_lock);
    } else if (r->key && !tcp_res_key_shared(s, r)) {
        struct steer_key k;
        steer_tcp_key(&k, r);
        if (r->v6 & TCP_RES_V6) {
            struct steer_key6 k6;
            steer_tcp_key6(&k6, r);
            k.laddr = 0;
            for (unsigned i = 0; i < s->nifs; i++) {
                steer__del6(s->ifs[i].steer, &k6);
                if (r->v6 & TCP_RES_DUAL)
                    steer__del(s->ifs[i].steer, &k);
            }
        } else {
            for (unsigned i = 0; i < s->nifs; i++)
                steer__del(s->ifs[i].steer, &k);
        }
    }
    if (r->kfd > 0)
        proc_kfd_drop(s, (unsigned)((const struct tcp_side *)(const void *)r - s->t.ts), r->kfd);
    if (r->pending)
        s->shm->tres_pending--;
    memset(r, 0, sizeof(*r));
}

/* True when the engine no longer holds the connection these resources belong to. */
bool tcp_res_done(struct slip_stack *s, unsigned i)
{
    const struct tcp_res *r = &s->t.ts[i].res;
    be32 la, ra;
    uint16_t lp, rp;
    tcp_conn__local(s->tcp, (slip_idx_t)i, &la, &lp);
    tcp_conn__remote(s->tcp, (slip_idx_t)i, &ra, &rp);
    return tcp_conn__state(s->tcp, (slip_idx_t)i) == TCPS_CLOSED || lp != r->lport || rp != r->rport || ra != r->raddr;
}

/* Lock held. A pending connection's resources go when the engine frees its slot: only the
 * slots freed since the last reap are looked at (every slot when more than the engine's ring
 * holds were freed since). Every poll runs this; scanning the whole table there cost a client
 * making new connections 5 % of its core (the slots of its LAST_ACK connections are anywhere). */
void tcp_res_reap(struct slip_stack *s)
{
    STACK_ASSERT_LOCKED(s);
    if (slip_sandbox__limited())
        return;     /* steering map updates (bpf) are left to a poll outside the sandbox */
    uint32_t seq = s->tcp->freed_seq, seen = s->shm->tres_seen;
    s->shm->tres_seen = seq;
    if (!s->shm->tres_pending || seq == seen)
        return;
    if (seq - seen > TCP_FREED_RING) {
        for (unsigned i = 0; i < slip_socktab__tcp_high(&s->t) && s->shm->tres_pending; i++)
            if (s->t.ts[i].res.pending && tcp_res_done(s, i))
                tcp_res_release(s, &s->t.ts[i].res);
        return;
    }
    for (uint32_t k = seen; k != seq && s->shm->tres_pending; k++) {
        slip_idx_t i = tcp__freed_slot(s->tcp, k);
        if (i < s->t.max_conns && s->t.ts[i].res.pending && tcp_res_done(s, i))
            tcp_res_release(s, &s->t.ts[i].res);
    }
}

/* ---- UDP entry points ---- */

static void udp_release_keys(struct slip_stack *s, unsigned nifs, const struct steer_key *k4,
                             const struct steer_key6 *k6, bool group)
{
    for (unsigned i = 0; i < nifs; i++) {
        struct steer *st = s->ifs[i].steer;
        if (k6)
            group ? steer__leave6(st, k6, s->index) : steer__del6(st, k6);
        if (k4)
            group ? steer__leave(st, k4, s->index) : steer__del(st, k4);
    }
}

/* Lock held. Claims a bound UDP socket's keys on every interface (k4 or k6 NULL: not that
 * family). A SO_REUSEPORT socket's key is a group that sockets of several stacks share
 * (bpf/steer.h STEER_F_GROUP): the XDP program gives each datagram to one member stack by a
 * keyed hash of its addresses and ports, as Linux spreads datagrams over a reuseport group, and
 * the stack spreads them over its own sockets of the group (udp__lookup). Any other key is this
 * stack's alone. A failure leaves nothing behind. */
int udp_claim_keys(struct slip_stack *s, const struct steer_key *k4, const struct steer_key6 *k6, bool group)
{
    STACK_ASSERT_LOCKED(s);
    struct steer_val v = { .stack = (uint16_t)s->index, .pid = (uint32_t)g_stack_pid };
    int rc = 0;
    unsigned i = 0;
    if (group)
        slip_lock__acquire(&s->group->claim_lock);
    for (; i < s->nifs && rc == 0; i++) {
        struct steer *st = s->ifs[i].steer;
        if (k6)
            rc = group ? steer__join6(st, k6, s->index, v.pid, -1) : steer__add6(st, k6, &v);
        if (rc == 0 && k4)
            rc = group ? steer__join(st, k4, s->index, v.pid, -1) : steer__add(st, k4, &v);
    }
    if (rc < 0)
        udp_release_keys(s, group ? i : s->nifs, k4, k6, group);
    if (group)
        slip_lock__release(&s->group->claim_lock);
    return rc;
}

/* Lock held. The last socket of this stack on a UDP key closes: a group's key loses this stack
 * as a member (and goes with its last member), any other key goes. */
void udp_unclaim_keys(struct slip_stack *s, const struct steer_key *k4, const struct steer_key6 *k6, bool group)
{
    STACK_ASSERT_LOCKED(s);
    if (group)
        slip_lock__acquire(&s->group->claim_lock);
    udp_release_keys(s, s->nifs, k4, k6, group);
    if (group)
        slip_lock__release(&s->group->claim_lock);
}

/* A reservation socket is never fd 0 (0 marks "none" in the tables, whose untouched slots are
 * zeros): a program that closed its stdin gets the socket moved up. Negative errno passes. */
int fd_above_stdio(int fd)
{
    if (fd < 0 || fd > 2)
        return fd < 0 ? -errno : fd;
    int d = fcntl(fd, F_DUPFD, 3);
    int e = errno;
    close(fd);
    return d < 0 ? -e : d;
}

void steer_key(struct steer_key *k, be32 addr, uint16_t port)
{
    memset(k, 0, sizeof(*k));
    k->laddr = addr;
    k->lport = hton16(port);
    k->proto = IPPROTO_UDP;
}

/* A kernel TCP socket bound to (addr, port): it reserves the port (port 0: an ephemeral one from
 * ip_local_port_range) and, never listening, makes the kernel answer stray SYNs with RST. */
int kernel_reserve_tcp(be32 addr, uint16_t *port)
{
    int kfd = fd_above_stdio(socket(AF_INET, SOCK_STREAM, 0));    /* inherited across exec: see struct tcp_res */
    if (kfd < 0)
        return kfd;
    int one = 1;
    setsockopt(kfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = hton16(*port), .sin_addr.s_addr = addr };
    socklen_t sl = sizeof(sin);
    if (bind(kfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || getsockname(kfd, (struct sockaddr *)&sin, &sl) < 0) {
        int e = errno;
        close(kfd);
        return -e;
    }
    *port = ntoh16(sin.sin_port);
    slip_kfd__add(kfd);
    return kfd;
}

/* Lock held: a slot the engine just handed out may still carry resources of its previous,
 * finished connection. */
void tcp_res_take(struct slip_stack *s, int c)
{
    STACK_ASSERT_LOCKED(s);
    if (s->t.ts[c].res.pending || s->t.ts[c].res.key || s->t.ts[c].res.kfd > 0)
        tcp_res_release(s, &s->t.ts[c].res);
}

/* The application's kernel socket reserves the port; a duplicate (placed high, inherited across
 * exec like the stack itself) keeps the reservation while the connection outlives the
 * application's close (TIME_WAIT). */
int adopt_kfd(int app_kfd, be32 addr, uint16_t *port)
{
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = hton16(*port), .sin_addr.s_addr = addr };
    socklen_t sl = sizeof(sin);
    if (!addr && !*port) {
        /* Any address, an ephemeral port (connect): the bind fails with EINVAL, and only so,
         * when the application bound the socket itself. One syscall less per connection than
         * asking first. */
        if (bind(app_kfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 && errno != EINVAL)
            return -errno;
    } else {
        /* A given address and port (listen): asked first, since a second bind could fail for
         * other reasons first (a privileged port after the program dropped its privileges). */
        struct sockaddr_in cur;
        socklen_t cl = sizeof(cur);
        if (getsockname(app_kfd, (struct sockaddr *)&cur, &cl) < 0)
            return -errno;
        if (cur.sin_port == 0 && bind(app_kfd, (struct sockaddr *)&sin, sizeof(sin)) < 0)
            return -errno;
    }
    if (getsockname(app_kfd, (struct sockaddr *)&sin, &sl) < 0)
        return -errno;
    if (!sin.sin_port)
        return -EINVAL;     /* bound with IP_BIND_ADDRESS_NO_PORT: no port to reserve yet */
    *port = ntoh16(sin.sin_port);
    int d = fcntl(app_kfd, F_DUPFD, 1000);
    if (d < 0)
        d = fcntl(app_kfd, F_DUPFD, 3);
    if (d < 0)
        return -errno;
    slip_kfd__add(d);
    return d;
}

bool slip_tcp__port_busy(struct slip_stack *s, be32 addr, uint16_t port)
{
    bool busy = false;
    stack_lock(s);
    for (uint32_t i = 0; i < tcp_shared__high(s->tcp) && !busy; i++) {
        uint8_t st = tcp_conn__state(s->tcp, (slip_idx_t)i);
        be32 la;
        uint16_t lp;
        tcp_conn__local(s->tcp, (slip_idx_t)i, &la, &lp);
        busy = st != TCPS_CLOSED && st != TCPS_LISTEN && lp == port && (la == addr || !addr || !la);
    }
    stack_unlock(s);
    return busy;
}
