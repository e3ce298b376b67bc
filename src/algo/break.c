/*
 * relock_break(): an operator deletes a stuck lock by hand (`relock break`).
 *
 * With a value, the delete happens only while the key still holds it, so
 * an operator never deletes the lock of whoever took it over since (the
 * ways by version: enum relock__break_way).  On 2.0, without WATCH,
 * another client may replace the value before the transaction, whose GET
 * shows it: the value is put back with SETNX unless the key was taken
 * meanwhile, and the call reports RELOCK_BUSY.
 * Without a value the key is deleted whatever it holds.  Either way the
 * release is announced to waiters (in the script, else by a PUBLISH after
 * the delete), best effort: an ACL user without channel permissions
 * (Redis 7's default) still breaks the lock.
 *
 * Every delete increments the fence counter in the same atomic step, so
 * the broken holder's extend and release report the lock lost and write
 * nothing, even when a classic client has taken the key meanwhile with a
 * TTL-less timestamp that looks like a GETSET loser's (design.md §4.7).
 * On 2.0 the fence also counts failed attempts, so a second counter, of
 * breaks alone, is incremented too, and holders compare that one.
 */
#include <stdlib.h>
#include <string.h>

#include "break.h"

enum break_pc {
    B_START = 0,
    B_SCRIPT,  /* the compare-and-delete script sent */
    B_GET,     /* 2.0: the first GET sent */
    B_WATCH,   /* WATCH key and fence counter sent (in the transaction) */
    B_WGET,    /* GET of the key sent */
    B_WFENCE,  /* GET of the fence counter sent */
    B_UNWATCH, /* nothing to delete: UNWATCH sent, ending the transaction */
    T_MULTI,   /* MULTI sent */
    T_QUEUED,  /* a command of the transaction queued */
    T_EXEC,    /* EXEC sent, ending the transaction */
    N_OWNER,   /* deleted: the owner metadata's DEL sent */
    N_PUBLISH, /* deleted: the release notice sent */
    P_RESTORE  /* 2.0: SETNX of the value deleted by mistake sent */
};

void relock__break_init(relock__break_m *m, const char *if_value, long long if_fence,
                        const char *breaks_key, const char *chan, const char *okey)
{
    *m = (relock__break_m){.h.hint_ms = -1, .if_value = if_value, .if_fence = if_fence,
                           .breaks_key = breaks_key, .chan = chan, .okey = okey};
}

void relock__break_free(relock__break_m *m)
{
    free(m->got);
    m->got = NULL;
}

static relock__step finish(relock__break_m *m, relock_status st)
{
    relock__break_free(m);
    return relock__done(&m->h, st);
}

static relock__step absent(relock__break_m *m, relock_lock *l)
{
    return finish(m, RELOCK__FAIL(&l->c->err, RELOCK_LOST,
                                  "break %s: nothing to delete: the key is absent", l->name));
}

/* The key holds another value, or (moved) the one named under a later fence. */
static relock__step mismatch(relock__break_m *m, relock_lock *l, int moved)
{
    if (!moved)
        return finish(m, RELOCK__FAIL(&l->c->err, RELOCK_BUSY,
                                      "break %s: nothing deleted: the key holds another value",
                                      l->name));
    return finish(m, RELOCK__FAIL(&l->c->err, RELOCK_BUSY,
                                  "break %s: nothing deleted: the key holds that value, but "
                                  "fence %lld is no longer current (another holder acquired "
                                  "since)",
                                  l->name, m->if_fence));
}

/* Announces a delete to waiters and drops the broken holder's owner
 * record, best effort: every failure here is forgotten. */
static relock__step notify(relock__break_m *m, relock_lock *l, relock__batch *out, int from)
{
    relock__err_clear(&l->c->err);
    if (from < N_OWNER && m->okey[0])
        return relock__send_words(&m->h, out, N_OWNER, 0, 2, "DEL", m->okey);
    if (from < N_PUBLISH && m->chan[0])
        return relock__send_words(&m->h, out, N_PUBLISH, 0, 3, "PUBLISH", m->chan, "1");
    return finish(m, RELOCK_OK);
}

static relock__step send_script(relock__break_m *m, relock_lock *l, relock__batch *out)
{
    relock__batch_reset(out);
    const char *args[] = {l->key, l->fence_key, m->if_value ? m->if_value : "", m->chan,
                          relock__batch_num(out, m->if_fence)};
    relock__batch_script(out, l->c, RELOCK__SCRIPT_BREAK_IF_EQ, 2, 5, args, m->by_eval);
    return relock__send_at(&m->h, out, B_SCRIPT, 0);
}

/* One command of the transaction. */
typedef struct {
    int argc;
    const char *argv[3];
} tx_cmd;

