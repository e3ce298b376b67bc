/*
 * The blocking API's calls as a private poll loop over the operation core
 * (core.h), as curl_easy_perform() runs over curl's multi interface: each
 * call is an operation of an inner core client, a quorum's (c->q) or the
 * one-server runner's (c->p), and poll() turns until it completes.  A
 * quorum client runs its calls that are not fan machines (the server it
 * reports, inspect, the scan) on a one-server runner to its first server,
 * since the fan's client routes no call by key.
 *
 * An inner client shares the blocking client itself (its settings, scripts
 * and error) and owns its connections, which stay open between calls; the
 * loop turns only while a call runs.  Nothing here is shared between
 * clients or threads.
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "pollloop.h"
#include "routing.h"

/* A watched descriptor: what relock_async_socket_action() is told about.
 * Let go of (s NULL) when hiredis removes it, and freed after the turn,
 * since a turn may still hold it in its list of ready descriptors. */
typedef struct pwatch {
    struct pwatch *next;
    relock_async_socket *s; /* NULL: removed */
    int fd;
    int events; /* RELOCK_IO_READ, RELOCK_IO_WRITE */
    int up;     /* poll() reported it once: connected (or failed) */
    int blocking; /* 1: made blocking for waits (BLOCK_SLICE_MS); -1: could not be */
} pwatch;

typedef struct ptimer {
    struct ptimer *next;
    void (*fn)(void *arg);
    void *arg;
    uint64_t due;    /* monotonic ms */
    unsigned long seq; /* started before a turn's timers ran: may fire in it */
} ptimer;

/* A blocking client's loop (c->q for a quorum, c->p for one server). */
struct relock__qpoll {
    relock_async *a; /* the inner core client, made at the first call */
    pwatch *watched;
    ptimer *timers;
    unsigned long seq;
    /* the operation in flight: its outcome */
    int done;
    relock_status st;
    relock_scan_result *scan; /* a scan's result */
    uint64_t last; /* monotonic ms a call last ended (one server) */
    int block;     /* one server: a wait on its one connection is a read (BLOCK_SLICE_MS) */
    /* one server: the connection the last call's key routes to now, the
     * server the client reports (NULL before the first) */
    aconn *cur;
    unsigned long forks; /* relock__forks() when a was made: another is a parent's copy */
    /* relock__poll_keep(): a descriptor that, readable, ends a turn early
     * (the owner's thread writes to it) */
    int waking;
    int wake_fd;
};

static int p_watch(void *data, relock_async_socket *s, int fd, int events, void **sockp)
{
    struct relock__qpoll *q = data;
    pwatch *w = *sockp;
    if (events & RELOCK_IO_REMOVE) {
        if (w)
            w->s = NULL;
        return 0;
    }
    if (!w) {
        w = malloc(sizeof *w);
        if (!w)
            return -1;
        *w = (pwatch){.next = q->watched, .s = s, .fd = fd};
        q->watched = w;
        *sockp = w;
    }
    w->events = events;
    return 0;
}

static void *p_timer_start(void *data, long long ms, void (*fn)(void *arg), void *arg)
{
    struct relock__qpoll *q = data;
    ptimer *t = malloc(sizeof *t);
    if (!t)
        return NULL;
    *t = (ptimer){.next = q->timers, .fn = fn, .arg = arg, .seq = q->seq++,
                  .due = relock__mono_ms() + (uint64_t)(ms > 0 ? ms : 0)};
    q->timers = t;
    return t;
}

/* (A loop holds a few timers, the newest first, as a command's timeout
 * usually is when it is stopped: a walk finds it.) */
static void p_timer_stop(void *data, void *timer)
{
    struct relock__qpoll *q = data;
    ptimer **pp = &q->timers;
    while (*pp != timer)
        pp = &(*pp)->next;
    *pp = (*pp)->next;
    free(timer);
}

/* Frees the descriptors hiredis let go of. */
static void p_sweep(struct relock__qpoll *q)
{
    for (pwatch **pp = &q->watched; *pp;) {
        pwatch *w = *pp;
        if (w->s) {
            pp = &w->next;
        } else {
            *pp = w->next;
            free(w);
        }
    }
}

/* What waits to be written goes out, without asking poll() whether the
 * socket takes it (a connected one nearly always does): a batch leaves at
 * once, and a connection the server reset meets the write (EPIPE). */
