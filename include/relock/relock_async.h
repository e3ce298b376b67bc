/*
 * relock's asynchronous API: the same locks as relock.h, for programs
 * built on an event loop (libevent, libuv, ...).  Nothing here blocks:
 * every operation is started by a call that returns at once and completes
 * through a callback run by the program's loop, with the statuses and the
 * error details of the blocking API.
 *
 * The program hands relock a small interface to its event loop,
 * relock_async_loop, as curl's multi interface asks for socket and timer
 * callbacks: relock asks the loop to watch a descriptor for reading,
 * writing, both or neither, and to start and stop one-shot timers
 * (backoff, the holder's known expiry, renewals, command timeouts); the
 * loop tells relock that a descriptor is ready with
 * relock_async_socket_action().  relock does its own reads and writes.
 * relock_async_libevent.h and relock_async_libuv.h fill the interface for
 * those loops in a few dozen lines each; docs/api.md shows how to write
 * one for another loop.  Nothing here names the Redis client library
 * relock uses inside: a program links relock and its loop library only.
 *
 * Threads: a client and its locks belong to the thread running the loop.
 * Callbacks run from the loop, never from within the call that started the
 * operation (except relock_async_free(), below).
 *
 * SIGPIPE: relock writes to its connections from within
 * relock_async_socket_action(), with SIGPIPE blocked in the calling thread
 * for the write: a write to a connection the server closed fails with
 * EPIPE (the connection ends, its operations as after any lost connection)
 * instead of ending the process.  A SIGPIPE that write raised is taken
 * back before the signal mask is restored; one pending before the call is
 * left pending.  relock changes no signal disposition, so a program may
 * leave SIGPIPE at its default action.
 */
#ifndef RELOCK_ASYNC_H
#define RELOCK_ASYNC_H

#include <stddef.h>

#include "relock.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct relock_async relock_async;

/* One descriptor relock asks the loop to watch (for
 * relock_async_socket_action()). */
typedef struct relock_async_socket relock_async_socket;

/* The events of a descriptor: what the loop is asked to watch, and what it
 * reports.  RELOCK_IO_REMOVE is asked only: relock is done with the
 * descriptor, which is closed right after the call. */
#define RELOCK_IO_READ 1
#define RELOCK_IO_WRITE 2
#define RELOCK_IO_REMOVE 4

/* The version of relock_async_loop this header describes: 2 since watch
 * replaced the attach of relock 0.3, which took the Redis client
 * library's own connection. */
#define RELOCK_ASYNC_LOOP_VERSION 2

/*
 * What relock needs from the program's event loop.  size is
 * sizeof(relock_async_loop) and version RELOCK_ASYNC_LOOP_VERSION as the
 * program was built (the helpers set both; a program that fills the
 * struct itself sets them first), so that fields can be added at the end:
 * relock reads no further than size, and takes a field the program does
 * not have as NULL.  relock_async_new() refuses (RELOCK_EINVAL) an
 * interface of another version or smaller than RELOCK_ASYNC_LOOP_SIZE_2,
 * among them every one built against relock 0.3 (its attach took the
 * Redis client library's connection).  data is passed back to each function.
 *   watch:       from now on, watch fd for events: RELOCK_IO_READ,
 *                RELOCK_IO_WRITE, both, or 0 (neither, but keep it); or
 *                RELOCK_IO_REMOVE: stop watching fd and let go of
 *                everything kept for it (s is invalid after this call).
 *                When fd is ready, the loop calls
 *                relock_async_socket_action(s, what is ready).  *sockp is
 *                the loop's own pointer for this descriptor: NULL at the
 *                first call for s, and as the loop left it at each later
 *                one.  Returns 0 on success; a failure of the first call
 *                for s fails that connection ("cannot attach to the loop":
 *                the loop keeps nothing for s, and hears of it no more);
 *                later results are not looked at (a loop that cannot watch
 *                should not happen).  Called from within relock's calls,
 *                relock_async_socket_action() among them.
 *   timer_start: calls fn(arg) once, from the loop, after ms milliseconds
 *                (0: at the next turn); returns a handle, NULL when out of
 *                memory.  The handle belongs to the loop interface, which
 *                frees it after fn was called or when it is stopped.
 *   timer_stop:  stops a timer that has not fired; relock never stops one
 *                that fired.
 */
typedef struct relock_async_loop {
    size_t size;
    int version;
    void *data;
    int (*watch)(void *data, relock_async_socket *s, int fd, int events, void **sockp);
    void *(*timer_start)(void *data, long long ms, void (*fn)(void *arg), void *arg);
    void (*timer_stop)(void *data, void *timer);
} relock_async_loop;
/* The smallest size relock_async_new() takes: up to timer_stop, the
 * fields of version 2 (fields added later come after it). */
