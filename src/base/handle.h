/* The client and lock handles, the facts of a machine's server and the
 * algorithm table: the data every layer above the leaves reads. */
#ifndef RELOCK_HANDLE_H
#define RELOCK_HANDLE_H

#include <signal.h>

#include <hiredis/hiredis.h>

#include "base.h"

/* ------------------------------------------------------------------ connections */

/* The facts of the server a step machine runs on, as the probe learned
 * them (the operation core loads its connection's before each step). */
typedef struct relock__conn {
    const relock__server *srv;
    char version[32];
    int major, minor, patch;
    unsigned caps;
    int cluster; /* INFO said cluster_enabled:1 (a Redis Cluster node) */
    relock__clock_est clock; /* legacy.clock = "server" (lease.h) */
} relock__conn;

/* ------------------------------------------------------------------ client and lock */

struct relock__algo;
struct relock__machines;

struct relock_client {
    relock__settings s;
    /* relock_client_cancel_on(): while *cancel is non-zero, a waiting
     * acquire is cancelled (src/core/pollloop.c); NULL: never. */
    const volatile sig_atomic_t *cancel;
    relock__conn conn;
    relock_mode mode;
    char mode_reason[256];
    const struct relock__algo *algo;
    char sha[RELOCK__NSCRIPTS][41];
    uint64_t rng;
    unsigned char rnd[256]; /* random bytes for tokens (relock__token_for()) */
    int rnd_left;
    unsigned long rnd_forks; /* relock__forks() when rnd was filled */
    uint64_t legacy_noted_at; /* monotonic ms of the last marker write */
    int watch_noted;          /* the watch marker's write (src/core/operation.c) */
    /* The blocking calls' poll loops (src/core/pollloop.c): q a quorum's,
     * from relock_connect(); p one server's, made at its first use. */
    struct relock__qpoll *q;
    struct relock__qpoll *p;
    /* Courtesy after releasing a lock others wait for (lock.c). */
    uint64_t yield_key; /* hash of that lock's key */
    uint64_t yield_until; /* monotonic ms */
    relock__err err;
    int sentinel_first; /* the sentinel to ask first: the last that helped */
    /* For tests and the benchmark. */
    unsigned long moved;    /* MOVED replies followed */
    unsigned long connects; /* connections opened */
    char scan_node[RELOCK__HOST_MAX + 8]; /* relock_scan_node(): "host:port" a scan walks */
    int replicas_acked; /* relock_client_replicas_acked(): -1, the last call sent no WAIT */
};

/* What a lock asks of its keeper (background renewal, src/api/renew.c,
 * above lock.c), installed by relock_keep() beside l->keeper
 * and called only while it is set. */
typedef struct relock__keep_ops {
    /* Stops the renewal; RELOCK_LOST if the lock was lost meanwhile. */
    relock_status (*end)(relock_lock *l);
    /* The validity of the kept lock, from the renewal thread's view. */
    uint64_t (*valid_until)(const relock_lock *l);
    /* A new owner pid and text for the renewals; value: what the last
     * renewal wrote.  RELOCK_LOST when the renewals found the lock lost. */
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
    char *unsure_value; /* 2.0: what a GETSET wrote, its reply lost (legacy.c); malloc'd */
    struct relock__keeper *keeper; /* background renewal, or NULL */
    const struct relock__keep_ops *keep_ops; /* with keeper: its operations */
    /* An asynchronous client's lock (src/core/renewal.c): its operation
     * in flight and its renewal; NULL for the blocking API's locks. */
    struct relock__alock *al;
    /* With al: what relock_lock_free() calls first (so the blocking API
     * never calls up); 1 when an operation in flight frees it later. */
    int (*al_free)(relock_lock *l);
    int loser_writes; /* legacy and bridge: GETSET losers' writes acted on (design.md §4.7) */
    int waiters;      /* set by a release: how many waiters its notice reached */
    /* Flags, a byte each (a process may hold many locks). */
    unsigned char lost;
    unsigned char breaks_known;
    unsigned char acquired; /* won by this handle (or its keeper's shadow), not adopted */
    /* A busy attempt met a holder who never announces its release (a
     * legacy value without TTL): the waiter polls often near its end. */
    unsigned char legacy_holder;
    /* The attempt after a release notice: with several servers the release
     * may be half-way through them, so it retries soon, not after a backoff. */
    unsigned char after_notice;
    unsigned char looked; /* an attempt found it held: on 2.0 the next read first (ts.h) */
    /* Owner metadata (src/api/lock.c): the pid (0: getpid()), when the lock was
     * won (wall seconds; 0, adopted: each write's time) and the text
     * (malloc'd, or NULL). */
    long owner_pid;
    long long owner_since;
    char *owner_text;
};

typedef struct relock__algo {
    const char *name;
    /* Optional: what a lock adopted from its value can know (validity). */
    void (*adopt)(relock_lock *l);
    /* Its machines, stepped by the operation core (engine/fan.h). */
    const struct relock__machines *machines;
} relock__algo;

/* Tells the event callback of c's settings, if any, what happened to l
 * (relock_config_set_event_fn()). */
void relock__event(const relock_client *c, relock_event_kind kind, const relock_lock *l,
                   relock_status st, long long waited_ms);
/* The text of l's owner record (owner_info): host, pid, the time the lock
 * was won (or now) and the owner's text (ownrec.h). */
void relock__owner_info(const relock_lock *l, char *info, size_t n);
/* Fairness after a release that woke waiters: the releaser stays away
 * from that lock for a moment.  relock__yield_note() after such a
 * release; relock__yield_ms(): how long an acquire of l waits first. */
void relock__yield_note(relock_lock *l);
long long relock__yield_ms(const relock_lock *l);
/* relock_lock_free()'s work: one the asynchronous client still uses is
 * freed by it later (l->al_free); a kept one stops its keeper. */
void relock__lock_destroy(relock_lock *l);

#endif
