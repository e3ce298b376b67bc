/*
 * relock: Redis locks that work on every Redis a fleet still runs.
 *
 * Thread safety.  A relock_client owns one connection per server and is
 * not thread-safe: use it from one thread at a time (one client per thread
 * is the usual pattern).  A relock_lock belongs to the client that made it
 * and may only be used with that client, from the thread using the client.
 * relock_config objects may be shared read-only between threads once
 * filled.  relock_strerror() and relock_version() are safe from any thread.
 *
 * Errors.  Every call returns a relock_status.  RELOCK_BUSY and
 * RELOCK_TIMEOUT are outcomes ("someone else holds it"), not failures.
 * Details of the last failure (the server's error text, our source file and
 * line) are kept on the handle that failed: relock_client_error() and
 * relock_config_error().  The first error of a call is kept; later, vaguer
 * ones do not overwrite it.  A NULL handle or output pointer gets
 * RELOCK_EINVAL, never a crash.
 *
 * SIGPIPE.  The blocking client writes with write(): a program must
 * ignore SIGPIPE (or block it in the threads that call relock), else a
 * write to a connection the server closed ends the process.  relock's own
 * renewal thread blocks every signal for its whole life, so its writes
 * fail with EPIPE instead (and it reconnects), whatever the program does
 * about SIGPIPE.  The asynchronous client writes from the program's loop
 * with SIGPIPE blocked (relock_async.h).
 */
#ifndef RELOCK_H
#define RELOCK_H

#include <signal.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RELOCK_VERSION_MAJOR 0
#define RELOCK_VERSION_MINOR 3
#define RELOCK_VERSION_PATCH 0
#define RELOCK_VERSION_STRING "0.3.0"

#if defined(RELOCK_BUILDING) && defined(__GNUC__)
#define RELOCK_EXTERN __attribute__((visibility("default")))
#else
#define RELOCK_EXTERN
#endif

/*
 * Status codes.  Codes are added last and never renumbered.
 * X(NAME, value, message)
 */
#define RELOCK_STATUS_MAP(X)                                                   \
    X(OK, 0, "success")                                                        \
    X(BUSY, 1, "lock is held by someone else")                                 \
    X(TIMEOUT, 2, "lock not acquired within the wait bound")                   \
    X(LOST, 3, "lock was lost (expired, taken over or deleted)")               \
    X(EIO, 4, "server unreachable or connection failed")                       \
    X(EPROTO, 5, "unexpected reply from the server")                           \
    X(EUNSUPPORTED, 6, "not supported by this server or build")                \
    X(ECONFIG, 7, "configuration error")                                       \
    X(EINVAL, 8, "invalid argument")                                           \
    X(EFOREIGN, 9, "lock key holds a value relock cannot interpret")           \
    X(EAMBIGUOUS, 10, "outcome unknown: connection lost after the command was sent") \
    X(ENOMEM, 11, "out of memory")                                             \
    X(EDURABILITY, 12, "write not acknowledged by enough replicas in time")   \
    X(ECANCELED, 13, "operation cancelled")

typedef enum relock_status {
#define RELOCK_X_ENUM(name, value, msg) RELOCK_##name = value,
    RELOCK_STATUS_MAP(RELOCK_X_ENUM)
#undef RELOCK_X_ENUM
} relock_status;

/* A static, English description of a status code; never NULL. */
RELOCK_EXTERN const char *relock_strerror(relock_status st);
/* The status code's name, e.g. "RELOCK_LOST"; never NULL. */
RELOCK_EXTERN const char *relock_status_name(relock_status st);
/* The library version string, e.g. "0.1.0". */
RELOCK_EXTERN const char *relock_version(void);

/* Lock algorithms (docs/design.md §4-5). */
typedef enum relock_mode {
    RELOCK_MODE_AUTO = 0, /* probe the server and pick safely */
    RELOCK_MODE_LEGACY,   /* SETNX + expiry timestamp + GETSET takeover */
    RELOCK_MODE_BRIDGE,   /* legacy-readable values with a TTL (migration) */
    RELOCK_MODE_MODERN    /* SET NX PX + compare-and-delete */
} relock_mode;

/* "auto", "legacy", "bridge", "modern". */
RELOCK_EXTERN const char *relock_mode_name(relock_mode m);

/* Details of the last failure on a handle.  Valid until the next call on
 * that handle.  The library owns it: read it through the pointer it hands
 * out, never copy or allocate one, so that fields can be added at its end
 * without breaking programs built against an older relock.h. */
typedef struct relock_error {
    relock_status status; /* RELOCK_OK when nothing failed */
    const char *message;  /* "what: why", never NULL ("" when none) */
    const char *server;   /* the server's error text, or "" */
    const char *file;     /* relock source file that detected it, or "" */
    int line;             /* and its line, or 0 */
} relock_error;

/* ---------------------------------------------------------------------
 * Configuration.  A relock_config starts with the defaults of docs/design.md §11
 * and is changed by loading a libconfig file, a URL, or single settings.
 * Invalid values are refused, never clamped.
 */
typedef struct relock_config relock_config;

/* A new configuration holding the defaults; NULL when out of memory.
 * Free it with relock_config_free(). */
RELOCK_EXTERN relock_config *relock_config_new(void);
/* Frees a configuration; accepts NULL. */
RELOCK_EXTERN void relock_config_free(relock_config *cfg);

