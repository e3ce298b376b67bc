/*
 * The asynchronous client over a quorum of three real redis-servers, on
 * libevent (it_async_quorum_libevent) or libuv (it_async_quorum_libuv,
 * built with TEST_LIBUV): acquire and release with many in flight;
 * contention with the blocking quorum client on the same key (never two
 * holders); one server paused (a majority still answers, and the replies
 * it owes are read once it resumes); a majority paused (a clear failure,
 * nothing left held); renewal past the TTL; cancellation of a waiting
 * acquire; freeing with operations in flight.  The scenarios the blocking
 * client shares (acquire, extend and release on all servers, a majority
 * down, a late majority, a waiter notified without the first server or
 * not woken by its own undo, the refusals of timestamp modes and of a
 * password) are written once in test_quorum.c and run through both entry
 * points (it_quorum, it_quorum_async).
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#ifdef TEST_LIBUV
#include "relock_async_libuv.h"
#else
#include "relock_async_libevent.h"
#endif
#include "relock.h"
#include "relock_async.h"
#include "testsrv.h"
#include "testutil.h"

#define N 3
static testsrv srv[N];
static int paused[N];

#include "async_loop.h" /* testloop.h, and an outcome per operation */

/* ------------------------------------------------------------ helpers */

static void pause_srv(int i)
{
    kill(srv[i].pid, SIGSTOP);
    paused[i] = 1;
}

static void resume_srv(int i)
{
    kill(srv[i].pid, SIGCONT);
    paused[i] = 0;
}

/* The configuration of all N servers, with a command timeout. */
static relock_config *qconfig(const char *prefix, long timeout_ms)
{
    char urls[N * 40] = "";
    for (int i = 0; i < N; i++) {
        char one[40];
        snprintf(one, sizeof one, "%sredis://127.0.0.1:%d", i ? ", " : "", srv[i].port);
        strcat(urls, one);
    }
    char tmo[32];
    snprintf(tmo, sizeof tmo, "%ld", timeout_ms);
    relock_config *cfg = relock_config_new();
    assert_int_equal(relock_config_set(cfg, "mode", "modern"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "servers", urls), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "key_prefix", prefix), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "command_timeout_ms", tmo), RELOCK_OK);
    return cfg;
}

static relock_async *qclient(relock_async_loop *lp, const char *prefix, long timeout_ms)
{
    relock_config *cfg = qconfig(prefix, timeout_ms);
    relock_async *a = NULL;
    relock_status st = relock_async_new(cfg, lp, &a);
    if (st != RELOCK_OK)
        fail_msg("relock_async_new: %s", relock_async_error(a)->message);
    relock_config_free(cfg);
    return a;
}

static relock_client *qblocking(const char *prefix, long timeout_ms)
{
    relock_config *cfg = qconfig(prefix, timeout_ms);
    relock_client *c = NULL;
    if (relock_connect(cfg, &c) != RELOCK_OK)
        fail_msg("relock_connect: %s", relock_client_error(c)->message);
    relock_config_free(cfg);
    return c;
}

/* The servers (not paused) whose key holds value. */
static int holders(const char *key, const char *value)
{
    int n = 0;
    for (int i = 0; i < N; i++) {
        if (paused[i])
            continue;
        char *v = testsrv_cmd(&srv[i], "GET %s", key);
        n += v && strcmp(v, value) == 0;
        free(v);
    }
    return n;
}

/* Whether any server not paused has key. */
static int anywhere(const char *key)
{
    int n = 0;
    for (int i = 0; i < N; i++) {
        if (paused[i])
            continue;
        char *v = testsrv_cmd(&srv[i], "EXISTS %s", key);
        n += v && strcmp(v, "1") == 0;
        free(v);
    }
    return n;
}

/* Runs the loop until exactly n servers hold key with value (bounded):
 * an operation ends on a majority, the others follow shortly. */
static int holders_become(const char *key, const char *value, int n)
{
    for (int tries = 0; tries < 100; tries++) {
        if (holders(key, value) == n)
            return 1;
        run_for(20);
    }
    return 0;
}

static void expect_ok(const outcome *o, const char *what)
{
    assert_int_equal(o->calls, 1);
    if (o->st != RELOCK_OK)
        fail_msg("%s: %s: %s", what, relock_status_name(o->st), o->msg);
}

/* ------------------------------------------------------------ basics */

enum { MANY = 200 };
static outcome many[MANY];
static long many_done;

static void many_cb(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                    void *arg)
{
    record(a, st, l, e, arg);
    many_done++;
}

/* What the asynchronous client alone has to show of acquire and release
 * (the rest of the scenario, through both entry points, is test_all_up in
 * test_quorum.c): the callback comes from the loop, a release's callback
 * is given the lock released; and many operations in flight. */
