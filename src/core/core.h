/*
 * The event-driven operation core: the lock engine's step machines on
 * hiredis's asynchronous contexts, for the asynchronous client and, through
 * a private poll loop (pollloop.c, K_RUN operations), the blocking calls.
 *
 * A connection carries every operation, pipelined: a batch is written when
 * its machine asks, and its complete replies feed the machine's next step.
 * Release notices (SUBSCRIBE) use a second connection, open while someone
 * waits.  A batch marked in_txn makes its operation the connection's owner
 * (design.md §13.3): the others' batches wait, since the server would queue
 * them inside the transaction, and a connection lost meanwhile is never
 * replaced under it.  A connection that fails, or whose oldest batch gets
 * no reply within command_timeout_ms, is dropped: its batches are fed back
 * as LOST (UNSENT when it never came up) and the machines decide.
 *
 * Operations interleave, so each keeps its own error, moved onto the
 * client's (where machines write) around each of its steps.
 */

#ifndef RELOCK_CORE_H
#define RELOCK_CORE_H

#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/loop.h"
#include "engine/engine.h"
#include "engine/waitplan.h"
#include "fence.h"
#include "algo.h"
#include "clock.h"
#include "durable.h"
#include "modern.h"
#include "ownrec.h"
#include "probe.h"
#include "quorum.h"
#include "relock_async.h"

/* K_RUN: the caller's step machine, for the blocking API (relock__a_run_step()). */
enum op_kind { K_SETUP = 1, K_ACQ, K_REL, K_EXT, K_KEEP, K_SLOTS, K_RUN, K_SCAN };

enum op_state {
    S_NEW = 0,    /* started, first step not run */
    S_QUEUED,     /* a batch formatted, waiting for the connection */
    S_SENT,       /* a batch in flight */
    S_SUBSCRIBING, /* waiting for its release channel's subscription */
    S_SLEEP,      /* waiting between attempts */
    S_RUN,        /* its machine is being stepped */
    S_DONE
};

typedef struct achan achan;
typedef struct aconn aconn;
typedef struct aop aop;

/* A batch written on a connection and its replies as they come; a
 * connection's requests in flight form its FIFO, in the server's order. */
typedef struct areq {
    aop *op;             /* whose batch it is; NULL: owed, read and dropped */
    aconn *cn;           /* the connection it goes on */
    struct areq *fnext;  /* the connection's FIFO, oldest first */
    /* Room for cap commands, lengths and replies: own_* below, or one
     * allocation for a wider batch until relock__a_rq_clear(); NULL in a
     * request never formatted. */
    char **cmd;
    size_t *len;
    redisReply **rep;
    int cap;
    int n; /* commands; kept until the batch is answered (a redirection sends some again) */
    /* The commands being sent: base..n-1, or with ask ASKING and cmd[base]
     * alone (a redirection answered the earlier ones' part: see relock__a_follow()). */
    int base;
    int ask;
    int got; /* replies to the current sending */
    int nrep;
    int outstanding;
    int expect; /* replies its batch asks for */
    uint64_t sent_at;
    uint64_t start_off, end_off; /* its bytes in the connection's output */
    long long slow_ms; /* a WAIT's own timeout, added to the command timeout */
    char *own_cmd[RELOCK__BATCH_OWN];
    size_t own_len[RELOCK__BATCH_OWN];
    redisReply *own_rep[RELOCK__BATCH_OWN];
} areq;

typedef struct afan afan;

/* What an operation's machine is doing (next_phase(), operation.c). */
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
    size_t m_size;    /* m's bytes when it is the client's to keep (m_get()), else 0 */
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
    uint64_t began; /* when it was asked: the acquired event's wait, a failed extend's bound */
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
    /* The connection generation the write went out on, which WAIT must use
     * (wset once known; wmoved when on more than one). */
    unsigned wgen;
    int wset, wmoved;
    int acked; /* replicas that acknowledged the write; -1: no WAIT sent */
    /* extend: the validity before, the bound when the replicas did not
     * acknowledge the new one (decision 104) */
    uint64_t was_valid;
    long long was_ttl;
    int owner_gone; /* release: the owner record was deleted first */
    relock__err *kept; /* the undone acquire's error, during PH_UNDO */
    relock_status kept_st;
    /* legacy.clock = "server": the clock machine runs first; the main
     * machine's replies wait in held */
    int clocking;
    relock__clock_m clk;
    int clock_fresh; /* the clock was measured for the next feed */
    redisReply *held[RELOCK__BATCH_OWN]; /* (no wide batch asks for the clock) */
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
    void *lost_timer; /* the loss deadline, at keep_valid (lost_fire()) */
    /* the last failed renewal's outcome (RELOCK_OK: none since the last
     * success), reported if the deadline comes first; its detail is
     * allocated at the first failure (some 800 bytes) */
    relock_status fail_st;
    relock__err *fail_err;
};

