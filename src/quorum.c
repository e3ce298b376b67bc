/*
 * Quorum locks over independent masters (DESIGN §6, the Redlock scheme),
 * used whenever `servers` lists more than one.
 *
 * Every request goes to all servers at once: non-blocking hiredis contexts
 * driven by one poll() loop, each server with a short timeout of its own,
 * so one slow or dead server costs its timeout once, not once per server.
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
};

typedef struct fan {
    redisReply *reply[RELOCK__MAX_SERVERS]; /* the request's reply, or NULL */
    int answered;                           /* servers that replied */
} fan;

static void drop(relock_client *c, int i)
{
    if (c->q[i].ctx)
        redisFree(c->q[i].ctx);
    c->q[i].ctx = NULL;
}

void relock__quorum_free(relock_client *c)
{
    for (int i = 0; i < c->s.nservers; i++)
        drop(c, i);
}

/* Queues AUTH and SELECT on a fresh connection; returns how many replies
 * they will produce ahead of the request's. */
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
    return pre;
}

/*
 * Sends argv to every server in mask and gathers the replies within
 * timeout_ms.  A server that fails or is late is dropped (reconnected next
 * time: its state is unknown).
 */
static void fanout(relock_client *c, unsigned mask, int argc, const char **argv,
                   const size_t *argvlen, long timeout_ms, fan *f)
{
    int n = c->s.nservers;
    int skip[RELOCK__MAX_SERVERS];
    int live[RELOCK__MAX_SERVERS];
    memset(f, 0, sizeof *f);
    for (int i = 0; i < n; i++) {
        live[i] = 0;
        skip[i] = 0;
        if (!(mask & (1u << i)))
            continue;
        if (!c->q[i].ctx) {
            skip[i] = connect_one(c, i);
            if (skip[i] < 0)
                continue;
        }
        if (redisAppendCommandArgv(c->q[i].ctx, argc, argv, argvlen) != REDIS_OK) {
            drop(c, i);
            continue;
        }
        live[i] = 1;
    }
    uint64_t end = relock__mono_ms() + (uint64_t)timeout_ms;
    for (;;) {
        struct pollfd p[RELOCK__MAX_SERVERS];
        int idx[RELOCK__MAX_SERVERS], np = 0;
        for (int i = 0; i < n; i++) {
            if (!live[i])
                continue;
            int done = 0;
            /* Send what is buffered (this also completes the connect). */
            if (redisBufferWrite(c->q[i].ctx, &done) != REDIS_OK) {
                drop(c, i);
                live[i] = 0;
                continue;
            }
            p[np].fd = c->q[i].ctx->fd;
            p[np].events = done ? POLLIN : POLLIN | POLLOUT;
            p[np].revents = 0;
            idx[np++] = i;
        }
        uint64_t now = relock__mono_ms();
        if (np == 0 || now >= end)
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
            /* Replies to AUTH/SELECT first, then the request's. */
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
                    int bad = ((redisReply *)rep)->type == REDIS_REPLY_ERROR;
                    freeReplyObject(rep);
                    skip[i]--;
                    if (bad) {
                        drop(c, i);
                        live[i] = 0;
                        break;
                    }
                    continue;
                }
                f->reply[i] = rep;
                f->answered++;
                live[i] = 0;
                break;
            }
        }
    }
    for (int i = 0; i < n; i++)
        if (live[i])
            drop(c, i); /* late: its reply would arrive out of turn */
}

static void fan_free(fan *f)
{
    for (int i = 0; i < RELOCK__MAX_SERVERS; i++)
        if (f->reply[i])
            freeReplyObject(f->reply[i]);
    memset(f, 0, sizeof *f);
}

/* EVALSHA on the servers in mask, with EVAL where a server answers
 * NOSCRIPT. */
