/*
 * The writes of the timestamp algorithms (cas.c): a step sub-machine that
 * the legacy and bridge machines run inside their own.  No I/O, no clock.
 * Its batches follow the rules of compat/ts.h.
 */
#ifndef RELOCK_CAS_H
#define RELOCK_CAS_H

#include "engine/engine.h"

/*
 * A compare-and-set (newv) or compare-and-delete (newv NULL) of the lock
 * key: done only while the key holds expected (NULL: while it is absent,
 * a SETNX), the fence counter equals fence (0: not compared), and, with
 * require_ttl, the key has a TTL.  Optionally sets a PEXPIRE (px) or an
 * EXPIRE (gc), increments the fence (incr), and after a delete tells
 * waiters on the release channel.
 *
 *   EVAL:  EVALSHA cas (EVAL on NOSCRIPT)                        [CAS_SCRIPT]
 *   WATCH: WATCH key [fence]; GET key; [GET fence]               [CAS_READ]
 *          -> mismatch: UNWATCH                                  [CAS_UNWATCH]
 *          -> match:    MULTI                                    [CAS_MULTI]
 *                       SET|DEL; [EXPIRE]; [INCR]; [PUBLISH]     [CAS_QUEUE]
 *                       EXEC                                     [CAS_EXEC]
 *                       (refused: DISCARD)                       [CAS_DISCARD]
 *
 * Or, with plain set, 2.0's fenced write (no WATCH, no EVAL): from MULTI,
 * `plain key value` (SETNX or GETSET of l->value), INCR fence and GET of the
 * break counter queued.  The INCR runs whatever plain did (2.0 cannot make
 * it conditional).
 *
 * Outcome: st RELOCK_OK with done (1 written; plain: SETNX answered 1),
 * fence_out (the fence after an increment, or the waiters told by a
 * delete), found (the value seen on a mismatch, or that GETSET replaced;
 * "" absent) and beaten (EXEC refused: the key or the fence changed under
 * WATCH); plain also old_nil, old_v and breaks (-1 unreadable); or st an
 * error (recorded on c->err), ambiguous when the write may have run (a
 * lost reply to EXEC or to the script).
 */
typedef struct relock__cas {
    int pc;
    /* the request */
    int script; /* by script (EVAL), else by WATCH */
    const char *plain;
    const char *expected;
    long long fence;
    int require_ttl;
    const char *newv;
    long long px, gc;
    int incr;
    /* the outcome */
    relock_status st;
    int ambiguous;
    int done;
    long long fence_out;
    char found[RELOCK__VALUE_MAX];
    int beaten;
    int old_nil;
    relock__value old_v;
    long long breaks;
    int drop; /* DISCARD refused too: the head's in_txn is left set */
    /* state */
    int by_eval;
    char chan[RELOCK__KEY_MAX];
    char bkey[RELOCK__KEY_MAX];
    const char *queued[4]; /* the commands queued, whose +QUEUED is checked */
    int nqueued;
} relock__cas;

/* Fills the first batch of c (its request set, the rest zeroed by the
 * caller), run as part of the machine whose head is h. */
relock__step relock__cas_start(relock__cas *c, relock__mhead *h, relock_lock *l,
                               relock__batch *out);
/* One step: SEND with the next batch, or DONE with the outcome in c. */
relock__step relock__cas_step(relock__cas *c, relock__mhead *h, relock_lock *l,
                              const relock__feed *in, relock__batch *out);

/* A counter as GET returns it (nil: 0); -1 for anything else. */
long long relock__ts_counter(const redisReply *r);

#endif
