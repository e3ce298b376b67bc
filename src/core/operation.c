/* An operation's life in the operation core (core.h): its machine's steps
 * and phases, the markers it leaves for `relock scan`, and its end. */

#include <limits.h>

#include "core.h"

/* The fence carry of a whole-tag key, run before the first attempt. */
typedef struct fence_wrap {
    relock__fence_carry_m m;
    char before[RELOCK__KEY_MAX];
} fence_wrap;

void relock__a_err_keep(aop *op, const relock__err *e)
{
    if (!op->err)
        op->err = malloc(sizeof *op->err);
    if (op->err)
        relock__err_copy(op->err, e);
}

void relock__a_err_save(aop *op)
{
    if (op->a->c->err.pub.status != RELOCK_OK)
        relock__a_err_keep(op, &op->a->c->err);
}

void relock__a_err_load(aop *op)
{
    if (op->err)
        relock__err_copy(&op->a->c->err, op->err);
    else
        relock__err_clear(&op->a->c->err);
}

/* Records st with a message as op's outcome, replacing an earlier step's. */
relock_status relock__a_op_fail(aop *op, relock_status st, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    relock__err_clear(&op->a->c->err);
    RELOCK__FAIL(&op->a->c->err, st, "%s", msg);
    relock__a_err_save(op);
    return st;
}

/* op->m: a machine of at least n bytes, a spare of the client's when one
 * is that size; NULL when there is no memory. */
static void *m_get(aop *op, size_t n)
{
    relock_async *a = op->a;
    if (n > a->spare_m_size) { /* a larger machine: the smaller spares go */
        while (a->nspare_m > 0)
            free(a->spare_m[--a->nspare_m]);
        a->spare_m_size = n;
    }
    op->m = a->nspare_m > 0 ? a->spare_m[--a->nspare_m] : malloc(a->spare_m_size);
    op->m_size = op->m ? a->spare_m_size : 0;
    return op->m;
}

/* op's machine freed, or kept for the client's next operation. */
static void m_drop(aop *op)
{
    relock_async *a = op->a;
    if (op->m_size && op->m_size == a->spare_m_size &&
        a->nspare_m < (int)(sizeof a->spare_m / sizeof *a->spare_m))
        a->spare_m[a->nspare_m++] = op->m;
    else
        free(op->m);
    op->m = NULL;
    op->m_size = 0;
}

void relock__a_op_cancelled(aop *op)
{
    relock__a_op_finish(
        op, relock__a_op_fail(op, RELOCK_ECANCELED, "acquire %s: cancelled", op->l->name));
}

/* The operation ends with st: its callback is called, once. */
void relock__a_op_finish(aop *op, relock_status st)
{
    relock_async *a = op->a;
    timer_stop(a, &op->timer);
    relock__a_chan_leave(op);
    if (op->cn && op->cn->txn_owner == op)
        op->cn->txn_owner = NULL;
    op->state = S_DONE;
    ops_del_(&a->ops, op);
    a->pending--;
    relock__a_map_trim(a); /* cluster.slot_map = false: one connection */
    relock__a_fan_undue(op);
    if (op->in_start) {
        /* (cancelled, or the client freed, before it started) */
        start_remove_(&a->starting, &a->starting_tail, op);
        op->in_start = 0;
    }
    relock_lock *l = op->l;
    if (op->kind == K_ACQ && st != RELOCK_OK && l) {
        relock__a_alock_free(l);
        relock__lock_destroy(l);
        l = NULL;
        op->l = NULL;
    }
    /* A failed extend, whatever stopped it, may have shortened the lock
     * and cannot have lengthened it: its validity ends no later than the
     * new lease from the extend's start, the bound relock_extend() promises. */
    if (l && op->kind == K_EXT && st != RELOCK_OK)
        l->valid_until = relock__valid_min(
            l->valid_until, relock__valid_until(op->began ? op->began : now_ms(), op->wait_ms));
    /* The lock won or released: told before the callback, while l lives
     * (lock_op_end frees one the program freed meanwhile). */
    if (l && st == RELOCK_OK && op->kind == K_ACQ) {
        l->acquired_at = now_ms();
        relock__event(a->c, RELOCK_EVENT_ACQUIRED, l, RELOCK_OK,
                      (long long)(l->acquired_at - op->began));
    } else if (l && st == RELOCK_OK && op->kind == K_REL) {
        relock__event(a->c, RELOCK_EVENT_RELEASED, l, RELOCK_OK, 0);
    }
    if (l)
        relock__a_lock_op_end(op);
    if (op->lock_gone)
        l = NULL;
    relock__err blank, *er = op->err;
    if (st == RELOCK_OK || !er) {
        er = &blank;
        relock__err_clear(er);
        if (st != RELOCK_OK)
            RELOCK__FAIL(er, st, "%s", relock_strerror(st));
    }
    er->pub.status = st;
    relock_error e = er->pub;
    if (op->kind == K_ACQ || op->kind == K_EXT)
        a->c->replicas_acked = op->acked; /* relock_async_replicas_acked() */
    if (op->kind == K_RUN)
        relock__a_err_load(op); /* a blocking call reports it (pollloop.c) */
    if (op->kind == K_KEEP) {
        /* A renewal reports through its lock, however it ended (e points
         * into op, freed after). */
        if (l && !a->freeing)
            relock__a_keep_after(a, l, st, &e);
    } else if (op->cb) {
        op->cb(a, st, l, &e, op->arg);
    }
    relock__a_fan_end(op);
    free(op->fan);
    relock__a_batch_clear(op);
    for (int i = 0; i < op->nheld; i++)
        freeReplyObject(op->held[i]);
    free(op->kept);
    if (op->kind != K_RUN) /* K_RUN's machine is its caller's */
        m_drop(op);
    free(op->err);
    if (a->spare)
        free(op);
    else
        a->spare = op; /* freed with the client (connection.c) */
}

