/*
 * Redis Cluster (design.md §9.3): three masters joined by redis-cli, and a
 * replica of node[1] (node[R]).  A client given only the first node locks
 * names whose slots live on every node (one MOVED, then the slot map it
 * reads), contended by a client of the other entry point on the same keys;
 * a waiter on another node's lock is woken by the release notice; a held
 * lock whose slot is moved to another node by hand keeps working during
 * the migration (ASK, after ASKING, on the importing node) and after it
 * (MOVED), with its fence counter moved along and still increasing; the
 * markers, the server's clock per node, durability and owner records go
 * to the node of their own key; and when a master is SIGKILLed, its
 * replica takes over and a replicated lock is still held there
 * (docs/safety.md).
 *
 * Each scenario runs through one entry point per ctest (tests/support/both.c):
 * it_cluster the blocking API, it_cluster_async the asynchronous one on
 * libevent, it_cluster_async_libuv on libuv.  The blocking client alone
 * has the counts of its redirections and connections and inspect, and
 * its scan tells the node of each key; the asynchronous one alone runs
 * many operations in flight over every node, and a scan beside acquires
 * and releases without the slot map.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "async_outcome.h"
#include "both.h"
#include "internal.h" /* relock__fence_key: the real key name; the client's counts */
#include "relock.h"
#include "testcluster.h"
#include "testsrv.h"
#include "testutil.h"

#define N 3 /* masters: node[0..2]; node[R] is node[1]'s replica */
#define R N
static testsrv node[N + 1];
static int bus[N + 1];
static char ids[N + 1][64];
static both_entry entry;

/* node[SKEWED]'s wall clock runs SKEW_MS ahead (tests/support/clock_ahead.c
 * preloaded): a lock's timestamp under legacy.clock = "server" must be
 * written by the clock of the node that holds it. */
#define SKEWED 2
#define SKEW_MS 600000LL
static int skewed;

static int start_node(int i)
{
    const char *so = i == SKEWED ? RELOCK_CLOCK_AHEAD_SO : NULL;
    if (so) {
        char ahead[32];
        snprintf(ahead, sizeof ahead, "%lld", SKEW_MS);
        setenv("LD_PRELOAD", so, 1);
        setenv("RELOCK_TEST_CLOCK_AHEAD_MS", ahead, 1);
    }
    int rc = testcluster_node(&node[i], &bus[i]);
    if (so) {
        unsetenv("LD_PRELOAD");
        unsetenv("RELOCK_TEST_CLOCK_AHEAD_MS");
        skewed = rc == 0;
    }
    return rc;
}

static int await_reply(int i, const char *cmd, const char *arg, const char *want)
{
    return testcluster_await(&node[i], cmd, arg, want);
}

static const testcluster_view cluster = {node, NULL, R + 1};

/* node[R] joins the cluster as node[1]'s replica. */
static int add_replica(void)
{
    char *v = testsrv_cmd(&node[R], "CLUSTER MEET 127.0.0.1 %d %d", node[0].port, bus[0]);
    int ok = v && strcmp(v, "OK") == 0;
    free(v);
    /* REPLICATE needs the master known to the new node first. */
    if (!ok || await_reply(R, "CLUSTER", "NODES", ids[1]) != 0)
        return -1;
    uint64_t end = tu_now_ms() + 30000;
    while (tu_now_ms() < end) {
        v = testsrv_cmd(&node[R], "CLUSTER REPLICATE %s", ids[1]);
        ok = v && strcmp(v, "OK") == 0;
        free(v);
        if (ok)
            return await_reply(R, "INFO", "replication", "master_link_status:up");
        tu_sleep_ms(100);
    }
    return -1;
}

static int my_id(int i)
{
    char *id = testsrv_cmd(&node[i], "CLUSTER MYID");
    if (!id || strlen(id) >= sizeof ids[i]) {
        free(id);
        return -1;
    }
    snprintf(ids[i], sizeof ids[i], "%s", id);
    free(id);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    for (int i = 0; i <= R; i++)
        if (start_node(i) != 0)
            return -1;
    if (testcluster_create(node, N) != 0)
        return -1;
    /* Every node must see every slot served before the tests begin. */
    for (int i = 0; i < N; i++)
        if (await_reply(i, "CLUSTER", "INFO", "cluster_state:ok") != 0 || my_id(i) != 0)
            return -1;
    if (my_id(R) != 0)
        return -1;
    if (add_replica() != 0) {
        fprintf(stderr, "setup: node %d did not become node 1's replica\n", R);
        return -1;
    }
    for (int i = 0; i <= R; i++)
        if (await_reply(i, "CLUSTER", "INFO", "cluster_state:ok") != 0)
            return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i <= R; i++)
        testsrv_stop(&node[i]);
    return 0;
}

/* Modern mode (or mode), fenced or not, given node[0]; settings:
 * NULL-terminated name, value pairs. */
static relock_config *config_with(const char *mode, const char *fencing,
                                  const char *const *settings)
{
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", node[0].port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", mode), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "command_timeout_ms", "3000"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "fencing", fencing), RELOCK_OK);
    for (; settings && settings[0]; settings += 2)
        assert_int_equal(relock_config_set(cfg, settings[0], settings[1]), RELOCK_OK);
    return cfg;
}

static both_client *client_cfg(both_entry e, relock_config *cfg)
{
    both_client *c = NULL;
    relock_status st = both_connect(e, cfg, &c);
    relock_config_free(cfg);
    if (st != RELOCK_OK)
        fail_msg("connect (%s): %s", both_entry_name(e), both_error(c));
    return c;
}

/* A client of entry e in mode, fenced or not. */
static both_client *client_of(both_entry e, const char *mode, const char *fencing)
{
    return client_cfg(e, config_with(mode, fencing, NULL));
}

/* A client of the program's entry. */
static both_client *client(const char *mode, const char *fencing)
{
    return client_of(entry, mode, fencing);
}

/* A client of the other entry point: the rival on the same keys. */
static both_client *rival(const char *mode, const char *fencing)
{
    return client_of(entry == BOTH_BLOCKING ? BOTH_ASYNC : BOTH_BLOCKING, mode, fencing);
}

