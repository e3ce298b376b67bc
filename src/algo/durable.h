/* Durability's step machine: the WAIT or WAITAOF after a write, and its verdict (durable.c). */
#ifndef RELOCK_DURABLE_H
#define RELOCK_DURABLE_H

#include "engine/engine.h"

typedef struct relock__durable_m {
    relock__mhead h;
    const char *op; /* "acquire", "extend": the words of its messages */
    /* The outcome: how many replicas acknowledged (0 when none could be
     * counted), for relock_client_replicas_acked(). */
    int acked;
} relock__durable_m;

/* Starts m for the write of operation op (a literal) on l. */
void relock__durable_init(relock__durable_m *m, const char *op);
/*
 * One batch, pinned to the write's connection.  RELOCK_OK when enough
 * acknowledged while the lease was valid (l->valid_until, by the feed's
 * mono_ms); RELOCK_EDURABILITY when fewer did, too late, or the connection
 * changed since the write; RELOCK_EUNSUPPORTED when the server lacks the
 * command; RELOCK_EIO when the reply was lost.
 */
relock__step relock__durable_step(void *m, relock_lock *l, const relock__feed *in,
                                  relock__batch *out);

/* An acquire's write was not acknowledged (error kept, status st) and its
 * compare-and-delete ended with rst (its error on c->err): records what the
 * caller reports, st with "; the lock was not kept (deleted)" when the
 * delete worked, else RELOCK_EAMBIGUOUS, and returns its status. */
relock_status relock__durable_undone(relock_client *c, const relock__err *kept, relock_status st,
                                     relock_status rst);

/* Whether durability (WAIT after acquire and extend) is on. */
int relock__durable_on(const relock_client *c);
/* Checks the durability and lock_delay_ms settings against the mode and
 * the connected server: RELOCK_EUNSUPPORTED with the reason on c. */
relock_status relock__durable_check(relock_client *c);

#endif
