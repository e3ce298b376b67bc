/*
 * The proxy's newer personalities (valkey-8.1, valkey-9.0, redis-8.4):
 * native compare-and-set commands carried out on the real server behind
 * it, COMMAND INFO / DOCS for them, and Lua switched off (--no-lua and
 * RELOCK-PROXY LUA), against a real redis-server (docs/proxy.md).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "testsrv.h"

static testsrv server;

static void start_proxy(testsrv *p, const char *personality, const char *const *extra)
{
    if (testsrv_start_proxy(p, server.port, personality, extra) != 0)
        fail_msg("cannot start relock-compat-proxy --personality %s", personality);
}

static redisContext *connect_to(const testsrv *s)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);

    if (c == NULL || c->err)
        fail_msg("cannot connect to port %d: %s", s->port, c ? c->errstr : "no memory");
    redisSetTimeout(c, tv);
    return c;
}

static redisReply *cmd(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;

    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (r == NULL)
        fail_msg("no reply to '%s': %s", fmt, c->errstr);
    return r;
}

static void want_status(redisReply *r, const char *want, const char *ctx)
{
    if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, want) != 0)
        fail_msg("%s: wanted +%s, got type %d '%s'", ctx, want, r->type, r->str ? r->str : "");
    freeReplyObject(r);
}

static void want_error(redisReply *r, const char *want, const char *ctx)
{
    if (r->type != REDIS_REPLY_ERROR || strcmp(r->str, want) != 0)
        fail_msg("%s: wanted -%s, got type %d '%s'", ctx, want, r->type, r->str ? r->str : "");
    freeReplyObject(r);
}

static void want_int(redisReply *r, long long want, const char *ctx)
{
    if (r->type != REDIS_REPLY_INTEGER || r->integer != want)
        fail_msg("%s: wanted :%lld, got type %d (%lld) '%s'", ctx, want, r->type, r->integer,
                 r->str ? r->str : "");
    freeReplyObject(r);
}

static void want_str(redisReply *r, const char *want, const char *ctx)
{
    if (r->type != REDIS_REPLY_STRING || strcmp(r->str, want) != 0)
        fail_msg("%s: wanted $'%s', got type %d '%s'", ctx, want, r->type, r->str ? r->str : "");
    freeReplyObject(r);
}

static void want_nil(redisReply *r, const char *ctx)
{
    if (r->type != REDIS_REPLY_NIL)
        fail_msg("%s: wanted nil, got type %d '%s'", ctx, r->type, r->str ? r->str : "");
    freeReplyObject(r);
}

#define WRONGTYPE "WRONGTYPE Operation against a key holding the wrong kind of value"

static int group_setup(void **state)
{
    (void)state;
    if (getenv("RELOCK_PROXY") == NULL || getenv("RELOCK_PROXY")[0] == '\0') {
        fprintf(stderr, "test_native_proxy: RELOCK_PROXY must name the proxy binary\n");
        return -1;
    }
    if (testsrv_start(&server, NULL) != 0) {
        fprintf(stderr, "test_native_proxy: cannot start redis-server\n");
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    testsrv_stop(&server);
    return 0;
}

static int flush(void **state)
{
    char *r;

    (void)state;
    r = testsrv_cmd(&server, "FLUSHALL");
    if (r == NULL)
        return -1;
    free(r);
    r = testsrv_cmd(&server, "SCRIPT FLUSH");
    free(r);
    return 0;
}

/* The personalities are imitations of newer servers in front of the
 * default one; against a targeted server (the matrix) they mean nothing. */
static int skip_targeted(void)
{
    if (testsrv_target_version() == NULL)
        return 0;
    testsrv_note_skip("newer-server personalities");
    return 1;
}

/* ---- tests ---- */

static void test_info(void **state)
{
    static const struct {
        const char *pers;
        const char *lines[3];
    } cases[] = {
        {"valkey-8.1", {"redis_version:7.2.4\r\n", "server_name:valkey\r\n",
                        "valkey_version:8.1.0\r\n"}},
        {"valkey-9.0", {"redis_version:7.2.4\r\n", "server_name:valkey\r\n",
                        "valkey_version:9.0.0\r\n"}},
        {"redis-8.4", {"redis_version:8.4.0\r\n", NULL, NULL}},
    };
    (void)state;
    if (skip_targeted())
        return;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        testsrv p;
        start_proxy(&p, cases[i].pers, NULL);
        redisContext *c = connect_to(&p);
        redisReply *r = cmd(c, "INFO server");
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        for (int k = 0; k < 3 && cases[i].lines[k]; k++)
            if (!strstr(r->str, cases[i].lines[k]))
                fail_msg("%s: INFO lacks %s", cases[i].pers, cases[i].lines[k]);
        freeReplyObject(r);
        redisFree(c);
        testsrv_stop(&p);
    }
}

