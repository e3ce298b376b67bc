/*
 * sim_conform: the simulator's model server against real behaviour.
 *
 * The same command sequences go to the model (model.c, one personality at
 * a time) and to a real redis-server started here on a free port: directly
 * for personality 7, through the compat proxy for the older ones and the
 * newer servers' commands (the proxy's replies are themselves checked
 * against real 2.0 .. 2.6 servers, docs/design.md §3.4, and the
 * matrix).  Replies must agree in type, integer, text and shape; times
 * (TTL, PTTL) within a tolerance, and TIME and INFO by shape only.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "internal.h"
#include "model.h"
#include "testsrv.h"

static testsrv server;

static long long wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* A command of a sequence: the connection it goes on (0 or 1), and its
 * words separated by '|' (words may hold blanks: scripts). */
typedef struct step {
    int conn;
    const char *words;
    int loose; /* 1: compare the reply's type and shape only */
    unsigned since; /* MODEL_PV: left out for older personalities */
} step;

#define END {0, NULL, 0, 0}

static const step seq_strings[] = {
    {0, "SET|k|v", 0, 0},        {0, "GET|k", 0, 0},      {0, "SETNX|k|w", 0, 0},
    {0, "GETSET|k|x", 0, 0},     {0, "GET|k", 0, 0},      {0, "GETSET|nokey|y", 0, 0},
    {0, "DEL|k", 0, 0},          {0, "DEL|k", 0, 0},      {0, "GET|k", 0, 0},
    {0, "DEL|nokey", 0, 0},      {0, "INCR|f", 0, 0},     {0, "INCR|f", 0, 0},
    {0, "SET|g|abc", 0, 0},      {0, "INCR|g", 0, 0},     {0, "TYPE|f", 0, 0},
    {0, "TYPE|nokey", 0, 0},     {0, "EXISTS|f", 0, 0},   {0, "EXISTS|nokey", 0, 0},
    {0, "GET", 0, 0},            {0, "SETNX|k", 0, 0},    {0, "NOSUCHCMD|a|b", 0, 0},
    {0, "PUBLISH|ch|1", 0, 0},   {0, "PING", 0, 0},       END};

static const step seq_ttl[] = {
    {0, "SET|k|v|NX|PX|10000", 0, 0}, {0, "SET|k|v|NX|PX|10000", 0, 0}, {0, "PTTL|k", 1, 0},
    {0, "TTL|k", 1, 0},               {0, "PEXPIRE|k|5000", 0, 0},      {0, "EXPIRE|k|20", 0, 0},
    {0, "TTL|k", 1, 0},               {0, "PTTL|nokey", 0, 0},          {0, "TTL|nokey", 0, 0},
    {0, "SET|k|v|PX|0", 0, 0},        {0, "SET|k2|v|EX|10", 0, 0},      {0, "TTL|k2", 1, 0},
    {0, "SET|k2|w", 0, 0},            {0, "TTL|k2", 0, 0},              {0, "EXPIRE|nokey|5", 0, 0},
    {0, "EXPIRE|k2|0", 0, 0},         {0, "GET|k2", 0, 0},              END};

/* Redis 2.0's volatile keys: SETNX over a key with an expiry, EXPIRE on
 * one that has one; GETSET clears it. */
static const step seq_volatile[] = {
    {0, "SETNX|k|123", 0, 0}, {0, "TTL|k", 0, 0},       {0, "EXPIRE|k|10", 0, 0}, {0, "EXPIRE|k|20", 0, 0},
    {0, "TTL|k", 1, 0},       {0, "SETNX|k|456", 0, 0}, {0, "GET|k", 0, 0},       {0, "TTL|k", 1, 0},
    {0, "EXPIRE|k|10", 0, 0}, {0, "GETSET|k|789", 0, 0}, {0, "TTL|k", 0, 0},      {0, "INCR|n", 0, 0},
    {0, "EXPIRE|n|10", 0, 0}, {0, "INCR|n", 0, 0},      {0, "GET|n", 0, 0},       END};

