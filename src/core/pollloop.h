/*
 * The blocking API's private poll loops over the operation core
 * (pollloop.c): a quorum's (c->q) and the one-server runner's (c->p).
 */
#ifndef RELOCK_CORE_POLL_H
#define RELOCK_CORE_POLL_H

#include "handle.h"
#include "engine/engine.h"

/* Prepares c->q (the inner core client is made at the first call); 0, or
 * -1 out of memory. */
int relock__qpoll_new(relock_client *c);
/* Closes the quorum's connections and frees c->q; accepts none. */
void relock__qpoll_free(relock_client *c);

/*
 * relock_acquire(), relock_release() and relock_extend() as the
 * asynchronous client's whole operations, run on c's poll loop until they
 * end: ms is an acquire's wait bound, an extend's TTL (0 for a release).
 * An acquire that fails frees l; its status, with the error on c->err.
 */
enum { RELOCK__OP_ACQUIRE = 1, RELOCK__OP_RELEASE, RELOCK__OP_EXTEND };
relock_status relock__lock_op(relock_lock *l, int kind, long long ms);

/*
 * relock_keep()'s thread (src/api/renew.c): renews l, a lock of that
 * thread's own client, with the core's renewal (renewal.c) on the
 * client's poll loop, until turn() asks to stop or the lock is lost, with
 * no renewal in flight.  On the thread: turn(arg, busy) before each turn
 * of the loop (busy: a renewal is in flight; it may block, and returns
 * non-zero to stop), lost(arg, why) once when the lock is lost; wake_fd,
 * readable, ends a turn early.
 */
typedef struct relock__keep_hooks {
    int (*turn)(void *arg, int busy);
    void (*lost)(void *arg, relock_status why);
    void *arg;
    int wake_fd;
} relock__keep_hooks;
void relock__poll_keep(relock_lock *l, const relock__keep_hooks *h);

/* The core's connection key routes to (for tests). */
struct aconn;
const struct aconn *relock__poll_conn(relock_client *c, const char *key);
/* The server key routes to (a Sentinel's master, a Cluster node) as the
 * core knows it: c->conn.srv before the first call. */
const relock__server *relock__poll_server(relock_client *c, const char *key);
/* relock_scan_keys() over the core (relock_async_scan()'s operation):
 * its result in *out, its error on c->err. */
relock_status relock__poll_scan(relock_client *c, const char *match, relock_scan_key_fn fn,
                                void *arg, relock_scan_result **out);

#endif
