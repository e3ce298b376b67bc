/*
 * Locks of the operation core (core.h): a lock's operation in flight, its
 * renewal and the loss deadline.
 */

#include "core.h"

/* ------------------------------------------------------------------ locks */

void relock__a_alock_free(relock_lock *l)
{
    struct relock__alock *al = l->al;
    if (!al)
        return;
    if (al->a)
        alocks_del_(&al->a->alocks, al);
    free(al->fail_err);
    free(al);
    l->al = NULL;
}

/* relock_lock_free() of such a lock (its al_free): stops its renewal; 1
 * when an operation on it is in flight, which then frees it when it ends. */
static int async_lock_free(relock_lock *l)
{
    struct relock__alock *al = l->al;
    if (al->a) {
        relock__a_keep_stop(al);
        if (al->after) {
            al->after->lock_gone = 1;
            al->after->l = l;
        }
        if (al->busy) {
            al->busy->lock_gone = 1;
            return 1;
        }
    }
    relock__a_alock_free(l);
    return 0;
}

struct relock__alock *relock__a_alock(relock_async *a, relock_lock *l)
{
    if (l->al || !(l->al = calloc(1, sizeof *l->al)))
        return l->al;
    l->al_free = async_lock_free;
    l->al->a = a;
    alocks_add_(&a->alocks, l->al);
    return l->al;
}

/* An operation on l ended: the next one on it may start; a lock the
 * program freed meanwhile is freed now. */
void relock__a_lock_op_end(aop *op)
{
    relock_lock *l = op->l;
    struct relock__alock *al = l->al;
    if (!al)
        return;
    if (al->after == op) {
        /* The release behind the renewal ends first (the client is being
         * freed): the renewal's end finds no release to start. */
        al->after = NULL;
        return;
    }
    if (al->busy == op)
        al->busy = NULL;
    aop *after = al->after;
    if (after && !op->a->freeing) {
        /* The release behind a renewal starts now, even when the program
         * freed the lock meanwhile: the lock goes when it ends (lock_gone). */
        al->after = NULL;
        al->busy = after;
        relock__a_op_schedule(after);
        return;
    }
    if (!op->lock_gone)
        return;
    al->after = NULL;
    if (after) /* the client is being freed: it ends unsent */
        after->l = NULL;
    relock__a_alock_free(l);
    relock__lock_destroy(l);
    if (after)
        relock__a_op_finish(after, RELOCK_ECANCELED);
}

/* ------------------------------------------------------------------ renewal */

static void keep_tick(void *arg)
{
    relock_lock *l = arg;
    struct relock__alock *al = l->al;
    relock_async *a = al->a;
    al->keep_timer = NULL;
    relock__a_enter(a);
    if (al->kept && !al->busy && !a->freeing) {
        aop *op = relock__a_op_new(a, K_KEEP, NULL, NULL);
        if (op) {
            op->l = l;
            op->wait_ms = l->ttl_ms;
            al->busy = op;
            relock__a_op_enqueue(op);
        } else {
            al->keep_timer = timer_start(a, 10, keep_tick, l);
        }
    }
    relock__a_leave(a);
}

/* The next renewal: a third of the ttl from now, or sooner while the
 * validity left is short (lease.h), as relock_keep()'s thread does. */
static void keep_arm(struct relock__alock *al, relock_lock *l)
{
    al->keep_timer = timer_start(al->a, relock__renew_wait_ms(l->ttl_ms, l->valid_until, now_ms()),
                                 keep_tick, l);
}

/* l is kept from now: renewed on its timer, and lost, when deadline is
 * set, at the end of its validity unless a renewal comes first. */
void relock__a_keep_start(struct relock__alock *al, relock_lock *l, relock_async_lost_fn on_lost,
                          void *arg, int deadline)
{
    al->kept = 1;
    al->keep_lost = 0;
    al->on_lost = on_lost;
    al->lost_arg = arg;
    al->keep_valid = l->valid_until;
    al->fail_st = RELOCK_OK;
    keep_arm(al, l);
    if (deadline)
        relock__a_deadline_arm(al, l);
}

