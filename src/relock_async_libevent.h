/*
 * relock_async_loop for libevent (header only, as hiredis's adapters):
 *
 *   struct event_base *base = event_base_new();
 *   relock_async_loop loop;
 *   relock_async_libevent(&loop, base);
 *   relock_async_new(cfg, &loop, &a);
 *
 * The program links hiredis and libevent (-lhiredis -levent).
 */
#ifndef RELOCK_ASYNC_LIBEVENT_H
#define RELOCK_ASYNC_LIBEVENT_H

#include <stdlib.h>

#include <event2/event.h>
#include <hiredis/adapters/libevent.h>

#include "relock_async.h"

typedef struct relock_async_levtimer {
    struct event *ev;
    void (*fn)(void *arg);
    void *arg;
} relock_async_levtimer;

static inline int relock_async_lev_attach(void *data, redisAsyncContext *ac)
{
    return redisLibeventAttach(ac, (struct event_base *)data) == REDIS_OK ? 0 : -1;
}

static inline void relock_async_lev_fire(evutil_socket_t fd, short what, void *p)
{
    relock_async_levtimer *t = (relock_async_levtimer *)p;
    void (*fn)(void *) = t->fn;
    void *arg = t->arg;
    (void)fd;
    (void)what;
    event_free(t->ev);
    free(t);
    fn(arg);
}

static inline void *relock_async_lev_start(void *data, long long ms, void (*fn)(void *arg), void *arg)
{
    relock_async_levtimer *t = (relock_async_levtimer *)malloc(sizeof *t);
    struct timeval tv;
    if (!t)
        return NULL;
    t->fn = fn;
    t->arg = arg;
    t->ev = event_new((struct event_base *)data, -1, 0, relock_async_lev_fire, t);
    if (!t->ev) {
        free(t);
        return NULL;
    }
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    if (event_add(t->ev, &tv) != 0) {
        event_free(t->ev);
        free(t);
        return NULL;
    }
    return t;
}

static inline void relock_async_lev_stop(void *data, void *timer)
{
    relock_async_levtimer *t = (relock_async_levtimer *)timer;
    (void)data;
    event_free(t->ev);
    free(t);
}

/* Fills loop for base. */
static inline void relock_async_libevent(relock_async_loop *loop, struct event_base *base)
{
    loop->data = base;
    loop->attach = relock_async_lev_attach;
    loop->timer_start = relock_async_lev_start;
    loop->timer_stop = relock_async_lev_stop;
}

#endif
