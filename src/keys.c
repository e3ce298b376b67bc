/*
 * Names of the keys relock keeps beside lock keys.
 *
 * Lock names never contain a space (lock.c refuses them) and key_prefix may
 * not either (config.c), so every key below, which contains one, lives in a
 * namespace no lock can collide with, and `relock scan` can skip them.
 *
 * A side key shares its lock key's Redis Cluster slot: a lock key with a
 * hash tag keeps it, and one without is wrapped in braces so that only it
 * is hashed.  A key that is nothing but a tag, such as "{a}", is exactly
 * the braced form of the key inside it ("a"), so its side keys carry a
 * further mark (RELOCK__WHOLE_TAG_MARK) after the suffix: distinct lock
 * keys never share a side key (docs/decisions.md §82).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Whether key has a Cluster hash tag: a '{' followed later by a '}' with
 * at least one byte between them. */
static int has_hash_tag(const char *key)
{
    const char *open = strchr(key, '{');
    if (!open)
        return 0;
    const char *close = strchr(open + 1, '}');
    return close && close > open + 1;
}

int relock__key_slot_safe(const char *key)
{
    /* Braces around a key without a tag hash exactly the key, unless the
     * key itself holds a '}' (the tag would end there). */
    return has_hash_tag(key) || !strchr(key, '}');
}

/* Whether key is "{X}" with no other '}': the braced form relock gives an
 * untagged key X (which never holds a '}', see relock__key_slot_safe). */
static int whole_tag(const char *key)
{
    size_t n = strlen(key);
    return n >= 3 && key[0] == '{' && strchr(key, '}') == key + n - 1;
}

/* A key beside lock_key, in its Cluster slot, ending with suffix; with
 * as_before, the name it had before whole-tag keys got their mark. */
static int side_key(const char *lock_key, const char *suffix, int as_before, char *out,
                    size_t len)
{
    const char *mark = whole_tag(lock_key) && !as_before ? RELOCK__WHOLE_TAG_MARK : "";
    int n = has_hash_tag(lock_key) ? snprintf(out, len, "%s%s%s", lock_key, suffix, mark)
                                   : snprintf(out, len, "{%s}%s", lock_key, suffix);
    return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

/*
 * The rules of lock names, for every call that takes one (lock.c, break.c).
 * Names are binary-safe for Redis, but a space or control character is
 * almost always a mistake in a script and unprintable in messages; above
 * all, no name has a space, so no lock key is ever one of relock's own
 * (fence counters, the marker), whose names have one.
 */
relock_status relock__check_name(relock_client *c, const char *name)
{
    if (!name || !*name)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "lock name: empty");
    size_t len = strlen(name);
    if (len > RELOCK__NAME_MAX)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "lock name: %zu bytes, at most %d", len,
                            RELOCK__NAME_MAX);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch <= ' ' || ch == 0x7f)
            return RELOCK__FAIL(&c->err, RELOCK_EINVAL,
                                "lock name: contains a space or control character at byte %zu",
                                i);
    }
    return RELOCK_OK;
}

int relock__fence_key(const char *lock_key, char *out, size_t len)
{
    return side_key(lock_key, RELOCK__FENCE_SUFFIX, 0, out, len);
}

int relock__breaks_key(const char *lock_key, char *out, size_t len)
{
    return side_key(lock_key, RELOCK__BREAKS_SUFFIX, 0, out, len);
}

int relock__owner_key(const char *lock_key, char *out, size_t len)
{
    return side_key(lock_key, RELOCK__OWNER_SUFFIX, 0, out, len);
}

int relock__fence_key_before(const char *lock_key, char *out, size_t len)
{
    if (!whole_tag(lock_key))
        return 0;
    return side_key(lock_key, RELOCK__FENCE_SUFFIX, 1, out, len) == 0 ? 1 : -1;
}

/*
 * Earlier versions counted the fences of a whole-tag key such as "{a}" in the
 * counter of "a" (its name without the mark).  Its own counter is raised
 * to that one before each acquisition, so no token handed out under the
 * old name is ever handed out again or undercut (decisions §82).  With
 * EVAL the raise is a script that only ever increases the counter; without
 * it (legacy mode on servers before 2.6) the counter is created from the
 * old one if it does not exist yet (SETNX), never lowered.
 */
/* Reads a fence counter under WATCH: its value, 0 when absent or not a
 * number; -1 on failure (recorded), an error reply included: a counter
 * that could not be read must not pass for one that is absent. */
static long long counter_get(relock_client *c, const char *key)
{
    redisReply *r = relock__commandf(c, NULL, "GET %s", key);
    if (!r)
        return -1;
    if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL) {
        RELOCK__BAD_REPLY(c, "reading the fence counter", r);
        freeReplyObject(r);
        return -1;
    }
    long long v = 0;
    if (r->type == REDIS_REPLY_STRING && r->len > 0 && r->len < 20 &&
        strspn(r->str, "0123456789") == r->len)
        v = atoll(r->str);
    freeReplyObject(r);
    return v;
}

/* Sends a command of the carry and checks its reply is a status (OK,
 * QUEUED); on failure the error is recorded, the server's words with it. */
