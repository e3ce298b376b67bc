/*
 * The operator's calls: break, inspect, the migration audit's scan and
 * what the probe learnt of the server.  Each makes the connection ready
 * first (its machine chooses its way by the server's capabilities) and
 * runs the machine (src/algo/) through the blocking driver.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "algo.h"
#include "break.h"
#include "caps.h"
#include "core/pollloop.h"
#include "inspect.h"
#include "scan.h"

/* The opaque relock_server_info of relock.h: a copy, so that it outlives
 * the client and a reconnect. */
struct relock_server_info {
    char version[32];
    int major, minor, patch;
    unsigned caps;
    int port;
    char host[]; /* NUL-terminated, at its length */
};

relock_status relock_break(relock_client *c, const char *name, const char *if_value)
{
    return relock_break_fenced(c, name, if_value, 0);
}

relock_status relock_break_fenced(relock_client *c, const char *name, const char *if_value,
                                  long long if_fence)
{
    if (!c)
        return RELOCK_EINVAL;
    relock__err_clear(&c->err);
    relock_status st = relock__check_name(c, name);
    if (st != RELOCK_OK)
        return st;
    if (if_value && (!*if_value || strlen(if_value) > RELOCK__BREAK_VALUE_MAX))
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "break %s: the value is empty or longer "
                            "than %d bytes", name, RELOCK__BREAK_VALUE_MAX);
    if (if_fence < 0 || (if_fence > 0 && !if_value))
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL,
                            "break %s: a fence to compare needs the value too, and is above 0",
                            name);
    if (c->s.nservers > 1)
        return RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                            "break %s: not with several servers; break it on each server "
                            "with its own URL (quorum values always expire with their TTL)",
                            name);
    char key[RELOCK__PREFIX_MAX + RELOCK__NAME_MAX + 1];
    char fence_key[RELOCK__KEY_MAX], breaks_key[RELOCK__KEY_MAX];
    char chan[RELOCK__KEY_MAX], okey[RELOCK__KEY_MAX];
    snprintf(key, sizeof key, "%s%s", c->s.key_prefix, name);
    if (relock__fence_key(key, fence_key, sizeof fence_key) != 0 ||
        relock__breaks_key(key, breaks_key, sizeof breaks_key) != 0)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "lock name: too long");
    if (relock__owner_key(key, okey, sizeof okey) != 0)
        okey[0] = '\0';
    /* The machine and relock__notify_channel() read the key and the
     * client from a handle. */
    relock_lock tmp = {.c = c, .name = (char *)name, .key = key, .fence_key = fence_key};
    relock__notify_channel(&tmp, chan, sizeof chan);
    st = relock__drive_ready(c, key);
    if (st == RELOCK_OK) {
        relock__break_m m;
        relock__break_init(&m, if_value, if_fence, breaks_key, chan, okey);
        st = relock__drive(&tmp, relock__break_step, &m);
        relock__break_free(&m);
    }
    return relock__foreign_type(c, "break", name, key, st);
}

/* The waiters of a lock are the subscribers of its release channel
 * (src/core/notice.c), counted by PUBSUB NUMSUB (2.8): on the node the key lives on,
 * which is where releases are published.  -1 when the server cannot say
 * or the count failed; a look, so a failure is not the call's. */
static long long count_waiters(relock_client *c, const char *key)
{
    if (!(c->conn.caps & RELOCK_CAP_SCAN))
        return -1;
    char chan[RELOCK__KEY_MAX];
    int n = snprintf(chan, sizeof chan, "%s" RELOCK__NOTIFY_SUFFIX, key);
    if (n < 0 || (size_t)n >= sizeof chan)
        return -1;
    relock__err saved = c->err;
    const char *argv[] = {"PUBSUB", "NUMSUB", chan};
    redisReply *r = relock__command(c, NULL, 3, argv, NULL);
    long long w = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_INTEGER)
        w = r->element[1]->integer;
    freeReplyObject(r);
    c->err = saved;
    return w;
}

