/*
 * The blocking driver on the client's own connection (c->conn): runs a
 * step machine until it ends.  Every one-server call (through Sentinel
 * and on a Cluster too) and the scan run over the operation core instead
 * (relock__drive() hands them to pollloop.c); a quorum client's calls on
 * its first server that are not fan machines still run here: the server
 * it reports, inspect, the markers' writes and the durable write's mark.
 * Each
 * batch goes through conn.c, which is where routing, Cluster
 * redirections, the stale-connection check
 * and command_timeout_ms live; a batch that fails part way is fed back as
 * a fault: UNSENT when the commands never left (the connect failed, the
 * transaction's connection was gone), LOST when they may have run (the
 * send or the read failed, or no reply came in time).
 *
 * Transactions (design.md §13.3, decision 86): a batch marked in_txn starts one
 * (relock__txn_begin: connects now, and from there nothing reconnects,
 * redirects or replaces the connection); the first batch without the mark
 * is sent inside it and ends it.  A machine that ends with a transaction
 * still open has its connection closed, which discards a queued MULTI and
 * drops a WATCH the server may still hold.
 */
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "clock.h"
#include "drive.h"
#include "engine/engine.h"
#include "routing.h"
#include "pollloop.h"

static void free_replies(redisReply **rep, int n)
{
    for (int i = 0; i < n; i++)
        if (rep[i]) {
            freeReplyObject(rep[i]);
            rep[i] = NULL;
        }
}

static void set_fault(relock_client *c, relock__feed *in, relock__fault f)
{
    in->fault = f;
    in->fault_status = c->err.pub.status != RELOCK_OK ? c->err.pub.status : RELOCK_EIO;
    in->fault_text = c->err.msg;
}

static struct timeval tv_ms(long long ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

/*
 * A pinned batch (the WAIT after a write): on the connection l's write
 * went out on (l->wmark, relock__durable_mark), directly, never through
 * conn.c, which would connect, replace a stale connection or follow a
 * redirection.  The socket waits slow_ms longer for the replies.
 */
static void run_pinned(relock_lock *l, const relock__batch *b, redisReply **rep,
                       relock__feed *in)
{
    relock_client *c = l->c;
    redisContext *ctx = c->conn.ctx;
    if (!ctx || ctx != l->wmark.ctx || c->connects != l->wmark.connects || c->conn.in_txn) {
        in->fault = RELOCK__FAULT_UNSENT;
        in->fault_status = RELOCK_EDURABILITY;
        in->fault_text = "the connection changed since the write";
        return;
    }
    for (int i = 0; i < b->n; i++) {
        const relock__cmd *k = &b->cmd[i];
        if (redisAppendCommandArgv(ctx, k->argc, (const char **)k->argv, k->len) != REDIS_OK) {
            relock__conn_close(&c->conn); /* nothing was written yet */
            RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "%s: out of memory", k->argv[0]);
            set_fault(c, in, RELOCK__FAULT_UNSENT);
            return;
        }
    }
    redisSetTimeout(ctx, tv_ms(b->slow_ms + c->s.command_timeout_ms));
    for (; in->nreply < b->n; in->nreply++) {
        void *reply = NULL;
        if (redisGetReply(ctx, &reply) != REDIS_OK || !reply) {
            RELOCK__FAIL(&c->err, RELOCK_EIO, "%s",
                         ctx->errstr[0] ? ctx->errstr : "connection lost");
            if (reply)
                freeReplyObject(reply);
            set_fault(c, in, RELOCK__FAULT_LOST);
            relock__conn_close(&c->conn);
            return;
        }
        rep[in->nreply] = reply;
    }
    redisSetTimeout(ctx, tv_ms(c->s.command_timeout_ms));
    c->conn.last_used = relock__mono_ms();
}

/* Sends batch b and fills *in with its replies (into rep) or its fault.
 * inner: a machine run inside another's step (the fleet's clock), which
 * leaves the transaction as it is. */
static void run_batch(relock_lock *l, const relock__batch *b, redisReply **rep,
                      relock__feed *in, int inner)
{
    relock_client *c = l->c;
    in->nreply = 0;
    in->fault = RELOCK__FAULT_NONE;
    in->fault_status = RELOCK_OK;
    in->fault_text = NULL;
    if (b->n == 0)
        return;
    if (b->pinned) {
        run_pinned(l, b, rep, in);
        return;
    }
    if (inner && b->in_txn != c->conn.in_txn) {
        RELOCK__FAIL(&c->err, RELOCK_EPROTO, "internal error: a batch inside another changed "
                                             "the transaction");
        set_fault(c, in, RELOCK__FAULT_UNSENT);
        return;
    }
    if (b->in_txn && !c->conn.in_txn && relock__txn_begin(c) != RELOCK_OK) {
        set_fault(c, in, RELOCK__FAULT_UNSENT);
        return;
    }
    char *cmd[RELOCK__BATCH_CMDS];
    size_t len[RELOCK__BATCH_CMDS];
    const char *name[RELOCK__BATCH_CMDS];
    int n = 0;
    for (; n < b->n; n++) {
        const relock__cmd *k = &b->cmd[n];
        cmd[n] = NULL;
        name[n] = k->argv[0];
        /* hiredis 0.14 takes the words without const; it only reads them. */
        int fl = redisFormatCommandArgv(&cmd[n], k->argc, (const char **)k->argv, k->len);
        if (fl < 0) {
            RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "%s: out of memory", k->argv[0]);
            break;
        }
        len[n] = (size_t)fl;
    }
    if (n == b->n) {
        int sent = 0;
        in->nreply = relock__conn_pipeline(c, n, cmd, len, name, rep, &sent);
        if (in->nreply < n)
            set_fault(c, in, sent ? RELOCK__FAULT_LOST : RELOCK__FAULT_UNSENT);
    } else {
        set_fault(c, in, RELOCK__FAULT_UNSENT);
    }
    for (int i = 0; i < n; i++)
        redisFreeCommand(cmd[i]);
    if (!inner && !b->in_txn && c->conn.in_txn)
        relock__txn_end(c);
}