static void test_acquire_release_many(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = qclient(&lp, "aq1:", 500);
    assert_int_equal(relock_async_mode(a), RELOCK_MODE_MODERN);
    assert_non_null(strstr(relock_async_mode_reason(a), "quorum over 3 servers"));
    outcome o = {0};
    assert_int_equal(relock_async_try_acquire(a, "q", 5000, record, &o, NULL), RELOCK_OK);
    assert_int_equal(o.calls, 0); /* from the loop */
    assert_int_equal(run_until(&o.calls, 1, 10000), 1);
    expect_ok(&o, "acquire");
    relock_lock *l = o.l;
    char value[64];
    snprintf(value, sizeof value, "%s", relock_lock_value(l));
    assert_true(holders_become("aq1:q", value, N));
    memset(&o, 0, sizeof o);
    assert_int_equal(relock_async_release(l, record, &o), RELOCK_OK);
    assert_int_equal(o.calls, 0); /* from the loop */
    assert_int_equal(run_until(&o.calls, 1, 10000), 1);
    expect_ok(&o, "release");
    assert_ptr_equal(o.l, l);
    assert_true(holders_become("aq1:q", value, 0));
    relock_lock_free(l);

    /* many in flight, pipelined on the three connections */
    memset(many, 0, sizeof many);
    many_done = 0;
    for (int i = 0; i < MANY; i++) {
        char name[32];
        snprintf(name, sizeof name, "m%d", i);
        assert_int_equal(relock_async_try_acquire(a, name, 30000, many_cb, &many[i], NULL),
                         RELOCK_OK);
    }
    assert_int_equal(relock_async_pending(a), MANY);
    assert_int_equal(run_until(&many_done, MANY, 30000), MANY);
    relock_lock *locks[MANY];
    long long fence_max = 0;
    for (int i = 0; i < MANY; i++) {
        expect_ok(&many[i], "many: acquire");
        locks[i] = many[i].l;
        if (relock_lock_fence(locks[i]) > fence_max)
            fence_max = relock_lock_fence(locks[i]);
    }
    assert_true(fence_max > 0);
    memset(many, 0, sizeof many);
    many_done = 0;
    for (int i = 0; i < MANY; i++)
        assert_int_equal(relock_async_release(locks[i], many_cb, &many[i]), RELOCK_OK);
    assert_int_equal(run_until(&many_done, MANY, 30000), MANY);
    for (int i = 0; i < MANY; i++) {
        expect_ok(&many[i], "many: release");
        relock_lock_free(locks[i]);
    }
    for (int tries = 0; tries < 100 && anywhere("aq1:m7"); tries++)
        run_for(20);
    assert_int_equal(anywhere("aq1:m7"), 0);
    assert_int_equal(relock_async_pending(a), 0);
    relock_async_free(a);
    loop_fini();
}

/* ------------------------------------------------------------ contention */

/* The mutual exclusion is checked on a counter key of the first server,
 * outside the lock's keys: each holder increments it when it wins and
 * decrements it before it releases; a 2 read after an increment means two
 * holders at once. */
static int counter_incr(redisContext *r, int by)
{
    redisReply *x = redisCommand(r, "INCRBY aqc:inside %d", by);
    assert_non_null(x);
    int v = (int)x->integer;
    freeReplyObject(x);
    return v;
}

enum { ROUNDS = 8, HOLD_MS = 40 };
static redisContext *counter;
static long async_wins, overlaps;
static relock_async_loop *cur_loop;
static outcome cont_o;
static relock_async *cont_a;

static void cont_acquire(void);

static void cont_again(void *arg)
{
    (void)arg;
    cont_acquire();
}

static void cont_released(relock_async *a, relock_status st, relock_lock *l,
                          const relock_error *e, void *arg)
{
    (void)a, (void)arg;
    if (st != RELOCK_OK)
        fail_msg("contention: release: %s", e->message);
    relock_lock_free(l);
    if (async_wins < ROUNDS) /* the other side's turn first */
        cur_loop->timer_start(cur_loop->data, HOLD_MS, cont_again, NULL);
}

static void cont_hold_done(void *arg)
{
    relock_lock *l = arg;
    counter_incr(counter, -1);
    assert_int_equal(relock_async_release(l, cont_released, NULL), RELOCK_OK);
}

static void cont_won(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                     void *arg)
{
    record(a, st, l, e, arg);
    if (st != RELOCK_OK)
        fail_msg("contention: acquire: %s", e->message);
    if (counter_incr(counter, 1) != 1)
        overlaps++;
    async_wins++;
    cur_loop->timer_start(cur_loop->data, HOLD_MS, cont_hold_done, l);
}

static void cont_acquire(void)
{
    assert_int_equal(relock_async_acquire(cont_a, "c", 5000, 20000, cont_won, &cont_o, NULL),
                     RELOCK_OK);
}