/* l is kept no more: its renewal's timer and its loss deadline stopped. */
void relock__a_keep_stop(struct relock__alock *al)
{
    timer_stop(al->a, &al->keep_timer);
    timer_stop(al->a, &al->lost_timer);
    al->kept = 0;
}

/* The renewal stops for good; the program hears of it once. */
static void keep_lose(relock_async *a, relock_lock *l, relock_status why, const relock_error *e)
{
    struct relock__alock *al = l->al;
    relock__a_keep_stop(al);
    al->keep_lost = 1;
    /* Lost is valid no more, whatever lease the last renewal wrote (an
     * unacknowledged one leaves its lease on the master alone). */
    l->valid_until = 0;
    relock__event(a->c, RELOCK_EVENT_LOST, l, why, 0);
    if (al->on_lost)
        al->on_lost(a, l, why, e, al->lost_arg);
}

/* The validity ran out with no renewal since: the lock is lost now, not
 * when the renewal in flight (a stalled server) ends. */
static void lost_fire(void *arg)
{
    relock_lock *l = arg;
    struct relock__alock *al = l->al;
    relock_async *a = al->a;
    al->lost_timer = NULL;
    if (!al->kept || al->keep_lost || a->freeing)
        return;
    if (now_ms() < al->keep_valid) { /* the loop's timer came early */
        relock__a_deadline_arm(al, l);
        return;
    }
    relock__a_enter(a);
    relock__err e;
    relock__err_clear(&e);
    relock_status why = al->fail_st;
    if (why != RELOCK_OK && al->fail_err) {
        relock__err_copy(&e, al->fail_err);
    } else if (why != RELOCK_OK) {
        RELOCK__FAIL(&e, why, "keep %s: the last renewal failed (%s)", l->name,
                     relock_strerror(why));
    } else {
        why = RELOCK_EIO;
        RELOCK__FAIL(&e, why,
                     "keep %s: no renewal succeeded within the lock's validity (the server did "
                     "not answer in time)",
                     l->name);
    }
    keep_lose(a, l, why, &e.pub);
    relock__a_leave(a);
}

/* The loss deadline at the end of the validity as of the last renewal. */
void relock__a_deadline_arm(struct relock__alock *al, relock_lock *l)
{
    timer_stop(al->a, &al->lost_timer);
    uint64_t now = now_ms();
    long long left = al->keep_valid > now ? (long long)(al->keep_valid - now) : 0;
    al->lost_timer = timer_start(al->a, left, lost_fire, l);
}

/* A renewal of l ended with st (e its detail): the next one is timed, a
 * failed one retried soon while validity remains, a loss reported. */
void relock__a_keep_after(relock_async *a, relock_lock *l, relock_status st, const relock_error *e)
{
    struct relock__alock *al = l->al;
    if (!al || !al->kept || al->keep_lost)
        return;
    if (st == RELOCK_OK) {
        al->keep_valid = l->valid_until;
        al->fail_st = RELOCK_OK;
        relock__event(a->c, RELOCK_EVENT_RENEWED, l, RELOCK_OK, 0);
        keep_arm(al, l);
        relock__a_deadline_arm(al, l);
        return;
    }
    /* A failed extend may have lowered the validity: the deadline follows
     * it down, never up. */
    if (l->valid_until < al->keep_valid) {
        al->keep_valid = l->valid_until;
        relock__a_deadline_arm(al, l);
    }
    if (st == RELOCK_LOST || now_ms() >= al->keep_valid) {
        keep_lose(a, l, st, e);
        return;
    }
    /* Not answered, refused, a transient error, the client unusable for
     * now: again soon, while valid (the deadline reports the loss). */
    al->fail_st = st;
    relock__event(a->c, RELOCK_EVENT_RENEW_FAILED, l, st, 0);
    if (!al->fail_err)
        al->fail_err = malloc(sizeof *al->fail_err);
    if (al->fail_err) {
        relock__err_clear(al->fail_err);
        RELOCK__FAIL_SRV(al->fail_err, st, e->server, "%s", e->message);
    }
    long long again = l->ttl_ms / 10;
    al->keep_timer = timer_start(a, again < 10 ? 10 : again, keep_tick, l);
}