/* Connections a client may have at once: its server's, and Cluster nodes'
 * met through redirections; beyond, an idle one is reused (node_conn). */
#define ACONN_NODES 16

enum conn_state { C_DOWN = 0, C_CONNECTING, C_SETUP, C_READY, C_LOCATING };

/* One connection to one server: conns[i] for c->s.servers[i], then on a
 * Redis Cluster one per node met through MOVED and ASK. */
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
    /* A connect that failed at once is reported from the loop: an
     * operation's callback must not run inside the call that started it. */
    char fail_why[300];
    void *kick_timer;
    aop setup;
    relock_lock probe_l; /* the lock the probe machine runs on */
    aop *txn_owner;
    areq *fifo, *fifo_tail; /* requests in flight, oldest first */
    aop *queue, *queue_tail; /* operations waiting for it */
    aop *walk, *walk_tail; /* taken from the queue, being walked (walk_take()) */
    /* a quorum's connection (no probe; its setup pipelined ahead) */
    uint64_t appended;  /* bytes given to hiredis on this context */
    uint64_t retry_at;  /* dropped for lateness: not reconnected before this */
    long long late_ms;  /* the last round timeout of a request sent on it */
    relock__clock_est clock; /* legacy.clock = "server": this server's (node's) clock */
    /* What this server's probe learned (probed: once it ran), read by a
     * machine running here: Cluster nodes may differ (a rolling upgrade). */
    int probed;
    relock__conn facts; /* its version and caps alone (facts_copy(), connection.c) */
};

struct relock_async {
    relock_client *c; /* settings, server facts, scripts: what machines read */
    relock_async_loop loop;
    relock__err err;
    const relock__machines *kit; /* the algorithm's machines, once chosen */
    relock_status fatal; /* the probe or the mode failed: every operation fails */
    int fatal_mode;      /* the mode (not the server) failed: scans run (scan.c) */
    relock__err fatal_err;
    int probed;
    /* the connections, one per server; with Cluster one per node met,
     * added up to ncap (a connection never moves: operations point at it) */
    aconn *conns;
    int nconns;
    int ncap;
    /* Cluster: the slot map (1 + the index of the master's connection; 0
     * unknown), made at the first MOVED; home: where an unknown slot goes */
    uint8_t *slots;
    aconn *home;
    aop slots_rd;     /* CLUSTER SLOTS in flight (K_SLOTS), when state is S_SENT */
    uint64_t slots_at; /* when it was last sent */
    int slots_stale;  /* a master could not be reached: read the map again */
    unsigned long slots_reads; /* maps read whole (relock__cluster_counts) */
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
    aop *ops; /* every live operation, every lock */
    struct relock__alock *alocks;
    long pending;
    redisAsyncContext *sub; /* release notices */
    int sub_at, sub_from; /* its server; where the next one starts looking */
    unsigned sub_gen;     /* counts the subscriber connections */
    achan *chans;
    unsigned chans_gen; /* counts the channels' frees: a walk of waiters stops at one */
    int nwaiting;
    relock__batch batch; /* the batch a machine fills */
    relock__fanout *fanout; /* what a fan machine fills, with a quorum */
    /* A quorum's new operations start together from one timer (starting);
     * their rounds' first feeds wait in fan_due until every connection was
     * flushed once (fan_due_run). */
    void *start_timer;
    aop *starting, *starting_tail;
    int batching;
    aop *fan_due, *fan_due_tail;
    int max_owed; /* owed requests putting a quorum's connection behind; 0: fanout.c's */
    int borrowed; /* c is the blocking client's, which owns it (pollloop.c) */
    relock_status (*select_mode)(relock_client *c); /* after the first probe */
    int direct; /* the caller flushes the queue itself at once (pollloop.c): no kick */
    /* a blocking one-server client's: a setup the server refuses fails the
     * call that waits for it, not the client (the next call tries again) */
    int percall;
    /* A finished operation's memory, for the next one (a blocking call's
     * allocations cost a tenth of its instructions). */
    aop *spare;
    /* Finished operations' machines of spare_m_size bytes: a machine is
     * over a kilobyte, past malloc's per-thread caches, and an allocation
     * of that size costs an uncontended cycle some 4 % of its instructions. */
    void *spare_m[4];
    int nspare_m;
    size_t spare_m_size;
    int depth; /* callbacks of this client running (relock__a_enter()) */
    int freeing;
};

