/*
 * Waiting for a lock (design.md §7): repeat the algorithm's single attempt,
 * and between attempts do what the wait planner (src/algo/engine/waitplan.c)
 * says: subscribe to release notices and look again at once, sleep until
 * the first of a release notification, just after the holder's known end
 * (PTTL or timestamp), the start of a legacy holder's expiry window, or a
 * jittered, growing backoff (never past the caller's bound), or give up.
 * This file carries out those decisions: the subscription and the sleep.
 *
 * Notifications come by pub/sub on a second connection, opened only while
 * waiting (a subscribed connection can send nothing else).  They only wake
 * a waiter early: legacy clients never send them, and a lost one costs at
 * most one backoff, so correctness never rests on them.
 */
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "engine/waitplan.h"
#include "fence.h"
#include "algo.h"
#include "pollloop.h"

static void unsubscribe(relock_client *c)
{
    if (c->sub)
        redisFree(c->sub);
    c->sub = NULL;
}

static struct timeval tv_ms(long long ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

/* Sends cmd on the subscriber; 1 when the reply is not an error. */
static int sub_ok(redisContext *sub, int argc, const char **argv)
{
    redisReply *r = redisCommandArgv(sub, argc, argv, NULL);
    int ok = r && r->type != REDIS_REPLY_ERROR;
    if (r)
        freeReplyObject(r);
    return ok;
}

/* Subscribes to chan on srv (logged in and its db selected as srv says),
 * every step bounded by the client's timeouts (a paused server must not
 * hold the waiter); 0 on success.  A failure only means waiting without
 * notices: it is said nowhere. */
static int subscribe_on(relock_client *c, const relock__server *srv, const char *chan)
{
    /* Port 0: host is a unix socket's path. */
    redisContext *sub = srv->port
                            ? redisConnectWithTimeout(srv->host, srv->port,
                                                      tv_ms(c->s.connect_timeout_ms))
                            : redisConnectUnixWithTimeout(srv->host,
                                                          tv_ms(c->s.connect_timeout_ms));
    if (!sub)
        return -1;
    c->sub = sub;
    char db[16];
    snprintf(db, sizeof db, "%d", srv->db);
    const char *auth[] = {"AUTH", srv->username[0] ? srv->username : srv->password,
                          srv->password};
    const char *sel[] = {"SELECT", db};
    const char *subs[] = {"SUBSCRIBE", chan};
    if (sub->err || redisSetTimeout(sub, tv_ms(c->s.command_timeout_ms)) != REDIS_OK ||
        (srv->password[0] && !sub_ok(sub, srv->username[0] ? 3 : 2, auth)) ||
        (srv->db != 0 && !sub_ok(sub, 2, sel)) || !sub_ok(sub, 2, subs)) {
        unsubscribe(c);
        return -1;
    }
    return 0;
}

/* Opens the subscriber connection for l's channel; failures only mean
 * waiting without notifications.  With a quorum every server announces
 * releases, so the first that accepts the subscription will do. */
static void subscribe(relock_lock *l)
{
    relock_client *c = l->c;
    char chan[RELOCK__KEY_MAX];
    if (!relock__notify_channel(l, chan, sizeof chan))
        return;
    if (!c->q) {
        /* the server the lock is on: the master the sentinels named, the
         * key's Cluster master */
        subscribe_on(c, relock__poll_server(c, l->key), chan);
        return;
    }
    for (int i = 0; i < c->s.nservers; i++)
        if (subscribe_on(c, &c->s.servers[i], chan) == 0)
            return;
}

/* Whether the program asked the wait to end (relock_client_cancel_on). */
static int cancelled(const relock_client *c)
{
    return c->cancel && *c->cancel;
}

/* Sleeps up to ms, returning early when a release is announced (1), or
 * when a signal the program catches interrupts the sleep and asks for the
 * wait to end. */
static int wait_for_release(relock_client *c, long long ms)
{
    if (!c->sub) {
        uint64_t end = relock__mono_ms() + (uint64_t)ms;
        for (uint64_t now = relock__mono_ms(); now < end && !cancelled(c);
             now = relock__mono_ms()) {
            long long left = (long long)(end - now);
            struct timespec ts = {left / 1000, (left % 1000) * 1000000L};
            if (nanosleep(&ts, NULL) == 0)
                break;
        }
        return 0;
    }
    void *reply = NULL;
    /* A message already read into hiredis's buffer counts at once. */
    if (redisGetReplyFromReader(c->sub, &reply) == REDIS_OK && reply) {
        freeReplyObject(reply);
        return 1;
    }
    uint64_t end = relock__mono_ms() + (uint64_t)ms;
    for (;;) {
        uint64_t now = relock__mono_ms();
        if (now >= end)
            return 0;
        struct pollfd p = {c->sub->fd, POLLIN, 0};
        int n = poll(&p, 1, (int)(end - now));
        if (n > 0) {
            if (redisGetReply(c->sub, &reply) != REDIS_OK) {
                unsubscribe(c); /* broken: fall back to sleeping */
                relock__sleep_ms((long long)(end - relock__mono_ms()));
                return 0;
            }
            if (reply)
                freeReplyObject(reply);
            return reply != NULL;
        }
        if (n < 0 && cancelled(c))
            return 0;
        if (n < 0)
            relock__sleep_ms(1); /* EINTR: look again, bounded by end */
    }
}

/* Milliseconds left until the monotonic deadline (0: none). */
static long long left_ms(uint64_t deadline)
{
    if (!deadline)
        return 0;
    uint64_t now = relock__mono_ms();
    return now >= deadline ? 0 : (long long)(deadline - now);
}

relock_status relock__wait_acquire(relock_lock *l, long long wait_ms)
{
    relock_client *c = l->c;
    uint64_t start = relock__mono_ms();
    uint64_t deadline = wait_ms > 0 ? start + (uint64_t)wait_ms : 0;
    relock_status st = RELOCK_BUSY;
    if (!c->q && !(c->mode == RELOCK_MODE_MODERN && !c->s.fencing)) {
        st = relock__fence_seed(l);
        if (st != RELOCK_OK)
            return st;
    }
    /* Bridge and modern clients watch for legacy writers (the marker);
     * scan trusts their silence only after a whole window of it.  Before
     * the attempts: in a Cluster the marker's slot may be another node's,
     * and each attempt routes to the lock's own. */
    if (!c->q && (c->mode == RELOCK_MODE_BRIDGE || c->mode == RELOCK_MODE_MODERN))
        relock__note_watching(c);
    int notified = 0; /* the sleep before this attempt ended by a notice */
    for (unsigned attempt = 0;; attempt++) {
        long hint = -1; /* the attempt's hint: at most about 24 days */
        l->legacy_holder = 0;
        l->after_notice = notified;
        notified = 0;
        relock__durable_mark(l);
        st = c->algo->attempt(l, &hint);
        if (st != RELOCK_BUSY)
            break;
        if (cancelled(c)) {
            st = RELOCK__FAIL(&c->err, RELOCK_ECANCELED, "lock %s: the wait was cancelled",
                              l->name);
            break;
        }
        relock__wait_in in = relock__wait_in_of(l);
        in.attempt = attempt;
        in.holder_ms = hint;
        in.subscribed = c->sub != NULL;
        in.bound_ms = wait_ms;
        in.left_ms = left_ms(deadline);
        relock__wait_plan p = relock__wait_plan_next(&in);
        if (p.act == RELOCK__WAIT_SUBSCRIBE) {
            subscribe(l);
            in.after_subscribe = 1;
            in.subscribed = c->sub != NULL;
            in.left_ms = left_ms(deadline);
            p = relock__wait_plan_next(&in);
        }
        /* A modern client that meets a live classic holder: legacy clients
         * are still active, and they take modern values for expired.  The
         * detail says so; the command line prints it at once. */
        const char *classic = c->mode == RELOCK_MODE_MODERN && l->legacy_holder
                                  ? RELOCK_CLASSIC_HOLDER_NOTE
                                  : "";
        if (p.act == RELOCK__WAIT_BUSY) {
            st = RELOCK__FAIL(&c->err, RELOCK_BUSY, "lock %s is held%s", l->name, classic);
            break;
        }
        if (p.act == RELOCK__WAIT_TIMEOUT) {
            st = RELOCK__FAIL(&c->err, RELOCK_TIMEOUT, "lock %s: still held after %lld ms%s",
                              l->name, wait_ms, classic);
            break;
        }
        if (p.act == RELOCK__WAIT_SLEEP)
            notified = wait_for_release(c, p.sleep_ms);
        if (cancelled(c)) {
            st = RELOCK__FAIL(&c->err, RELOCK_ECANCELED, "lock %s: the wait was cancelled",
                              l->name);
            break;
        }
        /* RELOCK__WAIT_RETRY: look again at once. */
    }
    unsubscribe(c);
    l->after_notice = 0;
    return st;
}
