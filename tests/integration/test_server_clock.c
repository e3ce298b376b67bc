/*
 * A step of the server's clock with legacy.clock = "server", on a real
 * redis-server whose wall clock is shifted at run time (tests/support/
 * clock_ahead.c preloaded, the shift read from a file).
 *
 * A client measures the server's clock once and keeps the offset (measured
 * again every 5 s of use).  The server's clock then steps, back or
 * forward, by more than a lease, and a client that connects afterwards
 * acquires a lock with a timestamp on the stepped clock.  The first client
 * must not take that lock over on its old offset, between two of its
 * operations (blocking and asynchronous) nor inside one (a blocking
 * acquire waiting behind a holder that releases after the step): before
 * a takeover the server's clock is read afresh.
 *
 * After a forward step the client that measured before must write its
 * lease on the server's clock as it is now, not on its old estimate
 * (test_step_forward_then_acquire).  A forward step also shortens every
 * lease already written, for legacy readers as for relock's clients: that
 * is a stated limit (docs/legacy.md), not checked here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "relock.h"
#include "testclient.h"
#include "testloop.h"
#include "testsrv.h"
#include "testutil.h"

static testsrv srv;
static char dir[64], shift_file[96];
static int preloaded;

/* The step: more than the lease (20 s), as an NTP step of a server whose
 * clock was a minute off. */
#define LEASE_MS 20000
#define STEP_MS 60000LL

static long long wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The server's clock by TIME, in ms. */
static long long server_ms(void)
{
    char *t = testsrv_cmd(&srv, "TIME");
    assert_non_null(t);
    long long sec = atoll(t);
    free(t);
    return sec * 1000;
}

/* Shifts the server's clock to shift ms from the true time, and waits
 * (bounded) until TIME says so. */
static void set_shift(long long shift)
{
    FILE *f = fopen(shift_file, "w");
    assert_non_null(f);
    fprintf(f, "%lld\n", shift);
    assert_int_equal(fclose(f), 0);
    uint64_t end = tu_now_ms() + 3000;
    for (;;) {
        long long d = server_ms() - wall_ms() - shift;
        if (d > -3000 && d < 3000)
            return;
        if (tu_now_ms() >= end)
            fail_msg("the server's clock did not follow the shift to %lld ms", shift);
        tu_sleep_ms(10);
    }
}

/* Fails the test with the server's clock back where it belongs. */
#define FAIL_UNSTEPPED(...)                                                                 \
    do {                                                                                    \
        set_shift(0);                                                                       \
        fail_msg(__VA_ARGS__);                                                              \
    } while (0)

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/relock-srvclk-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(shift_file, sizeof shift_file, "%s/shift", dir);
    FILE *f = fopen(shift_file, "w");
    if (!f)
        return -1;
    fputs("0\n", f);
    fclose(f);
    setenv("LD_PRELOAD", RELOCK_CLOCK_AHEAD_SO, 1);
    setenv("RELOCK_TEST_CLOCK_AHEAD_FILE", shift_file, 1);
    int rc = testsrv_start(&srv, NULL);
    unsetenv("LD_PRELOAD");
    unsetenv("RELOCK_TEST_CLOCK_AHEAD_FILE");
    if (rc != 0)
        return -1;
    /* The shift is real: a server started by RELOCK_TEST_SERVER, or one
     * that could not preload, is not stepped, and the tests say so. */
    f = fopen(shift_file, "w");
    fputs("-3600000\n", f);
    fclose(f);
    tu_sleep_ms(50);
    preloaded = server_ms() < wall_ms() - 3000000;
    f = fopen(shift_file, "w");
    fputs("0\n", f);
    fclose(f);
    tu_sleep_ms(50);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    testsrv_stop(&srv);
    unlink(shift_file);
    rmdir(dir);
    return 0;
}

static const char *const modes[] = {"legacy", "bridge"};
static const long long steps[] = {-STEP_MS, STEP_MS};

static relock_client *client(const char *mode, int notify)
{
    const char *const kv[] = {"legacy.clock", "server", "wait.notify", notify ? "true" : "false",
                              "wait.backoff_max_ms", "300", "wait.backoff_min_ms", "300", NULL};
    return tu_client(srv.port, mode, kv);
}

