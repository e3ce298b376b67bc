/* A connection of the operation core (core.h), from its connect and setup
 * to its drop, and the requests in flight on it. */

#include <pthread.h>

#include "core.h"

/* Why a connect under way failed, when the loop's adapter did not tell
 * (hiredis's libuv adapter drops a poll error, so a refused connect shows
 * only as a timeout): the socket's pending error, or NULL. */
const char *relock__a_sock_error(const redisAsyncContext *ac)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (ac && ac->c.fd >= 0 && getsockopt(ac->c.fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err)
        return strerror(err);
    return NULL;
}

/* Frees the client once no callback of it runs (relock__a_leave()). */
static void really_free(relock_async *a)
{
    timer_stop(a, &a->start_timer);
    for (int i = 0; i < a->nconns; i++) {
        aconn *cn = &a->conns[i];
        timer_stop(a, &cn->conn_timer);
        timer_stop(a, &cn->tmo_timer);
        timer_stop(a, &cn->kick_timer);
        if (cn->ac) {
            redisAsyncContext *ac = cn->ac;
            cn->ac = NULL;
            ac->data = NULL;
            redisAsyncFree(ac);
        }
        relock__a_batch_clear(&cn->setup);
    }
    relock__a_loc_stop(a);
    relock__a_batch_clear(&a->slots_rd);
    memset(a->conns, 0, (size_t)a->ncap * sizeof *a->conns); /* node entries hold passwords */
    free(a->conns);
    free(a->slots);
    if (a->sub) {
        redisAsyncContext *s = a->sub;
        a->sub = NULL;
        s->data = NULL;
        redisAsyncFree(s);
    }
    relock__a_chan_free_all(a);
    free(a->fanout);
    free(a->spare);
    while (a->nspare_m > 0)
        free(a->spare_m[--a->nspare_m]);
    relock_client *c = a->c;
    if (!a->borrowed) { /* (the blocking client's own, pollloop.c) */
        memset(c, 0xa5, sizeof *c); /* settings hold passwords */
        free(c);
    }
    memset(a, 0xa5, sizeof *a);
    free(a);
}

void relock__a_enter(relock_async *a)
{
    a->depth++;
}

void relock__a_leave(relock_async *a)
{
    if (--a->depth == 0 && a->freeing)
        really_free(a);
}

/* A deep copy of a reply, freeable with freeReplyObject(). */
static redisReply *reply_copy(const redisReply *r, int depth)
{
    redisReply *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->type = r->type;
    c->integer = r->integer;
    if (r->str) {
        c->str = malloc(r->len + 1);
        if (!c->str)
            goto fail;
        memcpy(c->str, r->str, r->len);
        c->str[r->len] = '\0';
        c->len = r->len;
    }
    if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 && depth < 16) {
        c->element = calloc(r->elements, sizeof *c->element);
        if (!c->element)
            goto fail;
        c->elements = r->elements;
        for (size_t i = 0; i < r->elements; i++) {
            c->element[i] = reply_copy(r->element[i], depth + 1);
            if (!c->element[i])
                goto fail;
        }
    }
    return c;
fail: /* (freeReplyObject() frees what was copied so far) */
    freeReplyObject(c);
    return NULL;
}

/* Replies taken from hiredis rather than copied: hiredis frees a reply
 * through its reader's freeObject right after its callback, and the core's
 * leaves alone one a callback took (noted in this thread's `taken`). */
#define TAKEN_MAX 8
static _Thread_local void *taken[TAKEN_MAX];
static redisReplyObjectFunctions take_fns;
static pthread_once_t take_once = PTHREAD_ONCE_INIT;

static void take_free(void *r)
{
    for (int i = 0; r && i < TAKEN_MAX; i++)
        if (taken[i] == r) {
            taken[i] = NULL;
            return;
        }
    freeReplyObject(r);
}

static const redisReplyObjectFunctions *take_base;

static void take_init(void)
{
    take_fns = *take_base;
    take_fns.freeObject = take_free;
}

/* Installs take_free on ac's reader (hiredis's own functions otherwise). */
void relock__a_take_install(redisAsyncContext *ac)
{
    if (!ac->c.reader || !ac->c.reader->fn)
        return;
    take_base = ac->c.reader->fn;
    pthread_once(&take_once, take_init);
    ac->c.reader->fn = &take_fns;
}

