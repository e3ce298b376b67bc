/*
 * The timestamp algorithms (DESIGN §3): legacy mode, and bridge mode, which
 * writes the same values plus a TTL.
 *
 *   acquire   SETNX key <expiry> (with the fence increment and, in bridge
 *             mode, the TTL in the same step); if busy, look at the value;
 *             if that timestamp has passed, take the lock over: by
 *             compare-and-set where the server can (EVAL from 2.6.0, WATCH
 *             from 2.2), else by GETSET, won only if the value GETSET
 *             returns has itself passed.
 *   release   compare-and-delete of our value and fence (EVAL or WATCH);
 *             on 2.0, GET then DEL, and only while our validity remains.
 *   extend    compare-and-set of a new timestamp (the value changes).
 *
 * The stored value is the expiry time in the fleet's unit:
 * now + timeout + expiry_offset.  A legacy reader holds value V until its
 * clock passes V, i.e. until V + 1 units; our clients wait skew_margin_ms
 * longer still.  Bridge values also carry a TTL ending half a unit after V
 * (exactly V in ms), inside that window, so the server cleans up after dead
 * holders while legacy readers still see the lock as held.  The validity
 * reported is the first of those ends and the ttl, less drift: the lease
 * arithmetic is src/lease.c.
 *
 * Ownership.  Timestamps repeat (two holders in one second write the same
 * value), so release and extend also compare the fence counter of DESIGN
 * §4 (nobody acquired since us) and, in bridge mode, require the TTL (a
 * legacy writer leaves none).
 *
 * GETSET losers.  A legacy client that lost a takeover race still wrote its
 * own timestamp over ours (clearing any TTL).  While our validity remains,
 * release and extend may act on a different timestamp found in the key,
 * but only where the fence proves that nobody acquired since: a TTL-less
 * timestamp is also what anyone's SETNX writes after the key was deleted
 * (`relock break`, a classic client's DEL).  Every relock acquisition and
 * every break increments the fence, so after either the compare fails and
 * the holder reports LOST, writing nothing.  On 2.0 the fence also counts
 * failed attempts and proves nothing: a different value there is LOST, and
 * so is our own value once the lock's break counter (kept on 2.0 only, see
 * src/break.c) has moved since we won: the same timestamp written again by
 * whoever took the broken lock in the same unit.
 * What remains: a classic client's DEL of a key it no longer owns, followed
 * by a classic SETNX, moves no fence, and looks like a loser's write
 * (docs/legacy.md).
 *
 * Never sends a command the server lacks: the path (EVAL, WATCH or plain)
 * is chosen from the probed capabilities; bridge mode needs EVAL.
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

static int is_bridge(const relock_client *c)
{
    return c->mode == RELOCK_MODE_BRIDGE;
}

static long long unit_ms(const relock_client *c)
{
    return c->s.legacy.unit_ms ? 1 : 1000;
}

/* The lease settings of this client (lease.h). */
static relock__lease_cfg lease_cfg(const relock_client *c)
{
    relock__lease_cfg cfg = {unit_ms(c), c->s.legacy.expiry_offset, c->s.legacy.skew_margin_ms,
                             is_bridge(c), c->s.legacy.gc_expire};
    return cfg;
}

/* What to write for a lease of ttl_ms starting at fleet time now (ms). */
static void plan(const relock_client *c, long long now, long ttl_ms, relock__lease *out)
{
    relock__lease_cfg cfg = lease_cfg(c);
    relock__lease_plan(&cfg, now, ttl_ms, out);
}

/* The value to store for timestamp ts: the timestamp alone, or in bridge
 * mode with bridge.value_suffix ":token", which makes every value unique
 * for legacy parsers that read only the leading integer. */
static int format_value(const relock_client *c, long long ts, char *out, size_t len)
{
    if (!is_bridge(c) || !c->s.bridge.value_suffix) {
        snprintf(out, len, "%lld", ts);
        return 0;
    }
    char tok[33];
    if (relock__token(tok) != 0)
        return -1;
    snprintf(out, len, "%lld:%s", ts, tok);
    return 0;
}

