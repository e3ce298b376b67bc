/*
 * Legacy mode (DESIGN §3): the classic lock for servers of any version.
 *
 *   acquire   SETNX key <expiry>; if busy, GET key; if that timestamp has
 *             passed, take the lock over: by compare-and-set where the
 *             server can (EVAL from 2.6.0, WATCH from 2.2), else by GETSET,
 *             won only if the value GETSET returns has itself passed.
 *   release   compare-and-delete (EVAL or WATCH); on 2.0, GET then DEL, and
 *             only while our own validity remains.
 *   extend    compare-and-set of a new timestamp (the value changes).
 *
 * The stored value is the expiry time in the fleet's unit:
 * now + timeout + expiry_offset.  A legacy reader holds value V until its
 * clock passes V, i.e. until V + 1 units; our clients wait skew_margin_ms
 * longer still.
 *
 * GETSET losers.  A legacy client that lost a takeover race still wrote its
 * own timestamp over ours.  While our validity remains, a different
 * timestamp in the key can only be such a write (a legitimate takeover
 * needs ours to have passed), so release and extend act on the value found
 * and count it in loser_writes.
 *
 * Never sends a command the server lacks: the path (EVAL, WATCH or plain)
 * is chosen from the probed capabilities.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

enum path { VIA_EVAL, VIA_WATCH, VIA_PLAIN };

static enum path path_of(const relock_client *c)
{
    if (c->conn.caps & RELOCK_CAP_EVAL)
        return VIA_EVAL;
    if (c->conn.caps & RELOCK_CAP_WATCH)
        return VIA_WATCH;
    return VIA_PLAIN;
}

static long long unit_ms(const relock_client *c)
{
    return c->s.legacy.unit_ms ? 1 : 1000;
}

/*
 * The fleet's clock in ms: ours, or (legacy.clock = "server") the server's
 * TIME, estimated once per connection as an offset from ours taken at the
 * middle of the round trip.  Scripts never call TIME: before Redis 5 a
 * script may not write after it.
 */
static relock_status clock_ms(relock_client *c, long long *now)
{
    if (!c->s.legacy.clock_server) {
        *now = relock__wall_ms();
        return RELOCK_OK;
    }
    if (relock__conn_ensure(c) != RELOCK_OK)
        return c->err.pub.status;
    if (!c->conn.clock_known) {
        long long t0 = relock__wall_ms();
        redisReply *r = relock__commandf(c, NULL, "TIME");
        long long t1 = relock__wall_ms();
        if (!r)
            return c->err.pub.status;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING) {
            relock_status st = RELOCK__BAD_REPLY(c, "TIME", r);
            freeReplyObject(r);
            return st;
        }
        long long server = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
        freeReplyObject(r);
        c->conn.clock_offset_ms = server - (t0 + t1) / 2;
        c->conn.clock_known = 1;
    }
    *now = relock__wall_ms() + c->conn.clock_offset_ms;
    return RELOCK_OK;
}

/* The value we write for a lease of ttl_ms starting at now (ms). */
static long long new_value(const relock_client *c, long long now, long ttl_ms)
{
    long long u = unit_ms(c);
    long long timeout = (ttl_ms + u - 1) / u;
    return now / u + timeout + c->s.legacy.expiry_offset;
}

/* When a stored timestamp stops holding the lock for our clients (ms). */
static long long ends_at(const relock_client *c, long long ts)
{
    return (ts + 1) * unit_ms(c) + c->s.legacy.skew_margin_ms;
}

/* EXPIRE seconds for gc_expire: a little after the timestamp ends. */
static long long gc_seconds(const relock_client *c, long long now, long long ts)
{
    if (!c->s.legacy.gc_expire)
        return 0;
    long long left = ends_at(c, ts) - now;
    return (left > 0 ? (left + 999) / 1000 : 0) + 1;
}

/*
 * Reads a value found in the key as a timestamp of the configured unit.
 * Anything else is never taken over: RELOCK_EFOREIGN naming the key.
 */
