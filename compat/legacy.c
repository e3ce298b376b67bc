/*
 * The timestamp algorithms (design.md §4-5): legacy mode, and bridge mode, which
 * writes the same values plus a TTL, so that the server cleans up after dead
 * holders while legacy readers still see the lock as held.  compat/ts.h draws
 * each machine's steps; src/base/lease.c does the lease arithmetic (the value
 * written, when a legacy reader and our clients take it over, the TTL).
 *
 * Ownership.  Timestamps repeat (two holders in one second write the same
 * value), so release and extend also compare the fence counter of
 * design.md §6.3 (nobody acquired since us) and, in bridge mode, require
 * the TTL (a legacy writer leaves none).
 *
 * GETSET losers (design.md §4.7).  A legacy client that lost a takeover
 * race still wrote its own timestamp over ours (clearing any TTL); while
 * our validity remains, release and extend follow it only under the fence
 * compare, which every relock acquisition and break moves.  On 2.0 the
 * fence also counts failed attempts and proves nothing: a different value
 * there is LOST, and so is our own once the lock was broken since we won
 * (RELOCK__BREAK_EPOCH).  What remains: a classic client's DEL of a key it
 * no longer owns, followed by a classic SETNX, moves no fence, and looks
 * like a loser's write (docs/legacy.md).
 *
 * Never sends a command the server lacks: the path (EVAL, WATCH or plain)
 * is chosen from the probed capabilities; bridge mode needs EVAL.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compat.h"
#include "ts.h"
#include "engine/fan.h"

static int is_bridge(const relock_client *c)
{
    return c->mode == RELOCK_MODE_BRIDGE;
}

static relock__ts_path path_of(const relock_client *c)
{
    if (c->conn.caps & RELOCK_CAP_EVAL)
        return RELOCK__TS_EVAL;
    if (c->conn.caps & RELOCK_CAP_WATCH)
        return RELOCK__TS_WATCH;
    return RELOCK__TS_PLAIN;
}

static long long unit_ms(const relock_client *c)
{
    return c->s.legacy.unit_ms ? 1 : 1000;
}

static relock__lease_cfg lease_cfg(const relock_client *c)
{
    return (relock__lease_cfg){unit_ms(c),         c->s.legacy.expiry_offset,
                               c->s.legacy.skew_margin_ms, is_bridge(c),
                               c->s.legacy.gc_expire,      c->s.legacy.readers,
                               c->s.legacy.frac_values};
}

/* Plans the lease ls of ttl_ms at fleet time now, and the value to store
 * for it: the timestamp alone (with its fraction to the millisecond under
 * legacy.values = "fractional"), or in bridge mode with bridge.value_suffix
 * ":token" (tok, drawn by the caller), which makes every value unique for
 * legacy parsers that read only the leading integer (the configuration
 * never combines the two). */
static void plan_value(const relock_client *c, long long now, long long ttl_ms, const char *tok,
                       relock__lease *ls, char *out, size_t len)
{
    relock__lease_cfg cfg = lease_cfg(c);
    relock__lease_plan(&cfg, now, ttl_ms, ls);
    if (ls->frac)
        snprintf(out, len, "%lld.%03lld", ls->ts, ls->v_ms - ls->ts * unit_ms(c));
    else if (!is_bridge(c) || !c->s.bridge.value_suffix)
        snprintf(out, len, "%lld", ls->ts);
    else
        snprintf(out, len, "%lld:%.32s", ls->ts, tok);
}

/* When a stored timestamp stops holding the lock for our clients (ms). */
static long long ends_at(const relock_client *c, const relock__value *v)
{
    relock__lease_cfg cfg = lease_cfg(c);
    relock__stamp st;
    relock__value_stamp(v, &st);
    return relock__lease_ours_end(&cfg, &st);
}

/* Whether val is a timestamp in the fleet's unit: one of the other unit
 * (or of none) is no lease of this fleet's, and read in its unit it would
 * last for millennia. */
static int fleet_ts(const relock_client *c, const relock__value *val)
{
    return val->kind == RELOCK_VALUE_TIMESTAMP &&
           relock__ts_unit_guess(val->ts_digits) == c->s.legacy.unit_ms;
}

/* RELOCK_OK when the value v found in the key (classified as val) is a
 * timestamp of the configured unit; anything else is never taken over:
 * RELOCK_EFOREIGN naming the key. */
