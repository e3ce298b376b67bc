/* both: see both.h. */
#include "both.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "relock_async_libevent.h"
#include "testutil.h"

struct both_client {
    both_entry entry;
    relock_client *sync;
    relock_async *async;
    struct event_base *base;
    struct event *tick;
    char msg[512];
    struct both_keeper *keepers; /* on_lost's for both_keep, freed with c */
    void (*phase_fn)(both_phase, void *);
    void *phase_arg;
};

/* One both_keep's on_lost, for the library's callback of either entry. */
struct both_keeper {
    both_lost_fn fn;
    void *arg;
    struct both_keeper *next;
};

/* One asynchronous operation's end. */
typedef struct {
    both_client *c;
    int done;
    relock_status st;
    relock_lock *l;
    relock_scan_result *scan;
    char msg[512];
} both_outcome;

both_entry both_entry_from_args(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "blocking") == 0)
        return BOTH_BLOCKING;
    if (strcmp(argv[1], "async") == 0)
        return BOTH_ASYNC;
    fprintf(stderr, "%s: the entry point is \"blocking\" or \"async\", not \"%s\"\n", argv[0],
            argv[1]);
    exit(2);
}

const char *both_entry_name(both_entry e)
{
    return e == BOTH_ASYNC ? "async" : "blocking";
}

/* A 20 ms tick keeps one turn of the loop from blocking longer than that,
 * so that the runs below stay bounded in time. */
static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what, (void)arg;
}

relock_status both_connect(both_entry e, const relock_config *cfg, both_client **out)
{
    both_client *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->entry = e;
    *out = c;
    relock_status st;
    if (e == BOTH_BLOCKING) {
        st = relock_connect(cfg, &c->sync);
        if (st != RELOCK_OK)
            snprintf(c->msg, sizeof c->msg, "%s", relock_client_error(c->sync)->message);
        return st;
    }
    c->base = event_base_new();
    assert_non_null(c->base);
    c->tick = event_new(c->base, -1, EV_PERSIST, tick_cb, NULL);
    struct timeval tv = {0, 20000};
    event_add(c->tick, &tv);
    relock_async_loop lp;
    relock_async_libevent(&lp, c->base);
    st = relock_async_new(cfg, &lp, &c->async);
    if (st != RELOCK_OK)
        snprintf(c->msg, sizeof c->msg, "%s", relock_async_error(c->async)->message);
    return st;
}

relock_status both_connect_file(both_entry e, const char *path, both_client **out)
{
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    relock_status st = relock_config_load_file(cfg, path);
    if (st != RELOCK_OK) {
        relock_config_free(cfg);
        fail_msg("%s: not loaded (%s)", path, relock_status_name(st));
    }
    st = both_connect(e, cfg, out);
    relock_config_free(cfg);
    return st;
}

void both_free(both_client *c)
{
    if (!c)
        return;
    relock_client_free(c->sync);
    if (c->base) {
        relock_async_free(c->async);
        event_free(c->tick);
        for (int i = 0; i < 20; i++)
            event_base_loop(c->base, EVLOOP_NONBLOCK);
        event_base_free(c->base);
    }
    while (c->keepers) {
        struct both_keeper *k = c->keepers;
        c->keepers = k->next;
        free(k);
    }
    free(c);
}

both_entry both_client_entry(const both_client *c)
{
    return c->entry;
}

const char *both_error(const both_client *c)
{
    return c->msg;
}

int both_replicas_acked(const both_client *c)
{
    return c->entry == BOTH_BLOCKING ? relock_client_replicas_acked(c->sync)
                                     : relock_async_replicas_acked(c->async);
}

relock_mode both_mode(const both_client *c)
{
    return c->entry == BOTH_BLOCKING ? relock_client_mode(c->sync) : relock_async_mode(c->async);
}

const char *both_mode_reason(const both_client *c)
{
    return c->entry == BOTH_BLOCKING ? relock_client_mode_reason(c->sync)
                                     : relock_async_mode_reason(c->async);
}

static void on_done(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                    void *arg)
{
    (void)a;
    both_outcome *o = arg;
    if (o->c->phase_fn)
        o->c->phase_fn(BOTH_CALLBACK, o->c->phase_arg);
    o->done++;
    o->st = st;
    o->l = l;
    snprintf(o->msg, sizeof o->msg, "%s", e->message);
}

/* Runs c's loop until o ended: its status, its message kept on c. */
static relock_status finish(both_client *c, relock_status started, both_outcome *o)
{
    if (started != RELOCK_OK) {
        snprintf(c->msg, sizeof c->msg, "%s", relock_async_error(c->async)->message);
        return started;
    }
    if (c->phase_fn)
        c->phase_fn(BOTH_STARTED, c->phase_arg);
    uint64_t end = tu_now_ms() + 60000;
    while (!o->done && tu_now_ms() < end)
        event_base_loop(c->base, EVLOOP_ONCE);
    if (o->done != 1)
        fail_msg("an asynchronous operation ended %d times within 60 s", o->done);
    if (o->st != RELOCK_OK)
        snprintf(c->msg, sizeof c->msg, "%s", o->msg);
    return o->st;
}

