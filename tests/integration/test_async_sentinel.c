/*
 * The asynchronous client through Redis Sentinel (design.md §9.2), on libevent
 * (it_async_sentinel_libevent) or libuv (it_async_sentinel_libuv): one
 * master, one replica and three redis-sentinel processes, as
 * test_sentinel.c starts them.  The client finds the master by name and
 * locks there; with no usable sentinel an operation fails with the
 * blocking client's message; when the master is SIGKILLed, operations in
 * flight end with a clear status (or succeed), new ones reach the promoted
 * replica, and a lock held across the failover is never held twice; a
 * demoted master's READONLY sends the client back to the sentinels.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "async_loop.h"
#include "testsentinel.h"
#include "testsrv.h"

#define NSENT 3
static testsrv master, replica, sent[NSENT], other;
static int dead_port; /* a port nothing listens on: a sentinel that is down */

static int setup(void **state)
{
    (void)state;
    if (testsentinel_start(&master, &replica, sent, NSENT) != 0)
        return -1;
    dead_port = testsrv_free_port();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    testsentinel_stop(&master, &replica, sent, NSENT);
    testsrv_stop(&other);
    return 0;
}

/* Master "m" (or name) through the sentinels, the first of which is down. */
static relock_config *sentinel_config(const char *name)
{
    return testsentinel_config(sent, dead_port, name);
}

static relock_async *async_client(relock_async_loop *lp, relock_config *cfg)
{
    relock_async *a = NULL;
    relock_status st = relock_async_new(cfg, lp, &a);
    if (st != RELOCK_OK)
        fail_msg("relock_async_new: %s: %s", relock_status_name(st),
                 relock_async_error(a)->message);
    return a;
}

/* Whether key exists on s (a direct connection). */
static long long exists_on(const testsrv *s, const char *key)
{
    redisContext *r = redisConnect("127.0.0.1", s->port);
    assert_true(r && !r->err);
    redisReply *x = redisCommand(r, "EXISTS %s", key);
    assert_non_null(x);
    long long n = x->type == REDIS_REPLY_INTEGER ? x->integer : -1;
    freeReplyObject(x);
    redisFree(r);
    return n;
}

static relock_lock *acquire_ok(relock_async *a, const char *name)
{
    outcome o = {0};
    assert_int_equal(relock_async_try_acquire(a, name, 20000, record, &o, NULL), RELOCK_OK);
    finish(&o, 20000);
    if (o.st != RELOCK_OK)
        fail_msg("acquire %s: %s: %s", name, relock_status_name(o.st), o.msg);
    assert_true(relock_lock_fence(o.l) > 0);
    return o.l;
}

static void release_ok(relock_lock *l)
{
    outcome o = {0};
    assert_int_equal(relock_async_release(l, record, &o), RELOCK_OK);
    finish(&o, 20000);
    if (o.st != RELOCK_OK)
        fail_msg("release: %s: %s", relock_status_name(o.st), o.msg);
    relock_lock_free(l);
}

/* No sentinel answers, or none knows the name: the operation fails with
 * RELOCK_EIO and the blocking client's message, naming every sentinel. */
