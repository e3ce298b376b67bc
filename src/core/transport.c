/*
 * The transport: a connection to one server and nothing more.  Connect
 * with timeouts, log in (AUTH, SELECT), send a formatted command and read
 * its reply, look whether an idle connection went stale, close.  Which
 * server to talk to, redirections, Sentinel and the transaction rule are
 * routing (conn.c, connect.c, cluster.c, sentinel.c), above this file;
 * this file calls nothing above it.  After an I/O error a hiredis context
 * cannot be reused, so it is closed here and the layer above reconnects.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "transport.h"

static struct timeval tv_ms(long long ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

void relock__conn_close(relock__conn *conn)
{
    if (conn->ctx)
        redisFree(conn->ctx);
    conn->ctx = NULL;
    conn->caps = 0;
    conn->clock.known = 0;
}

/* Sends AUTH and SELECT as srv says; the password never reaches a
 * message. */
relock_status relock__conn_login(relock_client *c, redisContext *ctx, const relock__server *srv)
{
    redisReply *r = NULL;
    if (srv->password[0]) {
        if (srv->username[0])
            r = redisCommand(ctx, "AUTH %s %s", srv->username, srv->password);
        else
            r = redisCommand(ctx, "AUTH %s", srv->password);
        if (!r)
            return RELOCK__FAIL(&c->err, RELOCK_EIO, "AUTH to " RELOCK__ADDR_FMT ": %s",
                                RELOCK__ADDR(srv), ctx->errstr);
        if (r->type == REDIS_REPLY_ERROR) {
            relock_status st = RELOCK__FAIL_SRV(&c->err, RELOCK_ECONFIG, r->str,
                                                "AUTH to " RELOCK__ADDR_FMT " refused: %s",
                                                RELOCK__ADDR(srv), r->str);
            freeReplyObject(r);
            return st;
        }
        freeReplyObject(r);
    }
    if (srv->db != 0) {
        r = redisCommand(ctx, "SELECT %d", srv->db);
        if (!r)
            return RELOCK__FAIL(&c->err, RELOCK_EIO, "SELECT on " RELOCK__ADDR_FMT ": %s",
                                RELOCK__ADDR(srv), ctx->errstr);
        if (r->type == REDIS_REPLY_ERROR) {
            relock_status st = RELOCK__FAIL_SRV(&c->err, RELOCK_ECONFIG, r->str,
                                                "SELECT %d on " RELOCK__ADDR_FMT " refused: %s",
                                                srv->db, RELOCK__ADDR(srv), r->str);
            freeReplyObject(r);
            return st;
        }
        freeReplyObject(r);
    }
    return RELOCK_OK;
}

redisContext *relock__connect_ctx(const char *host, int port, long long connect_ms,
                                  long long command_ms, relock_status *st, char *why, size_t whylen)
{
    *st = RELOCK_EIO;
    /* Port 0: host is a unix socket's path (unix:// URLs, `path` in the file). */
    redisContext *ctx = port ? redisConnectWithTimeout(host, port, tv_ms(connect_ms))
                             : redisConnectUnixWithTimeout(host, tv_ms(connect_ms));
    if (!ctx) {
        *st = RELOCK_ENOMEM;
        snprintf(why, whylen, "connect to " RELOCK__ADDR_FMT ": out of memory", host,
                 port ? ":" : "", port);
        return NULL;
    }
    if (ctx->err) {
        snprintf(why, whylen, "connect to " RELOCK__ADDR_FMT ": %s", host, port ? ":" : "", port,
                 ctx->errstr);
        redisFree(ctx);
        return NULL;
    }
    if (redisSetTimeout(ctx, tv_ms(command_ms)) != REDIS_OK) {
        snprintf(why, whylen, "set timeout on " RELOCK__ADDR_FMT ": %s", host, port ? ":" : "",
                 port, ctx->errstr);
        redisFree(ctx);
        return NULL;
    }
    *st = RELOCK_OK;
    return ctx;
}

/*
 * A connection idle for a while may have been closed by the server (its
 * `timeout`, a restart).  Sending on it would fail after the send, which
 * reads as an ambiguous outcome; so before reusing an idle connection,
 * look whether it is readable: a healthy idle connection never is (EOF, or
 * a stray reply, means it is no longer ours to use).  Busy connections
 * skip the system call; one poll() costs far less than the round trip
 * that follows, so "idle" starts early.
 */
#define IDLE_CHECK_MS 200

int relock__ctx_stale(redisContext *ctx, uint64_t *last_used)
{
    uint64_t now = relock__mono_ms();
    uint64_t last = *last_used;
    *last_used = now;
    if (now - last < IDLE_CHECK_MS)
        return 0;
    struct pollfd p = {ctx->fd, POLLIN, 0};
    return poll(&p, 1, 0) != 0;
}

/* Sends the formatted command cmd (len bytes) on c's open connection and
 * reads its reply.  On a failure (the send, the read, or no reply within
 * command_timeout_ms) records it naming the command and the server, closes
 * the connection and returns NULL; *sent is then 1: the command may have
 * run. */
redisReply *relock__conn_send(relock_client *c, int *sent, const char *name, const char *cmd,
                              size_t len)
{
    *sent = 0;
    void *reply = NULL;
    errno = 0;
    if (redisAppendFormattedCommand(c->conn.ctx, cmd, len) != REDIS_OK ||
        redisGetReply(c->conn.ctx, &reply) != REDIS_OK || !reply) {
        int timed_out =
            c->conn.ctx->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
        *sent = 1;
        const relock__server *srv = c->conn.srv;
        if (timed_out)
            RELOCK__FAIL(&c->err, RELOCK_EIO,
                         "%s on " RELOCK__ADDR_FMT
                         ": no reply within %lld ms (command_timeout_ms): the server "
                         "is stalled, overloaded, or not a Redis server",
                         name, RELOCK__ADDR(srv), c->s.command_timeout_ms);
        else
            RELOCK__FAIL(&c->err, RELOCK_EIO, "%s on " RELOCK__ADDR_FMT ": %s", name,
                         RELOCK__ADDR(srv),
                         c->conn.ctx->errstr[0] ? c->conn.ctx->errstr : "connection lost");
        relock__conn_close(&c->conn);
        if (reply)
            freeReplyObject(reply);
        return NULL;
    }
    return reply;
}
