/*
 * Durability as a step machine (durable.c): the WAIT, or WAITAOF, after an
 * acquire or an extend wrote the lock key, and its verdict.  The time a
 * late acknowledgement is judged by comes in the feed, and the connection
 * the write went out on is the driver's to keep (the batch is pinned).
 */
#ifndef RELOCK_DURABLE_H
#define RELOCK_DURABLE_H

#include "engine/engine.h"

typedef struct relock__durable_m {
    relock__mhead h;
    const char *op; /* "acquire", "extend": the words of its messages */
    /* The outcome: how many replicas acknowledged (the count
     * relock_client_replicas_acked() tells), 0 when none could be
     * counted. */
    int acked;
} relock__durable_m;

/* Starts m for the write of operation op (a literal) on l. */
void relock__durable_init(relock__durable_m *m, const char *op);
/*
 * One batch: WAIT durability.replicas durability.timeout_ms (WAITAOF 1
 * replicas timeout_ms with durability.aof), pinned to the write's
 * connection.  Outcome: RELOCK_OK when enough acknowledged while the
 * lease was still valid (l->valid_until, by the feed's mono_ms);
 * RELOCK_EDURABILITY with the count when fewer did, too late, or the
 * connection changed since the write; RELOCK_EUNSUPPORTED when the server
 * lacks the command; RELOCK_EIO when the reply was lost.
 */
relock__step relock__durable_step(void *m, relock_lock *l, const relock__feed *in,
                                  relock__batch *out);

/*
 * An acquire's write was not acknowledged (kept, the error with status
 * st) and the driver then released the lock by compare-and-delete, with
 * outcome rst (its error on c->err): records on c->err what the caller
 * reports, and returns its status: st with "; the lock was not kept
 * (deleted)" when the release worked, RELOCK_EAMBIGUOUS when it failed.
 */
relock_status relock__durable_undone(relock_client *c, const relock__err *kept, relock_status st,
                                     relock_status rst);

/* Whether durability (WAIT after acquire and extend) is on. */
int relock__durable_on(const relock_client *c);
/* Checks the durability and lock_delay_ms settings against the mode and
 * the connected server: RELOCK_EUNSUPPORTED with the reason on c. */
relock_status relock__durable_check(relock_client *c);

#endif
