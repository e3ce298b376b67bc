/*
 * Opening the connection to one server: connect, log in, then run the
 * client's on-connect step (the server probe, installed by
 * relock_connect()).  A Cluster master that cannot be reached marks the
 * slot map for a refresh.  Used by conn.c and sentinel.c.
 */
#include <stdio.h>

#include "routing.h"

relock_status relock__connect_failed(relock_client *c, const relock__err *why,
                                    const relock__server *srv)
{
    relock__err e;
    relock__err_copy(&e, why);
    relock__err_clear(&c->err);
    if (e.pub.status == RELOCK_OK)
        return RELOCK__FAIL(&c->err, RELOCK_EIO, "connect to " RELOCK__ADDR_FMT ": failed",
                            RELOCK__ADDR(srv));
    return relock__err_set(&c->err, e.pub.status, __FILE__, __LINE__,
                           e.server[0] ? e.server : NULL, "%s", e.msg);
}

relock_status relock__conn_open(relock_client *c, const relock__server *srv)
{
    relock__conn_close(&c->conn);
    c->conn.srv = srv;
    char why[RELOCK__HOST_MAX + 160];
    relock_status st;
    redisContext *ctx = relock__connect_ctx(srv->host, srv->port, c->s.connect_timeout_ms,
                                            c->s.command_timeout_ms, &st, why, sizeof why);
    if (!ctx) {
        /* A Cluster node a MOVED named may be gone (failed over): start
         * again from the configured server next time, or, with the slot
         * map, read the map again (the slot may have a new master). */
        if (srv == &c->node && !relock__sentinel_on(&c->s))
            c->conn.srv = &c->s.servers[0];
        int slot = -1;
        if (relock__cluster_is_node(c, srv, &slot)) {
            relock__cluster_unreachable(c, srv);
            return RELOCK__FAIL(&c->err, st,
                                "%s (the Cluster master of slot %d in the slot map; the map is "
                                "read again)",
                                why, slot);
        }
        return RELOCK__FAIL(&c->err, st, "%s", why);
    }
    c->connects++;
    c->conn.ctx = ctx;
    c->conn.last_used = relock__mono_ms();
    st = relock__conn_login(c, ctx, srv);
    if (st == RELOCK_OK && c->on_connect)
        st = c->on_connect(c);
    if (st != RELOCK_OK)
        relock__conn_close(&c->conn);
    return st;
}
