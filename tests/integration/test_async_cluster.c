/*
 * Redis Cluster under the asynchronous client (design.md §9.3), on libevent
 * (it_async_cluster_libevent) or libuv (it_async_cluster_libuv): three
 * masters joined by redis-cli, as test_cluster.c starts them.  A client
 * given only the first node locks names whose slots live on every node
 * (one MOVED, then the slot map it reads), contended by a blocking client on the same
 * keys; a held lock whose slot is migrated by hand keeps working during
 * the migration (ASK, after ASKING, on the importing node) and after it
 * (MOVED), its fence counter moved along; when a master is SIGKILLed, its
 * replica (node[R]) takes over and a replicated lock is still held there.
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

#include "async_loop.h"
#include "internal.h" /* relock__fence_key: the real key name */
#include "testcluster.h"
#include "testsrv.h"

#define N 3 /* masters: node[0..2]; node[R] is node[1]'s replica */
#define R N
static testsrv node[N + 1];
static int start_node_env(int i);
static int bus[N + 1];
static char ids[N + 1][64];

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
    int rc = start_node_env(i);
    if (so) {
        unsetenv("LD_PRELOAD");
        unsetenv("RELOCK_TEST_CLOCK_AHEAD_MS");
        skewed = rc == 0;
    }
    return rc;
}

static int start_node_env(int i)
{
    return testcluster_node(&node[i], &bus[i]);
}

static int await_reply(int i, const char *cmd, const char *arg, const char *want)
{
    return testcluster_await(&node[i], cmd, arg, want);
}

static const testcluster_view cluster = {node, NULL, R + 1};


