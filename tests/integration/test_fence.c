/*
 * Fencing tokens (design.md §6.3): strictly increasing across holders, dead
 * holders' takeovers included, in every mode and on every server version
 * the proxy emulates; and a paused holder, resumed after its lease, holds
 * a smaller token than its successor, so a fenced resource refuses it.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "internal.h" /* relock__fence_key */
#include "relock.h"
#include "testclient.h"
#include "testutil.h"


/* Milliseconds keep the timestamp modes' dead-holder waits short. */
static relock_client *client_on(int port, const char *mode)
{
    static const char *const ms[] = {"legacy.clock_unit", "ms", NULL};
    return tu_client(port, mode, ms);
}

/* Five holders one after another, then two dead holders taken over: the
 * fence grows strictly every time. */
static void strictly_increasing(int port, const char *mode, const char *name)
{
    relock_client *a = client_on(port, mode), *b = client_on(port, mode);
    long long last = 0;
    for (int i = 0; i < 5; i++) {
        relock_lock *l = NULL;
        assert_int_equal(relock_acquire(i % 2 ? a : b, name, 5000, 0, &l), RELOCK_OK);
        if (relock_lock_fence(l) <= last)
            fail_msg("%s: fence %lld after %lld", mode, relock_lock_fence(l), last);
        last = relock_lock_fence(l);
        assert_int_equal(relock_release(l), RELOCK_OK);
        relock_lock_free(l);
    }
    for (int i = 0; i < 2; i++) {
        relock_lock *dead = NULL, *l = NULL;
        assert_int_equal(relock_acquire(a, name, 150, 0, &dead), RELOCK_OK);
        assert_true(relock_lock_fence(dead) > last);
        /* never released: b takes it over once it has expired */
        assert_int_equal(relock_acquire(b, name, 5000, 5000, &l), RELOCK_OK);
        if (relock_lock_fence(l) <= relock_lock_fence(dead))
            fail_msg("%s: takeover fence %lld after %lld", mode, relock_lock_fence(l),
                     relock_lock_fence(dead));
        last = relock_lock_fence(l);
        assert_int_equal(relock_release(l), RELOCK_OK);
        relock_lock_free(dead);
        relock_lock_free(l);
    }
    relock_client_free(a);
    relock_client_free(b);
}

static void test_increasing_every_mode(void **state)
{
    (void)state;
    /* With a real old server (RELOCK_TEST_SERVER), the modes it has. */
    if (testsrv_mode_runs("modern"))
        strictly_increasing(tu_srv.port, "modern", "f-modern");
    if (testsrv_mode_runs("bridge"))
        strictly_increasing(tu_srv.port, "bridge", "f-bridge");
    strictly_increasing(tu_srv.port, "legacy", "f-legacy");
}

static void test_increasing_every_personality(void **state)
{
    (void)state;
    static const char *const personalities[] = {"2.0", "2.2", "2.4", "2.6.0", "2.6.11", "7"};
    for (size_t i = 0; i < sizeof personalities / sizeof personalities[0]; i++) {
        testsrv px;
        if (!testsrv_personality_runs(personalities[i]))
            continue;
        assert_int_equal(testsrv_start_proxy(&px, tu_srv.port, personalities[i], NULL), 0);
        free(testsrv_cmd(&px, "RELOCK-PROXY RESET"));
        char name[64];
        snprintf(name, sizeof name, "fp-legacy-%s", personalities[i]);
        strictly_increasing(px.port, "legacy", name);
        if (strcmp(personalities[i], "2.6.0") >= 0) { /* EVAL: bridge works there */
            snprintf(name, sizeof name, "fp-bridge-%s", personalities[i]);
            strictly_increasing(px.port, "bridge", name);
        }
        char *refused = testsrv_cmd(&px, "RELOCK-PROXY REFUSED");
        assert_string_equal(refused, "0");
        free(refused);
        testsrv_stop(&px);
    }
}

/*
 * The fenced resource: accepts a write only with a token at least as large
 * as every token it has seen (Kleppmann's storage check), atomically.
 */
static const char resource_script[] =
    "local seen = tonumber(redis.call('get', KEYS[1]) or '0')\n"
    "if tonumber(ARGV[1]) < seen then return 0 end\n"
    "redis.call('set', KEYS[1], ARGV[1])\n"
    "redis.call('set', KEYS[2], ARGV[2])\n"
    "return 1\n";

