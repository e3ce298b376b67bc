/*
 * The asynchronous client (relock_async.h): a second driver of the lock
 * engine's step machines, on hiredis's asynchronous context.
 *
 * One connection carries every operation, pipelined: a machine's batch is
 * formatted when the machine asks for it and written at once; its replies
 * come back in order and, once the batch is complete, feed the machine's
 * next step.  A second connection, opened only while someone waits,
 * carries release notices (SUBSCRIBE), one subscription per lock name.
 *
 * Transactions (design.md §13.3): a batch marked in_txn makes its operation the
 * owner of the connection; the other operations' batches wait until the
 * transaction ends (a command of theirs would be queued inside it), and a
 * connection lost meanwhile is never replaced under it: its next batch is
 * fed back as UNSENT.
 *
 * Faults: a connection that fails, or whose oldest batch gets no reply
 * within command_timeout_ms, is dropped; every batch in flight on it is fed
 * back as LOST (UNSENT when the connection never came up), and the machines
 * decide (EAMBIGUOUS where a write may have run, a read-back where they
 * have one).  The next batch connects afresh, logs in and probes again.
 *
 * Connections: a connection (aconn) is one server's hiredis context with
 * its setup, its requests in flight (areq, in the order the server
 * answers), the operations waiting for it and its timers; the client has
 * one per server in its settings, and on a Redis Cluster one per node met
 * (MOVED and ASK move a batch's unanswered rest there; see follow()).
 * With Sentinel the first connection goes to the master the sentinels
 * name, searched for before every connect (see loc_next()).
 *
 * The machines record errors on the client's error; operations interleave,
 * so each keeps its own and the driver moves it in and out around a step.
 *
 * Phases (next_phase): after an acquire or extend wrote, the same
 * operation runs durability's WAIT (pinned to the connection generation
 * the write went out on) and then the owner record's machine; a release
 * deletes the record first; an acquire whose write was not acknowledged
 * runs the release machine.  A machine that asks for the fleet's clock
 * when the estimate is due has its replies held while the clock machine's
 * TIME goes out first.  All of them are the blocking API's machines.
 */
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "../../compat/compat.h"
#include "../../compat/ts.h"
#include "core/loop.h"
#include "engine/engine.h"
#include "engine/waitplan.h"
#include "fence.h"
#include "api.h"
#include "algo.h"
#include "clock.h"
#include "durable.h"
#include "modern.h"
#include "ownrec.h"
#include "probe.h"
#include "quorum.h"
#include "relock_async.h"

/* ------------------------------------------------------------------ types */

enum op_kind { K_SETUP = 1, K_ACQ, K_REL, K_EXT, K_KEEP, K_UNDO, K_SLOTS };

enum op_state {
    S_NEW = 0,    /* started, first step not run */
    S_QUEUED,     /* a batch formatted, waiting for the connection */
    S_SENT,       /* a batch in flight */
    S_SUBSCRIBING, /* waiting for its release channel's subscription */
    S_SLEEP,      /* waiting between attempts */
    S_RUN,        /* its machine is being stepped */
    S_DONE
};

/* The machines of a mode. */
typedef struct mkit {
    size_t acq_size;
    relock_status (*acq_init)(void *m, relock_lock *l);
    relock__step_fn acq_step;
    size_t upd_size;
    relock_status (*upd_init)(void *m, relock_lock *l, int extend, long long ttl_ms);
    relock__step_fn upd_step;
    /* A quorum: the acquire and update machines are this fan machine,
     * run over a connection per server (the fan driver below). */
    relock__fan_fn fan;
} mkit;

typedef struct achan achan;
typedef struct aconn aconn;
typedef struct aop aop;

/* One request in flight: a batch written on a connection, its replies as
 * they come.  A connection's requests in flight form its FIFO, in the
 * order the server answers them. */
typedef struct areq {
    aop *op;             /* whose batch it is; NULL: owed, read and dropped */
    aconn *cn;           /* the connection it goes on */
    struct areq *fnext;  /* the connection's FIFO, oldest first */
    char *cmd[RELOCK__BATCH_CMDS];
    size_t len[RELOCK__BATCH_CMDS];
    int n; /* commands; kept until the batch is answered (a redirection sends some again) */
    /* The commands being sent: base..n-1, or with ask ASKING and cmd[base]
     * alone (a redirection answered the earlier ones' part: see follow()). */
    int base;
    int ask;
    int got; /* replies to the current sending */
    redisReply *rep[RELOCK__BATCH_CMDS];
    int nrep;
    int outstanding;
    int expect; /* replies its batch asks for */
    uint64_t sent_at;
    uint64_t start_off, end_off; /* its bytes in the connection's output */
    /* The server may hold the replies this much longer (a WAIT's own
     * timeout): the command timeout waits it out. */
    long long slow_ms;
} areq;

typedef struct afan afan;

/* What an operation's machine is doing: the operation's own machine
 * first, then those that follow a success (durability's WAIT, the owner
 * record), or that come before it (a release deletes the owner record
 * first), or that undo it (an acquire whose write was not acknowledged). */
enum op_phase { PH_MAIN = 0, PH_DURABLE, PH_OWNER, PH_UNDO };

struct aop {
    relock_async *a;
    aconn *cn;                /* the connection its batches go on */
    struct aop *prev, *next;  /* every live operation */
    struct aop *qnext;        /* its connection's queue: waiting to start or to send */
    struct aop *cprev, *cnext; /* waiters on a release channel */
    int kind;
    int state;
    relock_lock *l;
    int lock_gone; /* the program freed l meanwhile: free it at the end */
    relock_async_fn cb;
    void *arg;
    relock__step_fn fn;
    void *m;
    relock__err *err; /* this operation's error, when it has one */
    areq rq;          /* the batch */
    int in_txn;
    unsigned txn_gen;
    int steps;
    int sent_any; /* a batch of this attempt went out */
    int hops;       /* redirections followed for the current batch */
    int rerouted;   /* sent elsewhere once when its node could not be reached */
    aconn *redir;   /* where the batch goes next, when a redirection said */
    /* acquire */
    long long wait_ms;
    uint64_t deadline;
    uint64_t began; /* when it was asked: its acquired event's waited_ms */
    unsigned attempt;
    void *timer;
    achan *ch;
    int cancelled;
    int undoing;
    int fencing; /* running the fence carry before the first attempt */
    int sub_tries;    /* servers tried for its subscription */
    unsigned sub_gen; /* the subscriber connection it joined on */
    relock__probe_m probe; /* K_SETUP */
    afan *fan;             /* a fan machine's round, with a quorum */
    int due, in_start;     /* in the client's fan_due, starting list */
    struct aop *due_next, *start_next;
    int phase;     /* enum op_phase */
    int pinned;    /* its batch must go on the connection of the write */
    /* The connection generation the main machine's batches went out on
     * (wset once one did; wmoved when they went on more than one): the
     * WAIT after the write must go on the same. */
    unsigned wgen;
    int wset, wmoved;
    int acked; /* replicas that acknowledged the write; -1: no WAIT sent */
    /* extend: the validity before, the bound on it when the replicas did
     * not acknowledge the new one (decision 104) */
    uint64_t was_valid;
    long long was_ttl;
    int owner_gone; /* release: the owner record was deleted first */
    relock__err *kept; /* the undone acquire's error, during PH_UNDO */
    relock_status kept_st;
    /* legacy.clock = "server": the clock machine runs inside the main
     * one's step, whose replies wait in held meanwhile */
    int clocking;
    relock__clock_m clk;
    int clock_fresh; /* the clock was measured for the next feed */
    redisReply *held[RELOCK__BATCH_CMDS];
    int nheld;
};

struct achan {
    achan *next;
    aop *waiters;
    int confirmed;
    size_t len;
    char name[];
};

/* Per lock (relock_lock.al): its operation in flight and its renewal. */
struct relock__alock {
    relock_async *a;
    struct relock__alock *prev, *next; /* the client's locks */
    aop *busy;
    aop *after; /* a release started while a renewal was in flight */
    int kept;
    void *keep_timer;
    relock_async_lost_fn on_lost;
    void *lost_arg;
    int keep_lost;
    uint64_t keep_valid; /* validity as of the last renewal */
    /* The loss deadline: fires at keep_valid, when no renewal succeeded
     * by then, whatever the one in flight is waiting for. */
    void *lost_timer;
    /* the last failed renewal's outcome, reported if the deadline comes
     * first (RELOCK_OK: none failed since the last success) */
    relock_status fail_st;
    relock__err fail_err;
};

/* Connections a client may have at once: its server's, and Cluster nodes'
 * met through redirections; beyond, an idle one is reused (node_conn). */
#define ACONN_NODES 16

enum conn_state { C_DOWN = 0, C_CONNECTING, C_SETUP, C_READY, C_LOCATING };

/* One connection to one server: the hiredis context, its setup (login and
 * probe), its requests in flight, the operations waiting for it, its
 * timers.  A client has one per server it talks to (conns[i] for
 * c->s.servers[i]); conn_find() looks one up by address. */
struct aconn {
    relock_async *a;
    int idx;                   /* its index in a->conns */
    const relock__server *srv; /* where it connects */
    relock__server node; /* srv for an address no setting names: a Cluster node, or
                            the master the sentinels named (servers[0]'s login and db) */
    redisAsyncContext *ac;
    int cstate;
    int connected; /* TCP up: a batch sent may have reached the server */
    unsigned gen;  /* counts the contexts it had: a transaction's must not change */
    void *conn_timer;
    void *tmo_timer;
    /* A connect that failed at once (a name that does not resolve, the
     * loop refusing the context): its failure is reported from the loop
     * (connect_failed), never from within the call that started an
     * operation, whose callback must not run there. */
    char fail_why[300];
    void *kick_timer;
    aop setup;
    relock_lock probe_l; /* the lock the probe machine runs on */
    aop *txn_owner;
    areq *fifo, *fifo_tail; /* requests in flight, oldest first */
    aop *queue, *queue_tail; /* operations waiting for it */
    /* Operations taken from the queue and being walked (walk_take): a
     * callback run by the walk may cancel one of them, which then leaves
     * this list as it would leave the queue. */
    aop *walk, *walk_tail;
    /* a quorum's connection (no probe; its setup pipelined ahead) */
    uint64_t appended;  /* bytes given to hiredis on this context */
    uint64_t retry_at;  /* dropped for lateness: not reconnected before this */
    long long late_ms;  /* the last round timeout of a request sent on it */
    /* legacy.clock = "server": this server's clock (a Cluster node's own,
     * as the blocking client keeps one per node's connection) */
    relock__clock_est clock;
    /* What this server's probe learned (version, capabilities; probed:
     * set once it ran): the facts an operation's machine reads while it
     * runs on this connection.  A Cluster's nodes need not be alike (a
     * rolling upgrade): one node's DELIFEQ or EVAL is not another's. */
    int probed;
    char version[32];
    int major, minor, patch;
    unsigned caps;
};

struct relock_async {
    relock_client *c; /* settings, server facts, scripts: what machines read */
    relock_async_loop loop;
    relock__err err;
    const mkit *kit;
    relock_status fatal; /* the probe or the mode failed: every operation fails */
    relock__err fatal_err;
    int probed;
    /* the connections, one per server; with Cluster one per node met,
     * added up to ncap (a connection never moves: operations point at it) */
    aconn *conns;
    int nconns;
    int ncap;
    /* Cluster: the slot map (1 + the index of the master's connection; 0
     * unknown), made at the first MOVED; home: where an operation whose
     * slot is unknown goes */
    uint8_t *slots;
    aconn *home;
    aop slots_rd;     /* CLUSTER SLOTS in flight (K_SLOTS), when state is S_SENT */
    uint64_t slots_at; /* when it was last sent */
    int slots_stale;  /* a master could not be reached: read the map again */
    /* Sentinel: the search for the master (conns[0] connects there) */
    struct {
        relock__sentinel_search q;
        redisAsyncContext *ac; /* the sentinel being asked */
        void *timer;
        relock__addr m; /* the master it named */
        int active;     /* a search is under way */
        int checking;   /* connecting to m and checking its role */
        int go;         /* conn_connect: connect to m now */
    } loc;
    /* every live operation, every lock */
    aop *ops;
    struct relock__alock *alocks;
    long pending;
    /* release notices */
    redisAsyncContext *sub;
    int sub_up;
    int sub_at, sub_from; /* its server; where the next one starts looking */
    unsigned sub_gen;     /* counts the subscriber connections */
    achan *chans;
    /* counts the times the channels were freed (sub_drop, chan_free_all):
     * a walk of a channel's waiters stops when it changes under it */
    unsigned chans_gen;
    int nwaiting;
    /* the batch a machine fills */
    relock__batch batch;
    relock__fanout *fanout; /* what a fan machine fills, with a quorum */
    /* A quorum's new operations start together from one timer (starting);
     * the rounds they open meanwhile (batching) wait for their first feed
     * (fan_due) until every connection was flushed once (fan_due_run). */
    void *start_timer;
    aop *starting, *starting_tail;
    int batching;
    aop *fan_due, *fan_due_tail;
    /* freeing */
    int depth;
    int freeing;
};

static void op_start(aop *op);
static void fan_undue(aop *op);
static void op_feed(aop *op, relock__fault fault, relock_status fst, const char *ftext);
static int follow(aop *op);
static aconn *route(relock_async *a, const char *key);
static void fan_reply(aop *op, areq *rq);
static void fan_gone(aop *op, areq *rq, relock__fault fault, relock_status st, const char *text);
static void fan_begin(aop *op);
static void fan_end(aop *op);
static void conn_connect(aconn *cn);
static void queue_push(aconn *cn, aop *op);
static void kick_fire(void *arg);
static void submit(aop *op);

/* Singly linked lists with a tail, their push and remove written once
 * for each: a connection's requests in flight (areq, by fnext) and the
 * operations waiting for it (aop, by qnext); the quorum operations about
 * to start together (start_next) and those whose first round waits for the
 * shared flush (due_next). */
#define SLIST_FNS(name, type, link)                                                    \
    static void name##_push_(type **head, type **tail, type *n)                        \
    {                                                                                  \
        n->link = NULL;                                                                \
        if (*tail)                                                                     \
            (*tail)->link = n;                                                         \
        else                                                                           \
            *head = n;                                                                 \
        *tail = n;                                                                     \
    }                                                                                  \
    static void name##_remove_(type **head, type **tail, type *n)                      \
    {                                                                                  \
        type *prev = NULL;                                                             \
        for (type *p = *head; p; prev = p, p = p->link)                                \
            if (p == n) {                                                              \
                if (prev)                                                              \
                    prev->link = p->link;                                              \
                else                                                                   \
                    *head = p->link;                                                   \
                if (*tail == p)                                                        \
                    *tail = prev;                                                      \
                p->link = NULL;                                                        \
                return;                                                                \
            }                                                                          \
    }
SLIST_FNS(fifo, areq, fnext)
SLIST_FNS(queue, aop, qnext)
SLIST_FNS(walk, aop, qnext) /* an operation is in its connection's queue or walk, never both */
SLIST_FNS(start, aop, start_next)
SLIST_FNS(due, aop, due_next)

/* ------------------------------------------------------------------ helpers */

static uint64_t now_ms(void)
{
    return relock__mono_ms();
}

static void *timer_start(relock_async *a, long long ms, void (*fn)(void *), void *arg)
{
    return a->loop.timer_start(a->loop.data, ms < 0 ? 0 : ms, fn, arg);
}

static void timer_stop(relock_async *a, void **t)
{
    if (*t) {
        a->loop.timer_stop(a->loop.data, *t);
        *t = NULL;
    }
}

static void really_free(relock_async *a);

/* Why a connect under way failed, when the loop's adapter did not tell
 * (hiredis's libuv adapter drops a poll error, so a refused connect shows
 * only as a timeout): the socket's pending error, or NULL. */