static const step seq_txn[] = {
    {0, "MULTI", 0, 0},          {0, "SET|k|1", 0, 0},   {0, "INCR|f", 0, 0},     {0, "EXEC", 0, 0},
    {0, "EXEC", 0, 0},           {0, "DISCARD", 0, 0},   {0, "MULTI", 0, 0},      {0, "MULTI", 0, 0},
    /* A command the version lacks, inside MULTI: refused at once; from
     * 2.6.5 the EXEC is refused too.  (One the proxy refuses itself: one
     * unknown to every version goes to the real server, which is 7.) */
    {0, "DISCARD", 0, 0},        {0, "MULTI", 0, 0},     {0, "INCR|f", 0, 0},     {0, "%UNKNOWN%", 0, 0},
    {0, "EXEC", 0, 0},           {0, "GET|f", 0, 0},     {0, "WATCH|k", 0, 0},    {0, "GET|k", 0, 0},
    {1, "SET|k|2", 0, 0},        {0, "MULTI", 0, 0},     {0, "WATCH|k", 0, 0},    {0, "DEL|k", 0, 0},
    {0, "EXEC", 0, 0},           {0, "GET|k", 0, 0},     {0, "WATCH|k", 0, 0},    {0, "MULTI", 0, 0},
    {0, "DEL|k", 0, 0},          {0, "EXEC", 0, 0},      {0, "UNWATCH", 0, 0},    {0, "GET|k", 0, 0},
    END};

static const step seq_scripts[] = {
    /* RELOCK__SCRIPT_DEL_IF_EQ by its SHA-1 before and after EVAL. */
    {0, "SET|lk|tok", 0, 0},
    {0, "EVALSHA|@0|1|lk|other|", 0, 0},
    {0, "EVAL|$0|1|lk|other|", 0, 0},
    {0, "EVALSHA|@0|1|lk|tok|", 0, 0},
    {0, "GET|lk", 0, 0},
    {0, "EVAL|$0|1|lk|tok|", 0, 0},
    /* MODERN_ACQUIRE twice, then PEXPIRE_IF_EQ and TS_ACQUIRE. */
    {0, "SCRIPT|LOAD|$4", 0, 0},
    /* SET NX PX inside a script: 2.6.12 (the proxy cannot refuse it there). */
    {0, "EVALSHA|@4|2|m|{m} f|t1|10000", 0, MODEL_PV(2, 6, 12)},
    {0, "EVALSHA|@4|2|m|{m} f|t2|10000", 1, MODEL_PV(2, 6, 12)},
    {0, "EVAL|$1|1|m|t1|20000", 0, 0},
    {0, "EVAL|$1|1|m|t2|20000", 0, 0},
    {0, "EVAL|$3|2|ts|{ts} f|1764000000|0|0|1", 0, 0},
    {0, "EVAL|$3|2|ts|{ts} f|1764000009|0|0|1", 1, 0},
    /* CAS: compare-and-set with the fence, then a mismatch, then delete. */
    {0, "EVAL|$2|2|ts|{ts} f|1764000000|1|0|1764000005|0|0|0|", 0, 0},
    {0, "EVAL|$2|2|ts|{ts} f|1764000000|1|0|1764000006|0|0|0|", 0, 0},
    {0, "EVAL|$2|2|ts|{ts} f|1764000005|2|0||0|0|0|", 0, 0},
    {0, "EVAL|$2|2|ts|{ts} f|1764000005|1|0||0|0|0|", 0, 0},
    /* BREAK_IF_EQ, FENCE_RAISE, FENCE_CARRY, MODERN_TAKEOVER. */
    {0, "SET|b|1764000001", 0, 0},
    {0, "EVAL|$6|2|b|{b} f|1764000001||7", 0, 0},
    {0, "EVAL|$6|2|b|{b} f|||0", 0, 0},
    {0, "EVAL|$6|2|b|{b} f|||0", 0, 0},
    {0, "EVAL|$7|1|{b} f|40", 0, 0},
    {0, "EVAL|$7|1|{b} f|30", 0, 0},
    {0, "GET|{b} f", 0, 0},
    {0, "EVAL|$8|2|{c} f|{b} f", 0, 0},
    {0, "GET|{c} f", 0, 0},
    {0, "SET|old|1764000001", 0, 0},
    /* SET PX inside a script: 2.6.12, as above. */
    {0, "EVAL|$5|2|old|{old} f|1764000001|tok|10000|1", 0, MODEL_PV(2, 6, 12)},
    {0, "EVAL|$5|2|old|{old} f|1764000001|tok|10000|1", 0, MODEL_PV(2, 6, 12)},
    {0, "SCRIPT|EXISTS|@0|@5", 0, MODEL_PV(2, 6, 12)},
    /* OWNER_IF_HELD: written while held, refused for another value, deleted. */
    {0, "SET|o|tok", 0, 0},
    {0, "EVAL|$9|3|o|{o} f|{o} owner|tok|0|rec|10000", 0, 0},
    {0, "PTTL|{o} owner", 1, 0},
    {0, "EVAL|$9|3|o|{o} f|{o} owner|other|0|rec2|10000", 0, 0},
    {0, "GET|{o} owner", 0, 0},
    {0, "EVAL|$9|3|o|{o} f|{o} owner|tok|0||0", 0, 0},
    {0, "EXISTS|{o} owner", 0, 0},
    END};