/* Before 2.6 (a real old server) there is no EVAL: the same check in two
 * steps, enough here, where one client writes at a time. */
static int resource_write_old(redisContext *rc, long long fence, const char *data)
{
    redisReply *r = redisCommand(rc, "GET resource:fence");
    if (!r)
        return -1;
    long long seen = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    freeReplyObject(r);
    if (fence < seen)
        return 0;
    r = redisCommand(rc, "MSET resource:fence %lld resource:data %s", fence, data);
    int ok = r && r->type == REDIS_REPLY_STATUS ? 1 : -1;
    if (r)
        freeReplyObject(r);
    return ok;
}

static int resource_write(long long fence, const char *data)
{
    redisContext *rc = redisConnect("127.0.0.1", tu_srv.port);
    if (!rc || rc->err)
        return -1;
    if (!testsrv_target_at_least(2, 6, 0)) {
        int ok = resource_write_old(rc, fence, data);
        redisFree(rc);
        return ok;
    }
    redisReply *r = redisCommand(rc, "EVAL %s 2 resource:fence resource:data %lld %s",
                                 resource_script, fence, data);
    int ok = r && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
    if (r)
        freeReplyObject(r);
    redisFree(rc);
    return ok;
}

static void paused_holder(const char *mode)
{
    tu_chan up, down;
    assert_int_equal(tu_chan_open(&up), 0);
    assert_int_equal(tu_chan_open(&down), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        relock_client *c = client_on(tu_srv.port, mode);
        relock_lock *l = NULL;
        if (relock_acquire(c, "paused", 300, 0, &l) != RELOCK_OK)
            _exit(1);
        char line[64];
        snprintf(line, sizeof line, "%lld", relock_lock_fence(l));
        tu_chan_send(&up, line);
        /* Paused here by SIGSTOP; told to go on after SIGCONT. */
        if (tu_chan_recv(&down, line, sizeof line, 30000) != 0)
            _exit(2);
        int wrote = resource_write(relock_lock_fence(l), "stale");
        relock_status rel = relock_release(l);
        snprintf(line, sizeof line, "%d %d", wrote, (int)rel);
        tu_chan_send(&up, line);
        _exit(0);
    }
    char line[64];
    assert_int_equal(tu_chan_recv(&up, line, sizeof line, 10000), 0);
    long long old_fence = atoll(line);
    kill(pid, SIGSTOP);
    relock_client *n = client_on(tu_srv.port, mode);
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(n, "paused", 5000, 10000, &l), RELOCK_OK);
    assert_true(relock_lock_fence(l) > old_fence);
    assert_int_equal(resource_write(relock_lock_fence(l), "fresh"), 1);
    kill(pid, SIGCONT);
    tu_chan_send(&down, "go");
    assert_int_equal(tu_chan_recv(&up, line, sizeof line, 10000), 0);
    int wrote = -1, rel = -1;
    assert_int_equal(sscanf(line, "%d %d", &wrote, &rel), 2);
    assert_int_equal(wrote, 0);          /* the resource refused the stale token */
    assert_int_equal(rel, RELOCK_LOST);  /* and the old holder learns it lost */
    char *data = testsrv_cmd(&tu_srv, "GET resource:data");
    assert_string_equal(data, "fresh");
    free(data);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(n);
    tu_wait_child(pid, 10000);
    tu_chan_close(&up);
    tu_chan_close(&down);
    free(testsrv_cmd(&tu_srv, "DEL resource:fence resource:data"));
}

static void test_paused_holder_refused(void **state)
{
    (void)state;
    if (testsrv_mode_runs("modern"))
        paused_holder("modern");
    if (testsrv_mode_runs("bridge"))
        paused_holder("bridge");
    paused_holder("legacy");
}

/*
 * "a" and "{a}" are distinct locks with distinct fence counters (they
 * once shared "{a} relock:fence": releasing "a" with its fence after "{a}"
 * was acquired reported the lock lost while it was held).  And the counter
 * of "{a}" starts above the one it shared before, so no token handed out
 * under the old name is handed out again (decision 82).
 */