/* The reply hiredis passes a callback, kept (a copy when TAKEN_MAX are noted already). */
static redisReply *reply_take(void *r)
{
    for (int i = 0; i < TAKEN_MAX; i++)
        if (!taken[i]) {
            taken[i] = r;
            return r;
        }
    return reply_copy(r, 0);
}

/* Frees a request's commands and the replies it holds; its room stays. */
void relock__a_rq_reset(areq *rq)
{
    for (int i = 0; i < rq->n; i++) {
        free(rq->cmd[i]);
        rq->cmd[i] = NULL;
    }
    rq->n = 0;
    rq->base = rq->ask = 0;
    for (int i = 0; i < rq->nrep; i++) {
        freeReplyObject(rq->rep[i]); /* (NULL: a copy that found no memory) */
        rq->rep[i] = NULL;
    }
    rq->nrep = 0;
}

static void rq_own_room(areq *rq)
{
    rq->cmd = rq->own_cmd;
    rq->len = rq->own_len;
    rq->rep = rq->own_rep;
    rq->cap = RELOCK__BATCH_OWN;
}

/* Frees a request's commands, its replies and a wide batch's room. */
void relock__a_rq_clear(areq *rq)
{
    relock__a_rq_reset(rq);
    if (rq->cmd != rq->own_cmd)
        free(rq->cmd); /* a wide batch's room (or NULL) */
    rq_own_room(rq);
}

int relock__a_rq_room(areq *rq, int n)
{
    if (!rq->cmd)
        rq_own_room(rq);
    if (n <= rq->cap)
        return 0;
    if (n > RELOCK__BATCH_CMDS || rq->n || rq->nrep)
        return -1;
    /* one block: the commands, the replies, then the lengths */
    size_t k = (size_t)n;
    char *w = calloc(1, k * (sizeof *rq->cmd + sizeof *rq->rep + sizeof *rq->len));
    if (!w)
        return -1;
    if (rq->cmd != rq->own_cmd)
        free(rq->cmd);
    rq->cmd = (char **)(void *)w;
    rq->rep = (redisReply **)(void *)(w + k * sizeof *rq->cmd);
    rq->len = (size_t *)(void *)(w + k * (sizeof *rq->cmd + sizeof *rq->rep));
    rq->cap = n;
    return 0;
}

void relock__a_queue_remove(aconn *cn, aop *op)
{
    queue_remove_(&cn->queue, &cn->queue_tail, op);
    walk_remove_(&cn->walk, &cn->walk_tail, op);
}

/* The queue's operations join those being walked.  A walk runs callbacks,
 * which may cancel or free what is still to walk, so each is taken out
 * only at its turn (walk_next): one cancelled meanwhile (queue_remove) is
 * neither sent nor fed.  A walk within a walk goes on with the outer's rest. */
static void walk_take(aconn *cn)
{
    aop *q = cn->queue;
    cn->queue = cn->queue_tail = NULL;
    while (q) {
        aop *next = q->qnext;
        walk_push_(&cn->walk, &cn->walk_tail, q);
        q = next;
    }
}

static aop *walk_next(aconn *cn)
{
    aop *q = cn->walk;
    walk_remove_(&cn->walk, &cn->walk_tail, q);
    return q;
}

/* The queue goes out, from the loop (relock__a_conn_wants()). */
static void kick_fire(void *arg)
{
    aconn *cn = arg;
    relock_async *a = cn->a;
    cn->kick_timer = NULL;
    relock__a_enter(a);
    if (cn->cstate == C_READY && (!a->fatal || a->fatal_mode))
        relock__a_queue_flush(cn);
    relock__a_leave(a);
}

/* op waits for cn: queued, and the connection opened or kicked. */
void relock__a_conn_wants(aconn *cn, aop *op)
{
    queue_push_(&cn->queue, &cn->queue_tail, op);
    if (cn->cstate == C_DOWN)
        relock__a_conn_connect(cn);
    else if (cn->cstate == C_READY && !cn->kick_timer && !cn->a->direct)
        cn->kick_timer = timer_start(cn->a, 0, kick_fire, cn);
}

