/* Lock handles and the public lock calls; the algorithms do the work. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "algo.h"
#include "durable.h"

static relock_status new_lock(relock_client *c, const char *name, long long ttl_ms,
                              relock_lock **out)
{
    *out = NULL;
    relock_status st = relock__check_name(c, name);
    if (st != RELOCK_OK)
        return st;
    if (ttl_ms < 0 || ttl_ms > RELOCK__TTL_MAX_MS)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "ttl: %lld ms is not from 1 ms to one year",
                            ttl_ms);
    size_t nlen = strlen(name) + 1;
    size_t plen = strlen(c->s.key_prefix);
    size_t klen = plen + nlen;
    size_t flen = klen + 2 + sizeof RELOCK__FENCE_SUFFIX + sizeof RELOCK__WHOLE_TAG_MARK;
    /* Prefix and name always fit (key_prefix is shorter than
     * RELOCK__PREFIX_MAX, the name was checked); copied, not formatted:
     * snprintf() was most of new_lock()'s instructions. */
    char key[RELOCK__PREFIX_MAX + RELOCK__NAME_MAX + 1];
    memcpy(key, c->s.key_prefix, plen);
    memcpy(key + plen, name, nlen);
    if (!relock__key_slot_safe(key))
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL,
                            "lock name: \"%.60s\" holds a '}' but no {hash tag}, so its fence "
                            "key could not share its Redis Cluster slot; drop the '}' or use a "
                            "whole tag such as {job}",
                            key);
    relock_lock *l = calloc(1, sizeof *l + nlen + klen + flen);
    if (!l)
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "lock %s: out of memory", name);
    l->c = c;
    l->name = (char *)(l + 1);
    l->key = l->name + nlen;
    l->fence_key = l->key + klen;
    memcpy(l->name, name, nlen);
    memcpy(l->key, key, klen);
    relock__fence_key(l->key, l->fence_key, flen);
    l->ttl_ms = ttl_ms ? ttl_ms : c->s.ttl_ms;
    l->owner_pid = c->s.owner_pid;
    if (c->s.owner_text[0] && !(l->owner_text = strdup(c->s.owner_text))) {
        free(l);
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "lock %s: out of memory", name);
    }
    *out = l;
    return RELOCK_OK;
}

relock_status relock__lock_new(relock_client *c, const char *name, long long ttl_ms,
                               relock_lock **out)
{
    return new_lock(c, name, ttl_ms, out);
}

/* A key of another type than string: say which (one TYPE, on this error
 * path only). */
static relock_status foreign(relock_lock *l, relock_status st)
{
    if (st != RELOCK_EFOREIGN)
        return st;
    char what[RELOCK__NAME_MAX + 8];
    snprintf(what, sizeof what, "lock %s", l->name);
    return relock__foreign_type(l->c, what, l->key);
}

/*
 * An acquire whose write the replicas did not acknowledge (durability):
 * remove the write by compare-and-delete of our own value, as the release
 * does, and report st with the count.  If the removal fails, the lock may
 * be held until its TTL ends: RELOCK_EAMBIGUOUS says so.
 */
static relock_status undo_acquire(relock_lock *l, relock_status st)
{
    relock_client *c = l->c;
    relock__err kept;
    relock__err_copy(&kept, &c->err);
    int acked = c->replicas_acked;
    relock__err_clear(&c->err);
    relock_status rst = relock__cluster_route(c, l->key);
    if (rst == RELOCK_OK)
        rst = c->algo->release(l);
    c->replicas_acked = acked;
    return relock__durable_undone(c, &kept, st, rst);
}

static relock_status ready(relock_client *c)
{
    if (!c->algo)
        return RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED, "no lock mode selected: %s",
                            c->mode_reason[0] ? c->mode_reason : "connect failed");
    return RELOCK_OK;
}

relock_status relock_acquire(relock_client *c, const char *name, long long ttl_ms,
                             long long wait_ms, relock_lock **out)
{
    if (!out)
        return RELOCK_EINVAL;
    *out = NULL;
    if (!c)
        return RELOCK_EINVAL;
    uint64_t t0 = relock__mono_ms();
    relock__err_clear(&c->err);
    relock_status st = ready(c);
    if (st != RELOCK_OK)
        return st;
    if (wait_ms == RELOCK_WAIT_DEFAULT)
        wait_ms = c->s.wait.max_ms;
    if (wait_ms < RELOCK_WAIT_FOREVER || wait_ms > RELOCK__TTL_MAX_MS)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL,
                            "wait: %lld ms is not a valid bound (0 to one year, or forever)",
                            wait_ms);
    relock_lock *l;
    st = new_lock(c, name, ttl_ms, &l);
    if (st != RELOCK_OK)
        return st;
    /* The holder that just released usually wins the race back against
     * the waiters it woke (it needs no wake-up): give them a moment. */
    long long yield = wait_ms != 0 ? relock__yield_ms(l) : 0;
    if (yield > 0)
        relock__sleep_ms(yield);
    st = relock__wait_acquire(l, wait_ms);
    if (st != RELOCK_OK) {
        st = foreign(l, st);
        relock_lock_free(l);
        return st;
    }
    if (relock__durable_on(c)) {
        st = relock__durable_wait(l, "acquire");
        if (st != RELOCK_OK) {
            st = undo_acquire(l, st);
            relock_lock_free(l);
            return st;
        }
    }
    l->owner_since = relock__wall_ms() / 1000;
    relock__owner_note(l, 1);
    l->acquired_at = relock__mono_ms();
    relock__event(c, RELOCK_EVENT_ACQUIRED, l, RELOCK_OK, (long long)(l->acquired_at - t0));
    *out = l;
    return RELOCK_OK;
}

