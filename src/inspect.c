/* Read-only inspection of a lock key (`relock inspect`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

relock_status relock_inspect(relock_client *c, const char *name, relock_inspect_info *info)
{
    if (!c)
        return RELOCK_EINVAL;
    relock__err_clear(&c->err);
    if (!info)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "inspect: no structure to fill");
    memset(info, 0, sizeof *info);
    if (!name || !*name)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "lock name: empty");
    char key[RELOCK__PREFIX_MAX + RELOCK__NAME_MAX + 1];
    char fkey[RELOCK__KEY_MAX];
    snprintf(key, sizeof key, "%s%s", c->s.key_prefix, name);
    relock__fence_key(key, fkey, sizeof fkey);
    relock_status rst = relock__cluster_route(c, key);
    if (rst != RELOCK_OK)
        return rst;
    /* The fence counter outlives its lock: it is shown even for a free one. */
    redisReply *r = relock__commandf(c, NULL, "GET %s", fkey);
    if (!r)
        return c->err.pub.status;
    if (r->type == REDIS_REPLY_STRING)
        info->fence = atoll(r->str);
    freeReplyObject(r);
    char okey[RELOCK__KEY_MAX];
    if (relock__owner_key(key, okey, sizeof okey) == 0) {
        r = relock__commandf(c, NULL, "GET %s", okey);
        if (!r)
            return c->err.pub.status;
        if (r->type == REDIS_REPLY_STRING)
            snprintf(info->owner, sizeof info->owner, "%s", r->str);
        freeReplyObject(r);
    }
    r = relock__commandf(c, NULL, "GET %s", key);
    if (!r)
        return c->err.pub.status;
    relock_status st = RELOCK_OK;
    if (r->type == REDIS_REPLY_NIL) {
        info->kind = RELOCK_VALUE_NONE;
        info->pttl_ms = -2;
        freeReplyObject(r);
        return RELOCK_OK;
    }
    if (r->type != REDIS_REPLY_STRING) {
        st = RELOCK__BAD_REPLY(c, "GET", r);
        freeReplyObject(r);
        char what[RELOCK__NAME_MAX + 16];
        snprintf(what, sizeof what, "lock %s", name);
        return relock__foreign_type(c, what, key);
    }
    relock__value v;
    relock__classify(r->str, r->len, &v);
    info->kind = v.kind;
    snprintf(info->value, sizeof info->value, "%.*s", (int)(r->len < 127 ? r->len : 127), r->str);
    freeReplyObject(r);
    if (v.kind == RELOCK_VALUE_TIMESTAMP) {
        int unit = relock__ts_unit_guess(v.ts_digits);
        if (unit < 0)
            unit = c->s.legacy.unit_ms;
        info->ts_unit_ms = unit;
        info->ts_ms = unit ? v.ts : v.ts * 1000;
    }
    /* Old servers have only TTL, in seconds. */
    int ms = (c->conn.caps & RELOCK_CAP_PEXPIRE) != 0;
    r = relock__commandf(c, NULL, ms ? "PTTL %s" : "TTL %s", key);
    if (!r)
        return c->err.pub.status;
    if (r->type != REDIS_REPLY_INTEGER) {
        st = RELOCK__BAD_REPLY(c, ms ? "PTTL" : "TTL", r);
    } else if (r->integer < 0) {
        info->pttl_ms = r->integer;
    } else {
        info->pttl_ms = ms ? r->integer : r->integer * 1000;
    }
    freeReplyObject(r);
    return st;
}
