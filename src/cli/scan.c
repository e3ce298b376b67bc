/*
 * relock scan: the migration audit (docs/migration.md).  Counts the lock
 * keys by the kind of client that wrote them, shows when an upgraded
 * client last met a legacy writer, and says whether the fleet may leave
 * bridge mode.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

const char help_scan[] =
    "usage: relock scan [-q | -v] [--json] [--keys [--limit N]] [--match PATTERN] [--check]\n"
    "Migration audit: walk the lock keys (SCAN; KEYS on servers before 2.8 with at\n"
    "most 10000 keys), count them by the client that wrote them, show when a legacy\n"
    "writer was last seen, and say whether modern mode is safe (docs/migration.md).\n"
    "Read-only. Works whatever the configured mode.\n"
    "  --match PATTERN  Redis glob of the keys to walk (default: key_prefix + \"*\")\n"
    "  --json           one JSON object (schema in docs/migration.md)\n"
    "  --keys           list the keys of each class too (legacy, bridge, modern,\n"
    "                   stale, unknown, other), to inspect or break them\n"
    "  --limit N        with --keys: at most N keys per class (default 100); the\n"
    "                   output says how many more there were\n"
    "  --check          exit status from the verdict, for monitoring: 0 modern is\n"
    "                   safe, 1 no evidence yet or no conclusion, 3 stay in bridge\n"
    "                   (legacy clients are active)\n"
    "  -q, --quiet      print nothing: the exit status is the verdict, as --check\n"
    "                   (errors are still said)\n"
    "  -v, --verbose    also the keys counted on each node by class, the counts by\n"
    "                   signature, and how long the walk took\n"
    "Exit: 0 scanned (whatever the verdict, without --check or -q), 2 usage or\n"
    "configuration error, 4 server unreachable, protocol error, or a server\n"
    "without SCAN holding more than 10000 keys.\n";

/* The length of the well-formed UTF-8 sequence at s (RFC 3629: no
 * overlong forms, no surrogates), or 0. */
static size_t utf8_len(const unsigned char *s)
{
    unsigned char c = s[0];
    size_t n;
    unsigned char lo = 0x80, hi = 0xbf; /* range of the second byte */
    if (c >= 0xc2 && c <= 0xdf)
        n = 2;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4;
    else
        return 0;
    if (c == 0xe0)
        lo = 0xa0;
    else if (c == 0xed)
        hi = 0x9f;
    else if (c == 0xf0)
        lo = 0x90;
    else if (c == 0xf4)
        hi = 0x8f;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return n;
}

/* Writes s as a JSON string, quotes included.  Key names are bytes: a
 * byte that is not part of well-formed UTF-8 becomes U+FFFD, so the
 * output always parses. */
static void json_str(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    putchar('"');
    while (*s) {
        unsigned char ch = *s;
        size_t n = 1;
        if (ch == '"' || ch == '\\') {
            printf("\\%c", ch);
        } else if (ch < 0x20 || ch == 0x7f) {
            printf("\\u%04x", ch);
        } else if (ch < 0x80) {
            putchar(ch);
        } else {
            n = utf8_len(s);
            if (n == 0) {
                printf("\\ufffd");
                n = 1;
            } else {
                fwrite(s, 1, n, stdout);
            }
        }
        s += n;
    }
    putchar('"');
}

static void fmt_time(long long ms, char *buf, size_t len)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, len, "%lld", ms);
}


/* --keys: the first `limit` keys of each class, kept in the order walked. */
#define NCLASS (RELOCK_KEY_OTHER_TYPE + 1)
#define LIMIT_DEFAULT 100
#define LIMIT_MAX 1000000L

typedef struct keylist {
    char **keys;
    unsigned char *node; /* each key's node, an index into listing.nodes */
    size_t n;
} keylist;

/* In a Redis Cluster the keys are listed by node: at most this many. */
#define MAX_NODES 64

