/*
 * The fleet's clock for the timestamp modes: ours, or (legacy.clock =
 * "server") the server's TIME, kept as an offset from CLOCK_MONOTONIC,
 * never from the wall clock, whose NTP step would shift every later
 * decision (and take live locks over).  The offset is measured on a
 * connection's first use, every RELOCK__CLOCK_REMEASURE_MS of use, and
 * when a machine asks for a fresh reading (RELOCK__FLEET_FRESH: before a
 * lease is written or taken over, so a step of the server's clock is
 * never met with an older estimate); lease.c keeps the more certain one.
 * Scripts never call TIME: before Redis 5 a script may not write after it.
 */
#include <stdlib.h>

#include "clock.h"

void relock__clock_init(relock__clock_m *m, int in_txn)
{
    *m = (relock__clock_m){.h.hint_ms = -1, .in_txn = in_txn};
}

relock__step relock__clock_step(void *mv, relock_lock *l, const relock__feed *in,
                                relock__batch *out)
{
    relock__clock_m *m = mv;
    relock_client *c = l->c;
    if (m->h.pc == 0) {
        m->t0 = in->mono_ms;
        return relock__send_words(&m->h, out, 1, m->in_txn, 1, "TIME");
    }
    if (in->fault != RELOCK__FAULT_NONE || in->nreply < 1)
        return relock__done(&m->h, relock__fault_fail(c, in));
    const redisReply *r = in->reply[0];
    if (!relock__reply_is(r, "a[bb]"))
        return relock__done(&m->h, RELOCK__BAD_REPLY(c, "TIME", r));
    long long server = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    relock__clock_measured(&c->conn.clock, m->t0, in->mono_ms, server);
    return relock__done(&m->h, RELOCK_OK);
}
