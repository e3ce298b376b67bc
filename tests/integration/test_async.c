/*
 * The asynchronous client (relock_async.h) against a real redis-server, on
 * libevent (it_async_libevent) or libuv (it_async_libuv, built with
 * TEST_LIBUV): many locks in flight on one connection, contention between
 * two asynchronous clients and a blocking one, cancellation, freeing with
 * operations in flight, a SIGKILLed holder's lock taken after its expiry,
 * a SIGSTOPped server ending operations with the timeout's status, and
 * renewal by the loop's timers with its lost-lock callback.  Modern,
 * bridge and legacy modes where the machines differ.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "relock.h"
#include "relock_async.h"
#include "async_loop.h" /* testloop.h, and an outcome per operation */
#include "testsrv.h"
#include "testutil.h"

static testsrv srv;

/* ------------------------------------------------------------ helpers */

static relock_config *config(const char *mode, const char *prefix)
{
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", srv.port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", mode), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "key_prefix", prefix), RELOCK_OK);
    return cfg;
}

static relock_async *client(relock_async_loop *lp, const char *mode, const char *prefix)
{
    relock_config *cfg = config(mode, prefix);
    relock_async *a = NULL;
    relock_status st = relock_async_new(cfg, lp, &a);
    if (st != RELOCK_OK)
        fail_msg("relock_async_new: %s", relock_async_error(a)->message);
    relock_config_free(cfg);
    return a;
}

static redisContext *raw(void)
{
    redisContext *r = redisConnect("127.0.0.1", srv.port);
    assert_true(r && !r->err);
    return r;
}

static long long exists(const char *key)
{
    redisContext *r = raw();
    redisReply *x = redisCommand(r, "EXISTS %s", key);
    long long n = x->integer;
    freeReplyObject(x);
    redisFree(r);
    return n;
}

static const char *const modes[] = {"modern", "bridge", "legacy"};

/*
 * Against a server the matrix names (RELOCK_TEST_SERVER, docs/matrix.md)
 * the modes it cannot run are left out (modern before 2.6.12, bridge before
 * 2.6.0), and the tests written for modern mode run in legacy mode there.
 */
#define SKIP_MODE(mode)                                                                       \
    if (!testsrv_mode_runs(mode)) {                                                           \
        testsrv_note_skip(mode);                                                              \
        continue;                                                                             \
    }

static const char *modern_or_legacy(void)
{
    return testsrv_mode_runs("modern") ? "modern" : "legacy";
}

/* ------------------------------------------------------------ many in flight */

enum { MANY = 1000 };
static long many_done;
static outcome many[MANY];

static void many_cb(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                    void *arg)
{
    record(a, st, l, e, arg);
    many_done++;
}

static void test_many_in_flight(void **state)
{
    (void)state;
    for (int mi = 0; mi < 3; mi++) {
        SKIP_MODE(modes[mi]);
        relock_async_loop lp;
        loop_init(&lp);
        char prefix[32];
        snprintf(prefix, sizeof prefix, "many-%s:", modes[mi]);
        relock_async *a = client(&lp, modes[mi], prefix);
        memset(many, 0, sizeof many);
        many_done = 0;
        for (int i = 0; i < MANY; i++) {
            char name[32];
            snprintf(name, sizeof name, "l%d", i);
            assert_int_equal(relock_async_try_acquire(a, name, 30000, many_cb, &many[i], NULL),
                             RELOCK_OK);
        }
        /* all started at once, none completed before the loop ran */
        assert_int_equal(relock_async_pending(a), MANY);
        assert_int_equal(many_done, 0);
        assert_int_equal(run_until(&many_done, MANY, 30000), MANY);
        assert_int_equal(relock_async_mode(a),
                         mi == 0 ? RELOCK_MODE_MODERN
                                 : mi == 1 ? RELOCK_MODE_BRIDGE : RELOCK_MODE_LEGACY);
        for (int i = 0; i < MANY; i++) {
            assert_int_equal(many[i].calls, 1);
            if (many[i].st != RELOCK_OK)
                fail_msg("%s lock %d: %s: %s", modes[mi], i, relock_status_name(many[i].st),
                         many[i].msg);
            assert_non_null(many[i].l);
        }
        char key[64];
        snprintf(key, sizeof key, "%sl7", prefix);
        assert_int_equal(exists(key), 1);
        /* a second try of a held one is BUSY, with the blocking message */
        outcome busy = {0};
        assert_int_equal(relock_async_try_acquire(a, "l7", 0, record, &busy, NULL), RELOCK_OK);
        assert_int_equal(run_until(&busy.calls, 1, 10000), 1);
        assert_int_equal(busy.st, RELOCK_BUSY);
        assert_string_equal(busy.msg, "lock l7 is held");
        /* release them all, pipelined too */
        relock_lock *locks[MANY];
        for (int i = 0; i < MANY; i++)
            locks[i] = many[i].l;
        memset(many, 0, sizeof many);
        many_done = 0;
        for (int i = 0; i < MANY; i++)
            assert_int_equal(relock_async_release(locks[i], many_cb, &many[i]), RELOCK_OK);
        assert_int_equal(run_until(&many_done, MANY, 30000), MANY);
        for (int i = 0; i < MANY; i++) {
            assert_int_equal(many[i].calls, 1);
            assert_int_equal(many[i].st, RELOCK_OK);
            assert_ptr_equal(many[i].l, locks[i]);
            relock_lock_free(locks[i]);
        }
        assert_int_equal(exists(key), 0);
        assert_int_equal(relock_async_pending(a), 0);
        relock_async_free(a);
        loop_fini();
    }
}

/* ------------------------------------------------------------ contention */

typedef struct contender {
    relock_async *a;
    outcome o;
    int holding;
    relock_lock *l;
} contender;

static int holders_now, holders_max;
static long released;

static void release_cb(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                       void *arg)
{
    (void)a, (void)e, (void)arg;
    assert_int_equal(st, RELOCK_OK);
    relock_lock_free(l);
    released++;
}

static void hold_timer(void *arg)
{
    contender *k = arg;
    holders_now--;
    assert_int_equal(relock_async_release(k->l, release_cb, NULL), RELOCK_OK);
}

static relock_async_loop *cur_loop;

static void won(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                void *arg)
{
    contender *k = arg;
    record(a, st, l, e, &k->o);
    if (st != RELOCK_OK)
        return;
    k->l = l;
    if (++holders_now > holders_max)
        holders_max = holders_now;
    cur_loop->timer_start(cur_loop->data, 150, hold_timer, k);
}

static relock_client *blocking;
static relock_lock *blocking_lock;
static uint64_t blocking_released_at;

static void blocking_release(void *arg)
{
    (void)arg;
    holders_now--;
    blocking_released_at = tu_now_ms();
    assert_int_equal(relock_release(blocking_lock), RELOCK_OK);
    relock_lock_free(blocking_lock);
}

