/*
 * The quorum's fan-out in the operation core (core.h), for both APIs: the
 * fan machine (engine/fan.h, quorum.c) runs over a connection per server;
 * a round's batches go out at once, each server's replies are fed as soon
 * as they are complete, one timer per round feeds the time at its
 * deadline, and the machine decides.  A server still silent when a round
 * is decided owes its replies (read and dropped); a clean-up (a failed
 * acquire's delete) goes behind them however late, so that the server
 * runs it after what it undoes.
 */
#include "core.h"

/* Requests a connection may owe before it is dropped, unless the client
 * sets max_owed (the blocking client's 8).  Pipelined, a server slightly
 * slower than the majority owes hundreds as a matter of course, and
 * lateness is the oldest one's age: this bounds the owed requests' memory. */
#define MAX_OWED_REQUESTS 4096

/* The scripts a quorum sends, loaded on every new connection. */
static const int quorum_scripts[] = {RELOCK__SCRIPT_MODERN_ACQUIRE, RELOCK__SCRIPT_FENCE_RAISE,
                                     RELOCK__SCRIPT_DEL_IF_EQ, RELOCK__SCRIPT_PEXPIRE_IF_EQ};

static void fan_step(aop *op);

/* Whether rq's bytes were all handed to the socket. */
static int rq_written(const areq *rq)
{
    const aconn *cn = rq->cn;
    if (!cn->ac || !cn->connected)
        return 0;
    uint64_t wrote = cn->appended - (cn->ac->c.obuf ? sdslen(cn->ac->c.obuf) : 0);
    return wrote >= rq->end_off;
}

/* Whether rq, live, still has bytes its connected socket did not take. */
static int rq_unwritten(const areq *rq)
{
    return rq && rq->outstanding > 0 && rq->cn->ac && rq->cn->connected && !rq_written(rq);
}

/* Writes cn's buffered output as far as the socket takes it; when all of
 * it went, the loop stops watching for writability as hiredis does after
 * its own write (else the next turn wakes at once for nothing). */
static void fan_write(aconn *cn)
{
    int done = 0;
    if (redisBufferWrite(&cn->ac->c, &done) == REDIS_OK && done && cn->ac->ev.delWrite)
        cn->ac->ev.delWrite(cn->ac->ev.data);
}

static void flush_unwritten(void *arg)
{
    aop *op = arg;
    for (int i = 0; i < op->a->nconns; i++) {
        areq *rq = op->fan->rq[i];
        if (rq_unwritten(rq) && !rq->cn->ac->c.err)
            fan_write(rq->cn);
    }
}

/* Writes what op's connections have buffered now, not at the loop's next
 * turn, under one SIGPIPE block: the machine counts the servers left owing
 * by whether their request was written (it may run) when the round is
 * decided.  Done when a round's batches are sent (a clean-up may be
 * decided at its first feed) and before a feed for a request not taken
 * whole.  A write error stays in the context for hiredis's next write. */
static void fan_flush(aop *op)
{
    int any = 0;
    for (int i = 0; i < op->a->nconns && !any; i++)
        any = rq_unwritten(op->fan->rq[i]);
    if (any)
        relock__write_nopipe(flush_unwritten, op);
}

static void fan_kick_fire(void *arg)
{
    aop *op = arg;
    relock_async *a = op->a;
    op->fan->kick = NULL;
    relock__a_enter(a);
    if (!a->freeing && op->state == S_SENT && op->fan->f.from)
        fan_step(op);
    relock__a_leave(a);
}

/* Records a fault of server i in the next feed; from the loop when not
 * stepping already (the connection's teardown goes on around it). */
static void fan_fault(aop *op, int i, relock__fault fault, relock_status st, const char *text)
{
    afan *F = op->fan;
    F->f.from |= 1u << i;
    if (text)
        snprintf(F->text[i], sizeof F->text[0], "%s", text);
    F->f.srv[i] = (relock__feed){.fault = fault, .fault_status = st ? st : RELOCK_EIO,
                                 .fault_text = text ? F->text[i] : NULL};
}

