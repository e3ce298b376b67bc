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
#ifdef BOTH_LIBUV
#include "relock_async_libuv.h"
#endif
#include "testutil.h"

/* "async-libuv": every asynchronous client of the program on libuv. */
static int on_libuv;

struct both_client {
    both_entry entry;
    relock_client *sync;
    relock_async *async;
    struct event_base *base;
    struct event *tick;
#ifdef BOTH_LIBUV
    uv_loop_t *uv;
    uv_timer_t uvtick;
#endif
    both_client *beside; /* the client whose loop this one shares, or NULL */
    char msg[512];
    char server[256]; /* the failed call's relock_error.server */
    struct both_keeper *keepers; /* on_lost's for both_keep, freed with c */
    struct both_outcome *outcomes; /* the operations' ends, freed with c */
    void (*phase_fn)(both_phase, void *);
    void *phase_arg;
};

/* One both_keep's on_lost, for the library's callback of either entry. */
struct both_keeper {
    both_lost_fn fn;
    void *arg;
    struct both_keeper *next;
};

/* One asynchronous operation's end, kept until the client is freed, so
 * that a callback called again after it finds it and is counted. */
typedef struct both_outcome {
    both_client *c;
    int done;
    relock_status st;
    relock_lock *l;
    relock_scan_result *scan;
    char msg[512];
    char server[256];
    struct both_outcome *next;
} both_outcome;

both_entry both_entry_from_args(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "blocking") == 0)
        return BOTH_BLOCKING;
    if (strcmp(argv[1], "async") == 0)
        return BOTH_ASYNC;
#ifdef BOTH_LIBUV
    if (strcmp(argv[1], "async-libuv") == 0) {
        on_libuv = 1;
        return BOTH_ASYNC;
    }
#endif
    fprintf(stderr,
            "%s: the entry point is \"blocking\", \"async\" or (built with libuv) "
            "\"async-libuv\", not \"%s\"\n",
            argv[0], argv[1]);
    exit(2);
}

const char *both_entry_name(both_entry e)
{
    return e == BOTH_BLOCKING ? "blocking" : on_libuv ? "async-libuv" : "async";
}

/* A 20 ms tick keeps one turn of the loop from blocking longer than that,
 * so that the runs below stay bounded in time. */
static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what, (void)arg;
}

#ifdef BOTH_LIBUV
static void uvtick_cb(uv_timer_t *t)
{
    (void)t;
}
#endif

/* c's loop, with its tick, told to lp. */
static void loop_new(both_client *c, relock_async_loop *lp)
{
#ifdef BOTH_LIBUV
    if (on_libuv) {
        c->uv = malloc(sizeof *c->uv);
        assert_non_null(c->uv);
        assert_int_equal(uv_loop_init(c->uv), 0);
        uv_timer_init(c->uv, &c->uvtick);
        uv_timer_start(&c->uvtick, uvtick_cb, 20, 20);
        relock_async_libuv(lp, c->uv);
        return;
    }
#endif
    c->base = event_base_new();
    assert_non_null(c->base);
    c->tick = event_new(c->base, -1, EV_PERSIST, tick_cb, NULL);
    struct timeval tv = {0, 20000};
    event_add(c->tick, &tv);
    relock_async_libevent(lp, c->base);
}

static void loop_turn(both_client *c)
{
    if (c->beside)
        c = c->beside;
#ifdef BOTH_LIBUV
    if (c->uv) {
        uv_run(c->uv, UV_RUN_ONCE);
        return;
    }
#endif
    event_base_loop(c->base, EVLOOP_ONCE);
}

/* The loop goes once the client is freed; on libuv every handle of the
 * client must have been closed by then. */
