/*
 * personality: version tables and the refusal decision (see personality.h).
 *
 * The "since" versions are those Redis 7.0's COMMAND DOCS gives; the error
 * texts are those of the old servers' sources (and of
 * docs/design.md §3.4 where it records them).
 */
#include "personality.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MODERN PV(7, 0, 0)

/* Commands that appeared after 2.0.  Anything a 2.0 server had is absent
 * here and therefore never refused; a command unknown even to the real
 * server is forwarded and the real server refuses it. */
static const struct intro {
    const char *name;
    unsigned since;
} intros[] = {
    {"BRPOPLPUSH", PV(2, 2, 0)}, {"GETBIT", PV(2, 2, 0)},
    {"LINSERT", PV(2, 2, 0)}, {"LPUSHX", PV(2, 2, 0)},
    {"PERSIST", PV(2, 2, 0)}, {"RPUSHX", PV(2, 2, 0)},
    {"SETBIT", PV(2, 2, 0)}, {"SETRANGE", PV(2, 2, 0)},
    {"STRLEN", PV(2, 2, 0)}, {"UNWATCH", PV(2, 2, 0)},
    {"WATCH", PV(2, 2, 0)}, {"ZREVRANGEBYSCORE", PV(2, 2, 0)},
    {"OBJECT", PV(2, 2, 3)}, {"SLOWLOG", PV(2, 2, 12)},
    {"CLIENT", PV(2, 4, 0)}, {"GETRANGE", PV(2, 4, 0)},
    {"BITCOUNT", PV(2, 6, 0)}, {"BITOP", PV(2, 6, 0)},
    {"DUMP", PV(2, 6, 0)}, {"EVAL", PV(2, 6, 0)},
    {"EVALSHA", PV(2, 6, 0)}, {"HINCRBYFLOAT", PV(2, 6, 0)},
    {"INCRBYFLOAT", PV(2, 6, 0)}, {"MIGRATE", PV(2, 6, 0)},
    {"PEXPIRE", PV(2, 6, 0)}, {"PEXPIREAT", PV(2, 6, 0)},
    {"PSETEX", PV(2, 6, 0)}, {"PTTL", PV(2, 6, 0)},
    {"RESTORE", PV(2, 6, 0)}, {"SCRIPT", PV(2, 6, 0)},
    {"TIME", PV(2, 6, 0)},
    {"HSCAN", PV(2, 8, 0)}, {"PSYNC", PV(2, 8, 0)},
    {"PUBSUB", PV(2, 8, 0)}, {"SCAN", PV(2, 8, 0)},
    {"SSCAN", PV(2, 8, 0)}, {"ZSCAN", PV(2, 8, 0)},
    {"BITPOS", PV(2, 8, 7)},
    {"PFADD", PV(2, 8, 9)}, {"PFCOUNT", PV(2, 8, 9)},
    {"PFDEBUG", PV(2, 8, 9)}, {"PFMERGE", PV(2, 8, 9)},
    {"PFSELFTEST", PV(2, 8, 9)}, {"ZLEXCOUNT", PV(2, 8, 9)},
    {"ZRANGEBYLEX", PV(2, 8, 9)}, {"ZREMRANGEBYLEX", PV(2, 8, 9)},
    {"ZREVRANGEBYLEX", PV(2, 8, 9)},
    {"ROLE", PV(2, 8, 12)}, {"COMMAND", PV(2, 8, 13)},
    {"LATENCY", PV(2, 8, 13)},
    {"ASKING", PV(3, 0, 0)}, {"CLUSTER", PV(3, 0, 0)},
    {"READONLY", PV(3, 0, 0)}, {"READWRITE", PV(3, 0, 0)},
    {"REPLCONF", PV(3, 0, 0)}, {"RESTORE-ASKING", PV(3, 0, 0)},
    {"WAIT", PV(3, 0, 0)},
    {"BITFIELD", PV(3, 2, 0)}, {"GEOADD", PV(3, 2, 0)},
    {"GEODIST", PV(3, 2, 0)}, {"GEOHASH", PV(3, 2, 0)},
    {"GEOPOS", PV(3, 2, 0)}, {"GEORADIUS", PV(3, 2, 0)},
    {"GEORADIUSBYMEMBER", PV(3, 2, 0)}, {"HSTRLEN", PV(3, 2, 0)},
    {"TOUCH", PV(3, 2, 1)},
    {"GEORADIUS_RO", PV(3, 2, 10)}, {"GEORADIUSBYMEMBER_RO", PV(3, 2, 10)},
    {"MEMORY", PV(4, 0, 0)}, {"MODULE", PV(4, 0, 0)},
    {"SWAPDB", PV(4, 0, 0)}, {"UNLINK", PV(4, 0, 0)},
    {"BZPOPMAX", PV(5, 0, 0)}, {"BZPOPMIN", PV(5, 0, 0)},
    {"LOLWUT", PV(5, 0, 0)}, {"REPLICAOF", PV(5, 0, 0)},
    {"XACK", PV(5, 0, 0)}, {"XADD", PV(5, 0, 0)},
    {"XCLAIM", PV(5, 0, 0)}, {"XDEL", PV(5, 0, 0)},
    {"XGROUP", PV(5, 0, 0)}, {"XINFO", PV(5, 0, 0)},
    {"XLEN", PV(5, 0, 0)}, {"XPENDING", PV(5, 0, 0)},
    {"XRANGE", PV(5, 0, 0)}, {"XREAD", PV(5, 0, 0)},
    {"XREADGROUP", PV(5, 0, 0)}, {"XREVRANGE", PV(5, 0, 0)},
    {"XSETID", PV(5, 0, 0)}, {"XTRIM", PV(5, 0, 0)},
    {"ZPOPMAX", PV(5, 0, 0)}, {"ZPOPMIN", PV(5, 0, 0)},
    {"ACL", PV(6, 0, 0)}, {"BITFIELD_RO", PV(6, 0, 0)},
    {"HELLO", PV(6, 0, 0)}, {"STRALGO", PV(6, 0, 0)},
    {"LPOS", PV(6, 0, 6)},
    {"BLMOVE", PV(6, 2, 0)}, {"COPY", PV(6, 2, 0)},
    {"FAILOVER", PV(6, 2, 0)}, {"GEOSEARCH", PV(6, 2, 0)},
    {"GEOSEARCHSTORE", PV(6, 2, 0)}, {"GETDEL", PV(6, 2, 0)},
    {"GETEX", PV(6, 2, 0)}, {"HRANDFIELD", PV(6, 2, 0)},
    {"LMOVE", PV(6, 2, 0)}, {"RESET", PV(6, 2, 0)},
    {"SMISMEMBER", PV(6, 2, 0)}, {"XAUTOCLAIM", PV(6, 2, 0)},
    {"ZDIFF", PV(6, 2, 0)}, {"ZDIFFSTORE", PV(6, 2, 0)},
    {"ZINTER", PV(6, 2, 0)}, {"ZMSCORE", PV(6, 2, 0)},
    {"ZRANDMEMBER", PV(6, 2, 0)}, {"ZRANGESTORE", PV(6, 2, 0)},
    {"ZUNION", PV(6, 2, 0)},
    {"BLMPOP", PV(7, 0, 0)}, {"BZMPOP", PV(7, 0, 0)},
    {"EVAL_RO", PV(7, 0, 0)}, {"EVALSHA_RO", PV(7, 0, 0)},
    {"EXPIRETIME", PV(7, 0, 0)}, {"FCALL", PV(7, 0, 0)},
    {"FCALL_RO", PV(7, 0, 0)}, {"FUNCTION", PV(7, 0, 0)},
    {"LCS", PV(7, 0, 0)}, {"LMPOP", PV(7, 0, 0)},
    {"PEXPIRETIME", PV(7, 0, 0)}, {"SINTERCARD", PV(7, 0, 0)},
    {"SORT_RO", PV(7, 0, 0)}, {"SPUBLISH", PV(7, 0, 0)},
    {"SSUBSCRIBE", PV(7, 0, 0)}, {"SUNSUBSCRIBE", PV(7, 0, 0)},
    {"ZINTERCARD", PV(7, 0, 0)}, {"ZMPOP", PV(7, 0, 0)},
};