typedef struct listing {
    long limit;
    int nomem;
    int store; /* --keys: keep the first `limit` names of each class */
    keylist cls[NCLASS];
    /* -v: the keys counted on each node, by class (relock's own keys and
     * keys gone meanwhile are not told to the callback) */
    long long per_node[MAX_NODES][NCLASS];
    const relock_client *c; /* asked which node is walked */
    char nodes[MAX_NODES][272];
    int nnodes;
} listing;

/* The index of the node the scan walks now, added when new. */
static int node_index(listing *ls)
{
    const char *node = relock_scan_node(ls->c);
    for (int i = 0; i < ls->nnodes; i++)
        if (strcmp(ls->nodes[i], node) == 0)
            return i;
    if (ls->nnodes == MAX_NODES)
        return MAX_NODES - 1;
    snprintf(ls->nodes[ls->nnodes], sizeof ls->nodes[0], "%s", node);
    return ls->nnodes++;
}

static void note_key(void *arg, relock_key_class k, const char *key, size_t keylen)
{
    listing *ls = arg;
    if ((unsigned)k >= NCLASS)
        return;
    int node = node_index(ls);
    ls->per_node[node][k]++;
    if (!ls->store)
        return;
    keylist *kl = &ls->cls[k];
    if ((long)kl->n >= ls->limit || ls->nomem)
        return;
    if (!kl->keys && !(kl->keys = calloc((size_t)ls->limit, sizeof *kl->keys))) {
        ls->nomem = 1;
        return;
    }
    if (!kl->node && !(kl->node = calloc((size_t)ls->limit, sizeof *kl->node))) {
        ls->nomem = 1;
        return;
    }
    /* A key may hold NUL bytes: it is shown up to the first one. */
    char *copy = malloc(keylen + 1);
    if (!copy) {
        ls->nomem = 1;
        return;
    }
    memcpy(copy, key, keylen);
    copy[keylen] = '\0';
    kl->node[kl->n] = (unsigned char)node;
    kl->keys[kl->n++] = copy;
}

static void listing_free(listing *ls)
{
    for (int k = 0; k < NCLASS; k++) {
        for (size_t i = 0; i < ls->cls[k].n; i++)
            free(ls->cls[k].keys[i]);
        free(ls->cls[k].keys);
        free(ls->cls[k].node);
    }
}

/* How many keys the walk counted in class k. */
static long long class_count(const relock_scan_result *r, int k)
{
    switch ((relock_key_class)k) {
    case RELOCK_KEY_LEGACY:
        return relock_scan_result_count(r, RELOCK_SCAN_LEGACY);
    case RELOCK_KEY_BRIDGE:
        return relock_scan_result_count(r, RELOCK_SCAN_BRIDGE);
    case RELOCK_KEY_MODERN:
        return relock_scan_result_count(r, RELOCK_SCAN_MODERN);
    case RELOCK_KEY_STALE:
        return relock_scan_result_count(r, RELOCK_SCAN_STALE);
    case RELOCK_KEY_UNKNOWN:
        return relock_scan_result_count(r, RELOCK_SCAN_UNKNOWN);
    case RELOCK_KEY_OTHER_TYPE:
        return relock_scan_result_count(r, RELOCK_SCAN_OTHER_TYPES);
    }
    return 0;
}

/* The JSON names of the classes, those of "counts". */
static const char *const json_class[NCLASS] = {"legacy",  "bridge",  "modern",
                                              "stale",   "unknown", "other_types"};

