/*
 * Events (relock_config_set_event_fn()) against a real redis-server, with
 * a real rival client and real faults (the compat proxy's error reply, a
 * SIGSTOPped server).  Every scenario is written once, on both.h: it_events
 * runs them through the blocking API (the renewal events from its renewal
 * thread), it_events_async through the asynchronous API on libevent (every
 * event from the loop, on its thread), by the program's argument.
 *
 *   life      acquire at once, keep, release: acquired (waited 0 or a round
 *             trip), renewed events with the validity, released with the
 *             time held.
 *   waited    acquired after a wait for a blocking holder's lease:
 *             waited_ms covers it; the asynchronous acquire tells nothing
 *             within its call and tells acquired before its callback.
 *   failed    a renewal that gets an error reply (-LOADING, at-kind error)
 *             while validity remains: renew_failed with that status, then
 *             renewed again.
 *   lost      a kept lock deleted by another client: lost, then on_lost.
 *   stalled   a kept lock whose server stops (SIGSTOP) while the renewal
 *             waits for it: the loss deadline reports it, the lost event
 *             first, and the stalled renewal's end, after the loss, says
 *             nothing more.
 *   stopped   renewals of a kept lock whose server stops, each failing
 *             within the command timeout: renewed, renew_failed while
 *             validity remains, then lost (and on_lost after it); the
 *             server continued, a new lock released: released with the
 *             time held.
 *   off       fn NULL: nothing is called.
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

#include "both.h"
#include "relock.h"
#include "testsrv.h"
#include "testutil.h"

static testsrv srv;
/* The entry point the scenarios run through. */
static both_entry entry;
/* The thread that runs the scenarios (and the asynchronous entry's loop). */
static pthread_t main_thread;

#define MAXEV 256

typedef struct log {
    pthread_mutex_t mu;
    int n;
    relock_event ev[MAXEV];
    char names[MAXEV][32];
    int lost_called;  /* on_lost ran: 1 after the lost event, -1 without it */
    int lost_calls;   /* how many times on_lost ran */
    int at_lost;      /* events logged when on_lost ran */
    int wrong_thread; /* an event of the asynchronous entry off its loop's thread */
} log_t;

static log_t lg;

static void on_event(const relock_event *ev, void *arg)
{
    log_t *g = arg;
    pthread_mutex_lock(&g->mu);
    if (entry == BOTH_ASYNC && !pthread_equal(pthread_self(), main_thread))
        g->wrong_thread = 1;
    if (g->n < MAXEV) {
        g->ev[g->n] = *ev;
        snprintf(g->names[g->n], sizeof g->names[g->n], "%s", ev->name);
        g->ev[g->n].name = g->names[g->n];
        g->n++;
    }
    pthread_mutex_unlock(&g->mu);
}

static void on_lost(relock_status why, void *arg)
{
    (void)why;
    log_t *g = arg;
    pthread_mutex_lock(&g->mu);
    /* The lost event came first. */
    g->lost_called = g->n > 0 && g->ev[g->n - 1].kind == RELOCK_EVENT_LOST ? 1 : -1;
    g->lost_calls++;
    g->at_lost = g->n;
    pthread_mutex_unlock(&g->mu);
}

static void reset(void)
{
    pthread_mutex_lock(&lg.mu);
    lg.n = 0;
    lg.lost_called = lg.lost_calls = lg.at_lost = 0;
    lg.wrong_thread = 0;
    pthread_mutex_unlock(&lg.mu);
}

