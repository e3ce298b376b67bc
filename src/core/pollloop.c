/*
 * The blocking API's quorum calls as a private poll loop over the
 * operation core (core.h), as curl_easy_perform() runs over curl's multi
 * interface: relock_acquire(), relock_release() and relock_extend() on a
 * quorum run their fan machine as an operation of an inner core client,
 * and poll() until it completes.  The rounds, the connections with their
 * setup (AUTH, SELECT, SCRIPT LOAD), the replies owed to earlier rounds
 * and the deadlines are fanout.c's, the same code the asynchronous
 * client runs.
 *
 * The inner client is made at the first call and kept with the blocking
 * client (c->q); it shares the blocking client itself (its settings,
 * scripts and error: the machine's messages land where the blocking calls
 * report them) and owns its connections, which stay open between calls.
 * Its loop is here: a list of watched descriptors and a list of timers,
 * turned only while a blocking call runs.  Between calls nothing is read;
 * the first turn of a call reads what arrived meanwhile before anything
 * is sent (a connection the server closed while idle is noticed and
 * opened afresh, owed replies that came are dropped), as the timers that
 * fell due meanwhile then fire.
 *
 * A server may owe 8 replies at most (fanout.c's max_owed): a blocking
 * client runs one operation at a time, so a server owing more than a
 * round or two is not keeping up, and is dropped (and left alone for one
 * round's timeout) when a later round would use it.
 *
 * Nothing here is shared between clients or threads: a renewal thread's
 * client (src/api/renew.c) has its own loop, and a forked child's copy of
 * the loop is its own (its connections are the parent's descriptors, as
 * they always were).
 */

#include <errno.h>
#include <poll.h>

#include "core.h"
#include "pollloop.h"

/* A watched descriptor: what relock_async_socket_action() is told about.
 * Let go of (s NULL) when hiredis removes it, and freed after the turn,
 * since a turn may still hold it in its list of ready descriptors. */
typedef struct pwatch {
    struct pwatch *next;
    relock_async_socket *s; /* NULL: removed */
    int fd;
    int events; /* RELOCK_IO_READ, RELOCK_IO_WRITE */
} pwatch;

typedef struct ptimer {
    struct ptimer *prev, *next;
    void (*fn)(void *arg);
    void *arg;
    uint64_t due;    /* monotonic ms */
    unsigned long seq; /* started before a turn's timers ran: may fire in it */
} ptimer;

/* The blocking client's quorum runner (relock_client.q). */
struct relock__qpoll {
    relock_async *a; /* the inner core client, made at the first call */
    pwatch *watched;
    ptimer *timers;
    unsigned long seq;
    /* the operation in flight: its outcome */
    int done;
    relock_status st;
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
        w = calloc(1, sizeof *w);
        if (!w)
            return -1;
        w->s = s;
        w->fd = fd;
        w->next = q->watched;
        q->watched = w;
        *sockp = w;
    }
    w->events = events;
    return 0;
}

static void *p_timer_start(void *data, long long ms, void (*fn)(void *arg), void *arg)
{
    struct relock__qpoll *q = data;
    ptimer *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->fn = fn;
    t->arg = arg;
    t->due = relock__mono_ms() + (uint64_t)(ms > 0 ? ms : 0);
    t->seq = q->seq++;
    t->next = q->timers;
    if (q->timers)
        q->timers->prev = t;
    q->timers = t;
    return t;
}

static void p_unlink(struct relock__qpoll *q, ptimer *t)
{
    if (t->prev)
        t->prev->next = t->next;
    else
        q->timers = t->next;
    if (t->next)
        t->next->prev = t->prev;
}

