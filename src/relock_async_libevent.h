/*
 * relock_async_loop for libevent (header only, as hiredis's adapters):
 *
 *   struct event_base *base = event_base_new();
 *   relock_async_loop loop;
 *   relock_async_libevent(&loop, base);
 *   relock_async_new(cfg, &loop, &a);
 *
 * The program links hiredis and libevent (-lhiredis -levent).  Connections
 * are attached by relock's own adapter rather than redisLibeventAttach():
 * it writes through relock_async_handle_write(), so that a server closing
 * a connection cannot raise SIGPIPE in the program (relock_async.h).
 */
#ifndef RELOCK_ASYNC_LIBEVENT_H
#define RELOCK_ASYNC_LIBEVENT_H

#include <stdlib.h>

#include <event2/event.h>

#include "relock_async.h"

typedef struct relock_async_levtimer {
    struct event *ev;
    void (*fn)(void *arg);
    void *arg;
} relock_async_levtimer;

/* The adapter: a read and a write event on the connection's socket, each
 * armed when hiredis asks (one-shot: hiredis arms them again). */
typedef struct relock_async_levio {
    redisAsyncContext *ac;
    struct event *rd, *wr;
} relock_async_levio;

static inline void relock_async_lev_readable(evutil_socket_t fd, short what, void *p)
{
    (void)fd;
    (void)what;
    redisAsyncHandleRead(((relock_async_levio *)p)->ac);
}

static inline void relock_async_lev_writable(evutil_socket_t fd, short what, void *p)
{
    (void)fd;
    (void)what;
    relock_async_handle_write(((relock_async_levio *)p)->ac);
}

static inline void relock_async_lev_want_read(void *p)
{
    event_add(((relock_async_levio *)p)->rd, NULL);
}

static inline void relock_async_lev_stop_read(void *p)
{
    event_del(((relock_async_levio *)p)->rd);
}

static inline void relock_async_lev_want_write(void *p)
{
    event_add(((relock_async_levio *)p)->wr, NULL);
}

static inline void relock_async_lev_stop_write(void *p)
{
    event_del(((relock_async_levio *)p)->wr);
}

static inline void relock_async_lev_detach(void *p)
{
    relock_async_levio *io = (relock_async_levio *)p;
    event_free(io->rd);
    event_free(io->wr);
    free(io);
}

static inline int relock_async_lev_attach(void *data, redisAsyncContext *ac)
{
    relock_async_levio *io;
    if (ac->ev.data)
        return -1; /* attached already */
    io = (relock_async_levio *)calloc(1, sizeof *io);
    if (!io)
        return -1;
    io->ac = ac;
    io->rd = event_new((struct event_base *)data, ac->c.fd, EV_READ, relock_async_lev_readable, io);
    io->wr = event_new((struct event_base *)data, ac->c.fd, EV_WRITE, relock_async_lev_writable, io);
    if (!io->rd || !io->wr) {
        if (io->rd)
            event_free(io->rd);
        if (io->wr)
            event_free(io->wr);
        free(io);
        return -1;
    }
    ac->ev.data = io;
    ac->ev.addRead = relock_async_lev_want_read;
    ac->ev.delRead = relock_async_lev_stop_read;
    ac->ev.addWrite = relock_async_lev_want_write;
    ac->ev.delWrite = relock_async_lev_stop_write;
    ac->ev.cleanup = relock_async_lev_detach;
    /* The connect ends at the socket's first event, either way. */
    event_add(io->rd, NULL);
    event_add(io->wr, NULL);
    return 0;
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
    loop->size = sizeof *loop;
    loop->data = base;
    loop->attach = relock_async_lev_attach;
    loop->timer_start = relock_async_lev_start;
    loop->timer_stop = relock_async_lev_stop;
}

#endif
