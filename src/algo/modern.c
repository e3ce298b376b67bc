/*
 * Modern mode (servers >= 2.6.12, design.md §5.3): SET key token NX PX ttl to
 * acquire; compare-and-delete and compare-and-set to release and extend,
 * so a holder never deletes or prolongs a lock passed to someone else.
 * The compare-and-X goes the best way the server has (design.md §3.3,
 * enum relock__modern_way): a native command, a release's notice
 * PUBLISHed in the same round trip; else a script; else, without Lua,
 * WATCH, GET, MULTI, the write, EXEC.  Only a successful acquisition
 * increments the fence: in the acquire script, or without Lua in the
 * MULTI that sets the key (decisions 97-100).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caps.h"
#include "modern.h"
#include "engine/fan.h"

static int has_lua(const relock_client *c)
{
    return (c->conn.caps & RELOCK_CAP_EVAL) != 0;
}

/* The best way the server offers to release, and to extend. */
static int release_path(const relock_client *c)
{
    if (c->conn.caps & RELOCK__CAP_DELIFEQ)
        return RELOCK__MW_DELIFEQ;
    if (c->conn.caps & RELOCK__CAP_DELEX)
        return RELOCK__MW_DELEX;
    return has_lua(c) ? RELOCK__MW_SCRIPT : RELOCK__MW_WATCH;
}

static int extend_path(const relock_client *c)
{
    if (c->conn.caps & RELOCK__CAP_SET_IFEQ)
        return RELOCK__MW_SET_IFEQ;
    return has_lua(c) ? RELOCK__MW_SCRIPT : RELOCK__MW_WATCH;
}

/* The release's and the extend's ways by name. */
static const char *const way_name[] = {
    [RELOCK__MW_SCRIPT] = "script",      [RELOCK__MW_WATCH] = "WATCH/MULTI",
    [RELOCK__MW_DELIFEQ] = "DELIFEQ",    [RELOCK__MW_DELEX] = "DELEX IFEQ",
    [RELOCK__MW_SET_IFEQ] = "SET IFEQ PX",
};

void relock__modern_paths(const relock_client *c, relock_paths *out)
{
    int r = release_path(c), e = extend_path(c);
    int scripts = (c->s.fencing && has_lua(c)) || r == RELOCK__MW_SCRIPT || e == RELOCK__MW_SCRIPT;
    out->path[RELOCK_PATH_ACQUIRE] = !c->s.fencing ? "SET NX PX"
                                     : has_lua(c)  ? "script (SET NX PX, INCR)"
                                                   : "WATCH/MULTI (SET PX, INCR)";
    out->path[RELOCK_PATH_RELEASE] = way_name[r];
    out->path[RELOCK_PATH_EXTEND] = way_name[e];
    out->path[RELOCK_PATH_SCRIPTS] = scripts      ? "used"
                                     : has_lua(c) ? "none"
                                                  : "none (the server runs without Lua)";
}

/* The key's TTL for a lease of ttl_ms: the lease plus lock_delay_ms, so
 * that a holder that dies unreleased keeps others out that much longer
 * (decision 106); validity is still reckoned from the lease alone. */
static const char *key_ttl(relock__batch *b, const relock_client *c, long long ttl_ms)
{
    return relock__batch_num(b, (long long)ttl_ms + c->s.lock_delay_ms);
}

/* Copies a reply's string into a value buffer (a longer one cut to fit: it
 * then equals no value of ours, which are shorter); whether it was one. */
static int copy_value(char out[RELOCK__VALUE_MAX], const redisReply *r)
{
    int is = r && r->type == REDIS_REPLY_STRING;
    snprintf(out, RELOCK__VALUE_MAX, "%s", is ? r->str : "");
    return is;
}

/* ------------------------------------------------------------------ acquire */

