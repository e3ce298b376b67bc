/* Durations as people write and read them (see relockx.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relockx.h"

/* The units of a duration in ms, largest first: a compound duration gives
 * each at most once, in this order ("1h30m", "1m30.5s"). */
static const unsigned long long factor[] = {604800000ULL, 86400000ULL, 3600000ULL,
                                            60000ULL,     1000ULL,     1ULL};
#define UNIT_S 4 /* factor[UNIT_S] is a second */

/* The spellings of each unit: the first six in the order above, then
 * others as systemd writes time spans (systemd.time(7)): "5min", "30sec",
 * "2hours".  "m" is minutes, as there; months and years are not taken. */
static const struct {
    const char *suffix;
    int unit; /* index in factor */
} spellings[] = {{"w", 0},       {"d", 1},      {"h", 2},       {"m", 3},      {"s", 4},
                 {"ms", 5},      {"weeks", 0},  {"week", 0},    {"days", 1},   {"day", 1},
                 {"hours", 2},   {"hour", 2},   {"hr", 2},      {"minutes", 3}, {"minute", 3},
                 {"min", 3},     {"seconds", 4}, {"second", 4}, {"sec", 4},     {"msec", 5}};

/* The unit at p, its longest spelling ("ms" before "m", "min" before
 * "m"), not followed by a letter; its index, or -1. */
static int unit_at(const char *p, size_t *len)
{
    int best = -1;
    size_t best_len = 0;
    for (size_t i = 0; i < sizeof spellings / sizeof spellings[0]; i++) {
        size_t n = strlen(spellings[i].suffix);
        if (strncmp(p, spellings[i].suffix, n) == 0 && n > best_len &&
            !(p[n] >= 'a' && p[n] <= 'z')) {
            best = spellings[i].unit;
            best_len = n;
        }
    }
    *len = best_len;
    return best;
}

int relockx_parse_duration(const char *s, long long *ms, char *why, size_t whylen)
{
    static const char hint[] = "a number of seconds, or e.g. 1.5s, 250ms, 1m30s";
    if (!s || !*s) {
        snprintf(why, whylen, "empty duration (%s)", hint);
        return -1;
    }
    unsigned long long total = 0;
    int last = -1; /* the unit of the previous part */
    const char *p = s;
    while (*p) {
        /* One part: digits, an optional fraction, a unit. */
        const char *num = p;
        unsigned long long ip = 0, frac = 0, den = 1;
        int digits = 0;
        for (; *p >= '0' && *p <= '9'; p++, digits++) {
            ip = ip * 10 + (unsigned long long)(*p - '0');
            if (ip > 1000000000000000ULL) { /* 10^15: beyond any unit's use */
                snprintf(why, whylen, "\"%.32s\" is too large", s);
                return -1;
            }
        }
        if (*p == '.') {
            p++;
            for (; *p >= '0' && *p <= '9'; p++, digits++)
                if (den < 1000000000ULL) { /* finer than a nanosecond: dropped */
                    frac = frac * 10 + (unsigned long long)(*p - '0');
                    den *= 10;
                }
        }
        if (digits == 0) {
            snprintf(why, whylen, "\"%.32s\" is not a duration (%s)", s, hint);
            return -1;
        }
        size_t ulen = 0;
        int u = unit_at(p, &ulen);
        if (u < 0 && *p == '\0' && p == s + strlen(s) && num == s) {
            u = UNIT_S; /* a plain number is seconds, as for sleep(1) and timeout(1) */
        } else if (u < 0) {
            if (*p == '\0')
                snprintf(why, whylen, "\"%.32s\": a unit is needed after %.*s", s,
                         (int)(p - num), num);
            else
                snprintf(why, whylen,
                         "\"%.32s\": unknown unit \"%.8s\" (use ms, s, m, h, d or w, or "
                         "msec, sec, min, hr, day, week)",
                         s, p);
            return -1;
        }
        if (u <= last) {
            snprintf(why, whylen,
                     "\"%.32s\": units must go from larger to smaller, each once (1h30m, 1m30s)",
                     s);
            return -1;
        }
        last = u;
        p += ulen;
        unsigned long long f = factor[u];
        /* The fraction in ms, rounded up: a nonzero duration never
         * becomes 0.  Beyond LLONG_MAX, the part is as large as can be. */
        unsigned long long part = ip <= (unsigned long long)LLONG_MAX / f
                                      ? ip * f + (frac * f + den - 1) / den
                                      : ULLONG_MAX;
        if (part > (unsigned long long)LLONG_MAX - total) {
            snprintf(why, whylen, "\"%.32s\" is too large", s);
            return -1;
        }
        total += part;
    }
    *ms = (long long)total;
    return 0;
}

void relockx_format_duration(long long ms, char *buf, size_t len)
{
    if (ms < 0)
        ms = -ms;
    /* The largest unit from days down that fits, and the next one below it
     * unless 0; seconds alone. */
    for (int i = 1; i <= UNIT_S; i++) {
        long long size = (long long)factor[i];
        if (ms < size)
            continue;
        long long next = i < UNIT_S ? ms % size / (long long)factor[i + 1] : 0;
        if (next)
            snprintf(buf, len, "%lld%s %lld%s", ms / size, spellings[i].suffix, next,
                     spellings[i + 1].suffix);
        else
            snprintf(buf, len, "%lld%s", ms / size, spellings[i].suffix);
        return;
    }
    snprintf(buf, len, "%lldms", ms);
}
