/*
 * A small service that does periodic work under a lock, the way a
 * production worker should: it keeps the lock with background renewal
 * (relock_keep), stops working the moment the lock is lost (on_lost), and
 * hands its fencing token to the resource it writes, which refuses any
 * token smaller than one it has seen (here: a Lua check in Redis itself).
 *
 *   relock-fenced-service redis://127.0.0.1:6379 [ROUNDS]
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "relock.h"

static volatile sig_atomic_t lost;

static void on_lost(relock_lock *l, relock_status why, void *arg)
{
    (void)l;
    (void)why;
    (void)arg;
    lost = 1; /* the renewal thread: only set a flag here */
}

/* The fenced resource: accepts a write only with a token at least as large
 * as every token it has accepted. */
static int fenced_write(redisContext *rc, long long fence, int value)
{
    static const char script[] =
        "local seen = tonumber(redis.call('get', KEYS[1]) or '0')\n"
        "if tonumber(ARGV[1]) < seen then return 0 end\n"
        "redis.call('set', KEYS[1], ARGV[1])\n"
        "redis.call('set', KEYS[2], ARGV[2])\n"
        "return 1\n";
    redisReply *r = redisCommand(rc, "EVAL %s 2 report:fence report:value %lld %d", script,
                                 fence, value);
    int ok = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (r)
        freeReplyObject(r);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s redis://HOST:PORT [ROUNDS]\n", argv[0]);
        return 2;
    }
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    relock_config *cfg = relock_config_new();
    if (!cfg || relock_config_set_url(cfg, argv[1]) != RELOCK_OK ||
        relock_config_set(cfg, "mode", "modern") != RELOCK_OK) {
        fprintf(stderr, "bad URL: %s\n", cfg ? relock_config_error(cfg)->message : "no memory");
        return 2;
    }
    relock_client *c = NULL;
    relock_status st = relock_connect(cfg, &c);
    relock_config_free(cfg);
    if (st != RELOCK_OK) {
        fprintf(stderr, "connect: %s\n", c ? relock_client_error(c)->message : "no memory");
        relock_client_free(c);
        return 4;
    }
    /* The resource lives on the same server in this example. */
    char host[128] = "127.0.0.1";
    int port = 6379;
    sscanf(argv[1], "redis://%127[^:/]:%d", host, &port);
    redisContext *rc = redisConnect(host, port);
    if (!rc || rc->err) {
        fprintf(stderr, "resource: cannot connect\n");
        return 4;
    }

    relock_lock *l = NULL;
    st = relock_acquire(c, "report-writer", 3000, 10000, &l);
    if (st != RELOCK_OK) {
        fprintf(stderr, "acquire: %s\n", relock_client_error(c)->message);
        return st == RELOCK_TIMEOUT || st == RELOCK_BUSY ? 1 : 4;
    }
    if (relock_keep(l, on_lost, NULL) != RELOCK_OK) {
        fprintf(stderr, "keep: %s\n", relock_client_error(c)->message);
        return 4;
    }
    printf("holding report-writer with fence %lld\n", relock_lock_fence(l));
    int code = 0;
    for (int i = 0; i < rounds && !lost; i++) {
        if (!fenced_write(rc, relock_lock_fence(l), i)) {
            fprintf(stderr, "the resource refused fence %lld: a newer holder exists\n",
                    relock_lock_fence(l));
            code = 3;
            break;
        }
        printf("wrote %d with fence %lld\n", i, relock_lock_fence(l));
        sleep(1); /* longer than a third of the lease: renewal keeps it */
    }
    if (lost) {
        fprintf(stderr, "lock lost: stopping work\n");
        code = 3;
    }
    st = relock_release(l); /* also stops the renewal */
    if (st != RELOCK_OK && code == 0) {
        fprintf(stderr, "release: %s\n", relock_client_error(c)->message);
        code = 3;
    }
    relock_lock_free(l);
    relock_client_free(c);
    redisFree(rc);
    return code;
}
