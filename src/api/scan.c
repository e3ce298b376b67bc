/*
 * The migration audit (`relock scan`, docs/migration.md): walk the lock
 * keys, tell from each value and TTL which kind of client wrote it, read
 * the marker in which upgraded clients record their last sighting of a
 * legacy writer, and judge whether the fleet may leave bridge mode.
 *
 * Read-only: nothing is written, so the audit may run at any time, with
 * any mode, against the live servers.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "routing.h"
#include "relockx.h"

/* Keys per pipelined batch, and SCAN's COUNT hint. */
#define BATCH 200
/* One SCAN call visits about COUNT buckets; 25 million calls cover more
 * buckets than a server can hold keys (2^32), so the bound only stops a
 * walk that would otherwise never end (a cursor that never returns to 0). */
#define MAX_SCAN_CALLS 25000000L
#define MATCH_MAX 1024

/*
 * The bound on keys examined by one walk.  Not in a header on purpose:
 * only the tests change it (they declare it themselves), to reach the
 * incomplete path without ten million keys.
 */
extern long long relock__scan_max_keys;
long long relock__scan_max_keys = RELOCK_SCAN_MAX_KEYS;

/* The lock families scan names (see family_of): the fixed ones and one per
 * peer profile (peers.c), with room to spare. */
#define FAMILIES_MAX 32

/* The counters by the class of relock_scan_counter, and every string
 * whole (allocated at its length). */
struct relock_scan_result {
    long long examined, legacy, bridge, modern, stale, unknown, skipped, other_types, gone;
    char *legacy_example; /* NULL: none */
    size_t legacy_example_len;
    char marker_key[RELOCK__PREFIX_MAX + 32];
    long long legacy_seen_ms;
    int marker_unreadable;
    char *match;
    int keys_fallback;
    int complete;
    long long now_ms;
    long long quiet_window_ms;
    relock_scan_verdict verdict;
    char *verdict_text; /* NULL: no verdict (an error) */
    int cluster_masters;
    int nomem; /* an allocation failed during the walk */
    long long sig[RELOCK_SIG_COUNT];
    /* The families met (see families[]): keys, and the first key's name. */
    long long fam_keys[FAMILIES_MAX];
    char *fam_example[FAMILIES_MAX];
    char *families_text;
    char watch_key[RELOCK__PREFIX_MAX + 32];
    long long watching_since_ms;
};

void relock_scan_result_free(relock_scan_result *r)
{
    if (!r)
        return;
    free(r->legacy_example);
    free(r->match);
    free(r->verdict_text);
    for (int i = 0; i < FAMILIES_MAX; i++)
        free(r->fam_example[i]);
    free(r->families_text);
    free(r);
}

long long relock_scan_result_count(const relock_scan_result *r, relock_scan_counter which)
{
    if (!r)
        return 0;
    switch (which) {
    case RELOCK_SCAN_EXAMINED:
        return r->examined;
    case RELOCK_SCAN_LEGACY:
        return r->legacy;
    case RELOCK_SCAN_BRIDGE:
        return r->bridge;
    case RELOCK_SCAN_MODERN:
        return r->modern;
    case RELOCK_SCAN_STALE:
        return r->stale;
    case RELOCK_SCAN_UNKNOWN:
        return r->unknown;
    case RELOCK_SCAN_SKIPPED:
        return r->skipped;
    case RELOCK_SCAN_OTHER_TYPES:
        return r->other_types;
    case RELOCK_SCAN_GONE:
        return r->gone;
    }
    return 0;
}

const char *relock_scan_result_legacy_example(const relock_scan_result *r, size_t *len)
{
    int some = r && r->legacy_example;
    if (len)
        *len = some ? r->legacy_example_len : 0;
    return some ? r->legacy_example : "";
}

const char *relock_scan_result_marker_key(const relock_scan_result *r)
{
    return r ? r->marker_key : "";
}

long long relock_scan_result_legacy_seen_ms(const relock_scan_result *r)
{
    return r ? r->legacy_seen_ms : -1;
}

int relock_scan_result_marker_unreadable(const relock_scan_result *r)
{
    return r ? r->marker_unreadable : 0;
}

const char *relock_scan_result_match(const relock_scan_result *r)
{
    return r && r->match ? r->match : "";
}

int relock_scan_result_keys_fallback(const relock_scan_result *r)
{
    return r ? r->keys_fallback : 0;
}

int relock_scan_result_complete(const relock_scan_result *r)
{
    return r ? r->complete : 0;
}

long long relock_scan_result_now_ms(const relock_scan_result *r)
{
    return r ? r->now_ms : -1;
}

long long relock_scan_result_quiet_window_ms(const relock_scan_result *r)
{
    return r ? r->quiet_window_ms : 0;
}

relock_scan_verdict relock_scan_result_verdict(const relock_scan_result *r)
{
    return r ? r->verdict : RELOCK_SCAN_INCOMPLETE;
}

const char *relock_scan_result_verdict_text(const relock_scan_result *r)
{
    return r && r->verdict_text ? r->verdict_text : "";
}

int relock_scan_result_cluster_masters(const relock_scan_result *r)
{
    return r ? r->cluster_masters : 0;
}

long long relock_scan_result_watching_since_ms(const relock_scan_result *r)
{
    return r ? r->watching_since_ms : -1;
}

