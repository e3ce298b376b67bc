/*
 * What the asynchronous client must survive from a program that uses it as
 * documented, and the loss deadline of kept locks in both APIs, against a
 * real redis-server (directly, or through the compat proxy for its faults):
 *
 *   - a waiter whose wait bound ends while its SUBSCRIBE confirmation is
 *     in flight (replies delayed by the proxy): the confirmation's walk of
 *     the channel's waiters must not read the channel its last waiter
 *     freed on leaving;
 *   - a callback that cancels another operation waiting in the same
 *     connection's queue while that queue is walked: after a refused
 *     connect (the setup's failure walk) and while a ready connection's
 *     queue is flushed (a release of a lost lock ends within the flush);
 *   - a callback that frees the client from within the flush that the end
 *     of another operation runs (a release of a lost lock, queued by the
 *     callback of an acquire whose reply came in the same read);
 *   - a kept lock whose reconnect is refused for a while, or whose
 *     reconnect's probe gets a transient error (-LOADING from the proxy,
 *     -BUSY from a real server running a long script): the renewal goes
 *     on once the server is back, and the client is not made unusable;
 *   - the client freed while a release waits behind a kept lock's
 *     renewal in flight (a stopped server), the lock freed before it or
 *     by the release's callback; and the lock freed right after such a
 *     release was asked for: the release still runs;
 *   - the loss deadline: a kept lock whose renewals do not succeed (a
 *     SIGSTOPped server, a refused reconnect, a server that stays busy)
 *     is reported lost no later than the end of the validity relock
 *     computed, measured from the event, with a command timeout much
 *     longer than the lease so that waiting for a reply would be late.
 *
 * Built for libevent (it_async_safety_libevent) and libuv
 * (it_async_safety_libuv); the blocking relock_keep() cases are shared
 * between the two (one program each).
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
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "relock.h"
#include "relock_async.h"
#include "async_loop.h" /* testloop.h, and an outcome per operation */
#include "testsrv.h"
#include "testutil.h"

static testsrv srv;

/* How late a loss may be reported past the validity's end on a loaded
 * machine (timers fire late); far below what waiting for a reply costs
 * here (command_timeout_ms is LONG_MS). */
#define SLACK_MS 1200
#define LONG_MS 8000
/* The kept locks' lease: renewed every 500 ms.  The cases below wait for
 * whole leases, so it sets their pace. */
#define KEEP_TTL 1500
/* Past the first renewal (a third of the lease). */
#define RENEWED_MS (KEEP_TTL * 2 / 5)
/* An outage that one renewal at least meets, and that ends with a good
 * margin before the validity left at its start (two thirds of the lease
 * at least) does. */
#define OUTAGE_MS (KEEP_TTL / 2)
/* After an outage, long enough for a renewal that stopped to show: the
 * validity of the last renewal before the outage ends within a lease of
 * its start, so by then the key has expired or the loss was reported. */
#define KEPT_MS (KEEP_TTL + RENEWED_MS)

/* ------------------------------------------------------------ helpers */

static relock_config *config_at(int port, const char *mode, long long timeout_ms)
{
    relock_config *cfg = relock_config_new();
    assert_non_null(cfg);
    char url[64], t[24];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    assert_int_equal(relock_config_set_url(cfg, url), RELOCK_OK);
    assert_int_equal(relock_config_set(cfg, "mode", mode), RELOCK_OK);
    if (timeout_ms > 0) {
        snprintf(t, sizeof t, "%lld", timeout_ms);
        assert_int_equal(relock_config_set(cfg, "command_timeout_ms", t), RELOCK_OK);
        assert_int_equal(relock_config_set(cfg, "connect_timeout_ms", t), RELOCK_OK);
    }
    return cfg;
}

static relock_async *aclient(relock_async_loop *lp, int port, long long timeout_ms)
{
    relock_config *cfg = config_at(port, testsrv_mode_runs("modern") ? "modern" : "legacy",
                                   timeout_ms);
    relock_async *a = NULL;
    relock_status st = relock_async_new(cfg, lp, &a);
    relock_config_free(cfg);
    if (st != RELOCK_OK)
        fail_msg("relock_async_new: %s", a ? relock_async_error(a)->message : "out of memory");
    return a;
}

/* A client on a loop of its own through a proxy (personality 7, for its
 * faults) in front of the shared server. */
static relock_async *proxied(testsrv *px, relock_async_loop *lp)
{
    assert_int_equal(testsrv_start_proxy(px, srv.port, "7", NULL), 0);
    loop_init(lp);
    return aclient(lp, px->port, 0);
}

/* A client on a loop of its own and a redis-server of its own, which the
 * test stops or keeps busy; the command timeout is far longer than the
 * lease. */
static relock_async *on_own(testsrv *own, relock_async_loop *lp)
{
    assert_int_equal(testsrv_start(own, NULL), 0);
    loop_init(lp);
    return aclient(lp, own->port, LONG_MS);
}

/* The end of a test with a server of its own: the client, its loop, then
 * the server. */
static void end_on(relock_async *a, testsrv *s)
{
    relock_async_free(a);
    loop_fini();
    testsrv_stop(s);
}