static relock_status read_ts(relock_lock *l, const char *v, size_t len, long long *ts)
{
    relock_client *c = l->c;
    relock__value val;
    relock__classify(v, len, &val);
    if (val.kind != RELOCK_VALUE_TIMESTAMP)
        return RELOCK__FAIL(&c->err, RELOCK_EFOREIGN,
                            "key %s holds \"%.40s\", which is not a legacy timestamp; it is "
                            "never taken over (a modern holder, or another program's key?)",
                            l->key, v);
    int unit = relock__ts_unit_guess(val.ts_digits);
    if (unit != c->s.legacy.unit_ms)
        return RELOCK__FAIL(&c->err, RELOCK_EFOREIGN,
                            "key %s holds %lld (%d digits), which is not a timestamp in %s as "
                            "legacy.clock_unit says (%d digits expected); never taken over: "
                            "does the fleet mix clock units?",
                            l->key, val.ts, val.ts_digits, c->s.legacy.unit_ms ? "ms" : "s",
                            c->s.legacy.unit_ms ? 13 : 10);
    *ts = val.ts;
    return RELOCK_OK;
}

static void set_value(relock_lock *l, long long ts)
{
    snprintf(l->value, sizeof l->value, "%lld", ts);
}

/* Whether a value found in place of ours is a GETSET loser's write. */
static int is_loser_write(relock_lock *l, const char *v, size_t len)
{
    relock_client *c = l->c;
    if (!l->valid_until || relock__mono_ms() >= l->valid_until)
        return 0;
    relock__value val;
    relock__classify(v, len, &val);
    return val.kind == RELOCK_VALUE_TIMESTAMP &&
           relock__ts_unit_guess(val.ts_digits) == c->s.legacy.unit_ms &&
           strcmp(v, l->value) != 0;
}