static void p_flush(struct relock__qpoll *q)
{
    for (pwatch *w = q->watched; w; w = w->next)
        if (w->s && w->up && (w->events & RELOCK_IO_WRITE))
            relock_async_socket_action(w->s, RELOCK_IO_WRITE);
}

/* A wait for one server's reply is a blocking read with receive and send
 * timeouts of BLOCK_SLICE_MS, not poll() and a read: a system call fewer
 * per round trip.  Only when nothing else is awaited and no timer falls
 * due within the slice: a read that times out (EAGAIN, "nothing yet" to
 * hiredis) or is interrupted ends the turn as poll() would, so every
 * deadline stays the core's timers'.  Writes do not wait on it: relock
 * sends with MSG_DONTWAIT (loop.c), hiredis waits at most the timeout. */
#define BLOCK_SLICE_MS 20

static int make_blocking(pwatch *w)
{
    struct timeval tv = {0, BLOCK_SLICE_MS * 1000};
    int fl = fcntl(w->fd, F_GETFL);
    if (fl < 0 || setsockopt(w->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
        setsockopt(w->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0 ||
        fcntl(w->fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        w->blocking = -1;
        return -1;
    }
    w->blocking = 1;
    return 0;
}

/* One turn of the loop: waits at most max_ms for a descriptor or the
 * nearest timer, reports the ready descriptors, then runs the timers due
 * (not those started in this turn, so that a 0 ms timer cannot keep a
 * turn going).  A signal ends the wait early, nothing more: every wait of
 * a call is bounded by the core's timers. */
static void p_turn(struct relock__qpoll *q, long long max_ms)
{
    /* (Measured: a read right after the write, before poll(), costs a
     * system call more than it saves.) */
    p_flush(q);
    uint64_t now = relock__mono_ms();
    long long wait = max_ms;
    for (ptimer *t = q->timers; t; t = t->next) {
        long long left = t->due > now ? (long long)(t->due - now) : 0;
        if (left < wait)
            wait = left;
    }
    /* A loop watches at most 16 connections (a quorum's servers, or
     * ACONN_NODES), a subscription's and a sentinel's: a turn's arrays hold
     * twice that, and any beyond would wait for the next turn. */
    _Static_assert(ACONN_NODES <= RELOCK__MAX_SERVERS, "a turn's arrays hold every connection");
    struct pollfd p[RELOCK__MAX_SERVERS * 2 + 1];
    pwatch *pw[RELOCK__MAX_SERVERS * 2 + 1];
    int k = 0;
    for (pwatch *w = q->watched; w && k < RELOCK__MAX_SERVERS * 2; w = w->next) {
        if (!w->s || !w->events)
            continue;
        p[k] = (struct pollfd){.fd = w->fd,
                               .events = (short)(((w->events & RELOCK_IO_READ) ? POLLIN : 0) |
                                                 ((w->events & RELOCK_IO_WRITE) ? POLLOUT : 0))};
        pw[k++] = w;
    }
    pwatch *one = k == 1 ? pw[0] : NULL;
    if (one && q->block && !q->waking && wait >= BLOCK_SLICE_MS && one->up &&
        one->events == RELOCK_IO_READ &&
        (one->blocking == 1 || (one->blocking == 0 && make_blocking(one) == 0))) {
        relock_async_socket_action(one->s, RELOCK_IO_READ);
        goto timers;
    }
    if (q->waking) {
        p[k] = (struct pollfd){.fd = q->wake_fd, .events = POLLIN};
        pw[k++] = NULL;
    }
    int ready = 0;
    if (k == 0 && wait > 0) {
        /* only timers: a sleep, which a signal ends early as it ends
         * poll(), so that p_wait() sees relock_client_cancel_on()'s flag */
        struct timespec ts = {wait / 1000, (wait % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    } else
        ready = poll(p, (nfds_t)k, (int)(wait < 0 ? 0 : wait));
    if (ready < 0 && errno != EINTR)
        relock__sleep_ms(wait > 0 && wait < 10 ? wait : 10); /* no busy turns till a deadline */
    for (int i = 0; i < k && ready > 0; i++) {
        if (!pw[i]) { /* the wake: drained, the turn ends */
            char drain[64];
            while (p[i].revents && read(p[i].fd, drain, sizeof drain) > 0)
                ;
            continue;
        }
        int ev = ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) ? RELOCK_IO_READ : 0) |
                 ((p[i].revents & (POLLOUT | POLLERR)) ? RELOCK_IO_WRITE : 0);
        if (ev && pw[i]->s) {
            pw[i]->up = 1;
            relock_async_socket_action(pw[i]->s, ev);
        }
    }
timers:;
    unsigned long before = q->seq;
    now = relock__mono_ms();
    for (;;) {
        ptimer *due = NULL;
        for (ptimer *t = q->timers; t && !due; t = t->next)
            if (t->seq < before && t->due <= now)
                due = t;
        if (!due)
            break;
        void (*fn)(void *) = due->fn;
        void *arg = due->arg;
        p_timer_stop(q, due); /* fired: the core never stops it */
        fn(arg);
    }
    p_sweep(q);
}

/* The inner core client over c on q's loop, as relock_async_new() makes
 * one: a quorum's or the one-server runner's; NULL out of memory. */
static relock_async *inner_new(relock_client *c, struct relock__qpoll *q, int quorum)
{
    relock_async *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    q->forks = relock__forks();
    a->c = c;
    a->borrowed = 1;
    a->loop = (relock_async_loop){.size = sizeof a->loop, .version = RELOCK_ASYNC_LOOP_VERSION,
                                  .data = q, .watch = p_watch, .timer_start = p_timer_start,
                                  .timer_stop = p_timer_stop};
    relock__err_clear(&a->err);
    a->nconns = quorum ? c->s.nservers : 1;
    a->ncap = quorum ? a->nconns : ACONN_NODES;
    a->conns = calloc((size_t)a->ncap, sizeof *a->conns);
    a->fanout = quorum ? malloc(sizeof *a->fanout) : NULL;
    if (!a->conns || (quorum && !a->fanout)) {
        free(a->conns);
        free(a->fanout);
        free(a);
        return NULL;
    }
    for (int i = 0; i < a->nconns; i++)
        a->conns[i] = (aconn){.a = a, .idx = i, .srv = &c->s.servers[i]};
    a->home = &a->conns[0];
    /* (a single server's mode is the blocking client's, chosen after the
     * first connection's probe: the core chooses none) */
    a->probed = 1;
    a->kit = quorum ? c->algo->machines : NULL;
    /* a quorum runs one operation at a time: a server owing more than a
     * round or two is not keeping up */
    a->max_owed = quorum ? 8 : 0;
    a->percall = !quorum;
    return a;
}

/* Frees q's inner client between calls (no operation of it is in
 * flight), which closes its connections (their descriptors removed), and
 * its timers: the requests its connections still owe replies to, then the
 * rest as relock_async_free() ends (relock__a_leave()). */
static void p_reset(struct relock__qpoll *q)
{
    relock_async *a = q->a;
    if (a) {
        a->freeing = 1;
        relock__a_enter(a);
        for (int i = 0; i < a->nconns; i++) {
            aconn *cn = &a->conns[i];
            for (areq *rq = cn->fifo; rq;) {
                areq *next = rq->fnext;
                relock__a_rq_clear(rq);
                /* owed or a fan machine's: allocated; an operation's own
                 * (a connection's setup still under way) lives in it */
                if (!rq->op || rq != &rq->op->rq)
                    free(rq);
                rq = next;
            }
            cn->fifo = cn->fifo_tail = NULL;
        }
        relock__a_leave(a);
    }
    q->a = NULL;
    q->cur = NULL;
    while (q->timers)
        p_timer_stop(q, q->timers);
    p_sweep(q);
}

int relock__qpoll_new(relock_client *c)
{
    c->q = calloc(1, sizeof *c->q);
    return c->q ? 0 : -1;
}

static void qpoll_free(struct relock__qpoll **qp)
{
    struct relock__qpoll *q = *qp;
    if (!q)
        return;
    p_reset(q);
    for (pwatch *w = q->watched; w; w = w->next) /* none should be left */
        w->s = NULL;
    p_sweep(q);
    free(q);
    *qp = NULL;
}

void relock__qpoll_free(relock_client *c)
{
    qpoll_free(&c->q);
    qpoll_free(&c->p);
}

static void run_done(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                     void *arg)
{
    (void)a, (void)l, (void)e;
    struct relock__qpoll *q = arg;
    q->st = st;
    q->done = 1;
}

/* The call's operation ended: what it wrote last without waiting for its
 * reply (the legacy marker) leaves before the call returns (its reply is
 * read and dropped at a later turn), and with key (not a quorum's) the
 * server the client reports is the one key routes to now. */
static void p_done(struct relock__qpoll *q, const char *key)
{
    p_flush(q);
    p_sweep(q);
    q->last = relock__mono_ms();
    if (key && !(q->a->kit && q->a->kit->fan))
        q->cur = relock__a_route(q->a, key);
}

/* Turns the loop until the call's operation is done (then p_done() with
 * key) and returns its status; bounded by the operation's timers and its
 * machine's bound on steps.  A loop left with nothing to wait for has lost
 * its operation (cannot happen): the inner client is let go of, never
 * freed or turned again, since its operation points at the returning
 * call's machine.  acq: a waiting acquire, cancelled between its attempts
 * once relock_client_cancel_on()'s flag is set (a signal, or the blocking
 * read's short slice, ends each wait). */
static relock_status p_wait(struct relock__qpoll *q, relock_client *c, const char *what,
                            const char *name, aop *acq, const char *key)
{
    int cancelled = 0;
    while (!q->done) {
        if (!q->timers && !q->watched) {
            q->a = NULL;
            q->cur = NULL;
            relock__err_clear(&c->err);
            return RELOCK__FAIL(&c->err, RELOCK_EPROTO,
                                "%s%s: internal error: an operation was left waiting", what,
                                name);
        }
        p_turn(q, 1000);
        /* between attempts only: an attempt on the wire that wins is the
         * caller's lock, as relock_client_cancel_on() promises */
        if (acq && !cancelled && !q->done && c->cancel && *c->cancel &&
            (acq->state == S_SLEEP || acq->state == S_SUBSCRIBING)) {
            cancelled = 1;
            relock__a_op_cancel(acq);
        }
    }
    p_done(q, key);
    return q->st;
}

/* ------------------------------------------------------------------ one server */

/* An idle connection is looked at before use (a turn that reads what
 * came meanwhile: the server's EOF after its `timeout`, a restart); a
 * busy one skips that system call. */
#define IDLE_CHECK_MS 200

/* The inner client on the loop *qp, c->q (a quorum's) or c->p (the
 * one-server runner's), the loop made at the first use; NULL out of
 * memory.  A forked child's first call frees the inner client copied from
 * its parent (closing its copies of the descriptors) and makes its own: on
 * shared sockets a reply owed to one process (the legacy marker's, a
 * quorum's late server's) would be read by the other as its own. */
static relock_async *inner(relock_client *c, struct relock__qpoll **qp, int quorum)
{
    if (!*qp && !(*qp = calloc(1, sizeof **qp)))
        return NULL;
    if ((*qp)->a && (*qp)->forks != relock__forks())
        p_reset(*qp);
    (*qp)->block = !quorum;
    if (!(*qp)->a)
        (*qp)->a = inner_new(c, *qp, quorum);
    return (*qp)->a;
}

relock_status relock__drive_ready(relock_client *c, const char *key)
{
    relock_async *a = inner(c, &c->p, 0);
    if (!a)
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "out of memory");
    struct relock__qpoll *q = c->p;
    aconn *cn = key || !q->cur ? relock__a_route(a, key) : q->cur;
    if (cn->cstate == C_READY && relock__mono_ms() - q->last >= IDLE_CHECK_MS)
        p_turn(q, 0);
    if (cn->cstate == C_DOWN) {
        relock__err_clear(&a->err);
        relock__a_conn_connect(cn);
    }
    /* Bounded by the connect timeout and the setup's command timeouts,
     * each on a timer. */
    while ((cn->cstate == C_CONNECTING || cn->cstate == C_SETUP || cn->cstate == C_LOCATING) &&
           (q->timers || q->watched))
        p_turn(q, 1000);
    q->last = relock__mono_ms();
    if (cn->cstate == C_READY) {
        relock__a_facts_load(c, cn);
        return RELOCK_OK;
    }
    /* the setup's error (the inner client's) becomes c's */
    const relock__err *e = &a->err;
    relock__err_clear(&c->err);
    if (e->pub.status == RELOCK_OK)
        return RELOCK__FAIL(&c->err, RELOCK_EIO, "connect to " RELOCK__ADDR_FMT ": failed",
                            RELOCK__ADDR(cn->srv));
    return relock__err_set(&c->err, e->pub.status, __FILE__, __LINE__,
                           e->server[0] ? e->server : NULL, "%s", e->msg);
}

void relock__cluster_counts(const relock_client *c, int *masters, int *open,
                            unsigned long *refreshes)
{
    static const relock_async none; /* (no inner client before the first call) */
    relock__a_cluster_counts(c->p && c->p->a ? c->p->a : &none, masters, open, refreshes);
}

const relock__server *relock__poll_server(relock_client *c, const char *key)
{
    relock_async *a = c->p ? c->p->a : NULL;
    if (a && !key && c->p->cur)
        return c->p->cur->srv;
    return a ? relock__a_route(a, key)->srv : c->conn.srv;
}

const aconn *relock__poll_conn(relock_client *c, const char *key)
{
    relock_async *a = inner(c, &c->p, 0);
    return a ? relock__a_route(a, key) : NULL;
}

/* A ready connection of one server in use a moment ago: the operation
 * about to start on key's connection starts at once, without the turn
 * that would look for what came meanwhile (a->direct); then returns that
 * connection, for p_direct_end().  NULL otherwise. */
static aconn *p_direct_begin(struct relock__qpoll *q, relock_async *a, const char *key)
{
    if (a->kit && a->kit->fan)
        return NULL;
    aconn *cn = relock__a_route(a, key);
    a->direct = cn->cstate == C_READY && !cn->kick_timer &&
                relock__mono_ms() - q->last < IDLE_CHECK_MS;
    return a->direct ? cn : NULL;
}

/* The operation was queued: a direct one's batch leaves now. */
static void p_direct_end(relock_async *a, aconn *cn)
{
    a->direct = 0;
    if (cn) {
        relock__a_enter(a);
        relock__a_queue_flush(cn);
        relock__a_leave(a);
    }
}

relock_status relock__drive(relock_lock *l, relock__step_fn fn, void *m)
{
    relock_client *c = l->c;
    relock_async *a = inner(c, &c->p, 0);
    if (!a)
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "lock %s: out of memory", l->name);
    struct relock__qpoll *q = c->p;
    q->done = 0;
    aconn *cn = p_direct_begin(q, a, l->key);
    relock_status st = relock__a_run_step(a, l, fn, m, run_done, q);
    p_direct_end(a, cn);
    if (st != RELOCK_OK)
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "lock %s: out of memory", l->name);
    return p_wait(q, c, "lock ", l->name, NULL, l->key);
}