static void test_contention_with_blocking(void **state)
{
    (void)state;
    counter = redisConnect("127.0.0.1", srv[0].port);
    assert_true(counter && !counter->err);
    redisReply *x = redisCommand(counter, "DEL aqc:inside");
    freeReplyObject(x);
    tu_chan ch;
    assert_int_equal(tu_chan_open(&ch), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* the blocking quorum client, in a process of its own */
        relock_client *b = qblocking("aqc:", 500);
        redisContext *r = redisConnect("127.0.0.1", srv[0].port);
        int bad = 0;
        tu_chan_send(&ch, "ready");
        for (int i = 0; i < ROUNDS; i++) {
            relock_lock *l = NULL;
            if (relock_acquire(b, "c", 5000, 20000, &l) != RELOCK_OK)
                _exit(2);
            redisReply *v = redisCommand(r, "INCRBY aqc:inside 1");
            bad |= !v || v->integer != 1;
            freeReplyObject(v);
            tu_sleep_ms(HOLD_MS);
            v = redisCommand(r, "INCRBY aqc:inside -1");
            freeReplyObject(v);
            if (relock_release(l) != RELOCK_OK)
                _exit(3);
            relock_lock_free(l);
            tu_sleep_ms(HOLD_MS); /* the other side's turn: neither starves the other */
        }
        _exit(bad ? 4 : 0);
    }
    char line[16];
    assert_int_equal(tu_chan_recv(&ch, line, sizeof line, 10000), 0);
    relock_async_loop lp;
    loop_init(&lp);
    cur_loop = &lp;
    cont_a = qclient(&lp, "aqc:", 500);
    async_wins = overlaps = 0;
    cont_acquire();
    assert_int_equal(run_until(&async_wins, ROUNDS, 60000), ROUNDS);
    run_for(300); /* the last release */
    int status = 0;
    for (int i = 0; i < 3000 && waitpid(pid, &status, WNOHANG) == 0; i++)
        run_for(20);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0); /* the blocking side never saw two holders */
    assert_int_equal(overlaps, 0);            /* nor did the asynchronous side */
    assert_int_equal(anywhere("aqc:c"), 0);
    relock_async_free(cont_a);
    loop_fini();
    redisFree(counter);
}

/* ------------------------------------------------------------ a paused server */

static void test_one_server_paused(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    /* each server's timeout: min(command timeout, TTL / 10) = 1 s */
    relock_async *a = qclient(&lp, "aqp:", 1000);
    outcome o = {0};
    assert_int_equal(relock_async_try_acquire(a, "warm", 10000, record, &o, NULL), RELOCK_OK);
    assert_int_equal(run_until(&o.calls, 1, 10000), 1); /* connects all three */
    expect_ok(&o, "acquire");
    relock_lock *warm = o.l;
    pause_srv(2);
    /* acquire, extend, release, several times over: each ends on the two
     * others' answers; the paused server's requests are left owing and,
     * past MAX_OWED_REQUESTS or its timeout, its connection is dropped */
    for (int round = 0; round < 12; round++) {
        char what[64];
        memset(&o, 0, sizeof o);
        uint64_t t0 = tu_now_ms();
        assert_int_equal(relock_async_try_acquire(a, "p", 10000, record, &o, NULL), RELOCK_OK);
        assert_int_equal(run_until(&o.calls, 1, 10000), 1);
        snprintf(what, sizeof what, "round %d: acquire with one server paused", round);
        expect_ok(&o, what);
        relock_lock *l = o.l;
        assert_true(tu_now_ms() - t0 < 3000); /* generous: not the connect/command bounds */
        memset(&o, 0, sizeof o);
        t0 = tu_now_ms();
        assert_int_equal(relock_async_extend(l, 10000, record, &o), RELOCK_OK);
        assert_int_equal(run_until(&o.calls, 1, 10000), 1);
        snprintf(what, sizeof what, "round %d: extend with one server paused", round);
        expect_ok(&o, what);
        assert_true(tu_now_ms() - t0 < 3000);
        memset(&o, 0, sizeof o);
        t0 = tu_now_ms();
        assert_int_equal(relock_async_release(l, record, &o), RELOCK_OK);
        assert_int_equal(run_until(&o.calls, 1, 10000), 1);
        snprintf(what, sizeof what, "round %d: release with one server paused", round);
        expect_ok(&o, what);
        assert_true(tu_now_ms() - t0 < 3000);
        relock_lock_free(l);
    }
    resume_srv(2);
    /* Resumed, it runs what it was sent on the connections it still had
     * (some were dropped for lateness, their requests cut short): the
     * lock it last held is on no majority, and its key expires. */
    run_for(300);
    assert_true(anywhere("aqp:p") <= 1);
    /* The client reads what it is owed and uses the server again once its
     * time alone is over: a new lock is held on all three. */
    int all = 0;
    for (int tries = 0; tries < 20 && !all; tries++) {
        memset(&o, 0, sizeof o);
        assert_int_equal(relock_async_try_acquire(a, "back", 10000, record, &o, NULL), RELOCK_OK);
        assert_int_equal(run_until(&o.calls, 1, 10000), 1);
        expect_ok(&o, "acquire after the resume");
        char value[64];
        snprintf(value, sizeof value, "%s", relock_lock_value(o.l));
        all = holders_become("aqp:back", value, N);
        outcome r = {0};
        assert_int_equal(relock_async_release(o.l, record, &r), RELOCK_OK);
        assert_int_equal(run_until(&r.calls, 1, 10000), 1);
        expect_ok(&r, "release after the resume");
        relock_lock_free(o.l);
        if (!all)
            run_for(200);
    }
    assert_true(all); /* the resumed server holds the lock again, with the others */
    memset(&o, 0, sizeof o);
    assert_int_equal(relock_async_release(warm, record, &o), RELOCK_OK);
    assert_int_equal(run_until(&o.calls, 1, 10000), 1);
    expect_ok(&o, "release warm");
    relock_lock_free(warm);
    relock_async_free(a);
    loop_fini();
}