static const char *sock_error(const redisAsyncContext *ac)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (ac && ac->c.fd >= 0 && getsockopt(ac->c.fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err)
        return strerror(err);
    return NULL;
}

static void enter(relock_async *a)
{
    a->depth++;
}

static void leave(relock_async *a)
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
        if (!c->str) {
            free(c);
            return NULL;
        }
        memcpy(c->str, r->str, r->len);
        c->str[r->len] = '\0';
        c->len = r->len;
    }
    if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 && depth < 16) {
        c->element = calloc(r->elements, sizeof *c->element);
        if (!c->element) {
            freeReplyObject(c);
            return NULL;
        }
        c->elements = r->elements;
        for (size_t i = 0; i < r->elements; i++) {
            c->element[i] = reply_copy(r->element[i], depth + 1);
            if (!c->element[i]) {
                freeReplyObject(c);
                return NULL;
            }
        }
    }
    return c;
}

/* Frees a request's commands and the replies it holds. */
static void rq_clear(areq *rq)
{
    for (int i = 0; i < rq->n; i++) {
        free(rq->cmd[i]);
        rq->cmd[i] = NULL;
    }
    rq->n = 0;
    rq->base = rq->ask = 0;
    for (int i = 0; i < rq->nrep; i++)
        if (rq->rep[i]) {
            freeReplyObject(rq->rep[i]);
            rq->rep[i] = NULL;
        }
    rq->nrep = 0;
}

static void batch_clear(aop *op)
{
    rq_clear(&op->rq);
}

/* Frees a request's commands (answered: the next batch comes). */
static void rq_cmds_free(areq *rq)
{
    for (int i = 0; i < rq->n; i++) {
        free(rq->cmd[i]);
        rq->cmd[i] = NULL;
    }
    rq->n = 0;
    rq->base = rq->ask = 0;
}

/* ------------------------------------------------------------------ machines of each mode */

/* The driver draws the randomness (engine conventions). */
static relock_status ts_acq_init(void *m, relock_lock *l)
{
    relock__ts_acquire_init(m);
    return relock__bridge_suffix(l, "acquire", l->value);
}

static relock_status ts_upd_init(void *m, relock_lock *l, int extend, long long ttl_ms)
{
    char tok[33];
    if (extend) {
        relock_status st = relock__bridge_suffix(l, "extend", tok);
        if (st != RELOCK_OK)
            return st;
    }
    relock__ts_update_init(m, extend, ttl_ms, extend ? tok : NULL);
    return RELOCK_OK;
}

static const mkit kit_ts = {
    sizeof(relock__ts_acquire), ts_acq_init, relock__ts_acquire_step,
    sizeof(relock__ts_update),  ts_upd_init, relock__ts_update_step, NULL,
};

static relock_status modern_acq_init(void *m, relock_lock *l)
{
    relock_status st = relock__token_for(&l->c->err, "acquire", l->name, l->value);
    if (st != RELOCK_OK)
        return st;
    relock__modern_acq_init(m);
    ((relock__modern_acq *)m)->h.hint_ms = -1;
    return RELOCK_OK;
}

static relock_status modern_cx_init(void *m, relock_lock *l, int extend, long long ttl_ms)
{
    (void)l;
    relock__modern_cx_init(m, extend, ttl_ms);
    return RELOCK_OK;
}

static const mkit kit_modern = {
    sizeof(relock__modern_acq), modern_acq_init, relock__modern_acq_step,
    sizeof(relock__modern_cx),  modern_cx_init,  relock__modern_cx_step, NULL,
};

/* A quorum: one fan machine for every operation (quorum.c). */
static relock_status quorum_acq_init(void *m, relock_lock *l)
{
    relock_status st = relock__token_for(&l->c->err, "acquire", l->name, l->value);
    if (st != RELOCK_OK)
        return st;
    relock__quorum_init(m, RELOCK__Q_ACQUIRE, l->ttl_ms);
    return RELOCK_OK;
}

static relock_status quorum_upd_init(void *m, relock_lock *l, int extend, long long ttl_ms)
{
    relock__quorum_init(m, extend ? RELOCK__Q_EXTEND : RELOCK__Q_RELEASE,
                        extend ? ttl_ms : l->ttl_ms);
    return RELOCK_OK;
}

static const mkit kit_quorum = {
    sizeof(relock__quorum_m), quorum_acq_init, NULL,
    sizeof(relock__quorum_m), quorum_upd_init, NULL, relock__quorum_step,
};

static const mkit *kit_for(relock_mode m)
{
    switch (m) {
    case RELOCK_MODE_LEGACY:
    case RELOCK_MODE_BRIDGE:
        return &kit_ts;
    case RELOCK_MODE_MODERN:
        return &kit_modern;
    default:
        return NULL;
    }
}

/* The fence carry of a whole-tag key, run before the first attempt. */
typedef struct fence_wrap {
    relock__fence_carry_m m;
    char before[RELOCK__KEY_MAX];
} fence_wrap;

/* ------------------------------------------------------------------ errors */

static void err_save(aop *op)
{
    relock_client *c = op->a->c;
    if (c->err.pub.status == RELOCK_OK)
        return;
    if (!op->err)
        op->err = malloc(sizeof *op->err);
    if (!op->err)
        return;
    relock__err_copy(op->err, &c->err);
}

static void err_load(aop *op)
{
    relock_client *c = op->a->c;
    if (op->err)
        relock__err_copy(&c->err, op->err);
    else
        relock__err_clear(&c->err);
}

/* Records st with a message as the operation's outcome. */
static relock_status op_fail(aop *op, relock_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static relock_status op_fail(aop *op, relock_status st, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* the operation's outcome: it replaces what an earlier step said */
    relock__err_clear(&op->a->c->err);
    RELOCK__FAIL(&op->a->c->err, st, "%s", msg);
    err_save(op);
    return st;
}

/* ------------------------------------------------------------------ completing */

static void chan_leave(aop *op);
static void lock_op_end(aop *op);
static void alock_free(relock_lock *l);
static void keep_after(relock_async *a, relock_lock *l, relock_status st, const relock_error *e);

static void op_unlink(aop *op)
{
    relock_async *a = op->a;
    if (op->prev)
        op->prev->next = op->next;
    else
        a->ops = op->next;
    if (op->next)
        op->next->prev = op->prev;
    op->prev = op->next = NULL;
    a->pending--;
}

static void op_release(aop *op)
{
    fan_end(op);
    free(op->fan);
    batch_clear(op);
    for (int i = 0; i < op->nheld; i++)
        if (op->held[i])
            freeReplyObject(op->held[i]);
    free(op->kept);
    free(op->m);
    free(op->err);
    free(op);
}

/* The operation ends with st: its callback is called, once. */
static void op_finish(aop *op, relock_status st)
{
    relock_async *a = op->a;
    timer_stop(a, &op->timer);
    chan_leave(op);
    if (op->cn && op->cn->txn_owner == op)
        op->cn->txn_owner = NULL;
    op->state = S_DONE;
    op_unlink(op);
    fan_undue(op);
    if (op->in_start) {
        /* (cancelled, or the client freed, before it started) */
        start_remove_(&a->starting, &a->starting_tail, op);
        op->in_start = 0;
    }
    relock_lock *l = op->l;
    if (op->kind == K_ACQ && st != RELOCK_OK && l) {
        alock_free(l);
        relock_lock_free(l);
        l = NULL;
        op->l = NULL;
    }
    /* The events of relock_acquire() and relock_release(), at the same
     * points: the lock won, the lock released; told from the loop before
     * the callback, while l lives (lock_op_end frees one the program
     * freed meanwhile). */
    if (l && st == RELOCK_OK && op->kind == K_ACQ) {
        l->acquired_at = now_ms();
        relock__event(a->c, RELOCK_EVENT_ACQUIRED, l, RELOCK_OK,
                      (long long)(l->acquired_at - op->began));
    } else if (l && st == RELOCK_OK && op->kind == K_REL) {
        relock__event(a->c, RELOCK_EVENT_RELEASED, l, RELOCK_OK, 0);
    }
    if (l)
        lock_op_end(op);
    if (op->lock_gone)
        l = NULL;
    relock_error e;
    relock__err blank;
    if (st == RELOCK_OK || !op->err) {
        relock__err_clear(&blank);
        if (st != RELOCK_OK)
            relock__err_set(&blank, st, __FILE__, __LINE__, NULL, "%s", relock_strerror(st));
        e = blank.pub;
    } else {
        op->err->pub.status = st;
        e = op->err->pub;
    }
    if (op->kind == K_ACQ || op->kind == K_EXT)
        a->c->replicas_acked = op->acked; /* relock_async_replicas_acked() */
    if (op->kind == K_KEEP) {
        /* A renewal reports through its lock, however it ended: its
         * machine's outcome, or a connect, setup or client error before it
         * ran (keep_after; e points into op, freed after). */
        if (l && !a->freeing)
            keep_after(a, l, st, &e);
        op_release(op);
        return;
    }
    if (op->cb)
        op->cb(a, st, l, &e, op->arg);
    op_release(op);
}

/* ------------------------------------------------------------------ locks */

static int async_lock_free(relock_lock *l);

static struct relock__alock *alock(relock_async *a, relock_lock *l)
{
    if (!l->al) {
        l->al = calloc(1, sizeof *l->al);
        if (l->al) {
            l->al_free = async_lock_free;
            l->al->a = a;
            l->al->next = a->alocks;
            if (a->alocks)
                a->alocks->prev = l->al;
            a->alocks = l->al;
        }
    }
    return l->al;
}

static void keep_arm(struct relock__alock *al, relock_lock *l);
static void op_schedule(aop *op);

static void alock_free(relock_lock *l)
{
    struct relock__alock *al = l->al;
    if (!al)
        return;
    if (al->a) {
        if (al->prev)
            al->prev->next = al->next;
        else
            al->a->alocks = al->next;
        if (al->next)
            al->next->prev = al->prev;
    }
    free(al);
    l->al = NULL;
}

/* relock_lock_free() of such a lock (its al_free): stops its renewal; 1
 * when an operation on it is in flight, which then frees it when it ends. */
static int async_lock_free(relock_lock *l)
{
    struct relock__alock *al = l->al;
    if (al->a) {
        timer_stop(al->a, &al->keep_timer);
        timer_stop(al->a, &al->lost_timer);
        al->kept = 0;
        if (al->after) {
            al->after->lock_gone = 1;
            al->after->l = l;
        }
        if (al->busy) {
            al->busy->lock_gone = 1;
            return 1;
        }
    }
    alock_free(l);
    return 0;
}

static void keep_tick(void *arg);

/* An operation on l ended: the next one on it may start; a lock the
 * program freed meanwhile is freed now. */
static void lock_op_end(aop *op)
{
    relock_lock *l = op->l;
    struct relock__alock *al = l->al;
    if (!al)
        return;
    if (al->after == op) {
        /* The release waiting for the renewal in flight ends before it
         * (the client is being freed): the renewal's end, which frees a
         * lock the program freed meanwhile, finds no release to start. */
        al->after = NULL;
        return;
    }
    if (al->busy == op)
        al->busy = NULL;
    if (op->lock_gone) {
        aop *after = al->after;
        al->after = NULL;
        if (after && !op->a->freeing) {
            /* The release asked for before the program freed the lock
             * runs now, as one in flight when it was freed does: the lock
             * goes when it ends (its lock_gone), its callback gets NULL. */
            al->busy = after;
            op_schedule(after);
            return;
        }
        if (after) /* the client is being freed: it ends unsent */
            after->l = NULL;
        alock_free(l);
        relock_lock_free(l);
        if (after)
            op_finish(after, RELOCK_ECANCELED);
        return;
    }
    if (al->after && !op->a->freeing) {
        /* the release that waited for a renewal in flight starts now */
        aop *next = al->after;
        al->after = NULL;
        al->busy = next;
        op_schedule(next);
    }
}

/* ------------------------------------------------------------------ the connection */

static void fifo_push(aconn *cn, areq *rq)
{
    fifo_push_(&cn->fifo, &cn->fifo_tail, rq);
}

static void fifo_remove(aconn *cn, areq *rq)
{
    fifo_remove_(&cn->fifo, &cn->fifo_tail, rq);
}

static void queue_push(aconn *cn, aop *op)
{
    queue_push_(&cn->queue, &cn->queue_tail, op);
}

static void queue_remove(aconn *cn, aop *op)
{
    queue_remove_(&cn->queue, &cn->queue_tail, op);
    walk_remove_(&cn->walk, &cn->walk_tail, op);
}

/* The queue's operations join those being walked, and the next to walk
 * is taken out, or NULL.  The walks of the queue (queue_flush,
 * setup_done) run callbacks, which may cancel, release or free what is
 * still to walk: each operation is taken out only when its turn comes,
 * so one cancelled meanwhile (queue_remove) is never sent nor fed.  Those
 * queued again during the walk wait in the queue for the next one; a walk
 * started within a walk of the same connection goes on with the outer's
 * rest. */
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
    if (!q)
        return NULL;
    cn->walk = q->qnext;
    if (!cn->walk)
        cn->walk_tail = NULL;
    q->qnext = NULL;
    return q;
}

static void kick_fire(void *arg);

/* op waits for cn: queued, and the connection opened or kicked. */
static void conn_wants(aconn *cn, aop *op)
{
    queue_push(cn, op);
    if (cn->cstate == C_DOWN)
        conn_connect(cn);
    else if (cn->cstate == C_READY && !cn->kick_timer)
        cn->kick_timer = timer_start(cn->a, 0, kick_fire, cn);
}

/* The connection to host:port (a Unix socket: port 0), or NULL; for
 * redirections to a server by its address. */
static aconn *conn_find(relock_async *a, const char *host, int port)
{
    for (int i = 0; i < a->nconns; i++)
        if (a->conns[i].srv->port == port && strcmp(a->conns[i].srv->host, host) == 0)
            return &a->conns[i];
    return NULL;
}

/* Sends or starts what waits in the queue, in order. */
static void queue_flush(aconn *cn)
{
    relock_async *a = cn->a;
    walk_take(cn);
    while (!a->freeing && cn->walk) {
        aop *q = walk_next(cn);
        if (q->state == S_NEW)
            op_start(q);
        else
            submit(q);
    }
}

/* The connection is gone (failed, timed out, dropped by us): every batch in
 * flight on it is fed back as a fault.  hiredis_frees: hiredis is freeing
 * the context itself. */
static void conn_gone(aconn *cn, int hiredis_frees, relock_status st, const char *why)
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
            rq_clear(f);
            free(f);
        } else if (f != &f->op->rq) { /* a fan machine's */
            fan_gone(f->op, f,
                     was_connected && wrote > f->start_off ? RELOCK__FAULT_LOST
                                                           : RELOCK__FAULT_UNSENT,
                     st, text);
        } else {
            op_feed(f->op, was_connected ? RELOCK__FAULT_LOST : RELOCK__FAULT_UNSENT, st, text);
        }
        f = next;
    }
    /* Operations that wait for the connection try again. */
    if (cn->queue && !a->freeing && cn->cstate == C_DOWN)
        conn_connect(cn);
}

