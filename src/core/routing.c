/*
 * Routing in the operation core (core.h): the Redis Cluster slot map and
 * its node connections, following MOVED and ASK (relock__a_follow()), and
 * the search for the master the sentinels name (loc_*).
 */

#include "core.h"

/* ------------------------------------------------------------------ Cluster and Sentinel replies
 *
 * relock__route_reply (cluster.c) decides what a reply asks; MOVED's node
 * serves the slot from then on (the slot map); too many redirections, and
 * Sentinel's READONLY, end the batch as unsent. */

/* Cluster's slot map is on: one server, no Sentinel, cluster.slot_map. */
int relock__a_map_on(const relock_async *a)
{
    const relock__settings *s = &a->c->s;
    return s->cluster.slot_map && s->nservers <= 1 && !relock__sentinel_on(s);
}

/* Whether nothing uses cn now: no request or command in flight on it, no
 * operation waiting for it or pointing at it, no transaction. */
static int conn_unused(relock_async *a, aconn *cn)
{
    if (cn->fifo || cn->queue || cn->walk || cn->txn_owner ||
        (cn->ac && cn->ac->replies.head)) /* the markers' commands */
        return 0;
    for (aop *op = a->ops; op; op = op->next)
        if (op->cn == cn || op->redir == cn)
            return 0;
    return 1;
}

/* cluster.slot_map = false: the client keeps one connection, as the
 * blocking client does, which MOVED moves (home).  A node's connection
 * left behind by a MOVED, or opened for an ASK, is closed once nothing
 * uses it. */
void relock__a_map_trim(relock_async *a)
{
    const relock__settings *s = &a->c->s;
    if (s->cluster.slot_map || s->nservers > 1 || relock__sentinel_on(s) || a->freeing)
        return;
    aconn *home = a->home ? a->home : &a->conns[0];
    for (int i = 0; i < a->nconns; i++) {
        aconn *cn = &a->conns[i];
        if (cn != home && cn->ac && cn->cstate == C_READY && conn_unused(a, cn))
            relock__a_conn_drop(cn);
    }
}

/* A node's connection that nothing uses now (no operation points at it,
 * nothing in flight or waiting, not home), to serve another node; NULL
 * when every one is in use. */
static aconn *node_idle(relock_async *a)
{
    aconn *pick = NULL;
    for (int i = 1; i < a->nconns; i++) {
        aconn *cn = &a->conns[i];
        if (cn == a->home || cn->fifo || cn->queue || cn->txn_owner ||
            (cn->cstate != C_DOWN && cn->cstate != C_READY))
            continue;
        int used = 0;
        for (aop *op = a->ops; op && !used; op = op->next)
            used = op->cn == cn || op->redir == cn;
        if (!used && (!pick || cn->cstate == C_DOWN))
            pick = cn;
    }
    if (pick) {
        relock__a_conn_drop(pick);
        /* relock__a_node_conn() clears the struct: a kick left from an
         * operation cancelled in its queue would be lost to really_free() */
        timer_stop(a, &pick->kick_timer);
        relock__a_map_forget(pick);
        relock__a_batch_clear(&pick->setup);
        memset(&pick->node, 0, sizeof pick->node); /* the password */
    }
    return pick;
}

/* The connection to the Cluster node host:port, added when new (with
 * servers[0]'s login and db); NULL when ncap are in use and busy. */
aconn *relock__a_node_conn(relock_async *a, const char *host, int port)
{
    aconn *cn = relock__a_conn_find(a, host, port);
    if (cn || strlen(host) >= sizeof cn->node.host)
        return cn;
    if (a->nconns < a->ncap)
        cn = &a->conns[a->nconns++];
    else if (!(cn = node_idle(a)))
        return NULL;
    *cn = (aconn){.a = a, .idx = (int)(cn - a->conns), .node = a->c->s.servers[0]};
    snprintf(cn->node.host, sizeof cn->node.host, "%s", host);
    cn->node.port = port;
    cn->srv = &cn->node;
    return cn;
}

/* The connection an operation on key starts on: its slot's master when
 * the map knows it, else home. */
aconn *relock__a_route(relock_async *a, const char *key)
{
    if (a->slots && key) {
        int idx = a->slots[relock__cluster_slot(key, strlen(key))];
        if (idx)
            return &a->conns[idx - 1];
    }
    return a->home ? a->home : &a->conns[0];
}

void relock__a_cluster_counts(const relock_async *a, int *masters, int *open,
                              unsigned long *reads)
{
    int m = 0, o = 0;
    uint8_t seen[256] = {0};
    for (int s = 0; a->slots && s < RELOCK__CLUSTER_NSLOTS; s++)
        if (a->slots[s] && !seen[a->slots[s]]) {
            seen[a->slots[s]] = 1;
            m++;
        }
    for (int i = 0; i < a->nconns; i++)
        o += a->conns[i].ac != NULL;
    if (masters)
        *masters = m;
    if (open)
        *open = o;
    if (reads)
        *reads = a->slots_reads;
}

