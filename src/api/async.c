/*
 * The asynchronous client's public entry points (relock_async.h); the
 * operations run in the operation core, src/core/ (core.h).
 */

#include "api.h"
#include "core/core.h"

/* The client cannot be used: st and c's error answer every call from now on. */
static relock_status unusable(relock_async *a, relock_status st)
{
    relock__err_copy(&a->err, &a->c->err);
    relock__err_copy(&a->fatal_err, &a->err);
    return a->fatal = st;
}

relock_status relock_async_new(const relock_config *cfg, const relock_async_loop *loop,
                               relock_async **out)
{
    if (!out)
        return RELOCK_EINVAL;
    *out = NULL;
    if (!cfg || !relock__loop_valid(loop))
        return RELOCK_EINVAL;
    relock_async *a = calloc(1, sizeof *a);
    relock_client *c = a ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        free(a);
        return RELOCK_ENOMEM;
    }
    relock__err_clear(&a->err);
    *out = a;
    a->c = c;
    memcpy(&a->loop, loop, loop->size < sizeof a->loop ? loop->size : sizeof a->loop);
    a->select_mode = relock__select_mode;
    a->loop.size = sizeof a->loop;
    relock__client_init(c, cfg, a);
    snprintf(c->mode_reason, sizeof c->mode_reason,
             "this lock belongs to an asynchronous client: use relock_async_*()");
    /* A connection per server, none open yet; one server may be a Cluster
     * node, and the others met get theirs (node_conn). */
    int nconns = c->s.nservers > 0 ? c->s.nservers : 1;
    a->ncap = nconns == 1 && !relock__sentinel_on(&c->s) ? ACONN_NODES : nconns;
    a->conns = calloc((size_t)a->ncap, sizeof *a->conns);
    if (!a->conns)
        return unusable(a, RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "out of memory"));
    a->nconns = nconns;
    for (int i = 0; i < nconns; i++)
        a->conns[i] = (aconn){.a = a, .idx = i, .srv = &c->s.servers[i]};
    a->home = &a->conns[0];
    if (relock__sentinel_on(&c->s)) {
        /* Sentinel: the connection goes to the master the sentinels name */
        a->conns[0].node = c->s.servers[0];
        a->conns[0].srv = &a->conns[0].node;
    }
    if (c->s.nservers <= 1) {
        relock__a_conn_connect(&a->conns[0]);
        return RELOCK_OK;
    }
    /* A quorum: the blocking client's checks (relock_connect), the mode
     * fixed (modern values), no probe; connections open as the first round
     * needs them. */
    relock_status st = relock__quorum_check(c);
    if (st == RELOCK_OK)
        st = relock__quorum_setup(c);
    a->fanout = st == RELOCK_OK ? malloc(sizeof *a->fanout) : NULL;
    if (st == RELOCK_OK && !a->fanout)
        st = RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "servers: out of memory");
    c->algo = NULL; /* the blocking calls must not run on this client's locks */
    if (st != RELOCK_OK)
        return unusable(a, st);
    a->kit = relock__algo_quorum.machines;
    a->probed = 1;
    return RELOCK_OK;
}

const relock_error *relock_async_error(const relock_async *a)
{
    return a ? &a->err.pub : &relock__null_handle_error;
}

relock_mode relock_async_mode(const relock_async *a)
{
    return a && a->probed && !a->fatal ? a->c->mode : RELOCK_MODE_AUTO;
}

const char *relock_async_mode_reason(const relock_async *a)
{
    if (!a)
        return "";
    if (!a->probed)
        return a->fatal ? a->err.msg : "not yet probed";
    return a->c->mode_reason;
}

int relock_async_replicas_acked(const relock_async *a)
{
    return a ? a->c->replicas_acked : -1;
}

long relock_async_pending(const relock_async *a)
{
    return a ? a->pending : 0;
}

__attribute__((format(printf, 3, 4)))
static relock_status refuse(relock_async *a, relock_status st, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    relock__err_clear(&a->err);
    return RELOCK__FAIL(&a->err, st, "%s", msg);
}

/* Clears a's error for a new call, or sets it to the error that made the
 * client unusable and returns that error's status. */
static relock_status usable(relock_async *a)
{
    relock__err_clear(&a->err);
    if (a->fatal)
        relock__err_copy(&a->err, &a->fatal_err);
    return a->fatal;
}

