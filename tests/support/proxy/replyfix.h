/*
 * replyfix: rewriting the real server's replies into what the emulated
 * version would have said.
 */
#ifndef RELOCK_PROXY_REPLYFIX_H
#define RELOCK_PROXY_REPLYFIX_H

#include <stddef.h>

#include "buf.h"
#include "personality.h"

enum {
    FIX_NONE = 0,
    FIX_TTL = 1 << 0,     /* ":-2" (no such key, from 2.8) -> ":-1" */
    FIX_INFO = 1 << 1,    /* version line; no "# Section" lines before 2.6 */
    FIX_ERRTEXT = 1 << 2, /* error texts that changed in 2.8 and later */
    FIX_DROP = 1 << 3,    /* in an EXEC result: an element the client never
                             asked for (a proxy-internal command) */
    FIX_DIGEST = 1 << 4   /* a GET sent for DIGEST: the value becomes its
                             XXH3-64 in hex (native.h) */
};

/*
 * Apply fixes to the complete reply p..p+n.  Returns 0 when the reply is
 * to be relayed unchanged, 1 when the replacement was appended to out,
 * -1 when out is full.
 */
int replyfix_apply(const personality *pp, unsigned fix, const char *p, size_t n,
                   pbuf *out);

/*
 * Fix an EXEC result: element i gets fixes[i] (one per command queued
 * with +QUEUED, in order).  Same return values as replyfix_apply.  When
 * the element count differs from nfixes (no transaction ran, or it was
 * aborted), the reply is relayed unchanged.
 */
int replyfix_exec(const personality *pp, const unsigned char *fixes,
                  size_t nfixes, const char *p, size_t n, pbuf *out);

#endif