/* Starts op's machine, step fn, whose init returned st (a failure ends op). */
static void machine_start(aop *op, relock__step_fn fn, relock_status st)
{
    if (st != RELOCK_OK) {
        relock__a_err_save(op);
        relock__a_op_finish(op, st);
        return;
    }
    op->fn = fn;
    op->steps = 0;
    op->sent_any = 0;
    op->state = S_RUN;
    if (op->kind != K_RUN && op->kind != K_SCAN && op->a->kit->fan && !op->fencing) {
        relock__a_fan_begin(op);
        return;
    }
    relock__a_op_feed(op, RELOCK__FAULT_NONE, RELOCK_OK, NULL);
}

void relock__a_attempt_begin(aop *op)
{
    relock_async *a = op->a;
    op->l->legacy_holder = 0;
    relock__err_clear(&a->c->err);
    op_err_drop(op);
    op->wset = op->wmoved = 0;
    machine_start(op, a->kit->acq_step, a->kit->acq_init(op->m, op->l));
}

/* Runs machine m (allocated, op's from now) with step fn as op's phase. */
static void phase_run(aop *op, int phase, relock__step_fn fn, void *m)
{
    m_drop(op);
    op->m = m;
    op->fn = fn;
    op->phase = phase;
    op->steps = 0;
    op->state = S_RUN;
    relock__a_op_feed(op, RELOCK__FAULT_NONE, RELOCK_OK, NULL);
}

/* The owner record of op's lock written (held) or deleted by its machine
 * as op's PH_OWNER; 0 when there is none to write (owner_info off). */
static int owner_phase(aop *op, int held)
{
    relock_lock *l = op->l;
    /* (a quorum's record would be one server's view) */
    if (!op->a->c->s.owner_info || op->a->kit->fan)
        return 0;
    char info[RELOCK__OWNER_INFO_MAX] = "";
    if (held)
        relock__owner_info(l, info, sizeof info);
    relock__owner_m *m = malloc(sizeof *m);
    if (!m || !relock__owner_init(m, l, l->value, held, info)) {
        free(m); /* the record informs: no memory for it fails nothing */
        return 0;
    }
    phase_run(op, PH_OWNER, relock__owner_step, m);
    return 1;
}

static void undo_failed(aop *op)
{
    relock__a_op_finish(op, relock__a_op_fail(op, RELOCK_EAMBIGUOUS,
                                              "acquire %s: cancelled after it won, and the release "
                                              "failed: the lock may stay held until its TTL ends",
                                              op->l->name));
}

/* The undo of a cancelled acquire that won: a release.  A cancel during the
 * owner record's write deletes the record first (undoing 2), while the lock
 * is ours, as a release does (decision 108). */
static void undo_begin(aop *op)
{
    relock_async *a = op->a;
    if (op->phase == PH_OWNER && !op->undoing) {
        op_err_drop(op);
        op->undoing = 2;
        if (owner_phase(op, 0))
            return;
    }
    void *m = malloc(a->kit->upd_size);
    if (!m || a->kit->upd_init(m, op->l, 0, 0) != RELOCK_OK) {
        free(m);
        undo_failed(op);
        return;
    }
    m_drop(op);
    op->m = m;
    op->undoing = 1;
    machine_start(op, a->kit->upd_step, RELOCK_OK);
}