relock_status relock_async_acquire(relock_async *a, const char *name, long long ttl_ms,
                                   long long wait_ms, relock_async_fn cb, void *arg,
                                   relock_async_op **opp)
{
    if (opp)
        *opp = NULL;
    if (!a || a->freeing)
        return RELOCK_EINVAL;
    if (usable(a) != RELOCK_OK)
        return a->fatal;
    if (!cb)
        return refuse(a, RELOCK_EINVAL, "acquire: no callback");
    if (wait_ms == RELOCK_WAIT_DEFAULT)
        wait_ms = a->c->s.wait.max_ms;
    if (wait_ms < RELOCK_WAIT_FOREVER)
        return refuse(a, RELOCK_EINVAL, "wait: %lld ms is not a valid bound", wait_ms);
    if (!relock__a_start_armed(a))
        return refuse(a, RELOCK_ENOMEM, "acquire %s: out of memory for a timer", name);
    relock_lock *l;
    relock__err_clear(&a->c->err);
    relock_status st = relock__lock_new(a->c, name, ttl_ms, &l);
    if (st != RELOCK_OK) {
        relock__err_copy(&a->err, &a->c->err);
        return st;
    }
    aop *op = relock__a_op_new(a, K_ACQ, cb, arg);
    if (!op || !relock__a_alock(a, l)) {
        free(op);
        relock_lock_free(l);
        return refuse(a, RELOCK_ENOMEM, "acquire %s: out of memory", name);
    }
    op->l = l;
    l->al->busy = op;
    op->wait_ms = wait_ms;
    op->began = now_ms();
    op->deadline = wait_ms > 0 ? op->began + (uint64_t)wait_ms : 0;
    relock__a_op_enqueue(op);
    if (opp)
        *opp = (relock_async_op *)op;
    return RELOCK_OK;
}

relock_status relock_async_scan(relock_async *a, const char *match, relock_scan_key_fn fn,
                                void *fn_arg, relock_async_scan_fn cb, void *arg)
{
    if (!a || a->freeing)
        return RELOCK_EINVAL;
    relock__err_clear(&a->err);
    if (a->fatal && !a->fatal_mode) {
        relock__err_copy(&a->err, &a->fatal_err);
        return a->fatal;
    }
    if (!cb)
        return refuse(a, RELOCK_EINVAL, "scan: no callback");
    if (a->c->s.nservers > 1)
        return refuse(a, RELOCK_EUNSUPPORTED,
                      "scan: not with several servers; scan each server with its own URL");
    return relock__a_scan(a, match, fn, fn_arg, cb, arg);
}

relock_status relock_async_try_acquire(relock_async *a, const char *name, long long ttl_ms,
                                       relock_async_fn cb, void *arg, relock_async_op **op)
{
    return relock_async_acquire(a, name, ttl_ms, 0, cb, arg, op);
}

relock_status relock_async_cancel(relock_async_op *h)
{
    aop *op = (aop *)h;
    if (!op || op->kind != K_ACQ)
        return RELOCK_EINVAL;
    if (!op->cancelled && op->state != S_DONE)
        relock__a_op_cancel(op);
    return RELOCK_OK;
}

/* Stops l's renewal; a loss it saw marks the handle lost (non-zero). */
static int keep_end(struct relock__alock *al, relock_lock *l)
{
    relock__a_keep_stop(al);
    if (al->keep_lost)
        l->lost = 1;
    return al->keep_lost;
}

static relock_status lock_op(relock_lock *l, int kind, long long ttl_ms, relock_async_fn cb,
                             void *arg)
{
    if (!l || !l->al || !l->al->a)
        return RELOCK_EINVAL;
    struct relock__alock *al = l->al;
    relock_async *a = al->a;
    const char *what = kind == K_REL ? "release" : "extend";
    if (a->freeing)
        return RELOCK_EINVAL;
    if (usable(a) != RELOCK_OK)
        return a->fatal;
    if (!cb)
        return refuse(a, RELOCK_EINVAL, "%s: no callback", what);
    if (kind == K_EXT) {
        if (ttl_ms < 0 || ttl_ms > RELOCK__TTL_MAX_MS)
            return refuse(a, RELOCK_EINVAL, "ttl: %lld ms is not from 1 ms to one year", ttl_ms);
        if (al->kept)
            return refuse(a, RELOCK_EINVAL,
                          "extend %s: the lock is being renewed by the loop; call "
                          "relock_async_keep_stop() first",
                          l->name);
        if (ttl_ms == 0)
            ttl_ms = l->ttl_ms;
    }
    if (al->after || (al->busy && (kind != K_REL || al->busy->kind != K_KEEP)))
        return refuse(a, RELOCK_EINVAL, "%s %s: another operation on this lock is in flight",
                      what, l->name);
    if (!relock__a_start_armed(a))
        return refuse(a, RELOCK_ENOMEM, "%s %s: out of memory for a timer", what, l->name);
    aop *op = relock__a_op_new(a, kind, cb, arg);
    if (!op)
        return refuse(a, RELOCK_ENOMEM, "%s: out of memory", l->name);
    op->l = l;
    op->wait_ms = ttl_ms;
    op->began = now_ms(); /* a failed extend's validity counts from here */
    if (kind == K_REL)
        keep_end(al, l);
    if (al->busy) { /* a renewal in flight: the release follows it */
        relock__a_op_link(op);
        al->after = op;
        return RELOCK_OK;
    }
    al->busy = op;
    relock__a_op_enqueue(op);
    return RELOCK_OK;
}