static void loop_free(both_client *c)
{
    if (c->beside)
        return;
#ifdef BOTH_LIBUV
    if (c->uv) {
        uv_timer_stop(&c->uvtick);
        uv_close((uv_handle_t *)&c->uvtick, NULL);
        int rc = -1;
        for (int i = 0; i < 200 && rc != 0; i++) {
            uv_run(c->uv, UV_RUN_NOWAIT);
            rc = uv_loop_close(c->uv);
        }
        assert_int_equal(rc, 0);
        free(c->uv);
        c->uv = NULL;
        return;
    }
#endif
    if (c->base) {
        event_free(c->tick);
        for (int i = 0; i < 20; i++)
            event_base_loop(c->base, EVLOOP_NONBLOCK);
        event_base_free(c->base);
        c->base = NULL;
    }
}

/* A failed call's message and server text, kept on c. */
static void keep_error(both_client *c, const relock_error *e)
{
    snprintf(c->msg, sizeof c->msg, "%s", e->message);
    snprintf(c->server, sizeof c->server, "%s", e->server);
}

/* The loop of next told to lp. */
static void loop_beside(both_client *next, relock_async_loop *lp)
{
    if (next->beside)
        next = next->beside;
#ifdef BOTH_LIBUV
    if (next->uv) {
        relock_async_libuv(lp, next->uv);
        return;
    }
#endif
    relock_async_libevent(lp, next->base);
}

static relock_status connect_to(both_entry e, both_client *next, const relock_config *cfg,
                                both_client **out)
{
    both_client *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->entry = e;
    *out = c;
    relock_status st;
    if (e == BOTH_BLOCKING) {
        st = relock_connect(cfg, &c->sync);
        if (st != RELOCK_OK)
            keep_error(c, relock_client_error(c->sync));
        return st;
    }
    relock_async_loop lp;
    if (next) {
        c->beside = next->beside ? next->beside : next;
        loop_beside(next, &lp);
    } else {
        loop_new(c, &lp);
    }
    st = relock_async_new(cfg, &lp, &c->async);
    if (st != RELOCK_OK)
        keep_error(c, relock_async_error(c->async));
    return st;
}

relock_status both_connect(both_entry e, const relock_config *cfg, both_client **out)
{
    return connect_to(e, NULL, cfg, out);
}