/* op->m: n bytes for acquire op's machine; 0 when op ended for want of memory. */
static int acq_alloc(aop *op, size_t n)
{
    if (m_get(op, n))
        return 1;
    relock__a_op_finish(op, relock__a_op_fail(op, RELOCK_ENOMEM, "acquire %s: out of memory",
                                              op->l->name));
    return 0;
}

/* After a phase of op ended with *st: starts the next (returns 1), or
 * leaves in *st the outcome of the whole (returns 0).  Acquire and extend:
 * the write, durability's WAIT, the owner record; an unacknowledged
 * acquire is released (PH_UNDO) and fails.  Release: the record, then it. */
static int next_phase(aop *op, relock_status *st)
{
    relock_async *a = op->a;
    relock_client *c = a->c;
    relock_lock *l = op->l;
    if (op->kind == K_REL) {
        if (op->phase != PH_OWNER)
            return 0;
        /* the record is deleted (or not ours): the release itself now */
        op_err_drop(op);
        m_drop(op);
        op->phase = PH_MAIN;
        op->owner_gone = 1;
        relock__a_op_start(op);
        return 1;
    }
    switch (op->phase) {
    case PH_MAIN: {
        if (*st != RELOCK_OK || op->cancelled)
            return 0;
        if (op->kind == K_ACQ)
            l->owner_since = relock__wall_ms() / 1000;
        if (!relock__durable_on(c))
            return owner_phase(op, 1);
        const char *what = op->kind == K_ACQ ? "acquire" : "extend";
        relock__durable_m *m = malloc(sizeof *m);
        if (m) {
            relock__durable_init(m, what);
            phase_run(op, PH_DURABLE, relock__durable_step, m);
            return 1;
        }
        *st = relock__a_op_fail(op, RELOCK_ENOMEM, "%s %s: out of memory for WAIT", what, l->name);
        break;
    }
    case PH_DURABLE:
        op->acked = ((relock__durable_m *)op->m)->acked;
        if (*st == RELOCK_OK)
            return op->cancelled ? 0 : owner_phase(op, 1);
        break;
    case PH_OWNER:
        /* the record informs: its outcome is nobody's */
        op_err_drop(op);
        *st = RELOCK_OK;
        return 0;
    case PH_UNDO:
        relock__a_err_load(op);
        *st = relock__durable_undone(c, op->kept, op->kept_st, *st);
        relock__a_err_save(op);
        return 0;
    }
    /* the write was not acknowledged (or no WAIT went): an extend keeps the
     * earlier of the old lease, which the replicas know, and the new one */
    if (op->kind != K_ACQ) {
        l->valid_until = relock__valid_min(op->was_valid, l->valid_until);
        l->ttl_ms = op->was_ttl;
        return 0;
    }
    void *m = malloc(a->kit->upd_size);
    if (!op->kept)
        op->kept = malloc(sizeof *op->kept);
    if (!m || !op->kept || a->kit->upd_init(m, l, 0, 0) != RELOCK_OK) {
        free(m);
        *st = relock__a_op_fail(
            op, RELOCK_EAMBIGUOUS,
            "acquire %s: the write was not acknowledged, and there was no memory to "
            "delete it: the lock may stay held until its TTL ends",
            l->name);
        return 0;
    }
    relock__a_err_load(op);
    relock__err_copy(op->kept, &c->err);
    op->kept_st = *st;
    op_err_drop(op);
    phase_run(op, PH_UNDO, a->kit->upd_step, m);
    return 1;
}

/* cn takes a command now: set up, and no transaction of another open. */
static int conn_open(const aconn *cn)
{
    return cn->ac && cn->cstate == C_READY && !cn->txn_owner;
}

/* The reply to the legacy marker's SET: a MOVED sends it once to the node
 * named, when its connection is ready; anything else is dropped (the marker
 * informs, design.md §5.5). */
static void on_marker(redisAsyncContext *ac, void *rr, void *priv)
{
    aconn *cn = ac->data;
    const redisReply *r = rr;
    relock__redirect to;
    if (!cn || !r || cn->a->freeing || r->type != REDIS_REPLY_ERROR || priv ||
        relock__redirect_parse(cn->srv->host, r, &to) != RELOCK__REDIR_MOVED)
        return;
    relock_client *c = cn->a->c;
    aconn *at = relock__a_conn_find(cn->a, to.host, to.port);
    char key[RELOCK__KEY_MAX];
    if (at && conn_open(at) && relock__marker_key(c->s.key_prefix, key, sizeof key) == 0)
        redisAsyncCommand(at->ac, on_marker, at, "SET %s %lld", key, relock__wall_ms());
}

/* The watch marker (relock__watch_key(), which `relock scan` reads),
 * written once per client before its first attempt.  watch_noted: 1
 * written, 2 in flight, 3 met a MOVED it could not follow.  A write that
 * did not land is tried again: a missing marker only delays scan's verdict. */
