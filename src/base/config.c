/*
 * Configuration: defaults, one table of settings shared by the libconfig
 * file loader and relock_config_set(), and relock_config_set_url() (the
 * URL itself is read in address.c; design.md §11).
 *
 * Every setting is checked against its type and range and refused when
 * out of range; nothing is clamped, and unknown settings are errors so a
 * misspelt name is never silently ignored.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <libconfig.h>

#include "base.h"

enum stype { T_LONG, T_LLONG, T_BOOL, T_STR, T_ENUM, T_GROUP, T_SERVERS, T_ADDRS, T_PEERS };

typedef struct setting {
    const char *name; /* dotted, without "relock." */
    enum stype type;
    size_t off;       /* into relock__settings */
    long long min, max;
    size_t size;      /* T_STR: buffer size */
    const char *const *names; /* T_ENUM: accepted words, index = value */
    unsigned set; /* a RELOCK__SET_* bit: legacy.peer leaves the setting as given */
} setting;

#define OFF(f) offsetof(relock__settings, f)

static const char *const mode_names[] = {"auto", "legacy", "bridge", "modern", NULL};
static const char *const unit_names[] = {"s", "ms", NULL};
static const char *const clock_names[] = {"local", "server", NULL};
static const char *const values_names[] = {"integer", "fractional", NULL};
static const char *const reader_names[] = {"whole", "fractional", "both", NULL};

static const setting settings[] = {
    {"mode", T_ENUM, OFF(mode), 0, 0, 0, mode_names, 0},
    {"key_prefix", T_STR, OFF(key_prefix), 0, 0, RELOCK__PREFIX_MAX, NULL, RELOCK__SET_PREFIX},
    {"ttl_ms", T_LLONG, OFF(ttl_ms), 1, RELOCK_DURATION_MAX_MS, 0, NULL, 0},
    {"servers", T_SERVERS, OFF(servers), 0, 0, 0, NULL, 0},
    {"connect_timeout_ms", T_LLONG, OFF(connect_timeout_ms), 1, 3600000, 0, NULL, 0},
    {"command_timeout_ms", T_LLONG, OFF(command_timeout_ms), 1, 3600000, 0, NULL, 0},
    {"wait", T_GROUP, 0, 0, 0, 0, NULL, 0},
    {"wait.max_ms", T_LLONG, OFF(wait.max_ms), -1, RELOCK_DURATION_MAX_MS, 0, NULL, 0},
    {"wait.backoff_min_ms", T_LLONG, OFF(wait.backoff_min_ms), 1, 3600000, 0, NULL, 0},
    {"wait.backoff_max_ms", T_LLONG, OFF(wait.backoff_max_ms), 1, 3600000, 0, NULL, 0},
    {"wait.notify", T_BOOL, OFF(wait.notify), 0, 1, 0, NULL, 0},
    {"fencing", T_BOOL, OFF(fencing), 0, 1, 0, NULL, 0},
    {"owner_info", T_BOOL, OFF(owner_info), 0, 1, 0, NULL, 0},
    {"durability", T_GROUP, 0, 0, 0, 0, NULL, 0},
    {"durability.replicas", T_LONG, OFF(durability.replicas), 0, 1000, 0, NULL, 0},
    {"durability.aof", T_BOOL, OFF(durability.aof), 0, 1, 0, NULL, 0},
    {"durability.timeout_ms", T_LLONG, OFF(durability.timeout_ms), 1, 3600000, 0, NULL, 0},
    {"lock_delay_ms", T_LLONG, OFF(lock_delay_ms), 0, RELOCK_DURATION_MAX_MS, 0, NULL, 0},
    {"legacy", T_GROUP, 0, 0, 0, 0, NULL, 0},
    {"legacy.clock_unit", T_ENUM, OFF(legacy.unit_ms), 0, 0, 0, unit_names, RELOCK__SET_UNIT},
    {"legacy.expiry_offset", T_LONG, OFF(legacy.expiry_offset), 0, 1000000, 0, NULL,
     RELOCK__SET_OFFSET},
    {"legacy.skew_margin_ms", T_LLONG, OFF(legacy.skew_margin_ms), 0, 3600000, 0, NULL, 0},
    {"legacy.gc_expire", T_BOOL, OFF(legacy.gc_expire), 0, 1, 0, NULL, 0},
    {"legacy.clock", T_ENUM, OFF(legacy.clock_server), 0, 0, 0, clock_names, 0},
    {"legacy.peer", T_PEERS, OFF(legacy.peers), 0, 0, 0, NULL, 0},
    {"legacy.values", T_ENUM, OFF(legacy.frac_values), 0, 0, 0, values_names, RELOCK__SET_VALUES},
    {"legacy.reader_clock", T_ENUM, OFF(legacy.reader_clock), 0, 0, 0, reader_names,
     RELOCK__SET_READER},
    {"bridge", T_GROUP, 0, 0, 0, 0, NULL, 0},
    {"bridge.value_suffix", T_BOOL, OFF(bridge.value_suffix), 0, 1, 0, NULL, 0},
    {"migration", T_GROUP, 0, 0, 0, 0, NULL, 0},
    {"migration.legacy_clients", T_BOOL, OFF(migration.legacy_clients), 0, 1, 0, NULL, 0},
    {"migration.quiet_window_ms", T_LLONG, OFF(migration.quiet_window_ms), 0,
     100 * RELOCK_DURATION_MAX_MS, 0, NULL, 0},
    {"sentinel", T_GROUP, 0, 0, 0, 0, NULL, 0},
    {"sentinel.master", T_STR, OFF(sentinel.master), 0, 0, RELOCK__MASTER_NAME_MAX, NULL, 0},
    {"sentinel.addrs", T_ADDRS, OFF(sentinel), 0, 0, 0, NULL, 0},
    {"cluster", T_GROUP, 0, 0, 0, 0, NULL, 0},
    {"cluster.slot_map", T_BOOL, OFF(cluster.slot_map), 0, 1, 0, NULL, 0},
};

