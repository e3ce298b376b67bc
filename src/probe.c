/*
 * The server probe (DESIGN §2): learn the version once per connection and
 * derive the capability set, so no command is ever sent to a server that
 * lacks it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static unsigned caps_for(int major, int minor, int patch)
{
    long v = (long)major * 10000 + minor * 100 + patch;
    unsigned caps = 0;
    if (v >= 20200)
        caps |= RELOCK_CAP_WATCH;
    if (v >= 20600)
        caps |= RELOCK_CAP_EVAL | RELOCK_CAP_PEXPIRE | RELOCK_CAP_TIME;
    if (v >= 20612)
        caps |= RELOCK_CAP_SET_NX_PX;
    if (v >= 20800)
        caps |= RELOCK_CAP_SCAN;
    if (v >= 50000)
        caps |= RELOCK_CAP_SCRIPT_TIME_WRITE;
    return caps;
}

static void set_version(relock__conn *conn, int major, int minor, int patch)
{
    conn->major = major;
    conn->minor = minor;
    conn->patch = patch;
    snprintf(conn->version, sizeof conn->version, "%d.%d.%d", major, minor, patch);
    conn->caps = caps_for(major, minor, patch);
}

/* Reads "redis_version:X.Y.Z" from an INFO text; 0 on success. */
static int parse_info(const char *text, int *major, int *minor, int *patch)
{
    const char *p = text;
    for (int lines = 0; p && *p && lines < 10000; lines++) {
        if (strncmp(p, "redis_version:", 14) == 0) {
            if (sscanf(p + 14, "%d.%d.%d", major, minor, patch) == 3)
                return 0;
            return -1;
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return -1;
}

/*
 * A refusal for want of a password (NOAUTH) or of an ACL permission
 * (NOPERM) says nothing about the server's version: taken for "unknown
 * command", it would make a 7.x server look like 2.0.  It is a
 * configuration error.
 */
static int refused_by_acl(relock_client *c, const char *cmd, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ERROR ||
        (strncmp(r->str, "NOAUTH", 6) != 0 && strncmp(r->str, "NOPERM", 6) != 0))
        return 0;
    const relock__server *srv = c->conn.srv;
    RELOCK__FAIL_SRV(&c->err, RELOCK_ECONFIG, r->str, "%s on " RELOCK__ADDR_FMT " refused: %s%s", cmd, RELOCK__ADDR(srv), r->str,
                     r->str[2] == 'A' ? " (set a password in the URL or the configuration)"
                                      : " (the user needs permission for it)");
    return 1;
}

/* Without INFO (renamed by the operator, say): tell the version apart by
 * which commands are refused.  Only harmless commands are tried. */
static relock_status probe_by_commands(relock_client *c)
{
    redisReply *r = relock__commandf(c, NULL, "TIME");
    if (!r)
        return c->err.pub.status;
    if (refused_by_acl(c, "TIME", r)) {
        freeReplyObject(r);
        return c->err.pub.status;
    }
    int has_time = r->type == REDIS_REPLY_ARRAY;
    freeReplyObject(r);
    if (has_time) {
        /* SET with options on a key of our own namespace that expires at once. */
        r = relock__commandf(c, NULL, "SET relock:{probe} 1 NX PX 1");
        if (!r)
            return c->err.pub.status;
        int has_set = r->type != REDIS_REPLY_ERROR;
        freeReplyObject(r);
        set_version(&c->conn, 2, 6, has_set ? 12 : 0);
        return RELOCK_OK;
    }
    r = relock__commandf(c, NULL, "UNWATCH");
    if (!r)
        return c->err.pub.status;
    if (refused_by_acl(c, "UNWATCH", r)) {
        freeReplyObject(r);
        return c->err.pub.status;
    }
    int has_watch = r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    set_version(&c->conn, 2, has_watch ? 2 : 0, 0);
    return RELOCK_OK;
}

relock_status relock__probe(relock_client *c)
{
    const relock__server *srv = c->conn.srv;
    /* Plain INFO: 2.0 knows no sections. */
    redisReply *r = redisCommand(c->conn.ctx, "INFO");
    if (!r)
        return RELOCK__FAIL(&c->err, RELOCK_EIO, "INFO on " RELOCK__ADDR_FMT ": %s", RELOCK__ADDR(srv),
                            c->conn.ctx->errstr);
    int major, minor, patch;
    relock_status st = RELOCK_OK;
    if (r->type == REDIS_REPLY_STRING && parse_info(r->str, &major, &minor, &patch) == 0)
        set_version(&c->conn, major, minor, patch);
    else if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) == 0)
        st = refused_by_acl(c, "INFO", r) ? c->err.pub.status : RELOCK_EPROTO;
    else if (r->type == REDIS_REPLY_ERROR)
        st = probe_by_commands(c);
    else
        st = RELOCK__BAD_REPLY(c, "INFO (no redis_version line)", r);
    freeReplyObject(r);
    return st;
}

relock_status relock_client_server(relock_client *c, relock_server_info *info)
{
    if (!c)
        return RELOCK_EINVAL;
    relock__err_clear(&c->err);
    if (!info)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "server info: no structure to fill");
    relock_status st = relock__conn_ensure(c);
    if (st != RELOCK_OK)
        return st;
    info->version = c->conn.version;
    info->major = c->conn.major;
    info->minor = c->conn.minor;
    info->patch = c->conn.patch;
    info->caps = c->conn.caps;
    info->host = c->conn.srv->host;
    info->port = c->conn.srv->port;
    return RELOCK_OK;
}

const char *relock_cap_name(unsigned bit)
{
    switch (bit) {
    case RELOCK_CAP_WATCH:
        return "watch";
    case RELOCK_CAP_EVAL:
        return "eval";
    case RELOCK_CAP_PEXPIRE:
        return "pexpire";
    case RELOCK_CAP_TIME:
        return "time";
    case RELOCK_CAP_SET_NX_PX:
        return "set-nx-px";
    case RELOCK_CAP_SCAN:
        return "scan";
    case RELOCK_CAP_SCRIPT_TIME_WRITE:
        return "script-time-write";
    }
    return NULL;
}
