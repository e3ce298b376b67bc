/*
 * Modern mode (servers >= 2.6.12, DESIGN §3): SET key token NX PX ttl to
 * acquire; compare-and-delete and compare-and-pexpire scripts to release
 * and extend, so a holder can never delete or prolong a lock that has
 * passed to someone else.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* After a lost reply to SET, read the key back on a fresh connection: the
 * lock is ours only if it provably holds our token. */
static relock_status resolve_ambiguous_set(relock_lock *l, uint64_t start)
{
    relock_client *c = l->c;
    redisReply *r = relock__commandf(c, NULL, "GET %s", l->key);
    if (!r)
        return RELOCK__FAIL(&c->err, RELOCK_EAMBIGUOUS,
                            "acquire %s: connection lost after SET and the key cannot be read "
                            "back; the lock may be held by us until its TTL ends",
                            l->name);
    int ours = r->type == REDIS_REPLY_STRING && strcmp(r->str, l->value) == 0;
    freeReplyObject(r);
    if (!ours)
        return c->err.pub.status; /* the SET never took effect: keep its I/O error */
    relock__err_clear(&c->err);
    l->valid_until = relock__valid_until(start, l->ttl_ms);
    return RELOCK_OK;
}

static relock_status modern_attempt(relock_lock *l, long *hint_ms)
{
    relock_client *c = l->c;
    char ttl[32];
    if (relock__token(l->value) != 0)
        return RELOCK__FAIL(&c->err, RELOCK_EIO, "acquire %s: no random bytes for a token",
                            l->name);
    snprintf(ttl, sizeof ttl, "%ld", l->ttl_ms);
    const char *argv[] = {"SET", l->key, l->value, "NX", "PX", ttl};
    size_t argvlen[6];
    for (int i = 0; i < 6; i++)
        argvlen[i] = strlen(argv[i]);
    int sent = 0;
    uint64_t start = relock__mono_ms();
    redisReply *r = relock__command(c, &sent, 6, argv, argvlen);
    if (!r)
        return sent ? resolve_ambiguous_set(l, start) : c->err.pub.status;
    if (r->type == REDIS_REPLY_STATUS) {
        freeReplyObject(r);
        l->valid_until = relock__valid_until(start, l->ttl_ms);
        return RELOCK_OK;
    }
    if (r->type != REDIS_REPLY_NIL) {
        relock_status st = RELOCK__BAD_REPLY(c, "SET NX PX", r);
        freeReplyObject(r);
        return st;
    }
    freeReplyObject(r);
    l->value[0] = '\0';
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
    if (pttl >= 0)
        *hint_ms = pttl > 0x7fffffffLL ? 0x7fffffffL : (long)pttl;
    else if (pttl == -2)
        *hint_ms = 0; /* gone since our SET: try again at once */
    /* pttl == -1: a key without TTL, such as a legacy holder's value;
     * no end is known, so the backoff decides. */
    return RELOCK_BUSY;
}

/* Turns a compare-and-X script result into a status. */
static relock_status script_result(relock_lock *l, const char *op, redisReply *r, int sent)
{
    relock_client *c = l->c;
    if (!r) {
        if (sent)
            return RELOCK__FAIL(&c->err, RELOCK_EAMBIGUOUS,
                                "%s %s: connection lost after the request was sent; the "
                                "lock's state is unknown",
                                op, l->name);
        return c->err.pub.status;
    }
    relock_status st;
    if (r->type != REDIS_REPLY_INTEGER) {
        st = RELOCK__BAD_REPLY(c, op, r);
    } else if (r->integer == 1) {
        st = RELOCK_OK;
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
    const char *args[] = {l->key, l->value};
    int sent = 0;
    redisReply *r = relock__eval(l->c, &sent, RELOCK__SCRIPT_DEL_IF_EQ, 1, 2, args);
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
