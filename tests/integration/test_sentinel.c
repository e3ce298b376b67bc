/*
 * Sentinel (design.md §9.2): one master, one replica and three redis-sentinel
 * processes.  A client finds the master by name; when the master is
 * SIGKILLed the sentinels promote the replica and the client, with no step
 * by hand, goes on locking there.  A demoted master's READONLY makes the
 * client ask the sentinels again.
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
#include "testsentinel.h"
#include "testsrv.h"
#include "testutil.h"

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

/* A configuration naming master "m" (or name) and the sentinels, the
 * first of which is down. */
static relock_config *sentinel_config(const char *name)
{
    return testsentinel_config(sent, dead_port, name);
}

static int server_port(relock_client *c)
{
    relock_server_info *info = NULL;
    if (relock_client_server(c, &info) != RELOCK_OK)
        return -1;
    int port = relock_server_info_port(info);
    relock_server_info_free(info);
    return port;
}

static void lock_unlock(relock_client *c, const char *name)
{
    relock_lock *l = NULL;
    relock_status st = relock_try_acquire(c, name, 5000, &l);
    if (st != RELOCK_OK)
        fail_msg("acquire %s: %s: %s", name, relock_status_name(st),
                 relock_client_error(c)->message);
    assert_true(relock_lock_fence(l) > 0);
    assert_int_equal(relock_extend(l, 5000), RELOCK_OK);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
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
    relock_client *c = NULL;
    assert_int_equal(relock_connect(cfg, &c), RELOCK_EIO);
    snprintf(want, sizeof want,
             "no usable master \"m\" from 2 sentinels: sentinel 127.0.0.1:%d: Connection "
             "refused; sentinel 127.0.0.1:%d: Connection refused",
             dead_port, dead2);
    assert_string_equal(relock_client_error(c)->message, want);
    relock_client_free(c);
    relock_config_free(cfg);

    cfg = sentinel_config("nosuch");
    assert_int_equal(relock_connect(cfg, &c), RELOCK_EIO);
    snprintf(want, sizeof want, "sentinel 127.0.0.1:%d does not know master \"nosuch\"",
             sent[2].port);
    if (!strstr(relock_client_error(c)->message, want))
        fail_msg("message lacks \"%s\": %s", want, relock_client_error(c)->message);
    relock_client_free(c);
    relock_config_free(cfg);
}

static void test_failover(void **state)
{
    (void)state;
    relock_config *cfg = sentinel_config("m");
    relock_client *c = NULL;
    relock_status st = relock_connect(cfg, &c);
    if (st != RELOCK_OK)
        fail_msg("connect: %s", relock_client_error(c)->message);
    assert_int_equal(server_port(c), master.port);
    lock_unlock(c, "s1");

    /* The master dies without a word. */
    uint64_t t0 = tu_now_ms();
    kill(master.pid, SIGKILL);
    testsrv_stop(&master);

    /* The client keeps trying as an application would, and must be back
     * on the promoted replica within 30 s without any step by hand. */
    int ok = 0, fails = 0, named = 0;
    char first[512] = "";
    while (!ok && tu_now_ms() - t0 < 30000) {
        relock_lock *l = NULL;
        st = relock_try_acquire(c, "s2", 5000, &l);
        if (st == RELOCK_OK) {
            assert_int_equal(relock_release(l), RELOCK_OK);
            relock_lock_free(l);
            ok = 1;
            break;
        }
        const char *msg = relock_client_error(c)->message;
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
        tu_sleep_ms(200);
    }
    uint64_t took = tu_now_ms() - t0;
    print_message("failover: back after %llu ms, %d failed calls (first: %s)\n",
                  (unsigned long long)took, fails, first);
    assert_true(ok);
    assert_true(named > 0);
    assert_int_equal(server_port(c), replica.port);
    lock_unlock(c, "s3");

    /* A client connecting now finds the new master at once. */
    relock_client *c2 = NULL;
    assert_int_equal(relock_connect(cfg, &c2), RELOCK_OK);
    assert_int_equal(server_port(c2), replica.port);
    lock_unlock(c2, "s4");

    /* The master we use is demoted (as a returning old master is): its
     * READONLY closes the connection with a message about the failover, and
     * the next call asks the sentinels, who still name it: not a master. */
    assert_int_equal(testsrv_start(&other, NULL), 0);
    char port[16];
    snprintf(port, sizeof port, "%d", other.port);
    char *r = testsrv_cmd(&replica, "REPLICAOF 127.0.0.1 %s", port);
    assert_non_null(r);
    free(r);
    relock_lock *l = NULL;
    assert_int_equal(relock_try_acquire(c, "s5", 5000, &l), RELOCK_EIO);
    const char *msg = relock_client_error(c)->message;
    if (!strstr(msg, "read-only replica") || !strstr(msg, "failover of \"m\" is under way"))
        fail_msg("READONLY message: %s", msg);
    assert_int_equal(strncmp(relock_client_error(c)->server, "READONLY", 8), 0);
    assert_int_equal(relock_try_acquire(c, "s5", 5000, &l), RELOCK_EIO);
    char want[128];
    snprintf(want, sizeof want, "master at 127.0.0.1:%d: not a master (role slave)",
             replica.port);
    if (!strstr(relock_client_error(c)->message, want))
        fail_msg("message lacks \"%s\": %s", want, relock_client_error(c)->message);
    relock_client_free(c2);
    relock_client_free(c);
    relock_config_free(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_master),
        cmocka_unit_test(test_failover),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
