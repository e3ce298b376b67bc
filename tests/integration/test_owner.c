/*
 * The owner record (owner_info) belongs to the lock's holder: a handle
 * whose lock passed to another holder never overwrites nor deletes that
 * holder's record.  Two handles, through the compat proxy in front of a
 * real redis-server, on each path the record is written by: a script
 * (personality 7: modern, legacy, bridge; valkey-9.0, whose release is
 * DELIFEQ), WATCH/MULTI (7 without Lua; 2.2 legacy) and 2.0's look first.
 *
 *   stale     A holds the lock; it is broken and B acquires it.  A's
 *             relock_lock_set_owner(), extend and release (of a handle
 *             adopted from A's value) leave B's record as B wrote it.
 *   kept      a kept lock's relock_lock_set_owner() writes at once, also
 *             where the renewals have written a newer value than the
 *             handle shows.
 *   release   A releases while the proxy holds each reply of the release
 *             in turn; a rival B that finds the key free at that moment
 *             acquires it and writes its record, which must survive the
 *             rest of A's release (it did not when the record was deleted
 *             after the release, in a separate round trip).
 *   life      (modern, legacy, bridge, on the server itself) the record
 *             beside an acquired lock names the process and its text,
 *             inspect reads it, renewals of a kept lock renew it, a
 *             release deletes it, and a stale handle's release leaves
 *             another holder's record alone.
 *
 * life runs through both entry points, on both.h: it_owner runs it
 * through the blocking API with the other scenarios, it_owner_async
 * through the asynchronous API on libevent (the program's argument); the
 * asynchronous client's own (a cancel or a free after the record was
 * written) are in test_async_records.c.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "both.h"
#include "relock.h"
#include "testclient.h"
#include "testutil.h"

typedef struct target {
    const char *pers;
    int nolua;
    const char *mode;
} target;

static const target targets[] = {
    {"7", 0, "modern"}, {"7", 0, "legacy"}, {"7", 0, "bridge"},     {"7", 1, "modern"},
    {"7", 1, "legacy"}, {"2.2", 0, "legacy"}, {"2.0", 0, "legacy"}, {"valkey-9.0", 0, "modern"},
};
#define NTARGETS (sizeof targets / sizeof targets[0])
static testsrv proxies[NTARGETS];
/* The entry point life runs through. */
static both_entry entry;

static int setup(void **state)
{
    if (tu_setup_server(state) != 0)
        return -1;
    static const char *const nolua[] = {"--no-lua", NULL};
    for (size_t i = 0; i < NTARGETS; i++)
        if (testsrv_personality_runs(targets[i].pers) &&
            testsrv_start_proxy(&proxies[i], tu_srv.port, targets[i].pers,
                                targets[i].nolua ? nolua : NULL) != 0)
            return -1;
    return 0;
}

static int teardown(void **state)
{
    for (size_t i = 0; i < NTARGETS; i++)
        testsrv_stop(&proxies[i]);
    return tu_teardown_server(state);
}

static const char *const owner_on[] = {"owner_info", "true", "legacy.clock_unit", "s", NULL};

static relock_client *client(size_t i)
{
    return tu_client(proxies[i].port, targets[i].mode, owner_on);
}

/* The owner record of name on the real server, "(nil)" when absent;
 * free() it. */
static char *record(const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "{%s} relock:owner", name);
    char *v = testsrv_cmd(&tu_srv, "GET %s", key);
    assert_non_null(v);
    return v;
}

static void want_record(size_t i, const char *what, const char *name, const char *text)
{
    char *v = record(name);
    char tail[64];
    snprintf(tail, sizeof tail, " %s", text);
    size_t n = strlen(v), t = strlen(tail);
    if (n < t || strcmp(v + n - t, tail) != 0)
        fail_msg("%s%s %s, %s: the record is \"%s\", not %s's", targets[i].pers,
                 targets[i].nolua ? " (no Lua)" : "", targets[i].mode, what, v, text);
    free(v);
}