/* The connection to host:port (a Unix socket: port 0), or NULL. */
aconn *relock__a_conn_find(relock_async *a, const char *host, int port)
{
    for (int i = 0; i < a->nconns; i++)
        if (a->conns[i].srv->port == port && strcmp(a->conns[i].srv->host, host) == 0)
            return &a->conns[i];
    return NULL;
}

/* Sends or starts what waits in the queue, in order. */
void relock__a_queue_flush(aconn *cn)
{
    relock_async *a = cn->a;
    walk_take(cn);
    while (!a->freeing && cn->walk) {
        aop *q = walk_next(cn);
        if (q->state == S_NEW)
            relock__a_op_start(q);
        else
            relock__a_submit(q);
    }
}

/* The connection is gone (failed, timed out, dropped): its batches in flight
 * are fed back as faults.  hiredis_frees: hiredis is freeing the context. */
void relock__a_conn_gone(aconn *cn, int hiredis_frees, relock_status st, const char *why)
{
    relock_async *a = cn->a;
    redisAsyncContext *ac = cn->ac;
    if (!ac)
        return;
    int was_connected = cn->connected;
    /* how far the output was written, for a quorum's requests */
    uint64_t wrote = cn->appended - (ac->c.obuf ? sdslen(ac->c.obuf) : 0);
    cn->ac = NULL;
    cn->cstate = C_DOWN;
    cn->connected = 0;
    cn->gen++;
    ac->data = NULL;
    timer_stop(a, &cn->conn_timer);
    timer_stop(a, &cn->tmo_timer);
    if (!hiredis_frees)
        redisAsyncFree(ac);
    char text[400];
    if (strncmp(why, "connect to ", 11) == 0)
        snprintf(text, sizeof text, "%s", why); /* names the server already */
    else
        snprintf(text, sizeof text, RELOCK__ADDR_FMT ": %s", RELOCK__ADDR(cn->srv), why);
    areq *f = cn->fifo;
    cn->fifo = cn->fifo_tail = NULL;
    while (f && !a->freeing) {
        areq *next = f->fnext;
        f->fnext = NULL;
        if (!f->op) { /* owed: nobody reads it */
            relock__a_rq_clear(f);
            free(f);
        } else if (f != &f->op->rq) { /* a fan machine's */
            relock__a_fan_gone(f->op, f,
                               was_connected && wrote > f->start_off ? RELOCK__FAULT_LOST
                                                                     : RELOCK__FAULT_UNSENT,
                               st, text);
        } else {
            relock__a_op_feed(f->op, was_connected ? RELOCK__FAULT_LOST : RELOCK__FAULT_UNSENT, st,
                              text);
        }
        f = next;
    }
    if (cn->queue && !a->freeing && cn->cstate == C_DOWN)
        relock__a_conn_connect(cn);
}

static void on_reply(redisAsyncContext *ac, void *r, void *priv)
{
    aconn *cn = ac->data;
    if (!cn || cn->a->freeing)
        return;
    relock_async *a = cn->a;
    areq *rq = priv;
    aop *op = rq->op;
    relock__a_enter(a);
    if (!r) {
        relock__a_conn_gone(cn, 1, RELOCK_EIO, ac->errstr[0] ? ac->errstr : "connection lost");
    } else if (!op || rq != &op->rq) {
        /* a quorum's request: owed (dropped) or read by its fan machine */
        if (op && rq->nrep < rq->cap)
            rq->rep[rq->nrep++] = reply_take(r);
        if (--rq->outstanding == 0) {
            fifo_remove_(&cn->fifo, &cn->fifo_tail, rq);
            if (op) {
                relock__a_fan_reply(op, rq);
            } else {
                relock__a_rq_clear(rq);
                free(rq);
            }
        }
    } else if (op->state == S_SENT) {
        /* with ask, the first reply is ASKING's, and goes */
        if (!(rq->ask && rq->got == 0))
            rq->rep[rq->nrep++] = reply_take(r);
        rq->got++;
        if (--rq->outstanding == 0) {
            /* The requests behind a slow one (WAIT) waited for it: their
             * command timeout counts from now. */
            if (rq->slow_ms > 0 && cn->fifo == rq && rq->fnext) {
                uint64_t now = now_ms();
                if (rq->fnext->sent_at < now)
                    rq->fnext->sent_at = now;
            }
            fifo_remove_(&cn->fifo, &cn->fifo_tail, rq);
            int kept = 0; /* a reply is NULL when its copy found no memory */
            while (kept < rq->nrep && rq->rep[kept])
                kept++;
            if (kept < rq->nrep)
                relock__a_op_feed(op, RELOCK__FAULT_LOST, RELOCK_ENOMEM,
                                  "out of memory for a reply");
            else if (op->kind == K_SETUP || op->kind == K_SLOTS || !relock__a_follow(op))
                relock__a_op_feed(op, RELOCK__FAULT_NONE, RELOCK_OK, NULL);
        }
    }
    relock__a_leave(a);
}