static void print_json_keys(const relock_scan_result *r, const listing *ls)
{
    int truncated = 0;
    printf(",\"keys\":{");
    for (int k = 0; k < NCLASS; k++) {
        printf("%s\"%s\":[", k ? "," : "", json_class[k]);
        for (size_t i = 0; i < ls->cls[k].n; i++) {
            if (i)
                putchar(',');
            json_str(ls->cls[k].keys[i]);
        }
        putchar(']');
        if (class_count(r, k) > (long long)ls->cls[k].n)
            truncated = 1;
    }
    printf("},\"keys_limit\":%ld,\"keys_truncated\":%s", ls->limit,
           truncated ? "true" : "false");
    if (!relock_scan_result_cluster_masters(r))
        return;
    /* A cluster: the same keys again, by the master that holds them. */
    printf(",\"keys_by_node\":{");
    for (int i = 0; i < ls->nnodes; i++) {
        if (i)
            putchar(',');
        json_str(ls->nodes[i]);
        printf(":{");
        for (int k = 0; k < NCLASS; k++) {
            printf("%s\"%s\":[", k ? "," : "", json_class[k]);
            int first = 1;
            for (size_t j = 0; j < ls->cls[k].n; j++) {
                if (ls->cls[k].node[j] != i)
                    continue;
                if (!first)
                    putchar(',');
                first = 0;
                json_str(ls->cls[k].keys[j]);
            }
            putchar(']');
        }
        putchar('}');
    }
    putchar('}');
}

/* A key name on one line: a backslash and bytes that are not printable
 * ASCII are written as \\ and \xNN, so that every key is one line. */
static void text_key(const char *key)
{
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        if (*p == '\\')
            fputs("\\\\", stdout);
        else if (*p < 0x20 || *p >= 0x7f)
            printf("\\x%02x", *p);
        else
            putchar(*p);
    }
}

static void print_text_keys(const relock_scan_result *r, const listing *ls)
{
    static const char *const label[NCLASS] = {"  legacy:    ", "  bridge:    ", "  modern:    ",
                                              "  stale:     ", "  unknown:   ", "  other:     "};
    static const char pad[] = "             ";
    int any = 0;
    for (int k = 0; k < NCLASS; k++)
        any |= ls->cls[k].n > 0;
    printf("keys:        %s, at most %ld per class (--limit)\n",
           !any                                    ? "none"
           : relock_scan_result_cluster_masters(r) ? "by node, then class"
                                                   : "by class",
           ls->limit);
    /* A cluster: each master's keys under its address. */
    for (int i = 0; relock_scan_result_cluster_masters(r) && i < ls->nnodes; i++) {
        printf("  node %s\n", ls->nodes[i]);
        for (int k = 0; k < NCLASS; k++) {
            const keylist *kl = &ls->cls[k];
            int first = 1;
            for (size_t j = 0; j < kl->n; j++) {
                if (kl->node[j] != i)
                    continue;
                fputs(first ? label[k] : pad, stdout);
                first = 0;
                text_key(kl->keys[j]);
                putchar('\n');
            }
        }
    }
    for (int k = 0; relock_scan_result_cluster_masters(r) && k < NCLASS; k++) {
        long long more = class_count(r, k) - (long long)ls->cls[k].n;
        if (ls->cls[k].n > 0 && more > 0)
            printf("  %s: %lld more, not listed\n", relock_key_class_name((relock_key_class)k),
                   more);
    }
    for (int k = 0; !relock_scan_result_cluster_masters(r) && k < NCLASS; k++) {
        const keylist *kl = &ls->cls[k];
        for (size_t i = 0; i < kl->n; i++) {
            fputs(i ? pad : label[k], stdout);
            text_key(kl->keys[i]);
            putchar('\n');
        }
        long long more = class_count(r, k) - (long long)kl->n;
        if (kl->n > 0 && more > 0)
            printf("%s... and %lld more, not listed\n", pad, more);
    }
}

/* -v: the counts by node, and the walk's time. */
typedef struct detail {
    const listing *ls;
    long long walk_ms;
} detail;

