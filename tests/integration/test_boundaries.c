/*
 * Every command boundary of every multi-command operation, enumerated,
 * through either entry point of the library (tests/support/both.c): the
 * blocking API, or the asynchronous one on libevent or libuv.
 *
 * For each personality of the compat proxy and each mode it supports, each
 * operation (try-acquire of a free key, takeover of an expired legacy
 * holder, release, extend; break --if-value through the blocking entry, one
 * renewal of a kept lock through the asynchronous one) is first run once to
 * count the commands it sends.  Then, for each boundary k (after the reply
 * to its k-th command) and each fault, the operation runs again from the
 * same start with the proxy acting exactly there:
 *
 *   lost-reply   command k ran, its reply never arrives (the connection
 *                closes instead);
 *   dead-after   the reply arrives, then the connection closes: command
 *                k + 1 meets a dead connection;
 *   write        another client writes between command k and k + 1 (a new
 *                holder after a break, a classic client's SETNX, a rival
 *                takeover);
 *   write-dead   the same write while the connection sits idle (longer
 *                than the blocking client's idle check), then the
 *                connection closes (a server's CLIENT KILL of a stalled
 *                client): the case where a silent reconnect inside WATCH or
 *                MULTI made a compare-and-delete unconditional;
 *   error-reply  command k never runs: the server answers it -LOADING.
 *                The operation must fail with RELOCK_EPROTO (or succeed
 *                where the command was only a best-effort notice), never
 *                report the lock lost, and a lock handle (after a break,
 *                the client) must stay usable: the same operation again,
 *                without faults, succeeds.
 *
 * After each run, on the real server and on the client: the other
 * client's value is never overwritten or deleted, no two holders, fences
 * strictly increase, RELOCK_OK is only claimed for what happened, and
 * RELOCK_EIO only for what did not (RELOCK_EAMBIGUOUS may be anything);
 * the extend, to a shorter lease than the lock's, leaves whatever its
 * outcome no more validity than the new lease; no connection is left
 * inside MULTI on the server and the client still works (another acquire
 * and release succeed); an asynchronous operation's callback is called
 * exactly once and nothing is left pending.  A renewal that met the other
 * client's write must end in its lost callback, one that met none go on.
 *
 * On 2.0 (no WATCH, no EVAL) a new holder's write in the middle of a
 * release, extend or renewal is not enumerated: there relock relies on its
 * validity (nobody can take a live lock over), the window docs/legacy.md
 * states.
 *
 * The program's arguments: the entry point (both.h) and the part:
 *   classic  the targets of the older servers and of scripts (default);
 *   native   modern mode on the newer servers' personalities (native
 *            commands) and on servers without Lua (the proxy's --no-lua),
 *            whose acquire, release and extend are WATCH, GET, MULTI, the
 *            writes and EXEC;
 *   own      the asynchronous entry's own scenarios (several operations
 *            in flight, a cancel at each boundary, callbacks that act on
 *            others, reconnects), on the targets of its own table column.
 * The blocking entry runs every target in full.  The asynchronous one runs
 * each target in full on one loop and reduced on the other (the driver is
 * the same on both, so the two together run the whole enumeration), the
 * targets the blocking entry alone ran before reduced on both.
 * RELOCK_TEST_REDUCED=1 runs the reduced enumeration of decision 190 for
 * all; against a real server (RELOCK_TEST_SERVER) every target runs in
 * full.  RELOCK_TEST_TARGET=P (a personality, "7-nolua" for 7 without
 * Lua) runs that target alone, RELOCK_TEST_ONLY=NAME one test function.
 */
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
#include "boundary.h"
#include "internal.h" /* relock__fence_key */
#include "relock.h"
#include "relock_async.h"
#include "testsrv.h"
#include "testutil.h"

static both_entry entry;
static testsrv srv;

enum op { OP_ACQUIRE, OP_TAKEOVER, OP_RELEASE, OP_EXTEND, OP_BREAK, OP_RENEW, NOPS };
static const char *const op_name[] = {"acquire", "takeover", "release",
                                      "extend",  "break",    "renewal"};

/* The operations each entry enumerates: break is the blocking API's
 * alone, and a renewal tick is observed on the asynchronous client only
 * (the blocking client's renewal thread has no end of a tick to wait
 * for). */
static int op_runs(enum op op)
{
    if (op == OP_BREAK)
        return entry == BOTH_BLOCKING;
    if (op == OP_RENEW)
        return entry == BOTH_ASYNC;
    return 1;
}

/* Where the asynchronous entry runs a target in full: on libevent, on
 * libuv, or on neither (reduced on both: the blocking entry runs it in
 * full and the asynchronous client's path for it is enumerated in full
 * on another target). */
enum full_on { ON_NEITHER, ON_LIBEVENT, ON_LIBUV };

typedef struct target {
    const char *pers;
    const char *mode;
    int plain;  /* 2.0: no WATCH, no EVAL */
    int nolua;  /* the proxy refuses EVAL, EVALSHA, SCRIPT, FUNCTION (--no-lua) */
    int native; /* the part "native" */
    enum full_on full;
    int own;    /* the asynchronous entry's own scenarios run on it */
} target;

/*
 * Legacy on 2.0 (MULTI without WATCH), 2.2 and 2.4 (WATCH), 2.6.0 and 7
 * (scripts), bridge and modern by scripts; modern without Lua (WATCH,
 * GET, MULTI, SET, INCR, EXEC), and with the native commands of valkey
 * 8.1 and 9.0 (DELIFEQ) and redis 8.4 (DELEX, SET IFEQ), with Lua or
 * without (decisions 97-99).  The asynchronous entry runs 2.4 only
 * against a real 2.4 (RELOCK_TEST_SERVER): relock runs the code of 2.2
 * there, which the proxy's 2.2 enumerates.  The full column shares the
 * asynchronous enumeration between the loops by cost.
 */
static const target targets[] = {
    {"2.0", "legacy", 1, 0, 0, ON_LIBEVENT, 1},
    {"2.2", "legacy", 0, 0, 0, ON_LIBUV, 1},
    {"2.4", "legacy", 0, 0, 0, ON_LIBEVENT, 1},
    {"2.6.0", "legacy", 0, 0, 0, ON_NEITHER, 0},
    {"2.6.0", "bridge", 0, 0, 0, ON_LIBUV, 1},
    {"7", "legacy", 0, 0, 0, ON_NEITHER, 0},
    {"7", "bridge", 0, 0, 0, ON_NEITHER, 0},
    {"7", "modern", 0, 0, 0, ON_LIBUV, 1},
    {"7", "modern", 0, 1, 1, ON_LIBEVENT, 1},
    {"valkey-8.1", "modern", 0, 0, 1, ON_NEITHER, 0},
    {"valkey-8.1", "modern", 0, 1, 1, ON_NEITHER, 0},
    {"valkey-9.0", "modern", 0, 0, 1, ON_LIBEVENT, 1},
    {"valkey-9.0", "modern", 0, 1, 1, ON_NEITHER, 0},
    {"redis-8.4", "modern", 0, 0, 1, ON_LIBUV, 1},
    {"redis-8.4", "modern", 0, 1, 1, ON_NEITHER, 0},
};
#define NTARGETS (sizeof targets / sizeof targets[0])
static testsrv proxies[NTARGETS];

/* The program's part: "classic", "native" or "own". */
static const char *part = "classic";

/* Whether target i belongs to this run: its part, and RELOCK_TEST_TARGET. */
static int target_selected(size_t i)
{
    const target *t = &targets[i];
    if (strcmp(part, "own") == 0 ? !t->own : t->native != (strcmp(part, "native") == 0))
        return 0;
    if (entry == BOTH_ASYNC && strcmp(t->pers, "2.4") == 0 && !testsrv_target_version())
        return 0;
    const char *only = getenv("RELOCK_TEST_TARGET");
    char name[32];
    snprintf(name, sizeof name, "%s%s", t->pers, t->nolua ? "-nolua" : "");
    return !only || !only[0] || strcmp(only, name) == 0;
}

/* Whether target i runs: selected, and its proxy started. */
static int target_runs(size_t i)
{
    return target_selected(i) && proxies[i].pid;
}

/* Whether the environment asked for the reduced enumeration (the sanitizer
 * build); read once, before the per-target choice below changes it. */
