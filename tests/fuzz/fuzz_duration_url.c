/*
 * fuzz_duration_url: the two small parsers of user text,
 * relockx_parse_duration() (src/relockx.c, shared by the library and the
 * CLI) and relock__parse_url(), on the input as a C string.
 *
 * Durations are checked against a reference reading of DESIGN §8 ("500ms",
 * "30s", "5m", plain milliseconds; the CLI also takes "h"): digits, then
 * one of the units, and a result that fits a long.  URLs: on success the
 * port is 1-65535, the host non-empty, the db 0-1000000, every field
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

/* The reference: 0 and *ms, or -1. */
static int ref_duration(const char *s, long *ms)
{
    const char *p = s;
    unsigned long long n = 0;
    int over = 0;
    while (*p >= '0' && *p <= '9') {
        if (n > (ULLONG_MAX - 9) / 10)
            over = 1;
        else
            n = n * 10 + (unsigned)(*p - '0');
        p++;
    }
    if (p == s)
        return -1;
    static const struct {
        const char *suffix;
        unsigned long long factor;
    } units[] = {{"", 1}, {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(p, units[i].suffix) != 0)
            continue;
        if (over || n > (unsigned long long)LONG_MAX / units[i].factor)
            return -1;
        *ms = (long)(n * units[i].factor);
        return 0;
    }
    return -1;
}

static void fuzz_duration(const char *s)
{
    long ms = -12345, want = -54321;
    char why[128];
    why[0] = '\0';
    int rc = relockx_parse_duration(s, &ms, why, sizeof why);
    int ref = ref_duration(s, &want);
    FZ_CHECK_MSG(rc == 0 || rc == -1, "rc %d", rc);
    FZ_CHECK_MSG(rc == ref, "\"%.60s\": parser says %d, reference %d", s, rc, ref);
    if (rc == 0) {
        FZ_CHECK_MSG(ms >= 0, "\"%.60s\" -> %ld ms", s, ms);
        FZ_CHECK_MSG(ms == want, "\"%.60s\" -> %ld ms, reference %ld", s, ms, want);
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
