/*
 * The blocking API's quorum calls over the operation core (pollloop.c): a
 * quorum client's private poll loop, made by relock_connect() and freed
 * by relock_client_free().
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
/* Closes the one-server runner's connections and frees c->p. */
void relock__qpoll_free_single(relock_client *c);
/* relock__fan_drive() (drive.h) runs on this loop. */

/*
 * One server (directly, through Sentinel, or a Redis Cluster): the blocking
 * calls run their step machines as operations of an inner core client
 * (c->p, made at the first use) on a loop of its own, as the quorum's do.
 */
int relock__poll_single(const relock_client *c);
/* The connection key routes to, connected, logged in and probed now
 * (relock_connect(), and before a machine that chooses its way by the
 * server's capabilities), its facts on c->conn; or the error on c->err. */
relock_status relock__poll_ready(relock_client *c, const char *key);
/* The server key routes to (a Sentinel's master, a Cluster node) as the
 * core knows it: c->conn.srv when c does not run over the core. */
const relock__server *relock__poll_server(relock_client *c, const char *key);
/* relock_scan_keys() over the core (relock_async_scan()'s operation):
 * its result in *out, its error on c->err. */
relock_status relock__poll_scan(relock_client *c, const char *match, relock_scan_key_fn fn,
                                void *arg, relock_scan_result **out);
/* Marks the connection l's next write goes out on (relock__durable_mark). */
void relock__poll_mark(relock_lock *l);
/* relock__drive() (drive.h) over the core. */
relock_status relock__poll_drive(relock_lock *l, relock__step_fn fn, void *m);
/* relock__command() over the core: one command, its reply or NULL (the
 * error on c->err; *sent: it may have run). */
redisReply *relock__poll_command(relock_client *c, int *sent, int argc, const char **argv,
                                 const size_t *argvlen);

#endif