static int env_reduced;

/* Sets what bnd_reduced() reads for target i: the blocking entry runs it
 * in full, the asynchronous one as the target's full column says for
 * this loop; against a real server (the matrix runs one loop) all of it. */
static void target_reduce(size_t i)
{
    int full = entry == BOTH_BLOCKING || testsrv_target_version() ||
               targets[i].full == (strcmp(both_entry_name(entry), "async-libuv") == 0
                                       ? ON_LIBUV
                                       : ON_LIBEVENT);
    setenv("RELOCK_TEST_REDUCED", env_reduced || !full ? "1" : "0", 1);
}

static int proxy_port(const target *t)
{
    return proxies[t - targets].port;
}

/* The operation's end: bounded well past command_timeout_ms (1000 ms) and
 * the proxy's longest hold. */
#define OP_BOUND_MS 10000

/* A client of the program's entry on port: legacy values in seconds, as
 * the takeover's expired holder is written, except for renewals (unit
 * ms): a lease of 750 ms in whole seconds would leave no validity to
 * renew in. */
static both_client *client_unit(int port, const char *mode, const char *unit)
{
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", mode), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "legacy.clock_unit", unit), RELOCK_OK);
    both_client *c = NULL;
    relock_status st = both_connect(entry, cfg, &c);
    relock_config_free(cfg);
    if (st != RELOCK_OK)
        fail_msg("connect (%s, %s, port %d): %s", both_entry_name(entry), mode, port,
                 both_error(c));
    return c;
}

/* One acquire on c, run to its end; the lock on OK. */
static relock_status acquire_now(both_client *c, const char *name, long long ttl_ms,
                                 relock_lock **out)
{
    relock_status st = both_try_acquire(c, name, ttl_ms, out);
    if (st != RELOCK_OK)
        *out = NULL;
    return st;
}

static relock_status release_now(both_client *c, relock_lock *l)
{
    return both_release(c, l);
}

/* Connections inside MULTI on the real server (CLIENT LIST's flag x),
 * waited for a moment: a connection the client dropped is closed by the
 * proxy soon after.  0 where CLIENT LIST is missing (before 2.4). */
static int in_multi(void)
{
    if (!testsrv_target_at_least(2, 4, 0))
        return 0;
    int n = 0;
    uint64_t end = tu_now_ms() + 2000;
    do {
        redisReply *r = bnd_cmd(srv.port, "CLIENT LIST");
        n = 0;
        for (const char *p = r->type == REDIS_REPLY_STRING ? r->str : ""; (p = strstr(p, " flags="));
             p++) {
            const char *f = p + 7;
            size_t len = strcspn(f, " ");
            if (memchr(f, 'x', len))
                n++;
        }
        freeReplyObject(r);
        if (n)
            tu_sleep_ms(20);
    } while (n && tu_now_ms() < end);
    return n;
}

/* The asynchronous client whose loop the entry's own parts turn. */
static both_client *cur;

static void loop_once(void)
{
    both_turn(cur);
}

/* Runs cur's loop until *flag reaches want or ms pass; returns *flag. */
static long run_until(const long *flag, long want, long ms)
{
    uint64_t end = tu_now_ms() + (uint64_t)ms;
    while (*flag < want && tu_now_ms() < end)
        loop_once();
    return *flag;
}

/* Runs cur's loop for ms. */
static void run_for(long ms)
{
    both_idle(cur, ms);
}

/* ------------------------------------------------------------ one run */

typedef struct scene {
    const target *t;
    enum op op;
    char name[64];
    char key[RELOCK__KEY_MAX];
    char fkey[RELOCK__KEY_MAX];
    both_client *c;
    relock_lock *l;                /* release, extend, renewal: the lock it holds;
                                      acquire, takeover: the lock won */
    char ours[RELOCK__VALUE_MAX];  /* release, extend, renewal: its value then */
    char value[RELOCK__VALUE_MAX]; /* break: the value to break */
    char expired[32];              /* takeover: the dead holder's value */
    long long fence0;              /* the counter before the operation */
    relock_status st;              /* how the operation ended */
    int ended;                     /* it ended within the bound (a renewal: its tick) */
    lostrec lost;                  /* a renewal's lost callback */
} scene;

static int seq;

/* The renewal's lease: renewed every 250 ms, retried every 75 ms after a
 * failure, with about 500 ms to spare when the loop is slow (a loaded
 * machine).  Each renewal run waits for a tick, so the lease sets the
 * enumeration's pace. */
#define RENEW_TTL 750

/* The extend's new lease, shorter than the 30 s acquired: the server may
 * hold it after any fault once the write was sent. */
#define EXTEND_MS 20000

static void scene_start(scene *s, const target *t, enum op op)
{
    memset(s, 0, sizeof *s);
    s->t = t;
    s->op = op;
    snprintf(s->name, sizeof s->name, "bnd%d", ++seq);
    snprintf(s->key, sizeof s->key, "%s", s->name);
    assert_int_equal(relock__fence_key(s->key, s->fkey, sizeof s->fkey), 0);
    s->c = client_unit(proxy_port(t), t->mode, op == OP_RENEW ? "ms" : "s");
    cur = s->c;
    char warm[80];
    relock_lock *wl = NULL;
    switch (op) {
    case OP_RELEASE:
    case OP_EXTEND:
    case OP_RENEW:
        assert_int_equal(acquire_now(s->c, s->name, op == OP_RENEW ? RENEW_TTL : 30000, &s->l),
                         RELOCK_OK);
        snprintf(s->ours, sizeof s->ours, "%s", relock_lock_value(s->l));
        break;
    case OP_BREAK: {
        both_client *h = client_unit(proxy_port(t), t->mode, "s");
        relock_lock *hl = NULL;
        assert_int_equal(acquire_now(h, s->name, 30000, &hl), RELOCK_OK);
        snprintf(s->value, sizeof s->value, "%s", relock_lock_value(hl));
        relock_lock_free(hl); /* the holder is gone; its key stays */
        both_free(h);
        break;
    }
    case OP_TAKEOVER:
        snprintf(s->expired, sizeof s->expired, "%lld", (long long)time(NULL) - 100);
        bnd_do(srv.port, "SET %s %s", s->key, s->expired);
        /* fall through */
    case OP_ACQUIRE:
        /* connected and probed before the count starts: the asynchronous
         * client connects at its first operation, the blocking one did at
         * relock_connect() */
        if (entry == BOTH_BLOCKING)
            break;
        snprintf(warm, sizeof warm, "%s-warm", s->name);
        assert_int_equal(acquire_now(s->c, warm, 30000, &wl), RELOCK_OK);
        assert_int_equal(release_now(s->c, wl), RELOCK_OK);
        relock_lock_free(wl);
        break;
    case NOPS:
        break;
    }
    char v[RELOCK__VALUE_MAX];
    bnd_look(srv.port, s->key, s->fkey, v, sizeof v, &s->fence0);
}

/* Runs the operation to its end; for a renewal, its first tick's end. */
static void scene_run(scene *s)
{
    relock_lock *got = NULL;
    s->ended = 1;
    switch (s->op) {
    case OP_ACQUIRE:
    case OP_TAKEOVER:
        s->st = both_try_acquire(s->c, s->name, 30000, &got);
        s->l = got;
        break;
    case OP_RELEASE:
        s->st = both_release(s->c, s->l);
        break;
    case OP_EXTEND:
        /* To a shorter lease than the acquire's: whatever the fault, the
         * validity must never exceed the new lease (see one()). */
        s->st = both_extend(s->c, s->l, EXTEND_MS);
        break;
    case OP_BREAK:
        s->st = relock_break(both_sync(s->c), s->name, s->value);
        break;
    case OP_RENEW: {
        relock_async *a = both_async(s->c);
        assert_int_equal(relock_async_keep(s->l, record_lost, &s->lost), RELOCK_OK);
        /* the tick's extend starts, then ends */
        uint64_t end = tu_now_ms() + OP_BOUND_MS;
        while (relock_async_pending(a) == 0 && s->lost.calls == 0 && tu_now_ms() < end)
            loop_once();
        while (relock_async_pending(a) > 0 && tu_now_ms() < end)
            loop_once();
        s->ended = relock_async_pending(a) == 0 && tu_now_ms() < end;
        break;
    }
    case NOPS:
        break;
    }
}

