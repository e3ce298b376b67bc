/*
 * The migration audit (`relock scan`, docs/migration.md): walk the lock
 * keys, tell from each value and TTL which kind of client wrote it, read
 * the markers upgraded clients write, and judge whether the fleet may
 * leave bridge mode.  A step machine (scan.h) that does no I/O and reads
 * no clock, so that both APIs run the same walk.  It writes nothing, so
 * that it may run at any time, with any mode, against the live servers.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "relockx.h"
#include "scan.h"

/* SCAN's COUNT hint. */
#define COUNT "200"
/* One SCAN call visits about COUNT buckets; 25 million calls cover more
 * buckets than a server can hold keys (2^32), so the bound only stops a
 * walk that would otherwise never end (a cursor that never returns to 0). */
#define MAX_SCAN_CALLS 25000000L
/* The reads of a batch and the next page's SCAN. */
#define WIDE (2 * RELOCK__SCAN_READS + 1)
_Static_assert(WIDE <= RELOCK__BATCH_CMDS, "a read batch fits a wide batch");
#define MATCH_MAX 1024

/* The bound on keys examined by one walk.  Not in a header: only the
 * tests change it, to reach the incomplete path without ten million keys. */
extern long long relock__scan_max_keys;
long long relock__scan_max_keys = RELOCK_SCAN_MAX_KEYS;

void relock_scan_result_free(relock_scan_result *r)
{
    if (!r)
        return;
    free(r->legacy_example);
    free(r->match);
    free(r->verdict_text);
    for (int i = 0; i < RELOCK__SCAN_FAMILIES; i++)
        free(r->fam_example[i]);
    free(r->families_text);
    free(r);
}

long long relock_scan_result_count(const relock_scan_result *r, relock_scan_counter which)
{
    if (!r || (int)which < 0 || which > RELOCK_SCAN_GONE)
        return 0;
    const long long n[] = {r->examined, r->legacy, r->bridge,      r->modern, r->stale,
                           r->unknown,  r->skipped, r->other_types, r->gone};
    return n[which];
}

const char *relock_scan_result_legacy_example(const relock_scan_result *r, size_t *len)
{
    int some = r && r->legacy_example;
    if (len)
        *len = some ? r->legacy_example_len : 0;
    return some ? r->legacy_example : "";
}

/* The accessors that read one field, with their answer for NULL. */
#define FIELD(type, name, expr, none)                                                       \
    type relock_scan_result_##name(const relock_scan_result *r)                             \
    {                                                                                       \
        return r ? (expr) : (none);                                                         \
    }
FIELD(const char *, marker_key, r->marker_key, "")
FIELD(long long, legacy_seen_ms, r->legacy_seen_ms, -1)
FIELD(int, marker_unreadable, r->marker_unreadable, 0)
FIELD(const char *, match, r->match ? r->match : "", "")
FIELD(int, keys_fallback, r->keys_fallback, 0)
FIELD(int, complete, r->complete, 0)
FIELD(long long, now_ms, r->now_ms, -1)
FIELD(long long, quiet_window_ms, r->quiet_window_ms, 0)
FIELD(relock_scan_verdict, verdict, r->verdict, RELOCK_SCAN_INCOMPLETE)
FIELD(const char *, verdict_text, r->verdict_text ? r->verdict_text : "", "")
FIELD(int, cluster_masters, r->cluster_masters, 0)
FIELD(long long, watching_since_ms, r->watching_since_ms, -1)
FIELD(const char *, families, r->families_text ? r->families_text : "", "")

long long relock_scan_result_signature(const relock_scan_result *r, relock_key_signature sig)
{
    return r && (int)sig >= 0 && sig < RELOCK_SIG_COUNT ? r->sig[sig] : 0;
}

/* The names of an enumeration's values, in their order; other beyond them. */
#define NAMES(fn, type, other, ...)                                                         \
    const char *fn(type v)                                                                  \
    {                                                                                       \
        static const char *const names[] = {__VA_ARGS__};                                   \
        return (int)v >= 0 && (size_t)v < sizeof names / sizeof names[0] ? names[v] : other; \
    }
NAMES(relock_key_signature_name, relock_key_signature, "other", "ts-s", "ts-s-frac", "ts-ms",
      "setnx-no-ttl", "token", "other-token", "zset", "hash")