/*
 * Reads a libconfig file (docs/design.md §11) over the current settings.  Unknown
 * settings, wrong types and bad values are errors; the message is
 * "FILE:LINE: reason" (relock_config_error()).  On error the configuration
 * may be partly changed.
 */
RELOCK_EXTERN relock_status relock_config_load_file(relock_config *cfg, const char *path);

/* Replaces the server list by the one server of a URL
 * "redis://[user:pass@]host[:port][/db]". */
RELOCK_EXTERN relock_status relock_config_set_url(relock_config *cfg, const char *url);

/*
 * Sets one setting by its dotted name as in the file, without the
 * "relock." prefix ("mode", "ttl_ms", "wait.max_ms", "legacy.clock_unit",
 * ...), from its text form.  Durations are in milliseconds.  "servers"
 * takes one URL or several separated by commas (a quorum), and
 * "sentinel.master" with "sentinel.addrs" ("host:port,host:port") finds the
 * master by Sentinel: none of them needs a file (docs/configuration.md).
 */
RELOCK_EXTERN relock_status relock_config_set(relock_config *cfg, const char *name,
                                              const char *value);

/* The detail of the last failing call on cfg. */
RELOCK_EXTERN const relock_error *relock_config_error(const relock_config *cfg);

/*
 * Owner metadata (setting owner_info, off by default): beside each lock
 * its holder writes, with the lease as TTL, one line that
 * relock_inspect() returns:
 *   host=HOST pid=PID at=START[ TEXT]
 * PID is the process the record names as the holder: pid, or the calling
 * process when pid is 0 (a program that acquires for another process, a
 * shell script's helper say, names that process).  START is when the lock
 * was acquired, in UTC (for an adopted lock, when it was last extended).
 * TEXT is free text of at most RELOCK_OWNER_MAX bytes without control
 * characters; "" writes none.  The record is written and deleted only
 * while the lock is its writer's (relock_lock_set_owner()).
 * relock_config_set_owner() sets what every
 * lock acquired through clients of cfg writes (clients copy it at
 * relock_connect()).  RELOCK_EINVAL for a NULL handle or text, a negative
 * pid, a text too long or holding a control character; nothing changes
 * then.
 */
#define RELOCK_OWNER_MAX 256
RELOCK_EXTERN relock_status relock_config_set_owner(relock_config *cfg, long pid,
                                                    const char *text);

/* Reads back a few settings the CLI needs. */
RELOCK_EXTERN long long relock_config_ttl_ms(const relock_config *cfg);
/* The configured default wait bound: -1 forever, 0 none, else ms. */
RELOCK_EXTERN long long relock_config_wait_ms(const relock_config *cfg);
RELOCK_EXTERN relock_mode relock_config_mode(const relock_config *cfg);
/* The configured key_prefix ("" by default); valid while cfg lives and
 * is not changed. */
RELOCK_EXTERN const char *relock_config_key_prefix(const relock_config *cfg);

/*
 * Events: what happens to locks, told to one callback, so that a program
 * can count contention and hold times, or log a lock's life, without
 * wrapping every call.  relock_config_set_event_fn() sets it for every
 * client later connected with cfg (clients copy it at relock_connect());
 * fn NULL turns it off.  The blocking API reports (and the asynchronous
 * one, from its loop, for relock_async_acquire(), relock_async_keep() and
 * relock_async_release(): relock_async.h):
 *   RELOCK_EVENT_ACQUIRED      relock_acquire() won the lock; waited_ms is
 *                              how long the call took (0 or a round trip:
 *                              at once; more: it waited), validity_ms the
 *                              validity then;
 *   RELOCK_EVENT_RENEWED       a renewal of relock_keep() succeeded;
 *                              validity_ms the validity now;
 *   RELOCK_EVENT_RENEW_FAILED  a renewal failed while validity remains (it
 *                              is tried again); status why, validity_ms
 *                              what is left;
 *   RELOCK_EVENT_LOST          relock_keep() found the lock lost (on_lost
 *                              follows); status why;
 *   RELOCK_EVENT_RELEASED      relock_release() released it.
 * held_ms is the time since the acquisition (-1 for an adopted lock).
 * The callback runs on the thread that made the call, or for the three
 * renewal events on the renewal thread (a loss found at the validity's end
 * while a renewal still waits for its server: on the thread that keeps
 * that deadline; a renewal that ends after the loss says nothing), and
 * must return quickly; it may
 * not call relock functions on the lock or its client.  The event and its
 * strings are valid only during the call.  RELOCK_EINVAL for a NULL cfg.
 */
typedef enum relock_event_kind {
    RELOCK_EVENT_ACQUIRED = 1,
    RELOCK_EVENT_RENEWED,
    RELOCK_EVENT_RENEW_FAILED,
    RELOCK_EVENT_LOST,
    RELOCK_EVENT_RELEASED
} relock_event_kind;

typedef struct relock_event {
    relock_event_kind kind;
    const char *name;      /* the lock's name */
    relock_status status;  /* RELOCK_OK, or why (RENEW_FAILED, LOST) */
    long long waited_ms;   /* ACQUIRED: how long relock_acquire() took; else 0 */
    long long held_ms;     /* since the acquisition; -1 unknown (adopted) */
    long long validity_ms; /* validity left (ACQUIRED, RENEWED, RENEW_FAILED); else 0 */
} relock_event;

