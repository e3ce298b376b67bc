/*
 * Redis Cluster (design.md §9.3), the pure parts: the hash slot of a key,
 * reading CLUSTER SLOTS, and what a reply asks of the client that sent the
 * command (a redirection, Sentinel's READONLY, or nothing).  The operation
 * core (routing.c) acts on them: it follows the redirections and keeps the
 * slot map and a connection per master in use.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routing.h"

int relock__cluster_slots_parse(const redisReply *r, const char *via_host,
                                void (*fn)(void *arg, int from, int to, const char *host,
                                           int port),
                                void *arg)
{
    if (!r || r->type != REDIS_REPLY_ARRAY)
        return -1;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2)
            continue;
        const redisReply *m = e->element[2];
        if (m->element[0]->type != REDIS_REPLY_STRING || m->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        long long from = e->element[0]->integer, to = e->element[1]->integer;
        int port = (int)m->element[1]->integer;
        /* An empty address: the node asked ("?" is an unknown hostname). */
        const char *host = m->element[0]->len ? m->element[0]->str : via_host;
        if (from < 0 || to >= RELOCK__CLUSTER_NSLOTS || from > to || port < 1 || port > 65535 ||
            strcmp(host, "?") == 0 || strlen(host) >= RELOCK__HOST_MAX)
            continue;
        fn(arg, (int)from, (int)to, host, port);
    }
    return 0;
}

/* CRC16-CCITT (XMODEM), the checksum Redis Cluster hashes keys with. */
static unsigned crc16(const char *buf, size_t len)
{
    unsigned crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (unsigned)(unsigned char)buf[i] << 8;
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    return crc;
}

unsigned relock__cluster_slot(const char *key, size_t len)
{
    /* A hash tag: from the first '{' to the first '}' after it, when at
     * least one byte lies between; then only that part is hashed. */
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t from = (size_t)(open - key) + 1;
        const char *close = memchr(key + from, '}', len - from);
        if (close && close > key + from)
            return crc16(key + from, (size_t)(close - (key + from))) & (RELOCK__CLUSTER_NSLOTS - 1);
    }
    return crc16(key, len) & (RELOCK__CLUSTER_NSLOTS - 1);
}

enum relock__route relock__route_reply(const relock__settings *s, int in_txn, int hops,
                                       const char *cur_host, const redisReply *r,
                                       relock__redirect *next)
{
    memset(next, 0, sizeof *next);
    if (!r || r->type != REDIS_REPLY_ERROR)
        return RELOCK__ROUTE_REPLY;
    /* Inside a transaction a redirection is not followed: the other node
     * holds neither the WATCH nor the queued commands.  The error reply
     * goes to the caller, which fails the operation. */
    if (in_txn && !relock__sentinel_readonly(r))
        return RELOCK__ROUTE_REPLY;
    if (relock__sentinel_on(s))
        /* Sentinel masters are not Cluster nodes. */
        return relock__sentinel_readonly(r) ? RELOCK__ROUTE_READONLY : RELOCK__ROUTE_REPLY;
    enum relock__redir_kind kind = relock__redirect_parse(cur_host, r, next);
    if (kind == RELOCK__REDIR_NONE)
        return RELOCK__ROUTE_REPLY;
    if (hops >= RELOCK__CLUSTER_MAX_REDIRECTS)
        return RELOCK__ROUTE_TOO_MANY;
    return kind == RELOCK__REDIR_MOVED ? RELOCK__ROUTE_MOVED
           : kind == RELOCK__REDIR_ASK ? RELOCK__ROUTE_ASK
                                       : RELOCK__ROUTE_TRYAGAIN;
}

relock_status relock__route_too_many(relock__err *err, const char *name, int hops,
                                     const char *reply)
{
    return RELOCK__FAIL_SRV(err, RELOCK_EIO, reply,
                            "%s: still redirected after %d redirections (last: %s): is the "
                            "cluster being resharded?",
                            name, hops, reply);
}

long relock__route_tryagain_ms(int hops)
{
    return 10L << hops;
}

/* Reads "host:port" (the host may be an IPv6 address with colons, or
 * empty: then cur_host) from the end of a redirection. */
static int parse_target(const char *cur_host, const char *p, relock__redirect *out)
{
    const char *colon = strrchr(p, ':');
    if (!colon)
        return -1;
    size_t hl = (size_t)(colon - p);
    const char *port = colon + 1;
    if (!*port || strspn(port, "0123456789") != strlen(port) || strlen(port) > 5)
        return -1;
    long v = strtol(port, NULL, 10);
    if (v < 1 || v > 65535 || hl >= sizeof out->host)
        return -1;
    if (hl == 0) /* 7.0 without a known endpoint: the same address as this node */
        snprintf(out->host, sizeof out->host, "%s", cur_host);
    else
        snprintf(out->host, sizeof out->host, "%.*s", (int)hl, p);
    out->port = (int)v;
    return 0;
}

enum relock__redir_kind relock__redirect_parse(const char *cur_host, const redisReply *r,
                                               relock__redirect *out)
{
    memset(out, 0, sizeof *out);
    if (!r || r->type != REDIS_REPLY_ERROR || !r->str)
        return RELOCK__REDIR_NONE;
    if (strncmp(r->str, "TRYAGAIN", 8) == 0)
        return out->kind = RELOCK__REDIR_TRYAGAIN;
    int moved = strncmp(r->str, "MOVED ", 6) == 0;
    if (!moved && strncmp(r->str, "ASK ", 4) != 0)
        return RELOCK__REDIR_NONE;
    const char *p = r->str + (moved ? 6 : 4);
    /* The slot, then one space, then the address. */
    size_t digits = strspn(p, "0123456789");
    if (digits == 0 || digits > 5 || p[digits] != ' ' ||
        parse_target(cur_host, p + digits + 1, out) != 0)
        return RELOCK__REDIR_NONE; /* not a redirection we understand: the caller sees it */
    out->slot = atoi(p);
    if (out->slot >= RELOCK__CLUSTER_NSLOTS)
        return RELOCK__REDIR_NONE;
    return out->kind = moved ? RELOCK__REDIR_MOVED : RELOCK__REDIR_ASK;
}
