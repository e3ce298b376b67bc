/*
 * Redis Sentinel (DESIGN §6): find the master by name.
 *
 * Every (re)connect asks the configured sentinels in turn, starting with
 * the one that helped last, for the master's address
 * (SENTINEL get-master-addr-by-name), connects there and checks that the
 * server really is a master: a sentinel can be stale, or the failover it
 * reports still unfinished.  Only then does the client use the connection;
 * otherwise the next sentinel is asked.  Sentinels get short timeouts of
 * their own, so a dead one costs little.
 *
 * A failover is noticed in one of two ways: the old master dies (the
 * connection fails, conn.c closes it, and the next command reconnects
 * through here), or it comes back demoted and refuses writes with
 * READONLY (conn.c closes the connection on that reply).
 *
 * Sentinels are reached without AUTH: sentinels that require a password
 * are not supported yet.  The master gets servers[0]'s credentials and db.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routing.h"

/* Sentinels answer from memory: anything slower than this is as good as
 * down, and the next one is asked. */
#define SENTINEL_TIMEOUT_MS 500

int relock__sentinel_readonly(const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ERROR || !r->str)
        return 0;
    /* 7.0 passes the error on as it is; older servers wrap a script's
     * error: "ERR Error running script ...: -READONLY You can't write ..." */
    return strncmp(r->str, "READONLY", 8) == 0 || strstr(r->str, "-READONLY") != NULL;
}

/* Appends ", text" (or text first) to the list of what was tried. */
static void note(char *buf, size_t cap, const char *text)
{
    size_t n = strlen(buf);
    const char *sep = n ? "; " : "";
    size_t sl = strlen(sep), tl = strlen(text);
    if (n + sl + 1 >= cap)
        return; /* full: the message shows what fits */
    memcpy(buf + n, sep, sl);
    n += sl;
    if (tl > cap - 1 - n)
        tl = cap - 1 - n;
    memcpy(buf + n, text, tl);
    buf[n + tl] = '\0';
}

/* The reason in a "connect to HOST:PORT: reason" message of conn.c, for
 * messages that name the address themselves. */
static const char *reason_of(const char *msg)
{
    const char *tail = strstr(msg, ": ");
    if (tail && strncmp(msg, "connect to ", 11) == 0)
        return tail + 2;
    return msg;
}

/* Asks one sentinel; 0 with *out filled, or -1 with a reason in why. */
static int ask_sentinel(relock_client *c, const relock__addr *a, relock__addr *out, char *why,
                        size_t whylen)
{
    long long cto = c->s.connect_timeout_ms < SENTINEL_TIMEOUT_MS ? c->s.connect_timeout_ms
                                                                  : SENTINEL_TIMEOUT_MS;
    long long rto = c->s.command_timeout_ms < SENTINEL_TIMEOUT_MS ? c->s.command_timeout_ms
                                                                  : SENTINEL_TIMEOUT_MS;
    relock_status st;
    char err[RELOCK__HOST_MAX + 160];
    redisContext *ctx = relock__connect_ctx(a->host, a->port, cto, rto, &st, err, sizeof err);
    if (!ctx) {
        snprintf(why, whylen, "sentinel %s:%d: %s", a->host, a->port, reason_of(err));
        return -1;
    }
    const char *argv[] = {"SENTINEL", "get-master-addr-by-name", c->s.sentinel.master};
    redisReply *r = redisCommandArgv(ctx, 3, argv, NULL);
    int rc = -1;
    if (!r) {
        snprintf(why, whylen, "sentinel %s:%d: %s", a->host, a->port,
                 ctx->errstr[0] ? ctx->errstr : "connection lost");
    } else if (r->type == REDIS_REPLY_NIL) {
        snprintf(why, whylen, "sentinel %s:%d does not know master \"%s\"", a->host, a->port,
                 c->s.sentinel.master);
    } else if (r->type == REDIS_REPLY_ERROR) {
        snprintf(why, whylen, "sentinel %s:%d: %.120s", a->host, a->port, r->str);
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
               r->element[0]->type != REDIS_REPLY_STRING ||
               r->element[1]->type != REDIS_REPLY_STRING ||
               r->element[0]->len >= sizeof out->host || r->element[0]->len == 0) {
        snprintf(why, whylen, "sentinel %s:%d: unexpected reply", a->host, a->port);
    } else {
        char *end = NULL;
        long port = strtol(r->element[1]->str, &end, 10);
        if (!*r->element[1]->str || *end || port < 1 || port > 65535) {
            snprintf(why, whylen, "sentinel %s:%d: bad port \"%.16s\"", a->host, a->port,
                     r->element[1]->str);
        } else {
            memcpy(out->host, r->element[0]->str, r->element[0]->len + 1);
            out->port = (int)port;
            rc = 0;
        }
    }
    if (r)
        freeReplyObject(r);
    redisFree(ctx);
    return rc;
}