/* A client that has just measured the server's clock (its first write). */
static relock_client *measured_client(const char *mode, const char *warm)
{
    relock_client *w = client(mode, 1);
    relock_lock *l = NULL;
    assert_int_equal(relock_try_acquire(w, warm, LEASE_MS, &l), RELOCK_OK);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    return w;
}

static int skip_unless_preloaded(void)
{
    if (!preloaded)
        testsrv_note_skip("steps of the server's clock (clock_ahead.c could not be preloaded)");
    return !preloaded;
}

/* Between two operations: the client measured the offset, the server's
 * clock steps, another client acquires; the first client's next acquire
 * must find the lock held. */
static void test_step_between_operations(void **state)
{
    (void)state;
    if (skip_unless_preloaded())
        return;
    for (size_t mi = 0; mi < 2; mi++)
        for (size_t si = 0; si < 2; si++) {
            char name[64], warm[80];
            snprintf(name, sizeof name, "sclk-b-%s-%zu", modes[mi], si);
            snprintf(warm, sizeof warm, "%s-warm", name);
            set_shift(0);
            relock_client *w = measured_client(modes[mi], warm);
            set_shift(steps[si]);
            relock_client *h = client(modes[mi], 1);
            relock_lock *hl = NULL;
            assert_int_equal(relock_try_acquire(h, name, LEASE_MS, &hl), RELOCK_OK);
            relock_lock *wl = NULL;
            relock_status st = relock_try_acquire(w, name, LEASE_MS, &wl);
            if (st != RELOCK_BUSY)
                FAIL_UNSTEPPED("%s, server clock stepped %+lld ms: the client that measured it before "
                         "acquired a lock held for %lld ms more: %s (the key held %s)",
                         modes[mi], steps[si], relock_lock_validity_ms(hl),
                         relock_status_name(st), relock_lock_value(hl));
            /* Released before the clock goes back: a bridge key's PEXPIRE
             * runs on the server's wall clock, which a forward step ends. */
            st = relock_release(hl);
            set_shift(0);
            if (st != RELOCK_OK)
                fail_msg("release: %s", relock_client_error(h)->message);
            relock_lock_free(hl);
            relock_client_free(h);
            relock_client_free(w);
        }
}

/* Inside one operation: a blocking acquire waits behind a holder (it
 * measured the offset at its first attempt); the server's clock steps, the
 * holder releases and another client acquires at once.  The waiter's next
 * attempts must find that lock held until its wait ends.  The waiter runs
 * in a child (wait.notify off, an attempt every 300 ms): it reports 0 when
 * it acquired, 1 when its wait ended without the lock. */
static void test_step_inside_wait(void **state)
{
    (void)state;
    if (skip_unless_preloaded())
        return;
    for (size_t mi = 0; mi < 2; mi++)
        for (size_t si = 0; si < 2; si++) {
            int decided = 0;
            /* The waiter may take the free key between the release and
             * the other client's acquire (a 300 ms poll against a
             * millisecond window): then the round decides nothing. */
            for (int round = 0; round < 3 && !decided; round++) {
                char name[64];
                snprintf(name, sizeof name, "sclk-w-%s-%zu-%d", modes[mi], si, round);
                set_shift(0);
                relock_client *h = client(modes[mi], 1);
                relock_lock *hl = NULL;
                assert_int_equal(relock_try_acquire(h, name, LEASE_MS, &hl), RELOCK_OK);
                pid_t pid = fork();
                assert_true(pid >= 0);
                if (pid == 0) {
                    relock_client *w = client(modes[mi], 0);
                    relock_lock *wl = NULL;
                    relock_status st = relock_acquire(w, name, LEASE_MS, 2500, &wl);
                    _exit(st == RELOCK_OK ? 0 : st == RELOCK_TIMEOUT ? 1 : 2);
                }
                tu_sleep_ms(700); /* the waiter has measured and waits */
                set_shift(steps[si]);
                /* A forward step ends a bridge key's PEXPIRE (the server's
                 * wall clock passed it): then the release finds it gone. */
                relock_status rs = relock_release(hl);
                if (rs != RELOCK_OK && !(steps[si] > 0 && rs == RELOCK_LOST))
                    FAIL_UNSTEPPED("%s: the holder's release: %s", modes[mi],
                                   relock_client_error(h)->message);
                relock_lock_free(hl);
                relock_client *c = client(modes[mi], 1);
                relock_lock *cl = NULL;
                relock_status cst = relock_try_acquire(c, name, LEASE_MS, &cl);
                int status = 0;
                assert_int_equal(waitpid(pid, &status, 0), pid);
                assert_true(WIFEXITED(status));
                if (cst == RELOCK_OK) {
                    decided = 1;
                    if (WEXITSTATUS(status) == 0)
                        FAIL_UNSTEPPED("%s, server clock stepped %+lld ms while a client waited: it "
                                 "took over the lock another client acquired after the step "
                                 "(two holders)",
                                 modes[mi], steps[si]);
                    assert_int_equal(WEXITSTATUS(status), 1);
                    assert_int_equal(relock_release(cl), RELOCK_OK);
                    relock_lock_free(cl);
                } else {
                    assert_int_equal(cst, RELOCK_BUSY);
                }
                set_shift(0);
                relock_client_free(c);
                relock_client_free(h);
            }
            assert_true(decided);
        }
}