/* Sends a fixed command and checks the reply type; NULL on failure. */
static redisReply *expect(relock_client *c, int type, const char *what, const char *fmt, ...)
{
    if (relock__conn_ensure(c) != RELOCK_OK)
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c->conn.ctx, fmt, ap);
    va_end(ap);
    if (!r) {
        RELOCK__FAIL(&c->err, RELOCK_EIO, "%s on %s:%d: %s", what, c->conn.srv->host,
                     c->conn.srv->port, c->conn.ctx->errstr[0] ? c->conn.ctx->errstr : "connection lost");
        relock__conn_close(&c->conn);
        return NULL;
    }
    if (type >= 0 && r->type != type) {
        RELOCK__BAD_REPLY(c, what, r);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* WATCH-based compare-and-set (2.2 and 2.4): WATCH, GET, MULTI, SET or
 * DEL (newv NULL), EXEC.  Returns 1 done, 0 the value differed or the
 * transaction was beaten (*found: the value seen, if any), -1 error. */
static int watch_cas(relock_lock *l, const char *expected, const char *newv, long long gc,
                     char *found, size_t foundlen)
{
    relock_client *c = l->c;
    if (found)
        found[0] = '\0';
    redisReply *r = expect(c, REDIS_REPLY_STATUS, "WATCH", "WATCH %s", l->key);
    if (!r)
        return -1;
    freeReplyObject(r);
    r = expect(c, -1, "GET", "GET %s", l->key);
    if (!r)
        return -1;
    if (r->type != REDIS_REPLY_NIL && r->type != REDIS_REPLY_STRING) {
        RELOCK__BAD_REPLY(c, "GET", r);
        freeReplyObject(r);
        return -1;
    }
    int same = r->type == REDIS_REPLY_STRING && strcmp(r->str, expected) == 0;
    if (found && r->type == REDIS_REPLY_STRING)
        snprintf(found, foundlen, "%s", r->str);
    freeReplyObject(r);
    if (!same) {
        r = expect(c, -1, "UNWATCH", "UNWATCH");
        if (!r)
            return -1;
        freeReplyObject(r);
        return 0;
    }
    r = expect(c, REDIS_REPLY_STATUS, "MULTI", "MULTI");
    if (!r)
        return -1;
    freeReplyObject(r);
    r = newv ? expect(c, REDIS_REPLY_STATUS, "SET", "SET %s %s", l->key, newv)
             : expect(c, REDIS_REPLY_STATUS, "DEL", "DEL %s", l->key);
    if (!r)
        return -1;
    freeReplyObject(r);
    if (newv && gc > 0) {
        r = expect(c, REDIS_REPLY_STATUS, "EXPIRE", "EXPIRE %s %lld", l->key, gc);
        if (!r)
            return -1;
        freeReplyObject(r);
    }
    r = expect(c, -1, "EXEC", "EXEC");
    if (!r)
        return -1;
    int done = r->type == REDIS_REPLY_ARRAY;
    int beaten = r->type == REDIS_REPLY_NIL;
    if (!done && !beaten)
        RELOCK__BAD_REPLY(c, "EXEC", r);
    freeReplyObject(r);
    if (!done && !beaten)
        return -1;
    if (beaten && found)
        found[0] = '\0';
    return done;
}

/* EVAL compare-and-set or compare-and-delete (newv NULL).  Returns 1
 * done, 0 mismatch (*found: the value found, "" when absent), -1 error. */
static int eval_cas(relock_lock *l, const char *expected, const char *newv, long long gc,
                    char *found, size_t foundlen, int *sent)
{
    relock_client *c = l->c;
    char gcs[32];
    snprintf(gcs, sizeof gcs, "%lld", gc);
    const char *args[] = {l->key, expected, newv, gcs};
    redisReply *r = newv ? relock__eval(c, sent, RELOCK__SCRIPT_CAS_GET, 1, 4, args)
                         : relock__eval(c, sent, RELOCK__SCRIPT_CAD_GET, 1, 2, args);
    if (found)
        found[0] = '\0';
    if (!r)
        return -1;
    int rc;
    if (r->type == REDIS_REPLY_INTEGER && (r->integer == 1 || r->integer == 0)) {
        rc = (int)r->integer;
    } else if (r->type == REDIS_REPLY_STRING) {
        if (found)
            snprintf(found, foundlen, "%s", r->str);
        rc = 0;
    } else {
        RELOCK__BAD_REPLY(c, newv ? "compare-and-set" : "compare-and-delete", r);
        rc = -1;
    }
    freeReplyObject(r);
    return rc;
}

/* Takes over an expired lock whose value was `old`.  Returns RELOCK_OK
 * when won, RELOCK_BUSY when another client was first. */
static relock_status takeover(relock_lock *l, const char *old, long long now, long long ts)
{
    relock_client *c = l->c;
    long long gc = gc_seconds(c, now, ts);
    int sent = 0, rc;
    switch (path_of(c)) {
    case VIA_EVAL:
        rc = eval_cas(l, old, l->value, gc, NULL, 0, &sent);
        if (rc < 0 && sent)
            return RELOCK__FAIL(&c->err, RELOCK_EAMBIGUOUS,
                                "acquire %s: connection lost during the takeover; whether it "
                                "took effect is unknown",
                                l->name);
        return rc < 0 ? c->err.pub.status : rc ? RELOCK_OK : RELOCK_BUSY;
    case VIA_WATCH:
        rc = watch_cas(l, old, l->value, gc, NULL, 0);
        return rc < 0 ? c->err.pub.status : rc ? RELOCK_OK : RELOCK_BUSY;
    case VIA_PLAIN:
        break;
    }
    /* 2.0: GETSET, the classic way.  We won only if what we replaced had
     * itself expired; otherwise another client won just before us and our
     * write merely moved its expiry a little (it treats that as a GETSET
     * loser's write). */
    redisReply *r = expect(c, -1, "GETSET", "GETSET %s %s", l->key, l->value);
    if (!r)
        return c->err.pub.status;
    relock_status st = RELOCK_BUSY;
    if (r->type == REDIS_REPLY_NIL) {
        st = RELOCK_OK; /* the key vanished meanwhile: we set it */
    } else if (r->type == REDIS_REPLY_STRING) {
        relock__value val;
        relock__classify(r->str, r->len, &val);
        if (val.kind == RELOCK_VALUE_TIMESTAMP && now >= ends_at(c, val.ts))
            st = RELOCK_OK;
    } else {
        st = RELOCK__BAD_REPLY(c, "GETSET", r);
    }
    freeReplyObject(r);
    return st;
}

/* After a lost reply to SETNX: our value is not unique (timestamps repeat),
 * so finding it in the key proves nothing; report the ambiguity. */
static relock_status resolve_ambiguous_setnx(relock_lock *l)
{
    relock_client *c = l->c;
    redisReply *r = relock__commandf(c, NULL, "GET %s", l->key);
    if (!r)
        return RELOCK__FAIL(&c->err, RELOCK_EAMBIGUOUS,
                            "acquire %s: connection lost after SETNX and the key cannot be read "
                            "back",
                            l->name);
    int same = r->type == REDIS_REPLY_STRING && strcmp(r->str, l->value) == 0;
    freeReplyObject(r);
    if (!same)
        return c->err.pub.status; /* SETNX did not take effect: keep its I/O error */
    return RELOCK__FAIL(&c->err, RELOCK_EAMBIGUOUS,
                        "acquire %s: connection lost after SETNX; the key holds a value equal "
                        "to ours, which may be ours or another holder's: not claimed",
                        l->name);
}

static relock_status legacy_attempt(relock_lock *l, long *hint_ms)
{
    relock_client *c = l->c;
    long long now;
    uint64_t start = relock__mono_ms();
    relock_status st = clock_ms(c, &now);
    if (st != RELOCK_OK)
        return st;
    long long ts = new_value(c, now, l->ttl_ms);
    set_value(l, ts);
    int sent = 0;
    const char *argv[] = {"SETNX", l->key, l->value};
    size_t argvlen[] = {5, strlen(l->key), strlen(l->value)};
    redisReply *r = relock__command(c, &sent, 3, argv, argvlen);
    if (!r)
        return sent ? resolve_ambiguous_setnx(l) : c->err.pub.status;
    if (r->type != REDIS_REPLY_INTEGER) {
        st = RELOCK__BAD_REPLY(c, "SETNX", r);
        freeReplyObject(r);
        return st;
    }
    long long won = r->integer;
    freeReplyObject(r);
    if (won) {
        long long gc = gc_seconds(c, now, ts);
        if (gc > 0) {
            /* Best effort: without it the key is just a plain legacy key. */
            r = relock__commandf(c, NULL, "EXPIRE %s %lld", l->key, gc);
            if (r)
                freeReplyObject(r);
            relock__err_clear(&c->err);
        }
        l->valid_until = relock__valid_until(start, l->ttl_ms);
        return RELOCK_OK;
    }

    r = relock__commandf(c, NULL, "GET %s", l->key);
    if (!r)
        return c->err.pub.status;
    if (r->type == REDIS_REPLY_NIL) {
        freeReplyObject(r);
        *hint_ms = 0; /* released meanwhile: try again at once */
        return RELOCK_BUSY;
    }
    if (r->type != REDIS_REPLY_STRING) {
        st = RELOCK__BAD_REPLY(c, "GET", r);
        freeReplyObject(r);
        return st;
    }
    char old[RELOCK__VALUE_MAX];
    long long held = 0;
    st = read_ts(l, r->str, r->len, &held);
    snprintf(old, sizeof old, "%s", r->str);
    freeReplyObject(r);
    if (st != RELOCK_OK)
        return st;
    long long end = ends_at(c, held);
    if (now < end) {
        *hint_ms = end - now > 0x7fffffffLL ? 0x7fffffffL : (long)(end - now);
        return RELOCK_BUSY;
    }
    st = takeover(l, old, now, held);
    if (st == RELOCK_OK) {
        l->valid_until = relock__valid_until(start, l->ttl_ms);
        return RELOCK_OK;
    }
    if (st == RELOCK_BUSY)
        *hint_ms = 0; /* someone else took it over; look again soon */
    return st;
}

static relock_status lost(relock_lock *l, const char *op, const char *found)
{
    relock_client *c = l->c;
    if (!found || !*found)
        return RELOCK__FAIL(&c->err, RELOCK_LOST, "%s %s: lock lost: the key was deleted", op,
                            l->name);
    return RELOCK__FAIL(&c->err, RELOCK_LOST, "%s %s: lock lost: the key now holds %.40s", op,
                        l->name, found);
}

static relock_status ambiguous(relock_lock *l, const char *op)
{
    return RELOCK__FAIL(&l->c->err, RELOCK_EAMBIGUOUS,
                        "%s %s: connection lost after the request was sent; the lock's state "
                        "is unknown",
                        op, l->name);
}

/*
 * Compare-and-set (newv) or compare-and-delete (newv NULL) of our value,
 * following one GETSET loser's write if one is found while our validity
 * remains.  Only for servers with EVAL or WATCH.
 */
static relock_status atomic_update(relock_lock *l, const char *op, const char *newv, long long gc)
{
    relock_client *c = l->c;
    char expected[RELOCK__VALUE_MAX];
    snprintf(expected, sizeof expected, "%s", l->value);
    /* Bounded: a WATCH conflict is retried a few times, and a loser's
     * write is followed once. */
    for (int round = 0; round < 4; round++) {
        char found[RELOCK__VALUE_MAX];
        int sent = 0, rc;
        if (path_of(c) == VIA_EVAL)
            rc = eval_cas(l, expected, newv, gc, found, sizeof found, &sent);
        else {
            rc = watch_cas(l, expected, newv, gc, found, sizeof found);
            sent = 1; /* EXEC may have been sent */
        }
        if (rc < 0) {
            if (!sent || c->err.pub.status != RELOCK_EIO)
                return c->err.pub.status;
            relock__err_clear(&c->err); /* the I/O error is the lesser news */
            return ambiguous(l, op);
        }
        if (rc == 1) {
            if (strcmp(expected, l->value) != 0)
                l->loser_writes++;
            return RELOCK_OK;
        }
        if (!found[0] && path_of(c) == VIA_WATCH && round < 3) {
            /* EXEC was beaten or the key is absent: look again. */
            redisReply *r = relock__commandf(c, NULL, "EXISTS %s", l->key);
            int exists = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
            if (r)
                freeReplyObject(r);
            if (exists)
                continue;
        }
        if (found[0] && strcmp(expected, l->value) == 0 && is_loser_write(l, found, strlen(found))) {
            snprintf(expected, sizeof expected, "%s", found);
            continue;
        }
        return lost(l, op, found);
    }
    return RELOCK__FAIL(&c->err, RELOCK_LOST, "%s %s: lock lost: the key kept changing", op,
                        l->name);
}

static relock_status legacy_release(relock_lock *l)
{
    relock_client *c = l->c;
    if (path_of(c) != VIA_PLAIN)
        return atomic_update(l, "release", NULL, 0);
    /* 2.0: no WATCH, no EVAL.  GET then DEL, only while our validity
     * remains: then no other client can have taken the lock over between
     * the two (short of clock skew beyond skew_margin_ms, or a pause of
     * this process between them: the window docs/legacy.md describes). */
    redisReply *r = relock__commandf(c, NULL, "GET %s", l->key);
    if (!r)
        return c->err.pub.status;
    if (r->type != REDIS_REPLY_NIL && r->type != REDIS_REPLY_STRING) {
        relock_status st = RELOCK__BAD_REPLY(c, "GET", r);
        freeReplyObject(r);
        return st;
    }
    char found[RELOCK__VALUE_MAX] = "";
    if (r->type == REDIS_REPLY_STRING)
        snprintf(found, sizeof found, "%s", r->str);
    freeReplyObject(r);
    int ours = strcmp(found, l->value) == 0;
    int loser = !ours && found[0] && is_loser_write(l, found, strlen(found));
    if (!ours && !loser)
        return lost(l, "release", found);
    if (!l->valid_until || relock__mono_ms() >= l->valid_until)
        return RELOCK__FAIL(&c->err, RELOCK_LOST,
                            "release %s: lock lost: it expired; not deleted, since without "
                            "WATCH a delete could hit a new holder",
                            l->name);
    int sent = 0;
    r = relock__commandf(c, &sent, "DEL %s", l->key);
    if (!r) {
        if (!sent)
            return c->err.pub.status;
        relock__err_clear(&c->err);
        return ambiguous(l, "release");
    }
    freeReplyObject(r);
    if (loser)
        l->loser_writes++;
    return RELOCK_OK;
}

static relock_status legacy_extend(relock_lock *l, long ttl_ms)
{
    relock_client *c = l->c;
    long long now;
    uint64_t start = relock__mono_ms();
    relock_status st = clock_ms(c, &now);
    if (st != RELOCK_OK)
        return st;
    long long ts = new_value(c, now, ttl_ms);
    char newv[RELOCK__VALUE_MAX];
    snprintf(newv, sizeof newv, "%lld", ts);
    if (path_of(c) != VIA_PLAIN) {
        st = atomic_update(l, "extend", newv, gc_seconds(c, now, ts));
    } else {
        /* 2.0: GETSET while our validity remains; the old value it returns
         * must be ours (or a loser's write), else we have just written over
         * a new holder: say so. */
        if (!l->valid_until || relock__mono_ms() >= l->valid_until)
            return RELOCK__FAIL(&c->err, RELOCK_LOST,
                                "extend %s: lock lost: it expired (without WATCH it cannot be "
                                "extended safely after that)",
                                l->name);
        int sent = 0;
        redisReply *r = relock__commandf(c, &sent, "GETSET %s %s", l->key, newv);
        if (!r) {
            if (!sent)
                return c->err.pub.status;
            relock__err_clear(&c->err);
            return ambiguous(l, "extend");
        }
        char found[RELOCK__VALUE_MAX] = "";
        if (r->type == REDIS_REPLY_STRING)
            snprintf(found, sizeof found, "%s", r->str);
        freeReplyObject(r);
        if (strcmp(found, l->value) == 0)
            st = RELOCK_OK;
        else if (found[0] && is_loser_write(l, found, strlen(found))) {
            st = RELOCK_OK;
            l->loser_writes++;
        } else
            st = RELOCK__FAIL(&c->err, RELOCK_LOST,
                              "extend %s: lock lost: the key held %.40s, now overwritten; the "
                              "holder of that value may lose its lock",
                              l->name, found[0] ? found : "nothing");
    }
    if (st == RELOCK_OK) {
        snprintf(l->value, sizeof l->value, "%s", newv);
        l->ttl_ms = ttl_ms;
        l->valid_until = relock__valid_until(start, ttl_ms);
    }
    return st;
}

/* A lock adopted from its value: the timestamp says how long it is valid. */
static void legacy_adopt(relock_lock *l)
{
    relock_client *c = l->c;
    relock__value val;
    relock__classify(l->value, strlen(l->value), &val);
    if (val.kind != RELOCK_VALUE_TIMESTAMP)
        return;
    long long now;
    if (clock_ms(c, &now) != RELOCK_OK) {
        relock__err_clear(&c->err);
        return;
    }
    /* Valid until legacy readers see it pass, less the drift allowance. */
    long long left = val.ts * unit_ms(c) - now - relock__drift_ms(l->ttl_ms);
    if (left > 0)
        l->valid_until = relock__mono_ms() + (uint64_t)left;
}

relock_status relock__legacy_check(relock_client *c)
{
    const relock__conn *conn = &c->conn;
    if (c->s.legacy.gc_expire && !(conn->caps & RELOCK_CAP_WATCH))
        return RELOCK__FAIL(&c->err, RELOCK_ECONFIG,
                            "legacy.gc_expire cannot be used with Redis %s: before 2.2 a key "
                            "with an expiry counts as absent for SETNX, so a second client "
                            "would win a held lock",
                            conn->version);
    if (c->s.legacy.clock_server && !(conn->caps & RELOCK_CAP_TIME))
        return RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                            "legacy.clock = \"server\" needs the TIME command (Redis 2.6.0), "
                            "and server %s lacks it",
                            conn->version);
    return RELOCK_OK;
}

const relock__algo relock__algo_legacy = {
    "legacy",
    legacy_attempt,
    legacy_release,
    legacy_extend,
    legacy_adopt,
};
