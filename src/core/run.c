/*
 * The blocking runs of the algorithms' step machines: each function here
 * feeds one machine (src/algo/) through the blocking driver (drive.h,
 * pollloop.c) or makes the connection ready first, so that
 * the machine files hold no I/O.  The algorithm tables the blocking API
 * chooses from (relock__algo_modern; the quorum's, relock__algo_quorum,
 * is in pollloop.c) point here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "durable.h"
#include "fence.h"
#include "modern.h"
#include "quorum.h"
#include "drive.h"

static relock_status modern_attempt(relock_lock *l, long *hint_ms)
{
    relock_client *c = l->c;
    relock_status tst = relock__token_for(&c->err, "acquire", l->name, l->value);
    if (tst != RELOCK_OK)
        return tst;
    relock__modern_acq m;
    relock__modern_acq_init(&m);
    m.h.hint_ms = *hint_ms;
    relock_status st = relock__drive(l, relock__modern_acq_step, &m);
    *hint_ms = m.h.hint_ms;
    return st;
}

static relock_status modern_release(relock_lock *l)
{
    relock__modern_cx m;
    relock__modern_cx_init(&m, 0, 0);
    return relock__drive(l, relock__modern_cx_step, &m);
}

static relock_status modern_extend(relock_lock *l, long long ttl_ms)
{
    relock__modern_cx m;
    relock__modern_cx_init(&m, 1, ttl_ms);
    return relock__drive(l, relock__modern_cx_step, &m);
}

const relock__algo relock__algo_modern = {
    "modern", modern_attempt, modern_release, modern_extend, NULL, &relock__modern_machines,
};

relock_status relock__durable_wait(relock_lock *l, const char *op)
{
    relock__durable_m m;
    relock__durable_init(&m, op);
    relock_status st = relock__drive(l, relock__durable_step, &m);
    l->c->replicas_acked = m.acked;
    return st;
}

relock_status relock__fence_seed(relock_lock *l)
{
    char before[RELOCK__KEY_MAX];
    if (relock__fence_key_before(l->key, before, sizeof before) != 1)
        return RELOCK_OK;
    /* The machine chooses its way by the server's capabilities: connected
     * (and probed) first, since a connection closed by an earlier failure
     * knows none, and would pass for a server before 2.2, whose way only
     * creates a missing counter and never raises one. */
    relock_status st = relock__drive_ready(l->c, l->key);
    if (st != RELOCK_OK)
        return st;
    relock__fence_carry_m m;
    relock__fence_carry_init(&m, before);
    return relock__drive(l, relock__fence_carry_step, &m);
}
