/*
 * test_proxy: relock-compat-proxy against a real redis-server.
 *
 * One redis-server for the whole program (group setup); each test starts
 * the proxies it needs, in front of it, with testsrv_start_proxy, and
 * checks the replies of every personality against what the old servers
 * answered (docs/design.md §3.4).  Keys are checked on the real
 * server directly where the point is what reached it.
 *
 * The same checks run against the real old server a personality imitates
 * (docs/matrix.md): with RELOCK_TEST_SERVER naming a 2.0.x, 2.2.x, 2.4.x or
 * 2.6.0-2.6.11 binary, the server itself stands where the proxy of its
 * personality stood ("2.6.N" for exactly 2.6.N), and the checks of other
 * personalities and of the proxy's own features (control commands, faults,
 * command line) are skipped.  A reply where the real server differs from
 * the proxy fails there as it would fail here.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "testsrv.h"

static testsrv server;

static const char *const personalities[] = {"2.0", "2.2", "2.4", "2.6.0", "2.6.11", "7"};
#define NPERS (sizeof(personalities) / sizeof(personalities[0]))

/* ---- helpers ---- */

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long long now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* With RELOCK_TEST_SERVER: the personality of the real server's version,
 * "2.0", "2.2", "2.4" or "2.6.N", or "" for a version no personality
 * imitates (2.6.12 and later: personality 7 imitates nothing). */
static const char *real_personality(void)
{
    static char pers[16];
    const char *v = testsrv_target_version();
    int a = 0, b = 0, c = 0;

    if (v == NULL || sscanf(v, "%d.%d.%d", &a, &b, &c) < 2)
        return NULL;
    if (a == 2 && (b == 0 || b == 2 || b == 4))
        snprintf(pers, sizeof(pers), "2.%d", b);
    else if (a == 2 && b == 6 && c < 12)
        snprintf(pers, sizeof(pers), "2.6.%d", c);
    else
        pers[0] = '\0';
    return pers;
}

/* Checks of the proxy's own features: nothing to compare with a real server. */
static int proxy_only(const char *what)
{
    if (real_personality() == NULL)
        return 0;
    testsrv_note_skip(what);
    return 1;
}

/* 1 with p answering as the personality: a proxy started in front of the
 * real server, or (RELOCK_TEST_SERVER) the real server of that version
 * itself, with nothing to stop.  0 when the personality is not the real
 * server's: skip its checks. */
static int start_proxy(testsrv *p, const char *personality)
{
    const char *real = real_personality();

    if (real != NULL) {
        if (strcmp(real, personality) != 0)
            return 0;
        memset(p, 0, sizeof(*p));
        p->port = server.port;
        return 1;
    }
    if (testsrv_start_proxy(p, server.port, personality, NULL) != 0)
        fail_msg("cannot start relock-compat-proxy --personality %s", personality);
    return 1;
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

/* Each want_* checks the reply and frees it. */
static void want_status(redisReply *r, const char *want, const char *ctx)
{
    if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, want) != 0)
        fail_msg("%s: wanted +%s, got type %d '%s'", ctx, want, r->type,
                 r->str ? r->str : "");
    freeReplyObject(r);
}

static void want_error(redisReply *r, const char *want, const char *ctx)
{
    if (r->type != REDIS_REPLY_ERROR || strcmp(r->str, want) != 0)
        fail_msg("%s: wanted -%s, got type %d '%s'", ctx, want, r->type,
                 r->str ? r->str : "");
    freeReplyObject(r);
}

static void want_int(redisReply *r, long long want, const char *ctx)
{
    if (r->type != REDIS_REPLY_INTEGER || r->integer != want)
        fail_msg("%s: wanted :%lld, got type %d (%lld) '%s'", ctx, want, r->type,
                 r->integer, r->str ? r->str : "");
    freeReplyObject(r);
}

static void want_str(redisReply *r, const char *want, const char *ctx)
{
    if (r->type != REDIS_REPLY_STRING || strcmp(r->str, want) != 0)
        fail_msg("%s: wanted $'%s', got type %d '%s'", ctx, want, r->type,
                 r->str ? r->str : "");
    freeReplyObject(r);
}

static void want_nil(redisReply *r, const char *ctx)
{
    if (r->type != REDIS_REPLY_NIL)
        fail_msg("%s: wanted nil, got type %d '%s'", ctx, r->type, r->str ? r->str : "");
    freeReplyObject(r);
}

/* Read a key straight from the real server. */
static char *upstream(const char *fmt, const char *key)
{
    char *v = testsrv_cmd(&server, fmt, key);

    if (v == NULL)
        fail_msg("the real server does not answer");
    return v;
}

static long long upstream_int(const char *fmt, const char *key)
{
    char *v = upstream(fmt, key);
    long long n = strtoll(v, NULL, 10);

    free(v);
    return n;
}

static int is_old(const char *pers)
{
    return strcmp(pers, "7") != 0;
}

static int before_26(const char *pers)
{
    return strncmp(pers, "2.6", 3) != 0 && is_old(pers);
}

/* ---- setup ---- */