static relock_status check_ts(relock_lock *l, const char *v, const relock__value *val)
{
    relock_client *c = l->c;
    if (val->kind != RELOCK_VALUE_TIMESTAMP)
        return RELOCK__FAIL(&c->err, RELOCK_EFOREIGN,
                            "key %s holds \"%.40s\", which is not a legacy timestamp; it is "
                            "never taken over (a modern holder, or another program's key?)",
                            l->key, v);
    if (!fleet_ts(c, val))
        return RELOCK__FAIL(&c->err, RELOCK_EFOREIGN,
                            "key %s holds %lld (%d digits), which is not a timestamp in %s as "
                            "legacy.clock_unit says (%d digits expected); never taken over: "
                            "does the fleet mix clock units?",
                            l->key, val->ts, val->ts_digits, c->s.legacy.unit_ms ? "ms" : "s",
                            c->s.legacy.unit_ms ? 13 : 10);
    return RELOCK_OK;
}

/* Whether this handle won its lock itself and its validity remains at
 * monotonic time mono: then nobody can have taken the lock over
 * legitimately (design.md §4.7). */
static int holds_validity(const relock_lock *l, uint64_t mono)
{
    return l->acquired && l->valid_until && mono < l->valid_until;
}

/* Whether a value found in place of ours may be a GETSET loser's write,
 * to be followed under the fence check (see the top of the file). */
static int is_loser_write(relock_lock *l, relock__ts_path path, const char *v, uint64_t mono)
{
    /* Only a handle that won the lock itself knows its validity for sure;
     * an adopted one could be anybody's claim.  Without WATCH or EVAL
     * (2.0) the fence cannot tell a loser from a new holder: never. */
    if (!holds_validity(l, mono) || path == RELOCK__TS_PLAIN)
        return 0;
    relock__value val;
    relock__classify(v, strlen(v), &val);
    return fleet_ts(l->c, &val) && strcmp(v, l->value) != 0;
}

static relock_status ambiguous(relock_lock *l, const char *op)
{
    relock__err_clear(&l->c->err); /* the I/O error is the lesser news */
    return RELOCK__FAIL(&l->c->err, RELOCK_EAMBIGUOUS,
                        "%s %s: connection lost after the request was sent; the lock's state "
                        "is unknown",
                        op, l->name);
}

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

/* Ends m with an error recorded on l's client (at the caller's line). */
#define END_FAIL(m, l, st, ...)                                                                  \
    relock__done(&(m)->head, RELOCK__FAIL(&(l)->c->err, (st), __VA_ARGS__))

/* Sends one command of two or three words (w2 NULL) from step pc. */
static relock__step send1(relock__mhead *h, int pc, relock__batch *out, const char *w0,
                          const char *w1, const char *w2)
{
    relock__batch_reset(out);
    const char *argv[] = {w0, w1, w2};
    relock__batch_add(out, w2 ? 3 : 2, argv);
    h->pc = pc;
    return relock__send(h, out);
}

/* ------------------------------------------------------------ acquire */

enum { A_START = 0, A_SCRIPT, A_READBACK, A_SETNX_CAS, A_SETNX_FW, A_GET, A_LOOK, A_TAKE_CAS,
       A_TAKE_GETSET, A_FRESH };

/* Wins the lock: records the fence and the validity the value and TTL
 * written allow, counted from the moment before the clock was read. */
static relock__step won(relock__ts_acquire *m, relock_lock *l, long long fence)
{
    l->acquired = 1;
    l->fence = fence;
    l->valid_until = m->start + (uint64_t)m->ls.valid_ms;
    return relock__done(&m->head, RELOCK_OK);
}

static relock__step busy(relock__ts_acquire *m, relock_lock *l, long long hint)
{
    m->head.hint_ms = hint > 0x7fffffffLL ? 0x7fffffffL : (long)hint;
    l->looked = 1;
    return relock__done(&m->head, RELOCK_BUSY);
}

static relock__step a_script(relock__ts_acquire *m, relock_lock *l, relock__batch *out)
{
    relock__batch_reset(out);
    const char *args[] = {l->key,
                          l->fence_key,
                          l->value,
                          relock__batch_num(out, m->ls.px_ms),
                          relock__batch_num(out, m->ls.gc_s),
                          "1"};
    relock__batch_script(out, l->c, RELOCK__SCRIPT_TS_ACQUIRE, 2, 6, args, m->by_eval);
    m->head.pc = A_SCRIPT;
    return relock__send(&m->head, out);
}

