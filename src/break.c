/*
 * relock_break(): an operator deletes a stuck lock by hand (`relock break`).
 *
 * With a value, the delete happens only while the key still holds exactly
 * that value, so an operator who looked at a stuck lock never deletes the
 * lock of whoever took it over since:
 *
 *   - servers with EVAL (2.6.0): a compare-and-delete script
 *     (RELOCK__SCRIPT_BREAK_IF_EQ), atomic;
 *   - 2.2 and 2.4: WATCH, GET, MULTI, DEL, INCR, EXEC, atomic (a
 *     transaction beaten by another client is retried a few times);
 *   - 2.0 (neither): GET, compare, then MULTI, GET, DEL, INCR, EXEC.  Between the
 *     first GET and the transaction another client may replace the value,
 *     and the DEL then removes its lock.  The GET inside the transaction
 *     shows it; the value is then put back with SETNX unless someone else
 *     has taken the key meanwhile, and the call reports RELOCK_BUSY.
 *
 * Without a value the key is deleted whatever it holds (the same script
 * told to match anything, or MULTI, DEL, INCR, EXEC before 2.6).  Either
 * way the release is announced on the lock's channel so that waiters wake
 * at once: inside the script where there is one, else by a PUBLISH right
 * after the delete.  The notice only wakes waiters early, so it is best
 * effort: an ACL user without channel permissions (Redis 7's default
 * acl-pubsub-default) still breaks the lock.
 *
 * Every delete increments the lock's fence counter in the same atomic step
 * (the script, or the transaction).  The broken holder's extend and
 * release compare that counter, so they report the lock lost and write
 * nothing, even when the key has meanwhile been taken by a classic client
 * whose TTL-less timestamp looks like a GETSET loser's write (DESIGN §3).
 * The counter only ever goes up.  On 2.0 the fence also counts failed
 * attempts, so there a second counter, of breaks alone, is incremented as
 * well, and holders compare that one (compat/legacy.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* A WATCH beaten by another client is retried this often. */
#define WATCH_TRIES 5
/* The longest value accepted for comparison: far above any lock value,
 * small enough for a one-line message. */
#define IF_VALUE_MAX 1024

typedef struct brk {
    relock_client *c;
    const char *name;
    const char *if_value;
    long long if_fence; /* 0: not compared */
    char key[RELOCK__PREFIX_MAX + RELOCK__NAME_MAX + 1];
    char fence_key[RELOCK__KEY_MAX];
    char breaks_key[RELOCK__KEY_MAX]; /* counted on servers without WATCH */
    char chan[RELOCK__KEY_MAX]; /* "" when wait.notify is off */
} brk;

/* The lock name's rules (relock__check_name), and break's own. */
static relock_status check_args(relock_client *c, const char *name, const char *if_value)
{
    relock_status st = relock__check_name(c, name);
    if (st != RELOCK_OK)
        return st;
    if (if_value && (!*if_value || strlen(if_value) > IF_VALUE_MAX))
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "break %s: the value is empty or longer "
                            "than %d bytes", name, IF_VALUE_MAX);
    return RELOCK_OK;
}

static relock_status ambiguous(brk *b)
{
    relock__err_clear(&b->c->err); /* the I/O error is the lesser news */
    return RELOCK__FAIL(&b->c->err, RELOCK_EAMBIGUOUS,
                        "break %s: connection lost after the request was sent; whether the "
                        "key was deleted is unknown",
                        b->name);
}

static relock_status absent(brk *b)
{
    return RELOCK__FAIL(&b->c->err, RELOCK_LOST, "break %s: nothing to delete: the key is absent",
                        b->name);
}

static relock_status mismatch(brk *b)
{
    return RELOCK__FAIL(&b->c->err, RELOCK_BUSY,
                        "break %s: nothing deleted: the key holds another value", b->name);
}

static relock_status fence_moved(brk *b)
{
    return RELOCK__FAIL(&b->c->err, RELOCK_BUSY,
                        "break %s: nothing deleted: the key holds that value, but fence %lld "
                        "is no longer current (another holder acquired since)",
                        b->name, b->if_fence);
}

/* Sends one command that must answer with a status (+OK, +QUEUED).  On
 * anything else the connection is dropped, which discards a transaction
 * and any WATCH with it. */
