/*
 * Owner metadata (owner_info = true): the holder's host, pid, the time the
 * lock was won and an optional text beside each lock, with the lease as
 * its TTL, so that an operator (`relock inspect`) can tell a dead holder
 * from a slow one.  Off by default in the library: it costs a round trip
 * per acquire and extend (the CLI turns it on, decision 88).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "engine/engine.h"
#include "ownrec.h"
#include "routing.h"

relock_status relock__owner_check(relock__err *e, long pid, const char *text)
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
    relock_status st = relock__owner_check(&cfg->err, pid, text);
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
    relock_status st = relock__owner_check(&c->err, pid, text);
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