/* A compare-and-set of the lock key from `expected` (NULL: absent) to our
 * value, with the fence increment; on 2.0 the fenced write plain. */
static relock__step a_write(relock__ts_acquire *m, relock_lock *l, const char *expected,
                            const char *plain, int pc, relock__batch *out)
{
    m->cas = (relock__cas){.script = m->path == RELOCK__TS_EVAL, .plain = plain,
                           .expected = expected, .newv = l->value,
                           .px = expected ? m->ls.px_ms : 0, .gc = m->ls.gc_s, .incr = 1};
    m->head.pc = pc;
    return relock__cas_start(&m->cas, &m->head, l, out);
}

/* The lock is held with the value of len bytes at v (NULL: gone meanwhile),
 * kept in m->old, and TTL pttl (-1 none, -3 unknown): wait, or take it over
 * if it has expired. */
static relock__step held_by(relock__ts_acquire *m, relock_lock *l, const char *v, size_t len,
                            long long pttl, relock__batch *out)
{
    relock_client *c = l->c;
    if (!v)
        return busy(m, l, 0); /* released meanwhile: try again at once */
    relock__value_text(m->old, sizeof m->old, v, len);
    const char *found = m->old;
    relock__value ts;
    relock__classify(found, strlen(found), &ts);
    /* Bridge mode respects the TTL of anything but a fleet's timestamp: a
     * modern holder (a fleet rolling back), another library's token, or
     * another program's lock (SET NX PX, SETEX, SETNX + EXPIRE), which the
     * server ends, as modern mode does (docs/migration.md, coexistence).
     * PTTL 0: the key ends within the millisecond (a script sees the time
     * frozen at its start): it has a TTL all the same. */
    if (is_bridge(c) && pttl >= 0 && !fleet_ts(c, &ts))
        return busy(m, l, pttl);
    relock_status st = check_ts(l, found, &ts);
    if (st != RELOCK_OK)
        return relock__done(&m->head, st);
    long long wait = ends_at(c, &ts) - m->now;
    if (is_bridge(c) && pttl > 0 && pttl < wait)
        wait = pttl; /* a bridge holder: the server ends it with its TTL */
    /* A timestamp without TTL, live or a dead holder's leftover, is a
     * legacy writer's (a bridge client always adds a TTL): a sighting. */
    if (is_bridge(c) && pttl == -1)
        m->head.note_legacy = 1;
    if (wait > 0) {
        /* Legacy mode cannot tell (no PTTL before 2.6); bridge can. */
        l->legacy_holder = !is_bridge(c) || pttl == -1;
        return busy(m, l, wait);
    }
    /* Expired: take it over, atomically from the value read where the
     * server can; on 2.0 by GETSET, the classic way. */
    if (!m->fresh && c->s.legacy.clock_server) {
        /* Never on a reading of the server's clock taken before the value
         * was (see the machines' starts, below): the value is judged again
         * on a new reading (A_FRESH); a value written after that reading is
         * not the one found, and the compare-and-set refuses it. */
        m->pttl = pttl;
        m->head.want_fleet = RELOCK__FLEET_FRESH;
        m->head.pc = A_FRESH;
        relock__batch_reset(out);
        return relock__send(&m->head, out);
    }
    if (m->path != RELOCK__TS_PLAIN)
        return a_write(m, l, m->old, NULL, A_TAKE_CAS, out);
    return a_write(m, l, NULL, "GETSET", A_TAKE_GETSET, out);
}

/* The reply to a GET of the key (A_GET, A_LOOK). */
static relock__step a_got(relock__ts_acquire *m, relock_lock *l, const relock__feed *in,
                          relock__batch *out)
{
    relock_client *c = l->c;
    if (in->fault)
        return relock__done(&m->head, relock__fault_fail(c, in));
    const redisReply *r = in->reply[0];
    relock_status st = relock__reply_check(c, r, "bn", "GET");
    if (st != RELOCK_OK)
        return relock__done(&m->head, st);
    if (r->type == REDIS_REPLY_NIL && m->head.pc == A_LOOK)
        return a_write(m, l, NULL, "SETNX", A_SETNX_FW, out); /* free: now write */
    return held_by(m, l, r->type == REDIS_REPLY_STRING ? r->str : NULL, r->len, -3, out);
}

