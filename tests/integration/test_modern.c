/*
 * Modern mode against a real redis-server: mutual exclusion between real
 * processes, busy and lost outcomes, a SIGKILLed holder, extension, and the
 * error paths (bad names, wrong reply types, unreachable servers).
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

#include "relock.h"
#include "testclient.h"
#include "testutil.h"


static relock_client *client_modern(void)
{
    relock_client *c = tu_client(tu_srv.port, "modern", NULL);
    assert_int_equal(relock_client_mode(c), RELOCK_MODE_MODERN);
    return c;
}

static char *get(const char *key)
{
    return testsrv_cmd(&tu_srv, "GET %s", key);
}

/* Each child: n locked read-modify-write increments of counter. */
static int increments(const char *lock, const char *counter, int n)
{
    relock_client *c = client_modern();
    redisContext *rc = redisConnect("127.0.0.1", tu_srv.port);
    if (!rc || rc->err)
        return 10;
    for (int i = 0; i < n; i++) {
        relock_lock *l = NULL;
        if (relock_acquire(c, lock, 5000, 30000, &l) != RELOCK_OK)
            return 11;
        redisReply *r = redisCommand(rc, "GET %s", counter);
        long v = (r && r->type == REDIS_REPLY_STRING) ? atol(r->str) : 0;
        if (r)
            freeReplyObject(r);
        r = redisCommand(rc, "SET %s %ld", counter, v + 1);
        if (r)
            freeReplyObject(r);
        if (relock_release(l) != RELOCK_OK)
            return 12;
        relock_lock_free(l);
    }
    redisFree(rc);
    relock_client_free(c);
    return 0;
}

static void test_two_processes_exact_count(void **state)
{
    (void)state;
    enum { N = 2000 };
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        assert_true(kids[k] >= 0);
        if (kids[k] == 0)
            _exit(increments("count-lock", "count", N));
    }
    for (int k = 0; k < 2; k++) {
        int status = tu_wait_child(kids[k], 120000);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    char *v = get("count");
    assert_non_null(v);
    assert_string_equal(v, "4000");
    free(v);
}

static void test_try_acquire_busy_at_once(void **state)
{
    (void)state;
    relock_client *a = client_modern(), *b = client_modern();
    relock_lock *la = NULL, *lb = NULL;
    assert_int_equal(relock_try_acquire(a, "busy", 10000, &la), RELOCK_OK);
    assert_true(relock_lock_validity_ms(la) > 9000);
    assert_int_equal(strlen(relock_lock_value(la)), 32);
    uint64_t t0 = tu_now_ms();
    assert_int_equal(relock_try_acquire(b, "busy", 10000, &lb), RELOCK_BUSY);
    assert_null(lb);
    /* "At once": far sooner than the holder's 10 s lease. */
    assert_true(tu_now_ms() - t0 < 5000);
    assert_int_equal(relock_client_error(b)->status, RELOCK_BUSY);
    /* A bounded wait ends with TIMEOUT, not before its bound. */
    t0 = tu_now_ms();
    assert_int_equal(relock_acquire(b, "busy", 10000, 300, &lb), RELOCK_TIMEOUT);
    assert_true(tu_now_ms() - t0 >= 300);
    assert_int_equal(relock_release(la), RELOCK_OK);
    relock_lock_free(la);
    relock_client_free(a);
    relock_client_free(b);
}