/* Server i's connection failed under op's live request rq (already out of
 * the FIFO): rq goes, and the fault is fed from the loop. */
void relock__a_fan_gone(aop *op, areq *rq, relock__fault fault, relock_status st, const char *text)
{
    afan *F = op->fan;
    int i = rq->cn->idx;
    if (F && F->rq[i] == rq) {
        F->rq[i] = NULL;
        fan_fault(op, i, fault, st, text);
        if (!F->kick)
            F->kick = timer_start(op->a, 0, fan_kick_fire, op);
    }
    relock__a_rq_clear(rq);
    free(rq);
}

/* Server i answered op's request rq wholly (rq is out of the FIFO). */
void relock__a_fan_reply(aop *op, areq *rq)
{
    afan *F = op->fan;
    int i = rq->cn->idx;
    int ours = F && F->rq[i] == rq;
    int missing = rq->nrep < rq->expect;
    for (int k = 0; k < rq->nrep; k++)
        missing |= !rq->rep[k];
    if (!ours || missing) {
        relock__a_rq_clear(rq);
        free(rq);
        if (!ours)
            return;
        F->rq[i] = NULL;
        fan_fault(op, i, RELOCK__FAULT_LOST, RELOCK_ENOMEM, "out of memory for a reply");
    } else {
        /* the replies stay in rq (F->rq[i]) until the machine has read them */
        F->f.from |= 1u << i;
        F->f.srv[i] = (relock__feed){.reply = rq->rep, .nreply = rq->nrep};
        rq->outstanding = -1; /* answered: fed, then freed */
    }
    F->f.mono_ms = now_ms();
    fan_step(op);
}

static void fan_timer_fire(void *arg)
{
    aop *op = arg;
    relock_async *a = op->a;
    op->fan->timer = NULL;
    relock__a_enter(a);
    if (!a->freeing && op->state == S_SENT) {
        op->fan->f.mono_ms = now_ms();
        fan_step(op);
    }
    relock__a_leave(a);
}

/* Drops a quorum connection; late: left alone for timeout_ms. */
static void fan_drop(aconn *cn, const char *why, uint64_t now, long long late_ms)
{
    if (cn->ac)
        relock__a_conn_gone(cn, 0, RELOCK_EIO, why);
    if (late_ms > 0)
        cn->retry_at = now + (uint64_t)late_ms;
}

/* A reply to a quorum connection's setup: a refused AUTH or SELECT drops
 * it, fed to the machines as a configuration fault; SCRIPT LOAD's errors
 * do not matter (NOSCRIPT then brings EVAL). */
static void on_fan_setup(redisAsyncContext *ac, void *rr, void *priv)
{
    aconn *cn = ac->data;
    redisReply *r = rr;
    if (!cn || !r || !priv || r->type != REDIS_REPLY_ERROR || cn->a->freeing)
        return;
    relock_async *a = cn->a;
    relock__a_enter(a);
    char why[300];
    snprintf(why, sizeof why, "AUTH/SELECT: %.150s", r->str ? r->str : "");
    /* a transient error is a connection that failed, not a refusal */
    relock__a_conn_gone(cn, 0, relock__reply_transient(r->str) ? RELOCK_EIO : RELOCK_ECONFIG,
                        why);
    relock__a_leave(a);
}

/* Appends one formatted command of a quorum connection's setup. */
static int fan_setup_cmd(aconn *cn, int argc, const char **argv, int login)
{
    size_t len[4];
    for (int i = 0; i < argc; i++)
        len[i] = strlen(argv[i]);
    char *cmd = NULL;
    int fl = relock__a_fmt_cmd(&cmd, argc, argv, len);
    if (fl < 0)
        return -1;
    cn->appended += (uint64_t)fl;
    /* priv: non-NULL for AUTH and SELECT, whose refusal matters */
    int rc = redisAsyncFormattedCommand(cn->ac, on_fan_setup, login ? (void *)cn : NULL, cmd,
                                        (size_t)fl);
    free(cmd);
    return rc == REDIS_OK ? 0 : -1;
}

