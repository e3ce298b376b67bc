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
 * key, done only while the key and the fence hold what the request says;
 * after a delete it tells waiters on the release channel.
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
 */
typedef struct relock__cas {
    int pc;
    /* the request */
    int script; /* by script (EVAL), else by WATCH */
    const char *plain;
    const char *expected; /* the key's value required; NULL: absent (a SETNX) */
    long long fence;      /* the fence counter required; 0: not compared */
    int require_ttl;      /* the key must have a TTL */
    const char *newv;
    long long px, gc; /* a PEXPIRE (ms) or an EXPIRE (s) to set, or 0 */
    int incr;         /* increment the fence */
    /* the outcome: st, RELOCK_OK or an error recorded on c->err */
    relock_status st;
    int ambiguous;                 /* the write may have run (a lost reply to EXEC or the script) */
    int done;                      /* written (plain: SETNX answered 1) */
    long long fence_out;           /* the fence after an increment, or the waiters a delete told */
    char found[RELOCK__VALUE_MAX]; /* seen on a mismatch, or what GETSET replaced; "" absent */
    int beaten;                    /* EXEC refused: the key or the fence changed under WATCH */
    int old_nil;                   /* plain: the key was absent */
    relock__value old_v;           /* plain: what GETSET replaced, classified */
    long long breaks;              /* plain: the break counter; -1 unreadable */
    int drop;                      /* DISCARD refused too: the head's in_txn is left set */
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
