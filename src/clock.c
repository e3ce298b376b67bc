/*
 * The fleet's clock for the timestamp modes: ours, or (legacy.clock =
 * "server") the server's TIME.
 *
 * The server's clock is kept as an offset from CLOCK_MONOTONIC, never from
 * the wall clock: an NTP step of the local wall clock after the offset was
 * learned would otherwise shift every later decision by the step (and take
 * live locks over).  The offset is measured on first use of a connection
 * and again every RELOCK__CLOCK_REMEASURE_MS of use; the more certain of
 * the old (aged) and new measurement is kept (lease.c), so one slow round
 * trip does not make the estimate worse.  Scripts never call TIME: before
 * Redis 5 a script may not write after it.
 */
#include <stdlib.h>

#include "routing.h"

static relock_status measure(relock_client *c)
{
    uint64_t t0 = relock__mono_ms();
    redisReply *r = relock__commandf(c, NULL, "TIME");
    uint64_t t1 = relock__mono_ms();
    if (!r)
        return c->err.pub.status;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING) {
        relock_status st = RELOCK__BAD_REPLY(c, "TIME", r);
        freeReplyObject(r);
        return st;
    }
    long long server = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    relock__clock_measured(&c->conn.clock, t0, t1, server);
    return RELOCK_OK;
}

relock_status relock__fleet_ms(relock_client *c, long long *now)
{
    if (!c->s.legacy.clock_server) {
        *now = relock__wall_ms();
        return RELOCK_OK;
    }
    if (relock__conn_ensure(c) != RELOCK_OK)
        return c->err.pub.status;
    if (relock__clock_due(&c->conn.clock, relock__mono_ms())) {
        relock_status st = measure(c);
        if (st != RELOCK_OK)
            return st;
    }
    *now = relock__clock_server_ms(&c->conn.clock, relock__mono_ms());
    return RELOCK_OK;
}