enum acq_pc {
    A_START = 0,
    A_SET,      /* SET NX PX sent */
    A_PTTL,     /* busy: PTTL sent */
    A_GET,      /* busy without TTL: GET sent */
    A_SCRIPT,   /* the fenced acquire script sent */
    A_FLEET,    /* a value without TTL: the fleet's clock asked for */
    A_TAKE,     /* the takeover script sent */
    W_WATCH,    /* WATCH sent (in the transaction from here) */
    W_GET,      /* GET sent */
    W_PTTL,     /* PTTL sent */
    W_UNWATCH,  /* not ours to set: UNWATCH sent, ending the transaction */
    W_MULTI,    /* MULTI sent */
    W_SET,      /* SET PX queued */
    W_INCR,     /* INCR of the fence queued */
    W_EXEC,     /* EXEC sent, ending the transaction */
    R_GET,      /* the acquire's reply was lost: GET of the key sent */
    R_FENCE     /* it holds our token: GET of the fence counter sent */
};

void relock__modern_acq_init(relock__modern_acq *m)
{
    *m = (relock__modern_acq){.h.hint_ms = -1, .pttl = -2};
}

static relock__step acq_won(relock__modern_acq *m, relock_lock *l, long long fence)
{
    l->fence = fence;
    l->valid_until = relock__valid_until(m->start, l->ttl_ms);
    return relock__done(&m->h, RELOCK_OK);
}

static relock__step busy(relock__modern_acq *m, long long hint)
{
    m->h.hint_ms = hint > 0x7fffffffLL ? 0x7fffffffL : hint < 0 ? 0 : (long)hint;
    return relock__done(&m->h, RELOCK_BUSY);
}

/*
 * The reply to the acquire was lost: the key is read back on a fresh
 * connection (R_GET), the loss's error recorded meanwhile.  The lock is
 * ours only if it holds our (unique) token; then nobody acquired since,
 * and the fence counter holds our fence (R_FENCE).  An error reply
 * (-LOADING from a restarted server that may have kept our write) says
 * nothing about the key: as unreadable as a fault.
 */
static relock__step readback(relock__modern_acq *m, relock_lock *l, const relock__feed *in,
                             relock__batch *out)
{
    relock_client *c = l->c;
    const redisReply *r = in->fault ? NULL : in->reply[0];
    int fence = m->h.pc == R_FENCE;
    if (!relock__reply_is(r, "bn") && fence) {
        /* The lock is ours but its fence unknown: no success (a fence of
         * 0 would undercut every earlier holder's), nor "nothing
         * happened". */
        relock__err_clear(&c->err);
        return relock__done(&m->h,
                            RELOCK__FAIL(&c->err, RELOCK_EAMBIGUOUS,
                                         "acquire %s: connection lost after the acquire was "
                                         "sent; the key holds our value, but its fence cannot "
                                         "be read: the lock is held by us until its TTL ends",
                                         l->name));
    }
    if (!relock__reply_is(r, "bn")) {
        /* The ambiguity is the news; what lost the reply is its cause. */
        char cause[200];
        snprintf(cause, sizeof cause, "%.*s", (int)sizeof cause - 1, c->err.msg);
        relock__err_clear(&c->err);
        return relock__done(&m->h,
                            RELOCK__FAIL(&c->err, RELOCK_EAMBIGUOUS,
                                         "acquire %s: connection lost after the acquire was "
                                         "sent and the key cannot be read back; the lock may "
                                         "be held by us until its TTL ends%s%s%s",
                                         l->name, cause[0] ? " (" : "", cause,
                                         cause[0] ? ")" : ""));
    }
    int ours = fence || (r->type == REDIS_REPLY_STRING && strcmp(r->str, l->value) == 0);
    if (!ours) /* the write never took effect: keep its I/O error */
        return relock__done(&m->h, c->err.pub.status);
    if (!fence && c->s.fencing)
        return relock__send_words(&m->h, out, R_FENCE, 0, 2, "GET", l->fence_key);
    relock__err_clear(&c->err);
    return acq_won(m, l, fence && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0);
}

/* The fenced acquire script, or the takeover script (way TAKEOVER), which
 * sets our token where the key still holds the expired leftover. */
