/*
 * A lock kept by libuv's timers: the program takes lock "async-keeper" for
 * a lease of 1 s, has the loop renew it every third of the lease, works
 * for SECONDS (a timer), then releases it.  If the lock were lost (someone
 * deleted it, the server stopped answering for longer than the lease), the
 * lost callback would say so and the program would stop its work.
 *
 *   relock-async-libuv redis://127.0.0.1:6379 [SECONDS]
 *
 * Exits 0 after a clean release, 3 when the lock was lost.
 * Build: -lrelock -luv.
 */
#include <stdio.h>
#include <stdlib.h>

#include <relock.h>
#include <relock_async_libuv.h>

static uv_loop_t *uv;
static relock_async *client;
static relock_lock *lock;
static uv_timer_t work;
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

static void work_done(uv_timer_t *t)
{
    uv_close((uv_handle_t *)t, NULL);
    printf("work done, lock valid for %lld ms more\n", relock_lock_validity_ms(lock));
    relock_async_release(lock, released, NULL); /* stops the renewals first */
}

static void lost(relock_async *a, relock_lock *l, relock_status why, const relock_error *e,
                 void *arg)
{
    (void)a, (void)l, (void)why, (void)arg;
    fprintf(stderr, "lock lost: %s\n", e->message);
    code = 3;
    uv_timer_stop(&work);
    work_done(&work);
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
    uv_timer_init(uv, &work);
    uv_timer_start(&work, work_done, (uint64_t)seconds * 1000, 0);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s URL [SECONDS]\n", argv[0]);
        return 2;
    }
    long seconds = argc > 2 ? atol(argv[2]) : 2;
    uv = uv_default_loop();
    relock_async_loop loop;
    relock_async_libuv(&loop, uv);
    relock_config *cfg = relock_config_new();
    if (relock_config_set_url(cfg, argv[1]) != RELOCK_OK ||
        relock_async_new(cfg, &loop, &client) != RELOCK_OK) {
        fprintf(stderr, "%s\n", client ? relock_async_error(client)->message
                                       : relock_config_error(cfg)->message);
        return 1;
    }
    relock_config_free(cfg);
    if (relock_async_try_acquire(client, "async-keeper", 1000, got, (void *)seconds, NULL) !=
        RELOCK_OK) {
        fprintf(stderr, "%s\n", relock_async_error(client)->message);
        return 1;
    }
    uv_run(uv, UV_RUN_DEFAULT); /* ends when nothing is left to do */
    uv_loop_close(uv);
    return code;
}