static void test_contention(void **state)
{
    (void)state;
    for (int mi = 0; mi < 3; mi++) {
        SKIP_MODE(modes[mi]);
        relock_async_loop lp;
        loop_init(&lp);
        cur_loop = &lp;
        char prefix[32];
        snprintf(prefix, sizeof prefix, "cont-%s:", modes[mi]);
        relock_config *cfg = config(modes[mi], prefix);
        assert_int_equal(relock_connect(cfg, &blocking), RELOCK_OK);
        relock_config_free(cfg);
        assert_int_equal(relock_try_acquire(blocking, "c", 10000, &blocking_lock), RELOCK_OK);
        holders_now = 1;
        holders_max = 1;
        released = 0;
        contender k[2];
        memset(k, 0, sizeof k);
        for (int i = 0; i < 2; i++) {
            k[i].a = client(&lp, modes[mi], prefix);
            assert_int_equal(relock_async_acquire(k[i].a, "c", 10000, 8000, won, &k[i], NULL),
                             RELOCK_OK);
        }
        lp.timer_start(lp.data, 300, blocking_release, NULL);
        long both = 0;
        uint64_t end = tu_now_ms() + 15000;
        while (tu_now_ms() < end && (both = k[0].o.calls + k[1].o.calls + released) < 4)
            loop_once();
        for (int i = 0; i < 2; i++)
            if (k[i].o.st != RELOCK_OK)
                fail_msg("%s contender %d: %s: %s", modes[mi], i,
                         relock_status_name(k[i].o.st), k[i].o.msg);
        assert_int_equal(both, 4);
        assert_int_equal(holders_max, 1); /* never two holders at once */
        /* neither won before the blocking holder released */
        assert_true(k[0].o.at >= blocking_released_at && k[1].o.at >= blocking_released_at);
        /* release notices wake the waiters: the second winner follows the
         * first's release well within the backoff's reach (generous bound) */
        uint64_t first = k[0].o.at < k[1].o.at ? k[0].o.at : k[1].o.at;
        uint64_t second = k[0].o.at < k[1].o.at ? k[1].o.at : k[0].o.at;
        assert_true(second - first >= 140);
        for (int i = 0; i < 2; i++)
            relock_async_free(k[i].a);
        relock_client_free(blocking);
        loop_fini();
    }
}

/* ------------------------------------------------------------ cancellation */

static relock_async_op *victim;
static outcome victim_o;

static void cancel_other(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                         void *arg)
{
    record(a, st, l, e, arg);
    /* the other acquire was sent in the same turn: it is in flight now */
    assert_int_equal(relock_async_cancel(victim), RELOCK_OK);
    assert_int_equal(relock_async_cancel(victim), RELOCK_OK); /* twice: harmless */
}

static void test_cancel(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = client(&lp, modern_or_legacy(), "cancel:");
    relock_client *b;
    relock_config *cfg = config(modern_or_legacy(), "cancel:");
    assert_int_equal(relock_connect(cfg, &b), RELOCK_OK);
    relock_config_free(cfg);

    /* 1. a waiting acquire: ECANCELED, the holder untouched */
    relock_lock *held;
    assert_int_equal(relock_try_acquire(b, "w", 10000, &held), RELOCK_OK);
    outcome o = {0};
    relock_async_op *op = NULL;
    assert_int_equal(relock_async_acquire(a, "w", 5000, RELOCK_WAIT_FOREVER, record, &o, &op),
                     RELOCK_OK);
    assert_non_null(op);
    run_for(400);
    assert_int_equal(o.calls, 0);
    uint64_t t0 = tu_now_ms();
    assert_int_equal(relock_async_cancel(op), RELOCK_OK);
    assert_int_equal(o.calls, 0); /* from the loop, not from within the call */
    assert_int_equal(run_until(&o.calls, 1, 5000), 1);
    assert_int_equal(o.st, RELOCK_ECANCELED);
    assert_null(o.l);
    assert_true(tu_now_ms() - t0 < 2000);
    assert_int_equal(relock_extend(held, 10000), RELOCK_OK); /* still the blocking holder's */

    /* a bounded wait: TIMEOUT with the blocking message, not before the bound */
    memset(&o, 0, sizeof o);
    t0 = tu_now_ms();
    assert_int_equal(relock_async_acquire(a, "w", 5000, 500, record, &o, NULL), RELOCK_OK);
    assert_int_equal(run_until(&o.calls, 1, 5000), 1);
    assert_int_equal(o.st, RELOCK_TIMEOUT);
    assert_string_equal(o.msg, "lock w: still held after 500 ms");
    assert_true(o.at - t0 >= 450);

    /* 2. cancelled before it started: nothing sent */
    memset(&o, 0, sizeof o);
    assert_int_equal(relock_async_acquire(a, "free1", 5000, 0, record, &o, &op), RELOCK_OK);
    assert_int_equal(relock_async_cancel(op), RELOCK_OK);
    assert_int_equal(run_until(&o.calls, 1, 5000), 1);
    assert_int_equal(o.st, RELOCK_ECANCELED);
    assert_int_equal(exists("cancel:free1"), 0);

    /* 3. cancelled while its attempt is in flight and wins: undone */
    memset(&o, 0, sizeof o);
    memset(&victim_o, 0, sizeof victim_o);
    assert_int_equal(relock_async_acquire(a, "first", 5000, 0, cancel_other, &o, NULL),
                     RELOCK_OK);
    assert_int_equal(relock_async_acquire(a, "free2", 5000, 0, record, &victim_o, &victim),
                     RELOCK_OK);
    assert_int_equal(run_until(&victim_o.calls, 1, 5000), 1);
    assert_int_equal(o.st, RELOCK_OK);
    assert_int_equal(victim_o.st, RELOCK_ECANCELED);
    assert_non_null(strstr(victim_o.msg, "released"));
    assert_int_equal(exists("cancel:free2"), 0); /* the win was undone */
    relock_lock_free(o.l);

    /* misuse */
    assert_int_equal(relock_async_cancel(NULL), RELOCK_EINVAL);
    assert_int_equal(relock_async_release(NULL, record, &o), RELOCK_EINVAL);
    relock_release(held);
    relock_lock_free(held);
    relock_client_free(b);
    relock_async_free(a);
    loop_fini();
}

/* The commands the server has run since its statistics were last
 * reset, less the INFO that asks (INFO without a section: servers before
 * 2.6 take none). */
static long long commands_run(void)
{
    redisContext *r = raw();
    redisReply *x = redisCommand(r, "INFO");
    assert_true(x && x->type == REDIS_REPLY_STRING);
    const char *at = strstr(x->str, "total_commands_processed:");
    assert_non_null(at);
    long long n = atoll(at + strlen("total_commands_processed:"));
    freeReplyObject(x);
    redisFree(r);
    return n - 1;
}

/* A waiter behind a holder backs off as the blocking one does: the pause
 * between attempts doubles from wait.backoff_min_ms up to
 * wait.backoff_max_ms (2 and 200 ms by default, a pause of half to all of
 * it), so a 3 s wait makes at most about 40 attempts (about 25 on an idle
 * machine, four commands each in modern mode), not one every few
 * milliseconds (about 3,000 commands). */
