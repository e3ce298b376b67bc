/*
 * The blocking fan driver (fan.h): a fan machine's batches go to several
 * servers at once, over non-blocking hiredis contexts driven by one poll()
 * loop; each server's replies are fed back as they arrive.
 *
 * Connections (decision 44): a server that has not answered when a round
 * is decided keeps its connection and owes its replies, which are read
 * and dropped before its next ones.  A server owing 8 replies, or one
 * older than the round's timeout, is dropped when a later round would use
 * it, and left alone for one timeout, so that a paused server is not sent
 * a new connection per request; but a clean-up (a failed acquire's
 * delete) goes behind the owed request on its connection, however late,
 * so that the server runs it after the request it undoes.  Every new
 * connection is sent AUTH, SELECT and SCRIPT LOAD of the quorum's scripts
 * ahead of its first batch: a server that answers late has the script too
 * (its NOSCRIPT could no longer be retried), and a refused load is
 * harmless (NOSCRIPT then brings EVAL).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drive.h"
#include "engine/fan.h"
#include "transport.h"

struct relock__qserver {
    redisContext *ctx;  /* non-blocking; NULL until (re)connected */
    int setup;          /* AUTH/SELECT replies still to come */
    int loads;          /* SCRIPT LOAD replies still to come */
    int owed;           /* replies to earlier rounds not read yet */
    uint64_t owed_at;   /* when the oldest of them was sent (mono ms) */
    uint64_t last_used; /* for the idle-connection check */
    uint64_t retry_at;  /* dropped for lateness: not reconnected before this */
};

/* A server owing this many replies to earlier rounds is too far behind:
 * its connection is dropped before the next round uses it (and left alone
 * for one timeout).  The blocking driver runs one operation at a time, so
 * a server that owes more than a round or two is not keeping up; its age
 * bound (the round's timeout) catches a server slow once, this count one
 * that falls behind round after round.  The operation core's quorum
 * (src/core/fanout.c) pipelines many operations and bounds its owed
 * requests for memory only: MAX_OWED_REQUESTS there. */
#define MAX_REPLIES_BEHIND 8

/* The scripts a quorum sends, loaded on every new connection. */
static const int quorum_scripts[] = {RELOCK__SCRIPT_MODERN_ACQUIRE, RELOCK__SCRIPT_FENCE_RAISE,
                                     RELOCK__SCRIPT_DEL_IF_EQ, RELOCK__SCRIPT_PEXPIRE_IF_EQ};

/* The driver's view of one round. */
typedef struct fround {
    int live[RELOCK__MAX_SERVERS];     /* sent to, not wholly answered yet */
    int sent[RELOCK__MAX_SERVERS];     /* its batch wholly written */
    int expect[RELOCK__MAX_SERVERS];   /* replies its batch asks for */
    int got[RELOCK__MAX_SERVERS];      /* replies read so far */
    redisReply *rep[RELOCK__MAX_SERVERS][RELOCK__BATCH_CMDS];
    uint64_t start, end;
    long long timeout_ms;
    int open;
} fround;

static void drop(relock_client *c, int i)
{
    struct relock__qserver *q = &c->q[i];
    if (q->ctx)
        redisFree(q->ctx);
    q->ctx = NULL;
    q->setup = q->loads = q->owed = 0;
}

/* Drops a server that is late, and leaves it alone for a while. */
static void drop_late(relock_client *c, int i, uint64_t now, long long timeout_ms)
{
    drop(c, i);
    c->q[i].retry_at = now + (uint64_t)timeout_ms;
}

int relock__fan_setup(relock_client *c)
{
    c->q = calloc((size_t)c->s.nservers, sizeof *c->q);
    return c->q ? 0 : -1;
}

void relock__fan_free(relock_client *c)
{
    for (int i = 0; i < c->s.nservers; i++)
        drop(c, i);
}