typedef void (*relock_event_fn)(const relock_event *ev, void *arg);
RELOCK_EXTERN relock_status relock_config_set_event_fn(relock_config *cfg, relock_event_fn fn,
                                                       void *arg);
/* The name of an event kind, e.g. "acquired", "renew_failed"; never NULL. */
RELOCK_EXTERN const char *relock_event_name(relock_event_kind kind);

/* ---------------------------------------------------------------------
 * Clients.
 */
typedef struct relock_client relock_client;

/*
 * Connects to the configured server, probes it (docs/design.md §3) and selects the
 * mode.  *out is set whenever memory allows, also on failure, so that
 * relock_client_error(*out) can tell what went wrong; free it with
 * relock_client_free() in both cases.  cfg is copied: it may be freed
 * afterwards.
 */
RELOCK_EXTERN relock_status relock_connect(const relock_config *cfg, relock_client **out);
/* relock_connect() with a configuration read from a libconfig file. */
RELOCK_EXTERN relock_status relock_connect_file(const char *path, relock_client **out);
/* relock_connect() with defaults and the one server of a URL. */
RELOCK_EXTERN relock_status relock_connect_url(const char *url, relock_client **out);

/* Closes connections and frees the client; accepts NULL.  Locks still held
 * are neither released nor freed: release them first. */
RELOCK_EXTERN void relock_client_free(relock_client *c);

/* The detail of the last failing call on c (or on a lock of c). */
RELOCK_EXTERN const relock_error *relock_client_error(const relock_client *c);

/* While *flag is non-zero, a waiting relock_acquire() on c gives up at its
 * next step with RELOCK_ECANCELED, nothing held; a lock won before that is
 * returned as usual.  Meant for a signal handler that sets the flag (a
 * handler installed without SA_RESTART also cuts the wait's sleep short).
 * flag must outlive its use; NULL turns it off.  RELOCK_EINVAL for a NULL
 * client. */
RELOCK_EXTERN relock_status relock_client_cancel_on(relock_client *c,
                                                    const volatile sig_atomic_t *flag);

/* The mode in use and a one-line reason for the choice. */
RELOCK_EXTERN relock_mode relock_client_mode(const relock_client *c);
RELOCK_EXTERN const char *relock_client_mode_reason(const relock_client *c);

/*
 * How modern mode does its work on the server connected to (docs/design.md §3.3:
 * native commands first, then Lua, then WATCH), an opaque object read with
 * relock_paths_get() (so that a path can be added without breaking
 * programs built against an older relock.h), each a static string:
 *   RELOCK_PATH_ACQUIRE  "SET NX PX" (fencing off), "script (SET NX PX,
 *                        INCR)" or "WATCH/MULTI (SET PX, INCR)";
 *   RELOCK_PATH_RELEASE  "DELIFEQ", "DELEX IFEQ", "script" or "WATCH/MULTI";
 *   RELOCK_PATH_EXTEND   "SET IFEQ PX", "script" or "WATCH/MULTI";
 *   RELOCK_PATH_SCRIPTS  "used", "none" or "none (the server runs without
 *                        Lua)".
 * The same words end the mode reason.  Connects if needed (the paths are
 * those of the server connected now).  On RELOCK_OK *out is a new object,
 * owned by the caller: free it with relock_paths_free(); otherwise *out is
 * NULL.  RELOCK_EUNSUPPORTED in legacy and bridge modes, with several
 * servers (a quorum) and when no mode was selected.
 */
typedef struct relock_paths relock_paths;
typedef enum relock_path {
    RELOCK_PATH_ACQUIRE = 0,
    RELOCK_PATH_RELEASE,
    RELOCK_PATH_EXTEND,
    RELOCK_PATH_SCRIPTS
} relock_path;
RELOCK_EXTERN relock_status relock_client_paths(relock_client *c, relock_paths **out);
/* Frees what relock_client_paths() returned; accepts NULL. */
RELOCK_EXTERN void relock_paths_free(relock_paths *p);
/* One path, a static string; "" for a NULL object or a path this library
 * does not know. */
RELOCK_EXTERN const char *relock_paths_get(const relock_paths *p, relock_path which);

/*
 * What the probe learned about the (first) server, an opaque object read
 * through the accessors below.  Owned by the caller: free it with
 * relock_server_info_free(); it does not depend on the client, which may
 * be freed first.  The accessors accept NULL and then return "" for
 * strings and 0 otherwise.
 */
typedef struct relock_server_info relock_server_info;

#define RELOCK_CAP_WATCH 0x01u    /* WATCH/MULTI/EXEC compare-and-set (2.2) */
#define RELOCK_CAP_EVAL 0x02u     /* Lua scripts (2.6.0) */
#define RELOCK_CAP_PEXPIRE 0x04u  /* PEXPIRE/PTTL (2.6.0) */
#define RELOCK_CAP_TIME 0x08u     /* TIME (2.6.0) */
#define RELOCK_CAP_SET_NX_PX 0x10u /* SET key value NX PX ms (2.6.12) */
#define RELOCK_CAP_SCAN 0x20u     /* SCAN; TTL of a missing key is -2 (2.8) */
#define RELOCK_CAP_SCRIPT_TIME_WRITE 0x40u /* a script may write after TIME (5.0) */
/* Found by COMMAND DOCS, not from the version (EVAL too: a server may run
 * without Lua): */