/* ------------------------------------------------------------------ whole operations */

/* An operation of the core on q (arg) ended with st (e its detail): its
 * status and error become the blocking call's (c->err), with the status's
 * words when the detail has no message. */
static void p_result(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                     void *arg)
{
    (void)l;
    struct relock__qpoll *q = arg;
    relock_client *c = a->c;
    relock__err_clear(&c->err);
    if (st != RELOCK_OK)
        relock__err_set(&c->err, st, e->file ? e->file : __FILE__, e->line,
                        e->server && e->server[0] ? e->server : NULL, "%s",
                        e->message && e->message[0] ? e->message : relock_strerror(st));
    q->st = st;
    q->done = 1;
}

/* The inner client a lock operation of c runs on, with its loop in *qp:
 * a quorum's, or the one-server runner's; NULL out of memory. */
static relock_async *runner(relock_client *c, struct relock__qpoll **qp)
{
    int quorum = c->q != NULL;
    relock_async *a = inner(c, quorum ? &c->q : &c->p, quorum);
    *qp = quorum ? c->q : c->p;
    if (a && !quorum)
        a->kit = c->algo->machines; /* chosen after the connection's probe */
    return a;
}

relock_status relock__lock_op(relock_lock *l, int kind, long long ms)
{
    static const char *const verbs[] = {"", "acquire", "release", "extend"};
    static const int kinds[] = {0, K_ACQ, K_REL, K_EXT};
    relock_client *c = l->c;
    struct relock__qpoll *q;
    relock_async *a = runner(c, &q);
    aop *op = a && relock__a_start_armed(a) ? relock__a_op_new(a, kinds[kind], p_result, q)
                                            : NULL;
    if (!op || !relock__a_alock(a, l)) {
        free(op);
        relock__err_clear(&c->err);
        RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "%s %s: out of memory", verbs[kind], l->name);
        if (kind == RELOCK__OP_ACQUIRE)
            relock__lock_destroy(l); /* the lock is the operation's */
        return RELOCK_ENOMEM;
    }
    q->done = 0;
    op->l = l;
    l->al->busy = op;
    op->wait_ms = ms;
    /* (an acquire's wait and a failed extend's validity count from it; a
     * release reads no clock) */
    if (kind != RELOCK__OP_RELEASE)
        op->began = relock__mono_ms();
    if (kind == RELOCK__OP_ACQUIRE)
        op->deadline = ms > 0 ? op->began + (uint64_t)ms : 0;
    /* an acquire that fails frees l: the key the client then reports */
    char key[RELOCK__KEY_MAX];
    if (kind == RELOCK__OP_ACQUIRE)
        memcpy(key, l->key, strlen(l->key) + 1); /* (shorter, new_lock()) */
    aconn *cn = p_direct_begin(q, a, l->key);
    relock__a_op_enqueue(op);
    p_direct_end(a, cn);
    relock_status st = p_wait(q, c, "lock ", l->name, kind == RELOCK__OP_ACQUIRE ? op : NULL,
                              kind == RELOCK__OP_ACQUIRE ? key : l->key);
    if (!q->done)
        return st;
    /* A blocking lock keeps no state of the core between calls (an acquire
     * that failed took its lock with it). */
    if (st == RELOCK_OK || kind != RELOCK__OP_ACQUIRE) {
        relock__a_alock_free(l);
        l->al_free = NULL;
    }
    return st;
}

