/*
 * The peers' formats against a real redis-server (docs/legacy.md, Peers):
 * fractional timestamps as the float-second libraries write them, read,
 * waited for and taken over once they pass (at V·u, not a second later);
 * the values relock writes under each profile; and its validity against a
 * reader whose clock compares fractions, with no offset, late in a second.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <cmocka.h>

#include "relock.h"
#include "testclient.h"
#include "testutil.h"

static long long wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static char *get(const char *key)
{
    return testsrv_cmd(&tu_srv, "GET %s", key);
}

/* Whether the legacy-seen marker exists (testsrv_cmd says nil as "(nil)"). */
static int marker_set(void)
{
    char *v = testsrv_cmd(&tu_srv, "EXISTS %s", " relock:legacy-seen");
    int set = v && strcmp(v, "1") == 0;
    free(v);
    return set;
}

/* A float-second holder's value ending at wall ms `end`, as Ruby's
 * Float#to_s or Python's repr print it (five or more decimals). */
static void set_fraction(const char *key, long long end)
{
    char v[64];
    snprintf(v, sizeof v, "%lld.%03lld37", end / 1000, end % 1000);
    free(testsrv_cmd(&tu_srv, "SET %s %s", key, v));
}

/* A live fractional value is waited for, in every timestamp mode and
 * whatever the configuration, and taken over once the clock reaches V·u
 * (plus at most the wait's polling), not a second later. */
static void wait_for_fraction(const char *mode, const char *const *settings)
{
    relock_client *c = tu_client(tu_srv.port, mode, settings);
    relock_lock *l = NULL;
    long long end = wall_ms() + 1500;
    set_fraction("f", end);
    /* Held: busy, not foreign. */
    relock_status st = relock_acquire(c, "f", 2000, 0, &l);
    if (st != RELOCK_BUSY)
        fail_msg("%s: %s (%d)", mode, relock_client_error(c)->message, st);
    /* Waited for: won once V·u has passed. */
    st = relock_acquire(c, "f", 2000, 10000, &l);
    long long won = wall_ms();
    if (st != RELOCK_OK)
        fail_msg("%s: %s", mode, relock_client_error(c)->message);
    assert_true(won >= end + 1); /* the fraction .xxx37 rounds up */
    /* Generous: the machine may be loaded, but a whole second late means
     * the fraction was read as the integer below it plus one. */
    if (won >= end + 900)
        fail_msg("%s: took the lock over %lld ms after the value ended", mode, won - end);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    /* A dead holder's past fraction: taken over at once. */
    set_fraction("f", wall_ms() - 30000);
    st = relock_acquire(c, "f", 2000, 0, &l);
    if (st != RELOCK_OK)
        fail_msg("%s: dead fractional holder: %s", mode, relock_client_error(c)->message);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(c);
}

static void test_fraction_default_legacy(void **state)
{
    (void)state;
    wait_for_fraction("legacy", NULL);
}

static void test_fraction_default_bridge(void **state)
{
    (void)state;
    if (!testsrv_mode_runs("bridge")) {
        testsrv_note_skip("bridge");
        return;
    }
    wait_for_fraction("bridge", NULL);
}

static void test_fraction_redis_py(void **state)
{
    (void)state;
    const char *const peer[] = {"legacy.peer", "redis-py-2", NULL};
    wait_for_fraction("legacy", peer);
    if (testsrv_mode_runs("bridge"))
        wait_for_fraction("bridge", peer);
}

/* redis-py 2.7's value "X.0" (float(int(time.time()) + timeout)), which
 * its readers compare with int(time.time()): held until the clock reaches
 * X + 1 s, in every mode; taking it over at X s would end its holder's
 * timeout up to a second early. */