#define RELOCK_CAP_SET_IFEQ 0x80u  /* SET key value IFEQ old (Valkey 8.1, Redis 8.4) */
#define RELOCK_CAP_DELIFEQ 0x100u  /* DELIFEQ key value (Valkey 9.0) */
#define RELOCK_CAP_DELEX 0x200u    /* DELEX key IFEQ value (Redis 8.4) */
/* From the version again: */
#define RELOCK_CAP_WAIT 0x400u     /* WAIT numreplicas timeout (3.0) */
#define RELOCK_CAP_WAITAOF 0x800u  /* WAITAOF numlocal numreplicas timeout (7.2) */

/* Reads what the probe learned about the server connected to (reconnects
 * if needed).  On RELOCK_OK *out is a new object; otherwise *out is NULL. */
RELOCK_EXTERN relock_status relock_client_server(relock_client *c, relock_server_info **out);
/* Frees what relock_client_server() returned; accepts NULL. */
RELOCK_EXTERN void relock_server_info_free(relock_server_info *info);
/* The version the server reports, "7.0.15", or "unknown". */
RELOCK_EXTERN const char *relock_server_info_version(const relock_server_info *info);
/* Its parts (0 when unknown). */
RELOCK_EXTERN int relock_server_info_major(const relock_server_info *info);
RELOCK_EXTERN int relock_server_info_minor(const relock_server_info *info);
RELOCK_EXTERN int relock_server_info_patch(const relock_server_info *info);
/* The RELOCK_CAP_* bits the server has. */
RELOCK_EXTERN unsigned relock_server_info_caps(const relock_server_info *info);
/* The address connected to: the configured server, the master a sentinel
 * named, or the Cluster node a redirection moved to; a unix socket's path
 * with port 0. */
RELOCK_EXTERN const char *relock_server_info_host(const relock_server_info *info);
RELOCK_EXTERN int relock_server_info_port(const relock_server_info *info);
/* Names of the capability bits, for printing: NULL past the last. */
RELOCK_EXTERN const char *relock_cap_name(unsigned bit);

/*
 * Durability (settings durability.*): how many replicas acknowledged the
 * write of the last relock_acquire() or relock_extend() on c (or on a lock
 * of c) that waited for them, by WAIT (or WAITAOF with durability.aof);
 * -1 when that call sent no WAIT (durability.replicas is 0, or it failed
 * before its write).  After RELOCK_EDURABILITY it is below
 * durability.replicas, and the message says so too.
 */
RELOCK_EXTERN int relock_client_replicas_acked(const relock_client *c);

/* ---------------------------------------------------------------------
 * Locks.
 */
typedef struct relock_lock relock_lock;

/*
 * Durations are milliseconds in a long long (64 bits everywhere: a year,
 * the longest lease and wait relock takes, does not fit 32 bits).  Leases
 * and wait bounds are at most RELOCK_DURATION_MAX_MS; longer ones are
 * RELOCK_EINVAL, never cut.
 */
#define RELOCK_DURATION_MAX_MS 31536000000LL /* 365 days */

#define RELOCK_WAIT_FOREVER (-1LL) /* wait_ms: no bound (as flock) */
#define RELOCK_WAIT_DEFAULT (-2LL) /* wait_ms: the configured wait.max_ms */

/*
 * Acquires lock NAME (the key is key_prefix + NAME) for ttl_ms (0: the
 * configured ttl_ms), waiting at most wait_ms: 0 tries once,
 * RELOCK_WAIT_FOREVER waits without bound, RELOCK_WAIT_DEFAULT uses the
 * configuration.  On RELOCK_OK *out is a new lock handle (free it with
 * relock_lock_free() after releasing); otherwise *out is NULL.
 * Returns RELOCK_BUSY when wait_ms is 0 and the lock is held, and
 * RELOCK_TIMEOUT when the bound passed.  With durability, RELOCK_EDURABILITY
 * when too few replicas acknowledged in time: the write was deleted again
 * (relock_client_replicas_acked() tells how many did).
 */
RELOCK_EXTERN relock_status relock_acquire(relock_client *c, const char *name, long long ttl_ms,
                                           long long wait_ms, relock_lock **out);
/* relock_acquire() with wait_ms 0. */
RELOCK_EXTERN relock_status relock_try_acquire(relock_client *c, const char *name, long long ttl_ms,
                                               relock_lock **out);

/*
 * Extends the lock to ttl_ms from now (0: its original ttl).  RELOCK_LOST
 * when the lock is no longer ours; the handle then stays valid but lost.
 * In legacy and bridge modes the stored value changes:
 * relock_lock_value() returns the new one.  With durability,
 * RELOCK_EDURABILITY when too few replicas acknowledged in time: the lock
 * stays held and nothing is deleted.  After any extend that did not
 * succeed (an error, RELOCK_EAMBIGUOUS, RELOCK_EDURABILITY), and while one
 * is under way, relock_lock_validity_ms() is at most the smaller of the
 * validity before and the new lease counted from the extend's start: the
 * server may hold either, so an extend to a shorter lease shortens it.
 */
RELOCK_EXTERN relock_status relock_extend(relock_lock *l, long long ttl_ms);

