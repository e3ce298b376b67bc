/*
 * Automatic renewal (relock_keep): a thread extends a shadow of the lock,
 * on a connection of its own, every third of the lease (sooner while the
 * validity left is shorter).  The caller's
 * client is never touched from the thread, so the rule "one client, one
 * thread" holds; the two meet only under the keeper's mutex.
 *
 * A second thread, the watch, keeps the loss deadline: when the validity
 * of the last successful renewal ends before another succeeded, it
 * reports the lock lost at once, while the renewal thread may still be
 * inside a call that waits for a stalled server (command_timeout_ms) or a
 * connect; that call's end then changes nothing.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "handle.h"

struct relock__keeper {
    pthread_t thread;
    pthread_t watch; /* the loss deadline (keeper_watch) */
    int watching;    /* the watch thread was started */
    /* the last failed renewal's status, for a loss the watch reports
     * (RELOCK_OK: none failed since the last success) */
    relock_status fail_st;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_mutex_t ev_mu; /* orders the events (keeper_event, keeper_lose) */
    int stop;             /* set by the owner: end the thread */
    int lost;             /* set by the thread: the lock is gone */
    uint64_t valid_until; /* the shadow's validity, for the owner to read */
    relock_client *c;     /* the thread's own connection */
    relock_lock *shadow;  /* the lock as the thread renews it */
    relock_lock *user;
    relock_lost_fn on_lost;
    void *arg;
    /* relock_lock_set_owner() on the kept lock: the shadow takes it
     * before its next renewal (owner_next malloc'd, or NULL for none). */
    int owner_pending;
    long owner_next_pid;
    char *owner_next;
    /* The shadow's value as of its last renewal (in legacy and bridge
     * modes each renewal writes a new one), for owner writes made from
     * the owner's thread. */
    char value[RELOCK__VALUE_MAX];
    /* The two never write at once: a renewal under way (renewing) holds
     * back the owner's record write, which holds back the next renewal
     * (owner_writing), so that the record written is conditional on the
     * value the key holds, and no renewal's note with the old text
     * lands after it.  Both are signalled on cv. */
    int renewing;
    int owner_writing;
};