static void print_json(const relock_scan_result *r, const listing *ls, const detail *v)
{
    printf("{\"match\":");
    json_str(relock_scan_result_match(r));
    printf(",\"method\":\"%s\",\"complete\":%s",
           relock_scan_result_keys_fallback(r) ? "keys" : "scan",
           relock_scan_result_complete(r) ? "true" : "false");
    printf(",\"cluster_masters\":%d", relock_scan_result_cluster_masters(r));
    printf(",\"counts\":{\"examined\":%lld,\"legacy\":%lld,\"bridge\":%lld,\"modern\":%lld,"
           "\"stale\":%lld,\"unknown\":%lld,\"skipped\":%lld,\"other_types\":%lld,"
           "\"gone\":%lld}",
           relock_scan_result_count(r, RELOCK_SCAN_EXAMINED),
           relock_scan_result_count(r, RELOCK_SCAN_LEGACY),
           relock_scan_result_count(r, RELOCK_SCAN_BRIDGE),
           relock_scan_result_count(r, RELOCK_SCAN_MODERN),
           relock_scan_result_count(r, RELOCK_SCAN_STALE),
           relock_scan_result_count(r, RELOCK_SCAN_UNKNOWN),
           relock_scan_result_count(r, RELOCK_SCAN_SKIPPED),
           relock_scan_result_count(r, RELOCK_SCAN_OTHER_TYPES),
           relock_scan_result_count(r, RELOCK_SCAN_GONE));
    printf(",\"legacy_example\":");
    if (*relock_scan_result_legacy_example(r, NULL))
        json_str(relock_scan_result_legacy_example(r, NULL));
    else
        printf("null");
    printf(",\"marker\":{\"key\":");
    json_str(relock_scan_result_marker_key(r));
    const char *state = relock_scan_result_marker_unreadable(r)     ? "unreadable"
                        : relock_scan_result_legacy_seen_ms(r) >= 0 ? "present"
                                                                    : "absent";
    printf(",\"state\":\"%s\"", state);
    if (relock_scan_result_legacy_seen_ms(r) >= 0)
        printf(",\"legacy_seen_ms\":%lld,\"age_ms\":%lld}", relock_scan_result_legacy_seen_ms(r),
               relock_scan_result_now_ms(r) - relock_scan_result_legacy_seen_ms(r));
    else
        printf(",\"legacy_seen_ms\":null,\"age_ms\":null}");
    printf(",\"quiet_window_ms\":%lld,\"now_ms\":%lld,\"verdict\":\"%s\",\"verdict_text\":",
           relock_scan_result_quiet_window_ms(r), relock_scan_result_now_ms(r),
           relock_scan_verdict_name(relock_scan_result_verdict(r)));
    json_str(relock_scan_result_verdict_text(r));
    if (relock_scan_result_watching_since_ms(r) >= 0)
        printf(",\"watching_since_ms\":%lld", relock_scan_result_watching_since_ms(r));
    else
        printf(",\"watching_since_ms\":null");
    printf(",\"signatures\":{");
    for (int i = 0; i < RELOCK_SIG_COUNT; i++)
        printf("%s\"%s\":%lld", i ? "," : "", relock_key_signature_name((relock_key_signature)i),
               relock_scan_result_signature(r, (relock_key_signature)i));
    printf("},\"families\":[");
    /* One string per family, as the text output's lines. */
    const char *f = relock_scan_result_families(r);
    for (int first = 1; *f; first = 0) {
        size_t n = strcspn(f, "\n");
        char *one = strndup(f, n);
        if (!first)
            putchar(',');
        json_str(one ? one : "");
        free(one);
        f += n + (f[n] == '\n');
    }
    printf("]");
    if (ls)
        print_json_keys(r, ls);
    if (v) {
        printf(",\"counts_by_node\":{");
        for (int i = 0; i < v->ls->nnodes; i++) {
            if (i)
                putchar(',');
            json_str(v->ls->nodes[i]);
            putchar(':');
            for (int k = 0; k < NCLASS; k++)
                printf("%s\"%s\":%lld", k ? "," : "{", json_class[k], v->ls->per_node[i][k]);
            putchar('}');
        }
        printf("},\"walk_ms\":%lld", v->walk_ms);
    }
    printf("}\n");
}