static void whole_tag_names(int port, const char *mode, const char *tag)
{
    relock_client *c = client_on(port, mode);
    char plain[64], braced[64], seeded[64], old_counter[96];
    snprintf(plain, sizeof plain, "wt-%s", tag);
    snprintf(braced, sizeof braced, "{wt-%s}", tag);
    relock_lock *a = NULL, *b = NULL;
    assert_int_equal(relock_acquire(c, plain, 5000, 0, &a), RELOCK_OK);
    assert_int_equal(relock_acquire(c, braced, 5000, 0, &b), RELOCK_OK);
    relock_lock *again = NULL; /* "a" is still held */
    assert_int_equal(relock_acquire(c, plain, 5000, 0, &again), RELOCK_BUSY);
    relock_status st = relock_release(a);
    if (st != RELOCK_OK)
        fail_msg("%s/%s: release of %s after %s was acquired: %s", mode, tag, plain, braced,
                 relock_client_error(c)->message);
    assert_int_equal(relock_release(b), RELOCK_OK);
    relock_lock_free(a);
    relock_lock_free(b);

    /* A counter left under the old name by an earlier version. */
    snprintf(seeded, sizeof seeded, "{ws-%s}", tag);
    snprintf(old_counter, sizeof old_counter, "{ws-%s} relock:fence", tag);
    free(testsrv_cmd_port(port, "SET %s 1000", old_counter));
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(c, seeded, 5000, 0, &l), RELOCK_OK);
    if (relock_lock_fence(l) <= 1000)
        fail_msg("%s/%s: fence %lld for %s after the old counter's 1000", mode, tag,
                 relock_lock_fence(l), seeded);
    long long first = relock_lock_fence(l);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    /* A later, larger value under the old name still raises it. */
    free(testsrv_cmd_port(port, "SET %s 5000", old_counter));
    assert_int_equal(relock_acquire(c, seeded, 5000, 0, &l), RELOCK_OK);
    assert_true(relock_lock_fence(l) > first);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(c);
}

static void test_whole_tag_names(void **state)
{
    (void)state;
    if (testsrv_mode_runs("modern"))
        whole_tag_names(tu_srv.port, "modern", "modern");
    if (testsrv_mode_runs("bridge"))
        whole_tag_names(tu_srv.port, "bridge", "bridge");
    whole_tag_names(tu_srv.port, "legacy", "legacy");
    static const char *const personalities[] = {"2.0", "2.2", "2.6.0"};
    for (size_t i = 0; i < sizeof personalities / sizeof personalities[0]; i++) {
        testsrv px;
        if (!testsrv_personality_runs(personalities[i]))
            continue;
        assert_int_equal(testsrv_start_proxy(&px, tu_srv.port, personalities[i], NULL), 0);
        char tag[32];
        snprintf(tag, sizeof tag, "legacy-%s", personalities[i]);
        whole_tag_names(px.port, "legacy", tag);
        testsrv_stop(&px);
    }
}

/*
 * The carry to a whole-tag key's counter (decision 82) after the client's
 * connection was closed by a failure: the carry must choose its way by the
 * server's capabilities, not by those of no connection (which read as
 * "before 2.2": create the counter if absent, never raise an existing
 * one), or an old-name counter that moved since is not carried and a
 * token handed out under the old name is undercut.
 */
static void carry_after_closed(const char *mode)
{
    testsrv px;
    assert_int_equal(testsrv_start_proxy(&px, tu_srv.port, "7", NULL), 0);
    relock_client *c = client_on(px.port, mode);
    char name[64], old_counter[96];
    snprintf(name, sizeof name, "{wc-%s}", mode);
    snprintf(old_counter, sizeof old_counter, "{wc-%s} relock:fence", mode);
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(c, name, 5000, 0, &l), RELOCK_OK);
    assert_true(relock_lock_fence(l) < 1000);
    /* An earlier version, still running, hands out 1000 under the old name. */
    free(testsrv_cmd_port(tu_srv.port, "SET %s 1000", old_counter));
    /* The release's reply is lost: the client's connection is closed. */
    free(testsrv_cmd_port(px.port, "RELOCK-PROXY FAULT at-reply 1 at-kind close-before"));
    relock_status st = relock_release(l);
    free(testsrv_cmd_port(px.port, "RELOCK-PROXY FAULT off"));
    assert_true(st == RELOCK_EAMBIGUOUS || st == RELOCK_EIO);
    relock_lock_free(l);
    /* Whatever the release did, the key goes; then the client acquires again. */
    free(testsrv_cmd_port(tu_srv.port, "DEL %s", name));
    l = NULL;
    assert_int_equal(relock_acquire(c, name, 5000, 0, &l), RELOCK_OK);
    if (relock_lock_fence(l) <= 1000)
        fail_msg("%s: fence %lld for %s after the old counter's 1000 (carried on a closed "
                 "connection)",
                 mode, relock_lock_fence(l), name);
    relock_lock_free(l);
    relock_client_free(c);
    testsrv_stop(&px);
}

