/*
 * The blocking lock calls as whole operations of the operation core
 * (src/core/pollloop.c, relock__lock_op()), attacked where a blocking
 * program meets them and the asynchronous suites do not: a lock handle
 * that an acquire's operation frees when it fails, locks adopted on one
 * server and on a quorum, handles freed after failed calls, the events of
 * each call, and the cancel flag.  Against real redis-servers: one, and a
 * quorum of three.  Run it under the sanitizer build too (the handles'
 * lives are what it is about).
 */
#include <errno.h>
#include <pthread.h>
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

#include "relock.h"
#include "testsrv.h"
#include "testutil.h"

#define NQ 3

static testsrv one;    /* the one-server client's */
static testsrv qs[NQ]; /* the quorum's */

/* Events told to a client (relock_config_set_event_fn()), counted by kind. */
typedef struct counts {
    int n[8];
} counts;

static void count_event(const relock_event *ev, void *arg)
{
    counts *k = arg;
    if (ev->kind > 0 && ev->kind < 8)
        k->n[ev->kind]++;
}

/* A client of srvs[0..n) (a quorum when n > 1) in modern mode, with
 * further settings as name, value pairs (NULL-terminated, or NULL), its
 * events counted in k (NULL: none). */
static relock_client *client_of(const testsrv *srvs, int n, counts *k, const char *const *set)
{
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    char urls[NQ * 40] = "";
    for (int i = 0; i < n; i++) {
        char u[40];
        snprintf(u, sizeof u, "%sredis://127.0.0.1:%d", i ? "," : "", srvs[i].port);
        strcat(urls, u);
    }
    if (n > 1)
        assert_int_equal(relock_config_set(cfg, "servers", urls), RELOCK_OK);
    else
        assert_int_equal(relock_config_set_url(cfg, urls), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", "modern"), RELOCK_OK);
    for (int i = 0; set && set[i] && set[i + 1]; i += 2)
        if (relock_config_set(cfg, set[i], set[i + 1]) != RELOCK_OK)
            fail_msg("setting %s: %s", set[i], relock_config_error(cfg)->message);
    if (k)
        assert_int_equal(relock_config_set_event_fn(cfg, count_event, k), RELOCK_OK);
    relock_client *c = NULL;
    relock_status st = relock_connect(cfg, &c);
    relock_config_free(cfg);
    if (st != RELOCK_OK)
        fail_msg("connect: %s", c ? relock_client_error(c)->message : "out of memory");
    return c;
}

/* How many servers of srvs[0..n) hold key with value ("" : any value). */
static int holders(const testsrv *srvs, int n, const char *key, const char *value)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        char *v = testsrv_cmd(&srvs[i], "GET %s", key);
        if (v && (!*value ? strcmp(v, "(nil)") != 0 : strcmp(v, value) == 0))
            k++;
        free(v);
    }
    return k;
}

/* An acquire that fails frees the handle it made inside the operation
 * (the core's, for either entry): busy, a wait that ran out and a server
 * that cannot be reached, each followed by calls that work, on one server
 * and on a quorum.  Under the sanitizer build, any read of the freed
 * handle after the operation ended shows. */
static void failed_acquires(const testsrv *srvs, int n)
{
    const char *const fast[] = {"command_timeout_ms", "500", "connect_timeout_ms", "500", NULL};
    relock_client *h = client_of(srvs, n, NULL, fast);
    relock_client *w = client_of(srvs, n, NULL, fast);
    relock_lock *held = NULL, *l = NULL;
    assert_int_equal(relock_try_acquire(h, "fa", 30000, &held), RELOCK_OK);
    assert_int_equal(holders(srvs, n, "fa", relock_lock_value(held)), n);
    for (int round = 0; round < 3; round++) {
        assert_int_equal(relock_try_acquire(w, "fa", 30000, &l), RELOCK_BUSY);
        assert_null(l);
        assert_non_null(strstr(relock_client_error(w)->message, "lock fa is held"));
        assert_int_equal(relock_acquire(w, "fa", 30000, 150, &l), RELOCK_TIMEOUT);
        assert_null(l);
        assert_non_null(strstr(relock_client_error(w)->message, "still held after 150 ms"));
    }
    /* a free lock is won after the failures, and released */
    assert_int_equal(relock_try_acquire(w, "fa-free", 30000, &l), RELOCK_OK);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    assert_int_equal(relock_release(held), RELOCK_OK);
    relock_lock_free(held);
    assert_int_equal(holders(srvs, n, "fa", ""), 0);
    relock_client_free(h);
    relock_client_free(w);
}

static void test_failed_acquires_one(void **state)
{
    (void)state;
    failed_acquires(&one, 1);
}

static void test_failed_acquires_quorum(void **state)
{
    (void)state;
    failed_acquires(qs, NQ);
}

static int setup(void **state)
{
    (void)state;
    if (testsrv_start(&one, NULL) != 0)
        return -1;
    for (int i = 0; i < NQ; i++)
        if (testsrv_start(&qs[i], NULL) != 0)
            return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    testsrv_stop(&one);
    for (int i = 0; i < NQ; i++)
        testsrv_stop(&qs[i]);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failed_acquires_one),
        cmocka_unit_test(test_failed_acquires_quorum),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