/*
 * Releases the lock.  RELOCK_OK: it was ours and is deleted.  RELOCK_LOST:
 * it was no longer ours (nothing was deleted).  An I/O error means the
 * state is unknown, never "released".  The handle stays valid; free it
 * with relock_lock_free().
 */
RELOCK_EXTERN relock_status relock_release(relock_lock *l);

/*
 * Makes a handle for a lock acquired elsewhere (by another process, say
 * `relock acquire`), from the value it printed and its fence (0: unknown),
 * so that it can be released or extended.  ttl_ms is used by
 * relock_extend(l, 0).
 */
RELOCK_EXTERN relock_status relock_lock_adopt(relock_client *c, const char *name, const char *value,
                                              long long fence, long long ttl_ms, relock_lock **out);

/*
 * Automatic renewal.  relock_keep() extends the lock in the background,
 * every third of its ttl (sooner while the validity left is shorter, as
 * after a failed extend to a shorter lease: never later than half of it;
 * at once when the validity is unknown, as an adopted lock's is, or over),
 * on a connection of its own, until
 * relock_keep_stop(), relock_release() or relock_lock_free().  If the lock
 * is lost (taken, deleted, or its validity ran out while the server could
 * not be reached), on_lost is called exactly once, from one of the renewal's
 * threads, with the status (RELOCK_LOST, or the error that outlasted the
 * validity); a lock whose renewals fail is reported lost when its validity
 * ends, even while a renewal still waits for the server;
 * it must not call relock functions on the lock or its client: set a flag,
 * write to a pipe or send a signal to the process (kill(getpid(), sig):
 * raise() would aim at the renewal thread, where every signal is
 * blocked).  on_lost may be NULL.
 * While a lock is kept, relock_extend() on it is refused (RELOCK_EINVAL),
 * relock_lock_validity_ms() follows the renewals, and relock_lock_value()
 * returns the value as of relock_keep() (in legacy and bridge modes
 * renewals write new values; the current one is there again after
 * relock_keep_stop()).
 */
typedef void (*relock_lost_fn)(relock_lock *l, relock_status why, void *arg);
RELOCK_EXTERN relock_status relock_keep(relock_lock *l, relock_lost_fn on_lost, void *arg);
/* Stops renewal and waits for the renewal thread.  RELOCK_OK, or
 * RELOCK_LOST when the lock was lost meanwhile.  Not from on_lost. */
RELOCK_EXTERN relock_status relock_keep_stop(relock_lock *l);

/*
 * Replaces the owner metadata's PID and TEXT for this lock (as
 * relock_config_set_owner(), whose rules they follow) and, with
 * owner_info, rewrites the record at once (a round trip; like every owner
 * write, a failure of it is not reported).  Allowed while the lock is kept:
 * the renewals write the new record too.  For a process that learns who
 * holds the lock only after acquiring it, such as a supervisor that starts
 * its command then.  RELOCK_LOST when the lock is known to be lost
 * (nothing written).  Like every owner write (after acquire and extend,
 * and the delete before release), the record is written only while the
 * lock key still holds this handle's value (in legacy and bridge modes
 * also its fence), atomically where the server allows (a script, else
 * WATCH/MULTI; on Redis 2.0 after a look): a handle whose lock passed to
 * another holder leaves that holder's record alone.
 */
RELOCK_EXTERN relock_status relock_lock_set_owner(relock_lock *l, long pid, const char *text);

/* Frees a lock handle without releasing it; accepts NULL. */
RELOCK_EXTERN void relock_lock_free(relock_lock *l);

RELOCK_EXTERN const char *relock_lock_name(const relock_lock *l);
/* The value now stored in the lock key (changes on extend in legacy and
 * bridge modes). */
RELOCK_EXTERN const char *relock_lock_value(const relock_lock *l);
/* The fencing token (docs/design.md §6.3); 0 when the mode keeps none. */
RELOCK_EXTERN long long relock_lock_fence(const relock_lock *l);
/* Milliseconds of validity left now (ttl minus time spent acquiring minus
 * the clock-drift allowance, minus time since); 0 when expired. */
RELOCK_EXTERN long long relock_lock_validity_ms(const relock_lock *l);

/* ---------------------------------------------------------------------
 * Inspection (read-only; used by `relock inspect`).
 */
typedef enum relock_value_kind {
    RELOCK_VALUE_NONE = 0,   /* key absent */
    RELOCK_VALUE_TIMESTAMP,  /* decimal expiry time (legacy or bridge) */
    RELOCK_VALUE_TOKEN,      /* 32 lowercase hex characters (modern) */
    RELOCK_VALUE_UNKNOWN     /* anything else */
} relock_value_kind;

/*
 * What relock_inspect() read, an opaque object read through the accessors
 * below (so that it can grow without breaking programs built against an
 * older relock.h).  Owned by the caller: free it with
 * relock_inspect_info_free().  The accessors accept NULL and then return
 * the value of an absent key (kind NONE, "" strings, pttl -2, 0 otherwise).
 */
typedef struct relock_inspect_info relock_inspect_info;

/*
 * Reads the lock key of NAME without changing anything.  On RELOCK_OK
 * *out is a new object; on failure *out is NULL.
 */
RELOCK_EXTERN relock_status relock_inspect(relock_client *c, const char *name,
                                           relock_inspect_info **out);
