/*
 * How upgraded clients tell operators that legacy writers are still
 * about: a marker key holding the time (ms since the epoch) a value only a
 * legacy client can have written was last met, which `relock scan` reads.
 * A snapshot of the keys cannot prove that the last legacy client is gone;
 * a long enough silence in this marker can, once upgraded clients have
 * watched for that long: a second marker, the watch marker, holds when the
 * first of them began.  Modern attempts (a legacy
 * leftover without TTL) and the timestamp modes write it; the blocking
 * driver writes it after a machine that set note_legacy in its head.
 */
#include <stdio.h>

#include "routing.h"

/* VERB key <now, ms since the epoch>.  A marker informs, it never
 * decides: its failure is not the call's, whose error stays as it was. */
static void write_now(relock_client *c, const char *verb, const char *key)
{
    relock__err saved = c->err;
    char now[24];
    snprintf(now, sizeof now, "%lld", relock__wall_ms());
    const char *argv[3] = {verb, key, now};
    redisReply *r = relock__command(c, NULL, 3, argv, NULL);
    if (r)
        freeReplyObject(r);
    c->err = saved;
    c->err.pub.message = c->err.msg;
    c->err.pub.server = c->err.server;
}

void relock__note_watching(relock_client *c)
{
    if (c->watch_noted)
        return;
    c->watch_noted = 1;
    char key[RELOCK__KEY_MAX];
    if (relock__watch_key(c->s.key_prefix, key, sizeof key) != 0)
        return;
    /* SETNX: the first watcher's time stays, so that scan counts the
     * window from the moment watching began. */
    write_now(c, "SETNX", key);
}

/* Writing on every meeting would add a round trip to every contended
 * attempt; once a second is plenty for a window measured in days. */
#define NOTE_INTERVAL_MS 1000

void relock__note_legacy_writer(relock_client *c)
{
    uint64_t now = relock__mono_ms();
    if (c->legacy_noted_at && now - c->legacy_noted_at < NOTE_INTERVAL_MS)
        return;
    c->legacy_noted_at = now;
    char key[RELOCK__KEY_MAX];
    if (relock__marker_key(c->s.key_prefix, key, sizeof key) != 0)
        return;
    write_now(c, "SET", key);
}
