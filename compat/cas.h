/*
 * The compare-and-set / compare-and-delete of a lock key with its fence
 * counter (cas.c): a step sub-machine that the legacy and bridge machines
 * run inside their own for acquire takeover, release and extend.  No I/O,
 * no clock.  Its batches follow the rules of compat/ts.h.
 */
#ifndef RELOCK_CAS_H
#define RELOCK_CAS_H

#include "engine/engine.h"

/* ------------------------------------------------------------ compare-and-set */

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
 * Outcome: st RELOCK_OK with done (1 written), fence_out (the fence after
 * an increment, or the waiters told by a delete), found (the value seen
 * on a mismatch, "" absent) and beaten (EXEC refused: the key or the fence
 * changed under WATCH); or st an error (recorded on c->err), ambiguous
 * when the write may have run (a lost reply to EXEC or to the script).
 */
typedef struct relock__cas {
    int pc;
    /* the request */
    int script; /* by script (EVAL), else by WATCH */
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
    /* EXEC and then DISCARD were refused: the server may still hold the
     * transaction open, so the connection must be dropped (the caller
     * sets its head's in_txn). */
    int drop;
    /* state */
    int by_eval;
    char chan[RELOCK__KEY_MAX];
} relock__cas;

/* Fills the first batch of the compare-and-set c (its request set, the
 * rest zeroed by the caller). */
relock__step relock__cas_start(relock__cas *c, relock_lock *l, relock__batch *out);
/* One step: SEND with the next batch, or DONE with the outcome in c. */
relock__step relock__cas_step(relock__cas *c, relock_lock *l, const relock__feed *in,
                                 relock__batch *out);

/* A transaction's EXEC was refused: out becomes DISCARD alone. */
void relock__cas_discard(relock__batch *out);
/* Whether DISCARD's answer (in) leaves the transaction open for all we
 * know, so that the connection must be dropped. */
int relock__cas_discard_failed(const relock__feed *in);

#endif
