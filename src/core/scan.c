/*
 * relock_async_scan() in the operation core (core.h): the audit's machine
 * (src/algo/scan.c) as an operation, run again after each of its runs
 * where it asks: on the same connection, on the next Cluster master's, or
 * on the node of a marker's slot (a MOVED is followed as for any batch).
 */

#include "core.h"
#include "scan.h"

/* A scan operation's state (op->m: its machine first, freed with op). */
typedef struct scan_job {
    relock__scan_m m;
    relock_lock l;
    relock_async_scan_fn cb;
    void *arg;
} scan_job;

/* The machine's step; a run walking a server, not routed to a marker's
 * key, names it first (relock_scan_node(): the blocking client's, whose
 * client the core shares; operation.c points c->conn.srv at the run's
 * server). */
static relock__step scan_step(void *vm, relock_lock *l, const relock__feed *in,
                              relock__batch *out)
{
    scan_job *j = vm;
    relock_client *c = l->c;
    if (j->m.next != RELOCK__SCAN_KEY && c->conn.srv)
        snprintf(c->scan_node, sizeof c->scan_node, RELOCK__ADDR_FMT,
                 RELOCK__ADDR(c->conn.srv));
    return relock__scan_step(&j->m, l, in, out);
}

/* The operation ended (also when the client is freed): the result goes
 * to the program. */
static void scan_done(relock_async *a, relock_status st, relock_lock *l, const relock_error *err,
                      void *arg)
{
    (void)l;
    scan_job *j = arg;
    relock__err e;
    relock__err_clear(&e);
    e.pub = *err;
    relock_status end = relock__scan_end(&j->m, a->c, st);
    if (end != st)
        relock__err_copy(&e, &a->c->err);
    e.pub.status = end;
    j->cb(a, end, j->m.out, &e.pub, j->arg);
}

relock_status relock__a_scan(relock_async *a, const char *match, relock_scan_key_fn fn,
                             void *fn_arg, relock_async_scan_fn cb, void *arg)
{
    relock_client *c = a->c;
    scan_job *j = calloc(1, sizeof *j);
    relock_scan_result *r = calloc(1, sizeof *r);
    aop *op = relock__a_op_new(a, K_SCAN, scan_done, j);
    relock__err_clear(&c->err);
    relock_status st = j && r && op ? relock__scan_init(&j->m, c, match, fn, fn_arg, r, 0,
                                                        !relock__sentinel_on(&c->s),
                                                        relock__wall_ms(), now_ms())
                                    : RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "scan: out of memory");
    if (st != RELOCK_OK) {
        relock__err_copy(&a->err, &c->err);
        if (j && r && op) /* the machine began: what it allocated */
            relock__scan_end(&j->m, c, st);
        relock_scan_result_free(r);
        free(j);
        free(op);
        return st;
    }
    j->l = (relock_lock){.c = c, .name = (char *)"scan"};
    j->cb = cb;
    j->arg = arg;
    op->m = j;
    op->l = &j->l;
    op->fn = scan_step;
    /* A run bound for a node walks that node, or fails: never another. */
    op->rerouted = 1;
    relock__a_op_enqueue(op);
    return RELOCK_OK;
}

void relock__a_scan_next(aop *op, relock_status st)
{
    scan_job *j = op->m;
    aconn *to = op->cn;
    if (st == RELOCK_OK && j->m.next == RELOCK__SCAN_NODE) {
        const struct relock__scan_addr *n = &j->m.addr[j->m.node];
        if (!(to = relock__a_node_conn(op->a, n->host, n->port)))
            st = relock__a_op_fail(op, RELOCK_EUNSUPPORTED,
                                   "scan: no connection left for Cluster master %s:%d (at most %d)",
                                   n->host, n->port, op->a->ncap);
    } else if (st == RELOCK_OK && j->m.next == RELOCK__SCAN_KEY) {
        to = relock__a_route(op->a, j->m.route);
    }
    if (st != RELOCK_OK || j->m.next == RELOCK__SCAN_END) {
        relock__a_op_finish(op, st);
        return;
    }
    op->state = S_NEW;
    op->cn = to;
    relock__a_conn_wants(to, op);
}
