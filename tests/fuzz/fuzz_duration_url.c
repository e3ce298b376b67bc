/*
 * fuzz_duration_url: the two small parsers of user text,
 * relockx_parse_duration() (src/base/relockx.c, shared by the library and the
 * CLI) and relock__parse_url(), on the input as a C string.
 *
 * Durations are checked against a reference reading of design.md §12.2 (a
 * plain number is seconds; "250ms", "1.5s", "1m30s"; see ref_duration).
 * URLs: on success the
 * port is 1-65535 (a unix socket: port 0 and an absolute path), the host non-empty, the db 0-1000000, every field
 * terminated, and relock_config_set_url() agrees.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "internal.h"
#include "relockx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * The reference: 0 and *ms, or -1.  The grammar of design.md §12.2 as the CLI
 * takes it: one or more parts, each digits with an optional fraction
 * (".5", "5.", "1.25") and a unit of w, d, h, m, s, ms or one of systemd's
 * spellings of them (week, day, hr, min, sec, msec...), each unit at most once
 * and larger units first; a whole input that is one number without a unit
 * is seconds.  A part's integer may be at most 10^15; fraction digits past
 * the ninth are dropped, and the fraction of each part rounds up to a whole
 * millisecond; the sum must fit a long long.  Computed exactly in 128 bits.
 */
static int ref_duration(const char *s, long long *ms)
{
    /* Each unit in order, with systemd's spellings of it (systemd.time(7)). */
    static const struct {
        const char *suffix[6];
        unsigned long long factor;
    } units[] = {{{"w", "week", "weeks"}, 604800000ULL},
                 {{"d", "day", "days"}, 86400000ULL},
                 {{"h", "hr", "hour", "hours"}, 3600000ULL},
                 {{"m", "min", "minute", "minutes"}, 60000ULL},
                 {{"s", "sec", "second", "seconds"}, 1000ULL},
                 {{"ms", "msec"}, 1ULL}};
    const size_t nunits = sizeof units / sizeof units[0];
    const char *p = s;
    unsigned __int128 total = 0;
    size_t next = 0; /* the first unit still allowed */
    int parts = 0;
    if (*p == '\0')
        return -1;
    while (*p) {
        size_t ilen = strspn(p, "0123456789");
        const char *ipart = p;
        p += ilen;
        const char *fpart = p;
        size_t flen = 0;
        if (*p == '.') {
            fpart = ++p;
            flen = strspn(p, "0123456789");
            p += flen;
        }
        if (ilen + flen == 0)
            return -1;
        unsigned __int128 ip = 0;
        for (size_t i = 0; i < ilen; i++) {
            ip = ip * 10 + (unsigned)(ipart[i] - '0');
            if (ip > 1000000000000000ULL)
                return -1;
        }
        unsigned long long frac = 0, den = 1;
        for (size_t i = 0; i < flen && i < 9; i++) {
            frac = frac * 10 + (unsigned)(fpart[i] - '0');
            den *= 10;
        }
        /* The unit: the longest spelling that matches ("ms" before "m",
         * "min" before "m") and is not followed by a letter. */
        size_t u = nunits, ulen = 0;
        for (size_t i = 0; i < nunits; i++)
            for (size_t k = 0; k < 6 && units[i].suffix[k]; k++) {
                size_t n = strlen(units[i].suffix[k]);
                if (strncmp(p, units[i].suffix[k], n) == 0 && n > ulen &&
                    !(p[n] >= 'a' && p[n] <= 'z')) {
                    u = i;
                    ulen = n;
                }
            }
        if (u == nunits) {
            if (*p != '\0' || parts > 0)
                return -1;
            u = 4; /* the whole input is one number: seconds */
        }
        if (u < next)
            return -1;
        next = u + 1;
        p += ulen;
        parts++;
        unsigned __int128 f = units[u].factor;
        total += ip * f + (frac * f + den - 1) / den;
        if (total > (unsigned __int128)LLONG_MAX)
            return -1;
    }
    *ms = (long long)total;
    return 0;
}

static void fuzz_duration(const char *s)
{
    long long ms = -12345, want = -54321;
    char why[128];
    why[0] = '\0';
    int rc = relockx_parse_duration(s, &ms, why, sizeof why);
    int ref = ref_duration(s, &want);
    FZ_CHECK_MSG(rc == 0 || rc == -1, "rc %d", rc);
    FZ_CHECK_MSG(rc == ref, "\"%.60s\": parser says %d, reference %d", s, rc, ref);
    if (rc == 0) {
        FZ_CHECK_MSG(ms >= 0, "\"%.60s\" -> %lld ms", s, ms);
        FZ_CHECK_MSG(ms == want, "\"%.60s\" -> %lld ms, reference %lld", s, ms, want);
    } else {
        FZ_CHECK(why[0] != '\0' && memchr(why, '\0', sizeof why));
        FZ_CHECK(ms == -12345); /* not written on failure */
    }
}

static void fuzz_url(const char *s)
{
    relock__server srv;
    char why[160];
    why[0] = '\0';
    int rc = relock__parse_url(s, &srv, why, sizeof why);
    FZ_CHECK(rc == 0 || rc == -1);
    relock_config *cfg = relock_config_new();
    FZ_CHECK(cfg);
    relock_status st = relock_config_set_url(cfg, s);
    FZ_CHECK((rc == 0) == (st == RELOCK_OK));
    if (rc != 0) {
        FZ_CHECK(why[0] != '\0');
        FZ_CHECK(strlen(relock_config_error(cfg)->message) > 0);
        relock_config_free(cfg);
        return;
    }
    /* TCP: a port 1-65535; a unix socket: an absolute path of at most 107
     * bytes and port 0. */
    if (strncmp(s, "unix://", 7) == 0)
        FZ_CHECK_MSG(srv.port == 0 && srv.host[0] == '/' && strlen(srv.host) <= 107,
                     "\"%.80s\": port %d, path \"%.40s\"", s, srv.port, srv.host);
    else
        FZ_CHECK_MSG(srv.port >= 1 && srv.port <= 65535, "\"%.80s\": port %d", s, srv.port);
    FZ_CHECK(memchr(srv.host, '\0', sizeof srv.host) != NULL);
    FZ_CHECK_MSG(srv.host[0] != '\0', "\"%.80s\": empty host", s);
    FZ_CHECK(memchr(srv.username, '\0', sizeof srv.username) != NULL);
    FZ_CHECK(memchr(srv.password, '\0', sizeof srv.password) != NULL);
    FZ_CHECK_MSG(srv.db >= 0 && srv.db <= 1000000, "\"%.80s\": db %d", s, srv.db);
    /* The configuration took exactly that one server. */
    FZ_CHECK(cfg->s.nservers == 1);
    FZ_CHECK(memcmp(&cfg->s.servers[0], &srv, sizeof srv) == 0);
    relock_config_free(cfg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    FZ_CHECK(s);
    memcpy(s, data, size);
    s[size] = '\0';
    fuzz_duration(s);
    fuzz_url(s);
    free(s);
    return 0;
}