static void scene_end(scene *s)
{
    relock_lock_free(s->l);
    both_free(s->c);
    cur = NULL;
}

/* The commands the operation sends, from its start to its end. */
static long long count_commands(const target *t, enum op op)
{
    scene s;
    scene_start(&s, t, op);
    int pport = proxy_port(t);
    bnd_arm(pport, 0, BND_WRITE);
    scene_run(&s);
    long long n = bnd_replies(pport);
    if (!s.ended || (op != OP_RENEW && s.st != RELOCK_OK) || s.lost.calls)
        fail_msg("%s%s %s %s without faults: %s: %s", t->pers, t->nolua ? " (no Lua)" : "",
                 t->mode, op_name[op], relock_status_name(s.st), both_error(s.c));
    if (op == OP_RENEW)
        assert_int_equal(relock_async_keep_stop(s.l), RELOCK_OK);
    scene_end(&s);
    return n;
}

/* A failed check is reported and the run counted as failed; the
 * enumeration goes on, so one run shows every hole at once. */
static int runs, held, bad;
#define CHECK(cond, fmt, ...)                                                                 \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            print_error("FAIL %s: %s%s %s %s, boundary %lld, %s: " fmt "\n",                  \
                        both_entry_name(entry), t->pers, t->nolua ? " (no Lua)" : "",         \
                        t->mode, op_name[op], k, bnd_fault_name[f], ##__VA_ARGS__);           \
            bad = 1;                                                                          \
        }                                                                                     \
    } while (0)

/* The run's end: counted as held when no check failed. */
static void run_end(void)
{
    if (!bad)
        held++;
    bad = 0;
}

/* The asynchronous entry's renewal after the fault: it met the other
 * client's write and must end in a lost callback (at the latest when a
 * retry reads the key), never go on; or it met none and goes on (a failed
 * tick is retried after a tenth of the lease, a good one renewed after a
 * third): a later renewal moves the validity's end past where it was when
 * the faulted tick ended.  Its status: keep_stop's. */
static relock_status renewal_after(scene *s, const bnd_other *o, long long k, enum bnd_fault f)
{
    const target *t = s->t;
    const enum op op = OP_RENEW;
    if (o->wrote) {
        run_until(&s->lost.calls, 1, 3 * RENEW_TTL);
    } else {
        uint64_t v0 = tu_now_ms() + (uint64_t)relock_lock_validity_ms(s->l);
        uint64_t end = tu_now_ms() + 3 * RENEW_TTL;
        while (tu_now_ms() + (uint64_t)relock_lock_validity_ms(s->l) <= v0 + 50 &&
               s->lost.calls == 0 && tu_now_ms() < end)
            loop_once();
        CHECK(s->lost.calls || tu_now_ms() + (uint64_t)relock_lock_validity_ms(s->l) > v0 + 50,
              "nobody else wrote, yet no renewal succeeded after the fault within %d ms",
              3 * RENEW_TTL);
    }
    CHECK(s->lost.calls <= 1, "lost called %ld times", s->lost.calls);
    relock_status ks = relock_async_keep_stop(s->l);
    if (o->wrote) {
        CHECK(s->lost.calls == 1 && ks == RELOCK_LOST,
              "the other client wrote, yet the renewal goes on (lost %ld, keep_stop %s)",
              s->lost.calls, relock_status_name(ks));
    } else {
        CHECK(s->lost.calls == 0 && ks == RELOCK_OK,
              "nobody else wrote, yet the renewal ended (lost %ld: %s: %s)", s->lost.calls,
              relock_status_name(s->lost.why), s->lost.msg);
    }
    return ks;
}

static void one(const target *t, enum op op, long long k, enum bnd_fault f)
{
    scene s;
    scene_start(&s, t, op);
    int pport = proxy_port(t);
    bnd_other o;
    memset(&o, 0, sizeof o);
    int writer = f == BND_WRITE || f == BND_WRITE_DEAD;
    bnd_arm(pport, k, f);
    if (writer)
        bnd_other_start(&o, srv.port, pport, k,
                        op == OP_ACQUIRE    ? BND_RIVAL_SETNX
                        : op == OP_TAKEOVER ? BND_RIVAL_TAKEOVER
                                            : BND_RIVAL_SET,
                        s.key, s.fkey, s.expired);
    uint64_t t0 = tu_now_ms();
    scene_run(&s);
    uint64_t took = tu_now_ms() - t0;
    if (writer)
        bnd_other_join(&o);
    bnd_disarm(pport);
    runs++;
    relock_status st = s.st;
    const char *msg = both_error(s.c);
    /* Nothing hangs: the operation (an asynchronous one's callback, once:
     * both.c fails the test otherwise) or the renewal's tick ends within
     * the bound. */
    CHECK(s.ended && took <= OP_BOUND_MS, "the operation took %llu ms, past %d",
          (unsigned long long)took, OP_BOUND_MS);
    if (op == OP_RENEW)
        st = renewal_after(&s, &o, k, f);
    const char *sn = relock_status_name(st);
    /* a few more turns: no second callback, nothing pending (the
     * blocking client has no loop to turn) */
    if (entry == BOTH_ASYNC)
        both_idle(s.c, 30);
    CHECK(both_late_callbacks(s.c) == 0, "a callback was called again");
    CHECK(both_pending(s.c) == 0, "%ld operations still pending", both_pending(s.c));

    char v[RELOCK__VALUE_MAX];
    long long fence;
    bnd_look(srv.port, s.key, s.fkey, v, sizeof v, &fence);
    const char *before = op == OP_ACQUIRE    ? ""
                         : op == OP_TAKEOVER ? s.expired
                         : op == OP_BREAK    ? s.value
                                             : s.ours;
    CHECK(fence >= s.fence0, "the fence went back from %lld to %lld", s.fence0, fence);
    /* An extend, whatever its outcome, never leaves more validity than
     * the server may hold: the shorter new lease, counted from the
     * extend's start (so at most EXTEND_MS now). */
    if (op == OP_EXTEND)
        CHECK(relock_lock_validity_ms(s.l) <= EXTEND_MS,
              "%s, and the validity is %lld ms, above the new lease's %d", sn,
              relock_lock_validity_ms(s.l), EXTEND_MS);
    if (f == BND_ERROR) {
        CHECK(st == RELOCK_EPROTO || st == RELOCK_OK, "an error reply gave %s: %s", sn, msg);
        if (st == RELOCK_EPROTO)
            CHECK(strcmp(v, before) == 0, "EPROTO, yet the key changed to \"%s\"", v);
        if (st == RELOCK_EPROTO && (op == OP_RELEASE || op == OP_EXTEND || op == OP_BREAK)) {
            /* The handle is still good; after a break, the client: a
             * refused EXEC must not leave its connection inside the
             * server's MULTI. */
            relock_status again = op == OP_RELEASE ? both_release(s.c, s.l)
                                  : op == OP_EXTEND
                                      ? both_extend(s.c, s.l, 30000)
                                      : relock_break(both_sync(s.c), s.name, s.value);
            CHECK(again == RELOCK_OK, "the same call again after EPROTO: %s: %s",
                  relock_status_name(again), both_error(s.c));
            if (op != OP_EXTEND)
                bnd_look(srv.port, s.key, s.fkey, v, sizeof v, &fence);
        } else if (st == RELOCK_OK && (op == OP_RELEASE || op == OP_BREAK)) {
            CHECK(v[0] == '\0', "OK, yet the key holds \"%s\"", v);
        } else if (st == RELOCK_OK) {
            CHECK(s.l && strcmp(v, relock_lock_value(s.l)) == 0, "OK, yet the key holds \"%s\"",
                  v);
        }
    } else {
        CHECK(st == RELOCK_OK || st == RELOCK_EIO || st == RELOCK_EAMBIGUOUS ||
                  st == RELOCK_LOST || st == RELOCK_BUSY,
              "unexpected %s: %s", sn, msg);
        /* Another client's value is never overwritten nor deleted by us. */
        if (o.wrote && op != OP_ACQUIRE && op != OP_TAKEOVER)
            CHECK(strcmp(v, BND_OTHER_VALUE) == 0,
                  "the other client's value was overwritten or deleted (key: \"%s\"; %s)", v, sn);
        switch (op) {
        case OP_RELEASE:
        case OP_BREAK:
            if (!o.wrote && st == RELOCK_OK)
                CHECK(v[0] == '\0', "%s, yet the key holds \"%s\"", sn, v);
            /* fall through */
        case OP_EXTEND:
        case OP_RENEW:
            if (!o.wrote && st == RELOCK_OK && op != OP_RELEASE && op != OP_BREAK)
                CHECK(strcmp(v, relock_lock_value(s.l)) == 0, "OK, yet the key holds \"%s\"", v);
            if (!o.wrote && st == RELOCK_EIO)
                CHECK(strcmp(v, before) == 0, "EIO, yet the key changed to \"%s\"", v);
            if (!o.wrote)
                CHECK(st != RELOCK_LOST && st != RELOCK_BUSY, "%s though nobody else wrote: %s",
                      sn, msg);
            break;
        case OP_ACQUIRE:
        case OP_TAKEOVER:
            CHECK(!(st == RELOCK_OK && o.won), "two holders: we and the other client both won");
            if (st == RELOCK_OK) {
                CHECK(relock_lock_fence(s.l) > s.fence0, "fence %lld not above %lld",
                      relock_lock_fence(s.l), s.fence0);
                if (!o.wrote)
                    CHECK(strcmp(v, relock_lock_value(s.l)) == 0,
                          "OK, yet the key holds \"%s\"", v);
            }
            /* On 2.0 a takeover is GETSET: a loser's write shifts the
             * winner's expiry (design.md §5.1), which no client there can
             * avoid. */
            if (o.won && !(t->plain && op == OP_TAKEOVER))
                CHECK(strcmp(v, BND_OTHER_VALUE) == 0, "the other client's value was overwritten");
            if (st == RELOCK_EIO && !o.wrote)
                CHECK(strcmp(v, before) == 0, "EIO, yet the key changed to \"%s\"", v);
            if (!o.wrote)
                CHECK(st != RELOCK_BUSY && st != RELOCK_LOST, "%s though nobody else wrote: %s",
                      sn, msg);
            break;
        case NOPS:
            break;
        }
    }
    /* No connection left inside MULTI, and the client still works. */
    CHECK(in_multi() == 0, "a connection was left inside MULTI on the server");
    char next[80];
    snprintf(next, sizeof next, "%s-next", s.name);
    relock_lock *nl = NULL;
    relock_status ast = acquire_now(s.c, next, 30000, &nl);
    /* The blocking client finds a connection closed right after the
     * operation's last reply only at the next call's first command, which
     * fails with RELOCK_EIO where it opens a transaction (no reconnect
     * inside one); the call after that connects again. */
    if (entry == BOTH_BLOCKING && ast == RELOCK_EIO)
        ast = acquire_now(s.c, next, 30000, &nl);
    CHECK(ast == RELOCK_OK, "the next acquire on the client: %s: %s", relock_status_name(ast),
          both_error(s.c));
    if (nl) {
        relock_status rst = release_now(s.c, nl);
        CHECK(rst == RELOCK_OK, "the next release on the client: %s", relock_status_name(rst));
        relock_lock_free(nl);
    }
    run_end();
    scene_end(&s);
}

