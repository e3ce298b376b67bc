/*
 * relock_async_loop for libuv (header only, as hiredis's adapters):
 *
 *   uv_loop_t *uv = uv_default_loop();
 *   relock_async_loop loop;
 *   relock_async_libuv(&loop, uv);
 *   relock_async_new(cfg, &loop, &a);
 *
 * The program links hiredis and libuv (-lhiredis -luv); uv.h needs the
 * POSIX declarations (-D_GNU_SOURCE, or -std=gnu11).  Timer handles are
 * closed with uv_close() and freed by its callback, so the loop must run
 * once more after the last timer stops before uv_loop_close().
 */
#ifndef RELOCK_ASYNC_LIBUV_H
#define RELOCK_ASYNC_LIBUV_H

#include <stdlib.h>

#include <uv.h>
#include <hiredis/adapters/libuv.h>

#include "relock_async.h"

typedef struct relock_async_uvtimer {
    uv_timer_t h; /* first: the handle's address is the timer's */
    void (*fn)(void *arg);
    void *arg;
} relock_async_uvtimer;

static inline int relock_async_uv_attach(void *data, redisAsyncContext *ac)
{
    return redisLibuvAttach(ac, (uv_loop_t *)data) == REDIS_OK ? 0 : -1;
}

static inline void relock_async_uv_closed(uv_handle_t *h)
{
    free(h);
}

static inline void relock_async_uv_fire(uv_timer_t *h)
{
    relock_async_uvtimer *t = (relock_async_uvtimer *)h;
    void (*fn)(void *) = t->fn;
    void *arg = t->arg;
    uv_close((uv_handle_t *)h, relock_async_uv_closed);
    fn(arg);
}

static inline void *relock_async_uv_start(void *data, long long ms, void (*fn)(void *arg), void *arg)
{
    relock_async_uvtimer *t = (relock_async_uvtimer *)malloc(sizeof *t);
    if (!t)
        return NULL;
    t->fn = fn;
    t->arg = arg;
    if (uv_timer_init((uv_loop_t *)data, &t->h) != 0) {
        free(t);
        return NULL;
    }
    if (uv_timer_start(&t->h, relock_async_uv_fire, (uint64_t)ms, 0) != 0) {
        uv_close((uv_handle_t *)&t->h, relock_async_uv_closed);
        return NULL;
    }
    return t;
}

static inline void relock_async_uv_stop(void *data, void *timer)
{
    relock_async_uvtimer *t = (relock_async_uvtimer *)timer;
    (void)data;
    uv_timer_stop(&t->h);
    uv_close((uv_handle_t *)&t->h, relock_async_uv_closed);
}

/* Fills loop for uv. */
static inline void relock_async_libuv(relock_async_loop *loop, uv_loop_t *uv)
{
    loop->data = uv;
    loop->attach = relock_async_uv_attach;
    loop->timer_start = relock_async_uv_start;
    loop->timer_stop = relock_async_uv_stop;
}

#endif