static void fanout_eval(relock_client *c, unsigned mask, int id, int nkeys, int nargs,
                        const char **args, long timeout_ms, fan *f)
{
    const char *argv[16];
    size_t argvlen[16];
    char nk[16];
    snprintf(nk, sizeof nk, "%d", nkeys);
    argv[0] = "EVALSHA";
    argv[1] = c->sha[id];
    argv[2] = nk;
    for (int i = 0; i < nargs && i < 13; i++)
        argv[3 + i] = args[i];
    for (int i = 0; i < nargs + 3; i++)
        argvlen[i] = strlen(argv[i]);
    fanout(c, mask, nargs + 3, argv, argvlen, timeout_ms, f);
    unsigned again = 0;
    for (int i = 0; i < c->s.nservers; i++) {
        redisReply *r = f->reply[i];
        if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0)
            again |= 1u << i;
    }
    if (!again)
        return;
    argv[0] = "EVAL";
    argv[1] = relock__script_source(id);
    argvlen[0] = 4;
    argvlen[1] = strlen(argv[1]);
    fan g;
    fanout(c, again, nargs + 3, argv, argvlen, timeout_ms, &g);
    for (int i = 0; i < c->s.nservers; i++) {
        if (!(again & (1u << i)))
            continue;
        freeReplyObject(f->reply[i]);
        f->reply[i] = g.reply[i];
        g.reply[i] = NULL;
        if (!f->reply[i])
            f->answered--;
    }
    fan_free(&g);
}

static int majority(const relock_client *c)
{
    return c->s.nservers / 2 + 1;
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
    fanout_eval(c, all_servers(c), RELOCK__SCRIPT_DEL_IF_EQ, 1, 3, args,
                server_timeout(c, l->ttl_ms), f);
    int deleted = 0;
    for (int i = 0; i < c->s.nservers; i++)
        deleted += f->reply[i] && f->reply[i]->type == REDIS_REPLY_INTEGER &&
                   f->reply[i]->integer >= 1; /* 1 + waiters told */
    return deleted;
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
    fanout_eval(c, all_servers(c), RELOCK__SCRIPT_MODERN_ACQUIRE, 2, 4, args, tmo, &f);
    unsigned won = 0;
    int nwon = 0;
    long long fence = 0, lowest = -1, shortest = -1;
    for (int i = 0; i < c->s.nservers; i++) {
        redisReply *r = f.reply[i];
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
            r->element[0]->type != REDIS_REPLY_INTEGER ||
            r->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        if (r->element[0]->integer == 1) {
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
        fanout_eval(c, won, RELOCK__SCRIPT_FENCE_RAISE, 1, 2, rargs, tmo, &f);
        int raised = 0;
        for (int i = 0; i < c->s.nservers; i++)
            raised += f.reply[i] && f.reply[i]->type == REDIS_REPLY_INTEGER;
        fan_free(&f);
        if (raised >= majority(c) && relock__mono_ms() < valid_until) {
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
    int deleted = delete_everywhere(l, &f);
    int answered = f.answered;
    fan_free(&f);
    if (deleted >= majority(c))
        return RELOCK_OK;
    if (answered < majority(c))
        return RELOCK__FAIL(&c->err, RELOCK_EAMBIGUOUS,
                            "release %s: only %d of %d servers answered; the lock's state is "
                            "unknown",
                            l->name, answered, c->s.nservers);
    return RELOCK__FAIL(&c->err, RELOCK_LOST,
                        "release %s: lock lost: held on only %d of %d servers", l->name, deleted,
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
    fanout_eval(c, all_servers(c), RELOCK__SCRIPT_PEXPIRE_IF_EQ, 1, 3, args,
                server_timeout(c, ttl_ms), &f);
    int extended = 0;
    for (int i = 0; i < c->s.nservers; i++)
        extended += f.reply[i] && f.reply[i]->type == REDIS_REPLY_INTEGER &&
                    f.reply[i]->integer == 1;
    int answered = f.answered;
    fan_free(&f);
    uint64_t valid_until = relock__valid_until(start, ttl_ms);
    if (extended >= majority(c) && relock__mono_ms() < valid_until) {
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
                        "extend %s: lock lost: held on only %d of %d servers", l->name, extended,
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