/* A machine ends: a transaction it left open is discarded with its
 * connection (the next command connects afresh).  Open means the
 * connection is still marked, or the machine says so (h->in_txn): an
 * error reply to EXEC leaves the server's state unknown, a MULTI perhaps
 * still queued. */
static relock_status end(relock_client *c, const relock__mhead *h, relock_status st)
{
    if (c->conn.in_txn || h->in_txn) {
        if (c->conn.in_txn)
            relock__txn_end(c);
        relock__conn_close(&c->conn);
    }
    return st;
}

static relock_status drive_loop(relock_lock *l, relock__step_fn fn, void *m, int inner);

/*
 * Runs machine m inside a step of another (inner): its batches go on the
 * connection as it is, inside the other's transaction if one is open, and
 * must not start or end one.  For the fleet's clock below.
 */
static relock_status drive_inner(relock_lock *l, relock__step_fn fn, void *m)
{
    return drive_loop(l, fn, m, 1);
}

/* The fleet's clock (legacy.clock) into in->fleet_ms: the local wall
 * clock, or the server's by the estimate on the connection, measured again
 * by the clock machine (clock.h) when it is due or when the machine asks
 * for a fresh reading (want == RELOCK__FLEET_FRESH), which in->fleet_fresh
 * then confirms. */
static relock_status fleet_ms(relock_lock *l, int want, relock__feed *in)
{
    relock_client *c = l->c;
    if (!c->s.legacy.clock_server) {
        in->fleet_ms = relock__wall_ms();
        in->fleet_fresh = 1;
        return RELOCK_OK;
    }
    if (relock__conn_ensure(c) != RELOCK_OK)
        return c->err.pub.status;
    if (want == RELOCK__FLEET_FRESH || relock__clock_due(&c->conn.clock, relock__mono_ms())) {
        relock__clock_m cm;
        relock__clock_init(&cm, c->conn.in_txn);
        relock_status st = drive_inner(l, relock__clock_step, &cm);
        if (st != RELOCK_OK)
            return st;
        in->fleet_fresh = 1;
    }
    in->fleet_ms = relock__clock_server_ms(&c->conn.clock, relock__mono_ms());
    return RELOCK_OK;
}

/*
 * The step loop of both: an inner machine (drive_inner) reads no fleet's
 * clock, and leaves the transaction and the legacy note to the machine it
 * runs inside; the outer one (relock__drive) ends both itself.
 */
static relock_status drive_loop(relock_lock *l, relock__step_fn fn, void *m, int inner)
{
    relock_client *c = l->c;
    relock__mhead *h = m;
    relock__batch b;
    redisReply *rep[RELOCK__BATCH_CMDS] = {NULL};
    relock__feed in;
    memset(&in, 0, sizeof in);
    in.reply = rep;
    relock__batch_reset(&b);
    for (int steps = 0;; steps++) {
        in.mono_ms = relock__mono_ms();
        in.fleet_ms = 0;
        in.fleet_fresh = 0;
        if (!inner && h->want_fleet && in.fault == RELOCK__FAULT_NONE) {
            relock_status fst = fleet_ms(l, h->want_fleet, &in);
            if (fst != RELOCK_OK)
                set_fault(c, &in, RELOCK__FAULT_UNSENT);
        }
        relock__step s = fn(m, l, &in, &b);
        free_replies(rep, in.nreply);
        if (s == RELOCK__STEP_DONE) {
            if (inner)
                return h->st;
            /* A transaction left open is discarded first: the marker's
             * write would otherwise be queued in it, and lost. */
            relock_status st = end(c, h, h->st);
            if (h->note_legacy)
                relock__note_legacy_writer(c);
            return st;
        }
        if (!relock__batch_ok(&b) || steps >= RELOCK__DRIVE_MAX_STEPS) {
            const char *why = steps >= RELOCK__DRIVE_MAX_STEPS ? "an operation did not end"
                                                               : "a command batch overflowed";
            if (inner)
                return RELOCK__FAIL(&c->err, RELOCK_EPROTO, "internal error: %s", why);
            return end(c, h,
                       RELOCK__FAIL(&c->err, RELOCK_EPROTO, "lock %s: internal error: %s",
                                    l->name, why));
        }
        run_batch(l, &b, rep, &in, inner);
    }
}

relock_status relock__drive(relock_lock *l, relock__step_fn fn, void *m)
{
    /* One server, directly, through Sentinel or on a Cluster: over the
     * operation core (pollloop.c). */
    if (relock__poll_single(l->c))
        return relock__poll_drive(l, fn, m);
    return drive_loop(l, fn, m, 0);
}

relock_status relock__drive_conn(relock_lock *l, relock__step_fn fn, void *m)
{
    return drive_loop(l, fn, m, 0);
}

relock_status relock__drive_ready(relock_client *c, const char *key)
{
    if (relock__poll_single(c))
        return relock__poll_ready(c, key);
    return relock__conn_ready(c);
}
