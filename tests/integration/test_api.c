/*
 * The public API's promises that need a real redis-server: durations of
 * one year pass through every call that takes or returns milliseconds
 * (they do not fit 32 bits), in every mode.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "relock.h"
#include "testclient.h"
#include "testutil.h"

#define YEAR_MS 31536000000LL /* 365 days: the longest lease and wait relock takes */
#define INT32_MS 2147483647LL
/* Generous: the time between an acquire and the checks that follow it. */
#define SLACK_MS 60000LL

/* Every duration of the public API is a long long, by type, so that a
 * platform whose long has 32 bits carries a year too (this one's long has
 * 64, which the round trips below cannot tell apart). */
#define HAS_TYPE(f, type) _Generic(&(f), type: 1, default: 0)
_Static_assert(HAS_TYPE(relock_acquire, relock_status (*)(relock_client *, const char *, long long,
                                                          long long, relock_lock **)),
               "relock_acquire: ttl_ms and wait_ms are long long");
_Static_assert(HAS_TYPE(relock_try_acquire,
                        relock_status (*)(relock_client *, const char *, long long, relock_lock **)),
               "relock_try_acquire: ttl_ms is long long");
_Static_assert(HAS_TYPE(relock_extend, relock_status (*)(relock_lock *, long long)),
               "relock_extend: ttl_ms is long long");
_Static_assert(HAS_TYPE(relock_lock_adopt,
                        relock_status (*)(relock_client *, const char *, const char *, long long,
                                          long long, relock_lock **)),
               "relock_lock_adopt: ttl_ms is long long");
_Static_assert(HAS_TYPE(relock_lock_validity_ms, long long (*)(const relock_lock *)),
               "relock_lock_validity_ms returns long long");
_Static_assert(HAS_TYPE(relock_config_ttl_ms, long long (*)(const relock_config *)),
               "relock_config_ttl_ms returns long long");
_Static_assert(HAS_TYPE(relock_config_wait_ms, long long (*)(const relock_config *)),
               "relock_config_wait_ms returns long long");
_Static_assert(RELOCK_DURATION_MAX_MS == YEAR_MS, "the longest duration is a year");

static long long srv_int(const char *fmt, const char *key)
{
    char *v = testsrv_cmd(&tu_srv, fmt, key);
    assert_non_null(v);
    long long n = atoll(v);
    free(v);
    return n;
}

static long long wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A year, in milliseconds, lies in (YEAR_MS - SLACK_MS, YEAR_MS + 1 s]:
 * timestamps and the bridge TTL add legacy.expiry_offset (one unit). */
static void assert_about_a_year(const char *what, long long ms)
{
    if (ms <= YEAR_MS - SLACK_MS || ms > YEAR_MS + 1000)
        fail_msg("%s: %lld ms, expected about one year (%lld ms)", what, ms, YEAR_MS);
}

/* The validity of a year's lease: the year less the clock-drift allowance
 * (1 % + 2 ms) and the time since. */
static void assert_year_validity(const char *what, long long ms)
{
    long long full = YEAR_MS - (YEAR_MS / 100 + 2);
    if (ms <= full - SLACK_MS || ms > full)
        fail_msg("%s: %lld ms, expected about %lld ms", what, ms, full);
}

static void test_config_year(void **state)
{
    (void)state;
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    assert_int_equal(relock_config_set(cfg, "ttl_ms", "31536000000"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "wait.max_ms", "31536000000"), RELOCK_OK);
    long long ttl = relock_config_ttl_ms(cfg), wait = relock_config_wait_ms(cfg);
    assert_true(ttl == YEAR_MS);
    assert_true(wait == YEAR_MS);
    /* One more millisecond is refused, not wrapped. */
    assert_int_equal(relock_config_set(cfg, "ttl_ms", "31536000001"), RELOCK_ECONFIG);
    assert_true(relock_config_ttl_ms(cfg) == YEAR_MS);
    relock_config_free(cfg);
}

/* Acquire, extend and adopt with a year's lease; the server's TTL and the
 * validity show it whole. */
