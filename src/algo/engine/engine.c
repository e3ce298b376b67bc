/*
 * The engine's shared helpers (engine.h): the machine head's transitions,
 * batch building, the reply-shape check and the EVALSHA/NOSCRIPT step.
 * Pure logic: no I/O, no clock.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine.h"

relock__step relock__done(relock__mhead *h, relock_status st)
{
    h->st = st;
    return RELOCK__STEP_DONE;
}

relock__step relock__send(relock__mhead *h, const relock__batch *out)
{
    h->in_txn = out->in_txn;
    return RELOCK__STEP_SEND;
}

relock__step relock__send_at(relock__mhead *h, relock__batch *out, int pc, int in_txn)
{
    out->in_txn = in_txn;
    h->pc = pc;
    return relock__send(h, out);
}

/* ------------------------------------------------------------------ batches */

/* Marks the batch: relock__batch_ok() says no, every later add fails. */
static int mark_bad(relock__batch *b)
{
    b->n = RELOCK__BATCH_CMDS + 1;
    return -1;
}

/* Marks the scratch space overflowed (relock__batch_ok() says no). */
static const char *scratch_full(relock__batch *b)
{
    b->used = sizeof b->scratch + 1;
    return NULL;
}

void relock__batch_reset(relock__batch *b)
{
    b->cmd = b->own;
    b->cap = RELOCK__BATCH_OWN;
    b->n = 0;
    b->in_txn = 0;
    b->pinned = 0;
    b->slow_ms = 0;
    b->used = 0;
}

int relock__batch_ok(const relock__batch *b)
{
    return b->n >= 0 && b->n <= b->cap && b->cap <= RELOCK__BATCH_CMDS &&
           b->used <= sizeof b->scratch;
}

void relock__batch_widen(relock__batch *b, relock__cmd *cmd, int cap)
{
    if (b->n != 0 || !cmd || cap < 1 || cap > RELOCK__BATCH_CMDS) {
        mark_bad(b);
        return;
    }
    b->cmd = cmd;
    b->cap = cap;
}

int relock__batch_add(relock__batch *b, int argc, const char *const *argv)
{
    if (!relock__batch_ok(b) || b->n >= b->cap || argc < 1 || argc > RELOCK__CMD_ARGS)
        return mark_bad(b);
    relock__cmd *cmd = &b->cmd[b->n];
    for (int i = 0; i < argc; i++) {
        if (!argv[i]) /* a failed relock__batch_fmt */
            return mark_bad(b);
        cmd->argv[i] = argv[i];
        cmd->len[i] = strlen(argv[i]);
    }
    cmd->argc = argc;
    return b->n++;
}

const char *relock__batch_fmt(relock__batch *b, const char *fmt, ...)
{
    if (b->used >= sizeof b->scratch)
        return scratch_full(b);
    char *at = b->scratch + b->used;
    size_t room = sizeof b->scratch - b->used;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(at, room, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= room)
        return scratch_full(b);
    b->used += (size_t)n + 1;
    return at;
}

/* As relock__batch_fmt(b, "%lld", v), without vsnprintf()'s format
 * parsing: every step that sends a TTL or a key count writes a number. */