static relock__step send_script(relock__modern_acq *m, relock_lock *l, relock__batch *out)
{
    relock_client *c = l->c;
    relock__batch_reset(out);
    const char *ttl = key_ttl(out, c, l->ttl_ms);
    if (m->way != RELOCK__MW_TAKEOVER) {
        const char *args[] = {l->key, l->fence_key, l->value, ttl};
        relock__batch_script(out, c, RELOCK__SCRIPT_MODERN_ACQUIRE, 2, 4, args, m->by_eval);
        return relock__send_at(&m->h, out, A_SCRIPT, 0);
    }
    const char *args[] = {l->key, l->fence_key, m->expected,
                          l->value, ttl,        c->s.fencing ? "1" : "0"};
    relock__batch_script(out, c, RELOCK__SCRIPT_MODERN_TAKEOVER, 2, 6, args, m->by_eval);
    return relock__send_at(&m->h, out, A_TAKE, 0);
}

/*
 * Without Lua: set our token where the key is absent (or, taking over,
 * still holds m->expected without a TTL), with the fence incremented in
 * the same MULTI, under a WATCH of the key: a write by anyone before EXEC
 * makes EXEC fail, nothing written, and the attempt busy.  From WATCH to
 * EXEC on one connection: a new one would run the rest unwatched.
 */
static relock__step watch_begin(relock__modern_acq *m, relock_lock *l, relock__batch *out)
{
    if (m->way != RELOCK__MW_TAKEOVER)
        m->way = RELOCK__MW_WATCH;
    return relock__send_words(&m->h, out, W_WATCH, 1, 2, "WATCH", l->key);
}

/*
 * The key is held by `found` (NULL: nothing was read) with TTL pttl.  A
 * value with a TTL is waited for.  A timestamp without one is a legacy
 * holder (design.md §5.3), taken over once expired so a migrated fleet
 * never waits forever on a leftover: that needs the fleet's clock.
 */
static relock__step held_by(relock__modern_acq *m, relock_lock *l, const char *found,
                            long long pttl, relock__batch *out)
{
    if (!found || pttl == -2)
        return busy(m, 0); /* gone since our attempt: try again at once */
    if (pttl >= 0)
        return busy(m, pttl);
    relock__value v;
    relock__classify(found, strlen(found), &v);
    int unit = v.kind == RELOCK_VALUE_TIMESTAMP ? relock__ts_unit_guess(v.ts_digits) : -1;
    if (unit < 0)
        return relock__done(&m->h,
                            RELOCK__FAIL(&l->c->err, RELOCK_EFOREIGN,
                                         "key %s holds \"%.40s\" without a TTL: neither a lock "
                                         "relock wrote nor a legacy timestamp; never taken over",
                                         l->key, found));
    if (found != m->expected)
        snprintf(m->expected, sizeof m->expected, "%s", found);
    m->h.want_fleet = 1;
    relock__batch_reset(out);
    return relock__send_at(&m->h, out, A_FLEET, 0);
}

/* The fleet's clock is in: the leftover in m->expected is live (busy) or
 * expired (taken over). */
static relock__step judge_leftover(relock__modern_acq *m, relock_lock *l,
                                   const relock__feed *in, relock__batch *out)
{
    relock_client *c = l->c;
    m->h.want_fleet = 0;
    relock__value v;
    relock__stamp stamp;
    relock__classify(m->expected, strlen(m->expected), &v);
    relock__value_stamp(&v, &stamp);
    /* Ended as a whole-clock reader ends it, in the unit its digits tell. */
    relock__lease_cfg whole = {.unit_ms = relock__ts_unit_guess(v.ts_digits) ? 1 : 1000,
                               .skew_margin_ms = c->s.legacy.skew_margin_ms};
    long long end = relock__lease_ours_end(&whole, &stamp);
    long long now = in->fleet_ms;
    /* A legacy writer's value, live or not: a sighting (docs/migration.md). */
    m->h.note_legacy = 1;
    if (now < end) {
        l->legacy_holder = 1;
        return busy(m, end - now);
    }
    if (!in->fleet_fresh && c->s.legacy.clock_server) {
        /* A takeover never rests on an earlier estimate of the server's
         * clock (wrong after a step of it): judged on a fresh reading. */
        m->h.want_fleet = RELOCK__FLEET_FRESH;
        relock__batch_reset(out);
        return relock__send(&m->h, out);
    }
    m->way = RELOCK__MW_TAKEOVER;
    return has_lua(c) ? send_script(m, l, out) : watch_begin(m, l, out);
}

