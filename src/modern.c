/*
 * Modern mode (servers >= 2.6.12, DESIGN §3): SET key token NX PX ttl to
 * acquire; compare-and-delete and compare-and-set to release and extend,
 * so a holder can never delete or prolong a lock that has passed to
 * someone else.
 *
 * The compare-and-X has three ways, the best the server has first
 * (DESIGN §2, found by the probe, caps.h):
 *   native   release DELIFEQ (Valkey 9.0) or DELEX IFEQ (Redis 8.4), its
 *            release notice PUBLISHed in the same round trip; extend
 *            SET IFEQ PX (Valkey 8.1, Redis 8.4): one command each;
 *   script   EVALSHA of a compare-and-X script (2.6 and later);
 *   WATCH    WATCH, GET, MULTI, the write, EXEC, for servers that run
 *            without Lua (Valkey 9.1 can) and have no native command.
 * The fence is incremented with a successful acquisition only: by the
 * acquire script, or without Lua inside the MULTI that sets the key, under
 * a WATCH of the key (docs/decisions.md 97-100).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caps.h"
#include "internal.h"

static int has_lua(const relock_client *c)
{
    return (c->conn.caps & RELOCK_CAP_EVAL) != 0;
}

enum cad { CAD_DELIFEQ, CAD_DELEX, CAD_SCRIPT, CAD_WATCH };
enum cas { CAS_SET_IFEQ, CAS_SCRIPT, CAS_WATCH };

static enum cad release_path(const relock_client *c)
{
    if (c->conn.caps & RELOCK__CAP_DELIFEQ)
        return CAD_DELIFEQ;
    if (c->conn.caps & RELOCK__CAP_DELEX)
        return CAD_DELEX;
    return has_lua(c) ? CAD_SCRIPT : CAD_WATCH;
}

static enum cas extend_path(const relock_client *c)
{
    if (c->conn.caps & RELOCK__CAP_SET_IFEQ)
        return CAS_SET_IFEQ;
    return has_lua(c) ? CAS_SCRIPT : CAS_WATCH;
}

void relock__modern_paths(const relock_client *c, relock_paths *out)
{
    static const char *const rel[] = {"DELIFEQ", "DELEX IFEQ", "script", "WATCH/MULTI"};
    static const char *const ext[] = {"SET IFEQ PX", "script", "WATCH/MULTI"};
    enum cad r = release_path(c);
    enum cas e = extend_path(c);
    int scripts = (c->s.fencing && has_lua(c)) || r == CAD_SCRIPT || e == CAS_SCRIPT;
    out->acquire = !c->s.fencing ? "SET NX PX"
                   : has_lua(c)  ? "script (SET NX PX, INCR)"
                                 : "WATCH/MULTI (SET PX, INCR)";
    out->release = rel[r];
    out->extend = ext[e];
    out->scripts = scripts      ? "used"
                   : has_lua(c) ? "none"
                                : "none (the server runs without Lua)";
}

/* The key's TTL for a lease of ttl_ms: the lease plus lock_delay_ms, so
 * that a holder that dies unreleased keeps others out that much longer
 * (decision 106); validity is still reckoned from the lease alone. */
static void key_ttl(const relock_client *c, long ttl_ms, char *out, size_t len)
{
    snprintf(out, len, "%ld", ttl_ms + c->s.lock_delay_ms);
}

/* A command of fixed words. */
static redisReply *words(relock_client *c, int *sent, int argc, const char **argv)
{
    size_t len[8];
    for (int i = 0; i < argc && i < 8; i++)
        len[i] = strlen(argv[i]);
    return relock__command(c, sent, argc, argv, len);
}

/* Sends a command and checks its reply type (-1: any); NULL on failure
 * with the error recorded (the reply freed). */
