/*
 * relock_scan() and `relock scan` against a real redis-server: a fixture
 * with every class of key, exact counts, the four verdicts, the marker's
 * edge cases, the bound on the walk, and the same counts through the
 * old-server proxy (KEYS instead of SCAN, TTL instead of PTTL) without a
 * single refused command.  Every scenario but the command line's runs
 * through both entry points (tests/support/both.c): it_scan is the
 * blocking relock_scan_keys(), it_scan_async relock_async_scan().
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h" /* relock__fence_key, relock__marker_key: the real key names */
#include "both.h"
#include "relock.h"
#include "scan.h" /* the size of a relock_scan_result, whose allocation is refused below */
#include "testsrv.h"

/* The walk's bound (src/algo/scan.c); lowered here to reach the incomplete path. */
extern long long relock__scan_max_keys;

#define PREFIX "app:"
#define DAY_MS 86400000LL
#define TOKEN_A "0123456789abcdef0123456789abcdef"
#define TOKEN_B "fedcba9876543210fedcba9876543210"

static testsrv srv;
static both_entry entry;

static long long wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int setup(void **state)
{
    (void)state;
    return testsrv_start(&srv, NULL);
}

static int teardown(void **state)
{
    (void)state;
    testsrv_stop(&srv);
    return 0;
}

/* Runs one command on the real server; fails the test if unreachable or
 * refused. */
static void cmd(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    va_start(ap, fmt);
    redisContext *rc = redisConnect("127.0.0.1", srv.port);
    assert_non_null(rc);
    assert_int_equal(rc->err, 0);
    redisReply *r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    if (!r || r->type == REDIS_REPLY_ERROR)
        fail_msg("%s: %s", line, r ? r->str : rc->errstr);
    freeReplyObject(r);
    redisFree(rc);
}

/* What the fixture holds; every count relock_scan() must report. */
typedef struct expect {
    long long legacy, bridge, modern, stale, unknown, skipped, other_types;
} expect;

/*
 * A fresh database with one or more keys of every class under PREFIX,
 * relock's own keys, and keys outside the prefix.  live_legacy adds two
 * live legacy locks (seconds and ms); marker: -1 none, else its value.
 */
static expect fixture(int live_legacy, const char *marker)
{
    expect e = {0, 0, 0, 0, 0, 0, 0};
    long long now = wall_ms(), now_s = now / 1000;
    cmd("FLUSHALL");
    if (live_legacy) {
        cmd("SET " PREFIX "legacy-s %lld", now_s + 120);
        cmd("SET " PREFIX "legacy-ms %lld", now + 120000);
        e.legacy = 2;
    }
    /* Bridge: a timestamp with a TTL, also with the optional suffix. */
    cmd("SET " PREFIX "bridge-s %lld PX 60000", now_s + 30);
    cmd("SET " PREFIX "bridge-ms %lld:" TOKEN_B " PX 60000", now + 30000);
    e.bridge = 2;
    cmd("SET " PREFIX "modern " TOKEN_A " PX 60000");
    e.modern = 1;
    /* Dead legacy holders: expired timestamps, no TTL.  V holds until the
     * clock passes V, so now_ms - 1 is already expired. */
    cmd("SET " PREFIX "stale-s %lld", now_s - 10);
    cmd("SET " PREFIX "stale-ms %lld", now - 1);
    e.stale = 2;
    cmd("SET " PREFIX "text %s", "hello world");
    cmd("SET " PREFIX "token-no-ttl " TOKEN_B);            /* modern values carry a TTL */
    cmd("SET " PREFIX "twelve 123456789012");               /* neither s nor ms */
    cmd("SET " PREFIX "twelve-ttl 123456789012 PX 60000");  /* neither, with a TTL */
    cmd("SET " PREFIX "fourteen %lld0", now);               /* 14 digits */
    e.unknown = 5;
    cmd("RPUSH " PREFIX "list a b");
    cmd("HSET " PREFIX "hash f v");
    e.other_types = 2;
    /* relock's own keys: a fence counter inside the pattern (hash-tagged
     * lock key), one outside it, and the marker. */
    char key[RELOCK__KEY_MAX];
    assert_int_equal(relock__fence_key(PREFIX "{tagged}", key, sizeof key), 0);
    cmd("INCR %s", key);
    e.skipped = 1;
    assert_int_equal(relock__fence_key(PREFIX "bridge-s", key, sizeof key), 0);
    assert_int_equal(key[0], '{'); /* outside PREFIX "*" */
    cmd("INCR %s", key);
    if (marker) {
        assert_int_equal(relock__marker_key(PREFIX, key, sizeof key), 0);
        cmd("SET %s %s", key, marker);
        e.skipped++;
    }
    /* Outside the prefix: not examined by the default pattern. */
    cmd("SET other:legacy %lld", now_s + 120);
    return e;
}

/* Everything a relock_scan_result tells, read through its accessors into
 * plain fields, so that the checks below read as comparisons. */
typedef struct scan_view {
    long long examined, legacy, bridge, modern, stale, unknown, skipped, other_types, gone;
    char legacy_example[2048];
    size_t legacy_example_len;
    char marker_key[512];
    long long legacy_seen_ms;
    int marker_unreadable;
    char match[2048];
    int keys_fallback, complete;
    long long now_ms, quiet_window_ms;
    relock_scan_verdict verdict;
    char verdict_text[8192];
    int cluster_masters;
    long long sig[RELOCK_SIG_COUNT];
    char families[8192];
    long long watching_since_ms;
} scan_view;