#define RELOCK_ASYNC_LOOP_SIZE_2                                                                   \
    (offsetof(relock_async_loop, timer_stop) + sizeof(void (*)(void *, void *)))

/* An operation in flight (for relock_async_cancel()). */
typedef struct relock_async_op relock_async_op;

/*
 * An operation's outcome.  st: as the blocking call's status.  l: the lock
 * the operation was about: for an acquire, the new handle on RELOCK_OK
 * (the program owns it: relock_lock_free() it after its release) and NULL
 * otherwise; for release and extend, the lock passed (NULL when it was
 * freed meanwhile).  err: the detail, valid during the callback only.
 */
typedef void (*relock_async_fn)(relock_async *a, relock_status st, relock_lock *l,
                                const relock_error *err, void *arg);
/* A kept lock was lost (RELOCK_LOST, or the error that outlasted its
 * validity); called once, from the loop.  It may call relock functions. */
typedef void (*relock_async_lost_fn)(relock_async *a, relock_lock *l, relock_status why,
                                     const relock_error *err, void *arg);

/*
 * A new client of cfg's server (cfg is copied) on the given loop (copied).
 * It connects, logs in and probes the server (docs/design.md §3) without blocking;
 * operations started meanwhile wait for the probe, and fail with its error
 * if it fails.  With several servers (a quorum, modern values only) there
 * is no probe: each server is connected when an operation first needs it.
 * With Sentinel it first finds the master through the sentinels; on a
 * Redis Cluster it follows MOVED, ASK and TRYAGAIN (docs/api.md).
 * RELOCK_EINVAL for a loop whose size is below RELOCK_ASYNC_LOOP_SIZE_2,
 * whose version is not RELOCK_ASYNC_LOOP_VERSION, or that lacks a
 * function (then *out is NULL).  *out is set whenever memory allows, also on
 * failure (then relock_async_error() tells why); free it with
 * relock_async_free().  RELOCK_EUNSUPPORTED with a quorum for what the
 * blocking client refuses there (a mode other than modern, durability,
 * lock_delay_ms).  Durability, owner_info and legacy.clock = "server"
 * behave as in the blocking API (the same step machines run on the loop);
 * a quorum writes no owner record, as the blocking client.  The event
 * callback of cfg (relock_config_set_event_fn()) is told what the blocking
 * API tells it, at the same points, from the loop: acquired when an
 * acquire won (waited_ms: since relock_async_acquire() was called), before
 * its callback; renewed, renew_failed and lost by relock_async_keep()'s
 * renewals (lost before on_lost); released when a release succeeded,
 * before its callback.
 */
RELOCK_EXTERN relock_status relock_async_new(const relock_config *cfg,
                                             const relock_async_loop *loop, relock_async **out);

/*
 * Frees the client.  Operations still in flight end first: each callback
 * is called exactly once, from within this call, with RELOCK_ECANCELED when
 * nothing it sent may have changed the server (it was waiting, or not yet
 * sent), or RELOCK_EAMBIGUOUS when a write of it was sent and not
 * answered (an acquire may then hold the lock until its TTL ends).  Kept
 * locks stop being renewed (their lost callbacks are not called).  Lock
 * handles stay valid for relock_lock_free() and the accessors.  The
 * callbacks must not start operations on this client.  Allowed from any
 * callback of this client (its memory goes when that callback returns).
 * Accepts NULL.
 */
RELOCK_EXTERN void relock_async_free(relock_async *a);

/* The detail of the last failing call on a (a start refused, or the
 * connection's probe failed). */
RELOCK_EXTERN const relock_error *relock_async_error(const relock_async *a);
/* The mode in use once the probe ended (RELOCK_MODE_AUTO before), and the
 * reason for it. */
RELOCK_EXTERN relock_mode relock_async_mode(const relock_async *a);
RELOCK_EXTERN const char *relock_async_mode_reason(const relock_async *a);

/*
 * Starts acquiring NAME for ttl_ms (0: the configured ttl_ms), waiting at
 * most wait_ms (0 tries once, RELOCK_WAIT_FOREVER, RELOCK_WAIT_DEFAULT),
 * as relock_acquire().  Waiting uses the loop's timers (backoff, the
 * holder's known end) and release notices on a second connection.
 * RELOCK_OK: started, cb will be called exactly once, and *op (if op is
 * not NULL) identifies the operation until cb is called.  Anything else:
 * nothing started, cb is never called, the detail is relock_async_error().
 */
RELOCK_EXTERN relock_status relock_async_acquire(relock_async *a, const char *name, long long ttl_ms,
                                                 long long wait_ms, relock_async_fn cb, void *arg,
                                                 relock_async_op **op);