static void test_backoff_grows(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = client(&lp, modern_or_legacy(), "backoff:");
    relock_client *b;
    relock_config *cfg = config(modern_or_legacy(), "backoff:");
    assert_int_equal(relock_connect(cfg, &b), RELOCK_OK);
    relock_config_free(cfg);
    relock_lock *held;
    assert_int_equal(relock_try_acquire(b, "w", 20000, &held), RELOCK_OK);
    redisContext *r = raw();
    freeReplyObject(redisCommand(r, "CONFIG RESETSTAT"));
    redisFree(r);
    outcome o = {0};
    uint64_t t0 = tu_now_ms();
    assert_int_equal(relock_async_acquire(a, "w", 5000, 3000, record, &o, NULL), RELOCK_OK);
    assert_int_equal(run_until(&o.calls, 1, 15000), 1);
    uint64_t took = tu_now_ms() - t0;
    long long n = commands_run();
    assert_int_equal(o.st, RELOCK_TIMEOUT);
    if (n >= 300)
        fail_msg("the waiter sent %lld commands in its %llu ms wait", n,
                 (unsigned long long)took);
    assert_int_equal(relock_release(held), RELOCK_OK);
    relock_lock_free(held);
    relock_client_free(b);
    relock_async_free(a);
    loop_fini();
}

/* ------------------------------------------------------------ free in flight */

enum { FREE_N = 200 };
static outcome freed[FREE_N + 1];
static relock_async *to_free;

static void free_from_cb(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                         void *arg)
{
    record(a, st, l, e, arg);
    if (l)
        relock_lock_free(l);
    if (to_free) {
        relock_async *x = to_free;
        to_free = NULL;
        relock_async_free(x); /* from within a callback of its own */
    }
}

/* A modern client meeting a live classic holder says so in the detail,
 * as the blocking client does (migration.md: the emergency). */
static void test_classic_holder_said(void **state)
{
    (void)state;
    if (!testsrv_mode_runs("modern")) {
        testsrv_note_skip("modern");
        return;
    }
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = client(&lp, "modern", "classic:");
    redisContext *r = raw();
    redisReply *x = redisCommand(r, "SET classic:k %lld", (long long)time(NULL) + 60);
    freeReplyObject(x);
    outcome o = {0};
    assert_int_equal(relock_async_acquire(a, "k", 5000, 0, record, &o, NULL), RELOCK_OK);
    assert_int_equal(run_until(&o.calls, 1, 5000), 1);
    assert_int_equal(o.st, RELOCK_BUSY);
    assert_non_null(strstr(o.msg, "lock k is held" RELOCK_CLASSIC_HOLDER_NOTE));
    memset(&o, 0, sizeof o);
    assert_int_equal(relock_async_acquire(a, "k", 5000, 300, record, &o, NULL), RELOCK_OK);
    assert_int_equal(run_until(&o.calls, 1, 5000), 1);
    assert_int_equal(o.st, RELOCK_TIMEOUT);
    assert_non_null(strstr(o.msg, "still held after 300 ms by a classic client"));
    x = redisCommand(r, "DEL classic:k");
    freeReplyObject(x);
    redisFree(r);
    relock_async_free(a);
    loop_fini();
}

/* The watch marker's value, or NULL when the key is absent. */
static char *get_value(const char *key)
{
    redisContext *r = raw();
    redisReply *x = redisCommand(r, "GET %s", key);
    char *v = x->type == REDIS_REPLY_STRING ? strdup(x->str) : NULL;
    freeReplyObject(x);
    redisFree(r);
    return v;
}

/*
 * Bridge and modern clients write the watch marker (migration.md, "The
 * marker key"), from which `relock scan` counts its quiet window, once per
 * client with SETNX before their first attempt, as the blocking client
 * does; legacy clients watch for nothing and do not write it.
 */
static void test_watch_marker(void **state)
{
    (void)state;
    for (int mi = 0; mi < 3; mi++) {
        SKIP_MODE(modes[mi]);
        char prefix[32], key[64];
        snprintf(prefix, sizeof prefix, "watch-%s:", modes[mi]);
        snprintf(key, sizeof key, "%s relock:watching-since", prefix);
        int watches = strcmp(modes[mi], "legacy") != 0;
        relock_async_loop lp;
        loop_init(&lp);
        relock_async *a = client(&lp, modes[mi], prefix);
        long long before = (long long)time(NULL) * 1000 - 1000;
        outcome o = {0};
        assert_int_equal(relock_async_acquire(a, "w1", 5000, 0, record, &o, NULL), RELOCK_OK);
        finish(&o, 5000);
        assert_int_equal(o.st, RELOCK_OK);
        long never = 0; /* the marker's reply comes meanwhile */
        run_until(&never, 1, 300);
        long long after = (long long)time(NULL) * 1000 + 1000;
        char *v = get_value(key);
        if (!watches) {
            if (v)
                fail_msg("legacy client wrote the watch marker: %s", v);
        } else if (!v || atoll(v) < before || atoll(v) > after) {
            fail_msg("%s client: watch marker %s after its first acquire, expected a time in "
                     "[%lld, %lld]",
                     modes[mi], v ? v : "absent", before, after);
        }
        free(v);
        memset(&o.calls, 0, sizeof o.calls);
        relock_lock *l1 = o.l;
        assert_int_equal(relock_async_release(l1, record, &o), RELOCK_OK);
        finish(&o, 5000);
        relock_lock_free(l1);
        /* once per client: deleted, it is not written again by this one */
        redisContext *r = raw();
        freeReplyObject(redisCommand(r, "DEL %s", key));
        memset(&o, 0, sizeof o);
        assert_int_equal(relock_async_acquire(a, "w2", 5000, 0, record, &o, NULL), RELOCK_OK);
        finish(&o, 5000);
        assert_int_equal(o.st, RELOCK_OK);
        run_until(&never, 1, 300);
        assert_int_equal(exists(key), 0);
        relock_lock_free(o.l);
        relock_async_free(a);
        /* SETNX: a later client keeps the first watcher's time */
        freeReplyObject(redisCommand(r, "SET %s 1000", key));
        a = client(&lp, modes[mi], prefix);
        memset(&o, 0, sizeof o);
        assert_int_equal(relock_async_acquire(a, "w3", 5000, 0, record, &o, NULL), RELOCK_OK);
        finish(&o, 5000);
        assert_int_equal(o.st, RELOCK_OK);
        run_until(&never, 1, 300);
        v = get_value(key);
        assert_non_null(v);
        assert_string_equal(v, "1000");
        free(v);
        relock_lock_free(o.l);
        freeReplyObject(redisCommand(r, "DEL %s", key));
        redisFree(r);
        relock_async_free(a);
        loop_fini();
    }
}

/* ------------------------------------------------------------ scans and callbacks */

/* One scan's outcome; what its callback then does to the client. */
typedef struct scan_seen {
    long calls;
    relock_status st;
    int have_result, complete;
    long long examined;
    int then; /* 1: start next's scan; 2: free the client */
    struct scan_seen *next;
} scan_seen;