/* After WATCH, GET (and PTTL): go on to MULTI, or UNWATCH. */
static relock__step watch_decide(relock__modern_acq *m, relock__batch *out)
{
    int go = m->way != RELOCK__MW_TAKEOVER
                 ? !m->has
                 : m->has && strcmp(m->found, m->expected) == 0 && m->pttl < 0;
    if (!go)
        return relock__send_words(&m->h, out, W_UNWATCH, 0, 1, "UNWATCH");
    return relock__send_words(&m->h, out, W_MULTI, 1, 1, "MULTI");
}

relock__step relock__modern_acq_step(void *vm, relock_lock *l, const relock__feed *in,
                                     relock__batch *out)
{
    relock__modern_acq *m = vm;
    relock_client *c = l->c;
    const redisReply *r = in->nreply > 0 ? in->reply[0] : NULL;
    relock_status st;
    /* A fault ends the attempt with its error (before EXEC nothing was
     * written), except that a lost write (SET, a script, EXEC) may have
     * run: it is read back. */
    if (in->fault && m->h.pc != R_GET && m->h.pc != R_FENCE) {
        int pc = m->h.pc, wrote = pc == A_SET || pc == A_SCRIPT || pc == A_TAKE || pc == W_EXEC;
        m->h.want_fleet = 0;
        st = relock__fault_fail(c, in);
        if (!wrote || in->fault != RELOCK__FAULT_LOST)
            return relock__done(&m->h, st);
        m->readback = 1;
        return relock__send_words(&m->h, out, R_GET, 0, 2, "GET", l->key);
    }
    if ((m->h.pc == A_SCRIPT || m->h.pc == A_TAKE) && relock__script_again(in, 0, &m->by_eval))
        return send_script(m, l, out);
    switch (m->h.pc) {
    case A_START:
        m->start = in->mono_ms;
        if (c->s.fencing && !has_lua(c))
            return watch_begin(m, l, out);
        if (c->s.fencing) {
            m->way = RELOCK__MW_SCRIPT;
            return send_script(m, l, out);
        }
        /* Without fencing: the plain SET NX PX, the fastest acquire. */
        m->way = RELOCK__MW_PLAIN;
        relock__batch_reset(out);
        relock__batch_words(out, 6, "SET", l->key, l->value, "NX", "PX",
                            key_ttl(out, c, l->ttl_ms));
        return relock__send_at(&m->h, out, A_SET, 0);

    case A_SET:
        if (r->type == REDIS_REPLY_STATUS)
            return acq_won(m, l, 0);
        if ((st = relock__reply_check(c, r, "n", "SET NX PX")) != RELOCK_OK)
            return relock__done(&m->h, st);
        /* Busy: learn when the holder's lease ends, to sleep until then. */
        return relock__send_words(&m->h, out, A_PTTL, 0, 2, "PTTL", l->key);

    case A_PTTL:
        if ((st = relock__reply_check(c, r, "i", "PTTL")) != RELOCK_OK)
            return relock__done(&m->h, st);
        m->pttl = r->integer;
        if (m->pttl != -1)
            return held_by(m, l, "", m->pttl, out);
        return relock__send_words(&m->h, out, A_GET, 0, 2, "GET", l->key);

    case A_GET:
        m->has = copy_value(m->found, r);
        return held_by(m, l, m->has ? m->found : NULL, -1, out);

    case A_SCRIPT:
        /* SET NX PX and INCR in one script, which also returns the
         * holder's PTTL and value when busy. */
        if ((st = relock__reply_check(c, r, "a[ii]", "acquire script")) != RELOCK_OK)
            return relock__done(&m->h, st);
        if (r->element[0]->integer == 1)
            return acq_won(m, l, r->element[1]->integer);
        m->has = copy_value(m->found, r->elements > 2 ? r->element[2] : NULL);
        m->pttl = r->element[1]->integer;
        return held_by(m, l, m->has ? m->found : NULL, m->pttl, out);

    case A_FLEET:
        return judge_leftover(m, l, in, out);

    case A_TAKE:
        if ((st = relock__reply_check(c, r, "a[i]", "takeover script")) != RELOCK_OK)
            return relock__done(&m->h, st);
        if (r->element[0]->integer == 1)
            return acq_won(m, l, relock__reply_elem_int(r, 1));
        return busy(m, 0);

    case R_GET:
    case R_FENCE:
        return readback(m, l, in, out);
    case W_WATCH:
        if ((st = relock__reply_check(c, r, "s", "WATCH")) != RELOCK_OK)
            return relock__done(&m->h, st);
        return relock__send_words(&m->h, out, W_GET, 1, 2, "GET", l->key);
    case W_GET:
        if ((st = relock__reply_check(c, r, "bn", "GET")) != RELOCK_OK)
            return relock__done(&m->h, st);
        m->has = copy_value(m->found, r);
        m->pttl = -2;
        if (!m->has)
            return watch_decide(m, out);
        return relock__send_words(&m->h, out, W_PTTL, 1, 2, "PTTL", l->key);
    case W_PTTL:
        if ((st = relock__reply_check(c, r, "i", "PTTL")) != RELOCK_OK)
            return relock__done(&m->h, st);
        m->pttl = r->integer;
        return watch_decide(m, out);
    case W_UNWATCH:
        /* Any reply ends the WATCH.  Taking over, the leftover changed:
         * look again; else judge the holder. */
        if (m->way == RELOCK__MW_TAKEOVER)
            return busy(m, 0);
        return held_by(m, l, m->found, m->pttl, out);
    case W_MULTI:
        if ((st = relock__reply_check(c, r, "s", "MULTI")) != RELOCK_OK)
            return relock__done(&m->h, st);
        relock__batch_reset(out);
        relock__batch_words(out, 5, "SET", l->key, l->value, "PX", key_ttl(out, c, l->ttl_ms));
        return relock__send_at(&m->h, out, W_SET, 1);
    case W_SET:
    case W_INCR:
        if ((st = relock__reply_check(c, r, "s", m->h.pc == W_SET ? "SET" : "INCR")) != RELOCK_OK)
            return relock__done(&m->h, st);
        if (m->h.pc == W_SET && c->s.fencing)
            return relock__send_words(&m->h, out, W_INCR, 1, 2, "INCR", l->fence_key);
        return relock__send_words(&m->h, out, W_EXEC, 0, 1, "EXEC");
    case W_EXEC:
        if (r->type == REDIS_REPLY_NIL)
            return busy(m, 0); /* someone wrote the key meanwhile: look again */
        if (relock__reply_is(r, c->s.fencing ? "a[si$]" : "a[s$]"))
            return acq_won(m, l, c->s.fencing ? r->element[1]->integer : 0);
        st = RELOCK__BAD_REPLY(c, "EXEC of the acquire", r);
        m->h.in_txn = 1; /* the connection's state is unknown: dropped */
        return relock__done(&m->h, st);
    default:
        return relock__done(&m->h, RELOCK__FAIL(&c->err, RELOCK_EPROTO,
                                                "acquire %s: internal error (step %d)", l->name,
                                                m->h.pc));
    }
}

