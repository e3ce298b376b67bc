/*
 * Redis Cluster (design.md §9.3): three masters joined by redis-cli, each with a
 * replica.  A client given only the first node locks names whose slots
 * live on every node (MOVED), and with its slot map goes straight to each
 * master without a further MOVED or connection; a waiter on another
 * node's lock is woken by the release notice; a held lock whose slot is
 * moved to another node by hand keeps working during the migration (ASK)
 * and after it (MOVED), with its fence counter moved along and still
 * increasing; and when a master is killed, its replica takes over and a
 * replicated lock is still held there (docs/safety.md).
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "internal.h" /* relock__fence_key: the real key name */
#include "relock.h"
#ifdef TEST_BOTH
#include "both.h"
#endif
#include "testcluster.h"
#include "testsrv.h"
#include "testutil.h"

#define N 3 /* masters: node[0..2]; node[N + i] is node[i]'s replica */
static testsrv node[2 * N];
static int bus[2 * N];
static char ids[2 * N][64];

/* node[N + i] joins the cluster as node[i]'s replica. */
static int start_node(int i)
{
    return testcluster_node(&node[i], &bus[i]);
}

static int await_reply(int i, const char *cmd, const char *arg, const char *want)
{
    return testcluster_await(&node[i], cmd, arg, want);
}

static int add_replica(int i)
{
    int r = N + i;
    char *v = testsrv_cmd(&node[r], "CLUSTER MEET 127.0.0.1 %d %d", node[0].port, bus[0]);
    int ok = v && strcmp(v, "OK") == 0;
    free(v);
    if (!ok)
        return -1;
    /* REPLICATE needs the master known to the new node first. */
    if (await_reply(r, "CLUSTER", "NODES", ids[i]) != 0)
        return -1;
    uint64_t end = tu_now_ms() + 30000;
    while (tu_now_ms() < end) {
        v = testsrv_cmd(&node[r], "CLUSTER REPLICATE %s", ids[i]);
        ok = v && strcmp(v, "OK") == 0;
        free(v);
        if (ok)
            return await_reply(r, "INFO", "replication", "master_link_status:up");
        tu_sleep_ms(100);
    }
    return -1;
}

static int setup(void **state)
{
    (void)state;
    for (int i = 0; i < 2 * N; i++)
        if (start_node(i) != 0)
            return -1;
    if (testcluster_create(node, N) != 0)
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
    for (int r = N; r < 2 * N; r++) {
        char *id = testsrv_cmd(&node[r], "CLUSTER MYID");
        if (!id || strlen(id) >= sizeof ids[r]) {
            free(id);
            return -1;
        }
        snprintf(ids[r], sizeof ids[r], "%s", id);
        free(id);
    }
    for (int i = 0; i < N; i++)
        if (add_replica(i) != 0) {
            fprintf(stderr, "setup: node %d did not become node %d's replica\n", N + i, i);
            return -1;
        }
    for (int i = 0; i < 2 * N; i++)
        if (await_reply(i, "CLUSTER", "INFO", "cluster_state:ok") != 0)
            return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < 2 * N; i++)
        testsrv_stop(&node[i]);
    return 0;
}

static const testcluster_view cluster = {node, NULL, 2 * N};

/* A client given node[0]; settings: NULL-terminated name, value pairs. */
static relock_client *client_with(const char *mode, const char *const *settings)
{
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", node[0].port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", mode), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "command_timeout_ms", "3000"), RELOCK_OK);
    for (; settings && settings[0]; settings += 2)
        assert_int_equal(relock_config_set(cfg, settings[0], settings[1]), RELOCK_OK);
    relock_client *c = NULL;
    relock_status st = relock_connect(cfg, &c);
    relock_config_free(cfg);
    if (st != RELOCK_OK)
        fail_msg("connect: %s", relock_client_error(c)->message);
    return c;
}

static relock_client *cluster_client(const char *mode)
{
    return client_with(mode, NULL);
}

static relock_client *map_off_client(const char *mode)
{
    const char *const off[] = {"cluster.slot_map", "false", NULL};
    return client_with(mode, off);
}

/* A number from node i's INFO section: the value after "field" (such as
 * "errorstat_MOVED:count=" or "total_connections_received:"), 0 when the
 * field is absent. */
static long long info_num(int i, const char *section, const char *field)
{
    char *v = testsrv_cmd(&node[i], "INFO %s", section);
    assert_non_null(v);
    const char *p = strstr(v, field);
    long long n = p ? atoll(p + strlen(field)) : 0;
    free(v);
    return n;
}

static long long moved_on(int i)
{
    return info_num(i, "errorstats", "errorstat_MOVED:count=");
}