static void whole_clock_fraction(const char *mode, const char *const *settings)
{
    relock_client *c = tu_client(tu_srv.port, mode, settings);
    relock_lock *l = NULL;
    long long x = 0;
    int judged = 0;
    /* Within the second after X s; a loaded machine may miss it, then
     * the next second is tried (bounded). */
    for (int tries = 0; tries < 5 && !judged; tries++) {
        x = wall_ms() / 1000 + 1;
        char v[32];
        snprintf(v, sizeof v, "%lld.0", x);
        free(testsrv_cmd(&tu_srv, "SET %s %s", "w", v));
        long long sleep = x * 1000 + 100 - wall_ms();
        if (sleep > 0)
            tu_sleep_ms((int)sleep);
        relock_status st = relock_acquire(c, "w", 2000, 0, &l);
        long long at = wall_ms() - x * 1000;
        if (at >= 900) { /* past the window: says nothing */
            if (st == RELOCK_OK) {
                assert_int_equal(relock_release(l), RELOCK_OK);
                relock_lock_free(l);
            }
            continue;
        }
        if (st != RELOCK_BUSY)
            fail_msg("%s: \"%lld.0\" judged %lld ms after X s: %d (%s), not busy", mode, x, at,
                     st, st == RELOCK_OK ? "taken over" : relock_client_error(c)->message);
        judged = 1;
    }
    assert_true(judged);
    /* Taken over once X + 1 s has passed. */
    assert_int_equal(relock_acquire(c, "w", 2000, 5000, &l), RELOCK_OK);
    assert_true(wall_ms() >= (x + 1) * 1000);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(c);
}

static void test_whole_clock_fraction(void **state)
{
    (void)state;
    const char *const peer[] = {"legacy.peer", "redis-py-2", NULL};
    /* The default fleet in legacy mode, the profile in bridge mode (on a
     * server without bridge, the profile in legacy mode). */
    whole_clock_fraction("legacy", NULL);
    whole_clock_fraction(testsrv_mode_runs("bridge") ? "bridge" : "legacy", peer);
    if (testsrv_mode_runs("modern"))
        whole_clock_fraction("modern", NULL);
}

/* A lock adopted from a value of the other unit (13 digits where the
 * fleet writes seconds), or of no unit at all, claims no validity: read
 * as seconds, it would last for millennia. */
static void test_adopt_other_unit(void **state)
{
    (void)state;
    relock_client *c = tu_client(tu_srv.port, "legacy", NULL);
    const char *values[] = {"1795812032473", "999999999999999999", "9223372036854776.5"};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        free(testsrv_cmd(&tu_srv, "SET %s %s", "adopted", values[i]));
        relock_lock *l = NULL;
        assert_int_equal(relock_lock_adopt(c, "adopted", values[i], 0, 30000, &l), RELOCK_OK);
        if (relock_lock_validity_ms(l) != 0)
            fail_msg("adopted from %s: %lld ms of validity", values[i],
                     relock_lock_validity_ms(l));
        relock_lock_free(l);
    }
    free(testsrv_cmd(&tu_srv, "DEL %s", "adopted"));
    relock_client_free(c);
}

/* A value that is a past timestamp followed by a NUL byte and more is
 * no timestamp: never taken over, on every path (GETSET on 2.0, WATCH on
 * 2.2 and 2.4, a script later).  Read as a C string it was "1700000000". */
static void nul_value_never_taken(const char *mode)
{
    relock_client *c = tu_client(tu_srv.port, mode, NULL);
    static const char v[] = "1700000000\0junk";
    free(testsrv_cmd(&tu_srv, "SET %s %b", "nul", v, sizeof v - 1));
    relock_lock *l = NULL;
    relock_status st = relock_acquire(c, "nul", 2000, 200, &l);
    char *now = get("nul");
    if (!now || strcmp(now, "1700000000") != 0)
        fail_msg("%s: the key now holds \"%s\" (acquire: %d)", mode, now ? now : "(none)", st);
    free(now);
    assert_true(st != RELOCK_OK);
    if (st == RELOCK_OK) {
        assert_int_equal(relock_release(l), RELOCK_OK);
        relock_lock_free(l);
    }
    /* Nor deleted by a break asked for "1700000000" only. */
    assert_int_equal(relock_break(c, "nul", "1700000000"), RELOCK_BUSY);
    now = get("nul");
    if (!now || strcmp(now, "1700000000") != 0)
        fail_msg("%s: after the break the key holds \"%s\"", mode, now ? now : "(none)");
    free(now);
    free(testsrv_cmd(&tu_srv, "DEL %s", "nul"));
    relock_client_free(c);
}

static void test_nul_value_never_taken(void **state)
{
    (void)state;
    nul_value_never_taken("legacy");
    if (testsrv_mode_runs("modern"))
        nul_value_never_taken("modern");
}

/* A bridge client meeting a live fractional value records a legacy
 * sighting, as for an integer one. */
