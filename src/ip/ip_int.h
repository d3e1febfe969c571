/* Private to src/ip: what the IPv4 and IPv6 halves share. */
#ifndef SLIP_IP_IP_INT_H
#define SLIP_IP_IP_INT_H

#include "ip/ip.h"

/* Hands one complete frame (Ethernet header filled) to its device's batch (ip_output.c). */
void ip_output__xmit(struct ip_env *env, uint32_t ifindex, slip_idx_t pkt);
/* Copies len bytes starting at byte skip of the iovec into dst. */
void ip_iov__copy(const struct iovec *iov, int iovcnt, size_t skip, uint8_t *dst, size_t len);

#endif