static int logged(void)
{
    pthread_mutex_lock(&lg.mu);
    int n = lg.n;
    pthread_mutex_unlock(&lg.mu);
    return n;
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

/* The first event of kind.  Events are only appended, so that the entry
 * stays as it is while renewals log more. */
static const relock_event *first(relock_event_kind kind)
{
    pthread_mutex_lock(&lg.mu);
    const relock_event *e = NULL;
    for (int i = 0; i < lg.n && !e; i++)
        if (lg.ev[i].kind == kind)
            e = &lg.ev[i];
    pthread_mutex_unlock(&lg.mu);
    return e;
}

/* Waits (bounded by ms) for at least n events of kind, running c's loop
 * for the asynchronous entry. */
static int wait_count(both_client *c, relock_event_kind kind, int n, long ms)
{
    uint64_t end = tu_now_ms() + (uint64_t)ms;
    while (count(kind) < n && tu_now_ms() < end)
        both_idle(c, 10);
    return count(kind) >= n;
}

/* Waits (bounded: 10 s) until on_lost ran. */
static int wait_lost_called(both_client *c)
{
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&lg.mu);
        int called = lg.lost_called;
        pthread_mutex_unlock(&lg.mu);
        if (called)
            return called;
        both_idle(c, 10);
    }
    return 0;
}

static const char *mode_name(void)
{
    return testsrv_mode_runs("modern") ? "modern" : "legacy";
}

static relock_config *evconfig(int port, relock_event_fn fn, const char *tmo_ms)
{
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", mode_name()), RELOCK_OK);
    assert_int_equal(relock_config_set_event_fn(cfg, fn, &lg), RELOCK_OK);
    if (tmo_ms)
        assert_int_equal(relock_config_set(cfg, "command_timeout_ms", tmo_ms), RELOCK_OK);
    return cfg;
}

/* A client of the entry under test. */
static both_client *evclient_tmo(int port, relock_event_fn fn, const char *tmo_ms)
{
    relock_config *cfg = evconfig(port, fn, tmo_ms);
    both_client *c = NULL;
    relock_status st = both_connect(entry, cfg, &c);
    relock_config_free(cfg);
    if (st != RELOCK_OK)
        fail_msg("connect (%s): %s", both_entry_name(entry), both_error(c));
    return c;
}

static both_client *evclient(int port, relock_event_fn fn)
{
    return evclient_tmo(port, fn, NULL);
}

/* The checks every scenario ends with. */
static void end_checks(void)
{
    pthread_mutex_lock(&lg.mu);
    int wrong = lg.wrong_thread;
    pthread_mutex_unlock(&lg.mu);
    if (wrong)
        fail_msg("an event of the asynchronous client came from another thread than its loop's");
}

static void test_life(void **state)
{
    (void)state;
    reset();
    both_client *c = evclient(srv.port, on_event);
    relock_lock *l = NULL;
    assert_int_equal(both_acquire(c, "ev-life", 900, 0, &l), RELOCK_OK);
    assert_int_equal(count(RELOCK_EVENT_ACQUIRED), 1);
    const relock_event *a = first(RELOCK_EVENT_ACQUIRED);
    assert_string_equal(a->name, "ev-life");
    assert_int_equal(a->status, RELOCK_OK);
    assert_true(a->waited_ms >= 0 && a->waited_ms < 500);
    assert_true(a->validity_ms > 0 && a->validity_ms <= 900);
    assert_int_equal(both_keep(c, l, NULL, NULL), RELOCK_OK);
    assert_true(wait_count(c, RELOCK_EVENT_RENEWED, 2, 10000));
    const relock_event *r = first(RELOCK_EVENT_RENEWED);
    assert_string_equal(r->name, "ev-life");
    assert_int_equal(r->status, RELOCK_OK);
    assert_int_equal(r->waited_ms, 0);
    assert_true(r->validity_ms > 0 && r->validity_ms <= 900);
    assert_true(r->held_ms >= 0);
    assert_int_equal(both_release(c, l), RELOCK_OK);
    assert_int_equal(count(RELOCK_EVENT_RELEASED), 1);
    const relock_event *d = first(RELOCK_EVENT_RELEASED);
    /* Held across at least two renewals, a third of 900 ms apart. */
    assert_true(d->held_ms >= 500);
    assert_int_equal(count(RELOCK_EVENT_RENEW_FAILED) + count(RELOCK_EVENT_LOST), 0);
    end_checks();
    relock_lock_free(l);
    both_free(c);
}