NAMES(relock_scan_verdict_name, relock_scan_verdict, "unknown", "stay-bridge", "modern-safe",
      "modern-safe-unseen", "incomplete", "no-evidence-yet")
NAMES(relock_key_class_name, relock_key_class, "unknown", "legacy", "bridge", "modern", "stale",
      "unknown", "other")

/* Appends to a growing string; on a failed allocation sets r->nomem and
 * leaves the string as it was. */
__attribute__((format(printf, 3, 4))) static void text_addf(relock_scan_result *r, char **text,
                                                              const char *fmt, ...)
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

/* A copy of len bytes, NUL-terminated; NULL (and r->nomem) without memory. */
static char *copy(relock_scan_result *r, const char *s, size_t len)
{
    char *d = malloc(len + 1);
    if (d) {
        memcpy(d, s, len);
        d[len] = '\0';
    }
    r->nomem |= !d;
    return d;
}

/* A timestamp is judged as a whole-clock reader judges it, in the unit
 * its digits tell (relock__lease_ours_end()). */
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
    relock__lease_cfg whole = {.unit_ms = unit_ms ? 1 : 1000};
    return now_ms >= relock__lease_ours_end(&whole, &st) ? RELOCK_KEY_STALE : RELOCK_KEY_LEGACY;
}

/* ---------------------------------------------------------- signatures
 * The values are replies' strings, which end with a NUL (for strspn). */

/* "host:pid" (resque-scheduler) or "host|pid" (phpredis sessions): a
 * word, the separator, digits. */
static int host_pid(const char *v, size_t len, char sep)
{
    const char *at = len ? memchr(v, sep, len) : NULL;
    return at && at > v && (size_t)(at - v) + 1 < len &&
           strspn(at + 1, "0123456789") == len - (size_t)(at - v) - 1;
}

/* Laravel's owner: 16 letters and digits (Str::random(16)). */
static int owner16(const char *v, size_t len)
{
    return len == 16 &&
           strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") == 16;
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
    FAM_BRIDGE, FAM_TOKEN, FAM_CLASSIC_S, FAM_FLOAT_S, FAM_MS, FAM_FLAG, FAM_RESQUE_LOCK,
    FAM_SCHEDULER, FAM_SPRING, FAM_LARAVEL0, FAM_LARAVEL, FAM_SHEDLOCK, FAM_PHPREDIS,
    FAM_OTHER_TOKEN, FAM_ZSET, FAM_HASH,
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
        if (host_pid(v, vlen, ':') && memmem(key, keylen, "scheduler_master_lock", 21))
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
    if (f < 0 || f >= RELOCK__SCAN_FAMILIES)
        return;
    if (out->fam_keys[f]++ == 0)
        out->fam_example[f] = copy(out, key, keylen);
}

/* The families met, one per line; a peer's named with its key template. */
static void describe_families(relock_scan_result *out)
{
    char buf[160];
    for (int f = 0; f < RELOCK__SCAN_FAMILIES; f++) {
        const relock__peer *p = f < FAM_PEER ? NULL : relock__peer_at(f - FAM_PEER);
        if (!out->fam_keys[f] || (f >= FAM_PEER && !p))
            continue;
        const char *at = p ? strstr(p->key_template, "{name}") : NULL;
        if (p)
            snprintf(buf, sizeof buf, "%s (%.*s<name>%s)", p->family,
                     (int)(at - p->key_template), p->key_template, at + 6);
        text_addf(out, &out->families_text, "%s%s: %lld key%s, e.g. %s",
                  out->families_text ? "\n" : "", p ? buf : family_names[f], out->fam_keys[f],
                  out->fam_keys[f] == 1 ? "" : "s", out->fam_example[f] ? out->fam_example[f] : "");
    }
}

/* A time (a sighting, the start of the watch) in UTC, ISO 8601, and
 * where it sits relative to now; ahead: another client's clock runs
 * ahead of ours. */
static void fmt_sighting(const relock_scan_result *out, long long ms, char *buf, size_t len)
{
    char when[64], age[32];
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(when, sizeof when, "%lld ms since the epoch", ms);
    long long d = out->now_ms - ms;
    relockx_format_duration(d >= 0 ? d : -d, age, sizeof age);
    snprintf(buf, len, "%s (%s %s)", when, age, d >= 0 ? "ago" : "ahead of this clock");
}

