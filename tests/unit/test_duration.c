/* Durations on the command line. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "relockx.h"

static void good(const char *s, long long want)
{
    long long ms = -7;
    char why[128] = "";
    assert_int_equal(relockx_parse_duration(s, &ms, why, sizeof why), 0);
    assert_int_equal(ms, want);
}

static void bad(const char *s, const char *reason_part)
{
    long long ms = -7;
    char why[128] = "";
    assert_int_equal(relockx_parse_duration(s, &ms, why, sizeof why), -1);
    assert_int_equal(ms, -7); /* untouched on error */
    assert_non_null(strstr(why, reason_part));
}

static void test_units(void **state)
{
    (void)state;
    good("500ms", 500);
    good("30s", 30000);
    good("5m", 300000);
    good("2h", 7200000);
    good("1d", 86400000);
    good("0", 0);
    good("0s", 0);
    good("0ms", 0);
}

/* A plain number is seconds, as for flock -w, sleep(1) and timeout(1). */
static void test_plain_seconds(void **state)
{
    (void)state;
    good("10", 10000);
    good("60", 60000);
    good("1.5", 1500);
    good("0.25", 250);
    good("1500", 1500000);
    good(".5", 500);
    good("5.", 5000);
}

static void test_fractions_and_compounds(void **state)
{
    (void)state;
    good("0.5s", 500);
    good("1.5m", 90000);
    good("1m30s", 90000);
    good("1h2m3.5s", 3723500);
    good("2h30m", 9000000);
    good("1s500ms", 1500);
    good("1d12h", 129600000);
    good("0.0001s", 1); /* a nonzero duration never rounds to 0 */
    good("1.0001s", 1001);
    good("0.5ms", 1);
    good("0.000s", 0);
    good("1.123456789123s", 1124); /* digits past a nanosecond dropped */
}

static void test_rejects(void **state)
{
    (void)state;
    bad("", "empty");
    bad(NULL, "empty");
    bad("-1s", "not a duration");
    bad("10x", "unknown unit");
    bad("10 s", "unknown unit");
    bad("s", "not a duration");
    bad(".s", "not a duration");
    bad("1..5s", "unknown unit");
    bad("99999999999999999999999", "too large");
    bad("9223372036854775807s", "too large");
    bad("106751991167301d", "too large");
    good("1000000000000000ms", 1000000000000000L); /* an integer part of 10^15 at most */
    bad("1000000000000001ms", "too large");
    bad("5ms5", "a unit is needed");
    bad("1m30", "a unit is needed");
    bad("30s1m", "larger to smaller");
    bad("1s1s", "larger to smaller");
    bad("1e3", "unknown unit");
}

/* Time spans as systemd writes them (systemd.time(7)). */
static void test_systemd_spellings(void **state)
{
    (void)state;
    good("5min", 300000);
    good("30sec", 30000);
    good("250msec", 250);
    good("2hr", 7200000);
    good("1hour", 3600000);
    good("3hours", 10800000);
    good("2minutes", 120000);
    good("1second", 1000);
    good("10seconds", 10000);
    good("1day", 86400000);
    good("2days", 172800000);
    good("1w", 604800000);
    good("1week", 604800000);
    good("1min30s", 90000);
    good("1h5min", 3900000);
    good("1m30sec", 90000);
    bad("5mins", "unknown unit");
    bad("1min1m", "larger to smaller");
    bad("1sec1s", "larger to smaller");
    bad("5M", "unknown unit"); /* months are not taken */
    bad("1y", "unknown unit");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_units),
        cmocka_unit_test(test_systemd_spellings),
        cmocka_unit_test(test_plain_seconds),
        cmocka_unit_test(test_fractions_and_compounds),
        cmocka_unit_test(test_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