static void test_majority_paused(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = qclient(&lp, "aqm:", 500);
    outcome o = {0};
    assert_int_equal(relock_async_try_acquire(a, "warm", 5000, record, &o, NULL), RELOCK_OK);
    assert_int_equal(run_until(&o.calls, 1, 10000), 1);
    expect_ok(&o, "acquire");
    relock_lock *warm = o.l;
    pause_srv(1);
    pause_srv(2);
    memset(&o, 0, sizeof o);
    uint64_t t0 = tu_now_ms();
    assert_int_equal(relock_async_try_acquire(a, "m", 5000, record, &o, NULL), RELOCK_OK);
    assert_int_equal(run_until(&o.calls, 1, 10000), 1);
    assert_int_equal(o.st, RELOCK_EIO);
    assert_null(o.l);
    assert_non_null(strstr(o.msg, "majority"));
    assert_true(o.at - t0 < 5000);
    /* a release with a majority silent: not OK */
    outcome r = {0};
    assert_int_equal(relock_async_release(warm, record, &r), RELOCK_OK);
    assert_int_equal(run_until(&r.calls, 1, 10000), 1);
    assert_true(r.st != RELOCK_OK);
    /* the live server holds nothing of the failed acquire (cleaned up) */
    for (int tries = 0; tries < 100 && anywhere("aqm:m"); tries++)
        run_for(20);
    assert_int_equal(anywhere("aqm:m"), 0);
    resume_srv(1);
    resume_srv(2);
    relock_lock_free(warm);
    run_for(200);
    relock_async_free(a);
    loop_fini();
}

/* ------------------------------------------------------------ renewal, cancel, free */

static long lost_calls;

static void on_lost(relock_async *a, relock_lock *l, relock_status st, const relock_error *e,
                    void *arg)
{
    (void)a, (void)l, (void)st, (void)e, (void)arg;
    lost_calls++;
}

static void test_keep(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = qclient(&lp, "aqk:", 500);
    outcome o = {0};
    assert_int_equal(relock_async_try_acquire(a, "k", 600, record, &o, NULL), RELOCK_OK);
    assert_int_equal(run_until(&o.calls, 1, 10000), 1);
    expect_ok(&o, "acquire");
    relock_lock *l = o.l;
    char value[64];
    snprintf(value, sizeof value, "%s", relock_lock_value(l));
    lost_calls = 0;
    assert_int_equal(relock_async_keep(l, on_lost, NULL), RELOCK_OK);
    run_for(2000); /* more than three TTLs */
    assert_int_equal(lost_calls, 0);
    assert_true(holders(("aqk:k"), value) >= N / 2 + 1);
    /* another client cannot take it */
    relock_client *b = qblocking("aqk:", 500);
    relock_lock *lb = NULL;
    assert_int_equal(relock_try_acquire(b, "k", 5000, &lb), RELOCK_BUSY);
    memset(&o, 0, sizeof o);
    assert_int_equal(relock_async_release(l, record, &o), RELOCK_OK);
    assert_int_equal(run_until(&o.calls, 1, 10000), 1);
    expect_ok(&o, "release of a kept lock");
    relock_lock_free(l);
    assert_int_equal(relock_try_acquire(b, "k", 5000, &lb), RELOCK_OK);
    assert_int_equal(relock_release(lb), RELOCK_OK);
    relock_lock_free(lb);
    relock_client_free(b);
    relock_async_free(a);
    loop_fini();
}

/* A kept lock whose majority stops answering: the lost-lock callback,
 * once, by the time its validity has run out (generous bound). */
static uint64_t lost_at;
static relock_status lost_st;

static void on_lost_at(relock_async *a, relock_lock *l, relock_status st, const relock_error *e,
                       void *arg)
{
    (void)a, (void)l, (void)e, (void)arg;
    lost_calls++;
    lost_st = st;
    lost_at = tu_now_ms();
}