/* relock_async_acquire() with wait_ms 0. */
RELOCK_EXTERN relock_status relock_async_try_acquire(relock_async *a, const char *name,
                                                     long long ttl_ms, relock_async_fn cb, void *arg,
                                                     relock_async_op **op);

/*
 * Cancels a pending acquire.  Its callback is called once, from the loop:
 * RELOCK_ECANCELED when the lock is not held by it (an attempt in flight
 * that won is undone by a release first), or RELOCK_EAMBIGUOUS when an
 * attempt's write may have run and could not be undone (the lock may stay
 * held until its TTL ends).  An acquire that completed before the cancel
 * took effect keeps its outcome.  RELOCK_EINVAL for NULL; cancelling twice
 * is harmless.
 */
RELOCK_EXTERN relock_status relock_async_cancel(relock_async_op *op);

/*
 * Release and extend, as relock_release() and relock_extend(), for a lock
 * acquired through this client.  One operation at a time per lock:
 * RELOCK_EINVAL while another is in flight on it (a release during a
 * renewal's extend waits for it instead), and for an extend while the lock
 * is kept.  A release stops the renewal.  relock_lock_free() with one in
 * flight is allowed: the handle goes when it ends, and cb gets a NULL lock.
 * Same return convention as relock_async_acquire().
 */
RELOCK_EXTERN relock_status relock_async_release(relock_lock *l, relock_async_fn cb, void *arg);
RELOCK_EXTERN relock_status relock_async_extend(relock_lock *l, long long ttl_ms, relock_async_fn cb,
                                                void *arg);

/*
 * Renewal by the loop's timers: extends l every third of its ttl (sooner
 * while the validity left is shorter: never later than half of it) until
 * relock_async_keep_stop(), relock_async_release() or relock_lock_free().
 * on_lost is called once if the lock is lost (taken, deleted, or its
 * validity ran out before a renewal succeeded: then at the validity's end,
 * even while a renewal waits for the server; a failed renewal is retried
 * every tenth of the ttl until then).  relock_async_keep_stop()
 * returns RELOCK_OK, or RELOCK_LOST when the renewals found it lost.
 */
RELOCK_EXTERN relock_status relock_async_keep(relock_lock *l, relock_async_lost_fn on_lost,
                                              void *arg);
RELOCK_EXTERN relock_status relock_async_keep_stop(relock_lock *l);

/* A scan's outcome: st and err as relock_async_fn's; r the result, also
 * on failure whenever memory allowed (then not complete), NULL otherwise:
 * the program's, to free with relock_scan_result_free(). */
typedef void (*relock_async_scan_fn)(relock_async *a, relock_status st, relock_scan_result *r,
                                     const relock_error *err, void *arg);

/*
 * relock_scan_keys() on the loop: the same walk (every master of a Redis
 * Cluster in turn), counts, verdict and errors, fn (may be NULL) told of
 * each key as it is counted (it must not call relock functions on a),
 * then cb called once with the result.  Runs also when the client's mode
 * was refused (the probe itself succeeded), as relock_scan() does.
 * RELOCK_EUNSUPPORTED with several servers (scan each with its own URL;
 * relock_scan() walks the first).  Same return convention as
 * relock_async_acquire(); a bad pattern (RELOCK_EINVAL) starts nothing.
 */
RELOCK_EXTERN relock_status relock_async_scan(relock_async *a, const char *match,
                                              relock_scan_key_fn fn, void *fn_arg,
                                              relock_async_scan_fn cb, void *arg);

/* Operations started and not yet completed (their callbacks not called). */
RELOCK_EXTERN long relock_async_pending(const relock_async *a);
/* With durability: in the callback of an acquire or an extend (and until
 * the next one completes), how many replicas acknowledged its write; -1
 * when it sent no WAIT or WAITAOF. */
RELOCK_EXTERN int relock_async_replicas_acked(const relock_async *a);

/*
 * The loop tells relock that s's descriptor is ready: events is
 * RELOCK_IO_READ, RELOCK_IO_WRITE or both (an error on the descriptor is
 * reported as RELOCK_IO_READ: the read finds it, maybe only after replies
 * queued ahead of it, so the loop goes on watching the descriptor as last
 * told).  relock reads, then writes (SIGPIPE, above), and runs what
 * follows: callbacks, and watch
 * calls for this and other descriptors, RELOCK_IO_REMOVE for s among them
 * (s is then gone when this returns).  Call it from the loop only, for an
 * s that was not removed.  Accepts NULL.
 */
RELOCK_EXTERN void relock_async_socket_action(relock_async_socket *s, int events);

#ifdef __cplusplus
}
#endif

#endif /* RELOCK_ASYNC_H */