/* The blocking entry's status, its message kept on c. */
static relock_status kept(both_client *c, relock_status st)
{
    if (st != RELOCK_OK)
        snprintf(c->msg, sizeof c->msg, "%s", relock_client_error(c->sync)->message);
    return st;
}

relock_status both_acquire(both_client *c, const char *name, long long ttl_ms, long long wait_ms,
                           relock_lock **out)
{
    *out = NULL;
    if (c->entry == BOTH_BLOCKING)
        return kept(c, relock_acquire(c->sync, name, ttl_ms, wait_ms, out));
    both_outcome o = {.c = c};
    relock_status st = finish(
        c, relock_async_acquire(c->async, name, ttl_ms, wait_ms, on_done, &o, NULL), &o);
    *out = o.l;
    return st;
}

relock_status both_try_acquire(both_client *c, const char *name, long long ttl_ms,
                               relock_lock **out)
{
    *out = NULL;
    if (c->entry == BOTH_BLOCKING)
        return kept(c, relock_try_acquire(c->sync, name, ttl_ms, out));
    both_outcome o = {.c = c};
    relock_status st =
        finish(c, relock_async_try_acquire(c->async, name, ttl_ms, on_done, &o, NULL), &o);
    *out = o.l;
    return st;
}

relock_status both_extend(both_client *c, relock_lock *l, long long ttl_ms)
{
    if (c->entry == BOTH_BLOCKING)
        return kept(c, relock_extend(l, ttl_ms));
    both_outcome o = {.c = c};
    return finish(c, relock_async_extend(l, ttl_ms, on_done, &o), &o);
}

relock_status both_release(both_client *c, relock_lock *l)
{
    if (c->entry == BOTH_BLOCKING)
        return kept(c, relock_release(l));
    both_outcome o = {.c = c};
    return finish(c, relock_async_release(l, on_done, &o), &o);
}

static void on_scan(relock_async *a, relock_status st, relock_scan_result *r,
                    const relock_error *e, void *arg)
{
    both_outcome *o = arg;
    o->scan = r;
    on_done(a, st, NULL, e, arg);
}

relock_status both_scan(both_client *c, const char *match, relock_scan_key_fn fn, void *arg,
                        relock_scan_result **out)
{
    if (c->entry == BOTH_BLOCKING)
        return kept(c, relock_scan_keys(c->sync, match, fn, arg, out));
    both_outcome o = {.c = c};
    relock_status st = finish(c, relock_async_scan(c->async, match, fn, arg, on_scan, &o), &o);
    *out = o.scan;
    return st;
}

static void lost_blocking(relock_lock *l, relock_status why, void *arg)
{
    (void)l;
    struct both_keeper *k = arg;
    if (k->fn)
        k->fn(why, k->arg);
}

static void lost_async(relock_async *a, relock_lock *l, relock_status why, const relock_error *e,
                       void *arg)
{
    (void)a, (void)l, (void)e;
    lost_blocking(NULL, why, arg);
}

relock_status both_keep(both_client *c, relock_lock *l, both_lost_fn on_lost, void *arg)
{
    struct both_keeper *k = calloc(1, sizeof *k);
    assert_non_null(k);
    k->fn = on_lost;
    k->arg = arg;
    k->next = c->keepers;
    c->keepers = k;
    if (c->entry == BOTH_BLOCKING)
        return kept(c, relock_keep(l, lost_blocking, k));
    relock_status st = relock_async_keep(l, lost_async, k);
    if (st != RELOCK_OK)
        snprintf(c->msg, sizeof c->msg, "%s", relock_async_error(c->async)->message);
    return st;
}

relock_status both_keep_stop(both_client *c, relock_lock *l)
{
    if (c->entry == BOTH_BLOCKING)
        return kept(c, relock_keep_stop(l));
    relock_status st = relock_async_keep_stop(l);
    if (st != RELOCK_OK)
        snprintf(c->msg, sizeof c->msg, "%s", relock_async_error(c->async)->message);
    return st;
}

void both_on_phase(both_client *c, void (*fn)(both_phase phase, void *arg), void *arg)
{
    c->phase_fn = fn;
    c->phase_arg = arg;
}

void both_idle(both_client *c, long ms)
{
    if (c->entry == BOTH_BLOCKING) {
        tu_sleep_ms(ms);
        return;
    }
    uint64_t end = tu_now_ms() + (uint64_t)ms;
    while (tu_now_ms() < end)
        event_base_loop(c->base, EVLOOP_ONCE);
}

int both_run(both_entry e, const struct CMUnitTest *shared, size_t nshared,
             const struct CMUnitTest *alone, size_t nalone, both_fixture setup,
             both_fixture teardown)
{
    struct CMUnitTest *tests = calloc(nshared + nalone, sizeof *tests);
    if (!tests)
        return 1;
    size_t n = 0;
    for (size_t i = 0; i < nshared; i++)
        tests[n++] = shared[i];
    for (size_t i = 0; e == BOTH_BLOCKING && i < nalone; i++)
        tests[n++] = alone[i];
    int rc = _cmocka_run_group_tests(both_entry_name(e), tests, n, setup, teardown);
    free(tests);
    return rc;
}