/* How many events were logged when the asynchronous acquire's call
 * returned, and when its callback ran (-1: not yet). */
static int events_at_start, events_at_cb;
static void at_phase(both_phase phase, void *arg)
{
    (void)arg;
    if (phase == BOTH_STARTED)
        events_at_start = logged();
    else
        events_at_cb = logged();
}

static void test_waited(void **state)
{
    (void)state;
    reset();
    /* A blocking holder (no events of its own) with a short lease. */
    relock_config *hcfg = evconfig(srv.port, NULL, NULL);
    relock_client *holder = NULL;
    assert_int_equal(relock_connect(hcfg, &holder), RELOCK_OK);
    relock_config_free(hcfg);
    both_client *c = evclient(srv.port, on_event);
    events_at_start = events_at_cb = -1;
    both_on_phase(c, at_phase, NULL);
    relock_lock *h = NULL, *l = NULL;
    assert_int_equal(relock_acquire(holder, "ev-wait", 600, 0, &h), RELOCK_OK);
    relock_status st = both_acquire(c, "ev-wait", 3000, 10000, &l);
    if (st != RELOCK_OK)
        fail_msg("acquire: %s: %s", relock_status_name(st), both_error(c));
    both_on_phase(c, NULL, NULL);
    if (entry == BOTH_ASYNC) {
        assert_int_equal(events_at_start, 0); /* nothing within the call */
        assert_int_equal(events_at_cb, 1);    /* told before the callback */
    }
    const relock_event *a = first(RELOCK_EVENT_ACQUIRED);
    assert_non_null(a);
    assert_string_equal(a->name, "ev-wait");
    assert_int_equal(a->status, RELOCK_OK);
    /* It waited for the holder's lease of 600 ms to end (each entry's
     * bound as its program had it before they were merged). */
    if (a->waited_ms < (entry == BOTH_BLOCKING ? 400 : 200) || a->waited_ms > 11000)
        fail_msg("waited_ms %lld", a->waited_ms);
    assert_true(a->validity_ms > 0 && a->validity_ms <= 3000);
    assert_true(a->held_ms >= 0 && a->held_ms < 1000);
    assert_int_equal(count(RELOCK_EVENT_ACQUIRED), 1); /* the holder's client has none */
    assert_int_equal(logged(), 1);
    end_checks();
    both_release(c, l);
    relock_lock_free(l);
    relock_lock_free(h);
    both_free(c);
    relock_client_free(holder);
}

static void test_failed(void **state)
{
    (void)state;
    reset();
    testsrv proxy;
    assert_int_equal(testsrv_start_proxy(&proxy, srv.port, "7", NULL), 0);
    both_client *c = evclient(proxy.port, on_event);
    relock_lock *l = NULL;
    assert_int_equal(both_acquire(c, "ev-fail", 3000, 0, &l), RELOCK_OK);
    assert_int_equal(both_keep(c, l, NULL, NULL), RELOCK_OK);
    /* The next command any client sends, the renewal's, gets -LOADING. */
    char *r = testsrv_cmd(&proxy, "RELOCK-PROXY FAULT at-reply 1 at-kind error");
    assert_string_equal(r, "OK");
    free(r);
    assert_true(wait_count(c, RELOCK_EVENT_RENEW_FAILED, 1, 10000));
    relock_event fe = *first(RELOCK_EVENT_RENEW_FAILED);
    assert_int_not_equal(fe.status, RELOCK_OK);
    assert_true(fe.validity_ms > 0);
    /* Tried again, and renewed. */
    int renewed = count(RELOCK_EVENT_RENEWED);
    assert_true(wait_count(c, RELOCK_EVENT_RENEWED, renewed + 1, 10000));
    assert_int_equal(count(RELOCK_EVENT_LOST), 0);
    assert_int_equal(both_release(c, l), RELOCK_OK);
    end_checks();
    relock_lock_free(l);
    both_free(c);
    testsrv_stop(&proxy);
}

