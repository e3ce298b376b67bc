/*
 * Redis Cluster (DESIGN §6): three masters joined by redis-cli.  A client
 * given only the first node locks names whose slots live on every node
 * (MOVED), and a held lock whose slot is moved to another node by hand
 * keeps working during the migration (ASK) and after it (MOVED), with its
 * fence counter moved along and still increasing.
 */
#include <fcntl.h>
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

#include "internal.h" /* relock__fence_key: the real key name */
#include "relock.h"
#include "testsrv.h"
#include "testutil.h"

#define N 3
static testsrv node[N];
static char ids[N][64];

static int start_node(int i)
{
    /* The cluster bus port is the data port + 10000 unless set: a free
     * ephemeral port plus 10000 may be out of range, so set it. */
    for (int attempt = 0; attempt < 3; attempt++) {
        char bus[16];
        snprintf(bus, sizeof bus, "%d", testsrv_free_port());
        const char *args[] = {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                              "--cluster-node-timeout", "2000", "--cluster-port", bus, NULL};
        if (testsrv_start(&node[i], args) == 0)
            return 0;
    }
    return -1;
}

/* Runs redis-cli --cluster create over the nodes, bounded to 60 s. */
static int create_cluster(void)
{
    char addr[N][32];
    const char *argv[16] = {"redis-cli", "--cluster", "create"};
    int n = 3;
    for (int i = 0; i < N; i++) {
        snprintf(addr[i], sizeof addr[i], "127.0.0.1:%d", node[i].port);
        argv[n++] = addr[i];
    }
    argv[n++] = "--cluster-replicas";
    argv[n++] = "0";
    argv[n++] = "--cluster-yes";
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
        }
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status = tu_wait_child(pid, 60000);
    if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "setup: redis-cli --cluster create failed (status %d)\n", status);
        return -1;
    }
    return 0;
}

static int setup(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++)
        if (start_node(i) != 0)
            return -1;
    if (create_cluster() != 0)
        return -1;
    /* Every node must see every slot served before the tests begin. */
    for (int i = 0; i < N; i++) {
        uint64_t end = tu_now_ms() + 30000;
        int ok = 0;
        while (!ok && tu_now_ms() < end) {
            char *v = testsrv_cmd(&node[i], "CLUSTER INFO");
            ok = v && strstr(v, "cluster_state:ok");
            free(v);
            if (!ok)
                tu_sleep_ms(100);
        }
        if (!ok) {
            fprintf(stderr, "setup: node %d not cluster_state:ok within 30 s\n", i);
            return -1;
        }
        char *id = testsrv_cmd(&node[i], "CLUSTER MYID");
        if (!id || strlen(id) >= sizeof ids[i]) {
            free(id);
            return -1;
        }
        snprintf(ids[i], sizeof ids[i], "%s", id);
        free(id);
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++)
        testsrv_stop(&node[i]);
    return 0;
}

static int node_of_port(int port)
{
    for (int i = 0; i < N; i++)
        if (node[i].port == port)
            return i;
    return -1;
}

/* The node serving key now: node 0 answers a read itself or says MOVED. */
static int owner(const char *key)
{
    char *v = testsrv_cmd(&node[0], "EXISTS %s", key);
    assert_non_null(v);
    int who = 0;
    if (strncmp(v, "MOVED ", 6) == 0)
        who = node_of_port(atoi(strrchr(v, ':') + 1));
    free(v);
    assert_true(who >= 0);
    return who;
}

/* A lock name whose key node want serves. */
static void name_on(int want, const char *stem, char *out, size_t len)
{
    for (int i = 0; i < 1000; i++) {
        snprintf(out, len, "%s%d", stem, i);
        if (owner(out) == want)
            return;
    }
    fail_msg("no name on node %d", want);
}

static relock_client *cluster_client(const char *mode)
{
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", node[0].port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", mode), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "command_timeout_ms", "3000"), RELOCK_OK);
    relock_client *c = NULL;
    relock_status st = relock_connect(cfg, &c);
    relock_config_free(cfg);
    if (st != RELOCK_OK)
        fail_msg("connect: %s", relock_client_error(c)->message);
    return c;
}

static void fence_key(const char *name, char *out, size_t len)
{
    assert_int_equal(relock__fence_key(name, out, len), 0);
}

/* GET key on node i, as text ("(nil)" when absent). */
static char *get_on(int i, const char *key)
{
    char *v = testsrv_cmd(&node[i], "GET %s", key);
    assert_non_null(v);
    return v;
}