/*
 * Options that came later than the command: before `until`, the command
 * took exactly `argc` words (the name included) and more were refused
 * with the arity error.  Fewer are forwarded: the real server refuses
 * those with the same text, and they are not an old-version refusal.
 */
static const struct arity {
    const char *name;
    unsigned until;
    size_t argc;
} arities[] = {
    {"SET", PV(2, 6, 12), 3},        /* NX / XX / EX / PX */
    {"INFO", PV(2, 6, 0), 1},        /* sections came with 2.6 */
    {"PING", PV(2, 8, 0), 1},        /* PING message */
    {"AUTH", PV(6, 0, 0), 2},        /* AUTH username password */
    {"SRANDMEMBER", PV(2, 6, 0), 2}, /* count */
    {"LPUSH", PV(2, 4, 0), 3},       /* several values at once */
    {"RPUSH", PV(2, 4, 0), 3},
    {"SADD", PV(2, 4, 0), 3},
    {"SREM", PV(2, 4, 0), 3},
    {"ZADD", PV(2, 4, 0), 4},
    {"ZREM", PV(2, 4, 0), 3},
    {"HDEL", PV(2, 4, 0), 3},
    {"EXISTS", PV(3, 0, 3), 2},      /* several keys */
    {"SPOP", PV(3, 2, 0), 2},        /* count */
    {"HSET", PV(4, 0, 0), 4},        /* several fields */
    {"LPUSHX", PV(4, 0, 0), 3},
    {"RPUSHX", PV(4, 0, 0), 3},
    {"FLUSHALL", PV(4, 0, 0), 1},    /* ASYNC */
    {"FLUSHDB", PV(4, 0, 0), 1},
    {"EXPIRE", PV(7, 0, 0), 3},      /* NX / XX / GT / LT */
    {"EXPIREAT", PV(7, 0, 0), 3},
    {"PEXPIRE", PV(7, 0, 0), 3},
    {"PEXPIREAT", PV(7, 0, 0), 3},
};