/* The phases are legacy -> bridge -> modern (docs/migration.md). */
static void judge(const relock_client *c, relock_scan_result *out)
{
    char window[32], seen[128] = "";
    relockx_format_duration(out->quiet_window_ms, window, sizeof window);
    if (out->legacy_seen_ms >= 0)
        fmt_sighting(out, out->legacy_seen_ms, seen, sizeof seen);
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
    char since[128] = "";
    if (out->watching_since_ms >= 0)
        fmt_sighting(out, out->watching_since_ms, since, sizeof since);
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
            return;
        }
        char left[32];
        relockx_format_duration(out->quiet_window_ms - (out->now_ms - out->watching_since_ms),
                                left, sizeof left);
        text_addf(out, t,
                  "but upgraded clients have watched for legacy writers only since %s, less "
                  "than the quiet window of %s (%s to go)",
                  since, window, left);
        return;
    }
    out->verdict = RELOCK_SCAN_MODERN_SAFE;
    text_addf(out, t,
              "modern is safe: set migration.legacy_clients = false; no live legacy lock%s, ",
              stale);
    if (out->legacy_seen_ms < 0)
        text_addf(out, t,
                  "and no legacy writer met since upgraded clients began watching %s, longer "
                  "than the quiet window of %s",
                  since, window);
    else
        text_addf(out, t, "and the last legacy writer was seen %s, before the quiet window of %s",
                  seen, window);
}

/* ------------------------------------------------------------ the walk */

/* Counts one key from its GET reply and its TTL in ms (-1 none, -2
 * absent). */
static void count_value(relock__scan_m *m, const struct relock__scan_key *key,
                        const redisReply *get, long long ttl, long long now_ms)
{
    relock_scan_result *out = m->out;
    if (get->type == REDIS_REPLY_NIL || ttl == -2) {
        out->gone++;
        return;
    }
    relock_key_class k = relock_key_classify(get->str, get->len, ttl, now_ms);
    note_signature(out, sign_string(get->str, get->len, ttl), key->s, key->len, get->str,
                   get->len, ttl);
    if (m->fn)
        m->fn(m->arg, k, key->s, key->len);
    long long *n[] = {&out->legacy, &out->bridge, &out->modern, &out->stale, &out->unknown,
                      &out->unknown};
    (*n[k])++;
    if (k == RELOCK_KEY_LEGACY && !out->legacy_example &&
        (out->legacy_example = copy(out, key->s, key->len)))
        out->legacy_example_len = key->len;
}

/* Where the machine is: a stage whose replies the next feed brings, or
 * one where the next batch is chosen. */
enum {
    ST_NEW = 0,
    ST_SLOTS, /* CLUSTER SLOTS */
    ST_WALK,  /* a node's walk begins */
    ST_DBSIZE,
    ST_LIST, /* SCAN or KEYS */
    ST_READ, /* GET and TTL of the keys in sent[] */
    ST_TYPE, /* TYPE of the keys in typed[] */
    ST_TO_MARKER,
    ST_MARKER,
    ST_MARKED,
    ST_TO_WATCH,
    ST_WATCH,
    ST_JUDGE
};

static void keys_free(relock__scan_m *m)
{
    for (size_t i = 0; i < m->nkeys; i++)
        free(m->key[i].s);
    free(m->key);
    m->key = NULL;
    m->nkeys = m->at = 0;
}

static void typed_free(relock__scan_m *m)
{
    for (size_t i = 0; i < m->ntyped; i++)
        free(m->typed[i].s);
    m->ntyped = 0;
}

/* The key list of a SCAN or KEYS reply, copied. */
static relock_status keys_take(relock__scan_m *m, relock_client *c, const redisReply *arr)
{
    keys_free(m);
    for (size_t i = 0; i < arr->elements; i++)
        if (arr->element[i]->type != REDIS_REPLY_STRING)
            return RELOCK__BAD_REPLY(c, "SCAN/KEYS (key list)", arr->element[i]);
    size_t n = arr->elements;
    if (!(m->key = calloc(n ? n : 1, sizeof *m->key)))
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "scan: out of memory");
    for (; m->nkeys < n; m->nkeys++) {
        const redisReply *e = arr->element[m->nkeys];
        if (!(m->key[m->nkeys].s = copy(m->out, e->str, e->len)))
            return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "scan: out of memory");
        m->key[m->nkeys].len = e->len;
    }
    return RELOCK_OK;
}