/* ------------------------------------------------------------------ release and extend */

enum cx_pc {
    X_START = 0,
    X_NATIVE,  /* DELIFEQ / DELEX IFEQ (and the notice) or SET IFEQ sent */
    X_SCRIPT,  /* the compare-and-X script sent */
    C_WATCH,   /* WATCH sent (in the transaction from here) */
    C_GET,     /* GET sent */
    C_UNWATCH, /* not ours: UNWATCH sent, ending the transaction */
    C_MULTI,   /* MULTI sent */
    C_WRITE,   /* DEL or PEXPIRE queued */
    C_PUBLISH, /* the notice queued */
    C_EXEC     /* EXEC sent, ending the transaction */
};

void relock__modern_cx_init(relock__modern_cx *m, int extend, long long ttl_ms)
{
    /* The channel is read only as the string cx_start() writes: its first
     * byte is cleared, not its whole 1.3 KB. */
    memset(m, 0, offsetof(relock__modern_cx, chan));
    m->chan[0] = '\0';
    m->h.hint_ms = -1;
    m->extend = extend;
    m->ttl_ms = ttl_ms;
}

static const char *cx_op(const relock__modern_cx *m)
{
    return m->extend ? "extend" : "release";
}

static relock__step cx_ok(relock__modern_cx *m, relock_lock *l)
{
    if (m->extend) {
        l->ttl_ms = m->ttl_ms;
        l->valid_until = relock__valid_until(m->start, m->ttl_ms);
    }
    return relock__done(&m->h, RELOCK_OK);
}