long long relock_scan_result_signature(const relock_scan_result *r, relock_key_signature sig)
{
    return r && (int)sig >= 0 && sig < RELOCK_SIG_COUNT ? r->sig[sig] : 0;
}

const char *relock_scan_result_families(const relock_scan_result *r)
{
    return r && r->families_text ? r->families_text : "";
}

const char *relock_key_signature_name(relock_key_signature sig)
{
    switch (sig) {
    case RELOCK_SIG_TS_S:
        return "ts-s";
    case RELOCK_SIG_TS_S_FRAC:
        return "ts-s-frac";
    case RELOCK_SIG_TS_MS:
        return "ts-ms";
    case RELOCK_SIG_NO_TTL_FLAG:
        return "setnx-no-ttl";
    case RELOCK_SIG_TOKEN:
        return "token";
    case RELOCK_SIG_OTHER_TOKEN:
        return "other-token";
    case RELOCK_SIG_ZSET:
        return "zset";
    case RELOCK_SIG_HASH:
        return "hash";
    case RELOCK_SIG_OTHER:
    case RELOCK_SIG_COUNT:
        break;
    }
    return "other";
}

/* Appends to a growing string; on a failed allocation sets r->nomem and
 * leaves the string as it was. */
static void text_addf(relock_scan_result *r, char **text, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void text_addf(relock_scan_result *r, char **text, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    size_t have = *text ? strlen(*text) : 0;
    char *t = n < 0 ? NULL : realloc(*text, have + (size_t)n + 1);
    if (!t) {
        r->nomem = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(t + have, (size_t)n + 1, fmt, ap);
    va_end(ap);
    *text = t;
}

const char *relock_scan_verdict_name(relock_scan_verdict v)
{
    switch (v) {
    case RELOCK_SCAN_STAY_BRIDGE:
        return "stay-bridge";
    case RELOCK_SCAN_MODERN_SAFE:
        return "modern-safe";
    case RELOCK_SCAN_MODERN_SAFE_UNSEEN:
        return "modern-safe-unseen";
    case RELOCK_SCAN_INCOMPLETE:
        return "incomplete";
    case RELOCK_SCAN_NO_EVIDENCE:
        return "no-evidence-yet";
    }
    return "unknown";
}

/* relock's own keys contain a space, which no lock name or key prefix
 * may (keys.c): fence counters and the legacy markers of every prefix. */
static int own_key(const char *k, size_t len)
{
    return memmem(k, len, RELOCK__FENCE_SUFFIX, sizeof RELOCK__FENCE_SUFFIX - 1) != NULL ||
           memmem(k, len, RELOCK__OWNER_SUFFIX, sizeof RELOCK__OWNER_SUFFIX - 1) != NULL ||
           memmem(k, len, RELOCK__BREAKS_SUFFIX, sizeof RELOCK__BREAKS_SUFFIX - 1) != NULL ||
           memmem(k, len, RELOCK__MARKER_NAME, sizeof RELOCK__MARKER_NAME - 1) != NULL ||
           memmem(k, len, RELOCK__WATCH_NAME, sizeof RELOCK__WATCH_NAME - 1) != NULL;
}

static int wrong_type(const redisReply *r)
{
    /* WRONGTYPE since 2.8; "ERR Operation against a key holding the wrong
     * kind of value" before. */
    return r->type == REDIS_REPLY_ERROR &&
           (strncmp(r->str, "WRONGTYPE", 9) == 0 || strstr(r->str, "wrong kind of value"));
}

const char *relock_key_class_name(relock_key_class k)
{
    switch (k) {
    case RELOCK_KEY_LEGACY:
        return "legacy";
    case RELOCK_KEY_BRIDGE:
        return "bridge";
    case RELOCK_KEY_MODERN:
        return "modern";
    case RELOCK_KEY_STALE:
        return "stale";
    case RELOCK_KEY_UNKNOWN:
        return "unknown";
    case RELOCK_KEY_OTHER_TYPE:
        return "other";
    }
    return "unknown";
}

/*
 * A timestamp is judged as legacy readers judge it: an integer V holds
 * until the clock passes V, i.e. it is expired once now >= V + 1 in its
 * unit, which its number of digits tells; a fraction, written only by
 * clients that compare fractions, once now >= V (a fraction of zero, a
 * whole clock's time as a float, as an integer).
 */
relock_key_class relock_key_classify(const char *value, size_t len, long long pttl_ms,
                                     long long now_ms)
{
    if (!value)
        return RELOCK_KEY_UNKNOWN;
    relock__value v;
    relock__classify(value, len, &v);
    if (v.kind == RELOCK_VALUE_TOKEN)
        return pttl_ms >= 0 ? RELOCK_KEY_MODERN
                            : RELOCK_KEY_UNKNOWN; /* modern values always carry a TTL */
    int unit_ms = v.kind == RELOCK_VALUE_TIMESTAMP ? relock__ts_unit_guess(v.ts_digits) : -1;
    if (unit_ms < 0)
        return RELOCK_KEY_UNKNOWN;
    if (pttl_ms >= 0)
        return RELOCK_KEY_BRIDGE;
    relock__stamp st;
    relock__value_stamp(&v, &st);
    long long u = unit_ms ? 1 : 1000;
    long long end_ms = v.frac && v.frac_num > 0 ? relock__stamp_ms(&st, u, 1) : (v.ts + 1) * u;
    return now_ms >= end_ms ? RELOCK_KEY_STALE : RELOCK_KEY_LEGACY;
}

/* ------------------------------------------------------------ signatures */

/* "host:pid" (resque-scheduler) or "host|pid" (phpredis sessions): a
 * word, the separator, digits. */
static int host_pid(const char *v, size_t len, char sep)
{
    const char *at = len ? memchr(v, sep, len) : NULL;
    if (!at || at == v || (size_t)(at - v) + 1 >= len)
        return 0;
    for (const char *p = at + 1; p < v + len; p++)
        if (*p < '0' || *p > '9')
            return 0;
    return 1;
}

/* Laravel's owner: 16 letters and digits (Str::random(16)). */
static int owner16(const char *v, size_t len)
{
    if (len != 16)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!((v[i] >= 'a' && v[i] <= 'z') || (v[i] >= 'A' && v[i] <= 'Z') ||
              (v[i] >= '0' && v[i] <= '9')))
            return 0;
    return 1;
}

static relock_key_signature sign_string(const char *v, size_t len, long long pttl)
{
    relock__value val;
    relock__classify(v, len, &val);
    if (val.kind == RELOCK_VALUE_TIMESTAMP) {
        int unit = relock__ts_unit_guess(val.ts_digits);
        if (unit == 0)
            return val.frac ? RELOCK_SIG_TS_S_FRAC : RELOCK_SIG_TS_S;
        /* Milliseconds with a fraction (Date.now() plus a fractional
         * timeout) are the same family: the class counts them as
         * timestamps, and legacy mode in ms waits for them. */
        if (unit == 1)
            return RELOCK_SIG_TS_MS;
    }
    if (pttl >= 0)
        return val.kind == RELOCK_VALUE_TOKEN ? RELOCK_SIG_TOKEN : RELOCK_SIG_OTHER_TOKEN;
    if ((len == 4 && memcmp(v, "true", 4) == 0) || len == 0 || host_pid(v, len, ':') ||
        host_pid(v, len, '|') || owner16(v, len))
        return RELOCK_SIG_NO_TTL_FLAG;
    return RELOCK_SIG_OTHER;
}

/* The families scan names, from the signature and the key (the templates
 * of the peer profiles, peers.c, for the timestamp kinds). */
enum {
    FAM_BRIDGE = 0,
    FAM_TOKEN,
    FAM_CLASSIC_S,
    FAM_FLOAT_S,
    FAM_MS,
    FAM_FLAG,
    FAM_RESQUE_LOCK,
    FAM_SCHEDULER,
    FAM_SPRING,
    FAM_LARAVEL0,
    FAM_LARAVEL,
    FAM_SHEDLOCK,
    FAM_PHPREDIS,
    FAM_OTHER_TOKEN,
    FAM_ZSET,
    FAM_HASH,
    FAM_PEER /* + profile index */
};

static const char *const family_names[FAM_PEER] = {
    "relock bridge (a timestamp with a TTL)",
    "relock modern, or another 32-hex token (redis-py >= 3, python-redis-lock)",
    "classic integer seconds (classic SETNX, resque-lock-timeout, Discourse)",
    "float seconds (redis-py < 2.10, redis-mutex, redis-objects <= 1.4.1)",
    "integer milliseconds (jedis-lock, ServiceStack.Redis, npm redis-lock 0.0.x)",
    "SETNX without a TTL (resque-lock, Spring cache lock, Laravel with seconds = 0)",
    "resque-lock (lock:<Job>-<args> = true)",
    "resque-scheduler master lock (host:pid)",
    "Spring Data Redis cache lock (<cache>~lock)",
    "Laravel Cache::lock with seconds = 0 (16-character owner, no TTL)",
    "Laravel Cache::lock (16-character owner)",
    "ShedLock (ADDED:...)",
    "phpredis session lock (host|pid)",
    "another token lock with a TTL",
    "Symfony Lock (a sorted set)",
    "Redisson or Cm_RedisSession (a hash)",
};

/* Whether key (len bytes) fits a template "pre{name}post". */
static int fits_template(const char *key, size_t len, const char *tmpl)
{
    const char *at = strstr(tmpl, "{name}");
    if (!at)
        return 0;
    size_t pre = (size_t)(at - tmpl), post = strlen(at + 6);
    if (pre + post == 0 || len <= pre + post)
        return 0;
    return memcmp(key, tmpl, pre) == 0 && memcmp(key + len - post, at + 6, post) == 0;
}

static int has_text(const char *key, size_t len, const char *text)
{
    return memmem(key, len, text, strlen(text)) != NULL;
}

static int family_of(relock_key_signature sig, const char *key, size_t keylen, const char *v,
                     size_t vlen, long long pttl)
{
    switch (sig) {
    case RELOCK_SIG_TS_S:
    case RELOCK_SIG_TS_S_FRAC:
    case RELOCK_SIG_TS_MS: {
        if (pttl >= 0)
            return FAM_BRIDGE;
        int ms = sig == RELOCK_SIG_TS_MS, frac = sig == RELOCK_SIG_TS_S_FRAC;
        for (int i = 0; i < relock__peer_count(); i++) {
            const relock__peer *p = relock__peer_at(i);
            if (p->unit_ms == ms && p->frac_values == frac &&
                fits_template(key, keylen, p->key_template))
                return FAM_PEER + i;
        }
        return ms ? FAM_MS : frac ? FAM_FLOAT_S : FAM_CLASSIC_S;
    }
    case RELOCK_SIG_NO_TTL_FLAG:
        if (vlen == 4 && memcmp(v, "true", 4) == 0 && keylen > 5 && memcmp(key, "lock:", 5) == 0)
            return FAM_RESQUE_LOCK;
        if (host_pid(v, vlen, ':') && has_text(key, keylen, "scheduler_master_lock"))
            return FAM_SCHEDULER;
        if (vlen == 0 && keylen > 5 && memcmp(key + keylen - 5, "~lock", 5) == 0)
            return FAM_SPRING;
        if (owner16(v, vlen))
            return FAM_LARAVEL0;
        return FAM_FLAG;
    case RELOCK_SIG_TOKEN:
        return FAM_TOKEN;
    case RELOCK_SIG_OTHER_TOKEN:
        if (owner16(v, vlen))
            return FAM_LARAVEL;
        if (vlen > 6 && memcmp(v, "ADDED:", 6) == 0)
            return FAM_SHEDLOCK;
        if (host_pid(v, vlen, '|'))
            return FAM_PHPREDIS;
        return FAM_OTHER_TOKEN;
    case RELOCK_SIG_ZSET:
        return FAM_ZSET;
    case RELOCK_SIG_HASH:
        return FAM_HASH;
    case RELOCK_SIG_OTHER:
    case RELOCK_SIG_COUNT:
        break;
    }
    return -1;
}

/* Counts a key under its signature and family. */
static void note_signature(relock_scan_result *out, relock_key_signature sig, const char *key,
                           size_t keylen, const char *v, size_t vlen, long long pttl)
{
    out->sig[sig]++;
    int f = family_of(sig, key, keylen, v, vlen, pttl);
    if (f < 0 || f >= FAMILIES_MAX)
        return;
    if (out->fam_keys[f]++ == 0) {
        out->fam_example[f] = malloc(keylen + 1);
        if (!out->fam_example[f]) {
            out->nomem = 1;
            return;
        }
        memcpy(out->fam_example[f], key, keylen);
        out->fam_example[f][keylen] = '\0';
    }
}

static const char *family_name(int f, char *buf, size_t len)
{
    if (f < FAM_PEER)
        return family_names[f];
    const relock__peer *p = relock__peer_at(f - FAM_PEER);
    const char *at = strstr(p->key_template, "{name}");
    snprintf(buf, len, "%s (%.*s<name>%s)", p->family, (int)(at - p->key_template),
             p->key_template, at + 6);
    return buf;
}

static void text_addf(relock_scan_result *r, char **text, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The families met, one per line. */
static void describe_families(relock_scan_result *out)
{
    char buf[160];
    for (int f = 0; f < FAMILIES_MAX; f++)
        if (out->fam_keys[f] && (f < FAM_PEER || relock__peer_at(f - FAM_PEER)))
            text_addf(out, &out->families_text, "%s%s: %lld key%s, e.g. %s",
                      out->families_text ? "\n" : "", family_name(f, buf, sizeof buf),
                      out->fam_keys[f], out->fam_keys[f] == 1 ? "" : "s",
                      out->fam_example[f] ? out->fam_example[f] : "");
}

/* One walk: the counts, and whom to tell of each key. */
typedef struct walk {
    relock_scan_result *out;
    relock_scan_key_fn fn;
    void *arg;
} walk;

static void tell(walk *w, relock_key_class k, const char *key, size_t keylen)
{
    if (w->fn)
        w->fn(w->arg, k, key, keylen);
}

/* Counts one key from its GET reply and its TTL in ms (-1 none, -2
 * absent). */
static void count_value(walk *w, const char *key, size_t keylen, const redisReply *get,
                        long long ttl, long long now_ms)
{
    relock_scan_result *out = w->out;
    if (get->type == REDIS_REPLY_NIL || ttl == -2) {
        out->gone++;
        return;
    }
    relock_key_class k = relock_key_classify(get->str, get->len, ttl, now_ms);
    note_signature(out, sign_string(get->str, get->len, ttl), key, keylen, get->str, get->len,
                   ttl);
    tell(w, k, key, keylen);
    switch (k) {
    case RELOCK_KEY_MODERN:
        out->modern++;
        return;
    case RELOCK_KEY_BRIDGE:
        out->bridge++;
        return;
    case RELOCK_KEY_STALE:
        out->stale++;
        return;
    case RELOCK_KEY_UNKNOWN:
    case RELOCK_KEY_OTHER_TYPE:
        out->unknown++;
        return;
    case RELOCK_KEY_LEGACY:
        break;
    }
    out->legacy++;
    if (!out->legacy_example) {
        out->legacy_example = malloc(keylen + 1);
        if (!out->legacy_example) {
            out->nomem = 1;
            return;
        }
        memcpy(out->legacy_example, key, keylen);
        out->legacy_example[keylen] = '\0';
        out->legacy_example_len = keylen;
    }
}

/* The connection is out of step with its replies: drop it. */
static relock_status lost_sync(relock_client *c, relock_status st, const char *what)
{
    const relock__server *srv = c->conn.srv;
    relock_status r = RELOCK__FAIL(
        &c->err, st, "scan: %s on " RELOCK__ADDR_FMT ": %s", what, RELOCK__ADDR(srv),
        c->conn.ctx && c->conn.ctx->errstr[0] ? c->conn.ctx->errstr : "connection lost");
    relock__conn_close(&c->conn);
    return r;
}

/*
 * Reads value and TTL of n keys (string elements of a SCAN or KEYS reply)
 * with one pipelined round trip: GET and PTTL (TTL in seconds on servers
 * without PTTL) for each.  Every reply is read, also after an error reply,
 * so the connection stays in step.
 */
static relock_status read_batch(relock_client *c, redisReply **keys, size_t n, walk *w,
                                long long now_ms)
{
    relock_scan_result *out = w->out;
    relock_status st = relock__conn_ensure(c);
    if (st != RELOCK_OK)
        return st;
    int ms = (c->conn.caps & RELOCK_CAP_PEXPIRE) != 0;
    const char *ttl_cmd = ms ? "PTTL %b" : "TTL %b";
    unsigned char sent[BATCH];
    size_t nsent = 0;
    for (size_t i = 0; i < n; i++) {
        sent[i] = 0;
        out->examined++;
        if (own_key(keys[i]->str, keys[i]->len)) {
            out->skipped++;
            continue;
        }
        if (redisAppendCommand(c->conn.ctx, "GET %b", keys[i]->str, keys[i]->len) != REDIS_OK ||
            redisAppendCommand(c->conn.ctx, ttl_cmd, keys[i]->str, keys[i]->len) != REDIS_OK)
            return lost_sync(c, RELOCK_ENOMEM, "queueing GET and TTL");
        sent[i] = 1;
        nsent++;
    }
    relock_status bad = RELOCK_OK;
    for (size_t i = 0; i < n && nsent > 0; i++) {
        if (!sent[i])
            continue;
        void *gv = NULL, *tv = NULL;
        if (redisGetReply(c->conn.ctx, &gv) != REDIS_OK || !gv)
            return lost_sync(c, RELOCK_EIO, "GET");
        if (redisGetReply(c->conn.ctx, &tv) != REDIS_OK || !tv) {
            freeReplyObject(gv);
            return lost_sync(c, RELOCK_EIO, ms ? "PTTL" : "TTL");
        }
        redisReply *get = gv, *ttl = tv;
        if (wrong_type(get)) {
            out->other_types++;
            sent[i] = 2; /* its type is asked below */
            tell(w, RELOCK_KEY_OTHER_TYPE, keys[i]->str, keys[i]->len);
        } else if (get->type != REDIS_REPLY_STRING && get->type != REDIS_REPLY_NIL) {
            if (bad == RELOCK_OK)
                bad = RELOCK__BAD_REPLY(c, "GET", get);
        } else if (ttl->type != REDIS_REPLY_INTEGER) {
            if (bad == RELOCK_OK)
                bad = RELOCK__BAD_REPLY(c, ms ? "PTTL" : "TTL", ttl);
        } else {
            long long t = ttl->integer;
            if (t >= 0 && !ms)
                t *= 1000;
            count_value(w, keys[i]->str, keys[i]->len, get, t, now_ms);
        }
        freeReplyObject(get);
        freeReplyObject(ttl);
    }
    /* The keys that are not strings: their type tells a sorted-set lock
     * (Symfony) and a hash lock (Redisson, Cm_RedisSession) apart. */
    for (size_t i = 0; i < n && bad == RELOCK_OK; i++) {
        if (sent[i] != 2)
            continue;
        redisReply *t = relock__commandf(c, NULL, "TYPE %b", keys[i]->str, keys[i]->len);
        if (!t)
            return c->err.pub.status;
        relock_key_signature sig = RELOCK_SIG_OTHER;
        if (t->type == REDIS_REPLY_STATUS && strcmp(t->str, "zset") == 0)
            sig = RELOCK_SIG_ZSET;
        else if (t->type == REDIS_REPLY_STATUS && strcmp(t->str, "hash") == 0)
            sig = RELOCK_SIG_HASH;
        freeReplyObject(t);
        note_signature(out, sig, keys[i]->str, keys[i]->len, "", 0, -1);
    }
    return bad;
}

/* Walks the string elements of an array reply in batches, within the
 * budget of keys; *stopped is set when the budget ran out. */
static relock_status read_keys(relock_client *c, const redisReply *arr, walk *w,
                               long long now_ms, int *stopped)
{
    relock_scan_result *out = w->out;
    for (size_t i = 0; i < arr->elements; i++)
        if (arr->element[i]->type != REDIS_REPLY_STRING)
            return RELOCK__BAD_REPLY(c, "SCAN/KEYS (key list)", arr->element[i]);
    size_t done = 0;
    while (done < arr->elements) {
        long long budget = relock__scan_max_keys - out->examined;
        if (budget <= 0) {
            *stopped = 1;
            return RELOCK_OK;
        }
        size_t n = arr->elements - done;
        if (n > BATCH)
            n = BATCH;
        if ((long long)n > budget)
            n = (size_t)budget;
        relock_status st = read_batch(c, arr->element + done, n, w, now_ms);
        if (st != RELOCK_OK)
            return st;
        done += n;
    }
    return RELOCK_OK;
}

static relock_status walk_scan(relock_client *c, const char *match, walk *w)
{
    relock_scan_result *out = w->out;
    char cursor[32] = "0";
    for (long calls = 0; calls < MAX_SCAN_CALLS; calls++) {
        const char *argv[] = {"SCAN", cursor, "MATCH", match, "COUNT", "200"};
        size_t lens[6];
        for (int i = 0; i < 6; i++)
            lens[i] = strlen(argv[i]);
        redisReply *r = relock__conn_command(c, NULL, 6, argv, lens);
        if (!r)
            return c->err.pub.status;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING || r->element[0]->len == 0 ||
            r->element[0]->len >= sizeof cursor || r->element[1]->type != REDIS_REPLY_ARRAY) {
            relock_status st = RELOCK__BAD_REPLY(c, "SCAN", r);
            freeReplyObject(r);
            return st;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        int stopped = 0;
        relock_status st = read_keys(c, r->element[1], w, relock__wall_ms(), &stopped);
        freeReplyObject(r);
        if (st != RELOCK_OK || stopped)
            return st;
        if (strcmp(cursor, "0") == 0) {
            out->complete = 1;
            return RELOCK_OK;
        }
    }
    return RELOCK_OK; /* bound reached: incomplete */
}

/* Servers before 2.8 have only KEYS, which blocks the server while it
 * walks the whole keyspace: used only on small databases. */
static relock_status walk_keys(relock_client *c, const char *match, walk *w)
{
    relock_scan_result *out = w->out;
    redisReply *r = relock__commandf(c, NULL, "DBSIZE");
    if (!r)
        return c->err.pub.status;
    if (r->type != REDIS_REPLY_INTEGER) {
        relock_status st = RELOCK__BAD_REPLY(c, "DBSIZE", r);
        freeReplyObject(r);
        return st;
    }
    long long dbsize = r->integer;
    freeReplyObject(r);
    if (dbsize > RELOCK_SCAN_KEYS_FALLBACK_MAX)
        return RELOCK__FAIL(
            &c->err, RELOCK_EUNSUPPORTED,
            "scan: server " RELOCK__ADDR_FMT " runs Redis %s, which has no SCAN (needs 2.8), and "
            "its database holds %lld keys: KEYS over more than %lld keys would "
            "block the server for every client, so relock does not send it; "
            "scan a replica that serves no clients instead",
            RELOCK__ADDR(c->conn.srv), c->conn.version, dbsize, RELOCK_SCAN_KEYS_FALLBACK_MAX);
    out->keys_fallback = 1;
    r = relock__commandf(c, NULL, "KEYS %s", match);
    if (!r)
        return c->err.pub.status;
    if (r->type != REDIS_REPLY_ARRAY) {
        relock_status st = RELOCK__BAD_REPLY(c, "KEYS", r);
        freeReplyObject(r);
        return st;
    }
    int stopped = 0;
    relock_status st = read_keys(c, r, w, relock__wall_ms(), &stopped);
    freeReplyObject(r);
    if (st == RELOCK_OK && !stopped)
        out->complete = 1;
    return st;
}

/* Reads the watch marker: when upgraded clients began to watch for legacy
 * writers (SETNX by the first of them, marker.c).  Anything but a time in
 * ms counts as unknown: no evidence. */
static relock_status read_watch(relock_client *c, relock_scan_result *out)
{
    const char *argv[] = {"GET", out->watch_key};
    size_t lens[] = {3, strlen(out->watch_key)};
    redisReply *r = relock__conn_command(c, NULL, 2, argv, lens);
    if (!r)
        return c->err.pub.status;
    relock_status st = RELOCK_OK;
    if (r->type == REDIS_REPLY_STRING) {
        relock__value v;
        relock__classify(r->str, r->len, &v);
        if (v.kind == RELOCK_VALUE_TIMESTAMP && !v.has_suffix && !v.frac &&
            relock__ts_unit_guess(v.ts_digits) == 1)
            out->watching_since_ms = v.ts;
    } else if (r->type != REDIS_REPLY_NIL && !wrong_type(r)) {
        st = RELOCK__BAD_REPLY(c, "GET (watch marker)", r);
    }
    freeReplyObject(r);
    return st;
}

/* Reads the marker: a decimal time in ms (13 digits for present-day
 * dates).  Anything else is unreadable, which the verdict treats as a
 * recent sighting rather than guess. */
static relock_status read_marker(relock_client *c, relock_scan_result *out)
{
    const char *argv[] = {"GET", out->marker_key};
    size_t lens[] = {3, strlen(out->marker_key)};
    redisReply *r = relock__conn_command(c, NULL, 2, argv, lens);
    if (!r)
        return c->err.pub.status;
    relock_status st = RELOCK_OK;
    if (r->type == REDIS_REPLY_NIL) {
        out->legacy_seen_ms = -1;
    } else if (r->type == REDIS_REPLY_STRING) {
        relock__value v;
        relock__classify(r->str, r->len, &v);
        if (v.kind == RELOCK_VALUE_TIMESTAMP && !v.has_suffix && !v.frac &&
            relock__ts_unit_guess(v.ts_digits) == 1)
            out->legacy_seen_ms = v.ts;
        else
            out->marker_unreadable = 1;
    } else if (wrong_type(r)) {
        out->marker_unreadable = 1;
    } else {
        st = RELOCK__BAD_REPLY(c, "GET (legacy marker)", r);
    }
    freeReplyObject(r);
    return st;
}


/* UTC, ISO 8601. */
static void fmt_time(long long ms, char *buf, size_t len)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, len, "%lld ms since the epoch", ms);
}

