/* The transactions of the timestamp algorithms as cas.h draws them: by
 * script where the server has EVAL, by WATCH ... EXEC on 2.2 and 2.4, and
 * 2.0's fenced write, which has neither, in one MULTI. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cas.h"

enum { CAS_SCRIPT = 1, CAS_READ, CAS_UNWATCH, CAS_MULTI, CAS_QUEUE, CAS_EXEC, CAS_DISCARD };

long long relock__ts_counter(const redisReply *r)
{
    if (r->type == REDIS_REPLY_NIL)
        return 0;
    if (r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > 18 ||
        strspn(r->str, "0123456789") != r->len)
        return -1;
    return atoll(r->str);
}

static relock__step cas_end(relock__cas *c, relock_status st)
{
    c->st = st;
    c->pc = 0;
    return RELOCK__STEP_DONE;
}

/* A fault ended the batch: the error, ambiguous when the batch held the
 * write (EXEC, the script) and its reply was lost (for the fenced write,
 * whatever the fault's status; else an I/O error's). */
static relock__step cas_fault(relock__cas *c, relock_lock *l, const relock__feed *in,
                              int holds_write)
{
    relock_status st = relock__fault_fail(l->c, in);
    c->ambiguous = holds_write && in->fault == RELOCK__FAULT_LOST &&
                   (c->plain || st == RELOCK_EIO);
    return cas_end(c, st);
}

/* Sends the one-word command w from step pc. */
static relock__step cas_word(relock__cas *c, int pc, int in_txn, const char *w,
                             relock__batch *out)
{
    relock__batch_reset(out);
    out->in_txn = in_txn;
    relock__batch_words(out, 1, w);
    c->pc = pc;
    return RELOCK__STEP_SEND;
}

static relock__step cas_script(relock__cas *c, relock_lock *l, relock__batch *out)
{
    relock__batch_reset(out);
    const char *args[] = {l->key,
                          l->fence_key,
                          c->expected ? c->expected : "",
                          relock__batch_num(out, c->fence),
                          c->require_ttl ? "1" : "0",
                          c->newv ? c->newv : "",
                          relock__batch_num(out, c->px),
                          relock__batch_num(out, c->gc),
                          c->incr ? "1" : "0",
                          c->chan};
    relock__batch_script(out, l->c, RELOCK__SCRIPT_CAS, 2, 10, args, c->by_eval);
    c->pc = CAS_SCRIPT;
    return RELOCK__STEP_SEND;
}

relock__step relock__cas_start(relock__cas *c, relock__mhead *h, relock_lock *l,
                               relock__batch *out)
{
    /* From WATCH (or MULTI) to EXEC on one connection: a new one would
     * carry no WATCH, or run the queued write at once, and the write would
     * run unconditionally or without its fence (design.md §13.3). */
    if (c->plain) {
        c->breaks = -1;
        if (relock__breaks_key(l->key, c->bkey, sizeof c->bkey) != 0)
            c->bkey[0] = '\0';
        cas_word(c, CAS_MULTI, 1, "MULTI", out);
        return relock__send(h, out);
    }
    relock__notify_channel(l, c->chan, sizeof c->chan);
    if (c->script) {
        cas_script(c, l, out);
        return relock__send(h, out);
    }
    relock__batch_reset(out);
    out->in_txn = 1;
    if (c->fence > 0 || c->incr)
        relock__batch_words(out, 3, "WATCH", l->key, l->fence_key);
    else
        relock__batch_words(out, 2, "WATCH", l->key);
    relock__batch_words(out, 2, "GET", l->key);
    if (c->fence > 0)
        relock__batch_words(out, 2, "GET", l->fence_key);
    c->pc = CAS_READ;
    return relock__send(h, out);
}

static relock__step cas_read(relock__cas *c, relock_lock *l, const relock__feed *in,
                             relock__batch *out)
{
    relock_client *cl = l->c;
    relock_status st = relock__reply_check(cl, in->reply[0], "s", "WATCH");
    if (st == RELOCK_OK)
        st = relock__reply_check(cl, in->reply[1], "bn", "GET");
    if (st != RELOCK_OK)
        return cas_end(c, st);
    const redisReply *r = in->reply[1];
    int same = c->expected ? (r->type == REDIS_REPLY_STRING &&
                              relock__value_is(r->str, r->len, c->expected))
                           : r->type == REDIS_REPLY_NIL;
    if (r->type == REDIS_REPLY_STRING)
        relock__value_text(c->found, sizeof c->found, r->str, r->len);
    if (same && c->fence > 0) {
        r = in->reply[2];
        /* an error is not a mismatch */
        st = relock__reply_check(cl, r, "bn", "GET");
        if (st != RELOCK_OK)
            return cas_end(c, st);
        same = r->type == REDIS_REPLY_STRING && atoll(r->str) == c->fence;
    }
    if (!same)
        return cas_word(c, CAS_UNWATCH, 0, "UNWATCH", out);
    return cas_word(c, CAS_MULTI, 1, "MULTI", out);
}

