/*
 * What the blocking runs of the algorithms offer the blocking API
 * (src/api/): the algorithm tables (run.c: modern and quorum; run_ts.c:
 * legacy and bridge, the timestamp algorithms of compat/), several servers
 * (run.c), waiting (wait.c), durability (durable.h's checks, run.c's
 * WAIT).
 */
#ifndef RELOCK_ALGO_H
#define RELOCK_ALGO_H

#include "engine/waitplan.h"
#include "durable.h"
#include "routing.h"

extern const relock__algo relock__algo_modern;
extern const relock__algo relock__algo_quorum;
extern const relock__algo relock__algo_legacy;
extern const relock__algo relock__algo_bridge;

/* Several servers (run.c, the quorum): checks the mode and prepares the
 * servers. */
relock_status relock__quorum_setup(relock_client *c);

/* Raises a whole-tag key's fence counter to its earlier one: the carry's
 * machine (fence.h) on the blocking driver. */
relock_status relock__fence_seed(relock_lock *l);

/* The wait planner's input (waitplan.h) as far as the client's settings
 * and lock l give it, with fresh random bits: both waiters (wait.c, and
 * the asynchronous one in notice.c) fill in the attempt's own fields. */
relock__wait_in relock__wait_in_of(relock_lock *l);

/* The generic waiting loop over c->algo->attempt. */
relock_status relock__wait_acquire(relock_lock *l, long long wait_ms);

/* ------------------------------------------------------------------ durability (durable.c) */

/* Before an operation whose write is to be waited for: makes the
 * connection ready (an idle one replaced now, not between the write and
 * the WAIT) and marks it. */
void relock__durable_mark(relock_lock *l);
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

/* The algorithm for c's mode, once its connection is probed (design.md
 * §4.1; src/core/mode.c). */
relock_status relock__select_mode(relock_client *c);

#endif
