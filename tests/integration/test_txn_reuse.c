/*
 * A connection left inside MULTI is never used again (design.md §13.3,
 * decision 125), checked where it would cost the most: a client
 * whose operation was refused part way through its transaction goes on to
 * acquire a lock another client holds.  Were its connection still inside
 * the server's MULTI, the acquire's SET NX PX would be queued, answer
 * +QUEUED, and read as a win: two holders.
 *
 * Through the compat proxy without Lua (personality 7, --no-lua), so that
 * `relock break` goes by MULTI ... EXEC (and by WATCH with a value), and in
 * modern mode without fencing, so that the acquire is a single SET NX PX.
 * Every command of the break is refused in turn (the proxy answers it
 * -LOADING without forwarding it), then the acquire runs on the same
 * client.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "relock.h"
#include "testclient.h"
#include "testutil.h"

static testsrv proxy;

static int group_setup(void **state)
{
    if (tu_setup_server(state) != 0)
        return -1;
    static const char *const nolua[] = {"--no-lua", NULL};
    return testsrv_start_proxy(&proxy, tu_srv.port, "7", nolua);
}

static int group_teardown(void **state)
{
    testsrv_stop(&proxy);
    return tu_teardown_server(state);
}

/* A command on port (the server, or the proxy's control), its reply kept. */
static redisReply *cmd(int port, const char *fmt, ...)
{
    redisContext *ctx = redisConnect("127.0.0.1", port);
    assert_non_null(ctx);
    assert_int_equal(ctx->err, 0);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(ctx, fmt, ap);
    va_end(ap);
    redisFree(ctx);
    assert_non_null(r);
    return r;
}

static void cmd_ok(int port, const char *fmt, const char *a, const char *b)
{
    redisReply *r = cmd(port, fmt, a, b);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("%s: %s", fmt, r->str);
    freeReplyObject(r);
}

static long long proxy_replies(void)
{
    redisReply *r = cmd(proxy.port, "RELOCK-PROXY REPLIES");
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

static relock_client *client(void)
{
    static const char *const nofence[] = {"fencing", "false", NULL};
    return tu_client(proxy.port, "modern", nofence);
}

static int seq;

enum op { OP_BREAK, OP_BREAK_VALUE, OP_RELEASE, OP_EXTEND };
static const char *const op_name[] = {"break", "break with a value", "release", "extend"};

/* A stuck lock for the break to delete. */
static void stuck(const char *name)
{
    cmd_ok(tu_srv.port, "SET %s %s", name, "stuck-holder-value");
}

/* Sets up op on client a for the lock name: a stuck lock to break, or a
 * lock a holds (*l) to release or extend. */
static void prepare(enum op op, relock_client *a, const char *name, relock_lock **l)
{
    *l = NULL;
    if (op == OP_BREAK || op == OP_BREAK_VALUE)
        stuck(name);
    else
        assert_int_equal(relock_acquire(a, name, 30000, 0, l), RELOCK_OK);
}

static relock_status run(enum op op, relock_client *a, const char *name, relock_lock *l)
{
    switch (op) {
    case OP_BREAK:
        return relock_break(a, name, NULL);
    case OP_BREAK_VALUE:
        return relock_break(a, name, "stuck-holder-value");
    case OP_RELEASE:
        return relock_release(l);
    case OP_EXTEND:
        /* to a shorter lease: a failed extend leaves no more than it */
        return relock_extend(l, 20000);
    }
    return RELOCK_EINVAL;
}

/* The commands op sends from its start to its end, without faults. */
static long long count(enum op op)
{
    relock_client *c = client();
    char name[32];
    snprintf(name, sizeof name, "count%d", ++seq);
    relock_lock *l;
    prepare(op, c, name, &l);
    cmd_ok(proxy.port, "RELOCK-PROXY FAULT at-reply %s at-kind %s", "0", "hold");
    assert_int_equal(run(op, c, name, l), RELOCK_OK);
    long long n = proxy_replies();
    relock_lock_free(l);
    relock_client_free(c);
    return n;
}

static void refused_then_acquire(enum op op)
{
    long long n = count(op);
    assert_true(n >= 1 && n < 20);
    for (long long k = 1; k <= n; k++) {
        /* Another client holds "held" (directly on the server). */
        char held[32], mine[32];
        snprintf(held, sizeof held, "held%d", ++seq);
        snprintf(mine, sizeof mine, "mine%d", seq);
        relock_client *holder = tu_client(tu_srv.port, "modern", NULL);
        relock_lock *hl = NULL;
        assert_int_equal(relock_acquire(holder, held, 30000, 0, &hl), RELOCK_OK);

        relock_client *a = client(); /* connected and probed */
        relock_lock *ml;
        prepare(op, a, mine, &ml);
        char kk[24];
        snprintf(kk, sizeof kk, "%lld", k);
        cmd_ok(proxy.port, "RELOCK-PROXY FAULT at-reply %s at-kind %s", kk, "error");
        relock_status ost = run(op, a, mine, ml);
        cmd_ok(proxy.port, "RELOCK-PROXY FAULT %s%s", "off", "");
        if (op == OP_EXTEND && relock_lock_validity_ms(ml) > 20000)
            fail_msg("extend to 20000 ms, command %lld of %lld refused (%s): the validity is "
                     "%lld ms",
                     k, n, relock_status_name(ost), relock_lock_validity_ms(ml));

        relock_lock *al = NULL;
        relock_status st = relock_try_acquire(a, held, 30000, &al);
        if (st == RELOCK_OK)
            fail_msg("%s, command %lld of %lld refused (%s): the same client then acquired "
                     "a lock another client holds",
                     op_name[op], k, n, relock_status_name(ost));
        relock_lock_free(al);
        relock_lock_free(ml);
        relock_lock_free(hl);
        relock_client_free(a);
        relock_client_free(holder);
    }
}

static void test_break_without_value(void **state)
{
    (void)state;
    refused_then_acquire(OP_BREAK);
}

static void test_break_with_value(void **state)
{
    (void)state;
    refused_then_acquire(OP_BREAK_VALUE);
}

static void test_release(void **state)
{
    (void)state;
    refused_then_acquire(OP_RELEASE);
}

static void test_extend(void **state)
{
    (void)state;
    refused_then_acquire(OP_EXTEND);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_break_without_value),
        cmocka_unit_test(test_break_with_value),
        cmocka_unit_test(test_release),
        cmocka_unit_test(test_extend),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