/* The CLUSTER SLOTS reply: the masters serving slots, each once. */
static void masters_take(relock__scan_m *m, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY)
        return; /* no cluster here: one node */
    for (size_t i = 0; i < r->elements && m->masters < RELOCK__SCAN_MASTERS; i++) {
        const redisReply *e = r->element[i], *a;
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            (a = e->element[2])->type != REDIS_REPLY_ARRAY || a->elements < 2 ||
            a->element[0]->type != REDIS_REPLY_STRING ||
            a->element[1]->type != REDIS_REPLY_INTEGER || a->element[0]->len >= RELOCK__HOST_MAX)
            continue;
        int k = 0, port = (int)a->element[1]->integer;
        while (k < m->masters &&
               (m->addr[k].port != port || strcmp(m->addr[k].host, a->element[0]->str) != 0))
            k++;
        if (k < m->masters)
            continue;
        snprintf(m->addr[k].host, sizeof m->addr[k].host, "%s", a->element[0]->str);
        m->addr[k].port = port;
        m->masters++;
    }
    m->out->cluster_masters = m->masters;
}

/* WRONGTYPE since 2.8; "ERR Operation against a key holding the wrong
 * kind of value" before. */
static int wrong_type(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR &&
           (strncmp(r->str, "WRONGTYPE", 9) == 0 || strstr(r->str, "wrong kind of value"));
}

/* Reads a marker: a decimal time in ms (13 digits for present-day
 * dates), into *ms; 0 when the key holds something else (*ms stays). */
static int marker_ms(const redisReply *r, long long *ms)
{
    if (r->type != REDIS_REPLY_STRING)
        return 0;
    relock__value v;
    relock__classify(r->str, r->len, &v);
    if (v.kind != RELOCK_VALUE_TIMESTAMP || v.has_suffix || v.frac ||
        relock__ts_unit_guess(v.ts_digits) != 1)
        return 0;
    *ms = v.ts;
    return 1;
}

/* A SCAN reply (the cursor, and the page's keys), or KEYS's (every key). */
static relock_status page_take(relock__scan_m *m, relock_client *c, const redisReply *r)
{
    m->calls++;
    if (m->out->keys_fallback) {
        m->last = 1;
        return r->type == REDIS_REPLY_ARRAY ? keys_take(m, c, r) : RELOCK__BAD_REPLY(c, "KEYS", r);
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[0]->len == 0 ||
        r->element[0]->len >= sizeof m->cursor || r->element[1]->type != REDIS_REPLY_ARRAY)
        return RELOCK__BAD_REPLY(c, "SCAN", r);
    snprintf(m->cursor, sizeof m->cursor, "%s", r->element[0]->str);
    m->last = strcmp(m->cursor, "0") == 0;
    return keys_take(m, c, r->element[1]);
}

