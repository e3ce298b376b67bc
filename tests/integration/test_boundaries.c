/*
 * Every command boundary of every multi-command operation, enumerated.
 *
 * For each personality of the compat proxy and each mode it supports, each
 * operation (release, extend, break --if-value, acquire of a free key,
 * takeover of an expired legacy holder) is first run once to count the
 * commands it sends.  Then, for each boundary k (after the reply to its
 * k-th command) and each fault, the operation runs again from the same
 * start with the proxy acting exactly there:
 *
 *   lost-reply   command k ran, its reply never arrives (the connection
 *                closes instead);
 *   dead-after   the reply arrives, then the connection closes: command
 *                k + 1 meets a dead connection;
 *   write        another client writes between command k and k + 1 (a new
 *                holder after a break, a classic client's SETNX, a rival
 *                takeover);
 *   write-dead   the same write while the connection sits idle longer
 *                than relock's idle check, then the connection closes (a server's
 *                CLIENT KILL of a stalled client): the case where a silent
 *                reconnect inside WATCH or MULTI made a compare-and-delete
 *                unconditional;
 *   error-reply  command k never runs: the server answers it -LOADING.
 *                The operation must fail with RELOCK_EPROTO (or succeed
 *                where the command was only a best-effort notice), never
 *                report the lock lost, and a lock handle (after a break,
 *                the client) must stay usable: the same operation again,
 *                without faults, succeeds.
 *
 * After each run the invariants are checked on the real server: the other
 * client's value is never overwritten or deleted, no two holders, fences
 * strictly increase, RELOCK_OK is only claimed for what happened, and
 * RELOCK_EIO only for what did not (RELOCK_EAMBIGUOUS may be anything).
 * The extend is to a shorter lease than the lock's, and whatever its
 * outcome the validity left must not exceed the new lease.
 *
 * Built with BOUNDARIES_NATIVE (ctest it_boundaries_native), the targets
 * are modern mode on the newer servers' personalities (native commands)
 * and on servers without Lua (the proxy's --no-lua), whose acquire,
 * release and extend are WATCH, GET, MULTI, the writes and EXEC.
 *
 * On 2.0 (no WATCH, no EVAL) a new holder's write in the middle of a
 * release or extend is not enumerated: there relock relies on its validity
 * (nobody can take a live lock over), the window docs/legacy.md states.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "boundary.h"
#include "internal.h" /* relock__fence_key */
#include "relock.h"
#include "testclient.h"
#include "testutil.h"

enum op { OP_RELEASE, OP_EXTEND, OP_BREAK, OP_ACQUIRE, OP_TAKEOVER, NOPS };
static const char *const op_name[] = {"release", "extend", "break", "acquire", "takeover"};

typedef struct target {
    const char *pers;
    const char *mode;
    int plain; /* 2.0: no WATCH, no EVAL */
    int nolua; /* the proxy refuses EVAL, EVALSHA, SCRIPT, FUNCTION (--no-lua) */
} target;

/* A proxy: a personality, with Lua or without. */
typedef struct pers {
    const char *name;
    int nolua;
} pers;

#ifndef BOUNDARIES_NATIVE
static const target targets[] = {
    {"2.0", "legacy", 1, 0},   {"2.2", "legacy", 0, 0}, {"2.4", "legacy", 0, 0},
    {"2.6.0", "legacy", 0, 0}, {"2.6.0", "bridge", 0, 0}, {"7", "legacy", 0, 0},
    {"7", "bridge", 0, 0},     {"7", "modern", 0, 0},
};
static const pers personalities[] = {{"2.0", 0}, {"2.2", 0}, {"2.4", 0}, {"2.6.0", 0}, {"7", 0}};
#else
/*
 * it_boundaries_native: modern mode on the paths of newer servers and of
 * servers without Lua (decisions 97-99): the fenced acquire and the
 * takeover by WATCH, GET, MULTI, SET, INCR, EXEC without Lua; release by
 * DELIFEQ or DELEX IFEQ with its notice pipelined, or by WATCH/MULTI;
 * extend by SET IFEQ PX or WATCH/MULTI; break by WATCH/MULTI.
 */
static const target targets[] = {
    {"7", "modern", 0, 1},          {"valkey-8.1", "modern", 0, 0},
    {"valkey-8.1", "modern", 0, 1}, {"valkey-9.0", "modern", 0, 0},
    {"valkey-9.0", "modern", 0, 1}, {"redis-8.4", "modern", 0, 0},
    {"redis-8.4", "modern", 0, 1},
};
static const pers personalities[] = {{"7", 1},          {"valkey-8.1", 0}, {"valkey-8.1", 1},
                                     {"valkey-9.0", 0}, {"valkey-9.0", 1}, {"redis-8.4", 0},
                                     {"redis-8.4", 1}};