static void on_watch(redisAsyncContext *ac, void *rr, void *priv)
{
    aconn *cn = ac->data;
    const redisReply *r = rr;
    if (!cn || cn->a->freeing)
        return;
    relock_client *c = cn->a->c;
    relock__redirect to;
    aconn *at;
    char key[RELOCK__KEY_MAX];
    int moved = r && r->type == REDIS_REPLY_ERROR && !priv &&
                relock__redirect_parse(cn->srv->host, r, &to) == RELOCK__REDIR_MOVED;
    c->watch_noted = r && r->type != REDIS_REPLY_ERROR ? 1 : moved ? 3 : 0;
    if (moved && (at = relock__a_conn_find(cn->a, to.host, to.port)) && conn_open(at) &&
        relock__watch_key(c->s.key_prefix, key, sizeof key) == 0 &&
        redisAsyncCommand(at->ac, on_watch, at, "SETNX %s %lld", key, relock__wall_ms()) ==
            REDIS_OK)
        c->watch_noted = 2;
}

/* cn is the acquire's connection.  After a MOVED it could not follow, the
 * marker waits for the slot map rather than meet it at every acquire. */
static void note_watching(relock_async *a, aconn *cn)
{
    relock_client *c = a->c;
    char key[RELOCK__KEY_MAX];
    if (c->watch_noted == 1 || c->watch_noted == 2 || a->kit->fan ||
        (c->mode != RELOCK_MODE_BRIDGE && c->mode != RELOCK_MODE_MODERN) ||
        relock__watch_key(c->s.key_prefix, key, sizeof key) != 0)
        return;
    aconn *mc = relock__a_route(a, key);
    int mapped = a->slots && a->slots[relock__cluster_slot(key, strlen(key))];
    if (!mapped && c->watch_noted == 3 && relock__a_map_on(a))
        return;
    if (!mapped && !conn_open(mc))
        mc = cn;
    if (conn_open(mc) &&
        redisAsyncCommand(mc->ac, on_watch, NULL, "SETNX %s %lld", key, relock__wall_ms()) ==
            REDIS_OK)
        c->watch_noted = 2;
}

void relock__a_machine_done(aop *op, relock_status st)
{
    relock_async *a = op->a;
    aconn *cn = op->cn;
    relock__mhead *h = op->m;
    relock_lock *l = op->l;
    if (cn->txn_owner == op) {
        cn->txn_owner = NULL;
        /* A transaction left open: its connection goes (design.md §13.3). */
        if (h->in_txn && cn->ac)
            relock__a_conn_gone(cn, 0, RELOCK_EIO, "a transaction was left open");
    }
    if (h->note_legacy) {
        relock_client *c = a->c;
        uint64_t now = now_ms();
        char key[RELOCK__KEY_MAX];
        /* Over a Cluster: the node of its slot when ready, else op's,
         * whose MOVED is followed (on_marker). */
        if ((!c->legacy_noted_at || now - c->legacy_noted_at >= 1000) &&
            relock__marker_key(c->s.key_prefix, key, sizeof key) == 0) {
            aconn *mc = relock__a_route(a, key);
            if (!conn_open(mc))
                mc = cn;
            if (conn_open(mc)) {
                c->legacy_noted_at = now;
                redisAsyncCommand(mc->ac, on_marker, NULL, "SET %s %lld", key,
                                  relock__wall_ms());
            }
        }
    }
    if (cn->txn_owner == NULL && cn->queue && cn->cstate == C_READY) {
        relock__a_queue_flush(cn);
        /* An operation of the queue may end within the flush (a release of
         * a lost lock), and its callback may free the client: that ended
         * op too (relock_async_free), and freed it. */
        if (a->freeing)
            return;
    }
    if (op->kind == K_SCAN) {
        relock__a_scan_next(op, st);
        return;
    }
    /* (K_RUN: no phases, its outcome is the machine's) */
    if (op->kind != K_RUN && !op->fencing && !op->undoing && next_phase(op, &st))
        return;
    switch (op->kind) {
    case K_ACQ:
        if (op->fencing) {
            op->fencing = 0;
            m_drop(op);
            if (st != RELOCK_OK)
                relock__a_op_finish(op, st);
            else if (op->cancelled)
                relock__a_op_cancelled(op);
            else if (acq_alloc(op, a->kit->acq_size))
                relock__a_attempt_begin(op);
            return;
        }
        if (op->undoing == 2) {
            /* the record deleted (or not ours, or not reached: it informs) */
            op_err_drop(op);
            undo_begin(op);
        } else if (op->undoing && st != RELOCK_OK && st != RELOCK_LOST) {
            undo_failed(op);
        } else if (op->undoing) {
            relock__a_op_finish(
                op, relock__a_op_fail(op, RELOCK_ECANCELED,
                                      "acquire %s: cancelled (the lock it had won was released)",
                                      l->name));
        } else if (op->cancelled && st == RELOCK_OK) {
            undo_begin(op);
        } else if (op->cancelled && st != RELOCK_EAMBIGUOUS) {
            relock__a_op_cancelled(op);
        } else if (st == RELOCK_BUSY) { /* (a cancelled one ended above) */
            relock__a_plan(op, 0);
        } else {
            if (st == RELOCK_OK)
                l->owner_since = relock__wall_ms() / 1000;
            relock__a_op_finish(op, st);
        }
        return;
    case K_REL:
        if (st == RELOCK_OK && l->waiters > 0)
            relock__yield_note(l); /* let the waiters it woke go first */
        if (st == RELOCK_OK || st == RELOCK_LOST)
            l->lost = 1;
        break;
    case K_EXT:
    case K_KEEP:
        if (st == RELOCK_LOST)
            l->lost = 1;
        break;
    }
    relock__a_op_finish(op, st); /* a renewal goes on in relock__a_keep_after() */
}