/* Connects and queues AUTH, SELECT and SCRIPT LOAD; 0 or -1. */
static int connect_one(relock_client *c, int i)
{
    const relock__server *srv = &c->s.servers[i];
    struct relock__qserver *q = &c->q[i];
    redisContext *ctx = srv->port ? redisConnectNonBlock(srv->host, srv->port)
                                  : redisConnectUnixNonBlock(srv->host);
    if (!ctx || ctx->err) {
        if (ctx)
            redisFree(ctx);
        return -1;
    }
    q->ctx = ctx;
    q->last_used = relock__mono_ms();
    if (srv->password[0]) {
        if (srv->username[0])
            redisAppendCommand(ctx, "AUTH %s %s", srv->username, srv->password);
        else
            redisAppendCommand(ctx, "AUTH %s", srv->password);
        q->setup++;
    }
    if (srv->db) {
        redisAppendCommand(ctx, "SELECT %d", srv->db);
        q->setup++;
    }
    for (size_t k = 0; k < sizeof quorum_scripts / sizeof quorum_scripts[0]; k++) {
        redisAppendCommand(ctx, "SCRIPT LOAD %s", relock__script_source(quorum_scripts[k]));
        q->loads++;
    }
    return 0;
}

/* Appends server i's batch; 0 or -1. */
static int append(redisContext *ctx, const relock__batch *b)
{
    for (int k = 0; k < b->n; k++) {
        const relock__cmd *cmd = &b->cmd[k];
        /* hiredis 0.14 takes the words without const; it only reads them. */
        if (redisAppendCommandArgv(ctx, cmd->argc, (const char **)cmd->argv, cmd->len) !=
            REDIS_OK)
            return -1;
    }
    return 0;
}

/* A refused AUTH or SELECT, as a fault for the machine. */
static void config_fault(relock_client *c, int i, const redisReply *rep, relock__fanfeed *f,
                         char (*text)[448])
{
    const relock__server *srv = &c->s.servers[i];
    snprintf(text[i], sizeof text[i], "%.255s:%d: AUTH/SELECT: %.150s", srv->host, srv->port,
             rep->str ? rep->str : "");
    f->from |= 1u << i;
    f->srv[i].nreply = 0;
    f->srv[i].fault = RELOCK__FAULT_LOST;
    f->srv[i].fault_status = RELOCK_ECONFIG;
    f->srv[i].fault_text = text[i];
}

/* Reads what server i sent before its batch's replies: AUTH/SELECT (an
 * error there drops it, as a fault for the machine), SCRIPT LOAD (errors
 * ignored), and replies owed to earlier rounds (dropped whatever they
 * say).  Returns 1 when rep was one of those (and freed), 0 when it is
 * the batch's, -1 when the server was dropped. */
static int before_reply(relock_client *c, int i, redisReply *rep, relock__fanfeed *f,
                        char (*text)[448])
{
    struct relock__qserver *q = &c->q[i];
    if (q->setup > 0) {
        q->setup--;
        if (rep->type == REDIS_REPLY_ERROR) {
            config_fault(c, i, rep, f, text);
            freeReplyObject(rep);
            drop(c, i);
            return -1;
        }
    } else if (q->loads > 0) {
        q->loads--;
    } else if (q->owed > 0) {
        q->owed--;
    } else {
        return 0;
    }
    freeReplyObject(rep);
    return 1;
}

/* Reads, without waiting, what server i owes that has arrived meanwhile;
 * 0, or -1 when the server is to be dropped. */
static int catch_up(relock_client *c, int i, relock__fanfeed *f, char (*text)[448])
{
    struct relock__qserver *q = &c->q[i];
    struct pollfd p = {q->ctx->fd, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0)
        return 0;
    if (redisBufferRead(q->ctx) != REDIS_OK)
        return -1;
    for (;;) {
        void *v = NULL;
        if (redisGetReplyFromReader(q->ctx, &v) != REDIS_OK)
            return -1;
        if (!v)
            return 0;
        int before = before_reply(c, i, v, f, text);
        if (before == 0)
            freeReplyObject(v); /* nobody asked for it: out of step */
        if (before <= 0)
            return -1;
    }
}

/* Connects server i if needed and appends its batch; 0 or -1 (not sent:
 * down, left alone after being late, or failing).  after: the batch
 * undoes what earlier requests may have done (fan.h): it goes behind them
 * on their connection however late they are, and to a new one only when
 * that connection is gone. */
