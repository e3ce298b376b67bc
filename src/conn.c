/*
 * The connection to a server: connect with timeouts, authenticate, select
 * the database, probe, and run commands.  After an I/O error a hiredis
 * context cannot be reused, so it is closed here and the next command
 * reconnects (and probes again: the server may have been replaced).
 */
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "internal.h"

static struct timeval tv_ms(long ms)
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
    conn->clock_known = 0;
}

/* Sends AUTH and SELECT as configured; the password never reaches a
 * message. */
static relock_status login(relock_client *c)
{
    const relock__server *srv = c->conn.srv;
    redisReply *r = NULL;
    if (srv->password[0]) {
        if (srv->username[0])
            r = redisCommand(c->conn.ctx, "AUTH %s %s", srv->username, srv->password);
        else
            r = redisCommand(c->conn.ctx, "AUTH %s", srv->password);
        if (!r)
            return RELOCK__FAIL(&c->err, RELOCK_EIO, "AUTH to %s:%d: %s", srv->host, srv->port,
                                c->conn.ctx->errstr);
        if (r->type == REDIS_REPLY_ERROR) {
            relock_status st = RELOCK__FAIL_SRV(&c->err, RELOCK_ECONFIG, r->str,
                                                "AUTH to %s:%d refused: %s", srv->host, srv->port,
                                                r->str);
            freeReplyObject(r);
            return st;
        }
        freeReplyObject(r);
    }
    if (srv->db != 0) {
        r = redisCommand(c->conn.ctx, "SELECT %d", srv->db);
        if (!r)
            return RELOCK__FAIL(&c->err, RELOCK_EIO, "SELECT on %s:%d: %s", srv->host, srv->port,
                                c->conn.ctx->errstr);
        if (r->type == REDIS_REPLY_ERROR) {
            relock_status st = RELOCK__FAIL_SRV(&c->err, RELOCK_ECONFIG, r->str,
                                                "SELECT %d on %s:%d refused: %s", srv->db,
                                                srv->host, srv->port, r->str);
            freeReplyObject(r);
            return st;
        }
        freeReplyObject(r);
    }
    return RELOCK_OK;
}

relock_status relock__conn_ensure(relock_client *c)
{
    if (c->conn.ctx)
        return RELOCK_OK;
    const relock__server *srv = c->conn.srv;
    redisContext *ctx = redisConnectWithTimeout(srv->host, srv->port, tv_ms(c->s.connect_timeout_ms));
    if (!ctx)
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "connect to %s:%d: out of memory", srv->host,
                            srv->port);
    if (ctx->err) {
        relock_status st = RELOCK__FAIL(&c->err, RELOCK_EIO, "connect to %s:%d: %s", srv->host,
                                        srv->port, ctx->errstr);
        redisFree(ctx);
        return st;
    }
    if (redisSetTimeout(ctx, tv_ms(c->s.command_timeout_ms)) != REDIS_OK) {
        relock_status st = RELOCK__FAIL(&c->err, RELOCK_EIO, "set timeout on %s:%d: %s",
                                        srv->host, srv->port, ctx->errstr);
        redisFree(ctx);
        return st;
    }
    c->conn.ctx = ctx;
    c->conn.last_used = relock__mono_ms();
    relock_status st = login(c);
    if (st == RELOCK_OK)
        st = relock__probe(c);
    if (st != RELOCK_OK)
        relock__conn_close(&c->conn);
    return st;
}

/*
 * A connection idle for a while may have been closed by the server (its
 * `timeout`, a restart).  Sending on it would fail after the send, which
 * reads as an ambiguous outcome; so before reusing an idle connection,
 * look whether it is readable: a healthy idle connection never is (EOF, or
 * a stray reply, means it is no longer ours to use).  Busy connections
 * skip the system call.
 */
#define IDLE_CHECK_MS 1000

static void drop_if_stale(relock_client *c)
{
    if (!c->conn.ctx)
        return;
    uint64_t now = relock__mono_ms();
    uint64_t last = c->conn.last_used;
    c->conn.last_used = now;
    if (now - last < IDLE_CHECK_MS)
        return;
    struct pollfd p = {c->conn.ctx->fd, POLLIN, 0};
    if (poll(&p, 1, 0) != 0)
        relock__conn_close(&c->conn);
}

redisReply *relock__command(relock_client *c, int *sent, int argc, const char **argv,
                            const size_t *argvlen)
{
    if (sent)
        *sent = 0;
    drop_if_stale(c);
    if (relock__conn_ensure(c) != RELOCK_OK)
        return NULL;
    redisReply *r = redisCommandArgv(c->conn.ctx, argc, argv, argvlen);
    if (!r) {
        if (sent)
            *sent = 1;
        const relock__server *srv = c->conn.srv;
        RELOCK__FAIL(&c->err, RELOCK_EIO, "%s on %s:%d: %s", argv[0], srv->host, srv->port,
                     c->conn.ctx->errstr[0] ? c->conn.ctx->errstr : "connection lost");
        relock__conn_close(&c->conn);
    }
    return r;
}

redisReply *relock__commandf(relock_client *c, int *sent, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = relock__vcommandf(c, sent, fmt, ap);
    va_end(ap);
    return r;
}

redisReply *relock__vcommandf(relock_client *c, int *sent, const char *fmt, va_list ap)
{
    if (sent)
        *sent = 0;
    drop_if_stale(c);
    if (relock__conn_ensure(c) != RELOCK_OK)
        return NULL;
    redisReply *r = redisvCommand(c->conn.ctx, fmt, ap);
    if (!r) {
        if (sent)
            *sent = 1;
        const relock__server *srv = c->conn.srv;
        char cmd[32];
        size_t n = strcspn(fmt, " ");
        snprintf(cmd, sizeof cmd, "%.*s", (int)(n < 31 ? n : 31), fmt);
        RELOCK__FAIL(&c->err, RELOCK_EIO, "%s on %s:%d: %s", cmd, srv->host, srv->port,
                     c->conn.ctx->errstr[0] ? c->conn.ctx->errstr : "connection lost");
        relock__conn_close(&c->conn);
    }
    return r;
}

relock_status relock__bad_reply(relock_client *c, const char *file, int line, const char *what,
                                const redisReply *r)
{
    static const char *const types[] = {"?", "string", "array", "integer", "nil", "status",
                                        "error"};
    const relock__server *srv = c->conn.srv;
    if (r && r->type == REDIS_REPLY_ERROR)
        return relock__err_set(&c->err, RELOCK_EPROTO, file, line, r->str,
                               "%s on %s:%d: server error: %s", what, srv->host, srv->port, r->str);
    int t = r ? r->type : 0;
    return relock__err_set(&c->err, RELOCK_EPROTO, file, line, NULL,
                           "%s on %s:%d: unexpected %s reply", what, srv->host, srv->port,
                           (t >= 1 && t <= 6) ? types[t] : "unknown");
}