static void test_release_after_takeover_is_lost(void **state)
{
    (void)state;
    relock_client *a = client_modern(), *b = client_modern();
    relock_lock *la = NULL, *lb = NULL;
    assert_int_equal(relock_acquire(a, "lost", 150, 0, &la), RELOCK_OK);
    /* b waits for the expiry and takes the lock. */
    assert_int_equal(relock_acquire(b, "lost", 10000, 5000, &lb), RELOCK_OK);
    assert_int_equal(relock_lock_validity_ms(la), 0);
    assert_int_equal(relock_release(la), RELOCK_LOST);
    assert_non_null(strstr(relock_client_error(a)->message, "taken by another value"));
    assert_int_equal(relock_extend(la, 1000), RELOCK_LOST);
    char *v = get("lost");
    assert_string_equal(v, relock_lock_value(lb));
    free(v);
    assert_int_equal(relock_release(lb), RELOCK_OK);
    /* Releasing twice is not a second success. */
    assert_int_equal(relock_release(lb), RELOCK_LOST);
    relock_lock_free(la);
    relock_lock_free(lb);
    relock_client_free(a);
    relock_client_free(b);
}

static void test_killed_holder(void **state)
{
    (void)state;
    enum { TTL = 1000 };
    tu_chan ch;
    assert_int_equal(tu_chan_open(&ch), 0);
    uint64_t t_fork = tu_now_ms();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        relock_client *c = client_modern();
        relock_lock *l = NULL;
        if (relock_acquire(c, "killed", TTL, 0, &l) != RELOCK_OK)
            _exit(1);
        tu_chan_send(&ch, relock_lock_value(l));
        for (int i = 0; i < 6000; i++)
            tu_sleep_ms(10);
        _exit(0);
    }
    char value[64];
    assert_int_equal(tu_chan_recv(&ch, value, sizeof value, 10000), 0);
    uint64_t t_held = tu_now_ms();
    kill(pid, SIGKILL);
    tu_wait_child(pid, 10000);
    tu_chan_close(&ch);

    relock_client *w = client_modern();
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(w, "killed", 5000, 10000, &l), RELOCK_OK);
    uint64_t t_got = tu_now_ms();
    /* Not before the dead holder's lease ended (it began after the fork)... */
    assert_true(t_got >= t_fork + TTL);
    /* ...and within 1 s of that end (it began before the child reported). */
    assert_true(t_got <= t_held + TTL + 1000);
    assert_string_not_equal(relock_lock_value(l), value);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(w);
}

static void test_extend_keeps_lock(void **state)
{
    (void)state;
    relock_client *a = client_modern(), *b = client_modern();
    relock_lock *la = NULL, *lb = NULL;
    assert_int_equal(relock_acquire(a, "extend", 400, 0, &la), RELOCK_OK);
    uint64_t end = tu_now_ms() + 1500;
    int extends = 0;
    while (tu_now_ms() < end) {
        tu_sleep_ms(100);
        assert_int_equal(relock_extend(la, 400), RELOCK_OK);
        extends++;
    }
    assert_true(extends >= 3);
    /* Well past the first lease it is still ours. */
    assert_int_equal(relock_try_acquire(b, "extend", 400, &lb), RELOCK_BUSY);
    char *v = get("extend");
    assert_string_equal(v, relock_lock_value(la));
    free(v);
    v = testsrv_cmd(&tu_srv, "PTTL extend");
    assert_true(atol(v) > 0 && atol(v) <= 400);
    free(v);
    assert_int_equal(relock_release(la), RELOCK_OK);
    relock_lock_free(la);
    relock_client_free(a);
    relock_client_free(b);
}

static void test_adopt_release(void **state)
{
    (void)state;
    relock_client *a = client_modern();
    relock_lock *la = NULL, *other = NULL;
    assert_int_equal(relock_acquire(a, "adopt", 10000, 0, &la), RELOCK_OK);
    /* Another value cannot release it... */
    assert_int_equal(relock_lock_adopt(a, "adopt", "0123456789abcdef0123456789abcdef", 0, 0,
                                       &other),
                     RELOCK_OK);
    assert_int_equal(relock_release(other), RELOCK_LOST);
    relock_lock_free(other);
    /* ...its own value can. */
    assert_int_equal(relock_lock_adopt(a, "adopt", relock_lock_value(la), 0, 0, &other),
                     RELOCK_OK);
    assert_int_equal(relock_release(other), RELOCK_OK);
    char *v = get("adopt");
    assert_string_equal(v, "(nil)");
    free(v);
    relock_lock_free(other);
    relock_lock_free(la);
    relock_client_free(a);
}