static long long conns_on(int i)
{
    return info_num(i, "stats", "total_connections_received:");
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
    int at = testcluster_owner(&cluster, name);
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
        testcluster_name_on(&cluster, i, mode, name, sizeof name);
        lock_cycle(c, other, name);
    }
    /* A hash tag picks the slot; the fence key keeps it. */
    lock_cycle(c, other, "{orders}:nightly");

    /* A waiter on another node's lock gets it when the lease ends. */
    testcluster_name_on(&cluster, 2, "wait", name, sizeof name);
    relock_lock *l = NULL, *l2 = NULL;
    CHECK(c, relock_try_acquire(c, name, 300, &l));
    CHECK(other, relock_acquire(other, name, 5000, 5000, &l2));
    assert_true(relock_lock_fence(l2) > relock_lock_fence(l));
    CHECK(other, relock_release(l2));
    relock_lock_free(l2);
    relock_lock_free(l);

    /* Inspection, and renewal on a connection of its own. */
    testcluster_name_on(&cluster, 1, "keep", name, sizeof name);
    CHECK(c, relock_try_acquire(c, name, 600, &l));
    CHECK(c, relock_keep(l, NULL, NULL));
    tu_sleep_ms(1500);
    relock_inspect_info *info = NULL;
    CHECK(other, relock_inspect(other, name, &info));
    /* Bridge renewals write new timestamps; modern keeps its token. */
    if (strcmp(mode, "modern") == 0)
        assert_string_equal(relock_inspect_info_value(info, NULL), relock_lock_value(l));
    assert_int_equal(relock_inspect_info_fence(info), relock_lock_fence(l));
    assert_true(relock_inspect_info_pttl_ms(info) > 0);
    relock_inspect_info_free(info);
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

/* relock's slot is the server's, hash tags included. */
static void test_slots_agree(void **state)
{
    (void)state;
    const char *keys[] = {"nightly", "{orders}:nightly", "a{b}c", "a{}b", "{}", "x{{y}}z",
                          "{nightly} relock:fence", "lock:job-42"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        char *v = testsrv_cmd(&node[0], "CLUSTER KEYSLOT %s", keys[k]);
        assert_non_null(v);
        if ((unsigned)atoi(v) != relock__cluster_slot(keys[k], strlen(keys[k])))
            fail_msg("%s: server slot %s, relock %u", keys[k], v,
                     relock__cluster_slot(keys[k], strlen(keys[k])));
        free(v);
    }
}

#define ROUNDS 20

/* Locks names on all three masters in turn, ROUNDS times. */
static void alternate(relock_client *c, char names[N][64])
{
    for (int round = 0; round < ROUNDS; round++)
        for (int i = 0; i < N; i++) {
            relock_lock *l = NULL;
            CHECK(c, relock_try_acquire(c, names[i], 10000, &l));
            CHECK(c, relock_release(l));
            relock_lock_free(l);
        }
}

/* With the slot map, a client that alternates between masters meets
 * MOVED only while it learns the map, and then keeps one connection per
 * master: no MOVED, no new connection, counted by the servers and by the
 * client.  Without it, every switch of master is a MOVED and a reconnect. */
static void test_slot_map(void **state)
{
    (void)state;
    char names[N][64];
    for (int i = 0; i < N; i++)
        testcluster_name_on(&cluster, i, "map", names[i], sizeof names[i]);

    relock_client *c = cluster_client("modern");
    /* Learning: the first lock on another master says MOVED once. */
    for (int i = 0; i < N; i++) {
        relock_lock *l = NULL;
        CHECK(c, relock_try_acquire(c, names[i], 10000, &l));
        CHECK(c, relock_release(l));
        relock_lock_free(l);
    }
    assert_true(c->moved >= 1);
    int masters = 0, open = 0;
    unsigned long refreshes = 0;
    relock__cluster_counts(c, &masters, &open, &refreshes);
    assert_int_equal(masters, N);
    assert_int_equal(open, N);
    assert_true(refreshes >= 1);

    long long moved0[N], conns0[N];
    for (int i = 0; i < N; i++) {
        moved0[i] = moved_on(i);
        conns0[i] = conns_on(i);
    }
    unsigned long cm = c->moved, cc = c->connects;
    alternate(c, names);
    for (int i = 0; i < N; i++) {
        long long conns = conns_on(i), moved = moved_on(i);
        /* One connection more: the one that asked. */
        if (conns != conns0[i] + 1 || moved != moved0[i])
            fail_msg("node %d: %lld connections (expected %lld), %lld MOVED (expected %lld)", i,
                     conns, conns0[i] + 1, moved, moved0[i]);
    }
    assert_int_equal(c->moved, cm);
    assert_int_equal(c->connects, cc);
    relock__cluster_counts(c, &masters, &open, NULL);
    assert_int_equal(open, N);
    print_message("slot map: %d rounds over %d masters: 0 MOVED, 0 connections\n", ROUNDS, N);

    /* The map off: the one connection follows every switch. */
    relock_client *off = map_off_client("modern");
    for (int i = 0; i < N; i++)
        moved0[i] = moved_on(i);
    alternate(off, names);
    long long grew = 0;
    for (int i = 0; i < N; i++)
        grew += moved_on(i) - moved0[i];
    assert_true(off->moved >= (unsigned long)(N * ROUNDS - 1));
    assert_true(grew >= (long long)(N * ROUNDS - 1));
    assert_true(off->connects >= (unsigned long)(N * ROUNDS - 1));
    assert_null(off->cl);
    print_message("map off: %lu MOVED, %lu connections\n", off->moved, off->connects);
    relock_client_free(off);
    relock_client_free(c);
}

