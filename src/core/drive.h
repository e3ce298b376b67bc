/*
 * The blocking calls' driver of a single step machine (src/core/pollloop.c):
 * a private poll loop over the operation core (core.h) runs a step machine
 * (engine/engine.h) as an operation of an inner core client until it is
 * done.  The calls that run a machine of their own call it: break,
 * inspect and the owner record (src/api/operator.c, owner.c), an adoption
 * (run_ts.c), one command (relock__command(), routing.h).  The lock
 * operations are not run here: they are whole operations of the core
 * (relock__lock_op(), pollloop.h).
 */
#ifndef RELOCK_CORE_DRIVE_H
#define RELOCK_CORE_DRIVE_H

#include "engine/fan.h"

/*
 * Runs machine m (its head zeroed but for its inputs) with step function
 * fn until it is done, and returns its status (errors on l->c->err).  It
 * is an operation of the one-server runner's inner core client (c->p) on
 * the connection l->key routes to: the server (a quorum's first), the
 * master a Sentinel names, a Cluster node.  The connection's rules are the
 * core's (connection.c, routing.c): redirections, Sentinel's READONLY,
 * the transaction rule, command_timeout_ms, the WAIT's connection.
 */
relock_status relock__drive(relock_lock *l, relock__step_fn fn, void *m);
/* The connection key's machine will run on, connected, logged in and
 * probed now, its facts on c->conn (key NULL: the server the client
 * reports); or the error on c->err. */
relock_status relock__drive_ready(relock_client *c, const char *key);

#endif
