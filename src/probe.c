/*
 * The server probe (DESIGN §2): learn the version once per connection and
 * derive the capability set, so no command is ever sent to a server that
 * lacks it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "caps.h"
#include "probe.h"
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
    if (v >= 30000)
        caps |= RELOCK_CAP_WAIT;
    if (v >= 50000)
        caps |= RELOCK_CAP_SCRIPT_TIME_WRITE;
    if (v >= 70200)
        caps |= RELOCK_CAP_WAITAOF;
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
static int refused_by_acl(relock_client *c, const relock__conn *conn, const char *cmd,
                          const redisReply *r)
{
    if (r->type != REDIS_REPLY_ERROR ||
        (strncmp(r->str, "NOAUTH", 6) != 0 && strncmp(r->str, "NOPERM", 6) != 0))
        return 0;
    const relock__server *srv = conn->srv;
    RELOCK__FAIL_SRV(&c->err, RELOCK_ECONFIG, r->str, "%s on " RELOCK__ADDR_FMT " refused: %s%s",
                     cmd, RELOCK__ADDR(srv), r->str,
                     r->str[2] == 'A' ? " (set a password in the URL or the configuration)"
                                      : " (the user needs permission for it)");
    return 1;
}

/* Whether a COMMAND DOCS reply (or part of it) holds the string word,
 * case-insensitively, at any depth below. */
static int mentions(const redisReply *r, const char *word, int depth)
{
    if (depth > 8)
        return 0;
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)
        return strcasecmp(r->str, word) == 0;
    if (r->type != REDIS_REPLY_ARRAY)
        return 0;
    for (size_t i = 0; i < r->elements; i++)
        if (mentions(r->element[i], word, depth + 1))
            return 1;
    return 0;
}

/* What a COMMAND DOCS reply says about Lua and the native commands. */
static void apply_docs(relock__conn *conn, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2)
        return;
    int eval = 0;
    /* name, docs, name, docs, ... */
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *name = r->element[i];
        if (name->type != REDIS_REPLY_STRING && name->type != REDIS_REPLY_STATUS)
            continue;
        if (strcasecmp(name->str, "eval") == 0)
            eval = 1;
        else if (strcasecmp(name->str, "delifeq") == 0)
            conn->caps |= RELOCK__CAP_DELIFEQ;
        else if (strcasecmp(name->str, "delex") == 0)
            conn->caps |= RELOCK__CAP_DELEX;
        else if (strcasecmp(name->str, "set") == 0 && mentions(r->element[i + 1], "IFEQ", 0) &&
                 (conn->caps & RELOCK_CAP_SET_NX_PX))
            conn->caps |= RELOCK__CAP_SET_IFEQ;
    }
    if (!eval)
        conn->caps &= ~(unsigned)(RELOCK_CAP_EVAL | RELOCK_CAP_SCRIPT_TIME_WRITE);
}

enum { P_START = 0, P_INFO, P_TIME, P_SET, P_UNWATCH, P_DOCS };

static relock__step probe_send(relock__probe_m *m, relock__batch *out, int pc, int argc,
                               const char *const *argv)
{
    relock__batch_reset(out);
    relock__batch_add(out, argc, argv);
    m->pc = pc;
    return RELOCK__STEP_SEND;
}

static relock__step probe_end(relock__probe_m *m, relock_status st)
{
    m->st = st;
    return RELOCK__STEP_DONE;
}

/*
 * What the version cannot tell (DESIGN §2): whether Lua is there at all
 * (Valkey 9.1 may run without it: EVAL is then an unknown command), and the
 * native compare-and-set commands.  One COMMAND DOCS (Redis 7.0 and later,
 * Valkey) answers both: it leaves out commands the server does not have,
 * and SET's documented arguments name its IFEQ condition where it exists.
 * A read-only command without keys: harmless on a replica and in a
 * Cluster.  A refusal (COMMAND DOCS before 7.0, an ACL without COMMAND)
 * leaves what the version said: Lua present, no native commands, the path
 * of every earlier server.  Servers before 2.8.13 have no COMMAND at all
 * and are not asked.
 */
static relock__step probe_natives(relock__probe_m *m, relock__conn *conn, relock__batch *out)
{
    long v = (long)conn->major * 10000 + conn->minor * 100 + conn->patch;
    if (v < 20813)
        return probe_end(m, RELOCK_OK);
    static const char *const docs[] = {"COMMAND", "DOCS", "SET", "EVAL", "DELIFEQ", "DELEX"};
    return probe_send(m, out, P_DOCS, 6, docs);
}

