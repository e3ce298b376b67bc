/* Replies built by hand for tests that feed step machines (fakereply.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakereply.h"

#define MAX_TRACKED 4096
static redisReply *tracked[MAX_TRACKED];
static int ntracked;

static redisReply *track(redisReply *r)
{
    if (ntracked < MAX_TRACKED)
        tracked[ntracked++] = r;
    return r;
}

static redisReply *make(int type)
{
    redisReply *r = calloc(1, sizeof *r);
    if (!r)
        abort();
    r->type = type;
    return r;
}

static redisReply *with_text(int type, const char *s)
{
    redisReply *r = make(type);
    r->len = strlen(s);
    r->str = malloc(r->len + 1);
    if (!r->str)
        abort();
    memcpy(r->str, s, r->len + 1);
    return track(r);
}

redisReply *fr_status(const char *s)
{
    return with_text(REDIS_REPLY_STATUS, s);
}

redisReply *fr_str(const char *s)
{
    return with_text(REDIS_REPLY_STRING, s);
}

redisReply *fr_err(const char *s)
{
    return with_text(REDIS_REPLY_ERROR, s);
}

redisReply *fr_int(long long v)
{
    redisReply *r = make(REDIS_REPLY_INTEGER);
    r->integer = v;
    return track(r);
}

redisReply *fr_nil(void)
{
    return track(make(REDIS_REPLY_NIL));
}

/* An element belongs to its array: it leaves the tracked list. */
static void untrack(redisReply *r)
{
    for (int i = ntracked - 1; i >= 0; i--)
        if (tracked[i] == r) {
            tracked[i] = tracked[--ntracked];
            return;
        }
}

redisReply *fr_arr(int n, ...)
{
    redisReply *r = make(REDIS_REPLY_ARRAY);
    r->elements = (size_t)n;
    r->element = calloc(n > 0 ? (size_t)n : 1, sizeof *r->element);
    if (!r->element)
        abort();
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        r->element[i] = va_arg(ap, redisReply *);
        untrack(r->element[i]);
    }
    va_end(ap);
    return track(r);
}

void fr_free_all(void)
{
    for (int i = 0; i < ntracked; i++)
        freeReplyObject(tracked[i]);
    ntracked = 0;
}

fake fake_new(void)
{
    fake f;
    f.c = calloc(1, sizeof *f.c);
    if (!f.c)
        abort();
    relock__settings_default(&f.c->s);
    strcpy(f.c->s.servers[0].host, "127.0.0.1");
    f.c->s.servers[0].port = 6379;
    f.c->s.nservers = 1;
    f.c->conn.srv = &f.c->s.servers[0];
    relock__scripts_init(f.c);
    f.l = NULL;
    fake_rekey(&f);
    return f;
}

void fake_rekey(fake *f)
{
    if (f->l)
        free(f->l->unsure_value); /* (a 2.0 extend's lost reply) */
    free(f->l);
    relock_lock *l = calloc(1, sizeof *l + 3 * 2048);
    if (!l)
        abort();
    l->c = f->c;
    l->name = (char *)(l + 1);
    l->key = l->name + 2048;
    l->fence_key = l->key + 2048;
    strcpy(l->name, "job");
    snprintf(l->key, 2048, "%sjob", f->c->s.key_prefix);
    relock__fence_key(l->key, l->fence_key, 2048);
    l->ttl_ms = 1000;
    f->l = l;
}

void fake_free(fake *f)
{
    fr_free_all();
    if (f->l)
        free(f->l->unsure_value); /* (a 2.0 extend's lost reply) */
    free(f->l);
    free(f->c);
    f->l = NULL;
    f->c = NULL;
}

static redisReply *feed_store[RELOCK__BATCH_CMDS];

relock__feed feed_none(uint64_t mono_ms)
{
    relock__feed in;
    memset(&in, 0, sizeof in);
    in.reply = feed_store;
    in.mono_ms = mono_ms;
    return in;
}

relock__feed feed_replies(uint64_t mono_ms, int n, ...)
{
    relock__feed in = feed_none(mono_ms);
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n && i < RELOCK__BATCH_CMDS; i++)
        feed_store[i] = va_arg(ap, redisReply *);
    va_end(ap);
    in.nreply = n;
    return in;
}

relock__feed feed_fault(uint64_t mono_ms, relock__fault f, int nreply, ...)
{
    relock__feed in = feed_none(mono_ms);
    va_list ap;
    va_start(ap, nreply);
    for (int i = 0; i < nreply && i < RELOCK__BATCH_CMDS; i++)
        feed_store[i] = va_arg(ap, redisReply *);
    va_end(ap);
    in.nreply = nreply;
    in.fault = f;
    in.fault_status = RELOCK_EIO;
    in.fault_text = f == RELOCK__FAULT_LOST ? "SET on 127.0.0.1:6379: connection lost"
                                            : "connect to 127.0.0.1:6379: refused";
    return in;
}

int batch_is(const relock__batch *b, int i, ...)
{
    if (i < 0 || i >= b->n)
        return 0;
    const relock__cmd *k = &b->cmd[i];
    va_list ap;
    va_start(ap, i);
    int argc = 0, same = 1;
    for (const char *w; (w = va_arg(ap, const char *)) != NULL; argc++)
        if (argc >= k->argc || strcmp(k->argv[argc], w) != 0 || k->len[argc] != strlen(w))
            same = 0;
    va_end(ap);
    return same && argc == k->argc;
}