/* How many decimal digits n has. */
static size_t dec_len(size_t n)
{
    size_t d = 1;
    for (; n >= 100; n /= 100)
        d += 2;
    return d + (n >= 10);
}

/* Writes c, n's d decimal digits (dec_len(n)) and CRLF at w; returns the
 * end.  (Most are one or two digits: a command's words are short.) */
static char *put_head(char *w, char c, size_t n, size_t d)
{
    *w++ = c;
    if (d == 1) {
        *w = (char)('0' + n);
    } else if (d == 2) {
        w[0] = (char)('0' + n / 10);
        w[1] = (char)('0' + n % 10);
    } else {
        for (char *p = w + d; p > w; n /= 10)
            *--p = (char)('0' + n % 10);
    }
    w += d;
    *w++ = '\r';
    *w++ = '\n';
    return w;
}

int relock__a_fmt_cmd(char **out, int argc, const char *const *argv, const size_t *len)
{
    size_t l[RELOCK__CMD_ARGS], dl[RELOCK__CMD_ARGS];
    if (argc < 1 || argc > RELOCK__CMD_ARGS) /* a batch's commands never are */
        return -1;
    size_t da = dec_len((size_t)argc);
    size_t total = 3 + da;
    for (int i = 0; i < argc; i++) {
        l[i] = len ? len[i] : strlen(argv[i]);
        dl[i] = dec_len(l[i]);
        total += 5 + dl[i] + l[i];
    }
    if (total > INT_MAX)
        return -1;
    char *p = malloc(total + 1);
    if (!p)
        return -1;
    char *w = put_head(p, '*', (size_t)argc, da);
    for (int i = 0; i < argc; i++) {
        w = put_head(w, '$', l[i], dl[i]);
        if (l[i])
            memcpy(w, argv[i], l[i]);
        w += l[i];
        *w++ = '\r';
        *w++ = '\n';
    }
    *w = '\0';
    *out = p;
    return (int)total;
}

/* Moves n replies from `from` to `to`, leaving NULL behind. */
static void replies_move(redisReply **to, redisReply **from, int n)
{
    for (int i = 0; i < n; i++) {
        to[i] = from[i];
        from[i] = NULL;
    }
}

