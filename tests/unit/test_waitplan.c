/*
 * The wait planner (src/algo/engine/waitplan.c): every combination of its
 * inputs over a grid of edge values, checked against the rules of
 * design.md §7 and decisions 28 and 83, and whole waits run
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
static const long long holders[] = {-1, 0, 1, 2, 3, 4, 49, 99, 100, 101, 199, 200, 201, 299,
                               300, 1000, 2100, 8000, 60000, 0x7fffffffLL};
static const long long bounds[] = {0, -1, 1, 5000};
static const long long lefts[] = {-7, 0, 1, 2, 3, 150, 5000};
static const long long backoffs[][2] = {{1, 1}, {1, 200}, {2, 200}, {10, 10}, {50, 10000}};
static const long long margins[] = {0, 1, 50, 1000};
static const uint64_t rnds[] = {0, 12345, 0xffffffffffffffffull};

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* Calls f for every input of the grid; returns how many. */
static long long grid(void (*f)(const relock__wait_in *in))
{
    long long n = 0;
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
             "attempt %u holder %lld silent %d notify %d subscribed %d after_subscribe %d "
             "bound %lld left %lld backoff %lld-%lld margin %lld rnd %llu",
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
        /* No new step once the bound has passed (decision 83). */
        CHECK(p.act == RELOCK__WAIT_TIMEOUT, in);
        return;
    }
    CHECK(p.act != RELOCK__WAIT_BUSY && p.act != RELOCK__WAIT_TIMEOUT, in);
    if (!in->after_subscribe && in->attempt == 0 && in->notify && !in->subscribed) {
        /* The first busy attempt subscribes (decision 28). */
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

/* How long long a sleep is: bounded below and above, never past the bound or
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
    long long backoff = relock__backoff(in->backoff_min_ms, in->backoff_max_ms, capped(in->attempt),
                                   in->holder_ms, in->rnd);
    CHECK(p.sleep_ms <= backoff, in);
    long long want = backoff;
    int window = 0;
    if (in->silent_holder) {
        /* A holder that never announces its release: near its expiry (or
         * when its end is unknown) poll at the legacy rate; before that
         * the backoff, waking at the window's start at the latest. */
        long long lead = RELOCK__LEGACY_WINDOW_MS + 2 * in->skew_margin_ms;
        long long poll = relock__legacy_poll_ms(in->backoff_min_ms);
        if (in->holder_ms < 0 || in->holder_ms <= lead) {
            window = 1;
            if (want > poll)
                want = poll;
        } else {
            if (want > in->holder_ms - lead)
                want = in->holder_ms - lead;
            if (in->bound_ms <= 0 || in->left_ms > in->holder_ms - lead)
                CHECK(p.sleep_ms <= in->holder_ms - lead, in);
        }
    }
    /* Otherwise (a TTL, or a holder that announces its release): the
     * backoff, waking just after the holder's end; always clamped to the
     * bound. */
    if (in->bound_ms > 0 && want > in->left_ms)
        want = in->left_ms;
    CHECK(p.sleep_ms == want, in);
    CHECK(p.window == window, in);
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
    long long n = grid(check_action);
    print_message("%lld combinations\n", n);
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
    long long s = relock__wait_plan_next(&in).sleep_ms;
    assert_true(s >= 100 && s <= 200);
}

/* The window's edges, with the default backoff and a saturated attempt
 * count (a backoff of 100-200 ms). */
static void test_window_edges(void **state)
{
    (void)state;
    relock__wait_in in = base_in();
    in.attempt = 40;
    in.silent_holder = 1;
    in.holder_ms = RELOCK__LEGACY_WINDOW_MS + 1; /* 1 ms before the window */
    relock__wait_plan p = relock__wait_plan_next(&in);
    assert_int_equal(p.sleep_ms, 1);
    assert_int_equal(p.window, 0);
    in.holder_ms = RELOCK__LEGACY_WINDOW_MS; /* its first ms */
    p = relock__wait_plan_next(&in);
    assert_int_equal(p.window, 1);
    assert_true(p.sleep_ms >= 1 && p.sleep_ms <= 4);
    in.holder_ms = 3; /* wake just after the end, not a poll later */
    assert_int_equal(relock__wait_plan_next(&in).sleep_ms, 4);
    in.holder_ms = 1;
    assert_int_equal(relock__wait_plan_next(&in).sleep_ms, 2);
    in.holder_ms = -1; /* the end unknown: it may be near */
    p = relock__wait_plan_next(&in);
    assert_int_equal(p.window, 1);
    assert_true(p.sleep_ms <= 4);
    /* The skew margin widens the window by twice itself: classic clients
     * whose clocks run up to the margin ahead find the holder expired
     * that much earlier than the holder's end less the margin. */
    in.skew_margin_ms = 50;
    in.holder_ms = RELOCK__LEGACY_WINDOW_MS + 100;
    assert_int_equal(relock__wait_plan_next(&in).window, 1);
    in.holder_ms = RELOCK__LEGACY_WINDOW_MS + 101;
    p = relock__wait_plan_next(&in);
    assert_int_equal(p.window, 0);
    assert_int_equal(p.sleep_ms, 1);
    /* Far from the window: the backoff. */
    in.holder_ms = 8000;
    p = relock__wait_plan_next(&in);
    assert_int_equal(p.window, 0);
    assert_true(p.sleep_ms >= 100 && p.sleep_ms <= 200);
    /* A holder with a TTL or that announces its release: no window. */
    in.silent_holder = 0;
    in.holder_ms = 50;
    p = relock__wait_plan_next(&in);
    assert_int_equal(p.window, 0);
    assert_int_equal(p.sleep_ms, 51);
}

