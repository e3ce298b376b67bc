/*
 * The blocking calls' driver of a single step machine (pollloop.c): break,
 * inspect and the owner record (src/api/), an adoption (mode.c), one
 * command (relock__command(), routing.h).
 */
#ifndef RELOCK_CORE_DRIVE_H
#define RELOCK_CORE_DRIVE_H

#include "engine/fan.h"

/*
 * Runs machine m (its head zeroed but for its inputs) with step function
 * fn until it is done, and returns its status (errors on l->c->err), on
 * the one-server runner's connection l->key routes to (a quorum's first
 * server, a Sentinel's master, a Cluster node).
 */
relock_status relock__drive(relock_lock *l, relock__step_fn fn, void *m);
/* The connection key's machine will run on, connected, logged in and
 * probed now, its facts on c->conn (key NULL: the server the client
 * reports); or the error on c->err. */
relock_status relock__drive_ready(relock_client *c, const char *key);

#endif