static void copy_text(char *dst, size_t cap, const char *src)
{
    if (strlen(src) >= cap)
        fail_msg("test buffer too small for %zu bytes", strlen(src));
    memcpy(dst, src, strlen(src) + 1);
}

/* A scan through the entry point under test, into *v; the result object
 * is freed here.  Keys told to the callback are counted in told[class]. */
static long long told[RELOCK_KEY_OTHER_TYPE + 1];

static void tell(void *arg, relock_key_class k, const char *key, size_t keylen)
{
    (void)arg;
    assert_int_equal(strlen(key), keylen);
    told[k]++;
}

static relock_status scan_view_run(both_client *c, const char *match, scan_view *v)
{
    relock_scan_result *r = (relock_scan_result *)1; /* must be overwritten */
    memset(told, 0, sizeof told);
    relock_status st = both_scan(c, match, tell, NULL, &r);
    if (r == (relock_scan_result *)1)
        fail_msg("the scan left *out unset");
    memset(v, 0, sizeof *v);
    v->examined = relock_scan_result_count(r, RELOCK_SCAN_EXAMINED);
    v->legacy = relock_scan_result_count(r, RELOCK_SCAN_LEGACY);
    v->bridge = relock_scan_result_count(r, RELOCK_SCAN_BRIDGE);
    v->modern = relock_scan_result_count(r, RELOCK_SCAN_MODERN);
    v->stale = relock_scan_result_count(r, RELOCK_SCAN_STALE);
    v->unknown = relock_scan_result_count(r, RELOCK_SCAN_UNKNOWN);
    v->skipped = relock_scan_result_count(r, RELOCK_SCAN_SKIPPED);
    v->other_types = relock_scan_result_count(r, RELOCK_SCAN_OTHER_TYPES);
    v->gone = relock_scan_result_count(r, RELOCK_SCAN_GONE);
    copy_text(v->legacy_example, sizeof v->legacy_example,
              relock_scan_result_legacy_example(r, &v->legacy_example_len));
    copy_text(v->marker_key, sizeof v->marker_key, relock_scan_result_marker_key(r));
    v->legacy_seen_ms = relock_scan_result_legacy_seen_ms(r);
    v->marker_unreadable = relock_scan_result_marker_unreadable(r);
    copy_text(v->match, sizeof v->match, relock_scan_result_match(r));
    v->keys_fallback = relock_scan_result_keys_fallback(r);
    v->complete = relock_scan_result_complete(r);
    v->now_ms = relock_scan_result_now_ms(r);
    v->quiet_window_ms = relock_scan_result_quiet_window_ms(r);
    v->verdict = relock_scan_result_verdict(r);
    copy_text(v->verdict_text, sizeof v->verdict_text, relock_scan_result_verdict_text(r));
    v->cluster_masters = relock_scan_result_cluster_masters(r);
    for (int i = 0; i < RELOCK_SIG_COUNT; i++)
        v->sig[i] = relock_scan_result_signature(r, (relock_key_signature)i);
    copy_text(v->families, sizeof v->families, relock_scan_result_families(r));
    v->watching_since_ms = relock_scan_result_watching_since_ms(r);
    relock_scan_result_free(r);
    return st;
}

static void check_counts(const scan_view *r, const expect *e)
{
    assert_int_equal(r->legacy, e->legacy);
    assert_int_equal(r->bridge, e->bridge);
    assert_int_equal(r->modern, e->modern);
    assert_int_equal(r->stale, e->stale);
    assert_int_equal(r->unknown, e->unknown);
    assert_int_equal(r->skipped, e->skipped);
    assert_int_equal(r->other_types, e->other_types);
    assert_int_equal(r->gone, 0);
    assert_int_equal(r->examined, e->legacy + e->bridge + e->modern + e->stale + e->unknown +
                                      e->skipped + e->other_types);
    assert_int_equal(r->complete, 1);
    /* The key callback heard of every key counted in a class, and of no other. */
    assert_int_equal(told[RELOCK_KEY_LEGACY], e->legacy);
    assert_int_equal(told[RELOCK_KEY_BRIDGE], e->bridge);
    assert_int_equal(told[RELOCK_KEY_MODERN], e->modern);
    assert_int_equal(told[RELOCK_KEY_STALE], e->stale);
    assert_int_equal(told[RELOCK_KEY_UNKNOWN], e->unknown);
    assert_int_equal(told[RELOCK_KEY_OTHER_TYPE], e->other_types);
}

/*
 * A client with key_prefix PREFIX and the given quiet window, on port.
 * mode "modern" is refused by old personalities: the audit must work on
 * such a client anyway.
 */
static both_client *client(int port, const char *mode, long long window_ms)
{
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    char url[64], win[32];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    snprintf(win, sizeof win, "%lld", window_ms);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "key_prefix", PREFIX), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", mode), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "migration.quiet_window_ms", win), RELOCK_OK);
    both_client *c = NULL;
    relock_status st = both_connect(entry, cfg, &c);
    relock_config_free(cfg);
    assert_non_null(c);
    if (st != RELOCK_OK && st != RELOCK_EUNSUPPORTED)
        fail_msg("connect: %s", both_error(c));
    return c;
}