static void tmo_fire(void *arg)
{
    aconn *cn = arg;
    relock_async *a = cn->a;
    cn->tmo_timer = NULL;
    relock__a_enter(a);
    if (cn->fifo && cn->ac) {
        uint64_t due = cn->fifo->sent_at + (uint64_t)a->c->s.command_timeout_ms +
                       (uint64_t)cn->fifo->slow_ms;
        uint64_t now = now_ms();
        if (now >= due) {
            char why[200];
            snprintf(why, sizeof why, "no reply within %lld ms (command_timeout_ms)",
                     a->c->s.command_timeout_ms);
            if (a->kit && a->kit->fan) /* a quorum's server: left alone for a while */
                cn->retry_at = now + (uint64_t)cn->late_ms;
            relock__a_conn_gone(cn, 0, RELOCK_EIO, why);
        } else {
            cn->tmo_timer = timer_start(a, (long)(due - now), tmo_fire, cn);
        }
    }
    relock__a_leave(a);
}

/* Writes the request's commands on its connection. */
void relock__a_rq_send(areq *rq)
{
    aconn *cn = rq->cn;
    relock_async *a = cn->a;
    /* a quorum's request is never sent again (a redirection's is) */
    int fan = !rq->op || rq != &rq->op->rq;
    rq->nrep = rq->base;
    rq->got = 0;
    rq->expect = rq->n - rq->base;
    rq->sent_at = now_ms();
    rq->start_off = cn->appended;
    fifo_push_(&cn->fifo, &cn->fifo_tail, rq);
    int end = rq->ask ? rq->base + 1 : rq->n; /* ASK: ASKING and cmd[base] alone */
    rq->outstanding = end - rq->base + rq->ask;
    if (rq->ask) {
        static const char asking[] = "*1\r\n$6\r\nASKING\r\n";
        cn->appended += sizeof asking - 1;
        redisAsyncFormattedCommand(cn->ac, on_reply, rq, asking, sizeof asking - 1);
    }
    for (int i = rq->base; i < end; i++) {
        cn->appended += rq->len[i];
        rq->end_off = cn->appended;
        redisAsyncFormattedCommand(cn->ac, on_reply, rq, rq->cmd[i], rq->len[i]);
        if (fan) {
            free(rq->cmd[i]);
            rq->cmd[i] = NULL;
        }
    }
    if (!cn->tmo_timer)
        cn->tmo_timer = timer_start(a, a->c->s.command_timeout_ms, tmo_fire, cn);
}

/* op's batch waits in cn's queue, which connects when down. */
static void queue_wait(aconn *cn, aop *op)
{
    op->state = S_QUEUED;
    queue_push_(&cn->queue, &cn->queue_tail, op);
    if (cn->cstate == C_DOWN)
        relock__a_conn_connect(cn);
}

/* Writes op's batch on its connection. */
void relock__a_send_now(aop *op)
{
    if (op->kind != K_SETUP && op->phase == PH_MAIN && !op->fencing && !op->undoing) {
        if (!op->wset) {
            op->wset = 1;
            op->wgen = op->cn->gen;
        } else if (op->wgen != op->cn->gen) {
            op->wmoved = 1;
        }
    }
    op->state = S_SENT;
    op->sent_any = 1;
    op->rq.op = op;
    op->rq.cn = op->cn;
    relock__a_rq_send(&op->rq);
}