static const step seq_native[] = {
    {0, "SET|k|v", 0, 0},
    {0, "SET|k|w|IFEQ|x|PX|10000", 0, 0},
    {0, "SET|k|w|IFEQ|v|PX|10000", 0, 0},
    {0, "GET|k", 0, 0},
    {0, "SET|nokey|w|IFEQ|v", 0, 0},
    {0, "DELIFEQ|k|v", 0, 0},
    {0, "DELIFEQ|k|w", 0, 0},
    {0, "SET|k|v", 0, 0},
    {0, "DELEX|k|IFEQ|x", 0, 0},
    {0, "DELEX|k|IFEQ|v", 0, 0},
    {0, "GET|k", 0, 0},
    {0, "TIME", 1, 0},
    END};

/* ------------------------------------------------------------------ running */

typedef struct words {
    int argc;
    char *argv[MODEL_ARGS];
    size_t len[MODEL_ARGS];
} words;

/* Splits a step's words; "$N" is relock script N's text, "@N" its SHA-1. */
static void split(const char *text, const model_personality *pp, words *w)
{
    memset(w, 0, sizeof *w);
    const char *p = text;
    for (;;) {
        const char *e = strchr(p, '|');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char *word;
        if (n == 9 && strncmp(p, "%UNKNOWN%", 9) == 0) {
            word = strdup(pp->version < MODEL_PV(2, 6, 0)   ? "PTTL"
                          : pp->version < MODEL_PV(2, 8, 0) ? "SCAN"
                                                            : "NOSUCHCMD");
        } else if (n >= 2 && (p[0] == '$' || p[0] == '@') && p[1] >= '0' && p[1] <= '9') {
            const char *src = relock__script_source(p[1] - '0');
            if (p[0] == '$') {
                word = strdup(src);
            } else {
                word = malloc(41);
                relock__sha1_hex(src, strlen(src), word);
            }
        } else {
            word = strndup(p, n);
        }
        assert_non_null(word);
        w->argv[w->argc] = word;
        w->len[w->argc] = strlen(word);
        w->argc++;
        if (!e || w->argc == MODEL_ARGS)
            break;
        p = e + 1;
    }
}

static void words_free(words *w)
{
    for (int i = 0; i < w->argc; i++)
        free(w->argv[i]);
}

static int same(const redisReply *a, const redisReply *b, int loose, char *why, size_t whylen)
{
    if (a->type != b->type) {
        snprintf(why, whylen, "type %d (%.80s) against %d (%.80s)", a->type,
                 a->str && a->type != REDIS_REPLY_INTEGER ? a->str : "", b->type,
                 b->str && b->type != REDIS_REPLY_INTEGER ? b->str : "");
        return 0;
    }
    switch (a->type) {
    case REDIS_REPLY_INTEGER:
        if (loose) {
            long long d = a->integer - b->integer;
            if (d < -300 || d > 300 || (a->integer < 0) != (b->integer < 0)) {
                snprintf(why, whylen, ":%lld against :%lld", a->integer, b->integer);
                return 0;
            }
        } else if (a->integer != b->integer) {
            snprintf(why, whylen, ":%lld against :%lld", a->integer, b->integer);
            return 0;
        }
        return 1;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
        if (loose && a->type == REDIS_REPLY_STRING)
            return 1;
        if (a->len != b->len || memcmp(a->str, b->str, a->len) != 0) {
            snprintf(why, whylen, "\"%.*s\" against \"%.*s\"", (int)a->len, a->str, (int)b->len,
                     b->str);
            return 0;
        }
        return 1;
    case REDIS_REPLY_ARRAY:
        if (a->elements != b->elements) {
            snprintf(why, whylen, "%zu elements against %zu", a->elements, b->elements);
            return 0;
        }
        for (size_t i = 0; i < a->elements; i++)
            if (!same(a->element[i], b->element[i], loose, why, whylen))
                return 0;
        return 1;
    default:
        return 1;
    }
}

static redisReply *model_reply(model *m, int conn, const words *w)
{
    model_buf out = {0};
    m->now_ms = wall_ms();
    model_exec(m, conn, w->argc, (const char *const *)w->argv, w->len, &out);
    redisReader *rd = redisReaderCreate();
    assert_non_null(rd);
    redisReaderFeed(rd, out.p, out.n);
    void *reply = NULL;
    assert_int_equal(redisReaderGetReply(rd, &reply), REDIS_OK);
    assert_non_null(reply);
    redisReaderFree(rd);
    model_buf_free(&out);
    return reply;
}