/* The pairs of boundary and fault the enumeration skips. */
static int skipped(const target *t, enum op op, long long k, long long n, enum bnd_fault f)
{
    int writer = f == BND_WRITE || f == BND_WRITE_DEAD;
    /* 2.0 relies on validity against new holders (see top). */
    if (t->plain && writer && (op == OP_RELEASE || op == OP_EXTEND || op == OP_RENEW))
        return 1;
    /* 2.4 runs the code of 2.2: its replies are enumerated, the writers
     * only once (the blocking entry, through the proxy).  The idle wait
     * is only needed where a transaction is open (boundaries 1..n-1). */
    if (entry == BOTH_BLOCKING && writer && strcmp(t->pers, "2.4") == 0)
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

/* Runs body on each target this run covers (target_runs()), reduced as
 * target_reduce() says, and checks that the invariants held in every run
 * the body made. */
static void over_targets(void (*body)(size_t i, const target *t))
{
    runs = held = 0;
    for (size_t i = 0; i < NTARGETS; i++) {
        if (!target_runs(i))
            continue;
        target_reduce(i);
        body(i, &targets[i]);
    }
    print_message("%s: %d runs, invariants held in %d%s\n", both_entry_name(entry), runs, held,
                  env_reduced ? " (RELOCK_TEST_REDUCED=1)" : "");
    assert_int_equal(runs, held);
}

static void enumerate_on(size_t i, const target *t)
{
    (void)i;
    for (int op = 0; op < NOPS; op++) {
        if (!op_runs((enum op)op))
            continue;
        long long n = count_commands(t, (enum op)op);
        assert_true(n >= 1 && n < 40);
        pass p = {t, (enum op)op};
        int did = bnd_enumerate(n, op, pass_skip, pass_run, &p);
        print_message("%-10s %-6s %-7s %-8s %lld commands, %d faults%s\n", t->pers,
                      t->nolua ? "no-Lua" : "", t->mode, op_name[op], n, did,
                      bnd_reduced() ? " (reduced)" : "");
    }
}

static void test_boundaries(void **state)
{
    (void)state;
    over_targets(enumerate_on);
}
/* ------------------------------------------------------------ several in flight */

enum { NFLIGHT = 6 };

/*
 * Three try-acquires of free keys and three releases of held locks, sent in
 * one turn of the loop, pipelined on one connection; the connection closes
 * at boundary k (its reply lost, or after it).  Each operation gets its own
 * outcome, once: OK only for what happened on the server, EIO only for
 * what did not.
 */
static void flight(const target *t, long long k, enum bnd_fault f, long long *count)
{
    const enum op op = OP_ACQUIRE; /* for CHECK */
    int pport = proxy_port(t);
    both_client *bc = cur = client_unit(pport, t->mode, "s");
    relock_async *a = both_async(bc);
    char names[NFLIGHT][64];
    relock_lock *l[NFLIGHT] = {0};
    char ours[NFLIGHT][RELOCK__VALUE_MAX];
    outcome o[NFLIGHT];
    memset(o, 0, sizeof o);
    int nth = ++seq;
    for (int i = 0; i < NFLIGHT; i++) {
        snprintf(names[i], sizeof names[i], "afl%d-%d", nth, i);
        if (i >= NFLIGHT / 2) {
            assert_int_equal(acquire_now(bc, names[i], 30000, &l[i]), RELOCK_OK);
            snprintf(ours[i], sizeof ours[i], "%s", relock_lock_value(l[i]));
        }
    }
    bnd_arm(pport, count ? 0 : k, count ? BND_WRITE : f);
    for (int i = 0; i < NFLIGHT; i++) {
        if (i < NFLIGHT / 2)
            assert_int_equal(relock_async_try_acquire(a, names[i], 30000, record, &o[i], NULL),
                             RELOCK_OK);
        else
            assert_int_equal(relock_async_release(l[i], record, &o[i]), RELOCK_OK);
    }
    long done = 0;
    uint64_t end = tu_now_ms() + OP_BOUND_MS;
    while (done < NFLIGHT && tu_now_ms() < end) {
        loop_once();
        done = 0;
        for (int i = 0; i < NFLIGHT; i++)
            done += o[i].calls;
    }
    if (count)
        *count = bnd_replies(pport);
    bnd_disarm(pport);
    run_for(30);
    runs++;
    for (int i = 0; i < NFLIGHT; i++) {
        CHECK(o[i].calls == 1, "in flight %d: its callback was called %ld times", i, o[i].calls);
        char v[RELOCK__VALUE_MAX], fk[RELOCK__KEY_MAX];
        long long fence;
        assert_int_equal(relock__fence_key(names[i], fk, sizeof fk), 0);
        bnd_look(srv.port, names[i], fk, v, sizeof v, &fence);
        relock_status st = o[i].st;
        if (count)
            CHECK(st == RELOCK_OK, "in flight %d without faults: %s: %s", i,
                  relock_status_name(st), o[i].msg);
        CHECK(st == RELOCK_OK || st == RELOCK_EIO || st == RELOCK_EAMBIGUOUS,
              "in flight %d: %s: %s", i, relock_status_name(st), o[i].msg);
        if (i < NFLIGHT / 2) {
            if (st == RELOCK_OK)
                CHECK(strcmp(v, relock_lock_value(o[i].l)) == 0,
                      "in flight %d: acquire OK, yet the key holds \"%s\"", i, v);
            if (st == RELOCK_EIO)
                CHECK(v[0] == '\0', "in flight %d: acquire EIO, yet the key holds \"%s\"", i, v);
            relock_lock_free(o[i].l);
        } else {
            if (st == RELOCK_OK)
                CHECK(v[0] == '\0', "in flight %d: release OK, yet the key holds \"%s\"", i, v);
            if (st == RELOCK_EIO)
                CHECK(strcmp(v, ours[i]) == 0,
                      "in flight %d: release EIO, yet the key changed to \"%s\"", i, v);
            relock_lock_free(l[i]);
        }
    }
    CHECK(relock_async_pending(a) == 0, "%ld operations still pending", relock_async_pending(a));
    CHECK(in_multi() == 0, "a connection was left inside MULTI on the server");
    relock_lock *nl = NULL;
    char next[80];
    snprintf(next, sizeof next, "afl%d-next", nth);
    CHECK(acquire_now(bc, next, 30000, &nl) == RELOCK_OK, "the next acquire on the client failed");
    if (nl) {
        CHECK(release_now(bc, nl) == RELOCK_OK, "the next release on the client failed");
        relock_lock_free(nl);
    }
    run_end();
    both_free(bc);
    cur = NULL;
}

static void in_flight_on(size_t i, const target *t)
{
    (void)i;
    long long n = 0;
    flight(t, 0, BND_WRITE, &n);
    assert_true(n >= NFLIGHT && n < 200);
    int did = 0;
    /* each boundary once, the two faults in turn (both at the first);
     * reduced, every other boundary */
    for (long long k = 1; k <= n; k++)
        for (int f = BND_LOST_REPLY; f <= BND_DEAD_AFTER; f++)
            if ((k + f) % 2 == 1 || k == 1) {
                if (bnd_reduced() && k % 4 > 1)
                    continue;
                flight(t, k, (enum bnd_fault)f, NULL);
                did++;
            }
    print_message("%-10s %-6s %-7s %d in flight: %lld commands, %d faults\n", t->pers,
                  t->nolua ? "no-Lua" : "", t->mode, NFLIGHT, n, did);
}

static void test_in_flight(void **state)
{
    (void)state;
    over_targets(in_flight_on);
}

/* ------------------------------------------------------------ cancel at each boundary */

/*
 * An acquire cancelled while the proxy holds the reply to its k-th
 * command: of a free key (its attempt wins, then is undone) or of a key a
 * blocking client holds (it waits: attempts, the subscription, the wake).
 * No faults: the outcome is RELOCK_ECANCELED, exactly once, and the key is
 * free or still the holder's.
 */
static void cancel_one(const target *t, int busy, long long k, long long *count)
{
    const enum op op = OP_ACQUIRE;
    const enum bnd_fault f = BND_WRITE;
    int pport = proxy_port(t);
    both_client *bc = cur = client_unit(pport, t->mode, "s");
    relock_async *a = both_async(bc);
    char name[64], warm[80];
    snprintf(name, sizeof name, "acn%d", ++seq);
    snprintf(warm, sizeof warm, "%s-warm", name);
    relock_lock *wl = NULL;
    assert_int_equal(acquire_now(bc, warm, 30000, &wl), RELOCK_OK);
    char holder[RELOCK__VALUE_MAX] = "";
    relock_lock *hl = NULL;
    if (busy) {
        /* the holder, through the same proxy (counted before the arm) */
        assert_int_equal(acquire_now(bc, name, 30000, &hl), RELOCK_OK);
        snprintf(holder, sizeof holder, "%s", relock_lock_value(hl));
    }
    assert_int_equal(release_now(bc, wl), RELOCK_OK);
    relock_lock_free(wl);
    if (count) {
        bnd_arm(pport, 0, BND_WRITE);
    } else {
        /* the reply to command k held long enough for the cancel to land */
        char kk[24];
        snprintf(kk, sizeof kk, "%lld", k);
        bnd_do(pport, "RELOCK-PROXY FAULT at-reply %s at-kind hold at-hold-ms %s", kk, "150");
    }
    outcome o = {0};
    relock_async_op *h = NULL;
    assert_int_equal(relock_async_acquire(a, name, 30000, busy ? 20000 : 0, record, &o, &h),
                     RELOCK_OK);
    uint64_t end = tu_now_ms() + OP_BOUND_MS;
    if (count) {
        /* the commands of one attempt (free), or of the waiting (busy):
         * its attempt, the subscription and a second attempt */
        if (busy)
            run_for(400);
        else
            run_until(&o.calls, 1, OP_BOUND_MS);
        *count = bnd_replies(pport);
    } else {
        while (bnd_replies(pport) < k && o.calls == 0 && tu_now_ms() < end)
            loop_once();
    }
    if (o.calls == 0)
        assert_int_equal(relock_async_cancel(h), RELOCK_OK);
    run_until(&o.calls, 1, OP_BOUND_MS);
    bnd_disarm(pport);
    run_for(30);
    runs++;
    char v[RELOCK__VALUE_MAX], fk[RELOCK__KEY_MAX];
    long long fence;
    assert_int_equal(relock__fence_key(name, fk, sizeof fk), 0);
    bnd_look(srv.port, name, fk, v, sizeof v, &fence);
    if (count && !busy) {
        CHECK(o.calls == 1 && o.st == RELOCK_OK, "without a cancel: %s", o.msg);
        relock_lock_free(o.l);
    } else {
        CHECK(o.calls == 1, "%s acquire cancelled: the callback was called %ld times",
              busy ? "waiting" : "free", o.calls);
        CHECK(o.st == RELOCK_ECANCELED, "%s acquire cancelled: %s: %s",
              busy ? "waiting" : "free", relock_status_name(o.st), o.msg);
        CHECK(strcmp(v, holder) == 0, "%s acquire cancelled: the key holds \"%s\", not \"%s\"",
              busy ? "waiting" : "free", v, holder);
    }
    CHECK(relock_async_pending(a) == 0, "%ld operations still pending", relock_async_pending(a));
    if (hl) {
        CHECK(release_now(bc, hl) == RELOCK_OK, "the holder's release failed");
        relock_lock_free(hl);
    }
    run_end();
    both_free(bc);
    cur = NULL;
}

static void cancel_on(size_t i, const target *t)
{
    (void)i;
    for (int busy = 0; busy < 2; busy++) {
        long long n = 0;
        cancel_one(t, busy, 0, &n);
        assert_true(n >= 1);
        /* A wait repeats its cycle (attempt, subscription or poll,
         * attempt): its first 12 boundaries cover it. */
        if (n > 12)
            n = 12;
        int did = 0;
        for (long long k = 1; k <= n; k++)
            if (!bnd_reduced() || k % 2 == 1 || k == n) {
                cancel_one(t, busy, k, NULL);
                did++;
            }
        print_message("%-10s %-6s %-7s cancel %-7s %lld commands, %d cancels\n", t->pers,
                      t->nolua ? "no-Lua" : "", t->mode, busy ? "waiting" : "free", n, did);
    }
}

static void test_cancel(void **state)
{
    (void)state;
    over_targets(cancel_on);
}

/* ------------------------------------------------------------ callbacks that act on others */

/*
 * Seven operations started in one turn, pipelined on one connection (three
 * try-acquires of free keys, a waiter on a held key, the release of that
 * key's lock, which wakes it, another release and an extend), and a kept
 * lock whose key was deleted (its renewal finds it lost): eight callback
 * points.  At one of them the callback cancels every acquire still
 * pending, releases a spare lock, frees the lock of another operation in
 * flight, or frees the client; meanwhile the proxy closes the connection,
 * loses a reply or answers -LOADING at a boundary that changes from run
 * to run, so the callbacks also run inside the walks of a failed
 * connection.  Every callback is called exactly once, nothing is left
 * pending, an OK is true on the server, and the client (when kept) still
 * works.
 */
enum react { RE_CANCEL, RE_RELEASE, RE_FREE_LOCK, RE_FREE_CLIENT, NREACT };
static const char *const react_name[] = {"cancel", "release", "free a lock", "free the client"};

enum { RE_NACQ = 3, RE_WAITER = 3, RE_RELH = 4, RE_REL = 5, RE_EXT = 6, RE_OPS = 7,
       RE_LOST = 7, RE_POINTS = 8 };

typedef struct reent reent;
typedef struct reslot {
    reent *r;
    int i;
} reslot;

struct reent {
    both_client *bc;
    relock_async *a;                 /* bc's, until a callback frees it */
    relock_async_op *h[RE_NACQ + 1]; /* the acquires, while pending */
    relock_lock *l[RE_OPS];          /* the locks of the releases and the extend */
    relock_lock *spare, *kept;
    outcome o[RE_OPS];
    outcome spare_o;
    int spare_started;
    lostrec lost;
    reslot slot[RE_POINTS];
    int at; /* the callback point that acts */
    enum react act;
    int acted;
};

static void re_act(reent *r, int i)
{
    if (i != r->at || r->acted || !r->a)
        return;
    r->acted = 1;
    switch (r->act) {
    case RE_CANCEL:
        for (int j = 0; j <= RE_WAITER; j++)
            if (j != i && r->o[j].calls == 0 && r->h[j])
                (void)relock_async_cancel(r->h[j]);
        break;
    case RE_RELEASE:
        r->spare_started = relock_async_release(r->spare, record, &r->spare_o) == RELOCK_OK;
        break;
    case RE_FREE_LOCK:
        for (int j = RE_RELH; j < RE_OPS; j++)
            if (j != i && r->o[j].calls == 0 && r->l[j]) {
                relock_lock_free(r->l[j]);
                r->l[j] = NULL;
                break;
            }
        break;
    case RE_FREE_CLIENT:
        both_free_async(r->bc);
        r->a = NULL;
        break;
    case NREACT:
        break;
    }
}

static void re_cb(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                  void *arg)
{
    reslot *s = arg;
    reent *r = s->r;
    record(a, st, l, e, &r->o[s->i]);
    if (s->i <= RE_WAITER)
        r->h[s->i] = NULL;
    re_act(r, s->i);
}

static void re_lost(relock_async *a, relock_lock *l, relock_status why, const relock_error *e,
                    void *arg)
{
    reslot *s = arg;
    record_lost(a, l, why, e, &s->r->lost);
    re_act(s->r, RE_LOST);
}

static void reentry(const target *t, int at, enum react act, int down, long long k,
                    enum bnd_fault f, long long *count)
{
    const enum op op = OP_ACQUIRE; /* for CHECK */
    int pport = proxy_port(t);
    reent r;
    memset(&r, 0, sizeof r);
    r.at = at;
    r.act = act;
    r.bc = cur = client_unit(pport, t->mode, "ms");
    r.a = both_async(r.bc);
    int nth = ++seq;
    char names[RE_OPS][64], spare[64], kname[64];
    for (int j = 0; j < RE_OPS; j++)
        snprintf(names[j], sizeof names[j], "are%d-%d", nth, j);
    snprintf(names[RE_WAITER], sizeof names[RE_WAITER], "are%d-%d", nth, RE_RELH);
    snprintf(spare, sizeof spare, "are%d-spare", nth);
    snprintf(kname, sizeof kname, "are%d-kept", nth);
    for (int j = RE_RELH; j < RE_OPS; j++)
        assert_int_equal(acquire_now(r.bc, names[j], 30000, &r.l[j]), RELOCK_OK);
    assert_int_equal(acquire_now(r.bc, spare, 30000, &r.spare), RELOCK_OK);
    /* A short lease: each run waits for its first renewal (a third of the
     * lease, less when the setup below was slow), which finds it lost. */
    assert_int_equal(acquire_now(r.bc, kname, 300, &r.kept), RELOCK_OK);
    for (int j = 0; j < RE_POINTS; j++) {
        r.slot[j].r = &r;
        r.slot[j].i = j;
    }
    freeReplyObject(bnd_cmd(srv.port, "DEL %s", kname)); /* its renewal finds it lost */
    if (down) {
        /* the operations queue for the reconnect, whose setup meets the
         * fault: the callbacks run inside the walk of the failed setup */
        freeReplyObject(bnd_cmd(srv.port, "CLIENT KILL TYPE normal"));
        run_for(30);
    }
    bnd_arm(pport, count ? 0 : k, count ? BND_WRITE : f);
    /* kept only now, with no turn of the loop before the operations
     * below are started: its renewal's timer fires after they are */
    assert_int_equal(relock_async_keep(r.kept, re_lost, &r.slot[RE_LOST]), RELOCK_OK);
    for (int j = 0; j < RE_NACQ; j++)
        assert_int_equal(relock_async_try_acquire(r.a, names[j], 30000, re_cb, &r.slot[j], &r.h[j]),
                         RELOCK_OK);
    assert_int_equal(relock_async_acquire(r.a, names[RE_WAITER], 30000, 3000, re_cb,
                                          &r.slot[RE_WAITER], &r.h[RE_WAITER]),
                     RELOCK_OK);
    assert_int_equal(relock_async_release(r.l[RE_RELH], re_cb, &r.slot[RE_RELH]), RELOCK_OK);
    assert_int_equal(relock_async_release(r.l[RE_REL], re_cb, &r.slot[RE_REL]), RELOCK_OK);
    assert_int_equal(relock_async_extend(r.l[RE_EXT], 30000, re_cb, &r.slot[RE_EXT]), RELOCK_OK);
    uint64_t end = tu_now_ms() + OP_BOUND_MS;
    for (;;) {
        /* the lost callback too, unless the client is gone (freed by
         * a callback, it never comes) */
        long done = r.lost.calls > 0 || !r.a;
        for (int j = 0; j < RE_OPS; j++)
            done += r.o[j].calls;
        if ((done == RE_OPS + 1 && (!r.spare_started || r.spare_o.calls)) || tu_now_ms() >= end)
            break;
        loop_once();
    }
    if (count)
        *count = bnd_replies(pport);
    bnd_disarm(pport);
    run_for(30);
    runs++;
    for (int j = 0; j < RE_OPS; j++) {
        relock_status st = r.o[j].st;
        CHECK(r.o[j].calls == 1, "%s at point %d: operation %d's callback called %ld times",
              react_name[act], at, j, r.o[j].calls);
        if (count)
            CHECK(st == RELOCK_OK, "without faults or actions: operation %d: %s: %s", j,
                  relock_status_name(st), r.o[j].msg);
        CHECK(st == RELOCK_OK || st == RELOCK_EIO || st == RELOCK_EAMBIGUOUS ||
                  st == RELOCK_ECANCELED || st == RELOCK_EPROTO || st == RELOCK_TIMEOUT ||
                  st == RELOCK_BUSY,
              "%s at point %d: operation %d: %s: %s", react_name[act], at, j,
              relock_status_name(st), r.o[j].msg);
        char v[RELOCK__VALUE_MAX];
        long long fence;
        char fk[RELOCK__KEY_MAX];
        const char *key = names[j];
        assert_int_equal(relock__fence_key(key, fk, sizeof fk), 0);
        bnd_look(srv.port, key, fk, v, sizeof v, &fence);
        if (j <= RE_WAITER && st == RELOCK_OK)
            CHECK(strcmp(v, relock_lock_value(r.o[j].l)) == 0,
                  "%s at point %d: acquire %d OK, yet the key holds \"%s\"", react_name[act], at,
                  j, v);
        if (j == RE_REL && st == RELOCK_OK)
            CHECK(v[0] == '\0', "%s at point %d: release OK, yet the key holds \"%s\"",
                  react_name[act], at, v);
    }
    if (r.spare_started)
        CHECK(r.spare_o.calls == 1, "%s at point %d: the spare's release called %ld times",
              react_name[act], at, r.spare_o.calls);
    CHECK(r.lost.calls <= 1, "lost called %ld times", r.lost.calls);
    if (r.a) {
        CHECK(relock_async_pending(r.a) == 0, "%ld operations still pending",
              relock_async_pending(r.a));
        relock_lock *nl = NULL;
        char next[80];
        snprintf(next, sizeof next, "are%d-next", nth);
        relock_status ast = acquire_now(r.bc, next, 30000, &nl);
        CHECK(ast == RELOCK_OK, "%s at point %d: the next acquire on the client: %s",
              react_name[act], at, relock_status_name(ast));
        if (nl) {
            CHECK(release_now(r.bc, nl) == RELOCK_OK, "the next release on the client failed");
            relock_lock_free(nl);
        }
    }
    run_end();
    for (int j = 0; j <= RE_WAITER; j++)
        relock_lock_free(r.o[j].l);
    for (int j = RE_RELH; j < RE_OPS; j++)
        relock_lock_free(r.l[j]);
    relock_lock_free(r.spare);
    relock_lock_free(r.kept);
    both_free(r.bc);
    cur = NULL;
}

static void reentry_on(size_t i, const target *t)
{
    long long n = 0;
    reentry(t, -1, RE_CANCEL, 0, 0, BND_WRITE, &n);
    assert_true(n >= RE_OPS && n < 400);
    /* each callback point with each action (reduced: one action at
     * every other point, in turn), the fault and its boundary moving along; every
     * other run with the connection down, the fault on one of the
     * reconnect's first commands (its setup) */
    static const enum bnd_fault faults[] = {BND_DEAD_AFTER, BND_LOST_REPLY, BND_ERROR,
                                            BND_WRITE};
    int did = 0;
    for (int at = 0; at < RE_POINTS; at++)
        for (int act = 0; act < NREACT; act++) {
            if (bnd_reduced() && (at % 2 == 1 || act != (at / 2 + (int)i) % NREACT))
                continue;
            int m = at * NREACT + act;
            int down = (at + act / 2) % 2 == 1 && testsrv_target_at_least(2, 8, 12);
            reentry(t, at, (enum react)act, down, down ? 1 + m % 2 : 1 + (m * 7) % n,
                    down ? (m % 2 ? BND_ERROR : BND_LOST_REPLY) : faults[m % 4], NULL);
            did++;
        }
    print_message("%-10s %-6s %-7s callbacks acting on others: %lld commands, %d runs\n",
                  t->pers, t->nolua ? "no-Lua" : "", t->mode, n, did);
}

static void test_reentry(void **state)
{
    (void)state;
    over_targets(reentry_on);
}

/* ------------------------------------------------------------ reconnects */

/*
 * The connection is down when a kept lock's renewal timer or a waiter's
 * sleep fires (every client connection killed on the server, which the
 * proxy passes on); the reconnect then meets -LOADING at its k-th command
 * (its setup's INFO, COMMAND DOCS, TIME …, then the renewal's or the
 * attempt's own), or the proxy is gone for a while (the reconnect
 * refused).  A renewal goes on: a later one succeeds, nothing is reported
 * lost, and the key still holds the lock.  A waiter ends exactly once (OK
 * only when it holds the key; a failed reconnect may end it with its
 * error), and the client still works afterwards.
 */
enum rc_kind { RC_ERROR, RC_REFUSED };

/* The proxy of target t stopped, and started again on its port after ms. */
static void proxy_bounce(const target *t, long ms)
{
    testsrv *p = &proxies[t - targets];
    kill(p->pid, SIGTERM);
    waitpid(p->pid, NULL, 0);
    p->pid = 0;
    uint64_t end = tu_now_ms() + (uint64_t)ms;
    while (tu_now_ms() < end)
        loop_once();
    const char *path = getenv("RELOCK_PROXY");
    if (!path || !*path)
        path = TESTSRV_PROXY_PATH;
    char up[32], lp[16];
    snprintf(up, sizeof up, "127.0.0.1:%d", srv.port);
    snprintf(lp, sizeof lp, "%d", p->port);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout))
            _exit(127);
        if (t->nolua)
            execl(path, path, "--upstream", up, "--listen", lp, "--personality", t->pers,
                  "--no-lua", (char *)NULL);
        else
            execl(path, path, "--upstream", up, "--listen", lp, "--personality", t->pers,
                  (char *)NULL);
        _exit(127);
    }
    p->pid = pid;
    end = tu_now_ms() + 10000;
    for (;;) {
        struct timeval tv = {1, 0};
        redisContext *c = redisConnectWithTimeout("127.0.0.1", p->port, tv);
        int ok = c && !c->err;
        redisFree(c);
        if (ok)
            break;
        if (tu_now_ms() >= end)
            fail_msg("the proxy did not come back on port %d", p->port);
        loop_once();
    }
}