static int start_one(relock_client *c, int i, const relock__batch *b, uint64_t now,
                     long long timeout_ms, int after, relock__fanfeed *f, char (*text)[448])
{
    struct relock__qserver *q = &c->q[i];
    if (q->ctx && q->owed + q->setup + q->loads > 0 && catch_up(c, i, f, text) != 0)
        drop(c, i);
    if (q->ctx && q->owed > 0 && !after &&
        (q->owed >= MAX_REPLIES_BEHIND || now - q->owed_at > (uint64_t)timeout_ms))
        drop_late(c, i, now, timeout_ms); /* too far behind */
    else if (q->ctx && q->owed == 0 && q->setup + q->loads == 0 &&
             relock__ctx_stale(q->ctx, &q->last_used))
        drop(c, i); /* closed by the server while idle: reconnect now */
    if (!q->ctx && ((now < q->retry_at && !after) || connect_one(c, i) != 0))
        return -1;
    q->last_used = now;
    if (append(q->ctx, b) != 0) {
        drop(c, i);
        return -1;
    }
    return 0;
}

static void free_got(fround *r, int i)
{
    for (int k = 0; k < r->got[i]; k++)
        if (r->rep[i][k]) {
            freeReplyObject(r->rep[i][k]);
            r->rep[i][k] = NULL;
        }
    r->got[i] = 0;
}

/* The round is decided: a server still silent owes its replies if its
 * batch was written, in time or late (it may still run the request, and
 * a clean-up must follow it on this connection; a server too far behind
 * is dropped when a later round would use it), else it is dropped. */
static void close_round(relock_client *c, fround *r)
{
    if (!r->open)
        return;
    r->open = 0;
    for (int i = 0; i < c->s.nservers; i++) {
        if (!r->live[i]) {
            free_got(r, i);
            continue;
        }
        struct relock__qserver *q = &c->q[i];
        if (r->sent[i]) {
            if (q->owed == 0)
                q->owed_at = r->start;
            q->owed += r->expect[i] - r->got[i]; /* read before the next round's */
        } else {
            drop(c, i); /* decided without it, and nothing reached it */
        }
        r->live[i] = 0;
        free_got(r, i);
    }
}

/* Server i failed: dropped, and fed as a fault. */
static void lost(relock_client *c, fround *r, int i, relock__fanfeed *f)
{
    drop(c, i);
    r->live[i] = 0;
    f->from |= 1u << i;
    f->srv[i].nreply = 0;
    f->srv[i].fault = r->sent[i] ? RELOCK__FAULT_LOST : RELOCK__FAULT_UNSENT;
    f->srv[i].fault_status = RELOCK_EIO;
    f->srv[i].fault_text = NULL;
}

/* Writes what is buffered for the live servers (this also completes the
 * connect); a failure is fed as a fault. */
static void flush(relock_client *c, fround *r, relock__fanfeed *f)
{
    for (int i = 0; i < c->s.nservers; i++)
        if (r->live[i] && !r->sent[i] && redisBufferWrite(c->q[i].ctx, &r->sent[i]) != REDIS_OK)
            lost(c, r, i, f);
}

/* Frees what the last feed brought and empties it. */
static void reset_feed(relock__fanfeed *f, fround *r, int n)
{
    for (int i = 0; i < n; i++) {
        if ((f->from >> i) & 1u)
            free_got(r, i);
        memset(&f->srv[i], 0, sizeof f->srv[i]);
        f->srv[i].reply = r->rep[i];
    }
    f->from = 0;
    f->reached = 0;
}

static unsigned written(const fround *r, int n)
{
    unsigned w = 0;
    for (int i = 0; i < n; i++)
        w |= (r->live[i] && r->sent[i]) ? 1u << i : 0u;
    return w;
}

/* Reads server i's replies; feeds them once its batch is wholly answered. */
static void read_one(relock_client *c, fround *r, int i, relock__fanfeed *f, char (*text)[448])
{
    if (redisBufferRead(c->q[i].ctx) != REDIS_OK) {
        lost(c, r, i, f);
        return;
    }
    for (;;) {
        void *v = NULL;
        if (redisGetReplyFromReader(c->q[i].ctx, &v) != REDIS_OK) {
            lost(c, r, i, f);
            return;
        }
        if (!v)
            return;
        int before = before_reply(c, i, v, f, text);
        if (before > 0)
            continue;
        if (before < 0) {
            r->live[i] = 0;
            return;
        }
        r->rep[i][r->got[i]++] = v;
        if (r->got[i] == r->expect[i]) {
            r->live[i] = 0;
            f->from |= 1u << i;
            f->srv[i].nreply = r->got[i];
            return;
        }
    }
}

