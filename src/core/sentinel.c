/*
 * Redis Sentinel (design.md §9.2): find the master by name.
 *
 * The search as pure steps, run by the operation core (src/core/routing.c)
 * on its own connections: every (re)connect asks the configured sentinels
 * in turn, starting with the one that helped last, for the master's
 * address (SENTINEL get-master-addr-by-name), connects there and checks
 * that the server really is a master: a sentinel can be stale, or the
 * failover it reports still unfinished.  Only then does the client use the
 * connection; otherwise the next sentinel is asked.  Sentinels get short
 * timeouts of their own, so a dead one costs little.
 *
 * A failover is noticed in one of two ways: the old master dies (the
 * connection fails, and the next operation reconnects through the search),
 * or it comes back demoted and refuses writes with READONLY (the core
 * drops the connection on that reply).
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

/* ------------------------------------------------------------------ the search, pure
 *
 * What follows does no I/O: which sentinel to ask next, what its answer
 * and the master's role reply mean, and the message when none helps.  The
 * operation core (src/core/routing.c) runs it over its own connections,
 * under both APIs. */

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
    q->cur = (q->first + q->k++) % q->n;
    return q->cur;
}

void relock__sentinel_unreachable(relock__sentinel_search *q, const relock__settings *s,
                                  const char *reason)
{
    const relock__addr *a = &s->sentinel.addrs[q->cur];
    char why[RELOCK__HOST_MAX * 2 + 200];
    snprintf(why, sizeof why, "sentinel %s:%d: %s", a->host, a->port,
             relock__sentinel_reason(reason));
    note(q->tried, sizeof q->tried, why);
}

int relock__sentinel_answer(relock__sentinel_search *q, const relock__settings *s,
                            const redisReply *r, relock__addr *out)
{
    const relock__addr *a = &s->sentinel.addrs[q->cur];
    char why[RELOCK__HOST_MAX * 2 + 200];
    if (r->type == REDIS_REPLY_NIL) {
        snprintf(why, sizeof why, "sentinel %s:%d does not know master \"%s\"", a->host,
                 a->port, s->sentinel.master);
    } else if (r->type == REDIS_REPLY_ERROR) {
        snprintf(why, sizeof why, "sentinel %s:%d: %.120s", a->host, a->port, r->str);
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
               r->element[0]->type != REDIS_REPLY_STRING ||
               r->element[1]->type != REDIS_REPLY_STRING ||
               r->element[0]->len >= sizeof out->host || r->element[0]->len == 0) {
        snprintf(why, sizeof why, "sentinel %s:%d: unexpected reply", a->host, a->port);
    } else {
        char *end = NULL;
        long port = strtol(r->element[1]->str, &end, 10);
        if (!*r->element[1]->str || *end || port < 1 || port > 65535) {
            snprintf(why, sizeof why, "sentinel %s:%d: bad port \"%.16s\"", a->host, a->port,
                     r->element[1]->str);
        } else {
            memcpy(out->host, r->element[0]->str, r->element[0]->len + 1);
            out->port = (int)port;
            return 0;
        }
    }
    note(q->tried, sizeof q->tried, why);
    return -1;
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
    if (r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "role:");
        if (p) {
            p += 5;
            size_t n = strcspn(p, "\r\n");
            snprintf(role, rolelen, "%.*s", (int)(n < 31 ? n : 31), p);
            return strcmp(role, "master") == 0 ? 0 : 1;
        }
    }
    return -1;
}

void relock__sentinel_bad_master(relock__sentinel_search *q, const relock__settings *s,
                                 const relock__addr *m, relock_status st, const char *why)
{
    const relock__addr *a = &s->sentinel.addrs[q->cur];
    /* Our credentials refused by the master: say so, not "unreachable". */
    if (st == RELOCK_ECONFIG || st == RELOCK_ENOMEM)
        q->worst = st;
    char line[RELOCK__HOST_MAX * 4 + 400];
    snprintf(line, sizeof line, "sentinel %s:%d: master at %s:%d: %s", a->host, a->port,
             m->host, m->port, why);
    note(q->tried, sizeof q->tried, line);
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
