/* How modern mode works on the server connected now (relock_client_paths);
 * the choice of algorithm itself is the core's (src/core/mode.c). */
#include <stdlib.h>

#include "caps.h"
#include "algo.h"

relock_status relock_client_paths(relock_client *c, relock_paths **out)
{
    if (out)
        *out = NULL;
    if (!c)
        return RELOCK_EINVAL;
    relock__err_clear(&c->err);
    if (!out)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "paths: nowhere to put the result");
    if (c->algo != &relock__algo_modern)
        return RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                            "paths: only for modern mode on one server (this client: %s)",
                            c->q      ? "a quorum, which uses scripts on every server"
                            : c->algo ? relock_mode_name(c->mode)
                                      : "no mode selected");
    /* The capabilities of the server connected now: after a failover it
     * may be another one than at connect. */
    relock_status st = relock__drive_ready(c, NULL);
    if (st != RELOCK_OK)
        return st;
    relock_paths *p = calloc(1, sizeof *p);
    if (!p)
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "paths: out of memory");
    relock__modern_paths(c, p);
    *out = p;
    return RELOCK_OK;
}

void relock_paths_free(relock_paths *p)
{
    free(p);
}

const char *relock_paths_get(const relock_paths *p, relock_path which)
{
    if (!p || (unsigned)which >= RELOCK__NPATHS || !p->path[which])
        return "";
    return p->path[which];
}