/* Plans the lease on the feed's times and puts the value to write in
 * l->value; the error when the fleet's clock could not be read. */
static relock_status a_plan(relock__ts_acquire *m, relock_lock *l, const relock__feed *in)
{
    relock_client *c = l->c;
    m->head.want_fleet = 0;
    if (in->fault)
        return relock__fault_fail(c, in);
    m->start = in->mono_ms;
    m->now = in->fleet_ms;
    plan_value(c, m->now, l->ttl_ms, m->tok, &m->ls, l->value, sizeof l->value);
    return RELOCK_OK;
}

static relock__step a_start(relock__ts_acquire *m, relock_lock *l, const relock__feed *in,
                            relock__batch *out)
{
    relock_client *c = l->c;
    memcpy(m->tok, l->value, 32); /* the caller's token (suffix), if any */
    m->tok[32] = '\0';
    relock_status st = a_plan(m, l, in);
    if (st != RELOCK_OK)
        return relock__done(&m->head, st);
    m->path = path_of(c);
    if (m->path == RELOCK__TS_EVAL)
        return a_script(m, l, out);
    /* SETNX under WATCH: set only if absent, with the fence in the same
     * transaction, so the fence counts acquisitions only. */
    if (m->path == RELOCK__TS_WATCH)
        return a_write(m, l, NULL, NULL, A_SETNX_CAS, out);
    /* 2.0: a waiter that has seen the lock held looks before it writes
     * (compat/ts.h says why). */
    if (l->looked)
        return send1(&m->head, A_LOOK, out, "GET", l->key, NULL);
    return a_write(m, l, NULL, "SETNX", A_SETNX_FW, out);
}

relock__step relock__ts_acquire_step(void *mm, relock_lock *l, const relock__feed *in,
                                     relock__batch *out)
{
    relock__ts_acquire *m = mm;
    relock_client *c = l->c;
    switch (m->head.pc) {
    case A_START:
        return a_start(m, l, in, out);
    case A_SCRIPT: {
        if (relock__script_again(in, 0, &m->by_eval))
            return a_script(m, l, out);
        if (in->fault) {
            m->io_st = relock__fault_fail(c, in);
            if (in->fault != RELOCK__FAULT_LOST)
                return relock__done(&m->head, m->io_st);
            return send1(&m->head, A_READBACK, out, "GET", l->key, NULL);
        }
        const redisReply *r = in->reply[0];
        relock_status st = relock__reply_check(c, r, "a[??]", "SETNX script");
        if (st != RELOCK_OK)
            return relock__done(&m->head, st);
        /* {1, fence} when won, else {0, the PTTL, the value found} */
        if (relock__reply_elem_int(r, 0) == 1)
            return won(m, l, relock__reply_elem_int(r, 1));
        const redisReply *v = r->elements > 2 ? r->element[2] : NULL;
        int has = v && v->type == REDIS_REPLY_STRING;
        return held_by(m, l, has ? v->str : NULL, has ? v->len : 0, relock__reply_elem_int(r, 1),
                       out);
    }
    case A_READBACK: {
        /* After a lost reply to SETNX: timestamps are not unique, so
         * finding our value in the key proves nothing.  An error reply
         * (-LOADING from a restarted server that may have kept the SETNX)
         * says nothing about the key: ambiguous too. */
        if (in->fault || !relock__reply_is(in->reply[0], "bn"))
            return relock__done(&m->head, ambiguous(l, "acquire"));
        const redisReply *r = in->reply[0];
        int same = r->type == REDIS_REPLY_STRING && strcmp(r->str, l->value) == 0;
        if (!same) /* the SETNX did not take effect: its I/O error stands */
            return relock__done(&m->head, m->io_st);
        relock__err_clear(&c->err);
        return END_FAIL(m, l, RELOCK_EAMBIGUOUS,
                        "acquire %s: connection lost after SETNX; the key holds a value equal "
                        "to ours, which may be ours or another holder's: not claimed",
                        l->name);
    }
    case A_SETNX_CAS:
    case A_TAKE_CAS:
    case A_SETNX_FW:
    case A_TAKE_GETSET: {
        if (relock__cas_step(&m->cas, &m->head, l, in, out) == RELOCK__STEP_SEND)
            return RELOCK__STEP_SEND;
        if (m->cas.st != RELOCK_OK && m->cas.ambiguous && m->head.pc == A_SETNX_FW) {
            m->io_st = m->cas.st;
            return send1(&m->head, A_READBACK, out, "GET", l->key, NULL);
        }
        if (m->cas.st != RELOCK_OK)
            return relock__done(&m->head,
                                m->cas.ambiguous ? ambiguous(l, "acquire") : m->cas.st);
        /* A GETSET won only if what it replaced had itself expired (or was
         * gone: our write created the key); otherwise another client won
         * just before us and our write merely moved its expiry a little
         * (it treats that as a GETSET loser's write).  A timestamp of the
         * other unit, written since our GET, proves nothing. */
        const char *found = m->cas.found;
        const relock__value *v = &m->cas.old_v;
        int win = m->head.pc != A_TAKE_GETSET
                      ? m->cas.done
                      : m->cas.old_nil ||
                            (found[0] && fleet_ts(c, v) && m->now >= ends_at(c, v));
        if (win && m->cas.plain) {
            /* 2.0: the break counter read in the transaction that won. */
            l->breaks = m->cas.breaks;
            l->breaks_known = m->cas.breaks >= 0;
        }
        if (win)
            return won(m, l, m->cas.fence_out);
        if (m->head.pc == A_SETNX_FW)
            return send1(&m->head, A_GET, out, "GET", l->key, NULL);
        if (m->cas.beaten || m->head.pc != A_SETNX_CAS)
            return busy(m, l, 0); /* someone else was first; look again soon */
        return held_by(m, l, found[0] ? found : NULL, strlen(found), -3, out);
    }
    case A_GET:
    case A_LOOK:
        return a_got(m, l, in, out);
    case A_FRESH: {
        /* The server's clock, read afresh: the lease is planned on it
         * (nothing was written with the earlier plan) and the value found
         * judged again. */
        relock_status st = a_plan(m, l, in);
        if (st != RELOCK_OK)
            return relock__done(&m->head, st);
        m->fresh = 1;
        return held_by(m, l, m->old, strlen(m->old), m->pttl, out);
    }
    default:
        return END_FAIL(m, l, RELOCK_EPROTO, "acquire %s: internal error: step %d", l->name,
                        m->head.pc);
    }
}

