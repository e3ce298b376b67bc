/*
 * What the asynchronous client's tests record of an operation's end (its
 * callback) and of a kept lock's loss (its lost callback).  Header only,
 * with no event loop, so that a program turning its loops through
 * tests/support/both.c includes it as well as one on testloop.h
 * (async_loop.h).  Inline functions: a program uses what it needs.
 */
#ifndef RELOCK_TEST_ASYNC_OUTCOME_H
#define RELOCK_TEST_ASYNC_OUTCOME_H

#include <stdint.h>
#include <stdio.h>

#include "relock.h"
#include "relock_async.h"
#include "testutil.h"

/* One operation's outcome. */
typedef struct outcome {
    long calls;
    relock_status st;
    relock_lock *l;
    char msg[512];
    uint64_t at;
} outcome;

static inline void record(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                   void *arg)
{
    (void)a;
    outcome *o = arg;
    o->calls++;
    o->st = st;
    o->l = l;
    o->at = tu_now_ms();
    snprintf(o->msg, sizeof o->msg, "%s", e ? e->message : "");
}

/* One kept lock's loss. */
typedef struct lostrec {
    long calls;
    relock_status why;
    uint64_t at;
    char msg[512];
} lostrec;

static inline void record_lost(relock_async *a, relock_lock *l, relock_status why, const relock_error *e,
                    void *arg)
{
    (void)a, (void)l;
    lostrec *r = arg;
    r->calls++;
    r->why = why;
    r->at = tu_now_ms();
    snprintf(r->msg, sizeof r->msg, "%s", e ? e->message : "");
}

#endif
