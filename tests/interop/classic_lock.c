/*
 * classic_lock: an unchanged legacy client, written independently of
 * relock from the pattern the old Redis SETNX documentation taught
 * ("Design pattern: Locking with SETNX"), using hiredis only.
 *
 *   acquire  SETNX key <now + timeout + 1>; on 1 the lock is ours.
 *            Else GET key and parse it as legacy code did, with atoll():
 *            anything that is not a number reads as 0, i.e. long expired.
 *            If that value < now: GETSET key <now + timeout + 1>, and the
 *            lock is ours only if the old value GETSET returned is < now
 *            too (else another client beat us; our write merely moved its
 *            expiry a little).  Otherwise sleep a few ms and start over.
 *   release  DEL key, but only if our own expiry has not passed yet.
 *
 * There is no TTL, no token, no compare-and-delete: exactly what the
 * upgraded clients of a migrating fleet must coexist with.  Deliberately
 * shares no code with the library under test (worker.c is the common
 * critical section and log of the interop tests only).
 *
 *   classic_lock --port P --key K --unit s|ms --timeout T --sections N
 *                --log FILE --counter C [--die-prob X --seed S --until-ms M --gap-ms G]
 */
#include <stdio.h>
#include <stdlib.h>

#include <hiredis/hiredis.h>

#include "worker.h"

typedef struct held {
    long long expiry;     /* the timestamp we wrote, in the unit */
    uint64_t valid_until; /* monotonic ms: start of the attempt + timeout */
} held;

static long long parse_legacy(const redisReply *r)
{
    /* Typical legacy code: atoll() on whatever came back, nil as 0. */
    return r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
}

static void die_redis(redisContext *rc, const char *what)
{
    fprintf(stderr, "classic_lock: %s: %s\n", what, rc->err ? rc->errstr : "unexpected reply");
    exit(3);
}

/* 1 acquired, 0 the deadline passed first. */
static int acquire(wk_worker *w, redisContext *rc, held *h)
{
    const wk_opts *o = w->o;
    long timeout_ms = o->unit_ms ? o->timeout : o->timeout * 1000;
    for (;;) {
        uint64_t t0 = wk_mono_ms();
        if (o->until_ms && t0 >= o->until_ms)
            return 0;
        long long now = wk_wall(o->unit_ms);
        long long mine = now + o->timeout + 1;
        redisReply *r = redisCommand(rc, "SETNX %s %lld", o->key, mine);
        if (!r || r->type != REDIS_REPLY_INTEGER)
            die_redis(rc, "SETNX");
        long long set = r->integer;
        freeReplyObject(r);
        if (set == 1) {
            h->expiry = mine;
            h->valid_until = t0 + (uint64_t)timeout_ms;
            return 1;
        }
        r = redisCommand(rc, "GET %s", o->key);
        if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL))
            die_redis(rc, "GET");
        long long cur = parse_legacy(r);
        freeReplyObject(r);
        if (cur < now) {
            r = redisCommand(rc, "GETSET %s %lld", o->key, mine);
            if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL))
                die_redis(rc, "GETSET");
            long long old = parse_legacy(r);
            freeReplyObject(r);
            if (old < now) {
                h->expiry = mine;
                h->valid_until = t0 + (uint64_t)timeout_ms;
                return 1;
            }
            wk_log(w, "lose", NULL);
        }
        wk_sleep_us(wk_rand_between(w, 1000, 5000));
    }
}

static void release(wk_worker *w, redisContext *rc, const held *h)
{
    if (wk_wall(w->o->unit_ms) < h->expiry) {
        redisReply *r = redisCommand(rc, "DEL %s", w->o->key);
        if (!r || r->type != REDIS_REPLY_INTEGER)
            die_redis(rc, "DEL");
        freeReplyObject(r);
    } else {
        wk_log(w, "late", NULL);
    }
}

static int still_valid(void *ctx)
{
    const held *h = ctx;
    return wk_mono_ms() < h->valid_until;
}

int main(int argc, char **argv)
{
    wk_opts o;
    wk_parse(argc, argv, &o, 0);
    wk_worker w;
    wk_init(&w, &o, "classic");
    redisContext *rc = wk_connect(o.port);
    while (w.done < o.sections) {
        held h;
        if (!acquire(&w, rc, &h))
            break;
        if (wk_section(&w, rc, still_valid, &h) != 0)
            exit(3);
        release(&w, rc, &h);
        wk_gap(&w);
    }
    redisFree(rc);
    return 0;
}