static long long info_num(int i, const char *section, const char *field)
{
    char *v = testsrv_cmd(&node[i], "INFO %s", section);
    assert_non_null(v);
    const char *p = strstr(v, field);
    long long n = p ? atoll(p + strlen(field)) : 0;
    free(v);
    return n;
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

/* node[R] joins the cluster as node[1]'s replica. */
static int add_replica(void)
{
    char *v = testsrv_cmd(&node[R], "CLUSTER MEET 127.0.0.1 %d %d", node[0].port, bus[0]);
    int ok = v && strcmp(v, "OK") == 0;
    free(v);
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

static int setup(void **state)
{
    (void)state;
    for (int i = 0; i <= R; i++)
        if (start_node(i) != 0)
            return -1;
    if (testcluster_create(node, N) != 0)
        return -1;
    for (int i = 0; i < N; i++) {
        if (await_reply(i, "CLUSTER", "INFO", "cluster_state:ok") != 0)
            return -1;
        char *id = testsrv_cmd(&node[i], "CLUSTER MYID");
        if (!id || strlen(id) >= sizeof ids[i]) {
            free(id);
            return -1;
        }
        snprintf(ids[i], sizeof ids[i], "%s", id);
        free(id);
    }
    char *rid = testsrv_cmd(&node[R], "CLUSTER MYID");
    if (!rid || strlen(rid) >= sizeof ids[R]) {
        free(rid);
        return -1;
    }
    snprintf(ids[R], sizeof ids[R], "%s", rid);
    free(rid);
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

static relock_config *cluster_config(const char *fencing)
{
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", node[0].port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", "modern"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "command_timeout_ms", "3000"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "fencing", fencing), RELOCK_OK);
    return cfg;
}

static relock_async *async_client(relock_async_loop *lp, const char *fencing)
{
    relock_config *cfg = cluster_config(fencing);
    relock_async *a = NULL;
    relock_status st = relock_async_new(cfg, lp, &a);
    relock_config_free(cfg);
    if (st != RELOCK_OK)
        fail_msg("relock_async_new: %s: %s", relock_status_name(st),
                 relock_async_error(a)->message);
    return a;
}

static relock_client *blocking(const char *fencing)
{
    relock_config *cfg = cluster_config(fencing);
    relock_client *c = NULL;
    relock_status st = relock_connect(cfg, &c);
    relock_config_free(cfg);
    if (st != RELOCK_OK)
        fail_msg("connect: %s", relock_client_error(c)->message);
    return c;
}

static outcome *try_acquire(relock_async *a, const char *name, outcome *o)
{
    memset(o, 0, sizeof *o);
    assert_int_equal(relock_async_try_acquire(a, name, 30000, record, o, NULL), RELOCK_OK);
    return finish(o, 20000);
}

static void must(const outcome *o, const char *what)
{
    if (o->st != RELOCK_OK)
        fail_msg("%s: %s: %s", what, relock_status_name(o->st), o->msg);
}

static void release_ok(relock_lock *l)
{
    outcome o = {0};
    assert_int_equal(relock_async_release(l, record, &o), RELOCK_OK);
    must(finish(&o, 20000), "release");
    relock_lock_free(l);
}

static void extend_ok(relock_lock *l, long long ttl)
{
    outcome o = {0};
    assert_int_equal(relock_async_extend(l, ttl, record, &o), RELOCK_OK);
    must(finish(&o, 20000), "extend");
}

static long long moved_total(void)
{
    long long n = 0;
    for (int i = 0; i < N; i++)
        n += info_num(i, "errorstats", "errorstat_MOVED:count=");
    return n;
}

static long long ask_calls(int i)
{
    return info_num(i, "commandstats", "cmdstat_asking:calls=");
}

/* Names on every node: each lock's keys are where its slot lives; a
 * blocking client through the same cluster contends on the same keys. */
static void test_keys_everywhere(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = async_client(&lp, "true");
    relock_client *c = blocking("true");
    long long moved = 0;
    char names[N][64];
    for (int i = 0; i < N; i++) /* testcluster_owner(&cluster, ) itself meets MOVED on node 0 */
        testcluster_name_on(&cluster, i, "ev", names[i], sizeof names[i]);
    /* The asynchronous client's watch marker, sent before its first
     * attempt while the map is still unknown, meets a MOVED of its own
     * unless node 0 serves it. */
    char wk[128];
    assert_int_equal(relock__watch_key("", wk, sizeof wk), 0);
    long long watch_moved = testcluster_owner(&cluster, wk) != 0;
    long long moved0 = moved_total();
    for (int round = 0; round < 2; round++) {
        /* The first MOVED (node 1's name) makes each client read the whole
         * slot map: node 2's name meets none; nor does the second round. */
        if (round == 1) {
            moved = moved_total();
            assert_int_equal(moved - moved0, 2 + watch_moved);
        }
        for (int i = 0; i < N; i++) {
            const char *name = names[i];
            outcome o;
            must(try_acquire(a, name, &o), "acquire");
            relock_lock *l = o.l;
            char *v = get_on(i, name);
            assert_string_equal(v, relock_lock_value(l));
            free(v);
            relock_lock *bl = NULL;
            assert_int_equal(relock_try_acquire(c, name, 5000, &bl), RELOCK_BUSY);
            long long f = relock_lock_fence(l);
            release_ok(l);
            if (relock_try_acquire(c, name, 5000, &bl) != RELOCK_OK)
                fail_msg("blocking acquire %s: %s", name, relock_client_error(c)->message);
            assert_true(relock_lock_fence(bl) > f);
            assert_int_equal(try_acquire(a, name, &o)->st, RELOCK_BUSY);
            assert_int_equal(relock_release(bl), RELOCK_OK);
            relock_lock_free(bl);
        }
    }
    assert_int_equal(moved_total(), moved);
    /* Many in flight at once, over every node. */
    enum { M = 60 };
    static outcome many[M];
    memset(many, 0, sizeof many);
    long done = 0;
    for (int k = 0; k < M; k++) {
        char name[32];
        snprintf(name, sizeof name, "many%d", k);
        assert_int_equal(relock_async_try_acquire(a, name, 30000, record, &many[k], NULL),
                         RELOCK_OK);
    }
    uint64_t end = tu_now_ms() + 20000;
    while (done < M && tu_now_ms() < end) {
        loop_once();
        done = 0;
        for (int k = 0; k < M; k++)
            done += many[k].calls;
    }
    assert_int_equal(done, M);
    for (int k = 0; k < M; k++) {
        must(&many[k], "acquire of many");
        release_ok(many[k].l);
    }
    relock_client_free(c);
    relock_async_free(a);
    loop_fini();
}

static void test_slot_migration(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = async_client(&lp, "true");
    relock_async *a3 = async_client(&lp, "false");
    char name[64], fkey[128];
    int s = 1, t = 2, x = 0; /* source, target, the third */
    testcluster_name_on(&cluster, s, "amig", name, sizeof name);
    assert_int_equal(relock__fence_key(name, fkey, sizeof fkey), 0);
    outcome o;
    must(try_acquire(a, name, &o), "acquire");
    relock_lock *l = o.l;
    long long f1 = relock_lock_fence(l);
    char *v = testsrv_cmd(&node[0], "CLUSTER KEYSLOT %s", name);
    int slot = atoi(v);
    free(v);
    char sl[16];
    snprintf(sl, sizeof sl, "%d", slot);

    /* Start moving the slot from s to t, and move both keys. */
    v = testsrv_cmd(&node[t], "CLUSTER SETSLOT %s IMPORTING %s", sl, ids[s]);
    expect_ok(t, v);
    free(v);
    v = testsrv_cmd(&node[s], "CLUSTER SETSLOT %s MIGRATING %s", sl, ids[t]);
    expect_ok(s, v);
    free(v);
    extend_ok(l, 30000);
    /* The lock key alone first: a script over both keys meets TRYAGAIN
     * on t (after ASK), and gives up after the bounded redirections with
     * the blocking client's message, having changed nothing. */
    char tport[16];
    snprintf(tport, sizeof tport, "%d", node[t].port);
    v = testsrv_cmd(&node[s], "MIGRATE 127.0.0.1 %s %s 0 5000 KEYS %s", tport, "", name);
    expect_ok(s, v);
    free(v);
    relock_async *a2 = async_client(&lp, "true");
    try_acquire(a2, name, &o);
    assert_int_equal(o.st, RELOCK_EIO);
    if (!strstr(o.msg, "still redirected after 5 redirections (last: TRYAGAIN"))
        fail_msg("split keys: %s", o.msg);
    relock_async_free(a2);
    /* A one-key command is served through ASK meanwhile. */
    extend_ok(l, 35000);
    v = testsrv_cmd(&node[s], "MIGRATE 127.0.0.1 %s %s 0 5000 KEYS %s", tport, "", fkey);
    expect_ok(s, v);
    free(v);

    /* s answers ASK: the extend goes to t once, after ASKING. */
    long long ask0 = ask_calls(t);
    extend_ok(l, 40000);
    assert_true(ask_calls(t) > ask0);
    assert_true(asking_pttl(t, name) > 30000);

    /* A new lock in the migrating slot (no fencing: one key) is acquired
     * and released on t through ASK; a blocking client meets it there. */
    char tagged[80];
    snprintf(tagged, sizeof tagged, "{%s}new", name);
    ask0 = ask_calls(t);
    must(try_acquire(a3, tagged, &o), "acquire during the migration");
    relock_lock *l3 = o.l;
    assert_true(ask_calls(t) > ask0);
    assert_true(asking_pttl(t, tagged) > 0);
    relock_client *c = blocking("false");
    relock_lock *bl = NULL;
    assert_int_equal(relock_try_acquire(c, tagged, 5000, &bl), RELOCK_BUSY);
    release_ok(l3);
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

    /* MOVED takes the client to t, where the lock still is ours. */
    extend_ok(l, 30000);
    assert_true(asking_pttl(t, name) > 20000);
    assert_int_equal(relock_try_acquire(c, name, 5000, &bl), RELOCK_BUSY);
    release_ok(l);
    v = get_on(t, name);
    assert_string_equal(v, "(nil)");
    free(v);
    /* The fence counter moved with the lock: the next token is larger. */
    must(try_acquire(a, name, &o), "acquire after the migration");
    assert_true(relock_lock_fence(o.l) > f1);
    v = get_on(t, fkey);
    assert_int_equal(atoll(v), relock_lock_fence(o.l));
    free(v);
    release_ok(o.l);
    if (relock_try_acquire(c, name, 5000, &bl) != RELOCK_OK)
        fail_msg("blocking acquire: %s", relock_client_error(c)->message);
    assert_int_equal(try_acquire(a, name, &o)->st, RELOCK_BUSY);
    assert_int_equal(relock_release(bl), RELOCK_OK);
    relock_lock_free(bl);
    relock_client_free(c);
    relock_async_free(a3);
    relock_async_free(a);
    loop_fini();
}

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

/* Runs op until it ends otherwise than RELOCK_EIO or RELOCK_EAMBIGUOUS
 * (failures while the failover goes on), bounded to 30 s; its outcome. */
typedef relock_status (*start_fn)(void *arg, outcome *o);
static outcome retry(start_fn start, void *arg, int *fails)
{
    uint64_t end = tu_now_ms() + 30000;
    outcome o;
    do {
        memset(&o, 0, sizeof o);
        assert_int_equal(start(arg, &o), RELOCK_OK);
        finish(&o, 30000);
        if (o.st != RELOCK_EIO && o.st != RELOCK_EAMBIGUOUS)
            return o;
        assert_true(o.msg[0] != 0);
        (*fails)++;
        uint64_t pause = tu_now_ms() + 200;
        while (tu_now_ms() < pause)
            loop_once();
    } while (tu_now_ms() < end);
    fail_msg("still failing after 30 s: %s: %s", relock_status_name(o.st), o.msg);
    return o;
}

typedef struct acq_arg {
    relock_async *a;
    const char *name;
} acq_arg;

static relock_status start_acquire(void *arg, outcome *o)
{
    acq_arg *x = arg;
    return relock_async_try_acquire(x->a, x->name, 30000, record, o, NULL);
}

static relock_status start_extend(void *arg, outcome *o)
{
    return relock_async_extend(arg, 60000, record, o);
}

/* Client connections node i has now (its own INFO's among them). */
static long long clients_on(int i)
{
    return info_num(i, "clients", "connected_clients:");
}

/*
 * cluster.slot_map = false, as the blocking client has it: no map is read
 * and the client keeps one connection, which moves at every MOVED; locks
 * on each master in turn meet a MOVED at every switch, and afterwards one
 * connection is open, to the node the last MOVED named, where the next
 * operation starts (no MOVED).
 */
static void test_map_off(void **state)
{
    (void)state;
    char names[N][64];
    for (int i = 0; i < N; i++)
        testcluster_name_on(&cluster, i, "aoff", names[i], sizeof names[i]);
    long long slots0 = 0, open0[N];
    for (int i = 0; i < N; i++) {
        slots0 += info_num(i, "commandstats", "cmdstat_cluster|slots:calls=");
        open0[i] = clients_on(i);
    }
    relock_async_loop lp;
    loop_init(&lp);
    relock_config *cfg = cluster_config("true");
    assert_int_equal(relock_config_set(cfg, "cluster.slot_map", "false"), RELOCK_OK);
    relock_async *a = NULL;
    if (relock_async_new(cfg, &lp, &a) != RELOCK_OK)
        fail_msg("relock_async_new: %s", relock_async_error(a)->message);
    relock_config_free(cfg);
    long long moved0 = moved_total();
    outcome o;
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < N; i++) {
            must(try_acquire(a, names[i], &o), "acquire");
            release_ok(o.l);
        }
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
        long never = 0;
        run_until(&never, 1, 50);
    }
    for (int i = 0; i < N; i++)
        if (open[i] != (i == N - 1))
            fail_msg("node %d: %lld connections of the client (expected %d)", i, open[i],
                     i == N - 1);
    moved0 = moved_total();
    must(try_acquire(a, names[N - 1], &o), "acquire");
    release_ok(o.l);
    assert_int_equal(moved_total(), moved0);
    relock_async_free(a);
    loop_fini();
}

