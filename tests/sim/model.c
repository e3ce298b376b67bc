/*
 * The model Redis server of the simulator (model.h).
 *
 * What it follows, version by version: docs/design.md §3.4 (real
 * 2.0.5 .. 2.6.17 servers) and the proxy's personality tables
 * (tests/support/proxy/personality.c, native.c).  Scripts run their own text in
 * Lua 5.1, as in Redis (see "scripts" below).
 */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "internal.h"

const char *const model_personality_names[] = {
    "2.0", "2.2", "2.4", "2.6.0", "2.6.11", "2.6.12", "7", "nolua",
    "valkey-8.1", "valkey-9.0", "redis-8.4", NULL};

int model_personality_parse(const char *name, model_personality *out)
{
    static const struct {
        const char *name;
        unsigned v;
        const char *info;
        int lua;
        unsigned native;
    } t[] = {
        {"2.0", MODEL_PV(2, 0, 5), "2.0.5", 0, 0},
        {"2.2", MODEL_PV(2, 2, 15), "2.2.15", 0, 0},
        {"2.4", MODEL_PV(2, 4, 18), "2.4.18", 0, 0},
        {"2.6.0", MODEL_PV(2, 6, 0), "2.6.0", 1, 0},
        {"2.6.11", MODEL_PV(2, 6, 11), "2.6.11", 1, 0},
        {"2.6.12", MODEL_PV(2, 6, 12), "2.6.12", 1, 0},
        {"7", MODEL_PV(7, 0, 0), "7.0.15", 1, 0},
        {"nolua", MODEL_PV(7, 0, 0), "7.0.15", 0, 0},
        {"valkey-8.1", MODEL_PV(8, 1, 0), "7.2.4", 1, MODEL_NATIVE_SET_IFEQ},
        {"valkey-9.0", MODEL_PV(9, 0, 0), "7.2.4", 1,
         MODEL_NATIVE_SET_IFEQ | MODEL_NATIVE_DELIFEQ},
        {"redis-8.4", MODEL_PV(8, 4, 0), "8.4.0", 1, MODEL_NATIVE_SET_IFEQ | MODEL_NATIVE_DELEX},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (strcmp(name, t[i].name) == 0) {
            memset(out, 0, sizeof *out);
            snprintf(out->name, sizeof out->name, "%s", t[i].name);
            out->version = t[i].v;
            snprintf(out->info, sizeof out->info, "%s", t[i].info);
            out->lua = t[i].lua;
            out->native = t[i].native;
            return 0;
        }
    }
    return -1;
}

/* ------------------------------------------------------------------ RESP out */