/* -v, in the text: the keys each node held by class, the signatures. */
static void print_text_detail(const relock_scan_result *r, const detail *v)
{
    printf("by node:     the keys counted on each server, by class (not relock's own keys "
           "nor keys gone)\n");
    if (v->ls->nnodes == 0)
        printf("  none\n");
    for (int i = 0; i < v->ls->nnodes; i++) {
        long long total = 0;
        for (int k = 0; k < NCLASS; k++)
            total += v->ls->per_node[i][k];
        printf("  %s  %lld keys:", v->ls->nodes[i], total);
        for (int k = 0; k < NCLASS; k++)
            printf("%s %s %lld", k ? "," : "", relock_key_class_name((relock_key_class)k),
                   v->ls->per_node[i][k]);
        putchar('\n');
    }
    printf("signatures:\n");
    for (int i = 0; i < RELOCK_SIG_COUNT; i++) {
        const char *name = relock_key_signature_name((relock_key_signature)i);
        printf("  %s:%*s%lld\n", name, (int)(14 - strlen(name)), "",
               relock_scan_result_signature(r, (relock_key_signature)i));
    }
    printf("walk:        %lld ms\n", v->walk_ms);
}

static void print_text(const relock_scan_result *r, const listing *ls, const detail *v)
{
    printf("match:       %s (%s)\n", relock_scan_result_match(r),
           relock_scan_result_keys_fallback(r) ? "KEYS: the server has no SCAN" : "SCAN");
    if (relock_scan_result_cluster_masters(r))
        printf("cluster:     every master walked (%d): the counts and the verdict cover the "
               "whole keyspace\n",
               relock_scan_result_cluster_masters(r));
    printf("examined:    %lld keys%s\n", relock_scan_result_count(r, RELOCK_SCAN_EXAMINED),
           relock_scan_result_complete(r) ? "" : " -- INCOMPLETE: the walk stopped at its bound");
    printf("  legacy:    %lld  live timestamp without TTL (a legacy client holds it)",
           relock_scan_result_count(r, RELOCK_SCAN_LEGACY));
    if (*relock_scan_result_legacy_example(r, NULL))
        printf(", e.g. %s", relock_scan_result_legacy_example(r, NULL));
    printf("\n");
    printf("  bridge:    %lld  timestamp with TTL\n",
           relock_scan_result_count(r, RELOCK_SCAN_BRIDGE));
    printf("  modern:    %lld  token with TTL\n", relock_scan_result_count(r, RELOCK_SCAN_MODERN));
    printf("  stale:     %lld  expired timestamp without TTL (dead legacy holder)\n",
           relock_scan_result_count(r, RELOCK_SCAN_STALE));
    printf("  unknown:   %lld  other values\n", relock_scan_result_count(r, RELOCK_SCAN_UNKNOWN));
    printf("  other:     %lld  not strings\n",
           relock_scan_result_count(r, RELOCK_SCAN_OTHER_TYPES));
    printf("  skipped:   %lld  relock's own keys (fence counters, markers)\n",
           relock_scan_result_count(r, RELOCK_SCAN_SKIPPED));
    if (relock_scan_result_count(r, RELOCK_SCAN_GONE))
        printf("  gone:      %lld  deleted while scanning\n",
               relock_scan_result_count(r, RELOCK_SCAN_GONE));
    if (v)
        print_text_detail(r, v);
    if (ls)
        print_text_keys(r, ls);
    if (relock_scan_result_marker_unreadable(r)) {
        printf("legacy seen: unknown (marker \"%s\" holds no time in ms)\n",
               relock_scan_result_marker_key(r));
    } else if (relock_scan_result_legacy_seen_ms(r) >= 0) {
        char when[64], age[32];
        fmt_time(relock_scan_result_legacy_seen_ms(r), when, sizeof when);
        relockx_format_duration(relock_scan_result_now_ms(r) - relock_scan_result_legacy_seen_ms(r),
                                age, sizeof age);
        printf("legacy seen: %s (%s %s)\n", when, age,
               relock_scan_result_now_ms(r) >= relock_scan_result_legacy_seen_ms(r)
                   ? "ago"
                   : "ahead of this clock");
    } else {
        printf("legacy seen: never (marker \"%s\" absent)\n", relock_scan_result_marker_key(r));
    }
    long long since = relock_scan_result_watching_since_ms(r);
    if (since >= 0) {
        char when[64], age[32];
        fmt_time(since, when, sizeof when);
        long long d = relock_scan_result_now_ms(r) - since;
        relockx_format_duration(d >= 0 ? d : -d, age, sizeof age);
        printf("watching:    since %s (%s %s)\n", when, age,
               d >= 0 ? "ago" : "ahead of this clock");
    } else {
        printf("watching:    not recorded (no upgraded client has yet said it watches)\n");
    }
    char window[32];
    relockx_format_duration(relock_scan_result_quiet_window_ms(r), window, sizeof window);
    printf("window:      %s (migration.quiet_window_ms = %lld)\n", window,
           relock_scan_result_quiet_window_ms(r));
    const char *fam = relock_scan_result_families(r);
    if (*fam) {
        printf("families:\n");
        for (const char *p = fam; *p;) {
            size_t n = strcspn(p, "\n");
            printf("  %.*s\n", (int)n, p);
            p += n + (p[n] == '\n');
        }
    }
    printf("verdict:     %s\n", relock_scan_result_verdict_text(r));
    if (relock_scan_result_verdict(r) == RELOCK_SCAN_INCOMPLETE)
        printf("             (--match narrows the pattern)\n");
}

