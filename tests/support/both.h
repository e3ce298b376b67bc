/*
 * both: one scenario run through either entry point of the library, the
 * blocking API or the asynchronous API on a loop of its own (libevent, or
 * libuv for the entry "async-libuv" where the tests were built with it).
 * Each call returns the status the operation ended with and keeps its
 * message for both_error(), so that a scenario asserts the same things of
 * both; an asynchronous operation is run to its end on the loop (bounded
 * to 60 s, a cmocka failure beyond).  A test program that links it picks
 * the entry point from its command line (both_entry_from_args), so that
 * CMake registers one ctest per entry point.
 */
#ifndef RELOCK_TEST_BOTH_H
#define RELOCK_TEST_BOTH_H

#include <stddef.h>

#include "relock.h"
#include "relock_async.h"

typedef enum { BOTH_BLOCKING, BOTH_ASYNC } both_entry;

/* The program's first argument: "blocking" (also when there is none),
 * "async" or "async-libuv" (BOTH_ASYNC, every asynchronous client of the
 * program on a libuv loop); anything else, or "async-libuv" where the
 * tests were built without libuv, exits the program with status 2. */
both_entry both_entry_from_args(int argc, char **argv);
/* "blocking", "async" or "async-libuv". */
const char *both_entry_name(both_entry e);

typedef struct both_client both_client;

/* relock_connect() or relock_async_new() with cfg.  *out is set even when
 * the status is not RELOCK_OK, for both_error(); free it with
 * both_free(). */
relock_status both_connect(both_entry e, const relock_config *cfg, both_client **out);
/* both_connect() of a client of next's entry that shares next's loop
 * (the asynchronous entry), so that one turn runs the operations of both;
 * free it before next. */
relock_status both_connect_beside(both_client *next, const relock_config *cfg,
                                  both_client **out);
/* relock_connect_file() (the asynchronous entry loads the file into a
 * configuration first). */
relock_status both_connect_file(both_entry e, const char *path, both_client **out);
void both_free(both_client *c);
both_entry both_client_entry(const both_client *c);

/* The message of the last call on c that did not return RELOCK_OK. */
const char *both_error(const both_client *c);
/* That call's relock_error.server (the server's error text, or ""). */
const char *both_error_server(const both_client *c);
/* relock_client_replicas_acked() or relock_async_replicas_acked(): how
 * many replicas acknowledged the last acquire or extend, -1 without WAIT. */
int both_replicas_acked(const both_client *c);
relock_mode both_mode(const both_client *c);
const char *both_mode_reason(const both_client *c);

relock_status both_acquire(both_client *c, const char *name, long long ttl_ms, long long wait_ms,
                           relock_lock **out);
relock_status both_try_acquire(both_client *c, const char *name, long long ttl_ms,
                               relock_lock **out);
/* l was won through c. */
relock_status both_extend(both_client *c, relock_lock *l, long long ttl_ms);
relock_status both_release(both_client *c, relock_lock *l);

/* relock_scan_keys() or relock_async_scan(): *out the result (NULL when
 * there is none), the caller's to free. */
relock_status both_scan(both_client *c, const char *match, relock_scan_key_fn fn, void *arg,
                        relock_scan_result **out);

/* Renewal of l (won through c) by relock_keep() or relock_async_keep():
 * on_lost (may be NULL) is called with the status once the renewals find
 * the lock lost, from a renewal thread of the blocking entry or from the
 * loop of the asynchronous one. */
typedef void (*both_lost_fn)(relock_status why, void *arg);
relock_status both_keep(both_client *c, relock_lock *l, both_lost_fn on_lost, void *arg);
/* relock_keep_stop() or relock_async_keep_stop(). */
relock_status both_keep_stop(both_client *c, relock_lock *l);

/* For checks of what an asynchronous operation did around its callback:
 * fn is called with BOTH_STARTED once the call that starts an operation
 * returned (the loop not yet run), and with BOTH_CALLBACK first thing in
 * the operation's callback; never for the blocking entry.  fn NULL
 * removes it. */
typedef enum { BOTH_STARTED, BOTH_CALLBACK } both_phase;
void both_on_phase(both_client *c, void (*fn)(both_phase phase, void *arg), void *arg);

/* Runs c's loop for ms (the asynchronous entry: owed replies read, late
 * clean-ups sent); sleeps for the blocking one. */
void both_idle(both_client *c, long ms);

/* For the parts of a scenario only one entry runs: the client underneath
 * (NULL for the other entry), and one turn of c's loop, which waits 20 ms
 * at most (nothing for the blocking entry). */
relock_client *both_sync(both_client *c);
relock_async *both_async(both_client *c);
void both_turn(both_client *c);
/* relock_async_pending() (0 for the blocking entry). */
long both_pending(const both_client *c);
/* The callbacks of c's operations called after the first, at any time
 * since (0 for the blocking entry). */
int both_late_callbacks(const both_client *c);
/* Frees the asynchronous client now (its pending operations end
 * cancelled, their callbacks called), the loop kept for both_free(),
 * which then checks that nothing of the client is left on it. */
void both_free_async(both_client *c);

/* Runs the scenarios both entries share and, for the blocking entry,
 * those it alone runs, as one cmocka group (the servers start once);
 * the group's exit status. */
struct CMUnitTest;
typedef int (*both_fixture)(void **state);
int both_run(both_entry e, const struct CMUnitTest *shared, size_t nshared,
             const struct CMUnitTest *alone, size_t nalone, both_fixture setup,
             both_fixture teardown);
/* both_run() with the scenarios each entry alone runs: the shared ones,
 * then the entry's own, as one group. */
int both_run_each(both_entry e, const struct CMUnitTest *shared, size_t nshared,
                  const struct CMUnitTest *blocking, size_t nblocking,
                  const struct CMUnitTest *async, size_t nasync, both_fixture setup,
                  both_fixture teardown);

#endif