/* Subscribers to name's release channel on node i (PUBSUB NUMSUB). */
/* inspect's reads go in one pipelined batch: without a slot map, on the
 * wrong node, the first read's MOVED is followed and the later reads are
 * sent again on the right node (decision 124); the answer is whole. */
static void test_inspect_batch_redirected(void **state)
{
    (void)state;
    char name[64];
    testcluster_name_on(&cluster, 1, "insp", name, sizeof name);
    relock_client *h = cluster_client("modern");
    relock_lock *l = NULL;
    CHECK(h, relock_try_acquire(h, name, 20000, &l));
    relock_client *c = map_off_client("modern");
    unsigned long moved0 = c->moved;
    relock_inspect_info *info = NULL;
    CHECK(c, relock_inspect(c, name, &info));
    assert_int_equal(c->moved, moved0 + 1);
    assert_int_equal(relock_inspect_info_kind(info), RELOCK_VALUE_TOKEN);
    assert_string_equal(relock_inspect_info_value(info, NULL), relock_lock_value(l));
    assert_int_equal(relock_inspect_info_fence(info), relock_lock_fence(l));
    long long pttl = relock_inspect_info_pttl_ms(info);
    assert_true(pttl > 10000 && pttl <= 20000);
    relock_inspect_info_free(info);
    CHECK(h, relock_release(l));
    relock_lock_free(l);
    relock_client_free(c);
    relock_client_free(h);
}

static long long subscribers_on(int i, const char *name)
{
    char chan[128];
    snprintf(chan, sizeof chan, "%s" RELOCK__NOTIFY_SUFFIX, name);
    char *v = testsrv_cmd(&node[i], "PUBSUB NUMSUB %s", chan);
    assert_non_null(v);
    /* testsrv prints an array as its elements joined by spaces. */
    const char *sp = strrchr(v, ' ');
    long long n = atoll(sp ? sp + 1 : v);
    free(v);
    return n;
}

/*
 * A waiter on a lock whose master is not the node it was given is woken
 * by the release notice: its backoff and the holder's lease are far longer
 * than the bound, so only the notice can wake it in time.  The notice is
 * PUBLISHed on the lock's master; classic PUBLISH reaches every node of a
 * cluster, which a plain subscriber on node[0] sees too.
 */
static void waiter_woken(const char *const *settings)
{
    char name[64];
    testcluster_name_on(&cluster, 2, "notice", name, sizeof name);
    relock_client *h = cluster_client("modern");
    relock_lock *l = NULL;
    CHECK(h, relock_try_acquire(h, name, 60000, &l));

    /* A plain subscriber on node[0], which does not serve the lock. */
    struct timeval tv = {10, 0};
    redisContext *sub = redisConnectWithTimeout("127.0.0.1", node[0].port, tv);
    assert_true(sub && !sub->err);
    char chan[128];
    snprintf(chan, sizeof chan, "%s" RELOCK__NOTIFY_SUFFIX, name);
    redisReply *r = redisCommand(sub, "SUBSCRIBE %s", chan);
    assert_true(r && r->type == REDIS_REPLY_ARRAY);
    freeReplyObject(r);

    long long before[N];
    for (int i = 0; i < N; i++)
        before[i] = subscribers_on(i, name);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* No cmocka assertion here: a failed one would go on running the
         * tests in this process. */
        relock_config *cfg = relock_config_new();
        char url[64];
        snprintf(url, sizeof url, "redis://127.0.0.1:%d", node[0].port);
        relock_status st = relock_config_set_url(cfg, url);
        if (st == RELOCK_OK)
            st = relock_config_set(cfg, "mode", "modern");
        for (const char *const *p = settings; st == RELOCK_OK && p[0]; p += 2)
            st = relock_config_set(cfg, p[0], p[1]);
        relock_client *w = NULL;
        if (st == RELOCK_OK)
            st = relock_connect(cfg, &w);
        relock_config_free(cfg);
        if (st != RELOCK_OK)
            _exit(3);
        relock_lock *wl = NULL;
        uint64_t t0 = tu_now_ms();
        st = relock_acquire(w, name, 10000, 20000, &wl);
        uint64_t took = tu_now_ms() - t0;
        if (st != RELOCK_OK)
            fprintf(stderr, "waiter: %s\n", relock_client_error(w)->message);
        if (st == RELOCK_OK)
            relock_release(wl);
        _exit(st != RELOCK_OK ? 1 : took > 10000 ? 2 : 0);
    }
    /* The waiter subscribes on the lock's master (node 2). */
    uint64_t end = tu_now_ms() + 30000;
    while (subscribers_on(2, name) <= before[2] && tu_now_ms() < end)
        tu_sleep_ms(20);
    assert_true(subscribers_on(2, name) > before[2]);
    assert_int_equal(subscribers_on(1, name), before[1]);
    uint64_t t0 = tu_now_ms();
    CHECK(h, relock_release(l));
    relock_lock_free(l);
    int status = tu_wait_child(pid, 30000);
    assert_true(status >= 0 && WIFEXITED(status));
    if (WEXITSTATUS(status) != 0)
        fail_msg("waiter exit %d (1: not acquired, 2: not woken by the notice, 3: no client)",
                 WEXITSTATUS(status));
    print_message("woken %llu ms after the release\n", (unsigned long long)(tu_now_ms() - t0));
    /* The notice reached node[0]'s subscriber across the cluster bus. */
    void *msg = NULL;
    assert_int_equal(redisGetReply(sub, &msg), REDIS_OK);
    r = msg;
    assert_true(r && r->type == REDIS_REPLY_ARRAY && r->elements == 3);
    assert_string_equal(r->element[0]->str, "message");
    freeReplyObject(r);
    redisFree(sub);
    relock_client_free(h);
}

