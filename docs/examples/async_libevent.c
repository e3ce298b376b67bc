/*
 * Tasks on one libevent loop take turns holding one Redis lock, without a
 * thread and without blocking the loop: each asks for the lock (waiting up
 * to 10 s), holds it for a moment (a timer of the loop), releases it.
 *
 *   relock-async-libevent redis://127.0.0.1:6379 [TASKS]
 *
 * Prints one line per turn and exits 0 when every task had its turn and no
 * two held the lock at once.  Build: -lrelock -levent.
 */
#include <stdio.h>
#include <stdlib.h>

#include <relock.h>
#include <relock_async_libevent.h>

static struct event_base *base;
static relock_async_loop loop;
static int holders, turns, failures, tasks = 5;

static void released(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                     void *arg)
{
    (void)a, (void)arg;
    if (st != RELOCK_OK) {
        fprintf(stderr, "release: %s\n", e->message);
        failures++;
    }
    relock_lock_free(l); /* the program owns the handle */
    if (turns + failures == tasks)
        event_base_loopexit(base, NULL);
}

static void done_holding(void *arg)
{
    relock_lock *l = arg;
    holders--;
    /* the callback runs later, from the loop */
    relock_async_release(l, released, NULL);
}

static void got(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                void *arg)
{
    (void)a;
    long task = (long)arg;
    if (st != RELOCK_OK) {
        fprintf(stderr, "task %ld: %s\n", task, e->message);
        if (++failures + turns == tasks)
            event_base_loopexit(base, NULL);
        return;
    }
    if (++holders > 1)
        failures++; /* never happens: the lock excludes */
    turns++;
    printf("task %ld holds the lock (fence %lld)\n", task, relock_lock_fence(l));
    loop.timer_start(loop.data, 50, done_holding, l);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s URL [TASKS]\n", argv[0]);
        return 2;
    }
    if (argc > 2)
        tasks = atoi(argv[2]);
    base = event_base_new();
    relock_async_libevent(&loop, base);
    relock_config *cfg = relock_config_new();
    relock_async *a = NULL;
    if (relock_config_set_url(cfg, argv[1]) != RELOCK_OK ||
        relock_async_new(cfg, &loop, &a) != RELOCK_OK) {
        fprintf(stderr, "%s\n", a ? relock_async_error(a)->message
                                  : relock_config_error(cfg)->message);
        return 1;
    }
    relock_config_free(cfg); /* copied */
    for (long i = 0; i < tasks; i++)
        if (relock_async_acquire(a, "async-example", 5000, 10000, got, (void *)i, NULL) !=
            RELOCK_OK) {
            fprintf(stderr, "acquire: %s\n", relock_async_error(a)->message);
            return 1;
        }
    event_base_dispatch(base); /* until the last release */
    printf("%d turns, %d failures, mode %s\n", turns, failures,
           relock_mode_name(relock_async_mode(a)));
    relock_async_free(a);
    event_base_free(base);
    return failures == 0 && turns == tasks ? 0 : 1;
}