/* A lock on name, acquired (try) for ttl ms, which must succeed. */
static relock_lock *acquired(relock_async *a, const char *name, long long ttl)
{
    outcome o = {0};
    assert_int_equal(relock_async_try_acquire(a, name, ttl, record, &o, NULL), RELOCK_OK);
    finish(&o, 5000);
    if (o.st != RELOCK_OK)
        fail_msg("acquire %s: %s: %s", name, relock_status_name(o.st), o.msg);
    return o.l;
}

/* Releases l, which must succeed; what names the case in a failure. */
static void released(relock_lock *l, const char *what)
{
    outcome r = {0};
    assert_int_equal(relock_async_release(l, record, &r), RELOCK_OK);
    finish(&r, 5000);
    if (r.st != RELOCK_OK)
        fail_msg("%s: release: %s: %s", what, relock_status_name(r.st), r.msg);
}

static redisReply *cmd(int port, const char *fmt, ...)
{
    struct timeval tv = {5, 0};
    redisContext *r = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!r || r->err)
        fail_msg("cannot connect to 127.0.0.1:%d", port);
    redisSetTimeout(r, tv);
    va_list ap;
    va_start(ap, fmt);
    redisReply *x = redisvCommand(r, fmt, ap);
    va_end(ap);
    redisFree(r);
    if (!x)
        fail_msg("no reply from 127.0.0.1:%d", port);
    return x;
}

static void cmd_ok(int port, const char *fmt, const char *arg)
{
    redisReply *x = cmd(port, fmt, arg);
    if (x->type == REDIS_REPLY_ERROR)
        fail_msg("%s: %s", fmt, x->str);
    freeReplyObject(x);
}

/* The key's value on the real server, "" when absent. */
static void look(const char *key, char *out, size_t len)
{
    redisReply *x = cmd(srv.port, "GET %s", key);
    snprintf(out, len, "%s", x->type == REDIS_REPLY_STRING ? x->str : "");
    freeReplyObject(x);
}

/* A proxy (personality 7) on a port of our choosing, so that it can come
 * back on the port its clients use after it was stopped. */
static pid_t proxy_on(int port)
{
    const char *path = getenv("RELOCK_PROXY");
    if (!path || !*path)
        path = TESTSRV_PROXY_PATH;
    char up[32], lp[16];
    snprintf(up, sizeof up, "127.0.0.1:%d", srv.port);
    snprintf(lp, sizeof lp, "%d", port);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout))
            _exit(127);
        execl(path, path, "--upstream", up, "--listen", lp, (char *)NULL);
        _exit(127);
    }
    uint64_t end = tu_now_ms() + 10000;
    while (tu_now_ms() < end) {
        struct timeval tv = {1, 0};
        redisContext *r = redisConnectWithTimeout("127.0.0.1", port, tv);
        int up_ok = r && !r->err;
        redisFree(r);
        if (up_ok)
            return pid;
        tu_sleep_ms(20);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    fail_msg("the proxy did not come back on port %d", port);
    return 0;
}

static void proxy_off(pid_t pid)
{
    kill(pid, SIGTERM);
    assert_int_equal(tu_wait_child(pid, 10000), 0);
}

/* ------------------------------------------------------------ a waiter's subscription */

/*
 * A key held elsewhere; a waiter with a 150 ms bound through a proxy that
 * delays every reply by 100 ms: its first attempt answers after ~100 ms,
 * it subscribes, and the confirmation comes after its bound ended.  The
 * confirmation plans the waiter, which times out and leaves the channel,
 * the last to wait: the subscription goes, and the channel with it.
 */
static void test_waiter_bound_in_subscribe(void **state)
{
    (void)state;
    testsrv px;
    relock_async_loop lp;
    relock_async *a = proxied(&px, &lp);
    relock_lock *h = acquired(a, "job", 30000);
    cmd_ok(px.port, "RELOCK-PROXY FAULT delay-ms %s", "100");
    for (int i = 0; i < 6; i++) {
        outcome w = {0};
        assert_int_equal(relock_async_acquire(a, "job", 5000, 150, record, &w, NULL), RELOCK_OK);
        finish(&w, 10000);
        if (w.st != RELOCK_TIMEOUT && w.st != RELOCK_BUSY)
            fail_msg("waiter %d: %s: %s", i, relock_status_name(w.st), w.msg);
        run_for(150); /* another turn: nothing more for it */
        assert_int_equal(w.calls, 1);
    }
    cmd_ok(px.port, "RELOCK-PROXY FAULT %s", "off");
    released(h, "the held lock");
    relock_lock_free(h);
    assert_int_equal(relock_async_pending(a), 0);
    end_on(a, &px);
}

/* ------------------------------------------------------------ cancels inside a queue's walk */

typedef struct canceller {
    outcome o;
    relock_async_op *victim;
    relock_status cancel_st;
    struct canceller *peer; /* whose victim this operation is: its handle ends here */
} canceller;

static void cancel_other(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                         void *arg)
{
    canceller *c = arg;
    record(a, st, l, e, &c->o);
    if (c->peer)
        c->peer->victim = NULL;
    if (c->victim)
        c->cancel_st = relock_async_cancel(c->victim);
}

/* Two try-acquires wait for a connect that is refused; the first one's
 * callback cancels the second, still in the walked queue. */