static void test_carry_after_closed(void **state)
{
    (void)state;
    if (!testsrv_personality_runs("7"))
        return;
    if (testsrv_mode_runs("modern"))
        carry_after_closed("modern");
    carry_after_closed("legacy");
}

/* The fence counter of lock name on the server at port (key_prefix ""). */
static long long counter_of(int port, const char *name)
{
    char fkey[RELOCK__KEY_MAX];
    assert_int_equal(relock__fence_key(name, fkey, sizeof fkey), 0);
    char *v = testsrv_cmd_port(port, "GET %s", fkey);
    assert_non_null(v);
    long long n = strcmp(v, "(nil)") == 0 ? 0 : atoll(v);
    free(v);
    return n;
}

/*
 * A legacy-mode waiter polls every few milliseconds (docs/legacy.md, the
 * expiry rule).  On 2.0, where the increment rides in a MULTI with the
 * SETNX, every poll used to move the fence counter: about 150 moves while
 * waiting 600 ms.  Now a waiter reads before it writes: the counter moves
 * at most a few times while one waiter waits for a live holder, and for a
 * dead one it then takes over, the fence still above the holder's.
 */
static void waiter_fence_moves(int port, const char *tag)
{
    char name[64];
    snprintf(name, sizeof name, "fw-%s", tag);
    relock_client *h = client_on(port, "legacy"), *w = client_on(port, "legacy");
    relock_lock *held = NULL, *l = NULL;
    assert_int_equal(relock_acquire(h, name, 10000, 0, &held), RELOCK_OK);
    long long f0 = counter_of(port, name);
    assert_int_equal(f0, relock_lock_fence(held));
    uint64_t t0 = tu_now_ms();
    assert_int_equal(relock_acquire(w, name, 5000, 600, &l), RELOCK_TIMEOUT);
    assert_true(tu_now_ms() - t0 >= 600);
    long long f1 = counter_of(port, name);
    if (f1 - f0 > 2)
        fail_msg("%s: the fence moved %lld times while one waiter waited 600 ms", tag, f1 - f0);
    assert_int_equal(relock_release(held), RELOCK_OK);
    relock_lock_free(held);

    /* A holder that dies: the waiter waits out its 400 ms and takes over. */
    assert_int_equal(relock_acquire(h, name, 400, 0, &held), RELOCK_OK);
    long long dead = relock_lock_fence(held);
    relock_lock_free(held); /* never released */
    assert_int_equal(relock_acquire(w, name, 5000, 5000, &l), RELOCK_OK);
    if (relock_lock_fence(l) <= dead)
        fail_msg("%s: takeover fence %lld after %lld", tag, relock_lock_fence(l), dead);
    long long f2 = counter_of(port, name);
    assert_int_equal(f2, relock_lock_fence(l));
    if (f2 - dead > 3)
        fail_msg("%s: the fence moved %lld times while one waiter waited for a dead holder",
                 tag, f2 - dead);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(h);
    relock_client_free(w);
}

static void test_waiter_fence_moves(void **state)
{
    (void)state;
    /* The targeted server itself (a real 2.0.5 with RELOCK_TEST_SERVER),
     * then through the proxy's personalities. */
    waiter_fence_moves(tu_srv.port, "target");
    static const char *const personalities[] = {"2.0", "2.2", "2.6.0", "7"};
    for (size_t i = 0; i < sizeof personalities / sizeof personalities[0]; i++) {
        testsrv px;
        if (!testsrv_personality_runs(personalities[i]))
            continue;
        assert_int_equal(testsrv_start_proxy(&px, tu_srv.port, personalities[i], NULL), 0);
        waiter_fence_moves(px.port, personalities[i]);
        testsrv_stop(&px);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_increasing_every_mode),
        cmocka_unit_test(test_increasing_every_personality),
        cmocka_unit_test(test_paused_holder_refused),
        cmocka_unit_test(test_whole_tag_names),
        cmocka_unit_test(test_carry_after_closed),
        cmocka_unit_test(test_waiter_fence_moves),
    };
    return cmocka_run_group_tests(tests, tu_setup_server, tu_teardown_server);
}