static long long proxy_commands(int pport)
{
    redisReply *r = bnd_cmd(pport, "RELOCK-PROXY COMMANDS");
    long long n = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    return n;
}

/* Counts the commands from the last RESET on, until none came for quiet
 * ms after the first (at most ms in all). */
static long long settle_commands(int pport, long ms, long quiet_ms)
{
    uint64_t end = tu_now_ms() + (uint64_t)ms;
    long long n = 0;
    uint64_t quiet = 0;
    while (tu_now_ms() < end) {
        loop_once();
        long long m = proxy_commands(pport);
        if (m != n) {
            n = m;
            quiet = tu_now_ms();
        } else if (n > 0 && tu_now_ms() - quiet >= (uint64_t)quiet_ms) {
            break;
        }
    }
    return n;
}

static void reconnect_renewal(const target *t, long long k, enum rc_kind kind, long long *count)
{
    const enum op op = OP_RENEW;
    const enum bnd_fault f = kind == RC_ERROR ? BND_ERROR : BND_DEAD_AFTER;
    scene s;
    scene_start(&s, t, OP_RENEW);
    int pport = proxy_port(t);
    assert_int_equal(relock_async_keep(s.l, record_lost, &s.lost), RELOCK_OK);
    run_for(50);
    /* every client connection goes, ours with it (the proxy passes it on) */
    freeReplyObject(bnd_cmd(srv.port, "CLIENT KILL TYPE normal"));
    run_for(30);
    /* the end of the validity as of the last renewal before the reconnect */
    uint64_t v0 = tu_now_ms() + (uint64_t)relock_lock_validity_ms(s.l);
    if (count) {
        bnd_do(pport, "RELOCK-PROXY %s%s", "RESET", "");
        *count = settle_commands(pport, 2 * RENEW_TTL, 150);
    } else if (kind == RC_ERROR) {
        bnd_arm(pport, k, BND_ERROR);
    } else {
        /* gone for a third of the lease: several retries (a tenth of it
         * apart) are refused, and the validity left at the kill outlasts
         * the outage and the proxy's start */
        proxy_bounce(t, RENEW_TTL / 3);
    }
    /* a later renewal succeeds: the validity moves past what it was */
    uint64_t end = tu_now_ms() + 3 * RENEW_TTL;
    while (tu_now_ms() + (uint64_t)relock_lock_validity_ms(s.l) <= v0 + 100 &&
           s.lost.calls == 0 && tu_now_ms() < end)
        loop_once();
    bnd_disarm(pport);
    runs++;
    CHECK(s.lost.calls == 0, "reported lost: %s: %s", relock_status_name(s.lost.why), s.lost.msg);
    CHECK(tu_now_ms() + (uint64_t)relock_lock_validity_ms(s.l) > v0 + 100,
          "no renewal succeeded after the reconnect (%s)",
          kind == RC_ERROR ? "an error reply" : "refused");
    relock_status ks = relock_async_keep_stop(s.l);
    CHECK(ks == RELOCK_OK, "keep_stop: %s", relock_status_name(ks));
    char v[RELOCK__VALUE_MAX];
    long long fence;
    bnd_look(srv.port, s.key, s.fkey, v, sizeof v, &fence);
    CHECK(strcmp(v, relock_lock_value(s.l)) == 0, "the key holds \"%s\", not the lock's value", v);
    relock_status rs = release_now(s.c, s.l);
    CHECK(rs == RELOCK_OK, "the release after: %s", relock_status_name(rs));
    run_end();
    scene_end(&s);
}