static void test_lost(void **state)
{
    (void)state;
    reset();
    both_client *c = evclient(srv.port, on_event);
    relock_lock *l = NULL;
    assert_int_equal(both_acquire(c, "ev-lost", 900, 0, &l), RELOCK_OK);
    assert_int_equal(both_keep(c, l, on_lost, &lg), RELOCK_OK);
    char *r = testsrv_cmd(&srv, "DEL ev-lost");
    free(r);
    assert_true(wait_count(c, RELOCK_EVENT_LOST, 1, 10000));
    relock_event le = *first(RELOCK_EVENT_LOST);
    assert_int_equal(le.status, RELOCK_LOST);
    assert_true(le.held_ms >= 0);
    assert_int_equal(wait_lost_called(c), 1);
    end_checks();
    relock_lock_free(l);
    both_free(c);
}

static void test_stalled(void **state)
{
    (void)state;
    reset();
    testsrv own;
    assert_int_equal(testsrv_start(&own, NULL), 0);
    /* The renewal waits for the stopped server longer than the validity
     * lasts: the loss is the deadline's. */
    both_client *c = evclient_tmo(own.port, on_event, "4000");
    relock_lock *l = NULL;
    assert_int_equal(both_acquire(c, "ev-stall", 900, 0, &l), RELOCK_OK);
    assert_int_equal(both_keep(c, l, on_lost, &lg), RELOCK_OK);
    assert_true(wait_count(c, RELOCK_EVENT_RENEWED, 1, 10000));
    kill(own.pid, SIGSTOP);
    wait_lost_called(c);
    kill(own.pid, SIGCONT);
    /* The stalled renewal ends within the keep's stop (the blocking
     * entry's renewal thread), or as the loop runs on (the asynchronous
     * entry's owed reply). */
    assert_int_equal(both_keep_stop(c, l), RELOCK_LOST);
    if (entry == BOTH_ASYNC)
        both_idle(c, 500);
    pthread_mutex_lock(&lg.mu);
    int called = lg.lost_called, n = lg.n;
    relock_event_kind last = n > 0 ? lg.ev[n - 1].kind : 0;
    pthread_mutex_unlock(&lg.mu);
    if (called != 1)
        fail_msg("on_lost %s", called == 0 ? "never called" : "called without a lost event before it");
    if (count(RELOCK_EVENT_LOST) != 1 || last != RELOCK_EVENT_LOST)
        fail_msg("%d lost events; the last event of %d: %s", count(RELOCK_EVENT_LOST), n,
                 relock_event_name(last));
    end_checks();
    relock_lock_free(l);
    both_free(c);
    testsrv_stop(&own);
}