/* Sends op's batch when the connection allows, else queues it. */
void relock__a_submit(aop *op)
{
    aconn *cn = op->cn;
    if (op->pinned && (!op->wset || op->wmoved || cn->gen != op->wgen || cn->cstate != C_READY)) {
        /* The write's connection is gone: WAIT on another would count
         * nothing of the write (durable.c). */
        relock__a_rq_clear(&op->rq);
        relock__a_op_feed(op, RELOCK__FAULT_UNSENT, RELOCK_EDURABILITY,
                          "the connection changed since the write");
        return;
    }
    if (op->redir) {
        /* the rest of a redirected batch (never inside a transaction) */
        aconn *to = op->redir;
        if (to->cstate != C_READY || to->txn_owner) {
            queue_wait(to, op);
            return;
        }
        /* A write that went on to another node: a WAIT pinned to the
         * connection it started on could not count it (after TRYAGAIN it
         * goes on the same one, where WAIT counts it). */
        if (op->phase == PH_MAIN && !op->fencing && !op->undoing && to != op->rq.cn)
            op->wmoved = 1;
        op->redir = NULL;
        op->state = S_SENT;
        op->rq.op = op;
        op->rq.cn = to;
        relock__a_rq_send(&op->rq);
        return;
    }
    if (cn->txn_owner == op) {
        if (cn->gen != op->txn_gen || cn->cstate != C_READY) {
            /* The transaction's connection is gone: never replaced under it. */
            relock__a_op_feed(op, RELOCK__FAULT_UNSENT, RELOCK_EIO,
                              "the connection of a transaction was lost before its end");
            return;
        }
        relock__a_send_now(op);
        return;
    }
    if (op->kind != K_SETUP && (cn->cstate != C_READY || cn->txn_owner)) {
        queue_wait(cn, op);
        return;
    }
    if (op->in_txn) {
        cn->txn_owner = op;
        op->txn_gen = cn->gen;
    }
    relock__a_send_now(op);
}

/* The connect under way failed, as detail says. */
static void connect_lost(aconn *cn, int hiredis_frees, const char *detail)
{
    char why[400]; /* the address and a socket error fit whole */
    snprintf(why, sizeof why, "connect to " RELOCK__ADDR_FMT ": %s", RELOCK__ADDR(cn->srv), detail);
    relock__a_map_forget(cn);
    relock__a_conn_gone(cn, hiredis_frees, RELOCK_EIO, why);
}

void relock__a_on_connect(const redisAsyncContext *ac, int status)
{
    aconn *cn = ac->data;
    if (!cn)
        return;
    relock_async *a = cn->a;
    relock__a_enter(a);
    if (status == REDIS_OK) {
        cn->connected = 1;
        timer_stop(a, &cn->conn_timer);
    } else {
        connect_lost(cn, 1, ac->errstr[0] ? ac->errstr : "failed");
    }
    relock__a_leave(a);
}

void relock__a_on_disconnect(const redisAsyncContext *ac, int status)
{
    (void)status;
    aconn *cn = ac->data;
    if (!cn)
        return;
    relock_async *a = cn->a;
    relock__a_enter(a);
    relock__a_conn_gone(cn, 1, RELOCK_EIO, ac->errstr[0] ? ac->errstr : "connection closed");
    relock__a_leave(a);
}

void relock__a_conn_timeout(void *arg)
{
    aconn *cn = arg;
    relock_async *a = cn->a;
    cn->conn_timer = NULL;
    relock__a_enter(a);
    if (cn->ac && !cn->connected) {
        char late[64];
        snprintf(late, sizeof late, "timed out after %lld ms", a->c->s.connect_timeout_ms);
        const char *se = relock__a_sock_error(cn->ac);
        connect_lost(cn, 0, se ? se : late);
    }
    relock__a_leave(a);
}

int relock__a_login(const relock__server *srv, char db[16], relock__cmd cmd[2])
{
    int n = 0;
    if (srv->password[0])
        cmd[n++] = (relock__cmd){.argc = srv->username[0] ? 3 : 2,
                                 .argv = {"AUTH", srv->username[0] ? srv->username : srv->password,
                                          srv->password}};
    if (srv->db != 0) {
        snprintf(db, 16, "%d", srv->db);
        cmd[n++] = (relock__cmd){.argc = 2, .argv = {"SELECT", db}};
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < cmd[i].argc; j++)
            cmd[i].len[j] = strlen(cmd[i].argv[j]);
    return n;
}

