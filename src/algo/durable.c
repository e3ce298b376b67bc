/*
 * Durability (durability.*, design.md §10.1, decisions 102-105): after an
 * acquire or an extend wrote the lock key, WAIT until durability.replicas
 * replicas acknowledge it (with durability.aof WAITAOF, until the master
 * and they wrote it to their append-only files), at most timeout_ms.
 *
 * WAIT counts the replicas that acknowledged the connection's own last
 * write, so it goes out on the very connection the write did: a new one
 * has written nothing, and its WAIT would count every replica at once.
 * It is never sent inside WATCH/MULTI (decision 86).  Settings the mode or
 * the server cannot honour are refused, never ignored (decision 106).
 */
#include <stdio.h>
#include <string.h>

#include "durable.h"

int relock__durable_on(const relock_client *c)
{
    return c->s.durability.replicas > 0 || c->s.durability.aof;
}

relock_status relock__durable_check(relock_client *c)
{
    if (c->s.lock_delay_ms > 0 && c->mode != RELOCK_MODE_MODERN)
        return RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                            "lock_delay_ms: only in modern mode (this client is in %s mode): "
                            "there the stored timestamp is the lock's end for every reader, "
                            "and a delay written into it would hide the holder's validity "
                            "from adopters and inspect; set lock_delay_ms = 0",
                            relock_mode_name(c->mode));
    if (!relock__durable_on(c))
        return RELOCK_OK;
    const relock__conn *conn = &c->conn;
    if (c->s.durability.aof && !(conn->caps & RELOCK_CAP_WAITAOF))
        return RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                            "durability.aof: server %s has no WAITAOF (Redis 7.2 or later); "
                            "set durability.aof = false to wait for replicas with WAIT alone",
                            conn->version);
    if (c->s.durability.replicas > 0 && !(conn->caps & RELOCK_CAP_WAIT))
        return RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                            "durability.replicas: server %s has no WAIT (Redis 3.0 or later); "
                            "set durability.replicas = 0",
                            conn->version);
    return RELOCK_OK;
}

void relock__durable_init(relock__durable_m *m, const char *op)
{
    *m = (relock__durable_m){.h.hint_ms = -1, .op = op};
}

relock__step relock__durable_step(void *mv, relock_lock *l, const relock__feed *in,
                                  relock__batch *out)
{
    relock__durable_m *m = mv;
    relock_client *c = l->c;
    long want = c->s.durability.replicas;
    long long tmo = c->s.durability.timeout_ms;
    const char *what = c->s.durability.aof ? "WAITAOF" : "WAIT";
    relock__batch_reset(out);
    if (m->h.pc == 0) {
        m->acked = 0;
        relock_status st = relock__durable_check(c);
        if (st != RELOCK_OK)
            return relock__done(&m->h, st);
        const char *nrep = relock__batch_num(out, want);
        const char *ntmo = relock__batch_num(out, tmo);
        if (c->s.durability.aof)
            relock__batch_words(out, 4, "WAITAOF", "1", nrep, ntmo);
        else
            relock__batch_words(out, 3, "WAIT", nrep, ntmo);
        /* Only the write's connection can ask; the server answers within
         * timeout_ms. */
        out->pinned = 1;
        out->slow_ms = tmo;
        return relock__send_at(&m->h, out, 1, 0);
    }
    if (in->fault == RELOCK__FAULT_UNSENT && in->fault_status == RELOCK_EDURABILITY) {
        relock__err_clear(&c->err);
        return relock__done(&m->h, RELOCK__FAIL(&c->err, RELOCK_EDURABILITY,
                                                "%s %s: the connection changed between the "
                                                "write and WAIT, so no replica "
                                                "acknowledgement can be counted for it (0 of "
                                                "%ld replicas)",
                                                m->op, l->name, want));
    }
    if (in->fault != RELOCK__FAULT_NONE || in->nreply < 1) {
        char why[200];
        snprintf(why, sizeof why, "%s",
                 in->fault_text && in->fault_text[0] ? in->fault_text : "connection lost");
        relock__err_clear(&c->err);
        relock_status st = in->fault_status == RELOCK_ENOMEM ? RELOCK_ENOMEM : RELOCK_EIO;
        return relock__done(&m->h, RELOCK__FAIL(&c->err, st,
                                                "%s %s: %s on " RELOCK__ADDR_FMT
                                                ": %s; the replicas' acknowledgement is unknown",
                                                m->op, l->name, what,
                                                RELOCK__ADDR(c->conn.srv), why));
    }
    const redisReply *r = in->reply[0];
    int aof = c->s.durability.aof;
    if (r->type == REDIS_REPLY_ERROR &&
        (strstr(r->str, "unknown command") || strstr(r->str, "appendonly")))
        return relock__done(&m->h, RELOCK__FAIL_SRV(&c->err, RELOCK_EUNSUPPORTED, r->str,
                                                    "%s %s: the server refused %s: %s", m->op,
                                                    l->name, what, r->str));
    if (!relock__reply_is(r, aof ? "a[ii$]" : "i"))
        return relock__done(&m->h, RELOCK__BAD_REPLY(c, what, r));
    long long local = aof ? r->element[0]->integer : 1;
    long long got = aof ? r->element[1]->integer : r->integer;
    relock_status st;
    m->acked = got < 0 ? 0 : got > 0x7fffffffLL ? 0x7fffffff : (int)got;
    /* Acknowledged after the lease may have ended: another client may
     * hold the lock now, so never OK (the caller undoes an acquire by
     * compare-and-delete, which cannot touch another holder's value). */
    if (got >= want && local >= 1 && in->mono_ms >= l->valid_until)
        st = RELOCK__FAIL(&c->err, RELOCK_EDURABILITY,
                          "%s %s: %lld of %ld replicas acknowledged (%s), but only after the "
                          "lease's validity ran out",
                          m->op, l->name, got, want, what);
    else if (got >= want && local >= 1)
        st = RELOCK_OK;
    else if (local < 1)
        st = RELOCK__FAIL(&c->err, RELOCK_EDURABILITY,
                          "%s %s: the master did not write it to its append-only file "
                          "within %lld ms (%lld of %ld replicas did; WAITAOF)",
                          m->op, l->name, tmo, got, want);
    else
        st = RELOCK__FAIL(&c->err, RELOCK_EDURABILITY,
                          "%s %s: %lld of %ld replicas acknowledged within %lld ms (%s)", m->op,
                          l->name, got, want, tmo, what);
    return relock__done(&m->h, st);
}

relock_status relock__durable_undone(relock_client *c, const relock__err *kept, relock_status st,
                                     relock_status rst)
{
    if (rst == RELOCK_OK || rst == RELOCK_LOST) {
        relock__err e;
        relock__err_copy(&e, kept);
        size_t n = strlen(e.msg);
        snprintf(e.msg + n, sizeof e.msg - n, "; the lock was not kept (deleted)");
        relock__err_copy(&c->err, &e);
        return st;
    }
    char why[sizeof c->err.msg];
    snprintf(why, sizeof why, "%s", c->err.msg);
    relock__err_clear(&c->err);
    return RELOCK__FAIL(&c->err, RELOCK_EAMBIGUOUS,
                        "%s; deleting it again failed (%.200s): the lock may stay held until "
                        "its TTL ends",
                        kept->msg, why);
}

int relock_client_replicas_acked(const relock_client *c)
{
    return c ? c->replicas_acked : -1;
}
