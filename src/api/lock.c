/* Lock handles and the public lock calls, each a whole operation of the
 * operation core (the attempt and its waiting, durability and its undo,
 * the owner record, the events) on the client's private poll loop; the
 * owner metadata's settings. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "algo.h"
#include "core/pollloop.h"
#include "ownrec.h"

relock_status relock__lock_new(relock_client *c, const char *name, long long ttl_ms,
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
     * snprintf() would be most of this function's instructions. */
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

/* Clears c's error; refuses no client, and a client without a lock mode. */
static relock_status ready(relock_client *c)
{
    if (!c)
        return RELOCK_EINVAL;
    relock__err_clear(&c->err);
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
    st = relock__lock_new(c, name, ttl_ms, &l);
    if (st != RELOCK_OK)
        return st;
    /* For the error of a failed acquire, which frees l (it fits:
     * relock__lock_new() built it in a buffer this size). */
    char key[RELOCK__PREFIX_MAX + RELOCK__NAME_MAX + 1];
    memcpy(key, l->key, strlen(l->key) + 1);
    st = relock__lock_op(l, RELOCK__OP_ACQUIRE, wait_ms); /* frees l when it fails */
    if (st != RELOCK_OK)
        return relock__foreign_type(c, "lock", name, key, st);
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
    relock_status st = ready(c);
    if (st != RELOCK_OK)
        return st;
    if (l->keeper && l->keep_ops->end(l) == RELOCK_LOST)
        l->lost = 1;
    return relock__foreign_type(c, "lock", l->name, l->key,
                                relock__lock_op(l, RELOCK__OP_RELEASE, 0));
}

relock_status relock_extend(relock_lock *l, long long ttl_ms)
{
    if (!l)
        return RELOCK_EINVAL;
    relock_client *c = l->c;
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
    return relock__foreign_type(c, "lock", l->name, l->key,
                                relock__lock_op(l, RELOCK__OP_EXTEND, ttl_ms ? ttl_ms : l->ttl_ms));
}

relock_status relock_lock_adopt(relock_client *c, const char *name, const char *value,
                                long long fence, long long ttl_ms, relock_lock **out)
{
    if (!out)
        return RELOCK_EINVAL;
    *out = NULL;
    relock_status st = ready(c);
    if (st != RELOCK_OK)
        return st;
    if (!value || !*value || strlen(value) >= RELOCK__VALUE_MAX)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "lock value: empty or longer than %d bytes",
                            RELOCK__VALUE_MAX - 1);
    if (fence < 0)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "fence: %lld is negative", fence);
    relock_lock *l;
    st = relock__lock_new(c, name, ttl_ms, &l);
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
    if (l)
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

/* ------------------------------------------------------------------ owner metadata
 *
 * With owner_info = true, the holder's host, pid, the time the lock was
 * won and an optional text beside each lock, with the lease as its TTL, so
 * that an operator (`relock inspect`) can tell a dead holder from a slow
 * one.  Off by default in the library: it costs a round trip per acquire
 * and extend (the CLI turns it on, decision 88). */

/* RELOCK_OK, or RELOCK_EINVAL recorded in e. */
static relock_status owner_check(relock__err *e, long pid, const char *text)
{
    if (!text)
        return RELOCK__FAIL(e, RELOCK_EINVAL, "owner: no text (NULL); \"\" writes none");
    if (pid < 0 || pid > INT_MAX)
        return RELOCK__FAIL(e, RELOCK_EINVAL, "owner: pid %ld is not from 0 to %d", pid,
                            INT_MAX);
    size_t len = strlen(text);
    if (len > RELOCK_OWNER_MAX)
        return RELOCK__FAIL(e, RELOCK_EINVAL, "owner: text of %zu bytes, at most %d", len,
                            RELOCK_OWNER_MAX);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch < ' ' || ch == 0x7f)
            return RELOCK__FAIL(e, RELOCK_EINVAL,
                                "owner: text holds a control character at byte %zu", i);
    }
    return RELOCK_OK;
}

relock_status relock_config_set_owner(relock_config *cfg, long pid, const char *text)
{
    if (!cfg)
        return RELOCK_EINVAL;
    relock__err_clear(&cfg->err);
    relock_status st = owner_check(&cfg->err, pid, text);
    if (st != RELOCK_OK)
        return st;
    cfg->s.owner_pid = pid;
    snprintf(cfg->s.owner_text, sizeof cfg->s.owner_text, "%s", text);
    return RELOCK_OK;
}

/* The record of l, written while the lock key holds value (l's, or its
 * keeper's newer one): the owner-record machine (ownrec.h) on the
 * blocking driver.  Only while the lock is ours: a handle whose lock
 * passed to another holder (a paused process, a release that raced a new
 * holder) must not overwrite that holder's record. */
static void owner_note(relock_lock *l, const char *value)
{
    relock_client *c = l->c;
    if (!c->s.owner_info || c->q)
        return;
    relock__err saved = c->err;
    if (relock__drive_ready(c, l->key) == RELOCK_OK) {
        char info[RELOCK__OWNER_INFO_MAX] = "";
        relock__owner_info(l, info, sizeof info);
        relock__owner_m m;
        if (relock__owner_init(&m, l, value, 1, info))
            relock__drive(l, relock__owner_step, &m);
    }
    relock__err_copy(&c->err, &saved);
}

relock_status relock_lock_set_owner(relock_lock *l, long pid, const char *text)
{
    if (!l)
        return RELOCK_EINVAL;
    relock_client *c = l->c;
    relock__err_clear(&c->err);
    relock_status st = owner_check(&c->err, pid, text);
    if (st != RELOCK_OK)
        return st;
    if (l->lost)
        return RELOCK__FAIL(&c->err, RELOCK_LOST, "owner %s: the lock was already lost",
                            l->name);
    if (l->al)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL,
                            "owner %s: a lock of the asynchronous client, whose connection "
                            "this call cannot use; set the owner in its configuration "
                            "(relock_config_set_owner)",
                            l->name);
    char *dup = NULL;
    if (text[0] && !(dup = strdup(text)))
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "owner %s: out of memory", l->name);
    /* The value the record is conditional on: a kept lock's last renewal
     * may have written a newer one than the handle shows. */
    char value[RELOCK__VALUE_MAX];
    memcpy(value, l->value, sizeof value);
    if (l->keeper) {
        st = l->keep_ops->set_owner(l, pid, text, value);
        if (st != RELOCK_OK) {
            free(dup);
            return RELOCK__FAIL(&c->err, st, "owner %s: %s", l->name,
                                st == RELOCK_LOST ? "the lock was lost while kept"
                                                  : "out of memory");
        }
    }
    free(l->owner_text);
    l->owner_text = dup;
    l->owner_pid = pid;
    owner_note(l, value);
    if (l->keeper)
        l->keep_ops->owner_done(l);
    return RELOCK_OK;
}