relock_status relock_async_release(relock_lock *l, relock_async_fn cb, void *arg)
{
    return lock_op(l, K_REL, 0, cb, arg);
}

relock_status relock_async_extend(relock_lock *l, long long ttl_ms, relock_async_fn cb, void *arg)
{
    return lock_op(l, K_EXT, ttl_ms, cb, arg);
}

relock_status relock_async_keep(relock_lock *l, relock_async_lost_fn on_lost, void *arg)
{
    if (!l || !l->al || !l->al->a)
        return RELOCK_EINVAL;
    struct relock__alock *al = l->al;
    relock_async *a = al->a;
    relock__err_clear(&a->err);
    if (al->kept)
        return refuse(a, RELOCK_EINVAL, "keep %s: already kept", l->name);
    if (l->lost)
        return refuse(a, RELOCK_LOST, "keep %s: the lock was already lost", l->name);
    if (al->busy)
        return refuse(a, RELOCK_EINVAL, "keep %s: another operation on this lock is in flight",
                      l->name);
    relock__a_keep_start(al, l, on_lost, arg, 1);
    return RELOCK_OK;
}

relock_status relock_async_keep_stop(relock_lock *l)
{
    if (!l || !l->al || !l->al->a)
        return RELOCK_EINVAL;
    if (keep_end(l->al, l))
        return RELOCK__FAIL(&l->al->a->err, RELOCK_LOST, "keep %s: the lock was lost", l->name);
    return RELOCK_OK;
}

void relock_async_free(relock_async *a)
{
    if (!a || a->freeing)
        return;
    a->freeing = 1;
    relock__a_enter(a);
    /* Every operation ends now, once. */
    for (int i = 0; i < a->nconns; i++) {
        aconn *cn = &a->conns[i];
        /* a quorum's requests are their own: freed here, their contexts'
         * callbacks are not called any more (ac->data goes first) */
        for (areq *rq = cn->fifo; rq;) {
            areq *next = rq->fnext;
            if (!rq->op || rq != &rq->op->rq) {
                if (rq->op && rq->op->fan && rq->op->fan->rq[i] == rq)
                    rq->op->fan->rq[i] = NULL;
                relock__a_rq_clear(rq);
                free(rq);
            }
            rq = next;
        }
        if (cn->ac)
            cn->ac->data = NULL;
        cn->queue = cn->queue_tail = NULL;
        cn->walk = cn->walk_tail = NULL;
        cn->fifo = cn->fifo_tail = NULL;
        cn->txn_owner = NULL;
    }
    /* A quorum's lists of operations starting together and of first
     * rounds awaiting the shared flush go whole: taking each operation out
     * alone would walk them once per operation. */
    for (aop *op = a->starting; op;) {
        aop *next = op->start_next;
        op->start_next = NULL;
        op->in_start = 0;
        op = next;
    }
    a->starting = a->starting_tail = NULL;
    for (aop *op = a->fan_due; op;) {
        aop *next = op->due_next;
        op->due_next = NULL;
        op->due = 0;
        op = next;
    }
    a->fan_due = a->fan_due_tail = NULL;
    while (a->ops) {
        aop *op = a->ops;
        /* (a quorum's attempt that reached no server sent nothing; a scan
         * only reads) */
        int sent = ((op->state == S_SENT && (!op->fan || op->sent_any)) ||
                    (op->state == S_QUEUED && op->sent_any) || op->undoing) &&
                   op->kind != K_KEEP && op->kind != K_SCAN;
        relock_status st = sent ? RELOCK_EAMBIGUOUS : RELOCK_ECANCELED;
        const char *why = "cancelled: the client was freed";
        if (sent && op->kind == K_ACQ)
            why = "the client was freed while an attempt was in flight: the lock may be held "
                  "until its TTL ends";
        else if (sent)
            why = "the client was freed while the request was in flight: its outcome is unknown";
        free(op->err);
        op->err = NULL;
        relock__a_op_fail(op, st, "%s %s: %s",
                          op->kind == K_ACQ   ? "acquire"
                          : op->kind == K_REL ? "release"
                          : op->kind == K_SCAN ? "migration audit:"
                                              : "extend",
                          op->l ? op->l->name : "", why);
        op->ch = NULL; /* the channels go with the client */
        relock__a_op_finish(op, st);
    }
    /* Locks outlive the client: their renewals stop; they can be freed. */
    for (struct relock__alock *al = a->alocks; al;) {
        struct relock__alock *next = al->next;
        relock__a_keep_stop(al);
        al->a = NULL;
        al->prev = al->next = NULL;
        al = next;
    }
    a->alocks = NULL;
    relock__a_leave(a);
}