static void test_errors(void **state)
{
    (void)state;
    relock_client *a = client_modern();
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(a, "", 1000, 0, &l), RELOCK_EINVAL);
    assert_int_equal(relock_acquire(a, "has space", 1000, 0, &l), RELOCK_EINVAL);
    assert_non_null(strstr(relock_client_error(a)->message, "lock name"));
    assert_int_equal(relock_acquire(a, "x", -5, 0, &l), RELOCK_EINVAL);
    /* A key of the wrong type is not a lock: EFOREIGN, naming the type;
     * the server's text stays in the error's server field. */
    assert_int_equal(relock_acquire(a, "wrongtype", 1000, 0, &l), RELOCK_OK);
    free(testsrv_cmd(&tu_srv, "DEL wrongtype"));
    free(testsrv_cmd(&tu_srv, "LPUSH wrongtype a"));
    assert_int_equal(relock_release(l), RELOCK_EFOREIGN);
    assert_non_null(strstr(relock_client_error(a)->message, "holds a list, not a lock"));
    assert_null(strstr(relock_client_error(a)->message, "WRONGTYPE"));
    /* "WRONGTYPE Operation against a key holding the wrong kind of value"
     * from 2.8, "ERR Operation against ..." before. */
    assert_non_null(strstr(relock_client_error(a)->server, "wrong kind of value"));
    relock_lock_free(l);
    relock_client_free(a);

    /* Nothing listens: a clear I/O error, and the handle says where. */
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", testsrv_free_port());
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    relock_client *c = NULL;
    assert_int_equal(relock_connect(cfg, &c), RELOCK_EIO);
    assert_non_null(c);
    assert_non_null(strstr(relock_client_error(c)->message, "connect to 127.0.0.1:"));
    assert_string_equal(relock_client_error(c)->file, "pollloop.c");
    relock_client_free(c);
    relock_config_free(cfg);

    /* With a login to send (AUTH, SELECT) the same words: the connect
     * failed, not the login. */
    cfg = relock_config_new();
    snprintf(url, sizeof url, "redis://:secret@127.0.0.1:%d/3", testsrv_free_port());
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    c = NULL;
    assert_int_equal(relock_connect(cfg, &c), RELOCK_EIO);
    if (strncmp(relock_client_error(c)->message, "connect to 127.0.0.1:", 21) != 0)
        fail_msg("unreachable, with a login: \"%s\"", relock_client_error(c)->message);
    assert_string_equal(relock_client_error(c)->file, "pollloop.c");
    relock_client_free(c);
    relock_config_free(cfg);
}

static void test_auto_refuses_guessing(void **state)
{
    (void)state;
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", tu_srv.port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    relock_client *c = NULL;
    /* auto with legacy clients possible must not quietly pick modern:
     * it picks bridge, whose values legacy clients read correctly. */
    assert_int_equal(relock_connect(cfg, &c), RELOCK_OK);
    assert_int_equal(relock_client_mode(c), RELOCK_MODE_BRIDGE);
    assert_non_null(strstr(relock_client_mode_reason(c), "legacy_clients = true"));
    relock_client_free(c);
    /* Declaring that no legacy client remains makes auto pick modern. */
    assert_int_equal(relock_config_set(cfg, "migration.legacy_clients", "false"), RELOCK_OK);
    assert_int_equal(relock_connect(cfg, &c), RELOCK_OK);
    assert_int_equal(relock_client_mode(c), RELOCK_MODE_MODERN);
    assert_non_null(strstr(relock_client_mode_reason(c), "legacy_clients = false"));
    relock_server_info *info = NULL;
    assert_int_equal(relock_client_server(c, &info), RELOCK_OK);
    if (testsrv_target_version()) {
        /* A real server of a given release (RELOCK_TEST_SERVER): at least
         * 2.6.12.  (Valkey reports the Redis version it is compatible
         * with, 7.2.4, not its own.) */
        assert_true(relock_server_info_major(info) * 10000 + relock_server_info_minor(info) * 100 +
                        relock_server_info_patch(info) >=
                    20612);
    } else {
        assert_true(relock_server_info_major(info) >= 6);
    }
    assert_true(relock_server_info_caps(info) & RELOCK_CAP_SET_NX_PX);
    relock_server_info_free(info);
    relock_client_free(c);
    relock_config_free(cfg);
}