/* Acquires and releases one after another, on a name of each master in
 * turn, until told to stop. */
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

/*
 * cluster.slot_map = false: a scan walks every master (a connection to
 * each as it comes to it) while the same client's acquires and releases
 * go to each master in turn, the one connection moving at every MOVED and
 * the connections left behind closing as soon as nothing uses them: the
 * walk is exact and complete, no operation fails, and afterwards the
 * client has one connection, to the node of the last MOVED.
 */
static void test_map_off_scan(void **state)
{
    (void)state;
    char names[N][64], tags[N][64];
    for (int i = 0; i < N; i++) {
        testcluster_name_on(&cluster, i, "aoffs", names[i], sizeof names[i]);
        testcluster_name_on(&cluster, i, "aofft", tags[i], sizeof tags[i]);
        struct timeval tv = {5, 0};
        redisContext *ctx = redisConnectWithTimeout("127.0.0.1", node[i].port, tv);
        assert_true(ctx && !ctx->err);
        for (int k = 0; k < 300; k++)
            freeReplyObject(redisCommand(ctx, "SET aso:{%s}:%d 1000000000", tags[i], k));
        redisFree(ctx);
    }
    long long open0[N];
    for (int i = 0; i < N; i++)
        open0[i] = clients_on(i);
    relock_async_loop lp;
    loop_init(&lp);
    relock_config *cfg = cluster_config("true");
    assert_int_equal(relock_config_set(cfg, "cluster.slot_map", "false"), RELOCK_OK);
    relock_async *a = NULL;
    if (relock_async_new(cfg, &lp, &a) != RELOCK_OK)
        fail_msg("relock_async_new: %s", relock_async_error(a)->message);
    relock_config_free(cfg);
    hopper h = {a, (const char (*)[64])names, 0, 1, 0, 0, ""};
    assert_int_equal(relock_async_try_acquire(a, names[0], 10000, hop_acquired, &h, NULL),
                     RELOCK_OK);
    scan_out so = {0};
    assert_int_equal(relock_async_scan(a, "aso:*", NULL, NULL, scan_end, &so), RELOCK_OK);
    uint64_t end = tu_now_ms() + 30000;
    while (tu_now_ms() < end && !so.calls)
        loop_once();
    h.stop = 1;
    while (tu_now_ms() < end && h.running)
        loop_once();
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
        long never = 0;
        run_until(&never, 1, 50);
    }
    if (extra != 1)
        fail_msg("%lld connections of the client (expected 1)", extra);
    relock_async_free(a);
    loop_fini();
    for (int i = 0; i < N; i++) {
        struct timeval tv = {5, 0};
        redisContext *ctx = redisConnectWithTimeout("127.0.0.1", node[i].port, tv);
        assert_true(ctx && !ctx->err);
        for (int k = 0; k < 300; k++)
            freeReplyObject(redisCommand(ctx, "DEL aso:{%s}:%d", tags[i], k));
        redisFree(ctx);
    }
}

