/*
 * relock_async_loop for libevent (header only):
 *
 *   struct event_base *base = event_base_new();
 *   relock_async_loop loop;
 *   relock_async_libevent(&loop, base);
 *   relock_async_new(cfg, &loop, &a);
 *
 * The program links relock and libevent (-lrelock -levent).  Each
 * descriptor relock watches gets a persistent read event and a persistent
 * write event, added and deleted as relock asks; each timer is a one-shot
 * event.
 */
#ifndef RELOCK_ASYNC_LIBEVENT_H
#define RELOCK_ASYNC_LIBEVENT_H

#include <stdlib.h>

#include <event2/event.h>

#include "relock_async.h"

typedef struct relock_async_levsock {
    struct event *rd, *wr;
    relock_async_socket *s;
} relock_async_levsock;

static inline void relock_async_lev_ready(evutil_socket_t fd, short what, void *p)
{
    (void)fd;
    relock_async_socket_action(((relock_async_levsock *)p)->s,
                               ((what & EV_READ) ? RELOCK_IO_READ : 0) |
                                   ((what & EV_WRITE) ? RELOCK_IO_WRITE : 0));
}

static inline void relock_async_lev_free(relock_async_levsock *ls)
{
    if (ls->rd)
        event_free(ls->rd);
    if (ls->wr)
        event_free(ls->wr);
    free(ls);
}

static inline int relock_async_lev_watch(void *data, relock_async_socket *s, int fd, int events,
                                         void **sockp)
{
    relock_async_levsock *ls = (relock_async_levsock *)*sockp;
    int first = !ls, rc;
    if (events & RELOCK_IO_REMOVE) {
        if (ls)
            relock_async_lev_free(ls);
        *sockp = NULL;
        return 0;
    }
    if (!ls) {
        ls = (relock_async_levsock *)calloc(1, sizeof *ls);
        if (!ls)
            return -1;
        ls->s = s;
        ls->rd = event_new((struct event_base *)data, fd, EV_READ | EV_PERSIST,
                           relock_async_lev_ready, ls);
        ls->wr = event_new((struct event_base *)data, fd, EV_WRITE | EV_PERSIST,
                           relock_async_lev_ready, ls);
        if (!ls->rd || !ls->wr) {
            relock_async_lev_free(ls);
            return -1;
        }
        *sockp = ls;
    }
    rc = (events & RELOCK_IO_READ) ? event_add(ls->rd, NULL) : event_del(ls->rd);
    if (rc == 0)
        rc = (events & RELOCK_IO_WRITE) ? event_add(ls->wr, NULL) : event_del(ls->wr);
    if (rc != 0 && first) { /* a failed first call keeps nothing */
        relock_async_lev_free(ls);
        *sockp = NULL;
    }
    return rc;
}

typedef struct relock_async_levtimer {
    struct event *ev;
    void (*fn)(void *arg);
    void *arg;
} relock_async_levtimer;

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
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    if (!t->ev || event_add(t->ev, &tv) != 0) {
        if (t->ev)
            event_free(t->ev);
        free(t);
        return NULL;
    }
    return t;
}

static inline void relock_async_lev_stop(void *data, void *timer)
{
    (void)data;
    event_free(((relock_async_levtimer *)timer)->ev);
    free(timer);
}

/* Fills loop for base. */
static inline void relock_async_libevent(relock_async_loop *loop, struct event_base *base)
{
    loop->size = sizeof *loop;
    loop->version = RELOCK_ASYNC_LOOP_VERSION;
    loop->data = base;
    loop->watch = relock_async_lev_watch;
    loop->timer_start = relock_async_lev_start;
    loop->timer_stop = relock_async_lev_stop;
}

#endif