static void deadline_in(struct timespec *ts, long long ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* A renewal's event (renewed, failed), unless the loss was reported
 * first: a renewal that ends after the watch reported the lock lost says
 * nothing more.  Under ev_mu, which the loss's report takes after setting
 * lost, so that no renewal's event follows the lost one. */
static void keeper_event(struct relock__keeper *k, relock_event_kind kind, relock_status st)
{
    pthread_mutex_lock(&k->ev_mu);
    pthread_mutex_lock(&k->mu);
    int lost = k->lost;
    pthread_mutex_unlock(&k->mu);
    if (!lost)
        relock__event(k->c, kind, k->shadow, st, 0);
    pthread_mutex_unlock(&k->ev_mu);
}

/* Reports the loss once (the first of the two threads to see it): the
 * lost event, then on_lost; k->mu held on entry, released on return. */
static void keeper_lose(struct relock__keeper *k, relock_status why)
{
    k->lost = 1;
    k->valid_until = 0;
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
    /* (the event reads the shadow's name and acquisition time, which a
     * renewal under way does not change) */
    pthread_mutex_lock(&k->ev_mu);
    relock__event(k->c, RELOCK_EVENT_LOST, k->shadow, why, 0);
    pthread_mutex_unlock(&k->ev_mu);
    if (k->on_lost)
        k->on_lost(k->user, why, k->arg);
}

/* The loss deadline: the end of the validity relock computed for the last
 * successful renewal (k->valid_until, moved by each one). */
static void *keeper_watch(void *p)
{
    struct relock__keeper *k = p;
    pthread_mutex_lock(&k->mu);
    while (!k->stop && !k->lost) {
        if (k->valid_until == 0) {
            /* unknown (an adopted lock whose value tells no expiry): no
             * deadline before the first renewal computes one */
            pthread_cond_wait(&k->cv, &k->mu);
            continue;
        }
        uint64_t now = relock__mono_ms();
        if (now >= k->valid_until) {
            keeper_lose(k, k->fail_st != RELOCK_OK ? k->fail_st : RELOCK_EIO);
            return NULL;
        }
        struct timespec ts;
        deadline_in(&ts, (long long)(k->valid_until - now));
        (void)pthread_cond_timedwait(&k->cv, &k->mu, &ts);
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

static void *keeper_main(void *p)
{
    struct relock__keeper *k = p;
    long long period = k->shadow->ttl_ms / 3 > 0 ? k->shadow->ttl_ms / 3 : 1;
    /* after a failed renewal: again soon, while validity remains */
    long long retry = k->shadow->ttl_ms / 10 > 10 ? k->shadow->ttl_ms / 10 : 10;
    long long wait_ms = period;
    pthread_mutex_lock(&k->mu);
    while (!k->stop && !k->lost) {
        struct timespec ts;
        /* Every third of the ttl (a tenth after a failure), and sooner
         * while the validity left is short: a failed extend to a shorter
         * lease may have put that lease on the server, which a renewal a
         * third of the ttl later would come after. */
        long long wait = relock__renew_wait_ms(k->shadow->ttl_ms, k->shadow->valid_until,
                                               relock__mono_ms());
        deadline_in(&ts, wait < wait_ms ? wait : wait_ms);
        int rc = 0;
        while (!k->stop && !k->lost && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&k->cv, &k->mu, &ts);
        while (!k->stop && !k->lost && k->owner_writing)
            pthread_cond_wait(&k->cv, &k->mu);
        if (k->stop || k->lost)
            break;
        if (k->owner_pending) {
            free(k->shadow->owner_text);
            k->shadow->owner_text = k->owner_next;
            k->shadow->owner_pid = k->owner_next_pid;
            k->owner_next = NULL;
            k->owner_pending = 0;
        }
        k->renewing = 1;
        pthread_mutex_unlock(&k->mu);
        relock_status st = relock_extend(k->shadow, k->shadow->ttl_ms);
        /* A failure, whatever it was (no answer, a refused connect, a
         * transient error), is retried soon while validity remains; only
         * a definite loss, or a failure that outlives the validity, ends
         * the lock (the watch may have ended it meanwhile). */
        int gone = st == RELOCK_LOST ||
                   (st != RELOCK_OK && relock__mono_ms() >= k->shadow->valid_until);
        pthread_mutex_lock(&k->mu);
        k->renewing = 0;
        pthread_cond_broadcast(&k->cv);
        memcpy(k->value, k->shadow->value, sizeof k->value);
        if (k->lost)
            break; /* reported by the watch (its event and on_lost) */
        k->valid_until = k->shadow->valid_until;
        k->fail_st = st;
        if (gone) {
            keeper_lose(k, st == RELOCK_OK ? RELOCK_LOST : st);
            return NULL;
        }
        wait_ms = st == RELOCK_OK ? period : retry;
        pthread_mutex_unlock(&k->mu);
        keeper_event(k, st == RELOCK_OK ? RELOCK_EVENT_RENEWED : RELOCK_EVENT_RENEW_FAILED, st);
        pthread_mutex_lock(&k->mu);
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

/* The operations the lock calls while kept (relock__keep_ops). */
static relock_status keep_end(relock_lock *l);
static uint64_t keep_valid_until(const relock_lock *l);
static relock_status keep_set_owner(relock_lock *l, long pid, const char *text,
                                    char value[RELOCK__VALUE_MAX]);
static void keep_owner_done(relock_lock *l);
static const relock__keep_ops keep_ops = {keep_end, keep_valid_until, keep_set_owner,
                                          keep_owner_done};

static void keeper_free(struct relock__keeper *k)
{
    free(k->owner_next);
    relock_lock_free(k->shadow);
    relock_client_free(k->c);
    pthread_cond_destroy(&k->cv);
    pthread_mutex_destroy(&k->mu);
    pthread_mutex_destroy(&k->ev_mu);
    free(k);
}

relock_status relock_keep(relock_lock *l, relock_lost_fn on_lost, void *arg)
{
    if (!l)
        return RELOCK_EINVAL;
    relock_client *c = l->c;
    relock__err_clear(&c->err);
    if (l->al) /* an asynchronous client's lock: relock_async_keep() */
        return RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                            "keep %s: the lock belongs to an asynchronous client; use "
                            "relock_async_keep()",
                            l->name);
    if (l->keeper)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "keep %s: already kept", l->name);
    if (l->lost)
        return RELOCK__FAIL(&c->err, RELOCK_LOST, "keep %s: the lock was already lost", l->name);
    struct relock__keeper *k = calloc(1, sizeof *k);
    if (!k)
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "keep %s: out of memory", l->name);
    pthread_mutex_init(&k->mu, NULL);
    pthread_mutex_init(&k->ev_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&k->cv, &ca);
    pthread_condattr_destroy(&ca);
    k->user = l;
    k->on_lost = on_lost;
    k->arg = arg;

    /* The thread's connection: the same settings, and the mode already
     * chosen (auto must not decide differently for the same lock). */
    relock_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.s = c->s;
    cfg.s.mode = c->mode;
    cfg.s.wait.notify = c->s.wait.notify;
    relock__err_clear(&cfg.err);
    relock_status st = relock_connect(&cfg, &k->c);
    memset(&cfg, 0, sizeof cfg); /* it held the password */
    if (st == RELOCK_OK)
        st = relock_lock_adopt(k->c, l->name, l->value, l->fence, l->ttl_ms, &k->shadow);
    if (st != RELOCK_OK) {
        RELOCK__FAIL_SRV(&c->err, st, k->c ? relock_client_error(k->c)->server : "",
                         "keep %s: %s", l->name,
                         k->c ? relock_client_error(k->c)->message : "out of memory");
        keeper_free(k);
        return st;
    }
    k->shadow->valid_until = l->valid_until;
    memcpy(k->value, l->value, sizeof k->value);
    k->shadow->loser_writes = l->loser_writes;
    k->shadow->breaks = l->breaks;
    k->shadow->breaks_known = l->breaks_known;
    k->shadow->acquired = l->acquired;
    k->shadow->acquired_at = l->acquired_at;
    /* The record the renewals write is the lock's, not the connection's. */
    k->shadow->owner_pid = l->owner_pid;
    k->shadow->owner_since = l->owner_since;
    free(k->shadow->owner_text);
    k->shadow->owner_text = NULL;
    if (l->owner_text && !(k->shadow->owner_text = strdup(l->owner_text))) {
        keeper_free(k);
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "keep %s: out of memory", l->name);
    }
    k->valid_until = l->valid_until;
    /* The thread starts with every signal blocked: the program's signals
     * belong to the program's threads, and a SIGPIPE raised by a write to
     * a connection the server closed (hiredis writes with write()) must not
     * kill a program that never ignored it; the write fails with EPIPE
     * instead, and the renewal reconnects. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&k->watch, NULL, keeper_watch, k);
    if (rc == 0) {
        k->watching = 1;
        rc = pthread_create(&k->thread, NULL, keeper_main, k);
        if (rc != 0) {
            pthread_mutex_lock(&k->mu);
            k->stop = 1;
            pthread_cond_broadcast(&k->cv);
            pthread_mutex_unlock(&k->mu);
            pthread_join(k->watch, NULL);
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        keeper_free(k);
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "keep %s: cannot start a thread", l->name);
    }
    l->keeper = k;
    l->keep_ops = &keep_ops;
    return RELOCK_OK;
}

static relock_status keep_end(relock_lock *l)
{
    struct relock__keeper *k = l->keeper;
    if (!k)
        return RELOCK_OK;
    pthread_mutex_lock(&k->mu);
    k->stop = 1;
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
    pthread_join(k->thread, NULL);
    if (k->watching)
        pthread_join(k->watch, NULL);
    /* The shadow is now the truth: its value (renewals change it in
     * legacy and bridge modes) and its validity come home. */
    memcpy(l->value, k->shadow->value, sizeof l->value);
    l->valid_until = k->shadow->valid_until;
    l->loser_writes = k->shadow->loser_writes;
    int lost = k->lost;
    l->keeper = NULL;
    keeper_free(k);
    if (lost) {
        l->lost = 1;
        return RELOCK_LOST;
    }
    return RELOCK_OK;
}

relock_status relock_keep_stop(relock_lock *l)
{
    if (!l)
        return RELOCK_EINVAL;
    relock_client *c = l->c;
    relock__err_clear(&c->err);
    if (!l->keeper)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "keep_stop %s: the lock is not kept",
                            l->name);
    if (keep_end(l) == RELOCK_LOST)
        return RELOCK__FAIL(&c->err, RELOCK_LOST, "keep %s: the lock was lost while kept",
                            l->name);
    return RELOCK_OK;
}

