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
 *
 * The connection's I/O is attached by an adapter of relock's own, the
 * one of hiredis 0.14 (hiredis/adapters/libuv.h) but for one thing: libuv
 * reports an error on the socket (a connection reset by its peer) as a
 * poll status and stops polling, which hiredis's adapter ignores, so the
 * connection was noticed lost only when command_timeout_ms ran out.  Here
 * the error makes hiredis read, meet the error and disconnect.
 */
#ifndef RELOCK_ASYNC_LIBUV_H
#define RELOCK_ASYNC_LIBUV_H

#include <stdlib.h>

#include <string.h>

#include <uv.h>
#include <hiredis/async.h>

#include "relock_async.h"

/* A connection's poll handle. */
typedef struct relock_async_uvpoll {
    uv_poll_t h; /* first: the handle's address is the poll's */
    redisAsyncContext *ac; /* NULL once hiredis let the connection go */
    int events;
} relock_async_uvpoll;

static inline void relock_async_uv_poll(uv_poll_t *h, int status, int events)
{
    relock_async_uvpoll *p = (relock_async_uvpoll *)h;
    if (status < 0) {
        /* libuv stopped polling: a read meets the socket's error and
         * hiredis disconnects; if it does not, poll again. */
        if (p->ac)
            redisAsyncHandleRead(p->ac);
        if (p->ac && p->events)
            uv_poll_start(&p->h, p->events, relock_async_uv_poll);
        return;
    }
    if (p->ac && (events & UV_READABLE))
        redisAsyncHandleRead(p->ac);
    if (p->ac && (events & UV_WRITABLE))
        redisAsyncHandleWrite(p->ac);
}

static inline void relock_async_uv_events(relock_async_uvpoll *p, int add, int del)
{
    p->events = (p->events | add) & ~del;
    if (p->events)
        uv_poll_start(&p->h, p->events, relock_async_uv_poll);
    else
        uv_poll_stop(&p->h);
}

static inline void relock_async_uv_add_read(void *d)
{
    relock_async_uv_events((relock_async_uvpoll *)d, UV_READABLE, 0);
}

static inline void relock_async_uv_del_read(void *d)
{
    relock_async_uv_events((relock_async_uvpoll *)d, 0, UV_READABLE);
}

static inline void relock_async_uv_add_write(void *d)
{
    relock_async_uv_events((relock_async_uvpoll *)d, UV_WRITABLE, 0);
}

static inline void relock_async_uv_del_write(void *d)
{
    relock_async_uv_events((relock_async_uvpoll *)d, 0, UV_WRITABLE);
}

static inline void relock_async_uv_poll_closed(uv_handle_t *h)
{
    free(h);
}

static inline void relock_async_uv_cleanup(void *d)
{
    relock_async_uvpoll *p = (relock_async_uvpoll *)d;
    p->ac = NULL;
    uv_close((uv_handle_t *)&p->h, relock_async_uv_poll_closed);
}

typedef struct relock_async_uvtimer {
    uv_timer_t h; /* first: the handle's address is the timer's */
    void (*fn)(void *arg);
    void *arg;
} relock_async_uvtimer;

static inline int relock_async_uv_attach(void *data, redisAsyncContext *ac)
{
    if (ac->ev.data != NULL)
        return -1;
    relock_async_uvpoll *p = (relock_async_uvpoll *)malloc(sizeof *p);
    if (!p)
        return -1;
    memset(p, 0, sizeof *p);
    if (uv_poll_init((uv_loop_t *)data, &p->h, ac->c.fd) != 0) {
        free(p);
        return -1;
    }
    p->ac = ac;
    ac->ev.addRead = relock_async_uv_add_read;
    ac->ev.delRead = relock_async_uv_del_read;
    ac->ev.addWrite = relock_async_uv_add_write;
    ac->ev.delWrite = relock_async_uv_del_write;
    ac->ev.cleanup = relock_async_uv_cleanup;
    ac->ev.data = p;
    return 0;
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