/* When a stored timestamp stops holding the lock for our clients (ms). */
static long long ends_at(const relock_client *c, long long ts)
{
    relock__lease_cfg cfg = lease_cfg(c);
    return relock__lease_ours_end(&cfg, ts);
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

/* Whether this handle won its lock itself and its validity remains: then
 * nobody can have taken the lock over legitimately (DESIGN §3). */
static int holds_validity(const relock_lock *l)
{
    return l->acquired && l->valid_until && relock__mono_ms() < l->valid_until;
}

/* Whether a value found in place of ours may be a GETSET loser's write,
 * to be followed under the fence check (see the top of the file). */
static int is_loser_write(relock_lock *l, const char *v)
{
    relock_client *c = l->c;
    /* Only a handle that won the lock itself knows its validity for sure;
     * an adopted one could be anybody's claim.  Without WATCH or EVAL
     * (2.0) the fence cannot tell a loser from a new holder: never. */
    if (!holds_validity(l) || !(c->conn.caps & (RELOCK_CAP_EVAL | RELOCK_CAP_WATCH)))
        return 0;
    relock__value val;
    relock__classify(v, strlen(v), &val);
    return val.kind == RELOCK_VALUE_TIMESTAMP &&
           relock__ts_unit_guess(val.ts_digits) == c->s.legacy.unit_ms &&
           strcmp(v, l->value) != 0;
}

/* Sends one command and checks the reply type (-1: any); NULL on failure,
 * with the error recorded. */
static redisReply *expect(relock_client *c, int type, const char *what, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = relock__vcommandf(c, NULL, fmt, ap);
    va_end(ap);
    if (!r)
        return NULL;
    if (type >= 0 && r->type != type) {
        RELOCK__BAD_REPLY(c, what, r);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* After a failure inside MULTI (or after WATCH), the connection's state on
 * the server is not what the next command expects: drop it, which discards
 * the transaction and the watches.  Returns -1 for the caller to pass on. */
static int abandon_multi(relock_client *c)
{
    relock__conn_close(&c->conn);
    return -1;
}

/* Reads an integer element of a script's array reply. */
static long long elem_int(const redisReply *r, size_t i)
{
    if (i < r->elements && r->element[i]->type == REDIS_REPLY_INTEGER)
        return r->element[i]->integer;
    return 0;
}

/* The outcome of a compare-and-set. */
typedef struct cas_result {
    int done;                      /* 1 set/deleted, 0 not */
    long long fence;               /* the fence after it, when incremented */
    char found[RELOCK__VALUE_MAX]; /* on a mismatch: the value found, "" absent */
} cas_result;

/* A compare-and-set request (DESIGN §3 Ownership). */
typedef struct cas_req {
    const char *expected;   /* the value that must be in the key */
    long long fence;        /* the fence that must be current; 0 unchecked */
    int require_ttl;        /* the key must carry a TTL (bridge values) */
    const char *newv;       /* the value to write; NULL deletes */
    long long px, gc;       /* PEXPIRE ms / EXPIRE s after writing, or 0 */
    int incr;               /* increment the fence (acquisitions only) */
} cas_req;

/* Compare-and-set by script.  Returns 0, or -1 on error (*sent: the
 * request may have reached the server). */
static int cas_eval(relock_lock *l, const cas_req *q, cas_result *out, int *sent)
{
    relock_client *c = l->c;
    char fence[32], px[32], gc[32], chan[RELOCK__KEY_MAX];
    snprintf(fence, sizeof fence, "%lld", q->fence);
    snprintf(px, sizeof px, "%lld", q->px);
    snprintf(gc, sizeof gc, "%lld", q->gc);
    relock__notify_channel(l, chan, sizeof chan);
    const char *args[] = {l->key,     l->fence_key, q->expected, fence, q->require_ttl ? "1" : "0",
                          q->newv ? q->newv : "", px, gc, q->incr ? "1" : "0", chan};
    redisReply *r = relock__eval(c, sent, RELOCK__SCRIPT_CAS, 2, 10, args);
    if (!r)
        return -1;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1) {
        RELOCK__BAD_REPLY(c, q->newv ? "compare-and-set" : "compare-and-delete", r);
        freeReplyObject(r);
        return -1;
    }
    out->done = elem_int(r, 0) == 1;
    out->fence = out->done ? elem_int(r, 1) : 0;
    out->found[0] = '\0';
    if (!out->done && r->elements > 1 && r->element[1]->type == REDIS_REPLY_STRING)
        snprintf(out->found, sizeof out->found, "%s", r->element[1]->str);
    freeReplyObject(r);
    return 0;
}

/*
 * Compare-and-set by WATCH (2.2 and 2.4): WATCH the key (and the fence),
 * read, MULTI, write, EXEC.  A transaction beaten by another client comes
 * back as done = 0 with found = "" and *beaten set.
 */
static int cas_watch_in(relock_lock *l, const cas_req *q, cas_result *out, int *beaten,
                        int *sent);

static int cas_watch(relock_lock *l, const cas_req *q, cas_result *out, int *beaten, int *sent)
{
    relock_client *c = l->c;
    *beaten = 0;
    *sent = 0;
    out->done = 0;
    out->fence = 0;
    out->found[0] = '\0';
    /* From WATCH to EXEC on one connection: a new one would carry no
     * WATCH, and the write would run unconditionally (DESIGN §9). */
    if (relock__txn_begin(c) != RELOCK_OK)
        return -1;
    int rc = cas_watch_in(l, q, out, beaten, sent);
    if (rc != 0)
        relock__conn_close(&c->conn); /* drops what the server still holds of it */
    relock__txn_end(c);
    return rc;
}

static int cas_watch_in(relock_lock *l, const cas_req *q, cas_result *out, int *beaten,
                        int *sent)
{
    relock_client *c = l->c;
    int check_fence = q->fence > 0;
    redisReply *r =
        check_fence || q->incr
            ? expect(c, REDIS_REPLY_STATUS, "WATCH", "WATCH %s %s", l->key, l->fence_key)
            : expect(c, REDIS_REPLY_STATUS, "WATCH", "WATCH %s", l->key);
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
    int same = q->expected ? (r->type == REDIS_REPLY_STRING && strcmp(r->str, q->expected) == 0)
                           : r->type == REDIS_REPLY_NIL;
    if (r->type == REDIS_REPLY_STRING)
        snprintf(out->found, sizeof out->found, "%s", r->str);
    freeReplyObject(r);
    if (same && check_fence) {
        r = expect(c, -1, "GET", "GET %s", l->fence_key);
        if (!r)
            return -1;
        if (r->type != REDIS_REPLY_NIL && r->type != REDIS_REPLY_STRING) {
            RELOCK__BAD_REPLY(c, "GET", r); /* an error is not a mismatch */
            freeReplyObject(r);
            return -1;
        }
        same = r->type == REDIS_REPLY_STRING && atoll(r->str) == q->fence;
        freeReplyObject(r);
    }
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
    r = q->newv ? expect(c, REDIS_REPLY_STATUS, "SET", "SET %s %s", l->key, q->newv)
                : expect(c, REDIS_REPLY_STATUS, "DEL", "DEL %s", l->key);
    if (r && q->newv && q->gc > 0) {
        freeReplyObject(r);
        r = expect(c, REDIS_REPLY_STATUS, "EXPIRE", "EXPIRE %s %lld", l->key, q->gc);
    }
    if (r && q->incr) {
        freeReplyObject(r);
        r = expect(c, REDIS_REPLY_STATUS, "INCR", "INCR %s", l->fence_key);
    }
    char chan[RELOCK__KEY_MAX];
    if (r && !q->newv && relock__notify_channel(l, chan, sizeof chan)) {
        freeReplyObject(r);
        r = expect(c, REDIS_REPLY_STATUS, "PUBLISH", "PUBLISH %s 1", chan);
    }
    if (!r)
        return abandon_multi(c);
    freeReplyObject(r);
    /* A lost reply to EXEC leaves the outcome unknown; a connection found
     * lost before EXEC was sent does not (the server discarded it all). */
    r = relock__commandf(c, sent, "EXEC");
    if (!r)
        return -1;
    if (r->type == REDIS_REPLY_NIL) {
        *beaten = 1;
        out->found[0] = '\0';
    } else if (r->type == REDIS_REPLY_ARRAY) {
        out->done = 1;
        if (q->incr)
            out->fence = elem_int(r, r->elements - 1);
    } else {
        RELOCK__BAD_REPLY(c, "EXEC", r);
        freeReplyObject(r);
        return -1;
    }
    freeReplyObject(r);
    return 0;
}

static relock_status ambiguous(relock_lock *l, const char *op)
{
    relock__err_clear(&l->c->err); /* the I/O error is the lesser news */
    return RELOCK__FAIL(&l->c->err, RELOCK_EAMBIGUOUS,
                        "%s %s: connection lost after the request was sent; the lock's state "
                        "is unknown",
                        op, l->name);
}

/* ------------------------------------------------------------ acquire */

static redisReply *write_with_fence_in(relock_lock *l, const char *cmd, int *sent);

/*
 * 2.0: MULTI, `cmd key value` (SETNX or GETSET), INCR of the fence, GET of
 * the break counter, EXEC.  Returns EXEC's three-element reply, or NULL
 * with the error recorded; *sent tells whether EXEC may have reached the
 * server.
 */
static redisReply *write_with_fence(relock_lock *l, const char *cmd, int *sent)
{
    relock_client *c = l->c;
    *sent = 0;
    /* MULTI to EXEC on one connection: a new one would run the queued
     * SETNX or GETSET at once, without its fence (DESIGN §9). */
    if (relock__txn_begin(c) != RELOCK_OK)
        return NULL;
    redisReply *r = write_with_fence_in(l, cmd, sent);
    relock__txn_end(c);
    return r;
}

static redisReply *write_with_fence_in(relock_lock *l, const char *cmd, int *sent)
{
    relock_client *c = l->c;
    redisReply *r = expect(c, REDIS_REPLY_STATUS, "MULTI", "MULTI");
    if (r) {
        freeReplyObject(r);
        r = expect(c, REDIS_REPLY_STATUS, cmd, "%s %s %s", cmd, l->key, l->value);
    }
    if (r) {
        freeReplyObject(r);
        r = expect(c, REDIS_REPLY_STATUS, "INCR", "INCR %s", l->fence_key);
    }
    char bkey[RELOCK__KEY_MAX];
    if (r && relock__breaks_key(l->key, bkey, sizeof bkey) == 0) {
        freeReplyObject(r);
        r = expect(c, REDIS_REPLY_STATUS, "GET", "GET %s", bkey);
    }
    if (!r) {
        abandon_multi(c);
        return NULL;
    }
    freeReplyObject(r);
    r = relock__commandf(c, sent, "EXEC");
    if (r && (r->type != REDIS_REPLY_ARRAY || r->elements != 3)) {
        RELOCK__BAD_REPLY(c, "EXEC", r);
        freeReplyObject(r);
        *sent = 0;
        return NULL;
    }
    return r;
}

/* A counter as GET returns it (nil: 0); -1 for anything else. */
static long long counter_of(const redisReply *r)
{
    if (r->type == REDIS_REPLY_NIL)
        return 0;
    if (r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > 18 ||
        strspn(r->str, "0123456789") != r->len)
        return -1;
    return atoll(r->str);
}

/* 2.0: records the break counter read in the transaction that won. */
static void note_breaks(relock_lock *l, const redisReply *exec)
{
    long long n = exec->elements > 2 ? counter_of(exec->element[2]) : -1;
    l->breaks = n;
    l->breaks_known = n >= 0;
}

/* Wins the lock with lease ls, written at or after monotonic time start:
 * records the fence and the validity the value and TTL written allow. */
static relock_status won(relock_lock *l, uint64_t start, const relock__lease *ls, long long fence)
{
    l->acquired = 1;
    l->fence = fence;
    l->valid_until = start + (uint64_t)ls->valid_ms;
    return RELOCK_OK;
}

/* Takes over an expired holder whose value was `old` with our value (lease
 * ls, planned at fleet time now): RELOCK_OK when won, RELOCK_BUSY when
 * another client was first. */
static relock_status takeover(relock_lock *l, uint64_t start, const char *old, long long now,
                              const relock__lease *ls)
{
    relock_client *c = l->c;
    cas_req q = {old, 0, 0, l->value, ls->px_ms, ls->gc_s, 1};
    cas_result res;
    int sent = 0, beaten = 0;
    switch (path_of(c)) {
    case VIA_EVAL:
        if (cas_eval(l, &q, &res, &sent) != 0)
            return sent && c->err.pub.status == RELOCK_EIO ? ambiguous(l, "acquire")
                                                           : c->err.pub.status;
        return res.done ? won(l, start, ls, res.fence) : RELOCK_BUSY;
    case VIA_WATCH:
        if (cas_watch(l, &q, &res, &beaten, &sent) != 0)
            return sent && c->err.pub.status == RELOCK_EIO ? ambiguous(l, "acquire")
                                                           : c->err.pub.status;
        return res.done ? won(l, start, ls, res.fence) : RELOCK_BUSY;
    case VIA_PLAIN:
        break;
    }
    /*
     * 2.0: GETSET, the classic way, with the fence increment in the same
     * MULTI (so it counts failed attempts too: still monotonic).  We won
     * only if what we replaced had itself expired; otherwise another client
     * won just before us and our write merely moved its expiry a little
     * (it treats that as a GETSET loser's write).
     */
    redisReply *r = write_with_fence(l, "GETSET", &sent);
    if (!r)
        return sent ? ambiguous(l, "acquire") : c->err.pub.status;
    relock_status st = RELOCK_BUSY;
    const redisReply *old_r = r->elements > 0 ? r->element[0] : NULL;
    if (old_r && old_r->type == REDIS_REPLY_NIL) {
        st = RELOCK_OK; /* the key vanished meanwhile: we set it */
    } else if (old_r && old_r->type == REDIS_REPLY_STRING) {
        /* Won only over a timestamp of our unit that has passed: one of
         * the other unit (written since our GET) proves nothing. */
        relock__value val;
        relock__classify(old_r->str, old_r->len, &val);
        if (val.kind == RELOCK_VALUE_TIMESTAMP &&
            relock__ts_unit_guess(val.ts_digits) == c->s.legacy.unit_ms &&
            now >= ends_at(c, val.ts))
            st = RELOCK_OK;
    }
    long long fence = elem_int(r, 1);
    if (st == RELOCK_OK)
        note_breaks(l, r);
    freeReplyObject(r);
    return st == RELOCK_OK ? won(l, start, ls, fence) : st;
}

/* The lock is held with value `found` (NULL: gone meanwhile) and TTL pttl
 * (-1 none, -3 unknown): wait, or take it over if it has expired. */
static relock_status held_by(relock_lock *l, uint64_t start, long long now,
                             const relock__lease *ls, const char *found, long long pttl,
                             long *hint_ms)
{
    relock_client *c = l->c;
    if (!found) {
        *hint_ms = 0; /* released meanwhile: try again at once */
        return RELOCK_BUSY;
    }
    relock__value val;
    relock__classify(found, strlen(found), &val);
    /* PTTL 0: the key ends within the millisecond (a script sees the
     * time frozen at its start): it has a TTL all the same. */
    if (is_bridge(c) && val.kind == RELOCK_VALUE_TOKEN && pttl >= 0) {
        /* A modern holder (a fleet rolling back), or another library's
         * token: respect its TTL. */
        *hint_ms = pttl > 0x7fffffffLL ? 0x7fffffffL : (long)pttl;
        return RELOCK_BUSY;
    }
    long long ts = 0;
    relock_status st = read_ts(l, found, strlen(found), &ts);
    if (st != RELOCK_OK && is_bridge(c) && pttl >= 0) {
        /* Another program's lock with a TTL (SET NX PX, SETEX, SETNX +
         * EXPIRE): the server ends it, so wait as modern mode does
         * (docs/migration.md, coexistence). */
        relock__err_clear(&c->err);
        *hint_ms = pttl > 0x7fffffffLL ? 0x7fffffffL : (long)pttl;
        return RELOCK_BUSY;
    }
    if (st != RELOCK_OK)
        return st;
    long long end = ends_at(c, ts);
    long long wait = end - now;
    if (is_bridge(c) && pttl > 0 && pttl < wait)
        wait = pttl; /* a bridge holder: the server ends it with its TTL */
    if (wait > 0) {
        /* Legacy mode cannot tell (no PTTL before 2.6); bridge can. */
        l->legacy_holder = !is_bridge(c) || pttl == -1;
        if (is_bridge(c) && pttl == -1)
            relock__note_legacy_writer(c); /* a live value without TTL */
        *hint_ms = wait > 0x7fffffffLL ? 0x7fffffffL : (long)wait;
        return RELOCK_BUSY;
    }
    st = takeover(l, start, found, now, ls);
    if (st == RELOCK_BUSY)
        *hint_ms = 0; /* someone else took it over; look again soon */
    return st;
}

/* After a lost reply to SETNX: timestamps are not unique, so finding our
 * value in the key proves nothing; report the ambiguity. */
static relock_status resolve_ambiguous_setnx(relock_lock *l)
{
    relock_client *c = l->c;
    redisReply *r = relock__commandf(c, NULL, "GET %s", l->key);
    if (!r)
        return ambiguous(l, "acquire");
    int same = r->type == REDIS_REPLY_STRING && strcmp(r->str, l->value) == 0;
    freeReplyObject(r);
    if (!same)
        return c->err.pub.status; /* SETNX did not take effect: keep its I/O error */
    relock__err_clear(&c->err);
    return RELOCK__FAIL(&c->err, RELOCK_EAMBIGUOUS,
                        "acquire %s: connection lost after SETNX; the key holds a value equal "
                        "to ours, which may be ours or another holder's: not claimed",
                        l->name);
}

static relock_status attempt_eval(relock_lock *l, uint64_t start, long long now,
                                  const relock__lease *ls, long *hint_ms)
{
    relock_client *c = l->c;
    char px[32], gc[32];
    snprintf(px, sizeof px, "%lld", ls->px_ms);
    snprintf(gc, sizeof gc, "%lld", ls->gc_s);
    const char *args[] = {l->key, l->fence_key, l->value, px, gc, "1"};
    int sent = 0;
    redisReply *r = relock__eval(c, &sent, RELOCK__SCRIPT_TS_ACQUIRE, 2, 6, args);
    if (!r)
        return sent ? resolve_ambiguous_setnx(l) : c->err.pub.status;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2) {
        relock_status st = RELOCK__BAD_REPLY(c, "SETNX script", r);
        freeReplyObject(r);
        return st;
    }
    relock_status st;
    if (elem_int(r, 0) == 1) {
        st = won(l, start, ls, elem_int(r, 1));
    } else {
        char found[RELOCK__VALUE_MAX];
        int has = r->elements > 2 && r->element[2]->type == REDIS_REPLY_STRING;
        if (has)
            snprintf(found, sizeof found, "%s", r->element[2]->str);
        st = held_by(l, start, now, ls, has ? found : NULL, elem_int(r, 1), hint_ms);
    }
    freeReplyObject(r);
    return st;
}

static relock_status attempt_watch(relock_lock *l, uint64_t start, long long now,
                                   const relock__lease *ls, long *hint_ms)
{
    relock_client *c = l->c;
    /* SETNX under WATCH: set only if absent, with the fence in the same
     * transaction, so the fence counts acquisitions only. */
    cas_req q = {NULL, 0, 0, l->value, 0, ls->gc_s, 1};
    cas_result res;
    int beaten = 0, sent = 0;
    if (cas_watch(l, &q, &res, &beaten, &sent) != 0)
        return sent && c->err.pub.status == RELOCK_EIO ? ambiguous(l, "acquire")
                                                       : c->err.pub.status;
    if (res.done)
        return won(l, start, ls, res.fence);
    if (beaten) {
        *hint_ms = 0;
        return RELOCK_BUSY;
    }
    return held_by(l, start, now, ls, res.found[0] ? res.found : NULL, -3, hint_ms);
}

static relock_status attempt_plain(relock_lock *l, uint64_t start, long long now,
                                   const relock__lease *ls, long *hint_ms)
{
    relock_client *c = l->c;
    int sent = 0;
    /* 2.0: the fence rides in the MULTI with SETNX (DESIGN §4); it also
     * counts failed attempts, which keeps it monotonic. */
    redisReply *r = write_with_fence(l, "SETNX", &sent);
    if (!r)
        return sent ? resolve_ambiguous_setnx(l) : c->err.pub.status;
    long long got = elem_int(r, 0);
    long long fence = elem_int(r, 1);
    if (got == 1)
        note_breaks(l, r);
    freeReplyObject(r);
    if (got == 1)
        return won(l, start, ls, fence);
    r = expect(c, -1, "GET", "GET %s", l->key);
    if (!r)
        return c->err.pub.status;
    if (r->type != REDIS_REPLY_NIL && r->type != REDIS_REPLY_STRING) {
        relock_status st = RELOCK__BAD_REPLY(c, "GET", r);
        freeReplyObject(r);
        return st;
    }
    char found[RELOCK__VALUE_MAX];
    int has = r->type == REDIS_REPLY_STRING;
    if (has)
        snprintf(found, sizeof found, "%s", r->str);
    freeReplyObject(r);
    return held_by(l, start, now, ls, has ? found : NULL, -3, hint_ms);
}

static relock_status ts_attempt(relock_lock *l, long *hint_ms)
{
    relock_client *c = l->c;
    /* The path depends on the probed capabilities: probe first if the
     * connection was closed (a closed connection knows none). */
    if (relock__conn_ensure(c) != RELOCK_OK)
        return c->err.pub.status;
    long long now;
    uint64_t start = relock__mono_ms();
    relock_status st = relock__fleet_ms(c, &now);
    if (st != RELOCK_OK)
        return st;
    relock__lease ls;
    plan(c, now, l->ttl_ms, &ls);
    if (format_value(c, ls.ts, l->value, sizeof l->value) != 0)
        return RELOCK__FAIL(&c->err, RELOCK_EIO, "acquire %s: no random bytes for a token",
                            l->name);
    switch (path_of(c)) {
    case VIA_EVAL:
        return attempt_eval(l, start, now, &ls, hint_ms);
    case VIA_WATCH:
        return attempt_watch(l, start, now, &ls, hint_ms);
    case VIA_PLAIN:
        break;
    }
    return attempt_plain(l, start, now, &ls, hint_ms);
}

/* ------------------------------------------------------------ release, extend */

static relock_status lost(relock_lock *l, const char *op, const char *found)
{
    relock_client *c = l->c;
    if (!found[0])
        return RELOCK__FAIL(&c->err, RELOCK_LOST, "%s %s: lock lost: the key was deleted", op,
                            l->name);
    if (strcmp(found, l->value) == 0)
        return RELOCK__FAIL(&c->err, RELOCK_LOST,
                            "%s %s: lock lost: the key holds our value, but another holder "
                            "acquired since (fence %lld is no longer current, or a legacy "
                            "client wrote the same timestamp)",
                            op, l->name, l->fence);
    return RELOCK__FAIL(&c->err, RELOCK_LOST, "%s %s: lock lost: the key now holds %.40s", op,
                        l->name, found);
}

/*
 * Compare-and-set (newv) or compare-and-delete (newv NULL) of our value,
 * following one GETSET loser's write if one is found while our validity
 * remains.  Only for servers with EVAL or WATCH.
 */
static relock_status atomic_update(relock_lock *l, const char *op, const char *newv, long long px,
                                   long long gc)
{
    relock_client *c = l->c;
    char expected[RELOCK__VALUE_MAX];
    snprintf(expected, sizeof expected, "%s", l->value);
    /* The path, and with it the fence to compare (ours where acquisitions
     * alone count it, with WATCH or EVAL; on 2.0 it also counts failed
     * attempts), as probed when the operation began (the callers connect
     * first).  A command that fails in between (the legacy-writer marker)
     * closes the connection, which forgets the capabilities: read again in
     * a later round, they would say "2.0" and drop the fence from the
     * comparison. */
    enum path p = path_of(c);
    long long fence = p == VIA_PLAIN ? 0 : l->fence;
    /* Bounded: a beaten WATCH is retried a few times, and a loser's write
     * is followed once. */
    int following = 0;
    for (int round = 0; round < 4; round++) {
        /* A loser's write carries no TTL; ours (bridge) always does. */
        cas_req q = {expected, fence, is_bridge(c) && !following, newv, px, gc, 0};
        cas_result res;
        int sent = 0, beaten = 0;
        int rc = p == VIA_EVAL ? cas_eval(l, &q, &res, &sent)
                               : cas_watch(l, &q, &res, &beaten, &sent);
        if (rc != 0)
            return sent && c->err.pub.status == RELOCK_EIO ? ambiguous(l, op) : c->err.pub.status;
        if (res.done) {
            if (following)
                l->loser_writes++;
            if (!newv)
                l->waiters = (int)res.fence; /* a delete reports the waiters told */
            return RELOCK_OK;
        }
        if (beaten)
            continue; /* the key changed under WATCH: look again */
        /*
         * A loser's write: a different timestamp, or (bridge) our very
         * value with its TTL cleared, as a legacy GETSET in the same unit
         * leaves it.  The fence is still compared when following it.
         */
        int same_value = is_bridge(c) && strcmp(res.found, l->value) == 0;
        if (!following && res.found[0] &&
            (is_loser_write(l, res.found) || (same_value && holds_validity(l)))) {
            if (is_bridge(c))
                relock__note_legacy_writer(c);
            snprintf(expected, sizeof expected, "%s", res.found);
            following = 1;
            continue;
        }
        return lost(l, op, res.found);
    }
    return RELOCK__FAIL(&c->err, RELOCK_LOST, "%s %s: lock lost: the key kept changing", op,
                        l->name);
}

/* 2.0: RELOCK_LOST when the lock was broken since we won it (its break
 * counter moved), RELOCK_OK when not or when we never read the counter. */
static relock_status check_breaks(relock_lock *l, const char *op)
{
    relock_client *c = l->c;
    char bkey[RELOCK__KEY_MAX];
    if (!l->breaks_known || relock__breaks_key(l->key, bkey, sizeof bkey) != 0)
        return RELOCK_OK;
    redisReply *r = expect(c, -1, "GET", "GET %s", bkey);
    if (!r)
        return c->err.pub.status;
    long long n = counter_of(r);
    if (n < 0) {
        relock_status st = RELOCK__BAD_REPLY(c, "GET", r);
        freeReplyObject(r);
        return st;
    }
    freeReplyObject(r);
    if (n == l->breaks)
        return RELOCK_OK;
    return RELOCK__FAIL(&c->err, RELOCK_LOST,
                        "%s %s: lock lost: it was broken (relock break) since we acquired it; "
                        "the key's value is another holder's",
                        op, l->name);
}

static relock_status ts_release(relock_lock *l)
{
    relock_client *c = l->c;
    /* The path depends on the probed capabilities: probe first if the
     * connection was closed (a closed connection knows none). */
    if (relock__conn_ensure(c) != RELOCK_OK)
        return c->err.pub.status;
    if (path_of(c) != VIA_PLAIN)
        return atomic_update(l, "release", NULL, 0, 0);
    /* 2.0: no WATCH, no EVAL.  GET then DEL, only while our validity
     * remains: then no other client can have taken the lock over between
     * the two (short of clock skew beyond skew_margin_ms, or a pause of
     * this process between them: the window docs/legacy.md describes). */
    redisReply *r = expect(c, -1, "GET", "GET %s", l->key);
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
    /* A different value is never followed here: on 2.0 a GETSET loser's
     * write cannot be told from a new holder's (see the top of the file). */
    if (strcmp(found, l->value) != 0)
        return lost(l, "release", found);
    relock_status bst = check_breaks(l, "release");
    if (bst != RELOCK_OK)
        return bst;
    if (!l->valid_until || relock__mono_ms() >= l->valid_until)
        return RELOCK__FAIL(&c->err, RELOCK_LOST,
                            "release %s: lock lost: it expired; not deleted, since without "
                            "WATCH a delete could hit a new holder",
                            l->name);
    int sent = 0;
    r = relock__commandf(c, &sent, "DEL %s", l->key);
    if (!r)
        return sent ? ambiguous(l, "release") : c->err.pub.status;
    if (r->type != REDIS_REPLY_INTEGER) {
        relock_status st = RELOCK__BAD_REPLY(c, "DEL", r);
        freeReplyObject(r);
        return st;
    }
    int deleted = r->integer == 1;
    freeReplyObject(r);
    if (!deleted)
        return lost(l, "release", ""); /* gone between our GET and DEL */
    char chan[RELOCK__KEY_MAX];
    if (relock__notify_channel(l, chan, sizeof chan)) {
        /* Best effort: waiters also wake at the expiry they know. */
        r = relock__commandf(c, NULL, "PUBLISH %s 1", chan);
        if (r && r->type == REDIS_REPLY_INTEGER)
            l->waiters = (int)r->integer;
        if (r)
            freeReplyObject(r);
        relock__err_clear(&c->err);
    }
    return RELOCK_OK;
}

static relock_status ts_extend(relock_lock *l, long ttl_ms)
{
    relock_client *c = l->c;
    /* The path depends on the probed capabilities: probe first if the
     * connection was closed (a closed connection knows none). */
    if (relock__conn_ensure(c) != RELOCK_OK)
        return c->err.pub.status;
    long long now;
    uint64_t start = relock__mono_ms();
    relock_status st = relock__fleet_ms(c, &now);
    if (st != RELOCK_OK)
        return st;
    relock__lease ls;
    plan(c, now, ttl_ms, &ls);
    char newv[RELOCK__VALUE_MAX];
    if (format_value(c, ls.ts, newv, sizeof newv) != 0)
        return RELOCK__FAIL(&c->err, RELOCK_EIO, "extend %s: no random bytes for a token",
                            l->name);
    if (path_of(c) != VIA_PLAIN) {
        st = atomic_update(l, "extend", newv, ls.px_ms, ls.gc_s);
    } else {
        /* 2.0: GETSET while our validity remains; the old value it returns
         * must be ours, else we have just written over another value: say
         * so (a loser's write is not followed here, see the top). */
        if (!l->valid_until || relock__mono_ms() >= l->valid_until)
            return RELOCK__FAIL(&c->err, RELOCK_LOST,
                                "extend %s: lock lost: it expired (without WATCH it cannot be "
                                "extended safely after that)",
                                l->name);
        /* Look before writing: a value that is not ours is never
         * overwritten.  The GETSET below then races only with a takeover,
         * which needs our value to have expired, and with a break followed
         * by a new acquisition in between (docs/legacy.md). */
        redisReply *r = expect(c, -1, "GET", "GET %s", l->key);
        if (!r)
            return c->err.pub.status;
        if (r->type != REDIS_REPLY_NIL && r->type != REDIS_REPLY_STRING) {
            st = RELOCK__BAD_REPLY(c, "GET", r); /* an error is not a loss */
            freeReplyObject(r);
            return st;
        }
        char found[RELOCK__VALUE_MAX] = "";
        if (r->type == REDIS_REPLY_STRING)
            snprintf(found, sizeof found, "%s", r->str);
        freeReplyObject(r);
        if (strcmp(found, l->value) != 0)
            return lost(l, "extend", found);
        st = check_breaks(l, "extend");
        if (st != RELOCK_OK)
            return st;
        int sent = 0;
        r = relock__commandf(c, &sent, "GETSET %s %s", l->key, newv);
        if (!r)
            return sent ? ambiguous(l, "extend") : c->err.pub.status;
        if (r->type != REDIS_REPLY_NIL && r->type != REDIS_REPLY_STRING) {
            st = RELOCK__BAD_REPLY(c, "GETSET", r); /* an error wrote nothing */
            freeReplyObject(r);
            return st;
        }
        found[0] = '\0';
        if (r->type == REDIS_REPLY_STRING)
            snprintf(found, sizeof found, "%s", r->str);
        freeReplyObject(r);
        if (strcmp(found, l->value) == 0) {
            st = RELOCK_OK;
        } else {
            /* Our timestamp now blocks the key until it passes, and no
             * one can extend or release it: the other holder's next check
             * reports its lock lost, so there are never two holders. */
            st = RELOCK__FAIL(&c->err, RELOCK_LOST,
                              "extend %s: lock lost: the key held %.40s, now overwritten by "
                              "our new timestamp (its holder's next extend or release reports "
                              "the loss; the key stays until that timestamp passes)",
                              l->name, found[0] ? found : "nothing");
        }
    }
    if (st == RELOCK_OK) {
        snprintf(l->value, sizeof l->value, "%s", newv);
        l->ttl_ms = ttl_ms;
        l->valid_until = start + (uint64_t)ls.valid_ms;
    }
    return st;
}

/* A lock adopted from its value: the timestamp says how long it is valid. */
static void ts_adopt(relock_lock *l)
{
    relock_client *c = l->c;
    relock__value val;
    relock__classify(l->value, strlen(l->value), &val);
    if (val.kind != RELOCK_VALUE_TIMESTAMP)
        return;
    long long now;
    if (relock__fleet_ms(c, &now) != RELOCK_OK) {
        relock__err_clear(&c->err);
        return;
    }
    /* Valid until legacy readers see it pass, less the drift allowance. */
    relock__lease_cfg cfg = lease_cfg(c);
    long long left = relock__lease_adopted_ms(&cfg, val.ts, now);
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
    "legacy", ts_attempt, ts_release, ts_extend, ts_adopt,
};

const relock__algo relock__algo_bridge = {
    "bridge", ts_attempt, ts_release, ts_extend, ts_adopt,
};
