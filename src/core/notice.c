/*
 * Waiting in the operation core (core.h), for both APIs: release notices
 * on the client's subscriber connection (shared by its waiters, opened
 * when the first subscribes, closed when none waits), one channel per lock
 * name, and the plan between an acquire's attempts.
 */

#include "core.h"

/* ------------------------------------------------------------------ release notices */

/* Frees every channel; their waiters have left them already. */
void relock__a_chan_free_all(relock_async *a)
{
    achan *ch = a->chans;
    a->chans = NULL;
    a->chans_gen++;
    while (ch) {
        achan *next = ch->next;
        free(ch);
        ch = next;
    }
}

static void sub_drop(relock_async *a, int hiredis_frees)
{
    redisAsyncContext *s = a->sub;
    if (!s)
        return;
    a->sub = NULL;
    s->data = NULL;
    if (!hiredis_frees)
        redisAsyncFree(s);
    /* Waiters keep waiting, by their timers only; those waiting for their
     * subscription plan again without it. */
    a->nwaiting = 0;
    aop *replan = NULL;
    for (achan *ch = a->chans; ch; ch = ch->next)
        for (aop *w = ch->waiters, *wn; w; w = wn) {
            wn = w->cnext;
            w->ch = NULL;
            w->cprev = w->cnext = NULL;
            if (w->state == S_SUBSCRIBING) {
                w->cnext = replan;
                replan = w;
            }
        }
    relock__a_chan_free_all(a);
    while (replan && !a->freeing) {
        aop *next = replan->cnext;
        replan->cnext = NULL;
        /* one cancelled by an earlier one's callback ends by its own timer */
        if (replan->state == S_SUBSCRIBING)
            relock__a_op_feed(replan, RELOCK__FAULT_NONE, RELOCK_OK, NULL);
        replan = next;
    }
}

/* The subscriber connection failed: with a quorum the next subscription
 * goes to the next server (every server announces releases). */
static void sub_failed(relock_async *a, int hiredis_frees)
{
    a->sub_from = (a->sub_at + 1) % a->nconns;
    sub_drop(a, hiredis_frees);
}

void relock__a_chan_leave(aop *op)
{
    achan *ch = op->ch;
    if (!ch)
        return;
    waiters_del_(&ch->waiters, op);
    op->ch = NULL;
    relock_async *a = op->a;
    if (--a->nwaiting == 0 && a->sub && !a->freeing)
        sub_drop(a, 0); /* nobody waits: the subscriber connection goes */
}

static void on_sub(redisAsyncContext *ac, void *rr, void *priv)
{
    relock_async *a = ac->data;
    if (!a)
        return;
    relock__a_enter(a);
    redisReply *r = rr;
    achan *ch = priv;
    /* A waiter fed below may end and leave; the last to leave frees every
     * channel, ch among them: the walk stops when that happened. */
    unsigned gen = a->chans_gen;
    if (!r) {
        sub_failed(a, 1);
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements >= 3 &&
               r->element[0]->type == REDIS_REPLY_STRING) {
        /* subscribed: each waiter for it plans again; a notice: each
         * sleeper's attempt begins, and says so (src/algo/quorum.c looks
         * again soon after a release half-way through the servers) */
        int sub = strcmp(r->element[0]->str, "subscribe") == 0;
        int want = sub ? S_SUBSCRIBING : strcmp(r->element[0]->str, "message") == 0 ? S_SLEEP : -1;
        if (sub)
            ch->confirmed = 1;
        for (int guard = 0; guard < 1000000 && !a->freeing && a->chans_gen == gen; guard++) {
            aop *w = ch->waiters;
            while (w && w->state != want)
                w = w->cnext;
            if (!w)
                break;
            if (sub) {
                relock__a_op_feed(w, RELOCK__FAULT_NONE, RELOCK_OK, NULL);
                continue;
            }
            timer_stop(a, &w->timer);
            w->l->after_notice = 1; /* until the attempt ends (plan) */
            relock__a_attempt_begin(w);
        }
    } else if (r->type == REDIS_REPLY_ERROR) {
        sub_failed(a, 0);
    }
    relock__a_leave(a);
}

/* The subscriber connection ac failed, seen from one of hiredis's
 * callbacks (hiredis_frees: hiredis is freeing it). */
