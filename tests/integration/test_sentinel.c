/*
 * Sentinel (design.md §9.2): one master, one replica and three redis-sentinel
 * processes.  A client finds the master by name; when the master is
 * SIGKILLed the sentinels promote the replica and the client, with no step
 * by hand, goes on locking there, and a lock held across the failover is
 * never held twice.  A demoted master's READONLY makes the client ask the
 * sentinels again.
 *
 * Each scenario runs through one entry point per ctest (tests/support/both.c):
 * it_sentinel the blocking API, it_sentinel_async the asynchronous one on
 * libevent, it_sentinel_async_libuv on libuv.  Where the entries differ,
 * each keeps its own part: the blocking client finds the master at
 * relock_connect() and reports its address; the asynchronous one searches
 * at its first operation, has operations in flight when the master dies
 * and a waiter across the failover, and may be freed during a search.
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

#include "async_outcome.h"
#include "both.h"
#include "relock.h"
#include "testsentinel.h"
#include "testsrv.h"
#include "testutil.h"

#define NSENT 3
static testsrv master, replica, sent[NSENT], other;
static int dead_port; /* a port nothing listens on: a sentinel that is down */
static both_entry entry;

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

/* A configuration naming master "m" (or name) and the sentinels, the
 * first of which is down. */
static relock_config *sentinel_config(const char *name)
{
    return testsentinel_config(sent, dead_port, name);
}

static both_client *connected(both_entry e, const relock_config *cfg)
{
    both_client *c = NULL;
    if (both_connect(e, cfg, &c) != RELOCK_OK)
        fail_msg("connect (%s): %s", both_entry_name(e), both_error(c));
    return c;
}

/* The port of the master the blocking client uses (relock_client_server);
 * the asynchronous client does not report one: -1. */
