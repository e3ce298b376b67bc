/*
 * native: newer servers' compare-and-set commands as scripts, and Lua
 * switched off (see native.h).
 *
 * The replies and errors are those of the servers' sources: Valkey's
 * setGenericCommand() and delifeqCommand() (src/t_string.c), Redis 8.4's
 * command table for DELEX (src/commands/delex.json: arity -2; 1 deleted,
 * 0 absent or condition not met, WRONGTYPE for a non-string) and the SET
 * page of the Redis documentation (IFEQ never creates a missing key, IFNE
 * does).
 */
#include "native.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replyfix.h"

#ifdef PROXY_HAVE_XXHASH
#define XXH_INLINE_ALL
#include <xxhash.h>
#endif

static atomic_int lua_off;
static atomic_int natives_off;

void native_set_natives(int on)
{
    atomic_store(&natives_off, on ? 0 : 1);
}

unsigned native_mask(const personality *pp)
{
    return atomic_load(&natives_off) ? 0u : pp->native;
}

void native_set_lua(int on)
{
    atomic_store(&lua_off, on ? 0 : 1);
}

int native_lua_on(void)
{
    return atomic_load(&lua_off) == 0;
}

int native_have_digest(void)
{
#ifdef PROXY_HAVE_XXHASH
    return 1;
#else
    return 0;
#endif
}


/* SET with a value condition.  KEYS[1] key; ARGV[1] value, ARGV[2] the
 * condition (IFEQ or IFNE), ARGV[3] the value compared, ARGV[4] '1' for
 * GET, ARGV[5..] the expiry words passed on to SET.  A key of another type
 * is refused before anything is compared, as the servers do: the GET's
 * own WRONGTYPE error, returned as it is; a missing key never meets IFEQ
 * and always meets IFNE.  As few calls as the scripts it is compared with
 * (a GET and the write), so that the emulation costs the server about
 * what relock's own scripts cost it. */
static const char set_script[] =
    "local cur = redis.pcall('get', KEYS[1]) "
    "if type(cur) == 'table' and cur.err then return cur end "
    "local ok "
    "if ARGV[2] == 'IFEQ' then ok = (cur ~= false and cur == ARGV[3]) "
    "else ok = (cur == false or cur ~= ARGV[3]) end "
    "if not ok then if ARGV[4] == '1' then return cur end return false end "
    "if #ARGV == 4 then redis.call('set', KEYS[1], ARGV[1]) "
    "elseif #ARGV == 5 then redis.call('set', KEYS[1], ARGV[1], ARGV[5]) "
    "else redis.call('set', KEYS[1], ARGV[1], ARGV[5], ARGV[6]) end "
    "if ARGV[4] == '1' then return cur end "
    "return {ok = 'OK'}";

/* DELIFEQ and DELEX with a condition.  KEYS[1] key; ARGV[1] IFEQ or IFNE,
 * ARGV[2] the value compared.  A missing key is 0 whatever the condition;
 * another type, the GET's WRONGTYPE. */
static const char del_script[] =
    "local cur = redis.pcall('get', KEYS[1]) "
    "if type(cur) == 'table' and cur.err then return cur end "
    "if cur == false then return 0 end "
    "local ok = (cur == ARGV[2]) "
    "if ARGV[1] == 'IFNE' then ok = not ok end "
    "if not ok then return 0 end "
    "redis.call('del', KEYS[1]) "
    "return 1";

static void lower_name(char *dst, size_t cap, const char *name)
{
    size_t i;

    for (i = 0; name[i] != '\0' && i + 1 < cap; i++)
        dst[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] - 'A' + 'a' : name[i]);
    dst[i] = '\0';
}

static int arity(char *err, size_t errlen, char *counter, size_t counterlen, const char *name)
{
    char low[32];

    lower_name(low, sizeof(low), name);
    snprintf(err, errlen, "ERR wrong number of arguments for '%s' command", low);
    counter[0] = '\0';
    (void)counterlen;
    return NATIVE_ERROR;
}