static void test_notice_across_nodes(void **state)
{
    (void)state;
    /* A backoff and a holder's lease far longer than the bound. */
    const char *const map[] = {"wait.backoff_max_ms", "60000", "wait.backoff_min_ms", "30000",
                               NULL};
    waiter_woken(map);
    const char *const off[] = {"wait.backoff_max_ms", "60000", "wait.backoff_min_ms", "30000",
                               "cluster.slot_map", "false", NULL};
    waiter_woken(off);
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
    testcluster_name_on(&cluster, s, "mig", name, sizeof name);
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

    /* A new lock in the migrating slot: its key is on neither node, so
     * the source says ASK and acquire and release run on t after ASKING;
     * the map still names s.  (Without fencing: an acquire is then one
     * SET of one key.  A script over a lock key and its fence counter
     * meets TRYAGAIN on the importing node unless both keys are already
     * there, as shown above: Redis serves a multi-key command there only
     * when it has every key.) */
    char tagged[80];
    snprintf(tagged, sizeof tagged, "{%s}new", name);
    const char *const nofence[] = {"fencing", "false", NULL};
    relock_client *c3 = client_with("modern", nofence);
    long long ask0 = info_num(t, "commandstats", "cmdstat_asking:calls=");
    relock_lock *l3 = NULL;
    CHECK(c3, relock_try_acquire(c3, tagged, 10000, &l3));
    assert_true(info_num(t, "commandstats", "cmdstat_asking:calls=") > ask0);
    assert_true(asking_pttl(t, tagged) > 0);
    CHECK(c3, relock_release(l3));
    relock_lock_free(l3);
    assert_int_equal(asking_pttl(t, tagged), -2);

    /* Finish: the slot belongs to t everywhere. */
    const int order[N] = {t, s, x};
    for (int k = 0; k < N; k++) {
        int i = order[k];
        v = testsrv_cmd(&node[i], "CLUSTER SETSLOT %s NODE %s", sl, ids[t]);
        expect_ok(i, v);
        free(v);
    }
    assert_int_equal(testcluster_owner(&cluster, name), t);

    /* New acquires in the slot: the first meets MOVED once on s, and the
     * map sends the next straight to t. */
    long long m0 = moved_on(s);
    for (int k = 0; k < 3; k++) {
        snprintf(tagged, sizeof tagged, "{%s}after%d", name, k);
        CHECK(c3, relock_try_acquire(c3, tagged, 10000, &l3));
        v = get_on(t, tagged);
        assert_string_equal(v, relock_lock_value(l3));
        free(v);
        CHECK(c3, relock_release(l3));
        relock_lock_free(l3);
        assert_int_equal(moved_on(s), m0 + 1);
    }
    relock_client_free(c3);

    /* MOVED takes the client to t, where the lock still is ours. */
    CHECK(c, relock_extend(l, 30000));
    relock_server_info *info = NULL;
    CHECK(c, relock_client_server(c, &info));
    assert_int_equal(relock_server_info_port(info), node[t].port);
    relock_server_info_free(info);
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

/* Keys a scan told of, with the node it was walking. */
typedef struct seen_keys {
    relock_client *c;
    int n;
    char key[16][64];
    char node[16][64];
    relock_key_class cls[16];
} seen_keys;

static void seen(void *arg, relock_key_class k, const char *key, size_t keylen)
{
    seen_keys *sk = arg;
    if (sk->n == 16)
        return;
    snprintf(sk->key[sk->n], sizeof sk->key[0], "%.*s", (int)keylen, key);
    snprintf(sk->node[sk->n], sizeof sk->node[0], "%s", relock_scan_node(sk->c));
    sk->cls[sk->n++] = k;
}

/* Runs the relock command with args, returning its stdout (free() it). */
static char *run_cli(const char *args)
{
    const char *bin = getenv("RELOCK_BIN");
    assert_non_null(bin);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s -u redis://127.0.0.1:%d %s", bin, node[0].port, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 65536, len = 0;
    char *out = calloc(1, cap);
    assert_non_null(out);
    size_t got;
    while (len + 1 < cap && (got = fread(out + len, 1, cap - 1 - len, p)) > 0)
        len += got;
    int status = pclose(p);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("%s: exit %d: %s", cmd, status, out);
    return out;
}

#ifdef TEST_BOTH
/* The slot of MV_KEYS keys "mv:{tag}:i", moved from node `from` to node `to`
 * with its keys (the migration's steps, as redis-cli --cluster reshard
 * takes them). */
#define MV_KEYS 500
static void move_slot(const char *tag, int from, int to)
{
    char *v = testsrv_cmd(&node[0], "CLUSTER KEYSLOT %s", tag);
    assert_non_null(v);
    int slot = atoi(v);
    free(v);
    v = testsrv_cmd(&node[to], "CLUSTER SETSLOT %d IMPORTING %s", slot, ids[from]);
    expect_ok(to, v);
    free(v);
    v = testsrv_cmd(&node[from], "CLUSTER SETSLOT %d MIGRATING %s", slot, ids[to]);
    expect_ok(from, v);
    free(v);
    struct timeval tv = {5, 0};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", node[from].port, tv);
    assert_true(ctx && !ctx->err);
    for (int i = 0; i < MV_KEYS; i++) {
        redisReply *r = redisCommand(ctx, "MIGRATE 127.0.0.1 %d mv:{%s}:%d 0 5000", node[to].port,
                                     tag, i);
        assert_true(r && r->type == REDIS_REPLY_STATUS); /* OK, or NOKEY */
        freeReplyObject(r);
    }
    redisFree(ctx);
    const int order[N] = {to, from, 3 - to - from};
    for (int k = 0; k < N; k++) {
        v = testsrv_cmd(&node[order[k]], "CLUSTER SETSLOT %d NODE %s", slot, ids[to]);
        expect_ok(order[k], v);
        free(v);
    }
    assert_int_equal(testcluster_owner(&cluster, tag), to);
}

/* Writes (set) or deletes the keys "mv:{tag}:i" on node i. */
static void mv_keys(int i, const char *tag, int set)
{
    struct timeval tv = {5, 0};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", node[i].port, tv);
    assert_true(ctx && !ctx->err);
    for (int k = 0; k < MV_KEYS; k++) {
        redisReply *r = set ? redisCommand(ctx, "SET mv:{%s}:%d 1000000000", tag, k)
                            : redisCommand(ctx, "DEL mv:{%s}:%d", tag, k);
        assert_true(r && r->type != REDIS_REPLY_ERROR);
        freeReplyObject(r);
    }
    redisFree(ctx);
}

/* The walk's key callback: moves the keys' slot away from the node being
 * walked at the first key it is told of. */
typedef struct mover {
    const char *tag;
    int told, moved;
} mover;

static void move_at_first(void *arg, relock_key_class k, const char *key, size_t keylen)
{
    (void)k, (void)key, (void)keylen;
    mover *mv = arg;
    mv->told++;
    if (!mv->moved) {
        mv->moved = 1;
        move_slot(mv->tag, 1, 2);
    }
}

/* The first slot node i serves, by CLUSTER SLOTS. */
static int first_slot_of(int i)
{
    struct timeval tv = {5, 0};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", node[i].port, tv);
    assert_true(ctx && !ctx->err);
    redisReply *r = redisCommand(ctx, "CLUSTER SLOTS");
    assert_true(r && r->type == REDIS_REPLY_ARRAY);
    long long first = -1;
    for (size_t k = 0; k < r->elements; k++) {
        const redisReply *e = r->element[k];
        if (e->elements >= 3 && e->element[2]->elements >= 2 &&
            e->element[2]->element[1]->integer == node[i].port &&
            (first < 0 || e->element[0]->integer < first))
            first = e->element[0]->integer;
    }
    freeReplyObject(r);
    redisFree(ctx);
    assert_true(first >= 0);
    return (int)first;
}

/*
 * A slot moved to another master while the walk of its master is under
 * way (its keys read one batch at a time after each SCAN): the batches
 * that meet MOVED are read where it says, and the walk goes on with
 * SCAN on the master whose cursor it carries, to the cursor's end, then
 * walks the next masters, each found by its address.  The keys (more
 * than one SCAN's worth) live in node 1's first slot, moved to node 2 at
 * the first key told: node 1 answers a second SCAN (the continuation of
 * its cursor, which another node would have been asked), and every key
 * is told (node 2, which then ranks before node 1 in slot order, is
 * walked whole).  Both entry points.
 */
static void test_scan_slot_moved(void **state)
{
    (void)state;
    /* The first slot of node 1 moves: in slot order node 2 then comes
     * before node 1, so the walk must not find its master again by its
     * rank among the masters. */
    char tag[64];
    unsigned want = (unsigned)first_slot_of(1);
    int found = 0;
    for (int k = 0; k < 1000000 && !found; k++) {
        snprintf(tag, sizeof tag, "mvtag%d", k);
        found = relock__cluster_slot(tag, strlen(tag)) == want;
    }
    assert_true(found);
    for (int e = 0; e < 2; e++) {
        relock_config *cfg = relock_config_new();
        char url[64];
        snprintf(url, sizeof url, "redis://127.0.0.1:%d", node[0].port);
        assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
        assert_int_equal(relock_config_set(cfg, "mode", "modern"), RELOCK_OK);
        /* more than one SCAN's worth (COUNT 200) of keys on node 1 */
        mv_keys(1, tag, 1);
        both_client *b = NULL;
        assert_int_equal(both_connect(e ? BOTH_ASYNC : BOTH_BLOCKING, cfg, &b), RELOCK_OK);
        relock_config_free(cfg);
        long long scans1 = info_num(1, "commandstats", "cmdstat_scan:calls=");
        mover mv = {tag, 0, 0};
        relock_scan_result *res = NULL;
        if (both_scan(b, "mv:*", move_at_first, &mv, &res) != RELOCK_OK)
            fail_msg("%s scan: %s", e ? "async" : "blocking", both_error(b));
        assert_int_equal(mv.moved, 1);
        long long more = info_num(1, "commandstats", "cmdstat_scan:calls=") - scans1;
        if (more < 2)
            fail_msg("%s: node 1 answered %lld SCAN (its walk was not finished there); %d keys "
                     "told",
                     e ? "async" : "blocking", more, mv.told);
        assert_true(relock_scan_result_complete(res));
        /* every key told once at least (the moved ones again on node 2) */
        assert_true(mv.told >= MV_KEYS);
        relock_scan_result_free(res);
        both_free(b);
        /* the slot goes home empty for the next entry point (or test) */
        mv_keys(2, tag, 0);
        move_slot(tag, 2, 1);
    }
}
#endif

/* `relock scan` walks every master, whichever node it is given, and lists
 * keys by node (the map on or off). */
static void test_scan_every_master(void **state)
{
    (void)state;
    char legacy[64], bridge[64], modern[64];
    testcluster_name_on(&cluster, 1, "scan:legacy", legacy, sizeof legacy);
    testcluster_name_on(&cluster, 0, "scan:bridge", bridge, sizeof bridge);
    testcluster_name_on(&cluster, 2, "scan:modern", modern, sizeof modern);
    char ts[32];
    snprintf(ts, sizeof ts, "%lld", (long long)(time(NULL) + 3600)); /* a live legacy lock */
    char *v = testsrv_cmd(&node[1], "SET %s %s", legacy, ts);
    expect_ok(1, v);
    free(v);
    v = testsrv_cmd(&node[0], "SET %s %s PX 60000", bridge, ts);
    expect_ok(0, v);
    free(v);
    relock_client *h = cluster_client("modern");
    relock_lock *l = NULL;
    CHECK(h, relock_try_acquire(h, modern, 60000, &l));

    for (int map = 0; map < 2; map++) {
        relock_client *c = map ? cluster_client("modern") : map_off_client("modern");
        seen_keys sk;
        memset(&sk, 0, sizeof sk);
        sk.c = c;
        relock_scan_result *res = NULL;
        CHECK(c, relock_scan_keys(c, "scan:*", seen, &sk, &res));
        assert_int_equal(relock_scan_result_cluster_masters(res), N);
        assert_true(relock_scan_result_complete(res));
        assert_int_equal(relock_scan_result_count(res, RELOCK_SCAN_LEGACY), 1);
        assert_int_equal(relock_scan_result_count(res, RELOCK_SCAN_BRIDGE), 1);
        assert_int_equal(relock_scan_result_count(res, RELOCK_SCAN_MODERN), 1);
        assert_int_equal(relock_scan_result_verdict(res), RELOCK_SCAN_STAY_BRIDGE);
        relock_scan_result_free(res);
        assert_int_equal(sk.n, 3);
        const char *names[3] = {legacy, bridge, modern};
        const int at[3] = {1, 0, 2};
        for (int k = 0; k < 3; k++) {
            int found = 0;
            for (int i = 0; i < sk.n; i++)
                if (strcmp(sk.key[i], names[k]) == 0) {
                    char want[64];
                    snprintf(want, sizeof want, "127.0.0.1:%d", node[at[k]].port);
                    assert_string_equal(sk.node[i], want);
                    found = 1;
                }
            if (!found)
                fail_msg("%s not told", names[k]);
        }
        relock_client_free(c);
    }
#ifdef TEST_BOTH
    /* The same walk through relock_async_scan(): every master (its own
     * CLUSTER SLOTS), the same counts and verdict, each key told once. */
    for (int map = 0; map < 2; map++) {
        relock_config *cfg = relock_config_new();
        char url[64];
        snprintf(url, sizeof url, "redis://127.0.0.1:%d", node[0].port);
        assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
        assert_int_equal(relock_config_set(cfg, "mode", "modern"), RELOCK_OK);
        assert_int_equal(relock_config_set(cfg, "cluster.slot_map", map ? "true" : "false"),
                         RELOCK_OK);
        both_client *b = NULL;
        assert_int_equal(both_connect(BOTH_ASYNC, cfg, &b), RELOCK_OK);
        relock_config_free(cfg);
        seen_keys sk;
        memset(&sk, 0, sizeof sk);
        relock_scan_result *res = NULL;
        if (both_scan(b, "scan:*", seen, &sk, &res) != RELOCK_OK)
            fail_msg("relock_async_scan: %s", both_error(b));
        assert_int_equal(relock_scan_result_cluster_masters(res), N);
        assert_true(relock_scan_result_complete(res));
        assert_int_equal(relock_scan_result_count(res, RELOCK_SCAN_LEGACY), 1);
        assert_int_equal(relock_scan_result_count(res, RELOCK_SCAN_BRIDGE), 1);
        assert_int_equal(relock_scan_result_count(res, RELOCK_SCAN_MODERN), 1);
        assert_int_equal(relock_scan_result_verdict(res), RELOCK_SCAN_STAY_BRIDGE);
        relock_scan_result_free(res);
        assert_int_equal(sk.n, 3);
        const char *names[3] = {legacy, bridge, modern};
        for (int k = 0; k < 3; k++) {
            int found = 0;
            for (int i = 0; i < sk.n; i++)
                found += strcmp(sk.key[i], names[k]) == 0;
            assert_int_equal(found, 1);
        }
        both_free(b);
    }
#endif

    /* The command says so, and lists the keys by node. */
    char *out = run_cli("scan --match 'scan:*' --keys");
    if (!strstr(out, "cluster:     every master walked (3)") || !strstr(out, "by node"))
        fail_msg("scan --keys: %s", out);
    char want[160];
    snprintf(want, sizeof want, "  node 127.0.0.1:%d\n  legacy:    %s\n", node[1].port, legacy);
    if (!strstr(out, want))
        fail_msg("scan --keys: no \"%s\" in %s", want, out);
    free(out);
    out = run_cli("scan --json --match 'scan:*' --keys");
    snprintf(want, sizeof want, "\"127.0.0.1:%d\":{\"legacy\":[\"%s\"]", node[1].port, legacy);
    if (!strstr(out, "\"cluster_masters\":3") || !strstr(out, want))
        fail_msg("scan --json --keys: %s", out);
    free(out);

    CHECK(h, relock_release(l));
    relock_lock_free(l);
    relock_client_free(h);
    v = testsrv_cmd(&node[1], "DEL %s", legacy);
    free(v);
    v = testsrv_cmd(&node[0], "DEL %s", bridge);
    free(v);
}

/* Whether node i's CLUSTER NODES shows node r as a master. */
static int is_master(int i, int r)
{
    char *v = testsrv_cmd(&node[i], "CLUSTER NODES");
    int yes = 0;
    const char *p = v ? strstr(v, ids[r]) : NULL;
    if (p) {
        const char *eol = strchr(p, '\n');
        const char *m = strstr(p, "master");
        yes = m && (!eol || m < eol);
    }
    free(v);
    return yes;
}

/* GET key on a replica (READONLY first), as text. */
static char *get_on_replica(int i, const char *key)
{
    struct timeval tv = {2, 0};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", node[i].port, tv);
    assert_true(ctx && !ctx->err);
    redisReply *r = redisCommand(ctx, "READONLY");
    assert_non_null(r);
    freeReplyObject(r);
    r = redisCommand(ctx, "GET %s", key);
    assert_non_null(r);
    char *v = strdup(r->type == REDIS_REPLY_STRING ? r->str : "(nil)");
    freeReplyObject(r);
    redisFree(ctx);
    return v;
}

/*
 * A master killed while a lock on it is held (docs/safety.md, "Redis
 * Cluster failover"): calls fail with RELOCK_EIO naming the dead master
 * until its replica takes over; then the map, read again, names the
 * replica, and the lock, replicated before the kill, is still held there:
 * the holder extends and releases it, others stay out until then, and the
 * fence goes on increasing.  (A lock whose write had not reached the
 * replica would be gone: its holder's extend or release says RELOCK_LOST.)
 * Runs last: the cluster has one master fewer afterwards.
 */
static void test_failover(void **state)
{
    (void)state;
    const int m = 1, r = N + 1;
    char name[64], other_name[64];
    testcluster_name_on(&cluster, m, "fo", name, sizeof name);
    testcluster_name_on(&cluster, 0, "fo", other_name, sizeof other_name);
    relock_client *h = cluster_client("modern");
    relock_lock *l = NULL, *k = NULL;
    CHECK(h, relock_try_acquire(h, name, 60000, &l));
    CHECK(h, relock_try_acquire(h, other_name, 60000, &k));
    long long f1 = relock_lock_fence(l);
    /* The write has reached the replica. */
    uint64_t end = tu_now_ms() + 10000;
    for (;;) {
        char *v = get_on_replica(r, name);
        int there = strcmp(v, relock_lock_value(l)) == 0;
        free(v);
        if (there)
            break;
        if (tu_now_ms() > end)
            fail_msg("the lock did not reach the replica within 10 s");
        tu_sleep_ms(20);
    }
    unsigned long refreshes0 = 0;
    relock__cluster_counts(h, NULL, NULL, &refreshes0);

    int mport = node[m].port;
    kill(node[m].pid, SIGKILL);
    testsrv_stop(&node[m]);
    uint64_t killed = tu_now_ms();

    /* Before the replica takes over (cluster-node-timeout 2 s): an error
     * that names the dead master. */
    relock_client *o = cluster_client("modern");
    relock_lock *l2 = NULL;
    relock_status st = relock_try_acquire(o, name, 10000, &l2);
    char where[32];
    snprintf(where, sizeof where, "127.0.0.1:%d", mport);
    if (st != RELOCK_EIO || !strstr(relock_client_error(o)->message, where))
        fail_msg("during the failover: %s: %s", relock_status_name(st),
                 relock_client_error(o)->message);
    print_message("during the failover: %s\n", relock_client_error(o)->message);
    /* The other masters' locks are not affected. */
    CHECK(h, relock_extend(k, 60000));

    /* The replica takes over. */
    end = tu_now_ms() + 30000;
    while (!(is_master(0, r) && is_master(2, r)) && tu_now_ms() < end)
        tu_sleep_ms(50);
    assert_true(is_master(0, r));
    assert_int_equal(await_reply(0, "CLUSTER", "INFO", "cluster_state:ok"), 0);
    print_message("replica promoted %llu ms after the kill\n",
                  (unsigned long long)(tu_now_ms() - killed));

    /* The map is read again and names the replica; the lock is still
     * held there. */
    assert_int_equal(relock_try_acquire(o, name, 10000, &l2), RELOCK_BUSY);
    CHECK(h, relock_extend(l, 60000));
    relock_server_info *info = NULL;
    CHECK(h, relock_client_server(h, &info));
    assert_int_equal(relock_server_info_port(info), node[r].port);
    relock_server_info_free(info);
    unsigned long refreshes1 = 0;
    relock__cluster_counts(h, NULL, NULL, &refreshes1);
    assert_true(refreshes1 > refreshes0);
    CHECK(h, relock_release(l));
    relock_lock_free(l);
    char *v = get_on(r, name);
    assert_string_equal(v, "(nil)");
    free(v);
    CHECK(o, relock_try_acquire(o, name, 10000, &l2));
    assert_true(relock_lock_fence(l2) > f1);
    CHECK(o, relock_release(l2));
    relock_lock_free(l2);
    CHECK(h, relock_release(k));
    relock_lock_free(k);
    relock_client_free(o);
    relock_client_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slots_agree),
        cmocka_unit_test(test_slot_map),
        cmocka_unit_test(test_notice_across_nodes),
        cmocka_unit_test(test_inspect_batch_redirected),
        cmocka_unit_test(test_modern_everywhere),
        cmocka_unit_test(test_bridge_everywhere),
        cmocka_unit_test(test_slot_migration),
        cmocka_unit_test(test_scan_every_master),
#ifdef TEST_BOTH
        cmocka_unit_test(test_scan_slot_moved),
#endif
        cmocka_unit_test(test_failover),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