/* Opens a quorum connection and pipelines its setup, with no probe
 * (modern values only); 0, or -1. */
static int fan_connect(aconn *cn)
{
    relock_async *a = cn->a;
    const relock__server *srv = cn->srv;
    redisAsyncContext *ac =
        srv->port ? redisAsyncConnect(srv->host, srv->port) : redisAsyncConnectUnix(srv->host);
    if (!ac || ac->err || relock__loop_attach(&a->loop, ac) != 0) {
        if (ac)
            redisAsyncFree(ac);
        return -1;
    }
    ac->data = cn;
    cn->ac = ac;
    relock__a_take_install(ac);
    cn->appended = 0;
    cn->connected = 0;
    cn->cstate = C_READY; /* commands wait in hiredis's buffer until it is up */
    a->c->connects++;
    redisAsyncSetConnectCallback(ac, relock__a_on_connect);
    redisAsyncSetDisconnectCallback(ac, relock__a_on_disconnect);
    cn->conn_timer = timer_start(a, a->c->s.connect_timeout_ms, relock__a_conn_timeout, cn);
    int bad = 0;
    char db[16];
    relock__cmd login[2];
    for (int i = 0, k = relock__a_login(srv, db, login); i < k; i++)
        bad |= fan_setup_cmd(cn, login[i].argc, login[i].argv, 1);
    for (size_t k = 0; k < sizeof quorum_scripts / sizeof quorum_scripts[0]; k++) {
        const char *argv[3] = {"SCRIPT", "LOAD", relock__script_source(quorum_scripts[k])};
        bad |= fan_setup_cmd(cn, 3, argv, 0);
    }
    if (bad) {
        relock__a_conn_gone(cn, 0, RELOCK_ENOMEM, "out of memory");
        return -1;
    }
    return 0;
}

/* Formats batch b as a request of op on cn; NULL out of memory. */
static areq *fan_request(aop *op, aconn *cn, const relock__batch *b)
{
    areq *rq = calloc(1, sizeof *rq);
    if (!rq)
        return NULL;
    rq->op = op;
    rq->cn = cn;
    int fl = relock__a_rq_room(rq, b->n);
    for (int k = 0; fl >= 0 && k < b->n; k++) {
        const relock__cmd *cmd = &b->cmd[k];
        fl = relock__a_fmt_cmd(&rq->cmd[k], cmd->argc, (const char *const *)cmd->argv, cmd->len);
        rq->len[k] = (size_t)fl;
        rq->n = k + 1; /* (a command that failed is left NULL) */
    }
    if (fl < 0) {
        relock__a_rq_clear(rq);
        free(rq);
        return NULL;
    }
    return rq;
}

/* A new round's batch to server i: the connection dropped and left alone
 * for a timeout when it owes max_owed replies or one older than that,
 * opened if needed, and the batch written; 0, or -1 when the server is
 * not reached.  after: the batch is a clean-up (fan.h), which goes to a
 * new connection only when the one it follows is gone. */
static int fan_start_one(aop *op, int i, const relock__batch *b, uint64_t now,
                         long long timeout_ms, int after)
{
    relock_async *a = op->a;
    aconn *cn = &a->conns[i];
    if (cn->ac && !after) {
        int owed = 0;
        uint64_t oldest = 0;
        for (areq *p = cn->fifo; p; p = p->fnext)
            if (!p->op) {
                if (!owed)
                    oldest = p->sent_at;
                owed++;
            }
        int max_owed = a->max_owed > 0 ? a->max_owed : MAX_OWED_REQUESTS;
        if (owed > 0 && (owed >= max_owed || now - oldest > (uint64_t)timeout_ms))
            fan_drop(cn, "too far behind: dropped", now, timeout_ms);
    }
    if (!cn->ac && ((now < cn->retry_at && !after) || fan_connect(cn) != 0))
        return -1;
    areq *rq = fan_request(op, cn, b);
    if (!rq)
        return -1;
    cn->late_ms = timeout_ms;
    op->fan->rq[i] = rq;
    op->sent_any = 1;
    relock__a_rq_send(rq);
    return 0;
}