/* The k-th command queued after MULTI: [GET key,] DEL key, INCR fence
 * (before 2.2 INCRBY fence RELOCK__BREAK_EPOCH and INCR breaks).  Put in
 * out when given; returns its name, or NULL when there is none. */
static const char *queued(const relock__break_m *m, relock_lock *l, int k, relock__batch *out)
{
    tx_cmd cmd[4] = {{2, {"GET", l->key}}, {2, {"DEL", l->key}}};
    int n = 2;
    int no_watch = !(l->c->conn.caps & RELOCK_CAP_WATCH);
    if (no_watch) {
        cmd[n++] = (tx_cmd){3, {"INCRBY", l->fence_key, RELOCK__BREAK_EPOCH_WORD}};
        cmd[n++] = (tx_cmd){2, {"INCR", m->breaks_key}};
    } else {
        cmd[n++] = (tx_cmd){2, {"INCR", l->fence_key}};
    }
    k += !m->with_get; /* the GET only where the transaction reads the value */
    if (k < !m->with_get || k >= n)
        return NULL;
    if (out) {
        relock__batch_reset(out);
        relock__batch_add(out, cmd[k].argc, cmd[k].argv);
    }
    return cmd[k].argv[0];
}

/* MULTI, [GET key,] DEL key, INCR fence(s), EXEC: inside the WATCH's
 * transaction, or as one of its own. */
static relock__step tx_begin(relock__break_m *m, relock__batch *out)
{
    m->next = 0;
    return relock__send_words(&m->h, out, T_MULTI, 1, 1, "MULTI");
}

static relock__step watch_begin(relock__break_m *m, relock_lock *l, relock__batch *out)
{
    m->tries++;
    m->was_absent = m->moved = 0;
    return relock__send_words(&m->h, out, B_WATCH, 1, 3, "WATCH", l->key, l->fence_key);
}

/* The transaction's EXEC answered: the way decides what follows. */
static relock__step tx_done(relock__break_m *m, relock_lock *l, const redisReply *r,
                            relock__batch *out)
{
    relock_client *c = l->c;
    if (r->type == REDIS_REPLY_NIL) { /* a WATCHed key changed: again */
        if (m->tries < RELOCK__BREAK_WATCH_TRIES)
            return watch_begin(m, l, out);
        return finish(m, RELOCK__FAIL(&c->err, RELOCK_BUSY,
                                      "break %s: nothing deleted: the key kept changing",
                                      l->name));
    }
    if (!relock__reply_is(r, m->with_get ? "a[?i]" : "a[i]")) {
        /* An error for EXEC (-LOADING) may leave the MULTI open: the
         * connection is dropped, or the next command would be queued
         * there (a SET NX PX answering +QUEUED, read as a win). */
        m->h.in_txn = 1;
        return finish(m, RELOCK__BAD_REPLY(c, "EXEC", r));
    }
    int deleted = r->element[m->with_get]->integer > 0;
    if (m->way != RELOCK__BW_PLAIN)
        return deleted ? notify(m, l, out, 0) : absent(m, l);
    const redisReply *g = r->element[0];
    /* (read as a C string, as the comparison and the SETNX read it) */
    if (g->type == REDIS_REPLY_STRING)
        m->got = strdup(g->str);
    if (m->got && strcmp(m->got, m->if_value) == 0)
        return notify(m, l, out, 0);
    if (g->type == REDIS_REPLY_NIL) /* gone between the GET and the transaction */
        return absent(m, l);
    if (!m->got)
        return finish(m, RELOCK__FAIL(&c->err, RELOCK_EPROTO,
                                      "break %s: the GET inside the transaction failed; the key "
                                      "was %s",
                                      l->name, deleted ? "deleted" : "not deleted"));
    /* Another value arrived in the window and was deleted: put it back,
     * unless someone has taken the free key since. */
    return relock__send_words(&m->h, out, P_RESTORE, 0, 3, "SETNX", l->key, m->got);
}