/* Where the last sighting sits relative to now, for the verdict text. */
static void fmt_sighting(const relock_scan_result *out, char *buf, size_t len)
{
    char when[64], age[32];
    fmt_time(out->legacy_seen_ms, when, sizeof when);
    long long d = out->now_ms - out->legacy_seen_ms;
    if (d >= 0) {
        relockx_format_duration(d, age, sizeof age);
        snprintf(buf, len, "%s (%s ago)", when, age);
    } else {
        /* Another client's clock runs ahead of ours. */
        relockx_format_duration(-d, age, sizeof age);
        snprintf(buf, len, "%s (%s ahead of this clock)", when, age);
    }
}

/* The phases are legacy -> bridge -> modern (docs/migration.md). */
static void judge(const relock_client *c, relock_scan_result *out)
{
    char window[32], seen[128] = "";
    relockx_format_duration(out->quiet_window_ms, window, sizeof window);
    if (out->legacy_seen_ms >= 0)
        fmt_sighting(out, seen, sizeof seen);
    int recent =
        out->legacy_seen_ms >= 0 && out->now_ms - out->legacy_seen_ms < out->quiet_window_ms;
    char **t = &out->verdict_text;

    if (out->legacy > 0 || recent || out->marker_unreadable) {
        out->verdict = RELOCK_SCAN_STAY_BRIDGE;
        text_addf(out, t, "stay in bridge: modern mode is NOT safe");
        if (out->legacy > 0)
            text_addf(out, t, "; %lld live legacy lock%s (timestamp without TTL), e.g. \"%s\"",
                      out->legacy, out->legacy == 1 ? "" : "s",
                      relock_scan_result_legacy_example(out, NULL));
        if (out->marker_unreadable)
            text_addf(out, t,
                      "; the marker key \"%s\" holds no time in milliseconds (repair or "
                      "delete it, then let bridge clients run for the quiet window)",
                      out->marker_key);
        else if (out->legacy_seen_ms >= 0)
            text_addf(out, t, "; a legacy writer was last seen %s, %s the quiet window of %s", seen,
                      recent ? "within" : "before", window);
        else
            text_addf(out, t, "; no legacy writer was recorded yet (marker \"%s\" absent)",
                      out->marker_key);
        /* Say it loudly when this very configuration writes modern values. */
        if (c->s.mode == RELOCK_MODE_MODERN ||
            (c->s.mode == RELOCK_MODE_AUTO && !c->s.migration.legacy_clients))
            text_addf(out, t,
                      "; this configuration (mode %s, migration.legacy_clients = %s) lets "
                      "clients write modern values beside legacy ones: go back to bridge "
                      "(migration.legacy_clients = true)",
                      relock_mode_name(c->s.mode),
                      c->s.migration.legacy_clients ? "true" : "false");
        return;
    }
    if (!out->complete) {
        out->verdict = RELOCK_SCAN_INCOMPLETE;
        text_addf(out, t,
                  "no conclusion: the scan stopped after %lld keys, before it saw every key "
                  "matching \"%s\"; nothing seen so far blocks modern mode, but the keys not "
                  "seen may hold live legacy locks: scan narrower patterns",
                  out->examined, out->match);
        return;
    }
    char stale[160] = "";
    if (out->stale > 0)
        snprintf(stale, sizeof stale,
                 " (%lld expired legacy key%s of dead holders do not block: modern clients "
                 "take them over)",
                 out->stale, out->stale == 1 ? "" : "s");
    /* A sighting shows that someone was watching then, also before the
     * watch marker existed. */
    if (out->legacy_seen_ms >= 0 &&
        (out->watching_since_ms < 0 || out->legacy_seen_ms < out->watching_since_ms))
        out->watching_since_ms = out->legacy_seen_ms;
    if (out->watching_since_ms < 0 ||
        out->now_ms - out->watching_since_ms < out->quiet_window_ms) {
        /* Silence proves something only after a whole window of watching. */
        out->verdict = RELOCK_SCAN_NO_EVIDENCE;
        text_addf(out, t, "no evidence yet: modern mode is NOT known to be safe; no live legacy "
                          "lock%s, ",
                  stale);
        if (out->watching_since_ms < 0) {
            text_addf(out, t,
                      "but no upgraded client has recorded that it watches for legacy writers "
                      "(\"%s\" absent): run bridge clients on these locks for the quiet window "
                      "(%s) and scan again",
                      out->watch_key, window);
        } else {
            char since[128], left[32];
            long long saved = out->legacy_seen_ms;
            out->legacy_seen_ms = out->watching_since_ms;
            fmt_sighting(out, since, sizeof since);
            out->legacy_seen_ms = saved;
            relockx_format_duration(out->quiet_window_ms -
                                        (out->now_ms - out->watching_since_ms),
                                    left, sizeof left);
            text_addf(out, t,
                      "but upgraded clients have watched for legacy writers only since %s, "
                      "less than the quiet window of %s (%s to go)",
                      since, window, left);
        }
        return;
    }
    out->verdict = RELOCK_SCAN_MODERN_SAFE;
    if (out->legacy_seen_ms < 0) {
        char since[128];
        out->legacy_seen_ms = out->watching_since_ms;
        fmt_sighting(out, since, sizeof since);
        out->legacy_seen_ms = -1;
        text_addf(out, t,
                  "modern is safe: set migration.legacy_clients = false; no live legacy lock%s, "
                  "and no legacy writer met since upgraded clients began watching %s, longer "
                  "than the quiet window of %s",
                  stale, since, window);
        return;
    }
    text_addf(out, t,
              "modern is safe: set migration.legacy_clients = false; no live legacy lock%s, and "
              "the last legacy writer was seen %s, before the quiet window of %s",
              stale, seen, window);
}