/* SET ... IFEQ on every newer personality: replaces only an equal value,
 * never creates, refuses another type and NX together with IFEQ. */
static void test_set_ifeq(void **state)
{
    static const char *const pers[] = {"valkey-8.1", "valkey-9.0", "redis-8.4"};
    (void)state;
    if (skip_targeted())
        return;
    for (size_t i = 0; i < sizeof(pers) / sizeof(pers[0]); i++) {
        testsrv p;
        flush(NULL);
        start_proxy(&p, pers[i], NULL);
        redisContext *c = connect_to(&p);
        want_status(cmd(c, "SET k v1"), "OK", "SET");
        want_status(cmd(c, "SET k v2 IFEQ v1 PX 60000"), "OK", "SET IFEQ equal");
        want_str(cmd(c, "GET k"), "v2", "GET after IFEQ");
        redisReply *r = cmd(c, "PTTL k");
        assert_int_equal(r->type, REDIS_REPLY_INTEGER);
        assert_true(r->integer > 50000 && r->integer <= 60000);
        freeReplyObject(r);
        want_nil(cmd(c, "SET k v3 IFEQ v1"), "SET IFEQ different");
        want_str(cmd(c, "GET k"), "v2", "unchanged after a mismatch");
        want_nil(cmd(c, "SET absent x IFEQ x"), "SET IFEQ on a missing key");
        want_int(cmd(c, "EXISTS absent"), 0, "IFEQ never creates");
        want_error(cmd(c, "SET k v3 NX IFEQ v2"), "ERR syntax error", "NX with IFEQ");
        want_error(cmd(c, "SET k v3 IFEQ v2 XX"), "ERR syntax error", "IFEQ with XX");
        want_error(cmd(c, "SET k v3 IFEQ"), "ERR syntax error", "IFEQ without a value");
        want_error(cmd(c, "SET k v3 IFEQ v2 PX 0"), "ERR invalid expire time in 'set' command",
                   "IFEQ with PX 0");
        want_int(cmd(c, "LPUSH list a"), 1, "LPUSH");
        want_error(cmd(c, "SET list x IFEQ a"), WRONGTYPE, "IFEQ on a list");
        /* GET returns the old value whether or not it was replaced. */
        want_str(cmd(c, "SET k v4 IFEQ v2 GET PX 60000"), "v2", "IFEQ GET equal");
        want_str(cmd(c, "SET k v5 IFEQ nope GET"), "v4", "IFEQ GET different");
        want_str(cmd(c, "GET k"), "v4", "GET after IFEQ GET");
        /* KEEPTTL keeps the key's TTL; without an expiry option it goes. */
        want_status(cmd(c, "SET k v6 IFEQ v4 KEEPTTL"), "OK", "IFEQ KEEPTTL");
        r = cmd(c, "PTTL k");
        assert_true(r->integer > 0);
        freeReplyObject(r);
        want_status(cmd(c, "SET k v7 IFEQ v6"), "OK", "IFEQ without expiry");
        want_int(cmd(c, "PTTL k"), -1, "no TTL after a plain IFEQ");
        /* Inside a transaction, queued and run in EXEC. */
        want_status(cmd(c, "MULTI"), "OK", "MULTI");
        want_status(cmd(c, "SET k v8 IFEQ v7"), "QUEUED", "queued");
        r = cmd(c, "EXEC");
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->elements, 1);
        assert_int_equal(r->element[0]->type, REDIS_REPLY_STATUS);
        freeReplyObject(r);
        want_str(cmd(c, "GET k"), "v8", "GET after EXEC");
        if (strcmp(pers[i], "redis-8.4") == 0) {
            want_status(cmd(c, "SET k v9 IFNE nope"), "OK", "IFNE different");
            want_nil(cmd(c, "SET k v10 IFNE v9"), "IFNE equal");
            want_status(cmd(c, "SET fresh x IFNE y"), "OK", "IFNE creates");
        } else {
            want_error(cmd(c, "SET k v9 IFNE nope"), "ERR syntax error", "no IFNE on Valkey");
        }
        redisFree(c);
        testsrv_stop(&p);
    }
}