void model_buf_add(model_buf *b, const void *p, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q)
            abort();
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void model_buf_free(model_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

static void out_fmt(model_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_fmt(model_buf *b, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof tmp)
        n = (int)sizeof tmp - 1;
    model_buf_add(b, tmp, (size_t)n);
}

static void out_ok(model_buf *b) { model_buf_add(b, "+OK\r\n", 5); }
static void out_int(model_buf *b, long long v) { out_fmt(b, ":%lld\r\n", v); }
static void out_nil(model_buf *b) { model_buf_add(b, "$-1\r\n", 5); }
static void out_arr(model_buf *b, long n) { out_fmt(b, "*%ld\r\n", n); }
static void out_status(model_buf *b, const char *s) { out_fmt(b, "+%s\r\n", s); }

static void out_bulk(model_buf *b, const char *p, size_t n)
{
    out_fmt(b, "$%zu\r\n", n);
    model_buf_add(b, p, n);
    model_buf_add(b, "\r\n", 2);
}

static void out_str(model_buf *b, const char *s) { out_bulk(b, s, strlen(s)); }

static void out_err(model_buf *b, const char *text)
{
    char line[600];
    size_t n = 0;
    for (; text[n] && n < sizeof line - 1; n++)
        line[n] = (text[n] == '\r' || text[n] == '\n') ? ' ' : text[n];
    line[n] = '\0';
    out_fmt(b, "-%s\r\n", line);
}

/* ------------------------------------------------------------------ RESP in */

static long parse_num(const char *p, size_t n, size_t *used)
{
    const char *e = memchr(p, '\r', n);
    if (!e || (size_t)(e - p) + 2 > n)
        return -2; /* incomplete */
    if (e[1] != '\n')
        return -3;
    long v = 0;
    for (const char *q = p; q < e; q++) {
        if (*q < '0' || *q > '9' || v > 100000000)
            return -3;
        v = v * 10 + (*q - '0');
    }
    *used = (size_t)(e - p) + 2;
    return v;
}

long model_parse_command(const char *buf, size_t n, int *argc, const char **argv, size_t *len,
                         int maxargs)
{
    size_t pos = 0, used;
    if (n == 0)
        return 0;
    if (buf[0] != '*')
        return -1;
    long count = parse_num(buf + 1, n - 1, &used);
    if (count == -2)
        return 0;
    if (count < 1 || count > maxargs)
        return -1;
    pos = 1 + used;
    for (long i = 0; i < count; i++) {
        if (pos >= n)
            return 0;
        if (buf[pos] != '$')
            return -1;
        long l = parse_num(buf + pos + 1, n - pos - 1, &used);
        if (l == -2)
            return 0;
        if (l < 0)
            return -1;
        pos += 1 + used;
        if (pos + (size_t)l + 2 > n)
            return 0;
        argv[i] = buf + pos;
        len[i] = (size_t)l;
        pos += (size_t)l + 2;
    }
    *argc = (int)count;
    return (long)pos;
}

/* ------------------------------------------------------------------ keys */

static int ver_ge(const model *m, unsigned a, unsigned b, unsigned c)
{
    return m->p.version >= MODEL_PV(a, b, c);
}

/* Before 2.6 an expiry is kept in whole seconds and ends when the clock's
 * second passes it. */
static int expired(const model *m, const model_key *k)
{
    if (!k->exists || k->expire_ms == 0)
        return 0;
    if (!ver_ge(m, 2, 6, 0))
        return m->now_ms / 1000 > k->expire_ms / 1000;
    return m->now_ms > k->expire_ms;
}

static model_key *slot_of(model *m, const char *name, size_t n, int make)
{
    if (n >= MODEL_KEY_MAX)
        return NULL;
    model_key *free_slot = NULL;
    for (int i = 0; i < MODEL_KEYS; i++) {
        model_key *k = &m->keys[i];
        if (!k->used) {
            if (!free_slot)
                free_slot = k;
            continue;
        }
        if (strlen(k->name) == n && memcmp(k->name, name, n) == 0) {
            if (expired(m, k)) {
                k->exists = 0;
                k->expire_ms = 0;
                k->ver++;
            }
            return k;
        }
    }
    if (!make || !free_slot)
        return NULL;
    memset(free_slot, 0, sizeof *free_slot);
    free_slot->used = 1;
    memcpy(free_slot->name, name, n);
    free_slot->name[n] = '\0';
    free_slot->author = -1;
    return free_slot;
}

model_key *model_lookup(model *m, const char *name)
{
    return slot_of(m, name, strlen(name), 0);
}

static long long pttl_of(const model *m, const model_key *k)
{
    if (!k || !k->exists)
        return -2;
    if (k->expire_ms == 0)
        return -1;
    if (!ver_ge(m, 2, 6, 0))
        return (k->expire_ms / 1000 - m->now_ms / 1000) * 1000;
    return k->expire_ms - m->now_ms;
}

long long model_pttl(model *m, const char *name)
{
    return pttl_of(m, model_lookup(m, name));
}

static void note_write(model *m, int conn, model_key *k, const char *what)
{
    if (m->on_write)
        m->on_write(m->on_write_arg, m, m->conns[conn].client, k, what);
}

static void kset(model *m, int conn, model_key *k, const char *v, size_t n, const char *what)
{
    note_write(m, conn, k, what);
    if (n >= MODEL_VAL_MAX)
        n = MODEL_VAL_MAX - 1;
    memcpy(k->val, v, n);
    k->val[n] = '\0';
    k->len = n;
    k->exists = 1;
    k->expire_ms = 0;
    k->ver++;
    k->author = m->conns[conn].client;
}

static void kdel(model *m, int conn, model_key *k, const char *what)
{
    note_write(m, conn, k, what);
    k->exists = 0;
    k->expire_ms = 0;
    k->ver++;
    k->author = m->conns[conn].client;
}

static void kexpire_ms(model *m, int conn, model_key *k, long long ms, const char *what)
{
    note_write(m, conn, k, what);
    if (!ver_ge(m, 2, 6, 0))
        k->expire_ms = (m->now_ms / 1000 + (ms + 999) / 1000) * 1000;
    else
        k->expire_ms = m->now_ms + ms;
    k->ver++;
}

static int to_ll(const char *p, size_t n, long long *out)
{
    char tmp[32];
    if (n == 0 || n >= sizeof tmp)
        return -1;
    memcpy(tmp, p, n);
    tmp[n] = '\0';
    char *end;
    long long v = strtoll(tmp, &end, 10);
    if (*end || (tmp[0] == '0' && n > 1) || (tmp[0] == '-' && (n == 1 || tmp[1] == '0')))
        return -1;
    *out = v;
    return 0;
}

static int eq(const model_key *k, const char *v, size_t n)
{
    return k && k->exists && k->len == n && memcmp(k->val, v, n) == 0;
}

/* 2.0: a write that looks its key up for writing removes it first when it
 * has an expiry (a volatile key counts as absent). */
static void volatile20(model *m, int conn, model_key *k)
{
    if (!ver_ge(m, 2, 2, 0) && k && k->exists && k->expire_ms)
        kdel(m, conn, k, "2.0 volatile delete");
}

/* ------------------------------------------------------------------ the command table */

enum cmd_id {
    C_GET, C_SET, C_SETNX, C_GETSET, C_DEL, C_EXPIRE, C_PEXPIRE, C_TTL, C_PTTL, C_INCR,
    C_EXISTS, C_TYPE, C_TIME, C_WATCH, C_UNWATCH, C_MULTI, C_EXEC, C_DISCARD, C_EVAL,
    C_EVALSHA, C_SCRIPT, C_PUBLISH, C_SUBSCRIBE, C_UNSUBSCRIBE, C_DELIFEQ, C_DELEX, C_INFO,
    C_PING, C_COMMAND, C_SELECT, C_ECHO, C_PSETEX, C_SETEX, C_FLUSHALL, C_DBSIZE, C_AUTH,
    C_INCRBY, C_WAIT
};

static const struct cmd_def {
    const char *name;
    int id;
    int arity; /* Redis style: exact when positive, at least -arity when negative */
    unsigned since;
} cmds[] = {
    {"GET", C_GET, 2, 0},           {"SET", C_SET, -3, 0},
    {"SETNX", C_SETNX, 3, 0},       {"GETSET", C_GETSET, 3, 0},
    {"DEL", C_DEL, -2, 0},          {"EXPIRE", C_EXPIRE, -3, 0},
    {"PEXPIRE", C_PEXPIRE, -3, MODEL_PV(2, 6, 0)},
    {"TTL", C_TTL, 2, 0},           {"PTTL", C_PTTL, 2, MODEL_PV(2, 6, 0)},
    {"INCR", C_INCR, 2, 0},         {"EXISTS", C_EXISTS, -2, 0},
    {"TYPE", C_TYPE, 2, 0},         {"TIME", C_TIME, 1, MODEL_PV(2, 6, 0)},
    {"WATCH", C_WATCH, -2, MODEL_PV(2, 2, 0)},
    {"UNWATCH", C_UNWATCH, 1, MODEL_PV(2, 2, 0)},
    {"MULTI", C_MULTI, 1, 0},       {"EXEC", C_EXEC, 1, 0},
    {"DISCARD", C_DISCARD, 1, 0},   {"EVAL", C_EVAL, -3, MODEL_PV(2, 6, 0)},
    {"EVALSHA", C_EVALSHA, -3, MODEL_PV(2, 6, 0)},
    {"SCRIPT", C_SCRIPT, -2, MODEL_PV(2, 6, 0)},
    {"PUBLISH", C_PUBLISH, 3, 0},   {"SUBSCRIBE", C_SUBSCRIBE, -2, 0},
    {"UNSUBSCRIBE", C_UNSUBSCRIBE, -1, 0},
    {"DELIFEQ", C_DELIFEQ, 3, ~0u}, {"DELEX", C_DELEX, -2, ~0u},
    {"INFO", C_INFO, -1, 0},        {"PING", C_PING, -1, 0},
    {"COMMAND", C_COMMAND, -1, MODEL_PV(2, 8, 13)},
    {"SELECT", C_SELECT, 2, 0},     {"ECHO", C_ECHO, 2, 0},
    {"PSETEX", C_PSETEX, 4, MODEL_PV(2, 6, 0)},
    {"SETEX", C_SETEX, 4, 0},       {"FLUSHALL", C_FLUSHALL, -1, 0},
    {"DBSIZE", C_DBSIZE, 1, 0},     {"AUTH", C_AUTH, -2, 0},
    {"INCRBY", C_INCRBY, 3, 0},
    {"WAIT", C_WAIT, 3, MODEL_PV(3, 0, 0)},
};

static int known(const model *m, const struct cmd_def *d)
{
    if (d->id == C_DELIFEQ)
        return (m->p.native & MODEL_NATIVE_DELIFEQ) != 0;
    if (d->id == C_DELEX)
        return (m->p.native & MODEL_NATIVE_DELEX) != 0;
    if ((d->id == C_EVAL || d->id == C_EVALSHA || d->id == C_SCRIPT) && !m->p.lua)
        return 0;
    return m->p.version >= d->since;
}

static void unknown_command(const model *m, model_buf *out, int argc, const char *const *argv,
                            const size_t *len)
{
    char err[600];
    int nl = (int)(len[0] > 128 ? 128 : len[0]);
    if (!ver_ge(m, 2, 8, 0)) {
        snprintf(err, sizeof err, "ERR unknown command '%.*s'", nl, argv[0]);
    } else {
        char args[200] = "";
        size_t al = 0;
        for (int i = 1; i < argc && al < 128; i++) {
            size_t room = 128 - al;
            int w = snprintf(args + al, sizeof args - al, "'%.*s' ",
                             (int)(len[i] < room ? len[i] : room), argv[i]);
            if (w < 0)
                break;
            al += (size_t)w;
            if (al >= sizeof args)
                al = sizeof args - 1;
        }
        snprintf(err, sizeof err, "ERR unknown command '%.*s', with args beginning with: %s", nl,
                 argv[0], args);
    }
    out_err(out, err);
}

static void arity_error(model_buf *out, const char *name)
{
    char low[32], err[100];
    size_t i;
    for (i = 0; name[i] && i < sizeof low - 1; i++)
        low[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
    low[i] = '\0';
    snprintf(err, sizeof err, "ERR wrong number of arguments for '%s' command", low);
    out_err(out, err);
}

/* Checks a command as the server's dispatcher would: NULL and an error
 * written when refused. */
static const struct cmd_def *check(const model *m, model_buf *out, int argc,
                                   const char *const *argv, const size_t *len)
{
    const struct cmd_def *d = NULL;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (strlen(cmds[i].name) == len[0] && strncasecmp(cmds[i].name, argv[0], len[0]) == 0) {
            d = &cmds[i];
            break;
        }
    }
    if (!d || !known(m, d)) {
        unknown_command(m, out, argc, argv, len);
        return NULL;
    }
    int arity = d->arity;
    /* Options that came after the command: the old exact arity. */
    if (d->id == C_SET && !ver_ge(m, 2, 6, 12))
        arity = 3;
    if ((d->id == C_EXPIRE || d->id == C_PEXPIRE) && !ver_ge(m, 7, 0, 0))
        arity = 3;
    if (d->id == C_EXISTS && !ver_ge(m, 3, 0, 3))
        arity = 2;
    if (d->id == C_INFO && !ver_ge(m, 2, 6, 0))
        arity = 1;
    if ((arity > 0 && argc != arity) || (arity < 0 && argc < -arity)) {
        arity_error(out, d->name);
        return NULL;
    }
    return d;
}

/* ------------------------------------------------------------------ scripts */

static int publish(model *m, const char *ch, size_t n, const char *msg, size_t mn)
{
    int count = 0;
    for (int i = 0; i < MODEL_CONNS; i++) {
        model_conn *c = &m->conns[i];
        if (!c->open || strlen(c->sub) != n || memcmp(c->sub, ch, n) != 0)
            continue;
        count++;
        out_arr(&c->push, 3);
        out_str(&c->push, "message");
        out_bulk(&c->push, ch, n);
        out_bulk(&c->push, msg, mn);
    }
    return count;
}

static int incr_key(model *m, int conn, model_key *k, long long by, long long *v)
{
    long long cur = 0;
    if (k->exists && to_ll(k->val, k->len, &cur) != 0)
        return -1;
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%lld", cur + by);
    long long keep = k->exists ? k->expire_ms : 0;
    kset(m, conn, k, tmp, (size_t)n, "INCR");
    k->expire_ms = keep;
    *v = cur + by;
    return 0;
}

static void run(model *m, int conn, const struct cmd_def *d, int argc, const char *const *argv,
                const size_t *len, model_buf *out);

/*
 * Scripts run their real text in Lua 5.1, the interpreter Redis embeds,
 * with the part of its scripting API that relock's scripts use:
 * redis.call and redis.pcall (each command runs through the model's own
 * dispatcher, so a script meets the personality's refusals as the real
 * server's scripts do), redis.error_reply, redis.status_reply, KEYS and
 * ARGV, and Redis's conversions between replies and Lua values.  One
 * interpreter serves every model of the process; a script is compiled
 * once per text (by its SHA-1) and each model keeps the digests it has
 * been given, so EVALSHA answers NOSCRIPT as a real server's cache does.
 */
static lua_State *lua;
static model *lua_model; /* the model and connection of the script running */
static int lua_conn;

/* A reply's bytes as Lua values (Redis's conversion): integer -> number,
 * bulk -> string, nil -> false, array -> table, status -> {ok = s},
 * error -> {err = s}.  Returns the bytes used. */
static size_t lua_push_reply(lua_State *L, const char *p, size_t n)
{
    const char *e = memchr(p, '\r', n);
    if (!e || n < 3)
        return n;
    size_t head = (size_t)(e - p) + 2;
    switch (p[0]) {
    case ':':
        lua_pushnumber(L, (lua_Number)strtoll(p + 1, NULL, 10));
        return head;
    case '+':
    case '-':
        lua_newtable(L);
        lua_pushstring(L, p[0] == '+' ? "ok" : "err");
        lua_pushlstring(L, p + 1, (size_t)(e - p - 1));
        lua_settable(L, -3);
        return head;
    case '$': {
        long l = strtol(p + 1, NULL, 10);
        if (l < 0) {
            lua_pushboolean(L, 0);
            return head;
        }
        lua_pushlstring(L, p + head, (size_t)l);
        return head + (size_t)l + 2;
    }
    case '*': {
        long cnt = strtol(p + 1, NULL, 10);
        if (cnt < 0) {
            lua_pushboolean(L, 0);
            return head;
        }
        size_t used = head;
        lua_newtable(L);
        for (long i = 0; i < cnt && used < n; i++) {
            lua_pushnumber(L, (lua_Number)(i + 1));
            used += lua_push_reply(L, p + used, n - used);
            lua_settable(L, -3);
        }
        return used;
    }
    default:
        return n;
    }
}

static int lua_redis_run(lua_State *L, int raise)
{
    int argc = lua_gettop(L);
    const char *argv[MODEL_ARGS];
    size_t len[MODEL_ARGS];
    if (argc == 0 || argc > MODEL_ARGS)
        return luaL_error(L, "Please specify at least one argument for redis.call()");
    for (int i = 0; i < argc; i++) {
        int t = lua_type(L, i + 1);
        if (t != LUA_TSTRING && t != LUA_TNUMBER)
            return luaL_error(L, "Lua redis() command arguments must be strings or integers");
        argv[i] = lua_tolstring(L, i + 1, &len[i]); /* numbers become strings, as Redis does */
    }
    model *m = lua_model;
    model_buf out = {0};
    const struct cmd_def *d = check(m, &out, argc, argv, len);
    if (d && (d->id == C_WATCH || d->id == C_UNWATCH || d->id == C_MULTI || d->id == C_EXEC ||
              d->id == C_DISCARD || d->id == C_EVAL || d->id == C_EVALSHA ||
              d->id == C_SCRIPT || d->id == C_SUBSCRIBE || d->id == C_UNSUBSCRIBE)) {
        out_err(&out, "ERR This Redis command is not allowed from scripts");
        d = NULL;
    }
    if (d)
        run(m, lua_conn, d, argc, argv, len, &out);
    lua_push_reply(L, out.p ? out.p : "", out.n);
    model_buf_free(&out);
    if (raise && lua_istable(L, -1)) {
        lua_getfield(L, -1, "err");
        if (lua_isstring(L, -1)) {
            /* redis.call raises the error, with the script's line. */
            luaL_where(L, 1);
            lua_pushvalue(L, -2);
            lua_concat(L, 2);
            return lua_error(L);
        }
        lua_pop(L, 1);
    }
    return 1;
}

static int lua_redis_call(lua_State *L) { return lua_redis_run(L, 1); }
static int lua_redis_pcall(lua_State *L) { return lua_redis_run(L, 0); }

static int lua_redis_reply(lua_State *L, const char *field)
{
    const char *s = luaL_checkstring(L, 1);
    lua_newtable(L);
    lua_pushstring(L, field);
    lua_pushstring(L, s);
    lua_settable(L, -3);
    return 1;
}

static int lua_redis_error_reply(lua_State *L) { return lua_redis_reply(L, "err"); }
static int lua_redis_status_reply(lua_State *L) { return lua_redis_reply(L, "ok"); }

static lua_State *lua_get(void)
{
    if (lua)
        return lua;
    lua_State *L = luaL_newstate();
    if (!L)
        abort();
    /* The libraries Redis loads (less cjson, struct, cmsgpack, bit). */
    static const luaL_Reg libs[] = {{"", luaopen_base},
                                    {LUA_TABLIBNAME, luaopen_table},
                                    {LUA_STRLIBNAME, luaopen_string},
                                    {LUA_MATHLIBNAME, luaopen_math},
                                    {NULL, NULL}};
    for (const luaL_Reg *lib = libs; lib->func; lib++) {
        lua_pushcfunction(L, lib->func);
        lua_pushstring(L, lib->name);
        lua_call(L, 1, 0);
    }
    lua_newtable(L);
    lua_pushcfunction(L, lua_redis_call);
    lua_setfield(L, -2, "call");
    lua_pushcfunction(L, lua_redis_pcall);
    lua_setfield(L, -2, "pcall");
    lua_pushcfunction(L, lua_redis_error_reply);
    lua_setfield(L, -2, "error_reply");
    lua_pushcfunction(L, lua_redis_status_reply);
    lua_setfield(L, -2, "status_reply");
    lua_setglobal(L, "redis");
    lua_newtable(L); /* compiled scripts by SHA-1 */
    lua_setfield(L, LUA_REGISTRYINDEX, "model_scripts");
    lua = L;
    return L;
}

/* Pushes the compiled script of that digest (compiling text, when given,
 * if it is not yet); 0 when pushed, else an error written to out. */
static int lua_script(lua_State *L, const char *sha, const char *text, size_t n, model_buf *out)
{
    lua_getfield(L, LUA_REGISTRYINDEX, "model_scripts");
    lua_getfield(L, -1, sha);
    if (lua_isfunction(L, -1)) {
        lua_remove(L, -2);
        return 0;
    }
    lua_pop(L, 1);
    if (!text) {
        lua_pop(L, 1);
        out_err(out, "NOSCRIPT No matching script. Please use EVAL.");
        return -1;
    }
    if (luaL_loadbuffer(L, text, n, "@user_script") != 0) {
        char err[600];
        snprintf(err, sizeof err, "ERR Error compiling script (new function): %s",
                 lua_tostring(L, -1));
        lua_pop(L, 2);
        out_err(out, err);
        return -1;
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, sha);
    lua_remove(L, -2);
    return 0;
}

/* The value on top of the stack as a reply (Redis's conversion): number
 * -> integer, string -> bulk, true -> 1, false and nil -> nil, a table
 * with err or ok -> an error or a status, other tables -> an array up to
 * the first nil.  Pops it. */
static void lua_to_reply(lua_State *L, model_buf *out)
{
    switch (lua_type(L, -1)) {
    case LUA_TNUMBER:
        out_int(out, (long long)lua_tonumber(L, -1));
        break;
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, -1, &n);
        out_bulk(out, s, n);
        break;
    }
    case LUA_TBOOLEAN:
        if (lua_toboolean(L, -1))
            out_int(out, 1);
        else
            out_nil(out);
        break;
    case LUA_TTABLE: {
        lua_getfield(L, -1, "err");
        if (lua_isstring(L, -1)) {
            out_err(out, lua_tostring(L, -1));
            lua_pop(L, 1);
            break;
        }
        lua_pop(L, 1);
        lua_getfield(L, -1, "ok");
        if (lua_isstring(L, -1)) {
            out_status(out, lua_tostring(L, -1));
            lua_pop(L, 1);
            break;
        }
        lua_pop(L, 1);
        model_buf body = {0};
        long n = 0;
        for (;; n++) {
            lua_rawgeti(L, -1, (int)n + 1);
            if (lua_isnil(L, -1)) {
                lua_pop(L, 1);
                break;
            }
            lua_to_reply(L, &body);
        }
        out_arr(out, n);
        if (body.n)
            model_buf_add(out, body.p, body.n);
        model_buf_free(&body);
        break;
    }
    default:
        out_nil(out);
        break;
    }
    lua_pop(L, 1);
}