const char *relock_scan_node(const relock_client *c)
{
    return c ? c->scan_node : "";
}

static relock_status scan(relock_client *c, const char *match, relock_scan_key_fn fn, void *arg,
                          relock_scan_result *out);

relock_status relock_scan(relock_client *c, const char *match, relock_scan_result **out)
{
    return relock_scan_keys(c, match, NULL, NULL, out);
}

relock_status relock_scan_keys(relock_client *c, const char *match, relock_scan_key_fn fn,
                               void *arg, relock_scan_result **out)
{
    if (out)
        *out = NULL;
    if (!c)
        return RELOCK_EINVAL;
    relock__err_clear(&c->err);
    if (!out)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "scan: no place for the result");
    relock_scan_result *r = calloc(1, sizeof *r);
    if (!r)
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "scan: out of memory");
    relock_status st = scan(c, match, fn, arg, r);
    if (st == RELOCK_OK && r->nomem)
        st = RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "scan: out of memory");
    if (st != RELOCK_OK) {
        r->complete = 0;
        r->verdict = RELOCK_SCAN_INCOMPLETE;
    }
    *out = r;
    return st;
}

static relock_status scan(relock_client *c, const char *match, relock_scan_key_fn fn, void *arg,
                          relock_scan_result *out)
{
    out->legacy_seen_ms = -1;
    out->watching_since_ms = -1;
    out->now_ms = -1;
    out->verdict = RELOCK_SCAN_INCOMPLETE;
    out->quiet_window_ms = c->s.migration.quiet_window_ms;
    if (relock__marker_key(c->s.key_prefix, out->marker_key, sizeof out->marker_key) != 0 ||
        relock__watch_key(c->s.key_prefix, out->watch_key, sizeof out->watch_key) != 0)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "scan: key_prefix too long");
    if (match && !*match)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "scan: empty pattern");
    if (match && strlen(match) > MATCH_MAX)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "scan: pattern longer than %d bytes",
                            MATCH_MAX);
    size_t mlen = match ? strlen(match) : strlen(c->s.key_prefix) + 1;
    out->match = malloc(mlen + 1);
    if (!out->match)
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "scan: out of memory");
    snprintf(out->match, mlen + 1, "%s%s", match ? match : c->s.key_prefix, match ? "" : "*");
    relock_status st = relock__conn_ensure(c);
    if (st != RELOCK_OK)
        return st;
    walk w = {out, fn, arg};
    /* A Redis Cluster: every master in turn (each holds its slots' keys
     * only), so that the counts and the verdict cover the whole keyspace;
     * complete only when every master's walk was. */
    int masters = relock__cluster_masters(c);
    if (masters > 0) {
        out->cluster_masters = masters;
        for (int i = 0; i < masters && st == RELOCK_OK; i++) {
            st = relock__cluster_use(c, i);
            if (st != RELOCK_OK)
                break;
            snprintf(c->scan_node, sizeof c->scan_node, RELOCK__ADDR_FMT,
                     RELOCK__ADDR(c->conn.srv));
            out->complete = 0;
            st = walk_scan(c, out->match, &w);
            if (st == RELOCK_OK && !out->complete)
                break; /* the budget ran out: incomplete */
        }
        /* The marker lives in a slot of its own. */
        if (st == RELOCK_OK)
            st = relock__cluster_route(c, out->marker_key);
    } else {
        snprintf(c->scan_node, sizeof c->scan_node, RELOCK__ADDR_FMT, RELOCK__ADDR(c->conn.srv));
        if (c->conn.caps & RELOCK_CAP_SCAN)
            st = walk_scan(c, out->match, &w);
        else
            st = walk_keys(c, out->match, &w);
    }
    /* The marker is read after the walk, so that a sighting recorded
     * while we walked counts too. */
    if (st == RELOCK_OK)
        st = read_marker(c, out);
    if (st == RELOCK_OK) {
        if (out->cluster_masters > 0)
            st = relock__cluster_route(c, out->watch_key);
        if (st == RELOCK_OK)
            st = read_watch(c, out);
    }
    if (st != RELOCK_OK)
        return st;
    out->now_ms = relock__wall_ms();
    describe_families(out);
    judge(c, out);
    return RELOCK_OK;
}