/* The lock is gone or another's: nothing was written. */
static relock__step cx_lost(relock__modern_cx *m, relock_lock *l, const relock__feed *in,
                            const char *why)
{
    int expired = l->valid_until && in->mono_ms >= l->valid_until;
    return relock__done(&m->h, RELOCK__FAIL(&l->c->err, RELOCK_LOST, "%s %s: lock lost: %s",
                                            cx_op(m), l->name, expired ? "it expired" : why));
}

/* The request may have run: the lock's state is unknown. */
static relock__step cx_ambiguous(relock__modern_cx *m, relock_lock *l)
{
    relock_client *c = l->c;
    relock__err_clear(&c->err); /* the I/O error is the lesser news */
    return relock__done(&m->h, RELOCK__FAIL(&c->err, RELOCK_EAMBIGUOUS,
                                            "%s %s: connection lost after the request was "
                                            "sent; the lock's state is unknown",
                                            cx_op(m), l->name));
}

/* A fault on the one write of the native and script ways. */
static relock__step cx_fault(relock__modern_cx *m, relock_lock *l, const relock__feed *in)
{
    if (in->fault == RELOCK__FAULT_LOST)
        return cx_ambiguous(m, l);
    return relock__done(&m->h, relock__fault_fail(l->c, in));
}

static relock__step cx_send_script(relock__modern_cx *m, relock_lock *l, relock__batch *out)
{
    relock_client *c = l->c;
    relock__batch_reset(out);
    const char *args[] = {l->key, l->value, m->extend ? key_ttl(out, c, m->ttl_ms) : m->chan};
    int id = m->extend ? RELOCK__SCRIPT_PEXPIRE_IF_EQ : RELOCK__SCRIPT_DEL_IF_EQ;
    relock__batch_script(out, c, id, 1, 3, args, m->by_eval);
    return relock__send_at(&m->h, out, X_SCRIPT, 0);
}

static relock__step cx_watch(relock__modern_cx *m, relock_lock *l, relock__batch *out)
{
    m->tries++;
    return relock__send_words(&m->h, out, C_WATCH, 1, 2, "WATCH", l->key);
}

static relock__step cx_start(relock__modern_cx *m, relock_lock *l, const relock__feed *in,
                             relock__batch *out)
{
    relock_client *c = l->c;
    m->start = in->mono_ms;
    relock__batch_reset(out);
    if (m->extend) {
        /* From its write on, the server may hold the new lease whatever
         * we hear back: a shorter one shortens our validity now, and it
         * stays so unless the extend succeeds (cx_ok), even when the
         * extend fails before it writes. */
        l->valid_until = relock__valid_min(l->valid_until,
                                           relock__valid_until(m->start, m->ttl_ms));
        m->way = extend_path(c);
    } else {
        m->notify = relock__notify_channel(l, m->chan, sizeof m->chan);
        m->way = release_path(c);
    }
    switch (m->way) {
    case RELOCK__MW_WATCH:
        m->notify = m->notify && m->chan[0];
        return cx_watch(m, l, out);
    case RELOCK__MW_SCRIPT:
        return cx_send_script(m, l, out);
    case RELOCK__MW_SET_IFEQ:
        /* OK when it was ours, nil when absent or another value (IFEQ
         * never creates a key). */
        relock__batch_words(out, 7, "SET", l->key, l->value, "IFEQ", l->value, "PX",
                            key_ttl(out, c, m->ttl_ms));
        break;
    default:
        /* 1 deleted, 0 absent or another value.  The notice rides in the
         * same round trip, even when the lock turns out lost: at worst
         * waiters wake for one look. */
        if (m->way == RELOCK__MW_DELIFEQ)
            relock__batch_words(out, 3, "DELIFEQ", l->key, l->value);
        else
            relock__batch_words(out, 4, "DELEX", l->key, "IFEQ", l->value);
        if (m->notify)
            relock__batch_words(out, 3, "PUBLISH", m->chan, "1");
    }
    return relock__send_at(&m->h, out, X_NATIVE, 0);
}

