/*
 * Events (relock_config_set_event_fn()) against a real redis-server, with
 * a real rival client and real faults (the compat proxy's error reply):
 *
 *   life      acquire at once, keep, release: acquired (waited 0 or a round
 *             trip), renewed events with the validity, released with the
 *             time held.
 *   waited    acquired after a wait: waited_ms covers the holder's lease.
 *   failed    a renewal that gets an error reply (-LOADING, at-kind error)
 *             while validity remains: renew_failed with that status, then
 *             renewed again.
 *   lost      a kept lock deleted by another client: lost, then on_lost.
 *   stalled   a kept lock whose server stops (SIGSTOP) while the renewal
 *             waits for it: the loss deadline reports it, the lost event
 *             first, and the stalled renewal's end, after the loss, says
 *             nothing more.
 *   off       fn NULL: nothing is called.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "relock.h"
#include "testclient.h"
#include "testsrv.h"
#include "testutil.h"

#define MAXEV 64

typedef struct log {
    pthread_mutex_t mu;
    int n;
    relock_event ev[MAXEV];
    char names[MAXEV][32];
    int lost_called; /* on_lost ran after the lost event */
} log_t;

static log_t lg;

static void on_event(const relock_event *ev, void *arg)
{
    log_t *g = arg;
    pthread_mutex_lock(&g->mu);
    if (g->n < MAXEV) {
        g->ev[g->n] = *ev;
        snprintf(g->names[g->n], sizeof g->names[g->n], "%s", ev->name);
        g->ev[g->n].name = g->names[g->n];
        g->n++;
    }
    pthread_mutex_unlock(&g->mu);
}

static void on_lost(relock_lock *l, relock_status why, void *arg)
{
    (void)l;
    (void)why;
    log_t *g = arg;
    pthread_mutex_lock(&g->mu);
    /* The lost event came first. */
    g->lost_called = g->n > 0 && g->ev[g->n - 1].kind == RELOCK_EVENT_LOST ? 1 : -1;
    pthread_mutex_unlock(&g->mu);
}

static void reset(void)
{
    pthread_mutex_lock(&lg.mu);
    lg.n = 0;
    lg.lost_called = 0;
    pthread_mutex_unlock(&lg.mu);
}

/* The number of events of kind so far. */
static int count(relock_event_kind kind)
{
    int k = 0;
    pthread_mutex_lock(&lg.mu);
    for (int i = 0; i < lg.n; i++)
        k += lg.ev[i].kind == kind;
    pthread_mutex_unlock(&lg.mu);
    return k;
}

static const relock_event *first(relock_event_kind kind)
{
    for (int i = 0; i < lg.n; i++)
        if (lg.ev[i].kind == kind)
            return &lg.ev[i];
    return NULL;
}

/* Waits (bounded: 10 s) for at least n events of kind. */
static int wait_count(relock_event_kind kind, int n)
{
    for (int i = 0; i < 1000; i++) {
        if (count(kind) >= n)
            return 1;
        usleep(10000);
    }
    return 0;
}

static relock_client *evclient_tmo(int port, relock_event_fn fn, const char *tmo_ms)
{
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", "modern"), RELOCK_OK);
    assert_int_equal(relock_config_set_event_fn(cfg, fn, &lg), RELOCK_OK);
    if (tmo_ms)
        assert_int_equal(relock_config_set(cfg, "command_timeout_ms", tmo_ms), RELOCK_OK);
    relock_client *c = NULL;
    assert_int_equal(relock_connect(cfg, &c), RELOCK_OK);
    relock_config_free(cfg);
    return c;
}

static relock_client *evclient(int port, relock_event_fn fn)
{
    return evclient_tmo(port, fn, NULL);
}

static void test_life(void **state)
{
    (void)state;
    reset();
    relock_client *c = evclient(tu_srv.port, on_event);
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(c, "ev-life", 900, 0, &l), RELOCK_OK);
    assert_int_equal(count(RELOCK_EVENT_ACQUIRED), 1);
    const relock_event *a = first(RELOCK_EVENT_ACQUIRED);
    assert_string_equal(a->name, "ev-life");
    assert_int_equal(a->status, RELOCK_OK);
    assert_true(a->waited_ms >= 0 && a->waited_ms < 500);
    assert_true(a->validity_ms > 0 && a->validity_ms <= 900);
    assert_int_equal(relock_keep(l, NULL, NULL), RELOCK_OK);
    assert_true(wait_count(RELOCK_EVENT_RENEWED, 2));
    const relock_event *r = first(RELOCK_EVENT_RENEWED);
    assert_true(r->validity_ms > 0 && r->validity_ms <= 900);
    assert_true(r->held_ms >= 0);
    assert_int_equal(relock_release(l), RELOCK_OK);
    assert_int_equal(count(RELOCK_EVENT_RELEASED), 1);
    const relock_event *d = first(RELOCK_EVENT_RELEASED);
    /* Held across at least two renewals, a third of 900 ms apart. */
    assert_true(d->held_ms >= 500);
    assert_int_equal(count(RELOCK_EVENT_RENEW_FAILED) + count(RELOCK_EVENT_LOST), 0);
    relock_lock_free(l);
    relock_client_free(c);
}