/*
 * Whole waits against a virtual clock, as the operation core's waiter runs them
 * (attempts take no time; notices never come): a holder whose lease ends
 * at `end` (our reckoning, ms from the start of the wait) and that
 * releases by DEL at `del` (-1: never).  Returns when the lock was
 * acquired; counts the attempts before `upto` and in [from, to).
 */
typedef struct sim {
    long long end, del;
    int silent;
    long long margin;
    long long upto, from, to;
    long long early, in_window; /* out */
    long long attempts;         /* out */
} sim;

static long long run_wait(sim *s, uint64_t seed)
{
    long long t = 0;
    int subscribed = 0;
    for (unsigned attempt = 0; attempt < 100000; attempt++) {
        s->attempts++;
        if (t < s->upto)
            s->early++;
        if (t >= s->from && t < s->to)
            s->in_window++;
        if (t >= s->end || (s->del >= 0 && t >= s->del))
            return t; /* acquired */
        relock__wait_in in = base_in();
        in.attempt = attempt;
        in.holder_ms = s->end - t;
        in.silent_holder = s->silent;
        in.subscribed = subscribed;
        in.skew_margin_ms = s->margin;
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        in.rnd = seed >> 11;
        relock__wait_plan p = relock__wait_plan_next(&in);
        if (p.act == RELOCK__WAIT_SUBSCRIBE) {
            subscribed = 1;
            in.subscribed = 1;
            in.after_subscribe = 1;
            p = relock__wait_plan_next(&in);
        }
        if (p.act == RELOCK__WAIT_RETRY)
            continue;
        assert_int_equal(p.act, RELOCK__WAIT_SLEEP);
        assert_true(p.sleep_ms >= 1);
        t += p.sleep_ms;
    }
    fail_msg("the wait did not end");
    return -1;
}

/* A silent holder 8 s from its end: few looks in the first 4 s, the
 * legacy rate (every 4 ms) in the last 100 ms, the lock taken within 1 ms
 * of the end. */
static void test_sim_far_expiry(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 200; seed++) {
        sim s = {8000, -1, 1, 0, 4000, 8000 - RELOCK__LEGACY_WINDOW_MS, 8000, 0, 0, 0};
        long long got = run_wait(&s, seed);
        assert_true(got >= 8000 && got <= 8001);
        /* 2 ms backoff doubling to 200: about 30 looks in 4 s, never the
         * 1000 of a legacy rate. */
        if (s.early > 60)
            fail_msg("seed %llu: %lld attempts in the first 4 s", (unsigned long long)seed,
                     s.early);
        /* Every 4 ms in the window: 25, give or take the edges. */
        if (s.in_window < 24)
            fail_msg("seed %llu: only %lld attempts in the last 100 ms", (unsigned long long)seed,
                     s.in_window);
        /* The whole wait: the two parts and little else. */
        assert_true(s.attempts < 120);
    }
}

/* With a skew margin the window reaches further back: from the end less
 * twice the margin, less the window. */
static void test_sim_margin(void **state)
{
    (void)state;
    sim s = {8000, -1, 1, 1000, 4000, 8000 - 2000 - RELOCK__LEGACY_WINDOW_MS, 8000, 0, 0, 0};
    long long got = run_wait(&s, 7);
    assert_true(got >= 8000 && got <= 8001);
    assert_true(s.in_window >= (2000 + RELOCK__LEGACY_WINDOW_MS) / 4 - 1);
    assert_true(s.early < 60);
}

/* A silent holder's early DEL (far from its end) is seen within one
 * backoff: at most backoff_max_ms (200) late. */
static void test_sim_early_del(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 200; seed++) {
        for (long long del = 0; del < 3000; del += 97) {
            sim s = {8000, del, 1, 0, 0, 0, 0, 0, 0, 0};
            long long got = run_wait(&s, seed);
            assert_true(got >= del);
            assert_true(got <= del + 200);
        }
    }
}

/* The end unknown, or a holder that announces its release: as before. */
static void test_sim_other_holders(void **state)
{
    (void)state;
    /* A TTL 8 s away: backoff only, the lock taken within 1 ms of its end. */
    sim s = {8000, -1, 0, 0, 8000, 7900, 8000, 0, 0, 0};
    long long got = run_wait(&s, 3);
    assert_true(got >= 8000 && got <= 8001);
    assert_true(s.in_window <= 2);
    assert_true(s.early < 80);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grid_actions),         cmocka_unit_test(test_grid_sleeps),
        cmocka_unit_test(test_grid_deterministic),   cmocka_unit_test(test_subscribe_then_retry),
        cmocka_unit_test(test_bound),                cmocka_unit_test(test_holder_end),
        cmocka_unit_test(test_window_edges),         cmocka_unit_test(test_sim_far_expiry),
        cmocka_unit_test(test_sim_margin),           cmocka_unit_test(test_sim_early_del),
        cmocka_unit_test(test_sim_other_holders),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
