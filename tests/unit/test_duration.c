/* Durations on the command line. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "relockx.h"

static void good(const char *s, long want)
{
    long ms = -7;
    char why[128] = "";
    assert_int_equal(relockx_parse_duration(s, &ms, why, sizeof why), 0);
    assert_int_equal(ms, want);
}

static void bad(const char *s, const char *reason_part)
{
    long ms = -7;
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
    good("1500", 1500);
    good("0", 0);
    good("0s", 0);
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
    bad("1.5s", "unknown unit");
    bad("99999999999999999999999", "too large");
    bad("9223372036854775807s", "too large");
    bad("5ms5", "unknown unit");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_units),
        cmocka_unit_test(test_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
