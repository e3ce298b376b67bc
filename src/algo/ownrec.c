/* The owner record's step machine (ownrec.h): no I/O, no clock. */
#include <stdio.h>
#include <string.h>

#include "ownrec.h"

enum { P_START = 0, P_SCRIPT, P_READ, P_UNWATCH, P_MULTI, P_QUEUED, P_EXEC, P_LOOK, P_WRITE };

int relock__owner_init(relock__owner_m *m, const relock_lock *l, const char *value, int held,
                       const char *info)
{
    const relock_client *c = l->c;
    *m = (relock__owner_m){.h.hint_ms = -1};
    /* A quorum's metadata would be one server's view: not written. */
    if (!c->s.owner_info || c->q || relock__owner_key(l->key, m->key, sizeof m->key) != 0)
        return 0;
    m->held = held;
    /* The fence is compared too where values can repeat from one holder
     * to the next (the timestamp modes, decision 87) and the counter
     * counts acquisitions only (not 2.0's), when it is known. */
    m->fence = c->mode != RELOCK_MODE_MODERN && (c->conn.caps & RELOCK_CAP_WATCH) && l->fence > 0;
    snprintf(m->value, sizeof m->value, "%s", value);
    if (held)
        snprintf(m->info, sizeof m->info, "%s", info);
    /* The record lives as long as the lock key, lock delay included
     * (modern mode only), so that inspect names who keeps a lock during
     * its delay. */
    m->ms = l->ttl_ms + c->s.lock_delay_ms;
    return 1;
}

/* The write (or delete) of the record itself, in ms or, before 2.6, in
 * whole seconds rounded up. */
static void record_cmd(relock__owner_m *m, const relock_client *c, relock__batch *out)
{
    if (!m->held)
        relock__batch_words(out, 2, "DEL", m->key);
    else if (c->conn.caps & RELOCK_CAP_PEXPIRE)
        relock__batch_words(out, 4, "PSETEX", m->key, relock__batch_num(out, m->ms), m->info);
    else
        relock__batch_words(out, 4, "SETEX", m->key, relock__batch_num(out, (m->ms + 999) / 1000),
                            m->info);
}

/* Whether a GET reply holds exactly want. */
static int holds(const redisReply *r, const char *want)
{
    return r && r->type == REDIS_REPLY_STRING && strcmp(r->str, want) == 0;
}

/* Ends the machine; broken: a transaction may be left open (dropped). */
static relock__step finish(relock__owner_m *m, int done, int broken)
{
    m->done = done;
    if (broken)
        m->h.in_txn = 1;
    return relock__done(&m->h, done ? RELOCK_OK : RELOCK_BUSY);
}

static relock__step send_script(relock__owner_m *m, relock_lock *l, relock__batch *out)
{
    const char *f = m->fence ? relock__batch_num(out, l->fence) : "0";
    const char *px = relock__batch_num(out, m->ms);
    const char *args[] = {l->key, l->fence_key, m->key, m->value, f, m->held ? m->info : "", px};
    relock__batch_script(out, l->c, RELOCK__SCRIPT_OWNER_IF_HELD, 3, 7, args, m->by_eval);
    return relock__send_at(&m->h, out, P_SCRIPT, 0);
}

relock__step relock__owner_step(void *mv, relock_lock *l, const relock__feed *in,
                                relock__batch *out)
{
    relock__owner_m *m = mv;
    relock_client *c = l->c;
    int answered = in->fault == RELOCK__FAULT_NONE;
    relock__batch_reset(out);
    switch (m->h.pc) {
    case P_START:
        if (c->conn.caps & RELOCK_CAP_EVAL)
            return send_script(m, l, out);
        if (c->conn.caps & RELOCK_CAP_WATCH) {
            relock__batch_words(out, m->fence ? 3 : 2, "WATCH", l->key, l->fence_key);
            relock__batch_words(out, 2, "GET", l->key);
            if (m->fence)
                relock__batch_words(out, 2, "GET", l->fence_key);
            return relock__send_at(&m->h, out, P_READ, 1);
        }
        /* 2.0: no WATCH, no script.  The look narrows the window to one
         * round trip; the record informs, it decides nothing. */
        return relock__send_words(&m->h, out, P_LOOK, 0, 2, "GET", l->key);
    case P_SCRIPT:
        if (!answered)
            return finish(m, 0, 0);
        if (relock__script_again(in, 0, &m->by_eval))
            return send_script(m, l, out);
        return finish(m, relock__reply_is(in->reply[0], "i") && in->reply[0]->integer == 1, 0);
    case P_READ: {
        if (!answered)
            return finish(m, 0, 1);
        int ours = relock__reply_is(in->reply[0], "s") && holds(in->reply[1], m->value);
        if (ours && m->fence)
            ours = holds(in->reply[2], relock__batch_num(out, l->fence));
        if (!ours)
            return relock__send_words(&m->h, out, P_UNWATCH, 0, 1, "UNWATCH");
        return relock__send_words(&m->h, out, P_MULTI, 1, 1, "MULTI");
    }
    case P_UNWATCH:
        return finish(m, 0, !answered || !relock__reply_is(in->reply[0], "s"));
    case P_MULTI:
    case P_QUEUED:
        if (!answered || !relock__reply_is(in->reply[0], "s"))
            return finish(m, 0, 1);
        if (m->h.pc == P_QUEUED)
            return relock__send_words(&m->h, out, P_EXEC, 0, 1, "EXEC");
        record_cmd(m, c, out);
        return relock__send_at(&m->h, out, P_QUEUED, 1);
    case P_EXEC:
        /* nil: the lock was written meanwhile, the record not. */
        if (!answered || !relock__reply_is(in->reply[0], "an"))
            return finish(m, 0, 1);
        return finish(m, in->reply[0]->type == REDIS_REPLY_ARRAY, 0);
    case P_LOOK:
        if (!answered || !holds(in->reply[0], m->value))
            return finish(m, 0, 0);
        record_cmd(m, c, out);
        return relock__send_at(&m->h, out, P_WRITE, 0);
    default: /* P_WRITE */
        return finish(m, answered && relock__reply_is(in->reply[0], "si"), 0);
    }
}
