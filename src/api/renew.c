/*
 * Automatic renewal (relock_keep): a thread renews a shadow of the lock on
 * a client of its own, with the operation core's renewal (src/core/
 * renewal.c) on the thread's poll loop (relock__poll_keep()).  The
 * caller's client is never touched from the thread, so "one client, one
 * thread" holds; the two meet only under the keeper's mutex, and the
 * owner's thread wakes the loop through a pipe.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "handle.h"
#include "core/pollloop.h"

struct relock__keeper {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int wake[2];          /* a pipe: the owner ends the loop's turn */
    int stop;             /* set by the owner: end the thread */
    int lost;             /* set by the thread: the lock is gone */
    uint64_t valid_until; /* the shadow's validity, for the owner to read */
    relock_client *c;     /* the thread's own connection */
    relock_lock *shadow;  /* the lock as the thread renews it */
    relock_lock *user;
    relock_lost_fn on_lost;
    void *arg;
    /* A renewal under way (renewing: the thread's start, a turn of the
     * loop, or a renewal in flight) holds back the owner's record write,
     * which holds back the next renewal (owner_writing: from the owner's
     * call to the write's end): the record is conditional on the value
     * the key holds (in legacy and bridge modes each renewal writes a new
     * one), and no renewal's note with the old text lands after it.  Both
     * are signalled on cv. */
    int renewing;
    int owner_writing;
};

/* Ends the thread's turn of its loop now (the pipe is non-blocking: a
 * full pipe has a wake pending already). */
static void keeper_wake(struct relock__keeper *k)
{
    char x = 0;
    ssize_t n = write(k->wake[1], &x, 1);
    (void)n;
}

/* Before each turn of the thread's loop (relock__poll_keep()): the
 * shadow's validity as the last turn left it, for the owner's thread; the
 * owner's record write waited for when no renewal is in flight; non-zero
 * to stop. */
static int keeper_turn(void *p, int busy)
{
    struct relock__keeper *k = p;
    pthread_mutex_lock(&k->mu);
    if (!k->lost)
        k->valid_until = k->shadow->valid_until;
    k->renewing = busy;
    pthread_cond_broadcast(&k->cv);
    while (!busy && !k->stop && !k->lost && k->owner_writing)
        pthread_cond_wait(&k->cv, &k->mu);
    int stop = k->stop || k->lost;
    k->renewing = 1; /* a renewal may start within the turn */
    pthread_mutex_unlock(&k->mu);
    return stop;
}

/* The core reports the loss once (its event already told). */
static void keeper_lost(void *p, relock_status why)
{
    struct relock__keeper *k = p;
    pthread_mutex_lock(&k->mu);
    k->lost = 1;
    k->valid_until = 0;
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
    if (k->on_lost)
        k->on_lost(k->user, why, k->arg);
}

static void *keeper_main(void *p)
{
    struct relock__keeper *k = p;
    relock__keep_hooks h = {keeper_turn, keeper_lost, k, k->wake[0]};
    relock__poll_keep(k->shadow, &h);
    pthread_mutex_lock(&k->mu);
    k->renewing = 0;
    if (!k->lost)
        k->valid_until = k->shadow->valid_until;
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

static void keeper_free(struct relock__keeper *k)
{
    relock_lock_free(k->shadow);
    relock_client_free(k->c);
    close(k->wake[0]);
    close(k->wake[1]);
    pthread_cond_destroy(&k->cv);
    pthread_mutex_destroy(&k->mu);
    free(k);
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
    keeper_wake(k);
    pthread_join(k->thread, NULL);
    /* The shadow is now the truth: its value and validity come home. */
    memcpy(l->value, k->shadow->value, sizeof l->value);
    l->valid_until = k->shadow->valid_until;
    l->loser_writes = k->shadow->loser_writes;
    relock_status st = k->lost ? RELOCK_LOST : RELOCK_OK;
    if (k->lost)
        l->lost = 1;
    l->keeper = NULL;
    keeper_free(k);
    return st;
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
    k->owner_writing = 1;
    keeper_wake(k); /* the turn ends, and the loop waits before the next */
    while (k->renewing && !k->lost)
        pthread_cond_wait(&k->cv, &k->mu);
    int lost = k->lost;
    k->owner_writing = !lost;
    if (!lost) {
        free(k->shadow->owner_text);
        k->shadow->owner_text = dup;
        k->shadow->owner_pid = pid;
        dup = NULL;
        memcpy(value, k->shadow->value, RELOCK__VALUE_MAX);
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

/* The operations the lock calls while kept (relock__keep_ops). */
static const relock__keep_ops keep_ops = {keep_end, keep_valid_until, keep_set_owner,
                                          keep_owner_done};

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
    if (pipe2(k->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        free(k);
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "keep %s: no pipe: %s", l->name,
                            strerror(errno));
    }
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->cv, NULL); /* (waited on without a timeout) */
    k->user = l;
    k->on_lost = on_lost;
    k->arg = arg;

    /* The thread's connection: the same settings, and the mode already
     * chosen (auto must not decide differently for the same lock). */
    relock_config cfg = {.s = c->s};
    cfg.s.mode = c->mode;
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
    k->renewing = 1; /* until the thread's first turn */
    /* Every signal blocked on the thread: the program's signals belong to
     * its own threads, and a write to a connection the server closed fails
     * with EPIPE instead of raising a SIGPIPE that kills a program that
     * never ignored it; the renewal reconnects. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&k->thread, NULL, keeper_main, k);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        keeper_free(k);
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "keep %s: cannot start a thread", l->name);
    }
    l->keeper = k;
    l->keep_ops = &keep_ops;
    return RELOCK_OK;
}