/* ------------------------------------------------------------ release, extend */

enum { U_START = 0, U_CAS, U_READ, U_DEL, U_PUBLISH, U_GETSET };

/* A 2.0 extend's GETSET whose reply was lost may have written v: kept
 * (l->unsure_value) until the next read of the key (v NULL: forgotten).
 * Without memory for it, a later renewal that finds v reports the lock
 * lost: the safe side. */
static void unsure_note(relock_lock *l, const char *v)
{
    free(l->unsure_value);
    l->unsure_value = v ? strdup(v) : NULL;
}

/* The extend succeeded: the new value and lease are the lock's. */
static relock__step u_ok(relock__ts_update *m, relock_lock *l)
{
    if (m->extend) {
        snprintf(l->value, sizeof l->value, "%s", m->newv);
        unsure_note(l, NULL);
        l->ttl_ms = m->ttl_ms;
        l->valid_until = m->start + (uint64_t)m->ls.valid_ms;
    }
    return relock__done(&m->head, RELOCK_OK);
}

/* An extend has begun: its lease caps our validity (relock__valid_min()),
 * until it succeeds (u_ok), even when it fails before it writes. */
static void cap_validity(const relock__ts_update *m, relock_lock *l)
{
    l->valid_until = relock__valid_min(l->valid_until, m->start + (uint64_t)m->ls.valid_ms);
}

static relock__step u_cas(relock__ts_update *m, relock_lock *l, relock__batch *out)
{
    /* The fence proves nobody acquired since us (acquisitions alone count
     * it with WATCH or EVAL).  A loser's write carries no TTL; ours
     * (bridge) always does. */
    m->cas = (relock__cas){.script = m->path == RELOCK__TS_EVAL, .expected = m->expected,
                           .fence = l->fence, .require_ttl = is_bridge(l->c) && !m->following,
                           .newv = m->extend ? m->newv : NULL, .px = m->ls.px_ms,
                           .gc = m->ls.gc_s};
    if (m->extend)
        cap_validity(m, l);
    m->head.pc = U_CAS;
    return relock__cas_start(&m->cas, &m->head, l, out);
}

