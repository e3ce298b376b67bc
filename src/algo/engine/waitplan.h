/*
 * The wait planner (design.md §7.1): what a waiter does after an attempt
 * found the lock held.  Pure (the jitter's random bits come in), so the
 * waiter and the unit tests take the same decisions from the same inputs.
 *
 * The waiter sleeps until the first of a release notice, the holder's
 * known end, or a jittered, growing backoff, never past the caller's
 * bound.  A holder that never announces its release (a legacy value
 * without TTL) is polled at the classic clients' rate only in a window
 * around its expiry, where they race for the lock (decision 150).
 */
#ifndef RELOCK_ENGINE_WAITPLAN_H
#define RELOCK_ENGINE_WAITPLAN_H

#include <stdint.h>

/* The expiry window of a silent holder starts this long, plus twice the
 * skew margin, before the holder's end as the waiter reckons it. */
#define RELOCK__LEGACY_WINDOW_MS 100L

/* Attempts beyond this count back off no further (the doubling is capped
 * long before: 2 << 30 ms exceeds any backoff_max_ms). */
#define RELOCK__BACKOFF_ATTEMPTS_MAX 30u

typedef enum relock__wait_act {
    /* A single try (wait bound 0): the lock is held, give up with BUSY. */
    RELOCK__WAIT_BUSY = 0,
    /* The wait bound has passed: give up with TIMEOUT. */
    RELOCK__WAIT_TIMEOUT,
    /* Subscribe to the lock's release notices, then plan again with
     * after_subscribe set (the subscription may have failed). */
    RELOCK__WAIT_SUBSCRIBE,
    /* Attempt again at once: a release between the last attempt and the
     * subscription would otherwise go unheard. */
    RELOCK__WAIT_RETRY,
    /* Sleep sleep_ms (waking early on a release notice), then attempt
     * again. */
    RELOCK__WAIT_SLEEP
} relock__wait_act;

typedef struct relock__wait_in {
    /* Busy attempts before the one that just failed (0: it was the first). */
    unsigned attempt;
    /* The holder's remaining ms as the last attempt learned it (PTTL, or
     * when this waiter may take over a timestamp), -1 unknown, 0 look
     * again soon. */
    long long holder_ms;
    /* The holder never announces its release (a legacy value without TTL;
     * in legacy mode every holder). */
    int silent_holder;
    /* wait.notify: release notices are wanted. */
    int notify;
    /* A subscription for release notices is live. */
    int subscribed;
    /* This plan follows a RELOCK__WAIT_SUBSCRIBE for the same attempt. */
    int after_subscribe;
    /* The caller's wait bound in ms: 0 a single try, < 0 none. */
    long long bound_ms;
    /* With a bound: ms left until it passes (<= 0: passed). */
    long long left_ms;
    /* wait.backoff_min_ms and wait.backoff_max_ms (1 <= min <= max). */
    long long backoff_min_ms;
    long long backoff_max_ms;
    /* legacy.skew_margin_ms (>= 0): how early a classic client may find
     * the holder expired. */
    long long skew_margin_ms;
    /* Random bits for the jitter. */
    uint64_t rnd;
} relock__wait_in;

typedef struct relock__wait_plan {
    relock__wait_act act;
    long long sleep_ms; /* RELOCK__WAIT_SLEEP: how long, >= 1 */
    int window;    /* RELOCK__WAIT_SLEEP: 1 when polling a silent holder near its expiry */
} relock__wait_plan;

/* The next step of a waiter whose attempt found the lock held. */
relock__wait_plan relock__wait_plan_next(const relock__wait_in *in);

/* Backoff before the next attempt: exponential from min to max with
 * jitter in [d/2, d], but no later than just after the holder's known end
 * (hint_ms >= 0).  At least 1 ms. */
long long relock__backoff(long long min_ms, long long max_ms, unsigned attempt, long long hint_ms,
                          uint64_t rnd);

/* The poll interval near a silent holder's expiry: about as often as
 * classic clients look (design.md §7.3). */
long long relock__legacy_poll_ms(long long backoff_min_ms);

#endif
