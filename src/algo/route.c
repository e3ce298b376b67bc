/*
 * What a reply asks of the client that sent the command (pure, no I/O):
 * Sentinel's READONLY (sentinel.c reads it), a Cluster redirection
 * (cluster.c reads it), or nothing.  The blocking client (conn.c) and the
 * asynchronous one (src/api/async.c) act on the same decisions and give
 * the same messages.  Its own file so that cluster.c does not call into
 * sentinel.c (which opens connections through connect.c, which calls
 * cluster.c).
 */
#include <stdio.h>
#include <string.h>

#include "routing.h"

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
    /* Same node again, a moment later: 10, 20, 40, ... ms. */
    return 10L << hops;
}
