/*
 * Routing: which server a command goes to, and running it there.  The
 * connection is (re)opened when needed (connect.c: connect, log in,
 * probe), through the sentinels when configured (sentinel.c), to the
 * Cluster node of the key's slot (cluster.c); redirections (MOVED, ASK,
 * TRYAGAIN) and Sentinel's READONLY are followed here, and inside a
 * transaction nothing reconnects or redirects.  The sending itself is the
 * transport's (transport.c).  After an I/O error the next command
 * reconnects (and probes again: the server may have been replaced).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "routing.h"
#include "pollloop.h"

relock_status relock__conn_ensure(relock_client *c)
{
    if (c->conn.ctx)
        return RELOCK_OK;
    if (relock__sentinel_on(&c->s))
        return relock__sentinel_connect(c);
    return relock__conn_open(c, c->conn.srv);
}

static void drop_if_stale(relock_client *c)
{
    if (c->conn.ctx && relock__ctx_stale(c->conn.ctx, &c->conn.last_used))
        relock__conn_close(&c->conn);
}

relock_status relock__conn_ready(relock_client *c)
{
    drop_if_stale(c);
    if (relock__conn_ensure(c) == RELOCK_OK)
        return RELOCK_OK;
    /* A master of the slot map that cannot be reached may have failed
     * over: with the map read again, the operation's slot may have a new
     * master, tried once.  Nothing was sent yet. */
    relock__err saved = c->err;
    if (!relock__cluster_reroute(c))
        return c->err.pub.status;
    relock__err_clear(&c->err);
    if (relock__conn_ensure(c) == RELOCK_OK)
        return RELOCK_OK;
    relock__err_copy(&c->err, &saved);
    return c->err.pub.status;
}

relock_status relock__txn_begin(relock_client *c)
{
    drop_if_stale(c);
    relock_status st = relock__conn_ensure(c);
    if (st == RELOCK_OK)
        c->conn.in_txn = 1;
    return st;
}

void relock__txn_end(relock_client *c)
{
    c->conn.in_txn = 0;
}

/* Inside a transaction: the connection must still be the one the
 * transaction began on.  A closed one (an earlier error) or one the server
 * has closed meanwhile (EOF waiting on an idle connection) fails the
 * command before it is sent. */
static int txn_conn_lost(relock_client *c, const char *name)
{
    drop_if_stale(c);
    if (c->conn.ctx)
        return 0;
    const relock__server *srv = c->conn.srv;
    RELOCK__FAIL(&c->err, RELOCK_EIO,
                 "%s on " RELOCK__ADDR_FMT
                 ": the connection was lost inside a transaction (WATCH or "
                 "MULTI); not reconnected, since a new connection would run the rest of "
                 "it unconditionally",
                 name, RELOCK__ADDR(srv));
    return 1;
}

/* Sends a formatted command once on c's connection and reads its reply. */
static redisReply *send_once(relock_client *c, int *sent, const char *name, const char *cmd,
                             size_t len)
{
    *sent = 0;
    if (c->conn.in_txn) {
        if (txn_conn_lost(c, name))
            return NULL;
    } else if (relock__conn_ready(c) != RELOCK_OK) {
        return NULL;
    }
    return relock__conn_send(c, sent, name, cmd, len);
}

/*
 * Runs a formatted command, following Redis Cluster's redirections
 * (MOVED: the slot lives on another node, which the connection then moves
 * to; ASK: the slot is migrating and this one command goes to the node
 * importing it; TRYAGAIN: a script's two keys are on either side of a
 * migration for a moment) at most RELOCK__CLUSTER_MAX_REDIRECTS times.  A
 * redirection means the command was not executed, so only the last send
 * decides *sent.  Every command and script of every algorithm passes here.
 *
 * With sentinel, a READONLY reply means the master we know was demoted:
 * the connection is closed so that the next call asks the sentinels again.
 */