static void scan_cb(relock_async *a, relock_status st, relock_scan_result *r,
                    const relock_error *e, void *arg)
{
    (void)e;
    scan_seen *s = arg;
    s->calls++;
    s->st = st;
    s->have_result = r != NULL;
    s->complete = r && relock_scan_result_complete(r);
    s->examined = r ? relock_scan_result_count(r, RELOCK_SCAN_EXAMINED) : -1;
    relock_scan_result_free(r);
    if (s->then == 1)
        assert_int_equal(relock_async_scan(a, NULL, NULL, NULL, scan_cb, s->next), RELOCK_OK);
    else if (s->then == 2)
        relock_async_free(a);
}

/* Sets (to a stale legacy timestamp) or deletes the keys prefix1..prefixn,
 * pipelined: servers before 2.6 have no EVAL. */
static void many_keys(redisContext *r, const char *prefix, int n, int set)
{
    for (int i = 1; i <= n; i++)
        if (set)
            redisAppendCommand(r, "SET %s%d 1000000000", prefix, i);
        else
            redisAppendCommand(r, "DEL %s%d", prefix, i);
    for (int i = 1; i <= n; i++) {
        redisReply *rep = NULL;
        assert_int_equal(redisGetReply(r, (void **)&rep), REDIS_OK);
        assert_true(rep->type != REDIS_REPLY_ERROR);
        freeReplyObject(rep);
    }
}

/*
 * A scan walking many keys (several runs of its machine) while other
 * callbacks act on its client: an acquire's callback frees the client
 * (the scan ends once, cancelled, with its partial result); a scan's own
 * callback starts another scan, whose callback frees the client; a scan's
 * callback frees the client while another scan waits behind it.  Under
 * the sanitizers, nothing is used after it is freed or leaked.
 */
static void test_scan_reentry(void **state)
{
    (void)state;
    redisContext *r = raw();
    many_keys(r, "sre:", 3000, 1);
    for (int round = 0; round < 3; round++) {
        relock_async_loop lp;
        loop_init(&lp);
        relock_async *a = client(&lp, modern_or_legacy(), "sre:");
        scan_seen s1 = {0}, s2 = {0};
        assert_int_equal(relock_async_scan(a, NULL, NULL, NULL, scan_cb, &s1), RELOCK_OK);
        if (round == 0) {
            /* an acquire behind the scan's first batches frees the client */
            memset(freed, 0, sizeof freed);
            to_free = a;
            assert_int_equal(
                relock_async_try_acquire(a, "x", 5000, free_from_cb, &freed[0], NULL), RELOCK_OK);
        } else if (round == 1) {
            s1.then = 1;
            s1.next = &s2;
            s2.then = 2;
        } else {
            s1.then = 2;
            assert_int_equal(relock_async_scan(a, NULL, NULL, NULL, scan_cb, &s2), RELOCK_OK);
        }
        long done = 0;
        uint64_t end = tu_now_ms() + 20000;
        while (tu_now_ms() < end && !(s1.calls && (round == 0 ? freed[0].calls : s2.calls))) {
            loop_once();
            done++;
        }
        assert_int_equal(s1.calls, 1);
        assert_true(s1.have_result);
        if (round == 0) {
            assert_int_equal(freed[0].calls, 1);
            assert_null(to_free);
            if (s1.st != RELOCK_ECANCELED || s1.complete)
                fail_msg("scan after a free: %s, complete %d", relock_status_name(s1.st),
                         s1.complete);
        } else {
            assert_int_equal(s1.st, RELOCK_OK);
            assert_true(s1.complete);
            assert_true(s1.examined >= 3000);
            assert_int_equal(s2.calls, 1);
            assert_true(s2.have_result);
            /* the second: a whole walk, or cancelled by the free before it ran */
            if (round == 1)
                assert_int_equal(s2.st, RELOCK_OK);
            else if (s2.st != RELOCK_ECANCELED)
                fail_msg("scan queued behind a free: %s", relock_status_name(s2.st));
        }
        run_for(50);
        loop_fini();
    }
    many_keys(r, "sre:", 3000, 0);
    redisFree(r);
}

/* One acquire and release after another on "t" until told to stop. */
typedef struct cycler {
    relock_async *a;
    int stop, running;
    long cycles, failed;
    char msg[512];
} cycler;

static void cycle_acquired(relock_async *a, relock_status st, relock_lock *l,
                           const relock_error *e, void *arg);

static void cycle_released(relock_async *a, relock_status st, relock_lock *l,
                           const relock_error *e, void *arg)
{
    (void)l;
    cycler *y = arg;
    if (st != RELOCK_OK) {
        y->failed++;
        snprintf(y->msg, sizeof y->msg, "release: %s", e->message);
    }
    relock_lock_free(l);
    y->cycles++;
    if (y->stop ||
        relock_async_try_acquire(a, "t", 10000, cycle_acquired, y, NULL) != RELOCK_OK)
        y->running = 0;
}

static void cycle_acquired(relock_async *a, relock_status st, relock_lock *l,
                           const relock_error *e, void *arg)
{
    (void)a;
    cycler *y = arg;
    if (st != RELOCK_OK || relock_async_release(l, cycle_released, y) != RELOCK_OK) {
        y->failed++;
        snprintf(y->msg, sizeof y->msg, "acquire: %s", e->message);
        y->running = 0;
    }
}

/*
 * A scan beside a WATCH transaction on its connection (a modern client on
 * a server without Lua, through the proxy): acquires and releases one
 * after another, each a WATCH ... EXEC spread over several batches, while
 * the scan's reads wait for each transaction to end; neither meets the
 * other's commands (a read queued inside MULTI, a write outside it), the
 * counts are exact, and no command was refused inside a transaction.
 */
static void test_scan_beside_transactions(void **state)
{
    (void)state;
    if (testsrv_target_version() != NULL)
        return; /* the proxy in front of the server of the day only */
    redisContext *r = raw();
    many_keys(r, "stx:k", 1500, 1);
    testsrv px;
    static const char *const nolua[] = {"--no-lua", NULL};
    assert_int_equal(testsrv_start_proxy(&px, srv.port, "7", nolua), 0);
    relock_async_loop lp;
    loop_init(&lp);
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", px.port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", "modern"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "key_prefix", "stx:"), RELOCK_OK);
    relock_async *a = NULL;
    assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_OK);
    relock_config_free(cfg);
    cycler y = {a, 0, 1, 0, 0, ""};
    assert_int_equal(relock_async_try_acquire(a, "t", 10000, cycle_acquired, &y, NULL),
                     RELOCK_OK);
    scan_seen s1 = {0};
    assert_int_equal(relock_async_scan(a, "stx:k*", NULL, NULL, scan_cb, &s1), RELOCK_OK);
    uint64_t end = tu_now_ms() + 30000;
    while (tu_now_ms() < end && !s1.calls)
        loop_once();
    y.stop = 1;
    while (tu_now_ms() < end && y.running)
        loop_once();
    assert_int_equal(s1.calls, 1);
    if (s1.st != RELOCK_OK || !s1.complete || s1.examined != 1500)
        fail_msg("scan: %s, complete %d, %lld keys", relock_status_name(s1.st), s1.complete,
                 s1.examined);
    print_message("%ld acquire-release cycles during the scan\n", y.cycles);
    if (y.failed)
        fail_msg("%ld cycles failed: %s", y.failed, y.msg);
    assert_false(y.running);
    assert_true(y.cycles >= 2);
    char *v = testsrv_cmd(&px, "RELOCK-PROXY REFUSED");
    assert_non_null(v);
    assert_string_equal(v, "0");
    free(v);
    v = testsrv_cmd(&px, "RELOCK-PROXY COMMANDS-LIST");
    if (!v || !strstr(v, "MULTI"))
        fail_msg("no transaction ran: %s", v ? v : "?");
    free(v);
    relock_async_free(a);
    run_for(50);
    loop_fini();
    testsrv_stop(&px);
    many_keys(r, "stx:k", 1500, 0);
    redisFree(r);
}

