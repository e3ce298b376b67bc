/*
 * testloop: the event loop of the asynchronous client's tests, libevent by
 * default, libuv when built with TEST_LIBUV.  Header only: the choice is
 * the test program's.  A 20 ms tick keeps loop_once() from blocking longer
 * than that, so the tests' loops stay bounded in time.
 */
#ifndef RELOCK_TESTLOOP_H
#define RELOCK_TESTLOOP_H

#include <stdint.h>

#ifdef TEST_LIBUV
#include "relock_async_libuv.h"
#else
#include "relock_async_libevent.h"
#endif
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
static inline long run_until(const long *flag, long want, long ms)
{
    uint64_t end = tu_now_ms() + (uint64_t)ms;
    while (*flag < want && tu_now_ms() < end)
        loop_once();
    return *flag;
}

static inline void run_for(long ms)
{
    uint64_t end = tu_now_ms() + (uint64_t)ms;
    while (tu_now_ms() < end)
        loop_once();
}

#endif
