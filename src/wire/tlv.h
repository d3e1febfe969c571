/* IPv4 options (RFC 791 §3.1) and TCP options (RFC 9293 §3.2) share one framing: EOL (0) ends the
 * list, NOP (1) is one octet, every other option is kind, length (counting both octets), data.
 * This walks it once for both parsers; what an option means is theirs. */
#ifndef SLIP_WIRE_TLV_H
#define SLIP_WIRE_TLV_H

#include <errno.h>

#include "base/types.h"

struct wire_tlv {
    uint8_t kind;
    uint8_t len;                /* whole option, kind and length octets included */
    const uint8_t *data;        /* len - 2 octets */
};

/* Returns 1 with the option at *i in *t (and *i past it), 0 at the end of the list, -EPROTO when
 * an option's length is below 2 or runs past the list. */
static inline int wire_tlv__next(const uint8_t *opt, size_t len, size_t *i, struct wire_tlv *t)
{
    while (*i < len) {
        uint8_t kind = opt[*i];
        if (kind == 0)
            return 0;
        if (kind == 1) {
            (*i)++;
            continue;
        }
        if (len - *i < 2)
            return -EPROTO;
        uint8_t olen = opt[*i + 1];
        if (olen < 2 || olen > len - *i)
            return -EPROTO;
        t->kind = kind;
        t->len = olen;
        t->data = opt + *i + 2;
        *i += olen;
        return 1;
    }
    return 0;
}

#endif