static void test_stale(void **state)
{
    (void)state;
    for (size_t i = 0; i < NTARGETS; i++) {
        if (!testsrv_personality_runs(targets[i].pers))
            continue;
        char name[32];
        snprintf(name, sizeof name, "own-stale-%zu", i);
        relock_client *a = client(i), *b = client(i);
        relock_lock *la = NULL, *lb = NULL;
        assert_int_equal(relock_try_acquire(a, name, 30000, &la), RELOCK_OK);
        assert_int_equal(relock_lock_set_owner(la, 0, "A"), RELOCK_OK);
        want_record(i, "A's own", name, "A");
        char value[64];
        snprintf(value, sizeof value, "%s", relock_lock_value(la));
        long long fence = relock_lock_fence(la);
        /* Broken, and taken by B.  On 2.0, whose fence counts every
         * attempt, B's longer lease keeps its value apart from A's; on
         * the others the same lease may give the same timestamp, and the
         * fence tells them apart. */
        assert_int_equal(relock_break(b, name, NULL), RELOCK_OK);
        long ttl = strcmp(targets[i].pers, "2.0") == 0 ? 90000 : 30000;
        assert_int_equal(relock_try_acquire(b, name, ttl, &lb), RELOCK_OK);
        assert_int_equal(relock_lock_set_owner(lb, 0, "B"), RELOCK_OK);
        want_record(i, "B's own", name, "B");

        /* A does not know: its writes must find the lock not its own. */
        relock_lock_set_owner(la, 0, "stale");
        want_record(i, "after A's set_owner", name, "B");
        assert_int_equal(relock_extend(la, 30000), RELOCK_LOST);
        want_record(i, "after A's extend", name, "B");
        relock_lock *again = NULL;
        assert_int_equal(relock_lock_adopt(a, name, value, fence, 30000, &again), RELOCK_OK);
        relock_status st = relock_release(again);
        if (st != RELOCK_LOST)
            fail_msg("%s %s: release of A's stale value: %s", targets[i].pers, targets[i].mode,
                     relock_status_name(st));
        want_record(i, "after A's release", name, "B");

        /* B's own release deletes its record. */
        assert_int_equal(relock_release(lb), RELOCK_OK);
        char *v = record(name);
        assert_string_equal(v, "(nil)");
        free(v);
        relock_lock_free(again);
        relock_lock_free(la);
        relock_lock_free(lb);
        relock_client_free(a);
        relock_client_free(b);
    }
}

/* A kept lock in legacy and bridge modes changes its value at each
 * renewal, while the handle shows the value as of relock_keep():
 * relock_lock_set_owner() still rewrites the record at once, conditional
 * on the value the renewals last wrote. */
static void test_kept(void **state)
{
    (void)state;
    for (size_t i = 0; i < NTARGETS; i++) {
        if (!testsrv_personality_runs(targets[i].pers))
            continue;
        char name[32];
        snprintf(name, sizeof name, "own-kept-%zu", i);
        relock_client *a = client(i);
        relock_lock *la = NULL;
        assert_int_equal(relock_try_acquire(a, name, 3000, &la), RELOCK_OK);
        char first[64];
        snprintf(first, sizeof first, "%s", relock_lock_value(la));
        assert_int_equal(relock_keep(la, NULL, NULL), RELOCK_OK);
        int timestamps = strcmp(targets[i].mode, "modern") != 0;
        /* Until a renewal has written a new value (timestamp modes). */
        uint64_t end = tu_now_ms() + 8000;
        char *v = NULL;
        do {
            free(v);
            tu_sleep_ms(100);
            v = testsrv_cmd(&tu_srv, "GET %s", name);
            assert_non_null(v);
        } while (timestamps && strcmp(v, first) == 0 && tu_now_ms() < end);
        if (timestamps && strcmp(v, first) == 0)
            fail_msg("%s %s: no renewal wrote a new value within 8 s", targets[i].pers,
                     targets[i].mode);
        free(v);
        assert_int_equal(relock_lock_set_owner(la, 0, "kept"), RELOCK_OK);
        want_record(i, "set_owner on a kept lock", name, "kept");
        assert_int_equal(relock_release(la), RELOCK_OK);
        v = record(name);
        assert_string_equal(v, "(nil)");
        free(v);
        relock_lock_free(la);
        relock_client_free(a);
    }
}

/* The rival: once the proxy relayed k replies (A's release is on hold
 * there), acquires the lock if it is free, on the real server directly. */
typedef struct rival {
    pthread_t thread;
    size_t i;
    int pport;
    long long k;
    char name[32];
    int won;
} rival;

static long long proxy_replies(int pport)
{
    char *v = testsrv_cmd_port(pport, "RELOCK-PROXY REPLIES");
    assert_non_null(v);
    long long n = atoll(v);
    free(v);
    return n;
}

static void *rival_main(void *p)
{
    rival *r = p;
    uint64_t end = tu_now_ms() + 5000;
    while (proxy_replies(r->pport) < r->k && tu_now_ms() < end)
        tu_sleep_ms(1);
    if (tu_now_ms() >= end)
        return NULL;
    relock_client *b = tu_client(tu_srv.port, targets[r->i].mode, owner_on);
    relock_lock *lb = NULL;
    if (relock_try_acquire(b, r->name, 30000, &lb) == RELOCK_OK) {
        r->won = relock_lock_set_owner(lb, 0, "B") == RELOCK_OK;
        relock_lock_free(lb); /* held on: the key and the record stay */
    }
    relock_client_free(b);
    return NULL;
}

