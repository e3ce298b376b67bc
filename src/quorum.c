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

#include "algo.h"

struct relock__qserver {
    redisContext *ctx;  /* non-blocking; NULL until (re)connected */
    int setup;          /* AUTH/SELECT replies still to come */
    int loads;          /* SCRIPT LOAD replies still to come */
    int owed;           /* requests whose replies were not read yet */
    uint64_t owed_at;   /* when the oldest of them was sent (mono ms) */
    uint64_t last_used; /* for the idle-connection check */
    uint64_t retry_at;  /* dropped for lateness: not reconnected before this */
};

/* A server that still owes replies to this many requests is dropped, as is
 * one owing a reply older than its timeout; either is left alone for one
 * timeout before it is connected again, so that a paused server is not
 * sent a new connection per request. */
#define MAX_OWED 8

/* Whether one server's reply did what the request asked. */
typedef int (*reply_ok)(const redisReply *r);

typedef struct fan {
    redisReply *reply[RELOCK__MAX_SERVERS]; /* the request's reply, or NULL */
    int answered;    /* servers whose reply has the expected shape */
    int reached;     /* servers connected (or connecting) and sent to */
    unsigned owing;  /* servers left owing their reply */
    int config;      /* a server refused AUTH or SELECT: error says which */
    int nolua;       /* a server answered that EVAL or EVALSHA is unknown */
    char error[448]; /* the first server error ("host:port: text"), or "" */
} fan;

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

void relock__quorum_free(relock_client *c)
{
    for (int i = 0; i < c->s.nservers; i++)
        drop(c, i);
}

/* The scripts a quorum sends, loaded on every new connection. */
static const int quorum_scripts[] = {RELOCK__SCRIPT_MODERN_ACQUIRE, RELOCK__SCRIPT_FENCE_RAISE,
                                     RELOCK__SCRIPT_DEL_IF_EQ, RELOCK__SCRIPT_PEXPIRE_IF_EQ};

/* Connects and queues AUTH, SELECT and SCRIPT LOAD of the quorum's
 * scripts; 0 or -1.  Loading first means a server that answers late (after
 * a majority) has the script too: its NOSCRIPT could no longer be retried.
 * A refused load is harmless (NOSCRIPT then brings EVAL). */
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

/* A script request: EVALSHA, and EVAL for a server that answers NOSCRIPT. */
typedef struct script_req {
    int argc;
    const char *argv[16];
    size_t argvlen[16];
    const char *eval;     /* the script's text */
    size_t evallen;
    int type;             /* the reply type a server that ran it gives */
} script_req;

