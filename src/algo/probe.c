/*
 * The server probe (design.md §3.1): learn the version once per connection and
 * derive the capability set, so no command is ever sent to a server that
 * lacks it.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "caps.h"
#include "probe.h"

/* The version (major * 10000 + minor * 100 + patch) from which each
 * capability is there. */
static const struct {
    long since;
    unsigned caps;
} caps_since[] = {
    {20200, RELOCK_CAP_WATCH},
    {20600, RELOCK_CAP_EVAL | RELOCK_CAP_PEXPIRE | RELOCK_CAP_TIME},
    {20612, RELOCK_CAP_SET_NX_PX},
    {20800, RELOCK_CAP_SCAN},
    {30000, RELOCK_CAP_WAIT},
    {50000, RELOCK_CAP_SCRIPT_TIME_WRITE},
    {70200, RELOCK_CAP_WAITAOF},
};

static void set_version(relock__conn *conn, int major, int minor, int patch)
{
    long v = (long)major * 10000 + minor * 100 + patch;
    conn->major = major;
    conn->minor = minor;
    conn->patch = patch;
    snprintf(conn->version, sizeof conn->version, "%d.%d.%d", major, minor, patch);
    conn->caps = 0;
    for (size_t i = 0; i < sizeof caps_since / sizeof caps_since[0]; i++)
        if (v >= caps_since[i].since)
            conn->caps |= caps_since[i].caps;
}

/* Reads "redis_version:X.Y.Z" from an INFO text; 0 on success. */
static int parse_info(const char *text, int *major, int *minor, int *patch)
{
    const char *p = text;
    for (int lines = 0; p && *p && lines < 10000; lines++) {
        if (strncmp(p, "redis_version:", 14) == 0)
            return sscanf(p + 14, "%d.%d.%d", major, minor, patch) == 3 ? 0 : -1;
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return -1;
}

/* A refusal for want of a password (NOAUTH) or permission (NOPERM) is a
 * configuration error: taken for "unknown command", it would make a 7.x
 * server look like 2.0. */
static int refused_by_acl(relock_client *c, const char *cmd, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ERROR ||
        (strncmp(r->str, "NOAUTH", 6) != 0 && strncmp(r->str, "NOPERM", 6) != 0))
        return 0;
    RELOCK__FAIL_SRV(&c->err, RELOCK_ECONFIG, r->str, "%s on " RELOCK__ADDR_FMT " refused: %s%s",
                     cmd, RELOCK__ADDR(c->conn.srv), r->str,
                     r->str[2] == 'A' ? " (set a password in the URL or the configuration)"
                                      : " (the user needs permission for it)");
    return 1;
}

enum probe_pc {
    P_START = 0,
    P_INFO,    /* INFO sent */
    P_TIME,    /* INFO refused: TIME sent */
    P_SET,     /* TIME known: SET NX PX of a key that expires at once sent */
    P_UNWATCH, /* TIME unknown: UNWATCH sent */
    P_DOCS     /* COMMAND DOCS sent */
};

