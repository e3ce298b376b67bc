/*
 * The blocking runs of the timestamp algorithms (legacy and bridge,
 * compat/): each attempt, release, extend and adoption feeds the machine
 * of compat/ts.h through the blocking driver (relock__drive(), drive.h),
 * after making the connection ready, since the path depends on the probed capabilities.
 */
#include <string.h>

#include "compat.h"
#include "routing.h"
#include "ts.h"

/* A write that was never sent cannot have lengthened the lock: its
 * validity ends no later than ttl_ms from now (as compat/legacy.c does
 * for a write that failed). */
static void cap_unwritten(relock_lock *l, long long ttl_ms, uint64_t now)
{
    l->valid_until = relock__valid_min(l->valid_until, relock__valid_until(now, ttl_ms));
}

static relock_status ts_attempt(relock_lock *l, long *hint_ms)
{
    relock_client *c = l->c;
    /* The path depends on the probed capabilities: probe first if the
     * connection was closed (a closed connection knows none). */
    if (relock__drive_ready(c, l->key) != RELOCK_OK)
        return c->err.pub.status;
    relock__ts_acquire m;
    relock__ts_acquire_init(&m);
    relock_status st = relock__bridge_suffix(l, "acquire", l->value);
    if (st != RELOCK_OK)
        return st;
    st = relock__drive(l, relock__ts_acquire_step, &m);
    if (st == RELOCK_BUSY)
        *hint_ms = m.head.hint_ms;
    return st;
}

static relock_status ts_update(relock_lock *l, int extend, long long ttl_ms)
{
    relock_client *c = l->c;
    if (relock__drive_ready(c, l->key) != RELOCK_OK) {
        if (extend)
            cap_unwritten(l, ttl_ms, relock__mono_ms());
        return c->err.pub.status;
    }
    char tok[33];
    if (extend) {
        relock_status st = relock__bridge_suffix(l, "extend", tok);
        if (st != RELOCK_OK) {
            cap_unwritten(l, ttl_ms, relock__mono_ms());
            return st;
        }
    }
    relock__ts_update m;
    relock__ts_update_init(&m, extend, ttl_ms, extend ? tok : NULL);
    return relock__drive(l, relock__ts_update_step, &m);
}

static relock_status ts_release(relock_lock *l)
{
    return ts_update(l, 0, 0);
}

static relock_status ts_extend(relock_lock *l, long long ttl_ms)
{
    return ts_update(l, 1, ttl_ms);
}

/* A lock adopted from its value: the timestamp says how long it is valid. */
static void ts_adopt(relock_lock *l)
{
    relock__value val;
    relock__classify(l->value, strlen(l->value), &val);
    if (val.kind != RELOCK_VALUE_TIMESTAMP)
        return; /* nothing to learn, and no clock to read */
    relock__ts_adopt m;
    relock__ts_adopt_init(&m);
    relock__drive(l, relock__ts_adopt_step, &m);
}

const relock__algo relock__algo_legacy = {
    "legacy", ts_attempt, ts_release, ts_extend, ts_adopt, &relock__ts_machines,
};

const relock__algo relock__algo_bridge = {
    "bridge", ts_attempt, ts_release, ts_extend, ts_adopt, &relock__ts_machines,
};