/* Whether the connected server calls itself a master: ROLE from 2.8.12,
 * INFO replication before.  0 yes, 1 no (role in role), -1 error. */
static int is_master(relock_client *c, char *role, size_t rolelen)
{
    long v = (long)c->conn.major * 10000 + c->conn.minor * 100 + c->conn.patch;
    snprintf(role, rolelen, "unknown");
    if (v >= 20812) {
        redisReply *r = redisCommand(c->conn.ctx, "ROLE");
        if (!r)
            return -1;
        int rc = -1;
        if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
            r->element[0]->type == REDIS_REPLY_STRING) {
            snprintf(role, rolelen, "%s", r->element[0]->str);
            rc = strcmp(r->element[0]->str, "master") == 0 ? 0 : 1;
        }
        freeReplyObject(r);
        return rc;
    }
    redisReply *r = redisCommand(c->conn.ctx, "INFO replication");
    if (!r)
        return -1;
    int rc = -1;
    if (r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "role:");
        if (p) {
            p += 5;
            size_t n = strcspn(p, "\r\n");
            snprintf(role, rolelen, "%.*s", (int)(n < 31 ? n : 31), p);
            rc = strcmp(role, "master") == 0 ? 0 : 1;
        }
    }
    freeReplyObject(r);
    return rc;
}

/* Connects to the master a sentinel named and checks its role. */
static relock_status try_master(relock_client *c, const relock__addr *m, char *why, size_t whylen)
{
    relock__server *node = &c->node;
    *node = c->s.servers[0]; /* credentials and db */
    memcpy(node->host, m->host, sizeof node->host);
    node->port = m->port;
    relock_status st = relock__conn_open(c, node);
    if (st != RELOCK_OK) {
        snprintf(why, whylen, "%s", reason_of(c->err.msg));
        return st;
    }
    char role[32];
    int rc = is_master(c, role, sizeof role);
    if (rc == 0)
        return RELOCK_OK;
    if (rc < 0)
        snprintf(why, whylen, "ROLE: %s",
                 c->conn.ctx->errstr[0] ? c->conn.ctx->errstr : "unexpected reply");
    else
        snprintf(why, whylen, "not a master (role %s)", role);
    relock__conn_close(&c->conn);
    return RELOCK_EIO;
}

relock_status relock__sentinel_connect(relock_client *c)
{
    const relock__settings *s = &c->s;
    if (s->sentinel.naddrs < 1)
        return RELOCK__FAIL(&c->err, RELOCK_ECONFIG,
                            "sentinel.master is \"%s\" but sentinel.addrs lists no sentinel",
                            s->sentinel.master);
    /* Failures along the way are collected here, not recorded: only the
     * outcome of the whole search is the call's error. */
    relock__err saved = c->err;
    char tried[sizeof c->err.msg];
    tried[0] = '\0';
    relock_status worst = RELOCK_EIO;
    int n = s->sentinel.naddrs;
    int first = c->sentinel_first % n;
    for (int k = 0; k < n; k++) {
        int i = (first + k) % n;
        const relock__addr *a = &s->sentinel.addrs[i];
        char why[RELOCK__HOST_MAX * 2 + 200];
        relock__addr m;
        if (ask_sentinel(c, a, &m, why, sizeof why) != 0) {
            note(tried, sizeof tried, why);
            continue;
        }
        relock__err_clear(&c->err);
        relock_status st = try_master(c, &m, why, sizeof why);
        if (st == RELOCK_OK) {
            c->err = saved;
            c->sentinel_first = i;
            return RELOCK_OK;
        }
        /* Our credentials refused by the master: say so, not "unreachable". */
        if (st == RELOCK_ECONFIG || st == RELOCK_ENOMEM)
            worst = st;
        char line[sizeof why + 2 * RELOCK__HOST_MAX + 64];
        snprintf(line, sizeof line, "sentinel %s:%d: master at %s:%d: %s", a->host, a->port,
                 m.host, m.port, why);
        note(tried, sizeof tried, line);
    }
    c->err = saved;
    return RELOCK__FAIL(&c->err, worst, "no usable master \"%s\" from %d sentinel%s: %s",
                        s->sentinel.master, n, n == 1 ? "" : "s", tried);
}