static relock__step cas_queue(relock__cas *c, relock_lock *l, relock__batch *out)
{
    relock__batch_reset(out);
    out->in_txn = 1;
    if (c->plain) {
        relock__batch_words(out, 3, c->plain, l->key, l->value);
        relock__batch_words(out, 2, "INCR", l->fence_key);
        if (c->bkey[0])
            relock__batch_words(out, 2, "GET", c->bkey);
    } else {
        if (c->newv)
            relock__batch_words(out, 3, "SET", l->key, c->newv);
        else
            relock__batch_words(out, 2, "DEL", l->key);
        if (c->newv && c->gc > 0)
            relock__batch_words(out, 3, "EXPIRE", l->key, relock__batch_num(out, c->gc));
        if (c->incr)
            relock__batch_words(out, 2, "INCR", l->fence_key);
        if (!c->newv && c->chan[0])
            relock__batch_words(out, 3, "PUBLISH", c->chan, "1");
    }
    for (c->nqueued = 0; c->nqueued < out->n && c->nqueued < 4; c->nqueued++)
        c->queued[c->nqueued] = out->cmd[c->nqueued].argv[0];
    c->pc = CAS_QUEUE;
    return RELOCK__STEP_SEND;
}

/* EXEC's reply r to 2.0's fenced write, of the shape checked. */
static relock__step plain_done(relock__cas *c, const redisReply *r)
{
    const redisReply *first = r->element[0];
    c->done = first->type == REDIS_REPLY_INTEGER && first->integer == 1;
    c->old_nil = first->type == REDIS_REPLY_NIL;
    if (first->type == REDIS_REPLY_STRING) {
        relock__value_text(c->found, sizeof c->found, first->str, first->len);
        relock__classify(first->str, first->len, &c->old_v);
    }
    c->fence_out = relock__reply_elem_int(r, 1);
    c->breaks = c->bkey[0] ? relock__ts_counter(r->element[2]) : -1;
    return cas_end(c, RELOCK_OK);
}

static relock__step cas_next(relock__cas *c, relock_lock *l, const relock__feed *in,
                             relock__batch *out)
{
    relock_client *cl = l->c;
    /* Only a fault on EXEC or the script can leave a write behind (ts.h);
     * a batch of one command has no reply with a fault, so no NOSCRIPT. */
    if (in->fault && c->pc >= CAS_SCRIPT && c->pc <= CAS_EXEC)
        return cas_fault(c, l, in, c->pc == CAS_SCRIPT || c->pc == CAS_EXEC);
    switch (c->pc) {
    case CAS_SCRIPT: {
        if (relock__script_again(in, 0, &c->by_eval))
            return cas_script(c, l, out);
        const redisReply *r = in->reply[0];
        relock_status st = relock__reply_check(cl, r, "a[?]",
                                               c->newv ? "compare-and-set" : "compare-and-delete");
        if (st != RELOCK_OK)
            return cas_end(c, st);
        c->done = relock__reply_elem_int(r, 0) == 1;
        c->fence_out = c->done ? relock__reply_elem_int(r, 1) : 0;
        if (!c->done && r->elements > 1 && r->element[1]->type == REDIS_REPLY_STRING)
            relock__value_text(c->found, sizeof c->found, r->element[1]->str,
                               r->element[1]->len);
        return cas_end(c, RELOCK_OK);
    }
    case CAS_READ:
        return cas_read(c, l, in, out);
    case CAS_UNWATCH:
        return cas_end(c, RELOCK_OK); /* a mismatch, found says what */
    case CAS_MULTI:
        if (relock__reply_check(cl, in->reply[0], "s", "MULTI") != RELOCK_OK)
            return cas_end(c, cl->err.pub.status);
        return cas_queue(c, l, out);
    case CAS_QUEUE:
        for (int i = 0; i < c->nqueued; i++) {
            relock_status st = relock__reply_check(cl, in->reply[i], "s", c->queued[i]);
            if (st != RELOCK_OK)
                return cas_end(c, st); /* the driver drops the transaction */
        }
        return cas_word(c, CAS_EXEC, 0, "EXEC", out);
    case CAS_EXEC: {
        const redisReply *r = in->reply[0];
        const char *shape = !c->plain ? "na" : c->bkey[0] ? "a[???$]" : "a[??$]";
        relock_status st = relock__reply_check(cl, r, shape, "EXEC");
        if (st != RELOCK_OK) { /* DISCARD, then end with the error */
            c->st = st;
            return cas_word(c, CAS_DISCARD, 0, "DISCARD", out);
        }
        if (c->plain)
            return plain_done(c, r);
        if (r->type == REDIS_REPLY_NIL) {
            c->beaten = 1;
            c->found[0] = '\0';
        } else {
            c->done = 1;
            if (c->incr && r->elements > 0)
                c->fence_out = relock__reply_elem_int(r, r->elements - 1);
        }
        return cas_end(c, RELOCK_OK);
    }
    case CAS_DISCARD:
        /* A refusal (a server still loading refuses DISCARD too before
         * 2.6) leaves the transaction open for all we know; no answer
         * comes on a connection that is then already closed (harmless). */
        c->drop = in->fault || !relock__reply_is(in->reply[0], "s");
        return cas_end(c, c->st);
    default:
        return cas_end(c, RELOCK__FAIL(&cl->err, RELOCK_EPROTO,
                                       "lock %s: internal error: %s step %d", l->name,
                                       c->plain ? "fenced write" : "compare-and-set", c->pc));
    }
}

relock__step relock__cas_step(relock__cas *c, relock__mhead *h, relock_lock *l,
                              const relock__feed *in, relock__batch *out)
{
    if (cas_next(c, l, in, out) == RELOCK__STEP_SEND)
        return relock__send(h, out);
    if (c->drop)
        h->in_txn = 1; /* the driver drops the connection */
    return RELOCK__STEP_DONE;
}