static void scan_ok(both_client *c, const char *match, scan_view *r)
{
    relock_status st = scan_view_run(c, match, r);
    if (st != RELOCK_OK)
        fail_msg("scan: %s", both_error(c));
}

static void assert_has(const char *text, const char *part)
{
    if (!strstr(text, part))
        fail_msg("\"%s\" not in \"%s\"", part, text);
}

/* (i) A live legacy lock: stay in bridge, whatever the marker says. */
static void test_live_legacy_stays(void **state)
{
    (void)state;
    expect e = fixture(1, NULL);
    both_client *c = client(srv.port, "modern", 7 * DAY_MS);
    scan_view r;
    scan_ok(c, NULL, &r);
    check_counts(&r, &e);
    assert_string_equal(r.match, PREFIX "*");
    assert_int_equal(r.keys_fallback, 0);
    assert_string_equal(r.marker_key, PREFIX " relock:legacy-seen");
    assert_int_equal(r.legacy_seen_ms, -1);
    assert_int_equal(r.marker_unreadable, 0);
    assert_int_equal(r.quiet_window_ms, 7 * DAY_MS);
    assert_int_equal(r.verdict, RELOCK_SCAN_STAY_BRIDGE);
    assert_string_equal(relock_scan_verdict_name(r.verdict), "stay-bridge");
    assert_true(strcmp(r.legacy_example, PREFIX "legacy-s") == 0 ||
                strcmp(r.legacy_example, PREFIX "legacy-ms") == 0);
    assert_has(r.verdict_text, "stay in bridge");
    assert_has(r.verdict_text, "2 live legacy locks");
    /* This client's own configuration writes modern values: say so. */
    assert_has(r.verdict_text, "go back to bridge");

    /* A marker long past does not outweigh a live legacy lock. */
    char old[32];
    snprintf(old, sizeof old, "%lld", wall_ms() - 30 * DAY_MS);
    e = fixture(1, old);
    scan_ok(c, NULL, &r);
    check_counts(&r, &e);
    assert_int_equal(r.verdict, RELOCK_SCAN_STAY_BRIDGE);
    assert_has(r.verdict_text, "before the quiet window");
    both_free(c);
}

/* (ii) A legacy writer seen within the window: stay, and say when. */
static void test_recent_sighting_stays(void **state)
{
    (void)state;
    long long seen = wall_ms() - 3600 * 1000;
    char v[32];
    snprintf(v, sizeof v, "%lld", seen);
    expect e = fixture(0, v);
    both_client *c = client(srv.port, "bridge", 7 * DAY_MS);
    scan_view r;
    scan_ok(c, NULL, &r);
    check_counts(&r, &e);
    assert_int_equal(r.legacy_seen_ms, seen);
    assert_true(r.now_ms - seen >= 3600 * 1000 && r.now_ms - seen < 3660 * 1000);
    assert_int_equal(r.verdict, RELOCK_SCAN_STAY_BRIDGE);
    assert_has(r.verdict_text, "last seen");
    assert_has(r.verdict_text, "(1h ago), within the quiet window of 7d");
    assert_null(strstr(r.verdict_text, "go back to bridge"));
    both_free(c);
}

/* (iii) Last sighting older than the window, no live legacy: modern. */
static void test_old_sighting_modern_safe(void **state)
{
    (void)state;
    char v[32];
    snprintf(v, sizeof v, "%lld", wall_ms() - 8 * DAY_MS);
    expect e = fixture(0, v);
    both_client *c = client(srv.port, "modern", 7 * DAY_MS);
    scan_view r;
    scan_ok(c, NULL, &r);
    check_counts(&r, &e);
    assert_int_equal(r.verdict, RELOCK_SCAN_MODERN_SAFE);
    assert_string_equal(relock_scan_verdict_name(r.verdict), "modern-safe");
    assert_has(r.verdict_text, "modern is safe: set migration.legacy_clients = false");
    assert_has(r.verdict_text, "(8d ago), before the quiet window of 7d");
    /* Stale keys do not block, and the verdict says why. */
    assert_has(r.verdict_text, "2 expired legacy keys");
    both_free(c);

    /* The window is the configured one: 5 s ago is outside a 1 s window. */
    snprintf(v, sizeof v, "%lld", wall_ms() - 5000);
    e = fixture(0, v);
    c = client(srv.port, "modern", 1000);
    scan_ok(c, NULL, &r);
    check_counts(&r, &e);
    assert_int_equal(r.verdict, RELOCK_SCAN_MODERN_SAFE);
    both_free(c);
    c = client(srv.port, "modern", 60000);
    scan_ok(c, NULL, &r);
    assert_int_equal(r.verdict, RELOCK_SCAN_STAY_BRIDGE);
    both_free(c);
}

/* (iv) Never seen: no evidence until upgraded clients have watched for
 * the whole window (the watch marker); then modern is safe.  An absent
 * marker alone used to read "modern is safe". */