/* Subscribers to name's release channel on node i (PUBSUB NUMSUB). */
static long long subscribers_on(int i, const char *name)
{
    char chan[128];
    snprintf(chan, sizeof chan, "%s" RELOCK__NOTIFY_SUFFIX, name);
    char *v = testsrv_cmd(&node[i], "PUBSUB NUMSUB %s", chan);
    assert_non_null(v);
    const char *sp = strrchr(v, ' '); /* testsrv joins an array's elements by spaces */
    long long n = atoll(sp ? sp + 1 : v);
    free(v);
    return n;
}

/*
 * A waiter on a lock of node 2 subscribes for its release notice on node 2,
 * the lock's master, as the blocking waiter does (the configured node 0
 * and node 1 get no subscriber), and the holder's release wakes it: its
 * backoff and the holder's lease are far longer than its bound.  With the
 * slot map and without.
 */
static void test_notice_on_master(void **state)
{
    (void)state;
    char name[64];
    testcluster_name_on(&cluster, 2, "anotice", name, sizeof name);
    for (int map = 1; map >= 0; map--) {
        relock_async_loop lp;
        loop_init(&lp);
        relock_async *h = async_client(&lp, "true");
        relock_config *cfg = cluster_config("true");
        assert_int_equal(relock_config_set(cfg, "wait.backoff_max_ms", "60000"), RELOCK_OK);
        assert_int_equal(relock_config_set(cfg, "wait.backoff_min_ms", "30000"), RELOCK_OK);
        assert_int_equal(relock_config_set(cfg, "cluster.slot_map", map ? "true" : "false"),
                         RELOCK_OK);
        relock_async *w = NULL;
        if (relock_async_new(cfg, &lp, &w) != RELOCK_OK)
            fail_msg("relock_async_new: %s", relock_async_error(w)->message);
        relock_config_free(cfg);
        outcome o, waiter = {0};
        memset(&o, 0, sizeof o);
        assert_int_equal(relock_async_try_acquire(h, name, 60000, record, &o, NULL), RELOCK_OK);
        must(finish(&o, 20000), "acquire");
        long long before[N];
        for (int i = 0; i < N; i++)
            before[i] = subscribers_on(i, name);
        assert_int_equal(relock_async_acquire(w, name, 20000, 10000, record, &waiter, NULL),
                         RELOCK_OK);
        uint64_t end = tu_now_ms() + 10000;
        while (subscribers_on(2, name) <= before[2] && waiter.calls == 0 && tu_now_ms() < end)
            run_until(&waiter.calls, 1, 20);
        for (int i = 0; i < N; i++)
            if (subscribers_on(i, name) != before[i] + (i == 2))
                fail_msg("slot map %s: node %d has %lld subscribers (expected %lld)",
                         map ? "on" : "off", i, subscribers_on(i, name), before[i] + (i == 2));
        uint64_t t0 = tu_now_ms();
        release_ok(o.l);
        finish(&waiter, 20000);
        must(&waiter, "waiter");
        print_message("slot map %s: woken %llu ms after the release\n", map ? "on" : "off",
                      (unsigned long long)(waiter.at - t0));
        release_ok(waiter.l);
        relock_async_free(w);
        relock_async_free(h);
        loop_fini();
    }
}