/* ------------------------------------------------------------ asynchronous */

typedef struct outcome {
    long calls;
    relock_status st;
    relock_lock *l;
} outcome;

static void record(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                   void *arg)
{
    (void)a, (void)e;
    outcome *o = arg;
    o->calls++;
    o->st = st;
    o->l = l;
}

static outcome async_try(relock_async *a, const char *name)
{
    outcome o;
    memset(&o, 0, sizeof o);
    assert_int_equal(relock_async_try_acquire(a, name, LEASE_MS, record, &o, NULL), RELOCK_OK);
    assert_int_equal(run_until(&o.calls, 1, 10000), 1);
    return o;
}

/* The asynchronous client, between two operations, as above. */
static void test_async_step_between_operations(void **state)
{
    (void)state;
    if (skip_unless_preloaded())
        return;
    for (size_t mi = 0; mi < 2; mi++)
        for (size_t si = 0; si < 2; si++) {
            char name[64], warm[80];
            snprintf(name, sizeof name, "sclk-a-%s-%zu", modes[mi], si);
            snprintf(warm, sizeof warm, "%s-warm", name);
            set_shift(0);
            relock_async_loop lp;
            loop_init(&lp);
            relock_config *cfg = relock_config_new();
            char url[64];
            snprintf(url, sizeof url, "redis://127.0.0.1:%d", srv.port);
            assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
            assert_int_equal(relock_config_set(cfg, "mode", modes[mi]), RELOCK_OK);
            assert_int_equal(relock_config_set(cfg, "legacy.clock", "server"), RELOCK_OK);
            relock_async *a = NULL;
            assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_OK);
            relock_config_free(cfg);
            outcome o = async_try(a, warm);
            assert_int_equal(o.st, RELOCK_OK);
            outcome r;
            memset(&r, 0, sizeof r);
            assert_int_equal(relock_async_release(o.l, record, &r), RELOCK_OK);
            assert_int_equal(run_until(&r.calls, 1, 10000), 1);
            relock_lock_free(o.l);
            set_shift(steps[si]);
            relock_client *h = client(modes[mi], 1);
            relock_lock *hl = NULL;
            assert_int_equal(relock_try_acquire(h, name, LEASE_MS, &hl), RELOCK_OK);
            o = async_try(a, name);
            if (o.st != RELOCK_BUSY)
                FAIL_UNSTEPPED("%s, server clock stepped %+lld ms: the asynchronous client that "
                         "measured it before acquired a lock held for %lld ms more: %s",
                         modes[mi], steps[si], relock_lock_validity_ms(hl),
                         relock_status_name(o.st));
            assert_int_equal(relock_release(hl), RELOCK_OK);
            set_shift(0);
            relock_lock_free(hl);
            relock_client_free(h);
            relock_async_free(a);
            loop_fini();
        }
}

/* The server's clock steps forward after a client measured it; that
 * client then acquires a free lock.  Its lease must be written on the
 * server's clock as it is now: on its old estimate it would write a
 * timestamp already past, which a client that reads TIME anew takes over
 * at once while the first is told it holds for the whole lease.  Blocking
 * and asynchronous. */