static void test_fraction_is_a_sighting(void **state)
{
    (void)state;
    if (!testsrv_mode_runs("bridge")) {
        testsrv_note_skip("bridge");
        return;
    }
    relock_client *c = tu_client(tu_srv.port, "bridge", NULL);
    relock_lock *l = NULL;
    free(testsrv_cmd(&tu_srv, "DEL %s", " relock:legacy-seen"));
    set_fraction("seen", wall_ms() + 30000);
    assert_int_equal(relock_acquire(c, "seen", 2000, 0, &l), RELOCK_BUSY);
    assert_true(marker_set());
    relock_client_free(c);
    /* A dead holder's leftover, taken over, is a classic value met too:
     * in bridge mode and in modern mode, integer or fractional. */
    const char *modes[] = {"bridge", "modern"};
    for (int i = 0; i < 2; i++) {
        if (!testsrv_mode_runs(modes[i]))
            continue;
        c = tu_client(tu_srv.port, modes[i], NULL);
        for (int frac = 0; frac < 2; frac++) {
            free(testsrv_cmd(&tu_srv, "DEL %s", " relock:legacy-seen"));
            if (frac) {
                set_fraction("seen", wall_ms() - 30000);
            } else {
                char old[32];
                snprintf(old, sizeof old, "%lld", wall_ms() / 1000 - 30);
                free(testsrv_cmd(&tu_srv, "SET %s %s", "seen", old));
            }
            /* Another client, so that the once-a-second bound does not hide it. */
            relock_client *d = tu_client(tu_srv.port, modes[i], NULL);
            assert_int_equal(relock_acquire(d, "seen", 2000, 0, &l), RELOCK_OK);
            if (!marker_set())
                fail_msg("%s: a dead classic holder's %s value taken over left no sighting",
                         modes[i], frac ? "fractional" : "integer");
            assert_int_equal(relock_release(l), RELOCK_OK);
            relock_lock_free(l);
            relock_client_free(d);
        }
        relock_client_free(c);
    }
}

/* What each profile makes relock write, where. */
static void test_profile_values(void **state)
{
    (void)state;
    const char *const mutex[] = {"legacy.peer", "redis-mutex", NULL};
    relock_client *c = tu_client(tu_srv.port, "legacy", mutex);
    relock_lock *l = NULL;
    long long before = wall_ms();
    assert_int_equal(relock_acquire(c, "job", 5000, 0, &l), RELOCK_OK);
    char *v = get("RedisMutex:job");
    assert_non_null(v);
    /* Seconds to the ms, now + ttl (offset 0), as redis-mutex writes. */
    assert_int_equal(strlen(v), 14);
    assert_int_equal(v[10], '.');
    long long vms = atoll(v) * 1000 + atoll(v + 11);
    assert_true(vms >= before + 5000 && vms <= wall_ms() + 5000);
    assert_string_equal(v, relock_lock_value(l));
    free(v);
    /* Released by compare-and-delete of that very value. */
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(c);

    const char *const jedis[] = {"legacy.peer", "jedis-lock", NULL};
    c = tu_client(tu_srv.port, "legacy", jedis);
    before = wall_ms();
    assert_int_equal(relock_acquire(c, "job", 5000, 0, &l), RELOCK_OK);
    v = get("job");
    assert_non_null(v);
    /* Integer ms, now + ttl + 1: Long.parseLong reads it. */
    assert_int_equal(strlen(v), 13);
    assert_int_equal(strspn(v, "0123456789"), 13);
    assert_true(atoll(v) >= before + 5001 && atoll(v) <= wall_ms() + 5001);
    free(v);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(c);
}

/* A fractional-clock reader with offset 0 takes an integer V over at
 * V.000.  Late in a second, the classic V = floor(now) + ttl ended for
 * that reader up to a second before the validity relock reported. */
static void test_validity_against_fractional_reader(void **state)
{
    (void)state;
    const char *const frac[] = {"legacy.reader_clock", "fractional", "legacy.expiry_offset",
                                "0", NULL};
    const char *modes[] = {"legacy", "bridge"};
    for (int m = 0; m < 2; m++) {
        if (m == 1 && !testsrv_mode_runs("bridge"))
            continue;
        relock_client *c = tu_client(tu_srv.port, modes[m], frac);
        for (int i = 0; i < 3; i++) {
            /* Late in a second. */
            for (int n = 0; n < 2000 && wall_ms() % 1000 < 800; n++)
                tu_sleep_ms(1);
            relock_lock *l = NULL;
            long long before = wall_ms();
            assert_int_equal(relock_acquire(c, "late", 2000, 0, &l), RELOCK_OK);
            long long valid = relock_lock_validity_ms(l);
            char *v = get("late");
            assert_non_null(v);
            long long end = atoll(v) * 1000; /* where the reader takes it over */
            free(v);
            if (before + valid > end)
                fail_msg("%s: validity %lld ms from %lld runs past %lld, where a "
                         "fractional reader takes the lock over",
                         modes[m], valid, before, end);
            assert_int_equal(relock_release(l), RELOCK_OK);
            relock_lock_free(l);
        }
        relock_client_free(c);
    }
}