/* Another round of the compare-and-set, four in all. */
static relock__step u_again(relock__ts_update *m, relock_lock *l, relock__batch *out)
{
    if (++m->round >= 4)
        return END_FAIL(m, l, RELOCK_LOST, "%s %s: lock lost: the key kept changing", m->op,
                        l->name);
    return u_cas(m, l, out);
}

/* The compare-and-set (or -delete) of our value answered: a beaten WATCH
 * is retried, and a loser's write followed once (u_again() bounds both). */
static relock__step u_cas_done(relock__ts_update *m, relock_lock *l, const relock__feed *in,
                               relock__batch *out)
{
    relock_client *c = l->c;
    relock__cas *q = &m->cas;
    if (q->st != RELOCK_OK)
        return relock__done(&m->head, q->ambiguous ? ambiguous(l, m->op) : q->st);
    if (q->done) {
        if (m->following)
            l->loser_writes++;
        if (!m->extend)
            l->waiters = (int)q->fence_out; /* a delete reports the waiters told */
        return u_ok(m, l);
    }
    if (q->beaten) /* the key changed under WATCH: look again */
        return u_again(m, l, out);
    /* A loser's write: a different timestamp, or (bridge) our very value
     * with its TTL cleared, as a legacy GETSET in the same unit leaves it.
     * The fence is still compared when following it. */
    int same_value = is_bridge(c) && strcmp(q->found, l->value) == 0;
    if (!m->following && q->found[0] &&
        (is_loser_write(l, m->path, q->found, in->mono_ms) ||
         (same_value && holds_validity(l, in->mono_ms)))) {
        if (is_bridge(c))
            m->head.note_legacy = 1;
        snprintf(m->expected, sizeof m->expected, "%s", q->found);
        m->following = 1;
        return u_again(m, l, out);
    }
    return relock__done(&m->head, lost(l, m->op, q->found));
}

/* 2.0: the key's value and break counter were read. */
static relock__step u_read(relock__ts_update *m, relock_lock *l, const relock__feed *in,
                           relock__batch *out)
{
    relock_client *c = l->c;
    if (in->fault)
        return relock__done(&m->head, relock__fault_fail(c, in));
    const redisReply *r = in->reply[0];
    relock_status st = relock__reply_check(c, r, "bn", "GET"); /* an error is not a loss */
    if (st != RELOCK_OK)
        return relock__done(&m->head, st);
    char found[RELOCK__VALUE_MAX] = "";
    if (r->type == REDIS_REPLY_STRING)
        snprintf(found, sizeof found, "%s", r->str);
    /* Our own GETSET whose reply was lost: while the lock is valid nobody
     * else can have written since (no takeover of a live lock, a break is
     * seen in its counter below), so the value that GETSET carried is
     * ours. */
    if (l->unsure_value && strcmp(found, l->unsure_value) == 0 && l->valid_until &&
        in->mono_ms < l->valid_until)
        snprintf(l->value, sizeof l->value, "%s", found);
    unsure_note(l, NULL);
    /* A different value is never followed here: on 2.0 a GETSET loser's
     * write cannot be told from a new holder's (see the top of the file). */
    if (strcmp(found, l->value) != 0)
        return relock__done(&m->head, lost(l, m->op, found));
    /* Broken since we won it: its break counter moved (known to a handle
     * that acquired it here), or the fence counter is in a later epoch
     * than our fence (any handle with one, adopted ones too). */
    int broken = 0;
    for (int i = 1; i <= m->read_breaks + m->read_epoch; i++) {
        long long n = relock__ts_counter(in->reply[i]);
        if (n < 0)
            return relock__done(&m->head, RELOCK__BAD_REPLY(c, "GET", in->reply[i]));
        if (i == 1 && m->read_breaks)
            broken = n != l->breaks;
        else
            broken |= n / RELOCK__BREAK_EPOCH > l->fence / RELOCK__BREAK_EPOCH;
    }
    if (broken)
        return END_FAIL(m, l, RELOCK_LOST,
                        "%s %s: lock lost: it was broken (relock_break()) since we acquired it; "
                        "the key's value is another holder's",
                        m->op, l->name);
    if (m->extend)
        return send1(&m->head, U_GETSET, out, "GETSET", l->key, m->newv);
    if (!l->valid_until || in->mono_ms >= l->valid_until)
        return END_FAIL(m, l, RELOCK_LOST,
                        "release %s: lock lost: it expired; not deleted, since without WATCH a "
                        "delete could hit a new holder",
                        l->name);
    return send1(&m->head, U_DEL, out, "DEL", l->key, NULL);
}