static void test_cancel_after_refused_connect(void **state)
{
    (void)state;
    int port = testsrv_free_port(); /* nothing listens there */
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = aclient(&lp, port, 0);
    for (int round = 0; round < 3; round++) {
        canceller first;
        memset(&first, 0, sizeof first);
        outcome second = {0};
        assert_int_equal(relock_async_try_acquire(a, "r1", 5000, cancel_other, &first, NULL),
                         RELOCK_OK);
        assert_int_equal(
            relock_async_try_acquire(a, "r2", 5000, record, &second, &first.victim), RELOCK_OK);
        run_until(&second.calls, 1, 5000);
        run_for(50);
        assert_int_equal(first.o.calls, 1);
        assert_int_equal(second.calls, 1);
        assert_int_equal(first.o.st, RELOCK_EIO);
        if (second.st != RELOCK_ECANCELED && second.st != RELOCK_EIO)
            fail_msg("the cancelled acquire: %s: %s", relock_status_name(second.st), second.msg);
        assert_int_equal(first.cancel_st, RELOCK_OK);
        assert_int_equal(relock_async_pending(a), 0);
    }
    relock_async_free(a);
    loop_fini();
}

/* A release of a lost lock ends within the flush of the ready connection's
 * queue; its callback cancels the acquire queued behind it. */
static void test_cancel_in_flush(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = aclient(&lp, srv.port, 0);
    for (int round = 0; round < 3; round++) {
        char name[32], key[40];
        snprintf(name, sizeof name, "fl%d", round);
        relock_lock *l = acquired(a, name, 30000);
        snprintf(key, sizeof key, "%s", name);
        freeReplyObject(cmd(srv.port, "DEL %s", key));
        outcome x = {0};
        assert_int_equal(relock_async_extend(l, 30000, record, &x), RELOCK_OK);
        finish(&x, 5000);
        assert_int_equal(x.st, RELOCK_LOST); /* the handle knows it is lost */
        canceller rel;
        memset(&rel, 0, sizeof rel);
        outcome victim = {0};
        char other[40];
        snprintf(other, sizeof other, "%s-b", name);
        assert_int_equal(relock_async_release(l, cancel_other, &rel), RELOCK_OK);
        assert_int_equal(
            relock_async_try_acquire(a, other, 30000, record, &victim, &rel.victim), RELOCK_OK);
        run_until(&victim.calls, 1, 5000);
        assert_int_equal(rel.o.calls, 1);
        assert_int_equal(rel.o.st, RELOCK_LOST);
        assert_int_equal(victim.calls, 1);
        assert_int_equal(victim.st, RELOCK_ECANCELED);
        char v[64];
        look(other, v, sizeof v);
        assert_string_equal(v, "");
        /* the connection still works, for longer than a command timeout */
        run_for(1200);
        relock_lock *n = acquired(a, other, 30000);
        released(n, "the next acquire");
        relock_lock_free(n);
        relock_lock_free(l);
        assert_int_equal(relock_async_pending(a), 0);
    }
    relock_async_free(a);
    loop_fini();
}

/* The first of two pipelined acquires releases a lost lock from its
 * callback; that release ends at once (the lock is known lost), within
 * the flush of the queue that the second acquire's end runs when its
 * reply came in the same read, and its own callback frees the client,
 * as docs/api.md allows from a callback. */
typedef struct freer {
    outcome first;
    outcome rel;
    relock_lock *lost;
    relock_status rel_call;
} freer;

static void free_client(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                        void *arg)
{
    freer *f = arg;
    record(a, st, l, e, &f->rel);
    relock_async_free(a);
}

static void release_lost(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                         void *arg)
{
    freer *f = arg;
    record(a, st, l, e, &f->first);
    f->rel_call = relock_async_release(f->lost, free_client, f);
}

/* Two try-acquires go out together on one connection, so that their
 * replies come in one read; the first one's callback releases a lock the
 * client knows is lost, which queues the release behind the second's end;
 * the release ends within that end's flush, and its callback frees the
 * client: the second acquire must not be used after the free ended it. */