/* relock_lock_set_owner() while renewals run often (every 100 ms): each
 * call's record is there when it returns, whether or not a renewal was
 * under way when it began (a renewal's note with the old text, or a
 * renewal that moved the value under the conditional write, used to leave
 * the old record in place until the next renewal). */
static void test_kept_busy(void **state)
{
    (void)state;
    for (size_t i = 0; i < NTARGETS; i++) {
        if (!testsrv_personality_runs(targets[i].pers))
            continue;
        char name[32];
        snprintf(name, sizeof name, "own-busy-%zu", i);
        relock_client *a = client(i);
        relock_lock *la = NULL;
        assert_int_equal(relock_try_acquire(a, name, 300, &la), RELOCK_OK);
        assert_int_equal(relock_keep(la, NULL, NULL), RELOCK_OK);
        for (int round = 0; round < 40; round++) {
            char text[16];
            snprintf(text, sizeof text, "busy%d", round);
            assert_int_equal(relock_lock_set_owner(la, 0, text), RELOCK_OK);
            want_record(i, "set_owner while renewals run", name, text);
            tu_sleep_ms(7 * (round % 5));
        }
        assert_int_equal(relock_release(la), RELOCK_OK);
        relock_lock_free(la);
        relock_client_free(a);
    }
}

static void test_release_race(void **state)
{
    (void)state;
    int runs = 0, rivals = 0;
    for (size_t i = 0; i < NTARGETS; i++) {
        if (!testsrv_personality_runs(targets[i].pers))
            continue;
        int pport = proxies[i].port;
        relock_client *a = client(i);
        /* The replies of one release (the first warms the scripts up). */
        long long n = 0;
        for (int round = 0; round < 2; round++) {
            char name[32];
            snprintf(name, sizeof name, "own-count-%zu-%d", i, round);
            relock_lock *la = NULL;
            assert_int_equal(relock_try_acquire(a, name, 30000, &la), RELOCK_OK);
            char *v = testsrv_cmd_port(pport, "RELOCK-PROXY FAULT at-reply 0");
            free(v);
            assert_int_equal(relock_release(la), RELOCK_OK);
            n = proxy_replies(pport);
            relock_lock_free(la);
        }
        assert_true(n >= 2 && n < 20);
        for (long long k = 1; k <= n; k++) {
            rival r;
            memset(&r, 0, sizeof r);
            r.i = i;
            r.pport = pport;
            r.k = k;
            snprintf(r.name, sizeof r.name, "own-race-%zu-%lld", i, k);
            relock_lock *la = NULL;
            assert_int_equal(relock_try_acquire(a, r.name, 30000, &la), RELOCK_OK);
            char at[24];
            snprintf(at, sizeof at, "%lld", k);
            char *v = testsrv_cmd_port(pport, "RELOCK-PROXY FAULT at-reply %s at-kind hold "
                                              "at-hold-ms 200",
                                       at);
            free(v);
            assert_int_equal(pthread_create(&r.thread, NULL, rival_main, &r), 0);
            relock_status st = relock_release(la);
            pthread_join(r.thread, NULL);
            v = testsrv_cmd_port(pport, "RELOCK-PROXY FAULT off");
            free(v);
            if (st != RELOCK_OK)
                fail_msg("%s %s, hold at %lld: release: %s", targets[i].pers, targets[i].mode,
                         k, relock_status_name(st));
            if (r.won) {
                want_record(i, "B acquired during A's release", r.name, "B");
                rivals++;
            }
            relock_lock_free(la);
            runs++;
        }
        relock_client_free(a);
    }
    print_message("%d releases held at each reply, a rival took the lock in %d\n", runs, rivals);
    assert_true(rivals > 0);
}

static void count_lost(relock_status why, void *arg)
{
    (void)why;
    (*(long *)arg)++;
}

static int key_exists(const char *key)
{
    char *v = testsrv_cmd(&tu_srv, "EXISTS %s", key);
    int e = v && strcmp(v, "1") == 0;
    free(v);
    return e;
}

