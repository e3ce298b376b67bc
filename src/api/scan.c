/*
 * relock_scan() and relock_scan_keys(): the audit's machine (src/algo/scan.c)
 * on the blocking driver, over every master of a Redis Cluster in turn
 * (each holds its slots' keys only), so that the counts and the verdict
 * cover the whole keyspace; complete only when every master's walk was.
 */
#include <stdio.h>
#include <stdlib.h>

#include "api.h"
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
    relock_lock l = {.c = c, .name = (char *)"scan"};
    while (st == RELOCK_OK && m.next != RELOCK__SCAN_END) {
        if (m.next == RELOCK__SCAN_NODE)
            st = relock__cluster_use(c, m.node);
        else if (m.next == RELOCK__SCAN_KEY)
            st = relock__cluster_route(c, m.route);
        if (st != RELOCK_OK)
            break;
        if (m.next != RELOCK__SCAN_KEY)
            snprintf(c->scan_node, sizeof c->scan_node, RELOCK__ADDR_FMT,
                     RELOCK__ADDR(c->conn.srv));
        st = relock__drive(&l, relock__scan_step, &m);
    }
    return relock__scan_end(&m, c, st);
}