static void reconnect_wait(const target *t, long long k, enum rc_kind kind, long long *count)
{
    const enum op op = OP_ACQUIRE;
    const enum bnd_fault f = kind == RC_ERROR ? BND_ERROR : BND_DEAD_AFTER;
    int pport = proxy_port(t);
    char name[64], warm[80];
    snprintf(name, sizeof name, "arc%d", ++seq);
    snprintf(warm, sizeof warm, "%s-warm", name);
    /* A waiter that polls (no subscription) every 200 ms, so that its
     * connection can be killed while it sleeps (its commands are quiet
     * for 50 ms before the kill). */
    relock_config *cfg = relock_config_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", pport);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", t->mode), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "legacy.clock_unit", "s"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "wait.notify", "false"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "wait.backoff_max_ms", "200"), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "wait.backoff_min_ms", "200"), RELOCK_OK);
    both_client *bc = NULL;
    assert_int_equal(both_connect(entry, cfg, &bc), RELOCK_OK);
    cur = bc;
    relock_async *a = both_async(bc);
    relock_config_free(cfg);
    relock_lock *wl = NULL;
    assert_int_equal(acquire_now(bc, warm, 30000, &wl), RELOCK_OK);
    assert_int_equal(release_now(bc, wl), RELOCK_OK);
    relock_lock_free(wl);
    /* the holder: a blocking client on the server itself, for a value of
     * the mode */
    cfg = relock_config_new();
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", srv.port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", t->mode), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "legacy.clock_unit", "s"), RELOCK_OK);
    relock_client *hc = NULL;
    assert_int_equal(relock_connect(cfg, &hc), RELOCK_OK);
    relock_config_free(cfg);
    relock_lock *hl = NULL;
    assert_int_equal(relock_try_acquire(hc, name, 30000, &hl), RELOCK_OK);
    outcome o = {0};
    bnd_do(pport, "RELOCK-PROXY %s%s", "RESET", "");
    assert_int_equal(relock_async_acquire(a, name, 30000, 5000, record, &o, NULL), RELOCK_OK);
    settle_commands(pport, 1000, 50); /* its first attempt answered: asleep */
    freeReplyObject(bnd_cmd(srv.port, "CLIENT KILL TYPE normal"));
    if (count) {
        bnd_do(pport, "RELOCK-PROXY %s%s", "RESET", "");
        *count = settle_commands(pport, 1500, 150);
    } else if (kind == RC_ERROR) {
        bnd_arm(pport, k, BND_ERROR);
    } else {
        proxy_bounce(t, 500);
    }
    run_for(100);
    /* the holder goes (the waiter polls: no notice needed; the holder's
     * own connection was killed too) */
    freeReplyObject(bnd_cmd(srv.port, "DEL %s", name));
    relock_lock_free(hl);
    relock_client_free(hc);
    run_until(&o.calls, 1, OP_BOUND_MS);
    bnd_disarm(pport);
    run_for(30);
    runs++;
    relock_status st = o.st;
    CHECK(o.calls == 1, "the callback was called %ld times", o.calls);
    if (count)
        CHECK(st == RELOCK_OK, "without faults: %s: %s", relock_status_name(st), o.msg);
    /* A refused reconnect stops the proxy with the waiter asleep, but on
     * a loaded machine its next attempt may already be on the wire: that
     * attempt's connection is then lost after the send, and the write may
     * have run (EAMBIGUOUS), which the key's check below still judges. */
    CHECK(st == RELOCK_OK || st == RELOCK_EIO || st == RELOCK_EPROTO ||
              (kind == RC_REFUSED && st == RELOCK_EAMBIGUOUS),
          "%s: %s", relock_status_name(st), o.msg);
    char v[RELOCK__VALUE_MAX], fk[RELOCK__KEY_MAX];
    long long fence;
    assert_int_equal(relock__fence_key(name, fk, sizeof fk), 0);
    bnd_look(srv.port, name, fk, v, sizeof v, &fence);
    if (st == RELOCK_OK)
        CHECK(strcmp(v, relock_lock_value(o.l)) == 0, "OK, yet the key holds \"%s\"", v);
    else
        CHECK(v[0] == '\0', "%s, yet the key holds \"%s\"", relock_status_name(st), v);
    CHECK(relock_async_pending(a) == 0, "%ld operations still pending", relock_async_pending(a));
    relock_lock *nl = NULL;
    char next[80];
    snprintf(next, sizeof next, "%s-next", name);
    relock_status ast = acquire_now(bc, next, 30000, &nl);
    CHECK(ast == RELOCK_OK, "the next acquire on the client: %s", relock_status_name(ast));
    if (nl) {
        CHECK(release_now(bc, nl) == RELOCK_OK, "the next release on the client failed");
        relock_lock_free(nl);
    }
    run_end();
    if (o.l) {
        release_now(bc, o.l);
        relock_lock_free(o.l);
    }
    both_free(bc);
    cur = NULL;
}

