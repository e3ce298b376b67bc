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
 *                [--resource-port P --hold-ms MS --tolerate --fault-file F]
 *
 * The torture runner (tests/torture/) adds the last line: the section then
 * uses the fenced resource without a token (a classic client has none),
 * and with --tolerate a failed command is logged ("error redis:CMD"), the
 * connection is opened again and the client starts over, as a long-lived
 * legacy service would, instead of exiting.
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

/* A failed command: exit 3, or with --tolerate log it and return, so that
 * the caller gives up what it was doing (the lock's state is unknown: a
 * command whose reply was lost may have been executed). */
static void die_redis(wk_worker *w, redisContext *rc, const char *what)
{
    fprintf(stderr, "classic_lock: %s: %s\n", what, rc->err ? rc->errstr : "unexpected reply");
    if (!w->o->tolerate)
        exit(3);
    char detail[48];
    snprintf(detail, sizeof detail, "redis:%s", what);
    wk_error(w, detail);
}

/* 1 acquired, 0 the deadline passed first, -1 a command failed
 * (--tolerate). */
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
        if (!r || r->type != REDIS_REPLY_INTEGER) {
            if (r)
                freeReplyObject(r);
            die_redis(w, rc, "SETNX");
            return -1;
        }
        long long set = r->integer;
        freeReplyObject(r);
        if (set == 1) {
            h->expiry = mine;
            h->valid_until = t0 + (uint64_t)timeout_ms;
            return 1;
        }
        r = redisCommand(rc, "GET %s", o->key);
        if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL)) {
            if (r)
                freeReplyObject(r);
            die_redis(w, rc, "GET");
            return -1;
        }
        long long cur = parse_legacy(r);
        freeReplyObject(r);
        if (cur < now) {
            r = redisCommand(rc, "GETSET %s %lld", o->key, mine);
            if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL)) {
                if (r)
                    freeReplyObject(r);
                die_redis(w, rc, "GETSET");
                return -1;
            }
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

/* 0, or -1 when DEL failed (--tolerate). */
static int release(wk_worker *w, redisContext *rc, const held *h)
{
    if (wk_wall(w->o->unit_ms) < h->expiry) {
        redisReply *r = redisCommand(rc, "DEL %s", w->o->key);
        if (!r || r->type != REDIS_REPLY_INTEGER) {
            if (r)
                freeReplyObject(r);
            die_redis(w, rc, "DEL");
            return -1;
        }
        freeReplyObject(r);
    } else {
        wk_log(w, "late", NULL);
    }
    return 0;
}

/* --tolerate: a new connection to the lock server, trying until the
 * deadline (the server may be restarting). */
static redisContext *reconnect(wk_worker *w, redisContext *rc)
{
    redisFree(rc);
    for (int i = 0; i < 100000; i++) {
        /* Not at once: a restarting server (or a proxy without its
         * upstream) accepts and drops connections in a tight loop. */
        wk_sleep_us(wk_rand_between(w, 10000, 40000));
        if (w->o->until_ms && wk_mono_ms() >= w->o->until_ms)
            return NULL;
        rc = wk_try_connect(w->o->port);
        if (rc)
            return rc;
        wk_error(w, "redis:connect");
    }
    return NULL;
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
    redisContext *rc = o.tolerate ? wk_try_connect(o.port) : wk_connect(o.port);
    if (!rc)
        rc = reconnect(&w, rc);
    /* The section's data: the counter on the lock server, or the fenced
     * resource on a server of its own. */
    redisContext *res = o.resource_port ? wk_connect(o.resource_port) : NULL;
    while (rc && w.done < o.sections) {
        held h;
        int got = acquire(&w, rc, &h);
        if (got < 0) {
            rc = reconnect(&w, rc);
            continue;
        }
        if (!got)
            break;
        int sect = res ? wk_section_fenced(&w, res, 0, h.valid_until * 1000000u, still_valid, &h)
                       : wk_section(&w, rc, still_valid, &h);
        if (sect != 0)
            exit(3);
        if (release(&w, rc, &h) != 0)
            rc = reconnect(&w, rc);
        wk_gap(&w);
    }
    redisFree(rc);
    redisFree(res);
    return 0;
}