static void sub_failed_cb(const redisAsyncContext *ac, int hiredis_frees)
{
    relock_async *a = ac->data;
    if (!a)
        return;
    relock__a_enter(a);
    sub_failed(a, hiredis_frees);
    relock__a_leave(a);
}

static void on_sub_disconnect(const redisAsyncContext *ac, int status)
{
    (void)status;
    sub_failed_cb(ac, 1);
}

static void on_sub_connect(const redisAsyncContext *ac, int status)
{
    if (status != REDIS_OK)
        sub_failed_cb(ac, 1);
}

static void on_sub_auth(redisAsyncContext *ac, void *rr, void *priv)
{
    (void)priv;
    const redisReply *r = rr;
    if (r && r->type == REDIS_REPLY_ERROR)
        sub_failed_cb(ac, 0);
}

/* Several servers, each announcing releases (a quorum), rather than one
 * server (with, on a Cluster, a connection per node met). */
static int quorum(const relock_async *a)
{
    return a->c->s.nservers > 1;
}

/* Subscribes op to its lock's release channel: 0 when under way. */
static int chan_join(aop *op)
{
    relock_async *a = op->a;
    char name[RELOCK__KEY_MAX];
    if (!relock__notify_channel(op->l, name, sizeof name))
        return -1;
    size_t len = strlen(name);
    achan *ch = a->chans;
    while (ch && !(ch->len == len && memcmp(ch->name, name, len) == 0))
        ch = ch->next;
    if (!ch) {
        if (!a->sub) {
            /* With a quorum, the first connected server from where the
             * last failed subscription left off (each announces releases).
             * With one, the attempt's: on a Cluster the lock's master,
             * where the release publishes (a classic PUBLISH reaches every
             * node, so other locks' waiters share it). */
            int at = quorum(a) ? a->sub_from % a->nconns : op->cn->idx;
            for (int k = 0; k < a->nconns && quorum(a); k++) {
                int i = (a->sub_from + k) % a->nconns;
                if (a->conns[i].connected) {
                    at = i;
                    break;
                }
            }
            const relock__server *srv = a->conns[at].srv;
            redisAsyncContext *s = srv->port ? redisAsyncConnect(srv->host, srv->port)
                                             : redisAsyncConnectUnix(srv->host);
            if (!s || s->err || relock__loop_attach(&a->loop, s) != 0) {
                if (s)
                    redisAsyncFree(s);
                return -1;
            }
            s->data = a;
            redisAsyncSetConnectCallback(s, on_sub_connect);
            redisAsyncSetDisconnectCallback(s, on_sub_disconnect);
            a->sub = s;
            a->sub_at = at;
            a->sub_gen++;
            char db[16];
            relock__cmd login[2];
            for (int i = 0, k = relock__a_login(srv, db, login); i < k; i++)
                redisAsyncCommandArgv(s, on_sub_auth, NULL, login[i].argc, login[i].argv,
                                      login[i].len);
        }
        ch = calloc(1, sizeof *ch + len + 1);
        if (!ch)
            return -1;
        memcpy(ch->name, name, len + 1);
        ch->len = len;
        ch->next = a->chans;
        a->chans = ch;
        if (redisAsyncCommand(a->sub, on_sub, ch, "SUBSCRIBE %b", name, len) != REDIS_OK) {
            a->chans = ch->next;
            free(ch);
            return -1;
        }
    }
    op->ch = ch;
    op->sub_gen = a->sub_gen;
    waiters_add_(&ch->waiters, op);
    a->nwaiting++;
    return ch->confirmed ? 1 : 0;
}

/* ------------------------------------------------------------------ operations */

static long long left_ms(uint64_t deadline)
{
    if (!deadline)
        return 0;
    uint64_t now = now_ms();
    return now >= deadline ? 0 : (long long)(deadline - now);
}

/* An acquire's timer: its sleep ended (a cancelled one's ends it), or its
 * subscription was not answered within command_timeout_ms. */
void relock__a_op_timer(void *arg)
{
    aop *op = arg;
    relock_async *a = op->a;
    op->timer = NULL;
    relock__a_enter(a);
    if (op->state == S_SLEEP && op->cancelled)
        relock__a_op_cancelled(op);
    else if (op->state == S_SLEEP)
        relock__a_attempt_begin(op);
    else if (op->state == S_SUBSCRIBING)
        relock__a_sub_next(op);
    relock__a_leave(a);
}

