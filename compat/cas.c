/*
 * The compare-and-set / compare-and-delete sub-machine (cas.h): by script
 * where the server has EVAL, by WATCH ... EXEC on 2.2 and 2.4.
 * Step machine: no I/O, no clock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cas.h"

enum { CAS_SCRIPT = 1, CAS_READ, CAS_UNWATCH, CAS_MULTI, CAS_QUEUE, CAS_EXEC, CAS_DISCARD };

/* EXEC was refused (an error reply: the server may still hold the
 * transaction open, as when it was loading): DISCARD it, so that the
 * connection is fit for the next operation, and end with the error. */
void relock__cas_discard(relock__batch *out)
{
    relock__batch_reset(out);
    const char *argv[] = {"DISCARD"};
    relock__batch_add(out, 1, argv);
}

/* Whether DISCARD's answer leaves the transaction open for all we know: a
 * refusal (a server still loading refuses DISCARD too before 2.6), or no
 * answer on a connection that is then already closed (harmless). */
int relock__cas_discard_failed(const relock__feed *in)
{
    return in->fault || !relock__reply_is(in->reply[0], "s");
}

/* ------------------------------------------------------------ compare-and-set */

static relock__step cas_end(relock__cas *c, relock_status st)
{
    c->st = st;
    c->pc = 0;
    return RELOCK__STEP_DONE;
}

/* A fault ended the batch: the error, ambiguous when the batch held the
 * write (EXEC, the script) and its reply was lost. */
static relock__step cas_fault(relock__cas *c, relock_lock *l, const relock__feed *in,
                              int holds_write)
{
    relock_status st = relock__fault_fail(l->c, in);
    c->ambiguous = holds_write && in->fault == RELOCK__FAULT_LOST && st == RELOCK_EIO;
    return cas_end(c, st);
}

static relock__step cas_script(relock__cas *c, relock_lock *l, relock__batch *out)
{
    relock_client *cl = l->c;
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
    relock__batch_script(out, cl, RELOCK__SCRIPT_CAS, 2, 10, args, c->by_eval);
    c->pc = CAS_SCRIPT;
    return RELOCK__STEP_SEND;
}

relock__step relock__cas_start(relock__cas *c, relock_lock *l, relock__batch *out)
{
    relock__notify_channel(l, c->chan, sizeof c->chan);
    if (c->script)
        return cas_script(c, l, out);
    /* From WATCH to EXEC on one connection: a new one would carry no
     * WATCH, and the write would run unconditionally (design.md §13.3). */
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
    return RELOCK__STEP_SEND;
}

static relock__step cas_read(relock__cas *c, relock_lock *l, const relock__feed *in,
                             relock__batch *out)
{
    relock_client *cl = l->c;
    if (in->fault)
        return cas_fault(c, l, in, 0);
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
    relock__batch_reset(out);
    if (!same) {
        relock__batch_words(out, 1, "UNWATCH");
        c->pc = CAS_UNWATCH;
        return RELOCK__STEP_SEND;
    }
    out->in_txn = 1;
    relock__batch_words(out, 1, "MULTI");
    c->pc = CAS_MULTI;
    return RELOCK__STEP_SEND;
}

static relock__step cas_queue(relock__cas *c, relock_lock *l, relock__batch *out)
{
    relock__batch_reset(out);
    out->in_txn = 1;
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
    c->pc = CAS_QUEUE;
    return RELOCK__STEP_SEND;
}

relock__step relock__cas_step(relock__cas *c, relock_lock *l, const relock__feed *in,
                                 relock__batch *out)
{
    relock_client *cl = l->c;
    switch (c->pc) {
    case CAS_SCRIPT: {
        if (relock__script_again(in, 0, &c->by_eval))
            return cas_script(c, l, out);
        if (in->fault)
            return cas_fault(c, l, in, 1);
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
        if (in->fault)
            return cas_fault(c, l, in, 0);
        return cas_end(c, RELOCK_OK); /* a mismatch, found says what */
    case CAS_MULTI:
        if (in->fault)
            return cas_fault(c, l, in, 0);
        if (relock__reply_check(cl, in->reply[0], "s", "MULTI") != RELOCK_OK)
            return cas_end(c, cl->err.pub.status);
        return cas_queue(c, l, out);
    case CAS_QUEUE: {
        if (in->fault)
            return cas_fault(c, l, in, 0); /* no EXEC sent: nothing ran */
        /* The commands cas_queue() queued, in its order. */
        const char *what[4] = {c->newv ? "SET" : "DEL"};
        int i = 1;
        if (c->newv && c->gc > 0)
            what[i++] = "EXPIRE";
        if (c->incr)
            what[i++] = "INCR";
        if (!c->newv && c->chan[0])
            what[i++] = "PUBLISH";
        for (int j = 0; j < i; j++) {
            relock_status st = relock__reply_check(cl, in->reply[j], "s", what[j]);
            if (st != RELOCK_OK)
                return cas_end(c, st); /* the driver drops the transaction */
        }
        relock__batch_reset(out);
        relock__batch_words(out, 1, "EXEC");
        c->pc = CAS_EXEC;
        return RELOCK__STEP_SEND;
    }
    case CAS_EXEC: {
        /* A lost reply to EXEC leaves the outcome unknown; a connection
         * found lost before EXEC was sent does not (the server discarded
         * it all). */
        if (in->fault)
            return cas_fault(c, l, in, 1);
        const redisReply *r = in->reply[0];
        relock_status st = relock__reply_check(cl, r, "na", "EXEC");
        if (st != RELOCK_OK) {
            c->st = st;
            relock__cas_discard(out);
            c->pc = CAS_DISCARD;
            return RELOCK__STEP_SEND;
        }
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
        c->drop = relock__cas_discard_failed(in);
        return cas_end(c, c->st);
    default:
        return cas_end(c, RELOCK__FAIL(&cl->err, RELOCK_EPROTO,
                                       "lock %s: internal error: compare-and-set step %d",
                                       l->name, c->pc));
    }
}