static int run_seq(const char *personality, int port, const step *seq, const char *name)
{
    model_personality p;
    assert_int_equal(model_personality_parse(personality, &p), 0);
    model m;
    model_init(&m, &p, wall_ms());
    int mc[2] = {model_conn_open(&m, 0), model_conn_open(&m, 1)};
    redisContext *rc[2];
    for (int i = 0; i < 2; i++) {
        rc[i] = redisConnect("127.0.0.1", port);
        assert_true(rc[i] && !rc[i]->err);
    }
    /* A clean start on the real server (through the proxy, FLUSHALL is
     * forwarded as it is). */
    redisReply *f = redisCommand(rc[0], "FLUSHALL");
    assert_non_null(f);
    freeReplyObject(f);
    if (seq == seq_scripts) {
        /* From NOSCRIPT on (the proxy's own scripts go too: natives run first). */
        f = redisCommand(rc[0], "SCRIPT FLUSH");
        if (f)
            freeReplyObject(f);
    }
    int bad = 0;
    for (int i = 0; seq[i].words; i++) {
        if (seq[i].since > p.version)
            continue;
        words w;
        split(seq[i].words, &p, &w);
        redisReply *real = redisCommandArgv(rc[seq[i].conn], w.argc, (const char **)w.argv,
                                            w.len);
        assert_non_null(real);
        redisReply *mine = model_reply(&m, mc[seq[i].conn], &w);
        char why[600];
        if (!same(real, mine, seq[i].loose, why, sizeof why)) {
            printf("conform: %s, %s, step %d (%.60s): real %s model\n", personality, name, i,
                   seq[i].words, why);
            bad++;
        }
        freeReplyObject(real);
        freeReplyObject(mine);
        words_free(&w);
    }
    for (int i = 0; i < 2; i++) {
        redisFree(rc[i]);
        model_conn_close(&m, mc[i]);
    }
    return bad;
}

static int run_all(const char *personality, int port)
{
    int bad = 0;
    bad += run_seq(personality, port, seq_strings, "strings");
    bad += run_seq(personality, port, seq_ttl, "ttl");
    bad += run_seq(personality, port, seq_volatile, "volatile");
    bad += run_seq(personality, port, seq_txn, "transactions");
    bad += run_seq(personality, port, seq_native, "native");
    bad += run_seq(personality, port, seq_scripts, "scripts");
    return bad;
}

static void test_real_7(void **state)
{
    (void)state;
    assert_int_equal(run_all("7", server.port), 0);
}

static void through_proxy(const char *personality, const char *proxy_as, int nolua)
{
    static const char *const no_lua[] = {"--no-lua", NULL};
    testsrv proxy;
    assert_int_equal(testsrv_start_proxy(&proxy, server.port, proxy_as, nolua ? no_lua : NULL),
                     0);
    int bad = run_all(personality, proxy.port);
    testsrv_stop(&proxy);
    assert_int_equal(bad, 0);
}

static void test_proxy_20(void **state) { (void)state; through_proxy("2.0", "2.0", 0); }
static void test_proxy_22(void **state) { (void)state; through_proxy("2.2", "2.2", 0); }
static void test_proxy_24(void **state) { (void)state; through_proxy("2.4", "2.4", 0); }
static void test_proxy_260(void **state) { (void)state; through_proxy("2.6.0", "2.6.0", 0); }
static void test_proxy_2611(void **state) { (void)state; through_proxy("2.6.11", "2.6.11", 0); }
static void test_proxy_nolua(void **state) { (void)state; through_proxy("nolua", "7", 1); }
static void test_proxy_valkey81(void **state) { (void)state; through_proxy("valkey-8.1", "valkey-8.1", 0); }
static void test_proxy_valkey90(void **state) { (void)state; through_proxy("valkey-9.0", "valkey-9.0", 0); }
static void test_proxy_redis84(void **state) { (void)state; through_proxy("redis-8.4", "redis-8.4", 0); }

/* The model is held against the redis-server on PATH (7.x), behind the
 * proxy for the other personalities, whatever server RELOCK_TEST_SERVER
 * names for the other tests: so every comparison runs, every time. */
static int setup(void **state)
{
    (void)state;
    return testsrv_start_bin(&server, "redis-server", NULL);
}

static int teardown(void **state)
{
    (void)state;
    testsrv_stop(&server);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_7),        cmocka_unit_test(test_proxy_20),
        cmocka_unit_test(test_proxy_22),      cmocka_unit_test(test_proxy_24),
        cmocka_unit_test(test_proxy_260),     cmocka_unit_test(test_proxy_2611),
        cmocka_unit_test(test_proxy_nolua),   cmocka_unit_test(test_proxy_valkey81),
        cmocka_unit_test(test_proxy_valkey90), cmocka_unit_test(test_proxy_redis84),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
