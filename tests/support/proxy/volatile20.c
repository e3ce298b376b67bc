/*
 * volatile20: rewrites that give a modern server Redis 2.0's handling of
 * volatile keys (see volatile20.h).
 */
#include "volatile20.h"

#include <stdio.h>
#include <string.h>

/* Which words of the command are keys that 2.0 looked up for writing. */
enum keys { K_FIRST, K_TWO, K_ODD, K_ALL_BUT_LAST };

static const struct vol_cmd {
    const char *name;
    enum keys keys;
    size_t min_argc; /* the 2.0 arity: exact when max == min */
    size_t max_argc; /* 0 = no upper bound */
    int parity;      /* 0 any; 1 argc odd; 2 argc even */
    enum vol20_kind kind;
} cmds[] = {
    {"SETNX", K_FIRST, 3, 3, 0, VOL20_WRAP},
    {"MSETNX", K_ODD, 3, 0, 1, VOL20_WRAP},
    {"INCR", K_FIRST, 2, 2, 0, VOL20_WRAP},
    {"DECR", K_FIRST, 2, 2, 0, VOL20_WRAP},
    {"INCRBY", K_FIRST, 3, 3, 0, VOL20_WRAP},
    {"DECRBY", K_FIRST, 3, 3, 0, VOL20_WRAP},
    {"APPEND", K_FIRST, 3, 3, 0, VOL20_WRAP},
    {"LPUSH", K_FIRST, 3, 3, 0, VOL20_WRAP},
    {"RPUSH", K_FIRST, 3, 3, 0, VOL20_WRAP},
    {"LPOP", K_FIRST, 2, 2, 0, VOL20_WRAP},
    {"RPOP", K_FIRST, 2, 2, 0, VOL20_WRAP},
    {"RPOPLPUSH", K_TWO, 3, 3, 0, VOL20_WRAP},
    {"LSET", K_FIRST, 4, 4, 0, VOL20_WRAP},
    {"LTRIM", K_FIRST, 4, 4, 0, VOL20_WRAP},
    {"LREM", K_FIRST, 4, 4, 0, VOL20_WRAP},
    {"SADD", K_FIRST, 3, 3, 0, VOL20_WRAP},
    {"SREM", K_FIRST, 3, 3, 0, VOL20_WRAP},
    {"SPOP", K_FIRST, 2, 2, 0, VOL20_WRAP},
    {"SMOVE", K_TWO, 4, 4, 0, VOL20_WRAP},
    {"ZADD", K_FIRST, 4, 4, 0, VOL20_WRAP},
    {"ZINCRBY", K_FIRST, 4, 4, 0, VOL20_WRAP},
    {"ZREM", K_FIRST, 3, 3, 0, VOL20_WRAP},
    {"ZREMRANGEBYSCORE", K_FIRST, 4, 4, 0, VOL20_WRAP},
    {"ZREMRANGEBYRANK", K_FIRST, 4, 4, 0, VOL20_WRAP},
    {"HSET", K_FIRST, 4, 4, 0, VOL20_WRAP},
    {"HSETNX", K_FIRST, 4, 4, 0, VOL20_WRAP},
    {"HMSET", K_FIRST, 4, 0, 2, VOL20_WRAP},
    {"HINCRBY", K_FIRST, 4, 4, 0, VOL20_WRAP},
    {"HDEL", K_FIRST, 3, 3, 0, VOL20_WRAP},
    {"RENAME", K_TWO, 3, 3, 0, VOL20_WRAP},
    {"RENAMENX", K_TWO, 3, 3, 0, VOL20_WRAP},
    {"EXPIRE", K_FIRST, 3, 3, 0, VOL20_EXPIRE},
    {"EXPIREAT", K_FIRST, 3, 3, 0, VOL20_EXPIRE},
    {"BLPOP", K_ALL_BUT_LAST, 3, 0, 0, VOL20_PREAMBLE},
    {"BRPOP", K_ALL_BUT_LAST, 3, 0, 0, VOL20_PREAMBLE},
};

/* Lua's unpack() is limited by the C stack (about 8000 values); longer
 * commands are forwarded unchanged (and so not emulated). */
#define WRAP_MAX_ARGC 4000