static redisReply *run_from(relock_client *c, int *sent, const char *name, const char *cmd,
                            size_t len, redisReply *first)
{
    int sent_local = 0;
    if (!sent)
        sent = &sent_local;
    relock__redirect to;
    memset(&to, 0, sizeof to);
    int asking = 0;
    for (int hops = 0;; hops++) {
        redisReply *r;
        if (first) { /* already read, from a pipeline */
            r = first;
            first = NULL;
            *sent = 0;
        } else {
            r = asking ? relock__cluster_ask(c, sent, &to, name, cmd, len)
                       : send_once(c, sent, name, cmd, len);
        }
        relock__redirect next;
        enum relock__route act = relock__route_reply(
            &c->s, c->conn.in_txn, hops, c->conn.srv ? c->conn.srv->host : "", r, &next);
        switch (act) {
        case RELOCK__ROUTE_REPLY:
            return r;
        case RELOCK__ROUTE_READONLY:
            /* The master we know was demoted: the next call asks the
             * sentinels again. */
            relock__sentinel_readonly_fail(&c->err, &c->s, name, c->conn.srv, r->str);
            freeReplyObject(r);
            relock__conn_close(&c->conn);
            return NULL;
        case RELOCK__ROUTE_TOO_MANY:
            relock__route_too_many(&c->err, name, hops, r->str);
            freeReplyObject(r);
            return NULL;
        case RELOCK__ROUTE_MOVED:
            freeReplyObject(r);
            c->moved++;
            /* With the slot map: the slot's master is noted and its pooled
             * connection used; without it, the one connection moves. */
            if (relock__cluster_moved(c, &next) != 0)
                relock__cluster_move(c, &next);
            asking = 0;
            break;
        case RELOCK__ROUTE_ASK:
            freeReplyObject(r);
            to = next;
            asking = 1;
            break;
        case RELOCK__ROUTE_TRYAGAIN:
            freeReplyObject(r);
            relock__sleep_ms(relock__route_tryagain_ms(hops));
            break;
        }
    }
}

static redisReply *run(relock_client *c, int *sent, const char *name, const char *cmd, size_t len)
{
    return run_from(c, sent, name, cmd, len, NULL);
}

/* Whether run_from() would act on reply r rather than return it: a
 * redirection to follow, or Sentinel's READONLY. */
static int rerouted(relock_client *c, const redisReply *r)
{
    relock__redirect next;
    return relock__route_reply(&c->s, c->conn.in_txn, 0, c->conn.srv ? c->conn.srv->host : "", r,
                               &next) != RELOCK__ROUTE_REPLY;
}

int relock__conn_pipeline(relock_client *c, int n, char *const *cmd, const size_t *len,
                          const char *const *name, redisReply **rep, int *sent)
{
    *sent = 0;
    for (int i = 0; i < n; i++)
        rep[i] = NULL;
    if (n < 1)
        return 0;
    if (n == 1) {
        rep[0] = run(c, sent, name[0], cmd[0], len[0]);
        return rep[0] ? 1 : 0;
    }
    /* As send_once: inside a transaction the connection must be the one
     * it began on; outside, a stale one is replaced first. */
    if (c->conn.in_txn) {
        if (txn_conn_lost(c, name[0]))
            return 0;
    } else if (relock__conn_ready(c) != RELOCK_OK) {
        return 0;
    }
    redisContext *ctx = c->conn.ctx;
    for (int i = 0; i < n; i++)
        if (redisAppendFormattedCommand(ctx, cmd[i], len[i]) != REDIS_OK) {
            relock__conn_close(&c->conn); /* nothing was written yet */
            RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "%s: out of memory", name[i]);
            return 0;
        }
    /* Every reply is read before any is acted on: a redirection closes
     * or moves the connection the later replies arrive on. */
    int got = 0, timed_out = 0;
    char why[128] = "";
    for (; got < n; got++) {
        void *reply = NULL;
        errno = 0;
        if (redisGetReply(ctx, &reply) != REDIS_OK || !reply) {
            timed_out = ctx->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
            snprintf(why, sizeof why, "%s", ctx->errstr[0] ? ctx->errstr : "connection lost");
            if (reply)
                freeReplyObject(reply);
            break;
        }
        rep[got] = reply;
    }
    const relock__server *srv = c->conn.srv;
    if (got < n)
        relock__conn_close(&c->conn);
    /* A reply that asks for the command to go elsewhere (or Sentinel's
     * READONLY): that command is followed as run() follows it, and the
     * later ones are sent again one by one, on the new way; their
     * pipelined replies, from a server that refused them or was the wrong
     * one to ask, are dropped, and so is a failure met reading them. */
    for (int i = 0; i < got; i++) {
        if (!rerouted(c, rep[i]))
            continue;
        for (int j = i + 1; j < got; j++) {
            freeReplyObject(rep[j]);
            rep[j] = NULL;
        }
        for (int j = i; j < n; j++) {
            rep[j] = run_from(c, sent, name[j], cmd[j], len[j], j == i ? rep[i] : NULL);
            if (!rep[j])
                return j;
        }
        return n;
    }
    if (got == n)
        return n;
    *sent = 1;
    if (timed_out)
        RELOCK__FAIL(&c->err, RELOCK_EIO,
                     "%s on " RELOCK__ADDR_FMT
                     ": no reply within %lld ms (command_timeout_ms): the server "
                     "is stalled, overloaded, or not a Redis server",
                     name[got], RELOCK__ADDR(srv), c->s.command_timeout_ms);
    else
        RELOCK__FAIL(&c->err, RELOCK_EIO, "%s on " RELOCK__ADDR_FMT ": %s", name[got],
                     RELOCK__ADDR(srv), why);
    return got;
}