/*
 * A master killed while a lock on it is held: operations on its slots
 * fail with RELOCK_EIO naming it until its replica takes over; the other
 * masters' locks are not affected; then the holder's extend reaches the
 * replica, where the lock (replicated before the kill) is still held, a
 * second client stays out until its release, and the fence goes on
 * increasing.  Runs last: the cluster has one master fewer afterwards.
 */
static void test_failover(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = async_client(&lp, "true");
    relock_async *b = async_client(&lp, "true");
    char name[64], other_name[64];
    testcluster_name_on(&cluster, 1, "afo", name, sizeof name);
    testcluster_name_on(&cluster, 0, "afo", other_name, sizeof other_name);
    outcome o;
    must(try_acquire(a, name, &o), "acquire");
    relock_lock *l = o.l;
    must(try_acquire(a, other_name, &o), "acquire");
    relock_lock *k = o.l;
    long long f1 = relock_lock_fence(l);
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

    int mport = node[1].port;
    kill(node[1].pid, SIGKILL);
    testsrv_stop(&node[1]);

    /* Before the replica takes over (cluster-node-timeout 2 s): an error
     * that names the dead master. */
    try_acquire(b, name, &o);
    char where[64];
    snprintf(where, sizeof where, "connect to 127.0.0.1:%d: Connection refused", mport);
    if (o.st != RELOCK_EIO || strcmp(o.msg, where) != 0)
        fail_msg("during the failover: %s: %s", relock_status_name(o.st), o.msg);
    print_message("during the failover: %s\n", o.msg);
    extend_ok(k, 60000);

    /* The replica takes over (until then the cluster may answer
     * CLUSTERDOWN, which no client follows). */
    end = tu_now_ms() + 30000;
    while (!(is_master(0, R) && is_master(2, R)) && tu_now_ms() < end)
        tu_sleep_ms(50);
    assert_true(is_master(0, R));
    const int alive[] = {0, 2, R};
    for (int i = 0; i < 3; i++)
        assert_int_equal(await_reply(alive[i], "CLUSTER", "INFO", "cluster_state:ok"), 0);

    /* The holder's extend reaches the replica at once: its map still
     * names the dead master, whose connect fails; the operation, which
     * sent nothing yet, goes where the map, forgetting that node, leads
     * (MOVED to the replica). */
    int fails = 0;
    o = retry(start_extend, l, &fails);
    must(&o, "extend after the failover");
    assert_int_equal(fails, 0);
    fails = 0;
    acq_arg x = {b, name};
    o = retry(start_acquire, &x, &fails);
    assert_int_equal(o.st, RELOCK_BUSY);
    release_ok(l);
    char *v = get_on(R, name);
    assert_string_equal(v, "(nil)");
    free(v);
    must(try_acquire(b, name, &o), "acquire after the release");
    assert_true(relock_lock_fence(o.l) > f1);
    release_ok(o.l);
    release_ok(k);
    relock_async_free(b);
    relock_async_free(a);
    loop_fini();
}