#endif
#define NTARGETS (sizeof targets / sizeof targets[0])
#define NPERS (sizeof personalities / sizeof personalities[0])
static testsrv proxies[NPERS];

/* Totals for the summary line. */
static int runs, held;

static int proxy_port(const target *t)
{
    for (size_t i = 0; i < NPERS; i++)
        if (strcmp(personalities[i].name, t->pers) == 0 && personalities[i].nolua == t->nolua)
            return proxies[i].port;
    fail_msg("no proxy for %s%s", t->pers, t->nolua ? " without Lua" : "");
    return -1;
}

static int group_setup(void **state)
{
    if (tu_setup_server(state) != 0)
        return -1;
    /* With a real server (RELOCK_TEST_SERVER), the personalities that
     * stand for it, through a proxy that imitates nothing (testsrv.h). */
    static const char *const nolua[] = {"--no-lua", NULL};
    for (size_t i = 0; i < NPERS; i++)
        if (testsrv_personality_runs(personalities[i].name) &&
            testsrv_start_proxy(&proxies[i], tu_srv.port, personalities[i].name,
                                personalities[i].nolua ? nolua : NULL) != 0)
            return -1;
    return 0;
}

static int group_teardown(void **state)
{
    for (size_t i = 0; i < NPERS; i++)
        testsrv_stop(&proxies[i]);
    return tu_teardown_server(state);
}

/* ------------------------------------------------------------ one run */

typedef struct scene {
    const target *t;
    enum op op;
    char name[64];
    char key[RELOCK__KEY_MAX];
    char fkey[RELOCK__KEY_MAX];
    relock_client *a; /* runs the operation */
    relock_lock *l;   /* release, extend: the lock it holds */
    char value[RELOCK__VALUE_MAX]; /* break: the value to break */
    char expired[32]; /* takeover: the dead holder's value */
    long long fence0; /* the counter before the operation */
} scene;

static int seq;

/* The extend's new lease, shorter than the 30 s acquired: the server may
 * hold it after any fault once the write was sent. */
#define EXTEND_MS 20000

static relock_client *client(const target *t)
{
    const char *const settings[] = {"legacy.clock_unit", "s", NULL};
    return tu_client(proxy_port(t), t->mode, settings);
}

static void scene_start(scene *s, const target *t, enum op op)
{
    memset(s, 0, sizeof *s);
    s->t = t;
    s->op = op;
    snprintf(s->name, sizeof s->name, "bnd%d", ++seq);
    snprintf(s->key, sizeof s->key, "%s", s->name);
    assert_int_equal(relock__fence_key(s->key, s->fkey, sizeof s->fkey), 0);
    s->a = client(t);
    switch (op) {
    case OP_RELEASE:
    case OP_EXTEND:
        assert_int_equal(relock_acquire(s->a, s->name, 30000, 0, &s->l), RELOCK_OK);
        break;
    case OP_BREAK: {
        relock_client *h = client(t);
        relock_lock *hl = NULL;
        assert_int_equal(relock_acquire(h, s->name, 30000, 0, &hl), RELOCK_OK);
        snprintf(s->value, sizeof s->value, "%s", relock_lock_value(hl));
        relock_lock_free(hl); /* the holder is gone; its key stays */
        relock_client_free(h);
        break;
    }
    case OP_TAKEOVER:
        snprintf(s->expired, sizeof s->expired, "%lld", (long long)time(NULL) - 100);
        bnd_do(tu_srv.port, "SET %s %s", s->key, s->expired);
        break;
    case OP_ACQUIRE:
    case NOPS:
        break;
    }
    char v[RELOCK__VALUE_MAX];
    bnd_look(tu_srv.port, s->key, s->fkey, v, sizeof v, &s->fence0);
}

static relock_status scene_run(scene *s)
{
    relock_lock *got = NULL;
    relock_status st = RELOCK_EINVAL;
    switch (s->op) {
    case OP_RELEASE:
        st = relock_release(s->l);
        break;
    case OP_EXTEND:
        /* To a shorter lease than the acquire's: whatever the fault, the
         * validity must never exceed the new lease (see one()). */
        st = relock_extend(s->l, EXTEND_MS);
        break;
    case OP_BREAK:
        st = relock_break(s->a, s->name, s->value);
        break;
    case OP_ACQUIRE:
    case OP_TAKEOVER:
        st = relock_try_acquire(s->a, s->name, 30000, &got);
        if (got) {
            s->l = got;
        }
        break;
    case NOPS:
        break;
    }
    return st;
}

static void scene_end(scene *s)
{
    relock_lock_free(s->l);
    relock_client_free(s->a);
}

