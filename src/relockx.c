/* Durations as people write and read them (see relockx.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relockx.h"

int relockx_parse_duration(const char *s, long *ms, char *why, size_t whylen)
{
    if (!s || !*s) {
        snprintf(why, whylen, "empty duration");
        return -1;
    }
    if (*s < '0' || *s > '9') {
        snprintf(why, whylen, "\"%.32s\" is not a duration (expected e.g. 500ms, 30s, 5m)", s);
        return -1;
    }
    errno = 0;
    char *end = NULL;
    unsigned long long n = strtoull(s, &end, 10);
    if (errno == ERANGE) {
        snprintf(why, whylen, "\"%.32s\" is too large", s);
        return -1;
    }
    static const struct {
        const char *suffix;
        unsigned long long factor;
    } units[] = {{"", 1}, {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].suffix) != 0)
            continue;
        if (n > (unsigned long long)LONG_MAX / units[i].factor) {
            snprintf(why, whylen, "\"%.32s\" is too large", s);
            return -1;
        }
        *ms = (long)(n * units[i].factor);
        return 0;
    }
    snprintf(why, whylen, "\"%.32s\": unknown unit \"%.8s\" (use ms, s, m or h)", s, end);
    return -1;
}

void relockx_format_duration(long long ms, char *buf, size_t len)
{
    if (ms < 0)
        ms = -ms;
    long long s = ms / 1000, m = s / 60, h = m / 60, d = h / 24;
    if (d > 0 && h % 24)
        snprintf(buf, len, "%lldd %lldh", d, h % 24);
    else if (d > 0)
        snprintf(buf, len, "%lldd", d);
    else if (h > 0 && m % 60)
        snprintf(buf, len, "%lldh %lldm", h, m % 60);
    else if (h > 0)
        snprintf(buf, len, "%lldh", h);
    else if (m > 0 && s % 60)
        snprintf(buf, len, "%lldm %llds", m, s % 60);
    else if (m > 0)
        snprintf(buf, len, "%lldm", m);
    else if (s > 0)
        snprintf(buf, len, "%llds", s);
    else
        snprintf(buf, len, "%lldms", ms);
}