static void test_keep_lost(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = qclient(&lp, "aqkl:", 500);
    outcome o = {0};
    assert_int_equal(relock_async_try_acquire(a, "k", 900, record, &o, NULL), RELOCK_OK);
    assert_int_equal(run_until(&o.calls, 1, 10000), 1);
    expect_ok(&o, "acquire");
    relock_lock *l = o.l;
    lost_calls = 0;
    assert_int_equal(relock_async_keep(l, on_lost_at, NULL), RELOCK_OK);
    run_for(400);
    uint64_t t0 = tu_now_ms();
    pause_srv(1);
    pause_srv(2);
    assert_int_equal(run_until(&lost_calls, 1, 10000), 1);
    assert_true(lost_st != RELOCK_OK);
    assert_true(lost_at - t0 < 5000);
    run_for(300);
    assert_int_equal(lost_calls, 1); /* once */
    resume_srv(1);
    resume_srv(2);
    assert_int_equal(relock_async_keep_stop(l), RELOCK_LOST);
    relock_lock_free(l);
    run_for(100);
    relock_async_free(a);
    loop_fini();
}

static void test_cancel_waiting(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = qclient(&lp, "aqx:", 500);
    relock_client *b = qblocking("aqx:", 500);
    relock_lock *held = NULL;
    assert_int_equal(relock_try_acquire(b, "w", 10000, &held), RELOCK_OK);
    outcome o = {0};
    relock_async_op *op = NULL;
    assert_int_equal(relock_async_acquire(a, "w", 5000, RELOCK_WAIT_FOREVER, record, &o, &op),
                     RELOCK_OK);
    run_for(500);
    assert_int_equal(o.calls, 0);
    uint64_t t0 = tu_now_ms();
    assert_int_equal(relock_async_cancel(op), RELOCK_OK);
    assert_int_equal(o.calls, 0);
    assert_int_equal(run_until(&o.calls, 1, 5000), 1);
    assert_int_equal(o.st, RELOCK_ECANCELED);
    assert_null(o.l);
    assert_true(tu_now_ms() - t0 < 3000);
    assert_true(holders("aqx:w", relock_lock_value(held)) == N); /* untouched */
    assert_int_equal(relock_extend(held, 10000), RELOCK_OK);

    /* a waiter woken by the release (notices, or its backoff) wins */
    memset(&o, 0, sizeof o);
    assert_int_equal(relock_async_acquire(a, "w", 5000, 10000, record, &o, NULL), RELOCK_OK);
    run_for(300);
    assert_int_equal(o.calls, 0);
    assert_int_equal(relock_release(held), RELOCK_OK);
    relock_lock_free(held);
    assert_int_equal(run_until(&o.calls, 1, 10000), 1);
    expect_ok(&o, "waiter after the release");
    outcome r = {0};
    assert_int_equal(relock_async_release(o.l, record, &r), RELOCK_OK);
    assert_int_equal(run_until(&r.calls, 1, 10000), 1);
    expect_ok(&r, "release");
    relock_lock_free(o.l);
    relock_client_free(b);
    relock_async_free(a);
    loop_fini();
}

/* Operations started in one turn start together and their first rounds'
 * batches go out in one write per server: each still ends once with its
 * own outcome.  Some are cancelled before they start (nothing sent:
 * ECANCELED, no key anywhere); a client freed with operations not yet
 * started ends each once, from within the call, and wrote nothing. */
static void test_started_together(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = qclient(&lp, "aqt:", 500);
    enum { K = 60 };
    static outcome o[K];
    static relock_async_op *h[K];
    memset(o, 0, sizeof o);
    char name[32], key[48];
    for (int k = 0; k < K; k++) {
        snprintf(name, sizeof name, "t%d", k);
        assert_int_equal(relock_async_try_acquire(a, name, 10000, record, &o[k], &h[k]),
                         RELOCK_OK);
    }
    for (int k = 0; k < K; k += 5)
        assert_int_equal(relock_async_cancel(h[k]), RELOCK_OK);
    long done = 0;
    for (uint64_t end = tu_now_ms() + 10000; done < K && tu_now_ms() < end;) {
        loop_once();
        done = 0;
        for (int k = 0; k < K; k++)
            done += o[k].calls;
    }
    assert_int_equal(done, K);
    for (int k = 0; k < K; k++) {
        assert_int_equal(o[k].calls, 1);
        snprintf(key, sizeof key, "aqt:t%d", k);
        if (k % 5 == 0) {
            if (o[k].st != RELOCK_ECANCELED)
                fail_msg("t%d cancelled: %s: %s", k, relock_status_name(o[k].st), o[k].msg);
            assert_int_equal(anywhere(key), 0);
            continue;
        }
        expect_ok(&o[k], "acquire");
        if (!holders_become(key, relock_lock_value(o[k].l), N))
            fail_msg("t%d: held on %d servers", k, holders(key, relock_lock_value(o[k].l)));
    }
    /* released together too */
    static outcome r[K];
    memset(r, 0, sizeof r);
    for (int k = 1; k < K; k++)
        if (k % 5 != 0)
            assert_int_equal(relock_async_release(o[k].l, record, &r[k]), RELOCK_OK);
    done = 0;
    for (uint64_t end = tu_now_ms() + 10000; done < K - K / 5 && tu_now_ms() < end;) {
        loop_once();
        done = 0;
        for (int k = 0; k < K; k++)
            done += r[k].calls;
    }
    assert_int_equal(done, K - K / 5);
    for (int k = 1; k < K; k++) {
        if (k % 5 == 0)
            continue;
        expect_ok(&r[k], "release");
        relock_lock_free(o[k].l);
    }
    /* freed before any of them started */
    memset(o, 0, sizeof o);
    for (int k = 0; k < 10; k++) {
        snprintf(name, sizeof name, "f%d", k);
        assert_int_equal(relock_async_try_acquire(a, name, 10000, record, &o[k], NULL),
                         RELOCK_OK);
    }
    relock_async_free(a);
    for (int k = 0; k < 10; k++) {
        assert_int_equal(o[k].calls, 1);
        assert_int_equal(o[k].st, RELOCK_ECANCELED);
        snprintf(key, sizeof key, "aqt:f%d", k);
        assert_int_equal(anywhere(key), 0);
    }
    run_for(50);
    loop_fini();
}