/* The blocking API's client alone (inspect, scan's node, the counts). */
static relock_client *blocking_with(const char *mode, const char *const *settings)
{
    relock_config *cfg = config_with(mode, "true", settings);
    relock_client *c = NULL;
    relock_status st = relock_connect(cfg, &c);
    relock_config_free(cfg);
    if (st != RELOCK_OK)
        fail_msg("connect: %s", relock_client_error(c)->message);
    return c;
}

static relock_client *map_off_client(const char *mode)
{
    const char *const off[] = {"cluster.slot_map", "false", NULL};
    return blocking_with(mode, off);
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

static long long moved_total(void)
{
    long long n = 0;
    for (int i = 0; i < N; i++)
        n += moved_on(i);
    return n;
}

static long long conns_on(int i)
{
    return info_num(i, "stats", "total_connections_received:");
}

static long long ask_calls(int i)
{
    return info_num(i, "commandstats", "cmdstat_asking:calls=");
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

/* call on the both_client cl must succeed; else the test fails with its
 * error message. */
#define MUST(cl, call)                                                                       \
    do {                                                                                     \
        relock_status st_ = (call);                                                          \
        if (st_ != RELOCK_OK)                                                                \
            fail_msg("%s (%s): %s: %s", #call, both_entry_name(both_client_entry(cl)),       \
                     relock_status_name(st_), both_error(cl));                               \
    } while (0)

/* The same for the blocking API's client alone. */
#define CHECK(cl, call)                                                                      \
    do {                                                                                     \
        relock_status st_ = (call);                                                          \
        if (st_ != RELOCK_OK)                                                                \
            fail_msg("%s: %s: %s", #call, relock_status_name(st_),                           \
                     relock_client_error(cl)->message);                                      \
    } while (0)

static relock_lock *acquired(both_client *c, const char *name, long long ttl)
{
    relock_lock *l = NULL;
    MUST(c, both_try_acquire(c, name, ttl, &l));
    return l;
}

static void released(both_client *c, relock_lock *l)
{
    MUST(c, both_release(c, l));
    relock_lock_free(l);
}

/* The port of the node the blocking client uses (relock_client_server). */
static int server_port(relock_client *c)
{
    relock_server_info *info = NULL;
    CHECK(c, relock_client_server(c, &info));
    int port = relock_server_info_port(info);
    relock_server_info_free(info);
    return port;
}

/* ------------------------------------------------------------ locks on every node */

/* Acquire, extend and release name on node at, checking its keys there,
 * contended by other: its attempt is busy while c holds the lock, and
 * wins after, with a larger fence, while c's is busy. */
static void lock_cycle(both_client *c, both_client *other, const char *name, int at,
                       long long *last)
{
    char fkey[128];
    fence_key(name, fkey, sizeof fkey);
    relock_lock *l = acquired(c, name, 10000), *l2 = NULL;
    char *v = get_on(at, name);
    assert_string_equal(v, relock_lock_value(l));
    free(v);
    v = get_on(at, fkey);
    assert_int_equal(atoll(v), relock_lock_fence(l));
    free(v);
    assert_true(relock_lock_fence(l) > *last);
    assert_int_equal(both_try_acquire(other, name, 10000, &l2), RELOCK_BUSY);
    MUST(c, both_extend(c, l, 20000));
    long long f = relock_lock_fence(l);
    released(c, l);
    v = get_on(at, name);
    assert_string_equal(v, "(nil)");
    free(v);
    l2 = acquired(other, name, 5000);
    assert_true(relock_lock_fence(l2) > f);
    *last = relock_lock_fence(l2);
    assert_int_equal(both_try_acquire(c, name, 5000, &l), RELOCK_BUSY);
    released(other, l2);
}

/* The asynchronous entry's own: many acquires in flight at once, over
 * every node. */
static void many_in_flight(both_client *c)
{
    enum { M = 60 };
    static outcome many[M];
    memset(many, 0, sizeof many);
    long done = 0;
    for (int k = 0; k < M; k++) {
        char name[32];
        snprintf(name, sizeof name, "many%d", k);
        assert_int_equal(
            relock_async_try_acquire(both_async(c), name, 30000, record, &many[k], NULL),
            RELOCK_OK);
    }
    uint64_t end = tu_now_ms() + 20000;
    while (done < M && tu_now_ms() < end) {
        both_turn(c);
        done = 0;
        for (int k = 0; k < M; k++)
            done += many[k].calls;
    }
    assert_int_equal(done, M);
    for (int k = 0; k < M; k++) {
        if (many[k].st != RELOCK_OK)
            fail_msg("acquire of many: %s: %s", relock_status_name(many[k].st), many[k].msg);
        released(c, many[k].l);
    }
}

static void locks_everywhere(const char *mode)
{
    int modern = strcmp(mode, "modern") == 0;
    both_client *c = client(mode, "true"), *other = rival(mode, "true");
    char names[N][64];
    for (int i = 0; i < N; i++) /* testcluster_owner itself meets MOVED on node 0 */
        testcluster_name_on(&cluster, i, mode, names[i], sizeof names[i]);
    /* Each client's watch marker (both entries send it from the core
     * before their first attempt, while the map is still unknown) meets a
     * MOVED of its own unless node 0 serves it. */
    char wk[128];
    assert_int_equal(relock__watch_key("", wk, sizeof wk), 0);
    long long watch_moved = testcluster_owner(&cluster, wk) != 0;
    const char *tagged = "{orders}:nightly";
    int tagged_at = testcluster_owner(&cluster, tagged);
    long long moved0 = moved_total(), moved = 0;
    long long last[N + 1] = {0};
    for (int round = 0; round < 2; round++) {
        /* The first MOVED (node 1's name) makes each client read the whole
         * slot map: node 2's name meets none; nor does the second round
         * (fresh clients in modern mode). */
        if (round == 1 && modern) {
            moved = moved_total();
            assert_int_equal(moved - moved0, 2 + 2 * watch_moved);
        }
        for (int i = 0; i < N; i++)
            lock_cycle(c, other, names[i], i, &last[i]);
        /* A hash tag picks the slot; the fence key keeps it. */
        lock_cycle(c, other, tagged, tagged_at, &last[N]);
    }
    if (modern)
        assert_int_equal(moved_total(), moved);

    /* A waiter on another node's lock gets it when the lease ends. */
    char name[64];
    testcluster_name_on(&cluster, 2, "wait", name, sizeof name);
    relock_lock *l = acquired(c, name, 300), *l2 = NULL;
    MUST(other, both_acquire(other, name, 5000, 5000, &l2));
    assert_true(relock_lock_fence(l2) > relock_lock_fence(l));
    released(other, l2);
    relock_lock_free(l);

    /* Renewal (on a connection of its own in the blocking client), seen
     * by the blocking API's inspect. */
    testcluster_name_on(&cluster, 1, "keep", name, sizeof name);
    l = acquired(c, name, 600);
    MUST(c, both_keep(c, l, NULL, NULL));
    both_idle(c, 1500);
    relock_client *insp = blocking_with(mode, NULL);
    relock_inspect_info *info = NULL;
    CHECK(insp, relock_inspect(insp, name, &info));
    /* Bridge renewals write new timestamps; modern keeps its token. */
    if (modern)
        assert_string_equal(relock_inspect_info_value(info, NULL), relock_lock_value(l));
    assert_int_equal(relock_inspect_info_fence(info), relock_lock_fence(l));
    assert_true(relock_inspect_info_pttl_ms(info) > 0);
    relock_inspect_info_free(info);
    relock_client_free(insp);
    MUST(c, both_keep_stop(c, l));
    released(c, l);
    if (entry == BOTH_ASYNC && modern)
        many_in_flight(c);
    both_free(other);
    both_free(c);
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

/* ------------------------------------------------------------ the slot map */

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
 * client.  Without it, every switch of master is a MOVED and a reconnect.
 * (The blocking client's counts; test_map_off runs the map off through
 * both entries.) */
static void test_slot_map(void **state)
{
    (void)state;
    char names[N][64];
    for (int i = 0; i < N; i++)
        testcluster_name_on(&cluster, i, "map", names[i], sizeof names[i]);

    relock_client *c = blocking_with("modern", NULL);
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
    int off_masters = -1;
    relock__cluster_counts(off, &off_masters, NULL, NULL);
    assert_int_equal(off_masters, 0); /* no slot map was made */
    print_message("map off: %lu MOVED, %lu connections\n", off->moved, off->connects);
    relock_client_free(off);
    relock_client_free(c);
}

/* inspect's reads go in one pipelined batch: without a slot map, on the
 * wrong node, the first read's MOVED is followed and the later reads are
 * sent again on the right node (decision 124); the answer is whole.  (The
 * blocking API's inspect, the lock held through the program's entry.) */
static void test_inspect_batch_redirected(void **state)
{
    (void)state;
    char name[64];
    testcluster_name_on(&cluster, 1, "insp", name, sizeof name);
    both_client *h = client("modern", "true");
    relock_lock *l = acquired(h, name, 20000);
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
    released(h, l);
    relock_client_free(c);
    both_free(h);
}

/* ------------------------------------------------------------ release notices */

/* Subscribers to name's release channel on node i (PUBSUB NUMSUB). */
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
 * cluster, which a plain subscriber on node[0] sees too.  The waiter is a
 * child process through the program's entry; with the slot map and
 * without.
 */
static void waiter_woken(const char *const *settings)
{
    char name[64];
    testcluster_name_on(&cluster, 2, "notice", name, sizeof name);
    both_client *h = client("modern", "true");
    relock_lock *l = acquired(h, name, 60000);

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
        /* No cmocka assertion here (both.c has one only where memory
         * runs out): a failed one would go on running the tests in this
         * process. */
        relock_config *cfg = relock_config_new();
        char url[64];
        snprintf(url, sizeof url, "redis://127.0.0.1:%d", node[0].port);
        relock_status st = relock_config_set_url(cfg, url);
        if (st == RELOCK_OK)
            st = relock_config_set(cfg, "mode", "modern");
        for (const char *const *p = settings; st == RELOCK_OK && p[0]; p += 2)
            st = relock_config_set(cfg, p[0], p[1]);
        both_client *w = NULL;
        if (st == RELOCK_OK)
            st = both_connect(entry, cfg, &w);
        relock_config_free(cfg);
        if (st != RELOCK_OK)
            _exit(3);
        relock_lock *wl = NULL;
        uint64_t t0 = tu_now_ms();
        st = both_acquire(w, name, 10000, 20000, &wl);
        uint64_t took = tu_now_ms() - t0;
        if (st != RELOCK_OK)
            fprintf(stderr, "waiter: %s\n", both_error(w));
        if (st == RELOCK_OK)
            both_release(w, wl);
        _exit(st != RELOCK_OK ? 1 : took > 10000 ? 2 : 0);
    }
    /* The waiter subscribes on the lock's master (node 2). */
    uint64_t end = tu_now_ms() + 30000;
    while (subscribers_on(2, name) <= before[2] && tu_now_ms() < end)
        tu_sleep_ms(20);
    assert_true(subscribers_on(2, name) > before[2]);
    assert_int_equal(subscribers_on(1, name), before[1]);
    /* on the lock's master alone: node 0, given, gets none either */
    for (int i = 0; i < N; i++)
        if (subscribers_on(i, name) != before[i] + (i == 2))
            fail_msg("node %d has %lld subscribers (expected %lld)", i, subscribers_on(i, name),
                     before[i] + (i == 2));
    uint64_t t0 = tu_now_ms();
    released(h, l);
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
    both_free(h);
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

/* Client connections node i has now (its own INFO's among them). */
static long long clients_on(int i)
{
    return info_num(i, "clients", "connected_clients:");
}

/*
 * cluster.slot_map = false: no map is read and the client keeps one
 * connection, which moves at every MOVED; locks on each master in turn
 * meet a MOVED at every switch, and afterwards one connection is open, to
 * the node the last MOVED named, where the next operation starts (no
 * MOVED).
 */
static void test_map_off(void **state)
{
    (void)state;
    char names[N][64];
    for (int i = 0; i < N; i++)
        testcluster_name_on(&cluster, i, "off", names[i], sizeof names[i]);
    long long slots0 = 0, open0[N];
    for (int i = 0; i < N; i++) {
        slots0 += info_num(i, "commandstats", "cmdstat_cluster|slots:calls=");
        open0[i] = clients_on(i);
    }
    const char *const off[] = {"cluster.slot_map", "false", NULL};
    both_client *c = client_cfg(entry, config_with("modern", "true", off));
    long long moved0 = moved_total();
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < N; i++)
            released(c, acquired(c, names[i], 30000));
    long long moved = moved_total() - moved0;
    if (moved < 3 * N - 1)
        fail_msg("%lld MOVED for %d switches of master", moved, 3 * N - 1);
    long long slots = -slots0;
    for (int i = 0; i < N; i++)
        slots += info_num(i, "commandstats", "cmdstat_cluster|slots:calls=");
    assert_int_equal(slots, 0);
    /* the connections left behind close (the servers see it within 5 s) */
    long long open[N];
    uint64_t end = tu_now_ms() + 5000;
    for (;;) {
        long long extra = 0;
        for (int i = 0; i < N; i++)
            extra += (open[i] = clients_on(i) - open0[i]) != (i == N - 1);
        if (!extra || tu_now_ms() > end)
            break;
        both_idle(c, 50);
    }
    for (int i = 0; i < N; i++)
        if (open[i] != (i == N - 1))
            fail_msg("node %d: %lld connections of the client (expected %d)", i, open[i],
                     i == N - 1);
    moved0 = moved_total();
    released(c, acquired(c, names[N - 1], 30000));
    assert_int_equal(moved_total(), moved0);
    both_free(c);
}

/* The asynchronous entry's own: acquires and releases one after another,
 * on a name of each master in turn, until told to stop. */
typedef struct hopper {
    relock_async *a;
    const char (*names)[64];
    int stop, running;
    long cycles, failed;
    char msg[512];
} hopper;

static void hop_acquired(relock_async *a, relock_status st, relock_lock *l,
                         const relock_error *e, void *arg);

static void hop_released(relock_async *a, relock_status st, relock_lock *l,
                         const relock_error *e, void *arg)
{
    hopper *h = arg;
    if (st != RELOCK_OK) {
        h->failed++;
        snprintf(h->msg, sizeof h->msg, "release: %s", e->message);
    }
    relock_lock_free(l);
    h->cycles++;
    if (h->stop || relock_async_try_acquire(a, h->names[h->cycles % N], 10000, hop_acquired, h,
                                            NULL) != RELOCK_OK)
        h->running = 0;
}

static void hop_acquired(relock_async *a, relock_status st, relock_lock *l,
                         const relock_error *e, void *arg)
{
    (void)a;
    hopper *h = arg;
    if (st != RELOCK_OK || relock_async_release(l, hop_released, h) != RELOCK_OK) {
        h->failed++;
        snprintf(h->msg, sizeof h->msg, "acquire: %s", e->message);
        h->running = 0;
    }
}

/* A scan's end through relock_async_scan(). */
typedef struct scan_out {
    long calls;
    relock_status st;
    int complete, masters;
    long long examined;
    char msg[512];
} scan_out;

static void scan_end(relock_async *a, relock_status st, relock_scan_result *r,
                     const relock_error *e, void *arg)
{
    (void)a;
    scan_out *o = arg;
    o->calls++;
    o->st = st;
    o->complete = r && relock_scan_result_complete(r);
    o->masters = r ? relock_scan_result_cluster_masters(r) : -1;
    o->examined = r ? relock_scan_result_count(r, RELOCK_SCAN_EXAMINED) : -1;
    snprintf(o->msg, sizeof o->msg, "%s", e->message);
    relock_scan_result_free(r);
}

/* Writes (set) or deletes 300 keys "aso:{tag}:k" on node i. */
static void aso_keys(int i, const char *tag, int set)
{
    struct timeval tv = {5, 0};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", node[i].port, tv);
    assert_true(ctx && !ctx->err);
    for (int k = 0; k < 300; k++) {
        redisReply *r = set ? redisCommand(ctx, "SET aso:{%s}:%d 1000000000", tag, k)
                            : redisCommand(ctx, "DEL aso:{%s}:%d", tag, k);
        assert_true(r && r->type != REDIS_REPLY_ERROR);
        freeReplyObject(r);
    }
    redisFree(ctx);
}

/*
 * cluster.slot_map = false, the asynchronous entry's own (several
 * operations in flight): a scan walks every master (a connection to each
 * as it comes to it) while the same client's acquires and releases go to
 * each master in turn, the one connection moving at every MOVED and the
 * connections left behind closing as soon as nothing uses them: the walk
 * is exact and complete, no operation fails, and afterwards the client
 * has one connection, to the node of the last MOVED.
 */
static void test_map_off_scan(void **state)
{
    (void)state;
    char names[N][64], tags[N][64];
    for (int i = 0; i < N; i++) {
        testcluster_name_on(&cluster, i, "aoffs", names[i], sizeof names[i]);
        testcluster_name_on(&cluster, i, "aofft", tags[i], sizeof tags[i]);
        aso_keys(i, tags[i], 1);
    }
    long long open0[N];
    for (int i = 0; i < N; i++)
        open0[i] = clients_on(i);
    const char *const off[] = {"cluster.slot_map", "false", NULL};
    both_client *c = client_cfg(entry, config_with("modern", "true", off));
    relock_async *a = both_async(c);
    assert_non_null(a);
    hopper h = {a, (const char (*)[64])names, 0, 1, 0, 0, ""};
    assert_int_equal(relock_async_try_acquire(a, names[0], 10000, hop_acquired, &h, NULL),
                     RELOCK_OK);
    scan_out so = {0};
    assert_int_equal(relock_async_scan(a, "aso:*", NULL, NULL, scan_end, &so), RELOCK_OK);
    uint64_t end = tu_now_ms() + 30000;
    while (tu_now_ms() < end && !so.calls)
        both_turn(c);
    h.stop = 1;
    while (tu_now_ms() < end && h.running)
        both_turn(c);
    if (so.st != RELOCK_OK || !so.complete || so.masters != N || so.examined != N * 300)
        fail_msg("scan: %s (complete %d, %d masters, %lld keys): %s", relock_status_name(so.st),
                 so.complete, so.masters, so.examined, so.msg);
    print_message("%ld acquire-release cycles during the scan\n", h.cycles);
    if (h.failed)
        fail_msg("%ld cycles failed: %s", h.failed, h.msg);
    assert_false(h.running);
    /* one connection left, to the node of the last MOVED (the servers see
     * the others close within 5 s) */
    long long extra = 0;
    uint64_t until = tu_now_ms() + 5000;
    for (;;) {
        extra = 0;
        for (int i = 0; i < N; i++)
            extra += clients_on(i) - open0[i];
        if (extra == 1 || tu_now_ms() > until)
            break;
        both_idle(c, 50);
    }
    if (extra != 1)
        fail_msg("%lld connections of the client (expected 1)", extra);
    both_free(c);
    for (int i = 0; i < N; i++)
        aso_keys(i, tags[i], 0);
}

/* ------------------------------------------------------------ slot migration */

static void test_slot_migration(void **state)
{
    (void)state;
    both_client *c = client("modern", "true");
    char name[64], fkey[128];
    int s = 1, t = 2, x = 0; /* source, target, the third */
    testcluster_name_on(&cluster, s, "mig", name, sizeof name);
    fence_key(name, fkey, sizeof fkey);
    relock_lock *l = acquired(c, name, 30000);
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
    MUST(c, both_extend(c, l, 30000));

    /* Move the lock key alone first, as a resharding tool moving keys in
     * batches may: scripts over both keys now meet TRYAGAIN (on t, after
     * ASK), and the client gives up after its bounded retries, having
     * changed nothing. */
    char tport[16];
    snprintf(tport, sizeof tport, "%d", node[t].port);
    v = testsrv_cmd(&node[s], "MIGRATE 127.0.0.1 %s %s 0 5000 KEYS %s", tport, "", name);
    expect_ok(s, v);
    free(v);
    both_client *c2 = client("modern", "true");
    relock_lock *l2 = NULL;
    uint64_t t0 = tu_now_ms();
    assert_int_equal(both_try_acquire(c2, name, 10000, &l2), RELOCK_EIO);
    const char *msg = both_error(c2);
    if (!strstr(msg, "still redirected after 5 redirections (last: TRYAGAIN"))
        fail_msg("split keys: %s", msg);
    print_message("TRYAGAIN: gave up after %llu ms: %s\n",
                  (unsigned long long)(tu_now_ms() - t0), msg);
    both_free(c2);
    /* A one-key command is served through ASK meanwhile. */
    MUST(c, both_extend(c, l, 35000));
    /* Then the fence key. */
    v = testsrv_cmd(&node[s], "MIGRATE 127.0.0.1 %s %s 0 5000 KEYS %s", tport, "", fkey);
    expect_ok(s, v);
    free(v);
    v = testsrv_cmd(&node[t], "CLUSTER COUNTKEYSINSLOT %s", sl);
    assert_string_equal(v, "2");
    free(v);

    /* s answers ASK: the extend goes to t once, after ASKING. */
    long long ask0 = ask_calls(t);
    MUST(c, both_extend(c, l, 40000));
    assert_true(ask_calls(t) > ask0);
    assert_true(asking_pttl(t, name) > 30000);

    /* A new lock in the migrating slot: its key is on neither node, so
     * the source says ASK and acquire and release run on t after ASKING;
     * the map still names s; a client of the other entry meets it there.
     * (Without fencing: an acquire is then one SET of one key.  A script
     * over a lock key and its fence counter meets TRYAGAIN on the
     * importing node unless both keys are already there, as shown above:
     * Redis serves a multi-key command there only when it has every key.) */
    char tagged[80];
    snprintf(tagged, sizeof tagged, "{%s}new", name);
    both_client *c3 = client("modern", "false");
    ask0 = ask_calls(t);
    relock_lock *l3 = acquired(c3, tagged, 10000);
    assert_true(ask_calls(t) > ask0);
    assert_true(asking_pttl(t, tagged) > 0);
    both_client *o = rival("modern", "false");
    relock_lock *ol = NULL;
    assert_int_equal(both_try_acquire(o, tagged, 5000, &ol), RELOCK_BUSY);
    released(c3, l3);
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
        l3 = acquired(c3, tagged, 10000);
        v = get_on(t, tagged);
        assert_string_equal(v, relock_lock_value(l3));
        free(v);
        released(c3, l3);
        assert_int_equal(moved_on(s), m0 + 1);
    }
    both_free(c3);

    /* MOVED takes the client to t, where the lock still is ours. */
    MUST(c, both_extend(c, l, 30000));
    assert_true(asking_pttl(t, name) > 20000);
    if (entry == BOTH_BLOCKING)
        assert_int_equal(server_port(both_sync(c)), node[t].port);
    assert_int_equal(both_try_acquire(o, name, 5000, &ol), RELOCK_BUSY);
    released(c, l);
    v = get_on(t, name);
    assert_string_equal(v, "(nil)");
    free(v);

    /* The fence counter moved with the lock: the next token is larger. */
    l = acquired(c, name, 10000);
    assert_true(relock_lock_fence(l) > f1);
    v = get_on(t, fkey);
    assert_int_equal(atoll(v), relock_lock_fence(l));
    free(v);
    released(c, l);
    ol = acquired(o, name, 5000);
    assert_int_equal(both_try_acquire(c, name, 5000, &l), RELOCK_BUSY);
    released(o, ol);
    both_free(o);
    both_free(c);
}

/* ------------------------------------------------------------ scan */

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
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", node[0].port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", "modern"), RELOCK_OK);
    /* more than one SCAN's worth (COUNT 200) of keys on node 1 */
    mv_keys(1, tag, 1);
    both_client *b = NULL;
    assert_int_equal(both_connect(entry, cfg, &b), RELOCK_OK);
    relock_config_free(cfg);
    long long scans1 = info_num(1, "commandstats", "cmdstat_scan:calls=");
    mover mv = {tag, 0, 0};
    relock_scan_result *res = NULL;
    if (both_scan(b, "mv:*", move_at_first, &mv, &res) != RELOCK_OK)
        fail_msg("%s scan: %s", both_entry_name(entry), both_error(b));
    assert_int_equal(mv.moved, 1);
    long long more = info_num(1, "commandstats", "cmdstat_scan:calls=") - scans1;
    if (more < 2)
        fail_msg("%s: node 1 answered %lld SCAN (its walk was not finished there); %d keys "
                 "told",
                 both_entry_name(entry), more, mv.told);
    assert_true(relock_scan_result_complete(res));
    /* every key told once at least (the moved ones again on node 2) */
    assert_true(mv.told >= MV_KEYS);
    relock_scan_result_free(res);
    both_free(b);
    /* the slot goes home empty for the next test */
    mv_keys(2, tag, 0);
    move_slot(tag, 2, 1);
}

