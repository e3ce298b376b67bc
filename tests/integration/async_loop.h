/*
 * The event loop of the asynchronous client's topology tests
 * (test_async_sentinel.c, test_async_cluster.c): libevent, or libuv when
 * built with TEST_LIBUV; a 20 ms tick keeps loop_once() from blocking
 * longer.  Included by one test source each (static functions).
 */
#ifndef RELOCK_TEST_ASYNC_LOOP_H
#define RELOCK_TEST_ASYNC_LOOP_H

#ifdef TEST_LIBUV
#include "relock_async_libuv.h"
#else
#include "relock_async_libevent.h"
#endif
#include "relock.h"
#include "relock_async.h"
#include "testutil.h"

#ifdef TEST_LIBUV
static uv_loop_t uvl;
static uv_timer_t tick;
static void tick_cb(uv_timer_t *t)
{
    (void)t;
}
static void loop_init(relock_async_loop *lp)
{
    assert_int_equal(uv_loop_init(&uvl), 0);
    uv_timer_init(&uvl, &tick);
    uv_timer_start(&tick, tick_cb, 20, 20);
    relock_async_libuv(lp, &uvl);
}
static void loop_once(void)
{
    uv_run(&uvl, UV_RUN_ONCE);
}
static void loop_fini(void)
{
    uv_timer_stop(&tick);
    uv_close((uv_handle_t *)&tick, NULL);
    int rc = -1;
    for (int i = 0; i < 200 && rc != 0; i++) {
        uv_run(&uvl, UV_RUN_NOWAIT);
        rc = uv_loop_close(&uvl);
    }
    assert_int_equal(rc, 0); /* every handle of relock and hiredis was closed */
}
#else
static struct event_base *base;
static struct event *tick;
static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what, (void)arg;
}
static void loop_init(relock_async_loop *lp)
{
    base = event_base_new();
    assert_non_null(base);
    tick = event_new(base, -1, EV_PERSIST, tick_cb, NULL);
    struct timeval tv = {0, 20000};
    event_add(tick, &tv);
    relock_async_libevent(lp, base);
}
static void loop_once(void)
{
    event_base_loop(base, EVLOOP_ONCE);
}
static void loop_fini(void)
{
    event_free(tick);
    for (int i = 0; i < 20; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    event_base_free(base);
}
#endif

/* Runs the loop until *flag reaches want or ms pass; returns *flag. */
static long run_until(const long *flag, long want, long ms)
{
    uint64_t end = tu_now_ms() + (uint64_t)ms;
    while (*flag < want && tu_now_ms() < end)
        loop_once();
    return *flag;
}

/* One operation's outcome. */
typedef struct outcome {
    long calls;
    relock_status st;
    relock_lock *l;
    char msg[512];
    uint64_t at;
} outcome;

static void record(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                   void *arg)
{
    (void)a;
    outcome *o = arg;
    o->calls++;
    o->st = st;
    o->l = l;
    o->at = tu_now_ms();
    snprintf(o->msg, sizeof o->msg, "%s", e->message);
}

/* Runs one operation to its end (bounded by ms); fails the test when it
 * did not end. */
static outcome *finish(outcome *o, long ms)
{
    if (run_until(&o->calls, 1, ms) != 1)
        fail_msg("an operation did not end within %ld ms", ms);
    return o;
}

#endif