static void test_never_seen_modern_with_caveat(void **state)
{
    (void)state;
    expect e = fixture(0, NULL);
    both_client *c = client(srv.port, "modern", 7 * DAY_MS);
    scan_view r;
    scan_ok(c, NULL, &r);
    check_counts(&r, &e);
    assert_int_equal(r.legacy_seen_ms, -1);
    assert_int_equal(r.watching_since_ms, -1);
    assert_int_equal(r.verdict, RELOCK_SCAN_NO_EVIDENCE);
    assert_string_equal(relock_scan_verdict_name(r.verdict), "no-evidence-yet");
    assert_has(r.verdict_text, "no evidence yet: modern mode is NOT known to be safe");
    assert_has(r.verdict_text, "app: relock:watching-since\" absent");
    assert_has(r.verdict_text, "quiet window (7d)");
    assert_null(strstr(r.verdict_text, "modern is safe"));
    /* Watched for a day: still no evidence, and how long to go. */
    char key[RELOCK__KEY_MAX];
    assert_int_equal(relock__watch_key(PREFIX, key, sizeof key), 0);
    cmd("SET %s %lld", key, wall_ms() - DAY_MS - 1000);
    scan_ok(c, NULL, &r);
    assert_int_equal(r.skipped, e.skipped + 1); /* the watch marker is relock's own */
    assert_int_equal(r.verdict, RELOCK_SCAN_NO_EVIDENCE);
    /* "(5d 23h to go)": the milliseconds since the marker was set count. */
    assert_has(r.verdict_text, "(1d ago), less than the quiet window of 7d (5d 23h to go)");
    /* Watched for eight days without a sighting: safe. */
    cmd("SET %s %lld", key, wall_ms() - 8 * DAY_MS);
    scan_ok(c, NULL, &r);
    assert_int_equal(r.verdict, RELOCK_SCAN_MODERN_SAFE);
    assert_has(r.verdict_text, "no legacy writer met since upgraded clients began watching");
    assert_has(r.verdict_text, "(8d ago), longer than the quiet window of 7d");
    cmd("DEL %s", key);
    both_free(c);
}

/* A marker that holds no time in ms cannot clear anyone: stay. */
static void test_unreadable_marker_stays(void **state)
{
    (void)state;
    static const char *const bad[] = {"garbage", "1700000000" /* seconds */, "-5", "17000000000000:x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        expect e = fixture(0, bad[i]);
        both_client *c = client(srv.port, "modern", 1000);
        scan_view r;
        scan_ok(c, NULL, &r);
        check_counts(&r, &e);
        assert_int_equal(r.marker_unreadable, 1);
        assert_int_equal(r.legacy_seen_ms, -1);
        assert_int_equal(r.verdict, RELOCK_SCAN_STAY_BRIDGE);
        assert_has(r.verdict_text, "holds no time in milliseconds");
        both_free(c);
    }
    /* A marker of the wrong type, too. */
    fixture(0, NULL);
    cmd("RPUSH %s x", PREFIX " relock:legacy-seen");
    both_client *c = client(srv.port, "modern", 1000);
    scan_view r;
    scan_ok(c, NULL, &r);
    assert_int_equal(r.marker_unreadable, 1);
    assert_int_equal(r.verdict, RELOCK_SCAN_STAY_BRIDGE);
    both_free(c);
}

/* A walk stopped by its bound concludes nothing, but a live legacy lock
 * it did see still means stay. */
static void test_bound_makes_incomplete(void **state)
{
    (void)state;
    fixture(0, NULL);
    both_client *c = client(srv.port, "modern", 7 * DAY_MS);
    scan_view r;
    relock__scan_max_keys = 5;
    relock_status st = scan_view_run(c, NULL, &r);
    relock__scan_max_keys = RELOCK_SCAN_MAX_KEYS;
    assert_int_equal(st, RELOCK_OK);
    assert_int_equal(r.complete, 0);
    assert_int_equal(r.examined, 5);
    assert_int_equal(r.verdict, RELOCK_SCAN_INCOMPLETE);
    assert_has(r.verdict_text, "stopped after 5 keys");
    /* The library states the fact; the command adds its own advice. */
    assert_null(strstr(r.verdict_text, "--match"));

    cmd("SET " PREFIX "legacy-s %lld", wall_ms() / 1000 + 120);
    relock__scan_max_keys = 1;
    /* Only the one legacy key matches this pattern. */
    st = scan_view_run(c, PREFIX "legacy*", &r);
    relock__scan_max_keys = RELOCK_SCAN_MAX_KEYS;
    assert_int_equal(st, RELOCK_OK);
    assert_int_equal(r.legacy, 1);
    assert_int_equal(r.verdict, RELOCK_SCAN_STAY_BRIDGE);
    both_free(c);
}