static relock__step u_start(relock__ts_update *m, relock_lock *l, const relock__feed *in,
                            relock__batch *out)
{
    relock_client *c = l->c;
    m->head.want_fleet = 0;
    m->op = m->extend ? "extend" : "release";
    if (in->fault) { /* the fleet's clock could not be read */
        if (m->extend) /* nothing written, but a failed extend is held to its lease */
            l->valid_until = relock__valid_min(l->valid_until,
                                               relock__valid_until(in->mono_ms, m->ttl_ms));
        return relock__done(&m->head, relock__fault_fail(c, in));
    }
    m->path = path_of(c);
    if (m->extend) {
        m->start = in->mono_ms;
        plan_value(c, in->fleet_ms, m->ttl_ms, m->tok, &m->ls, m->newv, sizeof m->newv);
    }
    if (m->path != RELOCK__TS_PLAIN) {
        /* No validity check first: the compare is atomic, so a lock whose
         * time has passed but that nobody has taken is still ours. */
        snprintf(m->expected, sizeof m->expected, "%s", l->value);
        return u_cas(m, l, out);
    }
    /*
     * 2.0: no WATCH, no EVAL.  Release: GET then DEL, only while our
     * validity remains: then no other client can have taken the lock over
     * between the two (short of clock skew beyond skew_margin_ms, or a
     * pause of this process between them: the window docs/legacy.md
     * describes).  Extend: GETSET while our validity remains; the old
     * value it returns must be ours.
     */
    if (m->extend && (!l->valid_until || in->mono_ms >= l->valid_until))
        return END_FAIL(m, l, RELOCK_LOST,
                        "extend %s: lock lost: it expired (without WATCH it cannot be extended "
                        "safely after that)",
                        l->name);
    if (m->extend)
        cap_validity(m, l);
    /* Look before writing: a value that is not ours is never written
     * over or deleted, nor one whose lock was broken since we won it. */
    m->read_breaks = l->breaks_known && relock__breaks_key(l->key, m->bkey, sizeof m->bkey) == 0;
    m->read_epoch = l->fence > 0;
    relock__batch_reset(out);
    relock__batch_words(out, 2, "GET", l->key);
    if (m->read_breaks)
        relock__batch_words(out, 2, "GET", m->bkey);
    if (m->read_epoch)
        relock__batch_words(out, 2, "GET", l->fence_key);
    m->head.pc = U_READ;
    return relock__send(&m->head, out);
}

relock__step relock__ts_update_step(void *mm, relock_lock *l, const relock__feed *in,
                                    relock__batch *out)
{
    relock__ts_update *m = mm;
    relock_client *c = l->c;
    switch (m->head.pc) {
    case U_START:
        return u_start(m, l, in, out);
    case U_CAS:
        if (relock__cas_step(&m->cas, &m->head, l, in, out) == RELOCK__STEP_SEND)
            return RELOCK__STEP_SEND;
        return u_cas_done(m, l, in, out);
    case U_READ:
        return u_read(m, l, in, out);
    case U_DEL: {
        if (in->fault)
            return relock__done(&m->head, in->fault == RELOCK__FAULT_LOST
                                              ? ambiguous(l, "release")
                                              : relock__fault_fail(c, in));
        relock_status st = relock__reply_check(c, in->reply[0], "i", "DEL");
        if (st != RELOCK_OK)
            return relock__done(&m->head, st);
        if (in->reply[0]->integer != 1) /* gone between our GET and DEL */
            return relock__done(&m->head, lost(l, "release", ""));
        if (!relock__notify_channel(l, m->chan, sizeof m->chan))
            return relock__done(&m->head, RELOCK_OK);
        /* Best effort: waiters also wake at the expiry they know. */
        return send1(&m->head, U_PUBLISH, out, "PUBLISH", m->chan, "1");
    }
    case U_PUBLISH:
        if (!in->fault && in->reply[0]->type == REDIS_REPLY_INTEGER)
            l->waiters = (int)in->reply[0]->integer;
        relock__err_clear(&c->err);
        return relock__done(&m->head, RELOCK_OK);
    case U_GETSET: {
        if (in->fault == RELOCK__FAULT_LOST)
            unsure_note(l, m->newv);
        if (in->fault)
            return relock__done(&m->head, in->fault == RELOCK__FAULT_LOST
                                              ? ambiguous(l, "extend")
                                              : relock__fault_fail(c, in));
        const redisReply *r = in->reply[0];
        relock_status st = relock__reply_check(c, r, "bn", "GETSET"); /* an error wrote nothing */
        if (st != RELOCK_OK)
            return relock__done(&m->head, st);
        if (r->type == REDIS_REPLY_STRING && strcmp(r->str, l->value) == 0)
            return u_ok(m, l);
        /* A break and a new acquisition fell between our GET and GETSET:
         * as the message says, there are never two holders. */
        return END_FAIL(m, l, RELOCK_LOST,
                        "extend %s: lock lost: the key held %.40s, now overwritten by our new "
                        "timestamp (its holder's next extend or release reports the loss; the "
                        "key stays until that timestamp passes)",
                        l->name, r->type == REDIS_REPLY_STRING ? r->str : "nothing");
    }
    default:
        return END_FAIL(m, l, RELOCK_EPROTO, "%s %s: internal error: step %d", m->op, l->name,
                        m->head.pc);
    }
}