/* The round is decided at now: a server still silent owes its replies if
 * its batch was written (it may still run the request, and a clean-up must
 * follow it on this connection), else its connection is dropped. */
static void fan_close_round(aop *op, uint64_t now)
{
    relock_async *a = op->a;
    afan *F = op->fan;
    if (!F->open)
        return;
    F->open = 0;
    timer_stop(a, &F->timer);
    for (int i = 0; i < a->nconns; i++) {
        areq *rq = F->rq[i];
        if (!rq)
            continue;
        F->rq[i] = NULL;
        aconn *cn = rq->cn;
        if (rq->outstanding < 0) { /* answered, not fed: cannot happen after a step */
            relock__a_rq_clear(rq);
            free(rq);
            continue;
        }
        int written = rq_written(rq);
        rq->op = NULL; /* owed, or gone with its connection below */
        if (!written)
            fan_drop(cn, "decided without it before its request was written: dropped", now, 0);
    }
}

/* Frees what the last feed brought and empties it. */
static void fan_reset_feed(aop *op)
{
    afan *F = op->fan;
    int n = op->a->nconns;
    for (int i = 0; i < n; i++) {
        if (((F->f.from >> i) & 1u) && F->rq[i] && F->rq[i]->outstanding < 0) {
            relock__a_rq_clear(F->rq[i]);
            free(F->rq[i]);
            F->rq[i] = NULL;
        }
        memset(&F->f.srv[i], 0, sizeof F->f.srv[i]);
    }
    F->f.from = 0;
    F->f.reached = 0;
}

/* The operation's fan machine has ended, or the operation ends: its round
 * is closed and its timers stopped. */
void relock__a_fan_end(aop *op)
{
    afan *F = op->fan;
    if (!F)
        return;
    relock_async *a = op->a;
    timer_stop(a, &F->timer);
    timer_stop(a, &F->kick);
    fan_reset_feed(op);
    if (F->open)
        fan_close_round(op, now_ms());
    for (int i = 0; i < a->nconns; i++)
        if (F->rq[i]) { /* detached: read and dropped, or freed with its connection */
            F->rq[i]->op = NULL;
            F->rq[i] = NULL;
        }
}

/* Starts op's fan machine (op->m initialised) from its first feed. */
void relock__a_fan_begin(aop *op)
{
    if (!op->fan) {
        op->fan = calloc(1, sizeof *op->fan + (size_t)op->a->nconns * sizeof op->fan->text[0]);
        if (!op->fan) {
            relock__a_machine_done(op,
                                   relock__a_op_fail(op, RELOCK_ENOMEM, "lock %s: out of memory",
                                                     op->l ? op->l->name : ""));
            return;
        }
    } else {
        relock__a_fan_end(op);
        memset(op->fan, 0, sizeof *op->fan);
    }
    op->state = S_SENT;
    op->sent_any = 0;
    op->fan->f.mono_ms = now_ms();
    fan_step(op);
}

/* Feeds op's fan machine what its feed holds and does what it answers,
 * until it waits for replies or the round's deadline, or ends. */