static void p_timer_stop(void *data, void *timer)
{
    ptimer *t = timer;
    p_unlink(data, t);
    free(t);
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

/* One turn of the loop: waits at most max_ms for a descriptor or the
 * nearest timer, reports the ready descriptors, then runs the timers that
 * are due (those started within this turn's callbacks wait for the next
 * turn, so that a timer of 0 ms cannot keep a turn going).  A signal
 * interrupting poll() ends the wait early, nothing more: every wait of a
 * call is bounded by the core's timers (a round's deadline, the connect
 * and command timeouts). */
static void p_turn(struct relock__qpoll *q, long long max_ms)
{
    uint64_t now = relock__mono_ms();
    long long wait = max_ms;
    for (ptimer *t = q->timers; t; t = t->next) {
        long long left = t->due > now ? (long long)(t->due - now) : 0;
        if (left < wait)
            wait = left;
    }
    int n = 0;
    for (pwatch *w = q->watched; w; w = w->next)
        n += w->s && w->events;
    struct pollfd stack_p[RELOCK__MAX_SERVERS * 2];
    pwatch *stack_w[RELOCK__MAX_SERVERS * 2];
    struct pollfd *p = stack_p;
    pwatch **pw = stack_w;
    if (n > RELOCK__MAX_SERVERS * 2) {
        p = malloc((size_t)n * sizeof *p);
        pw = malloc((size_t)n * sizeof *pw);
        if (!p || !pw) {
            free(p);
            free(pw);
            p = stack_p;
            pw = stack_w;
            n = RELOCK__MAX_SERVERS * 2; /* the rest wait for the next turn */
        }
    }
    int k = 0;
    for (pwatch *w = q->watched; w && k < n; w = w->next) {
        if (!w->s || !w->events)
            continue;
        p[k].fd = w->fd;
        p[k].events = (short)(((w->events & RELOCK_IO_READ) ? POLLIN : 0) |
                              ((w->events & RELOCK_IO_WRITE) ? POLLOUT : 0));
        p[k].revents = 0;
        pw[k++] = w;
    }
    int ready = poll(p, (nfds_t)k, (int)(wait < 0 ? 0 : wait));
    if (ready < 0 && errno != EINTR)
        relock__sleep_ms(wait > 0 && wait < 10 ? wait : 10); /* no busy turns till a deadline */
    for (int i = 0; i < k && ready > 0; i++) {
        int ev = ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) ? RELOCK_IO_READ : 0) |
                 ((p[i].revents & (POLLOUT | POLLERR)) ? RELOCK_IO_WRITE : 0);
        if (ev && pw[i]->s)
            relock_async_socket_action(pw[i]->s, ev);
    }
    if (p != stack_p) {
        free(p);
        free(pw);
    }
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
        p_unlink(q, due);
        free(due); /* fired: the core never stops it */
        fn(arg);
    }
    p_sweep(q);
}

/* The inner core client over c (c->q's loop), as relock_async_new() makes
 * a quorum's; NULL out of memory. */
static relock_async *inner_new(relock_client *c, struct relock__qpoll *q)
{
    relock_async *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->c = c;
    a->borrowed = 1;
    a->loop.size = sizeof a->loop;
    a->loop.version = RELOCK_ASYNC_LOOP_VERSION;
    a->loop.data = q;
    a->loop.watch = p_watch;
    a->loop.timer_start = p_timer_start;
    a->loop.timer_stop = p_timer_stop;
    relock__err_clear(&a->err);
    a->conns = calloc((size_t)c->s.nservers, sizeof *a->conns);
    a->fanout = malloc(sizeof *a->fanout);
    if (!a->conns || !a->fanout) {
        free(a->conns);
        free(a->fanout);
        free(a);
        return NULL;
    }
    a->ncap = a->nconns = c->s.nservers;
    for (int i = 0; i < a->nconns; i++) {
        a->conns[i].a = a;
        a->conns[i].idx = i;
        a->conns[i].srv = &c->s.servers[i];
    }
    a->home = &a->conns[0];
    a->kit = c->algo->machines;
    a->probed = 1;
    a->max_owed = 8;
    return a;
}

/* Frees the inner client between calls (no operation of it is in
 * flight): the requests its connections still owe replies to, then the
 * rest as relock_async_free() ends (relock__a_leave()). */
static void inner_free(relock_async *a)
{
    a->freeing = 1;
    relock__a_enter(a);
    for (int i = 0; i < a->nconns; i++) {
        aconn *cn = &a->conns[i];
        for (areq *rq = cn->fifo; rq;) {
            areq *next = rq->fnext;
            relock__a_rq_clear(rq);
            free(rq);
            rq = next;
        }
        cn->fifo = cn->fifo_tail = NULL;
    }
    relock__a_leave(a);
}

int relock__qpoll_new(relock_client *c)
{
    c->q = calloc(1, sizeof *c->q);
    return c->q ? 0 : -1;
}

void relock__qpoll_free(relock_client *c)
{
    struct relock__qpoll *q = c->q;
    if (!q)
        return;
    if (q->a)
        inner_free(q->a); /* closes its connections: their descriptors removed */
    while (q->timers)
        p_timer_stop(q, q->timers);
    p_sweep(q);
    for (pwatch *w = q->watched; w;) { /* none should be left */
        pwatch *next = w->next;
        free(w);
        w = next;
    }
    free(q);
    c->q = NULL;
}

