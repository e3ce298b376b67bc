/*
 * Earlier versions counted the fences of a whole-tag key such as "{a}" in
 * the counter of "a".  Its own counter is raised to that one before each
 * acquisition, so no token handed out under the old name is handed out
 * again or undercut (decision 82): by a script, by a transaction on a
 * server without Lua, or before 2.6 by a SETNX of the old value.  A lost
 * reply is a plain failure, not an ambiguous one: the raise may run twice.
 */
#include <stdlib.h>
#include <string.h>

#include "fence.h"

enum fence_pc {
    F_START = 0,
    F_SCRIPT,  /* the carry script sent */
    F_GET,     /* before 2.6: GET of the old counter sent */
    F_SETNX,   /* before 2.6: SETNX of the new counter sent */
    F_WATCH,   /* WATCH of both counters sent (in the transaction) */
    F_OLD,     /* GET of the old counter sent */
    F_NOW,     /* GET of the new counter sent */
    F_UNWATCH, /* high enough already: UNWATCH sent, ending the transaction */
    F_MULTI,   /* MULTI sent */
    F_SET,     /* SET of the new counter queued */
    F_EXEC     /* EXEC sent, ending the transaction */
};

void relock__fence_carry_init(relock__fence_carry_m *m, const char *before)
{
    *m = (relock__fence_carry_m){.h.hint_ms = -1, .before = before};
}

/* A counter read under WATCH: its value, 0 when absent or not a number;
 * -1 for an error reply (recorded): a counter that could not be read must
 * not pass for one that is absent. */
static long long counter(relock_client *c, const redisReply *r)
{
    if (relock__reply_check(c, r, "bn", "reading the fence counter") != RELOCK_OK)
        return -1;
    if (r->type == REDIS_REPLY_STRING && r->len > 0 && r->len < 20 &&
        strspn(r->str, "0123456789") == r->len)
        return atoll(r->str);
    return 0;
}

static relock__step send_script(relock__fence_carry_m *m, relock_lock *l, relock__batch *out)
{
    relock__batch_reset(out);
    const char *args[] = {l->fence_key, m->before};
    relock__batch_script(out, l->c, RELOCK__SCRIPT_FENCE_CARRY, 2, 2, args, m->by_eval);
    return relock__send_at(&m->h, out, F_SCRIPT, 0);
}

static relock__step watch_begin(relock__fence_carry_m *m, relock_lock *l, relock__batch *out)
{
    m->tries++;
    return relock__send_words(&m->h, out, F_WATCH, 1, 3, "WATCH", l->fence_key, m->before);
}

/* The transaction failed (a fault, or a reply refused with the server's
 * words): the failure is the outcome, and the connection is dropped with
 * the WATCH or MULTI left behind. */
static relock__step watch_failed(relock__fence_carry_m *m, relock_status st)
{
    m->h.in_txn = 1;
    return relock__done(&m->h, st);
}

relock__step relock__fence_carry_step(void *vm, relock_lock *l, const relock__feed *in,
                                      relock__batch *out)
{
    relock__fence_carry_m *m = vm;
    relock_client *c = l->c;
    const redisReply *r = in->nreply > 0 ? in->reply[0] : NULL;
    if (m->h.pc == F_START) {
        long v = (long)c->conn.major * 10000 + c->conn.minor * 100 + c->conn.patch;
        if (c->conn.caps & RELOCK_CAP_EVAL) {
            m->way = RELOCK__FW_SCRIPT;
            return send_script(m, l, out);
        }
        if (v >= 20600 && (c->conn.caps & RELOCK_CAP_WATCH)) {
            m->way = RELOCK__FW_WATCH; /* Lua left out */
            return watch_begin(m, l, out);
        }
        m->way = RELOCK__FW_SETNX;
        return relock__send_words(&m->h, out, F_GET, 0, 2, "GET", m->before);
    }
    if (m->h.pc == F_SCRIPT && relock__script_again(in, 0, &m->by_eval))
        return send_script(m, l, out);
    if (in->fault && m->h.pc >= F_WATCH)
        return watch_failed(m, relock__fault_fail(c, in));
    if (in->fault)
        return relock__done(&m->h, relock__fault_fail(c, in));
    relock_status st;
    long long now;
    switch (m->h.pc) {
    case F_SCRIPT:
    case F_SETNX:
        return relock__done(&m->h, relock__reply_check(c, r, "i", "raising the fence counter"));
    case F_GET:
        if (r->type == REDIS_REPLY_STRING && r->len > 0 && r->len < sizeof m->old_text &&
            strspn(r->str, "0123456789") == r->len)
            memcpy(m->old_text, r->str, r->len + 1);
        if (!m->old_text[0]) /* no counter under the old name: nothing to carry */
            return relock__done(&m->h, RELOCK_OK);
        return relock__send_words(&m->h, out, F_SETNX, 0, 3, "SETNX", l->fence_key, m->old_text);
    case F_WATCH:
        if ((st = relock__reply_check(c, r, "s", "WATCH of the fence counters")) != RELOCK_OK)
            return watch_failed(m, st);
        return relock__send_words(&m->h, out, F_OLD, 1, 2, "GET", m->before);
    case F_OLD:
        m->old = counter(c, r);
        if (m->old < 0)
            return watch_failed(m, c->err.pub.status);
        return relock__send_words(&m->h, out, F_NOW, 1, 2, "GET", l->fence_key);
    case F_NOW:
        now = counter(c, r);
        if (now < 0)
            return watch_failed(m, c->err.pub.status);
        if (now >= m->old)
            return relock__send_words(&m->h, out, F_UNWATCH, 0, 1, "UNWATCH");
        return relock__send_words(&m->h, out, F_MULTI, 1, 1, "MULTI");
    case F_UNWATCH:
        if ((st = relock__reply_check(c, r, "s", "UNWATCH")) != RELOCK_OK)
            return watch_failed(m, st);
        return relock__done(&m->h, RELOCK_OK);
    case F_MULTI: {
        if ((st = relock__reply_check(c, r, "s", "MULTI")) != RELOCK_OK)
            return watch_failed(m, st);
        relock__batch_reset(out);
        const char *s[] = {"SET", l->fence_key, relock__batch_num(out, m->old)};
        relock__batch_add(out, 3, s);
        return relock__send_at(&m->h, out, F_SET, 1);
    }
    case F_SET:
        /* A SET refused inside MULTI (an ACL, memory) is an error with the
         * server's words, not a race (EXEC would answer EXECABORT). */
        st = relock__reply_check(c, r, "s", "raising the fence counter (SET in MULTI)");
        if (st != RELOCK_OK)
            return watch_failed(m, st);
        return relock__send_words(&m->h, out, F_EXEC, 0, 1, "EXEC");
    case F_EXEC:
        if (r->type == REDIS_REPLY_NIL) { /* beaten: the only outcome worth another look */
            if (m->tries < RELOCK__FENCE_WATCH_TRIES)
                return watch_begin(m, l, out);
            return relock__done(&m->h, RELOCK__FAIL(&c->err, RELOCK_EIO,
                                                    "raising the fence counter %s: it kept "
                                                    "changing between WATCH and EXEC",
                                                    l->fence_key));
        }
        if ((st = relock__reply_check(c, r, "a", "EXEC raising the fence counter")) != RELOCK_OK)
            return watch_failed(m, st);
        return relock__done(&m->h, RELOCK_OK);
    default:
        return relock__done(&m->h, RELOCK__FAIL(&c->err, RELOCK_EPROTO,
                                                "raising the fence counter %s: internal error "
                                                "(step %d)",
                                                l->fence_key, m->h.pc));
    }
}
