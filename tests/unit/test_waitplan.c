/*
 * The wait planner (src/engine/waitplan.c): every combination of its
 * inputs over a grid of edge values, checked against the rules of DESIGN
 * §5 and docs/decisions.md (entries 28 and 83), and whole waits run
 * against a virtual clock.  Pure logic: no server.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

#include "engine/waitplan.h"

static const unsigned attempts[] = {0, 1, 2, 5, 29, 30, 31, 1000, UINT_MAX};
static const long holders[] = {-1, 0, 1, 2, 3, 4, 49, 99, 100, 101, 199, 200, 201, 299,
                               300, 1000, 2100, 8000, 60000, 0x7fffffffL};
static const long bounds[] = {0, -1, 1, 5000};
static const long lefts[] = {-7, 0, 1, 2, 3, 150, 5000};
static const long backoffs[][2] = {{1, 1}, {1, 200}, {2, 200}, {10, 10}, {50, 10000}};
static const long margins[] = {0, 1, 50, 1000};
static const uint64_t rnds[] = {0, 12345, 0xffffffffffffffffull};

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* Calls f for every input of the grid; returns how many. */
static long grid(void (*f)(const relock__wait_in *in))
{
    long n = 0;
    relock__wait_in in;
    for (size_t a = 0; a < N(attempts); a++)
        for (size_t h = 0; h < N(holders); h++)
            for (int silent = 0; silent <= 1; silent++)
                for (int bits = 0; bits < 8; bits++)
                    for (size_t b = 0; b < N(bounds); b++)
                        for (size_t lf = 0; lf < N(lefts); lf++)
                            for (size_t bo = 0; bo < N(backoffs); bo++)
                                for (size_t m = 0; m < N(margins); m++)
                                    for (size_t r = 0; r < N(rnds); r++) {
                                        in.attempt = attempts[a];
                                        in.holder_ms = holders[h];
                                        in.silent_holder = silent;
                                        in.notify = bits & 1;
                                        in.subscribed = (bits >> 1) & 1;
                                        in.after_subscribe = (bits >> 2) & 1;
                                        in.bound_ms = bounds[b];
                                        in.left_ms = lefts[lf];
                                        in.backoff_min_ms = backoffs[bo][0];
                                        in.backoff_max_ms = backoffs[bo][1];
                                        in.skew_margin_ms = margins[m];
                                        in.rnd = rnds[r];
                                        f(&in);
                                        n++;
                                    }
    return n;
}

static void describe(const relock__wait_in *in, char *buf, size_t len)
{
    snprintf(buf, len,
             "attempt %u holder %ld silent %d notify %d subscribed %d after_subscribe %d "
             "bound %ld left %ld backoff %ld-%ld margin %ld rnd %llu",
             in->attempt, in->holder_ms, in->silent_holder, in->notify, in->subscribed,
             in->after_subscribe, in->bound_ms, in->left_ms, in->backoff_min_ms,
             in->backoff_max_ms, in->skew_margin_ms, (unsigned long long)in->rnd);
}

#define CHECK(cond, in)                                                                        \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            char d_[400];                                                                      \
            describe(in, d_, sizeof d_);                                                       \
            fail_msg("%s: %s", #cond, d_);                                                     \
        }                                                                                      \
    } while (0)

static unsigned capped(unsigned attempt)
{
    return attempt < RELOCK__BACKOFF_ATTEMPTS_MAX ? attempt : RELOCK__BACKOFF_ATTEMPTS_MAX;
}

/* Which action: the rules in the order the planner must apply them. */
static void check_action(const relock__wait_in *in)
{
    relock__wait_plan p = relock__wait_plan_next(in);
    int bounded = in->bound_ms > 0;
    if (in->bound_ms == 0) {
        /* A single try never waits, subscribes or times out. */
        CHECK(p.act == RELOCK__WAIT_BUSY, in);
        return;
    }
    if (bounded && in->left_ms <= 0) {
        /* No new step once the bound has passed (entry 83). */
        CHECK(p.act == RELOCK__WAIT_TIMEOUT, in);
        return;
    }
    CHECK(p.act != RELOCK__WAIT_BUSY && p.act != RELOCK__WAIT_TIMEOUT, in);
    if (!in->after_subscribe && in->attempt == 0 && in->notify && !in->subscribed) {
        /* The first busy attempt subscribes (entry 28). */
        CHECK(p.act == RELOCK__WAIT_SUBSCRIBE, in);
        return;
    }
    CHECK(p.act != RELOCK__WAIT_SUBSCRIBE, in);
    if (in->after_subscribe && in->subscribed) {
        /* ... and then looks again at once. */
        CHECK(p.act == RELOCK__WAIT_RETRY, in);
        return;
    }
    CHECK(p.act == RELOCK__WAIT_SLEEP, in);
}

/* How long a sleep is: bounded below and above, never past the bound or
 * the holder's known end. */