/* --match replaces the default pattern; the marker is still the prefix's. */
static void test_match_and_bad_arguments(void **state)
{
    (void)state;
    fixture(0, NULL);
    both_client *c = client(srv.port, "modern", 7 * DAY_MS);
    scan_view r;
    scan_ok(c, "other:*", &r);
    assert_string_equal(r.match, "other:*");
    assert_int_equal(r.examined, 1);
    assert_int_equal(r.legacy, 1);
    assert_string_equal(r.legacy_example, "other:legacy");
    assert_int_equal(r.legacy_example_len, strlen("other:legacy"));
    assert_int_equal(r.verdict, RELOCK_SCAN_STAY_BRIDGE);

    /* Names and patterns of any length come back whole, in the result and
     * in its text (they were cut at 127 and 300 bytes once). */
    char longkey[701];
    memset(longkey, 'k', sizeof longkey - 1);
    memcpy(longkey, "long:", 5);
    longkey[sizeof longkey - 1] = '\0';
    cmd("SET %s %lld", longkey, wall_ms() / 1000 + 120);
    scan_ok(c, longkey, &r);
    assert_int_equal(r.legacy, 1);
    assert_string_equal(r.legacy_example, longkey);
    assert_int_equal(r.legacy_example_len, sizeof longkey - 1);
    assert_string_equal(r.match, longkey);
    assert_has(r.verdict_text, longkey);
    cmd("DEL %s", longkey);

    scan_ok(c, "nothing-matches-*", &r);
    assert_int_equal(r.examined, 0);
    assert_int_equal(r.complete, 1);
    assert_int_equal(r.verdict, RELOCK_SCAN_NO_EVIDENCE);

    assert_int_equal(scan_view_run(c, "", &r), RELOCK_EINVAL);
    char big[1100];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(scan_view_run(c, big, &r), RELOCK_EINVAL);
    assert_has(both_error(c), "pattern longer than 1024 bytes");
    /* The handle works on after a refused call. */
    scan_ok(c, NULL, &r);
    assert_int_equal(r.complete, 1);
    both_free(c);
}

/* The program is linked with -Wl,--wrap=calloc (tests/CMakeLists.txt):
 * while refuse_result is set, the allocation of a scan's result fails
 * and every other allocation, its operation's among them, succeeds. */
void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);
static int refuse_result;

void *__wrap_calloc(size_t n, size_t size)
{
    if (refuse_result && n == 1 && size == sizeof(relock_scan_result))
        return NULL;
    return __real_calloc(n, size);
}

/* No memory for the result, with memory for the operation: the scan
 * starts nothing and says so, and the handle scans on. */
static void test_no_memory_for_the_result(void **state)
{
    (void)state;
    fixture(0, NULL);
    both_client *c = client(srv.port, "modern", 7 * DAY_MS);
    relock_scan_result *res = NULL;
    refuse_result = 1;
    relock_status st = both_scan(c, NULL, NULL, NULL, &res);
    refuse_result = 0;
    assert_int_equal(st, RELOCK_ENOMEM);
    assert_null(res);
    assert_has(both_error(c), "scan: out of memory");
    scan_view r;
    scan_ok(c, NULL, &r);
    assert_int_equal(r.complete, 1);
    both_free(c);
}

/* Many keys: several SCAN batches and pipelines, counts still exact. */
static void test_many_keys(void **state)
{
    (void)state;
    cmd("FLUSHALL");
    cmd("EVAL %s 0",
        "for i = 1, 2500 do "
        "  redis.call('SET', 'app:m' .. i, '0123456789abcdef0123456789abcdef', 'PX', 60000) "
        "  redis.call('SET', 'app:s' .. i, '1000000000') "
        "end return 1");
    both_client *c = client(srv.port, "modern", 7 * DAY_MS);
    scan_view r;
    scan_ok(c, NULL, &r);
    assert_int_equal(r.examined, 5000);
    assert_int_equal(r.modern, 2500);
    assert_int_equal(r.stale, 2500);
    assert_int_equal(r.complete, 1);
    both_free(c);
}

static long long proxy_refused(const testsrv *p)
{
    char *v = testsrv_cmd(p, "RELOCK-PROXY REFUSED");
    assert_non_null(v);
    long long n = atoll(v);
    free(v);
    return n;
}

/* Old servers through the proxy: the same counts, no command refused. */
static void test_old_servers_same_counts(void **state)
{
    (void)state;
    static const char *const personalities[] = {"2.0", "2.4", "2.6.11", "7"};
    char seen[32];
    snprintf(seen, sizeof seen, "%lld", wall_ms() - 3600 * 1000);
    for (size_t i = 0; i < sizeof personalities / sizeof personalities[0]; i++) {
        const char *pers = personalities[i];
        testsrv px;
        assert_int_equal(testsrv_start_proxy(&px, srv.port, pers, NULL), 0);
        expect e = fixture(1, seen);
        both_client *c = client(px.port, "modern", 7 * DAY_MS);
        scan_view r;
        relock_status st = scan_view_run(c, NULL, &r);
        if (st != RELOCK_OK)
            fail_msg("personality %s: %s", pers, both_error(c));
        check_counts(&r, &e);
        assert_int_equal(r.keys_fallback, strcmp(pers, "7") != 0);
        assert_int_equal(r.verdict, RELOCK_SCAN_STAY_BRIDGE);
        long long refused = proxy_refused(&px);
        if (refused != 0) {
            char *list = testsrv_cmd(&px, "RELOCK-PROXY REFUSED-LIST");
            fail_msg("personality %s: %lld commands refused: %s", pers, refused,
                     list ? list : "?");
        }
        both_free(c);
        testsrv_stop(&px);
    }
}

/*
 * Faults in the middle of a walk, through the fault proxy: the connection
 * closed instead of a reply, a command answered -LOADING, then the setup
 * of the next connection answered -LOADING.  Each walk fails with the
 * fault's error (no hang, a partial result), and the client walks whole
 * afterwards: a refused or failed reconnect makes it unusable for neither
 * entry point.
 */