static int server_port(both_client *c)
{
    relock_server_info *info = NULL;
    if (!both_sync(c) || relock_client_server(both_sync(c), &info) != RELOCK_OK)
        return -1;
    int port = relock_server_info_port(info);
    relock_server_info_free(info);
    return port;
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

static relock_lock *acquire_ok(both_client *c, const char *name)
{
    relock_lock *l = NULL;
    relock_status st = both_try_acquire(c, name, 20000, &l);
    if (st != RELOCK_OK)
        fail_msg("acquire %s: %s: %s", name, relock_status_name(st), both_error(c));
    assert_true(relock_lock_fence(l) > 0);
    return l;
}

static void release_ok(both_client *c, relock_lock *l)
{
    relock_status st = both_release(c, l);
    if (st != RELOCK_OK)
        fail_msg("release: %s: %s", relock_status_name(st), both_error(c));
    relock_lock_free(l);
}

/* Acquire, extend and release name on the master at s. */
static void lock_unlock(both_client *c, const char *name, const testsrv *s)
{
    relock_lock *l = acquire_ok(c, name);
    assert_int_equal(exists_on(s, name), 1);
    assert_int_equal(both_extend(c, l, 5000), RELOCK_OK);
    release_ok(c, l);
    assert_int_equal(exists_on(s, name), 0);
}

/* An error about a key names the master the client uses (at): a hash
 * where a lock was asked for. */
static void names_master(both_client *c, const testsrv *at)
{
    char *r = testsrv_cmd(at, "HSET %s f v", "hashkey");
    free(r);
    relock_lock *l = NULL;
    relock_status st = both_try_acquire(c, "hashkey", 5000, &l);
    char where[64];
    snprintf(where, sizeof where, "127.0.0.1:%d", at->port);
    if (st != RELOCK_EFOREIGN || !strstr(both_error(c), where))
        fail_msg("a hash on the master at %s: %s: %s", where, relock_status_name(st),
                 both_error(c));
    r = testsrv_cmd(at, "DEL %s", "hashkey");
    free(r);
}

/* A scan's keys: whether one ends with name. */
typedef struct scan_find {
    const char *name;
    int found;
} scan_find;

static void scan_key(void *arg, relock_key_class k, const char *key, size_t keylen)
{
    (void)k;
    scan_find *f = arg;
    size_t n = strlen(f->name);
    if (keylen >= n && memcmp(key + keylen - n, f->name, n) == 0)
        f->found = 1;
}

/* A scan through c (relock_scan_keys() or relock_async_scan()) ends
 * complete and tells of a key ending with name: the walk ran on the
 * master in use. */
static void scan_finds(both_client *c, const char *name)
{
    scan_find f = {name, 0};
    relock_scan_result *r = NULL;
    relock_status st = both_scan(c, NULL, scan_key, &f, &r);
    int complete = r && relock_scan_result_complete(r);
    relock_scan_result_free(r);
    if (st != RELOCK_OK || !complete || !f.found)
        fail_msg("scan for %s: %s (complete %d, found %d): %s", name, relock_status_name(st),
                 complete, f.found, st != RELOCK_OK ? both_error(c) : "");
}

/* Runs an asynchronous operation of c's loop to its end (bounded by ms). */
static outcome *await_op(both_client *c, outcome *o, long ms)
{
    uint64_t end = tu_now_ms() + (uint64_t)ms;
    while (o->calls == 0 && tu_now_ms() < end)
        both_turn(c);
    if (o->calls != 1)
        fail_msg("an operation did not end within %ld ms", ms);
    return o;
}

/* The first call that asks the sentinels: relock_connect() for the
 * blocking entry, the first operation for the asynchronous one (whose
 * client is made without a connection). */
static relock_status first_call(const relock_config *cfg, both_client **c)
{
    relock_status st = both_connect(entry, cfg, c);
    if (entry == BOTH_BLOCKING)
        return st;
    assert_int_equal(st, RELOCK_OK);
    relock_lock *l = NULL;
    return both_try_acquire(*c, "n1", 5000, &l);
}

/* No sentinel answers, or none knows the name: a clear RELOCK_EIO naming
 * the master and every sentinel asked. */
static void test_no_master(void **state)
{
    (void)state;
    relock_config *cfg = relock_config_new();
    char addrs[64], want[256];
    int dead2 = testsrv_free_port();
    snprintf(addrs, sizeof addrs, "127.0.0.1:%d,127.0.0.1:%d", dead_port, dead2);
    assert_int_equal(relock_config_set(cfg, "sentinel.master", "m"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "sentinel.addrs", addrs), RELOCK_OK);
    both_client *c = NULL;
    assert_int_equal(first_call(cfg, &c), RELOCK_EIO);
    snprintf(want, sizeof want,
             "no usable master \"m\" from 2 sentinels: sentinel 127.0.0.1:%d: Connection "
             "refused; sentinel 127.0.0.1:%d: Connection refused",
             dead_port, dead2);
    assert_string_equal(both_error(c), want);
    if (entry == BOTH_ASYNC) {
        /* The next operation asks again, and fails alike. */
        relock_lock *l = NULL;
        assert_int_equal(both_try_acquire(c, "n1", 5000, &l), RELOCK_EIO);
        assert_string_equal(both_error(c), want);
    }
    both_free(c);
    relock_config_free(cfg);

    cfg = sentinel_config("nosuch");
    assert_int_equal(first_call(cfg, &c), RELOCK_EIO);
    snprintf(want, sizeof want, "sentinel 127.0.0.1:%d does not know master \"nosuch\"",
             sent[2].port);
    if (!strstr(both_error(c), want))
        fail_msg("message lacks \"%s\": %s", want, both_error(c));
    both_free(c);
    relock_config_free(cfg);
}

/* The asynchronous entry's operations around the kill: b waits for
 * "held" (which a holds across the failover), a has an acquire in flight. */
typedef struct around {
    outcome waiter, inflight;
} around;

static void around_start(around *ar, both_client *a, both_client *b)
{
    memset(ar, 0, sizeof *ar);
    assert_int_equal(relock_async_acquire(both_async(b), "held", 20000, 60000, record,
                                          &ar->waiter, NULL),
                     RELOCK_OK);
    assert_int_equal(relock_async_try_acquire(both_async(a), "s2", 20000, record, &ar->inflight,
                                              NULL),
                     RELOCK_OK);
}

/* The operation in flight at the kill ends clearly, or succeeds. */
static void around_inflight(around *ar, both_client *a)
{
    outcome *o = await_op(a, &ar->inflight, 30000);
    if (o->st != RELOCK_OK && o->st != RELOCK_EIO && o->st != RELOCK_EAMBIGUOUS)
        fail_msg("in flight at the kill: %s: %s", relock_status_name(o->st), o->msg);
    if (o->st != RELOCK_OK)
        assert_true(o->msg[0] != '\0');
    print_message("in flight at the kill: %s (%s)\n", relock_status_name(o->st), o->msg);
    relock_lock_free(o->l);
}

/* The waiter has not got "held" while a holds it: it failed clearly
 * during the failover (its attempt met the dead master), or still waits;
 * one waiting now waits for a's release. */
static void around_waiter(around *ar, both_client *a, both_client *b)
{
    if (ar->waiter.calls) {
        if (ar->waiter.st != RELOCK_EIO && ar->waiter.st != RELOCK_EAMBIGUOUS)
            fail_msg("waiter during the failover: %s: %s", relock_status_name(ar->waiter.st),
                     ar->waiter.msg);
        print_message("waiter during the failover: %s (%s)\n",
                      relock_status_name(ar->waiter.st), ar->waiter.msg);
        memset(&ar->waiter, 0, sizeof ar->waiter);
        assert_int_equal(relock_async_acquire(both_async(b), "held", 20000, 60000, record,
                                              &ar->waiter, NULL),
                         RELOCK_OK);
    }
    both_idle(a, 1000);
    assert_int_equal(ar->waiter.calls, 0);
}

static void test_failover(void **state)
{
    (void)state;
    relock_config *cfg = sentinel_config("m");
    both_client *a = connected(entry, cfg);
    /* b shares a's loop: its operations go on while a's run */
    both_client *b = NULL;
    if (both_connect_beside(a, cfg, &b) != RELOCK_OK)
        fail_msg("connect b: %s", both_error(b));

    /* Through the master the sentinels name, contended by a client of
     * the other entry point through them too. */
    if (entry == BOTH_BLOCKING)
        assert_int_equal(server_port(a), master.port);
    lock_unlock(a, "s0", &master);
    relock_lock *l = acquire_ok(a, "s1");
    assert_int_equal(exists_on(&master, "s1"), 1);
    both_client *rival = connected(entry == BOTH_BLOCKING ? BOTH_ASYNC : BOTH_BLOCKING, cfg);
    relock_lock *rl = NULL;
    assert_int_equal(both_try_acquire(rival, "s1", 5000, &rl), RELOCK_BUSY);
    release_ok(a, l);
    assert_int_equal(exists_on(&master, "s1"), 0);
    rl = acquire_ok(rival, "s1");
    assert_int_equal(both_try_acquire(a, "s1", 5000, &l), RELOCK_BUSY);
    release_ok(rival, rl);
    both_free(rival);

    /* a holds "held" across the failover, replicated before the kill. */
    relock_lock *held = acquire_ok(a, "held");
    assert_int_equal(testsrv_await(&replica, 10000, "1", "EXISTS %s", "held"), 0);
    around ar;
    if (entry == BOTH_ASYNC)
        around_start(&ar, a, b);

    /* The master dies without a word. */
    uint64_t t0 = tu_now_ms();
    kill(master.pid, SIGKILL);
    testsrv_stop(&master);
    if (entry == BOTH_ASYNC)
        around_inflight(&ar, a);

    /* The client keeps trying as an application would, and must be back
     * on the promoted replica within 30 s without any step by hand. */
    int ok = 0, fails = 0, named = 0;
    char first[512] = "";
    relock_lock *l3 = NULL;
    while (!ok && tu_now_ms() - t0 < 30000) {
        relock_status st = both_try_acquire(a, "s3", 20000, &l3);
        if (st == RELOCK_OK) {
            ok = 1;
            break;
        }
        const char *msg = both_error(a);
        if (st != RELOCK_EIO && st != RELOCK_EAMBIGUOUS)
            fail_msg("during failover: %s: %s", relock_status_name(st), msg);
        if (!fails++)
            snprintf(first, sizeof first, "%s", msg);
        /* Once the old connection is gone, the sentinels are asked, and
         * the message says whom and for what. */
        char dead[64];
        snprintf(dead, sizeof dead, "sentinel 127.0.0.1:%d: Connection refused", dead_port);
        if (strstr(msg, "no usable master \"m\" from 4 sentinels") && strstr(msg, dead))
            named++;
        both_idle(a, 200);
    }
    print_message("failover (%s): back after %llu ms, %d failed calls (first: %s)\n",
                  both_entry_name(entry), (unsigned long long)(tu_now_ms() - t0), fails, first);
    assert_true(ok);
    /* The blocking client's first call after the kill meets the dead
     * connection and then the search; an asynchronous operation may wait
     * for the search instead of failing. */
    if (entry == BOTH_BLOCKING)
        assert_true(named > 0);
    else
        assert_true(fails == 0 || named > 0);
    assert_int_equal(exists_on(&replica, "s3"), 1);
    release_ok(a, l3);
    names_master(a, &replica);
    /* The audit walks the master in use, where the lock held across the
     * failover is. */
    scan_finds(a, "held");
    if (entry == BOTH_BLOCKING)
        assert_int_equal(server_port(a), replica.port);
    lock_unlock(a, "s3", &replica);

    /* A client made now finds the new master at once. */
    both_client *c2 = connected(entry, cfg);
    if (entry == BOTH_BLOCKING)
        assert_int_equal(server_port(c2), replica.port);
    lock_unlock(c2, "s4", &replica);
    both_free(c2);

    /* "held" was never held twice: the new master has it, another client
     * cannot take it, and once a releases it through the new master the
     * next one gets it (the asynchronous entry's waiter, after the
     * release). */
    if (entry == BOTH_ASYNC)
        around_waiter(&ar, a, b);
    assert_int_equal(exists_on(&replica, "held"), 1);
    c2 = connected(entry, cfg);
    relock_lock *hl = NULL;
    assert_int_equal(both_try_acquire(c2, "held", 5000, &hl), RELOCK_BUSY);
    both_free(c2);
    uint64_t released_at = tu_now_ms();
    release_ok(a, held);
    if (entry == BOTH_ASYNC) {
        outcome *w = await_op(a, &ar.waiter, 30000);
        if (w->st != RELOCK_OK)
            fail_msg("waiter: %s: %s", relock_status_name(w->st), w->msg);
        assert_true(w->at >= released_at);
        release_ok(b, w->l);
    } else {
        release_ok(b, acquire_ok(b, "held"));
    }

    /* The master in use is demoted (as a returning old master is): its
     * READONLY fails the call with a message about the failover, and the
     * next call asks the sentinels, who still name it: not a master. */
    assert_int_equal(testsrv_start(&other, NULL), 0);
    char port[16];
    snprintf(port, sizeof port, "%d", other.port);
    char *r = testsrv_cmd(&replica, "REPLICAOF 127.0.0.1 %s", port);
    assert_non_null(r);
    free(r);
    assert_int_equal(both_try_acquire(a, "s5", 5000, &l), RELOCK_EIO);
    const char *msg = both_error(a);
    if (!strstr(msg, "read-only replica") || !strstr(msg, "failover of \"m\" is under way"))
        fail_msg("READONLY message: %s", msg);
    /* The blocking client also gives the server's text; the asynchronous
     * one leaves relock_error.server empty here. */
    if (entry == BOTH_BLOCKING && strncmp(both_error_server(a), "READONLY", 8) != 0)
        fail_msg("the server's text: \"%s\"", both_error_server(a));
    assert_int_equal(both_try_acquire(a, "s5", 5000, &l), RELOCK_EIO);
    char want[128];
    snprintf(want, sizeof want, "master at 127.0.0.1:%d: not a master (role slave)",
             replica.port);
    if (!strstr(both_error(a), want))
        fail_msg("message lacks \"%s\": %s", want, both_error(a));
    both_free(b);
    both_free(a);
    relock_config_free(cfg);
}

/* The asynchronous client freed while its search waits on a sentinel that
 * accepted the connection and does not answer (stopped): the operation
 * waiting ends cancelled, once, and every connection and timer goes with
 * the client (both_free() checks a libuv loop is empty; the sanitizer
 * build, that nothing leaks). */
static void test_free_during_search(void **state)
{
    (void)state;
    relock_config *cfg = relock_config_new();
    char addrs[64];
    snprintf(addrs, sizeof addrs, "127.0.0.1:%d,127.0.0.1:%d", sent[0].port, sent[1].port);
    assert_int_equal(relock_config_set(cfg, "sentinel.master", "m"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "sentinel.addrs", addrs), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "connect_timeout_ms", "5000"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "command_timeout_ms", "5000"), RELOCK_OK);
    assert_int_equal(kill(sent[0].pid, SIGSTOP), 0);
    both_client *c = connected(BOTH_ASYNC, cfg);
    relock_config_free(cfg);
    outcome o = {0};
    assert_int_equal(relock_async_try_acquire(both_async(c), "afree", 5000, record, &o, NULL),
                     RELOCK_OK);
    both_idle(c, 300); /* connected to the stopped sentinel, asking */
    assert_int_equal(o.calls, 0);
    both_free_async(c);
    assert_int_equal(kill(sent[0].pid, SIGCONT), 0);
    assert_int_equal(o.calls, 1);
    assert_int_equal(o.st, RELOCK_ECANCELED);
    both_idle(c, 200);
    assert_int_equal(o.calls, 1);
    both_free(c);
}

int main(int argc, char **argv)
{
    entry = both_entry_from_args(argc, argv);
    /* Through both entry points; the failover last (the master is gone
     * after it). */
    const struct CMUnitTest shared[] = {
        cmocka_unit_test(test_no_master),
        cmocka_unit_test(test_failover),
    };
    /* The asynchronous client's alone. */
    const struct CMUnitTest async[] = {
        cmocka_unit_test(test_free_during_search),
    };
    return both_run_each(entry, shared, sizeof shared / sizeof *shared, NULL, 0, async,
                         sizeof async / sizeof *async, setup, teardown);
}