void relock__probe_init(relock__probe_m *m)
{
    *m = (relock__probe_m){.h.hint_ms = -1};
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

/*
 * What the version cannot tell (design.md §3.3): whether Lua is there
 * (Valkey 9.1 may run without it), and the native compare-and-set
 * commands.  One COMMAND DOCS (Redis 7.0, Valkey) answers both: it leaves
 * out commands the server lacks, and SET's arguments name IFEQ where it
 * exists; read-only and keyless, so harmless on a replica and in a
 * Cluster.  A refusal leaves what the version said (Lua, no native
 * commands).  Servers before 2.8.13 have no COMMAND and are not asked.
 */
static relock__step natives(relock__probe_m *m, relock_client *c, relock__batch *out)
{
    if ((long)c->conn.major * 10000 + c->conn.minor * 100 + c->conn.patch < 20813)
        return relock__done(&m->h, RELOCK_OK);
    return relock__send_words(&m->h, out, P_DOCS, 0, 6, "COMMAND", "DOCS", "SET", "EVAL",
                              "DELIFEQ", "DELEX");
}

static void natives_read(relock__conn *conn, const redisReply *r)
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

/* Whether an error reply says the server lacks the command (or, with
 * syntax, the form tried): only that is evidence about the version.  Any
 * other error (-LOADING, -BUSY) fails the probe rather than make a 2.2
 * server look like 2.0. */
static int lacks(const redisReply *r, int syntax)
{
    if (r->type != REDIS_REPLY_ERROR)
        return 0;
    if (strncmp(r->str, "ERR unknown command", 19) == 0)
        return 1;
    return syntax && (strncmp(r->str, "ERR wrong number of arguments", 29) == 0 ||
                      strncmp(r->str, "ERR syntax error", 16) == 0);
}

relock__step relock__probe_step(void *vm, relock_lock *l, const relock__feed *in,
                                relock__batch *out)
{
    relock__probe_m *m = vm;
    relock_client *c = l->c;
    const redisReply *r = in->nreply > 0 ? in->reply[0] : NULL;
    if (m->h.pc == P_START) /* plain INFO: 2.0 knows no sections */
        return relock__send_words(&m->h, out, P_INFO, 0, 1, "INFO");
    if (in->fault)
        return relock__done(&m->h, relock__fault_fail(c, in));
    switch (m->h.pc) {
    case P_INFO: {
        int major, minor, patch;
        if (r->type == REDIS_REPLY_STRING && parse_info(r->str, &major, &minor, &patch) == 0) {
            set_version(&c->conn, major, minor, patch);
            c->conn.cluster = strstr(r->str, "cluster_enabled:1") != NULL;
            return natives(m, c, out);
        }
        if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) == 0)
            return relock__done(&m->h, refused_by_acl(c, "INFO", r) ? c->err.pub.status
                                                                    : RELOCK_EPROTO);
        if (r->type != REDIS_REPLY_ERROR)
            return relock__done(&m->h, RELOCK__BAD_REPLY(c, "INFO (no redis_version line)", r));
        if (!lacks(r, 0)) /* -LOADING and the like: try later */
            return relock__done(&m->h, RELOCK__BAD_REPLY(c, "INFO", r));
        /* Without INFO (renamed by the operator, say): tell the version
         * apart by which commands are refused.  Only harmless commands
         * are tried. */
        return relock__send_words(&m->h, out, P_TIME, 0, 1, "TIME");
    }
    case P_TIME:
        if (refused_by_acl(c, "TIME", r))
            return relock__done(&m->h, c->err.pub.status);
        if (r->type != REDIS_REPLY_ARRAY && !lacks(r, 0))
            return relock__done(&m->h, RELOCK__BAD_REPLY(c, "TIME (probe)", r));
        if (r->type != REDIS_REPLY_ARRAY)
            return relock__send_words(&m->h, out, P_UNWATCH, 0, 1, "UNWATCH");
        /* SET with options on a key of our own namespace that expires at
         * once. */
        return relock__send_words(&m->h, out, P_SET, 0, 6, "SET", "relock:{probe}", "1", "NX",
                                  "PX", "1");
    case P_SET:
        if (r->type == REDIS_REPLY_ERROR && !lacks(r, 1))
            return relock__done(&m->h, RELOCK__BAD_REPLY(c, "SET NX PX (probe)", r));
        set_version(&c->conn, 2, 6, r->type != REDIS_REPLY_ERROR ? 12 : 0);
        return natives(m, c, out);
    case P_UNWATCH:
        if (refused_by_acl(c, "UNWATCH", r))
            return relock__done(&m->h, c->err.pub.status);
        if (r->type != REDIS_REPLY_STATUS && !lacks(r, 0))
            return relock__done(&m->h, RELOCK__BAD_REPLY(c, "UNWATCH (probe)", r));
        set_version(&c->conn, 2, r->type == REDIS_REPLY_STATUS ? 2 : 0, 0);
        return natives(m, c, out);
    case P_DOCS:
        /* A "not now" error tells nothing of the commands, and the
         * version's guess (EVAL from 2.6) must not stand for an answer;
         * any other error (no DOCS, an ACL) leaves the guess. */
        if (r->type == REDIS_REPLY_ERROR && relock__reply_transient(r->str))
            return relock__done(&m->h, RELOCK__BAD_REPLY(c, "COMMAND DOCS (probe)", r));
        natives_read(&c->conn, r);
        return relock__done(&m->h, RELOCK_OK);
    default:
        return relock__done(&m->h, RELOCK__FAIL(&c->err, RELOCK_EPROTO,
                                                "probe: internal error (step %d)", m->h.pc));
    }
}

const char *relock_cap_name(unsigned bit)
{
    /* By bit, from RELOCK_CAP_WATCH (0x01) to RELOCK_CAP_WAITAOF (0x800). */
    static const char *const names[] = {"watch", "eval", "pexpire", "time", "set-nx-px",
                                        "scan", "script-time-write", "set-ifeq", "delifeq",
                                        "delex", "wait", "waitaof"};
    _Static_assert(RELOCK_CAP_WAITAOF == 1u << 11, "a name per bit, in the bits' order");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (bit == 1u << i)
            return names[i];
    return NULL;
}