/*
 * The takeover of a legacy leftover whose reply is lost: the key is read
 * back, so the call either holds the lock (the key holds its token) or
 * says the state is ambiguous; it never reports a plain failure while its
 * token sits in the key for a whole TTL (it once did: EIO, token left).
 * Every reply may be lost (the proxy's close-before-reply), over seeds.
 */
static void test_takeover_lost_reply(void **state)
{
    (void)state;
    testsrv px;
    assert_int_equal(testsrv_start_proxy(&px, tu_srv.port, "7", NULL), 0);
    int ok = 0, ambiguous = 0, failed = 0;
    for (int seed = 1; seed <= 60; seed++) {
        free(testsrv_cmd(&tu_srv, "SET takeover-lost 1000000000")); /* dead, no TTL */
        relock_client *c = tu_client(px.port, "modern", NULL);
        free(testsrv_cmd(&px, "RELOCK-PROXY FAULT seed %d close-before-reply 0.4", seed));
        relock_lock *l = NULL;
        relock_status st = relock_acquire(c, "takeover-lost", 30000, 0, &l);
        char msg[300];
        snprintf(msg, sizeof msg, "%s", relock_client_error(c)->message);
        free(testsrv_cmd(&px, "RELOCK-PROXY FAULT off"));
        char *v = get("takeover-lost");
        int leftover = strcmp(v, "1000000000") == 0;
        if (st == RELOCK_OK) {
            assert_string_equal(v, relock_lock_value(l));
            ok++;
        } else if (st == RELOCK_EAMBIGUOUS) {
            ambiguous++;
        } else {
            if (!leftover)
                fail_msg("seed %d: status %d (%s) with \"%s\" left in the key", seed, (int)st,
                         msg, v);
            failed++;
        }
        free(v);
        relock_lock_free(l);
        relock_client_free(c);
        free(testsrv_cmd(&tu_srv, "DEL takeover-lost"));
    }
    /* The faults struck some runs and spared others. */
    assert_true(ok > 0);
    assert_true(failed + ambiguous > 0);
    testsrv_stop(&px);
}

/*
 * The wait bound holds across slow replies: no new attempt and no
 * subscription start after it has passed, so `acquire` with a 1 ms bound
 * behind a proxy that holds every reply 300 ms returns after the one
 * attempt under way (it once took 1.5 s: subscription and a second
 * attempt after the bound).  Measured from the call; generous: 2.5 delays
 * where a correct client needs one, and the old path needed three.
 */
static void test_wait_bound_slow_server(void **state)
{
    (void)state;
    testsrv px;
    assert_int_equal(testsrv_start_proxy(&px, tu_srv.port, "7", NULL), 0);
    free(testsrv_cmd(&tu_srv, "SET slow-bound someone PX 60000"));
    relock_client *c = tu_client(px.port, "modern", NULL);
    free(testsrv_cmd(&px, "RELOCK-PROXY FAULT delay-ms 300"));
    relock_lock *l = NULL;
    uint64_t t0 = tu_now_ms();
    assert_int_equal(relock_acquire(c, "slow-bound", 5000, 1, &l), RELOCK_TIMEOUT);
    uint64_t took = tu_now_ms() - t0;
    if (took >= 750)
        fail_msg("acquire with a 1 ms bound took %llu ms behind 300 ms replies",
                 (unsigned long long)took);
    free(testsrv_cmd(&px, "RELOCK-PROXY FAULT off"));
    relock_client_free(c);
    free(testsrv_cmd(&tu_srv, "DEL slow-bound"));
    testsrv_stop(&px);
}

