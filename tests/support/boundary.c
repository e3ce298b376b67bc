/* The command-boundary enumerations' shared parts (boundary.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "boundary.h"
#include "testsrv.h"
#include "testutil.h"

const char *const bnd_fault_name[BND_NFAULTS] = {"lost-reply", "dead-after", "write",
                                                 "write-dead", "error-reply"};

static redisReply *vcmd(int port, const char *fmt, va_list ap)
{
    redisContext *ctx = redisConnect("127.0.0.1", port);
    assert_non_null(ctx);
    assert_int_equal(ctx->err, 0);
    redisReply *r = redisvCommand(ctx, fmt, ap);
    redisFree(ctx);
    assert_non_null(r);
    return r;
}

redisReply *bnd_cmd(int port, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcmd(port, fmt, ap);
    va_end(ap);
    return r;
}

void bnd_do(int port, const char *fmt, const char *a, const char *b)
{
    redisReply *r = bnd_cmd(port, fmt, a, b);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("%s: %s", fmt, r->str);
    freeReplyObject(r);
}

long long bnd_replies(int pport)
{
    redisReply *r = bnd_cmd(pport, "RELOCK-PROXY REPLIES");
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

long bnd_write_dead_hold_ms = 300;

void bnd_arm(int pport, long long k, enum bnd_fault f)
{
    char kk[24], hold[24];
    snprintf(kk, sizeof kk, "%lld", k);
    switch (f) {
    case BND_LOST_REPLY:
        bnd_do(pport, "RELOCK-PROXY FAULT at-reply %s at-kind %s", kk, "close-before");
        break;
    case BND_DEAD_AFTER:
        bnd_do(pport, "RELOCK-PROXY FAULT at-reply %s at-kind %s", kk, "close-after");
        break;
    case BND_WRITE:
        if (k == 0)
            bnd_do(pport, "RELOCK-PROXY FAULT at-reply %s at-kind %s", "0", "hold");
        else
            bnd_do(pport, "RELOCK-PROXY FAULT at-reply %s at-kind hold at-hold-ms %s", kk, "60");
        break;
    case BND_ERROR:
        bnd_do(pport, "RELOCK-PROXY FAULT at-reply %s at-kind %s", kk, "error");
        break;
    case BND_WRITE_DEAD:
        /* Idle past the blocking client's connection check (200 ms), then
         * closed. */
        snprintf(hold, sizeof hold, "%ld", bnd_write_dead_hold_ms);
        bnd_do(pport, "RELOCK-PROXY FAULT at-reply %s at-kind close-after at-hold-ms %s", kk,
               hold);
        break;
    case BND_NFAULTS:
        break;
    }
}

void bnd_disarm(int pport)
{
    bnd_do(pport, "RELOCK-PROXY FAULT %s%s", "off", "");
}

