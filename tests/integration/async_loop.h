/*
 * What the asynchronous client's tests on testloop.h (test_async.c,
 * test_async_quorum.c, test_async_safety.c, test_cluster_facts.c) share:
 * one operation's outcome, recorded by its callback (async_outcome.h), run
 * to its end.  Included by one test source each (static functions).
 */
#ifndef RELOCK_TEST_ASYNC_LOOP_H
#define RELOCK_TEST_ASYNC_LOOP_H

#include "async_outcome.h"
#include "relock.h"
#include "relock_async.h"
#include "testloop.h"

/* Runs one operation to its end (bounded by ms); fails the test when it
 * did not end. */
static inline outcome *finish(outcome *o, long ms)
{
    if (run_until(&o->calls, 1, ms) != 1)
        fail_msg("an operation did not end within %ld ms", ms);
    return o;
}

#endif
