/*
 * What the algorithms and the services beside them offer the blocking API
 * (src/api/): the modern and quorum algorithm tables (the legacy and
 * bridge ones are compat/'s, compat/compat.h), several servers
 * (quorum.c), waiting (wait.c), durability (durable.c).
 */
#ifndef RELOCK_ALGO_H
#define RELOCK_ALGO_H

#include "routing.h"

extern const relock__algo relock__algo_modern;
extern const relock__algo relock__algo_quorum;

/* Several servers (quorum.c): checks the mode and prepares the servers. */
relock_status relock__quorum_setup(relock_client *c);


/* The generic waiting loop over c->algo->attempt. */
relock_status relock__wait_acquire(relock_lock *l, long long wait_ms);

/* ------------------------------------------------------------------ durability (durable.c) */

/* Whether durability (WAIT after acquire and extend) is on. */
int relock__durable_on(const relock_client *c);
/* Checks the durability and lock_delay_ms settings against the mode and
 * the connected server: RELOCK_EUNSUPPORTED with the reason on c. */
relock_status relock__durable_check(relock_client *c);
/* Before an operation whose write is to be waited for: makes the
 * connection ready (an idle one replaced now, not between the write and
 * the WAIT) and marks it. */
void relock__durable_mark(relock_client *c, relock__wmark *m);
/*
 * After l's write of op ("acquire", "extend") succeeded: WAIT (or
 * WAITAOF) on the connection marked in l->wmark, so that the count covers
 * the write (the durability machine, durable.h, on the blocking driver).
 * RELOCK_OK when durability.replicas acknowledged within timeout_ms;
 * RELOCK_EDURABILITY with the count in the message and in
 * c->replicas_acked when fewer did, or when the connection changed since
 * the mark (the count could not cover the write); RELOCK_EUNSUPPORTED when
 * the server lacks the command; RELOCK_EIO when the connection failed.
 */
relock_status relock__durable_wait(relock_lock *l, const char *op);

#endif