static void test_delifeq(void **state)
{
    testsrv p;
    (void)state;
    if (skip_targeted())
        return;
    start_proxy(&p, "valkey-9.0", NULL);
    redisContext *c = connect_to(&p);
    want_status(cmd(c, "SET k v"), "OK", "SET");
    want_int(cmd(c, "DELIFEQ k other"), 0, "DELIFEQ different");
    want_str(cmd(c, "GET k"), "v", "kept");
    want_int(cmd(c, "DELIFEQ k v"), 1, "DELIFEQ equal");
    want_int(cmd(c, "EXISTS k"), 0, "deleted");
    want_int(cmd(c, "DELIFEQ k v"), 0, "DELIFEQ absent");
    want_int(cmd(c, "SADD s a"), 1, "SADD");
    want_error(cmd(c, "DELIFEQ s a"), WRONGTYPE, "DELIFEQ on a set");
    want_error(cmd(c, "DELIFEQ k"), "ERR wrong number of arguments for 'delifeq' command",
               "DELIFEQ arity");
    redisFree(c);
    testsrv_stop(&p);

    /* Valkey 8.1 had no DELIFEQ: the real server's unknown command. */
    start_proxy(&p, "valkey-8.1", NULL);
    c = connect_to(&p);
    want_error(cmd(c, "DELIFEQ k v"),
               "ERR unknown command 'DELIFEQ', with args beginning with: 'k' 'v' ",
               "DELIFEQ on 8.1");
    redisFree(c);
    testsrv_stop(&p);
}

static void test_delex_digest(void **state)
{
    testsrv p;
    (void)state;
    if (skip_targeted())
        return;
    start_proxy(&p, "redis-8.4", NULL);
    redisContext *c = connect_to(&p);
    want_status(cmd(c, "SET k v"), "OK", "SET");
    want_int(cmd(c, "DELEX k IFEQ other"), 0, "DELEX IFEQ different");
    want_int(cmd(c, "DELEX k IFNE v"), 0, "DELEX IFNE equal");
    want_int(cmd(c, "DELEX k IFEQ v"), 1, "DELEX IFEQ equal");
    want_int(cmd(c, "DELEX k IFEQ v"), 0, "DELEX IFEQ absent");
    want_int(cmd(c, "DELEX k IFNE v"), 0, "DELEX IFNE absent");
    want_status(cmd(c, "SET k v"), "OK", "SET");
    want_int(cmd(c, "DELEX k IFNE w"), 1, "DELEX IFNE different");
    want_int(cmd(c, "RPUSH l a"), 1, "RPUSH");
    want_error(cmd(c, "DELEX l IFEQ a"), WRONGTYPE, "DELEX IFEQ on a list");
    want_int(cmd(c, "DELEX l"), 1, "DELEX without a condition deletes any type");
    want_int(cmd(c, "DELEX l"), 0, "DELEX of a missing key");
    want_error(cmd(c, "DELEX k IFEQ"), "ERR syntax error", "DELEX condition without value");
    want_error(cmd(c, "DELEX k SOMETIMES v"), "ERR syntax error", "DELEX unknown condition");
    want_error(cmd(c, "DELEX"), "ERR wrong number of arguments for 'delex' command",
               "DELEX arity");
    want_error(cmd(c, "DELEX k IFDEQ 0123456789abcdef"),
               "ERR relock-proxy: IFDEQ and IFDNE are not emulated", "IFDEQ");

    redisReply *r = cmd(c, "COMMAND INFO DIGEST");
    int have_digest = r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
                      r->element[0]->type == REDIS_REPLY_ARRAY;
    freeReplyObject(r);
    if (have_digest) {
        want_status(cmd(c, "SET e %s", ""), "OK", "SET empty");
        /* XXH3-64 of the empty string, seed 0. */
        want_str(cmd(c, "DIGEST e"), "2d06800538d394c2", "DIGEST of an empty value");
        r = cmd(c, "DIGEST k");
        assert_int_equal(r->type, REDIS_REPLY_NIL);
        freeReplyObject(r);
        want_int(cmd(c, "SADD s a"), 1, "SADD");
        want_error(cmd(c, "DIGEST s"), WRONGTYPE, "DIGEST of a set");
    } else {
        fprintf(stderr, "SKIPPED: DIGEST (proxy built without xxhash.h)\n");
    }
    redisFree(c);
    testsrv_stop(&p);
}