/* Container commands whose subcommands grew over time.  A subcommand the
 * emulated version lacks, or one given a number of words the old code did
 * not accept, gets the container's old syntax error. */
static const struct sub {
    const char *container;
    const char *name;
    unsigned since;
    size_t min_argc; /* words including container and subcommand */
    size_t max_argc; /* 0 = no upper bound */
} subs[] = {
    {"CLIENT", "LIST", PV(2, 4, 0), 2, 2},
    {"CLIENT", "KILL", PV(2, 4, 0), 3, 3},
    {"CLIENT", "GETNAME", PV(2, 6, 9), 2, 2},
    {"CLIENT", "SETNAME", PV(2, 6, 9), 3, 3},
    {"CONFIG", "GET", PV(2, 0, 0), 0, 0},
    {"CONFIG", "SET", PV(2, 0, 0), 0, 0},
    {"CONFIG", "RESETSTAT", PV(2, 0, 0), 0, 0},
    {"OBJECT", "REFCOUNT", PV(2, 2, 3), 0, 0},
    {"OBJECT", "ENCODING", PV(2, 2, 3), 0, 0},
    {"OBJECT", "IDLETIME", PV(2, 2, 3), 0, 0},
    {"SLOWLOG", "GET", PV(2, 2, 12), 2, 3},
    {"SLOWLOG", "RESET", PV(2, 2, 12), 2, 2},
    {"SLOWLOG", "LEN", PV(2, 2, 12), 2, 2},
    {"SCRIPT", "LOAD", PV(2, 6, 0), 3, 3},
    {"SCRIPT", "EXISTS", PV(2, 6, 0), 3, 0},
    {"SCRIPT", "FLUSH", PV(2, 6, 0), 2, 2},
    {"SCRIPT", "KILL", PV(2, 6, 0), 2, 2},
};