/* call must succeed; else the test fails with cl's error message. */
#define CHECK(cl, call)                                                                      \
    do {                                                                                     \
        relock_status st_ = (call);                                                          \
        if (st_ != RELOCK_OK)                                                                \
            fail_msg("%s: %s: %s", #call, relock_status_name(st_),                           \
                     relock_client_error(cl)->message);                                      \
    } while (0)

/* Acquire, extend and release name, checking the keys on the node that
 * serves them; twice, so that the fence is seen to increase. */
static void lock_cycle(relock_client *c, relock_client *other, const char *name)
{
    int at = owner(name);
    char fkey[128];
    fence_key(name, fkey, sizeof fkey);
    long long last = 0;
    for (int round = 0; round < 2; round++) {
        relock_lock *l = NULL, *l2 = NULL;
        CHECK(c, relock_try_acquire(c, name, 10000, &l));
        char *v = get_on(at, name);
        assert_string_equal(v, relock_lock_value(l));
        free(v);
        v = get_on(at, fkey);
        assert_int_equal(atoll(v), relock_lock_fence(l));
        free(v);
        assert_true(relock_lock_fence(l) > last);
        last = relock_lock_fence(l);
        assert_int_equal(relock_try_acquire(other, name, 10000, &l2), RELOCK_BUSY);
        CHECK(c, relock_extend(l, 20000));
        CHECK(c, relock_release(l));
        v = get_on(at, name);
        assert_string_equal(v, "(nil)");
        free(v);
        relock_lock_free(l);
    }
}

static void locks_everywhere(const char *mode)
{
    relock_client *c = cluster_client(mode), *other = cluster_client(mode);
    char name[64];
    for (int i = 0; i < N; i++) {
        name_on(i, mode, name, sizeof name);
        lock_cycle(c, other, name);
    }
    /* A hash tag picks the slot; the fence key keeps it. */
    lock_cycle(c, other, "{orders}:nightly");

    /* A waiter on another node's lock gets it when the lease ends. */
    name_on(2, "wait", name, sizeof name);
    relock_lock *l = NULL, *l2 = NULL;
    CHECK(c, relock_try_acquire(c, name, 300, &l));
    CHECK(other, relock_acquire(other, name, 5000, 5000, &l2));
    assert_true(relock_lock_fence(l2) > relock_lock_fence(l));
    CHECK(other, relock_release(l2));
    relock_lock_free(l2);
    relock_lock_free(l);

    /* Inspection, and renewal on a connection of its own. */
    name_on(1, "keep", name, sizeof name);
    CHECK(c, relock_try_acquire(c, name, 600, &l));
    CHECK(c, relock_keep(l, NULL, NULL));
    tu_sleep_ms(1500);
    relock_inspect_info info;
    CHECK(other, relock_inspect(other, name, &info));
    /* Bridge renewals write new timestamps; modern keeps its token. */
    if (strcmp(mode, "modern") == 0)
        assert_string_equal(info.value, relock_lock_value(l));
    assert_int_equal(info.fence, relock_lock_fence(l));
    assert_true(info.pttl_ms > 0);
    CHECK(c, relock_keep_stop(l));
    CHECK(c, relock_release(l));
    relock_lock_free(l);
    relock_client_free(other);
    relock_client_free(c);
}

static void test_modern_everywhere(void **state)
{
    (void)state;
    locks_everywhere("modern");
}

static void test_bridge_everywhere(void **state)
{
    (void)state;
    locks_everywhere("bridge");
}

/* PTTL of key on node i, reading an importing slot (ASKING first). */
static long long asking_pttl(int i, const char *key)
{
    struct timeval tv = {2, 0};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", node[i].port, tv);
    assert_true(ctx && !ctx->err);
    redisReply *r = redisCommand(ctx, "ASKING");
    assert_non_null(r);
    freeReplyObject(r);
    r = redisCommand(ctx, "PTTL %s", key);
    assert_true(r && r->type == REDIS_REPLY_INTEGER);
    long long v = r->integer;
    freeReplyObject(r);
    redisFree(ctx);
    return v;
}

static void expect_ok(int i, const char *reply_of)
{
    if (!reply_of || strcmp(reply_of, "OK") != 0)
        fail_msg("node %d: %s", i, reply_of ? reply_of : "(no reply)");
}