/* Whether a reply holds the string word at any depth. */
static int mentions(const redisReply *r, const char *word)
{
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)
        return strcmp(r->str, word) == 0;
    if (r->type != REDIS_REPLY_ARRAY)
        return 0;
    for (size_t i = 0; i < r->elements; i++)
        if (mentions(r->element[i], word))
            return 1;
    return 0;
}

/* COMMAND INFO answers for the native commands (capability detection),
 * nil for the ones the personality lacks, and the real server's entry for
 * the rest, in the order asked. */
static void test_command_info(void **state)
{
    testsrv p;
    (void)state;
    if (skip_targeted())
        return;
    start_proxy(&p, "valkey-9.0", NULL);
    redisContext *c = connect_to(&p);
    redisReply *r = cmd(c, "COMMAND INFO GET DELIFEQ DELEX NOSUCH");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 4);
    assert_int_equal(r->element[0]->type, REDIS_REPLY_ARRAY);
    assert_string_equal(r->element[0]->element[0]->str, "get");
    assert_int_equal(r->element[1]->type, REDIS_REPLY_ARRAY);
    assert_string_equal(r->element[1]->element[0]->str, "delifeq");
    assert_int_equal(r->element[1]->element[1]->integer, 3);
    assert_int_equal(r->element[2]->type, REDIS_REPLY_NIL);
    assert_int_equal(r->element[3]->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
    r = cmd(c, "COMMAND DOCS DELIFEQ GET");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 4);
    int names = 0;
    for (size_t i = 0; i < r->elements; i += 2)
        names += strcmp(r->element[i]->str, "delifeq") == 0 || strcmp(r->element[i]->str, "get") == 0;
    assert_int_equal(names, 2);
    freeReplyObject(r);
    redisFree(c);
    testsrv_stop(&p);

    /* SET's documented arguments name IFEQ (how a client learns of it). */
    static const char *const with_ifeq[] = {"valkey-8.1", "redis-8.4"};
    for (size_t k = 0; k < 2; k++) {
        start_proxy(&p, with_ifeq[k], NULL);
        c = connect_to(&p);
        r = cmd(c, "COMMAND DOCS SET");
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->elements, 2);
        assert_string_equal(r->element[0]->str, "set");
        assert_true(mentions(r->element[1], "IFEQ"));
        assert_true(mentions(r->element[1], "IFNE") == (k == 1));
        freeReplyObject(r);
        redisFree(c);
        testsrv_stop(&p);
    }
    /* The plain server's SET does not. */
    start_proxy(&p, "7", NULL);
    c = connect_to(&p);
    r = cmd(c, "COMMAND DOCS SET");
    assert_int_equal(r->elements, 2);
    assert_false(mentions(r->element[1], "IFEQ"));
    freeReplyObject(r);
    redisFree(c);
    testsrv_stop(&p);

    start_proxy(&p, "redis-8.4", NULL);
    c = connect_to(&p);
    r = cmd(c, "COMMAND INFO DELEX DELIFEQ");
    assert_int_equal(r->elements, 2);
    assert_int_equal(r->element[0]->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->element[0]->element[1]->integer, -2);
    assert_int_equal(r->element[1]->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
    redisFree(c);
    testsrv_stop(&p);
}