/* The replies to the batch of stage m->stage. */
static relock_status take(relock__scan_m *m, relock_client *c, const relock__feed *in,
                          long long now)
{
    relock_scan_result *out = m->out;
    const redisReply *r = in->reply[0];
    int ms = (c->conn.caps & RELOCK_CAP_PEXPIRE) != 0;
    switch (m->stage) {
    case ST_SLOTS:
        masters_take(m, r);
        return RELOCK_OK;
    case ST_DBSIZE:
        if (r->type != REDIS_REPLY_INTEGER)
            return RELOCK__BAD_REPLY(c, "DBSIZE", r);
        if (r->integer > RELOCK_SCAN_KEYS_FALLBACK_MAX)
            return RELOCK__FAIL(
                &c->err, RELOCK_EUNSUPPORTED,
                "scan: server " RELOCK__ADDR_FMT " runs Redis %s, which has no SCAN (needs 2.8), "
                "and its database holds %lld keys: KEYS over more than %lld keys would block the "
                "server for every client, so relock does not send it; scan a replica that serves "
                "no clients instead",
                RELOCK__ADDR(c->conn.srv), c->conn.version, r->integer,
                RELOCK_SCAN_KEYS_FALLBACK_MAX);
        out->keys_fallback = 1;
        m->stage = ST_LIST;
        return RELOCK_OK;
    case ST_LIST:
        m->stage = ST_READ; /* (a bad reply fails the walk) */
        return page_take(m, c, r);
    case ST_READ: {
        /* Every reply is judged, also after a bad one; the first bad one
         * fails the walk. */
        relock_status bad = RELOCK_OK;
        size_t nsent = m->nsent;
        for (size_t i = 0; i < nsent; i++) {
            struct relock__scan_key *k = &m->key[m->sent[i]];
            const redisReply *get = in->reply[2 * i], *ttl = in->reply[2 * i + 1];
            if (wrong_type(get)) { /* its type is asked next */
                out->other_types++;
                if (m->fn)
                    m->fn(m->arg, RELOCK_KEY_OTHER_TYPE, k->s, k->len);
                m->typed[m->ntyped++] = *k;
                k->s = NULL;
            } else if (!relock__reply_is(get, "bn") || ttl->type != REDIS_REPLY_INTEGER) {
                int g = !relock__reply_is(get, "bn"); /* the GET's, else the TTL's */
                if (bad == RELOCK_OK)
                    bad = RELOCK__BAD_REPLY(c, g ? "GET" : ms ? "PTTL" : "TTL", g ? get : ttl);
            } else {
                long long t = ttl->integer >= 0 && !ms ? ttl->integer * 1000 : ttl->integer;
                count_value(m, k, get, t, now);
            }
        }
        m->nsent = 0;
        if (bad != RELOCK_OK)
            return bad;
        if (m->ahead && (bad = page_take(m, c, in->reply[2 * nsent])) != RELOCK_OK)
            return bad;
        m->ahead = 0;
        m->stage = m->ntyped ? ST_TYPE : ST_READ;
        return RELOCK_OK;
    }
    case ST_TYPE:
        /* The keys that are not strings: their type tells a sorted-set
         * lock (Symfony) and a hash lock (Redisson, Cm_RedisSession) apart. */
        for (size_t i = 0; i < m->ntyped; i++) {
            const redisReply *t = in->reply[i];
            int is = t->type == REDIS_REPLY_STATUS;
            relock_key_signature sig = is && strcmp(t->str, "zset") == 0   ? RELOCK_SIG_ZSET
                                       : is && strcmp(t->str, "hash") == 0 ? RELOCK_SIG_HASH
                                                                           : RELOCK_SIG_OTHER;
            note_signature(out, sig, m->typed[i].s, m->typed[i].len, "", 0, -1);
        }
        typed_free(m);
        m->stage = ST_READ;
        return RELOCK_OK;
    case ST_MARKER:
    case ST_WATCH: {
        /* The legacy marker: anything but a time in ms is unreadable,
         * which the verdict treats as a recent sighting rather than guess.
         * The watch marker (when upgraded clients began to watch, SETNX by
         * the first of them, src/core/operation.c): else no evidence. */
        int legacy = m->stage == ST_MARKER;
        if (!marker_ms(r, legacy ? &out->legacy_seen_ms : &out->watching_since_ms) && legacy &&
            r->type != REDIS_REPLY_NIL)
            out->marker_unreadable = 1;
        m->stage = legacy ? ST_MARKED : ST_JUDGE;
        if (r->type == REDIS_REPLY_ERROR && !wrong_type(r))
            return RELOCK__BAD_REPLY(c, legacy ? "GET (legacy marker)" : "GET (watch marker)", r);
        return RELOCK_OK;
    }
    }
    return RELOCK_OK;
}

/* relock's own keys contain a space, which no lock name or key prefix
 * may (keys.c): fence counters and the legacy markers of every prefix. */
static int own_key(const char *k, size_t len)
{
    static const char *const own[] = {RELOCK__FENCE_SUFFIX, RELOCK__OWNER_SUFFIX,
                                      RELOCK__BREAKS_SUFFIX, RELOCK__MARKER_NAME,
                                      RELOCK__WATCH_NAME};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (memmem(k, len, own[i], strlen(own[i])))
            return 1;
    return 0;
}

