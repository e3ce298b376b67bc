/*
 * The client and lock handles, the facts of the server a machine runs on
 * and the algorithm table: the data every layer above the leaves reads,
 * and what handle.c does with it alone.
 */
#ifndef RELOCK_HANDLE_H
#define RELOCK_HANDLE_H

#include <signal.h>

#include <hiredis/hiredis.h>

#include "base.h"

/* ------------------------------------------------------------------ connections */

/* The facts of the server a step machine runs on (the operation core
 * loads its connection's into the client before each step). */
typedef struct relock__conn {
    const relock__server *srv;
    /* What the probe learned. */
    char version[32];
    int major, minor, patch;
    unsigned caps;
    int cluster; /* INFO said cluster_enabled:1 (a Redis Cluster node) */
    /* legacy.clock = "server": the server's clock as an offset from our
     * monotonic clock (lease.h). */
    relock__clock_est clock;
} relock__conn;

/* ------------------------------------------------------------------ client and lock */

struct relock__algo;
struct relock__machines;

struct relock_client {
    relock__settings s;
    /* relock_client_cancel_on(): while *cancel is non-zero, a waiting
     * acquire is cancelled through the operation core
     * (src/core/pollloop.c); NULL: never. */
    const volatile sig_atomic_t *cancel;
    relock__conn conn;
    relock_mode mode;
    char mode_reason[256];
    const struct relock__algo *algo;
    char sha[RELOCK__NSCRIPTS][41];
    uint64_t rng;
    uint64_t legacy_noted_at; /* monotonic ms of the last marker write */
    int watch_noted;          /* the watch marker's write (src/core/operation.c) */
    /* The blocking calls' poll loops over the operation core
     * (src/core/pollloop.c): q a quorum's, installed by relock_connect();
     * p one server's (or a quorum's first), made at its first use. */
    struct relock__qpoll *q;
    struct relock__qpoll *p;
    /* Courtesy after releasing a lock others wait for (lock.c). */
    uint64_t yield_key; /* hash of that lock's key */
    uint64_t yield_until; /* monotonic ms */
    relock__err err;
    int sentinel_first; /* the sentinel to ask first: the last that helped */
    /* Counted for tests and the benchmark: MOVED replies followed, and
     * connections opened (connect, log in, probe). */
    unsigned long moved;
    unsigned long connects;
    /* relock_scan_node(): the server a scan walks, "host:port". */
    char scan_node[RELOCK__HOST_MAX + 8];
    /* relock_client_replicas_acked(): -1 when the last call sent no WAIT. */
    int replicas_acked;
};

/* What a lock asks of its keeper (background renewal, src/api/renew.c,
 * which sits above lock.c and owner.c): relock_keep() installs these
 * beside l->keeper, and they are called only while l->keeper is set. */
typedef struct relock__keep_ops {
    /* Stops the renewal; RELOCK_LOST if the lock was lost meanwhile. */
    relock_status (*end)(relock_lock *l);
    /* The validity of the kept lock, from the renewal thread's view. */
    uint64_t (*valid_until)(const relock_lock *l);
    /* A new owner pid and text for the renewals, and in value the value
     * the last renewal wrote: RELOCK_LOST when the renewals found the
     * lock lost. */
    relock_status (*set_owner)(relock_lock *l, long pid, const char *text,
                               char value[RELOCK__VALUE_MAX]);
    /* After set_owner returned RELOCK_OK, no renewal starts until the
     * owner's record write is done and this is called. */
    void (*owner_done)(relock_lock *l);
} relock__keep_ops;

struct relock_lock {
    relock_client *c;
    /* The three strings live in the same allocation, after the struct:
     * a process holding many locks pays for what their names need. */
    char *name;
    char *key;
    char *fence_key;
    char value[RELOCK__VALUE_MAX];
    long long fence;
    long long ttl_ms;
    uint64_t valid_until; /* monotonic ms; 0 when unknown (adopted) */
    uint64_t acquired_at; /* monotonic ms of the acquisition; 0: adopted */
    /* 2.0: the lock's break counter read in the transaction that won it;
     * breaks_known 0 when not read (adopted, or another server). */
    long long breaks;
    /* 2.0: the value an extend's GETSET wrote if it ran, when its reply was
     * lost (malloc'd; NULL otherwise); found in the key while the lock is
     * valid, it is ours (compat/legacy.c). */
    char *unsure_value;
    struct relock__keeper *keeper; /* background renewal, or NULL */
    const struct relock__keep_ops *keep_ops; /* with keeper: its operations */
    /* A lock of an asynchronous client (src/core/renewal.c): its operation in flight
     * and its renewal; NULL for the blocking API's locks. */
    struct relock__alock *al;
    /* With al: what relock_lock_free() calls first, installed by the
     * asynchronous client (so the blocking API never calls up into it);
     * 1 when an operation in flight frees the lock when it ends. */
    int (*al_free)(relock_lock *l);
    /* Legacy and bridge: how often a legacy GETSET loser's write was found
     * in the key and acted on (design.md §4.7). */
    int loser_writes;
    /* Set by a release: how many waiters its notice reached. */
    int waiters;
    /* The flags, a byte each (a process holding many locks pays for each
     * handle). */
    unsigned char lost;
    unsigned char breaks_known;
    unsigned char acquired; /* won by this handle (or its keeper's shadow), not adopted */
    /* Set by a busy attempt that met a holder who never announces its
     * release (a legacy value without TTL): the waiter polls it often
     * near its end (src/algo/engine/waitplan.c). */
    unsigned char legacy_holder;
    /* Set by a waiter for the attempt that follows a release notice: with
     * several servers the release may be half-way through them, and the
     * attempt looks again soon rather than after a backoff (src/algo/quorum.c). */
    unsigned char after_notice;
    /* An acquire attempt of this handle found the lock held: on 2.0 its
     * next attempts read the key before they write (compat/legacy.c). */
    unsigned char looked;
    /* Owner metadata (owner.c): the pid the record names (0: getpid()),
     * when the lock was won (wall seconds; 0: adopted, the time of each
     * write), and the text (malloc'd, or NULL for none). */
    long owner_pid;
    long long owner_since;
    char *owner_text;
};

typedef struct relock__algo {
    const char *name;
    /* Optional: fills what a lock adopted from its value can know (its
     * validity, from a timestamp). */
    void (*adopt)(relock_lock *l);
    /* The algorithm's machines, which the operation core steps on its
     * connections (engine/fan.h) for both APIs. */
    const struct relock__machines *machines;
} relock__algo;

/* Tells the event callback of c's settings, if any, what happened to l
 * (relock_config_set_event_fn()). */
void relock__event(const relock_client *c, relock_event_kind kind, const relock_lock *l,
                   relock_status st, long long waited_ms);
/* The text of l's owner record (owner_info): host, pid, the time the lock
 * was won (or now) and the owner's text, for the owner-record machine
 * (ownrec.h).  Reads the host name, the pid and the wall clock. */
void relock__owner_info(const relock_lock *l, char *info, size_t n);
/* Fairness after a release that woke waiters: the releaser stays away
 * from that lock for a moment.  relock__yield_note() after such a
 * release; relock__yield_ms(): how long an acquire of l waits first. */
void relock__yield_note(relock_lock *l);
long long relock__yield_ms(const relock_lock *l);
/* relock_lock_free()'s work: a lock handle the asynchronous client still
 * uses is freed by it later (l->al_free); a kept one stops its keeper. */
void relock__lock_destroy(relock_lock *l);

#endif