static void test_no_lua(void **state)
{
    static const char *const pers[] = {"7", "valkey-8.1", "valkey-9.0", "redis-8.4"};
    static const char *const extra[] = {"--no-lua", NULL};
    (void)state;
    if (skip_targeted())
        return;
    /* What the real server says of a command it does not know, sent with
     * the same arguments; a server without Lua says the same of EVAL. */
    char *real = testsrv_cmd(&server, "XEVAL %s %s", "return 1", "0");
    assert_non_null(real);
    const char *tail = strstr(real, "', with args");
    assert_non_null(tail);
    char want[256];
    snprintf(want, sizeof want, "ERR unknown command 'EVAL%s", tail);
    for (size_t i = 0; i < sizeof(pers) / sizeof(pers[0]); i++) {
        testsrv p;
        start_proxy(&p, pers[i], extra);
        redisContext *c = connect_to(&p);
        want_status(cmd(c, "RELOCK-PROXY RESET"), "OK", "RESET");
        redisReply *r = cmd(c, "EVAL %s %s", "return 1", "0");
        assert_int_equal(r->type, REDIS_REPLY_ERROR);
        assert_string_equal(r->str, want);
        freeReplyObject(r);
        want_error(cmd(c, "evalsha abc 0"),
                   "ERR unknown command 'evalsha', with args beginning with: 'abc' '0' ",
                   "EVALSHA");
        want_error(cmd(c, "SCRIPT LOAD x"),
                   "ERR unknown command 'SCRIPT', with args beginning with: 'LOAD' 'x' ",
                   "SCRIPT");
        want_error(cmd(c, "FUNCTION LIST"),
                   "ERR unknown command 'FUNCTION', with args beginning with: 'LIST' ",
                   "FUNCTION");
        r = cmd(c, "COMMAND INFO EVAL GET");
        assert_int_equal(r->elements, 2);
        assert_int_equal(r->element[0]->type, REDIS_REPLY_NIL);
        assert_int_equal(r->element[1]->type, REDIS_REPLY_ARRAY);
        freeReplyObject(r);
        /* In a transaction the unknown command aborts EXEC. */
        want_status(cmd(c, "MULTI"), "OK", "MULTI");
        r = cmd(c, "EVAL %s %s", "return 1", "0");
        assert_int_equal(r->type, REDIS_REPLY_ERROR);
        freeReplyObject(r);
        want_error(cmd(c, "EXEC"), "EXECABORT Transaction discarded because of previous errors.",
                   "EXEC after EVAL");
        want_int(cmd(c, "RELOCK-PROXY REFUSED"), 5, "refusals counted");
        /* The switch at run time. */
        want_status(cmd(c, "RELOCK-PROXY LUA on"), "OK", "LUA on");
        want_int(cmd(c, "EVAL %s %s", "return 7", "0"), 7, "EVAL with Lua on");
        want_status(cmd(c, "RELOCK-PROXY LUA off"), "OK", "LUA off");
        r = cmd(c, "EVAL %s %s", "return 7", "0");
        assert_int_equal(r->type, REDIS_REPLY_ERROR);
        freeReplyObject(r);
        /* The native commands still work: they are the proxy's scripts. */
        if (strcmp(pers[i], "valkey-9.0") == 0) {
            want_status(cmd(c, "SET k v"), "OK", "SET");
            want_int(cmd(c, "DELIFEQ k v"), 1, "DELIFEQ without Lua");
        }
        redisFree(c);
        testsrv_stop(&p);
    }
    free(real);

    /* An emulated old version keeps its old form. */
    testsrv p;
    start_proxy(&p, "2.6.11", extra);
    redisContext *c = connect_to(&p);
    want_error(cmd(c, "eval %s %s", "return 1", "0"), "ERR unknown command 'eval'", "2.6.11");
    redisFree(c);
    testsrv_stop(&p);
}

/* Compare-and-set increments from two processes at once: with SET IFEQ
 * atomic, none is lost.  Each reads the counter, then sets it one higher
 * only if it still holds what was read, and retries when it did not. */
static int cas_increments(int port, int n)
{
    struct timeval tv = {10, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c == NULL || c->err)
        return 10;
    redisSetTimeout(c, tv);
    for (int done = 0, tries = 0; done < n && tries < 100 * n; tries++) {
        redisReply *r = redisCommand(c, "GET counter");
        if (r == NULL || r->type != REDIS_REPLY_STRING)
            return 11;
        long v = atol(r->str);
        char was[32], now[32];
        snprintf(was, sizeof was, "%s", r->str);
        snprintf(now, sizeof now, "%ld", v + 1);
        freeReplyObject(r);
        r = redisCommand(c, "SET counter %s IFEQ %s", now, was);
        if (r == NULL || (r->type != REDIS_REPLY_STATUS && r->type != REDIS_REPLY_NIL))
            return 12;
        done += r->type == REDIS_REPLY_STATUS;
        freeReplyObject(r);
    }
    redisFree(c);
    return 0;
}

