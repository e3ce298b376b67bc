/*
 * Redis Sentinel (design.md §9.2): the search for the master by name, as
 * pure steps (no I/O) that the operation core (routing.c) runs on every
 * (re)connect under both APIs.  The sentinels are asked in turn, starting
 * with the one that helped last; the master named is checked to really be
 * a master (a sentinel can be stale, or its failover unfinished) before
 * it is used.  A failover shows as the old master's death or, demoted, its
 * READONLY refusals (the core drops the connection on that reply).
 *
 * Sentinels are reached without AUTH: sentinels that require a password
 * are not supported yet.  The master gets servers[0]'s credentials and db.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routing.h"

/* Sentinels answer from memory: anything slower than this is as good as
 * down, and the next one is asked. */
#define SENTINEL_TIMEOUT_MS 500

/* Appends "sentinel HOST:PORT" (the one being asked) and fmt's text to
 * the list of what was tried; returns -1, a refused answer's result. */
__attribute__((format(printf, 3, 4)))
static int note(relock__sentinel_search *q, const relock__settings *s, const char *fmt, ...)
{
    const relock__addr *a = &s->sentinel.addrs[q->cur];
    size_t len = strlen(q->tried), cap = sizeof q->tried;
    if (len > 0 && len + 3 >= cap)
        return -1; /* full: the message shows what fits */
    int n = snprintf(q->tried + len, cap - len, "%ssentinel %s:%d", len ? "; " : "", a->host,
                     a->port);
    if (n < 0 || (size_t)n >= cap - len)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q->tried + len + (size_t)n, cap - len - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

int relock__sentinel_readonly(const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ERROR || !r->str)
        return 0;
    /* 7.0 passes the error on as it is; older servers wrap a script's
     * error: "ERR Error running script ...: -READONLY You can't write ..." */
    return strncmp(r->str, "READONLY", 8) == 0 || strstr(r->str, "-READONLY") != NULL;
}

long long relock__sentinel_timeout(long long configured_ms)
{
    return configured_ms < SENTINEL_TIMEOUT_MS ? configured_ms : SENTINEL_TIMEOUT_MS;
}

const char *relock__sentinel_reason(const char *msg)
{
    const char *tail = strstr(msg, ": ");
    if (tail && strncmp(msg, "connect to ", 11) == 0)
        return tail + 2;
    return msg;
}

void relock__sentinel_begin(relock__sentinel_search *q, const relock__settings *s, int first)
{
    memset(q, 0, sizeof *q);
    q->n = s->sentinel.naddrs;
    q->first = q->n > 0 ? first % q->n : 0;
    q->cur = -1;
    q->worst = RELOCK_EIO;
}

int relock__sentinel_next(relock__sentinel_search *q)
{
    if (q->k >= q->n)
        return q->cur = -1;
    return q->cur = (q->first + q->k++) % q->n;
}

void relock__sentinel_unreachable(relock__sentinel_search *q, const relock__settings *s,
                                  const char *reason)
{
    note(q, s, ": %s", relock__sentinel_reason(reason));
}

int relock__sentinel_answer(relock__sentinel_search *q, const relock__settings *s,
                            const redisReply *r, relock__addr *out)
{
    if (r->type == REDIS_REPLY_NIL)
        return note(q, s, " does not know master \"%s\"", s->sentinel.master);
    if (r->type == REDIS_REPLY_ERROR)
        return note(q, s, ": %.120s", r->str);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING ||
        r->element[0]->len >= sizeof out->host || r->element[0]->len == 0)
        return note(q, s, ": unexpected reply");
    char *end = NULL;
    long port = strtol(r->element[1]->str, &end, 10);
    if (!*r->element[1]->str || *end || port < 1 || port > 65535)
        return note(q, s, ": bad port \"%.16s\"", r->element[1]->str);
    memcpy(out->host, r->element[0]->str, r->element[0]->len + 1);
    out->port = (int)port;
    return 0;
}

int relock__sentinel_role_by_info(int major, int minor, int patch)
{
    return (long)major * 10000 + minor * 100 + patch < 20812;
}

int relock__sentinel_role(const redisReply *r, int by_info, char *role, size_t rolelen)
{
    snprintf(role, rolelen, "unknown");
    if (!by_info) {
        if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
            r->element[0]->type == REDIS_REPLY_STRING) {
            snprintf(role, rolelen, "%s", r->element[0]->str);
            return strcmp(r->element[0]->str, "master") == 0 ? 0 : 1;
        }
        return -1;
    }
    const char *p = r->type == REDIS_REPLY_STRING ? strstr(r->str, "role:") : NULL;
    if (!p)
        return -1;
    size_t n = strcspn(p + 5, "\r\n");
    snprintf(role, rolelen, "%.*s", (int)(n < 31 ? n : 31), p + 5);
    return strcmp(role, "master") == 0 ? 0 : 1;
}

void relock__sentinel_bad_master(relock__sentinel_search *q, const relock__settings *s,
                                 const relock__addr *m, relock_status st, const char *why)
{
    /* Our credentials refused by the master: say so, not "unreachable". */
    if (st == RELOCK_ECONFIG || st == RELOCK_ENOMEM)
        q->worst = st;
    note(q, s, ": master at %s:%d: %s", m->host, m->port, why);
}

relock_status relock__sentinel_end(const relock__sentinel_search *q, const relock__settings *s,
                                   relock__err *err)
{
    if (q->n < 1)
        return RELOCK__FAIL(err, RELOCK_ECONFIG,
                            "sentinel.master is \"%s\" but sentinel.addrs lists no sentinel",
                            s->sentinel.master);
    return RELOCK__FAIL(err, q->worst, "no usable master \"%s\" from %d sentinel%s: %s",
                        s->sentinel.master, q->n, q->n == 1 ? "" : "s", q->tried);
}

relock_status relock__sentinel_readonly_fail(relock__err *err, const relock__settings *s,
                                             const char *name, const relock__server *srv,
                                             const char *reply)
{
    return RELOCK__FAIL_SRV(err, RELOCK_EIO, reply,
                            "%s on " RELOCK__ADDR_FMT
                            ": the server is now a read-only replica: a failover "
                            "of \"%s\" is under way; the next call asks the sentinels again",
                            name, RELOCK__ADDR(srv), s->sentinel.master);
}