static void on_reply(redisAsyncContext *ac, void *r, void *priv)
{
    aconn *cn = ac->data;
    if (!cn)
        return;
    relock_async *a = cn->a;
    if (a->freeing)
        return;
    areq *rq = priv;
    aop *op = rq->op;
    enter(a);
    if (!r) {
        char why[200];
        snprintf(why, sizeof why, "%s", ac->errstr[0] ? ac->errstr : "connection lost");
        conn_gone(cn, 1, RELOCK_EIO, why);
    } else if (!op || rq != &op->rq) {
        /* a quorum's request: owed (dropped) or read by its fan machine */
        if (op && rq->nrep < RELOCK__BATCH_CMDS)
            rq->rep[rq->nrep++] = reply_copy(r, 0);
        if (--rq->outstanding == 0) {
            fifo_remove(cn, rq);
            if (op) {
                fan_reply(op, rq);
            } else {
                rq_clear(rq);
                free(rq);
            }
        }
    } else if (op->state == S_SENT) {
        /* with ask, the first reply is ASKING's, and goes */
        if (!(rq->ask && rq->got == 0)) {
            rq->rep[rq->nrep] = reply_copy(r, 0);
            rq->nrep++;
        }
        rq->got++;
        if (--rq->outstanding == 0) {
            /* The requests behind a slow one (WAIT) waited for it: their
             * command timeout counts from now. */
            if (rq->slow_ms > 0 && cn->fifo == rq && rq->fnext) {
                uint64_t now = now_ms();
                if (rq->fnext->sent_at < now)
                    rq->fnext->sent_at = now;
            }
            fifo_remove(cn, rq);
            int missing = 0;
            for (int i = 0; i < rq->nrep; i++)
                if (!rq->rep[i])
                    missing = 1;
            if (missing)
                op_feed(op, RELOCK__FAULT_LOST, RELOCK_ENOMEM, "out of memory for a reply");
            else if (op->kind == K_SETUP || op->kind == K_SLOTS || !follow(op))
                op_feed(op, RELOCK__FAULT_NONE, RELOCK_OK, NULL);
        }
    }
    leave(a);
}

static void tmo_fire(void *arg)
{
    aconn *cn = arg;
    relock_async *a = cn->a;
    cn->tmo_timer = NULL;
    enter(a);
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
            conn_gone(cn, 0, RELOCK_EIO, why);
        } else {
            cn->tmo_timer = timer_start(a, (long)(due - now), tmo_fire, cn);
        }
    }
    leave(a);
}

/* Writes the request's commands on its connection. */
static void rq_send(areq *rq)
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
    fifo_push(cn, rq);
    if (rq->ask) {
        static const char asking[] = "*1\r\n$6\r\nASKING\r\n";
        rq->outstanding = 2;
        cn->appended += sizeof asking - 1 + rq->len[rq->base];
        rq->end_off = cn->appended;
        redisAsyncFormattedCommand(cn->ac, on_reply, rq, asking, sizeof asking - 1);
        redisAsyncFormattedCommand(cn->ac, on_reply, rq, rq->cmd[rq->base], rq->len[rq->base]);
    } else {
        rq->outstanding = rq->n - rq->base;
        for (int i = rq->base; i < rq->n; i++) {
            cn->appended += rq->len[i];
            rq->end_off = cn->appended;
            redisAsyncFormattedCommand(cn->ac, on_reply, rq, rq->cmd[i], rq->len[i]);
            if (fan) {
                free(rq->cmd[i]);
                rq->cmd[i] = NULL;
            }
        }
    }
    if (!cn->tmo_timer)
        cn->tmo_timer = timer_start(a, a->c->s.command_timeout_ms, tmo_fire, cn);
}

/* Writes op's batch on its connection. */
static void send_now(aop *op)
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
    rq_send(&op->rq);
}

/* Sends op's batch when the connection allows, else queues it. */
static void submit(aop *op)
{
    aconn *cn = op->cn;
    if (op->pinned && (!op->wset || op->wmoved || cn->gen != op->wgen || cn->cstate != C_READY)) {
        /* The write's connection is gone: WAIT on another would count
         * nothing of the write (durable.c). */
        rq_clear(&op->rq);
        op_feed(op, RELOCK__FAULT_UNSENT, RELOCK_EDURABILITY,
                "the connection changed since the write");
        return;
    }
    if (op->redir) {
        /* the rest of a redirected batch (never inside a transaction) */
        aconn *to = op->redir;
        if (to->cstate != C_READY || to->txn_owner) {
            op->state = S_QUEUED;
            queue_push(to, op);
            if (to->cstate == C_DOWN)
                conn_connect(to);
            return;
        }
        /* A write that went on to another node: a WAIT after it could not
         * count it on the connection it started on (as the blocking
         * client, whose write mark is the connection it began on).  After
         * TRYAGAIN it goes again on the same one, where WAIT counts it (a
         * new context there fails the pinned check by its generation). */
        if (op->phase == PH_MAIN && !op->fencing && !op->undoing && to != op->rq.cn)
            op->wmoved = 1;
        op->redir = NULL;
        op->state = S_SENT;
        op->rq.op = op;
        op->rq.cn = to;
        rq_send(&op->rq);
        return;
    }
    if (cn->txn_owner == op) {
        if (cn->gen != op->txn_gen || cn->cstate != C_READY) {
            /* The transaction's connection is gone: never replaced under it. */
            op_feed(op, RELOCK__FAULT_UNSENT, RELOCK_EIO,
                    "the connection of a transaction was lost before its end");
            return;
        }
        send_now(op);
        return;
    }
    if (op->kind != K_SETUP && (cn->cstate != C_READY || cn->txn_owner)) {
        op->state = S_QUEUED;
        queue_push(cn, op);
        if (cn->cstate == C_DOWN)
            conn_connect(cn);
        return;
    }
    if (op->in_txn) {
        cn->txn_owner = op;
        op->txn_gen = cn->gen;
    }
    send_now(op);
}

/* ------------------------------------------------------------------ Cluster and Sentinel replies
 *
 * What a reply asks of the client is decided by the blocking client's
 * rules (relock__route_reply, src/cluster.c): MOVED sends the command and
 * the batch's later ones again to the node named, which serves the slot
 * from then on (the slot map); ASK sends ASKING and the command once to
 * the node named, the later ones going on as before; TRYAGAIN sends them
 * again to the same node a moment later; too many redirections, and
 * Sentinel's READONLY (the connection is then dropped: the next batch asks
 * the sentinels again), end the batch as unsent with the blocking client's
 * message.  Inside a transaction nothing is followed. */

/* Cluster's slot map is on: one server, no Sentinel, cluster.slot_map. */
static int map_on(const relock_async *a)
{
    const relock__settings *s = &a->c->s;
    return s->cluster.slot_map && s->nservers <= 1 && !relock__sentinel_on(s);
}

static void map_forget(aconn *cn);
static void conn_drop(aconn *cn);

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
        conn_drop(pick);
        /* node_conn() clears the struct: a kick left from an operation
         * cancelled in its queue would be lost to really_free() */
        timer_stop(a, &pick->kick_timer);
        map_forget(pick);
        batch_clear(&pick->setup);
        memset(&pick->node, 0, sizeof pick->node); /* the password */
    }
    return pick;
}

/* The connection to the Cluster node host:port, added when new (with
 * servers[0]'s login and db); NULL when ncap are in use and busy. */
static aconn *node_conn(relock_async *a, const char *host, int port)
{
    aconn *cn = conn_find(a, host, port);
    if (cn || strlen(host) >= sizeof cn->node.host)
        return cn;
    if (a->nconns < a->ncap)
        cn = &a->conns[a->nconns++];
    else if (!(cn = node_idle(a)))
        return NULL;
    int idx = (int)(cn - a->conns);
    memset(cn, 0, sizeof *cn);
    cn->a = a;
    cn->idx = idx;
    cn->node = a->c->s.servers[0];
    snprintf(cn->node.host, sizeof cn->node.host, "%s", host);
    cn->node.port = port;
    cn->srv = &cn->node;
    return cn;
}

/* The connection an operation on key starts on: its slot's master when
 * the map knows it, else home. */
static aconn *route(relock_async *a, const char *key)
{
    if (a->slots && key) {
        int idx = a->slots[relock__cluster_slot(key, strlen(key))];
        if (idx)
            return &a->conns[idx - 1];
    }
    return a->home ? a->home : &a->conns[0];
}

/* A node that could not be reached leaves the map (a failover may have
 * moved its slots): its slots' operations go home, whose MOVED tells. */
static void map_forget(aconn *cn)
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
    aconn *cn = conn_find(a, host, port);
    if (!cn && a->nconns < a->ncap)
        cn = node_conn(a, host, port);
    if (cn)
        memset(&a->slots[from], cn->idx + 1, (size_t)(to - from + 1));
}

/* After a MOVED from at: the whole map is read from it (CLUSTER SLOTS)
 * the first time, and again at most once a second, or after a master
 * could not be reached, as the blocking client reads it; only when at is
 * ready and in no transaction (the request shares the connection), and
 * one at a time.  The MOVED's own slot is recorded already. */
static void slots_read(aconn *at)
{
    relock_async *a = at->a;
    aop *rd = &a->slots_rd;
    uint64_t now = now_ms();
    if (rd->state == S_SENT || !a->slots || at->cstate != C_READY || at->txn_owner ||
        (a->slots_at && !a->slots_stale && now - a->slots_at < 1000))
        return;
    batch_clear(rd);
    memset(rd, 0, sizeof *rd);
    rd->a = a;
    rd->cn = at;
    rd->kind = K_SLOTS;
    const char *argv[2] = {"CLUSTER", "SLOTS"};
    size_t len[2] = {7, 5};
    int fl = redisFormatCommandArgv(&rd->rq.cmd[0], 2, argv, len);
    if (fl < 0)
        return;
    rd->rq.len[0] = (size_t)fl;
    rd->rq.n = 1;
    a->slots_at = now;
    send_now(rd);
}

/* The reply to CLUSTER SLOTS (or the fault that ended it). */
static void slots_done(aop *rd, relock__fault fault)
{
    relock_async *a = rd->a;
    areq *rq = &rd->rq;
    rd->state = S_DONE;
    if (fault == RELOCK__FAULT_NONE && rq->nrep == 1 && a->slots &&
        rq->rep[0]->type == REDIS_REPLY_ARRAY) {
        memset(a->slots, 0, RELOCK__CLUSTER_NSLOTS);
        relock__cluster_slots_parse(rq->rep[0], rq->cn->srv->host, map_range, a);
        a->slots_stale = 0;
    }
    batch_clear(rd);
}

static void redir_fire(void *arg)
{
    aop *op = arg;
    relock_async *a = op->a;
    op->timer = NULL;
    enter(a);
    submit(op);
    leave(a);
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
static int follow(aop *op)
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
        if (act == RELOCK__ROUTE_READONLY || act == RELOCK__ROUTE_TOO_MANY) {
            if (act == RELOCK__ROUTE_READONLY && at->ac)
                conn_gone(at, 0, RELOCK_EIO, e.msg);
            op_feed(op, RELOCK__FAULT_UNSENT, RELOCK_EIO, e.msg);
            return 1;
        }
        aconn *next = at;
        if (act != RELOCK__ROUTE_TRYAGAIN) {
            op->redir = at; /* at is in use: node_conn must not reuse it */
            next = node_conn(a, to.host, to.port);
            op->redir = NULL;
            if (!next) {
                snprintf(e.msg, sizeof e.msg,
                         "%s: redirected to %s:%d, but the client's %d connections to "
                         "Cluster nodes are all in use",
                         name, to.host, to.port, a->ncap);
                op_feed(op, RELOCK__FAULT_UNSENT, RELOCK_EIO, e.msg);
                return 1;
            }
        }
        if (act == RELOCK__ROUTE_MOVED) {
            c->moved++;
            if (map_on(a)) {
                if (!a->slots)
                    a->slots = calloc(RELOCK__CLUSTER_NSLOTS, 1);
                if (a->slots)
                    a->slots[to.slot] = (uint8_t)(next->idx + 1);
                slots_read(at);
            } else {
                a->home = next; /* the one connection moves, as without a map */
            }
            op->cn = next;
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
        submit(op);
        return 1;
    }
    if (rq->ask && rq->base + 1 < rq->n) {
        /* the ASKed command was answered: the later ones go on as before */
        rq->base++;
        rq->ask = 0;
        op->redir = op->cn;
        submit(op);
        return 1;
    }
    return 0;
}

static void setup_done(aconn *cn, relock_status st);

/* A "not now" error reply (relock__reply_transient) to a connection's
 * setup fails what waits for it, as a lost connection does, and the next
 * operation connects again; it never makes the client unusable. */
static int transient_reply(const char *text)
{
    return relock__reply_transient(text);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    aconn *cn = ac->data;
    if (!cn)
        return;
    relock_async *a = cn->a;
    enter(a);
    if (status == REDIS_OK) {
        cn->connected = 1;
        timer_stop(a, &cn->conn_timer);
    } else {
        char why[300];
        snprintf(why, sizeof why, "connect to " RELOCK__ADDR_FMT ": %s", RELOCK__ADDR(cn->srv),
                 ac->errstr[0] ? ac->errstr : "failed");
        map_forget(cn);
        conn_gone(cn, 1, RELOCK_EIO, why);
    }
    leave(a);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    (void)status;
    aconn *cn = ac->data;
    if (!cn)
        return;
    relock_async *a = cn->a;
    enter(a);
    conn_gone(cn, 1, RELOCK_EIO, ac->errstr[0] ? ac->errstr : "connection closed");
    leave(a);
}

static void conn_timeout(void *arg)
{
    aconn *cn = arg;
    relock_async *a = cn->a;
    cn->conn_timer = NULL;
    enter(a);
    if (cn->ac && !cn->connected) {
        char why[300];
        const char *se = sock_error(cn->ac);
        if (se)
            snprintf(why, sizeof why, "connect to " RELOCK__ADDR_FMT ": %s", RELOCK__ADDR(cn->srv),
                     se);
        else
            snprintf(why, sizeof why, "connect to " RELOCK__ADDR_FMT ": timed out after %lld ms",
                     RELOCK__ADDR(cn->srv), a->c->s.connect_timeout_ms);
        map_forget(cn);
        conn_gone(cn, 0, RELOCK_EIO, why);
    }
    leave(a);
}

/* The setup of a connection: AUTH and SELECT as the server entry says, then
 * the probe machine (setup.attempt: 0 logging in, 1 probing). */

static void setup_step(aop *op, const relock__feed *in);
static void loc_timeout_fire(void *arg);

/* ------------------------------------------------------------------ Sentinel
 *
 * With Sentinel, conns[0] connects to the master the sentinels name, found
 * as the blocking client finds it (the search's pure steps in
 * src/sentinel.c): the sentinels are asked in turn, from the one that
 * helped last, on a short-lived connection each (SENTINEL
 * get-master-addr-by-name, within relock__sentinel_timeout()); the master
 * named is connected, logged in and probed, and its ROLE checked; only then
 * is the connection ready.  Operations wait meanwhile; when no sentinel
 * gives a usable master they fail with the search's message.  Every later
 * connect (after a lost connection, or a READONLY) searches again. */

static void loc_next(relock_async *a);

/* Closes the connection to the sentinel being asked, if any. */
static void loc_stop(relock_async *a)
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
    loc_stop(a);
    relock__sentinel_unreachable(&a->loc.q, &a->c->s, why);
    loc_next(a);
}

static void loc_on_connect(const redisAsyncContext *ac, int status)
{
    relock_async *a = ac->data;
    if (!a)
        return;
    enter(a);
    if (status != REDIS_OK) {
        /* hiredis frees the context after this callback */
        a->loc.ac->data = NULL;
        a->loc.ac = NULL;
        loc_failed(a, ac->errstr[0] ? ac->errstr : "connect failed");
    } else {
        timer_stop(a, &a->loc.timer);
        a->loc.timer = timer_start(a, relock__sentinel_timeout(a->c->s.command_timeout_ms),
                                   loc_timeout_fire, a);
    }
    leave(a);
}

static void loc_on_disconnect(const redisAsyncContext *ac, int status)
{
    (void)status;
    relock_async *a = ac->data;
    if (!a)
        return;
    enter(a);
    a->loc.ac->data = NULL;
    a->loc.ac = NULL; /* hiredis frees it */
    loc_failed(a, ac->errstr[0] ? ac->errstr : "connection lost");
    leave(a);
}