static int noscript(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* Whether r is what the script returns: an integer, or (acquire) an array
 * of two integers.  Errors and anything else are not answers. */
static int shaped(const redisReply *r, int type)
{
    if (r->type != type)
        return 0;
    return type != REDIS_REPLY_ARRAY ||
           (r->elements >= 2 && r->element[0]->type == REDIS_REPLY_INTEGER &&
            r->element[1]->type == REDIS_REPLY_INTEGER);
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

/* Notes the first error of a fan-out. */
static void fan_error(fan *f, const relock__server *srv, const char *what, const char *text)
{
    if (!f->error[0])
        snprintf(f->error, sizeof f->error, "%.255s:%d: %.20s%.150s", srv->host, srv->port,
                 what, text);
}

/* Reads what server i sent before the request's reply: AUTH/SELECT (an
 * error there drops it as misconfigured), SCRIPT LOAD (errors ignored), and
 * replies owed to earlier requests (dropped whatever they say).  Returns 1
 * when rep was one of those (and freed), 0 when it is the request's, -1
 * when the server was dropped. */
static int before_reply(relock_client *c, int i, redisReply *rep, fan *f)
{
    struct relock__qserver *q = &c->q[i];
    if (q->setup > 0) {
        q->setup--;
        if (rep->type == REDIS_REPLY_ERROR) {
            f->config = 1;
            fan_error(f, &c->s.servers[i], "AUTH/SELECT: ", rep->str);
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

/* Reads, without waiting, what server i owes that has arrived meanwhile
 * (while the caller did other things); 0, or -1 when the server was or is
 * to be dropped. */
static int catch_up(relock_client *c, int i, fan *f)
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
        int before = before_reply(c, i, v, f);
        if (before == 0)
            freeReplyObject(v); /* nobody asked for it: out of step */
        if (before <= 0)
            return -1;
    }
}

/* Connects server i if needed and appends the request; 0 or -1 (not sent:
 * down, left alone after being late, or failing). */
static int start_one(relock_client *c, int i, const script_req *rq, uint64_t now,
                     long timeout_ms, fan *f)
{
    struct relock__qserver *q = &c->q[i];
    if (q->ctx && q->owed + q->setup + q->loads > 0 && catch_up(c, i, f) != 0)
        drop(c, i);
    if (q->ctx && q->owed > 0 &&
        (q->owed >= MAX_OWED || now - q->owed_at > (uint64_t)timeout_ms))
        drop_late(c, i, now, timeout_ms); /* too far behind */
    else if (q->ctx && q->owed == 0 && q->setup + q->loads == 0 &&
             relock__ctx_stale(q->ctx, &q->last_used))
        drop(c, i); /* closed by the server while idle: reconnect now */
    if (!q->ctx && (now < q->retry_at || connect_one(c, i) != 0))
        return -1;
    q->last_used = now;
    if (append(q->ctx, rq, 0) != 0) {
        drop(c, i);
        return -1;
    }
    return 0;
}

/*
 * Runs script id on every server in mask (EVALSHA, then EVAL where a
 * server answers NOSCRIPT) and gathers the replies of the expected type
 * within timeout_ms.  It returns once the outcome is decided: `need`
 * replies satisfy ok (need 0: once the requests are written), or so many
 * replies do not that the others cannot make up need.  A server still
 * silent then keeps its connection and owes its reply (f->owing) if its
 * request was written; otherwise it is dropped (nothing reached it).  A
 * server that fails, or is still silent when the time is up, is dropped
 * (reconnected later: its state is unknown).  Error replies are not
 * answers: the first is kept in f->error.
 */
static void fanout(relock_client *c, unsigned mask, int id, int type, int nkeys, int nargs,
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
    rq.type = type;

    int n = c->s.nservers;
    int live[RELOCK__MAX_SERVERS];    /* sent to, not answered yet */
    int sent[RELOCK__MAX_SERVERS];    /* its request wholly written */
    int retried[RELOCK__MAX_SERVERS]; /* EVAL sent after NOSCRIPT */
    int good = 0, asked = 0;
    uint64_t start = relock__mono_ms();
    memset(f, 0, sizeof *f);
    for (int i = 0; i < n; i++) {
        live[i] = sent[i] = retried[i] = 0;
        asked += (mask >> i) & 1u;
        if ((mask & (1u << i)) && start_one(c, i, &rq, start, timeout_ms, f) == 0) {
            live[i] = 1;
            f->reached++;
        }
    }
    uint64_t end = start + (uint64_t)timeout_ms;
    for (;;) {
        struct pollfd p[RELOCK__MAX_SERVERS];
        int idx[RELOCK__MAX_SERVERS], np = 0;
        for (int i = 0; i < n; i++) {
            if (!live[i])
                continue;
            /* Send what is buffered (this also completes the connect). */
            if (!sent[i] && redisBufferWrite(c->q[i].ctx, &sent[i]) != REDIS_OK) {
                drop(c, i);
                live[i] = 0;
                continue;
            }
            p[np].fd = c->q[i].ctx->fd;
            p[np].events = sent[i] ? POLLIN : POLLIN | POLLOUT;
            p[np].revents = 0;
            idx[np++] = i;
        }
        uint64_t now = relock__mono_ms();
        /* Decided: enough said yes, or so many said no that the rest
         * cannot make up `need` (a dead or silent server decides
         * nothing: its reply, or its timeout, is waited for). */
        if (np == 0 || now >= end || good >= need || f->answered - good > asked - need)
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
            for (;;) {
                void *v = NULL;
                if (redisGetReplyFromReader(c->q[i].ctx, &v) != REDIS_OK) {
                    drop(c, i);
                    live[i] = 0;
                    break;
                }
                if (!v)
                    break;
                redisReply *rep = v;
                int before = before_reply(c, i, rep, f);
                if (before > 0)
                    continue;
                if (before < 0) {
                    live[i] = 0;
                    break;
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
                live[i] = 0;
                if (shaped(rep, rq.type)) {
                    f->reply[i] = rep;
                    f->answered++;
                    good += ok(rep);
                } else {
                    fan_error(f, &c->s.servers[i], "",
                              rep->type == REDIS_REPLY_ERROR ? rep->str
                                                             : "a reply of the wrong type");
                    /* A server without Lua (Valkey 9.1 can run so): the
                     * quorum's scripts have no fallback there. */
                    if (rep->type == REDIS_REPLY_ERROR &&
                        strncmp(rep->str, "ERR unknown command 'EVAL", 25) == 0)
                        f->nolua = 1;
                    freeReplyObject(rep);
                }
                break;
            }
        }
    }
    uint64_t now = relock__mono_ms();
    for (int i = 0; i < n; i++) {
        if (!live[i])
            continue;
        struct relock__qserver *q = &c->q[i];
        if (now >= end) {
            drop_late(c, i, now, timeout_ms); /* its reply would come out of turn */
        } else if (sent[i]) {
            if (q->owed == 0)
                q->owed_at = start;
            q->owed++; /* read before the next request's */
            f->owing |= 1u << i;
        } else {
            drop(c, i); /* decided without it, and nothing reached it */
        }
    }
}

/* Frees the replies; the counts and the error stay. */
static void fan_free(fan *f)
{
    for (int i = 0; i < RELOCK__MAX_SERVERS; i++) {
        if (f->reply[i])
            freeReplyObject(f->reply[i]);
        f->reply[i] = NULL;
    }
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
static long long server_timeout(const relock_client *c, long long ttl_ms)
{
    long long t = ttl_ms / 10 > 10 ? ttl_ms / 10 : 10;
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
    fanout(c, all_servers(c), RELOCK__SCRIPT_DEL_IF_EQ, REDIS_REPLY_INTEGER, 1, 3, args,
           server_timeout(c, l->ttl_ms), deleted, majority(c), f);
    return count(c, f, deleted);
}

/* Whether so many servers said no (held by another, not ours) that no
 * majority can say yes, whatever the others would have answered. */
static int refused(const relock_client *c, int said_no)
{
    return c->s.nservers - said_no < majority(c);
}

/* Too few servers answered to decide: st, or RELOCK_ECONFIG when a server
 * refused AUTH or SELECT; the first server error is part of the message. */
static relock_status undecided(relock_client *c, relock_status st, const char *what,
                               const relock_lock *l, const fan *f, const char *consequence)
{
    if (f->config)
        return RELOCK__FAIL(&c->err, RELOCK_ECONFIG, "%s %s: %s", what, l->name, f->error);
    if (f->nolua)
        return RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                            "%s %s: a server runs without Lua, and locking over several "
                            "servers needs scripts on every one (%s)",
                            what, l->name, f->error);
    int reachable = f->reached < majority(c);
    return RELOCK__FAIL(&c->err, st, "%s %s: only %d of %d servers %s; %s%s%s", what, l->name,
                        reachable ? f->reached : f->answered, c->s.nservers,
                        reachable ? "reachable" : "answered", consequence,
                        f->error[0] ? "; first error: " : "", f->error);
}

static relock_status quorum_attempt(relock_lock *l, long *hint_ms)
{
    relock_client *c = l->c;
    if (relock__token(l->value) != 0)
        return RELOCK__FAIL(&c->err, RELOCK_EIO, "acquire %s: no random bytes for a token",
                            l->name);
    char ttl[32];
    snprintf(ttl, sizeof ttl, "%lld", l->ttl_ms);
    long long tmo = server_timeout(c, l->ttl_ms);
    char before[RELOCK__KEY_MAX];
    if (relock__fence_key_before(l->key, before, sizeof before) == 1) {
        /* A whole-tag key: carry its earlier counter over first (keys.c).
         * Best effort: a server it does not reach keeps the lower counter
         * until a later acquisition carries it over there. */
        const char *cargs[] = {l->fence_key, before};
        fan g;
        fanout(c, all_servers(c), RELOCK__SCRIPT_FENCE_CARRY, REDIS_REPLY_INTEGER, 2, 2, cargs,
               tmo, raised, c->s.nservers, &g);
        fan_free(&g);
    }
    uint64_t start = relock__mono_ms();
    fan f;
    const char *args[] = {l->key, l->fence_key, l->value, ttl};
    fanout(c, all_servers(c), RELOCK__SCRIPT_MODERN_ACQUIRE, REDIS_REPLY_ARRAY, 2, 4, args, tmo,
           acquired, majority(c), &f);
    unsigned won = 0;
    int nwon = 0;
    long long fence = 0, lowest = -1, shortest = -1;
    for (int i = 0; i < c->s.nservers; i++) {
        redisReply *r = f.reply[i]; /* shaped: {won, fence or PTTL} */
        if (!r)
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
    int raise_failed = 0;
    if (nwon >= majority(c) && relock__mono_ms() < valid_until) {
        /* Raise the majority's counters to the token before claiming it. */
        char fs[32];
        snprintf(fs, sizeof fs, "%lld", fence);
        const char *rargs[] = {l->fence_key, fs};
        fan g;
        fanout(c, won, RELOCK__SCRIPT_FENCE_RAISE, REDIS_REPLY_INTEGER, 1, 2, rargs, tmo, raised,
               majority(c), &g);
        int nraised = count(c, &g, raised);
        fan_free(&g);
        if (nraised >= majority(c) && relock__mono_ms() < valid_until) {
            l->fence = fence;
            l->valid_until = valid_until;
            l->acquired = 1;
            return RELOCK_OK;
        }
        raise_failed = nraised < majority(c);
        if (raise_failed && !f.error[0])
            memcpy(f.error, g.error, sizeof f.error);
    }
    /* No majority in time: leave no partial hold behind, where we won or
     * may yet win (a server still owing its reply).  The delete follows
     * the acquire on each connection, so it applies after it. */
    unsigned maybe = won | f.owing;
    if (maybe) {
        char chan[RELOCK__KEY_MAX];
        relock__notify_channel(l, chan, sizeof chan);
        const char *dargs[] = {l->key, l->value, chan};
        fan d;
        fanout(c, maybe, RELOCK__SCRIPT_DEL_IF_EQ, REDIS_REPLY_INTEGER, 1, 3, dargs, tmo,
               deleted, nwon, &d);
        fan_free(&d);
    }
    if (refused(c, f.answered - nwon) || (nwon >= majority(c) && !raise_failed)) {
        /* Held elsewhere, or won too slowly: wait and try again.  No TTL
         * known (all holders without one): the backoff decides. */
        *hint_ms =
            shortest >= 0 ? (shortest > 0x7fffffffLL ? 0x7fffffffL : (long)shortest) : -1;
        return RELOCK_BUSY;
    }
    if (raise_failed)
        return RELOCK__FAIL(&c->err, RELOCK_EIO,
                            "acquire %s: won on %d of %d servers, but could not raise their "
                            "fence counters%s%s",
                            l->name, nwon, c->s.nservers, f.error[0] ? "; first error: " : "",
                            f.error);
    char need[64];
    snprintf(need, sizeof need, "a majority (%d) is needed", majority(c));
    return undecided(c, RELOCK_EIO, "acquire", l, &f, need);
}

static relock_status quorum_release(relock_lock *l)
{
    relock_client *c = l->c;
    fan f;
    int ndeleted = delete_everywhere(l, &f);
    fan_free(&f);
    if (ndeleted >= majority(c))
        return RELOCK_OK;
    if (refused(c, f.answered - ndeleted))
        return RELOCK__FAIL(&c->err, RELOCK_LOST,
                            "release %s: lock lost: held on only %d of %d servers", l->name,
                            ndeleted, c->s.nservers);
    return undecided(c, RELOCK_EAMBIGUOUS, "release", l, &f, "the lock's state is unknown");
}

static relock_status quorum_extend(relock_lock *l, long long ttl_ms)
{
    relock_client *c = l->c;
    char ttl[32];
    snprintf(ttl, sizeof ttl, "%lld", ttl_ms);
    const char *args[] = {l->key, l->value, ttl};
    uint64_t start = relock__mono_ms();
    fan f;
    fanout(c, all_servers(c), RELOCK__SCRIPT_PEXPIRE_IF_EQ, REDIS_REPLY_INTEGER, 1, 3, args,
           server_timeout(c, ttl_ms), extended, majority(c), &f);
    int nextended = count(c, &f, extended);
    fan_free(&f);
    uint64_t valid_until = relock__valid_until(start, ttl_ms);
    if (nextended >= majority(c) && relock__mono_ms() < valid_until) {
        l->ttl_ms = ttl_ms;
        l->valid_until = valid_until;
        return RELOCK_OK;
    }
    int late = nextended >= majority(c);
    if (late || refused(c, f.answered - nextended)) {
        /* Lost: the handle will not be released, so our value goes now
         * from the servers that did extend it, rather than block others
         * for a whole ttl (our token is unique: nobody else's is hit). */
        fan d;
        delete_everywhere(l, &d);
        fan_free(&d);
        relock__err_clear(&c->err);
        if (late)
            return RELOCK__FAIL(&c->err, RELOCK_LOST,
                                "extend %s: lock lost: extending took longer than the %lld ms "
                                "asked",
                                l->name, ttl_ms);
        return RELOCK__FAIL(&c->err, RELOCK_LOST,
                            "extend %s: lock lost: held on only %d of %d servers", l->name,
                            nextended, c->s.nservers);
    }
    char need[64];
    snprintf(need, sizeof need, "a majority (%d) is needed", majority(c));
    return undecided(c, RELOCK_EIO, "extend", l, &f, need);
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
