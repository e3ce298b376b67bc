/*
 * both: one scenario run through either entry point of the library, the
 * blocking API or the asynchronous API on a libevent loop of its own.
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

typedef enum { BOTH_BLOCKING, BOTH_ASYNC } both_entry;

/* The program's first argument: "blocking" (also when there is none) or
 * "async"; anything else exits the program with status 2. */
both_entry both_entry_from_args(int argc, char **argv);
const char *both_entry_name(both_entry e);

typedef struct both_client both_client;

/* relock_connect() or relock_async_new() with cfg.  *out is set even when
 * the status is not RELOCK_OK, for both_error(); free it with
 * both_free(). */
relock_status both_connect(both_entry e, const relock_config *cfg, both_client **out);
/* relock_connect_file() (the asynchronous entry loads the file into a
 * configuration first). */
relock_status both_connect_file(both_entry e, const char *path, both_client **out);
void both_free(both_client *c);
both_entry both_client_entry(const both_client *c);

/* The message of the last call on c that did not return RELOCK_OK. */
const char *both_error(const both_client *c);
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

/* Runs the scenarios both entries share and, for the blocking entry,
 * those it alone runs, as one cmocka group (the servers start once);
 * the group's exit status. */
struct CMUnitTest;
typedef int (*both_fixture)(void **state);
int both_run(both_entry e, const struct CMUnitTest *shared, size_t nshared,
             const struct CMUnitTest *alone, size_t nalone, both_fixture setup,
             both_fixture teardown);

#endif