static void test_free_in_flush(void **state)
{
    (void)state;
    relock_async_loop lp;
    loop_init(&lp);
    for (int round = 0; round < 4; round++) {
        relock_async *a = aclient(&lp, srv.port, 0);
        char name[32], n1[40], n2[40];
        snprintf(name, sizeof name, "ff%d", round);
        snprintf(n1, sizeof n1, "%s-a", name);
        snprintf(n2, sizeof n2, "%s-b", name);
        outcome o = {0};
        assert_int_equal(relock_async_try_acquire(a, name, 30000, record, &o, NULL), RELOCK_OK);
        finish(&o, 5000);
        assert_int_equal(o.st, RELOCK_OK);
        freeReplyObject(cmd(srv.port, "DEL %s", name));
        outcome x = {0};
        assert_int_equal(relock_async_extend(o.l, 30000, record, &x), RELOCK_OK);
        finish(&x, 5000);
        assert_int_equal(x.st, RELOCK_LOST); /* the handle knows it is lost */
        freer f;
        memset(&f, 0, sizeof f);
        f.lost = o.l;
        outcome second = {0};
        assert_int_equal(relock_async_try_acquire(a, n1, 30000, release_lost, &f, NULL), RELOCK_OK);
        assert_int_equal(relock_async_try_acquire(a, n2, 30000, record, &second, NULL), RELOCK_OK);
        run_until(&f.rel.calls, 1, 5000);
        /* the client is freed now: nothing of it may run any more */
        assert_int_equal(f.first.calls, 1);
        assert_int_equal(f.first.st, RELOCK_OK);
        assert_int_equal(f.rel_call, RELOCK_OK);
        assert_int_equal(f.rel.calls, 1);
        assert_int_equal(f.rel.st, RELOCK_LOST);
        assert_int_equal(second.calls, 1);
        if (second.st != RELOCK_OK && second.st != RELOCK_EAMBIGUOUS)
            fail_msg("the second acquire: %s: %s", relock_status_name(second.st), second.msg);
        relock_lock_free(f.first.l);
        relock_lock_free(second.l);
        relock_lock_free(o.l);
        freeReplyObject(cmd(srv.port, "DEL %s", n1));
        freeReplyObject(cmd(srv.port, "DEL %s", n2));
    }
    loop_fini();
}

/* Two waiters on one held key wait for the confirmation of their channel's
 * SUBSCRIBE (replies delayed 300 ms), which the proxy answers -LOADING
 * after their bound ended: the subscription is dropped, the first, planned
 * again without it, times out, and its callback cancels the second, still
 * in the list of those to plan again. */
static void test_cancel_in_replan(void **state)
{
    (void)state;
    testsrv px;
    relock_async_loop lp;
    relock_async *a = proxied(&px, &lp);
    relock_lock *h = acquired(a, "rp", 30000);
    for (int round = 0; round < 3; round++) {
        cmd_ok(px.port, "RELOCK-PROXY FAULT delay-ms %s", "300");
        canceller w[2];
        memset(w, 0, sizeof w);
        cmd_ok(px.port, "RELOCK-PROXY %s", "RESET");
        uint64_t t0 = tu_now_ms();
        for (int i = 0; i < 2; i++) {
            w[i].peer = &w[1 - i];
            assert_int_equal(relock_async_acquire(a, "rp", 5000, 400, cancel_other, &w[i],
                                                  &w[1 - i].victim),
                             RELOCK_OK);
        }
        /* both attempts sent: the next command is the channel's SUBSCRIBE
         * (one for both), answered -LOADING, 300 ms later */
        uint64_t end = t0 + 5000;
        long long n = 0;
        while (n < 2 && tu_now_ms() < end) {
            loop_once();
            redisReply *x = cmd(px.port, "RELOCK-PROXY COMMANDS");
            n = x->integer;
            freeReplyObject(x);
        }
        assert_int_equal(n, 2);
        cmd_ok(px.port, "RELOCK-PROXY FAULT at-reply 1 at-kind %s", "error");
        run_until(&w[1].o.calls, 1, 5000);
        run_until(&w[0].o.calls, 1, 5000);
        run_for(100);
        cmd_ok(px.port, "RELOCK-PROXY FAULT %s", "off");
        cmd_ok(px.port, "RELOCK-PROXY %s", "RESET");
        for (int i = 0; i < 2; i++) {
            assert_int_equal(w[i].o.calls, 1);
            if (w[i].o.st != RELOCK_TIMEOUT && w[i].o.st != RELOCK_ECANCELED &&
                w[i].o.st != RELOCK_BUSY)
                fail_msg("round %d, waiter %d: %s: %s", round, i,
                         relock_status_name(w[i].o.st), w[i].o.msg);
        }
        assert_int_equal(relock_async_pending(a), 0);
    }
    released(h, "the held lock");
    relock_lock_free(h);
    end_on(a, &px);
}

/* A connect that fails at once (a host name that does not resolve): the
 * callbacks still come from the loop, never from within the call that
 * started the operation, and one of them may free the client while the
 * queue of the failed connection is walked. */
static int in_call;
static long from_call;
static relock_async *to_free;

static void note_call(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                      void *arg)
{
    record(a, st, l, e, arg);
    if (in_call)
        from_call++;
    if (to_free) {
        relock_async_free(to_free);
        to_free = NULL;
    }
}

static void test_connect_fails_at_once(void **state)
{
    (void)state;
    for (int round = 0; round < 2; round++) {
        relock_async_loop lp;
        loop_init(&lp);
        relock_config *cfg = relock_config_new();
        assert_int_equal(relock_config_set_url(cfg, "redis://no-such-host.invalid:6379"),
                         RELOCK_OK);
        assert_int_equal(relock_config_set(cfg, "mode", "modern"), RELOCK_OK);
        relock_async *a = NULL;
        assert_int_equal(relock_async_new(cfg, &lp, &a), RELOCK_OK);
        relock_config_free(cfg);
        outcome o[3];
        memset(o, 0, sizeof o);
        from_call = 0;
        in_call = 1;
        for (int i = 0; i < 3; i++) {
            char name[16];
            snprintf(name, sizeof name, "h%d", i);
            assert_int_equal(relock_async_try_acquire(a, name, 5000, note_call, &o[i], NULL),
                             RELOCK_OK);
        }
        in_call = 0;
        assert_int_equal(from_call, 0);
        if (round == 1)
            to_free = a; /* freed by the first callback */
        run_until(&o[2].calls, 1, 5000);
        for (int i = 0; i < 3; i++) {
            assert_int_equal(o[i].calls, 1);
            if (o[i].st != RELOCK_EIO && o[i].st != RELOCK_ECANCELED)
                fail_msg("round %d, acquire %d: %s: %s", round, i, relock_status_name(o[i].st),
                         o[i].msg);
        }
        assert_null(to_free);
        if (round == 0)
            relock_async_free(a);
        run_for(50);
        loop_fini();
    }
}