static void test_slot_migration(void **state)
{
    (void)state;
    relock_client *c = cluster_client("modern");
    char name[64], fkey[128];
    int s = 1, t = 2, x = 0; /* source, target, the third */
    name_on(s, "mig", name, sizeof name);
    fence_key(name, fkey, sizeof fkey);
    relock_lock *l = NULL;
    CHECK(c, relock_try_acquire(c, name, 30000, &l));
    long long f1 = relock_lock_fence(l);
    char *v = testsrv_cmd(&node[0], "CLUSTER KEYSLOT %s", name);
    int slot = atoi(v);
    free(v);
    char sl[16];
    snprintf(sl, sizeof sl, "%d", slot);

    /* Start moving the slot from s to t. */
    v = testsrv_cmd(&node[t], "CLUSTER SETSLOT %s IMPORTING %s", sl, ids[s]);
    expect_ok(t, v);
    free(v);
    v = testsrv_cmd(&node[s], "CLUSTER SETSLOT %s MIGRATING %s", sl, ids[t]);
    expect_ok(s, v);
    free(v);
    /* The keys are still on s, which serves them. */
    CHECK(c, relock_extend(l, 30000));

    /* Move the lock key alone first, as a resharding tool moving keys in
     * batches may: scripts over both keys now meet TRYAGAIN, and the
     * client gives up after its bounded retries, having changed nothing. */
    char tport[16];
    snprintf(tport, sizeof tport, "%d", node[t].port);
    v = testsrv_cmd(&node[s], "MIGRATE 127.0.0.1 %s %s 0 5000 KEYS %s", tport, "", name);
    expect_ok(s, v);
    free(v);
    relock_client *c2 = cluster_client("modern");
    relock_lock *l2 = NULL;
    uint64_t t0 = tu_now_ms();
    assert_int_equal(relock_try_acquire(c2, name, 10000, &l2), RELOCK_EIO);
    const char *msg = relock_client_error(c2)->message;
    if (!strstr(msg, "still redirected after 5 redirections (last: TRYAGAIN"))
        fail_msg("split keys: %s", msg);
    print_message("TRYAGAIN: gave up after %llu ms: %s\n",
                  (unsigned long long)(tu_now_ms() - t0), msg);
    relock_client_free(c2);
    /* A one-key command is served through ASK meanwhile. */
    CHECK(c, relock_extend(l, 35000));
    /* Then the fence key. */
    v = testsrv_cmd(&node[s], "MIGRATE 127.0.0.1 %s %s 0 5000 KEYS %s", tport, "", fkey);
    expect_ok(s, v);
    free(v);
    v = testsrv_cmd(&node[t], "CLUSTER COUNTKEYSINSLOT %s", sl);
    assert_string_equal(v, "2");
    free(v);

    /* s answers ASK: the extend goes to t once, after ASKING. */
    CHECK(c, relock_extend(l, 40000));
    assert_true(asking_pttl(t, name) > 30000);
    v = testsrv_cmd(&node[t], "INFO commandstats");
    assert_non_null(strstr(v, "cmdstat_asking:calls="));
    free(v);

    /* Finish: the slot belongs to t everywhere. */
    const int order[N] = {t, s, x};
    for (int k = 0; k < N; k++) {
        int i = order[k];
        v = testsrv_cmd(&node[i], "CLUSTER SETSLOT %s NODE %s", sl, ids[t]);
        expect_ok(i, v);
        free(v);
    }
    assert_int_equal(owner(name), t);

    /* MOVED takes the client to t, where the lock still is ours. */
    CHECK(c, relock_extend(l, 30000));
    relock_server_info info;
    CHECK(c, relock_client_server(c, &info));
    assert_int_equal(info.port, node[t].port);
    CHECK(c, relock_release(l));
    relock_lock_free(l);
    v = get_on(t, name);
    assert_string_equal(v, "(nil)");
    free(v);

    /* The fence counter moved with the lock: the next token is larger. */
    CHECK(c, relock_try_acquire(c, name, 10000, &l));
    assert_true(relock_lock_fence(l) > f1);
    v = get_on(t, fkey);
    assert_int_equal(atoll(v), relock_lock_fence(l));
    free(v);
    CHECK(c, relock_release(l));
    relock_lock_free(l);
    relock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_modern_everywhere),
        cmocka_unit_test(test_bridge_everywhere),
        cmocka_unit_test(test_slot_migration),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
