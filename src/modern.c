/*
 * Modern mode (servers >= 2.6.12, DESIGN §3): SET key token NX PX ttl to
 * acquire; compare-and-delete and compare-and-pexpire scripts to release
 * and extend, so a holder can never delete or prolong a lock that has
 * passed to someone else.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* After a lost reply to the acquire (SET, or the takeover of a legacy
 * leftover), read the key back on a fresh connection: the lock is ours
 * only if it provably holds our token (tokens are unique).  Then nobody
 * has acquired since, so the fence counter holds our fence. */
static relock_status resolve_ambiguous_set(relock_lock *l, uint64_t start)
{
    relock_client *c = l->c;
    redisReply *r = relock__commandf(c, NULL, "GET %s", l->key);
    if (!r) {
        relock__err_clear(&c->err); /* the I/O errors are the lesser news */
        return RELOCK__FAIL(&c->err, RELOCK_EAMBIGUOUS,
                            "acquire %s: connection lost after the acquire was sent and the key "
                            "cannot be read back; the lock may be held by us until its TTL ends",
                            l->name);
    }
    int ours = r->type == REDIS_REPLY_STRING && strcmp(r->str, l->value) == 0;
    freeReplyObject(r);
    if (!ours)
        return c->err.pub.status; /* the SET never took effect: keep its I/O error */
    if (c->s.fencing) {
        r = relock__commandf(c, NULL, "GET %s", l->fence_key);
        if (!r)
            return c->err.pub.status;
        l->fence = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
        freeReplyObject(r);
    }
    relock__err_clear(&c->err);
    l->valid_until = relock__valid_until(start, l->ttl_ms);
    return RELOCK_OK;
}

static long clamp_hint(long long ms)
{
    return ms > 0x7fffffffLL ? 0x7fffffffL : ms < 0 ? 0 : (long)ms;
}

/*
 * The key is held by `found` with TTL pttl.  A value with a TTL is waited
 * for.  A timestamp without one is a legacy holder (DESIGN §3, modern): a
 * dead one is taken over once expired, so a migrated fleet never waits
 * forever on a leftover; a live one means a legacy writer is still active.
 */
static relock_status held_by(relock_lock *l, uint64_t start, const char *found, long long pttl,
                             long *hint_ms)
{
    relock_client *c = l->c;
    if (!found || pttl == -2) {
        *hint_ms = 0; /* gone since our attempt: try again at once */
        return RELOCK_BUSY;
    }
    if (pttl >= 0) {
        *hint_ms = clamp_hint(pttl);
        return RELOCK_BUSY;
    }
    relock__value v;
    relock__classify(found, strlen(found), &v);
    int unit = v.kind == RELOCK_VALUE_TIMESTAMP ? relock__ts_unit_guess(v.ts_digits) : -1;
    if (unit < 0)
        return RELOCK__FAIL(&c->err, RELOCK_EFOREIGN,
                            "key %s holds \"%.40s\" without a TTL: neither a lock relock wrote "
                            "nor a legacy timestamp; never taken over",
                            l->key, found);
    long long end = (v.ts + 1) * (unit ? 1 : 1000) + c->s.legacy.skew_margin_ms;
    long long now; /* by the clock legacy writers go by (legacy.clock) */
    relock_status cst = relock__fleet_ms(c, &now);
    if (cst != RELOCK_OK)
        return cst;
    if (now < end) {
        l->legacy_holder = 1;
        relock__note_legacy_writer(c);
        *hint_ms = clamp_hint(end - now);
        return RELOCK_BUSY;
    }
    char ttl[32];
    snprintf(ttl, sizeof ttl, "%ld", l->ttl_ms);
    const char *args[] = {l->key, l->fence_key, found, l->value, ttl, c->s.fencing ? "1" : "0"};
    int sent = 0;
    redisReply *r = relock__eval(c, &sent, RELOCK__SCRIPT_MODERN_TAKEOVER, 2, 6, args);
    if (!r)
        return sent ? resolve_ambiguous_set(l, start) : c->err.pub.status;
    relock_status st = RELOCK_BUSY;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER) {
        st = RELOCK__BAD_REPLY(c, "takeover script", r);
    } else if (r->element[0]->integer == 1) {
        l->fence = r->elements > 1 && r->element[1]->type == REDIS_REPLY_INTEGER
                       ? r->element[1]->integer
                       : 0;
        l->valid_until = relock__valid_until(start, l->ttl_ms);
        st = RELOCK_OK;
    } else {
        *hint_ms = 0;
    }
    freeReplyObject(r);
    return st;
}

/* With fencing: SET NX PX and INCR in one script, which also returns the
 * holder's PTTL and value when busy (no second round trip). */
static relock_status attempt_fenced(relock_lock *l, uint64_t start, const char *ttl,
                                    long *hint_ms)
{
    relock_client *c = l->c;
    const char *args[] = {l->key, l->fence_key, l->value, ttl};
    int sent = 0;
    redisReply *r = relock__eval(c, &sent, RELOCK__SCRIPT_MODERN_ACQUIRE, 2, 4, args);
    if (!r)
        return sent ? resolve_ambiguous_set(l, start) : c->err.pub.status;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER) {
        relock_status st = RELOCK__BAD_REPLY(c, "acquire script", r);
        freeReplyObject(r);
        return st;
    }
    relock_status st;
    if (r->element[0]->integer == 1) {
        l->fence = r->element[1]->integer;
        l->valid_until = relock__valid_until(start, l->ttl_ms);
        st = RELOCK_OK;
    } else {
        char found[RELOCK__VALUE_MAX];
        int has = r->elements > 2 && r->element[2]->type == REDIS_REPLY_STRING;
        if (has)
            snprintf(found, sizeof found, "%s", r->element[2]->str);
        st = held_by(l, start, has ? found : NULL, r->element[1]->integer, hint_ms);
    }
    freeReplyObject(r);
    return st;
}