static void scan_cli(const char *legacy);

/* A scan walks every master, whichever node it is given (the map on or
 * off): the blocking client's tells the node of each key (and `relock
 * scan` lists keys by node), the asynchronous one's each key once. */
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
    both_client *h = client("modern", "true");
    relock_lock *l = acquired(h, modern, 60000);

    for (int map = 0; entry == BOTH_BLOCKING && map < 2; map++) {
        relock_client *c = map ? blocking_with("modern", NULL) : map_off_client("modern");
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
    /* The same walk through relock_async_scan(): every master (its own
     * CLUSTER SLOTS), the same counts and verdict, each key told once. */
    for (int map = 0; entry == BOTH_ASYNC && map < 2; map++) {
        const char *const slot_map[] = {"cluster.slot_map", map ? "true" : "false", NULL};
        both_client *b = client_cfg(entry, config_with("modern", "true", slot_map));
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
    /* The command (the blocking client's) says so, and lists the keys by
     * node. */
    if (entry == BOTH_BLOCKING)
        scan_cli(legacy);

    released(h, l);
    both_free(h);
    v = testsrv_cmd(&node[1], "DEL %s", legacy);
    free(v);
    v = testsrv_cmd(&node[0], "DEL %s", bridge);
    free(v);
}

/* `relock scan --keys` over the cluster, the live legacy lock on node 1. */
static void scan_cli(const char *legacy)
{
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
}

/* ------------------------------------------------------------ each key on its node */

static long long wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * legacy.clock = "server" over the cluster: each lock's timestamp is
 * written by the clock of the node holding it (node[SKEWED] runs 10
 * minutes ahead): the client keeps an estimate per node's connection.
 * With one estimate for the client, the node measured last lent its
 * clock to the others.
 */
static void test_clock_per_node(void **state)
{
    (void)state;
    assert_true(skewed);
    /* the skew is real: node[SKEWED]'s TIME is ahead */
    char *t = testsrv_cmd(&node[SKEWED], "TIME");
    assert_non_null(t);
    long long sec = atoll(t);
    free(t);
    if (!(sec * 1000 > wall_ms() + SKEW_MS - 60000))
        fail_msg("node %d's clock is not ahead (TIME %lld)", SKEWED, sec);
    const char *const settings[] = {"legacy.clock", "server", "legacy.clock_unit", "ms", NULL};
    both_client *c = client_cfg(entry, config_with("legacy", "false", settings));
    const int on[2] = {SKEWED, 0};
    char names[2][64];
    for (int k = 0; k < 2; k++)
        testcluster_name_on(&cluster, on[k], "clk", names[k], sizeof names[k]);
    /* both nodes' connections open and the map known (the first lock
     * starts at node[0], its clock read there before the MOVED) */
    for (int k = 0; k < 2; k++) {
        relock_lock_free(acquired(c, names[k], 30000));
        char *r = testsrv_cmd(&node[on[k]], "DEL %s", names[k]);
        free(r);
    }
    const long long ttl = 30000;
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < 2; k++) {
            long long skew = on[k] == SKEWED ? SKEW_MS : 0;
            long long before = wall_ms();
            relock_lock *l = acquired(c, names[k], ttl);
            long long after = wall_ms();
            char *v = get_on(on[k], names[k]);
            long long ts = atoll(v);
            if (!(ts >= before + skew + ttl - 3000 && ts <= after + skew + ttl + 3000))
                fail_msg("round %d, node %d: wrote %s, its clock + ttl is about %lld", round,
                         on[k], v, after + skew + ttl);
            free(v);
            released(c, l);
        }
    both_free(c);
}

