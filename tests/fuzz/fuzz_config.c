/*
 * fuzz_config: the libconfig file loader and relock_config_set().
 *
 * The input is loaded as a configuration file (through a memfd, named by
 * its /proc/self/fd path: the loader only takes paths), then read again
 * line by line as "name=value" settings for relock_config_set(), and
 * "url=..." lines for relock_config_set_url().
 *
 * Invariants: the loader returns OK or ECONFIG, and its message names the
 * file ("FILE:LINE: reason", design.md §11); a configuration that was accepted
 * holds only values in range (design.md §11 refuses, never clamps); a refused
 * relock_config_set() or relock_config_set_url() leaves the configuration
 * exactly as it was.
 *
 * Inputs containing "@include" are skipped: libconfig would open whatever
 * file they name, which makes the run depend on the machine.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "internal.h"

#define YEAR_MS 31536000000LL

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__lsan_default_suppressions(void);

/* libconfig 1.5 (Debian 12) leaks the text of a string token when the
 * parser stops at a syntax error after it (the inputs `""` and
 * `a = "b" c"d"` show it with libconfig alone): not relock's to fix, and
 * it would hide every other finding.  Only the lexer's allocations are
 * suppressed: settings a missing config_destroy() leaked would still
 * show. */
const char *__lsan_default_suppressions(void)
{
    return "leak:libconfig_yylex\nleak:strbuf_append\n";
}