/* The commands the operation sends, from its start to its end. */
static long long count_commands(const target *t, enum op op)
{
    scene s;
    scene_start(&s, t, op);
    int pport = proxy_port(t);
    bnd_arm(pport, 0, BND_WRITE);
    relock_status st = scene_run(&s);
    long long n = bnd_replies(pport);
    if (st != RELOCK_OK)
        fail_msg("%s%s %s %s without faults: %s", t->pers, t->nolua ? " (no Lua)" : "",
                 t->mode, op_name[op], relock_status_name(st));
    scene_end(&s);
    return n;
}

#define CHECK(cond, fmt, ...)                                                                 \
    do {                                                                                      \
        if (!(cond))                                                                          \
            fail_msg("%s%s %s %s, boundary %lld, %s: " fmt, t->pers,                        \
                     t->nolua ? " (no Lua)" : "", t->mode, op_name[op], k, bnd_fault_name[f],     \
                     ##__VA_ARGS__);                                                          \
    } while (0)

static void one(const target *t, enum op op, long long k, enum bnd_fault f)
{
    scene s;
    scene_start(&s, t, op);
    int pport = proxy_port(t);
    char ours[RELOCK__VALUE_MAX] = "";
    if (s.l)
        snprintf(ours, sizeof ours, "%s", relock_lock_value(s.l));

    bnd_other o;
    memset(&o, 0, sizeof o);
    int writer = f == BND_WRITE || f == BND_WRITE_DEAD;
    bnd_arm(pport, k, f);
    if (writer)
        bnd_other_start(&o, tu_srv.port, pport, k,
                        op == OP_ACQUIRE    ? BND_RIVAL_SETNX
                        : op == OP_TAKEOVER ? BND_RIVAL_TAKEOVER
                                            : BND_RIVAL_SET,
                        s.key, s.fkey, s.expired);
    relock_status st = scene_run(&s);
    if (writer)
        bnd_other_join(&o);
    bnd_disarm(pport);

    char v[RELOCK__VALUE_MAX];
    long long fence;
    bnd_look(tu_srv.port, s.key, s.fkey, v, sizeof v, &fence);
    const char *sn = relock_status_name(st);
    runs++;
    /* An extend, whatever its outcome, never leaves more validity than
     * the server may hold: the shorter new lease, counted from the
     * extend's start (so at most EXTEND_MS now). */
    if (op == OP_EXTEND)
        CHECK(relock_lock_validity_ms(s.l) <= EXTEND_MS,
              "%s, and the validity is %lld ms, above the new lease's %d", sn,
              relock_lock_validity_ms(s.l), EXTEND_MS);

    if (f == BND_ERROR) {
        CHECK(st == RELOCK_EPROTO || st == RELOCK_OK, "an error reply gave %s", sn);
        if (st == RELOCK_EPROTO) {
            /* Nothing changed, and the handle is still good. */
            const char *before = op == OP_BREAK      ? s.value
                                 : op == OP_ACQUIRE  ? ""
                                 : op == OP_TAKEOVER ? s.expired
                                                     : ours;
            CHECK(strcmp(v, before) == 0, "EPROTO, yet the key changed to \"%s\"", v);
            relock_status again = RELOCK_OK;
            if (op == OP_RELEASE)
                again = relock_release(s.l);
            if (op == OP_EXTEND)
                again = relock_extend(s.l, 30000);
            /* The client too: a refused EXEC must not leave its
             * connection inside the server's MULTI. */
            if (op == OP_BREAK)
                again = relock_break(s.a, s.name, s.value);
            CHECK(again == RELOCK_OK, "the same call again after EPROTO: %s",
                  relock_status_name(again));
        } else if (op == OP_RELEASE || op == OP_BREAK) {
            CHECK(v[0] == '\0', "OK, yet the key holds \"%s\"", v);
        } else {
            CHECK(strcmp(v, relock_lock_value(s.l)) == 0, "OK, yet the key holds \"%s\"", v);
        }
        held++;
        scene_end(&s);
        return;
    }
    CHECK(st == RELOCK_OK || st == RELOCK_EIO || st == RELOCK_EAMBIGUOUS || st == RELOCK_LOST ||
              st == RELOCK_BUSY,
          "unexpected %s", sn);
    CHECK(fence >= s.fence0, "the fence went back from %lld to %lld", s.fence0, fence);
    /* Another client's value is never overwritten nor deleted by us. */
    if (o.wrote && (op == OP_RELEASE || op == OP_EXTEND || op == OP_BREAK))
        CHECK(strcmp(v, BND_OTHER_VALUE) == 0,
              "the other client's value was overwritten or deleted (key: \"%s\"; %s)", v, sn);
    switch (op) {
    case OP_RELEASE:
    case OP_BREAK:
        if (!o.wrote && st == RELOCK_OK)
            CHECK(v[0] == '\0', "%s, yet the key holds \"%s\"", sn, v);
        if (!o.wrote && st == RELOCK_EIO)
            CHECK(strcmp(v, op == OP_BREAK ? s.value : ours) == 0,
                  "EIO, yet the key changed to \"%s\"", v);
        if (!o.wrote)
            CHECK(st != RELOCK_LOST && st != RELOCK_BUSY, "%s though nobody else wrote", sn);
        break;
    case OP_EXTEND:
        if (!o.wrote && st == RELOCK_OK)
            CHECK(strcmp(v, relock_lock_value(s.l)) == 0, "OK, yet the key holds \"%s\"", v);
        if (!o.wrote && st == RELOCK_EIO)
            CHECK(strcmp(v, ours) == 0, "EIO, yet the key changed to \"%s\"", v);
        if (!o.wrote)
            CHECK(st != RELOCK_LOST && st != RELOCK_BUSY, "%s though nobody else wrote", sn);
        break;
    case OP_ACQUIRE:
    case OP_TAKEOVER:
        CHECK(!(st == RELOCK_OK && o.won), "two holders: we and the other client both won");
        if (st == RELOCK_OK) {
            CHECK(relock_lock_fence(s.l) > s.fence0, "fence %lld not above %lld",
                  relock_lock_fence(s.l), s.fence0);
            if (!o.wrote)
                CHECK(strcmp(v, relock_lock_value(s.l)) == 0, "OK, yet the key holds \"%s\"",
                      v);
        }
        /* On 2.0 a takeover is GETSET: a loser's write shifts the
         * winner's expiry (design.md §5.1), which no client there can avoid. */
        if (o.won && !(t->plain && op == OP_TAKEOVER))
            CHECK(strcmp(v, BND_OTHER_VALUE) == 0, "the other client's value was overwritten");
        if (st == RELOCK_EIO && !o.wrote)
            CHECK(op == OP_ACQUIRE ? v[0] == '\0' : strcmp(v, s.expired) == 0,
                  "EIO, yet the key changed to \"%s\"", v);
        break;
    case NOPS:
        break;
    }
    held++;
    scene_end(&s);
}

/* The pairs of boundary and fault the enumeration skips. */
static int skipped(const target *t, enum op op, long long k, long long n, enum bnd_fault f)
{
    /* 2.0 relies on validity against new holders (see top). */
    if (t->plain && (f == BND_WRITE || f == BND_WRITE_DEAD) && (op == OP_RELEASE || op == OP_EXTEND))
        return 1;
    /* 2.4 runs the code of 2.2: its replies are enumerated, the writers
     * only once.  The idle wait is only needed where a transaction is
     * open (boundaries 1..n-1). */
    if ((f == BND_WRITE || f == BND_WRITE_DEAD) && strcmp(t->pers, "2.4") == 0)
        return 1;
    return f == BND_WRITE_DEAD && k == n;
}

/* One target and operation, for bnd_enumerate(). */
typedef struct pass {
    const target *t;
    enum op op;
} pass;

static int pass_skip(void *ctx, long long k, long long n, enum bnd_fault f)
{
    pass *p = ctx;
    return skipped(p->t, p->op, k, n, f);
}

static void pass_run(void *ctx, long long k, enum bnd_fault f)
{
    pass *p = ctx;
    one(p->t, p->op, k, f);
}

/* RELOCK_TEST_REDUCED=1 (the sanitizer build in ./dev test, decision
 * 190): per target and operation, one fault at each boundary and then each
 * kind not yet run at its first boundary (bnd_enumerate()). */
static void enumerate(const target *t)
{
    for (int op = 0; op < NOPS; op++) {
        long long n = count_commands(t, (enum op)op);
        assert_true(n >= 1 && n < 40);
        pass p = {t, (enum op)op};
        int did = bnd_enumerate(n, op, pass_skip, pass_run, &p);
        print_message("%-10s %-6s %-7s %-8s %lld commands, %d faults\n", t->pers,
                      t->nolua ? "no-Lua" : "", t->mode, op_name[op], n, did);
    }
}

static void test_boundaries(void **state)
{
    (void)state;
    for (size_t i = 0; i < NTARGETS; i++)
        if (testsrv_personality_runs(targets[i].pers))
            enumerate(&targets[i]);
    print_message("%d runs, invariants held in %d%s\n", runs, held,
                  bnd_reduced() ? " (RELOCK_TEST_REDUCED=1: each boundary and each fault once)" : "");
    assert_int_equal(runs, held);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_boundaries),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