/*
 * A legacy holder met on one node: the marker key that tells `relock
 * scan` a legacy writer is about is written on the node serving the
 * marker's own slot (the write follows MOVED).
 */
static void test_marker_on_its_node(void **state)
{
    (void)state;
    char mk[128];
    assert_int_equal(relock__marker_key("", mk, sizeof mk), 0);
    int m = testcluster_owner(&cluster, mk);
    int at = -1; /* another node, not the skewed one */
    for (int i = 0; i < N && at < 0; i++)
        if (i != m && i != SKEWED)
            at = i;
    assert_true(at >= 0);
    char near[64], name[64], v[32];
    testcluster_name_on(&cluster, m, "mk-near", near, sizeof near);
    testcluster_name_on(&cluster, at, "mk", name, sizeof name);
    char *r = testsrv_cmd(&node[m], "DEL %s", mk);
    free(r);
    /* a legacy holder, live for a minute (seconds, no TTL) */
    snprintf(v, sizeof v, "%lld", wall_ms() / 1000 + 60);
    r = testsrv_cmd(&node[at], "SET %s %s", name, v);
    free(r);
    both_client *c = client("modern", "false");
    /* the marker's node is connected and the map known */
    released(c, acquired(c, near, 30000));
    relock_lock *l = NULL;
    assert_int_equal(both_try_acquire(c, name, 5000, &l), RELOCK_BUSY);
    both_idle(c, 300); /* the marker's reply comes meanwhile */
    both_free(c);
    r = testsrv_cmd(&node[m], "EXISTS %s", mk);
    assert_non_null(r);
    if (strcmp(r, "1") != 0)
        fail_msg("%s client: no marker on node %d after a legacy holder on node %d (%s)",
                 both_entry_name(entry), m, at, r);
    free(r);
    r = testsrv_cmd(&node[at], "DEL %s", name);
    free(r);
}