/*
 * A server that stops answering (SIGSTOP) while a blocking call waits for
 * its reply: the call ends by command_timeout_ms with the core's message,
 * however its waits are cut into blocking-read slices, and once the server
 * runs again the next call works on a fresh connection.
 */
static void test_command_timeout_stalled_server(void **state)
{
    (void)state;
    testsrv s;
    assert_int_equal(testsrv_start(&s, NULL), 0);
    const char *set[] = {"command_timeout_ms", "300", NULL};
    relock_client *c = tu_client(s.port, "modern", set);
    relock_lock *l = NULL;
    assert_int_equal(relock_try_acquire(c, "stall-a", 5000, &l), RELOCK_OK);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    l = NULL;
    assert_int_equal(kill(s.pid, SIGSTOP), 0);
    uint64_t t0 = tu_now_ms();
    relock_status st = relock_try_acquire(c, "stall-b", 5000, &l);
    uint64_t took = tu_now_ms() - t0;
    assert_int_equal(kill(s.pid, SIGCONT), 0);
    if (st == RELOCK_OK || !strstr(relock_client_error(c)->message, "no reply within 300 ms"))
        fail_msg("a stalled server: %s: %s", relock_status_name(st),
                 relock_client_error(c)->message);
    if (took >= 10000) /* a bound on hanging, not a timing target */
        fail_msg("the call behind a stalled server took %llu ms", (unsigned long long)took);
    assert_null(l);
    assert_int_equal(relock_try_acquire(c, "stall-c", 5000, &l), RELOCK_OK);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(c);
    testsrv_stop(&s);
}

static volatile int keep_lost_called;

static void keep_on_lost(relock_lock *l, relock_status why, void *arg)
{
    (void)l;
    (void)why;
    (void)arg;
    keep_lost_called = 1;
}

/*
 * relock_keep() after an extend to a shorter lease whose reply was lost:
 * the server holds the short lease (2 s) while the lock's ttl stays 30 s,
 * so a renewal a third of the ttl later (10 s) comes after the key has
 * expired and another client may have taken it.  The keeper's first
 * renewal comes before half of the validity left has passed.  Checked
 * once the short lease is well over (3.5 s after the extend): the key
 * still holds our token and another client finds the lock busy.
 */
static void test_keep_after_failed_shorter_extend(void **state)
{
    (void)state;
    testsrv px;
    assert_int_equal(testsrv_start_proxy(&px, tu_srv.port, "7", NULL), 0);
    relock_client *a = tu_client(px.port, "modern", NULL), *b = client_modern();
    relock_lock *la = NULL, *lb = NULL;
    assert_int_equal(relock_acquire(a, "keep-short", 30000, 0, &la), RELOCK_OK);
    free(testsrv_cmd(&px, "RELOCK-PROXY FAULT at-reply 1 at-kind close-before"));
    uint64_t t0 = tu_now_ms();
    relock_status st = relock_extend(la, 2000);
    free(testsrv_cmd(&px, "RELOCK-PROXY FAULT off"));
    assert_int_equal(st, RELOCK_EAMBIGUOUS);
    char *v = testsrv_cmd(&tu_srv, "PTTL keep-short");
    assert_true(atol(v) > 0 && atol(v) <= 2000); /* the short lease is on the server */
    free(v);
    assert_true(relock_lock_validity_ms(la) <= 2000);
    keep_lost_called = 0;
    assert_int_equal(relock_keep(la, keep_on_lost, NULL), RELOCK_OK);
    while (tu_now_ms() < t0 + 3500)
        tu_sleep_ms(50);
    st = relock_try_acquire(b, "keep-short", 1000, &lb);
    v = get("keep-short");
    if (st != RELOCK_BUSY)
        fail_msg("kept after a failed extend to 2000 ms of a 30000 ms lock: another client "
                 "acquired it 3.5 s later (status %d; the keeper's on_lost %s been called, "
                 "validity %lld ms)",
                 (int)st, keep_lost_called ? "had" : "had not", relock_lock_validity_ms(la));
    assert_string_equal(v, relock_lock_value(la));
    free(v);
    assert_true(relock_lock_validity_ms(la) > 0);
    assert_int_equal(relock_keep_stop(la), RELOCK_OK);
    assert_int_equal(relock_release(la), RELOCK_OK);
    relock_lock_free(la);
    relock_lock_free(lb);
    relock_client_free(a);
    relock_client_free(b);
    testsrv_stop(&px);
}