/* Singly linked lists by head, tail and a link field: push at the tail, remove. */
#define SLIST_FNS(name, type, link)                                                    \
    static inline void name##_push_(type **head, type **tail, type *n)                 \
    {                                                                                  \
        n->link = NULL;                                                                \
        if (*tail)                                                                     \
            (*tail)->link = n;                                                         \
        else                                                                           \
            *head = n;                                                                 \
        *tail = n;                                                                     \
    }                                                                                  \
    static inline void name##_remove_(type **head, type **tail, type *n)               \
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

/* Doubly linked lists by head and two link fields: push at the head, remove. */
#define DLIST_FNS(name, type, prev, next)                                              \
    static inline void name##_add_(type **head, type *n)                               \
    {                                                                                  \
        n->prev = NULL;                                                                \
        n->next = *head;                                                               \
        if (*head)                                                                     \
            (*head)->prev = n;                                                         \
        *head = n;                                                                     \
    }                                                                                  \
    static inline void name##_del_(type **head, type *n)                               \
    {                                                                                  \
        if (n->prev)                                                                   \
            n->prev->next = n->next;                                                   \
        else                                                                           \
            *head = n->next;                                                           \
        if (n->next)                                                                   \
            n->next->prev = n->prev;                                                   \
        n->prev = n->next = NULL;                                                      \
    }
DLIST_FNS(ops, aop, prev, next)
DLIST_FNS(waiters, aop, cprev, cnext)
DLIST_FNS(alocks, struct relock__alock, prev, next)
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

static inline uint64_t now_ms(void)
{
    return relock__mono_ms();
}

static inline void *timer_start(relock_async *a, long long ms, void (*fn)(void *), void *arg)
{
    return a->loop.timer_start(a->loop.data, ms < 0 ? 0 : ms, fn, arg);
}

static inline void timer_stop(relock_async *a, void **t)
{
    if (*t) {
        a->loop.timer_stop(a->loop.data, *t);
        *t = NULL;
    }
}

/* Forgets op's error (a new attempt or phase has its own). */
static inline void op_err_drop(aop *op)
{
    free(op->err);
    op->err = NULL;
}

/* connection.c */
const char *relock__a_sock_error(const redisAsyncContext *ac);
void relock__a_take_install(redisAsyncContext *ac);
void relock__a_enter(relock_async *a);
void relock__a_leave(relock_async *a);
void relock__a_rq_clear(areq *rq);
/* Room in rq, which holds no command or reply, for n commands and their
 * replies; 0, or -1 without memory or beyond RELOCK__BATCH_CMDS. */
int relock__a_rq_room(areq *rq, int n);
void relock__a_rq_reset(areq *rq);
static inline void relock__a_batch_clear(aop *op)
{
    relock__a_rq_clear(&op->rq);
}
void relock__a_queue_remove(aconn *cn, aop *op);
void relock__a_conn_wants(aconn *cn, aop *op);
aconn *relock__a_conn_find(relock_async *a, const char *host, int port);
void relock__a_queue_flush(aconn *cn);
void relock__a_conn_gone(aconn *cn, int hiredis_frees, relock_status st, const char *why);
void relock__a_rq_send(areq *rq);
void relock__a_send_now(aop *op);
void relock__a_submit(aop *op);
void relock__a_on_connect(const redisAsyncContext *ac, int status);
void relock__a_on_disconnect(const redisAsyncContext *ac, int status);
void relock__a_conn_timeout(void *arg);
void relock__a_conn_connect(aconn *cn);
void relock__a_setup_done(aconn *cn, relock_status st);
void relock__a_facts_load(relock_client *c, const aconn *cn);
void relock__a_setup_step(aop *su, const relock__feed *in);