/*
 * The watch marker (scan's evidence that upgraded clients watch) lands on
 * the node serving its own slot (the write follows MOVED): a client given
 * only node 0 writes it once it has a connection to that node, at an
 * acquire after that connection is up (the connection a lock on the
 * marker's node opens may still be logging in at that acquire's start,
 * and a missing marker is tried again at the next: so a few rounds of a
 * lock on every node, bounded).
 */
static void test_watch_on_its_node(void **state)
{
    (void)state;
    char wk[128];
    assert_int_equal(relock__watch_key("", wk, sizeof wk), 0);
    int m = testcluster_owner(&cluster, wk);
    char *r = testsrv_cmd(&node[m], "DEL %s", wk);
    free(r);
    both_client *c = client("modern", "false");
    char name[64];
    long long at = 0;
    for (int round = 0; round < 5 && at == 0; round++) {
        for (int i = 0; i < N; i++) {
            testcluster_name_on(&cluster, i, "wt", name, sizeof name);
            released(c, acquired(c, name, 30000));
        }
        both_idle(c, 300); /* the marker's reply comes meanwhile */
        r = testsrv_cmd(&node[m], "GET %s", wk);
        assert_non_null(r);
        at = atoll(r);
        free(r);
    }
    both_free(c);
    if (at < (long long)time(NULL) * 1000 - 60000)
        fail_msg("no watch marker on node %d after 5 rounds of locks on every node (%lld)", m,
                 at);
}