/* ------------------------------------------------------------------ renewal */

/* The core told a kept lock's loss (renewal.c): relock_keep()'s hook. */
static void keep_lost(relock_async *a, relock_lock *l, relock_status why, const relock_error *e,
                      void *arg)
{
    (void)a, (void)l, (void)e;
    const relock__keep_hooks *h = arg;
    h->lost(h->arg, why);
}

void relock__poll_keep(relock_lock *l, const relock__keep_hooks *h)
{
    relock_client *c = l->c;
    struct relock__qpoll *q;
    relock_async *a = runner(c, &q);
    if (!a || !relock__a_alock(a, l)) {
        h->lost(h->arg, RELOCK_ENOMEM);
        return;
    }
    struct relock__alock *al = l->al;
    /* (a validity not known, an adopted lock's, has no deadline before the
     * first renewal computes one) */
    relock__a_keep_start(al, l, keep_lost, (void *)h, l->valid_until != 0);
    q->wake_fd = h->wake_fd;
    q->waking = 1;
    /* Bounded by the owner's stop and the lock's loss; a renewal in flight
     * at the stop by its command timeout (a timer) and its machine's
     * steps. */
    for (;;) {
        int busy = al->busy != NULL;
        int stop = h->turn(h->arg, busy);
        if ((stop || al->keep_lost) && !busy)
            break;
        p_turn(q, 1000);
    }
    q->waking = 0;
    relock__a_keep_stop(al);
    relock__a_alock_free(l);
    l->al_free = NULL;
    p_done(q, NULL);
}