/* Feeds op's machine its batch's replies (or the fault); sends its next batch or ends it. */
void relock__a_op_feed(aop *op, relock__fault fault, relock_status fst, const char *ftext)
{
    relock_async *a = op->a;
    relock_client *c = a->c;
    if (op->kind == K_SLOTS) {
        relock__a_slots_done(op, fault);
        return;
    }
    if (op->kind == K_SETUP) {
        /* the replies move out: the step may send the next batch at once
         * (a setup's batches are one or two commands) */
        redisReply *rep[RELOCK__BATCH_OWN];
        int nrep = op->rq.nrep < RELOCK__BATCH_OWN ? op->rq.nrep : RELOCK__BATCH_OWN;
        replies_move(rep, op->rq.rep, nrep);
        op->rq.nrep = 0;
        relock__feed in = {.reply = rep, .nreply = fault != RELOCK__FAULT_NONE ? 0 : nrep,
                           .fault = fault, .fault_status = fst, .fault_text = ftext,
                           .mono_ms = now_ms()};
        op->state = S_SENT;
        relock__a_setup_step(op, &in);
        for (int i = 0; i < nrep; i++)
            freeReplyObject(rep[i]);
        return;
    }
    if (op->state == S_SUBSCRIBING) {
        if (op->ch && op->ch->confirmed) {
            timer_stop(a, &op->timer);
            relock__a_plan(op, 1);
        } else {
            relock__a_sub_next(op); /* its subscriber connection failed */
        }
        return;
    }
    char text[400];
    if (ftext) {
        snprintf(text, sizeof text, "%s", ftext);
        ftext = text;
    }
    aconn *cn = op->cn;
    areq *rq = &op->rq;
    /* The batch that ended the transaction was answered, but the connection
     * stays op's until its machine judged the replies: an error to EXEC
     * leaves the server inside MULTI (h->in_txn, relock__a_machine_done()). */
    int txn_ended = cn->txn_owner == op && !op->in_txn;
    for (;;) {
        relock__mhead *h = op->m;
        relock__step_fn fn = op->clocking ? relock__clock_step : op->fn;
        void *m = op->clocking ? (void *)&op->clk : op->m;
        relock__feed in = {.reply = rq->rep, .nreply = rq->nrep, .fault = fault,
                           .fault_status = fst, .fault_text = ftext};
        if (fault != RELOCK__FAULT_NONE) {
            /* replies come only in full or up to a fault */
            in.nreply = 0;
            while (in.nreply < rq->nrep && rq->rep[in.nreply])
                in.nreply++;
        }
        in.mono_ms = now_ms();
        relock__a_err_load(op);
        if (fault != RELOCK__FAULT_NONE && ftext)
            RELOCK__FAIL(&c->err, fst ? fst : RELOCK_EIO, "%s", ftext);
        if (!op->clocking && h->want_fleet && fault == RELOCK__FAULT_NONE) {
            if (!c->s.legacy.clock_server) {
                in.fleet_ms = relock__wall_ms();
                in.fleet_fresh = 1;
            } else if ((h->want_fleet == RELOCK__FLEET_FRESH && !op->clock_fresh) ||
                       relock__clock_due(&cn->clock, in.mono_ms)) {
                /* The server's clock is measured first (the clock
                 * machine, on the same connection, inside the
                 * transaction if one is open); these replies wait. */
                if (rq->nrep > RELOCK__BATCH_OWN) { /* a wide batch: engine.h */
                    relock__a_batch_clear(op);
                    relock__a_machine_done(op, relock__a_op_fail(op, RELOCK_EPROTO,
                                                                 "lock %s: internal error: a wide "
                                                                 "batch waits for the clock",
                                                                 op->l->name));
                    return;
                }
                replies_move(op->held, rq->rep, rq->nrep);
                op->nheld = rq->nrep;
                rq->nrep = 0;
                op->clocking = 1;
                relock__clock_init(&op->clk, op->in_txn);
                continue;
            } else {
                in.fleet_ms = relock__clock_server_ms(&cn->clock, in.mono_ms);
                in.fleet_fresh = op->clock_fresh;
                /* Just measured: the feed's monotonic time is the moment
                 * TIME went out, before the clock was read.  The server
                 * read its clock anywhere in the round trip, so the
                 * estimate may be behind by half of it; a validity counted
                 * from the reply would outlast the lease by as much. */
                if (op->clock_fresh)
                    in.mono_ms = op->clk.t0;
            }
        }
        op->clock_fresh = 0; /* a fresh reading serves the one feed after it */
        relock__batch *b = &a->batch;
        relock__batch_reset(b);
        /* the clock machine measures into the client's estimate: the
         * connection's own, around each of its steps */
        if (op->clocking)
            c->conn.clock = cn->clock;
        /* the facts of the server it runs on (a Cluster node's own), and
         * its address for the machine's messages */
        if (cn->probed)
            relock__a_facts_load(c, cn);
        const relock__server *was_srv = c->conn.srv;
        c->conn.srv = cn->srv;
        relock__step s = fn(m, op->l, &in, b);
        c->conn.srv = was_srv;
        if (op->clocking)
            cn->clock = c->conn.clock;
        relock__a_err_save(op);
        relock__a_rq_reset(rq);
        op->hops = 0;
        op->redir = NULL;
        if (s == RELOCK__STEP_DONE && op->clocking) {
            /* The clock is known (or its failure is the fault the waiting
             * replies are fed with). */
            op->clocking = 0;
            replies_move(rq->rep, op->held, op->nheld);
            rq->nrep = op->nheld;
            op->nheld = 0;
            fst = op->clk.h.st;
            fault = fst != RELOCK_OK ? RELOCK__FAULT_UNSENT : RELOCK__FAULT_NONE;
            ftext = fst != RELOCK_OK ? text : NULL;
            op->clock_fresh = fst == RELOCK_OK;
            if (fst != RELOCK_OK)
                snprintf(text, sizeof text, "%.399s", c->err.msg);
            continue;
        }
        if (s == RELOCK__STEP_DONE) {
            relock__a_machine_done(op, h->st);
            return;
        }
        if (!relock__batch_ok(b) || ++op->steps >= RELOCK__DRIVE_MAX_STEPS) {
            relock__a_machine_done(op, relock__a_op_fail(op, RELOCK_EPROTO,
                                                         "lock %s: internal error: %s", op->l->name,
                                                         op->steps >= RELOCK__DRIVE_MAX_STEPS
                                                             ? "an operation did not end"
                                                             : "a command batch overflowed"));
            return;
        }
        int n = 0;
        for (int room = relock__a_rq_room(rq, b->n) == 0; room && n < b->n; n++) {
            const relock__cmd *k = &b->cmd[n];
            int fl = relock__a_fmt_cmd(&rq->cmd[n], k->argc, (const char *const *)k->argv, k->len);
            if (fl < 0)
                break;
            rq->len[n] = (size_t)fl;
        }
        rq->n = n;
        rq->slow_ms = b->slow_ms;
        op->pinned = b->pinned;
        op->in_txn = b->in_txn;
        if (n < b->n) {
            relock__a_batch_clear(op);
            fault = RELOCK__FAULT_UNSENT;
            fst = RELOCK_ENOMEM;
            ftext = "out of memory";
            continue;
        }
        if (b->n == 0) {
            fault = RELOCK__FAULT_NONE;
            continue;
        }
        /* The machine goes on: a new transaction keeps the connection (the
         * gen check below), anything else lets the others send. */
        if (txn_ended && !b->in_txn) {
            cn->txn_owner = NULL;
            if (cn->queue && cn->cstate == C_READY)
                relock__a_queue_flush(cn);
        }
        txn_ended = 0;
        if (cn->txn_owner == op && (cn->gen != op->txn_gen || cn->cstate != C_READY)) {
            relock__a_batch_clear(op);
            /* a batch without in_txn ends the transaction even unsent: the
             * machine's next one may go on a new connection */
            txn_ended = !op->in_txn;
            fault = RELOCK__FAULT_UNSENT;
            fst = RELOCK_EIO;
            ftext = "the connection of a transaction was lost before its end";
            continue;
        }
        relock__a_submit(op);
        return;
    }
}

