/*
 * Owner metadata (owner_info = true): beside each lock, the holder's host,
 * pid, the time the lock was won and an optional text, with the lease as
 * its TTL, so that an operator looking at a stuck lock (`relock inspect`)
 * can tell a dead holder from a slow one.  It is written after the lock is
 * won and on every extension, and deleted after a release; it only
 * informs, so its failures never change a call's outcome.  Off by default
 * in the library: it costs a round trip per acquire and extend (the CLI
 * turns it on, decision 88).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
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

static void owner_note(relock_lock *l, const char *value, int held);

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
    char *dup = NULL;
    if (text[0] && !(dup = strdup(text)))
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "owner %s: out of memory", l->name);
    /* The value the record is conditional on: a kept lock's last renewal
     * may have written a newer one than the handle shows (legacy, bridge). */
    char value[RELOCK__VALUE_MAX];
    memcpy(value, l->value, sizeof value);
    if (l->keeper) {
        st = l->keep_ops->set_owner(l, pid, text, value);
        if (st != RELOCK_OK) {
            free(dup);
            return st == RELOCK_LOST ? RELOCK__FAIL(&c->err, st,
                                                    "owner %s: the lock was lost while kept",
                                                    l->name)
                                     : RELOCK__FAIL(&c->err, st, "owner %s: out of memory",
                                                    l->name);
        }
    }
    free(l->owner_text);
    l->owner_text = dup;
    l->owner_pid = pid;
    owner_note(l, value, 1);
    if (l->keeper)
        l->keep_ops->owner_done(l);
    return RELOCK_OK;
}

/* Whether the fence counter is compared too: in the timestamp modes, whose
 * values can repeat from one holder to the next (decision 87), on servers
 * whose counter counts acquisitions only (not 2.0's), for a lock whose
 * fence is known. */
static int check_fence(const relock_lock *l)
{
    const relock_client *c = l->c;
    return c->mode != RELOCK_MODE_MODERN && (c->conn.caps & RELOCK_CAP_WATCH) && l->fence > 0;
}

/* The write (or delete: info NULL) of the record itself, in ms or, before
 * 2.6, in whole seconds rounded up.  The record goes as one argument (%b):
 * the text holds spaces. */
static redisReply *record_cmd(relock_client *c, const char *key, const char *info, long ms)
{
    if (!info)
        return relock__commandf(c, NULL, "DEL %s", key);
    if (c->conn.caps & RELOCK_CAP_PEXPIRE)
        return relock__commandf(c, NULL, "PSETEX %s %ld %b", key, ms, info, strlen(info));
    return relock__commandf(c, NULL, "SETEX %s %ld %b", key, (ms + 999) / 1000, info,
                            strlen(info));
}

/* Whether a GET reply holds exactly want. */
static int reply_is(const redisReply *r, const char *want)
{
    return r && r->type == REDIS_REPLY_STRING && strcmp(r->str, want) == 0;
}

/*
 * Without Lua, with WATCH (Redis 2.2 and 2.4, a server that runs without
 * Lua): WATCH the lock key (and the fence), read them, and only while they
 * are ours MULTI, the write, EXEC; a write by anyone in between makes EXEC
 * fail and nothing is written.  From WATCH to EXEC on one connection; on
 * any failure the connection is closed, which drops the WATCH or MULTI.
 */