void bnd_look(int port, const char *key, const char *fkey, char *val, size_t len,
              long long *fence)
{
    redisReply *r = bnd_cmd(port, "GET %s", key);
    snprintf(val, len, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    r = bnd_cmd(port, "GET %s", fkey);
    *fence = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    freeReplyObject(r);
}

/* ------------------------------------------------------------ the other client */

static long long plain_int(int port, const char *fmt, const char *a, const char *b)
{
    redisReply *r = bnd_cmd(port, fmt, a, b);
    long long n = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    return n;
}

/* A server without EVAL: the same writes one by one, while the operation
 * waits for its held reply. */
static void other_plain(bnd_other *o)
{
    int go = 1;
    if (o->rival == BND_RIVAL_SETNX) {
        go = plain_int(o->port, "SETNX %s %s", o->key, BND_OTHER_VALUE) == 1;
    } else if (o->rival == BND_RIVAL_TAKEOVER) {
        redisReply *r = bnd_cmd(o->port, "GET %s", o->key);
        go = r->type == REDIS_REPLY_STRING && strcmp(r->str, o->expired) == 0;
        freeReplyObject(r);
    }
    if (go && o->rival != BND_RIVAL_SETNX)
        freeReplyObject(bnd_cmd(o->port, "SET %s %s", o->key, BND_OTHER_VALUE));
    if (go)
        plain_int(o->port, "INCR %s%s", o->fkey, "");
    o->won = go;
    o->wrote = 1;
}

static void *other_main(void *p)
{
    bnd_other *o = p;
    /* An operation that takes a shorter path than the counted one never
     * reaches boundary k: once it ended (the join), a moment for replies
     * still on their way, rather than the whole bound. */
    uint64_t end = tu_now_ms() + 5000, grace = 0;
    while (bnd_replies(o->pport) < o->k && tu_now_ms() < end) {
        if (!grace && __atomic_load_n(&o->ended, __ATOMIC_SEQ_CST))
            grace = tu_now_ms() + 200;
        if (grace && tu_now_ms() >= grace)
            break;
        tu_sleep_ms(1);
    }
    if (bnd_replies(o->pport) < o->k)
        return NULL; /* the operation ended sooner: nothing to race */
    if (!testsrv_target_at_least(2, 6, 0)) {
        other_plain(o);
        return NULL;
    }
    redisReply *r;
    switch (o->rival) {
    case BND_RIVAL_SETNX:
        r = bnd_cmd(o->port,
                    "EVAL %s 2 %s %s " BND_OTHER_VALUE,
                    "if redis.call('SETNX', KEYS[1], ARGV[1]) == 1 then "
                    "redis.call('INCR', KEYS[2]) return 1 end return 0",
                    o->key, o->fkey);
        break;
    case BND_RIVAL_TAKEOVER:
        r = bnd_cmd(o->port,
                    "EVAL %s 2 %s %s %s " BND_OTHER_VALUE,
                    "if redis.call('GET', KEYS[1]) == ARGV[1] then "
                    "redis.call('SET', KEYS[1], ARGV[2]) redis.call('INCR', KEYS[2]) return 1 "
                    "end return 0",
                    o->key, o->fkey, o->expired);
        break;
    default:
        r = bnd_cmd(o->port,
                    "EVAL %s 2 %s %s " BND_OTHER_VALUE,
                    "redis.call('SET', KEYS[1], ARGV[1]) redis.call('INCR', KEYS[2]) return 1",
                    o->key, o->fkey);
        break;
    }
    o->won = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    o->wrote = 1;
    freeReplyObject(r);
    return NULL;
}

void bnd_other_start(bnd_other *o, int port, int pport, long long k, enum bnd_rival rival,
                     const char *key, const char *fkey, const char *expired)
{
    memset(o, 0, sizeof *o);
    o->port = port;
    o->pport = pport;
    o->k = k;
    o->rival = rival;
    snprintf(o->key, sizeof o->key, "%s", key);
    snprintf(o->fkey, sizeof o->fkey, "%s", fkey);
    snprintf(o->expired, sizeof o->expired, "%s", expired ? expired : "");
    assert_int_equal(pthread_create(&o->thread, NULL, other_main, o), 0);
}

void bnd_other_join(bnd_other *o)
{
    __atomic_store_n(&o->ended, 1, __ATOMIC_SEQ_CST);
    pthread_join(o->thread, NULL);
}

/* ------------------------------------------------------------ the order */

int bnd_reduced(void)
{
    const char *e = getenv("RELOCK_TEST_REDUCED");
    return e && strcmp(e, "1") == 0;
}

int bnd_enumerate(long long n, int salt, bnd_skip_fn skipfn, bnd_run_fn run, void *ctx)
{
    int runs = 0;
    if (!bnd_reduced()) {
        for (long long k = 1; k <= n; k++)
            for (int f = 0; f < BND_NFAULTS; f++)
                if (!skipfn(ctx, k, n, (enum bnd_fault)f)) {
                    runs++;
                    run(ctx, k, (enum bnd_fault)f);
                }
        return runs;
    }
    int used[BND_NFAULTS] = {0};
    for (long long k = 1; k <= n; k++) {
        int pick = -1;
        for (int i = 0; i < BND_NFAULTS; i++) {
            int f = (int)((k - 1 + salt + i) % BND_NFAULTS);
            if (!skipfn(ctx, k, n, (enum bnd_fault)f) && (pick < 0 || used[f] < used[pick]))
                pick = f;
        }
        if (pick >= 0) {
            used[pick]++;
            runs++;
            run(ctx, k, (enum bnd_fault)pick);
        }
    }
    for (int f = 0; f < BND_NFAULTS; f++)
        for (long long k = 1; k <= n && !used[f]; k++)
            if (!skipfn(ctx, k, n, (enum bnd_fault)f)) {
                used[f]++;
                runs++;
                run(ctx, k, (enum bnd_fault)f);
            }
    return runs;
}