/* The blocking scan's end: its result and error kept for the call. */
static void scan_end(relock_async *a, relock_status st, relock_scan_result *r,
                     const relock_error *e, void *arg)
{
    struct relock__qpoll *q = arg;
    q->scan = r;
    p_result(a, st, NULL, e, q);
}

relock_status relock__poll_scan(relock_client *c, const char *match, relock_scan_key_fn fn,
                                void *arg, relock_scan_result **out)
{
    relock_async *a = inner(c, &c->p, 0);
    if (!a)
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "scan: out of memory");
    struct relock__qpoll *q = c->p;
    q->done = 0;
    q->scan = NULL;
    relock_status st = relock__a_scan(a, match, fn, arg, scan_end, q);
    if (st != RELOCK_OK)
        return st; /* (its error on c->err, the core's shared client) */
    st = p_wait(q, c, "scan", "", NULL, NULL);
    *out = q->scan;
    return st;
}

/* One command as a machine: its reply taken from the feed. */
typedef struct raw_m {
    relock__mhead h;
    int argc;
    const char **argv;
    const size_t *len;
    redisReply *reply;
    int sent;
} raw_m;

static relock__step raw_step(void *vm, relock_lock *l, const relock__feed *in, relock__batch *out)
{
    (void)l;
    raw_m *m = vm;
    if (m->h.pc == 0) {
        m->h.pc = 1;
        relock__cmd *k = &out->cmd[0];
        k->argc = m->argc;
        for (int i = 0; i < m->argc; i++) {
            k->argv[i] = m->argv[i];
            k->len[i] = m->len ? m->len[i] : strlen(m->argv[i]);
        }
        out->n = 1;
        return relock__send(&m->h, out);
    }
    m->sent = in->fault != RELOCK__FAULT_UNSENT;
    if (in->nreply < 1 || in->fault != RELOCK__FAULT_NONE)
        return relock__done(&m->h, in->fault_status ? in->fault_status : RELOCK_EIO);
    /* Taken, not copied: the feed's array is the core's request's own
     * (operation.c frees what is left in it after the step). */
    m->reply = in->reply[0];
    ((redisReply **)in->reply)[0] = NULL;
    return relock__done(&m->h, RELOCK_OK);
}

