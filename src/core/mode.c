/*
 * Choosing the algorithm (design.md §4.1), once a connection is probed, for
 * both clients.  "auto" is safe by default: modern values beside unchanged
 * legacy clients break mutual exclusion (a legacy client reads a token as
 * an expired timestamp and takes the lock over), so modern is chosen only
 * when the operator has declared that no legacy client remains.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "compat.h"
#include "caps.h"
#include "algo.h"
#include "modern.h"
#include "quorum.h"
#include "ts.h"

/* A timestamp lock adopted from its value: the timestamp says how long it
 * is valid (its machine runs on the blocking driver, relock__drive()). */
static void ts_adopt(relock_lock *l)
{
    relock__value val;
    relock__classify(l->value, strlen(l->value), &val);
    if (val.kind != RELOCK_VALUE_TIMESTAMP)
        return; /* nothing to learn, and no clock to read */
    relock__ts_adopt m;
    relock__ts_adopt_init(&m);
    relock__drive(l, relock__ts_adopt_step, &m);
}

/* The algorithms: their machines run in the operation core for both APIs. */
const relock__algo relock__algo_modern = {"modern", NULL, &relock__modern_machines};
const relock__algo relock__algo_quorum = {"quorum", NULL, &relock__quorum_machines};
const relock__algo relock__algo_legacy = {"legacy", ts_adopt, &relock__ts_machines};
const relock__algo relock__algo_bridge = {"bridge", ts_adopt, &relock__ts_machines};

/* A server of 2.6.0 or later without EVAL has Lua left out (Valkey 9.1
 * can run so); before 2.6.0 there was no Lua at all. */
static int lua_left_out(const relock__conn *conn)
{
    long v = (long)conn->major * 10000 + conn->minor * 100 + conn->patch;
    return v >= 20600 && !(conn->caps & RELOCK_CAP_EVAL);
}

/* Uses mode m (never auto), the reason why (a format) shown by `relock
 * probe`; modern's reason names how it releases, extends and fences on
 * this server (relock__modern_paths() decides). */
__attribute__((format(printf, 3, 4)))
static relock_status use(relock_client *c, relock_mode m, const char *why, ...)
{
    c->mode = m;
    va_list ap;
    va_start(ap, why);
    vsnprintf(c->mode_reason, sizeof c->mode_reason, why, ap);
    va_end(ap);
    if (m == RELOCK_MODE_MODERN) {
        c->algo = &relock__algo_modern;
        relock_paths p;
        relock__modern_paths(c, &p);
        size_t n = strlen(c->mode_reason);
        snprintf(c->mode_reason + n, sizeof c->mode_reason - n,
                 "; acquire: %s, release: %s, extend: %s, scripts: %s",
                 p.path[RELOCK_PATH_ACQUIRE], p.path[RELOCK_PATH_RELEASE],
                 p.path[RELOCK_PATH_EXTEND], p.path[RELOCK_PATH_SCRIPTS]);
        return RELOCK_OK;
    }
    c->algo = m == RELOCK_MODE_LEGACY ? &relock__algo_legacy : &relock__algo_bridge;
    if (relock__legacy_check(c) != RELOCK_OK)
        c->algo = NULL;
    return c->err.pub.status;
}

relock_status relock__select_mode(relock_client *c)
{
    const relock__conn *conn = &c->conn;
    switch (c->s.mode) {
    case RELOCK_MODE_MODERN:
        if (!(conn->caps & RELOCK_CAP_SET_NX_PX))
            return RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                                "mode modern: server %s lacks SET NX PX (needs 2.6.12); "
                                "use mode \"legacy\"",
                                conn->version);
        return use(c, RELOCK_MODE_MODERN, "configured");
    case RELOCK_MODE_BRIDGE:
        if (lua_left_out(conn))
            return RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                                "mode bridge: server %s runs without Lua (EVAL is an unknown "
                                "command); bridge takes over and releases timestamps beside "
                                "legacy clients by script, and no other path keeps its TTL "
                                "rules atomic; use mode \"legacy\"",
                                conn->version);
        if (!(conn->caps & RELOCK_CAP_EVAL))
            return RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                                "mode bridge: server %s lacks EVAL (needs 2.6.0); "
                                "use mode \"legacy\"",
                                conn->version);
        return use(c, RELOCK_MODE_BRIDGE, "configured");
    case RELOCK_MODE_LEGACY:
        return use(c, RELOCK_MODE_LEGACY, "configured");
    case RELOCK_MODE_AUTO:
        break;
    }
    if (lua_left_out(conn)) {
        if (!c->s.migration.legacy_clients && (conn->caps & RELOCK_CAP_SET_NX_PX))
            return use(c, RELOCK_MODE_MODERN,
                       "auto: server %s has SET NX PX and migration.legacy_clients = false "
                       "(it runs without Lua)",
                       conn->version);
        return use(c, RELOCK_MODE_LEGACY,
                   "auto: server %s runs without Lua (EVAL is an unknown command), which "
                   "bridge needs",
                   conn->version);
    }
    if (!(conn->caps & RELOCK_CAP_EVAL))
        return use(c, RELOCK_MODE_LEGACY, "auto: server %s is older than 2.6.0", conn->version);
    if (c->s.migration.legacy_clients)
        return use(c, RELOCK_MODE_BRIDGE,
                   "auto: migration.legacy_clients = true (legacy clients may share these keys)");
    if (conn->caps & RELOCK_CAP_SET_NX_PX)
        return use(c, RELOCK_MODE_MODERN,
                   "auto: server %s has SET NX PX and migration.legacy_clients = false",
                   conn->version);
    return use(c, RELOCK_MODE_BRIDGE, "auto: server %s has EVAL but not SET NX PX (2.6.12)",
               conn->version);
}

relock_status relock__quorum_setup(relock_client *c)
{
    /* Modern values only: tokens are unique across servers, while
     * timestamps, GETSET losers and legacy clients have no meaning for a
     * majority of independent masters. */
    if (c->s.mode == RELOCK_MODE_LEGACY || c->s.mode == RELOCK_MODE_BRIDGE ||
        (c->s.mode == RELOCK_MODE_AUTO && c->s.migration.legacy_clients)) {
        /* The place to change: the file's mode, else its servers. */
        int line = c->s.mode_line ? c->s.mode_line : c->s.servers_line;
        char at[sizeof c->s.src_file + 16] = "";
        if (line && c->s.src_file[0])
            snprintf(at, sizeof at, "%s:%d: ", c->s.src_file, line);
        return RELOCK__FAIL(&c->err, RELOCK_EUNSUPPORTED,
                            "%sservers: quorum over %d servers uses modern values only; set "
                            "mode = \"modern\" (or auto with migration.legacy_clients = false)",
                            at, c->s.nservers);
    }
    c->mode = RELOCK_MODE_MODERN;
    snprintf(c->mode_reason, sizeof c->mode_reason,
             "quorum over %d servers (majority %d), modern values", c->s.nservers,
             c->s.nservers / 2 + 1);
    c->algo = &relock__algo_quorum;
    return RELOCK_OK;
}