/* The setup of a connection: AUTH and SELECT as the server entry says, then
 * the probe machine (setup.attempt: 0 logging in, 1 probing, 2 asking a
 * master the sentinels named for its role).  This sends those of its next
 * commands (two at most) that format, and returns how many. */
static int setup_send(aop *su, int n, const relock__cmd *k)
{
    areq *rq = &su->rq;
    relock__a_rq_reset(rq);
    relock__a_rq_room(rq, 2); /* (a request's own room) */
    for (int i = 0; i < n; i++) {
        int fl = relock__a_fmt_cmd(&rq->cmd[rq->n], k[i].argc, (const char *const *)k[i].argv,
                                   k[i].len);
        if (fl > 0)
            rq->len[rq->n++] = (size_t)fl;
    }
    if (rq->n > 0)
        relock__a_send_now(su);
    return rq->n;
}

static void role_check(aop *su, const relock__feed *in)
{
    aconn *cn = su->cn;
    relock_async *a = su->a;
    relock_client *c = a->c;
    char role[32], why[RELOCK__HOST_MAX + 200];
    int rc = -1;
    if (in->fault || in->nreply < 1) {
        snprintf(why, sizeof why, "ROLE: %s", in->fault_text ? in->fault_text : "no reply");
    } else {
        int by_info = relock__sentinel_role_by_info(c->conn.major, c->conn.minor, c->conn.patch);
        rc = relock__sentinel_role(in->reply[0], by_info, role, sizeof role);
        if (rc < 0)
            snprintf(why, sizeof why, "ROLE: unexpected reply");
        else
            snprintf(why, sizeof why, "not a master (role %s)", role);
    }
    if (rc == 0) {
        a->loc.checking = 0;
        a->loc.active = 0;
        c->sentinel_first = a->loc.q.cur;
        relock__a_setup_done(cn, RELOCK_OK);
        return;
    }
    relock__sentinel_bad_master(&a->loc.q, &c->s, &a->loc.m, RELOCK_EIO, why);
    relock__a_conn_drop(cn);
    relock__a_loc_next(a);
}

/* The connect that failed at once (conn_connect) fails what waits. */
static void connect_failed(void *arg)
{
    aconn *cn = arg;
    relock_async *a = cn->a;
    cn->conn_timer = NULL;
    relock__a_enter(a);
    if (!a->freeing && cn->cstate == C_CONNECTING && !cn->ac) {
        cn->cstate = C_DOWN;
        relock__err_clear(&a->c->err);
        relock__a_setup_done(cn, RELOCK__FAIL(&a->c->err, RELOCK_EIO, "%s", cn->fail_why));
    }
    relock__a_leave(a);
}

void relock__a_conn_connect(aconn *cn)
{
    relock_async *a = cn->a;
    if (cn->idx == 0 && relock__sentinel_on(&a->c->s) && !a->loc.go) {
        /* find the master first */
        if (!a->loc.active) {
            relock__sentinel_begin(&a->loc.q, &a->c->s, a->c->sentinel_first);
            a->loc.active = 1;
        }
        relock__a_loc_next(a);
        return;
    }
    a->loc.go = 0;
    const relock__server *srv = cn->srv;
    redisAsyncContext *ac =
        srv->port ? redisAsyncConnect(srv->host, srv->port) : redisAsyncConnectUnix(srv->host);
    cn->cstate = C_CONNECTING;
    cn->connected = 0;
    if (!ac || ac->err || relock__loop_attach(&a->loop, ac) != 0) {
        snprintf(cn->fail_why, sizeof cn->fail_why, "connect to " RELOCK__ADDR_FMT ": %s",
                 RELOCK__ADDR(srv), ac && ac->err ? ac->errstr : "cannot attach to the loop");
        if (ac)
            redisAsyncFree(ac);
        /* "connecting" (no second connect) until the loop reports it */
        timer_stop(a, &cn->conn_timer);
        cn->conn_timer = timer_start(a, 0, connect_failed, cn);
        if (!cn->conn_timer) { /* no timer: at once */
            cn->cstate = C_DOWN;
            relock__a_setup_done(cn, RELOCK__FAIL(&a->c->err, RELOCK_EIO, "%s", cn->fail_why));
        }
        return;
    }
    ac->data = cn;
    cn->ac = ac;
    relock__a_take_install(ac);
    cn->appended = 0;
    a->c->connects++;
    cn->clock.known = 0; /* legacy.clock = "server": measured again */
    redisAsyncSetConnectCallback(ac, relock__a_on_connect);
    redisAsyncSetDisconnectCallback(ac, relock__a_on_disconnect);
    cn->conn_timer = timer_start(a, a->c->s.connect_timeout_ms, relock__a_conn_timeout, cn);
    cn->cstate = C_SETUP;
    aop *su = &cn->setup;
    relock__a_batch_clear(su);
    *su = (aop){.a = a, .cn = cn, .kind = K_SETUP};
    char db[16];
    relock__cmd login[2];
    if (!setup_send(su, relock__a_login(srv, db, login), login)) /* no login: the probe */
        relock__a_setup_step(su, &(relock__feed){0});
}