static int group_setup(void **state)
{
    (void)state;
    if (real_personality() == NULL &&
        (getenv("RELOCK_PROXY") == NULL || getenv("RELOCK_PROXY")[0] == '\0')) {
        fprintf(stderr, "test_proxy: RELOCK_PROXY must name the proxy binary "
                        "(ctest sets it)\n");
        return -1;
    }
    if (testsrv_start(&server, NULL) != 0) {
        fprintf(stderr, "test_proxy: cannot start redis-server\n");
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
    return 0;
}

/* ---- tests ---- */

/* INFO: version line per personality; no sections before 2.6; sections
 * (INFO server) only from 2.6. */
static void test_info_version(void **state)
{
    static const char *const versions[] = {"2.0.5", "2.2.15", "2.4.18", "2.6.0", "2.6.11"};
    size_t i;

    (void)state;
    for (i = 0; i < NPERS; i++) {
        const char *pers = personalities[i];
        testsrv p;
        redisContext *c;
        redisReply *r;
        char want[64];

        if (!start_proxy(&p, pers))
            continue;
        c = connect_to(&p);
        r = cmd(c, "INFO");
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        if (is_old(pers)) {
            snprintf(want, sizeof(want), "redis_version:%s\r\n", versions[i]);
            assert_non_null(strstr(r->str, want));
        }
        if (before_26(pers)) {
            /* The first line is the version line; no header, no blank line. */
            assert_int_equal(strncmp(r->str, want, strlen(want)), 0);
            assert_null(strstr(r->str, "# "));
            assert_null(strstr(r->str, "\r\n\r\n"));
        } else {
            assert_int_equal(strncmp(r->str, "# Server\r\n", 10), 0);
        }
        if (!is_old(pers)) {
            /* Personality 7 keeps the real server's version. */
            char *real = testsrv_cmd(&server, "INFO server");

            assert_non_null(real);
            assert_non_null(strstr(real, "redis_version:"));
            {
                const char *a = strstr(real, "redis_version:");
                const char *b = strstr(r->str, "redis_version:");
                size_t len = strcspn(a, "\r\n");

                assert_int_equal(strncmp(a, b, len), 0);
            }
            free(real);
        }
        freeReplyObject(r);

        r = cmd(c, "INFO server");
        if (before_26(pers)) {
            want_error(r, "ERR wrong number of arguments for 'info' command", pers);
        } else {
            assert_int_equal(r->type, REDIS_REPLY_STRING);
            assert_non_null(strstr(r->str, "redis_version:"));
            freeReplyObject(r);
        }
        redisFree(c);
        testsrv_stop(&p);
    }
}

/* SET with options: refused before 2.6.12 (never reaching the server). */
static void test_set_options(void **state)
{
    size_t i;

    (void)state;
    for (i = 0; i < NPERS; i++) {
        const char *pers = personalities[i];
        testsrv p;
        redisContext *c;

        flush(NULL);
        if (!start_proxy(&p, pers))
            continue;
        c = connect_to(&p);
        if (is_old(pers)) {
            char *v;

            want_error(cmd(c, "SET k v NX PX 1000"),
                         "ERR wrong number of arguments for 'set' command", pers);
            want_error(cmd(c, "SET k v EX 10"),
                         "ERR wrong number of arguments for 'set' command", pers);
            v = upstream("GET %s", "k");
            assert_string_equal(v, "(nil)");
            free(v);
            /* The plain form works everywhere. */
            want_status(cmd(c, "SET k v"), "OK", pers);
        } else {
            want_status(cmd(c, "SET k v NX PX 1000"), "OK", pers);
            want_nil(cmd(c, "SET k v NX PX 1000"), pers);
        }
        /* SETNX / GETSET / GET as in the table of old replies. */
        want_int(cmd(c, "SETNX k2 123"), 1, pers);
        want_str(cmd(c, "GETSET k2 456"), "123", pers);
        want_str(cmd(c, "GET k2"), "456", pers);
        redisFree(c);
        testsrv_stop(&p);
    }
}

/* EVAL, PEXPIRE, PTTL, TIME, SCRIPT: unknown before 2.6.0, working from
 * 2.6.0; the name comes back as the client spelled it. */
static void test_scripting_family(void **state)
{
    size_t i;

    (void)state;
    for (i = 0; i < NPERS; i++) {
        const char *pers = personalities[i];
        testsrv p;
        redisContext *c;
        redisReply *r;

        flush(NULL);
        if (!start_proxy(&p, pers))
            continue;
        c = connect_to(&p);
        want_status(cmd(c, "SET k2 v"), "OK", pers);
        if (before_26(pers)) {
            want_error(cmd(c, "EVAL %s 0", "return 1"), "ERR unknown command 'EVAL'", pers);
            want_error(cmd(c, "eval %s 0", "return 1"), "ERR unknown command 'eval'", pers);
            want_error(cmd(c, "PEXPIRE k2 1000"), "ERR unknown command 'PEXPIRE'", pers);
            want_error(cmd(c, "PTTL k2"), "ERR unknown command 'PTTL'", pers);
            want_error(cmd(c, "TIME"), "ERR unknown command 'TIME'", pers);
            want_error(cmd(c, "SCRIPT LOAD %s", "return 1"),
                         "ERR unknown command 'SCRIPT'", pers);
            /* Nothing reached the server (a real one before 2.6 has
             * TTL only). */
            assert_int_equal(upstream_int(real_personality() ? "TTL %s" : "PTTL %s", "k2"), -1);
        } else {
            want_int(cmd(c, "EVAL %s 0", "return 1"), 1, pers);
            want_int(cmd(c, "PEXPIRE k2 1000"), 1, pers);
            r = cmd(c, "PTTL k2");
            assert_int_equal(r->type, REDIS_REPLY_INTEGER);
            assert_true(r->integer > 0 && r->integer <= 1000);
            freeReplyObject(r);
            r = cmd(c, "TIME");
            assert_int_equal(r->type, REDIS_REPLY_ARRAY);
            assert_int_equal(r->elements, 2);
            freeReplyObject(r);
            want_str(cmd(c, "SCRIPT LOAD %s", "return 1"),
                          "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", pers);
            /* Compare-and-delete by EVAL: 0 when the value differs. */
            want_int(cmd(c, "EVAL %s 1 k2 other",
                           "if redis.call('get', KEYS[1]) == ARGV[1] then "
                           "return redis.call('del', KEYS[1]) else return 0 end"),
                       0, pers);
        }
        redisFree(c);
        testsrv_stop(&p);
    }
}

/* WATCH: unknown on 2.0, from 2.2 a working optimistic lock. */
static void test_watch(void **state)
{
    size_t i;

    (void)state;
    for (i = 0; i < NPERS; i++) {
        const char *pers = personalities[i];
        testsrv p;
        redisContext *c;
        redisContext *other;
        redisReply *r;

        flush(NULL);
        if (!start_proxy(&p, pers))
            continue;
        c = connect_to(&p);
        other = connect_to(&p);
        want_status(cmd(c, "SET k2 v"), "OK", pers);
        if (strcmp(pers, "2.0") == 0) {
            want_error(cmd(c, "WATCH k2"), "ERR unknown command 'WATCH'", pers);
            want_error(cmd(c, "UNWATCH"), "ERR unknown command 'UNWATCH'", pers);
        } else {
            want_status(cmd(c, "WATCH k2"), "OK", pers);
            want_status(cmd(other, "SET k2 changed"), "OK", pers);
            want_status(cmd(c, "MULTI"), "OK", pers);
            want_error(cmd(c, "WATCH k2"), "ERR WATCH inside MULTI is not allowed", pers);
            want_status(cmd(c, "DEL k2"), "QUEUED", pers);
            r = cmd(c, "EXEC");
            assert_int_equal(r->type, REDIS_REPLY_NIL); /* *-1: conflict */
            freeReplyObject(r);
        }
        want_error(cmd(c, "EXEC"), "ERR EXEC without MULTI", pers);
        /* MULTI / DEL / EXEC works everywhere. */
        want_status(cmd(c, "MULTI"), "OK", pers);
        want_status(cmd(c, "DEL k2"), "QUEUED", pers);
        r = cmd(c, "EXEC");
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->elements, 1);
        assert_int_equal(r->element[0]->integer, 1);
        freeReplyObject(r);
        redisFree(other);
        redisFree(c);
        testsrv_stop(&p);
    }
}

/* TTL of a missing key: -1 until 2.8 (also inside MULTI); PTTL -1 on 2.6. */
static void test_ttl_missing(void **state)
{
    size_t i;

    (void)state;
    for (i = 0; i < NPERS; i++) {
        const char *pers = personalities[i];
        testsrv p;
        redisContext *c;
        redisReply *r;
        long long want = is_old(pers) ? -1 : -2;

        flush(NULL);
        if (!start_proxy(&p, pers))
            continue;
        c = connect_to(&p);
        want_int(cmd(c, "TTL nokey"), want, pers);
        want_status(cmd(c, "SET k2 v"), "OK", pers);
        want_int(cmd(c, "TTL k2"), -1, pers);
        if (!before_26(pers))
            want_int(cmd(c, "PTTL nokey"), want, pers);
        want_str(cmd(c, "GET k2"), "v", pers);
        want_nil(cmd(c, "GET nokey"), pers);
        want_int(cmd(c, "DEL nokey"), 0, pers);
        want_status(cmd(c, "MULTI"), "OK", pers);
        want_status(cmd(c, "TTL nokey"), "QUEUED", pers);
        want_status(cmd(c, "GET k2"), "QUEUED", pers);
        r = cmd(c, "EXEC");
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->elements, 2);
        assert_int_equal(r->element[0]->integer, want);
        assert_string_equal(r->element[1]->str, "v");
        freeReplyObject(r);
        redisFree(c);
        testsrv_stop(&p);
    }
}