/* A node that could not be reached leaves the map (a failover may have
 * moved its slots): its slots' operations go home, whose MOVED tells. */
void relock__a_map_forget(aconn *cn)
{
    relock_async *a = cn->a;
    if (a->home == cn)
        a->home = &a->conns[0];
    if (!a->slots)
        return;
    a->slots_stale = 1;
    for (int i = 0; i < RELOCK__CLUSTER_NSLOTS; i++)
        if (a->slots[i] == cn->idx + 1)
            a->slots[i] = 0;
}

/* One range of CLUSTER SLOTS into the map.  A master beyond the
 * connections a client may have stays unknown (its MOVED teaches it). */
static void map_range(void *arg, int from, int to, const char *host, int port)
{
    relock_async *a = arg;
    aconn *cn = relock__a_conn_find(a, host, port);
    if (!cn && a->nconns < a->ncap)
        cn = relock__a_node_conn(a, host, port);
    if (cn)
        memset(&a->slots[from], cn->idx + 1, (size_t)(to - from + 1));
}

/* After a MOVED from at: the whole map is read from it (CLUSTER SLOTS)
 * the first time, and again at most once a second, or after a master
 * could not be reached; only when at is ready and in no transaction (the
 * request shares the connection), and one at a time. */
static void slots_read(aconn *at)
{
    relock_async *a = at->a;
    aop *rd = &a->slots_rd;
    uint64_t now = now_ms();
    if (rd->state == S_SENT || !a->slots || at->cstate != C_READY || at->txn_owner ||
        (a->slots_at && !a->slots_stale && now - a->slots_at < 1000))
        return;
    relock__a_batch_clear(rd);
    *rd = (aop){.a = a, .cn = at, .kind = K_SLOTS};
    relock__a_rq_room(&rd->rq, 1); /* (a request's own room) */
    int fl = redisFormatCommand(&rd->rq.cmd[0], "CLUSTER SLOTS");
    if (fl < 0)
        return;
    rd->rq.len[0] = (size_t)fl;
    rd->rq.n = 1;
    a->slots_at = now;
    relock__a_send_now(rd);
}

/* The reply to CLUSTER SLOTS (or the fault that ended it). */
void relock__a_slots_done(aop *rd, relock__fault fault)
{
    relock_async *a = rd->a;
    areq *rq = &rd->rq;
    rd->state = S_DONE;
    if (fault == RELOCK__FAULT_NONE && rq->nrep == 1 && a->slots &&
        rq->rep[0]->type == REDIS_REPLY_ARRAY) {
        memset(a->slots, 0, RELOCK__CLUSTER_NSLOTS);
        relock__cluster_slots_parse(rq->rep[0], rq->cn->srv->host, map_range, a);
        a->slots_stale = 0;
        a->slots_reads++;
    }
    relock__a_batch_clear(rd);
}

static void redir_fire(void *arg)
{
    aop *op = arg;
    relock_async *a = op->a;
    op->timer = NULL;
    relock__a_enter(a);
    relock__a_submit(op);
    relock__a_leave(a);
}

/* The batch's command name i (for messages), from its formatted text. */
static void cmd_name(const areq *rq, int i, char *out, size_t outlen)
{
    const char *p = rq->cmd[i];
    const char *nl = p ? memchr(p, '\n', rq->len[i]) : NULL;
    nl = nl ? memchr(nl + 1, '\n', rq->len[i] - (size_t)(nl + 1 - p)) : NULL;
    size_t n = nl ? strcspn(nl + 1, "\r") : 0;
    snprintf(out, outlen, "%.*s", (int)(n < 31 ? n : 31), nl ? nl + 1 : "");
}

/* Acts on a redirection or READONLY among the replies just completed;
 * 1 when it did (the batch goes on, or was ended), 0 when the replies are
 * the machine's. */