/* The setup ended: with RELOCK_OK the queue goes out; otherwise the
 * connection is dropped, and what waits fails or is fed the fault. */
void relock__a_setup_done(aconn *cn, relock_status st)
{
    relock_async *a = cn->a;
    if (st != RELOCK_OK && a->loc.checking) {
        /* the master a sentinel named cannot be used: ask the next */
        relock__a_loc_bad_master(cn, st, a->c->err.msg);
        return;
    }
    if (st == RELOCK_OK) {
        cn->cstate = C_READY;
        if (!a->probed) {
            a->probed = 1;
            relock_client *c = a->c;
            relock__err_clear(&c->err);
            st = a->select_mode(c);
            if (st == RELOCK_OK)
                st = relock__durable_check(c);
            a->kit = c->algo ? c->algo->machines : NULL;
            if (st == RELOCK_OK && !a->kit) /* a selected mode has machines */
                st = RELOCK__FAIL(&c->err, RELOCK_EPROTO, "internal error: no machines for mode %s",
                                  relock_mode_name(c->mode));
            /* The blocking calls must not run on this client's locks. */
            c->algo = NULL;
            if (st != RELOCK_OK) {
                a->fatal = st;
                a->fatal_mode = 1; /* the connection serves scans */
                relock__err_copy(&a->fatal_err, &c->err);
                relock__err_copy(&a->err, &c->err);
                snprintf(c->mode_reason, sizeof c->mode_reason, "%.255s", c->err.msg);
            }
        }
        if (!a->fatal || a->fatal_mode) {
            relock__a_queue_flush(cn);
            return;
        }
    } else if (st != RELOCK_EIO && st != RELOCK_ENOMEM && !a->percall &&
               !relock__reply_transient(a->c->err.server)) {
        /* The server refuses us (login, ACL) or cannot be used.  A "not
         * now" error reply fails what waits, as a lost connection does. */
        a->fatal = st;
        relock__err_copy(&a->fatal_err, &a->c->err);
    }
    relock__err why;
    relock__err_copy(&why, &a->c->err);
    relock__err_copy(&a->err, &why);
    if (cn->ac)
        relock__a_conn_gone(cn, 0, st, why.msg);
    /* The operations waiting for the connection: those not started fail
     * with its error; a machine under way is fed the fault and decides. */
    walk_take(cn);
    while (!a->freeing && cn->walk) {
        aop *q = walk_next(cn);
        if (q->state == S_NEW && !a->fatal && !q->rerouted && cn->srv == &cn->node &&
            !relock__sentinel_on(&a->c->s)) {
            /* A Cluster node that cannot be reached left the map: an
             * operation that sent nothing tries once more where its slot
             * leads now. */
            aconn *to = relock__a_route(a, q->l ? q->l->key : NULL);
            if (to != cn) {
                q->rerouted = 1;
                q->cn = to;
                relock__a_conn_wants(to, q);
                continue;
            }
        }
        if (q->state == S_NEW || a->fatal) {
            relock__a_err_keep(q, &why);
            relock__a_op_finish(q, st);
        } else {
            /* a redirected batch keeps the replies its first commands had */
            if (!q->redir)
                relock__a_batch_clear(q);
            relock__a_op_feed(q, RELOCK__FAULT_UNSENT, st, why.msg);
        }
    }
}