static void test_stopped(void **state)
{
    (void)state;
    reset();
    testsrv own;
    assert_int_equal(testsrv_start(&own, NULL), 0);
    /* A stopped server fails a renewal well within the lease. */
    both_client *c = evclient_tmo(own.port, on_event, "300");
    relock_lock *l = NULL;
    assert_int_equal(both_acquire(c, "ev", 3000, 0, &l), RELOCK_OK);
    assert_int_equal(count(RELOCK_EVENT_ACQUIRED), 1);

    /* Renewals, every third of the lease. */
    assert_int_equal(both_keep(c, l, on_lost, &lg), RELOCK_OK);
    assert_true(wait_count(c, RELOCK_EVENT_RENEWED, 2, 10000));
    const relock_event *ev = first(RELOCK_EVENT_RENEWED);
    assert_string_equal(ev->name, "ev");
    assert_int_equal(ev->status, RELOCK_OK);
    assert_int_equal(ev->waited_ms, 0);
    assert_true(ev->validity_ms > 0 && ev->validity_ms <= 3000);
    assert_true(ev->held_ms >= 500); /* the first comes a third of 3 s after */
    assert_int_equal(count(RELOCK_EVENT_RENEW_FAILED) + count(RELOCK_EVENT_LOST), 0);

    /* The server stops: renewals fail while validity remains, then the
     * lock is lost when it runs out. */
    kill(own.pid, SIGSTOP);
    int lost = wait_count(c, RELOCK_EVENT_LOST, 1, 10000);
    wait_lost_called(c);
    kill(own.pid, SIGCONT);
    assert_true(lost);
    pthread_mutex_lock(&lg.mu);
    int n = lg.n, lost_calls = lg.lost_calls, at_lost = lg.at_lost;
    pthread_mutex_unlock(&lg.mu);
    assert_int_equal(lost_calls, 1);
    assert_int_equal(at_lost, n); /* on_lost after the lost event */
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
    assert_int_equal(lg.ev[0].kind, RELOCK_EVENT_ACQUIRED);
    for (int i = 1; i < n - 1; i++) {
        relock_event_kind k = lg.ev[i].kind;
        relock_event_kind before = lg.ev[i - 1].kind;
        if (k != RELOCK_EVENT_RENEWED && k != RELOCK_EVENT_RENEW_FAILED)
            fail_msg("event %d: %s", i, relock_event_name(k));
        if (k == RELOCK_EVENT_RENEWED && before == RELOCK_EVENT_RENEW_FAILED)
            fail_msg("event %d: renewed after a failure while the server was stopped", i);
    }
    relock_lock_free(l);

    /* The server continued: a lock held for a while, then released. */
    assert_int_equal(logged(), n); /* the lost lock says nothing more */
    l = NULL;
    relock_status st = both_try_acquire(c, "ev2", 5000, &l);
    if (st != RELOCK_OK)
        fail_msg("acquire after SIGCONT: %s: %s", relock_status_name(st), both_error(c));
    assert_int_equal(logged(), n + 1);
    assert_int_equal(lg.ev[n].kind, RELOCK_EVENT_ACQUIRED);
    assert_true(lg.ev[n].waited_ms >= 0 && lg.ev[n].waited_ms < 5000);
    both_idle(c, 300);
    assert_int_equal(both_release(c, l), RELOCK_OK);
    assert_int_equal(logged(), n + 2);
    ev = &lg.ev[n + 1];
    assert_int_equal(ev->kind, RELOCK_EVENT_RELEASED);
    assert_string_equal(ev->name, "ev2");
    assert_int_equal(ev->status, RELOCK_OK);
    assert_true(ev->held_ms >= 300 && ev->held_ms < 5000);
    end_checks();
    relock_lock_free(l);
    both_free(c);
    testsrv_stop(&own);
}

static void test_off(void **state)
{
    (void)state;
    reset();
    both_client *c = evclient(srv.port, NULL);
    relock_lock *l = NULL;
    assert_int_equal(both_acquire(c, "ev-off", 900, 0, &l), RELOCK_OK);
    assert_int_equal(both_release(c, l), RELOCK_OK);
    assert_int_equal(logged(), 0);
    relock_lock_free(l);
    both_free(c);
    assert_int_equal(relock_config_set_event_fn(NULL, on_event, NULL), RELOCK_EINVAL);
    assert_string_equal(relock_event_name(RELOCK_EVENT_RENEW_FAILED), "renew_failed");
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

int main(int argc, char **argv)
{
    entry = both_entry_from_args(argc, argv);
    main_thread = pthread_self();
    pthread_mutex_init(&lg.mu, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_life),   cmocka_unit_test(test_waited),
        cmocka_unit_test(test_failed), cmocka_unit_test(test_lost),
        cmocka_unit_test(test_stalled), cmocka_unit_test(test_stopped),
        cmocka_unit_test(test_off),
    };
    return _cmocka_run_group_tests(both_entry_name(entry), tests, sizeof tests / sizeof *tests,
                                   group_setup, group_teardown);
}