static long long wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * legacy.clock = "server" over the cluster: each lock's timestamp is
 * written by the clock of the node holding it (node[SKEWED] runs 10
 * minutes ahead), as the blocking client keeps an estimate per node's
 * connection.  With one estimate for the client, the node measured last
 * lent its clock to the others.
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
    relock_async_loop lp;
    loop_init(&lp);
    relock_config *cfg = cluster_config("false");
    assert_int_equal(relock_config_set(cfg, "mode", "legacy"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "legacy.clock", "server"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "legacy.clock_unit", "ms"), RELOCK_OK);
    relock_async *a = NULL;
    relock_status st = relock_async_new(cfg, &lp, &a);
    relock_config_free(cfg);
    if (st != RELOCK_OK)
        fail_msg("relock_async_new: %s", relock_async_error(a)->message);
    const int on[2] = {SKEWED, 0};
    char names[2][64];
    for (int k = 0; k < 2; k++)
        testcluster_name_on(&cluster, on[k], "aclk", names[k], sizeof names[k]);
    /* both nodes' connections open and the map known (the first lock
     * starts at node[0], its clock read there before the MOVED) */
    for (int k = 0; k < 2; k++) {
        outcome o;
        must(try_acquire(a, names[k], &o), "acquire");
        relock_lock_free(o.l);
        char *r = testsrv_cmd(&node[on[k]], "DEL %s", names[k]);
        free(r);
    }
    const long long ttl = 30000;
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < 2; k++) {
            long long skew = on[k] == SKEWED ? SKEW_MS : 0;
            long long before = wall_ms();
            outcome o;
            memset(&o, 0, sizeof o);
            assert_int_equal(relock_async_try_acquire(a, names[k], ttl, record, &o, NULL),
                             RELOCK_OK);
            must(finish(&o, 20000), "acquire");
            long long after = wall_ms();
            char *v = get_on(on[k], names[k]);
            long long ts = atoll(v);
            if (!(ts >= before + skew + ttl - 3000 && ts <= after + skew + ttl + 3000))
                fail_msg("round %d, node %d: wrote %s, its clock + ttl is about %lld", round,
                         on[k], v, after + skew + ttl);
            free(v);
            release_ok(o.l);
        }
    relock_async_free(a);
    loop_fini();
}