/* ------------------------------------------------------------ kept locks: asynchronous */

/* A kept lock on a, acquired and kept; its key's value in ours. */
static relock_lock *kept(relock_async *a, const char *name, lostrec *lr, char *ours, size_t len)
{
    relock_lock *l = acquired(a, name, KEEP_TTL);
    memset(lr, 0, sizeof *lr);
    assert_int_equal(relock_async_keep(l, record_lost, lr), RELOCK_OK);
    snprintf(ours, len, "%s", relock_lock_value(l));
    return l;
}

/* The renewal goes on: more than a lease passes without a loss, and the
 * key still holds the lock's value (in legacy mode each renewal writes a
 * new one: the handle's). */
static void still_kept(relock_lock *l, lostrec *lr, const char *what)
{
    run_for(KEPT_MS);
    if (lr->calls)
        fail_msg("%s: the lock was reported lost: %s: %s", what, relock_status_name(lr->why),
                 lr->msg);
    char v[64];
    look(relock_lock_name(l), v, sizeof v);
    if (v[0] == '\0')
        fail_msg("%s: the key expired: the renewal stopped without a word", what);
    assert_int_equal(relock_async_keep_stop(l), RELOCK_OK);
}

/* The proxy in front of the kept lock goes away for half a lease (its
 * port refuses the reconnect of a renewal), then comes back; a second
 * time it never comes back, and the loss is reported by the validity's
 * end. */
static void test_keep_refused(void **state)
{
    (void)state;
    int port = testsrv_free_port();
    pid_t px = proxy_on(port);
    relock_async_loop lp;
    loop_init(&lp);
    relock_async *a = aclient(&lp, port, LONG_MS);
    lostrec lr;
    char ours[64];
    relock_lock *l = kept(a, "kr", &lr, ours, sizeof ours);
    run_for(RENEWED_MS); /* one renewal done */
    proxy_off(px);
    run_for(OUTAGE_MS); /* a renewal meets the refusal */
    px = proxy_on(port);
    still_kept(l, &lr, "refused once");
    /* the client still works */
    released(l, "refused once");
    relock_lock_free(l);

    /* refused for good: lost by the validity's end */
    l = kept(a, "kr2", &lr, ours, sizeof ours);
    run_for(500);
    proxy_off(px);
    uint64_t deadline = tu_now_ms() + (uint64_t)relock_lock_validity_ms(l);
    run_until(&lr.calls, 1, KEEP_TTL + LONG_MS);
    if (lr.calls != 1)
        fail_msg("refused for good: lost called %ld times", lr.calls);
    if (lr.at > deadline + SLACK_MS)
        fail_msg("refused for good: lost %lld ms after the validity's end",
                 (long long)(lr.at - deadline));
    assert_int_equal(relock_async_keep_stop(l), RELOCK_LOST);
    relock_lock_free(l);
    relock_async_free(a);
    loop_fini();
}

/* The kept lock's connection is closed by the proxy after a renewal's
 * reply; the reconnect of the next renewal gets -LOADING to its first
 * command (the probe's INFO). */
static void test_keep_transient_probe_error(void **state)
{
    (void)state;
    testsrv px;
    relock_async_loop lp;
    relock_async *a = proxied(&px, &lp);
    lostrec lr;
    char ours[64];
    relock_lock *l = kept(a, "kt", &lr, ours, sizeof ours);
    cmd_ok(px.port, "RELOCK-PROXY FAULT at-reply 1 at-kind %s", "close-after");
    /* the next renewal's reply, then the close */
    uint64_t end = tu_now_ms() + 5000;
    long long n = 0;
    while (n < 1 && tu_now_ms() < end) {
        loop_once();
        redisReply *x = cmd(px.port, "RELOCK-PROXY REPLIES");
        n = x->integer;
        freeReplyObject(x);
    }
    assert_true(n >= 1);
    cmd_ok(px.port, "RELOCK-PROXY FAULT at-reply 1 at-kind %s", "error");
    still_kept(l, &lr, "-LOADING to the reconnect's INFO");
    cmd_ok(px.port, "RELOCK-PROXY FAULT %s", "off");
    /* the client is still usable */
    released(l, "after the transient error");
    relock_lock_free(l);
    end_on(a, &px);
}

/* A server of its own, busy in a script that loops until killed: every
 * command but a few answers -BUSY. */
typedef struct busy {
    redisContext *r;
} busy;