relock_status both_connect_beside(both_client *next, const relock_config *cfg,
                                  both_client **out)
{
    return connect_to(next->entry, next, cfg, out);
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
    relock_async_free(c->async);
    loop_free(c);
    while (c->keepers) {
        struct both_keeper *k = c->keepers;
        c->keepers = k->next;
        free(k);
    }
    while (c->outcomes) {
        both_outcome *o = c->outcomes;
        c->outcomes = o->next;
        free(o);
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

const char *both_error_server(const both_client *c)
{
    return c->server;
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
    snprintf(o->server, sizeof o->server, "%s", e->server);
}

static both_outcome *outcome_new(both_client *c)
{
    both_outcome *o = calloc(1, sizeof *o);
    assert_non_null(o);
    o->c = c;
    o->next = c->outcomes;
    c->outcomes = o;
    return o;
}

/* Runs c's loop until o ended: its status, its message kept on c. */
static relock_status finish(both_client *c, relock_status started, both_outcome *o)
{
    if (started != RELOCK_OK) {
        keep_error(c, relock_async_error(c->async));
        return started;
    }
    if (c->phase_fn)
        c->phase_fn(BOTH_STARTED, c->phase_arg);
    uint64_t end = tu_now_ms() + 60000;
    while (!o->done && tu_now_ms() < end)
        loop_turn(c);
    if (o->done != 1)
        fail_msg("an asynchronous operation ended %d times within 60 s", o->done);
    if (o->st != RELOCK_OK) {
        snprintf(c->msg, sizeof c->msg, "%s", o->msg);
        snprintf(c->server, sizeof c->server, "%s", o->server);
    }
    return o->st;
}

/* The blocking entry's status, its message kept on c. */
static relock_status kept(both_client *c, relock_status st)
{
    if (st != RELOCK_OK)
        keep_error(c, relock_client_error(c->sync));
    return st;
}

relock_status both_acquire(both_client *c, const char *name, long long ttl_ms, long long wait_ms,
                           relock_lock **out)
{
    *out = NULL;
    if (c->entry == BOTH_BLOCKING)
        return kept(c, relock_acquire(c->sync, name, ttl_ms, wait_ms, out));
    both_outcome *o = outcome_new(c);
    relock_status st =
        finish(c, relock_async_acquire(c->async, name, ttl_ms, wait_ms, on_done, o, NULL), o);
    *out = o->l;
    return st;
}

relock_status both_try_acquire(both_client *c, const char *name, long long ttl_ms,
                               relock_lock **out)
{
    *out = NULL;
    if (c->entry == BOTH_BLOCKING)
        return kept(c, relock_try_acquire(c->sync, name, ttl_ms, out));
    both_outcome *o = outcome_new(c);
    relock_status st =
        finish(c, relock_async_try_acquire(c->async, name, ttl_ms, on_done, o, NULL), o);
    *out = o->l;
    return st;
}

relock_status both_extend(both_client *c, relock_lock *l, long long ttl_ms)
{
    if (c->entry == BOTH_BLOCKING)
        return kept(c, relock_extend(l, ttl_ms));
    both_outcome *o = outcome_new(c);
    return finish(c, relock_async_extend(l, ttl_ms, on_done, o), o);
}

relock_status both_release(both_client *c, relock_lock *l)
{
    if (c->entry == BOTH_BLOCKING)
        return kept(c, relock_release(l));
    both_outcome *o = outcome_new(c);
    return finish(c, relock_async_release(l, on_done, o), o);
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
    both_outcome *o = outcome_new(c);
    relock_status st = finish(c, relock_async_scan(c->async, match, fn, arg, on_scan, o), o);
    *out = o->scan;
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
        keep_error(c, relock_async_error(c->async));
    return st;
}

relock_status both_keep_stop(both_client *c, relock_lock *l)
{
    if (c->entry == BOTH_BLOCKING)
        return kept(c, relock_keep_stop(l));
    relock_status st = relock_async_keep_stop(l);
    if (st != RELOCK_OK)
        keep_error(c, relock_async_error(c->async));
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
        loop_turn(c);
}

relock_client *both_sync(both_client *c)
{
    return c->sync;
}

relock_async *both_async(both_client *c)
{
    return c->async;
}

void both_turn(both_client *c)
{
    if (c->entry == BOTH_ASYNC)
        loop_turn(c);
}

long both_pending(const both_client *c)
{
    return c->async ? relock_async_pending(c->async) : 0;
}

int both_late_callbacks(const both_client *c)
{
    int n = 0;
    for (const both_outcome *o = c->outcomes; o; o = o->next)
        n += o->done > 1 ? o->done - 1 : 0;
    return n;
}

void both_free_async(both_client *c)
{
    relock_async_free(c->async);
    c->async = NULL;
}

int both_run(both_entry e, const struct CMUnitTest *shared, size_t nshared,
             const struct CMUnitTest *alone, size_t nalone, both_fixture setup,
             both_fixture teardown)
{
    return both_run_each(e, shared, nshared, alone, nalone, NULL, 0, setup, teardown);
}

int both_run_each(both_entry e, const struct CMUnitTest *shared, size_t nshared,
                  const struct CMUnitTest *blocking, size_t nblocking,
                  const struct CMUnitTest *async, size_t nasync, both_fixture setup,
                  both_fixture teardown)
{
    const struct CMUnitTest *alone = e == BOTH_BLOCKING ? blocking : async;
    size_t nalone = e == BOTH_BLOCKING ? nblocking : nasync;
    struct CMUnitTest *tests = calloc(nshared + nalone + 1, sizeof *tests);
    if (!tests)
        return 1;
    size_t n = 0;
    for (size_t i = 0; i < nshared; i++)
        tests[n++] = shared[i];
    for (size_t i = 0; i < nalone; i++)
        tests[n++] = alone[i];
    int rc = _cmocka_run_group_tests(both_entry_name(e), tests, n, setup, teardown);
    free(tests);
    return rc;
}