static relock_status keep_set_owner(relock_lock *l, long pid, const char *text,
                                    char value[RELOCK__VALUE_MAX])
{
    struct relock__keeper *k = l->keeper;
    char *dup = NULL;
    if (text[0] && !(dup = strdup(text)))
        return RELOCK_ENOMEM;
    pthread_mutex_lock(&k->mu);
    while (k->renewing && !k->lost)
        pthread_cond_wait(&k->cv, &k->mu);
    int lost = k->lost;
    if (!lost) {
        k->owner_writing = 1;
        free(k->owner_next);
        k->owner_next = dup;
        k->owner_next_pid = pid;
        k->owner_pending = 1;
        dup = NULL;
        memcpy(value, k->value, RELOCK__VALUE_MAX);
    }
    pthread_mutex_unlock(&k->mu);
    free(dup);
    return lost ? RELOCK_LOST : RELOCK_OK;
}

static void keep_owner_done(relock_lock *l)
{
    struct relock__keeper *k = l->keeper;
    pthread_mutex_lock(&k->mu);
    k->owner_writing = 0;
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
}

static uint64_t keep_valid_until(const relock_lock *l)
{
    struct relock__keeper *k = l->keeper;
    pthread_mutex_lock(&k->mu);
    uint64_t v = k->valid_until;
    pthread_mutex_unlock(&k->mu);
    return v;
}
