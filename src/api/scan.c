/*
 * relock_scan() and relock_scan_keys(): the audit's machine (src/algo/scan.c)
 * as the operation core's scan (src/core/scan.c) on the blocking calls'
 * poll loop (pollloop.c); a quorum client's, which walks the first server,
 * on the blocking driver.  Over every master of a Redis Cluster in turn
 * (each holds its slots' keys only), so that the counts and the verdict
 * cover the whole keyspace; complete only when every master's walk was.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "core/pollloop.h"
#include "routing.h"
#include "scan.h"

const char *relock_scan_node(const relock_client *c)
{
    return c ? c->scan_node : "";
}

relock_status relock_scan(relock_client *c, const char *match, relock_scan_result **out)
{
    return relock_scan_keys(c, match, NULL, NULL, out);
}

/* Makes the master at (its address as the walk began) c's connection,
 * wherever the map ranks it now: a slot moved during the walk (a MOVED
 * updates the map) may change the masters' order by slot, and the walk
 * must go on with each master's cursor on that master. */
static relock_status use_master(relock_client *c, const relock__addr *at)
{
    int n = 0;
    relock__cluster_pool_counts(c, &n, NULL, NULL);
    relock__addr now;
    for (int i = 0; i < n; i++)
        if (relock__cluster_master_addr(c, i, &now) == 0 && now.port == at->port &&
            strcmp(now.host, at->host) == 0)
            return relock__cluster_use(c, i);
    return RELOCK__FAIL(&c->err, RELOCK_EIO,
                        "scan: Cluster master %s:%d serves no slot any more (the cluster was "
                        "resharded during the walk)",
                        at->host, at->port);
}

relock_status relock_scan_keys(relock_client *c, const char *match, relock_scan_key_fn fn,
                               void *arg, relock_scan_result **out)
{
    if (out)
        *out = NULL;
    if (!c)
        return RELOCK_EINVAL;
    relock__err_clear(&c->err);
    if (!out)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "scan: no place for the result");
    /* One server (through Sentinel, a Cluster's every master): the core's
     * scan operation on the blocking calls' poll loop. */
    if (relock__poll_single(c))
        return relock__poll_scan(c, match, fn, arg, out);
    relock_scan_result *r = *out = calloc(1, sizeof *r);
    if (!r)
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "scan: out of memory");
    relock__scan_m m;
    relock_status st =
        relock__scan_init(&m, c, match, fn, arg, r, 0, 0, relock__wall_ms(), relock__mono_ms());
    if (st == RELOCK_OK)
        st = relock__conn_ensure(c);
    int masters = st == RELOCK_OK ? relock__cluster_masters(c) : 0;
    r->cluster_masters = m.masters = masters > 0 ? masters : 0;
    relock__addr *at = m.masters ? calloc((size_t)m.masters, sizeof *at) : NULL;
    if (m.masters && !at)
        st = RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "scan: out of memory");
    for (int i = 0; at && i < m.masters && st == RELOCK_OK; i++)
        if (relock__cluster_master_addr(c, i, &at[i]) != 0)
            st = RELOCK__FAIL(&c->err, RELOCK_EPROTO, "cluster: no master %d in the slot map", i);
    relock_lock l = {.c = c, .name = (char *)"scan"};
    while (st == RELOCK_OK && m.next != RELOCK__SCAN_END) {
        if (m.next == RELOCK__SCAN_NODE)
            st = use_master(c, &at[m.node]);
        else if (m.next == RELOCK__SCAN_KEY)
            st = relock__cluster_route(c, m.route);
        if (st != RELOCK_OK)
            break;
        if (m.next != RELOCK__SCAN_KEY)
            snprintf(c->scan_node, sizeof c->scan_node, RELOCK__ADDR_FMT,
                     RELOCK__ADDR(c->conn.srv));
        st = relock__drive_conn(&l, relock__scan_step, &m);
    }
    free(at);
    return relock__scan_end(&m, c, st);
}
