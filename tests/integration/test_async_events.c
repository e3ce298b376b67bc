/*
 * Events (relock_config_set_event_fn()) of the asynchronous client, on
 * libevent (it_async_events_libevent) or libuv (it_async_events_libuv,
 * built with TEST_LIBUV), against a real redis-server: the events of the
 * blocking client (test_events.c), at the same points, from the loop.
 *
 *   sequence  an acquire that waits for a blocking holder's lease:
 *             acquired with waited_ms > 0, before its callback; renewals
 *             of relock_async_keep(): renewed; the server SIGSTOPped:
 *             renew_failed while validity remains, then lost (and on_lost
 *             after it); the server continued, a new lock released:
 *             released with the time held.  Every event on the loop's
 *             thread.
 *   off       no callback set: nothing is called.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "relock.h"
#include "relock_async.h"
#include "async_loop.h" /* testloop.h, and an outcome per operation */
#include "testsrv.h"
#include "testutil.h"

static testsrv srv;

#define MAXEV 256

typedef struct log {
    long n;
    relock_event ev[MAXEV];
    char names[MAXEV][32];
    int wrong_thread; /* an event came from another thread than the loop's */
    long at_lost;     /* events logged when on_lost ran */
    long lost_calls;
} log_t;

static log_t lg;
static pthread_t loop_thread;

static void on_event(const relock_event *ev, void *arg)
{
    log_t *g = arg;
    if (!pthread_equal(pthread_self(), loop_thread))
        g->wrong_thread = 1;
    if (g->n < MAXEV) {
        g->ev[g->n] = *ev;
        snprintf(g->names[g->n], sizeof g->names[g->n], "%s", ev->name);
        g->ev[g->n].name = g->names[g->n];
        g->n++;
    }
}

static void on_lost(relock_async *a, relock_lock *l, relock_status why, const relock_error *e,
                    void *arg)
{
    (void)a, (void)l, (void)why, (void)e;
    log_t *g = arg;
    g->lost_calls++;
    g->at_lost = g->n;
}

/* Events of acquire callbacks: how many events were logged when it ran. */
static long events_at_cb;
static void acq_cb(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                   void *arg)
{
    events_at_cb = lg.n;
    record(a, st, l, e, arg);
}

static const char *mode_name(void)
{
    return testsrv_mode_runs("modern") ? "modern" : "legacy";
}

static relock_config *config(int port, relock_event_fn fn)
{
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", mode_name()), RELOCK_OK);
    /* A stopped server fails a renewal well within the lease. */
    assert_int_equal(relock_config_set(cfg, "command_timeout_ms", "300"), RELOCK_OK);
    assert_int_equal(relock_config_set_event_fn(cfg, fn, &lg), RELOCK_OK);
    return cfg;
}

/* The number of events of kind so far. */
static long count(relock_event_kind kind)
{
    long k = 0;
    for (long i = 0; i < lg.n; i++)
        k += lg.ev[i].kind == kind;
    return k;
}

/* Runs the loop until there are want events of kind (bounded by ms). */
static int run_until_count(relock_event_kind kind, long want, long ms)
{
    uint64_t end = tu_now_ms() + (uint64_t)ms;
    while (count(kind) < want && tu_now_ms() < end)
        loop_once();
    return count(kind) >= want;
}

static const relock_event *first(relock_event_kind kind)
{
    for (long i = 0; i < lg.n; i++)
        if (lg.ev[i].kind == kind)
            return &lg.ev[i];
    return NULL;
}