/* Ends the run: the driver does next before the next one. */
static relock__step run_end(relock__scan_m *m, relock__scan_next next)
{
    m->next = next;
    m->steps = 0;
    m->h.pc = 2;
    return relock__done(&m->h, RELOCK_OK);
}

/* A batch of one command of argc words. */
static relock__step send1(relock__scan_m *m, relock__batch *b, int stage, int argc,
                          const char *w0, const char *w1)
{
    relock__batch_words(b, argc, w0, w1);
    m->stage = stage;
    return relock__send(&m->h, b);
}

/* The next batch of the walk, or the end of the run. */
static relock__step emit(relock__scan_m *m, relock_client *c, relock__batch *b, long long now)
{
    relock_scan_result *out = m->out;
    relock__batch_reset(b);
    if (m->steps++ >= RELOCK__SCAN_RUN_STEPS)
        return run_end(m, RELOCK__SCAN_MORE);
    switch (m->stage) {
    case ST_NEW:
        if (m->discover && c->conn.major >= 3)
            return send1(m, b, ST_SLOTS, 2, "CLUSTER", "SLOTS");
        /* fall through */
    case ST_SLOTS:
        m->stage = ST_WALK;
        if (m->masters > 0)
            return run_end(m, RELOCK__SCAN_NODE); /* master 0 */
        /* fall through */
    case ST_WALK:
        out->complete = 0;
        snprintf(m->cursor, sizeof m->cursor, "0");
        if (!(c->conn.caps & RELOCK_CAP_SCAN))
            return send1(m, b, ST_DBSIZE, 1, "DBSIZE", NULL);
        /* fall through */
    case ST_LIST:
        m->stage = ST_LIST;
        if (out->keys_fallback)
            return send1(m, b, ST_LIST, 2, "KEYS", out->match);
        relock__batch_words(b, 6, "SCAN", m->cursor, "MATCH", out->match, "COUNT", COUNT);
        return relock__send(&m->h, b);
    case ST_TYPE:
        relock__batch_widen(b, m->wide, WIDE);
        for (size_t i = 0; i < m->ntyped; i++) {
            relock__batch_words(b, 2, "TYPE", m->typed[i].s);
            b->cmd[i].len[1] = m->typed[i].len;
        }
        return relock__send(&m->h, b);
    case ST_READ: {
        const char *ttl = (c->conn.caps & RELOCK_CAP_PEXPIRE) ? "PTTL" : "TTL";
        relock__batch_widen(b, m->wide, WIDE);
        while (m->at < m->nkeys && m->nsent < RELOCK__SCAN_READS &&
               out->examined < relock__scan_max_keys) {
            size_t k = m->at++;
            out->examined++;
            if (own_key(m->key[k].s, m->key[k].len)) {
                out->skipped++;
                continue;
            }
            relock__batch_words(b, 2, "GET", m->key[k].s);
            relock__batch_words(b, 2, ttl, m->key[k].s);
            /* (keys are bytes: their lengths, not strlen) */
            b->cmd[b->n - 2].len[1] = b->cmd[b->n - 1].len[1] = m->key[k].len;
            m->sent[m->nsent++] = k;
        }
        /* The page's last keys: the next page is asked with them. */
        m->ahead = m->nsent && m->at == m->nkeys && !m->last && m->calls < MAX_SCAN_CALLS &&
                   out->examined < relock__scan_max_keys;
        if (m->ahead)
            relock__batch_words(b, 6, "SCAN", m->cursor, "MATCH", out->match, "COUNT", COUNT);
        if (m->nsent)
            return relock__send(&m->h, b);
        if (m->at < m->nkeys)
            break; /* the budget ran out: incomplete */
        if (!m->last && m->calls < MAX_SCAN_CALLS) {
            m->stage = ST_LIST;
            /* Over a Cluster the next SCAN goes to the master whose cursor
             * it carries: a read that met MOVED (its slot moved meanwhile)
             * took the driver's connection to another node. */
            if (m->masters > 0)
                return run_end(m, RELOCK__SCAN_NODE);
            return emit(m, c, b, now);
        }
        out->complete = m->last;
        if (m->masters > 0 && out->complete && ++m->node < m->masters) {
            m->stage = ST_WALK;
            return run_end(m, RELOCK__SCAN_NODE);
        }
        break;
    }
    case ST_TO_MARKER:
        return send1(m, b, ST_MARKER, 2, "GET", out->marker_key);
    case ST_MARKED:
        if (m->masters > 0) {
            m->stage = ST_TO_WATCH;
            m->route = out->watch_key;
            return run_end(m, RELOCK__SCAN_KEY);
        }
        /* fall through */
    case ST_TO_WATCH:
        return send1(m, b, ST_WATCH, 2, "GET", out->watch_key);
    default: /* ST_JUDGE */
        out->now_ms = now;
        describe_families(out);
        judge(c, out);
        m->next = RELOCK__SCAN_END;
        return relock__done(&m->h, RELOCK_OK);
    }
    /* The walk is over (complete or not): the marker, read after it, so
     * that a sighting recorded while it walked counts too; over a
     * Cluster where its slot lives. */
    keys_free(m);
    m->stage = ST_TO_MARKER;
    if (m->masters > 0) {
        m->route = out->marker_key;
        return run_end(m, RELOCK__SCAN_KEY);
    }
    return emit(m, c, b, now);
}