static void test_free_in_flight(void **state)
{
    (void)state;
    for (int round = 0; round < 2; round++) {
        relock_async_loop lp;
        loop_init(&lp);
        char prefix[16];
        snprintf(prefix, sizeof prefix, "free%d:", round);
        relock_async *a = client(&lp, modern_or_legacy(), prefix);
        memset(freed, 0, sizeof freed);
        /* one waiter on a held lock, FREE_N acquires of free locks */
        outcome hold = {0};
        assert_int_equal(relock_async_try_acquire(a, "held", 5000, record, &hold, NULL),
                         RELOCK_OK);
        assert_int_equal(run_until(&hold.calls, 1, 5000), 1);
        assert_int_equal(hold.st, RELOCK_OK);
        assert_int_equal(relock_async_keep(hold.l, NULL, NULL), RELOCK_OK);
        assert_int_equal(
            relock_async_acquire(a, "held", 5000, RELOCK_WAIT_FOREVER, free_from_cb, &freed[0], NULL),
            RELOCK_OK);
        run_for(200);
        for (int i = 1; i <= FREE_N; i++) {
            char name[32];
            snprintf(name, sizeof name, "f%d", i);
            assert_int_equal(relock_async_try_acquire(a, name, 5000, free_from_cb, &freed[i], NULL),
                             RELOCK_OK);
        }
        if (round == 0) {
            relock_async_free(a); /* at once: nothing of the acquires was sent */
        } else {
            to_free = a; /* from the first callback, with the rest in flight */
            long dummy = 0;
            uint64_t end = tu_now_ms() + 5000;
            while (to_free && tu_now_ms() < end)
                loop_once();
            (void)dummy;
            assert_null(to_free);
        }
        int cancelled = 0, ambiguous = 0, ok = 0;
        for (int i = 0; i <= FREE_N; i++) {
            assert_int_equal(freed[i].calls, 1); /* each callback once */
            if (freed[i].st == RELOCK_ECANCELED)
                cancelled++;
            else if (freed[i].st == RELOCK_EAMBIGUOUS)
                ambiguous++;
            else if (freed[i].st == RELOCK_OK)
                ok++;
            else
                fail_msg("free: op %d: %s", i, relock_status_name(freed[i].st));
        }
        /* the waiter: cancelled, or ambiguous when an attempt was in flight */
        assert_true(freed[0].st == RELOCK_ECANCELED || freed[0].st == RELOCK_EAMBIGUOUS);
        if (round == 0) /* nothing of the new acquires was sent */
            assert_true(cancelled >= FREE_N);
        else
            assert_true(ok >= 1 && ambiguous + ok + cancelled == FREE_N + 1);
        /* the kept lock's handle outlives its client */
        assert_string_equal(relock_lock_name(hold.l), "held");
        relock_lock_free(hold.l);
        run_for(100);
        loop_fini();
    }
}

/* ------------------------------------------------------------ dead holder */

static void test_dead_holder(void **state)
{
    (void)state;
    for (int mi = 0; mi < 3; mi++) {
        SKIP_MODE(modes[mi]);
        char prefix[32];
        snprintf(prefix, sizeof prefix, "dead-%s:", modes[mi]);
        tu_chan ch;
        assert_int_equal(tu_chan_open(&ch), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            relock_client *c;
            relock_config *cfg = config(modes[mi], prefix);
            relock_lock *l;
            if (relock_connect(cfg, &c) != RELOCK_OK)
                _exit(1);
            char at[32]; /* the monotonic clock is the machine's: the parent reads it too */
            snprintf(at, sizeof at, "%llu", (unsigned long long)tu_now_ms());
            if (relock_try_acquire(c, "d", 1500, &l) != RELOCK_OK)
                _exit(1);
            tu_chan_send(&ch, at);
            for (;;)
                pause();
        }
        char line[32];
        assert_int_equal(tu_chan_recv(&ch, line, sizeof line, 10000), 0);
        uint64_t held_at = strtoull(line, NULL, 10); /* just before the holder's acquire */
        kill(pid, mi == 1 ? SIGSTOP : SIGKILL);
        relock_async_loop lp;
        loop_init(&lp);
        relock_async *a = client(&lp, modes[mi], prefix);
        outcome o = {0};
        assert_int_equal(relock_async_acquire(a, "d", 5000, 15000, record, &o, NULL), RELOCK_OK);
        assert_int_equal(run_until(&o.calls, 1, 20000), 1);
        if (o.st != RELOCK_OK)
            fail_msg("%s: %s: %s", modes[mi], relock_status_name(o.st), o.msg);
        /* not before the holder's lease of 1500 ms ran out */
        assert_true(o.at - held_at >= 1400);
        relock_lock_free(o.l);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        tu_chan_close(&ch);
        relock_async_free(a);
        loop_fini();
    }
}

/* ------------------------------------------------------------ stalled server */

static void test_stalled_server(void **state)
{
    (void)state;
    testsrv own;
    assert_int_equal(testsrv_start(&own, NULL), 0);
    relock_async_loop lp;
    loop_init(&lp);
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", own.port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", modern_or_legacy()), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "command_timeout_ms", "300"), RELOCK_OK);
    relock_async *a = NULL;
    assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_OK);
    relock_config_free(cfg);
    outcome first = {0};
    assert_int_equal(relock_async_try_acquire(a, "s0", 5000, record, &first, NULL), RELOCK_OK);
    assert_int_equal(run_until(&first.calls, 1, 5000), 1);
    assert_int_equal(first.st, RELOCK_OK);

    kill(own.pid, SIGSTOP);
    enum { NS = 20 };
    outcome o[NS];
    memset(o, 0, sizeof o);
    long done = 0;
    uint64_t t0 = tu_now_ms();
    for (int i = 0; i < NS; i++) {
        char name[16];
        snprintf(name, sizeof name, "s%d", i + 1);
        assert_int_equal(relock_async_try_acquire(a, name, 5000, record, &o[i], NULL), RELOCK_OK);
    }
    outcome rel = {0};
    assert_int_equal(relock_async_release(first.l, record, &rel), RELOCK_OK);
    uint64_t end = t0 + 10000;
    while (tu_now_ms() < end) {
        done = rel.calls;
        for (int i = 0; i < NS; i++)
            done += o[i].calls;
        if (done == NS + 1)
            break;
        loop_once();
    }
    uint64_t took = tu_now_ms() - t0;
    kill(own.pid, SIGCONT);
    assert_int_equal(done, NS + 1);
    for (int i = 0; i < NS; i++) {
        assert_int_equal(o[i].calls, 1);
        /* the write may have run: ambiguous (a read-back failed too), or EIO */
        if (o[i].st != RELOCK_EAMBIGUOUS && o[i].st != RELOCK_EIO)
            fail_msg("stalled acquire %d: %s: %s", i, relock_status_name(o[i].st), o[i].msg);
    }
    assert_true(rel.st == RELOCK_EAMBIGUOUS || rel.st == RELOCK_EIO);
    assert_true(o[0].msg[0] != '\0');
    assert_true(took >= 250 && took < 8000);
    /* the server back: the client reconnects for the next operation */
    outcome again = {0};
    assert_int_equal(relock_async_try_acquire(a, "after", 5000, record, &again, NULL), RELOCK_OK);
    assert_int_equal(run_until(&again.calls, 1, 5000), 1);
    if (again.st != RELOCK_OK)
        fail_msg("after SIGCONT: %s: %s", relock_status_name(again.st), again.msg);
    relock_lock_free(again.l);
    relock_lock_free(first.l);
    relock_async_free(a);
    loop_fini();
    testsrv_stop(&own);
}