static void fan_step(aop *op)
{
    relock_async *a = op->a;
    afan *F = op->fan;
    relock__fanout *out = a->fanout;
    relock__mhead *h = op->m;
    int n = a->nconns;
    timer_stop(a, &F->kick);
    relock__a_fan_undue(op); /* its first feed is now, whatever brought it */
    for (;;) {
        fan_flush(op); /* what the socket did not take whole yet */
        F->f.written = 0;
        for (int i = 0; i < n; i++)
            if (F->rq[i] && rq_written(F->rq[i]))
                F->f.written |= 1u << i;
        relock__a_err_load(op);
        relock__step s = a->kit->fan(op->m, op->l, &F->f, out);
        relock__a_err_save(op);
        uint64_t fed_at = F->f.mono_ms;
        fan_reset_feed(op);
        int bad = s != RELOCK__STEP_DONE && ++F->feeds >= RELOCK__FAN_MAX_FEEDS;
        for (int i = 0; s == RELOCK__STEP_SEND && i < n; i++)
            if ((out->mask >> i) & 1u)
                bad |= !relock__batch_ok(&out->b[i]) || out->b[i].n < 1;
        if (s == RELOCK__STEP_DONE || bad) {
            fan_close_round(op, fed_at);
            op->state = S_RUN;
            relock_status st = h->st;
            if (bad)
                st = relock__a_op_fail(op, RELOCK_EPROTO, "lock %s: internal error: %s",
                                       op->l->name, F->feeds >= RELOCK__FAN_MAX_FEEDS
                                                        ? "an operation did not end"
                                                        : "a command batch overflowed");
            relock__a_machine_done(op, st);
            return;
        }
        if (s == RELOCK__STEP_SEND && out->round) {
            /* A new round: the last one is decided. */
            fan_close_round(op, fed_at);
            F->open = 1;
            F->timeout_ms = out->timeout_ms;
            F->start = now_ms();
            F->end = F->start + (uint64_t)out->timeout_ms;
            for (int i = 0; i < n; i++)
                if (((out->mask >> i) & 1u) &&
                    fan_start_one(op, i, &out->b[i], F->start, F->timeout_ms,
                                  (int)((out->after >> i) & 1u)) == 0)
                    F->f.reached |= 1u << i;
            F->timer = timer_start(a, out->timeout_ms, fan_timer_fire, op);
            F->f.mono_ms = F->start;
            if (a->batching) {
                /* started with others by one timer: flushed with theirs,
                 * then fed, at that timer's end (fan_due_run) */
                op->due = 1;
                due_push_(&a->fan_due, &a->fan_due_tail, op);
                return;
            }
            continue; /* flushed before the first feed */
        }
        if (s == RELOCK__STEP_SEND) {
            /* Within the round: a server's batch again, in place of the
             * one it answered. */
            for (int i = 0; i < n; i++) {
                if (!((out->mask >> i) & 1u))
                    continue;
                aconn *cn = &a->conns[i];
                areq *rq = cn->ac ? fan_request(op, cn, &out->b[i]) : NULL;
                if (!rq) {
                    fan_fault(op, i, RELOCK__FAULT_UNSENT, cn->ac ? RELOCK_ENOMEM : RELOCK_EIO,
                              NULL);
                    continue;
                }
                F->rq[i] = rq;
                relock__a_rq_send(rq);
            }
            fan_flush(op);
        }
        if (F->f.from) {
            F->f.mono_ms = now_ms();
            continue;
        }
        if (!F->timer) {
            /* past the deadline and still waiting: feed the time again soon */
            uint64_t now = now_ms();
            F->timer = timer_start(a, F->end > now ? (long long)(F->end - now) : 1,
                                   fan_timer_fire, op);
        }
        return;
    }
}

/* op out of the client's fan_due list, if there. */
void relock__a_fan_undue(aop *op)
{
    relock_async *a = op->a;
    if (!op->due)
        return;
    due_remove_(&a->fan_due, &a->fan_due_tail, op);
    op->due = 0;
}

static void flush_all(void *arg)
{
    relock_async *a = arg;
    for (int i = 0; i < a->nconns; i++) {
        aconn *cn = &a->conns[i];
        if (cn->ac && cn->connected && !cn->ac->c.err && cn->ac->c.obuf &&
            sdslen(cn->ac->c.obuf) > 0)
            fan_write(cn);
    }
}

/* The first feeds of the quorum rounds started together: every connection
 * flushed once (one SIGPIPE block, one write each), then each round fed
 * in the order started, with what was written. */
void relock__a_fan_due_run(relock_async *a)
{
    if (!a->fan_due || a->freeing)
        return;
    relock__write_nopipe(flush_all, a);
    while (a->fan_due && !a->freeing) {
        aop *op = a->fan_due;
        relock__a_fan_undue(op);
        if (op->state == S_SENT && op->fan)
            fan_step(op);
    }
}
