/*
 * peer_clients: faithful clients of ours for the lock families whose own
 * code cannot be installed here (Ruby gems, Java artifacts, redis-py before
 * 2.10), each written from the library's published algorithm
 * (docs/legacy.md, Peers) and named after it.  They are NOT those
 * libraries: where the real code can be installed (npm redis-lock), the
 * interop suite runs the real code instead (peers.py).  hiredis only;
 * no code shared with relock.
 *
 *   --style redis-mutex          Ruby redis-mutex: SETNX Time.now.to_f +
 *                                expire; held while GET.to_f > now; else
 *                                GETSET, won if the old value <= now;
 *                                release: DEL if the value is still ours
 *                                (GET, compare, DEL).
 *   --style redis-py-2           redis-py < 2.10 Lock: SETNX time.time() +
 *                                timeout; GETSET when float(GET or 1) <
 *                                time.time(), won if the old value (or 1)
 *                                < time.time(); release: DEL.
 *   --style resque-lock-timeout  resque-lock-timeout: SETNX now.to_i +
 *                                timeout; GETSET when GET.to_i < now, won if
 *                                the old value .to_i < now; release: DEL.
 *   --style jedis-lock           jedis-lock: SETNX currentTimeMillis +
 *                                expire + 1; GETSET when Long.parseLong(GET)
 *                                < now (a non-number throws: the attempt
 *                                fails and is retried), won if the old value
 *                                equals the value read; release: DEL.
 *
 * Every other option is the classic worker's (worker.h): --unit must be
 * the family's, --timeout is in that unit.  The lease the client relies on
 * is its timeout from the moment it read its clock for the winning write.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "worker.h"

enum style { REDIS_MUTEX, REDIS_PY_2, RESQUE_TIMEOUT, JEDIS_LOCK };

static enum style style;

typedef struct held {
    char value[64];       /* what we wrote */
    uint64_t valid_until; /* monotonic ms: our clock reading + timeout */
} held;

static double now_f(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The value this family writes for a lease of timeout (its unit). */
static void write_value(const wk_opts *o, char *out, size_t len)
{
    switch (style) {
    case REDIS_MUTEX: /* Ruby Float#to_s: about five decimals here */
        snprintf(out, len, "%.5f", now_f() + (double)o->timeout);
        return;
    case REDIS_PY_2: /* Python repr: seven decimals at this magnitude */
        snprintf(out, len, "%.7f", now_f() + (double)o->timeout);
        return;
    case RESQUE_TIMEOUT:
        snprintf(out, len, "%lld", wk_wall(0) + o->timeout);
        return;
    case JEDIS_LOCK:
        snprintf(out, len, "%lld", wk_wall(1) + o->timeout + 1);
        return;
    }
}

/* Whether jedis' Long.parseLong accepts s. */
static int java_long(const char *s)
{
    size_t n = strlen(s), i = s[0] == '-' ? 1 : 0;
    return n > i && n - i <= 18 && strspn(s + i, "0123456789") == n - i;
}

/* The family's "has the value read expired" (1), "still held" (0), or a
 * thrown exception (-1). */
static int expired(const char *v)
{
    switch (style) {
    case REDIS_MUTEX: /* to_f: anything unparsable is 0.0 */
        return !(atof(v ? v : "") > now_f());
    case REDIS_PY_2: /* float(value or 1); a token would throw */
        if (v && strspn(v, "0123456789.") != strlen(v))
            return -1;
        return atof(v ? v : "1") < now_f();
    case RESQUE_TIMEOUT: /* to_i */
        return atoll(v ? v : "") < wk_wall(0);
    case JEDIS_LOCK:
        if (!v)
            return 0; /* jedis sees null and loops */
        if (!java_long(v))
            return -1;
        return atoll(v) < wk_wall(1);
    }
    return 0;
}

/* Whether the GETSET that returned old (NULL: nil) won, given the value
 * read before it. */
static int getset_won(const char *old, const char *read)
{
    switch (style) {
    case REDIS_MUTEX:
        return !old || atof(old) <= now_f();
    case REDIS_PY_2:
        return atof(old ? old : "1") < now_f();
    case RESQUE_TIMEOUT:
        return atoll(old ? old : "") < wk_wall(0);
    case JEDIS_LOCK:
        return old && strcmp(old, read) == 0;
    }
    return 0;
}

static void failed(redisContext *rc, const char *what)
{
    fprintf(stderr, "peer_clients: %s: %s\n", what, rc->err ? rc->errstr : "unexpected reply");
    exit(3);
}

/* A string reply's text into out, or NULL for nil. */
static const char *text_of(redisContext *rc, redisReply *r, const char *what, char *out,
                           size_t len)
{
    if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL))
        failed(rc, what);
    if (r->type == REDIS_REPLY_NIL)
        return NULL;
    snprintf(out, len, "%s", r->str);
    return out;
}