static void test_step_forward_then_acquire(void **state)
{
    (void)state;
    if (skip_unless_preloaded())
        return;
    for (size_t mi = 0; mi < 2; mi++)
        for (int async = 0; async < 2; async++) {
            char name[64], warm[80];
            snprintf(name, sizeof name, "sclk-f-%s-%d", modes[mi], async);
            snprintf(warm, sizeof warm, "%s-warm", name);
            set_shift(0);
            relock_client *w = NULL;
            relock_async *a = NULL;
            relock_async_loop lp;
            relock_lock *wl = NULL;
            if (async) {
                loop_init(&lp);
                relock_config *cfg = relock_config_new();
                char url[64];
                snprintf(url, sizeof url, "redis://127.0.0.1:%d", srv.port);
                assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
                assert_int_equal(relock_config_set(cfg, "mode", modes[mi]), RELOCK_OK);
                assert_int_equal(relock_config_set(cfg, "legacy.clock", "server"), RELOCK_OK);
                assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_OK);
                relock_config_free(cfg);
                outcome o = async_try(a, warm);
                assert_int_equal(o.st, RELOCK_OK);
                outcome r;
                memset(&r, 0, sizeof r);
                assert_int_equal(relock_async_release(o.l, record, &r), RELOCK_OK);
                assert_int_equal(run_until(&r.calls, 1, 10000), 1);
                relock_lock_free(o.l);
                set_shift(STEP_MS);
                o = async_try(a, name);
                assert_int_equal(o.st, RELOCK_OK);
                wl = o.l;
            } else {
                w = measured_client(modes[mi], warm);
                set_shift(STEP_MS);
                assert_int_equal(relock_try_acquire(w, name, LEASE_MS, &wl), RELOCK_OK);
            }
            relock_client *c = client(modes[mi], 1);
            relock_lock *cl = NULL;
            relock_status st = relock_try_acquire(c, name, LEASE_MS, &cl);
            if (st != RELOCK_BUSY)
                FAIL_UNSTEPPED("%s%s, server clock stepped +%lld ms before an acquire: another "
                               "client took the lock (%s) while its holder is told it holds "
                               "%lld ms more (value %s)",
                               modes[mi], async ? " (asynchronous)" : "", STEP_MS,
                               relock_status_name(st), relock_lock_validity_ms(wl),
                               relock_lock_value(wl));
            relock_client_free(c);
            if (async) {
                outcome r;
                memset(&r, 0, sizeof r);
                assert_int_equal(relock_async_release(wl, record, &r), RELOCK_OK);
                assert_int_equal(run_until(&r.calls, 1, 10000), 1);
                assert_int_equal(r.st, RELOCK_OK);
                relock_lock_free(wl);
                relock_async_free(a);
                loop_fini();
            } else {
                assert_int_equal(relock_release(wl), RELOCK_OK);
                relock_lock_free(wl);
                relock_client_free(w);
            }
            set_shift(0);
        }
}

/*
 * The fresh TIME cannot be read because the server is gone: the extend
 * fails with the I/O error, writes nothing, and (as every failed extend)
 * leaves no more validity than the lease it asked for.  The first extend
 * (to the same 30 s) finds the connection dead and closes it; the second,
 * to 1 s, finds no server to connect to before its machine starts: it
 * once left the 30 s validity of the acquire in place.
 */
static void test_time_unreadable(void **state)
{
    (void)state;
    for (int mi = 0; mi < 2; mi++) {
        testsrv px;
        assert_int_equal(testsrv_start_proxy(&px, srv.port, "7", NULL), 0);
        const char *const kv[] = {"legacy.clock", "server", NULL};
        relock_client *c = tu_client(px.port, modes[mi], kv);
        relock_lock *l = NULL;
        assert_int_equal(relock_try_acquire(c, "unreadable", 30000, &l), RELOCK_OK);
        testsrv_stop(&px);
        static const long long ttl[] = {30000, 1000};
        for (int i = 0; i < 2; i++) {
            relock_status st = relock_extend(l, ttl[i]);
            if (st != RELOCK_EIO)
                fail_msg("%s, extend %d with the server gone: %s: %s", modes[mi], i + 1,
                         relock_status_name(st), relock_client_error(c)->message);
            long long v = relock_lock_validity_ms(l);
            if (v > ttl[i])
                fail_msg("%s, extend %d to %lld ms with the server gone (%s): the validity is "
                         "%lld ms",
                         modes[mi], i + 1, ttl[i], relock_client_error(c)->message, v);
        }
        relock_lock_free(l);
        relock_client_free(c);
        free(testsrv_cmd(&srv, "DEL unreadable"));
    }
}