relock_status relock__fan_drive(relock_lock *l, relock__fan_fn fn, void *m)
{
    relock_client *c = l->c;
    relock__mhead *h = m;
    int n = c->s.nservers;
    /* One allocation per operation: the batches are large (the fan-out's
     * words for every server), the rest small; only the state is zeroed. */
    struct {
        relock__fanout out;
        fround r;
        relock__fanfeed f;
        char text[RELOCK__MAX_SERVERS][448];
    } *d = malloc(sizeof *d);
    if (!d)
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "lock %s: out of memory", l->name);
    relock__fanout *out = &d->out;
    fround *r = &d->r;
    relock__fanfeed *f = &d->f;
    char(*text)[448] = d->text;
    memset(r, 0, sizeof *r);
    memset(f, 0, sizeof *f);
    reset_feed(f, r, n);
    f->mono_ms = relock__mono_ms();
    relock_status st = RELOCK_OK;
    for (int feeds = 0;; feeds++) {
        f->written = written(r, n);
        relock__step s = fn(m, l, f, out);
        reset_feed(f, r, n);
        if (s == RELOCK__STEP_DONE) {
            close_round(c, r);
            st = h->st;
            break;
        }
        int bad = feeds >= RELOCK__FAN_MAX_FEEDS;
        for (int i = 0; s == RELOCK__STEP_SEND && i < n; i++)
            if ((out->mask >> i) & 1u)
                bad |= !relock__batch_ok(&out->b[i]) || out->b[i].n < 1;
        if (bad) {
            close_round(c, r);
            st = RELOCK__FAIL(&c->err, RELOCK_EPROTO, "lock %s: internal error: %s", l->name,
                              feeds >= RELOCK__FAN_MAX_FEEDS ? "an operation did not end"
                                                             : "a command batch overflowed");
            break;
        }
        if (s == RELOCK__STEP_SEND && out->round) {
            /* A new round: the last one is decided. */
            close_round(c, r);
            r->open = 1;
            r->timeout_ms = out->timeout_ms;
            r->start = relock__mono_ms();
            r->end = r->start + (uint64_t)out->timeout_ms;
            for (int i = 0; i < n; i++) {
                r->sent[i] = r->got[i] = 0;
                r->live[i] = 0;
                if (!((out->mask >> i) & 1u))
                    continue;
                r->expect[i] = out->b[i].n;
                if (start_one(c, i, &out->b[i], r->start, r->timeout_ms,
                              (int)((out->after >> i) & 1u), f, text) == 0) {
                    r->live[i] = 1;
                    f->reached |= 1u << i;
                }
            }
            flush(c, r, f);
            f->mono_ms = r->start;
            continue;
        }
        if (s == RELOCK__STEP_SEND) {
            /* Within the round: a server's batch again, in place of the
             * one it answered. */
            for (int i = 0; i < n; i++) {
                if (!((out->mask >> i) & 1u))
                    continue;
                r->sent[i] = r->got[i] = 0;
                r->expect[i] = out->b[i].n;
                r->live[i] = 1;
                if (!c->q[i].ctx || append(c->q[i].ctx, &out->b[i]) != 0)
                    lost(c, r, i, f);
            }
        }
        /* Wait for replies, or the round's deadline. */
        flush(c, r, f);
        if (f->from) {
            f->mono_ms = relock__mono_ms();
            continue;
        }
        struct pollfd p[RELOCK__MAX_SERVERS];
        int idx[RELOCK__MAX_SERVERS], np = 0;
        for (int i = 0; i < n; i++) {
            if (!r->live[i])
                continue;
            p[np].fd = c->q[i].ctx->fd;
            p[np].events = r->sent[i] ? POLLIN : POLLIN | POLLOUT;
            p[np].revents = 0;
            idx[np++] = i;
        }
        uint64_t now = relock__mono_ms();
        if (np > 0 && now < r->end) {
            int pr = poll(p, (nfds_t)np, (int)(r->end - now));
            if (pr < 0 && errno != EINTR) {
                for (int k = 0; k < np; k++)
                    lost(c, r, idx[k], f);
            }
            for (int k = 0; k < np && pr > 0; k++)
                if (p[k].revents & (POLLIN | POLLERR | POLLHUP))
                    read_one(c, r, idx[k], f, text);
        }
        f->mono_ms = relock__mono_ms();
    }
    reset_feed(f, r, n);
    for (int i = 0; i < n; i++)
        free_got(r, i);
    free(d);
    return st;
}