static void test_life(void **state)
{
    (void)state;
    static const char *const modes[] = {"modern", "legacy", "bridge"};
    for (size_t mi = 0; mi < 3; mi++) {
        relock_config *cfg = relock_config_new();
        char url[64];
        snprintf(url, sizeof url, "redis://127.0.0.1:%d", tu_srv.port);
        assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
        assert_int_equal(relock_config_set(cfg, "mode", modes[mi]), RELOCK_OK);
        assert_int_equal(relock_config_set(cfg, "owner_info", "true"), RELOCK_OK);
        if (strcmp(modes[mi], "modern") != 0)
            assert_int_equal(relock_config_set(cfg, "legacy.clock_unit", "ms"), RELOCK_OK);
        assert_int_equal(relock_config_set_owner(cfg, 0, "life-owner"), RELOCK_OK);
        both_client *c = NULL;
        relock_status st = both_connect(entry, cfg, &c);
        relock_config_free(cfg);
        if (st != RELOCK_OK)
            fail_msg("%s: connect (%s): %s", modes[mi], both_entry_name(entry), both_error(c));
        char name[64], rkey[96];
        snprintf(name, sizeof name, "own-life-%s", modes[mi]);
        snprintf(rkey, sizeof rkey, "{%s} relock:owner", name);
        relock_lock *l = NULL;
        st = both_try_acquire(c, name, 900, &l);
        if (st != RELOCK_OK)
            fail_msg("%s: acquire: %s", modes[mi], both_error(c));
        char want[64];
        snprintf(want, sizeof want, "pid=%ld ", (long)getpid());
        char *v = record(name);
        if (!strstr(v, want) || !strstr(v, " life-owner") || strncmp(v, "host=", 5) != 0)
            fail_msg("%s: the record is \"%s\"", modes[mi], v);
        free(v);
        /* inspect (the blocking API) names the owner */
        const char *const ikv[] = {"legacy.clock_unit", "ms", NULL};
        relock_client *bc = tu_client(tu_srv.port, modes[mi], ikv);
        relock_inspect_info *info = NULL;
        assert_int_equal(relock_inspect(bc, name, &info), RELOCK_OK);
        if (!strstr(relock_inspect_info_owner(info), " life-owner"))
            fail_msg("%s: inspect: \"%s\"", modes[mi], relock_inspect_info_owner(info));
        relock_inspect_info_free(info);
        /* kept for three leases: the record lives on beside it, renewed
         * with it */
        long lost = 0;
        assert_int_equal(both_keep(c, l, count_lost, &lost), RELOCK_OK);
        both_idle(c, 2700);
        assert_int_equal(lost, 0);
        v = record(name);
        if (!strstr(v, " life-owner"))
            fail_msg("%s: the record after renewals is \"%s\"", modes[mi], v);
        free(v);
        char *pttl = testsrv_cmd(&tu_srv, "PTTL %s", rkey);
        assert_non_null(pttl);
        assert_true(atoll(pttl) > 0 && atoll(pttl) <= 900);
        free(pttl);
        /* a release deletes it (an asynchronous renewal may be in flight:
         * it goes after) */
        assert_int_equal(both_release(c, l), RELOCK_OK);
        assert_false(key_exists(rkey));
        assert_false(key_exists(name));
        /* the blocking call on an asynchronous client's lock is refused,
         * not run on a connection it cannot use */
        if (entry == BOTH_ASYNC)
            assert_int_equal(relock_lock_set_owner(l, 1, "x"), RELOCK_LOST);
        relock_lock_free(l);
        /* another holder's record is left alone by a stale handle */
        l = NULL;
        assert_int_equal(both_try_acquire(c, name, 5000, &l), RELOCK_OK);
        if (entry == BOTH_ASYNC)
            assert_int_equal(relock_lock_set_owner(l, 1, "x"), RELOCK_EINVAL);
        char *r = testsrv_cmd(&tu_srv, "DEL %s", name);
        free(r);
        r = testsrv_cmd(&tu_srv, "SET %s %s", rkey, "someone-else");
        free(r);
        assert_int_equal(both_release(c, l), RELOCK_LOST);
        v = record(name);
        assert_string_equal(v, "someone-else");
        free(v);
        r = testsrv_cmd(&tu_srv, "DEL %s", rkey);
        free(r);
        relock_lock_free(l);
        relock_client_free(bc);
        both_free(c);
    }
}

int main(int argc, char **argv)
{
    entry = both_entry_from_args(argc, argv);
    /* Through both entry points. */
    const struct CMUnitTest shared[] = {
        cmocka_unit_test(test_life),
    };
    /* The blocking client's alone. */
    const struct CMUnitTest blocking[] = {
        cmocka_unit_test(test_stale),
        cmocka_unit_test(test_kept),
        cmocka_unit_test(test_kept_busy),
        cmocka_unit_test(test_release_race),
    };
    /* One group (both_run), so that the servers start once: the proxies
     * of the blocking client's scenarios too, which start within a second. */
    return both_run(entry, shared, sizeof shared / sizeof *shared, blocking,
                    sizeof blocking / sizeof *blocking, setup, teardown);
}