static void loc_on_reply(redisAsyncContext *ac, void *rr, void *priv)
{
    (void)priv;
    relock_async *a = ac->data;
    if (!a || !rr)
        return; /* no reply: the disconnect callback tells */
    enter(a);
    relock_client *c = a->c;
    relock__addr m;
    int rc = relock__sentinel_answer(&a->loc.q, &c->s, rr, &m);
    loc_stop(a);
    if (rc != 0) {
        loc_next(a);
    } else {
        aconn *cn = &a->conns[0];
        cn->node = c->s.servers[0]; /* login and db */
        memcpy(cn->node.host, m.host, sizeof cn->node.host);
        cn->node.port = m.port;
        cn->srv = &cn->node;
        a->loc.m = m;
        a->loc.checking = 1;
        a->loc.go = 1;
        conn_connect(cn);
    }
    leave(a);
}

static void loc_timeout_fire(void *arg)
{
    relock_async *a = arg;
    a->loc.timer = NULL;
    enter(a);
    char why[96];
    const char *se = a->loc.ac && !(a->loc.ac->c.flags & REDIS_CONNECTED) ? sock_error(a->loc.ac)
                                                                           : NULL;
    if (se)
        snprintf(why, sizeof why, "%s", se);
    else
        snprintf(why, sizeof why, "no answer within %lld ms",
                 a->loc.ac && a->loc.ac->c.flags & REDIS_CONNECTED
                     ? relock__sentinel_timeout(a->c->s.command_timeout_ms)
                     : relock__sentinel_timeout(a->c->s.connect_timeout_ms));
    loc_failed(a, why);
    leave(a);
}

/* Asks the next sentinel; when each was asked, the connection's setup
 * fails with the search's error. */
static void loc_next(relock_async *a)
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
    setup_done(cn, relock__sentinel_end(&a->loc.q, &c->s, &c->err));
}

/* Tears down cn's context when nothing is in flight on it (its setup
 * ended), without feeding anyone or reconnecting. */
static void conn_drop(aconn *cn)
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
static void loc_bad_master(aconn *cn, relock_status st, const char *why)
{
    relock_async *a = cn->a;
    /* "connect to HOST:PORT: reason" within a longer message: the reason */
    const char *p = strstr(why, "connect to ");
    char text[sizeof a->c->err.msg];
    snprintf(text, sizeof text, "%s", relock__sentinel_reason(p ? p : why));
    relock__sentinel_bad_master(&a->loc.q, &a->c->s, &a->loc.m, st, text);
    conn_drop(cn);
    loc_next(a);
}

/* The probe of the master named is done: ROLE (INFO replication before
 * 2.8.12) goes next (setup.attempt 2). */
static void role_ask(aop *su)
{
    relock_client *c = su->a->c;
    int by_info = relock__sentinel_role_by_info(c->conn.major, c->conn.minor, c->conn.patch);
    const char *argv[2] = {by_info ? "INFO" : "ROLE", "replication"};
    size_t len[2] = {by_info ? 4 : 4, 11};
    rq_cmds_free(&su->rq);
    int fl = redisFormatCommandArgv(&su->rq.cmd[0], by_info ? 2 : 1, argv, len);
    if (fl < 0) {
        loc_bad_master(su->cn, RELOCK_ENOMEM, "out of memory");
        return;
    }
    su->rq.len[0] = (size_t)fl;
    su->rq.n = 1;
    su->attempt = 2;
    send_now(su);
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
        setup_done(cn, RELOCK_OK);
        return;
    }
    relock__sentinel_bad_master(&a->loc.q, &c->s, &a->loc.m, RELOCK_EIO, why);
    conn_drop(cn);
    loc_next(a);
}

/* The connect that failed at once (conn_connect) fails what waits. */
static void connect_failed(void *arg)
{
    aconn *cn = arg;
    relock_async *a = cn->a;
    cn->conn_timer = NULL;
    enter(a);
    if (!a->freeing && cn->cstate == C_CONNECTING && !cn->ac) {
        cn->cstate = C_DOWN;
        relock__err_clear(&a->c->err);
        setup_done(cn, RELOCK__FAIL(&a->c->err, RELOCK_EIO, "%s", cn->fail_why));
    }
    leave(a);
}

static void conn_connect(aconn *cn)
{
    relock_async *a = cn->a;
    if (cn->idx == 0 && relock__sentinel_on(&a->c->s) && !a->loc.go) {
        /* find the master first */
        if (!a->loc.active) {
            relock__sentinel_begin(&a->loc.q, &a->c->s, a->c->sentinel_first);
            a->loc.active = 1;
        }
        loc_next(a);
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
        /* still "connecting" (no second connect meanwhile) until the loop
         * reports it */
        timer_stop(a, &cn->conn_timer);
        cn->conn_timer = timer_start(a, 0, connect_failed, cn);
        if (!cn->conn_timer) { /* no timer: at once, as before */
            cn->cstate = C_DOWN;
            setup_done(cn, RELOCK__FAIL(&a->c->err, RELOCK_EIO, "%s", cn->fail_why));
        }
        return;
    }
    ac->data = cn;
    cn->ac = ac;
    cn->appended = 0;
    a->c->connects++;
    cn->clock.known = 0; /* legacy.clock = "server": measured again */
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    cn->conn_timer = timer_start(a, a->c->s.connect_timeout_ms, conn_timeout, cn);
    cn->cstate = C_SETUP;
    aop *su = &cn->setup;
    batch_clear(su);
    memset(su, 0, sizeof *su);
    su->a = a;
    su->cn = cn;
    su->kind = K_SETUP;
    areq *rq = &su->rq;
    int n = 0;
    if (srv->password[0]) {
        const char *argv[3] = {"AUTH", srv->username[0] ? srv->username : srv->password,
                               srv->password};
        int argc = srv->username[0] ? 3 : 2;
        size_t len[3] = {4, strlen(argv[1]), strlen(argv[2])};
        int fl = redisFormatCommandArgv(&rq->cmd[n], argc, argv, len);
        if (fl > 0)
            rq->len[n++] = (size_t)fl;
    }
    if (srv->db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", srv->db);
        const char *argv[2] = {"SELECT", db};
        size_t len[2] = {6, strlen(db)};
        int fl = redisFormatCommandArgv(&rq->cmd[n], 2, argv, len);
        if (fl > 0)
            rq->len[n++] = (size_t)fl;
    }
    rq->n = n;
    if (n == 0) {
        relock__feed in; /* no login: straight to the probe */
        memset(&in, 0, sizeof in);
        setup_step(su, &in);
        return;
    }
    send_now(su);
}

/* The setup ended: with RELOCK_OK the connection is ready and the queue
 * goes out; otherwise the connection is dropped, and the operations waiting
 * fail with the error when it says the server is unusable (the first probe,
 * a refused login), else they are fed the fault. */
static void setup_done(aconn *cn, relock_status st)
{
    relock_async *a = cn->a;
    if (st != RELOCK_OK && a->loc.checking) {
        /* the master a sentinel named cannot be used: ask the next */
        loc_bad_master(cn, st, a->c->err.msg);
        return;
    }
    if (st == RELOCK_OK) {
        cn->cstate = C_READY;
        if (!a->probed) {
            a->probed = 1;
            relock_client *c = a->c;
            relock__err_clear(&c->err);
            st = relock__select_mode(c);
            if (st == RELOCK_OK)
                st = relock__durable_check(c);
            a->kit = kit_for(c->mode);
            if (st == RELOCK_OK && !a->kit) /* a selected mode has machines */
                st = RELOCK__FAIL(&c->err, RELOCK_EPROTO, "internal error: no machines for mode %s",
                                  relock_mode_name(c->mode));
            /* The blocking calls must not run on this client's locks. */
            c->algo = NULL;
            if (st != RELOCK_OK) {
                a->fatal = st;
                relock__err_copy(&a->fatal_err, &c->err);
                relock__err_copy(&a->err, &c->err);
                snprintf(c->mode_reason, sizeof c->mode_reason, "%.255s", c->err.msg);
            }
        }
        if (!a->fatal) {
            queue_flush(cn);
            return;
        }
    } else if (st != RELOCK_EIO && st != RELOCK_ENOMEM && !transient_reply(a->c->err.server)) {
        /* the server refuses us (login, ACL) or cannot be used */
        a->fatal = st;
        relock__err_copy(&a->fatal_err, &a->c->err);
    }
    relock__err why;
    relock__err_copy(&why, &a->c->err);
    relock__err_copy(&a->err, &why);
    if (cn->ac)
        conn_gone(cn, 0, st, why.msg);
    /* The operations waiting for the connection: those not started fail
     * with its error; a machine under way is fed the fault and decides. */
    walk_take(cn);
    while (!a->freeing && cn->walk) {
        aop *q = walk_next(cn);
        if (q->state == S_NEW && !a->fatal && !q->rerouted && cn->srv == &cn->node &&
            !relock__sentinel_on(&a->c->s)) {
            /* A Cluster node that cannot be reached left the map
             * (map_forget): an operation that sent nothing yet tries once
             * where its slot leads now, as the blocking client tries once
             * more after reading the map again. */
            aconn *to = route(a, q->l ? q->l->key : NULL);
            if (to != cn) {
                q->rerouted = 1;
                q->cn = to;
                conn_wants(to, q);
                continue;
            }
        }
        if (q->state == S_NEW || a->fatal) {
            if (!q->err)
                q->err = malloc(sizeof *q->err);
            if (q->err)
                relock__err_copy(q->err, &why);
            op_finish(q, st);
        } else {
            /* a redirected batch keeps the replies its first commands had */
            if (!q->redir)
                batch_clear(q);
            op_feed(q, RELOCK__FAULT_UNSENT, st, why.msg);
        }
    }
}

/* The client's server facts (c->conn, what the machines read) become
 * cn's, or cn's become the client's. */
static void facts_load(relock_client *c, const aconn *cn)
{
    memcpy(c->conn.version, cn->version, sizeof c->conn.version);
    c->conn.major = cn->major;
    c->conn.minor = cn->minor;
    c->conn.patch = cn->patch;
    c->conn.caps = cn->caps;
}

static void facts_save(aconn *cn, const relock_client *c)
{
    memcpy(cn->version, c->conn.version, sizeof cn->version);
    cn->major = c->conn.major;
    cn->minor = c->conn.minor;
    cn->patch = c->conn.patch;
    cn->caps = c->conn.caps;
}

static void setup_step(aop *su, const relock__feed *in)
{
    aconn *cn = su->cn;
    relock_async *a = su->a;
    relock_client *c = a->c;
    const relock__server *srv = cn->srv;
    relock__feed first;
    if (su->attempt == 2) {
        facts_load(c, cn); /* this master's, for ROLE's form and the mode */
        role_check(su, in);
        return;
    }
    if (su->attempt == 0) {
        /* the replies to AUTH and SELECT */
        relock__err_clear(&c->err);
        if (in->fault) {
            setup_done(cn, RELOCK__FAIL(&c->err, in->fault_status ? in->fault_status : RELOCK_EIO,
                                        "login: %s", in->fault_text ? in->fault_text : "no reply"));
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
            setup_done(cn, RELOCK_ECONFIG);
            return;
        }
        su->attempt = 1;
        relock__probe_init(&su->probe);
        /* a new probe: nothing known of this server yet */
        cn->probed = 0;
        memset(cn->version, 0, sizeof cn->version);
        cn->major = cn->minor = cn->patch = 0;
        cn->caps = 0;
        static char pname[] = "(probe)";
        memset(&cn->probe_l, 0, sizeof cn->probe_l);
        cn->probe_l.c = c;
        cn->probe_l.name = cn->probe_l.key = cn->probe_l.fence_key = pname;
        memset(&first, 0, sizeof first);
        in = &first;
    }
    relock__err_clear(&c->err);
    /* Each connection's probe learns into its own facts, around each of
     * its steps (other connections may probe meanwhile); the client's stay
     * those of this probe's last step, for the mode's choice and the role
     * check that follow it. */
    facts_load(c, cn);
    relock__step s = relock__probe_step(&su->probe, &cn->probe_l, in, &a->batch);
    facts_save(cn, c);
    if (s == RELOCK__STEP_DONE) {
        cn->probed = su->probe.h.st == RELOCK_OK;
        if (su->probe.h.st == RELOCK_OK && a->loc.checking)
            role_ask(su); /* a master the sentinels named: is it one? */
        else
            setup_done(cn, su->probe.h.st);
        return;
    }
    rq_cmds_free(&su->rq);
    const relock__cmd *k = &a->batch.cmd[0];
    int fl = redisFormatCommandArgv(&su->rq.cmd[0], k->argc, (const char **)k->argv, k->len);
    if (fl < 0) {
        setup_done(cn, RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "probe: out of memory"));
        return;
    }
    su->rq.len[0] = (size_t)fl;
    su->rq.n = 1;
    send_now(su);
}

/* ------------------------------------------------------------------ release notices */