static void reconnect_on(size_t i, const target *t)
{
    (void)i;
    long long n = 0;
    reconnect_renewal(t, 0, RC_ERROR, &n);
    assert_true(n >= 1 && n < 40);
    int did = 0;
    for (long long k = 1; k <= n; k++)
        if (!bnd_reduced() || k == 1 || k == n) {
            reconnect_renewal(t, k, RC_ERROR, NULL);
            did++;
        }
    reconnect_renewal(t, 0, RC_REFUSED, NULL);
    long long w = 0;
    reconnect_wait(t, 0, RC_ERROR, &w);
    assert_true(w >= 1 && w < 60);
    reconnect_wait(t, 1, RC_ERROR, NULL);
    if (!bnd_reduced())
        reconnect_wait(t, w, RC_ERROR, NULL);
    reconnect_wait(t, 0, RC_REFUSED, NULL);
    print_message("%-10s %-6s %-7s reconnects: renewal %lld commands, %d errors, refused; "
                  "wait %lld commands, %d errors, refused\n",
                  t->pers, t->nolua ? "no-Lua" : "", t->mode, n, did, w,
                  bnd_reduced() ? 1 : 2);
}

static void test_reconnect(void **state)
{
    (void)state;
    if (!testsrv_target_at_least(2, 8, 12)) { /* CLIENT KILL TYPE */
        testsrv_note_skip("reconnects: CLIENT KILL TYPE");
        return;
    }
    over_targets(reconnect_on);
}