static void run_done(relock_async *a, relock_status st, relock_lock *l, const relock_error *e,
                     void *arg)
{
    (void)a, (void)l, (void)e;
    struct relock__qpoll *q = arg;
    q->st = st;
    q->done = 1;
}

relock_status relock__fan_drive(relock_lock *l, relock__fan_fn fn, void *m)
{
    relock_client *c = l->c;
    struct relock__qpoll *q = c->q;
    if (!q || !c->algo || !c->algo->machines || !c->algo->machines->fan)
        return RELOCK__FAIL(&c->err, RELOCK_EPROTO, "lock %s: internal error: not a quorum",
                            l->name);
    if (!q->a)
        q->a = inner_new(c, q);
    if (!q->a)
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "lock %s: out of memory", l->name);
    q->done = 0;
    q->st = RELOCK_OK;
    relock_status st = relock__a_run(q->a, l, fn, m, run_done, q);
    if (st != RELOCK_OK)
        return RELOCK__FAIL(&c->err, st, "lock %s: out of memory", l->name);
    /* Bounded: each round has its deadline on a timer, and the machine
     * ends after RELOCK__FAN_MAX_FEEDS feeds at most; a loop left with
     * nothing to wait for has lost its operation. */
    while (!q->done) {
        if (!q->timers && !q->watched) {
            /* Cannot happen (a round always has its deadline's timer);
             * the inner client is let go of, never freed or turned again,
             * since its operation points at this call's machine. */
            q->a = NULL;
            relock__err_clear(&c->err);
            return RELOCK__FAIL(&c->err, RELOCK_EPROTO,
                                "lock %s: internal error: an operation was left waiting",
                                l->name);
        }
        p_turn(q, 1000);
    }
    return q->st;
}

/* The quorum algorithm of the blocking client: its calls run here. */
static relock_status quorum_attempt(relock_lock *l, long *hint_ms)
{
    relock_client *c = l->c;
    relock_status tst = relock__token_for(&c->err, "acquire", l->name, l->value);
    if (tst != RELOCK_OK)
        return tst;
    relock__quorum_m m;
    relock__quorum_init(&m, RELOCK__Q_ACQUIRE, l->ttl_ms);
    relock_status st = relock__fan_drive(l, relock__quorum_step, &m);
    if (st == RELOCK_BUSY)
        *hint_ms = m.h.hint_ms;
    return st;
}

static relock_status quorum_release(relock_lock *l)
{
    relock__quorum_m m;
    relock__quorum_init(&m, RELOCK__Q_RELEASE, l->ttl_ms);
    return relock__fan_drive(l, relock__quorum_step, &m);
}

static relock_status quorum_extend(relock_lock *l, long long ttl_ms)
{
    relock__quorum_m m;
    relock__quorum_init(&m, RELOCK__Q_EXTEND, ttl_ms);
    return relock__fan_drive(l, relock__quorum_step, &m);
}

const relock__algo relock__algo_quorum = {
    "quorum", quorum_attempt, quorum_release, quorum_extend, NULL, &relock__quorum_machines,
};

relock_status relock__quorum_setup(relock_client *c)
{
    /* Modern values only: tokens are unique across servers, while
     * timestamps, GETSET losers and legacy clients have no meaning for a
     * majority of independent masters. */
    if (c->s.mode == RELOCK_MODE_LEGACY || c->s.mode == RELOCK_MODE_BRIDGE ||
        (c->s.mode == RELOCK_MODE_AUTO && c->s.migration.legacy_clients)) {
        /* The place to change: the file's mode, else its servers. */
        int line = c->s.mode_line ? c->s.mode_line : c->s.servers_line;
        char at[sizeof c->s.src_file + 16] = "";
        if (line && c->s.src_file[0])
            snprintf(at, sizeof at, "%s:%d: ", c->s.src_file, line);
        return RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                            "%sservers: quorum over %d servers uses modern values only; set "
                            "mode = \"modern\" (or auto with migration.legacy_clients = false)",
                            at, c->s.nservers);
    }
    c->mode = RELOCK_MODE_MODERN;
    snprintf(c->mode_reason, sizeof c->mode_reason,
             "quorum over %d servers (majority %d), modern values", c->s.nservers, c->s.nservers / 2 + 1);
    c->algo = &relock__algo_quorum;
    return RELOCK_OK;
}