/* 2.0: a key with an expiry counts as absent for writes; 2.2 on: not. */
static void test_v20_volatile_writes(void **state)
{
    static const char *const pers_list[] = {"2.0", "2.2"};
    size_t i;

    (void)state;
    for (i = 0; i < 2; i++) {
        const char *pers = pers_list[i];
        int v20 = strcmp(pers, "2.0") == 0;
        testsrv p;
        redisContext *c;
        redisReply *r;

        flush(NULL);
        if (!start_proxy(&p, pers))
            continue;
        c = connect_to(&p);

        /* SETNX on a volatile key */
        want_status(cmd(c, "SETEX vk 100 old"), "OK", pers);
        want_int(cmd(c, "SETNX vk new"), v20 ? 1 : 0, pers);
        want_str(cmd(c, "GET vk"), v20 ? "new" : "old", pers);
        r = cmd(c, "TTL vk");
        assert_int_equal(r->type, REDIS_REPLY_INTEGER);
        if (v20)
            assert_int_equal(r->integer, -1); /* the new key has no TTL */
        else
            assert_true(r->integer > 0);
        freeReplyObject(r);
        /* SETNX on a key without expiry, and on a missing key */
        want_status(cmd(c, "SET plain x"), "OK", pers);
        want_int(cmd(c, "SETNX plain y"), 0, pers);
        want_int(cmd(c, "SETNX fresh y"), 1, pers);

        /* EXPIRE twice */
        want_status(cmd(c, "SET ek v"), "OK", pers);
        want_int(cmd(c, "EXPIRE ek 100"), 1, pers);
        want_int(cmd(c, "EXPIRE ek 1000"), v20 ? 0 : 1, pers);
        r = cmd(c, "TTL ek");
        assert_int_equal(r->type, REDIS_REPLY_INTEGER);
        if (v20)
            assert_true(r->integer > 0 && r->integer <= 100);
        else
            assert_true(r->integer > 100 && r->integer <= 1000);
        freeReplyObject(r);
        want_int(cmd(c, "EXPIRE nokey 10"), 0, pers);

        /* GETSET returns the old value and clears the TTL on every version */
        want_status(cmd(c, "SETEX gk 100 old"), "OK", pers);
        want_str(cmd(c, "GETSET gk new"), "old", pers);
        want_int(cmd(c, "TTL gk"), -1, pers);

        /* INCR on a volatile counter starts again on 2.0 */
        want_status(cmd(c, "SETEX cnt 100 5"), "OK", pers);
        want_int(cmd(c, "INCR cnt"), v20 ? 1 : 6, pers);

        /* Errors of a rewritten command keep their own text */
        want_status(cmd(c, "SET s abc"), "OK", pers);
        /* Real 2.0.5 says "ERR value is not an integer": the proxy keeps
         * the modern text (docs/proxy.md, "Differences from the real
         * servers"). */
        want_error(cmd(c, "INCR s"),
                   v20 && real_personality() != NULL
                       ? "ERR value is not an integer"
                       : "ERR value is not an integer or out of range",
                   pers);

        /* The rewrite also works inside MULTI (2.0 has MULTI) */
        want_status(cmd(c, "SETEX mk 100 old"), "OK", pers);
        want_status(cmd(c, "MULTI"), "OK", pers);
        want_status(cmd(c, "SETNX mk new"), "QUEUED", pers);
        want_status(cmd(c, "GET mk"), "QUEUED", pers);
        r = cmd(c, "EXEC");
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->elements, 2);
        assert_int_equal(r->element[0]->integer, v20 ? 1 : 0);
        assert_string_equal(r->element[1]->str, v20 ? "new" : "old");
        freeReplyObject(r);
        redisFree(c);
        testsrv_stop(&p);
    }
}

/* 2.0: BLPOP treats a volatile list as absent (and blocks). */
static void test_v20_blpop_volatile(void **state)
{
    testsrv p;
    redisContext *c;
    redisReply *r;
    long long t0;

    (void)state;
    flush(NULL);
    if (!start_proxy(&p, "2.0"))
        return;
    c = connect_to(&p);
    want_int(cmd(c, "RPUSH l a"), 1, "2.0");
    want_int(cmd(c, "EXPIRE l 100"), 1, "2.0");
    t0 = now_ms();
    r = cmd(c, "BLPOP l 1");
    assert_int_equal(r->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
    assert_true(now_ms() - t0 >= 900);
    /* A list without expiry pops at once, and the reply order holds. */
    want_int(cmd(c, "RPUSH l2 b"), 1, "2.0");
    r = cmd(c, "BLPOP l2 1");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_string_equal(r->element[1]->str, "b");
    freeReplyObject(r);
    want_status(cmd(c, "PING"), "PONG", "2.0");
    redisFree(c);
    testsrv_stop(&p);
}

/* Unknown command inside MULTI: on 2.0 the error comes at once and EXEC
 * runs what was queued; from 2.6.5 EXEC is refused. */
static void test_unknown_in_multi(void **state)
{
    testsrv p;
    redisContext *c;
    redisReply *r;
    char *v;

    (void)state;
    flush(NULL);
    if (start_proxy(&p, "2.0")) {
        c = connect_to(&p);
        want_status(cmd(c, "MULTI"), "OK", "2.0");
        want_error(cmd(c, "EVAL %s 0", "return 1"), "ERR unknown command 'EVAL'", "2.0");
        want_status(cmd(c, "SET k v"), "QUEUED", "2.0");
        want_error(cmd(c, "SET k v NX PX 10"),
                     "ERR wrong number of arguments for 'set' command", "2.0");
        r = cmd(c, "EXEC");
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->elements, 1);
        assert_string_equal(r->element[0]->str, "OK");
        freeReplyObject(r);
        /* Nothing queued: an empty array */
        want_status(cmd(c, "MULTI"), "OK", "2.0");
        want_error(cmd(c, "TIME"), "ERR unknown command 'TIME'", "2.0");
        r = cmd(c, "EXEC");
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->elements, 0);
        freeReplyObject(r);
        redisFree(c);
        testsrv_stop(&p);
    }

    flush(NULL);
    if (start_proxy(&p, "2.6.11")) {
        c = connect_to(&p);
        want_status(cmd(c, "MULTI"), "OK", "2.6.11");
        want_error(cmd(c, "SET k v NX PX 10"),
                     "ERR wrong number of arguments for 'set' command", "2.6.11");
        want_status(cmd(c, "SET k2 v"), "QUEUED", "2.6.11");
        want_error(cmd(c, "EXEC"),
                     "EXECABORT Transaction discarded because of previous errors.", "2.6.11");
        v = upstream("GET %s", "k2");
        assert_string_equal(v, "(nil)");
        free(v);
        redisFree(c);
        testsrv_stop(&p);
    }
}