relock_status cli_acquire_once(relock_client *c, const char *cmd, const char *name,
                               long long ttl_ms, long long wait_ms, relock_lock **l)
{
    if (wait_ms == 0 || relock_client_mode(c) != RELOCK_MODE_MODERN)
        return relock_acquire(c, name, ttl_ms, wait_ms, l);
    relock_status st = relock_acquire(c, name, ttl_ms, 0, l);
    if (st != RELOCK_BUSY)
        return st;
    const char *msg = relock_client_error(c)->message;
    if (strstr(msg, RELOCK_CLASSIC_HOLDER_NOTE))
        cli_error("%s: %s; waiting", cmd, msg);
    return relock_acquire(c, name, ttl_ms, wait_ms, l);
}

int cmd_scan(cli_ctx *ctx, int argc, char **argv)
{
    static const struct option longopts[] = {{"help", no_argument, NULL, 'h'},
                                             {"json", no_argument, NULL, 'J'},
                                             {"match", required_argument, NULL, 'M'},
                                             {"keys", no_argument, NULL, 'K'},
                                             {"limit", required_argument, NULL, 'L'},
                                             {"check", no_argument, NULL, 'C'},
                                             {"quiet", no_argument, NULL, 'q'},
                                             {"verbose", no_argument, NULL, 'v'},
                                             {NULL, 0, NULL, 0}};
    int json = 0, keys = 0, check = 0, quiet = 0, verbose = 0;
    const char *match = NULL;
    const char *limit_arg = NULL;
    static const char optstring[] = "+hqv";
    opterr = 0; /* our own one-line messages below */
    for (int guard = 0; guard <= argc; guard++) {
        int opt = getopt_long(argc, argv, optstring, longopts, NULL);
        if (opt == -1)
            break;
        switch (opt) {
        case 'J':
            json = 1;
            break;
        case 'K':
            keys = 1;
            break;
        case 'C':
            check = 1;
            break;
        case 'q':
            quiet = 1;
            break;
        case 'v':
            verbose = 1;
            break;
        case 'L':
            limit_arg = optarg;
            break;
        case 'M':
            if (!*optarg) {
                cli_error("scan: --match: empty pattern");
                return EXIT_USAGE;
            }
            match = optarg;
            break;
        case 'h':
            fputs(help_scan, stdout);
            return 0;
        default:
            cli_bad_option("scan", optstring, longopts, argv);
            return EXIT_USAGE;
        }
    }
    if (optind != argc) {
        cli_error("scan: unexpected argument \"%s\" (try relock scan --help)", argv[optind]);
        return EXIT_USAGE;
    }
    if (quiet && verbose) {
        cli_error("-q and -v exclude each other");
        return EXIT_USAGE;
    }
    if (quiet && keys) {
        cli_error("scan: --keys lists keys: not with -q, which prints nothing");
        return EXIT_USAGE;
    }
    listing ls;
    memset(&ls, 0, sizeof ls);
    ls.limit = LIMIT_DEFAULT;
    ls.store = keys;
    if (limit_arg) {
        char *end = NULL;
        errno = 0;
        long n = strtol(limit_arg, &end, 10);
        if (!*limit_arg || *end || errno || n < 1 || n > LIMIT_MAX) {
            cli_error("scan: --limit: '%s' is not a number of keys from 1 to %ld", limit_arg,
                      LIMIT_MAX);
            return EXIT_USAGE;
        }
        if (!keys) {
            cli_error("scan: --limit needs --keys: it bounds the keys listed");
            return EXIT_USAGE;
        }
        ls.limit = n;
    }
    relock_client *c = NULL;
    relock_status st = relock_connect(ctx->cfg, &c);
    /* A mode the server refuses does not stop a read-only audit: the audit
     * is what tells whether another mode is safe. */
    if (st != RELOCK_OK && st != RELOCK_EUNSUPPORTED) {
        int code = cli_fail(c, st, "scan");
        relock_client_free(c);
        return code;
    }
    relock_scan_result *res = NULL;
    ls.c = c;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    st = relock_scan_keys(c, match, keys || verbose ? note_key : NULL, &ls, &res);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    detail more = {&ls, (long long)(t1.tv_sec - t0.tv_sec) * 1000 +
                         (t1.tv_nsec - t0.tv_nsec) / 1000000};
    if (st == RELOCK_OK && ls.nomem) {
        cli_error("scan: out of memory listing the keys (try a smaller --limit)");
        relock_scan_result_free(res);
        listing_free(&ls);
        relock_client_free(c);
        return EXIT_SERVER;
    }
    /* One server without a key is still a server walked: -v shows it
     * with its zeros (in a Cluster, which masters held none is unknown
     * here). */
    if (st == RELOCK_OK && verbose && ls.nnodes == 0 && !relock_scan_result_cluster_masters(res) &&
        relock_scan_node(c)[0])
        node_index(&ls);
    if (st != RELOCK_OK) {
        int code = cli_fail(c, st, "scan");
        relock_scan_result_free(res);
        listing_free(&ls);
        relock_client_free(c);
        /* A server that cannot be walked safely is a server problem, not
         * a usage error. */
        return st == RELOCK_EUNSUPPORTED ? EXIT_SERVER : code;
    }
    /* -q: the verdict's exit status alone, as inspect -q answers with
     * its exit status alone. */
    if (quiet)
        check = 1;
    else if (json)
        print_json(res, keys ? &ls : NULL, verbose ? &more : NULL);
    else
        print_text(res, keys ? &ls : NULL, verbose ? &more : NULL);
    relock_scan_verdict v = relock_scan_result_verdict(res);
    relock_scan_result_free(res);
    listing_free(&ls);
    relock_client_free(c);
    if (!check)
        return 0;
    /* For monitoring: live or recent legacy writers are the emergency of
     * a fleet in modern mode (docs/migration.md). */
    return v == RELOCK_SCAN_MODERN_SAFE ? 0 : v == RELOCK_SCAN_STAY_BRIDGE ? EXIT_LOST : 1;
}
