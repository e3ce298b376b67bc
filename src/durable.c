/*
 * Durability (settings durability.*, DESIGN §7, docs/decisions.md 102-105):
 * after an acquire or an extend has written the lock key, WAIT until
 * durability.replicas replicas acknowledge the write, or with
 * durability.aof WAITAOF until the master and that many replicas have
 * written it to their append-only files, at most durability.timeout_ms.
 *
 * WAIT counts the replicas that acknowledged the replication offset of the
 * connection's own last write, so it must go out on the very connection
 * the write went out on: a new connection has written nothing, and its
 * WAIT would count every replica at once.  It is never sent inside
 * WATCH/MULTI (decision 86): the algorithms' transactions have ended
 * before it is sent.  Settings the mode or the server cannot honour are
 * refused, never ignored: lock_delay_ms outside modern mode (decision
 * 106), durability with several servers, WAIT before 3.0, WAITAOF before
 * 7.2.
 */
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "algo.h"

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

void relock__durable_mark(relock_client *c, relock__wmark *m)
{
    c->replicas_acked = -1;
    if (relock__durable_on(c)) {
        /* A failure shows in the operation itself, which tries to connect
         * again: it must not leave its message behind for a call that then
         * succeeds. */
        relock__err saved;
        relock__err_copy(&saved, &c->err);
        relock__conn_ready(c);
        relock__err_copy(&c->err, &saved);
    }
    m->ctx = c->conn.ctx;
    m->connects = c->connects;
}

static struct timeval tv_ms(long long ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

relock_status relock__durable_wait(relock_lock *l, const char *op, const relock__wmark *m)
{
    relock_client *c = l->c;
    long want = c->s.durability.replicas;
    long long tmo = c->s.durability.timeout_ms;
    c->replicas_acked = 0;
    if (!c->conn.ctx || c->conn.ctx != m->ctx || c->connects != m->connects)
        return RELOCK__FAIL(&c->err, RELOCK_EDURABILITY,
                            "%s %s: the connection changed between the write and WAIT, so no "
                            "replica acknowledgement can be counted for it (0 of %ld "
                            "replicas)",
                            op, l->name, want);
    relock_status st = relock__durable_check(c);
    if (st != RELOCK_OK)
        return st;
    char nrep[24], ntmo[24];
    snprintf(nrep, sizeof nrep, "%ld", want);
    snprintf(ntmo, sizeof ntmo, "%lld", tmo);
    const char *wait[] = {"WAIT", nrep, ntmo};
    const char *waitaof[] = {"WAITAOF", "1", nrep, ntmo};
    const char **argv = c->s.durability.aof ? waitaof : wait;
    int argc = c->s.durability.aof ? 4 : 3;
    const char *what = argv[0];
    /* The server answers after at most timeout_ms: the socket waits that
     * long plus the usual command timeout, then goes back to it. */
    redisContext *ctx = c->conn.ctx;
    redisSetTimeout(ctx, tv_ms(tmo + c->s.command_timeout_ms));
    redisReply *r = redisCommandArgv(ctx, argc, argv, NULL);
    if (!r) {
        const relock__server *srv = c->conn.srv;
        RELOCK__FAIL(&c->err, RELOCK_EIO,
                     "%s %s: %s on " RELOCK__ADDR_FMT ": %s; the replicas' acknowledgement is "
                     "unknown",
                     op, l->name, what, RELOCK__ADDR(srv),
                     ctx->errstr[0] ? ctx->errstr : "connection lost");
        relock__conn_close(&c->conn);
        return RELOCK_EIO;
    }
    redisSetTimeout(ctx, tv_ms(c->s.command_timeout_ms));
    c->conn.last_used = relock__mono_ms();
    long long got = -1, local = 1;
    if (r->type == REDIS_REPLY_INTEGER && !c->s.durability.aof) {
        got = r->integer;
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
               r->element[0]->type == REDIS_REPLY_INTEGER &&
               r->element[1]->type == REDIS_REPLY_INTEGER && c->s.durability.aof) {
        local = r->element[0]->integer;
        got = r->element[1]->integer;
    } else if (r->type == REDIS_REPLY_ERROR &&
               (strstr(r->str, "unknown command") || strstr(r->str, "appendonly"))) {
        st = RELOCK__FAIL_SRV(&c->err, RELOCK_EUNSUPPORTED, r->str,
                              "%s %s: the server refused %s: %s", op, l->name, what, r->str);
    } else {
        st = RELOCK__BAD_REPLY(c, what, r);
    }
    freeReplyObject(r);
    if (st != RELOCK_OK)
        return st;
    c->replicas_acked = got > 0x7fffffffLL ? 0x7fffffff : (int)got;
    /* Acknowledged too late: the lease the write made may have ended while
     * the replicas caught up, and another client may hold the lock now.
     * Never OK with no validity left (the caller undoes an acquire by
     * compare-and-delete, which cannot touch another holder's value). */
    if (got >= want && local >= 1 && relock__mono_ms() >= l->valid_until)
        return RELOCK__FAIL(&c->err, RELOCK_EDURABILITY,
                            "%s %s: %lld of %ld replicas acknowledged (%s), but only after the "
                            "lease's validity ran out",
                            op, l->name, got, want, what);
    if (got >= want && local >= 1)
        return RELOCK_OK;
    if (local < 1)
        return RELOCK__FAIL(&c->err, RELOCK_EDURABILITY,
                            "%s %s: the master did not write it to its append-only file "
                            "within %lld ms (%lld of %ld replicas did; WAITAOF)",
                            op, l->name, tmo, got, want);
    return RELOCK__FAIL(&c->err, RELOCK_EDURABILITY,
                        "%s %s: %lld of %ld replicas acknowledged within %lld ms (%s)", op, l->name,
                        got, want, tmo, what);
}

int relock_client_replicas_acked(const relock_client *c)
{
    return c ? c->replicas_acked : -1;
}