static void busy_start(busy *b, int port)
{
    freeReplyObject(cmd(port, "CONFIG SET lua-time-limit 10"));
    b->r = redisConnect("127.0.0.1", port);
    assert_true(b->r && !b->r->err);
    /* sent, not waited for: the script runs until SCRIPT KILL */
    assert_int_equal(redisAppendCommand(b->r, "EVAL %s 0", "while true do end"), REDIS_OK);
    int done = 0;
    while (!done)
        assert_int_equal(redisBufferWrite(b->r, &done), REDIS_OK);
    /* busy once a command is refused so */
    uint64_t end = tu_now_ms() + 5000;
    int refused = 0;
    while (!refused && tu_now_ms() < end) {
        redisReply *x = cmd(port, "GET x");
        refused = x->type == REDIS_REPLY_ERROR && strncmp(x->str, "BUSY", 4) == 0;
        freeReplyObject(x);
        if (!refused)
            tu_sleep_ms(10);
    }
    assert_true(refused);
}

static void busy_stop(busy *b, int port)
{
    freeReplyObject(cmd(port, "SCRIPT KILL"));
    redisReply *x = NULL;
    struct timeval tv = {5, 0};
    redisSetTimeout(b->r, tv);
    assert_int_equal(redisGetReply(b->r, (void **)&x), REDIS_OK); /* the script's error */
    freeReplyObject(x);
    redisFree(b->r);
}

/* The kept lock's connection dropped while the server is busy in a long
 * script: the renewals' reconnects get -BUSY to INFO for half a lease, then the
 * script is killed; a second time the script outlasts the validity. */
static void test_keep_busy_server(void **state)
{
    (void)state;
    if (!testsrv_target_at_least(2, 8, 12)) {
        testsrv_note_skip("CLIENT KILL TYPE before 2.8.12");
        return;
    }
    testsrv own;
    relock_async_loop lp;
    relock_async *a = on_own(&own, &lp);
    lostrec lr;
    char ours[64];
    relock_lock *l = kept(a, "kb", &lr, ours, sizeof ours);
    run_for(RENEWED_MS);
    busy b;
    freeReplyObject(cmd(own.port, "CLIENT KILL TYPE normal"));
    busy_start(&b, own.port);
    run_for(OUTAGE_MS);
    busy_stop(&b, own.port);
    run_for(KEPT_MS);
    if (lr.calls)
        fail_msg("busy for half a lease: reported lost: %s: %s", relock_status_name(lr.why), lr.msg);
    redisReply *x = cmd(own.port, "EXISTS kb");
    assert_int_equal(x->integer, 1);
    freeReplyObject(x);
    assert_int_equal(relock_async_keep_stop(l), RELOCK_OK);
    /* A renewal still in flight ends first: keep() refuses a lock with an
     * operation in flight (a renewal comes every third of a lease, a
     * retry every tenth). */
    uint64_t idle = tu_now_ms() + 5000;
    while (relock_async_pending(a) > 0 && tu_now_ms() < idle)
        loop_once();

    /* busy past the validity: lost by its end */
    assert_int_equal(relock_async_keep(l, record_lost, &lr), RELOCK_OK);
    run_for(300);
    freeReplyObject(cmd(own.port, "CLIENT KILL TYPE normal"));
    uint64_t deadline = tu_now_ms() + (uint64_t)relock_lock_validity_ms(l);
    busy_start(&b, own.port);
    run_until(&lr.calls, 1, KEEP_TTL + LONG_MS);
    busy_stop(&b, own.port);
    if (lr.calls != 1)
        fail_msg("busy for good: lost called %ld times", lr.calls);
    if (lr.at > deadline + SLACK_MS)
        fail_msg("busy for good: lost %lld ms after the validity's end",
                 (long long)(lr.at - deadline));
    assert_int_equal(relock_async_keep_stop(l), RELOCK_LOST);
    relock_lock_free(l);
    end_on(a, &own);
}

/* A SIGSTOPped server under a kept lock, with a command timeout far longer
 * than the lease: the renewal in flight never answers, and the loss is
 * reported by the validity's end, not when the request times out. */
static void test_keep_stalled_server(void **state)
{
    (void)state;
    testsrv own;
    relock_async_loop lp;
    relock_async *a = on_own(&own, &lp);
    lostrec lr;
    char ours[64];
    relock_lock *l = kept(a, "ks", &lr, ours, sizeof ours);
    run_for(RENEWED_MS);
    kill(own.pid, SIGSTOP);
    uint64_t deadline = tu_now_ms() + (uint64_t)relock_lock_validity_ms(l);
    run_until(&lr.calls, 1, KEEP_TTL + LONG_MS + 2000);
    kill(own.pid, SIGCONT);
    if (lr.calls != 1)
        fail_msg("stalled server: lost called %ld times", lr.calls);
    if (lr.at > deadline + SLACK_MS)
        fail_msg("stalled server: lost %lld ms after the validity's end",
                 (long long)(lr.at - deadline));
    run_for(300);
    assert_int_equal(lr.calls, 1);
    assert_int_equal(relock_async_keep_stop(l), RELOCK_LOST);
    relock_lock_free(l);
    end_on(a, &own);
}

/* A release asked for while a renewal of the kept lock is in flight waits
 * for it; the client is freed before the renewal ends (its server is
 * stopped).  The lock is freed by the program before the client, or by
 * the release's callback, which relock_async_free() runs: each callback
 * runs once, nothing is used after it was freed. */