redisReply *relock__command(relock_client *c, int *sent, int argc, const char **argv,
                                 const size_t *argvlen)
{
    if (sent)
        *sent = 0;
    if (argc < 1 || argc > RELOCK__CMD_ARGS) {
        RELOCK__FAIL(&c->err, RELOCK_EINVAL, "%s: too many arguments", argv[0]);
        return NULL;
    }
    static char name[] = "(command)";
    relock_lock l = {.c = c, .name = name, .key = name, .fence_key = name};
    /* a key routes the command on a Cluster (the second word, as in every
     * command sent this way) */
    if (argc > 1 && (!argvlen || strlen(argv[1]) == argvlen[1]))
        l.key = (char *)argv[1];
    raw_m m = {.argc = argc, .argv = argv, .len = argvlen};
    relock__drive(&l, raw_step, &m);
    if (sent)
        *sent = m.sent;
    return m.reply;
}

relock_status relock__foreign_type(relock_client *c, const char *op, const char *name,
                                   const char *key, relock_status st)
{
    if (st != RELOCK_EFOREIGN)
        return st;
    st = c->err.pub.status;
    if (st != RELOCK_EFOREIGN ||
        (strncmp(c->err.server, "WRONGTYPE", 9) != 0 &&
         !strstr(c->err.server, "wrong kind of value")) ||
        c->s.nservers > 1)
        return st;
    /* The error is kept as it is if the question fails. */
    relock__err saved = c->err;
    const char *argv[] = {"TYPE", key};
    size_t lens[] = {4, strlen(key)};
    redisReply *r = relock__command(c, NULL, 2, argv, lens);
    /* A string or nothing: the key changed since; the first answer stands. */
    if (!r || (r->type != REDIS_REPLY_STATUS && r->type != REDIS_REPLY_STRING) ||
        strcmp(r->str, "string") == 0 || strcmp(r->str, "none") == 0) {
        if (r)
            freeReplyObject(r);
        relock__err_copy(&c->err, &saved);
        return st;
    }
    char words[96]; /* TYPE's answer in words, with its article */
    const char *t = r->str;
    if (strcmp(t, "zset") == 0)
        snprintf(words, sizeof words, "a sorted set");
    else if (strcmp(t, "list") == 0 || strcmp(t, "set") == 0 || strcmp(t, "hash") == 0 ||
             strcmp(t, "stream") == 0)
        snprintf(words, sizeof words, "a %s", t);
    else
        snprintf(words, sizeof words, "a value of type %.64s", t); /* a module's type */
    freeReplyObject(r);
    const relock__server *srv = relock__poll_server(c, key);
    relock__err_clear(&c->err);
    relock__err_set(&c->err, RELOCK_EFOREIGN, saved.pub.file, saved.pub.line, saved.server,
                    "%s %s: the key %s on " RELOCK__ADDR_FMT
                    " holds %s, not a lock; relock never takes over, "
                    "changes or deletes it",
                    op, name, key, RELOCK__ADDR(srv), words);
    return RELOCK_EFOREIGN;
}