/* Delete every volatile key in KEYS (PTTL >= 0: it has an expiry), then run
 * the original command, whose words are ARGV.  pcall, not call: an error
 * of the command comes back with its own text, as from the server. */
static const char wrap_script[] =
    "for i = 1, #KEYS do "
    "if redis.call('PTTL', KEYS[i]) >= 0 then redis.call('DEL', KEYS[i]) end "
    "end "
    "return redis.pcall(unpack(ARGV))";

/* 2.0's EXPIRE / EXPIREAT: a positive timeout on a key that already has
 * one is refused (0, TTL unchanged); a timeout that is already due deletes
 * the key (1) as on every version; anything else behaves as today. */
static const char expire_script[] =
    "local s = ARGV[3] "
    "if string.match(s, '^%-?%d+$') then "
    "local n = tonumber(s) "
    "if string.upper(ARGV[1]) == 'EXPIREAT' then "
    "n = n - tonumber(redis.call('TIME')[1]) end "
    "if n > 0 and redis.call('PTTL', KEYS[1]) >= 0 then return 0 end "
    "end "
    "return redis.pcall(unpack(ARGV))";

/* The purge alone, sent ahead of a blocking pop. */
static const char purge_script[] =
    "for i = 1, #KEYS do "
    "if redis.call('PTTL', KEYS[i]) >= 0 then redis.call('DEL', KEYS[i]) end "
    "end "
    "return 0";

static const struct vol_cmd *find(const proxy_arg *argv, size_t argc)
{
    size_t i;

    if (argc == 0)
        return NULL;
    for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        if (arg_is(&argv[0], cmds[i].name))
            return &cmds[i];
    }
    return NULL;
}

enum vol20_kind vol20_plan(const proxy_arg *argv, size_t argc)
{
    const struct vol_cmd *c = find(argv, argc);

    if (c == NULL || argc < c->min_argc || argc > WRAP_MAX_ARGC)
        return VOL20_NONE;
    if (c->max_argc > 0 && argc > c->max_argc)
        return VOL20_NONE;
    if (c->parity == 1 && argc % 2 == 0)
        return VOL20_NONE;
    if (c->parity == 2 && argc % 2 == 1)
        return VOL20_NONE;
    return c->kind;
}

/* Number of keys and whether argv[i] is one of them. */
static size_t key_count(enum keys k, size_t argc)
{
    switch (k) {
    case K_FIRST:
        return 1;
    case K_TWO:
        return 2;
    case K_ODD:
        return (argc - 1) / 2;
    case K_ALL_BUT_LAST:
        return argc - 2;
    }
    return 0;
}

static size_t key_index(enum keys k, size_t nth)
{
    return k == K_ODD ? 1 + 2 * nth : 1 + nth;
}

int vol20_encode(enum vol20_kind kind, const proxy_arg *argv, size_t argc,
                 pbuf *out)
{
    const struct vol_cmd *c = find(argv, argc);
    const char *script;
    size_t nkeys;
    size_t words;
    size_t i;
    char num[24];

    if (c == NULL || kind == VOL20_NONE)
        return -1;
    if (kind == VOL20_WRAP)
        script = wrap_script;
    else if (kind == VOL20_EXPIRE)
        script = expire_script;
    else
        script = purge_script;
    nkeys = key_count(c->keys, argc);
    /* EVAL script numkeys key... [the original words] */
    words = 3 + nkeys + (kind == VOL20_PREAMBLE ? 0 : argc);
    snprintf(num, sizeof(num), "%zu", nkeys);
    if (resp_add_array(out, words) < 0 ||
        resp_add_bulk(out, "EVAL", 4) < 0 ||
        resp_add_bulk(out, script, strlen(script)) < 0 ||
        resp_add_bulk(out, num, strlen(num)) < 0)
        return -1;
    for (i = 0; i < nkeys; i++) {
        const proxy_arg *k = &argv[key_index(c->keys, i)];

        if (resp_add_bulk(out, k->p, k->n) < 0)
            return -1;
    }
    if (kind == VOL20_PREAMBLE)
        return 0;
    for (i = 0; i < argc; i++) {
        if (resp_add_bulk(out, argv[i].p, argv[i].n) < 0)
            return -1;
    }
    return 0;
}