static void check_sleep(const relock__wait_in *in)
{
    relock__wait_plan p = relock__wait_plan_next(in);
    if (p.act != RELOCK__WAIT_SLEEP)
        return;
    CHECK(p.sleep_ms >= 1, in);
    if (in->bound_ms > 0)
        CHECK(p.sleep_ms <= in->left_ms, in);
    CHECK(p.sleep_ms <= in->backoff_max_ms, in);
    if (in->holder_ms >= 0)
        CHECK(p.sleep_ms <= in->holder_ms + 1, in);
    long backoff = relock__backoff(in->backoff_min_ms, in->backoff_max_ms, capped(in->attempt),
                                   in->holder_ms, in->rnd);
    CHECK(p.sleep_ms <= backoff, in);
    if (!in->silent_holder) {
        /* A holder that announces its release or carries a TTL: the
         * backoff, waking just after its end, clamped to the bound. */
        long want = backoff;
        if (in->bound_ms > 0 && want > in->left_ms)
            want = in->left_ms;
        CHECK(p.sleep_ms == want, in);
        CHECK(p.window == 0, in);
    }
}

/* The same inputs give the same plan (the simulator replays on it). */
static void check_deterministic(const relock__wait_in *in)
{
    relock__wait_plan a = relock__wait_plan_next(in);
    relock__wait_plan b = relock__wait_plan_next(in);
    CHECK(a.act == b.act && a.sleep_ms == b.sleep_ms && a.window == b.window, in);
}

static void test_grid_actions(void **state)
{
    (void)state;
    long n = grid(check_action);
    print_message("%ld combinations\n", n);
    assert_true(n > 1000000);
}

static void test_grid_sleeps(void **state)
{
    (void)state;
    grid(check_sleep);
}

static void test_grid_deterministic(void **state)
{
    (void)state;
    grid(check_deterministic);
}

static relock__wait_in base_in(void)
{
    relock__wait_in in = {0};
    in.attempt = 3;
    in.holder_ms = -1;
    in.notify = 1;
    in.bound_ms = -1;
    in.backoff_min_ms = 2;
    in.backoff_max_ms = 200;
    in.rnd = 7;
    return in;
}

/* The subscription's two steps as the driver takes them. */
static void test_subscribe_then_retry(void **state)
{
    (void)state;
    relock__wait_in in = base_in();
    in.attempt = 0;
    in.holder_ms = 5000;
    assert_int_equal(relock__wait_plan_next(&in).act, RELOCK__WAIT_SUBSCRIBE);
    in.after_subscribe = 1;
    in.subscribed = 1;
    assert_int_equal(relock__wait_plan_next(&in).act, RELOCK__WAIT_RETRY);
    /* A subscription that failed: wait without notices, attempt 0's
     * backoff (2 ms at most). */
    in.subscribed = 0;
    relock__wait_plan p = relock__wait_plan_next(&in);
    assert_int_equal(p.act, RELOCK__WAIT_SLEEP);
    assert_true(p.sleep_ms >= 1 && p.sleep_ms <= 2);
    /* The bound passed during the subscription: no look after it. */
    in.subscribed = 1;
    in.bound_ms = 10;
    in.left_ms = 0;
    assert_int_equal(relock__wait_plan_next(&in).act, RELOCK__WAIT_TIMEOUT);
    /* Notices off: never a subscription. */
    in = base_in();
    in.attempt = 0;
    in.notify = 0;
    assert_int_equal(relock__wait_plan_next(&in).act, RELOCK__WAIT_SLEEP);
}

static void test_bound(void **state)
{
    (void)state;
    relock__wait_in in = base_in();
    in.bound_ms = 0;
    assert_int_equal(relock__wait_plan_next(&in).act, RELOCK__WAIT_BUSY);
    in.bound_ms = 1000;
    in.left_ms = 3;
    in.attempt = 20; /* a backoff of 100-200 ms, clamped to what is left */
    relock__wait_plan p = relock__wait_plan_next(&in);
    assert_int_equal(p.act, RELOCK__WAIT_SLEEP);
    assert_int_equal(p.sleep_ms, 3);
    in.left_ms = 0;
    assert_int_equal(relock__wait_plan_next(&in).act, RELOCK__WAIT_TIMEOUT);
    in.left_ms = -1;
    assert_int_equal(relock__wait_plan_next(&in).act, RELOCK__WAIT_TIMEOUT);
    /* Without a bound, left_ms means nothing. */
    in.bound_ms = -1;
    assert_int_equal(relock__wait_plan_next(&in).act, RELOCK__WAIT_SLEEP);
}

static void test_holder_end(void **state)
{
    (void)state;
    relock__wait_in in = base_in();
    in.attempt = 20;
    in.holder_ms = 7; /* a TTL ending in 7 ms: wake just after */
    assert_int_equal(relock__wait_plan_next(&in).sleep_ms, 8);
    in.holder_ms = 0; /* released or taken over meanwhile: look again soon */
    assert_int_equal(relock__wait_plan_next(&in).sleep_ms, 1);
    in.holder_ms = 100000; /* far: the backoff */
    long s = relock__wait_plan_next(&in).sleep_ms;
    assert_true(s >= 100 && s <= 200);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grid_actions),         cmocka_unit_test(test_grid_sleeps),
        cmocka_unit_test(test_grid_deterministic),   cmocka_unit_test(test_subscribe_then_retry),
        cmocka_unit_test(test_bound),                cmocka_unit_test(test_holder_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