/* Frees what relock_inspect() returned; accepts NULL. */
RELOCK_EXTERN void relock_inspect_info_free(relock_inspect_info *info);
RELOCK_EXTERN relock_value_kind relock_inspect_info_kind(const relock_inspect_info *info);
/* The whole stored value, never cut: NUL-terminated, and its length in
 * bytes in *len unless len is NULL (a value may hold NUL bytes).  Valid
 * until relock_inspect_info_free(). */
RELOCK_EXTERN const char *relock_inspect_info_value(const relock_inspect_info *info, size_t *len);
/* The key's TTL in ms: -1 none, -2 absent. */
RELOCK_EXTERN long long relock_inspect_info_pttl_ms(const relock_inspect_info *info);
/* TIMESTAMP: the expiry in ms since the epoch; else 0. */
RELOCK_EXTERN long long relock_inspect_info_ts_ms(const relock_inspect_info *info);
/* TIMESTAMP: 1 when the value is in ms, 0 in s. */
RELOCK_EXTERN int relock_inspect_info_ts_unit_ms(const relock_inspect_info *info);
/* The lock's fence counter, 0 when none. */
RELOCK_EXTERN long long relock_inspect_info_fence(const relock_inspect_info *info);
/* The whole owner record (owner_info), or "".  Valid until
 * relock_inspect_info_free(). */
RELOCK_EXTERN const char *relock_inspect_info_owner(const relock_inspect_info *info);
/* The Redis key read: key_prefix + NAME, or "" when unknown.  Valid until
 * relock_inspect_info_free(). */
RELOCK_EXTERN const char *relock_inspect_info_key(const relock_inspect_info *info);
/* How many clients wait for the lock: the subscribers of its release
 * channel (PUBSUB NUMSUB, Redis 2.8 and later, on the server holding the
 * key); -1 when the server cannot say.  Waiters that poll without a
 * subscription (wait.notify = false, legacy clients) are not counted. */
RELOCK_EXTERN long long relock_inspect_info_waiters(const relock_inspect_info *info);

/* ---------------------------------------------------------------------
 * Migration audit (read-only; used by `relock scan`, docs/migration.md).
 */

/* What the audit concludes about the move from bridge to modern mode. */
typedef enum relock_scan_verdict {
    /* A live legacy lock exists, or a legacy writer was seen within the
     * quiet window (or the marker is unreadable): stay in bridge mode. */
    RELOCK_SCAN_STAY_BRIDGE = 0,
    /* No live legacy lock, and the last legacy writer was seen before the
     * quiet window began: modern mode is safe. */
    RELOCK_SCAN_MODERN_SAFE,
    /* No longer given: a scan without a sighting history says
     * RELOCK_SCAN_NO_EVIDENCE (kept so that the values stay). */
    RELOCK_SCAN_MODERN_SAFE_UNSEEN,
    /* Nothing found blocks modern mode, but the walk stopped at its bound
     * before it saw every key: no conclusion. */
    RELOCK_SCAN_INCOMPLETE,
    /* Nothing found blocks modern mode, but upgraded clients have not yet
     * watched for legacy writers for the whole quiet window (the watch
     * marker is younger than it, or absent): no evidence yet. */
    RELOCK_SCAN_NO_EVIDENCE
} relock_scan_verdict;

/* The words a modern-mode acquire adds to its RELOCK_BUSY or
 * RELOCK_TIMEOUT detail when the holder it met is a classic client (a
 * live timestamp without a TTL): the emergency of docs/migration.md. */
#define RELOCK_CLASSIC_HOLDER_NOTE                                                          \
    " by a classic client (a live timestamp without a TTL): legacy clients are still "     \
    "active beside modern mode, and they take modern values for expired -- go back to "   \
    "bridge at once (migration.legacy_clients = true, docs/migration.md)"

/* "stay-bridge", "modern-safe", "modern-safe-unseen", "incomplete",
 * "no-evidence-yet". */
RELOCK_EXTERN const char *relock_scan_verdict_name(relock_scan_verdict v);

/* The most keys one relock_scan() examines; past it the result is
 * incomplete. */
#define RELOCK_SCAN_MAX_KEYS 10000000LL
/* A server without SCAN (before 2.8) is walked with KEYS only while its
 * database holds at most this many keys: KEYS blocks the server. */
#define RELOCK_SCAN_KEYS_FALLBACK_MAX 10000LL

/*
 * What relock_scan() found, an opaque object read through the accessors
 * below.  Owned by the caller: free it with relock_scan_result_free().
 * The accessors accept NULL and then return 0, -1 for times, "" for
 * strings and RELOCK_SCAN_INCOMPLETE for the verdict.
 */
typedef struct relock_scan_result relock_scan_result;

/* The counters of a scan: how many keys fell in each class. */
typedef enum relock_scan_counter {
    /* Keys the walk returned.  Each falls in exactly one class below, so
     * examined is their sum.  SCAN may return a key twice while the server
     * resizes its tables; such a key is then counted twice. */
    RELOCK_SCAN_EXAMINED = 0,
    RELOCK_SCAN_LEGACY,      /* timestamp, no TTL, not yet expired: a live legacy lock */
    RELOCK_SCAN_BRIDGE,      /* timestamp with a TTL: written by a bridge client */
    RELOCK_SCAN_MODERN,      /* 32-hex token with a TTL: written by a modern client */
    RELOCK_SCAN_STALE,       /* timestamp, no TTL, expired: a dead legacy holder */
    RELOCK_SCAN_UNKNOWN,     /* other strings: text, a token without TTL, a timestamp of
                                neither 10 (s) nor 13 (ms) digits */
    RELOCK_SCAN_SKIPPED,     /* relock's own keys: fence counters, legacy markers */
    RELOCK_SCAN_OTHER_TYPES, /* not strings (lists, hashes, ...) */
    RELOCK_SCAN_GONE         /* deleted between the listing and the read */
} relock_scan_counter;

