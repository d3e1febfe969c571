/* Every counter of the stack, printed (`slipstream stat`) or read one by one, and the
 * connection list. */
#include <arpa/inet.h>

#include "stack/stack_int.h"

/* ---- counters ---- */

struct counter_sink {
    FILE *f;
    const char *want;
    uint64_t *out;
    bool found;
};

static void emit(struct counter_sink *k, const char *name, uint64_t v)
{
    if (k->f)
        fprintf(k->f, "%s %llu\n", name, (unsigned long long)v);
    if (k->want && !strcmp(k->want, name)) {
        *k->out = v;
        k->found = true;
    }
}

static void walk_counters(struct slip_stack *s, struct counter_sink *k)
{
    char name[96];
#define EMIT_STACK(n) emit(k, "stack." #n, s->shm->c.n);
    STACK_COUNTERS(EMIT_STACK)
#define EMIT_IP(n) emit(k, "ip." #n, s->ip->c.n);
    IP_COUNTERS(EMIT_IP)
#define EMIT_UDP(n) emit(k, "udp." #n, s->udp->c.n);
    UDP_COUNTERS(EMIT_UDP)
    emit(k, "udp.sockets", s->udp->nused);
#define EMIT_TCP(n) emit(k, "tcp." #n, s->tcp->c.n);
    TCP_COUNTERS(EMIT_TCP)
    emit(k, "tcp.conns", s->tcp->nused);
    emit(k, "tcp.res_pending", s->shm->tres_pending);
    emit(k, "pool.frames", s->pool.nframes);
    /* Free frames: this stack's cache plus the group's pool (with one stack, every free frame). */
    const struct slip_arena *ga = s->shm->grouped ? &s->garena : &s->arena;
    const struct xsk_frame_pool *gp = slip_arena__ptr(ga, s->shm->off_pool);
    emit(k, "pool.free", (uint64_t)s->pool.frames->count + gp->count);
    emit(k, "pool.cached", s->pool.frames->count);
    emit(k, "pool.low_water", s->pool.frames->low_water);
    emit(k, "group.stack", s->index);
    emit(k, "group.refills", s->group->refills);
    emit(k, "group.spills", s->group->spills);
    emit(k, "group.starved", s->group->starved);
    emit(k, "group.pool_lock_contended", s->group->pool_lock.contended);
    uint64_t posted = 0;
    for (unsigned i = 0; i < s->nifs; i++)
        for (unsigned q = 0; q < s->ifs[i].nq; q++)
            posted += xsk_port__fill_posted(s->ifs[i].ports[q]);
    emit(k, "pool.fill_posted", posted);
    emit(k, "ip.reass_bufs", s->ip->reass_bufs);
    emit(k, "lock.contended", s->shm->lock.contended);
    emit(k, "lock.stolen", s->shm->lock.stolen);
    emit(k, "procs.live", procs_live(s));
    emit(k, "procs.reaped", s->shm->procs.reaped);
    emit(k, "procs.closeq_overflows", s->shm->procs.closeq_overflows);
    uint64_t fdrop, fdup, freord;
    if (devices_counters(s, &fdrop, &fdup, &freord)) {
        emit(k, "fault.dropped", fdrop);
        emit(k, "fault.duplicated", fdup);
        emit(k, "fault.reordered", freord);
    }
    for (unsigned i = 0; i < s->nifs; i++) {
        struct stack_iface *f = &s->ifs[i];
        uint64_t sc[STEER_C__MAX];
        if (steer__counters(f->steer, sc) == 0)
            for (int c = 0; c < STEER_C__MAX; c++) {
                snprintf(name, sizeof(name), "steer.%s.%s", f->name, steer__counter_name((enum steer_counter)c));
                emit(k, name, sc[c]);
            }
        for (unsigned q = 0; q < f->nq; q++) {
            struct xsk_port_stats st;
            if (xsk_port__stats(f->ports[q], &st) < 0)
                continue;
#define EMIT_XSK(n) snprintf(name, sizeof(name), "xsk.%s.q%u." #n, f->name, q); emit(k, name, st.n);
            EMIT_XSK(rx_dropped) EMIT_XSK(rx_invalid_descs) EMIT_XSK(tx_invalid_descs)
            EMIT_XSK(rx_ring_full) EMIT_XSK(rx_fill_ring_empty_descs) EMIT_XSK(tx_ring_empty_descs)
            EMIT_XSK(rx_packets) EMIT_XSK(tx_packets) EMIT_XSK(tx_kicks) EMIT_XSK(tx_kick_eagain)
            EMIT_XSK(tx_kick_ebusy) EMIT_XSK(tx_ring_full) EMIT_XSK(fill_pool_empty) EMIT_XSK(fill_busy) EMIT_XSK(comp_busy)
        }
    }
}

void slip_stack__dump(struct slip_stack *s, FILE *f)
{
    struct counter_sink k = { .f = f };
    stack_lock(s);
    walk_counters(s, &k);
    stack_unlock(s);
}

int slip_stack__counter(struct slip_stack *s, const char *name, uint64_t *out)
{
    struct counter_sink k = { .want = name, .out = out };
    stack_lock(s);
    walk_counters(s, &k);
    stack_unlock(s);
    return k.found ? 0 : -ENOENT;
}

void slip_tcp__dump(struct slip_stack *s, FILE *f)
{
    stack_lock(s);
    uint32_t high = tcp_shared__high(s->tcp);
    for (uint32_t i = 0; i < high; i++) {
        struct tcp_conn_info in;
        if (tcp_conn__state(s->tcp, i) == TCPS_CLOSED || tcp_conn__info(s->tcp, i, &in) < 0)
            continue;
        struct tcp_names n;
        tcp_conn__names(s->tcp, i, &n);
        if (n.v6) {
            char l6[INET6_ADDRSTRLEN], r6[INET6_ADDRSTRLEN];
            inet_ntop(AF_INET6, &n.laddr6, l6, sizeof(l6));
            inet_ntop(AF_INET6, &n.raddr6, r6, sizeof(r6));
            fprintf(f, "tcpconn %u %s [%s]:%u [%s]:%u cwnd=%u ssthresh=%u srtt_us=%u rto_us=%u "
                       "mss=%u retrans=%llu bytes_in=%llu bytes_out=%llu\n",
                    i, tcp_state__name(in.state), l6, in.lport, r6, in.rport,
                    in.cwnd, in.ssthresh, in.srtt_us, in.rto_us, in.mss,
                    (unsigned long long)in.st.retransmits, (unsigned long long)in.st.bytes_in,
                    (unsigned long long)in.st.bytes_out);
            continue;
        }
        uint32_t la = ntoh32(in.laddr), ra = ntoh32(in.raddr);
        fprintf(f, "tcpconn %u %s %u.%u.%u.%u:%u %u.%u.%u.%u:%u cwnd=%u ssthresh=%u srtt_us=%u rto_us=%u "
                   "mss=%u retrans=%llu bytes_in=%llu bytes_out=%llu\n",
                i, tcp_state__name(in.state),
                la >> 24, la >> 16 & 255, la >> 8 & 255, la & 255, in.lport,
                ra >> 24, ra >> 16 & 255, ra >> 8 & 255, ra & 255, in.rport,
                in.cwnd, in.ssthresh, in.srtt_us, in.rto_us, in.mss,
                (unsigned long long)in.st.retransmits, (unsigned long long)in.st.bytes_in,
                (unsigned long long)in.st.bytes_out);
    }
    stack_unlock(s);
}