static int plain_error(char *err, size_t errlen, char *counter, const char *text)
{
    snprintf(err, errlen, "%s", text);
    counter[0] = '\0';
    return NATIVE_ERROR;
}

/* A strict decimal long long, as Redis's string2ll. */
static int parse_ll(const proxy_arg *a, long long *out)
{
    char buf[32];
    char *end = NULL;
    long long v;
    size_t i;

    if (a->n == 0 || a->n >= sizeof(buf))
        return -1;
    memcpy(buf, a->p, a->n);
    buf[a->n] = '\0';
    if (buf[0] == '+' || (buf[0] == '0' && a->n > 1) || (buf[0] == '-' && buf[1] == '0'))
        return -1;
    for (i = buf[0] == '-' ? 1 : 0; i < a->n; i++) {
        if (buf[i] < '0' || buf[i] > '9')
            return -1;
    }
    v = strtoll(buf, &end, 10);
    if (end == NULL || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

int native_load_command(pbuf *up, int which)
{
    const char *script = which ? del_script : set_script;

    return resp_add_array(up, 3) < 0 || resp_add_bulk(up, "SCRIPT", 6) < 0 ||
                   resp_add_bulk(up, "LOAD", 4) < 0 ||
                   resp_add_bulk(up, script, strlen(script)) < 0
               ? -1
               : 0;
}

/* EVALSHA where the script's SHA-1 is known on this connection, else EVAL
 * with its text. */
static int add_eval(pbuf *up, const char *script, const char *sha, const proxy_arg *key,
                    const proxy_arg *args, size_t nargs)
{
    size_t i;
    int by_sha = sha != NULL && sha[0] != '\0';

    if (resp_add_array(up, 4 + nargs) < 0 ||
        resp_add_bulk(up, by_sha ? "EVALSHA" : "EVAL", by_sha ? 7 : 4) < 0 ||
        resp_add_bulk(up, by_sha ? sha : script, strlen(by_sha ? sha : script)) < 0 ||
        resp_add_bulk(up, "1", 1) < 0 || resp_add_bulk(up, key->p, key->n) < 0)
        return -1;
    for (i = 0; i < nargs; i++) {
        if (resp_add_bulk(up, args[i].p, args[i].n) < 0)
            return -1;
    }
    return 0;
}

static int is_cond(const proxy_arg *a)
{
    return arg_is(a, "IFEQ") || arg_is(a, "IFNE") || arg_is(a, "IFDEQ") || arg_is(a, "IFDNE");
}

#define DIGEST_CONDS_TEXT "ERR relock-proxy: IFDEQ and IFDNE are not emulated"

/*
 * SET key value [NX | XX | IFEQ v | IFNE v | IFDEQ d | IFDNE d] [GET]
 *     [EX s | PX ms | EXAT s | PXAT ms | KEEPTTL]
 * Only reached when some word is a condition the personality has.
 */
static int plan_set(unsigned nat, const char *sha, const proxy_arg *argv, size_t argc,
                    pbuf *up, char *err, size_t errlen, char *counter)
{
    enum { F_NX = 1, F_XX = 2, F_COND = 4, F_GET = 8, F_KEEPTTL = 16, F_EXP = 32 };
    unsigned flags = 0;
    size_t cond_at = 0;
    size_t exp_at = 0;
    size_t j;
    proxy_arg words[6];
    size_t nw = 0;

    for (j = 3; j < argc; j++) {
        const proxy_arg *o = &argv[j];
        int more = j + 1 < argc;

        if (arg_is(o, "NX") && !(flags & (F_XX | F_COND))) {
            flags |= F_NX;
        } else if (arg_is(o, "XX") && !(flags & (F_NX | F_COND))) {
            flags |= F_XX;
        } else if (is_cond(o) && more && !(flags & (F_NX | F_XX | F_COND)) &&
                   (arg_is(o, "IFEQ") || (nat & PN_SET_IFNE))) {
            flags |= F_COND;
            cond_at = j++;
        } else if (arg_is(o, "GET")) {
            flags |= F_GET;
        } else if (arg_is(o, "KEEPTTL") && !(flags & F_EXP)) {
            flags |= F_KEEPTTL;
        } else if ((arg_is(o, "EX") || arg_is(o, "PX") || arg_is(o, "EXAT") ||
                    arg_is(o, "PXAT")) &&
                   more && !(flags & (F_EXP | F_KEEPTTL))) {
            flags |= F_EXP;
            exp_at = j++;
        } else {
            return plain_error(err, errlen, counter, "ERR syntax error");
        }
    }
    if (!(flags & F_COND))
        return NATIVE_NONE;
    if (flags & F_EXP) {
        long long v;

        /* The expiry is checked before the key is looked at. */
        if (parse_ll(&argv[exp_at + 1], &v) < 0)
            return plain_error(err, errlen, counter,
                               "ERR value is not an integer or out of range");
        if (v <= 0 || ((arg_is(&argv[exp_at], "EX") || arg_is(&argv[exp_at], "EXAT")) &&
                       v > 9223372036854775807LL / 1000))
            return plain_error(err, errlen, counter,
                               "ERR invalid expire time in 'set' command");
    }
    if (arg_is(&argv[cond_at], "IFDEQ") || arg_is(&argv[cond_at], "IFDNE"))
        return plain_error(err, errlen, counter, DIGEST_CONDS_TEXT);
    words[nw++] = argv[2];
    words[nw++] = arg_is(&argv[cond_at], "IFEQ") ? (proxy_arg){"IFEQ", 4}
                                                  : (proxy_arg){"IFNE", 4};
    words[nw++] = argv[cond_at + 1];
    words[nw++] = (flags & F_GET) ? (proxy_arg){"1", 1} : (proxy_arg){"0", 1};
    if (flags & F_EXP) {
        words[nw++] = argv[exp_at];
        words[nw++] = argv[exp_at + 1];
    } else if (flags & F_KEEPTTL) {
        words[nw++] = (proxy_arg){"KEEPTTL", 7};
    }
    return add_eval(up, set_script, sha, &argv[1], words, nw) < 0 ? -1 : NATIVE_SENT;
}

int native_plan(const personality *pp, const native_shas *shas, const proxy_arg *argv,
                size_t argc, pbuf *up, unsigned *fix, char *err, size_t errlen, char *counter,
                size_t counterlen)
{
    const char *set_sha = shas ? shas->set : NULL;
    const char *del_sha = shas ? shas->del : NULL;
    size_t j;
    unsigned nat = native_mask(pp);

    *fix = FIX_NONE;
    if (argc == 0 || nat == 0)
        return NATIVE_NONE;
    if (arg_is(&argv[0], "SET") && (nat & PN_SET_IFEQ)) {
        for (j = 3; j < argc; j++) {
            if (is_cond(&argv[j]))
                return plan_set(nat, set_sha, argv, argc, up, err, errlen, counter);
        }
        return NATIVE_NONE;
    }
    if (arg_is(&argv[0], "DELIFEQ") && (nat & PN_DELIFEQ)) {
        proxy_arg w[2] = {{"IFEQ", 4}, {NULL, 0}};

        if (argc != 3)
            return arity(err, errlen, counter, counterlen, "DELIFEQ");
        w[1] = argv[2];
        return add_eval(up, del_script, del_sha, &argv[1], w, 2) < 0 ? -1 : NATIVE_SENT;
    }
    if (arg_is(&argv[0], "DELEX") && (nat & PN_DELEX)) {
        proxy_arg w[2];
        proxy_arg del[2] = {{"DEL", 3}, {NULL, 0}};

        if (argc < 2)
            return arity(err, errlen, counter, counterlen, "DELEX");
        if (argc == 2) {
            /* No condition: the key goes, whatever it holds. */
            del[1] = argv[1];
            return resp_add_command(up, del, 2) < 0 ? -1 : NATIVE_SENT;
        }
        if (argc != 4 || !is_cond(&argv[2]))
            return plain_error(err, errlen, counter, "ERR syntax error");
        if (arg_is(&argv[2], "IFDEQ") || arg_is(&argv[2], "IFDNE"))
            return plain_error(err, errlen, counter, DIGEST_CONDS_TEXT);
        w[0] = arg_is(&argv[2], "IFEQ") ? (proxy_arg){"IFEQ", 4} : (proxy_arg){"IFNE", 4};
        w[1] = argv[3];
        return add_eval(up, del_script, del_sha, &argv[1], w, 2) < 0 ? -1 : NATIVE_SENT;
    }
    if (arg_is(&argv[0], "DIGEST") && (nat & PN_DIGEST) && native_have_digest()) {
        proxy_arg get[2] = {{"GET", 3}, {NULL, 0}};

        if (argc != 2)
            return arity(err, errlen, counter, counterlen, "DIGEST");
        get[1] = argv[1];
        *fix = FIX_DIGEST;
        return resp_add_command(up, get, 2) < 0 ? -1 : NATIVE_SENT;
    }
    return NATIVE_NONE;
}

int native_error_command(pbuf *up, const char *err)
{
    static const char script[] = "return redis.error_reply(ARGV[1])";

    return resp_add_array(up, 4) < 0 || resp_add_bulk(up, "EVAL", 4) < 0 ||
                   resp_add_bulk(up, script, sizeof(script) - 1) < 0 ||
                   resp_add_bulk(up, "0", 1) < 0 || resp_add_bulk(up, err, strlen(err)) < 0
               ? -1
               : 0;
}

int native_lua_refused(const personality *pp, const proxy_arg *argv, size_t argc, char *err,
                       size_t errlen, char *counter, size_t counterlen)
{
    static const char *const names[] = {"EVAL", "EVALSHA", "SCRIPT", "FUNCTION"};
    char args[160];
    size_t alen = 0;
    size_t i;
    size_t k;

    if (argc == 0 || native_lua_on())
        return 0;
    for (k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        if (arg_is(&argv[0], names[k]))
            break;
    }
    if (k == sizeof(names) / sizeof(names[0]))
        return 0;
    snprintf(counter, counterlen, "%s", names[k]);
    if (personality_emulates(pp)) {
        /* Servers before 2.8 named the command alone. */
        snprintf(err, errlen, "ERR unknown command '%.*s'",
                 (int)(argv[0].n > 128 ? 128 : argv[0].n), argv[0].p);
    } else {
        /* As processCommand(): each argument quoted and followed by a
         * blank, until 128 bytes are written; at most 128 bytes of the
         * name and of each argument. */
        args[0] = '\0';
        for (i = 1; i < argc && alen < 128; i++) {
            size_t room = 128 - alen;
            size_t n = argv[i].n < room ? argv[i].n : room;
            int w = snprintf(args + alen, sizeof(args) - alen, "'%.*s' ", (int)n, argv[i].p);

            if (w < 0)
                break;
            alen += (size_t)w;
            if (alen >= sizeof(args))
                alen = sizeof(args) - 1;
        }
        snprintf(err, errlen, "ERR unknown command '%.*s', with args beginning with: %s",
                 (int)(argv[0].n > 128 ? 128 : argv[0].n), argv[0].p, args);
    }
    /* A reply line carries no CR or LF (the server blanks them too). */
    for (i = 0; err[i] != '\0'; i++) {
        if (err[i] == '\r' || err[i] == '\n' || err[i] == '\0')
            err[i] = ' ';
    }
    return 1;
}

/* ---- COMMAND INFO / COMMAND DOCS ---- */

/* The letter of a command the real server lacks, or 'k' (ask upstream), or
 * 'n' (unknown to this personality). */
static char doc_letter(const personality *pp, const proxy_arg *a, int docs_form)
{
    unsigned nat = native_mask(pp);

    /* SET's documented arguments name its conditions (a client can learn
     * of IFEQ there): the real server's SET lacks them. */
    if (docs_form && arg_is(a, "SET") && (nat & PN_SET_IFEQ))
        return (nat & PN_SET_IFNE) ? 'T' : 'S';
    if (!native_lua_on() && (arg_is(a, "EVAL") || arg_is(a, "EVALSHA") ||
                             arg_is(a, "SCRIPT") || arg_is(a, "FUNCTION")))
        return 'n';
    if (arg_is(a, "DELIFEQ") && (nat & PN_DELIFEQ))
        return 'D';
    if (arg_is(a, "DELEX") && (nat & PN_DELEX))
        return 'X';
    if (arg_is(a, "DIGEST") && (nat & PN_DIGEST) && native_have_digest())
        return 'G';
    return 'k';
}

static const struct native_doc {
    char letter;
    const char *name;
    long long arity;
    const char *summary;
    const char *since;
} docs[] = {
    {'D', "delifeq", 3, "Delete key if value matches string.", "9.0.0"},
    {'X', "delex", -2, "Conditionally removes the specified key based on value or digest "
                       "comparison.", "8.4.0"},
    {'G', "digest", 2, "Returns the XXH3 hash of a string value.", "8.4.0"},
};

static const struct native_doc *doc_of(char letter)
{
    size_t i;

    for (i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        if (docs[i].letter == letter)
            return &docs[i];
    }
    return NULL;
}

static int add_str(pbuf *b, const char *s)
{
    return resp_add_bulk(b, s, strlen(s));
}

/* A COMMAND INFO entry in Redis 7's RESP2 form: name, arity, flags, first
 * key, last key, step, ACL categories, tips, key specs, subcommands (the
 * last three left empty). */
static int add_info_entry(pbuf *b, const struct native_doc *d)
{
    int write = d->letter != 'G';

    if (resp_add_array(b, 10) < 0 || add_str(b, d->name) < 0 ||
        resp_add_int(b, d->arity) < 0)
        return -1;
    if (resp_add_array(b, 2) < 0 || resp_add_status(b, write ? "write" : "readonly") < 0 ||
        resp_add_status(b, "fast") < 0)
        return -1;
    if (resp_add_int(b, 1) < 0 || resp_add_int(b, 1) < 0 || resp_add_int(b, 1) < 0)
        return -1;
    if (resp_add_array(b, 3) < 0 || resp_add_status(b, write ? "@write" : "@read") < 0 ||
        resp_add_status(b, "@string") < 0 || resp_add_status(b, "@fast") < 0)
        return -1;
    return resp_add_array(b, 0) < 0 || resp_add_array(b, 0) < 0 || resp_add_array(b, 0) < 0
               ? -1
               : 0;
}

/* A COMMAND DOCS entry: the name, then its map as a flat array. */
static int add_docs_entry(pbuf *b, const struct native_doc *d)
{
    return add_str(b, d->name) < 0 || resp_add_array(b, 8) < 0 || add_str(b, "summary") < 0 ||
                   add_str(b, d->summary) < 0 || add_str(b, "since") < 0 ||
                   add_str(b, d->since) < 0 || add_str(b, "group") < 0 ||
                   add_str(b, "string") < 0 || add_str(b, "complexity") < 0 ||
                   add_str(b, "O(1)") < 0
               ? -1
               : 0;
}

/* One argument of a COMMAND DOCS entry: name, type, and a token or nested
 * arguments (RESP2: maps as flat arrays). */
static int add_arg(pbuf *b, const char *name, const char *type, const char *token, int optional)
{
    size_t pairs = 2 + (token ? 1 : 0) + (optional ? 1 : 0);

    if (resp_add_array(b, pairs * 2) < 0 || add_str(b, "name") < 0 || add_str(b, name) < 0 ||
        add_str(b, "type") < 0 || add_str(b, type) < 0)
        return -1;
    if (token && (add_str(b, "token") < 0 || add_str(b, token) < 0))
        return -1;
    if (optional && (add_str(b, "flags") < 0 || resp_add_array(b, 1) < 0 ||
                     resp_add_status(b, "optional") < 0))
        return -1;
    return 0;
}

/* SET's COMMAND DOCS entry with the conditions of the personality:
 * key value [NX | XX | IFEQ v (| IFNE v | IFDEQ d | IFDNE d)] [GET]
 * [EX | PX | EXAT | PXAT | KEEPTTL]. */
static int add_set_docs(pbuf *b, int redis84)
{
    static const char *const exp[][2] = {{"seconds", "EX"}, {"milliseconds", "PX"},
                                         {"unix-time-seconds", "EXAT"},
                                         {"unix-time-milliseconds", "PXAT"}};
    size_t i;

    if (add_str(b, "set") < 0 || resp_add_array(b, 10) < 0 || add_str(b, "summary") < 0 ||
        add_str(b, "Sets the string value of a key, ignoring its type. The key is created if "
                   "it doesn't exist.") < 0 ||
        add_str(b, "since") < 0 || add_str(b, "1.0.0") < 0 || add_str(b, "group") < 0 ||
        add_str(b, "string") < 0 || add_str(b, "complexity") < 0 || add_str(b, "O(1)") < 0 ||
        add_str(b, "arguments") < 0 || resp_add_array(b, 5) < 0)
        return -1;
    if (add_arg(b, "key", "key", NULL, 0) < 0 || add_arg(b, "value", "string", NULL, 0) < 0)
        return -1;
    /* condition: oneof */
    if (resp_add_array(b, 8) < 0 || add_str(b, "name") < 0 || add_str(b, "condition") < 0 ||
        add_str(b, "type") < 0 || add_str(b, "oneof") < 0 || add_str(b, "flags") < 0 ||
        resp_add_array(b, 1) < 0 || resp_add_status(b, "optional") < 0 ||
        add_str(b, "arguments") < 0 || resp_add_array(b, redis84 ? 6 : 3) < 0 ||
        add_arg(b, "nx", "pure-token", "NX", 0) < 0 || add_arg(b, "xx", "pure-token", "XX", 0) < 0)
        return -1;
    if (add_arg(b, redis84 ? "ifeq-value" : "comparison-value", "string", "IFEQ", 0) < 0)
        return -1;
    if (redis84 && (add_arg(b, "ifne-value", "string", "IFNE", 0) < 0 ||
                    add_arg(b, "ifdeq-digest", "string", "IFDEQ", 0) < 0 ||
                    add_arg(b, "ifdne-digest", "string", "IFDNE", 0) < 0))
        return -1;
    if (add_arg(b, "get", "pure-token", "GET", 1) < 0)
        return -1;
    if (resp_add_array(b, 8) < 0 || add_str(b, "name") < 0 || add_str(b, "expiration") < 0 ||
        add_str(b, "type") < 0 || add_str(b, "oneof") < 0 || add_str(b, "flags") < 0 ||
        resp_add_array(b, 1) < 0 || resp_add_status(b, "optional") < 0 ||
        add_str(b, "arguments") < 0 || resp_add_array(b, 5) < 0)
        return -1;
    for (i = 0; i < sizeof(exp) / sizeof(exp[0]); i++) {
        if (add_arg(b, exp[i][0], "integer", exp[i][1], 0) < 0)
            return -1;
    }
    return add_arg(b, "keepttl", "pure-token", "KEEPTTL", 0);
}

int native_command_docs(const personality *pp, const proxy_arg *argv, size_t argc, pbuf *up,
                        char *plan, size_t plancap, pbuf *local)
{
    size_t i;
    size_t nk = 0;
    int docs_form;
    int special = 0;

    if (argc < 3 || !arg_is(&argv[0], "COMMAND") ||
        !(arg_is(&argv[1], "INFO") || arg_is(&argv[1], "DOCS")))
        return 0;
    if (argc - 2 >= plancap)
        return 0; /* more names than a plan holds: left to the real server */
    docs_form = arg_is(&argv[1], "DOCS");
    for (i = 2; i < argc; i++) {
        plan[i - 2] = doc_letter(pp, &argv[i], docs_form);
        if (plan[i - 2] == 'k')
            nk++;
        else
            special = 1;
    }
    plan[argc - 2] = '\0';
    if (!special)
        return 0;
    if (nk > 0) {
        if (resp_add_array(up, 2 + nk) < 0 || resp_add_bulk(up, argv[0].p, argv[0].n) < 0 ||
            resp_add_bulk(up, argv[1].p, argv[1].n) < 0)
            return -1;
        for (i = 2; i < argc; i++) {
            if (plan[i - 2] == 'k' && resp_add_bulk(up, argv[i].p, argv[i].n) < 0)
                return -1;
        }
        return 1;
    }
    return native_command_reply(docs_form, plan, NULL, 0, local) < 0 ? -1 : 2;
}

int native_command_reply(int docs_form, const char *plan, const char *p, size_t n, pbuf *out)
{
    long long count = 0;
    size_t first = 0;
    size_t at;
    size_t i;
    size_t entries = 0;
    pbuf body = {0};
    int rc = -1;

    if (p != NULL) {
        if (resp_aggregate(p, n, &count, &first) != '*' || count < 0)
            return 0; /* an error, say: relayed as it is */
    }
    at = first;
    for (i = 0; plan[i] != '\0'; i++) {
        const struct native_doc *d = doc_of(plan[i]);

        if (plan[i] == 'k') {
            /* INFO: one element per name asked, nil if unknown.  DOCS: a
             * name and its map per known name, nothing for unknown ones,
             * so upstream's pairs are copied where the first 'k' stands. */
            size_t take = docs_form ? (size_t)count : 1;
            size_t k;

            if (docs_form && i > 0 && memchr(plan, 'k', i) != NULL)
                continue;
            for (k = 0; p != NULL && k < take; k++) {
                size_t elen = resp_reply_len(p + at, n - at);

                if (elen == 0)
                    goto out;
                if (pbuf_append(&body, p + at, elen) < 0)
                    goto out;
                at += elen;
            }
            entries += docs_form ? take : 1;
        } else if (plan[i] == 'S' || plan[i] == 'T') {
            if (add_set_docs(&body, plan[i] == 'T') < 0)
                goto out;
            entries += 2;
        } else if (d == NULL) {
            if (!docs_form) {
                if (pbuf_append(&body, "$-1\r\n", 5) < 0)
                    goto out;
                entries++;
            }
        } else if (docs_form) {
            if (add_docs_entry(&body, d) < 0)
                goto out;
            entries += 2;
        } else {
            if (add_info_entry(&body, d) < 0)
                goto out;
            entries++;
        }
    }
    if (resp_add_array(out, entries) < 0 ||
        pbuf_append(out, pbuf_head(&body), pbuf_used(&body)) < 0)
        goto out;
    rc = 1;
out:
    pbuf_free(&body);
    return rc;
}

int native_digest_reply(const char *p, size_t n, pbuf *out)
{
#ifdef PROXY_HAVE_XXHASH
    const char *s;
    size_t slen;
    char hex[17];

    if (resp_bulk(p, n, &s, &slen) < 0)
        return 0; /* nil (no key) or WRONGTYPE: as they are */
    snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)XXH3_64bits(s, slen));
    return resp_add_bulk(out, hex, 16) < 0 ? -1 : 1;
#else
    (void)p;
    (void)n;
    (void)out;
    return 0;
#endif
}
