/*
 * Read-only inspection of a lock key (`relock inspect`): the fence counter
 * (it outlives its lock: shown even for a free one), the owner record, the
 * value and its TTL, read in one batch by a step machine (inspect.h) that
 * relock_inspect() runs with the blocking driver.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inspect.h"
#include "internal.h"

void relock__inspect_init(relock__inspect_m *m, const char *okey, relock_inspect_info *info)
{
    memset(m, 0, sizeof *m);
    m->h.hint_ms = -1;
    m->okey = okey;
    m->info = info;
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
        const char *f[] = {"GET", l->fence_key};
        const char *o[] = {"GET", m->okey};
        const char *k[] = {"GET", l->key};
        const char *t[] = {ms ? "PTTL" : "TTL", l->key};
        relock__batch_add(out, 2, f);
        if (has_owner)
            relock__batch_add(out, 2, o);
        relock__batch_add(out, 2, k);
        relock__batch_add(out, 2, t);
        m->h.pc = 1;
        return relock__send(&m->h, out);
    }
    /* The replies in order; a fault fails the call where a reply it
     * needs is missing. */
    int at = 0;
    if (in->nreply <= at)
        return relock__done(&m->h, relock__fault_fail(c, in));
    const redisReply *r = in->reply[at++];
    if (r->type == REDIS_REPLY_STRING)
        info->fence = atoll(r->str);
    if (has_owner) {
        if (in->nreply <= at)
            return relock__done(&m->h, relock__fault_fail(c, in));
        r = in->reply[at++];
        if (r->type == REDIS_REPLY_STRING)
            snprintf(info->owner, sizeof info->owner, "%s", r->str);
    }
    if (in->nreply <= at)
        return relock__done(&m->h, relock__fault_fail(c, in));
    r = in->reply[at++];
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
    snprintf(info->value, sizeof info->value, "%.*s", (int)(r->len < 127 ? r->len : 127), r->str);
    if (v.kind == RELOCK_VALUE_TIMESTAMP) {
        int unit = relock__ts_unit_guess(v.ts_digits);
        if (unit < 0)
            unit = c->s.legacy.unit_ms;
        info->ts_unit_ms = unit;
        info->ts_ms = unit ? v.ts : v.ts * 1000;
    }
    if (in->nreply <= at)
        return relock__done(&m->h, relock__fault_fail(c, in));
    r = in->reply[at];
    st = relock__reply_check(c, r, "i", ms ? "PTTL" : "TTL");
    if (st != RELOCK_OK)
        return relock__done(&m->h, st);
    info->pttl_ms = r->integer < 0 ? r->integer : ms ? r->integer : r->integer * 1000;
    return relock__done(&m->h, RELOCK_OK);
}

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
    char okey[RELOCK__KEY_MAX];
    snprintf(key, sizeof key, "%s%s", c->s.key_prefix, name);
    relock__fence_key(key, fkey, sizeof fkey);
    if (relock__owner_key(key, okey, sizeof okey) != 0)
        okey[0] = '\0';
    relock_status st = relock__cluster_route(c, key);
    if (st != RELOCK_OK)
        return st;
    /* Connected now: the machine asks for PTTL or TTL by the server's
     * capabilities. */
    st = relock__conn_ready(c);
    if (st != RELOCK_OK)
        return st;
    relock_lock tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.c = c;
    tmp.name = (char *)name;
    tmp.key = key;
    tmp.fence_key = fkey;
    relock__inspect_m m;
    relock__inspect_init(&m, okey, info);
    st = relock__drive(&tmp, relock__inspect_step, &m);
    if (st == RELOCK_EFOREIGN) {
        char what[RELOCK__NAME_MAX + 16];
        snprintf(what, sizeof what, "lock %s", name);
        return relock__foreign_type(c, what, key);
    }
    return st;
}
