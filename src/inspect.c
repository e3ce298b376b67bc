/* Read-only inspection of a lock key (`relock inspect`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Every string is whole: copied at its length, never cut. */
struct relock_inspect_info {
    relock_value_kind kind;
    char *value; /* NULL when absent */
    size_t value_len;
    long long pttl_ms;
    long long ts_ms;
    int ts_unit_ms;
    long long fence;
    char *owner; /* NULL when none */
};

static char *copy_bytes(const char *s, size_t len)
{
    char *d = malloc(len + 1);
    if (d) {
        memcpy(d, s, len);
        d[len] = '\0';
    }
    return d;
}

static relock_status inspect(relock_client *c, const char *name, relock_inspect_info *info);

relock_status relock_inspect(relock_client *c, const char *name, relock_inspect_info **out)
{
    if (out)
        *out = NULL;
    if (!c)
        return RELOCK_EINVAL;
    relock__err_clear(&c->err);
    if (!out)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "inspect: no place for the result");
    if (!name || !*name)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "lock name: empty");
    relock_inspect_info *info = calloc(1, sizeof *info);
    if (!info)
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "inspect: out of memory");
    relock_status st = inspect(c, name, info);
    if (st != RELOCK_OK) {
        relock_inspect_info_free(info);
        return st;
    }
    *out = info;
    return RELOCK_OK;
}

void relock_inspect_info_free(relock_inspect_info *info)
{
    if (!info)
        return;
    free(info->value);
    free(info->owner);
    free(info);
}

relock_value_kind relock_inspect_info_kind(const relock_inspect_info *info)
{
    return info ? info->kind : RELOCK_VALUE_NONE;
}

const char *relock_inspect_info_value(const relock_inspect_info *info, size_t *len)
{
    if (len)
        *len = info && info->value ? info->value_len : 0;
    return info && info->value ? info->value : "";
}

long long relock_inspect_info_pttl_ms(const relock_inspect_info *info)
{
    return info ? info->pttl_ms : -2;
}

long long relock_inspect_info_ts_ms(const relock_inspect_info *info)
{
    return info ? info->ts_ms : 0;
}

int relock_inspect_info_ts_unit_ms(const relock_inspect_info *info)
{
    return info ? info->ts_unit_ms : 0;
}

long long relock_inspect_info_fence(const relock_inspect_info *info)
{
    return info ? info->fence : 0;
}

const char *relock_inspect_info_owner(const relock_inspect_info *info)
{
    return info && info->owner ? info->owner : "";
}

static relock_status inspect(relock_client *c, const char *name, relock_inspect_info *info)
{
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
        if (r->type == REDIS_REPLY_STRING && !(info->owner = copy_bytes(r->str, r->len))) {
            freeReplyObject(r);
            return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "inspect: out of memory");
        }
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
    info->value = copy_bytes(r->str, r->len);
    info->value_len = r->len;
    freeReplyObject(r);
    if (!info->value)
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "inspect: out of memory");
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