/* Subcommands a version lacked get the container's old syntax error. */
static void test_subcommands(void **state)
{
    testsrv p;
    redisContext *c;
    redisReply *r;

    (void)state;
    if (start_proxy(&p, "2.4")) {
        c = connect_to(&p);
        want_error(cmd(c, "CLIENT ID"), "ERR Syntax error, try CLIENT (LIST | KILL ip:port)",
                     "2.4");
        want_error(cmd(c, "CLIENT SETNAME x"),
                     "ERR Syntax error, try CLIENT (LIST | KILL ip:port)", "2.4");
        r = cmd(c, "CLIENT LIST");
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        freeReplyObject(r);
        want_error(cmd(c, "SCAN 0"), "ERR unknown command 'SCAN'", "2.4");
        /* Several values per LPUSH came with 2.4; several fields per HSET
         * only with 4.0. */
        want_int(cmd(c, "LPUSH l a b"), 2, "2.4");
        want_error(cmd(c, "HSET h a 1 b 2"),
                     "ERR wrong number of arguments for 'hset' command", "2.4");
        redisFree(c);
        testsrv_stop(&p);
    }

    if (start_proxy(&p, "2.6.11")) {
        c = connect_to(&p);
        want_nil(cmd(c, "CLIENT GETNAME"), "2.6.11");
        want_error(cmd(c, "CLIENT ID"),
                     "ERR Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | "
                     "SETNAME connection-name)", "2.6.11");
        want_error(cmd(c, "SCRIPT DEBUG yes"),
                     "ERR Unknown SCRIPT subcommand or wrong # of args.", "2.6.11");
        want_error(cmd(c, "PING hello"),
                     "ERR wrong number of arguments for 'ping' command", "2.6.11");
        /* A command unknown to every version: the old text, without the args */
        want_error(cmd(c, "NOSUCHCOMMAND a b"), "ERR unknown command 'NOSUCHCOMMAND'",
                     "2.6.11");
        redisFree(c);
        testsrv_stop(&p);
    }
}

/* Error texts that changed after 2.6 come back in their old spelling
 * (also inside an EXEC result); personality 7 keeps the modern ones. */
static void test_old_error_texts(void **state)
{
    static const char *const pers_list[] = {"2.4", "7"};
    size_t i;

    (void)state;
    for (i = 0; i < 2; i++) {
        const char *pers = pers_list[i];
        int old = is_old(pers);
        testsrv p;
        redisContext *c;
        redisReply *r;

        flush(NULL);
        if (!start_proxy(&p, pers))
            continue;
        c = connect_to(&p);
        want_int(cmd(c, "RPUSH l a"), 1, pers);
        want_error(cmd(c, "GET l"),
                   old ? "ERR Operation against a key holding the wrong kind of value"
                       : "WRONGTYPE Operation against a key holding the wrong kind of value",
                   pers);
        want_error(cmd(c, "SETEX k 0 v"),
                   old ? "ERR invalid expire time in SETEX"
                       : "ERR invalid expire time in 'setex' command",
                   pers);
        r = cmd(c, "AUTH secret");
        assert_int_equal(r->type, REDIS_REPLY_ERROR);
        if (old)
            assert_string_equal(r->str, "ERR Client sent AUTH, but no password is set");
        freeReplyObject(r);
        want_status(cmd(c, "MULTI"), "OK", pers);
        want_status(cmd(c, "GET l"), "QUEUED", pers);
        r = cmd(c, "EXEC");
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->elements, 1);
        assert_int_equal(r->element[0]->type, REDIS_REPLY_ERROR);
        assert_string_equal(r->element[0]->str,
                            old ? "ERR Operation against a key holding the wrong kind of value"
                                : "WRONGTYPE Operation against a key holding the wrong kind "
                                  "of value");
        freeReplyObject(r);
        redisFree(c);
        testsrv_stop(&p);
    }
}

/* Pipelined refused and forwarded commands come back in order. */
static void test_pipeline_order(void **state)
{
    static const char *const cmds[] = {
        "SET a 1", "EVAL x 0", "GET a", "TIME", "INCR a", "WATCH a",
        "SET a 5 NX", "PING", "RELOCK-PROXY REFUSED", "GET a", "UNLINK a", "DEL a"};
    testsrv p;
    redisContext *c;
    redisReply *r;
    size_t i;
    int round;

    (void)state;
    flush(NULL);
    if (!start_proxy(&p, "2.0"))
        return;
    c = connect_to(&p);
    for (round = 0; round < 20; round++) {
        for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
            assert_int_equal(redisAppendCommand(c, cmds[i]), REDIS_OK);
        for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
            void *reply = NULL;

            assert_int_equal(redisGetReply(c, &reply), REDIS_OK);
            r = reply;
            switch (i) {
            case 0: want_status(r, "OK", cmds[i]); break;
            case 1: want_error(r, "ERR unknown command 'EVAL'", cmds[i]); break;
            case 2: want_str(r, "1", cmds[i]); break;
            case 3: want_error(r, "ERR unknown command 'TIME'", cmds[i]); break;
            case 4: want_int(r, 2, cmds[i]); break;
            case 5: want_error(r, "ERR unknown command 'WATCH'", cmds[i]); break;
            case 6:
                want_error(r, "ERR wrong number of arguments for 'set' command", cmds[i]);
                break;
            case 7: want_status(r, "PONG", cmds[i]); break;
            case 8:
                if (real_personality() != NULL)
                    want_error(r, "ERR unknown command 'RELOCK-PROXY'", cmds[i]);
                else
                    want_int(r, 4 + 5 * round, cmds[i]);
                break;
            case 9: want_str(r, "2", cmds[i]); break;
            case 10: want_error(r, "ERR unknown command 'UNLINK'", cmds[i]); break;
            case 11: want_int(r, 1, cmds[i]); break;
            default: fail();
            }
        }
    }
    redisFree(c);
    testsrv_stop(&p);
}

/* Inline commands (as typed into telnet or sent by redis-cli).  The proxy
 * splits them with today's quoting rules on every personality; the real
 * servers up to 2.6.11 split on spaces alone, so "a b" is two words there
 * (docs/proxy.md, "Differences from the real servers"). */