/* routing.c */
int relock__a_map_on(const relock_async *a);
aconn *relock__a_node_conn(relock_async *a, const char *host, int port);
aconn *relock__a_route(relock_async *a, const char *key);
/* The masters in the slot map, the open connections, the maps read whole
 * (relock__cluster_counts(), for tests and the benchmark). */
void relock__a_cluster_counts(const relock_async *a, int *masters, int *open,
                              unsigned long *reads);
void relock__a_map_forget(aconn *cn);
void relock__a_map_trim(relock_async *a);
void relock__a_slots_done(aop *rd, relock__fault fault);
int relock__a_follow(aop *op);
void relock__a_loc_stop(relock_async *a);
void relock__a_loc_next(relock_async *a);
void relock__a_conn_drop(aconn *cn);
void relock__a_loc_bad_master(aconn *cn, relock_status st, const char *why);

/* notice.c */
void relock__a_chan_free_all(relock_async *a);
void relock__a_chan_leave(aop *op);
void relock__a_op_timer(void *arg);
void relock__a_sub_next(aop *op);
void relock__a_plan(aop *op, int after_subscribe);

/* operation.c */
/* A command in the protocol's form, in memory from malloc(), as
 * redisFormatCommandArgv() makes it but without its sprintf() per argument
 * (a third of a blocking cycle's instructions); its length, or -1 out of
 * memory or beyond RELOCK__CMD_ARGS words. */
int relock__a_fmt_cmd(char **out, int argc, const char *const *argv, const size_t *len);

/* op's error becomes a copy of e (stays as it was out of memory). */
void relock__a_err_keep(aop *op, const relock__err *e);
/* op's error becomes the client's, when the client has one. */
void relock__a_err_save(aop *op);
void relock__a_err_load(aop *op);
relock_status relock__a_op_fail(aop *op, relock_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void relock__a_op_finish(aop *op, relock_status st);
void relock__a_op_cancelled(aop *op);
void relock__a_attempt_begin(aop *op);
void relock__a_machine_done(aop *op, relock_status st);
void relock__a_op_feed(aop *op, relock__fault fault, relock_status fst, const char *ftext);
void relock__a_op_start(aop *op);
void relock__a_op_schedule(aop *op);
int relock__a_start_armed(relock_async *a);
void relock__a_op_link(aop *op);
void relock__a_op_enqueue(aop *op);
/* The AUTH and SELECT srv asks for on a new connection, as up to two
 * commands in cmd, whose words point into srv and db; returns how many. */
int relock__a_login(const relock__server *srv, char db[16], relock__cmd cmd[2]);
/* Cancels acquire op (not cancelled, not done): it ends with
 * RELOCK_ECANCELED at the next turn when nothing of it is in flight, else
 * when its step ends (a lock it won is released first). */
void relock__a_op_cancel(aop *op);
aop *relock__a_op_new(relock_async *a, int kind, relock_async_fn cb, void *arg);
relock_status relock__a_run_step(relock_async *a, relock_lock *l, relock__step_fn fn, void *m,
                                 relock_async_fn cb, void *arg);

/* fanout.c */
void relock__a_fan_gone(aop *op, areq *rq, relock__fault fault, relock_status st, const char *text);
void relock__a_fan_reply(aop *op, areq *rq);
void relock__a_fan_end(aop *op);
void relock__a_fan_begin(aop *op);
void relock__a_fan_undue(aop *op);
void relock__a_fan_due_run(relock_async *a);

/* scan.c */
relock_status relock__a_scan(relock_async *a, const char *match, relock_scan_key_fn fn,
                             void *fn_arg, relock_async_scan_fn cb, void *arg);
void relock__a_scan_next(aop *op, relock_status st);

/* renewal.c */
struct relock__alock *relock__a_alock(relock_async *a, relock_lock *l);
void relock__a_alock_free(relock_lock *l);
void relock__a_lock_op_end(aop *op);
void relock__a_deadline_arm(struct relock__alock *al, relock_lock *l);
void relock__a_keep_start(struct relock__alock *al, relock_lock *l, relock_async_lost_fn on_lost,
                          void *arg, int deadline);
void relock__a_keep_stop(struct relock__alock *al);
void relock__a_keep_after(relock_async *a, relock_lock *l, relock_status st, const relock_error *e);

#endif
