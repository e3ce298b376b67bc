/* Status codes, their names and messages, and the per-handle error detail. */
#include <stdio.h>
#include <string.h>

#include "base.h"

const char *relock_strerror(relock_status st)
{
    switch (st) {
#define RELOCK_X_MSG(name, value, msg)                                                       \
    case RELOCK_##name:                                                                      \
        return msg;
        RELOCK_STATUS_MAP(RELOCK_X_MSG)
#undef RELOCK_X_MSG
    }
    return "unknown status code";
}

const char *relock_status_name(relock_status st)
{
    switch (st) {
#define RELOCK_X_NAME(name, value, msg)                                                      \
    case RELOCK_##name:                                                                      \
        return "RELOCK_" #name;
        RELOCK_STATUS_MAP(RELOCK_X_NAME)
#undef RELOCK_X_NAME
    }
    return "RELOCK_UNKNOWN";
}

const char *relock_version(void)
{
    return RELOCK_VERSION_STRING;
}

const char *relock_mode_name(relock_mode m)
{
    static const char *const names[] = {
        [RELOCK_MODE_AUTO] = "auto", [RELOCK_MODE_LEGACY] = "legacy",
        [RELOCK_MODE_BRIDGE] = "bridge", [RELOCK_MODE_MODERN] = "modern"};
    return (unsigned)m < sizeof names / sizeof names[0] ? names[m] : "unknown";
}

/* What relock_client_error() and relock_config_error() return for a NULL
 * handle: a misuse, stated, rather than a crash. */
const relock_error relock__null_handle_error = {
    RELOCK_EINVAL, "no handle: the handle passed is NULL", "", "", 0,
};

void relock__err_clear(relock__err *e)
{
    e->msg[0] = '\0';
    e->server[0] = '\0';
    e->pub = (relock_error){.status = RELOCK_OK, .message = e->msg, .server = e->server,
                            .file = ""};
}

void relock__err_copy(relock__err *dst, const relock__err *src)
{
    if (dst != src)
        *dst = *src;
    dst->pub.message = dst->msg; /* into dst's own buffers, not src's */
    dst->pub.server = dst->server;
}

relock_status relock__err_set(relock__err *e, relock_status st, const char *file, int line,
                              const char *server, const char *fmt, ...)
{
    if (e->pub.status != RELOCK_OK)
        return st; /* keep the first, most precise error of this call */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    snprintf(e->server, sizeof e->server, "%s", server ? server : "");
    const char *base = strrchr(file, '/');
    e->pub = (relock_error){.status = st, .message = e->msg, .server = e->server,
                            .file = base ? base + 1 : file, .line = line};
    return st;
}

int relock__reason(char *why, size_t whylen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
    return -1;
}