const char *relock__batch_num(relock__batch *b, long long v)
{
    char digits[24], *d = digits + sizeof digits;
    /* The magnitude is taken as unsigned: LLONG_MIN has no positive long long. */
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    do {
        *--d = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--d = '-';
    size_t n = (size_t)(digits + sizeof digits - d);
    if (b->used >= sizeof b->scratch || n >= sizeof b->scratch - b->used)
        return scratch_full(b);
    char *at = b->scratch + b->used;
    memcpy(at, d, n);
    at[n] = '\0';
    b->used += n + 1;
    return at;
}

static int add_words(relock__batch *b, int argc, va_list ap)
{
    const char *argv[RELOCK__CMD_ARGS];
    for (int i = 0; i < argc && i < RELOCK__CMD_ARGS; i++)
        argv[i] = va_arg(ap, const char *);
    return relock__batch_add(b, argc, argv);
}

int relock__batch_words(relock__batch *b, int argc, ...)
{
    va_list ap;
    va_start(ap, argc);
    int i = add_words(b, argc, ap);
    va_end(ap);
    return i;
}

relock__step relock__send_words(relock__mhead *h, relock__batch *out, int pc, int in_txn,
                                int argc, ...)
{
    relock__batch_reset(out);
    va_list ap;
    va_start(ap, argc);
    add_words(out, argc, ap);
    va_end(ap);
    return relock__send_at(h, out, pc, in_txn);
}

long long relock__reply_elem_int(const redisReply *r, size_t i)
{
    if (r && r->type == REDIS_REPLY_ARRAY && i < r->elements &&
        r->element[i]->type == REDIS_REPLY_INTEGER)
        return r->element[i]->integer;
    return 0;
}

/* ------------------------------------------------------------------ replies */

/* Each reply type's letter in a shape (engine.h). */
static const char type_letter[] = {
    [REDIS_REPLY_STATUS] = 's', [REDIS_REPLY_STRING] = 'b', [REDIS_REPLY_INTEGER] = 'i',
    [REDIS_REPLY_NIL] = 'n',    [REDIS_REPLY_ARRAY] = 'a',  [REDIS_REPLY_ERROR] = 'e',
};

static int letter_is(char letter, const redisReply *r)
{
    if (letter == '?')
        return 1;
    return r->type > 0 && (size_t)r->type < sizeof type_letter && type_letter[r->type] == letter;
}

/* One element's group at *p: a letter, or letters in parentheses.
 * Advances *p past it. */
static int group_is(const char **p, const redisReply *r)
{
    if (**p != '(') {
        int ok = r && letter_is(**p, r);
        (*p)++;
        return ok;
    }
    int ok = 0;
    for ((*p)++; **p && **p != ')'; (*p)++)
        if (r && letter_is(**p, r))
            ok = 1;
    if (**p == ')')
        (*p)++;
    return ok;
}

/* The element part "[...]" at p for array r. */
static int elements_are(const char *p, const redisReply *r)
{
    size_t i = 0;
    for (p++; *p && *p != ']' && *p != '$'; i++) {
        const redisReply *e = i < r->elements ? r->element[i] : NULL;
        if (!group_is(&p, e))
            return 0;
    }
    if (*p == '$' && r->elements != i)
        return 0;
    return 1;
}

int relock__reply_is(const redisReply *r, const char *shape)
{
    if (!r)
        return 0;
    for (const char *p = shape; *p; p++) {
        if (*p == '[') { /* another letter's elements */
            while (p[1] && p[1] != ']')
                p++;
            continue;
        }
        if (!letter_is(*p, r))
            continue;
        if (*p == 'a' && p[1] == '[')
            return elements_are(p + 1, r);
        return 1;
    }
    return 0;
}

relock_status relock__reply_check_at(relock_client *c, const char *file, int line,
                                     const redisReply *r, const char *shape, const char *what)
{
    if (relock__reply_is(r, shape))
        return RELOCK_OK;
    return relock__bad_reply(c, file, line, what, r);
}

relock_status relock__fault_fail(relock_client *c, const relock__feed *in)
{
    relock_status st = in->fault_status != RELOCK_OK ? in->fault_status : RELOCK_EIO;
    return RELOCK__FAIL(&c->err, st, "%s", in->fault_text ? in->fault_text : "connection lost");
}

/* ------------------------------------------------------------------ scripts */

int relock__batch_script(relock__batch *b, const relock_client *c, int id, int nkeys, int nargs,
                         const char *const *args, int by_eval)
{
    const char *argv[RELOCK__CMD_ARGS];
    if (nargs < nkeys || nargs + 3 > RELOCK__CMD_ARGS || id < 0 || id >= RELOCK__NSCRIPTS)
        return mark_bad(b);
    argv[0] = by_eval ? "EVAL" : "EVALSHA";
    argv[1] = by_eval ? relock__script_source(id) : c->sha[id];
    argv[2] = relock__batch_num(b, nkeys);
    for (int i = 0; i < nargs; i++)
        argv[3 + i] = args[i];
    return relock__batch_add(b, nargs + 3, argv);
}

int relock__script_again(const relock__feed *in, int idx, int *by_eval)
{
    if (*by_eval || idx < 0 || idx >= in->nreply)
        return 0;
    const redisReply *r = in->reply[idx];
    if (!r || r->type != REDIS_REPLY_ERROR || !r->str || strncmp(r->str, "NOSCRIPT", 8) != 0)
        return 0;
    *by_eval = 1;
    return 1;
}

int relock__reply_transient(const char *text)
{
    static const char *const words[] = {"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN"};
    if (!text)
        return 0;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t n = strlen(words[i]);
        if (strncmp(text, words[i], n) == 0 && (text[n] == ' ' || text[n] == '\0'))
            return 1;
    }
    return 0;
}

relock_status relock__bad_reply(relock_client *c, const char *file, int line, const char *what,
                                const redisReply *r)
{
    static const char *const types[] = {"?", "string", "array", "integer", "nil", "status",
                                        "error"};
    /* No server: a machine run by a driver without connections. */
    static const relock__server nowhere = {.host = "(no server)"};
    const relock__server *srv = c->conn.srv ? c->conn.srv : &nowhere;
    /* WRONGTYPE since 2.8, "wrong kind of value" before: a key of another
     * program.  The public calls that know the key name its type
     * afterwards (relock__foreign_type()). */
    if (r && r->type == REDIS_REPLY_ERROR &&
        (strncmp(r->str, "WRONGTYPE", 9) == 0 || strstr(r->str, "wrong kind of value")))
        return relock__err_set(&c->err, RELOCK_EFOREIGN, file, line, r->str,
                               "%s on " RELOCK__ADDR_FMT ": the key holds a value that is not a "
                               "string, so it is not a lock; relock never takes over, changes or "
                               "deletes it",
                               what, RELOCK__ADDR(srv));
    if (r && r->type == REDIS_REPLY_ERROR)
        return relock__err_set(&c->err, RELOCK_EPROTO, file, line, r->str,
                               "%s on " RELOCK__ADDR_FMT ": server error: %s", what,
                               RELOCK__ADDR(srv), r->str);
    int t = r ? r->type : 0;
    return relock__err_set(&c->err, RELOCK_EPROTO, file, line, NULL,
                           "%s on " RELOCK__ADDR_FMT ": unexpected %s reply", what,
                           RELOCK__ADDR(srv), (t >= 1 && t <= 6) ? types[t] : "unknown");
}
