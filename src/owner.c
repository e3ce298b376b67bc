/*
 * Owner metadata (owner_info = true): beside each lock, the holder's host,
 * pid and start time, with the lease as its TTL, so that an operator
 * looking at a stuck lock (`relock inspect`) can tell a dead holder from a
 * slow one.  It is written after the lock is won and on every extension,
 * and deleted after a release; it only informs, so its failures never
 * change a call's outcome.  Off by default: it costs a round trip.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

void relock__owner_note(relock_lock *l, int held)
{
    relock_client *c = l->c;
    /* A quorum's metadata would be one server's view: not written. */
    if (!c->s.owner_info || c->q)
        return;
    char key[RELOCK__KEY_MAX];
    if (relock__owner_key(l->key, key, sizeof key) != 0)
        return;
    relock__err saved = c->err;
    redisReply *r;
    if (!held) {
        r = relock__commandf(c, NULL, "DEL %s", key);
    } else {
        char host[64] = "?", started[32] = "?", info[160];
        gethostname(host, sizeof host);
        host[sizeof host - 1] = '\0';
        time_t now = time(NULL);
        struct tm tm;
        if (gmtime_r(&now, &tm))
            strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &tm);
        snprintf(info, sizeof info, "host=%s pid=%ld at=%s", host, (long)getpid(), started);
        /* Before 2.6 there is no PSETEX: whole seconds, rounded up. */
        if (c->conn.caps & RELOCK_CAP_PEXPIRE)
            r = relock__commandf(c, NULL, "PSETEX %s %ld %s", key, l->ttl_ms, info);
        else
            r = relock__commandf(c, NULL, "SETEX %s %ld %s", key, (l->ttl_ms + 999) / 1000, info);
    }
    if (r)
        freeReplyObject(r);
    c->err = saved;
    c->err.pub.message = c->err.msg;
    c->err.pub.server = c->err.server;
}