relock__step relock__break_step(void *vm, relock_lock *l, const relock__feed *in,
                                relock__batch *out)
{
    relock__break_m *m = vm;
    relock_client *c = l->c;
    const redisReply *r = in->nreply > 0 ? in->reply[0] : NULL;
    relock_status st;
    if (m->h.pc == B_SCRIPT && relock__script_again(in, 0, &m->by_eval))
        return send_script(m, l, out);
    /* A fault fails the call; a lost reply to the script or to EXEC
     * leaves unknown whether the key was deleted.  A transaction left open
     * is discarded with its connection by the driver. */
    if (in->fault && m->h.pc > B_START && m->h.pc < N_OWNER) {
        if (in->fault != RELOCK__FAULT_LOST || (m->h.pc != B_SCRIPT && m->h.pc != T_EXEC))
            return finish(m, relock__fault_fail(c, in));
        relock__err_clear(&c->err); /* the I/O error is the lesser news */
        return finish(m, RELOCK__FAIL(&c->err, RELOCK_EAMBIGUOUS,
                                      "break %s: connection lost after the request was sent; "
                                      "whether the key was deleted is unknown",
                                      l->name));
    }
    switch (m->h.pc) {
    case B_START:
        if (c->conn.caps & RELOCK_CAP_EVAL) {
            m->way = RELOCK__BW_SCRIPT; /* without a value: whatever the key holds */
            return send_script(m, l, out);
        }
        if (!m->if_value) {
            /* Before 2.6 the counters move even when the key was absent:
             * still never back. */
            m->way = RELOCK__BW_ANY;
            return tx_begin(m, out);
        }
        if (c->conn.caps & RELOCK_CAP_WATCH) {
            m->way = RELOCK__BW_WATCH;
            return watch_begin(m, l, out);
        }
        if (m->if_fence > 0)
            return finish(m, RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                                          "break %s: a fence cannot be compared on Redis %s: its "
                                          "fence counter also counts failed attempts",
                                          l->name, c->conn.version));
        m->way = RELOCK__BW_PLAIN;
        m->with_get = 1;
        return relock__send_words(&m->h, out, B_GET, 0, 2, "GET", l->key);

    case B_SCRIPT:
        if ((st = relock__reply_check(c, r, "i", "compare-and-delete")) != RELOCK_OK)
            return finish(m, st);
        if (r->integer >= 1) /* 1 + the waiters told, by the script */
            return finish(m, RELOCK_OK);
        if (r->integer == 0)
            return absent(m, l);
        return mismatch(m, l, r->integer == -2);

    case B_GET: /* 2.0 (see the top of the file) */
        if ((st = relock__reply_check(c, r, "bn", "GET")) != RELOCK_OK)
            return finish(m, st); /* WRONGTYPE: not a lock */
        if (r->type == REDIS_REPLY_NIL)
            return absent(m, l);
        if (!relock__value_is(r->str, r->len, m->if_value))
            return mismatch(m, l, 0);
        return tx_begin(m, out);

    case B_WATCH:
        if ((st = relock__reply_check(c, r, "s", "WATCH")) != RELOCK_OK)
            return finish(m, st);
        return relock__send_words(&m->h, out, B_WGET, 1, 2, "GET", l->key);

    case B_WGET:
    case B_WFENCE: {
        if ((st = relock__reply_check(c, r, "bn", "GET")) != RELOCK_OK)
            return finish(m, st);
        int same = 1;
        if (m->h.pc == B_WGET) {
            m->was_absent = r->type == REDIS_REPLY_NIL;
            same = !m->was_absent && relock__value_is(r->str, r->len, m->if_value);
            if (same && m->if_fence > 0)
                return relock__send_words(&m->h, out, B_WFENCE, 1, 2, "GET", l->fence_key);
        } else {
            m->moved = r->type != REDIS_REPLY_STRING || atoll(r->str) != m->if_fence;
        }
        if (!same || m->moved)
            return relock__send_words(&m->h, out, B_UNWATCH, 0, 1, "UNWATCH");
        return tx_begin(m, out);
    }

    case B_UNWATCH:
        st = relock__reply_check(c, r, "s", "UNWATCH");
        if (st != RELOCK_OK) {
            m->h.in_txn = 1; /* the connection is dropped */
            return finish(m, st);
        }
        return m->was_absent ? absent(m, l) : mismatch(m, l, m->moved);

    case T_MULTI:
    case T_QUEUED:
        st = relock__reply_check(c, r, "s",
                                 m->h.pc == T_MULTI ? "MULTI" : queued(m, l, m->next - 1, NULL));
        if (st != RELOCK_OK)
            return finish(m, st);
        if (!queued(m, l, m->next, out))
            return relock__send_words(&m->h, out, T_EXEC, 0, 1, "EXEC");
        m->next++;
        return relock__send_at(&m->h, out, T_QUEUED, 1);

    case T_EXEC:
        return tx_done(m, l, r, out);

    case N_OWNER:
    case N_PUBLISH:
        return notify(m, l, out, m->h.pc);

    case P_RESTORE: {
        int restored = !in->fault && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
        relock__err_clear(&c->err);
        return finish(m, RELOCK__FAIL(&c->err, RELOCK_BUSY,
                                      "break %s: the key changed just before the delete (Redis "
                                      "2.0 has no WATCH); %s",
                                      l->name,
                                      restored ? "the new value was put back"
                                               : "the new value could not be put back: its "
                                                 "holder has lost it"));
    }

    default:
        return finish(m, RELOCK__FAIL(&c->err, RELOCK_EPROTO,
                                      "break %s: internal error (step %d)", l->name, m->h.pc));
    }
}