static int status_cmd(relock_client *c, const char *what, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = relock__vcommandf(c, NULL, fmt, ap);
    va_end(ap);
    if (!r)
        return -1;
    int ok = r->type == REDIS_REPLY_STATUS;
    if (!ok) {
        RELOCK__BAD_REPLY(c, what, r);
        relock__conn_close(&c->conn);
    }
    freeReplyObject(r);
    return ok ? 0 : -1;
}

/* GET key into *found (malloc'd; NULL when absent).  -1 on error. */
static int get_value(brk *b, char **found)
{
    *found = NULL;
    redisReply *r = relock__commandf(b->c, NULL, "GET %s", b->key);
    if (!r)
        return -1;
    int rc = 0;
    if (r->type == REDIS_REPLY_STRING) {
        *found = malloc(r->len + 1);
        if (*found) {
            memcpy(*found, r->str, r->len);
            (*found)[r->len] = '\0';
        } else {
            RELOCK__FAIL(&b->c->err, RELOCK_ENOMEM, "break %s: out of memory", b->name);
            rc = -1;
        }
    } else if (r->type != REDIS_REPLY_NIL) {
        RELOCK__BAD_REPLY(b->c, "GET", r); /* WRONGTYPE: not a lock */
        rc = -1;
    }
    freeReplyObject(r);
    return rc;
}

/* The outcome of one MULTI ... EXEC. */
typedef struct tx_result {
    int beaten;     /* EXEC answered nil: a WATCHed key changed */
    int deleted;    /* DEL's count */
    int got_absent; /* with_get: the key was absent */
    char *got;      /* with_get: the value deleted (malloc'd), else NULL */
} tx_result;

/* MULTI, [GET key,] DEL key, INCR fence, EXEC; inside the caller's
 * transaction (after its WATCH) or as one of its own. */
static relock_status tx_delete_in(brk *b, int with_get, tx_result *out);

static relock_status tx_delete(brk *b, int with_get, tx_result *out)
{
    relock_client *c = b->c;
    memset(out, 0, sizeof *out);
    if (c->conn.in_txn)
        return tx_delete_in(b, with_get, out);
    relock_status st = relock__txn_begin(c);
    if (st != RELOCK_OK)
        return st;
    st = tx_delete_in(b, with_get, out);
    relock__txn_end(c);
    return st;
}

static relock_status tx_delete_in(brk *b, int with_get, tx_result *out)
{
    relock_client *c = b->c;
    if (status_cmd(c, "MULTI", "MULTI") != 0 ||
        (with_get && status_cmd(c, "GET", "GET %s", b->key) != 0) ||
        status_cmd(c, "DEL", "DEL %s", b->key) != 0 ||
        status_cmd(c, "INCR", "INCR %s", b->fence_key) != 0 ||
        (!(c->conn.caps & RELOCK_CAP_WATCH) &&
         status_cmd(c, "INCR", "INCR %s", b->breaks_key) != 0)) {
        relock__conn_close(&c->conn);
        return c->err.pub.status;
    }
    int sent = 0;
    redisReply *r = relock__commandf(c, &sent, "EXEC");
    if (!r)
        return sent ? ambiguous(b) : c->err.pub.status;
    relock_status st = RELOCK_OK;
    size_t di = with_get ? 1 : 0;
    if (r->type == REDIS_REPLY_NIL) {
        out->beaten = 1;
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements <= di ||
               r->element[di]->type != REDIS_REPLY_INTEGER) {
        st = RELOCK__BAD_REPLY(c, "EXEC", r);
    } else {
        out->deleted = r->element[di]->integer > 0;
        if (with_get) {
            const redisReply *g = r->element[0];
            if (g->type == REDIS_REPLY_STRING) {
                out->got = malloc(g->len + 1);
                if (out->got) {
                    memcpy(out->got, g->str, g->len);
                    out->got[g->len] = '\0';
                }
            } else if (g->type == REDIS_REPLY_NIL) {
                out->got_absent = 1;
            }
        }
    }
    freeReplyObject(r);
    return st;
}

/* Announces a delete to waiters, and drops the broken holder's owner
 * metadata (owner_info); best effort (see the top of the file). */