/* 1 acquired, 0 the deadline passed. */
static int acquire(wk_worker *w, redisContext *rc, held *h)
{
    const wk_opts *o = w->o;
    long timeout_ms = o->unit_ms ? o->timeout : o->timeout * 1000;
    for (;;) {
        uint64_t t0 = wk_mono_ms();
        if (o->until_ms && t0 >= o->until_ms)
            return 0;
        write_value(o, h->value, sizeof h->value);
        redisReply *r = redisCommand(rc, "SETNX %s %s", o->key, h->value);
        if (!r || r->type != REDIS_REPLY_INTEGER)
            failed(rc, "SETNX");
        long long set = r->integer;
        freeReplyObject(r);
        if (set == 1) {
            h->valid_until = t0 + (uint64_t)timeout_ms;
            return 1;
        }
        char cur[128], old[128];
        r = redisCommand(rc, "GET %s", o->key);
        const char *v = text_of(rc, r, "GET", cur, sizeof cur);
        freeReplyObject(r);
        int e = expired(v);
        if (e < 0)
            wk_error(w, "throw"); /* the Java/Python client's exception */
        if (e > 0 && (v || style == REDIS_PY_2)) {
            t0 = wk_mono_ms();
            write_value(o, h->value, sizeof h->value);
            r = redisCommand(rc, "GETSET %s %s", o->key, h->value);
            const char *was = text_of(rc, r, "GETSET", old, sizeof old);
            freeReplyObject(r);
            if (getset_won(was, v ? v : "")) {
                h->valid_until = t0 + (uint64_t)timeout_ms;
                return 1;
            }
            wk_log(w, "lose", NULL);
        }
        wk_sleep_us(wk_rand_between(w, 1000, 5000));
    }
}

static void release(wk_worker *w, redisContext *rc, const held *h)
{
    if (style == REDIS_MUTEX) {
        /* Only our own value (GET, compare, DEL: not atomic). */
        char cur[128];
        redisReply *r = redisCommand(rc, "GET %s", w->o->key);
        const char *v = text_of(rc, r, "GET", cur, sizeof cur);
        int ours = v && strcmp(v, h->value) == 0;
        freeReplyObject(r);
        if (!ours) {
            wk_log(w, "late", NULL);
            return;
        }
    }
    /* The others delete blindly, whoever holds the key now. */
    redisReply *r = redisCommand(rc, "DEL %s", w->o->key);
    if (!r || r->type != REDIS_REPLY_INTEGER)
        failed(rc, "DEL");
    freeReplyObject(r);
}

static int still_valid(void *ctx)
{
    const held *h = ctx;
    return wk_mono_ms() < h->valid_until;
}

int main(int argc, char **argv)
{
    /* --style STYLE first, then the classic worker's options. */
    if (argc < 3 || strcmp(argv[1], "--style") != 0) {
        fprintf(stderr, "usage: peer_clients --style redis-mutex|redis-py-2|"
                        "resque-lock-timeout|jedis-lock OPTIONS (classic_lock's)\n");
        return 2;
    }
    const char *names[] = {"redis-mutex", "redis-py-2", "resque-lock-timeout", "jedis-lock"};
    int found = -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(argv[2], names[i]) == 0)
            found = i;
    if (found < 0) {
        fprintf(stderr, "peer_clients: unknown style %s\n", argv[2]);
        return 2;
    }
    style = (enum style)found;
    argv[2] = argv[0];
    wk_opts o;
    wk_parse(argc - 2, argv + 2, &o, 0);
    if (o.unit_ms != (style == JEDIS_LOCK)) {
        fprintf(stderr, "peer_clients: %s counts in %s\n", names[found],
                style == JEDIS_LOCK ? "ms" : "s");
        return 2;
    }
    wk_worker w;
    /* The log's kinds are short words (checker.h). */
    const char *kinds[] = {"mutex", "redispy2", "resque", "jedis"};
    wk_init(&w, &o, kinds[found]);
    redisContext *rc = wk_connect(o.port);
    while (w.done < o.sections) {
        held h;
        if (!acquire(&w, rc, &h))
            break;
        if (wk_section(&w, rc, still_valid, &h) != 0)
            return 3;
        release(&w, rc, &h);
        wk_gap(&w);
    }
    redisFree(rc);
    return 0;
}
