/*
 * Quorum locks over five independent redis-servers (DESIGN §6): a
 * majority suffices, a minority fails clearly and leaves nothing behind,
 * and fencing tokens keep increasing whichever majorities are won.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "relock.h"
#include "testsrv.h"
#include "testutil.h"

#define N 5
static testsrv srv[N];

static int setup(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++)
        if (testsrv_start(&srv[i], NULL) != 0)
            return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++) {
        if (srv[i].pid)
            kill(srv[i].pid, SIGCONT);
        testsrv_stop(&srv[i]);
    }
    return 0;
}

/* A client of all N servers, from a configuration file as users write it. */
static relock_client *quorum_client(void)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/relock-quorum-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "relock = {\n  mode = \"modern\";\n  command_timeout_ms = 500;\n  servers = (");
    for (int i = 0; i < N; i++)
        fprintf(f, "%s{ host = \"127.0.0.1\"; port = %d; }", i ? ", " : "", srv[i].port);
    fprintf(f, ");\n};\n");
    fclose(f);
    relock_client *c = NULL;
    relock_status st = relock_connect_file(path, &c);
    unlink(path);
    if (st != RELOCK_OK)
        fail_msg("connect: %s", relock_client_error(c)->message);
    return c;
}

static int holders(const char *key, const char *value)
{
    int n = 0;
    for (int i = 0; i < N; i++) {
        if (!srv[i].pid)
            continue;
        char *v = testsrv_cmd(&srv[i], "GET %s", key);
        n += v && strcmp(v, value) == 0;
        free(v);
    }
    return n;
}

static void test_all_up(void **state)
{
    (void)state;
    relock_client *a = quorum_client(), *b = quorum_client();
    assert_int_equal(relock_client_mode(a), RELOCK_MODE_MODERN);
    relock_lock *l = NULL, *lb = NULL;
    assert_int_equal(relock_acquire(a, "q", 5000, 0, &l), RELOCK_OK);
    assert_int_equal(holders("q", relock_lock_value(l)), N);
    assert_true(relock_lock_fence(l) > 0);
    assert_true(relock_lock_validity_ms(l) > 4000);
    assert_int_equal(relock_try_acquire(b, "q", 5000, &lb), RELOCK_BUSY);
    assert_int_equal(relock_extend(l, 8000), RELOCK_OK);
    assert_int_equal(relock_release(l), RELOCK_OK);
    assert_int_equal(holders("q", relock_lock_value(l)), 0);
    assert_int_equal(relock_release(l), RELOCK_LOST);
    relock_lock_free(l);
    /* A waiter gets it once the holder's lease ends. */
    assert_int_equal(relock_acquire(a, "q", 5000, 0, &l), RELOCK_OK);
    relock_lock_free(l);
    assert_int_equal(relock_acquire(b, "q", 5000, 10000, &lb), RELOCK_OK); /* after expiry */
    assert_int_equal(relock_release(lb), RELOCK_OK);
    relock_lock_free(lb);
    relock_client_free(a);
    relock_client_free(b);
}

static void test_minority_down(void **state)
{
    (void)state;
    relock_client *a = quorum_client();
    /* Two of five killed: a majority of three remains. */
    testsrv_stop(&srv[3]);
    testsrv_stop(&srv[4]);
    relock_lock *l = NULL;
    assert_int_equal(relock_acquire(a, "qm", 5000, 0, &l), RELOCK_OK);
    assert_int_equal(holders("qm", relock_lock_value(l)), 3);
    assert_int_equal(relock_extend(l, 5000), RELOCK_OK);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    /* Three killed: it fails with a clear status, and leaves no partial
     * hold on the two that remain. */
    testsrv_stop(&srv[2]);
    assert_int_equal(relock_acquire(a, "qm", 5000, 0, &l), RELOCK_EIO);
    assert_null(l);
    assert_non_null(strstr(relock_client_error(a)->message, "only 2 of 5 servers answered"));
    for (int i = 0; i < 2; i++) {
        char *v = testsrv_cmd(&srv[i], "EXISTS qm");
        assert_string_equal(v, "0");
        free(v);
    }
    relock_client_free(a);
    for (int i = 2; i < N; i++)
        assert_int_equal(testsrv_start(&srv[i], NULL), 0);
}

/* Waits until no server holds a late-applied copy of name (a paused
 * server runs our queued request when it resumes; its TTL clears it). */
static void wait_clear(const char *name)
{
    for (int tries = 0; tries < 300; tries++) {
        int any = 0;
        for (int i = 0; i < N; i++) {
            char *v = testsrv_cmd(&srv[i], "EXISTS %s", name);
            any |= v && strcmp(v, "1") == 0;
            free(v);
        }
        if (!any)
            return;
        tu_sleep_ms(20);
    }
    fail_msg("%s still held somewhere", name);
}

static void test_fence_across_majorities(void **state)
{
    (void)state;
    relock_client *a = quorum_client();
    /* One server's counter far ahead of the others. */
    char *r = testsrv_cmd(&srv[0], "SET %s 1000", "{qf} relock:fence");
    free(r);
    long long last = 0;
    for (int round = 0; round < 6; round++) {
        /* Two servers paused: the round's majority is the other three. */
        int p1 = round % N, p2 = (round + 1) % N;
        kill(srv[p1].pid, SIGSTOP);
        kill(srv[p2].pid, SIGSTOP);
        relock_lock *l = NULL;
        relock_status st = relock_acquire(a, "qf", 1000, 0, &l);
        kill(srv[p1].pid, SIGCONT);
        kill(srv[p2].pid, SIGCONT);
        if (st != RELOCK_OK)
            fail_msg("round %d: %s", round, relock_client_error(a)->message);
        if (relock_lock_fence(l) <= last)
            fail_msg("round %d (servers %d and %d paused): fence %lld after %lld", round, p1, p2,
                     relock_lock_fence(l), last);
        last = relock_lock_fence(l);
        relock_release(l);
        relock_lock_free(l);
        wait_clear("qf");
    }
    assert_true(last > 1000); /* the far-ahead counter was reached */
    relock_client_free(a);
}

static void test_refuses_timestamp_modes(void **state)
{
    (void)state;
    relock_config *cfg = relock_config_new();
    char path[64];
    snprintf(path, sizeof path, "/tmp/relock-quorum-XXXXXX");
    int fd = mkstemp(path);
    dprintf(fd, "relock = { mode = \"bridge\"; servers = ( { port = %d; }, { port = %d; } ); };\n",
            srv[0].port, srv[1].port);
    close(fd);
    assert_int_equal(relock_config_load_file(cfg, path), RELOCK_OK);
    unlink(path);
    relock_client *c = NULL;
    assert_int_equal(relock_connect(cfg, &c), RELOCK_EUNSUPPORTED);
    assert_non_null(strstr(relock_client_error(c)->message, "modern"));
    relock_client_free(c);
    relock_config_free(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_up),
        cmocka_unit_test(test_minority_down),
        cmocka_unit_test(test_fence_across_majorities),
        cmocka_unit_test(test_refuses_timestamp_modes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