/* The old syntax error of each container, for versions before 2.8 (the
 * newest personality that emulates anything is 2.6.11). */
static const char *container_error(const char *container, unsigned version)
{
    if (strcmp(container, "CLIENT") == 0) {
        return version < PV(2, 6, 9)
            ? "ERR Syntax error, try CLIENT (LIST | KILL ip:port)"
            : "ERR Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | "
              "SETNAME connection-name)";
    }
    if (strcmp(container, "CONFIG") == 0)
        return "ERR CONFIG subcommand must be one of GET, SET, RESETSTAT";
    if (strcmp(container, "OBJECT") == 0)
        return "ERR Syntax error. Try OBJECT (refcount|encoding|idletime)";
    if (strcmp(container, "SLOWLOG") == 0)
        return "ERR Unknown SLOWLOG subcommand or wrong # of args. Try GET, "
               "RESET, LEN.";
    return "ERR Unknown SCRIPT subcommand or wrong # of args.";
}

/* OBJECT had a fixed arity of 3 before it grew HELP and FREQ. */
static const struct arity object_arity = {"OBJECT", PV(4, 0, 0), 3};

int personality_parse(const char *s, personality *out, char *why, size_t whylen)
{
    static const struct {
        const char *name;
        unsigned version;
        const char *info;
    } fixed[] = {
        {"2.0", PV(2, 0, 5), "2.0.5"},
        {"2.2", PV(2, 2, 15), "2.2.15"},
        {"2.4", PV(2, 4, 18), "2.4.18"},
        {"7", MODERN, ""},
    };
    /* Newer servers: what they report in INFO, and the commands of theirs
     * the proxy carries out.  Valkey reports redis_version 7.2.4 for
     * compatibility, and its own version in valkey_version. */
    static const struct {
        const char *name;
        unsigned version;
        const char *info;
        unsigned native;
        const char *server_name;
        const char *valkey_version;
    } newer[] = {
        {"valkey-8.1", PV(8, 1, 0), "7.2.4", PN_SET_IFEQ, "valkey", "8.1.0"},
        {"valkey-9.0", PV(9, 0, 0), "7.2.4", PN_SET_IFEQ | PN_DELIFEQ, "valkey", "9.0.0"},
        {"redis-8.4", PV(8, 4, 0), "8.4.0",
         PN_SET_IFEQ | PN_SET_IFNE | PN_DELEX | PN_DIGEST, "", ""},
    };
    size_t i;

    memset(out, 0, sizeof(*out));
    for (i = 0; i < sizeof(newer) / sizeof(newer[0]); i++) {
        if (strcmp(s, newer[i].name) == 0) {
            snprintf(out->name, sizeof(out->name), "%s", newer[i].name);
            out->version = newer[i].version;
            snprintf(out->version_str, sizeof(out->version_str), "%s", newer[i].info);
            out->native = newer[i].native;
            snprintf(out->server_name, sizeof(out->server_name), "%s",
                     newer[i].server_name);
            snprintf(out->valkey_version, sizeof(out->valkey_version), "%s",
                     newer[i].valkey_version);
            return 0;
        }
    }
    for (i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
        if (strcmp(s, fixed[i].name) == 0) {
            snprintf(out->name, sizeof(out->name), "%s", fixed[i].name);
            out->version = fixed[i].version;
            snprintf(out->version_str, sizeof(out->version_str), "%s",
                     fixed[i].info);
            return 0;
        }
    }
    /* 2.6.0 .. 2.6.11: the 2.6 line before SET took options. */
    if (strncmp(s, "2.6.", 4) == 0) {
        const char *d = s + 4;
        char *end = NULL;
        long patch;

        if (*d >= '0' && *d <= '9' && strlen(d) <= 2) {
            patch = strtol(d, &end, 10);
            if (end != NULL && *end == '\0' && patch >= 0 && patch <= 11 &&
                !(d[0] == '0' && d[1] != '\0')) {
                snprintf(out->name, sizeof(out->name), "%s", s);
                out->version = PV(2, 6, (unsigned)patch);
                snprintf(out->version_str, sizeof(out->version_str), "2.6.%ld",
                         patch);
                return 0;
            }
        }
    }
    snprintf(why, whylen,
             "'%s' is not one of 2.0, 2.2, 2.4, 2.6.0 .. 2.6.11, 7, valkey-8.1, "
             "valkey-9.0, redis-8.4", s);
    return -1;
}

