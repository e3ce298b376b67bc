/*
 * Quorum locks over independent masters (DESIGN §6, the Redlock scheme),
 * used whenever `servers` lists more than one.
 *
 * Every request goes to all servers at once: non-blocking hiredis contexts
 * driven by one poll() loop, each server with a short timeout of its own,
 * so one slow or dead server costs its timeout once, not once per server.
 * A request returns as soon as a majority has done what it asked (every
 * server has been sent it by then): the rest answer later, and those
 * replies are read and dropped before the next request's.  So one slow or
 * paused server does not slow a quorum that does not need it.
 * Values are modern tokens (unique), so ownership needs no timestamps.
 *
 * Acquire wins on a majority within the validity time.  The fencing token
 * is the largest counter of that majority, and before success is declared
 * the majority's counters are raised to it: any later majority shares a
 * server with this one, whose counter is then at least our token, so the
 * next holder's token is larger.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct relock__qserver {
    redisContext *ctx; /* non-blocking; NULL until (re)connected */
    int owed;          /* replies to earlier requests not read yet */
    uint64_t owed_at;  /* when the oldest of them was sent (mono ms) */
};

/* A server that still owes replies after this many requests is dropped
 * (and reconnected), as is one owing a reply older than its timeout. */
#define MAX_OWED 8

/* Whether one server's reply did what the request asked. */
typedef int (*reply_ok)(const redisReply *r);

typedef struct fan {
    redisReply *reply[RELOCK__MAX_SERVERS]; /* the request's reply, or NULL */
    int answered;                           /* servers that replied */
} fan;

static void drop(relock_client *c, int i)
{
    if (c->q[i].ctx)
        redisFree(c->q[i].ctx);
    c->q[i].ctx = NULL;
    c->q[i].owed = 0;
}

void relock__quorum_free(relock_client *c)
{
    for (int i = 0; i < c->s.nservers; i++)
        drop(c, i);
}

/* The scripts a quorum sends, loaded on every new connection. */
static const int quorum_scripts[] = {RELOCK__SCRIPT_MODERN_ACQUIRE, RELOCK__SCRIPT_FENCE_RAISE,
                                     RELOCK__SCRIPT_DEL_IF_EQ, RELOCK__SCRIPT_PEXPIRE_IF_EQ};

/* Queues AUTH, SELECT and SCRIPT LOAD of the quorum's scripts on a fresh
 * connection; returns how many replies they will produce ahead of the
 * request's.  Loading first means a server that answers late (after a
 * majority) has the script too: its NOSCRIPT could no longer be retried. */
static int connect_one(relock_client *c, int i)
{
    const relock__server *srv = &c->s.servers[i];
    redisContext *ctx = redisConnectNonBlock(srv->host, srv->port);
    if (!ctx || ctx->err) {
        if (ctx)
            redisFree(ctx);
        return -1;
    }
    c->q[i].ctx = ctx;
    int pre = 0;
    if (srv->password[0]) {
        if (srv->username[0])
            redisAppendCommand(ctx, "AUTH %s %s", srv->username, srv->password);
        else
            redisAppendCommand(ctx, "AUTH %s", srv->password);
        pre++;
    }
    if (srv->db) {
        redisAppendCommand(ctx, "SELECT %d", srv->db);
        pre++;
    }
    for (size_t k = 0; k < sizeof quorum_scripts / sizeof quorum_scripts[0]; k++) {
        redisAppendCommand(ctx, "SCRIPT LOAD %s", relock__script_source(quorum_scripts[k]));
        pre++;
    }
    return pre;
}

/* A script request: EVALSHA, and EVAL for a server that answers NOSCRIPT. */
typedef struct script_req {
    int argc;
    const char *argv[16];
    size_t argvlen[16];
    const char *eval;     /* the script's text */
    size_t evallen;
} script_req;