/*
 * A legacy holder met on one node: the marker key that tells `relock
 * scan` a legacy writer is about is written on the node serving the
 * marker's own slot, as the blocking client's write (which follows MOVED)
 * puts it there.
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
    testcluster_name_on(&cluster, m, "amk-near", near, sizeof near);
    testcluster_name_on(&cluster, at, "amk", name, sizeof name);
    for (int round = 0; round < 2; round++) {
        char *r = testsrv_cmd(&node[m], "DEL %s", mk);
        free(r);
        /* a legacy holder, live for a minute (seconds, no TTL) */
        snprintf(v, sizeof v, "%lld", wall_ms() / 1000 + 60);
        r = testsrv_cmd(&node[at], "SET %s %s", name, v);
        free(r);
        if (round == 0) {
            /* the blocking client, for comparison */
            relock_client *c = blocking("false");
            relock_lock *bl = NULL;
            assert_int_equal(relock_try_acquire(c, name, 5000, &bl), RELOCK_BUSY);
            relock_client_free(c);
        } else {
            relock_async_loop lp;
            loop_init(&lp);
            relock_async *a = async_client(&lp, "false");
            /* the marker's node is connected and the map known */
            outcome o;
            must(try_acquire(a, near, &o), "acquire");
            release_ok(o.l);
            assert_int_equal(try_acquire(a, name, &o)->st, RELOCK_BUSY);
            long never = 0; /* the marker's reply comes meanwhile */
            run_until(&never, 1, 300);
            relock_async_free(a);
            loop_fini();
        }
        r = testsrv_cmd(&node[m], "EXISTS %s", mk);
        assert_non_null(r);
        if (strcmp(r, "1") != 0)
            fail_msg("%s client: no marker on node %d after a legacy holder on node %d (%s)",
                     round ? "async" : "blocking", m, at, r);
        free(r);
        r = testsrv_cmd(&node[at], "DEL %s", name);
        free(r);
    }
}

/*
 * The watch marker (scan's evidence that upgraded clients watch) lands on
 * the node serving its own slot, as the blocking client's SETNX (which
 * follows MOVED) puts it there: a client given only node 0 writes it
 * once it has a connection to that node, here after a lock on every node.
 */
static void test_watch_on_its_node(void **state)
{
    (void)state;
    char wk[128];
    assert_int_equal(relock__watch_key("", wk, sizeof wk), 0);
    int m = testcluster_owner(&cluster, wk);
    char *r = testsrv_cmd(&node[m], "DEL %s", wk);
    free(r);
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = async_client(&lp, "false");
    char name[64];
    outcome o;
    for (int i = 0; i < N; i++) {
        testcluster_name_on(&cluster, i, "awt", name, sizeof name);
        must(try_acquire(a, name, &o), "acquire");
        release_ok(o.l);
    }
    long never = 0; /* the marker's reply comes meanwhile */
    run_until(&never, 1, 300);
    relock_async_free(a);
    loop_fini();
    r = testsrv_cmd(&node[m], "GET %s", wk);
    assert_non_null(r);
    long long at = atoll(r);
    if (at < (long long)time(NULL) * 1000 - 60000)
        fail_msg("no watch marker on node %d after locks on every node (%s)", m, r);
    free(r);
}

/*
 * Durability over the cluster: WAIT goes on the connection of the write
 * (node[1] has a replica).  A lock whose slot the client does not know yet
 * is written after a MOVED, on another connection than the attempt's
 * first: refused, as by the blocking client.  A write that met TRYAGAIN
 * (a half-migrated slot) and went again on the same connection is
 * counted there: acknowledged, as by the blocking client.
 */