/*
 * Walks the keys matching match (NULL: key_prefix + "*"; at most 1024
 * bytes, RELOCK_EINVAL beyond), classifies each stored value by what it
 * shows about its writer, reads the legacy-writer marker, and judges
 * whether the fleet may leave bridge mode (migration.quiet_window_ms of
 * the configuration).  Changes nothing on the server.  Uses SCAN where the
 * server has it (2.8); otherwise KEYS, but only while the database holds
 * at most RELOCK_SCAN_KEYS_FALLBACK_MAX keys (RELOCK_EUNSUPPORTED beyond).
 * Works on a client whose mode relock_connect() refused.  *out is a new
 * result whenever memory allows, also on an error (then it holds the
 * counts so far and is not complete); free it with
 * relock_scan_result_free().
 */
RELOCK_EXTERN relock_status relock_scan(relock_client *c, const char *match,
                                        relock_scan_result **out);
/* Frees a scan result; accepts NULL. */
RELOCK_EXTERN void relock_scan_result_free(relock_scan_result *r);
/* One counter; 0 for a counter this library does not know. */
RELOCK_EXTERN long long relock_scan_result_count(const relock_scan_result *r,
                                                 relock_scan_counter which);
/* The whole name of one live legacy lock key, or "" (*len: its length,
 * unless len is NULL; a key may hold NUL bytes). */
RELOCK_EXTERN const char *relock_scan_result_legacy_example(const relock_scan_result *r,
                                                            size_t *len);
/* The marker key (key_prefix + " relock:legacy-seen"), read whatever the
 * pattern: when an upgraded client last met a legacy writer. */
RELOCK_EXTERN const char *relock_scan_result_marker_key(const relock_scan_result *r);
/* When the marker says a legacy writer was last seen, in ms since the
 * epoch; -1 never (marker absent). */
RELOCK_EXTERN long long relock_scan_result_legacy_seen_ms(const relock_scan_result *r);
/* 1: the marker is not a 13-digit time in ms. */
RELOCK_EXTERN int relock_scan_result_marker_unreadable(const relock_scan_result *r);
/* The pattern walked. */
RELOCK_EXTERN const char *relock_scan_result_match(const relock_scan_result *r);
/* 1: walked with KEYS (server without SCAN). */
RELOCK_EXTERN int relock_scan_result_keys_fallback(const relock_scan_result *r);
/* 1: every key matching was walked. */
RELOCK_EXTERN int relock_scan_result_complete(const relock_scan_result *r);
/* The local clock when the verdict was made, ms since the epoch. */
RELOCK_EXTERN long long relock_scan_result_now_ms(const relock_scan_result *r);
/* migration.quiet_window_ms of the configuration. */
RELOCK_EXTERN long long relock_scan_result_quiet_window_ms(const relock_scan_result *r);
RELOCK_EXTERN relock_scan_verdict relock_scan_result_verdict(const relock_scan_result *r);
/* The verdict and its reasons, in English, whole. */
RELOCK_EXTERN const char *relock_scan_result_verdict_text(const relock_scan_result *r);
/* Redis Cluster: how many masters were walked, which is every master
 * serving slots, so the counts and the verdict cover the whole keyspace;
 * 0 when the server is not a cluster node. */
RELOCK_EXTERN int relock_scan_result_cluster_masters(const relock_scan_result *r);
/* When upgraded clients began to watch for legacy writers (the watch
 * marker, key_prefix + " relock:watching-since", or the first sighting if
 * earlier), ms since the epoch; -1 unknown. */
RELOCK_EXTERN long long relock_scan_result_watching_since_ms(const relock_scan_result *r);

/* What a key's value looks like, whatever its class: the signatures of
 * the lock libraries (docs/migration.md, relock scan). */
typedef enum relock_key_signature {
    RELOCK_SIG_TS_S = 0,    /* an integer timestamp in seconds (10 digits) */
    RELOCK_SIG_TS_S_FRAC,   /* seconds with a fraction: the float-second clients */
    RELOCK_SIG_TS_MS,       /* an integer timestamp in milliseconds (13 digits) */
    RELOCK_SIG_NO_TTL_FLAG, /* a SETNX without TTL and without time: "true", "",
                               "host:pid", a short owner string */
    RELOCK_SIG_TOKEN,       /* 32 hex digits with a TTL: relock modern (or redis-py >= 3) */
    RELOCK_SIG_OTHER_TOKEN, /* another string with a TTL: another library's token */
    RELOCK_SIG_ZSET,        /* a sorted set (Symfony Lock) */
    RELOCK_SIG_HASH,        /* a hash (Redisson, Cm_RedisSession) */
    RELOCK_SIG_OTHER,       /* anything else */
    RELOCK_SIG_COUNT
} relock_key_signature;

/* "ts-s", "ts-s-frac", "ts-ms", "setnx-no-ttl", "token", "other-token",
 * "zset", "hash", "other". */