static int nul_within(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

static int is_bool(int v)
{
    return v == 0 || v == 1;
}

/* Every value of an accepted configuration is within its range. */
static void check_settings(const relock__settings *s)
{
    FZ_CHECK(s->mode >= RELOCK_MODE_AUTO && s->mode <= RELOCK_MODE_MODERN);
    FZ_CHECK(nul_within(s->key_prefix, sizeof s->key_prefix));
    for (const char *p = s->key_prefix; *p; p++)
        FZ_CHECK_MSG((unsigned char)*p > ' ' && *p != 0x7f, "key_prefix byte 0x%02x",
                     (unsigned char)*p);
    FZ_CHECK_MSG(s->ttl_ms >= 1 && s->ttl_ms <= YEAR_MS, "ttl_ms %lld", s->ttl_ms);
    FZ_CHECK_MSG(s->nservers >= 1 && s->nservers <= RELOCK__MAX_SERVERS, "nservers %d",
                 s->nservers);
    for (int i = 0; i < s->nservers; i++) {
        const relock__server *srv = &s->servers[i];
        FZ_CHECK(nul_within(srv->host, sizeof srv->host) && srv->host[0]);
        FZ_CHECK(nul_within(srv->username, sizeof srv->username));
        FZ_CHECK(nul_within(srv->password, sizeof srv->password));
        /* TCP: a port 1-65535; a unix socket (unix:// or path): port 0 and an
         * absolute path of at most 107 bytes. */
        if (srv->port == 0)
            FZ_CHECK_MSG(srv->host[0] == '/' && strlen(srv->host) <= 107, "socket \"%.40s\"",
                         srv->host);
        else
            FZ_CHECK_MSG(srv->port >= 1 && srv->port <= 65535, "port %d", srv->port);
        FZ_CHECK_MSG(srv->db >= 0 && srv->db <= 1000000, "db %d", srv->db);
    }
    FZ_CHECK(s->connect_timeout_ms >= 1 && s->connect_timeout_ms <= 3600000);
    FZ_CHECK(s->command_timeout_ms >= 1 && s->command_timeout_ms <= 3600000);
    FZ_CHECK(s->wait.max_ms >= -1 && s->wait.max_ms <= YEAR_MS);
    FZ_CHECK(s->wait.backoff_min_ms >= 1 && s->wait.backoff_min_ms <= 3600000);
    FZ_CHECK(s->wait.backoff_max_ms >= 1 && s->wait.backoff_max_ms <= 3600000);
    FZ_CHECK_MSG(s->wait.backoff_min_ms <= s->wait.backoff_max_ms, "backoff %lld > %lld",
                 s->wait.backoff_min_ms, s->wait.backoff_max_ms);
    FZ_CHECK(is_bool(s->wait.notify) && is_bool(s->fencing));
    FZ_CHECK(is_bool(s->legacy.unit_ms) && is_bool(s->legacy.gc_expire) &&
             is_bool(s->legacy.clock_server));
    FZ_CHECK(s->legacy.expiry_offset >= 0 && s->legacy.expiry_offset <= 1000000);
    FZ_CHECK(s->legacy.skew_margin_ms >= 0 && s->legacy.skew_margin_ms <= 3600000);
    FZ_CHECK(is_bool(s->bridge.value_suffix) && is_bool(s->migration.legacy_clients));
    FZ_CHECK(s->migration.quiet_window_ms >= 0 && s->migration.quiet_window_ms <= 100 * YEAR_MS);
}

static void check_error(const relock_config *cfg, relock_status st)
{
    const relock_error *e = relock_config_error(cfg);
    FZ_CHECK(e && e->message && e->server && e->file);
    FZ_CHECK(strlen(e->message) < 512);
    if (st == RELOCK_OK)
        FZ_CHECK(e->status == RELOCK_OK);
    else
        FZ_CHECK_MSG(e->status == st && e->message[0], "status %s, detail %s \"%s\"",
                     relock_status_name(st), relock_status_name(e->status), e->message);
}

/* Feeds "name=value" lines to relock_config_set() ("url=" lines to
 * relock_config_set_url()). */
static void set_lines(relock_config *cfg, const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    FZ_CHECK(text);
    memcpy(text, data, size);
    text[size] = '\0';
    char *line = text;
    /* Lines end at '\n' (or at a NUL byte: the C strings of the API do). */
    for (int n = 0; n < 64 && line < text + size; n++) {
        char *end = line + strcspn(line, "\n");
        int last = *end == '\0';
        *end = '\0';
        char *eq = strchr(line, '=');
        if (eq) {
            *eq = '\0';
            relock__settings before = cfg->s;
            relock_status st = strcmp(line, "url") == 0 ? relock_config_set_url(cfg, eq + 1)
                                                        : relock_config_set(cfg, line, eq + 1);
            FZ_CHECK(st == RELOCK_OK || st == RELOCK_ECONFIG || st == RELOCK_EINVAL);
            check_error(cfg, st);
            if (st == RELOCK_OK)
                check_settings(&cfg->s);
            else
                FZ_CHECK_MSG(memcmp(&before, &cfg->s, sizeof before) == 0,
                             "a refused setting \"%s\" changed the configuration", line);
        }
        if (last && end >= text + size)
            break;
        line = end + 1;
    }
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (memmem(data, size, "@include", 8))
        return 0;
    static int fd = -1;
    if (fd < 0) {
        fd = memfd_create("fuzz_config", MFD_CLOEXEC);
        FZ_CHECK(fd >= 0);
    }
    FZ_CHECK(ftruncate(fd, 0) == 0);
    FZ_CHECK(size == 0 || pwrite(fd, data, size, 0) == (ssize_t)size);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);

    relock_config *cfg = relock_config_new();
    FZ_CHECK(cfg);
    check_settings(&cfg->s); /* the defaults too */
    relock_status st = relock_config_load_file(cfg, path);
    FZ_CHECK_MSG(st == RELOCK_OK || st == RELOCK_ECONFIG, "load returned %s",
                 relock_status_name(st));
    check_error(cfg, st);
    if (st == RELOCK_OK) {
        check_settings(&cfg->s);
    } else {
        /* "FILE:LINE: reason" */
        const char *msg = relock_config_error(cfg)->message;
        size_t plen = strlen(path);
        FZ_CHECK_MSG(strncmp(msg, path, plen) == 0 && msg[plen] == ':', "message \"%s\"", msg);
        /* A refused file may leave the configuration half-changed: go on
         * from the defaults. */
        relock_config_free(cfg);
        cfg = relock_config_new();
        FZ_CHECK(cfg);
    }
    set_lines(cfg, data, size);
    relock_config_free(cfg);
    return 0;
}