/* ------------------------------------------------------------ setup */

static int group_setup(void **state)
{
    (void)state;
    if (testsrv_start(&srv, NULL) != 0)
        return -1;
    /* With a real server (RELOCK_TEST_SERVER), the personalities that
     * stand for it, through a proxy that imitates nothing (testsrv.h). */
    static const char *const nolua[] = {"--no-lua", NULL};
    for (size_t i = 0; i < NTARGETS; i++)
        if (target_selected(i) && testsrv_personality_runs(targets[i].pers) &&
            testsrv_mode_runs(targets[i].mode) &&
            testsrv_start_proxy(&proxies[i], srv.port, targets[i].pers,
                                targets[i].nolua ? nolua : NULL) != 0)
            return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < NTARGETS; i++)
        testsrv_stop(&proxies[i]);
    testsrv_stop(&srv);
    return 0;
}

int main(int argc, char **argv)
{
    entry = both_entry_from_args(argc, argv);
    if (argc > 2)
        part = argv[2];
    int own = strcmp(part, "own") == 0;
    if ((!own && strcmp(part, "classic") != 0 && strcmp(part, "native") != 0) ||
        (own && entry != BOTH_ASYNC)) {
        fprintf(stderr, "%s: the part is \"classic\", \"native\" or (asynchronous) \"own\"\n",
                argv[0]);
        return 2;
    }
    env_reduced = bnd_reduced();
    /* The asynchronous client checks no idle connection before reusing
     * it: WRITE_DEAD needs only the hold of WRITE (the other client's
     * write lands during it), not the 300 ms that outlast the blocking
     * client's check. */
    if (entry == BOTH_ASYNC)
        bnd_write_dead_hold_ms = 60;
    /* RELOCK_TEST_ONLY: one test of the program, by name (cmocka's filter) */
    const char *only = getenv("RELOCK_TEST_ONLY");
    if (only && *only)
        cmocka_set_test_filter(only);
    /* The enumeration, through both entry points. */
    const struct CMUnitTest shared[] = {
        cmocka_unit_test(test_boundaries),
    };
    /* The asynchronous client's own. */
    const struct CMUnitTest async[] = {
        cmocka_unit_test(test_in_flight),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_reentry),
        cmocka_unit_test(test_reconnect),
    };
    if (own)
        return both_run_each(entry, NULL, 0, NULL, 0, async, sizeof async / sizeof *async,
                             group_setup, group_teardown);
    return both_run_each(entry, shared, sizeof shared / sizeof *shared, NULL, 0, NULL, 0,
                         group_setup, group_teardown);
}