static relock__step cx_native(relock__modern_cx *m, relock_lock *l, const relock__feed *in)
{
    relock_client *c = l->c;
    if (in->nreply == 0)
        return cx_fault(m, l, in);
    /* With the notice: the compare-and-delete answered; a lost notice is
     * no failure. */
    if (in->fault)
        relock__err_clear(&c->err);
    const redisReply *r = in->reply[0];
    int ifeq = m->way == RELOCK__MW_SET_IFEQ; /* it answers OK or nil, a delete 1 or 0 */
    relock_status st = relock__reply_check(c, r, ifeq ? "sn" : "i",
                                           ifeq ? "SET IFEQ" : way_name[m->way]);
    if (st != RELOCK_OK)
        return relock__done(&m->h, st);
    if (ifeq ? r->type == REDIS_REPLY_NIL : r->integer != 1)
        return cx_lost(m, l, in, "the key was deleted, expired or holds another value");
    const redisReply *n = in->nreply > 1 ? in->reply[1] : NULL;
    if (!ifeq)
        l->waiters = n && n->type == REDIS_REPLY_INTEGER ? (int)n->integer : 0;
    return cx_ok(m, l);
}

/* A compare-and-X script's result: 1 + waiters told (release) or 1 done;
 * 0 absent; -1 another value. */
static relock__step cx_script(relock__modern_cx *m, relock_lock *l, const relock__feed *in,
                              relock__batch *out)
{
    relock_client *c = l->c;
    if (relock__script_again(in, 0, &m->by_eval))
        return cx_send_script(m, l, out);
    if (in->fault)
        return cx_fault(m, l, in);
    const redisReply *r = in->reply[0];
    relock_status st = relock__reply_check(c, r, "i", cx_op(m));
    if (st != RELOCK_OK)
        return relock__done(&m->h, st);
    if (r->integer >= 1) {
        l->waiters = (int)(r->integer - 1); /* release: waiters told */
        return cx_ok(m, l);
    }
    if (r->integer == 0)
        return cx_lost(m, l, in, "the key was deleted or expired");
    return relock__done(&m->h, RELOCK__FAIL(&c->err, RELOCK_LOST,
                                            "%s %s: lock lost: taken by another value",
                                            cx_op(m), l->name));
}

