/*
 * Redis Cluster (DESIGN §6): follow the redirections of the node that
 * does not serve a key's slot.  conn.c calls these for every command and
 * script, so every algorithm works on a cluster as long as each command's
 * keys share one slot, which keys.c guarantees for a lock key and its
 * fence counter.
 *
 *   MOVED slot host:port   the slot lives there now: the client's one
 *                          connection moves to that node (connect, log in,
 *                          probe) and the command is sent again;
 *   ASK slot host:port     the slot is migrating and the key is already on
 *                          the node importing it: ASKING and the command
 *                          go there once, on a connection of their own,
 *                          and the client stays where it was;
 *   TRYAGAIN               a script's keys are split by a migration in
 *                          progress for a moment: the same node, again.
 *
 * None of them means the command ran, so following them never makes an
 * outcome ambiguous.  The client keeps no slot map: a redirection costs a
 * round trip (and for MOVED a reconnect), which locks can afford.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Reads "host:port" (the host may be an IPv6 address with colons, or
 * empty) from the end of a redirection. */
static int parse_target(relock_client *c, const char *p, relock__redirect *out)
{
    const char *colon = strrchr(p, ':');
    if (!colon)
        return -1;
    size_t hl = (size_t)(colon - p);
    const char *port = colon + 1;
    if (!*port || strspn(port, "0123456789") != strlen(port) || strlen(port) > 5)
        return -1;
    long v = strtol(port, NULL, 10);
    if (v < 1 || v > 65535)
        return -1;
    if (hl == 0) {
        /* 7.0 without a known endpoint: the same address as this node. */
        snprintf(out->host, sizeof out->host, "%s", c->conn.srv->host);
    } else {
        if (hl >= sizeof out->host)
            return -1;
        memcpy(out->host, p, hl);
        out->host[hl] = '\0';
    }
    out->port = (int)v;
    return 0;
}

enum relock__redir_kind relock__cluster_redirect(relock_client *c, const redisReply *r,
                                                 relock__redirect *out)
{
    memset(out, 0, sizeof *out);
    if (!r || r->type != REDIS_REPLY_ERROR || !r->str)
        return RELOCK__REDIR_NONE;
    enum relock__redir_kind kind;
    const char *p;
    if (strncmp(r->str, "MOVED ", 6) == 0) {
        kind = RELOCK__REDIR_MOVED;
        p = r->str + 6;
    } else if (strncmp(r->str, "ASK ", 4) == 0) {
        kind = RELOCK__REDIR_ASK;
        p = r->str + 4;
    } else if (strncmp(r->str, "TRYAGAIN", 8) == 0) {
        out->kind = RELOCK__REDIR_TRYAGAIN;
        return RELOCK__REDIR_TRYAGAIN;
    } else {
        return RELOCK__REDIR_NONE;
    }
    /* The slot, then one space, then the address. */
    size_t digits = strspn(p, "0123456789");
    if (digits == 0 || p[digits] != ' ' || parse_target(c, p + digits + 1, out) != 0)
        return RELOCK__REDIR_NONE; /* not a redirection we understand: the caller sees it */
    out->kind = kind;
    return kind;
}

void relock__cluster_move(relock_client *c, const relock__redirect *to)
{
    const relock__server *from = c->conn.srv;
    relock__conn_close(&c->conn);
    /* Credentials and db stay those of the configured server. */
    if (from != &c->node)
        c->node = *from;
    memcpy(c->node.host, to->host, sizeof c->node.host);
    c->node.port = to->port;
    c->conn.srv = &c->node;
}

redisReply *relock__cluster_ask(relock_client *c, int *sent, const relock__redirect *to,
                                const char *name, const char *cmd, size_t len)
{
    *sent = 0;
    relock__server srv = *c->conn.srv; /* credentials and db */
    memcpy(srv.host, to->host, sizeof srv.host);
    srv.port = to->port;
    char why[RELOCK__HOST_MAX + 160];
    relock_status st;
    redisContext *ctx = relock__connect_ctx(srv.host, srv.port, c->s.connect_timeout_ms,
                                            c->s.command_timeout_ms, &st, why, sizeof why);
    if (!ctx) {
        RELOCK__FAIL(&c->err, st, "%s (ASK redirection for %s)", why, name);
        memset(&srv, 0, sizeof srv); /* it holds the password */
        return NULL;
    }
    redisReply *r = NULL;
    if (relock__conn_login(c, ctx, &srv) == RELOCK_OK) {
        void *asking = NULL, *reply = NULL;
        if (redisAppendCommand(ctx, "ASKING") != REDIS_OK ||
            redisAppendFormattedCommand(ctx, cmd, len) != REDIS_OK ||
            redisGetReply(ctx, &asking) != REDIS_OK || !asking ||
            redisGetReply(ctx, &reply) != REDIS_OK || !reply) {
            *sent = 1;
            RELOCK__FAIL(&c->err, RELOCK_EIO, "%s on " RELOCK__ADDR_FMT " (ASK redirection): %s", name,
                         RELOCK__ADDR(&srv), ctx->errstr[0] ? ctx->errstr : "connection lost");
        } else {
            r = reply;
        }
        if (asking)
            freeReplyObject(asking);
    }
    redisFree(ctx);
    memset(&srv, 0, sizeof srv);
    return r;
}