int relock__a_follow(aop *op)
{
    relock_async *a = op->a;
    relock_client *c = a->c;
    areq *rq = &op->rq;
    aconn *at = rq->cn;
    int in_txn = op->in_txn || at->txn_owner == op;
    for (int i = rq->base; i < rq->nrep; i++) {
        relock__redirect to;
        enum relock__route act =
            relock__route_reply(&c->s, in_txn, op->hops, at->srv->host, rq->rep[i], &to);
        if (act == RELOCK__ROUTE_REPLY ||
            (c->s.nservers > 1 && act != RELOCK__ROUTE_READONLY)) /* a quorum's server: as is */
            continue;
        char name[32];
        cmd_name(rq, i, name, sizeof name);
        relock__err e;
        relock__err_clear(&e);
        if (act == RELOCK__ROUTE_READONLY)
            relock__sentinel_readonly_fail(&e, &c->s, name, at->srv, rq->rep[i]->str);
        else if (act == RELOCK__ROUTE_TOO_MANY)
            relock__route_too_many(&e, name, op->hops, rq->rep[i]->str);
        long pause = act == RELOCK__ROUTE_TRYAGAIN ? relock__route_tryagain_ms(op->hops) : 0;
        int was_ask = rq->ask;
        for (int j = i; j < rq->nrep; j++)
            if (rq->rep[j]) {
                freeReplyObject(rq->rep[j]);
                rq->rep[j] = NULL;
            }
        rq->nrep = i;
        rq->base = i;
        rq->ask = 0;
        op->hops++;
        if (act == RELOCK__ROUTE_READONLY) {
            if (at->ac)
                relock__a_conn_gone(at, 0, RELOCK_EIO, e.msg);
            /* The error with the server's text (READONLY ...) is the
             * operation's: the machine's own words for the fault do not
             * replace it (relock__err_set keeps the first). */
            relock__err_copy(&c->err, &e);
            relock__a_err_save(op);
        }
        if (act == RELOCK__ROUTE_READONLY || act == RELOCK__ROUTE_TOO_MANY) {
            relock__a_op_feed(op, RELOCK__FAULT_UNSENT, RELOCK_EIO, e.msg);
            return 1;
        }
        aconn *next = at;
        if (act != RELOCK__ROUTE_TRYAGAIN) {
            op->redir = at; /* at is in use: relock__a_node_conn must not reuse it */
            next = relock__a_node_conn(a, to.host, to.port);
            op->redir = NULL;
            if (!next) {
                snprintf(e.msg, sizeof e.msg,
                         "%s: redirected to %s:%d, but the client's %d connections to "
                         "Cluster nodes are all in use",
                         name, to.host, to.port, a->ncap);
                relock__a_op_feed(op, RELOCK__FAULT_UNSENT, RELOCK_EIO, e.msg);
                return 1;
            }
        }
        if (act == RELOCK__ROUTE_MOVED) {
            c->moved++;
            if (relock__a_map_on(a)) {
                if (!a->slots)
                    a->slots = calloc(RELOCK__CLUSTER_NSLOTS, 1);
                if (a->slots)
                    a->slots[to.slot] = (uint8_t)(next->idx + 1);
                slots_read(at);
            } else {
                a->home = next; /* the one connection moves, as without a map */
            }
            op->cn = next;
            relock__a_map_trim(a);
        }
        /* TRYAGAIN after ASK asks again (the slot is still migrating) */
        rq->ask = act == RELOCK__ROUTE_ASK || (act == RELOCK__ROUTE_TRYAGAIN && was_ask);
        op->redir = next;
        if (pause > 0) {
            op->state = S_QUEUED;
            op->timer = timer_start(a, pause, redir_fire, op);
            if (op->timer)
                return 1;
        }
        relock__a_submit(op);
        return 1;
    }
    if (rq->ask && rq->base + 1 < rq->n) {
        /* the ASKed command was answered: the later ones go on as before */
        rq->base++;
        rq->ask = 0;
        op->redir = op->cn;
        relock__a_submit(op);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ Sentinel
 *
 * conns[0] connects to the master the search (sentinel.c) finds over a
 * short-lived connection to each sentinel in turn; operations wait
 * meanwhile, and fail with the search's message when it finds none. */

/* Closes the connection to the sentinel being asked, if any. */
void relock__a_loc_stop(relock_async *a)
{
    timer_stop(a, &a->loc.timer);
    redisAsyncContext *ac = a->loc.ac;
    if (ac) {
        a->loc.ac = NULL;
        ac->data = NULL;
        redisAsyncFree(ac); /* deferred by hiredis inside its own callbacks */
    }
}

/* The sentinel being asked failed (reason): the next one is asked. */
static void loc_failed(relock_async *a, const char *reason)
{
    char why[RELOCK__HOST_MAX + 160];
    snprintf(why, sizeof why, "%s", reason);
    relock__a_loc_stop(a);
    relock__sentinel_unreachable(&a->loc.q, &a->c->s, why);
    relock__a_loc_next(a);
}

static void loc_timeout_fire(void *arg)
{
    relock_async *a = arg;
    a->loc.timer = NULL;
    relock__a_enter(a);
    int up = a->loc.ac && (a->loc.ac->c.flags & REDIS_CONNECTED);
    const char *se = a->loc.ac && !up ? relock__a_sock_error(a->loc.ac) : NULL;
    char why[96];
    long long tmo = up ? a->c->s.command_timeout_ms : a->c->s.connect_timeout_ms;
    snprintf(why, sizeof why, "no answer within %lld ms", relock__sentinel_timeout(tmo));
    loc_failed(a, se ? se : why); /* (copied before the context goes) */
    relock__a_leave(a);
}

/* The sentinel's connection failed (what: the words when hiredis has
 * none); hiredis frees the context after this callback. */
static void loc_lost(const redisAsyncContext *ac, const char *what)
{
    relock_async *a = ac->data;
    if (!a)
        return;
    relock__a_enter(a);
    a->loc.ac->data = NULL;
    a->loc.ac = NULL;
    loc_failed(a, ac->errstr[0] ? ac->errstr : what);
    relock__a_leave(a);
}

static void loc_on_connect(const redisAsyncContext *ac, int status)
{
    relock_async *a = ac->data;
    if (!a || status != REDIS_OK) {
        loc_lost(ac, "connect failed");
        return;
    }
    relock__a_enter(a);
    timer_stop(a, &a->loc.timer);
    a->loc.timer = timer_start(a, relock__sentinel_timeout(a->c->s.command_timeout_ms),
                               loc_timeout_fire, a);
    relock__a_leave(a);
}

static void loc_on_disconnect(const redisAsyncContext *ac, int status)
{
    (void)status;
    loc_lost(ac, "connection lost");
}

static void loc_on_reply(redisAsyncContext *ac, void *rr, void *priv)
{
    (void)priv;
    relock_async *a = ac->data;
    if (!a || !rr)
        return; /* no reply: the disconnect callback tells */
    relock__a_enter(a);
    relock_client *c = a->c;
    relock__addr m;
    int rc = relock__sentinel_answer(&a->loc.q, &c->s, rr, &m);
    relock__a_loc_stop(a);
    if (rc != 0) {
        relock__a_loc_next(a);
    } else {
        aconn *cn = &a->conns[0];
        cn->node = c->s.servers[0]; /* login and db */
        memcpy(cn->node.host, m.host, sizeof cn->node.host);
        cn->node.port = m.port;
        cn->srv = &cn->node;
        a->loc.m = m;
        a->loc.checking = 1;
        a->loc.go = 1;
        relock__a_conn_connect(cn);
    }
    relock__a_leave(a);
}

/* Asks the next sentinel; when each was asked, the connection's setup
 * fails with the search's error. */
void relock__a_loc_next(relock_async *a)
{
    relock_client *c = a->c;
    aconn *cn = &a->conns[0];
    cn->cstate = C_LOCATING;
    a->loc.checking = 0;
    while (relock__sentinel_next(&a->loc.q) >= 0) {
        const relock__addr *s = &c->s.sentinel.addrs[a->loc.q.cur];
        redisAsyncContext *ac = redisAsyncConnect(s->host, s->port);
        if (!ac || ac->err || relock__loop_attach(&a->loop, ac) != 0) {
            relock__sentinel_unreachable(&a->loc.q, &c->s,
                                         ac && ac->err ? ac->errstr : "cannot attach to the loop");
            if (ac)
                redisAsyncFree(ac);
            continue;
        }
        ac->data = a;
        a->loc.ac = ac;
        redisAsyncSetConnectCallback(ac, loc_on_connect);
        redisAsyncSetDisconnectCallback(ac, loc_on_disconnect);
        const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", c->s.sentinel.master};
        redisAsyncCommandArgv(ac, loc_on_reply, NULL, 3, argv, NULL);
        a->loc.timer = timer_start(a, relock__sentinel_timeout(c->s.connect_timeout_ms),
                                   loc_timeout_fire, a);
        return;
    }
    a->loc.active = 0;
    cn->cstate = C_DOWN;
    relock__err_clear(&c->err);
    relock__a_setup_done(cn, relock__sentinel_end(&a->loc.q, &c->s, &c->err));
}

/* Tears down cn's context when nothing is in flight on it (its setup
 * ended), without feeding anyone or reconnecting. */
void relock__a_conn_drop(aconn *cn)
{
    relock_async *a = cn->a;
    redisAsyncContext *ac = cn->ac;
    if (!ac)
        return;
    cn->ac = NULL;
    cn->cstate = C_DOWN;
    cn->connected = 0;
    cn->gen++;
    ac->data = NULL;
    timer_stop(a, &cn->conn_timer);
    timer_stop(a, &cn->tmo_timer);
    redisAsyncFree(ac);
}

/* The master the current sentinel named failed (st, c's error): the next
 * sentinel is asked. */
void relock__a_loc_bad_master(aconn *cn, relock_status st, const char *why)
{
    relock_async *a = cn->a;
    /* "connect to HOST:PORT: reason" within a longer message: the reason */
    const char *p = strstr(why, "connect to ");
    relock__sentinel_bad_master(&a->loc.q, &a->c->s, &a->loc.m, st,
                                relock__sentinel_reason(p ? p : why));
    relock__a_conn_drop(cn);
    relock__a_loc_next(a);
}