/*
 * Durability over the cluster: WAIT goes on the connection of the write
 * (node[1] has a replica).  A lock whose slot the client does not know yet
 * is written after a MOVED, on another connection than the attempt's
 * first: refused.  A write that met TRYAGAIN (a half-migrated slot) and
 * went again on the same connection is counted there: acknowledged.
 */
static void test_durable_tryagain(void **state)
{
    (void)state;
    /* A key prefix whose watch marker (written once by each client before
     * its first attempt) lives on node[0], the node the client starts
     * from: the marker's write then meets no MOVED, and the first lock on
     * node[1] is still the client's first meeting with node[1]. */
    char prefix[32], wk[128], name[64], key[96];
    for (int i = 0;; i++) {
        assert_true(i < 1000);
        snprintf(prefix, sizeof prefix, "dt%d:", i);
        assert_int_equal(relock__watch_key(prefix, wk, sizeof wk), 0);
        if (testcluster_owner(&cluster, wk) == 0)
            break;
    }
    for (int i = 0;; i++) {
        assert_true(i < 1000);
        snprintf(name, sizeof name, "dt%d", i);
        snprintf(key, sizeof key, "%s%s", prefix, name);
        if (testcluster_owner(&cluster, key) == 1)
            break;
    }
    const char *const settings[] = {"key_prefix", prefix, "durability.replicas", "1", NULL};
    both_client *c = client_cfg(entry, config_with("modern", "true", settings));
    /* the first lock on node[1] meets MOVED: refused */
    relock_lock *l = NULL;
    relock_status st = both_try_acquire(c, name, 30000, &l);
    if (st != RELOCK_EDURABILITY)
        fail_msg("after MOVED: %s: %s", relock_status_name(st), both_error(c));
    /* the map known: acknowledged; the fence counter stays behind */
    released(c, acquired(c, name, 30000));
    char *sl = testsrv_cmd(&node[1], "CLUSTER KEYSLOT %s", key);
    assert_non_null(sl);
    int ok = 0;
    for (int tries = 0; tries < 3 && !ok; tries++) {
        /* the slot migrating to node[2] with only the fence counter
         * still on node[1]: the acquire's script (lock and counter) meets
         * TRYAGAIN until a child calls the migration off */
        char *v = testsrv_cmd(&node[2], "CLUSTER SETSLOT %s IMPORTING %s", sl, ids[1]);
        expect_ok(2, v);
        free(v);
        v = testsrv_cmd(&node[1], "CLUSTER SETSLOT %s MIGRATING %s", sl, ids[2]);
        expect_ok(1, v);
        free(v);
        long long tryagain = info_num(1, "errorstats", "errorstat_TRYAGAIN:count=");
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            uint64_t end = tu_now_ms() + 10000;
            while (tu_now_ms() < end) {
                char *e = testsrv_cmd(&node[1], "INFO errorstats");
                const char *p = e ? strstr(e, "errorstat_TRYAGAIN:count=") : NULL;
                long long n = p ? atoll(p + 25) : 0;
                free(e);
                if (n > tryagain)
                    break;
                tu_sleep_ms(1);
            }
            for (int i = 1; i <= 2; i++)
                free(testsrv_cmd(&node[i], "CLUSTER SETSLOT %s STABLE", sl));
            _exit(0);
        }
        st = both_try_acquire(c, name, 30000, &l);
        int status = tu_wait_child(pid, 20000);
        assert_true(status >= 0 && WIFEXITED(status));
        if (st == RELOCK_EIO && strstr(both_error(c), "TRYAGAIN"))
            continue; /* called off after the client's last try: again */
        if (st != RELOCK_OK)
            fail_msg("after TRYAGAIN: %s: %s", relock_status_name(st), both_error(c));
        ok = 1;
        released(c, l);
    }
    free(sl);
    assert_true(ok);
    assert_true(info_num(1, "errorstats", "errorstat_TRYAGAIN:count=") > 0);
    both_free(c);
}

