/*
 * The atomic steps of the timestamp algorithms (compat/ts.h) that are
 * theirs alone: on 2.0, which has neither EVAL nor WATCH, the fenced write,
 * SETNX or GETSET with the fence increment in one MULTI.  (The
 * compare-and-set by script or WATCH ... EXEC is the core's, compat/cas.c.)
 * Step machines: no I/O, no clock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ts.h"

enum { FW_MULTI = 1, FW_QUEUE, FW_EXEC, FW_DISCARD };

relock__ts_path relock__ts_path_of(const relock_client *c)
{
    if (c->conn.caps & RELOCK_CAP_EVAL)
        return RELOCK__TS_EVAL;
    if (c->conn.caps & RELOCK_CAP_WATCH)
        return RELOCK__TS_WATCH;
    return RELOCK__TS_PLAIN;
}

long long relock__ts_counter(const redisReply *r)
{
    if (r->type == REDIS_REPLY_NIL)
        return 0;
    if (r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > 18 ||
        strspn(r->str, "0123456789") != r->len)
        return -1;
    return atoll(r->str);
}

/* ------------------------------------------------------------ 2.0's fenced write */

static relock__step fw_end(relock__ts_fwrite *w, relock_status st)
{
    w->st = st;
    w->pc = 0;
    return RELOCK__STEP_DONE;
}

relock__step relock__ts_fwrite_start(relock__ts_fwrite *w, relock_lock *l, relock__batch *out)
{
    w->breaks = -1;
    if (relock__breaks_key(l->key, w->bkey, sizeof w->bkey) != 0)
        w->bkey[0] = '\0';
    /* MULTI to EXEC on one connection: a new one would run the queued
     * SETNX or GETSET at once, without its fence (design.md §13.3). */
    relock__batch_reset(out);
    out->in_txn = 1;
    relock__batch_words(out, 1, "MULTI");
    w->pc = FW_MULTI;
    return RELOCK__STEP_SEND;
}

relock__step relock__ts_fwrite_step(relock__ts_fwrite *w, relock_lock *l, const relock__feed *in,
                                    relock__batch *out)
{
    relock_client *c = l->c;
    switch (w->pc) {
    case FW_MULTI:
        if (in->fault)
            return fw_end(w, relock__fault_fail(c, in));
        if (relock__reply_check(c, in->reply[0], "s", "MULTI") != RELOCK_OK)
            return fw_end(w, c->err.pub.status);
        relock__batch_reset(out);
        out->in_txn = 1;
        relock__batch_words(out, 3, w->cmd, l->key, l->value);
        relock__batch_words(out, 2, "INCR", l->fence_key);
        if (w->bkey[0])
            relock__batch_words(out, 2, "GET", w->bkey);
        w->pc = FW_QUEUE;
        return RELOCK__STEP_SEND;
    case FW_QUEUE: {
        if (in->fault)
            return fw_end(w, relock__fault_fail(c, in)); /* no EXEC sent */
        const char *what[] = {w->cmd, "INCR", "GET"};
        for (int i = 0; i < (w->bkey[0] ? 3 : 2); i++)
            if (relock__reply_check(c, in->reply[i], "s", what[i]) != RELOCK_OK)
                return fw_end(w, c->err.pub.status);
        relock__batch_reset(out);
        relock__batch_words(out, 1, "EXEC");
        w->pc = FW_EXEC;
        return RELOCK__STEP_SEND;
    }
    case FW_EXEC: {
        if (in->fault) {
            relock_status st = relock__fault_fail(c, in);
            w->ambiguous = in->fault == RELOCK__FAULT_LOST;
            return fw_end(w, st);
        }
        const redisReply *r = in->reply[0];
        if (relock__reply_check(c, r, w->bkey[0] ? "a[???$]" : "a[??$]", "EXEC") != RELOCK_OK) {
            w->st = c->err.pub.status;
            relock__cas_discard(out);
            w->pc = FW_DISCARD;
            return RELOCK__STEP_SEND;
        }
        const redisReply *first = r->element[0];
        w->n0 = first->type == REDIS_REPLY_INTEGER ? first->integer : 0;
        w->old_nil = first->type == REDIS_REPLY_NIL;
        if (first->type == REDIS_REPLY_STRING) {
            snprintf(w->old, sizeof w->old, "%s", first->str);
            relock__classify(first->str, first->len, &w->old_v);
        }
        w->fence = relock__reply_elem_int(r, 1);
        w->breaks = w->bkey[0] ? relock__ts_counter(r->element[2]) : -1;
        return fw_end(w, RELOCK_OK);
    }
    case FW_DISCARD:
        w->drop = relock__cas_discard_failed(in);
        return fw_end(w, w->st);
    default:
        return fw_end(w, RELOCK__FAIL(&c->err, RELOCK_EPROTO,
                                      "lock %s: internal error: fenced write step %d", l->name,
                                      w->pc));
    }
}