static int noscript(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* Appends the request, EVALSHA or (with_text) EVAL; 0 or -1. */
static int append(redisContext *ctx, const script_req *rq, int with_text)
{
    const char *argv[16];
    size_t argvlen[16];
    memcpy(argv, rq->argv, sizeof argv);
    memcpy(argvlen, rq->argvlen, sizeof argvlen);
    if (with_text) {
        argv[0] = "EVAL";
        argvlen[0] = 4;
        argv[1] = rq->eval;
        argvlen[1] = rq->evallen;
    }
    return redisAppendCommandArgv(ctx, rq->argc, argv, argvlen) == REDIS_OK ? 0 : -1;
}

/*
 * Runs script id on every server in mask (EVALSHA, then EVAL where a
 * server answers NOSCRIPT) and gathers the replies within timeout_ms, or
 * until `need` of them satisfy ok, but never before every request has been
 * written.  A server that fails, or is still silent when the time is up,
 * is dropped (reconnected next time: its state is unknown); one still
 * silent when enough others had answered is kept, owing its reply.
 */
static void fanout(relock_client *c, unsigned mask, int id, int nkeys, int nargs,
                   const char **args, long timeout_ms, reply_ok ok, int need, fan *f)
{
    script_req rq;
    char nk[16];
    snprintf(nk, sizeof nk, "%d", nkeys);
    rq.argc = nargs + 3;
    rq.argv[0] = "EVALSHA";
    rq.argv[1] = c->sha[id];
    rq.argv[2] = nk;
    for (int i = 0; i < nargs && i < 13; i++)
        rq.argv[3 + i] = args[i];
    for (int i = 0; i < rq.argc; i++)
        rq.argvlen[i] = strlen(rq.argv[i]);
    rq.eval = relock__script_source(id);
    rq.evallen = strlen(rq.eval);

    int n = c->s.nservers;
    int skip[RELOCK__MAX_SERVERS];
    int live[RELOCK__MAX_SERVERS];
    int sent[RELOCK__MAX_SERVERS];
    int fresh[RELOCK__MAX_SERVERS]; /* connected for this request */
    int retried[RELOCK__MAX_SERVERS]; /* EVAL sent after NOSCRIPT */
    int good = 0;
    uint64_t now = relock__mono_ms();
    memset(f, 0, sizeof *f);
    for (int i = 0; i < n; i++) {
        live[i] = skip[i] = sent[i] = fresh[i] = retried[i] = 0;
        if (!(mask & (1u << i)))
            continue;
        struct relock__qserver *q = &c->q[i];
        if (q->ctx && q->owed > 0 &&
            (q->owed >= MAX_OWED || now - q->owed_at > (uint64_t)timeout_ms))
            drop(c, i); /* too far behind: start afresh */
        if (!q->ctx) {
            skip[i] = connect_one(c, i);
            if (skip[i] < 0)
                continue;
            fresh[i] = 1;
        }
        /* Replies still owed to earlier requests come first. */
        skip[i] += q->owed;
        if (append(q->ctx, &rq, 0) != 0) {
            drop(c, i);
            continue;
        }
        if (q->owed == 0)
            q->owed_at = now;
        q->owed = 0;
        live[i] = 1;
    }
    uint64_t end = now + (uint64_t)timeout_ms;
    for (;;) {
        struct pollfd p[RELOCK__MAX_SERVERS];
        int idx[RELOCK__MAX_SERVERS], np = 0, unsent = 0;
        for (int i = 0; i < n; i++) {
            if (!live[i])
                continue;
            if (!sent[i]) {
                /* Send what is buffered (this also completes the connect). */
                if (redisBufferWrite(c->q[i].ctx, &sent[i]) != REDIS_OK) {
                    drop(c, i);
                    live[i] = 0;
                    continue;
                }
                unsent += !sent[i];
            }
            p[np].fd = c->q[i].ctx->fd;
            p[np].events = sent[i] ? POLLIN : POLLIN | POLLOUT;
            p[np].revents = 0;
            idx[np++] = i;
        }
        now = relock__mono_ms();
        if (np == 0 || now >= end || (good >= need && unsent == 0))
            break;
        int r = poll(p, (nfds_t)np, (int)(end - now));
        if (r < 0 && errno != EINTR)
            break;
        for (int k = 0; k < np && r > 0; k++) {
            int i = idx[k];
            if (!(p[k].revents & (POLLIN | POLLERR | POLLHUP)))
                continue;
            if (redisBufferRead(c->q[i].ctx) != REDIS_OK) {
                drop(c, i);
                live[i] = 0;
                continue;
            }
            /* Replies to AUTH/SELECT and earlier requests first, then the
             * request's. */
            for (;;) {
                void *rep = NULL;
                if (redisGetReplyFromReader(c->q[i].ctx, &rep) != REDIS_OK) {
                    drop(c, i);
                    live[i] = 0;
                    break;
                }
                if (!rep)
                    break;
                if (skip[i] > 0) {
                    /* An owed reply is dropped whatever it says; an
                     * error to AUTH, SELECT or SCRIPT LOAD (a new
                     * connection's first replies) makes the server
                     * unusable. */
                    int bad = fresh[i] && ((redisReply *)rep)->type == REDIS_REPLY_ERROR;
                    freeReplyObject(rep);
                    skip[i]--;
                    if (bad) {
                        drop(c, i);
                        live[i] = 0;
                        break;
                    }
                    continue;
                }
                if (!retried[i] && noscript(rep)) {
                    /* Its script cache was emptied (SCRIPT FLUSH) since
                     * we connected: send the text, at once and to it
                     * alone. */
                    freeReplyObject(rep);
                    retried[i] = 1;
                    sent[i] = 0;
                    if (append(c->q[i].ctx, &rq, 1) != 0) {
                        drop(c, i);
                        live[i] = 0;
                    }
                    break;
                }
                f->reply[i] = rep;
                f->answered++;
                good += ok(rep);
                live[i] = 0;
                break;
            }
        }
    }
    for (int i = 0; i < n; i++) {
        if (!live[i])
            continue;
        if (sent[i] && good >= need)
            c->q[i].owed = skip[i] + 1; /* read before the next request's */
        else
            drop(c, i); /* late: its reply would arrive out of turn */
    }
}

static void fan_free(fan *f)
{
    for (int i = 0; i < RELOCK__MAX_SERVERS; i++)
        if (f->reply[i])
            freeReplyObject(f->reply[i]);
    memset(f, 0, sizeof *f);
}

static int majority(const relock_client *c)
{
    return c->s.nservers / 2 + 1;
}

/* What each request asks of a server, as reply_ok predicates. */
static int acquired(const redisReply *r)
{
    return r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
           r->element[0]->type == REDIS_REPLY_INTEGER &&
           r->element[1]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1;
}

static int deleted(const redisReply *r)
{
    return r->type == REDIS_REPLY_INTEGER && r->integer >= 1; /* 1 + waiters told */
}

static int extended(const redisReply *r)
{
    return r->type == REDIS_REPLY_INTEGER && r->integer == 1;
}

static int raised(const redisReply *r)
{
    return r->type == REDIS_REPLY_INTEGER;
}

/* How many of the replies satisfy ok. */
static int count(const relock_client *c, const fan *f, reply_ok ok)
{
    int n = 0;
    for (int i = 0; i < c->s.nservers; i++)
        n += f->reply[i] && ok(f->reply[i]);
    return n;
}

static unsigned all_servers(const relock_client *c)
{
    return (1u << c->s.nservers) - 1;
}

/* Each server's own timeout: short against the lease (DESIGN §6), so a
 * dead server cannot eat the validity. */
static long server_timeout(const relock_client *c, long ttl_ms)
{
    long t = ttl_ms / 10 > 10 ? ttl_ms / 10 : 10;
    return t < c->s.command_timeout_ms ? t : c->s.command_timeout_ms;
}

/* Compare-and-delete everywhere (those that failed included); returns how
 * many servers deleted our value. */
static int delete_everywhere(relock_lock *l, fan *f)
{
    relock_client *c = l->c;
    char chan[RELOCK__KEY_MAX];
    relock__notify_channel(l, chan, sizeof chan);
    const char *args[] = {l->key, l->value, chan};
    fanout(c, all_servers(c), RELOCK__SCRIPT_DEL_IF_EQ, 1, 3, args,
                server_timeout(c, l->ttl_ms), deleted, majority(c), f);
    return count(c, f, deleted);
}

static relock_status quorum_attempt(relock_lock *l, long *hint_ms)
{
    relock_client *c = l->c;
    if (relock__token(l->value) != 0)
        return RELOCK__FAIL(&c->err, RELOCK_EIO, "acquire %s: no random bytes for a token",
                            l->name);
    char ttl[32];
    snprintf(ttl, sizeof ttl, "%ld", l->ttl_ms);
    uint64_t start = relock__mono_ms();
    long tmo = server_timeout(c, l->ttl_ms);
    fan f;
    const char *args[] = {l->key, l->fence_key, l->value, ttl};
    fanout(c, all_servers(c), RELOCK__SCRIPT_MODERN_ACQUIRE, 2, 4, args, tmo, acquired,
                majority(c), &f);
    unsigned won = 0;
    int nwon = 0;
    long long fence = 0, lowest = -1, shortest = -1;
    for (int i = 0; i < c->s.nservers; i++) {
        redisReply *r = f.reply[i];
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
            r->element[0]->type != REDIS_REPLY_INTEGER ||
            r->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        if (acquired(r)) {
            won |= 1u << i;
            nwon++;
            if (r->element[1]->integer > fence)
                fence = r->element[1]->integer;
            if (lowest < 0 || r->element[1]->integer < lowest)
                lowest = r->element[1]->integer;
        } else if (r->element[1]->integer >= 0 &&
                   (shortest < 0 || r->element[1]->integer < shortest)) {
            shortest = r->element[1]->integer;
        }
    }
    int answered = f.answered;
    fan_free(&f);
    uint64_t valid_until = relock__valid_until(start, l->ttl_ms);
    if (nwon >= majority(c) && relock__mono_ms() < valid_until && lowest == fence) {
        /* The majority's counters already agree on the token: nothing to
         * raise, and no round trip for it. */
        l->fence = fence;
        l->valid_until = valid_until;
        l->acquired = 1;
        return RELOCK_OK;
    }
    if (nwon >= majority(c) && relock__mono_ms() < valid_until) {
        /* Raise the majority's counters to the token before claiming it. */
        char fs[32];
        snprintf(fs, sizeof fs, "%lld", fence);
        const char *rargs[] = {l->fence_key, fs};
        fanout(c, won, RELOCK__SCRIPT_FENCE_RAISE, 1, 2, rargs, tmo, raised, majority(c),
                    &f);
        int nraised = count(c, &f, raised);
        fan_free(&f);
        if (nraised >= majority(c) && relock__mono_ms() < valid_until) {
            l->fence = fence;
            l->valid_until = valid_until;
            l->acquired = 1;
            return RELOCK_OK;
        }
    }
    /* No majority in time: leave no partial hold behind. */
    if (nwon > 0) {
        delete_everywhere(l, &f);
        fan_free(&f);
    }
    if (answered < majority(c))
        return RELOCK__FAIL(&c->err, RELOCK_EIO,
                            "acquire %s: only %d of %d servers answered; a majority (%d) is "
                            "needed",
                            l->name, answered, c->s.nservers, majority(c));
    /* No TTL known (all holders without one): the backoff decides. */
    *hint_ms = shortest >= 0 ? (shortest > 0x7fffffffLL ? 0x7fffffffL : (long)shortest) : -1;
    return RELOCK_BUSY;
}

static relock_status quorum_release(relock_lock *l)
{
    relock_client *c = l->c;
    fan f;
    int ndeleted = delete_everywhere(l, &f);
    int answered = f.answered;
    fan_free(&f);
    if (ndeleted >= majority(c))
        return RELOCK_OK;
    if (answered < majority(c))
        return RELOCK__FAIL(&c->err, RELOCK_EAMBIGUOUS,
                            "release %s: only %d of %d servers answered; the lock's state is "
                            "unknown",
                            l->name, answered, c->s.nservers);
    return RELOCK__FAIL(&c->err, RELOCK_LOST,
                        "release %s: lock lost: held on only %d of %d servers", l->name, ndeleted,
                        c->s.nservers);
}

static relock_status quorum_extend(relock_lock *l, long ttl_ms)
{
    relock_client *c = l->c;
    char ttl[32];
    snprintf(ttl, sizeof ttl, "%ld", ttl_ms);
    const char *args[] = {l->key, l->value, ttl};
    uint64_t start = relock__mono_ms();
    fan f;
    fanout(c, all_servers(c), RELOCK__SCRIPT_PEXPIRE_IF_EQ, 1, 3, args,
                server_timeout(c, ttl_ms), extended, majority(c), &f);
    int nextended = count(c, &f, extended);
    int answered = f.answered;
    fan_free(&f);
    uint64_t valid_until = relock__valid_until(start, ttl_ms);
    if (nextended >= majority(c) && relock__mono_ms() < valid_until) {
        l->ttl_ms = ttl_ms;
        l->valid_until = valid_until;
        return RELOCK_OK;
    }
    if (answered < majority(c))
        return RELOCK__FAIL(&c->err, RELOCK_EIO,
                            "extend %s: only %d of %d servers answered; a majority (%d) is "
                            "needed",
                            l->name, answered, c->s.nservers, majority(c));
    return RELOCK__FAIL(&c->err, RELOCK_LOST,
                        "extend %s: lock lost: held on only %d of %d servers", l->name, nextended,
                        c->s.nservers);
}

const relock__algo relock__algo_quorum = {
    "quorum", quorum_attempt, quorum_release, quorum_extend, NULL,
};

relock_status relock__quorum_setup(relock_client *c)
{
    /* Modern values only: tokens are unique across servers, while
     * timestamps, GETSET losers and legacy clients have no meaning for a
     * majority of independent masters. */
    if (c->s.mode == RELOCK_MODE_LEGACY || c->s.mode == RELOCK_MODE_BRIDGE ||
        (c->s.mode == RELOCK_MODE_AUTO && c->s.migration.legacy_clients))
        return RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                            "servers: quorum over %d servers uses modern values only; set "
                            "mode = \"modern\" (or auto with migration.legacy_clients = false)",
                            c->s.nservers);
    c->q = calloc((size_t)c->s.nservers, sizeof *c->q);
    if (!c->q)
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "servers: out of memory");
    c->mode = RELOCK_MODE_MODERN;
    snprintf(c->mode_reason, sizeof c->mode_reason,
             "quorum over %d servers (majority %d), modern values", c->s.nservers, majority(c));
    c->algo = &relock__algo_quorum;
    return RELOCK_OK;
}