/* op's subscription failed: with a quorum it tries the next server, each
 * in turn; then it plans without. */
void relock__a_sub_next(aop *op)
{
    relock_async *a = op->a;
    timer_stop(a, &op->timer);
    unsigned gen = op->sub_gen;
    relock__a_chan_leave(op);
    if (quorum(a) && ++op->sub_tries < a->nconns && !a->freeing) {
        if (a->sub_gen == gen) /* the connection it waited on: not answering */
            sub_failed(a, 0);
        int j = chan_join(op);
        if (j == 0) {
            op->timer = timer_start(a, a->c->s.command_timeout_ms, relock__a_op_timer, op);
            return;
        }
        if (j == 1)
            op->state = S_RUN;
    }
    relock__a_plan(op, 1);
}

relock__wait_in relock__wait_in_of(relock_lock *l)
{
    relock_client *c = l->c;
    return (relock__wait_in){
        .silent_holder = l->legacy_holder,
        .notify = c->s.wait.notify,
        .backoff_min_ms = c->s.wait.backoff_min_ms,
        .backoff_max_ms = c->s.wait.backoff_max_ms,
        .skew_margin_ms = c->s.legacy.skew_margin_ms,
        .rnd = relock__rand64(&c->rng),
    };
}

/* What a waiter does after an attempt that found the lock held (the wait
 * planner decides, waitplan.h). */
void relock__a_plan(aop *op, int after_subscribe)
{
    relock_async *a = op->a;
    relock_client *c = a->c;
    relock_lock *l = op->l;
    relock__mhead *h = op->m;
    l->after_notice = 0;
    if (op->cancelled) {
        relock__a_op_cancelled(op);
        return;
    }
    relock__wait_in in = relock__wait_in_of(l);
    in.attempt = op->attempt;
    in.holder_ms = h->hint_ms;
    in.subscribed = op->ch != NULL && op->ch->confirmed;
    in.after_subscribe = after_subscribe;
    in.bound_ms = op->wait_ms;
    in.left_ms = left_ms(op->deadline);
    relock__wait_plan p = relock__wait_plan_next(&in);
    if (p.act == RELOCK__WAIT_SUBSCRIBE) {
        op->sub_tries = 0;
        int j = op->ch ? (op->ch->confirmed ? 1 : 0) : chan_join(op);
        if (j == 0) {
            /* plans again when the subscription is answered, or without it */
            op->state = S_SUBSCRIBING;
            op->timer = timer_start(a, c->s.command_timeout_ms, relock__a_op_timer, op);
            return;
        }
        in.after_subscribe = 1;
        in.subscribed = j == 1;
        in.left_ms = left_ms(op->deadline);
        p = relock__wait_plan_next(&in);
    }
    /* A modern client meeting a live classic holder says so. */
    const char *classic =
        c->mode == RELOCK_MODE_MODERN && l->legacy_holder ? RELOCK_CLASSIC_HOLDER_NOTE : "";
    switch (p.act) {
    case RELOCK__WAIT_BUSY:
    case RELOCK__WAIT_TIMEOUT:
        relock__err_clear(&c->err);
        if (p.act == RELOCK__WAIT_BUSY)
            RELOCK__FAIL(&c->err, RELOCK_BUSY, "lock %s is held%s", l->name, classic);
        else
            RELOCK__FAIL(&c->err, RELOCK_TIMEOUT, "lock %s: still held after %lld ms%s", l->name,
                         op->wait_ms, classic);
        relock__a_err_save(op);
        relock__a_op_finish(op, c->err.pub.status);
        return;
    case RELOCK__WAIT_SLEEP:
        /* The next attempt is one more, after a sleep or a notice: the
         * backoff grows. */
        op->attempt++;
        op->state = S_SLEEP;
        op->timer = timer_start(a, p.sleep_ms, relock__a_op_timer, op);
        if (!op->timer)
            relock__a_op_finish(
                op, relock__a_op_fail(op, RELOCK_ENOMEM, "acquire %s: out of memory", l->name));
        return;
    default: /* RELOCK__WAIT_RETRY, RELOCK__WAIT_SUBSCRIBE handled */
        op->attempt++;
        relock__a_attempt_begin(op);
        return;
    }
}