/* The server facts a probe learns (c->conn's, what the machines read),
 * copied between the client and a connection. */
static void facts_copy(relock__conn *to, const relock__conn *from)
{
    memcpy(to->version, from->version, sizeof to->version);
    to->major = from->major;
    to->minor = from->minor;
    to->patch = from->patch;
    to->caps = from->caps;
}

void relock__a_facts_load(relock_client *c, const aconn *cn)
{
    facts_copy(&c->conn, &cn->facts);
}

void relock__a_setup_step(aop *su, const relock__feed *in)
{
    aconn *cn = su->cn;
    relock_async *a = su->a;
    relock_client *c = a->c;
    const relock__server *srv = cn->srv;
    relock__feed first = {0};
    if (su->attempt == 2) {
        relock__a_facts_load(c, cn); /* this master's, for ROLE's form and the mode */
        role_check(su, in);
        return;
    }
    if (su->attempt == 0) {
        /* the replies to AUTH and SELECT */
        relock__err_clear(&c->err);
        if (in->fault) {
            /* (a connect that failed says so itself, as without a login) */
            const char *t = in->fault_text ? in->fault_text : "no reply";
            relock__a_setup_done(
                cn, RELOCK__FAIL(&c->err, in->fault_status ? in->fault_status : RELOCK_EIO, "%s%s",
                                 strncmp(t, "connect to ", 11) == 0 ? "" : "login: ", t));
            return;
        }
        for (int i = 0; i < in->nreply; i++) {
            const redisReply *r = in->reply[i];
            if (r->type != REDIS_REPLY_ERROR)
                continue;
            if (srv->password[0] && i == 0)
                RELOCK__FAIL_SRV(&c->err, RELOCK_ECONFIG, r->str,
                                 "AUTH to " RELOCK__ADDR_FMT " refused: %s", RELOCK__ADDR(srv),
                                 r->str);
            else
                RELOCK__FAIL_SRV(&c->err, RELOCK_ECONFIG, r->str,
                                 "SELECT %d on " RELOCK__ADDR_FMT " refused: %s", srv->db,
                                 RELOCK__ADDR(srv), r->str);
            relock__a_setup_done(cn, RELOCK_ECONFIG);
            return;
        }
        su->attempt = 1;
        relock__probe_init(&su->probe);
        /* a new probe: nothing known of this server yet */
        cn->probed = 0;
        memset(&cn->facts, 0, sizeof cn->facts);
        static char pname[] = "(probe)";
        cn->probe_l = (relock_lock){.c = c, .name = pname, .key = pname, .fence_key = pname};
        in = &first;
    }
    relock__err_clear(&c->err);
    /* Each connection's probe learns into its own facts, around each step
     * (others may probe meanwhile); the client's keep this probe's last,
     * for the mode's choice and the role check. */
    relock__a_facts_load(c, cn);
    const relock__server *was_srv = c->conn.srv; /* named by its messages */
    c->conn.srv = cn->srv;
    relock__step s = relock__probe_step(&su->probe, &cn->probe_l, in, &a->batch);
    c->conn.srv = was_srv;
    facts_copy(&cn->facts, &c->conn);
    if (s == RELOCK__STEP_DONE) {
        cn->probed = su->probe.h.st == RELOCK_OK;
        if (!cn->probed || !a->loc.checking) {
            relock__a_setup_done(cn, su->probe.h.st);
            return;
        }
        /* a master the sentinels named: is it one? */
        int by_info = relock__sentinel_role_by_info(c->conn.major, c->conn.minor, c->conn.patch);
        relock__cmd k = {.argc = by_info ? 2 : 1,
                         .argv = {by_info ? "INFO" : "ROLE", "replication"},
                         .len = {4, 11}};
        su->attempt = 2;
        if (!setup_send(su, 1, &k))
            relock__a_loc_bad_master(cn, RELOCK_ENOMEM, "out of memory");
        return;
    }
    if (!setup_send(su, 1, &a->batch.cmd[0]))
        relock__a_setup_done(cn, RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "probe: out of memory"));
}