/* Owner records over the cluster: the record beside a lock on each
 * node (its slot), written after the acquire that met MOVED and after
 * those routed by the map, deleted by the release. */
static void test_owner_records(void **state)
{
    (void)state;
    relock_config *cfg = config_with("modern", "true", NULL);
    assert_int_equal(relock_config_set(cfg, "owner_info", "true"), RELOCK_OK);
    assert_int_equal(relock_config_set_owner(cfg, 0, "acl-owner"), RELOCK_OK);
    both_client *c = client_cfg(entry, cfg);
    for (int round = 0; round < 2; round++)
        for (int i = N - 1; i >= 0; i--) {
            char name[64], rkey[96];
            testcluster_name_on(&cluster, i, "own", name, sizeof name);
            snprintf(rkey, sizeof rkey, "{%s} relock:owner", name);
            relock_lock *l = acquired(c, name, 30000);
            char *v = get_on(i, rkey);
            if (!strstr(v, " acl-owner"))
                fail_msg("round %d, node %d: the record is \"%s\"", round, i, v);
            free(v);
            released(c, l);
            v = testsrv_cmd(&node[i], "EXISTS %s", rkey);
            assert_non_null(v);
            assert_string_equal(v, "0");
            free(v);
        }
    both_free(c);
}

/* ------------------------------------------------------------ failover */

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