/* The server's clock by TIME, in ms, to the millisecond. */
static long long server_ms_exact(void)
{
    redisContext *r = redisConnect("127.0.0.1", srv.port);
    assert_true(r && !r->err);
    redisReply *t = redisCommand(r, "TIME");
    assert_true(t && t->type == REDIS_REPLY_ARRAY && t->elements == 2);
    long long ms = atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000;
    freeReplyObject(t);
    redisFree(r);
    return ms;
}

/*
 * The first TIME on a connection answered slowly (every reply held 400 ms
 * by a proxy: the server read its clock at the start of the round trip,
 * so the estimate is about 200 ms behind it).  The lease is planned on
 * that estimate, and its validity must be counted from the moment before
 * TIME went out, as the operation core counts it: from the moment the
 * reply came, the holder is told of about 200 ms (less the drift
 * allowance) that legacy readers, which judge by the server's clock, do
 * not give it.  Checked right after the acquire: the validity is at most
 * what is left of the lease by the server's clock (20 ms of slack, for
 * the clocks' rounding).
 */
static void slow_time_case(int async)
{
    testsrv px;
    assert_int_equal(testsrv_start_proxy(&px, srv.port, "7", NULL), 0);
    const char *name = async ? "slow-time-a" : "slow-time-b";
    relock_lock *l = NULL;
    relock_client *c = NULL;
    relock_async *a = NULL;
    relock_async_loop lp;
    if (async) {
        loop_init(&lp);
        relock_config *cfg = relock_config_new();
        char url[64];
        snprintf(url, sizeof url, "redis://127.0.0.1:%d", px.port);
        assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
        assert_int_equal(relock_config_set(cfg, "mode", "legacy"), RELOCK_OK);
        assert_int_equal(relock_config_set(cfg, "legacy.clock", "server"), RELOCK_OK);
        assert_int_equal(relock_config_set(cfg, "legacy.clock_unit", "ms"), RELOCK_OK);
        assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_OK);
        relock_config_free(cfg);
        free(testsrv_cmd(&px, "RELOCK-PROXY FAULT delay-ms 400"));
        outcome o;
        memset(&o, 0, sizeof o);
        assert_int_equal(relock_async_try_acquire(a, name, 2000, record, &o, NULL), RELOCK_OK);
        assert_int_equal(run_until(&o.calls, 1, 20000), 1);
        assert_int_equal(o.st, RELOCK_OK);
        l = o.l;
    } else {
        const char *const kv[] = {"legacy.clock", "server", "legacy.clock_unit", "ms", NULL};
        c = tu_client(px.port, "legacy", kv);
        free(testsrv_cmd(&px, "RELOCK-PROXY FAULT delay-ms 400"));
        assert_int_equal(relock_try_acquire(c, name, 2000, &l), RELOCK_OK);
    }
    /* The lease left when the validity was read is at most what TIME says
     * a moment later plus that moment (the two reads' time apart). */
    uint64_t t0 = tu_now_ms();
    long long valid = relock_lock_validity_ms(l);
    long long left = atoll(relock_lock_value(l)) + 1 - server_ms_exact();
    left += (long long)(tu_now_ms() - t0);
    free(testsrv_cmd(&px, "RELOCK-PROXY FAULT off"));
    if (valid > left + 20)
        fail_msg("%s, the first TIME answered in 400 ms: the holder is told %lld ms, while "
                 "the lease has %lld ms left by the server's clock",
                 async ? "asynchronous" : "blocking", valid, left);
    relock_lock_free(l);
    if (async) {
        relock_async_free(a);
        loop_fini();
    } else {
        relock_client_free(c);
    }
    free(testsrv_cmd(&srv, "DEL %s", name));
    testsrv_stop(&px);
}

static void test_slow_first_time(void **state)
{
    (void)state;
    slow_time_case(0);
    slow_time_case(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_between_operations),
        cmocka_unit_test(test_step_inside_wait),
        cmocka_unit_test(test_async_step_between_operations),
        cmocka_unit_test(test_step_forward_then_acquire),
        cmocka_unit_test(test_time_unreadable),
        cmocka_unit_test(test_slow_first_time),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