/* Without fencing: the plain SET NX PX, the fastest acquire there is. */
static relock_status attempt_plain(relock_lock *l, uint64_t start, const char *ttl,
                                   long *hint_ms)
{
    relock_client *c = l->c;
    const char *argv[] = {"SET", l->key, l->value, "NX", "PX", ttl};
    size_t argvlen[6];
    for (int i = 0; i < 6; i++)
        argvlen[i] = strlen(argv[i]);
    int sent = 0;
    redisReply *r = relock__command(c, &sent, 6, argv, argvlen);
    if (!r)
        return sent ? resolve_ambiguous_set(l, start) : c->err.pub.status;
    if (r->type == REDIS_REPLY_STATUS) {
        freeReplyObject(r);
        l->fence = 0;
        l->valid_until = relock__valid_until(start, l->ttl_ms);
        return RELOCK_OK;
    }
    if (r->type != REDIS_REPLY_NIL) {
        relock_status st = RELOCK__BAD_REPLY(c, "SET NX PX", r);
        freeReplyObject(r);
        return st;
    }
    freeReplyObject(r);
    /* Busy: learn when the holder's lease ends, to sleep until then. */
    r = relock__commandf(c, NULL, "PTTL %s", l->key);
    if (!r)
        return c->err.pub.status;
    if (r->type != REDIS_REPLY_INTEGER) {
        relock_status st = RELOCK__BAD_REPLY(c, "PTTL", r);
        freeReplyObject(r);
        return st;
    }
    long long pttl = r->integer;
    freeReplyObject(r);
    if (pttl != -1)
        return held_by(l, start, "", pttl == -2 ? -2 : pttl, hint_ms);
    r = relock__commandf(c, NULL, "GET %s", l->key);
    if (!r)
        return c->err.pub.status;
    char found[RELOCK__VALUE_MAX];
    int has = r->type == REDIS_REPLY_STRING;
    if (has)
        snprintf(found, sizeof found, "%s", r->str);
    freeReplyObject(r);
    return held_by(l, start, has ? found : NULL, -1, hint_ms);
}

static relock_status modern_attempt(relock_lock *l, long *hint_ms)
{
    relock_client *c = l->c;
    char ttl[32];
    if (relock__token(l->value) != 0)
        return RELOCK__FAIL(&c->err, RELOCK_EIO, "acquire %s: no random bytes for a token",
                            l->name);
    snprintf(ttl, sizeof ttl, "%ld", l->ttl_ms);
    uint64_t start = relock__mono_ms();
    return c->s.fencing ? attempt_fenced(l, start, ttl, hint_ms)
                        : attempt_plain(l, start, ttl, hint_ms);
}

/* Turns a compare-and-X script result into a status. */
static relock_status script_result(relock_lock *l, const char *op, redisReply *r, int sent)
{
    relock_client *c = l->c;
    if (!r) {
        if (sent) {
            relock__err_clear(&c->err); /* the I/O error is the lesser news */
            return RELOCK__FAIL(&c->err, RELOCK_EAMBIGUOUS,
                                "%s %s: connection lost after the request was sent; the "
                                "lock's state is unknown",
                                op, l->name);
        }
        return c->err.pub.status;
    }
    relock_status st;
    if (r->type != REDIS_REPLY_INTEGER) {
        st = RELOCK__BAD_REPLY(c, op, r);
    } else if (r->integer >= 1) {
        st = RELOCK_OK;
        l->waiters = (int)(r->integer - 1); /* release: waiters told */
    } else if (r->integer == 0) {
        int expired = l->valid_until && relock__mono_ms() >= l->valid_until;
        st = RELOCK__FAIL(&c->err, RELOCK_LOST, "%s %s: lock lost: %s", op, l->name,
                          expired ? "it expired" : "the key was deleted or expired");
    } else {
        st = RELOCK__FAIL(&c->err, RELOCK_LOST, "%s %s: lock lost: taken by another value", op,
                          l->name);
    }
    freeReplyObject(r);
    return st;
}

static relock_status modern_release(relock_lock *l)
{
    char chan[RELOCK__KEY_MAX];
    relock__notify_channel(l, chan, sizeof chan);
    const char *args[] = {l->key, l->value, chan};
    int sent = 0;
    redisReply *r = relock__eval(l->c, &sent, RELOCK__SCRIPT_DEL_IF_EQ, 1, 3, args);
    return script_result(l, "release", r, sent);
}

static relock_status modern_extend(relock_lock *l, long ttl_ms)
{
    char ttl[32];
    snprintf(ttl, sizeof ttl, "%ld", ttl_ms);
    const char *args[] = {l->key, l->value, ttl};
    int sent = 0;
    uint64_t start = relock__mono_ms();
    redisReply *r = relock__eval(l->c, &sent, RELOCK__SCRIPT_PEXPIRE_IF_EQ, 1, 3, args);
    relock_status st = script_result(l, "extend", r, sent);
    if (st == RELOCK_OK) {
        l->ttl_ms = ttl_ms;
        l->valid_until = relock__valid_until(start, ttl_ms);
    }
    return st;
}

const relock__algo relock__algo_modern = {
    "modern",
    modern_attempt,
    modern_release,
    modern_extend,
    NULL,
};