/* ------------------------------------------------------------ renewal */

static long lost_calls;
static relock_status lost_why;

static void on_lost(relock_async *a, relock_lock *l, relock_status why, const relock_error *e,
                    void *arg)
{
    (void)a, (void)l, (void)e, (void)arg;
    lost_calls++;
    lost_why = why;
}

static void test_keep(void **state)
{
    (void)state;
    for (int mi = 0; mi < 3; mi++) {
        SKIP_MODE(modes[mi]);
        relock_async_loop lp;
        loop_init(&lp);
        char prefix[32];
        snprintf(prefix, sizeof prefix, "keep-%s:", modes[mi]);
        relock_async *a = client(&lp, modes[mi], prefix);
        outcome o = {0};
        assert_int_equal(relock_async_try_acquire(a, "k", 1500, record, &o, NULL), RELOCK_OK);
        assert_int_equal(run_until(&o.calls, 1, 5000), 1);
        assert_int_equal(o.st, RELOCK_OK);
        lost_calls = 0;
        assert_int_equal(relock_async_keep(o.l, on_lost, NULL), RELOCK_OK);
        outcome x = {0};
        assert_int_equal(relock_async_extend(o.l, 0, record, &x), RELOCK_EINVAL);
        run_for(3500); /* more than two leases */
        assert_int_equal(lost_calls, 0);
        char key[64];
        snprintf(key, sizeof key, "%sk", prefix);
        assert_int_equal(exists(key), 1);
        assert_true(relock_lock_validity_ms(o.l) > 0);
        /* someone deletes it: the next renewal finds it lost */
        redisContext *r = raw();
        freeReplyObject(redisCommand(r, "DEL %s", key));
        redisFree(r);
        assert_int_equal(run_until(&lost_calls, 1, 5000), 1);
        assert_int_equal(lost_why, RELOCK_LOST);
        assert_int_equal(relock_async_keep_stop(o.l), RELOCK_LOST);
        outcome rel = {0};
        assert_int_equal(relock_async_release(o.l, record, &rel), RELOCK_OK);
        assert_int_equal(run_until(&rel.calls, 1, 3000), 1);
        assert_int_equal(rel.st, RELOCK_LOST);
        relock_lock_free(o.l);
        /* a release while a renewal is in flight follows it */
        memset(&o, 0, sizeof o);
        assert_int_equal(relock_async_try_acquire(a, "k3", 300, record, &o, NULL), RELOCK_OK);
        assert_int_equal(run_until(&o.calls, 1, 5000), 1);
        assert_int_equal(o.st, RELOCK_OK);
        lost_calls = 0;
        assert_int_equal(relock_async_keep(o.l, on_lost, NULL), RELOCK_OK);
        uint64_t until = tu_now_ms() + 5000;
        while (relock_async_pending(a) == 0 && tu_now_ms() < until)
            loop_once(); /* the renewal's extend started */
        assert_int_equal(relock_async_pending(a), 1);
        memset(&rel, 0, sizeof rel);
        assert_int_equal(relock_async_release(o.l, record, &rel), RELOCK_OK);
        assert_int_equal(run_until(&rel.calls, 1, 5000), 1);
        if (rel.st != RELOCK_OK)
            fail_msg("%s: release after a renewal: %s: %s", modes[mi],
                     relock_status_name(rel.st), rel.msg);
        assert_ptr_equal(rel.l, o.l);
        snprintf(key, sizeof key, "%sk3", prefix);
        assert_int_equal(exists(key), 0);
        assert_int_equal(lost_calls, 0);
        relock_lock_free(o.l);
        /* extend, then release, plainly */
        memset(&o, 0, sizeof o);
        assert_int_equal(relock_async_try_acquire(a, "k2", 5000, record, &o, NULL), RELOCK_OK);
        assert_int_equal(run_until(&o.calls, 1, 5000), 1);
        relock_lock *l = o.l;
        memset(&x, 0, sizeof x);
        assert_int_equal(relock_async_extend(l, 20000, record, &x), RELOCK_OK);
        assert_int_equal(relock_async_extend(l, 20000, record, &x), RELOCK_EINVAL); /* one at a time */
        assert_int_equal(run_until(&x.calls, 1, 5000), 1);
        assert_int_equal(x.st, RELOCK_OK);
        assert_true(relock_lock_validity_ms(l) > 10000);
        /* the blocking calls refuse an asynchronous client's lock */
        assert_int_equal(relock_release(l), RELOCK_EUNSUPPORTED);
        assert_int_equal(relock_extend(l, 0), RELOCK_EUNSUPPORTED);
        assert_int_equal(relock_keep(l, NULL, NULL), RELOCK_EUNSUPPORTED);
        memset(&rel, 0, sizeof rel);
        assert_int_equal(relock_async_release(l, record, &rel), RELOCK_OK);
        relock_lock_free(l); /* freed with its release in flight: safe */
        assert_int_equal(run_until(&rel.calls, 1, 5000), 1);
        assert_int_equal(rel.st, RELOCK_OK);
        assert_null(rel.l);
        relock_lock_free(NULL);
        relock_async_free(a);
        loop_fini();
    }
}


/* ------------------------------------------------------------ old servers */

/* Through the compat proxy's personalities: 2.0 (MULTI without WATCH),
 * 2.2 (WATCH ... EXEC: a transaction owns the connection while the other
 * operations' batches wait) and 2.6.0 (scripts), in legacy mode, and a
 * server without Lua in modern mode (its WATCH way).  Many locks in
 * flight, a busy one, a waiter woken by the release, all released. */