RELOCK_EXTERN const char *relock_key_signature_name(relock_key_signature s);
/* How many keys of the walk bore signature s (relock's own keys and keys
 * gone meanwhile bear none). */
RELOCK_EXTERN long long relock_scan_result_signature(const relock_scan_result *r,
                                                     relock_key_signature s);
/* The lock families whose keys the walk met, by signature and key name,
 * one per line ("redis-mutex (RedisMutex:...): 3 keys, e.g. RedisMutex:job"),
 * or "". */
RELOCK_EXTERN const char *relock_scan_result_families(const relock_scan_result *r);

/* The class relock_scan() counts a key in (the counters above). */
typedef enum relock_key_class {
    RELOCK_KEY_LEGACY = 0, /* timestamp, no TTL, not yet expired: a live legacy lock */
    RELOCK_KEY_BRIDGE,     /* timestamp with a TTL: written by a bridge client */
    RELOCK_KEY_MODERN,     /* 32-hex token with a TTL: written by a modern client */
    RELOCK_KEY_STALE,      /* timestamp, no TTL, expired: a dead legacy holder */
    RELOCK_KEY_UNKNOWN,    /* any other string: no lock that relock knows */
    RELOCK_KEY_OTHER_TYPE  /* not a string (list, hash, ...) */
} relock_key_class;

/* "legacy", "bridge", "modern", "stale", "unknown", "other". */
RELOCK_EXTERN const char *relock_key_class_name(relock_key_class k);

/*
 * The class of a string value of len bytes whose key has pttl_ms of TTL
 * left (-1 or any negative: none), judged at now_ms (ms since the epoch,
 * the caller's clock), by the rules of relock_scan(): a timestamp needs
 * 10 (s) or 13 (ms) digits, a token needs a TTL.  Never
 * RELOCK_KEY_OTHER_TYPE; RELOCK_KEY_UNKNOWN for a NULL value.  `relock
 * break` refuses a RELOCK_KEY_UNKNOWN value unless told --force.
 */
RELOCK_EXTERN relock_key_class relock_key_classify(const char *value, size_t len,
                                                   long long pttl_ms, long long now_ms);

/* Told of one key by relock_scan_keys(): its class and its name, keylen
 * bytes (binary-safe, also NUL-terminated), valid only until the call
 * returns.  It must not use the client being walked, except with
 * relock_scan_node(). */
typedef void (*relock_scan_key_fn)(void *arg, relock_key_class k, const char *key,
                                   size_t keylen);

/*
 * relock_scan(), calling fn(arg, ...) once for every key it counts in a
 * class, in the order of the walk: not for relock's own keys (skipped)
 * nor for keys deleted meanwhile (gone).  A key SCAN returns twice is told
 * twice, as it is counted twice.  fn NULL: exactly relock_scan().
 */
RELOCK_EXTERN relock_status relock_scan_keys(relock_client *c, const char *match,
                                             relock_scan_key_fn fn, void *arg,
                                             relock_scan_result **out);

/*
 * The server whose keys a scan walks now, "host:port" (a unix socket's
 * path): in a Redis Cluster the master being walked, so that a key
 * callback of relock_scan_keys() may call it (it sends nothing) to group
 * keys by node; after the scan, the last server walked; "" before any
 * scan.  Valid until the next call on c.
 */
RELOCK_EXTERN const char *relock_scan_node(const relock_client *c);

/* ---------------------------------------------------------------------
 * Breaking a stuck lock by hand (used by `relock break`).
 */

/*
 * Deletes the lock key of NAME for an operator, and announces the release
 * to waiters (best effort).  With if_value, only while the key still
 * holds exactly that value, atomically (a script; WATCH and MULTI/EXEC on
 * Redis 2.2 and 2.4; on 2.0 a GET, then a transaction that shows whether
 * the value changed in between, and puts a new one back if it did); with
 * if_value NULL, whatever the key holds.  The delete increments the fence
 * counter in the same atomic step (on Redis 2.0 also a counter of breaks),
 * so whoever held the lock, who is not told, finds it moved: its next
 * release or extend reports RELOCK_LOST and writes nothing.  Returns
 * RELOCK_OK when deleted, RELOCK_BUSY when the key holds another value
 * (nothing deleted), RELOCK_LOST when it is absent (nothing to delete),
 * RELOCK_EAMBIGUOUS when the connection was lost after the request was
 * sent.  Works whatever the mode, also on a client whose mode
 * relock_connect() refused; with several servers, RELOCK_EUNSUPPORTED.
 */
RELOCK_EXTERN relock_status relock_break(relock_client *c, const char *name,
                                         const char *if_value);

/*
 * relock_break() that also requires the fence counter to equal if_fence
 * (> 0), compared in the same atomic step: timestamps repeat, so in legacy
 * and bridge modes the next holder can hold the very value an operator saw
 * for the last one; the fence tells them apart.  if_fence 0 is
 * relock_break().  RELOCK_BUSY when the value or the fence differs;
 * RELOCK_EINVAL without if_value; RELOCK_EUNSUPPORTED on Redis 2.0, whose
 * fence counter also counts failed attempts.
 */
RELOCK_EXTERN relock_status relock_break_fenced(relock_client *c, const char *name,
                                                const char *if_value, long long if_fence);

#ifdef __cplusplus
}
#endif

#endif /* RELOCK_H */