/*
 * relock_keep() on an adopted lock, whose validity is unknown: the lease
 * left on the server may be far shorter than a third of the ttl given to
 * relock_lock_adopt() (here 2 s of a 30 s ttl), so the first renewal comes
 * at once.  Checked 3.5 s after the acquire: the key still holds the token.
 */
static void test_keep_adopted(void **state)
{
    (void)state;
    relock_client *a = client_modern(), *b = client_modern(), *o = client_modern();
    relock_lock *la = NULL, *lb = NULL, *lo = NULL;
    uint64_t t0 = tu_now_ms();
    assert_int_equal(relock_acquire(a, "keep-adopted", 2000, 0, &la), RELOCK_OK);
    assert_int_equal(relock_lock_adopt(b, "keep-adopted", relock_lock_value(la),
                                       relock_lock_fence(la), 30000, &lb),
                     RELOCK_OK);
    keep_lost_called = 0;
    assert_int_equal(relock_keep(lb, keep_on_lost, NULL), RELOCK_OK);
    while (tu_now_ms() < t0 + 3500)
        tu_sleep_ms(50);
    relock_status st = relock_try_acquire(o, "keep-adopted", 1000, &lo);
    if (st != RELOCK_BUSY)
        fail_msg("an adopted lock (2000 ms left) kept with a ttl of 30000 ms: another client "
                 "acquired it 3.5 s later (status %d; the keeper's on_lost %s been called)",
                 (int)st, keep_lost_called ? "had" : "had not");
    char *v = get("keep-adopted");
    assert_string_equal(v, relock_lock_value(la));
    free(v);
    assert_true(relock_lock_validity_ms(lb) > 0);
    assert_int_equal(relock_keep_stop(lb), RELOCK_OK);
    assert_int_equal(relock_release(lb), RELOCK_OK);
    relock_lock_free(la);
    relock_lock_free(lb);
    relock_lock_free(lo);
    relock_client_free(a);
    relock_client_free(b);
    relock_client_free(o);
}

int main(void)
{
    if (!testsrv_mode_runs("modern")) {
        testsrv_note_skip("modern mode, which needs SET NX PX (2.6.12)");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_processes_exact_count),
        cmocka_unit_test(test_try_acquire_busy_at_once),
        cmocka_unit_test(test_release_after_takeover_is_lost),
        cmocka_unit_test(test_killed_holder),
        cmocka_unit_test(test_extend_keeps_lock),
        cmocka_unit_test(test_adopt_release),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_auto_refuses_guessing),
        cmocka_unit_test(test_takeover_lost_reply),
        cmocka_unit_test(test_wait_bound_slow_server),
        cmocka_unit_test(test_command_timeout_stalled_server),
        cmocka_unit_test(test_keep_after_failed_shorter_extend),
        cmocka_unit_test(test_keep_adopted),
    };
    return cmocka_run_group_tests(tests, tu_setup_server, tu_teardown_server);
}