static void old_server_round(int port, const char *mode, const char *tag)
{
    relock_async_loop lp;
    loop_init(&lp);
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", mode), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "key_prefix", tag), RELOCK_OK);
    relock_async *a = NULL;
    assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_OK);
    relock_client *b;
    assert_int_equal(relock_connect(cfg, &b), RELOCK_OK);
    relock_config_free(cfg);
    enum { NOLD = 60 };
    memset(many, 0, sizeof many);
    many_done = 0;
    for (int i = 0; i < NOLD; i++) {
        char name[32];
        snprintf(name, sizeof name, "o%d", i);
        assert_int_equal(relock_async_try_acquire(a, name, 30000, many_cb, &many[i], NULL),
                         RELOCK_OK);
    }
    assert_int_equal(run_until(&many_done, NOLD, 30000), NOLD);
    for (int i = 0; i < NOLD; i++)
        if (many[i].st != RELOCK_OK)
            fail_msg("%s %s lock %d: %s: %s", tag, mode, i, relock_status_name(many[i].st),
                     many[i].msg);
    /* held by the blocking client: busy, then a waiter gets it after the release */
    relock_lock *held;
    assert_int_equal(relock_try_acquire(b, "w", 30000, &held), RELOCK_OK);
    outcome busy = {0}, wait = {0};
    assert_int_equal(relock_async_try_acquire(a, "w", 5000, record, &busy, NULL), RELOCK_OK);
    assert_int_equal(relock_async_acquire(a, "w", 5000, 10000, record, &wait, NULL), RELOCK_OK);
    assert_int_equal(run_until(&busy.calls, 1, 10000), 1);
    assert_int_equal(busy.st, RELOCK_BUSY);
    run_for(300);
    assert_int_equal(wait.calls, 0);
    assert_int_equal(relock_release(held), RELOCK_OK);
    relock_lock_free(held);
    assert_int_equal(run_until(&wait.calls, 1, 10000), 1);
    if (wait.st != RELOCK_OK)
        fail_msg("%s waiter: %s: %s", tag, relock_status_name(wait.st), wait.msg);
    relock_lock *locks[NOLD + 1];
    for (int i = 0; i < NOLD; i++)
        locks[i] = many[i].l;
    locks[NOLD] = wait.l;
    memset(many, 0, sizeof many);
    many_done = 0;
    for (int i = 0; i <= NOLD; i++)
        assert_int_equal(relock_async_release(locks[i], many_cb, &many[i]), RELOCK_OK);
    assert_int_equal(run_until(&many_done, NOLD + 1, 30000), NOLD + 1);
    for (int i = 0; i <= NOLD; i++) {
        if (many[i].st != RELOCK_OK)
            fail_msg("%s release %d: %s: %s", tag, i, relock_status_name(many[i].st),
                     many[i].msg);
        relock_lock_free(locks[i]);
    }
    relock_client_free(b);
    relock_async_free(a);
    loop_fini();
}

static void test_old_servers(void **state)
{
    (void)state;
    static const char *const pers[] = {"2.0", "2.2", "2.6.0", "valkey-9.0"};
    static const char *const mode[] = {"legacy", "legacy", "legacy", "modern"};
    for (int i = 0; i < 4; i++) {
        if (i < 3 ? !testsrv_personality_runs(pers[i]) : testsrv_target_version() != NULL)
            continue;
        testsrv px;
        static const char *const nolua[] = {"--no-lua", NULL};
        assert_int_equal(testsrv_start_proxy(&px, srv.port, pers[i], i == 3 ? nolua : NULL), 0);
        char tag[32];
        snprintf(tag, sizeof tag, "old-%s:", pers[i]);
        old_server_round(px.port, mode[i], tag);
        testsrv_stop(&px);
    }
}

/* ------------------------------------------------------------ reset */

/*
 * A relay between the client and the server, on a thread: bytes pass both
 * ways until the test asks it to swallow the server's replies, then to
 * reset the client's connection (SO_LINGER 0: an RST, as a server's host
 * or a middlebox gives, rather than a FIN).
 */
typedef struct relay {
    pthread_t thread;
    int lfd;
    int port;
    volatile int swallow;
    volatile int reset;
} relay;

static void *relay_main(void *p)
{
    relay *r = p;
    int cfd = accept(r->lfd, NULL, NULL);
    if (cfd < 0)
        return NULL;
    int ufd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)srv.port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(ufd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(cfd);
        close(ufd);
        return NULL;
    }
    uint64_t end = tu_now_ms() + 20000;
    char buf[16384];
    while (!r->reset && tu_now_ms() < end) {
        struct pollfd pf[2] = {{cfd, POLLIN, 0}, {ufd, POLLIN, 0}};
        if (poll(pf, 2, 10) <= 0)
            continue;
        if (pf[0].revents) {
            ssize_t n = read(cfd, buf, sizeof buf);
            if (n <= 0 || write(ufd, buf, (size_t)n) != n)
                break;
        }
        if (pf[1].revents) {
            ssize_t n = read(ufd, buf, sizeof buf);
            if (n <= 0)
                break;
            if (!r->swallow && write(cfd, buf, (size_t)n) != n)
                break;
        }
    }
    struct linger lg = {1, 0};
    setsockopt(cfd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(cfd);
    close(ufd);
    return NULL;
}

static void relay_start(relay *r)
{
    memset(r, 0, sizeof *r);
    r->lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(r->lfd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(r->lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(r->lfd, 4), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(r->lfd, (struct sockaddr *)&a, &len), 0);
    r->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&r->thread, NULL, relay_main, r), 0);
}

/*
 * The connection reset while a command waits for its reply: the operation
 * ends at once with the connection's error, not after command_timeout_ms
 * (10 s here).  hiredis 0.14's libuv adapter ignored a poll error, which is
 * how libuv reports the reset, so the client sat until its timeout.
 */
static void test_reset(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relay r;
    relay_start(&r);
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", r.port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", modern_or_legacy()), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "key_prefix", "reset:"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "command_timeout_ms", "10000"), RELOCK_OK);
    relock_async *a = NULL;
    assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_OK);
    relock_config_free(cfg);
    outcome o = {0};
    assert_int_equal(relock_async_try_acquire(a, "r1", 5000, record, &o, NULL), RELOCK_OK);
    assert_int_equal(run_until(&o.calls, 1, 5000), 1);
    assert_int_equal(o.st, RELOCK_OK);
    relock_lock_free(o.l);
    r.swallow = 1;
    outcome o2 = {0};
    assert_int_equal(relock_async_try_acquire(a, "r2", 5000, record, &o2, NULL), RELOCK_OK);
    run_for(200); /* sent, its reply swallowed */
    assert_int_equal(o2.calls, 0);
    uint64_t t0 = tu_now_ms();
    r.reset = 1;
    pthread_join(r.thread, NULL);
    close(r.lfd);
    assert_int_equal(run_until(&o2.calls, 1, 15000), 1);
    uint64_t took = tu_now_ms() - t0;
    if (o2.st != RELOCK_EAMBIGUOUS && o2.st != RELOCK_EIO)
        fail_msg("reset: %s: %s", relock_status_name(o2.st), o2.msg);
    if (took >= 3000)
        fail_msg("reset: the operation ended %llu ms after the reset (%s)",
                 (unsigned long long)took, o2.msg);
    relock_async_free(a);
    loop_fini();
}