/* ------------------------------------------------------------ adopt */

relock__step relock__ts_adopt_step(void *mm, relock_lock *l, const relock__feed *in,
                                   relock__batch *out)
{
    relock__ts_adopt *m = mm;
    relock_client *c = l->c;
    (void)out;
    m->head.want_fleet = 0;
    relock__value val;
    relock__classify(l->value, strlen(l->value), &val);
    if (in->fault) /* no clock: the validity stays unknown */
        relock__err_clear(&c->err);
    if (in->fault || !fleet_ts(c, &val))
        return relock__done(&m->head, RELOCK_OK);
    /* Valid until legacy readers see it pass, less the drift allowance. */
    relock__lease_cfg cfg = lease_cfg(c);
    relock__stamp st;
    relock__value_stamp(&val, &st);
    long long left = relock__lease_adopted_ms(&cfg, &st, in->fleet_ms);
    if (left > 0)
        l->valid_until = in->mono_ms + (uint64_t)left;
    return relock__done(&m->head, RELOCK_OK);
}

/* ------------------------------------------------------------ starting them */

/*
 * Every lease these machines write, and every validity they derive from a
 * timestamp, rests on a reading of the fleet's clock taken within the same
 * operation (RELOCK__FLEET_FRESH; legacy.clock = "server": TIME read
 * afresh).  An earlier estimate is wrong by any step of the server's clock
 * since: a step back makes a lock written since look expired (a takeover of
 * a live lock), a step forward makes us write a lease that had ended.
 */
void relock__ts_adopt_init(relock__ts_adopt *m)
{
    *m = (relock__ts_adopt){.head = {.want_fleet = RELOCK__FLEET_FRESH, .hint_ms = -1}};
}

/* A bridge value's suffix token into out (33 bytes) when bridge.value_suffix
 * asks for one, else ""; a failure is "OP NAME: no random bytes ...". */
static relock_status bridge_suffix(relock_lock *l, const char *op, char *out)
{
    const relock_client *c = l->c;
    out[0] = '\0';
    if (!is_bridge(c) || !c->s.bridge.value_suffix)
        return RELOCK_OK;
    return relock__token_for(l->c, op, l->name, out);
}

/* The operation core's machines; the driver draws the randomness (engine
 * conventions): bridge.value_suffix's token. */
static relock_status ts_acq_init(void *mm, relock_lock *l)
{
    relock__ts_acquire *m = mm;
    *m = (relock__ts_acquire){.head = {.want_fleet = RELOCK__FLEET_FRESH, .hint_ms = -1}};
    return bridge_suffix(l, "acquire", l->value);
}

static relock_status ts_upd_init(void *mm, relock_lock *l, int extend, long long ttl_ms)
{
    relock__ts_update *m = mm;
    /* The extend plans a new lease. */
    *m = (relock__ts_update){.head = {.want_fleet = extend ? RELOCK__FLEET_FRESH : 0,
                                      .hint_ms = -1},
                             .extend = extend, .ttl_ms = ttl_ms};
    return extend ? bridge_suffix(l, "extend", m->tok) : RELOCK_OK;
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

const relock__machines relock__ts_machines = {
    sizeof(relock__ts_acquire), ts_acq_init, relock__ts_acquire_step,
    sizeof(relock__ts_update),  ts_upd_init, relock__ts_update_step, NULL,
};