static relock_lock *freed_in_cb;

static void free_lock_cb(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                         void *arg)
{
    record(a, st, l, e, arg);
    relock_lock_free(freed_in_cb);
    freed_in_cb = NULL;
}

static void test_free_with_release_behind_renewal(void **state)
{
    (void)state;
    testsrv own;
    assert_int_equal(testsrv_start(&own, NULL), 0);
    for (int round = 0; round < 2; round++) {
        relock_async_loop lp;
        loop_init(&lp);
        relock_async *a = aclient(&lp, own.port, LONG_MS);
        lostrec lr;
        char ours[64];
        relock_lock *l = kept(a, round ? "rbr1" : "rbr0", &lr, ours, sizeof ours);
        kill(own.pid, SIGSTOP);
        run_for(KEEP_TTL / 3 + 500); /* a renewal is sent, and waits */
        outcome rel = {0};
        if (round == 0) {
            assert_int_equal(relock_async_release(l, record, &rel), RELOCK_OK);
            relock_lock_free(l); /* the renewal in flight frees it when it ends */
        } else {
            freed_in_cb = l;
            assert_int_equal(relock_async_release(l, free_lock_cb, &rel), RELOCK_OK);
        }
        relock_async_free(a);
        kill(own.pid, SIGCONT);
        if (rel.calls != 1)
            fail_msg("round %d: the release's callback ran %ld times", round, rel.calls);
        assert_int_equal(lr.calls, 0);
        loop_fini();
    }
    testsrv_stop(&own);
}

/* A release asked for while a renewal of the kept lock is in flight (its
 * server stopped for a moment) waits for it; the program frees the lock
 * right after asking, as it may with an operation in flight: the release
 * still runs once the renewal ends, its callback gets a NULL lock, and
 * the key is gone. */
static void test_release_behind_renewal_then_free(void **state)
{
    (void)state;
    testsrv own;
    relock_async_loop lp;
    relock_async *a = on_own(&own, &lp);
    lostrec lr;
    char ours[64];
    relock_lock *l = kept(a, "rbf", &lr, ours, sizeof ours);
    kill(own.pid, SIGSTOP);
    run_for(KEEP_TTL / 3 + 500); /* a renewal is sent, and waits */
    outcome rel = {0};
    assert_int_equal(relock_async_release(l, record, &rel), RELOCK_OK);
    relock_lock_free(l);
    kill(own.pid, SIGCONT);
    finish(&rel, 10000);
    if (rel.st != RELOCK_OK)
        fail_msg("the release of the freed lock: %s: %s", relock_status_name(rel.st), rel.msg);
    assert_null(rel.l);
    redisReply *x = cmd(own.port, "GET rbf");
    int held = x->type == REDIS_REPLY_STRING;
    freeReplyObject(x);
    if (held)
        fail_msg("the key is still held after the release");
    assert_int_equal(lr.calls, 0);
    assert_int_equal(relock_async_pending(a), 0);
    end_on(a, &own);
}

/* ------------------------------------------------------------ kept locks: blocking */

/* The blocking API's cases do not depend on the loop: each runs in one of
 * the two programs, shared by their cost (the refused reconnect on libuv,
 * the others on libevent). */
typedef struct blost {
    volatile long calls;
    volatile relock_status why;
    volatile uint64_t at;
} blost;

static void on_blost(relock_lock *l, relock_status why, void *arg)
{
    (void)l;
    blost *b = arg;
    b->at = tu_now_ms();
    b->why = why;
    __atomic_add_fetch(&b->calls, 1, __ATOMIC_SEQ_CST);
}

static relock_lock *bkept(relock_client **c, int port, const char *name, blost *bl)
{
    relock_config *cfg = config_at(port, testsrv_mode_runs("modern") ? "modern" : "legacy",
                                   LONG_MS);
    assert_int_equal(relock_connect(cfg, c), RELOCK_OK);
    relock_config_free(cfg);
    relock_lock *l = NULL;
    if (relock_try_acquire(*c, name, KEEP_TTL, &l) != RELOCK_OK)
        fail_msg("acquire %s: %s", name, relock_client_error(*c)->message);
    memset(bl, 0, sizeof *bl);
    assert_int_equal(relock_keep(l, on_blost, bl), RELOCK_OK);
    return l;
}

static void wait_lost(blost *bl, long ms)
{
    uint64_t end = tu_now_ms() + (uint64_t)ms;
    while (__atomic_load_n(&bl->calls, __ATOMIC_SEQ_CST) == 0 && tu_now_ms() < end)
        tu_sleep_ms(10);
}

static void check_deadline(blost *bl, uint64_t deadline, const char *what)
{
    if (bl->calls != 1)
        fail_msg("%s: lost called %ld times", what, bl->calls);
    if (bl->at > deadline + SLACK_MS)
        fail_msg("%s: lost %lld ms after the validity's end", what,
                 (long long)(bl->at - deadline));
}