static void test_inline(void **state)
{
    static const char req[] = "PING\r\nEVAL \"return 1\" 0\r\nSET ik \"a b\"\r\nGET ik\r\n";
    static const char want_proxy[] =
        "+PONG\r\n-ERR unknown command 'EVAL'\r\n+OK\r\n$3\r\na b\r\n";
    static const char want_real[] =
        "+PONG\r\n-ERR unknown command 'EVAL'\r\n"
        "-ERR wrong number of arguments for 'set' command\r\n$-1\r\n";
    const char *want = real_personality() != NULL ? want_real : want_proxy;
    testsrv p;
    struct sockaddr_in sa;
    char buf[256];
    size_t got = 0;
    long long deadline;
    int fd;

    (void)state;
    flush(NULL);
    if (!start_proxy(&p, "2.2"))
        return;
    fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((unsigned short)p.port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(write(fd, req, sizeof(req) - 1), (ssize_t)(sizeof(req) - 1));
    deadline = now_ms() + 5000;
    while (got < strlen(want) && now_ms() < deadline) {
        ssize_t n = read(fd, buf + got, sizeof(buf) - 1 - got);

        if (n <= 0)
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    assert_string_equal(buf, want);
    close(fd);
    testsrv_stop(&p);
}

/* The refusal counters count, list and reset; control commands are not
 * refusals and work on every personality. */
static void test_refused_counter(void **state)
{
    size_t i;

    (void)state;
    if (proxy_only("the proxy's refusal counters"))
        return;
    for (i = 0; i < NPERS; i++) {
        const char *pers = personalities[i];
        testsrv p;
        redisContext *c;
        redisReply *r;

        if (!start_proxy(&p, pers))
            continue;
        c = connect_to(&p);
        want_status(cmd(c, "RELOCK-PROXY RESET"), "OK", pers);
        want_int(cmd(c, "RELOCK-PROXY REFUSED"), 0, pers);
        r = cmd(c, "EVAL %s 0", "return 1");
        freeReplyObject(r);
        r = cmd(c, "eval %s 0", "return 1");
        freeReplyObject(r);
        r = cmd(c, "SET k v NX PX 100");
        freeReplyObject(r);
        want_int(cmd(c, "relock-proxy refused"), before_26(pers) ? 3 : is_old(pers) ? 1 : 0,
                   pers);
        r = cmd(c, "RELOCK-PROXY REFUSED-LIST");
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        if (before_26(pers)) {
            assert_int_equal(r->elements, 2);
            assert_string_equal(r->element[0]->str, "EVAL 2");
            assert_string_equal(r->element[1]->str, "SET 1");
        } else if (is_old(pers)) {
            assert_int_equal(r->elements, 1);
            assert_string_equal(r->element[0]->str, "SET 1");
        } else {
            assert_int_equal(r->elements, 0);
        }
        freeReplyObject(r);
        want_status(cmd(c, "RELOCK-PROXY RESET"), "OK", pers);
        want_int(cmd(c, "RELOCK-PROXY REFUSED"), 0, pers);
        r = cmd(c, "RELOCK-PROXY REFUSED-LIST");
        assert_int_equal(r->elements, 0);
        freeReplyObject(r);
        r = cmd(c, "RELOCK-PROXY BOGUS");
        assert_int_equal(r->type, REDIS_REPLY_ERROR);
        freeReplyObject(r);
        r = cmd(c, "RELOCK-PROXY FAULT delay-ms lots");
        assert_int_equal(r->type, REDIS_REPLY_ERROR);
        freeReplyObject(r);
        redisFree(c);
        testsrv_stop(&p);
    }
}

/* SUBSCRIBE / PUBLISH: messages pass through. */
static void test_pubsub(void **state)
{
    static const char *const pers_list[] = {"2.0", "7"};
    size_t i;

    (void)state;
    for (i = 0; i < 2; i++) {
        const char *pers = pers_list[i];
        testsrv p;
        redisContext *sub;
        redisContext *pub;
        redisReply *r;
        void *reply = NULL;

        if (!start_proxy(&p, pers))
            continue;
        sub = connect_to(&p);
        pub = connect_to(&p);
        r = cmd(sub, "SUBSCRIBE ch1 ch2");
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_string_equal(r->element[0]->str, "subscribe");
        assert_string_equal(r->element[1]->str, "ch1");
        freeReplyObject(r);
        assert_int_equal(redisGetReply(sub, &reply), REDIS_OK);
        r = reply;
        assert_string_equal(r->element[1]->str, "ch2");
        assert_int_equal(r->element[2]->integer, 2);
        freeReplyObject(r);
        want_int(cmd(pub, "PUBLISH ch1 hello"), 1, pers);
        want_int(cmd(pub, "PUBLISH ch2 world"), 1, pers);
        assert_int_equal(redisGetReply(sub, &reply), REDIS_OK);
        r = reply;
        assert_int_equal(r->elements, 3);
        assert_string_equal(r->element[0]->str, "message");
        assert_string_equal(r->element[1]->str, "ch1");
        assert_string_equal(r->element[2]->str, "hello");
        freeReplyObject(r);
        assert_int_equal(redisGetReply(sub, &reply), REDIS_OK);
        r = reply;
        assert_string_equal(r->element[2]->str, "world");
        freeReplyObject(r);
        /* Unsubscribing from everything confirms each channel. */
        r = cmd(sub, "UNSUBSCRIBE");
        assert_string_equal(r->element[0]->str, "unsubscribe");
        freeReplyObject(r);
        assert_int_equal(redisGetReply(sub, &reply), REDIS_OK);
        r = reply;
        assert_int_equal(r->element[2]->integer, 0);
        freeReplyObject(r);
        /* Back to normal commands, in order. */
        want_status(cmd(sub, "PING"), "PONG", pers);
        redisFree(pub);
        redisFree(sub);
        testsrv_stop(&p);
    }
}

/* close-before-reply 1: the command reaches the server, the client sees
 * the connection close instead of the reply (an ambiguous reply). */
static void test_fault_close_before(void **state)
{
    testsrv p;
    redisContext *ctl;
    redisContext *c;
    redisReply *r;
    char *v;

    (void)state;
    if (proxy_only("the proxy's faults"))
        return;
    flush(NULL);
    start_proxy(&p, "2.6.11");
    ctl = connect_to(&p);
    want_status(cmd(ctl, "RELOCK-PROXY FAULT close-before-reply 1"), "OK", "fault");
    c = connect_to(&p);
    r = redisCommand(c, "SET fk applied");
    assert_null(r);
    assert_int_not_equal(c->err, 0);
    redisFree(c);
    v = upstream("GET %s", "fk");
    assert_string_equal(v, "applied");
    free(v);
    /* Control commands are never faulted: the control connection lives. */
    want_int(cmd(ctl, "RELOCK-PROXY REFUSED"), 0, "control");
    want_status(cmd(ctl, "RELOCK-PROXY FAULT off"), "OK", "fault off");
    c = connect_to(&p);
    want_status(cmd(c, "SET fk again"), "OK", "after off");
    redisFree(c);

    /* close-after-reply 1: the reply arrives, then the connection closes. */
    want_status(cmd(ctl, "RELOCK-PROXY FAULT close-after-reply 1"), "OK", "fault");
    c = connect_to(&p);
    want_status(cmd(c, "SET fk third"), "OK", "close-after");
    r = redisCommand(c, "PING");
    assert_null(r);
    redisFree(c);
    want_status(cmd(ctl, "RELOCK-PROXY FAULT off"), "OK", "fault off");
    redisFree(ctl);
    testsrv_stop(&p);
}

/* at-reply N: the fault fires on the Nth reply counted from the moment it
 * was set, once; REPLIES counts them; control commands are not counted. */
static void test_fault_at_reply(void **state)
{
    testsrv p;
    redisContext *ctl;
    redisContext *c;
    redisReply *r;
    char *v;
    long long t0;

    (void)state;
    if (proxy_only("the proxy's faults"))
        return;
    flush(NULL);
    start_proxy(&p, "2.2");
    ctl = connect_to(&p);
    c = connect_to(&p);

    /* close-before at the 2nd reply: SET ran, its reply never came. */
    want_status(cmd(ctl, "RELOCK-PROXY FAULT at-reply 2 at-kind close-before"), "OK", "arm");
    want_int(cmd(ctl, "RELOCK-PROXY REPLIES"), 0, "reset by arming");
    want_status(cmd(c, "PING"), "PONG", "1st reply");
    r = redisCommand(c, "SET ar applied");
    assert_null(r);
    redisFree(c);
    v = upstream("GET %s", "ar");
    assert_string_equal(v, "applied");
    free(v);
    want_int(cmd(ctl, "RELOCK-PROXY REPLIES"), 2, "counted");

    /* Once: later replies pass. */
    c = connect_to(&p);
    want_status(cmd(c, "PING"), "PONG", "after firing");
    want_status(cmd(c, "PING"), "PONG", "after firing");
    redisFree(c);

    /* close-after with a hold: the reply comes late, then the close. */
    want_status(cmd(ctl, "RELOCK-PROXY FAULT at-reply 1 at-kind close-after at-hold-ms 200"),
                "OK", "arm");
    c = connect_to(&p);
    t0 = now_ms();
    want_status(cmd(c, "SET ar second"), "OK", "held reply");
    assert_true(now_ms() - t0 >= 190);
    r = redisCommand(c, "PING");
    assert_null(r);
    redisFree(c);

    /* hold: relayed late, connection kept; off disarms. */
    want_status(cmd(ctl, "RELOCK-PROXY FAULT at-reply 1 at-kind hold at-hold-ms 100"), "OK",
                "arm");
    c = connect_to(&p);
    t0 = now_ms();
    want_status(cmd(c, "PING"), "PONG", "held");
    assert_true(now_ms() - t0 >= 90);
    want_status(cmd(c, "PING"), "PONG", "kept");
    want_status(cmd(ctl, "RELOCK-PROXY FAULT at-reply 2 at-kind close-before"), "OK", "arm");
    want_status(cmd(ctl, "RELOCK-PROXY FAULT off"), "OK", "off");
    want_status(cmd(c, "PING"), "PONG", "disarmed");
    want_status(cmd(c, "PING"), "PONG", "disarmed");

    /* error at the 2nd command: it never runs, the server "is loading". */
    want_status(cmd(ctl, "RELOCK-PROXY FAULT at-reply 2 at-kind error"), "OK", "arm");
    want_status(cmd(c, "SET ar one"), "OK", "1st command");
    want_error(cmd(c, "SET ar two"), "LOADING Redis is loading the dataset in memory",
               "2nd command");
    want_status(cmd(c, "PING"), "PONG", "connection kept");
    v = upstream("GET %s", "ar");
    assert_string_equal(v, "one");
    free(v);
    want_int(cmd(ctl, "RELOCK-PROXY REFUSED"), 0, "not a refusal");

    want_error(cmd(ctl, "RELOCK-PROXY FAULT at-kind sideways"),
               "ERR relock-proxy: FAULT at-kind: 'sideways' is not hold, close-after, "
               "close-before or error",
               "bad kind");
    redisFree(c);
    redisFree(ctl);
    testsrv_stop(&p);
}

/* delay-ms delays replies; a seeded probability gives the same faults on
 * the same sequence of commands. */
static void test_fault_delay_and_seed(void **state)
{
    testsrv p;
    redisContext *ctl;
    redisContext *c;
    long long t0;
    int counts[2];
    int run;

    (void)state;
    if (proxy_only("the proxy's faults"))
        return;
    start_proxy(&p, "7");
    ctl = connect_to(&p);
    want_status(cmd(ctl, "RELOCK-PROXY FAULT delay-ms 300"), "OK", "delay");
    c = connect_to(&p);
    t0 = now_us();
    want_status(cmd(c, "PING"), "PONG", "delayed");
    assert_true(now_us() - t0 >= 300000); /* delay-ms N is N * 1000 us */
    /* Control replies are not delayed. */
    t0 = now_ms();
    want_status(cmd(ctl, "RELOCK-PROXY FAULT delay-ms 0 close-after-reply 0.5 seed 42"),
                  "OK", "seed");
    assert_true(now_ms() - t0 < 250);
    redisFree(c);
    for (run = 0; run < 2; run++) {
        int n = 0;

        c = connect_to(&p);
        while (n < 200) {
            redisReply *r = redisCommand(c, "PING");

            if (r == NULL)
                break;
            freeReplyObject(r);
            n++;
        }
        redisFree(c);
        counts[run] = n;
    }
    assert_int_equal(counts[0], counts[1]);
    assert_true(counts[0] < 200);
    want_status(cmd(ctl, "RELOCK-PROXY FAULT off"), "OK", "off");
    redisFree(ctl);
    testsrv_stop(&p);
}

/* The time from sending cmdline (on c) to its reply, in us. */
static long long timed_us(redisContext *c, const char *cmdline)
{
    long long t0 = now_us();
    redisReply *r = cmd(c, cmdline);

    freeReplyObject(r);
    return now_us() - t0;
}

/* A delayed reply comes no sooner than the delay after its request.  The
 * upper bound only catches a delay far off (the 3 s of a setting that
 * should have lost): the machine may be loaded, so nothing tighter. */
static void want_delay(long long got_us, long long min_us, const char *ctx)
{
    if (got_us < min_us || got_us >= 1000000)
        fail_msg("%s: reply after %lld us, wanted %lld us or more, under 1 s", ctx,
                 got_us, min_us);
}

/* Values no delay setting accepts. */
static const char *const bad_delays[] = {"-1", "abc", "3600000001", "", "300us"};
#define NBAD_DELAYS (sizeof(bad_delays) / sizeof(bad_delays[0]))

/* delay-us holds replies for microseconds: forwarded replies, replies the
 * proxy makes itself (a refusal) and pipelined replies alike.  Of delay-ms
 * and delay-us the last one wins; bad values are refused, all or nothing. */
static void test_fault_delay_us(void **state)
{
    testsrv p;
    redisContext *ctl;
    redisContext *c;
    char want[160];
    long long t0;
    size_t i;

    (void)state;
    if (proxy_only("the proxy's faults"))
        return;
    start_proxy(&p, "2.6.11");
    ctl = connect_to(&p);
    c = connect_to(&p);
    want_status(cmd(ctl, "RELOCK-PROXY FAULT delay-us 300"), "OK", "delay-us");
    for (i = 0; i < 5; i++)
        want_delay(timed_us(c, "PING"), 300, "forwarded");
    want_delay(timed_us(c, "SET k v NX PX 100"), 300, "refused by the proxy");
    t0 = now_us();
    for (i = 0; i < 3; i++)
        assert_int_equal(redisAppendCommand(c, "PING"), REDIS_OK);
    for (i = 0; i < 3; i++) {
        void *reply = NULL;

        assert_int_equal(redisGetReply(c, &reply), REDIS_OK);
        want_status(reply, "PONG", "pipelined");
    }
    want_delay(now_us() - t0, 300, "pipelined");

    /* The last of delay-ms and delay-us wins. */
    want_status(cmd(ctl, "RELOCK-PROXY FAULT delay-ms 3000 delay-us 300"), "OK", "both");
    want_delay(timed_us(c, "PING"), 300, "delay-us last");
    want_status(cmd(ctl, "RELOCK-PROXY FAULT delay-us 300 delay-ms 50"), "OK", "both");
    want_delay(timed_us(c, "PING"), 50000, "delay-ms last");

    /* Bad values name the setting and the range, and change nothing. */
    want_status(cmd(ctl, "RELOCK-PROXY FAULT delay-us 0"), "OK", "no delay");
    for (i = 0; i < NBAD_DELAYS; i++) {
        snprintf(want, sizeof(want),
                 "ERR relock-proxy: FAULT delay-us: '%s' is not an integer from 0 to "
                 "3600000000", bad_delays[i]);
        want_error(cmd(ctl, "RELOCK-PROXY FAULT delay-ms 3000 delay-us %s", bad_delays[i]),
                   want, bad_delays[i]);
    }
    want_error(cmd(ctl, "RELOCK-PROXY FAULT delay-ms 3600001"),
               "ERR relock-proxy: FAULT delay-ms: '3600001' is not an integer from 0 to "
               "3600000", "delay-ms too large");
    want_delay(timed_us(c, "PING"), 0, "after refused settings");

    /* The largest delay is accepted; off takes it back to 0. */
    want_status(cmd(ctl, "RELOCK-PROXY FAULT delay-us 3600000000"), "OK", "largest");
    want_status(cmd(ctl, "RELOCK-PROXY FAULT off"), "OK", "off");
    want_delay(timed_us(c, "PING"), 0, "after off");
    redisFree(c);
    redisFree(ctl);
    testsrv_stop(&p);
}

/*
 * The replies docs/design.md §3.4 records for 2.6.12 and later,
 * which no personality imitates (personality 7 is the real server): checked
 * against the real server, whatever its version (with RELOCK_TEST_SERVER
 * naming one of 2.6.12 or later; by default the installed redis-server).
 */
static void test_replies_later_lines(void **state)
{
    redisContext *c;
    redisReply *r;
    const char *real = real_personality();
    int v28 = testsrv_target_at_least(2, 8, 0);
    int v32 = testsrv_target_at_least(3, 2, 0);
    int v50 = testsrv_target_at_least(5, 0, 0);
    int v70 = testsrv_target_at_least(7, 0, 0);
    char ctx[64];

    (void)state;
    if (real != NULL && real[0] != '\0') {
        testsrv_note_skip("the replies of 2.6.12 and later");
        return;
    }
    snprintf(ctx, sizeof(ctx), "real %s",
             testsrv_target_version() ? testsrv_target_version() : "redis-server");
    c = connect_to(&server);
    want_status(cmd(c, "SET k v NX PX 1000"), "OK", ctx);
    want_nil(cmd(c, "SET k v NX PX 1000"), ctx);
    /* PX 0: the SETEX text before 2.8, then "in set", then "in 'set' command". */
    want_error(cmd(c, "SET k2 v PX 0"),
               v70 ? "ERR invalid expire time in 'set' command"
               : v28 ? "ERR invalid expire time in set"
                     : "ERR invalid expire time in SETEX",
               ctx);
    /* NX with XX: nil (2.6.12 to 3.0), a syntax error from 3.2. */
    if (v32)
        want_error(cmd(c, "SET k3 v NX XX"), "ERR syntax error", ctx);
    else
        want_nil(cmd(c, "SET k3 v NX XX"), ctx);
    want_int(cmd(c, "TTL nokey"), v28 ? -2 : -1, ctx);
    want_int(cmd(c, "PTTL nokey"), v28 ? -2 : -1, ctx);
    /* TIME, then a write, in one script: refused before 5.0. */
    r = cmd(c, "EVAL %s 1 tk", "redis.call('time'); return redis.call('set', KEYS[1], 'x')");
    if (v50) {
        want_status(r, "OK", ctx);
    } else {
        if (r->type != REDIS_REPLY_ERROR ||
            strstr(r->str, "Write commands not allowed after non deterministic commands") == NULL)
            fail_msg("%s: TIME then SET in a script: type %d '%s'", ctx, r->type,
                     r->str ? r->str : "");
        freeReplyObject(r);
    }
    /* redis.replicate_commands() from 3.2. */
    r = cmd(c, "EVAL %s 0", "return redis.replicate_commands()");
    if (v32) {
        want_int(r, 1, ctx);
    } else {
        if (r->type != REDIS_REPLY_ERROR ||
            strstr(r->str, "attempt to call field 'replicate_commands' (a nil value)") == NULL)
            fail_msg("%s: replicate_commands: type %d '%s'", ctx, r->type, r->str ? r->str : "");
        freeReplyObject(r);
    }
    /* CLIENT ID from 5.0; CLIENT LIST lines carry id= from 2.8. */
    r = cmd(c, "CLIENT ID");
    if (v50) {
        assert_int_equal(r->type, REDIS_REPLY_INTEGER);
        freeReplyObject(r);
    } else {
        if (r->type != REDIS_REPLY_ERROR ||
            strncmp(r->str, "ERR Syntax error, try CLIENT (LIST | KILL", 41) != 0)
            fail_msg("%s: CLIENT ID: type %d '%s'", ctx, r->type, r->str ? r->str : "");
        freeReplyObject(r);
    }
    r = cmd(c, "CLIENT LIST");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    if ((strstr(r->str, "id=") == r->str) != v28)
        fail_msg("%s: CLIENT LIST: '%s'", ctx, r->str);
    freeReplyObject(r);
    /* The compare-and-delete script works on every one. */
    want_int(cmd(c, "EVAL %s 1 k other",
                 "if redis.call('get', KEYS[1]) == ARGV[1] then "
                 "return redis.call('del', KEYS[1]) else return 0 end"),
             0, ctx);
    redisFree(c);
}

/* Run the proxy binary directly: collect stdout's first line and stderr. */
static pid_t spawn_proxy(const char *const *args, int *out_fd, int *err_fd)
{
    const char *path = getenv("RELOCK_PROXY");
    const char *argv[16];
    int outp[2];
    int errp[2];
    pid_t pid;
    int n = 0;

    argv[n++] = path;
    while (args[n - 1] != NULL && n < 15) {
        argv[n] = args[n - 1];
        n++;
    }
    argv[n] = NULL;
    assert_int_equal(pipe(outp), 0);
    assert_int_equal(pipe(errp), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(outp[1], 1);
        dup2(errp[1], 2);
        close(outp[0]);
        close(errp[0]);
        execv(path, (char *const *)argv);
        _exit(127);
    }
    close(outp[1]);
    close(errp[1]);
    *out_fd = outp[0];
    *err_fd = errp[0];
    return pid;
}

static size_t read_some(int fd, char *buf, size_t cap)
{
    size_t got = 0;

    while (got < cap - 1) {
        ssize_t n = read(fd, buf + got, cap - 1 - got);

        if (n <= 0)
            break;
        got += (size_t)n;
        if (memchr(buf, '\n', got) != NULL)
            break;
    }
    buf[got] = '\0';
    return got;
}

static int wait_exit(pid_t pid)
{
    int status = 0;
    int i;

    for (i = 0; i < 500; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

static void test_command_line(void **state)
{
    char upstream_arg[32];
    char buf[512];
    int out_fd;
    int err_fd;
    pid_t pid;

    (void)state;
    if (proxy_only("the proxy's command line"))
        return;
    snprintf(upstream_arg, sizeof(upstream_arg), "127.0.0.1:%d", server.port);
    {
        const char *const args[] = {"--upstream", upstream_arg, "--personality", "3.0", NULL};

        pid = spawn_proxy(args, &out_fd, &err_fd);
        read_some(err_fd, buf, sizeof(buf));
        assert_int_equal(wait_exit(pid), 2);
        assert_string_equal(buf, "relock-compat-proxy: --personality: '3.0' is not one of "
                                 "2.0, 2.2, 2.4, 2.6.0 .. 2.6.11, 7, valkey-8.1, valkey-9.0, "
                                 "redis-8.4\n");
        close(out_fd);
        close(err_fd);
    }
    {
        const char *const args[] = {"--listen", "0", NULL};

        pid = spawn_proxy(args, &out_fd, &err_fd);
        read_some(err_fd, buf, sizeof(buf));
        assert_int_equal(wait_exit(pid), 2);
        assert_string_equal(buf, "relock-compat-proxy: --upstream: missing (HOST:PORT of "
                                 "the real server)\n");
        close(out_fd);
        close(err_fd);
    }
    {
        const char *const args[] = {"--upstream", upstream_arg, "--close-before-reply", "2",
                                    NULL};

        pid = spawn_proxy(args, &out_fd, &err_fd);
        read_some(err_fd, buf, sizeof(buf));
        assert_int_equal(wait_exit(pid), 2);
        assert_string_equal(buf, "relock-compat-proxy: --close-before-reply: '2' is not a "
                                 "probability from 0 to 1\n");
        close(out_fd);
        close(err_fd);
    }
    {
        /* --listen 0: a free port, announced as "port N"; SIGTERM exits 0. */
        const char *const args[] = {"--upstream", upstream_arg, "--personality", "2.4", NULL};
        testsrv p;
        int port = 0;
        redisContext *c;

        pid = spawn_proxy(args, &out_fd, &err_fd);
        read_some(out_fd, buf, sizeof(buf));
        assert_int_equal(sscanf(buf, "port %d\n", &port), 1);
        assert_true(port > 0);
        memset(&p, 0, sizeof(p));
        p.port = port;
        c = connect_to(&p);
        want_status(cmd(c, "PING"), "PONG", "spawned");
        /* An open connection does not keep the proxy from stopping. */
        kill(pid, SIGTERM);
        assert_int_equal(wait_exit(pid), 0);
        redisFree(c);
        close(out_fd);
        close(err_fd);
    }
}

/* The proxy refuses option=value at start-up, with exit 2 and want on
 * stderr. */
static void want_bad_option(const char *option, const char *value, const char *want)
{
    char upstream_arg[32];
    char buf[512];
    int out_fd;
    int err_fd;
    pid_t pid;
    const char *args[] = {"--upstream", upstream_arg, option, value, NULL};

    snprintf(upstream_arg, sizeof(upstream_arg), "127.0.0.1:%d", server.port);
    pid = spawn_proxy(args, &out_fd, &err_fd);
    read_some(err_fd, buf, sizeof(buf));
    assert_int_equal(wait_exit(pid), 2);
    assert_string_equal(buf, want);
    close(out_fd);
    close(err_fd);
}

/* A proxy started with extra_args delays a PING by at least min_us. */
static void want_started_delay(const char *const *extra_args, long long min_us,
                               const char *ctx)
{
    testsrv p;
    redisContext *c;

    if (testsrv_start_proxy(&p, server.port, "7", extra_args) != 0)
        fail_msg("%s: cannot start relock-compat-proxy", ctx);
    c = connect_to(&p);
    want_delay(timed_us(c, "PING"), min_us, ctx);
    redisFree(c);
    testsrv_stop(&p);
}

/* --delay-us and --delay-ms on the command line: the same values and
 * errors as FAULT, the last one wins.  (testsrv waits for the proxy to
 * answer PING within 200 ms, so these delays stay well below that.) */
static void test_command_line_delay(void **state)
{
    char want[160];
    size_t i;

    (void)state;
    if (proxy_only("the proxy's command line"))
        return;
    for (i = 0; i < NBAD_DELAYS; i++) {
        snprintf(want, sizeof(want),
                 "relock-compat-proxy: --delay-us: '%s' is not an integer from 0 to "
                 "3600000000\n", bad_delays[i]);
        want_bad_option("--delay-us", bad_delays[i], want);
    }
    want_bad_option("--delay-ms", "3600001",
                    "relock-compat-proxy: --delay-ms: '3600001' is not an integer from 0 "
                    "to 3600000\n");
    {
        const char *const args[] = {"--delay-us", "300", NULL};

        want_started_delay(args, 300, "--delay-us");
    }
    {
        const char *const args[] = {"--delay-ms", "2", NULL};

        want_started_delay(args, 2000, "--delay-ms");
    }
    {
        const char *const args[] = {"--delay-ms", "3000", "--delay-us=300", NULL};

        want_started_delay(args, 300, "--delay-us last");
    }
    {
        const char *const args[] = {"--delay-us", "300", "--delay-ms", "50", NULL};

        want_started_delay(args, 50000, "--delay-ms last");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_info_version, flush),
        cmocka_unit_test_setup(test_set_options, flush),
        cmocka_unit_test_setup(test_scripting_family, flush),
        cmocka_unit_test_setup(test_watch, flush),
        cmocka_unit_test_setup(test_ttl_missing, flush),
        cmocka_unit_test_setup(test_v20_volatile_writes, flush),
        cmocka_unit_test_setup(test_v20_blpop_volatile, flush),
        cmocka_unit_test_setup(test_unknown_in_multi, flush),
        cmocka_unit_test_setup(test_subcommands, flush),
        cmocka_unit_test_setup(test_old_error_texts, flush),
        cmocka_unit_test_setup(test_pipeline_order, flush),
        cmocka_unit_test_setup(test_inline, flush),
        cmocka_unit_test_setup(test_refused_counter, flush),
        cmocka_unit_test_setup(test_pubsub, flush),
        cmocka_unit_test_setup(test_fault_close_before, flush),
        cmocka_unit_test_setup(test_fault_at_reply, flush),
        cmocka_unit_test_setup(test_fault_delay_and_seed, flush),
        cmocka_unit_test_setup(test_fault_delay_us, flush),
        cmocka_unit_test_setup(test_command_line, flush),
        cmocka_unit_test_setup(test_command_line_delay, flush),
        cmocka_unit_test_setup(test_replies_later_lines, flush),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