void relock__a_op_cancel(aop *op)
{
    op->cancelled = 1;
    if (op->state == S_SLEEP || op->state == S_NEW || op->state == S_SUBSCRIBING) {
        timer_stop(op->a, &op->timer);
        if (op->state == S_NEW)
            relock__a_queue_remove(op->cn, op);
        relock__a_chan_leave(op);
    } else if (op->state == S_QUEUED && !op->sent_any) {
        relock__a_queue_remove(op->redir ? op->redir : op->cn, op);
        relock__a_batch_clear(op);
    } else {
        return; /* S_SENT, S_QUEUED after a write: it ends when its step ends */
    }
    op->state = S_SLEEP;
    op->timer = timer_start(op->a, 0, relock__a_op_timer, op);
}

/* Runs op's first step (the client is ready). */
void relock__a_op_start(aop *op)
{
    relock_async *a = op->a;
    relock_client *c = a->c;
    relock_lock *l = op->l;
    if (a->fatal && !(op->kind == K_SCAN && a->fatal_mode)) {
        relock__a_err_keep(op, &a->fatal_err);
        relock__a_op_finish(op, a->fatal);
        return;
    }
    if (op->kind == K_RUN || op->kind == K_SCAN) {
        machine_start(op, op->fn, RELOCK_OK);
        return;
    }
    if (op->kind == K_ACQ) {
        char before[RELOCK__KEY_MAX];
        note_watching(a, op->cn); /* scan's evidence, before the first attempt */
        /* (a quorum's machine carries the counter over itself) */
        if (!a->kit->fan && !(c->mode == RELOCK_MODE_MODERN && !c->s.fencing) &&
            relock__fence_key_before(l->key, before, sizeof before) == 1) {
            if (!acq_alloc(op, sizeof(fence_wrap)))
                return;
            fence_wrap *w = op->m;
            memcpy(w->before, before, sizeof before);
            relock__fence_carry_init(&w->m, w->before);
            op->fencing = 1;
            machine_start(op, relock__fence_carry_step, RELOCK_OK);
            return;
        }
        if (!acq_alloc(op, a->kit->acq_size))
            return;
        /* The holder that just released usually wins the race back against
         * the waiters it woke: give them a moment (relock__yield_ms()). */
        long long yield = op->wait_ms != 0 ? relock__yield_ms(l) : 0;
        if (yield > 0) {
            op->state = S_SLEEP;
            op->timer = timer_start(a, yield, relock__a_op_timer, op);
            if (op->timer)
                return;
        }
        relock__a_attempt_begin(op);
        return;
    }
    const char *what = op->kind == K_REL ? "release" : "extend";
    if (l->lost) { /* a release, an extend or a renewal */
        relock__a_op_finish(op, relock__a_op_fail(op, RELOCK_LOST,
                                                  "%s %s: the lock was already lost", what, l->name));
        return;
    }
    if (op->kind == K_REL && !op->owner_gone) {
        /* The owner record goes first, while the lock is still ours: after
         * the release a new holder may already have written its own. */
        l->waiters = 0;
        if (owner_phase(op, 0))
            return;
    }
    op->was_valid = l->valid_until;
    op->was_ttl = l->ttl_ms;
    m_get(op, a->kit->upd_size);
    relock__err_clear(&c->err);
    relock_status st = op->m ? a->kit->upd_init(op->m, l, op->kind != K_REL, op->wait_ms)
                             : RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "%s %s: out of memory",
                                            what, l->name);
    if (op->kind == K_REL && st == RELOCK_OK)
        l->waiters = 0;
    machine_start(op, a->kit->upd_step, st);
}