static void test_durable_tryagain(void **state)
{
    (void)state;
    /* A key prefix whose watch marker (written once by each client before
     * its first attempt) lives on node[0], the node both clients start
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
        snprintf(name, sizeof name, "adt%d", i);
        snprintf(key, sizeof key, "%s%s", prefix, name);
        if (testcluster_owner(&cluster, key) == 1)
            break;
    }
    relock_config *cfg = cluster_config("true");
    assert_int_equal(relock_config_set(cfg, "key_prefix", prefix), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "durability.replicas", "1"), RELOCK_OK);
    relock_client *c = NULL;
    if (relock_connect(cfg, &c) != RELOCK_OK)
        fail_msg("connect: %s", relock_client_error(c)->message);
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = NULL;
    if (relock_async_new(cfg, &lp, &a) != RELOCK_OK)
        fail_msg("relock_async_new: %s", relock_async_error(a)->message);
    relock_config_free(cfg);
    /* the first lock on node[1] meets MOVED: refused by both clients */
    relock_lock *bl = NULL;
    relock_status bst = relock_try_acquire(c, name, 30000, &bl);
    if (bst != RELOCK_EDURABILITY)
        fail_msg("blocking, after MOVED: %s: %s", relock_status_name(bst),
                 relock_client_error(c)->message);
    outcome o;
    if (try_acquire(a, name, &o)->st != RELOCK_EDURABILITY)
        fail_msg("async, after MOVED: %s: %s", relock_status_name(o.st), o.msg);
    /* the map known: acknowledged; the fence counter stays behind */
    must(try_acquire(a, name, &o), "acquire");
    release_ok(o.l);
    char *sl = testsrv_cmd(&node[1], "CLUSTER KEYSLOT %s", key);
    assert_non_null(sl);
    int ok = 0;
    for (int tries = 0; tries < 3 && !ok; tries++) {
        /* the slot migrating to node[2] with only the fence counter
         * still on node[1]: the acquire's script (lock and counter) meets
         * TRYAGAIN until the migration is called off */
        char *v = testsrv_cmd(&node[2], "CLUSTER SETSLOT %s IMPORTING %s", sl, ids[1]);
        expect_ok(2, v);
        free(v);
        v = testsrv_cmd(&node[1], "CLUSTER SETSLOT %s MIGRATING %s", sl, ids[2]);
        expect_ok(1, v);
        free(v);
        long long tryagain = info_num(1, "errorstats", "errorstat_TRYAGAIN:count=");
        memset(&o, 0, sizeof o);
        assert_int_equal(relock_async_try_acquire(a, name, 30000, record, &o, NULL), RELOCK_OK);
        uint64_t end = tu_now_ms() + 10000;
        while (o.calls == 0 && tu_now_ms() < end &&
               info_num(1, "errorstats", "errorstat_TRYAGAIN:count=") == tryagain)
            loop_once();
        for (int i = 1; i <= 2; i++) {
            v = testsrv_cmd(&node[i], "CLUSTER SETSLOT %s STABLE", sl);
            expect_ok(i, v);
            free(v);
        }
        finish(&o, 20000);
        if (o.st == RELOCK_EIO && strstr(o.msg, "TRYAGAIN"))
            continue; /* called off after the client's last try: again */
        if (o.st != RELOCK_OK)
            fail_msg("async, after TRYAGAIN: %s: %s", relock_status_name(o.st), o.msg);
        ok = 1;
        release_ok(o.l);
    }
    assert_true(ok);
    /* the blocking client, the same way (a child calls the migration off) */
    ok = 0;
    for (int tries = 0; tries < 3 && !ok; tries++) {
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
        bl = NULL;
        bst = relock_try_acquire(c, name, 30000, &bl);
        int status = tu_wait_child(pid, 20000);
        assert_true(status >= 0 && WIFEXITED(status));
        const char *msg = relock_client_error(c)->message;
        if (bst == RELOCK_EIO && strstr(msg, "TRYAGAIN"))
            continue;
        if (bst != RELOCK_OK)
            fail_msg("blocking, after TRYAGAIN: %s: %s", relock_status_name(bst), msg);
        ok = 1;
        assert_int_equal(relock_release(bl), RELOCK_OK);
        relock_lock_free(bl);
    }
    free(sl);
    assert_true(ok);
    assert_true(info_num(1, "errorstats", "errorstat_TRYAGAIN:count=") > 0);
    relock_async_free(a);
    loop_fini();
    relock_client_free(c);
}

/* Owner records over the cluster: the record beside a lock on each
 * node (its slot), written after the acquire that met MOVED and after
 * those routed by the map, deleted by the release. */
static void test_owner_records(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_config *cfg = cluster_config("true");
    assert_int_equal(relock_config_set(cfg, "owner_info", "true"), RELOCK_OK);
    assert_int_equal(relock_config_set_owner(cfg, 0, "acl-owner"), RELOCK_OK);
    relock_async *a = NULL;
    if (relock_async_new(cfg, &lp, &a) != RELOCK_OK)
        fail_msg("relock_async_new: %s", relock_async_error(a)->message);
    relock_config_free(cfg);
    for (int round = 0; round < 2; round++)
        for (int i = N - 1; i >= 0; i--) {
            char name[64], rkey[96];
            testcluster_name_on(&cluster, i, "aown", name, sizeof name);
            snprintf(rkey, sizeof rkey, "{%s} relock:owner", name);
            outcome o;
            must(try_acquire(a, name, &o), "acquire");
            char *v = get_on(i, rkey);
            if (!strstr(v, " acl-owner"))
                fail_msg("round %d, node %d: the record is \"%s\"", round, i, v);
            free(v);
            release_ok(o.l);
            v = testsrv_cmd(&node[i], "EXISTS %s", rkey);
            assert_non_null(v);
            assert_string_equal(v, "0");
            free(v);
        }
    relock_async_free(a);
    loop_fini();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_everywhere),
        cmocka_unit_test(test_slot_migration),
        cmocka_unit_test(test_clock_per_node),
        cmocka_unit_test(test_marker_on_its_node),
        cmocka_unit_test(test_watch_on_its_node),
        cmocka_unit_test(test_durable_tryagain),
        cmocka_unit_test(test_owner_records),
        cmocka_unit_test(test_map_off),
        cmocka_unit_test(test_map_off_scan),
        cmocka_unit_test(test_notice_on_master),
        cmocka_unit_test(test_failover),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