relock__step relock__modern_cx_step(void *vm, relock_lock *l, const relock__feed *in,
                                    relock__batch *out)
{
    relock__modern_cx *m = vm;
    if (m->h.pc == X_START)
        return cx_start(m, l, in, out);
    if (m->h.pc == X_NATIVE)
        return cx_native(m, l, in);
    if (m->h.pc == X_SCRIPT)
        return cx_script(m, l, in, out);
    /* Without Lua or a native command: WATCH, GET, and only if it holds
     * our token, MULTI, the write (DEL and the notice, or PEXPIRE), EXEC.
     * A write by anyone before EXEC makes it fail, and we look again. */
    relock_client *c = l->c;
    const redisReply *r = in->nreply > 0 ? in->reply[0] : NULL;
    relock_status st;
    if (in->fault) {
        if (m->h.pc == C_EXEC && in->fault == RELOCK__FAULT_LOST)
            return cx_ambiguous(m, l);
        st = relock__fault_fail(c, in);
        if (m->h.pc != C_UNWATCH)
            return relock__done(&m->h, st);
        /* the lock was lost all the same */
    }
    switch (m->h.pc) {
    case C_WATCH:
        if ((st = relock__reply_check(c, r, "s", "WATCH")) != RELOCK_OK)
            return relock__done(&m->h, st);
        return relock__send_words(&m->h, out, C_GET, 1, 2, "GET", l->key);
    case C_GET: {
        if ((st = relock__reply_check(c, r, "bn", "GET")) != RELOCK_OK)
            return relock__done(&m->h, st);
        char found[RELOCK__VALUE_MAX];
        m->absent = !copy_value(found, r);
        if (m->absent || strcmp(found, l->value) != 0)
            return relock__send_words(&m->h, out, C_UNWATCH, 0, 1, "UNWATCH");
        return relock__send_words(&m->h, out, C_MULTI, 1, 1, "MULTI");
    }
    case C_UNWATCH:
        return cx_lost(m, l, in,
                       m->absent ? "the key was deleted or expired" : "taken by another value");
    case C_MULTI:
        if ((st = relock__reply_check(c, r, "s", "MULTI")) != RELOCK_OK)
            return relock__done(&m->h, st);
        if (!m->extend)
            return relock__send_words(&m->h, out, C_WRITE, 1, 2, "DEL", l->key);
        relock__batch_reset(out);
        relock__batch_words(out, 3, "PEXPIRE", l->key, key_ttl(out, c, m->ttl_ms));
        return relock__send_at(&m->h, out, C_WRITE, 1);
    case C_WRITE:
    case C_PUBLISH: {
        const char *what = m->h.pc == C_PUBLISH ? "PUBLISH" : m->extend ? "PEXPIRE" : "DEL";
        if ((st = relock__reply_check(c, r, "s", what)) != RELOCK_OK)
            return relock__done(&m->h, st);
        if (m->h.pc == C_WRITE && !m->extend && m->notify)
            return relock__send_words(&m->h, out, C_PUBLISH, 1, 3, "PUBLISH", m->chan, "1");
        return relock__send_words(&m->h, out, C_EXEC, 0, 1, "EXEC");
    }
    case C_EXEC:
        if (r->type == REDIS_REPLY_NIL) {
            if (m->tries < RELOCK__MODERN_WATCH_TRIES)
                return cx_watch(m, l, out);
            return relock__done(&m->h, RELOCK__FAIL(&c->err, RELOCK_EIO,
                                                    "%s %s: the key kept changing between WATCH "
                                                    "and EXEC; not done",
                                                    cx_op(m), l->name));
        }
        if (relock__reply_is(r, "a[i]")) {
            if (r->element[0]->integer != 1) /* ours at the GET, gone at EXEC */
                return cx_lost(m, l, in, "it expired");
            if (m->notify && !m->extend && r->elements > 1 &&
                r->element[1]->type == REDIS_REPLY_INTEGER)
                l->waiters = (int)r->element[1]->integer;
            return cx_ok(m, l);
        }
        st = RELOCK__BAD_REPLY(c, "EXEC", r);
        m->h.in_txn = 1; /* the connection's state is unknown: dropped */
        return relock__done(&m->h, st);
    default:
        return relock__done(&m->h, RELOCK__FAIL(&c->err, RELOCK_EPROTO,
                                                "%s %s: internal error (step %d)", cx_op(m),
                                                l->name, m->h.pc));
    }
}

/* The operation core's machines: the driver draws the token. */
static relock_status modern_acq_init(void *m, relock_lock *l)
{
    relock__modern_acq_init(m);
    return relock__token_for(l->c, "acquire", l->name, l->value);
}

static relock_status modern_cx_init(void *m, relock_lock *l, int extend, long long ttl_ms)
{
    (void)l;
    relock__modern_cx_init(m, extend, ttl_ms);
    return RELOCK_OK;
}

const relock__machines relock__modern_machines = {
    sizeof(relock__modern_acq), modern_acq_init, relock__modern_acq_step,
    sizeof(relock__modern_cx),  modern_cx_init,  relock__modern_cx_step, NULL,
};