static void test_cas_atomic(void **state)
{
    enum { N = 300 };
    testsrv p;
    (void)state;
    if (skip_targeted())
        return;
    start_proxy(&p, "valkey-8.1", NULL);
    redisContext *c = connect_to(&p);
    want_status(cmd(c, "SET counter 0"), "OK", "SET counter");
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        assert_true(kids[k] >= 0);
        if (kids[k] == 0)
            _exit(cas_increments(p.port, N));
    }
    for (int k = 0; k < 2; k++) {
        int status = 0;
        assert_int_equal(waitpid(kids[k], &status, 0), kids[k]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    want_str(cmd(c, "GET counter"), "600", "no increment lost");
    redisFree(c);
    testsrv_stop(&p);
}

/* The proxy's scripts go as EVALSHA once loaded; a server that lost them
 * (SCRIPT FLUSH) gets the command refused once, with the reason, and EVAL
 * from then on. */
static void test_script_cache(void **state)
{
    testsrv p;
    (void)state;
    if (skip_targeted())
        return;
    char *r0 = testsrv_cmd(&server, "CONFIG RESETSTAT");
    free(r0);
    start_proxy(&p, "valkey-9.0", NULL);
    redisContext *c = connect_to(&p);
    want_status(cmd(c, "SET k v"), "OK", "SET");
    want_int(cmd(c, "DELIFEQ k v"), 1, "DELIFEQ");
    redisContext *real = connect_to(&server);
    redisReply *r = cmd(real, "INFO commandstats");
    assert_non_null(strstr(r->str, "cmdstat_evalsha:calls=1,"));
    assert_null(strstr(r->str, "cmdstat_eval:"));
    freeReplyObject(r);
    want_status(cmd(real, "SCRIPT FLUSH"), "OK", "SCRIPT FLUSH");
    want_status(cmd(c, "SET k v"), "OK", "SET");
    want_error(cmd(c, "DELIFEQ k v"),
               "ERR relock-proxy: the proxy's script was flushed from the server (NOSCRIPT); "
               "the command did not run",
               "DELIFEQ after a flush");
    want_str(cmd(real, "GET k"), "v", "not deleted");
    want_int(cmd(c, "DELIFEQ k v"), 1, "DELIFEQ by EVAL");
    redisFree(real);
    redisFree(c);
    testsrv_stop(&p);
}

/* RELOCK-PROXY COMMANDS counts what clients sent, by name. */
static void test_command_counter(void **state)
{
    testsrv p;
    (void)state;
    if (skip_targeted())
        return;
    start_proxy(&p, "valkey-9.0", NULL);
    redisContext *c = connect_to(&p);
    want_status(cmd(c, "RELOCK-PROXY RESET"), "OK", "RESET");
    want_status(cmd(c, "SET k v"), "OK", "SET");
    want_int(cmd(c, "DELIFEQ k v"), 1, "DELIFEQ");
    want_int(cmd(c, "delifeq k v"), 0, "DELIFEQ again");
    want_int(cmd(c, "RELOCK-PROXY COMMANDS"), 3, "COMMANDS");
    redisReply *r = cmd(c, "RELOCK-PROXY COMMANDS-LIST");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    assert_string_equal(r->element[0]->str, "SET 1");
    assert_string_equal(r->element[1]->str, "DELIFEQ 2");
    freeReplyObject(r);
    /* The native commands switched off: personality 7's answers. */
    want_status(cmd(c, "RELOCK-PROXY NATIVE off"), "OK", "NATIVE off");
    want_error(cmd(c, "DELIFEQ k v"),
               "ERR unknown command 'DELIFEQ', with args beginning with: 'k' 'v' ",
               "DELIFEQ while off");
    r = cmd(c, "COMMAND INFO DELIFEQ");
    assert_int_equal(r->element[0]->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
    want_status(cmd(c, "RELOCK-PROXY NATIVE on"), "OK", "NATIVE on");
    want_int(cmd(c, "DELIFEQ k v"), 0, "DELIFEQ on again");
    redisFree(c);
    testsrv_stop(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_info, flush),
        cmocka_unit_test_setup(test_set_ifeq, flush),
        cmocka_unit_test_setup(test_delifeq, flush),
        cmocka_unit_test_setup(test_delex_digest, flush),
        cmocka_unit_test_setup(test_command_info, flush),
        cmocka_unit_test_setup(test_no_lua, flush),
        cmocka_unit_test_setup(test_cas_atomic, flush),
        cmocka_unit_test_setup(test_script_cache, flush),
        cmocka_unit_test_setup(test_command_counter, flush),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