/* Connections the servers closed while idle are opened again by the next
 * operation's round. */
static void test_connections_killed(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = qclient(&lp, "aqi:", 500);
    for (int round = 0; round < 2; round++) {
        outcome o = {0};
        assert_int_equal(relock_async_try_acquire(a, "i", 5000, record, &o, NULL), RELOCK_OK);
        assert_int_equal(run_until(&o.calls, 1, 10000), 1);
        expect_ok(&o, "acquire");
        outcome r = {0};
        assert_int_equal(relock_async_release(o.l, record, &r), RELOCK_OK);
        assert_int_equal(run_until(&r.calls, 1, 10000), 1);
        expect_ok(&r, "release");
        relock_lock_free(o.l);
        run_for(100); /* the owed replies read */
        for (int i = 0; i < N; i++)
            free(testsrv_cmd(&srv[i], "CLIENT KILL TYPE normal"));
        run_for(100);
    }
    /* Killed, and written to at once by several operations before the
     * loop reads the close (libuv runs its timers first): the second write
     * to each reset socket fails with EPIPE, and SIGPIPE is at its default
     * action (main()): the process lives, each operation ends once, and
     * the next ones connect afresh. */
    outcome up = {0};
    assert_int_equal(relock_async_try_acquire(a, "up", 5000, record, &up, NULL), RELOCK_OK);
    assert_int_equal(run_until(&up.calls, 1, 10000), 1); /* connected again */
    expect_ok(&up, "acquire");
    run_for(100);
    for (int i = 0; i < N; i++)
        free(testsrv_cmd(&srv[i], "CLIENT KILL TYPE normal"));
    tu_sleep_ms(50); /* the resets are back */
    enum { K = 6 };
    outcome ko[K];
    long kdone = 0;
    memset(ko, 0, sizeof ko);
    for (int k = 0; k < K; k++) {
        char name[16];
        snprintf(name, sizeof name, "k%d", k);
        assert_int_equal(relock_async_try_acquire(a, name, 5000, record, &ko[k], NULL), RELOCK_OK);
    }
    for (uint64_t end = tu_now_ms() + 10000; kdone < K && tu_now_ms() < end;) {
        loop_once();
        kdone = 0;
        for (int k = 0; k < K; k++)
            kdone += ko[k].calls;
    }
    assert_int_equal(kdone, K);
    for (int k = 0; k < K; k++) {
        assert_int_equal(ko[k].calls, 1);
        if (ko[k].st == RELOCK_OK) {
            outcome r = {0};
            assert_int_equal(relock_async_release(ko[k].l, record, &r), RELOCK_OK);
            assert_int_equal(run_until(&r.calls, 1, 10000), 1);
            relock_lock_free(ko[k].l);
        }
    }
    relock_lock_free(up.l); /* its key expires */
    outcome o = {0};
    assert_int_equal(relock_async_try_acquire(a, "after", 5000, record, &o, NULL), RELOCK_OK);
    assert_int_equal(run_until(&o.calls, 1, 10000), 1);
    expect_ok(&o, "acquire after the resets");
    outcome r = {0};
    assert_int_equal(relock_async_release(o.l, record, &r), RELOCK_OK);
    assert_int_equal(run_until(&r.calls, 1, 10000), 1);
    expect_ok(&r, "release after the resets");
    relock_lock_free(o.l);
    relock_async_free(a);
    loop_fini();
}

/* Cancelled while its attempt is in flight and wins: the won lock is
 * released by the quorum's release before ECANCELED. */
static relock_async_op *victim;

static void cancel_other(relock_async *a, relock_status st, relock_lock *l,
                         const relock_error *e, void *arg)
{
    record(a, st, l, e, arg);
    assert_int_equal(relock_async_cancel(victim), RELOCK_OK); /* sent in the same turn */
}