relock_status relock_try_acquire(relock_client *c, const char *name, long long ttl_ms,
                                 relock_lock **out)
{
    return relock_acquire(c, name, ttl_ms, 0, out);
}

relock_status relock_release(relock_lock *l)
{
    if (!l)
        return RELOCK_EINVAL;
    relock_client *c = l->c;
    relock__err_clear(&c->err);
    relock_status st = ready(c);
    if (st != RELOCK_OK)
        return st;
    if (l->keeper && l->keep_ops->end(l) == RELOCK_LOST)
        l->lost = 1;
    if (l->lost)
        return RELOCK__FAIL(&c->err, RELOCK_LOST, "release %s: the lock was already lost",
                            l->name);
    l->waiters = 0;
    st = relock__cluster_route(c, l->key);
    if (st != RELOCK_OK)
        return st;
    /* The owner record goes first, while the lock is still ours: after the
     * release a new holder may already have written its own. */
    relock__owner_note(l, 0);
    st = foreign(l, c->algo->release(l));
    if (st == RELOCK_OK) {
        if (l->waiters > 0) {
            /* Others were woken for this lock: if we come straight back
             * for it, let them go first (fairness; see acquire). */
            relock__yield_note(l);
        }
    }
    if (st == RELOCK_OK || st == RELOCK_LOST)
        l->lost = 1; /* either way it is no longer ours */
    if (st == RELOCK_OK)
        relock__event(c, RELOCK_EVENT_RELEASED, l, RELOCK_OK, 0);
    return st;
}

relock_status relock_extend(relock_lock *l, long long ttl_ms)
{
    if (!l)
        return RELOCK_EINVAL;
    relock_client *c = l->c;
    relock__err_clear(&c->err);
    relock_status st = ready(c);
    if (st != RELOCK_OK)
        return st;
    if (ttl_ms < 0 || ttl_ms > RELOCK__TTL_MAX_MS)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "ttl: %lld ms is not from 1 ms to one year",
                            ttl_ms);
    if (l->keeper)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL,
                            "extend %s: the lock is being renewed in the background; call "
                            "relock_keep_stop() first",
                            l->name);
    if (l->lost)
        return RELOCK__FAIL(&c->err, RELOCK_LOST, "extend %s: the lock was already lost",
                            l->name);
    if (ttl_ms == 0)
        ttl_ms = l->ttl_ms;
    st = relock__cluster_route(c, l->key);
    if (st != RELOCK_OK)
        return st;
    uint64_t was_valid = l->valid_until;
    long long was_ttl = l->ttl_ms;
    relock__durable_mark(l);
    st = foreign(l, c->algo->extend(l, ttl_ms));
    if (st == RELOCK_OK && relock__durable_on(c)) {
        st = relock__durable_wait(l, "extend");
        if (st != RELOCK_OK) {
            /* Still ours, and not deleted (decision 104): but only the
             * old lease is known to be on the replicas, while the master
             * holds the new one, so the validity is the earlier of the
             * two (a shorter extend shortens it). */
            l->valid_until = relock__valid_min(was_valid, l->valid_until);
            l->ttl_ms = was_ttl;
        }
    }
    if (st == RELOCK_OK)
        relock__owner_note(l, 1);
    if (st == RELOCK_LOST)
        l->lost = 1;
    return st;
}

relock_status relock_lock_adopt(relock_client *c, const char *name, const char *value,
                                long long fence, long long ttl_ms, relock_lock **out)
{
    if (!out)
        return RELOCK_EINVAL;
    *out = NULL;
    if (!c)
        return RELOCK_EINVAL;
    relock__err_clear(&c->err);
    relock_status st = ready(c);
    if (st != RELOCK_OK)
        return st;
    if (!value || !*value || strlen(value) >= RELOCK__VALUE_MAX)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "lock value: empty or longer than %d bytes",
                            RELOCK__VALUE_MAX - 1);
    if (fence < 0)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "fence: %lld is negative", fence);
    relock_lock *l;
    st = new_lock(c, name, ttl_ms, &l);
    if (st != RELOCK_OK)
        return st;
    snprintf(l->value, sizeof l->value, "%s", value);
    l->fence = fence;
    l->valid_until = 0; /* unknown unless the value tells */
    if (c->algo->adopt)
        c->algo->adopt(l);
    *out = l;
    return RELOCK_OK;
}

void relock_lock_free(relock_lock *l)
{
    if (!l)
        return;
    relock__lock_destroy(l);
}

const char *relock_lock_name(const relock_lock *l)
{
    return l ? l->name : "";
}

const char *relock_lock_value(const relock_lock *l)
{
    return l ? l->value : "";
}

long long relock_lock_fence(const relock_lock *l)
{
    return l ? l->fence : 0;
}

long long relock_lock_validity_ms(const relock_lock *l)
{
    if (!l)
        return 0;
    uint64_t until = l->keeper ? l->keep_ops->valid_until(l) : l->valid_until;
    if (l->lost || until == 0)
        return 0;
    uint64_t now = relock__mono_ms();
    return now >= until ? 0 : (long long)(until - now);
}