static void test_no_master(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_config *cfg = relock_config_new();
    char addrs[64], want[256];
    int dead2 = testsrv_free_port();
    snprintf(addrs, sizeof addrs, "127.0.0.1:%d,127.0.0.1:%d", dead_port, dead2);
    assert_int_equal(relock_config_set(cfg, "sentinel.master", "m"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "sentinel.addrs", addrs), RELOCK_OK);
    relock_async *a = async_client(&lp, cfg);
    outcome o = {0};
    assert_int_equal(relock_async_try_acquire(a, "n1", 5000, record, &o, NULL), RELOCK_OK);
    finish(&o, 10000);
    assert_int_equal(o.st, RELOCK_EIO);
    snprintf(want, sizeof want,
             "no usable master \"m\" from 2 sentinels: sentinel 127.0.0.1:%d: Connection "
             "refused; sentinel 127.0.0.1:%d: Connection refused",
             dead_port, dead2);
    assert_string_equal(o.msg, want);
    /* The next operation asks again, and fails alike. */
    memset(&o, 0, sizeof o);
    assert_int_equal(relock_async_try_acquire(a, "n1", 5000, record, &o, NULL), RELOCK_OK);
    finish(&o, 10000);
    assert_int_equal(o.st, RELOCK_EIO);
    assert_string_equal(o.msg, want);
    relock_async_free(a);
    relock_config_free(cfg);

    cfg = sentinel_config("nosuch");
    a = async_client(&lp, cfg);
    memset(&o, 0, sizeof o);
    assert_int_equal(relock_async_try_acquire(a, "n1", 5000, record, &o, NULL), RELOCK_OK);
    finish(&o, 10000);
    assert_int_equal(o.st, RELOCK_EIO);
    snprintf(want, sizeof want, "sentinel 127.0.0.1:%d does not know master \"nosuch\"",
             sent[2].port);
    if (!strstr(o.msg, want))
        fail_msg("message lacks \"%s\": %s", want, o.msg);
    relock_async_free(a);
    relock_config_free(cfg);
    loop_fini();
}

/* An error about a key names the master the client uses (at), as the
 * blocking client's does: a hash where a lock was asked for. */
static void names_master(relock_async *a, const testsrv *at)
{
    char *r = testsrv_cmd(at, "HSET %s f v", "hashkey");
    free(r);
    outcome o = {0};
    assert_int_equal(relock_async_try_acquire(a, "hashkey", 5000, record, &o, NULL), RELOCK_OK);
    finish(&o, 10000);
    char where[64];
    snprintf(where, sizeof where, "127.0.0.1:%d", at->port);
    if (o.st != RELOCK_EFOREIGN || !strstr(o.msg, where))
        fail_msg("a hash on the master at %s: %s: %s", where, relock_status_name(o.st), o.msg);
    r = testsrv_cmd(at, "DEL %s", "hashkey");
    free(r);
}

/* A blocking client through the same sentinels. */
static relock_client *blocking(relock_config *cfg)
{
    relock_client *c = NULL;
    if (relock_connect(cfg, &c) != RELOCK_OK)
        fail_msg("connect: %s", relock_client_error(c)->message);
    return c;
}

/* A scan through relock_async_scan(): it ends complete and tells of a
 * key ending with name (the walk ran on the master in use). */
typedef struct scan_out {
    long calls;
    relock_status st;
    int complete, found;
    char msg[512];
    const char *name;
} scan_out;

static void scan_key(void *arg, relock_key_class k, const char *key, size_t keylen)
{
    (void)k;
    scan_out *o = arg;
    size_t n = strlen(o->name);
    if (keylen >= n && memcmp(key + keylen - n, o->name, n) == 0)
        o->found = 1;
}

static void scan_end(relock_async *a, relock_status st, relock_scan_result *r,
                     const relock_error *e, void *arg)
{
    (void)a;
    scan_out *o = arg;
    o->calls++;
    o->st = st;
    o->complete = r && relock_scan_result_complete(r);
    snprintf(o->msg, sizeof o->msg, "%s", e->message);
    relock_scan_result_free(r);
}

static void scan_finds(relock_async *a, const char *name)
{
    scan_out o = {0};
    o.name = name;
    assert_int_equal(relock_async_scan(a, NULL, scan_key, &o, scan_end, &o), RELOCK_OK);
    if (run_until(&o.calls, 1, 20000) != 1)
        fail_msg("a scan did not end within 20 s");
    if (o.st != RELOCK_OK || !o.complete || !o.found)
        fail_msg("scan for %s: %s (complete %d, found %d): %s", name, relock_status_name(o.st),
                 o.complete, o.found, o.msg);
}