relock__step relock__scan_step(void *vm, relock_lock *l, const relock__feed *in,
                               relock__batch *out)
{
    relock__scan_m *m = vm;
    relock_client *c = l->c;
    long long now = m->wall0 + (long long)(in->mono_ms - m->mono0);
    if (m->h.pc == 1) {
        /* A batch was answered (every command: a fault fails the walk) */
        relock_status st = in->fault != RELOCK__FAULT_NONE ? relock__fault_fail(c, in)
                                                           : take(m, c, in, now);
        if (st != RELOCK_OK)
            return relock__done(&m->h, st);
    }
    m->h.pc = 1;
    return emit(m, c, out, now);
}

relock_status relock__scan_init(relock__scan_m *m, relock_client *c, const char *match,
                                relock_scan_key_fn fn, void *arg, relock_scan_result *out,
                                int masters, int discover, long long wall_ms, uint64_t mono_ms)
{
    /* Cleared, then set: the machine holds its masters' addresses (some
     * 17 KB), which an initializer would build on the stack first in an
     * unoptimized build. */
    memset(m, 0, sizeof *m);
    m->h.hint_ms = -1;
    m->out = out;
    m->fn = fn;
    m->arg = arg;
    m->wall0 = wall_ms;
    m->mono0 = mono_ms;
    m->masters = masters > 0 ? masters : 0;
    m->discover = discover;
    m->next = RELOCK__SCAN_MORE;
    *out = (relock_scan_result){.legacy_seen_ms = -1, .watching_since_ms = -1, .now_ms = -1,
                                .verdict = RELOCK_SCAN_INCOMPLETE,
                                .quiet_window_ms = c->s.migration.quiet_window_ms,
                                .cluster_masters = m->masters};
    if (relock__marker_key(c->s.key_prefix, out->marker_key, sizeof out->marker_key) != 0 ||
        relock__watch_key(c->s.key_prefix, out->watch_key, sizeof out->watch_key) != 0)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "scan: key_prefix too long");
    if (match && !*match)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "scan: empty pattern");
    if (match && strlen(match) > MATCH_MAX)
        return RELOCK__FAIL(&c->err, RELOCK_EINVAL, "scan: pattern longer than %d bytes",
                            MATCH_MAX);
    size_t mlen = match ? strlen(match) : strlen(c->s.key_prefix) + 1;
    if (!(m->wide = malloc(WIDE * sizeof *m->wide)) || !(out->match = malloc(mlen + 1)))
        return RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "scan: out of memory");
    snprintf(out->match, mlen + 1, "%s%s", match ? match : c->s.key_prefix, match ? "" : "*");
    return RELOCK_OK;
}

relock_status relock__scan_end(relock__scan_m *m, relock_client *c, relock_status st)
{
    keys_free(m);
    typed_free(m);
    free(m->wide);
    m->wide = NULL;
    if (st == RELOCK_OK && m->out->nomem)
        st = RELOCK__FAIL(&c->err, RELOCK_ENOMEM, "scan: out of memory");
    if (st != RELOCK_OK) {
        m->out->complete = 0;
        m->out->verdict = RELOCK_SCAN_INCOMPLETE;
    }
    return st;
}