static void chan_free_all(relock_async *a)
{
    achan *ch = a->chans;
    a->chans = NULL;
    a->chans_gen++;
    while (ch) {
        achan *next = ch->next; /* its waiters have ended already */
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
    a->sub_up = 0;
    s->data = NULL;
    if (!hiredis_frees)
        redisAsyncFree(s);
    /* Waiters keep waiting, by their timers only; one waiting for its
     * subscription plans again without it. */
    achan *ch = a->chans;
    a->chans = NULL;
    a->chans_gen++;
    a->nwaiting = 0;
    aop *replan = NULL;
    while (ch) {
        achan *next = ch->next;
        aop *w = ch->waiters;
        while (w) {
            aop *wn = w->cnext;
            w->ch = NULL;
            w->cprev = NULL;
            w->cnext = NULL;
            if (w->state == S_SUBSCRIBING) {
                w->cnext = replan;
                replan = w;
            }
            w = wn;
        }
        free(ch);
        ch = next;
    }
    /* those waiting for a subscription plan again without it */
    while (replan && !a->freeing) {
        aop *next = replan->cnext;
        replan->cnext = NULL;
        /* one cancelled by an earlier one's callback ends by its own timer */
        if (replan->state == S_SUBSCRIBING)
            op_feed(replan, RELOCK__FAULT_NONE, RELOCK_OK, NULL);
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

static void chan_leave(aop *op)
{
    achan *ch = op->ch;
    if (!ch)
        return;
    if (op->cprev)
        op->cprev->cnext = op->cnext;
    else
        ch->waiters = op->cnext;
    if (op->cnext)
        op->cnext->cprev = op->cprev;
    op->cprev = op->cnext = NULL;
    op->ch = NULL;
    relock_async *a = op->a;
    if (--a->nwaiting == 0 && a->sub && !a->freeing)
        sub_drop(a, 0); /* nobody waits: as the blocking waiter, unsubscribe */
}

static void wake(aop *op);

static void on_sub(redisAsyncContext *ac, void *rr, void *priv)
{
    relock_async *a = ac->data;
    if (!a)
        return;
    enter(a);
    redisReply *r = rr;
    achan *ch = priv;
    /* A waiter fed below may end (its bound ran out) and leave the
     * channel; the last to leave drops the subscription, which frees every
     * channel, ch among them: the walks stop as soon as that happened. */
    unsigned gen = a->chans_gen;
    if (!r) {
        sub_failed(a, 1);
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements >= 3 &&
               r->element[0]->type == REDIS_REPLY_STRING) {
        const char *kind = r->element[0]->str;
        if (strcmp(kind, "subscribe") == 0) {
            ch->confirmed = 1;
            /* each waiter plans again (and may leave the channel) */
            for (int guard = 0; guard < 1000000 && !a->freeing && a->chans_gen == gen; guard++) {
                aop *w = ch->waiters;
                while (w && w->state != S_SUBSCRIBING)
                    w = w->cnext;
                if (!w)
                    break;
                op_feed(w, RELOCK__FAULT_NONE, RELOCK_OK, NULL);
            }
        } else if (strcmp(kind, "message") == 0) {
            for (int guard = 0; guard < 1000000 && !a->freeing && a->chans_gen == gen;
                 guard++) {
                aop *w = ch->waiters;
                while (w && w->state != S_SLEEP)
                    w = w->cnext;
                if (!w)
                    break;
                wake(w);
            }
        }
    } else if (r->type == REDIS_REPLY_ERROR) {
        sub_failed(a, 0);
    }
    leave(a);
}

static void on_sub_disconnect(const redisAsyncContext *ac, int status)
{
    (void)status;
    relock_async *a = ac->data;
    if (!a)
        return;
    enter(a);
    sub_failed(a, 1);
    leave(a);
}

static void on_sub_connect(const redisAsyncContext *ac, int status)
{
    relock_async *a = ac->data;
    if (!a || status == REDIS_OK)
        return;
    enter(a);
    sub_failed(a, 1);
    leave(a);
}

static void on_sub_auth(redisAsyncContext *ac, void *rr, void *priv)
{
    (void)priv;
    relock_async *a = ac->data;
    redisReply *r = rr;
    if (!a || !r || r->type != REDIS_REPLY_ERROR)
        return;
    enter(a);
    sub_failed(a, 0);
    leave(a);
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
            /* With a quorum every server announces releases: the first
             * connected one from where the last failed subscription
             * leaves off (as the blocking waiter, the first that
             * accepts). */
            int at = a->sub_from % a->nconns;
            for (int k = 0; k < a->nconns; k++) {
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
            if (srv->password[0]) {
                if (srv->username[0])
                    redisAsyncCommand(s, on_sub_auth, NULL, "AUTH %s %s", srv->username,
                                      srv->password);
                else
                    redisAsyncCommand(s, on_sub_auth, NULL, "AUTH %s", srv->password);
            }
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
    op->cprev = NULL;
    op->cnext = ch->waiters;
    if (ch->waiters)
        ch->waiters->cprev = op;
    ch->waiters = op;
    a->nwaiting++;
    return ch->confirmed ? 1 : 0;
}

/* ------------------------------------------------------------------ operations */

static void attempt_begin(aop *op);

static long long left_ms(uint64_t deadline)
{
    if (!deadline)
        return 0;
    uint64_t now = now_ms();
    return now >= deadline ? 0 : (long long)(deadline - now);
}

static void sleep_fire(void *arg)
{
    aop *op = arg;
    relock_async *a = op->a;
    op->timer = NULL;
    enter(a);
    if (op->state == S_SLEEP) {
        if (op->cancelled)
            op_finish(op, op_fail(op, RELOCK_ECANCELED, "acquire %s: cancelled", op->l->name));
        else
            attempt_begin(op);
    }
    leave(a);
}

static void plan(aop *op, int after_subscribe);

/* A subscription not answered within command_timeout_ms: wait without it. */
static void sub_timeout_fire(void *arg);

/* op's subscription failed (no answer in time, or its connection went):
 * with a quorum it tries the next server, as the blocking waiter tries
 * each in turn within its one subscribe step; then it plans without. */
static void sub_next(aop *op)
{
    relock_async *a = op->a;
    timer_stop(a, &op->timer);
    unsigned gen = op->sub_gen;
    chan_leave(op);
    if (a->nconns > 1 && ++op->sub_tries < a->nconns && !a->freeing) {
        if (a->sub_gen == gen) { /* the connection it waited on: not answering */
            a->sub_from = (a->sub_at + 1) % a->nconns;
            if (a->sub)
                sub_drop(a, 0);
        }
        int j = chan_join(op);
        if (j == 0) {
            op->timer = timer_start(a, a->c->s.command_timeout_ms, sub_timeout_fire, op);
            return;
        }
        if (j == 1) {
            op->state = S_RUN;
            plan(op, 1);
            return;
        }
    }
    plan(op, 1);
}

static void sub_timeout_fire(void *arg)
{
    aop *op = arg;
    relock_async *a = op->a;
    op->timer = NULL;
    enter(a);
    if (op->state == S_SUBSCRIBING)
        sub_next(op);
    leave(a);
}

static void wake(aop *op)
{
    timer_stop(op->a, &op->timer);
    attempt_begin(op);
}

/* What a waiter does after an attempt that found the lock held (the wait
 * planner decides, as for the blocking waiter). */
static void plan(aop *op, int after_subscribe)
{
    relock_async *a = op->a;
    relock_client *c = a->c;
    relock_lock *l = op->l;
    relock__mhead *h = op->m;
    if (op->cancelled) {
        op_finish(op, op_fail(op, RELOCK_ECANCELED, "acquire %s: cancelled", l->name));
        return;
    }
    relock__wait_in in = {
        .attempt = op->attempt,
        .holder_ms = h->hint_ms,
        .silent_holder = l->legacy_holder,
        .notify = c->s.wait.notify,
        .subscribed = op->ch != NULL && op->ch->confirmed,
        .after_subscribe = after_subscribe,
        .bound_ms = op->wait_ms,
        .left_ms = left_ms(op->deadline),
        .backoff_min_ms = c->s.wait.backoff_min_ms,
        .backoff_max_ms = c->s.wait.backoff_max_ms,
        .skew_margin_ms = c->s.legacy.skew_margin_ms,
        .rnd = relock__rand64(&c->rng),
    };
    relock__wait_plan p = relock__wait_plan_next(&in);
    if (p.act == RELOCK__WAIT_SUBSCRIBE) {
        op->sub_tries = 0;
        int j = op->ch ? (op->ch->confirmed ? 1 : 0) : chan_join(op);
        if (j == 0) {
            /* plans again when the subscription is answered, or without it */
            op->state = S_SUBSCRIBING;
            op->timer = timer_start(a, c->s.command_timeout_ms, sub_timeout_fire, op);
            return;
        }
        in.after_subscribe = 1;
        in.subscribed = j == 1;
        in.left_ms = left_ms(op->deadline);
        p = relock__wait_plan_next(&in);
    }
    /* A modern client meeting a live classic holder says so (wait.c). */
    const char *classic =
        c->mode == RELOCK_MODE_MODERN && l->legacy_holder ? RELOCK_CLASSIC_HOLDER_NOTE : "";
    switch (p.act) {
    case RELOCK__WAIT_BUSY:
        relock__err_clear(&c->err);
        RELOCK__FAIL(&c->err, RELOCK_BUSY, "lock %s is held%s", l->name, classic);
        free(op->err);
        op->err = NULL;
        err_save(op);
        op_finish(op, RELOCK_BUSY);
        return;
    case RELOCK__WAIT_TIMEOUT:
        relock__err_clear(&c->err);
        RELOCK__FAIL(&c->err, RELOCK_TIMEOUT, "lock %s: still held after %lld ms%s", l->name,
                     op->wait_ms, classic);
        free(op->err);
        op->err = NULL;
        err_save(op);
        op_finish(op, RELOCK_TIMEOUT);
        return;
    case RELOCK__WAIT_SLEEP:
        /* The next attempt is one more, after a sleep or a notice, as
         * the blocking waiter counts them: the backoff grows. */
        op->attempt++;
        op->state = S_SLEEP;
        op->timer = timer_start(a, p.sleep_ms, sleep_fire, op);
        if (!op->timer)
            op_finish(op, op_fail(op, RELOCK_ENOMEM, "acquire %s: out of memory", l->name));
        return;
    default: /* RELOCK__WAIT_RETRY, RELOCK__WAIT_SUBSCRIBE handled */
        op->attempt++;
        attempt_begin(op);
        return;
    }
}

/* Runs op's machine from its start (feed without replies). */
static void machine_start(aop *op)
{
    relock__feed in;
    memset(&in, 0, sizeof in);
    op->steps = 0;
    op->sent_any = 0;
    op->state = S_RUN;
    if (op->a->kit->fan && !op->fencing) {
        fan_begin(op);
        return;
    }
    op_feed(op, RELOCK__FAULT_NONE, RELOCK_OK, NULL);
}

static void attempt_begin(aop *op)
{
    relock_async *a = op->a;
    relock_client *c = a->c;
    op->l->legacy_holder = 0;
    err_load(op);
    relock__err_clear(&c->err);
    free(op->err);
    op->err = NULL;
    op->wset = op->wmoved = 0;
    relock_status st = a->kit->acq_init(op->m, op->l);
    if (st != RELOCK_OK) {
        err_save(op);
        op_finish(op, st);
        return;
    }
    op->fn = a->kit->acq_step;
    machine_start(op);
}

static int owner_phase(aop *op, int held);

/* The undo of a cancelled acquire that won: release by the machine.  When
 * the cancel came during the owner record's write, the record may be on
 * the server: it is deleted first (undoing 2), while the lock holds the
 * handle's value, as a release deletes it (decision 108). */
static void undo_begin(aop *op)
{
    relock_async *a = op->a;
    if (op->phase == PH_OWNER && !op->undoing) {
        free(op->err);
        op->err = NULL;
        op->undoing = 2;
        if (owner_phase(op, 0))
            return;
    }
    void *m = malloc(a->kit->upd_size);
    if (!m || a->kit->upd_init(m, op->l, 0, 0) != RELOCK_OK) {
        free(m);
        op_finish(op, op_fail(op, RELOCK_EAMBIGUOUS,
                              "acquire %s: cancelled after it won, and the release failed: the "
                              "lock may stay held until its TTL ends",
                              op->l->name));
        return;
    }
    free(op->m);
    op->m = m;
    op->fn = a->kit->upd_step;
    op->undoing = 1;
    machine_start(op);
}

/* Runs machine m (allocated, op's from now) with step fn as op's phase. */
static void phase_run(aop *op, int phase, relock__step_fn fn, void *m)
{
    free(op->m);
    op->m = m;
    op->fn = fn;
    op->phase = phase;
    op->steps = 0;
    op->state = S_RUN;
    op_feed(op, RELOCK__FAULT_NONE, RELOCK_OK, NULL);
}

/* The owner record of op's lock written (held) or deleted by its machine
 * as op's PH_OWNER; 0 when there is none to write (owner_info off). */
static int owner_phase(aop *op, int held)
{
    relock_lock *l = op->l;
    /* (a quorum's record would be one server's view: not written, as by
     * the blocking client) */
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

/*
 * After a phase of op ended with *st: starts the next (returns 1), or
 * leaves in *st the outcome of the whole (returns 0).  Acquire and extend:
 * the write, then durability's WAIT on the write's connection, then the
 * owner record; an acquire whose write was not acknowledged is released
 * (PH_UNDO) and fails; an extend's keeps the earlier of its old and new
 * validity (decision 104).
 * Release: the owner record is deleted first, while the lock is ours.
 */
static int next_phase(aop *op, relock_status *st)
{
    relock_async *a = op->a;
    relock_client *c = a->c;
    relock_lock *l = op->l;
    if (op->kind == K_REL) {
        if (op->phase != PH_OWNER)
            return 0;
        /* the record is deleted (or not ours): the release itself now */
        free(op->err);
        op->err = NULL;
        free(op->m);
        op->m = NULL;
        op->phase = PH_MAIN;
        op->owner_gone = 1;
        op_start(op);
        return 1;
    }
    switch (op->phase) {
    case PH_MAIN:
        if (*st != RELOCK_OK || op->cancelled)
            return 0;
        if (op->kind == K_ACQ)
            l->owner_since = relock__wall_ms() / 1000;
        if (relock__durable_on(c)) {
            relock__durable_m *m = malloc(sizeof *m);
            if (m) {
                relock__durable_init(m, op->kind == K_ACQ ? "acquire" : "extend");
                phase_run(op, PH_DURABLE, relock__durable_step, m);
                return 1;
            }
            *st = op_fail(op, RELOCK_ENOMEM, "%s %s: out of memory for WAIT",
                          op->kind == K_ACQ ? "acquire" : "extend", l->name);
        } else {
            return owner_phase(op, 1);
        }
        break;
    case PH_DURABLE:
        op->acked = ((relock__durable_m *)op->m)->acked;
        if (*st == RELOCK_OK)
            return op->cancelled ? 0 : owner_phase(op, 1);
        break;
    case PH_OWNER:
        /* the record informs: its outcome is nobody's */
        free(op->err);
        op->err = NULL;
        *st = RELOCK_OK;
        return 0;
    case PH_UNDO: {
        err_load(op);
        relock__err kept;
        relock__err_copy(&kept, op->kept);
        *st = relock__durable_undone(c, &kept, op->kept_st, *st);
        err_save(op);
        return 0;
    }
    }
    /* the write was not acknowledged (or no WAIT could be sent): an
     * extend's lease is the earlier of the old one, which the replicas
     * know of, and the new one, which the master holds */
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
        *st = op_fail(op, RELOCK_EAMBIGUOUS,
                      "acquire %s: the write was not acknowledged, and there was no memory to "
                      "delete it: the lock may stay held until its TTL ends",
                      l->name);
        return 0;
    }
    err_load(op);
    relock__err_copy(op->kept, &c->err);
    op->kept_st = *st;
    free(op->err);
    op->err = NULL;
    phase_run(op, PH_UNDO, a->kit->upd_step, m);
    return 1;
}

/* The reply to the legacy marker's SET: a MOVED (the map did not know the
 * marker's slot) sends it once to the node named when the client has a
 * ready connection there, as the blocking client's write follows it;
 * anything else is dropped (the marker informs, design.md §5.5). */
static void on_marker(redisAsyncContext *ac, void *rr, void *priv)
{
    aconn *cn = ac->data;
    const redisReply *r = rr;
    relock__redirect to;
    if (!cn || !r || cn->a->freeing || r->type != REDIS_REPLY_ERROR || priv ||
        relock__redirect_parse(cn->srv->host, r, &to) != RELOCK__REDIR_MOVED)
        return;
    relock_client *c = cn->a->c;
    aconn *at = conn_find(cn->a, to.host, to.port);
    char key[RELOCK__KEY_MAX];
    if (at && at->ac && at->cstate == C_READY && !at->txn_owner &&
        relock__marker_key(c->s.key_prefix, key, sizeof key) == 0)
        redisAsyncCommand(at->ac, on_marker, at, "SET %s %lld", key, relock__wall_ms());
}

/* The watch marker (marker.c): written once per bridge or modern client
 * with SETNX before its first attempt, as the blocking client writes it.
 * watch_noted: 1 written, 2 in flight, 3 met a MOVED that could not be
 * followed (the marker's node is not connected yet).  A MOVED is followed
 * once, as for the legacy marker (on_marker); a write that did not land is
 * tried again at a later acquire: a missing marker only delays scan's
 * verdict. */
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
    if (moved && (at = conn_find(cn->a, to.host, to.port)) && at->ac &&
        at->cstate == C_READY && !at->txn_owner &&
        relock__watch_key(c->s.key_prefix, key, sizeof key) == 0 &&
        redisAsyncCommand(at->ac, on_watch, at, "SETNX %s %lld", key, relock__wall_ms()) ==
            REDIS_OK)
        c->watch_noted = 2;
}

/* cn is the acquire's connection.  Where Cluster's slot map names the
 * marker's node, the marker goes there once that connection is up; after
 * a MOVED it could not follow, it waits for the map rather than meet the
 * same MOVED at every acquire. */
static void note_watching(relock_async *a, aconn *cn)
{
    relock_client *c = a->c;
    char key[RELOCK__KEY_MAX];
    if (c->watch_noted == 1 || c->watch_noted == 2 || a->kit->fan ||
        (c->mode != RELOCK_MODE_BRIDGE && c->mode != RELOCK_MODE_MODERN) ||
        relock__watch_key(c->s.key_prefix, key, sizeof key) != 0)
        return;
    aconn *mc = route(a, key);
    if (a->slots && a->slots[relock__cluster_slot(key, strlen(key))]) {
        if (!mc->ac || mc->cstate != C_READY || mc->txn_owner)
            return;
    } else if (c->watch_noted == 3 && map_on(a)) {
        return;
    } else if (!mc->ac || mc->cstate != C_READY || mc->txn_owner) {
        mc = cn;
    }
    if (mc->ac && mc->cstate == C_READY && !mc->txn_owner &&
        redisAsyncCommand(mc->ac, on_watch, NULL, "SETNX %s %lld", key, relock__wall_ms()) ==
            REDIS_OK)
        c->watch_noted = 2;
}

/* The machine ended. */
static void machine_done(aop *op, relock_status st)
{
    relock_async *a = op->a;
    aconn *cn = op->cn;
    relock__mhead *h = op->m;
    relock_lock *l = op->l;
    if (h->in_txn && cn->txn_owner == op) {
        /* A transaction left open: its connection goes (design.md §13.3). */
        cn->txn_owner = NULL;
        if (cn->ac)
            conn_gone(cn, 0, RELOCK_EIO, "a transaction was left open");
    }
    if (cn->txn_owner == op)
        cn->txn_owner = NULL;
    if (h->note_legacy) {
        relock_client *c = a->c;
        uint64_t now = now_ms();
        char key[RELOCK__KEY_MAX];
        /* Over a Cluster the marker goes where its own slot lives: the
         * node the map names when its connection is up, else op's, whose
         * MOVED is followed (on_marker). */
        aconn *mc;
        if ((!c->legacy_noted_at || now - c->legacy_noted_at >= 1000) &&
            relock__marker_key(c->s.key_prefix, key, sizeof key) == 0) {
            mc = route(a, key);
            if (!mc->ac || mc->cstate != C_READY || mc->txn_owner)
                mc = cn;
            if (mc->ac && mc->cstate == C_READY && !mc->txn_owner) {
                c->legacy_noted_at = now;
                redisAsyncCommand(mc->ac, on_marker, NULL, "SET %s %lld", key,
                                  relock__wall_ms());
            }
        }
    }
    if (cn->txn_owner == NULL && cn->queue && cn->cstate == C_READY) {
        queue_flush(cn);
        /* An operation of the queue may end within the flush (a release of
         * a lost lock), and its callback may free the client: that ended
         * op too (relock_async_free), and freed it. */
        if (a->freeing)
            return;
    }
    if (!op->fencing && !op->undoing && next_phase(op, &st))
        return;
    switch (op->kind) {
    case K_ACQ:
        if (op->fencing) {
            op->fencing = 0;
            free(op->m);
            op->m = NULL;
            if (st != RELOCK_OK || op->cancelled) {
                op_finish(op, st != RELOCK_OK ? st
                                              : op_fail(op, RELOCK_ECANCELED,
                                                        "acquire %s: cancelled", l->name));
                return;
            }
            op->m = malloc(a->kit->acq_size);
            if (!op->m) {
                op_finish(op, op_fail(op, RELOCK_ENOMEM, "acquire: out of memory"));
                return;
            }
            attempt_begin(op);
            return;
        }
        if (op->undoing == 2) {
            /* the record deleted (or not ours, or not reached: it informs) */
            free(op->err);
            op->err = NULL;
            undo_begin(op);
            return;
        }
        if (op->undoing) {
            if (st == RELOCK_OK || st == RELOCK_LOST) {
                free(op->err);
                op->err = NULL;
                op_finish(op, op_fail(op, RELOCK_ECANCELED,
                                      "acquire %s: cancelled (the lock it had won was released)",
                                      l->name));
            } else {
                op_finish(op, op_fail(op, RELOCK_EAMBIGUOUS,
                                      "acquire %s: cancelled after it won, and the release "
                                      "failed: the lock may stay held until its TTL ends",
                                      l->name));
            }
            return;
        }
        if (op->cancelled) {
            if (st == RELOCK_OK) {
                undo_begin(op);
                return;
            }
            if (st != RELOCK_EAMBIGUOUS) {
                free(op->err);
                op->err = NULL;
                st = op_fail(op, RELOCK_ECANCELED, "acquire %s: cancelled", l->name);
            }
            op_finish(op, st);
            return;
        }
        if (st == RELOCK_BUSY) {
            plan(op, 0);
            return;
        }
        if (st == RELOCK_OK)
            l->owner_since = relock__wall_ms() / 1000;
        op_finish(op, st);
        return;
    case K_REL:
        if (st == RELOCK_OK && l->waiters > 0)
            relock__yield_note(l); /* let the waiters it woke go first */
        if (st == RELOCK_OK || st == RELOCK_LOST)
            l->lost = 1;
        op_finish(op, st);
        return;
    case K_EXT:
    case K_KEEP:
        if (st == RELOCK_LOST)
            l->lost = 1;
        op_finish(op, st); /* a renewal goes on in keep_after() */
        return;
    }
}

/* Feeds op's machine: the replies of its batch (or the fault), then sends
 * its next batch or ends it. */
static void op_feed(aop *op, relock__fault fault, relock_status fst, const char *ftext)
{
    relock_async *a = op->a;
    relock_client *c = a->c;
    if (op->kind == K_SLOTS) {
        slots_done(op, fault);
        return;
    }
    if (op->kind == K_SETUP) {
        /* the replies move out: the step may send the next batch at once */
        redisReply *rep[RELOCK__BATCH_CMDS];
        int nrep = op->rq.nrep;
        memcpy(rep, op->rq.rep, sizeof rep);
        memset(op->rq.rep, 0, sizeof op->rq.rep);
        op->rq.nrep = 0;
        relock__feed in;
        memset(&in, 0, sizeof in);
        in.reply = rep;
        in.nreply = nrep;
        in.fault = fault;
        in.fault_status = fst;
        in.fault_text = ftext;
        in.mono_ms = now_ms();
        if (fault != RELOCK__FAULT_NONE)
            in.nreply = 0;
        op->state = S_SENT;
        setup_step(op, &in);
        for (int i = 0; i < nrep; i++)
            if (rep[i])
                freeReplyObject(rep[i]);
        return;
    }
    if (op->state == S_SUBSCRIBING) {
        if (op->ch && op->ch->confirmed) {
            timer_stop(a, &op->timer);
            plan(op, 1);
        } else {
            sub_next(op); /* its subscriber connection failed */
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
    /* The batch that ended the transaction was answered.  The connection
     * stays the operation's until its machine has judged the replies: an
     * error reply to EXEC leaves the server's connection inside MULTI
     * (h->in_txn), and machine_done() then drops it; another operation's
     * batch sent before that would be queued inside the transaction. */
    int txn_ended = cn->txn_owner == op && !op->in_txn;
    for (;;) {
        relock__mhead *h = op->m;
        relock__step_fn fn = op->clocking ? relock__clock_step : op->fn;
        void *m = op->clocking ? (void *)&op->clk : op->m;
        relock__feed in;
        memset(&in, 0, sizeof in);
        in.reply = rq->rep;
        in.nreply = rq->nrep;
        if (fault != RELOCK__FAULT_NONE) {
            /* replies come only in full or up to a fault */
            int k = 0;
            while (k < rq->nrep && rq->rep[k])
                k++;
            in.nreply = k;
        }
        in.fault = fault;
        in.fault_status = fst;
        in.fault_text = ftext;
        in.mono_ms = now_ms();
        err_load(op);
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
                memcpy(op->held, rq->rep, sizeof op->held);
                op->nheld = rq->nrep;
                memset(rq->rep, 0, sizeof rq->rep);
                rq->nrep = 0;
                op->clocking = 1;
                relock__clock_init(&op->clk, op->in_txn);
                continue;
            } else {
                in.fleet_ms = relock__clock_server_ms(&cn->clock, in.mono_ms);
                in.fleet_fresh = op->clock_fresh;
                /* Just measured: the feed's monotonic time is the moment
                 * TIME went out, as the blocking driver's is from before
                 * the clock was read.  The server read its clock anywhere
                 * in the round trip, so the estimate may be behind by
                 * half of it; a validity counted from the reply would
                 * outlast the lease planned on it by as much. */
                if (op->clock_fresh)
                    in.mono_ms = op->clk.t0;
            }
        }
        op->clock_fresh = 0; /* a fresh reading serves the one feed after it */
        relock__batch *b = &a->batch;
        relock__batch_reset(b);
        /* the clock machine measures into the client's estimate: the
         * connection's own, around each of its steps (operations on other
         * connections may measure meanwhile) */
        if (op->clocking)
            c->conn.clock = cn->clock;
        /* the facts of the server it runs on (a Cluster node's own) */
        if (cn->probed)
            facts_load(c, cn);
        relock__step s = fn(m, op->l, &in, b);
        if (op->clocking)
            cn->clock = c->conn.clock;
        err_save(op);
        for (int i = 0; i < rq->nrep; i++)
            if (rq->rep[i]) {
                freeReplyObject(rq->rep[i]);
                rq->rep[i] = NULL;
            }
        rq->nrep = 0;
        rq_cmds_free(rq);
        op->hops = 0;
        op->redir = NULL;
        if (s == RELOCK__STEP_DONE && op->clocking) {
            /* The clock is known (or its failure is the fault the waiting
             * replies are fed with, as the blocking driver does). */
            op->clocking = 0;
            memcpy(rq->rep, op->held, sizeof rq->rep);
            rq->nrep = op->nheld;
            memset(op->held, 0, sizeof op->held);
            op->nheld = 0;
            if (op->clk.h.st != RELOCK_OK) {
                fault = RELOCK__FAULT_UNSENT;
                fst = op->clk.h.st;
                snprintf(text, sizeof text, "%.399s", c->err.msg);
                ftext = text;
            } else {
                fault = RELOCK__FAULT_NONE;
                fst = RELOCK_OK;
                ftext = NULL;
                op->clock_fresh = 1;
            }
            continue;
        }
        if (s == RELOCK__STEP_DONE) {
            machine_done(op, h->st);
            return;
        }
        if (!relock__batch_ok(b) || ++op->steps >= RELOCK__DRIVE_MAX_STEPS) {
            machine_done(op, op_fail(op, RELOCK_EPROTO, "lock %s: internal error: %s",
                                     op->l->name,
                                     op->steps >= RELOCK__DRIVE_MAX_STEPS
                                         ? "an operation did not end"
                                         : "a command batch overflowed"));
            return;
        }
        int n = 0;
        for (; n < b->n; n++) {
            const relock__cmd *k = &b->cmd[n];
            int fl = redisFormatCommandArgv(&rq->cmd[n], k->argc, (const char **)k->argv, k->len);
            if (fl < 0)
                break;
            rq->len[n] = (size_t)fl;
        }
        rq->n = n;
        rq->slow_ms = b->slow_ms;
        op->pinned = b->pinned;
        op->in_txn = b->in_txn;
        if (n < b->n) {
            batch_clear(op);
            fault = RELOCK__FAULT_UNSENT;
            fst = RELOCK_ENOMEM;
            ftext = "out of memory";
            continue;
        }
        if (b->n == 0) {
            fault = RELOCK__FAULT_NONE;
            continue;
        }
        if (txn_ended) {
            /* The machine goes on: a new transaction keeps the connection
             * (the gen check below), anything else lets the others send. */
            txn_ended = 0;
            if (!b->in_txn) {
                cn->txn_owner = NULL;
                if (cn->queue && cn->cstate == C_READY)
                    queue_flush(cn);
            }
        }
        if (cn->txn_owner == op && (cn->gen != op->txn_gen || cn->cstate != C_READY)) {
            batch_clear(op);
            fault = RELOCK__FAULT_UNSENT;
            fst = RELOCK_EIO;
            ftext = "the connection of a transaction was lost before its end";
            continue;
        }
        submit(op);
        return;
    }
}

/* ------------------------------------------------------------------ the quorum's fan driver */

/*
 * A quorum (several servers) runs the fan machine (engine/fan.h,
 * quorum.c) over a connection per server, as the blocking fan driver
 * (engine/fandrive.c) does over its poll loop: a round's batches go out
 * at once, each server's replies are fed as soon as they are complete,
 * one timer per round feeds the time at the round's deadline, and the
 * machine decides.  What the driver keeps is decision 44's part: a server
 * still silent when a round is decided owes its replies (its request stays
 * in the connection's FIFO without an operation, read and dropped) if its
 * batch was written, in time or late, else its connection is dropped;
 * a connection owing a reply older than the round's timeout, or MAX_OWED
 * replies, is dropped when a round would use it, and left alone for one
 * timeout, except for a clean-up (a failed acquire's delete), which goes
 * behind the owed request on its connection, however late, so that the
 * server runs it after the request it undoes.  Pipelined operations
 * leave a server slightly slower than the majority owing many replies at
 * once, as a matter of course: lateness is judged by the age of the
 * oldest, and the count only bounds the memory (the blocking driver, one
 * operation at a time, stops at 8; decision 211).  A quorum's
 * connections run no probe (the quorum is modern values only): AUTH,
 * SELECT and SCRIPT LOAD of the quorum's scripts are pipelined ahead of
 * the first batch, as the blocking fan driver does.
 */

#define MAX_OWED 4096

/* The scripts a quorum sends, loaded on every new connection. */
static const int quorum_scripts[] = {RELOCK__SCRIPT_MODERN_ACQUIRE, RELOCK__SCRIPT_FENCE_RAISE,
                                     RELOCK__SCRIPT_DEL_IF_EQ, RELOCK__SCRIPT_PEXPIRE_IF_EQ};

/* A fan operation's round, as the driver sees it. */
struct afan {
    relock__fanfeed f;                 /* the next feed, filled as replies come */
    areq *rq[RELOCK__MAX_SERVERS];     /* the round's request to each server, while live */
    uint64_t start, end;               /* the round's start and deadline */
    long long timeout_ms;
    int open;
    int feeds;
    void *timer; /* the round's deadline */
    void *kick;  /* a fault to feed, from the loop */
    char text[][448]; /* a fault's words, per server (as many as servers) */
};

static void fan_step(aop *op);

/* Writes what a quorum connection has buffered now, as far as the socket
 * takes it, rather than at the loop's next turn: a request is written (it
 * may run) or not when its round is decided, and the machine counts the
 * servers left owing by that.  Done when a round's batches are sent (a
 * round may be decided at its first feed: a clean-up that waits for
 * nobody), as the blocking driver flushes, and again before a feed for a
 * request the socket did not take whole.  A write error is left in the
 * context, where hiredis's next write event finds it and disconnects. */
static int rq_written(const areq *rq);

static void flush_unwritten(void *arg)
{
    aop *op = arg;
    for (int i = 0; i < op->a->nconns; i++) {
        areq *rq = op->fan->rq[i];
        if (!rq || rq->outstanding <= 0 || rq_written(rq))
            continue;
        aconn *cn = rq->cn;
        int done = 0;
        if (cn->ac && cn->connected && !cn->ac->c.err)
            (void)redisBufferWrite(&cn->ac->c, &done);
    }
}

/* Flushes the connections of op's live requests not wholly written, all
 * under one SIGPIPE block (decision 241: every write of the client). */
static void fan_flush(aop *op)
{
    int any = 0;
    for (int i = 0; i < op->a->nconns && !any; i++) {
        areq *rq = op->fan->rq[i];
        any = rq && rq->outstanding > 0 && !rq_written(rq) && rq->cn->connected;
    }
    if (any)
        relock__write_nopipe(flush_unwritten, op);
}

/* Whether rq's bytes were all handed to the socket. */
static int rq_written(const areq *rq)
{
    const aconn *cn = rq->cn;
    if (!cn->ac || !cn->connected)
        return 0;
    uint64_t wrote = cn->appended - (cn->ac->c.obuf ? sdslen(cn->ac->c.obuf) : 0);
    return wrote >= rq->end_off;
}

static unsigned fan_written(const afan *F, int n)
{
    unsigned w = 0;
    for (int i = 0; i < n; i++)
        if (F->rq[i] && rq_written(F->rq[i]))
            w |= 1u << i;
    return w;
}

static void fan_kick_fire(void *arg)
{
    aop *op = arg;
    relock_async *a = op->a;
    op->fan->kick = NULL;
    enter(a);
    if (!a->freeing && op->state == S_SENT && op->fan->f.from)
        fan_step(op);
    leave(a);
}

/* Records a fault of server i in the next feed; from the loop when not
 * stepping already (the connection's teardown goes on around it). */
static void fan_fault(aop *op, int i, relock__fault fault, relock_status st, const char *text)
{
    afan *F = op->fan;
    relock__feed *sf = &F->f.srv[i];
    F->f.from |= 1u << i;
    sf->nreply = 0;
    sf->fault = fault;
    sf->fault_status = st ? st : RELOCK_EIO;
    sf->fault_text = NULL;
    if (text) {
        snprintf(F->text[i], sizeof F->text[0], "%s", text);
        sf->fault_text = F->text[i];
    }
}

/* Server i's connection failed under op's live request rq (already out of
 * the FIFO): rq goes, and the fault is fed from the loop. */
static void fan_gone(aop *op, areq *rq, relock__fault fault, relock_status st, const char *text)
{
    afan *F = op->fan;
    int i = rq->cn->idx;
    if (F && F->rq[i] == rq) {
        F->rq[i] = NULL;
        fan_fault(op, i, fault, st, text);
        if (!F->kick)
            F->kick = timer_start(op->a, 0, fan_kick_fire, op);
    }
    rq_clear(rq);
    free(rq);
}

/* Server i answered op's request rq wholly (rq is out of the FIFO). */
static void fan_reply(aop *op, areq *rq)
{
    afan *F = op->fan;
    int i = rq->cn->idx;
    if (!F || F->rq[i] != rq) {
        rq_clear(rq);
        free(rq);
        return;
    }
    F->rq[i] = NULL;
    int missing = rq->nrep < rq->expect;
    for (int k = 0; k < rq->nrep; k++)
        missing |= !rq->rep[k];
    if (missing) {
        rq_clear(rq);
        free(rq);
        fan_fault(op, i, RELOCK__FAULT_LOST, RELOCK_ENOMEM, "out of memory for a reply");
    } else {
        relock__feed *sf = &F->f.srv[i];
        F->f.from |= 1u << i;
        memset(sf, 0, sizeof *sf);
        /* the replies stay in rq until the machine has read them */
        F->rq[i] = rq;
        rq->outstanding = -1; /* answered: fed, then freed */
        sf->reply = rq->rep;
        sf->nreply = rq->nrep;
    }
    F->f.mono_ms = now_ms();
    fan_step(op);
}

static void fan_timer_fire(void *arg)
{
    aop *op = arg;
    relock_async *a = op->a;
    op->fan->timer = NULL;
    enter(a);
    if (!a->freeing && op->state == S_SENT) {
        op->fan->f.mono_ms = now_ms();
        fan_step(op);
    }
    leave(a);
}

/* Drops a quorum connection; late: left alone for timeout_ms. */
static void fan_drop(aconn *cn, const char *why, uint64_t now, long long late_ms)
{
    if (cn->ac)
        conn_gone(cn, 0, RELOCK_EIO, why);
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
    enter(a);
    char why[300];
    snprintf(why, sizeof why, "AUTH/SELECT: %.150s", r->str ? r->str : "");
    /* a transient error is a connection that failed, not a refusal */
    conn_gone(cn, 0, transient_reply(r->str) ? RELOCK_EIO : RELOCK_ECONFIG, why);
    leave(a);
}

/* Appends one formatted command of a quorum connection's setup. */
static int fan_setup_cmd(aconn *cn, int argc, const char **argv, int login)
{
    size_t len[4];
    for (int i = 0; i < argc; i++)
        len[i] = strlen(argv[i]);
    char *cmd = NULL;
    int fl = redisFormatCommandArgv(&cmd, argc, argv, len);
    if (fl < 0)
        return -1;
    cn->appended += (uint64_t)fl;
    /* priv: non-NULL for AUTH and SELECT, whose refusal matters */
    int rc = redisAsyncFormattedCommand(cn->ac, on_fan_setup, login ? (void *)cn : NULL, cmd,
                                        (size_t)fl);
    free(cmd);
    return rc == REDIS_OK ? 0 : -1;
}

/* Opens a quorum connection and pipelines its setup; 0, or -1. */
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
    cn->appended = 0;
    cn->connected = 0;
    cn->cstate = C_READY; /* commands wait in hiredis's buffer until it is up */
    a->c->connects++;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    cn->conn_timer = timer_start(a, a->c->s.connect_timeout_ms, conn_timeout, cn);
    int bad = 0;
    if (srv->password[0]) {
        const char *argv[3] = {"AUTH", srv->username[0] ? srv->username : srv->password,
                               srv->password};
        bad |= fan_setup_cmd(cn, srv->username[0] ? 3 : 2, argv, 1);
    }
    if (srv->db) {
        char db[16];
        snprintf(db, sizeof db, "%d", srv->db);
        const char *argv[2] = {"SELECT", db};
        bad |= fan_setup_cmd(cn, 2, argv, 1);
    }
    for (size_t k = 0; k < sizeof quorum_scripts / sizeof quorum_scripts[0]; k++) {
        const char *argv[3] = {"SCRIPT", "LOAD", relock__script_source(quorum_scripts[k])};
        bad |= fan_setup_cmd(cn, 3, argv, 0);
    }
    if (bad) {
        conn_gone(cn, 0, RELOCK_ENOMEM, "out of memory");
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
    for (int k = 0; k < b->n; k++) {
        const relock__cmd *cmd = &b->cmd[k];
        int fl = redisFormatCommandArgv(&rq->cmd[k], cmd->argc, (const char **)cmd->argv,
                                        cmd->len);
        if (fl < 0) {
            rq_clear(rq);
            free(rq);
            return NULL;
        }
        rq->len[k] = (size_t)fl;
        rq->n = k + 1;
    }
    return rq;
}

/* A new round's batch to server i: the connection checked (owed replies,
 * lateness), opened if needed, and the batch written; 0, or -1 when the
 * server is not reached (down, left alone after being late, failing).
 * after: the batch undoes what earlier requests may have done (fan.h): it
 * goes behind them on their connection however late they are, and to a
 * new one only when that connection is gone. */
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
        if (owed > 0 && (owed >= MAX_OWED || now - oldest > (uint64_t)timeout_ms))
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
    rq_send(rq);
    return 0;
}

/* The round is decided at now: a server still silent owes its replies if
 * its batch was written, in time or late (it may still run the request,
 * and a clean-up must follow it on this connection; a server too far
 * behind is dropped when a later round would use it), else its connection
 * is dropped. */
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
            rq_clear(rq);
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
            rq_clear(F->rq[i]);
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
static void fan_end(aop *op)
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
static void fan_begin(aop *op)
{
    if (!op->fan) {
        op->fan = calloc(1, sizeof *op->fan + (size_t)op->a->nconns * sizeof op->fan->text[0]);
        if (!op->fan) {
            machine_done(op, op_fail(op, RELOCK_ENOMEM, "lock %s: out of memory",
                                     op->l ? op->l->name : ""));
            return;
        }
    } else {
        fan_end(op);
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
    fan_undue(op); /* its first feed is now, whatever brought it */
    for (;;) {
        fan_flush(op); /* what the socket did not take whole yet */
        F->f.written = fan_written(F, n);
        err_load(op);
        relock__step s = a->kit->fan(op->m, op->l, &F->f, out);
        err_save(op);
        uint64_t fed_at = F->f.mono_ms;
        fan_reset_feed(op);
        if (s == RELOCK__STEP_DONE) {
            fan_close_round(op, fed_at);
            op->state = S_RUN;
            machine_done(op, h->st);
            return;
        }
        int bad = ++F->feeds >= RELOCK__FAN_MAX_FEEDS;
        for (int i = 0; s == RELOCK__STEP_SEND && i < n; i++)
            if ((out->mask >> i) & 1u)
                bad |= !relock__batch_ok(&out->b[i]) || out->b[i].n < 1;
        if (bad) {
            fan_close_round(op, fed_at);
            op->state = S_RUN;
            machine_done(op, op_fail(op, RELOCK_EPROTO, "lock %s: internal error: %s",
                                     op->l->name,
                                     F->feeds >= RELOCK__FAN_MAX_FEEDS
                                         ? "an operation did not end"
                                         : "a command batch overflowed"));
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
                rq_send(rq);
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
static void fan_undue(aop *op)
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
        int done = 0;
        if (cn->ac && cn->connected && !cn->ac->c.err && cn->ac->c.obuf &&
            sdslen(cn->ac->c.obuf) > 0)
            (void)redisBufferWrite(&cn->ac->c, &done);
    }
}

/* The first feeds of the quorum rounds started together: every connection
 * flushed once (under one SIGPIPE block), then each round fed, in the
 * order started, with what was written.  As fan_step's own flush before
 * a round's first feed, for many rounds at the cost of one write per
 * connection. */
static void fan_due_run(relock_async *a)
{
    if (!a->fan_due || a->freeing)
        return;
    relock__write_nopipe(flush_all, a);
    while (a->fan_due && !a->freeing) {
        aop *op = a->fan_due;
        fan_undue(op);
        if (op->state == S_SENT && op->fan)
            fan_step(op);
    }
}

/* ------------------------------------------------------------------ starting */

static void kick_fire(void *arg)
{
    aconn *cn = arg;
    relock_async *a = cn->a;
    cn->kick_timer = NULL;
    enter(a);
    if (cn->cstate == C_READY && !a->fatal)
        queue_flush(cn);
    leave(a);
}

/* Runs op's first step (the client is ready). */
static void op_start(aop *op)
{
    relock_async *a = op->a;
    if (a->fatal) {
        if (!op->err)
            op->err = malloc(sizeof *op->err);
        if (op->err)
            relock__err_copy(op->err, &a->fatal_err);
        op_finish(op, a->fatal);
        return;
    }
    if (op->kind == K_ACQ) {
        relock_client *c = a->c;
        relock_lock *l = op->l;
        char before[RELOCK__KEY_MAX];
        note_watching(a, op->cn); /* scan's evidence, before the first attempt */
        /* (a quorum's machine carries the counter over itself) */
        if (!a->kit->fan && !(c->mode == RELOCK_MODE_MODERN && !c->s.fencing) &&
            relock__fence_key_before(l->key, before, sizeof before) == 1) {
            fence_wrap *w = malloc(sizeof *w);
            if (!w) {
                op_finish(op, op_fail(op, RELOCK_ENOMEM, "acquire: out of memory"));
                return;
            }
            memcpy(w->before, before, sizeof before);
            relock__fence_carry_init(&w->m, w->before);
            op->m = w;
            op->fn = relock__fence_carry_step;
            op->fencing = 1;
            machine_start(op);
            return;
        }
        op->m = malloc(a->kit->acq_size);
        if (!op->m) {
            op_finish(op, op_fail(op, RELOCK_ENOMEM, "acquire: out of memory"));
            return;
        }
        /* The holder that just released usually wins the race back against
         * the waiters it woke: give them a moment, as the blocking acquire. */
        long long yield = op->wait_ms != 0 ? relock__yield_ms(l) : 0;
        if (yield > 0) {
            op->state = S_SLEEP;
            op->timer = timer_start(a, yield, sleep_fire, op);
            if (op->timer)
                return;
        }
        attempt_begin(op);
        return;
    }
    relock_lock *l = op->l;
    if (op->kind == K_REL && l->lost) {
        op_finish(op, op_fail(op, RELOCK_LOST, "release %s: the lock was already lost", l->name));
        return;
    }
    if ((op->kind == K_EXT || op->kind == K_KEEP) && l->lost) {
        op_finish(op, op_fail(op, RELOCK_LOST, "extend %s: the lock was already lost", l->name));
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
    op->m = malloc(a->kit->upd_size);
    relock__err_clear(&a->c->err);
    relock_status st = op->m ? a->kit->upd_init(op->m, l, op->kind != K_REL, op->wait_ms)
                             : RELOCK_ENOMEM;
    if (st != RELOCK_OK) {
        err_save(op);
        op_finish(op, st);
        return;
    }
    if (op->kind == K_REL)
        l->waiters = 0;
    op->fn = a->kit->upd_step;
    machine_start(op);
}

/* A quorum's operations queued until now start (those queued meanwhile
 * wait for the timer they armed), their rounds' batches flushed together. */
static void start_fire(void *arg)
{
    relock_async *a = arg;
    a->start_timer = NULL;
    enter(a);
    aop *last = a->starting_tail;
    a->batching++;
    while (a->starting && !a->freeing) {
        aop *op = a->starting;
        a->starting = op->start_next;
        if (!a->starting)
            a->starting_tail = NULL;
        op->in_start = 0;
        op->start_next = NULL;
        if (op->state == S_NEW)
            op_start(op);
        if (op == last)
            break;
    }
    a->batching--;
    fan_due_run(a);
    leave(a);
}

/* A new operation starts from the loop: with one server when its
 * connection is ready; with a quorum at the next turn (the fan driver
 * connects each server as a round needs it). */
static void op_schedule(aop *op)
{
    relock_async *a = op->a;
    if (a->kit && a->kit->fan) {
        if (!a->start_timer)
            a->start_timer = timer_start(a, 0, start_fire, a);
        if (!a->start_timer) {
            op_finish(op, op_fail(op, RELOCK_ENOMEM, "out of memory"));
            return;
        }
        op->in_start = 1;
        start_push_(&a->starting, &a->starting_tail, op);
        return;
    }
    op->cn = route(a, op->l ? op->l->key : NULL);
    conn_wants(op->cn, op);
}

/* Before a call starts a quorum's operation: the shared start timer armed,
 * so that op_schedule() cannot fail and end the operation (its callback)
 * from within the call.  0 when the loop refuses the timer. */
static int start_armed(relock_async *a)
{
    if (!a->kit || !a->kit->fan || a->start_timer)
        return 1;
    a->start_timer = timer_start(a, 0, start_fire, a);
    return a->start_timer != NULL;
}

/* Queues a new operation; it starts from the loop. */
static void op_enqueue(aop *op)
{
    relock_async *a = op->a;
    op->next = a->ops;
    if (a->ops)
        a->ops->prev = op;
    a->ops = op;
    a->pending++;
    op->state = S_NEW;
    op_schedule(op);
}

static aop *op_new(relock_async *a, int kind, relock_async_fn cb, void *arg)
{
    aop *op = calloc(1, sizeof *op);
    if (!op)
        return NULL;
    op->a = a;
    op->cn = &a->conns[0]; /* one server */
    op->kind = kind;
    op->cb = cb;
    op->arg = arg;
    op->acked = -1;
    return op;
}

/* ------------------------------------------------------------------ renewal */

static void keep_tick(void *arg)
{
    relock_lock *l = arg;
    struct relock__alock *al = l->al;
    relock_async *a = al->a;
    al->keep_timer = NULL;
    enter(a);
    if (al->kept && !al->busy && !a->freeing) {
        aop *op = op_new(a, K_KEEP, NULL, NULL);
        if (op) {
            op->l = l;
            op->wait_ms = l->ttl_ms;
            al->busy = op;
            op_enqueue(op);
        } else {
            al->keep_timer = timer_start(a, 10, keep_tick, l);
        }
    }
    leave(a);
}

/* The next renewal: a third of the ttl from now, or sooner while the
 * validity left is short (lease.h), as relock_keep()'s thread does. */
static void keep_arm(struct relock__alock *al, relock_lock *l)
{
    al->keep_timer = timer_start(al->a, relock__renew_wait_ms(l->ttl_ms, l->valid_until, now_ms()),
                                 keep_tick, l);
}

static void lost_fire(void *arg);

/* The loss deadline at the end of the validity as of the last renewal. */
static void deadline_arm(struct relock__alock *al, relock_lock *l)
{
    timer_stop(al->a, &al->lost_timer);
    uint64_t now = now_ms();
    long long left = al->keep_valid > now ? (long long)(al->keep_valid - now) : 0;
    al->lost_timer = timer_start(al->a, left, lost_fire, l);
}

/* The renewal stops for good; the program hears of it once. */
static void keep_lose(relock_async *a, relock_lock *l, relock_status why, const relock_error *e)
{
    struct relock__alock *al = l->al;
    timer_stop(a, &al->keep_timer);
    timer_stop(a, &al->lost_timer);
    al->kept = 0;
    al->keep_lost = 1;
    relock__event(a->c, RELOCK_EVENT_LOST, l, why, 0);
    if (al->on_lost)
        al->on_lost(a, l, why, e, al->lost_arg);
}

/* The validity ran out and no renewal succeeded since it was computed:
 * the lock is reported lost now, not when the renewal in flight (a stalled
 * server, a connect that hangs) ends; its end changes nothing any more. */
static void lost_fire(void *arg)
{
    relock_lock *l = arg;
    struct relock__alock *al = l->al;
    relock_async *a = al->a;
    al->lost_timer = NULL;
    if (!al->kept || al->keep_lost || a->freeing)
        return;
    if (now_ms() < al->keep_valid) { /* the loop's timer came early */
        deadline_arm(al, l);
        return;
    }
    enter(a);
    relock__err e;
    relock__err_clear(&e);
    relock_status why = al->fail_st;
    if (why != RELOCK_OK) {
        relock__err_copy(&e, &al->fail_err);
    } else {
        why = RELOCK_EIO;
        RELOCK__FAIL(&e, why,
                     "keep %s: no renewal succeeded within the lock's validity (the server did "
                     "not answer in time)",
                     l->name);
    }
    keep_lose(a, l, why, &e.pub);
    leave(a);
}

/* A renewal of l ended with st (e its detail): the next one is timed, a
 * failed one retried soon while validity remains, a loss reported. */
static void keep_after(relock_async *a, relock_lock *l, relock_status st, const relock_error *e)
{
    struct relock__alock *al = l->al;
    if (!al || !al->kept || al->keep_lost)
        return;
    if (st == RELOCK_OK) {
        al->keep_valid = l->valid_until;
        al->fail_st = RELOCK_OK;
        relock__event(a->c, RELOCK_EVENT_RENEWED, l, RELOCK_OK, 0);
        keep_arm(al, l);
        deadline_arm(al, l);
        return;
    }
    /* A failed extend may have lowered the validity (one whose outcome is
     * unknown counts the shorter of the old and the new lease): the
     * deadline follows it down, never up. */
    if (l->valid_until < al->keep_valid) {
        al->keep_valid = l->valid_until;
        deadline_arm(al, l);
    }
    if (st == RELOCK_LOST || now_ms() >= al->keep_valid) {
        keep_lose(a, l, st, e);
        return;
    }
    /* Not answered, refused, a transient error, the client unusable for
     * now: again soon, while valid (the deadline reports the loss). */
    al->fail_st = st;
    relock__event(a->c, RELOCK_EVENT_RENEW_FAILED, l, st, 0);
    relock__err_clear(&al->fail_err);
    RELOCK__FAIL_SRV(&al->fail_err, st, e->server, "%s", e->message);
    long long again = l->ttl_ms / 10;
    al->keep_timer = timer_start(a, again < 10 ? 10 : again, keep_tick, l);
}

/* ------------------------------------------------------------------ public */

static const relock_error *null_err(void)
{
    return &relock__null_handle_error;
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
    if (!a)
        return RELOCK_ENOMEM;
    relock__err_clear(&a->err);
    relock_client *c = calloc(1, sizeof *c);
    if (!c) {
        free(a);
        return RELOCK_ENOMEM;
    }
    *out = a;
    a->c = c;
    memcpy(&a->loop, loop, loop->size < sizeof a->loop ? loop->size : sizeof a->loop);
    a->loop.size = sizeof a->loop;
    relock__err_clear(&c->err);
    c->s = cfg->s;
    c->conn.srv = &c->s.servers[0];
    relock__scripts_init(c);
    char tok[33];
    uint64_t seed = relock__mono_ms() ^ (uint64_t)(uintptr_t)a;
    if (relock__token(tok) == 0)
        for (int i = 0; i < 16; i++)
            seed = seed * 31u + (unsigned char)tok[i];
    c->rng = seed ? seed : 1;
    c->replicas_acked = -1;
    snprintf(c->mode_reason, sizeof c->mode_reason,
             "this lock belongs to an asynchronous client: use relock_async_*()");
    /* A connection per server, none open yet; one server may be a Cluster
     * node, and the others met get theirs (node_conn). */
    int nconns = c->s.nservers > 0 ? c->s.nservers : 1;
    a->ncap = nconns == 1 && !relock__sentinel_on(&c->s) ? ACONN_NODES : nconns;
    a->conns = calloc((size_t)a->ncap, sizeof *a->conns);
    if (!a->conns) {
        a->fatal = RELOCK__FAIL(&a->err, RELOCK_ENOMEM, "out of memory");
        relock__err_copy(&a->fatal_err, &a->err);
        return a->fatal;
    }
    a->nconns = nconns;
    for (int i = 0; i < nconns; i++) {
        a->conns[i].a = a;
        a->conns[i].idx = i;
        a->conns[i].srv = &c->s.servers[i];
    }
    a->home = &a->conns[0];
    if (relock__sentinel_on(&c->s)) {
        /* Sentinel: the connection goes to the master the sentinels name */
        a->conns[0].node = c->s.servers[0];
        a->conns[0].srv = &a->conns[0].node;
    }
    if (c->s.nservers > 1) {
        /* A quorum: the blocking client's checks (relock_connect), the
         * mode fixed (modern values), no probe; connections open as the
         * first round needs them. */
        relock_status st = RELOCK_OK;
        if (relock__durable_on(c) || c->s.lock_delay_ms > 0)
            st = RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                              "%s: not with several servers (a quorum); configure one server, "
                              "or turn it off",
                              relock__durable_on(c) ? "durability" : "lock_delay_ms");
        if (st == RELOCK_OK)
            st = relock__quorum_setup(c);
        a->fanout = st == RELOCK_OK ? malloc(sizeof *a->fanout) : NULL;
        if (st == RELOCK_OK && !a->fanout)
            st = RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "servers: out of memory");
        c->algo = NULL; /* the blocking calls must not run on this client's locks */
        if (st != RELOCK_OK) {
            relock__err_copy(&a->err, &c->err);
            a->fatal = st;
            relock__err_copy(&a->fatal_err, &a->err);
            return st;
        }
        a->kit = &kit_quorum;
        a->probed = 1;
    }
    if (!a->kit)
        conn_connect(&a->conns[0]);
    return RELOCK_OK;
}

const relock_error *relock_async_error(const relock_async *a)
{
    return a ? &a->err.pub : null_err();
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

static relock_status refuse(relock_async *a, relock_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
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

relock_status relock_async_acquire(relock_async *a, const char *name, long long ttl_ms, long long wait_ms,
                                   relock_async_fn cb, void *arg, relock_async_op **opp)
{
    if (opp)
        *opp = NULL;
    if (!a)
        return RELOCK_EINVAL;
    if (a->freeing)
        return RELOCK_EINVAL;
    relock__err_clear(&a->err);
    if (a->fatal) {
        relock__err_copy(&a->err, &a->fatal_err);
        return a->fatal;
    }
    if (!cb)
        return refuse(a, RELOCK_EINVAL, "acquire: no callback");
    if (wait_ms == RELOCK_WAIT_DEFAULT)
        wait_ms = a->c->s.wait.max_ms;
    if (wait_ms < RELOCK_WAIT_FOREVER)
        return refuse(a, RELOCK_EINVAL, "wait: %lld ms is not a valid bound", wait_ms);
    if (!start_armed(a))
        return refuse(a, RELOCK_ENOMEM, "acquire %s: out of memory for a timer", name);
    relock_lock *l;
    relock__err_clear(&a->c->err);
    relock_status st = relock__lock_new(a->c, name, ttl_ms, &l);
    if (st != RELOCK_OK) {
        relock__err_copy(&a->err, &a->c->err);
        return st;
    }
    aop *op = op_new(a, K_ACQ, cb, arg);
    if (!op || !alock(a, l)) {
        free(op);
        relock_lock_free(l);
        return refuse(a, RELOCK_ENOMEM, "acquire %s: out of memory", name);
    }
    op->l = l;
    l->al->busy = op;
    op->wait_ms = wait_ms;
    op->began = now_ms();
    op->deadline = wait_ms > 0 ? op->began + (uint64_t)wait_ms : 0;
    op_enqueue(op);
    if (opp)
        *opp = (relock_async_op *)op;
    return RELOCK_OK;
}

relock_status relock_async_try_acquire(relock_async *a, const char *name, long long ttl_ms,
                                       relock_async_fn cb, void *arg, relock_async_op **op)
{
    return relock_async_acquire(a, name, ttl_ms, 0, cb, arg, op);
}

static void cancel_fire(void *arg)
{
    aop *op = arg;
    relock_async *a = op->a;
    op->timer = NULL;
    enter(a);
    op_finish(op, op_fail(op, RELOCK_ECANCELED, "acquire %s: cancelled", op->l->name));
    leave(a);
}

relock_status relock_async_cancel(relock_async_op *h)
{
    aop *op = (aop *)h;
    if (!op || op->kind != K_ACQ)
        return RELOCK_EINVAL;
    if (op->cancelled || op->state == S_DONE)
        return RELOCK_OK;
    relock_async *a = op->a;
    op->cancelled = 1;
    if (op->state == S_SLEEP || op->state == S_NEW || op->state == S_SUBSCRIBING) {
        /* nothing of it in flight: it ends at the next turn of the loop */
        timer_stop(a, &op->timer);
        if (op->state == S_NEW)
            queue_remove(op->cn, op);
        chan_leave(op);
        op->state = S_SLEEP;
        op->timer = timer_start(a, 0, cancel_fire, op);
    } else if (op->state == S_QUEUED && !op->sent_any) {
        queue_remove(op->redir ? op->redir : op->cn, op);
        batch_clear(op);
        op->state = S_SLEEP;
        op->timer = timer_start(a, 0, cancel_fire, op);
    }
    /* S_SENT, S_QUEUED after a write, S_SUBSCRIBING: when the step ends */
    return RELOCK_OK;
}

static relock_status lock_op(relock_lock *l, int kind, long long ttl_ms, relock_async_fn cb,
                             void *arg)
{
    if (!l || !l->al || !l->al->a)
        return RELOCK_EINVAL;
    struct relock__alock *al = l->al;
    relock_async *a = al->a;
    if (a->freeing)
        return RELOCK_EINVAL;
    relock__err_clear(&a->err);
    if (a->fatal) {
        relock__err_copy(&a->err, &a->fatal_err);
        return a->fatal;
    }
    if (!cb)
        return refuse(a, RELOCK_EINVAL, "%s: no callback", kind == K_REL ? "release" : "extend");
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
                      kind == K_REL ? "release" : "extend", l->name);
    if (!start_armed(a))
        return refuse(a, RELOCK_ENOMEM, "%s %s: out of memory for a timer",
                      kind == K_REL ? "release" : "extend", l->name);
    aop *op = op_new(a, kind, cb, arg);
    if (!op)
        return refuse(a, RELOCK_ENOMEM, "%s: out of memory", l->name);
    op->l = l;
    op->wait_ms = ttl_ms;
    if (kind == K_REL) {
        int was_lost = al->keep_lost;
        timer_stop(a, &al->keep_timer);
        timer_stop(a, &al->lost_timer);
        al->kept = 0;
        if (was_lost)
            l->lost = 1;
    }
    if (al->busy) { /* a renewal in flight: the release follows it */
        op->next = a->ops;
        if (a->ops)
            a->ops->prev = op;
        a->ops = op;
        a->pending++;
        op->state = S_NEW;
        al->after = op;
        return RELOCK_OK;
    }
    al->busy = op;
    op_enqueue(op);
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
    al->kept = 1;
    al->keep_lost = 0;
    al->on_lost = on_lost;
    al->lost_arg = arg;
    al->keep_valid = l->valid_until;
    al->fail_st = RELOCK_OK;
    keep_arm(al, l);
    deadline_arm(al, l);
    return RELOCK_OK;
}

relock_status relock_async_keep_stop(relock_lock *l)
{
    if (!l || !l->al || !l->al->a)
        return RELOCK_EINVAL;
    struct relock__alock *al = l->al;
    timer_stop(al->a, &al->keep_timer);
    timer_stop(al->a, &al->lost_timer);
    al->kept = 0;
    if (al->keep_lost) {
        l->lost = 1;
        return RELOCK__FAIL(&al->a->err, RELOCK_LOST, "keep %s: the lock was lost", l->name);
    }
    return RELOCK_OK;
}

/* ------------------------------------------------------------------ freeing */

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
        batch_clear(&cn->setup);
    }
    loc_stop(a);
    batch_clear(&a->slots_rd);
    memset(a->conns, 0, (size_t)a->ncap * sizeof *a->conns); /* node entries hold passwords */
    free(a->conns);
    free(a->slots);
    if (a->sub) {
        redisAsyncContext *s = a->sub;
        a->sub = NULL;
        s->data = NULL;
        redisAsyncFree(s);
    }
    chan_free_all(a);
    free(a->fanout);
    relock_client *c = a->c;
    if (c->q) {
        relock__quorum_free(c);
        free(c->q);
    }
    memset(c, 0xa5, sizeof *c); /* settings hold passwords */
    free(c);
    memset(a, 0xa5, sizeof *a);
    free(a);
}

void relock_async_free(relock_async *a)
{
    if (!a || a->freeing)
        return;
    a->freeing = 1;
    enter(a);
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
                rq_clear(rq);
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
     * rounds awaiting the shared flush go whole, as the queues above:
     * taking each operation out of them alone would walk them once per
     * operation (a->ops is newest first, these oldest first). */
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
        relock_status st = RELOCK_ECANCELED;
        const char *why = "cancelled: the client was freed";
        /* (a quorum's attempt that reached no server sent nothing) */
        if ((op->state == S_SENT && (!op->fan || op->sent_any)) ||
            (op->state == S_QUEUED && op->sent_any) || op->undoing) {
            if (op->kind == K_ACQ) {
                st = RELOCK_EAMBIGUOUS;
                why = "the client was freed while an attempt was in flight: the lock may be "
                      "held until its TTL ends";
            } else if (op->kind != K_KEEP) {
                st = RELOCK_EAMBIGUOUS;
                why = "the client was freed while the request was in flight: its outcome is "
                      "unknown";
            }
        }
        free(op->err);
        op->err = NULL;
        op_fail(op, st, "%s %s: %s",
                op->kind == K_ACQ ? "acquire" : op->kind == K_REL ? "release" : "extend",
                op->l ? op->l->name : "", why);
        op->ch = NULL; /* the channels go with the client */
        op_finish(op, st);
    }
    /* Locks outlive the client: their renewals stop; they can be freed. */
    for (struct relock__alock *al = a->alocks; al;) {
        struct relock__alock *next = al->next;
        timer_stop(a, &al->keep_timer);
        timer_stop(a, &al->lost_timer);
        al->kept = 0;
        al->a = NULL;
        al->prev = al->next = NULL;
        al = next;
    }
    a->alocks = NULL;
    leave(a);
}

