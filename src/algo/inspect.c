/*
 * Read-only inspection of a lock key (`relock inspect`) in one batch: the
 * fence counter (it outlives its lock: shown even for a free one), the
 * owner record, the value and its TTL.
 */
#include <stdlib.h>
#include <string.h>

#include "inspect.h"

static char *copy_bytes(const char *s, size_t len)
{
    char *d = malloc(len + 1);
    if (d) {
        memcpy(d, s, len);
        d[len] = '\0';
    }
    return d;
}

void relock__inspect_init(relock__inspect_m *m, const char *okey, relock_inspect_info *info)
{
    *m = (relock__inspect_m){.h.hint_ms = -1, .okey = okey, .info = info};
}

relock__step relock__inspect_step(void *vm, relock_lock *l, const relock__feed *in,
                                  relock__batch *out)
{
    relock__inspect_m *m = vm;
    relock_client *c = l->c;
    relock_inspect_info *info = m->info;
    /* Old servers have only TTL, in seconds. */
    int ms = (c->conn.caps & RELOCK_CAP_PEXPIRE) != 0;
    int has_owner = m->okey[0] != '\0';
    if (m->h.pc == 0) {
        relock__batch_reset(out);
        relock__batch_words(out, 2, "GET", l->fence_key);
        if (has_owner)
            relock__batch_words(out, 2, "GET", m->okey);
        relock__batch_words(out, 2, "GET", l->key);
        relock__batch_words(out, 2, ms ? "PTTL" : "TTL", l->key);
        return relock__send_at(&m->h, out, 1, 0);
    }
    /* The replies in order: a fault fails the call where a reply it needs
     * is missing (a free lock needs no TTL). */
    if (in->nreply < 2 + has_owner)
        return relock__done(&m->h, relock__fault_fail(c, in));
    const redisReply *r = in->reply[0];
    if (r->type == REDIS_REPLY_STRING)
        info->fence = atoll(r->str);
    r = in->reply[has_owner];
    if (has_owner && r->type == REDIS_REPLY_STRING && !(info->owner = copy_bytes(r->str, r->len)))
        return relock__done(&m->h, RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "inspect: out of memory"));
    r = in->reply[1 + has_owner];
    if (r->type == REDIS_REPLY_NIL) {
        info->kind = RELOCK_VALUE_NONE;
        info->pttl_ms = -2;
        relock__err_clear(&c->err); /* the TTL's reply is not needed */
        return relock__done(&m->h, RELOCK_OK);
    }
    relock_status st = relock__reply_check(c, r, "b", "GET");
    if (st != RELOCK_OK)
        return relock__done(&m->h, st);
    relock__value v;
    relock__classify(r->str, r->len, &v);
    info->kind = v.kind;
    info->value = copy_bytes(r->str, r->len);
    info->value_len = r->len;
    if (!info->value)
        return relock__done(&m->h, RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "inspect: out of memory"));
    if (v.kind == RELOCK_VALUE_TIMESTAMP) {
        int unit = relock__ts_unit_guess(v.ts_digits);
        if (unit < 0)
            unit = c->s.legacy.unit_ms;
        info->ts_unit_ms = unit;
        /* A fraction (float-second clients) to the ms, rounded up. */
        relock__stamp stamp;
        relock__value_stamp(&v, &stamp);
        info->ts_ms = relock__stamp_ms(&stamp, unit ? 1 : 1000, 1);
    }
    if (in->nreply < 3 + has_owner)
        return relock__done(&m->h, relock__fault_fail(c, in));
    r = in->reply[2 + has_owner];
    if ((st = relock__reply_check(c, r, "i", ms ? "PTTL" : "TTL")) != RELOCK_OK)
        return relock__done(&m->h, st);
    info->pttl_ms = r->integer < 0 ? r->integer : ms ? r->integer : r->integer * 1000;
    return relock__done(&m->h, RELOCK_OK);
}

void relock_inspect_info_free(relock_inspect_info *info)
{
    if (!info)
        return;
    free(info->value);
    free(info->owner);
    free(info->key);
    free(info);
}

/* The getters of relock.h: a NULL info answers none. */
#define INSPECT_GETTER(type, field, expr, none)                                                \
    type relock_inspect_info_##field(const relock_inspect_info *info)                         \
    {                                                                                          \
        return info ? (expr) : (none);                                                         \
    }
INSPECT_GETTER(relock_value_kind, kind, info->kind, RELOCK_VALUE_NONE)
INSPECT_GETTER(long long, pttl_ms, info->pttl_ms, -2)
INSPECT_GETTER(long long, ts_ms, info->ts_ms, 0)
INSPECT_GETTER(int, ts_unit_ms, info->ts_unit_ms, 0)
INSPECT_GETTER(long long, fence, info->fence, 0)
INSPECT_GETTER(long long, waiters, info->waiters, -1)
INSPECT_GETTER(const char *, owner, info->owner ? info->owner : "", "")
INSPECT_GETTER(const char *, key, info->key ? info->key : "", "")

const char *relock_inspect_info_value(const relock_inspect_info *info, size_t *len)
{
    if (len)
        *len = info && info->value ? info->value_len : 0;
    return info && info->value ? info->value : "";
}