static void test_sequence(void **state)
{
    (void)state;
    memset(&lg, 0, sizeof lg);
    loop_thread = pthread_self();
    testsrv own;
    assert_int_equal(testsrv_start(&own, NULL), 0);
    relock_async_loop lp;
    loop_init(&lp);
    relock_config *cfg = config(own.port, on_event);
    relock_async *a = NULL;
    assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_OK);
    relock_config_free(cfg);

    /* A blocking holder (no events of its own) with a short lease: the
     * asynchronous acquire waits for it to end. */
    relock_config *hcfg = config(own.port, NULL);
    relock_client *holder = NULL;
    assert_int_equal(relock_connect(hcfg, &holder), RELOCK_OK);
    relock_config_free(hcfg);
    relock_lock *h = NULL;
    assert_int_equal(relock_acquire(holder, "ev", 600, 0, &h), RELOCK_OK);
    outcome o = {0};
    assert_int_equal(relock_async_acquire(a, "ev", 3000, 10000, acq_cb, &o, NULL), RELOCK_OK);
    assert_int_equal(lg.n, 0); /* nothing within the call */
    finish(&o, 12000);
    if (o.st != RELOCK_OK)
        fail_msg("acquire: %s: %s", relock_status_name(o.st), o.msg);
    assert_int_equal(lg.n, 1);
    assert_int_equal(events_at_cb, 1); /* told before the callback */
    const relock_event *ev = &lg.ev[0];
    assert_int_equal(ev->kind, RELOCK_EVENT_ACQUIRED);
    assert_string_equal(ev->name, "ev");
    assert_int_equal(ev->status, RELOCK_OK);
    /* It waited for the holder's lease of 600 ms to end. */
    if (ev->waited_ms < 200 || ev->waited_ms > 11000)
        fail_msg("waited_ms %lld", ev->waited_ms);
    assert_true(ev->validity_ms > 0 && ev->validity_ms <= 3000);
    assert_true(ev->held_ms >= 0 && ev->held_ms < 1000);

    /* Renewals, every third of the lease. */
    assert_int_equal(relock_async_keep(o.l, on_lost, &lg), RELOCK_OK);
    assert_true(run_until_count(RELOCK_EVENT_RENEWED, 2, 10000));
    ev = first(RELOCK_EVENT_RENEWED);
    assert_string_equal(ev->name, "ev");
    assert_int_equal(ev->status, RELOCK_OK);
    assert_int_equal(ev->waited_ms, 0);
    assert_true(ev->validity_ms > 0 && ev->validity_ms <= 3000);
    assert_true(ev->held_ms >= 500); /* the first comes a third of 3 s after */
    assert_int_equal(count(RELOCK_EVENT_RENEW_FAILED) + count(RELOCK_EVENT_LOST), 0);

    /* The server stops: renewals fail while validity remains, then the
     * lock is lost when it runs out. */
    kill(own.pid, SIGSTOP);
    int lost = run_until_count(RELOCK_EVENT_LOST, 1, 10000);
    kill(own.pid, SIGCONT);
    assert_true(lost);
    assert_int_equal(lg.lost_calls, 1);
    long n = lg.n;
    assert_int_equal(lg.at_lost, n); /* on_lost after the lost event */
    assert_int_equal(lg.ev[n - 1].kind, RELOCK_EVENT_LOST);
    assert_int_equal(count(RELOCK_EVENT_LOST), 1);
    assert_true(count(RELOCK_EVENT_RENEW_FAILED) >= 1);
    ev = first(RELOCK_EVENT_RENEW_FAILED);
    assert_int_not_equal(ev->status, RELOCK_OK);
    assert_true(ev->validity_ms > 0 && ev->validity_ms <= 3000);
    assert_true(ev->held_ms > 0);
    const relock_event *le = &lg.ev[n - 1];
    assert_int_not_equal(le->status, RELOCK_OK);
    assert_int_equal(le->validity_ms, 0);
    assert_true(le->held_ms >= 2000); /* the validity ran out, 3 s after a renewal */
    /* The order: acquired, renewed..., renew_failed..., lost. */
    for (long i = 1; i < n - 1; i++) {
        relock_event_kind k = lg.ev[i].kind;
        relock_event_kind before = lg.ev[i - 1].kind;
        if (k != RELOCK_EVENT_RENEWED && k != RELOCK_EVENT_RENEW_FAILED)
            fail_msg("event %ld: %s", i, relock_event_name(k));
        if (k == RELOCK_EVENT_RENEWED && before == RELOCK_EVENT_RENEW_FAILED)
            fail_msg("event %ld: renewed after a failure while the server was stopped", i);
    }
    relock_lock_free(o.l);

    /* The server continued: a lock held for a while, then released. */
    memset(&o, 0, sizeof o);
    assert_int_equal(relock_async_try_acquire(a, "ev2", 5000, acq_cb, &o, NULL), RELOCK_OK);
    finish(&o, 5000);
    if (o.st != RELOCK_OK)
        fail_msg("acquire after SIGCONT: %s: %s", relock_status_name(o.st), o.msg);
    assert_int_equal(lg.n, n + 1);
    assert_int_equal(lg.ev[n].kind, RELOCK_EVENT_ACQUIRED);
    assert_true(lg.ev[n].waited_ms >= 0 && lg.ev[n].waited_ms < 5000);
    run_for(300);
    outcome rel = {0};
    assert_int_equal(relock_async_release(o.l, record, &rel), RELOCK_OK);
    finish(&rel, 5000);
    assert_int_equal(rel.st, RELOCK_OK);
    assert_int_equal(lg.n, n + 2);
    ev = &lg.ev[n + 1];
    assert_int_equal(ev->kind, RELOCK_EVENT_RELEASED);
    assert_string_equal(ev->name, "ev2");
    assert_int_equal(ev->status, RELOCK_OK);
    assert_true(ev->held_ms >= 300 && ev->held_ms < 5000);
    assert_int_equal(lg.wrong_thread, 0);
    relock_lock_free(o.l);

    relock_async_free(a);
    loop_fini();
    relock_lock_free(h);
    relock_client_free(holder);
    testsrv_stop(&own);
}

static void test_off(void **state)
{
    (void)state;
    memset(&lg, 0, sizeof lg);
    loop_thread = pthread_self();
    relock_async_loop lp;
    loop_init(&lp);
    relock_config *cfg = config(srv.port, NULL);
    relock_async *a = NULL;
    assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_OK);
    relock_config_free(cfg);
    outcome o = {0};
    assert_int_equal(relock_async_try_acquire(a, "off", 5000, record, &o, NULL), RELOCK_OK);
    finish(&o, 5000);
    assert_int_equal(o.st, RELOCK_OK);
    outcome rel = {0};
    assert_int_equal(relock_async_release(o.l, record, &rel), RELOCK_OK);
    finish(&rel, 5000);
    assert_int_equal(rel.st, RELOCK_OK);
    assert_int_equal(lg.n, 0);
    relock_lock_free(o.l);
    relock_async_free(a);
    loop_fini();
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
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sequence),
        cmocka_unit_test(test_off),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
