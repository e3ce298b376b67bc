/*
 * The blocking drivers (src/core/pollloop.c, src/core/drive.c): they run a
 * step machine (engine/engine.h) or a fan machine (engine/fan.h) on the
 * client's connections until it is done.  The machines' blocking runs
 * (run.c, run_ts.c) and the public calls that run a machine themselves
 * (src/api/operator.c, owner.c) call them.
 */
#ifndef RELOCK_CORE_DRIVE_H
#define RELOCK_CORE_DRIVE_H

#include "engine/fan.h"

/*
 * The blocking driver: runs machine m (its head zeroed but for its inputs)
 * with step function fn until it is done, and returns its status (errors
 * on l->c->err).  One server: an operation of the operation core on a
 * poll loop (pollloop.c, relock__poll_drive()), Sentinel and Cluster
 * included.  Otherwise (a quorum client's calls on its first server that
 * are not fan machines) on the client's own connection (drive.c, as
 * relock__drive_conn()): each batch goes out through
 * conn.c as every command did before the engine: routing, Cluster
 * redirections, Sentinel's READONLY, stale connections, command_timeout_ms.
 * A batch with in_txn starts a transaction (relock__txn_begin) unless one
 * is open; a batch without it ends the open one after its replies.
 */
relock_status relock__drive(relock_lock *l, relock__step_fn fn, void *m);
/* The blocking driver on the client's own connection (c->conn), whatever
 * the client: the probe of that connection (relock__probe). */
relock_status relock__drive_conn(relock_lock *l, relock__step_fn fn, void *m);
/* The connection key's machine will run on, connected and probed now
 * (its facts on c->conn); key NULL: the client's server. */
relock_status relock__drive_ready(relock_client *c, const char *key);

/*
 * The blocking quorum calls: runs fan machine m (initialised) over the
 * client's quorum until it is done, and returns its status (errors on
 * l->c->err).  A poll loop over the operation core's fan-out (pollloop.c): the
 * machine runs as an operation of an inner core client, whose new
 * connections are sent AUTH, SELECT and SCRIPT LOAD of the quorum's
 * scripts ahead of the first batch; replies owed to earlier rounds are
 * read and dropped before a server's new ones (decision 44).
 */
relock_status relock__fan_drive(relock_lock *l, relock__fan_fn fn, void *m);

#endif
