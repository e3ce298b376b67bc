/*
 * relock_async_loop for libuv (header only, as hiredis's adapters):
 *
 *   uv_loop_t *uv = uv_default_loop();
 *   relock_async_loop loop;
 *   relock_async_libuv(&loop, uv);
 *   relock_async_new(cfg, &loop, &a);
 *
 * The program links hiredis and libuv (-lhiredis -luv); uv.h needs the
 * POSIX declarations (-D_GNU_SOURCE, or -std=gnu11).  Timer and poll
 * handles are closed with uv_close() and freed by its callback, so the
 * loop must run once more after the last one stops before uv_loop_close().
 * Connections are attached by relock's own adapter rather than
 * redisLibuvAttach(): it writes through relock_async_handle_write(), so
 * that a server closing a connection cannot raise SIGPIPE in the program
 * (relock_async.h).
 */
#ifndef RELOCK_ASYNC_LIBUV_H
#define RELOCK_ASYNC_LIBUV_H

#include <stdlib.h>

#include <uv.h>

#include "relock_async.h"

typedef struct relock_async_uvtimer {
    uv_timer_t h; /* first: the handle's address is the timer's */
    void (*fn)(void *arg);
    void *arg;
} relock_async_uvtimer;

static inline void relock_async_uv_closed(uv_handle_t *h)
{
    free(h);
}

/* The adapter: one poll handle on the connection's socket, watching what
 * hiredis asks for. */
typedef struct relock_async_uvio {
    uv_poll_t h;           /* first: the handle's address is the adapter's */
    redisAsyncContext *ac; /* NULL once hiredis let go of the connection */
    int events;            /* UV_READABLE, UV_WRITABLE */
} relock_async_uvio;

static inline void relock_async_uv_ready(uv_poll_t *h, int status, int events)
{
    relock_async_uvio *io = (relock_async_uvio *)h;
    if (status < 0) {
        /* An error on the socket (libuv stopped the handle): a read lets
         * hiredis find it and end the connection. */
        if (io->ac)
            redisAsyncHandleRead(io->ac);
        return;
    }
    if (io->ac && (events & UV_READABLE))
        redisAsyncHandleRead(io->ac);
    if (io->ac && (events & UV_WRITABLE))
        relock_async_handle_write(io->ac);
}

static inline void relock_async_uv_watch(relock_async_uvio *io, int events)
{
    io->events = events;
    if (events)
        uv_poll_start(&io->h, events, relock_async_uv_ready);
    else
        uv_poll_stop(&io->h);
}

static inline void relock_async_uv_want_read(void *p)
{
    relock_async_uvio *io = (relock_async_uvio *)p;
    relock_async_uv_watch(io, io->events | UV_READABLE);
}

static inline void relock_async_uv_stop_read(void *p)
{
    relock_async_uvio *io = (relock_async_uvio *)p;
    relock_async_uv_watch(io, io->events & ~UV_READABLE);
}

static inline void relock_async_uv_want_write(void *p)
{
    relock_async_uvio *io = (relock_async_uvio *)p;
    relock_async_uv_watch(io, io->events | UV_WRITABLE);
}

static inline void relock_async_uv_stop_write(void *p)
{
    relock_async_uvio *io = (relock_async_uvio *)p;
    relock_async_uv_watch(io, io->events & ~UV_WRITABLE);
}

static inline void relock_async_uv_detach(void *p)
{
    relock_async_uvio *io = (relock_async_uvio *)p;
    /* Called from within hiredis, maybe from this handle's own callback:
     * the memory goes when libuv has closed the handle. */
    io->ac = NULL;
    uv_close((uv_handle_t *)&io->h, relock_async_uv_closed);
}

static inline int relock_async_uv_attach(void *data, redisAsyncContext *ac)
{
    relock_async_uvio *io;
    if (ac->ev.data)
        return -1; /* attached already */
    io = (relock_async_uvio *)calloc(1, sizeof *io);
    if (!io)
        return -1;
    if (uv_poll_init((uv_loop_t *)data, &io->h, ac->c.fd) != 0) {
        free(io);
        return -1;
    }
    io->ac = ac;
    ac->ev.data = io;
    ac->ev.addRead = relock_async_uv_want_read;
    ac->ev.delRead = relock_async_uv_stop_read;
    ac->ev.addWrite = relock_async_uv_want_write;
    ac->ev.delWrite = relock_async_uv_stop_write;
    ac->ev.cleanup = relock_async_uv_detach;
    return 0;
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
    loop->size = sizeof *loop;
    loop->data = uv;
    loop->attach = relock_async_uv_attach;
    loop->timer_start = relock_async_uv_start;
    loop->timer_stop = relock_async_uv_stop;
}

#endif
