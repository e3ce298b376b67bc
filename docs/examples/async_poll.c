/*
 * The asynchronous client on a loop of the program's own, here a few lines
 * around poll(2): relock_async_loop asks it to watch descriptors and to
 * run timers, and the loop tells relock when a descriptor is ready
 * (docs/api.md, "A loop of your own").  The program takes lock
 * "async-poll" for a lease of 1 s, has the loop renew it, works for
 * SECONDS (a timer of the same loop), then releases it.
 *
 *   relock-async-poll redis://127.0.0.1:6379 [SECONDS]
 *
 * Exits 0 after a clean release, 3 when the lock was lost.
 * Build: -lrelock.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <relock.h>
#include <relock_async.h>

/* ------------------------------------------------------------ the loop */

#define SLOTS 64

static struct watched {
    relock_async_socket *s; /* NULL: a free slot */
    int fd;
    short events;   /* POLLIN, POLLOUT */
    unsigned gen;   /* a new one each time the slot is let go */
} watched[SLOTS];

static struct timer {
    void (*fn)(void *arg); /* NULL: a free slot */
    void *arg;
    long long due;
} timers[SLOTS];

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int loop_watch(void *data, relock_async_socket *s, int fd, int events, void **sockp)
{
    struct watched *w = *sockp;
    (void)data;
    if (events & RELOCK_IO_REMOVE) {
        w->s = NULL;
        w->gen++;
        return 0;
    }
    if (!w) { /* the first call for s: a slot of its own */
        for (w = watched; w < watched + SLOTS && w->s; w++)
            ;
        if (w == watched + SLOTS)
            return -1;
        w->s = s;
        w->fd = fd;
        *sockp = w;
    }
    w->events = (short)(((events & RELOCK_IO_READ) ? POLLIN : 0) |
                        ((events & RELOCK_IO_WRITE) ? POLLOUT : 0));
    return 0;
}

static void *loop_timer_start(void *data, long long ms, void (*fn)(void *arg), void *arg)
{
    (void)data;
    for (struct timer *t = timers; t < timers + SLOTS; t++)
        if (!t->fn) {
            t->fn = fn;
            t->arg = arg;
            t->due = now_ms() + ms;
            return t;
        }
    return NULL;
}

static void loop_timer_stop(void *data, void *timer)
{
    (void)data;
    ((struct timer *)timer)->fn = NULL;
}

/* One turn: waits for a descriptor or the nearest timer, then reports each
 * ready descriptor (unless an earlier report removed it) and runs the
 * timers that are due. */
static void loop_turn(void)
{
    struct pollfd p[SLOTS];
    struct watched *w[SLOTS];
    unsigned gen[SLOTS];
    int n = 0;
    long long wait = 1000, now = now_ms();
    for (struct timer *t = timers; t < timers + SLOTS; t++)
        if (t->fn && t->due - now < wait)
            wait = t->due > now ? t->due - now : 0;
    for (int i = 0; i < SLOTS; i++)
        if (watched[i].s) {
            p[n] = (struct pollfd){.fd = watched[i].fd, .events = watched[i].events};
            w[n] = &watched[i];
            gen[n++] = watched[i].gen;
        }
    if (poll(p, (nfds_t)n, (int)wait) > 0)
        for (int i = 0; i < n; i++) {
            int ev = ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) ? RELOCK_IO_READ : 0) |
                     ((p[i].revents & POLLOUT) ? RELOCK_IO_WRITE : 0);
            if (ev && w[i]->gen == gen[i])
                relock_async_socket_action(w[i]->s, ev);
        }
    now = now_ms();
    for (struct timer *t = timers; t < timers + SLOTS; t++)
        if (t->fn && t->due <= now) {
            void (*fn)(void *) = t->fn;
            t->fn = NULL;
            fn(t->arg);
        }
}

/* ------------------------------------------------------------ the program */

static relock_async *client;
static relock_lock *lock;
static void *work;
static int code = 1;

static void released(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                     void *arg)
{
    (void)a, (void)arg;
    printf("released: %s\n", st == RELOCK_OK ? "ok" : e->message);
    if (code != 3)
        code = st == RELOCK_OK ? 0 : 1;
    relock_lock_free(l);
    relock_async_free(client); /* allowed from a callback */
    client = NULL;
}

static void work_done(void *arg)
{
    (void)arg;
    work = NULL;
    printf("work done, lock valid for %lld ms more\n", relock_lock_validity_ms(lock));
    relock_async_release(lock, released, NULL); /* stops the renewals first */
}

static void lost(relock_async *a, relock_lock *l, relock_status why, const relock_error *e,
                 void *arg)
{
    (void)a, (void)l, (void)why, (void)arg;
    fprintf(stderr, "lock lost: %s\n", e->message);
    code = 3;
    if (work)
        loop_timer_stop(NULL, work);
    work_done(NULL);
}

static void got(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                void *arg)
{
    long seconds = (long)arg;
    if (st != RELOCK_OK) {
        fprintf(stderr, "acquire: %s\n", e->message);
        relock_async_free(a);
        client = NULL;
        return;
    }
    lock = l;
    printf("holding %s, renewed by the loop for %ld s\n", relock_lock_name(l), seconds);
    relock_async_keep(l, lost, NULL);
    work = loop_timer_start(NULL, seconds * 1000, work_done, NULL);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s URL [SECONDS]\n", argv[0]);
        return 2;
    }
    long seconds = argc > 2 ? atol(argv[2]) : 2;
    relock_async_loop loop = {
        .size = sizeof loop,
        .version = RELOCK_ASYNC_LOOP_VERSION,
        .watch = loop_watch,
        .timer_start = loop_timer_start,
        .timer_stop = loop_timer_stop,
    };
    relock_config *cfg = relock_config_new();
    if (relock_config_set_url(cfg, argv[1]) != RELOCK_OK ||
        relock_async_new(cfg, &loop, &client) != RELOCK_OK) {
        fprintf(stderr, "%s\n", client ? relock_async_error(client)->message
                                       : relock_config_error(cfg)->message);
        return 1;
    }
    relock_config_free(cfg);
    if (relock_async_try_acquire(client, "async-poll", 1000, got, (void *)seconds, NULL) !=
        RELOCK_OK) {
        fprintf(stderr, "%s\n", relock_async_error(client)->message);
        return 1;
    }
    /* Until the client is freed, bounded in time all the same. */
    long long end = now_ms() + (seconds + 30) * 1000;
    while (client && now_ms() < end)
        loop_turn();
    if (client)
        fprintf(stderr, "still running after %ld s\n", seconds + 30);
    return client ? 1 : code;
}
