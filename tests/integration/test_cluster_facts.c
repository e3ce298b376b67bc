/*
 * Server facts per connection over a Redis Cluster whose nodes are not
 * alike, as during a rolling upgrade: three masters, each behind the
 * compat proxy with a personality of its own and announcing the proxy's
 * port (cluster-announce-port), so that every client connection to a node
 * goes through its proxy:
 *
 *   node 0  valkey-9.0: native DELIFEQ and SET ... IFEQ;
 *   node 1  personality 7: no natives, Lua;
 *   node 2  personality 7 without Lua: neither (WATCH/MULTI).
 *
 * With fencing off, a modern release is DELIFEQ, a script or a WATCH
 * transaction, and an extend SET IFEQ, a script or a transaction, each
 * chosen from the facts the probe learned of the server.  Both clients
 * (blocking, and asynchronous on libevent) lock names on every node in
 * turn, twice over (so that every node was probed before another node's
 * operation), and each node's proxy must have seen that node's own paths
 * only: a client that kept one set of facts for all its connections
 * sends one node's commands to another.
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

#include "relock_async_libevent.h"
#include "async_loop.h"
#include "testcluster.h"
#include "testsrv.h"

#define N 3
static testsrv node[N], px[N];
static int bus[N];

static const char *const personality[N] = {"valkey-9.0", "7", "7"};

/* A MOVED reply names a node's proxy. */
static const testcluster_view cluster = {node, px, N};

static int setup(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++)
        if (testcluster_node(&node[i], &bus[i]) != 0)
            return -1;
    if (testcluster_create(node, N) != 0)
        return -1;
    const char *const nolua[] = {"--no-lua", NULL};
    for (int i = 0; i < N; i++) {
        if (testcluster_await(&node[i], "CLUSTER", "INFO", "cluster_state:ok") != 0)
            return -1;
        if (testsrv_start_proxy(&px[i], node[i].port, personality[i], i == 2 ? nolua : NULL) !=
            0)
            return -1;
        char *ok = testsrv_cmd(&node[i], "CONFIG SET cluster-announce-port %d", px[i].port);
        int set = ok && strcmp(ok, "OK") == 0;
        free(ok);
        if (!set)
            return -1;
    }
    /* Every node tells every proxy's port (the gossip carried them). */
    for (int i = 0; i < N; i++)
        for (int k = 0; k < N; k++) {
            char want[32];
            snprintf(want, sizeof want, "127.0.0.1:%d@", px[k].port);
            if (testcluster_await(&node[i], "CLUSTER", "NODES", want) != 0)
                return -1;
        }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++) {
        testsrv_stop(&px[i]);
        testsrv_stop(&node[i]);
    }
    return 0;
}

static relock_config *config(void)
{
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", px[0].port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", "modern"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "fencing", "false"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "command_timeout_ms", "3000"), RELOCK_OK);
    return cfg;
}

static void reset_counts(void)
{
    for (int i = 0; i < N; i++) {
        char *ok = testsrv_cmd(&px[i], "RELOCK-PROXY RESET");
        assert_non_null(ok);
        free(ok);
    }
}

/* Whether node i's proxy received command name since the reset. */
static int seen(int i, const char *name)
{
    char *list = testsrv_cmd(&px[i], "RELOCK-PROXY COMMANDS-LIST");
    assert_non_null(list);
    char want[40];
    snprintf(want, sizeof want, "%s ", name);
    int found = 0;
    for (const char *p = list; (p = strstr(p, want)) != NULL; p++)
        if (p == list || p[-1] == ' ') {
            found = 1;
            break;
        }
    free(list);
    return found;
}

