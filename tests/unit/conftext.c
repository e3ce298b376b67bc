/* Loading configuration text in the unit tests (see conftext.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "conftext.h"

relock_status load_text(const char *text, relock_config *cfg, char *path, size_t plen)
{
    snprintf(path, plen, "/tmp/relock-conf-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    ssize_t n = write(fd, text, strlen(text));
    assert_int_equal((size_t)n, strlen(text));
    close(fd);
    relock_status st = relock_config_load_file(cfg, path);
    unlink(path);
    return st;
}

void refused(const char *text, int line, const char *part)
{
    relock_config *cfg = relock_config_new();
    char path[64];
    assert_int_equal(load_text(text, cfg, path, sizeof path), RELOCK_ECONFIG);
    char want[128];
    snprintf(want, sizeof want, "%s:%d: ", path, line);
    const char *msg = relock_config_error(cfg)->message;
    if (strncmp(msg, want, strlen(want)) != 0 || !strstr(msg, part))
        fail_msg("message \"%s\" lacks \"%s\" or \"%s\"", msg, want, part);
    relock_config_free(cfg);
}