/* Every field not named here is 0 by default (mode "auto", no replicas...). */
void relock__settings_default(relock__settings *s)
{
    *s = (relock__settings){
        .ttl_ms = 30000,
        .servers = {{.host = "127.0.0.1", .port = 6379}},
        .nservers = 1,
        .connect_timeout_ms = 1000,
        .command_timeout_ms = 1000,
        .wait = {.max_ms = -1, .backoff_min_ms = 2, .backoff_max_ms = 200, .notify = 1},
        .fencing = 1,
        .durability.timeout_ms = 1000,
        .legacy = {.expiry_offset = 1, .readers = RELOCK__READER_WHOLE},
        .migration = {.legacy_clients = 1, .quiet_window_ms = 604800000LL},
        .cluster.slot_map = 1,
    };
}

relock_config *relock_config_new(void)
{
    relock_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return NULL;
    relock__settings_default(&cfg->s);
    relock__err_clear(&cfg->err);
    return cfg;
}

void relock_config_free(relock_config *cfg)
{
    if (!cfg)
        return;
    /* Passwords live in here: do not leave them in freed memory. */
    memset(cfg, 0, sizeof *cfg);
    free(cfg);
}

const relock_error *relock_config_error(const relock_config *cfg)
{
    return cfg ? &cfg->err.pub : &relock__null_handle_error;
}

/* The getters of relock.h: a NULL configuration answers none. */
#define CONFIG_GETTER(type, name, field, none)                                                 \
    type relock_config_##name(const relock_config *cfg)                                        \
    {                                                                                          \
        return cfg ? cfg->s.field : none;                                                      \
    }
CONFIG_GETTER(long long, ttl_ms, ttl_ms, -1)
CONFIG_GETTER(long long, wait_ms, wait.max_ms, 0)
CONFIG_GETTER(relock_mode, mode, mode, RELOCK_MODE_AUTO)
CONFIG_GETTER(const char *, key_prefix, key_prefix, "")

/* Adds the profile named name[0..len) to legacy.peer. */
static int add_peer(relock__settings *s, const char *name, size_t len, char *why, size_t whylen)
{
    int i = relock__peer_find(name, len);
    if (i < 0) {
        char known[512];
        relock__peer_names(known, sizeof known);
        return relock__reason(why, whylen, "legacy.peer: no profile \"%.*s\" (known: %s)",
                              (int)(len < 60 ? len : 60), name, known);
    }
    if (s->legacy.npeers == RELOCK__PEERS_MAX)
        return relock__reason(why, whylen, "legacy.peer names more than %d profiles",
                              RELOCK__PEERS_MAX);
    s->legacy.peers[s->legacy.npeers++] = i;
    return 0;
}

/* One entry of a comma-separated list starting at p: its text, with trim
 * without surrounding blanks, in [*b, *e); returns where the next entry
 * starts, or NULL after the last. */