static void test_cancel_in_flight_undone(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = qclient(&lp, "aqu:", 500);
    outcome first = {0}, v = {0};
    assert_int_equal(relock_async_try_acquire(a, "first", 5000, cancel_other, &first, NULL),
                     RELOCK_OK);
    assert_int_equal(relock_async_try_acquire(a, "second", 5000, record, &v, &victim),
                     RELOCK_OK);
    assert_int_equal(run_until(&v.calls, 1, 10000), 1);
    expect_ok(&first, "first");
    assert_int_equal(v.st, RELOCK_ECANCELED);
    assert_null(v.l);
    assert_non_null(strstr(v.msg, "released"));
    for (int tries = 0; tries < 100 && anywhere("aqu:second"); tries++)
        run_for(20);
    assert_int_equal(anywhere("aqu:second"), 0); /* the win was undone everywhere */
    outcome r = {0};
    assert_int_equal(relock_async_release(first.l, record, &r), RELOCK_OK);
    assert_int_equal(run_until(&r.calls, 1, 10000), 1);
    expect_ok(&r, "release");
    relock_lock_free(first.l);
    relock_async_free(a);
    loop_fini();
}

/* What a quorum refuses: durability at once; owner_info leaves no owner
 * record.  (Timestamp modes and a refused password: test_quorum.c, through
 * both entry points.) */
static void test_refusals(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    /* durability: as relock_connect(), not with several servers */
    relock_config *cfg = qconfig("aqr:", 500);
    relock_async *a = NULL;
    assert_int_equal(relock_config_set(cfg, "durability.replicas", "1"), RELOCK_OK);
    assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_EUNSUPPORTED);
    assert_non_null(strstr(relock_async_error(a)->message, "durability"));
    relock_async_free(a);
    relock_config_free(cfg);
    /* owner_info: the lock is taken; no owner record, as the blocking
     * quorum writes none (it would be one server's view) */
    cfg = qconfig("aqr:", 500);
    assert_int_equal(relock_config_set(cfg, "owner_info", "true"), RELOCK_OK);
    assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_OK);
    relock_config_free(cfg);
    outcome ow = {0};
    assert_int_equal(relock_async_try_acquire(a, "ow", 5000, record, &ow, NULL), RELOCK_OK);
    assert_int_equal(run_until(&ow.calls, 1, 10000), 1);
    expect_ok(&ow, "acquire with owner_info");
    run_for(100);
    redisContext *r0 = redisConnect("127.0.0.1", srv[0].port);
    assert_true(r0 && !r0->err);
    redisReply *kx = redisCommand(r0, "KEYS *aqr:ow*");
    assert_non_null(kx);
    for (size_t k = 0; k < kx->elements; k++) /* the lock and its fence counter only */
        if (strcmp(kx->element[k]->str, "aqr:ow") != 0 && !strstr(kx->element[k]->str, "fence"))
            fail_msg("a record beside the quorum's lock: %s", kx->element[k]->str);
    freeReplyObject(kx);
    redisFree(r0);
    outcome owr = {0};
    assert_int_equal(relock_async_release(ow.l, record, &owr), RELOCK_OK);
    assert_int_equal(run_until(&owr.calls, 1, 10000), 1);
    expect_ok(&owr, "release with owner_info");
    relock_lock_free(ow.l);
    relock_async_free(a);
    loop_fini();
}

enum { FREE_N = 50 };
static outcome freed[FREE_N];
static relock_async *to_free;

static void free_from_cb(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                         void *arg)
{
    record(a, st, l, e, arg);
    if (to_free) {
        relock_async *x = to_free;
        to_free = NULL;
        relock_async_free(x); /* from within a callback of its own */
    }
}

static void test_free_in_flight(void **state)
{
    (void)state;
    for (int round = 0; round < 2; round++) {
        relock_async_loop lp;
        loop_init(&lp);
        relock_async *a = qclient(&lp, round ? "aqf1:" : "aqf0:", 500);
        memset(freed, 0, sizeof freed);
        for (int i = 0; i < FREE_N; i++) {
            char name[32];
            snprintf(name, sizeof name, "f%d", i);
            assert_int_equal(
                relock_async_try_acquire(a, name, 5000, free_from_cb, &freed[i], NULL),
                RELOCK_OK);
        }
        if (round == 1) { /* from the first callback, the rest in flight */
            to_free = a;
            uint64_t end = tu_now_ms() + 10000;
            while (to_free && tu_now_ms() < end)
                loop_once();
            assert_null(to_free);
        } else {
            relock_async_free(a);
        }
        int ok = 0;
        for (int i = 0; i < FREE_N; i++) {
            assert_int_equal(freed[i].calls, 1); /* each callback once */
            assert_true(freed[i].st == RELOCK_OK || freed[i].st == RELOCK_ECANCELED ||
                        freed[i].st == RELOCK_EAMBIGUOUS);
            if (freed[i].st == RELOCK_OK) {
                ok++;
                relock_lock_free(freed[i].l);
            }
        }
        if (round == 0)
            assert_int_equal(ok, 0); /* nothing was sent */
        run_for(100);
        loop_fini();
    }
}