#ifndef TEST_LIBUV
static void test_blocking_keep_stalled(void **state)
{
    (void)state;
    testsrv own;
    assert_int_equal(testsrv_start(&own, NULL), 0);
    relock_client *c = NULL;
    blost bl;
    relock_lock *l = bkept(&c, own.port, "bks", &bl);
    tu_sleep_ms(RENEWED_MS);
    kill(own.pid, SIGSTOP);
    uint64_t deadline = tu_now_ms() + (uint64_t)relock_lock_validity_ms(l);
    wait_lost(&bl, KEEP_TTL + LONG_MS + 2000);
    kill(own.pid, SIGCONT);
    check_deadline(&bl, deadline, "blocking, stalled server");
    assert_int_equal(relock_keep_stop(l), RELOCK_LOST);
    assert_int_equal(bl.calls, 1);
    relock_lock_free(l);
    relock_client_free(c);
    testsrv_stop(&own);
}

#endif

#ifdef TEST_LIBUV
static void test_blocking_keep_refused(void **state)
{
    (void)state;
    int port = testsrv_free_port();
    pid_t px = proxy_on(port);
    relock_client *c = NULL;
    blost bl;
    relock_lock *l = bkept(&c, port, "bkr", &bl);
    tu_sleep_ms(RENEWED_MS);
    proxy_off(px);
    tu_sleep_ms(OUTAGE_MS);
    px = proxy_on(port);
    tu_sleep_ms(KEPT_MS);
    if (bl.calls)
        fail_msg("blocking, refused once: reported lost (%s)", relock_status_name(bl.why));
    char v[64];
    look("bkr", v, sizeof v);
    assert_true(v[0] != '\0');
    assert_int_equal(relock_keep_stop(l), RELOCK_OK);
    assert_int_equal(relock_release(l), RELOCK_OK);
    relock_lock_free(l);
    relock_client_free(c);

    l = bkept(&c, port, "bkr2", &bl);
    tu_sleep_ms(500);
    proxy_off(px);
    uint64_t deadline = tu_now_ms() + (uint64_t)relock_lock_validity_ms(l);
    wait_lost(&bl, KEEP_TTL + LONG_MS);
    check_deadline(&bl, deadline, "blocking, refused for good");
    assert_int_equal(relock_keep_stop(l), RELOCK_LOST);
    relock_lock_free(l);
    relock_client_free(c);
}

#endif

#ifndef TEST_LIBUV
static void test_blocking_keep_busy(void **state)
{
    (void)state;
    if (!testsrv_target_at_least(2, 8, 12)) {
        testsrv_note_skip("CLIENT KILL TYPE before 2.8.12");
        return;
    }
    testsrv own;
    assert_int_equal(testsrv_start(&own, NULL), 0);
    relock_client *c = NULL;
    blost bl;
    relock_lock *l = bkept(&c, own.port, "bkb", &bl);
    tu_sleep_ms(RENEWED_MS);
    busy b;
    freeReplyObject(cmd(own.port, "CLIENT KILL TYPE normal"));
    busy_start(&b, own.port);
    tu_sleep_ms(OUTAGE_MS);
    busy_stop(&b, own.port);
    tu_sleep_ms(KEPT_MS);
    if (bl.calls)
        fail_msg("blocking, busy for half a lease: reported lost (%s)", relock_status_name(bl.why));
    assert_int_equal(relock_keep_stop(l), RELOCK_OK);
    assert_int_equal(relock_keep(l, on_blost, &bl), RELOCK_OK);
    tu_sleep_ms(300);
    freeReplyObject(cmd(own.port, "CLIENT KILL TYPE normal"));
    uint64_t deadline = tu_now_ms() + (uint64_t)relock_lock_validity_ms(l);
    busy_start(&b, own.port);
    wait_lost(&bl, KEEP_TTL + LONG_MS);
    busy_stop(&b, own.port);
    check_deadline(&bl, deadline, "blocking, busy for good");
    assert_int_equal(relock_keep_stop(l), RELOCK_LOST);
    relock_lock_free(l);
    relock_client_free(c);
    testsrv_stop(&own);
}
#endif

static int group_setup(void **state)
{
    (void)state;
    return testsrv_start(&srv, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    testsrv_stop(&srv);
    return 0;
}

int main(void)
{
    /* One test alone, by name (a pattern of cmocka's filter), as the
     * sanitizer build stops the program at the first error. */
    const char *only = getenv("RELOCK_TEST_ONLY");
    if (only && *only)
        cmocka_set_test_filter(only);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_waiter_bound_in_subscribe),
        cmocka_unit_test(test_cancel_after_refused_connect),
        cmocka_unit_test(test_cancel_in_flush),
        cmocka_unit_test(test_free_in_flush),
        cmocka_unit_test(test_connect_fails_at_once),
        cmocka_unit_test(test_cancel_in_replan),
        cmocka_unit_test(test_keep_refused),
        cmocka_unit_test(test_keep_transient_probe_error),
        cmocka_unit_test(test_keep_busy_server),
        cmocka_unit_test(test_keep_stalled_server),
        cmocka_unit_test(test_free_with_release_behind_renewal),
        cmocka_unit_test(test_release_behind_renewal_then_free),
#ifndef TEST_LIBUV
        cmocka_unit_test(test_blocking_keep_stalled),
        cmocka_unit_test(test_blocking_keep_busy),
#else
        cmocka_unit_test(test_blocking_keep_refused),
#endif
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
