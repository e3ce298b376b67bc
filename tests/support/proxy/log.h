/*
 * log: one-line messages on stderr, "relock-compat-proxy: <what>: <why>".
 * Each message goes out in a single write() so that lines from different
 * connection threads never interleave.
 */
#ifndef RELOCK_PROXY_LOG_H
#define RELOCK_PROXY_LOG_H

#if defined(__GNUC__)
#define PROXY_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define PROXY_PRINTF(a, b)
#endif

void proxy_log(const char *fmt, ...) PROXY_PRINTF(1, 2);

#endif