static void test_faults_mid_walk(void **state)
{
    (void)state;
    cmd("FLUSHALL");
    cmd("EVAL %s 0", "for i = 1, 2000 do redis.call('SET', 'app:f' .. i, '1000000000') end "
                     "return 1");
    testsrv px;
    assert_int_equal(testsrv_start_proxy(&px, srv.port, "7", NULL), 0);
    both_client *c = client(px.port, "modern", 7 * DAY_MS);
    scan_view r;
    scan_ok(c, NULL, &r); /* connected and probed */
    assert_int_equal(r.stale, 2000);
    static const struct {
        const char *at, *kind, *what;
    } faults[] = {
        {"40", "close-before", "the reply to a read lost"},
        {"40", "error", "a read answered -LOADING"},
        {"1", "error", "the next connection's first command answered -LOADING"},
    };
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) {
        if (i == 2) { /* the connection is closed first (by the proxy) */
            free(testsrv_cmd(&px, "RELOCK-PROXY FAULT at-reply %s at-kind %s", "1",
                             "close-before"));
            assert_int_not_equal(scan_view_run(c, NULL, &r), RELOCK_OK);
        }
        char *v = testsrv_cmd(&px, "RELOCK-PROXY FAULT at-reply %s at-kind %s", faults[i].at,
                              faults[i].kind);
        assert_non_null(v);
        assert_string_equal(v, "OK");
        free(v);
        relock_status st = scan_view_run(c, NULL, &r);
        print_message("%s: %s: %s\n", faults[i].what, relock_status_name(st),
                      st == RELOCK_OK ? "" : both_error(c));
        if (st == RELOCK_OK || r.complete)
            fail_msg("%s: %s, complete %d", faults[i].what, relock_status_name(st), r.complete);
        if (i > 0 && !strstr(both_error(c), "LOADING"))
            fail_msg("%s: %s", faults[i].what, both_error(c));
        free(testsrv_cmd(&px, "RELOCK-PROXY FAULT off"));
        scan_ok(c, NULL, &r);
        assert_int_equal(r.stale, 2000);
        assert_int_equal(r.complete, 1);
    }
    both_free(c);
    testsrv_stop(&px);
}

/* Without SCAN, a database of more than 10000 keys is not walked with KEYS. */
static void test_keys_fallback_refused_on_big_db(void **state)
{
    (void)state;
    fixture(1, NULL);
    cmd("EVAL %s 0", "for i = 1, 10001 do redis.call('SET', 'fill:' .. i, 'x') end return 1");
    testsrv px;
    assert_int_equal(testsrv_start_proxy(&px, srv.port, "2.6.11", NULL), 0);
    both_client *c = client(px.port, "modern", 7 * DAY_MS);
    scan_view r;
    assert_int_equal(scan_view_run(c, NULL, &r), RELOCK_EUNSUPPORTED);
    const char *msg = both_error(c);
    assert_has(msg, "has no SCAN (needs 2.8)");
    assert_has(msg, "holds 10018 keys");
    assert_int_equal(r.complete, 0);
    assert_int_equal(r.examined, 0);
    assert_int_equal(proxy_refused(&px), 0);
    both_free(c);
    /* The modern server has SCAN: the same database is walked. */
    c = client(srv.port, "modern", 7 * DAY_MS);
    scan_ok(c, NULL, &r);
    assert_int_equal(r.legacy, 2);
    both_free(c);
    testsrv_stop(&px);
}

/* ---------------------------------------------------------------- CLI */

/* Runs "relock ARGS" (a shell fragment); returns its exit code and its
 * stdout in out. */