redisReply *relock__command(relock_client *c, int *sent, int argc, const char **argv,
                            const size_t *argvlen)
{
    if (relock__poll_single(c))
        return relock__poll_command(c, sent, argc, argv, argvlen);
    return relock__conn_command(c, sent, argc, argv, argvlen);
}

redisReply *relock__conn_command(relock_client *c, int *sent, int argc, const char **argv,
                                 const size_t *argvlen)
{
    if (sent)
        *sent = 0;
    char *cmd = NULL;
    int len = redisFormatCommandArgv(&cmd, argc, argv, argvlen);
    if (len < 0) {
        RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "%s: out of memory", argv[0]);
        return NULL;
    }
    redisReply *r = run(c, sent, argv[0], cmd, (size_t)len);
    redisFreeCommand(cmd);
    return r;
}

/* TYPE's answer in words, with its article. */
static void type_words(const char *type, char *buf, size_t len)
{
    static const struct {
        const char *type, *words;
    } names[] = {{"list", "a list"},     {"set", "a set"},       {"zset", "a sorted set"},
                 {"hash", "a hash"},     {"stream", "a stream"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(type, names[i].type) == 0) {
            snprintf(buf, len, "%s", names[i].words);
            return;
        }
    snprintf(buf, len, "a value of type %.64s", type); /* a module's type */
}

relock_status relock__foreign_type(relock_client *c, const char *what, const char *key)
{
    relock_status st = c->err.pub.status;
    if (st != RELOCK_EFOREIGN ||
        (strncmp(c->err.server, "WRONGTYPE", 9) != 0 &&
         !strstr(c->err.server, "wrong kind of value")) ||
        c->s.nservers > 1)
        return st;
    /* The error is kept as it is if the question fails. */
    relock__err saved = c->err;
    const char *argv[] = {"TYPE", key};
    size_t lens[] = {4, strlen(key)};
    redisReply *r = relock__command(c, NULL, 2, argv, lens);
    /* A string or nothing: the key changed since; the first answer stands. */
    if (!r || (r->type != REDIS_REPLY_STATUS && r->type != REDIS_REPLY_STRING) ||
        strcmp(r->str, "string") == 0 || strcmp(r->str, "none") == 0) {
        if (r)
            freeReplyObject(r);
        relock__err_copy(&c->err, &saved);
        return st;
    }
    char words[96];
    type_words(r->str, words, sizeof words);
    freeReplyObject(r);
    const relock__server *srv = relock__poll_server(c, key);
    relock__err_clear(&c->err);
    relock__err_set(&c->err, RELOCK_EFOREIGN, saved.pub.file, saved.pub.line, saved.server,
                    "%s: the key %s on " RELOCK__ADDR_FMT
                    " holds %s, not a lock; relock never takes over, "
                    "changes or deletes it",
                    what, key, RELOCK__ADDR(srv), words);
    return RELOCK_EFOREIGN;
}

/* The slot map's choice (cluster.c) and then the connection. */
relock_status relock__cluster_route(relock_client *c, const char *key)
{
    if (!relock__cluster_pick(c, key))
        return RELOCK_OK;
    return relock__conn_ready(c);
}