static relock_status notify(brk *b)
{
    char okey[RELOCK__KEY_MAX];
    if (relock__owner_key(b->key, okey, sizeof okey) == 0) {
        redisReply *r = relock__commandf(b->c, NULL, "DEL %s", okey);
        if (r)
            freeReplyObject(r);
        relock__err_clear(&b->c->err);
    }
    if (b->chan[0]) {
        redisReply *r = relock__commandf(b->c, NULL, "PUBLISH %s 1", b->chan);
        if (r)
            freeReplyObject(r);
        relock__err_clear(&b->c->err);
    }
    return RELOCK_OK;
}

static relock_status break_eval(brk *b);

static relock_status break_any(brk *b)
{
    if (b->c->conn.caps & RELOCK_CAP_EVAL)
        return break_eval(b); /* if_value NULL: whatever the key holds */
    /* Before 2.6 the counters move even when the key was absent: still
     * never back. */
    tx_result t;
    relock_status st = tx_delete(b, 0, &t);
    if (st != RELOCK_OK)
        return st;
    return t.deleted ? notify(b) : absent(b);
}

static relock_status break_eval(brk *b)
{
    char fence[32];
    snprintf(fence, sizeof fence, "%lld", b->if_fence);
    const char *args[] = {b->key, b->fence_key, b->if_value ? b->if_value : "", b->chan, fence};
    int sent = 0;
    redisReply *r = relock__eval(b->c, &sent, RELOCK__SCRIPT_BREAK_IF_EQ, 2, 5, args);
    if (!r)
        return sent ? ambiguous(b) : b->c->err.pub.status;
    relock_status st;
    if (r->type != REDIS_REPLY_INTEGER)
        st = RELOCK__BAD_REPLY(b->c, "compare-and-delete", r);
    else if (r->integer >= 1) /* 1 + the waiters told */
        st = RELOCK_OK;
    else if (r->integer == 0)
        st = absent(b);
    else if (r->integer == -2)
        st = fence_moved(b);
    else
        st = mismatch(b);
    freeReplyObject(r);
    return st;
}

/* One WATCH, GET, MULTI, DEL, EXEC; *beaten when another client changed
 * the key in between. */
static relock_status watch_once(brk *b, int *beaten)
{
    relock_client *c = b->c;
    *beaten = 0;
    if (status_cmd(c, "WATCH", "WATCH %s %s", b->key, b->fence_key) != 0)
        return c->err.pub.status;
    char *found = NULL;
    if (get_value(b, &found) != 0) {
        relock__conn_close(&c->conn);
        return c->err.pub.status;
    }
    int same = found && strcmp(found, b->if_value) == 0;
    int was_absent = found == NULL;
    free(found);
    int moved = 0;
    if (same && b->if_fence > 0) {
        redisReply *r = relock__commandf(c, NULL, "GET %s", b->fence_key);
        if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL)) {
            if (r)
                RELOCK__BAD_REPLY(c, "GET", r);
            freeReplyObject(r);
            relock__conn_close(&c->conn);
            return c->err.pub.status;
        }
        moved = r->type != REDIS_REPLY_STRING || atoll(r->str) != b->if_fence;
        freeReplyObject(r);
    }
    if (!same || moved) {
        if (status_cmd(c, "UNWATCH", "UNWATCH") != 0)
            return c->err.pub.status;
        return was_absent ? absent(b) : moved ? fence_moved(b) : mismatch(b);
    }
    tx_result t;
    relock_status st = tx_delete(b, 0, &t);
    if (st != RELOCK_OK)
        return st;
    *beaten = t.beaten;
    if (t.beaten)
        return RELOCK_OK;
    return t.deleted ? RELOCK_OK : absent(b);
}

static relock_status break_watch(brk *b)
{
    relock_client *c = b->c;
    for (int attempt = 0; attempt < WATCH_TRIES; attempt++) {
        int beaten = 0;
        /* From WATCH to EXEC on one connection, never a new one. */
        relock_status st = relock__txn_begin(c);
        if (st != RELOCK_OK)
            return st;
        st = watch_once(b, &beaten);
        relock__txn_end(c);
        if (st != RELOCK_OK)
            return st;
        if (!beaten)
            return notify(b);
    }
    return RELOCK__FAIL(&c->err, RELOCK_BUSY,
                        "break %s: nothing deleted: the key kept changing", b->name);
}