static void test_failover(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_config *cfg = sentinel_config("m");
    relock_async *a = async_client(&lp, cfg);
    relock_async *b = async_client(&lp, cfg);

    /* Through the master the sentinels name, contended by a blocking
     * client through them too. */
    relock_lock *l = acquire_ok(a, "s1");
    assert_int_equal(exists_on(&master, "s1"), 1);
    relock_client *c = blocking(cfg);
    relock_lock *bl = NULL;
    assert_int_equal(relock_try_acquire(c, "s1", 5000, &bl), RELOCK_BUSY);
    release_ok(l);
    assert_int_equal(exists_on(&master, "s1"), 0);
    assert_int_equal(relock_try_acquire(c, "s1", 5000, &bl), RELOCK_OK);
    outcome busy = {0};
    assert_int_equal(relock_async_try_acquire(a, "s1", 5000, record, &busy, NULL), RELOCK_OK);
    assert_int_equal(finish(&busy, 10000)->st, RELOCK_BUSY);
    assert_int_equal(relock_release(bl), RELOCK_OK);
    relock_lock_free(bl);
    relock_client_free(c);

    /* A holds "held" across the failover, replicated before the kill;
     * B waits for it. */
    relock_lock *held = acquire_ok(a, "held");
    assert_int_equal(testsrv_await(&replica, 10000, "1", "EXISTS %s", "held"), 0);
    outcome waiter = {0};
    assert_int_equal(relock_async_acquire(b, "held", 20000, 60000, record, &waiter, NULL),
                     RELOCK_OK);
    outcome inflight = {0};
    assert_int_equal(relock_async_try_acquire(a, "s2", 20000, record, &inflight, NULL),
                     RELOCK_OK);

    /* The master dies without a word. */
    uint64_t t0 = tu_now_ms();
    kill(master.pid, SIGKILL);
    testsrv_stop(&master);

    /* The operation in flight ends clearly, or succeeds. */
    finish(&inflight, 30000);
    if (inflight.st != RELOCK_OK && inflight.st != RELOCK_EIO && inflight.st != RELOCK_EAMBIGUOUS)
        fail_msg("in flight at the kill: %s: %s", relock_status_name(inflight.st), inflight.msg);
    if (inflight.st != RELOCK_OK)
        assert_true(inflight.msg[0] != '\0');
    print_message("in flight at the kill: %s (%s)\n", relock_status_name(inflight.st),
                  inflight.msg);

    /* New operations reach the promoted replica within 30 s. */
    int ok = 0, fails = 0, named = 0;
    char first[512] = "";
    relock_lock *l3 = NULL;
    while (!ok && tu_now_ms() - t0 < 30000) {
        outcome o = {0};
        assert_int_equal(relock_async_try_acquire(a, "s3", 20000, record, &o, NULL), RELOCK_OK);
        finish(&o, 30000);
        if (o.st == RELOCK_OK) {
            l3 = o.l;
            ok = 1;
            break;
        }
        if (o.st != RELOCK_EIO && o.st != RELOCK_EAMBIGUOUS)
            fail_msg("during failover: %s: %s", relock_status_name(o.st), o.msg);
        if (!fails++)
            snprintf(first, sizeof first, "%s", o.msg);
        char dead[64];
        snprintf(dead, sizeof dead, "sentinel 127.0.0.1:%d: Connection refused", dead_port);
        if (strstr(o.msg, "no usable master \"m\" from 4 sentinels") && strstr(o.msg, dead))
            named++;
        uint64_t pause = tu_now_ms() + 200;
        while (tu_now_ms() < pause)
            loop_once();
    }
    print_message("failover: back after %llu ms, %d failed operations (first: %s)\n",
                  (unsigned long long)(tu_now_ms() - t0), fails, first);
    assert_true(ok);
    /* Operations that failed meanwhile said why, naming the sentinels
     * asked (some may not fail at all: they wait for the search). */
    assert_true(fails == 0 || named > 0);
    assert_int_equal(exists_on(&replica, "s3"), 1);
    release_ok(l3);
    names_master(a, &replica);
    /* the audit walks the master in use, where the lock held across the
     * failover is */
    scan_finds(a, "held");

    /* The waiter has not got "held" while A holds it: it failed clearly
     * during the failover (its attempt met the dead master), or still
     * waits; one waiting now waits for A's release, which goes through the
     * new master, and gets it after. */
    if (waiter.calls) {
        if (waiter.st != RELOCK_EIO && waiter.st != RELOCK_EAMBIGUOUS)
            fail_msg("waiter during the failover: %s: %s", relock_status_name(waiter.st),
                     waiter.msg);
        print_message("waiter during the failover: %s (%s)\n", relock_status_name(waiter.st),
                      waiter.msg);
        memset(&waiter, 0, sizeof waiter);
        assert_int_equal(relock_async_acquire(b, "held", 20000, 60000, record, &waiter, NULL),
                         RELOCK_OK);
    }
    uint64_t settle = tu_now_ms() + 1000;
    while (tu_now_ms() < settle)
        loop_once();
    assert_int_equal(waiter.calls, 0);
    assert_int_equal(exists_on(&replica, "held"), 1);
    uint64_t released_at = tu_now_ms();
    release_ok(held);
    finish(&waiter, 30000);
    if (waiter.st != RELOCK_OK)
        fail_msg("waiter: %s: %s", relock_status_name(waiter.st), waiter.msg);
    assert_true(waiter.at >= released_at);
    release_ok(waiter.l);

    /* The master in use is demoted (as a returning old master is): its
     * READONLY fails the operation with the blocking client's message, and
     * the next one asks the sentinels, who still name it: not a master. */
    assert_int_equal(testsrv_start(&other, NULL), 0);
    char port[16];
    snprintf(port, sizeof port, "%d", other.port);
    char *r = testsrv_cmd(&replica, "REPLICAOF 127.0.0.1 %s", port);
    assert_non_null(r);
    free(r);
    outcome ro = {0};
    assert_int_equal(relock_async_try_acquire(a, "s5", 5000, record, &ro, NULL), RELOCK_OK);
    finish(&ro, 10000);
    assert_int_equal(ro.st, RELOCK_EIO);
    if (!strstr(ro.msg, "read-only replica") || !strstr(ro.msg, "failover of \"m\" is under way"))
        fail_msg("READONLY message: %s", ro.msg);
    memset(&ro, 0, sizeof ro);
    assert_int_equal(relock_async_try_acquire(a, "s5", 5000, record, &ro, NULL), RELOCK_OK);
    finish(&ro, 10000);
    assert_int_equal(ro.st, RELOCK_EIO);
    char want[128];
    snprintf(want, sizeof want, "master at 127.0.0.1:%d: not a master (role slave)",
             replica.port);
    if (!strstr(ro.msg, want))
        fail_msg("message lacks \"%s\": %s", want, ro.msg);
    relock_async_free(b);
    relock_async_free(a);
    relock_config_free(cfg);
    loop_fini();
}