/* Each node's proxy saw its own paths, and no other node's. */
static void expect_paths(const char *who)
{
    char *refused = testsrv_cmd(&px[2], "RELOCK-PROXY REFUSED-LIST");
    assert_non_null(refused);
    struct {
        int node;
        const char *cmd;
        int want;
    } checks[] = {
        {0, "DELIFEQ", 1}, {0, "EVALSHA", 0}, {0, "EVAL", 0}, {0, "WATCH", 0},
        {1, "DELIFEQ", 0}, {1, "EVALSHA", 1}, {1, "WATCH", 0},
        {2, "DELIFEQ", 0}, {2, "EVALSHA", 0}, {2, "EVAL", 0}, {2, "WATCH", 1},
    };
    char bad[512] = "";
    for (size_t k = 0; k < sizeof checks / sizeof checks[0]; k++)
        if (seen(checks[k].node, checks[k].cmd) != checks[k].want) {
            size_t at = strlen(bad);
            snprintf(bad + at, sizeof bad - at, "%snode %d (%s) %s %s", at ? "; " : "",
                     checks[k].node, personality[checks[k].node],
                     checks[k].want ? "never got" : "got", checks[k].cmd);
        }
    if (bad[0])
        fail_msg("%s: %s (refused on node 2: %s)", who, bad, refused);
    free(refused);
}

static void test_blocking(void **state)
{
    (void)state;
    relock_config *cfg = config();
    relock_client *c = NULL;
    if (relock_connect(cfg, &c) != RELOCK_OK)
        fail_msg("connect: %s", relock_client_error(c)->message);
    relock_config_free(cfg);
    char names[N][64];
    for (int i = 0; i < N; i++)
        testcluster_name_on(&cluster, i, "bf", names[i], sizeof names[i]);
    /* every node's connection opened (and probed) once */
    for (int i = 0; i < N; i++) {
        relock_lock *l = NULL;
        if (relock_acquire(c, names[i], 30000, 0, &l) != RELOCK_OK)
            fail_msg("acquire on node %d: %s", i, relock_client_error(c)->message);
        relock_release(l);
        relock_lock_free(l);
    }
    reset_counts();
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < N; i++) {
            relock_lock *l = NULL;
            relock_status st = relock_acquire(c, names[i], 30000, 0, &l);
            if (st == RELOCK_OK)
                st = relock_extend(l, 30000);
            if (st == RELOCK_OK)
                st = relock_release(l);
            if (st != RELOCK_OK)
                fail_msg("round %d, node %d (%s): %s", round, i, personality[i],
                         relock_client_error(c)->message);
            relock_lock_free(l);
        }
    expect_paths("blocking client");
    relock_client_free(c);
}

static void test_async(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_config *cfg = config();
    relock_async *a = NULL;
    relock_status st = relock_async_new(cfg, &lp, &a);
    relock_config_free(cfg);
    if (st != RELOCK_OK)
        fail_msg("relock_async_new: %s", relock_async_error(a)->message);
    char names[N][64];
    for (int i = 0; i < N; i++)
        testcluster_name_on(&cluster, i, "af", names[i], sizeof names[i]);
    for (int i = 0; i < N; i++) {
        outcome o = {0};
        assert_int_equal(relock_async_try_acquire(a, names[i], 30000, record, &o, NULL),
                         RELOCK_OK);
        finish(&o, 20000);
        if (o.st != RELOCK_OK)
            fail_msg("acquire on node %d: %s", i, o.msg);
        outcome r = {0};
        assert_int_equal(relock_async_release(o.l, record, &r), RELOCK_OK);
        finish(&r, 20000);
        relock_lock_free(o.l);
    }
    reset_counts();
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < N; i++) {
            static const char *const what[] = {"acquire", "extend", "release"};
            outcome o[3];
            memset(o, 0, sizeof o);
            assert_int_equal(relock_async_try_acquire(a, names[i], 30000, record, &o[0], NULL),
                             RELOCK_OK);
            finish(&o[0], 20000);
            int step = 0;
            if (o[0].st == RELOCK_OK) {
                step = 1;
                assert_int_equal(relock_async_extend(o[0].l, 30000, record, &o[1]), RELOCK_OK);
                finish(&o[1], 20000);
                if (o[1].st == RELOCK_OK) {
                    step = 2;
                    assert_int_equal(relock_async_release(o[0].l, record, &o[2]), RELOCK_OK);
                    finish(&o[2], 20000);
                }
            }
            if (o[step].st != RELOCK_OK)
                fail_msg("round %d, node %d (%s): %s: %s", round, i, personality[i], what[step],
                         o[step].msg);
            relock_lock_free(o[0].l);
        }
    expect_paths("asynchronous client");
    relock_async_free(a);
    loop_fini();
}

int main(void)
{
    signal(SIGPIPE, SIG_DFL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocking),
        cmocka_unit_test(test_async),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
