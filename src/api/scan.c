/*
 * relock_scan(), relock_scan_keys(): the core's scan (src/core/scan.c) on
 * the poll loop, over every master of a Redis Cluster in turn (each holds
 * its slots' keys only); complete only when every master's walk was.
 */
#include "api.h"
#include "core/pollloop.h"
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
    /* (A quorum client's walks the first server.) */
    return relock__poll_scan(c, match, fn, arg, out);
}