static const char *list_entry(const char *p, int trim, const char **b, const char **e)
{
    const char *comma = strchr(p, ',');
    const char *end = comma ? comma : p + strlen(p);
    while (trim && p < end && (*p == ' ' || *p == '\t'))
        p++;
    while (trim && end > p && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    *b = p;
    *e = end;
    return comma ? comma + 1 : NULL;
}

/* legacy.peer as text: profile names separated by commas. */
static int set_peers(relock__settings *s, const char *value, char *why, size_t whylen)
{
    s->legacy.npeers = 0;
    for (const char *next = value; next;) {
        const char *p, *e;
        next = list_entry(next, 1, &p, &e);
        if (add_peer(s, p, (size_t)(e - p), why, whylen) != 0)
            return -1;
    }
    return 0;
}

static const setting *find_setting(const char *name)
{
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
        if (strcmp(settings[i].name, name) == 0)
            return &settings[i];
    return NULL;
}

/* Stores a number into the field of st after the range check. */
static int store_number(relock__settings *s, const setting *st, long long v, char *why,
                        size_t whylen)
{
    if (v < st->min || v > st->max)
        return relock__reason(why, whylen, "%s must be between %lld and %lld, not %lld",
                              st->name, st->min, st->max, v);
    char *field = (char *)s + st->off;
    if (st->type == T_LONG)
        *(long *)(void *)field = (long)v;
    else if (st->type == T_LLONG)
        *(long long *)(void *)field = v;
    else
        *(int *)(void *)field = (int)v;
    return 0;
}

static int store_string(relock__settings *s, const setting *st, const char *v, char *why,
                        size_t whylen)
{
    char *field = (char *)s + st->off;
    /* Both strings, key_prefix and sentinel.master, are single words: a
     * prefix without a space keeps relock's own keys apart (keys.c). */
    if (st->type == T_STR)
        for (const char *p = v; *p; p++)
            if ((unsigned char)*p <= ' ' || *p == 0x7f)
                return relock__reason(why, whylen,
                                      "%s may not contain spaces or control characters", st->name);
    if (st->type == T_ENUM) {
        for (int i = 0; st->names[i]; i++) {
            if (strcmp(st->names[i], v) == 0) {
                *(int *)(void *)field = i;
                return 0;
            }
        }
        int n = snprintf(why, whylen, "%s must be one of", st->name);
        for (int i = 0; st->names[i] && n > 0 && (size_t)n < whylen; i++)
            n += snprintf(why + n, whylen - (size_t)n, "%s \"%s\"", i ? "," : "", st->names[i]);
        if (n > 0 && (size_t)n < whylen)
            snprintf(why + n, whylen - (size_t)n, ", not \"%.40s\"", v);
        return -1;
    }
    size_t len = strlen(v);
    if (len >= st->size)
        return relock__reason(why, whylen, "%s is too long (%zu bytes, at most %zu)", st->name,
                              len, st->size - 1);
    memcpy(field, v, len + 1);
    return 0;
}

/* sentinel.addrs as text: "host:port,host:port" (a blank is refused as
 * the host's), or "" for none. */
static int set_addrs(relock__settings *s, const char *value, char *why, size_t whylen)
{
    relock__addr addrs[RELOCK__MAX_SENTINELS];
    int n = 0;
    char one[160];
    for (const char *next = *value ? value : NULL; next; n++) {
        const char *p, *e;
        next = list_entry(next, 0, &p, &e);
        if (n == RELOCK__MAX_SENTINELS)
            return relock__reason(why, whylen, "sentinel.addrs lists more than %d addresses",
                                  RELOCK__MAX_SENTINELS);
        if (relock__parse_addr(p, (size_t)(e - p), &addrs[n], one, sizeof one) != 0)
            return relock__reason(why, whylen, "sentinel.addrs: %s", one);
    }
    memset(s->sentinel.addrs, 0, sizeof s->sentinel.addrs);
    memcpy(s->sentinel.addrs, addrs, (size_t)n * sizeof addrs[0]);
    s->sentinel.naddrs = n;
    return 0;
}

/*
 * servers as text: one URL or several separated by commas ("redis://a:6379,
 * redis://b:6379, unix:///run/redis.sock"), each as -u takes it; a comma in
 * a password is written %2C.  All or nothing: a bad entry changes nothing.
 */
static int set_servers(relock__settings *s, const char *value, char *why, size_t whylen)
{
    relock__server servers[RELOCK__MAX_SERVERS];
    int n = 0, rc = 0;
    for (const char *next = value; next && rc == 0; n++) {
        const char *p, *e;
        next = list_entry(next, 1, &p, &e);
        char one[1024], reason[192];
        if (e == p)
            rc = relock__reason(why, whylen,
                                "servers: entry %d is empty (URLs separated by commas)", n + 1);
        else if (n == RELOCK__MAX_SERVERS)
            rc = relock__reason(why, whylen, "servers lists more than %d servers",
                                RELOCK__MAX_SERVERS);
        else if ((size_t)(e - p) >= sizeof one)
            rc = relock__reason(why, whylen, "servers: entry %d is too long", n + 1);
        if (rc != 0)
            break;
        snprintf(one, sizeof one, "%.*s", (int)(e - p), p);
        if (relock__parse_url(one, &servers[n], reason, sizeof reason) != 0)
            rc = relock__reason(why, whylen, "servers: entry %d: %s", n + 1, reason);
        memset(one, 0, sizeof one); /* it may hold a password */
    }
    if (rc == 0) {
        memset(s->servers, 0, sizeof s->servers);
        memcpy(s->servers, servers, (size_t)n * sizeof servers[0]);
        s->nservers = n;
    }
    memset(servers, 0, sizeof servers);
    return rc;
}

/* A sentinel-monitored master is one server found by name: it does not
 * mix with a quorum of several. */
static int sentinel_conflict(const relock__settings *s, char *why, size_t whylen)
{
    if (relock__sentinel_on(s) && s->nservers > 1)
        return relock__reason(
            why, whylen,
            "sentinel cannot be combined with several servers (%d listed): list one or none",
            s->nservers);
    return 0;
}

static int set_text(relock__settings *s, const char *name, const char *value, char *why,
                    size_t whylen)
{
    const setting *st = find_setting(name);
    if (!st)
        return relock__reason(why, whylen, "unknown setting \"%.80s\"", name);
    long long n;
    switch (st->type) {
    case T_LONG:
    case T_LLONG:
        if (relock__parse_ll(value, &n) != 0)
            return relock__reason(why, whylen, "%s must be a whole number, not \"%.40s\"", name,
                                  value);
        return store_number(s, st, n, why, whylen);
    case T_BOOL:
        if (strcmp(value, "true") != 0 && strcmp(value, "false") != 0)
            return relock__reason(why, whylen, "%s must be true or false, not \"%.40s\"", name,
                                  value);
        return store_number(s, st, strcmp(value, "true") == 0, why, whylen);
    case T_STR:
    case T_ENUM:
        return store_string(s, st, value, why, whylen);
    case T_GROUP:
        return relock__reason(why, whylen, "%s is a group, set its members", name);
    case T_SERVERS:
        return set_servers(s, value, why, whylen);
    case T_ADDRS:
        return set_addrs(s, value, why, whylen);
    case T_PEERS:
        return set_peers(s, value, why, whylen);
    }
    return -1;
}

relock_status relock_config_set(relock_config *cfg, const char *name, const char *value)
{
    if (!cfg)
        return RELOCK_EINVAL;
    relock__err_clear(&cfg->err);
    if (!name || !value)
        return RELOCK__FAIL(&cfg->err, RELOCK_EINVAL, "config: name and value are required");
    char why[256];
    /* Changed on a copy: a refused value leaves the configuration as it was. */
    relock__settings next = cfg->s;
    if (strcmp(name, "mode") == 0)
        next.mode_line = 0; /* no longer the file's */
    if (strcmp(name, "servers") == 0)
        next.servers_line = 0;
    if (set_text(&next, name, value, why, sizeof why) != 0)
        return RELOCK__FAIL(&cfg->err, RELOCK_ECONFIG, "config: %s", why);
    next.legacy.set |= find_setting(name)->set; /* set_text() found it */
    if (sentinel_conflict(&next, why, sizeof why) != 0 ||
        relock__peers_apply(&next, why, sizeof why) != 0)
        return RELOCK__FAIL(&cfg->err, RELOCK_ECONFIG, "config: %s", why);
    if (next.wait.backoff_min_ms > next.wait.backoff_max_ms)
        return RELOCK__FAIL(&cfg->err, RELOCK_ECONFIG,
                            "config: wait.backoff_min_ms (%lld) exceeds wait.backoff_max_ms (%lld)",
                            next.wait.backoff_min_ms, next.wait.backoff_max_ms);
    cfg->s = next;
    memset(&next, 0, sizeof next); /* it may hold a password */
    return RELOCK_OK;
}

/* ------------------------------------------------------------ the file */

typedef struct loader {
    relock_config *cfg;
    const char *path;
    int failed;
} loader;

/* Records "FILE:LINE: reason" at setting at (NULL: the file as a whole);
 * returns -1. */
static int load_fail(loader *ld, const config_setting_t *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int load_fail(loader *ld, const config_setting_t *at, const char *fmt, ...)
{
    char why[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    ld->failed = 1;
    unsigned line = at ? config_setting_source_line(at) : 1;
    RELOCK__FAIL(&ld->cfg->err, RELOCK_ECONFIG, "%s:%u: %s", ld->path, line, why);
    return -1;
}

static const char *type_word(int t)
{
    static const char *const words[] = {
        [CONFIG_TYPE_GROUP] = "a group",   [CONFIG_TYPE_INT] = "an integer",
        [CONFIG_TYPE_INT64] = "an integer", [CONFIG_TYPE_FLOAT] = "a float",
        [CONFIG_TYPE_STRING] = "a string",  [CONFIG_TYPE_BOOL] = "a boolean",
        [CONFIG_TYPE_ARRAY] = "an array",   [CONFIG_TYPE_LIST] = "a list"};
    int known = t >= 0 && t < (int)(sizeof words / sizeof words[0]) && words[t];
    return known ? words[t] : "something else";
}

/* host, username or password of a server in the file into srv. */
static int load_server_text(loader *ld, config_setting_t *m, const char *name,
                            relock__server *srv)
{
    int t = config_setting_type(m);
    if (t != CONFIG_TYPE_STRING)
        return load_fail(ld, m, "servers: %s must be a string, not %s", name, type_word(t));
    const char *v = config_setting_get_string(m);
    int is_host = strcmp(name, "host") == 0;
    char *dst = is_host ? srv->host : strcmp(name, "username") == 0 ? srv->username : srv->password;
    size_t cap = is_host ? sizeof srv->host : sizeof srv->username;
    if (strlen(v) >= cap || (is_host && !*v))
        return load_fail(ld, m, "servers: %s is empty or too long", name);
    /* "127.0.0.1:6472" would be looked up as a host name and fail only at
     * connect, far from the line; one colon is no IPv6 address (those have
     * two or more).  "[::1]:6472", as a URL writes it, is no host either:
     * the address is what the brackets hold. */
    const char *colon = is_host ? strchr(v, ':') : NULL;
    const char *bracket = is_host && v[0] == '[' ? strstr(v, "]:") : NULL;
    if (bracket || (colon && !strchr(colon + 1, ':'))) {
        const char *h = bracket ? v + 1 : v, *end = bracket ? bracket : colon;
        return load_fail(ld, m, "servers: host \"%.80s\" holds a port: write host = \"%.*s\"; "
                                "port = %.8s;",
                         v, (int)(end - h < 80 ? end - h : 80), h, end + (bracket ? 2 : 1));
    }
    memcpy(dst, v, strlen(v) + 1);
    return 0;
}

static int load_server(loader *ld, config_setting_t *g, relock__server *srv)
{
    if (config_setting_type(g) != CONFIG_TYPE_GROUP)
        return load_fail(ld, g,
                         "each entry of servers must be a group { host = ...; port = ...; }");
    *srv = (relock__server){.host = "127.0.0.1", .port = 6379};
    config_setting_t *path = config_setting_get_member(g, "path");
    if (path && (config_setting_get_member(g, "host") || config_setting_get_member(g, "port")))
        return load_fail(ld, path, "servers: path (a unix socket) excludes host and port");
    int n = config_setting_length(g);
    for (int i = 0; i < n; i++) {
        config_setting_t *m = config_setting_get_elem(g, (unsigned)i);
        const char *name = config_setting_name(m);
        int t = config_setting_type(m);
        if (strcmp(name, "path") == 0) {
            const char *v = t == CONFIG_TYPE_STRING ? config_setting_get_string(m) : NULL;
            if (!v || v[0] != '/' || strlen(v) < 2 || strlen(v) > 107)
                return load_fail(ld, m, "servers: path must be a unix socket's absolute path, "
                                        "as a string of at most 107 bytes");
            memcpy(srv->host, v, strlen(v) + 1);
            srv->port = 0;
        } else if (strcmp(name, "host") == 0 || strcmp(name, "username") == 0 ||
                   strcmp(name, "password") == 0) {
            if (load_server_text(ld, m, name, srv) != 0)
                return -1;
        } else if (strcmp(name, "port") == 0 || strcmp(name, "db") == 0) {
            int is_int = t == CONFIG_TYPE_INT || t == CONFIG_TYPE_INT64;
            long long v = is_int ? config_setting_get_int64(m) : 0;
            int isport = strcmp(name, "port") == 0;
            if (!is_int || (isport && (v < 1 || v > 65535)) ||
                (!isport && (v < 0 || v > 1000000)))
                return load_fail(ld, m, "servers: %s must be an integer %s", name,
                                 isport ? "from 1 to 65535" : "from 0");
            *(isport ? &srv->port : &srv->db) = (int)v;
        } else {
            return load_fail(ld, m, "unknown setting \"servers.%.60s\"", name);
        }
    }
    return 0;
}

static int load_servers(loader *ld, config_setting_t *list)
{
    if (config_setting_type(list) != CONFIG_TYPE_LIST)
        return load_fail(ld, list, "servers must be a list: ( { host = \"...\"; port = 6379; } )");
    int n = config_setting_length(list);
    if (n < 1 || n > RELOCK__MAX_SERVERS)
        return load_fail(ld, list, "servers must list 1 to %d servers, not %d",
                         RELOCK__MAX_SERVERS, n);
    for (int i = 0; i < n; i++) {
        config_setting_t *e = config_setting_get_elem(list, (unsigned)i);
        if (load_server(ld, e, &ld->cfg->s.servers[i]) != 0)
            return -1;
    }
    ld->cfg->s.nservers = n;
    ld->cfg->s.servers_line = (int)config_setting_source_line(list);
    return 0;
}

/* sentinel.addrs in the file: ( "host:port", ... ), or [ ... ]. */
static int load_addrs(loader *ld, config_setting_t *list)
{
    int t = config_setting_type(list);
    if (t != CONFIG_TYPE_LIST && t != CONFIG_TYPE_ARRAY)
        return load_fail(ld, list, "sentinel.addrs must be a list: ( \"host:port\", ... ), not %s",
                         type_word(t));
    int n = config_setting_length(list);
    if (n < 1 || n > RELOCK__MAX_SENTINELS)
        return load_fail(ld, list, "sentinel.addrs must list 1 to %d addresses, not %d",
                         RELOCK__MAX_SENTINELS, n);
    relock__settings *s = &ld->cfg->s;
    memset(s->sentinel.addrs, 0, sizeof s->sentinel.addrs);
    for (int i = 0; i < n; i++) {
        config_setting_t *e = config_setting_get_elem(list, (unsigned)i);
        int et = config_setting_type(e);
        char one[200];
        if (et != CONFIG_TYPE_STRING)
            return load_fail(ld, e, "sentinel.addrs: each entry must be a string \"host:port\", "
                                    "not %s", type_word(et));
        const char *v = config_setting_get_string(e);
        if (relock__parse_addr(v, strlen(v), &s->sentinel.addrs[i], one, sizeof one) != 0)
            return load_fail(ld, e, "sentinel.addrs: %s", one);
    }
    s->sentinel.naddrs = n;
    return 0;
}

/* legacy.peer in the file: one profile name, or a list of them. */
static int load_peers(loader *ld, config_setting_t *m)
{
    char why[768];
    relock__settings *s = &ld->cfg->s;
    int t = config_setting_type(m);
    if (t != CONFIG_TYPE_STRING && t != CONFIG_TYPE_LIST && t != CONFIG_TYPE_ARRAY)
        return load_fail(ld, m, "legacy.peer must be a profile's name or a list of them: "
                                "[ \"redis-mutex\", \"resque-lock-timeout\" ], not %s",
                         type_word(t));
    s->legacy.npeers = 0;
    /* One name is a list of one. */
    int n = t == CONFIG_TYPE_STRING ? 1 : config_setting_length(m);
    for (int i = 0; i < n; i++) {
        config_setting_t *e = t == CONFIG_TYPE_STRING ? m : config_setting_get_elem(m, (unsigned)i);
        const char *v =
            config_setting_type(e) == CONFIG_TYPE_STRING ? config_setting_get_string(e) : NULL;
        if (!v)
            return load_fail(ld, e, "legacy.peer: each entry must be a profile's name, a string");
        if (add_peer(s, v, strlen(v), why, sizeof why) != 0)
            return load_fail(ld, e, "%s", why);
    }
    return 0;
}

/* The libconfig types each kind of setting takes in the file, and the
 * words of its refusal; the lists check their own as they load. */
static const struct {
    int type, type2;
    const char *words;
} file_types[] = {
    [T_LONG] = {CONFIG_TYPE_INT, CONFIG_TYPE_INT64, "an integer"},
    [T_LLONG] = {CONFIG_TYPE_INT, CONFIG_TYPE_INT64, "an integer"},
    [T_BOOL] = {CONFIG_TYPE_BOOL, CONFIG_TYPE_BOOL, "true or false"},
    [T_STR] = {CONFIG_TYPE_STRING, CONFIG_TYPE_STRING, "a string"},
    [T_ENUM] = {CONFIG_TYPE_STRING, CONFIG_TYPE_STRING, "a string"},
    [T_GROUP] = {CONFIG_TYPE_GROUP, CONFIG_TYPE_GROUP, "a group"},
    [T_PEERS] = {0, 0, NULL},
};

static int load_group(loader *ld, config_setting_t *g, const char *prefix)
{
    int n = config_setting_length(g);
    for (int i = 0; i < n; i++) {
        config_setting_t *m = config_setting_get_elem(g, (unsigned)i);
        char name[128], why[256];
        snprintf(name, sizeof name, "%s%s%s", prefix, *prefix ? "." : "", config_setting_name(m));
        const setting *st = find_setting(name);
        if (!st)
            return load_fail(ld, m, "unknown setting \"%s\"", name);
        int t = config_setting_type(m);
        const char *want = file_types[st->type].words;
        if (want && t != file_types[st->type].type && t != file_types[st->type].type2) {
            /* Only integers have names ending in _ms. */
            size_t nl = strlen(name);
            int is_ms = nl > 3 && strcmp(name + nl - 3, "_ms") == 0;
            return load_fail(ld, m, "%s must be %s, not %s%s", name, want, type_word(t),
                             is_ms ? " (whole milliseconds, such as 30000)" : "");
        }
        /* The lists and groups report their own refusals (ld->failed). */
        int rc = 0;
        relock__settings *s = &ld->cfg->s;
        switch (st->type) {
        case T_GROUP:
            rc = load_group(ld, m, name);
            break;
        case T_SERVERS:
            rc = load_servers(ld, m);
            break;
        case T_ADDRS:
            rc = load_addrs(ld, m);
            break;
        case T_PEERS:
            rc = load_peers(ld, m);
            break;
        case T_LONG:
        case T_LLONG:
            rc = store_number(s, st, config_setting_get_int64(m), why, sizeof why);
            break;
        case T_BOOL:
            rc = store_number(s, st, config_setting_get_bool(m), why, sizeof why);
            break;
        case T_STR:
        case T_ENUM:
            rc = store_string(s, st, config_setting_get_string(m), why, sizeof why);
            break;
        }
        if (rc != 0)
            return ld->failed ? -1 : load_fail(ld, m, "%s", why);
        if (strcmp(name, "mode") == 0)
            s->mode_line = (int)config_setting_source_line(m);
        s->legacy.set |= st->set;
    }
    return 0;
}

/* The checks of the settings together, each said at the fault's line. */
static int load_whole(loader *ld, config_setting_t *top)
{
    relock__settings *s = &ld->cfg->s;
    char why[512];
    if (s->wait.backoff_min_ms > s->wait.backoff_max_ms)
        return load_fail(ld, config_setting_get_member(top, "wait"),
                         "wait.backoff_min_ms (%lld) exceeds wait.backoff_max_ms (%lld)",
                         s->wait.backoff_min_ms, s->wait.backoff_max_ms);
    /* What legacy.peer implies, and what contradicts it: said at
     * legacy.peer, else at the group. */
    if (relock__peers_apply(s, why, sizeof why) != 0) {
        config_setting_t *g = config_setting_get_member(top, "legacy");
        config_setting_t *p = g ? config_setting_get_member(g, "peer") : NULL;
        config_setting_t *b = config_setting_get_member(top, "bridge");
        return load_fail(ld, p ? p : g ? g : b, "%s", why);
    }
    /* A sentinel's name and where to ask for it go together, and not with
     * a quorum. */
    config_setting_t *g = config_setting_get_member(top, "sentinel");
    if (g && relock__sentinel_on(s) != (s->sentinel.naddrs > 0))
        return load_fail(ld, g, "sentinel needs both master and addrs");
    if (sentinel_conflict(s, why, sizeof why) != 0)
        return load_fail(ld, g ? g : config_setting_get_member(top, "servers"), "%s", why);
    return 0;
}

/* The largest configuration file read. */
#define CONFIG_FILE_MAX (1 << 20)

/* After a syntax error on line `at` (1-based) of text: a setting in ms
 * given a duration with a unit ("ttl_ms = 30s") is the likely cause; says
 * what the file expects into out, else "". */
static void ms_hint(const char *text, int at, char *out, size_t len)
{
    out[0] = '\0';
    const char *p = text;
    for (int i = 1; p && i < at; i++) {
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    if (!p)
        return;
    char line[160];
    size_t n = strcspn(p, "\n");
    snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), p);
    /* Every "name = value" on the line: groups nest ("wait = { max_ms = 5s; }"). */
    for (const char *eq = strpbrk(line, "=:"); eq; eq = strpbrk(eq + 1, "=:")) {
        const char *end = eq;
        while (end > line && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        const char *start = end;
        while (start > line && strchr("_abcdefghijklmnopqrstuvwxyz0123456789", start[-1]))
            start--;
        if (end - start < 4 || strncmp(end - 3, "_ms", 3) != 0)
            continue;
        const char *v = eq + 1 + strspn(eq + 1, " \t");
        size_t digits = strspn(v, "0123456789.");
        if (digits == 0)
            continue;
        const char *u = v + digits + strspn(v + digits, " \t");
        if (*u < 'a' || *u > 'z')
            continue;
        snprintf(out, len,
                 ": %.*s takes whole milliseconds (%.*s = 30000), not a duration with a unit",
                 (int)(end - start), start, (int)(end - start), start);
        return;
    }
}

relock_status relock_config_load_file(relock_config *cfg, const char *path)
{
    if (!cfg)
        return RELOCK_EINVAL;
    relock__err_clear(&cfg->err);
    if (!path || !*path)
        return RELOCK__FAIL(&cfg->err, RELOCK_EINVAL, "config: no file name given");
    FILE *f = fopen(path, "r");
    if (!f)
        return RELOCK__FAIL(&cfg->err, RELOCK_ECONFIG, "%s: cannot open: %s", path,
                            strerror(errno));
    /* libconfig's scanner ends the whole process when a read fails (a
     * directory): only regular files and pipes (`-c <(...)`) are read, and
     * they are read here, whole, so that an error can quote its line. */
    struct stat sb;
    int readable = fstat(fileno(f), &sb) == 0 && (S_ISREG(sb.st_mode) || S_ISFIFO(sb.st_mode));
    char *text = readable ? malloc(CONFIG_FILE_MAX + 1) : NULL;
    size_t got = text ? fread(text, 1, CONFIG_FILE_MAX + 1, f) : 0;
    int read_err = ferror(f);
    fclose(f);
    if (!readable)
        return RELOCK__FAIL(&cfg->err, RELOCK_ECONFIG, "%s: not a configuration file (%s)", path,
                            S_ISDIR(sb.st_mode) ? "a directory" : "not a regular file");
    if (!text)
        return RELOCK__FAIL(&cfg->err, RELOCK_ENOMEM, "%s: out of memory", path);
    if (read_err || got > CONFIG_FILE_MAX) {
        free(text);
        return RELOCK__FAIL(&cfg->err, RELOCK_ECONFIG, "%s: %s", path,
                            read_err ? "cannot be read"
                                     : "larger than 1 MiB: not a configuration file");
    }
    text[got] = '\0';
    config_t lc;
    config_init(&lc);
    loader ld = {cfg, path, 0};
    if (config_read_string(&lc, text) != CONFIG_TRUE) {
        char hint[160];
        ms_hint(text, config_error_line(&lc), hint, sizeof hint);
        ld.failed = 1;
        RELOCK__FAIL(&cfg->err, RELOCK_ECONFIG, "%s:%d: %s%s", path, config_error_line(&lc),
                     config_error_text(&lc), hint);
    } else if (strlen(path) < sizeof cfg->s.src_file) {
        snprintf(cfg->s.src_file, sizeof cfg->s.src_file, "%s", path);
    }
    free(text);
    config_setting_t *root = config_root_setting(&lc);
    int n = config_setting_length(root);
    config_setting_t *top = NULL;
    for (int i = 0; i < n && !ld.failed; i++) {
        config_setting_t *m = config_setting_get_elem(root, (unsigned)i);
        if (strcmp(config_setting_name(m), "relock") != 0)
            load_fail(&ld, m, "unknown setting \"%.60s\" (settings belong in relock = { ... })",
                      config_setting_name(m));
        else if (config_setting_type(m) != CONFIG_TYPE_GROUP)
            load_fail(&ld, m, "relock must be a group: relock = { ... };");
        else
            top = m;
    }
    if (!ld.failed && !top)
        load_fail(&ld, NULL, "no relock = { ... } group in the file");
    if (!ld.failed && load_group(&ld, top, "") == 0)
        load_whole(&ld, top);
    config_destroy(&lc);
    return ld.failed ? RELOCK_ECONFIG : RELOCK_OK;
}

relock_status relock_config_set_url(relock_config *cfg, const char *url)
{
    if (!cfg)
        return RELOCK_EINVAL;
    relock__err_clear(&cfg->err);
    if (!url)
        return RELOCK__FAIL(&cfg->err, RELOCK_EINVAL, "bad URL: none given");
    relock__server srv;
    char why[160];
    /* The URL may carry a password: never echo it in the message. */
    if (relock__parse_url(url, &srv, why, sizeof why) != 0)
        return RELOCK__FAIL(&cfg->err, RELOCK_ECONFIG, "bad URL: %s", why);
    cfg->s.servers[0] = srv;
    cfg->s.nservers = 1;
    cfg->s.servers_line = 0;
    return RELOCK_OK;
}

int relock__sentinel_on(const relock__settings *s)
{
    return s->sentinel.master[0] != '\0';
}
