/*
 * relock_async_loop for libuv (header only):
 *
 *   uv_loop_t *uv = uv_default_loop();
 *   relock_async_loop loop;
 *   relock_async_libuv(&loop, uv);
 *   relock_async_new(cfg, &loop, &a);
 *
 * The program links relock and libuv (-lrelock -luv); uv.h needs the
 * POSIX declarations (-D_GNU_SOURCE, or -std=gnu11).  Each descriptor
 * relock watches gets a poll handle, each timer a timer handle; handles
 * are closed with uv_close() and freed by its callback, so the loop must
 * run once more after the last one stops before uv_loop_close().
 */
#ifndef RELOCK_ASYNC_LIBUV_H
#define RELOCK_ASYNC_LIBUV_H

#include <stdlib.h>

#include <uv.h>

#include "relock_async.h"

static inline void relock_async_uv_closed(uv_handle_t *h)
{
    free(h);
}

typedef struct relock_async_uvsock {
    uv_poll_t h; /* first: the handle's address is the struct's */
    relock_async_socket *s;
    int uv_events; /* what relock last asked to watch: UV_READABLE, UV_WRITABLE */
} relock_async_uvsock;

static inline void relock_async_uv_ready(uv_poll_t *h, int status, int events)
{
    relock_async_uvsock *us = (relock_async_uvsock *)h;
    if (status < 0) {
        /* An error on the descriptor, and libuv has stopped the handle.
         * relock tells the loop only what changes, so the handle is
         * started again here: the read below may return replies queued
         * ahead of the error and leave the connection open, and a stopped
         * handle would hear nothing more of it (an operation would end
         * only at its command timeout).  The read finds the error once
         * the replies before it are read. */
        if (us->uv_events)
            uv_poll_start(h, us->uv_events, relock_async_uv_ready);
        relock_async_socket_action(us->s, RELOCK_IO_READ);
        return;
    }
    relock_async_socket_action(us->s, ((events & UV_READABLE) ? RELOCK_IO_READ : 0) |
                                          ((events & UV_WRITABLE) ? RELOCK_IO_WRITE : 0));
}

static inline int relock_async_uv_watch(void *data, relock_async_socket *s, int fd, int events,
                                        void **sockp)
{
    relock_async_uvsock *us = (relock_async_uvsock *)*sockp;
    int first = !us, rc;
    int uv_events = ((events & RELOCK_IO_READ) ? UV_READABLE : 0) |
                    ((events & RELOCK_IO_WRITE) ? UV_WRITABLE : 0);
    if (events & RELOCK_IO_REMOVE) {
        /* Maybe from within this handle's own callback: the memory goes
         * when libuv has closed the handle. */
        if (us)
            uv_close((uv_handle_t *)&us->h, relock_async_uv_closed);
        *sockp = NULL;
        return 0;
    }
    if (!us) {
        us = (relock_async_uvsock *)calloc(1, sizeof *us);
        if (!us)
            return -1;
        if (uv_poll_init((uv_loop_t *)data, &us->h, fd) != 0) {
            free(us);
            return -1;
        }
        us->s = s;
        *sockp = us;
    }
    us->uv_events = uv_events;
    rc = uv_events ? uv_poll_start(&us->h, uv_events, relock_async_uv_ready) : uv_poll_stop(&us->h);
    if (rc != 0 && first) { /* a failed first call keeps nothing */
        uv_close((uv_handle_t *)&us->h, relock_async_uv_closed);
        *sockp = NULL;
    }
    return rc;
}

typedef struct relock_async_uvtimer {
    uv_timer_t h; /* first: the handle's address is the timer's */
    void (*fn)(void *arg);
    void *arg;
} relock_async_uvtimer;

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
    (void)data;
    uv_timer_stop((uv_timer_t *)timer);
    uv_close((uv_handle_t *)timer, relock_async_uv_closed);
}

/* Fills loop for uv. */
static inline void relock_async_libuv(relock_async_loop *loop, uv_loop_t *uv)
{
    loop->size = sizeof *loop;
    loop->version = RELOCK_ASYNC_LOOP_VERSION;
    loop->data = uv;
    loop->watch = relock_async_uv_watch;
    loop->timer_start = relock_async_uv_start;
    loop->timer_stop = relock_async_uv_stop;
}

#endif
