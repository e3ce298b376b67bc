/* Backoff between attempts: bounded, jittered, and aware of the holder's end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "engine/waitplan.h"
#include "internal.h"

static void test_grows_and_caps(void **state)
{
    (void)state;
    uint64_t rng = 12345;
    long prev_max = 0;
    for (unsigned attempt = 0; attempt < 40; attempt++) {
        long max_seen = 0;
        for (int i = 0; i < 200; i++) {
            long d = relock__backoff(2, 200, attempt, -1, relock__rand64(&rng));
            assert_true(d >= 1);
            assert_true(d <= 200);
            if (d > max_seen)
                max_seen = d;
        }
        assert_true(max_seen >= prev_max / 2); /* never shrinks much */
        prev_max = max_seen;
    }
    assert_true(prev_max > 100); /* reaches the cap region */
}

static void test_jitter_spreads(void **state)
{
    (void)state;
    uint64_t rng = 99;
    long lo = 1000, hi = 0;
    for (int i = 0; i < 1000; i++) {
        long d = relock__backoff(2, 200, 20, -1, relock__rand64(&rng));
        if (d < lo)
            lo = d;
        if (d > hi)
            hi = d;
    }
    assert_true(lo >= 100);
    assert_true(hi <= 200);
    assert_true(hi - lo > 50); /* waiters do not move in lockstep */
}

static void test_hint_wakes_at_holder_end(void **state)
{
    (void)state;
    /* The holder's lease ends in 7 ms: wake just after, not 200 ms later. */
    assert_int_equal(relock__backoff(2, 200, 20, 7, 1), 8);
    assert_int_equal(relock__backoff(2, 200, 20, 0, 1), 1);
    /* A far end does not stretch the backoff past its cap. */
    assert_true(relock__backoff(2, 200, 20, 100000, 1) <= 200);
}

static void test_drift_and_validity(void **state)
{
    (void)state;
    assert_int_equal(relock__drift_ms(10000), 102);
    assert_int_equal(relock__valid_until(1000, 10000), 1000 + 10000 - 102);
    /* A lease shorter than the drift allowance is never valid. */
    assert_int_equal(relock__valid_until(1000, 1), 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grows_and_caps),
        cmocka_unit_test(test_jitter_spreads),
        cmocka_unit_test(test_hint_wakes_at_holder_end),
        cmocka_unit_test(test_drift_and_validity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