/* 2.0: no WATCH, no EVAL (see the top of the file). */
static relock_status break_plain(brk *b)
{
    relock_client *c = b->c;
    char *found = NULL;
    if (get_value(b, &found) != 0)
        return c->err.pub.status;
    if (!found)
        return absent(b);
    int same = strcmp(found, b->if_value) == 0;
    free(found);
    if (!same)
        return mismatch(b);
    tx_result t;
    relock_status st = tx_delete(b, 1, &t);
    if (st != RELOCK_OK)
        return st;
    if (t.got && strcmp(t.got, b->if_value) == 0) {
        free(t.got);
        return notify(b);
    }
    if (t.got_absent) /* gone between the GET and the transaction */
        return absent(b);
    if (!t.got)
        return RELOCK__FAIL(&c->err, RELOCK_EPROTO,
                            "break %s: the GET inside the transaction failed; the key was %s",
                            b->name, t.deleted ? "deleted" : "not deleted");
    /* Another value arrived in the window and was deleted: put it back,
     * unless someone has taken the free key since. */
    redisReply *r = relock__commandf(c, NULL, "SETNX %s %s", b->key, t.got);
    free(t.got);
    int restored = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (r)
        freeReplyObject(r);
    relock__err_clear(&c->err);
    return RELOCK__FAIL(&c->err, RELOCK_BUSY,
                        "break %s: the key changed just before the delete (Redis 2.0 has no "
                        "WATCH); %s",
                        b->name,
                        restored ? "the new value was put back"
                                 : "the new value could not be put back: its holder has lost it");
}

relock_status relock_break(relock_client *c, const char *name, const char *if_value)
{
    return relock_break_fenced(c, name, if_value, 0);
}

static relock_status break_fenced(relock_client *c, const char *name, const char *if_value,
                                  long long if_fence, char *key, size_t keylen);

relock_status relock_break_fenced(relock_client *c, const char *name, const char *if_value,
                                  long long if_fence)
{
    char key[RELOCK__PREFIX_MAX + RELOCK__NAME_MAX + 1] = "";
    relock_status st = break_fenced(c, name, if_value, if_fence, key, sizeof key);
    if (st == RELOCK_EFOREIGN && key[0]) {
        char what[RELOCK__NAME_MAX + 8];
        snprintf(what, sizeof what, "break %s", name);
        st = relock__foreign_type(c, what, key);
    }
    return st;
}

static relock_status break_fenced(relock_client *c, const char *name, const char *if_value,
                                  long long if_fence, char *key, size_t keylen)
{
    if (!c)
        return RELOCK_EINVAL;
    relock__err_clear(&c->err);
    relock_status st = check_args(c, name, if_value);
    if (st != RELOCK_OK)
        return st;
    if (if_fence < 0 || (if_fence > 0 && !if_value))
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL,
                            "break %s: a fence to compare needs the value too, and is above 0",
                            name);
    if (c->s.nservers > 1)
        return RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                            "break %s: not with several servers; break it on each server "
                            "with its own URL (quorum values always expire with their TTL)",
                            name);
    brk b;
    memset(&b, 0, sizeof b);
    b.c = c;
    b.name = name;
    b.if_value = if_value;
    b.if_fence = if_fence;
    snprintf(b.key, sizeof b.key, "%s%s", c->s.key_prefix, name);
    snprintf(key, keylen, "%s", b.key);
    if (relock__fence_key(b.key, b.fence_key, sizeof b.fence_key) != 0 ||
        relock__breaks_key(b.key, b.breaks_key, sizeof b.breaks_key) != 0)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "lock name: too long");
    /* The channel of relock__notify_channel(), which reads the key and the
     * client from a lock handle. */
    relock_lock tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.c = c;
    tmp.name = (char *)name;
    tmp.key = b.key;
    relock__notify_channel(&tmp, b.chan, sizeof b.chan);

    st = relock__conn_ensure(c);
    if (st != RELOCK_OK)
        return st;
    if (!if_value)
        return break_any(&b);
    if (c->conn.caps & RELOCK_CAP_EVAL)
        return break_eval(&b);
    if (c->conn.caps & RELOCK_CAP_WATCH)
        return break_watch(&b);
    if (if_fence > 0)
        return RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                            "break %s: a fence cannot be compared on Redis %s: its fence "
                            "counter also counts failed attempts",
                            name, c->conn.version);
    return break_plain(&b);
}