/* GET key on the replica (READONLY first), as text. */
static char *get_on_replica(const char *key)
{
    struct timeval tv = {2, 0};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", node[R].port, tv);
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

/* Tries name on c until the attempt ends otherwise than RELOCK_EIO or
 * RELOCK_EAMBIGUOUS (failures while the failover goes on), bounded to
 * 30 s; its status, the failures counted in *fails. */
static relock_status busy_after(both_client *c, const char *name, int *fails)
{
    uint64_t end = tu_now_ms() + 30000;
    relock_status st;
    do {
        relock_lock *l = NULL;
        st = both_try_acquire(c, name, 10000, &l);
        if (st == RELOCK_OK)
            released(c, l);
        if (st != RELOCK_EIO && st != RELOCK_EAMBIGUOUS)
            return st;
        assert_true(both_error(c)[0] != 0);
        (*fails)++;
        both_idle(c, 200);
    } while (tu_now_ms() < end);
    fail_msg("still failing after 30 s: %s: %s", relock_status_name(st), both_error(c));
    return st;
}

/*
 * A master killed while a lock on it is held (docs/safety.md, "Redis
 * Cluster failover"): operations on its slots fail with RELOCK_EIO naming
 * the dead master until its replica takes over; the other masters' locks
 * are not affected; then the holder's extend reaches the replica (its map
 * still names the dead master, whose connect fails; the operation, which
 * sent nothing yet, goes where the map read again leads), where the lock,
 * replicated before the kill, is still held: the holder extends and
 * releases it, another client stays out until then, and the fence goes on
 * increasing.  (A lock whose write had not reached the replica would be
 * gone: its holder's extend or release says RELOCK_LOST.)  Runs last: the
 * cluster has one master fewer afterwards.
 */
static void test_failover(void **state)
{
    (void)state;
    both_client *h = client("modern", "true"), *o = client("modern", "true");
    char name[64], other_name[64];
    testcluster_name_on(&cluster, 1, "fo", name, sizeof name);
    testcluster_name_on(&cluster, 0, "fo", other_name, sizeof other_name);
    relock_lock *l = acquired(h, name, 60000), *k = acquired(h, other_name, 60000);
    long long f1 = relock_lock_fence(l);
    /* The write has reached the replica. */
    uint64_t end = tu_now_ms() + 10000;
    for (;;) {
        char *v = get_on_replica(name);
        int there = strcmp(v, relock_lock_value(l)) == 0;
        free(v);
        if (there)
            break;
        if (tu_now_ms() > end)
            fail_msg("the lock did not reach the replica within 10 s");
        tu_sleep_ms(20);
    }
    unsigned long refreshes0 = 0;
    if (entry == BOTH_BLOCKING)
        relock__cluster_counts(both_sync(h), NULL, NULL, &refreshes0);

    int mport = node[1].port;
    kill(node[1].pid, SIGKILL);
    testsrv_stop(&node[1]);
    uint64_t killed = tu_now_ms();

    /* Before the replica takes over (cluster-node-timeout 2 s): an error
     * that names the dead master (the asynchronous client's is its
     * connect's). */
    relock_lock *l2 = NULL;
    relock_status st = both_try_acquire(o, name, 10000, &l2);
    char where[64];
    snprintf(where, sizeof where, "127.0.0.1:%d", mport);
    if (st != RELOCK_EIO || !strstr(both_error(o), where))
        fail_msg("during the failover: %s: %s", relock_status_name(st), both_error(o));
    snprintf(where, sizeof where, "connect to 127.0.0.1:%d: Connection refused", mport);
    if (entry == BOTH_ASYNC && strcmp(both_error(o), where) != 0)
        fail_msg("during the failover: %s", both_error(o));
    print_message("during the failover: %s\n", both_error(o));
    /* The other masters' locks are not affected. */
    MUST(h, both_extend(h, k, 60000));

    /* The replica takes over (until then the cluster may answer
     * CLUSTERDOWN, which no client follows). */
    end = tu_now_ms() + 30000;
    while (!(is_master(0, R) && is_master(2, R)) && tu_now_ms() < end)
        tu_sleep_ms(50);
    assert_true(is_master(0, R));
    const int alive[] = {0, 2, R};
    for (int i = 0; i < 3; i++)
        assert_int_equal(await_reply(alive[i], "CLUSTER", "INFO", "cluster_state:ok"), 0);
    print_message("replica promoted %llu ms after the kill\n",
                  (unsigned long long)(tu_now_ms() - killed));

    /* The map is read again and names the replica; the lock is still
     * held there: the holder's extend reaches it at once, the other
     * client is busy (the blocking one at its first try). */
    MUST(h, both_extend(h, l, 60000));
    if (entry == BOTH_BLOCKING) {
        assert_int_equal(server_port(both_sync(h)), node[R].port);
        unsigned long refreshes1 = 0;
        relock__cluster_counts(both_sync(h), NULL, NULL, &refreshes1);
        assert_true(refreshes1 > refreshes0);
    }
    int fails = 0;
    assert_int_equal(busy_after(o, name, &fails), RELOCK_BUSY);
    if (entry == BOTH_BLOCKING)
        assert_int_equal(fails, 0);
    released(h, l);
    char *v = get_on(R, name);
    assert_string_equal(v, "(nil)");
    free(v);
    l2 = acquired(o, name, 10000);
    assert_true(relock_lock_fence(l2) > f1);
    released(o, l2);
    released(h, k);
    both_free(o);
    both_free(h);
}

int main(int argc, char **argv)
{
    entry = both_entry_from_args(argc, argv);
    /* Through both entry points; then each entry's own, and the failover,
     * which both run, last in both lists (the cluster has one master
     * fewer after it). */
    const struct CMUnitTest shared[] = {
        cmocka_unit_test(test_slots_agree),
        cmocka_unit_test(test_notice_across_nodes),
        cmocka_unit_test(test_map_off),
        cmocka_unit_test(test_scan_every_master),
        cmocka_unit_test(test_scan_slot_moved),
        cmocka_unit_test(test_modern_everywhere),
        cmocka_unit_test(test_bridge_everywhere),
        cmocka_unit_test(test_slot_migration),
        cmocka_unit_test(test_clock_per_node),
        cmocka_unit_test(test_marker_on_its_node),
        cmocka_unit_test(test_watch_on_its_node),
        cmocka_unit_test(test_durable_tryagain),
        cmocka_unit_test(test_owner_records),
    };
    /* The blocking API's alone: the client's counts of redirections and
     * connections, and inspect. */
    const struct CMUnitTest blocking[] = {
        cmocka_unit_test(test_slot_map),
        cmocka_unit_test(test_inspect_batch_redirected),
        cmocka_unit_test(test_failover),
    };
    const struct CMUnitTest async[] = {
        cmocka_unit_test(test_map_off_scan),
        cmocka_unit_test(test_failover),
    };
    return both_run_each(entry, shared, sizeof shared / sizeof *shared, blocking,
                         sizeof blocking / sizeof *blocking, async, sizeof async / sizeof *async,
                         setup, teardown);
}