static void owner_watched(relock_lock *l, const char *value, const char *key, const char *info,
                          long ms)
{
    relock_client *c = l->c;
    if (relock__txn_begin(c) != RELOCK_OK)
        return;
    int fence = check_fence(l);
    char f[24];
    snprintf(f, sizeof f, "%lld", l->fence);
    int ok = 0;
    redisReply *r = fence ? relock__commandf(c, NULL, "WATCH %s %s", l->key, l->fence_key)
                          : relock__commandf(c, NULL, "WATCH %s", l->key);
    if (r && r->type == REDIS_REPLY_STATUS) {
        freeReplyObject(r);
        r = relock__commandf(c, NULL, "GET %s", l->key);
        int ours = reply_is(r, value);
        if (r && ours && fence) {
            freeReplyObject(r);
            r = relock__commandf(c, NULL, "GET %s", l->fence_key);
            ours = reply_is(r, f);
        }
        if (r && !ours) {
            freeReplyObject(r);
            r = relock__commandf(c, NULL, "UNWATCH");
            ok = r && r->type == REDIS_REPLY_STATUS;
        } else if (r) {
            freeReplyObject(r);
            r = relock__commandf(c, NULL, "MULTI");
            if (r && r->type == REDIS_REPLY_STATUS) {
                freeReplyObject(r);
                r = record_cmd(c, key, info, ms);
            }
            if (r && r->type == REDIS_REPLY_STATUS) {
                freeReplyObject(r);
                r = relock__commandf(c, NULL, "EXEC");
                /* nil: the lock was written meanwhile, the record not. */
                ok = r && (r->type == REDIS_REPLY_ARRAY || r->type == REDIS_REPLY_NIL);
            }
        }
    }
    if (r)
        freeReplyObject(r);
    relock__txn_end(c);
    if (!ok && c->conn.ctx)
        relock__conn_close(&c->conn);
}

void relock__owner_note(relock_lock *l, int held)
{
    owner_note(l, l->value, held);
}

/* The record of l, written (held) or deleted, while the lock key holds
 * value (l's, or its keeper's newer one). */
static void owner_note(relock_lock *l, const char *value, int held)
{
    relock_client *c = l->c;
    /* A quorum's metadata would be one server's view: not written. */
    if (!c->s.owner_info || c->q)
        return;
    char key[RELOCK__KEY_MAX];
    if (relock__owner_key(l->key, key, sizeof key) != 0)
        return;
    relock__err saved = c->err;
    /* The server's capabilities choose the way below: connected first. */
    if (relock__conn_ready(c) != RELOCK_OK) {
        relock__err_copy(&c->err, &saved);
        return;
    }
    char info[512]; /* host, pid, time and RELOCK_OWNER_MAX bytes of text */
    if (held) {
        char host[65] = "?", started[32] = "?";
        if (gethostname(host, sizeof host - 1) != 0)
            snprintf(host, sizeof host, "?");
        host[sizeof host - 1] = '\0';
        time_t at = l->owner_since ? (time_t)l->owner_since : time(NULL);
        struct tm tm;
        if (gmtime_r(&at, &tm))
            strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &tm);
        long pid = l->owner_pid ? l->owner_pid : (long)getpid();
        const char *text = l->owner_text ? l->owner_text : "";
        snprintf(info, sizeof info, "host=%s pid=%ld at=%s%s%s", host, pid, started,
                 text[0] ? " " : "", text);
    }
    /* The record lives as long as the lock key, lock delay included
     * (modern mode only), so that inspect names who keeps a lock during
     * its delay. */
    long long ms = l->ttl_ms + c->s.lock_delay_ms;
    /* Only while the lock is ours: a handle whose lock passed to another
     * holder (a paused process, a release that raced a new holder) must
     * not overwrite or delete that holder's record.  Atomically where the
     * server can: a script, else WATCH; on 2.0 a look first. */
    if (c->conn.caps & RELOCK_CAP_EVAL) {
        char f[24], px[24];
        snprintf(f, sizeof f, "%lld", check_fence(l) ? l->fence : 0LL);
        snprintf(px, sizeof px, "%lld", ms);
        const char *args[] = {l->key, l->fence_key, key, value, f, held ? info : "", px};
        redisReply *r = relock__eval(c, NULL, RELOCK__SCRIPT_OWNER_IF_HELD, 3, 7, args);
        if (r)
            freeReplyObject(r);
    } else if (c->conn.caps & RELOCK_CAP_WATCH) {
        owner_watched(l, value, key, held ? info : NULL, ms);
    } else {
        /* 2.0: no WATCH, no script.  The look narrows the window to one
         * round trip; the record informs, it decides nothing. */
        redisReply *r = relock__commandf(c, NULL, "GET %s", l->key);
        int ours = reply_is(r, value);
        if (r)
            freeReplyObject(r);
        if (ours && (r = record_cmd(c, key, held ? info : NULL, ms)) != NULL)
            freeReplyObject(r);
    }
    relock__err_copy(&c->err, &saved);
}
