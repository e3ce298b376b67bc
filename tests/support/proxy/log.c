/*
 * log: stderr messages (see log.h).
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

void proxy_log(const char *fmt, ...)
{
    char line[512];
    int len = snprintf(line, sizeof(line), "relock-compat-proxy: ");
    int more;
    va_list ap;

    va_start(ap, fmt);
    more = vsnprintf(line + len, sizeof(line) - (size_t)len - 1, fmt, ap);
    va_end(ap);
    if (more < 0)
        more = 0;
    len += more;
    if ((size_t)len > sizeof(line) - 2)
        len = (int)sizeof(line) - 2;
    line[len++] = '\n';
    /* A failed write to stderr has nowhere else to be reported. */
    if (write(STDERR_FILENO, line, (size_t)len) < 0)
        return;
}