/* ------------------------------------------------------------ refusals */

static void pipe_handler(int sig)
{
    (void)sig;
}

static void test_refusals(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = NULL;
    assert_int_equal(relock_async_new(NULL, &lp, &a), RELOCK_EINVAL);
    relock_config *cfg = config("modern", "ref:");
    assert_int_equal(relock_config_set(cfg, "servers",
                                       "redis://127.0.0.1:1,redis://127.0.0.1:2,redis://127.0.0.1:3"),
                     RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "durability.replicas", "1"), RELOCK_OK);
    assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_EUNSUPPORTED);
    assert_non_null(strstr(relock_async_error(a)->message, "durability: not with several servers"));
    outcome o = {0};
    assert_int_equal(relock_async_try_acquire(a, "x", 0, record, &o, NULL), RELOCK_EUNSUPPORTED);
    relock_async_free(a);
    relock_config_free(cfg);
    /* nobody listens: the operation fails with the connect error, later
     * ones connect again.  The refusal is seen when the socket reports it,
     * not when a timeout (30 s here) ends the wait, on libuv too (decision
     * 271: relock's adapter passes the poll error on) */
    cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", testsrv_free_port());
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "connect_timeout_ms", "30000"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "command_timeout_ms", "30000"), RELOCK_OK);
    assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_OK);
    relock_config_free(cfg);
    uint64_t t0 = tu_now_ms();
    assert_int_equal(relock_async_try_acquire(a, "x", 0, record, &o, NULL), RELOCK_OK);
    if (run_until(&o.calls, 1, 10000) != 1)
        fail_msg("a refused connect not reported within 10 s (timeouts 30 s)");
    fprintf(stderr, "refused connect reported after %llu ms\n",
            (unsigned long long)(tu_now_ms() - t0));
    assert_int_equal(o.st, RELOCK_EIO);
    if (!strstr(o.msg, "Connection refused"))
        fail_msg("refused connect: %s", o.msg);
    assert_int_equal(relock_async_try_acquire(a, "", 0, record, &o, NULL), RELOCK_EINVAL);
    relock_async_free(a);
    relock_async_free(NULL);
    /* SIGPIPE: left at its default by main(), and still there (decision
     * 241: relock changes no disposition); a handler the program installed
     * stays too */
    struct sigaction sa;
    assert_int_equal(sigaction(SIGPIPE, NULL, &sa), 0);
    assert_true(sa.sa_handler == SIG_DFL);
    struct sigaction mine;
    memset(&mine, 0, sizeof mine);
    mine.sa_handler = pipe_handler;
    sigaction(SIGPIPE, &mine, NULL);
    cfg = config("modern", "ref:");
    assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_OK);
    relock_config_free(cfg);
    assert_int_equal(sigaction(SIGPIPE, NULL, &sa), 0);
    assert_true(sa.sa_handler == pipe_handler);
    relock_async_free(a);
    loop_fini();
}

/*
 * relock_async_keep() after an extend to a shorter lease whose reply was
 * lost: the server holds the short lease (2 s) while the lock's ttl stays
 * 30 s, so a renewal a third of the ttl later (10 s) comes after the key
 * has expired.  The first renewal comes before half of the validity left
 * has passed (as relock_keep()'s does); checked 3.5 s after the extend.
 */
static void test_keep_after_failed_shorter_extend(void **state)
{
    (void)state;
    if (!testsrv_mode_runs("modern") || !testsrv_personality_runs("7"))
        return;
    testsrv px;
    assert_int_equal(testsrv_start_proxy(&px, srv.port, "7", NULL), 0);
    relock_async_loop lp;
    loop_init(&lp);
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", px.port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", "modern"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "key_prefix", "keep-short:"), RELOCK_OK);
    relock_async *a = NULL;
    assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_OK);
    relock_config_free(cfg);
    outcome o = {0};
    assert_int_equal(relock_async_try_acquire(a, "k", 30000, record, &o, NULL), RELOCK_OK);
    assert_int_equal(run_until(&o.calls, 1, 5000), 1);
    assert_int_equal(o.st, RELOCK_OK);
    free(testsrv_cmd(&px, "RELOCK-PROXY FAULT at-reply 1 at-kind close-before"));
    uint64_t t0 = tu_now_ms();
    outcome x = {0};
    assert_int_equal(relock_async_extend(o.l, 2000, record, &x), RELOCK_OK);
    assert_int_equal(run_until(&x.calls, 1, 5000), 1);
    free(testsrv_cmd(&px, "RELOCK-PROXY FAULT off"));
    assert_int_equal(x.st, RELOCK_EAMBIGUOUS);
    char *v = testsrv_cmd(&srv, "PTTL keep-short:k");
    assert_true(atol(v) > 0 && atol(v) <= 2000); /* the short lease is on the server */
    free(v);
    lost_calls = 0;
    assert_int_equal(relock_async_keep(o.l, on_lost, NULL), RELOCK_OK);
    while (tu_now_ms() < t0 + 3500)
        run_for(50);
    if (exists("keep-short:k") != 1)
        fail_msg("kept after a failed extend to 2000 ms of a 30000 ms lock: the key expired "
                 "before the first renewal (lost_calls %ld, validity %lld ms)",
                 lost_calls, relock_lock_validity_ms(o.l));
    v = testsrv_cmd(&srv, "GET keep-short:k");
    assert_string_equal(v, relock_lock_value(o.l));
    free(v);
    assert_int_equal(lost_calls, 0);
    assert_true(relock_lock_validity_ms(o.l) > 0);
    assert_int_equal(relock_async_keep_stop(o.l), RELOCK_OK);
    outcome rel = {0};
    assert_int_equal(relock_async_release(o.l, record, &rel), RELOCK_OK);
    assert_int_equal(run_until(&rel.calls, 1, 5000), 1);
    assert_int_equal(rel.st, RELOCK_OK);
    relock_lock_free(o.l);
    relock_async_free(a);
    loop_fini();
    testsrv_stop(&px);
}

static int group_setup(void **state)
{
    (void)state;
    return testsrv_start(&srv, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    testsrv_stop(&srv);
    return 0;
}

int main(void)
{
    /* SIGPIPE left at its default: the client must keep the process alive */
    signal(SIGPIPE, SIG_DFL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_in_flight), cmocka_unit_test(test_contention),
        cmocka_unit_test(test_cancel),         cmocka_unit_test(test_free_in_flight),
        cmocka_unit_test(test_classic_holder_said), cmocka_unit_test(test_watch_marker),
        cmocka_unit_test(test_dead_holder),    cmocka_unit_test(test_stalled_server),
        cmocka_unit_test(test_keep),           cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_old_servers),  cmocka_unit_test(test_reset),
        cmocka_unit_test(test_keep_after_failed_shorter_extend),
        cmocka_unit_test(test_backoff_grows),
        cmocka_unit_test(test_scan_reentry),
        cmocka_unit_test(test_scan_beside_transactions),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