static void test_waited(void **state)
{
    (void)state;
    reset();
    relock_client *holder = evclient(tu_srv.port, NULL);
    relock_client *c = evclient(tu_srv.port, on_event);
    relock_lock *h = NULL, *l = NULL;
    assert_int_equal(relock_acquire(holder, "ev-wait", 600, 0, &h), RELOCK_OK);
    assert_int_equal(relock_acquire(c, "ev-wait", 5000, 10000, &l), RELOCK_OK);
    const relock_event *a = first(RELOCK_EVENT_ACQUIRED);
    assert_non_null(a);
    /* It waited for the holder's lease to end. */
    assert_true(a->waited_ms >= 400);
    assert_int_equal(count(RELOCK_EVENT_ACQUIRED), 1); /* the holder's client has none */
    relock_release(l);
    relock_lock_free(l);
    relock_lock_free(h);
    relock_client_free(c);
    relock_client_free(holder);
}

static void test_failed(void **state)
{
    (void)state;
    reset();
    testsrv proxy;
    assert_int_equal(testsrv_start_proxy(&proxy, tu_srv.port, "7", NULL), 0);
    relock_client *c = evclient(proxy.port, on_event);
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(c, "ev-fail", 3000, 0, &l), RELOCK_OK);
    assert_int_equal(relock_keep(l, NULL, NULL), RELOCK_OK);
    /* The next command any client sends, the renewal's, gets -LOADING. */
    char *r = testsrv_cmd(&proxy, "RELOCK-PROXY FAULT at-reply 1 at-kind error");
    assert_string_equal(r, "OK");
    free(r);
    assert_true(wait_count(RELOCK_EVENT_RENEW_FAILED, 1));
    pthread_mutex_lock(&lg.mu);
    const relock_event *f = first(RELOCK_EVENT_RENEW_FAILED);
    relock_event fe = *f;
    pthread_mutex_unlock(&lg.mu);
    assert_int_not_equal(fe.status, RELOCK_OK);
    assert_true(fe.validity_ms > 0);
    /* Tried again, and renewed. */
    int renewed = count(RELOCK_EVENT_RENEWED);
    assert_true(wait_count(RELOCK_EVENT_RENEWED, renewed + 1));
    assert_int_equal(count(RELOCK_EVENT_LOST), 0);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(c);
    testsrv_stop(&proxy);
}

static void test_lost(void **state)
{
    (void)state;
    reset();
    relock_client *c = evclient(tu_srv.port, on_event);
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(c, "ev-lost", 900, 0, &l), RELOCK_OK);
    assert_int_equal(relock_keep(l, on_lost, &lg), RELOCK_OK);
    char *r = testsrv_cmd(&tu_srv, "DEL ev-lost");
    free(r);
    assert_true(wait_count(RELOCK_EVENT_LOST, 1));
    pthread_mutex_lock(&lg.mu);
    relock_event le = *first(RELOCK_EVENT_LOST);
    pthread_mutex_unlock(&lg.mu);
    assert_int_equal(le.status, RELOCK_LOST);
    assert_true(le.held_ms >= 0);
    for (int i = 0; i < 1000 && lg.lost_called == 0; i++)
        usleep(10000);
    assert_int_equal(lg.lost_called, 1);
    relock_lock_free(l);
    relock_client_free(c);
}

static void test_stalled(void **state)
{
    (void)state;
    reset();
    testsrv own;
    assert_int_equal(testsrv_start(&own, NULL), 0);
    /* The renewal waits for the stopped server longer than the validity
     * lasts: the loss is the deadline's. */
    relock_client *c = evclient_tmo(own.port, on_event, "4000");
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(c, "ev-stall", 900, 0, &l), RELOCK_OK);
    assert_int_equal(relock_keep(l, on_lost, &lg), RELOCK_OK);
    assert_true(wait_count(RELOCK_EVENT_RENEWED, 1));
    kill(own.pid, SIGSTOP);
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&lg.mu);
        int called = lg.lost_called;
        pthread_mutex_unlock(&lg.mu);
        if (called)
            break;
        usleep(10000);
    }
    kill(own.pid, SIGCONT);
    /* The stalled renewal ends within the keep's stop. */
    assert_int_equal(relock_keep_stop(l), RELOCK_LOST);
    pthread_mutex_lock(&lg.mu);
    int called = lg.lost_called, n = lg.n;
    relock_event_kind last = n > 0 ? lg.ev[n - 1].kind : 0;
    pthread_mutex_unlock(&lg.mu);
    if (called != 1)
        fail_msg("on_lost %s", called == 0 ? "never called" : "called without a lost event before it");
    if (count(RELOCK_EVENT_LOST) != 1 || last != RELOCK_EVENT_LOST)
        fail_msg("%d lost events; the last event of %d: %s", count(RELOCK_EVENT_LOST), n,
                 relock_event_name(last));
    relock_lock_free(l);
    relock_client_free(c);
    testsrv_stop(&own);
}

static void test_off(void **state)
{
    (void)state;
    reset();
    relock_client *c = evclient(tu_srv.port, NULL);
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(c, "ev-off", 900, 0, &l), RELOCK_OK);
    assert_int_equal(relock_release(l), RELOCK_OK);
    assert_int_equal(lg.n, 0);
    relock_lock_free(l);
    relock_client_free(c);
    assert_int_equal(relock_config_set_event_fn(NULL, on_event, NULL), RELOCK_EINVAL);
    assert_string_equal(relock_event_name(RELOCK_EVENT_RENEW_FAILED), "renew_failed");
}

int main(void)
{
    pthread_mutex_init(&lg.mu, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_life),   cmocka_unit_test(test_waited), cmocka_unit_test(test_failed),
        cmocka_unit_test(test_lost),   cmocka_unit_test(test_stalled), cmocka_unit_test(test_off),
    };
    return cmocka_run_group_tests(tests, tu_setup_server, tu_teardown_server);
}