static int run_cli(char *out, size_t outlen, const char *fmt, ...)
{
    const char *bin = getenv("RELOCK_BIN");
    if (!bin || !*bin)
        fail_msg("RELOCK_BIN is not set (ctest sets it)");
    char args[512], line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(line, sizeof line, "'%s' %s", bin, args);
    FILE *f = popen(line, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, outlen - 1, f);
    out[n] = '\0';
    int status = pclose(f);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* Feeds text to a Python check; returns its exit code. */
static int python_check(const char *text, const char *program)
{
    char line[1024];
    snprintf(line, sizeof line, "/usr/bin/python3 -c '%s'", program);
    FILE *f = popen(line, "w");
    assert_non_null(f);
    fputs(text, f);
    int status = pclose(f);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void test_cli(void **state)
{
    (void)state;
    static char out[65536];
    char seen[32];
    snprintf(seen, sizeof seen, "%lld", wall_ms() - 3600 * 1000);
    fixture(1, seen);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", srv.port);

    /* --json parses, with the documented fields; the default mode (auto)
     * works whatever mode selection says. */
    assert_int_equal(run_cli(out, sizeof out, "-u %s scan --json --match '" PREFIX "*'", url), 0);
    assert_int_equal(python_check(out, "import json,sys; json.load(sys.stdin)"), 0);
    assert_int_equal(
        python_check(out,
                     "import json,sys\n"
                     "d = json.load(sys.stdin)\n"
                     "c = d[\"counts\"]\n"
                     "assert d[\"match\"] == \"app:*\" and d[\"method\"] == \"scan\"\n"
                     "assert d[\"complete\"] is True\n"
                     "assert (c[\"legacy\"], c[\"bridge\"], c[\"modern\"], c[\"stale\"]) == (2, 2, 1, 2)\n"
                     "assert (c[\"unknown\"], c[\"other_types\"], c[\"skipped\"]) == (5, 2, 2)\n"
                     "assert c[\"examined\"] == 16 and c[\"gone\"] == 0\n"
                     "assert d[\"legacy_example\"].startswith(\"app:legacy-\")\n"
                     "assert d[\"marker\"][\"key\"] == \" relock:legacy-seen\"\n"
                     "assert d[\"marker\"][\"state\"] == \"absent\"\n"
                     "assert d[\"marker\"][\"legacy_seen_ms\"] is None\n"
                     "assert d[\"quiet_window_ms\"] == 604800000\n"
                     "assert d[\"verdict\"] == \"stay-bridge\"\n"
                     "assert d[\"verdict_text\"].startswith(\"stay in bridge\")\n"),
        0);

    /* Key names are bytes: the JSON stays valid UTF-8 whatever they hold. */
    redisContext *rc = redisConnect("127.0.0.1", srv.port);
    assert_non_null(rc);
    static const char bin_key[] = "bin:\xff\xc3(\xc3\xa9";
    char ts[32];
    snprintf(ts, sizeof ts, "%lld", wall_ms() / 1000 + 120);
    redisReply *rr = redisCommand(rc, "SET %b %s", bin_key, sizeof bin_key - 1, ts);
    assert_non_null(rr);
    freeReplyObject(rr);
    redisFree(rc);
    assert_int_equal(run_cli(out, sizeof out, "-u %s scan --json --match 'bin:*'", url), 0);
    assert_int_equal(python_check(out, "import json,sys\n"
                                       "d = json.load(sys.stdin)\n"
                                       "assert d[\"counts\"][\"legacy\"] == 1\n"
                                       "assert d[\"legacy_example\"] == \"bin:\\ufffd\\ufffd(\\u00e9\", d\n"),
                     0);

    /* With a configuration file setting the prefix, the marker is found. */
    char conf[] = "/tmp/relock-scan-conf-XXXXXX";
    int fd = mkstemp(conf);
    assert_true(fd >= 0);
    FILE *cf = fdopen(fd, "w");
    assert_non_null(cf);
    fprintf(cf, "relock = { key_prefix = \"" PREFIX "\"; servers = ( { host = \"127.0.0.1\"; "
                "port = %d; } ); };\n",
            srv.port);
    fclose(cf);
    assert_int_equal(run_cli(out, sizeof out, "-c %s scan --json", conf), 0);
    assert_int_equal(python_check(out, "import json,sys\n"
                                       "d = json.load(sys.stdin)\n"
                                       "assert d[\"marker\"][\"state\"] == \"present\"\n"
                                       "assert 3600000 <= d[\"marker\"][\"age_ms\"] < 3660000\n"),
                     0);
    /* Text output. */
    assert_int_equal(run_cli(out, sizeof out, "-c %s scan", conf), 0);
    assert_has(out, "examined:    16 keys\n");
    assert_has(out, "  legacy:    2  live timestamp without TTL");
    assert_has(out, "(1h ago)\n");
    assert_has(out, "verdict:     stay in bridge");
    unlink(conf);

    /* Usage errors: 2.  Unreachable server: 4. */
    assert_int_equal(run_cli(out, sizeof out, "-u %s scan extra 2>/dev/null", url), 2);
    assert_int_equal(run_cli(out, sizeof out, "-u %s scan --bogus 2>/dev/null", url), 2);
    assert_int_equal(run_cli(out, sizeof out, "-u %s scan --match '' 2>/dev/null", url), 2);
    assert_int_equal(run_cli(out, sizeof out, "scan --help"), 0);
    assert_has(out, "usage: relock scan");
    int free_port = testsrv_free_port();
    assert_int_equal(
        run_cli(out, sizeof out, "-u redis://127.0.0.1:%d scan 2>/dev/null", free_port), 4);

    /* --check: the verdict as the exit status, for monitoring; the
     * signatures and families in both outputs. */
    assert_int_equal(run_cli(out, sizeof out, "-u %s scan --check --match '" PREFIX "*'", url), 3);
    assert_has(out, "families:\n  relock bridge (a timestamp with a TTL): 2 keys");
    assert_has(out, "watching:    not recorded");
    assert_int_equal(run_cli(out, sizeof out, "-u %s scan --json --check --match '" PREFIX "*'",
                             url),
                     3);
    assert_int_equal(python_check(out, "import json,sys\n"
                                       "d = json.load(sys.stdin)\n"
                                       "assert d[\"signatures\"][\"ts-s\"] == 3, d\n"
                                       "assert d[\"signatures\"][\"token\"] == 1, d\n"
                                       "assert d[\"watching_since_ms\"] is None\n"
                                       "assert any(f.startswith(\"relock bridge\") for f in d[\"families\"])\n"),
                     0);
    fixture(0, NULL);
    assert_int_equal(run_cli(out, sizeof out, "-u %s scan --check --match '" PREFIX "*'", url), 1);
    assert_has(out, "verdict:     no evidence yet");
    char key[RELOCK__KEY_MAX];
    assert_int_equal(relock__watch_key("", key, sizeof key), 0);
    cmd("SET %s %lld", key, wall_ms() - 8 * DAY_MS);
    assert_int_equal(run_cli(out, sizeof out, "-u %s scan --check --match '" PREFIX "*'", url), 0);
    assert_has(out, "(8d ago)\n");
    assert_has(out, "verdict:     modern is safe");
}

/* Keys by peer signature, and the families they show: the float-second
 * clients' values were "unknown" before, and a live one did not block. */
static void test_signatures_and_families(void **state)
{
    (void)state;
    long long now = wall_ms();
    cmd("FLUSHALL");
    cmd("SET RedisMutex:job %lld.%03lld37", (now + 60000) / 1000, (now + 60000) % 1000);
    cmd("SET Post:7:publish_lock %lld.5", (now - 60000) / 1000);  /* dead: stale */
    cmd("SET plain %lld.25", (now + 60000) / 1000);                 /* float seconds */
    cmd("SET resque:lock:Job:1 %lld", (now + 60000) / 1000);
    cmd("SET lock.report %lld", now + 60000);
    cmd("SET lock.half %lld.5", now + 60000); /* Date.now() + a fractional timeout */
    cmd("SET jedis %lld", now + 60000);
    cmd("SET lock:Job-1 true");
    cmd("SET %s %s", "resque:resque_scheduler_master_lock", "host1:4242");
    cmd("SET %s %s", "users~lock", "");
    cmd("SET laravel_cache_x %s PX 60000", "aB3dE5gH7jK9mN1p");
    cmd("SET relock-modern " TOKEN_A " PX 60000");
    cmd("ZADD sym %lld member", now + 60000);
    cmd("HSET redisson 6f1c:1 1");
    both_client *c = client(srv.port, "modern", 7 * DAY_MS);
    scan_view r;
    scan_ok(c, "*", &r);
    assert_int_equal(r.legacy, 6); /* the live timestamps, fractions included */
    assert_int_equal(r.stale, 1);
    assert_int_equal(r.sig[RELOCK_SIG_TS_S_FRAC], 3);
    assert_int_equal(r.sig[RELOCK_SIG_TS_S], 1);
    assert_int_equal(r.sig[RELOCK_SIG_TS_MS], 3);
    assert_int_equal(r.sig[RELOCK_SIG_NO_TTL_FLAG], 3);
    assert_int_equal(r.sig[RELOCK_SIG_TOKEN], 1);
    assert_int_equal(r.sig[RELOCK_SIG_OTHER_TOKEN], 1);
    assert_int_equal(r.sig[RELOCK_SIG_ZSET], 1);
    assert_int_equal(r.sig[RELOCK_SIG_HASH], 1);
    assert_has(r.families, "redis-mutex (RedisMutex:<name>): 1 key, e.g. RedisMutex:job");
    assert_has(r.families, "redis-objects (<name>_lock): 1 key");
    assert_has(r.families, "float seconds (redis-py < 2.10, redis-mutex, redis-objects <= 1.4.1): 1 key, e.g. plain");
    assert_has(r.families, "resque-lock-timeout (resque:lock:<name>): 1 key");
    assert_has(r.families, "npm redis-lock 0.0.x (lock.<name>): 2 keys");
    assert_has(r.families, "integer milliseconds (jedis-lock, ServiceStack.Redis, npm redis-lock 0.0.x): 1 key, e.g. jedis");
    assert_has(r.families, "resque-lock (lock:<Job>-<args> = true): 1 key");
    assert_has(r.families, "resque-scheduler master lock (host:pid): 1 key");
    assert_has(r.families, "Spring Data Redis cache lock (<cache>~lock): 1 key");
    assert_has(r.families, "Laravel Cache::lock (16-character owner): 1 key");
    assert_has(r.families, "relock modern");
    assert_has(r.families, "Symfony Lock (a sorted set): 1 key, e.g. sym");
    assert_has(r.families, "Redisson or Cm_RedisSession (a hash): 1 key, e.g. redisson");
    assert_int_equal(r.verdict, RELOCK_SCAN_STAY_BRIDGE);
    both_free(c);
}

int main(int argc, char **argv)
{
    entry = both_entry_from_args(argc, argv);
    const struct CMUnitTest shared[] = {
        cmocka_unit_test(test_signatures_and_families),
        cmocka_unit_test(test_live_legacy_stays),
        cmocka_unit_test(test_recent_sighting_stays),
        cmocka_unit_test(test_old_sighting_modern_safe),
        cmocka_unit_test(test_never_seen_modern_with_caveat),
        cmocka_unit_test(test_unreadable_marker_stays),
        cmocka_unit_test(test_bound_makes_incomplete),
        cmocka_unit_test(test_match_and_bad_arguments),
        cmocka_unit_test(test_no_memory_for_the_result),
        cmocka_unit_test(test_many_keys),
        cmocka_unit_test(test_old_servers_same_counts),
        cmocka_unit_test(test_keys_fallback_refused_on_big_db),
        cmocka_unit_test(test_faults_mid_walk),
    };
    const struct CMUnitTest alone[] = {cmocka_unit_test(test_cli)};
    return both_run(entry, shared, sizeof shared / sizeof shared[0], alone,
                    sizeof alone / sizeof alone[0], setup, teardown);
}