static relock_status carry_step(relock_client *c, const char *what, const char *fmt,
                                const char *a, const char *b)
{
    redisReply *r = relock__commandf(c, NULL, fmt, a, b);
    if (!r)
        return c->err.pub.status;
    relock_status st = r->type == REDIS_REPLY_STATUS ? RELOCK_OK : RELOCK__BAD_REPLY(c, what, r);
    freeReplyObject(r);
    return st;
}

/*
 * One look of carry_watched: WATCH both counters, read them, and only if
 * the new one is lower, MULTI, SET, EXEC.  *beaten when EXEC found a
 * counter written since the WATCH (nil): the only outcome worth another
 * look.  A command the server refuses (SET inside MULTI refused by an ACL
 * or for want of memory, and then EXECABORT) is an error with the
 * server's words, not a race.
 */
static relock_status carry_watched_in(relock_client *c, const char *fence_key,
                                      const char *before, int *beaten)
{
    *beaten = 0;
    relock_status st = carry_step(c, "WATCH of the fence counters", "WATCH %s %s", fence_key,
                                  before);
    if (st != RELOCK_OK)
        return st;
    long long old = counter_get(c, before);
    if (old < 0)
        return c->err.pub.status;
    long long now = counter_get(c, fence_key);
    if (now < 0)
        return c->err.pub.status;
    if (now >= old)
        return carry_step(c, "UNWATCH", "UNWATCH%s%s", "", "");
    char v[32];
    snprintf(v, sizeof v, "%lld", old);
    st = carry_step(c, "MULTI", "MULTI%s%s", "", "");
    if (st == RELOCK_OK)
        st = carry_step(c, "raising the fence counter (SET in MULTI)", "SET %s %s", fence_key, v);
    if (st != RELOCK_OK)
        return st;
    redisReply *r = relock__commandf(c, NULL, "EXEC");
    if (!r)
        return c->err.pub.status;
    if (r->type == REDIS_REPLY_NIL)
        *beaten = 1;
    else if (r->type != REDIS_REPLY_ARRAY)
        st = RELOCK__BAD_REPLY(c, "EXEC raising the fence counter", r);
    freeReplyObject(r);
    return st;
}

/*
 * On a server that runs without Lua but has WATCH (a Valkey 9.1 without its
 * Lua engine): the carry of relock__fence_seed as a transaction
 * (carry_watched_in); an EXEC beaten by another writer looks again (the
 * counters only grow, so a few looks settle it).  From WATCH to EXEC on
 * one connection.
 */
static relock_status carry_watched(relock_client *c, const char *fence_key, const char *before)
{
    for (int tries = 0; tries < 5; tries++) {
        if (relock__txn_begin(c) != RELOCK_OK)
            return c->err.pub.status;
        int beaten = 0;
        relock_status st = carry_watched_in(c, fence_key, before, &beaten);
        relock__txn_end(c);
        if (st != RELOCK_OK) {
            if (c->conn.ctx)
                relock__conn_close(&c->conn); /* drops the WATCH or MULTI left behind */
            return st;
        }
        if (!beaten)
            return RELOCK_OK;
    }
    return RELOCK__FAIL(&c->err, RELOCK_EIO,
                        "raising the fence counter %s: it kept changing between WATCH and EXEC",
                        fence_key);
}

relock_status relock__fence_seed(relock_lock *l)
{
    relock_client *c = l->c;
    char before[RELOCK__KEY_MAX];
    if (relock__fence_key_before(l->key, before, sizeof before) != 1)
        return RELOCK_OK;
    redisReply *r;
    long v = (long)c->conn.major * 10000 + c->conn.minor * 100 + c->conn.patch;
    if (c->conn.caps & RELOCK_CAP_EVAL) {
        const char *args[] = {l->fence_key, before};
        r = relock__eval(c, NULL, RELOCK__SCRIPT_FENCE_CARRY, 2, 2, args);
    } else if (v >= 20600 && (c->conn.caps & RELOCK_CAP_WATCH)) {
        return carry_watched(c, l->fence_key, before); /* Lua left out */
    } else {
        r = relock__commandf(c, NULL, "GET %s", before);
        if (!r)
            return c->err.pub.status;
        char old[32] = "";
        if (r->type == REDIS_REPLY_STRING && r->len > 0 && r->len < sizeof old &&
            strspn(r->str, "0123456789") == r->len)
            memcpy(old, r->str, r->len + 1);
        freeReplyObject(r);
        if (!old[0])
            return RELOCK_OK; /* no counter under the old name: nothing to carry */
        r = relock__commandf(c, NULL, "SETNX %s %s", l->fence_key, old);
    }
    if (!r)
        return c->err.pub.status;
    relock_status st = r->type == REDIS_REPLY_INTEGER
                           ? RELOCK_OK
                           : RELOCK__BAD_REPLY(c, "raising the fence counter", r);
    freeReplyObject(r);
    return st;
}

int relock__marker_key(const char *key_prefix, char *out, size_t len)
{
    int n = snprintf(out, len, "%s" RELOCK__MARKER_NAME, key_prefix);
    return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

int relock__notify_channel(const relock_lock *l, char *out, size_t len)
{
    if (!l->c->s.wait.notify) {
        out[0] = '\0';
        return 0;
    }
    int n = snprintf(out, len, "%s" RELOCK__NOTIFY_SUFFIX, l->key);
    if (n < 0 || (size_t)n >= len) {
        out[0] = '\0';
        return 0;
    }
    return 1;
}