/* Many acquires started in one turn (all still waiting for the shared
 * start), then the client freed: each callback once, and the free walks
 * the waiting operations once, not once per operation (the list of those
 * starting together was searched from its head for each, 100000 of them
 * taking tens of seconds).  The bound is generous: the linear free takes
 * well under a second here. */
enum { FREE_MANY = 100000 };
static long free_many_calls, free_many_cancelled;

static void free_many_cb(relock_async *a, relock_status st, relock_lock *l,
                         const relock_error *e, void *arg)
{
    (void)a;
    (void)e;
    (void)arg;
    free_many_calls++;
    free_many_cancelled += st == RELOCK_ECANCELED;
    if (l)
        relock_lock_free(l);
}

static void test_free_many_starting(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = qclient(&lp, "aqfm:", 500);
    free_many_calls = free_many_cancelled = 0;
    for (int i = 0; i < FREE_MANY; i++) {
        char name[32];
        snprintf(name, sizeof name, "m%d", i);
        assert_int_equal(relock_async_try_acquire(a, name, 5000, free_many_cb, NULL, NULL),
                         RELOCK_OK);
    }
    uint64_t t0 = tu_now_ms();
    relock_async_free(a);
    uint64_t took = tu_now_ms() - t0;
    assert_int_equal(free_many_calls, FREE_MANY);
    assert_int_equal(free_many_cancelled, FREE_MANY); /* nothing was sent */
    if (took > 10000)
        fail_msg("freeing %d operations waiting to start took %llu ms", FREE_MANY,
                 (unsigned long long)took);
    loop_fini();
}

/* The loop refuses a timer (out of memory) when a quorum's acquire or
 * release would wait for the shared start: the call returns
 * RELOCK_ENOMEM and starts nothing, its callback never called (before,
 * the callback ran from within the call, which then returned RELOCK_OK
 * with a handle to the freed operation). */
static void *(*real_timer_start)(void *, long long, void (*)(void *), void *);
static int timers_refused;

static void *refusing_timer_start(void *data, long long ms, void (*fn)(void *), void *arg)
{
    if (timers_refused)
        return NULL;
    return real_timer_start(data, ms, fn, arg);
}

static void test_no_timer_for_the_start(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    real_timer_start = lp.timer_start;
    lp.timer_start = refusing_timer_start;
    relock_async *a = qclient(&lp, "aqnt:", 500);
    outcome o = {0};
    relock_async_op *op = NULL;
    timers_refused = 1;
    relock_status st = relock_async_try_acquire(a, "t", 5000, record, &o, &op);
    timers_refused = 0;
    assert_int_equal(o.calls, 0); /* not from within the call */
    assert_int_equal(st, RELOCK_ENOMEM);
    assert_int_equal(relock_async_pending(a), 0);
    /* the timer back: the same acquire works, then its release refused alike */
    assert_int_equal(relock_async_try_acquire(a, "t", 5000, record, &o, &op), RELOCK_OK);
    assert_int_equal(o.calls, 0);
    uint64_t end = tu_now_ms() + 10000;
    while (o.calls == 0 && tu_now_ms() < end)
        loop_once();
    expect_ok(&o, "acquire");
    relock_lock *l = o.l;
    outcome r = {0};
    timers_refused = 1;
    st = relock_async_release(l, record, &r);
    timers_refused = 0;
    assert_int_equal(r.calls, 0);
    assert_int_equal(st, RELOCK_ENOMEM);
    assert_int_equal(relock_async_release(l, record, &r), RELOCK_OK);
    end = tu_now_ms() + 10000;
    while (r.calls == 0 && tu_now_ms() < end)
        loop_once();
    expect_ok(&r, "release");
    assert_int_equal(anywhere("aqnt:t"), 0);
    relock_lock_free(l);
    relock_async_free(a);
    loop_fini();
}

static int group_setup(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++)
        if (testsrv_start(&srv[i], NULL) != 0)
            return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++) {
        if (srv[i].pid)
            kill(srv[i].pid, SIGCONT);
        testsrv_stop(&srv[i]);
    }
    return 0;
}

int main(void)
{
    signal(SIGPIPE, SIG_DFL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_acquire_release_many),
        cmocka_unit_test(test_contention_with_blocking),
        cmocka_unit_test(test_one_server_paused),
        cmocka_unit_test(test_majority_paused),
        cmocka_unit_test(test_keep),
        cmocka_unit_test(test_keep_lost),
        cmocka_unit_test(test_cancel_waiting),
        cmocka_unit_test(test_cancel_in_flight_undone),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_connections_killed),
        cmocka_unit_test(test_free_in_flight),
        cmocka_unit_test(test_started_together),
        cmocka_unit_test(test_free_many_starting),
        cmocka_unit_test(test_no_timer_for_the_start),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