static void year_in_mode(const char *mode)
{
    if (!testsrv_mode_runs(mode)) {
        testsrv_note_skip(mode);
        return;
    }
    const char *ms_clock[] = {"legacy.clock_unit", "ms", NULL};
    relock_client *c = tu_client(tu_srv.port, mode, ms_clock);
    char name[32];
    snprintf(name, sizeof name, "year-%s", mode);
    int timestamp = strcmp(mode, "modern") != 0;

    relock_lock *l = NULL;
    /* A year's wait bound is taken as such (the lock is free: no wait). */
    assert_int_equal(relock_acquire(c, name, YEAR_MS, YEAR_MS, &l), RELOCK_OK);
    assert_year_validity("validity after acquire", relock_lock_validity_ms(l));
    if (strcmp(mode, "legacy") != 0)
        assert_about_a_year("PTTL after acquire", srv_int("PTTL %s", name));
    if (timestamp) {
        long long v = atoll(relock_lock_value(l));
        assert_about_a_year("timestamp after acquire", v - wall_ms());
    }

    assert_int_equal(relock_extend(l, YEAR_MS), RELOCK_OK);
    assert_year_validity("validity after extend", relock_lock_validity_ms(l));
    assert_true(relock_lock_validity_ms(l) > INT32_MS);

    /* Adopted with a year as its ttl: extend(l, 0) renews by a year. */
    relock_lock *a = NULL;
    assert_int_equal(
        relock_lock_adopt(c, name, relock_lock_value(l), relock_lock_fence(l), YEAR_MS, &a),
        RELOCK_OK);
    assert_int_equal(relock_extend(a, 0), RELOCK_OK);
    assert_year_validity("validity after extend of the adopted lock", relock_lock_validity_ms(a));
    if (strcmp(mode, "legacy") != 0)
        assert_about_a_year("PTTL after extend of the adopted lock",
                            srv_int("PTTL %s", name));
    assert_int_equal(relock_release(a), RELOCK_OK);
    relock_lock_free(a);
    relock_lock_free(l);

    /* One more millisecond than a year is refused before any command. */
    assert_int_equal(relock_acquire(c, name, YEAR_MS + 1, 0, &l), RELOCK_EINVAL);
    assert_null(l);
    assert_int_equal(relock_acquire(c, name, 1000, YEAR_MS + 1, &l), RELOCK_EINVAL);
    assert_null(l);
    relock_client_free(c);
}

static void test_year_modern(void **state)
{
    (void)state;
    year_in_mode("modern");
}

static void test_year_bridge(void **state)
{
    (void)state;
    year_in_mode("bridge");
}

static void test_year_legacy(void **state)
{
    (void)state;
    year_in_mode("legacy");
}

/* A NULL where a call needs a pointer, with a live client and lock:
 * RELOCK_EINVAL, said on the handle, nothing sent, and the handles work
 * on. */
static void test_null_pointers_live(void **state)
{
    (void)state;
    relock_client *c = tu_client(tu_srv.port, "modern", NULL);
#define EINVAL_ON_C(call)                                                                      \
    do {                                                                                       \
        assert_int_equal((call), RELOCK_EINVAL);                                               \
        assert_int_equal(relock_client_error(c)->status, RELOCK_EINVAL);                       \
    } while (0)
    relock_lock *l = (relock_lock *)1;
    EINVAL_ON_C(relock_acquire(c, NULL, 1000, 0, &l));
    assert_null(l);
    EINVAL_ON_C(relock_acquire(c, "np", 1000, 0, NULL));
    EINVAL_ON_C(relock_try_acquire(c, NULL, 1000, &l));
    EINVAL_ON_C(relock_try_acquire(c, "np", 1000, NULL));
    EINVAL_ON_C(relock_lock_adopt(c, NULL, "0123456789abcdef0123456789abcdef", 0, 1000, &l));
    EINVAL_ON_C(relock_lock_adopt(c, "np", NULL, 0, 1000, &l));
    EINVAL_ON_C(relock_lock_adopt(c, "np", "0123456789abcdef0123456789abcdef", 0, 1000, NULL));
    relock_inspect_info *info = (relock_inspect_info *)1;
    EINVAL_ON_C(relock_inspect(c, NULL, &info));
    assert_null(info);
    EINVAL_ON_C(relock_inspect(c, "np", NULL));
    EINVAL_ON_C(relock_scan(c, NULL, NULL));
    EINVAL_ON_C(relock_scan_keys(c, NULL, NULL, NULL, NULL));
    EINVAL_ON_C(relock_client_server(c, NULL));
    EINVAL_ON_C(relock_break(c, NULL, NULL));
    EINVAL_ON_C(relock_break_fenced(c, NULL, "v", 3));
    EINVAL_ON_C(relock_break_fenced(c, "np", NULL, 3));

    assert_int_equal(relock_try_acquire(c, "np", 5000, &l), RELOCK_OK);
    EINVAL_ON_C(relock_lock_set_owner(l, 0, NULL));
    EINVAL_ON_C(relock_keep_stop(l)); /* not kept */
    assert_int_equal(relock_extend(l, 5000), RELOCK_OK);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
#undef EINVAL_ON_C
    relock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_year),
        cmocka_unit_test(test_year_modern),
        cmocka_unit_test(test_year_bridge),
        cmocka_unit_test(test_year_legacy),
        cmocka_unit_test(test_null_pointers_live),
    };
    return cmocka_run_group_tests(tests, tu_setup_server, tu_teardown_server);
}
