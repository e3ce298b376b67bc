/* Modern mode's step machines (modern.c): one acquire attempt, and the
 * compare-and-X that releases or extends. */
#ifndef RELOCK_MODERN_H
#define RELOCK_MODERN_H

#include "engine/engine.h"

/* Which way a machine writes (chosen at its first step from the server's
 * capabilities and the settings; kept for tests and traces). */
enum relock__modern_way {
    RELOCK__MW_NONE = 0,
    RELOCK__MW_PLAIN,    /* acquire: SET NX PX (no fencing) */
    RELOCK__MW_SCRIPT,   /* acquire: the fenced script; release/extend: a script */
    RELOCK__MW_WATCH,    /* WATCH, GET, MULTI, the write, EXEC (no Lua) */
    RELOCK__MW_DELIFEQ,  /* release: DELIFEQ (Valkey 9.0) */
    RELOCK__MW_DELEX,    /* release: DELEX IFEQ (Redis 8.4) */
    RELOCK__MW_SET_IFEQ, /* extend: SET IFEQ PX (Valkey 8.1, Redis 8.4) */
    RELOCK__MW_TAKEOVER  /* acquire: the takeover of an expired legacy leftover */
};

/*
 * One acquire attempt.  Before the first step the driver puts a fresh
 * token into l->value and zeroes the machine (relock__modern_acq_init);
 * the outcome is the head's st: RELOCK_OK (l->fence and l->valid_until
 * set), RELOCK_BUSY with head.hint_ms, or a failure recorded on l->c->err.
 */
typedef struct relock__modern_acq {
    relock__mhead h;
    int way;          /* enum relock__modern_way (TAKEOVER: `expected` is compared) */
    int by_eval;      /* the script goes by EVAL (the server said NOSCRIPT) */
    int readback;     /* resolving a lost acquire by reading the key back */
    uint64_t start;   /* monotonic ms of the first step: validity counts from it */
    char found[RELOCK__VALUE_MAX]; /* the value met in the key (cut to fit) */
    int has;                       /* the key held a string */
    long long pttl;                /* its PTTL (-2 absent, -1 none) */
    char expected[RELOCK__VALUE_MAX]; /* the leftover to take over */
} relock__modern_acq;

void relock__modern_acq_init(relock__modern_acq *m);
relock__step relock__modern_acq_step(void *m, relock_lock *l, const relock__feed *in,
                                     relock__batch *out);

/*
 * Release, or extend to a lease of ttl_ms, by compare-and-delete or
 * compare-and-set of our value.  RELOCK_OK (a release sets l->waiters; an
 * extend l->ttl_ms and l->valid_until), RELOCK_LOST, RELOCK_EAMBIGUOUS when
 * the write may have run, or a failure.
 */
typedef struct relock__modern_cx {
    relock__mhead h;
    int extend;     /* 0: release; 1: extend */
    long long ttl_ms; /* extend: the new lease */
    int way;        /* enum relock__modern_way */
    int by_eval;
    int tries;      /* WATCH rounds begun */
    int absent;     /* WATCH way: the key was absent at the GET */
    int notify;     /* the release notice is sent (wait.notify) */
    uint64_t start; /* monotonic ms of the first step (extend's validity) */
    char chan[RELOCK__KEY_MAX]; /* the release notice's channel, or "" */
} relock__modern_cx;

void relock__modern_cx_init(relock__modern_cx *m, int extend, long long ttl_ms);
relock__step relock__modern_cx_step(void *m, relock_lock *l, const relock__feed *in,
                                    relock__batch *out);

/* WATCH rounds of a compare-and-X, at most: our own lock's key is written
 * by nobody else while it is ours. */
#define RELOCK__MODERN_WATCH_TRIES 5

/* The modern algorithm's machines, for the operation core. */
extern const struct relock__machines relock__modern_machines;

#endif