static void lua_set_array(lua_State *L, const char *name, int n, const char *const *v,
                          const size_t *len)
{
    lua_newtable(L);
    for (int i = 0; i < n; i++) {
        lua_pushlstring(L, v[i], len[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setglobal(L, name);
}

static int script_known(const model *m, const char *sha)
{
    for (int i = 0; i < m->nscripts; i++)
        if (strncasecmp(m->scripts[i], sha, 40) == 0)
            return 1;
    return 0;
}

static void script_remember(model *m, const char *sha)
{
    if (script_known(m, sha) || m->nscripts >= MODEL_SCRIPTS)
        return;
    for (int i = 0; i < 40; i++)
        m->scripts[m->nscripts][i] = (char)(sha[i] >= 'A' && sha[i] <= 'F' ? sha[i] + 32 : sha[i]);
    m->scripts[m->nscripts][40] = '\0';
    m->nscripts++;
}

/* A script text's SHA-1, remembered for the texts seen (a handful):
 * hashing the text at every EVAL was a tenth of the simulator's time. */
static void script_sha(const char *text, size_t n, char *sha)
{
    static struct {
        char *text;
        size_t n;
        char sha[41];
    } seen[MODEL_SCRIPTS];
    static int nseen;
    for (int i = 0; i < nseen; i++) {
        if (seen[i].n == n && memcmp(seen[i].text, text, n) == 0) {
            memcpy(sha, seen[i].sha, 41);
            return;
        }
    }
    relock__sha1_hex(text, n, sha);
    if (nseen < MODEL_SCRIPTS) {
        char *copy = malloc(n ? n : 1);
        if (!copy)
            return;
        memcpy(copy, text, n);
        seen[nseen].text = copy;
        seen[nseen].n = n;
        memcpy(seen[nseen].sha, sha, 41);
        nseen++;
    }
}

static void cmd_eval(model *m, int conn, int evalsha, int argc, const char *const *argv,
                     const size_t *len, model_buf *out)
{
    char sha[41];
    lua_State *L = lua_get();
    if (evalsha) {
        if (len[1] != 40) {
            out_err(out, "NOSCRIPT No matching script. Please use EVAL.");
            return;
        }
        for (int i = 0; i < 40; i++)
            sha[i] = (char)(argv[1][i] >= 'A' && argv[1][i] <= 'F' ? argv[1][i] + 32 : argv[1][i]);
        sha[40] = '\0';
        if (!script_known(m, sha)) {
            out_err(out, "NOSCRIPT No matching script. Please use EVAL.");
            return;
        }
    } else {
        script_sha(argv[1], len[1], sha);
    }
    long long nk;
    if (to_ll(argv[2], len[2], &nk) != 0) {
        out_err(out, "ERR value is not an integer or out of range");
        return;
    }
    if (nk > argc - 3) {
        out_err(out, "ERR Number of keys can't be greater than number of args");
        return;
    }
    if (nk < 0) {
        out_err(out, "ERR Number of keys can't be negative");
        return;
    }
    if (lua_script(L, sha, evalsha ? NULL : argv[1], len[1], out) != 0)
        return;
    script_remember(m, sha);
    lua_set_array(L, "KEYS", (int)nk, argv + 3, len + 3);
    lua_set_array(L, "ARGV", argc - 3 - (int)nk, argv + 3 + nk, len + 3 + nk);
    model *saved_m = lua_model;
    int saved_c = lua_conn;
    lua_model = m;
    lua_conn = conn;
    int rc = lua_pcall(L, 0, 1, 0);
    lua_model = saved_m;
    lua_conn = saved_c;
    if (rc != 0) {
        const char *msg = NULL;
        if (lua_istable(L, -1)) {
            lua_getfield(L, -1, "err");
            msg = lua_tostring(L, -1);
            lua_pop(L, 1);
        } else {
            msg = lua_tostring(L, -1);
        }
        char err[700];
        snprintf(err, sizeof err, "ERR Error running script (call to f_%s): @%s", sha,
                 msg ? msg : "(an error that is not a string)");
        out_err(out, err);
        lua_pop(L, 1);
        return;
    }
    lua_to_reply(L, out);
}

static void cmd_script(model *m, int argc, const char *const *argv, const size_t *len,
                       model_buf *out)
{
    if (len[1] == 4 && strncasecmp(argv[1], "LOAD", 4) == 0 && argc == 3) {
        char sha[41];
        script_sha(argv[2], len[2], sha);
        lua_State *L = lua_get();
        if (lua_script(L, sha, argv[2], len[2], out) != 0)
            return;
        lua_pop(L, 1);
        script_remember(m, sha);
        out_str(out, sha);
        return;
    }
    if (len[1] == 5 && strncasecmp(argv[1], "FLUSH", 5) == 0) {
        m->nscripts = 0;
        out_ok(out);
        return;
    }
    if (len[1] == 6 && strncasecmp(argv[1], "EXISTS", 6) == 0 && argc >= 3) {
        out_arr(out, argc - 2);
        for (int i = 2; i < argc; i++)
            out_int(out, len[i] == 40 && script_known(m, argv[i]));
        return;
    }
    out_err(out, ver_ge(m, 7, 0, 0)
                     ? "ERR unknown subcommand or wrong number of arguments for 'SCRIPT'"
                     : "ERR Unknown SCRIPT subcommand or wrong # of args.");
}

/* ------------------------------------------------------------------ commands */

static void cmd_set(model *m, int conn, int argc, const char *const *argv, const size_t *len,
                    model_buf *out)
{
    int nx = 0, xx = 0, get = 0, keepttl = 0, ifeq = -1;
    long long ttl = 0;
    int ttl_set = 0;
    for (int i = 3; i < argc; i++) {
        const char *w = argv[i];
        size_t n = len[i];
#define IS(s) (n == strlen(s) && strncasecmp(w, s, n) == 0)
        if (IS("NX") && ifeq < 0) {
            nx = 1;
        } else if (IS("XX")) {
            xx = 1;
        } else if (IS("GET") && ver_ge(m, 6, 2, 0)) {
            get = 1;
        } else if (IS("KEEPTTL") && ver_ge(m, 6, 0, 0) && !ttl_set) {
            keepttl = 1;
        } else if ((IS("EX") || IS("PX")) && i + 1 < argc && !ttl_set && !keepttl) {
            long long v;
            if (to_ll(argv[i + 1], len[i + 1], &v) != 0) {
                out_err(out, "ERR value is not an integer or out of range");
                return;
            }
            if (v <= 0) {
                out_err(out, ver_ge(m, 6, 2, 0) ? "ERR invalid expire time in 'set' command"
                                                : "ERR invalid expire time in SETEX");
                return;
            }
            ttl = IS("EX") ? v * 1000 : v;
            ttl_set = 1;
            i++;
        } else if (IS("IFEQ") && (m->p.native & MODEL_NATIVE_SET_IFEQ) && i + 1 < argc && !nx &&
                   !xx && ifeq < 0) {
            ifeq = ++i;
        } else {
            out_err(out, "ERR syntax error");
            return;
        }
#undef IS
    }
    if (nx && xx) {
        if (ver_ge(m, 6, 2, 0))
            out_err(out, "ERR syntax error");
        else
            out_nil(out);
        return;
    }
    model_key *k = slot_of(m, argv[1], len[1], 1);
    if (!k) {
        out_err(out, "ERR the simulator's model is out of key slots");
        return;
    }
    int ok = 1;
    if (nx && k->exists)
        ok = 0;
    if (xx && !k->exists)
        ok = 0;
    if (ifeq >= 0 && !eq(k, argv[ifeq], len[ifeq]))
        ok = 0;
    char old[MODEL_VAL_MAX];
    size_t oldn = k->len;
    int had = k->exists;
    memcpy(old, k->val, k->len);
    if (ok) {
        long long keep = k->expire_ms;
        kset(m, conn, k, argv[2], len[2], "SET");
        if (ttl_set)
            kexpire_ms(m, conn, k, ttl, "SET PX");
        else if (keepttl)
            k->expire_ms = keep;
    }
    if (get) {
        if (had)
            out_bulk(out, old, oldn);
        else
            out_nil(out);
    } else if (ok) {
        out_ok(out);
    } else {
        out_nil(out);
    }
}

static void cmd_info(model *m, model_buf *out)
{
    char text[400];
    if (ver_ge(m, 2, 6, 0))
        snprintf(text, sizeof text,
                 "# Server\r\nredis_version:%s\r\nredis_mode:standalone\r\n%s\r\n# Clients\r\n"
                 "connected_clients:1\r\n",
                 m->p.info,
                 strncmp(m->p.name, "valkey", 6) == 0 ? "server_name:valkey" : "arch_bits:64");
    else
        snprintf(text, sizeof text, "redis_version:%s\r\narch_bits:64\r\nconnected_clients:1\r\n",
                 m->p.info);
    out_str(out, text);
}

/* COMMAND DOCS: each named command the server has, with its documented
 * arguments reduced to the tokens relock looks for. */
static void cmd_command(model *m, int argc, const char *const *argv, const size_t *len,
                        model_buf *out)
{
    if (argc < 2 || len[1] != 4 || strncasecmp(argv[1], "DOCS", 4) != 0 || !ver_ge(m, 7, 0, 0)) {
        char err[200];
        snprintf(err, sizeof err,
                 "ERR Unknown subcommand or wrong number of arguments for '%.*s'. Try COMMAND "
                 "HELP.",
                 argc >= 2 ? (int)(len[1] > 40 ? 40 : len[1]) : 0, argc >= 2 ? argv[1] : "");
        out_err(out, err);
        return;
    }
    int n = 0;
    model_buf body = {0};
    for (int i = 2; i < argc; i++) {
        const struct cmd_def *d = NULL;
        for (size_t j = 0; j < sizeof cmds / sizeof cmds[0]; j++)
            if (strlen(cmds[j].name) == len[i] && strncasecmp(cmds[j].name, argv[i], len[i]) == 0)
                d = &cmds[j];
        if (!d || !known(m, d))
            continue;
        n++;
        char low[32];
        size_t l;
        for (l = 0; d->name[l] && l < sizeof low - 1; l++)
            low[l] = (char)(d->name[l] + 32);
        low[l] = '\0';
        out_str(&body, low);
        if (d->id == C_SET) {
            int ifeq = (m->p.native & MODEL_NATIVE_SET_IFEQ) != 0;
            out_arr(&body, 4);
            out_str(&body, "summary");
            out_str(&body, "Sets the string value of a key.");
            out_str(&body, "arguments");
            out_arr(&body, ifeq ? 3 : 2);
            out_arr(&body, 2);
            out_str(&body, "token");
            out_str(&body, "NX");
            out_arr(&body, 2);
            out_str(&body, "token");
            out_str(&body, "PX");
            if (ifeq) {
                out_arr(&body, 2);
                out_str(&body, "token");
                out_str(&body, "IFEQ");
            }
        } else {
            out_arr(&body, 2);
            out_str(&body, "summary");
            out_str(&body, "-");
        }
    }
    out_arr(out, 2L * n);
    if (body.n)
        model_buf_add(out, body.p, body.n);
    model_buf_free(&body);
}

static void cmd_exec(model *m, int conn, model_buf *out)
{
    model_conn *c = &m->conns[conn];
    if (!c->in_multi) {
        out_err(out, "ERR EXEC without MULTI");
        return;
    }
    int abort_watch = c->watch_overflow;
    for (int i = 0; i < c->nwatch; i++) {
        model_key *k = &m->keys[c->watch[i].key];
        slot_of(m, k->name, strlen(k->name), 0); /* an expiry counts as a change */
        if (k->ver != c->watch[i].ver)
            abort_watch = 1;
    }
    if (c->multi_failed) {
        out_err(out, "EXECABORT Transaction discarded because of previous errors.");
    } else if (abort_watch) {
        model_buf_add(out, "*-1\r\n", 5);
    } else {
        out_arr(out, c->nqueue);
        c->in_multi = 0; /* the queued commands run as themselves */
        for (int i = 0; i < c->nqueue; i++) {
            model_cmd *q = &c->queue[i];
            model_buf tmp = {0};
            const struct cmd_def *d = check(m, &tmp, q->argc, (const char *const *)q->argv,
                                            q->len);
            if (d)
                run(m, conn, d, q->argc, (const char *const *)q->argv, q->len, &tmp);
            model_buf_add(out, tmp.p, tmp.n);
            model_buf_free(&tmp);
        }
    }
    for (int i = 0; i < c->nqueue; i++)
        for (int j = 0; j < c->queue[i].argc; j++)
            free(c->queue[i].argv[j]);
    c->nqueue = 0;
    c->in_multi = 0;
    c->multi_failed = 0;
    c->nwatch = 0;
    c->watch_overflow = 0;
}

static void run(model *m, int conn, const struct cmd_def *d, int argc, const char *const *argv,
                const size_t *len, model_buf *out)
{
    model_conn *c = &m->conns[conn];
    model_key *k;
    long long v;
    switch (d->id) {
    case C_GET:
        k = slot_of(m, argv[1], len[1], 0);
        if (m->on_read) {
            char name[MODEL_KEY_MAX];
            size_t n = len[1] < MODEL_KEY_MAX - 1 ? len[1] : MODEL_KEY_MAX - 1;
            memcpy(name, argv[1], n);
            name[n] = '\0';
            m->on_read(m->on_write_arg, m, c->client, name, k);
        }
        if (k && k->exists)
            out_bulk(out, k->val, k->len);
        else
            out_nil(out);
        return;
    case C_SET:
        cmd_set(m, conn, argc, argv, len, out);
        return;
    case C_SETNX:
        k = slot_of(m, argv[1], len[1], 1);
        volatile20(m, conn, k);
        if (k->exists) {
            out_int(out, 0);
        } else {
            kset(m, conn, k, argv[2], len[2], "SETNX");
            out_int(out, 1);
        }
        return;
    case C_GETSET: {
        k = slot_of(m, argv[1], len[1], 1);
        char old[MODEL_VAL_MAX];
        size_t oldn = k->len;
        int had = k->exists;
        memcpy(old, k->val, oldn);
        kset(m, conn, k, argv[2], len[2], "GETSET");
        if (had)
            out_bulk(out, old, oldn);
        else
            out_nil(out);
        return;
    }
    case C_DEL: {
        int n = 0;
        for (int i = 1; i < argc; i++) {
            k = slot_of(m, argv[i], len[i], 0);
            if (k && k->exists) {
                kdel(m, conn, k, "DEL");
                n++;
            }
        }
        out_int(out, n);
        return;
    }
    case C_EXPIRE:
    case C_PEXPIRE:
        if (to_ll(argv[2], len[2], &v) != 0) {
            out_err(out, "ERR value is not an integer or out of range");
            return;
        }
        k = slot_of(m, argv[1], len[1], 0);
        if (!k || !k->exists) {
            out_int(out, 0);
            return;
        }
        if (v <= 0) {
            kdel(m, conn, k, d->id == C_EXPIRE ? "EXPIRE<=0" : "PEXPIRE<=0");
            out_int(out, 1);
            return;
        }
        if (!ver_ge(m, 2, 2, 0) && k->expire_ms) {
            out_int(out, 0);
            return;
        }
        kexpire_ms(m, conn, k, d->id == C_EXPIRE ? v * 1000 : v,
                   d->id == C_EXPIRE ? "EXPIRE" : "PEXPIRE");
        out_int(out, 1);
        return;
    case C_TTL:
    case C_PTTL: {
        k = slot_of(m, argv[1], len[1], 0);
        long long p = pttl_of(m, k);
        if (p == -2 && !ver_ge(m, 2, 8, 0))
            p = -1;
        if (p >= 0 && d->id == C_TTL)
            p = ver_ge(m, 2, 6, 0) ? (p + 500) / 1000 : p / 1000;
        out_int(out, p);
        return;
    }
    case C_INCR: {
        k = slot_of(m, argv[1], len[1], 1);
        volatile20(m, conn, k);
        if (incr_key(m, conn, k, 1, &v) != 0)
            out_err(out, "ERR value is not an integer or out of range");
        else
            out_int(out, v);
        return;
    }
    case C_INCRBY: {
        long long by = 0;
        if (to_ll(argv[2], len[2], &by) != 0) {
            out_err(out, "ERR value is not an integer or out of range");
            return;
        }
        k = slot_of(m, argv[1], len[1], 1);
        volatile20(m, conn, k);
        if (incr_key(m, conn, k, by, &v) != 0)
            out_err(out, "ERR value is not an integer or out of range");
        else
            out_int(out, v);
        return;
    }
    case C_EXISTS: {
        int n = 0;
        for (int i = 1; i < argc; i++) {
            k = slot_of(m, argv[i], len[i], 0);
            n += k && k->exists;
        }
        out_int(out, n);
        return;
    }
    case C_TYPE:
        k = slot_of(m, argv[1], len[1], 0);
        out_status(out, k && k->exists ? "string" : "none");
        return;
    case C_TIME: {
        char s[32], us[32];
        snprintf(s, sizeof s, "%lld", m->now_ms / 1000);
        snprintf(us, sizeof us, "%lld", (m->now_ms % 1000) * 1000);
        out_arr(out, 2);
        out_str(out, s);
        out_str(out, us);
        return;
    }
    case C_WATCH:
        if (c->in_multi) {
            out_err(out, "ERR WATCH inside MULTI is not allowed");
            return;
        }
        for (int i = 1; i < argc; i++) {
            k = slot_of(m, argv[i], len[i], 1);
            if (!k || c->nwatch >= MODEL_WATCH) {
                c->watch_overflow = 1;
                continue;
            }
            c->watch[c->nwatch].key = (int)(k - m->keys);
            c->watch[c->nwatch].ver = k->ver;
            c->nwatch++;
        }
        out_ok(out);
        return;
    case C_UNWATCH:
        c->nwatch = 0;
        c->watch_overflow = 0;
        out_ok(out);
        return;
    case C_MULTI:
        if (c->in_multi) {
            out_err(out, "ERR MULTI calls can not be nested");
            return;
        }
        c->in_multi = 1;
        c->nqueue = 0;
        c->multi_failed = 0;
        out_ok(out);
        return;
    case C_EXEC:
        cmd_exec(m, conn, out);
        return;
    case C_DISCARD:
        if (!c->in_multi) {
            out_err(out, "ERR DISCARD without MULTI");
            return;
        }
        for (int i = 0; i < c->nqueue; i++)
            for (int j = 0; j < c->queue[i].argc; j++)
                free(c->queue[i].argv[j]);
        c->nqueue = 0;
        c->in_multi = 0;
        c->multi_failed = 0;
        c->nwatch = 0;
        c->watch_overflow = 0;
        out_ok(out);
        return;
    case C_EVAL:
    case C_EVALSHA:
        cmd_eval(m, conn, d->id == C_EVALSHA, argc, argv, len, out);
        return;
    case C_SCRIPT:
        cmd_script(m, argc, argv, len, out);
        return;
    case C_PUBLISH:
        out_int(out, publish(m, argv[1], len[1], argv[2], len[2]));
        return;
    case C_SUBSCRIBE:
        for (int i = 1; i < argc; i++) {
            size_t n = len[i] < MODEL_KEY_MAX - 1 ? len[i] : MODEL_KEY_MAX - 1;
            memcpy(c->sub, argv[i], n);
            c->sub[n] = '\0';
            out_arr(out, 3);
            out_str(out, "subscribe");
            out_bulk(out, argv[i], len[i]);
            out_int(out, 1);
        }
        return;
    case C_UNSUBSCRIBE:
        out_arr(out, 3);
        out_str(out, "unsubscribe");
        if (c->sub[0])
            out_str(out, c->sub);
        else
            out_nil(out);
        out_int(out, 0);
        c->sub[0] = '\0';
        return;
    case C_DELIFEQ:
    case C_DELEX: {
        k = slot_of(m, argv[1], len[1], 0);
        int ifne = 0;
        const char *cmp = NULL;
        size_t cmpn = 0;
        if (d->id == C_DELIFEQ) {
            cmp = argv[2];
            cmpn = len[2];
        } else if (argc == 4 && len[2] == 4 &&
                   (strncasecmp(argv[2], "IFEQ", 4) == 0 || strncasecmp(argv[2], "IFNE", 4) == 0)) {
            ifne = strncasecmp(argv[2], "IFNE", 4) == 0;
            cmp = argv[3];
            cmpn = len[3];
        } else if (argc != 2) {
            out_err(out, "ERR syntax error");
            return;
        }
        if (!k || !k->exists) {
            out_int(out, 0);
            return;
        }
        int ok = cmp ? (eq(k, cmp, cmpn) != ifne) : 1;
        if (ok)
            kdel(m, conn, k, d->id == C_DELIFEQ ? "DELIFEQ" : "DELEX");
        out_int(out, ok);
        return;
    }
    case C_INFO:
        cmd_info(m, out);
        return;
    case C_PING:
        if (argc > 1)
            out_bulk(out, argv[1], len[1]);
        else
            out_status(out, "PONG");
        return;
    case C_COMMAND:
        cmd_command(m, argc, argv, len, out);
        return;
    case C_SELECT:
        out_ok(out);
        return;
    case C_ECHO:
        out_bulk(out, argv[1], len[1]);
        return;
    case C_PSETEX:
    case C_SETEX:
        if (to_ll(argv[2], len[2], &v) != 0) {
            out_err(out, "ERR value is not an integer or out of range");
            return;
        }
        if (v <= 0) {
            out_err(out, ver_ge(m, 7, 0, 0)
                             ? (d->id == C_SETEX ? "ERR invalid expire time in 'setex' command"
                                                 : "ERR invalid expire time in 'psetex' command")
                             : "ERR invalid expire time in SETEX");
            return;
        }
        k = slot_of(m, argv[1], len[1], 1);
        kset(m, conn, k, argv[3], len[3], d->id == C_SETEX ? "SETEX" : "PSETEX");
        kexpire_ms(m, conn, k, d->id == C_SETEX ? v * 1000 : v, "SETEX ttl");
        out_ok(out);
        return;
    case C_FLUSHALL:
        for (int i = 0; i < MODEL_KEYS; i++) {
            if (m->keys[i].used && m->keys[i].exists)
                kdel(m, conn, &m->keys[i], "FLUSHALL");
        }
        out_ok(out);
        return;
    case C_DBSIZE: {
        int n = 0;
        for (int i = 0; i < MODEL_KEYS; i++)
            if (m->keys[i].used && slot_of(m, m->keys[i].name, strlen(m->keys[i].name), 0)->exists)
                n++;
        out_int(out, n);
        return;
    }
    case C_WAIT: {
        long long want, tmo;
        if (to_ll(argv[1], len[1], &want) != 0 || to_ll(argv[2], len[2], &tmo) != 0 || tmo < 0) {
            out_err(out, "ERR timeout is not an integer or out of range");
            return;
        }
        int acked = m->replica_down ? 0 : m->replicas;
        /* Too few: the server answers when the timeout ends (0: never
         * for WAIT, here the model's hour). */
        if (acked < want)
            m->reply_delay_ms = tmo > 0 ? tmo : 3600000;
        out_int(out, acked);
        return;
    }
    case C_AUTH:
        out_err(out, ver_ge(m, 6, 0, 0)
                         ? "ERR AUTH <password> called without any password configured for the "
                           "default user. Are you sure your configuration is correct?"
                         : "ERR Client sent AUTH, but no password is set");
        return;
    }
}

void model_exec(model *m, int conn, int argc, const char *const *argv, const size_t *len,
                model_buf *out)
{
    model_conn *c = &m->conns[conn];
    m->commands++;
    if (argc < 1)
        return;
    if (c->sub[0]) {
        int ok = (len[0] == 9 && strncasecmp(argv[0], "SUBSCRIBE", 9) == 0) ||
                 (len[0] == 11 && strncasecmp(argv[0], "UNSUBSCRIBE", 11) == 0) ||
                 (len[0] == 4 && strncasecmp(argv[0], "PING", 4) == 0);
        if (!ok) {
            out_err(out, "ERR only (P)SUBSCRIBE / (P)UNSUBSCRIBE / PING / QUIT allowed in this "
                         "context");
            return;
        }
    }
    const struct cmd_def *d = NULL;
    model_buf err = {0};
    d = check(m, &err, argc, argv, len);
    if (c->in_multi && !(d && (d->id == C_EXEC || d->id == C_DISCARD || d->id == C_MULTI ||
                               d->id == C_WATCH))) {
        if (!d) {
            /* 2.6.5 and later remember the error and refuse the EXEC;
             * before, the transaction goes on without the command. */
            if (ver_ge(m, 2, 6, 5))
                c->multi_failed = 1;
            model_buf_add(out, err.p, err.n);
        } else if (c->nqueue >= MODEL_QUEUE || argc > MODEL_ARGS) {
            out_err(out, "ERR the simulator's model queues at most 16 commands");
            c->multi_failed = 1;
        } else {
            model_cmd *q = &c->queue[c->nqueue++];
            q->argc = argc;
            for (int i = 0; i < argc; i++) {
                q->argv[i] = malloc(len[i] + 1);
                if (!q->argv[i])
                    abort();
                memcpy(q->argv[i], argv[i], len[i]);
                q->argv[i][len[i]] = '\0';
                q->len[i] = len[i];
            }
            out_status(out, "QUEUED");
        }
        model_buf_free(&err);
        return;
    }
    if (!d) {
        model_buf_add(out, err.p, err.n);
        model_buf_free(&err);
        return;
    }
    model_buf_free(&err);
    run(m, conn, d, argc, argv, len, out);
    if (m->replicas > 0 && !m->replica_down)
        memcpy(m->rkeys, m->keys, sizeof m->rkeys);
}

const char *model_replica_get(model *m, const char *name, long long *pttl)
{
    *pttl = -2;
    for (int i = 0; i < MODEL_KEYS; i++) {
        model_key *k = &m->rkeys[i];
        if (!k->used || strcmp(k->name, name) != 0)
            continue;
        if (!k->exists || expired(m, k))
            return NULL;
        *pttl = pttl_of(m, k);
        return k->val;
    }
    return NULL;
}

void model_replica_set(model *m, int down)
{
    m->replica_down = down;
    if (!down)
        memcpy(m->rkeys, m->keys, sizeof m->rkeys);
}

void model_init(model *m, const model_personality *p, long long now_ms)
{
    memset(m, 0, sizeof *m);
    m->p = *p;
    m->now_ms = now_ms;
}

void model_flush(model *m)
{
    for (int i = 0; i < MODEL_KEYS; i++) {
        if (m->keys[i].used) {
            m->keys[i].exists = 0;
            m->keys[i].expire_ms = 0;
            m->keys[i].ver++;
            m->keys[i].author = -1;
        }
    }
    m->nscripts = 0;
    if (m->replicas > 0 && !m->replica_down)
        memcpy(m->rkeys, m->keys, sizeof m->rkeys);
}

int model_conn_open(model *m, int client)
{
    for (int i = 0; i < MODEL_CONNS; i++) {
        if (!m->conns[i].open) {
            memset(&m->conns[i], 0, sizeof m->conns[i]);
            m->conns[i].open = 1;
            m->conns[i].client = client;
            return i;
        }
    }
    return -1;
}

void model_conn_close(model *m, int c)
{
    model_conn *mc = &m->conns[c];
    for (int i = 0; i < mc->nqueue; i++)
        for (int j = 0; j < mc->queue[i].argc; j++)
            free(mc->queue[i].argv[j]);
    model_buf_free(&mc->push);
    memset(mc, 0, sizeof *mc);
}