/* A modern-mode client that meets a live classic holder says so: in the
 * error detail of the library at once, and on the command line's stderr
 * while it still waits. */
static void test_modern_meets_classic(void **state)
{
    (void)state;
    if (!testsrv_mode_runs("modern")) {
        testsrv_note_skip("modern");
        return;
    }
    relock_client *c = tu_client(tu_srv.port, "modern", NULL);
    relock_lock *l = NULL;
    char v[32];
    snprintf(v, sizeof v, "%lld", wall_ms() / 1000 + 60);
    free(testsrv_cmd(&tu_srv, "SET %s %s", "classic", v));
    assert_int_equal(relock_acquire(c, "classic", 2000, 0, &l), RELOCK_BUSY);
    assert_non_null(strstr(relock_client_error(c)->message, RELOCK_CLASSIC_HOLDER_NOTE));
    set_fraction("classic", wall_ms() + 60000);
    assert_int_equal(relock_acquire(c, "classic", 2000, 300, &l), RELOCK_TIMEOUT);
    assert_non_null(strstr(relock_client_error(c)->message, "still held after 300 ms by a classic"));
    /* A modern holder is no news. */
    relock_client *other = tu_client(tu_srv.port, "modern", NULL);
    free(testsrv_cmd(&tu_srv, "DEL %s", "classic"));
    relock_lock *held = NULL;
    assert_int_equal(relock_acquire(other, "classic", 5000, 0, &held), RELOCK_OK);
    assert_int_equal(relock_acquire(c, "classic", 2000, 0, &l), RELOCK_BUSY);
    assert_null(strstr(relock_client_error(c)->message, "classic client"));
    assert_int_equal(relock_release(held), RELOCK_OK);
    relock_lock_free(held);
    relock_client_free(other);
    relock_client_free(c);

    /* The command line: said on stderr while the wait goes on. */
    const char *bin = getenv("RELOCK_BIN");
    assert_non_null(bin);
    set_fraction("classic", wall_ms() + 4000);
    char errf[] = "/tmp/relock-peers-err-XXXXXX";
    int fd = mkstemp(errf);
    assert_true(fd >= 0);
    close(fd);
    char line[512];
    snprintf(line, sizeof line,
             "'%s' -u redis://127.0.0.1:%d -m modern acquire -w 20s -t 1s classic "
             ">/dev/null 2>%s &",
             bin, tu_srv.port, errf);
    assert_int_equal(system(line), 0);
    int said = 0, still_held = 0;
    for (int i = 0; i < 500 && !said; i++) {
        FILE *f = fopen(errf, "r");
        char buf[1024] = "";
        if (f) {
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            buf[n] = '\0';
            fclose(f);
        }
        if (strstr(buf, "by a classic client")) {
            said = 1;
            char *now = get("classic");
            still_held = now && strchr(now, '.') != NULL; /* the classic value, not a token */
            free(now);
            assert_non_null(strstr(buf, "relock: acquire: lock classic is held by a classic"));
            assert_non_null(strstr(buf, "; waiting"));
        } else {
            tu_sleep_ms(10);
        }
    }
    assert_true(said);
    assert_true(still_held);
    /* It gets the lock once the classic value passes. */
    for (int i = 0; i < 1500; i++) {
        char *now = get("classic");
        int token = now && strlen(now) == 32;
        free(now);
        if (token)
            break;
        tu_sleep_ms(10);
    }
    char *now = get("classic");
    assert_non_null(now);
    assert_int_equal(strlen(now), 32);
    free(now);
    unlink(errf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fraction_default_legacy),
        cmocka_unit_test(test_fraction_default_bridge),
        cmocka_unit_test(test_fraction_redis_py),
        cmocka_unit_test(test_fraction_is_a_sighting),
        cmocka_unit_test(test_whole_clock_fraction),
        cmocka_unit_test(test_adopt_other_unit),
        cmocka_unit_test(test_nul_value_never_taken),
        cmocka_unit_test(test_profile_values),
        cmocka_unit_test(test_validity_against_fractional_reader),
        cmocka_unit_test(test_modern_meets_classic),
    };
    return cmocka_run_group_tests(tests, tu_setup_server, tu_teardown_server);
}