static relock_status inspect(relock_client *c, const char *name, relock_inspect_info *info)
{
    char key[RELOCK__PREFIX_MAX + RELOCK__NAME_MAX + 1];
    char fkey[RELOCK__KEY_MAX];
    char okey[RELOCK__KEY_MAX];
    snprintf(key, sizeof key, "%s%s", c->s.key_prefix, name);
    relock__fence_key(key, fkey, sizeof fkey);
    if (relock__owner_key(key, okey, sizeof okey) != 0)
        okey[0] = '\0';
    relock_status st = relock__drive_ready(c, key);
    if (st != RELOCK_OK)
        return st;
    relock_lock tmp = {.c = c, .name = (char *)name, .key = key, .fence_key = fkey};
    relock__inspect_m m;
    relock__inspect_init(&m, okey, info);
    st = relock__drive(&tmp, relock__inspect_step, &m);
    st = relock__foreign_type(c, "lock", name, key, st);
    if (st != RELOCK_OK)
        return st;
    if (!(info->key = strdup(key)))
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "inspect: out of memory");
    info->waiters = count_waiters(c, key);
    return RELOCK_OK;
}

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
    info->waiters = -1;
    relock_status st = inspect(c, name, info);
    if (st != RELOCK_OK)
        relock_inspect_info_free(info);
    else
        *out = info;
    return st;
}

relock_status relock_client_server(relock_client *c, relock_server_info **out)
{
    if (out)
        *out = NULL;
    if (!c)
        return RELOCK_EINVAL;
    relock__err_clear(&c->err);
    if (!out)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "server info: nowhere to put the result");
    relock_status st = relock__drive_ready(c, NULL);
    if (st != RELOCK_OK)
        return st;
    const relock__server *srv = relock__poll_server(c, NULL);
    size_t hlen = strlen(srv->host);
    relock_server_info *info = malloc(sizeof *info + hlen + 1);
    if (!info)
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "server info: out of memory");
    *info = (relock_server_info){.major = c->conn.major, .minor = c->conn.minor,
                                 .patch = c->conn.patch, .caps = c->conn.caps,
                                 .port = srv->port};
    snprintf(info->version, sizeof info->version, "%s", c->conn.version);
    memcpy(info->host, srv->host, hlen + 1);
    *out = info;
    return RELOCK_OK;
}

void relock_server_info_free(relock_server_info *info)
{
    free(info);
}

/* The getters of relock.h: a NULL info answers "" or 0. */
#define INFO_GETTER(type, field, none)                                                         \
    type relock_server_info_##field(const relock_server_info *info)                           \
    {                                                                                          \
        return info ? info->field : none;                                                      \
    }
INFO_GETTER(const char *, version, "")
INFO_GETTER(int, major, 0)
INFO_GETTER(int, minor, 0)
INFO_GETTER(int, patch, 0)
INFO_GETTER(unsigned, caps, 0)
INFO_GETTER(const char *, host, "")
INFO_GETTER(int, port, 0)

/* How modern mode works on the server connected now; the choice of
 * algorithm itself is the core's (src/core/mode.c). */
relock_status relock_client_paths(relock_client *c, relock_paths **out)
{
    if (out)
        *out = NULL;
    if (!c)
        return RELOCK_EINVAL;
    relock__err_clear(&c->err);
    if (!out)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "paths: nowhere to put the result");
    if (c->algo != &relock__algo_modern)
        return RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                            "paths: only for modern mode on one server (this client: %s)",
                            c->q      ? "a quorum, which uses scripts on every server"
                            : c->algo ? relock_mode_name(c->mode)
                                      : "no mode selected");
    /* The capabilities of the server connected now: after a failover it
     * may be another one than at connect. */
    relock_status st = relock__drive_ready(c, NULL);
    if (st != RELOCK_OK)
        return st;
    relock_paths *p = calloc(1, sizeof *p);
    if (!p)
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "paths: out of memory");
    relock__modern_paths(c, p);
    *out = p;
    return RELOCK_OK;
}

void relock_paths_free(relock_paths *p)
{
    free(p);
}

const char *relock_paths_get(const relock_paths *p, relock_path which)
{
    if (!p || (unsigned)which >= RELOCK__NPATHS || !p->path[which])
        return "";
    return p->path[which];
}

/* relock_scan_keys(): the core's scan (src/core/scan.c) on the poll loop,
 * over every master of a Redis Cluster in turn (each holds its slots' keys
 * only); complete only when every master's walk was. */
const char *relock_scan_node(const relock_client *c)
{
    return c ? c->scan_node : "";
}

relock_status relock_scan(relock_client *c, const char *match, relock_scan_result **out)
{
    return relock_scan_keys(c, match, NULL, NULL, out);
}

relock_status relock_scan_keys(relock_client *c, const char *match, relock_scan_key_fn fn,
                               void *arg, relock_scan_result **out)
{
    if (out)
        *out = NULL;
    if (!c)
        return RELOCK_EINVAL;
    relock__err_clear(&c->err);
    if (!out)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "scan: no place for the result");
    /* (A quorum client's walks the first server.) */
    return relock__poll_scan(c, match, fn, arg, out);
}