relock__step relock__probe_step(relock__probe_m *m, relock_client *c, relock__conn *conn,
                                const relock__feed *in, relock__batch *out)
{
    const relock__server *srv = conn->srv;
    const redisReply *r = in->nreply > 0 ? in->reply[0] : NULL;
    if (m->pc != P_START && !r) {
        if (m->pc == P_INFO)
            return probe_end(m, RELOCK__FAIL(&c->err, RELOCK_EIO,
                                             "INFO on " RELOCK__ADDR_FMT ": %s",
                                             RELOCK__ADDR(srv),
                                             in->fault_text ? in->fault_text : "no reply"));
        return probe_end(m, relock__fault_fail(c, in));
    }
    switch (m->pc) {
    case P_START: {
        /* Plain INFO: 2.0 knows no sections. */
        static const char *const info[] = {"INFO"};
        return probe_send(m, out, P_INFO, 1, info);
    }
    case P_INFO: {
        int major, minor, patch;
        if (r->type == REDIS_REPLY_STRING && parse_info(r->str, &major, &minor, &patch) == 0) {
            set_version(conn, major, minor, patch);
            return probe_natives(m, conn, out);
        }
        if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) == 0)
            return probe_end(m, refused_by_acl(c, conn, "INFO", r) ? c->err.pub.status
                                                                   : RELOCK_EPROTO);
        if (r->type != REDIS_REPLY_ERROR)
            return probe_end(m, RELOCK__BAD_REPLY(c, "INFO (no redis_version line)", r));
        /* Without INFO (renamed by the operator, say): tell the version
         * apart by which commands are refused.  Only harmless commands
         * are tried. */
        static const char *const time[] = {"TIME"};
        return probe_send(m, out, P_TIME, 1, time);
    }
    case P_TIME:
        if (refused_by_acl(c, conn, "TIME", r))
            return probe_end(m, c->err.pub.status);
        if (r->type == REDIS_REPLY_ARRAY) {
            /* SET with options on a key of our own namespace that expires at once. */
            static const char *const set[] = {"SET", "relock:{probe}", "1", "NX", "PX", "1"};
            return probe_send(m, out, P_SET, 6, set);
        } else {
            static const char *const unwatch[] = {"UNWATCH"};
            return probe_send(m, out, P_UNWATCH, 1, unwatch);
        }
    case P_SET:
        set_version(conn, 2, 6, r->type != REDIS_REPLY_ERROR ? 12 : 0);
        return probe_natives(m, conn, out);
    case P_UNWATCH:
        if (refused_by_acl(c, conn, "UNWATCH", r))
            return probe_end(m, c->err.pub.status);
        set_version(conn, 2, r->type == REDIS_REPLY_STATUS ? 2 : 0, 0);
        return probe_natives(m, conn, out);
    case P_DOCS:
        apply_docs(conn, r);
        return probe_end(m, RELOCK_OK);
    }
    return probe_end(m, RELOCK__FAIL(&c->err, RELOCK_EPROTO, "probe: internal error: step %d",
                                     m->pc));
}

/* The blocking probe: INFO straight on the connection (it is the first
 * command of a connection), the rest through relock__command. */
relock_status relock__probe(relock_client *c)
{
    relock__probe_m m;
    memset(&m, 0, sizeof m);
    relock__batch b;
    relock__batch_reset(&b);
    redisReply *rep[1] = {NULL};
    relock__feed in;
    memset(&in, 0, sizeof in);
    in.reply = rep;
    for (int steps = 0; steps < 8; steps++) {
        relock__step s = relock__probe_step(&m, c, &c->conn, &in, &b);
        if (rep[0])
            freeReplyObject(rep[0]);
        rep[0] = NULL;
        if (s == RELOCK__STEP_DONE)
            return m.st;
        const relock__cmd *k = &b.cmd[0];
        in.nreply = 0;
        in.fault = RELOCK__FAULT_NONE;
        in.fault_text = NULL;
        if (m.pc == P_INFO) {
            rep[0] = redisCommandArgv(c->conn.ctx, k->argc, (const char **)k->argv, k->len);
            if (!rep[0])
                in.fault_text = c->conn.ctx->errstr;
        } else {
            rep[0] = relock__command(c, NULL, k->argc, (const char **)k->argv, k->len);
        }
        if (rep[0]) {
            in.nreply = 1;
        } else {
            in.fault = RELOCK__FAULT_LOST;
            in.fault_status = c->err.pub.status != RELOCK_OK ? c->err.pub.status : RELOCK_EIO;
        }
    }
    return RELOCK__FAIL(&c->err, RELOCK_EPROTO, "probe: internal error: did not end");
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
    case RELOCK__CAP_SET_IFEQ:
        return "set-ifeq";
    case RELOCK__CAP_DELIFEQ:
        return "delifeq";
    case RELOCK__CAP_DELEX:
        return "delex";
    case RELOCK_CAP_WAIT:
        return "wait";
    case RELOCK_CAP_WAITAOF:
        return "waitaof";
    }
    return NULL;
}