int personality_emulates(const personality *pp)
{
    return pp->version < MODERN;
}

/* Copy an argument for use inside an error or a counter name: at most
 * cap-1 bytes, CR and LF (which would break the reply line) made blanks,
 * optionally upper-cased. */
static void arg_text(char *dst, size_t cap, const proxy_arg *a, int upper)
{
    size_t n = a->n < cap - 1 ? a->n : cap - 1;
    size_t i;

    for (i = 0; i < n; i++) {
        char c = a->p[i];

        if (c == '\r' || c == '\n' || c == '\0')
            c = ' ';
        if (upper && c >= 'a' && c <= 'z')
            c = (char)(c - 'a' + 'A');
        dst[i] = c;
    }
    dst[n] = '\0';
}

static void arity_error(gate_result *r, const char *name)
{
    char lower[64];
    size_t i;

    /* Old servers named the command by its table entry: lower case. */
    for (i = 0; name[i] != '\0' && i < sizeof(lower) - 1; i++)
        lower[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] - 'A' + 'a'
                                                          : name[i]);
    lower[i] = '\0';
    snprintf(r->err, sizeof(r->err),
             "ERR wrong number of arguments for '%s' command", lower);
    snprintf(r->counter, sizeof(r->counter), "%s", name);
}

static int gate_subcommand(const personality *pp, const char *container,
                           const proxy_arg *argv, size_t argc, gate_result *r)
{
    size_t i;
    int known = 0;
    char subname[40];

    if (argc < 2)
        return 0; /* the arity error is the same everywhere */
    if (strcmp(container, "OBJECT") == 0 && argc > object_arity.argc) {
        arity_error(r, "OBJECT");
        return 1;
    }
    for (i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
        if (strcmp(subs[i].container, container) != 0)
            continue;
        known = 1;
        if (!arg_is(&argv[1], subs[i].name) || subs[i].since > pp->version)
            continue;
        if (subs[i].min_argc > 0 && argc < subs[i].min_argc)
            break;
        if (subs[i].max_argc > 0 && argc > subs[i].max_argc)
            break;
        return 0; /* the emulated version had it in this form */
    }
    if (!known)
        return 0;
    snprintf(r->err, sizeof(r->err), "%s", container_error(container, pp->version));
    arg_text(subname, sizeof(subname), &argv[1], 1);
    snprintf(r->counter, sizeof(r->counter), "%s %s", container, subname);
    return 1;
}

int personality_gate(const personality *pp, const proxy_arg *argv, size_t argc,
                     gate_result *r)
{
    size_t i;

    if (argc == 0 || !personality_emulates(pp))
        return 0;
    for (i = 0; i < sizeof(intros) / sizeof(intros[0]); i++) {
        if (!arg_is(&argv[0], intros[i].name))
            continue;
        if (intros[i].since > pp->version) {
            char sent[200];

            /* Old servers echoed the name exactly as the client sent it. */
            arg_text(sent, sizeof(sent), &argv[0], 0);
            snprintf(r->err, sizeof(r->err), "ERR unknown command '%s'", sent);
            snprintf(r->counter, sizeof(r->counter), "%s", intros[i].name);
            return 1;
        }
        break;
    }
    for (i = 0; i < sizeof(arities) / sizeof(arities[0]); i++) {
        if (arg_is(&argv[0], arities[i].name) && pp->version < arities[i].until &&
            argc > arities[i].argc) {
            arity_error(r, arities[i].name);
            return 1;
        }
    }
    for (i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
        if (arg_is(&argv[0], subs[i].container))
            return gate_subcommand(pp, subs[i].container, argv, argc, r);
    }
    return 0;
}