/* A quorum's operations queued until now start (those queued meanwhile
 * wait for the timer they armed), their rounds' batches flushed together. */
static void start_fire(void *arg)
{
    relock_async *a = arg;
    a->start_timer = NULL;
    relock__a_enter(a);
    aop *last = a->starting_tail;
    a->batching++;
    while (a->starting && !a->freeing) {
        aop *op = a->starting;
        start_remove_(&a->starting, &a->starting_tail, op);
        op->in_start = 0;
        if (op->state == S_NEW)
            relock__a_op_start(op);
        if (op == last)
            break;
    }
    a->batching--;
    relock__a_fan_due_run(a);
    relock__a_leave(a);
}

/* A new operation starts from the loop: with one server when its
 * connection is ready; with a quorum at the next turn. */
void relock__a_op_schedule(aop *op)
{
    relock_async *a = op->a;
    if (a->kit && a->kit->fan) {
        if (!relock__a_start_armed(a)) {
            relock__a_op_finish(op, relock__a_op_fail(op, RELOCK_ENOMEM, "out of memory"));
            return;
        }
        op->in_start = 1;
        start_push_(&a->starting, &a->starting_tail, op);
        return;
    }
    op->cn = relock__a_route(a, op->l ? op->l->key : NULL);
    relock__a_conn_wants(op->cn, op);
}

/* Before a call starts a quorum's operation: the shared start timer armed,
 * so that relock__a_op_schedule() cannot end the operation (its callback)
 * from within the call.  0 when the loop refuses the timer. */
int relock__a_start_armed(relock_async *a)
{
    if (!a->kit || !a->kit->fan || a->start_timer)
        return 1;
    a->start_timer = timer_start(a, 0, start_fire, a);
    return a->start_timer != NULL;
}

/* Lists a new operation; when it starts is the caller's choice. */
void relock__a_op_link(aop *op)
{
    ops_add_(&op->a->ops, op);
    op->a->pending++;
    op->state = S_NEW;
}

/* Queues a new operation; it starts from the loop. */
void relock__a_op_enqueue(aop *op)
{
    relock__a_op_link(op);
    relock__a_op_schedule(op);
}

/* Runs step machine m (fn, initialised and kept by the caller) on l for
 * the blocking API (pollloop.c): no waiting, no phases.  cb is called once,
 * from the loop, with the machine's errors on a->c->err (an error already
 * there stays the first).  RELOCK_ENOMEM: nothing started. */
relock_status relock__a_run_step(relock_async *a, relock_lock *l, relock__step_fn fn, void *m,
                                 relock_async_fn cb, void *arg)
{
    aop *op = relock__a_op_new(a, K_RUN, cb, arg);
    if (!op)
        return RELOCK_ENOMEM;
    op->l = l;
    op->m = m;
    op->fn = fn;
    relock__a_err_save(op);
    relock__a_op_enqueue(op); /* routed (op->cn), started from the loop */
    return RELOCK_OK;
}

aop *relock__a_op_new(relock_async *a, int kind, relock_async_fn cb, void *arg)
{
    aop *op = a->spare;
    if (op)
        a->spare = NULL;
    else if (!(op = malloc(sizeof *op)))
        return NULL;
    /* (conns[0]: one server's connection) */
    *op = (aop){.a = a, .cn = &a->conns[0], .kind = kind, .cb = cb, .arg = arg, .acked = -1};
    return op;
}