static redisReply *expect(relock_client *c, int type, const char *what, int argc,
                          const char **argv)
{
    redisReply *r = words(c, NULL, argc, argv);
    if (r && type >= 0 && r->type != type) {
        RELOCK__BAD_REPLY(c, what, r);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

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

static relock_status held_by(relock_lock *l, uint64_t start, const char *found, long long pttl,
                             long *hint_ms);
static relock_status resolve_ambiguous_set(relock_lock *l, uint64_t start);

/*
 * The first two commands of a compare-and-set by WATCH: WATCH the key, GET
 * it.  *has says whether it holds a string, found its value (a longer one
 * cut to fit: it then equals no value of ours, which are shorter).  The
 * caller goes on to MULTI ... EXEC or UNWATCH on the same connection.
 */
static relock_status watch_get(relock_lock *l, char found[RELOCK__VALUE_MAX], int *has)
{
    relock_client *c = l->c;
    const char *w[] = {"WATCH", l->key};
    redisReply *r = expect(c, REDIS_REPLY_STATUS, "WATCH", 2, w);
    if (!r)
        return c->err.pub.status;
    freeReplyObject(r);
    const char *g[] = {"GET", l->key};
    r = expect(c, -1, "GET", 2, g);
    if (!r)
        return c->err.pub.status;
    if (r->type != REDIS_REPLY_NIL && r->type != REDIS_REPLY_STRING) {
        relock_status st = RELOCK__BAD_REPLY(c, "GET", r);
        freeReplyObject(r);
        return st;
    }
    *has = r->type == REDIS_REPLY_STRING;
    snprintf(found, RELOCK__VALUE_MAX, "%s", *has ? r->str : "");
    freeReplyObject(r);
    return RELOCK_OK;
}

/*
 * Without Lua: set our token where the key holds `expected` (NULL: where
 * it is absent; else a legacy leftover, which must still have no TTL),
 * with the fence incremented in the same MULTI, under a WATCH of the key:
 * a write by anyone between our look and EXEC makes EXEC fail (nil), and
 * then nothing was written and the attempt is busy.  Only a success
 * increments the fence, as the scripts do.  From WATCH to EXEC on one
 * connection (relock__txn_begin): a new one would run the rest unwatched.
 */
static relock_status set_watched_in(relock_lock *l, uint64_t start, const char *expected,
                                    const char *ttl, long *hint_ms, int *sent, int *is_held,
                                    char *held, long long *held_pttl)
{
    relock_client *c = l->c;
    char found[RELOCK__VALUE_MAX];
    int has;
    relock_status st = watch_get(l, found, &has);
    if (st != RELOCK_OK)
        return st;
    redisReply *r;
    long long pttl = -2;
    if (has) {
        const char *p[] = {"PTTL", l->key};
        r = expect(c, REDIS_REPLY_INTEGER, "PTTL", 2, p);
        if (!r)
            return c->err.pub.status;
        pttl = r->integer;
        freeReplyObject(r);
    }
    int go = expected ? has && strcmp(found, expected) == 0 && pttl < 0 : !has;
    if (!go) {
        const char *u[] = {"UNWATCH"};
        r = expect(c, -1, "UNWATCH", 1, u);
        if (!r)
            return c->err.pub.status;
        freeReplyObject(r);
        *hint_ms = 0; /* the leftover changed: look again */
        if (!expected) {
            /* Held: the caller judges the holder, outside the WATCH. */
            *is_held = has;
            snprintf(held, RELOCK__VALUE_MAX, "%s", found);
            *held_pttl = pttl;
        }
        return RELOCK_BUSY;
    }
    const char *m[] = {"MULTI"};
    r = expect(c, REDIS_REPLY_STATUS, "MULTI", 1, m);
    if (r) {
        freeReplyObject(r);
        const char *sx[] = {"SET", l->key, l->value, "PX", ttl};
        r = expect(c, REDIS_REPLY_STATUS, "SET", 5, sx);
    }
    if (r && c->s.fencing) {
        freeReplyObject(r);
        const char *in[] = {"INCR", l->fence_key};
        r = expect(c, REDIS_REPLY_STATUS, "INCR", 2, in);
    }
    if (!r) {
        relock__conn_close(&c->conn); /* discards the transaction */
        return c->err.pub.status;
    }
    freeReplyObject(r);
    const char *e[] = {"EXEC"};
    r = words(c, sent, 1, e);
    if (!r)
        return c->err.pub.status;
    if (r->type == REDIS_REPLY_NIL) {
        *hint_ms = 0; /* someone wrote the key meanwhile: busy, look again */
        st = RELOCK_BUSY;
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == (c->s.fencing ? 2u : 1u) &&
               r->element[0]->type == REDIS_REPLY_STATUS &&
               (!c->s.fencing || r->element[1]->type == REDIS_REPLY_INTEGER)) {
        l->fence = c->s.fencing ? r->element[1]->integer : 0;
        l->valid_until = relock__valid_until(start, l->ttl_ms);
        st = RELOCK_OK;
    } else {
        st = RELOCK__BAD_REPLY(c, "EXEC of the acquire", r);
    }
    freeReplyObject(r);
    return st;
}

static relock_status set_watched(relock_lock *l, uint64_t start, const char *expected,
                                 const char *ttl, long *hint_ms)
{
    relock_client *c = l->c;
    if (relock__txn_begin(c) != RELOCK_OK)
        return c->err.pub.status;
    int sent = 0;
    char held[RELOCK__VALUE_MAX] = "";
    long long held_pttl = -2;
    int is_held = 0;
    relock_status st =
        set_watched_in(l, start, expected, ttl, hint_ms, &sent, &is_held, held, &held_pttl);
    relock__txn_end(c);
    if (st == RELOCK_EIO && sent)
        return resolve_ambiguous_set(l, start);
    if (st != RELOCK_OK && st != RELOCK_BUSY && c->conn.ctx)
        relock__conn_close(&c->conn); /* drops a WATCH the server may still hold */
    if (st == RELOCK_BUSY && is_held)
        return held_by(l, start, held, held_pttl, hint_ms);
    return st;
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
    key_ttl(c, l->ttl_ms, ttl, sizeof ttl);
    if (!has_lua(c))
        return set_watched(l, start, found, ttl, hint_ms);
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
    key_ttl(c, l->ttl_ms, ttl, sizeof ttl);
    uint64_t start = relock__mono_ms();
    if (c->s.fencing && !has_lua(c))
        return set_watched(l, start, NULL, ttl, hint_ms);
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

/* The lock is gone or another's: nothing was written. */
static relock_status lost(relock_lock *l, const char *op, const char *why)
{
    int expired = l->valid_until && relock__mono_ms() >= l->valid_until;
    return RELOCK__FAIL(&l->c->err, RELOCK_LOST, "%s %s: lock lost: %s", op, l->name,
                        expired ? "it expired" : why);
}

static relock_status ambiguous(relock_lock *l, const char *op)
{
    relock_client *c = l->c;
    relock__err_clear(&c->err); /* the I/O error is the lesser news */
    return RELOCK__FAIL(&c->err, RELOCK_EAMBIGUOUS,
                        "%s %s: connection lost after the request was sent; the lock's state "
                        "is unknown",
                        op, l->name);
}

/*
 * Sends two commands in one write and reads both replies: the native
 * compare-and-delete and its release notice.  Returns 0 with both replies,
 * or -1 with the error recorded and *sent telling whether the commands may
 * have reached the server.  A Cluster redirection or a read-only replica is
 * not followed here: the caller then sends the commands one by one through
 * relock__command, which does.
 */
static int pipeline2(relock_client *c, int *sent, const char *name, int argc1,
                     const char **argv1, int argc2, const char **argv2, redisReply **out)
{
    out[0] = out[1] = NULL;
    *sent = 0;
    /* As every command: a stale connection replaced, a lost Cluster
     * master looked up again (conn.c). */
    if (relock__conn_ready(c) != RELOCK_OK)
        return -1;
    redisContext *ctx = c->conn.ctx;
    if (redisAppendCommandArgv(ctx, argc1, argv1, NULL) != REDIS_OK ||
        redisAppendCommandArgv(ctx, argc2, argv2, NULL) != REDIS_OK) {
        relock__conn_close(&c->conn);
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "%s: out of memory", name), -1;
    }
    for (int i = 0; i < 2; i++) {
        void *reply = NULL;
        errno = 0;
        if (redisGetReply(ctx, &reply) != REDIS_OK || !reply) {
            int timed_out = ctx->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
            const relock__server *srv = c->conn.srv;
            *sent = 1;
            if (timed_out)
                RELOCK__FAIL(&c->err, RELOCK_EIO,
                             "%s on %s:%d: no reply within %ld ms (command_timeout_ms): the "
                             "server is stalled, overloaded, or not a Redis server",
                             name, srv->host, srv->port, c->s.command_timeout_ms);
            else
                RELOCK__FAIL(&c->err, RELOCK_EIO, "%s on %s:%d: %s", name, srv->host, srv->port,
                             ctx->errstr[0] ? ctx->errstr : "connection lost");
            relock__conn_close(&c->conn);
            if (reply)
                freeReplyObject(reply);
            if (i == 1) {
                /* The compare-and-delete answered; only the notice is lost. */
                *sent = 0;
                relock__err_clear(&c->err);
                return 0;
            }
            return -1;
        }
        out[i] = reply;
    }
    return 0;
}

/* Whether an error reply asks for the command to go elsewhere. */
static int redirected(relock_client *c, const redisReply *r)
{
    relock__redirect to;
    return r->type == REDIS_REPLY_ERROR &&
           (relock__cluster_redirect(c, r, &to) != RELOCK__REDIR_NONE ||
            relock__sentinel_readonly(r));
}

/* Release by DELIFEQ or DELEX IFEQ: 1 deleted, 0 absent or another value
 * (the reply does not say which).  The notice rides in the same round
 * trip; it is sent even when the lock turns out lost, which at worst wakes
 * waiters for one look. */
static relock_status release_native(relock_lock *l, enum cad path)
{
    relock_client *c = l->c;
    const char *delifeq[] = {"DELIFEQ", l->key, l->value};
    const char *delex[] = {"DELEX", l->key, "IFEQ", l->value};
    const char **cad = path == CAD_DELIFEQ ? delifeq : delex;
    int cadc = path == CAD_DELIFEQ ? 3 : 4;
    const char *what = path == CAD_DELIFEQ ? "DELIFEQ" : "DELEX IFEQ";
    char chan[RELOCK__KEY_MAX];
    int notify = relock__notify_channel(l, chan, sizeof chan);
    const char *pub[] = {"PUBLISH", chan, "1"};
    redisReply *rr[2] = {NULL, NULL};
    int sent = 0;
    if (notify) {
        if (pipeline2(c, &sent, what, cadc, cad, 3, pub, rr) < 0)
            return sent ? ambiguous(l, "release") : c->err.pub.status;
        if (redirected(c, rr[0])) {
            freeReplyObject(rr[0]);
            if (rr[1])
                freeReplyObject(rr[1]);
            rr[0] = rr[1] = NULL;
        }
    }
    if (!rr[0]) {
        rr[0] = words(c, &sent, cadc, cad);
        if (!rr[0])
            return sent ? ambiguous(l, "release") : c->err.pub.status;
        if (notify && rr[0]->type == REDIS_REPLY_INTEGER && rr[0]->integer == 1)
            rr[1] = words(c, NULL, 3, pub);
        relock__err_clear(&c->err); /* a lost notice is no failure */
    }
    relock_status st;
    if (rr[0]->type != REDIS_REPLY_INTEGER) {
        st = RELOCK__BAD_REPLY(c, what, rr[0]);
    } else if (rr[0]->integer == 1) {
        st = RELOCK_OK;
        l->waiters = rr[1] && rr[1]->type == REDIS_REPLY_INTEGER ? (int)rr[1]->integer : 0;
    } else {
        st = lost(l, "release", "the key was deleted, expired or holds another value");
    }
    freeReplyObject(rr[0]);
    if (rr[1])
        freeReplyObject(rr[1]);
    return st;
}

/*
 * Without Lua and without a native command: WATCH the key, GET it, and
 * only if it holds our token, MULTI, the write (DEL and the notice, or
 * PEXPIRE), EXEC.  A write by anyone between our GET and EXEC makes EXEC
 * fail and we look again (a few times: our own lock's key is written by
 * nobody else while it is ours).  From WATCH to EXEC on one connection.
 */
static relock_status cas_watched_in(relock_lock *l, const char *op, const char *ttl, int *sent,
                                    int *again)
{
    relock_client *c = l->c;
    *again = 0;
    char found[RELOCK__VALUE_MAX];
    int has;
    relock_status st = watch_get(l, found, &has);
    if (st != RELOCK_OK)
        return st;
    redisReply *r;
    int absent = !has;
    int ours = has && strcmp(found, l->value) == 0;
    if (!ours) {
        const char *u[] = {"UNWATCH"};
        r = expect(c, -1, "UNWATCH", 1, u);
        if (r)
            freeReplyObject(r);
        return lost(l, op, absent ? "the key was deleted or expired" : "taken by another value");
    }
    char chan[RELOCK__KEY_MAX];
    int notify = !ttl && relock__notify_channel(l, chan, sizeof chan);
    const char *m[] = {"MULTI"};
    r = expect(c, REDIS_REPLY_STATUS, "MULTI", 1, m);
    if (r) {
        freeReplyObject(r);
        const char *del[] = {"DEL", l->key};
        const char *px[] = {"PEXPIRE", l->key, ttl};
        r = ttl ? expect(c, REDIS_REPLY_STATUS, "PEXPIRE", 3, px)
                : expect(c, REDIS_REPLY_STATUS, "DEL", 2, del);
    }
    if (r && notify) {
        freeReplyObject(r);
        const char *pub[] = {"PUBLISH", chan, "1"};
        r = expect(c, REDIS_REPLY_STATUS, "PUBLISH", 3, pub);
    }
    if (!r) {
        relock__conn_close(&c->conn); /* discards the transaction */
        return c->err.pub.status;
    }
    freeReplyObject(r);
    const char *e[] = {"EXEC"};
    r = words(c, sent, 1, e);
    if (!r)
        return c->err.pub.status;
    st = RELOCK_OK;
    if (r->type == REDIS_REPLY_NIL) {
        *again = 1;
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
               r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1) {
        if (notify && r->elements > 1 && r->element[1]->type == REDIS_REPLY_INTEGER)
            l->waiters = (int)r->element[1]->integer;
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
               r->element[0]->type == REDIS_REPLY_INTEGER) {
        /* Ours at the GET, gone at EXEC: expired in between. */
        st = lost(l, op, "it expired");
    } else {
        st = RELOCK__BAD_REPLY(c, "EXEC", r);
    }
    freeReplyObject(r);
    return st;
}

static relock_status cas_watched(relock_lock *l, const char *op, const char *ttl)
{
    relock_client *c = l->c;
    for (int tries = 0; tries < 5; tries++) {
        if (relock__txn_begin(c) != RELOCK_OK)
            return c->err.pub.status;
        int sent = 0, again = 0;
        relock_status st = cas_watched_in(l, op, ttl, &sent, &again);
        relock__txn_end(c);
        if (st == RELOCK_EIO && sent)
            return ambiguous(l, op);
        if (st != RELOCK_OK && st != RELOCK_LOST && c->conn.ctx)
            relock__conn_close(&c->conn); /* drops a WATCH the server may still hold */
        if (st != RELOCK_OK || !again)
            return st;
    }
    return RELOCK__FAIL(&c->err, RELOCK_EIO,
                        "%s %s: the key kept changing between WATCH and EXEC; not done", op,
                        l->name);
}

static relock_status modern_release(relock_lock *l)
{
    enum cad path = release_path(l->c);
    if (path == CAD_DELIFEQ || path == CAD_DELEX)
        return release_native(l, path);
    if (path == CAD_WATCH)
        return cas_watched(l, "release", NULL);
    char chan[RELOCK__KEY_MAX];
    relock__notify_channel(l, chan, sizeof chan);
    const char *args[] = {l->key, l->value, chan};
    int sent = 0;
    redisReply *r = relock__eval(l->c, &sent, RELOCK__SCRIPT_DEL_IF_EQ, 1, 3, args);
    return script_result(l, "release", r, sent);
}

/* Extend by SET IFEQ with the new TTL: OK when it was ours, nil when the
 * key is absent or holds another value (IFEQ never creates a key). */
static relock_status extend_native(relock_lock *l, const char *ttl)
{
    relock_client *c = l->c;
    const char *argv[] = {"SET", l->key, l->value, "IFEQ", l->value, "PX", ttl};
    int sent = 0;
    redisReply *r = words(c, &sent, 7, argv);
    if (!r)
        return sent ? ambiguous(l, "extend") : c->err.pub.status;
    relock_status st;
    if (r->type == REDIS_REPLY_STATUS)
        st = RELOCK_OK;
    else if (r->type == REDIS_REPLY_NIL)
        st = lost(l, "extend", "the key was deleted, expired or holds another value");
    else
        st = RELOCK__BAD_REPLY(c, "SET IFEQ", r);
    freeReplyObject(r);
    return st;
}

static relock_status modern_extend(relock_lock *l, long ttl_ms)
{
    char ttl[32];
    key_ttl(l->c, ttl_ms, ttl, sizeof ttl);
    uint64_t start = relock__mono_ms();
    relock_status st;
    switch (extend_path(l->c)) {
    case CAS_SET_IFEQ:
        st = extend_native(l, ttl);
        break;
    case CAS_WATCH:
        st = cas_watched(l, "extend", ttl);
        break;
    case CAS_SCRIPT:
    default: {
        const char *args[] = {l->key, l->value, ttl};
        int sent = 0;
        redisReply *r = relock__eval(l->c, &sent, RELOCK__SCRIPT_PEXPIRE_IF_EQ, 1, 3, args);
        st = script_result(l, "extend", r, sent);
        break;
    }
    }
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