/* The client freed while its search waits on a sentinel that accepted the
 * connection and does not answer (stopped): the operation waiting ends
 * cancelled, once, and every connection and timer goes with the client
 * (loop_fini checks the loop is empty; the sanitizer build, that nothing
 * leaks). */
static void test_free_during_search(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_config *cfg = relock_config_new();
    char addrs[64];
    snprintf(addrs, sizeof addrs, "127.0.0.1:%d,127.0.0.1:%d", sent[0].port, sent[1].port);
    assert_int_equal(relock_config_set(cfg, "sentinel.master", "m"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "sentinel.addrs", addrs), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "connect_timeout_ms", "5000"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "command_timeout_ms", "5000"), RELOCK_OK);
    assert_int_equal(kill(sent[0].pid, SIGSTOP), 0);
    relock_async *a = async_client(&lp, cfg);
    relock_config_free(cfg);
    outcome o = {0};
    assert_int_equal(relock_async_try_acquire(a, "afree", 5000, record, &o, NULL), RELOCK_OK);
    long never = 0;
    run_until(&never, 1, 300); /* connected to the stopped sentinel, asking */
    assert_int_equal(o.calls, 0);
    relock_async_free(a);
    assert_int_equal(kill(sent[0].pid, SIGCONT), 0);
    assert_int_equal(o.calls, 1);
    assert_int_equal(o.st, RELOCK_ECANCELED);
    run_until(&never, 1, 200);
    assert_int_equal(o.calls, 1);
    loop_fini();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_master),
        cmocka_unit_test(test_free_during_search),
        cmocka_unit_test(test_failover),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
